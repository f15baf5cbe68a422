//! `offlow bench offload`: the Flow Director paper's experiment on veths
//! between namespaces — 64-byte UDP frames of `--flows` flows pushed
//! through a two-port switch at the fastest rate this kernel can send, with
//! received packets per second and the CPU time each packet cost, for the
//! offload tier (when the switch has one), offlow's userspace AF_XDP path,
//! Open vSwitch's `afxdp` ports, and the ceiling: an XDP program that only
//! redirects between the same veths.
//!
//! # Topology (built fresh for every row, removed after it)
//! ```text
//!  ns GEN: eth0 ──veth── p1 ┐ ns SW: the switch ┌ p2 ──veth── eth0 :ns RECV
//!  live-frames generator                                  XDP sink
//! ```
//! ([`crate::topo::Topo::hosts`]; with N workers the veths get N queues.)
//!
//! # Traffic: the XDP live-frames generator ([`xdp::Generator`])
//! One thread per generator CPU, pinned, runs `BPF_PROG_RUN` with
//! `BPF_F_TEST_XDP_LIVE_FRAMES` on GEN's `eth0` (batches of `--batch`):
//! the program (`bpf/gen.bpf.c`) sets the UDP source port to
//! `10000 + (n % flows)` (n counts that CPU's frames), fixes the UDP
//! checksum incrementally and returns `XDP_TX`, which in live mode sends
//! the frame out of GEN's `eth0` to its peer `p1`. The frame is the one
//! `bench forward` sends (10.0.0.1 → 10.0.0.2:9, valid IPv4 checksum, a
//! destination MAC nobody has). An N-queue row uses N generator threads on
//! CPUs 0..N: a veth puts a redirected frame on its peer's queue
//! `cpu % queues`, so each queue (and each switch worker) gets one CPU's
//! frames. In runs with NAT rows the program also writes the frame's
//! headers back before each send ([`GenConfig::restore_headers`]): the
//! live-frames pool recycles pages with whatever a receiver wrote into
//! them, and a NAT rewrites addresses in place (without the restore, only
//! each call's first batch was translated; every later one carried the
//! translated headers back in and matched no NAT rule).
//!
//! What the kernel needs for this (checked on 6.18): a veth forwards an
//! XDP-redirected frame (`ndo_xdp_xmit`) only when its peer has NAPI, that
//! is a native XDP program or GRO enabled on the peer; otherwise the
//! frames are dropped before the peer sees them. The switch side's `p1`
//! carries the switch's own XDP program in every row (the ceiling's
//! redirect, offlow's or Open vSwitch's AF_XDP program), and the bench
//! also turns GRO on on `p1` so the generator never depends on what a
//! switch attaches. The receiving `eth0` carries the sink.
//!
//! # Received frames: the XDP sink ([`xdp::Sink`])
//! `bpf/sink.bpf.c` on RECV's `eth0` counts the experiment's frames and
//! their bytes per CPU, records their UDP source ports in a bitmap, and
//! drops them; `flows seen` is how many of `10000 .. 10000 + flows` arrived.
//!
//! # Rows
//! - `generator alone, N thread(s)`: GEN's `eth0` joined straight to
//!   RECV's (N queues), no switch: what the generator and sink manage.
//! - `ceiling (XDP redirect), N queue(s)`: `bpf/ceiling.bpf.c` on `p1`,
//!   `bpf_redirect_map` into a DEVMAP holding `p2`, nothing else.
//! - `lookup floor (parse, hash lookup, redirect), N queue(s)`:
//!   `bpf/floor.bpf.c` on `p1`: the ceiling plus what any exact-match
//!   offload must do per frame, a bounds-checked parse into offlow's
//!   36-byte key and one lookup in a BPF hash map holding the `--flows`
//!   flows; nothing else (no port record, counters or program record).
//! - `offlow userspace af_xdp, N worker(s)`: `offlow run` with AF_XDP ports
//!   and the flows `in_port=1,actions=output:2` (and back), as `bench
//!   forward`'s AF_XDP rows.
//! - `ovs 3.1 netdev, type=afxdp`: a private Open vSwitch as in `bench
//!   forward`, one queue.
//! - `offlow offloaded, N worker(s)`: the switch with its XDP offload tier.
//!   Skipped with [`OFFLOAD_PENDING`] until `offlow run` accepts an offload
//!   option ([`OFFLOAD_RUN_ARGS`] is `None`); when it does, the row runs
//!   exactly like the userspace row with those arguments added.
//!
//! Each row: build, start, wait for the first frame at the sink, `--warmup`
//! seconds, then a `--seconds` window. By default the generator runs flat
//! out (the rows measure the most each configuration forwards);
//! `--rate R` offers R Mpps in total instead, paced per millisecond, so
//! that rows every configuration sustains compare CPU time at equal load.
//!
//! # CPU time per packet (the method, also printed)
//! Over the window: the switch process's `utime + stime` (`/proc/PID/stat`,
//! all its threads; none for the ceiling) plus the whole machine's softirq
//! time (`/proc/stat`, all CPUs), divided by the frames received. Softirq is
//! where the in-kernel part of forwarding runs here: the veth receive
//! (NAPI) of `p1`, `p2` and the receiver's `eth0`, the XDP programs on them
//! (the ceiling's redirect, the AF_XDP copy into a socket, the sink). It
//! includes the sink's own cost (see the `generator alone` rows for that
//! share). This kernel has tick-based CPU accounting without
//! `IRQ_TIME_ACCOUNTING`: softirq work that runs inside the switch's own
//! system calls is in both terms, so the sum is an upper bound for the
//! switch. Tick sampling is fair only when the CPUs are busy throughout,
//! as in the flat-out rows: with `--rate`, the softirq bursts follow the
//! generator's timer wake-ups, in phase with the tick, and the softirq
//! column reads near zero (the process times, derived from the scheduler's
//! run time, stay exact). The generator threads' own CPU time (their thread clocks:
//! `BPF_PROG_RUN` plus the softirq work done at the end of each batch on
//! their CPU) is shown apart, per offered frame.
//!
//! # Latency rows (`--ping N`, default 400; 0 skips; [`ping`])
//! After the rate rows (or alone with `--only-ping`), issue 22's latency
//! goal: ping RTT through an offloaded flow ≤ 1.25× a Linux bridge's. Each
//! row builds the same topology afresh (one queue, one worker), without
//! the sink, with `10.0.0.1/24` on host A's `eth0` and `10.0.0.2/24` on
//! host B's, and GRO on both (a veth receives XDP-redirected frames only
//! with NAPI, see above; on in every row so the hosts' receive path is the
//! same throughout). Host A runs `ping -i 0.005`: 200 warm-up probes
//! (ARP, and long enough for the offloaded rows' two ICMP microflows to go
//! down), then N measured ones, whose summary gives min/avg/max/mdev and
//! whose replies give p50/p99. Rows:
//! - `linux bridge`: `br0` in the switch namespace over `p1` and `p2`,
//!   STP off;
//! - `offlow offloaded, af_packet` / `af_xdp`: `offlow run --config FILE`
//!   with [`ping::OFFLOAD_CONFIG`] (`mode = "xdp"`, `promote_pps = 50`,
//!   `demote_pps = 10`, `sample_every = 1`: a 200/s ping goes down) and the
//!   two port-to-port flows. The switch runs with `RUST_LOG=info` and its
//!   stderr in a temporary file; after the row it is stopped and its exit
//!   lines give the tier's hits (`offload tier stopped`) and the userspace
//!   workers' packets (`data plane stopped`). A row with 0 hits is named
//!   `(not offloaded)` and does not count for the goal;
//! - `offlow userspace, af_packet` / `af_xdp`: the same without the file;
//! - `ovs 3.1 netdev, type=afxdp`: the private Open vSwitch.
//!
//! # Row groups
//! The rows above are issue 22's group. Issue 25's source-NAT group
//! (`--nat`, or the `nat-*` kinds of `--rows`) lives in [`nat`]: the same
//! generator and sink, a routed frame, nftables vs offlow in software vs
//! offloaded, each row's throughput followed by its latency at
//! `--nat-loads` percent of that maximum. Its L2-in-L3 gateway group
//! (`--gateway`, or the `gw-*` kinds) lives in [`gateway`]: GRE-in-IPv4
//! into the underlay port, decapsulated and VLAN-tagged, offlow in software
//! vs offloaded vs Open vSwitch's userspace tunnelling. A further group adds its
//! [`RowKind`] values, a `Plan` variant dispatched to its own module by
//! `run_row`, and its own section in the report, the same way.
//!
//! Interrupts: SIGINT/SIGTERM end the current row early and stop the run;
//! the guards still remove everything.
//!
//! # Invariants
//! Every namespace, process, XDP program and temporary file a row creates
//! is owned by a guard dropped at the end of the row, also on error. Only addresses in
//! the row's own namespaces receive traffic.
//!
//! Thread-safety: the generator threads share only atomics and a program
//! descriptor with the measuring thread, which owns everything else.

mod bpf;
pub mod gateway;
pub mod nat;
pub mod ping;
pub mod xdp;

use std::io::Write as _;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::Serialize;
use serde_json::json;

use crate::forward::{start_offlow_with, Ovs};
use crate::report::{fmt_f, print_json_line, Table};
use crate::topo::{catch_interrupt, interrupted, run_cmd, sleep_unless_interrupted, Topo};
use crate::traffic::{build_frames, DST_PORT, FIRST_FRAME_WAIT, FIRST_SRC_PORT};
use crate::workload::FCS_LEN;

use xdp::{Ceiling, Floor, GenConfig, Generator, Sink, SinkCounts};

/// Why the offloaded rows do not run yet.
pub const OFFLOAD_PENDING: &str = "offload tier not wired into the switch yet";

/// The `offlow run` arguments that turn the offload tier on (`None` would
/// skip the offloaded rows with [`OFFLOAD_PENDING`]).
pub const OFFLOAD_RUN_ARGS: Option<&[&str]> = Some(&["--offload", "xdp"]);

/// Loss above which a row counts as limited by its switch.
pub const SWITCH_LIMITED_LOSS: f64 = 0.05;

/// The CPU-time method, as printed and put in the JSON.
pub const CPU_METHOD: &str = "switch CPU per packet = (switch process utime+stime from \
/proc/PID/stat, all threads + softirq time of all CPUs from /proc/stat) over the window / frames \
received. Softirq holds the veth NAPI receive and XDP programs of p1, p2 and the receiver \
(ceiling redirect, AF_XDP copy, the sink itself); with this kernel's tick accounting (no \
IRQ_TIME_ACCOUNTING) softirq run inside the switch's syscalls is in both terms: an upper bound; \
and the softirq ticks are only fair when the CPUs are busy throughout (flat out, not --rate). \
Generator threads' CPU (thread clocks) is given apart per offered frame.";

/// The cross-check's method, as printed and put in the JSON.
pub const CPU_METHOD_CLOCKS: &str = "clocks ns/pkt = (switch process + ksoftirqd threads + \
generator threads' CPU, all from the scheduler's run-time clocks, minus the generator-alone row's \
ns per frame × frames offered) / frames received: the work the switch adds wherever the kernel \
ran it (inline in the generator's or switch's system calls, or deferred to ksoftirqd), without \
tick sampling. Subtracting the generator-alone row's (generator + ksoftirqd) ns per frame removes the generator and the sink when the \
sink runs on the generator's CPU (ceiling rows); in the userspace rows the sink runs inside the \
switch's transmit calls and stays in (about 30 ns). Other tenants' softirq work in ksoftirqd \
would count too.";

/// Kinds of row, for `--rows`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RowKind {
    /// Generator straight into the sink, no switch (one row per `--workers`
    /// value: that many generator threads and queues).
    Generator,
    /// The XDP redirect ceiling (one row per `--workers` value: queues).
    Ceiling,
    /// The lookup floor: parse, one hash lookup of offlow's 36-byte key,
    /// redirect (one row per `--workers` value: queues).
    Floor,
    /// offlow's userspace path, AF_XDP ports (one row per `--workers`).
    Userspace,
    /// Open vSwitch netdev datapath, `type=afxdp` ports.
    OvsAfxdp,
    /// offlow with its offload tier (one row per `--workers`; skipped
    /// until the switch has the option).
    Offloaded,
    /// Issue 25 (c): source NAT by nftables in the kernel (one row per
    /// `--workers`: queues), then its latency levels.
    NatNftables,
    /// Issue 25 (c): source NAT by offlow's userspace path (per-connection
    /// flows, AF_XDP ports; one row per `--workers`).
    NatUserspace,
    /// Issue 25 (c): source NAT by offlow's offload tier (one row per
    /// `--workers`).
    NatOffloaded,
    /// Issue 25 (b): the L2-in-L3 gateway (GRE decapsulation, VLAN push)
    /// by offlow's userspace path (one row per `--workers`).
    GwUserspace,
    /// Issue 25 (b): the gateway by offlow's offload tier (one row per
    /// `--workers`).
    GwOffloaded,
    /// Issue 25 (b): the gateway by Open vSwitch 3.1, afxdp ports, native
    /// (userspace) tunnelling.
    GwOvs,
}

impl RowKind {
    fn is_nat(self) -> bool {
        matches!(
            self,
            RowKind::NatNftables | RowKind::NatUserspace | RowKind::NatOffloaded
        )
    }

    fn is_gateway(self) -> bool {
        matches!(
            self,
            RowKind::GwUserspace | RowKind::GwOffloaded | RowKind::GwOvs
        )
    }
}

/// The rows `--gateway` selects: the generator alone and the XDP redirect
/// ceiling (both with the plain frame, as context), then the gateway
/// configurations.
pub const GATEWAY_ROWS: [RowKind; 5] = [
    RowKind::Generator,
    RowKind::Ceiling,
    RowKind::GwUserspace,
    RowKind::GwOffloaded,
    RowKind::GwOvs,
];

/// The rows `--nat` selects: the generator alone (for the 'limited by'
/// and clocks columns), then the NAT configurations.
pub const NAT_ROWS: [RowKind; 4] = [
    RowKind::Generator,
    RowKind::NatNftables,
    RowKind::NatUserspace,
    RowKind::NatOffloaded,
];

/// `offlow bench offload` options.
#[derive(Debug, Clone, clap::Args)]
pub struct OffloadArgs {
    /// UDP flows (distinct source ports).
    #[arg(long, default_value_t = 100)]
    pub flows: u32,
    /// Frame size in bytes including the 4-byte FCS (64: a 60-byte frame).
    #[arg(long, default_value_t = 64)]
    pub frame_size: usize,
    /// Seconds counted per row.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Seconds of traffic before counting starts.
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// Worker (and queue, and generator thread) counts, one row each.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub workers: Vec<usize>,
    /// Frames per live-frames batch (1..=256).
    #[arg(long, default_value_t = 64)]
    pub batch: u32,
    /// Offered load in Mpps, shared by the generator threads; 0 (default):
    /// as fast as the generator goes. A rate every row sustains compares
    /// CPU time per packet at equal load.
    #[arg(long, default_value_t = 0.0)]
    pub rate: f64,
    /// Which rows to run (comma-separated; default: issue 22's group;
    /// the `nat-*` rows are issue 25's, see `--nat`).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "generator,ceiling,floor,userspace,ovs-afxdp,offloaded"
    )]
    pub rows: Vec<RowKind>,
    /// The source-NAT row group instead (issue 25 (c)): `--rows
    /// generator,nat-nftables,nat-userspace,nat-offloaded`, without issue
    /// 22's latency rows.
    #[arg(long, conflicts_with_all = ["rows", "only_ping"])]
    pub nat: bool,
    /// The L2-in-L3 gateway row group instead (issue 25 (b)): `--rows
    /// generator,ceiling,gw-userspace,gw-offloaded,gw-ovs`, without issue
    /// 22's latency rows.
    #[arg(long, conflicts_with_all = ["rows", "only_ping", "nat"])]
    pub gateway: bool,
    /// NAT rows: latency levels, percent of each row's flat-out rate
    /// (0: no load); `--ping` probes at each.
    #[arg(
        long,
        value_delimiter = ',',
        num_args = 0..,
        default_value = "0,10,25,50,75,100"
    )]
    pub nat_loads: Vec<u32>,
    /// Latency rows after the rate rows: this many `ping` probes per row
    /// (5 ms apart); 0 skips them.
    #[arg(long, default_value_t = 400)]
    pub ping: u32,
    /// Only the latency rows (no rate rows).
    #[arg(long)]
    pub only_ping: bool,
    /// The offlow binary (default: this executable).
    #[arg(long)]
    pub offlow_bin: Option<PathBuf>,
    /// An extra argument for every `offlow run` of the latency rows
    /// (repeatable), e.g. `--offlow-arg=--busy-poll`.
    #[arg(long = "offlow-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub offlow_args: Vec<String>,
    /// Print one JSON object as the last line.
    #[arg(long)]
    pub json: bool,
}

impl Default for OffloadArgs {
    fn default() -> OffloadArgs {
        OffloadArgs {
            flows: 100,
            frame_size: 64,
            seconds: 5.0,
            warmup: 1.0,
            workers: vec![1, 2],
            batch: 64,
            rate: 0.0,
            rows: vec![
                RowKind::Generator,
                RowKind::Ceiling,
                RowKind::Floor,
                RowKind::Userspace,
                RowKind::OvsAfxdp,
                RowKind::Offloaded,
            ],
            nat: false,
            gateway: false,
            nat_loads: vec![0, 10, 25, 50, 75, 100],
            ping: 400,
            only_ping: false,
            offlow_bin: None,
            offlow_args: Vec::new(),
            json: false,
        }
    }
}

/// One measured (or skipped, or failed) configuration.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Human-readable name.
    pub name: String,
    /// `generator`, `ceiling`, `userspace`, `ovs-afxdp`, `offloaded`, or a
    /// row group's kind (`nat-*`, `gw-*`).
    pub kind: &'static str,
    /// Queues per veth, generator threads and (offlow rows) workers.
    pub queues: usize,
    /// CPUs the generator threads were pinned to.
    pub gen_cpus: Vec<usize>,
    /// Frames the generator sent in the window.
    pub offered: u64,
    /// Experiment frames the sink counted in the window.
    pub received: u64,
    /// Other frames the sink saw in the window.
    pub other: u64,
    /// Window length, seconds.
    pub seconds: f64,
    /// Offered rate, Mpps.
    pub offered_mpps: f64,
    /// Received rate, Mpps: the row's figure.
    pub rx_mpps: f64,
    /// `1 - received / offered`.
    pub loss: f64,
    /// Distinct flows (source ports in range) the sink saw over the row.
    pub flows_seen: usize,
    /// Switch process CPU seconds in the window (utime + stime).
    pub switch_cpu_s: f64,
    /// Softirq CPU seconds in the window, all CPUs.
    pub softirq_s: f64,
    /// System CPU seconds in the window, all CPUs (information: includes
    /// the generator's `BPF_PROG_RUN`).
    pub system_s: f64,
    /// Share of the CPUs' time idle in the window (`/proc/stat` idle and
    /// iowait over CPUs × seconds): near 0 means every CPU was busy, with
    /// this run's work or another tenant's.
    pub idle_share: f64,
    /// Generator threads' CPU seconds in the window.
    pub gen_cpu_s: f64,
    /// CPU seconds of the `ksoftirqd/N` threads in the window (softirq
    /// work the kernel deferred out of the context that raised it).
    pub ksoftirqd_s: f64,
    /// The cross-check, from scheduler clocks only (exact, no tick
    /// sampling): (switch process + ksoftirqd + generator threads −
    /// the generator-alone row's ns per frame × frames offered) per frame
    /// received. See [`CPU_METHOD_CLOCKS`]. `None` without a generator
    /// row of as many threads, or for generator rows.
    pub clocks_ns_per_pkt: Option<f64>,
    /// Switch process ns per received frame.
    pub switch_ns_per_pkt: Option<f64>,
    /// Softirq ns per received frame.
    pub softirq_ns_per_pkt: Option<f64>,
    /// The headline: (switch process + softirq) ns per received frame.
    pub cpu_ns_per_pkt: Option<f64>,
    /// Generator ns per offered frame.
    pub gen_ns_per_pkt: Option<f64>,
    /// `switch` (lost > 5% of what was offered), `shared cpu` (no loss,
    /// but offered below 90% of the generator-alone row with as many
    /// threads) or `generator`; `None` for generator rows.
    pub limited_by: Option<&'static str>,
    /// NAT rows: frames of the window that arrived translated (all of
    /// them, or the row fails).
    pub translated: Option<u64>,
    /// NAT rows: sampled frames whose headers and checksums were checked.
    pub samples_checked: Option<usize>,
    /// Offloaded NAT rows: frames the offload tier served over the row's
    /// life (throughput window and latency levels; the switch's exit log).
    pub tier_hits: Option<u64>,
    /// Offloaded NAT rows: tier hits ÷ (hits + userspace packets).
    pub tier_share: Option<f64>,
    /// Why the row was not run.
    pub skipped: Option<String>,
    /// Why the row failed.
    pub error: Option<String>,
}

impl Row {
    fn empty(name: String, kind: &'static str, queues: usize) -> Row {
        Row {
            name,
            kind,
            queues,
            gen_cpus: Vec::new(),
            offered: 0,
            received: 0,
            other: 0,
            seconds: 0.0,
            offered_mpps: 0.0,
            rx_mpps: 0.0,
            loss: 0.0,
            flows_seen: 0,
            switch_cpu_s: 0.0,
            softirq_s: 0.0,
            system_s: 0.0,
            idle_share: 0.0,
            gen_cpu_s: 0.0,
            ksoftirqd_s: 0.0,
            clocks_ns_per_pkt: None,
            switch_ns_per_pkt: None,
            softirq_ns_per_pkt: None,
            cpu_ns_per_pkt: None,
            gen_ns_per_pkt: None,
            limited_by: None,
            translated: None,
            samples_checked: None,
            tier_hits: None,
            tier_share: None,
            skipped: None,
            error: None,
        }
    }

    fn ran(&self) -> bool {
        self.skipped.is_none() && self.error.is_none()
    }
}

/// Everything `offlow bench offload` measured.
#[derive(Debug, Clone, Serialize)]
pub struct OffloadReport {
    /// Flows in the traffic.
    pub flows: u32,
    /// Frame size with FCS.
    pub frame_size: usize,
    /// Offered load asked for, Mpps (`None`: flat out).
    pub rate_mpps: Option<f64>,
    /// `/proc/loadavg` when the run started (other work on the machine).
    pub loadavg_at_start: String,
    /// The rows in the order run.
    pub rows: Vec<Row>,
    /// Probes per latency row (0: none ran).
    pub ping_count: u32,
    /// The latency rows in the order run.
    pub ping_rows: Vec<ping::PingRow>,
    /// The NAT rows' latency levels in the order run.
    pub nat_latency: Vec<nat::LoadRow>,
}

/// The goals of issue 22, as ratios of received rates (`None` when a side
/// did not run).
#[derive(Debug, Clone, Serialize)]
pub struct Goals {
    /// Best offloaded ÷ best ceiling (goal ≥ 0.9).
    pub offloaded_vs_ceiling: Option<f64>,
    /// Best offloaded ÷ best userspace (goal ≥ 3).
    pub offloaded_vs_userspace: Option<f64>,
    /// Best offloaded ÷ OVS afxdp (goal ≥ 5).
    pub offloaded_vs_ovs: Option<f64>,
    /// Best ceiling ÷ best userspace: the most the offload tier could reach
    /// against the userspace path on this machine.
    pub ceiling_vs_userspace: Option<f64>,
    /// Best ceiling ÷ OVS afxdp: the same against Open vSwitch.
    pub ceiling_vs_ovs: Option<f64>,
    /// Best lookup floor ÷ best ceiling: what one exact-match hash lookup
    /// (and the parse feeding it) leaves of the ceiling; an offload tier
    /// built on such a lookup stays below this.
    pub floor_vs_ceiling: Option<f64>,
    /// Best offloaded ÷ best lookup floor: how close offlow's program comes
    /// to that bound.
    pub offloaded_vs_floor: Option<f64>,
    /// Worst (highest) average ping RTT of the offloaded rows that were
    /// served by the tier ÷ the Linux bridge's (goal ≤ 1.25).
    pub ping_offloaded_vs_bridge: Option<f64>,
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

impl OffloadReport {
    /// Best received rate of the rows of `kind` that ran.
    pub fn best(&self, kind: &str) -> Option<f64> {
        self.rows
            .iter()
            .filter(|r| r.kind == kind && r.ran())
            .map(|r| r.rx_mpps)
            .reduce(f64::max)
    }

    /// The goal ratios.
    pub fn goals(&self) -> Goals {
        let (off, ceil, user, ovs, floor) = (
            self.best("offloaded"),
            self.best("ceiling"),
            self.best("userspace"),
            self.best("ovs-afxdp"),
            self.best("floor"),
        );
        Goals {
            offloaded_vs_ceiling: ratio(off, ceil),
            offloaded_vs_userspace: ratio(off, user),
            offloaded_vs_ovs: ratio(off, ovs),
            ceiling_vs_userspace: ratio(ceil, user),
            ceiling_vs_ovs: ratio(ceil, ovs),
            floor_vs_ceiling: ratio(floor, ceil),
            offloaded_vs_floor: ratio(off, floor),
            ping_offloaded_vs_bridge: self
                .ping_rows
                .iter()
                .filter(|r| r.kind == "offloaded" && r.offload_hits.is_some_and(|h| h > 0))
                .filter_map(|r| r.avg_vs_bridge)
                .reduce(f64::max),
        }
    }

    /// The `--json` object.
    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "experiment": "offload",
            "flows": self.flows,
            "frame_size": self.frame_size,
            "rate_mpps": self.rate_mpps,
            "loadavg_at_start": self.loadavg_at_start,
            "cpu_method": CPU_METHOD,
            "cpu_method_clocks": CPU_METHOD_CLOCKS,
            "offloaded_mpps": self.best("offloaded"),
            "ceiling_mpps": self.best("ceiling"),
            "floor_mpps": self.best("floor"),
            "userspace_mpps": self.best("userspace"),
            "ovs_afxdp_mpps": self.best("ovs-afxdp"),
            "generator_mpps": self.best("generator"),
            "goals": self.goals(),
            "rows": self.rows,
            "ping_count": self.ping_count,
            "ping_interval_s": ping::PING_INTERVAL,
            "ping_method": ping::PING_METHOD,
            "ping_rows": self.ping_rows,
            "nat_method": nat::NAT_METHOD,
            "nat_goals": nat::goals(&self.rows, &self.nat_latency),
            "nat_latency": self.nat_latency,
            "gateway_method": gateway::GATEWAY_METHOD,
            "gateway_goals": gateway::goals(&self.rows),
        })
    }
}

/// [`Row::clocks_ns_per_pkt`] given the generator-alone row's ns per
/// frame.
pub fn clocks_ns_per_pkt(r: &Row, gen_alone_ns: Option<f64>) -> Option<f64> {
    let base = gen_alone_ns?;
    if r.received == 0 {
        return None;
    }
    let total = (r.switch_cpu_s + r.ksoftirqd_s + r.gen_cpu_s) * 1e9;
    Some((total - base * r.offered as f64) / r.received as f64)
}

/// What limited a switched row (see [`Row::limited_by`]).
pub fn limited_by(row: &Row, gen_alone_mpps: Option<f64>) -> &'static str {
    if row.loss > SWITCH_LIMITED_LOSS {
        "switch"
    } else if gen_alone_mpps.is_some_and(|g| row.offered_mpps < 0.9 * g) {
        "shared cpu"
    } else {
        "generator"
    }
}

fn check_args(a: &OffloadArgs) -> anyhow::Result<()> {
    if a.flows == 0 || a.flows > 50_000 {
        bail!("--flows must be between 1 and 50000");
    }
    if !(64..=1518).contains(&a.frame_size) {
        bail!("--frame-size must be between 64 and 1518 (bytes with FCS)");
    }
    let seconds_ok = a.seconds > 0.0 && a.seconds <= 600.0;
    if !seconds_ok || !(0.0..=60.0).contains(&a.warmup) {
        bail!("--seconds must be in (0, 600] and --warmup in [0, 60]");
    }
    if a.workers.iter().any(|&w| w == 0 || w > 64) {
        bail!("--workers values must be between 1 and 64");
    }
    if !(0.0..=1000.0).contains(&a.rate) {
        bail!("--rate must be between 0 and 1000 Mpps");
    }
    if !(1..=xdp::MAX_BATCH).contains(&a.batch) {
        bail!("--batch must be between 1 and {}", xdp::MAX_BATCH);
    }
    if a.ping > 100_000 {
        bail!("--ping must be at most 100000");
    }
    if a.only_ping && a.ping == 0 {
        bail!("--only-ping needs --ping above 0");
    }
    if selected_rows(a).iter().any(|k| k.is_nat()) {
        nat::check_args(a)?;
    }
    if selected_rows(a).iter().any(|k| k.is_gateway()) {
        gateway::check_args(a)?;
    }
    Ok(())
}

// ------------------------------------------------------------ CPU counters --

/// `/proc/stat`'s aggregate line: (system, softirq, idle + iowait), in
/// seconds summed over CPUs.
fn proc_stat() -> anyhow::Result<(f64, f64, f64)> {
    let s = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
    let line = s.lines().next().context("empty /proc/stat")?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // user nice system idle iowait irq softirq ...
    let at = |i: usize| v.get(i).copied().unwrap_or(0) as f64 / clk_tck();
    Ok((at(2), at(6), at(3) + at(4)))
}

/// CPU seconds of every `ksoftirqd/N` kernel thread so far.
fn ksoftirqd_cpu() -> f64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.starts_with("ksoftirqd/"))
        })
        .filter_map(|pid| process_cpu(pid).ok())
        .sum()
}

/// The first three fields of `/proc/loadavg` ("" when unreadable).
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn clk_tck() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// utime + stime of process `pid`, seconds (all its threads).
pub fn process_cpu(pid: u32) -> anyhow::Result<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // Fields after the command name, which is in parentheses and may
    // contain spaces: state is field 3, utime 14, stime 15.
    let rest = s.rsplit_once(')').map(|x| x.1).context("malformed stat")?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let get = |i: usize| -> u64 { f.get(i).and_then(|x| x.parse().ok()).unwrap_or(0) };
    Ok((get(11) + get(12)) as f64 / clk_tck())
}

#[derive(Debug, Clone, Copy)]
struct Snap {
    at: Instant,
    sent: u64,
    rx: SinkCounts,
    system: f64,
    softirq: f64,
    idle: f64,
    switch: f64,
    gen: f64,
    ksoftirqd: f64,
}

fn snap(g: &Generator, sink: &Sink, switch_pid: Option<u32>) -> anyhow::Result<Snap> {
    let (system, softirq, idle) = proc_stat()?;
    Ok(Snap {
        at: Instant::now(),
        sent: g.sent()?,
        rx: sink.counts()?,
        system,
        softirq,
        idle,
        switch: match switch_pid {
            Some(p) => process_cpu(p)?,
            None => 0.0,
        },
        gen: g.cpu_time().as_secs_f64(),
        ksoftirqd: ksoftirqd_cpu(),
    })
}

// -------------------------------------------------------------- measuring --

/// CPUs this process may run on, ascending.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity
    // writes at most size_of::<cpu_set_t>() bytes into it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above; `set` is a local of the size passed.
    let ok =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) }
            == 0;
    let cpus: Vec<usize> = if ok {
        // SAFETY: CPU_ISSET reads the set for indexes below CPU_SETSIZE.
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
            .collect()
    } else {
        Vec::new()
    };
    if cpus.is_empty() {
        vec![0]
    } else {
        cpus
    }
}

/// `n` generator CPUs: the first `n` allowed ones, wrapping around.
fn gen_cpus(n: usize) -> Vec<usize> {
    let all = allowed_cpus();
    (0..n).map(|i| all[i % all.len()]).collect()
}

/// The generator's settings for `frame` from the topology's generator end,
/// one thread per CPU of `cpus`, at `--rate`.
fn gen_config(t: &Topo, args: &OffloadArgs, frame: &[u8], cpus: Vec<usize>) -> GenConfig {
    GenConfig {
        ns: t.gen.0.clone(),
        ifname: t.gen.1.clone(),
        frame: frame.to_vec(),
        flows: args.flows,
        base_port: FIRST_SRC_PORT,
        rate_per_thread: (args.rate * 1e6 / cpus.len().max(1) as f64) as u64,
        cpus,
        batch: args.batch,
        // Every row of a run with NAT rows: the same generator throughout,
        // so the generator-alone row stays their baseline.
        // The gateway's offload tier decapsulates in place too.
        restore_headers: selected_rows(args)
            .iter()
            .any(|k| k.is_nat() || k.is_gateway()),
        // Per-flow state (conntrack) bounces between CPUs that share a
        // flow: in NAT runs each thread gets its own flows, as RSS would.
        partition_flows: selected_rows(args).iter().any(|k| k.is_nat()),
    }
}

/// Wait until the sink has counted a frame (an error, with `g` stopped,
/// after [`FIRST_FRAME_WAIT`] or when interrupted).
fn wait_first_frame(g: &Generator, sink: &Sink) -> anyhow::Result<()> {
    let deadline = Instant::now() + FIRST_FRAME_WAIT;
    let first = sink.counts()?.frames;
    while sink.counts()?.frames == first {
        if g.failed() {
            bail!("the generator stopped");
        }
        if Instant::now() > deadline || interrupted() {
            bail!(
                "no frame reached the sink within {} s ({} sent)",
                FIRST_FRAME_WAIT.as_secs(),
                g.sent()?
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// Run the generator from the topology's generator end into a sink on its
/// receiver end, `switch_pid`'s process being the switch, and fill `row`;
/// `seen`: the UDP source ports counted as the experiment's flows. Returns
/// the sink's counts over the window.
fn measure(
    t: &Topo,
    row: &mut Row,
    args: &OffloadArgs,
    frame: &[u8],
    switch_pid: Option<u32>,
    sink: &Sink,
    seen: Range<u32>,
) -> anyhow::Result<SinkCounts> {
    row.gen_cpus = gen_cpus(row.queues);
    let cfg = gen_config(t, args, frame, row.gen_cpus.clone());
    let g = Generator::start(&cfg)?;
    if let Err(e) = wait_first_frame(&g, sink) {
        // A generator thread's own error says more than the wait's.
        return Err(g.stop().err().unwrap_or(e));
    }
    sleep_unless_interrupted(Duration::from_secs_f64(args.warmup));
    let s0 = snap(&g, sink, switch_pid)?;
    sleep_unless_interrupted(Duration::from_secs_f64(args.seconds));
    let s1 = snap(&g, sink, switch_pid)?;
    let failed = g.failed();
    g.stop()?;
    if failed {
        bail!("a generator thread stopped during the row");
    }
    let secs = s1.at.duration_since(s0.at).as_secs_f64();
    row.seconds = secs;
    row.offered = s1.sent - s0.sent;
    row.received = s1.rx.frames - s0.rx.frames;
    row.other = s1.rx.other - s0.rx.other;
    row.offered_mpps = row.offered as f64 / secs / 1e6;
    row.rx_mpps = row.received as f64 / secs / 1e6;
    row.loss = if row.offered > 0 {
        1.0 - (row.received as f64 / row.offered as f64).min(1.0)
    } else {
        0.0
    };
    row.switch_cpu_s = s1.switch - s0.switch;
    row.softirq_s = s1.softirq - s0.softirq;
    row.system_s = s1.system - s0.system;
    row.idle_share = (s1.idle - s0.idle) / (secs * allowed_cpus().len() as f64);
    row.gen_cpu_s = s1.gen - s0.gen;
    row.ksoftirqd_s = s1.ksoftirqd - s0.ksoftirqd;
    let per = |s: f64, n: u64| (n > 0).then(|| s * 1e9 / n as f64);
    row.switch_ns_per_pkt = per(row.switch_cpu_s, row.received);
    row.softirq_ns_per_pkt = per(row.softirq_s, row.received);
    row.cpu_ns_per_pkt = per(row.switch_cpu_s + row.softirq_s, row.received);
    row.gen_ns_per_pkt = per(row.gen_cpu_s, row.offered);
    row.flows_seen = sink
        .src_ports()?
        .into_iter()
        .filter(|&p| seen.contains(&u32::from(p)))
        .count();
    Ok(s1.rx.since(&s0.rx))
}

/// Turn GRO on on `ifname` in `ns` (NAPI for redirected frames, see the
/// module docs).
fn gro_on(ns: &str, ifname: &str) -> anyhow::Result<()> {
    run_cmd(
        std::process::Command::new("ip")
            .args(["netns", "exec", ns, "ethtool", "-K", ifname, "gro", "on"]),
    )
    .map(|_| ())
    .with_context(|| format!("turning GRO on on {ifname}"))
}

// -------------------------------------------------------------------- rows --

#[derive(Debug, Clone, Copy)]
enum Plan {
    Generator(usize),
    Ceiling(usize),
    Floor(usize),
    Userspace(usize),
    OvsAfxdp,
    Offloaded(usize),
    Nat(nat::Nat, usize),
    Gateway(gateway::Gw, usize),
}

fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

impl Plan {
    fn name(self) -> String {
        match self {
            Plan::Generator(n) => format!("generator alone, {}", plural(n, "thread")),
            Plan::Ceiling(n) => format!("ceiling (XDP redirect), {}", plural(n, "queue")),
            Plan::Floor(n) => format!(
                "lookup floor (parse, hash lookup, redirect), {}",
                plural(n, "queue")
            ),
            Plan::Userspace(n) => format!("offlow userspace af_xdp, {}", plural(n, "worker")),
            Plan::OvsAfxdp => "ovs 3.1 netdev, type=afxdp".into(),
            Plan::Offloaded(n) => format!("offlow offloaded, {}", plural(n, "worker")),
            Plan::Nat(k, n) => k.name(n),
            Plan::Gateway(k, n) => k.name(n),
        }
    }

    fn kind(self) -> &'static str {
        match self {
            Plan::Generator(_) => "generator",
            Plan::Ceiling(_) => "ceiling",
            Plan::Floor(_) => "floor",
            Plan::Userspace(_) => "userspace",
            Plan::OvsAfxdp => "ovs-afxdp",
            Plan::Offloaded(_) => "offloaded",
            Plan::Nat(k, _) => k.kind(),
            Plan::Gateway(k, _) => k.kind(),
        }
    }

    fn queues(self) -> usize {
        match self {
            Plan::Generator(n)
            | Plan::Ceiling(n)
            | Plan::Floor(n)
            | Plan::Userspace(n)
            | Plan::Offloaded(n)
            | Plan::Nat(_, n) => n,
            Plan::Gateway(gateway::Gw::Ovs, _) | Plan::OvsAfxdp => 1,
            Plan::Gateway(_, n) => n,
        }
    }
}

/// Run one row; a NAT row's latency levels go to `levels`.
fn run_row(
    plan: Plan,
    row: &mut Row,
    args: &OffloadArgs,
    frame: &[u8],
    bin: &Path,
    levels: &mut Vec<nat::LoadRow>,
) -> anyhow::Result<()> {
    match plan {
        Plan::Nat(k, q) => {
            levels.extend(nat::run_row(k, q, row, args, bin)?);
            Ok(())
        }
        Plan::Gateway(k, q) => gateway::run_row(k, q, row, args, bin),
        _ => run_group_22_row(plan, row, args, frame, bin),
    }
}

/// Run one row of issue 22's group (the L2 frame, `in_port` flows).
fn run_group_22_row(
    plan: Plan,
    row: &mut Row,
    args: &OffloadArgs,
    frame: &[u8],
    bin: &Path,
) -> anyhow::Result<()> {
    let seen = u32::from(FIRST_SRC_PORT)..u32::from(FIRST_SRC_PORT) + args.flows;
    let q = plan.queues();
    let switched = !matches!(plan, Plan::Generator(_));
    let t = Topo::hosts(switched, q)?;
    // Declared after the topology: dropped (detached) before it.
    let sink = Sink::attach(&t.rx.0, &t.rx.1, DST_PORT)?;
    match plan {
        Plan::Generator(_) => measure(&t, row, args, frame, None, &sink, seen).map(drop),
        Plan::Ceiling(_) => {
            let sw = t.sw()?;
            let _c = Ceiling::attach(sw, "p1", "p2")?;
            gro_on(sw, "p1")?;
            measure(&t, row, args, frame, None, &sink, seen).map(drop)
        }
        Plan::Floor(_) => {
            let sw = t.sw()?;
            let _f = Floor::attach(sw, "p1", "p2", frame, FIRST_SRC_PORT, args.flows)?;
            gro_on(sw, "p1")?;
            measure(&t, row, args, frame, None, &sink, seen).map(drop)
        }
        Plan::Userspace(w) | Plan::Offloaded(w) => {
            let extra: &[&str] = match plan {
                Plan::Offloaded(_) => OFFLOAD_RUN_ARGS.context(OFFLOAD_PENDING)?,
                _ => &[],
            };
            let sw = t.sw()?;
            let mut s = start_offlow_with(bin, sw, w, true, extra)?;
            gro_on(sw, "p1")?;
            let r = measure(&t, row, args, frame, Some(s.child.id()), &sink, seen).map(drop);
            s.check_alive()?;
            r
        }
        Plan::OvsAfxdp => {
            let sw = t.sw()?;
            let ovs = Ovs::start(sw, "afxdp")?;
            gro_on(sw, "p1")?;
            measure(&t, row, args, frame, ovs.vswitchd_pid(), &sink, seen).map(drop)
        }
        Plan::Nat(..) | Plan::Gateway(..) => bail!("not a row of issue 22's group"),
    }
}

/// Run every requested row.
pub fn run(args: &OffloadArgs) -> anyhow::Result<OffloadReport> {
    check_args(args)?;
    let bin = match &args.offlow_bin {
        Some(b) => b.clone(),
        None => std::env::current_exe().context("locating the offlow binary")?,
    };
    let frame = build_frames(1, args.frame_size)
        .pop()
        .context("building the frame")?;
    let mut plans = Vec::new();
    let selected = selected_rows(args);
    let rate_rows: &[RowKind] = if args.only_ping { &[] } else { &selected };
    for k in rate_rows {
        for &w in &args.workers {
            match k {
                RowKind::Generator => plans.push(Plan::Generator(w)),
                RowKind::Ceiling => plans.push(Plan::Ceiling(w)),
                RowKind::Floor => plans.push(Plan::Floor(w)),
                RowKind::Userspace => plans.push(Plan::Userspace(w)),
                RowKind::Offloaded => plans.push(Plan::Offloaded(w)),
                RowKind::NatNftables => plans.push(Plan::Nat(nat::Nat::Nftables, w)),
                RowKind::NatUserspace => plans.push(Plan::Nat(nat::Nat::Userspace, w)),
                RowKind::NatOffloaded => plans.push(Plan::Nat(nat::Nat::Offloaded, w)),
                RowKind::GwUserspace => plans.push(Plan::Gateway(gateway::Gw::Userspace, w)),
                RowKind::GwOffloaded => plans.push(Plan::Gateway(gateway::Gw::Offloaded, w)),
                RowKind::OvsAfxdp | RowKind::GwOvs => {}
            }
        }
        if *k == RowKind::OvsAfxdp {
            plans.push(Plan::OvsAfxdp);
        }
        if *k == RowKind::GwOvs {
            plans.push(Plan::Gateway(gateway::Gw::Ovs, 1));
        }
    }
    let loadavg_at_start = loadavg();
    let mut rows = Vec::new();
    let mut nat_latency = Vec::new();
    for &p in &plans {
        if interrupted() {
            bail!("interrupted (everything created so far was removed)");
        }
        let mut row = Row::empty(p.name(), p.kind(), p.queues());
        if matches!(p, Plan::Offloaded(_)) && OFFLOAD_RUN_ARGS.is_none() {
            eprintln!("offload: {}: skipped ({OFFLOAD_PENDING})", row.name);
            row.skipped = Some(OFFLOAD_PENDING.into());
            rows.push(row);
            continue;
        }
        eprint!("offload: {} ... ", row.name);
        let _ = std::io::stderr().flush();
        match run_row(p, &mut row, args, &frame, &bin, &mut nat_latency) {
            Ok(()) => eprintln!(
                "{} Mpps received of {} offered",
                fmt_f(row.rx_mpps, 3),
                fmt_f(row.offered_mpps, 3)
            ),
            Err(e) => {
                eprintln!("failed: {e:#}");
                row.error = Some(format!("{e:#}"));
            }
        }
        rows.push(row);
    }
    let gen_alone: Vec<(usize, f64)> = rows
        .iter()
        .filter(|r| r.kind == "generator" && r.ran())
        .map(|r| (r.queues, r.offered_mpps))
        .collect();
    let gen_alone_ns: Vec<(usize, Option<f64>)> = rows
        .iter()
        .filter(|r| r.kind == "generator" && r.ran())
        .map(|r| {
            let ns = (r.gen_cpu_s + r.ksoftirqd_s) * 1e9 / r.offered.max(1) as f64;
            (r.queues, (r.offered > 0).then_some(ns))
        })
        .collect();
    for r in &mut rows {
        if r.kind != "generator" && r.ran() {
            let g = gen_alone.iter().find(|(q, _)| *q == r.queues).map(|x| x.1);
            r.limited_by = Some(limited_by(r, g));
            let base = gen_alone_ns
                .iter()
                .find(|(q, _)| *q == r.queues)
                .and_then(|x| x.1);
            r.clocks_ns_per_pkt = clocks_ns_per_pkt(r, base);
        }
    }
    // Issue 22's latency rows belong to its group: not with NAT rows only.
    let group_22 = args.only_ping
        || (!args.gateway
            && selected
                .iter()
                .any(|k| !k.is_nat() && !k.is_gateway() && *k != RowKind::Generator));
    let ping_rows = if args.ping > 0 && group_22 && !interrupted() {
        ping::run(args.ping, &bin, &args.offlow_args)
    } else {
        Vec::new()
    };
    Ok(OffloadReport {
        flows: args.flows,
        frame_size: args.frame_size,
        rate_mpps: (args.rate > 0.0).then_some(args.rate),
        loadavg_at_start,
        rows,
        ping_count: args.ping,
        ping_rows,
        nat_latency,
    })
}

/// The row kinds to run: `--rows`, or [`NAT_ROWS`] with `--nat`.
fn selected_rows(args: &OffloadArgs) -> Vec<RowKind> {
    if args.nat {
        NAT_ROWS.to_vec()
    } else if args.gateway {
        GATEWAY_ROWS.to_vec()
    } else {
        args.rows.clone()
    }
}

fn opt_ns(v: Option<f64>) -> String {
    v.map(|x| fmt_f(x, 0)).unwrap_or_else(|| "-".into())
}

/// The Markdown-friendly text table of a report.
pub fn render(r: &OffloadReport) -> String {
    let mut t = Table::new([
        "configuration",
        "gen CPUs",
        "offered Mpps",
        "received Mpps",
        "loss %",
        "flows seen",
        "switch proc ns/pkt",
        "softirq ns/pkt",
        "switch CPU ns/pkt",
        "clocks ns/pkt",
        "gen ns/frame",
        "idle %",
        "limited by",
    ]);
    for row in &r.rows {
        let ran = row.ran();
        let num = |v: String| if ran { v } else { "-".into() };
        let cpus: Vec<String> = row.gen_cpus.iter().map(usize::to_string).collect();
        t.row([
            row.name.clone(),
            num(cpus.join(",")),
            num(fmt_f(row.offered_mpps, 3)),
            num(fmt_f(row.rx_mpps, 3)),
            num(fmt_f(row.loss * 100.0, 1)),
            num(row.flows_seen.to_string()),
            num(opt_ns(row.switch_ns_per_pkt)),
            num(opt_ns(row.softirq_ns_per_pkt)),
            num(opt_ns(row.cpu_ns_per_pkt)),
            num(opt_ns(row.clocks_ns_per_pkt)),
            num(opt_ns(row.gen_ns_per_pkt)),
            num(fmt_f(row.idle_share * 100.0, 0)),
            row.limited_by.unwrap_or("").to_string(),
        ]);
    }
    t.render()
}

/// The rate rows' table and notes.
fn print_rates(r: &OffloadReport, args: &OffloadArgs) {
    let rate = if args.rate > 0.0 {
        format!("offered {} Mpps", args.rate)
    } else {
        "flat out".to_string()
    };
    println!(
        "offload: {} UDP flows, {}-byte frames ({} bytes + FCS), XDP live-frames generator \
         (batch {}, {rate}), {} s counted per row after {} s warm-up; load average at start {}",
        r.flows,
        r.frame_size,
        r.frame_size - FCS_LEN,
        args.batch,
        args.seconds,
        args.warmup,
        r.loadavg_at_start
    );
    print!("{}", render(r));
    for row in &r.rows {
        if let Some(why) = &row.skipped {
            println!("{}: skipped: {why}", row.name);
        }
        if let Some(e) = &row.error {
            println!("{}: error: {e}", row.name);
        }
    }
    println!("CPU method: {CPU_METHOD}");
    println!("Cross-check: {CPU_METHOD_CLOCKS}");
    println!(
        "'limited by': switch = it lost >{:.0}% of the offered frames; shared cpu = no loss but \
         the generator offered <90% of its rate alone with as many threads (switch and \
         generator share the CPUs); generator = no loss at the generator's own rate (a lower \
         bound).",
        SWITCH_LIMITED_LOSS * 100.0
    );
    println!(
        "idle %: share of all CPUs' time idle in the window (/proc/stat); near 0: the CPUs were \
         saturated, by this run or by other work on the machine (see the load average)."
    );
    let g = r.goals();
    let f = |v: Option<f64>| v.map(|x| format!("{}×", fmt_f(x, 2))).unwrap_or("-".into());
    let group_22 = ["ceiling", "floor", "userspace", "ovs-afxdp", "offloaded"];
    if r.rows.iter().any(|x| x.kind.starts_with("gw-")) {
        gateway::print(&r.rows, r.frame_size);
        if args.gateway || !r.rows.iter().any(|x| group_22.contains(&x.kind)) {
            return;
        }
    }
    if r.rows.iter().any(|x| x.kind.starts_with("nat-")) {
        print_nat(r);
        if !r.rows.iter().any(|x| group_22.contains(&x.kind)) {
            return;
        }
    }
    if g.floor_vs_ceiling.is_some() {
        println!(
            "lookup floor: floor/ceiling {}, offloaded/floor {} (the floor parses and does one \
             hash lookup of the same 36-byte key, nothing else: an offload built on that lookup \
             cannot pass it)",
            f(g.floor_vs_ceiling),
            f(g.offloaded_vs_floor)
        );
    }
    match r.best("offloaded") {
        Some(_) => println!(
            "goals (issue 22): offloaded/ceiling {} (≥ 0.9), offloaded/userspace {} (≥ 3), \
             offloaded/ovs afxdp {} (≥ 5)",
            f(g.offloaded_vs_ceiling),
            f(g.offloaded_vs_userspace),
            f(g.offloaded_vs_ovs)
        ),
        None => println!(
            "goals (issue 22): not evaluated, no offloaded row ran. Room on this machine: \
             ceiling/userspace {}, ceiling/ovs afxdp {} (an offload tier at 0.9× the ceiling \
             would be {} and {})",
            f(g.ceiling_vs_userspace),
            f(g.ceiling_vs_ovs),
            f(g.ceiling_vs_userspace.map(|x| x * 0.9)),
            f(g.ceiling_vs_ovs.map(|x| x * 0.9)),
        ),
    }
}

/// The NAT group's checks, latency table and goal.
fn print_nat(r: &OffloadReport) {
    for row in r
        .rows
        .iter()
        .filter(|x| x.kind.starts_with("nat-") && x.ran())
    {
        let tier = match (row.tier_hits, row.tier_share) {
            (Some(h), Some(s)) => format!("; offload tier hits {h} ({}%)", fmt_f(s * 100.0, 1)),
            (Some(h), None) => format!("; offload tier hits {h}"),
            _ => String::new(),
        };
        println!(
            "{}: translated {} of {} frames in the window, {} sampled frames checked (addresses, \
             ports, MACs, TTL, IPv4 and UDP checksums){tier}",
            row.name,
            row.translated.unwrap_or(0),
            row.received,
            row.samples_checked.unwrap_or(0)
        );
    }
    println!("NAT method: {}", nat::NAT_METHOD);
    if !r.nat_latency.is_empty() {
        println!(
            "NAT latency: {} ping probes per level, {} ms apart",
            r.ping_count,
            ping::PING_INTERVAL * 1000.0
        );
        print!("{}", nat::render(&r.nat_latency));
        for l in r.nat_latency.iter().filter(|l| l.error.is_some()) {
            println!(
                "{} at {}%: error: {}",
                l.name,
                l.load_pct,
                l.error.as_deref().unwrap_or("")
            );
        }
    }
    let g = nat::goals(&r.rows, &r.nat_latency);
    let f = |v: Option<f64>| v.map(|x| format!("{}×", fmt_f(x, 2))).unwrap_or("-".into());
    let lat: Vec<String> = g
        .avg_rtt_offloaded_vs_nftables
        .iter()
        .map(|(p, x)| format!("{p}%: {}×", fmt_f(*x, 2)))
        .collect();
    println!(
        "goal (issue 25, NAT): offloaded/nftables throughput {} (≥ 2), userspace/nftables {}; \
         offloaded/nftables avg RTT at the same share of each one's maximum: {} (≤ 1 at every \
         level: {})",
        f(g.offloaded_vs_nftables),
        f(g.userspace_vs_nftables),
        if lat.is_empty() {
            "-".to_string()
        } else {
            lat.join(", ")
        },
        match g.latency_equal_or_lower {
            Some(true) => "yes",
            Some(false) => "no",
            None => "-",
        }
    );
}

/// The latency rows' table and notes.
fn print_pings(r: &OffloadReport) {
    println!(
        "latency: {} ping probes per row, {} ms apart; load average at start {}",
        r.ping_count,
        ping::PING_INTERVAL * 1000.0,
        r.loadavg_at_start
    );
    print!("{}", ping::render(&r.ping_rows));
    for row in &r.ping_rows {
        if let Some(e) = &row.error {
            println!("{}: error: {e}", row.name);
        }
    }
    println!("Latency method: {}", ping::PING_METHOD);
    match r.goals().ping_offloaded_vs_bridge {
        Some(x) => println!(
            "goal (issue 22): offloaded ping avg RTT / linux bridge {}× (≤ 1.25)",
            fmt_f(x, 2)
        ),
        None => println!(
            "goal (issue 22): ping not evaluated (no offloaded row served by the tier, or no \
             bridge row)"
        ),
    }
}

/// `offlow bench offload`.
pub fn main(args: &OffloadArgs) -> anyhow::Result<()> {
    catch_interrupt();
    let r = run(args)?;
    if !r.rows.is_empty() {
        print_rates(&r, args);
    }
    if !r.ping_rows.is_empty() {
        print_pings(&r);
    }
    if args.json {
        print_json_line(&r.to_json());
    }
    if interrupted() {
        bail!("interrupted: the last row's figures are short");
    }
    let failed = r.rows.iter().filter(|x| x.error.is_some()).count()
        + r.ping_rows.iter().filter(|x| x.error.is_some()).count()
        + r.nat_latency.iter().filter(|x| x.error.is_some()).count();
    if failed > 0 {
        bail!("{failed} row(s) failed (see the table)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn goals_compare_best_rows_and_skip_missing_ones() {
        let mut rows = Vec::new();
        for (kind, mpps) in [
            ("ceiling", 4.0),
            ("ceiling", 6.0),
            ("userspace", 1.0),
            ("userspace", 1.5),
            ("ovs-afxdp", 0.5),
        ] {
            let mut r = Row::empty(kind.into(), kind, 1);
            r.rx_mpps = mpps;
            rows.push(r);
        }
        let mut skipped = Row::empty("x".into(), "offloaded", 1);
        skipped.skipped = Some(OFFLOAD_PENDING.into());
        skipped.rx_mpps = 100.0;
        rows.push(skipped);
        let rep = OffloadReport {
            flows: 100,
            frame_size: 64,
            rate_mpps: None,
            loadavg_at_start: String::new(),
            rows,
            ping_count: 0,
            ping_rows: Vec::new(),
            nat_latency: Vec::new(),
        };
        let g = rep.goals();
        assert_eq!(g.offloaded_vs_ceiling, None);
        assert_eq!(g.ceiling_vs_userspace, Some(4.0));
        assert_eq!(g.ceiling_vs_ovs, Some(12.0));
        let j = rep.to_json();
        assert_eq!(j["experiment"], "offload");
        assert_eq!(j["ceiling_mpps"], 6.0);
        assert!(j["offloaded_mpps"].is_null());
        assert_eq!(j["rows"].as_array().map(Vec::len), Some(6));
    }

    #[test]
    fn limited_by_reads_loss_then_offered_rate() {
        let mut r = Row::empty("x".into(), "userspace", 1);
        (r.loss, r.offered_mpps) = (0.3, 1.0);
        assert_eq!(limited_by(&r, Some(1.0)), "switch");
        (r.loss, r.offered_mpps) = (0.0, 0.5);
        assert_eq!(limited_by(&r, Some(1.0)), "shared cpu");
        assert_eq!(limited_by(&r, None), "generator");
        (r.loss, r.offered_mpps) = (0.0, 0.95);
        assert_eq!(limited_by(&r, Some(1.0)), "generator");
    }

    #[test]
    fn clocks_method_subtracts_the_generator_alone() {
        let mut r = Row::empty("x".into(), "ceiling", 1);
        (r.offered, r.received) = (1_000_000, 500_000);
        (r.switch_cpu_s, r.ksoftirqd_s, r.gen_cpu_s) = (0.01, 0.02, 0.07);
        // 0.1 s total − 50 ns × 1M = 0.05 s, over 0.5M received: 100 ns.
        let ns = clocks_ns_per_pkt(&r, Some(50.0)).expect("a figure");
        assert!((ns - 100.0).abs() < 1e-6, "{ns}");
        assert_eq!(clocks_ns_per_pkt(&r, None), None);
    }

    #[test]
    fn bad_arguments_are_refused() {
        let ok = OffloadArgs::default();
        assert!(check_args(&ok).is_ok());
        for f in [
            |a: &mut OffloadArgs| a.flows = 0,
            |a: &mut OffloadArgs| a.frame_size = 63,
            |a: &mut OffloadArgs| a.seconds = 0.0,
            |a: &mut OffloadArgs| a.workers = vec![0],
            |a: &mut OffloadArgs| a.batch = 257,
            |a: &mut OffloadArgs| a.rate = -1.0,
            |a: &mut OffloadArgs| (a.ping, a.only_ping) = (0, true),
        ] {
            let mut a = ok.clone();
            f(&mut a);
            assert!(check_args(&a).is_err());
        }
    }

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: OffloadArgs,
    }

    fn parse(argv: &[&str]) -> Result<OffloadArgs, clap::Error> {
        use clap::Parser as _;
        Cli::try_parse_from(std::iter::once("offload").chain(argv.iter().copied())).map(|c| c.args)
    }

    #[test]
    fn nat_group_is_selected_and_checked() {
        let a = parse(&["--nat", "--nat-loads", "10,50"]).expect("parsed");
        assert_eq!(selected_rows(&a), NAT_ROWS.to_vec());
        assert_eq!(a.nat_loads, vec![10, 50]);
        assert!(check_args(&a).is_ok());
        // Without --nat: issue 22's rows, the NAT loads at their default.
        let d = parse(&[]).expect("parsed");
        assert!(!selected_rows(&d).iter().any(|k| k.is_nat()));
        assert_eq!(d.nat_loads, vec![0, 10, 25, 50, 75, 100]);
        // Single NAT rows through --rows; no latency levels at all.
        let one = parse(&["--rows", "nat-offloaded", "--nat-loads"]).expect("parsed");
        assert_eq!(selected_rows(&one), vec![RowKind::NatOffloaded]);
        assert!(one.nat_loads.is_empty());
        // --nat is a row selection of its own.
        assert!(parse(&["--nat", "--rows", "generator"]).is_err());
        assert!(parse(&["--nat", "--only-ping"]).is_err());
        for bad in [
            &["--nat", "--nat-loads", "101"][..],
            &["--nat", "--frame-size", "600"],
            &["--nat", "--flows", "10001"],
            &["--nat", "--ping", "0"],
        ] {
            let a = parse(bad).expect("parsed");
            assert!(check_args(&a).is_err(), "{bad:?} accepted");
        }
        // The same limits do not bind issue 22's rows.
        let a = parse(&["--frame-size", "600", "--flows", "20000"]).expect("parsed");
        assert!(check_args(&a).is_ok());
    }

    #[test]
    fn gateway_group_is_selected_and_checked() {
        let a = parse(&["--gateway", "--flows", "37"]).expect("parsed");
        assert_eq!(selected_rows(&a), GATEWAY_ROWS.to_vec());
        assert!(check_args(&a).is_ok());
        let one = parse(&["--rows", "gw-ovs,gw-offloaded"]).expect("parsed");
        assert_eq!(
            selected_rows(&one),
            vec![RowKind::GwOvs, RowKind::GwOffloaded]
        );
        // A row selection of its own, not with the NAT group's.
        assert!(parse(&["--gateway", "--nat"]).is_err());
        assert!(parse(&["--gateway", "--rows", "generator"]).is_err());
        // The tagged frame must fit a sample (511 bytes); not so in
        // issue 22's rows.
        let a = parse(&["--gateway", "--frame-size", "516"]).expect("parsed");
        assert!(check_args(&a).is_err());
        let a = parse(&["--gateway", "--frame-size", "511"]).expect("parsed");
        assert!(check_args(&a).is_ok());
        let a = parse(&["--frame-size", "516"]).expect("parsed");
        assert!(check_args(&a).is_ok());
    }

    #[test]
    fn proc_stat_parses_this_machine() {
        let (sys, sirq, idle) = proc_stat().expect("/proc/stat");
        assert!(sys >= 0.0 && sirq >= 0.0 && idle > 0.0);
        assert!(process_cpu(std::process::id()).is_ok());
    }
}
