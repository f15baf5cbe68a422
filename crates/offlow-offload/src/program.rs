//! What an offloaded entry does to its frames: a fixed-shape program
//! compiled from the pipeline's final action list.
//!
//! # Why a fixed shape
//! A backend (an XDP program, a NIC's rewrite engine) applies rewrites in a
//! fixed order of stages, not an arbitrary action list: outer VLAN tag,
//! then Ethernet addresses, then the IPv4 header (ToS, TTL, addresses, with
//! an incremental checksum update), then the TCP/UDP ports, then one
//! verdict. [`compile`] turns an OpenFlow action list into that shape
//! exactly, or refuses with the reason: the flow then stays in software. It
//! never drops an action it cannot express.
//!
//! Because an offloaded entry is an exact-match microflow, the compiler knows
//! the frame's headers from the key (tagged or not, TCP or UDP), so field
//! rewrites on distinct headers commute with tag push/pop and the order of
//! the list matters only where it changes the result: several writes of one
//! field (the last wins), TTL operations, and the VLAN stack, which is
//! simulated tag by tag with the executor's rules (`push_vlan` copies the
//! outer tag's TCI with the DEI bit cleared, or writes 0 on an untagged
//! frame).
//!
//! The userspace executor (`offlow_datapath::execute`) is the reference:
//! the XDP backend's differential test runs both on the same frames.

use offlow_flow::Field;
use offlow_pipeline::{Action, PortNo};
use offlow_wire::ethernet::ethertype;
use offlow_wire::ip::proto;

use crate::caps::ActionKinds;
use crate::key::OffloadKey;
use crate::Refusal;

/// What happens to the outer VLAN tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum VlanOp {
    /// Leave the frame's tag (or its absence) as it is.
    #[default]
    Keep,
    /// Remove the frame's tag (the key says there is one).
    Strip,
    /// The frame leaves with exactly one tag: the existing one rewritten, or
    /// a new one inserted if the frame has none. `None` keeps the existing
    /// tag's TPID / VID / PCP; an untagged frame always gets all three.
    Write {
        /// TPID (0x8100 or 0x88a8).
        tpid: Option<u16>,
        /// 12-bit VLAN id.
        vid: Option<u16>,
        /// 3-bit priority.
        pcp: Option<u8>,
        /// Clear the DEI bit of the existing tag (a tag pushed over it
        /// copies its TCI with DEI cleared, then the old tag was popped).
        clear_dei: bool,
    },
}

/// The IPv4 TTL operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TtlOp {
    /// Unchanged.
    #[default]
    Keep,
    /// Set to this value.
    Set(u8),
    /// Decrement; a frame whose TTL would reach 0 is not forwarded by the
    /// backend but sent up, where the executor reports it (packet-in with
    /// reason INVALID_TTL or a counted drop).
    Dec,
}

/// Where the frame goes after the rewrites.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// Dropped (an empty action list); counted per entry.
    Drop,
    /// Out of this OpenFlow port (never the ingress port: see [`compile`]).
    Port(u32),
    /// Back out of the ingress port (`OFPP_IN_PORT`).
    InPort,
    /// Unmodified, to the userspace worker on one of these CPUs (the
    /// offlow `SetWorkers` action; bit i = worker i).
    Cpu(u64),
}

/// A compiled entry program (module docs). Fields apply in declaration order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OffloadProgram {
    /// The tag stage.
    pub vlan: VlanOp,
    /// New source MAC (48-bit number).
    pub eth_src: Option<u64>,
    /// New destination MAC.
    pub eth_dst: Option<u64>,
    /// New DSCP (6 bits).
    pub ip_dscp: Option<u8>,
    /// New ECN (2 bits).
    pub ip_ecn: Option<u8>,
    /// TTL.
    pub ttl: TtlOp,
    /// New IPv4 source address.
    pub ipv4_src: Option<u32>,
    /// New IPv4 destination address.
    pub ipv4_dst: Option<u32>,
    /// New TCP/UDP source port (the key's protocol says which).
    pub tp_src: Option<u16>,
    /// New TCP/UDP destination port.
    pub tp_dst: Option<u16>,
    /// Set-field `tunnel_id`: no frame bytes, but an output to a `key=flow`
    /// tunnel sends it as the key (without it, the key's own `tunnel_id`).
    pub tunnel_id: Option<u64>,
    /// Where the frame goes.
    pub verdict: Verdict,
}

impl OffloadProgram {
    /// A program that only forwards (or drops): no rewrites.
    pub const fn plain(verdict: Verdict) -> OffloadProgram {
        OffloadProgram {
            vlan: VlanOp::Keep,
            eth_src: None,
            eth_dst: None,
            ip_dscp: None,
            ip_ecn: None,
            ttl: TtlOp::Keep,
            ipv4_src: None,
            ipv4_dst: None,
            tp_src: None,
            tp_dst: None,
            tunnel_id: None,
            verdict,
        }
    }

    /// The action kinds a backend needs to run this program.
    pub fn kinds(&self) -> ActionKinds {
        let mut k = ActionKinds::EMPTY;
        k |= match self.verdict {
            Verdict::Drop => ActionKinds::DROP,
            Verdict::Port(_) => ActionKinds::OUTPUT,
            Verdict::InPort => ActionKinds::IN_PORT,
            Verdict::Cpu(_) => ActionKinds::STEER_CPU,
        };
        match self.vlan {
            VlanOp::Keep => {}
            VlanOp::Strip => k |= ActionKinds::POP_VLAN,
            VlanOp::Write { .. } => k |= ActionKinds::WRITE_VLAN,
        }
        if self.eth_src.is_some() || self.eth_dst.is_some() {
            k |= ActionKinds::SET_ETH;
        }
        if self.ip_dscp.is_some() || self.ip_ecn.is_some() {
            k |= ActionKinds::SET_IP_TOS;
        }
        match self.ttl {
            TtlOp::Keep => {}
            TtlOp::Set(_) => k |= ActionKinds::SET_TTL,
            TtlOp::Dec => k |= ActionKinds::DEC_TTL,
        }
        if self.ipv4_src.is_some() || self.ipv4_dst.is_some() {
            k |= ActionKinds::SET_IPV4;
        }
        if self.tp_src.is_some() || self.tp_dst.is_some() {
            k |= ActionKinds::SET_L4_PORT;
        }
        k
    }
}

fn mac(v: u64) -> String {
    let b = v.to_be_bytes();
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        b[2], b[3], b[4], b[5], b[6], b[7]
    )
}

fn ip(v: u32) -> std::net::Ipv4Addr {
    std::net::Ipv4Addr::from(v)
}

impl core::fmt::Display for OffloadProgram {
    /// The stages in order, comma-separated, in ovs-ofctl's spirit:
    /// `strip_vlan,mod_dl_dst:02:00:00:00:00:09,dec_ttl,output:2`.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let mut parts: Vec<String> = Vec::new();
        match self.vlan {
            VlanOp::Keep => {}
            VlanOp::Strip => parts.push("strip_vlan".into()),
            VlanOp::Write {
                tpid,
                vid,
                pcp,
                clear_dei,
            } => {
                let mut w = String::from("write_vlan(");
                let mut fields = Vec::new();
                if let Some(t) = tpid {
                    fields.push(format!("tpid={t:#06x}"));
                }
                if let Some(v) = vid {
                    fields.push(format!("vid={v}"));
                }
                if let Some(p) = pcp {
                    fields.push(format!("pcp={p}"));
                }
                if clear_dei {
                    fields.push("dei=0".into());
                }
                w.push_str(&fields.join(","));
                w.push(')');
                parts.push(w);
            }
        }
        if let Some(v) = self.eth_src {
            parts.push(format!("mod_dl_src:{}", mac(v)));
        }
        if let Some(v) = self.eth_dst {
            parts.push(format!("mod_dl_dst:{}", mac(v)));
        }
        if let Some(v) = self.ip_dscp {
            parts.push(format!("set_field:{v}->ip_dscp"));
        }
        if let Some(v) = self.ip_ecn {
            parts.push(format!("mod_nw_ecn:{v}"));
        }
        match self.ttl {
            TtlOp::Keep => {}
            TtlOp::Set(t) => parts.push(format!("mod_nw_ttl:{t}")),
            TtlOp::Dec => parts.push("dec_ttl".into()),
        }
        if let Some(v) = self.ipv4_src {
            parts.push(format!("mod_nw_src:{}", ip(v)));
        }
        if let Some(v) = self.ipv4_dst {
            parts.push(format!("mod_nw_dst:{}", ip(v)));
        }
        if let Some(v) = self.tp_src {
            parts.push(format!("mod_tp_src:{v}"));
        }
        if let Some(v) = self.tp_dst {
            parts.push(format!("mod_tp_dst:{v}"));
        }
        if let Some(v) = self.tunnel_id {
            parts.push(format!("set_field:{v:#x}->tunnel_id"));
        }
        parts.push(match self.verdict {
            Verdict::Drop => "drop".into(),
            Verdict::Port(p) => format!("output:{p}"),
            Verdict::InPort => "in_port".into(),
            Verdict::Cpu(m) => format!("to_cpu(workers={m:#x})"),
        });
        f.write_str(&parts.join(","))
    }
}

/// One tag of the simulated VLAN stack: `None` = as on the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SimTag {
    /// The frame's own tag, untouched by push/pop (its fields may be set).
    original: bool,
    tpid: Option<u16>,
    vid: Option<u16>,
    pcp: Option<u8>,
    clear_dei: bool,
}

/// Compile the final action list of `key`'s microflow into a program, or say
/// why it cannot be offloaded.
///
/// Refused: more than one output (a backend forwards one copy); output to a
/// reserved port other than IN_PORT (controller, flood, all, local, table,
/// normal) or to the ingress port by number (the executor's rules for it
/// are left to software); set-field of a field outside the stages; MPLS,
/// TTL copies, queues, groups and experimenter actions; more than one TTL
/// operation; a VLAN stack deeper than one tag at the end; and any action
/// after the output, which would not change the frame sent.
pub fn compile(key: &OffloadKey, actions: &[Action]) -> Result<OffloadProgram, Refusal> {
    // A steered decision is handed, unmodified, to a worker in the mask,
    // which runs the whole list itself (the last mask wins).
    if let Some(mask) = actions.iter().rev().find_map(|a| match a {
        Action::SetWorkers(m) => Some(*m),
        _ => None,
    }) {
        return Ok(OffloadProgram::plain(Verdict::Cpu(mask)));
    }
    let mut p = OffloadProgram::plain(Verdict::Drop);
    let mut verdict: Option<Verdict> = None;
    let mut ttl_ops = 0;
    let mut stack: Vec<SimTag> = Vec::with_capacity(3);
    if key.vlan.is_some() {
        stack.push(SimTag {
            original: true,
            tpid: None,
            vid: None,
            pcp: None,
            clear_dei: false,
        });
    }
    for a in actions {
        if verdict.is_some() {
            return Err(Refusal::Unsupported("an action after the output"));
        }
        match *a {
            Action::Output { port, .. } => {
                verdict = Some(match port {
                    PortNo::IN_PORT => Verdict::InPort,
                    p if p.is_physical() && p.0 == key.in_port => {
                        return Err(Refusal::Unsupported("output to the ingress port by number"))
                    }
                    p if p.is_physical() => Verdict::Port(p.0),
                    _ => return Err(Refusal::Unsupported("output to a reserved port")),
                });
            }
            Action::SetField(field, value) => {
                let v = value & field.full_mask();
                match field {
                    Field::EthSrc => p.eth_src = Some(v as u64),
                    Field::EthDst => p.eth_dst = Some(v as u64),
                    Field::IpDscp => p.ip_dscp = Some(v as u8),
                    Field::IpEcn => p.ip_ecn = Some(v as u8),
                    Field::Ipv4Src => p.ipv4_src = Some(v as u32),
                    Field::Ipv4Dst => p.ipv4_dst = Some(v as u32),
                    // Metadata for a tunnel output (the key it sends).
                    Field::TunnelId => p.tunnel_id = Some(v as u64),
                    Field::TcpSrc | Field::TcpDst if key.ip_proto == proto::TCP => {
                        set_port(&mut p, field == Field::TcpSrc, v as u16)
                    }
                    Field::UdpSrc | Field::UdpDst if key.ip_proto == proto::UDP => {
                        set_port(&mut p, field == Field::UdpSrc, v as u16)
                    }
                    Field::VlanVid | Field::VlanPcp => {
                        let Some(top) = stack.last_mut() else {
                            return Err(Refusal::Unsupported(
                                "set VLAN field on an untagged frame",
                            ));
                        };
                        if field == Field::VlanVid {
                            top.vid = Some(v as u16 & 0x0fff);
                        } else {
                            top.pcp = Some(v as u8 & 7);
                        }
                    }
                    _ => return Err(Refusal::Field(field)),
                }
            }
            Action::SetNwTtl(t) => {
                ttl_ops += 1;
                p.ttl = TtlOp::Set(t);
            }
            Action::DecNwTtl => {
                ttl_ops += 1;
                p.ttl = TtlOp::Dec;
            }
            Action::PushVlan(tpid) => {
                if tpid != ethertype::VLAN && tpid != ethertype::QINQ {
                    return Err(Refusal::Unsupported("push_vlan with a bad TPID"));
                }
                // The executor copies the outer TCI (DEI cleared), or 0.
                let new = match stack.last() {
                    Some(top) => SimTag {
                        original: false,
                        tpid: Some(tpid),
                        vid: top.vid,
                        pcp: top.pcp,
                        clear_dei: true,
                    },
                    None => SimTag {
                        original: false,
                        tpid: Some(tpid),
                        vid: Some(0),
                        pcp: Some(0),
                        clear_dei: true,
                    },
                };
                // A copy of the frame's tag whose VID/PCP were never set
                // still reads them from the frame; that is only exact while
                // the frame's tag is below it.
                stack.push(new);
            }
            Action::PopVlan => {
                if stack.pop().is_none() {
                    return Err(Refusal::Unsupported("pop_vlan on an untagged frame"));
                }
            }
            Action::SetWorkers(_) => unreachable!("steered lists returned above"),
            Action::SetQueue(_) => return Err(Refusal::Unsupported("set_queue")),
            Action::CopyTtlOut | Action::CopyTtlIn => return Err(Refusal::Unsupported("TTL copy")),
            Action::PushMpls(_)
            | Action::PopMpls(_)
            | Action::SetMplsTtl(_)
            | Action::DecMplsTtl => return Err(Refusal::Unsupported("MPLS")),
            // Not offloadable: the program has no PBB encapsulation (and
            // the backend parses no I-TAG); served in software.
            Action::PushPbb(_) | Action::PopPbb => return Err(Refusal::Unsupported("PBB")),
            Action::Group(_) => return Err(Refusal::Unsupported("group")),
            Action::Experimenter(_) => return Err(Refusal::Unsupported("experimenter action")),
            // A meter is charged per packet by the software executor (token
            // buckets shared by the workers); the kernel program has none.
            Action::Meter(_) => return Err(Refusal::Unsupported("meter")),
        }
        if ttl_ops > 1 {
            return Err(Refusal::Unsupported("more than one TTL operation"));
        }
        if stack.len() > 2 {
            return Err(Refusal::Unsupported("more than two VLAN tags"));
        }
    }
    p.vlan = match (stack.as_slice(), key.vlan.is_some()) {
        ([], false) => VlanOp::Keep,
        ([], true) => VlanOp::Strip,
        ([t], _) if t.original => {
            if t.vid.is_none() && t.pcp.is_none() {
                VlanOp::Keep
            } else {
                VlanOp::Write {
                    tpid: None,
                    vid: t.vid,
                    pcp: t.pcp,
                    clear_dei: false,
                }
            }
        }
        ([t], _) => {
            // A new tag is the only one. Fields it copied from the frame's
            // tag are known from the key (exact match) once that tag is gone.
            let (vid, pcp) = match key.vlan {
                Some(tag) => (t.vid.unwrap_or(tag.vid), t.pcp.unwrap_or(tag.pcp)),
                None => (t.vid.unwrap_or(0), t.pcp.unwrap_or(0)),
            };
            VlanOp::Write {
                tpid: t.tpid,
                vid: Some(vid),
                pcp: Some(pcp),
                clear_dei: true,
            }
        }
        _ => return Err(Refusal::Unsupported("a frame leaving with two VLAN tags")),
    };
    p.verdict = verdict.unwrap_or(Verdict::Drop);
    if p.verdict == Verdict::Drop {
        // Rewrites of a dropped frame change nothing, but an expiring TTL
        // changes the verdict (the executor reports it): keep only that.
        let ttl = if p.ttl == TtlOp::Dec {
            TtlOp::Dec
        } else {
            TtlOp::Keep
        };
        p = OffloadProgram {
            ttl,
            ..OffloadProgram::plain(Verdict::Drop)
        };
    }
    Ok(p)
}

fn set_port(p: &mut OffloadProgram, src: bool, v: u16) {
    if src {
        p.tp_src = Some(v);
    } else {
        p.tp_dst = Some(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::VlanTag;

    fn key(vlan: Option<VlanTag>, ip_proto: u8) -> OffloadKey {
        OffloadKey {
            vlan,
            ip_proto,
            ..crate::key::udp_key(1000)
        }
    }

    const TAG: Option<VlanTag> = Some(VlanTag { vid: 10, pcp: 5 });

    #[test]
    fn output_and_rewrites_compile_into_stages() {
        let acts = [
            Action::SetField(Field::Ipv4Src, 0x0b00_0001),
            Action::SetField(Field::TcpSrc, 4000),
            Action::DecNwTtl,
            Action::SetField(Field::EthDst, 0x0200_0000_0009),
            Action::output(PortNo(2)),
        ];
        let p = compile(&key(None, proto::TCP), &acts).unwrap();
        assert_eq!(p.verdict, Verdict::Port(2));
        assert_eq!(p.ipv4_src, Some(0x0b00_0001));
        assert_eq!(p.tp_src, Some(4000));
        assert_eq!(p.ttl, TtlOp::Dec);
        assert_eq!(p.eth_dst, Some(0x0200_0000_0009));
        assert_eq!(p.vlan, VlanOp::Keep);
        assert!(p
            .kinds()
            .contains(ActionKinds::SET_IPV4 | ActionKinds::DEC_TTL));
    }

    #[test]
    fn empty_list_drops_and_in_port_is_its_own_verdict() {
        assert_eq!(
            compile(&key(None, proto::UDP), &[]).unwrap(),
            OffloadProgram::plain(Verdict::Drop)
        );
        let p = compile(&key(None, proto::UDP), &[Action::output(PortNo::IN_PORT)]).unwrap();
        assert_eq!(p.verdict, Verdict::InPort);
    }

    #[test]
    fn what_cannot_be_expressed_is_refused_never_dropped() {
        let k = key(None, proto::UDP);
        let cases: &[(&[Action], Refusal)] = &[
            (
                &[Action::output(PortNo(2)), Action::output(PortNo(3))],
                Refusal::Unsupported("an action after the output"),
            ),
            (
                &[Action::output(PortNo::CONTROLLER)],
                Refusal::Unsupported("output to a reserved port"),
            ),
            (
                &[Action::output(PortNo(1))],
                Refusal::Unsupported("output to the ingress port by number"),
            ),
            (
                &[
                    Action::SetField(Field::TcpSrc, 1),
                    Action::output(PortNo(2)),
                ],
                Refusal::Field(Field::TcpSrc),
            ),
            (
                &[Action::SetField(Field::IpProto, 6)],
                Refusal::Field(Field::IpProto),
            ),
            (
                &[Action::PushPbb(0x88e7), Action::output(PortNo(2))],
                Refusal::Unsupported("PBB"),
            ),
            (
                &[Action::PopPbb, Action::output(PortNo(2))],
                Refusal::Unsupported("PBB"),
            ),
            (
                &[Action::Meter(1), Action::output(PortNo(2))],
                Refusal::Unsupported("meter"),
            ),
            (
                &[
                    Action::SetField(Field::PbbIsid, 7),
                    Action::output(PortNo(2)),
                ],
                Refusal::Field(Field::PbbIsid),
            ),
            (
                &[
                    Action::DecNwTtl,
                    Action::DecNwTtl,
                    Action::output(PortNo(2)),
                ],
                Refusal::Unsupported("more than one TTL operation"),
            ),
            (
                &[
                    Action::PushVlan(0x8100),
                    Action::PushVlan(0x8100),
                    Action::output(PortNo(2)),
                ],
                Refusal::Unsupported("a frame leaving with two VLAN tags"),
            ),
            (
                &[Action::PopVlan],
                Refusal::Unsupported("pop_vlan on an untagged frame"),
            ),
            (
                &[Action::SetQueue(1), Action::output(PortNo(2))],
                Refusal::Unsupported("set_queue"),
            ),
        ];
        for (acts, why) in cases {
            assert_eq!(compile(&k, acts).as_ref(), Err(why), "{acts:?}");
        }
    }

    #[test]
    fn vlan_stack_is_simulated_with_the_executors_rules() {
        // push on an untagged frame: TCI 0, then the VID set on the new tag.
        let p = compile(
            &key(None, proto::UDP),
            &[
                Action::PushVlan(0x8100),
                Action::SetField(Field::VlanVid, 0x1000 | 42),
                Action::output(PortNo(2)),
            ],
        )
        .unwrap();
        assert_eq!(
            p.vlan,
            VlanOp::Write {
                tpid: Some(0x8100),
                vid: Some(42),
                pcp: Some(0),
                clear_dei: true
            }
        );
        // Set-field on the frame's own tag keeps its TPID and DEI.
        let p = compile(
            &key(TAG, proto::UDP),
            &[
                Action::SetField(Field::VlanPcp, 1),
                Action::output(PortNo(2)),
            ],
        )
        .unwrap();
        assert_eq!(
            p.vlan,
            VlanOp::Write {
                tpid: None,
                vid: None,
                pcp: Some(1),
                clear_dei: false
            }
        );
        // Pop then push: one new tag with TCI 0.
        let p = compile(
            &key(TAG, proto::UDP),
            &[
                Action::PopVlan,
                Action::PushVlan(0x88a8),
                Action::output(PortNo(2)),
            ],
        )
        .unwrap();
        assert_eq!(
            p.vlan,
            VlanOp::Write {
                tpid: Some(0x88a8),
                vid: Some(0),
                pcp: Some(0),
                clear_dei: true
            }
        );
        // Push over the frame's tag, then pop the frame's... the outer one
        // goes: the frame's tag is back, unchanged.
        let p = compile(
            &key(TAG, proto::UDP),
            &[
                Action::PushVlan(0x8100),
                Action::PopVlan,
                Action::output(PortNo(2)),
            ],
        )
        .unwrap();
        assert_eq!(p.vlan, VlanOp::Keep);
        // Strip.
        let p = compile(
            &key(TAG, proto::UDP),
            &[Action::PopVlan, Action::output(PortNo(2))],
        )
        .unwrap();
        assert_eq!(p.vlan, VlanOp::Strip);
    }

    #[test]
    fn a_steered_list_is_handed_up_unmodified() {
        // The worker in the mask runs the whole list itself; the last mask wins.
        let acts = [
            Action::SetWorkers(1),
            Action::SetField(Field::Ipv4Src, 1),
            Action::SetWorkers(0b10),
            Action::output(PortNo(2)),
        ];
        let p = compile(&key(None, proto::UDP), &acts).unwrap();
        assert_eq!(p, OffloadProgram::plain(Verdict::Cpu(0b10)));
    }
}
