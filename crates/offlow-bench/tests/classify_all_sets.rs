//! Every ClassBench rule set in the shared data, through the table
//! classifier (compiled where it fits), TupleMerge and the linear oracle:
//! every trace header gets the oracle's answer (and, for WUSTL traces, the
//! trace's first-match id). Also a 100K+-rule table made of the union of
//! every 10K set, checked against the oracle on a sample of real headers.
//!
//! Debug builds check the sets up to ~1K rules; `cargo test --release` (the
//! README's test command) checks them all.

use std::path::{Path, PathBuf};

use offlow_bench::classbench::{generate_headers, load_rules, load_trace, RuleSet, Trace};
use offlow_classifier::{Classifier, Classify, FlowKey, LinearClassifier, Rule, TupleMerge};

fn classbench_dir() -> Option<PathBuf> {
    let d = offlow_bench::shared_data_dir().map(|d| d.join("classbench"));
    match d {
        Some(d) if d.is_dir() => Some(d),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "shared data set absent under CI"
            );
            eprintln!("NOTICE: shared classbench data absent, test skipped");
            None
        }
    }
}

/// (rules, trace) pairs of both collections; `None` for the sets shipped
/// without a trace (headers are then generated from the rules).
fn sets(dir: &Path) -> Vec<(PathBuf, Option<PathBuf>)> {
    let mut out = Vec::new();
    for sub in ["wustl_pclasseval", "classbench_sets_lyxocs"] {
        let Ok(rd) = std::fs::read_dir(dir.join(sub)) else {
            continue;
        };
        let mut files: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
        files.sort();
        for f in &files {
            let name = f.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if name.contains("_trace") || name.ends_with(".md") || name.starts_with('.') {
                continue;
            }
            let plain = f.with_file_name(format!("{name}_trace"));
            let gz = f.with_file_name(format!("{name}_trace.gz"));
            let trace = [plain, gz].into_iter().find(|t| t.exists());
            out.push((f.clone(), trace));
        }
    }
    out
}

fn build<C: Classify + Default>(rules: &[Rule]) -> C {
    let mut c = C::default();
    for r in rules {
        c.insert(r.clone());
    }
    c
}

#[test]
fn every_set_agrees_with_the_oracle() {
    let Some(dir) = classbench_dir() else { return };
    let all = sets(&dir);
    assert!(
        all.len() >= 20,
        "expected the shared ClassBench sets, found {}",
        all.len()
    );
    let mut checked = 0;
    for (rules_path, trace_path) in all {
        let set: RuleSet = load_rules(&rules_path).expect("rule set parses");
        if cfg!(debug_assertions) && set.rules.len() > 1200 {
            continue;
        }
        let trace: Trace = match &trace_path {
            Some(t) => load_trace(t).expect("trace parses"),
            None => Trace {
                dialect: set.dialect,
                headers: generate_headers(&set.rules, 10 * set.rules.len(), 7),
                expected: None,
                generating: None,
            },
        };
        let rules = set.to_rules();
        let keys: Vec<FlowKey> = trace.keys();
        let lin: LinearClassifier = build(&rules);
        let tm: TupleMerge = build(&rules);
        let mut auto: Classifier = build(&rules);
        let compiled = auto.compile();
        // The oracle is a linear scan: check every header of sets up to 2K
        // rules, a spread-out sample of the larger ones.
        let step = if rules.len() > 2000 { 7 } else { 1 };
        let mut batch = vec![None; keys.len()];
        auto.lookup_batch(&keys, &mut batch);
        let name = rules_path.display();
        for i in (0..keys.len()).step_by(step) {
            let want = lin.lookup(&keys[i]);
            if let Some(exp) = &trace.expected {
                assert_eq!(want, exp[i], "{name}: oracle vs trace, header {}", i + 1);
            }
            assert_eq!(tm.lookup(&keys[i]), want, "{name}: tuple, header {}", i + 1);
            assert_eq!(
                auto.lookup(&keys[i]),
                want,
                "{name}: {}, header {}",
                auto.serving(),
                i + 1
            );
            assert_eq!(batch[i], want, "{name}: batch, header {}", i + 1);
        }
        eprintln!(
            "{name}: {} rules, {} headers, {compiled:?}",
            rules.len(),
            keys.len()
        );
        checked += 1;
    }
    assert!(checked > 0);
}

/// The union of every 10K set (well over 100K rules, real ClassBench
/// shapes), priorities in file order across the files.
#[test]
#[cfg_attr(debug_assertions, ignore = "slow in debug; run with --release")]
fn union_of_10k_sets_beyond_100k_rules() {
    let Some(dir) = classbench_dir() else { return };
    let mut rules: Vec<Rule> = Vec::new();
    let mut keys: Vec<FlowKey> = Vec::new();
    for (rules_path, trace_path) in sets(&dir) {
        let name = rules_path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("");
        if !(name.ends_with("_10K") || name.ends_with("_10k")) {
            continue;
        }
        let set = load_rules(&rules_path).expect("rule set parses");
        let Some(trace_path) = trace_path else {
            continue;
        };
        let trace = load_trace(&trace_path).expect("trace parses");
        let base = rules.len();
        rules.extend(set.to_rules().into_iter().map(|mut r| {
            r.id += base as u32;
            r
        }));
        keys.extend(trace.keys().into_iter().step_by(97));
    }
    // Re-rank: earlier files first, file order within a file.
    let n = rules.len() as u32;
    for (i, r) in rules.iter_mut().enumerate() {
        r.priority = n - i as u32;
    }
    assert!(rules.len() >= 100_000, "only {} rules", rules.len());
    let lin: LinearClassifier = build(&rules);
    let tm: TupleMerge = build(&rules);
    let mut removed = 0;
    let mut tm2 = tm.clone();
    let mut lin2 = lin.clone();
    for r in rules.iter().step_by(5) {
        tm2.remove(r.id);
        lin2.remove(r.id);
        removed += 1;
    }
    for k in &keys {
        assert_eq!(tm.lookup(k), lin.lookup(k));
        assert_eq!(tm2.lookup(k), lin2.lookup(k));
    }
    eprintln!(
        "{} rules ({removed} removed in the second pass), {} headers",
        rules.len(),
        keys.len()
    );
}
