//! A classifier under concurrent updates through `offlow_sync::Versioned`:
//! each answer is checked against an oracle of the version the reader saw.
//! (The publish protocol itself is tested in offlow-sync.)
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;

use offlow_classifier::{
    ClassifierOp, Classify, Field, FlowKey, LinearClassifier, Match, PortRange, Rule, RuleId,
    TupleMerge,
};
use offlow_sync::{Apply, Versioned};

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
