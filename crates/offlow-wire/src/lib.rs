//! offlow-wire: zero-copy views over packet headers and Internet checksums.
//!
//! What: one module per protocol (Ethernet, VLAN, ARP, IPv4, IPv6, TCP, UDP,
//! SCTP, ICMP, GRE, VXLAN), each a view that validates its length once and
//! then never panics, plus RFC 1071 / RFC 1624 checksums.
//!
//! Invariants: no view reads outside the buffer it was built over; no
//! allocation anywhere in this crate.
//!
//! Thread-safety: everything here is plain data, `Send + Sync`.
#![warn(missing_docs)]

pub mod checksum;
