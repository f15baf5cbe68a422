//! A Linux interface queue as a port through an `AF_XDP` socket, with the
//! tiny XDP program that steers frames to it. Raw system calls only (no
//! libbpf/libxdp).
//!
//! # The XDP program ([`XdpProgram`])
//! Five hand-assembled eBPF instructions (six slots: a 64-bit immediate
//! load takes two), the equivalent of
//! `return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);`: every
//! frame received on queue *q* goes to the socket in slot *q* of an
//! `XSKMAP`; a queue without a socket passes frames to the kernel stack
//! (the helper returns its flags' low bits as the verdict on a missing
//! entry: Linux 5.3+). The program sees the frame as it was on the wire:
//! VLAN tags in place, so [`RxMeta::vlan`] is always `None`, and no
//! checksum state, so [`RxMeta::csum_partial`] is always false. Hence a
//! known limit: a frame a *local* sender handed over with an offloaded
//! (partial) TCP/UDP checksum, e.g. from a container behind a veth,
//! arrives with that checksum unfinished and nothing says so (AF_PACKET
//! flags it). Turn transmit checksum offload off on such senders
//! (`ethtool -K IF tx off`); the tests check both facts.
//!
//! It is attached through a BPF *link* (`BPF_LINK_CREATE`, Linux 5.9+): the
//! link lives exactly as long as its file descriptor, so closing it (or the
//! process dying) detaches the program and nothing is left on the
//! interface. Native (driver) mode is tried first, then generic (SKB)
//! mode; [`XdpProgram::mode`] says which one took.
//!
//! # The socket ([`AfXdpPort`])
//! One socket per (interface, queue). Its UMEM is one anonymous mapping of
//! `frame_count` frames of `frame_size` bytes, split in two fixed halves:
//! - **RX frames** (the lower half) circulate between the fill ring, the
//!   kernel and the RX ring. [`Port::recv`] lends each received frame to the
//!   callback in place, then gives it straight back through the fill ring.
//!   The fill ring holds the whole half, so handing a frame back never
//!   fails.
//! - **TX frames** (the upper half) sit on a free list; [`Port::send`] copies
//!   a frame into one and writes a TX descriptor (not yet visible to the
//!   kernel); [`Port::flush`] publishes the descriptors, wakes the kernel
//!   when needed and takes finished frames back from the completion ring.
//!
//! Binding asks for zero-copy and lets the kernel fall back to copy mode
//! (no `XDP_ZEROCOPY`/`XDP_COPY` flag: the kernel's own fallback, free), or
//! forces one of them ([`XskBind`]). veth has no zero-copy support: copy
//! mode there. `XDP_USE_NEED_WAKEUP` is always set: the kernel then only
//! wants a system call when a ring's `NEED_WAKEUP` flag says so, except for
//! copy-mode transmit, where the `sendto` kick *is* the transmission (the
//! kernel sends up to 32 frames per call, `TX_BATCH_SIZE` in
//! net/xdp/xsk.c) and so is always made while descriptors are pending.
//!
//! # Ring ordering
//! Each ring is a single-producer single-consumer queue of free-running
//! `u32` indices shared with the kernel, which uses
//! `smp_load_acquire`/`smp_store_release` on them (net/xdp/xsk_queue.h).
//! We pair with it:
//! - *producing* (fill, TX): write descriptors (and TX frame bytes), then
//!   `producer.store(Release)`, so the kernel, loading the producer with
//!   acquire, sees them; the consumer index is loaded with `Acquire` so the
//!   kernel's reads of slots it released are finished before we overwrite
//!   them.
//! - *consuming* (RX, completion): `producer.load(Acquire)` before reading
//!   descriptors and frame bytes (the kernel wrote them before its release
//!   store); `consumer.store(Release)` after we are done with them, so the
//!   kernel cannot reuse a slot or frame we are still reading.
//!
//! # Invariants
//! - Every descriptor the kernel hands back (RX address and length,
//!   completion address) is checked against the UMEM and against the half
//!   it belongs to before use; a bad one is counted (`rx_errors`,
//!   [`AfXdpCounters::bad_completion`]) and its frame is not reused.
//! - A frame is in exactly one place: fill ring/kernel/RX ring (RX half),
//!   or free list/TX ring/kernel/completion ring (TX half). The fill and
//!   completion rings are at least as large as their half, so they never
//!   overflow.
//! - No allocation per frame; no system call per frame.
//! - Resources are released in order: rings, then the socket (which leaves
//!   the XSKMAP), then the port's share of the program, then the UMEM
//!   (field order).
//!
//! # veth (Linux 6.x, drivers/net/veth.c; see tests/afxdp.rs)
//! Native mode works and needs a program only on the receiving end: the
//! peer's transmit then feeds this end's NAPI ring, where the program runs.
//! A program (or GRO) on the peer is needed only for frames XDP
//! *redirects into* a veth (`ndo_xdp_xmit`), not for AF_XDP copy-mode
//! transmit, which hands the device an `sk_buff`. No zero-copy.
//!
//! # Thread-safety
//! `Send`, not `Sync`: one thread owns the socket and its rings. An
//! [`XdpProgram`] is `Send + Sync` and may be shared (`Arc`) by the ports
//! of several queues of one interface.
//!
//! # Files
//! - `program.rs`: [`XdpProgram`], the redirect (and pass) program, its
//!   `XSKMAP` and the `bpf(2)` loader and link;
//! - `channels.rs`: the interface's receive queues (ethtool channels);
//! - `umem.rs`: the UMEM mapping and its bounds checks;
//! - `ring.rs`: one mapped ring and its index protocol (the ordering
//!   above);
//! - `socket.rs`: [`AfXdpPort`], one socket with its UMEM and four rings;
//! - `queues.rs`: [`AfXdpQueues`], one thread's sockets of an interface.
//!
//! The dependencies go one way: `socket` uses `program`, `channels`,
//! `umem` and `ring`; `queues` uses `socket`; the others use none of them.

// The essay links to them.
#[cfg(doc)]
use crate::{Port, RxMeta};

mod channels;
mod program;
mod queues;
mod ring;
mod socket;
mod umem;

pub use channels::{active_queue_count, queue_count};
pub use program::{XdpAttach, XdpMode, XdpProgram};
pub use queues::AfXdpQueues;
pub use socket::{AfXdpConfig, AfXdpCounters, AfXdpPort, XdpStatistics, XskBind};
