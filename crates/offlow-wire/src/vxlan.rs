//! VXLAN header (RFC 7348 §5), carried in UDP to destination port 4789.
//!
//! ```text
//! flags (8: R R R R I R R R) | reserved (24) | VNI (24) | reserved (8)
//! ```
//! RFC 7348: "The I flag MUST be set to 1 for a valid VXLAN Network ID
//! (VNI)." A header without it carries no VNI.

use crate::bytes::{be32, put32};
use crate::{view_common, Error, Result};

/// Byte ranges of the header.
pub mod field {
    use core::ops::{Range, RangeFrom};
    /// Flags byte.
    pub const FLAGS: usize = 0;
    /// VNI (bytes 4..7) and the reserved byte after it.
    pub const VNI_RESERVED: Range<usize> = 4..8;
    /// The inner Ethernet frame.
    pub const PAYLOAD: RangeFrom<usize> = 8..;
}

/// Length of the VXLAN header.
pub const HEADER_LEN: usize = field::PAYLOAD.start;
/// IANA-assigned UDP destination port (RFC 7348 §5).
pub const UDP_PORT: u16 = 4789;
/// The I flag: the VNI is valid.
pub const FLAG_I: u8 = 0x08;

/// A view over a VXLAN header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

view_common!(Packet);

impl<T: AsRef<[u8]>> Packet<T> {
    /// The buffer must hold the 8-byte header.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// The flags byte.
    #[inline]
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// Is the I flag (valid VNI) set?
    #[inline]
    pub fn has_vni(&self) -> bool {
        self.flags() & FLAG_I != 0
    }

    /// The 24-bit VNI (meaningful when [`has_vni`](Self::has_vni)).
    #[inline]
    pub fn vni(&self) -> u32 {
        be32(self.buffer.as_ref(), field::VNI_RESERVED.start) >> 8
    }

    /// The inner frame.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set the VNI and the I flag.
    #[inline]
    pub fn set_vni(&mut self, vni: u32) {
        let b = self.buffer.as_mut();
        b[field::FLAGS] |= FLAG_I;
        let low = b[field::VNI_RESERVED.end - 1] as u32;
        put32(b, field::VNI_RESERVED.start, ((vni & 0xff_ffff) << 8) | low);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_vni() {
        let mut buf = [0x08, 0, 0, 0, 0x12, 0x34, 0x56, 0x00, 0xee];
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert!(p.has_vni());
        assert_eq!(p.vni(), 0x123456);
        assert_eq!(p.payload(), &[0xee]);
        let mut p = Packet::new_checked(&mut buf[..]).unwrap();
        p.set_vni(0xabcdef);
        assert_eq!(p.vni(), 0xabcdef);
        buf[0] = 0;
        assert!(!Packet::new_checked(&buf[..]).unwrap().has_vni());
        assert_eq!(Packet::new_checked(&buf[..7]), Err(Error::Truncated));
    }
}
