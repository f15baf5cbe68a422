//! What a flow-mod says ([`FlowMod`], [`FlowModCommand`]), which entries a
//! statistics request or a DELETE selects ([`FlowFilter`]), and what a
//! flow-mod did ([`FlowModEffect`]).

use std::sync::Arc;

use offlow_classifier::{Built, PortRange, Priority, RuleId};
use offlow_flow::Match;

use crate::action::Instruction;
use crate::entry::{FlowEntry, FlowMatch, FlowModFlags};
use crate::port::{PortNo, GROUP_ANY, TABLE_ALL};

/// Flow-mod commands (`ofp_flow_mod_command`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlowModCommand {
    /// Add (or replace an identical match+priority) entry.
    Add,
    /// Change the instructions of every entry the match covers.
    Modify,
    /// Change the instructions of the entry with this exact match+priority.
    ModifyStrict,
    /// Delete every entry the match covers.
    Delete,
    /// Delete the entry with this exact match+priority.
    DeleteStrict,
}

/// A flow-mod request (`ofp_flow_mod`), decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowMod {
    /// What to do.
    pub command: FlowModCommand,
    /// Table (`TABLE_ALL` accepted for deletes only).
    pub table_id: u8,
    /// Priority (strict commands and ADD).
    pub priority: Priority,
    /// The match.
    pub matcher: FlowMatch,
    /// Cookie (ADD: the new entry's; others: filter value).
    pub cookie: u64,
    /// Cookie filter mask for modify/delete (0 = no filter).
    pub cookie_mask: u64,
    /// Idle timeout (ADD).
    pub idle_timeout: u16,
    /// Hard timeout (ADD).
    pub hard_timeout: u16,
    /// Flags.
    pub flags: FlowModFlags,
    /// Delete filter: entries outputting to this port (`ANY` = no filter).
    pub out_port: PortNo,
    /// Delete filter: entries using this group (`GROUP_ANY` = no filter).
    pub out_group: u32,
    /// Instructions (ADD / MODIFY).
    pub instructions: Vec<Instruction>,
}

impl FlowMod {
    /// A request with every filter open and no instructions.
    pub fn new(command: FlowModCommand, table_id: u8, priority: Priority, matcher: Match) -> Self {
        FlowMod {
            command,
            table_id,
            priority,
            matcher: FlowMatch::new(matcher),
            cookie: 0,
            cookie_mask: 0,
            idle_timeout: 0,
            hard_timeout: 0,
            flags: FlowModFlags::default(),
            out_port: PortNo::ANY,
            out_group: GROUP_ANY,
            instructions: Vec::new(),
        }
    }

    /// An ADD.
    pub fn add(table_id: u8, priority: Priority, matcher: Match, ins: Vec<Instruction>) -> Self {
        let mut fm = FlowMod::new(FlowModCommand::Add, table_id, priority, matcher);
        fm.instructions = ins;
        fm
    }

    /// Set the cookie (and mask, for filters).
    pub fn with_cookie(mut self, cookie: u64, mask: u64) -> Self {
        self.cookie = cookie;
        self.cookie_mask = mask;
        self
    }

    /// Set the flags.
    pub fn with_flags(mut self, flags: u16) -> Self {
        self.flags = FlowModFlags(flags);
        self
    }

    /// Add native port ranges to the match.
    pub fn with_ports(mut self, src: PortRange, dst: PortRange) -> Self {
        self.matcher = FlowMatch::with_ports(self.matcher.matcher, src, dst);
        self
    }
}

/// Which entries a modify / delete / stats request selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowFilter {
    /// Table, or `TABLE_ALL`.
    pub table_id: u8,
    /// Strict: identical match and equal priority; else subset-or-equal match.
    pub strict: bool,
    /// Priority (strict only).
    pub priority: Priority,
    /// The match.
    pub matcher: FlowMatch,
    /// `(entry.cookie & mask) == (cookie & mask)`.
    pub cookie: u64,
    /// Cookie mask (0 = no filter).
    pub cookie_mask: u64,
    /// Output port filter (`ANY` = none).
    pub out_port: PortNo,
    /// Group filter (`GROUP_ANY` = none).
    pub out_group: u32,
}

impl FlowFilter {
    /// Every entry of every table.
    pub fn all() -> FlowFilter {
        FlowFilter {
            table_id: TABLE_ALL,
            strict: false,
            priority: 0,
            matcher: FlowMatch::ANY,
            cookie: 0,
            cookie_mask: 0,
            out_port: PortNo::ANY,
            out_group: GROUP_ANY,
        }
    }

    /// Every entry of one table.
    pub fn table(table_id: u8) -> FlowFilter {
        FlowFilter {
            table_id,
            ..FlowFilter::all()
        }
    }

    pub(super) fn selects(&self, e: &FlowEntry) -> bool {
        let m = if self.strict {
            e.priority == self.priority && e.matcher == self.matcher
        } else {
            e.matcher.is_subset_of(&self.matcher)
        };
        m && self.passes_filters(e)
    }

    /// The cookie, out_port and out_group filters (the match is checked
    /// elsewhere).
    pub(super) fn passes_filters(&self, e: &FlowEntry) -> bool {
        self.cookie & self.cookie_mask == e.cookie & self.cookie_mask
            && (self.out_port == PortNo::ANY || e.program.outputs_to(self.out_port))
            && (self.out_group == GROUP_ANY || e.program.uses_group(self.out_group))
    }
}

/// A resolved update; replay it on every copy with [`super::Pipeline::apply`].
#[derive(Debug, Clone)]
pub enum PipelineOp {
    /// Insert `entry` into its table, replacing the entry with the same id.
    Insert(Arc<FlowEntry>),
    /// Remove the entry with this id from this table.
    Remove {
        /// Table holding it.
        table_id: u8,
        /// Its id.
        id: RuleId,
    },
    /// Several ops, applied in order.
    Batch(Vec<PipelineOp>),
    /// Rebuild the lookup accelerators (FIB / RFC snapshot) of every table
    /// whose rules changed since its last compile. Deterministic, so each
    /// copy can replay it; it never changes an answer, only its speed.
    Compile,
    /// Install accelerators built by [`super::Pipeline::build_compiled`] on a copy
    /// equal to this one: what `Compile` does, with the building done once
    /// for both copies of a left-right pair.
    Install(Arc<[(u8, Built)]>),
    /// Change the group table or the port liveness it follows.
    Group(crate::group::GroupOp),
    /// Change the meter table.
    Meter(crate::meter::MeterOp),
}

impl PipelineOp {
    /// The table and rule a leaf op changes (a batch's first op's), for
    /// prefetch hints; `None` for ops that touch no single rule.
    pub(super) fn first_target(&self) -> Option<(u8, RuleId)> {
        match self {
            PipelineOp::Insert(e) => Some((e.table_id, e.id)),
            PipelineOp::Remove { table_id, id } => Some((*table_id, *id)),
            PipelineOp::Batch(ops) => ops.first()?.first_target(),
            PipelineOp::Compile
            | PipelineOp::Install(_)
            | PipelineOp::Group(_)
            | PipelineOp::Meter(_) => None,
        }
    }
}

/// What a flow-mod changed. The fast-path cache must invalidate everything
/// that depended on any id listed in `modified`, `removed` or `shadowed`
/// (or, with `shadowed_all`, on the ADD's table).
#[derive(Debug, Clone, Default)]
pub struct FlowModEffect {
    /// New entries.
    pub added: Vec<RuleId>,
    /// Entries whose instructions (and maybe counters, cookie, flags) changed;
    /// includes an ADD that replaced an identical match+priority.
    pub modified: Vec<RuleId>,
    /// Removed entries (for flow-removed messages: cookie, flags, counters).
    pub removed: Vec<Arc<FlowEntry>>,
    /// For an ADD: the entries of the same table whose keys may now match
    /// the new rule: those with priority <= the new rule's that overlap it,
    /// less any that an entry covering the new rule's match outranks
    /// strictly (no key the new rule matches ever matched them).
    pub shadowed: Vec<RuleId>,
    /// For an ADD: an entry listed in `shadowed` covers the new rule's
    /// match, so no key the new rule matches missed the table before.
    pub covered: bool,
    /// For an ADD overlapping more than [`SHADOW_LIMIT`] such entries:
    /// `shadowed` is left empty and every entry of the table counts as
    /// shadowed (a cache must drop every decision that went through it).
    pub shadowed_all: bool,
}

/// Most shadowed entries an ADD lists one by one (see
/// [`FlowModEffect::shadowed_all`]). Listing costs the writer a walk over
/// them; past a few dozen, reporting the whole table is cheaper, and costs
/// the readers little: they revalidate cached decisions against the new
/// rule's match key by key, whether the ADD listed its victims or not.
/// (Measured: `ovs-ofctl add-flows` of 100K mixed-shape flows took 122 s
/// with an unbounded list, 9.7 s at 256, 9.0 s at 32.)
pub const SHADOW_LIMIT: usize = 32;

/// How [`super::Pipeline::prepare_reporting`] reports the entries an ADD shadows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShadowReport {
    /// List them in [`FlowModEffect::shadowed`] (up to [`SHADOW_LIMIT`]).
    List,
    /// Do not look: report the whole table
    /// ([`FlowModEffect::shadowed_all`]), which is always correct and only
    /// less precise.
    WholeTable,
}

impl FlowModEffect {
    /// True when nothing changed.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty()
            && self.modified.is_empty()
            && self.removed.is_empty()
            && self.shadowed.is_empty()
            && !self.shadowed_all
    }
}
