//! An RFC snapshot that keeps serving while its rules change.
//!
//! What: [`RfcSnapshot`] is an [`RfcSet`] plus what it takes to recognise
//! its rules again; [`Snapshot`] is one classifier's view of it: which
//! compiled rules were removed since the build, which id each still-compiled
//! rule has now, and a small [`TupleMerge`] of the rules inserted since and
//! not recognised. A lookup asks the tables, skips removed rules through the
//! kept candidate lists ([`RfcSet::rank_where`]), and takes the better of
//! that and the inserted rules' winner. Before this, any change dropped the
//! snapshot and every lookup went to TupleMerge (3-13x slower on the WUSTL
//! sets) until the owner compiled again, which a table that keeps changing
//! never lets it do.
//!
//! A snapshot that kept its candidate lists can be the owner's only
//! structure ([`RfcSnapshot::self_sufficient`]): it answers `get`, `len`
//! and `rules` itself, and the few keys outside the tables' domain (IPv4
//! without L3) by trying the compiled rules that do not require L3.
//!
//! Invariants:
//! - the live rules are exactly: compiled ranks not marked dead, under
//!   their current id in `ids`, plus the rules of `added`. The owner's
//!   complete structure, if it keeps one beside the snapshot, holds the
//!   same set;
//! - a rank is revived (an identical rule inserted again, maybe under a new
//!   id) only if, among live compiled rules of the same priority, ids still
//!   rise with rank: rank order then still is the crate-wide (priority
//!   desc, id asc) order on live rules, so the first live candidate is
//!   their winner;
//! - `rank_of` maps every live compiled rule's current id to its rank; it
//!   may also hold ids of dead ranks (to recognise them when they come
//!   back), but never maps an id to a rank that now holds another id.
//!
//! Thread-safety: `RfcSnapshot` is immutable and shared (`Arc`); a
//! `Snapshot` is owned by one classifier (single writer, `&self` lookups,
//! `Send + Sync`).

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use offlow_flow::present;

use offlow_sync::{IdHasher, IdMap};

use crate::{Classify, FlowKey, RfcRank, RfcSet, Rule, RuleId, TupleMerge};

/// How many equal-priority neighbours a revival looks past (dead ones) to
/// find the live rule its id must be ordered against; past this the rule
/// is treated as new instead.
const ORDER_SCAN: usize = 16;

/// An overlay of inserted rules larger than this (or than an eighth of the
/// compiled rules, if more) makes the owner drop the snapshot: each lookup
/// then pays for a TupleMerge of its own size anyway.
const ADDED_MIN: usize = 64;

/// At most this many compiled rules may match keys without L3 (IPv4
/// frames whose header did not parse) for the snapshot to serve without a
/// complete structure beside it: such keys are outside the tables' domain
/// and these rules are tried one by one.
const NO_L3_MAX: usize = 32;

/// A compiled RFC set, its rules by rank, and their ranks by content.
#[derive(Debug)]
pub struct RfcSnapshot {
    rfc: RfcSet,
    /// The compiled rules, by rank.
    rules: Box<[Rule]>,
    /// Rank of each compiled rule by [`content_hash`] (the lowest rank when
    /// several share one; a match is confirmed against `rules`, so a
    /// collision only costs a rule that is not recognised). The id hasher:
    /// the controller chooses the rules, and a flood of colliding ones would
    /// only slow its own updates (see [`offlow_sync::idmap`]).
    by_content: IdMap<u64, u32>,
    /// Ranks of the compiled rules that do not require L3, ascending: the
    /// only ones a key without L3 can match.
    no_l3: Box<[u32]>,
}

/// A hash of everything in a rule but its id.
fn content_hash(r: &Rule) -> u64 {
    let mut h = IdHasher::default();
    (r.priority, &r.matcher, r.src_port, r.dst_port).hash(&mut h);
    h.finish()
}

/// Equal but for the id.
fn same_content(a: &Rule, b: &Rule) -> bool {
    a.priority == b.priority
        && a.src_port == b.src_port
        && a.dst_port == b.dst_port
        && a.matcher == b.matcher
}

impl RfcSnapshot {
    /// Index `rfc`, built from exactly `rules`.
    pub fn new(rfc: RfcSet, rules: &[Rule]) -> RfcSnapshot {
        let by_id: IdMap<RuleId, &Rule> = rules.iter().map(|r| (r.id, r)).collect();
        let by_rank: Box<[Rule]> = rfc
            .ids()
            .iter()
            .filter_map(|id| by_id.get(id).map(|&r| r.clone()))
            .collect();
        debug_assert_eq!(by_rank.len(), rfc.len(), "rules are the compiled ones");
        let mut by_content = IdMap::with_capacity_and_hasher(by_rank.len(), Default::default());
        // In rank order, so the first of a shared content keeps its entry.
        for (rank, r) in by_rank.iter().enumerate() {
            // Ranks are below 2^32: an RfcSet holds far fewer rules.
            by_content.entry(content_hash(r)).or_insert(rank as u32);
        }
        let no_l3 = (0u32..)
            .zip(by_rank.iter())
            .filter(|(_, r)| r.matcher.mask.presence() & present::L3 == 0)
            .map(|(rank, _)| rank)
            .collect();
        RfcSnapshot {
            rfc,
            rules: by_rank,
            by_content,
            no_l3,
        }
    }

    /// Can a [`Snapshot`] of this answer every key alone, with no complete
    /// structure beside it? It can when every part kept its candidate lists
    /// (a removed winner is skipped without asking anyone else) and few
    /// rules match keys outside the tables' domain (tried one by one).
    pub fn self_sufficient(&self) -> bool {
        self.rfc.lists_candidates() && self.no_l3.len() <= NO_L3_MAX
    }

    /// The compiled set.
    pub fn rfc(&self) -> &RfcSet {
        &self.rfc
    }

    /// The compiled rule of `rank`.
    fn rule(&self, rank: u32) -> Option<&Rule> {
        self.rules.get(rank as usize)
    }
}

/// What changed since a snapshot was built, for diagnostics and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OverlayStats {
    /// Compiled rules removed (and not inserted again).
    pub dead: usize,
    /// Rules inserted since the build and served beside the tables.
    pub added: usize,
    /// Removed compiled rules recognised when inserted again under a new id
    /// (under their old id they are simply live again).
    pub revived: u64,
}

/// One classifier's view of an [`RfcSnapshot`]; see the module docs.
#[derive(Debug, Clone)]
pub struct Snapshot {
    base: Arc<RfcSnapshot>,
    /// Current id of each rank (meaningful while the rank is live).
    ids: Box<[RuleId]>,
    /// Bit set by rank: removed since the build.
    dead: Box<[u64]>,
    dead_count: usize,
    /// Current id -> rank, for live ranks.
    rank_of: IdMap<RuleId, u32>,
    /// Rules inserted since the build and not recognised (boxed: a
    /// TupleMerge is large and rarely needed; `any_added` says whether to
    /// look, without a pointer chase).
    added: Box<TupleMerge>,
    any_added: bool,
    revived: u64,
}

impl Snapshot {
    /// A view with nothing changed yet: the owner holds exactly the rules
    /// `base` was built from.
    pub fn new(base: Arc<RfcSnapshot>) -> Snapshot {
        let ids: Box<[RuleId]> = base.rfc.ids().into();
        let rank_of = ids
            .iter()
            .enumerate()
            .map(|(rank, &id)| (id, rank as u32))
            .collect();
        Snapshot {
            dead: vec![0u64; ids.len().div_ceil(64)].into_boxed_slice(),
            dead_count: 0,
            ids,
            rank_of,
            added: Box::default(),
            any_added: false,
            revived: 0,
            base,
        }
    }

    /// The shared part.
    pub fn base(&self) -> &Arc<RfcSnapshot> {
        &self.base
    }

    /// True when the live rules are exactly the compiled ones (some maybe
    /// under new ids, which costs lookups nothing): a compile would not
    /// serve them faster.
    pub fn is_clean(&self) -> bool {
        self.dead_count == 0 && !self.any_added
    }

    /// What changed since the build.
    pub fn stats(&self) -> OverlayStats {
        OverlayStats {
            dead: self.dead_count,
            added: self.added.len(),
            revived: self.revived,
        }
    }

    #[inline]
    fn is_dead(&self, rank: u32) -> bool {
        self.dead_count != 0
            && self
                .dead
                .get(rank as usize / 64)
                .is_some_and(|w| w & (1 << (rank % 64)) != 0)
    }

    fn set_dead(&mut self, rank: u32, dead: bool) {
        let Some(w) = self.dead.get_mut(rank as usize / 64) else {
            return;
        };
        let bit = 1u64 << (rank % 64);
        if (*w & bit != 0) != dead {
            *w ^= bit;
            if dead {
                self.dead_count += 1;
            } else {
                self.dead_count -= 1;
            }
        }
    }

    /// The rank where `id` is live, if it is a compiled rule's.
    fn live_rank(&self, id: RuleId) -> Option<u32> {
        let &rank = self.rank_of.get(&id)?;
        (!self.is_dead(rank) && self.ids.get(rank as usize) == Some(&id)).then_some(rank)
    }

    /// Record the removal of rule `id`; false if no live rule had it.
    pub fn remove(&mut self, id: RuleId) -> bool {
        match self.live_rank(id) {
            // The entry stays in `rank_of`: the same rule inserted again
            // under the same id is then recognised without a content hash.
            Some(rank) => {
                self.set_dead(rank, true);
                true
            }
            None => self.discard_added(id),
        }
    }

    /// [`remove`](Self::remove), returning the rule removed.
    pub fn take(&mut self, id: RuleId) -> Option<Rule> {
        match self.live_rank(id) {
            Some(rank) => {
                self.set_dead(rank, true);
                self.compiled_rule(rank)
            }
            None if self.any_added => {
                let gone = self.added.remove(id);
                self.any_added = !self.added.is_empty();
                gone
            }
            None => None,
        }
    }

    /// The live rule `id`, if any.
    pub fn get(&self, id: RuleId) -> Option<Rule> {
        match self.live_rank(id) {
            Some(rank) => self.compiled_rule(rank),
            None if self.any_added => self.added.get(id),
            None => None,
        }
    }

    /// The compiled rule of `rank` under its current id.
    fn compiled_rule(&self, rank: u32) -> Option<Rule> {
        let id = *self.ids.get(rank as usize)?;
        Some(Rule {
            id,
            ..self.base.rule(rank)?.clone()
        })
    }

    /// Number of live rules.
    pub fn len(&self) -> usize {
        self.ids.len() - self.dead_count + self.added.len()
    }

    /// True when no rule is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every live rule (compiled ones in rank order, then the added ones).
    pub fn rules(&self) -> impl Iterator<Item = Rule> + '_ {
        (0u32..self.ids.len() as u32)
            .filter(|&rank| !self.is_dead(rank))
            .filter_map(|rank| self.compiled_rule(rank))
            .chain(self.added.rules().cloned())
    }

    /// Forget `id` among the rules served beside the tables, if it is one.
    fn discard_added(&mut self, id: RuleId) -> bool {
        let gone = self.any_added && self.added.discard(id);
        if gone {
            self.any_added = !self.added.is_empty();
        }
        gone
    }

    /// Record the insertion of `rule` (replacing any rule with its id).
    /// False when the overlay grew past its bound: the owner should drop
    /// the snapshot.
    pub fn insert(&mut self, rule: &Rule) -> bool {
        let id = rule.id;
        let same_as =
            |base: &RfcSnapshot, rank: u32| base.rule(rank).is_some_and(|c| same_content(c, rule));
        match self.live_rank(id) {
            // Replaced by itself: nothing changes.
            Some(rank) if same_as(&self.base, rank) => return true,
            // What `remove` does, without looking the rank up again.
            Some(rank) => self.set_dead(rank, true),
            None => {
                self.discard_added(id);
            }
        }
        // The rank this id last had, else one found by content.
        let rank = match self.rank_of.get(&id) {
            Some(&rank)
                if self.ids.get(rank as usize) == Some(&id) && same_as(&self.base, rank) =>
            {
                Some(rank)
            }
            _ => self
                .base
                .by_content
                .get(&content_hash(rule))
                .copied()
                .filter(|&rank| same_as(&self.base, rank)),
        };
        if let Some(rank) = rank.filter(|&r| self.is_dead(r) && self.order_holds(r, id)) {
            // Written only when it changes: readers read `ids` on every
            // lookup, and a line stored to, even with the value it held,
            // is taken from their caches. A rule put back under its old id
            // then dirties only its dead bit.
            if let Some(slot) = self.ids.get_mut(rank as usize).filter(|slot| **slot != id) {
                let old = std::mem::replace(slot, id);
                // `rank_of` entries of dead ranks may be missing, never
                // wrong: the old id no longer names this rank.
                if self.rank_of.get(&old) == Some(&rank) {
                    self.rank_of.remove(&old);
                }
                self.revived += 1;
            }
            if self.rank_of.get(&id) != Some(&rank) {
                self.rank_of.insert(id, rank);
            }
            self.set_dead(rank, false);
            return true;
        }
        self.added.insert(rule.clone());
        self.any_added = true;
        self.added.len() <= ADDED_MIN.max(self.ids.len() / 8)
    }

    /// Would `id` at `rank` keep ids rising with rank among the live
    /// compiled rules of its priority? (Checks the nearest live neighbour on
    /// each side; see the module invariants.)
    fn order_holds(&self, rank: u32, id: RuleId) -> bool {
        let rfc = &self.base.rfc;
        let prio = rfc.priority(rank);
        let live_neighbour = |ranks: &mut dyn Iterator<Item = u32>| -> Result<Option<RuleId>, ()> {
            for (steps, q) in ranks.enumerate() {
                if steps >= ORDER_SCAN {
                    return Err(());
                }
                if rfc.priority(q) != prio {
                    return Ok(None);
                }
                if !self.is_dead(q) {
                    return Ok(self.ids.get(q as usize).copied());
                }
            }
            Ok(None)
        };
        let below = live_neighbour(&mut (0..rank).rev());
        let above = live_neighbour(&mut (rank + 1..self.ids.len() as u32));
        matches!((below, above), (Ok(b), Ok(a)) if b.is_none_or(|b| b < id) && a.is_none_or(|a| a > id))
    }

    /// The winner for `key` among the live rules. `complete`, the owner's
    /// structure holding every live rule if it keeps one, answers what the
    /// tables cannot; without it (a [self-sufficient](RfcSnapshot::self_sufficient)
    /// snapshot) the rules that could match are tried one by one.
    #[inline]
    pub fn lookup(&self, key: &FlowKey, complete: Option<&TupleMerge>) -> Option<RuleId> {
        self.resolve(key, self.base.rfc.rank(key), complete)
    }

    /// [`lookup`](Self::lookup) given the tables' answer for `key`.
    #[inline]
    pub fn resolve(
        &self,
        key: &FlowKey,
        answer: RfcRank,
        complete: Option<&TupleMerge>,
    ) -> Option<RuleId> {
        let best = match answer {
            RfcRank::NoMatch => None,
            RfcRank::Rank(rank) if !self.is_dead(rank) => Some(rank),
            RfcRank::Rank(_) => match self.base.rfc.rank_where(key, |q| !self.is_dead(q)) {
                Some(best) => best,
                None => return self.fall_back(key, complete, None),
            },
            RfcRank::NotApplicable => {
                // A key without L3 can only match the rules that do not
                // require it.
                let no_l3 = key.presence() & present::L3 == 0;
                return self.fall_back(key, complete, no_l3.then_some(&*self.base.no_l3));
            }
        };
        self.with_added(key, best)
    }

    /// The answer for a key the tables could not give: `complete`'s, else
    /// the first live rule among `ranks` (every rank if `None`) that
    /// matches, against the added rules.
    #[cold]
    #[inline(never)]
    fn fall_back(
        &self,
        key: &FlowKey,
        complete: Option<&TupleMerge>,
        ranks: Option<&[u32]>,
    ) -> Option<RuleId> {
        if let Some(t) = complete {
            return t.lookup(key);
        }
        let matching = |&rank: &u32| {
            !self.is_dead(rank) && self.base.rule(rank).is_some_and(|r| r.matches(key))
        };
        let best = match ranks {
            Some(ranks) => ranks.iter().copied().find(|r| matching(r)),
            None => (0..self.ids.len() as u32).find(matching),
        };
        self.with_added(key, best)
    }

    /// The winner between the compiled rule of rank `best` and the added
    /// rules.
    #[inline]
    fn with_added(&self, key: &FlowKey, best: Option<u32>) -> Option<RuleId> {
        let id_of = |rank: u32| self.ids.get(rank as usize).copied();
        if !self.any_added {
            return best.and_then(id_of);
        }
        // Both sides in TupleMerge's order key: (priority << 32) | !id.
        let compiled = best.and_then(|rank| {
            let prio = self.base.rfc.priority(rank)?;
            Some((u64::from(prio) << 32) | u64::from(!id_of(rank)?))
        });
        compiled
            .max(self.added.lookup_rank(key))
            .map(|rank| !(rank as u32))
    }

    /// The compiled set (for batched rank lookups).
    #[inline]
    pub fn rfc(&self) -> &RfcSet {
        &self.base.rfc
    }
}
