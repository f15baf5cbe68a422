//! IEEE 802.1ah provider backbone bridging I-TAG (EtherType 0x88e7).
//!
//! The I-TAG TCI is 4 bytes: I-PCP (3 bits), I-DEI (1), UCA (1), reserved
//! (3), I-SID (24). The encapsulated customer frame (C-DA, C-SA, ...) follows;
//! this view covers only the TCI.

use crate::bytes::be32;
use crate::{view_common, Error, Result};

/// Byte ranges of the I-TAG TCI.
pub mod field {
    use core::ops::{Range, RangeFrom};
    /// The 32-bit TCI.
    pub const TCI: Range<usize> = 0..4;
    /// The encapsulated customer frame.
    pub const PAYLOAD: RangeFrom<usize> = 4..;
}

/// Length of the I-TAG TCI.
pub const HEADER_LEN: usize = field::PAYLOAD.start;

/// A view over an I-TAG TCI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ITag<T: AsRef<[u8]>> {
    buffer: T,
}

view_common!(ITag);

impl<T: AsRef<[u8]>> ITag<T> {
    /// The buffer must hold the 4-byte TCI.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// The raw TCI.
    #[inline]
    pub fn tci(&self) -> u32 {
        be32(self.buffer.as_ref(), field::TCI.start)
    }

    /// Backbone service instance identifier (24 bits).
    #[inline]
    pub fn isid(&self) -> u32 {
        self.tci() & 0x00ff_ffff
    }

    /// Priority code point (3 bits).
    #[inline]
    pub fn pcp(&self) -> u8 {
        (self.tci() >> 29) as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_isid() {
        let buf = [0xa0, 0xab, 0xcd, 0xef];
        let t = ITag::new_checked(&buf[..]).unwrap();
        assert_eq!((t.pcp(), t.isid()), (5, 0xabcdef));
        assert_eq!(ITag::new_checked(&buf[..3]), Err(Error::Truncated));
    }
}
