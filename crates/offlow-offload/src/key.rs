//! The offload key: the microflow key of the frames the offload tier serves.
//!
//! # The offloadable class
//! A backend parses frames itself (in the kernel, on a NIC), so it must
//! recognise exactly the frames whose [`FlowKey`] it can rebuild. offlow's
//! class is the one its userspace fast parser already takes
//! ([`offlow_flow::extract_fast::extract_common`]):
//!
//! - Ethernet II, with at most one 802.1Q / 802.1ad tag;
//! - IPv4 with a 20-byte header (no options), not a fragment, its total
//!   length within the frame and at least the header;
//! - TCP (data offset ≥ 5), UDP (not to the VXLAN port 4789, which the
//!   parser would decapsulate into `tunnel_id`), ICMPv4 (≥ 8 bytes), or an
//!   IP protocol without transport fields other than SCTP and GRE (whose
//!   CRC32c and tunnel key the class leaves to software);
//! - at least 14 + 20 + 8 bytes.
//!
//! Every other frame (ARP, IPv6, MPLS, options, fragments, tunnels, runts)
//! goes up to userspace unparsed. Within the class, the frame's full
//! [`FlowKey`] is a function of the [`OffloadKey`] fields (metadata is
//! zero, in_phy_port equals in_port, the presence bits follow from the tag
//! and the protocol), so an exact match on an [`OffloadKey`] is an exact
//! match on the microflow: [`OffloadKey::from_flow_key`] and
//! [`OffloadKey::to_flow_key`] are inverse on it (property-tested).
//!
//! # Tunnel ports
//! A frame decapsulated from a tunnel (`offlow_wire::tunnel::classify`)
//! enters the pipeline on the tunnel's OpenFlow port with `tunnel_id` =
//! the key it arrived with. Its key is the inner frame's, taken as above,
//! with `in_port` (and `in_phy_port`) the tunnel port and that
//! `tunnel_id` ([`OffloadKey::parse`] takes both). A non-zero `tunnel_id`
//! is admitted here whatever the port; a backend refuses it on a port that
//! is not one of its tunnels ([`crate::Capabilities::admits`]).
//!
//! A key from a frame with IPv4 options maps to the same [`OffloadKey`] as
//! the option-less frame (options are not in the key); a backend still sends
//! such frames up, so the entry only ever serves frames of the class.

use offlow_flow::extract::OFPVID_PRESENT;
use offlow_flow::{present, Field, FlowKey, Layout};
use offlow_wire::ethernet::ethertype;
use offlow_wire::ip::proto;
use offlow_wire::vxlan;

use crate::Refusal;

/// The outer VLAN tag as the key sees it (the TPID and the DEI bit are not in
/// an OpenFlow key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VlanTag {
    /// The 12-bit VLAN id.
    pub vid: u16,
    /// The 3-bit priority.
    pub pcp: u8,
}

/// An exact-match key for one microflow of the offloadable class (module
/// docs). Addresses and ports are host-order numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OffloadKey {
    /// OpenFlow ingress port.
    pub in_port: u32,
    /// Destination MAC, as a 48-bit number.
    pub eth_dst: u64,
    /// Source MAC, as a 48-bit number.
    pub eth_src: u64,
    /// The outer tag, if the frame has one.
    pub vlan: Option<VlanTag>,
    /// IPv4 source address.
    pub ipv4_src: u32,
    /// IPv4 destination address.
    pub ipv4_dst: u32,
    /// IP protocol.
    pub ip_proto: u8,
    /// DSCP (6 bits).
    pub ip_dscp: u8,
    /// ECN (2 bits).
    pub ip_ecn: u8,
    /// TCP/UDP source port, or the ICMP type; 0 for other protocols.
    pub tp_src: u16,
    /// TCP/UDP destination port, or the ICMP code; 0 for other protocols.
    pub tp_dst: u16,
    /// The tunnel key a frame decapsulated on a tunnel port arrived with
    /// (module docs); 0 on other ports.
    pub tunnel_id: u64,
}

/// Does the class give this protocol transport fields in the key?
pub fn has_transport_fields(ip_proto: u8) -> bool {
    matches!(ip_proto, proto::TCP | proto::UDP | proto::ICMP)
}

/// Is this protocol outside the class (left to software)?
fn excluded_protocol(ip_proto: u8) -> bool {
    matches!(ip_proto, proto::SCTP | proto::GRE)
}

/// The presence bits a key of the class carries.
fn presence_of(vlan: bool, ip_proto: u8) -> u16 {
    let mut bits = present::L3;
    if vlan {
        bits |= present::VLAN;
    }
    if has_transport_fields(ip_proto) {
        bits |= present::L4;
    }
    bits
}

impl OffloadKey {
    /// The offload key of a microflow, or why the microflow is outside the
    /// offloadable class.
    pub fn from_flow_key(key: &FlowKey) -> Result<OffloadKey, Refusal> {
        if key.get(Field::EthType) != u128::from(ethertype::IPV4) {
            return Err(Refusal::OutsideClass("not IPv4"));
        }
        if key.get(Field::Metadata) != 0 {
            return Err(Refusal::OutsideClass("metadata set"));
        }
        let in_port = key.get(Field::InPort) as u32;
        if key.get(Field::InPhyPort) as u32 != in_port {
            return Err(Refusal::OutsideClass("in_phy_port differs from in_port"));
        }
        let ip_proto = key.get(Field::IpProto) as u8;
        if excluded_protocol(ip_proto) {
            return Err(Refusal::OutsideClass("SCTP or GRE"));
        }
        let vid = key.get(Field::VlanVid) as u16;
        let vlan = (key.presence() & present::VLAN != 0).then(|| VlanTag {
            vid: vid & 0x0fff,
            pcp: key.get(Field::VlanPcp) as u8,
        });
        if vlan.is_some() && vid & OFPVID_PRESENT == 0 {
            return Err(Refusal::OutsideClass(
                "VLAN presence without OFPVID_PRESENT",
            ));
        }
        if ip_proto == proto::UDP && key.get(Field::UdpDst) as u16 == vxlan::UDP_PORT {
            return Err(Refusal::OutsideClass("VXLAN"));
        }
        let ok = OffloadKey {
            in_port,
            eth_dst: key.get(Field::EthDst) as u64,
            eth_src: key.get(Field::EthSrc) as u64,
            vlan,
            ipv4_src: key.get(Field::Ipv4Src) as u32,
            ipv4_dst: key.get(Field::Ipv4Dst) as u32,
            ip_proto,
            ip_dscp: key.get(Field::IpDscp) as u8,
            ip_ecn: key.get(Field::IpEcn) as u8,
            tp_src: key.get(Field::TcpSrc) as u16,
            tp_dst: key.get(Field::TcpDst) as u16,
            tunnel_id: key.get(Field::TunnelId) as u64,
        };
        // Anything the class does not produce (IPv6 words, ARP, MPLS,
        // fragment bits, ports on a protocol without them, ...) shows as a
        // difference from the key rebuilt from the fields above.
        if ok.to_flow_key() != *key {
            return Err(Refusal::OutsideClass(
                "fields or presence bits outside the class",
            ));
        }
        Ok(ok)
    }

    /// The full microflow key of the frames this key matches.
    pub fn to_flow_key(&self) -> FlowKey {
        let mut k = FlowKey::ZERO;
        k.set(Field::InPort, self.in_port.into());
        k.set(Field::InPhyPort, self.in_port.into());
        k.set(Field::EthDst, self.eth_dst.into());
        k.set(Field::EthSrc, self.eth_src.into());
        k.set(Field::EthType, ethertype::IPV4.into());
        k.set(Field::TunnelId, self.tunnel_id.into());
        if let Some(tag) = self.vlan {
            k.set(Field::VlanVid, (OFPVID_PRESENT | tag.vid).into());
            k.set(Field::VlanPcp, tag.pcp.into());
        }
        k.set(Field::Ipv4Src, self.ipv4_src.into());
        k.set(Field::Ipv4Dst, self.ipv4_dst.into());
        k.set(Field::IpProto, self.ip_proto.into());
        k.set(Field::IpDscp, self.ip_dscp.into());
        k.set(Field::IpEcn, self.ip_ecn.into());
        if has_transport_fields(self.ip_proto) {
            k.set(Field::TcpSrc, self.tp_src.into());
            k.set(Field::TcpDst, self.tp_dst.into());
        }
        k.add_presence(presence_of(self.vlan.is_some(), self.ip_proto));
        k
    }

    /// The key a backend must compute for `frame` arriving on `in_port`
    /// with `tunnel_id` (a decapsulated frame on a tunnel port: the inner
    /// frame, the tunnel's port and key; 0 on any other port), or `None`
    /// when the frame is outside the class and goes up. This is the
    /// reference the backends' own parsers are tested against.
    pub fn parse(frame: &[u8], in_port: u32, tunnel_id: u64) -> Option<OffloadKey> {
        let mut key = FlowKey::ZERO;
        let mut lay = Layout::default();
        if !offlow_flow::extract_fast::extract_common(frame, in_port, &mut key, &mut lay) {
            return None;
        }
        key.set(Field::TunnelId, tunnel_id.into());
        OffloadKey::from_flow_key(&key).ok()
    }
}

/// A UDP microflow 10.0.0.1:`tp_src` → 10.0.0.2:9 on port 1, untagged:
/// the key the crate's unit tests start from.
#[cfg(test)]
pub(crate) fn udp_key(tp_src: u16) -> OffloadKey {
    OffloadKey {
        in_port: 1,
        eth_dst: 0x0200_0000_0002,
        eth_src: 0x0200_0000_0001,
        vlan: None,
        ipv4_src: 0x0a00_0001,
        ipv4_dst: 0x0a00_0002,
        ip_proto: proto::UDP,
        ip_dscp: 0,
        ip_ecn: 0,
        tp_src,
        tp_dst: 9,
        tunnel_id: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use offlow_testkit::FrameBuilder;
    use proptest::prelude::*;

    const A: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const B: [u8; 6] = [2, 0, 0, 0, 0, 2];

    fn frames() -> impl Strategy<Value = (Vec<u8>, u32)> {
        (
            any::<bool>(),
            0u16..4096,
            0u8..8,
            prop_oneof![
                Just(proto::TCP),
                Just(proto::UDP),
                Just(proto::ICMP),
                Just(proto::SCTP),
                Just(proto::GRE),
                any::<u8>()
            ],
            any::<u16>(),
            prop_oneof![Just(vxlan::UDP_PORT), any::<u16>()],
            any::<u8>(),
            prop_oneof![Just(0u16), Just(0x2000), Just(1), any::<u16>()],
            1u32..64,
            0usize..40,
        )
            .prop_map(
                |(tagged, vid, pcp, ip_proto, sport, dport, tos, frag, in_port, cut)| {
                    let mut b = FrameBuilder::eth(A, B);
                    if tagged {
                        b = b.vlan(vid, pcp);
                    }
                    b = b.ipv4([10, 0, 0, 1], [10, 0, 0, 2]).tos(tos);
                    if frag != 0 {
                        b = b.flags_frag(frag);
                    }
                    b = match ip_proto {
                        proto::TCP => b.tcp(sport, dport),
                        proto::UDP => b.udp(sport, dport),
                        proto::ICMP => b.icmpv4(8, 0, 0),
                        proto::SCTP => b.sctp(sport, dport),
                        p => b.ip_payload(p),
                    };
                    let mut f = b.build();
                    let keep = f.len().saturating_sub(cut % 8 * (cut / 8));
                    f.truncate(keep);
                    (f, in_port)
                },
            )
    }

    proptest! {
        /// Within the class, the offload key and the full key carry the
        /// same information; outside it, `parse` says so.
        #[test]
        fn offload_key_round_trips_the_fast_parser((frame, in_port) in frames(),
                                                   tunnel_id in prop_oneof![Just(0u64), any::<u64>()]) {
            let mut key = FlowKey::ZERO;
            let mut lay = Layout::default();
            let in_class = offlow_flow::extract_fast::extract_common(&frame, in_port, &mut key, &mut lay);
            // A decapsulated frame's key: the inner frame's, with the key
            // it arrived with.
            key.set(Field::TunnelId, tunnel_id.into());
            match OffloadKey::parse(&frame, in_port, tunnel_id) {
                Some(ok) => {
                    prop_assert!(in_class);
                    prop_assert_eq!(ok.to_flow_key(), key);
                    prop_assert_eq!(OffloadKey::from_flow_key(&key), Ok(ok));
                    // The general parser, the reference, agrees.
                    let mut general = offlow_flow::extract(&frame, in_port, &mut Default::default());
                    general.key.set(Field::TunnelId, tunnel_id.into());
                    prop_assert_eq!(general.key, key);
                    prop_assert_eq!(ok.tunnel_id, tunnel_id);
                }
                None => {
                    // Out of class: the fast parser declined, or it is a
                    // protocol or port the class excludes.
                    prop_assert!(!in_class || OffloadKey::from_flow_key(&key).is_err());
                }
            }
        }
    }

    #[test]
    fn keys_outside_the_class_are_refused_with_a_reason() {
        let arp = FrameBuilder::eth(A, B)
            .arp(1, A, [10, 0, 0, 1], B, [10, 0, 0, 2])
            .build();
        let general = offlow_flow::extract(&arp, 1, &mut Default::default());
        assert_eq!(
            OffloadKey::from_flow_key(&general.key),
            Err(Refusal::OutsideClass("not IPv4"))
        );
        let vxlan = FrameBuilder::eth(A, B)
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2])
            .udp(1, vxlan::UDP_PORT)
            .build();
        assert_eq!(OffloadKey::parse(&vxlan, 1, 0), None);
        let frag = FrameBuilder::eth(A, B)
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2])
            .fragment(8, false)
            .udp(1, 2)
            .build();
        let general = offlow_flow::extract(&frag, 1, &mut Default::default());
        assert!(matches!(
            OffloadKey::from_flow_key(&general.key),
            Err(Refusal::OutsideClass(_))
        ));
        let udp = FrameBuilder::eth(A, B)
            .vlan(7, 3)
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2])
            .tos(0x2e << 2 | 1)
            .udp(1000, 53)
            .build();
        let k = OffloadKey::parse(&udp, 4, 0).expect("in class");
        assert_eq!(k.vlan, Some(VlanTag { vid: 7, pcp: 3 }));
        assert_eq!(
            (k.ip_dscp, k.ip_ecn, k.tp_src, k.tp_dst),
            (0x2e, 1, 1000, 53)
        );
    }
}
