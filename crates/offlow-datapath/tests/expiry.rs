//! `Control::expire` with a live worker: a rule with an idle timeout whose
//! decision the worker has cached stays while used, expires once idle, and
//! after the commit the worker's packets no longer use it (they miss);
//! a hard-timed rule expires with packets still pending in the worker, and
//! its counters still end up exact. The worker runs on its own thread and
//! polls when idle, as a datapath thread does, so `sync_counters` works.

mod common;

use std::sync::mpsc;
use std::time::Duration;

use common::{dst_match, frame4};
use offlow_datapath::{Control, CountingSink, PacketBuf, WorkerConfig, WorkerStats};
use offlow_pipeline::*;

const S: u64 = 1_000_000_000;
const SYNC: Duration = Duration::from_secs(10);

fn frame(dst_last: u8) -> Vec<u8> {
    frame4([10, 0, 0, 1], [10, 0, 0, dst_last], 64, 0)
        .udp(7, 9)
        .payload(b"payload")
        .build()
}

fn add(dst_last: u8, port: u32, idle: u16, hard: u16) -> FlowMod {
    let ins = vec![Instruction::ApplyActions(vec![Action::output(PortNo(
        port,
    ))])];
    let mut fm =
        FlowMod::add(0, 10, dst_match(dst_last), ins).with_flags(FlowModFlags::SEND_FLOW_REM);
    fm.idle_timeout = idle;
    fm.hard_timeout = hard;
    fm
}

/// What the worker thread reports after a burst.
#[derive(Debug, Clone, Copy)]
struct Burst {
    /// Frames that left on each port of interest (5, 6, 7).
    out: [u64; 3],
    stats: WorkerStats,
}

enum Cmd {
    /// Send `n` copies of the frame to 10.0.0.`dst`.
    Send {
        dst: u8,
        n: usize,
    },
    Stop,
}

struct WorkerThread {
    tx: mpsc::Sender<Cmd>,
    rx: mpsc::Receiver<Burst>,
    handle: std::thread::JoinHandle<()>,
}

impl WorkerThread {
    fn spawn(control: &Control) -> WorkerThread {
        let mut worker = control.worker(WorkerConfig::default());
        let (tx, cmd_rx) = mpsc::channel::<Cmd>();
        let (burst_tx, rx) = mpsc::channel::<Burst>();
        let handle = std::thread::spawn(move || loop {
            match cmd_rx.recv_timeout(Duration::from_millis(1)) {
                Ok(Cmd::Send { dst, n }) => {
                    let f = frame(dst);
                    let mut sink = CountingSink::default();
                    for _ in 0..n {
                        // One frame per batch: the first resolves and
                        // caches, the rest hit the cache.
                        let mut buf = PacketBuf::from_frame(&f, 16);
                        worker.process(core::slice::from_mut(&mut buf), 1, &mut sink);
                    }
                    let burst = Burst {
                        out: [sink.per_port[5], sink.per_port[6], sink.per_port[7]],
                        stats: worker.stats(),
                    };
                    if burst_tx.send(burst).is_err() {
                        return;
                    }
                }
                Ok(Cmd::Stop) | Err(mpsc::RecvTimeoutError::Disconnected) => return,
                // Idle: answer counter syncs and catch up, as a datapath
                // thread does between bursts.
                Err(mpsc::RecvTimeoutError::Timeout) => worker.poll(),
            }
        });
        WorkerThread { tx, rx, handle }
    }

    fn send(&self, dst: u8, n: usize) -> Burst {
        self.tx.send(Cmd::Send { dst, n }).expect("worker alive");
        self.rx.recv().expect("worker reply")
    }

    fn stop(self) {
        let _ = self.tx.send(Cmd::Stop);
        self.handle.join().expect("worker thread");
    }
}

#[test]
fn idle_expiry_frees_cached_decision_and_counts_exactly() {
    let mut control = Control::new(Pipeline::new(1));
    // I: idle 2 s (10.0.0.5 -> port 5); P: permanent (10.0.0.6 -> port 6).
    let i_id = control.flow_mod(&add(5, 5, 2, 0), 0).expect("add I").added[0];
    let p_id = control.flow_mod(&add(6, 6, 0, 0), 0).expect("add P").added[0];
    control.commit();
    let w = WorkerThread::spawn(&control);
    let len = frame(5).len() as u64;

    let b = w.send(5, 10);
    assert_eq!(b.out[0], 10, "I forwards");
    assert!(
        b.stats.cache_hits >= 9,
        "I's decision is cached: {:?}",
        b.stats
    );
    assert!(control.sync_counters(SYNC));
    assert!(control.expire(S).is_empty(), "used since install");

    // Used again (credits pending in the worker until the sync).
    assert_eq!(w.send(5, 5).out[0], 5);
    assert!(control.sync_counters(SYNC));
    assert!(control.expire(5 * S / 2).is_empty(), "used at 2.5 s");
    assert!(
        control.expire(9 * S / 2 - 1).is_empty(),
        "idle just under 2 s"
    );

    // Idle for 2 s: expires.
    assert!(control.sync_counters(SYNC));
    let removed = control.expire(9 * S / 2);
    assert_eq!(removed.len(), 1);
    let r = &removed[0];
    assert_eq!(r.entry.id, i_id);
    assert_eq!(r.reason, RemovedReason::IdleTimeout);
    assert!(r.send_flow_rem());
    assert_eq!(r.duration_ns(9 * S / 2), 9 * S / 2);
    assert!(control.pipeline().entry(i_id).is_none());
    control.commit();

    // The worker's cached decision is gone: I's packets miss now.
    let before = w.send(6, 1).stats;
    let after = w.send(5, 4);
    assert_eq!(after.out[0], 0, "no packet uses the expired rule");
    assert_eq!(
        after.stats.drop_table_miss - before.drop_table_miss,
        4,
        "{:?}",
        after.stats
    );
    // The first found its cached decision dead (freed at catch-up).
    assert!(
        after.stats.stale_hits > before.stale_hits,
        "{:?}",
        after.stats
    );
    // P is untouched.
    assert_eq!(w.send(6, 3).out[1], 3);

    // The removed entry's counters are exact, and stay so.
    assert!(control.sync_counters(SYNC));
    assert_eq!(r.entry.counters.get(), (15, 15 * len));
    let p = control.pipeline().entry(p_id).expect("P stays");
    assert_eq!(p.counters.get(), (4, 4 * len));
    w.stop();
}

#[test]
fn hard_expiry_with_pending_counts_is_exact_after_commit() {
    let mut control = Control::new(Pipeline::new(1));
    // H: hard 3 s and a long idle timeout (10.0.0.7 -> port 7).
    let h_id = control.flow_mod(&add(7, 7, 60, 3), S).expect("add H").added[0];
    control.commit();
    let w = WorkerThread::spawn(&control);
    let len = frame(7).len() as u64;
    assert_eq!(w.send(7, 6).out[2], 6);
    assert!(control.expire(4 * S - 1).is_empty());
    // Packets pending in the worker (no sync): hard expiry does not care.
    assert_eq!(w.send(7, 3).out[2], 3);
    let removed = control.expire(4 * S);
    assert_eq!(removed.len(), 1);
    assert_eq!(removed[0].entry.id, h_id);
    assert_eq!(removed[0].reason, RemovedReason::HardTimeout);
    control.commit();
    assert_eq!(w.send(7, 2).out[2], 0, "expired rule no longer used");
    // The worker credited what it held before freeing the decision; the
    // sync makes sure it has caught up.
    assert!(control.sync_counters(SYNC));
    assert_eq!(removed[0].entry.counters.get(), (9, 9 * len));
    assert!(control.pipeline().is_empty());
    w.stop();
}
