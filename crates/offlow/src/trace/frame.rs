//! Build a real Ethernet frame for a packet description, so the trace runs
//! the same parser ([`offlow_flow::extract`]) and executor as the datapath.
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
//! minimum of 60 bytes (without FCS).
//!
//! Thread-safety: pure functions.

use offlow_flow::{Field, Match};
use offlow_wire::checksum::{checksum, fold, pseudo_ipv4, pseudo_ipv6, sum};

/// `OFPVID_PRESENT`.
const VID_PRESENT: u128 = 0x1000;

/// The frame for packet match `m` (exact values), with IP TTL `ttl`.
pub fn build_frame(m: &Match, ttl: u8) -> Vec<u8> {
    let g = |f: Field| m.value.get(f);
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(&mac(g(Field::EthDst)));
    out.extend_from_slice(&mac(g(Field::EthSrc)));
    let vid = g(Field::VlanVid);
    if vid & VID_PRESENT != 0 {
        let tci = ((g(Field::VlanPcp) as u16) << 13) | (vid as u16 & 0x0fff);
        out.extend_from_slice(&0x8100u16.to_be_bytes());
        out.extend_from_slice(&tci.to_be_bytes());
    }
    let et = g(Field::EthType) as u16;
    out.extend_from_slice(&et.to_be_bytes());
    let proto = g(Field::IpProto) as u8;
    match et {
        0x0800 => {
            let l4 = transport(m, proto, L3::V4);
            let tos = ((g(Field::IpDscp) as u8) << 2) | g(Field::IpEcn) as u8;
            let total = (20 + l4.len()) as u16;
            let mut ip = [0u8; 20];
            ip[0] = 0x45;
            ip[1] = tos;
            ip[2..4].copy_from_slice(&total.to_be_bytes());
            ip[8] = ttl;
            ip[9] = proto;
            ip[12..16].copy_from_slice(&(g(Field::Ipv4Src) as u32).to_be_bytes());
            ip[16..20].copy_from_slice(&(g(Field::Ipv4Dst) as u32).to_be_bytes());
            let c = checksum(&ip);
            ip[10..12].copy_from_slice(&c.to_be_bytes());
            out.extend_from_slice(&ip);
            out.extend_from_slice(&l4);
        }
        0x86dd => {
            // An IPv6 packet with no upper protocol says so (No Next Header,
            // 59) rather than carrying 0, which is a Hop-by-Hop header.
            let proto = if m.mask.get(Field::IpProto) == 0 {
                59
            } else {
                proto
            };
            let mut l4 = transport(m, proto, L3::V6);
            if matches!(proto, 0 | 43 | 44 | 60) {
                // An extension header as the "protocol": emit a minimal one
                // (RFC 8200 §4) ending the chain, so the frame is well formed.
                // OpenFlow's ip_proto is the last header: the trace warns
                // that the described value is not what the key carries.
                l4 = vec![59, 0, 0, 0, 0, 0, 0, 0];
            }
            let tc = ((g(Field::IpDscp) as u32) << 2) | g(Field::IpEcn) as u32;
            let first = (6u32 << 28) | (tc << 20) | (g(Field::Ipv6Flabel) as u32 & 0xf_ffff);
            out.extend_from_slice(&first.to_be_bytes());
            out.extend_from_slice(&(l4.len() as u16).to_be_bytes());
            out.push(proto);
            out.push(ttl);
            out.extend_from_slice(&g(Field::Ipv6Src).to_be_bytes());
            out.extend_from_slice(&g(Field::Ipv6Dst).to_be_bytes());
            out.extend_from_slice(&l4);
        }
        0x0806 => {
            out.extend_from_slice(&1u16.to_be_bytes()); // Ethernet
            out.extend_from_slice(&0x0800u16.to_be_bytes());
            out.extend_from_slice(&[6, 4]);
            out.extend_from_slice(&(g(Field::ArpOp) as u16).to_be_bytes());
            out.extend_from_slice(&mac(g(Field::ArpSha)));
            out.extend_from_slice(&(g(Field::ArpSpa) as u32).to_be_bytes());
            out.extend_from_slice(&mac(g(Field::ArpTha)));
            out.extend_from_slice(&(g(Field::ArpTpa) as u32).to_be_bytes());
        }
        0x8847 | 0x8848 => {
            // Bottom of stack unless the description says otherwise: a
            // packet with one label is what "mpls_label=N" means.
            let bos = if m.mask.get(Field::MplsBos) == 0 {
                1
            } else {
                g(Field::MplsBos) as u32
            };
            let lse = ((g(Field::MplsLabel) as u32) << 12)
                | ((g(Field::MplsTc) as u32) << 9)
                | (bos << 8)
                | u32::from(ttl);
            out.extend_from_slice(&lse.to_be_bytes());
        }
        _ => {}
    }
    if out.len() < 60 {
        out.resize(60, 0);
    }
    out
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

/// The transport header (with a valid checksum) for `proto`.
fn transport(m: &Match, proto: u8, l3: L3) -> Vec<u8> {
    let g = |f: Field| m.value.get(f);
    let (src4, dst4) = (
        (g(Field::Ipv4Src) as u32).to_be_bytes(),
        (g(Field::Ipv4Dst) as u32).to_be_bytes(),
    );
    let (src6, dst6) = (
        g(Field::Ipv6Src).to_be_bytes(),
        g(Field::Ipv6Dst).to_be_bytes(),
    );
    let pseudo = |len: usize| match l3 {
        L3::V4 => pseudo_ipv4(src4, dst4, proto, len as u16),
        L3::V6 => pseudo_ipv6(src6, dst6, proto, len as u32),
    };
    // Ports (and ICMP type/code) share the key's storage: TcpSrc reads them
    // whatever the protocol.
    let sport = g(Field::TcpSrc) as u16;
    let dport = g(Field::TcpDst) as u16;
    let mut h: Vec<u8>;
    match (proto, l3) {
        (6, _) => {
            h = vec![0; 20];
            h[0..2].copy_from_slice(&sport.to_be_bytes());
            h[2..4].copy_from_slice(&dport.to_be_bytes());
            h[12] = 5 << 4;
            h[13] = 0x02; // SYN: a plausible first packet.
            h[14..16].copy_from_slice(&0xffffu16.to_be_bytes());
            let c = !fold(sum(&h, pseudo(h.len())));
            h[16..18].copy_from_slice(&c.to_be_bytes());
        }
        (17, _) => {
            h = vec![0; 8];
            h[0..2].copy_from_slice(&sport.to_be_bytes());
            h[2..4].copy_from_slice(&dport.to_be_bytes());
            if dport == offlow_wire::vxlan::UDP_PORT {
                // The parser reads a VXLAN header on this port: give it one,
                // carrying tun_id as the VNI.
                let vni = (g(Field::TunnelId) as u32 & 0xff_ffff) << 8;
                h.extend_from_slice(&[offlow_wire::vxlan::FLAG_I, 0, 0, 0]);
                h.extend_from_slice(&vni.to_be_bytes());
            }
            let len = h.len() as u16;
            h[4..6].copy_from_slice(&len.to_be_bytes());
            let mut c = !fold(sum(&h, pseudo(h.len())));
            // RFC 768: a computed 0 is sent as all ones (0 means "none").
            if c == 0 {
                c = 0xffff;
            }
            h[6..8].copy_from_slice(&c.to_be_bytes());
        }
        (132, _) => {
            h = vec![0; 12];
            h[0..2].copy_from_slice(&sport.to_be_bytes());
            h[2..4].copy_from_slice(&dport.to_be_bytes());
            if let Some(c) = offlow_datapath::sctp_checksum(&h) {
                // RFC 9260 Appendix A: least-significant byte first.
                h[8..12].copy_from_slice(&c.to_le_bytes());
            }
        }
        (1, L3::V4) => {
            h = vec![0; 8];
            h[0] = sport as u8;
            h[1] = dport as u8;
            let c = checksum(&h);
            h[2..4].copy_from_slice(&c.to_be_bytes());
        }
        (58, L3::V6) => {
            let ty = sport as u8;
            h = vec![0; 8];
            h[0] = ty;
            h[1] = dport as u8;
            // Neighbour solicitation / advertisement: target and the
            // link-layer option the match may name.
            if (ty == 135 || ty == 136) && dport == 0 {
                h.extend_from_slice(&g(Field::Ipv6NdTarget).to_be_bytes());
                let (opt, ll) = if ty == 135 {
                    (1u8, g(Field::Ipv6NdSll))
                } else {
                    (2u8, g(Field::Ipv6NdTll))
                };
                if ll != 0 {
                    h.extend_from_slice(&[opt, 1]);
                    h.extend_from_slice(&mac(ll));
                }
            }
            let c = !fold(sum(&h, pseudo(h.len())));
            h[2..4].copy_from_slice(&c.to_be_bytes());
        }
        (47, _) => {
            // GRE (RFC 2890) carrying Ethernet; tun_id, when given, is the
            // key, which the parser reads into tunnel_id.
            let key = g(Field::TunnelId) as u32;
            let flags: u16 = if key != 0 { 0x2000 } else { 0 };
            h = Vec::with_capacity(8);
            h.extend_from_slice(&flags.to_be_bytes());
            h.extend_from_slice(&0x6558u16.to_be_bytes());
            if key != 0 {
                h.extend_from_slice(&key.to_be_bytes());
            }
        }
        _ => h = Vec::new(),
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ofctl_syntax::{format_value, parse_packet};
    use offlow_flow::{extract, present, ParseStats};
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
