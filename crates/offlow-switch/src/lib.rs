//! offlow-switch: a running OpenFlow 1.3 switch, as a library.
//!
//! What: everything between a resolved [`SwitchConfig`] and a switch that
//! forwards frames and answers controllers.
//! - [`dataplane`] opens the ports (AF_PACKET, AF_XDP, capture files;
//!   re-opened when their interface comes back: `dataplane/ports.rs`) and
//!   runs the packet worker threads over `offlow-datapath`'s workers,
//!   publishing their counters (`dataplane/stats.rs`).
//! - [`port_sink::PortSink`] is where a worker's outputs go (also what
//!   `offlow bench datapath` measures).
//! - [`adapter`] is the seam between `offlow-openflow`'s sans-IO
//!   [`offlow_openflow::Switch`] trait and the datapath's single writer
//!   (`Control`): flow-mods, barriers and counter syncs as tickets,
//!   packet-out, port-mod (`adapter/port.rs`), statistics
//!   (`adapter/stats.rs`), table compiles, expiry.
//! - [`buffers`] keeps packet-in frames for a later PACKET_OUT,
//!   [`flow_removed`] builds FLOW_REMOVED, [`standalone`] is the fail-mode
//!   learning switch.
//! - [`control`] is the tokio loop that drives it all: listeners,
//!   reconnecting controllers, packet-ins, link polling, expiry.
//!
//! The `offlow` binary keeps the command line, the configuration file and
//! the wiring; an embedder (the demo, a test) calls [`run_blocking`].
//!
//! Data flows one way: `config` and `port_sink` ← `dataplane` ← `adapter`
//! ← `standalone` ← `control`; no two modules import each other.
//!
//! Invariants: the adapter is the pipeline's only writer, and it lives on
//! the control loop's one thread; the barrier guarantee and exact counters
//! are the datapath's (`offlow_datapath::Control::commit`,
//! `Control::sync_counters`), which the adapter calls before the replies
//! that depend on them.
//!
//! Thread-safety: the control side is single-threaded (`Rc`, `RefCell`);
//! packet worker threads meet it only through `Control`, a bounded
//! packet-in channel and their statistics slots.
#![warn(missing_docs)]

pub mod adapter;
pub mod buffers;
pub mod config;
pub mod control;
pub mod dataplane;
pub mod flow_removed;
pub mod offload;
pub mod port_sink;
pub mod standalone;

pub use adapter::{DatapathSwitch, SwitchPort};
pub use config::{
    Endpoint, FailMode, IdlePoll, InitialFlow, InitialGroup, Offload, OffloadOptions, PortConfig,
    PortKind, Receive, RxRing, SwitchConfig,
};
pub use control::{run, run_blocking, Running, EXPIRY_EVERY, LINK_POLL};
