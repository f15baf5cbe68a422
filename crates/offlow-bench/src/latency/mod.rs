//! `offlow bench latency`: per-packet latency through a switch, by the
//! Stuttgart latency report's method: a prober sends UDP probes that the
//! switch sends back out of the port they came in on (OpenFlow `IN_PORT`
//! output), timestamps them with `SO_TIMESTAMPING` ([`prober`]), and
//! reports, per configuration, probes sent and lost, the round-trip
//! time's mean, standard deviation, minimum and p50/p99/p99.9 ([`stats`]),
//! and the processing delay Δt_proc = Δt_rtt − 2·Δt_prop − Δt_trans.
//!
//! # Passes
//! The switches run one after another, each on its own topology, and a
//! shared machine's load drifts over the minutes a run takes: a switch
//! whose block met the busy minutes would look slower than it is. So the
//! probes are split into passes (`--passes`, default 4): every pass runs
//! every switch over every configuration with its share of the probes, and
//! a configuration's row is its probes from all passes, in send order
//! (sequence numbers continue across passes). Drift then reaches every
//! switch in each pass; the price is a switch start, table installs and a
//! warm-up per pass.
//!
//! # Topology (one per switch and pass, kept for all its configurations)
//! ```text
//!  ns A: eth0 ──veth── p1 ┐ ns SW: the switch ┌ p2 ──veth── eth0 :ns B
//!  prober (port 1)                               background stream (port 2)
//! ```
//! # Switches
//! offlow with AF_PACKET ports, with AF_XDP ports, and offloaded (`offlow
//! run --offload xdp --config` with [`crate::offload::ping::OFFLOAD_CONFIG`],
//! AF_PACKET ports: the probe's microflow is promoted to the XDP tier,
//! which answers with `XDP_TX`; the hosts' veths then carry an XDP
//! pass-through program, without which a veth does not deliver `XDP_TX`
//! frames to its peer);
//! Open vSwitch 3.1's netdev datapath with ports of type `system` and
//! `afxdp` ([`crate::forward`]'s private instance); and the Linux bridge,
//! which cannot do `IN_PORT`: its `p1` is in hairpin mode with a static
//! FDB entry sending the probe's `eth_dst` to `p1`, so the bridge hands the
//! probe back the way it came. One packet worker for offlow, defaults for
//! Open vSwitch. Rules go in through each switch's OpenFlow channel with
//! `ovs-ofctl add-flows` ([`rules`]).
//!
//! # Sweeps
//! (a) frame sizes (wire sizes with preamble, SFD and FCS: 72..1526 B,
//! i.e. 60..1514-byte frames handed to the kernel) with 200 L2 entries;
//! (b) match tuples with 200 entries; (c) table sizes 200..100K for the
//! chosen tuples; (d) the probes while a background stream from host B,
//! looped back to B by the switch, runs at 10..100 % of the switch's
//! maximum rate. The maximum is what B received back while its generator
//! ([`crate::traffic`], 64-byte frames, 100 UDP flows) sent unpaced for
//! one second through the same switch. The background frames carry an
//! eth_dst of their own ([`BACKGROUND_DST`]), so the Linux bridge, with a
//! static FDB entry per address and both ports in hairpin mode, loops each
//! host's stream back to it: its load rows are the baseline of the
//! offloaded rows under load.
//!
//! # Δt_proc on veths
//! A veth has no cable length and no line rate, so 2·Δt_prop + Δt_trans is
//! taken as the mean RTT of the same probe (same frame size) looped back
//! by the Linux bridge in hairpin mode on the same kind of topology:
//! Δt_proc = mean RTT − the bridge's mean RTT. It is therefore the delay a
//! switch adds over the kernel's own bridge, which itself is not free.
//!
//! Invariants: every topology, daemon and temporary file is owned by a
//! guard ([`crate::topo`]) and removed on error and on Ctrl-C; every probe
//! sent is counted received or lost, never both.
//!
//! Thread-safety: the experiment runs on the calling thread; the background
//! stream's threads are [`crate::traffic::Traffic`]'s.

pub mod goals;
pub mod output;
pub mod prober;
pub mod reflector;
pub mod rules;
pub mod stats;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};

use crate::forward::Ovs;
use crate::offload::ping::OFFLOAD_CONFIG;
use crate::offload::xdp::{Ceiling, PassThrough};
use crate::topo::{
    catch_interrupt, interrupted, ip, run_cmd, sleep_unless_interrupted, start_offlow_logged,
    unique_tag, wait_link_up, ChildGuard, Topo,
};
use crate::traffic::{build_frames, Traffic};

use prober::{ProbeRecord, Prober, TsSource};
use rules::{Tuple, BACKGROUND_RULE, PROBE};
use stats::{processing_delay_vs_baseline, RttStats};

/// Preamble + SFD (8) + FCS (4): what a wire size has that the frame
/// handed to the kernel has not.
pub const WIRE_OVERHEAD: usize = 12;

/// The method, printed with every summary.
pub const METHOD: &str = "One probe at a time: a UDP frame (configured eth_dst 02:00:00:00:00:02, \
ipv4_dst 10.0.0.2) sent on a packet socket in host A, looped back by the switch out of its \
ingress port (OpenFlow IN_PORT; the Linux bridge: hairpin port + static FDB entry), \
timestamped with SO_TIMESTAMPING (tx from the error queue, rx from the cmsg). RTT = rx − tx. \
Percentiles are nearest-rank; std is the sample standard deviation. Δt_proc = Δt_rtt − \
2·Δt_prop − Δt_trans with 2·Δt_prop + Δt_trans taken as the mean RTT of the same-size probe \
through the Linux bridge baseline on the same veth topology (so Δt_proc is the delay over the \
kernel bridge). Frame sizes are wire sizes (preamble, SFD and FCS included: minus 12 B handed \
to the kernel). A probe with no reply within the timeout is lost. Offloaded and XDP floor rows: the hosts' \
veths carry an XDP pass-through program (a veth delivers the tier's XDP_TX frames only to a \
peer with an XDP program). The floors do no lookup: the AF_XDP floor is a busy-polling \
AF_XDP reflector, the XDP floor an XDP program sending every frame back out of its port. CPU cost: the busy-poll rows (offlow --busy-poll, the AF_XDP floor) \
and Open vSwitch afxdp (its PMD thread busy-polls; with system ports Open vSwitch polls them from \
its main thread, which sleeps) keep one core at 100% for as long as the switch runs, idle or not \
(here: half of the machine's 2 vCPUs); the other offlow rows poll for 50 µs after their last frame, then sleep in poll(2) \
(about 1% of a core at idle, 2.6% at 400 frames/s, journal 2026-11-26). The load rows' \
background stream carries its own eth_dst (the Linux bridge loops it back to host B through a \
second hairpin port); its rate is a share of each switch's own maximum. Passes: the probes of a \
configuration are split over passes, each running every switch over every configuration in turn \
(a switch start, table installs and a warm-up per pass), so a drifting machine load reaches \
every switch alike; a row is its probes from all passes.";

/// A switch configuration (a row family).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum SwitchKind {
    /// offlow, AF_PACKET ports.
    OfflowAfpacket,
    /// offlow, AF_XDP ports.
    OfflowAfxdp,
    /// offlow, AF_PACKET ports, `--busy-poll` (its worker never sleeps:
    /// a core at 100%, like Open vSwitch's PMD threads).
    OfflowAfpacketBusy,
    /// offlow, AF_XDP ports, `--busy-poll` (the like-for-like row of
    /// Open vSwitch `afxdp`, whose PMD thread busy-polls).
    OfflowAfxdpBusy,
    /// offlow, AF_PACKET ports, `--offload xdp` with the probe promoted.
    OfflowOffload,
    /// Open vSwitch 3.1 netdev datapath, `system` ports.
    OvsSystem,
    /// Open vSwitch 3.1 netdev datapath, `afxdp` ports.
    OvsAfxdp,
    /// Linux bridge, hairpin port (also the Δt_proc baseline).
    LinuxBridge,
    /// A bare AF_XDP reflector with no lookup, busy-polling
    /// ([`reflector`]): the floor of any AF_XDP switch on veth (sizes and
    /// load sweeps only).
    AfxdpFloor,
    /// A bare XDP program on each port sending every frame back out of it
    /// (`bpf/ceiling.bpf.c`, its DEVMAP pointing at the port itself): no
    /// parse, no lookup, no counters. The floor of any offload to XDP on
    /// veth, read against the Linux bridge as the offloaded rows are
    /// (sizes and load sweeps only).
    XdpFloor,
}

impl SwitchKind {
    /// For tables, CSV and plots.
    pub fn name(self) -> &'static str {
        match self {
            SwitchKind::OfflowAfpacket => "offlow af_packet",
            SwitchKind::OfflowAfxdp => "offlow af_xdp",
            SwitchKind::OfflowAfpacketBusy => "offlow af_packet busy-poll",
            SwitchKind::OfflowAfxdpBusy => "offlow af_xdp busy-poll",
            SwitchKind::OfflowOffload => "offlow offloaded (xdp)",
            SwitchKind::OvsSystem => "ovs 3.1 netdev system",
            SwitchKind::OvsAfxdp => "ovs 3.1 netdev afxdp",
            SwitchKind::LinuxBridge => "linux bridge (hairpin)",
            SwitchKind::AfxdpFloor => "af_xdp floor (bare busy-poll reflector)",
            SwitchKind::XdpFloor => "xdp floor (bare XDP reflector)",
        }
    }

    fn is_bridge(self) -> bool {
        self == SwitchKind::LinuxBridge
    }

    /// The same-run anchor its goal is read against, and the goal's
    /// ratio: Open vSwitch on the same port kind (mean Δt_proc and std ≤
    /// 0.5×), or for the offloaded rows the Linux bridge (mean RTT ≤
    /// 1.25×). The floors are read against the same anchors (the AF_XDP
    /// one against Open vSwitch afxdp, the XDP one against the bridge), to
    /// show how far those goals are reachable at all.
    pub fn anchor(self) -> Option<(SwitchKind, f64)> {
        match self {
            SwitchKind::OfflowAfpacket | SwitchKind::OfflowAfpacketBusy => {
                Some((SwitchKind::OvsSystem, 0.5))
            }
            SwitchKind::OfflowAfxdp | SwitchKind::OfflowAfxdpBusy | SwitchKind::AfxdpFloor => {
                Some((SwitchKind::OvsAfxdp, 0.5))
            }
            SwitchKind::OfflowOffload | SwitchKind::XdpFloor => {
                Some((SwitchKind::LinuxBridge, 1.25))
            }
            SwitchKind::OvsSystem | SwitchKind::OvsAfxdp | SwitchKind::LinuxBridge => None,
        }
    }
}

/// One of the report's sweeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Sweep {
    /// Frame sizes.
    Sizes,
    /// Match tuples.
    Tuples,
    /// Table sizes.
    Tables,
    /// Background load.
    Load,
}

impl Sweep {
    /// For file names and headings.
    pub fn name(self) -> &'static str {
        match self {
            Sweep::Sizes => "sizes",
            Sweep::Tuples => "tuples",
            Sweep::Tables => "tables",
            Sweep::Load => "load",
        }
    }
}

/// `offlow bench latency` options.
#[derive(Debug, Clone, clap::Args)]
pub struct LatencyArgs {
    /// Measured probes per configuration.
    #[arg(long, default_value_t = 1000)]
    pub probes: usize,
    /// Microseconds between probe sends (a probe waits for its reply or
    /// its timeout first).
    #[arg(long, default_value_t = 1000)]
    pub interval_us: u64,
    /// Milliseconds after which an unanswered probe counts as lost.
    #[arg(long, default_value_t = 100)]
    pub timeout_ms: u64,
    /// Passes the probes are split over (each runs every switch over every
    /// configuration with its share), so a drifting machine load reaches
    /// every switch alike.
    #[arg(long, default_value_t = 4)]
    pub passes: usize,
    /// Milliseconds of unmeasured probes before each configuration and pass
    /// (the offloaded rows take at least 1000, for the promotion).
    #[arg(long, default_value_t = 300)]
    pub warmup_ms: u64,
    /// Which sweeps (comma-separated).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "sizes,tuples,tables,load"
    )]
    pub sweeps: Vec<Sweep>,
    /// Which switches (comma-separated). The Linux bridge runs anyway as
    /// the Δt_proc baseline unless `--no-baseline`.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "offlow-afpacket,offlow-afxdp,offlow-afpacket-busy,offlow-afxdp-busy,offlow-offload,ovs-system,ovs-afxdp,linux-bridge,afxdp-floor,xdp-floor"
    )]
    pub switches: Vec<SwitchKind>,
    /// Frame sizes of the sizes sweep (wire bytes, preamble to FCS).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "72,254,454,654,854,1054,1254,1526"
    )]
    pub sizes: Vec<usize>,
    /// Tuples of the tuples sweep.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "l2,l3,l3-prefix,nine-tuple,mix"
    )]
    pub tuples: Vec<Tuple>,
    /// Table sizes of the tables sweep.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "200,1000,2000,5000,10000,20000,50000,100000"
    )]
    pub tables: Vec<usize>,
    /// Tuples the tables sweep runs (one series each).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "l2,l3")]
    pub table_tuples: Vec<Tuple>,
    /// Background load levels, % of the switch's measured maximum.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "10,20,30,40,50,60,70,80,90,100"
    )]
    pub loads: Vec<u32>,
    /// Entries in the table for the sizes, tuples and load sweeps.
    #[arg(long, default_value_t = 200)]
    pub entries: usize,
    /// Wire frame size of the tuples, tables and load sweeps.
    #[arg(long, default_value_t = 72)]
    pub frame_size: usize,
    /// Skip the Linux-bridge baseline (no Δt_proc).
    #[arg(long)]
    pub no_baseline: bool,
    /// Folder for the CSV files, summary.md and the PNG plots.
    #[arg(long, default_value = "bench-latency")]
    pub out: PathBuf,
    /// Also write every probe (`latency-probes.csv`: seq, tx and rx
    /// timestamps) for every configuration.
    #[arg(long)]
    pub raw: bool,
    /// The offlow binary (default: this executable).
    #[arg(long)]
    pub offlow_bin: Option<PathBuf>,
    /// An extra argument for every `offlow run` of the offlow rows
    /// (repeatable), e.g. `--offlow-arg=--idle-spin-us=200`.
    #[arg(long = "offlow-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub offlow_args: Vec<String>,
}

impl Default for LatencyArgs {
    fn default() -> LatencyArgs {
        LatencyArgs {
            probes: 1000,
            passes: 4,
            interval_us: 1000,
            timeout_ms: 100,
            warmup_ms: 300,
            sweeps: vec![Sweep::Sizes, Sweep::Tuples, Sweep::Tables, Sweep::Load],
            switches: vec![
                SwitchKind::OfflowAfpacket,
                SwitchKind::OfflowAfxdp,
                SwitchKind::OfflowAfpacketBusy,
                SwitchKind::OfflowAfxdpBusy,
                SwitchKind::OfflowOffload,
                SwitchKind::OvsSystem,
                SwitchKind::OvsAfxdp,
                SwitchKind::LinuxBridge,
                SwitchKind::AfxdpFloor,
                SwitchKind::XdpFloor,
            ],
            sizes: vec![72, 254, 454, 654, 854, 1054, 1254, 1526],
            tuples: Tuple::ALL.to_vec(),
            tables: vec![200, 1000, 2000, 5000, 10_000, 20_000, 50_000, 100_000],
            table_tuples: vec![Tuple::L2, Tuple::L3],
            loads: (1..=10).map(|i| i * 10).collect(),
            entries: 200,
            frame_size: 72,
            no_baseline: false,
            out: PathBuf::from("bench-latency"),
            raw: false,
            offlow_bin: None,
            offlow_args: Vec::new(),
        }
    }
}

fn check_args(a: &LatencyArgs) -> anyhow::Result<()> {
    let frame_ok = |s: usize| (64 + 8..=1518 + 8).contains(&s);
    if a.probes == 0 {
        bail!("--probes must be at least 1");
    }
    if a.passes == 0 || a.passes > a.probes {
        bail!(
            "--passes must be between 1 and --probes ({}), not {}",
            a.probes,
            a.passes
        );
    }
    if let Some(s) = a
        .sizes
        .iter()
        .chain([&a.frame_size])
        .find(|s| !frame_ok(**s))
    {
        bail!("frame size {s} outside 72..=1526 (wire bytes, preamble to FCS)");
    }
    if let Some(n) = a
        .tables
        .iter()
        .chain([&a.entries])
        .find(|n| **n == 0 || **n > rules::MAX_ENTRIES)
    {
        bail!("table size {n} outside 1..={}", rules::MAX_ENTRIES);
    }
    if let Some(l) = a.loads.iter().find(|l| **l == 0 || **l > 100) {
        bail!("load {l}% outside 1..=100");
    }
    if a.timeout_ms == 0 {
        bail!("--timeout-ms must be at least 1");
    }
    Ok(())
}

/// One configuration to measure.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Config {
    /// The sweep it belongs to.
    pub sweep: Sweep,
    /// Wire frame size.
    pub frame_size: usize,
    /// The table's tuple.
    pub tuple: Tuple,
    /// Rules in the table under test.
    pub entries: usize,
    /// Background load, % of the maximum.
    pub load_pct: Option<u32>,
}

impl Config {
    /// The swept value, for plots.
    pub fn x(&self) -> f64 {
        match self.sweep {
            Sweep::Sizes => self.frame_size as f64,
            Sweep::Tuples => Tuple::ALL
                .iter()
                .position(|t| *t == self.tuple)
                .unwrap_or(0) as f64,
            Sweep::Tables => self.entries as f64,
            Sweep::Load => f64::from(self.load_pct.unwrap_or(0)),
        }
    }

    /// The swept value, for tables.
    pub fn label(&self) -> String {
        match self.sweep {
            Sweep::Sizes => format!("{} B", self.frame_size),
            Sweep::Tuples => self.tuple.name().into(),
            Sweep::Tables => format!("{} × {}", self.entries, self.tuple.name()),
            Sweep::Load => format!("{}%", self.load_pct.unwrap_or(0)),
        }
    }
}

/// One measured (or failed) configuration of one switch.
#[derive(Debug, Clone)]
pub struct ConfigResult {
    /// Which switch.
    pub switch: SwitchKind,
    /// What was measured.
    pub config: Config,
    /// Every measured probe, in send order.
    pub records: Vec<ProbeRecord>,
    /// Probes sent.
    pub sent: usize,
    /// Probes back within the timeout.
    pub received: usize,
    /// Probes not back within the timeout.
    pub lost: usize,
    /// RTT summary (ns), `None` when nothing came back.
    pub rtt: Option<RttStats>,
    /// The baseline's mean RTT at this frame size (ns).
    pub baseline_ns: Option<f64>,
    /// Δt_proc from the mean RTT (ns).
    pub proc_ns: Option<f64>,
    /// Background frames per second offered (load sweep).
    pub background_pps: Option<f64>,
    /// Probes whose tx timestamp is the user-space clock.
    pub tx_fallbacks: usize,
    /// Why it failed.
    pub error: Option<String>,
}

impl ConfigResult {
    fn new(switch: SwitchKind, config: Config) -> ConfigResult {
        ConfigResult {
            switch,
            config,
            records: Vec::new(),
            sent: 0,
            received: 0,
            lost: 0,
            rtt: None,
            baseline_ns: None,
            proc_ns: None,
            background_pps: None,
            tx_fallbacks: 0,
            error: None,
        }
    }

    /// A row of the Δt_proc baseline itself (the bridge, no load).
    pub fn is_baseline(&self) -> bool {
        self.switch.is_bridge() && self.config.sweep == Sweep::Sizes
    }

    fn fill(&mut self, records: Vec<ProbeRecord>) {
        self.sent = records.len();
        self.received = records.iter().filter(|r| r.rx_ns.is_some()).count();
        self.lost = self.sent - self.received;
        self.tx_fallbacks = records.iter().filter(|r| r.tx_fallback).count();
        let rtts: Vec<f64> = records
            .iter()
            .filter_map(ProbeRecord::rtt_ns)
            .map(|x| x as f64)
            .collect();
        self.rtt = RttStats::of(&rtts);
        self.records = records;
    }
}

/// What one invocation measured.
#[derive(Debug, Clone, Default)]
pub struct LatencyReport {
    /// Every configuration of every switch, in run order.
    pub results: Vec<ConfigResult>,
    /// Background maximum per switch (frames/s received back).
    pub max_pps: Vec<(SwitchKind, f64)>,
    /// The probes' timestamp source.
    pub ts_source: Option<TsSource>,
    /// Remarks (skipped rows, offload tier hits).
    pub notes: Vec<String>,
}

/// The configurations `kind` runs, in order.
fn configs_for(kind: SwitchKind, a: &LatencyArgs, baseline: bool) -> Vec<Config> {
    let base = Config {
        sweep: Sweep::Sizes,
        frame_size: a.frame_size,
        tuple: Tuple::L2,
        entries: a.entries,
        load_pct: None,
    };
    let mut v = Vec::new();
    if matches!(kind, SwitchKind::AfxdpFloor | SwitchKind::XdpFloor) {
        // No table to look anything up in: frame sizes and load only.
        for s in &a.sweeps {
            match s {
                Sweep::Sizes => v.extend(
                    a.sizes
                        .iter()
                        .map(|&frame_size| Config { frame_size, ..base }),
                ),
                Sweep::Load => v.extend(a.loads.iter().map(|&l| Config {
                    sweep: Sweep::Load,
                    load_pct: Some(l),
                    ..base
                })),
                Sweep::Tuples | Sweep::Tables => {}
            }
        }
        return v;
    }
    if kind.is_bridge() {
        // The bridge has no tables: it runs the sizes sweep (its rows and
        // the baseline), plus the other sweeps' frame size for Δt_proc.
        let mut sizes: Vec<usize> = if a.sweeps.contains(&Sweep::Sizes) {
            a.sizes.clone()
        } else {
            Vec::new()
        };
        if baseline && a.sweeps.iter().any(|s| *s != Sweep::Sizes) && !sizes.contains(&a.frame_size)
        {
            sizes.push(a.frame_size);
        }
        v.extend(
            sizes
                .into_iter()
                .map(|frame_size| Config { frame_size, ..base }),
        );
        // Its load rows: the baseline of the offloaded rows under load
        // (the background stream has its own eth_dst, looped back to B by
        // a second hairpin port, see `Running::start`).
        if a.sweeps.contains(&Sweep::Load) {
            v.extend(a.loads.iter().map(|&l| Config {
                sweep: Sweep::Load,
                load_pct: Some(l),
                ..base
            }));
        }
        return v;
    }
    for s in &a.sweeps {
        match s {
            Sweep::Sizes => v.extend(
                a.sizes
                    .iter()
                    .map(|&frame_size| Config { frame_size, ..base }),
            ),
            Sweep::Tuples => v.extend(a.tuples.iter().map(|&tuple| Config {
                sweep: Sweep::Tuples,
                tuple,
                ..base
            })),
            Sweep::Tables => {
                for &tuple in &a.table_tuples {
                    v.extend(a.tables.iter().map(|&entries| Config {
                        sweep: Sweep::Tables,
                        tuple,
                        entries,
                        ..base
                    }))
                }
            }
            Sweep::Load => v.extend(a.loads.iter().map(|&l| Config {
                sweep: Sweep::Load,
                load_pct: Some(l),
                ..base
            })),
        }
    }
    v
}

// ------------------------------------------------------------- switches --

/// A running switch and where its OpenFlow channel is.
enum Running {
    Offlow {
        _guard: ChildGuard,
        target: String,
        log: Option<TempPath>,
    },
    Ovs {
        _ovs: Ovs,
        target: String,
    },
    Bridge,
    /// Held for its `Drop` (stops the thread, closes the sockets).
    Reflector(#[allow(dead_code)] reflector::Reflector),
    /// Held for their `Drop` (detach the programs).
    XdpReflector(#[allow(dead_code)] Vec<Ceiling>),
}

/// A path removed when dropped.
struct TempPath(PathBuf);

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn ofctl(args: &[&str]) -> anyhow::Result<()> {
    run_cmd(
        Command::new("ovs-ofctl")
            .args(["-O", "OpenFlow13", "--no-names", "--timeout=300"])
            .args(args),
    )
    .map(|_| ())
}

impl Running {
    fn start(
        kind: SwitchKind,
        sw: &str,
        bin: &Path,
        user_args: &[String],
    ) -> anyhow::Result<Running> {
        match kind {
            SwitchKind::OfflowAfpacket
            | SwitchKind::OfflowAfxdp
            | SwitchKind::OfflowAfpacketBusy
            | SwitchKind::OfflowAfxdpBusy => {
                let xdp = matches!(kind, SwitchKind::OfflowAfxdp | SwitchKind::OfflowAfxdpBusy);
                let busy = matches!(
                    kind,
                    SwitchKind::OfflowAfpacketBusy | SwitchKind::OfflowAfxdpBusy
                );
                let mut extra: Vec<&str> = user_args.iter().map(String::as_str).collect();
                if busy {
                    extra.push("--busy-poll");
                }
                let (g, port) = start_offlow_logged(bin, sw, 1, xdp, &extra, None)?;
                Ok(Running::Offlow {
                    _guard: g,
                    target: format!("tcp:127.0.0.1:{port}"),
                    log: None,
                })
            }
            SwitchKind::OfflowOffload => {
                let tag = unique_tag();
                let cfg = TempPath(std::env::temp_dir().join(format!("offlow-lat-{tag}.toml")));
                let log = TempPath(std::env::temp_dir().join(format!("offlow-lat-{tag}.log")));
                std::fs::write(&cfg.0, OFFLOAD_CONFIG)
                    .with_context(|| format!("writing {}", cfg.0.display()))?;
                let cfg_s = cfg.0.to_string_lossy().into_owned();
                let mut extra: Vec<&str> = user_args.iter().map(String::as_str).collect();
                extra.extend(["--offload", "xdp", "--config", &cfg_s]);
                let (g, port) = start_offlow_logged(bin, sw, 1, false, &extra, Some(&log.0))?;
                Ok(Running::Offlow {
                    _guard: g,
                    target: format!("tcp:127.0.0.1:{port}"),
                    log: Some(log),
                })
            }
            SwitchKind::OvsSystem | SwitchKind::OvsAfxdp => {
                let ty = if kind == SwitchKind::OvsAfxdp {
                    "afxdp"
                } else {
                    "system"
                };
                let ovs = Ovs::start(sw, ty)?;
                let target = ovs.of_target();
                Ok(Running::Ovs { _ovs: ovs, target })
            }
            SwitchKind::LinuxBridge => {
                let link = |args: &[&str]| {
                    let mut v = vec!["-n", sw];
                    v.extend_from_slice(args);
                    ip(&v)
                };
                link(&["link", "add", "name", "br0", "type", "bridge"])?;
                link(&["link", "set", "br0", "type", "bridge", "stp_state", "0"])?;
                for p in ["p1", "p2"] {
                    link(&["link", "set", p, "master", "br0"])?;
                }
                // Each host's frames go back out of the port they came in
                // on: the probe's eth_dst is a static entry on p1, the
                // background stream's on p2, and both ports hairpin.
                for (p, mac) in [("p1", PROBE.eth_dst), ("p2", BACKGROUND_DST)] {
                    link(&["link", "set", p, "type", "bridge_slave", "hairpin", "on"])?;
                    let dst = mac
                        .iter()
                        .map(|b| format!("{b:02x}"))
                        .collect::<Vec<_>>()
                        .join(":");
                    run_cmd(
                        Command::new("bridge")
                            .args(["-n", sw, "fdb", "add", &dst, "dev", p, "master", "static"]),
                    )?;
                }
                link(&["link", "set", "br0", "up"])?;
                Ok(Running::Bridge)
            }
            SwitchKind::AfxdpFloor => Ok(Running::Reflector(reflector::Reflector::start(
                sw,
                &["p1", "p2"],
            )?)),
            SwitchKind::XdpFloor => Ok(Running::XdpReflector(vec![
                Ceiling::attach(sw, "p1", "p1")?,
                Ceiling::attach(sw, "p2", "p2")?,
            ])),
        }
    }

    fn target(&self) -> Option<&str> {
        match self {
            Running::Offlow { target, .. } | Running::Ovs { target, .. } => Some(target),
            Running::Bridge | Running::Reflector(_) | Running::XdpReflector(_) => None,
        }
    }

    /// Replace the flow table with `tuple` × `entries` (+ the background
    /// rule when `background`).
    fn install(&self, tuple: Tuple, entries: usize, background: bool) -> anyhow::Result<()> {
        let Some(target) = self.target() else {
            return Ok(());
        };
        let mut text = rules::flow_file(tuple, entries);
        if background {
            text.push_str(BACKGROUND_RULE);
            text.push('\n');
        }
        let file =
            TempPath(std::env::temp_dir().join(format!("offlow-lat-{}.flows", unique_tag())));
        std::fs::write(&file.0, text).with_context(|| format!("writing {}", file.0.display()))?;
        ofctl(&["del-flows", target])?;
        ofctl(&["add-flows", target, &file.0.to_string_lossy()])
            .with_context(|| format!("adding {entries} {} rules", tuple.name()))
    }
}

// ---------------------------------------------------------------- probing --

/// Sequence numbers of warm-up probes start here (never a measured one's).
const WARMUP_SEQ: u64 = 1 << 40;

/// Warm up for `warmup`, then send `n` probes of `frame_size` (wire) every
/// `interval` (or as soon as the previous one is back or timed out),
/// numbered from `first_seq`.
fn probe_run(
    p: &mut Prober,
    frame_size: usize,
    (first_seq, n): (u64, usize),
    a: &LatencyArgs,
    warmup: Duration,
) -> Vec<ProbeRecord> {
    let len = frame_size - WIRE_OVERHEAD;
    let interval = Duration::from_micros(a.interval_us);
    let timeout = Duration::from_millis(a.timeout_ms);
    p.drain();
    let end = Instant::now() + warmup;
    let mut seq = WARMUP_SEQ;
    while Instant::now() < end && !interrupted() {
        let f = PROBE.frame(seq, len);
        p.probe(seq, &f, timeout.min(Duration::from_millis(20)));
        seq += 1;
        std::thread::sleep(interval);
    }
    p.drain();
    let mut out = Vec::with_capacity(n);
    let start = Instant::now();
    for i in 0..n {
        if interrupted() {
            break;
        }
        let seq = first_seq + i as u64;
        let f = PROBE.frame(seq, len);
        let due = start + interval * i as u32;
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        out.push(p.probe(seq, &f, timeout));
    }
    out
}

/// Disable IPv6 on a host (no router solicitations or MLD reports on the
/// prober's link) and turn GRO on (a veth that receives XDP-redirected
/// frames needs it, see `bench offload`).
fn quiet_host(ns: &str) -> anyhow::Result<()> {
    run_cmd(Command::new("ip").args([
        "netns",
        "exec",
        ns,
        "sysctl",
        "-qw",
        "net.ipv6.conf.all.disable_ipv6=1",
    ]))?;
    run_cmd(Command::new("ip").args(["netns", "exec", ns, "ethtool", "-K", "eth0", "gro", "on"]))?;
    Ok(())
}

/// Background frames: 64 bytes with FCS, 100 flows.
const BACKGROUND_FRAME: usize = 64;
const BACKGROUND_FLOWS: usize = 100;
/// The background stream's eth_dst: not the probe's, so the Linux bridge
/// can send each stream back to its own host (one FDB entry per address).
/// The OpenFlow switches match the stream on `in_port` only.
pub const BACKGROUND_DST: [u8; 6] = [0x02, 0, 0, 0, 0, 0x03];

/// The background frames, addressed to [`BACKGROUND_DST`].
fn background_frames() -> Vec<Vec<u8>> {
    let mut v = build_frames(BACKGROUND_FLOWS, BACKGROUND_FRAME);
    for f in &mut v {
        f[..6].copy_from_slice(&BACKGROUND_DST);
    }
    v
}

/// The background generator's unpaced rate through the switch: frames/s
/// host B got back over one second.
fn max_rate(t: &Topo, frames: &Arc<Vec<Vec<u8>>>) -> anyhow::Result<f64> {
    let tr = Traffic::start(t, frames, BACKGROUND_FRAME, None, "lat-max")?;
    if !tr.wait_first_frame() {
        bail!("no background frame came back within the first-frame wait");
    }
    sleep_unless_interrupted(Duration::from_millis(300));
    let s0 = tr.snapshot();
    let t0 = Instant::now();
    sleep_unless_interrupted(Duration::from_secs(1));
    let s1 = tr.snapshot();
    let secs = t0.elapsed().as_secs_f64();
    tr.stop()?;
    Ok(s1.since(&s0).received as f64 / secs)
}

/// Run every configuration of one switch on one topology.
/// What the passes gathered for one configuration of one switch.
#[derive(Debug, Default)]
struct Slot {
    /// Probes of every pass so far, in send order.
    records: Vec<ProbeRecord>,
    /// Passes that reached this configuration (measured or failed).
    passes: usize,
    /// The first error of any pass.
    error: Option<String>,
    background_pps: Option<f64>,
}

impl Slot {
    fn fail(&mut self, e: String) {
        self.error.get_or_insert(e);
        self.passes += 1;
    }
}

/// How many probes pass `pass` of `a.passes` sends per configuration (the
/// remainder goes to the first passes), and the first one's number.
fn pass_share(a: &LatencyArgs, pass: usize) -> (u64, usize) {
    let (q, r) = (a.probes / a.passes, a.probes % a.passes);
    let n = q + usize::from(pass < r);
    let first = pass * q + pass.min(r);
    (first as u64, n)
}

/// Run one pass of `kind` over `configs`, appending to `slots` (one per
/// configuration). An error before the first configuration is returned
/// (the caller fails the configurations this pass did not reach).
#[allow(clippy::too_many_arguments)]
fn run_switch(
    kind: SwitchKind,
    configs: &[Config],
    slots: &mut [Slot],
    pass: usize,
    a: &LatencyArgs,
    bin: &Path,
    pb: &ProgressBar,
    report: &mut LatencyReport,
) -> anyhow::Result<()> {
    let mut t = Topo::hosts(true, 1)?;
    let host_a = t.gen.clone();
    for h in [&t.gen.0, &t.rx.0] {
        quiet_host(h)?;
    }
    // The background stream goes out of B and comes back to B.
    t.gen = t.rx.clone();
    let sw = t.sw()?.to_string();
    // The offload tier answers with XDP_TX (the XDP floor with a redirect
    // to its own port), which a veth delivers only to a peer with an XDP
    // program of its own: a pass-through on each host (see
    // `bpf/pass.bpf.c`).
    let _pass = if matches!(kind, SwitchKind::OfflowOffload | SwitchKind::XdpFloor) {
        vec![
            PassThrough::attach(&host_a.0, &host_a.1)?,
            PassThrough::attach(&t.rx.0, &t.rx.1)?,
        ]
    } else {
        Vec::new()
    };
    let running = Running::start(kind, &sw, bin, &a.offlow_args)?;
    wait_link_up(&host_a.0, &host_a.1);
    let mut prober = Prober::open(&host_a.0, &host_a.1)?;
    report.ts_source = Some(prober.source);
    let warmup = Duration::from_millis(if kind == SwitchKind::OfflowOffload {
        a.warmup_ms.max(1000)
    } else {
        a.warmup_ms
    });
    let frames = Arc::new(background_frames());
    let mut installed: Option<(Tuple, usize, bool)> = None;
    // Measured once per switch (in the first pass that needs it): every
    // pass loads it alike.
    let mut max_pps: Option<f64> = report
        .max_pps
        .iter()
        .find(|(k, _)| *k == kind)
        .map(|(_, m)| *m);
    for (c, slot) in configs.iter().zip(slots.iter_mut()) {
        if interrupted() {
            break;
        }
        pb.set_message(format!(
            "pass {}/{} {} {} {}",
            pass + 1,
            a.passes,
            kind.name(),
            c.sweep.name(),
            c.label()
        ));
        let outcome = (|| -> anyhow::Result<()> {
            let background = c.sweep == Sweep::Load;
            let want = (c.tuple, c.entries, background);
            if installed != Some(want) {
                installed = None;
                running.install(c.tuple, c.entries, background)?;
                installed = Some(want);
            }
            let _traffic = match c.load_pct {
                Some(pct) => {
                    let max = match max_pps {
                        Some(m) => m,
                        None => {
                            let m = max_rate(&t, &frames)?;
                            report.max_pps.push((kind, m));
                            max_pps = Some(m);
                            m
                        }
                    };
                    let pps = (max * f64::from(pct) / 100.0).max(1.0);
                    slot.background_pps = Some(pps);
                    let tr =
                        Traffic::start(&t, &frames, BACKGROUND_FRAME, Some(pps as u64), "lat-bg")?;
                    tr.wait_first_frame();
                    Some(tr)
                }
                None => None,
            };
            let records = probe_run(&mut prober, c.frame_size, pass_share(a, pass), a, warmup);
            slot.records.extend(records);
            Ok(())
        })();
        match outcome {
            Ok(()) => slot.passes += 1,
            Err(e) => slot.fail(format!("pass {}: {e:#}", pass + 1)),
        }
        pb.inc(1);
    }
    drop(prober);
    if let Running::Offlow {
        _guard,
        log: Some(log),
        ..
    } = running
    {
        // Stopping the switch writes its exit counters to the log.
        drop(_guard);
        let text = std::fs::read_to_string(&log.0).unwrap_or_default();
        let hits = crate::offload::ping::log_field(&text, "offload tier stopped", "hits");
        let user = crate::offload::ping::log_field(&text, "data plane stopped", "packets");
        report.notes.push(format!(
            "{} pass {}: offload tier hits {}, userspace worker packets {} (whole pass, warm-up \
             and background included)",
            kind.name(),
            pass + 1,
            hits.map_or("unknown".into(), |h| h.to_string()),
            user.map_or("unknown".into(), |h| h.to_string()),
        ));
    }
    Ok(())
}

/// Fill Δt_proc from the bridge's rows.
fn apply_baseline(report: &mut LatencyReport) {
    let base: HashMap<usize, f64> = report
        .results
        .iter()
        .filter(|r| r.switch.is_bridge() && r.config.sweep == Sweep::Sizes && r.error.is_none())
        .filter_map(|r| Some((r.config.frame_size, r.rtt?.mean)))
        .collect();
    for r in &mut report.results {
        r.baseline_ns = base.get(&r.config.frame_size).copied();
        // The bridge's load rows: what the load adds to the bridge.
        if !r.is_baseline() {
            r.proc_ns = match (r.rtt, r.baseline_ns) {
                (Some(s), Some(b)) => Some(processing_delay_vs_baseline(s.mean, b)),
                _ => None,
            };
        }
    }
}

/// Run the requested sweeps on the requested switches.
pub fn run(a: &LatencyArgs) -> anyhow::Result<LatencyReport> {
    check_args(a)?;
    let bin = match &a.offlow_bin {
        Some(b) => b.clone(),
        None => std::env::current_exe().context("locating the offlow binary")?,
    };
    let mut kinds: Vec<SwitchKind> = Vec::new();
    // The baseline first, so its figures exist when the others print.
    let baseline = !a.no_baseline;
    if baseline || a.switches.contains(&SwitchKind::LinuxBridge) {
        kinds.push(SwitchKind::LinuxBridge);
    }
    kinds.extend(a.switches.iter().filter(|k| !k.is_bridge()));
    kinds.dedup();
    let plans: Vec<(SwitchKind, Vec<Config>)> = kinds
        .iter()
        .map(|&k| (k, configs_for(k, a, baseline)))
        .collect();
    let total: usize = plans.iter().map(|(_, c)| c.len()).sum();
    let pb = ProgressBar::new((total * a.passes) as u64);
    pb.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let mut report = LatencyReport::default();
    let mut slots: Vec<Vec<Slot>> = plans
        .iter()
        .map(|(_, c)| c.iter().map(|_| Slot::default()).collect())
        .collect();
    for pass in 0..a.passes {
        for ((kind, configs), slots) in plans.iter().zip(slots.iter_mut()) {
            if interrupted() {
                break;
            }
            if let Err(e) = run_switch(*kind, configs, slots, pass, a, &bin, &pb, &mut report) {
                // What this pass did not reach fails with the switch's error.
                for slot in slots.iter_mut().filter(|s| s.passes <= pass) {
                    slot.fail(format!("pass {}: {e:#}", pass + 1));
                    pb.inc(1);
                }
            }
        }
    }
    pb.finish_and_clear();
    for ((kind, configs), slots) in plans.iter().zip(slots) {
        for (c, slot) in configs.iter().zip(slots) {
            let mut r = ConfigResult::new(*kind, *c);
            r.fill(slot.records);
            r.error = slot.error;
            r.background_pps = slot.background_pps;
            report.results.push(r);
        }
    }
    apply_baseline(&mut report);
    Ok(report)
}

/// `offlow bench latency`.
pub fn main(a: &LatencyArgs) -> anyhow::Result<()> {
    catch_interrupt();
    let report = run(a)?;
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let written = output::write_all(&report, a, &a.out)?;
    print!("{}", output::markdown(&report, a));
    for p in written {
        eprintln!("wrote {}", p.display());
    }
    if interrupted() {
        bail!("interrupted: the last configuration's figures are short");
    }
    let failed = report.results.iter().filter(|r| r.error.is_some()).count();
    if failed > 0 {
        bail!("{failed} configuration(s) failed (see the summary)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_follow_the_sweeps() {
        let a = LatencyArgs::default();
        let v = configs_for(SwitchKind::OfflowAfpacket, &a, true);
        assert_eq!(v.len(), 8 + 5 + 2 * 8 + 10);
        let b = configs_for(SwitchKind::LinuxBridge, &a, true);
        assert_eq!(b.len(), 8 + 10);
        assert_eq!(b.iter().filter(|c| c.sweep == Sweep::Load).count(), 10);
        let only_tables = LatencyArgs {
            sweeps: vec![Sweep::Tables],
            ..LatencyArgs::default()
        };
        let b = configs_for(SwitchKind::LinuxBridge, &only_tables, true);
        assert_eq!(b.iter().map(|c| c.frame_size).collect::<Vec<_>>(), [72]);
        assert!(configs_for(SwitchKind::LinuxBridge, &only_tables, false).is_empty());
    }

    #[test]
    fn passes_share_the_probes_and_number_them_on() {
        for (probes, passes) in [(1000, 4), (1000, 3), (7, 7), (10, 1), (5, 2)] {
            let a = LatencyArgs {
                probes,
                passes,
                ..LatencyArgs::default()
            };
            let mut next = 0u64;
            for pass in 0..passes {
                let (first, n) = pass_share(&a, pass);
                assert_eq!(first, next, "{probes}/{passes} pass {pass}");
                assert!(n >= probes / passes && n <= probes.div_ceil(passes));
                next += n as u64;
            }
            assert_eq!(next, probes as u64, "{probes}/{passes}");
        }
    }

    #[test]
    fn bad_arguments_are_refused() {
        assert!(check_args(&LatencyArgs::default()).is_ok());
        for f in [
            |a: &mut LatencyArgs| a.probes = 0,
            |a: &mut LatencyArgs| a.sizes = vec![71],
            |a: &mut LatencyArgs| a.frame_size = 1527,
            |a: &mut LatencyArgs| a.tables = vec![0],
            |a: &mut LatencyArgs| a.loads = vec![101],
            |a: &mut LatencyArgs| a.passes = 0,
            |a: &mut LatencyArgs| {
                a.probes = 3;
                a.passes = 4;
            },
        ] {
            let mut a = LatencyArgs::default();
            f(&mut a);
            assert!(check_args(&a).is_err());
        }
    }

    #[test]
    fn results_count_every_probe() {
        let c = configs_for(SwitchKind::OfflowAfpacket, &LatencyArgs::default(), true)[0];
        let mut r = ConfigResult::new(SwitchKind::OfflowAfpacket, c);
        let rec = |seq, rx: Option<i64>| ProbeRecord {
            seq,
            tx_ns: 1000 * seq as i64,
            rx_ns: rx,
            tx_fallback: false,
        };
        r.fill(vec![rec(0, Some(50)), rec(1, None), rec(2, Some(2070))]);
        assert_eq!((r.sent, r.received, r.lost), (3, 2, 1));
        let s = r.rtt.unwrap();
        assert_eq!((s.min, s.max, s.mean), (50.0, 70.0, 60.0));
    }
}
