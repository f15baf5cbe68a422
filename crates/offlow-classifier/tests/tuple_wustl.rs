//! Every WUSTL ClassBench set: each trace line's first match equals the
//! trace's rule id, for the oracle and for TupleMerge (100%).
//!
//! The sets with plain-text traces (base, _100, _1K) run always; the 5K and
//! 10K sets (gzip traces, ~10^9 oracle rule checks) are ignored in debug
//! builds: run them with `cargo test --release -p offlow-classifier --test
//! tuple_wustl` (about 10 s).
mod common;

use common::{load_rules, load_trace, wustl_dir, wustl_sets};
use offlow_classifier::{Classify, LinearClassifier, RuleId, TupleMerge};

#[test]
fn wustl_small_sets_first_match() {
    check_sets(false);
}

#[test]
#[cfg_attr(debug_assertions, ignore = "slow in debug builds: run with --release")]
fn wustl_large_sets_first_match() {
    check_sets(true);
}

fn check_sets(large: bool) {
    let Some(dir) = wustl_dir() else {
        eprintln!("NOTICE: WUSTL data directory absent; test skipped");
        return;
    };
    let sets = wustl_sets(&dir);
    assert!(sets.len() >= 3, "expected acl1/fw1/ipc1 at least");
    let mut checked = 0;
    for (name, rules_path, trace_path) in sets {
        let is_large = name.ends_with("_5K") || name.ends_with("_10K");
        if is_large != large {
            continue;
        }
        checked += 1;
        let rules = load_rules(&rules_path);
        let trace = load_trace(&trace_path);
        let mut lin = LinearClassifier::new();
        let mut tm = TupleMerge::new();
        for r in &rules {
            lin.insert(r.clone());
            tm.insert(r.clone());
        }
        assert_eq!(tm.len(), rules.len());
        let keys: Vec<_> = trace.iter().map(|(k, _)| *k).collect();
        let mut batch: Vec<Option<RuleId>> = vec![None; keys.len()];
        tm.lookup_batch(&keys, &mut batch);
        for (i, (k, want)) in trace.iter().enumerate() {
            assert_eq!(tm.lookup(k), *want, "{name} line {}: tuple", i + 1);
            assert_eq!(batch[i], *want, "{name} line {}: tuple batch", i + 1);
            assert_eq!(lin.lookup(k), *want, "{name} line {}: oracle", i + 1);
        }
        eprintln!(
            "{name}: {} rules, {} trace lines, {} tuples: all first matches agree",
            rules.len(),
            trace.len(),
            tm.tuple_count()
        );
    }
    assert!(checked >= 3, "only {checked} sets found");
}
