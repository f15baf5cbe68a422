//! Actions, instructions and the action set.
//!
//! [`Action`] mirrors the OpenFlow 1.3 action types (§5.12); [`Instruction`]
//! the instruction types (§5.9). [`ActionSet`] is the per-packet action set
//! of §5.10: at most one action per type (set-field actions are typed by
//! their field), a later write replacing an earlier one, executed at the end
//! of the pipeline in the order the spec fixes, not the order written.

use offlow_flow::Field;

use crate::port::PortNo;

/// An OpenFlow 1.3 action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Send the packet out of `port`; `max_len` bytes go to the controller
    /// when `port` is CONTROLLER.
    Output {
        /// Destination.
        port: PortNo,
        /// Bytes sent to the controller (`OFPCML_NO_BUFFER` = whole packet).
        max_len: u16,
    },
    /// Overwrite a header field (`OFPAT_SET_FIELD`). The value is
    /// right-aligned in the field's width.
    SetField(Field, u128),
    /// Set the IP TTL / hop limit.
    SetNwTtl(u8),
    /// Decrement the IP TTL / hop limit. Whether it expires is decided by the
    /// executor on the frame (the key carries no TTL): an expired packet is
    /// dropped and reported with packet-in reason `OFPR_INVALID_TTL`.
    DecNwTtl,
    /// Copy TTL outwards (next-to-outermost to outermost).
    CopyTtlOut,
    /// Copy TTL inwards (outermost to next-to-outermost).
    CopyTtlIn,
    /// Push a VLAN tag with this TPID (0x8100 or 0x88a8).
    PushVlan(u16),
    /// Pop the outer VLAN tag.
    PopVlan,
    /// Push an MPLS label stack entry; the ethertype is 0x8847 or 0x8848.
    PushMpls(u16),
    /// Pop the outer MPLS shim; the argument is the new ethertype.
    PopMpls(u16),
    /// Push a PBB service instance header (IEEE 802.1ah) with this
    /// ethertype (0x88e7): a new outer Ethernet header (B-DA, B-SA copied
    /// from the customer's addresses) and an I-TAG (all fields 0; set the
    /// I-SID with set-field `pbb_isid`) in front of the frame, whose own
    /// header becomes the customer header C-DA, C-SA.
    PushPbb(u16),
    /// Pop the outer PBB service instance header: the backbone Ethernet
    /// header (with any B-tags) and the I-TAG.
    PopPbb,
    /// Set the MPLS TTL.
    SetMplsTtl(u8),
    /// Decrement the MPLS TTL.
    DecMplsTtl,
    /// Set the output queue.
    SetQueue(u32),
    /// offlow vendor action (OFiS "forward to a subset of CPUs"): only the
    /// packet workers whose bit is set in the mask (bit i = worker i) may
    /// process the packet. A worker outside the set hands the unmodified
    /// frame to one inside it before executing anything. The frame is not
    /// changed; a decision holding several keeps the last. Validation
    /// refuses mask 0; bits beyond the running worker count are ignored, and
    /// a mask naming no running worker means "process locally".
    SetWorkers(u64),
    /// Process through a group (§5.6.1).
    Group(u32),
    /// An experimenter action (not supported: refused at validation).
    Experimenter(u32),
    /// Pipeline-internal, never written by a controller: meter the packet
    /// through meter `id` (§5.7). A lookup puts it where a flow's Meter
    /// instruction runs (§5.9: first in its table's instruction set, before
    /// that table's Apply-Actions); the executor drops the packet, remarks
    /// its DSCP or lets it go on as the meter says. Validation refuses it
    /// in an action list (`OFPBAC_BAD_TYPE`), so no program, bucket or
    /// packet-out holds it.
    Meter(u32),
}

impl Action {
    /// Output to `port` with the whole packet for the controller.
    pub const fn output(port: PortNo) -> Action {
        Action::Output {
            port,
            max_len: crate::port::CONTROLLER_NO_BUFFER,
        }
    }

    /// The action's position in the action set's execution order (§5.10).
    /// Distinct types have distinct slots; set-field slots are per field.
    pub fn set_slot(&self) -> u8 {
        // §5.10: copy TTL inwards, pop, push-MPLS, push-PBB, push-VLAN, copy
        // TTL outwards, decrement TTL, set, qos, group, output.
        match self {
            Action::CopyTtlIn => 0,
            // Pop the outer header first: a VLAN tag sits outside the PBB
            // I-TAG, which sits outside the customer frame's MPLS labels.
            Action::PopVlan => 1,
            Action::PopPbb => 2,
            Action::PopMpls(_) => 3,
            Action::PushMpls(_) => 4,
            Action::PushPbb(_) => 5,
            Action::PushVlan(_) => 6,
            Action::CopyTtlOut => 7,
            Action::DecMplsTtl => 8,
            Action::DecNwTtl => 9,
            Action::SetMplsTtl(_) => 10,
            Action::SetNwTtl(_) => 11,
            // 40 basic fields: slots 12..=51.
            Action::SetField(f, _) => 12 + f.oxm(),
            // Steering belongs with the "qos" step, next to set_queue (the
            // order inside that step is unspecified and has no effect).
            Action::SetWorkers(_) => 52,
            Action::SetQueue(_) => 53,
            Action::Group(_) => 54,
            Action::Output { .. } => 55,
            Action::Experimenter(_) => 56,
            // Never in an action set (validation refuses it in action
            // lists); a slot of its own keeps the mapping total.
            Action::Meter(_) => 57,
        }
    }

    /// Short name for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Action::Output { .. } => "output",
            Action::SetField(..) => "set_field",
            Action::SetNwTtl(_) => "set_nw_ttl",
            Action::DecNwTtl => "dec_nw_ttl",
            Action::CopyTtlOut => "copy_ttl_out",
            Action::CopyTtlIn => "copy_ttl_in",
            Action::PushVlan(_) => "push_vlan",
            Action::PopVlan => "pop_vlan",
            Action::PushMpls(_) => "push_mpls",
            Action::PopMpls(_) => "pop_mpls",
            Action::PushPbb(_) => "push_pbb",
            Action::PopPbb => "pop_pbb",
            Action::SetMplsTtl(_) => "set_mpls_ttl",
            Action::DecMplsTtl => "dec_mpls_ttl",
            Action::SetQueue(_) => "set_queue",
            Action::SetWorkers(_) => "offlow_workers",
            Action::Group(_) => "group",
            Action::Experimenter(_) => "experimenter",
            Action::Meter(_) => "meter",
        }
    }
}

/// An OpenFlow 1.3 instruction.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Instruction {
    /// Continue in a later table.
    GotoTable(u8),
    /// `metadata = (metadata & !mask) | (value & mask)`.
    WriteMetadata {
        /// New bits.
        value: u64,
        /// Which bits to write.
        mask: u64,
    },
    /// Execute these actions now, in order.
    ApplyActions(Vec<Action>),
    /// Merge these actions into the action set.
    WriteActions(Vec<Action>),
    /// Empty the action set.
    ClearActions,
    /// Meter the packet (§5.7) through an existing meter.
    Meter(u32),
    /// Experimenter instruction (not supported: refused at validation).
    Experimenter(u32),
}

impl Instruction {
    /// Short name for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Instruction::GotoTable(_) => "goto_table",
            Instruction::WriteMetadata { .. } => "write_metadata",
            Instruction::ApplyActions(_) => "apply_actions",
            Instruction::WriteActions(_) => "write_actions",
            Instruction::ClearActions => "clear_actions",
            Instruction::Meter(_) => "meter",
            Instruction::Experimenter(_) => "experimenter",
        }
    }

    /// Index used to detect duplicates (one per instruction type).
    pub(crate) fn kind_index(&self) -> usize {
        match self {
            Instruction::GotoTable(_) => 0,
            Instruction::WriteMetadata { .. } => 1,
            Instruction::ApplyActions(_) => 2,
            Instruction::WriteActions(_) => 3,
            Instruction::ClearActions => 4,
            Instruction::Meter(_) => 5,
            Instruction::Experimenter(_) => 6,
        }
    }
}

/// A validated rule's instructions, normalised for execution in the order
/// §5.9 prescribes: meter, apply-actions, clear-actions, write-actions,
/// write-metadata, goto-table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Program {
    /// The Meter instruction's meter id (a meter that existed when the
    /// rule was validated; a METER DELETE removes the rule with it).
    pub meter: Option<u32>,
    /// Apply-Actions, in order (empty when absent).
    pub apply: Vec<Action>,
    /// Clear-Actions present.
    pub clear: bool,
    /// Write-Actions, in the order given (a later one of a type wins).
    pub write: Vec<Action>,
    /// Write-Metadata `(value, mask)`, value pre-masked.
    pub write_metadata: Option<(u64, u64)>,
    /// Goto-Table target.
    pub goto: Option<u8>,
}

impl Program {
    /// Does any action (apply or write) output to `port`?
    pub fn outputs_to(&self, port: PortNo) -> bool {
        self.apply
            .iter()
            .chain(self.write.iter())
            .any(|a| matches!(a, Action::Output { port: p, .. } if *p == port))
    }

    /// Does any action (apply or write) reference group `group`?
    pub fn uses_group(&self, group: u32) -> bool {
        self.apply
            .iter()
            .chain(self.write.iter())
            .any(|a| matches!(a, Action::Group(g) if *g == group))
    }
}

/// The action set (§5.10): at most one action per [`Action::set_slot`].
///
/// Kept as a short vector of `(slot, action)` rather than a 57-slot array so
/// that starting a lookup costs a `clear()`, not a 2 KiB initialisation; a
/// real action set rarely holds more than a handful of actions.
#[derive(Debug, Clone, Default)]
pub struct ActionSet {
    entries: Vec<(u8, Action)>,
}

impl ActionSet {
    /// An empty action set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Empty the set (Clear-Actions), keeping capacity.
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// Merge one action: replace the action of the same type, else add it.
    pub fn write(&mut self, action: Action) {
        let slot = action.set_slot();
        match self.entries.iter_mut().find(|(s, _)| *s == slot) {
            Some(e) => e.1 = action,
            None => self.entries.push((slot, action)),
        }
    }

    /// Number of actions held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Append the set's actions to `out` in execution order (§5.10). An
    /// output action is dropped when a group action is present ("output: if
    /// no group action is specified, forward the packet on the port specified
    /// by the output action").
    pub fn drain_ordered_into(&mut self, out: &mut Vec<Action>) {
        // Slots are unique, so an unstable sort is deterministic and avoids
        // the stable sort's scratch allocation.
        self.entries.sort_unstable_by_key(|(s, _)| *s);
        let has_group = self
            .entries
            .iter()
            .any(|(_, a)| matches!(a, Action::Group(_)));
        for (_, a) in self.entries.drain(..) {
            if has_group && matches!(a, Action::Output { .. }) {
                continue;
            }
            out.push(a);
        }
    }
}
