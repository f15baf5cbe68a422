//! An open-addressing hash map from 64-bit keys (rule ids, precomputed
//! hashes) to small values, built for the control path of big tables.
//!
//! What: [`IdTable<V>`] stores `(key, value)` pairs inline in one array
//! with linear probing and backward-shift deletion (no tombstones), and
//! picks the home slot with a Fibonacci (multiply-shift) hash.
//!
//! Why not `std::collections::HashMap`: a flow-mod on a 512K-rule table
//! touches several id-keyed maps per copy, and each `HashMap` probe costs
//! two cache misses there (its control bytes, then the bucket). Here the
//! key and the value share a slot, so a probe is one miss, and
//! [`IdTable::prefetch`] can start that miss early, letting the misses of
//! several maps overlap instead of queueing.
//!
//! Invariants:
//! - a slot is empty exactly when its key is [`IdTable::EMPTY`]
//!   (`u64::MAX`), which is therefore not a valid key (rule ids are `u32`;
//!   callers keying by hashes remap it);
//! - every key sits at or after its home slot with no empty slot between
//!   (the linear-probing invariant backward-shift deletion preserves);
//! - the load stays at most 5/8, so probe runs stay short.
//!
//! Keys chosen by an adversary could lengthen probe runs (only the cost
//! of their own updates); the hash is unseeded so two copies built by the
//! same operations have the same layout.
//!
//! Thread-safety: plain data (`Send + Sync` when `V` is); `&self` reads,
//! `&mut self` writes.

/// See the module documentation.
#[derive(Clone)]
pub struct IdTable<V> {
    slots: Vec<(u64, Option<V>)>,
    /// `slots.len() - 1` (a power of two minus one), or 0 when unallocated.
    mask: usize,
    /// `64 - log2(slots.len())`: the shift of the multiply-shift hash.
    shift: u32,
    len: usize,
}

impl<V> Default for IdTable<V> {
    fn default() -> Self {
        IdTable {
            slots: Vec::new(),
            mask: 0,
            shift: 64,
            len: 0,
        }
    }
}

impl<V> std::fmt::Debug for IdTable<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdTable")
            .field("len", &self.len)
            .field("slots", &self.slots.len())
            .finish()
    }
}

/// 2^64 / φ, odd: consecutive keys land far apart (Knuth's multiplicative
/// hashing), and the top bits, which pick the slot, depend on every bit of
/// the key.
const PHI: u64 = 0x9e37_79b9_7f4a_7c15;
const MIN_SLOTS: usize = 16;

impl<V> IdTable<V> {
    /// The key marking an empty slot; not usable as a key.
    pub const EMPTY: u64 = u64::MAX;

    /// An empty table (allocates on first insert).
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of keys held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no key is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Home slot of `key`. Only called once slots are allocated
    /// (`shift` < 64); the result is below `slots.len()`.
    #[inline]
    fn home(&self, key: u64) -> usize {
        (key.wrapping_mul(PHI) >> self.shift) as usize
    }

    /// Index of the slot holding `key`, if any.
    #[inline]
    fn find(&self, key: u64) -> Option<usize> {
        if self.slots.is_empty() || key == Self::EMPTY {
            return None;
        }
        let mut i = self.home(key);
        loop {
            let k = self.slots[i].0;
            if k == key {
                return Some(i);
            }
            if k == Self::EMPTY {
                return None;
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Hint the CPU to start loading the slot `key` hashes to, ahead of a
    /// [`get`](Self::get), [`insert`](Self::insert) or
    /// [`remove`](Self::remove) of it. Changes nothing.
    #[inline]
    pub fn prefetch(&self, key: u64) {
        if !self.slots.is_empty() {
            offlow_sync::prefetch(&self.slots[self.home(key)]);
        }
    }

    /// The value of `key`.
    #[inline]
    pub fn get(&self, key: u64) -> Option<&V> {
        self.find(key).and_then(|i| self.slots[i].1.as_ref())
    }

    /// The value of `key`, mutably.
    #[inline]
    pub fn get_mut(&mut self, key: u64) -> Option<&mut V> {
        self.find(key).and_then(|i| self.slots[i].1.as_mut())
    }

    /// True when `key` is held.
    #[inline]
    pub fn contains_key(&self, key: u64) -> bool {
        self.find(key).is_some()
    }

    /// Insert or replace; returns the previous value.
    ///
    /// # Panics
    /// If `key` is [`IdTable::EMPTY`] (a caller bug: keys are ids or
    /// remapped hashes).
    pub fn insert(&mut self, key: u64, val: V) -> Option<V> {
        assert!(key != Self::EMPTY, "IdTable: the EMPTY key is reserved");
        if let Some(i) = self.find(key) {
            return self.slots[i].1.replace(val);
        }
        // Grow before the load passes 5/8.
        if (self.len + 1) * 8 > self.slots.len() * 5 {
            self.grow();
        }
        let mut i = self.home(key);
        while self.slots[i].0 != Self::EMPTY {
            i = (i + 1) & self.mask;
        }
        self.slots[i] = (key, Some(val));
        self.len += 1;
        None
    }

    /// Remove `key`, returning its value.
    pub fn remove(&mut self, key: u64) -> Option<V> {
        let mut hole = self.find(key)?;
        let val = self.slots[hole].1.take();
        self.slots[hole].0 = Self::EMPTY;
        self.len -= 1;
        // Backward-shift: pull later members of the run into the hole when
        // their home is not in (hole, j] (cyclically), so every key stays
        // reachable from its home without crossing an empty slot.
        let mut j = hole;
        loop {
            j = (j + 1) & self.mask;
            let k = self.slots[j].0;
            if k == Self::EMPTY {
                break;
            }
            let h = self.home(k);
            let stays = if hole <= j {
                hole < h && h <= j
            } else {
                hole < h || h <= j
            };
            if !stays {
                self.slots.swap(hole, j);
                hole = j;
            }
        }
        val
    }

    fn grow(&mut self) {
        let n = (self.slots.len() * 2).max(MIN_SLOTS);
        let old = std::mem::replace(&mut self.slots, Vec::with_capacity(n));
        self.slots.resize_with(n, || (Self::EMPTY, None));
        self.mask = n - 1;
        self.shift = 64 - n.trailing_zeros();
        self.len = 0;
        for (k, v) in old {
            if let Some(v) = v {
                let mut i = self.home(k);
                while self.slots[i].0 != Self::EMPTY {
                    i = (i + 1) & self.mask;
                }
                self.slots[i] = (k, Some(v));
                self.len += 1;
            }
        }
    }

    /// Every `(key, value)`, in slot order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &V)> + '_ {
        self.slots
            .iter()
            .filter_map(|(k, v)| v.as_ref().map(|v| (*k, v)))
    }

    /// Every value, in slot order.
    pub fn values(&self) -> impl Iterator<Item = &V> + '_ {
        self.slots.iter().filter_map(|(_, v)| v.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64, u32),
        Remove(u64),
    }

    fn arb_op() -> impl Strategy<Value = Op> {
        // Small key space: replacements, removals of present keys and long
        // probe runs (keys colliding on their home slot) are all common.
        let key = prop_oneof![
            0u64..64,
            Just(u64::MAX - 1),
            (0u64..8).prop_map(|k| k << 58)
        ];
        prop_oneof![
            3 => (key.clone(), any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
            2 => key.prop_map(Op::Remove),
        ]
    }

    proptest! {
        /// The table behaves as a `HashMap` after any sequence of ops.
        #[test]
        fn agrees_with_hashmap(ops in prop::collection::vec(arb_op(), 0..400)) {
            let mut t = IdTable::new();
            let mut m = HashMap::new();
            for op in ops {
                match op {
                    Op::Insert(k, v) => prop_assert_eq!(t.insert(k, v), m.insert(k, v)),
                    Op::Remove(k) => prop_assert_eq!(t.remove(k), m.remove(&k)),
                }
                prop_assert_eq!(t.len(), m.len());
            }
            for k in (0u64..64).chain([u64::MAX - 1]).chain((0..8).map(|k| k << 58)) {
                prop_assert_eq!(t.get(k), m.get(&k));
                prop_assert_eq!(t.contains_key(k), m.contains_key(&k));
            }
            let mut got: Vec<(u64, u32)> = t.iter().map(|(k, v)| (k, *v)).collect();
            let mut want: Vec<(u64, u32)> = m.into_iter().collect();
            got.sort_unstable();
            want.sort_unstable();
            prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn grows_and_keeps_everything() {
        let mut t = IdTable::new();
        for k in 0..100_000u64 {
            assert_eq!(t.insert(k * 7, k), None);
        }
        for k in (0..100_000u64).step_by(2) {
            assert_eq!(t.remove(k * 7), Some(k));
        }
        assert_eq!(t.len(), 50_000);
        for k in 0..100_000u64 {
            assert_eq!(t.get(k * 7).copied(), (k % 2 == 1).then_some(k));
        }
        assert!(t.slots.len() * 5 >= t.len() * 8, "load stays <= 5/8");
        if let Some(v) = t.get_mut(7) {
            *v = 42;
        }
        assert_eq!(t.get(7), Some(&42));
        t.prefetch(7);
        assert_eq!(t.get(u64::MAX), None, "EMPTY is never found");
    }
}
