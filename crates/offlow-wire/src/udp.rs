//! UDP header (RFC 768).
//!
//! `new_checked` validates the 8-byte header only. The length field is not
//! trusted for bounds: [`Packet::payload`] runs to `length` clamped to the
//! buffer, or to the end of the buffer when `length` is below 8.

use crate::bytes::{be16, put16};
use crate::checksum::{fold, sum};
use crate::{view_common, Error, Result};

/// Byte ranges of the header.
pub mod field {
    use core::ops::Range;
    /// Source port.
    pub const SRC_PORT: Range<usize> = 0..2;
    /// Destination port.
    pub const DST_PORT: Range<usize> = 2..4;
    /// Length (header + data).
    pub const LENGTH: Range<usize> = 4..6;
    /// Checksum.
    pub const CHECKSUM: Range<usize> = 6..8;
}

/// Length of the header.
pub const HEADER_LEN: usize = field::CHECKSUM.end;

/// A view over a UDP datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

view_common!(Packet);

impl<T: AsRef<[u8]>> Packet<T> {
    /// Header and payload (what the checksum covers).
    #[inline]
    fn datagram(&self) -> &[u8] {
        let end = HEADER_LEN + self.payload().len();
        &self.buffer.as_ref()[..end]
    }

    /// Does the checksum verify against pseudo-header sum `pseudo`? A zero
    /// checksum (none sent) verifies.
    #[inline]
    pub fn verify_checksum(&self, pseudo: u32) -> bool {
        self.checksum() == 0 || fold(sum(self.datagram(), pseudo)) == 0xffff
    }

    /// The buffer must hold the 8-byte header.
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

    /// Length field.
    #[inline]
    pub fn len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH.start)
    }

    /// Is the length field at most the header length (no data)?
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() as usize <= HEADER_LEN
    }

    /// Checksum (0 = none, for IPv4).
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM.start)
    }

    /// Payload, bounded by the length field and the buffer.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let l = self.len() as usize;
        let end = if l < HEADER_LEN {
            b.len()
        } else {
            l.min(b.len())
        };
        &b[HEADER_LEN..end]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set the length field.
    #[inline]
    pub fn set_len(&mut self, len: u16) {
        put16(self.buffer.as_mut(), field::LENGTH.start, len);
    }

    /// Compute the checksum over the datagram (bounded by the length field
    /// as [`Packet::payload`] is) starting from the pseudo-header sum
    /// `pseudo`, and store it. RFC 768: a computed 0 is sent as 0xffff, as
    /// 0 means "no checksum".
    #[inline]
    pub fn fill_checksum(&mut self, pseudo: u32) {
        self.set_checksum(0);
        let c = match !fold(sum(self.datagram(), pseudo)) {
            0 => 0xffff,
            c => c,
        };
        self.set_checksum(c);
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

    /// Set the checksum.
    #[inline]
    pub fn set_checksum(&mut self, c: u16) {
        put16(self.buffer.as_mut(), field::CHECKSUM.start, c);
    }
}

/// A parsed UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Payload length (length field minus the header).
    pub payload_len: usize,
}

impl Repr {
    /// Read the header of `packet`. A length field below 8 reads as an
    /// empty payload; the checksum is not verified (see
    /// [`Packet::verify_checksum`]).
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
            payload_len: (packet.len() as usize).saturating_sub(HEADER_LEN),
        })
    }

    /// Bytes [`Repr::emit`] writes.
    #[inline]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Bytes of the whole datagram.
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Write the header with checksum 0 ("none"); once the payload is in
    /// place, [`Packet::fill_checksum`] computes it. The length saturates at
    /// 65535.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_src_port(self.src_port);
        packet.set_dst_port(self.dst_port);
        packet.set_len(u16::try_from(HEADER_LEN + self.payload_len).unwrap_or(u16::MAX));
        packet.set_checksum(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_bounds_payload() {
        let mut b = [0x00, 0x35, 0x12, 0xb5, 0x00, 0x0a, 0xab, 0xcd, 1, 2, 3];
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!((p.src_port(), p.dst_port(), p.len()), (53, 4789, 10));
        assert_eq!(p.checksum(), 0xabcd);
        assert_eq!(p.payload(), &[1, 2], "length field bounds the payload");
        b[5] = 0x40; // length 64 > buffer: clamped
        assert_eq!(Packet::new_checked(&b[..]).unwrap().payload(), &[1, 2, 3]);
        b[5] = 3; // length < 8: rest of buffer
        assert_eq!(Packet::new_checked(&b[..]).unwrap().payload(), &[1, 2, 3]);
        for n in 0..HEADER_LEN {
            assert_eq!(Packet::new_checked(&b[..n]), Err(Error::Truncated));
        }
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        p.set_src_port(7);
        p.set_dst_port(8);
        p.set_checksum(9);
        assert_eq!((p.src_port(), p.dst_port(), p.checksum()), (7, 8, 9));
    }
}
