//! An open-addressing hash map from 64-bit keys (rule ids, precomputed
//! hashes) to small values, built for the control path of big tables.
//!
//! What: [`IdTable<V>`] stores `(key, value)` pairs inline in one array
//! with linear probing and backward-shift deletion (no tombstones outside
//! a resize, below), and picks the home slot with a Fibonacci
//! (multiply-shift) hash.
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
//! Growth is incremental: no insert or removal costs more than a bounded
//! number of slots, however big the table. Why: the tables of a
//! 100K-rule flow table live on the switch's single control thread, twice
//! (the two copies of a left-right pair), and doubling one in a single
//! insert (filling a table twice the size, then rehashing every entry)
//! took milliseconds, during which no other controller got an answer
//! (issue 21: echo p99 6-10 ms while a stream crossed 40,960 and 81,920
//! rules, 5/8 of 2^16 and 2^17). How, like Redis's incremental rehash:
//! - *prefill*: once the load passes 7/16 (and no resize is under way),
//!   each insert or removal writes [`PREFILL_SLOTS`] empty slots of the
//!   next, twice as large, array, so that it is ready (allocated, written,
//!   its pages faulted in) when the load reaches 5/8;
//! - *resize*: at 5/8 that array takes new keys and the old one is kept
//!   beside it; each later insert or removal moves the entries of
//!   [`MIGRATE_SLOTS`] old slots across, and the last move drops it.
//!
//! While a resize is under way (`old` is `Some`):
//! - new keys go to the new array; a key is live in at most one of them;
//! - the old array takes no inserts and no backward shifts: an entry leaving
//!   it (moved, removed or replaced) keeps its key with the value `None`, a
//!   tombstone, so the probe runs of the entries still there stay unbroken;
//! - a lookup probes the new array, then the old one;
//! - its slots before `cursor` have been moved.
//!
//! The budgets keep the steps apart: after a resize starts at 5/8 of the
//! old size (5/16 of the new), the old array is drained within 1/8 of the
//! new size in operations (load 7/16), and the prefill of the next array
//! (twice the new size) within another 1/8 (9/16), before the load can
//! reach 5/8 again. A step that finds the previous one unfinished (which
//! these budgets rule out) completes it first.
//!
//! Keys chosen by an adversary could lengthen probe runs (only the cost
//! of their own updates); the hash is unseeded so two copies built by the
//! same operations have the same layout.
//!
//! Thread-safety: plain data (`Send + Sync` when `V` is); `&self` reads,
//! `&mut self` writes.

/// Old slots a resize moves across per insert or removal (see the module
/// documentation): drains the old array within a quarter of its size in
/// operations, and an operation stays a handful of misses.
pub const MIGRATE_SLOTS: usize = 4;

/// Slots of the next array written per insert or removal once the load
/// passes 7/16 (see the module documentation).
pub const PREFILL_SLOTS: usize = 16;

/// One open-addressing array: slots, with the mask and shift of its size.
#[derive(Clone)]
struct Slots<V> {
    slots: Vec<(u64, Option<V>)>,
    /// `slots.len() - 1` (a power of two minus one), or 0 when unallocated.
    mask: usize,
    /// `64 - log2(slots.len())`: the shift of the multiply-shift hash.
    shift: u32,
}

/// The array a resize is draining (see the module documentation).
#[derive(Clone)]
struct Draining<V> {
    table: Slots<V>,
    /// Slots below this have been moved to the new array.
    cursor: usize,
    /// Entries still held here (`Some` values).
    live: usize,
}

/// See the module documentation.
#[derive(Clone)]
pub struct IdTable<V> {
    /// The array new keys go to.
    slots: Slots<V>,
    /// The previous, smaller array while a resize moves its entries over.
    old: Option<Box<Draining<V>>>,
    /// The next array, twice `slots`' size, being filled with empty slots
    /// (its capacity is reserved when the prefill starts).
    next: Vec<(u64, Option<V>)>,
    /// Keys held in both arrays together.
    len: usize,
}

impl<V> Default for IdTable<V> {
    fn default() -> Self {
        IdTable {
            slots: Slots::from_vec(Vec::new()),
            old: None,
            next: Vec::new(),
            len: 0,
        }
    }
}

impl<V> std::fmt::Debug for IdTable<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdTable")
            .field("len", &self.len)
            .field("slots", &self.slots.len())
            .field("old_slots", &self.old.as_ref().map(|o| o.table.slots.len()))
            .field("next_filled", &self.next.len())
            .finish()
    }
}

/// 2^64 / φ, odd: consecutive keys land far apart (Knuth's multiplicative
/// hashing), and the top bits, which pick the slot, depend on every bit of
/// the key.
const PHI: u64 = 0x9e37_79b9_7f4a_7c15;
const MIN_SLOTS: usize = 16;
const EMPTY: u64 = u64::MAX;

impl<V> Slots<V> {
    /// The array over `slots` (empty, or a power of two of empty slots).
    fn from_vec(slots: Vec<(u64, Option<V>)>) -> Self {
        let n = slots.len();
        Slots {
            slots,
            mask: n.saturating_sub(1),
            shift: if n == 0 { 64 } else { 64 - n.trailing_zeros() },
        }
    }

    /// Number of slots (empty or not).
    fn len(&self) -> usize {
        self.slots.len()
    }

    /// Home slot of `key`. Only called once slots are allocated
    /// (`shift` < 64); the result is below `slots.len()`.
    #[inline]
    fn home(&self, key: u64) -> usize {
        (key.wrapping_mul(PHI) >> self.shift) as usize
    }

    /// Index of the slot holding `key` (its value is a tombstone if this
    /// is a draining array and the key left it), if any.
    #[inline]
    fn find(&self, key: u64) -> Option<usize> {
        if self.slots.is_empty() || key == EMPTY {
            return None;
        }
        let mut i = self.home(key);
        loop {
            let k = self.slots[i].0;
            if k == key {
                return Some(i);
            }
            if k == EMPTY {
                return None;
            }
            i = (i + 1) & self.mask;
        }
    }

    #[inline]
    fn prefetch(&self, key: u64) {
        if !self.slots.is_empty() {
            offlow_sync::prefetch(&self.slots[self.home(key)]);
        }
    }

    /// Put `key`, known absent, in the first empty slot of its run.
    #[inline]
    fn place(&mut self, key: u64, val: V) {
        let mut i = self.home(key);
        while self.slots[i].0 != EMPTY {
            i = (i + 1) & self.mask;
        }
        self.slots[i] = (key, Some(val));
    }

    /// Empty slot `hole` and backward-shift the rest of its run: pull
    /// later members into the hole when their home is not in (hole, j]
    /// (cyclically), so every key stays reachable from its home without
    /// crossing an empty slot. Returns the slot's value.
    fn remove_at(&mut self, mut hole: usize) -> Option<V> {
        let val = self.slots[hole].1.take();
        self.slots[hole].0 = EMPTY;
        let mut j = hole;
        loop {
            j = (j + 1) & self.mask;
            let k = self.slots[j].0;
            if k == EMPTY {
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
}

impl<V> IdTable<V> {
    /// The key marking an empty slot; not usable as a key.
    pub const EMPTY: u64 = EMPTY;

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

    /// Hint the CPU to start loading the slot `key` hashes to, ahead of a
    /// [`get`](Self::get), [`insert`](Self::insert) or
    /// [`remove`](Self::remove) of it. Changes nothing.
    #[inline]
    pub fn prefetch(&self, key: u64) {
        self.slots.prefetch(key);
        if let Some(o) = &self.old {
            o.table.prefetch(key);
        }
    }

    /// The value of `key`.
    #[inline]
    pub fn get(&self, key: u64) -> Option<&V> {
        if let Some(i) = self.slots.find(key) {
            return self.slots.slots[i].1.as_ref();
        }
        let o = self.old.as_ref()?;
        o.table.find(key).and_then(|i| o.table.slots[i].1.as_ref())
    }

    /// The value of `key`, mutably.
    #[inline]
    pub fn get_mut(&mut self, key: u64) -> Option<&mut V> {
        if let Some(i) = self.slots.find(key) {
            return self.slots.slots[i].1.as_mut();
        }
        let o = self.old.as_mut()?;
        let i = o.table.find(key)?;
        o.table.slots[i].1.as_mut()
    }

    /// True when `key` is held.
    #[inline]
    pub fn contains_key(&self, key: u64) -> bool {
        self.get(key).is_some()
    }

    /// Insert or replace; returns the previous value.
    ///
    /// # Panics
    /// If `key` is [`IdTable::EMPTY`] (a caller bug: keys are ids or
    /// remapped hashes).
    pub fn insert(&mut self, key: u64, val: V) -> Option<V> {
        assert!(key != Self::EMPTY, "IdTable: the EMPTY key is reserved");
        if let Some(i) = self.slots.find(key) {
            return self.slots.slots[i].1.replace(val);
        }
        // A key still in the old array moves to the new one with its new
        // value (the old slot becomes a tombstone).
        let prev = self.take_old(key);
        self.step();
        // Grow before the load passes 5/8.
        if (self.len + 1) * 8 > self.slots.len() * 5 {
            self.grow();
        }
        self.slots.place(key, val);
        self.len += 1;
        prev
    }

    /// Remove `key`, returning its value.
    pub fn remove(&mut self, key: u64) -> Option<V> {
        let val = match self.slots.find(key) {
            Some(i) => {
                let v = self.slots.remove_at(i);
                self.len -= 1;
                v
            }
            None => self.take_old(key),
        };
        if val.is_some() {
            self.step();
        }
        val
    }

    /// Take `key`'s value out of the draining array, leaving a tombstone.
    fn take_old(&mut self, key: u64) -> Option<V> {
        let o = self.old.as_mut()?;
        let i = o.table.find(key)?;
        let v = o.table.slots[i].1.take()?;
        o.live -= 1;
        self.len -= 1;
        if o.live == 0 {
            self.drop_old();
        }
        Some(v)
    }

    /// The bounded growth work of one insert or removal: move
    /// [`MIGRATE_SLOTS`] old slots across while a resize is under way,
    /// else prefill [`PREFILL_SLOTS`] slots of the next array once the
    /// load passes 7/16.
    #[inline]
    fn step(&mut self) {
        if self.old.is_some() {
            self.migrate_slots(MIGRATE_SLOTS);
        } else if self.len * 16 >= self.slots.len() * 7 {
            self.prefill(PREFILL_SLOTS);
        }
    }

    /// Move the entries of up to `n` old slots; drop the old array once it
    /// holds nothing.
    fn migrate_slots(&mut self, n: usize) {
        let Some(o) = self.old.as_mut() else {
            return;
        };
        let end = o.table.slots.len().min(o.cursor.saturating_add(n));
        while o.cursor < end && o.live > 0 {
            if let Some(v) = o.table.slots[o.cursor].1.take() {
                // Live in the old array, hence absent from the new one.
                self.slots.place(o.table.slots[o.cursor].0, v);
                o.live -= 1;
            }
            o.cursor += 1;
        }
        if o.live == 0 || o.cursor == o.table.slots.len() {
            debug_assert_eq!(o.live, 0, "a drained array holds nothing");
            self.drop_old();
        }
    }

    /// Free the drained old array without visiting its slots: every value
    /// in it is `None` (`live == 0`), so there is nothing to drop, and a
    /// pass over a few MB of slots to find that out is what the
    /// incremental resize exists to avoid.
    fn drop_old(&mut self) {
        if let Some(mut o) = self.old.take() {
            debug_assert!(o.live == 0 && o.table.slots.iter().all(|s| s.1.is_none()));
            // SAFETY: shrinking a `Vec`'s length never exposes uninitialised
            // elements; the elements cut off are all `None` (the old array
            // is drained), so skipping their drop leaks nothing.
            unsafe { o.table.slots.set_len(0) };
        }
    }

    /// Write up to `n` more empty slots of the next array (twice `slots`'
    /// size), reserving its whole capacity first.
    fn prefill(&mut self, n: usize) {
        let want = (self.slots.len() * 2).max(MIN_SLOTS);
        if self.next.capacity() < want {
            // Allocation only: the pages are written (faulted in) by the
            // fill, a few per step.
            self.next = Vec::with_capacity(want);
        }
        let upto = want.min(self.next.len().saturating_add(n));
        self.next.resize_with(upto, || (EMPTY, None));
    }

    /// Start a resize: the current array becomes the draining one, and the
    /// prefilled array, twice its size, takes new keys.
    fn grow(&mut self) {
        // Both completions are never reached in practice (see the module
        // documentation): a resize must not start while one is under way,
        // and the next array must be whole.
        if self.old.is_some() {
            self.migrate_slots(usize::MAX);
        }
        self.prefill(usize::MAX);
        let next = Slots::from_vec(std::mem::take(&mut self.next));
        let prev = std::mem::replace(&mut self.slots, next);
        if self.len > 0 {
            self.old = Some(Box::new(Draining {
                table: prev,
                cursor: 0,
                live: self.len,
            }));
        }
    }

    /// Every `(key, value)`: the new array's in slot order, then the
    /// draining array's.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &V)> + '_ {
        let old = self.old.iter().flat_map(|o| o.table.slots.iter());
        self.slots
            .slots
            .iter()
            .chain(old)
            .filter_map(|(k, v)| v.as_ref().map(|v| (*k, v)))
    }

    /// Every value, in [`iter`](Self::iter)'s order.
    pub fn values(&self) -> impl Iterator<Item = &V> + '_ {
        self.iter().map(|(_, v)| v)
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

    // ------------------------------------------ incremental growth

    #[derive(Debug, Clone)]
    enum Step {
        Insert(u64, u32),
        Remove(u64),
        Get(u64),
        Bump(u64),
    }

    /// Mostly inserts over a key space of a few thousand, so a sequence
    /// crosses several resizes (16 → 32 → ... → 4,096 slots) with
    /// removals, replacements and lookups landing while old and new
    /// arrays coexist.
    fn arb_step() -> impl Strategy<Value = Step> {
        let key = prop_oneof![
            8 => 0u64..3000,
            1 => (0u64..16).prop_map(|k| (k << 58) | 5),
        ];
        prop_oneof![
            6 => (key.clone(), any::<u32>()).prop_map(|(k, v)| Step::Insert(k, v)),
            2 => key.clone().prop_map(Step::Remove),
            2 => key.clone().prop_map(Step::Get),
            1 => key.prop_map(Step::Bump),
        ]
    }

    /// Internal consistency: every key in one array only, the counts add
    /// up, the load bound holds for the array taking keys.
    fn check_shape(t: &IdTable<u32>) {
        let live_new = t.slots.slots.iter().filter(|s| s.1.is_some()).count();
        let live_old = t.old.as_ref().map_or(0, |o| {
            let n = o.table.slots.iter().filter(|s| s.1.is_some()).count();
            assert_eq!(n, o.live, "draining array's live count");
            assert!(
                o.table.slots[..o.cursor].iter().all(|s| s.1.is_none()),
                "slots before the cursor were moved"
            );
            for (k, v) in &o.table.slots {
                if v.is_some() {
                    assert!(t.slots.find(*k).is_none(), "key {k} in both arrays");
                }
            }
            n
        });
        assert_eq!(live_new + live_old, t.len());
        assert!(t.slots.len() * 5 >= live_new * 8, "load <= 5/8");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// The table behaves as a `HashMap` (the reference oracle) over
        /// sequences crossing several resizes.
        #[test]
        fn agrees_with_hashmap_across_resizes(
            steps in prop::collection::vec(arb_step(), 0..4000)
        ) {
            let mut t: IdTable<u32> = IdTable::new();
            let mut m: HashMap<u64, u32> = HashMap::new();
            for (n, step) in steps.into_iter().enumerate() {
                match step {
                    Step::Insert(k, v) => prop_assert_eq!(t.insert(k, v), m.insert(k, v)),
                    Step::Remove(k) => prop_assert_eq!(t.remove(k), m.remove(&k)),
                    Step::Get(k) => {
                        prop_assert_eq!(t.get(k), m.get(&k));
                        prop_assert_eq!(t.contains_key(k), m.contains_key(&k));
                        t.prefetch(k);
                    }
                    Step::Bump(k) => {
                        let a = t.get_mut(k).map(|v| { *v = v.wrapping_add(1); *v });
                        let b = m.get_mut(&k).map(|v| { *v = v.wrapping_add(1); *v });
                        prop_assert_eq!(a, b);
                    }
                }
                prop_assert_eq!(t.len(), m.len());
                if n % 97 == 0 {
                    check_shape(&t);
                    let mut got: Vec<(u64, u32)> = t.iter().map(|(k, v)| (k, *v)).collect();
                    let mut want: Vec<(u64, u32)> = m.iter().map(|(k, v)| (*k, *v)).collect();
                    got.sort_unstable();
                    want.sort_unstable();
                    prop_assert_eq!(got, want);
                }
            }
            check_shape(&t);
            for (k, v) in &m {
                prop_assert_eq!(t.get(*k), Some(v));
            }
            prop_assert_eq!(t.values().count(), m.len());
            // A clone taken at any point is an equal, independent table.
            let c = t.clone();
            for (k, v) in &m {
                prop_assert_eq!(c.get(*k), Some(v));
            }
        }
    }

    /// No operation pays for a whole array: when an insert starts a resize
    /// the previous one is over and the next array is already written, so
    /// neither fallback in `grow` runs (inserts only, and inserts mixed
    /// with removals).
    #[test]
    fn resizes_never_fall_back_to_a_whole_pass() {
        for remove_every in [0u64, 3, 7] {
            let mut t: IdTable<u64> = IdTable::new();
            let mut resizes = 0;
            for k in 0..300_000u64 {
                let new_key = !t.contains_key(k);
                if new_key && (t.len() + 1) * 8 > t.slots.len() * 5 {
                    // `step` runs before the check; at most one more slot
                    // batch may be pending.
                    assert!(
                        t.old
                            .as_ref()
                            .is_none_or(|o| o.table.len() - o.cursor <= MIGRATE_SLOTS),
                        "resize still under way at {k}"
                    );
                    let want = (t.slots.len() * 2).max(MIN_SLOTS);
                    assert!(
                        t.slots.len() == 0 || t.next.len() + PREFILL_SLOTS >= want,
                        "next array not ready at {k}: {} of {want}",
                        t.next.len()
                    );
                    resizes += 1;
                }
                t.insert(k, k);
                if remove_every > 0 && k % remove_every == 0 {
                    assert_eq!(t.remove(k / 2), Some(k / 2));
                }
            }
            assert!(resizes >= 14, "crossed {resizes} resizes");
            for k in 0..300_000u64 {
                let removed = remove_every > 0 && k < 150_000 && (2 * k) % remove_every == 0;
                let removed =
                    removed || (remove_every > 0 && k < 150_000 && (2 * k + 1) % remove_every == 0);
                assert_eq!(t.get(k).copied(), (!removed).then_some(k), "key {k}");
            }
        }
    }
}
