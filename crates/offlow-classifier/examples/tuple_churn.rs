//! TupleMerge update time on one WUSTL ClassBench set, with no reader: each
//! rule in a seeded random order is removed and inserted again (two
//! operations, as in `offlow bench classify --updates`, on one copy instead
//! of a left-right pair). Reports the fastest repetition's ns/operation,
//! after checking the trace's answers. Uses only the public API, so it also
//! builds against older versions of the classifier for A/B comparisons.
//!
//! Usage: `cargo run --release -p offlow-classifier --example tuple_churn
//! -- NAME [MS]` with NAME e.g. `acl1_10K` (data directory as for the tests).
#[path = "../tests/common/mod.rs"]
mod common;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use common::{load_rules, load_trace, wustl_dir, wustl_sets};
use offlow_classifier::{Classify, TupleMerge};

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(name) = args.next() else {
        eprintln!("usage: tuple_churn NAME [MS]");
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
    let mut tm = TupleMerge::new();
    for r in &rules {
        tm.insert(r.clone());
    }
    // A seeded shuffle (xorshift), the same for every build.
    let mut order: Vec<usize> = (0..rules.len()).collect();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in (1..order.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(i, (x % (i as u64 + 1)) as usize);
    }
    let mut run = || {
        for &i in &order {
            let r = &rules[i];
            tm.discard(r.id);
            tm.insert(r.clone());
        }
    };
    run();
    let start = Instant::now();
    let mut best = f64::MAX;
    while start.elapsed() < Duration::from_millis(ms) {
        let t = Instant::now();
        run();
        best = best.min(t.elapsed().as_nanos() as f64);
    }
    let trace = load_trace(&trace_path);
    let bad = trace
        .iter()
        .filter(|(k, want)| tm.lookup(k) != *want)
        .count();
    if bad != 0 {
        eprintln!("{name}: {bad} wrong answers after the churn");
        return ExitCode::FAILURE;
    }
    println!(
        "{name}: {} rules, {} tuples: {:.1} ns/operation (remove or insert)",
        tm.len(),
        tm.tuple_count(),
        best / (2 * order.len()) as f64
    );
    ExitCode::SUCCESS
}
