//! offlow-datapath: the per-worker data path: workers, the microflow cache,
//! the Action Table with fine-grained invalidation, and action execution on
//! frames.
//!
//! # What
//! - [`PacketBuf`]: one frame in a buffer allocated once per pool slot (or
//!   borrowed from a ring), with headroom so a VLAN push moves only the 12
//!   MAC bytes, never the payload.
//! - [`execute()`]: applies a final action list (the pipeline's
//!   [`offlow_pipeline::Action`]s) to a frame in place: set-field on every
//!   field with frame bytes, TTL, VLAN, MPLS and PBB push/pop, MPLS TTL and
//!   label fields, the PBB I-SID,
//!   set-queue and output (including IN_PORT, FLOOD/ALL expansion,
//!   CONTROLLER truncation, LOCAL, TABLE), keeping every checksum valid
//!   (RFC 1624 incremental updates; SCTP CRC32c recomputed) and the header
//!   [`offlow_flow::Layout`] pointing at the right bytes.
//! - [`OutputSink`]: where outputs go. The sink borrows the frame at the
//!   moment of each output; `OutputMeta::final_view` tells it when those
//!   bytes are final, so the single-output case needs no copy.
//! - [`MicroflowCache`]: the per-worker exact-match cache on the full
//!   [`offlow_flow::FlowKey`], set-associative with one signature line per
//!   bucket, batch lookups with prefetching, and an insertion policy
//!   ([`InsertPolicy`]) that keeps heavy hitters when flows outnumber entries.
//! - [`ActionTable`]: a worker's interned pipeline decisions (one per
//!   distinct path through the tables), referenced from the cache by
//!   generation-checked [`ActionRef`]s and freed precisely by the rules (or
//!   table misses) they depended on; a rule ADD instead leaves the
//!   decisions it may shadow live with the new rule's match as a filter,
//!   re-checked once per microflow ([`CachedRef`]), so only keys the new
//!   rule matches are re-resolved.
//! - Steering: a decision carrying [`offlow_pipeline::Action::SetWorkers`]
//!   is processed only by the workers in its mask; another worker hands the
//!   unmodified frame and its metadata ([`SteeredFrame`]) to
//!   [`OutputSink::steer`] before executing or crediting anything (see
//!   [`worker`]); a configured [`SteeringTable`] gives a
//!   mask to the packets it matches the same way.
//! - [`Control`] and [`Worker`]: the single writer publishes flow-mods
//!   (left-right, readers never block) with an invalidation record per
//!   version; a worker processes a batch in one read section, catching up on
//!   invalidations first, so [`Control::commit`] returning is the barrier
//!   guarantee: no packet after it uses a changed or removed action. See
//!   [`worker`] for the argument; the writer is in [`control`], what the
//!   two share in `state.rs` (crate-private).
//! - Meters: the executor runs a decision's `Action::Meter` through the
//!   meter table of the version the worker reads
//!   (`offlow_pipeline::meter`), at the time the worker read once per batch
//!   ([`clock::now_ns`], or the time given to [`Worker::process_at`]).
//!
//! # Invariants
//! - Nothing here panics on frame contents, layouts or action lists
//!   (fuzz-style property tests): every access is bounds-checked, and an
//!   access the layout puts out of range is counted and skipped.
//! - Nothing allocates per packet.
//! - Every skipped action and dropped packet bumps a named counter in
//!   [`ExecStats`] (design invariant 5).
//!
//! # Thread-safety
//! [`execute()`] is a function of its arguments; a [`Worker`] (with its
//! [`PacketBuf`]s, [`ExecStats`], [`MicroflowCache`] and [`ActionTable`]) is
//! `Send` and belongs to one thread. The only state workers share is the
//! published pipeline (read-only) and its relaxed atomic counters, credited
//! once per distinct decision per batch. [`Control`] is the single writer.
#![warn(missing_docs)]
// Exports are what other crates use; the rest is `pub(crate)`. (Crate
// level until the lint can be a workspace one: see the root Cargo.toml.)

pub mod action_table;
pub mod buf;
pub mod clock;
pub mod control;
pub mod counting_sink;
pub mod execute;
pub mod microflow;
mod state;
pub mod steer;
pub mod worker;

pub use action_table::{
    preserves_key, workers_of, ActionEntry, ActionRef, ActionTable, ActionTableStats, CachedRef,
    Dep, HitCheck, RuleCredit, Shape, FILTER_RING, MAX_FILTERS,
};
pub use buf::{copy_frame, FrameTooLong, PacketBuf, DEFAULT_HEADROOM};
pub use control::{Control, PIPELINE_COPIES};
pub use counting_sink::CountingSink;
pub use execute::{
    controller_len, crc32c, execute, execute_prepared, last_frame_write, sctp_checksum,
    ExecOutcome, ExecStats, OutputMeta, OutputSink, PortInfo, Prepared, SteeredFrame, Verdict,
};
pub use microflow::{
    flow_hash, flow_hash_ext, InsertOutcome, InsertPolicy, MicroflowCache, MicroflowStats,
    MAX_BATCH, WAYS,
};
pub use steer::{SteerRule, SteeringTable};
pub use worker::{Worker, WorkerConfig, WorkerStats, DIRTY_PER_BATCH, FLUSH_EVERY_BATCHES};
