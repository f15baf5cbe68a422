//! Each action on real frames: re-parse the result, check the key shows the
//! action and every checksum verifies from scratch.

mod common;

use common::*;
use offlow_datapath::{crc32c, execute, ExecOutcome, ExecStats, PacketBuf, PortInfo, Verdict};
use offlow_flow::{present, Field, L3Kind, Layout};
use offlow_pipeline::{Action, PortNo};

const OFPVID_PRESENT: u128 = 0x1000;

struct Run {
    frame: Vec<u8>,
    layout: Layout,
    out: ExecOutcome,
    stats: ExecStats,
    sink: RecSink,
}

fn run_with(frame: &[u8], actions: &[Action], ports: Vec<PortInfo>) -> Run {
    let mut buf = PacketBuf::from_frame(frame, 0);
    let mut layout = parse(frame).layout;
    let mut sink = RecSink {
        ports,
        ..Default::default()
    };
    let mut stats = ExecStats::default();
    let out = execute(actions, &mut buf, &mut layout, 1, &mut sink, &mut stats);
    Run {
        frame: buf.frame().to_vec(),
        layout,
        out,
        stats,
        sink,
    }
}

fn run(frame: &[u8], actions: &[Action]) -> Run {
    run_with(frame, actions, Vec::new())
}

fn ipv4_tcp() -> Vec<u8> {
    frame4([10, 0, 0, 1], [10, 0, 0, 2], 64, 0x2e)
        .tcp(1234, 80)
        .tcp_flags(PSH_ACK)
        .payload(b"hello")
        .build()
}
fn ipv4_udp(zero: bool) -> Vec<u8> {
    let csum = if zero {
        Checksum::Zero
    } else {
        Checksum::Valid
    };
    frame4([192, 168, 1, 1], [8, 8, 8, 8], 5, 0)
        .udp(5353, 53)
        .payload(b"query!")
        .l4_checksum(csum)
        .build()
}
fn ipv4_sctp() -> Vec<u8> {
    frame4([10, 1, 1, 1], [10, 2, 2, 2], 64, 0)
        .sctp(36412, 2905)
        .sctp_tag(SCTP_TAG)
        .payload(&SCTP_DATA)
        .build()
}
fn ipv4_icmp() -> Vec<u8> {
    frame4([10, 1, 1, 1], [10, 2, 2, 2], 64, 0)
        .icmpv4(8, 0, 0x0001_0002)
        .payload(b"ping")
        .build()
}
fn ipv6_tcp() -> Vec<u8> {
    frame6(v6(1), v6(2), 64, 0xb8, 0x12345)
        .tcp(40000, 443)
        .tcp_flags(PSH_ACK)
        .payload(b"abc")
        .build()
}
fn ipv6_udp() -> Vec<u8> {
    frame6(v6(3), v6(4), 64, 0, 0)
        .udp(1000, 2000)
        .payload(b"xyz")
        .build()
}
fn ipv6_echo() -> Vec<u8> {
    frame6(v6(3), v6(4), 64, 0, 0)
        .icmpv6(128, 0)
        .payload(b"\x00\x07\x00\x01echo")
        .build()
}
fn ipv6_ns() -> Vec<u8> {
    frame6(v6(5), v6(6), 255, 0, 0)
        .icmpv6(135, 0)
        .payload(&nd_body(v6(9), 1, MAC_A))
        .build()
}
fn ipv6_na() -> Vec<u8> {
    frame6(v6(6), v6(5), 255, 0, 0)
        .icmpv6(136, 0)
        .payload(&nd_body(v6(9), 2, MAC_B))
        .build()
}
fn arp_frame() -> Vec<u8> {
    frame()
        .arp(1, MAC_A, [10, 0, 0, 1], [0; 6], [10, 0, 0, 2])
        .build()
}
fn vlan_ipv4_tcp() -> Vec<u8> {
    frame()
        .vlan(100, 5)
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2])
        .ident(0x1234)
        .dont_frag()
        .tcp(1, 2)
        .tcp_flags(PSH_ACK)
        .build()
}
fn mpls_frame() -> Vec<u8> {
    // label 1000, tc 3, bos 1, ttl 10, then an IPv4 header; the UDP
    // checksum is left 0.
    frame()
        .mpls(1000, 3, 10)
        .ipv4([1, 1, 1, 1], [2, 2, 2, 2])
        .ttl(9)
        .ident(0x1234)
        .dont_frag()
        .udp(1, 2)
        .l4_checksum(Checksum::Zero)
        .build()
}

/// Set one field; the re-parsed key must equal the original key with that
/// field (read back) replaced, and every checksum must verify.
fn check_set(frame: &[u8], field: Field, value: u128) {
    let before = parse(frame).key;
    verify_checksums(frame).unwrap_or_else(|e| panic!("input frame bad: {e}"));
    let r = run(frame, &[Action::SetField(field, value)]);
    assert_eq!(r.stats.total(), 0, "{field:?}: {:?}", r.stats);
    let after = parse(&r.frame);
    let mut want = before;
    let stored = if field == Field::VlanVid {
        OFPVID_PRESENT | (value & 0xfff)
    } else {
        value & field.full_mask()
    };
    want.set(field, stored);
    assert_eq!(after.key, want, "{field:?} = {value:#x}");
    assert_eq!(after.key.get(field), stored);
    assert_eq!(after.layout, r.layout, "{field:?}: layout");
    verify_checksums(&r.frame).unwrap_or_else(|e| panic!("{field:?}: {e}"));
}

#[test]
fn crc32c_known_answers() {
    // RFC 3720 B.4 / the common check value.
    assert_eq!(crc32c(b"123456789"), 0xe306_9283);
    assert_eq!(crc32c(&[0u8; 32]), 0x8a91_36aa);
    assert_eq!(crc32c(&[0xffu8; 32]), 0x62a8_ab43);
}

#[test]
fn checker_rejects_corrupted_frames() {
    // The checker the other tests rely on can fail: flip one bit anywhere
    // in each checksummed region and it must complain.
    for f in [
        ipv4_tcp(),
        ipv4_udp(false),
        ipv4_sctp(),
        ipv4_icmp(),
        ipv6_tcp(),
        ipv6_ns(),
    ] {
        verify_checksums(&f).unwrap();
        let lay = parse(&f).layout;
        for at in [lay.l3 as usize + 12, lay.l4 as usize + 2, f.len() - 1] {
            let mut bad = f.clone();
            bad[at] ^= 0x10;
            assert!(verify_checksums(&bad).is_err(), "flip at {at} not detected");
        }
    }
}

#[test]
fn set_fields_ipv4_tcp() {
    let f = ipv4_tcp();
    check_set(&f, Field::EthDst, 0x0a0b_0c0d_0e0f);
    check_set(&f, Field::EthSrc, 0xffee_ddcc_bbaa);
    check_set(&f, Field::IpDscp, 46);
    check_set(&f, Field::IpEcn, 3);
    check_set(&f, Field::Ipv4Src, 0xc0a8_0101);
    check_set(&f, Field::Ipv4Dst, 0x0101_0101);
    check_set(&f, Field::TcpSrc, 65535);
    check_set(&f, Field::TcpDst, 8080);
}

#[test]
fn set_fields_ipv4_udp_and_zero_checksum() {
    let f = ipv4_udp(false);
    check_set(&f, Field::UdpSrc, 1);
    check_set(&f, Field::UdpDst, 4789 + 1);
    check_set(&f, Field::Ipv4Dst, 0x0a00_0005);
    check_set(&f, Field::Ipv4Src, 0xffff_ffff);
    let z = ipv4_udp(true);
    for (field, v) in [
        (Field::Ipv4Src, 0x0102_0304),
        (Field::UdpDst, 99),
        (Field::UdpSrc, 7),
    ] {
        check_set(&z, field, v);
        let r = run(&z, &[Action::SetField(field, v)]);
        let l4 = r.layout.l4 as usize;
        assert_eq!(
            &r.frame[l4 + 6..l4 + 8],
            &[0, 0],
            "RFC 768: no checksum stays none"
        );
    }
}

#[test]
fn udp_checksum_never_becomes_zero() {
    // Search for a destination port that makes the new checksum compute to
    // 0: it must be sent as 0xffff (RFC 768), never as "no checksum".
    let f = ipv4_udp(false);
    let l4 = parse(&f).layout.l4 as usize;
    let c = u16::from_be_bytes([f[l4 + 6], f[l4 + 7]]);
    let old_port = u16::from_be_bytes([f[l4 + 2], f[l4 + 3]]);
    // One's-complement: changing the port by d changes the sum by d, so
    // the checksum becomes 0 when sum' = 0xffff.
    let target = (0..=u16::MAX)
        .find(|&p| offlow_wire::checksum::update16(c, old_port, p) == 0)
        .expect("some port zeroes the checksum");
    let r = run(&f, &[Action::SetField(Field::UdpDst, target as u128)]);
    assert_eq!(&r.frame[l4 + 6..l4 + 8], &[0xff, 0xff]);
    verify_checksums(&r.frame).unwrap();
}

#[test]
fn set_fields_sctp_and_icmpv4() {
    let s = ipv4_sctp();
    check_set(&s, Field::SctpSrc, 1);
    check_set(&s, Field::SctpDst, 9999);
    check_set(&s, Field::Ipv4Dst, 0x0a0a_0a0a);
    let i = ipv4_icmp();
    check_set(&i, Field::Icmpv4Type, 0);
    check_set(&i, Field::Icmpv4Code, 5);
    check_set(&i, Field::Ipv4Src, 0x0a0a_0a0a);
}

#[test]
fn set_fields_ipv6() {
    for f in [ipv6_tcp(), ipv6_udp()] {
        check_set(
            &f,
            Field::Ipv6Src,
            0xfe80_0000_0000_0000_0000_0000_0000_0001,
        );
        check_set(&f, Field::Ipv6Dst, u128::MAX - 5);
        check_set(&f, Field::Ipv6Flabel, 0xfffff);
        check_set(&f, Field::IpDscp, 10);
        check_set(&f, Field::IpEcn, 1);
    }
    check_set(&ipv6_tcp(), Field::TcpDst, 22);
    check_set(&ipv6_udp(), Field::UdpSrc, 53);
    let e = ipv6_echo();
    check_set(&e, Field::Icmpv6Type, 129);
    check_set(&e, Field::Icmpv6Code, 1);
    check_set(
        &e,
        Field::Ipv6Dst,
        0x2001_0db8_0000_0000_0000_0000_0000_00ff,
    );
}

#[test]
fn set_fields_neighbour_discovery() {
    let ns = ipv6_ns();
    assert_ne!(parse(&ns).key.presence() & present::ND_SLL, 0);
    check_set(
        &ns,
        Field::Ipv6NdTarget,
        0x2001_0db8_0000_0000_0000_0000_dead_beef,
    );
    check_set(&ns, Field::Ipv6NdSll, 0x1122_3344_5566);
    check_set(
        &ns,
        Field::Ipv6Src,
        0xfe80_0000_0000_0000_0000_0000_0000_0042,
    );
    let na = ipv6_na();
    check_set(&na, Field::Ipv6NdTll, 0x0a0b_0c0d_0e0f);
    check_set(&na, Field::Ipv6NdTarget, 7);
    // NS has no TLL option: counted, frame unchanged.
    let r = run(&ns, &[Action::SetField(Field::Ipv6NdTll, 1)]);
    assert_eq!(r.stats.set_field_no_header, 1);
    assert_eq!(r.frame, ns);
}

#[test]
fn set_fields_arp() {
    let a = arp_frame();
    check_set(&a, Field::ArpOp, 2);
    check_set(&a, Field::ArpSpa, 0x0a00_00fe);
    check_set(&a, Field::ArpTpa, 0x0a00_00fd);
    check_set(&a, Field::ArpSha, 0x0200_0000_00cc);
    check_set(&a, Field::ArpTha, 0xffff_ffff_ffff);
    // IPv4 fields on ARP: prerequisite unmet.
    let r = run(&a, &[Action::SetField(Field::Ipv4Src, 1)]);
    assert_eq!(r.stats.set_field_no_header, 1);
    assert_eq!(r.frame, a);
}

#[test]
fn set_fields_vlan() {
    let f = vlan_ipv4_tcp();
    check_set(&f, Field::VlanVid, 0x1000 | 4094);
    check_set(&f, Field::VlanVid, 7);
    check_set(&f, Field::VlanPcp, 7);
    check_set(&f, Field::VlanPcp, 0);
    // Untagged: set-field VLAN does not push a tag (§7.2.3.8); counted.
    let u = ipv4_tcp();
    let r = run(
        &u,
        &[
            Action::SetField(Field::VlanVid, 10),
            Action::SetField(Field::VlanPcp, 1),
        ],
    );
    assert_eq!(r.stats.set_vlan_no_tag, 2);
    assert_eq!(r.frame, u);
}

#[test]
fn set_fields_mpls() {
    let m = mpls_frame();
    let k = parse(&m).key;
    assert_eq!(k.get(Field::MplsLabel), 1000);
    check_set(&m, Field::MplsLabel, 0xfffff);
    check_set(&m, Field::MplsTc, 5);
    // mpls_bos is refused by validation (the payload would then read as a
    // label: the key could not follow); the executor still writes the bit.
    let r = run(&m, &[Action::SetField(Field::MplsBos, 0)]);
    assert_eq!(r.stats.total(), 0);
    assert_eq!(r.frame[14 + 2] & 1, 0);
    assert_eq!(r.frame[..14 + 2], m[..14 + 2]);
    assert_eq!(r.frame[14 + 3..], m[14 + 3..]);
    let r = run(
        &m,
        &[
            Action::DecMplsTtl,
            Action::SetMplsTtl(33),
            Action::DecMplsTtl,
        ],
    );
    assert_eq!(r.out.verdict, Verdict::Done);
    assert_eq!(r.frame[14 + 3], 32);
    let mut low = m.clone();
    low[14 + 3] = 1;
    let r = run(&low, &[Action::DecMplsTtl, Action::output(PortNo(2))]);
    assert_eq!(r.out.verdict, Verdict::MplsTtlExpired);
    assert!(r.sink.sent.is_empty());
    assert_eq!(r.stats.mpls_ttl_expired, 1);
}

/// A relabelled TCP segment keeps a checksum valid for the pseudo-header
/// with the new protocol (what os-ken's switch tests expect, and what a
/// receiver of the relabelled packet verifies).
#[test]
fn ip_proto_relabels_and_keeps_every_checksum_valid() {
    use offlow_wire::checksum::{fold, pseudo_ipv4, pseudo_ipv6, sum};
    let f = ipv4_tcp();
    let r = run(&f, &[Action::SetField(Field::IpProto, 17)]);
    let p = parse(&r.frame);
    assert_eq!(p.key.get(Field::IpProto), 17);
    let l3 = p.layout.l3 as usize;
    assert_eq!(offlow_wire::checksum::checksum(&r.frame[l3..l3 + 20]), 0);
    assert_eq!(r.layout.l4, 0, "transport header no longer known");
    let seg = &r.frame[l3 + 20..];
    let ip = |a: usize| -> [u8; 4] { r.frame[l3 + a..l3 + a + 4].try_into().unwrap() };
    let acc = sum(seg, pseudo_ipv4(ip(12), ip(16), 17, seg.len() as u16));
    assert_eq!(fold(acc), 0xffff, "TCP checksum with the new pseudo-header");

    let r6 = run(&ipv6_tcp(), &[Action::SetField(Field::IpProto, 17)]);
    assert_eq!(r6.stats.set_field_unsupported, 0);
    let l3 = parse(&r6.frame).layout.l3 as usize;
    assert_eq!(r6.frame[l3 + 6], 17, "next header");
    let seg = &r6.frame[l3 + 40..];
    let a6 = |a: usize| -> [u8; 16] { r6.frame[l3 + a..l3 + a + 16].try_into().unwrap() };
    let acc = sum(seg, pseudo_ipv6(a6(8), a6(24), 17, seg.len() as u32));
    assert_eq!(
        fold(acc),
        0xffff,
        "IPv6: TCP checksum with the new next header"
    );
}

/// eth_type rewrites the EtherType after the tags and the frame is read
/// anew; mpls_bos writes the bottom-of-stack bit of the top label.
#[test]
fn eth_type_and_mpls_bos_are_written() {
    let f = ipv4_tcp();
    let r = run(&f, &[Action::SetField(Field::EthType, 0x8848)]);
    assert_eq!(&r.frame[12..14], &[0x88, 0x48]);
    assert_eq!(&r.frame[14..], &f[14..], "nothing behind it changes");
    assert_eq!(r.layout, parse(&r.frame).layout, "layout re-read");
    let m = frame()
        .mpls(100, 3, 64)
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2])
        .tcp(1, 2)
        .build();
    let r = run(&m, &[Action::SetField(Field::MplsBos, 0)]);
    assert_eq!(r.frame[14 + 2] & 1, 0, "S bit cleared");
    assert_eq!(r.frame[14..16], m[14..16]);
    assert_eq!(r.layout, parse(&r.frame).layout, "layout re-read");
}

#[test]
fn metadata_only_fields() {
    let f = ipv4_tcp();
    let r = run(
        &f,
        &[
            Action::SetField(Field::TunnelId, 77),
            Action::SetField(Field::Metadata, 5),
            Action::SetQueue(3),
        ],
    );
    assert_eq!(r.frame, f);
    assert_eq!(r.out.tunnel_id, Some(77));
    assert_eq!(r.out.metadata, Some(5));
    assert_eq!(r.out.queue, Some(3));
    for field in [Field::InPort, Field::Ipv6Exthdr] {
        let r = run(&f, &[Action::SetField(field, 1)]);
        assert_eq!(r.stats.set_field_unsupported, 1, "{field:?}");
        assert_eq!(r.frame, f);
    }
    // pbb_isid rewrites an I-TAG (tests/prop_encap.rs); this frame has none.
    let r = run(&f, &[Action::SetField(Field::PbbIsid, 1)]);
    assert_eq!(r.stats.set_field_no_header, 1);
    assert_eq!(r.frame, f);
}

fn ttl_of(frame: &[u8]) -> u8 {
    let lay = parse(frame).layout;
    let l3 = lay.l3 as usize;
    match lay.l3_kind {
        L3Kind::Ipv4 => frame[l3 + 8],
        L3Kind::Ipv6 => frame[l3 + 7],
        _ => panic!("no IP"),
    }
}

#[test]
fn ttl_actions() {
    for f in [ipv4_tcp(), ipv6_tcp(), ipv4_udp(false)] {
        let t = ttl_of(&f);
        let r = run(&f, &[Action::DecNwTtl]);
        assert_eq!(r.out.verdict, Verdict::Done);
        assert_eq!(ttl_of(&r.frame), t - 1);
        verify_checksums(&r.frame).unwrap();
        assert_eq!(parse(&r.frame).key, parse(&f).key, "TTL is not in the key");
        let r = run(
            &f,
            &[
                Action::SetNwTtl(1),
                Action::output(PortNo(2)),
                Action::DecNwTtl,
                Action::output(PortNo(3)),
            ],
        );
        assert_eq!(r.out.verdict, Verdict::TtlExpired);
        assert_eq!(r.stats.ttl_expired, 1);
        assert_eq!(
            r.sink.sent.len(),
            1,
            "output before the expiry happened, after did not"
        );
        assert_eq!(ttl_of(&r.sink.sent[0].1), 1);
        verify_checksums(&r.frame).unwrap();
        let r = run(&f, &[Action::SetNwTtl(0), Action::DecNwTtl]);
        assert_eq!(r.out.verdict, Verdict::TtlExpired);
        let r = run(&f, &[Action::SetNwTtl(2), Action::DecNwTtl]);
        assert_eq!(r.out.verdict, Verdict::Done);
        assert_eq!(ttl_of(&r.frame), 1);
        verify_checksums(&r.frame).unwrap();
    }
    let r = run(&arp_frame(), &[Action::DecNwTtl, Action::SetNwTtl(3)]);
    assert_eq!(r.stats.ttl_no_ip, 2);
    assert_eq!(r.out.verdict, Verdict::Done);
}

#[test]
fn push_vlan_untagged_and_tagged() {
    let f = ipv4_tcp();
    let r = run(&f, &[Action::PushVlan(0x8100)]);
    let p = parse(&r.frame);
    assert_eq!(p.key.get(Field::VlanVid), OFPVID_PRESENT);
    assert_eq!(p.key.get(Field::VlanPcp), 0);
    assert_eq!(p.key.get(Field::EthType), 0x0800);
    assert_eq!(p.layout, r.layout);
    assert_eq!(&r.frame[12..16], &[0x81, 0, 0, 0]);
    assert_eq!(&r.frame[16..], &f[12..]);
    verify_checksums(&r.frame).unwrap();

    // Tagged: the new outer tag copies VID and PCP.
    let t = vlan_ipv4_tcp();
    let r = run(&t, &[Action::PushVlan(0x88a8)]);
    let p = parse(&r.frame);
    assert_eq!(p.key.get(Field::VlanVid), OFPVID_PRESENT | 100);
    assert_eq!(p.key.get(Field::VlanPcp), 5);
    assert_eq!(p.layout, r.layout);
    assert_eq!(r.layout.vlan_count, 2);
    assert_eq!(&r.frame[12..14], &[0x88, 0xa8]);

    // Then a set-field rewrites the NEW outer tag only.
    let r = run(
        &t,
        &[
            Action::PushVlan(0x88a8),
            Action::SetField(Field::VlanVid, 0x1000 | 200),
        ],
    );
    assert_eq!(
        parse(&r.frame).key.get(Field::VlanVid),
        OFPVID_PRESENT | 200
    );
    assert_eq!(&r.frame[18..20], &t[14..16], "inner tag untouched");

    let r = run(&f, &[Action::PushVlan(0x0800)]);
    assert_eq!(r.stats.push_vlan_bad_tpid, 1);
    assert_eq!(r.frame, f);
}

#[test]
fn pop_vlan() {
    let t = vlan_ipv4_tcp();
    let r = run(
        &t,
        &[
            Action::PopVlan,
            Action::SetField(Field::Ipv4Dst, 0x0909_0909),
        ],
    );
    let p = parse(&r.frame);
    assert_eq!(p.key.presence() & present::VLAN, 0);
    assert_eq!(p.key.get(Field::VlanVid), 0);
    assert_eq!(p.key.get(Field::Ipv4Dst), 0x0909_0909);
    assert_eq!(p.layout, r.layout);
    verify_checksums(&r.frame).unwrap();
    let u = ipv4_tcp();
    let r = run(&u, &[Action::PopVlan]);
    assert_eq!(r.stats.pop_vlan_no_tag, 1);
    assert_eq!(r.frame, u);
}

#[test]
fn push_then_pop_restores_bytes_on_every_frame() {
    for f in [
        ipv4_tcp(),
        ipv4_udp(true),
        ipv6_ns(),
        arp_frame(),
        vlan_ipv4_tcp(),
        mpls_frame(),
    ] {
        let before = parse(&f).layout;
        for tpid in [0x8100, 0x88a8] {
            let r = run(&f, &[Action::PushVlan(tpid), Action::PopVlan]);
            assert_eq!(r.frame, f);
            assert_eq!(r.layout, before);
        }
    }
}

#[test]
fn push_without_headroom_is_counted() {
    let f = ipv4_tcp();
    let mut buf = PacketBuf::new(0, f.len());
    buf.load(&f).unwrap();
    let mut lay = parse(&f).layout;
    let mut stats = ExecStats::default();
    let out = execute(
        &[Action::PushVlan(0x8100)],
        &mut buf,
        &mut lay,
        1,
        &mut RecSink::default(),
        &mut stats,
    );
    assert_eq!(out.verdict, Verdict::Done);
    assert_eq!(stats.push_vlan_no_room, 1);
    assert_eq!(buf.frame(), &f[..]);
}

fn ports() -> Vec<PortInfo> {
    let p = |port, no_fwd, no_flood| PortInfo {
        port,
        no_fwd,
        no_flood,
    };
    vec![
        p(1, false, false),
        p(2, false, false),
        p(3, false, true),
        p(4, true, false),
        p(5, false, false),
    ]
}

#[test]
fn output_ports() {
    let f = ipv4_tcp();
    let sent = |r: &Run| r.sink.sent.iter().map(|s| s.0).collect::<Vec<_>>();
    let r = run_with(&f, &[Action::output(PortNo::ALL)], ports());
    assert_eq!(sent(&r), vec![2, 3, 5], "ALL: not ingress, not NO_FWD");
    let r = run_with(&f, &[Action::output(PortNo::FLOOD)], ports());
    assert_eq!(sent(&r), vec![2, 5], "FLOOD: also not NO_FLOOD");
    assert_eq!(r.out.outputs, 2);
    let r = run(
        &f,
        &[
            Action::output(PortNo::IN_PORT),
            Action::output(PortNo(1)),
            Action::output(PortNo::LOCAL),
        ],
    );
    assert_eq!(sent(&r), vec![1, PortNo::LOCAL.0]);
    assert_eq!(r.stats.output_to_ingress_skipped, 1);
    let r = run(
        &f,
        &[
            Action::output(PortNo(0)),
            Action::output(PortNo::ANY),
            Action::output(PortNo::NORMAL),
            Action::Group(1),
        ],
    );
    assert!(r.sink.sent.is_empty());
    assert_eq!(r.stats.output_invalid_port, 2);
    assert_eq!(r.stats.output_normal_unsupported, 1);
    assert_eq!(r.stats.group_missing, 1, "no group table given");
    let r = run(&f, &[Action::output(PortNo::TABLE)]);
    assert!(r.out.to_table);
}

#[test]
fn output_controller_truncates() {
    let f = ipv4_tcp();
    let r = run(
        &f,
        &[
            Action::Output {
                port: PortNo::CONTROLLER,
                max_len: 20,
            },
            Action::Output {
                port: PortNo::CONTROLLER,
                max_len: 0xffff,
            },
            Action::Output {
                port: PortNo::CONTROLLER,
                max_len: 0,
            },
        ],
    );
    let c = &r.sink.to_ctrl;
    assert_eq!(c.len(), 3);
    assert_eq!((c[0].0.as_slice(), c[0].1), (&f[..20], f.len()));
    assert_eq!(c[1].0, f);
    assert!(c[2].0.is_empty());
}

#[test]
fn outputs_see_the_frame_at_their_moment() {
    let f = ipv4_tcp();
    let r = run(
        &f,
        &[
            Action::SetQueue(7),
            Action::output(PortNo(2)),
            Action::SetField(Field::TcpDst, 9),
            Action::output(PortNo(3)),
            Action::SetField(Field::Metadata, 1),
            Action::output(PortNo(4)),
        ],
    );
    let s = &r.sink.sent;
    assert_eq!(s[0].1, f, "first output sees the unmodified frame");
    assert!(!s[0].2.final_view);
    assert_eq!(s[0].2.queue, Some(7));
    assert_eq!(parse(&s[1].1).key.get(Field::TcpDst), 9);
    assert!(
        s[1].2.final_view && s[2].2.final_view,
        "nothing after modifies the frame"
    );
    assert_eq!(s[1].1, r.frame);
}

#[test]
fn unsupported_actions_are_counted() {
    let f = ipv4_tcp();
    let r = run(
        &f,
        &[
            Action::PopMpls(0x0800),
            Action::CopyTtlIn,
            Action::CopyTtlOut,
            Action::Experimenter(1),
            Action::PushMpls(0x0800),
        ],
    );
    assert_eq!(r.frame, f);
    assert_eq!(r.stats.pop_mpls_no_label, 1);
    assert_eq!(r.stats.copy_ttl_unsupported, 2);
    assert_eq!(r.stats.experimenter_unsupported, 1);
    assert_eq!(r.stats.push_mpls_bad_ethertype, 1);
    let r = run(&f, &[Action::DecMplsTtl]);
    assert_eq!(r.stats.mpls_ttl_no_label, 1);
}

#[test]
fn push_and_pop_mpls() {
    for f in [ipv4_tcp(), vlan_ipv4_tcp(), ipv6_udp()] {
        let before = parse(&f);
        let ttl = ttl_of(&f);
        let r = run(&f, &[Action::PushMpls(0x8847)]);
        assert_eq!(r.stats.total(), 0);
        let p = parse(&r.frame);
        assert_eq!(p.layout, r.layout);
        assert_eq!(p.key.get(Field::EthType), 0x8847);
        assert_eq!(p.key.get(Field::MplsLabel), 0);
        assert_eq!(p.key.get(Field::MplsBos), 1);
        assert_eq!(
            p.key.get(Field::VlanVid),
            before.key.get(Field::VlanVid),
            "label goes after the tags"
        );
        let l3 = r.layout.l3 as usize;
        assert_eq!(r.frame[l3 + 3], ttl, "MPLS TTL from the IP TTL");
        assert_eq!(&r.frame[l3 + 4..], &f[before.layout.l3 as usize..]);
        // A second push copies the label and clears bottom-of-stack.
        let r2 = run(
            &f,
            &[
                Action::PushMpls(0x8847),
                Action::SetField(Field::MplsLabel, 77),
                Action::PushMpls(0x8848),
            ],
        );
        let p2 = parse(&r2.frame);
        assert_eq!(p2.key.get(Field::MplsLabel), 77);
        assert_eq!(p2.key.get(Field::MplsBos), 0);
        // Pop restores the frame, the layout and every checksum.
        let et = before.key.get(Field::EthType) as u16;
        let r3 = run(
            &f,
            &[
                Action::PushMpls(0x8847),
                Action::PushMpls(0x8847),
                Action::PopMpls(0x8847),
                Action::PopMpls(et),
            ],
        );
        assert_eq!(r3.stats.total(), 0);
        assert_eq!(r3.frame, f);
        assert_eq!(r3.layout, before.layout);
    }
}

#[test]
fn copy_ttl_in_and_out() {
    // mpls_frame: label TTL 10 over IPv4 TTL 9.
    let m = mpls_frame();
    let r = run(&m, &[Action::CopyTtlIn]);
    assert_eq!(r.stats.total(), 0);
    assert_eq!(r.frame[18 + 8], 10);
    assert_eq!(
        offlow_wire::checksum::checksum(&r.frame[18..38]),
        0,
        "IPv4 checksum updated"
    );
    let r = run(&m, &[Action::CopyTtlOut]);
    assert_eq!(r.frame[14 + 3], 9);
    // Two labels: between the labels.
    let r = run(
        &m,
        &[
            Action::PushMpls(0x8847),
            Action::SetMplsTtl(50),
            Action::CopyTtlIn,
        ],
    );
    assert_eq!(r.frame[18 + 3], 50);
    assert_eq!(r.frame[14 + 3], 50);
}
