//! [`Ring`]: one of an `AF_XDP` socket's four mapped rings (RX, TX, fill,
//! completion), a single-producer single-consumer queue of free-running
//! `u32` indices shared with the kernel. The ordering argument is in the
//! parent module ("Ring ordering"), and at each load and store below.

use std::io;
use std::os::fd::RawFd;
use std::ptr;
use std::sync::atomic::{AtomicU32, Ordering};

const XDP_RING_NEED_WAKEUP: u32 = 1;
/// `sizeof(struct xdp_desc)`: addr u64, len u32, options u32.
pub(super) const XDP_DESC_SIZE: usize = 16;
/// A fill/completion entry: one UMEM address.
pub(super) const UMEM_DESC_SIZE: usize = 8;

/// `struct xdp_ring_offset`.
#[repr(C)]
#[derive(Default, Clone, Copy)]
pub(super) struct RingOffset {
    producer: u64,
    consumer: u64,
    desc: u64,
    flags: u64,
}

/// `struct xdp_mmap_offsets`.
#[repr(C)]
#[derive(Default)]
pub(super) struct MmapOffsets {
    pub(super) rx: RingOffset,
    pub(super) tx: RingOffset,
    pub(super) fr: RingOffset,
    pub(super) cr: RingOffset,
}

/// One mapped ring. `local` is our index (producer for fill/TX, consumer
/// for RX/completion), possibly ahead of what we published; `cached` is
/// the kernel's index as last loaded.
pub(super) struct Ring {
    map: *mut u8,
    map_len: usize,
    producer: usize,
    consumer: usize,
    flags: usize,
    desc: usize,
    mask: u32,
    pub(super) size: u32,
    pub(super) local: u32,
    cached: u32,
}

impl Ring {
    /// Map ring `pgoff` of `fd` with `size` entries of `desc_size` bytes.
    pub(super) fn map(
        fd: RawFd,
        off: &RingOffset,
        pgoff: libc::off_t,
        size: u32,
        desc_size: usize,
        what: &str,
    ) -> io::Result<Ring> {
        let bad = || {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{what}: implausible ring offsets from the kernel"),
            )
        };
        let to = |v: u64| usize::try_from(v).map_err(|_| bad());
        let (producer, consumer, flags, desc) = (
            to(off.producer)?,
            to(off.consumer)?,
            to(off.flags)?,
            to(off.desc)?,
        );
        let map_len = desc
            .checked_add(size as usize * desc_size)
            .ok_or_else(bad)?;
        // The index words are atomics: 4-aligned and inside the mapping
        // (which is page-aligned).
        for w in [producer, consumer, flags] {
            if w % 4 != 0 || w + 4 > map_len {
                return Err(bad());
            }
        }
        // SAFETY: mapping the ring the kernel allocated for `fd` at its
        // documented page offset; the result is checked and owned by the
        // returned `Ring`.
        let base = unsafe {
            libc::mmap(
                ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                pgoff,
            )
        };
        if base == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("mapping the {what}: {e}")));
        }
        let mut ring = Ring {
            map: base.cast(),
            map_len,
            producer,
            consumer,
            flags,
            desc,
            mask: size - 1,
            size,
            local: 0,
            cached: 0,
        };
        // A fresh ring starts at 0/0; read them anyway rather than assume.
        ring.local = ring.producer().load(Ordering::Relaxed);
        ring.cached = ring.consumer().load(Ordering::Relaxed);
        Ok(ring)
    }

    fn word(&self, at: usize) -> &AtomicU32 {
        // SAFETY: `at` is one of the offsets checked in `map` (4-aligned,
        // inside the mapping, which lives as long as `self`); the kernel
        // writes these words concurrently, hence the atomic view.
        unsafe { AtomicU32::from_ptr(self.map.add(at).cast()) }
    }

    fn producer(&self) -> &AtomicU32 {
        self.word(self.producer)
    }

    pub(super) fn consumer(&self) -> &AtomicU32 {
        self.word(self.consumer)
    }

    pub(super) fn needs_wakeup(&self) -> bool {
        self.word(self.flags).load(Ordering::Relaxed) & XDP_RING_NEED_WAKEUP != 0
    }

    /// The address of slot `idx` for descriptors of `desc_size` bytes.
    pub(super) fn slot(&self, idx: u32, desc_size: usize) -> *mut u8 {
        let i = (idx & self.mask) as usize;
        // SAFETY: `i < size` and the mapping holds `size` descriptors of
        // `desc_size` bytes after `desc` (its length was computed so).
        unsafe { self.map.add(self.desc + i * desc_size) }
    }

    // -- producer side (fill, TX) --

    /// Free slots, refreshing the kernel's consumer index when fewer than
    /// `want` seem free.
    pub(super) fn free(&mut self, want: u32) -> u32 {
        // Saturating: a consumer index ahead of ours (a kernel bug) reads
        // as "no room" instead of underflowing.
        let mut free = self
            .size
            .saturating_sub(self.local.wrapping_sub(self.cached));
        if free < want {
            // Acquire: the kernel read the slots it released before its
            // release store of the consumer index.
            self.cached = self.consumer().load(Ordering::Acquire);
            free = self
                .size
                .saturating_sub(self.local.wrapping_sub(self.cached));
        }
        free
    }

    pub(super) fn publish(&self) {
        // Release: descriptors (and TX frame bytes) written before are
        // visible to the kernel's acquire load of the producer.
        self.producer().store(self.local, Ordering::Release);
    }

    // -- consumer side (RX, completion) --

    /// Entries ready to read, refreshing the producer index when none
    /// seem ready.
    pub(super) fn ready(&mut self) -> u32 {
        let mut n = self.cached.wrapping_sub(self.local);
        if n == 0 {
            // Acquire: the kernel wrote descriptors and frame bytes before
            // its release store of the producer index.
            self.cached = self.producer().load(Ordering::Acquire);
            n = self.cached.wrapping_sub(self.local);
        }
        // A producer index more than `size` ahead would be a kernel bug;
        // never read more than the ring holds.
        n.min(self.size)
    }

    pub(super) fn release(&mut self, n: u32) {
        self.local = self.local.wrapping_add(n);
        // Release: our reads of the released descriptors (and frames) are
        // done before the kernel may reuse them.
        self.consumer().store(self.local, Ordering::Release);
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: `map`/`map_len` are what mmap returned; nothing borrows
        // the ring past a method call.
        unsafe {
            libc::munmap(self.map.cast(), self.map_len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_match_the_kernel_layout() {
        assert_eq!(std::mem::size_of::<MmapOffsets>(), 128);
    }
}
