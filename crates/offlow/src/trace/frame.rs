//! Build a real Ethernet frame for a packet description, so the trace runs
//! the same parser ([`offlow_flow::extract()`]) and executor as the datapath.
//!
//! The frame carries every header the described fields need: Ethernet, one
//! 802.1Q tag when `vlan_vid` has `OFPVID_PRESENT`, then by `eth_type` an
//! MPLS label, ARP, IPv4 or IPv6, then by `ip_proto` TCP, UDP, SCTP, ICMP or
//! ICMPv6 (with the neighbour-discovery target and link-layer option for
//! NS/NA), GRE (`nw_proto=47`, with `tun_id` as its key) or VXLAN (UDP
//! port 4789, with `tun_id` as its VNI). Unspecified fields are zero, except the TTL / hop limit (64
//! unless `nw_ttl` is given) and MPLS bottom-of-stack (set unless given).
//! Every checksum is valid (IPv4 header, TCP/UDP/ICMPv6 with their
//! pseudo-headers, ICMPv4, SCTP CRC32c). Frames are padded to the Ethernet
//! minimum of 60 bytes (without FCS). The headers and checksums are
//! written by `offlow_testkit`'s frame builder; this module only maps the
//! description's fields onto it.
//!
//! Thread-safety: pure functions.

use offlow_flow::{Field, Match};
use offlow_testkit::FrameBuilder;
use offlow_wire::ethernet::ethertype;
use offlow_wire::{icmpv6, ip, mpls, tcp, vlan, vxlan};

/// `OFPVID_PRESENT`.
const VID_PRESENT: u128 = 0x1000;

/// The frame for packet match `m` (exact values), with IP TTL `ttl`.
pub(crate) fn build_frame(m: &Match, ttl: u8) -> Vec<u8> {
    let g = |f: Field| m.value.get(f);
    let mut b = FrameBuilder::eth(mac(g(Field::EthDst)), mac(g(Field::EthSrc)));
    let vid = g(Field::VlanVid);
    if vid & VID_PRESENT != 0 {
        let tci = ((g(Field::VlanPcp) as u16) << 13) | (vid as u16 & 0x0fff);
        b = b.tag(vlan::TPID_8021Q, tci);
    }
    let et = g(Field::EthType) as u16;
    let proto = g(Field::IpProto) as u8;
    b = match et {
        ethertype::IPV4 => {
            let tos = ((g(Field::IpDscp) as u8) << 2) | g(Field::IpEcn) as u8;
            let b = b
                .ipv4(
                    (g(Field::Ipv4Src) as u32).to_be_bytes(),
                    (g(Field::Ipv4Dst) as u32).to_be_bytes(),
                )
                .tos(tos)
                .ttl(ttl);
            transport(b, m, proto, L3::V4)
        }
        ethertype::IPV6 => {
            // An IPv6 packet with no upper protocol says so (No Next Header,
            // 59) rather than carrying 0, which is a Hop-by-Hop header.
            let proto = if m.mask.get(Field::IpProto) == 0 {
                ip::proto::IPV6_NONXT
            } else {
                proto
            };
            let tc = ((g(Field::IpDscp) as u8) << 2) | g(Field::IpEcn) as u8;
            let b = b
                .ipv6(
                    g(Field::Ipv6Src).to_be_bytes(),
                    g(Field::Ipv6Dst).to_be_bytes(),
                )
                .tos(tc)
                .flow_label(g(Field::Ipv6Flabel) as u32 & 0xf_ffff)
                .ttl(ttl);
            if matches!(proto, 0 | 43 | 44 | 60) {
                // An extension header as the "protocol": emit a minimal one
                // (RFC 8200 §4) ending the chain, so the frame is well formed.
                // OpenFlow's ip_proto is the last header: the trace warns
                // that the described value is not what the key carries.
                b.ip_payload(proto)
                    .payload(&[ip::proto::IPV6_NONXT, 0, 0, 0, 0, 0, 0, 0])
            } else {
                transport(b, m, proto, L3::V6)
            }
        }
        ethertype::ARP => b.arp(
            g(Field::ArpOp) as u16,
            mac(g(Field::ArpSha)),
            (g(Field::ArpSpa) as u32).to_be_bytes(),
            mac(g(Field::ArpTha)),
            (g(Field::ArpTpa) as u32).to_be_bytes(),
        ),
        ethertype::MPLS_UNICAST | ethertype::MPLS_MULTICAST => {
            // Bottom of stack unless the description says otherwise: a
            // packet with one label is what "mpls_label=N" means.
            let bos = m.mask.get(Field::MplsBos) == 0 || g(Field::MplsBos) != 0;
            b.mpls_lse(mpls::Repr {
                label: g(Field::MplsLabel) as u32,
                tc: g(Field::MplsTc) as u8,
                bos,
                ttl,
            })
        }
        _ => b,
    };
    b.ethertype(et).pad_to(60).build()
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum L3 {
    V4,
    V6,
}

fn mac(v: u128) -> [u8; 6] {
    let b = (v as u64).to_be_bytes();
    [b[2], b[3], b[4], b[5], b[6], b[7]]
}

/// Add the transport header for `proto` to `b` (checksums are the
/// builder's).
fn transport(b: FrameBuilder, m: &Match, proto: u8, l3: L3) -> FrameBuilder {
    let g = |f: Field| m.value.get(f);
    // Ports (and ICMP type/code) share the key's storage: TcpSrc reads them
    // whatever the protocol.
    let sport = g(Field::TcpSrc) as u16;
    let dport = g(Field::TcpDst) as u16;
    match (proto, l3) {
        // SYN: a plausible first packet.
        (ip::proto::TCP, _) => b
            .tcp(sport, dport)
            .tcp_seq_ack(0, 0)
            .tcp_flags(tcp::flags::SYN),
        (ip::proto::UDP, _) => {
            let b = b.udp(sport, dport);
            if dport == vxlan::UDP_PORT {
                // The parser reads a VXLAN header on this port: give it one,
                // carrying tun_id as the VNI.
                let vni = (g(Field::TunnelId) as u32 & 0xff_ffff) << 8;
                let mut h = vec![vxlan::FLAG_I, 0, 0, 0];
                h.extend_from_slice(&vni.to_be_bytes());
                b.payload(&h)
            } else {
                b
            }
        }
        (ip::proto::SCTP, _) => b.sctp(sport, dport),
        (ip::proto::ICMP, L3::V4) => b.icmpv4(sport as u8, dport as u8, 0),
        (ip::proto::ICMPV6, L3::V6) => {
            let ty = sport as u8;
            // The 4 bytes after the checksum (flags / reserved).
            let mut body = vec![0u8; 4];
            // Neighbour solicitation / advertisement: target and the
            // link-layer option the match may name.
            if (ty == icmpv6::TYPE_NEIGHBOR_SOLICIT || ty == icmpv6::TYPE_NEIGHBOR_ADVERT)
                && dport == 0
            {
                body.extend_from_slice(&g(Field::Ipv6NdTarget).to_be_bytes());
                let (opt, ll) = if ty == icmpv6::TYPE_NEIGHBOR_SOLICIT {
                    (icmpv6::ND_OPT_SOURCE_LL_ADDR, g(Field::Ipv6NdSll))
                } else {
                    (icmpv6::ND_OPT_TARGET_LL_ADDR, g(Field::Ipv6NdTll))
                };
                if ll != 0 {
                    body.extend_from_slice(&[opt, 1]);
                    body.extend_from_slice(&mac(ll));
                }
            }
            b.icmpv6(ty, dport as u8).payload(&body)
        }
        (ip::proto::GRE, _) => {
            // GRE (RFC 2890) carrying Ethernet; tun_id, when given, is the
            // key, which the parser reads into tunnel_id.
            let key = g(Field::TunnelId) as u32;
            let flags: u16 = if key != 0 { 0x2000 } else { 0 };
            let mut h = Vec::with_capacity(8);
            h.extend_from_slice(&flags.to_be_bytes());
            h.extend_from_slice(&0x6558u16.to_be_bytes());
            if key != 0 {
                h.extend_from_slice(&key.to_be_bytes());
            }
            b.ip_payload(proto).payload(&h)
        }
        _ => b.ip_payload(proto),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use offlow_flow::{extract, present, ParseStats};
    use offlow_openflow::ofctl::{format_value, parse_packet};
    use offlow_wire::checksum::{checksum, fold, pseudo_ipv4, pseudo_ipv6, sum};
    use proptest::prelude::*;

    /// The frame parses back to the described key, with the layers present.
    fn roundtrip(desc: &str) -> offlow_flow::FlowKey {
        let p = parse_packet(desc).expect("parse");
        let frame = build_frame(&p.matcher, 64);
        let mut st = ParseStats::default();
        let parsed = extract(&frame, p.matcher.value.get(Field::InPort) as u32, &mut st);
        for f in Field::ALL {
            let (v, mk) = p.matcher.field(f);
            if mk != 0 {
                assert_eq!(parsed.key.get(f), v, "{desc}: field {}", f.name());
            }
        }
        assert_eq!(st.total(), 0, "{desc}: parse anomalies {st:?}");
        parsed.key
    }

    #[test]
    fn frames_parse_back_to_their_description() {
        let k = roundtrip("in_port=3,tcp,nw_src=10.0.0.1,nw_dst=10.0.0.2,tp_src=1234,tp_dst=80");
        assert_ne!(k.presence() & present::L4, 0);
        roundtrip("in_port=1,udp,dl_vlan=7,dl_vlan_pcp=5,nw_tos=32,nw_ecn=1,tp_dst=53");
        roundtrip("in_port=1,sctp,tp_src=9,tp_dst=10");
        roundtrip("in_port=1,icmp,icmp_type=8,icmp_code=0,nw_dst=1.2.3.4");
        roundtrip(
            "in_port=1,tcp6,ipv6_src=2001:db8::1,ipv6_dst=2001:db8::2,tp_dst=443,ipv6_label=5",
        );
        roundtrip("in_port=1,icmp6,icmpv6_type=135,nd_target=fe80::1,nd_sll=00:00:00:00:00:09");
        roundtrip(
            "in_port=2,arp,arp_op=1,arp_spa=10.0.0.1,arp_tpa=10.0.0.2,arp_sha=00:00:00:00:00:01",
        );
        roundtrip("in_port=1,mpls,mpls_label=100,mpls_tc=3");
        roundtrip("in_port=1,ipv6,ipv6_dst=::9");
        roundtrip("in_port=1,ip,nw_proto=47,tun_id=0x1234");
        roundtrip("in_port=1,udp,tp_dst=4789,tun_id=0x55");
        let k = roundtrip("in_port=4,dl_src=00:00:00:00:00:01,dl_dst=ff:ff:ff:ff:ff:ff");
        assert_eq!(k.presence() & present::L3, 0);
    }

    /// A random packet description: a protocol and random values for the
    /// fields it carries.
    fn arb_packet() -> impl Strategy<Value = String> {
        let protos = vec![
            "", "ip", "tcp", "udp", "sctp", "icmp", "ipv6", "tcp6", "udp6", "sctp6", "icmp6",
            "arp", "mpls", "gre", "vxlan",
        ];
        (
            proptest::sample::select(protos),
            any::<[u64; 8]>(),
            any::<bool>(),
            prop_oneof![Just(135u8), Just(136), any::<u8>()],
        )
            .prop_map(|(proto, r, vlan, icmp6_type)| {
                let mac = |v: u64| format_value(Field::EthSrc, u128::from(v & 0xffff_ffff_ffff));
                let mut s = format!(
                    "in_port={},dl_src={},dl_dst={}",
                    r[0] % 0xff00 + 1,
                    mac(r[1]),
                    mac(r[2])
                );
                if vlan {
                    s += &format!(",dl_vlan={},dl_vlan_pcp={}", r[3] % 4096, r[3] >> 60 & 7);
                }
                // Tunnels: GRE with a 32-bit key, VXLAN with a 24-bit VNI.
                let proto = match proto {
                    "gre" => {
                        s += &format!(",ip,nw_proto=47,tun_id={}", r[7] as u32);
                        "tunnel"
                    }
                    "vxlan" => {
                        s += &format!(",udp,tp_dst=4789,tun_id={}", r[7] & 0xff_ffff);
                        "tunnel"
                    }
                    p => {
                        if !p.is_empty() {
                            s += &format!(",{p}");
                        }
                        p
                    }
                };
                let v4 = |v: u64| format_value(Field::Ipv4Src, u128::from(v as u32));
                let v6 = |a: u64, b: u64| {
                    format_value(Field::Ipv6Src, (u128::from(a) << 64) | u128::from(b))
                };
                let ip = ["ip", "tcp", "udp", "sctp", "icmp", "tunnel"].contains(&proto);
                let ip6 = proto.ends_with('6');
                if ip {
                    s += &format!(",nw_src={},nw_dst={}", v4(r[4]), v4(r[4] >> 32));
                }
                if ip6 {
                    s += &format!(",ipv6_src={},ipv6_dst={}", v6(r[4], r[5]), v6(r[5], r[4]));
                    s += &format!(",ipv6_label={}", r[6] & 0xf_ffff);
                }
                if ip || ip6 {
                    s += &format!(",ip_dscp={},nw_ecn={}", r[6] >> 20 & 63, r[6] >> 26 & 3);
                }
                // Upper protocols the frame builder gives no header (or, for
                // GRE, an empty one).
                if proto == "ip" {
                    s += &format!(",nw_proto={}", [0u8, 41, 47, 50, 89][(r[7] % 5) as usize]);
                }
                if proto == "ipv6" {
                    s += &format!(",nw_proto={}", [59u8, 41, 47, 89][(r[7] % 4) as usize]);
                }
                match proto {
                    "tcp" | "udp" | "sctp" | "tcp6" | "udp6" | "sctp6" => {
                        s += &format!(",tp_src={},tp_dst={}", r[7] as u16, (r[7] >> 16) as u16)
                    }
                    "icmp" => {
                        s += &format!(",icmp_type={},icmp_code={}", r[7] as u8, r[7] >> 8 & 0xff)
                    }
                    "icmp6" => {
                        let nd = (icmp6_type == 135 || icmp6_type == 136) && r[7] & 1 == 0;
                        let code = if nd { 0 } else { r[7] >> 8 & 0xff };
                        s += &format!(",icmpv6_type={icmp6_type},icmpv6_code={code}");
                        if nd {
                            s += &format!(",nd_target={}", v6(r[5], r[7]));
                            let ll = if icmp6_type == 135 {
                                "nd_sll"
                            } else {
                                "nd_tll"
                            };
                            s += &format!(",{ll}={}", mac(r[3]));
                        }
                    }
                    "arp" => {
                        s += &format!(
                            ",arp_op={},arp_spa={},arp_tpa={},arp_sha={},arp_tha={}",
                            r[7] as u16,
                            v4(r[4]),
                            v4(r[4] >> 32),
                            mac(r[5]),
                            mac(r[6])
                        )
                    }
                    "mpls" => {
                        s += &format!(",mpls_label={},mpls_tc={}", r[7] & 0xf_ffff, r[7] >> 20 & 7)
                    }
                    _ => {}
                }
                s
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Every described field comes back from the datapath parser, with
        /// no parse anomaly, and the IPv4 header checksum verifies.
        #[test]
        #[test]
        fn random_packets_parse_back(desc in arb_packet()) {
            roundtrip(&desc);
            let p = parse_packet(&desc).expect("parse");
            let f = build_frame(&p.matcher, 64);
            if let Some(l3) = ipv4_offset(&f) {
                prop_assert_eq!(checksum(&f[l3..l3 + 20]), 0, "{}", desc);
            }
        }
    }

    /// Offset of the IPv4 header, if the frame is IPv4 (tagged or not).
    fn ipv4_offset(f: &[u8]) -> Option<usize> {
        let et = |at: usize| u16::from_be_bytes([f[at], f[at + 1]]);
        match et(12) {
            0x0800 => Some(14),
            0x8100 if et(16) == 0x0800 => Some(18),
            _ => None,
        }
    }

    #[test]
    fn checksums_are_valid() {
        let p = parse_packet("tcp,nw_src=10.0.0.1,nw_dst=10.0.0.2,tp_dst=80").unwrap();
        let f = build_frame(&p.matcher, 64);
        let ip = &f[14..34];
        assert_eq!(checksum(ip), 0, "IPv4 header checksum");
        let tcp = &f[34..54];
        let ps = pseudo_ipv4([10, 0, 0, 1], [10, 0, 0, 2], 6, 20);
        assert_eq!(!fold(sum(tcp, ps)), 0, "TCP checksum");
        let p = parse_packet("udp6,ipv6_src=::1,ipv6_dst=::2,tp_src=5").unwrap();
        let f = build_frame(&p.matcher, 64);
        let udp = &f[54..62];
        let ps = pseudo_ipv6(1u128.to_be_bytes(), 2u128.to_be_bytes(), 17, 8);
        assert_eq!(!fold(sum(udp, ps)), 0, "UDP checksum");
    }
}
