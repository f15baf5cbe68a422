//! IPv6 fixed header (RFC 8200 §3). Extension headers are in [`crate::ipv6ext`].
//!
//! `new_checked` validates 40 bytes and version 6. The payload length is not
//! validated against the buffer: [`Packet::payload`] is clamped to it and
//! [`Packet::payload_truncated`] reports a shortfall. A payload length of
//! zero (a jumbogram, RFC 2675, whose real length is in a hop-by-hop option)
//! makes the payload extend to the end of the buffer.

use crate::bytes::{array, be16, be32, put16, put32};
use crate::ip::Protocol;
use crate::{view_common, Error, Result};

/// Byte ranges of the fixed header.
pub mod field {
    use core::ops::Range;
    /// Version (4 bits), traffic class (8), flow label (20).
    pub const VER_TC_FLOW: Range<usize> = 0..4;
    /// Payload length (everything after the fixed header).
    pub const LENGTH: Range<usize> = 4..6;
    /// Next header.
    pub const NXT_HDR: usize = 6;
    /// Hop limit.
    pub const HOP_LIMIT: usize = 7;
    /// Source address.
    pub const SRC_ADDR: Range<usize> = 8..24;
    /// Destination address.
    pub const DST_ADDR: Range<usize> = 24..40;
}

/// Length of the fixed header.
pub const HEADER_LEN: usize = field::DST_ADDR.end;

/// A view over an IPv6 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

view_common!(Packet);

impl<T: AsRef<[u8]>> Packet<T> {
    /// Validate 40 bytes and version 6.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if self.version() != 6 {
            return Err(Error::BadVersion);
        }
        Ok(())
    }

    #[inline]
    fn first_word(&self) -> u32 {
        be32(self.buffer.as_ref(), field::VER_TC_FLOW.start)
    }

    /// IP version (6 for a valid view).
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }

    /// Traffic class (DSCP << 2 | ECN).
    #[inline]
    pub fn traffic_class(&self) -> u8 {
        (self.first_word() >> 20) as u8
    }

    /// DSCP (6 bits).
    #[inline]
    pub fn dscp(&self) -> u8 {
        self.traffic_class() >> 2
    }

    /// ECN (2 bits).
    #[inline]
    pub fn ecn(&self) -> u8 {
        self.traffic_class() & 3
    }

    /// Flow label (20 bits).
    #[inline]
    pub fn flow_label(&self) -> u32 {
        self.first_word() & 0x000f_ffff
    }

    /// Payload length field.
    #[inline]
    pub fn payload_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH.start)
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

    /// Hop limit.
    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    /// Source address.
    #[inline]
    pub fn src_addr(&self) -> [u8; 16] {
        array(self.buffer.as_ref(), field::SRC_ADDR.start)
    }

    /// Destination address.
    #[inline]
    pub fn dst_addr(&self) -> [u8; 16] {
        array(self.buffer.as_ref(), field::DST_ADDR.start)
    }

    #[inline]
    fn payload_end(&self) -> usize {
        let len = self.buffer.as_ref().len();
        match self.payload_len() {
            0 => len,
            n => (HEADER_LEN + n as usize).min(len),
        }
    }

    /// Everything after the fixed header up to the payload length, clamped
    /// to the buffer (trailing Ethernet padding is excluded).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.payload_end()]
    }

    /// Does the payload length point past the end of the buffer?
    #[inline]
    pub fn payload_truncated(&self) -> bool {
        HEADER_LEN + self.payload_len() as usize > self.buffer.as_ref().len()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set the payload length.
    #[inline]
    pub fn set_payload_len(&mut self, len: u16) {
        put16(self.buffer.as_mut(), field::LENGTH.start, len);
    }

    /// Set the next header.
    #[inline]
    pub fn set_next_header(&mut self, p: Protocol) {
        self.buffer.as_mut()[field::NXT_HDR] = p.into();
    }

    #[inline]
    fn set_first_word(&mut self, w: u32) {
        put32(self.buffer.as_mut(), field::VER_TC_FLOW.start, w);
    }

    /// Set the traffic class.
    #[inline]
    pub fn set_traffic_class(&mut self, tc: u8) {
        let w = (self.first_word() & 0xf00f_ffff) | ((tc as u32) << 20);
        self.set_first_word(w);
    }

    /// Set the flow label.
    #[inline]
    pub fn set_flow_label(&mut self, label: u32) {
        let w = (self.first_word() & 0xfff0_0000) | (label & 0x000f_ffff);
        self.set_first_word(w);
    }

    /// Set the hop limit.
    #[inline]
    pub fn set_hop_limit(&mut self, h: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = h;
    }

    /// Set the source address.
    #[inline]
    pub fn set_src_addr(&mut self, a: [u8; 16]) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&a);
    }

    /// Set the destination address.
    #[inline]
    pub fn set_dst_addr(&mut self, a: [u8; 16]) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&a);
    }

    /// Mutable payload (same bounds as [`Packet::payload`]).
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = self.payload_end();
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }
}

/// A parsed IPv6 fixed header (extension headers are payload here).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source address.
    pub src_addr: [u8; 16],
    /// Destination address.
    pub dst_addr: [u8; 16],
    /// Next header.
    pub next_header: Protocol,
    /// Payload length.
    pub payload_len: usize,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class (DSCP << 2 | ECN).
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
}

impl Repr {
    /// Read the fixed header of `packet`.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            next_header: packet.next_header(),
            payload_len: packet.payload_len() as usize,
            hop_limit: packet.hop_limit(),
            traffic_class: packet.traffic_class(),
            flow_label: packet.flow_label(),
        })
    }

    /// Bytes [`Repr::emit`] writes.
    #[inline]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Bytes of the whole packet.
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Sum of the pseudo-header (RFC 8200 §8.1) a transport checksum over
    /// this packet's payload starts from. With extension headers, the
    /// transport's own length and protocol are what count: use
    /// [`crate::checksum::pseudo_ipv6`] directly.
    #[inline]
    pub fn pseudo_sum(&self) -> u32 {
        let len = u32::try_from(self.payload_len).unwrap_or(u32::MAX);
        crate::checksum::pseudo_ipv6(self.src_addr, self.dst_addr, self.next_header.into(), len)
    }

    /// Write the fixed header into `packet`. The payload length saturates
    /// at 65535.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_first_word(
            (6 << 28) | ((self.traffic_class as u32) << 20) | (self.flow_label & 0x000f_ffff),
        );
        packet.set_payload_len(u16::try_from(self.payload_len).unwrap_or(u16::MAX));
        packet.set_next_header(self.next_header);
        packet.set_hop_limit(self.hop_limit);
        packet.set_src_addr(self.src_addr);
        packet.set_dst_addr(self.dst_addr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> [u8; 44] {
        let mut b = [0u8; 44];
        // version 6, TC 0xb9 (DSCP 46, ECN 1), flow label 0x12345
        b[..4].copy_from_slice(&[0x6b, 0x91, 0x23, 0x45]);
        b[4..6].copy_from_slice(&4u16.to_be_bytes());
        b[6] = 17;
        b[7] = 64;
        b[8] = 0x20;
        b[9] = 0x01;
        b[23] = 1;
        b[24] = 0x20;
        b[25] = 0x01;
        b[39] = 2;
        b[40..44].copy_from_slice(&[1, 2, 3, 4]);
        b
    }

    #[test]
    fn parses_fields() {
        let b = header();
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!((p.traffic_class(), p.dscp(), p.ecn()), (0xb9, 46, 1));
        assert_eq!(p.flow_label(), 0x12345);
        assert_eq!(p.next_header(), Protocol::Udp);
        assert_eq!(p.hop_limit(), 64);
        assert_eq!(p.src_addr()[..2], [0x20, 0x01]);
        assert_eq!(p.src_addr()[15], 1);
        assert_eq!(p.dst_addr()[15], 2);
        assert_eq!(p.payload(), &[1, 2, 3, 4]);
        assert!(!p.payload_truncated());
    }

    #[test]
    fn truncation_and_version() {
        let b = header();
        for n in 0..HEADER_LEN {
            assert_eq!(Packet::new_checked(&b[..n]), Err(Error::Truncated));
        }
        let p = Packet::new_checked(&b[..42]).unwrap();
        assert!(p.payload_truncated());
        assert_eq!(p.payload(), &[1, 2]);
        let mut bad = b;
        bad[0] = 0x4b;
        assert_eq!(Packet::new_checked(&bad[..]), Err(Error::BadVersion));
    }

    #[test]
    fn setters() {
        let mut b = header();
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        p.set_traffic_class(0x04);
        p.set_flow_label(0xfffff);
        p.set_hop_limit(1);
        p.set_dst_addr([7; 16]);
        assert_eq!(
            (p.version(), p.traffic_class(), p.flow_label()),
            (6, 4, 0xfffff)
        );
        assert_eq!((p.hop_limit(), p.dst_addr()), (1, [7; 16]));
        p.payload_mut()[3] = 0;
        assert_eq!(p.payload(), &[1, 2, 3, 0]);
    }
}
