//! Idle and hard timeouts (OpenFlow 1.3.5 §5.5) and why entries leave a
//! table (`ofp_flow_removed_reason`, §7.4.2).
//!
//! # What
//! [`Pipeline::prepare_expiry`] scans the entries that have a timeout, at a
//! time the caller passes in, and resolves the expired ones into a
//! [`PipelineOp`] of removals plus one [`RemovedFlow`] (entry and reason)
//! each, exactly as [`Pipeline::prepare`] does for a DELETE: replay the op
//! on every copy with [`Pipeline::apply`], so the copies of a left-right
//! pair stay identical, then send OFPT_FLOW_REMOVED for the removed entries
//! whose flags carry `SEND_FLOW_REM` ([`RemovedFlow::send_flow_rem`]).
//!
//! # When an entry expires (scan at time `now`, nanoseconds)
//! - hard: `hard_timeout != 0` and `now - installed_at_ns >= hard_timeout`
//!   seconds. A MODIFY keeps `installed_at_ns` and the timeouts (§6.4:
//!   "cookie, idle_timeout, hard_timeout, flags, counters and duration
//!   fields are left unchanged"); an ADD replacing an identical entry
//!   starts a new entry, with a new install time.
//! - idle: `idle_timeout != 0` and `now - used >= idle_timeout` seconds,
//!   where `used` is the later of the install time and the last scan that
//!   saw the entry's counters move.
//! - both at once: the reason is HARD_TIMEOUT. The spec does not choose;
//!   OVS's `rule_expire` tests the hard timeout first and so reports hard.
//!
//! # Why "counters moved since the previous scan"
//! The fast path credits rule counters late, in batches
//! ([`FlowCounters`]); there is no per-packet timestamp, and keeping one
//! would cost a shared store per packet. So the writer keeps, in an
//! [`ExpiryTracker`], each idle-timed entry's counter reading (packets +
//! bytes, so an entry with `NO_PKT_COUNTS` still shows use) as of the
//! previous scan; a different reading means packets were counted since,
//! and the entry counts as used *at this scan's time*. Hence:
//! - Idle expiry is never early, provided every packet's credit lands
//!   before the scan that would otherwise expire the entry: callers whose
//!   workers credit late (offlow-datapath) must sync the counters right
//!   before a scan. It is late by at most one scan interval.
//! - An entry counting neither packets nor bytes (`NO_PKT_COUNTS` and
//!   `NO_BYT_COUNTS`) never shows use: its idle timeout runs from install.
//! - An entry that inherited counters (an ADD replacing an identical entry
//!   without `RESET_COUNTS`) from an entry the tracker did not follow (one
//!   without an idle timeout) counts as used at its first scan if those
//!   counters are nonzero: its idle clock starts up to one scan late, never
//!   early. (Entries cannot carry the reading at install: their layout is
//!   shared with code outside this module.)
//!
//! # Costs
//! The pipeline keeps the entries that have a timeout in a separate index
//! (maintained by `apply`, see [`Pipeline::timed_entries`]) whose slots
//! copy what a scan needs (id, install time, timeouts, counters), so
//! entries without timeouts cost a scan nothing, a hard-only entry costs
//! reading its slot in order, and an idle-timed one adds a read of its
//! counters (prefetched ahead) and one probe of the tracker's [`IdTable`]
//! (48-byte records, visited nearly in order: both tables place ids by the
//! same hash). A scan allocates only for what it removes (and to drop
//! records of entries deleted meanwhile).
//!
//! Measured (release, this project's 2-core machine shared with other
//! builds, `cargo test --release -p offlow-pipeline --test expiry --
//! --ignored --nocapture scan_cost`): 100K entries with idle and hard
//! timeouts (plus 100K without), none expiring, half of them used between
//! scans: 1.5-2.5 ms per scan (7.5 ms when the scan read the entries
//! themselves). At one scan per 100 ms that is 2% of a core.
//!
//! # Tracker ownership
//! The tracker is plain writer state, deliberately *outside* the pipeline:
//! the two copies of a left-right pair receive the same ops at different
//! times and must not each keep (or share) mutable scan state. One tracker
//! goes with one pipeline lineage (the writer of the pair); a fresh
//! tracker is always safe (it only forgets which readings it saw, which
//! makes entries count as used once more: later expiry, never earlier).
//!
//! Thread-safety: [`ExpiryTracker`] is plain data owned by the single
//! writer; the scan reads the pipeline through `&self` and the counters'
//! relaxed atomics, so it may run while workers credit.

use std::sync::Arc;

use offlow_classifier::IdTable;
use offlow_sync::prefetch;

use crate::entry::{FlowCounters, FlowEntry, FlowModFlags};
use crate::pipeline::{FlowModEffect, Pipeline, PipelineOp};

/// Nanoseconds per second (timeouts are whole seconds, u16: the product
/// is below 2^46, no overflow).
const NS_PER_SEC: u64 = 1_000_000_000;

/// Slots ahead of the scan whose counters are prefetched.
const PREFETCH_AHEAD: usize = 16;

/// `ofp_flow_removed_reason` (§7.4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum RemovedReason {
    /// `OFPRR_IDLE_TIMEOUT`: no packet for `idle_timeout` seconds.
    IdleTimeout = 0,
    /// `OFPRR_HARD_TIMEOUT`: `hard_timeout` seconds since install.
    HardTimeout = 1,
    /// `OFPRR_DELETE`: removed by a DELETE flow-mod.
    Delete = 2,
    /// `OFPRR_GROUP_DELETE`: its group was deleted.
    GroupDelete = 3,
    /// `OFPRR_METER_DELETE`: its meter was deleted.
    MeterDelete = 4,
}

impl RemovedReason {
    /// The wire code (`ofp_flow_removed.reason`).
    pub const fn code(self) -> u8 {
        self as u8
    }
}

/// An entry that left its table, and why: what OFPT_FLOW_REMOVED reports.
/// The entry is the one that was installed (cookie, priority, table,
/// timeouts, flags, install time) and its counters are live: read them
/// once no worker can still credit it (see offlow-datapath's
/// `Control::expire`).
#[derive(Debug, Clone)]
pub struct RemovedFlow {
    /// The removed entry.
    pub entry: Arc<FlowEntry>,
    /// Why it was removed.
    pub reason: RemovedReason,
}

impl RemovedFlow {
    /// An entry removed by a DELETE flow-mod (from
    /// [`FlowModEffect::removed`]).
    pub fn deleted(entry: Arc<FlowEntry>) -> RemovedFlow {
        RemovedFlow {
            entry,
            reason: RemovedReason::Delete,
        }
    }

    /// Every entry a DELETE removed, as [`RemovedFlow`]s.
    pub fn deleted_by(effect: &FlowModEffect) -> Vec<RemovedFlow> {
        effect
            .removed
            .iter()
            .map(|e| RemovedFlow::deleted(Arc::clone(e)))
            .collect()
    }

    /// True when the controller asked for a flow-removed message
    /// (`OFPFF_SEND_FLOW_REM`, §6.5: "If the OFPFF_SEND_FLOW_REM flag is
    /// set, the switch must send a flow removed message").
    pub fn send_flow_rem(&self) -> bool {
        self.entry.flags.has(FlowModFlags::SEND_FLOW_REM)
    }

    /// How long the entry lived, as of `now_ns` (0 if the clock went back).
    pub fn duration_ns(&self, now_ns: u64) -> u64 {
        now_ns.saturating_sub(self.entry.installed_at_ns)
    }
}

/// A timed entry as the pipeline indexes it for scans: what a scan reads,
/// copied out of the entry, so a scan walks the index in order and touches
/// nothing of the entry but its counters (an entry spans several cache
/// lines at a random address; reading them made scans 3-4x slower, see
/// the module docs).
#[derive(Debug, Clone)]
pub(crate) struct TimedSlot {
    /// The entry (what a removal reports).
    pub(crate) entry: Arc<FlowEntry>,
    /// Its counters.
    counters: Arc<FlowCounters>,
    /// Its install time.
    installed_at_ns: u64,
    /// Its id.
    id: u32,
    /// Its idle timeout (s).
    idle_timeout: u16,
    /// Its hard timeout (s).
    hard_timeout: u16,
}

impl TimedSlot {
    /// The slot of `e`.
    pub(crate) fn new(e: &Arc<FlowEntry>) -> TimedSlot {
        TimedSlot {
            entry: Arc::clone(e),
            counters: Arc::clone(&e.counters),
            installed_at_ns: e.installed_at_ns,
            id: e.id,
            idle_timeout: e.idle_timeout,
            hard_timeout: e.hard_timeout,
        }
    }
}

/// What the tracker knows of one idle-timed entry.
#[derive(Debug, Clone)]
struct IdleRecord {
    /// The counters the reading came from: a MODIFY or ADD with
    /// `RESET_COUNTS` gives the entry new ones (held, so pointer equality
    /// is exact: the address cannot be reused while we hold it).
    counters: Arc<FlowCounters>,
    /// The install time of the entry seen; a change means an ADD replaced
    /// the entry.
    installed_at_ns: u64,
    /// packets + bytes at the last scan (both only grow, so the sum moves
    /// exactly when either does).
    reading: u64,
    /// When the entry was last known used (install, or a scan that saw the
    /// reading move).
    used_ns: u64,
    /// The scan that last saw the entry (stale records are dropped).
    scan: u64,
}

/// The writer's idle-timeout state: per idle-timed entry, the counter
/// reading of the previous scan and when the entry was last known used
/// (see the module docs). Create one with the pipeline, pass it to every
/// [`Pipeline::prepare_expiry`].
#[derive(Debug, Default, Clone)]
pub struct ExpiryTracker {
    /// Rule id -> record, for idle-timed entries only.
    idle: IdTable<IdleRecord>,
    /// Scans done (numbers them, to find stale records).
    scans: u64,
}

impl ExpiryTracker {
    /// An empty tracker.
    pub fn new() -> ExpiryTracker {
        ExpiryTracker::default()
    }

    /// Idle-timed entries followed.
    pub fn len(&self) -> usize {
        self.idle.len()
    }

    /// True when no entry is followed.
    pub fn is_empty(&self) -> bool {
        self.idle.is_empty()
    }

    /// The reason `e` expires at `now_ns`, if it does; updates its record.
    /// Returns `(reason, touched)`: `touched` when `e`'s record was seen.
    fn check(&mut self, e: &TimedSlot, now_ns: u64, scan: u64) -> (Option<RemovedReason>, bool) {
        let hard = u64::from(e.hard_timeout) * NS_PER_SEC;
        if e.hard_timeout != 0 && now_ns.saturating_sub(e.installed_at_ns) >= hard {
            return (Some(RemovedReason::HardTimeout), false);
        }
        if e.idle_timeout == 0 {
            return (None, false);
        }
        let key = u64::from(e.id);
        if self.idle.get(key).is_none() {
            // First sight: fresh counters start at zero, so any reading
            // above it is use since install (see the module docs for
            // inherited counters).
            self.idle.insert(
                key,
                IdleRecord {
                    counters: Arc::clone(&e.counters),
                    installed_at_ns: e.installed_at_ns,
                    reading: 0,
                    used_ns: e.installed_at_ns,
                    scan,
                },
            );
        }
        let Some(rec) = self.idle.get_mut(key) else {
            // Unreachable: inserted just above. Treat as not expired.
            return (None, false);
        };
        rec.scan = scan;
        if !Arc::ptr_eq(&rec.counters, &e.counters) {
            // RESET_COUNTS: the new counters started at zero.
            rec.counters = Arc::clone(&e.counters);
            rec.reading = 0;
        }
        if rec.installed_at_ns != e.installed_at_ns {
            // An ADD replaced the entry: a new entry, a new idle clock.
            rec.installed_at_ns = e.installed_at_ns;
            rec.used_ns = e.installed_at_ns;
        }
        let (packets, bytes) = e.counters.get();
        let reading = packets.wrapping_add(bytes);
        if reading != rec.reading {
            rec.reading = reading;
            rec.used_ns = rec.used_ns.max(now_ns);
        }
        let idle = u64::from(e.idle_timeout) * NS_PER_SEC;
        let expired = now_ns.saturating_sub(rec.used_ns) >= idle;
        (expired.then_some(RemovedReason::IdleTimeout), true)
    }
}

impl Pipeline {
    /// Find the entries expired at `now_ns` (the clock of
    /// [`Pipeline::prepare`]'s `now_ns` and `installed_at_ns`) and resolve
    /// their removal into an op, like [`Pipeline::prepare`] does for a
    /// DELETE. Returns the op (replay it on every copy with
    /// [`Pipeline::apply`]; an empty batch when nothing expired) and the
    /// removed entries with their reasons, sorted by id.
    ///
    /// `tracker` must be the same one at every scan of this pipeline's
    /// lineage; it is updated as if the op will be applied (an expired
    /// entry's record is dropped). Counters must be current for exact idle
    /// detection: credit pending counts first.
    pub fn prepare_expiry(
        &self,
        now_ns: u64,
        tracker: &mut ExpiryTracker,
    ) -> (PipelineOp, Vec<RemovedFlow>) {
        tracker.scans += 1;
        let scan = tracker.scans;
        let mut removed = Vec::new();
        let mut touched = 0usize;
        // The slots are read in order (the hardware prefetcher follows), the
        // tracker's records nearly so (both tables place ids by the same
        // hash), but each entry's counters sit at a random address: start
        // loading them a few slots ahead so the misses overlap.
        let mut ahead = self.timed_slots().skip(PREFETCH_AHEAD);
        for e in self.timed_slots() {
            if let Some(a) = ahead.next() {
                prefetch(Arc::as_ptr(&a.counters));
            }
            let (reason, seen) = tracker.check(e, now_ns, scan);
            touched += usize::from(seen);
            if let Some(reason) = reason {
                removed.push(RemovedFlow {
                    entry: Arc::clone(&e.entry),
                    reason,
                });
            }
        }
        // Records not seen this scan belong to entries deleted or replaced
        // by untimed ones since: drop them (a walk only when there are some).
        if tracker.idle.len() > touched {
            let stale: Vec<u64> = tracker
                .idle
                .iter()
                .filter(|(_, r)| r.scan != scan)
                .map(|(k, _)| k)
                .collect();
            for k in stale {
                tracker.idle.remove(k);
            }
        }
        for r in &removed {
            tracker.idle.remove(u64::from(r.entry.id));
        }
        // Sorted by id, as DELETE's ops are: deterministic and replayable.
        removed.sort_unstable_by_key(|r| r.entry.id);
        let ops: Vec<PipelineOp> = removed
            .iter()
            .map(|r| PipelineOp::Remove {
                table_id: r.entry.table_id,
                id: r.entry.id,
            })
            .collect();
        (PipelineOp::Batch(ops), removed)
    }

    /// `prepare_expiry` then `apply`: for a single copy (tests, tools).
    pub fn expire(&mut self, now_ns: u64, tracker: &mut ExpiryTracker) -> Vec<RemovedFlow> {
        let (op, removed) = self.prepare_expiry(now_ns, tracker);
        if !removed.is_empty() {
            self.apply(&op);
        }
        removed
    }
}
