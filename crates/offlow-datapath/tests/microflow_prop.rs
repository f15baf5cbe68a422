//! Property tests of the microflow cache against a model of "the value last
//! inserted for each key". Eviction makes the exact contents policy-dependent,
//! so the model checks what must hold whatever was evicted: a hit returns the
//! last value inserted for exactly that key, a fresh insert is found, a
//! removed key is absent, and batch lookups equal single lookups. Hashes are
//! passed explicitly so a case can force every key into one bucket with one
//! signature (full-key compare is then all that separates them).

use offlow_datapath::{flow_hash, InsertOutcome, InsertPolicy, MicroflowCache};
use offlow_flow::{Field, FlowKey};
use proptest::prelude::*;
use std::collections::HashMap;

fn key(i: u32) -> FlowKey {
    let mut k = FlowKey::ZERO;
    k.set(Field::InPort, u128::from(i % 2 + 1));
    k.set(Field::Ipv4Src, 0x0a00_0001);
    if i < 32 {
        // Some keys differ only in one of the words an IPv4 key leaves zero
        // (the cache compares those only for "extended" keys). Class 0
        // includes the plain keys 0 and 1; the others are 1..=4 in their
        // word, so no two classes share a key.
        let rest = u128::from((i / 2) % 4);
        match (i / 8) % 4 {
            0 => k.set(Field::PbbIsid, rest),
            1 => k.set(Field::Metadata, rest + 1),
            2 => k.set(Field::Ipv6Dst, rest + 1),
            _ => k.set(Field::ArpSha, rest + 1),
        }
    } else {
        // Plain keys that differ from key 0 or 1 in one bit of one of the
        // other words an IPv4 key uses (eth addresses and type, IPv4
        // addresses, ports and protocol, presence bits): a compare that
        // skipped any of them fails.
        const OTHER_CORE: [usize; 5] = [3, 4, 5, 6, 14];
        let j = (i - 32) / 2;
        k.words[OTHER_CORE[j as usize % OTHER_CORE.len()]] ^= 1u64.wrapping_shl(50 + j / 5);
    }
    k
}

/// How keys are hashed in one case.
#[derive(Debug, Clone, Copy)]
enum HashMode {
    Real,
    /// Every key gets the same hash: one bucket, one signature.
    AllCollide,
    /// Keys fall into `n` hash classes.
    Classes(u64),
}

fn hash_of(mode: HashMode, i: u32) -> u64 {
    match mode {
        HashMode::Real => flow_hash(&key(i)),
        HashMode::AllCollide => 0xdead_beef_0000_0005,
        HashMode::Classes(n) => (u64::from(i) % n).wrapping_mul(0x9e37_79b9_0000_0001),
    }
}

#[derive(Debug, Clone)]
enum Op {
    Insert(u32, u16),
    Lookup(u32),
    Remove(u32),
    Batch(Vec<u32>),
    Invalidate(u16),
}

fn op(universe: u32) -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..universe, any::<u16>()).prop_map(|(k, v)| Op::Insert(k, v)),
        3 => (0..universe).prop_map(Op::Lookup),
        1 => (0..universe).prop_map(Op::Remove),
        1 => proptest::collection::vec(0..universe, 0..70).prop_map(Op::Batch),
        1 => any::<u16>().prop_map(Op::Invalidate),
    ]
}

fn policy() -> impl Strategy<Value = InsertPolicy> {
    prop_oneof![
        Just(InsertPolicy::Always),
        (0u32..4).prop_map(|one_in| InsertPolicy::Probabilistic { one_in }),
        (0u8..4).prop_map(|max_credit| InsertPolicy::SecondChance { max_credit }),
    ]
}

fn hash_mode() -> impl Strategy<Value = HashMode> {
    prop_oneof![
        Just(HashMode::Real),
        Just(HashMode::AllCollide),
        (1u64..5).prop_map(HashMode::Classes),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(debug_assertions) { 300 } else { 2000 }))]

    #[test]
    fn hits_return_last_inserted_value(
        cap in prop_oneof![Just(1usize), Just(8), Just(16), Just(64)],
        pol in policy(),
        mode in hash_mode(),
        ops in proptest::collection::vec(op(48), 1..200),
    ) {
        let mut c = MicroflowCache::<u16>::new(cap, pol);
        // Last value inserted (not skipped) per key; removed keys are dropped.
        let mut model: HashMap<u32, u16> = HashMap::new();
        let check = |c: &MicroflowCache<u16>, model: &HashMap<u32, u16>, k: u32, got: Option<u16>| {
            if let Some(v) = got {
                prop_assert_eq!(Some(&v), model.get(&k), "key {} returned a value never inserted for it", k);
            }
            let _ = c;
            Ok(())
        };
        for o in ops {
            match o {
                Op::Insert(k, v) => {
                    let was_full = c.len() == c.capacity();
                    let r = c.insert_hashed(&key(k), hash_of(mode, k), v);
                    match r {
                        InsertOutcome::Skipped => {
                            prop_assert!(!model.contains_key(&k) || c.lookup_hashed(&key(k), hash_of(mode, k)).is_none());
                            // A one-bucket cache with a free way must take the key
                            // unless the policy is probabilistic.
                            if c.capacity() == 8 && !was_full {
                                let prob = matches!(pol, InsertPolicy::Probabilistic { one_in } if one_in > 1);
                                prop_assert!(prob, "skipped with a free way under {:?}", pol);
                            }
                            prop_assert!(pol != InsertPolicy::Always);
                        }
                        _ => {
                            model.insert(k, v);
                            prop_assert_eq!(c.lookup_hashed(&key(k), hash_of(mode, k)), Some(v));
                        }
                    }
                }
                Op::Lookup(k) => {
                    let got = c.lookup_hashed(&key(k), hash_of(mode, k));
                    check(&c, &model, k, got)?;
                    // The computed-hash entry point agrees in Real mode.
                    if let HashMode::Real = mode {
                        prop_assert_eq!(c.lookup(&key(k)), got);
                    }
                }
                Op::Remove(k) => {
                    let got = c.remove_hashed(&key(k), hash_of(mode, k));
                    check(&c, &model, k, got)?;
                    model.remove(&k);
                    prop_assert_eq!(c.lookup_hashed(&key(k), hash_of(mode, k)), None);
                }
                Op::Batch(ks) => {
                    let keys: Vec<FlowKey> = ks.iter().map(|&k| key(k)).collect();
                    let hashes: Vec<u64> = ks.iter().map(|&k| hash_of(mode, k)).collect();
                    let mut out = vec![Some(0xffff); ks.len()];
                    c.lookup_batch(&keys, &hashes, &mut out);
                    for (&k, &got) in ks.iter().zip(&out) {
                        prop_assert_eq!(got, c.lookup_hashed(&key(k), hash_of(mode, k)));
                        check(&c, &model, k, got)?;
                    }
                }
                Op::Invalidate(t) => {
                    let before = c.len();
                    let n = c.invalidate(|_, &v| v < t);
                    prop_assert_eq!(c.len(), before - n);
                    prop_assert!(c.iter().all(|(_, v)| v >= t));
                    model.retain(|_, v| *v >= t);
                }
            }
            // Contents are consistent with the model and the count.
            prop_assert!(c.len() <= c.capacity());
            prop_assert_eq!(c.iter().count(), c.len());
            let mut seen = std::collections::HashSet::new();
            for (k, v) in c.iter() {
                let idx = (0..48).find(|&i| key(i) == *k);
                prop_assert!(idx.is_some(), "iter yielded an unknown key");
                let idx = idx.unwrap_or_default();
                prop_assert!(seen.insert(idx), "key {} cached twice", idx);
                prop_assert_eq!(model.get(&idx), Some(&v));
            }
        }
        let s = c.stats();
        prop_assert_eq!(s.inserts - s.evictions - s.removed, c.len() as u64);
    }

    #[test]
    fn batch_equals_single_for_every_size(
        pol in policy(),
        present in proptest::collection::vec(0u32..200, 0..150),
        queries in proptest::collection::vec(0u32..200, 65..=65),
    ) {
        let mut c = MicroflowCache::<u32>::new(128, pol);
        for &k in &present {
            c.insert(&key(k), k * 7);
        }
        for n in 0..=65 {
            let keys: Vec<FlowKey> = queries[..n].iter().map(|&k| key(k)).collect();
            let hashes: Vec<u64> = keys.iter().map(flow_hash).collect();
            let mut out = vec![None; n];
            let before = c.stats();
            c.lookup_batch(&keys, &hashes, &mut out);
            let mid = c.stats();
            for (k, &got) in keys.iter().zip(&out) {
                prop_assert_eq!(got, c.lookup(k));
                if let Some(v) = got {
                    prop_assert_eq!(key(v / 7), *k);
                }
            }
            let after = c.stats();
            // The batch counts exactly what the single lookups count.
            prop_assert_eq!(mid.hits - before.hits, after.hits - mid.hits);
            prop_assert_eq!(mid.misses - before.misses, after.misses - mid.misses);
            prop_assert_eq!((mid.hits - before.hits) + (mid.misses - before.misses), n as u64);
        }
    }
}
