//! An interface's own kernel counters, read over rtnetlink (`RTM_GETLINK`,
//! the `IFLA_STATS64` attribute: what `ip -s link` shows).
//!
//! Why the switch wants them: a frame can be lost at a port before any
//! socket of the switch sees it, and only the interface counts it. The
//! offload tier at TC ingress sends a miss up by redirecting it into its
//! own port's ingress, through the per-CPU backlog; when that backlog is
//! full the kernel drops the frame and counts it in the interface's
//! `rx_dropped` (`enqueue_to_backlog`), nowhere else. Open vSwitch reports
//! a `system` port's kernel counters as its port statistics for the same
//! reason.
//!
//! A netlink socket belongs to the network namespace it was created in, so
//! [`LinkStatsReader::open`] is called inside the interface's namespace
//! (as the ports are opened) and reads it from any thread afterwards;
//! sysfs would show the namespace it was mounted in instead.
//!
//! Thread-safety: a reader is `Send`; one request is in flight at a time
//! (`&self` calls from several threads would interleave replies, so the
//! owner keeps it to one thread, as the switch's control side does).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::sys::cvt;

/// `linux/netlink.h`: `NLMSG_ERROR`.
const NLMSG_ERROR: u16 = 2;
/// `linux/netlink.h`: `NLM_F_REQUEST`.
const NLM_F_REQUEST: u16 = 1;
/// `linux/rtnetlink.h`: `RTM_NEWLINK` (the answer) and `RTM_GETLINK`.
const RTM_NEWLINK: u16 = 16;
const RTM_GETLINK: u16 = 18;
/// `linux/if_link.h`: `IFLA_STATS64`, a `struct rtnl_link_stats64`.
const IFLA_STATS64: u16 = 23;
/// `struct nlmsghdr` and `struct ifinfomsg`, 16 bytes each.
const NLMSG_HDR: usize = 16;
const IFINFOMSG: usize = 16;
/// The answer for one link: its attributes (names, qdisc, stats, driver
/// info) fit well inside this; a longer one is reported, not misread.
const REPLY_BUF: usize = 32 * 1024;

/// Some of an interface's kernel counters (`struct rtnl_link_stats64`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkCounters {
    /// Frames the interface received (by the kernel's count).
    pub rx_packets: u64,
    /// Frames dropped on receive before any socket had them: a full
    /// backlog, no protocol handler and no tap, driver drops.
    pub rx_dropped: u64,
    /// Frames dropped on transmit.
    pub tx_dropped: u64,
}

/// Reads one interface's counters (module docs).
pub struct LinkStatsReader {
    fd: OwnedFd,
    ifindex: u32,
    seq: AtomicU32,
}

impl LinkStatsReader {
    /// A reader for interface `ifindex` of the calling thread's namespace.
    pub fn open(ifindex: u32) -> io::Result<LinkStatsReader> {
        // SAFETY: plain socket creation; checked.
        let raw = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        };
        let raw = cvt(raw, "rtnetlink socket")?;
        // SAFETY: fresh descriptor, owned from here on.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        Ok(LinkStatsReader {
            fd,
            ifindex,
            seq: AtomicU32::new(0),
        })
    }

    /// The interface's counters now. An error when the interface is gone
    /// (`ENODEV`) or the kernel's answer carries no `IFLA_STATS64`.
    pub fn read(&self) -> io::Result<LinkCounters> {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        let mut req = [0u8; NLMSG_HDR + IFINFOMSG];
        req[0..4].copy_from_slice(&((NLMSG_HDR + IFINFOMSG) as u32).to_ne_bytes());
        req[4..6].copy_from_slice(&RTM_GETLINK.to_ne_bytes());
        req[6..8].copy_from_slice(&NLM_F_REQUEST.to_ne_bytes());
        req[8..12].copy_from_slice(&seq.to_ne_bytes());
        // ifinfomsg: family AF_UNSPEC, type 0, the index, flags 0, change 0.
        req[NLMSG_HDR + 4..NLMSG_HDR + 8].copy_from_slice(&(self.ifindex as i32).to_ne_bytes());
        // SAFETY: `req` is a live buffer of the length passed; a netlink
        // socket with no address sends to the kernel.
        let rc = unsafe { libc::send(self.fd.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) };
        cvt(rc as libc::c_int, "rtnetlink request")?;
        let mut buf = vec![0u8; REPLY_BUF];
        loop {
            // SAFETY: `buf` is live and as long as passed. MSG_TRUNC makes
            // the kernel return the datagram's real length.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_TRUNC,
                )
            };
            let n = cvt(n as libc::c_int, "rtnetlink answer")? as usize;
            if n > buf.len() {
                return Err(io::Error::other(format!(
                    "rtnetlink answer of {n} bytes is longer than {REPLY_BUF}"
                )));
            }
            if let Some(answer) = parse_answer(&buf[..n], seq)? {
                return Ok(answer);
            }
            // An answer to an earlier request (one that timed out cannot
            // happen here: requests are blocking); read on.
        }
    }
}

/// The counters in one datagram of the kernel's answer to `RTM_GETLINK`
/// request `seq` (what [`LinkStatsReader::read`] receives); `None` when it
/// answers another request. The kernel's error answer is its errno; a
/// length that overruns the datagram, or an answer without
/// `IFLA_STATS64`, is an error, never a panic (`fuzz/fuzz_targets/rtnl.rs`).
pub fn parse_answer(mut data: &[u8], seq: u32) -> io::Result<Option<LinkCounters>> {
    let u16_at = |b: &[u8], o: usize| u16::from_ne_bytes([b[o], b[o + 1]]);
    let u32_at = |b: &[u8], o: usize| u32::from_ne_bytes(b[o..o + 4].try_into().unwrap());
    let u64_at = |b: &[u8], o: usize| u64::from_ne_bytes(b[o..o + 8].try_into().unwrap());
    while data.len() >= NLMSG_HDR {
        let len = u32_at(data, 0) as usize;
        if len < NLMSG_HDR || len > data.len() {
            return Err(io::Error::other("malformed rtnetlink answer"));
        }
        let (msg, rest) = data.split_at(len);
        // Messages start 4-byte aligned; the last one's padding may be cut.
        data = &rest[(align4(len) - len).min(rest.len())..];
        if u32_at(msg, 8) != seq {
            continue;
        }
        match u16_at(msg, 4) {
            NLMSG_ERROR => {
                let code = if msg.len() >= NLMSG_HDR + 4 {
                    i32::from_ne_bytes(msg[NLMSG_HDR..NLMSG_HDR + 4].try_into().unwrap())
                } else {
                    -libc::EIO
                };
                // The kernel sends a negative errno. Anything else (0 is an
                // acknowledgement, which this request does not ask for; a
                // positive or i32::MIN code, whose negation overflows, was
                // found by the fuzz target) is no errno: EIO.
                let errno = code.checked_neg().filter(|&e| e > 0).unwrap_or(libc::EIO);
                return Err(io::Error::from_raw_os_error(errno));
            }
            RTM_NEWLINK => {
                let mut attrs = msg.get(NLMSG_HDR + IFINFOMSG..).unwrap_or(&[]);
                while attrs.len() >= 4 {
                    let alen = usize::from(u16_at(attrs, 0));
                    if alen < 4 || alen > attrs.len() {
                        break;
                    }
                    if u16_at(attrs, 2) == IFLA_STATS64 && alen >= 4 + 8 * 8 {
                        let s = &attrs[4..alen];
                        // rx_packets, tx_packets, rx_bytes, tx_bytes,
                        // rx_errors, tx_errors, rx_dropped, tx_dropped.
                        return Ok(Some(LinkCounters {
                            rx_packets: u64_at(s, 0),
                            rx_dropped: u64_at(s, 48),
                            tx_dropped: u64_at(s, 56),
                        }));
                    }
                    attrs = &attrs[align4(alen).min(attrs.len())..];
                }
                return Err(io::Error::other("rtnetlink answer without IFLA_STATS64"));
            }
            _ => {}
        }
    }
    Ok(None)
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(kind: u16, seq: u32, body: &[u8]) -> Vec<u8> {
        let mut m = Vec::new();
        m.extend_from_slice(&((NLMSG_HDR + body.len()) as u32).to_ne_bytes());
        m.extend_from_slice(&kind.to_ne_bytes());
        m.extend_from_slice(&0u16.to_ne_bytes());
        m.extend_from_slice(&seq.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(body);
        while m.len() % 4 != 0 {
            m.push(0);
        }
        m
    }

    fn attr(kind: u16, payload: &[u8]) -> Vec<u8> {
        let mut a = Vec::new();
        a.extend_from_slice(&((4 + payload.len()) as u16).to_ne_bytes());
        a.extend_from_slice(&kind.to_ne_bytes());
        a.extend_from_slice(payload);
        while a.len() % 4 != 0 {
            a.push(0);
        }
        a
    }

    fn newlink(seq: u32, stats: [u64; 8]) -> Vec<u8> {
        let mut body = vec![0u8; IFINFOMSG];
        body.extend(attr(3, b"p1\0")); // IFLA_IFNAME, unaligned length
        let s: Vec<u8> = stats.iter().flat_map(|v| v.to_ne_bytes()).collect();
        body.extend(attr(IFLA_STATS64, &s));
        message(RTM_NEWLINK, seq, &body)
    }

    #[test]
    fn the_stats_attribute_is_found_past_others() {
        let m = newlink(7, [10, 20, 30, 40, 1, 2, 5, 6]);
        let c = parse_answer(&m, 7).unwrap().unwrap();
        assert_eq!(
            c,
            LinkCounters {
                rx_packets: 10,
                rx_dropped: 5,
                tx_dropped: 6
            }
        );
    }

    #[test]
    fn answers_to_other_requests_are_skipped() {
        let mut d = newlink(6, [1; 8]);
        d.extend(newlink(7, [2; 8]));
        assert_eq!(parse_answer(&d, 7).unwrap().unwrap().rx_dropped, 2);
        assert_eq!(parse_answer(&newlink(6, [1; 8]), 7).unwrap(), None);
    }

    #[test]
    fn an_error_answer_is_the_errno() {
        let m = message(NLMSG_ERROR, 3, &(-libc::ENODEV).to_ne_bytes());
        let e = parse_answer(&m, 3).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENODEV));
    }

    #[test]
    fn an_error_code_that_is_no_errno_is_eio_not_a_panic() {
        for code in [i32::MIN, 0, 5] {
            let m = message(NLMSG_ERROR, 3, &code.to_ne_bytes());
            let e = parse_answer(&m, 3).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EIO), "code {code}");
        }
    }

    #[test]
    fn truncated_or_lying_lengths_are_errors_not_panics() {
        let m = newlink(1, [1; 8]);
        for cut in 0..m.len() {
            let _ = parse_answer(&m[..cut], 1);
        }
        let mut bad = m.clone();
        bad[0..4].copy_from_slice(&1000u32.to_ne_bytes());
        assert!(parse_answer(&bad, 1).is_err());
        let mut short_attr = m;
        // The first attribute's length below its header: parsing stops.
        short_attr[NLMSG_HDR + IFINFOMSG..NLMSG_HDR + IFINFOMSG + 2]
            .copy_from_slice(&2u16.to_ne_bytes());
        assert!(parse_answer(&short_attr, 1).is_err());
    }
}
