//! Flow-mod validation: instruction rules (§5.9, §5.1), action arguments,
//! which fields set-field may write, and set-field / action prerequisites
//! (§7.2.3.6 Table 12, §7.2.5).
//!
//! Prerequisites are checked against the rule's match *as modified by the
//! actions before it*: a push-VLAN makes a later set vlan_vid valid, a
//! set-field on eth_type would change what later fields need. Write-Actions
//! are checked in action-set execution order after the Apply-Actions, as they
//! will run. Only the rule's own match is known, not what earlier tables did
//! to the packet, so (like Open vSwitch) a rule must establish its own
//! prerequisites.

pub use offlow_flow::prereq::VID_PRESENT;
use offlow_flow::prereq::{prerequisite, PrereqState as State, ETH_MPLS, ETH_MPLS_MC, ETH_PBB};
use offlow_flow::{Field, Match};

use crate::action::{Action, ActionSet, Instruction, Program};
use crate::error::PipelineError;
use crate::port::PortNo;
use offlow_openflow::{BadActionCode, BadInstructionCode, MeterModFailedCode, OfError};

/// Check a match's OXM prerequisites (§7.2.3.6, Table 12); see
/// [`offlow_flow::prereq::check_match_prerequisites`], whose missing field
/// this reports as [`PipelineError::BadPrerequisite`].
pub fn check_match_prerequisites(m: &Match) -> Result<(), PipelineError> {
    offlow_flow::prereq::check_match_prerequisites(m).map_err(PipelineError::BadPrerequisite)
}

/// May set-field write `field`? A refused field is `OFPBAC_BAD_SET_TYPE`
/// ([`PipelineError::FieldNotSettable`]).
///
/// OpenFlow 1.3.5 §7.2.5 (OFPAT_SET_FIELD): "Set-Field actions for OXM
/// types OFPXMT_OFB_IN_PORT, OXM_OF_IN_PHY_PORT and OFPXMT_OFB_METADATA are
/// not supported, because those are not header fields"; ipv6_exthdr is a
/// pseudo-field summarising the extension-header chain, with no bits of
/// its own in the packet. Every other field is a header field and is
/// written (Open vSwitch refuses eth_type, ip_proto and mpls_bos; the spec
/// does not, and os-ken's switch tests expect them):
/// - eth_type and ip_proto relabel what follows without converting it (a
///   TCP segment relabelled UDP keeps its TCP header); the transport
///   checksum is updated for the new pseudo-header protocol, so it stays
///   valid for the bytes as they are. The pipeline's working key cannot
///   follow a relabelled packet and says so (`WorkingKey::exact`).
/// - mpls_bos: the bottom-of-stack bit of the top label, as written; a
///   cleared bit makes the payload read as another label.
pub fn is_settable(field: Field) -> bool {
    !matches!(
        field,
        Field::InPort | Field::InPhyPort | Field::Metadata | Field::Ipv6Exthdr
    )
}

/// What an action list is checked against beyond its own match.
struct Context<'a> {
    /// Whether a group of this id exists (a group action must name one,
    /// §6.5: `OFPBAC_BAD_OUT_GROUP` otherwise).
    group_exists: &'a dyn Fn(u32) -> bool,
    /// Skip prerequisites: a group bucket's actions run on whatever packet
    /// reaches the group, so no match vouches for its headers; the
    /// executor skips a set-field whose header the frame lacks (counted),
    /// as Open vSwitch does for buckets.
    lenient: bool,
}

/// Check an action's prerequisites under `st`, then fold its effect into `st`.
fn check_action(a: &Action, st: &mut State, cx: &Context<'_>) -> Result<(), PipelineError> {
    let need = |ok: bool, need: &'static str| {
        if ok || cx.lenient {
            Ok(())
        } else {
            Err(PipelineError::MatchInconsistent {
                action: a.name(),
                need,
            })
        }
    };
    match *a {
        Action::Output { port, .. } => {
            // §7.2.1: TABLE is only valid in packet-out; ANY is a filter
            // wildcard; NORMAL is optional and we do not implement it.
            let valid = port.is_physical()
                || matches!(
                    port,
                    PortNo::IN_PORT
                        | PortNo::FLOOD
                        | PortNo::ALL
                        | PortNo::CONTROLLER
                        | PortNo::LOCAL
                );
            if !valid {
                return Err(PipelineError::BadOutPort(port));
            }
        }
        Action::SetField(f, v) => {
            if !is_settable(f) {
                return Err(PipelineError::FieldNotSettable(f));
            }
            // §7.2.5: "the OFPVID_PRESENT bit must be set in OXM_OF_VLAN_VID
            // set-field actions".
            if v & !f.full_mask() != 0 || (f == Field::VlanVid && v & VID_PRESENT == 0) {
                return Err(PipelineError::BadSetValue { field: f, value: v });
            }
            if let Err(n) = prerequisite(f, st) {
                need(false, n)?;
            }
            st.m.set_exact(f, v);
        }
        Action::SetNwTtl(_) | Action::DecNwTtl => need(st.is_ip(), "eth_type=0x0800 or 0x86dd")?,
        Action::SetMplsTtl(_) | Action::DecMplsTtl => need(
            st.eth_is(&[ETH_MPLS, ETH_MPLS_MC]),
            "eth_type=0x8847 or 0x8848",
        )?,
        // TTL copies are represented, not yet executed; their validity depends
        // on the header stack, which the executor checks.
        Action::CopyTtlOut | Action::CopyTtlIn | Action::SetQueue(_) => {}
        Action::SetWorkers(mask) => {
            // A mask naming no worker at all could never be honoured; bits
            // beyond the running worker count are only known at run time
            // and are ignored there (see `Action::SetWorkers`).
            if mask == 0 {
                return Err(PipelineError::BadArgument(
                    "offlow_workers mask must name at least one worker",
                ));
            }
        }
        Action::PushVlan(tpid) => {
            if tpid != 0x8100 && tpid != 0x88a8 {
                return Err(PipelineError::BadArgument(
                    "push_vlan ethertype must be 0x8100 or 0x88a8",
                ));
            }
            st.vlan_depth = st.vlan_depth.saturating_add(1);
            st.m.set_masked(Field::VlanVid, VID_PRESENT, VID_PRESENT);
        }
        Action::PopVlan => {
            need(st.vlan_depth > 0, "a VLAN tag")?;
            st.vlan_depth = st.vlan_depth.saturating_sub(1);
            if st.vlan_depth == 0 {
                // Whatever inner tag there may be is unknown.
                st.m.set_masked(Field::VlanVid, 0, 0);
                st.m.set_masked(Field::VlanPcp, 0, 0);
            }
        }
        Action::PushMpls(e) => {
            if e as u128 != ETH_MPLS && e as u128 != ETH_MPLS_MC {
                return Err(PipelineError::BadArgument(
                    "push_mpls ethertype must be 0x8847 or 0x8848",
                ));
            }
            st.m.set_exact(Field::EthType, e as u128);
        }
        Action::PopMpls(e) => {
            need(
                st.eth_is(&[ETH_MPLS, ETH_MPLS_MC]),
                "eth_type=0x8847 or 0x8848",
            )?;
            st.m.set_exact(Field::EthType, e as u128);
        }
        Action::PushPbb(e) => {
            // §7.2.5: "Ethertype used for the new PBB header ... must be
            // 0x88E7".
            if e as u128 != ETH_PBB {
                return Err(PipelineError::BadArgument(
                    "push_pbb ethertype must be 0x88e7",
                ));
            }
            // The frame's header becomes the customer header: its tags and
            // network fields move behind the I-TAG.
            st.m = Match::ANY;
            st.m.set_exact(Field::EthType, ETH_PBB);
            st.vlan_depth = 0;
        }
        Action::PopPbb => {
            need(st.eth_is(&[ETH_PBB]), "eth_type=0x88e7")?;
            // Whatever the customer frame is, it is unknown here.
            st.m = Match::ANY;
            st.vlan_depth = 0;
        }
        Action::Group(g) => {
            if !(cx.group_exists)(g) {
                return Err(PipelineError::Unsupported {
                    what: "group action naming a group that does not exist",
                    code: OfError::BadAction(BadActionCode::BadOutGroup),
                });
            }
        }
        Action::Meter(_) => {
            // Pipeline-internal (a lookup's rendering of the Meter
            // instruction): a controller's list never carries it.
            return Err(PipelineError::Unsupported {
                what: "meter as an action (it is an instruction in OpenFlow 1.3)",
                code: OfError::BadAction(BadActionCode::BadType),
            });
        }
        Action::Experimenter(_) => {
            return Err(PipelineError::Unsupported {
                what: "experimenter action",
                code: OfError::BadAction(BadActionCode::BadExperimenter),
            })
        }
    }
    Ok(())
}

/// Validate the instructions of a rule in `table_id` (of `n_tables`) whose
/// match is `m`, and normalise them into a [`Program`], in a switch
/// without groups or meters (a group action is `OFPBAC_BAD_OUT_GROUP`, a
/// Meter instruction `OFPMMFC_INVALID_METER`).
pub fn validate_instructions(
    table_id: u8,
    n_tables: u16,
    m: &Match,
    instructions: &[Instruction],
) -> Result<Program, PipelineError> {
    validate_instructions_with(table_id, n_tables, m, instructions, &|_| false, &|_| false)
}

/// Check a group bucket's action list (§6.5: as a flow-mod's actions,
/// apart from prerequisites, which no match establishes for a bucket; see
/// `Context::lenient`). `group_exists` answers for the group actions.
pub fn validate_bucket_actions(
    actions: &[Action],
    group_exists: &dyn Fn(u32) -> bool,
) -> Result<(), PipelineError> {
    let cx = Context {
        group_exists,
        lenient: true,
    };
    let mut st = State::new(&Match::ANY);
    for a in actions {
        check_action(a, &mut st, &cx)?;
    }
    Ok(())
}

/// [`validate_instructions`] in a switch whose groups `group_exists`
/// knows and whose meters `meter_exists` knows.
pub fn validate_instructions_with(
    table_id: u8,
    n_tables: u16,
    m: &Match,
    instructions: &[Instruction],
    group_exists: &dyn Fn(u32) -> bool,
    meter_exists: &dyn Fn(u32) -> bool,
) -> Result<Program, PipelineError> {
    let cx = Context {
        group_exists,
        lenient: false,
    };
    let mut seen = [false; 7];
    let mut prog = Program::default();
    let mut apply: &[Action] = &[];
    let mut write: &[Action] = &[];
    for ins in instructions {
        let k = ins.kind_index();
        if seen[k] {
            return Err(PipelineError::DuplicateInstruction(ins.name()));
        }
        seen[k] = true;
        match ins {
            Instruction::GotoTable(t) => {
                // §5.1: "Pipeline processing can only go forward and not
                // backward."
                if *t <= table_id {
                    return Err(PipelineError::GotoBackward {
                        from: table_id,
                        to: *t,
                    });
                }
                if u16::from(*t) >= n_tables {
                    return Err(PipelineError::GotoMissingTable(*t));
                }
                prog.goto = Some(*t);
            }
            Instruction::WriteMetadata { value, mask } => {
                prog.write_metadata = Some((value & mask, *mask));
            }
            Instruction::ApplyActions(a) => apply = a,
            Instruction::WriteActions(a) => write = a,
            Instruction::ClearActions => prog.clear = true,
            Instruction::Meter(id) => {
                // The meter must exist (the table holds ids 1..=OFPM_MAX
                // only). The spec names no code for a flow-mod naming an
                // absent meter; Open vSwitch 3.1 answers
                // OFPET_METER_MOD_FAILED / OFPMMFC_INVALID_METER (measured:
                // `add-flow in_port=1,actions=meter:5,output:2` on a bridge
                // without meter 5), for reserved ids too (`check_METER`).
                if !meter_exists(*id) {
                    return Err(PipelineError::Unsupported {
                        what: "meter instruction naming a meter that does not exist",
                        code: OfError::MeterModFailed(MeterModFailedCode::InvalidMeter),
                    });
                }
                prog.meter = Some(*id);
            }
            Instruction::Experimenter(_) => {
                return Err(PipelineError::Unsupported {
                    what: "experimenter instruction",
                    code: OfError::BadInstruction(BadInstructionCode::BadExperimenter),
                })
            }
        }
    }
    let mut st = State::new(m);
    for a in apply {
        check_action(a, &mut st, &cx)?;
    }
    // Write-Actions run later, from the action set, in §5.10 order: check
    // them in that order (only the surviving action of each type matters).
    let mut set = ActionSet::new();
    for a in write {
        set.write(*a);
    }
    let mut ordered = Vec::with_capacity(set.len());
    set.drain_ordered_into(&mut ordered);
    for a in &ordered {
        check_action(a, &mut st, &cx)?;
    }
    // Keep the instruction as written for faithful dumps; execution order
    // is applied at lookup time.
    prog.apply = apply.to_vec();
    prog.write = write.to_vec();
    Ok(prog)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp_match() -> Match {
        let mut m = Match::ANY;
        m.set_exact(Field::EthType, 0x0800)
            .set_exact(Field::IpProto, 6);
        m
    }

    #[test]
    fn pbb_actions() {
        let apply = |a: Vec<Action>| vec![Instruction::ApplyActions(a)];
        // push_pbb: only 0x88e7; afterwards the frame is PBB (pbb_isid
        // settable) and its old network fields are behind the I-TAG.
        let push = apply(vec![
            Action::PushPbb(0x88e7),
            Action::SetField(Field::PbbIsid, 5),
        ]);
        assert!(validate_instructions(0, 4, &tcp_match(), &push).is_ok());
        let bad = apply(vec![Action::PushPbb(0x8100)]);
        let e = validate_instructions(0, 4, &tcp_match(), &bad).unwrap_err();
        assert!(matches!(e, PipelineError::BadArgument(_)), "{e}");
        let hidden = apply(vec![
            Action::PushPbb(0x88e7),
            Action::SetField(Field::TcpDst, 1),
        ]);
        let e = validate_instructions(0, 4, &tcp_match(), &hidden).unwrap_err();
        assert!(matches!(e, PipelineError::MatchInconsistent { .. }), "{e}");
        // pop_pbb needs a PBB match; afterwards nothing is known.
        let pop = apply(vec![Action::PopPbb]);
        let e = validate_instructions(0, 4, &tcp_match(), &pop).unwrap_err();
        assert!(matches!(e, PipelineError::MatchInconsistent { .. }), "{e}");
        let mut pbb = Match::ANY;
        pbb.set_exact(Field::EthType, 0x88e7);
        assert!(validate_instructions(0, 4, &pbb, &pop).is_ok());
        let after = apply(vec![Action::PopPbb, Action::SetField(Field::PbbIsid, 1)]);
        assert!(validate_instructions(0, 4, &pbb, &after).is_err());
        // in_port, in_phy_port, metadata, ipv6_exthdr: OFPBAC_BAD_SET_TYPE
        // (see is_settable); eth_type, ip_proto written.
        for f in [
            Field::InPort,
            Field::InPhyPort,
            Field::Metadata,
            Field::Ipv6Exthdr,
        ] {
            let e = validate_instructions(0, 4, &tcp_match(), &apply(vec![Action::SetField(f, 0)]))
                .unwrap_err();
            assert_eq!(e, PipelineError::FieldNotSettable(f));
            assert_eq!(e.of_error().wire(), (2, 13));
        }
        for f in [Field::EthType, Field::IpProto] {
            let ok =
                validate_instructions(0, 4, &tcp_match(), &apply(vec![Action::SetField(f, 17)]));
            assert!(ok.is_ok(), "{f:?}: {ok:?}");
        }
        // mpls_bos needs an MPLS match (Table 12).
        let bos = apply(vec![Action::SetField(Field::MplsBos, 0)]);
        assert!(validate_instructions(0, 4, &tcp_match(), &bos).is_err());
        let mut mpls = Match::ANY;
        mpls.set_exact(Field::EthType, 0x8847);
        assert!(validate_instructions(0, 4, &mpls, &bos).is_ok());
    }

    #[test]
    fn set_field_prerequisites() {
        let set = |f, v| vec![Instruction::ApplyActions(vec![Action::SetField(f, v)])];
        assert!(validate_instructions(0, 4, &tcp_match(), &set(Field::TcpDst, 80)).is_ok());
        let e = validate_instructions(0, 4, &Match::ANY, &set(Field::TcpDst, 80)).unwrap_err();
        assert!(matches!(e, PipelineError::MatchInconsistent { .. }), "{e}");
        assert_eq!(e.of_error().wire(), (2, 10));
        // UDP port on a TCP match.
        let e = validate_instructions(0, 4, &tcp_match(), &set(Field::UdpDst, 80)).unwrap_err();
        assert!(matches!(e, PipelineError::MatchInconsistent { .. }));
        // Not settable.
        let e = validate_instructions(0, 4, &Match::ANY, &set(Field::Metadata, 1)).unwrap_err();
        assert_eq!(e, PipelineError::FieldNotSettable(Field::Metadata));
        assert_eq!(e.of_error().wire(), (2, 13));
        // Too wide for the field.
        let e =
            validate_instructions(0, 4, &tcp_match(), &set(Field::TcpDst, 0x1_0000)).unwrap_err();
        assert!(matches!(e, PipelineError::BadSetValue { .. }));
        assert_eq!(e.of_error().wire(), (2, 15));
    }

    #[test]
    fn vlan_set_needs_tag_or_push() {
        let e = validate_instructions(
            0,
            2,
            &Match::ANY,
            &[Instruction::ApplyActions(vec![Action::SetField(
                Field::VlanVid,
                VID_PRESENT | 5,
            )])],
        )
        .unwrap_err();
        assert!(matches!(e, PipelineError::MatchInconsistent { .. }));
        let ok = validate_instructions(
            0,
            2,
            &Match::ANY,
            &[Instruction::ApplyActions(vec![
                Action::PushVlan(0x8100),
                Action::SetField(Field::VlanVid, VID_PRESENT | 5),
            ])],
        );
        assert!(ok.is_ok());
        // Without OFPVID_PRESENT the value is invalid.
        let e = validate_instructions(
            0,
            2,
            &Match::ANY,
            &[Instruction::ApplyActions(vec![
                Action::PushVlan(0x8100),
                Action::SetField(Field::VlanVid, 5),
            ])],
        )
        .unwrap_err();
        assert!(matches!(e, PipelineError::BadSetValue { .. }));
        // Write-actions run push before set (§5.10), whatever the order written.
        let ok = validate_instructions(
            0,
            2,
            &Match::ANY,
            &[Instruction::WriteActions(vec![
                Action::SetField(Field::VlanVid, VID_PRESENT | 5),
                Action::PushVlan(0x8100),
            ])],
        );
        assert!(ok.is_ok());
        // Pop needs a tag.
        let e = validate_instructions(
            0,
            2,
            &Match::ANY,
            &[Instruction::ApplyActions(vec![Action::PopVlan])],
        )
        .unwrap_err();
        assert!(matches!(e, PipelineError::MatchInconsistent { .. }));
    }

    #[test]
    fn set_workers_mask() {
        let apply = |m| vec![Instruction::ApplyActions(vec![Action::SetWorkers(m)])];
        let e = validate_instructions(0, 4, &Match::ANY, &apply(0)).unwrap_err();
        assert!(matches!(e, PipelineError::BadArgument(_)), "{e}");
        assert_eq!(e.of_error().wire(), (2, 5));
        // Any non-zero mask is accepted, whatever the worker count.
        for m in [1, 0x2, u64::MAX] {
            let p = validate_instructions(0, 4, &Match::ANY, &apply(m)).unwrap();
            assert_eq!(p.apply, vec![Action::SetWorkers(m)]);
        }
        // In the action set it takes the qos step: before group and output,
        // a later write replacing an earlier one.
        let p = validate_instructions(
            0,
            4,
            &Match::ANY,
            &[Instruction::WriteActions(vec![
                Action::output(PortNo(2)),
                Action::SetWorkers(1),
                Action::SetWorkers(4),
            ])],
        )
        .unwrap();
        let mut set = ActionSet::new();
        for a in &p.write {
            set.write(*a);
        }
        let mut out = Vec::new();
        set.drain_ordered_into(&mut out);
        assert_eq!(out, vec![Action::SetWorkers(4), Action::output(PortNo(2))]);
    }

    #[test]
    fn match_prerequisites() {
        assert!(check_match_prerequisites(&tcp_match()).is_ok());
        let mut m = tcp_match();
        m.set_exact(Field::TcpDst, 80);
        assert!(check_match_prerequisites(&m).is_ok());
        let mut bad = Match::ANY;
        bad.set_exact(Field::TcpDst, 80);
        let e = check_match_prerequisites(&bad).unwrap_err();
        assert_eq!(e.of_error().wire(), (4, 9));
        let mut udp = Match::ANY;
        udp.set_exact(Field::EthType, 0x86dd)
            .set_exact(Field::IpProto, 17)
            .set_exact(Field::UdpSrc, 53);
        assert!(check_match_prerequisites(&udp).is_ok());
        let mut pcp = Match::ANY;
        pcp.set_exact(Field::VlanPcp, 3);
        assert!(check_match_prerequisites(&pcp).is_err());
        pcp.set_masked(Field::VlanVid, VID_PRESENT, VID_PRESENT);
        assert!(check_match_prerequisites(&pcp).is_ok());
        let mut v4 = Match::ANY;
        v4.set_exact(Field::Ipv4Dst, 1);
        assert!(check_match_prerequisites(&v4).is_err());
        v4.set_exact(Field::EthType, 0x0806);
        assert!(
            check_match_prerequisites(&v4).is_ok(),
            "shared with arp_tpa"
        );
        assert!(check_match_prerequisites(&Match::ANY).is_ok());
    }

    #[test]
    fn instruction_rules() {
        let e = validate_instructions(3, 8, &Match::ANY, &[Instruction::GotoTable(3)]).unwrap_err();
        assert_eq!(e, PipelineError::GotoBackward { from: 3, to: 3 });
        assert_eq!(e.of_error().wire(), (3, 2));
        let e = validate_instructions(3, 8, &Match::ANY, &[Instruction::GotoTable(8)]).unwrap_err();
        assert_eq!(e, PipelineError::GotoMissingTable(8));
        let e = validate_instructions(
            0,
            8,
            &Match::ANY,
            &[Instruction::ClearActions, Instruction::ClearActions],
        )
        .unwrap_err();
        assert_eq!(e.of_error().wire(), (3, 9));
        // OFPET_METER_MOD_FAILED / INVALID_METER for an absent meter and
        // for a reserved id (as Open vSwitch 3.1).
        for id in [1, 0, 0xffff_0001, 0xffff_fffd, 0xffff_ffff] {
            let e =
                validate_instructions(0, 8, &Match::ANY, &[Instruction::Meter(id)]).unwrap_err();
            assert_eq!(e.of_error().wire(), (12, 2), "meter {id:#x}");
        }
        let with_meter_1 = |ins: &[Instruction]| {
            validate_instructions_with(0, 8, &Match::ANY, ins, &|_| false, &|m| m == 1)
        };
        let p = with_meter_1(&[
            Instruction::ApplyActions(vec![Action::output(PortNo(2))]),
            Instruction::Meter(1),
        ])
        .unwrap();
        assert_eq!(p.meter, Some(1));
        assert_eq!(p.apply, vec![Action::output(PortNo(2))]);
        let e = with_meter_1(&[Instruction::Meter(1), Instruction::Meter(1)]).unwrap_err();
        assert_eq!(e.of_error().wire(), (3, 9), "one meter instruction");
        // The pipeline-internal action is refused in every action list.
        for ins in [
            Instruction::ApplyActions(vec![Action::Meter(1)]),
            Instruction::WriteActions(vec![Action::Meter(1)]),
        ] {
            let e = with_meter_1(&[ins]).unwrap_err();
            assert_eq!(e.of_error().wire(), (2, 0));
        }
        assert!(validate_bucket_actions(&[Action::Meter(1)], &|_| true).is_err());
        let e = validate_instructions(
            0,
            8,
            &Match::ANY,
            &[Instruction::WriteActions(vec![Action::Group(1)])],
        )
        .unwrap_err();
        assert_eq!(e.of_error().wire(), (2, 9));
        for port in [PortNo::ANY, PortNo::TABLE, PortNo::NORMAL, PortNo(0)] {
            let e = validate_instructions(
                0,
                8,
                &Match::ANY,
                &[Instruction::ApplyActions(vec![Action::output(port)])],
            )
            .unwrap_err();
            assert_eq!(e, PipelineError::BadOutPort(port));
        }
        let p = validate_instructions(
            1,
            8,
            &Match::ANY,
            &[
                Instruction::GotoTable(5),
                Instruction::WriteMetadata {
                    value: 0xff,
                    mask: 0x0f,
                },
            ],
        )
        .unwrap();
        assert_eq!(p.goto, Some(5));
        assert_eq!(p.write_metadata, Some((0x0f, 0x0f)));
    }
}
