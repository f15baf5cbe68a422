//! [`PacketBuf`]: one frame in a reusable buffer with headroom, so that
//! pushing a VLAN tag moves only the bytes in front of the insertion point
//! (the 12 MAC bytes) instead of the whole payload.
//!
//! # Invariants
//! - `head + len <= storage.len()` after every method (re-checked before
//!   every move, so even a storage whose `AsRef` length changes between
//!   calls cannot make a method panic: it is treated as an empty frame).
//! - No method allocates; [`PacketBuf::new`] allocates the storage once, and
//!   the buffer is reused for every frame of its pool slot via
//!   [`PacketBuf::load`] (or wraps ring memory via [`PacketBuf::from_parts`]).
//!
//! # Thread-safety
//! Plain data: `Send`/`Sync` exactly when the storage is.

use core::fmt;

/// Headroom reserved in front of a loaded frame by default: room for
/// sixteen 4-byte VLAN or MPLS pushes.
pub const DEFAULT_HEADROOM: usize = 64;

/// A frame did not fit in a [`PacketBuf`]'s storage after its headroom.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameTooLong {
    /// Length of the rejected frame.
    pub len: usize,
    /// Bytes available after the headroom.
    pub room: usize,
}

impl fmt::Display for FrameTooLong {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "frame of {} bytes does not fit in {} bytes of buffer",
            self.len, self.room
        )
    }
}

impl std::error::Error for FrameTooLong {}

/// Copy `src` into `dst`, which must have the same length (as
/// `copy_from_slice`, which it falls back to and which panics otherwise).
///
/// Why: a frame's length is only known at run time, so `copy_from_slice`
/// becomes a call into libc's `memcpy`, whose size dispatch cost as much
/// as the copy itself for minimum-size frames (the rx load and the tx push
/// were 9% of the cached datapath, perf, 2026-11-22). Frames of 32 to 128
/// bytes are copied here as two or four fixed 32-byte moves that may
/// overlap, which the compiler emits as plain vector loads and stores.
#[inline(always)]
pub fn copy_frame(dst: &mut [u8], src: &[u8]) {
    const W: usize = 32;
    let n = src.len();
    if n != dst.len() || !(W..=4 * W).contains(&n) {
        dst.copy_from_slice(src);
        return;
    }
    // Chunks at 0 and n - 32 cover [0, n) when n <= 64; chunks at 32 and
    // n - 64 cover the middle when n <= 128 (all starts are in range since
    // n >= 32, and, for the middle pair, n > 64).
    dst[..W].copy_from_slice(&src[..W]);
    dst[n - W..].copy_from_slice(&src[n - W..]);
    if n > 2 * W {
        dst[W..2 * W].copy_from_slice(&src[W..2 * W]);
        dst[n - 2 * W..n - W].copy_from_slice(&src[n - 2 * W..n - W]);
    }
}

/// One frame held at `storage[head .. head + len]`; the bytes before `head`
/// are headroom that pushes grow into.
#[derive(Debug, Clone)]
pub struct PacketBuf<S = Box<[u8]>> {
    storage: S,
    /// Headroom that [`PacketBuf::load`] restores.
    reserve: usize,
    head: usize,
    len: usize,
    /// The packet's `tunnel_id`, when it has one that its bytes do not
    /// carry: it arrived on a tunnel port (the key of the encapsulation it
    /// came in), or a set-field gave it one. An output to a `key=flow`
    /// tunnel sends it as the key. Reset by [`PacketBuf::load`].
    tunnel_id: Option<u64>,
}

impl PacketBuf<Box<[u8]>> {
    /// A buffer owning `headroom + max_frame` zeroed bytes (the only
    /// allocation; reuse the buffer for every frame of its pool slot).
    pub fn new(headroom: usize, max_frame: usize) -> Self {
        let cap = headroom.saturating_add(max_frame);
        PacketBuf {
            storage: vec![0u8; cap].into_boxed_slice(),
            reserve: headroom,
            head: headroom,
            len: 0,
            tunnel_id: None,
        }
    }

    /// A buffer holding a copy of `frame` with [`DEFAULT_HEADROOM`] in front
    /// and `tailroom` spare bytes behind (for tests and slow paths).
    pub fn from_frame(frame: &[u8], tailroom: usize) -> Self {
        let mut b = PacketBuf::new(DEFAULT_HEADROOM, frame.len().saturating_add(tailroom));
        // Cannot fail: the storage was sized for the frame just above.
        let _ = b.load(frame);
        b
    }
}

impl<S: AsRef<[u8]> + AsMut<[u8]>> PacketBuf<S> {
    /// Wrap `storage` (for example a slot of a receive ring), empty, with
    /// `headroom` bytes (clamped to the storage) kept in front of frames.
    pub fn from_storage(storage: S, headroom: usize) -> Self {
        let reserve = headroom.min(storage.as_ref().len());
        PacketBuf {
            storage,
            reserve,
            head: reserve,
            len: 0,
            tunnel_id: None,
        }
    }

    /// Wrap `storage` that already holds a frame at `head .. head + len`
    /// (a NIC wrote it there); `None` when that range is outside the storage.
    pub fn from_parts(storage: S, head: usize, len: usize) -> Option<Self> {
        let end = head.checked_add(len)?;
        if end > storage.as_ref().len() {
            return None;
        }
        Some(PacketBuf {
            storage,
            reserve: head,
            head,
            len,
            tunnel_id: None,
        })
    }

    /// Replace the content with a copy of `frame`, restoring the headroom.
    pub fn load(&mut self, frame: &[u8]) -> Result<(), FrameTooLong> {
        let st = self.storage.as_mut();
        let head = self.reserve.min(st.len());
        let room = st.len() - head;
        match st.get_mut(head..head + frame.len()) {
            Some(dst) => {
                copy_frame(dst, frame);
                self.head = head;
                self.len = frame.len();
                self.tunnel_id = None;
                Ok(())
            }
            None => Err(FrameTooLong {
                len: frame.len(),
                room,
            }),
        }
    }

    /// The frame.
    #[inline]
    pub fn frame(&self) -> &[u8] {
        self.storage
            .as_ref()
            .get(self.head..self.head.saturating_add(self.len))
            .unwrap_or(&[])
    }

    /// The frame, writable in place.
    #[inline]
    pub fn frame_mut(&mut self) -> &mut [u8] {
        let (h, l) = (self.head, self.len);
        self.storage
            .as_mut()
            .get_mut(h..h.saturating_add(l))
            .unwrap_or(&mut [])
    }

    /// Frame length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.frame().len()
    }

    /// True when the frame is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes free in front of the frame.
    #[inline]
    pub fn headroom(&self) -> usize {
        self.head
    }

    /// Offset of the frame inside the storage (equal to [`Self::headroom`];
    /// what a transmit path needs to hand the slot to a NIC).
    #[inline]
    pub fn head(&self) -> usize {
        self.head
    }

    /// The packet's `tunnel_id` beyond its bytes (see the field's docs).
    #[inline]
    pub fn tunnel_id(&self) -> Option<u64> {
        self.tunnel_id
    }

    /// Set (or clear) the packet's `tunnel_id` beyond its bytes.
    #[inline]
    pub fn set_tunnel_id(&mut self, id: Option<u64>) {
        self.tunnel_id = id;
    }

    /// Keep only the bytes at `range` of the frame (a decapsulation: the
    /// outer headers in front and any padding behind are dropped; the
    /// headroom grows by `range.start`). Returns false, changing nothing,
    /// when `range` is not inside the frame.
    pub fn keep(&mut self, range: core::ops::Range<usize>) -> bool {
        if range.start > range.end || range.end > self.len {
            return false;
        }
        self.head += range.start;
        self.len = range.end - range.start;
        true
    }

    /// The underlying storage.
    pub fn into_storage(self) -> S {
        self.storage
    }

    /// Open an `n`-byte gap at frame offset `at` by moving the `at` bytes in
    /// front of it into the headroom (the payload behind `at` does not
    /// move). The gap holds stale bytes for the caller to overwrite.
    /// Returns false, changing nothing, when `at > len` or the headroom is
    /// smaller than `n`.
    pub fn open_gap(&mut self, at: usize, n: usize) -> bool {
        let st = self.storage.as_mut();
        if at > self.len || n > self.head || self.head + self.len > st.len() {
            return false;
        }
        // In range: head - n >= 0 and head + at <= head + len <= st.len().
        st.copy_within(self.head..self.head + at, self.head - n);
        self.head -= n;
        self.len += n;
        true
    }

    /// Remove the `n` bytes at frame offset `at` by moving the `at` bytes in
    /// front of them forward. Returns false, changing nothing, when
    /// `at + n > len`.
    pub fn close_gap(&mut self, at: usize, n: usize) -> bool {
        let st = self.storage.as_mut();
        let end = match at.checked_add(n) {
            Some(e) => e,
            None => return false,
        };
        if end > self.len || self.head + self.len > st.len() {
            return false;
        }
        // In range: head + n + at <= head + len <= st.len().
        st.copy_within(self.head..self.head + at, self.head + n);
        self.head += n;
        self.len -= n;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The chunked copy writes exactly `src` into `dst` and nothing
        /// around it, at every length including the chunk boundaries.
        #[test]
        fn copy_frame_equals_copy_from_slice(
            src in proptest::collection::vec(any::<u8>(), 0..300),
            at in 0usize..8,
        ) {
            let mut room = vec![0xA5u8; src.len() + 16];
            copy_frame(&mut room[at..at + src.len()], &src);
            let mut want = vec![0xA5u8; src.len() + 16];
            want[at..at + src.len()].copy_from_slice(&src);
            prop_assert_eq!(room, want);
        }
    }

    #[test]
    fn copy_frame_covers_every_chunk_boundary() {
        for n in [0, 1, 31, 32, 33, 63, 64, 65, 95, 96, 127, 128, 129, 1518] {
            let src: Vec<u8> = (0..n).map(|i| (i % 251) as u8 + 1).collect();
            let mut dst = vec![0u8; n];
            copy_frame(&mut dst, &src);
            assert_eq!(dst, src, "length {n}");
        }
    }

    #[test]
    #[should_panic]
    fn copy_frame_rejects_unequal_lengths() {
        copy_frame(&mut [0u8; 40], &[1u8; 41]);
    }

    #[test]
    fn gap_moves_only_the_prefix() {
        let frame: Vec<u8> = (0u8..40).collect();
        let mut b = PacketBuf::from_frame(&frame, 0);
        assert!(b.open_gap(12, 4));
        assert_eq!(b.len(), 44);
        assert_eq!(b.headroom(), DEFAULT_HEADROOM - 4);
        assert_eq!(&b.frame()[..12], &frame[..12]);
        assert_eq!(&b.frame()[16..], &frame[12..]);
        assert!(b.close_gap(12, 4));
        assert_eq!(b.frame(), &frame[..]);
    }

    #[test]
    fn refuses_out_of_range_moves() {
        let mut b = PacketBuf::new(4, 20);
        b.load(&[1; 20]).unwrap();
        assert!(!b.open_gap(12, 8), "headroom is only 4");
        assert!(!b.open_gap(21, 4), "past the end");
        assert!(!b.close_gap(18, 4));
        assert!(!b.close_gap(usize::MAX, 4));
        assert_eq!(b.frame(), &[1; 20]);
        assert_eq!(b.load(&[0; 21]), Err(FrameTooLong { len: 21, room: 20 }));
    }

    #[test]
    fn wraps_ring_memory() {
        let mut ring = [0u8; 32];
        ring[8..12].copy_from_slice(&[9, 8, 7, 6]);
        let b = PacketBuf::from_parts(&mut ring[..], 8, 4).unwrap();
        assert_eq!(b.frame(), &[9, 8, 7, 6]);
        assert!(PacketBuf::from_parts(&mut [0u8; 4][..], 2, 3).is_none());
    }
}
