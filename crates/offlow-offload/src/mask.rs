//! Masked offload entries: one entry for every microflow that agrees on
//! some bits of the key (a *megaflow*, as Open vSwitch's datapath calls
//! it).
//!
//! # Why
//! An exact-match entry serves one microflow. A controller that installs
//! one rule per pair of hosts (os-ken's `simple_switch_13`) makes every new
//! TCP connection a new microflow of four or five frames under an old rule:
//! none of them is ever hot, so exact entries serve none of them. An entry
//! at the rule's granularity serves them all.
//!
//! # When a masked entry is exact enough
//! The pipeline's decision for a frame depends only on the bits its walk's
//! tables look at (the union of the masks of their rules, see
//! `offlow_pipeline::Pipeline::walk_mask`): two frames that agree on those
//! bits match the same rule in every table, take the same path and get the
//! same action list. An [`OffloadMatch`] built from that union
//! ([`OffloadMask::from_flow_mask`]) therefore decides like the pipeline
//! for every frame it matches — provided the program does not depend on
//! fields outside the mask, which the fields that are always exact see to:
//!
//! - `in_port` (an output to `IN_PORT`, a flood, tunnel ports), the
//!   protocol (where the stages find the L4 checksum) and the VLAN tag
//!   whole (whether one is there to rewrite or strip, and its VID and
//!   priority, which the compiler copies into a tag it pushes) are always
//!   matched exactly;
//! - every [`offlow_flow::FlowKey`] field the [`OffloadKey`] does not carry is constant
//!   over the offloadable class (EtherType, IPv6, ARP, MPLS, metadata at
//!   the pipeline's entry, ...) or a function of fields that are always
//!   exact (`in_phy_port`, the presence bits), so a mask on it needs no
//!   bits here (property-tested below).
//!
//! Two things depend on more than those fields, and the switch sees to them
//! (it knows the walk), not this module: a select group's bucket hangs on
//! the flow hash (such decisions get exact entries), and an output into a
//! `key=flow` tunnel without a set-field of `tunnel_id` sends the frame's
//! own key (the mask then covers `tunnel_id` whole; the XDP backend refuses
//! the entry otherwise).

use offlow_flow::extract::OFPVID_PRESENT;
use offlow_flow::{Field, FlowMask};
use offlow_wire::ethernet::ethertype;
use offlow_wire::ip::proto;

use crate::key::{has_transport_fields, OffloadKey};

/// Which bits of an [`OffloadKey`] an entry matches; `in_port`, `ip_proto`
/// and the VLAN tag always (module docs). A set bit must match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OffloadMask {
    /// Destination MAC bits (48).
    pub eth_dst: u64,
    /// Source MAC bits (48).
    pub eth_src: u64,
    /// IPv4 source bits.
    pub ipv4_src: u32,
    /// IPv4 destination bits.
    pub ipv4_dst: u32,
    /// DSCP bits (6).
    pub ip_dscp: u8,
    /// ECN bits (2).
    pub ip_ecn: u8,
    /// Transport source bits (16; the ICMP type's 8).
    pub tp_src: u16,
    /// Transport destination bits (16; the ICMP code's 8).
    pub tp_dst: u16,
    /// Tunnel key bits.
    pub tunnel_id: u64,
}

const MAC_BITS: u64 = (1 << 48) - 1;

impl OffloadMask {
    /// Every bit: the entry serves one microflow.
    pub const EXACT: OffloadMask = OffloadMask {
        eth_dst: MAC_BITS,
        eth_src: MAC_BITS,
        ipv4_src: u32::MAX,
        ipv4_dst: u32::MAX,
        ip_dscp: 0x3f,
        ip_ecn: 0x3,
        tp_src: u16::MAX,
        tp_dst: u16::MAX,
        tunnel_id: u64::MAX,
    };

    /// Only the fields that are always exact.
    pub const SHAPE: OffloadMask = OffloadMask {
        eth_dst: 0,
        eth_src: 0,
        ipv4_src: 0,
        ipv4_dst: 0,
        ip_dscp: 0,
        ip_ecn: 0,
        tp_src: 0,
        tp_dst: 0,
        tunnel_id: 0,
    };

    /// Does this mask match every bit?
    pub fn is_exact(&self) -> bool {
        *self == OffloadMask::EXACT
    }

    /// The mask that decides like `mask` does over the offloadable class:
    /// its bits on the fields the key carries (module docs: the others are
    /// constant over the class, or follow from the exact fields).
    pub fn from_flow_mask(mask: &FlowMask) -> OffloadMask {
        let bits = |f: Field| mask.get(f);
        OffloadMask {
            eth_dst: bits(Field::EthDst) as u64 & MAC_BITS,
            eth_src: bits(Field::EthSrc) as u64 & MAC_BITS,
            ipv4_src: bits(Field::Ipv4Src) as u32,
            ipv4_dst: bits(Field::Ipv4Dst) as u32,
            ip_dscp: bits(Field::IpDscp) as u8 & 0x3f,
            ip_ecn: bits(Field::IpEcn) as u8 & 0x3,
            // TCP, UDP, SCTP ports and the ICMP type/code share a slot.
            tp_src: bits(Field::TcpSrc) as u16,
            tp_dst: bits(Field::TcpDst) as u16,
            tunnel_id: bits(Field::TunnelId) as u64,
        }
    }

    /// Bits either mask matches.
    pub fn union(&self, other: &OffloadMask) -> OffloadMask {
        OffloadMask {
            eth_dst: self.eth_dst | other.eth_dst,
            eth_src: self.eth_src | other.eth_src,
            ipv4_src: self.ipv4_src | other.ipv4_src,
            ipv4_dst: self.ipv4_dst | other.ipv4_dst,
            ip_dscp: self.ip_dscp | other.ip_dscp,
            ip_ecn: self.ip_ecn | other.ip_ecn,
            tp_src: self.tp_src | other.tp_src,
            tp_dst: self.tp_dst | other.tp_dst,
            tunnel_id: self.tunnel_id | other.tunnel_id,
        }
    }
}

impl OffloadKey {
    /// The key with the bits outside `mask` cleared (`in_port`,
    /// `ip_proto` and the tag kept).
    pub fn masked(&self, mask: &OffloadMask) -> OffloadKey {
        OffloadKey {
            in_port: self.in_port,
            eth_dst: self.eth_dst & mask.eth_dst,
            eth_src: self.eth_src & mask.eth_src,
            vlan: self.vlan,
            ipv4_src: self.ipv4_src & mask.ipv4_src,
            ipv4_dst: self.ipv4_dst & mask.ipv4_dst,
            ip_proto: self.ip_proto,
            ip_dscp: self.ip_dscp & mask.ip_dscp,
            ip_ecn: self.ip_ecn & mask.ip_ecn,
            tp_src: self.tp_src & mask.tp_src,
            tp_dst: self.tp_dst & mask.tp_dst,
            tunnel_id: self.tunnel_id & mask.tunnel_id,
        }
    }
}

/// What an entry serves: every frame whose key, masked, equals `key`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OffloadMatch {
    /// The key, with every bit outside `mask` clear.
    pub key: OffloadKey,
    /// The bits that must match.
    pub mask: OffloadMask,
}

impl From<OffloadKey> for OffloadMatch {
    fn from(key: OffloadKey) -> OffloadMatch {
        OffloadMatch::exact(key)
    }
}

impl OffloadMatch {
    /// One microflow.
    pub fn exact(key: OffloadKey) -> OffloadMatch {
        OffloadMatch {
            key,
            mask: OffloadMask::EXACT,
        }
    }

    /// Every microflow that agrees with `key` on `mask`.
    pub fn new(key: &OffloadKey, mask: OffloadMask) -> OffloadMatch {
        OffloadMatch {
            key: key.masked(&mask),
            mask,
        }
    }

    /// Does the entry serve frames of `key`?
    pub fn matches(&self, key: &OffloadKey) -> bool {
        key.masked(&self.mask) == self.key
    }

    /// Does it serve one microflow only?
    pub fn is_exact(&self) -> bool {
        self.mask.is_exact()
    }

    /// The entry as an OpenFlow match over [`OffloadKey::to_flow_key`]'s
    /// fields (what `offlow trace` shows): it matches a key's flow key
    /// exactly when the entry serves the key (property-tested below). The
    /// always-exact parts read `in_port`, IPv4, the protocol, and the tag
    /// (`vlan_vid` 0 for an untagged entry: no tag); the transport fields
    /// are named for the protocol (TCP, UDP, or ICMP type and code).
    pub fn to_flow_match(&self) -> offlow_flow::Match {
        let (k, w) = (&self.key, &self.mask);
        let mut m = offlow_flow::Match::ANY;
        m.set_exact(Field::InPort, k.in_port.into())
            .set_exact(Field::EthType, ethertype::IPV4.into())
            .set_exact(Field::IpProto, k.ip_proto.into());
        match k.vlan {
            Some(tag) => {
                m.set_exact(Field::VlanVid, (OFPVID_PRESENT | tag.vid).into())
                    .set_exact(Field::VlanPcp, tag.pcp.into());
            }
            None => {
                m.set_exact(Field::VlanVid, 0);
            }
        }
        let mut fields = vec![
            (Field::EthDst, u128::from(k.eth_dst), u128::from(w.eth_dst)),
            (Field::EthSrc, k.eth_src.into(), w.eth_src.into()),
            (Field::Ipv4Src, k.ipv4_src.into(), w.ipv4_src.into()),
            (Field::Ipv4Dst, k.ipv4_dst.into(), w.ipv4_dst.into()),
            (Field::IpDscp, k.ip_dscp.into(), w.ip_dscp.into()),
            (Field::IpEcn, k.ip_ecn.into(), w.ip_ecn.into()),
            (Field::TunnelId, k.tunnel_id.into(), w.tunnel_id.into()),
        ];
        if has_transport_fields(k.ip_proto) {
            let (src, dst) = match k.ip_proto {
                proto::TCP => (Field::TcpSrc, Field::TcpDst),
                proto::UDP => (Field::UdpSrc, Field::UdpDst),
                _ => (Field::Icmpv4Type, Field::Icmpv4Code),
            };
            fields.push((src, k.tp_src.into(), w.tp_src.into()));
            fields.push((dst, k.tp_dst.into(), w.tp_dst.into()));
        }
        for (field, value, mask) in fields {
            if mask != 0 {
                m.set_masked(field, value, mask);
            }
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::VlanTag;
    use offlow_flow::FlowKey;
    use proptest::prelude::*;

    /// Keys of the class that differ in every field a strategy can pick.
    fn keys() -> impl Strategy<Value = OffloadKey> {
        (
            (1u32..4, 0u64..4, 0u64..4),
            prop::option::of((0u16..4, 0u8..2)),
            (0u32..4, 0u32..4),
            prop_oneof![Just(6u8), Just(17u8), Just(1u8), Just(50u8)],
            (0u8..2, 0u8..2, 0u16..4, 0u16..4, 0u64..3),
        )
            .prop_map(
                |((in_port, d, s), tag, (is, id), ip_proto, (dscp, ecn, sp, dp, tun))| {
                    let ports = crate::key::has_transport_fields(ip_proto);
                    OffloadKey {
                        in_port,
                        eth_dst: 0x0200_0000_0000 | d,
                        eth_src: 0x0200_0000_0000 | s,
                        vlan: tag.map(|(vid, pcp)| VlanTag { vid, pcp }),
                        ipv4_src: 0x0a00_0000 | is,
                        ipv4_dst: 0x0a00_0000 | id,
                        ip_proto,
                        ip_dscp: dscp,
                        ip_ecn: ecn,
                        tp_src: if ports { sp } else { 0 },
                        tp_dst: if ports { dp } else { 0 },
                        tunnel_id: tun,
                    }
                },
            )
    }

    /// A flow mask over any fields, the ones the key lacks included.
    fn flow_masks() -> impl Strategy<Value = FlowMask> {
        prop::collection::vec((0usize..Field::ALL.len(), any::<u128>()), 0..6).prop_map(|v| {
            let mut m = FlowKey::ZERO;
            for (i, bits) in v {
                m.set(Field::ALL[i], bits);
            }
            m
        })
    }

    proptest! {
        /// The module's claim: two keys of the class that agree under the
        /// offload mask derived from a flow mask agree under the flow mask
        /// too, so a rule set that looks only at those bits decides both
        /// alike.
        #[test]
        fn keys_equal_under_the_offload_mask_are_equal_under_the_flow_mask(
            m in flow_masks(), a in keys(), b in keys()
        ) {
            let om = OffloadMask::from_flow_mask(&m);
            if a.masked(&om) == b.masked(&om) {
                prop_assert_eq!(a.to_flow_key().masked(&m), b.to_flow_key().masked(&m));
            }
            let e = OffloadMatch::new(&a, om);
            prop_assert!(e.matches(&a));
            prop_assert_eq!(e.matches(&b), a.masked(&om) == b.masked(&om));
        }

        /// The OpenFlow form of an entry matches exactly the flow keys of
        /// the microflows the entry serves.
        #[test]
        fn the_flow_match_matches_what_the_entry_serves(
            m in flow_masks(), a in keys(), b in keys()
        ) {
            let e = OffloadMatch::new(&a, OffloadMask::from_flow_mask(&m));
            let fm = e.to_flow_match();
            prop_assert!(fm.matches(&a.to_flow_key()));
            prop_assert_eq!(fm.matches(&b.to_flow_key()), e.matches(&b), "{:?} {:?}", e, b);
            let x = OffloadMatch::exact(a);
            prop_assert_eq!(x.to_flow_match().matches(&b.to_flow_key()), a == b);
        }

        /// An exact match serves its own microflow only.
        #[test]
        fn an_exact_match_is_one_microflow(a in keys(), b in keys()) {
            prop_assert_eq!(OffloadMatch::exact(a).matches(&b), a == b);
            prop_assert!(OffloadMatch::exact(a).is_exact());
        }
    }

    #[test]
    fn a_per_mac_rule_maps_to_its_fields_and_the_shape() {
        let mut m = offlow_flow::Match::ANY;
        m.set_exact(Field::InPort, 1)
            .set_exact(Field::EthDst, 0x0200_0000_0002)
            .set_exact(Field::EthSrc, 0x0200_0000_0001);
        let om = OffloadMask::from_flow_mask(&m.mask);
        assert_eq!(
            om,
            OffloadMask {
                eth_dst: MAC_BITS,
                eth_src: MAC_BITS,
                ..OffloadMask::SHAPE
            }
        );
        let k = crate::key::udp_key(1000);
        let e = OffloadMatch::new(&k, om);
        assert!(e.matches(&crate::key::udp_key(2000)));
        assert!(!e.matches(&OffloadKey { in_port: 2, ..k }));
        assert!(!e.matches(&OffloadKey { ip_proto: 6, ..k }));
        assert!(!e.matches(&OffloadKey {
            vlan: Some(VlanTag { vid: 0, pcp: 0 }),
            ..k
        }));
    }
}
