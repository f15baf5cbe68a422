//! What a lookup returns: [`Resolution`] (the actions, how the walk ended,
//! the path of rules, the packet-in origins) and its parts.

use offlow_classifier::RuleId;

use crate::action::{Action, ActionSet};
use crate::entry::FlowEntry;
use crate::port::PortNo;

/// One step of a packet's walk: the rule it matched in a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PathStep {
    /// The table.
    pub table_id: u8,
    /// The rule matched there.
    pub rule: RuleId,
}

/// How the pipeline ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Outcome {
    /// The action list sends the packet somewhere (some output or group).
    Forward,
    /// The pipeline ended with no output: the packet is dropped.
    #[default]
    Drop,
    /// No rule matched in `table_id` and it has no table-miss entry: the
    /// packet is dropped (§5.4, the OpenFlow 1.3 default). The action set is
    /// discarded; apply-actions of earlier tables (already in `actions`)
    /// still happened.
    Miss {
        /// The table that missed.
        table_id: u8,
    },
    /// The pipeline ended on the table-miss entry of `table_id` and the
    /// actions output to CONTROLLER: the executor sends those packet-ins with
    /// reason `OFPR_NO_MATCH` (§7.4.1) rather than `OFPR_ACTION`.
    ControllerMiss {
        /// The table whose table-miss entry sent it.
        table_id: u8,
    },
}

/// The flow entry behind one output to CONTROLLER: what its packet-in
/// reports (OpenFlow 1.3.5 §7.4.1: the table looked up, the entry's cookie,
/// and reason `OFPR_NO_MATCH` when the entry is a table-miss entry,
/// `OFPR_ACTION` otherwise).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PacketInOrigin {
    /// The table of the entry.
    pub table_id: u8,
    /// The entry's cookie.
    pub cookie: u64,
    /// The entry is its table's table-miss entry.
    pub table_miss: bool,
}

impl PacketInOrigin {
    /// No flow entry: a packet-out's output to CONTROLLER, or an action
    /// list executed without its resolution. §7.4.1: the cookie is -1 when
    /// it "cannot be associated with a particular flow"; table 0xff is
    /// no table (as `OFPTT_ALL`).
    pub const UNKNOWN: PacketInOrigin = PacketInOrigin {
        table_id: 0xff,
        cookie: u64::MAX,
        table_miss: false,
    };

    fn of(e: &FlowEntry) -> PacketInOrigin {
        PacketInOrigin {
            table_id: e.table_id,
            cookie: e.cookie,
            table_miss: e.is_table_miss(),
        }
    }
}

/// The result of a lookup. Reuse one per worker with
/// [`super::Pipeline::lookup_into`]: its buffers keep their capacity.
#[derive(Debug, Clone, Default)]
pub struct Resolution {
    /// Actions to execute on the frame, in order: every Apply-Actions list as
    /// it occurred, then the action set in §5.10 order.
    pub actions: Vec<Action>,
    /// How the pipeline ended.
    pub outcome: Outcome,
    /// The rules the packet passed, table by table.
    pub path: Vec<PathStep>,
    /// One per output to CONTROLLER in `actions`, in the same order: the
    /// entry whose instruction put it there.
    pub origins: Vec<PacketInOrigin>,
    /// Scratch action set, kept for its capacity.
    pub(super) set: ActionSet,
}

/// An output to CONTROLLER (which becomes a packet-in).
fn is_to_controller(a: &Action) -> bool {
    matches!(a, Action::Output { port, .. } if *port == PortNo::CONTROLLER)
}

impl Resolution {
    /// Empty the lists for a new walk.
    #[inline(always)]
    pub(super) fn start(&mut self) {
        self.actions.clear();
        self.path.clear();
        self.origins.clear();
        self.set.clear();
    }

    /// One table's step of a walk: `e` matched in `table_id`; run its
    /// instructions but Goto-Table and Write-Metadata, which the walker
    /// handles (`on_key` sees each Apply-Action, for a walker that tracks
    /// the key).
    #[inline(always)]
    pub(super) fn step(
        &mut self,
        table_id: u8,
        e: &FlowEntry,
        set_origin: &mut Option<PacketInOrigin>,
        mut on_key: impl FnMut(&Action),
    ) {
        self.path.push(PathStep {
            table_id,
            rule: e.id,
        });
        let p = &e.program;
        // §5.9: the Meter instruction runs first in the instruction set;
        // the executor meters there, before this table's Apply-Actions.
        if let Some(m) = p.meter {
            self.actions.push(Action::Meter(m));
        }
        for a in &p.apply {
            on_key(a);
            self.actions.push(*a);
            if is_to_controller(a) {
                self.origins.push(PacketInOrigin::of(e));
            }
        }
        if p.clear {
            self.set.clear();
            *set_origin = None;
        }
        for a in &p.write {
            self.set.write(*a);
            if let Action::Output { .. } = a {
                // The set holds one output: this one replaces any other.
                *set_origin = is_to_controller(a).then(|| PacketInOrigin::of(e));
            }
        }
    }

    /// End a walk whose last step, `last` in `table_id`, had no
    /// Goto-Table: append the action set in §5.10 order and set the outcome.
    #[inline(always)]
    pub(super) fn finish(
        &mut self,
        last: &FlowEntry,
        table_id: u8,
        set_origin: Option<PacketInOrigin>,
    ) {
        let applied = self.actions.len();
        self.set.drain_ordered_into(&mut self.actions);
        // The set contributes at most its one output (§5.10).
        if self.actions[applied..].iter().any(is_to_controller) {
            self.origins
                .push(set_origin.unwrap_or_else(|| PacketInOrigin::of(last)));
        }
        let sends = |a: &Action| matches!(a, Action::Output { .. } | Action::Group(_));
        self.outcome = if last.is_table_miss() && self.actions.iter().any(is_to_controller) {
            Outcome::ControllerMiss { table_id }
        } else if self.actions.iter().any(sends) {
            Outcome::Forward
        } else {
            Outcome::Drop
        };
    }

    /// The table that missed, if the outcome is a miss.
    pub fn miss_table(&self) -> Option<u8> {
        match self.outcome {
            Outcome::Miss { table_id } => Some(table_id),
            _ => None,
        }
    }
}
