//! Ports: where frames enter and leave the switch.
//!
//! - [`AfPacketPort`]: a Linux interface through an `AF_PACKET` socket with
//!   a memory-mapped receive ring, no copy on receive ([`RxRing`]: TPACKET_V2
//!   frames by default, each handed over and woken for as soon as it is
//!   written; TPACKET_V3 blocks, handed over when full or after a 1 ms
//!   retire timer; or, experimental, a frames ring that spills into a
//!   blocks ring when full) and batched transmit (`sendmmsg`, qdisc
//!   bypassed). Several sockets on one interface form a fanout group with a
//!   symmetric flow hash, so each worker thread has its own socket per port.
//! - [`AfXdpPort`]: one receive queue of a Linux interface through an
//!   `AF_XDP` socket (UMEM, fill/completion rings, need_wakeup), fed by a
//!   hand-assembled XDP redirect program ([`XdpProgram`]) attached through
//!   a BPF link, native mode with a generic-mode fallback. Raw system
//!   calls, no libbpf.
//! - [`MemPort`]: an in-memory port for tests, fed and drained through a
//!   [`MemPeer`]; [`DiscardPort`]: transmits into nowhere (benchmarks).
//! - [`pcap::PcapPort`]: replay a capture file as input, write what is
//!   transmitted to a capture file ([`pcap::PcapReader`] and
//!   [`pcap::PcapWriter`] also stand alone).
//! - [`rtnl`]: an interface's own kernel counters (`rx_dropped`: frames
//!   lost before any socket of the switch saw them).
//! - [`netns`]: run code (open sockets) inside a named network namespace.
//! - [`csum`]: finish the partial TCP/UDP checksums that veth peers with
//!   checksum offload hand over (`TP_STATUS_CSUMNOTREADY`).
//!
//! # Contract of a port
//! [`Port::recv`] never blocks: it hands each waiting frame, as a borrowed
//! slice valid only during the callback, to the caller, with [`RxMeta`]
//! (a VLAN tag the kernel stripped, whether the checksum is partial). The
//! caller copies what it keeps. [`Port::send`] copies a frame into the
//! port's transmit batch; [`Port::flush`] hands the batch to the kernel.
//! A full batch or a refused send is a counted drop, never a block.
//!
//! # Invariants
//! - No allocation per frame: receive reads the mapped ring in place,
//!   transmit copies into a preallocated arena.
//! - Nothing panics on frame contents or on what the kernel reports: every
//!   offset or address read from a ring is bounds-checked against the
//!   mapped block or UMEM.
//!
//! # Thread-safety
//! A port is `Send` and belongs to one thread (one worker). Sharing an
//! interface between workers means one port per worker in the same fanout
//! group ([`AfPacketConfig::fanout_group`]).
#![warn(missing_docs)]
// Exports are what other crates use; the rest is `pub(crate)`. (Crate
// level until the lint can be a workspace one: see the root Cargo.toml.)

pub mod afpacket;
pub mod afxdp;
pub mod csum;
pub mod mem;
pub mod netns;
pub mod pcap;
pub mod rtnl;
mod sys;

use std::io;
use std::os::fd::RawFd;

pub use afpacket::{AfPacketConfig, AfPacketPort, AfPacketTx, LinkState, RxRing};
pub use afxdp::{
    AfXdpConfig, AfXdpCounters, AfXdpPort, XdpAttach, XdpMode, XdpProgram, XdpStatistics, XskBind,
};
pub use mem::{DiscardPort, MemPeer, MemPort};

/// What the kernel said about a received frame beyond its bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RxMeta {
    /// A VLAN tag the kernel (or the NIC) removed from the frame:
    /// `(tpid, tci)`. The caller re-inserts it behind the MAC addresses so
    /// the frame is the one that was on the wire.
    pub vlan: Option<(u16, u16)>,
    /// The TCP/UDP checksum is partial (a local sender offloaded it):
    /// finish it with [`csum::finish_partial`] before forwarding.
    pub csum_partial: bool,
    /// Length of the frame on the wire (may exceed the slice if truncated).
    pub wire_len: u32,
}

/// Counters of one port as one thread sees it (sum over threads for the
/// port's totals).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Frames received and handed to the caller.
    pub rx_packets: u64,
    /// Their bytes.
    pub rx_bytes: u64,
    /// Frames the kernel dropped because the ring was full (from
    /// `PACKET_STATISTICS`).
    pub rx_dropped: u64,
    /// Frames received truncated (longer than a ring frame) or otherwise
    /// unusable; not handed to the caller.
    pub rx_errors: u64,
    /// Frames handed to the kernel for transmission.
    pub tx_packets: u64,
    /// Their bytes.
    pub tx_bytes: u64,
    /// Frames dropped on transmit: batch full, too long, or refused by the
    /// kernel (queue full, interface down).
    pub tx_dropped: u64,
}

impl PortStats {
    /// Field-wise sum.
    pub fn add(&mut self, o: &PortStats) {
        self.rx_packets += o.rx_packets;
        self.rx_bytes += o.rx_bytes;
        self.rx_dropped += o.rx_dropped;
        self.rx_errors += o.rx_errors;
        self.tx_packets += o.tx_packets;
        self.tx_bytes += o.tx_bytes;
        self.tx_dropped += o.tx_dropped;
    }
}

/// A port one thread receives from and transmits on.
pub trait Port: Send {
    /// The interface (or test) name.
    fn name(&self) -> &str;

    /// Hand up to `max` waiting frames to `on_frame`, without blocking.
    /// Returns how many were handed over.
    fn recv(&mut self, max: usize, on_frame: &mut dyn FnMut(&[u8], RxMeta)) -> io::Result<usize>;

    /// Copy `frame` into the transmit batch. False when it was dropped
    /// (batch full or frame too long; counted in `tx_dropped`).
    fn send(&mut self, frame: &[u8]) -> bool;

    /// Transmit the batch. Frames the kernel refuses are counted as
    /// dropped; an error is returned only for a failure of the port itself.
    fn flush(&mut self) -> io::Result<()>;

    /// Frames were handed over but not yet taken by the kernel (an AF_XDP
    /// copy-mode ring the kernel refused to drain, `ENOBUFS`): flush again
    /// later, even without new frames.
    fn tx_outstanding(&self) -> bool {
        false
    }

    /// A descriptor that polls readable when frames wait (`None`: never
    /// sleep on this port, poll it).
    fn poll_fd(&self) -> Option<RawFd>;

    /// Every descriptor to poll for this port (a port over several sockets
    /// has one each); by default [`Port::poll_fd`].
    fn poll_fds(&self, out: &mut Vec<RawFd>) {
        out.extend(self.poll_fd());
    }

    /// This thread's counters for the port.
    fn stats(&mut self) -> PortStats;
}
