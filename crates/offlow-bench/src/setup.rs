//! `offlow bench setup`: new TCP connections per second through a switch
//! whose flows a real controller installs (issue 25, item 3; the SmartNIC
//! paper's connection-setup rate).
//!
//! # What runs, per (application, switch) row, in one invocation
//! - The [`crate::topo`] topology: hosts A and B joined through a switch
//!   namespace (`p1` = port 1 to A, `p2` = port 2 to B). The hosts' segment
//!   and checksum offloads are off (`tso gso tx off`): the offload tier
//!   serves frames as they are, and a veth's partial checksums would only
//!   be finished on the software path. GRO is on (a veth's default here
//!   is off): a veth takes frames an XDP program redirects into its peer
//!   only while it runs NAPI, so without it every frame the offload tier
//!   served would be dropped at the host (the other benches and the demo
//!   do the same; every row gets it, so the anchors see the same hosts).
//! - The controller: `osken-manager` from the controllers' environment
//!   (`scripts/controllers-venv.sh`, `--venv`) on a free loopback port,
//!   running
//!   - `l2`: os-ken's `simple_switch_13` (MAC learning: a flow per
//!     destination MAC and port, installed on the first packet-in of each
//!     direction; A 10.0.0.1, B 10.0.0.2), or
//!   - `nat`: the repository's source-NAT app (`apps/osken/snat.py`,
//!     `--snat-app`): on each connection's first packet a forward and a
//!     reverse flow (idle timeout 2 s) and a pool port (A 10.0.0.1 behind
//!     gateway 10.0.0.254, B 192.0.2.2, the NAT address 192.0.2.1). Every
//!     connection is a packet-in, two flow-mods and a packet-out.
//! - The switch, connected to it: `offlow run` (AF_PACKET ports, one
//!   worker), `offlow run --offload xdp`, or Open vSwitch 3.1 (netdev
//!   datapath, `system` ports, secure fail mode, the same controller).
//!   Controller and switch both run inside the switch namespace and meet
//!   on its loopback (ovs-vswitchd must run where its ports are).
//! - `synthetic` (`nat` only): no switch, hosts or clients; a synthetic
//!   switch ([`crate::synthetic_switch`]) keeps `--concurrency` setups in
//!   flight at the controller and reports the flows removed after their
//!   idle timeout, so the controller does a real connection's work per
//!   setup. Its rate is the controller's capacity on this machine: no
//!   switch can set up more connections a second with this controller,
//!   so its ratio to Open vSwitch bounds every switch's.
//! - `bridge` (`l2` only): no controller; the Linux bridge joins `p1` and
//!   `p2` in the switch namespace. The kernel's own switch adds the least
//!   any switch can between the hosts, so its rate is what the hosts' TCP
//!   stacks, the clients and the server reach on this machine: the ceiling
//!   of every L2 row, and its ratio to Open vSwitch bounds every switch's.
//! - `xdp-wire` (`l2` only): no controller; an XDP program on each port
//!   redirects every frame to the other, with no parsing or lookup
//!   (`bench offload`'s ceiling, both ways). What any switch that forwards
//!   in XDP reaches between these hosts: the offload tier's own bound,
//!   below the bridge's (a redirected frame is run through NAPI on both
//!   veths, and copied where the sender's skb is cloned, as TCP's are).
//! - `tc-wire` (`l2` only): the same with a TC program at each port's
//!   ingress (`bpf_redirect`): the socket buffer goes on as built, the
//!   bridge's path; what an offload to TC programs could reach.
//! - A server on B:5001 accepting and closing, and `--concurrency` client
//!   threads on A, each connecting again and again, then closing with an
//!   RST (`SO_LINGER` 0, so no TIME_WAIT limits the rate). Source ports are
//!   taken in turn from 1024–65535 by all clients together (a cycle takes
//!   over 30 s at the NAT rows' rates, far past the NAT flows' 2 s idle
//!   timeout), so every connection is new to the switch: the kernel's own
//!   choice, with no TIME_WAIT to avoid, came back to a port within
//!   seconds, and a reused 5-tuple met its NAT flows still installed and
//!   never reached the controller (17% of a 1,792 connections/s row). After the controller has programmed the path (the
//!   first connection) and `--warmup` seconds, connections completed
//!   (three-way handshake done) are counted over `--seconds`, with each
//!   connect's latency.
//!
//! # Passes
//! The host under this machine's two vCPUs drifts by tens of per cent
//! within minutes (five runs of the NAT rows in three minutes, 2026-11-27:
//! Open vSwitch 753–1,041 connections/s, offlow over it 1.99–3.27×), so
//! rows measured one after the other for `--seconds` each compare
//! different minutes. `--passes N` splits each row's counted seconds into
//! N passes and runs the passes round-robin over the rows (each pass sets
//! its row up afresh, with its own warm-up), so a drift reaches every row
//! alike; a row's figures are over all its passes together. What the
//! kit for issue 23 does (`bench latency --passes`), for the same reason.
//!
//! # Report
//! Per row: connections/s, connect latency p50/p99/max (ms), failed
//! connects (a 1 s timeout), the controller's and the switch's CPU over
//! the counted seconds (from /proc: a controller at one full core bounds
//! the row, whatever the switch), and the row's anchor ratio: offlow rows
//! over Open vSwitch with the same application in the same run. With
//! passes, also each pass's rate and its ratio to Open vSwitch's pass of
//! the same round. `--json` prints one object (`experiment: "setup"`) as
//! the last line.
//!
//! # Invariants
//! Namespaces, processes and the scratch directory of a row are owned by
//! guards removed on drop, so an error or Ctrl-C leaves nothing behind.
//! Every connect has a timeout; a row whose path is never programmed
//! fails after [`PROGRAM_WAIT`].
//!
//! Thread-safety: client threads share only atomics (phase, counters) with
//! the measuring thread and hand their latency samples back when joined.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use offlow_io::netns::in_netns;
use serde::Serialize;

use crate::control::{mean, percentile};
use crate::forward::Ovs;
use crate::report::{fmt_f, print_json_line, Table};
use crate::topo::{
    catch_interrupt, free_port, interrupted, ip, run_cmd, sleep_unless_interrupted, unique_tag,
    ChildGuard, Topo,
};

/// Longest wait for the controller to listen and to program the path.
pub const PROGRAM_WAIT: Duration = Duration::from_secs(30);

/// The server's port on host B.
const SERVER_PORT: u16 = 5001;

/// The NAT rows' flows' idle timeout, seconds: short, so that their
/// expiry (and the FLOW_REMOVED to the controller) is part of every
/// counted second. The default `--warmup` outlasts it.
const NAT_IDLE_TIMEOUT_S: u16 = 2;

/// Which controller application.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum App {
    /// os-ken's simple_switch_13 (L2 learning).
    L2,
    /// The repository's source-NAT app: two flows per connection.
    Nat,
}

/// Which switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SwitchKind {
    /// `offlow run`, AF_PACKET ports.
    Offlow,
    /// `offlow run --offload xdp`.
    OfflowOffload,
    /// `offlow run --offload tc`: the tier at TC ingress.
    OfflowOffloadTc,
    /// Open vSwitch 3.1, netdev datapath, `system` ports.
    Ovs,
    /// No switch: [`crate::synthetic_switch`] fires the NAT app's
    /// packet-ins at the controller and counts its answers (the
    /// controller's own capacity; `nat` only).
    Synthetic,
    /// No controller: the Linux bridge between the hosts (their own
    /// ceiling; `l2` only).
    Bridge,
    /// No controller, no lookup: an XDP program on each port redirects
    /// every frame to the other (`bench offload`'s ceiling, both ways):
    /// what any switch forwarding in XDP can reach between these hosts,
    /// the offload tier's bound (`l2` only).
    XdpWire,
    /// No controller, no lookup: a TC program at each port's ingress
    /// redirects every packet to the other (`bpf/tcwire.bpf.c`): what an
    /// offload to TC programs could reach (`l2` only).
    TcWire,
}

impl SwitchKind {
    fn name(self) -> &'static str {
        match self {
            SwitchKind::Offlow => "offlow",
            SwitchKind::OfflowOffload => "offlow --offload xdp",
            SwitchKind::OfflowOffloadTc => "offlow --offload tc",
            SwitchKind::Ovs => "ovs 3.1 netdev system",
            SwitchKind::Synthetic => "synthetic (controller alone)",
            SwitchKind::Bridge => "linux bridge (no controller)",
            SwitchKind::XdpWire => "xdp redirect wire (no lookup)",
            SwitchKind::TcWire => "tc redirect wire (no lookup)",
        }
    }
}

/// Arguments of `offlow bench setup`.
#[derive(clap::Args, Debug, Clone)]
pub struct SetupArgs {
    /// Controller applications (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "l2,nat")]
    pub apps: Vec<App>,
    /// Switches (comma-separated), each with every application.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "offlow,offlow-offload,offlow-offload-tc,ovs,synthetic,bridge,xdp-wire,tc-wire"
    )]
    pub switches: Vec<SwitchKind>,
    /// Seconds counted per row (over all its passes).
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Passes over the rows, round-robin: each row counts
    /// `--seconds / --passes` seconds per pass (module docs: "Passes").
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub passes: u32,
    /// Seconds of connections before counting. The default outlasts the
    /// NAT flows' 2 s idle timeout, so a NAT row counts from its first
    /// second with flows expiring and FLOW_REMOVEDs reaching the
    /// controller, as in every later second (a pass counting 2.5 s after
    /// a 1 s warm-up spent a third of it before any expiry).
    #[arg(long, default_value_t = 3.0)]
    pub warmup: f64,
    /// Client threads connecting at once.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// The controllers' environment (default: `$OFFLOW_VENV`, else
    /// /var/cache/offlow/venv; `scripts/controllers-venv.sh` builds it).
    #[arg(long, value_name = "DIR")]
    pub venv: Option<PathBuf>,
    /// The source-NAT app (default: `apps/osken/snat.py` of the working
    /// directory, or of the repository this binary was built in).
    #[arg(long, value_name = "FILE")]
    pub snat_app: Option<PathBuf>,
    /// The offlow binary to run (default: this one).
    #[arg(long, value_name = "PATH")]
    pub offlow: Option<PathBuf>,
    /// An extra argument for every `offlow run` of the offlow rows
    /// (repeatable), e.g. `--offlow-arg=--idle-spin-us=0`.
    #[arg(long = "offlow-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub offlow_args: Vec<String>,
    /// Print one JSON object as the last line.
    #[arg(long)]
    pub json: bool,
}

/// One row's figures.
#[derive(Debug, Clone, Serialize)]
pub struct SetupRow {
    /// The application.
    pub app: App,
    /// The switch.
    pub switch: String,
    /// Connections completed per second.
    pub conns_per_s: f64,
    /// Connections completed in the counted seconds.
    pub conns: u64,
    /// Connects that failed or timed out in the counted seconds.
    pub failed: u64,
    /// Mean connect latency, ms. With `--concurrency` clients connecting
    /// back to back, the rate is about concurrency / mean (Little's law), so
    /// a mean far above the median says the rate is set by the tail.
    pub mean_ms: Option<f64>,
    /// Connect latency percentiles, ms.
    pub p50_ms: Option<f64>,
    /// See `p50_ms`.
    pub p90_ms: Option<f64>,
    /// See `p50_ms`.
    pub p99_ms: Option<f64>,
    /// See `p50_ms`.
    pub max_ms: Option<f64>,
    /// This row over Open vSwitch's with the same application, same run.
    pub vs_ovs: Option<f64>,
    /// The controller's CPU over the counted seconds (1.0 = one core).
    pub controller_cpu: Option<f64>,
    /// The switch process's CPU over the counted seconds.
    pub switch_cpu: Option<f64>,
    /// Each pass's connections/s, in run order (one with `--passes 1`).
    pub pass_conns_per_s: Vec<f64>,
    /// Each pass's rate over Open vSwitch's in the same pass (same
    /// application); empty for Open vSwitch's rows and without them.
    pub pass_vs_ovs: Vec<f64>,
}

/// What one pass of one row measured.
struct PassFigures {
    /// Every completed connect's latency, ms.
    latencies_ms: Vec<f64>,
    /// Connects that failed or timed out.
    failed: u64,
    /// Seconds counted.
    elapsed_s: f64,
    /// The controller's CPU seconds over them.
    controller_cpu_s: Option<f64>,
    /// The switch process's CPU seconds over them.
    switch_cpu_s: Option<f64>,
}

impl PassFigures {
    fn conns_per_s(&self) -> f64 {
        self.latencies_ms.len() as f64 / self.elapsed_s
    }
}

impl SetupRow {
    /// The row over all its passes: rates over the summed seconds,
    /// latency statistics over every connect, CPU shares over the summed
    /// seconds (`None` if any pass could not read them).
    fn from_passes(app: App, switch: &str, passes: &[PassFigures]) -> SetupRow {
        let elapsed: f64 = passes.iter().map(|p| p.elapsed_s).sum();
        let mut lat: Vec<f64> = passes
            .iter()
            .flat_map(|p| p.latencies_ms.iter().copied())
            .collect();
        lat.sort_by(f64::total_cmp);
        let share = |cpu: fn(&PassFigures) -> Option<f64>| {
            let total: Option<f64> = passes.iter().map(cpu).sum();
            total.map(|t| t / elapsed)
        };
        SetupRow {
            app,
            switch: switch.into(),
            conns_per_s: lat.len() as f64 / elapsed,
            conns: lat.len() as u64,
            failed: passes.iter().map(|p| p.failed).sum(),
            mean_ms: mean(&lat),
            p50_ms: percentile(&lat, 50.0),
            p90_ms: percentile(&lat, 90.0),
            p99_ms: percentile(&lat, 99.0),
            max_ms: lat.last().copied(),
            vs_ovs: None,
            controller_cpu: share(|p| p.controller_cpu_s),
            switch_cpu: share(|p| p.switch_cpu_s),
            pass_conns_per_s: passes.iter().map(PassFigures::conns_per_s).collect(),
            pass_vs_ovs: Vec::new(),
        }
    }
}

/// The whole run.
#[derive(Debug, Clone, Serialize)]
pub struct SetupReport {
    /// `"setup"`.
    pub experiment: &'static str,
    /// Client threads.
    pub concurrency: usize,
    /// Counted seconds per row (over all its passes).
    pub seconds: f64,
    /// Passes over the rows.
    pub passes: u32,
    /// Rows, in run order.
    pub rows: Vec<SetupRow>,
}

/// Addresses of one application's topology.
struct Plan {
    a_addr: &'static str,
    a_route: Option<&'static str>,
    b_addr: &'static str,
    server: &'static str,
}

fn plan(app: App) -> Plan {
    match app {
        App::L2 => Plan {
            a_addr: "10.0.0.1/24",
            a_route: None,
            b_addr: "10.0.0.2/24",
            server: "10.0.0.2",
        },
        App::Nat => Plan {
            a_addr: "10.0.0.1/24",
            a_route: Some("10.0.0.254"),
            b_addr: "192.0.2.2/24",
            server: "192.0.2.2",
        },
    }
}

/// Host B's MAC ([`Topo::hosts`] sets it): the NAT's next hop.
const B_MAC: &str = "02:00:00:00:00:12";

fn venv_dir(a: &SetupArgs) -> PathBuf {
    a.venv
        .clone()
        .or_else(|| std::env::var_os("OFFLOW_VENV").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/var/cache/offlow/venv"))
}

fn snat_app(a: &SetupArgs) -> anyhow::Result<PathBuf> {
    if let Some(p) = &a.snat_app {
        return Ok(p.clone());
    }
    let here = PathBuf::from("apps/osken/snat.py");
    if here.exists() {
        return Ok(here);
    }
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../apps/osken/snat.py");
    if built.exists() {
        return Ok(built);
    }
    bail!("apps/osken/snat.py not found: run from the repository or give --snat-app")
}

/// Is something listening on TCP `port` in namespace `ns`? Read from
/// /proc (the calling thread's namespace's view), so no probe connection
/// opens an OpenFlow session.
fn listening(ns: &str, port: u16) -> bool {
    let Ok(Ok(text)) = in_netns(Some(ns), || {
        std::fs::read_to_string("/proc/thread-self/net/tcp")
    }) else {
        return false;
    };
    let want = format!(":{port:04X}");
    text.lines().skip(1).any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() > 3 && f[1].ends_with(&want) && f[3] == "0A"
    })
}

/// Start the controller for `app` in the switch namespace `sw` (where
/// ovs-vswitchd runs: its loopback is the one both switches reach),
/// logging to `log`; returns once it listens. Its OpenFlow target is
/// `tcp:127.0.0.1:PORT` in `sw`.
fn start_controller(
    a: &SetupArgs,
    app: App,
    sw: &str,
    log: &Path,
) -> anyhow::Result<(ChildGuard, String)> {
    let venv = venv_dir(a);
    let manager = venv.join("osken/bin/osken-manager");
    if !manager.exists() {
        bail!(
            "{} missing: run scripts/controllers-venv.sh (or give --venv)",
            manager.display()
        );
    }
    // A fresh namespace: any port is free there.
    let port = free_port()?;
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", sw])
        .arg(&manager)
        .args(["--ofp-listen-host", "127.0.0.1", "--ofp-tcp-listen-port"])
        .arg(port.to_string());
    match app {
        App::L2 => {
            cmd.arg(venv.join("simple_switch_13.py"));
        }
        App::Nat => {
            cmd.arg(snat_app(a)?)
                .env("SNAT_INSIDE_PORT", "1")
                .env("SNAT_OUTSIDE_PORT", "2")
                .env("SNAT_INSIDE_NET", "10.0.0.0/24")
                .env("SNAT_GATEWAY_IP", "10.0.0.254")
                .env("SNAT_ADDRESS", "192.0.2.1")
                .env("SNAT_NEXT_HOP_MAC", B_MAC)
                .env("SNAT_PORT_MIN", "10000")
                .env("SNAT_PORT_MAX", "60000")
                .env("SNAT_IDLE_TIMEOUT", NAT_IDLE_TIMEOUT_S.to_string());
        }
    }
    let out = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::from(out.try_clone()?))
        .stderr(Stdio::from(out))
        .spawn()
        .with_context(|| format!("starting {}", manager.display()))?;
    let mut g = ChildGuard {
        child,
        what: "osken-manager",
    };
    let deadline = Instant::now() + PROGRAM_WAIT;
    while !listening(sw, port) {
        g.check_alive()
            .with_context(|| format!("its log: {}", log.display()))?;
        if Instant::now() > deadline {
            bail!("osken-manager did not listen within {PROGRAM_WAIT:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok((g, format!("tcp:127.0.0.1:{port}")))
}

/// CPU seconds (user + system) process `pid` has used, from
/// /proc/PID/stat.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name (which may hold spaces).
    let rest = &text[text.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12
    // after the name.
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then(|| ticks as f64 / hz as f64)
}

/// Close with an RST: no TIME_WAIT state left behind on the client.
fn abort(s: TcpStream) {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt on an open socket with a linger value of the
    // size given.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&l as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

/// A server in `ns` on `addr`:5001 accepting and dropping connections
/// until `stop`.
fn start_server(
    ns: &str,
    addr: &str,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<std::thread::JoinHandle<()>> {
    let sa: SocketAddr = format!("{addr}:{SERVER_PORT}").parse()?;
    let l = in_netns(Some(ns), || TcpListener::bind(sa))
        .context("entering host B")?
        .with_context(|| format!("binding {sa}"))?;
    // A deeper accept queue than std's 128: bursts of SYNs from several
    // clients. listen(2) again on a listening socket only resizes it.
    // SAFETY: listen on the socket we own.
    unsafe {
        libc::listen(l.as_raw_fd(), 4096);
    }
    l.set_nonblocking(true)?;
    Ok(std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            match l.accept() {
                Ok((s, _)) => drop(s),
                Err(_) => std::thread::sleep(Duration::from_micros(200)),
            }
        }
    }))
}

/// Client phases.
const WARMUP: u8 = 0;
const COUNT: u8 = 1;
const STOP: u8 = 2;

/// What one client thread measured in the counted phase.
struct ClientResult {
    latencies_ms: Vec<f64>,
    failed: u64,
}

/// The next client source port: 1024–65535 in turn (shared by all
/// clients), never the server's.
fn next_source_port(next: &AtomicU32) -> u16 {
    loop {
        const FIRST: u32 = 1024;
        let p = FIRST + next.fetch_add(1, Ordering::Relaxed) % (65536 - FIRST);
        // In 1024..=65535 by construction.
        let p = p as u16;
        if p != SERVER_PORT {
            return p;
        }
    }
}

/// Connect from source port `port` (bound first) to `server`.
fn connect_from(port: u16, server: SocketAddr, timeout: Duration) -> std::io::Result<TcpStream> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
    s.set_reuse_address(true)?;
    s.bind(&SocketAddr::from(([0, 0, 0, 0], port)).into())?;
    s.connect_timeout(&server.into(), timeout)?;
    Ok(s.into())
}

fn client(
    ns: String,
    server: SocketAddr,
    phase: Arc<AtomicU8>,
    done: Arc<AtomicU64>,
    ports: Arc<AtomicU32>,
) -> ClientResult {
    let mut r = ClientResult {
        latencies_ms: Vec::new(),
        failed: 0,
    };
    let run = in_netns(Some(&ns), || {
        while phase.load(Ordering::Relaxed) != STOP {
            let port = next_source_port(&ports);
            let t0 = Instant::now();
            let res = connect_from(port, server, Duration::from_secs(1));
            let counted = phase.load(Ordering::Relaxed) == COUNT;
            match res {
                Ok(s) => {
                    abort(s);
                    if counted {
                        r.latencies_ms.push(t0.elapsed().as_secs_f64() * 1e3);
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Err(_) => {
                    if counted {
                        r.failed += 1;
                    }
                }
            }
        }
    });
    if run.is_err() {
        r.failed += 1;
    }
    r
}

/// Connect from `ns` to `server` until one connection completes (the
/// controller has programmed the path), at most [`PROGRAM_WAIT`].
fn wait_programmed(ns: &str, server: SocketAddr) -> anyhow::Result<()> {
    let deadline = Instant::now() + PROGRAM_WAIT;
    loop {
        let ok = in_netns(Some(ns), || {
            TcpStream::connect_timeout(&server, Duration::from_secs(1)).map(abort)
        })?;
        if ok.is_ok() {
            return Ok(());
        }
        if interrupted() || Instant::now() > deadline {
            bail!("no connection to {server} within {PROGRAM_WAIT:?}: the controller did not program the path");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The controller alone: [`crate::synthetic_switch`] in the switch's
/// place, `--concurrency` setups in flight (as many as the client threads
/// have), counted like the other rows.
fn run_synthetic_row(a: &SetupArgs, app: App, seconds: f64) -> anyhow::Result<PassFigures> {
    use crate::synthetic_switch as synth;
    let topo = Topo::hosts(true, 1)?;
    let sw = topo.sw()?.to_string();
    let scratch = std::env::temp_dir().join(format!("offlow-setup-{}", unique_tag()));
    std::fs::create_dir_all(&scratch)?;
    let _scratch = ScratchDir(scratch.clone());
    let log = scratch.join("controller.log");
    let (ctl, target) = start_controller(a, app, &sw, &log)?;
    let addr: SocketAddr = target.trim_start_matches("tcp:").parse()?;
    let stream = in_netns(Some(&sw), || TcpStream::connect(addr))
        .context("entering the switch namespace")?
        .with_context(|| format!("connecting to the controller at {addr}"))?;
    let phase = Arc::new(AtomicU8::new(synth::WARMUP));
    let window = a.concurrency.max(1);
    let runner = {
        let phase = phase.clone();
        std::thread::spawn(move || synth::run(stream, window, &phase, PROGRAM_WAIT))
    };
    // The warm-up starts once the app is ready: give it the program wait
    // at most, as the other rows do.
    sleep_unless_interrupted(Duration::from_secs_f64(a.warmup + 1.0));
    let ctl_pid = ctl.child.id();
    phase.store(synth::COUNT, Ordering::Relaxed);
    let t0 = Instant::now();
    let cpu0 = cpu_seconds(ctl_pid);
    sleep_unless_interrupted(Duration::from_secs_f64(seconds));
    let cpu1 = cpu_seconds(ctl_pid);
    phase.store(synth::STOP, Ordering::Relaxed);
    let elapsed = t0.elapsed().as_secs_f64();
    let latencies_ms = runner
        .join()
        .map_err(|_| anyhow::anyhow!("the synthetic switch panicked"))?
        .with_context(|| format!("the controller's log is {}", log.display()))?
        .latencies_ms;
    Ok(PassFigures {
        latencies_ms,
        failed: 0,
        elapsed_s: elapsed,
        controller_cpu_s: cpu1.zip(cpu0).map(|(c1, c0)| c1 - c0),
        switch_cpu_s: None,
    })
}

/// One pass of one row, counting `seconds`.
fn run_row(a: &SetupArgs, app: App, kind: SwitchKind, seconds: f64) -> anyhow::Result<PassFigures> {
    if kind == SwitchKind::Synthetic {
        return run_synthetic_row(a, app, seconds);
    }
    let topo = Topo::hosts(true, 1)?;
    let (ha, hb, sw) = (
        topo.gen.0.clone(),
        topo.rx.0.clone(),
        topo.sw()?.to_string(),
    );
    let p = plan(app);
    for (h, addr) in [(&ha, p.a_addr), (&hb, p.b_addr)] {
        ip(&["-n", h, "addr", "add", addr, "dev", "eth0"])?;
        run_cmd(Command::new("ip").args([
            "netns", "exec", h, "ethtool", "-K", "eth0", "tso", "off", "gso", "off", "tx", "off",
            "gro", "on",
        ]))?;
    }
    if let Some(gw) = p.a_route {
        ip(&["-n", &ha, "route", "add", "default", "via", gw])?;
    }
    let scratch = std::env::temp_dir().join(format!("offlow-setup-{}", unique_tag()));
    std::fs::create_dir_all(&scratch)?;
    let _scratch = ScratchDir(scratch.clone());
    let mut _wire = Vec::new();
    let mut _tc_wire = Vec::new();
    let ctl = if kind == SwitchKind::Bridge {
        // The kernel's bridge between the ports: nothing to program.
        ip(&["-n", &sw, "link", "add", "br0", "type", "bridge"])?;
        for dev in ["p1", "p2"] {
            ip(&["-n", &sw, "link", "set", dev, "master", "br0"])?;
        }
        ip(&["-n", &sw, "link", "set", "br0", "up"])?;
        None
    } else if kind == SwitchKind::XdpWire {
        for (from, to) in [("p1", "p2"), ("p2", "p1")] {
            _wire.push(crate::offload::xdp::Ceiling::attach(&sw, from, to)?);
        }
        None
    } else if kind == SwitchKind::TcWire {
        for (from, to) in [("p1", "p2"), ("p2", "p1")] {
            _tc_wire.push(crate::offload::xdp::TcWire::attach(&sw, from, to)?);
        }
        None
    } else {
        Some(start_controller(
            a,
            app,
            &sw,
            &scratch.join("controller.log"),
        )?)
    };
    let target = ctl.as_ref().map_or("", |(_, t)| t.as_str()).to_string();
    let offlow = match &a.offlow {
        Some(p) => p.clone(),
        None => std::env::current_exe()?,
    };
    // Declared in this order: the switch stops before the controller.
    let mut _switch: Option<ChildGuard> = None;
    let mut _ovs: Option<Ovs> = None;
    match kind {
        SwitchKind::Offlow | SwitchKind::OfflowOffload | SwitchKind::OfflowOffloadTc => {
            // Inside the switch namespace, as ovs-vswitchd: the controller
            // listens on that namespace's loopback.
            let mut cmd = Command::new("ip");
            cmd.args(["netns", "exec", &sw])
                .arg(&offlow)
                .args([
                    "run",
                    "--port",
                    "p1=1",
                    "--port",
                    "p2=2",
                    "--fail-mode",
                    "secure",
                ])
                .args(["--workers", "1", "--controller", &target])
                .args(&a.offlow_args);
            let hook = match kind {
                SwitchKind::OfflowOffload => Some("xdp"),
                SwitchKind::OfflowOffloadTc => Some("tc"),
                _ => None,
            };
            if let Some(hook) = hook {
                cmd.args(["--offload", hook]);
            }
            let child = cmd
                // Info: the exit log holds the per-tier counters (kept with
                // OFFLOW_BENCH_KEEP).
                .env("RUST_LOG", "info")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::from(std::fs::File::create(
                    scratch.join("offlow.log"),
                )?))
                .spawn()
                .with_context(|| format!("starting {}", offlow.display()))?;
            _switch = Some(ChildGuard {
                child,
                what: "offlow run",
            });
        }
        SwitchKind::Ovs => _ovs = Some(Ovs::start_with(&sw, "system", &[], Some(&target))?),
        SwitchKind::Synthetic => unreachable!("run_synthetic_row"),
        SwitchKind::Bridge | SwitchKind::XdpWire | SwitchKind::TcWire => {}
    }
    let stop = Arc::new(AtomicBool::new(false));
    let server = start_server(&hb, p.server, stop.clone())?;
    let sa: SocketAddr = format!("{}:{SERVER_PORT}", p.server).parse()?;
    let ctl_pid = ctl.as_ref().map(|(g, _)| g.child.id());
    let switch_pid = match (&_switch, &_ovs) {
        (Some(g), _) => Some(g.child.id()),
        (None, Some(o)) => o.vswitchd_pid(),
        _ => None,
    };
    let result = (|| {
        wait_programmed(&ha, sa)?;
        let phase = Arc::new(AtomicU8::new(WARMUP));
        let done = Arc::new(AtomicU64::new(0));
        let ports = Arc::new(AtomicU32::new(0));
        let clients: Vec<_> = (0..a.concurrency.max(1))
            .map(|_| {
                let (ns, phase, done, ports) =
                    (ha.clone(), phase.clone(), done.clone(), ports.clone());
                std::thread::spawn(move || client(ns, sa, phase, done, ports))
            })
            .collect();
        sleep_unless_interrupted(Duration::from_secs_f64(a.warmup));
        phase.store(COUNT, Ordering::Relaxed);
        let t0 = Instant::now();
        let cpu0 = (
            ctl_pid.and_then(cpu_seconds),
            switch_pid.and_then(cpu_seconds),
        );
        sleep_unless_interrupted(Duration::from_secs_f64(seconds));
        let cpu1 = (
            ctl_pid.and_then(cpu_seconds),
            switch_pid.and_then(cpu_seconds),
        );
        phase.store(STOP, Ordering::Relaxed);
        let elapsed = t0.elapsed().as_secs_f64();
        let spent = |a: Option<f64>, b: Option<f64>| Some(b? - a?);
        let mut lat = Vec::new();
        let mut failed = 0;
        for c in clients {
            let r = c
                .join()
                .map_err(|_| anyhow::anyhow!("a client thread panicked"))?;
            lat.extend(r.latencies_ms);
            failed += r.failed;
        }
        Ok::<_, anyhow::Error>(PassFigures {
            latencies_ms: lat,
            failed,
            elapsed_s: elapsed,
            controller_cpu_s: spent(cpu0.0, cpu1.0),
            switch_cpu_s: spent(cpu0.1, cpu1.1),
        })
    })();
    stop.store(true, Ordering::Relaxed);
    let _ = server.join();
    result.with_context(|| {
        format!(
            "row {app:?} on {}: the controller's log is {}",
            kind.name(),
            scratch.join("controller.log").display()
        )
    })
}

/// Removed on drop unless `OFFLOW_BENCH_KEEP` is set (then the
/// controller's log stays for a look).
struct ScratchDir(PathBuf);

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if std::env::var_os("OFFLOW_BENCH_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// Run every row, in `--passes` rounds.
pub fn run(a: &SetupArgs) -> anyhow::Result<SetupReport> {
    let mut cells = Vec::new();
    for &app in &a.apps {
        for &kind in &a.switches {
            if kind == SwitchKind::Synthetic && app != App::Nat {
                // simple_switch_13 sets up per MAC, not per connection:
                // there is no per-connection exchange to replay.
                continue;
            }
            let wire = matches!(
                kind,
                SwitchKind::Bridge | SwitchKind::XdpWire | SwitchKind::TcWire
            );
            if wire && app != App::L2 {
                // Neither does NAT.
                continue;
            }
            cells.push((app, kind));
        }
    }
    let passes = a.passes.max(1);
    let seconds = a.seconds / f64::from(passes);
    let mut figures: Vec<Vec<PassFigures>> = cells.iter().map(|_| Vec::new()).collect();
    for pass in 1..=passes {
        for (&(app, kind), done) in cells.iter().zip(&mut figures) {
            if interrupted() {
                bail!("interrupted");
            }
            if passes == 1 {
                eprintln!("setup: {app:?} on {} ...", kind.name());
            } else {
                eprintln!(
                    "setup: {app:?} on {} (pass {pass} of {passes}) ...",
                    kind.name()
                );
            }
            done.push(run_row(a, app, kind, seconds)?);
        }
    }
    let mut rows: Vec<SetupRow> = cells
        .iter()
        .zip(&figures)
        .map(|(&(app, kind), f)| SetupRow::from_passes(app, kind.name(), f))
        .collect();
    // Ratios against Open vSwitch with the same application: over all the
    // passes, and pass by pass.
    let ovs: Vec<(App, f64, Vec<f64>)> = rows
        .iter()
        .filter(|r| r.switch == SwitchKind::Ovs.name())
        .map(|r| (r.app, r.conns_per_s, r.pass_conns_per_s.clone()))
        .collect();
    for r in &mut rows {
        if r.switch == SwitchKind::Ovs.name() {
            continue;
        }
        if let Some((_, total, per_pass)) = ovs.iter().find(|(app, ..)| *app == r.app) {
            r.vs_ovs = (*total > 0.0).then(|| r.conns_per_s / total);
            r.pass_vs_ovs = pass_ratios(&r.pass_conns_per_s, per_pass);
        }
    }
    Ok(SetupReport {
        experiment: "setup",
        concurrency: a.concurrency,
        seconds: a.seconds,
        passes,
        rows,
    })
}

/// Pass-by-pass ratios of `rates` over `anchor`'s (a pass whose anchor
/// set up nothing has none: the list then stops short).
fn pass_ratios(rates: &[f64], anchor: &[f64]) -> Vec<f64> {
    rates
        .iter()
        .zip(anchor)
        .map_while(|(r, o)| (*o > 0.0).then(|| r / o))
        .collect()
}

/// `offlow bench setup`.
pub fn main(a: &SetupArgs) -> anyhow::Result<()> {
    catch_interrupt();
    let r = run(a)?;
    let passes = if r.passes > 1 {
        format!(" in {} passes", r.passes)
    } else {
        String::new()
    };
    println!(
        "setup: new TCP connections through the switch, {} client threads, {} s counted per \
         row{passes} (connect, then close with an RST); flows installed by the controller on \
         packet-ins",
        r.concurrency, r.seconds
    );
    let mut t = Table::new([
        "app", "switch", "conns/s", "conns", "failed", "mean ms", "p50 ms", "p90 ms", "p99 ms",
        "max ms", "vs ovs", "ctl cpu", "sw cpu",
    ]);
    let cpu = |v: Option<f64>| v.map_or_else(|| "-".into(), |v| format!("{:.0}%", v * 100.0));
    let ms = |v: Option<f64>| v.map_or_else(|| "-".into(), |v| fmt_f(v, 3));
    for row in &r.rows {
        t.row([
            format!("{:?}", row.app).to_lowercase(),
            row.switch.clone(),
            fmt_f(row.conns_per_s, 0),
            row.conns.to_string(),
            row.failed.to_string(),
            ms(row.mean_ms),
            ms(row.p50_ms),
            ms(row.p90_ms),
            ms(row.p99_ms),
            ms(row.max_ms),
            row.vs_ovs
                .map_or_else(|| "-".into(), |v| format!("{}x", fmt_f(v, 2))),
            cpu(row.controller_cpu),
            cpu(row.switch_cpu),
        ]);
    }
    print!("{}", t.render());
    println!(
        "(cpu: share of one core over the counted seconds, from /proc; a controller near 100% \
         is the bound of its rows: os-ken runs one Python thread)"
    );
    if r.passes > 1 {
        println!("per pass, conns/s (vs ovs in the same pass):");
        for row in &r.rows {
            let each: Vec<String> = row
                .pass_conns_per_s
                .iter()
                .enumerate()
                .map(|(i, v)| match row.pass_vs_ovs.get(i) {
                    Some(x) => format!("{} ({}x)", fmt_f(*v, 0), fmt_f(*x, 2)),
                    None => fmt_f(*v, 0),
                })
                .collect();
            println!(
                "  {:<4} {:<30} {}",
                format!("{:?}", row.app).to_lowercase(),
                row.switch,
                each.join(", ")
            );
        }
    }
    if a.json {
        print_json_line(&serde_json::to_value(&r)?);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Source ports run 1024–65535 in turn, skip the server's, and wrap.
    #[test]
    fn source_ports_cycle_past_the_servers() {
        let next = AtomicU32::new(0);
        assert_eq!(next_source_port(&next), 1024);
        next.store(u32::from(SERVER_PORT) - 1024, Ordering::Relaxed);
        assert_eq!(next_source_port(&next), SERVER_PORT + 1);
        next.store(65535 - 1024, Ordering::Relaxed);
        assert_eq!(next_source_port(&next), 65535);
        assert_eq!(next_source_port(&next), 1024);
    }

    fn pass(conns: usize, elapsed_s: f64, cpu: Option<f64>) -> PassFigures {
        PassFigures {
            latencies_ms: (1..=conns).map(|i| i as f64).collect(),
            failed: 1,
            elapsed_s,
            controller_cpu_s: cpu,
            switch_cpu_s: Some(0.5),
        }
    }

    /// A row over its passes: rates over the summed seconds, statistics
    /// over every connect, CPU only when every pass read it.
    #[test]
    fn a_row_is_its_passes_together() {
        let row = SetupRow::from_passes(
            App::Nat,
            "offlow",
            &[pass(300, 1.0, Some(0.4)), pass(100, 1.0, Some(0.2))],
        );
        assert_eq!(row.conns, 400);
        assert_eq!(row.failed, 2);
        assert!((row.conns_per_s - 200.0).abs() < 1e-9);
        assert_eq!(row.pass_conns_per_s, vec![300.0, 100.0]);
        assert_eq!(row.max_ms, Some(300.0));
        // Latencies 1..=300 and 1..=100: the mean of all 400.
        let expected = (300.0 * 301.0 / 2.0 + 100.0 * 101.0 / 2.0) / 400.0;
        assert!((row.mean_ms.unwrap() - expected).abs() < 1e-9);
        assert!((row.controller_cpu.unwrap() - 0.3).abs() < 1e-9);
        assert!((row.switch_cpu.unwrap() - 0.5).abs() < 1e-9);
        let partial = SetupRow::from_passes(
            App::Nat,
            "offlow",
            &[pass(10, 1.0, Some(0.4)), pass(10, 1.0, None)],
        );
        assert_eq!(partial.controller_cpu, None);
    }

    #[test]
    fn pass_ratios_pair_passes_in_order_and_stop_at_an_empty_anchor() {
        assert_eq!(
            pass_ratios(&[300.0, 200.0], &[100.0, 100.0]),
            vec![3.0, 2.0]
        );
        assert_eq!(
            pass_ratios(&[300.0, 200.0, 90.0], &[100.0, 0.0, 30.0]),
            vec![3.0]
        );
        assert!(pass_ratios(&[300.0], &[]).is_empty());
    }
}
