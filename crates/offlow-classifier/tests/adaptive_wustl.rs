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
