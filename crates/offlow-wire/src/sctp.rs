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
    /// Does the CRC32c over the whole buffer verify?
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        let b = self.buffer.as_ref();
        crate::checksum::sctp_checksum(b).is_some_and(|c| b[field::CHECKSUM] == c.to_le_bytes()[..])
    }

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
    /// Set the verification tag.
    #[inline]
    pub fn set_verification_tag(&mut self, v: u32) {
        put32(self.buffer.as_mut(), field::VERIFICATION_TAG.start, v);
    }

    /// Compute the CRC32c over the whole buffer (common header and chunks)
    /// and store it (RFC 9260 §6.8, Appendix A: least significant byte
    /// first).
    #[inline]
    pub fn fill_checksum(&mut self) {
        // The buffer holds the common header (check_len or the caller).
        let c = crate::checksum::sctp_checksum(self.buffer.as_ref()).unwrap_or(0);
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&c.to_le_bytes());
    }

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

/// A parsed SCTP common header (RFC 9260 §3.1); chunks are the caller's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Verification tag.
    pub verification_tag: u32,
}

impl Repr {
    /// Read the common header of `packet`; the checksum is not verified.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
            verification_tag: packet.verification_tag(),
        })
    }

    /// Bytes [`Repr::emit`] writes.
    #[inline]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Bytes the header needs.
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Write the common header with checksum 0; once the chunks are in
    /// place, [`Packet::fill_checksum`] computes the CRC32c.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_src_port(self.src_port);
        packet.set_dst_port(self.dst_port);
        packet.set_verification_tag(self.verification_tag);
        packet.set_checksum(0);
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
