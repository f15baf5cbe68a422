//! offlow-datapath: the per-worker data path. This part holds action
//! execution on frames and the microflow cache.
//!
//! # What
//! - [`PacketBuf`]: one frame in a buffer allocated once per pool slot (or
//!   borrowed from a ring), with headroom so a VLAN push moves only the 12
//!   MAC bytes, never the payload.
//! - [`execute()`]: applies a final action list (the pipeline's
//!   [`offlow_pipeline::Action`]s) to a frame in place: set-field on every
//!   field with frame bytes, TTL, VLAN push/pop, MPLS TTL and label fields,
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
//! No shared state: [`execute()`] is a function of its arguments; a
//! [`PacketBuf`], an [`ExecStats`] and a [`MicroflowCache`] (`Send`, not
//! `Sync`) belong to one worker.
#![warn(missing_docs)]

pub mod buf;
pub mod execute;
pub mod microflow;

pub use buf::{FrameTooLong, PacketBuf, DEFAULT_HEADROOM};
pub use execute::{
    crc32c, execute, sctp_checksum, ExecOutcome, ExecStats, OutputMeta, OutputSink, PortInfo,
    Verdict,
};
pub use microflow::{
    flow_hash, InsertOutcome, InsertPolicy, MicroflowCache, MicroflowStats, MAX_BATCH, WAYS,
};
