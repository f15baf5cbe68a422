//! The process's memory allocator: mimalloc, configured before it starts.
//!
//! Why mimalloc: every rule change makes the control thread allocate and
//! free pieces of large rule structures (a 512K-prefix FIB, TupleMerge
//! tables, two copies of each). With mimalloc the update bench's writer
//! was faster than with glibc's malloc in most alternated pairs, by up to
//! 45%. The packet path allocates nothing, so forwarding does not depend
//! on it (BENCHMARKS.md, "mimalloc as the global allocator").
//!
//! Two options differ from mimalloc's defaults:
//! - **Purge by reset** (`MADV_FREE`), not decommit (`MADV_DONTNEED`): a
//!   decommitted page is cleared by the kernel when it is faulted back in,
//!   and with decommits building the acl+fib tables took twice as long.
//! - **No huge-page advice for the heap**: mimalloc would `madvise` its
//!   arenas `MADV_HUGEPAGE`. The huge-page faults made loading the acl+fib
//!   tables 1.2–2× slower than with glibc on a VM (whose heap gets no huge
//!   pages in `madvise` THP mode), for no measured gain on the packet path.
//!   The FIB's `tbl24`, which advises huge pages itself (dir24.rs), keeps
//!   them.
//!
//! Both are set by a constructor that runs before any allocation, which
//! then initialises mimalloc itself (its own constructor, and any first
//! allocation, find it done). mimalloc's init, told not to use huge pages,
//! also disables them for the whole process (`PR_SET_THP_DISABLE`), which
//! would take them from `tbl24` too; the constructor gives them back at
//! once, unless the process was started with them disabled. The operator's
//! `MIMALLOC_PURGE_DECOMMITS` and `MIMALLOC_ALLOW_THP` still win.
//!
//! Thread-safety: the constructor runs before `main`, on the one thread
//! that exists then.

use std::sync::atomic::{AtomicBool, Ordering};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod options {
    include!(concat!(env!("OUT_DIR"), "/mimalloc_options.rs"));
}

/// The loader runs `.init_array` entries with a priority before those
/// without, in ascending priority. mimalloc's initialiser has none (built
/// with gcc) or 101 (clang); 100 runs before either. (Priorities up to 100
/// are reserved for the toolchain, which uses none here.)
#[used]
#[link_section = ".init_array.00100"]
static BEFORE_MIMALLOC: extern "C" fn() = configure;

/// THP was disabled for this process before mimalloc's init ran (by the
/// parent, inherited), so it is not ours to turn back on.
static THP_DISABLED_AT_START: AtomicBool = AtomicBool::new(false);

/// Whether the environment sets `name` (a NUL-terminated name). `getenv`
/// does not allocate: nothing may, before mimalloc is configured.
fn env_set(name: &[u8]) -> bool {
    debug_assert_eq!(name.last(), Some(&0));
    // SAFETY: `name` is NUL-terminated; getenv only reads the environment,
    // and no thread can be changing it before main.
    unsafe { !libc::getenv(name.as_ptr().cast()).is_null() }
}

extern "C" fn configure() {
    use libmimalloc_sys::{mi_option_set_enabled, mi_process_init};
    // SAFETY: PR_GET_THP_DISABLE takes no pointers and only reads a flag.
    let disabled = unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) } == 1;
    THP_DISABLED_AT_START.store(disabled, Ordering::Relaxed);
    let heap_thp_off = !env_set(b"MIMALLOC_ALLOW_THP\0");
    // SAFETY: mi_option_set_enabled only stores an option value in a static
    // table (no allocation, no initialisation needed); the indexes are read
    // by build.rs from the header compiled into this binary. mi_process_init
    // runs once whoever calls it first (mimalloc calls it from its own
    // constructor and from a first allocation for exactly this case).
    unsafe {
        if !env_set(b"MIMALLOC_PURGE_DECOMMITS\0") {
            mi_option_set_enabled(options::MI_OPTION_PURGE_DECOMMITS, false);
        }
        if heap_thp_off {
            mi_option_set_enabled(options::MI_OPTION_ALLOW_THP, false);
        }
        mi_process_init();
    }
    if heap_thp_off && !disabled {
        // SAFETY: PR_SET_THP_DISABLE takes no pointers; 0 clears the flag
        // mimalloc's init just set, so explicit MADV_HUGEPAGE advice works
        // again. mimalloc keeps its own note that its heap gets none.
        unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 0, 0, 0, 0) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `VmFlags` of the mapping holding `addr`, from /proc/self/smaps.
    fn vm_flags_of(addr: usize) -> Option<String> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let mut inside = false;
        for line in smaps.lines() {
            let range = line.split_whitespace().next().unwrap_or("");
            if let Some((lo, hi)) = range.split_once('-') {
                if let (Ok(lo), Ok(hi)) =
                    (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
                {
                    inside = (lo..hi).contains(&addr);
                    continue;
                }
            }
            if inside {
                if let Some(flags) = line.strip_prefix("VmFlags:") {
                    return Some(flags.trim().to_string());
                }
            }
        }
        None
    }

    /// The constructors ran in the right order around mimalloc's init: the
    /// options hold, the heap's mappings carry no huge-page advice (`hg`),
    /// even the first arena's, made at init, and the process may still
    /// use huge pages where it asks for them.
    #[test]
    fn heap_has_no_huge_page_advice_and_the_process_keeps_thp() {
        use libmimalloc_sys::mi_option_is_enabled;
        // SAFETY: mi_option_is_enabled only reads an option value.
        unsafe {
            if !env_set(b"MIMALLOC_PURGE_DECOMMITS\0") {
                assert!(!mi_option_is_enabled(options::MI_OPTION_PURGE_DECOMMITS));
            }
            if env_set(b"MIMALLOC_ALLOW_THP\0") {
                return;
            }
            assert!(!mi_option_is_enabled(options::MI_OPTION_ALLOW_THP));
        }
        // A small block lives in the arena mimalloc set up first; a big one
        // may get an arena of its own.
        let small = Box::new(7u64);
        let big = vec![1u8; 64 << 20];
        for addr in [&*small as *const u64 as usize, big.as_ptr() as usize] {
            let flags = vm_flags_of(addr).expect("heap address in /proc/self/smaps");
            assert!(
                !flags.split_whitespace().any(|f| f == "hg"),
                "heap mapping advised MADV_HUGEPAGE: {flags}"
            );
        }
        if !THP_DISABLED_AT_START.load(Ordering::Relaxed) {
            // SAFETY: as in `configure`.
            let disabled = unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) };
            assert_eq!(disabled, 0, "THP still disabled for the process");
        }
    }
}
