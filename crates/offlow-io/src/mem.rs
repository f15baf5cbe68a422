//! In-memory ports for tests: [`MemPort`] is what a worker owns,
//! [`MemPeer`] is the "wire" side a test feeds frames into and reads the
//! transmitted frames from.
//!
//! Thread-safety: both ends are `Send`; they share two mutex-protected
//! queues (tests only: a lock per call is fine there).

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
