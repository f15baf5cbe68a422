//! OXM match prerequisites (OpenFlow 1.3.5 §7.2.3.6, Table 12): which
//! fields a field needs matched exactly before it may be matched (or, for the
//! pipeline's set-field validation, written).
//!
//! One implementation, shared by the codec (which refuses a flow-mod whose
//! match lacks a prerequisite with `OFPBMC_BAD_PREREQ`) and the pipeline
//! (which checks set-field and other action prerequisites against the match
//! as modified by earlier actions, through [`PrereqState`]).
//!
//! Thread-safety: plain data and pure functions.

use crate::key::{Field, Match};

/// Ethertype of IPv4.
pub const ETH_IPV4: u128 = 0x0800;
/// Ethertype of IPv6.
pub const ETH_IPV6: u128 = 0x86dd;
/// Ethertype of ARP.
pub const ETH_ARP: u128 = 0x0806;
/// Ethertype of MPLS unicast.
pub const ETH_MPLS: u128 = 0x8847;
/// Ethertype of MPLS multicast.
pub const ETH_MPLS_MC: u128 = 0x8848;
/// Ethertype of PBB (802.1ah).
pub const ETH_PBB: u128 = 0x88e7;
/// `OFPVID_PRESENT`: the tag-present bit of vlan_vid.
pub const VID_PRESENT: u128 = 0x1000;

/// What validation knows about the packet at some point in a rule's actions.
#[derive(Debug, Clone, Copy)]
pub struct PrereqState {
    /// The rule's match with the effect of earlier actions folded in.
    pub m: Match,
    /// VLAN tags known to be present (from the match or pushed since).
    pub vlan_depth: u8,
}

impl PrereqState {
    /// The state a rule with match `m` starts in.
    pub fn new(m: &Match) -> PrereqState {
        let (v, mask) = m.field(Field::VlanVid);
        let tagged = mask & VID_PRESENT != 0 && v & VID_PRESENT != 0;
        PrereqState {
            m: *m,
            vlan_depth: u8::from(tagged),
        }
    }

    /// The value of `f` if the match pins it exactly.
    pub fn exact(&self, f: Field) -> Option<u128> {
        let (v, mask) = self.m.field(f);
        (mask == f.full_mask()).then_some(v)
    }

    /// Is eth_type matched exactly to one of `types`?
    pub fn eth_is(&self, types: &[u128]) -> bool {
        self.exact(Field::EthType)
            .is_some_and(|t| types.contains(&t))
    }

    /// Is eth_type IPv4 or IPv6?
    pub fn is_ip(&self) -> bool {
        self.eth_is(&[ETH_IPV4, ETH_IPV6])
    }

    /// Is ip_proto exactly `p`, with eth_type one of `eth`?
    pub fn proto_is(&self, p: u128, eth: &[u128]) -> bool {
        self.eth_is(eth) && self.exact(Field::IpProto) == Some(p)
    }

    /// Is this ICMPv6 with a type among `types`?
    pub fn icmpv6_type_is(&self, types: &[u128]) -> bool {
        self.proto_is(58, &[ETH_IPV6])
            && self
                .exact(Field::Icmpv6Type)
                .is_some_and(|t| types.contains(&t))
    }
}

/// Are `field`'s OXM prerequisites (Table 12, applied transitively) known to
/// hold under `m`? Returns the missing prerequisite's description.
pub fn prerequisite(field: Field, st: &PrereqState) -> Result<(), &'static str> {
    use Field::*;
    let ok = match field {
        InPort | InPhyPort | Metadata | EthDst | EthSrc | EthType | TunnelId => true,
        // Setting VID/PCP needs a tag to exist (§7.2.5: "when setting the
        // VID field, the packet should have a VLAN tag").
        VlanVid | VlanPcp => st.vlan_depth > 0,
        IpDscp | IpEcn | IpProto => st.is_ip(),
        Ipv4Src | Ipv4Dst => st.eth_is(&[ETH_IPV4]),
        TcpSrc | TcpDst => st.proto_is(6, &[ETH_IPV4, ETH_IPV6]),
        UdpSrc | UdpDst => st.proto_is(17, &[ETH_IPV4, ETH_IPV6]),
        SctpSrc | SctpDst => st.proto_is(132, &[ETH_IPV4, ETH_IPV6]),
        Icmpv4Type | Icmpv4Code => st.proto_is(1, &[ETH_IPV4]),
        ArpOp | ArpSpa | ArpTpa | ArpSha | ArpTha => st.eth_is(&[ETH_ARP]),
        Ipv6Src | Ipv6Dst | Ipv6Flabel | Ipv6Exthdr => st.eth_is(&[ETH_IPV6]),
        Icmpv6Type | Icmpv6Code => st.proto_is(58, &[ETH_IPV6]),
        Ipv6NdTarget => st.icmpv6_type_is(&[135, 136]),
        Ipv6NdSll => st.icmpv6_type_is(&[135]),
        Ipv6NdTll => st.icmpv6_type_is(&[136]),
        MplsLabel | MplsTc | MplsBos => st.eth_is(&[ETH_MPLS, ETH_MPLS_MC]),
        PbbIsid => st.eth_is(&[ETH_PBB]),
    };
    if ok {
        return Ok(());
    }
    Err(match field {
        VlanVid | VlanPcp => "a VLAN tag (vlan_vid with OFPVID_PRESENT, or push_vlan)",
        IpDscp | IpEcn | IpProto => "eth_type=0x0800 or 0x86dd",
        Ipv4Src | Ipv4Dst => "eth_type=0x0800",
        TcpSrc | TcpDst => "ip_proto=6 (with eth_type IPv4/IPv6)",
        UdpSrc | UdpDst => "ip_proto=17 (with eth_type IPv4/IPv6)",
        SctpSrc | SctpDst => "ip_proto=132 (with eth_type IPv4/IPv6)",
        Icmpv4Type | Icmpv4Code => "ip_proto=1 with eth_type=0x0800",
        ArpOp | ArpSpa | ArpTpa | ArpSha | ArpTha => "eth_type=0x0806",
        Ipv6Src | Ipv6Dst | Ipv6Flabel | Ipv6Exthdr => "eth_type=0x86dd",
        Icmpv6Type | Icmpv6Code => "ip_proto=58 with eth_type=0x86dd",
        Ipv6NdTarget => "icmpv6_type=135 or 136",
        Ipv6NdSll => "icmpv6_type=135",
        Ipv6NdTll => "icmpv6_type=136",
        MplsLabel | MplsTc | MplsBos => "eth_type=0x8847 or 0x8848",
        _ => "eth_type=0x88e7",
    })
}

/// Check a match's OXM prerequisites (§7.2.3.6, Table 12): every constrained
/// field needs its prerequisite fields matched exactly (`OFPBMC_BAD_PREREQ`);
/// the error is the first field whose prerequisite is missing.
///
/// Fields sharing storage in the key (TCP/UDP/SCTP ports and ICMP
/// type/code; IPv4 and ARP addresses) cannot be told apart from the mask
/// alone, so a constrained slot is accepted when the prerequisite of *any*
/// field stored there holds. For a match as decoded from OXM this is exact
/// up to that sharing; the OpenFlow layer can call it after decoding.
pub fn check_match_prerequisites(m: &Match) -> Result<(), Field> {
    let st = PrereqState::new(m);
    for f in Field::ALL {
        // vlan_vid has no match prerequisite (it encodes presence itself).
        if f == Field::VlanVid || m.field(f).1 == 0 {
            continue;
        }
        let loc = f.loc();
        let satisfied = Field::ALL.iter().any(|&g| {
            let lg = g.loc();
            lg.word == loc.word
                && lg.shift == loc.shift
                && m.field(g).1 != 0
                && match g {
                    Field::InPhyPort => m.field(Field::InPort).1 != 0,
                    Field::VlanPcp => st.vlan_depth > 0,
                    _ => prerequisite(g, &st).is_ok(),
                }
        });
        if !satisfied {
            return Err(f);
        }
    }
    Ok(())
}
