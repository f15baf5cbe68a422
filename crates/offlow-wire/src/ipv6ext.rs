//! IPv6 extension headers (RFC 8200 §4) that a parser skips to reach the
//! upper-layer header: hop-by-hop options (0), routing (43), destination
//! options (60) — all three share the generic "next header, length in 8-byte
//! units minus one" shape, viewed by [`ExtHeader`] — the fragment header (44,
//! [`FragmentHeader`]) and the authentication header (51, RFC 4302,
//! [`AuthHeader`], whose length counts 4-byte units minus two).
//!
//! ESP (50) cannot be skipped: what follows it is encrypted.

use crate::bytes::{be16, be32};
use crate::ip::Protocol;
use crate::{view_common, Error, Result};

/// Byte offsets shared by the extension headers.
pub mod field {
    /// Next header (all extension headers).
    pub const NXT_HDR: usize = 0;
    /// Header length (generic: 8-byte units - 1; AH: 4-byte units - 2).
    pub const LENGTH: usize = 1;
    /// Fragment header: offset (13 bits, 8-byte units), reserved (2), M (1).
    pub const FRAG_OFF_M: core::ops::Range<usize> = 2..4;
    /// Fragment header: identification.
    pub const FRAG_IDENT: core::ops::Range<usize> = 4..8;
}

/// Minimum length of a generic extension header.
pub const MIN_EXT_LEN: usize = 8;
/// Length of the fragment header.
pub const FRAGMENT_LEN: usize = 8;
/// Minimum length of the authentication header (with an empty ICV).
pub const MIN_AH_LEN: usize = 8;

/// A view over a hop-by-hop, routing or destination options header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtHeader<T: AsRef<[u8]>> {
    buffer: T,
}

view_common!(ExtHeader);

impl<T: AsRef<[u8]>> ExtHeader<T> {
    /// The buffer must hold the whole header as its length field announces.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < MIN_EXT_LEN || b.len() < self.header_len() {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Next header, raw.
    #[inline]
    pub fn next_header_raw(&self) -> u8 {
        self.buffer.as_ref()[field::NXT_HDR]
    }

    /// Next header.
    #[inline]
    pub fn next_header(&self) -> Protocol {
        self.next_header_raw().into()
    }

    /// Length of the whole header in bytes: (length field + 1) * 8.
    /// Returns 0 when even the length byte is missing.
    #[inline]
    pub fn header_len(&self) -> usize {
        match self.buffer.as_ref().get(field::LENGTH) {
            Some(&n) => (n as usize + 1) * 8,
            None => 0,
        }
    }

    /// Options / type-specific data (after the 2-byte preamble).
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[2..self.header_len()]
    }
}

/// A view over a fragment header (RFC 8200 §4.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragmentHeader<T: AsRef<[u8]>> {
    buffer: T,
}

view_common!(FragmentHeader);

impl<T: AsRef<[u8]>> FragmentHeader<T> {
    /// The buffer must hold the 8-byte header.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < FRAGMENT_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Next header, raw.
    #[inline]
    pub fn next_header_raw(&self) -> u8 {
        self.buffer.as_ref()[field::NXT_HDR]
    }

    /// Fragment offset in 8-byte units.
    #[inline]
    pub fn frag_offset_units(&self) -> u16 {
        be16(self.buffer.as_ref(), field::FRAG_OFF_M.start) >> 3
    }

    /// Fragment offset in bytes.
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        be16(self.buffer.as_ref(), field::FRAG_OFF_M.start) & !7
    }

    /// More-fragments flag.
    #[inline]
    pub fn more_frags(&self) -> bool {
        be16(self.buffer.as_ref(), field::FRAG_OFF_M.start) & 1 != 0
    }

    /// Identification.
    #[inline]
    pub fn ident(&self) -> u32 {
        be32(self.buffer.as_ref(), field::FRAG_IDENT.start)
    }
}

/// A view over an authentication header (RFC 4302 §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthHeader<T: AsRef<[u8]>> {
    buffer: T,
}

view_common!(AuthHeader);

impl<T: AsRef<[u8]>> AuthHeader<T> {
    /// The buffer must hold the whole header as its length field announces.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < MIN_AH_LEN || b.len() < self.header_len() {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Next header, raw.
    #[inline]
    pub fn next_header_raw(&self) -> u8 {
        self.buffer.as_ref()[field::NXT_HDR]
    }

    /// Length of the whole header: (payload length field + 2) * 4.
    /// Returns 0 when even the length byte is missing.
    #[inline]
    pub fn header_len(&self) -> usize {
        match self.buffer.as_ref().get(field::LENGTH) {
            Some(&n) => (n as usize + 2) * 4,
            None => 0,
        }
    }

    /// Security parameters index.
    #[inline]
    pub fn spi(&self) -> u32 {
        be32(self.buffer.as_ref(), 4)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generic_header_length() {
        // Hop-by-hop, next = TCP, length 1 -> 16 bytes.
        let mut b = [0u8; 16];
        b[0] = 6;
        b[1] = 1;
        let h = ExtHeader::new_checked(&b[..]).unwrap();
        assert_eq!(h.header_len(), 16);
        assert_eq!(h.next_header(), Protocol::Tcp);
        assert_eq!(h.data().len(), 14);
        for n in 0..16 {
            assert_eq!(
                ExtHeader::new_checked(&b[..n]),
                Err(Error::Truncated),
                "{n}"
            );
        }
        // length 255 -> 2048 bytes: truncated, no panic.
        b[1] = 255;
        assert_eq!(ExtHeader::new_checked(&b[..]), Err(Error::Truncated));
    }

    #[test]
    fn fragment_header() {
        // next UDP, offset 185 units (1480 bytes), M = 1, ident 0xdeadbeef.
        let off_m: u16 = (185 << 3) | 1;
        let mut b = [17, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef];
        b[2..4].copy_from_slice(&off_m.to_be_bytes());
        let f = FragmentHeader::new_checked(&b[..]).unwrap();
        assert_eq!(f.next_header_raw(), 17);
        assert_eq!(f.frag_offset_units(), 185);
        assert_eq!(f.frag_offset(), 1480);
        assert!(f.more_frags());
        assert_eq!(f.ident(), 0xdead_beef);
        assert_eq!(FragmentHeader::new_checked(&b[..7]), Err(Error::Truncated));
    }

    #[test]
    fn auth_header_length() {
        // payload length 4 -> (4 + 2) * 4 = 24 bytes.
        let mut b = [0u8; 24];
        b[0] = 58;
        b[1] = 4;
        b[4..8].copy_from_slice(&[0, 0, 1, 0]);
        let a = AuthHeader::new_checked(&b[..]).unwrap();
        assert_eq!(
            (a.header_len(), a.next_header_raw(), a.spi()),
            (24, 58, 256)
        );
        assert_eq!(AuthHeader::new_checked(&b[..23]), Err(Error::Truncated));
    }
}
