//! [`RfcSet`]: RFC partitioned, so that a rule set whose single RFC would
//! outgrow its memory budget is split into parts by rule shape, each an
//! [`super::Rfc`] of its own, answered together.

use std::fmt;
use std::time::{Duration, Instant};

use offlow_flow::{present, FlowKey};

use crate::{Priority, Rule, RuleId};

use super::*;

/// Default total memory budget of an [`RfcSet`]: 256 MiB.
pub const DEFAULT_SET_BUDGET: usize = 256 << 20;

/// Default cap on the number of parts of an [`RfcSet`].
pub const DEFAULT_MAX_PARTS: usize = 8;

/// Build parameters of an [`RfcSet`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RfcSetConfig {
    /// Budget of each part (as [`RfcConfig::budget`]); a subset whose
    /// tables would exceed it is split.
    pub part_budget: usize,
    /// Upper bound on the table bytes of all parts together.
    pub total_budget: usize,
    /// Upper bound on the number of parts (each costs one more table walk
    /// per lookup).
    pub max_parts: usize,
    /// Reduction tree of every part (see [`RfcConfig::tree`]).
    pub tree: Vec<(u8, u8)>,
}

impl Default for RfcSetConfig {
    fn default() -> Self {
        RfcSetConfig {
            part_budget: DEFAULT_BUDGET,
            total_budget: DEFAULT_SET_BUDGET,
            max_parts: DEFAULT_MAX_PARTS,
            tree: RfcConfig::default_tree(),
        }
    }
}

/// Sizes and timing of an [`RfcSet`] build.
#[derive(Debug, Clone, Default)]
pub struct RfcSetStats {
    /// Rules compiled (all parts).
    pub rules: usize,
    /// Per part, in lookup order.
    pub parts: Vec<RfcStats>,
    /// Bytes of all tables of all parts.
    pub table_bytes: usize,
    /// Part builds attempted, including those refused as too big.
    pub attempts: usize,
    /// Wall-clock build time, partitioning included.
    pub build_time: Duration,
}

impl RfcSetStats {
    /// Bytes of the candidate lists of all parts.
    pub fn candidate_bytes(&self) -> usize {
        self.parts.iter().map(|p| p.candidate_bytes).sum()
    }
}

impl fmt::Display for RfcSetStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} rules in {} parts (", self.rules, self.parts.len())?;
        for (i, p) in self.parts.iter().enumerate() {
            let sep = if i == 0 { "" } else { " + " };
            write!(
                f,
                "{sep}{} rules/{:.1} MiB",
                p.rules,
                p.table_bytes as f64 / (1 << 20) as f64
            )?;
        }
        write!(
            f,
            "); tables {:.2} MiB; candidate lists {:.2} MiB; {} build attempts; build {:.1} ms",
            self.table_bytes as f64 / (1 << 20) as f64,
            self.candidate_bytes() as f64 / (1 << 20) as f64,
            self.attempts,
            self.build_time.as_secs_f64() * 1e3
        )
    }
}

/// Several [`Rfc`] table sets over disjoint subsets of one rule set, for
/// rule sets whose single RFC would exceed its memory budget.
///
/// # How the rules are split
/// RFC tables grow with the number of distinct rule *intersections*. Rules
/// that are wide on one field and narrow on another (for example a wildcard
/// source with an exact destination, next to an exact source with a
/// wildcard destination) intersect pairwise and multiply the classes of the
/// combine steps. Each rule gets a *shape*: which of its fields are wide
/// (address prefix shorter than /16, more than 256 ports, protocol
/// unconstrained). A subset whose tables exceed
/// [`RfcSetConfig::part_budget`] is split by the first shape bit (source
/// address, destination address, destination port, source port, protocol)
/// that divides it, and when none does, into halves by rank. Afterwards the
/// smallest parts are merged into others while the merged tables still fit,
/// because every part costs a table walk per lookup.
///
/// # Lookup
/// Every part's final table stores *global* ranks (position in the whole
/// set's (priority desc, id asc) order), with `len()` for "no rule". The
/// winner is the minimum over the parts, mapped to its id once. The domain
/// (see the module docs) is that of the whole rule set, so answers equal
/// those of a single [`Rfc`] over the same rules, `NotApplicable` included.
///
/// # Thread-safety
/// Immutable after build: `Send + Sync`; lookups take `&self` and allocate
/// nothing.
pub struct RfcSet {
    /// Parts in lookup order; each final table holds global ranks.
    parts: Vec<Tables>,
    /// Rule id by global rank; rank `ids.len()` means "no match".
    ids: Box<[RuleId]>,
    /// Rule priority by global rank.
    priorities: Box<[Priority]>,
    /// Bit set by global rank: the rule requires L4.
    needs_l4: Box<[u64]>,
    all_require_l3: bool,
    stats: RfcSetStats,
}

/// An [`RfcSet`] answer as a global rank (position in the compiled rules'
/// (priority desc, id asc) order), for owners that track rules by rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RfcRank {
    /// The rule of this rank wins among the compiled rules.
    Rank(u32),
    /// No compiled rule matches (exact).
    #[default]
    NoMatch,
    /// The key lies outside the compiled domain; ask the complete classifier.
    NotApplicable,
}

impl fmt::Debug for RfcSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RfcSet")
            .field("stats", &self.stats)
            .finish()
    }
}

/// Bytes of the phase-0 tables, which every part holds whatever its rules.
const PHASE0_BYTES: usize = CHUNKS * std::mem::size_of::<[u16; 1 << 16]>();

/// Shape bits of a rule (see [`RfcSet`]), in split order.
mod shape {
    pub(super) const SIP_WIDE: u8 = 1;
    pub(super) const DIP_WIDE: u8 = 2;
    pub(super) const DPORT_WIDE: u8 = 4;
    pub(super) const SPORT_WIDE: u8 = 8;
    pub(super) const PROTO_WILD: u8 = 16;
    pub(super) const SPLIT_ORDER: [u8; 5] =
        [SIP_WIDE, DIP_WIDE, DPORT_WIDE, SPORT_WIDE, PROTO_WILD];
}

/// Roughly how many values a chunk condition accepts: the interval length,
/// halved for every bit a non-prefix mask fixes (exact for prefixes and
/// ranges, which is what rule sets mostly hold).
fn cond_width(c: &Option<Cond>) -> u64 {
    match c {
        None => 0,
        Some(c) => (c.hi - c.lo + 1) as u64 >> c.mask.count_ones(),
    }
}

fn rule_shape(c: &[Option<Cond>; CHUNKS]) -> u8 {
    use slot::*;
    let w = |s: u8| cond_width(&c[s as usize]);
    let mut s = 0;
    // An address is wide when its high half is not one exact value, i.e.
    // shorter than /16 (or masked within the high half).
    if w(SIP_HI) > 1 {
        s |= shape::SIP_WIDE;
    }
    if w(DIP_HI) > 1 {
        s |= shape::DIP_WIDE;
    }
    if w(DPORT) > 256 {
        s |= shape::DPORT_WIDE;
    }
    if w(SPORT) > 256 {
        s |= shape::SPORT_WIDE;
    }
    if w(PROTO) > 16 {
        s |= shape::PROTO_WILD;
    }
    s
}

/// One built part during partitioning: its ranks (increasing), tables and
/// stats.
type Part = (Vec<u32>, Tables, RfcStats);

impl RfcSet {
    /// Compile `rules` with the default configuration.
    pub fn build(rules: &[Rule]) -> Result<RfcSet, RfcError> {
        RfcSet::build_with(rules, &RfcSetConfig::default())
    }

    /// Compile `rules` into at most `config.max_parts` parts of at most
    /// `config.part_budget` table bytes each and `config.total_budget` in
    /// all; [`RfcError::TooBig`] when the partitioning cannot achieve that.
    /// A rule set that fits one part yields exactly one part.
    ///
    /// # Panics
    /// If `config.tree` is not a valid reduction tree (see
    /// [`Rfc::build_with`]).
    pub fn build_with(rules: &[Rule], config: &RfcSetConfig) -> Result<RfcSet, RfcError> {
        let t0 = Instant::now();
        check_tree(&config.tree);
        let p = prepare(rules)?;
        let n = p.order.len();
        let none = n as u32;
        let part_cfg = RfcConfig {
            budget: config.part_budget.min(config.total_budget),
            tree: config.tree.clone(),
        };
        let shapes: Vec<u8> = p.conds.iter().map(rule_shape).collect();
        let mut attempts = 0usize;
        let mut try_build = |subset: &[u32]| -> Result<Option<(Tables, RfcStats)>, RfcError> {
            attempts += 1;
            match build_tables(&p.conds, subset, none, &part_cfg) {
                Ok(t) => Ok(Some(t)),
                Err(RfcError::TooBig { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        };
        // Bound the work: splitting further than this many pieces could not
        // be merged back under `max_parts` in reasonable time.
        let max_pieces = config.max_parts.max(1) * 4;
        let too_big = |bytes: usize| RfcError::TooBig { bytes };

        // Split phase: depth-first, each piece remembers the shape bits
        // already used to split it.
        let mut parts: Vec<Part> = Vec::new();
        let mut work: Vec<(Vec<u32>, u8)> = vec![((0..none).collect(), 0)];
        while let Some((subset, used)) = work.pop() {
            if let Some((t, s)) = try_build(&subset)? {
                parts.push((subset, t, s));
                continue;
            }
            if subset.len() <= 1 || parts.len() + work.len() + 2 > max_pieces {
                return Err(too_big(part_cfg.budget.saturating_add(1)));
            }
            let bit = shape::SPLIT_ORDER.iter().copied().find(|&b| {
                used & b == 0 && {
                    let wide = subset
                        .iter()
                        .filter(|&&r| shapes[r as usize] & b != 0)
                        .count();
                    wide != 0 && wide != subset.len()
                }
            });
            let (a, b): (Vec<u32>, Vec<u32>) = match bit {
                Some(b) => subset.iter().partition(|&&r| shapes[r as usize] & b != 0),
                None => {
                    let (x, y) = subset.split_at(subset.len() / 2);
                    (x.to_vec(), y.to_vec())
                }
            };
            let used = used | bit.unwrap_or(0);
            // `a` (the wide side) is tried first; the result does not depend
            // on the order.
            work.push((b, used));
            work.push((a, used));
        }

        // Merge phase: fold the smallest part into the smallest other part
        // it fits with; a part that fits with none is final.
        let mut done: Vec<Part> = Vec::new();
        while parts.len() > 1 {
            parts.sort_by_key(|p| std::cmp::Reverse(p.0.len()));
            // `parts` is non-empty (len > 1), so pop yields the smallest.
            let small = parts.pop().unwrap_or_else(|| unreachable!("len > 1"));
            let mut merged = None;
            for i in (0..parts.len()).rev() {
                // Class counts only grow when rules are added, so a merge
                // needs at least the larger part's bytes and usually far
                // more; a refused attempt costs as much as a build, so only
                // pairs whose cross-product tables together stay within half
                // of what the budget leaves beside the phase-0 tables are
                // tried.
                let var = |b: usize| b.saturating_sub(PHASE0_BYTES);
                let room = var(part_cfg.budget) / 2;
                if var(small.2.table_bytes) + var(parts[i].2.table_bytes) > room {
                    continue;
                }
                let mut union: Vec<u32> = small.0.iter().chain(&parts[i].0).copied().collect();
                union.sort_unstable();
                if let Some((t, s)) = try_build(&union)? {
                    merged = Some((i, (union, t, s)));
                    break;
                }
            }
            match merged {
                Some((i, m)) => parts[i] = m,
                None => done.push(small),
            }
        }
        done.extend(parts);

        let table_bytes: usize = done.iter().map(|p| p.2.table_bytes).sum();
        if done.len() > config.max_parts || table_bytes > config.total_budget {
            return Err(too_big(table_bytes));
        }
        // Largest part first: it is the likeliest to hold the winner, and
        // the order is otherwise irrelevant to the answer.
        done.sort_by_key(|p| std::cmp::Reverse(p.0.len()));
        let stats = RfcSetStats {
            rules: n,
            parts: done.iter().map(|p| p.2.clone()).collect(),
            table_bytes,
            attempts,
            build_time: t0.elapsed(),
        };
        Ok(RfcSet {
            parts: done.into_iter().map(|p| p.1).collect(),
            ids: p.order.iter().map(|r| r.id).collect(),
            priorities: p.order.iter().map(|r| r.priority).collect(),
            needs_l4: {
                let mut bits = vec![0u64; n.div_ceil(64)];
                for (rank, r) in p.order.iter().enumerate() {
                    if r.matcher.mask.presence() & present::L4 != 0 {
                        bits[rank / 64] |= 1 << (rank % 64);
                    }
                }
                bits.into_boxed_slice()
            },
            all_require_l3: p.all_require_l3,
            stats,
        })
    }

    /// Sizes and timing of the build.
    pub fn stats(&self) -> &RfcSetStats {
        &self.stats
    }

    /// Number of parts (table walks per lookup).
    pub fn parts(&self) -> usize {
        self.parts.len()
    }

    /// Number of rules compiled.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// True when no rule was compiled.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Rule priority of `rank` (below [`len`](Self::len)).
    pub fn priority(&self, rank: u32) -> Option<Priority> {
        self.priorities.get(rank as usize).copied()
    }

    /// Rule ids in rank order.
    pub fn ids(&self) -> &[RuleId] {
        &self.ids
    }

    /// True when every part kept its candidates, so that
    /// [`rank_where`](Self::rank_where) always answers.
    pub fn lists_candidates(&self) -> bool {
        self.parts.iter().all(|t| t.candidates.is_some())
    }

    /// The winning rank for `key`.
    #[inline]
    pub fn rank(&self, key: &FlowKey) -> RfcRank {
        if let Some(a) = outside(key, self.all_require_l3) {
            return self.rank_outside(key, a);
        }
        let best = self
            .parts
            .iter()
            .map(|t| t.rank(key))
            .min()
            .unwrap_or(self.ids.len() as u32);
        to_rank(best, self.ids.len())
    }

    /// The rank for a key [`outside`] did not place in the domain. An IPv4
    /// key with L3 but no L4 (an IP protocol without ports) is answered
    /// from the candidate lists when they were kept: the tables read its
    /// port chunks from the key words exactly as a rule's match does, so
    /// among the rules that do not require L4 their candidates are exact.
    /// Without the lists such a key goes to the complete classifier.
    #[inline(never)]
    fn rank_outside(&self, key: &FlowKey, a: RfcAnswer) -> RfcRank {
        match a {
            RfcAnswer::NotApplicable if key.presence() & present::L3 != 0 => {
                match self.rank_where(key, |_| true) {
                    Some(best) => best.map_or(RfcRank::NoMatch, RfcRank::Rank),
                    None => RfcRank::NotApplicable,
                }
            }
            RfcAnswer::NotApplicable => RfcRank::NotApplicable,
            _ => RfcRank::NoMatch,
        }
    }

    /// [`rank`](Self::rank) of every key of `keys` into `out`, batched
    /// like [`lookup_batch`](Self::lookup_batch); allocates nothing.
    ///
    /// # Panics
    /// If `out` is shorter than `keys` (a caller bug, not packet-driven).
    pub fn rank_batch(&self, keys: &[FlowKey], out: &mut [RfcRank]) {
        assert!(out.len() >= keys.len(), "rank_batch: output too short");
        let none = self.ids.len() as u32;
        let mut ranks = [none; BATCH];
        for (kc, oc) in keys.chunks(BATCH).zip(out.chunks_mut(BATCH)) {
            ranks.fill(none);
            for t in &self.parts {
                t.ranks_chunk(kc, &mut ranks, true);
            }
            for ((o, key), &rank) in oc.iter_mut().zip(kc).zip(ranks.iter()) {
                *o = match outside(key, self.all_require_l3) {
                    Some(a) => self.rank_outside(key, a),
                    None => to_rank(rank, self.ids.len()),
                };
            }
        }
    }

    /// The lowest rank of a compiled rule matching `key` that `keep`
    /// accepts, skipping the others: `Some(None)` when none is left, `None`
    /// when a part did not keep its candidates (see
    /// [`lists_candidates`](Self::lists_candidates)). Call it only for a
    /// key [`rank`](Self::rank) answered with [`RfcRank::Rank`]: other keys
    /// lie outside the domain the tables describe. For a key without L4,
    /// rules that require L4 are skipped as well.
    pub fn rank_where(&self, key: &FlowKey, keep: impl Fn(u32) -> bool) -> Option<Option<u32>> {
        let l4 = key.presence() & present::L4 != 0;
        let keep = |r: u32| keep(r) && (l4 || !self.needs_l4(r));
        let mut best: Option<u32> = None;
        for t in &self.parts {
            if let Some(r) = t.rank_where(key, &keep)? {
                best = Some(best.map_or(r, |b| b.min(r)));
            }
        }
        Some(best)
    }

    /// Does the rule of `rank` require the transport layer?
    #[inline]
    fn needs_l4(&self, rank: u32) -> bool {
        self.needs_l4
            .get(rank as usize / 64)
            .is_some_and(|w| w & (1 << (rank % 64)) != 0)
    }

    /// The winning rule for `key`.
    pub fn lookup(&self, key: &FlowKey) -> RfcAnswer {
        self.answer(self.rank(key))
    }

    fn answer(&self, rank: RfcRank) -> RfcAnswer {
        match rank {
            RfcRank::Rank(r) => answer(&self.ids, r),
            RfcRank::NoMatch => RfcAnswer::NoMatch,
            RfcRank::NotApplicable => RfcAnswer::NotApplicable,
        }
    }

    /// Look up every key of `keys`; `out[i]` receives the answer for
    /// `keys[i]`. Each slice of up to 64 keys runs through every part
    /// phase by phase, keeping the smallest rank; allocates nothing.
    ///
    /// # Panics
    /// If `out` is shorter than `keys` (a caller bug, not packet-driven).
    pub fn lookup_batch(&self, keys: &[FlowKey], out: &mut [RfcAnswer]) {
        assert!(out.len() >= keys.len(), "lookup_batch: output too short");
        let mut ranks = [RfcRank::NoMatch; BATCH];
        for (kc, oc) in keys.chunks(BATCH).zip(out.chunks_mut(BATCH)) {
            let ranks = &mut ranks[..kc.len()];
            self.rank_batch(kc, ranks);
            for (o, &r) in oc.iter_mut().zip(ranks.iter()) {
                *o = self.answer(r);
            }
        }
    }
}
