//! IPv4 header (RFC 791), options included.
//!
//! `new_checked` validates: at least 20 bytes, version 4, IHL >= 5, the whole
//! header (options included) inside the buffer, and total length >= header
//! length. A total length larger than the buffer (a snap-length capture, or
//! a lying sender) is accepted: [`Packet::payload`] is clamped to the buffer
//! and [`Packet::payload_truncated`] reports it.

use crate::bytes::{array, be16, put16};
use crate::ip::Protocol;
use crate::{view_common, Error, Result};

/// Byte ranges of the fixed header.
pub mod field {
    use core::ops::Range;
    /// Version (4 bits) and IHL (4 bits, in 32-bit words).
    pub const VER_IHL: usize = 0;
    /// DSCP (6 bits) and ECN (2 bits), the old TOS byte.
    pub const DSCP_ECN: usize = 1;
    /// Total length.
    pub const LENGTH: Range<usize> = 2..4;
    /// Identification.
    pub const IDENT: Range<usize> = 4..6;
    /// Flags (3 bits) and fragment offset (13 bits, 8-byte units).
    pub const FLG_OFF: Range<usize> = 6..8;
    /// Time to live.
    pub const TTL: usize = 8;
    /// Protocol.
    pub const PROTOCOL: usize = 9;
    /// Header checksum.
    pub const CHECKSUM: Range<usize> = 10..12;
    /// Source address.
    pub const SRC_ADDR: Range<usize> = 12..16;
    /// Destination address.
    pub const DST_ADDR: Range<usize> = 16..20;
}

/// Length of the header without options.
pub const MIN_HEADER_LEN: usize = field::DST_ADDR.end;
/// "Don't fragment" flag in the flags/offset word.
pub const FLAG_DF: u16 = 0x4000;
/// "More fragments" flag in the flags/offset word.
pub const FLAG_MF: u16 = 0x2000;
/// Fragment offset bits of the flags/offset word.
pub const FRAG_OFFSET_MASK: u16 = 0x1fff;

/// A view over an IPv4 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

view_common!(Packet);

impl<T: AsRef<[u8]>> Packet<T> {
    /// Validate the header; see the module documentation.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < MIN_HEADER_LEN {
            return Err(Error::Truncated);
        }
        if self.version() != 4 {
            return Err(Error::BadVersion);
        }
        let hl = self.header_len();
        if hl < MIN_HEADER_LEN {
            return Err(Error::BadHeaderLen);
        }
        if b.len() < hl {
            return Err(Error::Truncated);
        }
        if (self.total_len() as usize) < hl {
            return Err(Error::BadTotalLen);
        }
        Ok(())
    }

    /// IP version (4 for a valid view).
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// Header length in bytes (IHL * 4), options included.
    #[inline]
    pub fn header_len(&self) -> usize {
        ((self.buffer.as_ref()[field::VER_IHL] & 0x0f) as usize) * 4
    }

    /// The TOS byte (DSCP << 2 | ECN).
    #[inline]
    pub fn tos(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN]
    }

    /// Differentiated services code point (6 bits).
    #[inline]
    pub fn dscp(&self) -> u8 {
        self.tos() >> 2
    }

    /// Explicit congestion notification (2 bits).
    #[inline]
    pub fn ecn(&self) -> u8 {
        self.tos() & 3
    }

    /// Total length field.
    #[inline]
    pub fn total_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH.start)
    }

    /// Identification.
    #[inline]
    pub fn ident(&self) -> u16 {
        be16(self.buffer.as_ref(), field::IDENT.start)
    }

    /// The raw flags/fragment-offset word.
    #[inline]
    pub fn flags_frag(&self) -> u16 {
        be16(self.buffer.as_ref(), field::FLG_OFF.start)
    }

    /// Don't-fragment flag.
    #[inline]
    pub fn dont_frag(&self) -> bool {
        self.flags_frag() & FLAG_DF != 0
    }

    /// More-fragments flag.
    #[inline]
    pub fn more_frags(&self) -> bool {
        self.flags_frag() & FLAG_MF != 0
    }

    /// Fragment offset in bytes.
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        (self.flags_frag() & FRAG_OFFSET_MASK) << 3
    }

    /// Is this a fragment (MF set or offset non-zero)?
    #[inline]
    pub fn is_fragment(&self) -> bool {
        self.flags_frag() & (FLAG_MF | FRAG_OFFSET_MASK) != 0
    }

    /// Time to live.
    #[inline]
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    /// Protocol, raw.
    #[inline]
    pub fn protocol_raw(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }

    /// Protocol.
    #[inline]
    pub fn protocol(&self) -> Protocol {
        self.protocol_raw().into()
    }

    /// Header checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM.start)
    }

    /// Source address.
    #[inline]
    pub fn src_addr(&self) -> [u8; 4] {
        array(self.buffer.as_ref(), field::SRC_ADDR.start)
    }

    /// Destination address.
    #[inline]
    pub fn dst_addr(&self) -> [u8; 4] {
        array(self.buffer.as_ref(), field::DST_ADDR.start)
    }

    /// Options (between the fixed header and `header_len`).
    #[inline]
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[MIN_HEADER_LEN..self.header_len()]
    }

    /// Does the header checksum verify?
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        crate::checksum::checksum(&self.buffer.as_ref()[..self.header_len()]) == 0
    }

    /// The payload: from `header_len` to `total_len`, clamped to the buffer
    /// (trailing Ethernet padding is excluded).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let end = (self.total_len() as usize).min(b.len());
        // check_len guaranteed header_len <= total_len and header_len <= len.
        &b[self.header_len()..end]
    }

    /// Does `total_len` point past the end of the buffer?
    #[inline]
    pub fn payload_truncated(&self) -> bool {
        self.total_len() as usize > self.buffer.as_ref().len()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set version 4 and the IHL for a header of `len` bytes (a multiple of
    /// 4, 20..=60).
    #[inline]
    pub fn set_header_len(&mut self, len: usize) {
        debug_assert!(len % 4 == 0 && (MIN_HEADER_LEN..=60).contains(&len));
        self.buffer.as_mut()[field::VER_IHL] = 0x40 | ((len / 4) as u8 & 0x0f);
    }

    /// Set the total length (header + payload).
    #[inline]
    pub fn set_total_len(&mut self, len: u16) {
        put16(self.buffer.as_mut(), field::LENGTH.start, len);
    }

    /// Set the identification.
    #[inline]
    pub fn set_ident(&mut self, id: u16) {
        put16(self.buffer.as_mut(), field::IDENT.start, id);
    }

    /// Set the flags and fragment offset word.
    #[inline]
    pub fn set_flags_frag(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::FLG_OFF.start, v);
    }

    /// Set the protocol.
    #[inline]
    pub fn set_protocol(&mut self, p: Protocol) {
        self.buffer.as_mut()[field::PROTOCOL] = p.into();
    }

    /// Set the TOS byte (DSCP and ECN).
    #[inline]
    pub fn set_tos(&mut self, tos: u8) {
        self.buffer.as_mut()[field::DSCP_ECN] = tos;
    }

    /// Set the TTL.
    #[inline]
    pub fn set_ttl(&mut self, ttl: u8) {
        self.buffer.as_mut()[field::TTL] = ttl;
    }

    /// Set the header checksum field.
    #[inline]
    pub fn set_checksum(&mut self, c: u16) {
        put16(self.buffer.as_mut(), field::CHECKSUM.start, c);
    }

    /// Set the source address.
    #[inline]
    pub fn set_src_addr(&mut self, a: [u8; 4]) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&a);
    }

    /// Set the destination address.
    #[inline]
    pub fn set_dst_addr(&mut self, a: [u8; 4]) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&a);
    }

    /// Recompute the header checksum from scratch.
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let hl = self.header_len();
        let c = crate::checksum::checksum(&self.buffer.as_ref()[..hl]);
        self.set_checksum(c);
    }

    /// Mutable payload (same bounds as [`Packet::payload`]).
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        let end = (self.total_len() as usize).min(self.buffer.as_ref().len());
        &mut self.buffer.as_mut()[hl..end]
    }
}

/// A parsed IPv4 header. Options are not kept: [`Repr::emit`] writes a
/// 20-byte header, [`Repr::emit_with_options`] one that carries the given
/// option bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source address.
    pub src_addr: [u8; 4],
    /// Destination address.
    pub dst_addr: [u8; 4],
    /// Protocol of the payload.
    pub protocol: Protocol,
    /// Payload length (total length minus header length).
    pub payload_len: usize,
    /// Time to live.
    pub ttl: u8,
    /// TOS byte (DSCP << 2 | ECN).
    pub tos: u8,
    /// Identification.
    pub ident: u16,
    /// Flags and fragment offset, as on the wire ([`FLAG_DF`], [`FLAG_MF`],
    /// [`FRAG_OFFSET_MASK`]); kept raw so the reserved bit round-trips.
    pub flags_frag: u16,
}

impl Repr {
    /// Read the header of `packet`. The checksum is not verified (the
    /// switch forwards frames whatever their checksum; ask
    /// [`Packet::verify_checksum`]), and a total length past the buffer is
    /// accepted as the view accepts it.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            protocol: packet.protocol(),
            // check_len: total_len >= header_len.
            payload_len: packet.total_len() as usize - packet.header_len(),
            ttl: packet.ttl(),
            tos: packet.tos(),
            ident: packet.ident(),
            flags_frag: packet.flags_frag(),
        })
    }

    /// Bytes [`Repr::emit`] writes.
    #[inline]
    pub const fn header_len(&self) -> usize {
        MIN_HEADER_LEN
    }

    /// Bytes of the whole packet (header and payload).
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        MIN_HEADER_LEN + self.payload_len
    }

    /// Sum of the pseudo-header a transport checksum over this packet's
    /// payload starts from (see [`crate::checksum::pseudo_ipv4`]).
    #[inline]
    pub fn pseudo_sum(&self) -> u32 {
        let len = u16::try_from(self.payload_len).unwrap_or(u16::MAX);
        crate::checksum::pseudo_ipv4(self.src_addr, self.dst_addr, self.protocol.into(), len)
    }

    /// Write a 20-byte header with a valid checksum into `packet`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        self.emit_with_options(packet, &[]);
    }

    /// Write a header carrying `options` (a multiple of 4 bytes, at most
    /// 40), with a valid checksum. The total length saturates at 65535.
    pub fn emit_with_options<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut Packet<T>,
        options: &[u8],
    ) {
        let hl = MIN_HEADER_LEN + options.len();
        packet.set_header_len(hl);
        packet.set_tos(self.tos);
        packet.set_total_len(u16::try_from(hl + self.payload_len).unwrap_or(u16::MAX));
        packet.set_ident(self.ident);
        packet.set_flags_frag(self.flags_frag);
        packet.set_ttl(self.ttl);
        packet.set_protocol(self.protocol);
        packet.set_src_addr(self.src_addr);
        packet.set_dst_addr(self.dst_addr);
        packet.buffer.as_mut()[MIN_HEADER_LEN..hl].copy_from_slice(options);
        packet.fill_checksum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 24-byte header (one 4-byte option: router alert), total length 28,
    /// UDP, 10.0.0.1 -> 10.0.0.2, DSCP 46 ECN 1, MF set, offset 0.
    fn with_options() -> [u8; 30] {
        let mut b = [0u8; 30];
        b[..24].copy_from_slice(&[
            0x46, 0xb9, 0x00, 0x1c, 0x12, 0x34, 0x20, 0x00, 0x40, 0x11, 0, 0, 10, 0, 0, 1, 10, 0,
            0, 2, 0x94, 0x04, 0x00, 0x00,
        ]);
        b[24..28].copy_from_slice(&[1, 2, 3, 4]);
        b[28..30].copy_from_slice(&[0xee, 0xee]); // Ethernet padding
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.fill_checksum();
        b
    }

    #[test]
    fn parses_header_with_options() {
        let b = with_options();
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.header_len(), 24);
        assert_eq!((p.dscp(), p.ecn()), (46, 1));
        assert_eq!(p.total_len(), 28);
        assert!(p.more_frags() && !p.dont_frag() && p.is_fragment());
        assert_eq!(p.frag_offset(), 0);
        assert_eq!(p.protocol(), Protocol::Udp);
        assert_eq!(p.src_addr(), [10, 0, 0, 1]);
        assert_eq!(p.dst_addr(), [10, 0, 0, 2]);
        assert_eq!(p.options(), &[0x94, 0x04, 0, 0]);
        assert_eq!(p.payload(), &[1, 2, 3, 4], "padding excluded");
        assert!(p.verify_checksum());
        assert!(!p.payload_truncated());
    }

    #[test]
    fn rejects_bad_headers() {
        let b = with_options();
        for n in 0..24 {
            assert_eq!(
                Packet::new_checked(&b[..n]),
                Err(Error::Truncated),
                "len {n}"
            );
        }
        // Total length beyond the buffer: accepted, payload clamped.
        let p = Packet::new_checked(&b[..26]).unwrap();
        assert!(p.payload_truncated());
        assert_eq!(p.payload(), &[1, 2]);

        let mut bad = b;
        bad[0] = 0x44; // IHL 4
        assert_eq!(Packet::new_checked(&bad[..]), Err(Error::BadHeaderLen));
        bad[0] = 0x66;
        assert_eq!(Packet::new_checked(&bad[..]), Err(Error::BadVersion));
        bad[0] = 0x4f; // IHL 15 = 60 bytes > 30
        assert_eq!(Packet::new_checked(&bad[..]), Err(Error::Truncated));
        let mut bad = b;
        bad[3] = 20; // total length 20 < header 24
        assert_eq!(Packet::new_checked(&bad[..]), Err(Error::BadTotalLen));
    }

    #[test]
    fn later_fragment_offset() {
        let mut b = with_options();
        b[6] = 0x00;
        b[7] = 0xb9; // offset 185 * 8 = 1480
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.frag_offset(), 1480);
        assert!(p.is_fragment() && !p.more_frags());
    }

    #[test]
    fn setters_keep_checksum_valid_after_fill() {
        let mut b = with_options();
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        p.set_ttl(1);
        p.set_src_addr([192, 168, 0, 1]);
        p.set_dst_addr([192, 168, 0, 2]);
        p.set_tos(0xfc);
        assert!(!p.verify_checksum());
        p.fill_checksum();
        assert!(p.verify_checksum());
        assert_eq!((p.ttl(), p.dscp(), p.ecn()), (1, 63, 0));
        p.payload_mut()[0] = 9;
        assert_eq!(p.payload()[0], 9);
    }
}
