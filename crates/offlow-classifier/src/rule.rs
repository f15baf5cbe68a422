//! Rules: a masked match, native port ranges, a priority and an id.

use offlow_flow::{present, Field, FlowKey, Match};

/// Rule priority: higher wins.
pub type Priority = u32;
/// Caller-chosen rule identifier, unique within a classifier.
pub type RuleId = u32;

/// An inclusive range of transport port values. The full range `0..=65535`
/// means "no constraint".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PortRange {
    /// Lowest accepted value.
    pub lo: u16,
    /// Highest accepted value.
    pub hi: u16,
}

impl PortRange {
    /// The unconstrained range.
    pub const ANY: PortRange = PortRange {
        lo: 0,
        hi: u16::MAX,
    };

    /// A single value.
    pub const fn exact(v: u16) -> PortRange {
        PortRange { lo: v, hi: v }
    }

    /// True for the unconstrained range.
    pub const fn is_any(&self) -> bool {
        self.lo == 0 && self.hi == u16::MAX
    }

    /// True when `v` lies in the range.
    #[inline]
    pub const fn contains(&self, v: u16) -> bool {
        self.lo <= v && v <= self.hi
    }
}

impl Default for PortRange {
    fn default() -> Self {
        PortRange::ANY
    }
}

/// A classification rule.
///
/// A key matches when `matcher` matches it and its `tp_src` / `tp_dst`
/// (the shared transport-port storage, see `offlow_flow::key`) lie in
/// `src_port` / `dst_port`. A constrained range requires the transport layer
/// to be present, exactly as a masked port match does.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Rule {
    /// Identifier, unique within a classifier.
    pub id: RuleId,
    /// Priority; higher wins, ties go to the smaller id.
    pub priority: Priority,
    /// The masked part of the match.
    pub matcher: Match,
    /// Native range on the source port (tp_src).
    pub src_port: PortRange,
    /// Native range on the destination port (tp_dst).
    pub dst_port: PortRange,
}

impl Rule {
    /// A rule with no port ranges.
    pub fn new(id: RuleId, priority: Priority, matcher: Match) -> Rule {
        Rule {
            id,
            priority,
            matcher,
            src_port: PortRange::ANY,
            dst_port: PortRange::ANY,
        }
    }

    /// Add native port ranges; a constrained range also requires the
    /// transport layer to be present in the key.
    pub fn with_ports(mut self, src: PortRange, dst: PortRange) -> Rule {
        self.src_port = src;
        self.dst_port = dst;
        if !src.is_any() || !dst.is_any() {
            let need = present::L3 | present::L4;
            self.matcher.mask.add_presence(need);
            self.matcher.value.add_presence(need);
        }
        self
    }

    /// Does `key` match this rule?
    #[inline]
    pub fn matches(&self, key: &FlowKey) -> bool {
        self.matcher.matches(key)
            && self.src_port.contains(key.get(Field::TcpSrc) as u16)
            && self.dst_port.contains(key.get(Field::TcpDst) as u16)
    }

    /// True when `self` beats `other` (higher priority, then smaller id).
    #[inline]
    pub fn beats(&self, other: &Rule) -> bool {
        (self.priority, std::cmp::Reverse(self.id)) > (other.priority, std::cmp::Reverse(other.id))
    }
}
