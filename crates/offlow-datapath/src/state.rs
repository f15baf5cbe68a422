//! What the writer publishes to the workers, and what else they share.
//!
//! What: [`DatapathState`] is the published half of the datapath: the
//! pipeline and the log of invalidation records ([`StateOp::Invalidate`]),
//! replicated by `offlow_sync::Versioned` so that a read section sees a log
//! that matches its pipeline. Beside it, two small structures shared
//! outside the left-right pair: the counter-sync requests and acks
//! (`CounterSync`) and the tables-cached bits (`TablesCached`).
//!
//! Who touches what: [`Control`](crate::Control) (control.rs) is the only
//! writer of the state and of `CounterSync::requested`; each
//! [`Worker`](crate::Worker) (worker.rs) reads the state inside its read
//! sections, stores its own ack and sets tables-cached bits. Both import
//! this module, and this module imports neither. The argument that makes
//! `commit` a barrier is in [`crate::worker`].
//!
//! Invariants:
//! - the log holds the records of the latest versions, oldest first, at
//!   most [`LOG_RECORDS`]; every record of a version `<= truncated` is gone;
//! - a worker stores an ack only after crediting its pending counts.
//!
//! Thread-safety: `DatapathState` is plain data behind the left-right pair;
//! the sync structures are atomics (ordering argued at each use) and a
//! mutex that no packet path takes.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use offlow_classifier::{Rule, RuleId};
use offlow_pipeline::{Pipeline, PipelineOp};
use offlow_sync::{Apply, CachePadded};

use crate::action_table::Dep;

/// Invalidation records kept; a worker more than this many versions behind
/// clears its caches instead of catching up record by record.
pub(crate) const LOG_RECORDS: usize = 1024;

/// One published version's invalidations.
#[derive(Debug, Clone)]
pub(crate) struct Record {
    pub(crate) version: u64,
    /// Deps whose dependents are freed (DELETE, expiry).
    pub(crate) deps: Arc<[Dep]>,
    /// Rules whose instructions changed (MODIFY): their dependents are
    /// rebuilt in place where the path allows, else freed.
    pub(crate) modified: Arc<[RuleId]>,
    /// ADDs, whose shadowed deps' dependents are filtered.
    pub(crate) adds: Arc<[AddFilter]>,
}

/// One ADD as the workers see it: the new rule and what it may take keys
/// from.
#[derive(Debug, Clone)]
pub(crate) struct AddFilter {
    /// The new rule's match and priority (its id is the pipeline's).
    pub(crate) rule: Rule,
    /// Its table's shadowed rules (`Dep::Rule`) and the table's miss
    /// (`Dep::Miss`).
    pub(crate) shadowed: Box<[Dep]>,
}

/// The recent invalidation records, oldest first.
#[derive(Debug, Clone, Default)]
pub(crate) struct InvalidationLog {
    pub(crate) records: VecDeque<Record>,
    /// Every record of a version `<= truncated` has been dropped.
    pub(crate) truncated: u64,
}

/// What the workers read: the pipeline and the invalidation log, published
/// together so a section sees a log that matches its pipeline.
#[derive(Debug, Clone)]
pub(crate) struct DatapathState {
    /// The OpenFlow pipeline.
    pub(crate) pipeline: Pipeline,
    pub(crate) log: InvalidationLog,
}

impl DatapathState {
    /// `pipeline` with an empty log (version 0: nothing to catch up on).
    pub(crate) fn new(pipeline: Pipeline) -> DatapathState {
        DatapathState {
            pipeline,
            log: InvalidationLog::default(),
        }
    }
}

/// A replicated update of [`DatapathState`].
#[derive(Debug, Clone)]
pub(crate) enum StateOp {
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

/// One worker's acknowledgement of counter-sync requests.
pub(crate) type AckSlot = CachePadded<AtomicU64>;

/// Counter-sync requests from the control side and the workers' acks.
#[derive(Debug, Default)]
pub(crate) struct CounterSync {
    /// Latest request; its own cache line, written only by `sync_counters`.
    pub(crate) requested: AckSlot,
    /// Registered workers' ack slots (locked on registration and by
    /// `sync_counters`, never by a worker's batch).
    pub(crate) acks: Mutex<Vec<Weak<AckSlot>>>,
}

/// Tables some worker has cached a decision through, one bit each: set by
/// a worker when it interns a decision whose path looked the table up,
/// never cleared. The writer reads it to skip the overlap walk of an ADD
/// into a table no cached decision went through (it then reports the whole
/// table as shadowed,
/// [`ShadowReport::WholeTable`](offlow_pipeline::ShadowReport::WholeTable)).
/// The bit is only a hint for precision: a whole-table report is correct
/// whatever a worker cached meanwhile, so the bits need no ordering with
/// the versions.
#[derive(Debug, Default)]
pub(crate) struct TablesCached([AtomicU64; 4]);

impl TablesCached {
    /// Mark `table` (a relaxed load first: once set, no further writes, so
    /// the cache line stays shared between the workers).
    #[inline]
    pub(crate) fn mark(&self, table: u8) {
        let (word, bit) = (usize::from(table / 64), 1u64 << (table % 64));
        if self.0[word].load(Ordering::Relaxed) & bit == 0 {
            self.0[word].fetch_or(bit, Ordering::Relaxed);
        }
    }

    pub(crate) fn is_marked(&self, table: u8) -> bool {
        let (word, bit) = (usize::from(table / 64), 1u64 << (table % 64));
        self.0[word].load(Ordering::Relaxed) & bit != 0
    }
}

/// What a new worker shares with its [`Control`](crate::Control).
pub(crate) struct WorkerShared {
    /// The counter-sync requests.
    pub(crate) sync: Arc<CounterSync>,
    /// This worker's ack slot (registered in `sync.acks`).
    pub(crate) ack: Arc<AckSlot>,
    /// The tables-cached bits.
    pub(crate) tables_cached: Arc<TablesCached>,
    /// The version the worker starts at: it has nothing cached, so no
    /// record up to it concerns it.
    pub(crate) seen: u64,
}
