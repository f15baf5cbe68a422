//! OpenFlow 1.3.5 error types and codes (§7.4.4, `enum ofp_error_type` and
//! the per-type code enums), the codec's [`DecodeError`], and its mapping
//! onto the error reply a switch must send ([`error_for`], [`error_reply`]).
//!
//! Every code enum lives here (the pipeline reports its refusals with these
//! same enums, see `offlow_pipeline::PipelineError::of_error`).
//! [`OfError`] is the union of every (type, code) pair, with an `Unknown`
//! variant so that any error message received round-trips.
//!
//! Thread-safety: plain `Copy` data.

macro_rules! wire_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $var:ident = $val:expr,)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u16)]
        pub enum $name { $($(#[$vm])* $var = $val,)* }
        impl $name {
            /// Every code, in wire order.
            pub const ALL: &'static [$name] = &[$($name::$var,)*];
            /// The code with wire value `v`, if defined.
            pub fn from_wire(v: u16) -> Option<Self> {
                Self::ALL.iter().copied().find(|c| *c as u16 == v)
            }
        }
    };
}

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

wire_enum! {
    /// `enum ofp_hello_failed_code` (`OFPHFC_*`).
    #[allow(missing_docs)]
    HelloFailedCode { Incompatible = 0, Eperm = 1, }
}

wire_enum! {
    /// `enum ofp_bad_request_code` (`OFPBRC_*`).
    #[allow(missing_docs)]
    BadRequestCode {
        BadVersion = 0, BadType = 1, BadMultipart = 2, BadExperimenter = 3, BadExpType = 4,
        Eperm = 5, BadLen = 6, BufferEmpty = 7, BufferUnknown = 8, BadTableId = 9,
        IsSlave = 10, BadPort = 11, BadPacket = 12, MultipartBufferOverflow = 13,
    }
}

wire_enum! {
    /// `enum ofp_bad_action_code` (`OFPBAC_*`).
    #[allow(missing_docs)]
    BadActionCode {
        BadType = 0, BadLen = 1, BadExperimenter = 2, BadExpType = 3, BadOutPort = 4,
        BadArgument = 5, Eperm = 6, TooMany = 7, BadQueue = 8, BadOutGroup = 9,
        /// "Action can't apply for this match, or Set-Field missing prerequisite."
        MatchInconsistent = 10,
        UnsupportedOrder = 11, BadTag = 12, BadSetType = 13, BadSetLen = 14,
        BadSetArgument = 15,
    }
}

wire_enum! {
    /// `enum ofp_bad_instruction_code` (`OFPBIC_*`).
    #[allow(missing_docs)]
    BadInstructionCode {
        UnknownInst = 0, UnsupInst = 1, BadTableId = 2, UnsupMetadata = 3,
        UnsupMetadataMask = 4, BadExperimenter = 5, BadExpType = 6, BadLen = 7, Eperm = 8,
        DupInst = 9,
    }
}

wire_enum! {
    /// `enum ofp_bad_match_code` (`OFPBMC_*`).
    #[allow(missing_docs)]
    BadMatchCode {
        BadType = 0, BadLen = 1, BadTag = 2, BadDlAddrMask = 3, BadNwAddrMask = 4,
        BadWildcards = 5, BadField = 6, BadValue = 7, BadMask = 8, BadPrereq = 9,
        DupField = 10, Eperm = 11,
    }
}

wire_enum! {
    /// `enum ofp_flow_mod_failed_code` (`OFPFMFC_*`).
    #[allow(missing_docs)]
    FlowModFailedCode {
        Unknown = 0, TableFull = 1, BadTableId = 2, Overlap = 3, Eperm = 4, BadTimeout = 5,
        BadCommand = 6, BadFlags = 7,
    }
}

wire_enum! {
    /// `enum ofp_group_mod_failed_code` (`OFPGMFC_*`).
    #[allow(missing_docs)]
    GroupModFailedCode {
        GroupExists = 0, InvalidGroup = 1, WeightUnsupported = 2, OutOfGroups = 3,
        OutOfBuckets = 4, ChainingUnsupported = 5, WatchUnsupported = 6, Loop = 7,
        UnknownGroup = 8, ChainedGroup = 9, BadType = 10, BadCommand = 11, BadBucket = 12,
        BadWatch = 13, Eperm = 14,
    }
}

wire_enum! {
    /// `enum ofp_port_mod_failed_code` (`OFPPMFC_*`).
    #[allow(missing_docs)]
    PortModFailedCode { BadPort = 0, BadHwAddr = 1, BadConfig = 2, BadAdvertise = 3, Eperm = 4, }
}

wire_enum! {
    /// `enum ofp_table_mod_failed_code` (`OFPTMFC_*`).
    #[allow(missing_docs)]
    TableModFailedCode { BadTable = 0, BadConfig = 1, Eperm = 2, }
}

wire_enum! {
    /// `enum ofp_queue_op_failed_code` (`OFPQOFC_*`).
    #[allow(missing_docs)]
    QueueOpFailedCode { BadPort = 0, BadQueue = 1, Eperm = 2, }
}

wire_enum! {
    /// `enum ofp_switch_config_failed_code` (`OFPSCFC_*`).
    #[allow(missing_docs)]
    SwitchConfigFailedCode { BadFlags = 0, BadLen = 1, Eperm = 2, }
}

wire_enum! {
    /// `enum ofp_role_request_failed_code` (`OFPRRFC_*`).
    #[allow(missing_docs)]
    RoleRequestFailedCode { Stale = 0, Unsup = 1, BadRole = 2, }
}

wire_enum! {
    /// `enum ofp_meter_mod_failed_code` (`OFPMMFC_*`).
    #[allow(missing_docs)]
    MeterModFailedCode {
        Unknown = 0, MeterExists = 1, InvalidMeter = 2, UnknownMeter = 3, BadCommand = 4,
        BadFlags = 5, BadRate = 6, BadBurst = 7, BadBand = 8, BadBandValue = 9,
        OutOfMeters = 10, OutOfBands = 11,
    }
}

wire_enum! {
    /// `enum ofp_table_features_failed_code` (`OFPTFFC_*`).
    #[allow(missing_docs)]
    TableFeaturesFailedCode {
        BadTable = 0, BadMetadata = 1, BadType = 2, BadLen = 3, BadArgument = 4, Eperm = 5,
    }
}

/// Any OpenFlow 1.3 error (type, code) pair except the experimenter type
/// (`0xffff`), which has its own message layout
/// ([`crate::ErrorMsg::Experimenter`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OfError {
    /// `OFPET_HELLO_FAILED`.
    HelloFailed(HelloFailedCode),
    /// `OFPET_BAD_REQUEST`.
    BadRequest(BadRequestCode),
    /// `OFPET_BAD_ACTION`.
    BadAction(BadActionCode),
    /// `OFPET_BAD_INSTRUCTION`.
    BadInstruction(BadInstructionCode),
    /// `OFPET_BAD_MATCH`.
    BadMatch(BadMatchCode),
    /// `OFPET_FLOW_MOD_FAILED`.
    FlowModFailed(FlowModFailedCode),
    /// `OFPET_GROUP_MOD_FAILED`.
    GroupModFailed(GroupModFailedCode),
    /// `OFPET_PORT_MOD_FAILED`.
    PortModFailed(PortModFailedCode),
    /// `OFPET_TABLE_MOD_FAILED`.
    TableModFailed(TableModFailedCode),
    /// `OFPET_QUEUE_OP_FAILED`.
    QueueOpFailed(QueueOpFailedCode),
    /// `OFPET_SWITCH_CONFIG_FAILED`.
    SwitchConfigFailed(SwitchConfigFailedCode),
    /// `OFPET_ROLE_REQUEST_FAILED`.
    RoleRequestFailed(RoleRequestFailedCode),
    /// `OFPET_METER_MOD_FAILED`.
    MeterModFailed(MeterModFailedCode),
    /// `OFPET_TABLE_FEATURES_FAILED`.
    TableFeaturesFailed(TableFeaturesFailedCode),
    /// A pair this version of the spec does not define (kept so that any
    /// received error message round-trips). Never has `err_type == 0xffff`.
    Unknown {
        /// Wire type.
        err_type: u16,
        /// Wire code.
        code: u16,
    },
}

impl OfError {
    /// Classify a wire pair. `err_type` must not be `0xffff` (experimenter);
    /// such a pair maps to `Unknown` all the same.
    pub fn from_wire(err_type: u16, code: u16) -> OfError {
        use OfError as E;
        let known = match err_type {
            0 => HelloFailedCode::from_wire(code).map(E::HelloFailed),
            1 => BadRequestCode::from_wire(code).map(E::BadRequest),
            2 => BadActionCode::from_wire(code).map(E::BadAction),
            3 => BadInstructionCode::from_wire(code).map(E::BadInstruction),
            4 => BadMatchCode::from_wire(code).map(E::BadMatch),
            5 => FlowModFailedCode::from_wire(code).map(E::FlowModFailed),
            6 => GroupModFailedCode::from_wire(code).map(E::GroupModFailed),
            7 => PortModFailedCode::from_wire(code).map(E::PortModFailed),
            8 => TableModFailedCode::from_wire(code).map(E::TableModFailed),
            9 => QueueOpFailedCode::from_wire(code).map(E::QueueOpFailed),
            10 => SwitchConfigFailedCode::from_wire(code).map(E::SwitchConfigFailed),
            11 => RoleRequestFailedCode::from_wire(code).map(E::RoleRequestFailed),
            12 => MeterModFailedCode::from_wire(code).map(E::MeterModFailed),
            13 => TableFeaturesFailedCode::from_wire(code).map(E::TableFeaturesFailed),
            _ => None,
        };
        known.unwrap_or(E::Unknown { err_type, code })
    }

    /// `(type, code)` as carried in `struct ofp_error_msg`.
    pub fn wire(self) -> (u16, u16) {
        use OfError as E;
        match self {
            E::HelloFailed(c) => (ErrorType::HelloFailed as u16, c as u16),
            E::BadRequest(c) => (ErrorType::BadRequest as u16, c as u16),
            E::BadAction(c) => (ErrorType::BadAction as u16, c as u16),
            E::BadInstruction(c) => (ErrorType::BadInstruction as u16, c as u16),
            E::BadMatch(c) => (ErrorType::BadMatch as u16, c as u16),
            E::FlowModFailed(c) => (ErrorType::FlowModFailed as u16, c as u16),
            E::GroupModFailed(c) => (ErrorType::GroupModFailed as u16, c as u16),
            E::PortModFailed(c) => (ErrorType::PortModFailed as u16, c as u16),
            E::TableModFailed(c) => (ErrorType::TableModFailed as u16, c as u16),
            E::QueueOpFailed(c) => (ErrorType::QueueOpFailed as u16, c as u16),
            E::SwitchConfigFailed(c) => (ErrorType::SwitchConfigFailed as u16, c as u16),
            E::RoleRequestFailed(c) => (ErrorType::RoleRequestFailed as u16, c as u16),
            E::MeterModFailed(c) => (ErrorType::MeterModFailed as u16, c as u16),
            E::TableFeaturesFailed(c) => (ErrorType::TableFeaturesFailed as u16, c as u16),
            E::Unknown { err_type, code } => (err_type, code),
        }
    }
}

/// Why a byte string is not a valid OpenFlow 1.3 message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Fewer bytes than the header (or its length field) says; not a protocol
    /// violation by itself on a stream, where more bytes may follow.
    #[error("truncated: need {need} bytes, have {have}")]
    Truncated {
        /// Bytes the message needs.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// The message violates the spec; `error` is the reply it deserves.
    #[error("{reason} ({error:?})")]
    Invalid {
        /// The OpenFlow error to report.
        error: OfError,
        /// What was wrong, for logs.
        reason: &'static str,
    },
}

impl DecodeError {
    pub(crate) const fn req(code: BadRequestCode, reason: &'static str) -> Self {
        DecodeError::Invalid {
            error: OfError::BadRequest(code),
            reason,
        }
    }
    pub(crate) const fn bad_len(reason: &'static str) -> Self {
        Self::req(BadRequestCode::BadLen, reason)
    }
    pub(crate) const fn matching(code: BadMatchCode, reason: &'static str) -> Self {
        DecodeError::Invalid {
            error: OfError::BadMatch(code),
            reason,
        }
    }
    pub(crate) const fn action(code: BadActionCode, reason: &'static str) -> Self {
        DecodeError::Invalid {
            error: OfError::BadAction(code),
            reason,
        }
    }
    pub(crate) const fn instruction(code: BadInstructionCode, reason: &'static str) -> Self {
        DecodeError::Invalid {
            error: OfError::BadInstruction(code),
            reason,
        }
    }

    /// The OpenFlow error this maps onto. A truncated message is
    /// `OFPBRC_BAD_LEN` (only meaningful once the stream has ended or the
    /// header's length field itself is inconsistent).
    pub fn of_error(&self) -> OfError {
        match *self {
            DecodeError::Truncated { .. } => OfError::BadRequest(BadRequestCode::BadLen),
            DecodeError::Invalid { error, .. } => error,
        }
    }
}

/// The `(type, code)` pair of the error reply `err` deserves.
pub fn error_for(err: &DecodeError) -> (u16, u16) {
    err.of_error().wire()
}

/// Bytes of the offending request echoed in an error reply. §7.4.4: "Unless
/// specified otherwise, the data field contains at least 64 bytes of the
/// failed request that caused the error message to be generated, if the
/// failed request is shorter than 64 bytes it should be the full request
/// without any padding." We send exactly the first 64 (or all, if shorter).
pub const ERROR_DATA_LEN: usize = 64;

/// The `OFPT_ERROR` message answering a request that failed to decode with
/// `err`. `request` is the offending message's bytes (or as many as were
/// received); its xid, when present, is reused.
pub fn error_reply(err: &DecodeError, request: &[u8]) -> crate::Message {
    let xid = match request.get(4..8) {
        Some(b) => u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
        None => 0,
    };
    // Never echo past the request's own length field (the buffer may hold
    // the start of the next message).
    let declared = match request.get(2..4) {
        Some(b) => usize::from(u16::from_be_bytes([b[0], b[1]])).max(8),
        None => request.len(),
    };
    let n = request.len().min(declared).min(ERROR_DATA_LEN);
    crate::Message {
        version: crate::OFP_VERSION,
        xid,
        body: crate::Body::Error(crate::ErrorMsg::Standard {
            error: err.of_error(),
            data: request[..n].to_vec(),
        }),
    }
}

/// Why a message cannot be encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// The message would exceed 65535 bytes (the header length is a u16).
    #[error("message of {0} bytes exceeds the 65535-byte limit")]
    TooLong(usize),
    /// A variable-length payload that the wire format requires to be a
    /// multiple of 8 bytes (experimenter action or instruction data) is not.
    #[error("{0}: length not a multiple of 8")]
    Misaligned(&'static str),
    /// A value cannot be represented (e.g. a set-field value wider than its
    /// field, or a standard error carrying the experimenter type).
    #[error("not encodable: {0}")]
    Invalid(&'static str),
}
