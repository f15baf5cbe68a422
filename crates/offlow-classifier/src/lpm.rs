//! Longest-prefix match over IPv4: the binary-trie oracle, and
//! [`FibClassifier`], a [`Classify`] implementation for rule sets that are
//! really a routing table.
//!
//! What:
//! - [`BinaryTrie`] is the reference LPM structure: one address bit per level,
//!   nodes in an arena. It is obviously correct and is also the control-plane
//!   copy ("RIB") that [`Dir24`](crate::dir24::Dir24) keeps on the side so a
//!   delete can restore the next shorter covering prefix.
//! - [`FibClassifier`] serves rules of the shape "`eth_type=0x0800` plus an
//!   `ipv4_dst` prefix, nothing else" from a DIR-24-8 table.
//!
//! # When LPM order equals the classifier's priority order
//!
//! The [`Classify`] contract picks the matching rule with the highest
//! priority (ties: smaller id). Among rules of the accepted shape, every rule
//! matching an address covers that address, so the matching rules form a
//! chain of nested prefixes. LPM picks the longest; the classifier picks the
//! highest priority. They agree for every key exactly when, for every two
//! rules whose prefixes nest (`A` strictly covers `B`), `B.priority >
//! A.priority`, and no two rules have the same prefix (one prefix holds one
//! next hop). Disjoint prefixes never match the same key, so their priorities
//! do not matter. `priority = len * K + tiebreak` with `tiebreak < K` satisfies
//! this. [`FibClassifier::try_insert`] enforces the condition and refuses a
//! rule that would break it ([`FibRuleError`]); [`Classify::insert`] never
//! loses a rule: a refused rule goes to a small linear overflow list and every
//! lookup takes the better of the two answers, so the result always equals the
//! oracle's.
//!
//! Invariants: trie nodes with neither a next hop nor a child are pruned on
//! delete (except the root), so the trie's size is linear in its prefixes.
//!
//! Thread-safety: plain single-writer structures; lookups take `&self`.

use std::collections::HashMap;
use std::fmt;

use crate::dir24::{Dir24, FibError, MAX_NEXT_HOP, NO_ROUTE};
use crate::{Classify, Field, FlowKey, LinearClassifier, Match, Rule, RuleId};

/// Mask of the leading `len` bits of an IPv4 address (`len` ≤ 32).
#[inline]
pub fn prefix_mask(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len.min(32)))
    }
}

const NONE: u32 = 0; // Child index meaning "no child": the root (0) is nobody's child.

#[derive(Debug, Clone, Copy)]
struct Node {
    child: [u32; 2],
    /// Next hop stored at this node, or [`NO_ROUTE`].
    nh: u32,
}

impl Node {
    const EMPTY: Node = Node {
        child: [NONE, NONE],
        nh: NO_ROUTE,
    };
}

/// Bit `depth` (0 = most significant) of `addr`, as a child index.
#[inline]
fn bit(addr: u32, depth: u8) -> usize {
    ((addr >> (31 - u32::from(depth))) & 1) as usize
}

/// A binary trie of IPv4 prefixes mapping to next hops: the LPM oracle.
#[derive(Debug, Clone)]
pub struct BinaryTrie {
    nodes: Vec<Node>,
    free: Vec<u32>,
    len: usize,
}

impl Default for BinaryTrie {
    fn default() -> Self {
        Self::new()
    }
}

impl BinaryTrie {
    /// An empty trie.
    pub fn new() -> Self {
        BinaryTrie {
            nodes: vec![Node::EMPTY],
            free: Vec::new(),
            len: 0,
        }
    }

    /// Number of prefixes held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no prefix is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn alloc(&mut self) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.nodes[i as usize] = Node::EMPTY;
                i
            }
            None => {
                self.nodes.push(Node::EMPTY);
                // Node count is bounded by 33 × prefixes, far below 2^32.
                (self.nodes.len() - 1) as u32
            }
        }
    }

    /// Insert `addr/len → nh` (host bits of `addr` are ignored), returning the
    /// next hop it replaced.
    pub fn insert(&mut self, addr: u32, len: u8, nh: u32) -> Result<Option<u32>, FibError> {
        check(len, nh)?;
        let addr = addr & prefix_mask(len);
        let mut n = 0u32;
        for d in 0..len {
            let b = bit(addr, d);
            let c = self.nodes[n as usize].child[b];
            n = if c == NONE {
                let c = self.alloc();
                self.nodes[n as usize].child[b] = c;
                c
            } else {
                c
            };
        }
        let old = std::mem::replace(&mut self.nodes[n as usize].nh, nh);
        if old == NO_ROUTE {
            self.len += 1;
            Ok(None)
        } else {
            Ok(Some(old))
        }
    }

    /// Remove `addr/len`, returning its next hop; empty nodes are pruned.
    pub fn remove(&mut self, addr: u32, len: u8) -> Option<u32> {
        if len > 32 {
            return None;
        }
        let addr = addr & prefix_mask(len);
        let mut path = [0u32; 33];
        let mut n = 0u32;
        for d in 0..len {
            path[d as usize] = n;
            n = self.nodes[n as usize].child[bit(addr, d)];
            if n == NONE {
                return None;
            }
        }
        let old = std::mem::replace(&mut self.nodes[n as usize].nh, NO_ROUTE);
        if old == NO_ROUTE {
            return None;
        }
        self.len -= 1;
        // Prune upwards while the node carries nothing.
        let mut d = len;
        while d > 0 {
            let node = self.nodes[n as usize];
            if node.nh != NO_ROUTE || node.child != [NONE, NONE] {
                break;
            }
            d -= 1;
            let parent = path[d as usize];
            self.nodes[parent as usize].child[bit(addr, d)] = NONE;
            self.free.push(n);
            n = parent;
        }
        Some(old)
    }

    /// The next hop of the exact prefix `addr/len`, if held.
    pub fn get(&self, addr: u32, len: u8) -> Option<u32> {
        let n = self.find(addr, len).node?;
        let nh = self.nodes[n as usize].nh;
        (nh != NO_ROUTE).then_some(nh)
    }

    /// Longest-prefix match for `addr`.
    pub fn lookup(&self, addr: u32) -> Option<u32> {
        let mut n = 0u32;
        let mut best = self.nodes[0].nh;
        for d in 0..32 {
            n = self.nodes[n as usize].child[bit(addr, d)];
            if n == NONE {
                break;
            }
            let nh = self.nodes[n as usize].nh;
            if nh != NO_ROUTE {
                best = nh;
            }
        }
        (best != NO_ROUTE).then_some(best)
    }

    /// Every held prefix `(addr, len, nh)` covering `addr/len` (including
    /// itself), shortest first.
    pub fn covering(&self, addr: u32, len: u8) -> Vec<(u32, u8, u32)> {
        let len = len.min(32);
        let addr = addr & prefix_mask(len);
        let mut out = Vec::new();
        let mut n = 0u32;
        for d in 0..=len {
            let nh = self.nodes[n as usize].nh;
            if nh != NO_ROUTE {
                out.push((addr & prefix_mask(d), d, nh));
            }
            if d == len {
                break;
            }
            n = self.nodes[n as usize].child[bit(addr, d)];
            if n == NONE {
                break;
            }
        }
        out
    }

    /// Call `f(addr, len, nh)` for every held prefix strictly inside
    /// `addr/len` (more specific than it).
    pub fn for_each_inside(&self, addr: u32, len: u8, mut f: impl FnMut(u32, u8, u32)) {
        let len = len.min(32);
        let addr = addr & prefix_mask(len);
        let Some(n) = self.find(addr, len).node else {
            return;
        };
        let mut stack = Vec::new();
        for b in 0..2 {
            let c = self.nodes[n as usize].child[b];
            if c != NONE {
                stack.push((c, addr | ((b as u32) << (31 - u32::from(len))), len + 1));
            }
        }
        while let Some((n, a, d)) = stack.pop() {
            let node = self.nodes[n as usize];
            if node.nh != NO_ROUTE {
                f(a, d, node.nh);
            }
            for b in 0..2 {
                if node.child[b] != NONE {
                    stack.push((
                        node.child[b],
                        a | ((b as u32) << (31 - u32::from(d))),
                        d + 1,
                    ));
                }
            }
        }
    }

    /// Walk to `addr/len` (already masked): the node there, if any, and the
    /// next hop inherited from strictly shorter prefixes on the way.
    pub(crate) fn find(&self, addr: u32, len: u8) -> Found {
        let mut n = 0u32;
        let mut inherited = NO_ROUTE;
        for d in 0..len.min(32) {
            let nh = self.nodes[n as usize].nh;
            if nh != NO_ROUTE {
                inherited = nh;
            }
            n = self.nodes[n as usize].child[bit(addr, d)];
            if n == NONE {
                return Found {
                    node: None,
                    inherited,
                };
            }
        }
        Found {
            node: Some(n),
            inherited,
        }
    }

    /// Children of node `n` (`NONE`-free: `None` for absent).
    #[inline]
    pub(crate) fn children(&self, n: u32) -> [Option<u32>; 2] {
        let c = self.nodes[n as usize].child;
        [
            (c[0] != NONE).then_some(c[0]),
            (c[1] != NONE).then_some(c[1]),
        ]
    }

    /// Next hop stored at node `n`, or [`NO_ROUTE`].
    #[inline]
    pub(crate) fn nh_at(&self, n: u32) -> u32 {
        self.nodes[n as usize].nh
    }
}

/// Result of [`BinaryTrie::find`].
pub(crate) struct Found {
    pub(crate) node: Option<u32>,
    pub(crate) inherited: u32,
}

/// Validate a prefix length and next hop.
pub(crate) fn check(len: u8, nh: u32) -> Result<(), FibError> {
    if len > 32 {
        return Err(FibError::BadLength(len));
    }
    if nh > MAX_NEXT_HOP {
        return Err(FibError::BadNextHop(nh));
    }
    Ok(())
}

/// Why [`FibClassifier::try_insert`] refused a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FibRuleError {
    /// The rule is not "`eth_type=0x0800` + `ipv4_dst` prefix, nothing else".
    Shape,
    /// Another rule already holds this exact prefix.
    SamePrefix {
        /// The rule holding the prefix.
        other: RuleId,
    },
    /// A covering (shorter) prefix has a priority ≥ this rule's, or a more
    /// specific one has a priority ≤ this rule's: LPM would answer
    /// differently from priority order.
    PriorityOrder {
        /// The conflicting rule.
        other: RuleId,
    },
    /// The FIB itself refused (next-hop space exhausted).
    Fib(FibError),
}

impl fmt::Display for FibRuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FibRuleError::Shape => write!(f, "rule is not eth_type=0x0800 + ipv4_dst prefix"),
            FibRuleError::SamePrefix { other } => write!(f, "prefix already held by rule {other}"),
            FibRuleError::PriorityOrder { other } => {
                write!(f, "priority order conflicts with nested rule {other}")
            }
            FibRuleError::Fib(e) => write!(f, "fib: {e}"),
        }
    }
}

impl std::error::Error for FibRuleError {}

/// A [`Classify`] implementation backed by a DIR-24-8 table, for rule sets
/// where every rule is `eth_type=0x0800` plus an `ipv4_dst` prefix. See the
/// module documentation for the exact condition under which it is used.
#[derive(Debug, Clone)]
pub struct FibClassifier {
    fib: Dir24,
    /// Next hop → rule; next hops are dense slot numbers.
    slots: Vec<Option<Rule>>,
    free_slots: Vec<u32>,
    /// Rule id → its next hop (rules served by the FIB).
    by_id: HashMap<RuleId, u32>,
    /// Rules refused by the FIB; lookups merge their answer.
    overflow: LinearClassifier,
}

impl Default for FibClassifier {
    fn default() -> Self {
        Self::new()
    }
}

/// The canonical match of an accepted rule.
fn canonical(addr: u32, len: u8) -> Match {
    let mut m = Match::ANY;
    m.set_exact(Field::EthType, 0x0800);
    m.set_prefix(Field::Ipv4Dst, u128::from(addr), u32::from(len));
    m
}

impl FibClassifier {
    /// An empty classifier.
    pub fn new() -> Self {
        FibClassifier {
            fib: Dir24::new(),
            slots: Vec::new(),
            free_slots: Vec::new(),
            by_id: HashMap::new(),
            overflow: LinearClassifier::new(),
        }
    }

    /// The `(addr, len)` of `rule` when it has the accepted shape.
    pub fn prefix_of(rule: &Rule) -> Option<(u32, u8)> {
        if !rule.src_port.is_any() || !rule.dst_port.is_any() {
            return None;
        }
        let (v, m) = rule.matcher.field(Field::Ipv4Dst);
        // The field is 32 bits wide, so these casts are lossless.
        let (v, m) = (v as u32, m as u32);
        let len = m.leading_ones() as u8;
        if m != prefix_mask(len) {
            return None;
        }
        (rule.matcher == canonical(v, len)).then_some((v, len))
    }

    /// Shape check: is `rule` "`eth_type=0x0800` + `ipv4_dst` prefix, nothing
    /// else"? (Priority order is checked against the other rules on insert.)
    pub fn accepts(rule: &Rule) -> bool {
        Self::prefix_of(rule).is_some()
    }

    /// Every rule held, FIB-served and overflow alike (no particular order).
    pub fn rules(&self) -> impl Iterator<Item = &Rule> + '_ {
        self.slots
            .iter()
            .flatten()
            .chain(self.overflow.rules().iter())
    }

    /// Number of rules that were refused by the FIB and are served by the
    /// linear overflow list.
    pub fn overflow_len(&self) -> usize {
        self.overflow.len()
    }

    fn rule_at(&self, nh: u32) -> &Rule {
        // Invariant: every next hop in the FIB is a live slot.
        self.slots[nh as usize]
            .as_ref()
            .expect("fib next hop names a live slot")
    }

    /// Insert `rule` into the FIB, or refuse it (nothing changes then). A
    /// rule with the same id is replaced first; on refusal it stays removed.
    pub fn try_insert(&mut self, rule: Rule) -> Result<Option<Rule>, FibRuleError> {
        let old = self.remove(rule.id);
        let (addr, len) = Self::prefix_of(&rule).ok_or(FibRuleError::Shape)?;
        let rib = self.fib.rib();
        for (_, l, nh) in rib.covering(addr, len) {
            let other = self.rule_at(nh);
            if l == len {
                return Err(FibRuleError::SamePrefix { other: other.id });
            }
            if other.priority >= rule.priority {
                return Err(FibRuleError::PriorityOrder { other: other.id });
            }
        }
        let mut conflict = None;
        rib.for_each_inside(addr, len, |_, _, nh| {
            let other = self.rule_at(nh);
            if conflict.is_none() && other.priority <= rule.priority {
                conflict = Some(other.id);
            }
        });
        if let Some(other) = conflict {
            return Err(FibRuleError::PriorityOrder { other });
        }
        let nh = match self.free_slots.pop() {
            Some(s) => s,
            None => {
                let s = u32::try_from(self.slots.len())
                    .ok()
                    .filter(|&s| s <= MAX_NEXT_HOP)
                    .ok_or(FibRuleError::Fib(FibError::BadNextHop(u32::MAX)))?;
                self.slots.push(None);
                s
            }
        };
        if let Err(e) = self.fib.insert(addr, len, nh) {
            self.free_slots.push(nh);
            return Err(FibRuleError::Fib(e));
        }
        self.by_id.insert(rule.id, nh);
        self.slots[nh as usize] = Some(rule);
        Ok(old)
    }
}

impl Classify for FibClassifier {
    fn insert(&mut self, rule: Rule) {
        if let Err(_refused) = self.try_insert(rule.clone()) {
            // Correctness never depends on the FIB accepting: the overflow
            // answer is merged on every lookup.
            self.overflow.insert(rule);
        }
    }

    fn remove(&mut self, id: RuleId) -> Option<Rule> {
        if let Some(nh) = self.by_id.remove(&id) {
            let rule = self.slots[nh as usize].take();
            if let Some((addr, len)) = rule.as_ref().and_then(Self::prefix_of) {
                self.fib.remove(addr, len);
            }
            self.free_slots.push(nh);
            return rule;
        }
        self.overflow.remove(id)
    }

    fn lookup(&self, key: &FlowKey) -> Option<RuleId> {
        // The field is 32 bits wide: lossless.
        let addr = key.get(Field::Ipv4Dst) as u32;
        let mut best: Option<&Rule> = None;
        if let Some(nh) = self.fib.lookup(addr) {
            let r = self.rule_at(nh);
            if r.matches(key) {
                best = Some(r);
            } else if let Some(d) = self.fib.rib().get(0, 0) {
                // Every accepted rule of length > 0 has the same non-address
                // constraints (eth_type and L3 presence); the /0 rule lacks
                // the L3 requirement, so it alone may still match.
                let r0 = self.rule_at(d);
                if r0.matches(key) {
                    best = Some(r0);
                }
            }
        }
        if !self.overflow.is_empty() {
            if let Some(o) = self
                .overflow
                .lookup(key)
                .and_then(|id| self.overflow.get(id))
            {
                if best.is_none_or(|b| o.beats(b)) {
                    best = Some(o);
                }
            }
        }
        best.map(|r| r.id)
    }

    fn len(&self) -> usize {
        self.by_id.len() + self.overflow.len()
    }

    fn get(&self, id: RuleId) -> Option<&Rule> {
        match self.by_id.get(&id) {
            Some(&nh) => self.slots[nh as usize].as_ref(),
            None => self.overflow.get(id),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trie_basic_and_prune() {
        let mut t = BinaryTrie::new();
        assert_eq!(t.insert(0x0a00_0000, 8, 1), Ok(None));
        assert_eq!(t.insert(0x0a01_0000, 16, 2), Ok(None));
        assert_eq!(t.lookup(0x0a01_0203), Some(2));
        assert_eq!(t.lookup(0x0a02_0203), Some(1));
        assert_eq!(t.lookup(0x0b00_0000), None);
        assert_eq!(t.remove(0x0a01_0000, 16), Some(2));
        assert_eq!(t.lookup(0x0a01_0203), Some(1));
        assert_eq!(
            t.nodes.len() - t.free.len(),
            9,
            "root + 8 levels after pruning"
        );
        assert_eq!(t.insert(0, 0, 7), Ok(None));
        assert_eq!(t.lookup(0xffff_ffff), Some(7));
        assert_eq!(t.insert(1, 33, 7), Err(FibError::BadLength(33)));
        assert_eq!(t.len(), 2);
    }
}
