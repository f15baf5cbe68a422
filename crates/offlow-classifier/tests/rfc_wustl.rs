//! RFC on the small WUSTL ClassBench sets (acl1, fw1, ipc1): every trace
//! line's answer equals both the oracle and the trace's first-match id, for
//! single and batch lookups.
mod common;

use common::{load_rules, load_trace, wustl_dir};
use offlow_classifier::{Classify, LinearClassifier, Rfc, RfcAnswer};

#[test]
fn wustl_small_sets_match_trace_and_oracle() {
    let Some(dir) = wustl_dir() else {
        eprintln!("NOTICE: WUSTL data directory absent; test skipped");
        return;
    };
    for name in ["acl1", "fw1", "ipc1"] {
        let rules = load_rules(&dir.join(name));
        let trace = load_trace(&dir.join(format!("{name}_trace")));
        assert!(!rules.is_empty() && !trace.is_empty(), "{name}: empty data");
        let rfc = Rfc::build(&rules).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(rfc.len(), rules.len());
        let mut lin = LinearClassifier::new();
        for r in &rules {
            lin.insert(r.clone());
        }
        let keys: Vec<_> = trace.iter().map(|(k, _)| *k).collect();
        let mut batch = vec![RfcAnswer::NotApplicable; keys.len()];
        rfc.lookup_batch(&keys, &mut batch);
        let mut hits = 0;
        for (i, (k, want)) in trace.iter().enumerate() {
            let want_answer = want.map_or(RfcAnswer::NoMatch, RfcAnswer::Hit);
            assert_eq!(lin.lookup(k), *want, "{name} line {}: oracle", i + 1);
            assert_eq!(rfc.lookup(k), want_answer, "{name} line {}: rfc", i + 1);
            assert_eq!(batch[i], want_answer, "{name} line {}: batch", i + 1);
            hits += want.is_some() as usize;
        }
        assert!(hits > 0, "{name}: trace hits no rule");
        eprintln!("{name}: {}", rfc.stats());
    }
}
