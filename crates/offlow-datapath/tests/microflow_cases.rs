//! Example-based tests of the microflow cache: collisions, one-bucket edge
//! cases, policy behaviour, removal, invalidation and the 1M-entry size.

mod common;

use offlow_datapath::{flow_hash, InsertOutcome, InsertPolicy, MicroflowCache, WAYS};
use offlow_flow::{Field, FlowKey};

fn key(i: u32) -> FlowKey {
    let mut k = FlowKey::ZERO;
    k.set(Field::InPort, 1);
    k.set(Field::Ipv4Dst, u128::from(i));
    k.set(Field::TcpDst, u128::from(i % 65_536));
    k
}

/// Every key with the same hash: one bucket, one signature.
const SAME: u64 = 0x1234_5678_0000_0000;

#[test]
fn colliding_signatures_never_return_another_keys_value() {
    let mut c = MicroflowCache::<u32>::new(64, InsertPolicy::Always);
    for i in 0..WAYS as u32 {
        assert_eq!(c.insert_hashed(&key(i), SAME, i), InsertOutcome::Inserted);
    }
    for i in 0..WAYS as u32 {
        assert_eq!(c.lookup_hashed(&key(i), SAME), Some(i));
    }
    // Same hash, different key: a miss, not a neighbour's value.
    assert_eq!(c.lookup_hashed(&key(100), SAME), None);
    // Keys differing only in in_port are different flows.
    let mut other_port = key(3);
    other_port.set(Field::InPort, 2);
    assert_eq!(c.lookup_hashed(&other_port, SAME), None);
    // A ninth colliding key evicts exactly one and is then found.
    assert_eq!(
        c.insert_hashed(&key(100), SAME, 100),
        InsertOutcome::Evicted
    );
    assert_eq!(c.lookup_hashed(&key(100), SAME), Some(100));
    let still: usize = (0..WAYS as u32)
        .filter(|&i| c.lookup_hashed(&key(i), SAME) == Some(i))
        .count();
    assert_eq!(still, WAYS - 1);
    assert_eq!(c.len(), WAYS);
}

#[test]
fn signature_zero_hash_is_usable() {
    // A hash whose high half is 0 must not look like a free way.
    let mut c = MicroflowCache::<u8>::new(8, InsertPolicy::Always);
    c.insert_hashed(&key(1), 0x0000_0000_0000_0003, 9);
    assert_eq!(c.len(), 1);
    assert_eq!(c.lookup_hashed(&key(1), 0x0000_0000_0000_0003), Some(9));
    assert_eq!(
        c.insert_hashed(&key(2), 0x0000_0000_0000_0003, 8),
        InsertOutcome::Inserted
    );
    assert_eq!(c.len(), 2);
}

#[test]
fn one_bucket_fill_update_evict() {
    let mut c = MicroflowCache::<u32>::new(1, InsertPolicy::default());
    assert_eq!(c.capacity(), WAYS);
    for i in 0..WAYS as u32 {
        assert_eq!(c.insert(&key(i), i), InsertOutcome::Inserted);
    }
    assert_eq!(c.len(), WAYS);
    assert_eq!(c.insert(&key(2), 20), InsertOutcome::Updated);
    assert_eq!(c.lookup(&key(2)), Some(20));
    // key(2) now has credit; the other seven have none, so a newcomer
    // replaces one of them.
    assert_eq!(c.insert(&key(50), 50), InsertOutcome::Evicted);
    assert_eq!(c.lookup(&key(2)), Some(20));
    assert_eq!(c.lookup(&key(50)), Some(50));
    let s = c.stats();
    assert_eq!((s.inserts, s.evictions, s.updates), (WAYS as u64 + 1, 1, 1));
}

#[test]
fn second_chance_skips_when_every_way_was_hit() {
    let mut c = MicroflowCache::<u32>::new(8, InsertPolicy::SecondChance { max_credit: 1 });
    for i in 0..8 {
        c.insert(&key(i), i);
        assert_eq!(c.lookup(&key(i)), Some(i));
    }
    // Every way has a credit: the first newcomer only takes them away...
    assert_eq!(c.insert(&key(99), 99), InsertOutcome::Skipped);
    assert_eq!(c.stats().insert_skipped, 1);
    assert_eq!(c.lookup(&key(99)), None);
    // ...and the second one gets in.
    assert_eq!(c.insert(&key(99), 99), InsertOutcome::Evicted);
    assert_eq!(c.lookup(&key(99)), Some(99));
}

/// A stream of one-packet flows must not push out a flow hit between them
/// under the default policy; under `Always` it does.
#[test]
fn heavy_hitter_survives_a_scan_only_with_second_chance() {
    let run = |policy| {
        let mut c = MicroflowCache::<u32>::new(8, policy);
        c.insert(&key(0), 0);
        let mut heavy_hits = 0;
        for n in 1..2000u32 {
            if c.lookup(&key(n)).is_none() {
                c.insert(&key(n), n);
            }
            if n % 4 == 0 {
                match c.lookup(&key(0)) {
                    Some(0) => heavy_hits += 1,
                    Some(_) => panic!("wrong value"),
                    None => {
                        c.insert(&key(0), 0);
                    }
                }
            }
        }
        heavy_hits
    };
    let sc = run(InsertPolicy::default());
    let always = run(InsertPolicy::Always);
    assert!(
        sc >= 495,
        "second chance kept the heavy hitter {sc}/499 times"
    );
    assert!(
        always < 400,
        "Always kept the heavy hitter {always}/499 times"
    );
}

#[test]
fn probabilistic_inserts_about_one_in_n() {
    let mut c = MicroflowCache::<u32>::new(1 << 16, InsertPolicy::Probabilistic { one_in: 10 });
    for i in 0..10_000 {
        c.insert(&key(i), i);
    }
    let s = c.stats();
    assert_eq!(s.inserts + s.insert_skipped, 10_000);
    assert!((800..1200).contains(&s.inserts), "{s:?}");
    // An already cached key is always updated, whatever the coin says.
    let (k, _) = c
        .iter()
        .next()
        .map(|(k, v)| (*k, v))
        .expect("something was inserted");
    for v in 0..50 {
        assert_eq!(c.insert(&k, 1_000_000 + v), InsertOutcome::Updated);
        assert_eq!(c.lookup(&k), Some(1_000_000 + v));
    }
}

#[test]
fn remove_invalidate_clear() {
    let mut c = MicroflowCache::<u32>::new(256, InsertPolicy::default());
    for i in 0..100 {
        c.insert(&key(i), i);
    }
    let present = c.len();
    assert!(present > 90, "{present}");
    let some = c.iter().next().map(|(_, v)| v).expect("non-empty");
    assert_eq!(c.remove(&key(some)), Some(some));
    assert_eq!(c.remove(&key(some)), None);
    assert_eq!(c.lookup(&key(some)), None);
    assert_eq!(c.len(), present - 1);

    let odd = c.iter().filter(|(_, v)| v % 2 == 1).count();
    assert_eq!(c.invalidate(|k, &v| v % 2 == 1 && *k == key(v)), odd);
    assert!(c.iter().all(|(_, v)| v % 2 == 0));
    for i in (1..100).step_by(2) {
        assert_eq!(c.lookup(&key(i)), None);
    }
    c.clear();
    assert!(c.is_empty());
    assert_eq!(c.iter().count(), 0);
    for i in 0..100 {
        assert_eq!(c.lookup(&key(i)), None);
    }
    // Reusable after clear.
    assert_eq!(c.insert(&key(7), 7), InsertOutcome::Inserted);
    assert_eq!(c.lookup(&key(7)), Some(7));
}

#[test]
fn one_million_entries() {
    let mut c = MicroflowCache::<u32>::new(1 << 20, InsertPolicy::default());
    assert_eq!(c.capacity(), 1 << 20);
    // 10% load: no bucket of 8 realistically overflows, so all are found.
    let n = 100_000u32;
    let keys: Vec<FlowKey> = (0..n).map(key).collect();
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(c.insert(k, i as u32), InsertOutcome::Inserted);
    }
    let hashes: Vec<u64> = keys.iter().map(flow_hash).collect();
    let mut out = vec![None; keys.len()];
    c.lookup_batch(&keys, &hashes, &mut out);
    for (i, v) in out.iter().enumerate() {
        assert_eq!(*v, Some(i as u32));
    }
    assert_eq!(c.stats().hits, u64::from(n));
}

#[test]
fn hash_spreads_keys_over_buckets() {
    // Sequential addresses (the common case in traces) must fill a table
    // at 50% load with few evictions under `Always`.
    let mut c = MicroflowCache::<u32>::new(1 << 14, InsertPolicy::Always);
    for i in 0..(1 << 13) {
        c.insert(&key(i), i);
    }
    let ev = c.stats().evictions;
    assert!(ev < 80, "{ev} evictions at 50% load");
}

/// Keys that differ only in words an IPv4 key leaves zero (IPv6 addresses,
/// tunnel id, metadata) must still spread over the buckets: the hash mixes
/// those words in for such "extended" keys.
#[test]
fn hash_spreads_extended_keys_over_buckets() {
    let fields = [Field::Ipv6Dst, Field::TunnelId, Field::Metadata];
    for field in fields {
        let mut c = MicroflowCache::<u32>::new(1 << 14, InsertPolicy::Always);
        for i in 0..(1 << 13) {
            let mut k = FlowKey::ZERO;
            k.set(Field::InPort, 1);
            k.set(field, u128::from(i) + 1);
            c.insert(&k, i);
        }
        let ev = c.stats().evictions;
        assert!(ev < 80, "{field:?}: {ev} evictions at 50% load");
    }
}

/// The common frames leave every word outside `CORE_WORDS` zero, so they
/// take the cache's one-line compare (a layout change that moved an IPv4
/// field elsewhere would silently slow every IPv4 packet).
#[test]
fn common_frames_use_only_the_core_words() {
    use offlow_datapath::microflow::REST_WORDS;
    type L4 = fn(common::FrameBuilder) -> common::FrameBuilder;
    let l4s: [(u8, L4); 3] = [
        (6, |b| b.tcp(1000, 80).tcp_flags(common::PSH_ACK)),
        (17, |b| b.udp(1000, 53)),
        (1, |b| b.icmpv4(8, 0, 0x0001_0001)),
    ];
    for (proto, l4) in l4s {
        for tags in [&[][..], &[(0x8100, 10)][..]] {
            let mut b = common::frame();
            for &(tpid, tci) in tags {
                b = b.tag(tpid, tci);
            }
            let b = b
                .ipv4([10, 0, 0, 1], [10, 0, 0, 2])
                .ident(0x1234)
                .dont_frag();
            let f = l4(b).payload(b"x").build();
            let key = common::parse(&f).key;
            for w in REST_WORDS {
                assert_eq!(key.words[w], 0, "proto {proto}, tags {tags:?}: word {w}");
            }
            assert_ne!(key.words[0], 0, "in_port is set");
        }
    }
}
