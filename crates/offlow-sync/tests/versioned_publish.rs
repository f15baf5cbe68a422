//! Left-right publish under real concurrency: readers never see a mix of
//! versions, and after `publish` returns no new read section sees an older
//! version. (A classifier under concurrent updates is checked in
//! offlow-classifier's `versioned_classifier` test.)
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;

use offlow_sync::{Apply, Versioned};

/// A vector whose elements should all equal the version number.
#[derive(Clone)]
struct Uniform(Vec<u64>);

struct SetAll(u64);

impl Apply<SetAll> for Uniform {
    fn apply(&mut self, op: &SetAll) {
        // Element by element, so a reader on this copy would see a mix.
        for x in &mut self.0 {
            *x = op.0;
        }
    }
}

const PUBLISHES: u64 = if cfg!(debug_assertions) {
    1_000
} else {
    50_000
};

#[test]
fn readers_see_uniform_versions_and_quiescence() {
    let mut v = Versioned::new(Uniform(vec![0; 512]));
    let published = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(3));
    // Total read sections so far, so the writer can make sure readers run
    // while it publishes (2 shared cores could otherwise starve them).
    let total = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let mut r = v.reader();
            let (published, done, start) = (published.clone(), done.clone(), start.clone());
            let total = total.clone();
            thread::spawn(move || {
                start.wait();
                let mut sections = 0u64;
                let mut last = 0u64;
                while !done.load(Ordering::Acquire) {
                    // Read the "publish returned" flag before entering: the
                    // section must see at least that version.
                    let floor = published.load(Ordering::Acquire);
                    let g = r.enter();
                    let x = g.0[0];
                    assert!(g.0.iter().all(|&e| e == x), "mixed copy at version {x}");
                    assert_eq!(g.version(), x, "version tag disagrees with contents");
                    assert!(x >= floor, "saw {x} after publish({floor}) returned");
                    assert!(x >= last, "went back from {last} to {x}");
                    last = x;
                    sections += 1;
                    drop(g);
                    total.fetch_add(1, Ordering::Relaxed);
                }
                sections
            })
        })
        .collect();
    start.wait();
    for ver in 1..=PUBLISHES {
        v.apply(SetAll(ver));
        assert_eq!(v.publish(), ver);
        published.store(ver, Ordering::Release);
        if ver % 32 == 0 {
            // Pace: wait for some reader progress every 32 versions.
            let t0 = total.load(Ordering::Relaxed);
            while total.load(Ordering::Relaxed) == t0 && readers.iter().all(|h| !h.is_finished()) {
                thread::yield_now();
            }
        }
    }
    done.store(true, Ordering::Release);
    let mut sum = 0;
    for h in readers {
        sum += h.join().expect("reader panicked");
    }
    assert!(sum >= PUBLISHES / 32, "readers ran only {sum} sections");
    // Both copies are equal after the last publish's replay.
    assert!(v.writer_view().0.iter().all(|&e| e == PUBLISHES));
}

#[test]
fn publish_waits_for_a_reader_inside() {
    // A reader parked inside a section holds the old copy: publish must not
    // return until it leaves.
    let mut v = Versioned::new(Uniform(vec![0; 4]));
    let mut r = v.reader();
    let entered = Arc::new(Barrier::new(2));
    let left = Arc::new(AtomicBool::new(false));
    let (e2, l2) = (entered.clone(), left.clone());
    let reader = thread::spawn(move || {
        let g = r.enter();
        e2.wait();
        thread::sleep(std::time::Duration::from_millis(100));
        assert_eq!(g.0[0], 0, "copy changed under a reader");
        l2.store(true, Ordering::SeqCst);
        drop(g);
    });
    entered.wait();
    v.apply(SetAll(1));
    v.publish();
    assert!(
        left.load(Ordering::SeqCst),
        "publish returned while a reader was inside"
    );
    reader.join().expect("reader panicked");
}
