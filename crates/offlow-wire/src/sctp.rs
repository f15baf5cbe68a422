//! SCTP common header (RFC 9260 §3.1).

use crate::bytes::{be16, be32, put16, put32};
use crate::{view_common, Error, Result};

/// Byte ranges of the common header.
pub mod field {
    use core::ops::Range;
    /// Source port.
    pub const SRC_PORT: Range<usize> = 0..2;
    /// Destination port.
    pub const DST_PORT: Range<usize> = 2..4;
    /// Verification tag.
    pub const VERIFICATION_TAG: Range<usize> = 4..8;
    /// CRC32c checksum.
    pub const CHECKSUM: Range<usize> = 8..12;
}

/// Length of the common header.
pub const HEADER_LEN: usize = field::CHECKSUM.end;

/// A view over an SCTP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

view_common!(Packet);

impl<T: AsRef<[u8]>> Packet<T> {
    /// The buffer must hold the 12-byte common header.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Source port.
    #[inline]
    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::SRC_PORT.start)
    }

    /// Destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::DST_PORT.start)
    }

    /// Verification tag.
    #[inline]
    pub fn verification_tag(&self) -> u32 {
        be32(self.buffer.as_ref(), field::VERIFICATION_TAG.start)
    }

    /// Checksum (CRC32c, stored as on the wire).
    #[inline]
    pub fn checksum(&self) -> u32 {
        be32(self.buffer.as_ref(), field::CHECKSUM.start)
    }

    /// Chunks after the common header.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set the source port.
    #[inline]
    pub fn set_src_port(&mut self, p: u16) {
        put16(self.buffer.as_mut(), field::SRC_PORT.start, p);
    }

    /// Set the destination port.
    #[inline]
    pub fn set_dst_port(&mut self, p: u16) {
        put16(self.buffer.as_mut(), field::DST_PORT.start, p);
    }

    /// Set the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, c: u32) {
        put32(self.buffer.as_mut(), field::CHECKSUM.start, c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses() {
        let mut b = [
            0x0b, 0x59, 0x0b, 0x5a, 0, 0, 0, 7, 0xde, 0xad, 0xbe, 0xef, 1,
        ];
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!((p.src_port(), p.dst_port()), (2905, 2906));
        assert_eq!((p.verification_tag(), p.checksum()), (7, 0xdead_beef));
        assert_eq!(p.payload(), &[1]);
        for n in 0..HEADER_LEN {
            assert_eq!(Packet::new_checked(&b[..n]), Err(Error::Truncated));
        }
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        p.set_src_port(1);
        p.set_dst_port(2);
        p.set_checksum(3);
        assert_eq!((p.src_port(), p.dst_port(), p.checksum()), (1, 2, 3));
    }
}
