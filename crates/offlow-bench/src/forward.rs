//! `offlow bench forward`: end-to-end forwarding rate between two hosts
//! (network namespaces) joined through a switch, for offlow, Open vSwitch
//! 3.1's userspace datapath and the Linux bridge, in one invocation.
//!
//! # Topology (built fresh for every row, removed after it)
//! ```text
//!  ns A: eth0 ──veth── p1 ┐ ns SW: the switch ┌ p2 ──veth── eth0 :ns B
//!  generator                                            receiver
//! ```
//! Rows:
//! - `loopback`: generator and receiver on `lo` of one namespace: what the
//!   two threads manage with no veth and no switch (an upper bound).
//! - `direct veth`: A's eth0 joined straight to B's eth0, no switch: the
//!   generator's own rate through the same kind of link the switches see.
//! - `linux bridge`: `br0` in SW with p1 and p2 enslaved (STP off).
//! - `offlow af_packet, N worker(s)`: `offlow run --netns SW --port p1
//!   --port p2 --workers N --fail-mode secure` with the two flows
//!   `in_port=1,actions=output:2` and back, added with `ovs-ofctl`.
//! - `offlow af_xdp`: the same with AF_XDP ports (one row per `--workers`
//!   value). With N > 1 workers the switch's veths get N queues (worker *i*
//!   takes queue *i*); every other row has single-queue veths, as before.
//!   A host's AF_PACKET transmit chooses the veth queue from the sending
//!   CPU rather than per flow, so the one generator thread may feed a
//!   single queue: the row then shows what the second worker costs more
//!   than what it adds.
//! - `ovs netdev system` / `ovs netdev afxdp`: a private ovsdb-server and
//!   ovs-vswitchd (own directory, run inside SW with `ip netns exec`), bridge
//!   `datapath_type=netdev`, p1/p2 as ports of type `system` (AF_PACKET in
//!   the netdev datapath) or `afxdp`, the same two port-to-port flows, PMD
//!   settings left at their defaults.
//!
//! # Traffic
//! `--flows` UDP flows 10.0.0.1:(10000+i) → 10.0.0.2:9 (valid IPv4 and UDP
//! checksums), frames built once ([`crate::workload::build_frame`]) and sent round
//! robin. `--frame-size` counts the 4-byte FCS, as RFC 2544 does: the
//! default 64 is a 60-byte frame handed to the kernel. The destination MAC
//! (02:00:00:00:00:02) is deliberately nobody's: the switches forward it to
//! the other port (port-to-port flows; the Linux bridge floods an unknown
//! unicast to its only other port) and the receiving host's IPv4 stack
//! discards it at its first check (`PACKET_OTHERHOST`), so B's kernel does
//! no routing work per frame; the receiver's packet socket is a tap and
//! sees the frame before that check.
//!
//! The generator (one thread, busy) sends batches with `sendmmsg` on an
//! [`offlow_io::AfPacketPort`] with the qdisc bypassed; the receiver (one thread,
//! sleeping in `poll` between TPACKET_V3 blocks) counts the frames that are
//! UDP to port 9. A row waits for the first frame to arrive (up to
//! [`FIRST_FRAME_WAIT`]), runs `--warmup` seconds, then counts over
//! `--seconds`: frames the kernel accepted from the generator (sent),
//! frames counted (received), and frames the kernel dropped because the
//! receiver's ring was full (ring drops: the receiver falling behind).
//!
//! # Is the generator the bottleneck?
//! The `direct veth` row is the generator's rate with no switch on the
//! path. Each switched row gets a verdict ([`limited_by`]): `switch` when
//! it lost more than [`SWITCH_LIMITED_LOSS`] of what was offered (offered
//! more than it forwarded: the generator was not the limit), `shared cpu`
//! when it lost nothing but the generator ran below 90% of its direct rate
//! (on two cores the switch's threads, and the kernel work a veth transmit
//! does on the sender's own core, slow the sender), `generator` otherwise.
//! The receiver's ring drops are printed too (all zero: it kept up).
//!
//! The namespaces, the switch process and the traffic threads come from
//! [`crate::topo`] and [`crate::traffic`] (shared with `bench control`).
//!
//! Interrupts: SIGINT/SIGTERM end the current row early and stop the run,
//! so the guards still remove everything.
//!
//! # Invariants
//! Every namespace, daemon, bridge and temporary directory a row creates is
//! owned by a guard whose `Drop` removes it, so an error in the middle of a
//! row leaves nothing behind.
//!
//! Thread-safety: per row, a generator and a receiver thread sharing only
//! atomics (stop flag, counters) with the measuring thread.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::Serialize;
use serde_json::json;

use crate::report::{fmt_f, print_json_line, Table};
use crate::topo::{
    self, catch_interrupt, interrupted, ip, run_cmd, sleep_unless_interrupted, unique_tag,
    ChildGuard, Topo,
};
use crate::traffic::{Snapshot, Traffic};
use crate::workload::FCS_LEN;

pub use crate::traffic::{
    build_frames, is_experiment_frame, DST_IP, DST_PORT, FIRST_FRAME_WAIT, FIRST_SRC_PORT, SRC_IP,
};

/// Kinds of row, for `--rows`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RowKind {
    /// Generator and receiver on `lo`, no link, no switch.
    Loopback,
    /// A direct veth pair, no switch.
    Direct,
    /// The Linux bridge.
    Bridge,
    /// offlow with AF_PACKET ports (one row per `--workers` value).
    Offlow,
    /// offlow with AF_XDP ports (one row per `--workers` value).
    OfflowXdp,
    /// Open vSwitch netdev datapath, ports of type `system`.
    OvsSystem,
    /// Open vSwitch netdev datapath, ports of type `afxdp`.
    OvsAfxdp,
}

/// `offlow bench forward` options.
#[derive(Debug, Clone, clap::Args)]
pub struct ForwardArgs {
    /// UDP flows (distinct source ports).
    #[arg(long, default_value_t = 100)]
    pub flows: usize,
    /// Frame size in bytes including the 4-byte FCS (64: a 60-byte frame).
    #[arg(long, default_value_t = 64)]
    pub frame_size: usize,
    /// Seconds counted per row.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Seconds of traffic before counting starts.
    #[arg(long, default_value_t = 0.5)]
    pub warmup: f64,
    /// offlow worker counts, one row each (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub workers: Vec<usize>,
    /// Which rows to run (comma-separated; default: all).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "loopback,direct,bridge,offlow,offlow-xdp,ovs-system,ovs-afxdp"
    )]
    pub rows: Vec<RowKind>,
    /// The offlow binary (default: this executable).
    #[arg(long)]
    pub offlow_bin: Option<PathBuf>,
    /// An extra argument for the offlow rows' `offlow run` (repeatable),
    /// e.g. `--offlow-arg=--busy-poll`.
    #[arg(long = "offlow-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub offlow_args: Vec<String>,
    /// AF_PACKET receive rings for the offlow AF_PACKET rows: one row per
    /// ring per `--workers` value, each started with `--af-packet-ring
    /// RING` (comma-separated; default: the switch's default ring only).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub af_packet_rings: Vec<AfPacketRing>,
    /// Run every row this many times, round after round (rows
    /// interleaved, so slow drift of the machine's load hits them alike).
    #[arg(long, default_value_t = 1)]
    pub rounds: usize,
    /// Print one JSON object as the last line.
    #[arg(long)]
    pub json: bool,
}

/// An `offlow run --af-packet-ring` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AfPacketRing {
    /// TPACKET_V2 frames (per-frame wake-up; the default).
    Frames,
    /// TPACKET_V3 blocks (batched; a lone frame waits for the retire timer).
    Blocks,
    /// Frames spilling into blocks (experimental).
    Adaptive,
}

impl AfPacketRing {
    /// The command-line value.
    pub fn name(self) -> &'static str {
        match self {
            AfPacketRing::Frames => "frames",
            AfPacketRing::Blocks => "blocks",
            AfPacketRing::Adaptive => "adaptive",
        }
    }
}

impl Default for ForwardArgs {
    fn default() -> ForwardArgs {
        ForwardArgs {
            flows: 100,
            frame_size: 64,
            seconds: 3.0,
            warmup: 0.5,
            workers: vec![1, 2],
            rows: vec![
                RowKind::Loopback,
                RowKind::Direct,
                RowKind::Bridge,
                RowKind::Offlow,
                RowKind::OfflowXdp,
                RowKind::OvsSystem,
                RowKind::OvsAfxdp,
            ],
            offlow_bin: None,
            offlow_args: Vec::new(),
            af_packet_rings: Vec::new(),
            rounds: 1,
            json: false,
        }
    }
}

/// One measured (or skipped, or failed) configuration.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Human-readable name.
    pub name: String,
    /// Which kind of row.
    pub kind: &'static str,
    /// offlow worker threads (offlow rows only).
    pub workers: Option<usize>,
    /// Frames the kernel accepted from the generator while counting.
    pub sent: u64,
    /// Frames the receiver counted while counting.
    pub received: u64,
    /// Frames dropped because the receiver's ring was full.
    pub rx_ring_drops: u64,
    /// Length of the counting window, seconds.
    pub seconds: f64,
    /// Sent rate, Mpps.
    pub sent_mpps: f64,
    /// Received rate, Mpps: the figure of the row.
    pub rx_mpps: f64,
    /// `1 - received / sent` (0 when nothing was sent).
    pub loss: f64,
    /// What set this row's figure, judged from its loss and the direct-veth
    /// row (see [`limited_by`]); `None` without a direct row.
    pub limited_by: Option<&'static str>,
    /// Why the row was not run.
    pub skipped: Option<String>,
    /// Why the row failed.
    pub error: Option<String>,
}

impl Row {
    fn empty(name: String, kind: &'static str, workers: Option<usize>) -> Row {
        Row {
            name,
            kind,
            workers,
            sent: 0,
            received: 0,
            rx_ring_drops: 0,
            seconds: 0.0,
            sent_mpps: 0.0,
            rx_mpps: 0.0,
            loss: 0.0,
            limited_by: None,
            skipped: None,
            error: None,
        }
    }

    /// Whether this is an offlow row that ran.
    fn is_offlow(&self) -> bool {
        self.kind == "offlow" && self.skipped.is_none() && self.error.is_none()
    }

    fn is_ovs(&self) -> bool {
        self.kind.starts_with("ovs") && self.skipped.is_none() && self.error.is_none()
    }
}

/// Everything `offlow bench forward` measured.
#[derive(Debug, Clone, Serialize)]
pub struct ForwardReport {
    /// Flows in the traffic.
    pub flows: usize,
    /// Frame size with FCS.
    pub frame_size: usize,
    /// The rows in the order run.
    pub rows: Vec<Row>,
}

impl ForwardReport {
    /// Best received rate of the offlow rows.
    pub fn offlow_mpps(&self) -> Option<f64> {
        best(self.rows.iter().filter(|r| r.is_offlow()))
    }

    /// Best received rate of the Open vSwitch rows (the anchor).
    pub fn anchor_mpps(&self) -> Option<f64> {
        best(self.rows.iter().filter(|r| r.is_ovs()))
    }

    /// The `--json` object.
    pub fn to_json(&self) -> serde_json::Value {
        let offlow = self.offlow_mpps();
        let anchor = self.anchor_mpps();
        let ratio = match (offlow, anchor) {
            (Some(o), Some(a)) if a > 0.0 => Some(o / a),
            _ => None,
        };
        let anchor_name = self
            .rows
            .iter()
            .filter(|r| r.is_ovs())
            .max_by(|a, b| a.rx_mpps.total_cmp(&b.rx_mpps))
            .map(|r| r.name.clone());
        json!({
            "experiment": "forward",
            "offlow_mpps": offlow,
            "anchor": anchor_name,
            "anchor_mpps": anchor,
            "ratio": ratio,
            "flows": self.flows,
            "frame_size": self.frame_size,
            "rows": self.rows,
        })
    }
}

/// Loss above which a row counts as limited by its switch.
pub const SWITCH_LIMITED_LOSS: f64 = 0.05;

/// What limited a switched row: `"switch"` when it dropped more than
/// [`SWITCH_LIMITED_LOSS`] of what the generator offered (it was offered
/// more than it forwarded); otherwise, when the generator's own rate fell
/// below 90% of its no-switch (direct veth) rate, `"shared cpu"` (the
/// switch kept up, but its threads or the kernel work it causes on the
/// sender's core slowed the sender: the figure is the whole system's on
/// two cores); else `"generator"` (the figure is a lower bound).
pub fn limited_by(row: &Row, direct_mpps: f64) -> &'static str {
    if row.loss > SWITCH_LIMITED_LOSS {
        "switch"
    } else if row.sent_mpps < 0.9 * direct_mpps {
        "shared cpu"
    } else {
        "generator"
    }
}

fn best<'a>(rows: impl Iterator<Item = &'a Row>) -> Option<f64> {
    rows.map(|r| r.rx_mpps).reduce(f64::max)
}

fn check_args(a: &ForwardArgs) -> anyhow::Result<()> {
    if a.flows == 0 || a.flows > 50_000 {
        bail!("--flows must be between 1 and 50000");
    }
    if !(64..=1518).contains(&a.frame_size) {
        bail!("--frame-size must be between 64 and 1518 (bytes with FCS)");
    }
    // Written so that NaN fails too.
    let seconds_ok = a.seconds > 0.0 && a.seconds <= 600.0;
    if !seconds_ok || !(0.0..=60.0).contains(&a.warmup) {
        bail!("--seconds must be in (0, 600] and --warmup in [0, 60]");
    }
    if a.workers.iter().any(|&w| w == 0 || w > 64) {
        bail!("--workers values must be between 1 and 64");
    }
    if a.rounds == 0 || a.rounds > 100 {
        bail!("--rounds must be between 1 and 100");
    }
    Ok(())
}

/// The two port-to-port flows every switched row installs.
pub(crate) const FLOWS: [&str; 2] = ["in_port=1,actions=output:2", "in_port=2,actions=output:1"];

/// Start `offlow run` on p1/p2 of the switch namespace, secure mode, with
/// the two port-to-port flows (added with `ovs-ofctl`).
fn start_offlow(
    bin: &Path,
    sw: &str,
    workers: usize,
    xdp: bool,
    extra: &[String],
) -> anyhow::Result<ChildGuard> {
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    start_offlow_with(bin, sw, workers, xdp, &extra)
}

/// [`start_offlow`] with `extra` arguments for `offlow run` (used by
/// `bench offload`).
pub(crate) fn start_offlow_with(
    bin: &Path,
    sw: &str,
    workers: usize,
    xdp: bool,
    extra: &[&str],
) -> anyhow::Result<ChildGuard> {
    start_offlow_logged(bin, sw, workers, xdp, extra, None)
}

/// [`start_offlow_with`] with the switch's stderr (at `RUST_LOG=info`) in
/// `log` when given (used by `bench offload`'s latency rows).
pub(crate) fn start_offlow_logged(
    bin: &Path,
    sw: &str,
    workers: usize,
    xdp: bool,
    extra: &[&str],
    log: Option<&Path>,
) -> anyhow::Result<ChildGuard> {
    let (g, port) = topo::start_offlow_logged(bin, sw, workers, xdp, extra, log)?;
    let target = format!("tcp:127.0.0.1:{port}");
    for f in FLOWS {
        run_cmd(Command::new("ovs-ofctl").args([
            "-O",
            "OpenFlow13",
            "--no-names",
            "--timeout=20",
            "add-flow",
            &target,
            f,
        ]))?;
    }
    Ok(g)
}

/// A private Open vSwitch: ovsdb-server and ovs-vswitchd (inside the
/// switch namespace) with their own directory, all removed when dropped.
pub(crate) struct Ovs {
    dir: PathBuf,
    /// Declared before `db`: vswitchd stops first.
    vswitchd: Option<ChildGuard>,
    db: Option<ChildGuard>,
}

impl Drop for Ovs {
    fn drop(&mut self) {
        drop(self.vswitchd.take());
        drop(self.db.take());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Ovs {
    fn cmd(&self, prog: &str) -> Command {
        let mut c = Command::new(prog);
        for v in ["OVS_RUNDIR", "OVS_DBDIR", "OVS_LOGDIR", "OVS_SYSCONFDIR"] {
            c.env(v, &self.dir);
        }
        c
    }

    fn db_arg(&self) -> String {
        format!("--db=unix:{}", self.dir.join("db.sock").display())
    }

    /// Its OpenFlow channel for `ovs-ofctl` (bridge `br0`'s management
    /// socket).
    pub(crate) fn of_target(&self) -> String {
        format!("unix:{}", self.dir.join("br0.mgmt").display())
    }

    /// The ovs-vswitchd process id (the datapath's threads are its).
    pub(crate) fn vswitchd_pid(&self) -> Option<u32> {
        self.vswitchd.as_ref().map(|g| g.child.id())
    }

    /// Start it in `sw` with p1 (port 1) and p2 (port 2) of type
    /// `port_type` and the two port-to-port flows.
    pub(crate) fn start(sw: &str, port_type: &str) -> anyhow::Result<Ovs> {
        Ovs::start_with(sw, port_type, &FLOWS, None)
    }

    /// Start it in `sw` with p1 (port 1) and p2 (port 2) of type
    /// `port_type`, the flows `flows`, and, with `controller`
    /// (`tcp:HOST:PORT`), that controller.
    pub(crate) fn start_with(
        sw: &str,
        port_type: &str,
        flows: &[&str],
        controller: Option<&str>,
    ) -> anyhow::Result<Ovs> {
        let ovs = Ovs::launch(sw)?;
        let db_arg = ovs.db_arg();
        let mut vsctl = ovs.cmd("ovs-vsctl");
        vsctl.args([&db_arg, "--timeout=30"]).args([
            "add-br",
            "br0",
            "--",
            "set",
            "bridge",
            "br0",
            "datapath_type=netdev",
            "protocols=OpenFlow13",
            "fail-mode=secure",
        ]);
        for (i, p) in ["p1", "p2"].iter().enumerate() {
            vsctl.args(["--", "add-port", "br0", p, "--", "set", "interface", p]);
            vsctl.arg(format!("ofport_request={}", i + 1));
            vsctl.arg(format!("type={port_type}"));
        }
        run_cmd(&mut vsctl).context("creating the OVS bridge")?;
        ovs.check_interfaces()?;
        if let Some(c) = controller {
            ovs.vsctl(&["set-controller", "br0", c])?;
        }
        for f in flows {
            ovs.add_flow("br0", f)?;
        }
        Ok(ovs)
    }

    /// `ovs-vsctl ARGS` against this instance's database (30 s timeout).
    pub(crate) fn vsctl(&self, args: &[&str]) -> anyhow::Result<String> {
        let db_arg = self.db_arg();
        run_cmd(
            self.cmd("ovs-vsctl")
                .args([&db_arg, "--timeout=30"])
                .args(args),
        )
    }

    /// `ovs-ofctl -O OpenFlow13 add-flow` on `bridge`'s management socket.
    pub(crate) fn add_flow(&self, bridge: &str, flow: &str) -> anyhow::Result<()> {
        let mgmt = format!("unix:{}", self.dir.join(format!("{bridge}.mgmt")).display());
        run_cmd(
            self.cmd("ovs-ofctl")
                .args(["-O", "OpenFlow13", "add-flow", &mgmt, flow]),
        )
        .map(drop)
    }

    /// `ovs-appctl ARGS` to ovs-vswitchd.
    pub(crate) fn appctl(&self, args: &[&str]) -> anyhow::Result<String> {
        let target = self.dir.join("vswitchd.ctl");
        run_cmd(self.cmd("ovs-appctl").arg("-t").arg(target).args(args))
    }

    /// An error naming the first interface OVS could not open (its
    /// Interface row's `error` column).
    pub(crate) fn check_interfaces(&self) -> anyhow::Result<()> {
        let errs = self.vsctl(&["--bare", "--columns=error", "list", "interface"])?;
        if !errs.trim().is_empty() {
            bail!("OVS port error: {}", errs.trim());
        }
        Ok(())
    }

    /// ovsdb-server and ovs-vswitchd (in `sw`), no bridge yet.
    pub(crate) fn launch(sw: &str) -> anyhow::Result<Ovs> {
        let dir = std::env::temp_dir().join(format!("offlow-fwd-ovs-{}", unique_tag()));
        std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut ovs = Ovs {
            dir,
            vswitchd: None,
            db: None,
        };
        let d = ovs.dir.clone();
        let schema = ["/usr/share/openvswitch/vswitch.ovsschema"];
        run_cmd(
            ovs.cmd("ovsdb-tool")
                .arg("create")
                .arg(d.join("conf.db"))
                .args(schema),
        )?;
        let db = ovs
            .cmd("ovsdb-server")
            .arg(d.join("conf.db"))
            .arg(format!("--remote=punix:{}", d.join("db.sock").display()))
            .arg(format!(
                "--unixctl={}",
                d.join("ovsdb-server.ctl").display()
            ))
            .arg(format!(
                "--log-file={}",
                d.join("ovsdb-server.log").display()
            ))
            .args(["-vconsole:off"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting ovsdb-server")?;
        ovs.db = Some(ChildGuard {
            child: db,
            what: "ovsdb-server",
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        while !d.join("db.sock").exists() {
            if let Some(g) = ovs.db.as_mut() {
                g.check_alive()?;
            }
            if Instant::now() > deadline {
                bail!("ovsdb-server did not create its socket within 10 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let db_arg = ovs.db_arg();
        run_cmd(ovs.cmd("ovs-vsctl").args([&db_arg, "--no-wait", "init"]))?;
        // `ip netns exec` execs the daemon, so the child's pid is vswitchd's.
        let vsd = ovs
            .cmd("ip")
            .args(["netns", "exec", sw, "ovs-vswitchd"])
            .arg(format!("unix:{}", d.join("db.sock").display()))
            .arg(format!("--unixctl={}", d.join("vswitchd.ctl").display()))
            .arg(format!(
                "--log-file={}",
                d.join("ovs-vswitchd.log").display()
            ))
            .args(["-vconsole:off"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting ovs-vswitchd")?;
        ovs.vswitchd = Some(ChildGuard {
            child: vsd,
            what: "ovs-vswitchd",
        });
        Ok(ovs)
    }
}

/// Run the traffic over a built topology and count.
fn measure(
    t: &Topo,
    frames: &Arc<Vec<Vec<u8>>>,
    args: &ForwardArgs,
) -> anyhow::Result<(Snapshot, f64)> {
    let traffic = Traffic::start(t, frames, args.frame_size, None, "fwd")?;
    traffic.wait_first_frame();
    sleep_unless_interrupted(Duration::from_secs_f64(args.warmup));
    let s0 = traffic.snapshot();
    let t0 = Instant::now();
    sleep_unless_interrupted(Duration::from_secs_f64(args.seconds));
    let s1 = traffic.snapshot();
    let elapsed = t0.elapsed().as_secs_f64();
    traffic.stop()?;
    Ok((s1.since(&s0), elapsed))
}

// --------------------------------------------------------------------- rows --

enum Plan {
    Loopback,
    Direct,
    Bridge,
    /// Workers, and the AF_PACKET ring asked for (`None`: the default).
    Offlow(usize, Option<AfPacketRing>),
    OfflowXdp(usize),
    Ovs(&'static str),
}

impl Plan {
    fn name(&self) -> String {
        match self {
            Plan::Loopback => "loopback (lo, no switch)".into(),
            Plan::Direct => "direct veth (no switch)".into(),
            Plan::Bridge => "linux bridge".into(),
            Plan::Offlow(w, ring) => format!(
                "offlow af_packet{}, {w} worker{}",
                ring.map_or(String::new(), |r| format!(" {} ring", r.name())),
                if *w == 1 { "" } else { "s" }
            ),
            Plan::OfflowXdp(1) => "offlow af_xdp, 1 worker".into(),
            Plan::OfflowXdp(w) => format!("offlow af_xdp, {w} workers"),
            Plan::Ovs(t) => format!("ovs 3.1 netdev, type={t}"),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Plan::Loopback => "loopback",
            Plan::Direct => "direct",
            Plan::Bridge => "bridge",
            Plan::Offlow(..) => "offlow",
            Plan::OfflowXdp(_) => "offlow",
            Plan::Ovs("afxdp") => "ovs-afxdp",
            Plan::Ovs(_) => "ovs-system",
        }
    }
}

fn run_row(
    plan: &Plan,
    frames: &Arc<Vec<Vec<u8>>>,
    args: &ForwardArgs,
    bin: &Path,
) -> anyhow::Result<(Snapshot, f64)> {
    match plan {
        Plan::Loopback => measure(&Topo::loopback()?, frames, args),
        Plan::Direct => measure(&Topo::hosts(false, 1)?, frames, args),
        Plan::Bridge => {
            let t = Topo::hosts(true, 1)?;
            let sw = t.sw()?;
            ip(&["-n", sw, "link", "add", "name", "br0", "type", "bridge"])?;
            for p in ["p1", "p2"] {
                ip(&["-n", sw, "link", "set", p, "master", "br0"])?;
            }
            ip(&["-n", sw, "link", "set", "br0", "up"])?;
            measure(&t, frames, args)
        }
        Plan::Offlow(w, ring) => {
            let t = Topo::hosts(true, 1)?;
            let mut extra = args.offlow_args.clone();
            if let Some(r) = ring {
                extra.extend(["--af-packet-ring".to_string(), r.name().to_string()]);
            }
            let _switch = start_offlow(bin, t.sw()?, *w, false, &extra)?;
            measure(&t, frames, args)
        }
        // The generator's frames carry complete checksums: AF_XDP's lack of
        // a partial-checksum flag does not matter here.
        Plan::OfflowXdp(w) => {
            let t = Topo::hosts(true, *w)?;
            let _switch = start_offlow(bin, t.sw()?, *w, true, &args.offlow_args)?;
            measure(&t, frames, args)
        }
        Plan::Ovs(ty) => {
            let t = Topo::hosts(true, 1)?;
            let _ovs = Ovs::start(t.sw()?, ty)?;
            measure(&t, frames, args)
        }
    }
}

/// Run every requested row.
pub fn run(args: &ForwardArgs) -> anyhow::Result<ForwardReport> {
    check_args(args)?;
    let bin = match &args.offlow_bin {
        Some(b) => b.clone(),
        None => std::env::current_exe().context("locating the offlow binary")?,
    };
    let frames = Arc::new(build_frames(args.flows, args.frame_size));
    let mut plans = Vec::new();
    for k in &args.rows {
        match k {
            RowKind::Loopback => plans.push(Plan::Loopback),
            RowKind::Direct => plans.push(Plan::Direct),
            RowKind::Bridge => plans.push(Plan::Bridge),
            RowKind::Offlow => {
                for &w in &args.workers {
                    if args.af_packet_rings.is_empty() {
                        plans.push(Plan::Offlow(w, None));
                    }
                    plans.extend(
                        args.af_packet_rings
                            .iter()
                            .map(|&r| Plan::Offlow(w, Some(r))),
                    );
                }
            }
            RowKind::OfflowXdp => plans.extend(args.workers.iter().map(|&w| Plan::OfflowXdp(w))),
            RowKind::OvsSystem => plans.push(Plan::Ovs("system")),
            RowKind::OvsAfxdp => plans.push(Plan::Ovs("afxdp")),
        }
    }
    let mut rows = Vec::new();
    // Round after round over the same rows: `--rounds` interleaves them.
    let rounds = (1..=args.rounds).flat_map(|k| plans.iter().map(move |p| (k, p)));
    for (round, p) in rounds {
        if interrupted() {
            bail!("interrupted (everything created so far was removed)");
        }
        let workers = match p {
            Plan::Offlow(w, _) => Some(*w),
            Plan::OfflowXdp(w) => Some(*w),
            _ => None,
        };
        let name = if args.rounds > 1 {
            format!("{} [round {round}]", p.name())
        } else {
            p.name()
        };
        let mut row = Row::empty(name, p.kind(), workers);
        eprint!("forward: {} ... ", row.name);
        let _ = std::io::stderr().flush();
        match run_row(p, &frames, args, &bin) {
            Ok((s, secs)) => {
                row.sent = s.sent;
                row.received = s.received;
                row.rx_ring_drops = s.ring_drops;
                row.seconds = secs;
                row.sent_mpps = s.sent as f64 / secs / 1e6;
                row.rx_mpps = s.received as f64 / secs / 1e6;
                row.loss = if s.sent > 0 {
                    1.0 - (s.received as f64 / s.sent as f64).min(1.0)
                } else {
                    0.0
                };
                eprintln!("{} Mpps", fmt_f(row.rx_mpps, 3));
            }
            Err(e) => {
                eprintln!("failed: {e:#}");
                row.error = Some(format!("{e:#}"));
            }
        }
        rows.push(row);
    }
    let ran = |r: &&Row| r.error.is_none() && r.skipped.is_none();
    let direct = rows
        .iter()
        .filter(ran)
        .find(|r| r.kind == "direct")
        .map(|r| r.rx_mpps);
    if let Some(d) = direct {
        for r in &mut rows {
            let switched = matches!(r.kind, "bridge" | "offlow" | "ovs-system" | "ovs-afxdp");
            if switched && r.error.is_none() && r.skipped.is_none() {
                r.limited_by = Some(limited_by(r, d));
            }
        }
    }
    Ok(ForwardReport {
        flows: args.flows,
        frame_size: args.frame_size,
        rows,
    })
}

/// `offlow bench forward`.
pub fn main(args: &ForwardArgs) -> anyhow::Result<()> {
    catch_interrupt();
    let r = run(args)?;
    println!(
        "forward: {} UDP flows, {}-byte frames ({} bytes + FCS), {} s counted per row after {} s warm-up",
        r.flows,
        r.frame_size,
        r.frame_size - FCS_LEN,
        args.seconds,
        args.warmup
    );
    let mut t = Table::new([
        "configuration",
        "sent Mpps",
        "received Mpps",
        "loss %",
        "ring drops",
        "limited by",
    ]);
    let mut notes = Vec::new();
    for row in &r.rows {
        if let Some(why) = &row.skipped {
            notes.push(format!("{}: skipped: {why}", row.name));
        }
        if let Some(e) = &row.error {
            notes.push(format!("{}: error: {e}", row.name));
        }
        let ran = row.skipped.is_none() && row.error.is_none();
        let num = |v: String| if ran { v } else { "-".into() };
        t.row([
            row.name.clone(),
            num(fmt_f(row.sent_mpps, 3)),
            num(fmt_f(row.rx_mpps, 3)),
            num(fmt_f(row.loss * 100.0, 1)),
            num(row.rx_ring_drops.to_string()),
            row.limited_by.unwrap_or("").to_string(),
        ]);
    }
    print!("{}", t.render());
    for n in notes {
        println!("{n}");
    }
    let direct = r
        .rows
        .iter()
        .find(|x| x.kind == "direct" && x.error.is_none())
        .map(|x| x.rx_mpps);
    let best_switched = r
        .rows
        .iter()
        .filter(|x| matches!(x.kind, "bridge" | "offlow" | "ovs-system" | "ovs-afxdp"))
        .filter(|x| x.error.is_none() && x.skipped.is_none())
        .max_by(|a, b| a.rx_mpps.total_cmp(&b.rx_mpps));
    match (direct, best_switched) {
        (Some(d), Some(s)) => println!(
            "generator check: with no switch (direct veth) the generator delivers {} Mpps; \
             the best switched row ({}) delivers {} Mpps = {:.0}% of that. \
             'limited by': switch = it dropped >{:.0}% of the offered frames (offered more \
             than it forwarded); shared cpu = no loss, but the sender ran below 90% of its \
             direct rate (switch threads and the kernel work they cause share the 2 cores); \
             generator = no loss at the generator's full rate (a lower bound).{}",
            fmt_f(d, 3),
            s.name,
            fmt_f(s.rx_mpps, 3),
            if d > 0.0 { s.rx_mpps / d * 100.0 } else { 0.0 },
            SWITCH_LIMITED_LOSS * 100.0,
            if r.rows.iter().any(|x| x.limited_by == Some("generator")) {
                " WARNING: some rows are generator-bound."
            } else {
                ""
            }
        ),
        _ => println!("generator check: needs the direct and a switched row"),
    }
    let drops: u64 = r.rows.iter().map(|x| x.rx_ring_drops).sum();
    println!(
        "receiver check: {drops} frames lost to a full receive ring over all rows{}",
        if drops == 0 {
            " (the receiver kept up)"
        } else {
            " (the receiver fell behind: see 'ring drops')"
        }
    );
    match (r.offlow_mpps(), r.anchor_mpps()) {
        (Some(o), Some(a)) if a > 0.0 => println!(
            "offlow best {} Mpps vs Open vSwitch best {} Mpps: {}×",
            fmt_f(o, 3),
            fmt_f(a, 3),
            fmt_f(o / a, 2)
        ),
        _ => {}
    }
    if args.json {
        print_json_line(&r.to_json());
    }
    if interrupted() {
        bail!("interrupted: the last row's figures are short");
    }
    let failed = r.rows.iter().filter(|x| x.error.is_some()).count();
    if failed > 0 {
        bail!("{failed} row(s) failed (see the table)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_headline_takes_best_rows() {
        let mut rows = Vec::new();
        for (kind, mpps) in [
            ("offlow", 1.0),
            ("offlow", 1.5),
            ("ovs-system", 0.5),
            ("ovs-afxdp", 0.75),
            ("bridge", 9.0),
        ] {
            let mut r = Row::empty(kind.into(), kind, None);
            r.rx_mpps = mpps;
            rows.push(r);
        }
        let mut failed = Row::empty("x".into(), "ovs-afxdp", None);
        failed.rx_mpps = 100.0;
        failed.error = Some("boom".into());
        rows.push(failed);
        let rep = ForwardReport {
            flows: 100,
            frame_size: 64,
            rows,
        };
        let j = rep.to_json();
        assert_eq!(j["experiment"], "forward");
        assert_eq!(j["offlow_mpps"], 1.5);
        assert_eq!(j["anchor_mpps"], 0.75);
        assert_eq!(j["ratio"], 2.0);
        assert_eq!(j["rows"].as_array().map(Vec::len), Some(6));
    }

    #[test]
    fn limited_by_reads_loss_then_sender_rate() {
        let mut r = Row::empty("x".into(), "offlow", Some(1));
        (r.loss, r.sent_mpps) = (0.3, 1.0);
        assert_eq!(limited_by(&r, 1.0), "switch");
        (r.loss, r.sent_mpps) = (0.01, 0.5);
        assert_eq!(limited_by(&r, 1.0), "shared cpu");
        (r.loss, r.sent_mpps) = (0.01, 0.95);
        assert_eq!(limited_by(&r, 1.0), "generator");
    }

    #[test]
    fn bad_arguments_are_refused() {
        let ok = ForwardArgs::default();
        assert!(check_args(&ok).is_ok());
        for f in [
            |a: &mut ForwardArgs| a.flows = 0,
            |a: &mut ForwardArgs| a.frame_size = 63,
            |a: &mut ForwardArgs| a.seconds = 0.0,
            |a: &mut ForwardArgs| a.workers = vec![0],
        ] {
            let mut a = ok.clone();
            f(&mut a);
            assert!(check_args(&a).is_err());
        }
    }
}
