//! Per-protocol tests of `extract` on hand-built frames, and truncation
//! sweeps. Expected values come from the builders' inputs, not from parsing.

mod common;

use common::*;
use offlow_flow::extract::{exthdr, MAX_IPV6_EXT_HEADERS, OFPVID_PRESENT};
use offlow_flow::{
    encap, extract, present, Field, FlowKey, L3Kind, L4Kind, ParseStats, Parsed, TunnelKind,
};

const PORT: u32 = 7;

fn parse(frame: &[u8]) -> (Parsed, ParseStats) {
    let mut st = ParseStats::default();
    let p = extract(frame, PORT, &mut st);
    (p, st)
}

fn f(k: &FlowKey, field: Field) -> u128 {
    k.get(field)
}

/// The counters that are non-zero, by name.
fn fired(st: &ParseStats) -> Vec<&'static str> {
    st.iter().filter(|&(_, v)| v != 0).map(|(n, _)| n).collect()
}

#[test]
fn runt_frames_carry_only_the_port() {
    let full = eth(0x0800, &[]);
    for n in 0..14 {
        let (p, st) = parse(&full[..n]);
        let mut expect = FlowKey::ZERO;
        expect.set(Field::InPort, PORT as u128);
        expect.set(Field::InPhyPort, PORT as u128);
        assert_eq!(p.key, expect, "len {n}");
        assert_eq!(fired(&st), ["runt"]);
        assert_eq!(p.layout, Default::default());
    }
}

#[test]
fn ipv4_tcp_untagged() {
    let frame = eth(
        0x0800,
        &ipv4(
            6,
            v4(10, 0, 0, 1),
            v4(10, 0, 0, 2),
            &[],
            0x4000,
            &tcp(1234, 80, b"hi"),
        ),
    );
    let (p, st) = parse(&frame);
    let k = &p.key;
    assert_eq!(st.total(), 0);
    assert_eq!(f(k, Field::InPort), PORT as u128);
    assert_eq!(f(k, Field::Metadata), 0);
    assert_eq!(f(k, Field::EthDst), 0x0200_0000_0001);
    assert_eq!(f(k, Field::EthSrc), 0x0200_0000_0002);
    assert_eq!(f(k, Field::EthType), 0x0800);
    assert_eq!(f(k, Field::VlanVid), 0, "no tag: OFPVID_NONE");
    assert_eq!(f(k, Field::IpDscp), 46);
    assert_eq!(f(k, Field::IpEcn), 1);
    assert_eq!(f(k, Field::IpProto), 6);
    assert_eq!(f(k, Field::Ipv4Src), 0x0a00_0001);
    assert_eq!(f(k, Field::Ipv4Dst), 0x0a00_0002);
    assert_eq!(f(k, Field::TcpSrc), 1234);
    assert_eq!(f(k, Field::TcpDst), 80);
    assert_eq!(k.presence(), present::L3 | present::L4);
    let l = p.layout;
    assert_eq!(
        (l.vlan_count, l.eth_type, l.l3, l.ip_header_len, l.l4),
        (0, 12, 14, 20, 34)
    );
    assert_eq!(
        (l.l3_kind, l.l4_kind, l.tunnel),
        (L3Kind::Ipv4, L4Kind::Tcp, TunnelKind::None)
    );
}

#[test]
fn qinq_double_tagged() {
    // 802.1ad S-TAG (PCP 5, VID 100) over 802.1Q C-TAG (PCP 1, VID 200).
    let tags = [(0x88a8, (5 << 13) | 100), (0x8100, (1 << 13) | 200)];
    let frame = eth_tagged(
        &tags,
        0x0800,
        &ipv4(
            17,
            v4(1, 1, 1, 1),
            v4(2, 2, 2, 2),
            &[],
            0,
            &udp(53, 5353, b"x"),
        ),
    );
    let (p, st) = parse(&frame);
    assert_eq!(st.total(), 0);
    let k = &p.key;
    assert_eq!(
        f(k, Field::VlanVid),
        (OFPVID_PRESENT | 100) as u128,
        "outer tag"
    );
    assert_eq!(f(k, Field::VlanPcp), 5);
    assert_eq!(f(k, Field::EthType), 0x0800, "type after all tags");
    assert_eq!((f(k, Field::UdpSrc), f(k, Field::UdpDst)), (53, 5353));
    assert_eq!(k.presence(), present::VLAN | present::L3 | present::L4);
    let l = p.layout;
    assert_eq!(
        (l.vlan_count, l.vlan, l.eth_type, l.l3, l.l4),
        (2, [12, 16], 20, 22, 42)
    );
}

#[test]
fn single_tag_and_third_tag() {
    let frame = eth_tagged(&[(0x8100, 4095)], 0x0806, &[]);
    let (p, st) = parse(&frame);
    assert_eq!(f(&p.key, Field::VlanVid), 0x1fff);
    assert_eq!(p.layout.vlan, [12, 0]);
    assert_eq!(fired(&st), ["truncated_arp"]);

    let tags = [(0x88a8, 1), (0x8100, 2), (0x8100, 3)];
    let frame = eth_tagged(
        &tags,
        0x0800,
        &ipv4(6, [0; 4], [0; 4], &[], 0, &tcp(1, 2, &[])),
    );
    let (p, st) = parse(&frame);
    assert_eq!(fired(&st), ["vlan_too_many"]);
    assert_eq!(f(&p.key, Field::VlanVid), 0x1001);
    assert_eq!(
        f(&p.key, Field::EthType),
        0x8100,
        "stopped at the third TPID"
    );
    assert_eq!(p.key.presence(), present::VLAN);
    assert_eq!(p.layout.l3_kind, L3Kind::None);
}

#[test]
fn ipv4_with_options() {
    // Router alert + NOP padding: IHL 7 (28 bytes).
    let opts = [0x94, 0x04, 0, 0, 1, 1, 1, 0];
    let frame = eth(
        0x0800,
        &ipv4(
            17,
            v4(10, 1, 1, 1),
            v4(10, 2, 2, 2),
            &opts,
            0,
            &udp(1, 2, &[]),
        ),
    );
    let (p, st) = parse(&frame);
    assert_eq!(st.total(), 0);
    assert_eq!((p.layout.ip_header_len, p.layout.l4), (28, 42));
    assert_eq!((f(&p.key, Field::UdpSrc), f(&p.key, Field::UdpDst)), (1, 2));
    assert_eq!(p.key.presence(), present::L3 | present::L4);
}

#[test]
fn ipv4_fragments() {
    let first = eth(
        0x0800,
        &ipv4(17, [1; 4], [2; 4], &[], 0x2000, &udp(10, 20, &[0; 16])),
    );
    let (p, _) = parse(&first);
    assert_eq!(p.key.presence(), present::L3 | present::L4 | present::FRAG);
    assert_eq!(f(&p.key, Field::UdpDst), 20);

    // Later fragment whose payload happens to look like a UDP header.
    let later = eth(
        0x0800,
        &ipv4(17, [1; 4], [2; 4], &[], 0x0003, &udp(10, 20, &[0; 16])),
    );
    let (p, st) = parse(&later);
    assert_eq!(st.total(), 0);
    assert_eq!(
        p.key.presence(),
        present::L3 | present::FRAG | present::LATER_FRAG
    );
    assert_eq!(f(&p.key, Field::IpProto), 17);
    assert_eq!(
        (f(&p.key, Field::UdpSrc), f(&p.key, Field::UdpDst)),
        (0, 0),
        "no L4 fields"
    );
    assert_eq!((p.layout.l4, p.layout.l4_kind), (0, L4Kind::None));
}

#[test]
fn ipv4_inconsistent_headers() {
    let good = ipv4(6, [1; 4], [2; 4], &[], 0, &tcp(1, 2, &[]));
    type Mutation = fn(&mut Vec<u8>);
    let cases: [(Mutation, &str); 4] = [
        (|h| h[0] = 0x44, "bad_ipv4_ihl"),
        (|h| h[0] = 0x55, "bad_ipv4_version"),
        (
            |h| h[2..4].copy_from_slice(&19u16.to_be_bytes()),
            "bad_ipv4_total_len",
        ),
        (|h| h[0] = 0x4f, "truncated_ipv4"), // 60-byte header in a 40-byte packet
    ];
    for (mutate, counter) in cases {
        let mut h = good.clone();
        mutate(&mut h);
        let (p, st) = parse(&eth(0x0800, &h));
        assert_eq!(fired(&st), [counter]);
        assert_eq!(p.key.presence(), 0, "{counter}");
        assert_eq!(f(&p.key, Field::EthType), 0x0800, "L2 survives");
        assert_eq!(f(&p.key, Field::Ipv4Src), 0, "{counter}: L3 stays zero");
    }
    // Total length beyond the frame (snap length): header kept, counted,
    // transport parsed from what is there.
    let mut h = good.clone();
    h[2..4].copy_from_slice(&1500u16.to_be_bytes());
    let (p, st) = parse(&eth(0x0800, &h));
    assert_eq!(fired(&st), ["ipv4_payload_truncated"]);
    assert_eq!(p.key.presence(), present::L3 | present::L4);
    // Total length shorter than the TCP header: TCP is truncated even though
    // the frame has the bytes (they are padding).
    let mut h = good;
    h[2..4].copy_from_slice(&30u16.to_be_bytes());
    let (p, st) = parse(&eth(0x0800, &h));
    assert_eq!(fired(&st), ["truncated_tcp"]);
    assert_eq!(p.key.presence(), present::L3);
}

#[test]
fn ipv6_hop_by_hop_and_fragment() {
    // IPv6 → hop-by-hop (8 bytes) → fragment (offset 0, M=1) → TCP.
    let payload = cat(&[&ext(44, 1), &frag6(6, 0, true), &tcp(443, 50000, b"data")]);
    let frame = eth(0x86dd, &ipv6(0, v6(1), v6(2), &payload));
    let (p, st) = parse(&frame);
    assert_eq!(st.total(), 0);
    let k = &p.key;
    assert_eq!(f(k, Field::Ipv6Src), u128::from_be_bytes(v6(1)));
    assert_eq!(f(k, Field::Ipv6Dst), u128::from_be_bytes(v6(2)));
    assert_eq!(f(k, Field::Ipv6Flabel), 0x12345);
    assert_eq!((f(k, Field::IpDscp), f(k, Field::IpEcn)), (46, 1));
    assert_eq!(f(k, Field::IpProto), 6, "upper-layer protocol");
    assert_eq!(
        f(k, Field::Ipv6Exthdr),
        (exthdr::HOP | exthdr::FRAG) as u128
    );
    assert_eq!((f(k, Field::TcpSrc), f(k, Field::TcpDst)), (443, 50000));
    assert_eq!(k.presence(), present::L3 | present::L4 | present::FRAG);
    let l = p.layout;
    assert_eq!(
        (l.l3, l.ip_header_len, l.l4, l.l4_kind),
        (14, 56, 70, L4Kind::Tcp)
    );

    // Later fragment: no L4, protocol from the fragment header.
    let payload = cat(&[&ext(44, 2), &frag6(17, 100, false), &udp(1, 2, &[])]);
    let (p, st) = parse(&eth(0x86dd, &ipv6(0, v6(1), v6(2), &payload)));
    assert_eq!(st.total(), 0);
    assert_eq!(
        p.key.presence(),
        present::L3 | present::FRAG | present::LATER_FRAG
    );
    assert_eq!(f(&p.key, Field::IpProto), 17);
    assert_eq!(f(&p.key, Field::UdpSrc), 0);
}

#[test]
fn ipv6_exthdr_flags() {
    let run = |first: u8, payload: Vec<u8>| {
        let (p, st) = parse(&eth(0x86dd, &ipv6(first, v6(1), v6(2), &payload)));
        (
            f(&p.key, Field::Ipv6Exthdr) as u16,
            f(&p.key, Field::IpProto),
            p.key.presence(),
            st,
        )
    };
    // DEST → ROUTING → DEST → UDP: two DEST are allowed (RFC 8200 §4.1).
    let (eh, pr, pres, _) = run(
        60,
        cat(&[&ext(43, 1), &ext(60, 1), &ext(17, 1), &udp(1, 2, &[])]),
    );
    assert_eq!(eh, exthdr::DEST | exthdr::ROUTER);
    assert_eq!(pr, 17);
    assert_eq!(pres, present::L3 | present::L4);
    // ROUTING → HOP: hop-by-hop not first.
    let (eh, ..) = run(43, cat(&[&ext(0, 1), &ext(6, 1), &tcp(1, 2, &[])]));
    assert_eq!(eh, exthdr::ROUTER | exthdr::HOP | exthdr::UNSEQ);
    // ROUTING twice.
    let (eh, ..) = run(43, cat(&[&ext(43, 1), &ext(6, 1), &tcp(1, 2, &[])]));
    assert_eq!(eh, exthdr::ROUTER | exthdr::UNREP);
    // DEST DEST without routing: a repeat.
    let (eh, ..) = run(60, cat(&[&ext(60, 1), &ext(6, 1), &tcp(1, 2, &[])]));
    assert_eq!(eh, exthdr::DEST | exthdr::UNREP);
    // HOP → ESP: stop, ip_proto 50, L3 but no L4.
    let (eh, pr, pres, st) = run(0, cat(&[&ext(50, 1), &[0u8; 16]]));
    assert_eq!((eh, pr, pres), (exthdr::HOP | exthdr::ESP, 50, present::L3));
    assert_eq!(st.total(), 0);
    // No next header.
    let (eh, pr, pres, _) = run(59, vec![]);
    assert_eq!((eh, pr, pres), (exthdr::NONEXT, 59, present::L3));
    // AH (length 4 → 24 bytes) → ICMPv6 echo.
    let mut ah = vec![0u8; 24];
    ah[0] = 58;
    ah[1] = 4;
    let (eh, pr, pres, _) = run(51, cat(&[&ah, &[128, 0, 0, 0, 0, 0, 0, 0]]));
    assert_eq!(
        (eh, pr, pres),
        (exthdr::AUTH, 58, present::L3 | present::L4)
    );
}

#[test]
fn ipv6_ext_limit_and_truncation() {
    // MAX headers are fine; one more is counted and clears L3.
    let chain = |n: usize| -> Vec<u8> {
        let mut v = Vec::new();
        for i in 0..n {
            v.extend(ext(if i + 1 == n { 17 } else { 60 }, 1));
        }
        v.extend(udp(1, 2, &[]));
        v
    };
    let (p, st) = parse(&eth(
        0x86dd,
        &ipv6(60, v6(1), v6(2), &chain(MAX_IPV6_EXT_HEADERS)),
    ));
    assert_eq!(fired(&st), Vec::<&str>::new());
    assert_eq!(p.key.presence(), present::L3 | present::L4);
    let (p, st) = parse(&eth(
        0x86dd,
        &ipv6(60, v6(1), v6(2), &chain(MAX_IPV6_EXT_HEADERS + 1)),
    ));
    assert_eq!(fired(&st), ["ipv6_ext_limit"]);
    assert_eq!(p.key.presence(), 0);
    assert_eq!(f(&p.key, Field::IpProto), 0);
    // A hop-by-hop header announcing 16 bytes with 8 present.
    let (p, st) = parse(&eth(0x86dd, &ipv6(0, v6(1), v6(2), &ext(6, 2)[..8])));
    assert_eq!(fired(&st), ["truncated_ipv6_ext"]);
    assert_eq!(p.key.presence(), 0);
    assert_eq!(
        p.layout.l3_kind,
        L3Kind::Ipv6,
        "fixed header still rewritable"
    );
    assert_eq!(p.layout.ip_header_len, 0);
    // Wrong version.
    let mut h = ipv6(59, v6(1), v6(2), &[]);
    h[0] = 0x45;
    let (_, st) = parse(&eth(0x86dd, &h));
    assert_eq!(fired(&st), ["bad_ipv6_version"]);
}

/// ICMPv6 NS/NA body: reserved/flags word, target, options.
fn nd(msg_type: u8, target: [u8; 16], opts: &[u8]) -> Vec<u8> {
    cat(&[&[msg_type, 0, 0, 0], &[0; 4], &target, opts])
}

#[test]
fn nd_solicitation_with_sll() {
    let target = v6(9);
    let sll = [1, 1, 0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee];
    let tll = [2, 1, 0x02, 1, 1, 1, 1, 1];
    let frame = eth(
        0x86dd,
        &ipv6(58, v6(1), v6(2), &nd(135, target, &cat(&[&tll, &sll]))),
    );
    let (p, st) = parse(&frame);
    assert_eq!(st.total(), 0);
    let k = &p.key;
    assert_eq!((f(k, Field::Icmpv6Type), f(k, Field::Icmpv6Code)), (135, 0));
    assert_eq!(f(k, Field::Ipv6NdTarget), u128::from_be_bytes(target));
    assert_eq!(f(k, Field::Ipv6NdSll), 0x02aa_bbcc_ddee);
    assert_eq!(f(k, Field::Ipv6NdTll), 0, "TLL is ignored in an NS");
    assert_eq!(
        k.presence(),
        present::L3 | present::L4 | present::ND_TARGET | present::ND_SLL
    );
    assert_eq!(p.layout.l4_kind, L4Kind::Icmpv6);

    // NA with TLL.
    let frame = eth(0x86dd, &ipv6(58, v6(1), v6(2), &nd(136, target, &tll)));
    let (p, _) = parse(&frame);
    assert_eq!(f(&p.key, Field::Ipv6NdTll), 0x0201_0101_0101);
    assert_eq!(
        p.key.presence() & (present::ND_SLL | present::ND_TLL),
        present::ND_TLL
    );

    // Zero-length option: counted, target kept, no SLL.
    let bad = [1, 0, 0, 0, 0, 0, 0, 0];
    let (p, st) = parse(&eth(
        0x86dd,
        &ipv6(58, v6(1), v6(2), &nd(135, target, &bad)),
    ));
    assert_eq!(fired(&st), ["bad_nd_option"]);
    assert_eq!(
        p.key.presence() & (present::ND_TARGET | present::ND_SLL),
        present::ND_TARGET
    );

    // Duplicate SLL: first kept, counted.
    let sll2 = [1, 1, 9, 9, 9, 9, 9, 9];
    let (p, st) = parse(&eth(
        0x86dd,
        &ipv6(58, v6(1), v6(2), &nd(135, target, &cat(&[&sll, &sll2]))),
    ));
    assert_eq!(fired(&st), ["nd_dup_option"]);
    assert_eq!(f(&p.key, Field::Ipv6NdSll), 0x02aa_bbcc_ddee);

    // Code != 0: no ND fields. Truncated target: counted.
    let mut body = nd(135, target, &sll);
    body[1] = 1;
    let (p, _) = parse(&eth(0x86dd, &ipv6(58, v6(1), v6(2), &body)));
    assert_eq!(p.key.presence() & present::ND_TARGET, 0);
    let (p, st) = parse(&eth(
        0x86dd,
        &ipv6(58, v6(1), v6(2), &nd(135, target, &[])[..20]),
    ));
    assert_eq!(fired(&st), ["truncated_nd"]);
    assert_eq!(p.key.presence(), present::L3 | present::L4);
}

#[test]
fn icmpv4_and_sctp() {
    let echo = [8u8, 0, 0, 0, 0, 1, 0, 1];
    let (p, st) = parse(&eth(0x0800, &ipv4(1, [1; 4], [2; 4], &[], 0, &echo)));
    assert_eq!(st.total(), 0);
    assert_eq!(
        (f(&p.key, Field::Icmpv4Type), f(&p.key, Field::Icmpv4Code)),
        (8, 0)
    );
    assert_eq!(p.layout.l4_kind, L4Kind::Icmpv4);
    // ICMPv4 inside IPv6 is not ICMPv4: no L4.
    let (p, _) = parse(&eth(0x86dd, &ipv6(1, v6(1), v6(2), &echo)));
    assert_eq!(p.key.presence(), present::L3);

    let sctp = [0x0b, 0x59, 0x0b, 0x5a, 0, 0, 0, 7, 0, 0, 0, 0];
    let (p, _) = parse(&eth(0x0800, &ipv4(132, [1; 4], [2; 4], &[], 0, &sctp)));
    assert_eq!(
        (f(&p.key, Field::SctpSrc), f(&p.key, Field::SctpDst)),
        (2905, 2906)
    );
    assert_eq!(p.layout.l4_kind, L4Kind::Sctp);
    let (p, st) = parse(&eth(
        0x0800,
        &ipv4(132, [1; 4], [2; 4], &[], 0, &sctp[..11]),
    ));
    assert_eq!(fired(&st), ["truncated_sctp"]);
    assert_eq!(p.key.presence(), present::L3);
}

#[test]
fn arp_request() {
    let body = [
        0, 1, 8, 0, 6, 4, 0, 1, 2, 0, 0, 0, 0, 1, 10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 10, 0, 0, 2,
    ];
    let (p, st) = parse(&eth(0x0806, &body));
    assert_eq!(st.total(), 0);
    let k = &p.key;
    assert_eq!(f(k, Field::ArpOp), 1);
    assert_eq!(f(k, Field::ArpSpa), 0x0a00_0001);
    assert_eq!(f(k, Field::ArpTpa), 0x0a00_0002);
    assert_eq!(f(k, Field::ArpSha), 0x0200_0000_0001);
    assert_eq!(f(k, Field::ArpTha), 0);
    assert_eq!(k.presence(), present::L3);
    assert_eq!((p.layout.l3, p.layout.l3_kind), (14, L3Kind::Arp));
    let mut odd = body;
    odd[1] = 6; // IEEE 802 hardware type
    let (p, st) = parse(&eth(0x0806, &odd));
    assert_eq!(fired(&st), ["arp_unsupported"]);
    assert_eq!(p.key.presence(), 0);
}

#[test]
fn gre_with_and_without_key() {
    // C and K set: checksum word, then key 0xdeadbeef; payload is Ethernet.
    let gre = [
        0xa0, 0x00, 0x65, 0x58, 0, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef, 0xee,
    ];
    let (p, st) = parse(&eth(0x0800, &ipv4(47, [1; 4], [2; 4], &[], 0, &gre)));
    assert_eq!(st.total(), 0);
    assert_eq!(f(&p.key, Field::TunnelId), 0xdead_beef);
    assert_eq!(p.key.presence(), present::L3 | present::TUNNEL);
    let l = p.layout;
    assert_eq!(
        (l.l4, l.l4_kind, l.tunnel, l.inner),
        (34, L4Kind::Gre, TunnelKind::Gre, 46)
    );
    // Outer headers stay in the key.
    assert_eq!(f(&p.key, Field::IpProto), 47);
    assert_eq!(f(&p.key, Field::Ipv4Src), 0x0101_0101);

    let gre = [0x00, 0x00, 0x08, 0x00];
    let (p, _) = parse(&eth(0x0800, &ipv4(47, [1; 4], [2; 4], &[], 0, &gre)));
    assert_eq!(
        (f(&p.key, Field::TunnelId), p.key.presence()),
        (0, present::L3)
    );
    // Version 1 (PPTP) and RFC 1701 routing are counted, not parsed.
    let (_, st) = parse(&eth(
        0x0800,
        &ipv4(
            47,
            [1; 4],
            [2; 4],
            &[],
            0,
            &[0x30, 0x01, 0x88, 0x0b, 0, 0, 0, 0],
        ),
    ));
    assert_eq!(fired(&st), ["bad_gre_version"]);
    let (_, st) = parse(&eth(
        0x0800,
        &ipv4(47, [1; 4], [2; 4], &[], 0, &[0x40, 0, 0x08, 0]),
    ));
    assert_eq!(fired(&st), ["gre_unsupported"]);
    let (_, st) = parse(&eth(
        0x0800,
        &ipv4(47, [1; 4], [2; 4], &[], 0, &[0x20, 0, 0x08, 0, 0]),
    ));
    assert_eq!(fired(&st), ["truncated_gre"]);
}

#[test]
fn vxlan_vni() {
    let inner = eth(0x0800, &[]);
    let vx = cat(&[&[0x08, 0, 0, 0, 0x12, 0x34, 0x56, 0], &inner]);
    let frame = eth(
        0x0800,
        &ipv4(17, [1; 4], [2; 4], &[], 0, &udp(49152, 4789, &vx)),
    );
    let (p, st) = parse(&frame);
    assert_eq!(st.total(), 0);
    assert_eq!(f(&p.key, Field::TunnelId), 0x123456);
    assert_eq!(f(&p.key, Field::UdpDst), 4789);
    assert_eq!(
        f(&p.key, Field::EthSrc),
        0x0200_0000_0002,
        "outer Ethernet kept"
    );
    assert_eq!(
        p.key.presence(),
        present::L3 | present::L4 | present::TUNNEL
    );
    assert_eq!((p.layout.tunnel, p.layout.inner), (TunnelKind::Vxlan, 50));
    assert_eq!(&frame[p.layout.inner as usize..], &inner[..]);

    let vx = [0u8, 0, 0, 0, 0x12, 0x34, 0x56, 0];
    let (p, st) = parse(&eth(
        0x0800,
        &ipv4(17, [1; 4], [2; 4], &[], 0, &udp(1, 4789, &vx)),
    ));
    assert_eq!(fired(&st), ["vxlan_no_vni"]);
    assert_eq!(p.key.presence() & present::TUNNEL, 0);
    // Over IPv6 too.
    let vx = [0x08u8, 0, 0, 0, 0, 0, 7, 0];
    let (p, _) = parse(&eth(0x86dd, &ipv6(17, v6(1), v6(2), &udp(1, 4789, &vx))));
    assert_eq!(f(&p.key, Field::TunnelId), 7);
}

#[test]
fn mpls_and_pbb() {
    let lse: u32 = (1000 << 12) | (3 << 9) | (1 << 8) | 64;
    let (p, st) = parse(&eth(0x8847, &lse.to_be_bytes()));
    assert_eq!(st.total(), 0);
    assert_eq!(f(&p.key, Field::MplsLabel), 1000);
    assert_eq!(f(&p.key, Field::MplsTc), 3);
    assert_eq!(f(&p.key, Field::MplsBos), 1);
    assert_eq!(p.key.presence(), present::MPLS);
    assert_eq!((p.layout.l3, p.layout.l3_kind), (14, L3Kind::Mpls));
    let (p, st) = parse(&eth(0x8848, &lse.to_be_bytes()[..3]));
    assert_eq!(fired(&st), ["truncated_mpls"]);
    assert_eq!(p.key.presence(), 0);

    let (p, _) = parse(&eth(0x88e7, &[0, 0xab, 0xcd, 0xef]));
    assert_eq!(f(&p.key, Field::PbbIsid), 0xabcdef);
}

/// The L3/L4 key of `payload` as an unencapsulated frame under `et`.
fn plain_key(et: u16, payload: &[u8]) -> FlowKey {
    parse(&eth(et, payload)).0.key
}

/// Only the payload fields (every field needing L3 presence) and presence.
fn l3_view(k: &FlowKey) -> Vec<(Field, u128)> {
    Field::ALL
        .iter()
        .filter(|f| f.required_presence() & present::L3 != 0)
        .map(|&fd| (fd, k.get(fd)))
        .collect()
}

#[test]
fn mpls_payload_is_parsed_below_the_stack() {
    let tcp4 = ipv4(
        6,
        [10, 0, 0, 1],
        [10, 0, 0, 2],
        &[],
        0,
        &tcp(1111, 2222, b"x"),
    );
    let bottom: u32 = (100 << 12) | (3 << 9) | (1 << 8) | 64;
    let upper: u32 = (200 << 12) | (5 << 9) | 63;
    // One label over IPv4/TCP: the top label, and the payload's fields
    // exactly as an unencapsulated IPv4 frame gives them.
    let (p, st) = parse(&eth(0x8847, &cat(&[&bottom.to_be_bytes(), &tcp4])));
    assert_eq!(st.total(), 0);
    let plain = plain_key(0x0800, &tcp4);
    assert_eq!(l3_view(&p.key), l3_view(&plain));
    assert_eq!(encap::payload(&p.key), encap::Payload::Ipv4);
    assert_eq!(p.key.presence(), present::MPLS | present::L3 | present::L4);
    assert_eq!(f(&p.key, Field::MplsLabel), 100);
    // The layout still stops at the label.
    assert_eq!(
        (p.layout.l3, p.layout.l3_kind, p.layout.l4),
        (14, L3Kind::Mpls, 0)
    );

    // Two labels: the second is stored packed (label, TC, S) for a pop.
    let (p, _) = parse(&eth(
        0x8847,
        &cat(&[&upper.to_be_bytes(), &bottom.to_be_bytes(), &tcp4]),
    ));
    assert_eq!(f(&p.key, Field::MplsLabel), 200);
    assert_eq!(f(&p.key, Field::MplsBos), 0);
    assert_ne!(p.key.presence() & present::MPLS_NEXT, 0);
    assert_eq!(p.key.get(encap::NEXT_LSE), (100 << 4) | (3 << 1) | 1);
    assert_eq!(l3_view(&p.key), l3_view(&plain));

    // IPv6 (nibble 6) and ARP (anything else) payloads.
    let v6tcp = ipv6(6, v6(1), v6(2), &tcp(1, 2, b""));
    let (p, _) = parse(&eth(0x8847, &cat(&[&bottom.to_be_bytes(), &v6tcp])));
    assert_eq!(encap::payload(&p.key), encap::Payload::Ipv6);
    assert_eq!(l3_view(&p.key), l3_view(&plain_key(0x86dd, &v6tcp)));
    let arp = frame()
        .arp(1, SRC, [10, 0, 0, 1], [0; 6], [10, 0, 0, 2])
        .build()
        .split_off(14);
    let (p, _) = parse(&eth(0x8847, &cat(&[&bottom.to_be_bytes(), &arp])));
    assert_eq!(encap::payload(&p.key), encap::Payload::Arp);
    assert_eq!(l3_view(&p.key), l3_view(&plain_key(0x0806, &arp)));
    // A payload cut short: the kind is recorded, the fields are absent,
    // and nothing is counted (it is the payload, not the frame's header).
    let (p, st) = parse(&eth(0x8847, &cat(&[&bottom.to_be_bytes(), &tcp4[..10]])));
    assert_eq!(st.total(), 0);
    assert_eq!(p.key.presence(), present::MPLS);
}

#[test]
fn pbb_customer_frame_is_parsed() {
    let tcp4 = ipv4(
        6,
        [10, 0, 0, 1],
        [10, 0, 0, 2],
        &[],
        0,
        &tcp(1111, 2222, b"x"),
    );
    let c_da = [0x02, 0, 0, 0, 0, 0x0c];
    // I-TAG: PCP 5, I-SID 0x000064; customer header with other addresses.
    let body = cat(&[&[0xa0, 0, 0, 0x64], &c_da, &SRC, &[0x08, 0x00], &tcp4]);
    let (p, st) = parse(&eth(0x88e7, &body));
    assert_eq!(st.total(), 0);
    assert_eq!(f(&p.key, Field::PbbIsid), 0x64);
    assert_eq!(f(&p.key, Field::EthType), 0x88e7);
    assert_eq!(p.key.get(encap::CUSTOMER_TYPE), 0x0800);
    assert_eq!(encap::payload(&p.key), encap::Payload::Ipv4);
    // Every payload field but the ND target, whose slot holds the customer
    // addresses (this payload is not ND).
    let no_nd = |k: &FlowKey| {
        let mut v = l3_view(k);
        v.retain(|&(fd, _)| fd != Field::Ipv6NdTarget);
        v
    };
    assert_eq!(no_nd(&p.key), no_nd(&plain_key(0x0800, &tcp4)));
    assert_ne!(p.key.presence() & present::PBB_CMAC, 0);
    let mac = |m: [u8; 6]| m.iter().fold(0u128, |a, &b| (a << 8) | u128::from(b));
    assert_eq!(
        p.key.get(encap::CUSTOMER_MACS),
        (mac(c_da) << 48) | mac(SRC)
    );
    // Customer addresses equal to the backbone ones are not stored.
    let body = cat(&[&[0, 0, 0, 0x64], &DST, &SRC, &[0x08, 0x00], &tcp4]);
    let (p, _) = parse(&eth(0x88e7, &body));
    assert_eq!(p.key.presence() & present::PBB_CMAC, 0);
    assert_eq!(p.key.get(encap::CUSTOMER_MACS), 0);
    // A tagged customer frame: its first EtherType (the TPID), no payload.
    let body = cat(&[
        &[0, 0, 0, 0x64],
        &DST,
        &SRC,
        &[0x81, 0, 0, 5, 0x08, 0],
        &tcp4,
    ]);
    let (p, _) = parse(&eth(0x88e7, &body));
    assert_eq!(p.key.get(encap::CUSTOMER_TYPE), 0x8100);
    assert_eq!(encap::payload(&p.key), encap::Payload::None);
    assert_eq!(p.key.presence(), 0);
}

/// Every field whose presence requirement the truncated key meets must equal
/// the full key's value, and presence must only grow with the length.
fn check_prefixes(full: &[u8]) {
    let (whole, _) = parse(full);
    let mut prev = 0u16;
    for n in 0..=full.len() {
        let (p, _) = parse(&full[..n]);
        let pres = p.key.presence();
        assert_eq!(
            pres & !whole.key.presence(),
            0,
            "len {n}: presence beyond the full frame"
        );
        assert_eq!(pres & prev, prev, "len {n}: presence not monotone");
        prev = pres;
        for field in Field::ALL {
            let need = field.required_presence();
            // ARP fields share storage with ND/IPv4 fields; their
            // prerequisite is eth_type = ARP.
            let arp = matches!(
                field,
                Field::ArpOp | Field::ArpSpa | Field::ArpTpa | Field::ArpSha | Field::ArpTha
            );
            if arp && whole.key.get(Field::EthType) != 0x0806 {
                continue;
            }
            if need != 0 && pres & need == need {
                assert_eq!(p.key.get(field), whole.key.get(field), "len {n}: {field:?}");
            }
        }
    }
    assert_eq!(prev, whole.key.presence());
}

#[test]
fn truncation_at_every_length_of_tcp_frames() {
    let tcp4 = eth_tagged(
        &[(0x88a8, 10), (0x8100, 20)],
        0x0800,
        &ipv4(
            6,
            [1; 4],
            [2; 4],
            &[0x94, 4, 0, 0],
            0,
            &tcp(1, 2, b"payload"),
        ),
    );
    check_prefixes(&tcp4);
    let (whole, _) = parse(&tcp4);
    assert_eq!(
        whole.key.presence(),
        present::VLAN | present::L3 | present::L4
    );
    // Every prefix shorter than the end of the TCP header lacks L4 and
    // counts why.
    let tcp_end = 22 + 24 + 20;
    for n in 0..tcp_end {
        let (p, st) = parse(&tcp4[..n]);
        assert_eq!(p.key.presence() & present::L4, 0, "len {n}");
        // One reason for stopping; `*_payload_truncated` only notes that
        // the IP length field points past the (cut) frame.
        let reasons: Vec<_> = fired(&st)
            .into_iter()
            .filter(|c| !c.ends_with("payload_truncated"))
            .collect();
        assert_eq!(reasons.len(), 1, "len {n}: {reasons:?}");
    }
    let tcp6 = eth(
        0x86dd,
        &ipv6(
            0,
            v6(1),
            v6(2),
            &cat(&[&ext(44, 1), &frag6(6, 0, true), &tcp(1, 2, b"x")]),
        ),
    );
    check_prefixes(&tcp6);
    let nd6 = eth(
        0x86dd,
        &ipv6(58, v6(1), v6(2), &nd(135, v6(3), &[1, 1, 2, 2, 2, 2, 2, 2])),
    );
    check_prefixes(&nd6);
    let arp = eth(
        0x0806,
        &[
            0, 1, 8, 0, 6, 4, 0, 2, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 4, 4, 4, 4,
        ],
    );
    check_prefixes(&arp);
}
