//! offlow-wire: zero-copy views over packet headers, parsed header values,
//! and every checksum the switch computes.
//!
//! What: one module per protocol (Ethernet II, 802.1Q/802.1ad VLAN tags,
//! MPLS, PBB I-TAG, ARP, IPv4, IPv6 and its extension headers, TCP, UDP,
//! SCTP, ICMPv4, ICMPv6 with neighbour discovery, GRE, VXLAN), in the style of
//! smoltcp's `wire` module, plus RFC 1071 / RFC 1624 checksums and SCTP's
//! CRC32c ([`checksum`]: the one implementation in the workspace).
//!
//! Every view is a thin wrapper `Packet<T: AsRef<[u8]>>` over a buffer:
//! - `new_checked` validates the length (and any field the length of the
//!   header depends on) once; afterwards no accessor panics. Accessors that
//!   return a variable-length part (options, payload) clamp it to the buffer,
//!   so a header whose length field points past the buffer still never
//!   over-reads (such views offer a `*_truncated()` query).
//! - `new_unchecked` skips the validation: the caller has checked the bounds
//!   (firecracker's `_unchecked` convention). Accessors on such a view may
//!   panic if the caller was wrong; they never read out of bounds.
//! - Field offsets live in each module's `field` module.
//! - Wire enums keep an `Unknown(n)` variant so an unknown code never fails.
//! - Setters exist for the fields that OpenFlow actions rewrite in place
//!   (addresses, ports, TTL/hop limit, TOS/traffic class, VLAN TCI, MPLS
//!   LSE, checksums); they are available when `T: AsMut<[u8]>`.
//! - A parsed value `Repr` (smoltcp's habit) exists for the headers we
//!   build (Ethernet, VLAN tag, MPLS, ARP, IPv4, IPv6, TCP, UDP, SCTP,
//!   ICMPv4, ICMPv6): `Repr::parse(&view)` reads it, `Repr::emit(&mut view)`
//!   writes every field of the header (tests emit into a poisoned buffer to
//!   prove it), `header_len` / `buffer_len` size the buffer. Transport
//!   checksums need the payload in place first: `emit` writes zero and the
//!   view's `fill_checksum` finishes; IPv4's header checksum is filled by
//!   `emit`. `parse` never verifies a checksum (the switch forwards frames
//!   whatever their checksums); the views' `verify_checksum` do.
//!
//! Invariants: no view reads outside the buffer it was built over; no
//! allocation anywhere in this crate.
//!
//! Thread-safety: everything here is plain data, `Send + Sync`.
#![warn(missing_docs)]

pub mod arp;
pub mod checksum;
pub mod ethernet;
pub mod gre;
pub mod icmpv4;
pub mod icmpv6;
pub mod ip;
pub mod ipv4;
pub mod ipv6;
pub mod ipv6ext;
pub mod mpls;
pub mod pbb;
pub mod sctp;
pub mod tcp;
pub mod tunnel;
pub mod udp;
pub mod vlan;
pub mod vxlan;

use core::fmt;

/// Why a view could not be built over a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Error {
    /// The buffer is shorter than the header (or than the header length a
    /// field announces).
    Truncated,
    /// A version field holds a value this view does not parse.
    BadVersion,
    /// A header-length field is below the protocol's minimum (IPv4 IHL < 5,
    /// TCP data offset < 5, ND option length 0).
    BadHeaderLen,
    /// A total-length field is smaller than the header itself.
    BadTotalLen,
    /// The header uses a feature this crate does not parse (e.g. GRE
    /// routing, RFC 1701).
    Unsupported,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Error::Truncated => "buffer shorter than the header",
            Error::BadVersion => "unsupported version field",
            Error::BadHeaderLen => "header length field below the minimum",
            Error::BadTotalLen => "total length field smaller than the header",
            Error::Unsupported => "header uses an unsupported feature",
        })
    }
}

impl std::error::Error for Error {}

/// Result of building a view.
pub type Result<T> = core::result::Result<T, Error>;

/// A 48-bit IEEE 802 MAC address, as on the wire.
pub type MacAddr = [u8; 6];

/// Big-endian field readers and writers shared by the views. Each takes a
/// slice the caller has bounds-checked (through `new_checked`); indexing
/// still bounds-checks, so a wrong caller panics instead of over-reading.
pub(crate) mod bytes {
    #[inline(always)]
    pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
        u16::from_be_bytes([b[at], b[at + 1]])
    }
    #[inline(always)]
    pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
        u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }
    #[inline(always)]
    pub(crate) fn put16(b: &mut [u8], at: usize, v: u16) {
        b[at..at + 2].copy_from_slice(&v.to_be_bytes());
    }
    #[inline(always)]
    pub(crate) fn put32(b: &mut [u8], at: usize, v: u32) {
        b[at..at + 4].copy_from_slice(&v.to_be_bytes());
    }
    #[inline(always)]
    pub(crate) fn array<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
        let mut out = [0u8; N];
        out.copy_from_slice(&b[at..at + N]);
        out
    }
}

/// Defines a wire enum over an integer with an `Unknown(n)` catch-all, and
/// the conversions both ways.
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident($ty:ty) {
            $( $(#[$vmeta:meta])* $variant:ident = $value:expr ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
            /// A value this crate has no name for.
            Unknown($ty),
        }

        impl From<$ty> for $name {
            #[inline]
            fn from(v: $ty) -> Self {
                match v {
                    $( $value => $name::$variant, )+
                    other => $name::Unknown(other),
                }
            }
        }

        impl From<$name> for $ty {
            #[inline]
            fn from(v: $name) -> $ty {
                match v {
                    $( $name::$variant => $value, )+
                    $name::Unknown(other) => other,
                }
            }
        }
    };
}
pub(crate) use wire_enum;

/// The constructors every view shares: `new_unchecked`, `new_checked`
/// (which calls the view's own `check_len`) and `into_inner`.
macro_rules! view_common {
    ($name:ident) => {
        impl<T: AsRef<[u8]>> $name<T> {
            /// Wrap `buffer` without validation: the caller has checked the
            /// bounds. Accessors may panic (never over-read) if it had not.
            #[inline]
            pub fn new_unchecked(buffer: T) -> Self {
                $name { buffer }
            }

            /// Wrap `buffer` after validating it with `check_len`; every
            /// accessor of the returned view is panic-free.
            #[inline]
            pub fn new_checked(buffer: T) -> $crate::Result<Self> {
                let v = Self::new_unchecked(buffer);
                v.check_len()?;
                Ok(v)
            }

            /// The underlying buffer.
            #[inline]
            pub fn into_inner(self) -> T {
                self.buffer
            }
        }
    };
}
pub(crate) use view_common;
