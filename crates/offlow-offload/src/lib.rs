//! offlow-offload: the offload tier. Hot microflows are served by a place
//! beside the CPU (an XDP program in the kernel today; a NIC's flow director
//! or a SmartNIC behind the same interface), everything else by the
//! userspace fast path.
//!
//! # What
//! - [`OffloadKey`]: the exact-match key of a microflow of the offloadable
//!   class (Ethernet, ≤ 1 VLAN tag, option-less unfragmented IPv4, TCP/UDP/
//!   ICMP or a protocol without ports); it is the [`offlow_flow::FlowKey`]
//!   of those frames, losslessly ([`key`]).
//! - [`OffloadMatch`]: the frames an entry serves, its key under an
//!   [`OffloadMask`] (a megaflow: every microflow that agrees on the bits
//!   the pipeline's decision looks at), or one microflow ([`mask`]).
//! - [`OffloadProgram`] and [`compile`]: an entry's rewrites and verdict in
//!   a fixed order of stages, compiled exactly from the pipeline's final
//!   action list or refused with a [`Refusal`] ([`program`]).
//! - [`Capabilities`]: what a backend declares (match fields, masks, action
//!   kinds, room, counters, ports), checked by [`Capabilities::admits`]
//!   before anything reaches the backend ([`caps`]).
//! - [`OffloadBackend`]: install, replace, remove, read counters
//!   ([`backend`]); [`ModelBackend`], a software model with configurable
//!   capabilities ([`model`]).
//! - [`Placement`]: which flows go down — heavy hitters by measured load
//!   with hysteresis, pins, refusals remembered until the rules change
//!   ([`placement`]), fed by each worker's [`Sampler`] ([`sample`]).
//! - [`TunnelPort`]: a tunnel port (GRE or VXLAN over an underlay port) a
//!   backend decapsulates from and encapsulates to, and what it supports of
//!   each ([`TunnelSupport`], in the capabilities) ([`tunnel`]).
//! - [`xdp::XdpBackend`]: the backend in the kernel, an XDP program on the
//!   switch's ports that serves entries before frames reach the AF_XDP or
//!   AF_PACKET sockets, with exact per-CPU counters and a grace period after
//!   every change ([`xdp`]). It serves exact entries and masked ones with
//!   up to [`xdp::MAX_MASKS`] distinct masks at once: a frame's key is
//!   looked up exactly first, then under each mask in use (one hash lookup
//!   more per mask, only on an exact miss). It finishes *partial* TCP/UDP checksums (a
//!   Linux sender with transmit checksum offload, e.g. a veth peer, leaves
//!   the pseudo-header sum in the field for the NIC) before serving a
//!   frame, as the userspace path finishes them on receipt: XDP does not
//!   see the sender's CHECKSUM_PARTIAL, so the program recognises the
//!   field's value, sums the segment in the kernel and then applies the
//!   entry's incremental updates (`bpf/offload.bpf.c` explains the choice
//!   and why a full checksum that looks partial is harmless); a segment
//!   too long to sum there goes up untouched (`up_csum_long`). The same
//!   backend runs the tier at TC ingress instead ([`xdp::Hook::Tc`]: the
//!   same maps and lookup on the socket buffer the kernel built, which a
//!   redirect hands on as is; no tunnels or CPU steering, AF_PACKET ports
//!   only, declared in its capabilities).
//!
//! # Invariants
//! - Never a silent partial offload: an entry the backend cannot serve
//!   completely, or past its room, is an error and the flow stays in
//!   software.
//! - An offloaded entry serves only frames whose key, under the entry's
//!   mask (all of it for an exact entry), equals the entry's key, so it
//!   makes the decision the pipeline would make (for a masked entry: given
//!   a mask that holds every bit the decision looks at, [`mask`]).
//! - A backend's `remove`/`install` returns only once no frame can use the
//!   old program; counters are cumulative and a removal returns the final
//!   ones, so the switch can fold them into OpenFlow counters exactly.
//!
//! # Thread-safety
//! Keys, programs and capabilities are plain data. A backend is `Send` and
//! driven by one thread (the switch's control side); its data path runs
//! elsewhere (in the kernel) and shares nothing with this process but the
//! maps.
#![warn(missing_docs)]

pub mod backend;
pub mod caps;
pub mod key;
pub mod mask;
pub mod model;
pub mod placement;
pub mod program;
pub mod sample;
pub mod tunnel;
pub mod xdp;

pub use backend::{EntryCounters, OffloadBackend, OffloadError};
pub use caps::{ActionKinds, Capabilities, CLASS_FIELDS};
pub use key::{OffloadKey, VlanTag};
pub use mask::{OffloadMask, OffloadMatch};
pub use model::ModelBackend;
pub use placement::{Pin, Placement, PlacementConfig, Plan, Tier};
pub use program::{compile, OffloadProgram, TtlOp, Verdict, VlanOp};
pub use sample::{Sampler, SAMPLE_SLOTS};
pub use tunnel::{TunnelPort, TunnelSupport};

use offlow_flow::Field;

/// Why a flow is not offloaded. Each is a reason the flow stays in
/// software, shown by `offlow trace`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The microflow is outside the offloadable class.
    #[error("outside the offloadable class: {0}")]
    OutsideClass(&'static str),
    /// An action the stages cannot express.
    #[error("action not offloadable: {0}")]
    Unsupported(&'static str),
    /// Set-field of a field the stages do not rewrite.
    #[error("set-field of {} not offloadable", .0.name())]
    Field(Field),
    /// The backend lacks these action kinds.
    #[error("backend lacks actions: {0}")]
    Actions(ActionKinds),
    /// The backend does not match this field.
    #[error("backend does not match {}", .0.name())]
    MatchField(Field),
    /// The backend is not attached to this port.
    #[error("backend not on port {0}")]
    Port(u32),
    /// The backend cannot serve this tunnel port this way (the reason).
    #[error("tunnel port {0}: {1}")]
    Tunnel(u32, &'static str),
    /// The backend keeps no counters.
    #[error("backend keeps no counters")]
    NoCounters,
    /// The backend is full.
    #[error("backend full ({0} entries)")]
    Full(usize),
    /// The backend matches exactly only (no masked entries).
    #[error("backend matches exactly only")]
    Masked,
    /// The backend holds no further distinct mask (its limit).
    #[error("backend holds {0} masks at most")]
    MaskRoom(usize),
}
