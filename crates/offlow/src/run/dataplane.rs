//! The data plane: packet worker threads moving frames between the ports
//! and the datapath's [`Worker`]s.
//!
//! Each worker thread owns one [`AfPacketPort`] per configured interface
//! (with several workers, the ports of one interface form a fanout group:
//! the kernel's symmetric flow hash picks the worker, so both directions of
//! a flow meet the same microflow cache) and a [`Worker`]. A round of the
//! loop takes up to [`BATCH`] frames from each port, copies them into
//! reused [`PacketBuf`]s (re-inserting a VLAN tag the kernel stripped and
//! finishing partial checksums, so what is forwarded is what was on the
//! wire), runs them through the worker, queues the outputs on the ports'
//! transmit batches and flushes those. An idle worker answers counter
//! syncs ([`Worker::poll`]) and, after a few empty rounds, sleeps in
//! `poll(2)` on its ports for at most [`IDLE_SLEEP`].
//!
//! Frames for the controller (Output:CONTROLLER) are copied into a bounded
//! channel to the control thread; when it is full they are counted and
//! dropped ([`DataplaneStats::packet_in_dropped`]), never waited for.
//!
//! Invariants: no allocation per packet except packet-in copies; no lock
//! on the packet path (statistics are published to a per-worker mutex
//! every [`PUBLISH_EVERY`], which only the control thread also takes).
//!
//! Thread-safety: a worker thread owns its ports, buffers and [`Worker`];
//! it meets the control thread only through the datapath's `Control`
//! (read side), the packet-in channel, its stats slot and the stop flag.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context;
use offlow_datapath::{
    OutputMeta, OutputSink, PacketBuf, PortInfo, Worker, WorkerStats, DEFAULT_HEADROOM,
};
use offlow_io::afxdp::{AfXdpConfig, AfXdpPort};
use offlow_io::pcap::PcapPort;
use offlow_io::{csum, netns::in_netns, AfPacketConfig, AfPacketPort, Port, PortStats, RxMeta};

use super::config::PortKind;
use tokio::sync::mpsc;
use tracing::{info, warn};

/// Bytes of an Ethernet header (two addresses and the EtherType).
const ETH_HLEN: usize = 14;
/// Frames taken from one port per round.
pub const BATCH: usize = 32;
/// Largest frame a worker buffer holds (beyond the headroom).
pub const MAX_FRAME: usize = 2048;
/// Longest idle sleep (bounds the latency of stop and counter syncs).
pub const IDLE_SLEEP: Duration = Duration::from_millis(2);
/// Empty rounds before a worker sleeps.
const SPIN_ROUNDS: u32 = 64;
/// How often a worker publishes its statistics.
pub const PUBLISH_EVERY: Duration = Duration::from_millis(20);
/// Packet-ins queued towards the control thread before drops.
pub const PACKET_IN_QUEUE: usize = 1024;

/// A frame for the controller (`OFPR_ACTION` or a table-miss entry's
/// output to CONTROLLER).
#[derive(Debug)]
pub struct PacketInFrame {
    /// Port it arrived on.
    pub in_port: u32,
    /// The frame, cut to the output's `max_len`.
    pub data: Vec<u8>,
    /// Its full length.
    pub total_len: usize,
}

/// One configured data port as the workers see it.
#[derive(Debug, Clone)]
pub struct DataPort {
    /// Linux interface (or the capture port's name).
    pub ifname: String,
    /// OpenFlow port number.
    pub number: u32,
    /// What carries its frames.
    pub kind: PortKind,
}

/// Counters of one worker thread.
#[derive(Debug, Clone, Default)]
pub struct DataplaneStats {
    /// The datapath worker's counters.
    pub worker: WorkerStats,
    /// Per port the workers serve, in configuration order.
    pub ports: Vec<PortStats>,
    /// Their OpenFlow numbers (filled in sums from a [`StatsHandle`]).
    pub port_numbers: Vec<u32>,
    /// Frames longer than [`MAX_FRAME`] (dropped).
    pub oversize: u64,
    /// Frames shorter than an Ethernet header (dropped).
    pub runts: u64,
    /// Ports that reported an error and are no longer polled.
    pub failed_ports: u64,
    /// Partial checksums finished in software.
    pub csum_finished: u64,
    /// Outputs to a port number this switch does not have (or LOCAL).
    pub drop_unknown_port: u64,
    /// Packet-ins dropped because the control thread was behind.
    pub packet_in_dropped: u64,
    /// Packet-ins queued.
    pub packet_ins: u64,
}

impl DataplaneStats {
    /// The counters of OpenFlow port `number`, if a worker serves it.
    pub fn port(&self, number: u32) -> Option<PortStats> {
        let i = self.port_numbers.iter().position(|&n| n == number)?;
        self.ports.get(i).copied()
    }

    /// Field-wise sum (ports by position).
    pub fn add(&mut self, o: &DataplaneStats) {
        let w = &mut self.worker;
        let v = &o.worker;
        w.packets += v.packets;
        w.bytes += v.bytes;
        w.batches += v.batches;
        w.cache_hits += v.cache_hits;
        w.stale_hits += v.stale_hits;
        w.filter_checks += v.filter_checks;
        w.pipeline_lookups += v.pipeline_lookups;
        w.drop_table_miss += v.drop_table_miss;
        w.drop_no_output += v.drop_no_output;
        w.drop_ttl += v.drop_ttl;
        w.outputs += v.outputs;
        w.stale += v.stale;
        w.records_applied += v.records_applied;
        w.log_overruns += v.log_overruns;
        if self.ports.len() < o.ports.len() {
            self.ports.resize(o.ports.len(), PortStats::default());
        }
        for (a, b) in self.ports.iter_mut().zip(&o.ports) {
            a.add(b);
        }
        self.oversize += o.oversize;
        self.runts += o.runts;
        self.failed_ports += o.failed_ports;
        self.csum_finished += o.csum_finished;
        self.drop_unknown_port += o.drop_unknown_port;
        self.packet_in_dropped += o.packet_in_dropped;
        self.packet_ins += o.packet_ins;
    }
}

/// Reads the workers' published counters from any thread (they are at
/// most [`PUBLISH_EVERY`] old).
#[derive(Clone)]
pub struct StatsHandle {
    slots: Vec<Arc<Mutex<DataplaneStats>>>,
    /// OpenFlow numbers of the ports, in the order of `DataplaneStats::ports`.
    numbers: Vec<u32>,
}

impl StatsHandle {
    /// Sum over the workers.
    pub fn stats(&self) -> DataplaneStats {
        let mut total = DataplaneStats {
            ports: vec![PortStats::default(); self.numbers.len()],
            port_numbers: self.numbers.clone(),
            ..DataplaneStats::default()
        };
        for s in &self.slots {
            total.add(&lock(s));
        }
        total
    }
}

/// The running worker threads.
pub struct Dataplane {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    slots: Vec<Arc<Mutex<DataplaneStats>>>,
    ports: Vec<DataPort>,
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
}

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
        let mut per_worker: Vec<Vec<Box<dyn Port>>> = Vec::new();
        for _ in 0..n_workers {
            let mut ports: Vec<Box<dyn Port>> = Vec::new();
            for (i, p) in cfg.ports.iter().enumerate() {
                let port: Box<dyn Port> = match &p.kind {
                    PortKind::AfPacket => {
                        let mut pc = AfPacketConfig::new(&p.ifname);
                        if n_workers > 1 {
                            pc.fanout_group = Some(base.wrapping_add(i as u16));
                        }
                        let port = in_netns(cfg.netns, || AfPacketPort::open(&pc))
                            .context("entering the ports' network namespace")?
                            .with_context(|| format!("opening port {} ({})", p.number, p.ifname))?;
                        Box::new(port)
                    }
                    PortKind::AfXdp => {
                        let xc = AfXdpConfig::new(&p.ifname);
                        let port = in_netns(cfg.netns, || AfXdpPort::open(&xc))
                            .context("entering the ports' network namespace")?
                            .with_context(|| {
                                format!("opening AF_XDP port {} ({})", p.number, p.ifname)
                            })?;
                        info!(port = p.number, ifname = %p.ifname,
                            xdp_mode = ?port.program().map(|p| p.mode()), zerocopy = port.zerocopy(),
                            "AF_XDP port open");
                        Box::new(port)
                    }
                    // The configuration allows capture ports with one
                    // worker only: this is it.
                    PortKind::Pcap { input, output } => Box::new(
                        PcapPort::open(&p.ifname, input.as_deref(), output.as_deref())
                            .with_context(|| format!("opening capture port {}", p.number))?,
                    ),
                };
                ports.push(port);
            }
            per_worker.push(ports);
        }
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
        for (i, (worker, ports)) in cfg.workers.into_iter().zip(per_worker).enumerate() {
            let slot = Arc::new(Mutex::new(DataplaneStats {
                ports: vec![PortStats::default(); ports.len()],
                ..DataplaneStats::default()
            }));
            slots.push(slot.clone());
            let core = (!cfg.cores.is_empty()).then(|| cfg.cores[i % cfg.cores.len()]);
            let mut t = WorkerThread {
                worker,
                ports,
                sink: PortSink {
                    infos: infos.clone(),
                    pending: vec![false; infos.len()],
                    packet_in: cfg.packet_in.clone(),
                    drop_unknown_port: 0,
                    packet_in_dropped: 0,
                    packet_ins: 0,
                    in_port: 0,
                    ports_tx: Vec::new(),
                },
                stop: stop.clone(),
                slot,
                oversize: 0,
                runts: 0,
                csum_finished: 0,
                failed_ports: 0,
            };
            let h = std::thread::Builder::new()
                .name(format!("offlow-worker-{i}"))
                .spawn(move || {
                    if let Some(c) = core {
                        pin_to(c);
                    }
                    t.run();
                })
                .context("starting a worker thread")?;
            threads.push(h);
        }
        info!(
            workers = n_workers,
            ports = cfg.ports.len(),
            "data plane running"
        );
        Ok(Dataplane {
            stop,
            threads,
            slots,
            ports: cfg.ports.to_vec(),
        })
    }

    /// Sum of every worker's last published counters.
    pub fn stats(&self) -> DataplaneStats {
        self.stats_handle().stats()
    }

    /// A handle other threads can read the counters through.
    pub fn stats_handle(&self) -> StatsHandle {
        StatsHandle {
            slots: self.slots.clone(),
            numbers: self.ports.iter().map(|p| p.number).collect(),
        }
    }

    /// Stop the workers and wait for them (they flush their counters).
    pub fn stop(mut self) -> DataplaneStats {
        self.shutdown();
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

/// Where a worker's outputs go while it processes one port's batch.
struct PortSink {
    infos: Vec<PortInfo>,
    /// Ports with frames queued since the last flush.
    pending: Vec<bool>,
    packet_in: mpsc::Sender<PacketInFrame>,
    drop_unknown_port: u64,
    packet_in_dropped: u64,
    packet_ins: u64,
    /// Port the current batch came from.
    in_port: u32,
    /// The ports, lent for one batch (taken back after `process`).
    ports_tx: Vec<Box<dyn Port>>,
}

impl OutputSink for PortSink {
    fn output(&mut self, port: u32, frame: &[u8], _meta: OutputMeta) {
        match self.infos.iter().position(|p| p.port == port) {
            Some(i) => {
                if let Some(p) = self.ports_tx.get_mut(i) {
                    p.send(frame);
                    self.pending[i] = true;
                }
            }
            None => self.drop_unknown_port += 1,
        }
    }

    fn controller(&mut self, frame: &[u8], total_len: usize, _meta: OutputMeta) {
        let pi = PacketInFrame {
            in_port: self.in_port,
            data: frame.to_vec(),
            total_len,
        };
        match self.packet_in.try_send(pi) {
            Ok(()) => self.packet_ins += 1,
            Err(_) => self.packet_in_dropped += 1,
        }
    }

    fn port_count(&self) -> usize {
        self.infos.len()
    }

    fn port_info(&self, index: usize) -> Option<PortInfo> {
        self.infos.get(index).copied()
    }
}

struct WorkerThread {
    worker: Worker,
    ports: Vec<Box<dyn Port>>,
    sink: PortSink,
    stop: Arc<AtomicBool>,
    slot: Arc<Mutex<DataplaneStats>>,
    oversize: u64,
    runts: u64,
    csum_finished: u64,
    failed_ports: u64,
}

impl WorkerThread {
    fn run(&mut self) {
        let mut bufs: Vec<PacketBuf> = (0..BATCH)
            .map(|_| PacketBuf::new(DEFAULT_HEADROOM, MAX_FRAME))
            .collect();
        let fds: Vec<RawFd> = self.ports.iter().filter_map(|p| p.poll_fd()).collect();
        let mut pollfds: Vec<libc::pollfd> = fds
            .iter()
            .map(|&fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let mut idle = 0u32;
        let mut last_publish = Instant::now();
        while !self.stop.load(Ordering::Acquire) {
            let mut any = false;
            for i in 0..self.ports.len() {
                let n = self.receive(i, &mut bufs);
                if n == 0 {
                    continue;
                }
                any = true;
                let in_port = self.sink.infos[i].port;
                self.sink.in_port = in_port;
                // Lend the ports to the sink for the batch's outputs.
                self.sink.ports_tx = std::mem::take(&mut self.ports);
                self.worker.process(&mut bufs[..n], in_port, &mut self.sink);
                self.ports = std::mem::take(&mut self.sink.ports_tx);
            }
            for (i, p) in self.ports.iter_mut().enumerate() {
                if std::mem::take(&mut self.sink.pending[i]) {
                    // Refused frames are counted by the port.
                    let _ = p.flush();
                }
            }
            if any {
                idle = 0;
            } else {
                self.worker.poll();
                idle += 1;
                if idle > SPIN_ROUNDS {
                    self.worker.flush_counters();
                    // SAFETY: `pollfds` is a live array of its length.
                    let ready = unsafe {
                        libc::poll(
                            pollfds.as_mut_ptr(),
                            pollfds.len() as libc::nfds_t,
                            IDLE_SLEEP.as_millis() as libc::c_int,
                        )
                    };
                    if ready > 0 {
                        self.check_port_errors(&mut pollfds);
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
    }

    /// A port whose interface went away (or failed) reports an error on
    /// every poll: read it (which clears it), report it once, and stop
    /// polling that descriptor so an idle worker does not spin. The port
    /// stays in the list: its sends are counted as dropped, and the control
    /// side announces it down (PORT_STATUS).
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
            let name = self
                .ports
                .iter()
                .find(|p| p.poll_fd() == Some(pfd.fd))
                .map_or("?", |p| p.name());
            warn!(
                port = name,
                error = %std::io::Error::from_raw_os_error(err),
                "port failed (interface gone or down); no longer polled, the others keep forwarding"
            );
            self.failed_ports += 1;
            // poll(2) ignores negative descriptors.
            pfd.fd = -1;
        }
    }

    /// Copy up to a batch from port `i` into `bufs`; returns the count.
    fn receive(&mut self, i: usize, bufs: &mut [PacketBuf]) -> usize {
        let mut n = 0;
        let oversize = &mut self.oversize;
        let runts = &mut self.runts;
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

    fn publish(&mut self) {
        let mut s = lock(&self.slot);
        s.worker = self.worker.stats();
        for (d, p) in s.ports.iter_mut().zip(self.ports.iter_mut()) {
            *d = p.stats();
        }
        s.oversize = self.oversize;
        s.runts = self.runts;
        s.failed_ports = self.failed_ports;
        s.csum_finished = self.csum_finished;
        s.drop_unknown_port = self.sink.drop_unknown_port;
        s.packet_in_dropped = self.sink.packet_in_dropped;
        s.packet_ins = self.sink.packet_ins;
    }
}
