//! A fast hasher for maps keyed by rule ids (and other small integers).
//!
//! What: [`IdHasher`] is a one-multiply hasher in the FxHash family (the
//! hasher rustc uses for its own tables), finished with a fold so that both
//! the low bits (bucket index) and the high bits (hashbrown's tag) depend on
//! every input bit. [`IdMap`] is a `HashMap` using it.
//!
//! Why not the standard SipHash: flow-mod processing touches several
//! id-keyed maps per update, and SipHash costs more than the rest of a
//! lookup in a warm table. SipHash's seeded keys defend against
//! hash-flooding by whoever chooses the keys; here the keys are rule ids the
//! pipeline allocates itself (sequentially), not values a peer picks, so
//! there is nothing to defend. A controller that could choose ids would
//! only slow its own table updates down, never change an answer.
//!
//! Thread-safety: stateless apart from the running hash; `Send + Sync`.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

const K: u64 = 0xf135_7aea_2e62_a9c5;

/// The hasher; see the module documentation.
#[derive(Debug, Default, Clone, Copy)]
pub struct IdHasher(u64);

impl IdHasher {
    #[inline]
    fn add(&mut self, v: u64) {
        self.0 = (self.0 ^ v).wrapping_mul(K);
    }
}

impl Hasher for IdHasher {
    #[inline]
    fn finish(&self) -> u64 {
        // The product's high half depends on every input bit; fold it into
        // the low half that picks the bucket.
        self.0 ^ (self.0 >> 29)
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w));
        }
    }

    #[inline]
    fn write_u8(&mut self, v: u8) {
        self.add(u64::from(v));
    }

    #[inline]
    fn write_u16(&mut self, v: u16) {
        self.add(u64::from(v));
    }

    #[inline]
    fn write_u32(&mut self, v: u32) {
        self.add(u64::from(v));
    }

    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.add(v);
    }

    #[inline]
    fn write_usize(&mut self, v: usize) {
        self.add(v as u64);
    }
}

/// Builds [`IdHasher`]s.
pub type IdBuildHasher = BuildHasherDefault<IdHasher>;

/// A `HashMap` hashed with [`IdHasher`].
pub type IdMap<K, V> = HashMap<K, V, IdBuildHasher>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn sequential_ids_spread_over_buckets() {
        // 4096 sequential ids into 4096 buckets (low 12 bits): a decent
        // hash leaves roughly 1/e of the buckets empty, never most of them.
        let b = IdBuildHasher::default();
        let mut used = vec![false; 4096];
        for id in 1_000_000u32..1_004_096 {
            used[(b.hash_one(id) & 4095) as usize] = true;
        }
        let n = used.iter().filter(|&&u| u).count();
        assert!(n > 2000, "only {n} of 4096 buckets used");
        // And the high 7 bits (hashbrown's tag) vary too.
        let tags: std::collections::HashSet<u64> =
            (0u32..1000).map(|id| b.hash_one(id) >> 57).collect();
        assert!(tags.len() > 100, "{} distinct tags", tags.len());
    }

    #[test]
    fn map_round_trip() {
        let mut m: IdMap<u32, u32> = IdMap::default();
        for i in 0..10_000u32 {
            m.insert(i.wrapping_mul(2_654_435_761), i);
        }
        for i in 0..10_000u32 {
            assert_eq!(m.get(&i.wrapping_mul(2_654_435_761)), Some(&i));
        }
        assert_eq!(m.len(), 10_000);
    }
}
