//! Errors: a typed [`PipelineError`] for every refused flow-mod, each mapped
//! onto the OpenFlow 1.3.5 error type and code (§7.4.4, `enum ofp_error_type`
//! and the per-type code enums) so the OpenFlow layer can emit `OFPT_ERROR`
//! without re-deriving the reason.

use offlow_flow::Field;

use crate::port::PortNo;

/// `enum ofp_error_type` (OpenFlow 1.3.5 §A.4.4).
#[allow(missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum ErrorType {
    HelloFailed = 0,
    BadRequest = 1,
    BadAction = 2,
    BadInstruction = 3,
    BadMatch = 4,
    FlowModFailed = 5,
    GroupModFailed = 6,
    PortModFailed = 7,
    TableModFailed = 8,
    QueueOpFailed = 9,
    SwitchConfigFailed = 10,
    RoleRequestFailed = 11,
    MeterModFailed = 12,
    TableFeaturesFailed = 13,
    Experimenter = 0xffff,
}

/// `enum ofp_bad_action_code` (`OFPBAC_*`).
#[allow(missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum BadActionCode {
    BadType = 0,
    BadLen = 1,
    BadExperimenter = 2,
    BadExpType = 3,
    BadOutPort = 4,
    BadArgument = 5,
    Eperm = 6,
    TooMany = 7,
    BadQueue = 8,
    BadOutGroup = 9,
    /// "Action can't apply for this match, or Set-Field missing prerequisite."
    MatchInconsistent = 10,
    UnsupportedOrder = 11,
    BadTag = 12,
    BadSetType = 13,
    BadSetLen = 14,
    BadSetArgument = 15,
}

/// `enum ofp_bad_instruction_code` (`OFPBIC_*`).
#[allow(missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum BadInstructionCode {
    UnknownInst = 0,
    UnsupInst = 1,
    BadTableId = 2,
    UnsupMetadata = 3,
    UnsupMetadataMask = 4,
    BadExperimenter = 5,
    BadExpType = 6,
    BadLen = 7,
    Eperm = 8,
    DupInst = 9,
}

/// `enum ofp_bad_match_code` (`OFPBMC_*`).
#[allow(missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum BadMatchCode {
    BadType = 0,
    BadLen = 1,
    BadTag = 2,
    BadDlAddrMask = 3,
    BadNwAddrMask = 4,
    BadWildcards = 5,
    BadField = 6,
    BadValue = 7,
    BadMask = 8,
    BadPrereq = 9,
    DupField = 10,
    Eperm = 11,
}

/// `enum ofp_flow_mod_failed_code` (`OFPFMFC_*`).
#[allow(missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum FlowModFailedCode {
    Unknown = 0,
    TableFull = 1,
    BadTableId = 2,
    Overlap = 3,
    Eperm = 4,
    BadTimeout = 5,
    BadCommand = 6,
    BadFlags = 7,
}

/// An OpenFlow error type together with its code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OfErrorCode {
    /// `OFPET_BAD_ACTION`.
    BadAction(BadActionCode),
    /// `OFPET_BAD_INSTRUCTION`.
    BadInstruction(BadInstructionCode),
    /// `OFPET_BAD_MATCH`.
    BadMatch(BadMatchCode),
    /// `OFPET_FLOW_MOD_FAILED`.
    FlowModFailed(FlowModFailedCode),
}

impl OfErrorCode {
    /// The error type.
    pub fn error_type(self) -> ErrorType {
        match self {
            OfErrorCode::BadAction(_) => ErrorType::BadAction,
            OfErrorCode::BadInstruction(_) => ErrorType::BadInstruction,
            OfErrorCode::BadMatch(_) => ErrorType::BadMatch,
            OfErrorCode::FlowModFailed(_) => ErrorType::FlowModFailed,
        }
    }

    /// The code within the type.
    pub fn code(self) -> u16 {
        match self {
            OfErrorCode::BadAction(c) => c as u16,
            OfErrorCode::BadInstruction(c) => c as u16,
            OfErrorCode::BadMatch(c) => c as u16,
            OfErrorCode::FlowModFailed(c) => c as u16,
        }
    }

    /// `(type, code)` as carried in `struct ofp_error_msg`.
    pub fn wire(self) -> (u16, u16) {
        (self.error_type() as u16, self.code())
    }
}

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
        code: OfErrorCode,
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
    pub fn of_error(&self) -> OfErrorCode {
        use OfErrorCode as E;
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
