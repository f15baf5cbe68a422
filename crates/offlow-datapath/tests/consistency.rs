//! Design invariant 3 under real concurrency: after `Control::commit`
//! returns (the barrier point), no packet is processed with an action the
//! committed flow-mods changed or removed.
//!
//! A writer thread runs a fixed schedule of flow-mods on table 0, one commit
//! per step: odd steps MODIFY the catch-all rule R to output to port
//! `BASE + step`; even steps alternately ADD a higher-priority rule H
//! (shadowing R for UDP port 51, output `BASE + step`) and DELETE it. Every
//! step's output port is unique, so the port a packet leaves on names the
//! step whose state decided it. The reader thread reads `committed` (the
//! last step whose commit returned), processes a batch through its cache,
//! and checks each packet's port against the schedule: it must be what the
//! state of some step in `[committed_before, committed_after + 1]` gives that
//! packet (`+ 1`: a step is visible from its publish, slightly before the
//! writer records it). A cached decision from before the barrier would name
//! an older step and fail.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use common::frame4;
use offlow_datapath::{Control, CountingSink, PacketBuf, WorkerConfig};
use offlow_flow::{Field, Match};
use offlow_pipeline::*;

const BASE: u32 = 1000;
const STEPS: u64 = if cfg!(debug_assertions) { 600 } else { 4000 };

/// Port for UDP-51 packets and for others after `step` (0 = initial state).
fn expected(step: u64) -> (u32, u32) {
    let r = if step == 0 {
        BASE
    } else {
        BASE + (step - (1 - step % 2)) as u32 // largest odd <= step
    };
    // H is present after an even step k with k % 4 == 2, until step k + 2.
    let last_even = step - step % 2;
    let h_present = last_even % 4 == 2;
    let udp51 = if h_present {
        BASE + last_even as u32
    } else {
        r
    };
    (udp51, r)
}

fn h_match() -> Match {
    let mut m = Match::ANY;
    m.set_exact(Field::EthType, 0x0800)
        .set_exact(Field::IpProto, 17)
        .set_exact(Field::UdpDst, 51);
    m
}

fn frame(dport: u16, src_last: u8) -> Vec<u8> {
    frame4([10, 0, 0, src_last], [10, 0, 0, 2], 64, 0)
        .udp(7, dport)
        .payload(b"x")
        .build()
}

fn out(port: u32) -> Vec<Instruction> {
    vec![Instruction::ApplyActions(vec![Action::output(PortNo(
        port,
    ))])]
}

#[test]
fn no_stale_action_after_commit() {
    let mut control = Control::new(Pipeline::new(1));
    control
        .flow_mod(&FlowMod::add(0, 1, Match::ANY, out(BASE)), 0)
        .expect("catch-all");
    control.commit();
    let mut worker = control.worker(WorkerConfig {
        cache_capacity: 1024,
        ..WorkerConfig::default()
    });
    let committed = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicU64::new(0));

    let reader = {
        let committed = committed.clone();
        let done = done.clone();
        let rounds = rounds.clone();
        std::thread::spawn(move || {
            // 8 flows: 4 to UDP 51 (H's), 4 to UDP 52 (R's only).
            let templates: Vec<(bool, Vec<u8>)> = (0..8u8)
                .map(|i| (i % 2 == 0, frame(if i % 2 == 0 { 51 } else { 52 }, i + 1)))
                .collect();
            let mut batches = 0u64;
            let mut checked = 0u64;
            while !done.load(Ordering::Acquire) {
                let lo = committed.load(Ordering::Acquire);
                let mut bufs: Vec<PacketBuf> = templates
                    .iter()
                    .map(|(_, f)| PacketBuf::from_frame(f, 16))
                    .collect();
                let mut ports = Vec::with_capacity(bufs.len());
                for buf in bufs.iter_mut() {
                    let mut sink = CountingSink::default();
                    worker.process(core::slice::from_mut(buf), 1, &mut sink);
                    ports.push(sink.last_port);
                }
                let hi = committed.load(Ordering::Acquire) + 1;
                for ((is51, _), port) in templates.iter().zip(&ports) {
                    let port = port.expect("every packet is forwarded");
                    let ok = (lo..=hi.min(STEPS)).any(|s| {
                        let (a, b) = expected(s);
                        port == if *is51 { a } else { b }
                    });
                    assert!(
                        ok,
                        "stale action: port {port} for udp51={is51}, committed steps {lo}..{hi}"
                    );
                    checked += 1;
                }
                batches += 1;
                rounds.fetch_add(1, Ordering::Release);
            }
            (batches, checked, worker.stats())
        })
    };

    let mut h_id = None;
    for step in 1..=STEPS {
        let port = BASE + step as u32;
        if step % 2 == 1 {
            let mut fm = FlowMod::new(FlowModCommand::ModifyStrict, 0, 1, Match::ANY);
            fm.instructions = out(port);
            let eff = control.flow_mod(&fm, 0).expect("modify");
            assert_eq!(eff.modified.len(), 1);
        } else if step % 4 == 2 {
            let eff = control
                .flow_mod(&FlowMod::add(0, 10, h_match(), out(port)), 0)
                .expect("add H");
            assert!(!eff.shadowed.is_empty(), "H shadows the catch-all");
            h_id = eff.added.first().copied();
        } else {
            let fm = FlowMod::new(FlowModCommand::DeleteStrict, 0, 10, h_match());
            let eff = control.flow_mod(&fm, 0).expect("delete H");
            assert_eq!(eff.removed.first().map(|e| e.id), h_id);
        }
        control.commit();
        committed.store(step, Ordering::Release);
        // Most steps: let the reader finish two rounds under this state
        // (the first re-resolves what the change invalidated, the second is
        // served from the cache), so the next change lands on cached
        // decisions. Every fourth step does not wait, so changes also land
        // while a round is in flight.
        if step % 4 != 0 {
            let target = rounds.load(Ordering::Acquire) + 2;
            while rounds.load(Ordering::Acquire) < target && !reader.is_finished() {
                std::thread::yield_now();
            }
        }
    }
    done.store(true, Ordering::Release);
    let (batches, checked, stats) = reader.join().expect("reader thread");
    assert!(batches > 0 && checked > 0);
    // The cache must have served packets and decisions must have been
    // invalidated along the way, or the test proved nothing.
    assert!(stats.cache_hits > 0, "{stats:?}");
    assert!(stats.records_applied > 0, "{stats:?}");
    eprintln!("{batches} batches, {checked} packets checked, {stats:?}");
}

#[test]
fn schedule_is_what_the_test_assumes() {
    assert_eq!(expected(0), (BASE, BASE));
    assert_eq!(expected(1), (BASE + 1, BASE + 1));
    assert_eq!(expected(2), (BASE + 2, BASE + 1));
    assert_eq!(expected(3), (BASE + 2, BASE + 3));
    assert_eq!(expected(4), (BASE + 3, BASE + 3));
    assert_eq!(expected(6), (BASE + 6, BASE + 5));
}

/// `Control::sync_counters_waking` calls its wake-up after posting the
/// request: a worker woken by it (here, polled from inside the closure)
/// acknowledges at once and the call succeeds; a worker that nobody wakes
/// and that never polls makes it time out. An idle worker's counts are
/// credited by the sync.
#[test]
fn sync_wake_comes_after_the_request() {
    let mut control = Control::new(Pipeline::new(1));
    control
        .flow_mod(&FlowMod::add(0, 1, Match::ANY, out(BASE)), 0)
        .expect("catch-all");
    control.commit();
    let worker = std::cell::RefCell::new(control.worker(WorkerConfig::default()));
    let f = frame(51, 1);
    let mut bufs = vec![PacketBuf::from_frame(&f, 16)];
    worker
        .borrow_mut()
        .process(&mut bufs, 1, &mut CountingSink::default());
    let id = control.pipeline().dump(&FlowFilter::all())[0].id;
    let counted = || control.pipeline().entry(id).expect("rule").counters.get().0;
    assert_eq!(counted(), 0, "deferred");
    let short = std::time::Duration::from_millis(20);
    assert!(!control.sync_counters(short), "nobody polls: times out");
    assert!(control.sync_counters_waking(short, || worker.borrow_mut().poll()));
    assert_eq!(counted(), 1, "credited by the sync");
}

/// Many decisions per batch put a due flush off (crediting each costs
/// misses whatever its count), and nothing is lost by it: with more flows,
/// each a rule of its own, than `DIRTY_PER_BATCH` per batch, nothing is
/// credited at `FLUSH_EVERY_BATCHES`; a sync credits every packet exactly;
/// and the worker flushes by itself once the batches catch up with the
/// decisions waiting.
#[test]
fn many_decisions_defer_the_flush_and_a_sync_stays_exact() {
    use offlow_datapath::{DIRTY_PER_BATCH, FLUSH_EVERY_BATCHES};
    const BATCH: usize = 32;
    let flush_every = u64::from(FLUSH_EVERY_BATCHES);
    // Enough flows that the flush is still put off 10% past its period.
    let flows = (flush_every * DIRTY_PER_BATCH * 11 / 10) as u32;
    let mut control = Control::new(Pipeline::new(1));
    let dst = |i: u32| [10, 1, (i >> 8) as u8, i as u8];
    for i in 0..flows {
        let mut m = Match::ANY;
        m.set_exact(Field::EthType, 0x0800)
            .set_exact(Field::Ipv4Dst, u128::from(u32::from_be_bytes(dst(i))));
        control
            .flow_mod(&FlowMod::add(0, 1, m, out(BASE + i % 7)), 0)
            .expect("rule");
    }
    control.commit();
    let frames: Vec<Vec<u8>> = (0..flows)
        .map(|i| {
            frame4([10, 0, 0, 1], dst(i), 64, 0)
                .udp(7, 9)
                .payload(b"x")
                .build()
        })
        .collect();
    let worker = std::cell::RefCell::new(control.worker(WorkerConfig::default()));
    let mut bufs: Vec<PacketBuf> = (0..BATCH)
        .map(|_| PacketBuf::from_frame(&frames[0], 16))
        .collect();
    let mut next = 0usize;
    let mut sent = 0u64;
    let mut run = |batches: u64| {
        for _ in 0..batches {
            for b in bufs.iter_mut() {
                b.load(&frames[next % frames.len()]).expect("fits");
                next += 1;
            }
            worker
                .borrow_mut()
                .process(&mut bufs, 1, &mut CountingSink::default());
            sent += BATCH as u64;
        }
        sent
    };
    let credited = || -> u64 {
        control
            .pipeline()
            .dump(&FlowFilter::all())
            .iter()
            .map(|e| e.packets)
            .sum()
    };
    // Past the period, every flow seen and pending: put off.
    let sent_now = run(flush_every + flush_every / 20);
    assert_eq!(
        credited(),
        0,
        "flush put off with {flows} decisions waiting"
    );
    // A sync credits everything, exactly.
    let short = std::time::Duration::from_millis(100);
    assert!(control.sync_counters_waking(short, || worker.borrow_mut().poll()));
    assert_eq!(credited(), sent_now);
    // Left alone, the worker flushes once the batches since the last flush
    // reach the decisions waiting over DIRTY_PER_BATCH.
    let sent_now = run(u64::from(flows) / DIRTY_PER_BATCH + 1);
    let credited_alone = credited();
    assert!(
        credited_alone > sent_now - BATCH as u64 * (flush_every / 2),
        "no flush of its own: {credited_alone} of {sent_now}"
    );
    assert!(credited_alone <= sent_now);
}

/// `Control::sync_counters` against a worker running on another thread:
/// once it returns true, the catch-all rule has been credited with at least
/// every packet the worker had finished before the call, and at most those
/// it had finished when the call returned plus the batch it may have been
/// finishing (it acknowledges inside `process`, before it reports the batch
/// done). Without the sync, counts are deferred up to
/// `FLUSH_EVERY_BATCHES` batches.
#[test]
fn sync_counters_makes_counts_exact() {
    const BATCH: u64 = 4;
    let mut control = Control::new(Pipeline::new(1));
    control
        .flow_mod(&FlowMod::add(0, 1, Match::ANY, out(BASE)), 0)
        .expect("catch-all");
    control.commit();
    let mut worker = control.worker(WorkerConfig::default());
    let processed = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let t = {
        let (processed, done) = (processed.clone(), done.clone());
        std::thread::spawn(move || {
            let f = frame(51, 1);
            let mut bufs: Vec<PacketBuf> =
                (0..BATCH).map(|_| PacketBuf::from_frame(&f, 16)).collect();
            let mut sink = CountingSink::default();
            let mut n = 0u64;
            while !done.load(Ordering::Acquire) {
                // Reload the frames (execution may not change them here,
                // but keep the input identical every round).
                for b in bufs.iter_mut() {
                    b.load(&f).expect("fits");
                }
                worker.process(&mut bufs, 1, &mut sink);
                n += bufs.len() as u64;
                processed.store(n, Ordering::Release);
            }
            worker.poll();
        })
    };
    let id = control.pipeline().dump(&FlowFilter::all())[0].id;
    for _ in 0..if cfg!(debug_assertions) { 50 } else { 500 } {
        let before = processed.load(Ordering::Acquire);
        assert!(control.sync_counters(std::time::Duration::from_secs(10)));
        // Read the counter before `after`: the worker keeps going, and its
        // periodic flushes may credit batches finished after the sync.
        let counted = control.pipeline().entry(id).expect("rule").counters.get().0;
        let after = processed.load(Ordering::Acquire);
        assert!(
            before <= counted && counted <= after + BATCH,
            "counted {counted}, processed {before}..={after} (+{BATCH})"
        );
    }
    done.store(true, Ordering::Release);
    t.join().expect("worker thread");
}

/// Invalidation is fine-grained: changing one rule re-resolves only the
/// flows that depended on it; every other cached flow keeps hitting.
#[test]
fn one_rule_change_does_not_flush_the_cache() {
    let mut control = Control::new(Pipeline::new(1));
    // One rule per UDP destination port 50..60, plus a catch-all.
    for p in 50u16..60 {
        let mut m = Match::ANY;
        m.set_exact(Field::EthType, 0x0800)
            .set_exact(Field::IpProto, 17)
            .set_exact(Field::UdpDst, u128::from(p));
        control
            .flow_mod(&FlowMod::add(0, 10, m, out(u32::from(p))), 0)
            .expect("add");
    }
    control
        .flow_mod(&FlowMod::add(0, 1, Match::ANY, out(BASE)), 0)
        .expect("catch-all");
    control.commit();
    let mut worker = control.worker(WorkerConfig::default());
    let frames: Vec<Vec<u8>> = (50u16..60).map(|p| frame(p, 1)).collect();
    let run = |worker: &mut offlow_datapath::Worker| {
        let mut bufs: Vec<PacketBuf> = frames
            .iter()
            .map(|f| PacketBuf::from_frame(f, 16))
            .collect();
        let mut sink = CountingSink::default();
        worker.process(&mut bufs, 1, &mut sink);
        sink
    };
    run(&mut worker); // warm: 10 misses
    let before = worker.stats();
    // Modify the rule for port 53 only.
    let mut m = Match::ANY;
    m.set_exact(Field::EthType, 0x0800)
        .set_exact(Field::IpProto, 17)
        .set_exact(Field::UdpDst, 53);
    let mut fm = FlowMod::new(FlowModCommand::ModifyStrict, 0, 10, m);
    fm.instructions = out(99);
    control.flow_mod(&fm, 0).expect("modify");
    control.commit();
    let sink = run(&mut worker);
    let after = worker.stats();
    // The rule ends the walk before and after: its one decision is
    // rebuilt in place, so its flow keeps hitting too.
    assert_eq!(after.cache_hits - before.cache_hits, 10, "{after:?}");
    assert_eq!(after.pipeline_lookups - before.pipeline_lookups, 0);
    assert_eq!(worker.action_stats().rebuilt, 1);
    assert_eq!(sink.per_port[99], 1, "the modified rule's new action");
    assert_eq!(sink.per_port[53], 0);
    // Adding a higher-priority rule that shadows port 55's rule only
    // invalidates what depended on the rules it overlaps.
    let mut m = Match::ANY;
    m.set_exact(Field::EthType, 0x0800)
        .set_exact(Field::IpProto, 17)
        .set_exact(Field::UdpDst, 55);
    control
        .flow_mod(&FlowMod::add(0, 20, m, out(98)), 0)
        .expect("shadowing add");
    control.commit();
    let before = worker.stats();
    let sink = run(&mut worker);
    let after = worker.stats();
    assert_eq!(sink.per_port[98], 1);
    // Port 55's rule and the catch-all overlap the new rule: no flow used
    // the catch-all, so exactly one flow re-resolves.
    assert_eq!(
        after.pipeline_lookups - before.pipeline_lookups,
        1,
        "{after:?}"
    );
    assert_eq!(after.cache_hits - before.cache_hits, 9);
}
