//! Differential test of the table classifier against the linear oracle,
//! with compiles at random points: rule sets drawn from three families
//! (FIB-shaped prefixes, IPv4 5-tuple ACL rules, and anything) so that every
//! mode is entered — FIB, RFC snapshot, TupleMerge — and left again by
//! updates that the compiled structure cannot serve. Removed rules come back
//! under old and new ids, so an RFC snapshot's overlay recognises some
//! (equal priorities included, where ids must keep their order).
use offlow_classifier::{
    Classifier, ClassifierConfig, Classify, Field, FlowKey, LinearClassifier, Match, PortRange,
    Rule, RuleId,
};
use offlow_flow::present;
use proptest::prelude::*;

const ADDRS: [u32; 4] = [0x0a00_0000, 0x0a01_0000, 0xc0a8_0100, 0x0a01_0280];

#[derive(Debug, Clone)]
enum Spec {
    /// `eth_type=0x0800, ipv4_dst=ADDRS[a]/len`, priority rising with len.
    Fib { a: usize, len: u32, tiebreak: u32 },
    /// A 5-tuple ACL rule.
    Acl {
        a: usize,
        slen: u32,
        dlen: u32,
        proto: Option<u8>,
        dport: PortRange,
        prio: u32,
    },
    /// A rule on a field no accelerator takes (eth_src).
    Other { mac: u64, prio: u32 },
    /// `eth_type=0x0800` alone: an RFC-shaped rule that also matches IPv4
    /// frames without L3, which lie outside the RFC tables' domain.
    AnyIpv4 { prio: u32 },
}

fn spec(family: u8) -> BoxedStrategy<Spec> {
    let fib = (0..ADDRS.len(), 0u32..=32, 0u32..8).prop_map(|(a, len, tiebreak)| Spec::Fib {
        a,
        len,
        tiebreak,
    });
    let acl = (
        0..ADDRS.len(),
        0u32..=32,
        0u32..=32,
        prop::option::of(prop_oneof![Just(6u8), Just(17u8)]),
        prop_oneof![
            Just(PortRange::ANY),
            Just(PortRange::exact(80)),
            Just(PortRange {
                lo: 1024,
                hi: 65535
            })
        ],
        0u32..50,
    )
        .prop_map(|(a, slen, dlen, proto, dport, prio)| Spec::Acl {
            a,
            slen,
            dlen,
            proto,
            dport,
            prio,
        });
    let other = (0u64..4, 0u32..50).prop_map(|(mac, prio)| Spec::Other { mac, prio });
    let any_ipv4 = (0u32..50).prop_map(|prio| Spec::AnyIpv4 { prio });
    match family {
        0 => fib.boxed(),
        1 => prop_oneof![18 => acl, 2 => fib, 1 => any_ipv4].boxed(),
        _ => prop_oneof![3 => acl, 2 => fib, 1 => other].boxed(),
    }
}

fn build(id: RuleId, s: &Spec) -> Rule {
    let mut m = Match::ANY;
    match *s {
        Spec::Fib { a, len, tiebreak } => {
            m.set_exact(Field::EthType, 0x0800);
            m.set_prefix(Field::Ipv4Dst, ADDRS[a] as u128, len);
            Rule::new(id, len * 8 + tiebreak, m)
        }
        Spec::Acl {
            a,
            slen,
            dlen,
            proto,
            dport,
            prio,
        } => {
            m.set_exact(Field::EthType, 0x0800);
            m.set_prefix(Field::Ipv4Src, ADDRS[(a + 1) % ADDRS.len()] as u128, slen);
            m.set_prefix(Field::Ipv4Dst, ADDRS[a] as u128, dlen);
            if let Some(p) = proto {
                m.set_exact(Field::IpProto, p as u128);
            }
            Rule::new(id, prio, m).with_ports(PortRange::ANY, dport)
        }
        Spec::Other { mac, prio } => {
            m.set_exact(Field::EthSrc, mac as u128);
            Rule::new(id, prio, m)
        }
        Spec::AnyIpv4 { prio } => {
            m.set_exact(Field::EthType, 0x0800);
            Rule::new(id, prio, m)
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Insert(RuleId, Spec),
    Remove(RuleId),
    /// Insert a rule removed earlier (the `n`th, cyclically) again, under
    /// this id: what an RFC snapshot's overlay recognises.
    Reinsert(usize, RuleId),
    Compile,
}

fn ops(family: u8) -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            6 => (0u32..40, spec(family)).prop_map(|(id, s)| Op::Insert(id, s)),
            2 => (0u32..40).prop_map(Op::Remove),
            2 => (any::<usize>(), 0u32..80).prop_map(|(n, id)| Op::Reinsert(n, id)),
            1 => Just(Op::Compile),
        ],
        1..60,
    )
}

/// Keys near the rule values: every address of the pool with low-bit noise,
/// ports in and out of the ranges, TCP/UDP, with and without L4, and now
/// and then an IPv4 frame whose header did not parse (no L3).
fn key(
    a: usize,
    noise: u32,
    sip: usize,
    dport: u16,
    proto: u8,
    l4: Option<bool>,
    mac: u64,
) -> FlowKey {
    let mut k = FlowKey::ZERO;
    k.set(Field::EthSrc, mac as u128);
    k.set(Field::EthType, 0x0800);
    let Some(l4) = l4 else {
        return k;
    };
    k.set(Field::Ipv4Dst, (ADDRS[a] ^ noise) as u128);
    k.set(Field::Ipv4Src, (ADDRS[sip] ^ (noise >> 3)) as u128);
    k.set(Field::IpProto, proto as u128);
    k.add_presence(present::L3);
    if l4 {
        k.set(Field::TcpDst, dport as u128);
        k.add_presence(present::L4);
    }
    k
}

fn keys() -> impl Strategy<Value = Vec<FlowKey>> {
    prop::collection::vec(
        (
            0..ADDRS.len(),
            prop_oneof![Just(0u32), 0u32..0x400, any::<u32>()],
            0..ADDRS.len(),
            prop_oneof![Just(80u16), Just(1500u16), Just(22u16)],
            prop_oneof![Just(6u8), Just(17u8), Just(1u8)],
            prop_oneof![16 => prop::bool::weighted(0.8).prop_map(Some), 1 => Just(None)],
            0u64..4,
        )
            .prop_map(|(a, n, s, d, p, l4, mac)| key(a, n, s, d, p, l4, mac)),
        16,
    )
}

const CASES: u32 = if cfg!(debug_assertions) { 200 } else { 2000 };

/// Runs the differential check over random cases and also asserts that the
/// generator really drove the classifier through every mode (a test that
/// never reaches the FIB or the RFC snapshot would prove nothing about them).
#[test]
fn differential_vs_linear() {
    use proptest::test_runner::{Config, TestRunner};
    use std::cell::Cell;
    let seen = [Cell::new(0usize), Cell::new(0), Cell::new(0)];
    // Steps served by a snapshot with removed, inserted and recognised
    // rules in its overlay.
    let overlay = [Cell::new(0usize), Cell::new(0), Cell::new(0)];
    // Steps served by a snapshot with no TupleMerge beside it, and hits
    // it gave for keys without L3 (outside its tables' domain).
    let alone = [Cell::new(0usize), Cell::new(0)];
    let mut runner = TestRunner::new(Config::with_cases(CASES));
    let strategy = ((0u8..3).prop_flat_map(ops), keys());
    runner
        .run(&strategy, |(ops, keys)| {
            // Low thresholds so small random sets reach every mode.
            let mut c = Classifier::with_config(ClassifierConfig {
                fib_min_rules: 3,
                rfc_min_rules: 1,
                ..ClassifierConfig::default()
            });
            let mut lin = LinearClassifier::new();
            let mut out = vec![None; keys.len()];
            let mut removed: Vec<Rule> = Vec::new();
            for op in &ops {
                match op {
                    Op::Insert(id, s) => {
                        let r = build(*id, s);
                        lin.insert(r.clone());
                        c.insert(r);
                    }
                    Op::Remove(id) => {
                        let gone = lin.remove(*id);
                        prop_assert_eq!(c.remove(*id), gone.clone());
                        removed.extend(gone);
                    }
                    Op::Reinsert(n, id) => {
                        if !removed.is_empty() {
                            let r = Rule {
                                id: *id,
                                ..removed[n % removed.len()].clone()
                            };
                            lin.insert(r.clone());
                            c.insert(r);
                        }
                    }
                    Op::Compile => {
                        c.compile();
                    }
                }
                prop_assert_eq!(c.len(), lin.len());
                for id in 0..80 {
                    prop_assert_eq!(
                        c.get(id),
                        lin.get(id),
                        "get({}), serving {}",
                        id,
                        c.serving()
                    );
                }
                let mut held = c.rules();
                held.sort_by_key(|r| r.id);
                let mut want = lin.rules().to_vec();
                want.sort_by_key(|r| r.id);
                prop_assert_eq!(held, want);
                let snapshot_alone = c.serving() == "rfc" && !c.keeps_tuple();
                alone[0].set(alone[0].get() + usize::from(snapshot_alone));
                let mode = ["fib", "rfc", "tuple"]
                    .iter()
                    .position(|m| *m == c.serving());
                if let Some(i) = mode {
                    seen[i].set(seen[i].get() + 1);
                }
                if let Some(o) = c.overlay() {
                    for (cell, on) in overlay.iter().zip([o.dead > 0, o.added > 0, o.revived > 0]) {
                        cell.set(cell.get() + usize::from(on));
                    }
                }
                c.lookup_batch(&keys, &mut out);
                for (k, got) in keys.iter().zip(&out) {
                    let want = lin.lookup(k);
                    prop_assert_eq!(c.lookup(k), want, "serving {} key {:?}", c.serving(), k);
                    prop_assert_eq!(*got, want, "batch, serving {}", c.serving());
                    let no_l3 = k.presence() & present::L3 == 0;
                    if snapshot_alone && no_l3 && want.is_some() {
                        alone[1].set(alone[1].get() + 1);
                    }
                }
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    let counts: Vec<usize> = seen.iter().map(Cell::get).collect();
    assert!(
        counts.iter().all(|&n| n > 0),
        "modes fib/rfc/tuple seen {counts:?}"
    );
    let counts: Vec<usize> = overlay.iter().map(Cell::get).collect();
    assert!(
        counts.iter().all(|&n| n > 0),
        "snapshot overlays with removed/added/recognised rules seen {counts:?}"
    );
    let counts: Vec<usize> = alone.iter().map(Cell::get).collect();
    assert!(
        counts.iter().all(|&n| n > 0),
        "steps with a snapshot alone / its hits for keys without L3 {counts:?}"
    );
}
