//! Workers and their control: the fast path with consistent updates.
//!
//! # Shape
//! [`Control`] is the single writer. It owns a left-right
//! [`Versioned`] pair of [`DatapathState`] (the pipeline plus an
//! invalidation log). Flow-mods are applied to the inactive copy
//! ([`Control::flow_mod`]); [`Control::commit`] appends one invalidation
//! record for everything they changed and publishes. Each [`Worker`] holds a
//! read handle, its own [`MicroflowCache`] and [`ActionTable`], and processes
//! a batch inside one read section:
//!
//! ```text
//! enter section (version v) ─► catch up: apply log records (seen, v] to the
//!   Action Table ─► parse ─► cache lookup (batch, prefetched) ─► valid entry?
//!   ─ yes ─► execute                  ─ no ─► pipeline lookup at v ─► intern,
//!   insert into cache ─► execute ─► credit pending counts at v ─► leave
//! ```
//!
//! # Why the quiescent wait is enough (design invariant 3)
//! `commit` returns only after `Versioned::publish` has waited for every read
//! section that began before the swap. A section that begins after it reads
//! version `v' >= v` and, before its first lookup, frees every Action Table
//! entry that depended on a rule changed by any record in `(seen, v']`. A
//! decision made inside an older section was interned before that catch-up,
//! in program order on the same thread, so it is freed by it too. Hence after
//! `commit` returns, no packet is processed with an action that the
//! committed changes modified or removed. A worker that fell so far behind
//! that the log no longer holds its records clears its whole table instead.
//!
//! A DELETE frees the removed rules' dependents. A MODIFY (and an ADD
//! that replaced an identical match and priority) changes a rule's
//! instructions, not its match; its dependents are *rebuilt in place*
//! where that is exact, and freed otherwise.
//!
//! # Modifications: rebuild, don't re-resolve
//! Take a MODIFY of rule `r` whose new instructions have no Goto-Table.
//! Every key whose walk reached `r` still does: the tables and programs
//! before it did not change, nor did `r`'s match. And since `r` now ends
//! the walk, nothing after it depends on the key. So the new decision of
//! every microflow of an entry through `r` is the entry's path up to `r`,
//! with today's programs: [`Pipeline::resolve_along`] builds it without a
//! lookup, and [`ActionTable::rebuild`] gives it to the entry, keeping its
//! slot and generation, so its microflows keep hitting (with the new
//! actions) instead of each walking the pipeline again. An entry whose
//! walk along its path does not end at `r` (`r` now goes on to another
//! table, whose answer depends on the key; or a rule on the path is gone)
//! is freed as before. Several records apply in order, each against the
//! version the section reads: a later change to a rule before `r` on the
//! path is a MODIFY (rebuilt only if the walk now ends at that rule, which
//! cuts `r` off), a DELETE (freed) or an ADD (filtered or freed), each
//! handled by its own record. A rebuilt entry keeps its deps and filters,
//! so it is invalidated and filtered like any other.
//!
//! # Additions: re-check, don't free
//! A new rule `N` in table `t` can take keys from lower-or-equal-priority
//! overlapping rules ([`FlowModEffect::shadowed`], including the table-miss
//! entry) and from keys that matched nothing in `t` ([`Dep::Miss`]). The
//! record carries, per ADD, `N`'s match and priority (an
//! [`AddFilter`]) and those deps. Catching up, a worker does not free their
//! dependents: an entry whose path reached `t` with the packet's own key
//! keeps living with `N` as a *filter* ([`ActionTable::add_filter`]); an
//! entry whose path rewrote the key before `t` (a set-field, a VLAN/MPLS
//! push or pop, a write-metadata in an earlier table; judged conservatively
//! from the rules' programs at intern time) is freed as before, and so is
//! one with [`MAX_FILTERS`](crate::action_table::MAX_FILTERS) filters. A
//! cache hit on a filtered entry checks the packet's key against the
//! filters its microflow was not yet checked against (the count is kept in
//! the cached [`CachedRef`]); a match (ties in priority included: any key
//! `N` matches) re-resolves the packet through the pipeline and re-points
//! the microflow, no match serves the packet from the entry and advances
//! the microflow's mark, so each microflow pays each check once.
//!
//! Why a key `k` that matches no filter keeps its decision: take the
//! records applied in order. For one ADD of `N` into `t`, the tables before
//! `t` did not change, so `k`'s walk reaches `t` (if at all) with the same
//! key as before; the entry's path saw the packet's own key there (that is
//! the condition for keeping it), i.e. `k` itself. In `t` the only change is
//! `N`; `k` does not match `N`, so `t`'s lookup of `k` returns what it did,
//! and everything after `t` is unchanged. An entry that does not depend on
//! any dep `N` shadows either matched a rule in `t` that beats `N` or does
//! not reach `t`, so it is unaffected. By induction over the ADDs (and the
//! frees and rebuilds of MODIFY/DELETE deps, above), after catching up a
//! live entry's decision is the current pipeline's for every key that
//! matches none of its filters. A filter that has left the ring counts as a
//! match (re-resolve): correct, merely the old cost.
//!
//! Listing the deps an ADD shadows costs the writer an overlap walk of the
//! table. It only narrows which entries get the filter, so the writer skips
//! it for a table no worker has yet cached a decision through (a shared bit
//! per table, set on intern) and records [`Dep::Table`] instead, which
//! covers every entry through the table: bulk loads into an idle switch
//! pay nothing for precision nobody needs.
//!
//! No loop on re-resolution: the pipeline's answer at the version the
//! section reads is the truth for this key, so the microflow is pointed at
//! the interned entry for that path with its mark at that entry's current
//! filter count, even when the path is the filtered entry's own (its other
//! microflows keep their marks and are checked as they come). Counts stay
//! exact: a packet is counted once, on the entry that served it — a
//! filtered hit counts nothing on the entry it leaves.
//!
//! # Counters (design invariant 4)
//! A cached packet credits the rules of its entry's path and the tables it
//! visited, exactly as [`Pipeline::credit`] does for an uncached packet. The
//! credit targets (the rules' shared counters, their NO_*_COUNTS flags) are
//! resolved once, when the decision is interned, so crediting needs no
//! lookup. Counts are summed per Action Table entry, worker-locally, and
//! credited with one atomic add per rule per distinct decision: every
//! [`FLUSH_EVERY_BATCHES`] batches, before any entry is freed (invalidation,
//! collection), and whenever [`Control::sync_counters`] asks, which waits for
//! every worker's acknowledgement. So counters read after `sync_counters`
//! returns true are exact; in between they lag by at most
//! `FLUSH_EVERY_BATCHES` batches per worker. Uncached packets (cache off)
//! are credited at once.
//!
//! # Steering ([`offlow_pipeline::Action::SetWorkers`])
//! A decision may name the workers allowed to process its packets
//! ([`ActionEntry::workers`](crate::ActionEntry::workers), from the last
//! `SetWorkers` of its action list). After resolution and before execution,
//! a worker whose bit ([`WorkerConfig::worker_index`]) is not in the mask
//! offers the unmodified frame to [`OutputSink::steer`]; when the sink takes
//! it, the worker takes back the count the lookup added
//! ([`ActionTable::uncount`]), executes nothing and counts `steered_out`.
//! The receiving worker resolves the same decision at the same or a newer
//! version, finds itself in the mask and processes (and credits) the packet
//! normally, so every packet is credited exactly once. A decision without a
//! mask pays one branch on a field of the entry the hit already touched.
//!
//! # Invariants
//! - No lock, allocation or syscall per packet on the hit path; a miss
//!   allocates only when it interns a new decision (a new path).
//! - Nothing panics on frame contents; every drop is counted by reason.
//!
//! # Thread-safety
//! `Control` is the writer (one thread). A `Worker` is `Send`, owned by one
//! thread; workers share nothing writable but the pipeline's relaxed atomic
//! counters, which they touch once per distinct decision per batch.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use offlow_classifier::{Built, Rule, RuleId};
use offlow_flow::{extract_to, FlowKey, Layout, ParseStats};
use offlow_pipeline::{
    ExpiryTracker, FlowMod, FlowModEffect, FlowModFlags, Outcome, PacketInOrigin, PathStep,
    Pipeline, PipelineError, PipelineOp, RemovedFlow, Resolution, ShadowReport,
};
use offlow_sync::{Apply, CachePadded, ReadHandle, Versioned};

use crate::action_table::{
    preserves_key, ActionEntry, ActionTable, ActionTableStats, CachedRef, Dep, HitCheck,
    RuleCredit, Shape,
};
use crate::buf::PacketBuf;
use crate::execute::{
    execute_prepared, ExecOutcome, ExecStats, OutputMeta, OutputSink, PortInfo, Prepared, Verdict,
};
use crate::microflow::{flow_hash_ext, InsertPolicy, MicroflowCache, MicroflowStats, MAX_BATCH};
use crate::steer::SteeringTable;

/// Invalidation records kept; a worker more than this many versions behind
/// clears its caches instead of catching up record by record.
pub const LOG_RECORDS: usize = 1024;

/// One published version's invalidations.
#[derive(Debug, Clone)]
struct Record {
    version: u64,
    /// Deps whose dependents are freed (DELETE, expiry).
    deps: Arc<[Dep]>,
    /// Rules whose instructions changed (MODIFY): their dependents are
    /// rebuilt in place where the path allows, else freed.
    modified: Arc<[RuleId]>,
    /// ADDs, whose shadowed deps' dependents are filtered.
    adds: Arc<[AddFilter]>,
}

/// One ADD as the workers see it: the new rule and what it may take keys
/// from.
#[derive(Debug, Clone)]
pub struct AddFilter {
    /// The new rule's match and priority (its id is the pipeline's).
    pub rule: Rule,
    /// Its table's shadowed rules (`Dep::Rule`) and the table's miss
    /// (`Dep::Miss`).
    pub shadowed: Box<[Dep]>,
}

/// The recent invalidation records, oldest first.
#[derive(Debug, Clone, Default)]
struct InvalidationLog {
    records: VecDeque<Record>,
    /// Every record of a version `<= truncated` has been dropped.
    truncated: u64,
}

/// What the workers read: the pipeline and the invalidation log, published
/// together so a section sees a log that matches its pipeline.
#[derive(Debug, Clone)]
pub struct DatapathState {
    /// The OpenFlow pipeline.
    pub pipeline: Pipeline,
    log: InvalidationLog,
}

/// A replicated update of [`DatapathState`].
#[derive(Debug, Clone)]
pub enum StateOp {
    /// A pipeline change.
    Pipeline(PipelineOp),
    /// The invalidations of `version`.
    Invalidate {
        /// The version these changes become visible in.
        version: u64,
        /// What they removed (dependents are freed).
        deps: Arc<[Dep]>,
        /// Rules whose instructions they changed (dependents are rebuilt
        /// or freed).
        modified: Arc<[RuleId]>,
        /// What they added (dependents of the shadowed deps are filtered).
        adds: Arc<[AddFilter]>,
    },
}

impl Apply<StateOp> for DatapathState {
    fn apply(&mut self, op: &StateOp) {
        match op {
            StateOp::Pipeline(p) => self.pipeline.apply(p),
            StateOp::Invalidate {
                version,
                deps,
                modified,
                adds,
            } => {
                let log = &mut self.log;
                if log.records.len() == LOG_RECORDS {
                    if let Some(old) = log.records.pop_front() {
                        log.truncated = old.version;
                    }
                }
                log.records.push_back(Record {
                    version: *version,
                    deps: deps.clone(),
                    modified: modified.clone(),
                    adds: adds.clone(),
                });
            }
        }
    }

    fn apply_owned(&mut self, op: StateOp) {
        match op {
            StateOp::Pipeline(p) => self.pipeline.apply_owned(p),
            op => self.apply(&op),
        }
    }

    fn prefetch(&self, op: &StateOp) {
        if let StateOp::Pipeline(p) = op {
            self.pipeline.prefetch_op(p);
        }
    }

    fn prefetch_near(&self, op: &StateOp, stage: usize) {
        if let StateOp::Pipeline(p) = op {
            self.pipeline.prefetch_op_near(p, stage);
        }
    }

    fn replica(&self) -> DatapathState {
        DatapathState {
            pipeline: self.pipeline.replica(),
            log: self.log.clone(),
        }
    }
}

/// Batches a worker may keep counts pending before it credits them.
///
/// Why this many: each flush does one atomic add per rule per distinct
/// decision, on counter lines no other packet touches, so a longer period
/// means fewer of those misses per packet. 1024 batches (32K packets of
/// 32) ran the cached acl+fib datapath 5% faster than 256 (5 of 5
/// alternated pairs, 2026-11-22). Nothing reads counters without
/// [`Control::sync_counters`] first (statistics, expiry), which credits at
/// once, so the longer lag is never observed.
pub const FLUSH_EVERY_BATCHES: u32 = 1024;

/// Decisions with pending counts per batch since the last flush beyond
/// which a due flush waits.
///
/// Crediting a decision costs a few cache misses (the entry, its credit
/// list, each rule's counters) whatever its count. With many flows, each
/// decision may hold a packet or two per period: over 100K uniform flows
/// crediting took more of the worker than processing (perf: 15.7% against
/// 10.0%). Waiting until there are at least ~8 packets (batches of 32) per
/// decision amortises it; a zipfian or small flow set never waits (far
/// fewer decisions than this), and counters read after
/// [`Control::sync_counters`] are exact either way.
pub const DIRTY_PER_BATCH: u64 = 4;

/// One worker's acknowledgement of counter-sync requests.
type AckSlot = CachePadded<AtomicU64>;

/// Counter-sync requests from the control side and the workers' acks.
#[derive(Debug, Default)]
struct CounterSync {
    /// Latest request; its own cache line, written only by `sync_counters`.
    requested: AckSlot,
    /// Registered workers' ack slots (locked on registration and by
    /// `sync_counters`, never by a worker's batch).
    acks: Mutex<Vec<Weak<AckSlot>>>,
}

/// Tables some worker has cached a decision through, one bit each: set by
/// a worker when it interns a decision whose path looked the table up,
/// never cleared. The writer reads it to skip the overlap walk of an ADD
/// into a table no cached decision went through (it then reports the whole
/// table as shadowed, [`ShadowReport::WholeTable`]). The bit is only a
/// hint for precision: a whole-table report is correct whatever a worker
/// cached meanwhile, so the bits need no ordering with the versions.
#[derive(Debug, Default)]
struct TablesCached([AtomicU64; 4]);

impl TablesCached {
    /// Mark `table` (a relaxed load first: once set, no further writes, so
    /// the cache line stays shared between the workers).
    #[inline]
    fn mark(&self, table: u8) {
        let (word, bit) = (usize::from(table / 64), 1u64 << (table % 64));
        if self.0[word].load(Ordering::Relaxed) & bit == 0 {
            self.0[word].fetch_or(bit, Ordering::Relaxed);
        }
    }

    fn is_marked(&self, table: u8) -> bool {
        let (word, bit) = (usize::from(table / 64), 1u64 << (table % 64));
        self.0[word].load(Ordering::Relaxed) & bit != 0
    }
}

/// Copies of the pipeline a [`Control`] keeps (a left-right pair): how many
/// installs to build a FIB for (`BuildInput::build_for`) when the result
/// goes to [`Control::install`].
pub const PIPELINE_COPIES: usize = 2;

/// The writer side: flow-mods, commit (publish + quiescent wait).
pub struct Control {
    state: Versioned<DatapathState, StateOp>,
    pending: Vec<Dep>,
    pending_modified: Vec<RuleId>,
    pending_adds: Vec<AddFilter>,
    sync: Arc<CounterSync>,
    tables_cached: Arc<TablesCached>,
    /// Writer-side idle-timeout state for [`Control::expire`].
    expiry: ExpiryTracker,
}

impl Control {
    /// Serve `pipeline` as version 0.
    pub fn new(pipeline: Pipeline) -> Control {
        Control {
            state: Versioned::new(DatapathState {
                pipeline,
                log: InvalidationLog::default(),
            }),
            pending: Vec::new(),
            pending_modified: Vec::new(),
            pending_adds: Vec::new(),
            sync: Arc::new(CounterSync::default()),
            tables_cached: Arc::default(),
            expiry: ExpiryTracker::new(),
        }
    }

    /// A new worker reading this datapath.
    pub fn worker(&self, config: WorkerConfig) -> Worker {
        let ack = Arc::new(CachePadded(AtomicU64::new(
            self.sync.requested.0.load(Ordering::Relaxed),
        )));
        lock(&self.sync.acks).push(Arc::downgrade(&ack));
        // A new worker has nothing cached: records up to now concern it not.
        let seen = self.state.version();
        let shared = WorkerShared {
            sync: self.sync.clone(),
            ack,
            tables_cached: self.tables_cached.clone(),
        };
        Worker::new(self.state.reader(), config, shared, seen)
    }

    /// Make every worker credit its pending counts, and wait (at most
    /// `timeout`) until each live worker has done so. Returns true when all
    /// did: the rule and table counters then include every packet those
    /// workers had finished processing when this was called. Workers
    /// acknowledge at their next batch or [`Worker::poll`]; a worker that
    /// neither processes nor polls makes this time out (false).
    pub fn sync_counters(&self, timeout: Duration) -> bool {
        self.sync_counters_waking(timeout, || {})
    }

    /// [`sync_counters`](Self::sync_counters), calling `wake` once the
    /// request is posted: a caller whose idle workers sleep (in `poll(2)`,
    /// say) wakes them there, so they acknowledge now rather than at the
    /// end of their sleep. Waking before the request could let a worker
    /// look, find nothing, and sleep again.
    pub fn sync_counters_waking(&self, timeout: Duration, wake: impl FnOnce()) -> bool {
        let sync = self.sync_start(wake);
        let deadline = Instant::now() + timeout;
        while !self.sync_done(sync) {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::yield_now();
        }
        true
    }

    /// Ask every worker to credit its pending counts without waiting;
    /// `wake` is called once the request is posted (as in
    /// [`sync_counters_waking`](Self::sync_counters_waking)). Returns the
    /// request's number, for [`sync_done`](Self::sync_done).
    pub fn sync_start(&self, wake: impl FnOnce()) -> u64 {
        let epoch = self.sync.requested.0.fetch_add(1, Ordering::AcqRel) + 1;
        wake();
        epoch
    }

    /// Whether every live worker has acknowledged counter-sync request
    /// `epoch` (or a later one): the rule and table counters then include
    /// every packet those workers had finished processing when it was
    /// posted. Never waits.
    pub fn sync_done(&self, epoch: u64) -> bool {
        let mut list = lock(&self.sync.acks);
        list.retain(|w| w.strong_count() > 0);
        // Acquire pairs with the worker's Release store after its flush:
        // its credits happen-before our reading the counters.
        list.iter()
            .filter_map(Weak::upgrade)
            .all(|ack| ack.0.load(Ordering::Acquire) >= epoch)
    }

    /// The writer's pipeline: every flow-mod applied so far, committed or
    /// not (for stats, dumps and preparing the next flow-mod).
    pub fn pipeline(&self) -> &Pipeline {
        &self.state.writer_view().pipeline
    }

    /// The published version.
    pub fn version(&self) -> u64 {
        self.state.version()
    }

    /// Validate and apply `fm`; workers see it after [`commit`](Self::commit).
    pub fn flow_mod(&mut self, fm: &FlowMod, now_ns: u64) -> Result<FlowModEffect, PipelineError> {
        // Listing what an ADD shadows only narrows which cached decisions
        // get re-checked; with none cached through the table, skip it.
        let shadow = if self.tables_cached.is_marked(fm.table_id) {
            ShadowReport::List
        } else {
            ShadowReport::WholeTable
        };
        let (op, effect) = self.pipeline().prepare_reporting(fm, now_ns, shadow)?;
        self.state.apply(StateOp::Pipeline(op));
        self.note_effect(fm.table_id, &effect);
        Ok(effect)
    }

    /// Record what `effect` (already applied to the writer's copy)
    /// invalidates: DELETE deps are freed, MODIFY deps rebuilt or freed;
    /// an ADD's shadowed deps become filters with the new rule's match.
    fn note_effect(&mut self, table_id: u8, effect: &FlowModEffect) {
        self.pending_modified.extend_from_slice(&effect.modified);
        self.pending
            .extend(effect.removed.iter().map(|e| Dep::Rule(e.id)));
        if effect.added.is_empty() {
            // Shadowing comes with an ADD only; free anything listed anyway.
            self.pending
                .extend(effect.shadowed.iter().copied().map(Dep::Rule));
            return;
        }
        // Too many shadowed entries to list: every lookup in the table
        // counts as shadowed (`Dep::Table` covers its misses too).
        let whole_table = effect.shadowed_all.then_some(Dep::Table(table_id));
        let shadowed = || -> Box<[Dep]> {
            match whole_table {
                Some(t) => Box::new([t]),
                None => effect
                    .shadowed
                    .iter()
                    .copied()
                    .map(Dep::Rule)
                    // A covered match: none of its keys missed the table.
                    .chain((!effect.covered).then_some(Dep::Miss(table_id)))
                    .collect(),
            }
        };
        // An added entry not found in its table cannot be a filter: fall
        // back to freeing its shadowed deps' dependents, taking back the
        // filters of this effect pushed so far, so the outcomes never mix.
        let start = self.pending_adds.len();
        for &id in &effect.added {
            let Some(e) = self.state.writer_view().pipeline.entry_in(table_id, id) else {
                self.pending_adds.truncate(start);
                self.pending.extend(shadowed().iter().copied());
                return;
            };
            let rule = e.matcher.to_rule(id, e.priority);
            self.pending_adds.push(AddFilter {
                rule,
                shadowed: shadowed(),
            });
        }
    }

    /// Remove every entry whose idle or hard timeout has passed at `now_ns`
    /// (the clock of [`flow_mod`](Self::flow_mod)'s `now_ns`), returning
    /// each with its reason (OpenFlow 1.3.5 §5.5; see
    /// [`offlow_pipeline::expiry`]). Workers stop using the removed rules
    /// (their cached decisions are freed) after the next
    /// [`commit`](Self::commit), as for a DELETE.
    ///
    /// Idle detection reads the rule counters: call
    /// [`sync_counters`](Self::sync_counters) first, or packets still
    /// pending in a worker do not count as use and an entry in use may
    /// expire. A removed entry's counters are final once every worker has
    /// caught up with the commit (a worker credits what it still holds for
    /// a rule before freeing its decisions): build OFPT_FLOW_REMOVED after
    /// `commit` and a further `sync_counters`.
    pub fn expire(&mut self, now_ns: u64) -> Vec<RemovedFlow> {
        let (op, removed) = self
            .state
            .writer_view()
            .pipeline
            .prepare_expiry(now_ns, &mut self.expiry);
        if !removed.is_empty() {
            self.state.apply(StateOp::Pipeline(op));
            // As `note_effect` does for a DELETE's removed entries.
            self.pending
                .extend(removed.iter().map(|r| Dep::Rule(r.entry.id)));
        }
        removed
    }

    /// Rebuild the tables' lookup accelerators (never changes an answer).
    /// Built once, from the writer's copy, and installed in both copies:
    /// an RFC snapshot is shared, a FIB copied (each copy updates its own).
    pub fn compile(&mut self) {
        let built = self.pipeline().build_compiled();
        self.install(built);
    }

    /// Install accelerators built from [`Pipeline::compile_inputs`] of the
    /// writer's copy (on another thread, say) in both copies. The caller
    /// guarantees the rules have not changed since the inputs were taken
    /// ([`Pipeline::mutation_count`] unchanged). Workers see them after
    /// the next [`commit`](Self::commit). Built with
    /// `BuildInput::build_for(PIPELINE_COPIES)`, a FIB brings a copy per
    /// pipeline copy and the install copies nothing.
    pub fn install(&mut self, built: Vec<(u8, Built)>) {
        if !built.is_empty() {
            self.state
                .apply(StateOp::Pipeline(PipelineOp::Install(built.into())));
        }
    }

    /// Publish every change since the last commit and wait until every
    /// worker has passed a quiescent point: when this returns, no packet is
    /// processed with an action those changes modified or removed (the
    /// barrier reply may be sent). Returns the new version.
    pub fn commit(&mut self) -> u64 {
        let version = self.commit_start();
        self.state.settle();
        version
    }

    /// [`commit`](Self::commit) without the wait: publish every change
    /// since the last commit and return the new version at once. The
    /// barrier guarantee holds once [`try_settle`](Self::try_settle)
    /// returns true. A [`flow_mod`](Self::flow_mod) before then waits for
    /// the settle itself ([`is_settling`](Self::is_settling) tells).
    pub fn commit_start(&mut self) -> u64 {
        if !self.pending.is_empty()
            || !self.pending_modified.is_empty()
            || !self.pending_adds.is_empty()
        {
            let mut deps = std::mem::take(&mut self.pending);
            deps.sort_unstable();
            deps.dedup();
            let mut modified = std::mem::take(&mut self.pending_modified);
            modified.sort_unstable();
            modified.dedup();
            let adds = std::mem::take(&mut self.pending_adds);
            let version = self.state.version() + 1;
            self.state.apply(StateOp::Invalidate {
                version,
                deps: deps.into(),
                modified: modified.into(),
                adds: adds.into(),
            });
        }
        self.state.publish_start()
    }

    /// Whether the last [`commit_start`](Self::commit_start) is still
    /// waiting for workers to leave the read sections they were in.
    pub fn is_settling(&self) -> bool {
        self.state.is_settling()
    }

    /// Without waiting: true once every worker has passed a quiescent point
    /// since the last [`commit_start`](Self::commit_start) (the guarantee
    /// of [`commit`](Self::commit) then holds for everything committed).
    pub fn try_settle(&mut self) -> bool {
        self.state.try_settle()
    }
}

/// How a worker is set up.
#[derive(Debug, Clone, Copy)]
pub struct WorkerConfig {
    /// Use the microflow cache (off: every packet walks the pipeline).
    pub cache: bool,
    /// Microflow cache entries (rounded up to a power of two).
    pub cache_capacity: usize,
    /// Insertion policy.
    pub policy: InsertPolicy,
    /// Verify every cached decision against an uncached pipeline lookup at
    /// the same version, counting disagreements in `stale` (tests and the
    /// update bench; costs a pipeline lookup per packet).
    pub check: bool,
    /// This worker's index among the packet workers: bit `worker_index` of
    /// a decision's worker mask allows it to process the packet. An index
    /// of 64 or more is in no mask (every masked packet is offered to the
    /// sink's `steer`).
    pub worker_index: usize,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            cache: true,
            cache_capacity: 8192,
            policy: InsertPolicy::default(),
            check: false,
            worker_index: 0,
        }
    }
}

/// A worker's counters (summed across workers when read).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Frames received.
    pub packets: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Batches (read sections).
    pub batches: u64,
    /// Packets served from the cache with a valid decision.
    pub cache_hits: u64,
    /// Cache hits whose decision had been invalidated, or whose key matched
    /// a filter (a rule added since), then re-resolved.
    pub stale_hits: u64,
    /// Cache hits checked against new filters, matching none (served).
    pub filter_checks: u64,
    /// Packets resolved by the pipeline.
    pub pipeline_lookups: u64,
    /// Dropped: no rule matched in some table and it had no table-miss entry.
    pub drop_table_miss: u64,
    /// Dropped: the actions had no output.
    pub drop_no_output: u64,
    /// Dropped: TTL expired (IP or MPLS).
    pub drop_ttl: u64,
    /// Frames handed to ports or the controller.
    pub outputs: u64,
    /// Check mode: cached decisions that differed from the pipeline's.
    pub stale: u64,
    /// Invalidation records applied.
    pub records_applied: u64,
    /// Times the worker fell behind the log and cleared its caches.
    pub log_overruns: u64,
    /// Packets handed to another worker by the sink's `steer` (not
    /// executed or credited here; included in `packets`).
    pub steered_out: u64,
}

impl WorkerStats {
    /// Field-wise sum (for totals over workers).
    pub fn add(&mut self, o: &WorkerStats) {
        let WorkerStats {
            packets,
            bytes,
            batches,
            cache_hits,
            stale_hits,
            filter_checks,
            pipeline_lookups,
            drop_table_miss,
            drop_no_output,
            drop_ttl,
            outputs,
            stale,
            records_applied,
            log_overruns,
            steered_out,
        } = *o;
        self.packets += packets;
        self.bytes += bytes;
        self.batches += batches;
        self.cache_hits += cache_hits;
        self.stale_hits += stale_hits;
        self.filter_checks += filter_checks;
        self.pipeline_lookups += pipeline_lookups;
        self.drop_table_miss += drop_table_miss;
        self.drop_no_output += drop_no_output;
        self.drop_ttl += drop_ttl;
        self.outputs += outputs;
        self.stale += stale;
        self.records_applied += records_applied;
        self.log_overruns += log_overruns;
        self.steered_out += steered_out;
    }
}

/// One worker: parse → cache → pipeline → execute, a batch at a time.
pub struct Worker {
    reader: ReadHandle<DatapathState>,
    config: WorkerConfig,
    steering: SteeringTable,
    cache: MicroflowCache<CachedRef>,
    actions: ActionTable,
    seen: u64,
    res: Resolution,
    check_res: Resolution,
    keys: Vec<FlowKey>,
    hashes: Vec<u64>,
    layouts: Vec<Layout>,
    found: Vec<Option<CachedRef>>,
    stats: WorkerStats,
    parse: ParseStats,
    exec: ExecStats,
    table_credit: TableCredit,
    sync: Arc<CounterSync>,
    ack: Arc<AckSlot>,
    tables_cached: Arc<TablesCached>,
    acked: u64,
    unflushed_batches: u32,
}

/// What a new worker shares with its [`Control`].
struct WorkerShared {
    sync: Arc<CounterSync>,
    ack: Arc<AckSlot>,
    tables_cached: Arc<TablesCached>,
}

/// Lock a mutex whose data (a list of weak slots) a panic cannot leave
/// inconsistent, so poisoning is ignored.
fn lock<U>(m: &Mutex<U>) -> std::sync::MutexGuard<'_, U> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Per-batch sums of table counter credits: `(lookups, matched)` per table
/// and the tables touched.
#[derive(Debug)]
struct TableCredit {
    sums: Vec<(u64, u64)>,
    touched: Vec<u8>,
}

impl TableCredit {
    fn new() -> TableCredit {
        TableCredit {
            sums: vec![(0, 0); 256],
            touched: Vec::with_capacity(256),
        }
    }

    #[inline]
    fn add(&mut self, table: u8, lookups: u64, matched: u64) {
        let s = &mut self.sums[table as usize];
        if *s == (0, 0) {
            self.touched.push(table);
        }
        s.0 += lookups;
        s.1 += matched;
    }

    fn flush(&mut self, pipeline: &Pipeline) {
        for t in self.touched.drain(..) {
            let s = std::mem::take(&mut self.sums[t as usize]);
            if let Some(c) = pipeline.table_counters(t) {
                c.add(s.0, s.1);
            }
        }
    }
}

impl Worker {
    fn new(
        reader: ReadHandle<DatapathState>,
        config: WorkerConfig,
        shared: WorkerShared,
        seen: u64,
    ) -> Worker {
        let WorkerShared {
            sync,
            ack,
            tables_cached,
        } = shared;
        let acked = ack.0.load(Ordering::Relaxed);
        let capacity = if config.cache {
            config.cache_capacity
        } else {
            WAYS_MIN
        };
        Worker {
            reader,
            config,
            steering: SteeringTable::default(),
            cache: MicroflowCache::new(capacity, config.policy),
            actions: ActionTable::new(),
            seen,
            res: Resolution::default(),
            check_res: Resolution::default(),
            keys: vec![FlowKey::ZERO; MAX_BATCH],
            hashes: vec![0; MAX_BATCH],
            layouts: vec![Layout::default(); MAX_BATCH],
            found: vec![None; MAX_BATCH],
            stats: WorkerStats::default(),
            parse: ParseStats::default(),
            exec: ExecStats::default(),
            table_credit: TableCredit::new(),
            sync,
            ack,
            tables_cached,
            acked,
            unflushed_batches: 0,
        }
    }

    /// Counters.
    pub fn stats(&self) -> WorkerStats {
        self.stats
    }

    /// This worker's index among the packet workers
    /// ([`WorkerConfig::worker_index`]).
    pub fn worker_index(&self) -> usize {
        self.config.worker_index
    }

    /// Use `table` for packets whose decision carries no mask of its own
    /// (see [`crate::steer`]). Clears the caches: decisions cached so far
    /// were made without it.
    pub fn set_steering(&mut self, table: SteeringTable) {
        self.flush_counters();
        self.actions.clear();
        self.cache.clear();
        self.steering = table;
    }

    /// Set the index (for a data plane that numbers its workers as it
    /// starts their threads). Decisions already cached keep their masks;
    /// only the test against them changes.
    pub fn set_worker_index(&mut self, index: usize) {
        self.config.worker_index = index;
    }

    /// Parser anomaly counters.
    pub fn parse_stats(&self) -> &ParseStats {
        &self.parse
    }

    /// Action execution counters.
    pub fn exec_stats(&self) -> &ExecStats {
        &self.exec
    }

    /// Microflow cache counters.
    pub fn cache_stats(&self) -> MicroflowStats {
        self.cache.stats()
    }

    /// Action Table counters.
    pub fn action_stats(&self) -> ActionTableStats {
        self.actions.stats()
    }

    /// Live Action Table entries.
    pub fn action_entries(&self) -> usize {
        self.actions.len()
    }

    /// The version the last batch was processed under.
    pub fn seen_version(&self) -> u64 {
        self.seen
    }

    /// Zero every counter (the caches keep their contents).
    pub fn reset_stats(&mut self) {
        self.stats = WorkerStats::default();
        self.parse = ParseStats::default();
        self.exec = ExecStats::default();
        self.cache.reset_stats();
    }

    /// What an idle worker calls instead of [`process`](Self::process):
    /// catches up with published changes and answers counter-sync requests
    /// (crediting every pending count).
    pub fn poll(&mut self) {
        let mut none: [PacketBuf<[u8; 0]>; 0] = [];
        self.process(&mut none, 0, &mut NullSink);
    }

    /// Credit every pending count now.
    pub fn flush_counters(&mut self) {
        let guard = self.reader.enter();
        flush(&mut self.actions, &mut self.table_credit, &guard.pipeline);
        self.unflushed_batches = 0;
    }

    /// Process `frames`, all received on `in_port`, in one read section:
    /// each frame is parsed, resolved (cache or pipeline), counted and
    /// executed in place; outputs go to `sink`.
    pub fn process<S, O>(&mut self, frames: &mut [PacketBuf<S>], in_port: u32, sink: &mut O)
    where
        S: AsRef<[u8]> + AsMut<[u8]>,
        O: OutputSink + ?Sized,
    {
        // Have the decisions hit in flight while the first packets are
        // handled: with many flows they are mostly in no cache (+20-35% on
        // top of the deferred flush with 100K or 1M flows). A table that
        // fits in L2 skips it, and gets a copy of the loop without it: the
        // mere test inside the loop cost ~2% there (code placement).
        if self.config.cache && self.actions.outgrows_l2() {
            self.process_with::<true, S, O>(frames, in_port, sink);
        } else {
            self.process_with::<false, S, O>(frames, in_port, sink);
        }
    }

    /// [`process`](Self::process), prefetching the decisions hit or not.
    fn process_with<const PREFETCH_DECISIONS: bool, S, O>(
        &mut self,
        frames: &mut [PacketBuf<S>],
        in_port: u32,
        sink: &mut O,
    ) where
        S: AsRef<[u8]> + AsMut<[u8]>,
        O: OutputSink + ?Sized,
    {
        let Worker {
            reader,
            config,
            steering,
            cache,
            actions,
            seen,
            res,
            check_res,
            keys,
            hashes,
            layouts,
            found,
            stats,
            parse,
            exec,
            table_credit,
            sync,
            ack,
            tables_cached,
            acked,
            unflushed_batches,
        } = self;
        let guard = reader.enter();
        let version = guard.version();
        let state: &DatapathState = &guard;
        let pipeline = &state.pipeline;
        if version != *seen {
            // Each entry the records free credits what it still holds
            // first; the others keep their counts until the next flush.
            catch_up(state, *seen, actions, cache, stats, table_credit, res);
            table_credit.flush(pipeline);
            *seen = version;
        }
        maybe_collect(actions, cache, table_credit, pipeline);
        stats.batches += 1;
        // 0 for an index past 63: such a worker is in no mask.
        let my_bit = u32::try_from(config.worker_index)
            .ok()
            .and_then(|i| 1u64.checked_shl(i))
            .unwrap_or(0);
        for chunk in frames.chunks_mut(MAX_BATCH) {
            let n = chunk.len();
            let mut extended = 0u64;
            for (i, buf) in chunk.iter().enumerate() {
                extract_to(buf.frame(), in_port, &mut keys[i], &mut layouts[i], parse);
                let (hash, ext) = flow_hash_ext(&keys[i]);
                hashes[i] = hash;
                extended |= u64::from(ext) << i;
            }
            if config.cache {
                cache.lookup_chunk_ext(&keys[..n], &hashes[..n], extended, &mut found[..n]);
                if PREFETCH_DECISIONS {
                    actions.prefetch_hits(&found[..n]);
                }
            }
            for (i, buf) in chunk.iter_mut().enumerate() {
                let bytes = buf.len() as u64;
                stats.packets += 1;
                stats.bytes += bytes;
                // Hit: one access validates the entry, compares its filter
                // count with the microflow's mark and counts the packet.
                let cached = match found[i] {
                    Some(c) if config.cache => match actions.count_checked(c, &keys[i], bytes) {
                        HitCheck::Served { checked } => {
                            if checked != c.checked {
                                stats.filter_checks += 1;
                                let v = CachedRef {
                                    action: c.action,
                                    checked,
                                };
                                cache.update_hashed(&keys[i], hashes[i], v);
                            }
                            Some(c.action)
                        }
                        HitCheck::Dead | HitCheck::Filtered => None,
                    },
                    _ => None,
                };
                let r = match cached {
                    Some(r) => {
                        stats.cache_hits += 1;
                        if config.check {
                            pipeline.lookup_into(&keys[i], check_res);
                            if let Some(e) = actions.entry(r) {
                                if *e.actions != *check_res.actions || *e.path != *check_res.path {
                                    stats.stale += 1;
                                }
                            }
                        }
                        r
                    }
                    None => {
                        if found[i].is_some() && config.cache {
                            stats.stale_hits += 1;
                        }
                        stats.pipeline_lookups += 1;
                        pipeline.lookup_into(&keys[i], res);
                        // Configured steering: on the packet's own key, only
                        // here (a miss); the result is cached with the entry.
                        let configured = if steering.is_empty() {
                            None
                        } else {
                            steering.lookup(&keys[i])
                        };
                        if !config.cache {
                            // Cache off (packet-out, tests): no entry to
                            // hold the mask, so find it in the list.
                            let mask = crate::action_table::workers_of(&res.actions).or(configured);
                            if let Some(mask) = mask {
                                if mask & my_bit == 0
                                    && sink.steer(mask, hashes[i], buf.frame(), in_port)
                                {
                                    stats.steered_out += 1;
                                    continue;
                                }
                            }
                            pipeline.credit_resolution(res, 1, bytes);
                            let prepared = Prepared {
                                origins: &res.origins,
                                ..Prepared::new(&res.actions)
                            };
                            let done = execute_prepared(
                                prepared,
                                buf,
                                &mut layouts[i],
                                in_port,
                                sink,
                                exec,
                            );
                            account(stats, done, res.outcome);
                            if done.verdict != Verdict::Done {
                                let origin = ttl_origin(pipeline, &res.path);
                                sink.ttl_expired(buf.frame(), in_port, origin);
                            }
                            continue;
                        }
                        for t in res.path.iter().map(|p| p.table_id).chain(res.miss_table()) {
                            tables_cached.mark(t);
                        }
                        let r = actions.intern_steered(
                            res,
                            configured,
                            |step| credit_of(pipeline, step),
                            |step| keeps_key(pipeline, step),
                        );
                        // The resolution is this version's answer for this
                        // key: whatever filters the (maybe shared, maybe
                        // just-filtered) entry carries hold for it.
                        let checked = actions.entry(r).map_or(0, |e| e.filter_count());
                        let v = CachedRef { action: r, checked };
                        cache.insert_hashed(&keys[i], hashes[i], v);
                        actions.count_live(r, bytes);
                        r
                    }
                };
                // Always `Some`: `r` was validated or interned just above.
                if let Some(e) = actions.entry(r) {
                    // Steering: the only cost for an unmasked decision is
                    // this test of a field of the entry read just below.
                    if let Some(mask) = e.workers {
                        if mask & my_bit == 0 && sink.steer(mask, hashes[i], buf.frame(), in_port) {
                            // The other worker counts it.
                            actions.uncount(r, bytes);
                            stats.steered_out += 1;
                            continue;
                        }
                    }
                    // The two commonest lists skip the executor; what they
                    // do is exactly what it would do (see `Shape`).
                    match e.shape {
                        Shape::Drop => {
                            account(stats, ExecOutcome::default(), e.outcome);
                            continue;
                        }
                        Shape::Output(port) if port != in_port => {
                            let meta = OutputMeta {
                                queue: None,
                                final_view: true,
                            };
                            sink.output(port, buf.frame(), meta);
                            stats.outputs += 1;
                            continue;
                        }
                        _ => {}
                    }
                    let prepared = Prepared {
                        actions: &e.actions,
                        last_write: e.last_write,
                        origins: &e.origins,
                    };
                    let done =
                        execute_prepared(prepared, buf, &mut layouts[i], in_port, sink, exec);
                    account(stats, done, e.outcome);
                    if done.verdict != Verdict::Done {
                        // Rare: the controller may ask for these.
                        let origin = ttl_origin(pipeline, &e.path);
                        sink.ttl_expired(buf.frame(), in_port, origin);
                    }
                }
            }
        }
        // Counts stay pending for a few batches (one atomic add per distinct
        // decision per flush, not per batch), longer while many decisions
        // wait (`DIRTY_PER_BATCH`), and are credited at once when the
        // control side asks (`sync_counters`).
        *unflushed_batches += 1;
        let requested = sync.requested.0.load(Ordering::Relaxed);
        let due = *unflushed_batches >= FLUSH_EVERY_BATCHES
            && actions.dirty_len() as u64 <= u64::from(*unflushed_batches) * DIRTY_PER_BATCH;
        if due || requested != *acked {
            flush(actions, table_credit, pipeline);
            *unflushed_batches = 0;
            if requested != *acked {
                *acked = requested;
                // Release: the credits above happen-before the ack.
                ack.0.store(requested, Ordering::Release);
            }
        }
        drop(guard);
    }
}

/// The origin an `OFPR_INVALID_TTL` packet-in reports: the last flow entry
/// of the packet's path (the one whose lookup ended the pipeline; the
/// Dec-TTL may have come from an earlier table's Apply-Actions, which the
/// final action list no longer tells apart).
fn ttl_origin(pipeline: &Pipeline, path: &[PathStep]) -> PacketInOrigin {
    path.last()
        .and_then(|step| pipeline.entry_in(step.table_id, step.rule))
        .map_or(PacketInOrigin::UNKNOWN, |e| PacketInOrigin {
            table_id: e.table_id,
            cookie: e.cookie,
            table_miss: e.is_table_miss(),
        })
}

impl Drop for Worker {
    /// Credit what is pending: counts are never lost with a worker.
    fn drop(&mut self) {
        self.flush_counters();
    }
}

/// Smallest cache a worker with the cache off allocates (it is never used).
const WAYS_MIN: usize = crate::microflow::WAYS;

/// Count how a packet's execution ended.
#[inline(always)]
fn account(stats: &mut WorkerStats, done: ExecOutcome, outcome: Outcome) {
    stats.outputs += u64::from(done.outputs);
    match done.verdict {
        Verdict::TtlExpired | Verdict::MplsTtlExpired => stats.drop_ttl += 1,
        Verdict::Done if done.outputs == 0 => match outcome {
            Outcome::Miss { .. } => stats.drop_table_miss += 1,
            _ => stats.drop_no_output += 1,
        },
        Verdict::Done => {}
    }
}

/// Credit every pending count: one atomic add per rule (packets and bytes)
/// per distinct decision, table counters summed per table first.
fn flush(actions: &mut ActionTable, table_credit: &mut TableCredit, pipeline: &Pipeline) {
    actions.drain_counts(|e, packets, bytes| credit_entry(table_credit, e, packets, bytes));
    table_credit.flush(pipeline);
}

/// Credit `packets`/`bytes` pending on entry `e` to its path's rules (their
/// shared counters, as its NO_*_COUNTS flags allow) and, worker-locally, to
/// the tables it visited (flushed by [`TableCredit::flush`]).
fn credit_entry(table_credit: &mut TableCredit, e: &ActionEntry, packets: u64, bytes: u64) {
    for (step, credit) in e.path.iter().zip(e.credits.iter()) {
        if let Some((c, count_packets, count_bytes)) = credit {
            c.add(
                if *count_packets { packets } else { 0 },
                if *count_bytes { bytes } else { 0 },
            );
        }
        table_credit.add(step.table_id, packets, packets);
    }
    if let Some(t) = e.miss_table() {
        table_credit.add(t, packets, 0);
    }
}

/// A sink for [`Worker::poll`] (no frames, no outputs).
struct NullSink;

impl OutputSink for NullSink {
    fn output(&mut self, _port: u32, _frame: &[u8], _meta: OutputMeta) {}
    fn controller(&mut self, _: &[u8], _: u16, _: PacketInOrigin, _: OutputMeta) {}
    fn port_count(&self) -> usize {
        0
    }
    fn port_info(&self, _index: usize) -> Option<PortInfo> {
        None
    }
}

/// Where a cached packet's credit for `step` goes (see [`RuleCredit`]).
fn credit_of(pipeline: &Pipeline, step: &PathStep) -> RuleCredit {
    pipeline.entry_in(step.table_id, step.rule).map(|e| {
        (
            e.counters.clone(),
            !e.flags.has(FlowModFlags::NO_PKT_COUNTS),
            !e.flags.has(FlowModFlags::NO_BYT_COUNTS),
        )
    })
}

/// Does `step`'s rule leave the key the next table sees unchanged?
fn keeps_key(pipeline: &Pipeline, step: &PathStep) -> bool {
    pipeline
        .entry_in(step.table_id, step.rule)
        .is_some_and(|e| preserves_key(&e.program))
}

/// Apply the log records after `seen` to the Action Table. Entries it
/// frees credit their pending counts first (table credits stay in
/// `table_credit` for the caller to flush).
fn catch_up(
    state: &DatapathState,
    seen: u64,
    actions: &mut ActionTable,
    cache: &mut MicroflowCache<CachedRef>,
    stats: &mut WorkerStats,
    table_credit: &mut TableCredit,
    res: &mut Resolution,
) {
    let log = &state.log;
    if seen < log.truncated {
        // Records we never applied were dropped: start over (crediting
        // everything first: clearing drops pending counts).
        actions.drain_counts(|e, packets, bytes| credit_entry(table_credit, e, packets, bytes));
        actions.clear();
        cache.clear();
        stats.log_overruns += 1;
        return;
    }
    let mut credit =
        |e: &ActionEntry, packets, bytes| credit_entry(table_credit, e, packets, bytes);
    let pipeline = &state.pipeline;
    for rec in log.records.iter().filter(|r| r.version > seen) {
        for &dep in rec.deps.iter() {
            actions.invalidate(dep, &mut credit);
        }
        // A rebuilt entry keeps its deps and filters: the record's ADDs
        // filter (or free) it like any other.
        for &rule in rec.modified.iter() {
            actions.rebuild(
                rule,
                res,
                |path, res| pipeline.resolve_along(path, rule, res),
                |step| credit_of(pipeline, step),
                |step| keeps_key(pipeline, step),
                &mut credit,
            );
        }
        for add in rec.adds.iter() {
            actions.add_filter(&add.rule, &add.shadowed, &mut credit);
        }
        stats.records_applied += 1;
    }
}

/// Free Action Table entries no cache entry uses once they clearly
/// outnumber the cache's entries (decisions of evicted microflows, or of
/// skipped inserts). The check is O(1); a collection is O(cache capacity)
/// and frees at least half the table, so its cost is amortised over at
/// least as many interned decisions.
#[inline]
fn maybe_collect(
    actions: &mut ActionTable,
    cache: &MicroflowCache<CachedRef>,
    table_credit: &mut TableCredit,
    pipeline: &Pipeline,
) {
    let limit = 2 * cache.len().max(4096);
    if actions.len() <= limit {
        return;
    }
    collect_unused(actions, cache, table_credit, pipeline);
}

#[cold]
fn collect_unused(
    actions: &mut ActionTable,
    cache: &MicroflowCache<CachedRef>,
    table_credit: &mut TableCredit,
    pipeline: &Pipeline,
) {
    // Freed entries must not hold uncredited packets.
    flush(actions, table_credit, pipeline);
    let mut used = vec![false; actions.slot_count()];
    for (_, c) in cache.iter() {
        if let Some(u) = used.get_mut(c.action.slot() as usize) {
            *u = true;
        }
    }
    actions.collect(|s| used.get(s as usize).copied().unwrap_or(false));
}

/// Ports below this number are counted in a direct-indexed table by
/// [`CountingSink`] (as a transmit path indexes its per-port queues).
pub const COUNTING_SINK_PORTS: usize = 1024;

/// A sink that counts outputs per port (benchmarks and tests): no copies.
#[derive(Debug, Clone)]
pub struct CountingSink {
    /// Ports for FLOOD/ALL.
    pub ports: Vec<PortInfo>,
    /// Frames per output port, indexed by port number (ports below
    /// [`COUNTING_SINK_PORTS`]).
    pub per_port: Vec<u64>,
    /// Frames to ports at or above [`COUNTING_SINK_PORTS`] (LOCAL, ...).
    pub other_ports: u64,
    /// Packet-ins.
    pub to_controller: u64,
    /// Last output port (tests).
    pub last_port: Option<u32>,
}

impl Default for CountingSink {
    fn default() -> Self {
        CountingSink {
            ports: Vec::new(),
            per_port: vec![0; COUNTING_SINK_PORTS],
            other_ports: 0,
            to_controller: 0,
            last_port: None,
        }
    }
}

impl OutputSink for CountingSink {
    #[inline]
    fn output(&mut self, port: u32, _frame: &[u8], _meta: OutputMeta) {
        self.last_port = Some(port);
        match self.per_port.get_mut(port as usize) {
            Some(n) => *n += 1,
            None => self.other_ports += 1,
        }
    }

    fn controller(&mut self, _: &[u8], _: u16, _: PacketInOrigin, _: OutputMeta) {
        self.to_controller += 1;
    }

    fn port_count(&self) -> usize {
        self.ports.len()
    }

    fn port_info(&self, index: usize) -> Option<PortInfo> {
        self.ports.get(index).copied()
    }
}
