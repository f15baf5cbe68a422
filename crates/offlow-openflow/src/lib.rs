//! offlow-openflow: a sans-IO OpenFlow 1.3 (1.3.5, ONF TS-023) codec.
//!
//! What: bytes in, typed messages out, and back. [`frame_len`] splits a
//! stream into messages, [`decode`] turns one message into a [`Message`],
//! [`encode`] writes one. Matches are OXM lists ([`OxmMatch`]) convertible to
//! and from [`offlow_flow::Match`]; actions and instructions are the wire's
//! ([`Action`], [`Instruction`]). A message that fails
//! to decode yields a [`DecodeError`] carrying the OpenFlow error the switch
//! must answer with ([`error_for`], [`error_reply`]). No sockets, threads or
//! clocks. [`conn`] holds the sans-IO connection state machine
//! ([`Connection`]) that answers a controller through the [`Switch`] trait;
//! the tokio loop sits on top. [`ofctl`] reads and prints the ovs-ofctl flow
//! syntax in these same wire terms (flow lines to [`FlowMod`]).
//!
//! # Coverage
//!
//! | message | body |
//! |---|---|
//! | HELLO | typed ([`Hello`]: version bitmap; unknown elements kept raw) |
//! | ERROR | typed ([`ErrorMsg`], every 1.3.5 type/code as [`OfError`], experimenter errors) |
//! | ECHO_REQUEST / ECHO_REPLY, EXPERIMENTER | typed (payload bytes) |
//! | FEATURES, GET/SET_CONFIG, BARRIER, ROLE, GET/SET_ASYNC, PORT_MOD, TABLE_MOD | typed |
//! | PACKET_IN, FLOW_REMOVED, PORT_STATUS, PACKET_OUT, FLOW_MOD, GROUP_MOD | typed (OXM match, actions, instructions, buckets) |
//! | QUEUE_GET_CONFIG_REQUEST / REPLY | typed; queue properties raw |
//! | MULTIPART DESC, FLOW, AGGREGATE, TABLE, PORT_STATS, QUEUE, PORT_DESC, EXPERIMENTER | typed |
//! | MULTIPART TABLE_FEATURES | typed; properties raw TLVs (validated lengths) |
//! | MULTIPART GROUP, GROUP_DESC, GROUP_FEATURES, METER, METER_CONFIG, METER_FEATURES | typed |
//! | METER_MOD | typed ([`MeterMod`], bands [`MeterBand`], see [`meter`]) |
//!
//! Invariants:
//! - Decoding never panics, never reads past the message's length field or
//!   the buffer, and validates every nested length (OXM TLVs, match padding,
//!   actions and instructions at least 8 and a multiple of 8, buckets, meter
//!   bands, stats entries, table-feature properties, hello elements).
//! - Round trip: for every message `m` that [`decode`] returns,
//!   `decode(encode(m)) == m`; for every message we encode, decoding and
//!   re-encoding gives the same bytes. Padding contents are ignored on decode
//!   and written as zeros.
//! - Matches keep their wire order (so arbitrary inputs round-trip byte for
//!   byte); [`OxmMatch::from_match`] emits the canonical order (ascending OXM
//!   field number, see [`oxm`]).
//!
//! # The seam with the pipeline
//!
//! This crate owns every OpenFlow code: the error types and codes
//! ([`OfError`] and the per-type enums), port numbers and reserved ports
//! ([`PortNo`], [`port`]), flow-mod commands and flags, packet-in and
//! port-status reasons. It does not depend on `offlow-pipeline`; the
//! dependency runs the other way, for two reasons:
//! - the pipeline's validation says exactly which OpenFlow error each refusal
//!   is (`PipelineError::of_error` returns an [`OfError`] built from these
//!   enums), and that mapping is tested next to the validation raising it;
//!   a separate pipeline-domain error enum would need a second, parallel
//!   mapping kept in step by hand;
//! - the conversions between wire and pipeline types need both, and live in
//!   one place on the pipeline's side (`offlow_pipeline::convert`).
//!
//! So the [`Switch`] trait takes wire messages ([`FlowMod`] for flow-mods),
//! and the switch converts. The OXM prerequisite check the decoder applies is
//! `offlow_flow::prereq`, shared with the pipeline's set-field validation.
//!
//! Thread-safety: every type is plain data (`Send + Sync`); every function is
//! pure.
#![warn(missing_docs)]
// Exports are what other crates use; the rest is `pub(crate)`. (Crate
// level until the lint can be a workspace one: see the root Cargo.toml.)

pub mod action;
pub mod conn;
pub mod error;
pub mod message;
pub mod meter;
pub mod multipart;
pub mod ofctl;
pub mod oxm;
pub mod port;
mod reader;

pub use action::{Action, Instruction, OFLW_EXPERIMENTER, OFLW_SUBTYPE_WORKERS};
pub use conn::{
    AsyncOutcome, CloseReason, ConnConfig, ConnId, ConnStats, Connection, ControllerRole, Need,
    Roles, Switch, Ticket, DEFAULT_ASYNC, DEFAULT_MISS_SEND_LEN,
};
pub use error::{
    error_for, error_reply, BadActionCode, BadInstructionCode, BadMatchCode, BadRequestCode,
    DecodeError, EncodeError, ErrorType, FlowModFailedCode, GroupModFailedCode, HelloFailedCode,
    MeterModFailedCode, OfError, PortModFailedCode, QueueOpFailedCode, RoleRequestFailedCode,
    SwitchConfigFailedCode, TableFeaturesFailedCode, TableModFailedCode, ERROR_DATA_LEN,
};
pub use message::{
    decode, encode, encode_to_vec, frame_len, msg_type, packet_in_reason, port_reason, AsyncConfig,
    Body, Bucket, ErrorMsg, Experimenter, FixedStr, FlowMod, FlowRemoved, GroupMod, Header, Hello,
    HelloElement, Message, PacketIn, PacketOut, PacketQueue, Port, PortMod, PortStatus,
    QueueGetConfigReply, Role, SwitchConfig, SwitchFeatures, TableMod, HEADER_LEN, OFP_NO_BUFFER,
    OFP_VERSION,
};
pub use meter::{MeterBand, MeterBandKind, MeterMod};
pub use multipart::{
    BucketCounter, Desc, FlowStats, FlowStatsRequest, GroupDesc, GroupFeatures, GroupStats,
    MeterBandStats, MeterConfig, MeterFeatures, MeterStats, MultipartReply, MultipartReplyBody,
    MultipartRequest, MultipartRequestBody, PortStats, QueueStats, TableFeatureProp, TableFeatures,
    TableStats,
};
pub use oxm::{Oxm, OxmMatch};
pub use port::PortNo;

// Messages cross from the I/O task to the control loop: keep them sendable.
const _: () = {
    const fn sendable<T: Send + Sync>() {}
    sendable::<Message>();
    sendable::<DecodeError>();
};
