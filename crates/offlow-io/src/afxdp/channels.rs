//! How many receive queues an interface has (ethtool channels): the
//! `XSKMAP` needs a slot for each, and every queue needs a socket
//! somewhere or its frames go to the kernel stack.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

// ---- linux/ethtool.h, linux/sockios.h ----
const ETHTOOL_GCHANNELS: u32 = 0x3c;
const SIOCETHTOOL: libc::c_ulong = 0x8946;

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
