//! The seam between the codec and the pipeline: wire actions, instructions
//! and flow-mods ([`offlow_openflow`]) to and from the pipeline's own types.
//!
//! The codec knows nothing of the pipeline; every conversion lives here, on
//! the pipeline's side, and every user (the switch adapter, the daemon's
//! flow files and trace, benches, tests) goes through it.
//!
//! Wire → pipeline ([`ToPipeline`]) fails with the OpenFlow error the switch
//! reports for what the pipeline does not model: an unknown flow-mod command is
//! `OFPFMFC_BAD_COMMAND`; experimenter payload bytes are dropped (the
//! pipeline refuses experimenter actions and instructions in validation).
//! Pipeline → wire (`From`) is total; an experimenter action comes back with
//! empty data.
//!
//! Thread-safety: pure functions over plain data.

use offlow_openflow::message::flow_mod_command as C;
use offlow_openflow::{
    Action as WAction, Bucket as WBucket, FlowMod as WFlowMod, FlowModFailedCode,
    GroupMod as WGroupMod, GroupModFailedCode, Instruction as WInstr, OfError,
};

use crate::action::{Action, Instruction};
use crate::entry::FlowModFlags;
use crate::group::{Bucket, GroupMod, GroupModCommand};
use crate::pipeline::{FlowMod, FlowModCommand};
use crate::port::PortNo;

/// A wire value that converts to the pipeline's model, or fails with the
/// OpenFlow error the switch reports for it.
pub trait ToPipeline {
    /// The pipeline's type.
    type Output;
    /// Convert, or say which OpenFlow error the switch answers with.
    fn to_pipeline(&self) -> Result<Self::Output, OfError>;
}

impl ToPipeline for WAction {
    type Output = Action;

    /// The pipeline's action, or the error the switch reports for an action
    /// the pipeline does not model.
    fn to_pipeline(&self) -> Result<Action, OfError> {
        Ok(match *self {
            WAction::Output { port, max_len } => Action::Output {
                port: PortNo(port),
                max_len,
            },
            WAction::CopyTtlOut => Action::CopyTtlOut,
            WAction::CopyTtlIn => Action::CopyTtlIn,
            WAction::SetMplsTtl(t) => Action::SetMplsTtl(t),
            WAction::DecMplsTtl => Action::DecMplsTtl,
            WAction::PushVlan(e) => Action::PushVlan(e),
            WAction::PopVlan => Action::PopVlan,
            WAction::PushMpls(e) => Action::PushMpls(e),
            WAction::PopMpls(e) => Action::PopMpls(e),
            WAction::SetQueue(q) => Action::SetQueue(q),
            WAction::Group(g) => Action::Group(g),
            WAction::SetNwTtl(t) => Action::SetNwTtl(t),
            WAction::DecNwTtl => Action::DecNwTtl,
            WAction::SetField(f, v) => Action::SetField(f, v),
            WAction::PushPbb(e) => Action::PushPbb(e),
            WAction::PopPbb => Action::PopPbb,
            WAction::SetWorkers(mask) => Action::SetWorkers(mask),
            WAction::Experimenter { experimenter, .. } => Action::Experimenter(experimenter),
        })
    }
}

impl From<&Action> for WAction {
    fn from(a: &Action) -> Self {
        match *a {
            Action::Output { port, max_len } => WAction::Output {
                port: port.0,
                max_len,
            },
            Action::SetField(f, v) => WAction::SetField(f, v),
            Action::SetNwTtl(t) => WAction::SetNwTtl(t),
            Action::DecNwTtl => WAction::DecNwTtl,
            Action::CopyTtlOut => WAction::CopyTtlOut,
            Action::CopyTtlIn => WAction::CopyTtlIn,
            Action::PushVlan(e) => WAction::PushVlan(e),
            Action::PopVlan => WAction::PopVlan,
            Action::PushMpls(e) => WAction::PushMpls(e),
            Action::PopMpls(e) => WAction::PopMpls(e),
            Action::PushPbb(e) => WAction::PushPbb(e),
            Action::PopPbb => WAction::PopPbb,
            Action::SetMplsTtl(t) => WAction::SetMplsTtl(t),
            Action::DecMplsTtl => WAction::DecMplsTtl,
            Action::SetQueue(q) => WAction::SetQueue(q),
            Action::Group(g) => WAction::Group(g),
            Action::SetWorkers(m) => WAction::SetWorkers(m),
            Action::Experimenter(e) => WAction::Experimenter {
                experimenter: e,
                data: Vec::new(),
            },
            // OpenFlow 1.3 has no meter action (1.5's OFPAT_METER came
            // later): the pipeline-internal action becomes an offlow
            // experimenter action whose subtype offlow never decodes, so it
            // prints as an experimenter action and, sent back, is refused.
            Action::Meter(id) => {
                let mut data = Vec::with_capacity(8);
                data.extend_from_slice(&OFLW_SUBTYPE_METER_INTERNAL.to_be_bytes());
                data.extend_from_slice(&[0, 0]);
                data.extend_from_slice(&id.to_be_bytes());
                WAction::Experimenter {
                    experimenter: offlow_openflow::OFLW_EXPERIMENTER,
                    data,
                }
            }
        }
    }
}

/// The offlow experimenter subtype [`Action::Meter`] is written with when
/// converted to a wire action (never decoded: the codec knows only
/// `OFLW_SUBTYPE_WORKERS`).
pub const OFLW_SUBTYPE_METER_INTERNAL: u16 = 0xfffe;

impl ToPipeline for WInstr {
    type Output = Instruction;

    /// The pipeline's instruction; fails with the first action's error when
    /// an action list holds one the pipeline does not model.
    fn to_pipeline(&self) -> Result<Instruction, OfError> {
        let list = |a: &[WAction]| {
            a.iter()
                .map(WAction::to_pipeline)
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(match self {
            WInstr::GotoTable(t) => Instruction::GotoTable(*t),
            WInstr::WriteMetadata { value, mask } => Instruction::WriteMetadata {
                value: *value,
                mask: *mask,
            },
            WInstr::WriteActions(a) => Instruction::WriteActions(list(a)?),
            WInstr::ApplyActions(a) => Instruction::ApplyActions(list(a)?),
            WInstr::ClearActions => Instruction::ClearActions,
            WInstr::Meter(m) => Instruction::Meter(*m),
            WInstr::Experimenter { experimenter, .. } => Instruction::Experimenter(*experimenter),
        })
    }
}

impl From<&Instruction> for WInstr {
    fn from(i: &Instruction) -> Self {
        let list = |a: &[Action]| a.iter().map(WAction::from).collect();
        match i {
            Instruction::GotoTable(t) => WInstr::GotoTable(*t),
            Instruction::WriteMetadata { value, mask } => WInstr::WriteMetadata {
                value: *value,
                mask: *mask,
            },
            Instruction::ApplyActions(a) => WInstr::ApplyActions(list(a)),
            Instruction::WriteActions(a) => WInstr::WriteActions(list(a)),
            Instruction::ClearActions => WInstr::ClearActions,
            Instruction::Meter(m) => WInstr::Meter(*m),
            Instruction::Experimenter(e) => WInstr::Experimenter {
                experimenter: *e,
                data: Vec::new(),
            },
        }
    }
}

impl ToPipeline for WFlowMod {
    type Output = FlowMod;

    /// The pipeline's flow-mod: an unknown command is
    /// `OFPFMFC_BAD_COMMAND`; an action or instruction the pipeline does not
    /// model fails with its error. `buffer_id` is not carried (the caller
    /// handles buffered packets).
    fn to_pipeline(&self) -> Result<FlowMod, OfError> {
        let command = match self.command {
            C::ADD => FlowModCommand::Add,
            C::MODIFY => FlowModCommand::Modify,
            C::MODIFY_STRICT => FlowModCommand::ModifyStrict,
            C::DELETE => FlowModCommand::Delete,
            C::DELETE_STRICT => FlowModCommand::DeleteStrict,
            _ => return Err(OfError::FlowModFailed(FlowModFailedCode::BadCommand)),
        };
        let mut fm = FlowMod::new(
            command,
            self.table_id,
            u32::from(self.priority),
            self.matcher.to_match(),
        );
        fm.cookie = self.cookie;
        fm.cookie_mask = self.cookie_mask;
        fm.idle_timeout = self.idle_timeout;
        fm.hard_timeout = self.hard_timeout;
        fm.flags = FlowModFlags(self.flags);
        fm.out_port = PortNo(self.out_port);
        fm.out_group = self.out_group;
        fm.instructions = self
            .instructions
            .iter()
            .map(WInstr::to_pipeline)
            .collect::<Result<_, _>>()?;
        Ok(fm)
    }
}

impl ToPipeline for WGroupMod {
    type Output = GroupMod;

    /// The pipeline's group-mod: an unknown command is
    /// `OFPGMFC_BAD_COMMAND`; a bucket action the pipeline does not model
    /// fails with its error. The type is checked by the group table.
    fn to_pipeline(&self) -> Result<GroupMod, OfError> {
        let command = GroupModCommand::from_wire(self.command)
            .ok_or(OfError::GroupModFailed(GroupModFailedCode::BadCommand))?;
        let buckets = self
            .buckets
            .iter()
            .map(|b| {
                Ok(Bucket {
                    weight: b.weight,
                    watch_port: b.watch_port,
                    watch_group: b.watch_group,
                    actions: b
                        .actions
                        .iter()
                        .map(WAction::to_pipeline)
                        .collect::<Result<_, OfError>>()?,
                })
            })
            .collect::<Result<_, OfError>>()?;
        Ok(GroupMod {
            command,
            group_type: self.group_type,
            group_id: self.group_id,
            buckets,
        })
    }
}

impl From<&Bucket> for WBucket {
    fn from(b: &Bucket) -> WBucket {
        WBucket {
            weight: b.weight,
            watch_port: b.watch_port,
            watch_group: b.watch_group,
            actions: b.actions.iter().map(WAction::from).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use offlow_flow::{Field, Match};

    #[test]
    fn workers_both_ways() {
        let a = WAction::SetWorkers(u64::MAX);
        assert_eq!(a.to_pipeline().unwrap(), Action::SetWorkers(u64::MAX));
        assert_eq!(
            WAction::from(&Action::SetWorkers(5)),
            WAction::SetWorkers(5)
        );
    }

    /// The pipeline-internal meter action has a wire form (for printing)
    /// that comes back as an experimenter action, which validation
    /// refuses: it cannot be smuggled in from the wire.
    #[test]
    fn internal_meter_action_is_an_undecodable_experimenter() {
        let w = WAction::from(&Action::Meter(0x0102_0304));
        assert_eq!(
            w,
            WAction::Experimenter {
                experimenter: offlow_openflow::OFLW_EXPERIMENTER,
                data: vec![0xff, 0xfe, 0, 0, 1, 2, 3, 4],
            }
        );
        assert_eq!(
            w.to_pipeline().unwrap(),
            Action::Experimenter(offlow_openflow::OFLW_EXPERIMENTER)
        );
    }

    /// Every pipeline action (but the internal meter action) and
    /// instruction survives pipeline → wire → pipeline unchanged.
    #[test]
    fn round_trip_from_pipeline() {
        let actions = vec![
            Action::Output {
                port: PortNo::CONTROLLER,
                max_len: 128,
            },
            Action::SetField(Field::TcpDst, 80),
            Action::SetNwTtl(9),
            Action::DecNwTtl,
            Action::CopyTtlOut,
            Action::CopyTtlIn,
            Action::PushVlan(0x8100),
            Action::PopVlan,
            Action::PushMpls(0x8847),
            Action::PopMpls(0x0800),
            Action::PushPbb(0x88e7),
            Action::PopPbb,
            Action::SetMplsTtl(3),
            Action::DecMplsTtl,
            Action::SetQueue(4),
            Action::Group(5),
            Action::SetWorkers(6),
            Action::Experimenter(7),
        ];
        for a in &actions {
            assert_eq!(WAction::from(a).to_pipeline().unwrap(), *a);
        }
        let instrs = vec![
            Instruction::GotoTable(3),
            Instruction::WriteMetadata {
                value: 1,
                mask: 0xff,
            },
            Instruction::ApplyActions(actions.clone()),
            Instruction::WriteActions(actions),
            Instruction::ClearActions,
            Instruction::Meter(2),
            Instruction::Experimenter(8),
        ];
        for i in &instrs {
            assert_eq!(WInstr::from(i).to_pipeline().unwrap(), *i);
        }
    }

    #[test]
    fn flow_mod_fields_and_bad_command() {
        let mut m = Match::ANY;
        m.set_exact(Field::InPort, 3);
        let mut w = WFlowMod::add(
            2,
            7,
            &m,
            vec![WInstr::ApplyActions(vec![WAction::Output {
                port: 1,
                max_len: 0,
            }])],
        );
        w.cookie = 9;
        w.cookie_mask = 10;
        w.idle_timeout = 11;
        w.hard_timeout = 12;
        w.flags = FlowModFlags::SEND_FLOW_REM;
        let p = w.to_pipeline().unwrap();
        assert_eq!(p.command, FlowModCommand::Add);
        assert_eq!((p.table_id, p.priority), (2, 7));
        assert_eq!(p.matcher.matcher, m);
        assert_eq!((p.cookie, p.cookie_mask), (9, 10));
        assert_eq!((p.idle_timeout, p.hard_timeout), (11, 12));
        assert_eq!(p.flags, FlowModFlags(FlowModFlags::SEND_FLOW_REM));
        assert_eq!(p.out_port, PortNo::ANY);
        assert_eq!(
            p.instructions,
            vec![Instruction::ApplyActions(vec![Action::Output {
                port: PortNo(1),
                max_len: 0,
            }])]
        );
        w.command = 9;
        assert_eq!(
            w.to_pipeline().map(|_| ()),
            Err(OfError::FlowModFailed(FlowModFailedCode::BadCommand))
        );
    }
}
