//! The multi-table pipeline: flow tables, flow-mod processing and lookup.
//!
//! # Updates
//! A flow-mod is handled in two steps. [`Pipeline::prepare`] (`&self`)
//! validates it against the current state and resolves it into a
//! [`PipelineOp`]: concrete inserts and removals of `Arc<FlowEntry>` with
//! ids already assigned. [`Pipeline::apply`] (`&mut self`) performs the op
//! and cannot fail. Because the op carries the entries themselves, replaying
//! it on the second copy of a left-right pair yields an identical copy that
//! *shares* entries and counters with the first. The [`FlowModEffect`]
//! returned by `prepare` lists what changed, for cache invalidation and
//! flow-removed messages.
//!
//! ## What an update costs
//! A left-right pair pays `prepare` once and `apply` twice per flow-mod, so
//! both are kept to a few cache misses in big tables:
//! - the match indexes, which only `prepare` reads, are kept once for both
//!   copies ([`Pipeline::replica`]) and updated by the copy that applies an
//!   op first; the replay on the other copy skips them;
//! - strict commands resolve through the match index with one bucket probe
//!   (no scan, no allocation beyond the effect) and a single entry becomes
//!   a plain [`PipelineOp::Insert`] / [`PipelineOp::Remove`], not a batch;
//! - an `Insert` replacing an entry with the same match and priority (a
//!   MODIFY, or an ADD of an identical rule) leaves the classifier alone
//!   (its rule is unchanged, and a compiled snapshot survives) and only
//!   swaps entry pointers in the match index;
//! - id-keyed maps are [`IdTable`]s (one miss per probe), prefetched at the
//!   start of `apply` together with the classifier's own id slot, so their
//!   misses overlap;
//! - entry allocations (cache-line aligned, hence slow in the system
//!   allocator) are recycled through the pipeline's `EntryPool`.
//!
//! # Lookup
//! [`Pipeline::lookup`] is `&self` and never writes: it walks table 0 and
//! the goto-table chain on a working copy of the key, returning a
//! [`Resolution`] (final action list, outcome, path). Counting is separate:
//! [`Pipeline::credit`] adds to relaxed atomic counters inside the shared
//! entries, so any number of workers can credit exactly, through either copy.
//!
//! Invariants: every table's classifier holds exactly the rules of its entry
//! map (same ids), and so does its `MatchIndex` (which answers identical-
//! match and overlap questions without scanning) as of the newest replica,
//! the one whose applied-op count equals the indexes' (see
//! `SharedIndexes`); a rule id is unique in the
//! whole pipeline; `index` maps every id to its table; `timed` holds
//! exactly the installed entries that have an idle or hard timeout (the
//! expiry scan's index, see [`crate::expiry`]; one more probe per update of
//! a timed entry, none for others).
//!
//! Thread-safety: `Send + Sync`; lookups and credits take `&self`, updates
//! `&mut self` (single writer). `Clone` shares the counters (see [`Pipeline`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use offlow_classifier::{
    BuildInput, Built, Classifier, Classify, IdTable, OverlayStats, Priority, RuleId,
};
use offlow_flow::{Field, FlowKey, FlowMask};
use offlow_sync::Apply;

use crate::action::{Instruction, Program};
use crate::entry::{FlowCounters, FlowEntry, FlowMatch, FlowModFlags, TableCounters};
use crate::error::PipelineError;
use crate::expiry::TimedSlot;
use crate::group::{GroupError, GroupMod, GroupOp, GroupTable};
use crate::index::MatchIndex;
use crate::meter::{MeterOp, MeterTable};
use crate::port::{PortNo, GROUP_ANY, TABLE_ALL};
use crate::validate::{validate_bucket_actions, validate_instructions_with};
use crate::working_key::WorkingKey;

mod flow_mod;
mod resolution;

pub use flow_mod::{
    FlowFilter, FlowMod, FlowModCommand, FlowModEffect, PipelineOp, ShadowReport, SHADOW_LIMIT,
};
pub use resolution::{Outcome, PacketInOrigin, PathStep, Resolution};

/// The classifier used by every flow table: TupleMerge for incremental
/// updates, with the DIR-24-8 FIB or an RFC snapshot installed by
/// [`Pipeline::build_compiled`] (installed with `PipelineOp::Install`) when a table's rules allow it. The single place to
/// switch implementation.
pub type TableClassifier = Classifier;

/// Largest number of tables (ids 0..=254; 255 is `OFPTT_ALL`).
pub const MAX_TABLES: u16 = 255;

/// One flow table.
#[derive(Debug, Clone)]
struct FlowTable {
    classifier: TableClassifier,
    /// Id -> entry. An [`IdTable`]: one cache miss per probe (key and
    /// value share a slot) and prefetchable, where a std `HashMap` costs
    /// two misses per update in a big table.
    entries: IdTable<Arc<FlowEntry>>,
    /// Shared by clones: table counters are credited through either copy.
    counters: Arc<TableCounters>,
}

impl FlowTable {
    fn new() -> FlowTable {
        FlowTable {
            classifier: TableClassifier::default(),
            entries: IdTable::new(),
            counters: Arc::new(TableCounters::default()),
        }
    }
}

/// A flow entry's statistics (`ofp_flow_stats`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowStats {
    /// Id.
    pub id: RuleId,
    /// Table.
    pub table_id: u8,
    /// Priority.
    pub priority: Priority,
    /// Match.
    pub matcher: FlowMatch,
    /// Cookie.
    pub cookie: u64,
    /// Flags.
    pub flags: FlowModFlags,
    /// Idle timeout (s).
    pub idle_timeout: u16,
    /// Hard timeout (s).
    pub hard_timeout: u16,
    /// When installed (caller's clock, ns).
    pub installed_at_ns: u64,
    /// Packets counted.
    pub packets: u64,
    /// Bytes counted.
    pub bytes: u64,
    /// Instructions as given.
    pub instructions: Vec<Instruction>,
}

/// A table's statistics (`ofp_table_stats`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableStats {
    /// Table.
    pub table_id: u8,
    /// Entries installed.
    pub active_count: u32,
    /// Packets looked up.
    pub lookup_count: u64,
    /// Packets that matched an entry.
    pub matched_count: u64,
}

/// The OpenFlow pipeline.
///
/// `Clone` copies the rules but *shares* entries and counters (they sit
/// behind `Arc`s): the intended use is the two copies of a left-right pair,
/// which must count into one place. A clone is not an independent snapshot
/// of the counters. A clone's match indexes are its own; a
/// [`replica`](Pipeline::replica) shares them (see `SharedIndexes`).
#[derive(Debug)]
pub struct Pipeline {
    tables: Vec<FlowTable>,
    /// Every table's exact and overlap index ([`MatchIndex`]), shared by
    /// the replicas of this pipeline and kept for the one ahead.
    matches: Arc<SharedIndexes>,
    /// Leaf ops (`Insert`, `Remove`) this copy has applied: compared with
    /// [`SharedIndexes::through`] to know whether the indexes still need
    /// the op being applied.
    applied: u64,
    /// Rule id to table id.
    index: IdTable<u8>,
    /// Next id to try; ids are allocated in `prepare` and committed by `apply`.
    next_id: RuleId,
    /// Entry allocations to reuse; shared by clones (see [`EntryPool`]).
    pool: Arc<EntryPool>,
    /// Every entry with a nonzero idle or hard timeout, by id: what an
    /// expiry scan ([`Pipeline::prepare_expiry`]) walks, so entries without
    /// timeouts cost a scan nothing. Maintained by `apply` alone, hence
    /// identical in every copy. Holds a second reference to each entry,
    /// dropped before the pool tries to recycle it.
    timed: IdTable<TimedSlot>,
    /// The group table (§5.6) and the port liveness its buckets follow.
    groups: GroupTable,
    /// The meter table (§5.7); its meters are shared by every copy.
    meters: MeterTable,
}

/// The tables' match indexes, which only `prepare` reads (lookups never
/// do), kept once for all the replicas of a pipeline (the two copies of a
/// left-right pair) instead of once per copy.
///
/// Why: maintaining the index of a 512K-rule table is cold misses on
/// every update (a hash bucket per key mask, the group), and a left-right
/// pair applies every op twice; the second copy's index work was about a
/// sixth of the writer's time (perf, 2026-11-22), and the index's memory
/// was held twice.
///
/// How: replicas apply the same ops in the same order (the left-right
/// contract), so the copy that is ahead is the one whose applied-op count
/// equals `through`. That copy updates the indexes and advances `through`;
/// a copy that is behind (replaying on publish) finds the op already in and
/// skips it. `prepare` on the copy that is ahead answers from the indexes;
/// on one that is behind (which a left-right writer never does) it builds
/// indexes of its own entries first, so the answer is always right for the
/// copy asked.
///
/// Thread-safety: the indexes sit behind a mutex, taken by the writer only
/// (a leaf op of the copy ahead, a `prepare`), never by a lookup. The copy
/// behind needs no lock to know it is behind: `through` only grows, so once
/// it exceeds the copy's count it stays so (an acquire load suffices).
#[derive(Debug)]
struct SharedIndexes {
    /// Leaf ops reflected in `tables`: the applied-op count of the copy
    /// that is ahead. Written only with `tables` locked.
    through: AtomicU64,
    /// One index per flow table.
    tables: Mutex<Vec<MatchIndex>>,
}

impl SharedIndexes {
    fn new(through: u64, tables: Vec<MatchIndex>) -> SharedIndexes {
        SharedIndexes {
            through: AtomicU64::new(through),
            tables: Mutex::new(tables),
        }
    }

    /// The indexes, locked, if they reflect exactly `applied` leaf ops.
    fn at(&self, applied: u64) -> Option<MutexGuard<'_, Vec<MatchIndex>>> {
        if self.through.load(Ordering::Acquire) != applied {
            return None;
        }
        // A panic while they were being updated (a bug) poisons the lock;
        // the indexes are used as they are.
        let g = self
            .tables
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // Re-checked under the lock, which every writer of `through` holds.
        (self.through.load(Ordering::Relaxed) == applied).then_some(g)
    }

    /// For a copy that has applied `applied` leaf ops and is applying the
    /// next: the indexes to update with it, locked and already marked as
    /// holding it, when this copy is the one ahead; `None` when they hold
    /// it already (the copy is replaying).
    fn claim_next(&self, applied: u64) -> Option<MutexGuard<'_, Vec<MatchIndex>>> {
        let g = self.at(applied)?;
        self.through.store(applied + 1, Ordering::Release);
        Some(g)
    }
}

/// The match indexes a `prepare` reads: the shared ones (this copy is
/// ahead) or ones built for this copy alone (it is behind).
enum IndexView<'a> {
    Shared(MutexGuard<'a, Vec<MatchIndex>>),
    Own(Vec<MatchIndex>),
}

impl core::ops::Deref for IndexView<'_> {
    type Target = [MatchIndex];

    fn deref(&self) -> &[MatchIndex] {
        match self {
            IndexView::Shared(g) => g,
            IndexView::Own(v) => v,
        }
    }
}

impl Clone for Pipeline {
    /// Copies the rules and indexes (the indexes are the clone's own: it
    /// may diverge), sharing entries and counters.
    fn clone(&self) -> Pipeline {
        let tables = match self.indexes() {
            IndexView::Shared(g) => g.clone(),
            IndexView::Own(v) => v,
        };
        Pipeline {
            matches: Arc::new(SharedIndexes::new(self.applied, tables)),
            ..self.replica()
        }
    }
}

/// Most spare entry allocations an [`EntryPool`] keeps.
const POOL_CAP: usize = 1024;

/// Recycled `Arc<FlowEntry>` allocations.
///
/// Why: a `FlowEntry` embeds cache-line-aligned flow keys, so every
/// `Arc::new` is an aligned allocation (`posix_memalign` in the system
/// allocator), which was measured as the largest single cost of a MODIFY
/// and a fifth of a FIB update's time (slow path in glibc, heap
/// fragmentation, page faults). Every update of a left-right pair creates
/// one entry and, once both copies have dropped it, frees one: reusing the
/// freed allocation makes the steady state allocation-free for entries.
///
/// An entry is recycled only when the pipeline held its last reference
/// (`Arc::get_mut` succeeds, so nobody else can observe the reuse).
/// Thread-safety: a mutex, taken by the single writer only (prepare and
/// apply), never by lookups; a poisoned or busy lock just means allocating.
#[derive(Debug, Default)]
struct EntryPool(std::sync::Mutex<Vec<Arc<FlowEntry>>>);

impl EntryPool {
    /// `e` behind an `Arc`, reusing a spare allocation if there is one.
    fn make(&self, e: FlowEntry) -> Arc<FlowEntry> {
        let spare = self.0.try_lock().ok().and_then(|mut v| v.pop());
        if let Some(mut a) = spare {
            if let Some(slot) = Arc::get_mut(&mut a) {
                *slot = e;
                return a;
            }
        }
        Arc::new(e)
    }

    /// Keep `e`'s allocation if this was its last reference.
    fn recycle(&self, mut e: Arc<FlowEntry>) {
        if Arc::get_mut(&mut e).is_none() {
            return;
        }
        if let Ok(mut v) = self.0.try_lock() {
            if v.len() < POOL_CAP {
                v.push(e);
            }
        }
    }
}

/// Lets a [`Pipeline`] be one copy of a left-right
/// [`offlow_sync::Versioned`] pair: ops are deterministic, so
/// replaying them on the second copy yields an identical pipeline.
impl Apply<PipelineOp> for Pipeline {
    fn apply(&mut self, op: &PipelineOp) {
        Pipeline::apply(self, op);
    }

    fn apply_owned(&mut self, op: PipelineOp) {
        match op {
            // The second copy's install: once the op is dropped, the built
            // FIBs (the first copy took copies) have one holder left, so
            // they move in rather than being copied again.
            PipelineOp::Install(shared) => {
                let built: Vec<(u8, Built)> = shared.iter().cloned().collect();
                drop(shared);
                self.install_each(built);
            }
            op => Pipeline::apply(self, &op),
        }
    }

    fn prefetch(&self, op: &PipelineOp) {
        self.prefetch_op(op);
    }

    fn prefetch_near(&self, op: &PipelineOp, stage: usize) {
        self.prefetch_op_near(op, stage);
    }

    fn replica(&self) -> Pipeline {
        Pipeline::replica(self)
    }
}

impl Pipeline {
    /// A pipeline with `n_tables` empty tables (clamped to 1..=255).
    pub fn new(n_tables: u16) -> Pipeline {
        let n = n_tables.clamp(1, MAX_TABLES);
        Pipeline {
            tables: (0..n).map(|_| FlowTable::new()).collect(),
            matches: Arc::new(SharedIndexes::new(
                0,
                (0..n).map(|_| MatchIndex::default()).collect(),
            )),
            applied: 0,
            index: IdTable::new(),
            next_id: 1,
            pool: Arc::default(),
            timed: IdTable::new(),
            groups: GroupTable::new(),
            meters: MeterTable::new(),
        }
    }

    /// A copy to keep in step with this one by applying the same ops in
    /// the same order (the other copy of a left-right pair): like a clone,
    /// but sharing the match indexes, which the copy ahead maintains alone
    /// (see `SharedIndexes`). Applying different ops to replicas breaks
    /// that; use `clone` for a copy that may diverge.
    pub fn replica(&self) -> Pipeline {
        Pipeline {
            tables: self.tables.clone(),
            matches: Arc::clone(&self.matches),
            applied: self.applied,
            index: self.index.clone(),
            next_id: self.next_id,
            pool: Arc::clone(&self.pool),
            timed: self.timed.clone(),
            groups: self.groups.clone(),
            meters: self.meters.clone(),
        }
    }

    /// The match indexes describing this copy's entries.
    fn indexes(&self) -> IndexView<'_> {
        if let Some(g) = self.matches.at(self.applied) {
            return IndexView::Shared(g);
        }
        IndexView::Own(
            self.tables
                .iter()
                .map(|t| {
                    let mut ix = MatchIndex::default();
                    for e in t.entries.values() {
                        ix.insert(e);
                    }
                    ix
                })
                .collect(),
        )
    }

    /// Number of tables.
    pub fn n_tables(&self) -> u16 {
        // At most 255 tables (constructor clamps).
        self.tables.len() as u16
    }

    /// Number of entries across all tables.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// True when no entry is installed.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// The entry with `id`.
    pub fn entry(&self, id: RuleId) -> Option<&Arc<FlowEntry>> {
        let t = *self.index.get(id.into())?;
        self.tables.get(t as usize)?.entries.get(id.into())
    }

    /// Number of entries with an idle or hard timeout (what an expiry scan
    /// walks).
    pub fn timed_len(&self) -> usize {
        self.timed.len()
    }

    /// Every entry with an idle or hard timeout, in no particular order.
    pub fn timed_entries(&self) -> impl Iterator<Item = &Arc<FlowEntry>> + '_ {
        self.timed.values().map(|t| &t.entry)
    }

    /// The timed entries as an expiry scan reads them.
    pub(crate) fn timed_slots(&self) -> impl Iterator<Item = &TimedSlot> + '_ {
        self.timed.values()
    }

    /// The entry with `id` in table `table_id`: one probe, where
    /// [`Pipeline::entry`] needs two (id -> table, then the table). For
    /// callers that know the table, such as a [`PathStep`].
    pub fn entry_in(&self, table_id: u8, id: RuleId) -> Option<&Arc<FlowEntry>> {
        self.tables.get(table_id as usize)?.entries.get(id.into())
    }

    fn table(&self, table_id: u8) -> Result<&FlowTable, PipelineError> {
        self.tables
            .get(table_id as usize)
            .ok_or(PipelineError::BadTableId(table_id))
    }

    /// Validate `fm` and resolve it into an op plus its effect. Nothing
    /// changes until the op is applied. `now_ns` stamps new entries.
    pub fn prepare(
        &self,
        fm: &FlowMod,
        now_ns: u64,
    ) -> Result<(PipelineOp, FlowModEffect), PipelineError> {
        self.prepare_reporting(fm, now_ns, ShadowReport::List)
    }

    /// [`prepare`](Self::prepare), with the caller choosing how an ADD
    /// reports the entries it shadows. [`ShadowReport::WholeTable`] skips
    /// the overlap walk (the writer's largest cost for an ADD into a big
    /// table of mixed shapes) and always sets
    /// [`FlowModEffect::shadowed_all`]: right for a caller that knows
    /// nothing depends on the table's entries yet.
    pub fn prepare_reporting(
        &self,
        fm: &FlowMod,
        now_ns: u64,
        shadow: ShadowReport,
    ) -> Result<(PipelineOp, FlowModEffect), PipelineError> {
        // An ADD or a delete will change the table's classifier when the
        // op is applied, right after this: start its first dependent loads
        // now (a FIB's trie walk), under the index misses of `prepare`.
        // A MODIFY leaves the classifier alone.
        let classifier = match fm.command {
            FlowModCommand::Modify | FlowModCommand::ModifyStrict => None,
            _ => self
                .tables
                .get(usize::from(fm.table_id))
                .map(|t| &t.classifier),
        };
        if let Some(c) = classifier {
            c.prefetch_match(&fm.matcher.matcher, 2);
        }
        let prepared = match fm.command {
            FlowModCommand::Add => self.prepare_add(fm, now_ns, shadow),
            FlowModCommand::Modify | FlowModCommand::ModifyStrict => self.prepare_modify(fm),
            FlowModCommand::Delete | FlowModCommand::DeleteStrict => Ok(self.prepare_delete(fm)),
        };
        if let Some(c) = classifier {
            c.prefetch_match(&fm.matcher.matcher, 1);
        }
        prepared
    }

    /// `prepare` then `apply`: for a single copy (tests, tools).
    pub fn flow_mod(&mut self, fm: &FlowMod, now_ns: u64) -> Result<FlowModEffect, PipelineError> {
        let (op, effect) = self.prepare(fm, now_ns)?;
        self.apply(&op);
        Ok(effect)
    }

    fn alloc_id(&self) -> Result<RuleId, PipelineError> {
        // Ids wrap after 2^32 allocations; skip ids still in use (and 0,
        // kept free as a sentinel for callers).
        let mut id = self.next_id;
        for _ in 0..=self.index.len() {
            if id != 0 && !self.index.contains_key(id.into()) {
                return Ok(id);
            }
            id = id.wrapping_add(1);
        }
        Err(PipelineError::TableFull)
    }

    fn prepare_add(
        &self,
        fm: &FlowMod,
        now_ns: u64,
        shadow: ShadowReport,
    ) -> Result<(PipelineOp, FlowModEffect), PipelineError> {
        self.table(fm.table_id)?;
        let program = validate_instructions_with(
            fm.table_id,
            self.n_tables(),
            &fm.matcher.matcher,
            &fm.instructions,
            &|g| self.groups.get(g).is_some(),
            &|m| self.meters.get(m).is_some(),
        )?;
        let indexes = self.indexes();
        // The table exists (checked above), so its index does.
        let Some(matches) = indexes.get(usize::from(fm.table_id)) else {
            return Err(PipelineError::BadTableId(fm.table_id));
        };
        // §6.4: with CHECK_OVERLAP, refuse if a packet could match both this
        // and an existing entry of the same priority.
        if fm.flags.has(FlowModFlags::CHECK_OVERLAP)
            && matches.any_overlapping(&fm.matcher, fm.priority, fm.priority)
        {
            return Err(PipelineError::Overlap);
        }
        // §6.4: an entry with identical match and priority is replaced;
        // counters are copied unless RESET_COUNTS.
        let old = matches.find_identical(fm.priority, &fm.matcher);
        let mut effect = FlowModEffect::default();
        let (id, counters) = match old {
            Some(old) => {
                effect.modified.push(old.id);
                let c = if fm.flags.has(FlowModFlags::RESET_COUNTS) {
                    Arc::new(FlowCounters::default())
                } else {
                    Arc::clone(&old.counters)
                };
                (old.id, c)
            }
            None => {
                let id = self.alloc_id()?;
                effect.added.push(id);
                // Lower (or equal) priority entries that overlap may lose keys
                // to the new entry, unless an entry covering it outranks
                // them. Sorted, unless there are too many to list: then the
                // whole table counts.
                let listed = match shadow {
                    ShadowReport::List => self.fib_shadowed(fm).or_else(|| {
                        matches.shadowed_at_most(&fm.matcher, fm.priority, SHADOW_LIMIT)
                    }),
                    ShadowReport::WholeTable => None,
                };
                match listed {
                    Some((ids, covered)) => {
                        effect.shadowed = ids;
                        effect.covered = covered;
                    }
                    None => effect.shadowed_all = true,
                }
                (id, Arc::new(FlowCounters::default()))
            }
        };
        let entry = FlowEntry {
            id,
            table_id: fm.table_id,
            priority: fm.priority,
            matcher: fm.matcher,
            cookie: fm.cookie,
            flags: fm.flags,
            idle_timeout: fm.idle_timeout,
            hard_timeout: fm.hard_timeout,
            installed_at_ns: now_ns,
            instructions: fm.instructions.clone(),
            program,
            counters,
        };
        Ok((PipelineOp::Insert(self.pool.make(entry)), effect))
    }

    /// What a route ADD to a FIB-mode table shadows, from one walk of the
    /// FIB's trie instead of the match index's walk of every prefix
    /// length: the nearest covering route, the only overlapping entry that
    /// is not outranked by it or by the new route (see
    /// `MatchIndex::shadowed_at_most`, whose answer this equals; `None`
    /// when the FIB cannot tell).
    fn fib_shadowed(&self, fm: &FlowMod) -> Option<(Vec<RuleId>, bool)> {
        let table = self.tables.get(usize::from(fm.table_id))?;
        let rule = fm.matcher.to_rule(RuleId::default(), fm.priority);
        let cover = table.classifier.fib_nearest_cover(&rule)?;
        Some((cover.into_iter().collect(), cover.is_some()))
    }

    fn filter_of(fm: &FlowMod) -> FlowFilter {
        let strict = matches!(
            fm.command,
            FlowModCommand::ModifyStrict | FlowModCommand::DeleteStrict
        );
        let deleting = matches!(
            fm.command,
            FlowModCommand::Delete | FlowModCommand::DeleteStrict
        );
        FlowFilter {
            table_id: fm.table_id,
            strict,
            priority: fm.priority,
            matcher: fm.matcher,
            cookie: fm.cookie,
            cookie_mask: fm.cookie_mask,
            // §7.3.4.1: out_port / out_group "are ignored by OFPFC_ADD,
            // OFPFC_MODIFY or OFPFC_MODIFY_STRICT messages".
            out_port: if deleting { fm.out_port } else { PortNo::ANY },
            out_group: if deleting { fm.out_group } else { GROUP_ANY },
        }
    }

    /// Selected entries, sorted by id for deterministic ops.
    fn select(&self, f: &FlowFilter) -> Vec<&Arc<FlowEntry>> {
        let tables: &[FlowTable] = if f.table_id == TABLE_ALL {
            &self.tables
        } else {
            match self.tables.get(f.table_id as usize) {
                Some(t) => core::slice::from_ref(t),
                None => &[],
            }
        };
        let mut out: Vec<&Arc<FlowEntry>> = if f.strict {
            // At most one entry per table has this exact match and priority.
            let indexes = self.indexes();
            // `tables` starts at table 0 (all) or is the one named.
            let first = if f.table_id == TABLE_ALL {
                0
            } else {
                usize::from(f.table_id)
            };
            tables
                .iter()
                .zip(first..)
                .filter_map(|(t, i)| {
                    let e = indexes.get(i)?.find_identical(f.priority, &f.matcher)?;
                    t.entries.get(e.id.into())
                })
                .filter(|e| f.passes_filters(e))
                .collect()
        } else {
            tables
                .iter()
                .flat_map(|t| t.entries.values())
                .filter(|e| f.selects(e))
                .collect()
        };
        out.sort_unstable_by_key(|e| e.id);
        out
    }

    /// The single entry a strict request on one table selects (no
    /// allocation: the common MODIFY_STRICT / DELETE_STRICT path).
    fn select_strict_one(&self, f: &FlowFilter) -> Option<Arc<FlowEntry>> {
        self.indexes()
            .get(usize::from(f.table_id))?
            .find_identical(f.priority, &f.matcher)
            .filter(|e| f.passes_filters(e))
            .cloned()
    }

    /// `ops` as one op: a lone op is returned as itself, so a strict
    /// command replays without a batch.
    fn one_op(mut ops: Vec<PipelineOp>) -> PipelineOp {
        if ops.len() == 1 {
            if let Some(op) = ops.pop() {
                return op;
            }
        }
        PipelineOp::Batch(ops)
    }

    /// The new version of `old` carrying the instructions of a MODIFY.
    fn modified_entry(
        &self,
        old: &FlowEntry,
        fm: &FlowMod,
        instructions: &[Instruction],
        program: Program,
    ) -> Arc<FlowEntry> {
        let counters = if fm.flags.has(FlowModFlags::RESET_COUNTS) {
            Arc::new(FlowCounters::default())
        } else {
            Arc::clone(&old.counters)
        };
        // Cookie, timeouts, flags and duration are left unchanged.
        self.pool.make(FlowEntry {
            id: old.id,
            table_id: old.table_id,
            priority: old.priority,
            matcher: old.matcher,
            cookie: old.cookie,
            flags: old.flags,
            idle_timeout: old.idle_timeout,
            hard_timeout: old.hard_timeout,
            installed_at_ns: old.installed_at_ns,
            instructions: instructions.to_vec(),
            program,
            counters,
        })
    }

    fn prepare_modify(&self, fm: &FlowMod) -> Result<(PipelineOp, FlowModEffect), PipelineError> {
        // Only deletes may name OFPTT_ALL.
        self.table(fm.table_id)?;
        // Validated against the request's match (every selected entry's
        // match is at least as specific), so the answer is per request.
        let program = validate_instructions_with(
            fm.table_id,
            self.n_tables(),
            &fm.matcher.matcher,
            &fm.instructions,
            &|g| self.groups.get(g).is_some(),
            &|m| self.meters.get(m).is_some(),
        )?;
        let mut effect = FlowModEffect::default();
        let filter = Self::filter_of(fm);
        // §6.4: "If no flow entry currently resides in any table that matches,
        // no error is recorded, and no flow table modification occurs."
        if filter.strict {
            // `table` succeeded, so this is one table: at most one entry.
            let op = match self.select_strict_one(&filter) {
                Some(old) => {
                    effect.modified.push(old.id);
                    PipelineOp::Insert(self.modified_entry(&old, fm, &fm.instructions, program))
                }
                None => PipelineOp::Batch(Vec::new()),
            };
            return Ok((op, effect));
        }
        let mut ops = Vec::new();
        for old in self.select(&filter) {
            effect.modified.push(old.id);
            ops.push(PipelineOp::Insert(self.modified_entry(
                old,
                fm,
                &fm.instructions,
                program.clone(),
            )));
        }
        Ok((Self::one_op(ops), effect))
    }

    fn prepare_delete(&self, fm: &FlowMod) -> (PipelineOp, FlowModEffect) {
        let mut effect = FlowModEffect::default();
        let filter = Self::filter_of(fm);
        if filter.strict && filter.table_id != TABLE_ALL {
            let op = match self.select_strict_one(&filter) {
                Some(e) => {
                    let op = PipelineOp::Remove {
                        table_id: e.table_id,
                        id: e.id,
                    };
                    effect.removed.push(e);
                    op
                }
                None => PipelineOp::Batch(Vec::new()),
            };
            return (op, effect);
        }
        let mut ops = Vec::new();
        // A delete on a table that does not exist selects nothing (not an
        // error: nothing matched).
        for e in self.select(&filter) {
            ops.push(PipelineOp::Remove {
                table_id: e.table_id,
                id: e.id,
            });
            effect.removed.push(Arc::clone(e));
        }
        (Self::one_op(ops), effect)
    }

    /// Hint that `op` is applied soon: start loading the slots it will
    /// touch in the id-keyed structures (its table's entry map, the
    /// classifier's id index, the pipeline's id-to-table map). Changes
    /// nothing. A batch hints its first op only.
    pub fn prefetch_op(&self, op: &PipelineOp) {
        let Some((table_id, id)) = op.first_target() else {
            return;
        };
        if let Some(t) = self.tables.get(usize::from(table_id)) {
            t.entries.prefetch(id.into());
            t.classifier.prefetch(id);
            self.index.prefetch(id.into());
        }
    }

    /// The later stages of [`prefetch_op`](Self::prefetch_op) for an op
    /// `stage` ops ahead (2, then 1): the classifier's dependent loads (a
    /// FIB's trie walk). Changes nothing. A batch hints its first op only.
    pub fn prefetch_op_near(&self, op: &PipelineOp, stage: usize) {
        let Some((table_id, id)) = op.first_target() else {
            return;
        };
        if let Some(t) = self.tables.get(usize::from(table_id)) {
            t.classifier.prefetch_near(id, stage);
        }
    }

    /// Perform a prepared op. Must be applied to a pipeline in the state it
    /// was prepared against (or an identical copy); ops naming a table that
    /// does not exist are ignored.
    pub fn apply(&mut self, op: &PipelineOp) {
        match op {
            PipelineOp::Insert(e) => {
                // In a big table each structure below costs a cache miss;
                // start them all now so they overlap (hints only).
                self.prefetch_op(op);
                let Some(t) = self.tables.get_mut(e.table_id as usize) else {
                    return;
                };
                // Only the copy ahead updates the shared indexes.
                let mut shared = self.matches.claim_next(self.applied);
                self.applied += 1;
                let matches = shared
                    .as_mut()
                    .and_then(|g| g.get_mut(usize::from(e.table_id)));
                let prev = t.entries.insert(e.id.into(), Arc::clone(e));
                // Keep `timed` in step before `prev` may be recycled (the
                // pool only reuses an entry whose last reference it holds).
                // Untimed entries replacing untimed ones skip it entirely.
                if e.has_timeout() {
                    self.timed.insert(e.id.into(), TimedSlot::new(e));
                } else if prev.as_ref().is_some_and(|o| o.has_timeout()) {
                    self.timed.remove(e.id.into());
                }
                match prev {
                    // A MODIFY, or an ADD replacing an identical entry: the
                    // classifier's rule (match, priority, id) is unchanged,
                    // so only the entry pointers are swapped. Leaving the
                    // classifier alone also keeps its compiled snapshot.
                    Some(old) if old.priority == e.priority && old.matcher == e.matcher => {
                        if let Some(m) = matches {
                            m.replace(&old, e);
                        }
                        drop(shared);
                        self.pool.recycle(old);
                    }
                    // Same id, new match or priority: re-index in general.
                    Some(old) => {
                        t.classifier.insert(e.matcher.to_rule(e.id, e.priority));
                        if let Some(m) = matches {
                            m.remove(&old);
                            m.insert(e);
                        }
                    }
                    None => {
                        t.classifier.insert(e.matcher.to_rule(e.id, e.priority));
                        if let Some(m) = matches {
                            m.insert(e);
                            // A new rule: later ADDs are likely shaped alike.
                            m.prepare_for(&e.matcher, e.priority);
                        }
                        self.index.insert(e.id.into(), e.table_id);
                    }
                }
                if e.id >= self.next_id {
                    self.next_id = e.id.wrapping_add(1);
                }
            }
            PipelineOp::Remove { table_id, id } => {
                // As for inserts: overlap the misses of every structure.
                self.prefetch_op(op);
                let Some(t) = self.tables.get_mut(*table_id as usize) else {
                    return;
                };
                let mut shared = self.matches.claim_next(self.applied);
                self.applied += 1;
                if let Some(old) = t.entries.remove(u64::from(*id)) {
                    if old.has_timeout() {
                        self.timed.remove(u64::from(*id));
                    }
                    if let Some(m) = shared
                        .as_mut()
                        .and_then(|g| g.get_mut(usize::from(*table_id)))
                    {
                        m.remove(&old);
                    }
                    drop(shared);
                    t.classifier.discard(*id);
                    self.index.remove(u64::from(*id));
                    self.pool.recycle(old);
                }
            }
            PipelineOp::Batch(ops) => {
                for op in ops {
                    self.apply(op);
                }
            }
            PipelineOp::Compile => {
                for t in &mut self.tables {
                    if !t.classifier.is_empty() && !t.classifier.is_compiled() {
                        t.classifier.compile();
                    }
                }
            }
            // The op keeps its builds (the other copy installs them too):
            // a FIB is copied in.
            PipelineOp::Install(built) => self.install_each(built.iter().cloned()),
            PipelineOp::Group(op) => self.groups.apply(op),
            PipelineOp::Meter(op) => self.meters.apply(op),
        }
    }

    /// The group table.
    pub fn groups(&self) -> &GroupTable {
        &self.groups
    }

    /// Resolve a GROUP_MOD (§6.5) into an op: the group change and, for a
    /// DELETE, the removal of every flow entry that forwards to a deleted
    /// group (listed in the effect's `removed`, reported with reason
    /// `OFPRR_GROUP_DELETE`). Bucket actions are validated as a
    /// flow-mod's, bar prerequisites ([`validate_bucket_actions`]).
    pub fn prepare_group_mod(
        &self,
        gm: &GroupMod,
        now_ns: u64,
    ) -> Result<(PipelineOp, FlowModEffect), GroupError> {
        let exists = |g: u32| self.groups.get(g).is_some();
        let op = self.groups.prepare(gm, now_ns, &|actions| {
            validate_bucket_actions(actions, &exists)
        })?;
        let mut effect = FlowModEffect::default();
        let mut ops = Vec::new();
        if let GroupOp::Delete(ids) = &op {
            for &id in ids {
                let mut filter = FlowFilter::all();
                filter.out_group = id;
                for e in self.select(&filter) {
                    // A flow using two deleted groups is removed once.
                    if effect.removed.iter().any(|r| r.id == e.id) {
                        continue;
                    }
                    ops.push(PipelineOp::Remove {
                        table_id: e.table_id,
                        id: e.id,
                    });
                    effect.removed.push(Arc::clone(e));
                }
            }
        }
        ops.push(PipelineOp::Group(op));
        Ok((Self::one_op(ops), effect))
    }

    /// The op recording `port`'s liveness for the groups' buckets, or
    /// `None` when nothing changes.
    pub fn prepare_port_live(&self, port: u32, live: bool) -> Option<PipelineOp> {
        self.groups.port_live_op(port, live).map(PipelineOp::Group)
    }

    /// How many flow entries reference group `id` (its stats' `ref_count`).
    pub fn group_ref_count(&self, id: u32) -> u32 {
        let mut filter = FlowFilter::all();
        filter.out_group = id;
        self.select(&filter).len().try_into().unwrap_or(u32::MAX)
    }

    /// The meter table.
    pub fn meters(&self) -> &MeterTable {
        &self.meters
    }

    /// Resolve a METER_MOD (§6.6) at `now_ns` (the workers' metering
    /// clock) into an op: the meter change ([`MeterTable::prepare`], whose
    /// `OFPMMFC_*` code is the answer on refusal) and, for a DELETE, the
    /// removal of every flow entry whose Meter instruction names a deleted
    /// meter (§6.6: "If a meter is removed, all flow entries using that
    /// meter are also removed"; listed in the effect's `removed`, reported
    /// with reason `OFPRR_METER_DELETE`).
    pub fn prepare_meter_mod(
        &self,
        mm: &offlow_openflow::MeterMod,
        now_ns: u64,
    ) -> Result<(PipelineOp, FlowModEffect), offlow_openflow::MeterModFailedCode> {
        let op = self.meters.prepare(mm, now_ns)?;
        let mut effect = FlowModEffect::default();
        let mut ops = Vec::new();
        if let MeterOp::Delete(ids) = &op {
            if !ids.is_empty() {
                // One pass over every entry (sorted by id): a flow names at
                // most one meter, so it is removed at most once.
                for e in self.select(&FlowFilter::all()) {
                    if e.program
                        .meter
                        .is_some_and(|m| ids.binary_search(&m).is_ok())
                    {
                        ops.push(PipelineOp::Remove {
                            table_id: e.table_id,
                            id: e.id,
                        });
                        effect.removed.push(Arc::clone(e));
                    }
                }
            }
        }
        ops.push(PipelineOp::Meter(op));
        Ok((Self::one_op(ops), effect))
    }

    /// How many flow entries have a Meter instruction naming meter `id`
    /// (its stats' `flow_count`): a scan of every entry, done per stats
    /// request.
    pub fn meter_flow_count(&self, id: u32) -> u32 {
        let n = self
            .tables
            .iter()
            .flat_map(|t| t.entries.values())
            .filter(|e| e.program.meter == Some(id))
            .count();
        n.try_into().unwrap_or(u32::MAX)
    }

    /// Install each `(table, build)`; a FIB held nowhere else moves in.
    fn install_each(&mut self, built: impl IntoIterator<Item = (u8, Built)>) {
        for (table_id, b) in built {
            if let Some(t) = self.tables.get_mut(usize::from(table_id)) {
                t.classifier.install_owned(b);
            }
        }
    }

    /// Build what [`PipelineOp::Compile`] would for every table that needs
    /// it, without changing anything; apply the result as
    /// [`PipelineOp::Install`] (to this pipeline, and to any copy equal to
    /// it).
    pub fn build_compiled(&self) -> Vec<(u8, Built)> {
        self.compile_inputs()
            .into_iter()
            .map(|(t, input)| (t, input.build()))
            .collect()
    }

    /// What [`build_compiled`](Self::build_compiled) reads, copied out, for
    /// a build on another thread ([`BuildInput::build`] each, then
    /// [`PipelineOp::Install`]). Install only into a pipeline whose
    /// [`mutation_count`](Self::mutation_count) is still what it was when
    /// this was taken: the builds then describe its exact rules.
    pub fn compile_inputs(&self) -> Vec<(u8, BuildInput)> {
        self.tables
            .iter()
            .enumerate()
            .filter(|(_, t)| !t.classifier.is_empty() && !t.classifier.is_compiled())
            // At most 255 tables.
            .filter_map(|(i, t)| Some((i as u8, t.classifier.build_input()?)))
            .collect()
    }

    /// A count that moves with every rule insert or removal in any table
    /// (the sum of the tables' classifier generations): an owner that sees
    /// it unchanged for a while knows the tables are quiet.
    pub fn mutation_count(&self) -> u64 {
        self.tables
            .iter()
            .fold(0u64, |n, t| n.wrapping_add(t.classifier.generation()))
    }

    /// What serves lookups in each non-empty table (`"rfc"`, `"fib"` or
    /// `"tuple"`), for diagnostics and `offlow trace`.
    pub fn table_structures(&self) -> Vec<(u8, &'static str)> {
        self.tables
            .iter()
            .enumerate()
            .filter(|(_, t)| !t.classifier.is_empty())
            // At most 255 tables.
            .map(|(i, t)| (i as u8, t.classifier.serving()))
            .collect()
    }

    /// For each table an RFC snapshot serves: what changed since it was
    /// built (rules removed, served beside it, recognised when inserted
    /// again), for diagnostics.
    pub fn table_overlays(&self) -> Vec<(u8, OverlayStats)> {
        self.tables
            .iter()
            .enumerate()
            // At most 255 tables.
            .filter_map(|(i, t)| Some((i as u8, t.classifier.overlay()?)))
            .collect()
    }

    /// The bits of a key that `res`'s walk depended on: the union of the
    /// masks of every rule in every table it visited (the tables of its
    /// path, and the table it missed in). Every key equal to the walked
    /// one on these bits takes the same walk: the same rule in each table,
    /// so the same instructions and the same actions (by induction along
    /// the path: the first table's decision is the same, its set-fields
    /// write the same values, so the next table sees keys that still
    /// differ only outside the mask; property-tested). Only the decision
    /// is the same: what the executor does per packet with it (a select
    /// group's bucket by flow hash, a TTL that expires, a meter) still
    /// depends on the packet.
    ///
    /// Cheap on the copy that applies ops first (the writer of a
    /// left-right pair: the union is kept in the shared match indexes);
    /// a copy that is behind builds its indexes for the call.
    pub fn walk_mask(&self, res: &Resolution) -> FlowMask {
        let indexes = self.indexes();
        res.path
            .iter()
            .map(|s| s.table_id)
            .chain(res.miss_table())
            .filter_map(|t| indexes.get(usize::from(t)))
            .fold(FlowKey::ZERO, |u, ix| u.union(ix.mask_union()))
    }

    /// Resolve `key` through the pipeline (allocating a new [`Resolution`]).
    pub fn lookup(&self, key: &FlowKey) -> Resolution {
        let mut res = Resolution::default();
        self.lookup_into(key, &mut res);
        res
    }

    /// Resolve `key` into `res`, reusing its buffers (no allocation once
    /// they have grown).
    pub fn lookup_into(&self, key: &FlowKey, res: &mut Resolution) {
        res.start();
        // The entry whose Write-Actions put the set's output there, if it
        // is an output to CONTROLLER.
        let mut set_origin = None;
        let mut w = WorkingKey::new(*key);
        let mut table_id = 0u8;
        let last = loop {
            let Some(table) = self.tables.get(table_id as usize) else {
                // Unreachable: goto targets are validated against n_tables.
                res.outcome = Outcome::Miss { table_id };
                return;
            };
            let entry = table
                .classifier
                .lookup(&w.key)
                .and_then(|id| table.entries.get(id.into()));
            let Some(e) = entry else {
                res.outcome = Outcome::Miss { table_id };
                res.set.clear();
                return;
            };
            res.step(table_id, e, &mut set_origin, |a| w.apply(a));
            if let Some((v, m)) = e.program.write_metadata {
                let md = w.key.get(Field::Metadata) as u64;
                w.key.set(Field::Metadata, ((md & !m) | v) as u128);
            }
            match e.program.goto {
                Some(next) => table_id = next,
                None => break e,
            }
        };
        res.finish(last, table_id, set_origin);
    }

    /// Rebuild into `res` the resolution of a walk that takes the steps of
    /// `path` (a path this pipeline, or an older version of it, resolved)
    /// with today's programs, without looking anything up: each step's
    /// program must lead to the next step's table, and the walk must end
    /// (no Goto-Table) at the rule `end`, at or before the path's end.
    /// False, with `res` unspecified, when it does not, or a step's rule is
    /// gone.
    ///
    /// What it is for: after a MODIFY of `end`'s instructions, every key
    /// whose walk reached `end` still does (the tables and programs before
    /// it are unchanged, and `end`'s match is), and since `end` now ends the
    /// walk, what follows it no longer depends on the key. So a cached
    /// decision through `end` can be rebuilt from its path alone, for all
    /// of its keys at once. The action list is built exactly as
    /// [`lookup_into`](Self::lookup_into) builds it.
    pub fn resolve_along(&self, path: &[PathStep], end: RuleId, res: &mut Resolution) -> bool {
        res.start();
        let mut set_origin = None;
        let mut table_id = 0u8;
        let mut steps = path.iter();
        let last = loop {
            let Some(step) = steps.next().filter(|s| s.table_id == table_id) else {
                return false;
            };
            let Some(e) = self
                .tables
                .get(usize::from(table_id))
                .and_then(|t| t.entries.get(step.rule.into()))
            else {
                return false;
            };
            // The key is not needed: nothing is looked up.
            res.step(table_id, e, &mut set_origin, |_| {});
            match e.program.goto {
                Some(next) => table_id = next,
                None => break e,
            }
        };
        if last.id != end {
            return false;
        }
        res.finish(last, table_id, set_origin);
        true
    }

    /// Credit `packets` / `bytes` to every rule of `path` and to the tables
    /// it visited; `miss_table` (a table that missed) counts a lookup only.
    /// Rules removed since the lookup are skipped.
    pub fn credit(&self, path: &[PathStep], miss_table: Option<u8>, packets: u64, bytes: u64) {
        for step in path {
            if let Some(t) = self.tables.get(step.table_id as usize) {
                t.counters.add(packets, packets);
                if let Some(e) = t.entries.get(step.rule.into()) {
                    let pk = if e.flags.has(FlowModFlags::NO_PKT_COUNTS) {
                        0
                    } else {
                        packets
                    };
                    let by = if e.flags.has(FlowModFlags::NO_BYT_COUNTS) {
                        0
                    } else {
                        bytes
                    };
                    e.counters.add(pk, by);
                }
            }
        }
        if let Some(t) = miss_table.and_then(|t| self.tables.get(t as usize)) {
            t.counters.add(packets, 0);
        }
    }

    /// Credit a resolution's path (see [`Pipeline::credit`]).
    pub fn credit_resolution(&self, res: &Resolution, packets: u64, bytes: u64) {
        self.credit(&res.path, res.miss_table(), packets, bytes);
    }

    /// Flow statistics of the entries `filter` selects (non-strict unless the
    /// filter says otherwise), ordered by table, then priority (highest
    /// first), then id.
    pub fn dump(&self, filter: &FlowFilter) -> Vec<FlowStats> {
        let mut sel = self.select(filter);
        sel.sort_unstable_by_key(|e| (e.table_id, core::cmp::Reverse(e.priority), e.id));
        sel.into_iter()
            .map(|e| {
                let (packets, bytes) = e.counters.get();
                FlowStats {
                    id: e.id,
                    table_id: e.table_id,
                    priority: e.priority,
                    matcher: e.matcher,
                    cookie: e.cookie,
                    flags: e.flags,
                    idle_timeout: e.idle_timeout,
                    hard_timeout: e.hard_timeout,
                    installed_at_ns: e.installed_at_ns,
                    packets,
                    bytes,
                    instructions: e.instructions.clone(),
                }
            })
            .collect()
    }

    /// Statistics of every table.
    pub fn table_stats(&self) -> Vec<TableStats> {
        self.tables
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let (lookup_count, matched_count) = t.counters.get();
                TableStats {
                    // At most 255 tables.
                    table_id: i as u8,
                    // A table cannot hold more than 2^32 entries (ids are u32).
                    active_count: t.entries.len() as u32,
                    lookup_count,
                    matched_count,
                }
            })
            .collect()
    }
}

impl Pipeline {
    /// The counters of table `table_id` (shared by the copies of a
    /// left-right pair), for callers that aggregate credits themselves.
    pub fn table_counters(&self, table_id: u8) -> Option<&Arc<TableCounters>> {
        self.tables.get(table_id as usize).map(|t| &t.counters)
    }
}
