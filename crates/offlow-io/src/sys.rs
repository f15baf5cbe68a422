//! The two syscall helpers the socket ports share: turn a negative return
//! into an `io::Error` that says what failed, and `setsockopt` of a typed
//! value.
//!
//! Thread-safety: plain functions.

use std::io;
use std::os::fd::RawFd;

/// `rc` if it is not negative, else the last OS error prefixed by `what`.
pub(crate) fn cvt(rc: libc::c_int, what: &str) -> io::Result<libc::c_int> {
    if rc < 0 {
        let e = io::Error::last_os_error();
        Err(io::Error::new(e.kind(), format!("{what}: {e}")))
    } else {
        Ok(rc)
    }
}

/// `setsockopt(fd, level, opt, val, sizeof *val)`.
pub(crate) fn setsockopt<T>(
    fd: RawFd,
    level: libc::c_int,
    opt: libc::c_int,
    val: &T,
    what: &str,
) -> io::Result<()> {
    // SAFETY: `val` points at a live `T` of the size we pass.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            (val as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    cvt(rc, what).map(|_| ())
}
