//! [`AfXdpQueues`]: one thread's `AF_XDP` sockets of one interface, a
//! socket per receive queue the thread serves, as one [`Port`].

use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;

use super::program::XdpProgram;
use super::socket::{invalid, AfXdpConfig, AfXdpPort};
use crate::{Port, PortStats, RxMeta};

/// One interface's AF_XDP sockets for one thread: a socket per receive
/// queue the thread serves, all registered in one [`XdpProgram`].
///
/// A frame can only reach the socket bound to the queue it arrived on, so
/// every queue of the interface must have a socket somewhere, or the
/// program passes that queue's frames to the kernel stack. With `n`
/// threads each takes the queues `i, i + n, i + 2n, ...`
/// ([`AfXdpQueues::open`]). Receive takes from the sockets in turn,
/// starting after the one that went first last time (none starves);
/// transmit goes through the first socket (any socket may send on its
/// interface).
pub struct AfXdpQueues {
    ports: Vec<AfXdpPort>,
    /// Socket to read first next time.
    next: usize,
}

impl AfXdpQueues {
    /// Open `cfg.ifname`'s queues `queues` (`cfg.queue_id` is ignored),
    /// each registered in `program`. At least one queue.
    pub fn open(
        cfg: &AfXdpConfig,
        program: &Arc<XdpProgram>,
        queues: &[u32],
    ) -> io::Result<AfXdpQueues> {
        if queues.is_empty() {
            return Err(invalid("an AF_XDP port needs at least one queue"));
        }
        let mut ports = Vec::with_capacity(queues.len());
        for &q in queues {
            let mut c = cfg.clone();
            c.queue_id = q;
            ports.push(AfXdpPort::open_with(&c, program.clone())?);
        }
        Ok(AfXdpQueues { ports, next: 0 })
    }

    /// The queues `thread` of `threads` serves among `queues`: `thread`,
    /// `thread + threads`, ... (empty when there are fewer queues than
    /// threads and this thread gets none).
    pub fn share(queues: u32, thread: usize, threads: usize) -> Vec<u32> {
        (0..queues)
            .filter(|&q| q as usize % threads.max(1) == thread)
            .collect()
    }

    /// The sockets, by queue.
    pub fn sockets(&self) -> &[AfXdpPort] {
        &self.ports
    }
}

impl Port for AfXdpQueues {
    fn name(&self) -> &str {
        // Non-empty by construction.
        self.ports[0].name()
    }

    fn recv(&mut self, max: usize, on_frame: &mut dyn FnMut(&[u8], RxMeta)) -> io::Result<usize> {
        let n_ports = self.ports.len();
        let mut got = 0;
        for k in 0..n_ports {
            if got >= max {
                break;
            }
            let i = (self.next + k) % n_ports;
            got += self.ports[i].recv(max - got, on_frame)?;
        }
        self.next = (self.next + 1) % n_ports;
        Ok(got)
    }

    fn send(&mut self, frame: &[u8]) -> bool {
        self.ports[0].send(frame)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.ports[0].flush()
    }

    fn tx_outstanding(&self) -> bool {
        self.ports[0].tx_outstanding()
    }

    fn poll_fd(&self) -> Option<RawFd> {
        self.ports[0].poll_fd()
    }

    fn poll_fds(&self, out: &mut Vec<RawFd>) {
        for p in &self.ports {
            out.extend(p.poll_fd());
        }
    }

    fn stats(&mut self) -> PortStats {
        let mut total = PortStats::default();
        for p in &mut self.ports {
            total.add(&p.stats());
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_share_the_queues_round_robin() {
        assert_eq!(AfXdpQueues::share(4, 0, 2), vec![0, 2]);
        assert_eq!(AfXdpQueues::share(4, 1, 2), vec![1, 3]);
        assert_eq!(AfXdpQueues::share(3, 0, 1), vec![0, 1, 2]);
        assert_eq!(AfXdpQueues::share(1, 1, 2), Vec::<u32>::new());
        // Every queue is served exactly once.
        for (queues, threads) in [(1, 1), (2, 2), (8, 3), (5, 5)] {
            let mut all: Vec<u32> = (0..threads)
                .flat_map(|t| AfXdpQueues::share(queues, t, threads))
                .collect();
            all.sort_unstable();
            assert_eq!(all, (0..queues).collect::<Vec<_>>());
        }
    }
}
