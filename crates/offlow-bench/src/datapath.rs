//! `offlow bench datapath`: the FlowShadow experiment — the whole switch
//! datapath on one core, driven by real frames, with the microflow cache on
//! and off, against dpdk-test-acl on the same rules and headers.
//!
//! # Workloads
//! - `acl`: a ClassBench rule set (default: the embedded WUSTL acl1) as
//!   table 0; permit rules output to port `1 + index % 8`, deny rules
//!   (every 4th, see [`workload::acl_verdict`]) drop. Flows: the distinct
//!   headers of the trace (default: the embedded acl1_trace).
//! - `fib`: a BGP table (default: ipasn_20140513, 512K prefixes, from the
//!   shared data) as table 0, outputs by origin AS. Flows: `--flows` random
//!   UDP flows towards routed destinations.
//! - `acl+fib`: table 0 the ACL (permit → goto table 1, deny → drop), table
//!   1 the FIB plus a default route (our addition: trace destinations the
//!   BGP table does not cover still leave somewhere; the coverage is
//!   reported). Flows: the trace headers.
//!
//! # Traffic and measurement
//! A seeded packet sequence over the flows (`--traffic zipf` with exponent
//! `--zipf`, default 1.0, or `uniform`); each flow is a real 64-byte frame
//! built once ([`workload::build_frame`]). The timed loop copies each
//! packet's frame into a reused receive buffer (standing in for the NIC's
//! DMA into a ring slot), then hands batches of `--batch` buffers to one
//! [`Worker`]: parse, microflow cache, pipeline on a miss, execute, count,
//! and hand each forwarded frame to the switch's own transmit sink
//! ([`PortSink`], what the packet threads use), which copies it into its
//! output port's transmit batch; after each batch the sink is flushed, as
//! the packet threads do. The ports are [`DiscardPort`]s: their send is a
//! real port's copy into its batch, their flush counts and forgets (no
//! system call).
//! The worker is warmed up with one pass over the sequence (steady state),
//! then timed for `--seconds`. Mpps per core and the cache hit rate of the
//! timed part are reported, for the cache on and off.
//!
//! # Anchor
//! `--vs-dpdk` runs dpdk-test-acl (every algorithm, best taken) on the ACL
//! rules and the headers of the packet sequence itself (`acl`, `acl+fib`),
//! or dpdk-test-fib on the BGP table and the flows' destinations (`fib`).
//! DPDK only classifies; it parses no frame and executes no action.
//!
//! # Verification
//! `--verify` re-runs the sequence through a worker in check mode (every
//! cached decision compared with an uncached pipeline lookup at the same
//! version) and checks the pipeline's first table against an independent
//! reference for every flow: ClassBench first match ([`workload::first_match_on_frame`])
//! or longest-prefix match ([`workload::fib_trie`]). Any disagreement fails
//! the command.
//!
//! Thread-safety: single-threaded measurement (the worker's `Control` lives
//! on the same thread and publishes once, before the worker starts).

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use offlow_datapath::{
    Control, CountingSink, PacketBuf, PortInfo, Worker, WorkerConfig, WorkerStats,
};
use offlow_flow::{extract, ParseStats};
use offlow_io::{DiscardPort, Port};
use offlow_pipeline::{FlowFilter, FlowMod, Instruction, Pipeline, RuleId};
use offlow_switch::port_sink::PortSink;
use serde_json::json;

use crate::classbench::{self, Header, RuleSet, Trace};
use crate::classify::{DEFAULT_RULES, DEFAULT_TRACE};
use crate::dpdk::{self, AclRun};
use crate::fib;
use crate::report::{fmt_f, print_json_line, Table};
use crate::workload::{self, Flows, Popularity};

/// Output ports the workloads spread traffic over.
pub const N_PORTS: u32 = 8;
/// The port every frame arrives on (not an output of any workload, so no
/// output is suppressed as "back out of the input port").
pub const IN_PORT: u32 = 100;
/// Default BGP table, relative to the shared data directory.
pub const DEFAULT_FIB: &str = "fib/ipasn_20140513.dat.gz";

/// Which tables to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WorkloadKind {
    /// ClassBench ACL as table 0.
    Acl,
    /// BGP FIB as table 0.
    Fib,
    /// ACL (table 0, permit → goto 1) then FIB (table 1).
    #[value(name = "acl+fib")]
    AclFib,
}

impl WorkloadKind {
    fn name(self) -> &'static str {
        match self {
            WorkloadKind::Acl => "acl",
            WorkloadKind::Fib => "fib",
            WorkloadKind::AclFib => "acl+fib",
        }
    }
    fn has_acl(self) -> bool {
        self != WorkloadKind::Fib
    }
    fn has_fib(self) -> bool {
        self != WorkloadKind::Acl
    }
}

/// Cache setting(s) to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CacheMode {
    /// Microflow cache on.
    On,
    /// Every packet through the pipeline.
    Off,
    /// Both, on first (the default).
    Both,
}

/// Arguments of `offlow bench datapath`.
#[derive(Debug, Clone, clap::Args)]
pub struct DatapathArgs {
    /// Which tables to build.
    #[arg(long, value_enum, default_value = "acl")]
    pub workload: WorkloadKind,
    /// ClassBench rule file (default: embedded WUSTL acl1).
    #[arg(long)]
    pub acl: Option<PathBuf>,
    /// ClassBench trace for the ACL workloads' flows (default: embedded
    /// acl1_trace; with `--acl` but no `--trace`, headers generated from
    /// the rules).
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// BGP table (default: shared data's ipasn_20140513, 512K prefixes).
    #[arg(long)]
    pub fib: Option<PathBuf>,
    /// Flow popularity: `zipf` or `uniform`.
    #[arg(long, default_value = "zipf")]
    pub traffic: String,
    /// Zipf exponent.
    #[arg(long, default_value_t = 1.0)]
    pub zipf: f64,
    /// Flows for the FIB workload, and at most this many trace flows.
    #[arg(long, default_value_t = 10_000)]
    pub flows: usize,
    /// Packets in the (repeated) sequence.
    #[arg(long, default_value_t = 1 << 20)]
    pub packets: usize,
    /// Frame size in bytes (without FCS).
    #[arg(long, default_value_t = 60)]
    pub frame_size: usize,
    /// Frames per worker batch.
    #[arg(long, default_value_t = 32)]
    pub batch: usize,
    /// Microflow cache entries.
    #[arg(long, default_value_t = 8192)]
    pub cache_size: usize,
    /// Cache on, off or both.
    #[arg(long, value_enum, default_value = "both")]
    pub cache: CacheMode,
    /// Timed seconds per configuration.
    #[arg(long, default_value_t = 1.0)]
    pub seconds: f64,
    /// Sequence seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Also run dpdk-test-acl / dpdk-test-fib on the same rules and headers.
    #[arg(long)]
    pub vs_dpdk: bool,
    /// Check every decision (cache vs pipeline, pipeline vs reference).
    #[arg(long)]
    pub verify: bool,
    /// End stdout with one JSON object.
    #[arg(long)]
    pub json: bool,
    /// dpdk-test-acl binary.
    #[arg(long, default_value = dpdk::DEFAULT_BIN)]
    pub dpdk_bin: PathBuf,
    /// dpdk-test-fib binary.
    #[arg(long, default_value = crate::dpdk_fib::DEFAULT_BIN)]
    pub dpdk_fib_bin: PathBuf,
}

/// One measured configuration.
#[derive(Debug, Clone, Copy)]
pub struct Measured {
    /// Packets per second, millions.
    pub mpps: f64,
    /// Timed packets.
    pub packets: u64,
    /// Cache hit rate over the timed packets (0 with the cache off).
    pub hit_rate: f64,
    /// The worker's counters over the timed part.
    pub stats: WorkerStats,
}

/// Everything the experiment found.
#[derive(Debug, Clone)]
pub struct DatapathReport {
    /// Workload name.
    pub workload: &'static str,
    /// Rules installed (all tables).
    pub rules: usize,
    /// Flows.
    pub flows: usize,
    /// Packet sequence length.
    pub packets: usize,
    /// Traffic description.
    pub traffic: String,
    /// Setup: flow-mods + compile, ms.
    pub setup_ms: f64,
    /// What serves each table.
    pub structures: Vec<(u8, &'static str)>,
    /// Cache on.
    pub cache_on: Option<Measured>,
    /// Cache off.
    pub cache_off: Option<Measured>,
    /// DPDK anchor: (tool and algorithm, Mpps).
    pub anchor: Option<(String, f64)>,
    /// Fraction of flows whose destination the BGP table covers.
    pub fib_coverage: Option<f64>,
    /// `--verify`: (decisions checked, mismatches).
    pub verified: Option<(u64, u64)>,
}

pub(crate) struct Inputs {
    pub(crate) acl: Option<RuleSet>,
    pub(crate) fib: Option<fib::Table>,
    pub(crate) flows: Flows,
}

pub(crate) fn load_inputs(args: &DatapathArgs) -> anyhow::Result<Inputs> {
    let acl = if args.workload.has_acl() {
        Some(match &args.acl {
            Some(p) => classbench::load_rules(p)?,
            None => classbench::parse_rules_bytes("acl1 (embedded)", DEFAULT_RULES)?,
        })
    } else {
        None
    };
    let fib = if args.workload.has_fib() {
        let path = match &args.fib {
            Some(p) => p.clone(),
            None => crate::shared_data_dir()
                .map(|d| d.join(DEFAULT_FIB))
                .context("no --fib given and no shared data directory (set OFFLOW_DATA_DIR)")?,
        };
        Some(fib::load_table(&path).with_context(|| path.display().to_string())?)
    } else {
        None
    };
    let flows = match (&acl, &fib) {
        (Some(set), _) => match (&args.trace, &args.acl) {
            (Some(t), _) => Flows::from_trace(&classbench::load_trace(t)?, args.flows),
            (None, None) => {
                let trace: Trace =
                    classbench::parse_trace_bytes("acl1_trace (embedded)", DEFAULT_TRACE)?;
                Flows::from_trace(&trace, args.flows)
            }
            (None, Some(_)) => {
                let mut seen = std::collections::HashSet::new();
                let mut headers = classbench::generate_headers(&set.rules, args.flows, args.seed);
                headers.retain(|h| seen.insert(*h));
                Flows { headers }
            }
        },
        (None, Some(t)) => Flows::from_fib(t, args.flows, args.seed),
        (None, None) => Flows::default(),
    };
    anyhow::ensure!(!flows.is_empty(), "the workload has no flows");
    Ok(Inputs { acl, fib, flows })
}

pub(crate) fn flow_mods(kind: WorkloadKind, inputs: &Inputs) -> Vec<FlowMod> {
    let mut mods = Vec::new();
    match kind {
        WorkloadKind::Acl => {
            if let Some(set) = &inputs.acl {
                mods.extend(workload::acl_flow_mods(set, 0, &[], N_PORTS));
            }
        }
        WorkloadKind::Fib => {
            if let Some(t) = &inputs.fib {
                mods.extend(workload::fib_flow_mods(t, 0, N_PORTS, false));
            }
        }
        WorkloadKind::AclFib => {
            if let Some(set) = &inputs.acl {
                mods.extend(workload::acl_flow_mods(
                    set,
                    0,
                    &[Instruction::GotoTable(1)],
                    N_PORTS,
                ));
            }
            if let Some(t) = &inputs.fib {
                mods.extend(workload::fib_flow_mods(t, 1, N_PORTS, true));
            }
        }
    }
    mods
}

/// Build the pipeline (flow-mods, then compile) and return it with its
/// rule count and the time it took.
pub(crate) fn build_pipeline(
    kind: WorkloadKind,
    inputs: &Inputs,
) -> anyhow::Result<(Control, usize, f64)> {
    let t0 = Instant::now();
    let n_tables = if kind == WorkloadKind::AclFib { 2 } else { 1 };
    let mut control = Control::new(Pipeline::new(n_tables));
    let mods = flow_mods(kind, inputs);
    for (i, fm) in mods.iter().enumerate() {
        control
            .flow_mod(fm, 0)
            .map_err(|e| anyhow::anyhow!("flow-mod {i}: {e}"))?;
    }
    let c0 = Instant::now();
    control.compile();
    control.commit();
    eprintln!(
        "tables compiled in {:.0} ms (both left-right copies): {:?}",
        c0.elapsed().as_secs_f64() * 1e3,
        control.pipeline().table_structures()
    );
    let rules = control.pipeline().len();
    Ok((control, rules, t0.elapsed().as_secs_f64() * 1e3))
}

/// Receive buffers, frames per flow and the packet sequence.
pub(crate) struct Traffic {
    pub(crate) frames: Vec<Vec<u8>>,
    pub(crate) sequence: Vec<u32>,
}

/// Copy the next `bufs.len()` packets of the sequence (from `pos`, wrapping)
/// into the receive buffers.
#[inline]
pub(crate) fn fill(bufs: &mut [PacketBuf], t: &Traffic, pos: &mut usize) {
    for buf in bufs.iter_mut() {
        let f = &t.frames[t.sequence[*pos] as usize];
        // Frames are built to fit the buffers (same max size).
        let _ = buf.load(f);
        *pos += 1;
        if *pos == t.sequence.len() {
            *pos = 0;
        }
    }
}

pub(crate) fn make_bufs(n: usize, frame_size: usize) -> Vec<PacketBuf> {
    (0..n)
        .map(|_| PacketBuf::new(offlow_datapath::DEFAULT_HEADROOM, frame_size.max(64) + 64))
        .collect()
}

fn diff(a: WorkerStats, b: WorkerStats) -> WorkerStats {
    WorkerStats {
        packets: a.packets - b.packets,
        cache_hits: a.cache_hits - b.cache_hits,
        stale_hits: a.stale_hits - b.stale_hits,
        pipeline_lookups: a.pipeline_lookups - b.pipeline_lookups,
        drop_table_miss: a.drop_table_miss - b.drop_table_miss,
        drop_no_output: a.drop_no_output - b.drop_no_output,
        drop_ttl: a.drop_ttl - b.drop_ttl,
        outputs: a.outputs - b.outputs,
        ..a
    }
}

/// The switch's transmit sink over the workload's output ports
/// ([`DiscardPort`]s one batch deep), frames arriving on [`IN_PORT`].
pub(crate) fn port_sink(batch: usize, frame_size: usize) -> PortSink {
    let infos: Vec<PortInfo> = (1..=N_PORTS)
        .map(|port| PortInfo {
            port,
            no_fwd: false,
            no_flood: false,
        })
        .collect();
    let ports = infos
        .iter()
        .map(|p| {
            Box::new(DiscardPort::new(
                &format!("p{}", p.port),
                batch,
                frame_size.max(64),
            )) as Box<dyn Port>
        })
        .collect();
    let mut sink = PortSink::new(infos, ports, None);
    sink.set_in_port(IN_PORT);
    sink
}

/// What the packet threads do after each batch: flush the ports with
/// frames queued (a [`DiscardPort`] counts them and forgets them).
#[inline]
pub(crate) fn transmit(sink: &mut PortSink) {
    // A DiscardPort's flush cannot fail.
    let _ = sink.flush();
}

/// Warm up with one pass over the sequence, then time `seconds`.
fn measure(worker: &mut Worker, t: &Traffic, args: &DatapathArgs) -> Measured {
    let batch = args.batch.clamp(1, 256);
    let mut bufs = make_bufs(batch, args.frame_size);
    let mut tx = port_sink(batch, args.frame_size);
    let mut pos = 0usize;
    let warm = t.sequence.len().div_ceil(batch);
    for _ in 0..warm {
        fill(&mut bufs, t, &mut pos);
        worker.process(&mut bufs, IN_PORT, &mut tx);
        transmit(&mut tx);
    }
    let before = worker.stats();
    let t0 = Instant::now();
    let mut elapsed;
    loop {
        // Check the clock every 64 batches, not every batch.
        for _ in 0..64 {
            fill(&mut bufs, t, &mut pos);
            worker.process(&mut bufs, IN_PORT, &mut tx);
            transmit(&mut tx);
        }
        elapsed = t0.elapsed().as_secs_f64();
        if elapsed >= args.seconds {
            break;
        }
    }
    let stats = diff(worker.stats(), before);
    Measured {
        mpps: stats.packets as f64 / elapsed / 1e6,
        packets: stats.packets,
        hit_rate: stats.cache_hits as f64 / stats.packets.max(1) as f64,
        stats,
    }
}

/// Check mode pass plus the reference check of table 0's decisions.
fn verify(
    control: &Control,
    t: &Traffic,
    inputs: &Inputs,
    kind: WorkloadKind,
    args: &DatapathArgs,
) -> anyhow::Result<(u64, u64)> {
    let mut worker = control.worker(WorkerConfig {
        cache_capacity: args.cache_size,
        check: true,
        ..WorkerConfig::default()
    });
    let batch = args.batch.clamp(1, 256);
    let mut bufs = make_bufs(batch, args.frame_size);
    let mut sink = CountingSink::default();
    let mut pos = 0usize;
    let all = FlowFilter::all();
    let counted = |p: &Pipeline| -> HashMap<RuleId, (u64, u64)> {
        p.dump(&all)
            .into_iter()
            .map(|s| (s.id, (s.packets, s.bytes)))
            .collect()
    };
    let before = counted(control.pipeline());
    let n_batches = t.sequence.len().div_ceil(batch);
    for _ in 0..n_batches {
        fill(&mut bufs, t, &mut pos);
        worker.process(&mut bufs, IN_PORT, &mut sink);
    }
    worker.flush_counters();
    let s = worker.stats();
    let mut checked = s.cache_hits;
    let mut bad = s.stale;

    // Rule counters: exactly what an uncached pipeline would have credited
    // for the packets just processed (the measurement workers are gone and
    // flushed their counts when dropped).
    let after = counted(control.pipeline());
    let mut occurrences = vec![0u64; t.frames.len()];
    for k in 0..n_batches * batch {
        occurrences[t.sequence[k % t.sequence.len()] as usize] += 1;
    }
    let mut want: HashMap<RuleId, (u64, u64)> = HashMap::new();
    let mut ps = ParseStats::default();
    for (flow, frame) in t.frames.iter().enumerate() {
        let key = extract(frame, IN_PORT, &mut ps).key;
        for step in control.pipeline().lookup(&key).path {
            let w = want.entry(step.rule).or_default();
            w.0 += occurrences[flow];
            w.1 += occurrences[flow] * frame.len() as u64;
        }
    }
    for (id, &(p1, b1)) in &after {
        let (p0, b0) = before.get(id).copied().unwrap_or_default();
        let got = (p1 - p0, b1 - b0);
        let expect = want.get(id).copied().unwrap_or_default();
        checked += 1;
        if got != expect {
            if bad < 10 {
                eprintln!("verify: rule {id} counted {got:?}, expected {expect:?}");
            }
            bad += 1;
        }
    }

    // Table 0 against an independent reference, per flow.
    let pipeline = control.pipeline();
    let mut ps = ParseStats::default();
    let trie = inputs.fib.as_ref().map(workload::fib_trie);
    for (flow, frame) in t.frames.iter().enumerate() {
        let h = &inputs.flows.headers[flow];
        let key = extract(frame, IN_PORT, &mut ps).key;
        let res = pipeline.lookup(&key);
        let ok = match kind {
            WorkloadKind::Acl | WorkloadKind::AclFib => {
                let set = inputs.acl.as_ref().context("acl rules")?;
                // Cookie = ClassBench rule index (see workload::acl_flow_mods).
                let got: Option<RuleId> = res
                    .path
                    .first()
                    .filter(|s| s.table_id == 0)
                    .and_then(|s| pipeline.entry(s.rule))
                    .and_then(|e| RuleId::try_from(e.cookie).ok());
                got == workload::first_match_on_frame(set, h)
            }
            WorkloadKind::Fib => {
                let want = trie
                    .as_ref()
                    .and_then(|tr| tr.lookup(h.dst))
                    .map(|nh| workload::fib_port(nh, N_PORTS));
                let got = res.actions.iter().find_map(|a| match a {
                    offlow_pipeline::Action::Output { port, .. } => Some(*port),
                    _ => None,
                });
                got == want
            }
        };
        checked += 1;
        if !ok {
            if bad < 10 {
                eprintln!("verify: flow {flow} {h:?}: pipeline path {:?}", res.path);
            }
            bad += 1;
        }
    }
    Ok((checked, bad))
}

fn tsc_hz() -> f64 {
    let c0 = crate::fib::tsc();
    let t0 = Instant::now();
    while t0.elapsed().as_millis() < 50 {
        std::hint::spin_loop();
    }
    let c1 = crate::fib::tsc();
    c1.wrapping_sub(c0) as f64 / t0.elapsed().as_secs_f64()
}

fn anchor(
    args: &DatapathArgs,
    inputs: &Inputs,
    t: &Traffic,
) -> anyhow::Result<Option<(String, f64)>> {
    if !args.vs_dpdk {
        return Ok(None);
    }
    if let Some(set) = &inputs.acl {
        // The sequence's own headers, capped so the trace file stays small.
        let headers: Vec<Header> = t
            .sequence
            .iter()
            .take(1 << 18)
            .map(|&i| inputs.flows.headers[i as usize])
            .collect();
        let files = dpdk::AclInputs::write(&set.rules, &headers)?;
        let runs: Vec<AclRun> = dpdk::timed_runs(&files, &args.dpdk_bin, None, headers.len())?;
        return Ok(runs
            .iter()
            .max_by(|a, b| a.mpps.total_cmp(&b.mpps))
            .map(|r| (format!("dpdk-test-acl {}", r.alg), r.mpps)));
    }
    if let Some(table) = &inputs.fib {
        let n = (t.sequence.len() / crate::dpdk_fib::BURST).max(1) * crate::dpdk_fib::BURST;
        let addrs: Vec<u32> = t
            .sequence
            .iter()
            .cycle()
            .take(n)
            .map(|&i| inputs.flows.headers[i as usize].dst)
            .collect();
        let dir = std::env::temp_dir().join(format!("offlow-bench-dp-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let (rp, ap) = (dir.join("routes.txt"), dir.join("addrs.txt"));
        let res = crate::dpdk_fib::write_routes(&rp, &table.routes)
            .and_then(|()| crate::dpdk_fib::write_addrs(&ap, &addrs))
            .map_err(anyhow::Error::from)
            .and_then(|()| {
                crate::dpdk_fib::run(&args.dpdk_fib_bin, &rp, &ap, table.routes.len(), n, 1 << 16)
            });
        let _ = std::fs::remove_dir_all(&dir);
        let r = res?;
        let mpps = tsc_hz() / r.cycles_per_lookup.max(1e-9) / 1e6;
        return Ok(Some(("dpdk-test-fib".into(), mpps)));
    }
    Ok(None)
}

/// Run the experiment (progress on stderr).
pub fn run(args: &DatapathArgs) -> anyhow::Result<DatapathReport> {
    let pop: Popularity = match args.traffic.as_str() {
        "zipf" => Popularity::Zipf(args.zipf),
        other => other.parse()?,
    };
    let inputs = load_inputs(args)?;
    let (control, rules, setup_ms) = build_pipeline(args.workload, &inputs)?;
    eprintln!(
        "{}: {rules} rules installed in {setup_ms:.0} ms; {} flows; tables {:?}",
        args.workload.name(),
        inputs.flows.len(),
        control.pipeline().table_structures()
    );
    let traffic = Traffic {
        frames: inputs.flows.frames(args.frame_size),
        sequence: workload::packet_sequence(
            inputs.flows.len(),
            args.packets.max(1),
            pop,
            args.seed,
        ),
    };
    let fib_coverage = match (&inputs.fib, args.workload) {
        (Some(t), WorkloadKind::AclFib) => Some(workload::fib_coverage(t, &inputs.flows.headers)),
        _ => None,
    };
    let pinned = crate::classify::pin_to_cpu(1);
    let run_one = |cache: bool| {
        let mut w = control.worker(WorkerConfig {
            cache,
            cache_capacity: args.cache_size,
            ..WorkerConfig::default()
        });
        let m = measure(&mut w, &traffic, args);
        eprintln!(
            "cache {:<3}: {:>7.2} Mpps, hit rate {:.4}{}",
            if cache { "on" } else { "off" },
            m.mpps,
            m.hit_rate,
            if pinned { " (pinned to CPU 1)" } else { "" }
        );
        m
    };
    let cache_on = (args.cache != CacheMode::Off).then(|| run_one(true));
    let cache_off = (args.cache != CacheMode::On).then(|| run_one(false));
    let anchor = anchor(args, &inputs, &traffic)?;
    if let Some((name, mpps)) = &anchor {
        eprintln!("{name}: {mpps:.2} Mpps");
    }
    let verified = if args.verify {
        Some(verify(&control, &traffic, &inputs, args.workload, args)?)
    } else {
        None
    };
    Ok(DatapathReport {
        workload: args.workload.name(),
        rules,
        flows: inputs.flows.len(),
        packets: traffic.sequence.len(),
        traffic: pop.to_string(),
        setup_ms,
        structures: control.pipeline().table_structures(),
        cache_on,
        cache_off,
        anchor,
        fib_coverage,
        verified,
    })
}

/// `offlow bench datapath`.
pub fn main(args: &DatapathArgs) -> anyhow::Result<()> {
    let r = run(args)?;
    let mut t = Table::new(["configuration", "Mpps/core", "hit rate", "vs anchor"]);
    let anchor_mpps = r.anchor.as_ref().map(|a| a.1);
    let ratio = |m: f64| {
        anchor_mpps
            .map(|a| fmt_f(m / a, 2) + "×")
            .unwrap_or_default()
    };
    for (name, m) in [
        ("offlow, cache on", r.cache_on),
        ("offlow, cache off", r.cache_off),
    ] {
        if let Some(m) = m {
            t.row([
                name.to_string(),
                fmt_f(m.mpps, 2),
                fmt_f(m.hit_rate, 4),
                ratio(m.mpps),
            ]);
        }
    }
    if let Some((name, mpps)) = &r.anchor {
        t.row([name.clone(), fmt_f(*mpps, 2), String::new(), String::new()]);
    }
    println!(
        "workload {} — {} rules ({:?}), {} flows, {} traffic, {} packets in the sequence",
        r.workload, r.rules, r.structures, r.flows, r.traffic, r.packets
    );
    print!("{}", t.render());
    if let Some(c) = r.fib_coverage {
        println!("flows whose destination the BGP table covers: {:.1}% (the rest take the default route)", c * 100.0);
    }
    if let Some(m) = r.cache_on {
        let s = m.stats;
        println!(
            "cache on, timed part: {} packets, {} hits, {} pipeline lookups ({} after invalidation), drops: table-miss {}, no-output {}, ttl {}",
            s.packets, s.cache_hits, s.pipeline_lookups, s.stale_hits, s.drop_table_miss, s.drop_no_output, s.drop_ttl
        );
    }
    let mut failed = false;
    if let Some((checked, bad)) = r.verified {
        println!("verify: {checked} decisions checked, {bad} mismatches");
        failed = bad != 0;
    }
    if args.json {
        let best = r.cache_on.or(r.cache_off).map(|m| m.mpps).unwrap_or(0.0);
        print_json_line(&json!({
            "experiment": format!("datapath:{}", r.workload),
            "offlow_mpps": best,
            "offlow_mpps_cache_off": r.cache_off.map(|m| m.mpps),
            "anchor": r.anchor.as_ref().map(|a| a.0.clone()),
            "anchor_mpps": anchor_mpps,
            "ratio": anchor_mpps.map(|a| best / a),
            "hit_rate": r.cache_on.map(|m| m.hit_rate),
            "rules": r.rules,
            "flows": r.flows,
            "traffic": r.traffic,
            "packets": r.packets,
            "frame_size": args.frame_size,
            "batch": args.batch,
            "cache_size": args.cache_size,
            "setup_ms": r.setup_ms,
            "fib_coverage": r.fib_coverage,
            "verify_mismatches": r.verified.map(|v| v.1),
            "cores": 1,
        }));
    }
    anyhow::ensure!(!failed, "verification failed");
    Ok(())
}
