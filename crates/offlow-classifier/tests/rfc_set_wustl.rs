//! RfcSet on the WUSTL ClassBench sets a single RFC cannot hold within its
//! budget (fw1_5K, fw1_10K, ipc1_5K, ipc1_10K): every trace line's answer,
//! single and batch, equals the trace's first-match id. Release builds only
//! (a debug build of the 10K sets takes minutes).
mod common;

use common::{load_rules, load_trace, wustl_dir, wustl_sets};
use offlow_classifier::rfc::RfcSet;
use offlow_classifier::RfcAnswer;

#[test]
#[cfg_attr(debug_assertions, ignore)]
fn wustl_large_sets_match_trace() {
    let Some(dir) = wustl_dir() else {
        eprintln!("NOTICE: WUSTL data directory absent; test skipped");
        return;
    };
    let wanted = ["fw1_5K", "fw1_10K", "ipc1_5K", "ipc1_10K"];
    let sets: Vec<_> = wustl_sets(&dir)
        .into_iter()
        .filter(|(n, _, _)| wanted.contains(&n.as_str()))
        .collect();
    assert_eq!(sets.len(), wanted.len(), "missing WUSTL sets");
    for (name, rules_path, trace_path) in sets {
        let rules = load_rules(&rules_path);
        let trace = load_trace(&trace_path);
        assert!(!rules.is_empty() && !trace.is_empty(), "{name}: empty data");
        let set = RfcSet::build(&rules).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(set.len(), rules.len());
        let keys: Vec<_> = trace.iter().map(|(k, _)| *k).collect();
        let mut batch = vec![RfcAnswer::NotApplicable; keys.len()];
        set.lookup_batch(&keys, &mut batch);
        let mut hits = 0;
        for (i, (k, want)) in trace.iter().enumerate() {
            let want = want.map_or(RfcAnswer::NoMatch, RfcAnswer::Hit);
            assert_eq!(set.lookup(k), want, "{name} line {}: single", i + 1);
            assert_eq!(batch[i], want, "{name} line {}: batch", i + 1);
            hits += matches!(want, RfcAnswer::Hit(_)) as usize;
        }
        assert!(hits > 0, "{name}: trace hits no rule");
        eprintln!("{name}: {}", set.stats());
    }
}
