//! Ethernet II (DIX) frame header: destination, source, EtherType.
//!
//! Only Ethernet II framing is parsed; an IEEE 802.3 length field (< 0x0600)
//! simply shows up as [`EtherType::Unknown`].

use crate::bytes::{array, be16, put16};
use crate::{wire_enum, Error, MacAddr, Result};

/// Byte ranges of the header fields.
pub mod field {
    use core::ops::{Range, RangeFrom};
    /// Destination MAC address.
    pub const DESTINATION: Range<usize> = 0..6;
    /// Source MAC address.
    pub const SOURCE: Range<usize> = 6..12;
    /// EtherType (or TPID of a VLAN tag).
    pub const ETHERTYPE: Range<usize> = 12..14;
    /// Everything after the header.
    pub const PAYLOAD: RangeFrom<usize> = 14..;
}

/// Length of the Ethernet II header.
pub const HEADER_LEN: usize = field::PAYLOAD.start;

/// Raw EtherType values, for `match` on a `u16` in hot paths.
pub mod ethertype {
    /// IPv4 (RFC 894).
    pub const IPV4: u16 = 0x0800;
    /// ARP (RFC 826).
    pub const ARP: u16 = 0x0806;
    /// IEEE 802.1Q customer VLAN tag (C-TAG).
    pub const VLAN: u16 = 0x8100;
    /// IPv6 (RFC 2464).
    pub const IPV6: u16 = 0x86dd;
    /// MPLS unicast (RFC 3032).
    pub const MPLS_UNICAST: u16 = 0x8847;
    /// MPLS multicast (RFC 5332).
    pub const MPLS_MULTICAST: u16 = 0x8848;
    /// IEEE 802.1ad service VLAN tag (S-TAG, "QinQ").
    pub const QINQ: u16 = 0x88a8;
    /// IEEE 802.1ah provider backbone bridging I-TAG.
    pub const PBB: u16 = 0x88e7;
}

wire_enum! {
    /// EtherType values this crate parses.
    pub enum EtherType(u16) {
        /// IPv4.
        Ipv4 = 0x0800,
        /// ARP.
        Arp = 0x0806,
        /// 802.1Q C-TAG.
        Vlan = 0x8100,
        /// IPv6.
        Ipv6 = 0x86dd,
        /// MPLS unicast.
        MplsUnicast = 0x8847,
        /// MPLS multicast.
        MplsMulticast = 0x8848,
        /// 802.1ad S-TAG.
        QinQ = 0x88a8,
        /// 802.1ah I-TAG.
        Pbb = 0x88e7,
    }
}

/// A view over an Ethernet II frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Wrap `buffer` without checking its length (the caller did).
    #[inline]
    pub fn new_unchecked(buffer: T) -> Frame<T> {
        Frame { buffer }
    }

    /// Wrap `buffer`, failing with [`Error::Truncated`] if it is shorter
    /// than the 14-byte header.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Frame<T>> {
        let f = Frame::new_unchecked(buffer);
        f.check_len()?;
        Ok(f)
    }

    /// Check that the buffer holds the whole header.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// The underlying buffer.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Destination MAC address.
    #[inline]
    pub fn dst_addr(&self) -> MacAddr {
        array(self.buffer.as_ref(), field::DESTINATION.start)
    }

    /// Source MAC address.
    #[inline]
    pub fn src_addr(&self) -> MacAddr {
        array(self.buffer.as_ref(), field::SOURCE.start)
    }

    /// The EtherType field as a raw number.
    #[inline]
    pub fn ethertype_raw(&self) -> u16 {
        be16(self.buffer.as_ref(), field::ETHERTYPE.start)
    }

    /// The EtherType field.
    #[inline]
    pub fn ethertype(&self) -> EtherType {
        self.ethertype_raw().into()
    }

    /// Everything after the 14-byte header.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    /// Set the destination MAC address.
    #[inline]
    pub fn set_dst_addr(&mut self, a: MacAddr) {
        self.buffer.as_mut()[field::DESTINATION].copy_from_slice(&a);
    }

    /// Set the source MAC address.
    #[inline]
    pub fn set_src_addr(&mut self, a: MacAddr) {
        self.buffer.as_mut()[field::SOURCE].copy_from_slice(&a);
    }

    /// Set the EtherType field.
    #[inline]
    pub fn set_ethertype(&mut self, t: EtherType) {
        put16(self.buffer.as_mut(), field::ETHERTYPE.start, t.into());
    }

    /// Mutable payload.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD]
    }
}

/// A parsed Ethernet II header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Destination address.
    pub dst_addr: MacAddr,
    /// Source address.
    pub src_addr: MacAddr,
    /// EtherType of what follows (a VLAN TPID when a tag follows).
    pub ethertype: EtherType,
}

impl Repr {
    /// Read the header of `frame`.
    pub fn parse<T: AsRef<[u8]>>(frame: &Frame<T>) -> Result<Repr> {
        frame.check_len()?;
        Ok(Repr {
            dst_addr: frame.dst_addr(),
            src_addr: frame.src_addr(),
            ethertype: frame.ethertype(),
        })
    }

    /// Bytes [`Repr::emit`] writes.
    #[inline]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Bytes the header needs (the payload is the caller's).
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Write every header field into `frame` (at least [`HEADER_LEN`] bytes).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut Frame<T>) {
        frame.set_dst_addr(self.dst_addr);
        frame.set_src_addr(self.src_addr);
        frame.set_ethertype(self.ethertype);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FRAME: [u8; 16] = [
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01, // dst
        0x02, 0x00, 0x00, 0x00, 0x00, 0x02, // src
        0x08, 0x00, // IPv4
        0xaa, 0xbb,
    ];

    #[test]
    fn parses_fields() {
        let f = Frame::new_checked(&FRAME[..]).unwrap();
        assert_eq!(f.dst_addr(), [2, 0, 0, 0, 0, 1]);
        assert_eq!(f.src_addr(), [2, 0, 0, 0, 0, 2]);
        assert_eq!(f.ethertype(), EtherType::Ipv4);
        assert_eq!(f.payload(), &[0xaa, 0xbb]);
    }

    #[test]
    fn every_short_length_is_truncated() {
        for n in 0..HEADER_LEN {
            assert_eq!(Frame::new_checked(&FRAME[..n]), Err(Error::Truncated));
        }
        assert!(Frame::new_checked(&FRAME[..HEADER_LEN])
            .unwrap()
            .payload()
            .is_empty());
    }

    #[test]
    fn setters_roundtrip() {
        let mut buf = FRAME;
        let mut f = Frame::new_checked(&mut buf[..]).unwrap();
        f.set_dst_addr([1, 2, 3, 4, 5, 6]);
        f.set_src_addr([7, 8, 9, 10, 11, 12]);
        f.set_ethertype(EtherType::Unknown(0x1234));
        assert_eq!(f.dst_addr(), [1, 2, 3, 4, 5, 6]);
        assert_eq!(f.src_addr(), [7, 8, 9, 10, 11, 12]);
        assert_eq!(f.ethertype_raw(), 0x1234);
        assert_eq!(EtherType::from(0x88a8), EtherType::QinQ);
        assert_eq!(u16::from(EtherType::MplsUnicast), 0x8847);
    }
}
