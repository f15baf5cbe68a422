//! The table classifier on every WUSTL set: compiled (RFC where it fits),
//! after removals and insertions (the snapshot serving through its
//! overlay), and recompiled — every trace answer equals the oracle and the
//! trace's first-match id.
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

        // Remove every 7th rule: a snapshot stays, skipping them.
        let mut lin = LinearClassifier::new();
        for r in &rules {
            lin.insert(r.clone());
        }
        let removed: Vec<RuleId> = rules.iter().step_by(7).map(|r| r.id).collect();
        for id in &removed {
            assert_eq!(c.remove(*id).map(|r| r.id), Some(*id));
            lin.remove(*id);
        }
        let rfc = c.serving() == "rfc";
        if rfc {
            let o = c.overlay().expect("a snapshot serves");
            assert_eq!(o.dead, removed.len(), "{name}");
            assert!(!c.is_compiled(), "{name}: an overlay asks for a compile");
            let candidates = c.compiled().expect("snapshot").rfc().lists_candidates();
            eprintln!("{name}: candidates kept: {candidates}");
        }
        let check = |c: &Classifier, lin: &LinearClassifier, what: &str| {
            for (i, (k, _)) in trace.iter().enumerate().step_by(3) {
                assert_eq!(c.lookup(k), lin.lookup(k), "{name} line {} {what}", i + 1);
            }
            let mut out = vec![None; keys.len()];
            c.lookup_batch(&keys, &mut out);
            for (i, (k, got)) in keys.iter().zip(&out).enumerate().step_by(3) {
                assert_eq!(*got, lin.lookup(k), "{name} line {} {what} (batch)", i + 1);
            }
        };
        check(&c, &lin, "after removes");

        // Put every other removed rule back under a new id (recognised: the
        // WUSTL priorities are distinct), and a few rules that are new.
        let next_id = rules.iter().map(|r| r.id).max().unwrap_or(0) + 1;
        for (i, r) in rules.iter().step_by(14).enumerate() {
            let again = offlow_classifier::Rule {
                id: next_id + i as u32,
                ..r.clone()
            };
            lin.insert(again.clone());
            c.insert(again);
        }
        for (i, r) in rules.iter().skip(3).step_by(rules.len() / 5).enumerate() {
            let shifted = offlow_classifier::Rule {
                id: next_id + 100_000 + i as u32,
                priority: r.priority + 1,
                ..r.clone()
            };
            lin.insert(shifted.clone());
            c.insert(shifted);
        }
        if rfc {
            let o = c.overlay().expect("a snapshot still serves");
            assert_eq!(
                o.revived as usize,
                rules.iter().step_by(14).count(),
                "{name}"
            );
            assert!(o.added > 0, "{name}");
        }
        check(&c, &lin, "after re-inserts");
        c.compile();
        assert!(c.is_compiled() || c.serving() == "tuple", "{name}");
        check(&c, &lin, "recompiled");
    }
}

/// A table of more than 65,536 rules whose RFC build splits into parts:
/// a small part still answers with global ranks above `u16::MAX`, which
/// must not be stored in a 16-bit table (this panicked: a BGP table that
/// gained one non-route rule, compiled by `offlow run`). With the RFC
/// size limit lifted the compile either succeeds with answers equal to
/// TupleMerge's or declines; by default such a table is declined at once.
#[test]
fn compile_of_a_big_table_with_a_small_part_is_sound() {
    use offlow_classifier::{ClassifierConfig, Field, FlowKey, Match, Rule};
    let mut c = Classifier::with_config(ClassifierConfig {
        rfc_max_rules: usize::MAX,
        ..ClassifierConfig::default()
    });
    let n = 70_000u32;
    for i in 0..n {
        let mut m = Match::ANY;
        m.set_exact(Field::EthType, 0x0800);
        m.set_prefix(Field::Ipv4Dst, u128::from(i << 8), 24);
        c.insert(Rule::new(i, 25, m));
    }
    let mut m = Match::ANY;
    m.set_exact(Field::EthType, 0x0800);
    m.set_exact(Field::IpProto, 6);
    c.insert(Rule::new(n, 1, m));
    let keys: Vec<FlowKey> = (0..5000u32)
        .map(|i| {
            let mut k = FlowKey::ZERO;
            k.set(Field::EthType, 0x0800);
            k.set(Field::Ipv4Dst, u128::from(i.wrapping_mul(0x01f3_5a7b)));
            k.set(Field::IpProto, if i % 2 == 0 { 6 } else { 17 });
            k.add_presence(offlow_flow::present::L3);
            k
        })
        .collect();
    let before: Vec<_> = keys.iter().map(|k| c.lookup(k)).collect();
    let mut by_default = Classifier::new();
    for r in c.rules() {
        by_default.insert(r);
    }
    let declined = by_default.compile();
    assert!(
        matches!(&declined, Compiled::None { reason } if reason.contains("> 65536")),
        "{declined:?}"
    );
    let compiled = c.compile();
    assert!(!matches!(compiled, Compiled::Fib), "{compiled:?}");
    let after: Vec<_> = keys.iter().map(|k| c.lookup(k)).collect();
    assert_eq!(before, after, "{compiled:?}");
    assert!(before.contains(&Some(n)));
}
