//! The control loop: OpenFlow connections, packet-ins, link polling and
//! expiry, around one [`DatapathSwitch`].
//!
//! What: a single-threaded tokio runtime (`current_thread` + `LocalSet`)
//! serving OpenFlow 1.3 controllers over TCP, passive (`ptcp:`) and active
//! (`tcp:`, reconnected with exponential backoff from 100 ms doubling to
//! 8 s), all answering through one [`DatapathSwitch`] and one shared
//! [`Roles`]. With data ports configured, packet worker threads serve them
//! (see below); without, the switch runs with zero ports.
//!
//! Each connection is one task driving the sans-IO
//! [`offlow_openflow::Connection`]: flush its outbox, then wait for bytes,
//! its timer ([`Connection::poll_timeout`]) or the stop signal; received
//! bytes go to [`Connection::receive`] and the batch's flow-mods are
//! committed right after ([`DatapathSwitch::commit_pending`]), so changes
//! take effect without a barrier. Because the outbox is written out in full
//! before the next read, a controller that does not read its replies stops
//! being read from (the outbox never grows past one read's replies).
//! On close the outbox is flushed first (it usually holds the error that
//! explains the close), then the socket is shut and [`Roles::release`]
//! called. When the embedder's stop future resolves (the binary: SIGINT or
//! SIGTERM), every connection is closed (flushing) and the switch stops.
//!
//! Nothing here waits for the packet workers while other connections
//! could be served. Flow-mods are published at the end of each read
//! ([`DatapathSwitch::commit_pending`] returns at once); a request that
//! needs the workers (a barrier: every worker past a quiescent point; a
//! statistics request: their counters credited; a flow-mod while the last
//! publish settles) makes its connection wait ([`Connection::is_waiting`]):
//! that connection stops reading and re-checks ([`Connection::resume`]) at
//! every turn of the event loop for `WAIT_SPIN`, then every
//! millisecond, while the others go on. The expiry scan waits the same
//! way (its counter sync, and the settle and final counts of the entries
//! it removed). Blocking waits remain where they are rare or short: a
//! DELETE of flows flagged SEND_FLOW_REM (their final counts),
//! the install of compiled tables, and a change the switch makes itself
//! (expiry, standalone learning) while the last publish still settles
//! (it waits for the workers' current batches). A FLOW_REMOVED caused by
//! a DELETE travels through the event channel and may reach its
//! connection after the barrier reply that follows the DELETE (as before
//! this loop's rework; OpenFlow 1.3.5 §6.2.1 would have it first).
//!
//! Invariants: the switch and the roles live in one `RefCell`, borrowed
//! only between awaits, never across one; so each controller message is
//! handled to completion before any other connection's (the ordering the
//! connection module documents for barriers holds switch-wide: a barrier
//! reply is sent only once the switch reports its commit settled).
//!
//! Data ports ([`crate::dataplane`]): with ports configured, packet worker
//! threads move frames between the interfaces and the datapath; frames
//! they send to CONTROLLER come back here over a bounded channel, each with
//! the flow entry that sent it (the packet's own resolution: table, cookie,
//! table-miss or not, so reason, table id and cookie are exact even when
//! the frame was rewritten on the way), and become PACKET_IN messages to
//! every connection (each filters by its role and async config), or, in standalone fail mode while no active controller
//! is connected, feed the MAC learning of [`crate::standalone`]. Link state is
//! re-read every [`LINK_POLL`]; a change is announced as PORT_STATUS. A
//! port whose interface is missing at start, or disappears later, is
//! listed down and re-opened everywhere (packet-out socket and every
//! worker's socket) once an interface of its name exists again in the
//! ports' namespace; that poll announces it up.
//!
//! Thread-safety: the control side runs on the runtime's one thread (`Rc`,
//! `RefCell`); packet workers run on their own threads and meet it only
//! through `Control`, the packet-in channel and their statistics slots.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use offlow_datapath::WorkerConfig;
use offlow_flow::{Field, Match};
use offlow_io::netns::in_netns;
use offlow_io::AfPacketTx;
use offlow_openflow::{
    AsyncConfig, Body, ConnConfig, ConnId, Connection, ControllerRole, FlowRemoved, OxmMatch,
    PacketIn, PortStatus, Roles,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{broadcast, mpsc, watch};
use tracing::{debug, info, warn};

use crate::adapter::{DatapathSwitch, SwitchPort};
use crate::config::{Endpoint, FailMode, InitialFlow, InitialGroup, PortKind, SwitchConfig};
use crate::dataplane::{self, DataPort, Dataplane, DataplaneConfig, ExternalXsk, PacketInFrame};
use crate::offload::OffloadTier;
use crate::standalone::Standalone;
use offlow_offload::xdp::{AttachPolicy, MissPath, XdpBackend, XdpConfig, XdpPort};
use offlow_offload::OffloadBackend;

/// How often timed-out flow entries are looked for. A scan's FLOW_REMOVEDs,
/// which a controller handles before the packet-ins queued behind them,
/// came in one burst until [`FLOW_REMOVED_SPREAD`]: with per-connection
/// flows (the source-NAT app at ~1,000 connections/s, two flows each) a
/// 250 ms period made bursts of ~500 that held packet-ins back by tens of
/// milliseconds (connect p99 39 ms; 15–17 ms at 50 ms, bursts of ~100),
/// and the period is still what sets a report's size. A scan with
/// nothing timed costs nothing; one with timed entries asks the workers
/// to credit their counters first, a wakeup each. Large tables stretch the
/// period (see [`EXPIRY_DUTY`]).
pub const EXPIRY_EVERY: Duration = Duration::from_millis(50);
/// A scan reads every timed entry (about 2 ms for 100K of them, see
/// offlow-pipeline's expiry module): the period is at least this many
/// times the last scan's duration, so scans take at most 1/40 of the
/// control thread whatever the table size.
pub const EXPIRY_DUTY: u32 = 40;
/// The period's floor while scans find flows flagged SEND_FLOW_REM to
/// report: smaller bursts of FLOW_REMOVEDs for a controller to get through
/// before the packet-ins behind them (`bench setup`'s NAT rows: connect
/// p99 24.7, 22.1 → 12.6, 13.7 ms; the rate unchanged).
pub const EXPIRY_BUSY_EVERY: Duration = Duration::from_millis(10);
/// [`EXPIRY_DUTY`] while scans find flows to report: up to a tenth of the
/// control thread (a scan of ~12,000 timed entries and its ~60 removals
/// takes 0.3–1 ms; 100K timed entries, about 2 ms, stretch the period to
/// 20 ms).
pub const EXPIRY_BUSY_DUTY: u32 = 10;
/// How long scans stay at [`EXPIRY_BUSY_EVERY`] after one that reported.
pub const EXPIRY_BUSY_HOLD: Duration = Duration::from_secs(5);
/// The longest period: idle expiry is late by at most one period, and
/// timeouts are whole seconds.
pub const EXPIRY_MAX: Duration = Duration::from_millis(500);
/// An expiry scan's FLOW_REMOVEDs are handed to the connections over this
/// long, an equal share every [`FLOW_REMOVED_TICK`], not all at once: a
/// controller handles each connection's messages in order, so a packet-in
/// written behind a scan's whole report waits for all of it (os-ken spent
/// ~70 µs of CPU on each FLOW_REMOVED of the source-NAT app's flows before
/// the app deferred its parse of the match: a report of 50 was 3–4 ms).
/// Spread out, a packet-in waits behind a few at most. Expiry reports are late by at
/// most this much more (their flows are already gone; barrier replies do
/// not wait for them, as the spec allows for asynchronous messages).
pub const FLOW_REMOVED_SPREAD: Duration = Duration::from_millis(10);
/// See [`FLOW_REMOVED_SPREAD`].
pub const FLOW_REMOVED_TICK: Duration = Duration::from_millis(1);
/// How often port link state is re-read.
pub const LINK_POLL: Duration = Duration::from_secs(1);
/// Asynchronous messages queued per connection before the oldest are lost.
/// Expiry hands a scan's FLOW_REMOVEDs over in shares a millisecond apart
/// ([`FLOW_REMOVED_SPREAD`]), but a slow connection still falls behind by
/// whole scans: a switch whose flows expire at 10,000 a second (`bench
/// setup`'s NAT rows at 16 clients, when scans came ~500 ms apart) queued
/// ~5,000 per scan, and lost ~8,500 in ten seconds at 4,096. A slot is an
/// `Arc`.
const EVENT_QUEUE: usize = 1 << 16;
use offlow_openflow::packet_in_reason::{
    ACTION as OFPR_ACTION, INVALID_TTL as OFPR_INVALID_TTL, NO_MATCH as OFPR_NO_MATCH,
};
use offlow_openflow::port_reason::MODIFY as OFPPR_MODIFY;

/// First reconnection delay of an active connection.
const BACKOFF_MIN: Duration = Duration::from_millis(100);
/// Largest reconnection delay.
const BACKOFF_MAX: Duration = Duration::from_secs(8);
/// How long shutdown waits for connections to flush.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);
/// Socket read size.
const READ_BUF: usize = 64 * 1024;
/// Extra non-blocking reads taken after a wakeup before replies are written.
const DRAIN_READS: usize = 64;
/// Stop draining once this many reply bytes are queued.
const DRAIN_MAX_OUTBOX: usize = 256 * 1024;

/// State every connection task shares.
struct Shared {
    switch: DatapathSwitch,
    roles: Roles,
    /// Origin of the connections' nanosecond clock.
    epoch: Instant,
    /// Connection tasks still running (for a graceful stop).
    live: usize,
    /// Asynchronous messages for every connection.
    events: broadcast::Sender<Arc<Body>>,
    /// Active (`tcp:`) controller connections negotiated now.
    active_controllers: usize,
    /// Connections of either kind negotiated now.
    negotiated: usize,
    /// Shared with the workers: see `DataplaneConfig::packet_in_wanted`.
    packet_in_wanted: Arc<AtomicU32>,
    /// Per negotiated connection: its async configuration and the role it
    /// asked for (its packet-in mask follows from them and [`Roles`]).
    conn_wants: HashMap<ConnId, (AsyncConfig, ControllerRole)>,
    fail_mode: FailMode,
    standalone: Standalone,
}

impl Shared {
    fn now_ns(&self) -> u64 {
        // u64 nanoseconds last 584 years.
        self.epoch.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64
    }
}

type SharedRc = Rc<RefCell<Shared>>;

/// What an embedder (the demo) gets once the switch runs.
pub struct Running {
    /// The packet workers' counters (`None`: no data ports).
    pub stats: Option<dataplane::StatsHandle>,
    /// The offload tier's counters (`None`: no tier running).
    pub offload: Option<crate::offload::OffloadStatsHandle>,
}

/// Run the switch on the calling thread until `stop` resolves; `ready`
/// receives a [`Running`] once ports and listeners are up.
pub fn run_blocking(
    cfg: SwitchConfig,
    stop: impl std::future::Future<Output = std::io::Result<&'static str>>,
    ready: Option<std::sync::mpsc::Sender<Running>>,
) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, run(cfg, stop, ready))
}

/// Install the groups given at start; a refused one names its origin.
fn install_groups(switch: &mut DatapathSwitch, groups: &[InitialGroup]) -> anyhow::Result<()> {
    for g in groups {
        switch
            .pipeline_group_mod(&g.group_mod)
            .map_err(|e| anyhow::anyhow!("{}: refused: {e:?}", g.origin))?;
    }
    switch.commit_pending();
    Ok(())
}

/// Install the flows given at start; a refused one names its origin.
fn install_flows(switch: &mut DatapathSwitch, flows: &[InitialFlow]) -> anyhow::Result<()> {
    for f in flows {
        switch
            .pipeline_flow_mod(&f.flow_mod, 0)
            .map_err(|e| anyhow::anyhow!("{}: refused: {e:?}", f.origin))?;
    }
    switch.commit_pending();
    Ok(())
}

/// Open the packet-out sockets and start the workers.
fn start_ports(
    switch: &mut DatapathSwitch,
    cfg: &SwitchConfig,
    packet_in_wanted: Arc<AtomicU32>,
) -> anyhow::Result<Option<mpsc::Receiver<PacketInFrame>>> {
    if cfg.ports.is_empty() {
        return Ok(None);
    }
    let netns = cfg.netns.as_deref();
    let mut ports = Vec::new();
    let mut data_ports = Vec::new();
    for p in &cfg.ports {
        let mut missing = false;
        let (tx, link) = match p.kind {
            // Packet-outs leave through a transmit-only packet socket for
            // either kind of interface port.
            PortKind::AfPacket | PortKind::AfXdp => {
                let exists = in_netns(netns, || offlow_io::afpacket::ifindex(&p.name))
                    .context("entering the ports' network namespace")?;
                if let Err(e) = exists {
                    // Reported, and the switch runs with its other ports;
                    // the port is listed down, takes no traffic (the
                    // workers hold a placeholder) and is opened once an
                    // interface of its name appears (`link_loop`).
                    warn!(port = p.number, name = %p.name, error = %e,
                        "port interface not found: the port is down until it appears");
                    missing = true;
                    (None, offlow_io::LinkState::default())
                } else {
                    let tx = in_netns(netns, || AfPacketTx::open(&p.name))
                        .context("entering the ports' network namespace")?
                        .with_context(|| format!("opening port {} ({})", p.number, p.name))?;
                    let link = tx
                        .link()
                        .with_context(|| format!("reading the link state of {}", p.name))?;
                    (Some(tx), link)
                }
            }
            // A capture port is always up; packet-outs to it are dropped
            // (its file belongs to the worker). A tunnel port is up too
            // (point to point, no liveness protocol): Open vSwitch shows
            // its tunnel ports up whatever the far end does.
            PortKind::Pcap { .. } | PortKind::Tunnel(_) => (
                None,
                offlow_io::LinkState {
                    hw_addr: [0; 6],
                    admin_up: true,
                    link_up: true,
                },
            ),
        };
        let interface = p.kind.is_interface();
        let port = SwitchPort::new(p.number, &p.name, interface, tx, link);
        ports.push(if p.kind == PortKind::AfPacket {
            port.counting_interface_drops()
        } else {
            port
        });
        data_ports.push(DataPort {
            ifname: p.name.clone(),
            number: p.number,
            kind: p.kind.clone(),
            missing,
        });
    }
    // A tunnel without a configured outer source address sends with its
    // underlay interface's (read just above; a missing or capture
    // underlay has none, so its tunnel sends from 00:00:00:00:00:00 until
    // configured: said once here). Its switch port then gets the finished
    // endpoint, for packet-outs.
    for d in data_ports.iter_mut() {
        let PortKind::Tunnel(t) = &mut d.kind else {
            continue;
        };
        if t.local_mac_from_underlay {
            match ports.iter().find(|p: &&SwitchPort| p.number == t.underlay) {
                Some(u) if u.link.hw_addr != [0; 6] => t.endpoint.local_mac = u.link.hw_addr,
                _ => warn!(
                    port = d.number,
                    underlay = t.underlay,
                    "tunnel port: the underlay's Ethernet address is unknown; set local_mac"
                ),
            }
        }
        if let Some(p) = ports.iter_mut().find(|p| p.number == d.number) {
            p.tunnel = Some((t.endpoint, t.underlay));
        }
    }
    // The offload tier's program goes on first: AF_XDP ports register
    // their sockets in its map instead of attaching a program of their own.
    let (backend, external_xsks) = match &cfg.offload {
        crate::config::Offload::Off => (None, Vec::new()),
        crate::config::Offload::On(o) => match open_xdp_backend(cfg, &data_ports, o) {
            Ok((b, ext)) => (Some(b), ext),
            Err(e) => {
                // Reported with its reason; the switch forwards in software.
                warn!(error = %format!("{e:#}"), hook = %o.hook,
                    "offload tier off: the kernel backend could not start");
                (None, Vec::new())
            }
        },
    };
    let workers = (0..cfg.workers)
        .map(|_| {
            switch.new_worker(WorkerConfig {
                cache_capacity: cfg.cache_size,
                ..WorkerConfig::default()
            })
        })
        .collect();
    let (tx, rx) = mpsc::channel(dataplane::PACKET_IN_QUEUE);
    let dp = Dataplane::start(DataplaneConfig {
        ports: &data_ports,
        netns,
        workers,
        cores: &cfg.cores,
        packet_in: tx,
        packet_in_wanted,
        steering: cfg.steering.clone(),
        sample_every: match (&cfg.offload, &backend) {
            (crate::config::Offload::On(o), Some(_)) => Some(o.sample_every),
            _ => None,
        },
        external_xsks,
        receive: cfg.receive,
        // At TC ingress the program marks what it sends up, and the ports'
        // sockets must take only that (they see every frame before TC).
        af_packet_mark: backend
            .as_ref()
            .filter(|b| b.hook() == offlow_offload::xdp::Hook::Tc)
            .map(|_| offlow_offload::xdp::TC_UP_MARK),
    })?;
    switch.attach(ports, dp, cfg.netns.clone());
    if let (Some(mut b), crate::config::Offload::On(o)) = (backend, &cfg.offload) {
        // Steering entries (the offlow_workers action) reach a pinned
        // worker's CPU in the kernel; unpinned workers have no fixed CPU, so
        // such frames go up and are steered in software.
        if !cfg.cores.is_empty() {
            for w in 0..cfg.workers {
                let cpu = cfg.cores[w % cfg.cores.len()] as u32;
                if let Err(e) = b.set_worker_cpu(w as u32, cpu, 0) {
                    warn!(worker = w, cpu, error = %e, "offload: no CPU steering for this worker");
                }
            }
        }
        let mut tier = OffloadTier::new(Box::new(b), o.placement)
            .context("starting the offload tier's thread")?;
        // Keep-up pins first: a flow both lists name stays up.
        for m in &o.pin_up {
            tier.pin_matching(*m, offlow_offload::Pin::Up);
        }
        for m in &o.pin_down {
            tier.pin_matching(*m, offlow_offload::Pin::Down);
        }
        switch.set_offload(tier);
    }
    Ok(Some(rx))
}

/// Open the XDP offload backend on the interface ports (inside the ports'
/// namespace), and the socket maps the AF_XDP ports register in.
fn open_xdp_backend(
    cfg: &SwitchConfig,
    data_ports: &[DataPort],
    o: &crate::config::OffloadOptions,
) -> anyhow::Result<(XdpBackend, Vec<Option<ExternalXsk>>)> {
    let ports: Vec<XdpPort> = data_ports
        .iter()
        .filter(|p| !p.missing && p.kind.is_interface())
        .map(|p| XdpPort {
            ofport: p.number,
            ifname: p.ifname.clone(),
            miss: if p.kind == PortKind::AfXdp {
                MissPath::Xsk
            } else {
                MissPath::Pass
            },
        })
        .collect();
    if ports.is_empty() {
        anyhow::bail!("no interface ports to attach to");
    }
    let mut xc = XdpConfig::new(ports, o.room);
    xc.hook = o.hook;
    if o.generic {
        xc.attach = AttachPolicy::Generic;
    }
    // Tunnel ports over an attached underlay, in configuration order (the
    // order the packet threads classify in, so both tiers pick the same
    // tunnel for a frame); a tunnel over a missing or capture underlay
    // stays in software.
    xc.tunnels = data_ports
        .iter()
        .filter_map(|p| match &p.kind {
            PortKind::Tunnel(t) if xc.ports.iter().any(|x| x.ofport == t.underlay) => {
                Some(offlow_offload::tunnel::TunnelPort {
                    ofport: p.number,
                    endpoint: t.endpoint,
                    underlay: t.underlay,
                })
            }
            _ => None,
        })
        .collect();
    let backend = in_netns(cfg.netns.as_deref(), || XdpBackend::open(&xc))
        .context("entering the ports' network namespace")??;
    let attached = backend.ports();
    let mut external = Vec::new();
    for p in data_ports {
        let ext = match attached.iter().find(|a| a.ofport == p.number) {
            Some(a) if p.kind == PortKind::AfXdp => Some(ExternalXsk {
                map: backend
                    .xsk_map_fd()
                    .try_clone_to_owned()
                    .context("copying the offload socket map")?,
                key_base: backend.xsk_key_base(a.ifindex)?,
                ifindex: a.ifindex,
                native: a.mode == offlow_offload::xdp::XdpMode::Native,
            }),
            _ => None,
        };
        external.push(ext);
    }
    info!(backend = %backend.describe(), "offload tier: kernel program attached");
    Ok((backend, external))
}

/// Run the switch until `stop` resolves (its value is logged as the
/// reason); `ready` receives a [`Running`] once ports and listeners are up.
/// Must run inside a tokio `LocalSet` on a current-thread runtime: the
/// control side is single-threaded ([`run_blocking`] sets that up).
pub async fn run(
    cfg: SwitchConfig,
    stop: impl std::future::Future<Output = std::io::Result<&'static str>>,
    ready: Option<std::sync::mpsc::Sender<Running>>,
) -> anyhow::Result<()> {
    let mut switch = DatapathSwitch::new(cfg.dpid, cfg.tables);
    if !cfg.groups.is_empty() {
        install_groups(&mut switch, &cfg.groups)?;
        info!(groups = cfg.groups.len(), "groups installed");
    }
    if !cfg.flows.is_empty() {
        install_flows(&mut switch, &cfg.flows)?;
        info!(flows = cfg.flows.len(), "flows installed");
    }
    let packet_in_wanted = Arc::new(AtomicU32::new(0));
    let packet_ins = start_ports(&mut switch, &cfg, packet_in_wanted.clone())?;
    let (events, _) = broadcast::channel(EVENT_QUEUE);
    let shared: SharedRc = Rc::new(RefCell::new(Shared {
        switch,
        roles: Roles::new(),
        epoch: Instant::now(),
        live: 0,
        events,
        active_controllers: 0,
        negotiated: 0,
        packet_in_wanted,
        conn_wants: HashMap::new(),
        fail_mode: cfg.fail_mode,
        standalone: Standalone::default(),
    }));
    {
        let mut s = shared.borrow_mut();
        if s.fail_mode == FailMode::Standalone {
            let now = s.now_ns();
            let Shared {
                switch, standalone, ..
            } = &mut *s;
            standalone.engage(switch, now);
        }
        update_packet_in_wanted(&s);
    }
    // Bind every listener before anything else so a bad address fails the
    // start, not some later moment.
    let mut listeners = Vec::new();
    for ep in &cfg.listen {
        if let Endpoint::Passive(addr) = ep {
            let l = TcpListener::bind(addr)
                .await
                .with_context(|| format!("listening on {ep}"))?;
            let local = l.local_addr().unwrap_or(*addr);
            info!(%local, "listening for OpenFlow controllers");
            listeners.push(l);
        }
    }
    info!(
        dpid = format_args!("{:#018x}", cfg.dpid),
        tables = cfg.tables,
        ports = cfg.ports.len(),
        workers = if cfg.ports.is_empty() { 0 } else { cfg.workers },
        fail_mode = ?cfg.fail_mode,
        controllers = cfg.controllers.len(),
        "offlow switch running"
    );
    let (stop_tx, stop_rx) = watch::channel(false);
    let (reports, paced) = mpsc::unbounded_channel();
    tokio::task::spawn_local(expiry_loop(shared.clone(), reports, stop_rx.clone()));
    tokio::task::spawn_local(flow_removed_pacer(paced, shared.clone(), stop_rx.clone()));
    if shared.borrow().switch.offload().is_some() {
        tokio::task::spawn_local(offload_loop(shared.clone(), stop_rx.clone()));
    }
    if let Some(rx) = packet_ins {
        tokio::task::spawn_local(packet_in_loop(rx, shared.clone(), stop_rx.clone()));
        tokio::task::spawn_local(link_loop(shared.clone(), stop_rx.clone()));
    }
    for l in listeners {
        tokio::task::spawn_local(accept_loop(l, shared.clone(), stop_rx.clone()));
    }
    for ep in cfg.controllers {
        if let Endpoint::Active { host, port } = ep {
            tokio::task::spawn_local(active_loop(host, port, shared.clone(), stop_rx.clone()));
        }
    }
    if let Some(r) = ready {
        let stats = shared.borrow().switch.dataplane_stats_handle();
        let offload = shared.borrow().switch.offload().map(|t| t.stats_handle());
        // The embedder may have given up waiting; the switch runs anyway.
        let _ = r.send(Running { stats, offload });
    }
    let why = stop.await.context("installing signal handlers")?;
    info!(signal = why, "stopping");
    // Receivers may all be gone (no endpoints); nothing to tell then.
    let _ = stop_tx.send(true);
    let deadline = Instant::now() + SHUTDOWN_GRACE;
    while shared.borrow().live > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut s = shared.borrow_mut();
    if s.live > 0 {
        warn!(connections = s.live, "connections still open at exit");
    }
    if let Some(o) = s.switch.offload_stats() {
        info!(
            hits = o.hits,
            hit_bytes = o.hit_bytes,
            entries = o.entries,
            installs = o.installs,
            removals = o.removals,
            revalidated = o.revalidated,
            refused = o.refused,
            errors = o.errors,
            "offload tier stopped"
        );
        if let Some(t) = s.switch.offload() {
            let named: Vec<String> = t
                .named_counters()
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            info!(counters = %named.join(" "), "offload backend counters");
        }
    }
    if let Some(d) = s.switch.stop_dataplane() {
        let w = d.worker;
        info!(
            packets = w.packets,
            cache_hits = w.cache_hits,
            pipeline_lookups = w.pipeline_lookups,
            drop_table_miss = w.drop_table_miss,
            drop_no_output = w.drop_no_output,
            outputs = w.outputs,
            packet_ins = d.packet_ins,
            drop_packet_in_backlog = d.drop_packet_in_backlog,
            csum_finished = d.csum_finished,
            drop_runt = d.drop_runt,
            drop_oversize = d.drop_oversize,
            failed_ports = d.failed_ports,
            reopened = d.reopened,
            reopen_failed = d.reopen_failed,
            drop_no_recv = d.drop_no_recv,
            drop_no_fwd = d.drop_no_fwd,
            "data plane stopped"
        );
    }
    let po = s.switch.packet_out_stats();
    info!(
        flows = s.switch.pipeline().len(),
        packet_outs = po.packets,
        packet_outs_to_table = po.to_table,
        drop_unknown_port = po.drop_unknown_port,
        drop_to_controller = po.drop_to_controller,
        drop_at_interface = s.switch.interface_rx_dropped(),
        "stopped"
    );
    Ok(())
}

/// Resolves once a stop is requested (or the sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|&s| s).await;
}

async fn accept_loop(l: TcpListener, shared: SharedRc, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            r = l.accept() => match r {
                Ok((stream, peer)) => {
                    tokio::task::spawn_local(serve(stream, peer, false, shared.clone(), stop.clone()));
                }
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(BACKOFF_MIN).await;
                }
            },
            _ = stopped(&mut stop) => return,
        }
    }
}

async fn active_loop(host: String, port: u16, shared: SharedRc, mut stop: watch::Receiver<bool>) {
    let mut backoff = BACKOFF_MIN;
    loop {
        tokio::select! {
            r = TcpStream::connect((host.as_str(), port)) => match r {
                Ok(stream) => {
                    backoff = BACKOFF_MIN;
                    let peer = stream
                        .peer_addr()
                        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], port)));
                    serve(stream, peer, true, shared.clone(), stop.clone()).await;
                }
                Err(e) => {
                    // At most BACKOFF_MAX (8 s): the cast cannot truncate.
                    let retry_ms = backoff.as_millis() as u64;
                    debug!(controller = %format_args!("tcp:{host}:{port}"), error = %e,
                        retry_ms, "connect failed");
                }
            },
            _ = stopped(&mut stop) => return,
        }
        if *stop.borrow() {
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = stopped(&mut stop) => return,
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// How long a connection polls its socket after sending a reply (see
/// `serve`). Bounded so an idle controller costs at most this much CPU per
/// reply, and other connections wait at most this long for one spin (the
/// connection yields to them after each batch it handles).
const SPIN_READ: Duration = Duration::from_micros(SPIN_US);
const SPIN_US: u64 = 100;

enum SpinRead {
    Data(usize),
    Closed,
    Failed(std::io::Error),
    Nothing,
}

/// Poll `fd` without blocking for up to `limit`. Reads the socket directly:
/// tokio's readiness flag is not refreshed while we spin, and a later
/// `read().await` that finds the socket empty just waits for the next edge.
fn spin_read(fd: std::os::fd::RawFd, buf: &mut [u8], limit: Duration) -> SpinRead {
    let start = Instant::now();
    loop {
        // SAFETY: `buf` is a live, writable buffer of the length passed;
        // `fd` is the connection's socket, open for the call.
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
        match n {
            0 => return SpinRead::Closed,
            n if n > 0 => return SpinRead::Data(n as usize),
            _ => {
                let e = std::io::Error::last_os_error();
                match e.kind() {
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted => {}
                    _ => return SpinRead::Failed(e),
                }
            }
        }
        if start.elapsed() >= limit {
            return SpinRead::Nothing;
        }
        std::hint::spin_loop();
    }
}

/// Hand `n` received bytes (in `buf`) to the connection, take what else has
/// already arrived, and publish the flow-mods they carried.
fn on_bytes(
    shared: &SharedRc,
    conn: &mut Connection,
    rd: &mut tokio::net::tcp::OwnedReadHalf,
    buf: &mut [u8],
    n: usize,
) {
    let mut s = shared.borrow_mut();
    let now = s.now_ns();
    let Shared { switch, roles, .. } = &mut *s;
    conn.receive(&buf[..n], now, switch, roles);
    // Take what else has already arrived before replying: controllers like
    // `ovs-ofctl add-flows` send a barrier after every flow-mod, and one
    // reply write per message costs a syscall and a wakeup each. Bounded,
    // so a peer that does not read its replies is still not read from.
    let mut drained = 0;
    while drained < DRAIN_READS && conn.transmit_len() < DRAIN_MAX_OUTBOX && !conn.is_waiting() {
        match rd.try_read(buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => conn.receive(&buf[..n], now, switch, roles),
        }
        drained += 1;
    }
    announce(&mut s, now);
}

/// A connection's socket halves, its asynchronous-message subscription and
/// its read buffer, as [`write_reading`] uses them.
struct ConnIo<'a> {
    rd: &'a mut tokio::net::tcp::OwnedReadHalf,
    wr: &'a mut tokio::net::tcp::OwnedWriteHalf,
    events: &'a mut broadcast::Receiver<Arc<Body>>,
    buf: &'a mut [u8],
}

/// Most output a connection may have queued for a peer that is not
/// reading it, while [`write_reading`] still reads that peer's requests.
const READING_MAX_OUTBOX: usize = 16 << 20;

/// Write `out` to the peer, reading from it meanwhile. A controller may
/// stop reading until its own writes get through (os-ken does once its
/// event and send queues are full: its handlers wait to send, its reader
/// waits for them); a switch blocked in a write without reading would then
/// wait on the controller forever, and the controller on it (seen: `bench
/// setup`'s NAT rows stalled at 0 connections/s, both processes idle).
/// What arrives is handled at once; its replies queue in the connection
/// for the next write. Asynchronous messages published meanwhile are taken
/// into the connection's queue too (left in the channel, a burst of them
/// would overrun it and be lost). Reading stops while a request waits for
/// the switch (as in the main loop), and reading and taking both stop once
/// [`READING_MAX_OUTBOX`] bytes wait to be sent (a peer sending that much
/// while reading none is flooding, not waiting: back-pressure then). The
/// futures are cancel-safe: a write, read or receive that loses the race
/// has moved nothing.
async fn write_reading(
    shared: &SharedRc,
    conn: &mut Connection,
    io: ConnIo<'_>,
    out: &[u8],
    peer: SocketAddr,
) -> Result<(), String> {
    let ConnIo {
        rd,
        wr,
        events,
        buf,
    } = io;
    let mut sent = 0;
    while sent < out.len() {
        let room = conn.close_reason().is_none() && conn.transmit_len() < READING_MAX_OUTBOX;
        let reading = room && !conn.is_waiting();
        tokio::select! {
            ev = events.recv(), if room => take_event(conn, &shared.borrow().roles, ev, peer),
            r = wr.write(&out[sent..]) => match r {
                Ok(0) => return Err("write failed: connection closed".to_string()),
                Ok(n) => sent += n,
                Err(e) => return Err(format!("write failed: {e}")),
            },
            r = rd.read(buf), if reading => match r {
                // The peer's half-close: finish the write; the main loop
                // sees the end of input at its next read.
                Ok(0) => {
                    wr.write_all(&out[sent..])
                        .await
                        .map_err(|e| format!("write failed: {e}"))?;
                    return Ok(());
                }
                Ok(n) => on_bytes(shared, conn, rd, buf, n),
                Err(e) => return Err(format!("read failed: {e}")),
            },
        }
    }
    Ok(())
}

/// Queue one asynchronous message (or report the ones the channel lost)
/// on the connection.
fn take_event(
    conn: &mut Connection,
    roles: &Roles,
    ev: Result<Arc<Body>, broadcast::error::RecvError>,
    peer: SocketAddr,
) {
    match ev {
        Ok(body) => {
            conn.send_async((*body).clone(), roles);
        }
        Err(broadcast::error::RecvError::Lagged(n)) => {
            warn!(%peer, conn = conn.id(), lost = n, "asynchronous messages lost (controller too slow)");
        }
        // The sender lives in `Shared` as long as any connection.
        Err(broadcast::error::RecvError::Closed) => {}
    }
}

/// A waiting request's switch work may be done: let the connection try.
fn on_resume(shared: &SharedRc, conn: &mut Connection) {
    let mut s = shared.borrow_mut();
    let now = s.now_ns();
    let Shared { switch, roles, .. } = &mut *s;
    conn.resume(now, switch, roles);
    announce(&mut s, now);
}

/// Publish what the messages just handled changed (without waiting for
/// the workers) and announce what they removed or reconfigured.
fn announce(s: &mut Shared, now: u64) {
    for fr in s.switch.take_flow_removed(now) {
        let _ = s.events.send(Arc::new(Body::FlowRemoved(fr)));
    }
    for desc in s.switch.take_port_status() {
        let _ = s.events.send(Arc::new(Body::PortStatus(PortStatus {
            reason: OFPPR_MODIFY,
            desc,
        })));
    }
}

/// How long a waiting connection re-checks at every turn of the event
/// loop before it falls back to the timer: the switch work it waits for
/// (workers leaving a batch, crediting counters) usually takes
/// microseconds, and the timer's granularity is a millisecond.
const WAIT_SPIN: Duration = Duration::from_micros(200);
/// The re-check period after that (tokio rounds it up to its 1 ms tick).
const WAIT_TICK: Duration = Duration::from_micros(500);

/// Let the other tasks run, then return: at once (a yield) during the
/// first `WAIT_SPIN` of a wait, after [`WAIT_TICK`] later on.
async fn pause(since: &mut Option<Instant>) {
    let start = *since.get_or_insert_with(Instant::now);
    if start.elapsed() < WAIT_SPIN {
        // The thread too: on a machine with few cores the worker we wait
        // for may be queued behind this one.
        std::thread::yield_now();
        tokio::task::yield_now().await;
    } else {
        tokio::time::sleep(WAIT_TICK).await;
    }
}

/// Wait, letting the other tasks run, until the switch says `ticket` is
/// done (`None`: nothing to wait for); then run `then` on the switch in
/// the same borrow.
async fn when_done<R>(
    shared: &SharedRc,
    ticket: Option<offlow_openflow::Ticket>,
    then: impl FnOnce(&mut Shared, u64) -> R,
) -> R {
    use offlow_openflow::Switch;
    let mut since = None;
    loop {
        {
            let mut s = shared.borrow_mut();
            let now = s.now_ns();
            if ticket.is_none_or(|t| s.switch.is_done(t, now)) {
                return then(&mut s, now);
            }
        }
        pause(&mut since).await;
    }
}

/// Drive one controller connection until it closes.
async fn serve(
    stream: TcpStream,
    peer: SocketAddr,
    active: bool,
    shared: SharedRc,
    mut stop: watch::Receiver<bool>,
) {
    // OpenFlow is request/response with small messages: no Nagle delay.
    let _ = stream.set_nodelay(true);
    let (mut rd, mut wr) = stream.into_split();
    let mut events = shared.borrow().events.subscribe();
    let mut conn = {
        let mut s = shared.borrow_mut();
        s.live += 1;
        let id = s.roles.register();
        Connection::new(ConnConfig::default(), id, s.now_ns())
    };
    info!(%peer, conn = conn.id(), "controller connected");
    let mut buf = vec![0u8; READ_BUF];
    let mut out = Vec::new();
    let mut announced = false;
    let mut wait_since: Option<Instant> = None;
    // Whether the output about to be written answers this peer's input
    // (read, or a waiting request resumed) rather than only carrying
    // asynchronous messages: only such a write is followed by the reply
    // spin (see below).
    let mut answering = false;
    let reason: String = loop {
        out.clear();
        conn.poll_transmit(&mut out);
        let spin = std::mem::take(&mut answering);
        if !out.is_empty() {
            let io = ConnIo {
                rd: &mut rd,
                wr: &mut wr,
                events: &mut events,
                buf: &mut buf,
            };
            if let Err(e) = write_reading(&shared, &mut conn, io, &out, peer).await {
                conn.close("write failed");
                break e;
            }
            if let Some(r) = conn.close_reason() {
                break format!("{r:?}");
            }
            // A request/response peer (`ovs-ofctl add-flows` waits for the
            // barrier reply after every flow-mod) answers within tens of
            // microseconds. Sleeping in epoll meanwhile lets this core go
            // idle, and waking an idle (virtual) core costs more than the
            // whole round trip; polling briefly keeps it awake.
            //
            // Not after a write of asynchronous messages only (packet-ins,
            // FLOW_REMOVEDs): a controller answers a packet-in only once its
            // application has run (os-ken: ~150 µs for the source-NAT app),
            // and the spin holds this thread, so the next packet-in waited
            // behind it and the spin took a core the controller needed
            // (measured with `bench setup`'s NAT rows: a SYN reached the
            // controller 165 µs after it reached the switch, p50).
            if spin && conn.close_reason().is_none() && !conn.is_waiting() {
                match spin_read(rd.as_ref().as_raw_fd(), &mut buf, SPIN_READ) {
                    SpinRead::Data(n) => {
                        on_bytes(&shared, &mut conn, &mut rd, &mut buf, n);
                        answering = true;
                        // Give the other tasks their turn: a controller
                        // that always answers within the spin would
                        // otherwise keep this thread to itself (measured:
                        // echo p50 of a second connection 7-49 ms during a
                        // barrier-paced flow-mod stream, 0.4-0.5 ms with
                        // this yield; `offlow bench control`).
                        tokio::task::yield_now().await;
                        continue;
                    }
                    SpinRead::Closed => break "closed by peer".to_string(),
                    SpinRead::Failed(e) => break format!("read failed: {e}"),
                    SpinRead::Nothing => {}
                }
            }
        }
        if !announced && conn.is_negotiated() {
            announced = true;
            info!(%peer, conn = conn.id(), version = "1.3 (0x04)", "OpenFlow version negotiated");
            shared.borrow_mut().negotiated += 1;
            if active {
                controller_arrived(&shared);
            }
        }
        if announced {
            note_wants(&shared, &conn);
        }
        if let Some(r) = conn.close_reason() {
            break format!("{r:?}");
        }
        let wait = {
            let now = shared.borrow().now_ns();
            // Open connections always have a deadline.
            let deadline = conn.poll_timeout().unwrap_or(now);
            Duration::from_nanos(deadline.saturating_sub(now))
        };
        // A request waiting for the switch (a barrier for the workers to
        // pass a quiescent point, statistics for their counters) holds the
        // rest of this connection's input: stop reading until it is done,
        // and look again soon, while the other connections are served.
        let waiting = conn.is_waiting();
        if !waiting {
            wait_since = None;
        }
        tokio::select! {
            r = rd.read(&mut buf), if !waiting => match r {
                Ok(0) => break "closed by peer".to_string(),
                Ok(n) => {
                    on_bytes(&shared, &mut conn, &mut rd, &mut buf, n);
                    answering = true;
                }
                Err(e) => break format!("read failed: {e}"),
            },
            _ = pause(&mut wait_since), if waiting => {
                on_resume(&shared, &mut conn);
                answering = true;
            }
            _ = tokio::time::sleep(wait) => {
                let now = shared.borrow().now_ns();
                conn.handle_timeout(now);
            }
            ev = events.recv() => {
                let s = shared.borrow();
                let mut ev = Some(ev);
                // Take what else is queued before writing: one write (and
                // one reply spin) per batch, not per message. An expiry
                // scan queues hundreds of FLOW_REMOVEDs at once, and each
                // spin in between held the packet-ins behind them for its
                // 100 µs (measured: FLOW_REMOVEDs leaving 106 µs apart).
                // Bounded like the reads.
                while let Some(r) = ev.take() {
                    take_event(&mut conn, &s.roles, r, peer);
                    if conn.transmit_len() < DRAIN_MAX_OUTBOX {
                        ev = match events.try_recv() {
                            Ok(body) => Some(Ok(body)),
                            Err(broadcast::error::TryRecvError::Lagged(n)) => {
                                Some(Err(broadcast::error::RecvError::Lagged(n)))
                            }
                            Err(_) => None,
                        };
                    }
                }
            }
            _ = stopped(&mut stop) => conn.close("switch stopping"),
        }
    };
    if announced {
        shared.borrow_mut().negotiated -= 1;
        if active {
            controller_left(&shared);
        }
        let mut s = shared.borrow_mut();
        s.conn_wants.remove(&conn.id());
        update_packet_in_wanted(&s);
    }
    let _ = wr.shutdown().await;
    let stats = conn.stats();
    {
        let mut s = shared.borrow_mut();
        s.roles.release(conn.id());
        s.live = s.live.saturating_sub(1);
    }
    info!(
        %peer,
        conn = conn.id(),
        reason = %reason,
        rx_msgs = stats.rx_msgs,
        tx_msgs = stats.tx_msgs,
        tx_errors = stats.tx_errors,
        "controller disconnected"
    );
}

/// Record what a negotiated connection's packet-in mask depends on (its
/// async configuration and requested role may have changed with the
/// messages just handled); recompute the switch-wide wants if it did.
fn note_wants(shared: &SharedRc, conn: &Connection) {
    let mut s = shared.borrow_mut();
    let now = (conn.async_config(), conn.requested_role());
    if s.conn_wants.get(&conn.id()) != Some(&now) {
        s.conn_wants.insert(conn.id(), now);
        update_packet_in_wanted(&s);
    }
}

/// The packet-in reasons worth copying out of the workers: in standalone
/// mode, what learning takes (no-match and action, not invalid TTL);
/// otherwise the union of every negotiated connection's packet-in mask for
/// its role now (§7.3.10: a master or equal uses the first mask, a slave
/// the second; a master another connection replaced is a slave).
fn update_packet_in_wanted(s: &Shared) {
    use offlow_openflow::packet_in_reason::{ACTION, NO_MATCH};
    let bits = if s.standalone.is_engaged() {
        1 << NO_MATCH | 1 << ACTION
    } else {
        s.conn_wants
            .iter()
            .map(|(&id, (config, role))| {
                let slave = match role {
                    ControllerRole::Slave => true,
                    ControllerRole::Master => s.roles.master() != Some(id),
                    ControllerRole::Equal => false,
                };
                config.packet_in_mask[usize::from(slave)]
            })
            .fold(0, |a, m| a | m)
    };
    s.packet_in_wanted.store(bits, Ordering::Relaxed);
}

/// An active controller negotiated: standalone flows make way.
fn controller_arrived(shared: &SharedRc) {
    let mut s = shared.borrow_mut();
    s.active_controllers += 1;
    let now = s.now_ns();
    let Shared {
        switch, standalone, ..
    } = &mut *s;
    standalone.disengage(switch, now);
    update_packet_in_wanted(&s);
}

/// An active controller left: with none left, standalone mode takes over.
fn controller_left(shared: &SharedRc) {
    let mut s = shared.borrow_mut();
    s.active_controllers = s.active_controllers.saturating_sub(1);
    if s.active_controllers == 0 && s.fail_mode == FailMode::Standalone {
        let now = s.now_ns();
        let Shared {
            switch, standalone, ..
        } = &mut *s;
        standalone.engage(switch, now);
        update_packet_in_wanted(&s);
    }
}

/// Frames the workers sent to CONTROLLER: learning in standalone mode,
/// PACKET_IN to the connections otherwise.
async fn packet_in_loop(
    mut rx: mpsc::Receiver<PacketInFrame>,
    shared: SharedRc,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let frame = tokio::select! {
            f = rx.recv() => match f {
                Some(f) => f,
                None => return,
            },
            _ = stopped(&mut stop) => return,
        };
        let mut s = shared.borrow_mut();
        let now = s.now_ns();
        let Shared {
            switch,
            standalone,
            events,
            packet_in_wanted,
            ..
        } = &mut *s;
        if standalone.is_engaged() {
            if frame.invalid_ttl {
                // Nobody to tell: the learning switch has no use for it.
                continue;
            }
            standalone.learn(switch, frame.in_port, &frame.data, now);
            // Take what else is queued before publishing the flows.
            while let Ok(f) = rx.try_recv() {
                if !f.invalid_ttl {
                    standalone.learn(switch, f.in_port, &f.data, now);
                }
            }
            switch.commit_pending();
            continue;
        }
        if !frame.invalid_ttl && !switch.packet_in_allowed(frame.in_port, frame.origin.table_miss) {
            // A table miss on a port configured no_packet_in (§7.2.1).
            continue;
        }
        // §7.4.1: the table and cookie of the entry that sent it; a
        // table-miss entry's packet-ins say OFPR_NO_MATCH.
        let origin = frame.origin;
        let reason = if frame.invalid_ttl {
            OFPR_INVALID_TTL
        } else if origin.table_miss {
            OFPR_NO_MATCH
        } else {
            OFPR_ACTION
        };
        if packet_in_wanted.load(Ordering::Relaxed) & (1 << reason) == 0 {
            // Queued before the last connection that wanted it went (or
            // changed its mask): nobody to copy or buffer it for.
            continue;
        }
        let mut m = Match::ANY;
        m.set_exact(Field::InPort, u128::from(frame.in_port));
        // Frames are at most a few KiB (the workers' buffers).
        let total_len = frame.data.len().min(usize::from(u16::MAX)) as u16;
        let (buffer_id, data) = if frame.invalid_ttl {
            switch.packet_in_whole(frame.in_port, frame.data)
        } else {
            switch.packet_in_data(frame.in_port, frame.data, frame.max_len)
        };
        let body = Body::PacketIn(PacketIn {
            buffer_id,
            total_len,
            reason,
            table_id: origin.table_id,
            cookie: origin.cookie,
            matcher: OxmMatch::from_match(&m),
            data,
        });
        // No receiver (no connection) is fine: nobody to tell.
        let _ = events.send(Arc::new(body));
    }
}

/// Re-read link states (re-opening ports whose interface came back);
/// announce changes as PORT_STATUS.
async fn link_loop(shared: SharedRc, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(LINK_POLL) => {}
            _ = stopped(&mut stop) => return,
        }
        let mut s = shared.borrow_mut();
        for desc in s.switch.refresh_links() {
            info!(port = desc.port_no, name = %desc.name.to_string_lossy(), state = desc.state, config = desc.config,
                "port status changed");
            let _ = s.events.send(Arc::new(Body::PortStatus(PortStatus {
                reason: OFPPR_MODIFY,
                desc,
            })));
        }
        // A port's liveness moves fast-failover groups: publish it now.
        s.switch.commit_pending();
    }
}

/// Drive the offload tier: samples in, counters read, flows placed.
async fn offload_loop(shared: SharedRc, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(crate::offload::OFFLOAD_TICK) => {}
            _ = stopped(&mut stop) => return,
        }
        shared.borrow_mut().switch.offload_tick();
    }
}

/// Remove timed-out flow entries; report those flagged SEND_FLOW_REM;
/// compile the tables once their rules are quiet.
///
/// Nothing here blocks the control thread on the workers: the counter
/// sync before the scan, the removal's settle and the sync of the removed
/// entries' final counts are tickets waited for like a barrier's, while
/// the connections are served. (The removal used to be reported with a
/// blocking commit and sync, 0.2–2.8 ms of a stalled control thread per
/// scan in `bench setup`'s NAT rows, where ~280 flows idle out a scan.)
async fn expiry_loop(
    shared: SharedRc,
    reports: mpsc::UnboundedSender<Vec<FlowRemoved>>,
    mut stop: watch::Receiver<bool>,
) {
    let last_scan = std::cell::Cell::new(Duration::ZERO);
    // Until when scans stay frequent, after the last one that reported.
    let mut busy_until: Option<Instant> = None;
    loop {
        // While flows that are reported keep expiring, scan more often:
        // each scan's FLOW_REMOVEDs reach the controller within
        // FLOW_REMOVED_SPREAD, ahead of the packet-ins queued behind them:
        // smaller reports, shorter waits. For a while after
        // each such scan, not just the next one: an idle time counts from
        // the scan that saw the entry used, so flows expire in cohorts a
        // scan period apart, and the period only shrinks for good once
        // the cohorts have (measured: switching back after one empty scan
        // kept the bursts at ~600 every 65 ms).
        let busy = busy_until.is_some_and(|t| Instant::now() < t);
        let (floor, duty) = if busy {
            (EXPIRY_BUSY_EVERY, EXPIRY_BUSY_DUTY)
        } else {
            (EXPIRY_EVERY, EXPIRY_DUTY)
        };
        let period = (last_scan.get() * duty).clamp(floor, EXPIRY_MAX);
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = stopped(&mut stop) => return,
        }
        // Idle timeouts read the counters: have the workers credit them
        // first, without holding up the connections meanwhile.
        let sync = shared.borrow_mut().switch.begin_expiry_sync();
        let expire = |s: &mut Shared, now: u64| {
            let Shared {
                switch, standalone, ..
            } = s;
            let scan = Instant::now();
            let removed = switch.expire(now);
            last_scan.set(scan.elapsed());
            standalone.expired(switch, &removed, now);
            switch.maybe_compile(now);
            switch.begin_removal_report()
        };
        let Some(settled) = when_done(&shared, sync, expire).await else {
            continue;
        };
        busy_until = Some(Instant::now() + EXPIRY_BUSY_HOLD);
        let counts = when_done(&shared, Some(settled), |s, _| {
            s.switch.begin_removal_counts()
        })
        .await;
        let synced = counts.is_some();
        when_done(&shared, counts, |s, now| {
            let report = s.switch.take_removal_report(now, synced);
            if !report.is_empty() {
                // Refused only once the pacer has stopped (at the stop).
                let _ = reports.send(report);
            }
        })
        .await;
    }
}

/// Hand expiry's FLOW_REMOVEDs to the connections spread over
/// [`FLOW_REMOVED_SPREAD`] (see there): each tick an equal share of what
/// waits, the share raised when a new report arrives so that everything
/// queued leaves within the spread of the last report. At a stop, what
/// is left goes at once.
async fn flow_removed_pacer(
    mut reports: mpsc::UnboundedReceiver<Vec<FlowRemoved>>,
    shared: SharedRc,
    mut stop: watch::Receiver<bool>,
) {
    let ticks = (FLOW_REMOVED_SPREAD.as_micros() / FLOW_REMOVED_TICK.as_micros()).max(1) as usize;
    let mut queue: VecDeque<FlowRemoved> = Default::default();
    let mut per_tick = 0;
    let send = |queue: &mut VecDeque<FlowRemoved>, n: usize| {
        let s = shared.borrow();
        for fr in queue.drain(..n.min(queue.len())) {
            let _ = s.events.send(Arc::new(Body::FlowRemoved(fr)));
        }
    };
    loop {
        if queue.is_empty() {
            per_tick = 0;
            tokio::select! {
                r = reports.recv() => match r {
                    Some(r) => queue.extend(r),
                    None => return,
                },
                _ = stopped(&mut stop) => return,
            }
        }
        let mut arrived = false;
        while let Ok(r) = reports.try_recv() {
            queue.extend(r);
            arrived = true;
        }
        if arrived || per_tick == 0 {
            per_tick = per_tick.max(queue.len().div_ceil(ticks));
        }
        send(&mut queue, per_tick);
        if queue.is_empty() {
            continue;
        }
        tokio::select! {
            _ = tokio::time::sleep(FLOW_REMOVED_TICK) => {}
            _ = stopped(&mut stop) => {
                send(&mut queue, usize::MAX);
                return;
            }
        }
    }
}
