//! The builder's frames, read back through the wire views.

use offlow_testkit::{v6, Checksum, FrameBuilder, MAC_DST, MAC_SRC};
use offlow_wire::checksum::{fold, pseudo_ipv4, sum};
use offlow_wire::{ethernet, icmpv4, icmpv6, ipv4, ipv6, mpls, sctp, tcp, udp, vlan};

fn eth() -> FrameBuilder {
    FrameBuilder::eth(MAC_DST, MAC_SRC)
}

#[test]
fn ipv4_udp_lengths_and_checksums() {
    let f = eth()
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2])
        .udp(1, 2)
        .payload(b"abc")
        .build();
    assert_eq!(f.len(), 14 + 20 + 8 + 3);
    let e = ethernet::Frame::new_checked(&f[..]).unwrap();
    assert_eq!(
        (e.dst_addr(), e.src_addr(), e.ethertype_raw()),
        (MAC_DST, MAC_SRC, 0x0800)
    );
    let ip = ipv4::Packet::new_checked(e.payload()).unwrap();
    assert!(ip.verify_checksum());
    assert_eq!((ip.total_len(), ip.ttl(), ip.protocol_raw()), (31, 64, 17));
    let u = udp::Packet::new_checked(ip.payload()).unwrap();
    let repr = ipv4::Repr::parse(&ip).unwrap();
    assert!(u.verify_checksum(repr.pseudo_sum()));
    assert_eq!((u.len(), u.payload()), (11, &b"abc"[..]));
}

#[test]
fn tags_and_labels_chain_ethertypes() {
    let f = eth()
        .tag(0x88a8, 0x0064)
        .vlan(42, 5)
        .mpls(100, 1, 9)
        .mpls(200, 2, 8)
        .ipv4([1, 1, 1, 1], [2, 2, 2, 2])
        .udp(1, 2)
        .build();
    assert_eq!(&f[12..14], &[0x88, 0xa8]);
    let outer = vlan::Tag::new_checked(&f[14..]).unwrap();
    assert_eq!((outer.vid(), outer.ethertype_raw()), (100, 0x8100));
    let inner = vlan::Tag::new_checked(&f[18..]).unwrap();
    assert_eq!(
        (inner.vid(), inner.pcp(), inner.ethertype_raw()),
        (42, 5, 0x8847)
    );
    let l1 = mpls::Lse::new_checked(&f[22..]).unwrap();
    let l2 = mpls::Lse::new_checked(&f[26..]).unwrap();
    assert_eq!((l1.label(), l1.bos(), l1.ttl()), (100, false, 9));
    assert_eq!((l2.label(), l2.bos(), l2.tc()), (200, true, 2));
    assert!(ipv4::Packet::new_checked(&f[30..])
        .unwrap()
        .verify_checksum());
}

#[test]
fn ipv6_transports_verify() {
    for l4 in ["tcp", "udp", "icmpv6", "sctp"] {
        let b = eth()
            .ipv6(v6(1), v6(2))
            .tos(0xb8)
            .flow_label(0x12345)
            .ttl(7);
        let b = match l4 {
            "tcp" => b.tcp(40000, 443),
            "udp" => b.udp(1000, 2000),
            "icmpv6" => b.icmpv6(128, 0),
            _ => b.sctp(9, 10).sctp_tag(7),
        };
        let f = b.payload(b"xyz!").build();
        let ip = ipv6::Packet::new_checked(&f[14..]).unwrap();
        assert_eq!(
            (ip.traffic_class(), ip.flow_label(), ip.hop_limit()),
            (0xb8, 0x12345, 7)
        );
        let r = ipv6::Repr::parse(&ip).unwrap();
        let seg = ip.payload();
        assert_eq!(seg.len(), r.payload_len);
        match l4 {
            "tcp" => assert!(tcp::Packet::new_checked(seg)
                .unwrap()
                .verify_checksum(r.pseudo_sum())),
            "udp" => assert!(udp::Packet::new_checked(seg)
                .unwrap()
                .verify_checksum(r.pseudo_sum())),
            "icmpv6" => {
                assert_eq!(
                    icmpv6::Packet::new_checked(seg).unwrap().msg_type_raw(),
                    128
                );
                assert_eq!(fold(sum(seg, r.pseudo_sum())), 0xffff);
            }
            _ => assert!(sctp::Packet::new_checked(seg).unwrap().verify_checksum()),
        }
    }
}

#[test]
fn icmpv4_and_arp() {
    let f = eth()
        .ipv4([1, 0, 0, 1], [1, 0, 0, 2])
        .icmp_echo(7, 9)
        .payload(b"ping")
        .build();
    let ip = ipv4::Packet::new_checked(&f[14..]).unwrap();
    let i = icmpv4::Packet::new_checked(ip.payload()).unwrap();
    assert!(i.verify_checksum());
    assert_eq!(
        (i.msg_type_raw(), i.echo_ident(), i.echo_seq_no()),
        (8, 7, 9)
    );

    let a = eth()
        .arp(1, MAC_SRC, [10, 0, 0, 1], [0; 6], [10, 0, 0, 2])
        .pad_to(60)
        .build();
    assert_eq!((a.len(), &a[12..14]), (60, &[0x08, 0x06][..]));
    let p = offlow_wire::arp::Packet::new_checked(&a[14..]).unwrap();
    assert!(p.is_ethernet_ipv4());
    assert_eq!((p.oper_raw(), p.tpa()), (1, &[10, 0, 0, 2][..]));
}

#[test]
fn checksum_knobs() {
    let base = || {
        eth()
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2])
            .udp(1, 2)
            .payload(b"abc")
    };
    let seg = |f: &[u8]| f[34..].to_vec();
    let pseudo = pseudo_ipv4([10, 0, 0, 1], [10, 0, 0, 2], 17, 11);
    let ok = base().build();
    let bad = base().l4_checksum(Checksum::Bad).build();
    let zero = base().l4_checksum(Checksum::Zero).build();
    let partial = base().l4_checksum(Checksum::Partial).build();
    let ipbad = base().ip_checksum(Checksum::Bad).build();
    let v = |f: &[u8]| fold(sum(&seg(f), pseudo)) == 0xffff;
    assert!(v(&ok) && !v(&bad));
    assert_eq!(&zero[40..42], &[0, 0]);
    assert_eq!(u16::from_be_bytes([partial[40], partial[41]]), fold(pseudo));
    assert!(!ipv4::Packet::new_checked(&ipbad[14..])
        .unwrap()
        .verify_checksum());
    assert_eq!(ok[..24], ipbad[..24]);
    assert_eq!(ok[26..], ipbad[26..]);
}

#[test]
fn length_knobs() {
    let f = eth().ipv4([1; 4], [2; 4]).tcp(1, 2).frame_len(60).build();
    let ip = ipv4::Packet::new_checked(&f[14..]).unwrap();
    assert_eq!(
        (f.len(), ip.total_len()),
        (60, 46),
        "frame_len grows the payload"
    );
    let f = eth().ipv4([1; 4], [2; 4]).udp(1, 2).pad_to(60).build();
    let ip = ipv4::Packet::new_checked(&f[14..]).unwrap();
    assert_eq!(
        (f.len(), ip.total_len()),
        (60, 28),
        "padding is not covered"
    );
    let f = eth()
        .ipv4([1; 4], [2; 4])
        .udp(1, 2)
        .ip_total_len(200)
        .build();
    let ip = ipv4::Packet::new_checked(&f[14..]).unwrap();
    assert!(ip.payload_truncated() && ip.verify_checksum());
    let f = eth().ipv4([1; 4], [2; 4]).tcp(1, 2).truncate(30).build();
    assert_eq!(f.len(), 30);
    let f = eth()
        .ipv4([1; 4], [2; 4])
        .ip_options(&[0x94, 4, 0, 0])
        .fragment(10, true)
        .ip_payload(17)
        .payload(&[1; 8])
        .build();
    let ip = ipv4::Packet::new_checked(&f[14..]).unwrap();
    assert_eq!(
        (ip.header_len(), ip.frag_offset(), ip.more_frags()),
        (24, 80, true),
        "offset in bytes"
    );
    assert_eq!(ip.payload(), &[1; 8]);
}

/// Emitting into a reused buffer leaves nothing of the previous frame.
#[test]
fn build_into_reuses_cleanly() {
    let mut out = vec![0xa5; 200];
    let b = eth().ipv4([1; 4], [2; 4]).tcp(1, 2);
    b.build_into(&mut out);
    assert_eq!(out, b.build());
}
