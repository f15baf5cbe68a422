//! In-memory ports. For tests: [`MemPort`] is what a worker owns,
//! [`MemPeer`] is the "wire" side a test feeds frames into and reads the
//! transmitted frames from. For benchmarks: [`DiscardPort`] transmits into
//! nowhere, at the cost of the copy every real port's `send` makes.
//!
//! Thread-safety: both ends of a `MemPort` are `Send`; they share two
//! mutex-protected queues (tests only: a lock per call is fine there). A
//! `DiscardPort` shares nothing.

use std::collections::VecDeque;
use std::io;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex};

use crate::{Port, PortStats, RxMeta};

#[derive(Default)]
struct Queues {
    to_switch: VecDeque<(Vec<u8>, RxMeta)>,
    from_switch: VecDeque<Vec<u8>>,
}

fn lock(q: &Mutex<Queues>) -> std::sync::MutexGuard<'_, Queues> {
    // The queues hold plain frames; a panicking holder cannot leave them
    // half-updated in a way that matters to a test.
    q.lock().unwrap_or_else(|p| p.into_inner())
}

/// The switch's end of an in-memory link.
pub struct MemPort {
    name: String,
    queues: Arc<Mutex<Queues>>,
    pending: Vec<Vec<u8>>,
    /// Most frames kept in the transmit batch before drops.
    batch: usize,
    stats: PortStats,
}

/// The test's end of an in-memory link.
#[derive(Clone)]
pub struct MemPeer {
    queues: Arc<Mutex<Queues>>,
}

impl MemPort {
    /// A linked pair; at most `batch` frames wait in the transmit batch.
    pub fn pair(name: &str, batch: usize) -> (MemPort, MemPeer) {
        let queues = Arc::new(Mutex::new(Queues::default()));
        (
            MemPort {
                name: name.to_string(),
                queues: queues.clone(),
                pending: Vec::new(),
                batch,
                stats: PortStats::default(),
            },
            MemPeer { queues },
        )
    }
}

impl MemPeer {
    /// Put a frame on the wire towards the switch.
    pub fn inject(&self, frame: &[u8], meta: RxMeta) {
        lock(&self.queues)
            .to_switch
            .push_back((frame.to_vec(), meta));
    }

    /// Take every frame the switch transmitted so far.
    pub fn take(&self) -> Vec<Vec<u8>> {
        lock(&self.queues).from_switch.drain(..).collect()
    }
}

impl Port for MemPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn recv(&mut self, max: usize, on_frame: &mut dyn FnMut(&[u8], RxMeta)) -> io::Result<usize> {
        let mut n = 0;
        while n < max {
            let Some((frame, meta)) = lock(&self.queues).to_switch.pop_front() else {
                break;
            };
            self.stats.rx_packets += 1;
            self.stats.rx_bytes += frame.len() as u64;
            on_frame(&frame, meta);
            n += 1;
        }
        Ok(n)
    }

    fn send(&mut self, frame: &[u8]) -> bool {
        if self.pending.len() >= self.batch {
            self.stats.tx_dropped += 1;
            return false;
        }
        self.pending.push(frame.to_vec());
        true
    }

    fn flush(&mut self) -> io::Result<()> {
        let mut q = lock(&self.queues);
        for f in self.pending.drain(..) {
            self.stats.tx_packets += 1;
            self.stats.tx_bytes += f.len() as u64;
            q.from_switch.push_back(f);
        }
        Ok(())
    }

    fn poll_fd(&self) -> Option<RawFd> {
        None
    }

    fn stats(&mut self) -> PortStats {
        self.stats
    }
}

/// A port that receives nothing and transmits into nowhere: `send` copies
/// the frame into a preallocated batch arena (as [`crate::AfPacketPort`]
/// does before its `sendmmsg`), `flush` counts the batch as sent and
/// empties it. What a benchmark of the transmit path puts where the
/// kernel would be: no allocation, no lock, no system call.
pub struct DiscardPort {
    name: String,
    /// Slot `i` is `arena[i * slot ..][.. slot]`.
    arena: Box<[u8]>,
    slot: usize,
    /// Length of each queued frame, in order.
    lens: Vec<usize>,
    stats: PortStats,
}

impl DiscardPort {
    /// A port holding at most `batch` frames of at most `max_frame` bytes
    /// between flushes (more, or longer, are counted in `tx_dropped`).
    pub fn new(name: &str, batch: usize, max_frame: usize) -> DiscardPort {
        DiscardPort {
            name: name.to_string(),
            // An overflowing size could never be allocated anyway.
            arena: vec![0u8; batch.checked_mul(max_frame).expect("arena size overflows")]
                .into_boxed_slice(),
            slot: max_frame,
            lens: Vec::with_capacity(batch),
            stats: PortStats::default(),
        }
    }
}

impl Port for DiscardPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn recv(&mut self, _max: usize, _on_frame: &mut dyn FnMut(&[u8], RxMeta)) -> io::Result<usize> {
        Ok(0)
    }

    fn send(&mut self, frame: &[u8]) -> bool {
        let at = self.lens.len() * self.slot;
        // `at + frame.len()` cannot overflow: `at` is at most the arena's
        // length and a frame is a live slice.
        match self.arena.get_mut(at..at + frame.len()) {
            Some(dst) if frame.len() <= self.slot => {
                dst.copy_from_slice(frame);
                self.lens.push(frame.len());
                true
            }
            _ => {
                self.stats.tx_dropped += 1;
                false
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.stats.tx_packets += self.lens.len() as u64;
        self.stats.tx_bytes += self.lens.iter().map(|&n| n as u64).sum::<u64>();
        self.lens.clear();
        Ok(())
    }

    fn poll_fd(&self) -> Option<RawFd> {
        None
    }

    fn stats(&mut self) -> PortStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discard_port_counts_what_it_flushes_and_drops_past_its_batch() {
        let mut p = DiscardPort::new("d", 2, 64);
        assert!(p.send(&[1u8; 60]));
        assert!(!p.send(&[2u8; 65]), "longer than a slot");
        assert!(p.send(&[3u8; 64]));
        assert!(!p.send(&[4u8; 10]), "batch full");
        assert_eq!(p.stats().tx_packets, 0, "nothing sent before flush");
        p.flush().unwrap();
        let s = p.stats();
        assert_eq!((s.tx_packets, s.tx_bytes, s.tx_dropped), (2, 124, 2));
        assert!(p.send(&[5u8; 10]), "flush empties the batch");
        p.flush().unwrap();
        assert_eq!((p.stats().tx_packets, p.stats().tx_bytes), (3, 134));
        let mut got = 0;
        assert_eq!(p.recv(8, &mut |_, _| got += 1).unwrap(), 0);
        assert_eq!(got, 0);
    }
}
