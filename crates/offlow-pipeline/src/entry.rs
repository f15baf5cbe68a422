//! Flow entries: the rule as installed (match, priority, cookie, flags,
//! timeouts, instructions) plus its counters.
//!
//! An entry is immutable once built and shared behind an `Arc`, so the two
//! copies of a left-right pair hold the *same* entry and the same counters:
//! a packet credited through either copy lands in one place. Counters are
//! relaxed atomics: each is an independent monotonic sum, nothing orders
//! against them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use offlow_classifier::{PortRange, Priority, Rule, RuleId};
use offlow_flow::{Field, Match};

use crate::action::{Instruction, Program};

/// `ofp_flow_mod_flags` (§7.3.4.1; the bits are the codec's
/// [`offlow_openflow::message::flow_mod_flags`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FlowModFlags(pub u16);

impl FlowModFlags {
    /// Send a flow-removed message when the entry is removed.
    pub const SEND_FLOW_REM: u16 = offlow_openflow::message::flow_mod_flags::SEND_FLOW_REM;
    /// Refuse an ADD overlapping an entry of equal priority.
    pub const CHECK_OVERLAP: u16 = offlow_openflow::message::flow_mod_flags::CHECK_OVERLAP;
    /// Reset the counters of a replaced / modified entry.
    pub const RESET_COUNTS: u16 = offlow_openflow::message::flow_mod_flags::RESET_COUNTS;
    /// Do not count packets.
    pub const NO_PKT_COUNTS: u16 = offlow_openflow::message::flow_mod_flags::NO_PKT_COUNTS;
    /// Do not count bytes.
    pub const NO_BYT_COUNTS: u16 = offlow_openflow::message::flow_mod_flags::NO_BYT_COUNTS;

    /// True when every bit of `flag` is set.
    pub const fn has(self, flag: u16) -> bool {
        self.0 & flag == flag
    }
}

/// Per-entry packet and byte counters.
#[derive(Debug, Default)]
pub struct FlowCounters {
    packets: AtomicU64,
    bytes: AtomicU64,
}

impl FlowCounters {
    /// Add `packets` and `bytes`.
    #[inline]
    pub fn add(&self, packets: u64, bytes: u64) {
        self.packets.fetch_add(packets, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// `(packets, bytes)` as of now.
    pub fn get(&self) -> (u64, u64) {
        (
            self.packets.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        )
    }
}

/// Per-table counters (`ofp_table_stats`).
#[derive(Debug, Default)]
pub struct TableCounters {
    lookups: AtomicU64,
    matched: AtomicU64,
}

impl TableCounters {
    /// Count `packets` looked up, of which `matched` hit a rule.
    #[inline]
    pub fn add(&self, packets: u64, matched: u64) {
        self.lookups.fetch_add(packets, Ordering::Relaxed);
        if matched != 0 {
            self.matched.fetch_add(matched, Ordering::Relaxed);
        }
    }

    /// `(lookups, matched)`.
    pub fn get(&self) -> (u64, u64) {
        (
            self.lookups.load(Ordering::Relaxed),
            self.matched.load(Ordering::Relaxed),
        )
    }
}

/// The match part of a rule: a masked match plus native transport-port
/// ranges (ClassBench-style rules; OpenFlow-created rules leave them `ANY`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowMatch {
    /// The masked match.
    pub matcher: Match,
    /// Range on tp_src.
    pub src_port: PortRange,
    /// Range on tp_dst.
    pub dst_port: PortRange,
}

impl FlowMatch {
    /// Match everything.
    pub const ANY: FlowMatch = FlowMatch {
        matcher: Match::ANY,
        src_port: PortRange::ANY,
        dst_port: PortRange::ANY,
    };

    /// A plain masked match.
    pub fn new(matcher: Match) -> FlowMatch {
        FlowMatch {
            matcher,
            src_port: PortRange::ANY,
            dst_port: PortRange::ANY,
        }
    }

    /// A match with native port ranges (adds the transport presence
    /// requirement exactly as [`Rule::with_ports`] does).
    pub fn with_ports(matcher: Match, src_port: PortRange, dst_port: PortRange) -> FlowMatch {
        let r = Rule::new(0, 0, matcher).with_ports(src_port, dst_port);
        FlowMatch {
            matcher: r.matcher,
            src_port,
            dst_port,
        }
    }

    /// True for the all-wildcard match.
    pub fn is_any(&self) -> bool {
        *self == FlowMatch::ANY
    }

    /// The classifier rule for this match.
    pub fn to_rule(&self, id: RuleId, priority: Priority) -> Rule {
        Rule {
            id,
            priority,
            matcher: self.matcher,
            src_port: self.src_port,
            dst_port: self.dst_port,
        }
    }

    /// The match with the transport-port bits removed from value and mask.
    fn without_ports(&self) -> Match {
        let mut m = self.matcher;
        m.set_masked(Field::TcpSrc, 0, 0);
        m.set_masked(Field::TcpDst, 0, 0);
        m
    }

    /// `(value, mask, range)` of one port dimension.
    fn port_dim(&self, dst: bool) -> PortDim {
        let (f, r) = if dst {
            (Field::TcpDst, self.dst_port)
        } else {
            (Field::TcpSrc, self.src_port)
        };
        let (v, m) = self.matcher.field(f);
        PortDim {
            value: v as u16,
            mask: m as u16,
            range: r,
        }
    }

    /// Is every key matching `self` also matched by `other`? (The
    /// "non-strict" relation of §6.4, extended to port ranges.)
    pub fn is_subset_of(&self, other: &FlowMatch) -> bool {
        self.without_ports().is_subset_of(&other.without_ports())
            && self.port_dim(false).subset_of(&other.port_dim(false))
            && self.port_dim(true).subset_of(&other.port_dim(true))
    }

    /// Could one key match both?
    pub fn overlaps(&self, other: &FlowMatch) -> bool {
        self.without_ports().overlaps(&other.without_ports())
            && self.port_dim(false).overlaps(&other.port_dim(false))
            && self.port_dim(true).overlaps(&other.port_dim(true))
    }
}

/// The set `{v : v & mask == value, v in range}` of one port dimension.
#[derive(Debug, Clone, Copy)]
struct PortDim {
    value: u16,
    mask: u16,
    range: PortRange,
}

impl PortDim {
    fn contains(&self, v: u16) -> bool {
        v & self.mask == self.value && self.range.contains(v)
    }

    fn subset_of(&self, o: &PortDim) -> bool {
        if o.mask == 0 && o.range.is_any() {
            return true;
        }
        if self.range.is_any() && o.range.is_any() {
            return o.mask & !self.mask == 0 && (self.value ^ o.value) & o.mask == 0;
        }
        if self.range.lo > self.range.hi {
            return true;
        }
        // A set between two bounds lies in a range when the bounds do:
        // a plain range, or a masked value (between the value and the value
        // with every free bit set). An ADD's shadow walk asks this of every
        // ACL rule it overlaps, so neither may cost a scan.
        if o.mask == 0 && (self.mask == 0 || self.range.is_any()) {
            let (lo, hi) = if self.mask == 0 {
                (self.range.lo, self.range.hi)
            } else {
                let lo = self.value & self.mask;
                (lo, lo | !self.mask)
            };
            return o.range.lo <= lo && hi <= o.range.hi;
        }
        // Mixed masks and ranges: at most 65536 candidates, only for native
        // range rules filtered by a masked port (rare, control path only).
        (self.range.lo..=self.range.hi).all(|v| !self.contains(v) || o.contains(v))
    }

    fn overlaps(&self, o: &PortDim) -> bool {
        let lo = self.range.lo.max(o.range.lo);
        let hi = self.range.hi.min(o.range.hi);
        if lo > hi {
            return false;
        }
        if self.range.is_any() && o.range.is_any() {
            return (self.value ^ o.value) & self.mask & o.mask == 0;
        }
        if self.mask == 0 && o.mask == 0 {
            return true;
        }
        (lo..=hi).any(|v| self.contains(v) && o.contains(v))
    }
}

/// An installed flow entry.
#[derive(Debug)]
pub struct FlowEntry {
    /// Pipeline-wide unique id (also the classifier rule id).
    pub id: RuleId,
    /// Table holding the entry.
    pub table_id: u8,
    /// Priority (OpenFlow's u16 widened; native rules may use more).
    pub priority: Priority,
    /// What the entry matches.
    pub matcher: FlowMatch,
    /// Opaque controller cookie.
    pub cookie: u64,
    /// Flags given at ADD (the OVERLAP/RESET bits are request-only but kept).
    pub flags: FlowModFlags,
    /// Idle timeout in seconds (0 = none): the entry is removed once no
    /// packet has been counted for this long (§5.5); see [`crate::expiry`].
    pub idle_timeout: u16,
    /// Hard timeout in seconds (0 = none): the entry is removed this long
    /// after `installed_at_ns` (§5.5); see [`crate::expiry`].
    pub hard_timeout: u16,
    /// Caller's clock (nanoseconds) when the entry was added; for durations
    /// and the hard timeout. A MODIFY keeps it (§6.4); an ADD replacing an
    /// identical entry sets it anew.
    pub installed_at_ns: u64,
    /// The instructions as given.
    pub instructions: Vec<Instruction>,
    /// The validated, normalised instructions.
    pub program: Program,
    /// Packet and byte counters (shared between versions of the entry).
    pub counters: Arc<FlowCounters>,
}

impl FlowEntry {
    /// A table-miss entry: priority 0 and all fields wildcarded (§5.4).
    pub fn is_table_miss(&self) -> bool {
        self.priority == 0 && self.matcher.is_any()
    }

    /// True when the entry has an idle or a hard timeout (it can expire).
    pub fn has_timeout(&self) -> bool {
        self.idle_timeout != 0 || self.hard_timeout != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn arb_dim() -> impl Strategy<Value = PortDim> {
        // Small values so that sets of different shapes often nest.
        let range = prop_oneof![
            Just(PortRange::ANY),
            (0u16..300, 0u16..300).prop_map(|(a, b)| PortRange {
                lo: a.min(b),
                hi: a.max(b)
            }),
            (0u16..300).prop_map(|a| PortRange {
                lo: a,
                hi: u16::MAX
            }),
        ];
        let mask = prop_oneof![
            Just(0u16),
            Just(u16::MAX),
            Just(0xff00u16),
            Just(0xfff0u16),
            any::<u16>()
        ];
        (0u16..300, mask, range).prop_map(|(value, mask, range)| PortDim {
            value: value & mask,
            mask,
            range,
        })
    }

    proptest! {
        /// The shortcuts of `subset_of` against the definition: every
        /// value in the first set is in the second.
        #[test]
        fn port_subset_agrees_with_every_value(a in arb_dim(), b in arb_dim()) {
            let naive = (0..=u16::MAX).all(|v| !a.contains(v) || b.contains(v));
            prop_assert_eq!(a.subset_of(&b), naive, "{:?} in {:?}", a, b);
        }
    }
}
