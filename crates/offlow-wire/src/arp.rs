//! ARP (RFC 826).
//!
//! The view accepts any hardware / protocol address length: `new_checked`
//! validates the 8-byte fixed part and the four addresses the lengths
//! announce, and the address accessors return slices of those lengths.
//! [`Packet::is_ethernet_ipv4`] tells whether the common Ethernet/IPv4 form
//! (the only one OpenFlow's ARP fields describe) is present.

use crate::bytes::{be16, put16};
use crate::{view_common, wire_enum, Error, MacAddr, Result};

/// Byte ranges of the fixed part; the addresses follow at [`ADDRS`](field::ADDRS).
pub mod field {
    use core::ops::Range;
    /// Hardware type.
    pub const HTYPE: Range<usize> = 0..2;
    /// Protocol type (an EtherType).
    pub const PTYPE: Range<usize> = 2..4;
    /// Hardware address length.
    pub const HLEN: usize = 4;
    /// Protocol address length.
    pub const PLEN: usize = 5;
    /// Operation.
    pub const OPER: Range<usize> = 6..8;
    /// Start of SHA, SPA, THA, TPA (in this order).
    pub const ADDRS: usize = 8;

    /// The addresses of the Ethernet / IPv4 form (hardware length 6,
    /// protocol length 4), the only one OpenFlow matches on.
    pub mod eth_ipv4 {
        use core::ops::Range;
        /// Sender hardware address.
        pub const SHA: Range<usize> = 8..14;
        /// Sender protocol address.
        pub const SPA: Range<usize> = 14..18;
        /// Target hardware address.
        pub const THA: Range<usize> = 18..24;
        /// Target protocol address.
        pub const TPA: Range<usize> = 24..28;
    }
}

/// Length of the fixed part.
pub const FIXED_LEN: usize = field::ADDRS;
/// Length of an Ethernet/IPv4 ARP packet.
pub const ETHERNET_IPV4_LEN: usize = FIXED_LEN + 2 * (6 + 4);
/// Hardware type of Ethernet.
pub const HTYPE_ETHERNET: u16 = 1;

wire_enum! {
    /// ARP operation.
    pub enum Operation(u16) {
        /// Request.
        Request = 1,
        /// Reply.
        Reply = 2,
    }
}

/// A view over an ARP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

view_common!(Packet);

impl<T: AsRef<[u8]>> Packet<T> {
    /// The buffer must hold the fixed part and the four addresses.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < FIXED_LEN || b.len() < self.header_len_raw() {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Length the address lengths announce (0 if the fixed part is missing).
    #[inline]
    fn header_len_raw(&self) -> usize {
        let b = self.buffer.as_ref();
        match (b.get(field::HLEN), b.get(field::PLEN)) {
            (Some(&h), Some(&p)) => FIXED_LEN + 2 * (h as usize + p as usize),
            _ => 0,
        }
    }

    /// Total length of the ARP packet (fixed part plus addresses).
    #[inline]
    pub fn header_len(&self) -> usize {
        self.header_len_raw()
    }

    /// Hardware type.
    #[inline]
    pub fn htype(&self) -> u16 {
        be16(self.buffer.as_ref(), field::HTYPE.start)
    }

    /// Protocol type.
    #[inline]
    pub fn ptype(&self) -> u16 {
        be16(self.buffer.as_ref(), field::PTYPE.start)
    }

    /// Hardware address length.
    #[inline]
    pub fn hlen(&self) -> u8 {
        self.buffer.as_ref()[field::HLEN]
    }

    /// Protocol address length.
    #[inline]
    pub fn plen(&self) -> u8 {
        self.buffer.as_ref()[field::PLEN]
    }

    /// Operation, raw.
    #[inline]
    pub fn oper_raw(&self) -> u16 {
        be16(self.buffer.as_ref(), field::OPER.start)
    }

    /// Operation.
    #[inline]
    pub fn oper(&self) -> Operation {
        self.oper_raw().into()
    }

    /// Is this the Ethernet (6-byte) / IPv4 (4-byte) form?
    #[inline]
    pub fn is_ethernet_ipv4(&self) -> bool {
        self.htype() == HTYPE_ETHERNET
            && self.ptype() == crate::ethernet::ethertype::IPV4
            && self.hlen() == 6
            && self.plen() == 4
    }

    #[inline]
    fn addr(&self, index: usize) -> &[u8] {
        let h = self.hlen() as usize;
        let p = self.plen() as usize;
        let (start, len) = match index {
            0 => (field::ADDRS, h),
            1 => (field::ADDRS + h, p),
            2 => (field::ADDRS + h + p, h),
            _ => (field::ADDRS + 2 * h + p, p),
        };
        &self.buffer.as_ref()[start..start + len]
    }

    /// Sender hardware address.
    #[inline]
    pub fn sha(&self) -> &[u8] {
        self.addr(0)
    }

    /// Sender protocol address.
    #[inline]
    pub fn spa(&self) -> &[u8] {
        self.addr(1)
    }

    /// Target hardware address.
    #[inline]
    pub fn tha(&self) -> &[u8] {
        self.addr(2)
    }

    /// Target protocol address.
    #[inline]
    pub fn tpa(&self) -> &[u8] {
        self.addr(3)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set the hardware and protocol types and address lengths (the fixed
    /// part before the operation).
    #[inline]
    pub fn set_format(&mut self, htype: u16, ptype: u16, hlen: u8, plen: u8) {
        let b = self.buffer.as_mut();
        put16(b, field::HTYPE.start, htype);
        put16(b, field::PTYPE.start, ptype);
        b[field::HLEN] = hlen;
        b[field::PLEN] = plen;
    }

    /// Set the operation.
    #[inline]
    pub fn set_oper(&mut self, op: Operation) {
        put16(self.buffer.as_mut(), field::OPER.start, op.into());
    }

    #[inline]
    fn addr_mut(&mut self, index: usize) -> &mut [u8] {
        let h = self.hlen() as usize;
        let p = self.plen() as usize;
        let (start, len) = match index {
            0 => (field::ADDRS, h),
            1 => (field::ADDRS + h, p),
            2 => (field::ADDRS + h + p, h),
            _ => (field::ADDRS + 2 * h + p, p),
        };
        &mut self.buffer.as_mut()[start..start + len]
    }

    /// Sender hardware address, mutable.
    #[inline]
    pub fn sha_mut(&mut self) -> &mut [u8] {
        self.addr_mut(0)
    }

    /// Sender protocol address, mutable.
    #[inline]
    pub fn spa_mut(&mut self) -> &mut [u8] {
        self.addr_mut(1)
    }

    /// Target hardware address, mutable.
    #[inline]
    pub fn tha_mut(&mut self) -> &mut [u8] {
        self.addr_mut(2)
    }

    /// Target protocol address, mutable.
    #[inline]
    pub fn tpa_mut(&mut self) -> &mut [u8] {
        self.addr_mut(3)
    }
}

/// A parsed ARP packet in its Ethernet / IPv4 form (RFC 826), the only one
/// OpenFlow matches on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Operation.
    pub oper: Operation,
    /// Sender hardware address.
    pub sha: MacAddr,
    /// Sender protocol address.
    pub spa: [u8; 4],
    /// Target hardware address.
    pub tha: MacAddr,
    /// Target protocol address.
    pub tpa: [u8; 4],
}

impl Repr {
    /// Read `packet`: [`Error::Unsupported`] unless it is the Ethernet /
    /// IPv4 form.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        if !packet.is_ethernet_ipv4() {
            return Err(Error::Unsupported);
        }
        let arr = |s: &[u8]| -> [u8; 4] { [s[0], s[1], s[2], s[3]] };
        let mac = |s: &[u8]| -> MacAddr { [s[0], s[1], s[2], s[3], s[4], s[5]] };
        Ok(Repr {
            oper: packet.oper(),
            sha: mac(packet.sha()),
            spa: arr(packet.spa()),
            tha: mac(packet.tha()),
            tpa: arr(packet.tpa()),
        })
    }

    /// Bytes [`Repr::emit`] writes.
    #[inline]
    pub const fn header_len(&self) -> usize {
        ETHERNET_IPV4_LEN
    }

    /// Bytes the packet needs.
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        ETHERNET_IPV4_LEN
    }

    /// Write the packet into `packet` (at least [`ETHERNET_IPV4_LEN`]
    /// bytes).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        // The lengths go first: the address accessors are placed by them.
        packet.set_format(HTYPE_ETHERNET, crate::ethernet::ethertype::IPV4, 6, 4);
        packet.set_oper(self.oper);
        packet.sha_mut().copy_from_slice(&self.sha);
        packet.spa_mut().copy_from_slice(&self.spa);
        packet.tha_mut().copy_from_slice(&self.tha);
        packet.tpa_mut().copy_from_slice(&self.tpa);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REQ: [u8; 28] = [
        0, 1, 8, 0, 6, 4, 0, 1, // eth/ipv4 request
        2, 0, 0, 0, 0, 1, 10, 0, 0, 1, // sha spa
        0, 0, 0, 0, 0, 0, 10, 0, 0, 2, // tha tpa
    ];

    #[test]
    fn parses_request() {
        let p = Packet::new_checked(&REQ[..]).unwrap();
        assert!(p.is_ethernet_ipv4());
        assert_eq!(p.oper(), Operation::Request);
        assert_eq!(p.sha(), &[2, 0, 0, 0, 0, 1]);
        assert_eq!(p.spa(), &[10, 0, 0, 1]);
        assert_eq!(p.tha(), &[0; 6]);
        assert_eq!(p.tpa(), &[10, 0, 0, 2]);
        for n in 0..REQ.len() {
            assert_eq!(
                Packet::new_checked(&REQ[..n]),
                Err(Error::Truncated),
                "len {n}"
            );
        }
    }

    #[test]
    fn odd_lengths_never_overread() {
        // hlen 255 / plen 255 announces 1028 bytes: truncated, not a panic.
        let mut b = REQ;
        b[4] = 255;
        b[5] = 255;
        assert_eq!(Packet::new_checked(&b[..]), Err(Error::Truncated));
        // hlen 0 / plen 0: valid, empty addresses, not Ethernet/IPv4.
        b[4] = 0;
        b[5] = 0;
        let p = Packet::new_checked(&b[..]).unwrap();
        assert!(!p.is_ethernet_ipv4());
        assert!(p.sha().is_empty() && p.tpa().is_empty());
    }

    #[test]
    fn setters() {
        let mut b = REQ;
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        p.set_oper(Operation::Reply);
        p.tpa_mut().copy_from_slice(&[1, 2, 3, 4]);
        p.sha_mut().copy_from_slice(&[9; 6]);
        assert_eq!(p.oper_raw(), 2);
        assert_eq!(p.tpa(), &[1, 2, 3, 4]);
        assert_eq!(p.sha(), &[9; 6]);
        assert_eq!(p.spa(), &[10, 0, 0, 1]);
    }
}
