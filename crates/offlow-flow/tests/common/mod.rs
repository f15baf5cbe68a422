//! Frames for the extract tests. Headers are written by `offlow_testkit`'s
//! builder and `offlow_wire`'s `Repr::emit` (proven field by field against
//! poisoned buffers and real bytes in wire's tests), never by the parser
//! under test; the bytes after a header (extension-header chains, ND
//! bodies, malformed transports) are spelled out raw where the tests need
//! them so.
#![allow(dead_code)]

use offlow_testkit::FrameBuilder;
use offlow_wire::{ethernet, tcp, udp};

const ETH_LEN: usize = ethernet::HEADER_LEN;

pub(crate) const DST: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
pub(crate) const SRC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];

pub(crate) fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.iter().flat_map(|p| p.iter().copied()).collect()
}

/// The tests' frame start: [`SRC`] → [`DST`].
pub(crate) fn frame() -> FrameBuilder {
    FrameBuilder::eth(DST, SRC)
}

/// Ethernet II header + raw `payload` under `ethertype`.
pub(crate) fn eth(ethertype: u16, payload: &[u8]) -> Vec<u8> {
    frame().ethertype(ethertype).payload(payload).build()
}

/// Ethernet with VLAN tags `(tpid, tci)`, outer first, then `ethertype`.
pub(crate) fn eth_tagged(tags: &[(u16, u16)], ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut b = frame();
    for &(tpid, tci) in tags {
        b = b.tag(tpid, tci);
    }
    b.ethertype(ethertype).payload(payload).build()
}

/// The IP packet of a builder's frame (after the 14-byte Ethernet header).
fn ip_packet(b: FrameBuilder) -> Vec<u8> {
    b.build().split_off(ETH_LEN)
}

/// IPv4 header (with `options`, a multiple of 4 bytes) + raw `payload` as
/// protocol `proto`. `frag` is the raw flags/offset word; TOS 0xb9 (DSCP
/// 46, ECN 1), identification 0x1234, TTL 64, valid header checksum.
pub(crate) fn ipv4(
    proto: u8,
    src: [u8; 4],
    dst: [u8; 4],
    options: &[u8],
    frag: u16,
    payload: &[u8],
) -> Vec<u8> {
    ip_packet(
        frame()
            .ipv4(src, dst)
            .tos(0xb9)
            .ident(0x1234)
            .flags_frag(frag)
            .ip_options(options)
            .ip_payload(proto)
            .payload(payload),
    )
}

/// IPv6 header (TC 0xb9, flow label 0x12345, hop limit 64) + raw `payload`
/// under next header `next`.
pub(crate) fn ipv6(next: u8, src: [u8; 16], dst: [u8; 16], payload: &[u8]) -> Vec<u8> {
    ip_packet(
        frame()
            .ipv6(src, dst)
            .tos(0xb9)
            .flow_label(0x12345)
            .ip_payload(next)
            .payload(payload),
    )
}

/// Generic IPv6 extension header of `units` 8-byte units (>= 1).
pub(crate) fn ext(next: u8, units: usize) -> Vec<u8> {
    let mut h = vec![0u8; units * 8];
    h[0] = next;
    h[1] = (units - 1) as u8;
    h
}

/// IPv6 fragment header.
pub(crate) fn frag6(next: u8, offset_units: u16, more: bool) -> Vec<u8> {
    let w = (offset_units << 3) | more as u16;
    let mut h = vec![next, 0];
    h.extend_from_slice(&w.to_be_bytes());
    h.extend_from_slice(&[0, 0, 0, 1]);
    h
}

/// TCP segment (20-byte header, sequence 1, SYN, window 65535) + payload,
/// written by `offlow_wire`'s `tcp::Repr`. Checksum 0: the segment is built
/// without its IP header, and the parser never reads it.
pub(crate) fn tcp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let r = tcp::Repr {
        src_port: sport,
        dst_port: dport,
        seq_number: 1,
        ack_number: 0,
        flags: tcp::flags::SYN,
        window: u16::MAX,
        urgent: 0,
    };
    let mut h = vec![0; r.header_len()];
    r.emit(&mut tcp::Packet::new_unchecked(&mut h[..]));
    h.extend_from_slice(payload);
    h
}

/// UDP datagram with a correct length field (checksum 0, "none").
pub(crate) fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let r = udp::Repr {
        src_port: sport,
        dst_port: dport,
        payload_len: payload.len(),
    };
    let mut h = vec![0; r.header_len()];
    r.emit(&mut udp::Packet::new_unchecked(&mut h[..]));
    h.extend_from_slice(payload);
    h
}

pub(crate) fn v4(a: u8, b: u8, c: u8, d: u8) -> [u8; 4] {
    [a, b, c, d]
}

pub(crate) fn v6(last: u8) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[0] = 0x20;
    a[1] = 0x01;
    a[0xf] = last;
    a
}

/// A spread of well-formed frames covering every protocol the parser
/// knows; property tests mutate and truncate them.
pub(crate) fn seed_frames() -> Vec<Vec<u8>> {
    let sll = [1u8, 1, 2, 3, 4, 5, 6, 7];
    let tll = [2u8, 1, 8, 9, 10, 11, 12, 13];
    let nd = |t: u8, opts: &[u8]| cat(&[&[t, 0, 0, 0], &[0; 4], &v6(0x33), opts]);
    let arp = [
        0u8, 1, 8, 0, 6, 4, 0, 1, 2, 0, 0, 0, 0, 1, 10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 10, 0, 0, 2,
    ];
    let ah = {
        let mut a = vec![0u8; 16];
        a[0] = 6;
        a[1] = 2;
        a
    };
    vec![
        eth(
            0x0800,
            &ipv4(6, [10, 0, 0, 1], [10, 0, 0, 2], &[], 0, &tcp(1, 2, b"abc")),
        ),
        eth_tagged(
            &[(0x88a8, 5), (0x8100, 6)],
            0x0800,
            &ipv4(17, [1; 4], [2; 4], &[1, 1, 1, 1], 0, &udp(3, 4, b"q")),
        ),
        eth_tagged(
            &[(0x8100, 7)],
            0x86dd,
            &ipv6(
                0,
                v6(1),
                v6(2),
                &cat(&[&ext(44, 1), &frag6(6, 0, true), &tcp(5, 6, &[])]),
            ),
        ),
        eth(
            0x86dd,
            &ipv6(
                60,
                v6(1),
                v6(2),
                &cat(&[&ext(43, 1), &ext(51, 2), &ah, &tcp(7, 8, &[])]),
            ),
        ),
        eth(
            0x86dd,
            &ipv6(58, v6(1), v6(2), &nd(135, &cat(&[&sll, &tll]))),
        ),
        eth(0x86dd, &ipv6(58, v6(1), v6(2), &nd(136, &tll))),
        eth(
            0x86dd,
            &ipv6(
                44,
                v6(1),
                v6(2),
                &cat(&[&frag6(17, 9, false), &udp(1, 2, &[])]),
            ),
        ),
        eth(
            0x0800,
            &ipv4(1, [1; 4], [2; 4], &[], 0x2000, &[3, 1, 0, 0, 0, 0, 0, 0]),
        ),
        eth(
            0x0800,
            &ipv4(
                132,
                [1; 4],
                [2; 4],
                &[],
                0,
                &[0, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0],
            ),
        ),
        eth(
            0x0800,
            &ipv4(
                47,
                [1; 4],
                [2; 4],
                &[],
                0,
                &[
                    0xb0, 0, 0x65, 0x58, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 1, 0xee,
                ],
            ),
        ),
        eth(
            0x0800,
            &ipv4(
                17,
                [1; 4],
                [2; 4],
                &[],
                0,
                &udp(
                    9,
                    4789,
                    &cat(&[&[8, 0, 0, 0, 0, 0, 5, 0], &eth(0x0800, &[])]),
                ),
            ),
        ),
        eth(0x0806, &arp),
        eth(0x8847, &[0, 1, 0x21, 64, 0x45]),
        eth(0x88e7, &[0, 0, 0, 1, 2]),
        eth(
            0x86dd,
            &ipv6(17, v6(1), v6(2), &udp(1, 4789, &[8, 0, 0, 0, 0, 0, 1, 0])),
        ),
    ]
}
