//! A Linux interface queue as a port through an `AF_XDP` socket, with the
//! tiny XDP program that steers frames to it. Raw system calls only (no
//! libbpf/libxdp).
//!
//! # The XDP program ([`XdpProgram`])
//! Five hand-assembled eBPF instructions (six slots: a 64-bit immediate
//! load takes two), the equivalent of
//! `return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);`: every
//! frame received on queue *q* goes to the socket in slot *q* of an
//! `XSKMAP`; a queue without a socket passes frames to the kernel stack
//! (the helper returns its flags' low bits as the verdict on a missing
//! entry: Linux 5.3+). The program sees the frame as it was on the wire:
//! VLAN tags in place, so [`RxMeta::vlan`] is always `None`, and no
//! checksum state, so [`RxMeta::csum_partial`] is always false. Hence a
//! known limit: a frame a *local* sender handed over with an offloaded
//! (partial) TCP/UDP checksum, e.g. from a container behind a veth,
//! arrives with that checksum unfinished and nothing says so (AF_PACKET
//! flags it). Turn transmit checksum offload off on such senders
//! (`ethtool -K IF tx off`); the tests check both facts.
//!
//! It is attached through a BPF *link* (`BPF_LINK_CREATE`, Linux 5.9+): the
//! link lives exactly as long as its file descriptor, so closing it (or the
//! process dying) detaches the program and nothing is left on the
//! interface. Native (driver) mode is tried first, then generic (SKB)
//! mode; [`XdpProgram::mode`] says which one took.
//!
//! # The socket ([`AfXdpPort`])
//! One socket per (interface, queue). Its UMEM is one anonymous mapping of
//! `frame_count` frames of `frame_size` bytes, split in two fixed halves:
//! - **RX frames** (the lower half) circulate between the fill ring, the
//!   kernel and the RX ring. [`Port::recv`] lends each received frame to the
//!   callback in place, then gives it straight back through the fill ring.
//!   The fill ring holds the whole half, so handing a frame back never
//!   fails.
//! - **TX frames** (the upper half) sit on a free list; [`Port::send`] copies
//!   a frame into one and writes a TX descriptor (not yet visible to the
//!   kernel); [`Port::flush`] publishes the descriptors, wakes the kernel
//!   when needed and takes finished frames back from the completion ring.
//!
//! Binding asks for zero-copy and lets the kernel fall back to copy mode
//! (no `XDP_ZEROCOPY`/`XDP_COPY` flag: the kernel's own fallback, free), or
//! forces one of them ([`XskBind`]). veth has no zero-copy support: copy
//! mode there. `XDP_USE_NEED_WAKEUP` is always set: the kernel then only
//! wants a system call when a ring's `NEED_WAKEUP` flag says so, except for
//! copy-mode transmit, where the `sendto` kick *is* the transmission (the
//! kernel sends up to 32 frames per call, `TX_BATCH_SIZE` in
//! net/xdp/xsk.c) and so is always made while descriptors are pending.
//!
//! # Ring ordering
//! Each ring is a single-producer single-consumer queue of free-running
//! `u32` indices shared with the kernel, which uses
//! `smp_load_acquire`/`smp_store_release` on them (net/xdp/xsk_queue.h).
//! We pair with it:
//! - *producing* (fill, TX): write descriptors (and TX frame bytes), then
//!   `producer.store(Release)`, so the kernel, loading the producer with
//!   acquire, sees them; the consumer index is loaded with `Acquire` so the
//!   kernel's reads of slots it released are finished before we overwrite
//!   them.
//! - *consuming* (RX, completion): `producer.load(Acquire)` before reading
//!   descriptors and frame bytes (the kernel wrote them before its release
//!   store); `consumer.store(Release)` after we are done with them, so the
//!   kernel cannot reuse a slot or frame we are still reading.
//!
//! # Invariants
//! - Every descriptor the kernel hands back (RX address and length,
//!   completion address) is checked against the UMEM and against the half
//!   it belongs to before use; a bad one is counted (`rx_errors`,
//!   [`AfXdpCounters::bad_completion`]) and its frame is not reused.
//! - A frame is in exactly one place: fill ring/kernel/RX ring (RX half),
//!   or free list/TX ring/kernel/completion ring (TX half). The fill and
//!   completion rings are at least as large as their half, so they never
//!   overflow.
//! - No allocation per frame; no system call per frame.
//! - Resources are released in order: rings, then the socket (which leaves
//!   the XSKMAP), then the port's share of the program, then the UMEM
//!   (field order).
//!
//! # veth (Linux 6.x, drivers/net/veth.c; see tests/afxdp.rs)
//! Native mode works and needs a program only on the receiving end: the
//! peer's transmit then feeds this end's NAPI ring, where the program runs.
//! A program (or GRO) on the peer is needed only for frames XDP
//! *redirects into* a veth (`ndo_xdp_xmit`), not for AF_XDP copy-mode
//! transmit, which hands the device an `sk_buff`. No zero-copy.
//!
//! # Thread-safety
//! `Send`, not `Sync`: one thread owns the socket and its rings. An
//! [`XdpProgram`] is `Send + Sync` and may be shared (`Arc`) by the ports
//! of several queues of one interface.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::afpacket::ifindex;
use crate::{Port, PortStats, RxMeta};

// ---- linux/bpf.h ----
const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
const BPF_PSEUDO_MAP_FD: u8 = 1;
const BPF_FUNC_REDIRECT_MAP: i32 = 51;
/// `XDP_PASS` verdict.
const XDP_PASS: i32 = 2;
/// `offsetof(struct xdp_md, rx_queue_index)`.
const XDP_MD_RX_QUEUE_INDEX: i16 = 16;
// ---- linux/if_link.h ----
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;
// ---- linux/if_xdp.h ----
const SOL_XDP: libc::c_int = 283;
const XDP_MMAP_OFFSETS: libc::c_int = 1;
const XDP_RX_RING: libc::c_int = 2;
const XDP_TX_RING: libc::c_int = 3;
const XDP_UMEM_REG: libc::c_int = 4;
const XDP_UMEM_FILL_RING: libc::c_int = 5;
const XDP_UMEM_COMPLETION_RING: libc::c_int = 6;
const XDP_STATISTICS: libc::c_int = 7;
const XDP_OPTIONS: libc::c_int = 8;
const XDP_OPTIONS_ZEROCOPY: u32 = 1;
const XDP_COPY: u16 = 1 << 1;
const XDP_ZEROCOPY: u16 = 1 << 2;
const XDP_USE_NEED_WAKEUP: u16 = 1 << 3;
const XDP_RING_NEED_WAKEUP: u32 = 1;
const XDP_PGOFF_RX_RING: libc::off_t = 0;
const XDP_PGOFF_TX_RING: libc::off_t = 0x8000_0000;
const XDP_UMEM_PGOFF_FILL_RING: libc::off_t = 0x1_0000_0000;
const XDP_UMEM_PGOFF_COMPLETION_RING: libc::off_t = 0x1_8000_0000;
/// `sizeof(struct xdp_desc)`: addr u64, len u32, options u32.
const XDP_DESC_SIZE: usize = 16;
/// A fill/completion entry: one UMEM address.
const UMEM_DESC_SIZE: usize = 8;
// ---- linux/ethtool.h, linux/sockios.h ----
const ETHTOOL_GCHANNELS: u32 = 0x3c;
const SIOCETHTOOL: libc::c_ulong = 0x8946;

// ---------------------------------------------------------------------
// bpf(2)
// ---------------------------------------------------------------------

/// One eBPF instruction (`struct bpf_insn`): the register nibbles are
/// `dst` (low) and `src` (high) on a little-endian host.
#[repr(C)]
#[derive(Clone, Copy)]
struct Insn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: (src << 4) | (dst & 0xf),
        off,
        imm,
    }
}

// Opcodes used below (linux/bpf_common.h, linux/bpf.h).
/// `BPF_LDX | BPF_MEM | BPF_W`: `dst = *(u32 *)(src + off)`.
const LDX_MEM_W: u8 = 0x61;
/// `BPF_LD | BPF_IMM | BPF_DW`: 64-bit immediate over two instructions.
const LD_IMM_DW: u8 = 0x18;
/// `BPF_ALU64 | BPF_MOV | BPF_K`: `dst = imm`.
const MOV64_IMM: u8 = 0xb7;
/// `BPF_JMP | BPF_CALL`: call helper `imm`.
const CALL: u8 = 0x85;
/// `BPF_JMP | BPF_EXIT`: return r0.
const EXIT: u8 = 0x95;

/// `return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);`
fn redirect_program(map_fd: RawFd) -> [Insn; 6] {
    [
        // r2 = ctx->rx_queue_index (r1 holds ctx on entry; read it before
        // r1 is overwritten with the map).
        insn(LDX_MEM_W, 2, 1, XDP_MD_RX_QUEUE_INDEX, 0),
        // r1 = &xsks: the loader replaces the fd with the map's address.
        insn(LD_IMM_DW, 1, BPF_PSEUDO_MAP_FD, 0, map_fd),
        insn(0, 0, 0, 0, 0),
        // r3 = XDP_PASS: the verdict when the slot holds no socket.
        insn(MOV64_IMM, 3, 0, 0, XDP_PASS),
        insn(CALL, 0, 0, 0, BPF_FUNC_REDIRECT_MAP),
        // r0 = the helper's verdict.
        insn(EXIT, 0, 0, 0, 0),
    ]
}

/// `return XDP_PASS;`
fn pass_program() -> [Insn; 2] {
    [insn(MOV64_IMM, 0, 0, 0, XDP_PASS), insn(EXIT, 0, 0, 0, 0)]
}

/// The prefix of `union bpf_attr` for `BPF_MAP_CREATE` (the kernel
/// zero-fills what we do not pass).
#[repr(C)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
}

/// `union bpf_attr` for `BPF_MAP_UPDATE_ELEM`.
#[repr(C)]
struct MapElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// The prefix of `union bpf_attr` for `BPF_PROG_LOAD`.
#[repr(C)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// The prefix of `union bpf_attr` for `BPF_LINK_CREATE`.
#[repr(C)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
}

/// `bpf(cmd, attr, sizeof attr)`, returning the new descriptor (or 0).
///
/// # Safety
/// `attr` must be the attribute struct of `cmd`; every pointer inside it
/// must be valid for what the kernel reads or writes through it.
unsafe fn sys_bpf<T>(cmd: libc::c_long, attr: &mut T, what: &str) -> io::Result<libc::c_long> {
    // SAFETY: forwarded to the caller; `attr` is live and of the size
    // passed.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            (attr as *mut T).cast::<libc::c_void>(),
            std::mem::size_of::<T>() as libc::c_uint,
        )
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        Err(io::Error::new(e.kind(), format!("{what}: {e}")))
    } else {
        Ok(rc)
    }
}

fn owned(fd: libc::c_long) -> OwnedFd {
    // SAFETY: `fd` is a descriptor the bpf call just created for us
    // (non-negative, checked by `sys_bpf`) and nothing else owns it.
    unsafe { OwnedFd::from_raw_fd(fd as RawFd) }
}

fn name16(s: &str) -> [u8; 16] {
    let mut n = [0u8; 16];
    // At most 15 bytes: the kernel wants a NUL-terminated name.
    for (d, b) in n.iter_mut().zip(s.bytes().take(15)) {
        *d = b;
    }
    n
}

fn load_program(insns: &[Insn], name: &str) -> io::Result<OwnedFd> {
    let license = c"GPL";
    let mut attr = ProgLoadAttr {
        prog_type: BPF_PROG_TYPE_XDP,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level: 0,
        log_size: 0,
        log_buf: 0,
        kern_version: 0,
        prog_flags: 0,
        prog_name: name16(name),
        prog_ifindex: 0,
        expected_attach_type: BPF_XDP,
    };
    // SAFETY: `attr` is the BPF_PROG_LOAD struct; `insns` and `license`
    // outlive the call.
    match unsafe { sys_bpf(BPF_PROG_LOAD, &mut attr, "loading the XDP program") } {
        Ok(fd) => Ok(owned(fd)),
        Err(first) => {
            // Load again with the verifier's log, for the error message.
            let mut log = vec![0u8; 64 * 1024];
            attr.log_level = 1;
            attr.log_size = log.len() as u32;
            attr.log_buf = log.as_mut_ptr() as u64;
            // SAFETY: as above; `log` is writable for `log_size` bytes
            // and outlives the call.
            match unsafe { sys_bpf(BPF_PROG_LOAD, &mut attr, "loading the XDP program") } {
                Ok(fd) => Ok(owned(fd)),
                Err(_) => {
                    let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
                    let text = String::from_utf8_lossy(&log[..end]);
                    Err(io::Error::new(
                        first.kind(),
                        format!("{first}; verifier log:\n{text}"),
                    ))
                }
            }
        }
    }
}

/// Where an XDP program runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpMode {
    /// In the driver, before any `sk_buff` exists (`XDP_FLAGS_DRV_MODE`).
    Native,
    /// In the generic receive path, on an `sk_buff` (`XDP_FLAGS_SKB_MODE`):
    /// works on any interface, slower.
    Generic,
}

/// Which attach mode to ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpAttach {
    /// Native, or generic when the driver refuses native mode.
    Auto,
    /// Native only.
    Native,
    /// Generic only.
    Generic,
}

/// An XDP program attached to an interface through a BPF link; detached
/// when dropped (see module docs).
pub struct XdpProgram {
    /// Declared first: detaching comes before the program and map go.
    link: OwnedFd,
    _prog: OwnedFd,
    /// The `XSKMAP` (absent for [`XdpProgram::pass`]).
    map: Option<OwnedFd>,
    ifindex: u32,
    queues: u32,
    mode: XdpMode,
}

impl std::fmt::Debug for XdpProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdpProgram")
            .field("link", &self.link.as_raw_fd())
            .field("ifindex", &self.ifindex)
            .field("queues", &self.queues)
            .field("mode", &self.mode)
            .finish()
    }
}

fn attach(prog: &OwnedFd, ifindex: u32, want: XdpAttach) -> io::Result<(OwnedFd, XdpMode)> {
    let try_mode = |flags: u32| {
        let mut attr = LinkCreateAttr {
            prog_fd: prog.as_raw_fd() as u32,
            target_ifindex: ifindex,
            attach_type: BPF_XDP,
            flags,
        };
        // SAFETY: `attr` is the BPF_LINK_CREATE struct; it holds no
        // pointers.
        unsafe { sys_bpf(BPF_LINK_CREATE, &mut attr, "attaching the XDP program") }.map(owned)
    };
    match want {
        XdpAttach::Native => try_mode(XDP_FLAGS_DRV_MODE).map(|l| (l, XdpMode::Native)),
        XdpAttach::Generic => try_mode(XDP_FLAGS_SKB_MODE).map(|l| (l, XdpMode::Generic)),
        XdpAttach::Auto => match try_mode(XDP_FLAGS_DRV_MODE) {
            Ok(l) => Ok((l, XdpMode::Native)),
            // No native support (EOPNOTSUPP) or a driver constraint it
            // rejects (EINVAL: MTU, queue count...): generic mode.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL)) => {
                try_mode(XDP_FLAGS_SKB_MODE).map(|l| (l, XdpMode::Generic))
            }
            Err(e) => Err(e),
        },
    }
}

impl XdpProgram {
    /// Load and attach the redirect program on `ifname` with an `XSKMAP`
    /// of `queues` slots (one per receive queue; queues without a socket
    /// pass frames to the stack).
    pub fn redirect_to_sockets(
        ifname: &str,
        queues: u32,
        want: XdpAttach,
    ) -> io::Result<XdpProgram> {
        let ifindex = ifindex(ifname)?;
        let queues = queues.max(1);
        let mut attr = MapCreateAttr {
            map_type: BPF_MAP_TYPE_XSKMAP,
            key_size: 4,
            value_size: 4,
            max_entries: queues,
            map_flags: 0,
            inner_map_fd: 0,
            numa_node: 0,
            map_name: name16("offlow_xsks"),
        };
        // SAFETY: `attr` is the BPF_MAP_CREATE struct; no pointers.
        let map = owned(unsafe { sys_bpf(BPF_MAP_CREATE, &mut attr, "creating the XSKMAP") }?);
        let prog = load_program(&redirect_program(map.as_raw_fd()), "offlow_xsk")?;
        let (link, mode) = attach(&prog, ifindex, want)?;
        Ok(XdpProgram {
            link,
            _prog: prog,
            map: Some(map),
            ifindex,
            queues,
            mode,
        })
    }

    /// Load and attach a program that passes every frame: what a veth
    /// peer needs before frames can be *redirected into* the veth (see
    /// the tests), harmless otherwise.
    pub fn pass(ifname: &str, want: XdpAttach) -> io::Result<XdpProgram> {
        let ifindex = ifindex(ifname)?;
        let prog = load_program(&pass_program(), "offlow_pass")?;
        let (link, mode) = attach(&prog, ifindex, want)?;
        Ok(XdpProgram {
            link,
            _prog: prog,
            map: None,
            ifindex,
            queues: 0,
            mode,
        })
    }

    /// The mode the program was attached in.
    pub fn mode(&self) -> XdpMode {
        self.mode
    }

    /// The interface it is attached to.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// Slots in its `XSKMAP` (0 for a pass program).
    pub fn queues(&self) -> u32 {
        self.queues
    }

    /// Steer queue `queue` to the `AF_XDP` socket `xsk` (bound to that
    /// queue of this interface). The kernel removes the entry itself when
    /// the socket closes.
    pub fn set_socket(&self, queue: u32, xsk: RawFd) -> io::Result<()> {
        let Some(map) = &self.map else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a pass program has no socket map",
            ));
        };
        if queue >= self.queues {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("queue {queue} beyond the map's {} slots", self.queues),
            ));
        }
        let key = queue;
        let value = xsk as u32;
        let mut attr = MapElemAttr {
            map_fd: map.as_raw_fd() as u32,
            _pad: 0,
            key: (&key as *const u32) as u64,
            value: (&value as *const u32) as u64,
            flags: 0, // BPF_ANY
        };
        // SAFETY: `attr` is the BPF_MAP_UPDATE_ELEM struct; `key` and
        // `value` are live u32s (the map's key and value size).
        unsafe { sys_bpf(BPF_MAP_UPDATE_ELEM, &mut attr, "inserting into the XSKMAP") }.map(|_| ())
    }
}

/// Receive queues of `ifname` (ethtool channels: the larger of the RX and
/// combined maxima), or `None` when the driver does not say.
pub fn queue_count(ifname: &str) -> Option<u32> {
    channels(ifname).map(|(max, _)| max)
}

/// Receive queues `ifname` has now (ethtool channels: the larger of the
/// current RX and combined counts), as opposed to the most it could have
/// ([`queue_count`]); `None` when the driver does not say.
pub fn active_queue_count(ifname: &str) -> Option<u32> {
    channels(ifname).map(|(_, now)| now)
}

/// `ETHTOOL_GCHANNELS` of `ifname`: (most receive queues, current ones).
fn channels(ifname: &str) -> Option<(u32, u32)> {
    #[repr(C)]
    #[derive(Default)]
    struct Channels {
        cmd: u32,
        max_rx: u32,
        max_tx: u32,
        max_other: u32,
        max_combined: u32,
        rx_count: u32,
        tx_count: u32,
        other_count: u32,
        combined_count: u32,
    }
    // SAFETY: an all-zero ifreq is valid.
    let mut r: libc::ifreq = unsafe { std::mem::zeroed() };
    if ifname.len() >= r.ifr_name.len() {
        return None;
    }
    for (d, s) in r.ifr_name.iter_mut().zip(ifname.bytes()) {
        *d = s as libc::c_char;
    }
    let mut ch = Channels {
        cmd: ETHTOOL_GCHANNELS,
        ..Channels::default()
    };
    r.ifr_ifru.ifru_data = (&mut ch as *mut Channels).cast();
    // SAFETY: plain socket creation; checked.
    let s = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if s < 0 {
        return None;
    }
    // SAFETY: fresh descriptor, owned (closed) from here on.
    let s = unsafe { OwnedFd::from_raw_fd(s) };
    // SAFETY: SIOCETHTOOL with GCHANNELS writes a `Channels` through
    // `ifru_data`, which points at our live `ch`.
    let rc = unsafe { libc::ioctl(s.as_raw_fd(), SIOCETHTOOL, &mut r) };
    if rc < 0 {
        return None;
    }
    Some((
        ch.max_rx.max(ch.max_combined).max(1),
        ch.rx_count.max(ch.combined_count).max(1),
    ))
}

// ---------------------------------------------------------------------
// Rings and UMEM
// ---------------------------------------------------------------------

/// `struct xdp_ring_offset`.
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct RingOffset {
    producer: u64,
    consumer: u64,
    desc: u64,
    flags: u64,
}

/// `struct xdp_mmap_offsets`.
#[repr(C)]
#[derive(Default)]
struct MmapOffsets {
    rx: RingOffset,
    tx: RingOffset,
    fr: RingOffset,
    cr: RingOffset,
}

/// `struct xdp_umem_reg` (Linux 6.8 layout; older kernels accept it since
/// the trailing field is 0).
#[repr(C)]
struct UmemReg {
    addr: u64,
    len: u64,
    chunk_size: u32,
    headroom: u32,
    flags: u32,
    tx_metadata_len: u32,
}

/// `struct sockaddr_xdp`.
#[repr(C)]
struct SockaddrXdp {
    family: u16,
    flags: u16,
    ifindex: u32,
    queue_id: u32,
    shared_umem_fd: u32,
}

/// `struct xdp_statistics` (Linux 5.9 layout).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XdpStatistics {
    /// Frames dropped for other reasons (in copy mode: also no frame in
    /// the fill ring).
    pub rx_dropped: u64,
    /// RX frames dropped for an invalid descriptor.
    pub rx_invalid_descs: u64,
    /// TX descriptors rejected as invalid.
    pub tx_invalid_descs: u64,
    /// Frames dropped because the RX ring was full.
    pub rx_ring_full: u64,
    /// Times the fill ring was found empty.
    pub rx_fill_ring_empty_descs: u64,
    /// Times the TX ring was found empty when woken.
    pub tx_ring_empty_descs: u64,
}

/// One mapped ring. `local` is our index (producer for fill/TX, consumer
/// for RX/completion), possibly ahead of what we published; `cached` is
/// the kernel's index as last loaded.
struct Ring {
    map: *mut u8,
    map_len: usize,
    producer: usize,
    consumer: usize,
    flags: usize,
    desc: usize,
    mask: u32,
    size: u32,
    local: u32,
    cached: u32,
}

impl Ring {
    /// Map ring `pgoff` of `fd` with `size` entries of `desc_size` bytes.
    fn map(
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

    fn consumer(&self) -> &AtomicU32 {
        self.word(self.consumer)
    }

    fn needs_wakeup(&self) -> bool {
        self.word(self.flags).load(Ordering::Relaxed) & XDP_RING_NEED_WAKEUP != 0
    }

    /// The address of slot `idx` for descriptors of `desc_size` bytes.
    fn slot(&self, idx: u32, desc_size: usize) -> *mut u8 {
        let i = (idx & self.mask) as usize;
        // SAFETY: `i < size` and the mapping holds `size` descriptors of
        // `desc_size` bytes after `desc` (its length was computed so).
        unsafe { self.map.add(self.desc + i * desc_size) }
    }

    // -- producer side (fill, TX) --

    /// Free slots, refreshing the kernel's consumer index when fewer than
    /// `want` seem free.
    fn free(&mut self, want: u32) -> u32 {
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

    fn publish(&self) {
        // Release: descriptors (and TX frame bytes) written before are
        // visible to the kernel's acquire load of the producer.
        self.producer().store(self.local, Ordering::Release);
    }

    // -- consumer side (RX, completion) --

    /// Entries ready to read, refreshing the producer index when none
    /// seem ready.
    fn ready(&mut self) -> u32 {
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

    fn release(&mut self, n: u32) {
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

/// The UMEM: `frames` frames of `frame_size` bytes, anonymous memory.
struct Umem {
    base: *mut u8,
    len: usize,
    frame_size: u64,
}

impl Umem {
    /// Bytes `[addr, addr + len)`, if inside one frame of the UMEM.
    fn range(&self, addr: u64, len: u32) -> Option<(usize, usize)> {
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

// ---------------------------------------------------------------------
// The port
// ---------------------------------------------------------------------

/// How to bind the socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XskBind {
    /// Zero-copy if the driver supports it, else copy (kernel fallback).
    Auto,
    /// Copy mode only (`XDP_COPY`).
    Copy,
    /// Zero-copy only (`XDP_ZEROCOPY`): fails on drivers without it.
    ZeroCopy,
}

/// How an [`AfXdpPort`] is set up.
#[derive(Debug, Clone)]
pub struct AfXdpConfig {
    /// Interface name.
    pub ifname: String,
    /// Receive queue to bind.
    pub queue_id: u32,
    /// UMEM frames (a power of two, at least 4); half receive, half
    /// transmit.
    pub frame_count: u32,
    /// Bytes per frame: a power of two from 2048 to the page size. In copy
    /// mode the kernel keeps 256 bytes of headroom, so received frames are
    /// at most `frame_size - 256` bytes.
    pub frame_size: u32,
    /// RX ring entries (a power of two).
    pub rx_ring_size: u32,
    /// TX ring entries (a power of two).
    pub tx_ring_size: u32,
    /// XDP attach mode for the port's own program.
    pub attach: XdpAttach,
    /// Socket bind mode.
    pub bind: XskBind,
}

impl AfXdpConfig {
    /// Defaults for `ifname`: queue 0, 4096 frames of 2048 bytes, 2048-entry
    /// rings, native XDP if possible, zero-copy if possible.
    pub fn new(ifname: &str) -> AfXdpConfig {
        AfXdpConfig {
            ifname: ifname.to_string(),
            queue_id: 0,
            frame_count: 4096,
            frame_size: 2048,
            rx_ring_size: 2048,
            tx_ring_size: 2048,
            attach: XdpAttach::Auto,
            bind: XskBind::Auto,
        }
    }
}

/// Drops and anomalies beyond [`PortStats`], by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AfXdpCounters {
    /// `send` found no free TX frame.
    pub drop_no_tx_frame: u64,
    /// `send` found the TX ring full.
    pub drop_tx_ring_full: u64,
    /// `send` got a frame longer than a UMEM frame.
    pub drop_tx_too_long: u64,
    /// RX descriptors outside the UMEM or the RX half (frame not reused).
    pub bad_rx_desc: u64,
    /// Completion addresses outside the TX half (frame not reused).
    pub bad_completion: u64,
    /// `sendto` kicks made.
    pub tx_kicks: u64,
    /// `recvfrom` wakeups made for the fill ring.
    pub rx_wakeups: u64,
}

/// An interface queue through an `AF_XDP` socket (see module docs).
pub struct AfXdpPort {
    name: String,
    // Field order is drop order: rings unmapped, then the socket closed
    // (which also removes it from the XSKMAP), then the program detached,
    // then the UMEM unmapped.
    rx: Ring,
    tx: Ring,
    fill: Ring,
    comp: Ring,
    fd: OwnedFd,
    program: Option<Arc<XdpProgram>>,
    umem: Umem,
    /// First address of the TX half.
    tx_base: u64,
    /// Free TX frames (addresses); preallocated for the whole TX half.
    tx_free: Vec<u64>,
    /// Frames in the TX half: `tx_free` never holds more.
    tx_frames: usize,
    /// TX descriptors written but not yet published, and their bytes.
    tx_unpublished: u32,
    tx_unpublished_bytes: u64,
    zerocopy: bool,
    queue_id: u32,
    counters: AfXdpCounters,
    stats: PortStats,
}

// SAFETY: the rings and UMEM are mappings owned by the port alone (the
// kernel is the only other party); moving the port moves that ownership.
// Nothing is shared between threads, so not `Sync`.
unsafe impl Send for AfXdpPort {}

use crate::sys::cvt;

fn setsockopt<T>(fd: RawFd, opt: libc::c_int, val: &T, what: &str) -> io::Result<()> {
    crate::sys::setsockopt(fd, SOL_XDP, opt, val, what)
}

/// getsockopt into `val`; returns the length the kernel wrote.
fn getsockopt<T>(fd: RawFd, opt: libc::c_int, val: &mut T, what: &str) -> io::Result<usize> {
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `val`/`len` are live; the kernel writes at most `len` bytes.
    let rc = unsafe { libc::getsockopt(fd, SOL_XDP, opt, (val as *mut T).cast(), &mut len) };
    cvt(rc, what).map(|_| len as usize)
}

fn invalid(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg.to_string())
}

impl AfXdpPort {
    /// Open queue `cfg.queue_id` of `cfg.ifname` with a program of its own
    /// (an `XSKMAP` sized to the interface's queue count). Fails with
    /// `EBUSY` if another XDP program is attached to the interface.
    pub fn open(cfg: &AfXdpConfig) -> io::Result<AfXdpPort> {
        let queues = queue_count(&cfg.ifname)
            .unwrap_or(1)
            .max(cfg.queue_id.saturating_add(1));
        let program = Arc::new(XdpProgram::redirect_to_sockets(
            &cfg.ifname,
            queues,
            cfg.attach,
        )?);
        AfXdpPort::open_with(cfg, program)
    }

    /// Open queue `cfg.queue_id` of `cfg.ifname` and register it in an
    /// existing redirect program of that interface (one program shared by
    /// the ports of all its queues). `cfg.attach` is ignored.
    pub fn open_with(cfg: &AfXdpConfig, program: Arc<XdpProgram>) -> io::Result<AfXdpPort> {
        let index = ifindex(&cfg.ifname)?;
        if program.ifindex() != index {
            return Err(invalid("the program is attached to another interface"));
        }
        let page = 4096u32;
        if !cfg.frame_count.is_power_of_two()
            || cfg.frame_count < 4
            || !cfg.frame_size.is_power_of_two()
            || !(2048..=page).contains(&cfg.frame_size)
            || !cfg.rx_ring_size.is_power_of_two()
            || !cfg.tx_ring_size.is_power_of_two()
        {
            return Err(invalid(
                "AF_XDP geometry: frame count a power of two >= 4, frame size a power of \
                 two in 2048..=4096, ring sizes powers of two",
            ));
        }
        let half = cfg.frame_count / 2;
        let umem_len = cfg.frame_count as usize * cfg.frame_size as usize;

        // SAFETY: plain socket creation; checked.
        let raw = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("AF_XDP socket (needs CAP_NET_RAW): {e}"),
            ));
        }
        // SAFETY: fresh descriptor, owned from here on.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let s = fd.as_raw_fd();

        // SAFETY: an anonymous private mapping; checked, then owned by
        // `Umem`.
        let base = unsafe {
            libc::mmap(
                ptr::null_mut(),
                umem_len,
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
        let umem = Umem {
            base: base.cast(),
            len: umem_len,
            frame_size: u64::from(cfg.frame_size),
        };
        let reg = UmemReg {
            addr: base as u64,
            len: umem_len as u64,
            chunk_size: cfg.frame_size,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        setsockopt(s, XDP_UMEM_REG, &reg, "XDP_UMEM_REG")?;
        // Fill and completion rings hold a whole half each (see the
        // module invariants).
        setsockopt(s, XDP_UMEM_FILL_RING, &half, "XDP_UMEM_FILL_RING")?;
        setsockopt(
            s,
            XDP_UMEM_COMPLETION_RING,
            &half,
            "XDP_UMEM_COMPLETION_RING",
        )?;
        setsockopt(s, XDP_RX_RING, &cfg.rx_ring_size, "XDP_RX_RING")?;
        setsockopt(s, XDP_TX_RING, &cfg.tx_ring_size, "XDP_TX_RING")?;
        let mut off = MmapOffsets::default();
        let got = getsockopt(s, XDP_MMAP_OFFSETS, &mut off, "XDP_MMAP_OFFSETS")?;
        if got != std::mem::size_of::<MmapOffsets>() {
            // Pre-5.4 layout without the flags word: no need_wakeup.
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "kernel too old for AF_XDP need_wakeup (Linux 5.4+)",
            ));
        }
        let rx = Ring::map(
            s,
            &off.rx,
            XDP_PGOFF_RX_RING,
            cfg.rx_ring_size,
            XDP_DESC_SIZE,
            "RX ring",
        )?;
        let tx = Ring::map(
            s,
            &off.tx,
            XDP_PGOFF_TX_RING,
            cfg.tx_ring_size,
            XDP_DESC_SIZE,
            "TX ring",
        )?;
        let mut fill = Ring::map(
            s,
            &off.fr,
            XDP_UMEM_PGOFF_FILL_RING,
            half,
            UMEM_DESC_SIZE,
            "fill ring",
        )?;
        let comp = Ring::map(
            s,
            &off.cr,
            XDP_UMEM_PGOFF_COMPLETION_RING,
            half,
            UMEM_DESC_SIZE,
            "completion ring",
        )?;

        // Every RX frame goes to the fill ring before binding, so the
        // first frames already have somewhere to land.
        let fs = u64::from(cfg.frame_size);
        if fill.free(half) < half {
            return Err(io::Error::other("fresh fill ring not empty"));
        }
        for i in 0..half {
            let slot = fill.slot(fill.local, UMEM_DESC_SIZE);
            // SAFETY: `slot` is inside the fill ring mapping (8 bytes);
            // unaligned write so no alignment is assumed.
            unsafe { ptr::write_unaligned(slot.cast::<u64>(), u64::from(i) * fs) };
            fill.local = fill.local.wrapping_add(1);
        }
        fill.publish();

        let mode_flag = match cfg.bind {
            XskBind::Auto => 0,
            XskBind::Copy => XDP_COPY,
            XskBind::ZeroCopy => XDP_ZEROCOPY,
        };
        let sa = SockaddrXdp {
            family: libc::AF_XDP as u16,
            flags: XDP_USE_NEED_WAKEUP | mode_flag,
            ifindex: index,
            queue_id: cfg.queue_id,
            shared_umem_fd: 0,
        };
        // A socket closed just before (say, the previous port on this
        // queue) keeps the queue registered until the kernel's deferred
        // pool release runs (xp_release_deferred, a work item): `EBUSY`
        // for a moment. Retry for up to a second before giving up.
        let deadline = Instant::now() + Duration::from_secs(1);
        loop {
            // SAFETY: `sa` is a live sockaddr_xdp of the size passed.
            let rc = unsafe {
                libc::bind(
                    s,
                    (&sa as *const SockaddrXdp).cast(),
                    std::mem::size_of::<SockaddrXdp>() as libc::socklen_t,
                )
            };
            if rc == 0 {
                break;
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EBUSY) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            return Err(io::Error::new(
                e.kind(),
                format!("binding to {} queue {}: {e}", cfg.ifname, cfg.queue_id),
            ));
        }
        let mut opts = 0u32;
        getsockopt(s, XDP_OPTIONS, &mut opts, "XDP_OPTIONS")?;
        let zerocopy = opts & XDP_OPTIONS_ZEROCOPY != 0;
        program.set_socket(cfg.queue_id, s)?;

        let tx_base = u64::from(half) * fs;
        let mut tx_free = Vec::with_capacity(half as usize);
        tx_free.extend((0..u64::from(half)).rev().map(|i| tx_base + i * fs));
        Ok(AfXdpPort {
            name: cfg.ifname.clone(),
            rx,
            tx,
            fill,
            comp,
            fd,
            program: Some(program),
            umem,
            tx_base,
            tx_free,
            tx_frames: half as usize,
            tx_unpublished: 0,
            tx_unpublished_bytes: 0,
            zerocopy,
            queue_id: cfg.queue_id,
            counters: AfXdpCounters::default(),
            stats: PortStats::default(),
        })
    }

    /// Whether the socket is bound in zero-copy mode (else copy mode).
    pub fn zerocopy(&self) -> bool {
        self.zerocopy
    }

    /// The bound queue.
    pub fn queue_id(&self) -> u32 {
        self.queue_id
    }

    /// The program steering frames to this socket.
    pub fn program(&self) -> Option<&Arc<XdpProgram>> {
        self.program.as_ref()
    }

    /// Drops and anomalies by reason.
    pub fn counters(&self) -> AfXdpCounters {
        self.counters
    }

    /// The kernel's counters for this socket (cumulative).
    pub fn xdp_statistics(&self) -> io::Result<XdpStatistics> {
        let mut st = XdpStatistics::default();
        getsockopt(
            self.fd.as_raw_fd(),
            XDP_STATISTICS,
            &mut st,
            "XDP_STATISTICS",
        )?;
        Ok(st)
    }

    /// Take finished TX frames back from the completion ring.
    fn reclaim(&mut self) {
        let n = self.comp.ready();
        if n == 0 {
            return;
        }
        let half = self.tx_frames;
        for k in 0..n {
            let slot = self
                .comp
                .slot(self.comp.local.wrapping_add(k), UMEM_DESC_SIZE);
            // SAFETY: `slot` is inside the completion ring mapping, and the
            // kernel published it (acquire load in `ready`).
            let addr = unsafe { ptr::read_unaligned(slot.cast::<u64>()) };
            let chunk = addr & !(self.umem.frame_size - 1);
            // Only frames of the TX half, and never more than it holds:
            // a bogus address must not alias a frame still in use.
            if chunk >= self.tx_base && chunk < self.umem.len as u64 && self.tx_free.len() < half {
                self.tx_free.push(chunk);
            } else {
                self.counters.bad_completion += 1;
            }
        }
        self.comp.release(n);
    }

    /// Whether TX descriptors were published that the kernel has not
    /// taken yet.
    fn tx_pending_in_kernel(&self) -> bool {
        self.tx.consumer().load(Ordering::Acquire) != self.tx.local
    }

    /// Wake the kernel to transmit: `sendto(fd, NULL, 0, MSG_DONTWAIT)`.
    /// In copy mode each call sends at most 32 frames (and returns
    /// `EAGAIN` when more remain), so it is repeated, reclaiming
    /// completions in between, until the kernel took everything or says
    /// it cannot now (`ENOBUFS`, `EBUSY`, `ENETDOWN`: retried at the next
    /// flush, the descriptors stay queued).
    fn kick(&mut self) -> io::Result<()> {
        // Enough rounds for the whole ring at 32 per call, plus slack.
        let mut rounds = self.tx.size / 32 + 4;
        while rounds > 0 && self.tx_pending_in_kernel() {
            rounds -= 1;
            self.counters.tx_kicks += 1;
            // SAFETY: a zero-length send on our own socket; no buffers.
            let rc = unsafe {
                libc::sendto(
                    self.fd.as_raw_fd(),
                    ptr::null(),
                    0,
                    libc::MSG_DONTWAIT,
                    ptr::null(),
                    0,
                )
            };
            if rc < 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EAGAIN | libc::EINTR) => {}
                    Some(libc::ENOBUFS | libc::EBUSY | libc::ENETDOWN) => break,
                    _ => return Err(io::Error::new(e.kind(), format!("AF_XDP tx kick: {e}"))),
                }
            }
            self.reclaim();
            if self.zerocopy {
                // The driver transmits asynchronously; one kick suffices.
                break;
            }
        }
        Ok(())
    }
}

impl Port for AfXdpPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn recv(&mut self, max: usize, on_frame: &mut dyn FnMut(&[u8], RxMeta)) -> io::Result<usize> {
        let max = u32::try_from(max).unwrap_or(u32::MAX);
        let n = self.rx.ready().min(max);
        if n > 0 {
            // Every RX frame is either in the kernel's hands or here, and
            // the fill ring holds them all: room for `n` is certain. Check
            // anyway rather than overwrite a slot.
            let room = self.fill.free(n);
            let n = n.min(room);
            let fs = self.umem.frame_size;
            for k in 0..n {
                let slot = self.rx.slot(self.rx.local.wrapping_add(k), XDP_DESC_SIZE);
                // SAFETY: `slot` is a 16-byte descriptor inside the RX ring
                // mapping, published by the kernel (acquire in `ready`).
                let (addr, len) = unsafe {
                    (
                        ptr::read_unaligned(slot.cast::<u64>()),
                        ptr::read_unaligned(slot.add(8).cast::<u32>()),
                    )
                };
                let chunk = addr & !(fs - 1);
                match self.umem.range(addr, len) {
                    Some((start, l)) if chunk < self.tx_base => {
                        // SAFETY: `range` checked [start, start + l) lies in
                        // the UMEM; the frame is ours until we put it in the
                        // fill ring below, after the callback returned.
                        let frame =
                            unsafe { std::slice::from_raw_parts(self.umem.base.add(start), l) };
                        self.stats.rx_packets += 1;
                        self.stats.rx_bytes += l as u64;
                        on_frame(
                            frame,
                            RxMeta {
                                vlan: None,
                                csum_partial: false,
                                wire_len: len,
                            },
                        );
                        let f = self.fill.slot(self.fill.local, UMEM_DESC_SIZE);
                        // SAFETY: an 8-byte slot inside the fill ring
                        // mapping, free (checked with `free` above).
                        unsafe { ptr::write_unaligned(f.cast::<u64>(), chunk) };
                        self.fill.local = self.fill.local.wrapping_add(1);
                    }
                    _ => {
                        // Not a frame we lent: never hand it out or reuse it.
                        self.stats.rx_errors += 1;
                        self.counters.bad_rx_desc += 1;
                    }
                }
            }
            self.fill.publish();
            self.rx.release(n);
            let handed = n as usize;
            self.maybe_wake_rx();
            return Ok(handed);
        }
        self.maybe_wake_rx();
        Ok(0)
    }

    fn send(&mut self, frame: &[u8]) -> bool {
        if frame.len() as u64 > self.umem.frame_size {
            self.counters.drop_tx_too_long += 1;
            self.stats.tx_dropped += 1;
            return false;
        }
        if self.tx_free.is_empty() {
            self.reclaim();
        }
        let Some(&addr) = self.tx_free.last() else {
            self.counters.drop_no_tx_frame += 1;
            self.stats.tx_dropped += 1;
            return false;
        };
        if self.tx.free(1) == 0 {
            self.counters.drop_tx_ring_full += 1;
            self.stats.tx_dropped += 1;
            return false;
        }
        self.tx_free.pop();
        let Some((start, len)) = self.umem.range(addr, frame.len() as u32) else {
            // Free-list addresses are frame starts of the TX half, and the
            // length was checked: unreachable, but never write out of
            // bounds on a broken invariant.
            self.stats.tx_dropped += 1;
            return false;
        };
        // SAFETY: [start, start + len) is inside the UMEM (checked by
        // `range`), the frame is on no ring (it came off the free list),
        // and `frame` is a distinct slice of the same length.
        unsafe {
            ptr::copy_nonoverlapping(frame.as_ptr(), self.umem.base.add(start), len);
        }
        let slot = self.tx.slot(self.tx.local, XDP_DESC_SIZE);
        // SAFETY: a 16-byte descriptor slot inside the TX ring mapping,
        // free (checked with `free` above).
        unsafe {
            ptr::write_unaligned(slot.cast::<u64>(), addr);
            ptr::write_unaligned(slot.add(8).cast::<u32>(), len as u32);
            ptr::write_unaligned(slot.add(12).cast::<u32>(), 0);
        }
        self.tx.local = self.tx.local.wrapping_add(1);
        self.tx_unpublished += 1;
        self.tx_unpublished_bytes += len as u64;
        true
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.tx_unpublished > 0 {
            self.tx.publish();
            self.stats.tx_packets += u64::from(self.tx_unpublished);
            self.stats.tx_bytes += self.tx_unpublished_bytes;
            self.tx_unpublished = 0;
            self.tx_unpublished_bytes = 0;
        }
        // Copy mode transmits only inside the kick; zero-copy drivers only
        // need one when they said so (need_wakeup).
        if self.tx_pending_in_kernel() && (!self.zerocopy || self.tx.needs_wakeup()) {
            self.kick()?;
        }
        self.reclaim();
        Ok(())
    }

    fn poll_fd(&self) -> Option<RawFd> {
        Some(self.fd.as_raw_fd())
    }

    fn tx_outstanding(&self) -> bool {
        // Copy mode transmits only inside a kick: descriptors left in the
        // ring after one that stopped early wait for the next flush.
        !self.zerocopy && self.tx_pending_in_kernel()
    }

    fn stats(&mut self) -> PortStats {
        let mut st = self.stats;
        if let Ok(k) = self.xdp_statistics() {
            // Cumulative in the kernel: added to a copy, not accumulated.
            st.rx_dropped += k.rx_dropped + k.rx_ring_full;
            st.rx_errors += k.rx_invalid_descs;
            st.tx_dropped += k.tx_invalid_descs;
        }
        st
    }
}

impl AfXdpPort {
    /// A zero-copy driver that ran out of fill-ring frames sleeps until
    /// woken (`NEED_WAKEUP` on the fill ring).
    fn maybe_wake_rx(&mut self) {
        if self.fill.needs_wakeup() {
            self.counters.rx_wakeups += 1;
            // SAFETY: a zero-length receive on our own socket; no buffers.
            unsafe {
                libc::recvfrom(
                    self.fd.as_raw_fd(),
                    ptr::null_mut(),
                    0,
                    libc::MSG_DONTWAIT,
                    ptr::null_mut(),
                    ptr::null_mut(),
                );
            }
        }
    }
}

impl std::fmt::Debug for AfXdpPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AfXdpPort")
            .field("name", &self.name)
            .field("queue_id", &self.queue_id)
            .field("zerocopy", &self.zerocopy)
            .field("program", &self.program)
            .finish()
    }
}

/// One interface's AF_XDP sockets for one thread: a socket per receive
/// queue the thread serves, all registered in one [`XdpProgram`].
///
/// A frame can only reach the socket bound to the queue it arrived on, so
/// every queue of the interface must have a socket somewhere, or the
/// program passes that queue's frames to the kernel stack. With `n`
/// threads each takes the queues `i, i + n, i + 2n, ...`
/// ([`AfXdpQueues::open`]). Receive takes from the sockets in turn,
/// starting after the one that went first last time (none starves);
/// transmit goes through the first socket (any socket may send on its
/// interface).
pub struct AfXdpQueues {
    ports: Vec<AfXdpPort>,
    /// Socket to read first next time.
    next: usize,
}

impl AfXdpQueues {
    /// Open `cfg.ifname`'s queues `queues` (`cfg.queue_id` is ignored),
    /// each registered in `program`. At least one queue.
    pub fn open(
        cfg: &AfXdpConfig,
        program: &Arc<XdpProgram>,
        queues: &[u32],
    ) -> io::Result<AfXdpQueues> {
        if queues.is_empty() {
            return Err(invalid("an AF_XDP port needs at least one queue"));
        }
        let mut ports = Vec::with_capacity(queues.len());
        for &q in queues {
            let mut c = cfg.clone();
            c.queue_id = q;
            ports.push(AfXdpPort::open_with(&c, program.clone())?);
        }
        Ok(AfXdpQueues { ports, next: 0 })
    }

    /// The queues `thread` of `threads` serves among `queues`: `thread`,
    /// `thread + threads`, ... (empty when there are fewer queues than
    /// threads and this thread gets none).
    pub fn share(queues: u32, thread: usize, threads: usize) -> Vec<u32> {
        (0..queues)
            .filter(|&q| q as usize % threads.max(1) == thread)
            .collect()
    }

    /// The sockets, by queue.
    pub fn sockets(&self) -> &[AfXdpPort] {
        &self.ports
    }
}

impl Port for AfXdpQueues {
    fn name(&self) -> &str {
        // Non-empty by construction.
        self.ports[0].name()
    }

    fn recv(&mut self, max: usize, on_frame: &mut dyn FnMut(&[u8], RxMeta)) -> io::Result<usize> {
        let n_ports = self.ports.len();
        let mut got = 0;
        for k in 0..n_ports {
            if got >= max {
                break;
            }
            let i = (self.next + k) % n_ports;
            got += self.ports[i].recv(max - got, on_frame)?;
        }
        self.next = (self.next + 1) % n_ports;
        Ok(got)
    }

    fn send(&mut self, frame: &[u8]) -> bool {
        self.ports[0].send(frame)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.ports[0].flush()
    }

    fn tx_outstanding(&self) -> bool {
        self.ports[0].tx_outstanding()
    }

    fn poll_fd(&self) -> Option<RawFd> {
        self.ports[0].poll_fd()
    }

    fn poll_fds(&self, out: &mut Vec<RawFd>) {
        for p in &self.ports {
            out.extend(p.poll_fd());
        }
    }

    fn stats(&mut self) -> PortStats {
        let mut total = PortStats::default();
        for p in &mut self.ports {
            total.add(&p.stats());
        }
        total
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn threads_share_the_queues_round_robin() {
        assert_eq!(AfXdpQueues::share(4, 0, 2), vec![0, 2]);
        assert_eq!(AfXdpQueues::share(4, 1, 2), vec![1, 3]);
        assert_eq!(AfXdpQueues::share(3, 0, 1), vec![0, 1, 2]);
        assert_eq!(AfXdpQueues::share(1, 1, 2), Vec::<u32>::new());
        // Every queue is served exactly once.
        for (queues, threads) in [(1, 1), (2, 2), (8, 3), (5, 5)] {
            let mut all: Vec<u32> = (0..threads)
                .flat_map(|t| AfXdpQueues::share(queues, t, threads))
                .collect();
            all.sort_unstable();
            assert_eq!(all, (0..queues).collect::<Vec<_>>());
        }
    }
    use super::*;

    #[test]
    fn instructions_encode_as_the_kernel_expects() {
        let p = redirect_program(7);
        // struct bpf_insn is 8 bytes: code, dst:4|src:4, off, imm.
        assert_eq!(std::mem::size_of::<Insn>(), 8);
        assert_eq!(
            (p[0].code, p[0].regs, p[0].off),
            (0x61, 0x12, 16),
            "r2 = *(u32 *)(r1 + 16)"
        );
        assert_eq!((p[1].code, p[1].regs, p[1].imm), (0x18, 0x11, 7));
        assert_eq!((p[2].code, p[2].imm), (0, 0), "second half of ld_imm64");
        assert_eq!((p[3].regs, p[3].imm), (0x03, 2));
        assert_eq!((p[4].code, p[4].imm), (0x85, 51));
        assert_eq!(p[5].code, 0x95);
    }

    #[test]
    fn attribute_structs_match_the_kernel_layout() {
        assert_eq!(std::mem::offset_of!(ProgLoadAttr, log_buf), 32);
        assert_eq!(std::mem::offset_of!(ProgLoadAttr, prog_name), 48);
        assert_eq!(std::mem::offset_of!(ProgLoadAttr, expected_attach_type), 68);
        assert_eq!(std::mem::offset_of!(MapCreateAttr, map_name), 28);
        assert_eq!(std::mem::offset_of!(MapElemAttr, value), 16);
        assert_eq!(std::mem::size_of::<LinkCreateAttr>(), 16);
        assert_eq!(std::mem::size_of::<UmemReg>(), 32);
        assert_eq!(std::mem::size_of::<SockaddrXdp>(), 16);
        assert_eq!(std::mem::size_of::<MmapOffsets>(), 128);
        assert_eq!(std::mem::size_of::<XdpStatistics>(), 48);
    }

    #[test]
    fn a_rejected_program_reports_the_verifier_log() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            assert!(std::env::var_os("CI").is_none(), "CI runs as root");
            eprintln!("skipping: needs root");
            return;
        }
        // r0 = XDP_PASS, then falls off the end: no exit.
        let bad = [insn(MOV64_IMM, 0, 0, 0, XDP_PASS)];
        let e = load_program(&bad, "offlow_bad").unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("verifier log:"), "{msg}");
        assert!(
            msg.len() > "verifier log:".len() + 40,
            "a log came back: {msg}"
        );
        assert!(load_program(&pass_program(), "offlow_pass").is_ok());
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
