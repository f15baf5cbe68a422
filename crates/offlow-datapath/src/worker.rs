//! Workers and their control: the fast path with consistent updates.
//!
//! This module holds the reader, [`Worker`]; the writer,
//! [`Control`](crate::Control), is in [`crate::control`], and what they
//! share in `state.rs`. The argument below spans the three; it lives
//! here, next to the catch-up that completes it.
//!
//! # Shape
//! [`Control`](crate::Control) is the single writer. It owns a left-right
//! [`Versioned`](offlow_sync::Versioned) pair of `DatapathState` (the
//! pipeline plus an invalidation log). Flow-mods are applied to the
//! inactive copy ([`Control::flow_mod`](crate::Control::flow_mod));
//! [`Control::commit`](crate::Control::commit) appends one invalidation
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
//! overlapping rules
//! ([`FlowModEffect::shadowed`](offlow_pipeline::FlowModEffect::shadowed),
//! including the table-miss entry) and from keys that matched nothing in
//! `t` ([`Dep::Miss`](crate::Dep::Miss)). The record carries, per ADD,
//! `N`'s match and priority (an `AddFilter`) and those
//! deps. Catching up, a worker does not free their dependents: an entry
//! whose path reached `t` with the packet's own key keeps living with `N`
//! as a *filter* ([`ActionTable::add_filter`]); an
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
//! (The writer lists an ADD's shadowed deps only for a table some worker
//! has cached a decision through; see [`crate::control`].)
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
//! collection), and whenever
//! [`Control::sync_counters`](crate::Control::sync_counters) asks, which
//! waits for every worker's acknowledgement. So counters read after `sync_counters`
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
//! # Meters (`offlow_pipeline::Action::Meter`)
//! A metered flow's decision is cached like any other: its action list
//! holds `Action::Meter(id)` where the Meter instruction runs, and the
//! executor charges the packet to meter `id` of the version the batch runs
//! (token buckets in atomics shared by every worker: no lock), at the time
//! read once per batch ([`crate::clock::now_ns`], only when the version
//! has meters). So a METER MODIFY needs no invalidation (packets after the
//! commit's quiescent wait find the new meter by id) and a METER DELETE
//! removes its flows like a flow DELETE. A meter that drops the packet
//! stops its execution; the worker counts `drop_meter`.
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

use std::sync::atomic::Ordering;
use std::sync::Arc;

use offlow_flow::{extract_to, present, Field, FlowKey, Layout, ParseStats};
use offlow_pipeline::{FlowModFlags, Outcome, PacketInOrigin, PathStep, Pipeline, Resolution};
use offlow_sync::ReadHandle;

use crate::action_table::{
    preserves_key, ActionEntry, ActionRef, ActionTable, ActionTableStats, CachedRef, HitCheck,
    RuleCredit, Shape,
};
use crate::buf::PacketBuf;
use crate::execute::{
    execute_prepared, ExecOutcome, ExecStats, OutputMeta, OutputSink, PortInfo, Prepared,
    SteeredFrame, Verdict,
};
use crate::microflow::{flow_hash_ext, InsertPolicy, MicroflowCache, MicroflowStats, MAX_BATCH};
use crate::state::{AckSlot, CounterSync, DatapathState, TablesCached, WorkerShared};
use crate::steer::SteeringTable;

/// Batches a worker may keep counts pending before it credits them.
///
/// Why this many: each flush does one atomic add per rule per distinct
/// decision, on counter lines no other packet touches, so a longer period
/// means fewer of those misses per packet. 1024 batches (32K packets of
/// 32) ran the cached acl+fib datapath 5% faster than 256 (5 of 5
/// alternated pairs, 2026-11-22). Nothing reads counters without
/// [`Control::sync_counters`](crate::Control::sync_counters) first
/// (statistics, expiry), which credits at once, so the longer lag is never
/// observed.
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
/// [`Control::sync_counters`](crate::Control::sync_counters) are exact
/// either way.
pub const DIRTY_PER_BATCH: u64 = 4;

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
    /// Dropped by a meter's drop band (rate exceeded).
    pub drop_meter: u64,
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
            drop_meter,
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
        self.drop_meter += drop_meter;
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
    /// A worker reading through `reader`, sharing `shared` with its
    /// control ([`Control::worker`](crate::Control::worker) makes both).
    pub(crate) fn new(
        reader: ReadHandle<DatapathState>,
        config: WorkerConfig,
        shared: WorkerShared,
    ) -> Worker {
        let WorkerShared {
            sync,
            ack,
            tables_cached,
            seen,
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

    /// Whether the control side asked for a counter sync this worker has
    /// not answered yet. The next [`process`](Self::process) or
    /// [`poll`](Self::poll) answers it; an owner with counters of its own
    /// (ports) publishes them first, so that what the control side reads
    /// after the answer includes every frame handled before the request.
    pub fn sync_pending(&self) -> bool {
        self.sync.requested.0.load(Ordering::Acquire) != self.acked
    }

    /// Credit every pending count now.
    pub fn flush_counters(&mut self) {
        let guard = self.reader.enter();
        flush(&mut self.actions, &mut self.table_credit, &guard.pipeline);
        self.unflushed_batches = 0;
    }

    /// Process `frames`, all received on `in_port`, in one read section:
    /// each frame is parsed, resolved (cache or pipeline), counted and
    /// executed in place; outputs go to `sink`. Meters are charged at
    /// [`clock::now_ns`](crate::clock::now_ns), read once for the batch
    /// when the version has meters.
    pub fn process<S, O>(&mut self, frames: &mut [PacketBuf<S>], in_port: u32, sink: &mut O)
    where
        S: AsRef<[u8]> + AsMut<[u8]>,
        O: OutputSink + ?Sized,
    {
        self.process_inner(frames, in_port, sink, None);
    }

    /// [`process`](Self::process) with meters charged at `now_ns` (a
    /// synthetic clock for tests; it must not go backwards across calls,
    /// and must be the time base the meters were created with).
    pub fn process_at<S, O>(
        &mut self,
        frames: &mut [PacketBuf<S>],
        in_port: u32,
        sink: &mut O,
        now_ns: u64,
    ) where
        S: AsRef<[u8]> + AsMut<[u8]>,
        O: OutputSink + ?Sized,
    {
        self.process_inner(frames, in_port, sink, Some(now_ns));
    }

    #[inline(always)]
    fn process_inner<S, O>(
        &mut self,
        frames: &mut [PacketBuf<S>],
        in_port: u32,
        sink: &mut O,
        now_ns: Option<u64>,
    ) where
        S: AsRef<[u8]> + AsMut<[u8]>,
        O: OutputSink + ?Sized,
    {
        // Have the decisions hit in flight while the first packets are
        // handled: with many flows they are mostly in no cache (+20-35% on
        // top of the deferred flush with 100K or 1M flows). A table that
        // fits in L2 skips it, and gets a copy of the loop without it: the
        // mere test inside the loop cost ~2% there (code placement).
        if self.config.cache && self.actions.outgrows_l2() {
            self.process_with::<true, S, O>(frames, in_port, sink, now_ns);
        } else {
            self.process_with::<false, S, O>(frames, in_port, sink, now_ns);
        }
    }

    /// [`process`](Self::process), prefetching the decisions hit or not.
    ///
    /// The stages, per chunk of up to [`MAX_BATCH`] frames: [`parse_chunk`]
    /// (keys, layouts, hashes), [`lookup_chunk`] (the cache, batched and
    /// prefetched), then per packet a decision — [`serve_hit`], else
    /// [`resolve_miss`] (cache on) or [`resolve_uncached`] (cache off) —
    /// then [`steered_away`] and [`execute_decision`], the one execute tail
    /// both branches end in. Every stage is `#[inline(always)]`: this is the
    /// hot loop, and it compiles to one body as it did before it was split.
    fn process_with<const PREFETCH_DECISIONS: bool, S, O>(
        &mut self,
        frames: &mut [PacketBuf<S>],
        in_port: u32,
        sink: &mut O,
        now_ns: Option<u64>,
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
        let section = Section {
            pipeline,
            steering,
            tables_cached,
            in_port,
            // 0 for an index past 63: such a worker is in no mask.
            my_bit: u32::try_from(config.worker_index)
                .ok()
                .and_then(|i| 1u64.checked_shl(i))
                .unwrap_or(0),
            check: config.check,
            // One clock reading per batch, none without meters: metered
            // flows stay on the cached path (the meter is charged at
            // execution, no invalidation, no lock).
            now_ns: now_ns.unwrap_or_else(|| {
                if pipeline.meters().is_empty() || frames.is_empty() {
                    0
                } else {
                    crate::clock::now_ns()
                }
            }),
        };
        for chunk in frames.chunks_mut(MAX_BATCH) {
            let n = chunk.len();
            let extended = parse_chunk(chunk, in_port, keys, hashes, layouts, parse);
            if config.cache {
                lookup_chunk::<PREFETCH_DECISIONS>(
                    cache,
                    actions,
                    &keys[..n],
                    &hashes[..n],
                    extended,
                    &mut found[..n],
                );
            }
            for (i, buf) in chunk.iter_mut().enumerate() {
                let bytes = buf.len() as u64;
                stats.packets += 1;
                stats.bytes += bytes;
                let pkt = Packet {
                    key: &keys[i],
                    hash: hashes[i],
                    bytes,
                };
                let decision = if config.cache {
                    let hit = found[i].and_then(|c| serve_hit(c, pkt, actions, cache, stats));
                    let r = match hit {
                        Some(r) => {
                            stats.cache_hits += 1;
                            if section.check {
                                check_hit(&section, pkt, r, actions, check_res, stats);
                            }
                            r
                        }
                        None => {
                            if found[i].is_some() {
                                stats.stale_hits += 1;
                            }
                            resolve_miss(&section, pkt, res, actions, cache, stats)
                        }
                    };
                    // Always `Some`: `r` was validated or interned just above.
                    let Some(e) = actions.entry(r) else {
                        continue;
                    };
                    // Steering: the only cost for an unmasked decision is
                    // this test of a field of the entry read just below.
                    if steered_away(&section, e.workers, pkt, buf, sink) {
                        // The other worker counts it.
                        actions.uncount(r, bytes);
                        stats.steered_out += 1;
                        continue;
                    }
                    Decision::Cached(e)
                } else {
                    let mask = resolve_uncached(&section, pkt, res, stats);
                    if steered_away(&section, mask, pkt, buf, sink) {
                        stats.steered_out += 1;
                        continue;
                    }
                    pipeline.credit_resolution(res, 1, bytes);
                    Decision::Resolved(res)
                };
                execute_decision(
                    &section,
                    decision,
                    pkt.hash,
                    buf,
                    &mut layouts[i],
                    sink,
                    exec,
                    stats,
                );
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

/// What every stage of one read section reads: the published pipeline and
/// this worker's settings for the batch.
struct Section<'a> {
    pipeline: &'a Pipeline,
    steering: &'a SteeringTable,
    tables_cached: &'a TablesCached,
    in_port: u32,
    /// This worker's bit in a decision's worker mask (0: in no mask).
    my_bit: u64,
    /// [`WorkerConfig::check`].
    check: bool,
    /// The time meters are charged at for this batch.
    now_ns: u64,
}

/// One parsed packet as the per-packet stages see it.
#[derive(Clone, Copy)]
struct Packet<'a> {
    key: &'a FlowKey,
    hash: u64,
    bytes: u64,
}

/// What a packet is executed with: a cached decision, or (cache off) a
/// fresh resolution. A reference, not a copy of the fields: a hit whose
/// list has a short-cut shape reads nothing but the shape and outcome.
#[derive(Clone, Copy)]
enum Decision<'a> {
    /// An Action Table entry; its shape lets the commonest lists skip the
    /// executor.
    Cached(&'a ActionEntry),
    /// A resolution of this packet's key; always run by the executor.
    Resolved(&'a Resolution),
}

impl<'a> Decision<'a> {
    #[inline(always)]
    fn shape(self) -> Shape {
        match self {
            Decision::Cached(e) => e.shape,
            Decision::Resolved(_) => Shape::General,
        }
    }

    #[inline(always)]
    fn outcome(self) -> Outcome {
        match self {
            Decision::Cached(e) => e.outcome,
            Decision::Resolved(res) => res.outcome,
        }
    }

    #[inline(always)]
    fn prepared(self) -> Prepared<'a> {
        match self {
            // Spelled out: `Prepared::new` would scan the list for its
            // last write, which the entry has computed once.
            Decision::Cached(e) => Prepared {
                actions: &e.actions,
                last_write: e.last_write,
                origins: &e.origins,
                groups: None,
                flow_hash: 0,
                meters: None,
                now_ns: 0,
            },
            Decision::Resolved(res) => Prepared {
                origins: &res.origins,
                ..Prepared::new(&res.actions)
            },
        }
    }

    #[inline(always)]
    fn path(self) -> &'a [PathStep] {
        match self {
            Decision::Cached(e) => &e.path,
            Decision::Resolved(res) => &res.path,
        }
    }
}

/// Stage 1: parse each frame of `chunk` into `keys` and `layouts` and hash
/// its key. Returns the bit set of keys whose hash covers the extended
/// words (`flow_hash_ext`), as the cache lookup wants it.
#[inline(always)]
fn parse_chunk<S>(
    chunk: &[PacketBuf<S>],
    in_port: u32,
    keys: &mut [FlowKey],
    hashes: &mut [u64],
    layouts: &mut [Layout],
    parse: &mut ParseStats,
) -> u64
where
    S: AsRef<[u8]> + AsMut<[u8]>,
{
    let mut extended = 0u64;
    for (i, buf) in chunk.iter().enumerate() {
        extract_to(buf.frame(), in_port, &mut keys[i], &mut layouts[i], parse);
        if let Some(id) = buf.tunnel_id() {
            // From a tunnel port: the key of the encapsulation it came in
            // is logical-port metadata, not a header of the frame, so no
            // pop of the frame's own headers clears it.
            keys[i].set(Field::TunnelId, u128::from(id));
            keys[i].clear_presence(present::TUNNEL);
        }
        let (hash, ext) = flow_hash_ext(&keys[i]);
        hashes[i] = hash;
        extended |= u64::from(ext) << i;
    }
    extended
}

/// Stage 2 (cache on): look the chunk's keys up in the microflow cache,
/// and with `PREFETCH_DECISIONS` start loading the decisions hit.
#[inline(always)]
fn lookup_chunk<const PREFETCH_DECISIONS: bool>(
    cache: &MicroflowCache<CachedRef>,
    actions: &ActionTable,
    keys: &[FlowKey],
    hashes: &[u64],
    extended: u64,
    found: &mut [Option<CachedRef>],
) {
    cache.lookup_chunk_ext(keys, hashes, extended, found);
    if PREFETCH_DECISIONS {
        actions.prefetch_hits(found);
    }
}

/// Stage 3, a hit: one access validates the entry, compares its filter
/// count with the microflow's mark and counts the packet. `None` when the
/// decision is dead or a filter matched the key (the caller re-resolves).
#[inline(always)]
fn serve_hit(
    c: CachedRef,
    pkt: Packet<'_>,
    actions: &mut ActionTable,
    cache: &mut MicroflowCache<CachedRef>,
    stats: &mut WorkerStats,
) -> Option<ActionRef> {
    match actions.count_checked(c, pkt.key, pkt.bytes) {
        HitCheck::Served { checked } => {
            if checked != c.checked {
                stats.filter_checks += 1;
                let v = CachedRef {
                    action: c.action,
                    checked,
                };
                cache.update_hashed(pkt.key, pkt.hash, v);
            }
            Some(c.action)
        }
        HitCheck::Dead | HitCheck::Filtered => None,
    }
}

/// Check mode: compare the decision hit with an uncached lookup at the
/// same version, counting disagreements in `stale`.
#[inline(always)]
fn check_hit(
    section: &Section<'_>,
    pkt: Packet<'_>,
    r: ActionRef,
    actions: &ActionTable,
    check_res: &mut Resolution,
    stats: &mut WorkerStats,
) {
    section.pipeline.lookup_into(pkt.key, check_res);
    if let Some(e) = actions.entry(r) {
        if *e.actions != *check_res.actions || *e.path != *check_res.path {
            stats.stale += 1;
        }
    }
}

/// The steering mask configured for `key` (looked up on a miss only; a
/// cached decision carries the result).
#[inline(always)]
fn configured_mask(section: &Section<'_>, key: &FlowKey) -> Option<u64> {
    if section.steering.is_empty() {
        None
    } else {
        section.steering.lookup(key)
    }
}

/// Stage 3, a miss (cache on): resolve the key through the pipeline at this
/// section's version, intern the decision, point the microflow at it and
/// count the packet on it.
#[inline(always)]
fn resolve_miss(
    section: &Section<'_>,
    pkt: Packet<'_>,
    res: &mut Resolution,
    actions: &mut ActionTable,
    cache: &mut MicroflowCache<CachedRef>,
    stats: &mut WorkerStats,
) -> ActionRef {
    let pipeline = section.pipeline;
    stats.pipeline_lookups += 1;
    pipeline.lookup_into(pkt.key, res);
    // Configured steering: on the packet's own key, only here (a miss);
    // the result is cached with the entry.
    let configured = configured_mask(section, pkt.key);
    for t in res.path.iter().map(|p| p.table_id).chain(res.miss_table()) {
        section.tables_cached.mark(t);
    }
    let r = actions.intern_steered(
        res,
        configured,
        |step| credit_of(pipeline, step),
        |step| keeps_key(pipeline, step),
    );
    // The resolution is this version's answer for this key: whatever
    // filters the (maybe shared, maybe just-filtered) entry carries hold
    // for it.
    let checked = actions.entry(r).map_or(0, |e| e.filter_count());
    let v = CachedRef { action: r, checked };
    cache.insert_hashed(pkt.key, pkt.hash, v);
    actions.count_live(r, pkt.bytes);
    r
}

/// Stage 3, cache off (packet-out, tests): resolve the key into `res`.
/// Returns its steering mask: no entry holds one, so it is found in the
/// action list, else from the configured table. Credits nothing (the
/// caller credits once the packet is known to stay here).
#[inline(always)]
fn resolve_uncached(
    section: &Section<'_>,
    pkt: Packet<'_>,
    res: &mut Resolution,
    stats: &mut WorkerStats,
) -> Option<u64> {
    stats.pipeline_lookups += 1;
    section.pipeline.lookup_into(pkt.key, res);
    let configured = configured_mask(section, pkt.key);
    crate::action_table::workers_of(&res.actions).or(configured)
}

/// Stage 4a: does a decision with `mask` belong to another worker, and did
/// the sink take the unmodified frame there, with the packet's metadata?
/// (Nothing is executed or credited here then.)
#[inline(always)]
fn steered_away<S, O>(
    section: &Section<'_>,
    mask: Option<u64>,
    pkt: Packet<'_>,
    buf: &PacketBuf<S>,
    sink: &mut O,
) -> bool
where
    S: AsRef<[u8]> + AsMut<[u8]>,
    O: OutputSink + ?Sized,
{
    match mask {
        Some(mask) => {
            mask & section.my_bit == 0
                && sink.steer(
                    mask,
                    pkt.hash,
                    SteeredFrame {
                        frame: buf.frame(),
                        in_port: section.in_port,
                        tunnel_id: buf.tunnel_id(),
                    },
                )
        }
        None => false,
    }
}

/// Stage 4b, the execute tail of every packet that stays here, cached or
/// not: run the decision's actions on the frame and count how it ended.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn execute_decision<S, O>(
    section: &Section<'_>,
    d: Decision<'_>,
    flow_hash: u64,
    buf: &mut PacketBuf<S>,
    layout: &mut Layout,
    sink: &mut O,
    exec: &mut ExecStats,
    stats: &mut WorkerStats,
) where
    S: AsRef<[u8]> + AsMut<[u8]>,
    O: OutputSink + ?Sized,
{
    let in_port = section.in_port;
    // The two commonest lists skip the executor; what they do is exactly
    // what it would do (see `Shape`).
    match d.shape() {
        Shape::Drop => {
            account(stats, ExecOutcome::default(), d.outcome());
            return;
        }
        Shape::Output(port) if port != in_port => {
            let meta = OutputMeta {
                queue: None,
                final_view: true,
                tunnel_id: buf.tunnel_id().unwrap_or(0),
            };
            sink.output(port, buf.frame(), meta);
            stats.outputs += 1;
            return;
        }
        _ => {}
    }
    let prepared = d
        .prepared()
        .with_groups(section.pipeline.groups(), flow_hash)
        .with_meters(section.pipeline.meters(), section.now_ns);
    let done = execute_prepared(prepared, buf, layout, in_port, sink, exec);
    account(stats, done, d.outcome());
    if done.verdict != Verdict::Done {
        // Rare: the controller may ask for these.
        let origin = ttl_origin(section.pipeline, d.path());
        sink.ttl_expired(buf.frame(), in_port, origin);
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
        // A meter dropped it (whatever it output before its Meter action).
        Verdict::Done if done.meter_drop => stats.drop_meter += 1,
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
