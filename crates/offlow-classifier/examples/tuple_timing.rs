//! TupleMerge lookup time on one WUSTL ClassBench set and its trace: a short
//! run (about `MS` milliseconds, default 1500) reporting the fastest
//! repetition's ns/lookup, after checking every answer against the trace.
//! Uses only the public API, so it also builds against older versions of
//! the classifier for A/B comparisons.
//!
//! Usage: `cargo run --release -p offlow-classifier --example tuple_timing
//! -- NAME [MS]` with NAME e.g. `acl1_10K` (data directory as for the tests).
#[path = "../tests/common/mod.rs"]
mod common;

use std::hint::black_box;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use common::{load_rules, load_trace, wustl_dir, wustl_sets};
use offlow_classifier::{Classify, FlowKey, TupleMerge};

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(name) = args.next() else {
        eprintln!("usage: tuple_timing NAME [MS]");
        return ExitCode::FAILURE;
    };
    let ms: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(1500);
    let Some(dir) = wustl_dir() else {
        eprintln!("WUSTL data absent");
        return ExitCode::FAILURE;
    };
    let Some((_, rules_path, trace_path)) = wustl_sets(&dir).into_iter().find(|(n, ..)| *n == name)
    else {
        eprintln!(
            "{name}: no such WUSTL set with a trace in {}",
            dir.display()
        );
        return ExitCode::FAILURE;
    };
    let rules = load_rules(&rules_path);
    let trace = load_trace(&trace_path);
    let mut tm = TupleMerge::new();
    for r in &rules {
        tm.insert(r.clone());
    }
    let bad = trace
        .iter()
        .filter(|(k, want)| tm.lookup(k) != *want)
        .count();
    if bad != 0 {
        eprintln!("{name}: {bad} wrong answers");
        return ExitCode::FAILURE;
    }
    let keys: Vec<FlowKey> = trace.iter().map(|(k, _)| *k).collect();
    let run = || {
        for k in &keys {
            black_box(tm.lookup(black_box(k)));
        }
    };
    run();
    // Fastest repetition: filters out time slices lost to other processes.
    let start = Instant::now();
    let mut best = f64::MAX;
    while start.elapsed() < Duration::from_millis(ms) {
        let t = Instant::now();
        run();
        best = best.min(t.elapsed().as_nanos() as f64);
    }
    println!(
        "{name}: {} rules, {} tuples, {} keys: {:.1} ns/lookup",
        tm.len(),
        tm.tuple_count(),
        keys.len(),
        best / keys.len() as f64
    );
    ExitCode::SUCCESS
}
