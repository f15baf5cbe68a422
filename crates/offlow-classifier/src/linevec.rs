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
//! Growth without copying: small storage (under [`MAP_MIN_BYTES`]) is a
//! heap `Vec` of lines, doubled like any `Vec`. Larger storage is its own
//! anonymous mapping, grown with `mremap`, which moves page-table entries
//! instead of bytes and leaves the new half unfaulted until it is written.
//! A doubling `Vec` instead copies everything and faults in a block twice
//! the size at once: for TupleMerge's checks, bucket array and bucket keys
//! at 65,536 rules that was several MB per left-right copy on the control
//! thread, in one flow-mod. Reads are the same either way: `deref` reads a
//! cached pointer and length, with no branch on the kind of storage.
//!
//! Invariants: `ptr` points to `cap` lines of storage owned by `store`
//! (dangling and `cap == 0` when unallocated); `len * size_of::<T>()` is at
//! most `cap * 64`; elements `[0, len)` were written as `T` values;
//! `align_of::<T>()` is at most 64.
//!
//! Thread-safety: plain owned data (`Send`/`Sync` when `T` is).

use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// One cache line of raw storage.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

const LINE: usize = 64;

/// Storage of at least this many bytes is an `mremap`-grown mapping; below,
/// a heap `Vec` (whose doubling copies at most this much).
const MAP_MIN_BYTES: usize = 64 << 10;

/// An anonymous private read-write mapping of whole lines, owned like a
/// `Box`.
struct Mapping {
    ptr: NonNull<Line>,
    lines: usize,
}

impl Mapping {
    /// A zero-filled mapping of `lines` lines (`lines * 64` is a multiple of
    /// the page size or not; the kernel rounds up), or `None` if the kernel
    /// refuses.
    fn new(lines: usize) -> Option<Mapping> {
        // SAFETY: an anonymous private mapping with no address hint has no
        // preconditions; the result is checked against MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                lines * LINE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        // mmap returns page-aligned memory (so line-aligned), never null on
        // success.
        NonNull::new(p.cast::<Line>()).map(|ptr| Mapping { ptr, lines })
    }

    /// Grow to `lines` lines, keeping the contents; the mapping may move.
    /// `false` (mapping unchanged) if the kernel refuses.
    fn grow(&mut self, lines: usize) -> bool {
        // SAFETY: `ptr`/`self.lines * LINE` describe exactly the mapping we
        // own; MREMAP_MAYMOVE lets the kernel move it, and no reference into
        // it outlives this `&mut self` call (LineVec refreshes its pointer).
        let p = unsafe {
            libc::mremap(
                self.ptr.as_ptr().cast(),
                self.lines * LINE,
                lines * LINE,
                libc::MREMAP_MAYMOVE,
            )
        };
        if p == libc::MAP_FAILED {
            return false;
        }
        match NonNull::new(p.cast::<Line>()) {
            Some(ptr) => {
                self.ptr = ptr;
                self.lines = lines;
                true
            }
            None => false,
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`lines * LINE` are exactly what mmap/mremap returned;
        // no reference into the mapping outlives its owner.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.lines * LINE) };
    }
}

/// Who owns a `LineVec`'s lines.
enum Store {
    Heap(Vec<Line>),
    Map(Mapping),
}

/// See the module documentation.
pub(crate) struct LineVec<T: Copy> {
    /// Start of the storage (cached from `store`, so reads do not branch
    /// on the kind of storage).
    ptr: NonNull<Line>,
    /// Lines of storage.
    cap: usize,
    len: usize,
    store: Store,
    _t: PhantomData<T>,
}

// SAFETY: a LineVec owns its storage exclusively (like a Vec<T>); the raw
// pointer only caches `store`'s address. Writes need `&mut self`.
unsafe impl<T: Copy + Send> Send for LineVec<T> {}
// SAFETY: as above; `&self` only reads.
unsafe impl<T: Copy + Sync> Sync for LineVec<T> {}

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
            ptr: NonNull::dangling(),
            cap: 0,
            len: 0,
            store: Store::Heap(Vec::new()),
            _t: PhantomData,
        }
    }

    /// `n` copies of `v`.
    #[cfg(test)]
    pub(crate) fn from_elem(v: T, n: usize) -> Self {
        let mut out = Self::new();
        out.reserve_exact_elems(n);
        for _ in 0..n {
            out.push(v);
        }
        out
    }

    fn capacity(&self) -> usize {
        self.cap * LINE / std::mem::size_of::<T>()
    }

    /// Whether the storage is an `mremap`-grown mapping (for tests).
    #[cfg(test)]
    fn is_mapped(&self) -> bool {
        matches!(self.store, Store::Map(_))
    }

    /// Make room for `total` elements (exactly, rounded up to whole lines).
    fn reserve_exact_elems(&mut self, total: usize) {
        // Checked as `Vec` checks: a wrapped size would leave `zeroed` with
        // a length beyond its capacity.
        let bytes = total
            .checked_mul(std::mem::size_of::<T>())
            .expect("LineVec capacity overflow");
        let lines = bytes.div_ceil(LINE);
        if lines <= self.cap {
            return;
        }
        if lines.checked_mul(LINE).expect("LineVec capacity overflow") >= MAP_MIN_BYTES {
            match &mut self.store {
                Store::Map(m) => {
                    if m.grow(lines) {
                        self.ptr = m.ptr;
                        self.cap = lines;
                        return;
                    }
                }
                Store::Heap(v) => {
                    if let Some(m) = Mapping::new(lines) {
                        // SAFETY: `v` holds `v.len()` initialised lines, the
                        // new mapping has `lines > v.len()` lines, and the two
                        // are distinct allocations.
                        unsafe {
                            std::ptr::copy_nonoverlapping(v.as_ptr(), m.ptr.as_ptr(), v.len())
                        };
                        self.ptr = m.ptr;
                        self.cap = lines;
                        self.store = Store::Map(m);
                        return;
                    }
                }
            }
        }
        // Small, or the kernel refused a mapping: the heap. The new buffer
        // is built whole before `self` changes, so a panic (allocation
        // failure) leaves `self` describing its old, intact storage.
        let mut v: Vec<Line> = Vec::with_capacity(lines);
        let (old, used) = match &self.store {
            Store::Heap(h) => (h.as_ptr(), h.len()),
            Store::Map(m) => (m.ptr.as_ptr().cast_const(), m.lines),
        };
        // SAFETY: `old` holds `used <= lines` lines (a heap Vec's length,
        // or the mapping's size), `v` has capacity for `lines`, and the two
        // are distinct allocations. An untyped copy: the lines hold `T`s,
        // whose padding bytes may be uninitialised, so they are not read
        // as `u8`s.
        unsafe {
            std::ptr::copy_nonoverlapping(old, v.as_mut_ptr(), used);
            v.set_len(used);
        }
        v.resize(lines, Line([0; LINE]));
        // A Vec's buffer is non-null (`lines > 0` here, so allocated).
        self.ptr = NonNull::new(v.as_mut_ptr()).unwrap_or(NonNull::dangling());
        self.cap = v.len();
        // The old storage (a heap Vec or a mapping) is freed here.
        self.store = Store::Heap(v);
    }

    /// Append `v`.
    pub(crate) fn push(&mut self, v: T) {
        if self.len == self.capacity() {
            // Double (at least one line), like Vec, to keep pushes amortised O(1).
            let want = self
                .len
                .checked_mul(2)
                .expect("LineVec capacity overflow")
                .max(LINE / std::mem::size_of::<T>())
                .max(1);
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

impl LineVec<u64> {
    /// `n` zeros without writing them: fresh heap lines are zero-filled by
    /// `reserve_exact_elems` and a fresh mapping is zero, so a big table's
    /// pages are faulted in only where it is written.
    pub(crate) fn zeroed(n: usize) -> Self {
        let mut out = Self::new();
        out.reserve_exact_elems(n);
        // Every line of fresh storage is zero (above), and zero bits are a
        // valid u64.
        out.len = n;
        out
    }
}

impl<T: Copy> Clone for LineVec<T> {
    fn clone(&self) -> Self {
        let mut out = Self::new();
        out.reserve_exact_elems(self.capacity());
        out.extend_from_slice(self);
        out
    }
}

impl<T: Copy> Deref for LineVec<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: the lines are 64-byte aligned (so aligned for T, checked
        // by CHECK), `ptr` holds at least `len` T-sized slots (invariant; a
        // dangling, aligned pointer when `len == 0`), and the first `len`
        // were written as T values by `push`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().cast::<T>(), self.len) }
    }
}

impl<T: Copy> DerefMut for LineVec<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`; `&mut self` gives exclusive access. Slots
        // in [len, capacity) are never exposed, so no uninitialised T is
        // ever read.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().cast::<T>(), self.len) }
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
                prop_assert_eq!(l.ptr.as_ptr() as usize % 64, 0);
            }
        }
    }

    proptest! {
        /// Across the heap-to-mapping switch and mremap growth: same
        /// contents as a Vec, clones equal and independent.
        #[test]
        fn grows_past_the_mapping_threshold(n in 0usize..40_000, x in any::<u64>()) {
            let mut l: LineVec<u64> = LineVec::new();
            let v: Vec<u64> = (0..n as u64).map(|i| i ^ x).collect();
            for &e in &v {
                l.push(e);
            }
            prop_assert_eq!(&v[..], &l[..]);
            prop_assert_eq!(l.is_mapped(), l.cap * LINE >= MAP_MIN_BYTES);
            prop_assert_eq!(l.ptr.as_ptr() as usize % 64, 0);
            let mut c = l.clone();
            prop_assert_eq!(&c[..], &l[..]);
            if n > 0 {
                c[0] = !c[0];
                prop_assert_eq!(l[0], v[0]);
            }
            c.push(1);
            prop_assert_eq!(c.len(), n + 1);
        }
    }

    #[test]
    fn zeroed_is_zeros() {
        for n in [0, 1, 9, 5000, 40_000] {
            let z = LineVec::zeroed(n);
            assert_eq!(z.len(), n);
            assert!(z.iter().all(|&w| w == 0));
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
