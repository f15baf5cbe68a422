//! `ChunkVec<T>`: a growable array stored in fixed-size chunks, for big
//! slabs the control thread appends to.
//!
//! Why: a `Vec` doubles by allocating twice its size and copying
//! everything over, so the push that crosses 2^k elements costs a copy of
//! the whole slab plus the page faults of a fresh block twice as large. For
//! TupleMerge's rule slab (about 290 bytes a rule) that push, at 65,536
//! rules, moved 19 MB and faulted in 38 MB, on the control thread, once
//! per left-right copy: a flow-mod stall of tens of milliseconds that grew
//! with the table. Here growth allocates one more chunk of [`CHUNK`]
//! elements and never moves an element; only the small table of chunk
//! pointers doubles (8 bytes per chunk).
//!
//! Indexing costs one more dependent load (the chunk pointer) than a
//! `Vec`, so this is for cold slabs (read on the control path or on a
//! lookup's rare slow path), not for data every lookup reads.
//!
//! Invariants: every chunk has capacity exactly [`CHUNK`] and never
//! reallocates; all chunks but the last are full; `len` is the sum of the
//! chunks' lengths; there is no empty trailing chunk.
//!
//! Thread-safety: plain owned data (`Send`/`Sync` when `T` is).

use std::fmt;
use std::ops::{Index, IndexMut};

/// log2 of the elements per chunk.
const SHIFT: u32 = 10;
/// Elements per chunk: 1024 (about 290 KB of rules, 12 KB of placements;
/// small next to the slab, large enough that the chunk table stays short).
pub(crate) const CHUNK: usize = 1 << SHIFT;

/// See the module documentation.
pub(crate) struct ChunkVec<T> {
    chunks: Vec<Vec<T>>,
    len: usize,
}

impl<T> ChunkVec<T> {
    /// An empty vector (no allocation).
    pub(crate) const fn new() -> Self {
        ChunkVec {
            chunks: Vec::new(),
            len: 0,
        }
    }

    /// Number of elements.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no elements.
    #[allow(dead_code)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Append `v`. Allocates a new chunk when the last one is full; never
    /// moves an element.
    pub(crate) fn push(&mut self, v: T) {
        if self.len % CHUNK == 0 {
            self.chunks.push(Vec::with_capacity(CHUNK));
        }
        // A chunk exists: pushed just above, or `len % CHUNK != 0` means
        // the last chunk is partly filled.
        let last = self.chunks.len() - 1;
        let chunk = &mut self.chunks[last];
        debug_assert!(chunk.len() < CHUNK);
        chunk.push(v);
        self.len += 1;
    }

    /// The element at `i`, if `i < len`.
    #[allow(dead_code)] // used by the tests; kept as the checked accessor
    #[inline]
    pub(crate) fn get(&self, i: usize) -> Option<&T> {
        self.chunks.get(i >> SHIFT)?.get(i & (CHUNK - 1))
    }

    /// Every element in index order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        self.chunks.iter().flatten()
    }
}

impl<T> Index<usize> for ChunkVec<T> {
    type Output = T;
    #[inline]
    fn index(&self, i: usize) -> &T {
        &self.chunks[i >> SHIFT][i & (CHUNK - 1)]
    }
}

impl<T> IndexMut<usize> for ChunkVec<T> {
    #[inline]
    fn index_mut(&mut self, i: usize) -> &mut T {
        &mut self.chunks[i >> SHIFT][i & (CHUNK - 1)]
    }
}

impl<T: Clone> Clone for ChunkVec<T> {
    /// Keeps every chunk's capacity at [`CHUNK`] (a derived clone would
    /// shrink the last chunk to its length, and its next push would then
    /// reallocate it).
    fn clone(&self) -> Self {
        let chunks = self
            .chunks
            .iter()
            .map(|c| {
                let mut n = Vec::with_capacity(CHUNK);
                n.extend_from_slice(c);
                n
            })
            .collect();
        ChunkVec {
            chunks,
            len: self.len,
        }
    }
}

impl<T> Default for ChunkVec<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: fmt::Debug> fmt::Debug for ChunkVec<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Same contents as a Vec under random pushes and overwrites, across
        /// chunk boundaries; chunks never exceed their fixed capacity.
        #[test]
        fn behaves_like_vec(ops in proptest::collection::vec((0u8..4, any::<u32>(), any::<usize>(), 0usize..3000), 0..40)) {
            let mut v: Vec<u32> = Vec::new();
            let mut c: ChunkVec<u32> = ChunkVec::new();
            for (op, x, at, n) in ops {
                match op {
                    // A run of pushes, so boundaries get crossed.
                    0 | 1 => for k in 0..n { v.push(x ^ k as u32); c.push(x ^ k as u32); },
                    2 => if !v.is_empty() { let p = at % v.len(); v[p] = x; c[p] = x; },
                    _ => { c = c.clone(); }
                }
                prop_assert_eq!(c.len(), v.len());
                prop_assert_eq!(c.is_empty(), v.is_empty());
                prop_assert!(c.iter().eq(v.iter()));
                if !v.is_empty() {
                    let p = at % v.len();
                    prop_assert_eq!(c[p], v[p]);
                    prop_assert_eq!(c.get(p), Some(&v[p]));
                }
                prop_assert_eq!(c.get(v.len()), None);
                prop_assert!(c.chunks.iter().all(|ch| ch.capacity() == CHUNK));
                prop_assert_eq!(c.chunks.len(), v.len().div_ceil(CHUNK));
            }
        }
    }

    #[test]
    fn push_never_moves_an_element() {
        let mut c = ChunkVec::new();
        c.push(0u64);
        let first: *const u64 = &c[0];
        for i in 1..(5 * CHUNK as u64) {
            c.push(i);
        }
        assert!(std::ptr::eq(first, &c[0]));
        assert_eq!(c[3 * CHUNK + 7], 3 * CHUNK as u64 + 7);
    }
}
