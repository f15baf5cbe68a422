//! `struct ofp_match` (OpenFlow 1.3.5 §7.2.3) with OXM TLVs of class
//! `OFPXMC_OPENFLOW_BASIC`, and its conversion to and from
//! [`offlow_flow::Match`].
//!
//! # Representation
//!
//! A decoded match is an [`OxmMatch`]: the list of [`Oxm`] entries in the
//! order they appeared on the wire, so that decode → encode is byte-identical
//! for any input we accept. [`OxmMatch::to_match`] turns it into the
//! classifier's [`Match`]; [`OxmMatch::from_match`] goes back, emitting fields
//! in the **canonical order**: ascending OXM field number (the order of
//! [`Field::ALL`]), each field at most once, without a mask when the mask is
//! all-ones, and, where the flow key shares storage between fields
//! (`tcp_src`/`udp_src`/`sctp_src`/`icmpv4_type`/`icmpv6_type`,
//! `ipv4_src`/`arp_spa`, `arp_sha`/`ipv6_nd_sll`, ...), naming the field
//! that the match's `eth_type` / `ip_proto` make meaningful.
//!
//! # Validation (decode)
//!
//! - `ofp_match.type` must be `OFPMT_OXM` (else `OFPBMC_BAD_TYPE`); its length
//!   must cover the header and fit, with padding to 8, in the message
//!   (`OFPBMC_BAD_LEN`).
//! - Each TLV's payload length must equal the field's size (twice with a
//!   mask) and fit in the match (`OFPBMC_BAD_LEN`).
//! - Classes other than `OPENFLOW_BASIC` (including experimenter
//!   `0xffff`, whose 4-byte experimenter id is checked for length first) and
//!   unknown basic fields: `OFPBMC_BAD_FIELD`.
//! - A mask on a field the spec does not let be masked (§7.2.3.7, table
//!   "OXM flow match fields"): `OFPBMC_BAD_MASK`; mask bits beyond the field's
//!   width: `OFPBMC_BAD_MASK`; value bits beyond the width:
//!   `OFPBMC_BAD_VALUE`; value bits set where the mask is 0 (§7.2.3.5 requires
//!   the value to be 0 wherever the mask is 0), as Open vSwitch reports it:
//!   `OFPBMC_BAD_WILDCARDS`.
//! - The same field twice: `OFPBMC_DUP_FIELD` (a field may occur at most once
//!   in a match, §7.2.3.6).
//! - Missing prerequisites: `OFPBMC_BAD_PREREQ`, via
//!   [`offlow_flow::check_match_prerequisites`]; two fields that share
//!   key storage (whose prerequisites exclude each other, e.g. `tcp_src` and
//!   `udp_src`) are also `OFPBMC_BAD_PREREQ`, and so is a field whose
//!   storage-sharing sibling is the one the prerequisites name (`udp_src`
//!   under `ip_proto=6`).
//!
//! Thread-safety: plain data.

use crate::error::BadMatchCode as C;
use offlow_flow::{Field, Match};

use crate::error::DecodeError;
use crate::reader::{round8, Put, Reader};

/// `OFPXMC_OPENFLOW_BASIC`.
pub const OXM_CLASS_BASIC: u16 = 0x8000;
/// `OFPXMC_EXPERIMENTER`.
pub const OXM_CLASS_EXPERIMENTER: u16 = 0xffff;
/// `OFPMT_OXM`.
pub const OFPMT_OXM: u16 = 1;

/// Size in bytes of a basic field's value on the wire (§7.2.3.7).
pub const fn oxm_size(f: Field) -> usize {
    use Field::*;
    match f {
        InPort | InPhyPort | Ipv4Src | Ipv4Dst | ArpSpa | ArpTpa | Ipv6Flabel | MplsLabel => 4,
        Metadata | TunnelId => 8,
        EthDst | EthSrc | ArpSha | ArpTha | Ipv6NdSll | Ipv6NdTll => 6,
        EthType | VlanVid | TcpSrc | TcpDst | UdpSrc | UdpDst | SctpSrc | SctpDst | ArpOp
        | Ipv6Exthdr => 2,
        VlanPcp | IpDscp | IpEcn | IpProto | Icmpv4Type | Icmpv4Code | Icmpv6Type | Icmpv6Code
        | MplsTc | MplsBos => 1,
        Ipv6Src | Ipv6Dst | Ipv6NdTarget => 16,
        PbbIsid => 3,
    }
}

/// May the field carry a mask? (§7.2.3.7, the "Mask" column of the OXM
/// flow match field table.)
pub const fn oxm_maskable(f: Field) -> bool {
    use Field::*;
    matches!(
        f,
        Metadata
            | EthDst
            | EthSrc
            | VlanVid
            | Ipv4Src
            | Ipv4Dst
            | ArpSpa
            | ArpTpa
            | ArpSha
            | ArpTha
            | Ipv6Src
            | Ipv6Dst
            | Ipv6Flabel
            | PbbIsid
            | TunnelId
            | Ipv6Exthdr
    )
}

/// One basic OXM TLV. `value` and `mask` are right-aligned in the field's
/// width; `mask: None` is an exact match (`oxm_hasmask = 0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Oxm {
    /// The field.
    pub field: Field,
    /// The value.
    pub value: u128,
    /// The mask, when `oxm_hasmask` is set.
    pub mask: Option<u128>,
}

impl Oxm {
    /// An exact-match TLV.
    pub const fn exact(field: Field, value: u128) -> Oxm {
        Oxm {
            field,
            value,
            mask: None,
        }
    }

    /// Bytes on the wire (header included).
    pub const fn wire_len(&self) -> usize {
        let n = oxm_size(self.field);
        4 + if self.mask.is_some() { 2 * n } else { n }
    }

    /// Append the TLV.
    pub(crate) fn emit(&self, out: &mut Vec<u8>) {
        let n = oxm_size(self.field);
        let has_mask = self.mask.is_some();
        let len = if has_mask { 2 * n } else { n };
        out.put_u16(OXM_CLASS_BASIC);
        out.put_u8((self.field.oxm() << 1) | u8::from(has_mask));
        // n <= 16, so len <= 32 fits a u8.
        out.put_u8(len as u8);
        put_be(out, self.value, n);
        if let Some(m) = self.mask {
            put_be(out, m, n);
        }
    }

    /// Parse one TLV from `r` (positioned at its header). Checks length,
    /// class, field, mask permission and value/mask widths; not duplicates or
    /// prerequisites (those need the whole match).
    pub(crate) fn parse(r: &mut Reader<'_>) -> Result<Oxm, DecodeError> {
        let bad_len = DecodeError::matching(C::BadLen, "OXM TLV length");
        let class = r.u16().map_err(|_| bad_len)?;
        let fh = r.u8().map_err(|_| bad_len)?;
        let len = usize::from(r.u8().map_err(|_| bad_len)?);
        let payload = r.bytes(len).map_err(|_| bad_len)?;
        if class == OXM_CLASS_EXPERIMENTER {
            // `struct ofp_oxm_experimenter_header`: the payload starts with
            // the experimenter id; none is supported.
            if payload.len() < 4 {
                return Err(bad_len);
            }
            return Err(DecodeError::matching(
                C::BadField,
                "experimenter OXM not supported",
            ));
        }
        if class != OXM_CLASS_BASIC {
            return Err(DecodeError::matching(C::BadField, "unsupported OXM class"));
        }
        let field = Field::from_oxm(fh >> 1).ok_or(DecodeError::matching(
            C::BadField,
            "unknown basic OXM field",
        ))?;
        let has_mask = fh & 1 == 1;
        let n = oxm_size(field);
        if len != if has_mask { 2 * n } else { n } {
            return Err(bad_len);
        }
        // `payload.len()` is `n` or `2n` (checked just above).
        let value = get_be(&payload[..n]);
        if value & !field.full_mask() != 0 {
            return Err(DecodeError::matching(
                C::BadValue,
                "OXM value wider than field",
            ));
        }
        let mask = if has_mask {
            if !oxm_maskable(field) {
                return Err(DecodeError::matching(
                    C::BadMask,
                    "mask on a non-maskable field",
                ));
            }
            let m = get_be(&payload[n..]);
            if m & !field.full_mask() != 0 {
                return Err(DecodeError::matching(
                    C::BadMask,
                    "OXM mask wider than field",
                ));
            }
            if value & !m != 0 {
                return Err(DecodeError::matching(
                    C::BadWildcards,
                    "OXM value has 1-bits outside its mask",
                ));
            }
            Some(m)
        } else {
            None
        };
        Ok(Oxm { field, value, mask })
    }
}

/// Append the low `n` bytes of `v`; `n` is an `oxm_size`, at most 16.
fn put_be(out: &mut Vec<u8>, v: u128, n: usize) {
    out.extend_from_slice(&v.to_be_bytes()[16 - n..]);
}

fn get_be(b: &[u8]) -> u128 {
    b.iter().fold(0u128, |acc, &x| (acc << 8) | u128::from(x))
}

/// An `ofp_match` of type `OFPMT_OXM`: the OXM TLVs in wire order.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct OxmMatch {
    /// TLVs, in wire order (no duplicates, prerequisites satisfied, when
    /// decoded).
    pub fields: Vec<Oxm>,
}

impl OxmMatch {
    /// The match-everything match (no TLVs).
    pub const fn any() -> OxmMatch {
        OxmMatch { fields: Vec::new() }
    }

    /// `ofp_match.length`: header plus TLVs, excluding padding.
    pub fn wire_len(&self) -> usize {
        4 + self.fields.iter().map(Oxm::wire_len).sum::<usize>()
    }

    /// Append the `ofp_match`, padded to 8 bytes.
    pub(crate) fn emit(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.put_u16(OFPMT_OXM);
        // Bounded by the message length check in `encode` (a match longer
        // than 65535 makes the message too long and is refused there).
        out.put_u16(self.wire_len().min(0xffff) as u16);
        for f in &self.fields {
            f.emit(out);
        }
        out.pad8_from(start);
    }

    /// Parse an `ofp_match` from `r`, consuming it and its padding.
    pub(crate) fn parse(r: &mut Reader<'_>) -> Result<OxmMatch, DecodeError> {
        let bad_len = DecodeError::matching(C::BadLen, "ofp_match length");
        let ty = r.u16().map_err(|_| bad_len)?;
        let len = usize::from(r.u16().map_err(|_| bad_len)?);
        if ty != OFPMT_OXM {
            return Err(DecodeError::matching(C::BadType, "ofp_match type not OXM"));
        }
        if len < 4 || round8(len) - 4 > r.remaining() {
            return Err(bad_len);
        }
        let mut body = r.sub(len - 4, bad_len)?;
        r.skip(round8(len) - len)?;
        let mut fields: Vec<Oxm> = Vec::new();
        while !body.is_empty() {
            let oxm = Oxm::parse(&mut body)?;
            if fields.iter().any(|f| f.field == oxm.field) {
                return Err(DecodeError::matching(C::DupField, "OXM field repeated"));
            }
            let loc = oxm.field.loc();
            if fields.iter().any(|f| {
                let l = f.field.loc();
                l.word == loc.word && l.shift == loc.shift
            }) {
                return Err(DecodeError::matching(
                    C::BadPrereq,
                    "fields with mutually exclusive prerequisites",
                ));
            }
            fields.push(oxm);
        }
        let m = OxmMatch { fields };
        let key_match = m.to_match();
        // The pipeline's check cannot tell apart fields sharing key storage
        // (it accepts `ipv6_nd_sll` under `eth_type=ARP`, since `arp_sha`
        // lives there); naming the field the prerequisites select closes
        // that gap and makes `from_match(to_match())` name the same fields.
        if offlow_flow::check_match_prerequisites(&key_match).is_err()
            || m.fields
                .iter()
                .any(|f| canonical_owner(f.field, &key_match) != f.field)
        {
            return Err(DecodeError::matching(
                C::BadPrereq,
                "OXM prerequisite missing (§7.2.3.6)",
            ));
        }
        Ok(m)
    }

    /// The classifier match these TLVs describe.
    pub fn to_match(&self) -> Match {
        let mut m = Match::ANY;
        for f in &self.fields {
            m.set_masked(f.field, f.value, f.mask.unwrap_or(f.field.full_mask()));
        }
        m
    }

    /// The canonical TLV list for `m` (see the module documentation for the
    /// order). Fields the key stores in shared words are named after the
    /// match's `eth_type` / `ip_proto`; a mask on a field the spec does not
    /// let be masked is emitted as given (the decoder would refuse it).
    pub fn from_match(m: &Match) -> OxmMatch {
        let mut fields = Vec::new();
        for f in Field::ALL {
            let (value, mask) = m.field(f);
            if mask == 0 || canonical_owner(f, m) != f {
                continue;
            }
            let mask = if mask == f.full_mask() {
                None
            } else {
                Some(mask)
            };
            fields.push(Oxm {
                field: f,
                value,
                mask,
            });
        }
        OxmMatch { fields }
    }
}

/// Of the fields stored at `f`'s location, the one `m`'s prerequisites name.
fn canonical_owner(f: Field, m: &Match) -> Field {
    let exact = |g: Field| {
        let (v, mk) = m.field(g);
        (mk == g.full_mask()).then_some(v)
    };
    // Both fields are at most 16 bits wide.
    let et = exact(Field::EthType).map(|v| v as u16);
    let proto = exact(Field::IpProto).map(|v| v as u8);
    storage_owner(f, et, proto)
}

/// Several OXM fields share one location of the flow key (`tcp_src`,
/// `udp_src`, `sctp_src`, `icmpv4_type`, `icmpv6_type`; `ipv4_src` and
/// `arp_spa`; ...). Of those sharing `f`'s, the one a match (or packet)
/// with this exact `eth_type` and `ip_proto` means: the name to encode it
/// under, or to print it as.
pub fn storage_owner(f: Field, eth_type: Option<u16>, ip_proto: Option<u8>) -> Field {
    use Field::*;
    let arp = eth_type == Some(0x0806);
    let proto = ip_proto;
    match f {
        Ipv4Src | ArpSpa => {
            if arp {
                ArpSpa
            } else {
                Ipv4Src
            }
        }
        Ipv4Dst | ArpTpa => {
            if arp {
                ArpTpa
            } else {
                Ipv4Dst
            }
        }
        ArpSha | Ipv6NdSll => {
            if arp {
                ArpSha
            } else {
                Ipv6NdSll
            }
        }
        ArpTha | Ipv6NdTll => {
            if arp {
                ArpTha
            } else {
                Ipv6NdTll
            }
        }
        TcpSrc | UdpSrc | SctpSrc | Icmpv4Type | Icmpv6Type => match proto {
            Some(17) => UdpSrc,
            Some(132) => SctpSrc,
            Some(1) => Icmpv4Type,
            Some(58) => Icmpv6Type,
            _ => TcpSrc,
        },
        TcpDst | UdpDst | SctpDst | Icmpv4Code | Icmpv6Code => match proto {
            Some(17) => UdpDst,
            Some(132) => SctpDst,
            Some(1) => Icmpv4Code,
            Some(58) => Icmpv6Code,
            _ => TcpDst,
        },
        other => other,
    }
}
