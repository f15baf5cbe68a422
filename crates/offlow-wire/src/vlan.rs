//! IEEE 802.1Q / 802.1ad VLAN tag.
//!
//! On the wire a tag is a 2-byte TPID (0x8100 for a C-TAG, 0x88a8 for an
//! S-TAG) in the place of the EtherType, followed by the 2-byte TCI and the
//! next EtherType. The TPID is read by whoever found it (the Ethernet view or
//! the previous tag), so this view starts at the TCI: it covers TCI and the
//! EtherType that follows, 4 bytes.

use crate::bytes::{be16, put16};
use crate::ethernet::EtherType;
use crate::{view_common, Error, Result};

/// Byte ranges of the tag fields (relative to the TCI).
pub mod field {
    use core::ops::{Range, RangeFrom};
    /// Tag control information: PCP (3 bits), DEI (1), VID (12).
    pub const TCI: Range<usize> = 0..2;
    /// EtherType of what follows the tag (possibly another TPID).
    pub const ETHERTYPE: Range<usize> = 2..4;
    /// Everything after the tag.
    pub const PAYLOAD: RangeFrom<usize> = 4..;
}

/// Bytes covered by the view (TCI + next EtherType).
pub const HEADER_LEN: usize = field::PAYLOAD.start;
/// Bytes a tag inserts into a frame (TPID + TCI).
pub const TAG_LEN: usize = 4;
/// TPID of an 802.1Q customer tag.
pub const TPID_8021Q: u16 = 0x8100;
/// TPID of an 802.1ad service tag.
pub const TPID_8021AD: u16 = 0x88a8;

/// Is `ethertype` a VLAN TPID this crate recognises?
#[inline]
pub fn is_tpid(ethertype: u16) -> bool {
    ethertype == TPID_8021Q || ethertype == TPID_8021AD
}

/// A view over one VLAN tag (from the TCI on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tag<T: AsRef<[u8]>> {
    buffer: T,
}

view_common!(Tag);

impl<T: AsRef<[u8]>> Tag<T> {
    /// The buffer must hold TCI and the following EtherType (4 bytes).
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// The raw tag control information.
    #[inline]
    pub fn tci(&self) -> u16 {
        be16(self.buffer.as_ref(), field::TCI.start)
    }

    /// Priority code point (3 bits).
    #[inline]
    pub fn pcp(&self) -> u8 {
        (self.tci() >> 13) as u8
    }

    /// Drop eligible indicator.
    #[inline]
    pub fn dei(&self) -> bool {
        self.tci() & 0x1000 != 0
    }

    /// VLAN identifier (12 bits).
    #[inline]
    pub fn vid(&self) -> u16 {
        self.tci() & 0x0fff
    }

    /// EtherType following the tag, raw.
    #[inline]
    pub fn ethertype_raw(&self) -> u16 {
        be16(self.buffer.as_ref(), field::ETHERTYPE.start)
    }

    /// EtherType following the tag.
    #[inline]
    pub fn ethertype(&self) -> EtherType {
        self.ethertype_raw().into()
    }

    /// Everything after the tag.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Tag<T> {
    /// Set the raw TCI.
    #[inline]
    pub fn set_tci(&mut self, tci: u16) {
        put16(self.buffer.as_mut(), field::TCI.start, tci);
    }

    /// Set the VID, keeping PCP and DEI.
    #[inline]
    pub fn set_vid(&mut self, vid: u16) {
        let tci = (self.tci() & 0xf000) | (vid & 0x0fff);
        self.set_tci(tci);
    }

    /// Set the PCP, keeping DEI and VID.
    #[inline]
    pub fn set_pcp(&mut self, pcp: u8) {
        let tci = (self.tci() & 0x1fff) | (((pcp & 7) as u16) << 13);
        self.set_tci(tci);
    }

    /// Set the EtherType that follows the tag.
    #[inline]
    pub fn set_ethertype(&mut self, t: EtherType) {
        put16(self.buffer.as_mut(), field::ETHERTYPE.start, t.into());
    }
}

/// A parsed 802.1Q / 802.1ad tag: the TCI and the EtherType after it (the
/// TPID is the EtherType of the header before).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Priority code point (3 bits).
    pub pcp: u8,
    /// Drop eligible indicator.
    pub dei: bool,
    /// VLAN identifier (12 bits).
    pub vid: u16,
    /// EtherType following the tag.
    pub ethertype: EtherType,
}

impl Repr {
    /// Read `tag`.
    pub fn parse<T: AsRef<[u8]>>(tag: &Tag<T>) -> Result<Repr> {
        tag.check_len()?;
        Ok(Repr {
            pcp: tag.pcp(),
            dei: tag.dei(),
            vid: tag.vid(),
            ethertype: tag.ethertype(),
        })
    }

    /// The TCI these fields make (`pcp` and `vid` are masked to their widths).
    #[inline]
    pub const fn tci(&self) -> u16 {
        ((self.pcp as u16 & 7) << 13) | ((self.dei as u16) << 12) | (self.vid & 0x0fff)
    }

    /// Bytes [`Repr::emit`] writes.
    #[inline]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Bytes the tag needs.
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Write the tag into `tag` (at least [`HEADER_LEN`] bytes).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, tag: &mut Tag<T>) {
        tag.set_tci(self.tci());
        tag.set_ethertype(self.ethertype);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_sets_tci() {
        let mut buf = [0xb0, 0x64, 0x08, 0x00, 0xee];
        let t = Tag::new_checked(&buf[..]).unwrap();
        assert_eq!((t.pcp(), t.dei(), t.vid()), (5, true, 100));
        assert_eq!(t.ethertype(), EtherType::Ipv4);
        assert_eq!(t.payload(), &[0xee]);
        let mut t = Tag::new_checked(&mut buf[..]).unwrap();
        t.set_vid(0xabc);
        t.set_pcp(2);
        assert_eq!((t.pcp(), t.dei(), t.vid()), (2, true, 0xabc));
        assert!(is_tpid(0x8100) && is_tpid(0x88a8) && !is_tpid(0x0800));
        for n in 0..HEADER_LEN {
            assert_eq!(Tag::new_checked(&buf[..n]), Err(Error::Truncated));
        }
    }
}
