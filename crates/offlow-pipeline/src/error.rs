//! Errors: a typed [`PipelineError`] for every refused flow-mod, each mapped
//! onto the OpenFlow 1.3.5 error type and code (§7.4.4, `enum ofp_error_type`
//! and the per-type code enums, which the codec owns: [`OfError`]) so the
//! OpenFlow layer can emit `OFPT_ERROR` without re-deriving the reason. The
//! mapping lives here, next to the validation that raises each variant, and
//! is tested there.

use offlow_flow::Field;
use offlow_openflow::{
    BadActionCode, BadInstructionCode, BadMatchCode, FlowModFailedCode, OfError,
};

use crate::port::PortNo;

/// Why the pipeline refused a flow-mod.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PipelineError {
    /// The flow-mod names a table that does not exist (or `OFPTT_ALL` where
    /// only delete accepts it).
    #[error("flow-mod: table {0} does not exist here")]
    BadTableId(u8),
    /// Goto-Table to the same or an earlier table (§5.1: "the next table
    /// must have a table ID greater than the current one").
    #[error("goto-table {to} from table {from}: can only go to a later table (§5.1)")]
    GotoBackward {
        /// Table of the rule.
        from: u8,
        /// Requested table.
        to: u8,
    },
    /// Goto-Table to a table beyond the last one.
    #[error("goto-table {0}: no such table")]
    GotoMissingTable(u8),
    /// Two instructions of the same type (§5.9: at most one of each type).
    #[error("duplicate {0} instruction (§5.9)")]
    DuplicateInstruction(&'static str),
    /// A feature this switch does not (yet) implement.
    #[error("unsupported: {what}")]
    Unsupported {
        /// What was asked for.
        what: &'static str,
        /// The OpenFlow error to report.
        code: OfError,
    },
    /// Output to a port that is not a valid destination in a flow entry.
    #[error("output to invalid port {0:?}")]
    BadOutPort(PortNo),
    /// An action argument out of range (e.g. push-VLAN with a non-VLAN ethertype).
    #[error("bad action argument: {0}")]
    BadArgument(&'static str),
    /// Set-field on a field this switch does not allow to be written.
    #[error("set-field on {} is not supported", .0.name())]
    FieldNotSettable(Field),
    /// Set-field value does not fit the field (or lacks OFPVID_PRESENT).
    #[error("set-field {}: value {value:#x} invalid", .field.name())]
    BadSetValue {
        /// The field.
        field: Field,
        /// The value given.
        value: u128,
    },
    /// The rule's match (as modified by earlier actions) does not establish
    /// what the action needs, e.g. set tcp_dst without ip_proto=6 (§7.2.5).
    #[error("{action} requires {need} in the match")]
    MatchInconsistent {
        /// The action.
        action: &'static str,
        /// The missing prerequisite.
        need: &'static str,
    },
    /// A match field whose prerequisites the match lacks (§7.2.3.6).
    #[error("match on {} lacks its prerequisite", .0.name())]
    BadPrerequisite(Field),
    /// ADD with CHECK_OVERLAP found an overlapping rule of equal priority (§6.4).
    #[error("flow-mod overlaps an existing rule of the same priority")]
    Overlap,
    /// Every rule id is in use.
    #[error("table full: no free rule id")]
    TableFull,
}

impl PipelineError {
    /// The OpenFlow error this maps onto.
    pub fn of_error(&self) -> OfError {
        use OfError as E;
        match self {
            PipelineError::BadTableId(_) => E::FlowModFailed(FlowModFailedCode::BadTableId),
            PipelineError::GotoBackward { .. } | PipelineError::GotoMissingTable(_) => {
                E::BadInstruction(BadInstructionCode::BadTableId)
            }
            PipelineError::DuplicateInstruction(_) => {
                E::BadInstruction(BadInstructionCode::DupInst)
            }
            PipelineError::Unsupported { code, .. } => *code,
            PipelineError::BadOutPort(_) => E::BadAction(BadActionCode::BadOutPort),
            PipelineError::BadArgument(_) => E::BadAction(BadActionCode::BadArgument),
            PipelineError::FieldNotSettable(_) => E::BadAction(BadActionCode::BadSetType),
            PipelineError::BadSetValue { .. } => E::BadAction(BadActionCode::BadSetArgument),
            PipelineError::MatchInconsistent { .. } => {
                E::BadAction(BadActionCode::MatchInconsistent)
            }
            PipelineError::BadPrerequisite(_) => E::BadMatch(BadMatchCode::BadPrereq),
            PipelineError::Overlap => E::FlowModFailed(FlowModFailedCode::Overlap),
            PipelineError::TableFull => E::FlowModFailed(FlowModFailedCode::TableFull),
        }
    }
}
