//! `offlow bench update`: lookups never stop. One core runs the datapath on
//! the acl+fib workload while the other applies a stream of flow-mods.
//!
//! # Set-up
//! The pipeline of `offlow bench datapath --workload acl+fib` (table 0 the
//! ClassBench ACL, permit → goto table 1; table 1 the BGP FIB with a default
//! route), the same Zipf traffic over the trace's flows as real frames.
//!
//! # The update stream
//! The writer (pinned to CPU 0) picks, with equal odds, a ClassBench rule of
//! table 0 or a BGP prefix of table 1 from the installed sets, and: if it is
//! installed, deletes it (DELETE_STRICT) or, one time in three, modifies it
//! (MODIFY_STRICT: an ACL permit turns into a drop and back; a prefix moves
//! to another output port); if it is not installed, adds it back (ADD). Every
//! flow-mod counts as one update. After every `--commit-every` updates it
//! calls [`Control::commit`], the barrier wait. `--rate` holds the stream
//! to N updates per second (paced by spinning, not sleeping); without it the
//! writer goes as fast as it can.
//!
//! # Phases
//! `--rounds` alternating pairs of (idle, updating) phases of `--seconds`
//! each; the reader's packet rate in each phase gives the per-round ratio,
//! the median of which is reported. During idle phases the writer spins.
//! Then a check phase: the reader switches to a worker in check mode (every
//! cached decision compared with an uncached pipeline lookup at the version
//! its batch was processed under) while the writer keeps updating; every
//! disagreement is a packet processed with a stale action after the wait
//! that should have removed it (`stale_packets`, must be 0).
//!
//! Thread-safety: two scoped threads. They share the datapath only through
//! `Control`/`Worker` (left-right publish) and a few atomics: the phase, a
//! stop flag, the reader's packet count.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use offlow_datapath::{ActionTableStats, Control, WorkerConfig, WorkerStats};
use offlow_pipeline::{
    Action, FlowMod, FlowModCommand, FlowModEffect, Instruction, PipelineError, PortNo,
};
use offlow_sync::CachePadded;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use crate::classify::pin_to_cpu;
use crate::datapath::{self, DatapathArgs, Traffic, WorkloadKind, IN_PORT, N_PORTS};
use crate::report::{fmt_f, print_json_line, Table};
use crate::workload::{self, Popularity};

/// Arguments of `offlow bench update`.
#[derive(Debug, Clone, clap::Args)]
pub struct UpdateArgs {
    /// Target updates per second (default: as fast as possible).
    #[arg(long)]
    pub rate: Option<u64>,
    /// Seconds per phase.
    #[arg(long, default_value_t = 0.5)]
    pub seconds: f64,
    /// (idle, updating) phase pairs.
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// Updates between two commits (barrier waits).
    #[arg(long, default_value_t = 64)]
    pub commit_every: usize,
    /// Seconds of the stale-action check phase.
    #[arg(long, default_value_t = 1.0)]
    pub check_seconds: f64,
    /// ClassBench rule file (default: embedded acl1).
    #[arg(long)]
    pub acl: Option<std::path::PathBuf>,
    /// ClassBench trace (default: embedded acl1_trace).
    #[arg(long)]
    pub trace: Option<std::path::PathBuf>,
    /// BGP table (default: shared data's ipasn_20140513).
    #[arg(long)]
    pub fib: Option<std::path::PathBuf>,
    /// Microflow cache entries.
    #[arg(long, default_value_t = 8192)]
    pub cache_size: usize,
    /// Frames per batch.
    #[arg(long, default_value_t = 32)]
    pub batch: usize,
    /// Seed of the traffic and of the update stream.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// End stdout with one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// What the experiment measured.
#[derive(Debug, Clone)]
pub struct UpdateReport {
    /// Rules installed at the start.
    pub rules: usize,
    /// Reader Mpps per idle phase.
    pub idle_mpps: Vec<f64>,
    /// Reader Mpps per updating phase.
    pub updating_mpps: Vec<f64>,
    /// Updates per second per updating phase.
    pub updates_per_s: Vec<f64>,
    /// Updates applied in the updating phases.
    pub updates_total: u64,
    /// Commits (barrier waits) over all updating phases.
    pub commits: u64,
    /// Mean commit (publish + wait) time, µs.
    pub commit_us: f64,
    /// Check phase: packets checked (cache hits compared) and stale ones.
    pub checked: u64,
    /// Stale packets found.
    pub stale: u64,
    /// Check phase: updates applied during it.
    pub check_updates: u64,
    /// Reader counters of the updating phases.
    pub reader: WorkerStats,
    /// The reader's Action Table counters (whole run).
    pub reader_actions: ActionTableStats,
    /// Reader packets served from a filtered entry after checking its
    /// new filters (whole run).
    pub reader_filter_checks: u64,
    /// Cache-line round trip between CPUs 0 and 1 (writer and reader)
    /// before and after the phases, ns ([`crate::cores::round_trip_ns`]).
    pub core_round_trip_ns: [Option<f64>; 2],
    /// What serves each table after the run, and the overlay of each RFC
    /// snapshot (it serves on through the stream's updates).
    pub tables_after: Vec<(u8, &'static str)>,
    /// See `tables_after`.
    pub overlays_after: Vec<(u8, offlow_classifier::OverlayStats)>,
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s.get(s.len() / 2).copied().unwrap_or(0.0)
}

/// The flow-mod stream over a fixed universe of ADDs. Each flow-mod is the
/// stored ADD with its command (and for a MODIFY its instructions) swapped
/// in place for the call and back after it, so the stream itself allocates
/// nothing: the writer's figure is the switch's cost, not the bench's.
struct Stream {
    adds: Vec<FlowMod>,
    installed: Vec<bool>,
    /// Per ACL rule / prefix: currently modified.
    flipped: Vec<bool>,
    acl_count: usize,
    /// Per output port: the instructions of a modified prefix (index 0
    /// unused).
    port_programs: Vec<Vec<Instruction>>,
    /// A modified ACL rule's instructions: none (a permit becomes a drop;
    /// a drop stays a drop).
    drop_program: Vec<Instruction>,
    /// The op after the one being sent, picked one step early so that its
    /// flow-mod (a random one of 513K, so never in cache) can be
    /// prefetched: a controller's flow-mod arrives in a hot receive buffer,
    /// and the writer's figure should not include the bench's own misses.
    upcoming: Option<(usize, StreamOp)>,
    rng: SmallRng,
}

/// One flow-mod of the stream, on `Stream::adds[index]`.
#[derive(Debug, Clone, Copy)]
enum StreamOp {
    Add,
    /// MODIFY_STRICT to the modified program (`true`) or back to the ADD's.
    Modify(bool),
    Delete,
}

impl Stream {
    fn new(adds: Vec<FlowMod>, acl_count: usize, seed: u64) -> Stream {
        let port_programs = (0..=N_PORTS)
            .map(|port| {
                vec![Instruction::ApplyActions(vec![Action::output(PortNo(
                    port,
                ))])]
            })
            .collect();
        Stream {
            installed: vec![true; adds.len()],
            flipped: vec![false; adds.len()],
            acl_count,
            adds,
            port_programs,
            drop_program: Vec::new(),
            upcoming: None,
            rng: SmallRng::seed_from_u64(seed),
        }
    }

    /// Pick the next flow-mod and update the stream's view of the table.
    fn next_op(&mut self) -> (usize, StreamOp) {
        let i = if self.rng.gen_bool(0.5) && self.acl_count > 0 {
            self.rng.gen_range(0..self.acl_count)
        } else {
            self.rng
                .gen_range(self.acl_count.min(self.adds.len() - 1)..self.adds.len())
        };
        if !self.installed[i] {
            self.installed[i] = true;
            self.flipped[i] = false;
            return (i, StreamOp::Add);
        }
        if self.rng.gen_range(0..3) == 0 {
            self.flipped[i] = !self.flipped[i];
            (i, StreamOp::Modify(self.flipped[i]))
        } else {
            self.installed[i] = false;
            (i, StreamOp::Delete)
        }
    }

    /// Send the next flow-mod to `control`. Every op of the stream is
    /// valid for the current state (the bench does not look at the result;
    /// the tests do).
    fn send_next(&mut self, control: &mut Control) -> Result<FlowModEffect, PipelineError> {
        let (i, op) = match self.upcoming.take() {
            Some(next) => next,
            None => self.next_op(),
        };
        let after = self.next_op();
        let fm: *const FlowMod = &self.adds[after.0];
        for line in (0..std::mem::size_of::<FlowMod>()).step_by(64) {
            // In bounds: `line` is within the flow-mod.
            offlow_sync::prefetch(fm.cast::<u8>().wrapping_add(line));
        }
        self.upcoming = Some(after);
        let fm = &mut self.adds[i];
        let add_command = fm.command;
        let swapped = match op {
            StreamOp::Add => None,
            StreamOp::Modify(false) => {
                fm.command = FlowModCommand::ModifyStrict;
                None
            }
            StreamOp::Modify(true) => {
                fm.command = FlowModCommand::ModifyStrict;
                Some(if i < self.acl_count {
                    &mut self.drop_program
                } else {
                    &mut self.port_programs[1 + (i as u32 + 3) as usize % N_PORTS as usize]
                })
            }
            StreamOp::Delete => {
                fm.command = FlowModCommand::DeleteStrict;
                Some(&mut self.drop_program)
            }
        };
        let result = match swapped {
            Some(program) => {
                std::mem::swap(&mut fm.instructions, program);
                let result = control.flow_mod(fm, 0);
                std::mem::swap(&mut fm.instructions, program);
                result
            }
            None => control.flow_mod(fm, 0),
        };
        fm.command = add_command;
        result
    }
}

const PHASE_IDLE: usize = 0;
const PHASE_CHECK: usize = 1;

/// Run the experiment (progress on stderr).
pub fn run(args: &UpdateArgs) -> anyhow::Result<UpdateReport> {
    let dp_args = DatapathArgs {
        workload: WorkloadKind::AclFib,
        acl: args.acl.clone(),
        trace: args.trace.clone(),
        fib: args.fib.clone(),
        traffic: "zipf".into(),
        zipf: 1.0,
        flows: 10_000,
        packets: 1 << 20,
        frame_size: 60,
        batch: args.batch,
        cache_size: args.cache_size,
        cache: datapath::CacheMode::On,
        seconds: args.seconds,
        seed: args.seed,
        vs_dpdk: false,
        verify: false,
        json: false,
        dpdk_bin: crate::dpdk::DEFAULT_BIN.into(),
        dpdk_fib_bin: crate::dpdk_fib::DEFAULT_BIN.into(),
    };
    let inputs = datapath::load_inputs(&dp_args)?;
    let (mut control, rules, setup_ms) = datapath::build_pipeline(WorkloadKind::AclFib, &inputs)?;
    eprintln!(
        "acl+fib: {rules} rules in {setup_ms:.0} ms; tables {:?}",
        control.pipeline().table_structures()
    );
    let traffic = Traffic {
        frames: inputs.flows.frames(60),
        sequence: workload::packet_sequence(
            inputs.flows.len(),
            1 << 20,
            Popularity::Zipf(1.0),
            args.seed,
        ),
    };
    let acl_mods = datapath::flow_mods(WorkloadKind::Acl, &inputs).len();
    let adds = datapath::flow_mods(WorkloadKind::AclFib, &inputs);
    let mut stream = Stream::new(adds, acl_mods, args.seed ^ 0x5eed);

    let config = WorkerConfig {
        cache_capacity: args.cache_size,
        ..WorkerConfig::default()
    };
    let mut worker = control.worker(config);
    let mut checker = control.worker(WorkerConfig {
        check: true,
        ..config
    });
    let phase = AtomicUsize::new(PHASE_IDLE);
    let stop = AtomicBool::new(false);
    let count = CachePadded(AtomicU64::new(0));
    let batch = args.batch.clamp(1, 256);
    let phase_len = Duration::from_secs_f64(args.seconds);
    let round_trip_before = crate::cores::round_trip_ns(0, 1);

    let (writer_out, reader_out) = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            pin_to_cpu(1);
            let mut bufs = datapath::make_bufs(batch, 60);
            let mut sink = datapath::port_sink(batch, 60);
            let mut pos = 0usize;
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                datapath::fill(&mut bufs, &traffic, &mut pos);
                if phase.load(Ordering::Relaxed) == PHASE_CHECK {
                    checker.process(&mut bufs, IN_PORT, &mut sink);
                } else {
                    worker.process(&mut bufs, IN_PORT, &mut sink);
                }
                datapath::transmit(&mut sink);
                n += bufs.len() as u64;
                // Relaxed: a statistic sampled at phase boundaries.
                count.0.store(n, Ordering::Relaxed);
            }
            (worker.stats(), worker.action_stats(), checker.stats())
        });

        pin_to_cpu(0);
        let mut idle = Vec::new();
        let mut updating = Vec::new();
        let mut rates = Vec::new();
        let mut total = 0u64;
        let mut commits = 0u64;
        let mut commit_time = Duration::ZERO;
        let mut run_updates = |control: &mut Control, len: Duration| -> u64 {
            let t0 = Instant::now();
            let mut done = 0u64;
            loop {
                for _ in 0..args.commit_every.max(1) {
                    let _ = stream.send_next(control);
                    done += 1;
                }
                let c0 = Instant::now();
                control.commit();
                commit_time += c0.elapsed();
                commits += 1;
                let elapsed = t0.elapsed();
                if elapsed >= len {
                    break;
                }
                if let Some(rate) = args.rate {
                    // Pace by spinning: a sleeping vCPU slows the reader's.
                    let due = Duration::from_secs_f64(done as f64 / rate.max(1) as f64);
                    while t0.elapsed() < due && t0.elapsed() < len {
                        std::hint::spin_loop();
                    }
                }
            }
            done
        };
        // Let the reader warm its cache.
        std::thread::sleep(Duration::from_millis(200));
        for _ in 0..args.rounds.max(1) {
            let (c0, t0) = (count.0.load(Ordering::Relaxed), Instant::now());
            while t0.elapsed() < phase_len {
                std::hint::spin_loop();
            }
            let secs = t0.elapsed().as_secs_f64();
            idle.push((count.0.load(Ordering::Relaxed) - c0) as f64 / secs / 1e6);

            let (c0, t0) = (count.0.load(Ordering::Relaxed), Instant::now());
            let done = run_updates(&mut control, phase_len);
            let secs = t0.elapsed().as_secs_f64();
            updating.push((count.0.load(Ordering::Relaxed) - c0) as f64 / secs / 1e6);
            rates.push(done as f64 / secs);
            total += done;
        }
        phase.store(PHASE_CHECK, Ordering::Relaxed);
        let check_updates = run_updates(&mut control, Duration::from_secs_f64(args.check_seconds));
        stop.store(true, Ordering::Relaxed);
        let reader_out = reader.join().expect("reader thread");
        (
            (
                idle,
                updating,
                rates,
                total,
                commits,
                commit_time,
                check_updates,
            ),
            reader_out,
        )
    });
    let (
        idle_mpps,
        updating_mpps,
        updates_per_s,
        updates_total,
        commits,
        commit_time,
        check_updates,
    ) = writer_out;
    let (reader, reader_actions, check) = reader_out;
    Ok(UpdateReport {
        rules,
        idle_mpps,
        updating_mpps,
        updates_per_s,
        updates_total,
        commits,
        commit_us: commit_time.as_secs_f64() * 1e6 / commits.max(1) as f64,
        checked: check.cache_hits,
        stale: check.stale,
        check_updates,
        reader_filter_checks: reader.filter_checks,
        reader,
        reader_actions,
        core_round_trip_ns: [round_trip_before, crate::cores::round_trip_ns(0, 1)],
        tables_after: control.pipeline().table_structures(),
        overlays_after: control.pipeline().table_overlays(),
    })
}

/// `offlow bench update`.
pub fn main(args: &UpdateArgs) -> anyhow::Result<()> {
    let r = run(args)?;
    let ratios: Vec<f64> = r
        .idle_mpps
        .iter()
        .zip(&r.updating_mpps)
        .map(|(i, u)| u / i.max(1e-12))
        .collect();
    let mut t = Table::new(["round", "idle Mpps", "updating Mpps", "ratio", "updates/s"]);
    for (k, ((i, u), rate)) in r
        .idle_mpps
        .iter()
        .zip(&r.updating_mpps)
        .zip(&r.updates_per_s)
        .enumerate()
    {
        t.row([
            (k + 1).to_string(),
            fmt_f(*i, 2),
            fmt_f(*u, 2),
            fmt_f(u / i.max(1e-12), 3),
            fmt_f(*rate, 0),
        ]);
    }
    println!(
        "acl+fib, {} rules; commit every {} updates{}",
        r.rules,
        args.commit_every,
        args.rate
            .map(|x| format!(", target {x} updates/s"))
            .unwrap_or_default()
    );
    print!("{}", crate::cores::describe(r.core_round_trip_ns));
    print!("{}", t.render());
    let (idle, upd, rate, ratio) = (
        median(&r.idle_mpps),
        median(&r.updating_mpps),
        median(&r.updates_per_s),
        median(&ratios),
    );
    println!(
        "median: idle {idle:.2} Mpps, updating {upd:.2} Mpps, ratio {ratio:.3}, {rate:.0} updates/s; {} commits, {:.1} µs each",
        r.commits, r.commit_us
    );
    let s = r.reader;
    let per_update = s.stale_hits as f64 / r.updates_total.max(1) as f64;
    println!(
        "reader: {} packets, {} cache hits, {} pipeline lookups ({} after invalidation: {per_update:.2} per update), {} invalidation records applied",
        s.packets, s.cache_hits, s.pipeline_lookups, s.stale_hits, s.records_applied
    );
    let a = r.reader_actions;
    let per = |n: u64| n as f64 / r.updates_total.max(1) as f64;
    println!(
        "reader's Action Table, per update: {:.2} decisions interned, {:.2} shared, {:.2} rebuilt in place, {:.2} freed (of which {:.2} by filters), {:.2} filters attached, {:.2} filter checks served",
        per(a.interned),
        per(a.shared),
        per(a.rebuilt),
        per(a.invalidated),
        per(a.filter_frees),
        per(a.filtered),
        per(r.reader_filter_checks),
    );
    println!(
        "stale check: {} cached decisions checked during {} updates, {} stale",
        r.checked, r.check_updates, r.stale
    );
    println!("tables after the run: {:?}", r.tables_after);
    for (table, o) in &r.overlays_after {
        println!(
            "table {table}'s RFC snapshot served throughout: {} compiled rules removed now, {} served beside it, {} recognised under a new id",
            o.dead, o.added, o.revived
        );
    }
    if args.json {
        print_json_line(&json!({
            "experiment": "update:acl+fib",
            "lookup_mpps_idle": idle,
            "lookup_mpps_updating": upd,
            "lookup_ratio": ratio,
            "round_ratios": ratios,
            "updates_per_s": rate,
            "stale_packets": r.stale,
            "reresolved_per_update": per_update,
            "interned_per_update": per(a.interned),
            "freed_per_update": per(a.invalidated),
            "rebuilt_per_update": per(a.rebuilt),
            "filters_per_update": per(a.filtered),
            "checked_packets": r.checked,
            "commit_every": args.commit_every,
            "commit_us": r.commit_us,
            "target_rate": args.rate,
            "core_round_trip_ns": r.core_round_trip_ns,
            "table_overlays": r.overlays_after.iter().map(|(t, o)| json!({
                "table": t, "dead": o.dead, "added": o.added, "revived": o.revived,
            })).collect::<Vec<_>>(),
            "rules": r.rules,
            "cores": 2,
        }));
    }
    anyhow::ensure!(r.stale == 0, "{} packets used a stale action", r.stale);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classbench::parse_rules_bytes;
    use crate::classify::DEFAULT_RULES;
    use crate::fib;
    use offlow_pipeline::Pipeline;

    /// Every flow-mod of the stream is accepted, its effect is the one its
    /// op promises, and the stored ADDs come back unchanged: the stream
    /// swaps programs in and out without losing any.
    #[test]
    fn stream_ops_are_valid_and_leave_the_adds_intact() {
        let acl = parse_rules_bytes("acl1", DEFAULT_RULES).unwrap();
        let fib = fib::Table {
            routes: (0..64u32)
                .map(|i| (i << 24 | 0x0a_0000, 16 + (i % 9) as u8, i % 5))
                .collect(),
            asns: (0..5).collect(),
            skipped: 0,
            skip_reasons: Vec::new(),
        };
        let mut adds = workload::acl_flow_mods(&acl, 0, &[Instruction::GotoTable(1)], N_PORTS);
        let acl_count = adds.len();
        adds.extend(workload::fib_flow_mods(&fib, 1, N_PORTS, true));
        let originals = adds.clone();
        let mut control = Control::new(Pipeline::new(2));
        for fm in &adds {
            control.flow_mod(fm, 0).unwrap();
        }
        let mut stream = Stream::new(adds, acl_count, 7);
        let (mut added, mut modified, mut removed) = (0, 0, 0);
        for _ in 0..5000 {
            let effect = stream.send_next(&mut control).unwrap();
            assert!(effect.added.len() + effect.modified.len() + effect.removed.len() == 1);
            added += effect.added.len();
            modified += effect.modified.len();
            removed += effect.removed.len();
        }
        assert!(added > 0 && modified > 0 && removed > 0);
        // The stream's view already includes the op picked ahead, which
        // has not been sent.
        let mut installed = stream.installed.iter().filter(|&&b| b).count();
        match stream.upcoming {
            Some((_, StreamOp::Add)) => installed -= 1,
            Some((_, StreamOp::Delete)) => installed += 1,
            _ => {}
        }
        assert_eq!(installed, control.pipeline().len());
        assert_eq!(format!("{:?}", stream.adds), format!("{originals:?}"));
    }
}
