//! DIR-24-8 against two oracles: the binary trie and a naive scan of the
//! prefix set, over random interleaved inserts and deletes.

use std::collections::HashMap;

use offlow_classifier::dir24::{Dir24, NO_ROUTE};
use offlow_classifier::lpm::prefix_mask;
use offlow_classifier::BinaryTrie;
use proptest::prelude::*;

/// Naive oracle: the longest held prefix covering `a`, by scanning.
fn naive(set: &HashMap<(u32, u8), u32>, a: u32) -> Option<u32> {
    set.iter()
        .filter(|((p, l), _)| a & prefix_mask(*l) == *p)
        .max_by_key(|((_, l), _)| *l)
        .map(|(_, nh)| *nh)
}

#[derive(Debug, Clone)]
enum Op {
    Insert(u32, u8, u32),
    Remove(usize),
}

/// Prefixes clustered in 16 /24s of 4 /16s so they nest and share tbl8
/// groups, with lengths spread over 0..=32 (weighted to the tbl24/tbl8
/// boundary); short prefixes anywhere.
fn prefix() -> impl Strategy<Value = (u32, u8)> {
    let len = prop_oneof![
        1 => 0u8..=8,
        2 => 9u8..=23,
        3 => 24u8..=32,
    ];
    (0u32..4, 0u32..4, any::<u32>(), len).prop_map(|(hi, third, lo, len)| {
        let a = if len < 16 {
            lo
        } else {
            0x0a00_0000 | (hi << 16) | (third << 8) | (lo & 0xff)
        };
        (a & prefix_mask(len), len)
    })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (prefix(), 0u32..1000).prop_map(|((a, l), nh)| Op::Insert(a, l, nh)),
        1 => any::<usize>().prop_map(Op::Remove),
    ]
}

fn probes(set: &HashMap<(u32, u8), u32>, extra: &[u32]) -> Vec<u32> {
    let mut v: Vec<u32> = extra.to_vec();
    for &(p, l) in set.keys() {
        let host = !prefix_mask(l);
        // Edges of the prefix and just outside it.
        v.extend([p, p | host, p.wrapping_sub(1), (p | host).wrapping_add(1)]);
        v.push(p | (host & 0x5a5a_5a5a));
    }
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(debug_assertions) { 8 } else { 256 }))]

    #[test]
    fn dir24_equals_trie_under_updates(
        ops in prop::collection::vec(op(), 1..120),
        extra in prop::collection::vec(any::<u32>(), 64),
    ) {
        let mut fib = Dir24::new();
        let mut trie = BinaryTrie::new();
        let mut set: HashMap<(u32, u8), u32> = HashMap::new();
        for (step, op) in ops.iter().enumerate() {
            match *op {
                Op::Insert(a, l, nh) => {
                    let old = set.insert((a, l), nh);
                    prop_assert_eq!(fib.insert(a, l, nh).unwrap(), old);
                    prop_assert_eq!(trie.insert(a, l, nh).unwrap(), old);
                }
                Op::Remove(i) => {
                    let mut keys: Vec<_> = set.keys().copied().collect();
                    keys.sort_unstable();
                    if keys.is_empty() {
                        prop_assert_eq!(fib.remove(0, 0), None);
                        continue;
                    }
                    let (a, l) = keys[i % keys.len()];
                    let old = set.remove(&(a, l));
                    prop_assert_eq!(fib.remove(a, l), old);
                    prop_assert_eq!(trie.remove(a, l), old);
                }
            }
            // Full check every few steps and at the end (debug builds are slow).
            if step % 8 == 7 || step + 1 == ops.len() {
                let addrs = probes(&set, &extra);
                let mut out = vec![0u32; addrs.len()];
                fib.lookup_batch(&addrs, &mut out);
                for (&a, &o) in addrs.iter().zip(&out) {
                    let want = naive(&set, a);
                    prop_assert_eq!(trie.lookup(a), want, "trie at {:#x}", a);
                    prop_assert_eq!(fib.lookup(a), want, "dir24 at {:#x}", a);
                    prop_assert_eq!(o, want.unwrap_or(NO_ROUTE), "batch at {:#x}", a);
                }
            }
        }
        prop_assert_eq!(fib.len(), set.len());
        // Deleting everything frees every group and leaves no route.
        let keys: Vec<_> = set.keys().copied().collect();
        for (a, l) in keys {
            prop_assert!(fib.remove(a, l).is_some());
        }
        prop_assert_eq!(fib.groups_used(), 0);
        prop_assert_eq!(fib.lookup(extra[0]), None);
    }
}

/// Batch sizes from 0 past the internal block size agree with single lookups.
#[test]
fn batch_sizes_agree_with_single_lookups() {
    let mut fib = Dir24::new();
    fib.insert(0x0a00_0000, 8, 1).unwrap();
    fib.insert(0x0a00_0080, 25, 2).unwrap();
    fib.insert(0xc0a8_0000, 16, 3).unwrap();
    let addrs: Vec<u32> = (0..100u32)
        .map(|i| match i % 3 {
            0 => 0x0a00_0000 | (i * 7),
            1 => 0xc0a8_0000 | i,
            _ => i.wrapping_mul(0x9e37_79b9),
        })
        .collect();
    for n in 0..=addrs.len() {
        let mut out = vec![u32::MAX; n + 1];
        fib.lookup_batch(&addrs[..n], &mut out);
        for i in 0..n {
            assert_eq!(out[i], fib.lookup(addrs[i]).unwrap_or(NO_ROUTE));
        }
        assert_eq!(out[n], u32::MAX, "nothing written past the input");
    }
    assert_eq!(fib.lookup(0x0a00_0081), Some(2));
}
