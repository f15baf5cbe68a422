//! Meter wire structures (OpenFlow 1.3.5 §7.3.4.4): the `OFPT_METER_MOD`
//! body ([`MeterMod`]) and the meter bands ([`MeterBand`]) it shares with
//! the `OFPMP_METER_CONFIG` reply.
//!
//! Band framing: every band this codec keeps (`OFPMBT_DROP`,
//! `OFPMBT_DSCP_REMARK`, `OFPMBT_EXPERIMENTER`) is exactly 16 bytes on the
//! wire (`struct ofp_meter_band_header` of 12 bytes plus 4 type-specific
//! bytes). A band whose length field is below 16, not a multiple of 8 or past
//! its container is `OFPBRC_BAD_LEN`; a well-framed band of another type is
//! `OFPMMFC_BAD_BAND`; a known type whose length is not 16 is
//! `OFPBRC_BAD_LEN` (Open vSwitch's `ofputil_pull_bands` answers both the
//! same way; it refuses experimenter bands, which we keep, without
//! experimenter data past the experimenter id).
//!
//! Thread-safety: plain data.

use crate::error::{DecodeError, MeterModFailedCode, OfError};
use crate::reader::{Put, Reader};

/// `enum ofp_meter_mod_command` (`OFPMC_*`).
pub mod meter_command {
    /// `OFPMC_ADD`: new meter.
    pub const ADD: u16 = 0;
    /// `OFPMC_MODIFY`: modify a meter.
    pub const MODIFY: u16 = 1;
    /// `OFPMC_DELETE`: delete a meter.
    pub const DELETE: u16 = 2;
}

/// `enum ofp_meter_flags` (`OFPMF_*`).
pub mod meter_flags {
    /// Rate in kbit/s.
    pub const KBPS: u16 = 1 << 0;
    /// Rate in packets/s.
    pub const PKTPS: u16 = 1 << 1;
    /// Use the bands' `burst_size`.
    pub const BURST: u16 = 1 << 2;
    /// Collect statistics.
    pub const STATS: u16 = 1 << 3;
}

/// `enum ofp_meter` reserved meter ids.
pub mod meter_id {
    /// `OFPM_MAX`: last usable meter.
    pub const MAX: u32 = 0xffff_0000;
    /// `OFPM_SLOWPATH`: meter for the slow datapath.
    pub const SLOWPATH: u32 = 0xffff_fffd;
    /// `OFPM_CONTROLLER`: meter for the controller connection.
    pub const CONTROLLER: u32 = 0xffff_fffe;
    /// `OFPM_ALL`: every meter (stats requests, delete).
    pub const ALL: u32 = 0xffff_ffff;
}

/// `enum ofp_meter_band_type` (`OFPMBT_*`).
pub mod band_type {
    /// Drop packet.
    pub const DROP: u16 = 1;
    /// Remark DSCP in the IP header.
    pub const DSCP_REMARK: u16 = 2;
    /// Experimenter meter band.
    pub const EXPERIMENTER: u16 = 0xffff;
}

/// Wire length of every band this codec keeps.
pub const BAND_LEN: usize = 16;

/// What a band does to a packet exceeding it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MeterBandKind {
    /// `OFPMBT_DROP` (`struct ofp_meter_band_drop`).
    Drop,
    /// `OFPMBT_DSCP_REMARK` (`struct ofp_meter_band_dscp_remark`): raise the
    /// drop precedence of the DSCP by `prec_level`.
    DscpRemark {
        /// Number of precedence levels to add.
        prec_level: u8,
    },
    /// `OFPMBT_EXPERIMENTER` (`struct ofp_meter_band_experimenter`), with no
    /// data past the experimenter id.
    Experimenter {
        /// Experimenter id.
        experimenter: u32,
    },
}

impl MeterBandKind {
    /// The `OFPMBT_*` wire type.
    pub fn band_type(&self) -> u16 {
        match self {
            MeterBandKind::Drop => band_type::DROP,
            MeterBandKind::DscpRemark { .. } => band_type::DSCP_REMARK,
            MeterBandKind::Experimenter { .. } => band_type::EXPERIMENTER,
        }
    }
}

/// One meter band (`struct ofp_meter_band_header` and its type's body).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MeterBand {
    /// Band type and its own fields.
    pub kind: MeterBandKind,
    /// Rate above which the band applies (kbit/s or packets/s, from the
    /// meter's flags).
    pub rate: u32,
    /// Burst size (kbits or packets), used with `OFPMF_BURST`.
    pub burst_size: u32,
}

/// `OFPT_METER_MOD` body (`struct ofp_meter_mod` after the header).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MeterMod {
    /// `OFPMC_*` ([`meter_command`]).
    pub command: u16,
    /// `OFPMF_*` bits ([`meter_flags`]).
    pub flags: u16,
    /// Meter id (1..=`OFPM_MAX`, or a reserved id).
    pub meter_id: u32,
    /// Bands, in wire order.
    pub bands: Vec<MeterBand>,
}

impl MeterMod {
    pub(crate) fn parse(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(MeterMod {
            command: r.u16()?,
            flags: r.u16()?,
            meter_id: r.u32()?,
            bands: parse_bands(r)?,
        })
    }

    pub(crate) fn emit(&self, out: &mut Vec<u8>) {
        out.put_u16(self.command);
        out.put_u16(self.flags);
        out.put_u32(self.meter_id);
        emit_bands(&self.bands, out);
    }
}

/// Parse every band left in `r`.
pub(crate) fn parse_bands(r: &mut Reader<'_>) -> Result<Vec<MeterBand>, DecodeError> {
    let bad_len = DecodeError::bad_len("meter band length");
    let mut bands = Vec::with_capacity(r.remaining() / BAND_LEN);
    while !r.is_empty() {
        let ty = r.peek_u16(0).map_err(|_| bad_len)?;
        let len = usize::from(r.peek_u16(2).map_err(|_| bad_len)?);
        if len < BAND_LEN || len % 8 != 0 || len > r.remaining() {
            return Err(bad_len);
        }
        let mut b = r.sub(len, bad_len)?;
        b.skip(4)?;
        let rate = b.u32()?;
        let burst_size = b.u32()?;
        let kind = match ty {
            band_type::DROP => {
                b.skip(4)?;
                MeterBandKind::Drop
            }
            band_type::DSCP_REMARK => {
                let prec_level = b.u8()?;
                b.skip(3)?;
                MeterBandKind::DscpRemark { prec_level }
            }
            band_type::EXPERIMENTER => MeterBandKind::Experimenter {
                experimenter: b.u32()?,
            },
            _ => {
                return Err(DecodeError::Invalid {
                    error: OfError::MeterModFailed(MeterModFailedCode::BadBand),
                    reason: "unknown meter band type",
                })
            }
        };
        if !b.is_empty() {
            return Err(bad_len);
        }
        bands.push(MeterBand {
            kind,
            rate,
            burst_size,
        });
    }
    Ok(bands)
}

/// Append `bands`, each [`BAND_LEN`] bytes.
pub(crate) fn emit_bands(bands: &[MeterBand], out: &mut Vec<u8>) {
    for b in bands {
        out.put_u16(b.kind.band_type());
        out.put_u16(BAND_LEN as u16);
        out.put_u32(b.rate);
        out.put_u32(b.burst_size);
        match b.kind {
            MeterBandKind::Drop => out.put_zeros(4),
            MeterBandKind::DscpRemark { prec_level } => {
                out.put_u8(prec_level);
                out.put_zeros(3);
            }
            MeterBandKind::Experimenter { experimenter } => out.put_u32(experimenter),
        }
    }
}
