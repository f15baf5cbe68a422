//! [`Umem`]: the memory an `AF_XDP` socket's frames live in, one anonymous
//! mapping of equal power-of-two frames, and the check every descriptor
//! the kernel hands back passes before its bytes are touched.

use std::io;
use std::ptr;

/// `struct xdp_umem_reg` (Linux 6.8 layout; older kernels accept it since
/// the trailing field is 0).
#[repr(C)]
pub(super) struct UmemReg {
    addr: u64,
    len: u64,
    chunk_size: u32,
    headroom: u32,
    flags: u32,
    tx_metadata_len: u32,
}

/// The UMEM: `frames` frames of `frame_size` bytes, anonymous memory.
pub(super) struct Umem {
    pub(super) base: *mut u8,
    pub(super) len: usize,
    pub(super) frame_size: u64,
}

impl Umem {
    /// Map `len` bytes of anonymous memory, to be cut in frames of
    /// `frame_size` bytes (a power of two dividing `len`).
    pub(super) fn map(len: usize, frame_size: u32) -> io::Result<Umem> {
        // SAFETY: an anonymous private mapping; checked, then owned by
        // `Umem`.
        let base = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("mapping the UMEM: {e}")));
        }
        Ok(Umem {
            base: base.cast(),
            len,
            frame_size: u64::from(frame_size),
        })
    }

    /// The `XDP_UMEM_REG` argument registering this UMEM: no headroom,
    /// one chunk per frame.
    pub(super) fn reg(&self) -> UmemReg {
        UmemReg {
            addr: self.base as u64,
            len: self.len as u64,
            // Fits: `map` took it as a u32.
            chunk_size: self.frame_size as u32,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        }
    }

    /// Bytes `[addr, addr + len)`, if inside one frame of the UMEM.
    pub(super) fn range(&self, addr: u64, len: u32) -> Option<(usize, usize)> {
        let within = addr & (self.frame_size - 1);
        if within + u64::from(len) > self.frame_size || addr >= self.len as u64 {
            return None;
        }
        // In bounds: addr < len (a usize) and the end stays in addr's frame,
        // which lies inside the UMEM (len is a multiple of frame_size).
        Some((addr as usize, len as usize))
    }
}

impl Drop for Umem {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are what mmap returned; the socket that
        // registered it is closed before (field order in the port), and
        // the kernel pins the pages it uses in any case.
        unsafe {
            libc::munmap(self.base.cast(), self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registration_matches_the_kernel_layout() {
        assert_eq!(std::mem::size_of::<UmemReg>(), 32);
    }

    #[test]
    fn umem_ranges_stay_inside_one_frame() {
        let u = Umem {
            base: ptr::null_mut(),
            len: 4 * 2048,
            frame_size: 2048,
        };
        assert_eq!(u.range(256, 1792), Some((256, 1792)));
        assert_eq!(u.range(256, 1793), None, "crosses into the next frame");
        assert_eq!(u.range(3 * 2048, 2048), Some((6144, 2048)));
        assert_eq!(u.range(4 * 2048, 1), None, "past the end");
        assert_eq!(u.range(u64::MAX, 1), None);
        std::mem::forget(u); // never mapped
    }
}
