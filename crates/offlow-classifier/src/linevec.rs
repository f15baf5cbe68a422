//! `LineVec<T>`: a growable array of plain `Copy` values stored in whole,
//! 64-byte-aligned cache lines.
//!
//! Why: a left-right pair ([`offlow_sync::Versioned`]) keeps two copies of a
//! classifier, and the writer mutates one while readers scan the other. With
//! ordinary `Vec`s the two copies' small heap blocks interleave, so a writer
//! store into copy B can land in a cache line that also holds copy A's hash
//! slots or tuple order, and every such store costs readers a miss. A
//! `LineVec` owns every line it touches, so the copies never share one.
//!
//! Invariants: `len * size_of::<T>() <= lines.len() * 64`; elements
//! `[0, len)` were written as `T` values; `align_of::<T>() <= 64`.
//!
//! Thread-safety: plain owned data (`Send`/`Sync` when `T` is).

use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

/// One cache line of raw storage.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

const LINE: usize = 64;

/// See the module documentation.
#[derive(Clone)]
pub(crate) struct LineVec<T: Copy> {
    lines: Vec<Line>,
    len: usize,
    _t: PhantomData<T>,
}

impl<T: Copy> LineVec<T> {
    const CHECK: () = assert!(
        std::mem::align_of::<T>() <= LINE && std::mem::size_of::<T>() > 0,
        "LineVec holds sized values aligned to at most a cache line"
    );

    /// An empty vector (no allocation).
    pub(crate) fn new() -> Self {
        #[allow(clippy::let_unit_value)]
        let () = Self::CHECK;
        LineVec {
            lines: Vec::new(),
            len: 0,
            _t: PhantomData,
        }
    }

    /// `n` copies of `v`.
    pub(crate) fn from_elem(v: T, n: usize) -> Self {
        let mut out = Self::new();
        out.reserve_exact_elems(n);
        for _ in 0..n {
            out.push(v);
        }
        out
    }

    fn capacity(&self) -> usize {
        self.lines.len() * LINE / std::mem::size_of::<T>()
    }

    fn reserve_exact_elems(&mut self, total: usize) {
        let bytes = total * std::mem::size_of::<T>();
        let lines = bytes.div_ceil(LINE);
        if lines > self.lines.len() {
            self.lines.resize(lines, Line([0; LINE]));
        }
    }

    /// Append `v`.
    pub(crate) fn push(&mut self, v: T) {
        if self.len == self.capacity() {
            // Double (at least one line), like Vec, to keep pushes amortised O(1).
            let want = (self.len * 2).max(LINE / std::mem::size_of::<T>()).max(1);
            self.reserve_exact_elems(want);
        }
        let i = self.len;
        self.len += 1;
        self[i] = v;
    }

    /// Insert `v` at `pos`, shifting the tail right.
    pub(crate) fn insert(&mut self, pos: usize, v: T) {
        assert!(pos <= self.len, "LineVec::insert out of range");
        let len = self.len;
        self.push(v);
        self.copy_within(pos..len, pos + 1);
        self[pos] = v;
    }

    /// Remove the element at `pos`, shifting the tail left.
    pub(crate) fn remove(&mut self, pos: usize) -> T {
        let v = self[pos];
        let len = self.len;
        self.copy_within(pos + 1..len, pos);
        self.len -= 1;
        v
    }

    /// Append every element of `s`.
    pub(crate) fn extend_from_slice(&mut self, s: &[T]) {
        for &v in s {
            self.push(v);
        }
    }
}

impl<T: Copy> Deref for LineVec<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: the lines are 64-byte aligned (so aligned for T, checked
        // by CHECK), hold at least `len` T-sized slots (invariant), and the
        // first `len` were written as T values by `push`.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast::<T>(), self.len) }
    }
}

impl<T: Copy> DerefMut for LineVec<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`; `&mut self` gives exclusive access. Slots
        // in [len, capacity) are never exposed, so no uninitialised T is
        // ever read.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast::<T>(), self.len) }
    }
}

impl<T: Copy> Default for LineVec<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy + fmt::Debug> fmt::Debug for LineVec<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Same results as a Vec under random push / insert / remove.
        #[test]
        fn behaves_like_vec(ops in proptest::collection::vec((0u8..3, any::<u32>(), any::<usize>()), 0..200)) {
            let mut v: Vec<(u32, u8)> = Vec::new();
            let mut l: LineVec<(u32, u8)> = LineVec::new();
            for (op, x, at) in ops {
                match op {
                    0 => { v.push((x, 1)); l.push((x, 1)); }
                    1 => { let p = at % (v.len() + 1); v.insert(p, (x, 2)); l.insert(p, (x, 2)); }
                    _ => if !v.is_empty() { let p = at % v.len(); prop_assert_eq!(v.remove(p), l.remove(p)); }
                }
                prop_assert_eq!(&v[..], &l[..]);
                prop_assert_eq!(l.lines.as_ptr() as usize % 64, 0);
            }
        }
    }

    #[test]
    fn from_elem_and_extend() {
        let mut l = LineVec::from_elem(7u64, 10);
        assert_eq!(&l[..], &[7u64; 10][..]);
        l.extend_from_slice(&[1, 2, 3]);
        assert_eq!(l.len(), 13);
        assert_eq!(l[12], 3);
    }
}
