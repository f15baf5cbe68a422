//! offlow-pipeline: the OpenFlow 1.3 multi-table pipeline.
//!
//! What: flow tables 0..n (n <= 255), each a priority classifier
//! ([`TableClassifier`]) over flow entries carrying instructions, a cookie,
//! flags, timeouts and counters; flow-mod processing (ADD, MODIFY\[_STRICT\],
//! DELETE\[_STRICT\], OpenFlow 1.3.5 §6.4) with validation that maps onto
//! OpenFlow error codes; and [`Pipeline::lookup`], which resolves a
//! [`FlowKey`](offlow_flow::FlowKey) to the final ordered action list, the
//! outcome and the rules passed, following §5.1–§5.10 (goto-table, metadata,
//! apply-actions on a working key, the action set and its execution order).
//! Idle and hard timeouts (§5.5) expire through the same op machinery
//! ([`Pipeline::prepare_expiry`] with a writer-side [`ExpiryTracker`]),
//! reporting each removed entry with its `ofp_flow_removed_reason`.
//! [`group`] holds the group table (§5.6): GROUP_MOD validation, liveness
//! and bucket choice. Groups live in the pipeline beside the flow tables
//! ([`Pipeline::prepare_group_mod`], `PipelineOp::Group`), so a version
//! holds flows and groups that agree; a lookup leaves `Action::Group` in
//! the final action list and the executor takes the buckets per packet
//! (a select group's choice hangs on the packet's flow hash).
//! [`meter`] holds the meter table (§5.7) the same way
//! ([`Pipeline::prepare_meter_mod`], `PipelineOp::Meter`): a flow's Meter
//! instruction becomes a pipeline-internal `Action::Meter` at the head of
//! its table's actions, and the executor meters each packet through the
//! version's table (token buckets in atomics, shared by every worker).
//!
//! Sans-IO: no sockets, threads or clocks; callers pass time in.
//!
//! OpenFlow codes come from the codec (`offlow-openflow`, which does not
//! depend on this crate): a refused flow-mod is a [`PipelineError`] whose
//! [`of_error`](PipelineError::of_error) is the codec's `OfError`, and
//! [`convert`] holds every conversion between the codec's wire types and
//! this crate's (see the codec's crate docs for why the seam runs this way).
//!
//! Invariants:
//! - Goto-table only goes forward (validated), so a lookup visits at most
//!   one rule per table and always terminates.
//! - Every installed entry passed validation; updates are resolved into a
//!   [`PipelineOp`] by [`Pipeline::prepare`] and applied infallibly by
//!   [`Pipeline::apply`], so a replayed op yields identical copies.
//! - Rule ids are unique across the pipeline; an id removed may be reused
//!   only after 2^32 further allocations.
//!
//! The working key ([`working_key`]) follows the frame through Apply-Actions
//! without the frame: pop-MPLS and pop-PBB reveal the payload fields the
//! parser stored for them (`offlow_flow::key::encap`). Known
//! approximations (the key models one VLAN tag, two MPLS labels and no
//! TTL): popping a VLAN tag the parser did not record leaves the key
//! untagged; popping to a third label, or to a tagged PBB customer frame,
//! leaves those fields unknown (the [`working_key`] docs list every case);
//! TTL expiry after dec-TTL is decided by the executor on the frame
//! (packet-in reason `OFPR_INVALID_TTL`).
//!
//! Thread-safety: `Pipeline` is `Send + Sync`. Lookups and counter credits
//! take `&self` (counters are relaxed atomics shared by all copies); updates
//! take `&mut self`, a single writer. Designed to sit in a left-right pair:
//! make the second copy with [`Pipeline::replica`] (which shares the match
//! indexes only the writer reads), then `apply` every op to both copies in
//! the same order.
#![warn(missing_docs)]
// Exports are what other crates use; the rest is `pub(crate)`. (Crate
// level until the lint can be a workspace one: see the root Cargo.toml.)

pub mod action;
pub mod convert;
pub mod entry;
pub mod error;
pub mod expiry;
pub mod group;
mod index;
pub mod meter;
pub mod pipeline;
pub mod port;
pub mod validate;
pub mod working_key;

pub use action::{Action, ActionSet, Instruction, Program};
pub use convert::ToPipeline;
pub use entry::{FlowCounters, FlowEntry, FlowMatch, FlowModFlags, TableCounters};
pub use error::PipelineError;
pub use expiry::{ExpiryTracker, RemovedFlow, RemovedReason};
pub use offlow_classifier::{BuildInput, Built, PortRange, Priority, RuleId};
pub use pipeline::{
    FlowFilter, FlowMod, FlowModCommand, FlowModEffect, FlowStats, Outcome, PacketInOrigin,
    PathStep, Pipeline, PipelineOp, Resolution, ShadowReport, TableClassifier, TableStats,
    MAX_TABLES, SHADOW_LIMIT,
};
pub use port::{PortNo, CONTROLLER_NO_BUFFER, GROUP_ANY, TABLE_ALL};
pub use validate::{check_match_prerequisites, is_settable};
pub use working_key::{key_after, WorkingKey};

// The datapath shares one pipeline version between workers: keep it
// `Send + Sync` (a compile error here means a non-thread-safe field crept in).
const _: () = {
    const fn shareable<T: Send + Sync + Clone>() {}
    shareable::<Pipeline>();
    shareable::<PipelineOp>();
};
