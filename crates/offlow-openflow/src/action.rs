//! Actions (`struct ofp_action_*`, OpenFlow 1.3.5 §7.2.5) and instructions
//! (`struct ofp_instruction_*`, §7.2.4) on the wire.
//!
//! The codec has its own [`Action`] / [`Instruction`] enums because the wire
//! carries more than the pipeline models: the bytes of experimenter actions
//! and instructions. The conversion to the pipeline's
//! types lives on the pipeline's side of the seam (`offlow_pipeline::convert`)
//! and fails with the error the switch should report for what it cannot
//! execute.
//!
//! Validation: every action and instruction length must be at least 8, a
//! multiple of 8 and fit in its container; fixed-size types must have exactly
//! their size. Errors are `OFPBAC_BAD_LEN` / `OFPBIC_BAD_LEN`, unknown types
//! `OFPBAC_BAD_TYPE` / `OFPBIC_UNKNOWN_INST`. Set-field: a non-basic OXM class
//! or unknown field is `OFPBAC_BAD_SET_TYPE`, a wrong OXM length
//! `OFPBAC_BAD_SET_LEN`, a mask (§7.2.5: set-field OXMs carry no mask) or a value wider than the field `OFPBAC_BAD_SET_ARGUMENT`.
//!
//! offlow's own experimenter action (experimenter id [`OFLW_EXPERIMENTER`],
//! "OFLW") carries a u16 subtype after the id; subtype
//! [`OFLW_SUBTYPE_WORKERS`] is `offlow_workers` ([`Action::SetWorkers`]):
//! 6 pad bytes then a u64 worker mask, 24 bytes in all. An OFLW action with
//! another subtype is `OFPBAC_BAD_EXP_TYPE`, a wrong length `OFPBAC_BAD_LEN`.
//! Other experimenter ids decode to [`Action::Experimenter`] as before.
//!
//! Thread-safety: plain data.

use crate::error::{BadActionCode as AC, BadInstructionCode as IC, DecodeError, EncodeError};
use crate::oxm::{oxm_size, Oxm, OXM_CLASS_BASIC};
use crate::reader::{round8, Put, Reader};
use offlow_flow::Field;

/// `enum ofp_action_type` wire values.
#[allow(missing_docs)]
pub mod action_type {
    pub const OUTPUT: u16 = 0;
    pub const COPY_TTL_OUT: u16 = 11;
    pub const COPY_TTL_IN: u16 = 12;
    pub const SET_MPLS_TTL: u16 = 15;
    pub const DEC_MPLS_TTL: u16 = 16;
    pub const PUSH_VLAN: u16 = 17;
    pub const POP_VLAN: u16 = 18;
    pub const PUSH_MPLS: u16 = 19;
    pub const POP_MPLS: u16 = 20;
    pub const SET_QUEUE: u16 = 21;
    pub const GROUP: u16 = 22;
    pub const SET_NW_TTL: u16 = 23;
    pub const DEC_NW_TTL: u16 = 24;
    pub const SET_FIELD: u16 = 25;
    pub const PUSH_PBB: u16 = 26;
    pub const POP_PBB: u16 = 27;
    pub const EXPERIMENTER: u16 = 0xffff;
}

/// offlow's experimenter id: "OFLW" in ASCII.
pub const OFLW_EXPERIMENTER: u32 = 0x4f46_4c57;
/// OFLW action subtype of `offlow_workers` ([`Action::SetWorkers`]).
pub const OFLW_SUBTYPE_WORKERS: u16 = 1;
/// Wire length of the `offlow_workers` action: type, length, experimenter
/// id, subtype, 6 pad bytes, u64 mask.
const OFLW_WORKERS_LEN: usize = 24;

/// `enum ofp_instruction_type` wire values.
#[allow(missing_docs)]
pub mod instruction_type {
    pub const GOTO_TABLE: u16 = 1;
    pub const WRITE_METADATA: u16 = 2;
    pub const WRITE_ACTIONS: u16 = 3;
    pub const APPLY_ACTIONS: u16 = 4;
    pub const CLEAR_ACTIONS: u16 = 5;
    pub const METER: u16 = 6;
    pub const EXPERIMENTER: u16 = 0xffff;
}

/// An OpenFlow 1.3 action as it appears on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Action {
    /// `OFPAT_OUTPUT`.
    Output {
        /// Output port (`ofp_port_no`).
        port: u32,
        /// Bytes to send to the controller.
        max_len: u16,
    },
    /// `OFPAT_COPY_TTL_OUT`.
    CopyTtlOut,
    /// `OFPAT_COPY_TTL_IN`.
    CopyTtlIn,
    /// `OFPAT_SET_MPLS_TTL`.
    SetMplsTtl(u8),
    /// `OFPAT_DEC_MPLS_TTL`.
    DecMplsTtl,
    /// `OFPAT_PUSH_VLAN` (ethertype).
    PushVlan(u16),
    /// `OFPAT_POP_VLAN`.
    PopVlan,
    /// `OFPAT_PUSH_MPLS` (ethertype).
    PushMpls(u16),
    /// `OFPAT_POP_MPLS` (ethertype of the payload).
    PopMpls(u16),
    /// `OFPAT_SET_QUEUE`.
    SetQueue(u32),
    /// `OFPAT_GROUP`.
    Group(u32),
    /// `OFPAT_SET_NW_TTL`.
    SetNwTtl(u8),
    /// `OFPAT_DEC_NW_TTL`.
    DecNwTtl,
    /// `OFPAT_SET_FIELD`: one unmasked basic OXM, value right-aligned.
    SetField(Field, u128),
    /// `OFPAT_PUSH_PBB` (ethertype).
    PushPbb(u16),
    /// `OFPAT_POP_PBB`.
    PopPbb,
    /// offlow's `offlow_workers` experimenter action (see the module docs):
    /// the packet workers allowed to process the packet, bit i = worker i.
    SetWorkers(u64),
    /// `OFPAT_EXPERIMENTER`: id and the bytes after it (length a multiple
    /// of 8 for the action to be encodable). Never carries
    /// [`OFLW_EXPERIMENTER`] when decoded: those actions have their own
    /// variants.
    Experimenter {
        /// Experimenter id.
        experimenter: u32,
        /// Experimenter-defined bytes.
        data: Vec<u8>,
    },
}

impl Action {
    /// Bytes on the wire.
    pub fn wire_len(&self) -> usize {
        match self {
            Action::Output { .. } => 16,
            Action::SetField(f, _) => round8(8 + oxm_size(*f)),
            Action::Experimenter { data, .. } => 8 + data.len(),
            Action::SetWorkers(_) => OFLW_WORKERS_LEN,
            _ => 8,
        }
    }

    pub(crate) fn emit(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        use action_type as T;
        let start = out.len();
        let (ty, len) = match self {
            Action::Output { .. } => (T::OUTPUT, 16),
            Action::CopyTtlOut => (T::COPY_TTL_OUT, 8),
            Action::CopyTtlIn => (T::COPY_TTL_IN, 8),
            Action::SetMplsTtl(_) => (T::SET_MPLS_TTL, 8),
            Action::DecMplsTtl => (T::DEC_MPLS_TTL, 8),
            Action::PushVlan(_) => (T::PUSH_VLAN, 8),
            Action::PopVlan => (T::POP_VLAN, 8),
            Action::PushMpls(_) => (T::PUSH_MPLS, 8),
            Action::PopMpls(_) => (T::POP_MPLS, 8),
            Action::SetQueue(_) => (T::SET_QUEUE, 8),
            Action::Group(_) => (T::GROUP, 8),
            Action::SetNwTtl(_) => (T::SET_NW_TTL, 8),
            Action::DecNwTtl => (T::DEC_NW_TTL, 8),
            Action::SetField(..) => (T::SET_FIELD, self.wire_len()),
            Action::PushPbb(_) => (T::PUSH_PBB, 8),
            Action::PopPbb => (T::POP_PBB, 8),
            Action::SetWorkers(_) => (T::EXPERIMENTER, OFLW_WORKERS_LEN),
            Action::Experimenter { data, .. } => {
                if data.len() % 8 != 0 {
                    return Err(EncodeError::Misaligned("experimenter action"));
                }
                (T::EXPERIMENTER, 8 + data.len())
            }
        };
        out.put_u16(ty);
        // Anything longer than a u16 makes the whole message too long, which
        // `encode` refuses; the clamp only keeps this cast honest.
        out.put_u16(len.min(0xffff) as u16);
        match self {
            Action::Output { port, max_len } => {
                out.put_u32(*port);
                out.put_u16(*max_len);
            }
            Action::SetMplsTtl(t) | Action::SetNwTtl(t) => out.put_u8(*t),
            Action::PushVlan(e) | Action::PushMpls(e) | Action::PopMpls(e) | Action::PushPbb(e) => {
                out.put_u16(*e)
            }
            Action::SetQueue(v) | Action::Group(v) => out.put_u32(*v),
            Action::SetField(f, v) => {
                if *v & !f.full_mask() != 0 {
                    return Err(EncodeError::Invalid("set-field value wider than field"));
                }
                Oxm::exact(*f, *v).emit(out);
            }
            Action::SetWorkers(mask) => {
                out.put_u32(OFLW_EXPERIMENTER);
                out.put_u16(OFLW_SUBTYPE_WORKERS);
                out.put_zeros(6);
                out.put_u64(*mask);
            }
            Action::Experimenter { experimenter, data } => {
                out.put_u32(*experimenter);
                out.extend_from_slice(data);
            }
            _ => {}
        }
        // Pad to the declared length (zero padding).
        let written = out.len() - start;
        out.put_zeros(len.saturating_sub(written));
        Ok(())
    }

    /// Parse one action; `r` is positioned at its header.
    pub(crate) fn parse(r: &mut Reader<'_>) -> Result<Action, DecodeError> {
        use action_type as T;
        let bad_len = DecodeError::action(AC::BadLen, "action length");
        let len = usize::from(r.peek_u16(2).map_err(|_| bad_len)?);
        if len < 8 || len % 8 != 0 || len > r.remaining() {
            return Err(bad_len);
        }
        let mut a = r.sub(len, bad_len)?;
        let ty = a.u16()?;
        a.skip(2)?;
        let fixed = |want: usize| if len == want { Ok(()) } else { Err(bad_len) };
        let act = match ty {
            T::OUTPUT => {
                fixed(16)?;
                Action::Output {
                    port: a.u32()?,
                    max_len: a.u16()?,
                }
            }
            T::COPY_TTL_OUT => fixed(8).map(|_| Action::CopyTtlOut)?,
            T::COPY_TTL_IN => fixed(8).map(|_| Action::CopyTtlIn)?,
            T::SET_MPLS_TTL => fixed(8).and_then(|_| a.u8().map(Action::SetMplsTtl))?,
            T::DEC_MPLS_TTL => fixed(8).map(|_| Action::DecMplsTtl)?,
            T::PUSH_VLAN => fixed(8).and_then(|_| a.u16().map(Action::PushVlan))?,
            T::POP_VLAN => fixed(8).map(|_| Action::PopVlan)?,
            T::PUSH_MPLS => fixed(8).and_then(|_| a.u16().map(Action::PushMpls))?,
            T::POP_MPLS => fixed(8).and_then(|_| a.u16().map(Action::PopMpls))?,
            T::SET_QUEUE => fixed(8).and_then(|_| a.u32().map(Action::SetQueue))?,
            T::GROUP => fixed(8).and_then(|_| a.u32().map(Action::Group))?,
            T::SET_NW_TTL => fixed(8).and_then(|_| a.u8().map(Action::SetNwTtl))?,
            T::DEC_NW_TTL => fixed(8).map(|_| Action::DecNwTtl)?,
            T::PUSH_PBB => fixed(8).and_then(|_| a.u16().map(Action::PushPbb))?,
            T::POP_PBB => fixed(8).map(|_| Action::PopPbb)?,
            T::SET_FIELD => parse_set_field(&mut a, len)?,
            T::EXPERIMENTER => match a.u32()? {
                OFLW_EXPERIMENTER => parse_oflw(&mut a, len)?,
                experimenter => Action::Experimenter {
                    experimenter,
                    data: a.rest().to_vec(),
                },
            },
            _ => return Err(DecodeError::action(AC::BadType, "unknown action type")),
        };
        Ok(act)
    }
}

/// An OFLW experimenter action; `a` is positioned after the experimenter id
/// and `len` is the whole action's length.
fn parse_oflw(a: &mut Reader<'_>, len: usize) -> Result<Action, DecodeError> {
    // The shortest (8-aligned) OFLW action still holds a subtype.
    let bad_len = DecodeError::action(AC::BadLen, "OFLW action length");
    let subtype = a.u16().map_err(|_| bad_len)?;
    match subtype {
        OFLW_SUBTYPE_WORKERS => {
            if len != OFLW_WORKERS_LEN {
                return Err(bad_len);
            }
            a.skip(6)?;
            Ok(Action::SetWorkers(a.u64()?))
        }
        _ => Err(DecodeError::action(AC::BadExpType, "unknown OFLW action")),
    }
}

fn parse_set_field(a: &mut Reader<'_>, len: usize) -> Result<Action, DecodeError> {
    let set_len = DecodeError::action(AC::BadSetLen, "set-field OXM length");
    let class = a.u16().map_err(|_| set_len)?;
    let fh = a.u8().map_err(|_| set_len)?;
    let olen = usize::from(a.u8().map_err(|_| set_len)?);
    if class != OXM_CLASS_BASIC {
        return Err(DecodeError::action(AC::BadSetType, "set-field OXM class"));
    }
    let field = Field::from_oxm(fh >> 1).ok_or(DecodeError::action(
        AC::BadSetType,
        "set-field unknown field",
    ))?;
    if fh & 1 == 1 {
        return Err(DecodeError::action(
            AC::BadSetArgument,
            "set-field with a mask",
        ));
    }
    let n = oxm_size(field);
    // §7.2.5: the action is padded to the smallest multiple of 8 holding it.
    if olen != n || len != round8(8 + n) {
        return Err(set_len);
    }
    let value = a
        .bytes(n)
        .map_err(|_| set_len)?
        .iter()
        .fold(0u128, |acc, &x| (acc << 8) | u128::from(x));
    if value & !field.full_mask() != 0 {
        return Err(DecodeError::action(
            AC::BadSetArgument,
            "set-field value wider than field",
        ));
    }
    Ok(Action::SetField(field, value))
}

/// Parse a list of actions filling `buf` exactly.
pub(crate) fn parse_actions(buf: &[u8]) -> Result<Vec<Action>, DecodeError> {
    let mut r = Reader::new(buf, DecodeError::action(AC::BadLen, "action length"));
    let mut out = Vec::new();
    while !r.is_empty() {
        out.push(Action::parse(&mut r)?);
    }
    Ok(out)
}

/// Append a list of actions.
pub(crate) fn emit_actions(actions: &[Action], out: &mut Vec<u8>) -> Result<(), EncodeError> {
    actions.iter().try_for_each(|a| a.emit(out))
}

/// An OpenFlow 1.3 instruction as it appears on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Instruction {
    /// `OFPIT_GOTO_TABLE`.
    GotoTable(u8),
    /// `OFPIT_WRITE_METADATA`.
    WriteMetadata {
        /// Metadata value.
        value: u64,
        /// Which bits to write.
        mask: u64,
    },
    /// `OFPIT_WRITE_ACTIONS`.
    WriteActions(Vec<Action>),
    /// `OFPIT_APPLY_ACTIONS`.
    ApplyActions(Vec<Action>),
    /// `OFPIT_CLEAR_ACTIONS`.
    ClearActions,
    /// `OFPIT_METER`.
    Meter(u32),
    /// `OFPIT_EXPERIMENTER`.
    Experimenter {
        /// Experimenter id.
        experimenter: u32,
        /// Experimenter-defined bytes (length a multiple of 8 to encode).
        data: Vec<u8>,
    },
}

impl Instruction {
    pub(crate) fn emit(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        use instruction_type as T;
        let start = out.len();
        let ty = match self {
            Instruction::GotoTable(_) => T::GOTO_TABLE,
            Instruction::WriteMetadata { .. } => T::WRITE_METADATA,
            Instruction::WriteActions(_) => T::WRITE_ACTIONS,
            Instruction::ApplyActions(_) => T::APPLY_ACTIONS,
            Instruction::ClearActions => T::CLEAR_ACTIONS,
            Instruction::Meter(_) => T::METER,
            Instruction::Experimenter { .. } => T::EXPERIMENTER,
        };
        out.put_u16(ty);
        out.put_u16(0); // length, patched below
        match self {
            Instruction::GotoTable(t) => {
                out.put_u8(*t);
                out.put_zeros(3);
            }
            Instruction::WriteMetadata { value, mask } => {
                out.put_zeros(4);
                out.put_u64(*value);
                out.put_u64(*mask);
            }
            Instruction::WriteActions(a) | Instruction::ApplyActions(a) => {
                out.put_zeros(4);
                emit_actions(a, out)?;
            }
            Instruction::ClearActions => out.put_zeros(4),
            Instruction::Meter(m) => out.put_u32(*m),
            Instruction::Experimenter { experimenter, data } => {
                if data.len() % 8 != 0 {
                    return Err(EncodeError::Misaligned("experimenter instruction"));
                }
                out.put_u32(*experimenter);
                out.extend_from_slice(data);
            }
        }
        let len = out.len() - start;
        if len > 0xffff {
            return Err(EncodeError::TooLong(len));
        }
        out.patch_u16(start + 2, len as u16);
        Ok(())
    }

    pub(crate) fn parse(r: &mut Reader<'_>) -> Result<Instruction, DecodeError> {
        use instruction_type as T;
        let bad_len = DecodeError::instruction(IC::BadLen, "instruction length");
        let len = usize::from(r.peek_u16(2).map_err(|_| bad_len)?);
        if len < 8 || len % 8 != 0 || len > r.remaining() {
            return Err(bad_len);
        }
        let mut i = r.sub(len, bad_len)?;
        let ty = i.u16()?;
        i.skip(2)?;
        let fixed = |want: usize| if len == want { Ok(()) } else { Err(bad_len) };
        Ok(match ty {
            T::GOTO_TABLE => {
                fixed(8)?;
                Instruction::GotoTable(i.u8()?)
            }
            T::WRITE_METADATA => {
                fixed(24)?;
                i.skip(4)?;
                Instruction::WriteMetadata {
                    value: i.u64()?,
                    mask: i.u64()?,
                }
            }
            T::WRITE_ACTIONS | T::APPLY_ACTIONS => {
                i.skip(4)?;
                let acts = parse_actions(i.rest())?;
                if ty == T::WRITE_ACTIONS {
                    Instruction::WriteActions(acts)
                } else {
                    Instruction::ApplyActions(acts)
                }
            }
            T::CLEAR_ACTIONS => fixed(8).map(|_| Instruction::ClearActions)?,
            T::METER => fixed(8).and_then(|_| i.u32().map(Instruction::Meter))?,
            T::EXPERIMENTER => Instruction::Experimenter {
                experimenter: i.u32()?,
                data: i.rest().to_vec(),
            },
            _ => {
                return Err(DecodeError::instruction(
                    IC::UnknownInst,
                    "unknown instruction type",
                ))
            }
        })
    }
}

/// Parse a list of instructions filling `buf` exactly.
pub(crate) fn parse_instructions(buf: &[u8]) -> Result<Vec<Instruction>, DecodeError> {
    let mut r = Reader::new(
        buf,
        DecodeError::instruction(IC::BadLen, "instruction length"),
    );
    let mut out = Vec::new();
    while !r.is_empty() {
        out.push(Instruction::parse(&mut r)?);
    }
    Ok(out)
}

/// Append a list of instructions.
pub(crate) fn emit_instructions(
    instrs: &[Instruction],
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    instrs.iter().try_for_each(|i| i.emit(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::OfError;

    /// `offlow_workers:0x2` as it must appear on the wire.
    const WORKERS_2: [u8; 24] = [
        0xff, 0xff, 0x00, 0x18, // OFPAT_EXPERIMENTER, length 24
        0x4f, 0x46, 0x4c, 0x57, // "OFLW"
        0x00, 0x01, // subtype 1
        0, 0, 0, 0, 0, 0, // pad
        0, 0, 0, 0, 0, 0, 0, 0x02, // mask
    ];

    fn decode_err(bytes: &[u8]) -> OfError {
        parse_actions(bytes).unwrap_err().of_error()
    }

    #[test]
    fn oflw_workers_exact_bytes() {
        let mut out = Vec::new();
        emit_actions(&[Action::SetWorkers(2)], &mut out).unwrap();
        assert_eq!(out, WORKERS_2);
        assert_eq!(Action::SetWorkers(2).wire_len(), 24);
        assert_eq!(
            parse_actions(&WORKERS_2).unwrap(),
            vec![Action::SetWorkers(2)]
        );
        let a = Action::SetWorkers(u64::MAX);
        let mut out = Vec::new();
        emit_actions(std::slice::from_ref(&a), &mut out).unwrap();
        assert_eq!(parse_actions(&out).unwrap(), vec![a.clone()]);
    }

    #[test]
    fn oflw_bad_subtype_and_length() {
        let mut other = WORKERS_2;
        other[9] = 2;
        assert_eq!(decode_err(&other), OfError::BadAction(AC::BadExpType));
        // A 16-byte workers action (mask missing).
        let mut short = WORKERS_2[..16].to_vec();
        short[3] = 16;
        assert_eq!(decode_err(&short), OfError::BadAction(AC::BadLen));
        // A 32-byte one (trailing bytes).
        let mut long = WORKERS_2.to_vec();
        long.extend_from_slice(&[0; 8]);
        long[3] = 32;
        assert_eq!(decode_err(&long), OfError::BadAction(AC::BadLen));
        // 8 bytes: not even room for the subtype.
        let mut tiny = WORKERS_2[..8].to_vec();
        tiny[3] = 8;
        assert_eq!(decode_err(&tiny), OfError::BadAction(AC::BadLen));
    }

    #[test]
    fn other_experimenters_unchanged() {
        let mut bytes = WORKERS_2;
        bytes[7] = 0x58; // "OFLX"
        assert_eq!(
            parse_actions(&bytes).unwrap(),
            vec![Action::Experimenter {
                experimenter: 0x4f46_4c58,
                data: WORKERS_2[8..].to_vec(),
            }]
        );
    }
}
