//! Which [`OffloadMask`] each slot of the program's `masks` map holds, and
//! how many entries use it: the bookkeeping half of masked entries (the
//! map writes and the grace periods are `XdpBackend`'s, in `mod.rs`).
//!
//! # Invariants
//! - A slot is *held* by one mask while entries use it (or while the first
//!   is being installed), *retired* once its last entry was unlinked, and
//!   *free* again only after a grace period ([`MaskSlots::recycle`]): a
//!   frame that read the old mask must not outlive the slot's reuse.
//! - Two held slots never hold the same mask, so every masked entry of a
//!   mask carries the same slot id and [`MaskSlots::find`] is unambiguous.
//! - A slot's id in a key is its index + 1 (0 is the exact entries').

use crate::mask::OffloadMask;

/// How many distinct masks the program holds at once (`MAX_MASKS` in the
/// C file): the XDP backend's [`crate::Capabilities::masks`].
pub const MAX_MASKS: usize = 8;

#[derive(Debug, Clone, Copy)]
struct Held {
    mask: OffloadMask,
    /// Entries installed with it.
    entries: usize,
}

/// The slots of `masks` (module docs).
#[derive(Debug)]
pub(crate) struct MaskSlots {
    held: [Option<Held>; MAX_MASKS],
    free: Vec<u32>,
    /// Released since the last grace period.
    retired: Vec<u32>,
}

impl MaskSlots {
    pub(crate) fn new() -> MaskSlots {
        MaskSlots {
            held: [None; MAX_MASKS],
            // Popped from the end: slot 0 first, so the lookup's early
            // rounds are the ones in use.
            free: (0..MAX_MASKS as u32).rev().collect(),
            retired: Vec::new(),
        }
    }

    /// The slot holding `mask`, if one does.
    pub(crate) fn find(&self, mask: &OffloadMask) -> Option<u32> {
        (0u32..)
            .zip(&self.held)
            .find(|(_, h)| h.is_some_and(|h| h.mask == *mask))
            .map(|(i, _)| i)
    }

    /// Could an entry with `mask` get a slot (its own, a free one, or a
    /// retired one after a grace period)?
    pub(crate) fn has_room(&self, mask: &OffloadMask) -> bool {
        self.find(mask).is_some() || !self.free.is_empty() || !self.retired.is_empty()
    }

    /// No free slot, but retired ones a grace period would free.
    pub(crate) fn needs_recycle(&self) -> bool {
        self.free.is_empty() && !self.retired.is_empty()
    }

    /// A free slot for `mask`, held with no entries yet; the caller writes
    /// the mask into the map, then [`hold`](Self::hold)s it per entry or
    /// gives it back with [`unused`](Self::unused).
    pub(crate) fn take(&mut self, mask: &OffloadMask) -> Option<u32> {
        let i = self.free.pop()?;
        self.held[i as usize] = Some(Held {
            mask: *mask,
            entries: 0,
        });
        Some(i)
    }

    /// One more entry uses slot `i` (held).
    pub(crate) fn hold(&mut self, i: u32) {
        if let Some(h) = &mut self.held[i as usize] {
            h.entries += 1;
        }
    }

    /// A slot from [`take`](Self::take) whose mask no entry was published
    /// with: free at once (its next user rewrites it and waits before
    /// publishing, so no frame can tell).
    pub(crate) fn unused(&mut self, i: u32) {
        self.held[i as usize] = None;
        self.free.push(i);
    }

    /// An entry of slot `i` was unlinked. True if it was the last: the
    /// slot is retired (free after the next grace period).
    pub(crate) fn release(&mut self, i: u32) -> bool {
        let Some(h) = &mut self.held[i as usize] else {
            return false;
        };
        h.entries = h.entries.saturating_sub(1);
        if h.entries > 0 {
            return false;
        }
        self.held[i as usize] = None;
        self.retired.push(i);
        true
    }

    /// A grace period has passed since every retirement so far.
    pub(crate) fn recycle(&mut self) {
        self.free.append(&mut self.retired);
    }

    /// Slots held.
    #[cfg(test)]
    fn in_use(&self) -> usize {
        self.held.iter().flatten().count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mask(n: u16) -> OffloadMask {
        OffloadMask {
            tp_dst: n,
            ..OffloadMask::SHAPE
        }
    }

    #[test]
    fn slots_are_counted_per_mask_and_reused_only_after_a_grace_period() {
        let mut s = MaskSlots::new();
        for n in 0..MAX_MASKS as u16 {
            assert!(s.has_room(&mask(n)));
            let i = s.take(&mask(n)).unwrap();
            assert_eq!(i, u32::from(n), "lowest slot first");
            s.hold(i);
        }
        // Full: a held mask still has room, a new one does not.
        assert!(s.has_room(&mask(3)));
        assert!(!s.has_room(&mask(100)));
        assert_eq!(s.find(&mask(3)), Some(3));
        s.hold(3);
        assert!(!s.release(3), "one entry left");
        assert!(s.release(3), "the last one");
        assert_eq!(s.find(&mask(3)), None);
        // Retired: room after a grace period, not before.
        assert!(s.has_room(&mask(100)));
        assert!(s.needs_recycle());
        assert_eq!(s.take(&mask(100)), None);
        s.recycle();
        assert_eq!(s.take(&mask(100)), Some(3));
        s.unused(3);
        assert!(!s.needs_recycle());
        assert_eq!(s.in_use(), MAX_MASKS - 1);
        assert!(!s.release(3), "a free slot releases nothing");
    }
}
