//! `offlow bench classify`: uncached classification rate on ClassBench rules,
//! against dpdk-test-acl on the identical rules and headers.
//!
//! What: loads a rule set and a header trace (default: the embedded WUSTL
//! `acl1` and `acl1_trace` from `data/classbench`; with `--rules` but no
//! `--trace`, headers are generated from the rules, seeded), builds the
//! chosen classifier (insert time `build_ms`; for `auto`, the adaptive
//! [`offlow_classifier::Classifier`], then `compile()` timed separately as
//! `compile_ms`, reporting what serves lookups: RFC snapshot, DIR-24-8 FIB or
//! TupleMerge), then looks the trace up in batches of `--batch` keys, over and
//! over, for `--iters` full passes or at least `--min-secs` seconds, and
//! reports Mpps and ns per lookup. Options:
//! `--verify` checks every header against the linear oracle, against the
//! trace's own first-match ids (WUSTL traces) and, with `--vs-dpdk`, against
//! every DPDK algorithm's answers; any mismatch makes the command fail.
//! `--updates` measures the update rate with a concurrent reader (see
//! [`measure_updates`]): the classifier is wrapped in
//! [`offlow_sync::Versioned`]; a reader thread on CPU 1 looks the trace
//! up in read sections of one batch each while the writer, on CPU 0, first
//! idles (idle lookup rate) and then removes and re-inserts rules in a seeded
//! random order, publishing every `--publish-every` operations (updates/s and
//! lookup rate during updates). With `--verify` the classifier is checked
//! against the oracle again afterwards.
//! `--vs-dpdk` runs dpdk-test-acl per algorithm and reports the best.
//! `--json` ends stdout with one JSON object.
//!
//! Invariants: the rules, headers and priorities given to DPDK are exactly
//! ours (see [`crate::dpdk`]); the timed loops do no allocation.
//!
//! Thread-safety: the lookup measurement is single-threaded (`cores: 1` in
//! the JSON). `--updates` runs two scoped threads (a writer and a reader,
//! `update_cores: 2`) that share the classifier only through the left-right
//! `Versioned` wrapper and two atomics (a stop flag and the reader's lookup
//! counter); both threads are joined before the measurement returns.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use offlow_classifier::{
    Classifier, ClassifierOp, Classify, Compiled, FlowKey, LinearClassifier, Rule, RuleId,
    TupleMerge,
};
use offlow_sync::{Apply, CachePadded, Versioned};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde_json::json;

use crate::classbench::{self, Dialect, RuleSet, Trace};
use crate::dpdk::{self, AclRun};
use crate::report::{fmt_f, print_json_line, Table};

/// The embedded default rule set (WUSTL acl1, 752 rules).
pub const DEFAULT_RULES: &[u8] = include_bytes!("../../../data/classbench/acl1");
/// The embedded default trace (WUSTL acl1_trace, 8,140 headers).
pub const DEFAULT_TRACE: &[u8] = include_bytes!("../../../data/classbench/acl1_trace");

/// Which classifier implementation to benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ClassifierKind {
    /// `offlow_classifier::Classifier`, what an OpenFlow table holds:
    /// TupleMerge plus, after `compile()`, an RFC snapshot or the DIR-24-8
    /// FIB when the rule set allows.
    Auto,
    /// `offlow_classifier::LinearClassifier`, the oracle (a scan of every rule).
    Linear,
    /// `offlow_classifier::tuple` (TupleMerge), the incremental classifier.
    Tuple,
}

impl ClassifierKind {
    /// The default `--classifier`: what a flow table uses.
    pub const DEFAULT: ClassifierKind = ClassifierKind::Auto;

    /// Name as used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            ClassifierKind::Auto => "auto",
            ClassifierKind::Linear => "linear",
            ClassifierKind::Tuple => "tuple",
        }
    }
}

/// A classifier of any benchmarked kind, concretely typed so the adaptive
/// one can be compiled and asked what serves its lookups. Dispatch is one
/// `match` per call (per batch in the timed loops).
#[derive(Debug, Clone)]
pub enum AnyClassifier {
    /// The adaptive table classifier.
    Auto(Classifier),
    /// The linear oracle.
    Linear(LinearClassifier),
    /// TupleMerge.
    Tuple(TupleMerge),
}

/// Run `$body` with `$c` bound to the inner classifier, whatever its kind.
macro_rules! each {
    ($self:expr, $c:ident => $body:expr) => {
        match $self {
            AnyClassifier::Auto($c) => $body,
            AnyClassifier::Linear($c) => $body,
            AnyClassifier::Tuple($c) => $body,
        }
    };
}

impl AnyClassifier {
    /// An empty classifier of `kind`.
    pub fn new(kind: ClassifierKind) -> AnyClassifier {
        match kind {
            ClassifierKind::Auto => AnyClassifier::Auto(Classifier::new()),
            ClassifierKind::Linear => AnyClassifier::Linear(LinearClassifier::new()),
            ClassifierKind::Tuple => AnyClassifier::Tuple(TupleMerge::new()),
        }
    }

    /// The kind this is.
    pub fn kind(&self) -> ClassifierKind {
        match self {
            AnyClassifier::Auto(_) => ClassifierKind::Auto,
            AnyClassifier::Linear(_) => ClassifierKind::Linear,
            AnyClassifier::Tuple(_) => ClassifierKind::Tuple,
        }
    }

    /// The structure serving lookups now: `"rfc"`, `"fib"` or `"tuple"` for
    /// `auto` (see [`Classifier::serving`]), else the kind's name.
    pub fn serving(&self) -> &'static str {
        match self {
            AnyClassifier::Auto(c) => c.serving(),
            other => other.kind().name(),
        }
    }

    /// Compile (only `auto` has anything to compile; `None` for the others).
    pub fn compile(&mut self) -> Option<Compiled> {
        match self {
            AnyClassifier::Auto(c) => Some(c.compile()),
            _ => None,
        }
    }
}

// Not a blanket impl in offlow-classifier: `Apply` is offlow-sync's trait
// (the orphan rule); see `offlow_classifier::ClassifierOp`.
impl Apply<ClassifierOp> for AnyClassifier {
    fn apply(&mut self, op: &ClassifierOp) {
        op.apply_to(self);
    }

    fn apply_owned(&mut self, op: ClassifierOp) {
        op.apply_owned_to(self);
    }
}

impl Classify for AnyClassifier {
    fn insert(&mut self, rule: Rule) {
        each!(self, c => c.insert(rule))
    }
    fn remove(&mut self, id: RuleId) -> Option<Rule> {
        each!(self, c => c.remove(id))
    }
    fn discard(&mut self, id: RuleId) -> bool {
        each!(self, c => c.discard(id))
    }
    #[inline]
    fn lookup(&self, key: &FlowKey) -> Option<RuleId> {
        each!(self, c => c.lookup(key))
    }
    #[inline]
    fn lookup_batch(&self, keys: &[FlowKey], out: &mut [Option<RuleId>]) {
        each!(self, c => c.lookup_batch(keys, out))
    }
    fn len(&self) -> usize {
        each!(self, c => c.len())
    }
    fn get(&self, id: RuleId) -> Option<Rule> {
        each!(self, c => c.get(id))
    }
}

/// A built classifier and what building it took.
#[derive(Debug, Clone)]
pub struct Built {
    /// The classifier, holding every rule (compiled for `auto`).
    pub classifier: AnyClassifier,
    /// Inserting every rule, milliseconds.
    pub build_ms: f64,
    /// `compile()`, milliseconds (`auto` only).
    pub compile_ms: Option<f64>,
    /// What `compile()` ended up with (`auto` only).
    pub compiled: Option<Compiled>,
}

/// Build a classifier of `kind` holding `rules`, timing the inserts and,
/// for `auto`, the compile separately.
pub fn build_classifier(kind: ClassifierKind, rules: &[Rule]) -> Built {
    let t = Instant::now();
    let mut c = AnyClassifier::new(kind);
    for r in rules {
        c.insert(r.clone());
    }
    let build_ms = t.elapsed().as_secs_f64() * 1e3;
    let t = Instant::now();
    let compiled = c.compile();
    let compile_ms = compiled.as_ref().map(|_| t.elapsed().as_secs_f64() * 1e3);
    Built {
        classifier: c,
        build_ms,
        compile_ms,
        compiled,
    }
}

/// One line describing a compile result (`rfc, 1234567 table bytes`, ...).
pub fn describe_compiled(c: &Compiled) -> String {
    match c {
        Compiled::Fib => "fib (DIR-24-8)".to_string(),
        Compiled::Rfc {
            table_bytes,
            parts,
            candidate_bytes,
        } => {
            format!(
                "rfc, {parts} part(s), {table_bytes} table bytes, {candidate_bytes} candidate-list bytes"
            )
        }
        Compiled::None { reason } => format!("not compiled: {reason}"),
    }
}

fn compiled_json(c: &Compiled) -> serde_json::Value {
    match c {
        Compiled::Fib => json!({"result": "fib"}),
        Compiled::Rfc {
            table_bytes,
            parts,
            candidate_bytes,
        } => {
            json!({"result": "rfc", "table_bytes": table_bytes, "parts": parts,
                   "candidate_bytes": candidate_bytes})
        }
        Compiled::None { reason } => json!({"result": "none", "reason": reason}),
    }
}

/// Arguments of `offlow bench classify`.
#[derive(Debug, Clone, clap::Args)]
pub struct ClassifyArgs {
    /// ClassBench rule file (WUSTL 5-field or lyxocs 7-field format; .gz ok).
    /// Default: the embedded WUSTL acl1 (752 rules) and its trace.
    #[arg(long)]
    pub rules: Option<PathBuf>,
    /// Header trace (WUSTL or lyxocs format; .gz ok). Without it (and with
    /// `--rules`), headers are generated from the rules.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Headers to generate when there is no trace (0: 10 per rule, at least
    /// 10,000).
    #[arg(long, default_value_t = 0)]
    pub headers: usize,
    /// Seed for header generation and the update order.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Also run dpdk-test-acl on the same rules and headers.
    #[arg(long)]
    pub vs_dpdk: bool,
    /// Check every answer against the oracle (and the trace, and DPDK);
    /// fail on any mismatch.
    #[arg(long)]
    pub verify: bool,
    /// End stdout with one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Time exactly N full passes over the trace (default: at least
    /// `--min-secs` seconds).
    #[arg(long)]
    pub iters: Option<u64>,
    /// Minimum timed duration when `--iters` is not given.
    #[arg(long, default_value_t = 1.0)]
    pub min_secs: f64,
    /// Classifier implementation.
    #[arg(long, value_enum, default_value_t = ClassifierKind::DEFAULT)]
    pub classifier: ClassifierKind,
    /// Keys per `lookup_batch` call.
    #[arg(long, default_value_t = 32)]
    pub batch: usize,
    /// Also measure updates (remove + re-insert, seeded random order) with
    /// a concurrent reader: updates/s and the reader's rate idle vs during
    /// updates.
    #[arg(long)]
    pub updates: bool,
    /// Duration of each phase of `--updates` (idle phases and the update
    /// phases), seconds. Short alternating phases (with `--update-rounds`)
    /// cancel the slow drifts of a shared host better than long ones.
    #[arg(long, default_value_t = 0.5)]
    pub update_secs: f64,
    /// `--updates`: rounds of (idle phase, update phase); the median round
    /// by lookup ratio is reported, with every round's ratio.
    #[arg(long, default_value_t = 7)]
    pub update_rounds: usize,
    /// `--updates`: publish a new version every N operations (a remove and
    /// an insert are one operation each). Each publish hands the reader a
    /// copy whose lines the writer just dirtied; 4096 ops (~2.5 ms at
    /// 1.7M updates/s) keeps that under a few percent of lookup time, while
    /// 256 costs 5-10% (BENCHMARKS.md). A barrier publishes at once anyway.
    #[arg(long, default_value_t = 4096)]
    pub publish_every: usize,
    /// `--updates`: cap the writer at N operations per second (0: as fast as
    /// possible).
    #[arg(long, default_value_t = 0)]
    pub update_rate: u64,
    /// `--updates`: add two control phases (before the updates) in which
    /// the writer does not touch the classifier: one busy-spinning on
    /// registers (CPU sharing, e.g. SMT siblings under a VM), one streaming
    /// writes through 64 MiB (shared cache and memory bandwidth). They tell
    /// the machine's interference from the update path's.
    #[arg(long)]
    pub spin_control: bool,
    /// The dpdk-test-acl binary.
    #[arg(long, default_value = dpdk::DEFAULT_BIN)]
    pub dpdk_bin: PathBuf,
    /// dpdk-test-acl `--iter` (default: enough for about one second).
    #[arg(long)]
    pub dpdk_iters: Option<u64>,
}

/// Verification outcome.
#[derive(Debug, Clone, Default)]
pub struct VerifyReport {
    /// Headers checked.
    pub checked: usize,
    /// Classifier answers differing from the oracle.
    pub oracle_mismatches: usize,
    /// Oracle answers differing from the trace's first-match ids (WUSTL).
    pub trace_mismatches: Option<usize>,
    /// lyxocs: headers whose generating rule is also their first match.
    pub generating_agree: Option<usize>,
    /// Per DPDK algorithm: answers differing from the oracle.
    pub dpdk_mismatches: Vec<(String, usize)>,
    /// Classifier answers differing from the oracle after `--updates`.
    pub after_update_mismatches: Option<usize>,
    /// The first few mismatches, described.
    pub examples: Vec<String>,
}

impl VerifyReport {
    /// True when nothing disagreed.
    pub fn ok(&self) -> bool {
        self.oracle_mismatches == 0
            && self.trace_mismatches.unwrap_or(0) == 0
            && self.dpdk_mismatches.iter().all(|(_, n)| *n == 0)
            && self.after_update_mismatches.unwrap_or(0) == 0
    }

    fn note(&mut self, s: String) {
        if self.examples.len() < 8 {
            self.examples.push(s);
        }
    }
}

/// Everything one run measured.
#[derive(Debug, Clone)]
pub struct ClassifyReport {
    /// Rule file name (or `embedded:acl1`).
    pub rules_file: String,
    /// Trace file name, `embedded:acl1_trace`, or `generated(seed=S)`.
    pub trace_file: String,
    /// Dialect of the rule file.
    pub dialect: Dialect,
    /// Classifier used.
    pub classifier: ClassifierKind,
    /// Number of rules.
    pub rules: usize,
    /// Number of distinct headers in the trace.
    pub headers: usize,
    /// Batch size.
    pub batch: usize,
    /// Classifier build time (inserting every rule), milliseconds.
    pub build_ms: f64,
    /// `compile()` time, milliseconds (`auto` only).
    pub compile_ms: Option<f64>,
    /// What `compile()` ended up with (`auto` only).
    pub compiled: Option<Compiled>,
    /// The structure that served the timed lookups (`rfc`, `fib`, `tuple`,
    /// `linear`).
    pub serving: &'static str,
    /// Lookups performed in the timed loop.
    pub lookups: u64,
    /// Duration of the timed loop, seconds.
    pub secs: f64,
    /// Lookups per second, millions.
    pub mpps: f64,
    /// Nanoseconds per lookup.
    pub ns_per_lookup: f64,
    /// The concurrent update measurement, with `--updates`.
    pub updates: Option<UpdateReport>,
    /// Verification, when requested.
    pub verify: Option<VerifyReport>,
    /// dpdk-test-acl runs, one per algorithm, when requested.
    pub dpdk: Vec<AclRun>,
}

impl ClassifyReport {
    /// The fastest DPDK algorithm, if DPDK ran.
    pub fn dpdk_best(&self) -> Option<&AclRun> {
        self.dpdk.iter().max_by(|a, b| a.mpps.total_cmp(&b.mpps))
    }

    /// The JSON object printed by `--json`.
    pub fn to_json(&self) -> serde_json::Value {
        let best = self.dpdk_best();
        let u = self.updates.as_ref();
        let algs: serde_json::Map<String, serde_json::Value> = self
            .dpdk
            .iter()
            .map(|r| (r.alg.clone(), json!(r.mpps)))
            .collect();
        json!({
            "experiment": "classify",
            "classifier": self.classifier.name(),
            "rules_file": self.rules_file,
            "trace_file": self.trace_file,
            "rules": self.rules,
            "headers": self.headers,
            "batch": self.batch,
            "lookups": self.lookups,
            "cores": 1,
            "build_ms": self.build_ms,
            "compile_ms": self.compile_ms,
            "compiled": self.compiled.as_ref().map(compiled_json),
            "serving": self.serving,
            "offlow_mpps": self.mpps,
            "ns_per_lookup": self.ns_per_lookup,
            "update_cores": u.map(|_| 2),
            "updates": u.map(|u| u.updates),
            "update_secs": u.map(|u| u.secs),
            "updates_per_s": u.map(|u| u.updates_per_s),
            "update_rate_target": u.map(|u| u.target_rate),
            "publish_every": u.map(|u| u.publish_every),
            "publishes": u.map(|u| u.publishes),
            "lookup_mpps_idle": u.map(|u| u.lookup_mpps_idle),
            "lookup_mpps_updating": u.map(|u| u.lookup_mpps_updating),
            "lookup_ratio": u.map(|u| u.lookup_ratio),
            "lookup_ratio_basis": u.map(|u| format!(
                "reader Mlookups/s during updates ({}) / idle ({})",
                u.serving_updating, u.serving_idle
            )),
            "lookup_mpps_idle_compiled": u.and_then(|u| u.lookup_mpps_idle_compiled),
            "lookup_mpps_idle_after": u.map(|u| u.lookup_mpps_idle_after),
            "lookup_ratio_rounds": u.map(|u| u.round_ratios.clone()),
            "lookup_mpps_writer_streaming": u.and_then(|u| u.lookup_mpps_writer_streaming),
            "lookup_mpps_writer_spinning": u.and_then(|u| u.lookup_mpps_writer_spinning),
            "serving_idle_compiled": u.and_then(|u| u.serving_idle_compiled),
            "serving_idle": u.map(|u| u.serving_idle),
            "serving_updating": u.map(|u| u.serving_updating),
            "threads_pinned": u.map(|u| u.writer_pinned && u.reader_pinned),
            "core_round_trip_ns": u.map(|u| u.core_round_trip_ns),
            "anchor": best.map(|_| "dpdk-test-acl"),
            "anchor_mpps": best.map(|b| b.mpps),
            "anchor_alg": best.map(|b| b.alg.clone()),
            "anchor_algs": if self.dpdk.is_empty() { serde_json::Value::Null } else { algs.into() },
            "ratio": best.map(|b| self.mpps / b.mpps),
            "verified": self.verify.as_ref().map(VerifyReport::ok),
        })
    }
}

/// Load the rules and the trace the arguments name (or the embedded ones,
/// or generated headers). Returns (rules, trace, rules name, trace name).
pub fn load_inputs(args: &ClassifyArgs) -> anyhow::Result<(RuleSet, Trace, String, String)> {
    let (set, rules_name) = match &args.rules {
        Some(p) => (classbench::load_rules(p)?, p.display().to_string()),
        None => {
            let name = "embedded:acl1";
            (
                classbench::parse_rules_bytes(name, DEFAULT_RULES)?,
                name.to_string(),
            )
        }
    };
    let (trace, trace_name) = match (&args.trace, &args.rules) {
        (Some(p), _) => (classbench::load_trace(p)?, p.display().to_string()),
        (None, None) => {
            let name = "embedded:acl1_trace";
            (
                classbench::parse_trace_bytes(name, DEFAULT_TRACE)?,
                name.to_string(),
            )
        }
        (None, Some(_)) => {
            let n = if args.headers > 0 {
                args.headers
            } else {
                (set.rules.len() * 10).max(10_000)
            };
            let headers = classbench::generate_headers(&set.rules, n, args.seed);
            (
                Trace {
                    dialect: set.dialect,
                    headers,
                    expected: None,
                    generating: None,
                },
                format!("generated({n} headers, seed={})", args.seed),
            )
        }
    };
    if let Some(g) = &trace.generating {
        if let Some(bad) = g.iter().position(|&i| i as usize >= set.rules.len()) {
            anyhow::bail!(
                "{trace_name}: header {} was generated from rule {}, but the set has {} rules (wrong rule file?)",
                bad + 1,
                g[bad],
                set.rules.len()
            );
        }
    }
    Ok((set, trace, rules_name, trace_name))
}

/// Look `keys` up in batches until `iters` full passes are done or, without
/// `iters`, at least `min_secs` have passed. Returns (lookups, seconds).
pub fn timed_lookups(
    c: &dyn Classify,
    keys: &[FlowKey],
    batch: usize,
    iters: Option<u64>,
    min_secs: f64,
) -> (u64, f64) {
    let batch = batch.max(1);
    let mut out = vec![None; batch];
    if keys.is_empty() {
        return (0, 0.0);
    }
    // Warm caches and branch predictors on a slice of the trace first.
    for chunk in keys[..keys.len().min(4096)].chunks(batch) {
        c.lookup_batch(chunk, &mut out[..chunk.len()]);
    }
    let mut lookups = 0u64;
    let mut passes = 0u64;
    let mut pos = 0usize;
    let mut since_check = 0u32;
    let start = Instant::now();
    loop {
        let end = (pos + batch).min(keys.len());
        let n = end - pos;
        c.lookup_batch(black_box(&keys[pos..end]), &mut out[..n]);
        black_box(&out);
        lookups += n as u64;
        pos = end;
        if pos == keys.len() {
            pos = 0;
            passes += 1;
            if iters.is_some_and(|want| passes >= want) {
                break;
            }
        }
        // Reading the clock every batch would cost more than a fast batch of
        // lookups on some machines; every 16 batches is plenty for ~1 s runs.
        since_check += 1;
        if iters.is_none() && since_check >= 16 {
            since_check = 0;
            if start.elapsed().as_secs_f64() >= min_secs {
                break;
            }
        }
    }
    (lookups, start.elapsed().as_secs_f64())
}

fn answers(c: &dyn Classify, keys: &[FlowKey]) -> Vec<Option<RuleId>> {
    let mut out = vec![None; keys.len()];
    for (k, o) in keys.chunks(256).zip(out.chunks_mut(256)) {
        c.lookup_batch(k, o);
    }
    out
}

fn show(id: Option<RuleId>) -> String {
    id.map_or_else(|| "none".to_string(), |i| i.to_string())
}

/// Parameters of [`measure_updates`].
#[derive(Debug, Clone, Copy)]
pub struct UpdateConfig {
    /// Duration of each phase, seconds.
    pub phase_secs: f64,
    /// Publish every N operations (at least 1).
    pub publish_every: usize,
    /// Writer cap in operations per second (0: none).
    pub rate: u64,
    /// Keys per reader batch (one read section each).
    pub batch: usize,
    /// Seed of the update order.
    pub seed: u64,
    /// Also measure the reader while the writer busy-spins.
    pub spin_control: bool,
    /// Rounds of (idle phase, update phase); the median round is reported.
    pub rounds: usize,
}

/// What [`measure_updates`] measured.
#[derive(Debug, Clone)]
pub struct UpdateReport {
    /// Operations done in the timed update phase (each remove and each
    /// insert counts one).
    pub updates: u64,
    /// Duration of the timed update phase, seconds.
    pub secs: f64,
    /// `updates / secs`.
    pub updates_per_s: f64,
    /// Writer cap asked for (0: none).
    pub target_rate: u64,
    /// Publish period, operations.
    pub publish_every: usize,
    /// Publishes during the timed update phase.
    pub publishes: u64,
    /// Reader Mlookups/s with the writer idle, on `serving_idle`.
    pub lookup_mpps_idle: f64,
    /// Reader Mlookups/s during the timed update phase.
    pub lookup_mpps_updating: f64,
    /// `lookup_mpps_updating / lookup_mpps_idle`.
    pub lookup_ratio: f64,
    /// `auto` only: reader Mlookups/s on the structure `compile()` chose,
    /// before the first update.
    pub lookup_mpps_idle_compiled: Option<f64>,
    /// Lookup ratio (updating / idle) of every round, sorted; the headline
    /// figures come from the median round.
    pub round_ratios: Vec<f64>,
    /// `--spin-control`: reader Mlookups/s while the writer streams writes
    /// through memory twice the size of the L3 (a memory-bound control).
    pub lookup_mpps_writer_streaming: Option<f64>,
    /// Reader Mlookups/s idle after the update phase, on the structure the
    /// updates left (TupleMerge's layout drifts with insertion order).
    pub lookup_mpps_idle_after: f64,
    /// `auto` only: what served in that phase.
    pub serving_idle_compiled: Option<&'static str>,
    /// What served in the idle phase the ratio is based on.
    pub serving_idle: &'static str,
    /// What served during the update phase.
    pub serving_updating: &'static str,
    /// With `spin_control`: reader Mlookups/s while the writer busy-spins
    /// (no updates), on `serving_idle`.
    pub lookup_mpps_writer_spinning: Option<f64>,
    /// Whether the writer got pinned to CPU 0.
    pub writer_pinned: bool,
    /// Whether the reader got pinned to CPU 1.
    pub reader_pinned: bool,
    /// Cache-line round trip between CPUs 0 and 1 before the phases and
    /// after them, ns ([`crate::cores::round_trip_ns`]): how far apart the
    /// host put the writer's and the reader's CPUs.
    pub core_round_trip_ns: [Option<f64>; 2],
}

/// The reader's lookup count, alone on its cache lines so the writer's stop
/// flag and other data do not share it.
type PaddedCount = CachePadded<AtomicU64>;

/// Pin the calling thread to `cpu`. Returns false when that is not possible
/// (fewer CPUs, a restricted cpuset, another OS); the measurement then runs
/// unpinned.
pub fn pin_to_cpu(cpu: usize) -> bool {
    #[cfg(target_os = "linux")]
    {
        if cpu >= libc::CPU_SETSIZE as usize {
            return false;
        }
        // SAFETY: `cpu_set_t` is a plain bit array for which all-zeroes is
        // the valid empty set; `CPU_SET` writes bit `cpu`, within the set
        // (checked above); `sched_setaffinity(0, ..)` only reads `size_of`
        // bytes of the set and applies to the calling thread.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = cpu;
        false
    }
}

/// Reader thread body: look `keys` up in read sections of one batch each
/// until `stop`, publishing the running lookup count in `count`. Returns
/// whether it got pinned.
fn reader_loop(
    mut h: offlow_sync::ReadHandle<AnyClassifier>,
    keys: &[FlowKey],
    batch: usize,
    stop: &AtomicBool,
    count: &PaddedCount,
) -> bool {
    let pinned = pin_to_cpu(1);
    let mut out = vec![None; batch];
    let mut local = 0u64;
    let mut pos = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let end = (pos + batch).min(keys.len());
        let n = end - pos;
        {
            let g = h.enter();
            g.lookup_batch(black_box(&keys[pos..end]), &mut out[..n]);
        }
        black_box(&out);
        local += n as u64;
        // Relaxed: the count is a statistic read at phase boundaries; no
        // data is published through it.
        count.0.store(local, Ordering::Relaxed);
        pos = if end == keys.len() { 0 } else { end };
    }
    pinned
}

/// Remove and re-insert one rule (two operations).
fn update_one(v: &mut Versioned<AnyClassifier, ClassifierOp>, r: &Rule) {
    v.apply(ClassifierOp::Remove(r.id));
    v.apply(ClassifierOp::Insert(r.clone()));
}

/// Measure updates against a concurrent reader. `c` must hold exactly
/// `rules`.
///
/// Phases (the writer, pinned to CPU 0, drives them; the reader, pinned to
/// CPU 1, looks `keys` up throughout; each phase's reader rate is the
/// difference of the reader's counter at the phase's two ends):
/// 1. for `auto` only: idle on the compiled structure
///    (`lookup_mpps_idle_compiled`), then one remove + insert, published
///    (an RFC snapshot keeps serving: the rule is recognised when it comes
///    back; `serving_idle` says what serves after it);
/// 2. idle (`lookup_mpps_idle`);
/// 3. updates: cycle through the rules in a seeded random order, removing
///    and re-inserting each, publishing every `publish_every` operations,
///    optionally capped at `rate` operations/s (`updates_per_s`,
///    `lookup_mpps_updating`).
///
/// Returns the report and the final classifier (every operation published),
/// for verification.
pub fn measure_updates(
    c: AnyClassifier,
    rules: &[Rule],
    keys: &[FlowKey],
    cfg: &UpdateConfig,
) -> anyhow::Result<(UpdateReport, AnyClassifier)> {
    if keys.is_empty() || rules.is_empty() {
        anyhow::bail!("updates: need at least one rule and one header");
    }
    if c.len() != rules.len() {
        anyhow::bail!(
            "updates: classifier holds {} rules, expected {}",
            c.len(),
            rules.len()
        );
    }
    let batch = cfg.batch.max(1);
    let phase = Duration::from_secs_f64(cfg.phase_secs.max(0.0));
    let kind = c.kind();
    let mut order: Vec<usize> = (0..rules.len()).collect();
    order.shuffle(&mut rand::rngs::SmallRng::seed_from_u64(cfg.seed));

    let round_trip_before = crate::cores::round_trip_ns(0, 1);
    let mut v: Versioned<AnyClassifier, ClassifierOp> = Versioned::new(c);
    let stop = AtomicBool::new(false);
    let count = CachePadded(AtomicU64::new(0));

    let (writer, reader_pinned) = std::thread::scope(|s| {
        let h = v.reader();
        let reader = s.spawn(|| reader_loop(h, keys, batch, &stop, &count));
        let writer = s.spawn(|| {
            let r = writer_phases(&mut v, rules, &order, &count, phase, cfg, kind);
            // Stop the reader whatever happened, or the scope never ends.
            stop.store(true, Ordering::Relaxed);
            r
        });
        let w = writer.join();
        // The writer sets `stop` unless it panicked; make sure either way.
        stop.store(true, Ordering::Relaxed);
        (w, reader.join())
    });
    let reader_pinned =
        reader_pinned.map_err(|_| anyhow::anyhow!("updates: reader thread panicked"))?;
    let mut report = writer.map_err(|_| anyhow::anyhow!("updates: writer thread panicked"))??;
    report.reader_pinned = reader_pinned;
    report.core_round_trip_ns = [round_trip_before, crate::cores::round_trip_ns(0, 1)];
    v.publish();
    let last = v.writer_view().clone();
    if last.len() != rules.len() {
        anyhow::bail!(
            "updates: {} rules after the update phase, expected {}",
            last.len(),
            rules.len()
        );
    }
    Ok((report, last))
}

/// The writer's side of [`measure_updates`] (runs on its own thread).
fn writer_phases(
    v: &mut Versioned<AnyClassifier, ClassifierOp>,
    rules: &[Rule],
    order: &[usize],
    count: &PaddedCount,
    phase: Duration,
    cfg: &UpdateConfig,
    kind: ClassifierKind,
) -> anyhow::Result<UpdateReport> {
    let publish_every = cfg.publish_every.max(1);
    let rate = cfg.rate;
    let writer_pinned = pin_to_cpu(0);
    // Wait for the reader to be running before timing anything.
    let t = Instant::now();
    while count.0.load(Ordering::Relaxed) == 0 {
        if t.elapsed() > Duration::from_secs(10) {
            anyhow::bail!("updates: reader did not start within 10 s");
        }
        std::thread::yield_now();
    }
    let reader_rate = |from: (u64, Instant)| {
        let n = count.0.load(Ordering::Relaxed) - from.0;
        n as f64 / from.1.elapsed().as_secs_f64().max(1e-9) / 1e6
    };
    let mark = || (count.0.load(Ordering::Relaxed), Instant::now());
    let idle = || {
        let m = mark();
        std::thread::sleep(phase);
        reader_rate(m)
    };

    let (compiled_rate, compiled_serving) = if kind == ClassifierKind::Auto {
        let serving = v.writer_view().serving();
        let rate = idle();
        // The first update: from here on the copies carry an overlay.
        update_one(v, &rules[order[0]]);
        v.publish();
        (Some(rate), Some(serving))
    } else {
        (None, None)
    };
    let serving_idle = v.writer_view().serving();
    let lookup_mpps_writer_spinning = cfg.spin_control.then(|| {
        let m = mark();
        let mut x = 1u64;
        while m.1.elapsed() < phase {
            for _ in 0..1024 {
                // Register-only work: keeps the core busy without touching
                // memory the reader uses.
                x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
        }
        reader_rate(m)
    });
    let lookup_mpps_writer_streaming = cfg.spin_control.then(|| {
        // Memory-bound control: the writer streams writes through 64 MiB
        // (twice the L3) without touching the classifier. A reader slowed
        // by this as much as by updates is limited by the shared cache and
        // memory, not by the left-right design.
        let mut buf = vec![0u64; 8 << 20];
        let m = mark();
        let mut x = 0u64;
        while m.1.elapsed() < phase {
            for w in buf.iter_mut().step_by(8) {
                x = x.wrapping_add(1);
                *w = x;
            }
        }
        black_box(&buf);
        reader_rate(m)
    });

    // Rounds of (idle phase, update phase): the machine is shared and noisy,
    // so each round's ratio compares two adjacent phases and the report
    // gives the median round.
    let mut rounds: Vec<(f64, f64)> = Vec::new();
    let (mut ops, mut publishes, mut secs) = (0u64, 0u64, 0f64);
    let mut i = 0usize;
    for _ in 0..cfg.rounds.max(1) {
        let idle_rate = idle();
        let m = mark();
        let start = m.1;
        let mut round_ops = 0u64;
        loop {
            update_one(v, &rules[order[i]]);
            round_ops += 2;
            i += 1;
            if i == order.len() {
                i = 0;
            }
            if v.pending() >= publish_every {
                v.publish();
                publishes += 1;
            }
            if rate > 0 {
                // Pace: the next operation is due at ops / rate seconds.
                // Spin rather than sleep: on this VM a sleeping vCPU hands
                // its physical core to other host work, and the reader then
                // ran at ~0.70 of idle even at a lower update rate (measured
                // on acl1_10K: 0.70 sleeping vs 0.95 flat out).
                let due = Duration::from_secs_f64(round_ops as f64 / rate as f64).min(phase);
                while start.elapsed() < due {
                    std::hint::spin_loop();
                }
            }
            // The clock is read every 32 remove+insert pairs: cheap against
            // the updates themselves, fine-grained against a phase.
            if round_ops % 64 == 0 && start.elapsed() >= phase {
                break;
            }
        }
        rounds.push((idle_rate, reader_rate(m)));
        ops += round_ops;
        secs += start.elapsed().as_secs_f64();
    }
    // The median round by ratio gives the headline figures.
    rounds.sort_by(|a, b| (a.1 / a.0.max(1e-12)).total_cmp(&(b.1 / b.0.max(1e-12))));
    let (lookup_mpps_idle, lookup_mpps_updating) = rounds[rounds.len() / 2];
    let round_ratios: Vec<f64> = rounds.iter().map(|(a, b)| b / a.max(1e-12)).collect();
    let serving_updating = v.writer_view().serving();
    // Idle again on the structure the updates left behind: TupleMerge's
    // layout depends on insertion order, so churn alone can make lookups
    // faster or slower. This separates that drift from interference.
    v.publish();
    let lookup_mpps_idle_after = idle();
    Ok(UpdateReport {
        updates: ops,
        secs,
        updates_per_s: ops as f64 / secs.max(1e-9),
        round_ratios,
        target_rate: rate,
        publish_every,
        publishes,
        lookup_mpps_idle,
        lookup_mpps_updating,
        lookup_ratio: lookup_mpps_updating / lookup_mpps_idle.max(1e-12),
        lookup_mpps_idle_compiled: compiled_rate,
        lookup_mpps_idle_after,
        lookup_mpps_writer_spinning,
        lookup_mpps_writer_streaming,
        serving_idle_compiled: compiled_serving,
        serving_idle,
        serving_updating,
        writer_pinned,
        reader_pinned: false,
        core_round_trip_ns: [None; 2],
    })
}

fn dpdk_runs(
    args: &ClassifyArgs,
    inputs: &dpdk::AclInputs,
    n_headers: usize,
) -> anyhow::Result<Vec<AclRun>> {
    dpdk::timed_runs(inputs, &args.dpdk_bin, args.dpdk_iters, n_headers)
}

/// Run the experiment without printing the result (progress goes to
/// stderr). Used by [`main`] and by tests.
pub fn run(args: &ClassifyArgs) -> anyhow::Result<ClassifyReport> {
    let (set, trace, rules_file, trace_file) = load_inputs(args)?;
    let rules = set.to_rules();
    let keys = trace.keys();

    let Built {
        classifier: c,
        build_ms,
        compile_ms,
        compiled,
    } = build_classifier(args.classifier, &rules);
    let serving = c.serving();
    eprintln!(
        "built {} ({} rules) in {build_ms:.2} ms{}; serving: {serving}",
        args.classifier.name(),
        rules.len(),
        match (&compiled, compile_ms) {
            (Some(k), Some(ms)) => format!("; compile {ms:.2} ms: {}", describe_compiled(k)),
            _ => String::new(),
        }
    );

    let (lookups, secs) = timed_lookups(&c, &keys, args.batch, args.iters, args.min_secs);
    let mpps = lookups as f64 / secs.max(1e-12) / 1e6;

    let mut verify = if args.verify {
        let mut v = VerifyReport {
            checked: keys.len(),
            ..VerifyReport::default()
        };
        let oracle = build_classifier(ClassifierKind::Linear, &rules).classifier;
        let want = answers(&oracle, &keys);
        let got = answers(&c, &keys);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            if g != w {
                v.oracle_mismatches += 1;
                v.note(format!(
                    "header {} {:?}: {} says {}, oracle says {}",
                    i + 1,
                    trace.headers[i],
                    args.classifier.name(),
                    show(*g),
                    show(*w)
                ));
            }
        }
        if let Some(exp) = &trace.expected {
            let mut bad = 0;
            for (i, (e, w)) in exp.iter().zip(&want).enumerate() {
                if e != w {
                    bad += 1;
                    v.note(format!(
                        "header {} {:?}: trace says first match {}, oracle says {}",
                        i + 1,
                        trace.headers[i],
                        show(*e),
                        show(*w)
                    ));
                }
            }
            v.trace_mismatches = Some(bad);
        }
        if let Some(gen) = &trace.generating {
            let agree = gen
                .iter()
                .zip(&want)
                .filter(|(g, w)| Some(**g) == **w)
                .count();
            v.generating_agree = Some(agree);
        }
        Some((v, want))
    } else {
        None
    };

    let updates = if args.updates {
        let cfg = UpdateConfig {
            phase_secs: args.update_secs,
            publish_every: args.publish_every,
            rate: args.update_rate,
            batch: args.batch,
            seed: args.seed,
            spin_control: args.spin_control,
            rounds: args.update_rounds,
        };
        let (u, after) = measure_updates(c, &rules, &keys, &cfg)?;
        if let Some((v, want)) = &mut verify {
            let got = answers(&after, &keys);
            let bad = got.iter().zip(want.iter()).filter(|(g, w)| g != w).count();
            v.after_update_mismatches = Some(bad);
            if bad > 0 {
                v.note(format!(
                    "{bad} answers differ from the oracle after the update phase"
                ));
            }
        }
        Some(u)
    } else {
        None
    };

    let mut dpdk = Vec::new();
    if args.vs_dpdk {
        let inputs = dpdk::AclInputs::write(&set.rules, &trace.headers)?;
        dpdk = dpdk_runs(args, &inputs, trace.headers.len())?;
        if let Some((v, want)) = &mut verify {
            for r in &dpdk {
                let got = inputs.classify_answers(&args.dpdk_bin, &r.alg)?;
                let mut bad = 0;
                for (i, (g, w)) in got.iter().zip(want.iter()).enumerate() {
                    if g != w {
                        bad += 1;
                        v.note(format!(
                            "header {} {:?}: dpdk {} says {}, oracle says {}",
                            i + 1,
                            trace.headers[i],
                            r.alg,
                            show(*g),
                            show(*w)
                        ));
                    }
                }
                v.dpdk_mismatches.push((r.alg.clone(), bad));
            }
        }
    }

    Ok(ClassifyReport {
        rules_file,
        trace_file,
        dialect: set.dialect,
        classifier: args.classifier,
        rules: rules.len(),
        headers: keys.len(),
        batch: args.batch.max(1),
        build_ms,
        compile_ms,
        compiled,
        serving,
        lookups,
        secs,
        mpps,
        ns_per_lookup: secs * 1e9 / (lookups.max(1) as f64),
        updates,
        verify: verify.map(|(v, _)| v),
        dpdk,
    })
}

/// Render the human-readable report.
pub fn render(r: &ClassifyReport) -> String {
    let mut s = format!(
        "classify: {} ({} rules, {}) x {} ({} headers), classifier {}, batch {}\n\
         build {:.2} ms",
        r.rules_file,
        r.rules,
        r.dialect,
        r.trace_file,
        r.headers,
        r.classifier.name(),
        r.batch,
        r.build_ms,
    );
    if let (Some(ms), Some(k)) = (r.compile_ms, &r.compiled) {
        s.push_str(&format!("; compile {ms:.2} ms ({})", describe_compiled(k)));
    }
    s.push_str(&format!(
        "; serving: {}; {} lookups in {:.3} s\n",
        r.serving, r.lookups, r.secs
    ));
    let mut t = Table::new(["engine", "Mpps", "ns/lookup", "cycles/pkt"]);
    t.row([
        format!("offlow {} (serving {})", r.classifier.name(), r.serving),
        fmt_f(r.mpps, 2),
        fmt_f(r.ns_per_lookup, 1),
        String::new(),
    ]);
    let best = r.dpdk_best().map(|b| b.alg.clone());
    for d in &r.dpdk {
        let mark = if Some(&d.alg) == best.as_ref() {
            " (best)"
        } else {
            ""
        };
        t.row([
            format!("dpdk-test-acl {}{mark}", d.alg),
            fmt_f(d.mpps, 2),
            fmt_f(1e3 / d.mpps.max(1e-9), 1),
            fmt_f(d.cycles_per_pkt, 1),
        ]);
    }
    s.push_str(&t.render());
    if let Some(b) = r.dpdk_best() {
        s.push_str(&format!(
            "offlow / dpdk best ({}) = {:.3}\n",
            b.alg,
            r.mpps / b.mpps.max(1e-12)
        ));
    }
    if let Some(u) = &r.updates {
        s.push_str(&render_updates(u));
    }
    if let Some(v) = &r.verify {
        s.push_str(&format!(
            "verify: {} headers; vs oracle: {} mismatches",
            v.checked, v.oracle_mismatches
        ));
        if let Some(n) = v.trace_mismatches {
            s.push_str(&format!(
                "; oracle vs trace first-match ids: {n} mismatches"
            ));
        }
        if let Some(a) = v.generating_agree {
            s.push_str(&format!(
                "; first match == generating rule for {a} of {} (informational)",
                v.checked
            ));
        }
        for (alg, n) in &v.dpdk_mismatches {
            s.push_str(&format!("; dpdk {alg} vs oracle: {n} mismatches"));
        }
        if let Some(n) = v.after_update_mismatches {
            s.push_str(&format!("; after updates: {n} mismatches"));
        }
        s.push_str(if v.ok() { " => OK\n" } else { " => FAILED\n" });
        for e in &v.examples {
            s.push_str(&format!("  mismatch: {e}\n"));
        }
    }
    s
}

/// Render the `--updates` part of the report.
pub fn render_updates(u: &UpdateReport) -> String {
    let cap = if u.target_rate > 0 {
        format!("capped at {} ops/s", u.target_rate)
    } else {
        "as fast as possible".to_string()
    };
    let pin = if u.writer_pinned && u.reader_pinned {
        "writer on CPU 0, reader on CPU 1"
    } else {
        "threads NOT pinned"
    };
    let mut s = format!(
        "updates: remove + re-insert, random order, publish every {} ops, {cap}; {pin}\n",
        u.publish_every
    );
    s.push_str(&crate::cores::describe(u.core_round_trip_ns));
    let mut t = Table::new(["reader phase", "serving", "Mlookups/s"]);
    if let (Some(m), Some(sv)) = (u.lookup_mpps_idle_compiled, u.serving_idle_compiled) {
        t.row(["idle, as compiled".to_string(), sv.to_string(), fmt_f(m, 2)]);
    }
    t.row([
        "idle".to_string(),
        u.serving_idle.to_string(),
        fmt_f(u.lookup_mpps_idle, 2),
    ]);
    if let Some(m) = u.lookup_mpps_writer_spinning {
        t.row([
            "writer spinning (control)".to_string(),
            u.serving_idle.to_string(),
            fmt_f(m, 2),
        ]);
    }
    if let Some(m) = u.lookup_mpps_writer_streaming {
        t.row([
            "writer streaming memory (control)".to_string(),
            u.serving_idle.to_string(),
            fmt_f(m, 2),
        ]);
    }
    t.row([
        "during updates".to_string(),
        u.serving_updating.to_string(),
        fmt_f(u.lookup_mpps_updating, 2),
    ]);
    t.row([
        "idle after updates".to_string(),
        u.serving_updating.to_string(),
        fmt_f(u.lookup_mpps_idle_after, 2),
    ]);
    s.push_str(&t.render());
    s.push_str(&format!(
        "updates: {} in {:.3} s = {:.0} per second (each remove and each insert counts one), {} publishes\n\
         lookup ratio during updates ({}) / idle ({}) = {:.3} (median of rounds {})\n",
        u.updates,
        u.secs,
        u.updates_per_s,
        u.publishes,
        u.serving_updating,
        u.serving_idle,
        u.lookup_ratio,
        u.round_ratios
            .iter()
            .map(|r| format!("{r:.3}"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    s
}

/// Run the experiment and print its report (and the JSON line with
/// `--json`). Fails when `--verify` found a mismatch.
pub fn main(args: &ClassifyArgs) -> anyhow::Result<()> {
    let r = run(args)?;
    print!("{}", render(&r));
    if args.json {
        print_json_line(&r.to_json());
    }
    if let Some(v) = &r.verify {
        if !v.ok() {
            anyhow::bail!("bench classify: verification failed");
        }
    }
    Ok(())
}

/// Whether `path` looks like a trace file name (`*_trace`, `*_trace.gz`).
pub fn is_trace_name(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.ends_with("_trace") || n.ends_with("_trace.gz"))
}
