//! Per-port transmit batches: the [`OutputSink`] a worker hands to the
//! executor when its output goes to real ports.
//!
//! What: [`TxBatches`] keeps one bounded queue of frame buffers per output
//! port (and one for packet-ins). Each output copies the frame into the
//! next free buffer of its port's queue; the port layer then drains every
//! queue with one batched send per port (a `sendmmsg`, an AF_XDP TX ring
//! fill). Buffers are allocated when a port is added and reused forever:
//! no allocation per packet. A full queue drops the frame and counts it
//! (`dropped`), as a NIC with a full TX ring does.
//!
//! Why copy: the frame lives in the receive buffer, which the worker reuses
//! for the next batch; a copy of a 64-byte frame costs less than holding
//! receive buffers hostage until the port has sent them.
//!
//! Invariants: a queue never holds more than its capacity; `len` frames are
//! valid in its first `len` slots; port lookup is O(1) for port numbers below
//! [`DIRECT_PORTS`] (others scan the list of configured ports).
//!
//! Thread-safety: one `TxBatches` per worker (`Send`, not shared).

use crate::execute::{OutputMeta, OutputSink, PortInfo};

/// Port numbers below this are looked up by direct index.
pub const DIRECT_PORTS: usize = 4096;

/// One port's queue: `capacity` frame slots of `max_frame` bytes in one
/// contiguous block, so queuing a frame is one bounds check and one copy
/// into memory the previous frame's copy just warmed.
#[derive(Debug)]
pub struct TxQueue {
    /// The port.
    pub port: u32,
    /// Slot `i` is `slots[i * max_frame ..][.. max_frame]`.
    slots: Box<[u8]>,
    /// Length of the frame in each slot (valid for the first `len`).
    lens: Box<[usize]>,
    max_frame: usize,
    len: usize,
    /// Frames dropped because the queue was full.
    pub dropped: u64,
    /// Frames too long for the buffers (dropped and counted).
    pub too_long: u64,
}

impl TxQueue {
    fn new(port: u32, capacity: usize, max_frame: usize) -> TxQueue {
        TxQueue {
            port,
            // An overflowing size could never be allocated anyway; saying so
            // here keeps `push`'s `len * max_frame` free of overflow.
            slots: vec![
                0u8;
                capacity
                    .checked_mul(max_frame)
                    .expect("tx queue size overflows")
            ]
            .into_boxed_slice(),
            lens: vec![0; capacity].into_boxed_slice(),
            max_frame,
            len: 0,
            dropped: 0,
            too_long: 0,
        }
    }

    #[inline]
    fn push(&mut self, frame: &[u8]) {
        let Some(slot_len) = self.lens.get_mut(self.len) else {
            self.dropped += 1;
            return;
        };
        if frame.len() > self.max_frame {
            self.too_long += 1;
            return;
        }
        // `len < capacity` (checked above), so the slot lies inside `slots`.
        let at = self.len * self.max_frame;
        match self.slots.get_mut(at..at + frame.len()) {
            Some(dst) => {
                crate::buf::copy_frame(dst, frame);
                *slot_len = frame.len();
                self.len += 1;
            }
            None => self.too_long += 1,
        }
    }

    /// Frames queued.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The queued frames, oldest first.
    pub fn frames(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let stride = self.max_frame;
        self.lens[..self.len]
            .iter()
            .enumerate()
            .map(move |(i, &n)| &self.slots[i * stride..i * stride + n])
    }

    /// Forget the queued frames (after the port sent them); buffers stay.
    pub fn clear(&mut self) {
        self.len = 0;
    }
}

/// Per-port transmit queues; see the module documentation.
#[derive(Debug)]
pub struct TxBatches {
    queues: Vec<TxQueue>,
    /// Port number → queue index + 1 (0 = none), for small port numbers.
    direct: Vec<u16>,
    ports: Vec<PortInfo>,
    controller: TxQueue,
    /// Outputs to a port with no queue (not configured), dropped.
    pub unknown_port: u64,
}

impl TxBatches {
    /// Queues of `capacity` frames of at most `max_frame` bytes for each
    /// of `ports` (also the FLOOD/ALL set), plus one for packet-ins.
    pub fn new(ports: &[PortInfo], capacity: usize, max_frame: usize) -> TxBatches {
        let mut direct = vec![0u16; DIRECT_PORTS];
        let mut queues = Vec::with_capacity(ports.len());
        for p in ports.iter().take(usize::from(u16::MAX) - 1) {
            if let Some(d) = direct.get_mut(p.port as usize) {
                // At most u16::MAX - 1 queues (take above), so this fits.
                *d = (queues.len() + 1) as u16;
            }
            queues.push(TxQueue::new(p.port, capacity, max_frame));
        }
        TxBatches {
            queues,
            direct,
            ports: ports.to_vec(),
            controller: TxQueue::new(u32::MAX, capacity, max_frame),
            unknown_port: 0,
        }
    }

    fn queue_of(&mut self, port: u32) -> Option<&mut TxQueue> {
        let i = match self.direct.get(port as usize) {
            Some(&0) => return None,
            Some(&d) => usize::from(d) - 1,
            None => self.queues.iter().position(|q| q.port == port)?,
        };
        self.queues.get_mut(i)
    }

    /// Every port queue.
    pub fn queues(&mut self) -> &mut [TxQueue] {
        &mut self.queues
    }

    /// The packet-in queue (frames already cut to the action's max_len).
    pub fn packet_ins(&mut self) -> &mut TxQueue {
        &mut self.controller
    }
}

impl OutputSink for TxBatches {
    #[inline]
    fn output(&mut self, port: u32, frame: &[u8], _meta: OutputMeta) {
        match self.queue_of(port) {
            Some(q) => q.push(frame),
            None => self.unknown_port += 1,
        }
    }

    fn controller(
        &mut self,
        frame: &[u8],
        max_len: u16,
        _origin: offlow_pipeline::PacketInOrigin,
        _meta: OutputMeta,
    ) {
        self.controller
            .push(&frame[..crate::execute::controller_len(frame.len(), max_len)]);
    }

    fn port_count(&self) -> usize {
        self.ports.len()
    }

    fn port_info(&self, index: usize) -> Option<PortInfo> {
        self.ports.get(index).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(port: u32) -> PortInfo {
        PortInfo {
            port,
            no_fwd: false,
            no_flood: false,
        }
    }

    const META: OutputMeta = OutputMeta {
        queue: None,
        final_view: true,
    };

    #[test]
    fn frames_land_in_their_port_queue_in_order() {
        let mut tx = TxBatches::new(&[port(1), port(7), port(100_000)], 2, 128);
        tx.output(7, b"a", META);
        tx.output(1, b"b", META);
        tx.output(7, b"c", META);
        tx.output(100_000, b"d", META);
        tx.output(7, b"e", META); // queue of 2: dropped
        tx.output(3, b"f", META); // no such port
        OutputSink::controller(
            &mut tx,
            b"g",
            10,
            offlow_pipeline::PacketInOrigin::UNKNOWN,
            META,
        );
        let q: Vec<(u32, Vec<Vec<u8>>, u64)> = tx
            .queues()
            .iter()
            .map(|q| (q.port, q.frames().map(<[u8]>::to_vec).collect(), q.dropped))
            .collect();
        assert_eq!(
            q,
            vec![
                (1, vec![b"b".to_vec()], 0),
                (7, vec![b"a".to_vec(), b"c".to_vec()], 1),
                (100_000, vec![b"d".to_vec()], 0),
            ]
        );
        assert_eq!(tx.unknown_port, 1);
        assert_eq!(tx.packet_ins().len(), 1);
        for q in tx.queues() {
            q.clear();
        }
        tx.output(7, b"h", META);
        assert_eq!(tx.queues()[1].frames().next(), Some(&b"h"[..]));
    }

    #[test]
    fn oversized_frames_are_counted_not_queued() {
        let mut tx = TxBatches::new(&[port(1)], 4, 64);
        tx.output(1, &[0u8; 65], META);
        assert_eq!((tx.queues()[0].len(), tx.queues()[0].too_long), (0, 1));
    }
}
