//! Updates through `Versioned<TupleMerge>` while a reader looks up on the
//! other core: update rate, and lookup rate during updates vs idle.
//!
//! Run: `cargo bench -p offlow-classifier --bench versioned_update`
//! Workload: a WUSTL 10K set (acl1_10K by default, `VU_SET=name` to change);
//! the writer removes and immediately re-inserts rules in turn (2 ops per
//! rule) and
//! publishes every N ops (N swept); the reader runs the set's trace in
//! batches of 32 keys, one read section per batch.
#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{load_rules, load_trace, wustl_dir};
use offlow_classifier::{ClassifierOp, Classify, FlowKey, Rule, TupleMerge};
use offlow_sync::Versioned;

/// Pin the calling thread to `cpu` (best effort: a failure only makes the
/// figures noisier).
fn pin(cpu: usize) {
    // SAFETY: `set` is a plain bit set initialised by CPU_ZERO; the call
    // reads it and affects only the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

const PHASE: Duration = Duration::from_millis(600);

fn main() {
    let Some(dir) = wustl_dir() else {
        println!("NOTICE: WUSTL data absent; skipped");
        return;
    };
    let set = std::env::var("VU_SET").unwrap_or_else(|_| "acl1_10K".into());
    let rules: Vec<Rule> = load_rules(&dir.join(&set));
    let tp = dir.join(format!("{set}_trace"));
    let trace = if tp.exists() {
        load_trace(&tp)
    } else {
        load_trace(&dir.join(format!("{set}_trace.gz")))
    };
    let keys: Arc<Vec<FlowKey>> = Arc::new(trace.iter().map(|(k, _)| *k).collect());
    let mut tm = TupleMerge::new();
    for r in &rules {
        tm.insert(r.clone());
    }
    let mut v: Versioned<TupleMerge, ClassifierOp> = Versioned::new(tm);

    // Reader: counts lookups; `phase` tells it when to reset its count.
    let lookups = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let ready = Arc::new(AtomicUsize::new(0));
    let mut r = v.reader();
    let reader = {
        let (lookups, stop, keys, ready) =
            (lookups.clone(), stop.clone(), keys.clone(), ready.clone());
        thread::spawn(move || {
            pin(1);
            ready.store(1, Ordering::Release);
            let mut out = [None; 32];
            let mut sink = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for chunk in keys.chunks(32) {
                    let g = r.enter();
                    g.lookup_batch(chunk, &mut out[..chunk.len()]);
                    drop(g);
                    sink = sink.wrapping_add(out[0].unwrap_or(0) as u64);
                    lookups.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                }
            }
            sink
        })
    };
    pin(0);
    while ready.load(Ordering::Acquire) == 0 {
        thread::yield_now();
    }

    let rate = |f: &mut dyn FnMut(Instant)| -> f64 {
        let l0 = lookups.load(Ordering::Relaxed);
        let t = Instant::now();
        f(t);
        let dt = t.elapsed().as_secs_f64();
        (lookups.load(Ordering::Relaxed) - l0) as f64 / dt
    };

    let idle = rate(&mut |_| thread::sleep(PHASE));
    println!(
        "{set}: {} rules; reader idle: {:.2} M lookups/s",
        rules.len(),
        idle / 1e6
    );
    // Control: the writer's core busy with arithmetic only (no memory
    // traffic), to separate core/host contention from update effects.
    let busy = rate(&mut |t| {
        let mut x = 1u64;
        while t.elapsed() < PHASE {
            for _ in 0..10_000 {
                x = std::hint::black_box(x.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (x >> 7));
            }
        }
    });
    println!(
        "  writer core spinning (no updates): reader {:.2} M lookups/s ({:.0}% of idle)",
        busy / 1e6,
        100.0 * busy / idle
    );
    // (publish every N ops, offered rate in updates/s; 0 = flat out)
    let points = [
        (1usize, 0.0f64),
        (16, 0.0),
        (256, 0.0),
        (4096, 0.0),
        (64, 1e6),
        (256, 1e6),
    ];
    for (every, offered) in points {
        let mut ops = 0u64;
        let mut publishes = 0u64;
        let mut i = 0usize;
        let during = rate(&mut |t| {
            while t.elapsed() < PHASE {
                if offered > 0.0 {
                    // Pace to the offered rate: wait (spinning costs the
                    // reader nothing, see the control above) until the
                    // schedule allows the next batch.
                    let due = Duration::from_secs_f64(ops as f64 / offered);
                    while t.elapsed() < due {
                        std::hint::spin_loop();
                    }
                }
                for _ in 0..every {
                    // Remove a rule, then re-insert it: the set stays
                    // within one rule of full at every publish boundary.
                    let rule = &rules[(i / 2) % rules.len()];
                    if i % 2 == 0 {
                        v.apply(ClassifierOp::Remove(rule.id));
                    } else {
                        v.apply(ClassifierOp::Insert(rule.clone()));
                    }
                    i += 1;
                }
                v.publish();
                ops += every as u64;
                publishes += 1;
            }
        });
        let secs = PHASE.as_secs_f64();
        println!(
            "  publish every {every:>4} ops, {}: {:.2} M updates/s ({:.1} us/publish), reader {:.2} M lookups/s ({:.0}% of idle)",
            if offered > 0.0 { format!("offered {:.1} M/s", offered / 1e6) } else { "flat out".into() },
            ops as f64 / secs / 1e6,
            secs * 1e6 / publishes as f64,
            during / 1e6,
            100.0 * during / idle
        );
        // Restore the full set before the next sweep point.
        for rule in &rules {
            if v.writer_view().get(rule.id).is_none() {
                v.apply(ClassifierOp::Insert(rule.clone()));
            }
        }
        v.publish();
    }
    let idle2 = rate(&mut |_| thread::sleep(PHASE));
    println!("  reader idle again: {:.2} M lookups/s", idle2 / 1e6);
    stop.store(true, Ordering::Relaxed);
    let _ = reader.join();
}
