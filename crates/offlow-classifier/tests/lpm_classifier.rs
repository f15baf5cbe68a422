//! FibClassifier against the linear oracle, and its refusal rules.

use offlow_classifier::lpm::prefix_mask;
use offlow_classifier::{
    Classify, FibClassifier, FibRuleError, Field, FlowKey, LinearClassifier, Match, PortRange, Rule,
};
use offlow_flow::present;
use proptest::prelude::*;

const K: u32 = 100;

fn route(id: u32, addr: u32, len: u8, priority: u32) -> Rule {
    let mut m = Match::ANY;
    m.set_exact(Field::EthType, 0x0800);
    m.set_prefix(Field::Ipv4Dst, u128::from(addr), u32::from(len));
    Rule::new(id, priority, m)
}

fn key(eth_type: u16, dst: u32, l3: bool) -> FlowKey {
    let mut k = FlowKey::ZERO;
    k.set(Field::EthType, u128::from(eth_type));
    k.set(Field::Ipv4Dst, u128::from(dst));
    if l3 {
        k.add_presence(present::L3);
    }
    k
}

#[test]
fn refuses_what_lpm_would_answer_differently() {
    let mut c = FibClassifier::new();
    c.try_insert(route(1, 0x0a00_0000, 8, 8 * K)).unwrap();
    c.try_insert(route(2, 0x0a01_0000, 16, 16 * K)).unwrap();
    assert_eq!(
        c.try_insert(route(3, 0x0a00_0000, 8, 9 * K)),
        Err(FibRuleError::SamePrefix { other: 1 })
    );
    assert_eq!(
        c.try_insert(route(4, 0x0a01_0100, 24, 12 * K)),
        Err(FibRuleError::PriorityOrder { other: 2 }),
        "longer prefix with lower priority than a covering one"
    );
    assert_eq!(
        c.try_insert(route(5, 0x0a00_0000, 12, 16 * K)),
        Err(FibRuleError::PriorityOrder { other: 2 }),
        "shorter prefix with priority not below a nested one"
    );
    let ported = route(6, 0x0a00_0000, 8, 1).with_ports(PortRange::ANY, PortRange::exact(80));
    assert!(!FibClassifier::accepts(&ported));
    assert_eq!(c.try_insert(ported), Err(FibRuleError::Shape));
    assert_eq!(c.len(), 2);
    assert_eq!(c.overflow_len(), 0);
    assert_eq!(c.lookup(&key(0x0800, 0x0a01_0203, true)), Some(2));
    assert_eq!(c.lookup(&key(0x0800, 0x0a02_0203, true)), Some(1));
    assert_eq!(c.lookup(&key(0x0806, 0x0a02_0203, true)), None, "ARP");
    // Through `Classify::insert` a refused rule is still honoured.
    c.insert(route(3, 0x0a00_0000, 8, 9 * K));
    assert_eq!(c.overflow_len(), 1);
    assert_eq!(c.lookup(&key(0x0800, 0x0a02_0203, true)), Some(3));
}

#[test]
fn default_route_matches_without_l3() {
    let mut c = FibClassifier::new();
    c.try_insert(route(1, 0, 0, 0)).unwrap();
    c.try_insert(route(2, 0x0a00_0000, 8, 8 * K)).unwrap();
    assert_eq!(c.lookup(&key(0x0800, 0x0a00_0001, true)), Some(2));
    // /0 sets no ipv4_dst mask, hence no L3 requirement; /8 requires L3.
    assert_eq!(c.lookup(&key(0x0800, 0x0a00_0001, false)), Some(1));
    assert_eq!(c.lookup(&key(0x86dd, 0x0a00_0001, true)), None);
}

#[derive(Debug, Clone)]
enum Op {
    /// A rule; `well_formed` picks priority = len*K + tiebreak.
    Insert {
        id: u32,
        addr: u32,
        len: u8,
        well_formed: bool,
        prio: u32,
        ported: bool,
    },
    Remove(u32),
}

fn op() -> impl Strategy<Value = Op> {
    let ins = (
        0u32..40,
        0u32..4,
        any::<u32>(),
        prop_oneof![0u8..=8, 9u8..=24, 25u8..=32],
        prop::bool::weighted(0.85),
        0u32..4000,
        prop::bool::weighted(0.05),
    )
        .prop_map(|(id, hi, lo, len, well_formed, prio, ported)| {
            let a = if len < 16 {
                lo
            } else {
                0x0a00_0000 | (hi << 16) | (lo & 0xffff)
            };
            Op::Insert {
                id,
                addr: a & prefix_mask(len),
                len,
                well_formed,
                prio,
                ported,
            }
        });
    prop_oneof![4 => ins, 1 => (0u32..40).prop_map(Op::Remove)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(debug_assertions) { 6 } else { 128 }))]

    #[test]
    fn fib_classifier_equals_linear(
        ops in prop::collection::vec(op(), 1..80),
        extra in prop::collection::vec((any::<u32>(), 0u8..4), 48),
    ) {
        let mut fib = FibClassifier::new();
        let mut lin = LinearClassifier::new();
        for op in &ops {
            match *op {
                Op::Insert { id, addr, len, well_formed, prio, ported } => {
                    let p = if well_formed { u32::from(len) * K + prio % K } else { prio };
                    let mut r = route(id, addr, len, p);
                    if ported {
                        r = r.with_ports(PortRange::ANY, PortRange::exact(80));
                    }
                    fib.insert(r.clone());
                    lin.insert(r);
                }
                Op::Remove(id) => {
                    prop_assert_eq!(fib.remove(id), lin.remove(id));
                }
            }
            prop_assert_eq!(fib.len(), lin.len());
        }
        // The FIB rebuilds its rules from compact routes; freed slots
        // (kept until reused) must not be listed.
        let mut listed: Vec<Rule> = fib.rules().collect();
        listed.sort_by_key(|r| r.id);
        let mut want: Vec<Rule> = lin.rules().to_vec();
        want.sort_by_key(|r| r.id);
        prop_assert_eq!(listed, want);
        let mut keys = Vec::new();
        for r in lin.rules() {
            let (v, m) = r.matcher.field(Field::Ipv4Dst);
            let (v, m) = (v as u32, m as u32);
            keys.extend([v, v | !m, v.wrapping_sub(1), (v | !m).wrapping_add(1)]);
        }
        let mut probes = Vec::new();
        for (i, a) in keys.into_iter().chain(extra.iter().map(|e| e.0)).enumerate() {
            let kind = extra[i % extra.len()].1;
            let mut k = match kind {
                0 => key(0x0806, a, true),
                1 => key(0x0800, a, false),
                _ => key(0x0800, a, true),
            };
            if kind == 3 {
                k.add_presence(present::L4);
                k.set(Field::TcpDst, 80);
            }
            probes.push(k);
        }
        for k in &probes {
            let want = lin.lookup(k);
            prop_assert_eq!(fib.lookup(k), want, "key {:?}", k);
            if let Some(id) = want {
                prop_assert_eq!(fib.get(id), lin.get(id));
            }
        }
    }
}
