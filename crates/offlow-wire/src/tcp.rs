//! TCP header (RFC 9293 §3.1).
//!
//! `new_checked` validates the 20-byte fixed header and a data offset of at
//! least 5 words. Options that the data offset announces but the buffer does
//! not hold (a snap-length capture) do not fail the view: [`Packet::options`]
//! and [`Packet::payload`] are clamped and [`Packet::options_truncated`]
//! reports it. Ports, flags and the checksum are always in the fixed part.

use crate::bytes::{be16, be32, put16, put32};
use crate::checksum::{fold, sum};
use crate::{view_common, Error, Result};

/// Byte ranges of the fixed header.
pub mod field {
    use core::ops::Range;
    /// Source port.
    pub const SRC_PORT: Range<usize> = 0..2;
    /// Destination port.
    pub const DST_PORT: Range<usize> = 2..4;
    /// Sequence number.
    pub const SEQ_NUM: Range<usize> = 4..8;
    /// Acknowledgment number.
    pub const ACK_NUM: Range<usize> = 8..12;
    /// Data offset (4 bits), reserved (3), flags (9).
    pub const FLAGS: Range<usize> = 12..14;
    /// Window.
    pub const WIN_SIZE: Range<usize> = 14..16;
    /// Checksum.
    pub const CHECKSUM: Range<usize> = 16..18;
    /// Urgent pointer.
    pub const URGENT: Range<usize> = 18..20;
}

/// Length of the header without options.
pub const MIN_HEADER_LEN: usize = field::URGENT.end;

/// TCP flag bits (low 9 bits of the data-offset/flags word).
pub mod flags {
    /// FIN.
    pub const FIN: u16 = 0x001;
    /// SYN.
    pub const SYN: u16 = 0x002;
    /// RST.
    pub const RST: u16 = 0x004;
    /// PSH.
    pub const PSH: u16 = 0x008;
    /// ACK.
    pub const ACK: u16 = 0x010;
    /// URG.
    pub const URG: u16 = 0x020;
    /// ECE.
    pub const ECE: u16 = 0x040;
    /// CWR.
    pub const CWR: u16 = 0x080;
    /// NS (historic, RFC 3540).
    pub const NS: u16 = 0x100;
}

/// A view over a TCP segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

view_common!(Packet);

impl<T: AsRef<[u8]>> Packet<T> {
    /// Does the checksum over the whole buffer verify against pseudo-header
    /// sum `pseudo`?
    #[inline]
    pub fn verify_checksum(&self, pseudo: u32) -> bool {
        fold(sum(self.buffer.as_ref(), pseudo)) == 0xffff
    }

    /// Validate the fixed header and the data offset's minimum.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < MIN_HEADER_LEN {
            return Err(Error::Truncated);
        }
        if self.header_len() < MIN_HEADER_LEN {
            return Err(Error::BadHeaderLen);
        }
        Ok(())
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

    /// Sequence number.
    #[inline]
    pub fn seq_number(&self) -> u32 {
        be32(self.buffer.as_ref(), field::SEQ_NUM.start)
    }

    /// Acknowledgment number.
    #[inline]
    pub fn ack_number(&self) -> u32 {
        be32(self.buffer.as_ref(), field::ACK_NUM.start)
    }

    /// Header length in bytes (data offset * 4).
    #[inline]
    pub fn header_len(&self) -> usize {
        ((self.buffer.as_ref()[field::FLAGS.start] >> 4) as usize) * 4
    }

    /// The 9 flag bits (see [`flags`]).
    #[inline]
    pub fn flags(&self) -> u16 {
        be16(self.buffer.as_ref(), field::FLAGS.start) & 0x01ff
    }

    /// Window size.
    #[inline]
    pub fn window(&self) -> u16 {
        be16(self.buffer.as_ref(), field::WIN_SIZE.start)
    }

    /// Checksum.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM.start)
    }

    /// Urgent pointer.
    #[inline]
    pub fn urgent(&self) -> u16 {
        be16(self.buffer.as_ref(), field::URGENT.start)
    }

    #[inline]
    fn header_end(&self) -> usize {
        self.header_len().min(self.buffer.as_ref().len())
    }

    /// Options, clamped to the buffer.
    #[inline]
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[MIN_HEADER_LEN..self.header_end()]
    }

    /// Does the data offset point past the buffer?
    #[inline]
    pub fn options_truncated(&self) -> bool {
        self.header_len() > self.buffer.as_ref().len()
    }

    /// Payload (empty when the options are truncated).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_end()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set the sequence number.
    #[inline]
    pub fn set_seq_number(&mut self, v: u32) {
        put32(self.buffer.as_mut(), field::SEQ_NUM.start, v);
    }

    /// Set the acknowledgement number.
    #[inline]
    pub fn set_ack_number(&mut self, v: u32) {
        put32(self.buffer.as_mut(), field::ACK_NUM.start, v);
    }

    /// Set the data offset (header length `len` in bytes, a multiple of 4,
    /// 20..=60) and the 9 flag bits, which share one word.
    #[inline]
    pub fn set_header_len_flags(&mut self, len: usize, flags: u16) {
        debug_assert!(len % 4 == 0 && (MIN_HEADER_LEN..=60).contains(&len));
        let w = (((len / 4) as u16 & 0xf) << 12) | (flags & 0x01ff);
        put16(self.buffer.as_mut(), field::FLAGS.start, w);
    }

    /// Set the window size.
    #[inline]
    pub fn set_window(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::WIN_SIZE.start, v);
    }

    /// Set the urgent pointer.
    #[inline]
    pub fn set_urgent(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::URGENT.start, v);
    }

    /// Compute the checksum over the whole buffer (TCP has no length field:
    /// the segment is the buffer) from pseudo-header sum `pseudo`, and store
    /// it.
    #[inline]
    pub fn fill_checksum(&mut self, pseudo: u32) {
        self.set_checksum(0);
        let c = !fold(sum(self.buffer.as_ref(), pseudo));
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

/// A parsed TCP header. Options are not kept: [`Repr::emit`] writes a
/// 20-byte header, [`Repr::emit_with_options`] one carrying option bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq_number: u32,
    /// Acknowledgement number.
    pub ack_number: u32,
    /// The 9 flag bits (see [`flags`]).
    pub flags: u16,
    /// Window size.
    pub window: u16,
    /// Urgent pointer.
    pub urgent: u16,
}

impl Repr {
    /// Read the header of `packet`; the checksum is not verified (see
    /// [`Packet::verify_checksum`]).
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
            seq_number: packet.seq_number(),
            ack_number: packet.ack_number(),
            flags: packet.flags(),
            window: packet.window(),
            urgent: packet.urgent(),
        })
    }

    /// Bytes [`Repr::emit`] writes.
    #[inline]
    pub const fn header_len(&self) -> usize {
        MIN_HEADER_LEN
    }

    /// Bytes the header needs (the payload is the caller's).
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        MIN_HEADER_LEN
    }

    /// Write a 20-byte header with checksum 0; once the payload is in
    /// place, [`Packet::fill_checksum`] computes it.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        self.emit_with_options(packet, &[]);
    }

    /// Write a header carrying `options` (a multiple of 4 bytes, at most
    /// 40), checksum 0.
    pub fn emit_with_options<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut Packet<T>,
        options: &[u8],
    ) {
        let hl = MIN_HEADER_LEN + options.len();
        packet.set_src_port(self.src_port);
        packet.set_dst_port(self.dst_port);
        packet.set_seq_number(self.seq_number);
        packet.set_ack_number(self.ack_number);
        packet.set_header_len_flags(hl, self.flags);
        packet.set_window(self.window);
        packet.set_checksum(0);
        packet.set_urgent(self.urgent);
        packet.buffer.as_mut()[MIN_HEADER_LEN..hl].copy_from_slice(options);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment() -> [u8; 26] {
        let mut b = [0u8; 26];
        b[..4].copy_from_slice(&[0x04, 0xd2, 0x00, 0x50]); // 1234 -> 80
        b[4..8].copy_from_slice(&1u32.to_be_bytes());
        b[8..12].copy_from_slice(&2u32.to_be_bytes());
        b[12] = 0x60; // data offset 6 (one option word)
        b[13] = 0x12; // SYN|ACK
        b[14..16].copy_from_slice(&[0xff, 0xff]);
        b[20..24].copy_from_slice(&[2, 4, 5, 0xb4]); // MSS 1460
        b[24..26].copy_from_slice(&[0xaa, 0xbb]);
        b
    }

    #[test]
    fn parses_fields() {
        let b = segment();
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!((p.src_port(), p.dst_port()), (1234, 80));
        assert_eq!((p.seq_number(), p.ack_number()), (1, 2));
        assert_eq!(p.header_len(), 24);
        assert_eq!(p.flags(), flags::SYN | flags::ACK);
        assert_eq!(p.window(), 0xffff);
        assert_eq!(p.options(), &[2, 4, 5, 0xb4]);
        assert_eq!(p.payload(), &[0xaa, 0xbb]);
    }

    #[test]
    fn truncation_and_bad_offset() {
        let b = segment();
        for n in 0..MIN_HEADER_LEN {
            assert_eq!(Packet::new_checked(&b[..n]), Err(Error::Truncated));
        }
        let p = Packet::new_checked(&b[..22]).unwrap();
        assert!(p.options_truncated());
        assert_eq!(p.options(), &[2, 4]);
        assert!(p.payload().is_empty());
        let mut bad = b;
        bad[12] = 0x40;
        assert_eq!(Packet::new_checked(&bad[..]), Err(Error::BadHeaderLen));
    }

    #[test]
    fn setters() {
        let mut b = segment();
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        p.set_src_port(1);
        p.set_dst_port(2);
        p.set_checksum(0xbeef);
        assert_eq!((p.src_port(), p.dst_port(), p.checksum()), (1, 2, 0xbeef));
    }
}
