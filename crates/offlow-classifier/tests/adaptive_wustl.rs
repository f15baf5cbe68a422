//! The table classifier on every WUSTL set: compiled (RFC where it fits),
//! after updates (snapshot dropped, TupleMerge serving), and recompiled —
//! every trace answer equals the oracle and the trace's first-match id.
mod common;

use common::{load_rules, load_trace, wustl_dir, wustl_sets};
use offlow_classifier::{Classifier, Classify, Compiled, LinearClassifier, RuleId};

#[test]
fn compiled_and_updated_tables_match_trace_and_oracle() {
    let Some(dir) = wustl_dir() else {
        eprintln!("NOTICE: WUSTL data directory absent; test skipped");
        return;
    };
    for (name, rules_path, trace_path) in wustl_sets(&dir) {
        // Debug builds check the small sets only (the oracle is slow there).
        if cfg!(debug_assertions) && (name.ends_with("_5K") || name.ends_with("_10K")) {
            continue;
        }
        let rules = load_rules(&rules_path);
        let trace = load_trace(&trace_path);
        let mut c = Classifier::new();
        for r in &rules {
            c.insert(r.clone());
        }
        let compiled = c.compile();
        eprintln!("{name}: {} rules, compiled {compiled:?}", rules.len());
        assert_eq!(
            c.serving(),
            if matches!(compiled, Compiled::Rfc { .. }) {
                "rfc"
            } else {
                "tuple"
            }
        );
        let keys: Vec<_> = trace.iter().map(|(k, _)| *k).collect();
        let mut batch = vec![None; keys.len()];
        c.lookup_batch(&keys, &mut batch);
        for (i, (k, want)) in trace.iter().enumerate() {
            assert_eq!(c.lookup(k), *want, "{name} line {}", i + 1);
            assert_eq!(batch[i], *want, "{name} line {} (batch)", i + 1);
        }

        // Remove every 7th rule: the snapshot must go, answers follow the oracle.
        let mut lin = LinearClassifier::new();
        for r in &rules {
            lin.insert(r.clone());
        }
        let removed: Vec<RuleId> = rules.iter().step_by(7).map(|r| r.id).collect();
        for id in &removed {
            assert_eq!(c.remove(*id).map(|r| r.id), Some(*id));
            lin.remove(*id);
        }
        assert_eq!(
            c.serving(),
            "tuple",
            "{name}: stale snapshot kept after removes"
        );
        let check = |c: &Classifier, what: &str| {
            for (i, (k, _)) in trace.iter().enumerate().step_by(3) {
                assert_eq!(c.lookup(k), lin.lookup(k), "{name} line {} {what}", i + 1);
            }
        };
        check(&c, "after removes");
        c.compile();
        check(&c, "recompiled");
    }
}
