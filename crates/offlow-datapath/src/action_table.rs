//! The Action Table (FlowShadow): one worker's interned pipeline decisions.
//!
//! # What
//! The pipeline resolves a key to a *path* (the rule matched in each table
//! it visited) and a final action list. Given the path, the action list is
//! fixed: it is built only from those rules' instructions. So decisions are
//! interned by path: every microflow whose packets take the same path shares
//! one [`ActionEntry`], which holds the actions, the path (whose rules'
//! counters a cached packet feeds) and the table that missed, if any.
//!
//! A microflow cache entry stores an [`ActionRef`]: a slot index plus the
//! slot's generation. Freeing a slot bumps its generation, so every cache
//! entry still pointing at it stops resolving ([`ActionTable::get`] returns
//! `None`) without touching the cache: invalidation never walks the cache.
//!
//! # Invalidation
//! Each entry depends on the rules of its path and, when its pipeline walk
//! ended in a table with no matching rule, on that table's *miss* (a new rule
//! there may now match). [`Dep`] names both. [`ActionTable::invalidate`]
//! frees exactly the entries depending on one `Dep`, found through a reverse
//! index (dep → entries), so one rule change costs in proportion to what
//! depended on it, never a cache flush. [`ActionTable::rebuild`] walks the
//! same index for a MODIFY, and gives each entry its new decision in place
//! when its path alone determines it (see `worker`).
//!
//! # Filters (re-checking instead of freeing on a rule ADD)
//! A new rule `N` in table `t` can only change the decision of a key that
//! reaches `t` and matches `N`. So for the deps an ADD shadows,
//! [`ActionTable::add_filter`] does not free the dependents outright: an
//! entry whose path reached `t` with the packet's own key (no earlier table
//! on its path rewrote a field or the metadata, computed at intern time and
//! stored as [`ActionEntry::pure_steps`]) keeps living with `N`'s match
//! appended to its *filters*; any other entry is freed as before, and so is
//! one that would exceed [`MAX_FILTERS`]. Filters are stored once per ADD in
//! the table's ring ([`FILTER_RING`] rules); an entry holds sequence numbers
//! into it. A microflow's cached value ([`CachedRef`]) remembers how many of
//! its entry's filters its key has been checked against;
//! [`ActionTable::count_checked`] checks only the newer ones, and reports a
//! match (or a filter that has left the ring) so the caller re-resolves.
//! See `worker` for the correctness argument.
//!
//! # Counters
//! A cached packet must credit the same rule and table counters the pipeline
//! would have. Crediting shared atomics per packet would put shared writes on
//! the hot path, so `ActionTable::count_checked` accumulates per entry, worker
//! locally, and [`ActionTable::drain_counts`] hands the sums to the caller
//! in bulk (the worker decides when; see `worker`). The credit targets are
//! resolved at intern time, so a flush never looks anything up.
//!
//! # Steering
//! An entry whose actions hold [`Action::SetWorkers`] records its mask once,
//! at intern time ([`ActionEntry::workers`]), so the worker's hit path tests
//! one field already in cache. A configured steering table ([`crate::SteeringTable`]) can also give a
//! mask, per key rather than per path: such decisions are interned by path
//! *and* that mask ([`ActionTable::intern_steered`]), so every microflow
//! sharing an entry shares its effective mask. A mask in the actions wins
//! over the configured one. A packet handed to another worker must not
//! be credited here: [`ActionTable::uncount`] takes back the count the hit
//! (or the miss) just added, before any flush can see it.
//!
//! # Invariants
//! - A live slot's generation equals the generation in every `ActionRef`
//!   handed out for it since it was last allocated; a freed slot's
//!   generation has moved on, so stale refs miss.
//! - `by_path` maps exactly the live unsteered entries' paths to their
//!   slots, `by_steered` the configuration-steered ones' (path, mask): no
//!   two live entries share one (a rebuild onto a held path frees instead).
//! - A live entry is listed under every dep it has in `by_dep` (lists may
//!   also hold refs to since-freed entries; they are skipped by generation).
//! - An entry is freed only with zero pending counts: [`ActionTable::invalidate`]
//!   and [`ActionTable::add_filter`] hand a freed entry's pending counts to
//!   their `credit` callback first; every other free needs the caller to
//!   drain first (checked in debug builds).
//! - A live entry's filters are sequence numbers of filters added since it
//!   was interned, increasing, at most [`MAX_FILTERS`] of them; they only
//!   grow while the entry lives, so a filter count is a valid "checked up
//!   to" mark for as long as the ref's generation matches.
//!
//! # Thread-safety
//! Owned by one worker (`Send`, not shared); no atomics inside.

use std::sync::Arc;

use offlow_classifier::Rule;
use offlow_flow::FlowKey;
use offlow_pipeline::{
    Action, FlowCounters, Outcome, PacketInOrigin, PathStep, Program, Resolution, RuleId,
};
use offlow_sync::IdMap;

/// Filters an entry may carry; one more frees it (a hit then checks at most
/// this many matches once per microflow). A default route collects one per
/// prefix ADD, so the bound sets how often its flows all re-resolve:
/// measured in `offlow bench update`, 3.5 re-resolutions per update at 32,
/// 2.2 at 128.
pub const MAX_FILTERS: usize = 128;

/// Filters kept by an Action Table's ring. An entry whose filter has left the ring
/// cannot be checked against it; its microflows are re-resolved (correct,
/// just the cost of the old behaviour).
pub const FILTER_RING: usize = 4096;

/// Where a cached packet's credit for one path step goes: the rule's
/// counters (shared with the pipeline entry) and whether the rule counts
/// packets and bytes (its `NO_PKT_COUNTS` / `NO_BYT_COUNTS` flags). `None`
/// when the rule is unknown (it cannot be: the path comes from the same
/// version).
pub type RuleCredit = Option<(Arc<FlowCounters>, bool, bool)>;

/// What an [`ActionEntry`] depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dep {
    /// The rule with this id (its instructions, or its existence).
    Rule(RuleId),
    /// A table missing: no rule matched there (a rule added to the table may
    /// now match).
    Miss(u8),
    /// Any lookup in this table, matched or missed (an ADD that overlaps
    /// too many entries to list shadows the whole table; see
    /// `FlowModEffect::shadowed_all`).
    Table(u8),
}

/// A reference from the microflow cache into the Action Table: slot and the
/// slot's generation. Two `u32`s (alignment 4), so a [`CachedRef`] with its
/// check mark still fits an `Option` in 16 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ActionRef {
    slot: u32,
    generation: u32,
}

impl ActionRef {
    fn new(slot: u32, generation: u32) -> ActionRef {
        ActionRef { slot, generation }
    }

    /// The slot index.
    pub fn slot(self) -> u32 {
        self.slot
    }

    fn generation(self) -> u32 {
        self.generation
    }
}

/// What the microflow cache stores: the decision and how many of its
/// filters this microflow's key has been checked against (none matched).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CachedRef {
    /// The decision.
    pub action: ActionRef,
    /// Filters of the entry already checked for this key.
    pub checked: u32,
}

// The microflow cache keeps a value in its entry's 64-byte hot line only
// if `Option<value>` takes at most 16 bytes (see `microflow::Slot`).
const _: () = assert!(core::mem::size_of::<Option<CachedRef>>() <= 16);

/// What [`ActionTable::count_checked`] found for a cached microflow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HitCheck {
    /// The entry is valid for the key and the packet was counted; `checked`
    /// is the entry's filter count (store it back if it changed).
    Served {
        /// The new check mark.
        checked: u32,
    },
    /// The entry was freed: re-resolve.
    Dead,
    /// The key matches a filter added since it was checked (or a filter it
    /// must be checked against has left the ring): re-resolve. Not counted.
    Filtered,
}

/// Does `program` leave the key the next table sees unchanged? Conservative:
/// any field rewrite, tag push/pop or metadata write says no.
pub fn preserves_key(program: &Program) -> bool {
    program.write_metadata.is_none()
        && program.apply.iter().all(|a| {
            !matches!(
                a,
                Action::SetField(..)
                    | Action::PushVlan(_)
                    | Action::PopVlan
                    | Action::PushMpls(_)
                    | Action::PopMpls(_)
                    | Action::PushPbb(_)
                    | Action::PopPbb
            )
        })
}

/// The table's ring of filter rules, indexed by sequence number.
#[derive(Debug, Default)]
struct FilterRing {
    /// `(seq, rule)`; slot `seq % FILTER_RING`.
    slots: Vec<(u64, Rule)>,
    /// Next sequence number (starts at 1: 0 is never a valid filter).
    next: u64,
}

impl FilterRing {
    fn push(&mut self, rule: &Rule) -> u64 {
        self.next = self.next.max(1);
        let seq = self.next;
        self.next += 1;
        let i = ring_index(seq);
        if i < self.slots.len() {
            self.slots[i] = (seq, rule.clone());
        } else {
            // Slots fill in order 0, 1, ... (seq 1, 2, ...), so
            // `i == slots.len()` here until the ring is full.
            self.slots.push((seq, rule.clone()));
        }
        seq
    }

    fn get(&self, seq: u64) -> Option<&Rule> {
        let (s, r) = self.slots.get(ring_index(seq))?;
        (*s == seq).then_some(r)
    }
}

/// Ring slot of filter `seq` (sequence numbers start at 1).
fn ring_index(seq: u64) -> usize {
    // Below FILTER_RING, so the cast cannot truncate.
    (seq.wrapping_sub(1) % FILTER_RING as u64) as usize
}

/// The common action lists, recognised once so the worker can skip the
/// general executor for them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Shape {
    /// Anything else: run the executor (a metered list is always here:
    /// the meter decides per packet whether it passes, and may remark it).
    #[default]
    General,
    /// No action: the packet is dropped.
    Drop,
    /// One Output to this physical port, nothing else.
    Output(u32),
}

impl Shape {
    fn of(actions: &[Action]) -> Shape {
        // Steering is decided before execution and does nothing to the
        // frame, so it does not make a list general.
        let mut rest = actions
            .iter()
            .filter(|a| !matches!(a, Action::SetWorkers(_)));
        match (rest.next(), rest.next()) {
            (None, _) => Shape::Drop,
            (Some(Action::Output { port, .. }), None) if port.is_physical() => {
                Shape::Output(port.0)
            }
            _ => Shape::General,
        }
    }
}

/// The worker mask a decision carries: its last [`Action::SetWorkers`]
/// (a later one overrides an earlier one, as in the executor's "last
/// set-queue wins"). A zero mask (refused at validation) means no steering.
pub fn workers_of(actions: &[Action]) -> Option<u64> {
    actions
        .iter()
        .rev()
        .find_map(|a| match a {
            Action::SetWorkers(m) => Some(*m),
            _ => None,
        })
        .filter(|&m| m != 0)
}

/// One interned decision.
#[derive(Debug, Clone, Default)]
pub struct ActionEntry {
    generation: u32,
    live: bool,
    /// The final action list (Apply-Actions in order, then the action set).
    pub actions: Box<[Action]>,
    /// The flow entry behind each output to CONTROLLER in `actions`
    /// (`Resolution::origins`; empty, unallocated, for most decisions).
    pub origins: Box<[PacketInOrigin]>,
    /// [`crate::last_frame_write`] of `actions`, computed once.
    pub last_write: Option<usize>,
    /// What kind of list `actions` is.
    pub shape: Shape,
    /// The workers allowed to process packets of this decision
    /// ([`workers_of`] `actions`, else the configured mask it was interned
    /// with; `None`: any worker).
    pub workers: Option<u64>,
    /// The configured steering mask this entry was interned with (part of
    /// its identity, with the path).
    config_workers: Option<u64>,
    /// The rules matched, table by table.
    pub path: Box<[PathStep]>,
    /// How the pipeline ended.
    pub outcome: Outcome,
    /// Per path step, where its credit goes (resolved once, at intern time,
    /// so crediting a batch needs no lookup by rule id).
    pub credits: Box<[RuleCredit]>,
    /// Leading path steps whose programs leave the key unchanged: the
    /// lookups in the tables of steps `0..=pure_steps` (and the miss table,
    /// if `pure_steps == path.len()`) saw the packet's own key.
    pub pure_steps: usize,
    /// Sequence numbers (in the table's ring) of the filters a key must not
    /// match for this decision to hold.
    filters: Vec<u64>,
    pending_packets: u64,
    pending_bytes: u64,
}

impl ActionEntry {
    /// The table that missed, if the walk ended in a table miss.
    pub fn miss_table(&self) -> Option<u8> {
        match self.outcome {
            Outcome::Miss { table_id } => Some(table_id),
            _ => None,
        }
    }

    /// Take `res`'s decision (its path is already this entry's): the
    /// actions and what is derived from them once, the outcome, the
    /// credit targets and the key-preserving prefix.
    fn set_decision(
        &mut self,
        res: &Resolution,
        credit_of: impl Fn(&PathStep) -> RuleCredit,
        keeps_key: impl Fn(&PathStep) -> bool,
    ) {
        self.actions = res.actions.as_slice().into();
        self.origins = res.origins.as_slice().into();
        self.last_write = crate::execute::last_frame_write(&self.actions);
        self.shape = Shape::of(&self.actions);
        self.workers = workers_of(&self.actions).or(self.config_workers);
        self.outcome = res.outcome;
        self.credits = res.path.iter().map(credit_of).collect();
        self.pure_steps = res
            .path
            .iter()
            .position(|p| !keeps_key(p))
            .unwrap_or(res.path.len());
    }

    /// Filters attached since the entry was interned.
    pub fn filter_count(&self) -> u32 {
        // At most MAX_FILTERS.
        self.filters.len() as u32
    }

    /// Did the lookup this entry depends on through `dep` see the packet's
    /// own key?
    fn sees_packet_key(&self, dep: Dep) -> bool {
        match dep {
            Dep::Rule(s) => self
                .path
                .iter()
                .position(|p| p.rule == s)
                .is_some_and(|i| i <= self.pure_steps),
            Dep::Miss(_) => self.path.len() <= self.pure_steps,
            Dep::Table(t) => match self.path.iter().position(|p| p.table_id == t) {
                Some(i) => i <= self.pure_steps,
                None => self.miss_table() == Some(t) && self.path.len() <= self.pure_steps,
            },
        }
    }

    fn deps(&self) -> impl Iterator<Item = Dep> + '_ {
        let tables = self
            .path
            .iter()
            .map(|s| s.table_id)
            .chain(self.miss_table())
            .map(Dep::Table);
        self.path
            .iter()
            .map(|s| Dep::Rule(s.rule))
            .chain(self.miss_table().map(Dep::Miss))
            .chain(tables)
    }
}

/// Counters of one Action Table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ActionTableStats {
    /// Entries created (a pipeline decision with a path not yet interned).
    pub interned: u64,
    /// Resolutions whose path was already interned (shared entry).
    pub shared: u64,
    /// Entries freed by [`ActionTable::invalidate`].
    pub invalidated: u64,
    /// Entries freed by [`ActionTable::collect`] (no cache entry used them).
    pub collected: u64,
    /// Whole-table resets ([`ActionTable::clear`]).
    pub clears: u64,
    /// Filters attached to live entries by [`ActionTable::add_filter`]
    /// (entries kept instead of freed).
    pub filtered: u64,
    /// Entries freed by `add_filter` (key rewritten before the table, or
    /// too many filters); also counted in `invalidated`.
    pub filter_frees: u64,
    /// Entries rebuilt in place by [`ActionTable::rebuild`] (a MODIFY of a
    /// rule on their path), their microflows kept.
    pub rebuilt: u64,
}

/// A worker's Action Table.
#[derive(Debug, Default)]
pub struct ActionTable {
    slots: Vec<ActionEntry>,
    free: Vec<u32>,
    // Keys are paths the pipeline produced (rule ids it allocated), not
    // values a peer chooses: a fast unseeded hash is enough (see IdMap).
    by_path: IdMap<Box<[PathStep]>, u32>,
    /// Entries interned with a configured steering mask, by (path, mask).
    by_steered: IdMap<(Vec<PathStep>, u64), u32>,
    /// Reused lookup key for `by_steered` (no allocation per lookup).
    steer_key: (Vec<PathStep>, u64),
    /// Reverse index; lists may hold refs to freed entries (skipped).
    by_dep: IdMap<Dep, Vec<ActionRef>>,
    /// Slots with pending counts in the current batch.
    dirty: Vec<u32>,
    /// Rules added since entries were interned, as filters.
    ring: FilterRing,
    stats: ActionTableStats,
}

impl ActionTable {
    /// An empty table.
    pub fn new() -> ActionTable {
        ActionTable::default()
    }

    /// Live entries.
    pub fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Slots allocated (live or free): every [`ActionRef::slot`] is below.
    pub fn slot_count(&self) -> usize {
        self.slots.len()
    }

    /// True when no entry is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Counters.
    pub fn stats(&self) -> ActionTableStats {
        self.stats
    }

    /// The live entry `r` refers to, or `None` if it has been freed since.
    #[inline]
    pub fn get(&self, r: ActionRef) -> Option<&ActionEntry> {
        let e = self.slots.get(r.slot() as usize)?;
        (e.live && e.generation == r.generation()).then_some(e)
    }

    /// The entry for `res`'s path, interning it if new; `credit_of` gives
    /// each path step's [`RuleCredit`] and `keeps_key` whether its rule's
    /// program leaves the key unchanged ([`preserves_key`]; say false when
    /// unsure); both are called only for a new entry. `res` must come from
    /// the pipeline version the caller currently reads (entries of older
    /// versions were invalidated or filtered before this batch began), so
    /// the decision holds for the resolved key whatever filters a shared
    /// entry carries: a microflow inserted for it is checked up to the
    /// entry's [`ActionEntry::filter_count`].
    pub fn intern(
        &mut self,
        res: &Resolution,
        credit_of: impl Fn(&PathStep) -> RuleCredit,
        keeps_key: impl Fn(&PathStep) -> bool,
    ) -> ActionRef {
        self.intern_steered(res, None, credit_of, keeps_key)
    }

    /// [`intern`](Self::intern) for a key the configured steering table
    /// gave `config_workers` (`None` or `Some(0)`: no mask): the entry is
    /// shared only by keys with the same path and the same configured mask.
    pub fn intern_steered(
        &mut self,
        res: &Resolution,
        config_workers: Option<u64>,
        credit_of: impl Fn(&PathStep) -> RuleCredit,
        keeps_key: impl Fn(&PathStep) -> bool,
    ) -> ActionRef {
        let config_workers = config_workers.filter(|&m| m != 0);
        let found = match config_workers {
            None => self.by_path.get(res.path.as_slice()).copied(),
            Some(m) => {
                self.steer_key.0.clear();
                self.steer_key.0.extend_from_slice(&res.path);
                self.steer_key.1 = m;
                self.by_steered.get(&self.steer_key).copied()
            }
        };
        if let Some(slot) = found {
            self.stats.shared += 1;
            let e = &self.slots[slot as usize];
            return ActionRef::new(slot, e.generation);
        }
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                // More than 2^32 live decisions cannot fit in memory; the
                // cast cannot truncate in practice.
                self.slots.push(ActionEntry::default());
                (self.slots.len() - 1) as u32
            }
        };
        let e = &mut self.slots[slot as usize];
        e.live = true;
        e.config_workers = config_workers;
        e.path = res.path.as_slice().into();
        e.set_decision(res, credit_of, keeps_key);
        e.filters.clear();
        e.pending_packets = 0;
        e.pending_bytes = 0;
        let r = ActionRef::new(slot, e.generation);
        for dep in e.deps() {
            self.by_dep.entry(dep).or_default().push(r);
        }
        match config_workers {
            None => {
                self.by_path.insert(e.path.clone(), slot);
            }
            Some(m) => {
                self.by_steered.insert((e.path.to_vec(), m), slot);
            }
        }
        self.stats.interned += 1;
        r
    }

    /// If `r` still refers to a live entry, add one packet of `bytes` to its
    /// pending counts and return true (the hit path: one slot access both
    /// validates and counts).
    #[inline]
    pub fn count_live(&mut self, r: ActionRef, bytes: u64) -> bool {
        let Some(e) = self.slots.get_mut(r.slot() as usize) else {
            return false;
        };
        if !e.live || e.generation != r.generation() {
            return false;
        }
        if e.pending_packets == 0 {
            self.dirty.push(r.slot());
        }
        e.pending_packets += 1;
        e.pending_bytes += bytes;
        true
    }

    /// The hit path with filters: if `c` still refers to a live entry and
    /// `key` matches none of the entry's filters after the first
    /// `c.checked`, count one packet of `bytes` and return
    /// [`HitCheck::Served`]. An entry without new filters costs the same
    /// single slot access as [`count_live`](Self::count_live).
    #[inline]
    pub fn count_checked(&mut self, c: CachedRef, key: &FlowKey, bytes: u64) -> HitCheck {
        let r = c.action;
        let Some(e) = self.slots.get_mut(r.slot() as usize) else {
            return HitCheck::Dead;
        };
        if !e.live || e.generation != r.generation() {
            return HitCheck::Dead;
        }
        let n = e.filters.len();
        if n != c.checked as usize && any_filter_matches(&self.ring, &e.filters, c.checked, key) {
            return HitCheck::Filtered;
        }
        if e.pending_packets == 0 {
            self.dirty.push(r.slot());
        }
        e.pending_packets += 1;
        e.pending_bytes += bytes;
        // n <= MAX_FILTERS.
        HitCheck::Served { checked: n as u32 }
    }

    /// Whether the entries take more than half a megabyte, a typical L2
    /// (1 MiB here): past that, hits start to miss and prefetching them
    /// pays.
    #[inline]
    pub fn outgrows_l2(&self) -> bool {
        self.slots.len() > (512 << 10) / std::mem::size_of::<ActionEntry>()
    }

    /// Start loading the lines a hit on each of `hits` reads: all of the
    /// entry's (a hint: no effect on what any method returns). A hit's
    /// fields are spread over the entry; laying them out on one line by
    /// hand cost ~1% with the table in L2, for no gain here. Called once per
    /// chunk, by the worker's loop for tables that outgrow L2 only.
    #[inline(never)]
    pub fn prefetch_hits(&self, hits: &[Option<CachedRef>]) {
        let size = std::mem::size_of::<ActionEntry>();
        for c in hits.iter().flatten() {
            if let Some(e) = self.slots.get(c.action.slot() as usize) {
                let first = std::ptr::from_ref(e).cast::<u8>();
                for off in (0..size).step_by(64).chain([size - 1]) {
                    offlow_sync::prefetch(first.wrapping_add(off));
                }
            }
        }
    }

    /// Take back one packet of `bytes` that [`count_live`](Self::count_live)
    /// or [`count_checked`](Self::count_checked) just counted on `r` in
    /// this batch (the packet went to another worker, which counts it).
    #[inline]
    pub fn uncount(&mut self, r: ActionRef, bytes: u64) {
        if let Some(e) = self.slots.get_mut(r.slot() as usize) {
            // A slot left at zero stays in `dirty`; draining skips it.
            e.pending_packets = e.pending_packets.saturating_sub(1);
            e.pending_bytes = e.pending_bytes.saturating_sub(bytes);
        }
    }

    /// The entry in `r`'s slot without the liveness check: for a ref just
    /// validated by [`count_live`](Self::count_live) or returned by
    /// [`intern`](Self::intern). `None` only for a slot never allocated.
    #[inline]
    pub fn entry(&self, r: ActionRef) -> Option<&ActionEntry> {
        self.slots.get(r.slot() as usize)
    }

    /// Entries counted since the last [`drain_counts`](Self::drain_counts)
    /// (an upper bound: one taken back to zero still counts).
    #[inline]
    pub fn dirty_len(&self) -> usize {
        self.dirty.len()
    }

    /// Hand every entry with pending counts to `credit` as
    /// `(entry, packets, bytes)` and zero them.
    pub fn drain_counts(&mut self, mut credit: impl FnMut(&ActionEntry, u64, u64)) {
        for slot in self.dirty.drain(..) {
            let e = &mut self.slots[slot as usize];
            if e.pending_packets != 0 {
                credit(e, e.pending_packets, e.pending_bytes);
                e.pending_packets = 0;
                e.pending_bytes = 0;
            }
        }
    }

    /// Hand `slot`'s pending counts to `credit` and zero them: what an
    /// entry still holds is credited before the entry is freed.
    fn settle(&mut self, slot: u32, credit: &mut impl FnMut(&ActionEntry, u64, u64)) {
        let e = &mut self.slots[slot as usize];
        if e.pending_packets != 0 {
            credit(e, e.pending_packets, e.pending_bytes);
            // The slot stays in `dirty`; draining skips a zero count.
            e.pending_packets = 0;
            e.pending_bytes = 0;
        }
    }

    fn free_slot(&mut self, slot: u32) {
        let e = &mut self.slots[slot as usize];
        debug_assert!(e.live && e.pending_packets == 0);
        e.live = false;
        e.generation = e.generation.wrapping_add(1);
        let path = std::mem::take(&mut e.path);
        // Keep the filter list's capacity for the slot's next entry.
        e.filters.clear();
        e.actions = Box::default();
        e.credits = Box::default();
        match e.config_workers.take() {
            None => {
                self.by_path.remove(&path);
            }
            Some(m) => {
                self.by_steered.remove(&(path.into_vec(), m));
            }
        }
        self.free.push(slot);
    }

    /// Free every entry that depends on `dep`, handing each one's pending
    /// counts to `credit` as `(entry, packets, bytes)` first; returns how
    /// many. Call only between batches. Only the freed entries are
    /// credited, so a catch-up after a small change costs the worker no
    /// drain of the whole table.
    pub fn invalidate(
        &mut self,
        dep: Dep,
        mut credit: impl FnMut(&ActionEntry, u64, u64),
    ) -> usize {
        let Some(refs) = self.by_dep.remove(&dep) else {
            return 0;
        };
        let mut n = 0;
        for r in refs {
            if self.get(r).is_some() {
                self.settle(r.slot(), &mut credit);
                self.free_slot(r.slot());
                n += 1;
            }
        }
        self.stats.invalidated += n as u64;
        n
    }

    /// The instructions of `rule` changed (a MODIFY; its match did not).
    /// Every entry depending on it is rebuilt in place when `resolve` can
    /// give its new resolution from its path alone (it fills the scratch
    /// `res` and returns true: see `Pipeline::resolve_along`), and freed
    /// otherwise; either way its pending counts go to `credit` first, to
    /// the rules of the old path. A rebuilt entry keeps its slot and
    /// generation, so its microflows keep hitting it, and its filters (a
    /// filter only ever sends a key back to the pipeline); its actions,
    /// path, outcome, credit targets and steering mask are the new
    /// resolution's. Returns `(rebuilt, freed)`. Call only between batches.
    ///
    /// The new path is a prefix of the old one (the walk ended at `rule`),
    /// so the entry's reverse-index lists already hold it; those of steps
    /// it no longer takes keep it too, which costs at most an early free.
    /// When the new path is already another entry's, the entry is freed
    /// instead: its microflows re-resolve and share that one.
    pub fn rebuild(
        &mut self,
        rule: RuleId,
        res: &mut Resolution,
        mut resolve: impl FnMut(&[PathStep], &mut Resolution) -> bool,
        credit_of: impl Fn(&PathStep) -> RuleCredit,
        keeps_key: impl Fn(&PathStep) -> bool,
        mut credit: impl FnMut(&ActionEntry, u64, u64),
    ) -> (usize, usize) {
        let (mut rebuilt, mut freed) = (0, 0);
        self.retain_dependents(Dep::Rule(rule), |t, r| {
            let ok = resolve(&t.slots[r.slot() as usize].path, res)
                && !t.path_held_elsewhere(r.slot(), &res.path);
            t.settle(r.slot(), &mut credit);
            if !ok {
                t.free_slot(r.slot());
                freed += 1;
                return false;
            }
            t.refill(r.slot(), res, &credit_of, &keeps_key);
            rebuilt += 1;
            true
        });
        self.stats.rebuilt += rebuilt as u64;
        self.stats.invalidated += freed as u64;
        (rebuilt, freed)
    }

    /// Visit each live entry listed under `dep`; keep listed those `visit`
    /// returns true for (it may change the entry, or free it and return
    /// false). Refs to entries freed earlier are dropped.
    fn retain_dependents(
        &mut self,
        dep: Dep,
        mut visit: impl FnMut(&mut ActionTable, ActionRef) -> bool,
    ) {
        let Some(refs) = self.by_dep.get_mut(&dep) else {
            return;
        };
        let mut refs = std::mem::take(refs);
        let mut kept = 0;
        for k in 0..refs.len() {
            let r = refs[k];
            if self.get(r).is_some() && visit(self, r) {
                refs[kept] = r;
                kept += 1;
            }
        }
        refs.truncate(kept);
        if refs.is_empty() {
            self.by_dep.remove(&dep);
        } else {
            self.by_dep.insert(dep, refs);
        }
    }

    /// Is `path` another live entry's (with `slot`'s configured mask)? A
    /// rebuild onto it is not made: two entries would hold one decision,
    /// and the one no new microflow finds would only collect filters (an
    /// experiment that moved a deleted rule's decisions to its successor's
    /// path let such entries pile up under a broad rule and took 5x the
    /// filters). Freed instead, its microflows re-resolve and share the
    /// other.
    fn path_held_elsewhere(&mut self, slot: u32, path: &[PathStep]) -> bool {
        let e = &self.slots[slot as usize];
        if *e.path == *path {
            return false;
        }
        let other = match e.config_workers {
            None => self.by_path.get(path).copied(),
            Some(m) => {
                self.steer_key.0.clear();
                self.steer_key.0.extend_from_slice(path);
                self.steer_key.1 = m;
                self.by_steered.get(&self.steer_key).copied()
            }
        };
        other.is_some_and(|o| o != slot)
    }

    /// Give the live entry in `slot` (no pending counts) the decision
    /// `res`, keeping its identity: slot, generation, filters, configured
    /// mask.
    fn refill(
        &mut self,
        slot: u32,
        res: &Resolution,
        credit_of: impl Fn(&PathStep) -> RuleCredit,
        keeps_key: impl Fn(&PathStep) -> bool,
    ) {
        let e = &mut self.slots[slot as usize];
        let cut = *e.path != *res.path;
        if cut {
            match e.config_workers {
                None => {
                    self.by_path.remove(&e.path);
                }
                Some(m) => {
                    self.by_steered.remove(&(e.path.to_vec(), m));
                }
            }
            e.path = res.path.as_slice().into();
            // No other entry holds the new path (`path_held_elsewhere`).
            match e.config_workers {
                None => {
                    self.by_path.insert(e.path.clone(), slot);
                }
                Some(m) => {
                    self.by_steered.insert((e.path.to_vec(), m), slot);
                }
            }
        }
        e.set_decision(res, credit_of, keeps_key);
    }

    /// A rule was added (`rule`, with its priority) and may now take keys
    /// from the entries depending on `shadowed` (the overlapped rules of
    /// its table with priority <= its own, and that table's miss). Each such
    /// entry whose lookup at that table saw the packet's own key gets `rule`
    /// as a filter; the others, and entries already holding
    /// [`MAX_FILTERS`], are freed, their pending counts handed to `credit`
    /// first (as in [`invalidate`](Self::invalidate)). Returns how many were
    /// freed. Call only between batches.
    pub fn add_filter(
        &mut self,
        rule: &Rule,
        shadowed: &[Dep],
        mut credit: impl FnMut(&ActionEntry, u64, u64),
    ) -> usize {
        let mut seq = None;
        let mut freed = 0;
        for &dep in shadowed {
            self.retain_dependents(dep, |t, r| {
                let e = &t.slots[r.slot() as usize];
                if !e.sees_packet_key(dep) || e.filters.len() >= MAX_FILTERS {
                    t.settle(r.slot(), &mut credit);
                    t.free_slot(r.slot());
                    freed += 1;
                    return false;
                }
                let s = *seq.get_or_insert_with(|| t.ring.push(rule));
                let e = &mut t.slots[r.slot() as usize];
                // One ADD reaches an entry through at most one dep (its path
                // has one step per table, or missed there), but stay exact.
                if e.filters.last() != Some(&s) {
                    e.filters.push(s);
                    t.stats.filtered += 1;
                }
                true
            });
        }
        self.stats.invalidated += freed as u64;
        self.stats.filter_frees += freed as u64;
        freed
    }

    /// Free every entry not in `in_use` (slots referenced by the cache) and
    /// drop stale refs from the reverse index. Call between batches.
    pub fn collect(&mut self, in_use: impl Fn(u32) -> bool) -> usize {
        let mut n = 0;
        for slot in 0..self.slots.len() {
            // Slot count fits u32 (see `intern`).
            let s = slot as u32;
            if self.slots[slot].live && !in_use(s) {
                self.free_slot(s);
                n += 1;
            }
        }
        let slots = &self.slots;
        self.by_dep.retain(|_, refs| {
            refs.retain(|r| {
                slots
                    .get(r.slot() as usize)
                    .is_some_and(|e| e.live && e.generation == r.generation())
            });
            !refs.is_empty()
        });
        self.stats.collected += n as u64;
        n
    }

    /// Free every entry (generations move on, so every cached ref misses).
    pub fn clear(&mut self) {
        for slot in 0..self.slots.len() {
            if self.slots[slot].live {
                self.slots[slot].pending_packets = 0;
                // Slot count fits u32 (see `intern`).
                self.free_slot(slot as u32);
            }
        }
        self.by_dep.clear();
        self.dirty.clear();
        self.stats.clears += 1;
    }

    /// Total refs held by the reverse index (memory diagnostics).
    pub fn dep_refs(&self) -> usize {
        self.by_dep.values().map(Vec::len).sum()
    }
}

/// Does `key` match any of `filters[checked..]`? A filter that has left the
/// ring, or a mark beyond the list (cannot happen), counts as a match: the
/// caller then re-resolves, which is always correct.
#[cold]
#[inline(never)]
fn any_filter_matches(ring: &FilterRing, filters: &[u64], checked: u32, key: &FlowKey) -> bool {
    let Some(rest) = filters.get(checked as usize..) else {
        return true;
    };
    rest.iter()
        .any(|&seq| ring.get(seq).is_none_or(|rule| rule.matches(key)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(path: &[(u8, RuleId)], outcome: Outcome, port: u32) -> Resolution {
        let mut r = Resolution::default();
        r.path = path
            .iter()
            .map(|&(table_id, rule)| PathStep { table_id, rule })
            .collect();
        r.outcome = outcome;
        r.actions = vec![Action::Output {
            port: offlow_pipeline::PortNo(port),
            max_len: 0,
        }];
        r
    }

    /// For tables whose freed entries hold no counts.
    fn no_credit(_: &ActionEntry, packets: u64, _: u64) {
        panic!("a freed entry held {packets} uncredited packets");
    }

    impl ActionTable {
        fn intern_plain(&mut self, r: &Resolution) -> ActionRef {
            self.intern(r, |_| None, |_| true)
        }
    }

    #[test]
    fn prefetching_hits_takes_any_ref_and_changes_nothing() {
        let mut t = ActionTable::new();
        assert!(!t.outgrows_l2());
        let a = t.intern_plain(&res(&[(0, 1)], Outcome::Forward, 2));
        let before = t.get(a).map(|e| e.actions.clone());
        let past_the_end = CachedRef {
            action: ActionRef::new(1 << 20, 0),
            checked: 0,
        };
        let live = CachedRef {
            action: a,
            checked: 0,
        };
        t.prefetch_hits(&[Some(live), None, Some(past_the_end)]);
        assert_eq!(t.get(a).map(|e| e.actions.clone()), before);
        // Enough decisions to pass half a megabyte: the worker prefetches.
        let n = (512 << 10) / std::mem::size_of::<ActionEntry>() + 1;
        for port in 0..n as u32 {
            t.intern_plain(&res(&[(0, port + 10)], Outcome::Forward, port));
        }
        assert!(t.outgrows_l2());
    }

    #[test]
    fn interns_by_path_and_invalidates_by_dep() {
        let mut t = ActionTable::new();
        let a = t.intern_plain(&res(&[(0, 1), (1, 7)], Outcome::Forward, 2));
        let b = t.intern_plain(&res(&[(0, 1), (1, 7)], Outcome::Forward, 2));
        let c = t.intern_plain(&res(&[(0, 2)], Outcome::Miss { table_id: 1 }, 3));
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(t.len(), 2);
        assert_eq!(t.invalidate(Dep::Rule(9), no_credit), 0);
        assert_eq!(t.invalidate(Dep::Miss(1), no_credit), 1);
        assert!(t.get(c).is_none() && t.get(a).is_some());
        assert_eq!(t.invalidate(Dep::Rule(7), no_credit), 1);
        assert!(t.get(a).is_none());
        // The slot is reused with a new generation: old refs stay dead.
        let d = t.intern_plain(&res(&[(0, 3)], Outcome::Forward, 4));
        assert!(t.get(a).is_none() && t.get(c).is_none());
        assert_eq!(t.get(d).map(|e| e.path.len()), Some(1));
        assert_eq!(
            t.invalidate(Dep::Rule(1), no_credit),
            0,
            "already freed via rule 7"
        );
    }

    #[test]
    fn metered_lists_are_general() {
        let out = Action::output(offlow_pipeline::PortNo(2));
        assert_eq!(Shape::of(&[out]), Shape::Output(2));
        assert_eq!(Shape::of(&[Action::Meter(1), out]), Shape::General);
        assert_eq!(Shape::of(&[Action::Meter(1)]), Shape::General);
    }

    #[test]
    fn steered_entries_are_keyed_by_path_and_mask() {
        let mut t = ActionTable::new();
        let r = res(&[(0, 1)], Outcome::Forward, 2);
        let plain = t.intern_plain(&r);
        let s2 = t.intern_steered(&r, Some(2), |_| None, |_| true);
        let s2b = t.intern_steered(&r, Some(2), |_| None, |_| true);
        let s4 = t.intern_steered(&r, Some(4), |_| None, |_| true);
        assert_eq!(s2, s2b);
        assert_ne!(plain, s2);
        assert_ne!(s2, s4);
        // A zero mask is no mask.
        assert_eq!(t.intern_steered(&r, Some(0), |_| None, |_| true), plain);
        assert_eq!(t.get(plain).unwrap().workers, None);
        assert_eq!(t.get(s2).unwrap().workers, Some(2));
        assert_eq!(t.get(s4).unwrap().workers, Some(4));
        // A mask in the actions wins; the last one of several.
        let mut own = res(&[(0, 5)], Outcome::Forward, 2);
        own.actions.insert(0, Action::SetWorkers(8));
        own.actions.push(Action::SetWorkers(16));
        let o = t.intern_steered(&own, Some(2), |_| None, |_| true);
        assert_eq!(t.get(o).unwrap().workers, Some(16));
        assert_eq!(t.get(o).unwrap().shape, Shape::Output(2));
        // Invalidation frees every variant; re-interning makes new ones.
        assert_eq!(t.invalidate(Dep::Rule(1), no_credit), 3);
        assert!(t.get(s2).is_none() && t.get(s4).is_none() && t.get(plain).is_none());
        let again = t.intern_steered(&r, Some(2), |_| None, |_| true);
        assert_ne!(again, s2, "the freed (path, mask) key was removed");
        assert_eq!(t.len(), 2);
        t.clear();
        assert!(t.is_empty());
        let fresh = t.intern_steered(&r, Some(2), |_| None, |_| true);
        assert_eq!(t.get(fresh).unwrap().workers, Some(2));
        assert_eq!(t.stats().shared, 2);
    }

    #[test]
    fn uncount_takes_back_one_packet() {
        let mut t = ActionTable::new();
        let a = t.intern_plain(&res(&[(0, 1)], Outcome::Forward, 2));
        assert!(t.count_live(a, 100));
        assert!(t.count_live(a, 50));
        t.uncount(a, 50);
        let mut got = Vec::new();
        t.drain_counts(|_, n, b| got.push((n, b)));
        assert_eq!(got, vec![(1, 100)]);
        // Back to zero: nothing to credit.
        assert!(t.count_live(a, 70));
        t.uncount(a, 70);
        let mut n = 0;
        t.drain_counts(|_, _, _| n += 1);
        assert_eq!(n, 0);
    }

    #[test]
    fn counts_drain_once_per_batch() {
        let mut t = ActionTable::new();
        let a = t.intern_plain(&res(&[(0, 1)], Outcome::Forward, 2));
        let m = t.intern_plain(&res(&[], Outcome::Miss { table_id: 0 }, 2));
        for _ in 0..3 {
            assert!(t.count_live(a, 100));
        }
        assert!(t.count_live(m, 60));
        let mut got = Vec::new();
        t.drain_counts(|e, n, b| got.push((e.path.to_vec(), e.miss_table(), n, b)));
        got.sort_by_key(|g| g.2);
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].1, got[0].2, got[0].3), (Some(0), 1, 60));
        assert_eq!((got[1].2, got[1].3), (3, 300));
        let mut again = 0;
        t.drain_counts(|_, _, _| again += 1);
        assert_eq!(again, 0);
    }

    /// Freeing credits exactly the freed entries' pending counts, once;
    /// the others keep theirs for the next drain. A slot reused after a
    /// free starts from zero.
    #[test]
    fn freed_entries_credit_their_pending_counts_first() {
        use offlow_flow::{Field, Match};
        let port_rule = |p: u128| {
            let mut m = Match::ANY;
            m.set_exact(Field::InPort, p);
            Rule::new(0, 5, m)
        };
        let mut t = ActionTable::new();
        let a = t.intern_plain(&res(&[(0, 1), (1, 7)], Outcome::Forward, 2));
        let c = t.intern_plain(&res(&[(0, 2)], Outcome::Forward, 3));
        let f = t.intern_plain(&res(&[(0, 3)], Outcome::Forward, 4));
        for _ in 0..2 {
            assert!(t.count_live(a, 100));
        }
        assert!(t.count_live(c, 60));
        assert!(t.count_live(f, 70));
        let mut got = Vec::new();
        assert_eq!(
            t.invalidate(Dep::Rule(7), |e, n, b| got.push((e.path.to_vec(), n, b))),
            1
        );
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].1, got[0].2), (2, 200));
        assert_eq!(got[0].0.last().map(|s| s.rule), Some(7));
        // A filter that frees `f` (it already holds MAX_FILTERS filters).
        for _ in 0..MAX_FILTERS {
            t.add_filter(&port_rule(9), &[Dep::Rule(3)], no_credit);
        }
        let mut filtered = Vec::new();
        let freed = t.add_filter(&port_rule(9), &[Dep::Rule(3)], |_, n, b| {
            filtered.push((n, b))
        });
        assert_eq!((freed, filtered), (1, vec![(1, 70)]));
        // A new entry reusing a freed slot starts from zero.
        let r = t.intern_plain(&res(&[(0, 5)], Outcome::Forward, 2));
        assert!(t.count_live(r, 10));
        let mut rest = Vec::new();
        t.drain_counts(|e, n, b| rest.push((e.path[0].rule, n, b)));
        rest.sort();
        assert_eq!(rest, vec![(2, 1, 60), (5, 1, 10)]);
    }

    #[test]
    fn collect_frees_unreferenced_and_prunes_index() {
        let mut t = ActionTable::new();
        let refs: Vec<_> = (0..10)
            .map(|i| t.intern_plain(&res(&[(0, i)], Outcome::Forward, 1)))
            .collect();
        let keep = refs[3].slot();
        assert_eq!(t.collect(|s| s == keep), 9);
        assert_eq!(t.len(), 1);
        assert_eq!(
            t.dep_refs(),
            2,
            "the kept entry under its rule and its table"
        );
        assert!(t.get(refs[3]).is_some());
        t.clear();
        assert!(t.get(refs[3]).is_none() && t.is_empty());
    }

    #[test]
    fn filters_checked_once_and_lost_filters_count_as_matches() {
        use offlow_flow::{Field, Match};
        let key = FlowKey::ZERO; // in_port 0
        let rule_for_port = |p: u128| {
            let mut m = Match::ANY;
            m.set_exact(Field::InPort, p);
            Rule::new(0, 5, m)
        };
        let mut t = ActionTable::new();
        let a = t.intern_plain(&res(&[(0, 1)], Outcome::Forward, 2));
        let fresh = CachedRef {
            action: a,
            checked: 0,
        };
        assert_eq!(
            t.add_filter(&rule_for_port(5), &[Dep::Rule(1)], no_credit),
            0
        );
        assert_eq!(
            t.count_checked(fresh, &key, 10),
            HitCheck::Served { checked: 1 }
        );
        // A matching filter: re-resolve, nothing counted.
        t.add_filter(&rule_for_port(0), &[Dep::Rule(1)], no_credit);
        assert_eq!(t.count_checked(fresh, &key, 10), HitCheck::Filtered);
        let marked = CachedRef {
            action: a,
            checked: 2,
        };
        assert_eq!(
            t.count_checked(marked, &key, 10),
            HitCheck::Served { checked: 2 }
        );
        let mut counted = Vec::new();
        t.drain_counts(|_, n, b| counted.push((n, b)));
        assert_eq!(counted, vec![(2, 20)]);
        // Push the first filters out of the ring through other entries.
        for j in 0..(FILTER_RING / MAX_FILTERS + 1) as u32 {
            let id = 100 + j;
            t.intern_plain(&res(&[(0, id)], Outcome::Forward, 2));
            for _ in 0..MAX_FILTERS {
                assert_eq!(
                    t.add_filter(&rule_for_port(5), &[Dep::Rule(id)], no_credit),
                    0
                );
            }
        }
        let one = CachedRef {
            action: a,
            checked: 1,
        };
        assert_eq!(t.count_checked(one, &key, 10), HitCheck::Filtered);
        assert_eq!(
            t.count_checked(marked, &key, 10),
            HitCheck::Served { checked: 2 }
        );
        // One filter too many frees the entry.
        let b = t.intern_plain(&res(&[(1, 9)], Outcome::Forward, 3));
        for _ in 0..MAX_FILTERS {
            assert_eq!(
                t.add_filter(&rule_for_port(5), &[Dep::Miss(1), Dep::Rule(9)], no_credit),
                0
            );
        }
        t.drain_counts(|_, _, _| {});
        assert_eq!(
            t.add_filter(&rule_for_port(5), &[Dep::Rule(9)], no_credit),
            1
        );
        assert!(t.get(b).is_none());
    }
}
