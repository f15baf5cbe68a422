//! Left-right publish under real concurrency: readers never see a mix of
//! versions, and after `publish` returns no new read section sees an older
//! version. Also a classifier under concurrent updates, each answer checked
//! against an oracle of the version the reader saw.
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;

use offlow_classifier::{
    Apply, ClassifierOp, Classify, Field, FlowKey, LinearClassifier, Match, PortRange, Rule,
    RuleId, TupleMerge, Versioned,
};

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

/// xorshift64*: deterministic random numbers for the workload.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn random_rule(id: RuleId, rng: &mut Rng) -> Rule {
    let mut m = Match::ANY;
    m.set_exact(Field::EthType, 0x0800);
    let len = [0, 8, 16, 24, 32][(rng.next() % 5) as usize];
    m.set_prefix(
        Field::Ipv4Dst,
        (0x0a00_0000 | (rng.next() & 0xffff)) as u128,
        len,
    );
    let dp = match rng.next() % 3 {
        0 => PortRange::ANY,
        1 => PortRange::exact((rng.next() % 4) as u16),
        _ => PortRange { lo: 0, hi: 1 },
    };
    Rule::new(id, (rng.next() % 8) as u32, m).with_ports(PortRange::ANY, dp)
}

fn random_key(rng: &mut Rng) -> FlowKey {
    let mut k = FlowKey::ZERO;
    k.set(Field::EthType, 0x0800);
    k.set(
        Field::Ipv4Dst,
        (0x0a00_0000 | (rng.next() & 0xffff)) as u128,
    );
    k.set(Field::TcpDst, (rng.next() % 4) as u128);
    k.add_presence(offlow_flow::key::present::L3 | offlow_flow::key::present::L4);
    k
}

#[test]
fn classifier_answers_match_the_version_read() {
    let versions: u64 = if cfg!(debug_assertions) { 150 } else { 1000 };
    let mut v: Versioned<TupleMerge, ClassifierOp> = Versioned::new(TupleMerge::new());
    // oracles[i] = the rule set of version i.
    let mut oracles = vec![LinearClassifier::new()];
    let mut r = v.reader();
    let done = Arc::new(AtomicBool::new(false));
    let done2 = done.clone();
    // Reader progress, so the writer can pace itself and the reader sees
    // many versions (on 2 shared cores it would otherwise see a few).
    let sections = Arc::new(AtomicU64::new(0));
    let sections2 = sections.clone();
    let reader = thread::spawn(move || {
        let mut rng = Rng(0x1234_5678_9abc_def1);
        let mut seen = Vec::new();
        let mut keys = [FlowKey::ZERO; 16];
        let mut out = [None; 16];
        while !done2.load(Ordering::Acquire) {
            for k in &mut keys {
                *k = random_key(&mut rng);
            }
            let g = r.enter();
            g.lookup_batch(&keys, &mut out);
            let ver = g.version();
            drop(g);
            sections2.fetch_add(1, Ordering::Release);
            // Give the writer the core: the point is many versions, not
            // many lookups per version.
            thread::yield_now();
            for (k, o) in keys.iter().zip(out) {
                seen.push((ver, *k, o));
            }
        }
        seen
    });
    let mut rng = Rng(0x0fed_cba9_8765_4321);
    let mut oracle = LinearClassifier::new();
    for _ in 0..versions {
        for _ in 0..(1 + rng.next() % 8) {
            let id = (rng.next() % 300) as RuleId;
            let op = if rng.next() % 3 == 0 {
                ClassifierOp::Remove(id)
            } else {
                ClassifierOp::Insert(random_rule(id, &mut rng))
            };
            oracle.apply(&op);
            v.apply(op);
        }
        oracles.push(oracle.clone());
        v.publish();
        // Let the reader run at least one section on (about) this version.
        let s0 = sections.load(Ordering::Acquire);
        while sections.load(Ordering::Acquire) == s0 && !reader.is_finished() {
            thread::yield_now();
        }
    }
    done.store(true, Ordering::Release);
    let seen = reader.join().expect("reader panicked");
    let mut hits = 0;
    let mut versions_seen = std::collections::BTreeSet::new();
    for (ver, k, got) in &seen {
        let want = oracles[*ver as usize].lookup(k);
        assert_eq!(*got, want, "version {ver} key {k:?}");
        hits += want.is_some() as usize;
        versions_seen.insert(*ver);
    }
    assert!(hits > seen.len() / 10, "workload should hit rules ({hits})");
    assert!(
        versions_seen.len() as u64 > versions / 4,
        "reader saw only {} versions",
        versions_seen.len()
    );
    eprintln!(
        "{} lookups over {} distinct versions checked",
        seen.len(),
        versions_seen.len()
    );
    // The writer's view equals the last oracle.
    let last = oracles.last().expect("at least version 0");
    assert_eq!(v.writer_view().len(), last.len());
    for rule in last.rules() {
        assert_eq!(v.writer_view().get(rule.id), Some(rule.clone()));
    }
}
