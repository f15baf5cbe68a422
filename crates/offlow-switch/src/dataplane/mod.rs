//! The data plane: packet worker threads moving frames between the ports
//! and the datapath's [`Worker`]s.
//!
//! Each worker thread owns one port per configured interface — AF_PACKET
//! ([`offlow_io::AfPacketPort`]), AF_XDP or a capture file, the last two with one
//! worker only — (with several workers, the AF_PACKET ports of one
//! interface form a fanout group:
//! the kernel's symmetric flow hash picks the worker, so both directions of
//! a flow meet the same microflow cache) and a [`Worker`]. A round of the
//! loop takes up to [`BATCH`] frames from each port, copies them into
//! reused [`PacketBuf`]s (re-inserting a VLAN tag the kernel stripped and
//! finishing partial checksums, so what is forwarded is what was on the
//! wire), runs them through the worker, queues the outputs on the ports'
//! transmit batches and flushes those. An idle worker answers counter
//! syncs ([`Worker::poll`]) every empty round.
//!
//! Idle policy ([`IdlePoll`], issue 23: low delay at every load): an empty
//! round costs no system call on AF_PACKET (a status word in the ring),
//! AF_XDP (the RX ring's producer index) or the inbox (an atomic flag), so
//! a worker that just forwarded something keeps polling for a bounded
//! *time* (`IdlePoll::Adaptive { spin }`, default
//! [`crate::config::DEFAULT_IDLE_SPIN`]) before it sleeps in `poll(2)` on
//! its ports and inbox for at most [`IDLE_SLEEP`]: the reply to a frame it
//! forwarded, or the next frame of a burst, is taken without a wake-up
//! (tens of µs of scheduler latency on a VM). Under load the worker never
//! reaches the sleep. `IdlePoll::Busy` does not sleep, like Open vSwitch's
//! PMD threads: each worker keeps a core at 100% busy even with no
//! traffic; every `BUSY_CHECK_EVERY` (20 ms) it polls its descriptors without
//! waiting, to notice failed ports, and reads how long it waited for a
//! core since the last check (`run_delay` in `/proc/thread-self/schedstat`).
//! Past [`CONTENDED_WAIT`] the core is not its own: to the scheduler a
//! busy poller is a CPU hog that shares its core with other runnable work
//! tick by tick, so a frame arriving while it is switched out waits
//! milliseconds, where a worker woken from `poll(2)` preempts that work
//! within tens of µs (issue 23's journal, 2026-11-26 09:20). So for
//! [`CONTENDED_HOLD`] the busy worker behaves like the adaptive one (spin,
//! then sleep), then polls busily again and looks anew. Counters are
//! credited once per idle period, when the spin ends.
//!
//! Frames for the controller (Output:CONTROLLER) are copied into a bounded
//! channel to the control thread; when it is full they are counted and
//! dropped ([`DataplaneStats::drop_packet_in_backlog`]), never waited for.
//!
//! Steering (the `offlow_workers` action): worker `i` is datapath worker
//! index `i`. A decision whose worker mask leaves out the receiving worker
//! is handed over before execution ([`offlow_datapath::OutputSink::steer`]): the sink picks
//! one worker among the mask's bits that name running workers (bits past
//! the worker count are ignored; a mask naming none is processed where it
//! arrived) by the packet's flow hash, so a flow stays on one worker, and
//! copies the frame into a per-destination staging batch. After the round's
//! ports, each non-empty staging batch is appended to its destination's
//! `Inbox` under the inbox's mutex (one lock per destination per round
//! with steered traffic, none without); an inbox holds at most
//! [`INBOX_FRAMES`] frames, the excess is dropped and counted
//! ([`DataplaneStats::drop_steer_inbox_full`]). Every round a worker checks its
//! inbox's flag (one relaxed-cost atomic load; the mutex is taken only when
//! it is set), swaps the batch out and processes its frames with their
//! ingress ports; a sleeping worker is woken by its inbox's eventfd.
//! Frames taken from an inbox are never steered again (a rule changed in
//! between cannot make a frame bounce). Why a mutex and not a lock-free
//! ring: steering is per batch, not per packet, the buffers (one byte
//! arena and an index per batch) are swapped, not allocated, and unsteered
//! traffic never touches it.
//!
//! Ports that come back: an interface that is missing at start, or that
//! is deleted while the switch runs, leaves its port's slot in every
//! worker (an `AbsentPort` placeholder, or the dead socket bound to the
//! old interface). When the control side sees an interface of that name
//! (again) it calls [`Dataplane::reopen`], which bumps the port's
//! generation and then a shared epoch (`Generations`). Every round a
//! worker compares the epoch with the one it last saw (one atomic load;
//! no lock, no syscall); on a change, between batches, it opens a fresh
//! socket for every port whose generation moved, in the ports' namespace,
//! and rebuilds its poll set. AF_PACKET sockets of a new generation join a
//! fanout group of their own (`fanout_id`): the kernel binds a group to
//! the device of its first member and refuses (`EINVAL`) a socket on
//! another device while the old group lives, and it lives until every
//! worker has closed its old socket, which workers do at their own pace.
//! A failed re-open is counted ([`DataplaneStats::reopen_failed`]),
//! reported once until a re-open succeeds, recorded in the generations
//! (so the control side bumps again at its next link poll:
//! [`Dataplane::retry_failed_reopen`]) and leaves a placeholder until
//! then; nothing retries in a loop. A re-opened socket's counters
//! start at zero, so each worker keeps a per-port base (the sum of the
//! sockets it closed) and publishes base + current: port counters never go
//! backwards.
//!
//! Invariants: no allocation per packet except packet-in copies; no lock
//! on the packet path of unsteered traffic (statistics are published to a
//! per-worker mutex every [`PUBLISH_EVERY`], and before a worker answers a
//! counter sync, so a statistics reply includes every frame handled before
//! its request; only the control thread also takes that mutex; steered
//! frames cost one inbox lock per destination per round).
//!
//! Thread-safety: a worker thread owns its ports, buffers and [`Worker`];
//! it meets the control thread only through the datapath's `Control`
//! (read side), the packet-in channel, its stats slot, the stop flag and
//! the port generations (atomics, written by the control side only), and
//! the other workers only through the inboxes.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context;
use offlow_datapath::{PacketBuf, PortInfo, SteeringTable, Worker, DEFAULT_HEADROOM};
use offlow_io::{csum, Port, PortStats, RxMeta};
use offlow_offload::{OffloadKey, Sampler};
use offlow_openflow::port::{OFPPC_NO_FWD, OFPPC_NO_PACKET_IN, OFPPC_NO_RECV, OFPPC_PORT_DOWN};

use crate::config::{IdlePoll, PortKind, Receive};
pub use crate::port_sink::{PacketInFrame, INBOX_FRAMES};
use crate::port_sink::{PacketInQueue, PortSink, SteerBatch};
use tokio::sync::mpsc;
use tracing::{info, warn};

mod ports;
mod stats;
mod tunnels;

use ports::{external_share, fanout_id, open_port, xdp_program, AbsentPort, Generations, XdpShare};
pub use ports::{DataPort, ExternalXsk};
pub use stats::{DataplaneStats, StatsHandle};

/// Bytes of an Ethernet header (two addresses and the EtherType).
const ETH_HLEN: usize = 14;
/// Frames taken from one port per round.
pub const BATCH: usize = 32;
/// Largest frame a worker buffer holds (beyond the headroom).
pub const MAX_FRAME: usize = 2048;
/// Longest idle sleep (bounds the latency of stop and counter syncs).
pub const IDLE_SLEEP: Duration = Duration::from_millis(2);
/// How often a busy-polling worker (which does not sleep in `poll(2)`)
/// still polls its descriptors without waiting: to notice failed ports and
/// reset its inbox's eventfd; and reads how long it waited for its core.
pub const BUSY_CHECK_EVERY: Duration = Duration::from_millis(20);
/// Time spent waiting for a core within one [`BUSY_CHECK_EVERY`] window
/// (5% of it) above which a busy-polling worker counts its core as shared.
pub const CONTENDED_WAIT: Duration = Duration::from_millis(1);
/// How long a busy-polling worker whose core is shared sleeps between
/// frames (as `IdlePoll::Adaptive` does) before it tries busy polling
/// again: long, so that finding out again (being switched out once while
/// spinning) costs at most one delayed frame per hold.
pub const CONTENDED_HOLD: Duration = Duration::from_secs(1);
/// How often a worker publishes its statistics.
pub const PUBLISH_EVERY: Duration = Duration::from_millis(20);
/// Packet-ins queued towards the control thread before drops.
pub const PACKET_IN_QUEUE: usize = 1024;

/// One worker's queue of frames steered to it by the others.
#[derive(Debug)]
#[repr(align(128))]
struct Inbox {
    /// Set (under the lock) when frames were added; read without the
    /// lock every round so an empty inbox costs one atomic load.
    queued: AtomicBool,
    batch: Mutex<SteerBatch>,
    /// An eventfd the owner polls with its ports: a sleeping worker wakes
    /// as soon as frames are delivered instead of after its idle sleep
    /// (under load, waiting let inboxes fill and frames drop).
    wake: std::os::fd::OwnedFd,
}

impl Inbox {
    fn new() -> std::io::Result<Inbox> {
        // SAFETY: eventfd takes no pointers; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Inbox {
            queued: AtomicBool::new(false),
            batch: Mutex::new(SteerBatch::default()),
            // SAFETY: a fresh descriptor nobody else owns.
            wake: unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) },
        })
    }

    /// Wake the owner (a no-op if it is awake; the counter just grows).
    fn ring(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our eventfd. A full
        // counter (EAGAIN) means a wake-up is already pending.
        unsafe {
            libc::write(
                std::os::fd::AsRawFd::as_raw_fd(&self.wake),
                (&one as *const u64).cast(),
                8,
            );
        }
    }

    /// Reset the wake-up counter.
    fn clear(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads at most 8 bytes into a live u64; EAGAIN (nothing
        // pending) is fine.
        unsafe {
            libc::read(
                std::os::fd::AsRawFd::as_raw_fd(&self.wake),
                (&mut v as *mut u64).cast(),
                8,
            );
        }
    }
}

/// The running worker threads.
pub struct Dataplane {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    slots: Vec<Arc<Mutex<DataplaneStats>>>,
    ports: Arc<[DataPort]>,
    gens: Arc<Generations>,
    /// The workers' inboxes (their eventfds wake them).
    inboxes: Arc<[Inbox]>,
    /// Per worker: flow samples published for the offload tier.
    samples: Vec<SampleSlot>,
}

/// How to start the data plane.
pub struct DataplaneConfig<'a> {
    /// The ports, in configuration order.
    pub ports: &'a [DataPort],
    /// Namespace to open them in.
    pub netns: Option<&'a str>,
    /// One datapath worker per thread.
    pub workers: Vec<Worker>,
    /// Cores to pin thread i to (`cores[i % len]`); empty: not pinned.
    pub cores: &'a [usize],
    /// Where packet-ins go.
    pub packet_in: mpsc::Sender<PacketInFrame>,
    /// The packet-in reasons anyone may want now, bit `1 << reason`
    /// (`OFPR_NO_MATCH`, `OFPR_ACTION`, `OFPR_INVALID_TTL`): the union of
    /// the connections' async masks for their roles, or what standalone
    /// learning takes. A frame sent to CONTROLLER for a reason nobody wants
    /// is counted (`drop_packet_in_unwanted`), never copied.
    pub packet_in_wanted: Arc<AtomicU32>,
    /// The configured steering table (`[[steer]]`), given to every worker.
    pub steering: SteeringTable,
    /// Sample one received frame in this many for the offload tier's
    /// placement (`None`: no offload tier, no sampling).
    pub sample_every: Option<u32>,
    /// Per port (configuration order): the offload tier's socket map when
    /// its XDP program serves an AF_XDP port (empty: none does).
    pub external_xsks: Vec<Option<ExternalXsk>>,
    /// The AF_PACKET ring layout and what an idle worker does.
    pub receive: Receive,
    /// AF_PACKET ports take only frames with this mark: the switch sets it
    /// when the offload tier runs at TC ingress (its program marks the
    /// frames it sends up, `offlow_offload::xdp::TC_UP_MARK`; a packet
    /// socket sees every frame before TC). Not a user setting.
    pub af_packet_mark: Option<u32>,
}

/// Most flow samples a worker leaves for the control side between two
/// collections (the rest are dropped: the heaviest come first anyway).
const MAX_SAMPLES: usize = 4096;

/// A worker's published flow samples: (key, estimated packets).
type SampleSlot = Arc<Mutex<Vec<(OffloadKey, u64)>>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Statistics snapshots: a panicked writer leaves a usable snapshot.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Dataplane {
    /// Open every port for every worker and start the threads.
    pub fn start(cfg: DataplaneConfig<'_>) -> anyhow::Result<Dataplane> {
        let n_workers = cfg.workers.len();
        // One fanout group per interface, distinct per process.
        let base = (std::process::id() as u16).wrapping_mul(31);
        let fanout_base = (n_workers > 1).then_some(base);
        let n_ports = cfg.ports.len();
        let tunnel_tx = tunnels::tunnel_outputs(cfg.ports)?;
        let gens = Arc::new(Generations::new(n_ports));
        // One program per AF_XDP port, shared by every worker's sockets
        // (kept in `gens` for re-opens at generation 0).
        for (i, p) in cfg.ports.iter().enumerate() {
            if p.kind == PortKind::AfXdp && !p.missing {
                let share = match cfg.external_xsks.get(i).and_then(|e| e.as_ref()) {
                    Some(ext) => external_share(p, cfg.netns, n_workers, ext)?,
                    None => xdp_program(p, cfg.netns, n_workers)?,
                };
                *lock(&gens.xdp[i]) = Some((0, Arc::new(share)));
            }
        }
        let mut per_worker: Vec<Vec<Box<dyn Port>>> = Vec::new();
        for w in 0..n_workers {
            let mut ports: Vec<Box<dyn Port>> = Vec::new();
            for (i, p) in cfg.ports.iter().enumerate() {
                let port = if p.missing {
                    Box::new(AbsentPort::new(&p.ifname))
                } else {
                    let share = lock(&gens.xdp[i]).as_ref().map(|(_, s)| s.clone());
                    open_port(
                        p,
                        cfg.netns,
                        fanout_base.map(|b| fanout_id(b, n_ports, i, 0)),
                        share.as_deref().map(|s| (s, w, n_workers)),
                        &cfg.receive,
                        cfg.af_packet_mark,
                    )?
                };
                ports.push(port);
            }
            per_worker.push(ports);
        }
        let data_ports: Arc<[DataPort]> = cfg.ports.into();
        let netns: Option<Arc<str>> = cfg.netns.map(Arc::from);
        let stop = Arc::new(AtomicBool::new(false));
        let infos: Vec<PortInfo> = cfg
            .ports
            .iter()
            .map(|p| PortInfo {
                port: p.number,
                no_fwd: false,
                no_flood: false,
            })
            .collect();
        let mut threads = Vec::new();
        let mut slots = Vec::new();
        let mut samples = Vec::new();
        let inboxes: Arc<[Inbox]> = (0..n_workers)
            .map(|_| Inbox::new())
            .collect::<std::io::Result<Vec<_>>>()
            .context("creating the workers' wake-up eventfds")?
            .into();
        for (i, (mut worker, ports)) in cfg.workers.into_iter().zip(per_worker).enumerate() {
            // Thread i is worker i of the masks.
            worker.set_worker_index(i);
            if !cfg.steering.is_empty() {
                worker.set_steering(cfg.steering.clone());
            }
            let slot = Arc::new(Mutex::new(DataplaneStats {
                ports: vec![PortStats::default(); ports.len()],
                ..DataplaneStats::default()
            }));
            slots.push(slot.clone());
            let sample_slot = Arc::new(Mutex::new(Vec::new()));
            samples.push(sample_slot.clone());
            let core = (!cfg.cores.is_empty()).then(|| cfg.cores[i % cfg.cores.len()]);
            let mut t = WorkerThread {
                worker,
                ports,
                sink: PortSink::new(
                    infos.clone(),
                    Vec::new(),
                    Some(PacketInQueue {
                        sender: cfg.packet_in.clone(),
                        wanted: cfg.packet_in_wanted.clone(),
                    }),
                )
                .with_steering(i, n_workers)
                .with_tunnels(&tunnel_tx),
                inboxes: inboxes.clone(),
                incoming: SteerBatch::default(),
                steered_out: 0,
                steered_in: 0,
                stop: stop.clone(),
                slot,
                drop_oversize: 0,
                drop_runt: 0,
                csum_finished: 0,
                failed_ports: 0,
                flush_failed: 0,
                data_ports: data_ports.clone(),
                netns: netns.clone(),
                fanout_base,
                gens: gens.clone(),
                seen_epoch: 0,
                seen: vec![0; n_ports],
                seen_retries: vec![0; n_ports],
                port_base: vec![PortStats::default(); n_ports],
                dead: vec![false; n_ports],
                reopen_warned: vec![false; n_ports],
                no_recv: vec![false; n_ports],
                no_recv_drops: vec![0; n_ports],
                no_recv_bytes: vec![0; n_ports],
                reopened: 0,
                reopen_failed: 0,
                busy_yields: 0,
                sampler: cfg.sample_every.map(Sampler::new),
                samples: sample_slot,
                receive: cfg.receive,
                decap: tunnels::Decapsulator::new(&tunnel_tx),
                segments: Vec::new(),
            };
            let spawned = std::thread::Builder::new()
                .name(format!("offlow-worker-{i}"))
                .spawn(move || {
                    if let Some(c) = core {
                        pin_to(c);
                    }
                    t.run();
                });
            match spawned {
                Ok(h) => threads.push(h),
                Err(e) => {
                    // Stop the workers already running before reporting.
                    stop.store(true, Ordering::Release);
                    for t in threads {
                        let _ = t.join();
                    }
                    return Err(anyhow::Error::new(e).context("starting a worker thread"));
                }
            }
        }
        info!(
            workers = n_workers,
            ports = cfg.ports.len(),
            steer_entries = cfg.steering.rules().len(),
            "data plane running"
        );
        Ok(Dataplane {
            stop,
            threads,
            slots,
            ports: data_ports,
            gens,
            inboxes,
            samples,
        })
    }

    /// Hand every flow sample the workers published since the last call
    /// to `visit` (key, estimated packets).
    pub fn take_samples(&self, mut visit: impl FnMut(OffloadKey, u64)) {
        for slot in &self.samples {
            let taken = std::mem::take(&mut *lock(slot));
            for (k, n) in taken {
                visit(k, n);
            }
        }
    }

    /// Wake every worker sleeping in its idle `poll(2)` (through its inbox
    /// eventfd; an awake worker just sees the counter grow). The control
    /// side calls it after posting a counter-sync request, so idle workers
    /// answer within microseconds instead of at the end of their sleep.
    pub fn wake_all(&self) {
        for inbox in self.inboxes.iter() {
            inbox.ring();
        }
    }

    /// Ask every worker to re-open the port numbered `number` (its
    /// interface appeared, or was re-created: the old sockets are bound to
    /// the old one). Workers do it between batches, within about an idle
    /// sleep. False when there is no such port or it is a capture or
    /// tunnel port (nothing to re-open).
    pub fn reopen(&self, number: u32) -> bool {
        match self.ports.iter().position(|p| p.number == number) {
            Some(i) if self.ports[i].kind.is_interface() => self.gens.bump(i),
            _ => false,
        }
    }

    /// Apply port `number`'s OpenFlow configuration (`OFPPC_*` bits, from
    /// PORT_MOD): `port_down` or `no_recv` drops what it receives,
    /// `port_down` or `no_fwd` what is sent to it (FLOOD and ALL skip it).
    /// Workers take it between batches, within about an idle sleep. False
    /// when there is no such port.
    pub fn set_port_config(&self, number: u32, bits: u32) -> bool {
        match self.ports.iter().position(|p| p.number == number) {
            Some(i) => self.gens.set_config(i, bits),
            None => false,
        }
    }

    /// If some worker failed to re-open port `number` at its latest
    /// request (e.g. AF_XDP refused to bind, or the interface vanished in
    /// between), ask the workers that failed, and only them, again; whether
    /// it did. The control side calls this
    /// once per link poll while the interface is there, so a failing port
    /// is retried about once a second, never in a loop.
    pub fn retry_failed_reopen(&self, number: u32) -> bool {
        match self.ports.iter().position(|p| p.number == number) {
            Some(i) if self.gens.latest_failed(i) => self.gens.retry(i),
            _ => false,
        }
    }

    /// Sum of every worker's last published counters.
    pub fn stats(&self) -> DataplaneStats {
        self.stats_handle().stats()
    }

    /// Each worker's last published counters, by worker index.
    pub fn worker_stats(&self) -> Vec<DataplaneStats> {
        self.stats_handle().per_worker()
    }

    /// A handle other threads can read the counters through.
    pub fn stats_handle(&self) -> StatsHandle {
        StatsHandle {
            slots: self.slots.clone(),
            numbers: self.ports.iter().map(|p| p.number).collect(),
        }
    }

    /// Stop the workers and wait for them (they flush their counters).
    /// Each worker's final counters are logged (`worker stopped`).
    pub fn stop(mut self) -> DataplaneStats {
        self.shutdown();
        for (i, d) in self.worker_stats().iter().enumerate() {
            info!(
                worker = i,
                packets = d.worker.packets,
                outputs = d.worker.outputs,
                steered_out = d.steered_out,
                steered_in = d.steered_in,
                drop_steer_inbox_full = d.drop_steer_inbox_full,
                "worker stopped"
            );
        }
        self.stats()
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Release);
        for t in self.threads.drain(..) {
            if t.join().is_err() {
                warn!("a worker thread panicked");
            }
        }
    }
}

impl Drop for Dataplane {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// How long the calling thread has waited on a run queue, in ns (the
/// second field of `/proc/thread-self/schedstat`; `None` without
/// `CONFIG_SCHED_INFO`).
fn run_delay_ns() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    text.split_whitespace().nth(1)?.parse().ok()
}

fn pin_to(core: usize) {
    // SAFETY: a zeroed cpu_set_t is the empty set; CPU_SET writes inside
    // it (core is reduced below CPU_SETSIZE); sched_setaffinity reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core % libc::CPU_SETSIZE as usize, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            warn!(core, "could not pin worker");
        }
    }
}

struct WorkerThread {
    worker: Worker,
    ports: Vec<Box<dyn Port>>,
    sink: PortSink,
    /// Every worker's inbox, by worker index.
    inboxes: Arc<[Inbox]>,
    /// The frames last taken from this worker's inbox (swapped with it).
    incoming: SteerBatch,
    steered_out: u64,
    steered_in: u64,
    stop: Arc<AtomicBool>,
    slot: Arc<Mutex<DataplaneStats>>,
    drop_oversize: u64,
    drop_runt: u64,
    csum_finished: u64,
    failed_ports: u64,
    /// Ports whose transmit error was reported (bit per port index).
    flush_failed: u64,
    // Re-opening ports (see the module docs), by port index like `ports`.
    /// What each port is, for re-opening it.
    data_ports: Arc<[DataPort]>,
    /// The ports' namespace.
    netns: Option<Arc<str>>,
    /// The fanout base id (several workers).
    fanout_base: Option<u16>,
    gens: Arc<Generations>,
    /// The epoch, port generations and retries last acted on.
    seen_epoch: u64,
    seen: Vec<u64>,
    seen_retries: Vec<u64>,
    /// Counters of the sockets closed so far (published as base + live).
    port_base: Vec<PortStats>,
    /// Ports that reported an error: left out of the poll set.
    dead: Vec<bool>,
    /// Ports whose last re-open failed and was reported: the next
    /// failures (retries) are only counted, until one succeeds.
    reopen_warned: Vec<bool>,
    reopened: u64,
    reopen_failed: u64,
    /// Busy polling: times the worker found its core shared and slept
    /// between frames for [`CONTENDED_HOLD`] (logged at exit).
    busy_yields: u64,
    /// Per port: configured `no_recv` or `port_down` (frames read and
    /// dropped, so the socket does not fill up).
    no_recv: Vec<bool>,
    /// Per port: frames dropped so (published in its `rx_dropped`, and
    /// taken out of its `rx_packets`), and their bytes (out of `rx_bytes`).
    no_recv_drops: Vec<u64>,
    no_recv_bytes: Vec<u64>,
    /// The offload tier's flow sampler, when there is a tier.
    sampler: Option<Sampler>,
    /// Where its samples are published (taken by the control side).
    samples: SampleSlot,
    /// The ring of AF_PACKET ports it (re-)opens, and its idle policy.
    receive: Receive,
    /// Tunnel ports: which received frames are decapsulated for them.
    decap: tunnels::Decapsulator,
    /// Runs of a sorted underlay batch, by port index (reused).
    segments: Vec<(usize, std::ops::Range<usize>)>,
}

impl WorkerThread {
    fn run(&mut self) {
        let mut bufs: Vec<PacketBuf> = (0..BATCH)
            .map(|_| PacketBuf::new(DEFAULT_HEADROOM, MAX_FRAME))
            .collect();
        let mut pollfds = self.poll_set();
        // When the worker last found nothing to do after doing something
        // (`None` while frames come).
        let mut idle_since: Option<Instant> = None;
        // Counters credited since the last frame (done once per idle
        // period, not every empty round).
        let mut flushed = true;
        let mut last_publish = Instant::now();
        let mut last_busy_check = Instant::now();
        // Busy polling: the last run-queue wait read, and until when the
        // core counts as shared.
        let mut last_run_delay: Option<u64> = None;
        let mut contended_until: Option<Instant> = None;
        while !self.stop.load(Ordering::Acquire) {
            // Between batches: one atomic load unless a port was re-opened
            // by the control side (rare; then sockets are opened here).
            if self.reopen_requested() {
                self.reopen_ports();
                self.apply_port_config();
                pollfds = self.poll_set();
            }
            // A counter sync is answered by the worker below (process or
            // poll); the port counters go out first, so a statistics reply
            // counts every frame this worker handled before the request
            // (not only those of the last PUBLISH_EVERY tick).
            if self.worker.sync_pending() {
                last_publish = Instant::now();
                self.publish();
            }
            let mut any = false;
            for i in 0..self.ports.len() {
                let n = self.receive(i, &mut bufs);
                if n == 0 {
                    continue;
                }
                any = true;
                // A port that failed (its link went down) and receives
                // again came back up on the same socket: sleep on it again.
                if self.dead[i] {
                    self.dead[i] = false;
                    pollfds = self.poll_set();
                }
                if self.drop_if_no_recv(i, &bufs[..n]) {
                    continue;
                }
                if self.decap.is_underlay(i) {
                    let mut segments = std::mem::take(&mut self.segments);
                    self.decap.sort_batch(
                        i,
                        &mut bufs[..n],
                        &mut self.sink.tunnel_stats,
                        &mut segments,
                    );
                    for (port, range) in segments.iter().cloned() {
                        self.process_received(port, &mut bufs[range]);
                    }
                    self.segments = segments;
                } else {
                    self.process_received(i, &mut bufs[..n]);
                }
            }
            self.deliver_steered();
            if self.take_inbox() {
                any = true;
                self.process_incoming(&mut bufs);
            }
            if any {
                idle_since = None;
                flushed = false;
            } else {
                self.worker.poll();
                self.flush_pending();
                // One clock read per empty round: the spin is bounded in
                // time, not in rounds (a round's cost varies with the
                // ports).
                let now = Instant::now();
                let since = *idle_since.get_or_insert(now);
                if now.duration_since(since) >= self.spin() {
                    if !std::mem::replace(&mut flushed, true) {
                        self.worker.flush_counters();
                    }
                    match self.receive.idle {
                        IdlePoll::Adaptive { .. } => self.sleep(&mut pollfds, IDLE_SLEEP),
                        IdlePoll::Busy if contended_until.is_some_and(|t| now < t) => {
                            self.sleep(&mut pollfds, IDLE_SLEEP);
                        }
                        IdlePoll::Busy => {
                            if now.duration_since(last_busy_check) >= BUSY_CHECK_EVERY {
                                last_busy_check = now;
                                self.sleep(&mut pollfds, Duration::ZERO);
                                let delay = run_delay_ns();
                                let waited = match (last_run_delay, delay) {
                                    (Some(a), Some(b)) => b.saturating_sub(a),
                                    _ => 0,
                                };
                                if waited > CONTENDED_WAIT.as_nanos() as u64 {
                                    contended_until = Some(now + CONTENDED_HOLD);
                                    self.busy_yields += 1;
                                    // A fresh baseline when busy polling resumes.
                                    last_run_delay = None;
                                } else {
                                    last_run_delay = delay;
                                }
                            }
                        }
                    }
                }
            }
            if last_publish.elapsed() >= PUBLISH_EVERY {
                last_publish = Instant::now();
                self.publish();
            }
        }
        self.worker.flush_counters();
        self.publish();
        if self.busy_yields > 0 {
            info!(
                worker = self.sink.me,
                yields = self.busy_yields,
                "busy poll: core found shared, slept between frames for a while"
            );
        }
    }

    /// Run `bufs`, received on (or decapsulated for) port index `i`,
    /// through the worker, and transmit what it sent.
    fn process_received(&mut self, i: usize, bufs: &mut [PacketBuf]) {
        let in_port = self.sink.infos[i].port;
        if let Some(s) = &mut self.sampler {
            for b in bufs.iter() {
                s.offer(b.frame(), in_port, b.tunnel_id().unwrap_or(0));
            }
        }
        self.sink.in_port = in_port;
        // Lend the ports to the sink for the batch's outputs.
        self.sink.ports_tx = std::mem::take(&mut self.ports);
        self.worker.process(bufs, in_port, &mut self.sink);
        self.ports = std::mem::take(&mut self.sink.ports_tx);
        // After every batch: a round over several ports (or FLOOD)
        // would otherwise queue more than a transmit batch holds.
        self.flush_pending();
    }

    /// How long an idle worker keeps polling before it sleeps (busy
    /// polling: before it credits its counters, then it polls on).
    fn spin(&self) -> Duration {
        match self.receive.idle {
            IdlePoll::Adaptive { spin } => spin,
            IdlePoll::Busy => crate::config::DEFAULT_IDLE_SPIN,
        }
    }

    /// Wait in `poll(2)` on the ports and the inbox for at most `timeout`
    /// (zero: just look), then handle failed ports and a stale wake-up.
    fn sleep(&mut self, pollfds: &mut [libc::pollfd], timeout: Duration) {
        // SAFETY: `pollfds` is a live array of its length.
        let ready = unsafe {
            libc::poll(
                pollfds.as_mut_ptr(),
                pollfds.len() as libc::nfds_t,
                timeout.as_millis() as libc::c_int,
            )
        };
        if ready > 0 {
            self.check_port_errors(pollfds);
            // A wake-up whose frames were already taken (the sender rang
            // after we swapped the inbox) would keep the eventfd readable:
            // reset it.
            if let Some(inbox) = self.inboxes.get(self.sink.me) {
                if pollfds
                    .last()
                    .is_some_and(|p| p.revents & libc::POLLIN != 0)
                {
                    inbox.clear();
                }
            }
        }
    }

    /// What an idle worker sleeps on: the live ports' descriptors, then
    /// (last) the inbox's eventfd.
    fn poll_set(&self) -> Vec<libc::pollfd> {
        let mut fds: Vec<RawFd> = self
            .ports
            .iter()
            .enumerate()
            .filter(|&(i, _)| !self.dead.get(i).copied().unwrap_or(false))
            .fold(Vec::new(), |mut fds, (_, p)| {
                p.poll_fds(&mut fds);
                fds
            });
        if let Some(inbox) = self.inboxes.get(self.sink.me) {
            fds.push(std::os::fd::AsRawFd::as_raw_fd(&inbox.wake));
        }
        fds.iter()
            .map(|&fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect()
    }

    /// The control side asked for a re-open since the last one done.
    /// Take the ports' OpenFlow configuration (PORT_MOD) as the control
    /// side last set it: which ports drop what they receive, which drop
    /// what is sent to them (and are left out of FLOOD and ALL).
    fn apply_port_config(&mut self) {
        const NO_RECV: u32 = OFPPC_PORT_DOWN | OFPPC_NO_RECV;
        const NO_FWD: u32 = OFPPC_PORT_DOWN | OFPPC_NO_FWD;
        for (i, c) in self.gens.config.iter().enumerate() {
            let bits = c.load(Ordering::Acquire);
            if let Some(r) = self.no_recv.get_mut(i) {
                *r = bits & NO_RECV != 0;
            }
            if let (Some(f), Some(info)) = (self.sink.no_fwd.get_mut(i), self.sink.infos.get_mut(i))
            {
                *f = bits & NO_FWD != 0;
                info.no_fwd = *f;
            }
            if let Some(p) = self.sink.no_packet_in.get_mut(i) {
                *p = bits & OFPPC_NO_PACKET_IN != 0;
            }
        }
    }

    /// Port `i`'s shared program at `generation` when it is an AF_XDP port
    /// (attaching it if this worker is the first to need it at that
    /// generation), else `None`.
    fn xdp_share(&self, i: usize, generation: u64) -> anyhow::Result<Option<Arc<XdpShare>>> {
        let dp = &self.data_ports[i];
        if dp.kind != PortKind::AfXdp {
            return Ok(None);
        }
        let mut slot = lock(&self.gens.xdp[i]);
        let share = match slot.as_ref() {
            Some((g, share)) if *g == generation => share.clone(),
            _ => {
                // The old program (if any) goes with the last socket on it.
                let share = Arc::new(xdp_program(dp, self.netns.as_deref(), self.sink.n_workers)?);
                *slot = Some((generation, share.clone()));
                share
            }
        };
        Ok(Some(share))
    }

    fn reopen_requested(&self) -> bool {
        self.gens.epoch.load(Ordering::Acquire) != self.seen_epoch
    }

    /// Re-open every port whose generation moved since this worker last
    /// looked: the old socket's counters go into the port's base, the old
    /// socket is closed first (an AF_XDP program or fanout membership of a
    /// gone interface is released), then a fresh one is opened. A failure
    /// is reported and counted once and leaves a placeholder; the next
    /// generation bump tries again, and so does a retry while this
    /// worker's open is the one that failed (a retry leaves the workers
    /// whose sockets work alone).
    fn reopen_ports(&mut self) {
        // The epoch first: a port bump made before it is visible below.
        self.seen_epoch = self.gens.epoch.load(Ordering::Acquire);
        let n_ports = self.data_ports.len();
        let my_bit = 1u64 << (self.sink.me % 64);
        for i in 0..self.ports.len().min(n_ports) {
            let generation = self.gens.ports[i].load(Ordering::Acquire);
            let retries = self.gens.retries[i].load(Ordering::Acquire);
            let retry = std::mem::replace(&mut self.seen_retries[i], retries) != retries
                && self.gens.failed_workers[i].load(Ordering::Acquire) & my_bit != 0;
            if generation == self.seen[i] && !retry {
                continue;
            }
            self.seen[i] = generation;
            let dp = &self.data_ports[i];
            let mut old =
                std::mem::replace(&mut self.ports[i], Box::new(AbsentPort::new(&dp.ifname)));
            self.port_base[i].add(&old.stats());
            drop(old);
            // Frames queued on the old socket went with it.
            self.sink.pending[i] = false;
            self.dead[i] = false;
            self.flush_failed &= !(1u64 << (i % 64));
            let fanout = self
                .fanout_base
                .map(|b| fanout_id(b, n_ports, i, generation));
            let n_workers = self.sink.n_workers;
            // A re-opened port's interface is a new one (it appeared, or
            // was re-created): the offload tier's TC program is not on it,
            // so nothing marks the frames the socket must take; it takes
            // every frame (in software, as the tier's ports do once their
            // interface has gone).
            match self.xdp_share(i, generation).and_then(|share| {
                let xdp = share.as_deref().map(|s| (s, self.sink.me, n_workers));
                open_port(dp, self.netns.as_deref(), fanout, xdp, &self.receive, None)
            }) {
                Ok(port) => {
                    self.ports[i] = port;
                    self.gens.failed_workers[i].fetch_and(!my_bit, Ordering::AcqRel);
                    self.reopened += 1;
                    self.reopen_warned[i] = false;
                    info!(worker = self.sink.me, port = dp.number, ifname = %dp.ifname,
                        generation, "port re-opened");
                }
                Err(e) => {
                    self.reopen_failed += 1;
                    // Tells the control side to ask again at its next poll.
                    // fetch_max: a slower worker failing at an older
                    // generation must not hide a newer failure (the control
                    // side retries only when the latest generation failed).
                    self.gens.failed[i].fetch_max(generation, Ordering::AcqRel);
                    self.gens.failed_workers[i].fetch_or(my_bit, Ordering::AcqRel);
                    if !std::mem::replace(&mut self.reopen_warned[i], true) {
                        warn!(worker = self.sink.me, port = dp.number, ifname = %dp.ifname,
                            generation, error = format!("{e:#}"),
                            "re-opening the port failed; it takes no traffic meanwhile, retried every link poll (reported once)");
                    }
                }
            }
        }
    }

    /// Hand the ports' queued frames to the kernel (frames it refuses are
    /// counted by the port).
    fn flush_pending(&mut self) {
        let flush_failed = &mut self.flush_failed;
        self.sink.flush_ports(&mut self.ports, |i, p, e| {
            // Ports count refused frames; an error of the port itself (a
            // capture file that cannot be written) is worth one line, not
            // one per batch.
            if *flush_failed & (1u64 << (i % 64)) == 0 {
                *flush_failed |= 1u64 << (i % 64);
                warn!(port = p.name(), error = %e, "transmit failed (reported once)");
            }
        });
    }

    /// Append the frames steered this round to their destinations'
    /// inboxes (one lock per destination with frames).
    fn deliver_steered(&mut self) {
        for (to, batch) in self.sink.staged.iter_mut().enumerate() {
            if batch.len() == 0 {
                continue;
            }
            let Some(inbox) = self.inboxes.get(to) else {
                batch.clear();
                continue;
            };
            let mut q = lock(&inbox.batch);
            let room = INBOX_FRAMES.saturating_sub(q.len());
            let mut moved = 0;
            for i in 0..batch.len().min(room) {
                if let Some(packet) = batch.packet(i) {
                    q.push(packet);
                    moved += 1;
                }
            }
            inbox.queued.store(true, Ordering::Release);
            drop(q);
            inbox.ring();
            self.steered_out += moved as u64;
            self.sink.drop_steer_inbox_full += (batch.len() - moved) as u64;
            batch.clear();
        }
    }

    /// Swap this worker's inbox out into `incoming` if anything is queued.
    fn take_inbox(&mut self) -> bool {
        let Some(inbox) = self.inboxes.get(self.sink.me) else {
            return false;
        };
        // Acquire pairs with the sender's Release; the mutex orders the
        // data itself.
        if !inbox.queued.load(Ordering::Acquire) {
            return false;
        }
        inbox.clear();
        self.incoming.clear();
        let mut q = lock(&inbox.batch);
        std::mem::swap(&mut *q, &mut self.incoming);
        inbox.queued.store(false, Ordering::Relaxed);
        drop(q);
        self.incoming.len() > 0
    }

    /// Process the frames taken from the inbox, in order, in runs of the
    /// same ingress port of at most a batch.
    fn process_incoming(&mut self, bufs: &mut [PacketBuf]) {
        let total = self.incoming.len();
        let mut i = 0;
        while i < total {
            let Some(in_port) = self.incoming.packet(i).map(|p| p.in_port) else {
                break;
            };
            let mut n = 0;
            while i < total && n < bufs.len() {
                match self.incoming.packet(i) {
                    Some(p) if p.in_port == in_port => {
                        // They fitted a buffer on the sending worker, so
                        // they fit ours (same size); counted if not.
                        if bufs[n].load(p.frame).is_ok() {
                            bufs[n].set_tunnel_id(p.tunnel_id);
                            n += 1;
                        } else {
                            self.drop_oversize += 1;
                        }
                        i += 1;
                    }
                    _ => break,
                }
            }
            self.steered_in += n as u64;
            self.sink.in_port = in_port;
            self.sink.no_steer = true;
            self.sink.ports_tx = std::mem::take(&mut self.ports);
            self.worker.process(&mut bufs[..n], in_port, &mut self.sink);
            self.ports = std::mem::take(&mut self.sink.ports_tx);
            self.sink.no_steer = false;
            self.flush_pending();
        }
        self.incoming.clear();
    }

    /// A port whose interface went away (or failed) reports an error on
    /// every poll: read it (which clears it), report it once, and stop
    /// polling that descriptor so an idle worker does not spin. The port
    /// stays in the list: its sends are counted as dropped, the control
    /// side announces it down (PORT_STATUS), and re-opens it (a fresh
    /// socket, polled again) when its interface is back.
    fn check_port_errors(&mut self, pollfds: &mut [libc::pollfd]) {
        for pfd in pollfds.iter_mut() {
            if pfd.fd < 0 || pfd.revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) == 0 {
                continue;
            }
            let mut err: libc::c_int = 0;
            let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            // SAFETY: SO_ERROR writes one int into `err`, of the size given.
            unsafe {
                libc::getsockopt(
                    pfd.fd,
                    libc::SOL_SOCKET,
                    libc::SO_ERROR,
                    (&mut err as *mut libc::c_int).cast(),
                    &mut len,
                );
            }
            // Any of a port's descriptors (an AF_PACKET port may poll an
            // overflow socket beside its ring) names the port.
            let mut fds = Vec::new();
            let index = self.ports.iter().position(|p| {
                fds.clear();
                p.poll_fds(&mut fds);
                fds.contains(&pfd.fd)
            });
            // poll(2) ignores negative descriptors.
            pfd.fd = -1;
            if let Some(d) = index.and_then(|i| self.dead.get_mut(i)) {
                if std::mem::replace(d, true) {
                    continue; // its other descriptor said so already
                }
            }
            let name = index
                .and_then(|i| self.ports.get(i))
                .map_or("?", |p| p.name());
            warn!(
                port = name,
                error = %std::io::Error::from_raw_os_error(err),
                "port failed (interface gone or down); not polled until re-opened, the others keep forwarding"
            );
            self.failed_ports += 1;
        }
        // A failed port's other descriptors are not polled either.
        let mut dead_fds = Vec::new();
        for (p, _) in self.ports.iter().zip(&self.dead).filter(|(_, &d)| d) {
            p.poll_fds(&mut dead_fds);
        }
        for pfd in pollfds.iter_mut().filter(|f| dead_fds.contains(&f.fd)) {
            pfd.fd = -1;
        }
    }

    /// Copy up to a batch from port `i` into `bufs`; returns the count.
    fn receive(&mut self, i: usize, bufs: &mut [PacketBuf]) -> usize {
        let mut n = 0;
        let oversize = &mut self.drop_oversize;
        let runts = &mut self.drop_runt;
        let csum_finished = &mut self.csum_finished;
        let r = self.ports[i].recv(bufs.len(), &mut |frame: &[u8], meta: RxMeta| {
            let Some(buf) = bufs.get_mut(n) else { return };
            // Shorter than an Ethernet header: not a frame a rule can
            // meaningfully match (every field would read as absent).
            if frame.len() < ETH_HLEN && meta.vlan.is_none() {
                *runts += 1;
                return;
            }
            if buf.load(frame).is_err() {
                *oversize += 1;
                return;
            }
            if let Some((tpid, tci)) = meta.vlan {
                // The kernel took the tag off; put it back where it was.
                if buf.open_gap(12, 4) {
                    let f = buf.frame_mut();
                    f[12..14].copy_from_slice(&tpid.to_be_bytes());
                    f[14..16].copy_from_slice(&tci.to_be_bytes());
                }
            }
            if meta.csum_partial && csum::finish_partial(buf.frame_mut()) {
                *csum_finished += 1;
            }
            n += 1;
        });
        if let Err(e) = r {
            warn!(port = self.ports[i].name(), error = %e, "receive failed");
        }
        n
    }

    /// Drop the batch `frames` just received on port `i` if the port is
    /// configured `no_recv` (or `port_down`): counted, not processed.
    fn drop_if_no_recv(&mut self, i: usize, frames: &[PacketBuf]) -> bool {
        if !self.no_recv.get(i).copied().unwrap_or(false) {
            return false;
        }
        self.no_recv_drops[i] += frames.len() as u64;
        self.no_recv_bytes[i] += frames.iter().map(|f| f.frame().len() as u64).sum::<u64>();
        true
    }

    fn publish(&mut self) {
        if let Some(sampler) = &mut self.sampler {
            let mut out = lock(&self.samples);
            sampler.drain(|k, n| {
                if out.len() < MAX_SAMPLES {
                    out.push((k, n));
                }
            });
        }
        let mut s = lock(&self.slot);
        s.worker = self.worker.stats();
        for (i, (d, p)) in s.ports.iter_mut().zip(self.ports.iter_mut()).enumerate() {
            // Earlier sockets' counts plus this one's: never backwards.
            let mut total = self.port_base.get(i).copied().unwrap_or_default();
            total.add(&p.stats());
            // §7.2.1 `OFPPC_NO_RECV`: the switch drops what the port
            // receives. The socket counted those frames as received; they
            // are reported as dropped by RX instead, not as both.
            let (dropped, dropped_bytes) = (
                self.no_recv_drops.get(i).copied().unwrap_or(0),
                self.no_recv_bytes.get(i).copied().unwrap_or(0),
            );
            total.rx_packets = total.rx_packets.saturating_sub(dropped);
            total.rx_bytes = total.rx_bytes.saturating_sub(dropped_bytes);
            total.rx_dropped += dropped;
            total.tx_dropped += self.sink.no_fwd_drops.get(i).copied().unwrap_or(0);
            total.add(&self.sink.tunnel_stats(i));
            *d = total;
        }
        s.drop_oversize = self.drop_oversize;
        s.drop_runt = self.drop_runt;
        s.failed_ports = self.failed_ports;
        s.reopened = self.reopened;
        s.reopen_failed = self.reopen_failed;
        s.csum_finished = self.csum_finished;
        s.drop_unknown_port = self.sink.drop_unknown_port;
        s.drop_no_recv = self.no_recv_drops.iter().sum();
        s.drop_no_fwd = self.sink.no_fwd_drops.iter().sum();
        s.drop_packet_in_backlog = self.sink.drop_packet_in_backlog;
        s.drop_packet_in_unwanted = self.sink.drop_packet_in_unwanted;
        s.packet_ins = self.sink.packet_ins;
        s.steered_out = self.steered_out;
        s.steered_in = self.steered_in;
        s.drop_steer_inbox_full = self.sink.drop_steer_inbox_full;
        s.drop_tunnel_malformed = self.decap.malformed;
        s.drop_tunnel_unknown_key = self.decap.unknown_key;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use offlow_datapath::{OutputMeta, OutputSink};

    fn sink(me: usize, n_workers: usize) -> PortSink {
        let (sender, _rx) = mpsc::channel(1);
        let queue = PacketInQueue {
            sender,
            wanted: Arc::new(AtomicU32::new(0)),
        };
        PortSink::new(Vec::new(), Vec::new(), Some(queue)).with_steering(me, n_workers)
    }

    /// A worker thread (not started) over `ports`, described by `data`.
    fn worker_thread(ports: Vec<Box<dyn Port>>, data: Vec<DataPort>) -> WorkerThread {
        let control = offlow_datapath::Control::new(offlow_pipeline::Pipeline::new(1));
        let n = ports.len();
        let mut s = sink(0, 1);
        s.pending = vec![false; n];
        WorkerThread {
            worker: control.worker(offlow_datapath::WorkerConfig::default()),
            ports,
            sink: s,
            inboxes: Vec::new().into(),
            incoming: SteerBatch::default(),
            steered_out: 0,
            steered_in: 0,
            stop: Arc::new(AtomicBool::new(false)),
            slot: Arc::new(Mutex::new(DataplaneStats {
                ports: vec![PortStats::default(); n],
                ..DataplaneStats::default()
            })),
            drop_oversize: 0,
            drop_runt: 0,
            csum_finished: 0,
            failed_ports: 0,
            flush_failed: 0,
            data_ports: data.into(),
            netns: None,
            fanout_base: None,
            gens: Arc::new(Generations::new(n)),
            seen_epoch: 0,
            seen: vec![0; n],
            seen_retries: vec![0; n],
            port_base: vec![PortStats::default(); n],
            dead: vec![false; n],
            reopen_warned: vec![false; n],
            reopened: 0,
            reopen_failed: 0,
            busy_yields: 0,
            sampler: None,
            samples: SampleSlot::default(),
            no_recv: vec![false; n],
            no_recv_drops: vec![0; n],
            no_recv_bytes: vec![0; n],
            receive: Receive::default(),
            decap: tunnels::Decapsulator::default(),
            segments: Vec::new(),
        }
    }

    /// PORT_MOD bits reach a worker at its next check: no_recv and
    /// port_down stop reception, no_fwd and port_down drop outputs to the
    /// port (counted in its tx_dropped) and take it out of FLOOD/ALL.
    #[test]
    fn port_config_reaches_the_worker() {
        let data: Vec<DataPort> = (1..=2)
            .map(|n| DataPort {
                ifname: format!("p{n}"),
                number: n,
                kind: PortKind::AfPacket,
                missing: true,
            })
            .collect();
        let ports: Vec<Box<dyn Port>> = data
            .iter()
            .map(|d| Box::new(AbsentPort::new(&d.ifname)) as Box<dyn Port>)
            .collect();
        let mut t = worker_thread(ports, data);
        t.sink.infos = (1..=2)
            .map(|port| PortInfo {
                port,
                no_fwd: false,
                no_flood: false,
            })
            .collect();
        t.sink.no_fwd = vec![false; 2];
        t.sink.no_fwd_drops = vec![0; 2];
        t.sink.no_packet_in = vec![false; 2];
        assert!(!t.reopen_requested());
        assert!(t.gens.set_config(1, OFPPC_NO_FWD));
        assert!(t.gens.set_config(0, OFPPC_NO_RECV));
        assert!(!t.gens.set_config(2, OFPPC_NO_FWD), "no third port");
        assert!(t.reopen_requested(), "a config change moves the epoch");
        t.reopen_ports();
        t.apply_port_config();
        assert!(!t.reopen_requested());
        assert_eq!(t.no_recv, vec![true, false]);
        assert_eq!(t.sink.no_fwd, vec![false, true]);
        assert!(t.sink.infos[1].no_fwd && !t.sink.infos[0].no_fwd);
        t.sink.output(
            2,
            &[0; 60],
            OutputMeta {
                queue: None,
                final_view: true,
                tunnel_id: 0,
            },
        );
        assert_eq!(t.sink.no_fwd_drops, vec![0, 1]);
        t.publish();
        let s = published(&t);
        assert_eq!((s.drop_no_fwd, s.ports[1].tx_dropped), (1, 1));
        // port_down does both.
        assert!(t.gens.set_config(1, OFPPC_PORT_DOWN));
        t.reopen_ports();
        t.apply_port_config();
        assert_eq!(t.no_recv, vec![true, true]);
        assert_eq!(t.sink.no_fwd, vec![false, true]);
    }

    /// Frames a `no_recv` port receives count as dropped by RX, not as
    /// received as well; frames before the change stay received.
    #[test]
    fn no_recv_drops_are_rx_dropped_not_rx_packets() {
        let (mem, peer) = offlow_io::MemPort::pair("mem", 8);
        let data = vec![DataPort {
            ifname: "mem".into(),
            number: 1,
            kind: PortKind::AfPacket,
            missing: false,
        }];
        let mut t = worker_thread(vec![Box::new(mem)], data);
        let mut bufs: Vec<PacketBuf> = (0..4)
            .map(|_| PacketBuf::new(DEFAULT_HEADROOM, MAX_FRAME))
            .collect();
        peer.inject(&[0xab; 60], RxMeta::default());
        let n = t.receive(0, &mut bufs);
        assert!(!t.drop_if_no_recv(0, &bufs[..n]), "not configured yet");
        assert!(t.gens.set_config(0, OFPPC_NO_RECV));
        t.reopen_ports();
        t.apply_port_config();
        for _ in 0..3 {
            peer.inject(&[0xcd; 100], RxMeta::default());
        }
        let n = t.receive(0, &mut bufs);
        assert_eq!(n, 3);
        assert!(t.drop_if_no_recv(0, &bufs[..n]));
        t.publish();
        let s = published(&t);
        let p = s.ports[0];
        assert_eq!((p.rx_packets, p.rx_bytes, p.rx_dropped), (1, 60, 3));
        assert_eq!(s.drop_no_recv, 3);
    }

    /// A retry re-opens a port only on the workers whose open failed: a
    /// worker with a working socket keeps it (its counters and fanout
    /// membership) instead of re-opening every link poll.
    #[test]
    fn retry_reopens_only_the_worker_that_failed() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("NOTICE: skipping: opening an AF_PACKET socket needs root");
            return;
        }
        let port = |ifname: &str| DataPort {
            ifname: ifname.into(),
            number: 1,
            kind: PortKind::AfPacket,
            missing: true,
        };
        let absent = |name: &str| vec![Box::new(AbsentPort::new(name)) as Box<dyn Port>];
        // Worker 0's interface exists (loopback), worker 1's does not: the
        // same port as two workers would see it if one open failed.
        let gone = format!("oflgone{}", std::process::id() % 10_000);
        let mut ok = worker_thread(absent("lo"), vec![port("lo")]);
        let mut failing = worker_thread(absent(&gone), vec![port(&gone)]);
        failing.gens = ok.gens.clone();
        failing.sink.me = 1;
        ok.gens.bump(0);
        for t in [&mut ok, &mut failing] {
            assert!(t.reopen_requested());
            t.reopen_ports();
        }
        assert_eq!((ok.reopened, ok.reopen_failed), (1, 0));
        assert_eq!((failing.reopened, failing.reopen_failed), (0, 1));
        assert!(ok.gens.latest_failed(0));

        assert!(ok.gens.retry(0));
        for t in [&mut ok, &mut failing] {
            assert!(t.reopen_requested(), "a retry moves the epoch");
            t.reopen_ports();
        }
        assert_eq!(
            (ok.reopened, ok.reopen_failed),
            (1, 0),
            "the working socket is left alone"
        );
        assert_eq!(
            (failing.reopened, failing.reopen_failed),
            (0, 2),
            "tried again"
        );
        assert!(
            ok.gens.latest_failed(0),
            "still failing: the next poll retries"
        );

        // A bump (the interface re-created) re-opens everywhere.
        ok.gens.bump(0);
        for t in [&mut ok, &mut failing] {
            t.reopen_ports();
        }
        assert_eq!((ok.reopened, failing.reopen_failed), (2, 3));
    }

    fn published(t: &WorkerThread) -> DataplaneStats {
        lock(&t.slot).clone()
    }

    /// A re-open whose interface does not exist: counted, reported once,
    /// visible to the control side as failed, never retried without a
    /// bump; it leaves a placeholder that drops sends, and the port's
    /// counters never go backwards.
    #[test]
    fn failed_reopen_is_flagged_retried_on_bump_and_counters_stay_monotonic() {
        let ifname = format!("oflno{}", std::process::id() % 100_000);
        let (mem, peer) = offlow_io::MemPort::pair("mem", 8);
        let data = vec![DataPort {
            ifname: ifname.clone(),
            number: 7,
            kind: PortKind::AfPacket,
            missing: false,
        }];
        let mut t = worker_thread(vec![Box::new(mem)], data);
        let mut bufs: Vec<PacketBuf> = (0..4)
            .map(|_| PacketBuf::new(DEFAULT_HEADROOM, MAX_FRAME))
            .collect();
        for _ in 0..3 {
            peer.inject(&[0xab; 60], RxMeta::default());
        }
        assert_eq!(t.receive(0, &mut bufs), 3);
        t.publish();
        assert_eq!(published(&t).ports[0].rx_packets, 3);

        assert!(!t.reopen_requested(), "nothing asked yet");
        assert!(t.gens.bump(0));
        assert!(!t.gens.bump(1), "no port 1");
        assert!(t.reopen_requested());
        t.reopen_ports();
        assert!(!t.reopen_requested(), "acted on");
        assert_eq!((t.reopened, t.reopen_failed), (0, 1));
        assert!(t.gens.latest_failed(0), "the control side can see it");
        assert!(!t.gens.latest_failed(1));
        assert_eq!(t.ports[0].name(), ifname, "the placeholder stands in");
        // The placeholder receives nothing and drops (counts) sends.
        peer.inject(&[0xab; 60], RxMeta::default());
        assert_eq!(t.receive(0, &mut bufs), 0);
        assert!(!t.ports[0].send(&[0; 60]));
        t.publish();
        let p = published(&t).ports[0];
        assert_eq!((p.rx_packets, p.rx_bytes, p.tx_dropped), (3, 180, 1));
        assert_eq!(published(&t).reopen_failed, 1);
        // Without a new bump nothing is retried.
        assert!(!t.reopen_requested());
        // A second bump retries (and fails again): the counts carried by
        // both closed ports stay.
        t.gens.bump(0);
        assert!(!t.gens.latest_failed(0), "a new request, not failed yet");
        t.reopen_ports();
        assert!(t.gens.latest_failed(0));
        assert!(t.reopen_warned[0], "reported once, then only counted");
        t.publish();
        let p = published(&t).ports[0];
        assert_eq!((p.rx_packets, p.tx_dropped), (3, 1));
        assert_eq!(published(&t).reopen_failed, 2);
        assert!(t.poll_set().is_empty(), "a placeholder has nothing to poll");
    }

    #[test]
    fn fanout_ids_differ_across_generations_and_ports() {
        for n_ports in [1usize, 3, 8] {
            let mut seen = std::collections::HashSet::new();
            for generation in 0..64u64 {
                for i in 0..n_ports {
                    assert!(
                        seen.insert(fanout_id(0xfff0, n_ports, i, generation)),
                        "n_ports {n_ports} port {i} generation {generation}"
                    );
                }
            }
        }
        // Generation 0 keeps the start-up layout: base + index.
        assert_eq!(fanout_id(100, 4, 2, 0), 102);
    }
}
