//! Property tests: random frames and action sequences against a model that
//! applies the same set-fields to the original key; and fuzz-style "never
//! panics" runs on arbitrary bytes, layouts and actions.

mod common;

use common::*;
use offlow_datapath::{execute, ExecStats, PacketBuf, PortInfo, Verdict};
use offlow_flow::{present, Field, L3Kind, L4Kind, Layout, TunnelKind};
use offlow_pipeline::{Action, PortNo};
use proptest::prelude::*;

const CASES: u32 = if cfg!(debug_assertions) { 2048 } else { 8192 };

#[derive(Debug, Clone)]
struct FrameSpec {
    v6: bool,
    tcp: bool,
    udp_zero: bool,
    tags: Vec<(u16, u16)>,
    a4: [[u8; 4]; 2],
    a6: [u128; 2],
    ports: [u16; 2],
    ttl: u8,
    tos: u8,
    flabel: u32,
    payload: Vec<u8>,
}

impl FrameSpec {
    fn build(&self) -> Vec<u8> {
        let mut b = frame();
        for &(tpid, tci) in &self.tags {
            b = b.tag(tpid, tci);
        }
        let b = if self.v6 {
            b.ipv6(self.a6[0].to_be_bytes(), self.a6[1].to_be_bytes())
                .flow_label(self.flabel)
        } else {
            b.ipv4(self.a4[0], self.a4[1]).ident(0x1234).dont_frag()
        };
        let b = b.ttl(self.ttl).tos(self.tos);
        let b = if self.tcp {
            b.tcp(self.ports[0], self.ports[1]).tcp_flags(PSH_ACK)
        } else if self.udp_zero && !self.v6 {
            b.udp(self.ports[0], self.ports[1])
                .l4_checksum(Checksum::Zero)
        } else {
            b.udp(self.ports[0], self.ports[1])
        };
        b.payload(&self.payload).build()
    }
}

fn frame_spec() -> impl Strategy<Value = FrameSpec> {
    (
        (any::<bool>(), any::<bool>(), any::<bool>()),
        prop::collection::vec(
            (prop_oneof![Just(0x8100u16), Just(0x88a8u16)], any::<u16>()),
            0..=2,
        ),
        (any::<[[u8; 4]; 2]>(), any::<[u128; 2]>(), any::<[u16; 2]>()),
        (any::<u8>(), any::<u8>(), 0u32..0x100000),
        prop::collection::vec(any::<u8>(), 0..24),
    )
        .prop_map(
            |((v6, tcp, udp_zero), tags, (a4, a6, ports), (ttl, tos, flabel), payload)| FrameSpec {
                v6,
                tcp,
                udp_zero,
                tags,
                a4,
                a6,
                // Avoid the VXLAN port: the parser then descends into a tunnel.
                ports: ports.map(|p| if p == 4789 { 4788 } else { p }),
                ttl,
                tos,
                flabel,
                payload,
            },
        )
}

/// Actions the model understands; fields are chosen by index so that the
/// same strategy works for every frame kind (mapped in `concrete`).
#[derive(Debug, Clone)]
enum Op {
    Set(u8, u128),
    DecTtl,
    SetTtl(u8),
    Push(bool),
    Pop,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..11, any::<u128>()).prop_map(|(i, v)| Op::Set(i, v)),
        1 => Just(Op::DecTtl),
        1 => any::<u8>().prop_map(Op::SetTtl),
        1 => any::<bool>().prop_map(Op::Push),
        1 => Just(Op::Pop),
    ]
}

fn field_for(spec: &FrameSpec, i: u8) -> Field {
    match (i, spec.v6, spec.tcp) {
        (0, ..) => Field::EthSrc,
        (1, ..) => Field::EthDst,
        (2, ..) => Field::VlanVid,
        (3, ..) => Field::VlanPcp,
        (4, ..) => Field::IpDscp,
        (5, ..) => Field::IpEcn,
        (6, false, _) => Field::Ipv4Src,
        (7, false, _) => Field::Ipv4Dst,
        (6, true, _) => Field::Ipv6Src,
        (7, true, _) => Field::Ipv6Dst,
        (8, _, true) => Field::TcpSrc,
        (8, _, false) => Field::UdpSrc,
        (10, true, _) => Field::Ipv6Flabel,
        (_, _, true) => Field::TcpDst,
        (_, _, false) => Field::UdpDst,
    }
}

fn ttl_at(frame: &[u8], lay: &Layout) -> u8 {
    let l3 = lay.l3 as usize;
    if lay.l3_kind == L3Kind::Ipv4 {
        frame[l3 + 8]
    } else {
        frame[l3 + 7]
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    /// Random frame + random action sequence: checksums verify, and the
    /// re-parsed key equals the model's key (original key + the same
    /// set-fields, VLAN stack modelled), and the layout equals a re-parse.
    #[test]
    fn model_agrees(spec in frame_spec(), ops in prop::collection::vec(op(), 0..10)) {
        let frame = spec.build();
        prop_assert!(verify_checksums(&frame).is_ok());
        let orig = parse(&frame);
        let mut key = orig.key;
        let mut tags: Vec<u16> = spec.tags.iter().map(|t| t.1).collect();
        let mut ttl = spec.ttl;
        let mut actions = Vec::new();
        let mut expired = false;
        for o in &ops {
            match *o {
                Op::Set(i, v) => {
                    let field = field_for(&spec, i);
                    actions.push(Action::SetField(field, v));
                    match field {
                        Field::VlanVid | Field::VlanPcp => {
                            if let Some(t) = tags.first_mut() {
                                *t = if field == Field::VlanVid {
                                    (*t & 0xf000) | (v as u16 & 0xfff)
                                } else {
                                    (*t & 0x1fff) | ((v as u16 & 7) << 13)
                                };
                            }
                        }
                        _ => key.set(field, v & field.full_mask()),
                    }
                }
                Op::DecTtl => {
                    actions.push(Action::DecNwTtl);
                    if ttl <= 1 {
                        expired = true;
                        break;
                    }
                    ttl -= 1;
                }
                Op::SetTtl(t) => {
                    actions.push(Action::SetNwTtl(t));
                    ttl = t;
                }
                Op::Push(qinq) => {
                    // A third tag makes the parser stop (tested elsewhere).
                    if tags.len() < 2 {
                        actions.push(Action::PushVlan(if qinq { 0x88a8 } else { 0x8100 }));
                        let t = tags.first().map_or(0, |t| t & 0xefff);
                        tags.insert(0, t);
                    }
                }
                Op::Pop => {
                    actions.push(Action::PopVlan);
                    if !tags.is_empty() {
                        tags.remove(0);
                    }
                }
            }
        }
        match tags.first() {
            Some(&t) => {
                key.set(Field::VlanVid, 0x1000 | (t & 0xfff) as u128);
                key.set(Field::VlanPcp, (t >> 13) as u128);
                key.add_presence(present::VLAN);
            }
            None => {
                key.set(Field::VlanVid, 0);
                key.set(Field::VlanPcp, 0);
                key.clear_presence(present::VLAN);
            }
        }
        actions.push(Action::output(PortNo(2)));

        let mut buf = PacketBuf::from_frame(&frame, 0);
        let mut lay = orig.layout;
        let mut sink = RecSink::default();
        let mut stats = ExecStats::default();
        let out = execute(&actions, &mut buf, &mut lay, 1, &mut sink, &mut stats);
        let res = buf.frame();
        prop_assert_eq!(out.verdict, if expired { Verdict::TtlExpired } else { Verdict::Done });
        prop_assert_eq!(stats.write_out_of_range, 0);
        if let Err(e) = verify_checksums(res) {
            prop_assert!(false, "{}", e);
        }
        let after = parse(res);
        if !expired {
            prop_assert_eq!(after.key, key);
            prop_assert_eq!(ttl_at(res, &lay), ttl);
            prop_assert_eq!(sink.sent.len(), 1);
            prop_assert!(sink.sent[0].2.final_view);
            prop_assert_eq!(&sink.sent[0].1[..], res);
        }
        prop_assert_eq!(after.layout, lay);
    }

    /// Push then pop returns the original bytes and layout.
    #[test]
    fn push_pop_identity(spec in frame_spec(), qinq in any::<bool>()) {
        let frame = spec.build();
        let orig = parse(&frame).layout;
        let mut buf = PacketBuf::from_frame(&frame, 0);
        let mut lay = orig;
        let acts = [Action::PushVlan(if qinq { 0x88a8 } else { 0x8100 }), Action::PopVlan];
        execute(&acts, &mut buf, &mut lay, 1, &mut RecSink::default(), &mut ExecStats::default());
        prop_assert_eq!(buf.frame(), &frame[..]);
        prop_assert_eq!(lay, orig);
        let et = if spec.v6 { 0x86dd } else { 0x0800 };
        let acts = [Action::PushMpls(if qinq { 0x8848 } else { 0x8847 }), Action::PopMpls(et)];
        let mut stats = ExecStats::default();
        execute(&acts, &mut buf, &mut lay, 1, &mut RecSink::default(), &mut stats);
        prop_assert_eq!(stats.total(), 0);
        prop_assert_eq!(buf.frame(), &frame[..]);
        prop_assert_eq!(lay, orig);
    }

    /// Arbitrary bytes (with a parsed layout) and arbitrary actions: no panic,
    /// and a frame never grows past its headroom.
    #[test]
    fn never_panics_parsed(bytes in prop::collection::vec(any::<u8>(), 0..160),
                           actions in prop::collection::vec(any_action(), 0..12)) {
        let mut buf = PacketBuf::from_frame(&bytes, 0);
        let mut lay = parse(&bytes).layout;
        let mut sink = RecSink { ports: vec![PortInfo { port: 2, no_fwd: false, no_flood: false }], ..Default::default() };
        execute(&actions, &mut buf, &mut lay, 1, &mut sink, &mut ExecStats::default());
        prop_assert!(buf.len() <= bytes.len() + 64);
    }

    /// Arbitrary bytes, an arbitrary (inconsistent) layout and arbitrary
    /// actions: still no panic.
    #[test]
    fn never_panics_any_layout(bytes in prop::collection::vec(any::<u8>(), 0..120),
                               lay in any_layout(),
                               actions in prop::collection::vec(any_action(), 0..12)) {
        let mut buf = PacketBuf::from_frame(&bytes, 0);
        let mut lay = lay;
        execute(&actions, &mut buf, &mut lay, 1, &mut RecSink::default(), &mut ExecStats::default());
    }
}

fn any_field() -> impl Strategy<Value = Field> {
    (0u8..40).prop_map(|n| Field::from_oxm(n).unwrap())
}

fn any_action() -> impl Strategy<Value = Action> {
    prop_oneof![
        4 => (any_field(), any::<u128>()).prop_map(|(f, v)| Action::SetField(f, v)),
        1 => (prop_oneof![any::<u32>(), 0xffff_fff8u32..=0xffff_ffff, 0u32..4], any::<u16>())
            .prop_map(|(p, m)| Action::Output { port: PortNo(p), max_len: m }),
        1 => any::<u8>().prop_map(Action::SetNwTtl),
        1 => Just(Action::DecNwTtl),
        1 => prop_oneof![Just(0x8100u16), Just(0x88a8), any::<u16>()].prop_map(Action::PushVlan),
        1 => Just(Action::PopVlan),
        1 => any::<u16>().prop_map(Action::PushMpls),
        1 => any::<u16>().prop_map(Action::PopMpls),
        1 => prop_oneof![Just(0x88e7u16), any::<u16>()].prop_map(Action::PushPbb),
        1 => Just(Action::PopPbb),
        1 => any::<u8>().prop_map(Action::SetMplsTtl),
        1 => Just(Action::DecMplsTtl),
        1 => Just(Action::CopyTtlIn),
        1 => any::<u32>().prop_map(Action::SetQueue),
        1 => any::<u32>().prop_map(Action::Group),
    ]
}

fn any_layout() -> impl Strategy<Value = Layout> {
    let off = || prop_oneof![Just(0u16), 0u16..130, any::<u16>()];
    (
        (0u8..4, off(), off(), off()),
        (off(), 0u8..5, off(), off()),
        (0u8..7, 0u8..3, off()),
    )
        .prop_map(
            |((vc, v0, v1, et), (l3, k3, hl, l4), (k4, tk, inner))| Layout {
                vlan_count: vc,
                vlan: [v0, v1],
                eth_type: et,
                l3,
                l3_kind: [
                    L3Kind::None,
                    L3Kind::Arp,
                    L3Kind::Ipv4,
                    L3Kind::Ipv6,
                    L3Kind::Mpls,
                ][k3 as usize],
                ip_header_len: hl,
                l4,
                l4_kind: [
                    L4Kind::None,
                    L4Kind::Tcp,
                    L4Kind::Udp,
                    L4Kind::Sctp,
                    L4Kind::Icmpv4,
                    L4Kind::Icmpv6,
                    L4Kind::Gre,
                ][k4 as usize],
                tunnel: [TunnelKind::None, TunnelKind::Gre, TunnelKind::Vxlan][tk as usize],
                inner,
            },
        )
}
