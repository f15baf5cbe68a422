//! The prober: sends UDP probe frames on a packet socket, one at a time,
//! and timestamps each with `SO_TIMESTAMPING` on the way out (from the
//! socket's error queue) and on the way back (from the received frame's
//! control message).
//!
//! A packet socket rather than a UDP socket, because the switch hands the
//! probe back unchanged (OpenFlow `IN_PORT` output): it comes back with
//! the configured `eth_dst` and `ipv4_dst`, which are not the prober's, so
//! the host's IP stack would drop it while a packet socket still sees it.
//! The same property lets the probe carry whatever the match tuples under
//! test need.
//!
//! Timestamps: hardware (`SOF_TIMESTAMPING_TX_HARDWARE | RX_HARDWARE |
//! RAW_HARDWARE`, enabled on the interface with `SIOCSHWTSTAMP`) where the
//! driver accepts that, else kernel software timestamps
//! (`SOF_TIMESTAMPING_TX_SOFTWARE | RX_SOFTWARE | SOFTWARE`): the transmit
//! one taken by the driver (`skb_tx_timestamp`, which veth calls), the
//! receive one when the frame enters the stack. A probe whose transmit
//! timestamp never shows on the error queue falls back to the user-space
//! clock read just before `send` and is counted (`tx_fallbacks`).
//!
//! Invariants: a probe is received or lost, never both: a reply that comes
//! after the probe's timeout (or a duplicate) is ignored. Sequence numbers
//! are carried in the payload after a magic word, so stray frames (ARP,
//! IPv6 neighbour discovery, the previous run's stragglers) are skipped.
//!
//! Thread-safety: a [`Prober`] owns its socket; one thread uses it.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use anyhow::Context;
use offlow_io::netns::in_netns;
use offlow_testkit::FrameBuilder;

/// Magic word in front of the sequence number in a probe's UDP payload.
pub const MAGIC: [u8; 4] = *b"OFLT";

/// Ethernet + IPv4 (no options) + UDP: where the probe's payload starts.
const PAYLOAD_OFFSET: usize = 14 + 20 + 8;

/// `PACKET_IGNORE_OUTGOING` (Linux 4.20): the socket does not see its own
/// transmitted frames on the receive path.
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;

/// `SIOCSHWTSTAMP`, and `struct hwtstamp_config` (linux/net_tstamp.h).
const SIOCSHWTSTAMP: libc::c_ulong = 0x89b0;
const HWTSTAMP_TX_ON: libc::c_int = 1;
const HWTSTAMP_FILTER_ALL: libc::c_int = 1;

#[repr(C)]
struct HwtstampConfig {
    flags: libc::c_int,
    tx_type: libc::c_int,
    rx_filter: libc::c_int,
}

/// Which clock stamped the probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TsSource {
    /// The NIC's (`SOF_TIMESTAMPING_RAW_HARDWARE`).
    Hardware,
    /// The kernel's (`SOF_TIMESTAMPING_SOFTWARE`).
    Software,
}

impl TsSource {
    /// For tables.
    pub fn name(self) -> &'static str {
        match self {
            TsSource::Hardware => "hardware",
            TsSource::Software => "kernel software",
        }
    }
}

/// The probe frames' header fields (what the match tuples look at).
#[derive(Debug, Clone, Copy)]
pub struct ProbeHeader {
    /// Ethernet destination.
    pub eth_dst: [u8; 6],
    /// Ethernet source.
    pub eth_src: [u8; 6],
    /// IPv4 source.
    pub ipv4_src: [u8; 4],
    /// IPv4 destination.
    pub ipv4_dst: [u8; 4],
    /// UDP source port.
    pub udp_src: u16,
    /// UDP destination port.
    pub udp_dst: u16,
}

impl ProbeHeader {
    /// Probe `seq` as a `len`-byte frame (without FCS; at least 60).
    pub fn frame(&self, seq: u64, len: usize) -> Vec<u8> {
        let mut payload = MAGIC.to_vec();
        payload.extend_from_slice(&seq.to_be_bytes());
        FrameBuilder::eth(self.eth_dst, self.eth_src)
            .ipv4(self.ipv4_src, self.ipv4_dst)
            .ttl(64)
            .udp(self.udp_src, self.udp_dst)
            .payload(&payload)
            .frame_len(len.max(60))
            .build()
    }
}

/// The sequence number of a probe frame, `None` for any other frame.
pub fn probe_seq(frame: &[u8]) -> Option<u64> {
    let p = frame.get(PAYLOAD_OFFSET..PAYLOAD_OFFSET + 12)?;
    let is_udp4 = frame.get(12..14) == Some(&[0x08, 0x00]) && frame[14] == 0x45 && frame[23] == 17;
    if !is_udp4 || p[..4] != MAGIC {
        return None;
    }
    // `p` is 12 bytes: the slice is 8.
    Some(u64::from_be_bytes(p[4..12].try_into().ok()?))
}

/// One probe's fate. Times are nanoseconds of the timestamping clock
/// (CLOCK_REALTIME for software timestamps).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeRecord {
    /// Sequence number (0, 1, ... within a configuration).
    pub seq: u64,
    /// Transmit timestamp.
    pub tx_ns: i64,
    /// Receive timestamp; `None`: lost (no reply within the timeout).
    pub rx_ns: Option<i64>,
    /// The transmit timestamp is the user-space clock before `send`
    /// (the error queue gave none in time).
    pub tx_fallback: bool,
}

impl ProbeRecord {
    /// Round-trip time, ns.
    pub fn rtt_ns(&self) -> Option<i64> {
        self.rx_ns.map(|rx| rx - self.tx_ns)
    }
}

/// A packet socket bound to one interface, timestamping.
pub struct Prober {
    fd: OwnedFd,
    /// Which clock stamps.
    pub source: TsSource,
    buf: Vec<u8>,
    ctl: Vec<u8>,
}

fn last_err(what: &str) -> anyhow::Error {
    anyhow::Error::new(io::Error::last_os_error()).context(what.to_string())
}

fn setsockopt_int(fd: libc::c_int, level: libc::c_int, opt: libc::c_int, v: libc::c_int) -> bool {
    // SAFETY: `v` lives across the call and its size is passed.
    unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        ) == 0
    }
}

/// CLOCK_REALTIME now, ns (the software timestamps' clock).
fn realtime_ns() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

impl Prober {
    /// Open on `ifname` in namespace `ns`.
    pub fn open(ns: &str, ifname: &str) -> anyhow::Result<Prober> {
        in_netns(Some(ns), || Prober::open_here(ifname))
            .with_context(|| format!("entering {ns}"))?
    }

    fn open_here(ifname: &str) -> anyhow::Result<Prober> {
        let proto = (libc::ETH_P_ALL as u16).to_be();
        // SAFETY: plain socket(2) call.
        let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, proto.into()) };
        if raw < 0 {
            return Err(last_err("socket(AF_PACKET)"));
        }
        // SAFETY: `raw` is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let name = std::ffi::CString::new(ifname).context("interface name")?;
        // SAFETY: `name` is NUL-terminated and lives across the call.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if ifindex == 0 {
            return Err(last_err(&format!("no interface {ifname}")));
        }
        // SAFETY: sockaddr_ll is plain data; all-zero is valid.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = proto;
        sll.sll_ifindex = ifindex as i32;
        // SAFETY: `sll` is a valid sockaddr_ll and its size is passed.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(last_err("bind"));
        }
        // Best effort: older kernels show our own frames, which
        // `probe_seq` then sees twice; the PACKET_OUTGOING check in
        // `recv_probe` covers that case.
        setsockopt_int(fd.as_raw_fd(), libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, 1);
        let source = if enable_hw_timestamps(fd.as_raw_fd(), &name) {
            TsSource::Hardware
        } else {
            TsSource::Software
        };
        let flags = match source {
            TsSource::Hardware => {
                libc::SOF_TIMESTAMPING_TX_HARDWARE
                    | libc::SOF_TIMESTAMPING_RX_HARDWARE
                    | libc::SOF_TIMESTAMPING_RAW_HARDWARE
            }
            TsSource::Software => {
                libc::SOF_TIMESTAMPING_TX_SOFTWARE
                    | libc::SOF_TIMESTAMPING_RX_SOFTWARE
                    | libc::SOF_TIMESTAMPING_SOFTWARE
            }
        };
        if !setsockopt_int(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPING,
            flags as libc::c_int,
        ) {
            return Err(last_err("setsockopt(SO_TIMESTAMPING)"));
        }
        Ok(Prober {
            fd,
            source,
            buf: vec![0; 2048],
            ctl: vec![0; 512],
        })
    }

    /// Throw away whatever is queued (stragglers of a previous run).
    pub fn drain(&mut self) {
        while self.recv(libc::MSG_DONTWAIT).is_some() {}
        while self.recv(libc::MSG_DONTWAIT | libc::MSG_ERRQUEUE).is_some() {}
    }

    /// Send `frame` (probe `seq`) and wait up to `timeout` for it to come
    /// back.
    pub fn probe(&mut self, seq: u64, frame: &[u8], timeout: Duration) -> ProbeRecord {
        let user_tx = realtime_ns();
        let start = Instant::now();
        // SAFETY: `frame` is a valid buffer of its length; the socket is
        // bound, so no address is needed.
        let sent =
            unsafe { libc::send(self.fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
        let mut rec = ProbeRecord {
            seq,
            tx_ns: user_tx,
            rx_ns: None,
            tx_fallback: true,
        };
        if sent < 0 {
            return rec;
        }
        let mut have_tx = false;
        // Once the reply is in, wait a little longer for a late transmit
        // timestamp (it normally comes first).
        let mut deadline = start + timeout;
        loop {
            if have_tx && rec.rx_ns.is_some() {
                break;
            }
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            let wait_ms = (deadline - now).as_millis().clamp(1, 1000) as libc::c_int;
            let mut p = libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one live pollfd for the duration of the call.
            if unsafe { libc::poll(&mut p, 1, wait_ms) } <= 0 {
                continue;
            }
            if p.revents & libc::POLLERR != 0 {
                while let Some((s, ts)) = self.recv(libc::MSG_DONTWAIT | libc::MSG_ERRQUEUE) {
                    if s == Some(seq) && ts.is_some() && !have_tx {
                        have_tx = true;
                        rec.tx_ns = ts.unwrap_or(user_tx);
                        rec.tx_fallback = false;
                    }
                }
            }
            if p.revents & libc::POLLIN != 0 {
                while let Some((s, ts)) = self.recv(libc::MSG_DONTWAIT) {
                    if s == Some(seq) && rec.rx_ns.is_none() {
                        rec.rx_ns = Some(ts.unwrap_or_else(realtime_ns));
                        if !have_tx {
                            deadline = deadline.min(Instant::now() + Duration::from_millis(5));
                        }
                    }
                }
            }
        }
        rec
    }

    /// One message (normal or error queue per `flags`): the probe sequence
    /// number it carries and its timestamp. `None` when nothing is queued.
    #[allow(clippy::type_complexity)]
    fn recv(&mut self, flags: libc::c_int) -> Option<(Option<u64>, Option<i64>)> {
        // SAFETY: sockaddr_ll is plain data; all-zero is valid.
        let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        let mut iov = libc::iovec {
            iov_base: self.buf.as_mut_ptr().cast(),
            iov_len: self.buf.len(),
        };
        // SAFETY: msghdr is plain data; all-zero is valid.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = (&mut from as *mut libc::sockaddr_ll).cast();
        msg.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = self.ctl.as_mut_ptr().cast();
        msg.msg_controllen = self.ctl.len();
        // SAFETY: every pointer in `msg` refers to a live buffer of the
        // stated length (`buf`, `ctl`, `from`), all owned by `self` or
        // this frame, for the duration of the call.
        let n = unsafe { libc::recvmsg(self.fd.as_raw_fd(), &mut msg, flags) };
        if n < 0 {
            return None;
        }
        let errqueue = flags & libc::MSG_ERRQUEUE != 0;
        if !errqueue && from.sll_pkttype == libc::PACKET_OUTGOING {
            return Some((None, None));
        }
        let n = (n as usize).min(self.buf.len());
        let seq = probe_seq(&self.buf[..n]);
        let want = match self.source {
            TsSource::Software => 0,
            TsSource::Hardware => 2,
        };
        let mut ts = None;
        // SAFETY: `msg` was filled by recvmsg; the CMSG_* macros walk the
        // control buffer within `msg_controllen`, and each SCM_TIMESTAMPING
        // payload is three timespecs (read unaligned: the buffer is bytes).
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPING {
                    let t = std::ptr::read_unaligned(
                        (libc::CMSG_DATA(c) as *const libc::timespec).add(want),
                    );
                    if t.tv_sec != 0 || t.tv_nsec != 0 {
                        ts = Some(t.tv_sec * 1_000_000_000 + t.tv_nsec);
                    }
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        Some((seq, ts))
    }
}

/// Ask the driver for hardware timestamps on `ifname`; whether it agreed.
/// veths refuse (`EOPNOTSUPP`), so on this kind of topology the answer is
/// no and the kernel's software timestamps are used.
fn enable_hw_timestamps(fd: libc::c_int, ifname: &std::ffi::CStr) -> bool {
    let mut cfg = HwtstampConfig {
        flags: 0,
        tx_type: HWTSTAMP_TX_ON,
        rx_filter: HWTSTAMP_FILTER_ALL,
    };
    // SAFETY: ifreq is plain data; all-zero is valid.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    let bytes = ifname.to_bytes();
    if bytes.len() >= ifr.ifr_name.len() {
        return false;
    }
    for (d, s) in ifr.ifr_name.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    ifr.ifr_ifru.ifru_data = (&mut cfg as *mut HwtstampConfig).cast();
    // SAFETY: `ifr` names the interface and points at `cfg`, both live
    // across the call, as SIOCSHWTSTAMP expects.
    let r = unsafe { libc::ioctl(fd, SIOCSHWTSTAMP as _, &mut ifr) };
    r == 0 && cfg.tx_type == HWTSTAMP_TX_ON
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_frames_carry_their_sequence_number() {
        let h = ProbeHeader {
            eth_dst: [2, 0, 0, 0, 0, 2],
            eth_src: [2, 0, 0, 0, 0, 0x11],
            ipv4_src: [10, 0, 0, 1],
            ipv4_dst: [10, 0, 0, 2],
            udp_src: 10000,
            udp_dst: 9,
        };
        for len in [60, 242, 1514] {
            let f = h.frame(0x0102_0304_0506_0708, len);
            assert_eq!(f.len(), len);
            assert_eq!(probe_seq(&f), Some(0x0102_0304_0506_0708));
            assert_eq!(&f[0..6], &h.eth_dst);
            assert_eq!(&f[30..34], &h.ipv4_dst);
        }
        let mut f = h.frame(7, 60);
        f[PAYLOAD_OFFSET] ^= 1;
        assert_eq!(probe_seq(&f), None);
        assert_eq!(probe_seq(&f[..40]), None);
    }
}
