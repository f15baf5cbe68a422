//! [`AfXdpPort`]: one `AF_XDP` socket bound to one queue of an interface,
//! with its UMEM (RX half, TX half) and four rings, as a [`Port`]. See the
//! parent module for the frame life cycle and the binding modes.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::channels::queue_count;
use super::program::{XdpAttach, XdpProgram};
use super::ring::{MmapOffsets, Ring, UMEM_DESC_SIZE, XDP_DESC_SIZE};
use super::umem::Umem;
use crate::afpacket::ifindex;
use crate::sys::cvt;
use crate::{Port, PortStats, RxMeta};

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
const XDP_PGOFF_RX_RING: libc::off_t = 0;
const XDP_PGOFF_TX_RING: libc::off_t = 0x8000_0000;
const XDP_UMEM_PGOFF_FILL_RING: libc::off_t = 0x1_0000_0000;
const XDP_UMEM_PGOFF_COMPLETION_RING: libc::off_t = 0x1_8000_0000;

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
    /// Frames the kernel took from the TX ring and dropped (`EBUSY`: the
    /// device refused the frame, e.g. longer than the MTU); counted in
    /// `tx_dropped`, not `tx_packets`.
    pub drop_tx_kernel: u64,
    /// Frames dropped because the interface is gone (`ENXIO`): those left
    /// in the TX ring then, and every later `send`.
    pub drop_tx_gone: u64,
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
    /// The interface went away (a kick said `ENXIO`): the socket will never
    /// transmit again, so nothing is queued or retried (the switch opens a
    /// fresh port when the interface is back).
    gone: bool,
    zerocopy: bool,
    queue_id: u32,
    counters: AfXdpCounters,
    stats: PortStats,
}

// SAFETY: the rings and UMEM are mappings owned by the port alone (the
// kernel is the only other party); moving the port moves that ownership.
// Nothing is shared between threads, so not `Sync`.
unsafe impl Send for AfXdpPort {}

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

pub(super) fn invalid(msg: &str) -> io::Error {
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

        let umem = Umem::map(umem_len, cfg.frame_size)?;
        setsockopt(s, XDP_UMEM_REG, &umem.reg(), "XDP_UMEM_REG")?;
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
            gone: false,
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

    /// The TX descriptor at `idx`, which the kernel consumed, was dropped
    /// by the device: move it from the sent counts to the dropped ones.
    fn count_kernel_drop(&mut self, idx: u32) {
        let len = self.tx_desc_len(idx);
        self.counters.drop_tx_kernel += 1;
        self.stats.tx_dropped += 1;
        self.stats.tx_packets = self.stats.tx_packets.saturating_sub(1);
        self.stats.tx_bytes = self.stats.tx_bytes.saturating_sub(u64::from(len));
    }

    /// The frame length in TX descriptor `idx`, as `send` wrote it. Only
    /// for a descriptor `send` wrote that is behind `tx.local` (the kernel
    /// never writes TX descriptors, and `send` writes only at `tx.local`).
    fn tx_desc_len(&self, idx: u32) -> u32 {
        let slot = self.tx.slot(idx, XDP_DESC_SIZE);
        // SAFETY: a descriptor slot inside the TX ring mapping (`slot`
        // wraps the index); what it holds is ours, per the contract above.
        // `struct xdp_desc`: u64 addr, u32 len, u32 options.
        unsafe { ptr::read_unaligned(slot.add(8).cast::<u32>()) }
    }

    /// The interface is gone: the descriptors the kernel has not taken
    /// never will be; move them from the sent counts to the dropped ones.
    fn drop_left_in_ring(&mut self) {
        let taken = self.tx.consumer().load(Ordering::Acquire);
        let left = self.tx.local.wrapping_sub(taken);
        for k in 0..left {
            let len = self.tx_desc_len(taken.wrapping_add(k));
            self.stats.tx_bytes = self.stats.tx_bytes.saturating_sub(u64::from(len));
        }
        let left = u64::from(left);
        self.counters.drop_tx_gone += left;
        self.stats.tx_dropped += left;
        self.stats.tx_packets = self.stats.tx_packets.saturating_sub(left);
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
    /// it cannot now (`ENOBUFS`, `ENETDOWN`, `EBUSY` without progress:
    /// retried at the next flush, the descriptors stay queued). `EBUSY`
    /// after the kernel consumed descriptors means the last one it took
    /// was dropped by the device (copy mode: "completed but not sent");
    /// it is counted as dropped and the kicks go on, so one frame the
    /// device refuses does not hold up the frames behind it.
    fn kick(&mut self) -> io::Result<()> {
        // Enough rounds for the whole ring at 32 per call, plus slack.
        let mut rounds = self.tx.size / 32 + 4;
        while rounds > 0 && self.tx_pending_in_kernel() {
            rounds -= 1;
            self.counters.tx_kicks += 1;
            let taken_before = self.tx.consumer().load(Ordering::Acquire);
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
                let taken = self.tx.consumer().load(Ordering::Acquire);
                match e.raw_os_error() {
                    Some(libc::EAGAIN | libc::EINTR) => {}
                    Some(libc::EBUSY) if taken != taken_before => {
                        self.count_kernel_drop(taken.wrapping_sub(1));
                    }
                    Some(libc::ENOBUFS | libc::EBUSY | libc::ENETDOWN) => break,
                    Some(libc::ENXIO) => {
                        self.gone = true;
                        self.drop_left_in_ring();
                        return Err(io::Error::new(e.kind(), format!("AF_XDP tx kick: {e}")));
                    }
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
        if self.gone {
            self.counters.drop_tx_gone += 1;
            self.stats.tx_dropped += 1;
            return false;
        }
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
        if !self.gone && self.tx_pending_in_kernel() && (!self.zerocopy || self.tx.needs_wakeup()) {
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
        !self.zerocopy && !self.gone && self.tx_pending_in_kernel()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attribute_structs_match_the_kernel_layout() {
        assert_eq!(std::mem::size_of::<SockaddrXdp>(), 16);
        assert_eq!(std::mem::size_of::<XdpStatistics>(), 48);
    }
}
