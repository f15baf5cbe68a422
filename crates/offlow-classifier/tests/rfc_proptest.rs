//! Differential tests: RFC against the linear oracle on random 5-tuple rule
//! sets (prefixes, arbitrary masks, port ranges and masks combined, protocol
//! exact / masked / wild, priority ties, rules with and without presence
//! requirements) and random keys (derived from rules so they hit, keys
//! without L4 or L3, non-IPv4 keys). Also: batch == single for every batch
//! size 0..=65, and shape / budget rejection.

use offlow_classifier::rfc::{RfcConfig, RfcError, RfcSet, RfcSetConfig};
use offlow_classifier::{Classify, Field, FlowKey, LinearClassifier, Match, PortRange, Rfc, Rule};
use offlow_classifier::{RfcAnswer, RfcRank};
use offlow_flow::present;
use proptest::prelude::*;

/// A small pool of base addresses so that rules overlap and keys hit them.
const BASES: [u32; 4] = [0x0a00_0000, 0x0a01_0200, 0xc0a8_0101, 0x0a01_ff00];
const PORTS: [u16; 8] = [0, 1, 79, 80, 1023, 1024, 8080, 65535];

#[derive(Debug, Clone)]
enum Addr {
    Prefix(u32, u32),
    Masked(u32, u32),
}

fn addr() -> impl Strategy<Value = Addr> {
    prop_oneof![
        3 => (0..BASES.len(), 0u32..=32, any::<u8>())
            .prop_map(|(b, l, x)| Addr::Prefix(BASES[b] ^ x as u32, l)),
        1 => (0..BASES.len(), any::<u32>()).prop_map(|(b, m)| Addr::Masked(BASES[b], m)),
        1 => (0..BASES.len(), 0u32..32)
            .prop_map(|(b, s)| Addr::Masked(BASES[b], 0xffff_0000 | (1 << s) )),
    ]
}

#[derive(Debug, Clone)]
struct PortSpec {
    range: PortRange,
    mask: Option<(u16, u16)>,
}

fn port() -> impl Strategy<Value = PortSpec> {
    let range = prop_oneof![
        2 => Just(PortRange::ANY),
        2 => (0..PORTS.len(), 0..PORTS.len()).prop_map(|(a, b)| {
            let (lo, hi) = (PORTS[a.min(b)], PORTS[a.max(b)]);
            PortRange { lo, hi }
        }),
        1 => any::<u16>().prop_map(PortRange::exact),
    ];
    let mask = prop_oneof![
        3 => Just(None),
        1 => (0..PORTS.len(), any::<u16>()).prop_map(|(p, m)| Some((PORTS[p], m))),
        1 => (0..PORTS.len(), 0u32..=16).prop_map(|(p, l)| {
            let m = if l == 0 { 0 } else { (0xffffu32 << (16 - l)) as u16 };
            Some((PORTS[p], m))
        }),
    ];
    (range, mask).prop_map(|(range, mask)| PortSpec { range, mask })
}

#[derive(Debug, Clone)]
struct RuleSpec {
    prio: u32,
    src: Addr,
    dst: Addr,
    proto: Option<(u8, u8)>,
    sport: PortSpec,
    dport: PortSpec,
    /// Add presence requirements by hand: 0 none, 1 L3, 2 L3|L4.
    presence: u8,
}

fn rule_spec() -> impl Strategy<Value = RuleSpec> {
    let proto = prop_oneof![
        2 => Just(None),
        3 => prop::sample::select(vec![1u8, 6, 17]).prop_map(|p| Some((p, 0xff))),
        1 => (any::<u8>(), any::<u8>()).prop_map(|(p, m)| Some((p, m))),
    ];
    (0u32..4, addr(), addr(), proto, port(), port(), 0u8..3).prop_map(
        |(prio, src, dst, proto, sport, dport, presence)| RuleSpec {
            prio,
            src,
            dst,
            proto,
            sport,
            dport,
            presence,
        },
    )
}

fn set_addr(m: &mut Match, f: Field, a: &Addr) {
    match *a {
        Addr::Prefix(v, l) => m.set_prefix(f, v as u128, l),
        Addr::Masked(v, mask) => m.set_masked(f, v as u128, mask as u128),
    };
}

/// Rules with unique ids (ids deliberately not in priority order).
fn make_rules(specs: &[RuleSpec]) -> Vec<Rule> {
    specs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let mut m = Match::ANY;
            m.set_exact(Field::EthType, 0x0800);
            set_addr(&mut m, Field::Ipv4Src, &s.src);
            set_addr(&mut m, Field::Ipv4Dst, &s.dst);
            if let Some((p, pm)) = s.proto {
                m.set_masked(Field::IpProto, p as u128, pm as u128);
            }
            if let Some((v, pm)) = s.sport.mask {
                m.set_masked(Field::TcpSrc, v as u128, pm as u128);
            }
            if let Some((v, pm)) = s.dport.mask {
                m.set_masked(Field::TcpDst, v as u128, pm as u128);
            }
            let need = match s.presence {
                1 => present::L3,
                2 => present::L3 | present::L4,
                _ => 0,
            };
            m.mask.add_presence(need);
            m.value.add_presence(need);
            let id = (i as u32 * 7919) % 1000 + 1000 * (i as u32 / 1000);
            Rule::new(id, s.prio, m).with_ports(s.sport.range, s.dport.range)
        })
        .collect()
}

#[derive(Debug, Clone)]
struct KeySpec {
    /// Index of the rule to aim at (modulo the rule count).
    target: usize,
    /// Bits to flip in sip, dip, ports, proto.
    flips: (u32, u32, u16, u16, u8),
    /// Port chosen from PORTS (or the rule's range bounds).
    port_pick: (usize, usize),
    /// 0: IPv4 L3|L4, 1: IPv4 L3 only, 2: IPv4 no layers, 3: IPv6 eth_type.
    kind: u8,
    extra_presence: u16,
}

fn key_spec() -> impl Strategy<Value = KeySpec> {
    let flip32 =
        prop_oneof![3 => Just(0u32), 1 => any::<u32>(), 1 => (0u32..32).prop_map(|s| 1 << s)];
    let flip16 = prop_oneof![3 => Just(0u16), 1 => any::<u16>()];
    (
        any::<usize>(),
        (
            flip32.clone(),
            flip32,
            flip16.clone(),
            flip16,
            prop_oneof![3 => Just(0u8), 1 => any::<u8>()],
        ),
        (0usize..PORTS.len() + 2, 0usize..PORTS.len() + 2),
        prop_oneof![8 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8), 1 => Just(3u8)],
        prop_oneof![3 => Just(0u16), 1 => Just(present::VLAN | present::FRAG)],
    )
        .prop_map(|(target, flips, port_pick, kind, extra_presence)| KeySpec {
            target,
            flips,
            port_pick,
            kind,
            extra_presence,
        })
}

fn pick_port(r: PortRange, pick: usize) -> u16 {
    match pick {
        p if p < PORTS.len() => PORTS[p],
        p if p == PORTS.len() => r.lo,
        _ => r.hi,
    }
}

fn make_key(rules: &[Rule], s: &KeySpec) -> FlowKey {
    let mut k = FlowKey::ZERO;
    let (sip, dip, sp, dp, proto) = match rules.get(s.target % rules.len().max(1)) {
        Some(r) => (
            r.matcher.value.get(Field::Ipv4Src) as u32,
            r.matcher.value.get(Field::Ipv4Dst) as u32,
            pick_port(r.src_port, s.port_pick.0) | r.matcher.value.get(Field::TcpSrc) as u16,
            pick_port(r.dst_port, s.port_pick.1) | r.matcher.value.get(Field::TcpDst) as u16,
            r.matcher.value.get(Field::IpProto) as u8,
        ),
        None => (0, 0, 0, 0, 0),
    };
    let f = s.flips;
    k.set(Field::Ipv4Src, (sip ^ f.0) as u128);
    k.set(Field::Ipv4Dst, (dip ^ f.1) as u128);
    k.set(Field::TcpSrc, (sp ^ f.2) as u128);
    k.set(Field::TcpDst, (dp ^ f.3) as u128);
    k.set(Field::IpProto, (proto ^ f.4) as u128);
    let (eth, pres) = match s.kind {
        0 => (0x0800, present::L3 | present::L4),
        1 => (0x0800, present::L3),
        2 => (0x0800, 0),
        _ => (0x86dd, present::L3 | present::L4),
    };
    k.set(Field::EthType, eth);
    k.add_presence(pres | s.extra_presence);
    k
}

fn in_domain(k: &FlowKey) -> bool {
    let l34 = present::L3 | present::L4;
    k.get(Field::EthType) == 0x0800 && k.presence() & l34 == l34
}

/// Every answer of `lookup` equals the linear oracle's (NotApplicable only
/// for IPv4 keys outside the compiled domain), and `lookup_batch` equals
/// `lookup` for every batch size 0..=65 (crossing the 64-key slice).
fn answers_match_oracle(
    rules: &[Rule],
    keys: &[FlowKey],
    lookup: impl Fn(&FlowKey) -> RfcAnswer,
    lookup_batch: impl Fn(&[FlowKey], &mut [RfcAnswer]),
) -> Result<(), TestCaseError> {
    let mut lin = LinearClassifier::new();
    for r in rules {
        lin.insert(r.clone());
    }
    let mut single = Vec::with_capacity(keys.len());
    for k in keys {
        let want = lin.lookup(k);
        let got = lookup(k);
        match got {
            RfcAnswer::Hit(id) => prop_assert_eq!(Some(id), want, "key {:?}", k),
            RfcAnswer::NoMatch => prop_assert_eq!(None, want, "key {:?}", k),
            RfcAnswer::NotApplicable => prop_assert!(
                k.get(Field::EthType) == 0x0800 && !in_domain(k),
                "NotApplicable for an in-domain or non-IPv4 key {:?}",
                k
            ),
        }
        if in_domain(k) {
            prop_assert_ne!(got, RfcAnswer::NotApplicable);
        }
        single.push(got);
    }
    let mut out = vec![RfcAnswer::NotApplicable; 66];
    for n in 0..=keys.len().min(65) {
        out.fill(RfcAnswer::NotApplicable);
        lookup_batch(&keys[..n], &mut out[..n]);
        prop_assert_eq!(&out[..n], &single[..n], "batch size {}", n);
    }
    Ok(())
}

fn check(rules: &[Rule], keys: &[FlowKey]) -> Result<(), TestCaseError> {
    let rfc = Rfc::build(rules).map_err(|e| TestCaseError::fail(format!("build: {e}")))?;
    answers_match_oracle(
        rules,
        keys,
        |k| rfc.lookup(k),
        |ks, out| rfc.lookup_batch(ks, out),
    )
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if cfg!(debug_assertions) { 48 } else { 512 },
        ..ProptestConfig::default()
    })]

    #[test]
    fn rfc_matches_linear_oracle(
        specs in prop::collection::vec(rule_spec(), 0..40),
        kspecs in prop::collection::vec(key_spec(), 66..130),
    ) {
        let rules = make_rules(&specs);
        let keys: Vec<FlowKey> = kspecs.iter().map(|s| make_key(&rules, s)).collect();
        check(&rules, &keys)?;
    }
}

fn ipv4_rule(id: u32, prio: u32) -> Match {
    let _ = (id, prio);
    let mut m = Match::ANY;
    m.set_exact(Field::EthType, 0x0800);
    m.set_prefix(Field::Ipv4Dst, 0x0a00_0000, 8);
    m
}

fn key(dst: u32, presence: u16) -> FlowKey {
    let mut k = FlowKey::ZERO;
    k.set(Field::EthType, 0x0800);
    k.set(Field::Ipv4Dst, dst as u128);
    k.add_presence(presence);
    k
}

#[test]
fn shape_rejections() {
    let shape = |m: Match| match Rfc::build(&[Rule::new(9, 1, m)]) {
        Err(RfcError::Shape { id, reason }) => {
            assert_eq!(id, 9);
            reason
        }
        other => panic!("expected a shape error, got {other:?}"),
    };
    let mut m = ipv4_rule(9, 1);
    m.set_exact(Field::InPort, 3);
    assert!(shape(m).contains("outside"));
    let mut m = ipv4_rule(9, 1);
    m.set_exact(Field::VlanVid, 0x1005);
    assert!(shape(m).contains("outside"));
    let mut m = ipv4_rule(9, 1);
    m.set_exact(Field::IpDscp, 4);
    assert!(shape(m).contains("outside"));
    let mut m = ipv4_rule(9, 1);
    m.set_exact(Field::EthType, 0x86dd);
    assert!(shape(m).contains("eth_type"));
    let mut m = ipv4_rule(9, 1);
    m.set_masked(Field::EthType, 0x0800, 0xff00);
    assert!(shape(m).contains("eth_type"));
    let mut m = Match::ANY;
    m.set_prefix(Field::Ipv4Dst, 0x0a00_0000, 8);
    assert!(shape(m).contains("eth_type"), "eth_type unconstrained");
    let mut m = ipv4_rule(9, 1);
    m.mask.add_presence(present::L4); // "L4 must be absent"
    assert!(shape(m).contains("absent"));
    let mut m = ipv4_rule(9, 1);
    m.mask.add_presence(present::FRAG);
    m.value.add_presence(present::FRAG);
    assert!(shape(m).contains("outside"));
    let mut m = ipv4_rule(9, 1);
    m.value.set(Field::Ipv4Src, 1); // value bit without mask bit
    assert!(shape(m).contains("outside its mask"));
    // A shape error names the offending rule, not the first one.
    let good = Rule::new(1, 5, ipv4_rule(1, 5));
    let mut bad = ipv4_rule(2, 5);
    bad.set_exact(Field::Metadata, 1);
    assert!(matches!(
        Rfc::build(&[good.clone(), Rule::new(2, 5, bad)]),
        Err(RfcError::Shape { id: 2, .. })
    ));
    // Duplicate ids are ambiguous in a slice.
    assert!(matches!(
        Rfc::build(&[good.clone(), Rule::new(1, 3, ipv4_rule(1, 3))]),
        Err(RfcError::Shape {
            id: 1,
            reason: "duplicate rule id"
        })
    ));
}

#[test]
fn budget_is_enforced() {
    let rules = vec![Rule::new(1, 1, ipv4_rule(1, 1))];
    let cfg = RfcConfig {
        budget: 512 << 10,
        ..RfcConfig::default()
    };
    match Rfc::build_with(&rules, &cfg) {
        Err(RfcError::TooBig { bytes }) => assert!(bytes > 512 << 10),
        other => panic!("expected TooBig, got {other:?}"),
    }
    // Many distinct /32 pairs force large cross products: a 2 MiB budget
    // cannot hold them, the default budget can.
    let many: Vec<Rule> = (0..600u32)
        .map(|i| {
            let mut m = Match::ANY;
            m.set_exact(Field::EthType, 0x0800);
            m.set_exact(Field::Ipv4Src, (0x0a00_0000 + i * 77) as u128);
            m.set_exact(Field::Ipv4Dst, (0x0b00_0000 + i * 131) as u128);
            Rule::new(i, i, m)
        })
        .collect();
    let small = RfcConfig {
        budget: 2 << 20,
        ..RfcConfig::default()
    };
    assert!(matches!(
        Rfc::build_with(&many, &small),
        Err(RfcError::TooBig { .. })
    ));
    let rfc = Rfc::build(&many).expect("fits the default budget");
    // The budget check is conservative (it assumes 32-bit ids before the
    // class count is known), so the tables may end up below 2 MiB; they
    // still hold far more than the phase-0 tables alone.
    assert!(rfc.stats().table_bytes > (7 << 17) + (256 << 10));
    let k = {
        let mut k = FlowKey::ZERO;
        k.set(Field::EthType, 0x0800);
        k.set(Field::Ipv4Src, (0x0a00_0000 + 5 * 77) as u128);
        k.set(Field::Ipv4Dst, (0x0b00_0000 + 5 * 131) as u128);
        k.add_presence(present::L3 | present::L4);
        k
    };
    assert_eq!(rfc.lookup(&k), RfcAnswer::Hit(5));
}

#[test]
fn outside_the_domain() {
    let l34 = present::L3 | present::L4;
    let all_l3 = Rfc::build(&[Rule::new(1, 1, ipv4_rule(1, 1))]).expect("build");
    assert_eq!(all_l3.lookup(&key(0x0a01_0101, l34)), RfcAnswer::Hit(1));
    assert_eq!(all_l3.lookup(&key(0x0b01_0101, l34)), RfcAnswer::NoMatch);
    // Every rule requires L3: a key without it matches nothing.
    assert_eq!(all_l3.lookup(&key(0x0a01_0101, 0)), RfcAnswer::NoMatch);
    // IPv4 without L4: the caller must fall back.
    assert_eq!(
        all_l3.lookup(&key(0x0a01_0101, present::L3)),
        RfcAnswer::NotApplicable
    );
    let mut v6 = key(0x0a01_0101, l34);
    v6.set(Field::EthType, 0x86dd);
    assert_eq!(all_l3.lookup(&v6), RfcAnswer::NoMatch);

    // A "match all IPv4" rule has no L3 requirement: a key without L3 may
    // match it, so the answer must be NotApplicable, never NoMatch.
    let mut any4 = Match::ANY;
    any4.set_exact(Field::EthType, 0x0800);
    let with_default =
        Rfc::build(&[Rule::new(1, 2, ipv4_rule(1, 2)), Rule::new(2, 1, any4)]).expect("build");
    assert_eq!(
        with_default.lookup(&key(0x0a01_0101, 0)),
        RfcAnswer::NotApplicable
    );
    assert_eq!(
        with_default.lookup(&key(0x0b01_0101, l34)),
        RfcAnswer::Hit(2)
    );

    // No rules at all: every in-domain key misses.
    let empty = Rfc::build(&[]).expect("build");
    assert!(empty.is_empty());
    assert_eq!(empty.lookup(&key(1, l34)), RfcAnswer::NoMatch);
}

#[test]
fn port_range_and_mask_combine_exactly() {
    // tp_dst in 1000..=2000 AND tp_dst odd.
    let mut m = Match::ANY;
    m.set_exact(Field::EthType, 0x0800);
    m.set_masked(Field::TcpDst, 1, 1);
    let r = Rule::new(7, 1, m).with_ports(PortRange::ANY, PortRange { lo: 1000, hi: 2000 });
    let rfc = Rfc::build(std::slice::from_ref(&r)).expect("build");
    for dp in [0u16, 999, 1000, 1001, 1501, 1999, 2000, 2001, 65535] {
        let mut k = key(0, present::L3 | present::L4);
        k.set(Field::TcpDst, dp as u128);
        let want = if r.matches(&k) {
            RfcAnswer::Hit(7)
        } else {
            RfcAnswer::NoMatch
        };
        assert_eq!(rfc.lookup(&k), want, "dport {dp}");
        assert_eq!(
            want == RfcAnswer::Hit(7),
            (1000..=2000).contains(&dp) && dp % 2 == 1
        );
    }
}

// ---------------------------------------------------------------------------
// RfcSet: the same differential check with partitioning forced.

/// Bytes of the seven phase-0 tables every part holds.
const PHASE0: usize = 7 * (2 << 16);

fn check_set(rules: &[Rule], keys: &[FlowKey], cfg: &RfcSetConfig) -> Result<usize, TestCaseError> {
    let set =
        RfcSet::build_with(rules, cfg).map_err(|e| TestCaseError::fail(format!("build: {e}")))?;
    prop_assert_eq!(set.len(), rules.len());
    prop_assert_eq!(set.stats().parts.len(), set.parts());
    prop_assert_eq!(
        set.stats().parts.iter().map(|p| p.rules).sum::<usize>(),
        rules.len(),
        "parts must cover the rules exactly once"
    );
    for p in &set.stats().parts {
        prop_assert!(p.table_bytes <= cfg.part_budget, "part over budget: {}", p);
    }
    answers_match_oracle(
        rules,
        keys,
        |k| set.lookup(k),
        |ks, out| set.lookup_batch(ks, out),
    )?;
    candidates_skip_what_they_are_told(rules, keys, &set)?;
    Ok(set.parts())
}

/// `rank_where` with a third of the rules (by id) left out: the first rank
/// it gives is the winner among the other rules, per the oracle; and the
/// plain and batched rank lookups agree with `lookup`.
fn candidates_skip_what_they_are_told(
    rules: &[Rule],
    keys: &[FlowKey],
    set: &RfcSet,
) -> Result<(), TestCaseError> {
    let mut ranks = vec![RfcRank::NotApplicable; keys.len()];
    set.rank_batch(keys, &mut ranks);
    for (k, &r) in keys.iter().zip(&ranks) {
        prop_assert_eq!(r, set.rank(k));
        let as_answer = match r {
            RfcRank::Rank(r) => RfcAnswer::Hit(set.ids()[r as usize]),
            RfcRank::NoMatch => RfcAnswer::NoMatch,
            RfcRank::NotApplicable => RfcAnswer::NotApplicable,
        };
        prop_assert_eq!(as_answer, set.lookup(k));
    }
    if !set.lists_candidates() {
        return Ok(());
    }
    for residue in 0..3u32 {
        let mut lin = LinearClassifier::new();
        for r in rules.iter().filter(|r| r.id % 3 != residue) {
            lin.insert(r.clone());
        }
        let keep = |rank: u32| set.ids()[rank as usize] % 3 != residue;
        for (k, r) in keys.iter().zip(&ranks) {
            if let RfcRank::Rank(_) = r {
                let want = lin
                    .lookup(k)
                    .map(|id| set.ids().iter().position(|&x| x == id).unwrap() as u32);
                prop_assert_eq!(
                    set.rank_where(k, keep),
                    Some(want),
                    "residue {} key {:?}",
                    residue,
                    k
                );
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if cfg!(debug_assertions) { 24 } else { 256 },
        ..ProptestConfig::default()
    })]

    /// Part budgets only slightly above the phase-0 tables force random
    /// sets to split (by shape, then by rank halves) and exercise merging.
    #[test]
    fn rfc_set_matches_linear_oracle(
        specs in prop::collection::vec(rule_spec(), 0..48),
        kspecs in prop::collection::vec(key_spec(), 66..130),
        extra in prop_oneof![64usize..2048, 2048usize..65536],
    ) {
        let rules = make_rules(&specs);
        let keys: Vec<FlowKey> = kspecs.iter().map(|s| make_key(&rules, s)).collect();
        let cfg = RfcSetConfig {
            part_budget: PHASE0 + extra,
            total_budget: usize::MAX,
            max_parts: 64,
            ..RfcSetConfig::default()
        };
        check_set(&rules, &keys, &cfg)?;
    }
}

/// Distinct /32 pairs: a 2 MiB part budget cannot hold them in one part,
/// so the set splits; answers stay exact, and caps are enforced.
#[test]
fn rfc_set_splits_and_enforces_caps() {
    let many: Vec<Rule> = (0..600u32)
        .map(|i| {
            let mut m = Match::ANY;
            m.set_exact(Field::EthType, 0x0800);
            m.set_exact(Field::Ipv4Src, (0x0a00_0000 + i * 77) as u128);
            m.set_exact(Field::Ipv4Dst, (0x0b00_0000 + i * 131) as u128);
            Rule::new(i, i % 7, m)
        })
        .collect();
    let cfg = RfcSetConfig {
        part_budget: 2 << 20,
        ..RfcSetConfig::default()
    };
    assert!(matches!(
        Rfc::build_with(
            &many,
            &RfcConfig {
                budget: 2 << 20,
                ..RfcConfig::default()
            }
        ),
        Err(RfcError::TooBig { .. })
    ));
    let keys: Vec<FlowKey> = (0..600u32)
        .flat_map(|i| {
            [0u32, 1].map(|d| {
                let mut k = FlowKey::ZERO;
                k.set(Field::EthType, 0x0800);
                k.set(Field::Ipv4Src, (0x0a00_0000 + i * 77) as u128);
                k.set(Field::Ipv4Dst, (0x0b00_0000 + i * 131 + d) as u128);
                k.add_presence(present::L3 | present::L4);
                k
            })
        })
        .collect();
    let parts = check_set(&many, &keys, &cfg).expect("set matches the oracle");
    assert!(parts >= 2, "expected a split, got {parts} part(s)");
    // The same set with too few parts allowed, or too small a total budget,
    // is refused.
    let few = RfcSetConfig {
        max_parts: 1,
        ..cfg.clone()
    };
    assert!(matches!(
        RfcSet::build_with(&many, &few),
        Err(RfcError::TooBig { .. })
    ));
    let built = RfcSet::build_with(&many, &cfg).expect("fits");
    let small_total = RfcSetConfig {
        total_budget: built.stats().table_bytes - 1,
        ..cfg.clone()
    };
    assert!(matches!(
        RfcSet::build_with(&many, &small_total),
        Err(RfcError::TooBig { .. })
    ));
    // A set that fits one part is one part, with the single Rfc's answers.
    let one = RfcSet::build(&many[..50]).expect("fits");
    assert_eq!(one.parts(), 1);
    let rfc = Rfc::build(&many[..50]).expect("fits");
    for k in &keys {
        assert_eq!(one.lookup(k), rfc.lookup(k));
    }
    // Shape errors pass through.
    let mut bad = Match::ANY;
    bad.set_exact(Field::InPort, 1);
    assert!(matches!(
        RfcSet::build(&[Rule::new(4, 1, bad)]),
        Err(RfcError::Shape { id: 4, .. })
    ));
}

/// Wildcard-source rules beside wildcard-destination rules (the classic
/// cross-product blow-up) are separated by the shape split.
#[test]
fn rfc_set_separates_shapes() {
    let mut rules = Vec::new();
    for i in 0..300u32 {
        let mut a = Match::ANY;
        a.set_exact(Field::EthType, 0x0800);
        a.set_exact(Field::Ipv4Dst, (0x0b00_0000 + i * 131) as u128);
        rules.push(Rule::new(2 * i, 1000 - i, a));
        let mut b = Match::ANY;
        b.set_exact(Field::EthType, 0x0800);
        b.set_exact(Field::Ipv4Src, (0x0a00_0000 + i * 77) as u128);
        rules.push(Rule::new(2 * i + 1, 1000 - i, b));
    }
    let cfg = RfcSetConfig {
        part_budget: 2 << 20,
        ..RfcSetConfig::default()
    };
    let set = RfcSet::build_with(&rules, &cfg).expect("splits by shape");
    assert_eq!(set.parts(), 2, "{}", set.stats());
    // Key hitting both the source rule of i=3 and the destination rule of
    // i=5: the destination rule 10 has priority 995, the source rule 7 has
    // 997, so rule 7 wins.
    let mut k = FlowKey::ZERO;
    k.set(Field::EthType, 0x0800);
    k.set(Field::Ipv4Src, (0x0a00_0000 + 3 * 77) as u128);
    k.set(Field::Ipv4Dst, (0x0b00_0000 + 5 * 131) as u128);
    k.add_presence(present::L3 | present::L4);
    assert_eq!(set.lookup(&k), RfcAnswer::Hit(7));
    let mut out = [RfcAnswer::NoMatch; 1];
    set.lookup_batch(std::slice::from_ref(&k), &mut out);
    assert_eq!(out[0], RfcAnswer::Hit(7));
}
