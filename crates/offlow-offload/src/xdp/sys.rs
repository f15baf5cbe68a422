//! The system calls the XDP backend makes beside libbpf-rs's safe API:
//! XDP links, test runs, grace periods, program ids and interface
//! indexes. Each is a thin wrapper that turns a C return code into an
//! `io::Error`; every `unsafe` block is here.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use libbpf_rs::libbpf_sys;

/// `XDP_FLAGS_SKB_MODE` (linux/if_link.h): generic XDP.
pub(crate) const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
/// `XDP_FLAGS_DRV_MODE`: native (driver) XDP.
pub(crate) const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// libbpf returns `-errno` (and sets errno); turn either into an error.
fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::from_raw_os_error(-rc))
    } else {
        Ok(rc)
    }
}

/// Attach `prog` to `ifindex` with an XDP link (`BPF_LINK_CREATE`, 5.9) in
/// the mode `flags` asks for. Closing the returned descriptor detaches the
/// program, also when the process dies, so a crashed switch never leaves
/// its program on an interface. The kernel refuses a link on an interface
/// that already has a program ("Can't replace active XDP program with BPF
/// link", EBUSY) or one in the other mode (EEXIST).
pub(crate) fn link_xdp(prog: BorrowedFd<'_>, ifindex: u32, flags: u32) -> io::Result<OwnedFd> {
    link_create(prog, ifindex, libbpf_sys::BPF_XDP, flags)
}

/// Attach `prog` (a `tcx/ingress` program) at `ifindex`'s TC ingress
/// through a tcx link (6.6+), after the programs already there. As with
/// [`link_xdp`], closing the descriptor detaches it, also when the process
/// dies; unlike XDP, tcx runs several programs in turn, so there is no
/// occupant to refuse.
pub(crate) fn link_tcx_ingress(prog: BorrowedFd<'_>, ifindex: u32) -> io::Result<OwnedFd> {
    link_create(prog, ifindex, libbpf_sys::BPF_TCX_INGRESS, 0)
}

/// `BPF_LINK_CREATE` of `prog` at `ifindex` for `attach_type` with `flags`:
/// the link's descriptor.
fn link_create(
    prog: BorrowedFd<'_>,
    ifindex: u32,
    attach_type: libbpf_sys::bpf_attach_type,
    flags: u32,
) -> io::Result<OwnedFd> {
    let opts = libbpf_sys::bpf_link_create_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_link_create_opts>() as _,
        flags,
        ..Default::default()
    };
    // SAFETY: `opts` is a fully initialised `bpf_link_create_opts` whose
    // `sz` is its own size, valid for the call; the program descriptor is
    // borrowed for the call; libbpf reads nothing else of ours.
    let rc = unsafe {
        libbpf_sys::bpf_link_create(prog.as_raw_fd(), ifindex as libc::c_int, attach_type, &opts)
    };
    let fd = check(rc)?;
    // SAFETY: a non-negative return of bpf_link_create is a new descriptor
    // that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The kernel's record of a loaded program.
fn prog_info(prog: BorrowedFd<'_>) -> io::Result<libbpf_sys::bpf_prog_info> {
    let mut info = libbpf_sys::bpf_prog_info::default();
    let mut len = std::mem::size_of::<libbpf_sys::bpf_prog_info>() as u32;
    // SAFETY: `info` and `len` are valid for writes for the call and `len`
    // says how many bytes `info` has.
    check(unsafe { libbpf_sys::bpf_prog_get_info_by_fd(prog.as_raw_fd(), &mut info, &mut len) })?;
    Ok(info)
}

/// The kernel's id of a loaded program.
pub(crate) fn prog_id(prog: BorrowedFd<'_>) -> io::Result<u32> {
    prog_info(prog).map(|i| i.id)
}

/// How many instructions the verifier processed to accept the program
/// (`verified_insns`, 5.16; 0 on older kernels).
pub(crate) fn verified_insns(prog: BorrowedFd<'_>) -> io::Result<u32> {
    prog_info(prog).map(|i| i.verified_insns)
}

/// What `BPF_PROG_TEST_RUN` returned.
pub(crate) struct TestRun {
    /// The program's return value (an XDP action).
    pub(crate) retval: u32,
    /// The frame as the program left it.
    pub(crate) frame: Vec<u8>,
}

/// `struct xdp_md` as `BPF_PROG_TEST_RUN` takes it (linux/bpf.h): `data`
/// and `data_end` are offsets into the frame (0 and its length: no
/// metadata), `ingress_ifindex` and `rx_queue_index` say where it
/// arrived, `egress_ifindex` must be 0.
#[repr(C)]
#[derive(Default)]
struct XdpMd {
    data: u32,
    data_end: u32,
    data_meta: u32,
    ingress_ifindex: u32,
    rx_queue_index: u32,
    egress_ifindex: u32,
}

/// Run `prog` once on `frame` as if received on `ifindex` queue `queue`
/// (the interface must exist in the calling thread's network namespace).
pub(crate) fn test_run(
    prog: BorrowedFd<'_>,
    frame: &[u8],
    ifindex: u32,
    queue: u32,
) -> io::Result<TestRun> {
    test_run_repeat(prog, frame, ifindex, queue, 1).map(|(r, _)| r)
}

/// [`test_run`] `repeat` times in the kernel (each run starts from the
/// same input frame); also the kernel's mean time per run, in ns.
pub(crate) fn test_run_repeat(
    prog: BorrowedFd<'_>,
    frame: &[u8],
    ifindex: u32,
    queue: u32,
    repeat: u32,
) -> io::Result<(TestRun, u32)> {
    let mut ctx = XdpMd {
        data_end: frame.len() as u32,
        ingress_ifindex: ifindex,
        rx_queue_index: queue,
        ..Default::default()
    };
    prog_test_run(prog, frame, &mut ctx, true, repeat)
}

/// `BPF_PROG_TEST_RUN` of `prog` on `frame` with context `ctx` (written
/// back by the kernel when `ctx_back`), `repeat` times: the last run's
/// result and the kernel's mean time per run, in ns. The output has room
/// for a pushed tag and more.
fn prog_test_run<C>(
    prog: BorrowedFd<'_>,
    frame: &[u8],
    ctx: &mut C,
    ctx_back: bool,
    repeat: u32,
) -> io::Result<(TestRun, u32)> {
    let mut out = vec![0u8; frame.len() + 256];
    let ctx_size = std::mem::size_of::<C>() as u32;
    let mut opts = libbpf_sys::bpf_test_run_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_test_run_opts>() as _,
        data_in: frame.as_ptr().cast(),
        data_size_in: frame.len() as u32,
        data_out: out.as_mut_ptr().cast(),
        data_size_out: out.len() as u32,
        ctx_in: (ctx as *const C).cast(),
        ctx_size_in: ctx_size,
        ctx_out: if ctx_back {
            (ctx as *mut C).cast()
        } else {
            std::ptr::null_mut()
        },
        ctx_size_out: if ctx_back { ctx_size } else { 0 },
        repeat: repeat.max(1) as _,
        ..Default::default()
    };
    // SAFETY: every pointer in `opts` points at a live buffer of the size
    // given beside it (`frame`, `out`, `ctx`), valid for the call; the
    // kernel writes at most `data_size_out` / `ctx_size_out` bytes.
    check(unsafe { libbpf_sys::bpf_prog_test_run_opts(prog.as_raw_fd(), &mut opts) })?;
    out.truncate(opts.data_size_out as usize);
    Ok((
        TestRun {
            retval: opts.retval,
            frame: out,
        },
        opts.duration,
    ))
}

/// The head of `struct __sk_buff` (linux/bpf.h) up to `ifindex`, as
/// `BPF_PROG_TEST_RUN` takes it for a TC program: of these only `mark`,
/// `priority` and `ifindex` may be non-zero (`ifindex` gives the socket
/// buffer its device); the kernel accepts a prefix of the struct.
#[repr(C)]
#[derive(Default)]
struct SkBuffHead {
    len: u32,
    pkt_type: u32,
    mark: u32,
    queue_mapping: u32,
    protocol: u32,
    vlan_present: u32,
    vlan_tci: u32,
    vlan_proto: u32,
    priority: u32,
    ingress_ifindex: u32,
    ifindex: u32,
}

/// Run a TC program once on `frame` as a socket buffer received on
/// `ifindex` (which must exist in the calling thread's namespace) carrying
/// `mark`: its return value (a TC action) and the frame as it left it. A
/// test run's socket buffer has no VLAN metadata: a tag stays in the
/// bytes.
pub(crate) fn test_run_skb(
    prog: BorrowedFd<'_>,
    frame: &[u8],
    ifindex: u32,
    mark: u32,
) -> io::Result<TestRun> {
    let mut ctx = SkBuffHead {
        ifindex,
        mark,
        ..Default::default()
    };
    // No context back: the kernel would write a whole `__sk_buff`, more
    // than this prefix (ENOSPC).
    prog_test_run(prog, frame, &mut ctx, false, 1).map(|(r, _)| r)
}

/// `MEMBARRIER_CMD_GLOBAL` (linux/membarrier.h).
const MEMBARRIER_CMD_GLOBAL: libc::c_long = 1;

/// Wait for an RCU grace period: `membarrier(MEMBARRIER_CMD_GLOBAL)` calls
/// `synchronize_rcu()` (kernel/sched/membarrier.c, 4.16+; a no-op with a
/// single online CPU, where no program can be running while this thread
/// is). XDP programs run inside an RCU read-side section, so when this
/// returns every program run that began before the call has finished.
/// Fails with EINVAL under nohz_full.
pub(crate) fn membarrier_global() -> io::Result<()> {
    // SAFETY: membarrier takes two integers (cmd, flags) and a CPU id that
    // this command ignores; it touches no memory of ours.
    let rc = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The index of interface `name` in the calling thread's namespace.
pub(crate) fn ifindex(name: &str) -> io::Result<u32> {
    let c = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `c` is a NUL-terminated string valid for the call.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(i)
    }
}

/// The effective user id is 0 (tests skip otherwise).
pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}
