//! Every `Repr` against its view: emit into a poisoned buffer (smoltcp's
//! habit, so a field `emit` forgets shows as a poison byte), parse back,
//! compare; and parse -> emit of real header bytes gives the same bytes.

use offlow_wire::ethernet::EtherType;
use offlow_wire::ip::Protocol;
use offlow_wire::{
    arp, checksum, ethernet, icmpv4, icmpv6, ipv4, ipv6, mpls, sctp, tcp, udp, vlan,
};
use proptest::prelude::*;

const POISON: u8 = 0xa5;

fn poisoned(n: usize) -> Vec<u8> {
    vec![POISON; n]
}

/// No poison byte left in `header`. Field values in these tests avoid 0xa5,
/// so a poison byte can only be one `emit` did not write.
fn assert_clean(what: &str, header: &[u8]) {
    if let Some(i) = header.iter().position(|&b| b == POISON) {
        panic!("{what}: byte {i} not written by emit: {header:02x?}");
    }
}

#[test]
fn ethernet_emit_parse() {
    let r = ethernet::Repr {
        dst_addr: [1, 2, 3, 4, 5, 6],
        src_addr: [0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f],
        ethertype: EtherType::Ipv4,
    };
    let mut b = poisoned(r.buffer_len() + 3);
    r.emit(&mut ethernet::Frame::new_unchecked(&mut b[..]));
    assert_clean("ethernet", &b[..r.header_len()]);
    assert_eq!(
        &b[r.header_len()..],
        &[POISON; 3],
        "emit stays in its header"
    );
    assert_eq!(
        ethernet::Repr::parse(&ethernet::Frame::new_checked(&b[..]).unwrap()),
        Ok(r)
    );
}

#[test]
fn vlan_emit_parse() {
    let r = vlan::Repr {
        pcp: 5,
        dei: true,
        vid: 0x123,
        ethertype: EtherType::Ipv6,
    };
    let mut b = poisoned(r.buffer_len());
    r.emit(&mut vlan::Tag::new_unchecked(&mut b[..]));
    assert_clean("vlan", &b);
    assert_eq!(b, [0xb1, 0x23, 0x86, 0xdd]);
    assert_eq!(
        vlan::Repr::parse(&vlan::Tag::new_checked(&b[..]).unwrap()),
        Ok(r)
    );
}

#[test]
fn mpls_emit_parse() {
    let r = mpls::Repr {
        label: 0xabcde,
        tc: 3,
        bos: true,
        ttl: 63,
    };
    let mut b = poisoned(r.buffer_len());
    r.emit(&mut mpls::Lse::new_unchecked(&mut b[..]));
    assert_clean("mpls", &b);
    assert_eq!(b[mpls::field::BOS] & 1, 1, "BOS names the S bit's byte");
    assert_eq!(b[mpls::field::TTL], 63);
    assert_eq!(
        mpls::Repr::parse(&mpls::Lse::new_checked(&b[..]).unwrap()),
        Ok(r)
    );
}

fn ipv4_repr() -> ipv4::Repr {
    ipv4::Repr {
        src_addr: [192, 168, 0, 1],
        dst_addr: [10, 0, 0, 2],
        protocol: Protocol::Udp,
        payload_len: 12,
        ttl: 63,
        tos: 0xb8,
        ident: 0x1234,
        flags_frag: ipv4::FLAG_MF | 7,
    }
}

#[test]
fn ipv4_emit_parse() {
    let r = ipv4_repr();
    let mut b = poisoned(r.buffer_len());
    let mut p = ipv4::Packet::new_unchecked(&mut b[..]);
    r.emit(&mut p);
    assert_clean("ipv4", &b[..r.header_len()]);
    let p = ipv4::Packet::new_checked(&b[..]).unwrap();
    assert!(p.verify_checksum());
    assert_eq!(p.total_len() as usize, r.buffer_len());
    assert_eq!(ipv4::Repr::parse(&p), Ok(r));
}

#[test]
fn ipv4_emit_with_options() {
    let r = ipv4_repr();
    let opts = [0x94, 0x04, 0, 0]; // Router Alert (RFC 2113)
    let mut b = poisoned(r.buffer_len() + opts.len());
    r.emit_with_options(&mut ipv4::Packet::new_unchecked(&mut b[..]), &opts);
    assert_clean("ipv4+options", &b[..24]);
    let p = ipv4::Packet::new_checked(&b[..]).unwrap();
    assert_eq!((p.header_len(), p.options()), (24, &opts[..]));
    assert!(p.verify_checksum());
    assert_eq!(ipv4::Repr::parse(&p), Ok(r));
}

#[test]
fn ipv6_emit_parse() {
    let r = ipv6::Repr {
        src_addr: [0x20, 1, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
        dst_addr: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0xff, 0xfe, 0, 0, 2],
        next_header: Protocol::Tcp,
        payload_len: 20,
        hop_limit: 255,
        traffic_class: 0x2e,
        flow_label: 0xf_1234,
    };
    let mut b = poisoned(r.buffer_len());
    r.emit(&mut ipv6::Packet::new_unchecked(&mut b[..]));
    assert_clean("ipv6", &b[..r.header_len()]);
    assert_eq!(
        ipv6::Repr::parse(&ipv6::Packet::new_checked(&b[..]).unwrap()),
        Ok(r)
    );
}

#[test]
fn udp_emit_parse_checksum() {
    let ip = ipv4_repr();
    let r = udp::Repr {
        src_port: 53,
        dst_port: 4789,
        payload_len: 4,
    };
    let mut b = poisoned(r.buffer_len());
    b[8..].copy_from_slice(b"abcd");
    let mut p = udp::Packet::new_unchecked(&mut b[..]);
    r.emit(&mut p);
    assert_eq!(
        p.checksum(),
        0,
        "emit leaves the checksum for fill_checksum"
    );
    p.fill_checksum(ip.pseudo_sum());
    assert_clean("udp", &b[..r.header_len()]);
    let p = udp::Packet::new_checked(&b[..]).unwrap();
    assert!(p.verify_checksum(ip.pseudo_sum()));
    assert!(!p.verify_checksum(ip.pseudo_sum() + 1));
    assert_eq!(udp::Repr::parse(&p), Ok(r));
}

#[test]
fn tcp_emit_parse_checksum() {
    let r = tcp::Repr {
        src_port: 12345,
        dst_port: 80,
        seq_number: 0x0102_0304,
        ack_number: 0x1122_3344,
        flags: tcp::flags::SYN | tcp::flags::ACK,
        window: 29200,
        urgent: 7,
    };
    let ip = ipv4::Repr {
        protocol: Protocol::Tcp,
        payload_len: 24,
        ..ipv4_repr()
    };
    let opts = [2, 4, 0x05, 0xb4]; // MSS 1460
    let mut b = poisoned(ip.payload_len);
    let mut p = tcp::Packet::new_unchecked(&mut b[..]);
    r.emit_with_options(&mut p, &opts);
    p.fill_checksum(ip.pseudo_sum());
    assert_clean("tcp", &b);
    let p = tcp::Packet::new_checked(&b[..]).unwrap();
    assert_eq!((p.header_len(), p.options()), (24, &opts[..]));
    assert!(p.verify_checksum(ip.pseudo_sum()));
    assert_eq!(tcp::Repr::parse(&p), Ok(r));
}

#[test]
fn icmpv4_emit_parse_checksum() {
    let r = icmpv4::Repr::echo_request(0x0b0c, 9);
    let mut b = poisoned(r.buffer_len() + 4);
    b[8..].copy_from_slice(&[1, 2, 3, 4]);
    let mut p = icmpv4::Packet::new_unchecked(&mut b[..]);
    r.emit(&mut p);
    p.fill_checksum();
    assert_clean("icmpv4", &b[..r.header_len()]);
    let p = icmpv4::Packet::new_checked(&b[..]).unwrap();
    assert!(p.verify_checksum());
    assert_eq!((p.echo_ident(), p.echo_seq_no()), (0x0b0c, 9));
    assert_eq!(icmpv4::Repr::parse(&p), Ok(r));
}

#[test]
fn icmpv6_emit_parse_checksum() {
    let r = icmpv6::Repr {
        msg_type: icmpv6::Message::from(128),
        code: 0,
    };
    let mut b = poisoned(r.buffer_len() + 4);
    b[4..].copy_from_slice(&[0, 1, 0, 2]);
    let pseudo = checksum::pseudo_ipv6([1; 16], [2; 16], 58, 8);
    let mut p = icmpv6::Packet::new_unchecked(&mut b[..]);
    r.emit(&mut p);
    p.fill_checksum(pseudo);
    assert_clean("icmpv6", &b[..r.header_len()]);
    assert_eq!(checksum::fold(checksum::sum(&b, pseudo)), 0xffff);
    assert_eq!(
        icmpv6::Repr::parse(&icmpv6::Packet::new_checked(&b[..]).unwrap()),
        Ok(r)
    );
}

#[test]
fn arp_emit_parse() {
    let r = arp::Repr {
        oper: arp::Operation::Reply,
        sha: [2, 0, 0, 0, 0, 1],
        spa: [10, 0, 0, 1],
        tha: [2, 0, 0, 0, 0, 2],
        tpa: [10, 0, 0, 2],
    };
    let mut b = poisoned(r.buffer_len());
    r.emit(&mut arp::Packet::new_unchecked(&mut b[..]));
    assert_clean("arp", &b);
    // The fixed ranges the executor writes through name the same bytes.
    use arp::field::{eth_ipv4, OPER};
    assert_eq!(b[OPER], [0, 2]);
    assert_eq!(b[eth_ipv4::SHA], r.sha);
    assert_eq!(b[eth_ipv4::SPA], r.spa);
    assert_eq!(b[eth_ipv4::THA], r.tha);
    assert_eq!(b[eth_ipv4::TPA], r.tpa);
    assert_eq!(
        arp::Repr::parse(&arp::Packet::new_checked(&b[..]).unwrap()),
        Ok(r)
    );
    b[5] = 16; // IPv6-sized protocol addresses: not the Ethernet/IPv4 form
    b.resize(8 + 2 * (6 + 16), 0);
    let p = arp::Packet::new_checked(&b[..]).unwrap();
    assert_eq!(arp::Repr::parse(&p), Err(offlow_wire::Error::Unsupported));
}

#[test]
fn sctp_emit_parse_checksum() {
    let r = sctp::Repr {
        src_port: 9,
        dst_port: 10,
        verification_tag: 0x0102_0304,
    };
    let mut b = poisoned(r.buffer_len() + 4);
    b[12..].copy_from_slice(&[0, 0, 0, 4]);
    let mut p = sctp::Packet::new_unchecked(&mut b[..]);
    r.emit(&mut p);
    p.fill_checksum();
    assert_clean("sctp", &b[..r.header_len()]);
    let p = sctp::Packet::new_checked(&b[..]).unwrap();
    assert!(p.verify_checksum());
    assert_eq!(sctp::Repr::parse(&p), Ok(r));
}

/// A real frame (a DNS query captured on a LAN): parse every layer, emit
/// each into a poisoned copy, get the same bytes.
#[test]
fn real_udp_frame_round_trips() {
    let frame: [u8; 42] = [
        0x00, 0x1b, 0x21, 0x3a, 0x4f, 0x10, 0x3c, 0x97, 0x0e, 0x12, 0x34, 0x56, 0x08,
        0x00, // eth
        0x45, 0x00, 0x00, 0x1c, 0x1c, 0x46, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8, 0x01,
        0x02, 0xc0, 0xa8, 0x01, 0x01, // ipv4 (checksum filled below)
        0xd4, 0x31, 0x00, 0x35, 0x00, 0x08, 0x00, 0x00, // udp, no payload
    ];
    let mut frame = frame;
    ipv4::Packet::new_checked(&mut frame[14..])
        .unwrap()
        .fill_checksum();
    let ip = ipv4::Repr::parse(&ipv4::Packet::new_checked(&frame[14..]).unwrap()).unwrap();
    udp::Packet::new_checked(&mut frame[34..])
        .unwrap()
        .fill_checksum(ip.pseudo_sum());

    let eth = ethernet::Repr::parse(&ethernet::Frame::new_checked(&frame[..]).unwrap()).unwrap();
    let ip = ipv4::Repr::parse(&ipv4::Packet::new_checked(&frame[14..]).unwrap()).unwrap();
    let u = udp::Repr::parse(&udp::Packet::new_checked(&frame[34..]).unwrap()).unwrap();
    let mut out = poisoned(frame.len());
    eth.emit(&mut ethernet::Frame::new_unchecked(&mut out[..]));
    ip.emit(&mut ipv4::Packet::new_unchecked(&mut out[14..]));
    let mut up = udp::Packet::new_unchecked(&mut out[34..]);
    u.emit(&mut up);
    up.fill_checksum(ip.pseudo_sum());
    assert_eq!(out[..], frame[..]);
}

/// A real TCP SYN (Linux, MSS/SACK/TS/WS options) round-trips byte for byte.
#[test]
fn real_tcp_syn_round_trips() {
    let ip_hdr: [u8; 20] = [
        0x45, 0x00, 0x00, 0x3c, 0x8c, 0x3f, 0x40, 0x00, 0x40, 0x06, 0x00, 0x00, 0x0a, 0x00, 0x00,
        0x01, 0x0a, 0x00, 0x00, 0x02,
    ];
    let seg: [u8; 40] = [
        0xb3, 0x6e, 0x00, 0x50, 0x6a, 0x1f, 0x3c, 0x3e, 0x00, 0x00, 0x00, 0x00, 0xa0, 0x02, 0xfa,
        0xf0, 0x00, 0x00, 0x00, 0x00, 0x02, 0x04, 0x05, 0xb4, 0x04, 0x02, 0x08, 0x0a, 0x3b, 0x9a,
        0x0c, 0x1f, 0x00, 0x00, 0x00, 0x00, 0x01, 0x03, 0x03, 0x07,
    ];
    let mut pkt = [ip_hdr.as_slice(), seg.as_slice()].concat();
    ipv4::Packet::new_checked(&mut pkt[..])
        .unwrap()
        .fill_checksum();
    let ip = ipv4::Repr::parse(&ipv4::Packet::new_checked(&pkt[..]).unwrap()).unwrap();
    tcp::Packet::new_checked(&mut pkt[20..])
        .unwrap()
        .fill_checksum(ip.pseudo_sum());

    let view = tcp::Packet::new_checked(&pkt[20..]).unwrap();
    let t = tcp::Repr::parse(&view).unwrap();
    let mut out = poisoned(pkt.len());
    ip.emit(&mut ipv4::Packet::new_unchecked(&mut out[..]));
    let mut tp = tcp::Packet::new_unchecked(&mut out[20..]);
    t.emit_with_options(&mut tp, view.options());
    tp.fill_checksum(ip.pseudo_sum());
    assert_eq!(out, pkt);
}

proptest! {
    #[test]
    fn ipv4_any_repr_round_trips(
        src in any::<[u8; 4]>(), dst in any::<[u8; 4]>(), proto in any::<u8>(),
        payload_len in 0usize..1500, ttl in any::<u8>(), tos in any::<u8>(),
        ident in any::<u16>(), flags_frag in any::<u16>(), poison in any::<u8>(),
    ) {
        let r = ipv4::Repr {
            src_addr: src, dst_addr: dst, protocol: proto.into(), payload_len,
            ttl, tos, ident, flags_frag,
        };
        let mut b = vec![poison; r.buffer_len()];
        r.emit(&mut ipv4::Packet::new_unchecked(&mut b[..]));
        let p = ipv4::Packet::new_checked(&b[..]).unwrap();
        prop_assert!(p.verify_checksum());
        prop_assert_eq!(ipv4::Repr::parse(&p), Ok(r));
    }

    #[test]
    fn tcp_udp_any_repr_round_trip(
        sp in any::<u16>(), dp in any::<u16>(), seq in any::<u32>(), ack in any::<u32>(),
        flags in 0u16..0x200, win in any::<u16>(), urg in any::<u16>(),
        payload in proptest::collection::vec(any::<u8>(), 0..64), pseudo in any::<u16>(),
    ) {
        let t = tcp::Repr { src_port: sp, dst_port: dp, seq_number: seq, ack_number: ack,
            flags, window: win, urgent: urg };
        let mut b = [vec![0u8; t.header_len()], payload.clone()].concat();
        let mut p = tcp::Packet::new_unchecked(&mut b[..]);
        t.emit(&mut p);
        p.fill_checksum(pseudo.into());
        let p = tcp::Packet::new_checked(&b[..]).unwrap();
        prop_assert!(p.verify_checksum(pseudo.into()));
        prop_assert_eq!(tcp::Repr::parse(&p), Ok(t));

        let u = udp::Repr { src_port: sp, dst_port: dp, payload_len: payload.len() };
        let mut b = [vec![0u8; u.header_len()], payload].concat();
        let mut p = udp::Packet::new_unchecked(&mut b[..]);
        u.emit(&mut p);
        p.fill_checksum(pseudo.into());
        prop_assert_ne!(p.checksum(), 0, "RFC 768: a computed 0 is sent as 0xffff");
        let p = udp::Packet::new_checked(&b[..]).unwrap();
        prop_assert!(p.verify_checksum(pseudo.into()));
        prop_assert_eq!(udp::Repr::parse(&p), Ok(u));
    }
}
