//! MPLS label stack entry (RFC 3032 §2.1): label (20 bits), traffic class
//! (3, RFC 5462), bottom-of-stack (1), TTL (8).

use crate::bytes::{be32, put32};
use crate::{view_common, Error, Result};

/// Byte ranges of the entry.
pub mod field {
    use core::ops::{Range, RangeFrom};
    /// The whole 32-bit entry.
    pub const LSE: Range<usize> = 0..4;
    /// The TTL byte.
    pub const TTL: usize = 3;
    /// The byte holding the bottom-of-stack bit (its lowest bit).
    pub const BOS: usize = 2;
    /// Everything after the entry (the next entry or the payload).
    pub const PAYLOAD: RangeFrom<usize> = 4..;
}

/// Length of one label stack entry.
pub const HEADER_LEN: usize = field::PAYLOAD.start;

/// A view over one label stack entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lse<T: AsRef<[u8]>> {
    buffer: T,
}

view_common!(Lse);

impl<T: AsRef<[u8]>> Lse<T> {
    /// The buffer must hold the 4-byte entry.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// The raw entry.
    #[inline]
    pub fn raw(&self) -> u32 {
        be32(self.buffer.as_ref(), field::LSE.start)
    }

    /// Label (20 bits).
    #[inline]
    pub fn label(&self) -> u32 {
        self.raw() >> 12
    }

    /// Traffic class (3 bits).
    #[inline]
    pub fn tc(&self) -> u8 {
        ((self.raw() >> 9) & 7) as u8
    }

    /// Bottom of stack.
    #[inline]
    pub fn bos(&self) -> bool {
        self.raw() & 0x100 != 0
    }

    /// Time to live.
    #[inline]
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    /// Everything after the entry.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Lse<T> {
    /// Set the raw entry.
    #[inline]
    pub fn set_raw(&mut self, v: u32) {
        put32(self.buffer.as_mut(), field::LSE.start, v);
    }

    /// Set the label, keeping the other bits.
    #[inline]
    pub fn set_label(&mut self, label: u32) {
        let v = (self.raw() & 0xfff) | ((label & 0xf_ffff) << 12);
        self.set_raw(v);
    }

    /// Set the traffic class, keeping the other bits.
    #[inline]
    pub fn set_tc(&mut self, tc: u8) {
        let v = (self.raw() & !0xe00) | (((tc & 7) as u32) << 9);
        self.set_raw(v);
    }

    /// Set the TTL.
    #[inline]
    pub fn set_ttl(&mut self, ttl: u8) {
        self.buffer.as_mut()[field::TTL] = ttl;
    }
}

/// A parsed label stack entry (RFC 3032 §2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Label (20 bits).
    pub label: u32,
    /// Traffic class (3 bits).
    pub tc: u8,
    /// Bottom of stack.
    pub bos: bool,
    /// Time to live.
    pub ttl: u8,
}

impl Repr {
    /// Read `lse`.
    pub fn parse<T: AsRef<[u8]>>(lse: &Lse<T>) -> Result<Repr> {
        lse.check_len()?;
        Ok(Repr {
            label: lse.label(),
            tc: lse.tc(),
            bos: lse.bos(),
            ttl: lse.ttl(),
        })
    }

    /// The 32-bit entry (`label` and `tc` masked to their widths).
    #[inline]
    pub const fn raw(&self) -> u32 {
        ((self.label & 0xf_ffff) << 12)
            | ((self.tc as u32 & 7) << 9)
            | ((self.bos as u32) << 8)
            | self.ttl as u32
    }

    /// Bytes [`Repr::emit`] writes.
    #[inline]
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Bytes the entry needs.
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Write the entry into `lse` (at least [`HEADER_LEN`] bytes).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, lse: &mut Lse<T>) {
        lse.set_raw(self.raw());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_sets() {
        // label 0x12345, tc 5, bos 1, ttl 64
        let raw: u32 = (0x12345 << 12) | (5 << 9) | (1 << 8) | 64;
        let mut buf = raw.to_be_bytes();
        let l = Lse::new_checked(&buf[..]).unwrap();
        assert_eq!(
            (l.label(), l.tc(), l.bos(), l.ttl()),
            (0x12345, 5, true, 64)
        );
        let mut l = Lse::new_checked(&mut buf[..]).unwrap();
        l.set_label(0xfffff);
        l.set_tc(2);
        l.set_ttl(3);
        assert_eq!((l.label(), l.tc(), l.bos(), l.ttl()), (0xfffff, 2, true, 3));
        assert_eq!(Lse::new_checked(&buf[..3]), Err(Error::Truncated));
    }
}
