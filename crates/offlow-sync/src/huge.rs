//! [`HugeSlice<T>`]: a fixed-length slice in its own anonymous mapping,
//! advised `MADV_HUGEPAGE`, for large tables read and written at random.
//!
//! Why: a structure of megabytes touched at random addresses (a microflow
//! cache: every new flow lands in a random bucket) pays a TLB miss per
//! access on 4 KiB pages, and in a virtual machine each miss is a
//! two-dimensional page walk. Measured on this project's VM: a worker's
//! 65,536-entry microflow cache (12 MiB) made each insert cost about as
//! much as the rest of a connection's frame (`bench setup`, L2 rows: a
//! 4,096-entry cache was 15% faster end to end). Transparent huge pages
//! need the kernel's consent (`madvise` or `always` THP mode) and 2 MiB
//! aligned virtual addresses, so the mapping is over-allocated by one
//! huge page and the slice starts at the first aligned address.
//!
//! Invariants: `data` points at `len` initialised elements (filled at
//! creation) that live exactly as long as the value, in its own mapping or,
//! without one (small slices, or `mmap` failed), in a leaked boxed slice;
//! `owner` says which, for the drop alone, so an access is a plain slice
//! from `(data, len)` with no branch on the storage.
//!
//! Thread-safety: as `Box<[T]>`: `Send`/`Sync` when `T` is.

use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// Transparent huge page size on x86-64 and most arm64 kernels.
pub const HUGE_PAGE: usize = 2 << 20;

/// A slice of `len` copies of a value, in huge pages where the kernel
/// gives them (see the module docs).
pub struct HugeSlice<T: Copy> {
    /// The first of `len` initialised elements (dangling when `len` is 0).
    data: NonNull<T>,
    len: usize,
    owner: Owner,
}

/// Who frees the elements.
enum Owner {
    /// A mapping of our own: `base`/`map_len` as `mmap` returned them
    /// (`data` is its first 2 MiB-aligned address).
    Mapped {
        base: NonNull<libc::c_void>,
        map_len: usize,
        huge: bool,
    },
    /// A boxed slice of `len` elements at `data`, leaked by `heap` and
    /// rebuilt by the drop.
    Heap,
}

// SAFETY: a `HugeSlice` owns its elements exactly as a `Box<[T]>` does (no
// sharing, no interior pointers handed out beyond borrows of `self`).
unsafe impl<T: Copy + Send> Send for HugeSlice<T> {}
// SAFETY: as above; `&HugeSlice` gives only `&[T]`.
unsafe impl<T: Copy + Sync> Sync for HugeSlice<T> {}

impl<T: Copy> HugeSlice<T> {
    /// `len` copies of `fill`. Slices under one huge page are plain heap
    /// allocations (a mapping of their own would buy nothing).
    pub fn new(len: usize, fill: T) -> HugeSlice<T> {
        let bytes = len.saturating_mul(std::mem::size_of::<T>());
        if bytes < HUGE_PAGE || std::mem::align_of::<T>() > HUGE_PAGE {
            return HugeSlice::heap(len, fill);
        }
        let map_len = bytes + HUGE_PAGE;
        // SAFETY: an anonymous private mapping with no address hint has no
        // preconditions; the result is checked against MAP_FAILED.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        let Some(base) = NonNull::new(base).filter(|b| b.as_ptr() != libc::MAP_FAILED) else {
            return HugeSlice::heap(len, fill);
        };
        let pad = (HUGE_PAGE - (base.as_ptr() as usize % HUGE_PAGE)) % HUGE_PAGE;
        // SAFETY: pad < HUGE_PAGE, so `base + pad .. + bytes` lies inside the
        // mapping of `bytes + HUGE_PAGE` bytes; 2 MiB alignment satisfies
        // `T`'s (checked above).
        let data = unsafe { base.cast::<u8>().add(pad) }.cast::<T>();
        // SAFETY: the range is inside our mapping; madvise only changes the
        // paging policy, and failing (no THP support) is harmless. Advised
        // before the first touch, so the fill below faults huge pages in.
        let huge = unsafe { libc::madvise(data.as_ptr().cast(), bytes, libc::MADV_HUGEPAGE) } == 0;
        for i in 0..len {
            // SAFETY: `i < len`, inside the mapping; writing (not assigning)
            // since the memory holds no `T` yet.
            unsafe { data.as_ptr().add(i).write(fill) };
        }
        HugeSlice {
            data,
            len,
            owner: Owner::Mapped {
                base,
                map_len,
                huge,
            },
        }
    }

    fn heap(len: usize, fill: T) -> HugeSlice<T> {
        let boxed = vec![fill; len].into_boxed_slice();
        // Box::into_raw never returns null (a dangling, aligned pointer for
        // an empty slice).
        let data = NonNull::new(Box::into_raw(boxed).cast::<T>()).unwrap_or(NonNull::dangling());
        HugeSlice {
            data,
            len,
            owner: Owner::Heap,
        }
    }

    /// Whether the slice is in its own mapping and the kernel accepted the
    /// huge-page advice (it may still back parts with small pages).
    pub fn huge_pages_advised(&self) -> bool {
        matches!(self.owner, Owner::Mapped { huge: true, .. })
    }
}

impl<T: Copy> Deref for HugeSlice<T> {
    type Target = [T];

    #[inline(always)]
    fn deref(&self) -> &[T] {
        // SAFETY: `len` initialised elements at `data`, owned by self and
        // alive while it is (module invariants).
        unsafe { std::slice::from_raw_parts(self.data.as_ptr(), self.len) }
    }
}

impl<T: Copy> DerefMut for HugeSlice<T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`; `&mut self` gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.data.as_ptr(), self.len) }
    }
}

impl<T: Copy> Clone for HugeSlice<T> {
    /// A deep copy in a fresh mapping.
    fn clone(&self) -> HugeSlice<T> {
        match self.first() {
            // An empty boxed slice owns no allocation: the drop's
            // Box::from_raw of a dangling pointer and length 0 frees none.
            None => HugeSlice {
                data: NonNull::dangling(),
                len: 0,
                owner: Owner::Heap,
            },
            Some(&first) => {
                let mut c = HugeSlice::new(self.len(), first);
                c.copy_from_slice(self);
                c
            }
        }
    }
}

impl<T: Copy> Drop for HugeSlice<T> {
    fn drop(&mut self) {
        match self.owner {
            Owner::Mapped { base, map_len, .. } => {
                // SAFETY: `base`/`map_len` are exactly what mmap returned;
                // no borrow of the slice outlives `self`, and `T: Copy`
                // needs no drop.
                unsafe { libc::munmap(base.as_ptr(), map_len) };
            }
            Owner::Heap => {
                let slice = std::ptr::slice_from_raw_parts_mut(self.data.as_ptr(), self.len);
                // SAFETY: `heap` leaked exactly this boxed slice (pointer and
                // length), and nothing else frees it.
                drop(unsafe { Box::from_raw(slice) });
            }
        }
    }
}

impl<T: Copy + std::fmt::Debug> std::fmt::Debug for HugeSlice<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HugeSlice")
            .field("len", &self.len())
            .field("huge_pages_advised", &self.huge_pages_advised())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_slices_are_plain_and_large_ones_mapped_and_aligned() {
        let small = HugeSlice::new(10, 7u32);
        assert_eq!(&*small, &[7u32; 10]);
        assert!(!small.huge_pages_advised());
        let n = 3 * HUGE_PAGE / 8 + 5;
        let mut big = HugeSlice::new(n, 1u64);
        assert_eq!(big.len(), n);
        assert!(big.iter().all(|&x| x == 1));
        assert_eq!(big.as_ptr() as usize % HUGE_PAGE, 0, "2 MiB aligned");
        big[n - 1] = 9;
        let copy = big.clone();
        assert_eq!(copy[n - 1], 9);
        assert_eq!(&copy[..], &big[..]);
        big[0] = 3;
        assert_eq!(copy[0], 1, "a deep copy");
        let empty: HugeSlice<u8> = HugeSlice::new(0, 0);
        assert!(empty.is_empty() && empty.clone().is_empty());
    }
}
