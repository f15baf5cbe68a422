//! A Linux interface as a port: `AF_PACKET` with a memory-mapped receive
//! ring (TPACKET_V2 frames or TPACKET_V3 blocks) and `sendmmsg` transmit
//! batches.
//!
//! # Receive
//! Two ring layouts ([`RxRing`]), both read in place (no copy, no system
//! call while frames wait):
//! - **Frames** (TPACKET_V2, the default): fixed slots of `frame_size`
//!   bytes, each with its own status word. The kernel hands a slot over
//!   (`TP_STATUS_USER`) and wakes `poll` as soon as the frame is written
//!   (`tpacket_rcv` calls `sk_data_ready` per frame for V1/V2);
//!   [`AfPacketPort::recv`] gives each slot back (`TP_STATUS_KERNEL`) right
//!   after its frame was handed out. A lone frame reaches the worker in
//!   microseconds. `recv` takes every user-owned slot in ring order (a
//!   batch costs no system call), but each slot holds one frame: the ring
//!   needs more memory than a blocks ring for the same burst (8192 slots,
//!   16 MiB, by default) and costs more per frame at saturation (below).
//! - **Blocks** (TPACKET_V3): frames packed into fixed-size blocks, a
//!   block handed over when full or when its retire timer
//!   (`block_timeout_ms`) fires; `recv` walks the frames of the current
//!   block and gives the block back once every frame was handed out. The
//!   kernel wakes `poll` only when a block is retired, so a lone frame
//!   waits up to the retire timer (1 ms; the kernel's minimum): ping
//!   through the switch took 1.0-1.4 ms on average where the Linux bridge
//!   takes 0.04 ms (docs/bench-journal.md, issue 23). Kept because it
//!   batches better at saturation: frames packed densely cost the kernel
//!   and the reader fewer cache misses than 2 KiB-strided slots
//!   (~150-250 ns a frame less kernel CPU, measured).
//! - **Adaptive** (one worker): a frames socket and a blocks socket in a
//!   fanout group of their own (`PACKET_FANOUT_CBPF` picking the frames
//!   socket, `PACKET_FANOUT_FLAG_ROLLOVER`): the kernel writes to the
//!   frames ring while it has room and rolls over to the blocks ring when
//!   it has none. `recv` reads the blocks ring first, so a worker that is
//!   behind leaves the frames ring full and the port runs as a blocks ring
//!   until it has caught up. Measured so far: no better than frames alone
//!   on a loaded VM (rollover needs a quarter of the blocks ring free, so
//!   it holds less than a blocks ring); experimental.
//!
//! Frames the kernel marks are reported, not lost: a VLAN tag stripped by
//! offload comes back in [`RxMeta::vlan`], a partial checksum in
//! [`RxMeta::csum_partial`]. Frames longer than the ring holds (a frame
//! slot, or a block) arrive truncated; they are counted in `rx_errors`
//! and not handed out.
//! Outgoing frames (`PACKET_OUTGOING`: what the host itself sends on the
//! interface) are ignored.
//!
//! # Transmit
//! [`Port::send`] copies into a preallocated arena of `tx_batch` slots;
//! [`Port::flush`] sends them with one `sendmmsg`, bypassing the qdisc
//! layer (`PACKET_QDISC_BYPASS`) like a NIC driver queue would. Frames the
//! kernel refuses (queue full: `ENOBUFS`/`EAGAIN`) are counted as dropped.
//!
//! # Fanout
//! With [`AfPacketConfig::fanout_group`] several ports (one per worker) on
//! the same interface split its traffic by the kernel's symmetric flow hash
//! (`PACKET_FANOUT_HASH`, with IP defragmentation so fragments of one
//! datagram stay together): both directions of a flow land on one worker.
//!
//! # Invariants
//! - Every offset read from a ring block (first frame, next frame, MAC
//!   offset, snap length) is checked against the block before use; a bad
//!   one ends the block (counted) instead of reading outside it. In a
//!   frames ring the same offsets are checked against the frame's slot; a
//!   bad one costs that frame (counted) and the slot is given back.
//! - A slot or block is read only while its status says the user owns it
//!   (acquire load) and given back with a release store after the last
//!   read of it.
//! - The mapping lives exactly as long as the port; the socket is closed
//!   after it is unmapped.
//!
//! # Thread-safety
//! `Send`, not `Sync`: one thread owns the port and its ring.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr;
use std::sync::atomic::{fence, AtomicU32, Ordering};

use crate::{Port, PortStats, RxMeta};

const ETH_P_ALL: u16 = 0x0003;
const SOL_PACKET: libc::c_int = 263;
const PACKET_ADD_MEMBERSHIP: libc::c_int = 1;
const PACKET_RX_RING: libc::c_int = 5;
const PACKET_STATISTICS: libc::c_int = 6;
const PACKET_VERSION: libc::c_int = 10;
const PACKET_FANOUT: libc::c_int = 18;
const PACKET_QDISC_BYPASS: libc::c_int = 20;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const TPACKET_V2: libc::c_int = 1;
const TPACKET_V3: libc::c_int = 2;
const PACKET_MR_PROMISC: libc::c_ushort = 1;
const PACKET_FANOUT_DATA: libc::c_int = 22;
const PACKET_FANOUT_HASH: u32 = 0;
const PACKET_FANOUT_CBPF: u32 = 6;
const PACKET_FANOUT_FLAG_ROLLOVER: u32 = 0x1000;
const PACKET_FANOUT_FLAG_UNIQUEID: u32 = 0x2000;
const PACKET_FANOUT_FLAG_DEFRAG: u32 = 0x8000;
const PACKET_OUTGOING: u8 = 4;

const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1;
const TP_STATUS_CSUMNOTREADY: u32 = 1 << 3;
const TP_STATUS_VLAN_VALID: u32 = 1 << 4;
const TP_STATUS_VLAN_TPID_VALID: u32 = 1 << 6;

/// `struct tpacket_block_desc` offsets (version, offset_to_priv, then
/// `tpacket_hdr_v1`: block_status, num_pkts, offset_to_first_pkt, ...).
const BLOCK_STATUS: usize = 8;
const BLOCK_NUM_PKTS: usize = 12;
const BLOCK_FIRST_PKT: usize = 16;
/// `struct tpacket3_hdr` offsets (only V3 has `tp_next_offset`, at 0).
const PKT_NEXT: usize = 0;
/// `sockaddr_ll.sll_pkttype` within the `sockaddr_ll` that follows a
/// frame header.
const SLL_PKTTYPE: usize = 10;

/// Where the fields of a frame header are: `struct tpacket3_hdr` (V3)
/// or `struct tpacket2_hdr` (V2), include/uapi/linux/if_packet.h.
struct HdrLayout {
    snaplen: usize,
    len: usize,
    status: usize,
    mac: usize,
    vlan_tci: usize,
    /// V3's `hv1.tp_vlan_tci` is a `u32`, V2's `tp_vlan_tci` a `u16`.
    vlan_tci_wide: bool,
    vlan_tpid: usize,
    /// `TPACKET_ALIGN(sizeof(header))`: where `sockaddr_ll` starts.
    sll: usize,
}

const V3_HDR: HdrLayout = HdrLayout {
    snaplen: 12,
    len: 16,
    status: 20,
    mac: 24,
    vlan_tci: 32,
    vlan_tci_wide: true,
    vlan_tpid: 36,
    sll: 48,
};

const V2_HDR: HdrLayout = HdrLayout {
    status: 0,
    len: 4,
    snaplen: 8,
    mac: 12,
    vlan_tci: 24,
    vlan_tci_wide: false,
    vlan_tpid: 26,
    sll: 32,
};
/// `TPACKET2_HDRLEN`: the V2 header and the `sockaddr_ll` (20 bytes)
/// after it; the smallest frame slot the kernel accepts.
const V2_HDRLEN: u32 = 52;

#[repr(C)]
struct TpacketReq3 {
    block_size: u32,
    block_nr: u32,
    frame_size: u32,
    frame_nr: u32,
    retire_blk_tov: u32,
    sizeof_priv: u32,
    feature_req_word: u32,
}

/// `struct tpacket_req` (V1/V2 rings).
#[repr(C)]
struct TpacketReq {
    block_size: u32,
    block_nr: u32,
    frame_size: u32,
    frame_nr: u32,
}

#[repr(C)]
struct TpacketStatsV3 {
    packets: u32,
    drops: u32,
    freeze_q_cnt: u32,
}

#[repr(C)]
struct PacketMreq {
    ifindex: libc::c_int,
    kind: libc::c_ushort,
    alen: libc::c_ushort,
    address: [u8; 8],
}

/// The receive ring's layout (see the module docs, "Receive").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RxRing {
    /// TPACKET_V2: fixed frame slots, each handed over (and `poll` woken)
    /// as soon as it is written: a lone frame waits microseconds.
    #[default]
    Frames,
    /// TPACKET_V3: frames packed into blocks handed over when full or when
    /// the block retire timer fires: a lone frame waits up to
    /// [`AfPacketConfig::block_timeout_ms`].
    Blocks,
    /// Two sockets: a frames ring (the configured geometry) first and a
    /// blocks ring (16 blocks) behind it, in a fanout group of their own
    /// whose program always picks the frames socket, with rollover: the
    /// kernel fills the frames ring while it has room and rolls over to
    /// the blocks ring when it has none (`fanout_demux_rollover`). A lone
    /// frame takes the frames ring; a burst the worker cannot keep up with
    /// spills into blocks. Frames of one flow can be reordered where a
    /// burst spills. Needs the port's own fanout group: with
    /// [`AfPacketConfig::fanout_group`] set (several workers) the port
    /// opens as [`RxRing::Frames`].
    Adaptive,
}

/// How an [`AfPacketPort`] is set up.
#[derive(Debug, Clone)]
pub struct AfPacketConfig {
    /// Interface name.
    pub ifname: String,
    /// The receive ring's layout. The geometry below applies to both:
    /// [`RxRing::Frames`] cuts each block into `block_size / frame_size`
    /// fixed slots.
    pub ring: RxRing,
    /// Bytes per ring block (a power of two, a multiple of the page size).
    pub block_size: u32,
    /// Blocks in the ring.
    pub block_count: u32,
    /// Frame slot size: the largest frame a [`RxRing::Frames`] ring
    /// receives whole, header included (bigger ones are counted and
    /// dropped). A [`RxRing::Blocks`] ring packs frames of any length up to
    /// a block.
    pub frame_size: u32,
    /// Block retire timer, milliseconds (latency bound at low rates;
    /// [`RxRing::Blocks`] only).
    pub block_timeout_ms: u32,
    /// Frames per transmit batch.
    pub tx_batch: usize,
    /// Largest frame transmitted.
    pub tx_max_frame: usize,
    /// Join this fanout group (one port per worker on the interface).
    pub fanout_group: Option<u16>,
    /// Receive frames for any destination MAC (`PACKET_MR_PROMISC`).
    pub promiscuous: bool,
    /// Take only frames whose socket-buffer mark is this (a socket filter,
    /// attached before the socket is bound): for a port whose frames a TC
    /// program serves, since a packet socket sees every frame before TC
    /// ingress runs, and the program marks those it sends up
    /// (offlow_offload's `TC_UP_MARK`).
    pub only_mark: Option<u32>,
}

/// Blocks of 256 KiB in a frames ring: 64, 8192 slots of 2 KiB (16 MiB).
/// A slot holds one frame whatever its length, where a block packs ~2000
/// small ones: with the 2048 slots of the blocks ring's 4 MiB, a receiver
/// descheduled for ~10 ms at 200 kframes/s overflowed (measured on a
/// loaded 2-vCPU VM: 70-100 kframes/s received and most dropped, against
/// 150-240 kframes/s for the blocks ring; 8192 slots received 114-228k).
const FRAMES_RING_BLOCKS: u32 = 64;
/// Blocks of 256 KiB in a blocks ring: 16 (4 MiB, ~32k 60-byte frames).
const BLOCKS_RING_BLOCKS: u32 = 16;

impl AfPacketConfig {
    /// This configuration with receive ring `ring` and that ring's default
    /// geometry: frames, 64 blocks of 256 KiB in 2 KiB slots (8192
    /// frames, 16 MiB); blocks, 16 blocks of 256 KiB (4 MiB) with a 1 ms
    /// retire timer.
    ///
    /// [`RxRing::Adaptive`]: a frames ring of 16 blocks (2048 slots) before
    /// a 16-block blocks ring (4 MiB each).
    pub fn with_ring(mut self, ring: RxRing) -> AfPacketConfig {
        self.ring = ring;
        self.block_count = match ring {
            RxRing::Frames => FRAMES_RING_BLOCKS,
            RxRing::Blocks | RxRing::Adaptive => BLOCKS_RING_BLOCKS,
        };
        self
    }

    /// Defaults for `ifname`: a [`RxRing::Frames`] ring (see
    /// [`AfPacketConfig::with_ring`] for its geometry), 64-frame transmit
    /// batches, promiscuous.
    pub fn new(ifname: &str) -> AfPacketConfig {
        AfPacketConfig {
            ifname: ifname.to_string(),
            ring: RxRing::Frames,
            block_size: 1 << 18,
            block_count: FRAMES_RING_BLOCKS,
            frame_size: 2048,
            block_timeout_ms: 1,
            tx_batch: 64,
            tx_max_frame: 2048,
            fanout_group: None,
            promiscuous: true,
            only_mark: None,
        }
    }
}

/// A Linux interface through a packet socket with a TPACKET_V2 or V3
/// receive ring (see module docs).
pub struct AfPacketPort {
    name: String,
    /// Declared before `fd`: unmapped first.
    ring: Ring,
    fd: OwnedFd,
    /// Blocks mode: walk state inside the current block: (offset of the
    /// next frame, frames left), or `None` when no block is being read.
    walk: Option<(usize, u32)>,
    tx_arena: Vec<u8>,
    tx_slot: usize,
    tx_lens: Vec<usize>,
    tx_iov: Vec<libc::iovec>,
    tx_msgs: Vec<libc::mmsghdr>,
    stats: PortStats,
    /// [`RxRing::Adaptive`]: the blocks socket frames roll over to
    /// (receive only; its counters are added to ours).
    overflow: Option<Box<AfPacketPort>>,
}

/// The mapped receive ring.
struct Ring {
    mode: RxRing,
    base: *mut u8,
    len: usize,
    block_size: usize,
    block_count: usize,
    /// Frames mode: slot size and slots per block (a slot never crosses
    /// a block: the kernel lays them out so, `packet_set_ring`).
    frame_size: usize,
    frames_per_block: usize,
    /// The block (blocks mode) or frame slot (frames mode) read next.
    current: usize,
}

impl Ring {
    /// The current block's bytes.
    fn block(&self) -> &[u8] {
        let start = self.current * self.block_size;
        // SAFETY: `current < block_count`, so the block lies inside the
        // mapping, which lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.base.add(start), self.block_size) }
    }

    fn block_status(&self) -> &AtomicU32 {
        let start = self.current * self.block_size;
        // SAFETY: the status word is 4-aligned (blocks are page-aligned) and
        // inside the mapping; the kernel writes it concurrently, hence the
        // atomic view.
        unsafe { AtomicU32::from_ptr(self.base.add(start + BLOCK_STATUS).cast()) }
    }

    /// Frame slots in the ring (frames mode).
    fn slot_count(&self) -> usize {
        self.block_count * self.frames_per_block
    }

    /// Where the current frame slot starts in the mapping. At most
    /// `(block_count - 1) * block_size + (frames_per_block - 1) *
    /// frame_size`, so the slot ends inside the mapping.
    fn slot_start(&self) -> usize {
        (self.current / self.frames_per_block) * self.block_size
            + (self.current % self.frames_per_block) * self.frame_size
    }

    /// The current frame slot's bytes (frames mode).
    fn slot(&self) -> &[u8] {
        // SAFETY: `current < slot_count()`, so the slot lies inside the
        // mapping (see `slot_start`), which lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.base.add(self.slot_start()), self.frame_size) }
    }

    /// The current frame slot's `tp_status` (frames mode).
    fn slot_status(&self) -> &AtomicU32 {
        // SAFETY: `tp_status` opens the slot (offset 0), which is 16-aligned
        // (`frame_size` is a multiple of TPACKET_ALIGNMENT, blocks are
        // page-aligned) and inside the mapping; the kernel writes it
        // concurrently, hence the atomic view.
        unsafe { AtomicU32::from_ptr(self.base.add(self.slot_start() + V2_HDR.status).cast()) }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are exactly what mmap returned; nothing
        // borrows the ring past `recv` (frames are lent only inside it).
        unsafe {
            libc::munmap(self.base.cast(), self.len);
        }
    }
}

// SAFETY: the ring mapping and the iovec/mmsghdr pointers (into our own
// arena) are owned by the port alone; moving the port to another thread
// moves that ownership with it. Nothing is shared, so not `Sync`.
unsafe impl Send for AfPacketPort {}

use crate::sys::cvt;

fn setsockopt<T>(fd: RawFd, opt: libc::c_int, val: &T, what: &str) -> io::Result<()> {
    crate::sys::setsockopt(fd, SOL_PACKET, opt, val, what)
}

/// The index of interface `name`.
pub fn ifindex(name: &str) -> io::Result<u32> {
    let c = CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name has a NUL"))?;
    // SAFETY: `c` is a valid NUL-terminated string for the call.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("interface {name}: {e}")));
    }
    Ok(idx)
}

/// Attach to packet socket `s` a classic BPF filter that accepts whole
/// the frames whose `skb->mark` is `mark` and refuses every other.
fn attach_mark_filter(s: libc::c_int, mark: u32) -> io::Result<()> {
    // ld [SKF_AD_OFF + SKF_AD_MARK]; jeq #mark, accept, refuse
    const SKF_AD_MARK_LOAD: u32 = (libc::SKF_AD_OFF + libc::SKF_AD_MARK) as u32;
    let mut code = [
        libc::sock_filter {
            code: 0x20, // BPF_LD | BPF_W | BPF_ABS
            jt: 0,
            jf: 0,
            k: SKF_AD_MARK_LOAD,
        },
        libc::sock_filter {
            code: 0x15, // BPF_JMP | BPF_JEQ | BPF_K
            jt: 0,
            jf: 1,
            k: mark,
        },
        libc::sock_filter {
            code: 0x06, // BPF_RET | BPF_K: the whole frame
            jt: 0,
            jf: 0,
            k: u32::MAX,
        },
        libc::sock_filter {
            code: 0x06, // BPF_RET | BPF_K: nothing
            jt: 0,
            jf: 0,
            k: 0,
        },
    ];
    let prog = libc::sock_fprog {
        len: code.len() as u16,
        filter: code.as_mut_ptr(),
    };
    // SAFETY: `prog` points at `code`, both live for the call; the kernel
    // copies the program.
    let rc = unsafe {
        libc::setsockopt(
            s,
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            (&raw const prog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    cvt(rc, "attaching the mark filter (SO_ATTACH_FILTER)").map(|_| ())
}

impl AfPacketPort {
    /// Open the interface (it must exist; it need not be up yet).
    pub fn open(cfg: &AfPacketConfig) -> io::Result<AfPacketPort> {
        let hash = cfg.fanout_group.map(|group| {
            u32::from(group) | ((PACKET_FANOUT_HASH | PACKET_FANOUT_FLAG_DEFRAG) << 16)
        });
        if cfg.ring != RxRing::Adaptive || hash.is_some() {
            let mut c = cfg.clone();
            if c.ring == RxRing::Adaptive {
                c.ring = RxRing::Frames;
            }
            return AfPacketPort::open_socket(&c, hash);
        }
        // The frames socket joins first: it is member 0, the one the
        // group's program picks.
        let mut frames = cfg.clone();
        frames.ring = RxRing::Frames;
        let first =
            (PACKET_FANOUT_CBPF | PACKET_FANOUT_FLAG_ROLLOVER | PACKET_FANOUT_FLAG_UNIQUEID) << 16;
        let mut port = AfPacketPort::open_socket(&frames, Some(first))?;
        // The kernel chose a free group id (Linux 4.3+); read it back.
        let mut arg: u32 = 0;
        let mut len = std::mem::size_of::<u32>() as libc::socklen_t;
        // SAFETY: `arg`/`len` are live and sized for the u32 the kernel
        // writes.
        let rc = unsafe {
            libc::getsockopt(
                port.fd.as_raw_fd(),
                SOL_PACKET,
                PACKET_FANOUT,
                (&mut arg as *mut u32).cast(),
                &mut len,
            )
        };
        cvt(rc, "reading the fanout group id")?;
        // "Always member 0" (`ret 0`); without a program the kernel picks 0
        // too (`fanout_demux_bpf`), so this only makes it explicit.
        let mut ret0 = libc::sock_filter {
            code: 0x06, // BPF_RET | BPF_K
            jt: 0,
            jf: 0,
            k: 0,
        };
        let prog = libc::sock_fprog {
            len: 1,
            filter: &mut ret0,
        };
        setsockopt(
            port.fd.as_raw_fd(),
            PACKET_FANOUT_DATA,
            &prog,
            "PACKET_FANOUT_DATA",
        )?;
        let mut blocks = cfg.clone().with_ring(RxRing::Blocks);
        blocks.tx_batch = 1;
        let join = (arg & 0xffff) | ((PACKET_FANOUT_CBPF | PACKET_FANOUT_FLAG_ROLLOVER) << 16);
        port.overflow = Some(Box::new(AfPacketPort::open_socket(&blocks, Some(join))?));
        Ok(port)
    }

    /// Open one socket of a port; `fanout`: the `PACKET_FANOUT` argument
    /// to join with (after binding), if any.
    fn open_socket(cfg: &AfPacketConfig, fanout: Option<u32>) -> io::Result<AfPacketPort> {
        let index = ifindex(&cfg.ifname)?;
        let page = 4096u32;
        if !cfg.block_size.is_power_of_two()
            || cfg.block_size < page
            || cfg.frame_size < 128
            || cfg.frame_size > cfg.block_size
            || cfg.block_count == 0
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "ring geometry: block size must be a power of two of at least a page, \
                 frame size between 128 and the block size",
            ));
        }
        if cfg.ring != RxRing::Blocks && (cfg.frame_size % 16 != 0 || cfg.frame_size < V2_HDRLEN) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "ring geometry: frame slots must be a multiple of 16 bytes (TPACKET_ALIGNMENT)",
            ));
        }
        let proto = ETH_P_ALL.to_be();
        // SAFETY: plain socket creation; the result is checked.
        let raw = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
                libc::c_int::from(proto),
            )
        };
        let raw = cvt(raw, "packet socket (needs CAP_NET_RAW)")?;
        // SAFETY: `raw` is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let s = fd.as_raw_fd();
        if let Some(mark) = cfg.only_mark {
            attach_mark_filter(s, mark)?;
        }
        let version = match cfg.ring {
            RxRing::Frames | RxRing::Adaptive => TPACKET_V2,
            RxRing::Blocks => TPACKET_V3,
        };
        setsockopt(s, PACKET_VERSION, &version, "PACKET_VERSION")?;
        // Not fatal before 4.20: outgoing frames are then skipped by type.
        let _ = setsockopt(s, PACKET_IGNORE_OUTGOING, &1i32, "PACKET_IGNORE_OUTGOING");
        setsockopt(s, PACKET_QDISC_BYPASS, &1i32, "PACKET_QDISC_BYPASS")?;
        let frames_per_block = cfg.block_size / cfg.frame_size;
        let frame_nr = frames_per_block * cfg.block_count;
        match cfg.ring {
            RxRing::Frames | RxRing::Adaptive => {
                let req = TpacketReq {
                    block_size: cfg.block_size,
                    block_nr: cfg.block_count,
                    frame_size: cfg.frame_size,
                    frame_nr,
                };
                setsockopt(s, PACKET_RX_RING, &req, "PACKET_RX_RING")?;
            }
            RxRing::Blocks => {
                let req = TpacketReq3 {
                    block_size: cfg.block_size,
                    block_nr: cfg.block_count,
                    frame_size: cfg.frame_size,
                    frame_nr,
                    retire_blk_tov: cfg.block_timeout_ms,
                    sizeof_priv: 0,
                    feature_req_word: 0,
                };
                setsockopt(s, PACKET_RX_RING, &req, "PACKET_RX_RING")?;
            }
        }
        let len = cfg.block_size as usize * cfg.block_count as usize;
        // SAFETY: mapping the ring the kernel just allocated for `s`; the
        // result is checked and owned by `Ring`.
        let base = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                s,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("mapping the ring: {e}")));
        }
        let ring = Ring {
            mode: cfg.ring,
            base: base.cast(),
            len,
            block_size: cfg.block_size as usize,
            block_count: cfg.block_count as usize,
            frame_size: cfg.frame_size as usize,
            frames_per_block: frames_per_block as usize,
            current: 0,
        };
        // SAFETY: an all-zero sockaddr_ll is a valid value to fill in.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = proto;
        sll.sll_ifindex = index as i32;
        // SAFETY: `sll` is a live sockaddr_ll of the size passed.
        let rc = unsafe {
            libc::bind(
                s,
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        cvt(rc, &format!("binding to {}", cfg.ifname))?;
        if cfg.promiscuous {
            let mreq = PacketMreq {
                ifindex: index as i32,
                kind: PACKET_MR_PROMISC,
                alen: 0,
                address: [0; 8],
            };
            setsockopt(s, PACKET_ADD_MEMBERSHIP, &mreq, "promiscuous mode")?;
        }
        if let Some(arg) = fanout {
            setsockopt(s, PACKET_FANOUT, &arg, "PACKET_FANOUT")?;
        }
        let slot = cfg.tx_max_frame.max(64);
        let batch = cfg.tx_batch.max(1);
        Ok(AfPacketPort {
            name: cfg.ifname.clone(),
            ring,
            fd,
            walk: None,
            tx_arena: vec![0u8; slot * batch],
            tx_slot: slot,
            tx_lens: Vec::with_capacity(batch),
            tx_iov: Vec::with_capacity(batch),
            tx_msgs: Vec::with_capacity(batch),
            stats: PortStats::default(),
            overflow: None,
        })
    }

    /// Give the current block back to the kernel and move on.
    fn release_block(&mut self) {
        // Every read of the block's frames happens before the kernel may
        // overwrite them.
        fence(Ordering::Release);
        self.ring
            .block_status()
            .store(TP_STATUS_KERNEL, Ordering::Release);
        self.ring.current = (self.ring.current + 1) % self.ring.block_count;
        self.walk = None;
    }

    /// Blocks mode (TPACKET_V3): walk the frames of user-owned blocks.
    fn recv_blocks(&mut self, max: usize, on_frame: &mut dyn FnMut(&[u8], RxMeta)) -> usize {
        let mut handed = 0;
        while handed < max {
            let (mut off, mut left) = match self.walk {
                Some(w) => w,
                None => {
                    if self.ring.block_status().load(Ordering::Acquire) & TP_STATUS_USER == 0 {
                        break;
                    }
                    let b = self.ring.block();
                    let n = rd32(b, BLOCK_NUM_PKTS).unwrap_or(0);
                    let first = rd32(b, BLOCK_FIRST_PKT).unwrap_or(0) as usize;
                    (first, n)
                }
            };
            while left > 0 && handed < max {
                let block = self.ring.block();
                let (Some((range, meta, skip)), Some(next)) =
                    (frame_at(block, off, &V3_HDR), rd32(block, off + PKT_NEXT))
                else {
                    // A frame header pointing outside the block: drop the
                    // rest of the block rather than trust it.
                    self.stats.rx_errors += u64::from(left);
                    left = 0;
                    break;
                };
                left -= 1;
                if skip {
                    if meta.wire_len as usize > range.len() {
                        self.stats.rx_errors += 1;
                    }
                } else {
                    self.stats.rx_packets += 1;
                    self.stats.rx_bytes += range.len() as u64;
                    on_frame(&block[range], meta);
                    handed += 1;
                }
                if left > 0 {
                    if next == 0 {
                        self.stats.rx_errors += u64::from(left);
                        left = 0;
                        break;
                    }
                    off += next as usize;
                }
            }
            if left == 0 {
                self.release_block();
            } else {
                self.walk = Some((off, left));
            }
        }
        handed
    }

    /// Frames mode (TPACKET_V2): take user-owned slots in ring order,
    /// giving each back as soon as its frame was handed out.
    fn recv_frames(&mut self, max: usize, on_frame: &mut dyn FnMut(&[u8], RxMeta)) -> usize {
        let mut handed = 0;
        while handed < max {
            if self.ring.slot_status().load(Ordering::Acquire) & TP_STATUS_USER == 0 {
                break;
            }
            let slot = self.ring.slot();
            match frame_at(slot, 0, &V2_HDR) {
                // A header pointing outside its slot: count it, never read
                // past the slot.
                None => self.stats.rx_errors += 1,
                Some((range, meta, true)) => {
                    if meta.wire_len as usize > range.len() {
                        self.stats.rx_errors += 1;
                    }
                }
                Some((range, meta, false)) => {
                    self.stats.rx_packets += 1;
                    self.stats.rx_bytes += range.len() as u64;
                    on_frame(&slot[range], meta);
                    handed += 1;
                }
            }
            // Every read of the slot happens before the kernel may
            // overwrite it (the store below is its release).
            fence(Ordering::Release);
            self.ring
                .slot_status()
                .store(TP_STATUS_KERNEL, Ordering::Release);
            self.ring.current = (self.ring.current + 1) % self.ring.slot_count();
        }
        handed
    }
}

fn rd32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn rd16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

/// The frame whose header (laid out as `l`) starts at `off` of `buf` (a
/// V3 block or a V2 slot): `(frame range within buf, meta, skip)`, where
/// skip means truncated or outgoing. `None` when the header or the frame
/// it describes does not lie inside `buf`.
fn frame_at(
    buf: &[u8],
    off: usize,
    l: &HdrLayout,
) -> Option<(std::ops::Range<usize>, RxMeta, bool)> {
    let snaplen = rd32(buf, off + l.snaplen)? as usize;
    let len = rd32(buf, off + l.len)?;
    let status = rd32(buf, off + l.status)?;
    let mac = usize::from(rd16(buf, off + l.mac)?);
    let pkttype = *buf.get(off + l.sll + SLL_PKTTYPE)?;
    let start = off.checked_add(mac)?;
    let end = start.checked_add(snaplen)?;
    if end > buf.len() {
        return None;
    }
    let vlan = (status & TP_STATUS_VLAN_VALID != 0).then(|| {
        let tci = if l.vlan_tci_wide {
            rd32(buf, off + l.vlan_tci).unwrap_or(0) as u16
        } else {
            rd16(buf, off + l.vlan_tci).unwrap_or(0)
        };
        let tpid = if status & TP_STATUS_VLAN_TPID_VALID != 0 {
            rd16(buf, off + l.vlan_tpid).unwrap_or(0x8100)
        } else {
            0x8100
        };
        (tpid, tci)
    });
    let meta = RxMeta {
        vlan,
        csum_partial: status & TP_STATUS_CSUMNOTREADY != 0,
        wire_len: len,
    };
    let truncated = snaplen < len as usize;
    Some((start..end, meta, truncated || pkttype == PACKET_OUTGOING))
}

impl Port for AfPacketPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn recv(&mut self, max: usize, on_frame: &mut dyn FnMut(&[u8], RxMeta)) -> io::Result<usize> {
        // Adaptive: the blocks ring first, the frames ring with what is left
        // of the batch. While the worker is behind, blocks fill whole
        // batches, the frames ring fills up and the kernel rolls every
        // frame over to the blocks ring: the port runs as a blocks ring.
        // Once the worker has caught up (no retired block), it drains the
        // frames ring, which takes the traffic again. Frames-first starved
        // the blocks ring instead, and both dropped.
        let mut handed = 0;
        if let Some(o) = &mut self.overflow {
            handed = o.recv(max, on_frame)?;
        }
        if handed < max {
            handed += match self.ring.mode {
                RxRing::Blocks => self.recv_blocks(max - handed, on_frame),
                RxRing::Frames | RxRing::Adaptive => self.recv_frames(max - handed, on_frame),
            };
        }
        Ok(handed)
    }

    fn send(&mut self, frame: &[u8]) -> bool {
        let i = self.tx_lens.len();
        if i * self.tx_slot >= self.tx_arena.len() || frame.len() > self.tx_slot {
            self.stats.tx_dropped += 1;
            return false;
        }
        self.tx_arena[i * self.tx_slot..i * self.tx_slot + frame.len()].copy_from_slice(frame);
        self.tx_lens.push(frame.len());
        true
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.tx_lens.is_empty() {
            return Ok(());
        }
        self.tx_iov.clear();
        self.tx_msgs.clear();
        let base = self.tx_arena.as_mut_ptr();
        for (i, &len) in self.tx_lens.iter().enumerate() {
            self.tx_iov.push(libc::iovec {
                // SAFETY: slot `i` lies inside the arena (checked in send).
                iov_base: unsafe { base.add(i * self.tx_slot) }.cast(),
                iov_len: len,
            });
        }
        for i in 0..self.tx_iov.len() {
            // SAFETY: an all-zero msghdr is valid (no name, no control).
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            // SAFETY: `i < tx_iov.len()`; the vector is not resized until
            // the sends below are done.
            m.msg_hdr.msg_iov = unsafe { self.tx_iov.as_mut_ptr().add(i) };
            m.msg_hdr.msg_iovlen = 1;
            self.tx_msgs.push(m);
        }
        let total = self.tx_msgs.len();
        let mut done = 0;
        while done < total {
            // SAFETY: the messages point at live iovecs into our arena; the
            // kernel reads at most `total - done` of them.
            let rc = unsafe {
                libc::sendmmsg(
                    self.fd.as_raw_fd(),
                    self.tx_msgs.as_mut_ptr().add(done),
                    (total - done) as libc::c_uint,
                    libc::MSG_DONTWAIT,
                )
            };
            if rc <= 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    // This one frame is wrong for the interface (longer
                    // than its MTU): `sendmmsg` stopped at it, so it is
                    // dropped alone and the frames behind it still go.
                    Some(libc::EMSGSIZE | libc::EINVAL) => {
                        self.stats.tx_dropped += 1;
                        done += 1;
                        continue;
                    }
                    // Queue full, interface down or gone: the frames are
                    // dropped, as on a wire.
                    _ => {
                        self.stats.tx_dropped += (total - done) as u64;
                        break;
                    }
                }
            }
            for &len in &self.tx_lens[done..done + rc as usize] {
                self.stats.tx_packets += 1;
                self.stats.tx_bytes += len as u64;
            }
            done += rc as usize;
        }
        self.tx_lens.clear();
        Ok(())
    }

    fn poll_fd(&self) -> Option<RawFd> {
        Some(self.fd.as_raw_fd())
    }

    fn poll_fds(&self, out: &mut Vec<RawFd>) {
        out.push(self.fd.as_raw_fd());
        if let Some(o) = &self.overflow {
            out.push(o.fd.as_raw_fd());
        }
    }

    fn stats(&mut self) -> PortStats {
        let mut st = TpacketStatsV3 {
            packets: 0,
            drops: 0,
            freeze_q_cnt: 0,
        };
        let mut len = std::mem::size_of::<TpacketStatsV3>() as libc::socklen_t;
        // SAFETY: `st`/`len` are live and sized for the kernel's struct; the
        // kernel resets its counters on read, so they are accumulated.
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                SOL_PACKET,
                PACKET_STATISTICS,
                (&mut st as *mut TpacketStatsV3).cast(),
                &mut len,
            )
        };
        if rc == 0 {
            self.stats.rx_dropped += u64::from(st.drops);
        }
        let mut total = self.stats;
        if let Some(o) = &mut self.overflow {
            let os = o.stats();
            total.rx_packets += os.rx_packets;
            total.rx_bytes += os.rx_bytes;
            total.rx_dropped += os.rx_dropped;
            total.rx_errors += os.rx_errors;
        }
        total
    }
}

/// A transmit-only packet socket on an interface (protocol 0: the kernel
/// delivers it nothing), for the control side's packet-outs, plus link
/// queries. Opened in the interface's namespace like a port.
pub struct AfPacketTx {
    name: String,
    /// The interface's index when opened: a name that now has another
    /// index is a re-created interface this socket is not bound to.
    index: u32,
    fd: OwnedFd,
    /// An `AF_INET` datagram socket of the same namespace for interface
    /// ioctls (sysfs shows the namespace it was mounted in, not ours).
    ctl: OwnedFd,
    /// The interface's kernel counters, over a netlink socket of the same
    /// namespace.
    counters: crate::rtnl::LinkStatsReader,
}

/// What [`AfPacketTx::link`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LinkState {
    /// The interface's MAC address.
    pub hw_addr: [u8; 6],
    /// Administratively up (`IFF_UP`).
    pub admin_up: bool,
    /// Carrier present (`IFF_RUNNING`: operationally up).
    pub link_up: bool,
}

fn ifreq(name: &str) -> io::Result<libc::ifreq> {
    // SAFETY: an all-zero ifreq is a valid value.
    let mut r: libc::ifreq = unsafe { std::mem::zeroed() };
    if name.len() >= r.ifr_name.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("interface name {name} too long"),
        ));
    }
    for (d, s) in r.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    Ok(r)
}

impl AfPacketTx {
    /// Open a transmit socket on `ifname`.
    pub fn open(ifname: &str) -> io::Result<AfPacketTx> {
        let index = ifindex(ifname)?;
        // SAFETY: plain socket creation; checked.
        let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        let raw = cvt(raw, "packet socket (needs CAP_NET_RAW)")?;
        // SAFETY: fresh descriptor, owned from here on.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        setsockopt(
            fd.as_raw_fd(),
            PACKET_QDISC_BYPASS,
            &1i32,
            "PACKET_QDISC_BYPASS",
        )?;
        // SAFETY: an all-zero sockaddr_ll is valid to fill in.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = 0;
        sll.sll_ifindex = index as i32;
        // SAFETY: `sll` is a live sockaddr_ll of the size passed.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        cvt(rc, &format!("binding to {ifname}"))?;
        // SAFETY: plain socket creation; checked.
        let c = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        let c = cvt(c, "control socket")?;
        // SAFETY: fresh descriptor.
        let ctl = unsafe { OwnedFd::from_raw_fd(c) };
        Ok(AfPacketTx {
            name: ifname.to_string(),
            index,
            fd,
            ctl,
            counters: crate::rtnl::LinkStatsReader::open(index)?,
        })
    }

    /// Transmit one frame; false when the kernel refused it.
    pub fn send(&self, frame: &[u8]) -> bool {
        // SAFETY: `frame` is a live slice of the length passed.
        let rc = unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                frame.as_ptr().cast(),
                frame.len(),
                libc::MSG_DONTWAIT,
            )
        };
        rc == frame.len() as isize
    }

    /// The interface's own kernel counters now (what `ip -s link` shows):
    /// its `rx_dropped` counts frames lost before any socket saw them. An
    /// error when the interface is gone or was re-created.
    pub fn counters(&self) -> io::Result<crate::rtnl::LinkCounters> {
        self.counters.read()
    }

    /// The interface's address and up/down state now. An error when the
    /// interface is gone, or was deleted and created again under the same
    /// name (sockets bound to the old one, like the switch's, are dead).
    pub fn link(&self) -> io::Result<LinkState> {
        // Through our own control socket: it lives in the interface's
        // namespace, which the calling thread need not be in.
        let mut r = ifreq(&self.name)?;
        // SAFETY: SIOCGIFINDEX fills `ifr_ifindex` of the ifreq we own.
        let rc = unsafe { libc::ioctl(self.ctl.as_raw_fd(), libc::SIOCGIFINDEX, &mut r) };
        cvt(rc, "SIOCGIFINDEX")?;
        // SAFETY: after SIOCGIFINDEX the union holds the index.
        let now = unsafe { r.ifr_ifru.ifru_ifindex } as u32;
        if now != self.index {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "interface {} was re-created (index {} is now {now}); its sockets are not bound to it",
                    self.name, self.index
                ),
            ));
        }
        let mut r = ifreq(&self.name)?;
        // SAFETY: SIOCGIFHWADDR fills `ifr_hwaddr` of the ifreq we own.
        let rc = unsafe { libc::ioctl(self.ctl.as_raw_fd(), libc::SIOCGIFHWADDR, &mut r) };
        cvt(rc, "SIOCGIFHWADDR")?;
        let mut hw_addr = [0u8; 6];
        // SAFETY: after SIOCGIFHWADDR the union holds a sockaddr.
        let data = unsafe { r.ifr_ifru.ifru_hwaddr.sa_data };
        for (d, s) in hw_addr.iter_mut().zip(data.iter()) {
            *d = *s as u8;
        }
        let mut r = ifreq(&self.name)?;
        // SAFETY: SIOCGIFFLAGS fills `ifr_flags` of the ifreq we own.
        let rc = unsafe { libc::ioctl(self.ctl.as_raw_fd(), libc::SIOCGIFFLAGS, &mut r) };
        cvt(rc, "SIOCGIFFLAGS")?;
        // SAFETY: after SIOCGIFFLAGS the union holds the flags.
        let flags = unsafe { r.ifr_ifru.ifru_flags } as libc::c_int;
        Ok(LinkState {
            hw_addr,
            admin_up: flags & libc::IFF_UP != 0,
            link_up: flags & libc::IFF_RUNNING != 0,
        })
    }
}
