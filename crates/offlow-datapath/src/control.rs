//! The writer side of the datapath: [`Control`] turns flow-mods, expiry
//! and accelerator installs into `StateOp`s on the left-right pair, and
//! [`Control::commit`] publishes them with one invalidation record per
//! version.
//!
//! What it keeps: the [`Versioned`] pair of `DatapathState` (through
//! which it is the single writer), the deps, modified rules and ADD filters
//! noted since the last commit, the idle-timeout tracker, and its ends of
//! the structures it shares with the workers (`state.rs`).
//!
//! Invariants: every change applied to the writer's copy since the last
//! commit has its invalidations noted in `pending*`, so the record a
//! commit appends covers exactly the changes it publishes; `commit`
//! returns only after the quiescent wait, which is what makes it the
//! barrier (the argument is in [`crate::worker`], next to the catch-up
//! that completes it).
//!
//! Thread-safety: one thread owns a `Control` (`&mut self` for every
//! change). It shares with workers only what `state.rs` holds; it
//! never touches a worker's caches, which is why a worker's catch-up, not
//! the writer, frees stale decisions.
//!
//! Listing the deps an ADD shadows costs the writer an overlap walk of the
//! table. It only narrows which entries get the filter, so the writer skips
//! it for a table no worker has yet cached a decision through (a shared bit
//! per table, set on intern) and records [`Dep::Table`] instead, which
//! covers every entry through the table: bulk loads into an idle switch
//! pay nothing for precision nobody needs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use offlow_classifier::{Built, RuleId};
use offlow_pipeline::group::{GroupError, GroupMod};
use offlow_pipeline::meter::{MeterMod, MeterModFailedCode};
use offlow_pipeline::{
    ExpiryTracker, FlowMod, FlowModEffect, Pipeline, PipelineError, PipelineOp, RemovedFlow,
    ShadowReport,
};
use offlow_sync::{CachePadded, Versioned};

use crate::action_table::Dep;
use crate::state::{AddFilter, CounterSync, DatapathState, StateOp, TablesCached, WorkerShared};
use crate::worker::{Worker, WorkerConfig};

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
            state: Versioned::new(DatapathState::new(pipeline)),
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
        let shared = WorkerShared {
            sync: self.sync.clone(),
            ack,
            tables_cached: self.tables_cached.clone(),
            // A new worker has nothing cached: records up to now concern
            // it not.
            seen: self.state.version(),
        };
        Worker::new(self.state.reader(), config, shared)
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

    /// Validate and apply a GROUP_MOD (§6.5); workers see it after
    /// [`commit`](Self::commit). Cached decisions need no invalidation for
    /// the group itself: they keep `Action::Group` and the executor reads
    /// the group from the version a worker runs, so a packet processed
    /// after the commit's quiescent wait takes the new buckets. A DELETE
    /// also removes the flow entries forwarding to the group (the effect's
    /// `removed`), whose decisions are freed as for a flow DELETE.
    pub fn group_mod(&mut self, gm: &GroupMod, now_ns: u64) -> Result<FlowModEffect, GroupError> {
        let (op, effect) = self.pipeline().prepare_group_mod(gm, now_ns)?;
        self.state.apply(StateOp::Pipeline(op));
        self.pending
            .extend(effect.removed.iter().map(|e| Dep::Rule(e.id)));
        Ok(effect)
    }

    /// Validate and apply a METER_MOD (§6.6) at `now_ns` (the metering
    /// clock, [`crate::clock::now_ns`] in the switch); workers see it after
    /// [`commit`](Self::commit). Like a GROUP_MOD it needs no invalidation
    /// of its own: cached decisions keep `Action::Meter(id)` and the
    /// executor takes the meter from the version a worker runs, so a MODIFY
    /// reaches every cached flow at the commit. A DELETE also removes the
    /// flow entries that use the meter (the effect's `removed`), whose
    /// decisions are freed as for a flow DELETE. A refusal is the
    /// `OFPMMFC_*` code to answer.
    pub fn meter_mod(
        &mut self,
        mm: &MeterMod,
        now_ns: u64,
    ) -> Result<FlowModEffect, MeterModFailedCode> {
        let (op, effect) = self.pipeline().prepare_meter_mod(mm, now_ns)?;
        self.state.apply(StateOp::Pipeline(op));
        self.pending
            .extend(effect.removed.iter().map(|e| Dep::Rule(e.id)));
        Ok(effect)
    }

    /// Record whether `port` is live (link up, not configured down) for
    /// the buckets watching it; true when that changed anything (commit to
    /// publish). Fast-failover and select groups take their buckets by it
    /// from the next version on.
    pub fn port_live(&mut self, port: u32, live: bool) -> bool {
        match self.pipeline().prepare_port_live(port, live) {
            Some(op) => {
                self.state.apply(StateOp::Pipeline(op));
                true
            }
            None => false,
        }
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

/// Lock a mutex whose data (a list of weak slots) a panic cannot leave
/// inconsistent, so poisoning is ignored.
fn lock<U>(m: &Mutex<U>) -> std::sync::MutexGuard<'_, U> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
