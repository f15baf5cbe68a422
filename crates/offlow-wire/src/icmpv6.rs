//! ICMPv6 (RFC 4443) and the neighbour discovery messages OpenFlow matches
//! on (RFC 4861 §4.3 neighbour solicitation, §4.4 neighbour advertisement).
//!
//! [`Packet`] covers the 4-byte header common to every message. [`NdPacket`]
//! covers an NS or NA message (24 bytes: header, 4 bytes of flags/reserved,
//! the 16-byte target address) and iterates its options with [`NdOptions`],
//! which stops at the first malformed option instead of over-reading.

use crate::bytes::{array, be16, put16};
use crate::{view_common, wire_enum, Error, MacAddr, Result};

/// Byte ranges of the header and of the ND message body.
pub mod field {
    use core::ops::{Range, RangeFrom};
    /// Message type.
    pub const TYPE: usize = 0;
    /// Message code.
    pub const CODE: usize = 1;
    /// Checksum.
    pub const CHECKSUM: Range<usize> = 2..4;
    /// Message body.
    pub const PAYLOAD: RangeFrom<usize> = 4..;
    /// ND: flags (NA: R, S, O) and reserved bits.
    pub const ND_FLAGS: Range<usize> = 4..8;
    /// ND: target address.
    pub const ND_TARGET: Range<usize> = 8..24;
    /// ND: options.
    pub const ND_OPTIONS: RangeFrom<usize> = 24..;
}

/// Length of the common header.
pub const HEADER_LEN: usize = field::PAYLOAD.start;
/// Length of an NS/NA message without options.
pub const ND_LEN: usize = field::ND_OPTIONS.start;

/// ND option type: source link-layer address (RFC 4861 §4.6.1).
pub const ND_OPT_SOURCE_LL_ADDR: u8 = 1;
/// ND option type: target link-layer address (RFC 4861 §4.6.1).
pub const ND_OPT_TARGET_LL_ADDR: u8 = 2;

wire_enum! {
    /// ICMPv6 message types.
    pub enum Message(u8) {
        /// Destination unreachable.
        DstUnreachable = 1,
        /// Packet too big.
        PktTooBig = 2,
        /// Time exceeded.
        TimeExceeded = 3,
        /// Parameter problem.
        ParamProblem = 4,
        /// Echo request.
        EchoRequest = 128,
        /// Echo reply.
        EchoReply = 129,
        /// Router solicitation.
        RouterSolicit = 133,
        /// Router advertisement.
        RouterAdvert = 134,
        /// Neighbour solicitation.
        NeighborSolicit = 135,
        /// Neighbour advertisement.
        NeighborAdvert = 136,
        /// Redirect.
        Redirect = 137,
    }
}

/// Raw type of a neighbour solicitation.
pub const TYPE_NEIGHBOR_SOLICIT: u8 = 135;
/// Raw type of a neighbour advertisement.
pub const TYPE_NEIGHBOR_ADVERT: u8 = 136;

/// A view over the common ICMPv6 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

view_common!(Packet);

impl<T: AsRef<[u8]>> Packet<T> {
    /// The buffer must hold the 4-byte header.
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

    /// Message body.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
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

    /// Compute the checksum over the whole buffer from pseudo-header sum
    /// `pseudo` (RFC 4443 §2.3) and store it.
    #[inline]
    pub fn fill_checksum(&mut self, pseudo: u32) {
        use crate::checksum::{fold, sum};
        self.set_checksum(0);
        let c = !fold(sum(self.buffer.as_ref(), pseudo));
        self.set_checksum(c);
    }

    /// Set the checksum.
    #[inline]
    pub fn set_checksum(&mut self, c: u16) {
        put16(self.buffer.as_mut(), field::CHECKSUM.start, c);
    }
}

/// A view over a neighbour solicitation or advertisement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NdPacket<T: AsRef<[u8]>> {
    buffer: T,
}

view_common!(NdPacket);

impl<T: AsRef<[u8]>> NdPacket<T> {
    /// The buffer must hold header, flags and target (24 bytes).
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < ND_LEN {
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

    /// NA flags word (R = 0x8000_0000, S = 0x4000_0000, O = 0x2000_0000).
    #[inline]
    pub fn flags(&self) -> u32 {
        crate::bytes::be32(self.buffer.as_ref(), field::ND_FLAGS.start)
    }

    /// Target address.
    #[inline]
    pub fn target_addr(&self) -> [u8; 16] {
        array(self.buffer.as_ref(), field::ND_TARGET.start)
    }

    /// The options.
    #[inline]
    pub fn options(&self) -> NdOptions<'_> {
        NdOptions {
            rest: &self.buffer.as_ref()[field::ND_OPTIONS],
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> NdPacket<T> {
    /// Set the target address.
    #[inline]
    pub fn set_target_addr(&mut self, a: [u8; 16]) {
        self.buffer.as_mut()[field::ND_TARGET].copy_from_slice(&a);
    }
}

/// One ND option (type, length in 8-byte units, data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NdOption<'a> {
    /// Option type.
    pub kind: u8,
    /// The whole option, type and length bytes included (length * 8 bytes).
    pub bytes: &'a [u8],
}

impl NdOption<'_> {
    /// The link-layer address of a source/target link-layer address option
    /// on Ethernet (the 6 bytes after type and length), if long enough.
    #[inline]
    pub fn link_layer_addr(&self) -> Option<MacAddr> {
        let b = self.bytes.get(2..8)?;
        let mut out = [0u8; 6];
        out.copy_from_slice(b);
        Some(out)
    }
}

/// Iterator over ND options. Yields `Err` once and stops when an option has
/// length 0 ([`Error::BadHeaderLen`]; RFC 4861 §4.6: "Nodes MUST silently
/// discard an ND packet that contains an option with length zero") or runs
/// past the buffer ([`Error::Truncated`]).
#[derive(Debug, Clone)]
pub struct NdOptions<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for NdOptions<'a> {
    type Item = Result<NdOption<'a>>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let rest = self.rest;
        if rest.is_empty() {
            return None;
        }
        let (kind, units) = match rest {
            [k, u, ..] => (*k, *u as usize),
            _ => {
                self.rest = &[];
                return Some(Err(Error::Truncated));
            }
        };
        if units == 0 {
            self.rest = &[];
            return Some(Err(Error::BadHeaderLen));
        }
        let len = units * 8;
        if len > rest.len() {
            self.rest = &[];
            return Some(Err(Error::Truncated));
        }
        let (opt, tail) = rest.split_at(len);
        self.rest = tail;
        Some(Ok(NdOption { kind, bytes: opt }))
    }
}

/// A parsed ICMPv6 header (type, code; the body, ND included, is the
/// caller's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Type.
    pub msg_type: Message,
    /// Code.
    pub code: u8,
}

impl Repr {
    /// Read the header of `packet`; the checksum is not verified.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            msg_type: packet.msg_type(),
            code: packet.msg_code(),
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

    /// Write the header with checksum 0; once the body is in place,
    /// [`Packet::fill_checksum`] computes it.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_msg_type(self.msg_type);
        packet.set_msg_code(self.code);
        packet.set_checksum(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns_with_sll() -> [u8; 32] {
        let mut b = [0u8; 32];
        b[0] = 135;
        b[8] = 0xfe;
        b[9] = 0x80;
        b[23] = 0x01;
        b[24] = ND_OPT_SOURCE_LL_ADDR;
        b[25] = 1;
        b[26..32].copy_from_slice(&[2, 0, 0, 0, 0, 9]);
        b
    }

    #[test]
    fn ns_target_and_option() {
        let b = ns_with_sll();
        let h = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(h.msg_type(), Message::NeighborSolicit);
        let nd = NdPacket::new_checked(&b[..]).unwrap();
        assert_eq!(nd.target_addr()[..2], [0xfe, 0x80]);
        let opts: Vec<_> = nd.options().collect();
        assert_eq!(opts.len(), 1);
        let o = opts[0].unwrap();
        assert_eq!(o.kind, ND_OPT_SOURCE_LL_ADDR);
        assert_eq!(o.link_layer_addr(), Some([2, 0, 0, 0, 0, 9]));
        for n in 0..ND_LEN {
            assert_eq!(NdPacket::new_checked(&b[..n]), Err(Error::Truncated));
        }
    }

    #[test]
    fn malformed_options_stop_iteration() {
        let mut b = ns_with_sll();
        b[25] = 0;
        let nd = NdPacket::new_checked(&b[..]).unwrap();
        let opts: Vec<_> = nd.options().collect();
        assert_eq!(opts, vec![Err(Error::BadHeaderLen)]);
        b[25] = 2; // 16 bytes, only 8 present
        let nd = NdPacket::new_checked(&b[..]).unwrap();
        assert_eq!(
            nd.options().collect::<Vec<_>>(),
            vec![Err(Error::Truncated)]
        );
        let nd = NdPacket::new_checked(&b[..25]).unwrap();
        assert_eq!(
            nd.options().collect::<Vec<_>>(),
            vec![Err(Error::Truncated)]
        );
        let nd = NdPacket::new_checked(&b[..24]).unwrap();
        assert_eq!(nd.options().count(), 0);
    }
}
