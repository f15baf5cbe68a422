//! ICMP for IPv4 (RFC 792): type, code, checksum and the 4-byte
//! type-specific word that every ICMPv4 message carries.

use crate::bytes::{be16, be32, put16, put32};
use crate::{view_common, wire_enum, Error, Result};

/// Byte ranges of the header.
pub mod field {
    use core::ops::{Range, RangeFrom};
    /// Message type.
    pub const TYPE: usize = 0;
    /// Message code.
    pub const CODE: usize = 1;
    /// Checksum.
    pub const CHECKSUM: Range<usize> = 2..4;
    /// Type-specific word (identifier/sequence, unused, pointer, gateway...).
    pub const REST: Range<usize> = 4..8;
    /// Message body.
    pub const PAYLOAD: RangeFrom<usize> = 8..;
}

/// Length of the header.
pub const HEADER_LEN: usize = field::PAYLOAD.start;

wire_enum! {
    /// ICMPv4 message types.
    pub enum Message(u8) {
        /// Echo reply.
        EchoReply = 0,
        /// Destination unreachable.
        DstUnreachable = 3,
        /// Redirect.
        Redirect = 5,
        /// Echo request.
        EchoRequest = 8,
        /// Time exceeded.
        TimeExceeded = 11,
        /// Parameter problem.
        ParamProblem = 12,
        /// Timestamp.
        Timestamp = 13,
        /// Timestamp reply.
        TimestampReply = 14,
    }
}

/// A view over an ICMPv4 message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

view_common!(Packet);

impl<T: AsRef<[u8]>> Packet<T> {
    /// The type-specific word after the checksum.
    #[inline]
    pub fn rest(&self) -> u32 {
        be32(self.buffer.as_ref(), field::REST.start)
    }

    /// Does the checksum over the whole buffer verify?
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        crate::checksum::checksum(self.buffer.as_ref()) == 0
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

    /// Message type, raw.
    #[inline]
    pub fn msg_type_raw(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }

    /// Message type.
    #[inline]
    pub fn msg_type(&self) -> Message {
        self.msg_type_raw().into()
    }

    /// Message code.
    #[inline]
    pub fn msg_code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }

    /// Checksum.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM.start)
    }

    /// Echo identifier (first half of the type-specific word).
    #[inline]
    pub fn echo_ident(&self) -> u16 {
        be16(self.buffer.as_ref(), field::REST.start)
    }

    /// Echo sequence number (second half of the type-specific word).
    #[inline]
    pub fn echo_seq_no(&self) -> u16 {
        be16(self.buffer.as_ref(), field::REST.start + 2)
    }

    /// Message body after the 8-byte header.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set the type-specific word (echo: identifier << 16 | sequence).
    #[inline]
    pub fn set_rest(&mut self, v: u32) {
        put32(self.buffer.as_mut(), field::REST.start, v);
    }

    /// Compute the checksum over the whole buffer (RFC 792: the message,
    /// no pseudo-header) and store it.
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = crate::checksum::checksum(self.buffer.as_ref());
        self.set_checksum(c);
    }

    /// Set the type.
    #[inline]
    pub fn set_msg_type(&mut self, t: Message) {
        self.buffer.as_mut()[field::TYPE] = t.into();
    }

    /// Set the code.
    #[inline]
    pub fn set_msg_code(&mut self, c: u8) {
        self.buffer.as_mut()[field::CODE] = c;
    }

    /// Set the checksum.
    #[inline]
    pub fn set_checksum(&mut self, c: u16) {
        put16(self.buffer.as_mut(), field::CHECKSUM.start, c);
    }
}

/// A parsed ICMPv4 header (the 8 bytes before the message body).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Type.
    pub msg_type: Message,
    /// Code.
    pub code: u8,
    /// The type-specific word (echo: identifier << 16 | sequence number).
    pub rest: u32,
}

impl Repr {
    /// An echo request with identifier `ident` and sequence number `seq`.
    pub const fn echo_request(ident: u16, seq: u16) -> Repr {
        Repr {
            msg_type: Message::EchoRequest,
            code: 0,
            rest: ((ident as u32) << 16) | seq as u32,
        }
    }

    /// Read the header of `packet`; the checksum is not verified.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            msg_type: packet.msg_type(),
            code: packet.msg_code(),
            rest: packet.rest(),
        })
    }

    /// Bytes [`Repr::emit`] writes.
    #[inline]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Bytes the header needs (the body is the caller's).
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Write the header with checksum 0; once the body is in place,
    /// [`Packet::fill_checksum`] computes it.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_msg_type(self.msg_type);
        packet.set_msg_code(self.code);
        packet.set_checksum(0);
        packet.set_rest(self.rest);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_echo() {
        let mut b = [8, 0, 0xf7, 0xfd, 0, 1, 0, 2, 0xaa];
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!((p.msg_type(), p.msg_code()), (Message::EchoRequest, 0));
        assert_eq!(
            (p.echo_ident(), p.echo_seq_no(), p.checksum()),
            (1, 2, 0xf7fd)
        );
        assert_eq!(p.payload(), &[0xaa]);
        assert_eq!(Message::from(42), Message::Unknown(42));
        for n in 0..HEADER_LEN {
            assert_eq!(Packet::new_checked(&b[..n]), Err(Error::Truncated));
        }
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        p.set_msg_type(Message::EchoReply);
        p.set_msg_code(3);
        p.set_checksum(1);
        assert_eq!((p.msg_type_raw(), p.msg_code(), p.checksum()), (0, 3, 1));
    }
}
