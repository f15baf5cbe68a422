//! The `actions=` part of a flow line: actions and instructions, in the
//! order OpenFlow 1.1+ executes them.

use crate::port::{PortNo, CONTROLLER_NO_BUFFER};
use crate::{Action, Instruction};
use offlow_flow::{Field, Match};

use super::*;

/// Instruction order OpenFlow 1.1+ executes (and ovs-ofctl requires).
fn instr_rank(i: &Instruction) -> u8 {
    match i {
        Instruction::Meter(_) => 0,
        Instruction::ApplyActions(_) => 1,
        Instruction::ClearActions => 2,
        Instruction::WriteActions(_) => 3,
        Instruction::WriteMetadata { .. } => 4,
        Instruction::GotoTable(_) => 5,
        Instruction::Experimenter { .. } => 6,
    }
}

/// Parse the text after `actions=` into instructions; `m` is the flow's
/// match (the `mod_tp_*` and `mod_vlan_*` translations depend on it).
pub fn parse_actions(s: &str, m: &Match) -> Result<Vec<Instruction>, SyntaxError> {
    let toks = split_top(s);
    let mut out: Vec<Instruction> = Vec::new();
    let mut apply: Vec<Action> = Vec::new();
    let mut apply_rank_done = false;
    let mut cx = ActCx::new(m);
    let mut saw_drop = false;
    for tok in &toks {
        let (name, arg) = split_action(tok);
        let lname = name.to_ascii_lowercase();
        let ins = match lname.as_str() {
            "drop" => {
                saw_drop = true;
                continue;
            }
            // The meter instruction (ovs-ofctl writes it as an action).
            "meter" => Instruction::Meter(num(tok, need(tok, arg)?, 32)? as u32),
            "goto_table" => Instruction::GotoTable(num(tok, need(tok, arg)?, 8)? as u8),
            "clear_actions" => Instruction::ClearActions,
            "write_metadata" => {
                let a = need(tok, arg)?;
                let (v, mk) = match a.split_once('/') {
                    Some((v, mk)) => (num(tok, v, 64)?, num(tok, mk, 64)?),
                    None => (num(tok, a, 64)?, u128::from(u64::MAX)),
                };
                Instruction::WriteMetadata {
                    value: v as u64,
                    mask: mk as u64,
                }
            }
            "write_actions" => {
                let inner = arg.unwrap_or("");
                let mut acts = Vec::new();
                // The action set is applied to the packet as it leaves the
                // pipeline: translate against the match, not the apply list.
                let mut wcx = ActCx::new(m);
                for t in split_top(inner) {
                    parse_action(t, &mut wcx, &mut acts)?;
                }
                Instruction::WriteActions(acts)
            }
            _ => {
                if apply_rank_done {
                    let prev = out.last().map(instr_name).unwrap_or("?");
                    return Err(SyntaxError::new(
                        tok,
                        format!(
                            "actions must come before {prev} (OpenFlow 1.1+ instruction order)"
                        ),
                    ));
                }
                parse_action(tok, &mut cx, &mut apply)?;
                continue;
            }
        };
        // The meter instruction runs first (§5.9): before any action.
        if matches!(ins, Instruction::Meter(_)) && out.is_empty() && apply.is_empty() {
            out.push(ins);
            continue;
        }
        if !apply_rank_done {
            apply_rank_done = true;
            if !apply.is_empty() {
                out.push(Instruction::ApplyActions(core::mem::take(&mut apply)));
            }
        }
        if let Some(prev) = out.last() {
            if instr_rank(prev) >= instr_rank(&ins) {
                return Err(SyntaxError::new(
                    tok,
                    format!(
                        "{} must come before {} (OpenFlow 1.1+ instruction order), once",
                        instr_name(&ins),
                        instr_name(prev)
                    ),
                ));
            }
        }
        out.push(ins);
    }
    if !apply_rank_done && !apply.is_empty() {
        out.push(Instruction::ApplyActions(apply));
    }
    if saw_drop && (toks.len() > 1 || !out.is_empty()) {
        return Err(SyntaxError::new(
            "drop",
            "`drop` must not be combined with other actions or instructions",
        ));
    }
    Ok(out)
}

fn instr_name(i: &Instruction) -> &'static str {
    match i {
        Instruction::Meter(_) => "meter",
        Instruction::ApplyActions(_) => "apply actions",
        Instruction::ClearActions => "clear_actions",
        Instruction::WriteActions(_) => "write_actions",
        Instruction::WriteMetadata { .. } => "write_metadata",
        Instruction::GotoTable(_) => "goto_table",
        Instruction::Experimenter { .. } => "experimenter",
    }
}

/// `name:arg`, `name(arg)` or `name`.
fn split_action(tok: &str) -> (&str, Option<&str>) {
    let colon = tok.find(':');
    let paren = tok.find('(');
    match (colon, paren) {
        (Some(c), p) if p.is_none_or(|p| c < p) => (&tok[..c], Some(&tok[c + 1..])),
        (_, Some(p)) => {
            let inner = tok[p + 1..].strip_suffix(')').unwrap_or(&tok[p + 1..]);
            (&tok[..p], Some(inner))
        }
        _ => (tok, None),
    }
}

/// What the translation of `mod_*` actions needs to know.
struct ActCx {
    ip_proto: Option<u8>,
    /// A VLAN tag is known to be present (matched, or pushed earlier).
    vlan: bool,
}

impl ActCx {
    fn new(m: &Match) -> ActCx {
        let (vv, vm) = m.field(Field::VlanVid);
        ActCx {
            ip_proto: ip_proto(m),
            vlan: vm & VID_PRESENT != 0 && vv & VID_PRESENT != 0,
        }
    }

    /// The transport port field `mod_tp_*` writes.
    fn tp_field(&self, tok: &str, src: bool) -> Result<Field, SyntaxError> {
        use Field::*;
        Ok(match (self.ip_proto, src) {
            (Some(6), true) => TcpSrc,
            (Some(6), false) => TcpDst,
            (Some(17), true) => UdpSrc,
            (Some(17), false) => UdpDst,
            (Some(132), true) => SctpSrc,
            (Some(132), false) => SctpDst,
            _ => {
                return Err(SyntaxError::new(
                    tok,
                    "needs tcp, udp or sctp in the match (OpenFlow 1.3 sets tcp_src, udp_src, … by name)",
                ))
            }
        })
    }
}

/// Parse one action (not an instruction) into `out`.
fn parse_action(tok: &str, cx: &mut ActCx, out: &mut Vec<Action>) -> Result<(), SyntaxError> {
    use Field::*;
    let (name, arg) = split_action(tok);
    let lname = name.to_ascii_lowercase();
    let set = |out: &mut Vec<Action>, f: Field, s: &str| -> Result<(), SyntaxError> {
        out.push(Action::SetField(f, parse_value(tok, f, s)?));
        Ok(())
    };
    let output = |out: &mut Vec<Action>, port: u32, max_len: u16| -> Result<(), SyntaxError> {
        if port == PortNo::NORMAL.0 {
            return Err(SyntaxError::new(
                tok,
                "NORMAL is not supported: offlow has no traditional L2/L3 pipeline",
            ));
        }
        out.push(Action::Output { port, max_len });
        Ok(())
    };
    match lname.as_str() {
        "output" => {
            let a = need(tok, arg)?;
            // output(port=N,max_len=M) or output:N
            let port = a
                .split(',')
                .find_map(|kv| kv.strip_prefix("port="))
                .unwrap_or(a);
            output(out, parse_port(tok, port)?, CONTROLLER_NO_BUFFER)?;
        }
        "controller" => {
            let len = match arg {
                None => CONTROLLER_NO_BUFFER,
                Some(a) => {
                    let v = a
                        .split(',')
                        .find_map(|kv| kv.strip_prefix("max_len="))
                        .unwrap_or(a);
                    num(tok, v, 16)? as u16
                }
            };
            output(out, PortNo::CONTROLLER.0, len)?;
        }
        "flood" | "all" | "local" | "in_port" | "normal" | "table" if arg.is_none() => {
            output(out, parse_port(tok, name)?, CONTROLLER_NO_BUFFER)?;
        }
        "mod_dl_src" => set(out, EthSrc, need(tok, arg)?)?,
        "mod_dl_dst" => set(out, EthDst, need(tok, arg)?)?,
        "mod_nw_src" => set(out, Ipv4Src, need(tok, arg)?)?,
        "mod_nw_dst" => set(out, Ipv4Dst, need(tok, arg)?)?,
        "mod_nw_tos" => {
            let tos = num(tok, need(tok, arg)?, 8)?;
            if tos & 3 != 0 {
                return Err(SyntaxError::new(tok, "TOS low 2 bits (ECN) must be 0"));
            }
            out.push(Action::SetField(IpDscp, tos >> 2));
        }
        "mod_nw_ecn" => set(out, IpEcn, need(tok, arg)?)?,
        "mod_tp_src" => {
            let f = cx.tp_field(tok, true)?;
            set(out, f, need(tok, arg)?)?
        }
        "mod_tp_dst" => {
            let f = cx.tp_field(tok, false)?;
            set(out, f, need(tok, arg)?)?
        }
        "mod_nw_ttl" => out.push(Action::SetNwTtl(num(tok, need(tok, arg)?, 8)? as u8)),
        "dec_ttl" => out.push(Action::DecNwTtl),
        "set_mpls_ttl" => out.push(Action::SetMplsTtl(num(tok, need(tok, arg)?, 8)? as u8)),
        "dec_mpls_ttl" => out.push(Action::DecMplsTtl),
        "copy_ttl_out" => out.push(Action::CopyTtlOut),
        "copy_ttl_in" => out.push(Action::CopyTtlIn),
        "push_mpls" => out.push(Action::PushMpls(num(tok, need(tok, arg)?, 16)? as u16)),
        "pop_mpls" => out.push(Action::PopMpls(num(tok, need(tok, arg)?, 16)? as u16)),
        "push_pbb" => {
            out.push(Action::PushPbb(num(tok, need(tok, arg)?, 16)? as u16));
            cx.vlan = false;
        }
        "pop_pbb" => {
            out.push(Action::PopPbb);
            cx.vlan = false;
        }
        "push_vlan" => {
            out.push(Action::PushVlan(num(tok, need(tok, arg)?, 16)? as u16));
            cx.vlan = true;
        }
        "pop_vlan" | "strip_vlan" => {
            out.push(Action::PopVlan);
            cx.vlan = false;
        }
        // As ovs-ofctl translates them for OpenFlow 1.1+: push a tag first
        // when none is known to be there.
        "mod_vlan_vid" | "mod_vlan_pcp" => {
            let a = need(tok, arg)?;
            if !cx.vlan {
                out.push(Action::PushVlan(0x8100));
                cx.vlan = true;
            }
            if lname == "mod_vlan_vid" {
                let vid = num(tok, a, 12)?;
                out.push(Action::SetField(VlanVid, VID_PRESENT | vid));
            } else {
                out.push(Action::SetField(VlanPcp, num(tok, a, 3)?));
            }
        }
        "set_queue" => out.push(Action::SetQueue(num(tok, need(tok, arg)?, 32)? as u32)),
        // 64 bits checked by `num`, so the cast cannot truncate.
        "offlow_workers" => out.push(Action::SetWorkers(num(tok, need(tok, arg)?, 64)? as u64)),
        "group" => out.push(Action::Group(num(tok, need(tok, arg)?, 32)? as u32)),
        "set_field" => {
            let a = need(tok, arg)?;
            let (v, fname) = a
                .split_once("->")
                .ok_or_else(|| SyntaxError::new(tok, "expected set_field:VALUE->FIELD"))?;
            let f = set_field_named(fname)
                .ok_or_else(|| SyntaxError::new(tok, format!("unknown field `{fname}`")))?;
            if v.contains('/') {
                return Err(SyntaxError::new(
                    tok,
                    "OpenFlow 1.3 set_field takes no mask",
                ));
            }
            set(out, f, v)?;
        }
        "meter" => {
            return Err(SyntaxError::new(
                tok,
                "meter is an instruction: not inside write_actions",
            ))
        }
        _ => {
            // A bare port number is an output, as in ovs-ofctl.
            if arg.is_none() && name.bytes().all(|b| b.is_ascii_digit()) {
                output(out, num(tok, name, 32)? as u32, CONTROLLER_NO_BUFFER)?;
            } else {
                return Err(SyntaxError::new(tok, format!("unknown action `{name}`")));
            }
        }
    }
    Ok(())
}

/// A `set_field` destination: OXM names and the Open vSwitch aliases that
/// are not context-dependent.
fn set_field_named(name: &str) -> Option<Field> {
    if let Some(f) = Field::ALL.into_iter().find(|f| f.name() == name) {
        return Some(f);
    }
    use Field::*;
    Some(match name {
        "dl_src" => EthSrc,
        "dl_dst" => EthDst,
        "nw_src" | "ip_src" => Ipv4Src,
        "nw_dst" | "ip_dst" => Ipv4Dst,
        "nw_ecn" => IpEcn,
        "dl_vlan_pcp" => VlanPcp,
        "tun_id" => TunnelId,
        "ipv6_label" => Ipv6Flabel,
        "nd_target" => Ipv6NdTarget,
        "nd_sll" => Ipv6NdSll,
        "nd_tll" => Ipv6NdTll,
        "icmp_type" => Icmpv4Type,
        "icmp_code" => Icmpv4Code,
        _ => return None,
    })
}
