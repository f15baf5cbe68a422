//! PBB push/pop, set-field pbb_isid and MPLS pops: frame in → frame out
//! byte for byte against hand-built frames; pipelines whose later tables
//! match what a pop reveals; and the oracle: for random encapsulated frames
//! and random push/pop/set sequences, the pipeline's working key
//! (`offlow_pipeline::key_after`) equals the parse of the frame the
//! executor produced, whenever the working key says it is exact.

mod common;

use common::*;
use offlow_datapath::{execute, ExecStats, PacketBuf};
use offlow_flow::{encap, present, Field, Layout, Match};
use offlow_pipeline::{
    key_after, Action, FlowMod, Instruction, Outcome, Pipeline, PortNo, WorkingKey,
};
use proptest::prelude::*;

const CASES: u32 = if cfg!(debug_assertions) { 2048 } else { 8192 };

struct Run {
    frame: Vec<u8>,
    layout: Layout,
    stats: ExecStats,
}

/// Execute `actions` on `frame` with a generous headroom (pushes of 18
/// bytes each), then output to port 2.
fn run(frame: &[u8], actions: &[Action]) -> Run {
    let mut buf = PacketBuf::new(256, frame.len() + 64);
    buf.load(frame).expect("fits");
    let mut layout = parse(frame).layout;
    let mut stats = ExecStats::default();
    let mut acts = actions.to_vec();
    acts.push(Action::output(PortNo(2)));
    let mut sink = RecSink::default();
    execute(&acts, &mut buf, &mut layout, 1, &mut sink, &mut stats);
    assert_eq!(sink.sent.len(), 1);
    assert_eq!(&sink.sent[0].1[..], buf.frame());
    Run {
        frame: buf.frame().to_vec(),
        layout,
        stats,
    }
}

const B_DA: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];
const B_SA: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0c];

/// A PBB frame: B-DA, B-SA, optional B-tag, 0x88e7, I-TAG `tci`, then
/// `customer` (a whole Ethernet frame).
fn pbb(b_da: [u8; 6], b_sa: [u8; 6], btag: Option<u16>, tci: u32, customer: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&b_da);
    f.extend_from_slice(&b_sa);
    if let Some(t) = btag {
        f.extend_from_slice(&[0x88, 0xa8]);
        f.extend_from_slice(&t.to_be_bytes());
    }
    f.extend_from_slice(&[0x88, 0xe7]);
    f.extend_from_slice(&tci.to_be_bytes());
    f.extend_from_slice(customer);
    f
}

fn tcp4() -> Vec<u8> {
    frame4([192, 168, 10, 10], [192, 168, 20, 20], 64, 32)
        .tcp(11111, 2222)
        .tcp_flags(PSH_ACK)
        .payload(&[1, 2, 3, 4, 5, 6, 7, 8])
        .build()
}

fn no_anomaly(st: &ExecStats) {
    assert_eq!(st.total(), 0, "{st:?}");
}

#[test]
fn push_pbb_byte_for_byte() {
    // os-ken action/26_PUSH_PBB: the new outer addresses are the customer's,
    // the I-TAG is all zero, the customer frame follows unchanged.
    let c = tcp4();
    let r = run(&c, &[Action::PushPbb(0x88e7)]);
    no_anomaly(&r.stats);
    assert_eq!(r.frame, pbb(MAC_B, MAC_A, None, 0, &c));
    assert_eq!(r.layout, parse(&r.frame).layout);
    // Twice (26_PUSH_PBB_multiple): a PBB frame inside a PBB frame.
    let r = run(&c, &[Action::PushPbb(0x88e7), Action::PushPbb(0x88e7)]);
    no_anomaly(&r.stats);
    assert_eq!(
        r.frame,
        pbb(MAC_B, MAC_A, None, 0, &pbb(MAC_B, MAC_A, None, 0, &c))
    );
    // A tagged frame: its tag moves inside, behind C-SA.
    let tagged = frame()
        .tag(0x8100, 0x6064)
        .ipv4([1; 4], [2; 4])
        .udp(1, 2)
        .build();
    let r = run(&tagged, &[Action::PushPbb(0x88e7)]);
    assert_eq!(r.frame, pbb(MAC_B, MAC_A, None, 0, &tagged));
    // Then the I-SID, keeping the other TCI bits.
    let r = run(
        &c,
        &[
            Action::PushPbb(0x88e7),
            Action::SetField(Field::PbbIsid, 0xabcdef),
        ],
    );
    no_anomaly(&r.stats);
    assert_eq!(r.frame, pbb(MAC_B, MAC_A, None, 0x00ab_cdef, &c));
}

#[test]
fn push_pbb_refusals_are_counted() {
    let c = tcp4();
    let r = run(&c, &[Action::PushPbb(0x8100)]);
    assert_eq!(r.stats.push_pbb_bad_ethertype, 1);
    assert_eq!(r.frame, c);
    let r = run(&c[..13], &[Action::PushPbb(0x88e7)]);
    assert_eq!(r.stats.push_pbb_no_room, 1);
    assert_eq!(r.frame, &c[..13]);
    // No headroom at all.
    let mut buf = PacketBuf::new(0, c.len());
    buf.load(&c).unwrap();
    let mut lay = parse(&c).layout;
    let mut st = ExecStats::default();
    execute(
        &[Action::PushPbb(0x88e7)],
        &mut buf,
        &mut lay,
        1,
        &mut RecSink::default(),
        &mut st,
    );
    assert_eq!(st.push_pbb_no_room, 1);
    assert_eq!(buf.frame(), &c[..]);
}

#[test]
fn pop_pbb_byte_for_byte() {
    // os-ken action/27_POP_PBB: everything up to the customer header goes,
    // the customer's own tags stay.
    let customer = frame()
        .tag(0x88a8, 10)
        .tag(0x8100, 0x6064)
        .ipv4([1; 4], [2; 4])
        .tcp(1, 2)
        .build();
    for btag in [None, Some(0x0005)] {
        let f = pbb(B_DA, B_SA, btag, 0x64, &customer);
        let r = run(&f, &[Action::PopPbb]);
        no_anomaly(&r.stats);
        assert_eq!(r.frame, customer);
        assert_eq!(r.layout, parse(&customer).layout);
    }
    // Set the I-SID behind a B-tag (37_PBB_ISID), PCP kept.
    let f = pbb(B_DA, B_SA, Some(10), 0xa000_0064, &customer);
    let r = run(&f, &[Action::SetField(Field::PbbIsid, 203)]);
    no_anomaly(&r.stats);
    assert_eq!(r.frame, pbb(B_DA, B_SA, Some(10), 0xa000_00cb, &customer));
    // Push then pop is the identity.
    let c = tcp4();
    let r = run(&c, &[Action::PushPbb(0x88e7), Action::PopPbb]);
    no_anomaly(&r.stats);
    assert_eq!(r.frame, c);
}

#[test]
fn pop_pbb_and_set_isid_without_itag_are_counted() {
    let c = tcp4();
    let r = run(&c, &[Action::PopPbb, Action::SetField(Field::PbbIsid, 1)]);
    assert_eq!(
        (r.stats.pop_pbb_no_itag, r.stats.set_field_no_header),
        (1, 1)
    );
    assert_eq!(r.frame, c);
    // An I-TAG whose customer header is cut short is not popped.
    let f = pbb(B_DA, B_SA, None, 1, &c[..13]);
    let r = run(&f, &[Action::PopPbb]);
    assert_eq!(r.stats.pop_pbb_no_itag, 1);
    assert_eq!(r.frame, f);
}

/// A two-table pipeline: table 0 applies `first` and goes to table 1,
/// where `m` outputs to port 2. The outcome for `frame`.
fn two_tables(first: Vec<Action>, m: Match, frame: &[u8]) -> Outcome {
    let mut p = Pipeline::new(2);
    let ins = vec![Instruction::ApplyActions(first), Instruction::GotoTable(1)];
    // The pops need the encapsulation's EtherType in the match.
    let key = parse(frame).key;
    let mut m0 = Match::ANY;
    m0.set_exact(Field::EthType, key.get(Field::EthType));
    p.flow_mod(&FlowMod::add(0, 1, m0, ins), 0).unwrap();
    let out = vec![Instruction::ApplyActions(vec![Action::output(PortNo(2))])];
    p.flow_mod(&FlowMod::add(1, 1, m, out), 0).unwrap();
    p.lookup(&parse(frame).key).outcome
}

#[test]
fn later_tables_see_the_payload_after_a_pop() {
    let c = tcp4();
    let mut m = Match::ANY;
    m.set_exact(Field::EthType, 0x0800)
        .set_exact(Field::Ipv4Src, 0xc0a8_0a0a)
        .set_exact(Field::IpProto, 6)
        .set_exact(Field::TcpDst, 2222);
    let mut other = m;
    other.set_exact(Field::TcpDst, 2223);

    // pop_mpls (os-ken match/*: ethernet/mpls/ipv4 → table 1 on IP fields).
    let mpls = frame4([192, 168, 10, 10], [192, 168, 20, 20], 64, 32)
        .mpls(100, 3, 64)
        .tcp(11111, 2222)
        .build();
    let pop = vec![Action::PopMpls(0x0800)];
    assert_eq!(two_tables(pop.clone(), m, &mpls), Outcome::Forward);
    assert!(matches!(
        two_tables(pop, other, &mpls),
        Outcome::Miss { table_id: 1 }
    ));
    // Popping to the wrong EtherType reveals nothing.
    let pop6 = vec![Action::PopMpls(0x86dd)];
    assert!(matches!(
        two_tables(pop6, m, &mpls),
        Outcome::Miss { table_id: 1 }
    ));

    // pop_pbb (ethernet/itag/ethernet/ipv4 → table 1).
    let f = pbb(MAC_B, MAC_A, None, 100, &c);
    let pop = vec![Action::PopPbb];
    assert_eq!(two_tables(pop.clone(), m, &f), Outcome::Forward);
    assert!(matches!(
        two_tables(pop.clone(), other, &f),
        Outcome::Miss { table_id: 1 }
    ));
    // The customer addresses, when they differ from the backbone ones.
    let f = pbb(B_DA, B_SA, Some(7), 100, &c);
    let mut by_mac = m;
    by_mac.set_exact(Field::EthDst, 0x0200_0000_00bb);
    assert_eq!(two_tables(pop, by_mac, &f), Outcome::Forward);

    // Two labels: after one pop, the next table sees the second label.
    let two = frame4([1; 4], [2; 4], 64, 0)
        .mpls(200, 5, 64)
        .mpls(100, 3, 64)
        .udp(1, 2)
        .build();
    let mut lbl = Match::ANY;
    lbl.set_exact(Field::EthType, 0x8847)
        .set_exact(Field::MplsLabel, 100)
        .set_exact(Field::MplsBos, 1);
    assert_eq!(
        two_tables(vec![Action::PopMpls(0x8847)], lbl, &two),
        Outcome::Forward
    );
    let mut ip = Match::ANY;
    ip.set_exact(Field::EthType, 0x0800)
        .set_exact(Field::Ipv4Dst, 0x0202_0202);
    assert_eq!(
        two_tables(
            vec![Action::PopMpls(0x8847), Action::PopMpls(0x0800)],
            ip,
            &two
        ),
        Outcome::Forward
    );
}

// ------------------------------------------------------------------ oracle

#[derive(Debug, Clone)]
enum L3 {
    Tcp4,
    Udp6,
    Arp,
    Raw,
}

#[derive(Debug, Clone)]
struct Spec {
    l3: L3,
    tag: Option<u16>,
    /// MPLS labels (label, tc), outer first.
    labels: Vec<(u32, u8)>,
    /// PBB encapsulation: I-TAG TCI, backbone addresses equal to the
    /// customer's or not, optional B-tag.
    pbb: Option<(u32, bool, Option<u16>)>,
    payload: Vec<u8>,
}

impl Spec {
    fn build(&self) -> Vec<u8> {
        let mut b = frame();
        if let Some(t) = self.tag {
            b = b.tag(0x8100, t);
        }
        for &(l, tc) in &self.labels {
            b = b.mpls(l, tc, 64);
        }
        let b = match self.l3 {
            L3::Tcp4 => b.ipv4([10, 0, 0, 1], [10, 0, 0, 2]).tcp(1, 2),
            L3::Udp6 => b.ipv6(v6(1), v6(2)).udp(3, 4),
            L3::Arp => b.arp(1, MAC_A, [10, 0, 0, 1], [0; 6], [10, 0, 0, 2]),
            L3::Raw => b,
        };
        let inner = b.payload(&self.payload).build();
        match self.pbb {
            None => inner,
            Some((tci, same, btag)) => {
                let (da, sa) = if same { (MAC_B, MAC_A) } else { (B_DA, B_SA) };
                pbb(da, sa, btag, tci, &inner)
            }
        }
    }
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        prop_oneof![Just(L3::Tcp4), Just(L3::Udp6), Just(L3::Arp), Just(L3::Raw)],
        prop::option::of(any::<u16>()),
        prop::collection::vec((0u32..0x100000, 0u8..8), 0..=3),
        prop::option::of((any::<u32>(), any::<bool>(), prop::option::of(0u16..0x1000))),
        prop::collection::vec(any::<u8>(), 0..16),
    )
        .prop_map(|(l3, tag, labels, pbb, payload)| Spec {
            l3,
            tag,
            labels,
            pbb,
            payload,
        })
}

#[derive(Debug, Clone)]
enum Op {
    PushMpls(bool),
    PopMpls(u16),
    PushPbb,
    PopPbb,
    SetIsid(u32),
    SetEthDst(u64),
    PushVlan,
    PopVlan,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        any::<bool>().prop_map(Op::PushMpls),
        prop_oneof![
            Just(0x0800u16),
            Just(0x86dd),
            Just(0x0806),
            Just(0x8847),
            Just(0x8848),
            Just(0x1234)
        ]
        .prop_map(Op::PopMpls),
        Just(Op::PushPbb),
        Just(Op::PopPbb),
        (0u32..0x0100_0000).prop_map(Op::SetIsid),
        (0u64..4).prop_map(|m| Op::SetEthDst(0x0200_0000_0000 | m)),
        Just(Op::PushVlan),
        Just(Op::PopVlan),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    /// Executor vs working key: while the key says it is exact, it equals
    /// the parse of the executed frame (and the executor's layout equals
    /// that parse's layout, always).
    #[test]
    fn working_key_agrees_with_executor(s in spec(), ops in prop::collection::vec(op(), 0..6)) {
        let f = s.build();
        let orig = parse(&f);
        // Only the actions validation would let through for this key:
        // set-field pbb_isid needs a PBB frame (its slot holds the second
        // MPLS label otherwise), pop_vlan a tag.
        let mut w = WorkingKey::new(orig.key);
        let mut actions = Vec::new();
        for o in &ops {
            let a = match *o {
                Op::PushMpls(mc) => Action::PushMpls(if mc { 0x8848 } else { 0x8847 }),
                Op::PopMpls(e) => Action::PopMpls(e),
                Op::PushPbb => Action::PushPbb(0x88e7),
                Op::PopPbb => Action::PopPbb,
                Op::SetIsid(v) => {
                    if w.key.get(Field::EthType) != 0x88e7 {
                        continue;
                    }
                    Action::SetField(Field::PbbIsid, u128::from(v))
                }
                Op::SetEthDst(m) => Action::SetField(Field::EthDst, u128::from(m)),
                // At most two tags: the parser stops at a third (tested
                // elsewhere), and each level here has at most one.
                Op::PushVlan => {
                    if actions.contains(&Action::PushVlan(0x8100)) {
                        continue;
                    }
                    Action::PushVlan(0x8100)
                }
                Op::PopVlan => {
                    if w.key.presence() & present::VLAN == 0 {
                        continue;
                    }
                    Action::PopVlan
                }
            };
            w.apply(&a);
            actions.push(a);
        }
        let (k, exact) = key_after(&orig.key, &actions);
        prop_assert_eq!(k, w.key);
        let r = run(&f, &actions);
        let after = parse(&r.frame);
        prop_assert_eq!(r.stats.write_out_of_range, 0);
        prop_assert_eq!(r.layout, after.layout);
        if exact {
            prop_assert_eq!(k, after.key, "actions {:?}", actions);
        }
    }

    /// Parsing an encapsulated frame never breaks the parse invariants.
    #[test]
    fn encapsulated_parse_is_consistent(s in spec(), cut in any::<prop::sample::Index>()) {
        let f = s.build();
        let n = cut.index(f.len() + 1);
        let p = parse(&f[..n]);
        prop_assert!(p.check_consistency(n).is_ok());
        // The payload kind is only ever recorded under MPLS or PBB.
        let et = p.key.get(Field::EthType);
        if encap::payload(&p.key) != encap::Payload::None {
            prop_assert!(matches!(et, 0x8847 | 0x8848 | 0x88e7), "{:?}", p.key);
        }
    }
}

/// The oracle's claim is not vacuous: the common sequences are exact.
#[test]
fn common_sequences_are_exact() {
    let two = frame4([1; 4], [2; 4], 64, 0)
        .mpls(200, 5, 64)
        .mpls(100, 3, 64)
        .udp(1, 2)
        .build();
    let c = tcp4();
    let b = pbb(B_DA, B_SA, Some(3), 100, &c);
    let cases: [(&[u8], Vec<Action>); 5] = [
        (&two, vec![Action::PopMpls(0x8847)]),
        (&two, vec![Action::PopMpls(0x8847), Action::PopMpls(0x0800)]),
        (
            &c,
            vec![
                Action::PushMpls(0x8847),
                Action::PushPbb(0x88e7),
                Action::SetField(Field::PbbIsid, 9),
                Action::SetField(Field::EthDst, 5),
            ],
        ),
        (&b, vec![Action::PopVlan, Action::PopPbb]),
        (
            &c,
            vec![
                Action::PushPbb(0x88e7),
                Action::SetField(Field::EthSrc, 5),
                Action::PopPbb,
                Action::PushMpls(0x8848),
                Action::PushMpls(0x8847),
                Action::PopMpls(0x8848),
                Action::PopMpls(0x0800),
            ],
        ),
    ];
    for (f, acts) in cases {
        let (k, exact) = key_after(&parse(f).key, &acts);
        assert!(exact, "{acts:?}");
        let r = run(f, &acts);
        no_anomaly(&r.stats);
        assert_eq!(k, parse(&r.frame).key, "{acts:?}");
    }
}
