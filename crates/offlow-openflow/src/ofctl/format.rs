//! Printing matches, actions and instructions back in ovs-ofctl syntax
//! (what `dump-flows` shows).

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::port::PortNo;
use crate::{Action, Instruction};
use offlow_flow::{Field, Match};

use super::*;

/// A value in its field's notation.
pub fn format_value(f: Field, v: u128) -> String {
    match kind_of(f) {
        Kind::Mac => {
            let b = (v as u64).to_be_bytes();
            format!(
                "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
                b[2], b[3], b[4], b[5], b[6], b[7]
            )
        }
        Kind::Ipv4 => Ipv4Addr::from(v as u32).to_string(),
        Kind::Ipv6 => Ipv6Addr::from(v).to_string(),
        Kind::Port => format_port(v as u32),
        Kind::Num => match f {
            Field::Metadata | Field::TunnelId | Field::EthType | Field::Ipv6Exthdr => {
                format!("{v:#x}")
            }
            _ => v.to_string(),
        },
    }
}

/// A port number, reserved ports by name.
pub fn format_port(p: u32) -> String {
    format!("{:?}", PortNo(p))
}

/// `VALUE[/MASK]`, with prefix notation for CIDR address masks.
fn format_masked(f: Field, v: u128, mask: u128) -> String {
    if mask == f.full_mask() {
        return format_value(f, v);
    }
    if matches!(kind_of(f), Kind::Ipv4 | Kind::Ipv6) {
        let inv = !mask & f.full_mask();
        if inv & (inv.wrapping_add(1)) == 0 {
            let len = f.bits() - inv.count_ones();
            return format!("{}/{len}", format_value(f, v));
        }
    }
    match kind_of(f) {
        Kind::Num => format!("{v:#x}/{mask:#x}"),
        _ => format!("{}/{}", format_value(f, v), format_value(f, mask)),
    }
}

/// The Open vSwitch name of a match field (one [`parse_flow`] reads back to
/// the same field; protocol-dependent names are chosen by the caller).
fn ovs_name(f: Field) -> &'static str {
    use Field::*;
    match f {
        EthSrc => "dl_src",
        EthDst => "dl_dst",
        EthType => "dl_type",
        Ipv4Src => "nw_src",
        Ipv4Dst => "nw_dst",
        IpProto => "nw_proto",
        IpEcn => "nw_ecn",
        TunnelId => "tun_id",
        Ipv6Flabel => "ipv6_label",
        Ipv6NdTarget => "nd_target",
        Ipv6NdSll => "nd_sll",
        Ipv6NdTll => "nd_tll",
        Icmpv4Type => "icmp_type",
        Icmpv4Code => "icmp_code",
        _ => f.name(),
    }
}

/// A match in ovs-ofctl syntax (`tcp,in_port=1,nw_dst=10.0.0.0/8,tp_dst=80`);
/// the empty string for match-all. [`parse_flow`] reads it back to the same
/// match.
pub fn format_match(m: &Match) -> String {
    use Field::*;
    let mut parts: Vec<String> = Vec::new();
    let et = eth_type(m);
    let proto = ip_proto(m);
    let mut shown = Vec::new();
    let short = match (et, proto) {
        (Some(0x0800), Some(6)) => Some("tcp"),
        (Some(0x0800), Some(17)) => Some("udp"),
        (Some(0x0800), Some(132)) => Some("sctp"),
        (Some(0x0800), Some(1)) => Some("icmp"),
        (Some(0x86dd), Some(6)) => Some("tcp6"),
        (Some(0x86dd), Some(17)) => Some("udp6"),
        (Some(0x86dd), Some(132)) => Some("sctp6"),
        (Some(0x86dd), Some(58)) => Some("icmp6"),
        _ => None,
    };
    if let Some(s) = short {
        parts.push(s.into());
        shown.extend([EthType, IpProto]);
    } else if let Some(s) = match et {
        Some(0x0800) => Some("ip"),
        Some(0x86dd) => Some("ipv6"),
        Some(0x0806) => Some("arp"),
        Some(0x8847) => Some("mpls"),
        Some(0x8848) => Some("mplsm"),
        _ => None,
    } {
        parts.push(s.into());
        shown.push(EthType);
    }
    let (vv, vm) = m.field(VlanVid);
    let (pv, pm) = m.field(VlanPcp);
    shown.extend([VlanVid, VlanPcp]);
    if vm == 0x1fff && vv == 0 {
        parts.push("vlan_tci=0x0000/0x1fff".into());
    } else if vm != 0 || pm != 0 {
        if vm == 0x1fff && pm == 0 {
            parts.push(format!("dl_vlan={}", vv & 0xfff));
        } else if vm == VID_PRESENT && vv == VID_PRESENT && pm == 7 {
            parts.push(format!("dl_vlan_pcp={pv}"));
        } else {
            let tci = (pv << 13) | vv;
            let mask = (pm << 13) | vm;
            parts.push(format!("vlan_tci={tci:#06x}/{mask:#06x}"));
        }
    }
    let arp = et == Some(0x0806);
    for f in Field::ALL {
        if shown.contains(&f) {
            continue;
        }
        let (v, mk) = m.field(f);
        if mk == 0 {
            continue;
        }
        // Fields in shared storage are named after the match's protocol.
        let owner = canonical(f, et, proto);
        if owner != f {
            continue;
        }
        let name = match f {
            TcpSrc | UdpSrc | SctpSrc => "tp_src",
            TcpDst | UdpDst | SctpDst => "tp_dst",
            ArpSpa if arp => "arp_spa",
            ArpTpa if arp => "arp_tpa",
            IpDscp if mk == 0x3f => {
                parts.push(format!("nw_tos={}", v << 2));
                continue;
            }
            Icmpv6Type => "icmpv6_type",
            Icmpv6Code => "icmpv6_code",
            _ => ovs_name(f),
        };
        parts.push(format!("{name}={}", format_masked(f, v, mk)));
    }
    parts.join(",")
}

/// Which of the fields sharing `f`'s storage a match (or packet) with this
/// `eth_type` and `ip_proto` means (the codec's rule, so printing and
/// encoding agree).
pub fn canonical(f: Field, et: Option<u16>, proto: Option<u8>) -> Field {
    crate::oxm::storage_owner(f, et, proto)
}

/// One action in ovs-ofctl syntax.
pub fn format_action(a: &Action) -> String {
    use Action as A;
    match *a {
        A::Output { port, max_len } => {
            let port = PortNo(port);
            if port == PortNo::CONTROLLER {
                format!("CONTROLLER:{max_len}")
            } else if port.is_physical() {
                format!("output:{}", port.0)
            } else {
                format_port(port.0)
            }
        }
        A::SetField(f, v) => format!("set_field:{}->{}", format_value(f, v), f.name()),
        A::SetNwTtl(t) => format!("mod_nw_ttl:{t}"),
        A::DecNwTtl => "dec_ttl".into(),
        A::CopyTtlOut => "copy_ttl_out".into(),
        A::CopyTtlIn => "copy_ttl_in".into(),
        A::PushVlan(e) => format!("push_vlan:{e:#06x}"),
        A::PopVlan => "pop_vlan".into(),
        A::PushMpls(e) => format!("push_mpls:{e:#06x}"),
        A::PopMpls(e) => format!("pop_mpls:{e:#06x}"),
        A::SetMplsTtl(t) => format!("set_mpls_ttl:{t}"),
        A::DecMplsTtl => "dec_mpls_ttl".into(),
        A::SetQueue(q) => format!("set_queue:{q}"),
        A::SetWorkers(m) => format!("offlow_workers:{m:#x}"),
        A::Group(g) => format!("group:{g}"),
        A::PushPbb(e) => format!("push_pbb:{e:#06x}"),
        A::PopPbb => "pop_pbb".into(),
        A::Experimenter { experimenter, .. } => format!("experimenter:{experimenter:#x}"),
    }
}

/// Actions joined by commas (`drop` when empty).
pub fn format_actions(acts: &[Action]) -> String {
    if acts.is_empty() {
        return "drop".into();
    }
    acts.iter().map(format_action).collect::<Vec<_>>().join(",")
}

/// Instructions in ovs-ofctl `actions=` syntax.
pub fn format_instructions(ins: &[Instruction]) -> String {
    use Instruction as I;
    let mut parts = Vec::new();
    for i in ins {
        match i {
            I::ApplyActions(a) => {
                if !a.is_empty() {
                    parts.push(format_actions(a));
                }
            }
            I::WriteActions(a) => parts.push(format!(
                "write_actions({})",
                a.iter().map(format_action).collect::<Vec<_>>().join(",")
            )),
            I::ClearActions => parts.push("clear_actions".into()),
            I::WriteMetadata { value, mask } => {
                if *mask == u64::MAX {
                    parts.push(format!("write_metadata:{value:#x}"));
                } else {
                    parts.push(format!("write_metadata:{value:#x}/{mask:#x}"));
                }
            }
            I::GotoTable(t) => parts.push(format!("goto_table:{t}")),
            I::Meter(m) => parts.push(format!("meter:{m}")),
            I::Experimenter { experimenter, .. } => {
                parts.push(format!("experimenter:{experimenter:#x}"))
            }
        }
    }
    if parts.is_empty() {
        "drop".into()
    } else {
        parts.join(",")
    }
}
