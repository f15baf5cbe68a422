//! offlow-testkit: the one frame builder of the workspace.
//!
//! What: [`FrameBuilder`], a fluent builder of Ethernet frames (Ethernet →
//! VLAN tags / MPLS labels → IPv4 / IPv6 / ARP → TCP / UDP / SCTP / ICMPv4 /
//! ICMPv6 or a raw IP payload → payload) built on `offlow_wire`'s `Repr`
//! values, so every header is written by the same `emit` the wire tests
//! prove field by field. Tests, examples, the trace command and the
//! benchmark workload all build their frames here instead of each writing
//! bytes by hand.
//!
//! Invariants: unless a knob says otherwise, a built frame is well formed —
//! every length field covers exactly what follows it and every checksum
//! (IPv4 header, TCP/UDP/ICMPv6 with their pseudo-headers, ICMPv4, SCTP
//! CRC32c) is valid. The knobs that break this say so in their name
//! ([`Checksum::Bad`], [`FrameBuilder::ip_total_len`],
//! [`FrameBuilder::truncate`], ...). Defaults are fixed (TTL 64, no IPv4
//! flags, TCP ACK with window 65535, ...) so a frame's bytes depend only on
//! the calls made.
//!
//! Thread-safety: plain data; building allocates one `Vec`.
#![warn(missing_docs)]

mod builder;

pub use builder::{Checksum, FrameBuilder};
pub use offlow_wire::tcp::flags as tcp_flags;
pub use offlow_wire::MacAddr;

/// `02:00:00:00:00:01`, a locally administered source address.
pub const MAC_SRC: MacAddr = [0x02, 0, 0, 0, 0, 0x01];
/// `02:00:00:00:00:02`, a locally administered destination address.
pub const MAC_DST: MacAddr = [0x02, 0, 0, 0, 0, 0x02];

/// `2001:db8::<last>`, a documentation address (RFC 3849).
pub const fn v6(last: u8) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[0] = 0x20;
    a[1] = 0x01;
    a[2] = 0x0d;
    a[3] = 0xb8;
    a[15] = last;
    a
}
