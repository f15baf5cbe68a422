//! GRE header (RFC 2784) with the key and sequence number extensions of
//! RFC 2890.
//!
//! ```text
//! C R K S s Recur(3) | Flags(5) | Ver(3) | Protocol Type (16)
//! [Checksum (16) | Reserved1 (16)]   if C
//! [Key (32)]                         if K (RFC 2890)
//! [Sequence Number (32)]             if S (RFC 2890)
//! ```
//! RFC 2784 §2.3: "A receiver MUST discard a packet where any of bits 1-5
//! are non-zero, unless that receiver implements RFC 1701"; RFC 2890 gives
//! bits 2 (K) and 3 (S) meaning again. So R (bit 1), s (bit 4) and Recur
//! (bits 5-7) make the view fail with [`Error::Unsupported`], and a version
//! other than 0 (1 is PPTP's enhanced GRE, RFC 2637, whose "key" is not a
//! tunnel key) fails with [`Error::BadVersion`].

use crate::bytes::{be16, be32};
use crate::ethernet::EtherType;
use crate::{view_common, Error, Result};

/// Byte ranges of the fixed part.
pub mod field {
    use core::ops::Range;
    /// Flags and version.
    pub const FLAGS_VER: Range<usize> = 0..2;
    /// Protocol type (an EtherType).
    pub const PROTOCOL: Range<usize> = 2..4;
    /// Start of the optional fields.
    pub const OPTIONAL: usize = 4;
}

/// Length without optional fields.
pub const MIN_HEADER_LEN: usize = field::OPTIONAL;
/// Checksum present.
pub const FLAG_C: u16 = 0x8000;
/// Routing present (RFC 1701; unsupported).
pub const FLAG_R: u16 = 0x4000;
/// Key present (RFC 2890).
pub const FLAG_K: u16 = 0x2000;
/// Sequence number present (RFC 2890).
pub const FLAG_S: u16 = 0x1000;
/// Strict source route (RFC 1701; unsupported).
pub const FLAG_STRICT: u16 = 0x0800;
/// Recursion control bits (RFC 1701; must be zero).
pub const RECUR_MASK: u16 = 0x0700;
/// Version bits.
pub const VERSION_MASK: u16 = 0x0007;

/// A view over a GRE header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

view_common!(Packet);

impl<T: AsRef<[u8]>> Packet<T> {
    /// Validate flags, version and the length the flags imply.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < MIN_HEADER_LEN {
            return Err(Error::Truncated);
        }
        let f = self.flags_version();
        if f & VERSION_MASK != 0 {
            return Err(Error::BadVersion);
        }
        if f & (FLAG_R | FLAG_STRICT | RECUR_MASK) != 0 {
            return Err(Error::Unsupported);
        }
        if b.len() < self.header_len() {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// The raw flags/version word.
    #[inline]
    pub fn flags_version(&self) -> u16 {
        be16(self.buffer.as_ref(), field::FLAGS_VER.start)
    }

    /// Version (0 for a valid view).
    #[inline]
    pub fn version(&self) -> u8 {
        (self.flags_version() & VERSION_MASK) as u8
    }

    /// Protocol type of the payload, raw.
    #[inline]
    pub fn protocol_raw(&self) -> u16 {
        be16(self.buffer.as_ref(), field::PROTOCOL.start)
    }

    /// Protocol type of the payload.
    #[inline]
    pub fn protocol(&self) -> EtherType {
        self.protocol_raw().into()
    }

    /// Header length implied by the C, K and S flags.
    #[inline]
    pub fn header_len(&self) -> usize {
        let f = self.flags_version();
        MIN_HEADER_LEN
            + 4 * ((f & FLAG_C != 0) as usize
                + (f & FLAG_K != 0) as usize
                + (f & FLAG_S != 0) as usize)
    }

    /// Checksum field, if present.
    #[inline]
    pub fn checksum(&self) -> Option<u16> {
        if self.flags_version() & FLAG_C != 0 {
            Some(be16(self.buffer.as_ref(), field::OPTIONAL))
        } else {
            None
        }
    }

    #[inline]
    fn key_offset(&self) -> usize {
        field::OPTIONAL
            + if self.flags_version() & FLAG_C != 0 {
                4
            } else {
                0
            }
    }

    /// Key, if present (RFC 2890 §2.1).
    #[inline]
    pub fn key(&self) -> Option<u32> {
        if self.flags_version() & FLAG_K != 0 {
            Some(be32(self.buffer.as_ref(), self.key_offset()))
        } else {
            None
        }
    }

    /// Sequence number, if present (RFC 2890 §2.2).
    #[inline]
    pub fn sequence(&self) -> Option<u32> {
        let f = self.flags_version();
        if f & FLAG_S != 0 {
            let at = self.key_offset() + if f & FLAG_K != 0 { 4 } else { 0 };
            Some(be32(self.buffer.as_ref(), at))
        } else {
            None
        }
    }

    /// The encapsulated packet.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_with_and_without_checksum() {
        // K only: key at 4.
        let b = [0x20, 0x00, 0x65, 0x58, 0, 0, 0x30, 0x39, 0xee];
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.header_len(), 8);
        assert_eq!(p.key(), Some(12345));
        assert_eq!((p.checksum(), p.sequence()), (None, None));
        assert_eq!(p.protocol_raw(), 0x6558);
        assert_eq!(p.payload(), &[0xee]);
        // C, K, S: checksum at 4, key at 8, sequence at 12.
        let b = [
            0xb0, 0x00, 0x08, 0x00, 0xab, 0xcd, 0, 0, 0, 0, 0, 7, 0, 0, 0, 9,
        ];
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.header_len(), 16);
        assert_eq!(
            (p.checksum(), p.key(), p.sequence()),
            (Some(0xabcd), Some(7), Some(9))
        );
        assert_eq!(p.protocol(), EtherType::Ipv4);
        for n in 0..16 {
            assert_eq!(Packet::new_checked(&b[..n]), Err(Error::Truncated), "{n}");
        }
    }

    #[test]
    fn rejects_version_and_rfc1701_bits() {
        let mut b = [0x00, 0x01, 0x88, 0x0b, 0, 0, 0, 0];
        assert_eq!(Packet::new_checked(&b[..]), Err(Error::BadVersion));
        b[1] = 0;
        assert!(Packet::new_checked(&b[..]).unwrap().key().is_none());
        for bit in [FLAG_R, FLAG_STRICT, 0x0100] {
            b[..2].copy_from_slice(&bit.to_be_bytes());
            assert_eq!(Packet::new_checked(&b[..]), Err(Error::Unsupported));
        }
    }
}
