//! Packet buffers: whole frames kept for the controller when a packet-in
//! shows it only part of one (OpenFlow 1.3.5 §7.4.1: "When a packet is
//! buffered, some number of bytes from the message will be included in the
//! data portion"; the controller names the frame by `buffer_id` in a
//! PACKET_OUT or FLOW_MOD, and the switch sends or processes the whole of
//! it).
//!
//! A fixed ring of [`N_BUFFERS`] slots. Every stored frame gets a fresh id
//! (a 32-bit sequence; slot = id mod [`N_BUFFERS`]), so the ring always has
//! room: storing overwrites the oldest frame, and an id whose slot has
//! since been reused, or whose frame is older than [`BUFFER_LIFETIME_NS`],
//! is unknown. A frame is used at most once.
//!
//! # Invariants
//! - An id maps to at most one frame, ever (until the sequence wraps after
//!   2^32 frames, long after the slot was reused); `OFP_NO_BUFFER` is never
//!   issued.
//! - Memory is bounded: at most [`N_BUFFERS`] frames, each as long as the
//!   workers' frame buffers.
//!
//! # Thread-safety
//! Owned by the control side (one thread); no interior mutability.

use offlow_openflow::OFP_NO_BUFFER;

/// Frames kept at once (`n_buffers` in FEATURES_REPLY).
pub const N_BUFFERS: u32 = 256;

/// How long a frame stays usable (Open vSwitch used the same when it still
/// buffered packets): a controller that answers later gets
/// `OFPBRC_BUFFER_UNKNOWN`, and the frame is not sent stale.
pub const BUFFER_LIFETIME_NS: u64 = 5_000_000_000;

/// Why a buffer id cannot be used (the `OFPBRC_*` error it answers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BufferError {
    /// `OFPBRC_BUFFER_UNKNOWN`: never issued, overwritten, or expired.
    Unknown,
    /// `OFPBRC_BUFFER_EMPTY`: issued, and already used.
    Empty,
}

#[derive(Debug)]
struct Buffered {
    id: u32,
    in_port: u32,
    stored_ns: u64,
    /// `None` once used.
    frame: Option<Vec<u8>>,
}

/// The ring of buffered frames.
#[derive(Debug)]
pub struct PacketBuffers {
    slots: Vec<Option<Buffered>>,
    next_id: u32,
}

impl Default for PacketBuffers {
    fn default() -> Self {
        PacketBuffers {
            slots: (0..N_BUFFERS).map(|_| None).collect(),
            next_id: 0,
        }
    }
}

impl PacketBuffers {
    /// Keep `frame` (received on `in_port`) at `now_ns`; its buffer id.
    pub fn store(&mut self, in_port: u32, frame: Vec<u8>, now_ns: u64) -> u32 {
        if self.next_id == OFP_NO_BUFFER {
            self.next_id = 0;
        }
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        self.slots[Self::slot(id)] = Some(Buffered {
            id,
            in_port,
            stored_ns: now_ns,
            frame: Some(frame),
        });
        id
    }

    /// Take the frame of `id` (its ingress port and bytes): it cannot be
    /// taken again.
    pub fn take(&mut self, id: u32, now_ns: u64) -> Result<(u32, Vec<u8>), BufferError> {
        let Some(b) = self.slots[Self::slot(id)].as_mut().filter(|b| b.id == id) else {
            return Err(BufferError::Unknown);
        };
        if now_ns.saturating_sub(b.stored_ns) > BUFFER_LIFETIME_NS {
            return Err(BufferError::Unknown);
        }
        let frame = b.frame.take().ok_or(BufferError::Empty)?;
        Ok((b.in_port, frame))
    }

    fn slot(id: u32) -> usize {
        // Below N_BUFFERS, which fits usize.
        (id % N_BUFFERS) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_is_used_once_and_an_overwritten_id_is_unknown() {
        let mut b = PacketBuffers::default();
        let first = b.store(3, vec![1, 2, 3], 0);
        let second = b.store(4, vec![4], 0);
        assert_ne!(first, second);
        assert_eq!(b.take(second, 1), Ok((4, vec![4])));
        assert_eq!(b.take(second, 1), Err(BufferError::Empty));
        assert_eq!(b.take(first, 1), Ok((3, vec![1, 2, 3])));
        assert_eq!(b.take(12345, 1), Err(BufferError::Unknown));
        // A full turn of the ring later, `first`'s slot holds another frame.
        let mut last = first;
        for i in 0..N_BUFFERS {
            last = b.store(1, vec![i as u8], 2);
        }
        assert_eq!(last, first + N_BUFFERS + 1);
        let reused = first + N_BUFFERS;
        assert_eq!(b.take(first, 3), Err(BufferError::Unknown));
        assert_eq!(b.take(reused, 3), Ok((1, vec![(N_BUFFERS - 2) as u8])));
    }

    #[test]
    fn old_frames_expire_and_no_buffer_is_never_issued() {
        let mut b = PacketBuffers::default();
        let id = b.store(1, vec![9], 10);
        assert_eq!(
            b.take(id, 10 + BUFFER_LIFETIME_NS + 1),
            Err(BufferError::Unknown)
        );
        b.next_id = OFP_NO_BUFFER;
        let id = b.store(1, vec![9], 0);
        assert_eq!(id, 0);
        assert_eq!(b.take(id, 0), Ok((1, vec![9])));
    }
}
