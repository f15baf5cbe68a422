//! Network namespaces: run code inside a named namespace (one created with
//! `ip netns add NAME`, bound at `/run/netns/NAME`).
//!
//! A socket belongs to the namespace it was created in, for its whole life,
//! whichever thread later uses it. So a switch can open its ports inside a
//! namespace with [`in_netns`] and then serve them from any thread.
//!
//! Thread-safety: `setns` moves only the calling thread; [`in_netns`]
//! restores the thread's namespace before returning, also when `f` panics.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// The path of a named namespace.
pub fn path(name: &str) -> String {
    format!("/run/netns/{name}")
}

fn enter(ns: &File) -> io::Result<()> {
    // SAFETY: `setns` takes a descriptor we own (valid for the call) and a
    // namespace type; it touches no memory of ours.
    let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Puts the thread back in its original namespace when dropped.
struct Restore(File);

impl Drop for Restore {
    fn drop(&mut self) {
        if let Err(e) = enter(&self.0) {
            // Carrying on in the wrong namespace would open later sockets
            // in it: a silent misconfiguration. Nothing sane remains.
            eprintln!("offlow: cannot return to the original network namespace: {e}");
            std::process::abort();
        }
    }
}

/// Run `f` with the calling thread inside the namespace `name` (`None`:
/// the current one, `f` just runs).
pub fn in_netns<T>(name: Option<&str>, f: impl FnOnce() -> T) -> io::Result<T> {
    let Some(name) = name else {
        return Ok(f());
    };
    let original = File::open("/proc/thread-self/ns/net")?;
    let target = File::open(path(name))
        .map_err(|e| io::Error::new(e.kind(), format!("network namespace {name}: {e}")))?;
    enter(&target).map_err(|e| io::Error::new(e.kind(), format!("entering {name}: {e}")))?;
    let _restore = Restore(original);
    Ok(f())
}
