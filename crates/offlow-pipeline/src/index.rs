//! Per-table match index: answers the control-path questions of a flow-mod
//! without scanning the table.
//!
//! What: [`MatchIndex`] holds, for one flow table,
//! - identical-match search `(priority, FlowMatch) -> entry` (replacement
//!   on ADD, MODIFY_STRICT / DELETE_STRICT), answered by the overlap index
//!   below: an identical entry has the query's mask, so it sits in that
//!   group's primary bucket for the query's value (one probe; no separate
//!   exact map to maintain on every update), and
//! - an *overlap* index answering "ids of entries with priority in
//!   `[lo, hi]` whose match overlaps `M`" (the `shadowed` set of an ADD with
//!   `lo = 0, hi = p`; `CHECK_OVERLAP` with `lo = hi = p`).
//!
//! The overlap index groups entries by *mask* (the full mask of their
//! [`Match`](offlow_flow::Match), port bits included). If an entry `e` with
//! mask `Mg` overlaps `M`, then for every mask `S ⊆ Mg ∩ M.mask` the two
//! agree on `S`: `e.value & S == M.value & S` (ports: a native range only
//! narrows the set of a port dimension, so agreement on the masked bits both
//! constrain is still necessary). A group is therefore hashed on one or more
//! *key masks* `S ⊆ Mg`: its primary key mask is `Mg` itself, and a query whose
//! mask covers `Mg` reads one bucket. Groups whose mask the query does not
//! cover use a secondary key mask `S ⊆ Mg ∩ M.mask` built earlier for a
//! similar query (see [`MatchIndex::prepare_for`]), or are scanned. Every
//! candidate is then checked with [`FlowMatch::overlaps`] and its priority,
//! so answers are *exact*: the same set a full scan finds, never more.
//! Groups whose priority span misses `[lo, hi]` are skipped without a look
//! (the FIB case: longer prefixes carry higher priorities).
//!
//! Buckets hold `(priority, id, Arc<FlowEntry>)` and are keyed by a 64-bit
//! hash of the masked value (collisions are filtered by the exact check), so
//! an entry costs a few dozen bytes of index, not a copy of its match; the
//! inline priority and id let queries and removals skip entries without
//! dereferencing them.
//!
//! Invariants: every entry of the table is in exactly one group (its mask),
//! in one bucket of each of the group's key masks; no group is empty.
//!
//! Thread-safety: plain data (`Send + Sync`); queries take `&self`, updates
//! `&mut self`. The hash is deterministic (unseeded), so two copies built by
//! the same ops have the same shape; answers never depend on the shape
//! anyway (they are exact sets, sorted by the caller). A controller could
//! craft colliding matches to slow its own flow-mods down, never to change
//! an answer.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use offlow_classifier::{IdTable, PortRange, Priority, RuleId};
use offlow_flow::{Field, FlowKey, FlowMask, KEY_WORDS};

use crate::entry::{FlowEntry, FlowMatch};

/// A group smaller than this is scanned rather than given secondary key
/// masks (a scan of a few dozen ids is as cheap as maintaining a hash).
const SECONDARY_MIN_GROUP: usize = 32;
/// At most this many secondary key masks per group: each costs one hash
/// insert/remove per update of the group.
const SECONDARY_MAX: usize = 4;
/// A secondary key mask whose buckets average more ids than this is not
/// selective enough to spare building a better one.
const SECONDARY_MAX_AVG_BUCKET: usize = 4;

const K: u64 = 0x9e37_79b9_7f4a_7c15;

/// Murmur3's 64-bit finaliser: spreads every input bit over the output, so
/// the low bits (bucket index) and high bits (hashbrown's tag) are both good.
#[inline]
fn fmix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

#[inline]
fn fold(h: u64, w: u64) -> u64 {
    (h.rotate_left(5) ^ w).wrapping_mul(K)
}

/// Hasher for keys that are already 64-bit hashes (passes `write_u64`
/// through) and for [`FlowMask`] keys (folds the bytes, then finalises).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct FoldHasher(u64);

impl Hasher for FoldHasher {
    fn finish(&self) -> u64 {
        fmix64(self.0)
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            self.0 = fold(self.0, u64::from_le_bytes(b));
        }
        for &b in chunks.remainder() {
            self.0 = fold(self.0, u64::from(b));
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = fold(self.0, v);
    }
}

pub(crate) type FoldBuild = BuildHasherDefault<FoldHasher>;

/// Per-word multipliers of [`KeyIndex::hash`] (odd, distinct, spread).
const WORD_K: [u64; KEY_WORDS] = {
    let mut k = [0u64; KEY_WORDS];
    let mut x = 0x243f_6a88_85a3_08d3u64;
    let mut i = 0;
    while i < KEY_WORDS {
        x = x
            .wrapping_mul(0x5851_f42d_4c95_7f2d)
            .wrapping_add(0x1405_7b7e_f767_814f);
        k[i] = x | 1;
        i += 1;
    }
    k
};

/// `a ⊆ b` as bit sets.
#[inline]
fn mask_subset(a: &FlowMask, b: &FlowMask) -> bool {
    (0..KEY_WORDS).all(|i| a.words[i] & !b.words[i] == 0)
}

/// One indexed entry. Priority and id are kept inline so that filtering a
/// bucket by priority (overlap queries, identical-match search) and
/// removing by id touch only the bucket, not each entry (a cache miss
/// apiece in a big table).
///
/// `sel` is the entry's value in its group's most selective key word (the
/// one its mask covers most, [`Group::new`]): queries reject most
/// non-overlapping entries on it, again without a dereference.
///
/// The native port ranges are inline too: with the priority they settle
/// most identical-match candidates, and the entry's ranges sit on a cache
/// line of their own, far from the value words.
#[derive(Debug, Clone)]
struct Slot {
    priority: Priority,
    id: RuleId,
    sel: u64,
    ports: [PortRange; 2],
    entry: Arc<FlowEntry>,
}

impl Slot {
    fn of(e: &Arc<FlowEntry>, sel_word: u8) -> Slot {
        Slot {
            priority: e.priority,
            id: e.id,
            sel: e.matcher.matcher.value.words[usize::from(sel_word)],
            ports: [e.matcher.src_port, e.matcher.dst_port],
            entry: Arc::clone(e),
        }
    }
}

/// The entries sharing one hash; almost always one, so that case stays
/// inline. Entries are the table's own `Arc`s (a pointer each, no copy), so
/// checking a candidate needs no lookup by id.
#[derive(Debug, Clone)]
enum Ids {
    One(Slot),
    Many(Vec<Slot>),
}

impl Ids {
    fn as_slice(&self) -> &[Slot] {
        match self {
            Ids::One(e) => core::slice::from_ref(e),
            Ids::Many(v) => v,
        }
    }

    fn push(&mut self, slot: Slot) {
        match self {
            Ids::One(a) => *self = Ids::Many(vec![a.clone(), slot]),
            Ids::Many(v) => v.push(slot),
        }
    }

    /// Swap the entry with `new.id` for `new`; true if it was there.
    fn replace(&mut self, new: Slot) -> bool {
        let slot = match self {
            Ids::One(a) => (a.id == new.id).then_some(a),
            Ids::Many(v) => v.iter_mut().find(|x| x.id == new.id),
        };
        match slot {
            Some(s) => {
                *s = new;
                true
            }
            None => false,
        }
    }

    /// Remove the entry with `id`; true when the list is now empty.
    fn remove(&mut self, id: RuleId) -> bool {
        match self {
            Ids::One(a) => a.id == id,
            Ids::Many(v) => {
                if let Some(i) = v.iter().position(|x| x.id == id) {
                    v.swap_remove(i);
                }
                if v.len() == 1 {
                    let last = v.pop();
                    if let Some(last) = last {
                        *self = Ids::One(last);
                    }
                    return false;
                }
                v.is_empty()
            }
        }
    }
}

/// Multimap from a 64-bit hash to entries.
///
/// An [`IdTable`], which grows a few slots per insert instead of rehashing
/// in one. Why: a primary index holds a bucket per distinct value, so a
/// 100K-rule table's is a 100K-bucket map, and as a hashbrown map it
/// doubled in a single insert at 7/8 fill (with TupleMerge's id map, 4.6
/// ms at 57,344 rules and 8.4 ms at 114,688; `examples/add_stalls.rs`), a
/// flow-mod during which the switch's control thread answered nobody.
#[derive(Debug, Clone, Default)]
struct Buckets(IdTable<Ids>);

/// The table key of hash `h`: `IdTable` reserves `u64::MAX`, so that hash
/// shares a bucket with `u64::MAX - 1` (buckets are filtered by an exact
/// check anyway).
#[inline]
fn bucket_key(h: u64) -> u64 {
    h.min(IdTable::<Ids>::EMPTY - 1)
}

impl Buckets {
    fn insert(&mut self, h: u64, slot: Slot) {
        let h = bucket_key(h);
        match self.0.get_mut(h) {
            Some(ids) => ids.push(slot),
            None => {
                self.0.insert(h, Ids::One(slot));
            }
        }
    }

    fn remove(&mut self, h: u64, id: RuleId) {
        let h = bucket_key(h);
        if let Some(ids) = self.0.get_mut(h) {
            if ids.remove(id) {
                self.0.remove(h);
            }
        }
    }

    /// Swap the entry with `new.id` under hash `h` for `new`; true if found.
    fn replace(&mut self, h: u64, new: Slot) -> bool {
        self.0
            .get_mut(bucket_key(h))
            .is_some_and(|ids| ids.replace(new))
    }

    fn get(&self, h: u64) -> &[Slot] {
        self.0.get(bucket_key(h)).map_or(&[], Ids::as_slice)
    }

    fn len(&self) -> usize {
        self.0.len()
    }
}

/// `a.overlaps(b)` ([`FlowMatch::overlaps`]), with a fast path: agreeing
/// on every bit both masks fix is necessary (a native port range only
/// narrows a port dimension), and sufficient when neither has a range.
#[inline]
fn overlaps(a: &FlowMatch, b: &FlowMatch) -> bool {
    if !a.matcher.overlaps(&b.matcher) {
        return false;
    }
    let no_ranges = |m: &FlowMatch| m.src_port.is_any() && m.dst_port.is_any();
    (no_ranges(a) && no_ranges(b)) || a.overlaps(b)
}

/// A group's entries hashed on one key mask.
#[derive(Debug, Clone)]
struct KeyIndex {
    /// Subset of the group's mask.
    mask: FlowMask,
    /// Indices of the non-zero words of `mask` (the first `n_words`): a
    /// 5-tuple mask has 4 of 16, and hashing only those is what every
    /// insert, remove and query of this index pays.
    words: [u8; KEY_WORDS],
    n_words: u8,
    /// The group's selective word ([`Slot::sel`]).
    sel_word: u8,
    buckets: Buckets,
}

impl KeyIndex {
    fn new(mask: FlowMask, sel_word: u8) -> KeyIndex {
        let mut words = [0u8; KEY_WORDS];
        let mut n = 0usize;
        for (i, &w) in mask.words.iter().enumerate() {
            if w != 0 {
                // KEY_WORDS (16) fits in a u8.
                words[n] = i as u8;
                n += 1;
            }
        }
        KeyIndex {
            mask,
            words,
            // n <= KEY_WORDS.
            n_words: n as u8,
            sel_word,
            buckets: Buckets::default(),
        }
    }

    /// Hash of `value & mask`. The per-word products are independent (no
    /// chain through a running state), so they overlap in the pipeline.
    #[inline]
    fn hash(&self, value: &FlowKey) -> u64 {
        let mut h = 0u64;
        for &i in &self.words[..usize::from(self.n_words)] {
            let i = usize::from(i);
            let v = value.words[i] & self.mask.words[i];
            h = h.wrapping_add((v ^ (v >> 29)).wrapping_mul(WORD_K[i]));
        }
        fmix64(h)
    }

    /// `a & mask == b & mask`.
    #[inline]
    fn same_masked_value(&self, a: &FlowKey, b: &FlowKey) -> bool {
        self.words[..usize::from(self.n_words)].iter().all(|&i| {
            let i = usize::from(i);
            (a.words[i] ^ b.words[i]) & self.mask.words[i] == 0
        })
    }

    fn insert(&mut self, e: &Arc<FlowEntry>) {
        let h = self.hash(&e.matcher.matcher.value);
        self.buckets.insert(h, Slot::of(e, self.sel_word));
    }

    fn remove(&mut self, e: &FlowEntry) {
        let h = self.hash(&e.matcher.matcher.value);
        self.buckets.remove(h, e.id);
    }

    fn replace(&mut self, e: &Arc<FlowEntry>) -> bool {
        let h = self.hash(&e.matcher.matcher.value);
        self.buckets.replace(h, Slot::of(e, self.sel_word))
    }
}

/// The entries sharing one mask.
#[derive(Debug, Clone)]
struct Group {
    /// Keyed on the group's whole mask: one bucket per distinct value.
    primary: KeyIndex,
    /// Keyed on narrower masks, for queries that do not fix every bit of
    /// the group's mask.
    secondary: Vec<KeyIndex>,
    /// Priority -> number of entries, for the group's priority span.
    priorities: BTreeMap<Priority, u32>,
    /// Lowest and highest key of `priorities` (cached: read per query).
    min_priority: Priority,
    max_priority: Priority,
    len: usize,
    /// Narrower masks tried and found no more selective than a scan; not
    /// tried again (at most [`SECONDARY_MAX`]).
    rejected: Vec<FlowMask>,
}

impl Group {
    fn new(mask: FlowMask) -> Group {
        // The word the mask covers most (first on ties): for IPv4 rules the
        // address word, which tells most entries of a group apart.
        let mut sel_word = 0u8;
        let mut best = 0u32;
        for (i, w) in mask.words.iter().enumerate() {
            if w.count_ones() > best {
                best = w.count_ones();
                // KEY_WORDS (16) fits in a u8.
                sel_word = i as u8;
            }
        }
        Group {
            primary: KeyIndex::new(mask, sel_word),
            secondary: Vec::new(),
            priorities: BTreeMap::new(),
            min_priority: Priority::MAX,
            max_priority: Priority::MIN,
            len: 0,
            rejected: Vec::new(),
        }
    }

    fn count_priority(&mut self, p: Priority) {
        *self.priorities.entry(p).or_insert(0) += 1;
        self.min_priority = self.min_priority.min(p);
        self.max_priority = self.max_priority.max(p);
    }

    fn uncount_priority(&mut self, p: Priority) {
        if let Some(n) = self.priorities.get_mut(&p) {
            *n -= 1;
            if *n == 0 {
                self.priorities.remove(&p);
                self.min_priority = self
                    .priorities
                    .keys()
                    .next()
                    .copied()
                    .unwrap_or(Priority::MAX);
                self.max_priority = self
                    .priorities
                    .keys()
                    .next_back()
                    .copied()
                    .unwrap_or(Priority::MIN);
            }
        }
    }

    /// Could the group hold an entry with priority in `lo..=hi`?
    #[inline]
    fn in_span(&self, lo: Priority, hi: Priority) -> bool {
        self.min_priority <= hi && self.max_priority >= lo
    }

    /// The most selective key index usable for a query of mask `qmask`
    /// (one whose key mask the query fixes), if any.
    fn best_index(&self, qmask: &FlowMask) -> Option<&KeyIndex> {
        if mask_subset(&self.primary.mask, qmask) {
            return Some(&self.primary);
        }
        self.secondary
            .iter()
            .filter(|k| mask_subset(&k.mask, qmask))
            .max_by_key(|k| k.buckets.len())
    }

    /// Every entry in the group.
    fn all_entries(&self) -> impl Iterator<Item = &Slot> + '_ {
        self.primary
            .buckets
            .0
            .values()
            .flat_map(|ids| ids.as_slice().iter())
    }
}

/// The union of a table's rule masks, kept as its rules come and go: each
/// distinct mask with the number of rules that have it, and their OR.
///
/// Why: a frame's decision in a table depends only on the bits some rule
/// there looks at, so two frames equal on the union match the same rule.
/// The offload tier serves every microflow that agrees on the union of the
/// tables it walks with one masked entry (a megaflow). A table holds few
/// distinct masks (TupleMerge's tuples are coarser still), so the OR is
/// recomputed only when a mask comes or goes. Kept in the match index, so
/// only the copy of a left-right pair that applies ops first pays for it.
#[derive(Debug, Clone, Default)]
pub(crate) struct MaskUnion {
    /// Hashed as the match index hashes masks: a fold of the words, where
    /// SipHash of a 128-byte key would cost every flow-mod more than the
    /// rest of this bookkeeping.
    counts: HashMap<FlowMask, u32, FoldBuild>,
    union: FlowMask,
}

impl MaskUnion {
    /// The bits a rule looks at: its mask, and the transport port a port
    /// range constrains (all 16 bits: a range is not a prefix).
    fn of(m: &FlowMatch) -> FlowMask {
        let mut mask = m.matcher.mask;
        for (range, field) in [(m.src_port, Field::TcpSrc), (m.dst_port, Field::TcpDst)] {
            if range != PortRange::ANY {
                mask.set(field, field.full_mask());
            }
        }
        mask
    }

    fn add(&mut self, m: &FlowMatch) {
        let mask = MaskUnion::of(m);
        let n = self.counts.entry(mask).or_insert(0);
        *n += 1;
        if *n == 1 {
            self.union = self.union.union(&mask);
        }
    }

    fn remove(&mut self, m: &FlowMatch) {
        let mask = MaskUnion::of(m);
        let Some(n) = self.counts.get_mut(&mask) else {
            return;
        };
        *n -= 1;
        if *n == 0 {
            self.counts.remove(&mask);
            self.union = self.counts.keys().fold(FlowKey::ZERO, |u, m| u.union(m));
        }
    }
}

/// The exact and overlap indexes of one flow table (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct MatchIndex {
    /// Entry mask -> group.
    groups: HashMap<FlowMask, Group, FoldBuild>,
    /// The union of the entries' masks ([`MatchIndex::mask_union`]).
    masks: MaskUnion,
    /// Groups smaller than this get no secondary key masks
    /// ([`SECONDARY_MIN_GROUP`]; tests lower it to exercise them).
    secondary_min_group: usize,
}

impl Default for MatchIndex {
    fn default() -> MatchIndex {
        MatchIndex {
            groups: HashMap::default(),
            masks: MaskUnion::default(),
            secondary_min_group: SECONDARY_MIN_GROUP,
        }
    }
}

impl MatchIndex {
    /// Index a new entry (its id must not be indexed already).
    pub(crate) fn insert(&mut self, e: &Arc<FlowEntry>) {
        let g = self
            .groups
            .entry(e.matcher.matcher.mask)
            .or_insert_with(|| Group::new(e.matcher.matcher.mask));
        g.primary.insert(e);
        for k in &mut g.secondary {
            k.insert(e);
        }
        g.count_priority(e.priority);
        g.len += 1;
        self.masks.add(&e.matcher);
    }

    /// The bits any indexed entry looks at (`Pipeline::walk_mask`).
    pub(crate) fn mask_union(&self) -> &FlowMask {
        &self.masks.union
    }

    /// Unindex an entry exactly as it was inserted.
    pub(crate) fn remove(&mut self, e: &FlowEntry) {
        let mask = e.matcher.matcher.mask;
        let Some(g) = self.groups.get_mut(&mask) else {
            return;
        };
        self.masks.remove(&e.matcher);
        g.primary.remove(e);
        for k in &mut g.secondary {
            k.remove(e);
        }
        g.uncount_priority(e.priority);
        g.len = g.len.saturating_sub(1);
        if g.len == 0 {
            self.groups.remove(&mask);
        }
    }

    /// Point the index at `new` instead of `old`: same id, priority and
    /// match (a MODIFY or a replacing ADD), so no bucket changes. Falls back
    /// to remove + insert if `old` is not where it should be.
    pub(crate) fn replace(&mut self, old: &FlowEntry, new: &Arc<FlowEntry>) {
        debug_assert!(
            old.id == new.id && old.priority == new.priority && old.matcher == new.matcher
        );
        let mut ok = true;
        match self.groups.get_mut(&new.matcher.matcher.mask) {
            Some(g) => {
                ok &= g.primary.replace(new);
                for k in &mut g.secondary {
                    ok &= k.replace(new);
                }
            }
            None => ok = false,
        }
        if !ok {
            self.remove(old);
            self.insert(new);
        }
    }

    /// The entry with exactly this priority and match, if any.
    pub(crate) fn find_identical(
        &self,
        priority: Priority,
        m: &FlowMatch,
    ) -> Option<&Arc<FlowEntry>> {
        // An identical entry has the same mask, so it sits in that group's
        // primary bucket for the same value; the inline priority spares a
        // look at entries that merely share the value (say other port
        // ranges of an ACL's address pair).
        let g = self.groups.get(&m.matcher.mask)?;
        let k = &g.primary;
        k.buckets
            .get(k.hash(&m.matcher.value))
            .iter()
            .find(|s| {
                let e = &s.entry.matcher;
                // Every member of the group has exactly the mask `m` has,
                // and values are kept masked, so only the words the mask
                // covers can differ: comparing those (2 or 3 words for a
                // route) reads one or two of the entry's cache lines
                // instead of the whole 256-byte match.
                s.priority == priority
                    && s.ports == [m.src_port, m.dst_port]
                    && k.same_masked_value(&e.matcher.value, &m.matcher.value)
            })
            .map(|s| &s.entry)
    }

    /// Call `f` on every entry with priority in `lo..=hi` whose match
    /// overlaps `m`, in no particular order, until `f` returns false.
    /// Returns false if `f` stopped the walk.
    pub(crate) fn for_each_overlapping(
        &self,
        m: &FlowMatch,
        lo: Priority,
        hi: Priority,
        mut f: impl FnMut(&Arc<FlowEntry>) -> bool,
    ) -> bool {
        let qmask = &m.matcher.mask;
        // The priority and selective-word tests need no access to the entry
        // itself: overlapping requires agreeing on every bit both masks fix
        // (native port ranges only narrow), so a disagreement in the
        // selective word rules the entry out.
        let mut visit = |s: &Slot, sel_q: u64, sel_mask: u64| {
            if (lo..=hi).contains(&s.priority)
                && (s.sel ^ sel_q) & sel_mask == 0
                && overlaps(&s.entry.matcher, m)
            {
                f(&s.entry)
            } else {
                true
            }
        };
        for g in self.groups.values() {
            if !g.in_span(lo, hi) {
                continue;
            }
            let w = usize::from(g.primary.sel_word);
            let sel_q = m.matcher.value.words[w];
            let sel_mask = g.primary.mask.words[w] & qmask.words[w];
            match g.best_index(qmask) {
                Some(k) => {
                    let h = k.hash(&m.matcher.value);
                    for e in k.buckets.get(h) {
                        if !visit(e, sel_q, sel_mask) {
                            return false;
                        }
                    }
                }
                None => {
                    for e in g.all_entries() {
                        if !visit(e, sel_q, sel_mask) {
                            return false;
                        }
                    }
                }
            }
        }
        true
    }

    /// Ids of the entries with priority in `lo..=hi` overlapping `m`, sorted
    /// (the unbounded query; tests compare it with the naive scan).
    #[cfg(test)]
    pub(crate) fn overlapping(&self, m: &FlowMatch, lo: Priority, hi: Priority) -> Vec<RuleId> {
        let mut out = Vec::new();
        self.for_each_overlapping(m, lo, hi, |e| {
            out.push(e.id);
            true
        });
        out.sort_unstable();
        out
    }

    /// The entries an ADD of `m` at `priority` may take keys from, sorted,
    /// or `None` once more than `limit` overlap it (an ADD that overlaps
    /// thousands of entries, as rules on disjoint fields all do, must not
    /// cost a walk and a list proportional to the table); and whether one
    /// of them *covers* `m` (matches every key `m` matches).
    ///
    /// An overlapping entry of priority at most `priority` is left out when
    /// an entry covering `m` has a strictly higher priority than it: every
    /// key `m` matches also matches the coverer, which beats it, so it was
    /// never such a key's match and no such key's decision went through it.
    /// Ties are kept (which of two equal priorities wins is the
    /// classifier's choice). In a FIB this keeps the nearest enclosing
    /// route and drops every shorter one (the default route included), so
    /// their cached decisions are not re-checked against the new route.
    pub(crate) fn shadowed_at_most(
        &self,
        m: &FlowMatch,
        priority: Priority,
        limit: usize,
    ) -> Option<(Vec<RuleId>, bool)> {
        let mut found: Vec<(RuleId, Priority, bool)> = Vec::new();
        let complete = self.for_each_overlapping(m, 0, priority, |e| {
            found.push((e.id, e.priority, m.is_subset_of(&e.matcher)));
            found.len() <= limit
        });
        if !complete {
            return None;
        }
        let cover = found.iter().filter(|f| f.2).map(|f| f.1).max();
        if let Some(cover) = cover {
            found.retain(|f| f.1 >= cover);
        }
        let mut ids: Vec<RuleId> = found.into_iter().map(|f| f.0).collect();
        ids.sort_unstable();
        Some((ids, cover.is_some()))
    }

    /// Is there an entry with priority in `lo..=hi` overlapping `m`?
    pub(crate) fn any_overlapping(&self, m: &FlowMatch, lo: Priority, hi: Priority) -> bool {
        !self.for_each_overlapping(m, lo, hi, |_| false)
    }

    /// Make later queries shaped like `(m, 0..=priority)` cheap: give every
    /// large group that such a query would scan (its mask not fixed by `m`,
    /// its lowest priority within reach) a secondary key mask
    /// `group mask ∩ m.mask`, unless it already has a selective one usable
    /// for `m`. Called after an ADD inserted `m`: tables are filled with
    /// many rules of few shapes, so the next ADDs look like this one. Costs
    /// one pass over each group it extends, once per shape.
    pub(crate) fn prepare_for(&mut self, m: &FlowMatch, priority: Priority) {
        let qmask = m.matcher.mask;
        for g in self.groups.values_mut() {
            if g.len < self.secondary_min_group
                || g.secondary.len() >= SECONDARY_MAX
                || g.rejected.len() >= SECONDARY_MAX
                || mask_subset(&g.primary.mask, &qmask)
                || g.min_priority > priority
            {
                continue;
            }
            let mask = g.primary.mask.masked(&qmask);
            if g.secondary.iter().any(|k| k.mask == mask) || g.rejected.contains(&mask) {
                continue;
            }
            if let Some(k) = g.best_index(&qmask) {
                if g.len <= SECONDARY_MAX_AVG_BUCKET * k.buckets.len() {
                    continue;
                }
            }
            let mut k = KeyIndex::new(mask, g.primary.sel_word);
            for e in g.all_entries() {
                k.insert(&e.entry);
            }
            // A mask that barely splits the group (say it fixes only
            // eth_type, which every member shares) would cost updates and
            // save no scan work.
            if g.len > SECONDARY_MAX_AVG_BUCKET * k.buckets.len() {
                if g.rejected.len() < SECONDARY_MAX {
                    g.rejected.push(mask);
                }
                continue;
            }
            g.secondary.push(k);
        }
    }

    /// Number of secondary key masks (diagnostics and tests).
    #[cfg(test)]
    fn secondary_count(&self) -> usize {
        self.groups.values().map(|g| g.secondary.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    //! The indexed answers against the naive scans they replace.
    use super::*;
    use crate::entry::{FlowCounters, FlowModFlags};
    use crate::Program;
    use offlow_classifier::PortRange;
    use offlow_flow::{Field, Match};
    use proptest::prelude::*;

    type Entries = HashMap<RuleId, Arc<FlowEntry>>;

    // ------------------------------------------------------------ oracle

    fn naive_identical(entries: &Entries, p: Priority, m: &FlowMatch) -> Option<RuleId> {
        entries
            .values()
            .find(|e| e.priority == p && e.matcher == *m)
            .map(|e| e.id)
    }

    fn naive_overlapping(
        entries: &Entries,
        m: &FlowMatch,
        lo: Priority,
        hi: Priority,
    ) -> Vec<RuleId> {
        let mut v: Vec<RuleId> = entries
            .values()
            .filter(|e| (lo..=hi).contains(&e.priority) && e.matcher.overlaps(m))
            .map(|e| e.id)
            .collect();
        v.sort_unstable();
        v
    }

    /// The entries an ADD of `m` at `hi` may take keys from, by the
    /// definition of `shadowed_at_most`, and whether one covers `m`.
    fn naive_shadowed(entries: &Entries, m: &FlowMatch, hi: Priority) -> (Vec<RuleId>, bool) {
        let over: Vec<&Arc<FlowEntry>> = entries
            .values()
            .filter(|e| e.priority <= hi && e.matcher.overlaps(m))
            .collect();
        let cover = over
            .iter()
            .filter(|e| m.is_subset_of(&e.matcher))
            .map(|e| e.priority)
            .max();
        let mut v: Vec<RuleId> = over
            .iter()
            .filter(|e| cover.is_none_or(|c| e.priority >= c))
            .map(|e| e.id)
            .collect();
        v.sort_unstable();
        (v, cover.is_some())
    }

    // ------------------------------------------------------------ inputs

    fn entry(id: RuleId, priority: Priority, matcher: FlowMatch) -> Arc<FlowEntry> {
        Arc::new(FlowEntry {
            id,
            table_id: 0,
            priority,
            matcher,
            cookie: 0,
            flags: FlowModFlags::default(),
            idle_timeout: 0,
            hard_timeout: 0,
            installed_at_ns: 0,
            instructions: Vec::new(),
            program: Program::default(),
            counters: Arc::new(FlowCounters::default()),
        })
    }

    /// Few values per field so that overlaps, identical matches and shared
    /// masks are common; prefixes nest; ports are masked or ranged.
    fn arb_match() -> impl Strategy<Value = FlowMatch> {
        (
            prop::option::of(0u128..3),
            prop::option::of((0u128..4, 0u32..=4)),
            prop::option::of((0u128..4, 0u32..=4)),
            prop::option::of(prop_oneof![Just(6u128), Just(17u128)]),
            prop::option::of((0u128..4, prop_oneof![Just(0x3u128), Just(0xffffu128)])),
            prop::option::of((0u16..6, 0u16..6)),
            prop::option::of((0u16..6, 0u16..6)),
        )
            .prop_map(|(inp, src, dst, proto, tpd, sr, dr)| {
                let mut m = Match::ANY;
                if let Some(v) = inp {
                    m.set_exact(Field::InPort, v);
                }
                if src.is_some() || dst.is_some() || proto.is_some() || tpd.is_some() {
                    m.set_exact(Field::EthType, 0x0800);
                }
                // Prefix lengths up to 4 over 2-bit-ish values at the top.
                if let Some((v, len)) = src {
                    m.set_prefix(Field::Ipv4Src, v << 30, len);
                }
                if let Some((v, len)) = dst {
                    m.set_prefix(Field::Ipv4Dst, v << 30, len);
                }
                if let Some(p) = proto {
                    m.set_exact(Field::IpProto, p);
                }
                if let Some((v, mask)) = tpd {
                    m.set_masked(Field::TcpDst, v, mask);
                }
                let range = |r: Option<(u16, u16)>| match r {
                    Some((a, b)) => PortRange {
                        lo: a.min(b),
                        hi: a.max(b),
                    },
                    None => PortRange::ANY,
                };
                FlowMatch::with_ports(m, range(sr), range(dr))
            })
    }

    #[derive(Debug, Clone)]
    enum Op {
        Add(Priority, FlowMatch),
        /// Remove the n-th live entry (modulo).
        Remove(usize),
        Query(Priority, Priority, FlowMatch),
    }

    fn arb_op() -> impl Strategy<Value = Op> {
        prop_oneof![
            5 => (0u32..6, arb_match()).prop_map(|(p, m)| Op::Add(p, m)),
            2 => any::<usize>().prop_map(Op::Remove),
            3 => (0u32..6, 0u32..6, arb_match()).prop_map(|(a, b, m)| Op::Query(a.min(b), a.max(b), m)),
        ]
    }

    fn check(ix: &MatchIndex, entries: &Entries, lo: Priority, hi: Priority, m: &FlowMatch) {
        assert_eq!(
            ix.overlapping(m, lo, hi),
            naive_overlapping(entries, m, lo, hi),
            "overlapping {lo}..={hi} {m:?}"
        );
        assert_eq!(
            ix.any_overlapping(m, lo, hi),
            !naive_overlapping(entries, m, lo, hi).is_empty()
        );
        assert_eq!(
            ix.find_identical(hi, m).map(|e| e.id),
            naive_identical(entries, hi, m)
        );
        assert_eq!(
            ix.shadowed_at_most(m, hi, usize::MAX),
            Some(naive_shadowed(entries, m, hi)),
            "shadowed at {hi} {m:?}"
        );
        // The limit counts every overlapping entry, pruned or not.
        let overlapping = naive_overlapping(entries, m, 0, hi).len();
        if let Some(below) = overlapping.checked_sub(1) {
            assert_eq!(ix.shadowed_at_most(m, hi, below), None);
            assert!(ix.shadowed_at_most(m, hi, overlapping).is_some());
        }
    }

    /// Runs `ops` against the index and the naive scans.
    fn run(ops: Vec<Op>, secondary_min: bool) -> usize {
        let mut ix = MatchIndex {
            // Tiny groups get secondary key masks too, so they are tested.
            secondary_min_group: 2,
            ..MatchIndex::default()
        };
        let mut entries = Entries::new();
        let mut next = 1;
        for op in ops {
            match op {
                Op::Add(p, m) => {
                    check(&ix, &entries, 0, p, &m);
                    if let Some(old) = naive_identical(&entries, p, &m) {
                        // Replacement keeps id, match and priority.
                        let e = entry(old, p, m);
                        let prev = entries.insert(old, Arc::clone(&e));
                        ix.remove(prev.as_ref().expect("present"));
                        ix.insert(&e);
                    } else {
                        let e = entry(next, p, m);
                        next += 1;
                        entries.insert(e.id, Arc::clone(&e));
                        ix.insert(&e);
                    }
                    if secondary_min {
                        ix.prepare_for(&m, p);
                    }
                }
                Op::Remove(n) => {
                    if entries.is_empty() {
                        continue;
                    }
                    let mut ids: Vec<RuleId> = entries.keys().copied().collect();
                    ids.sort_unstable();
                    let id = ids[n % ids.len()];
                    let e = entries.remove(&id).expect("listed");
                    ix.remove(&e);
                }
                Op::Query(lo, hi, m) => check(&ix, &entries, lo, hi, &m),
            }
        }
        // Every live entry is findable; the index forgets removed ones.
        for e in entries.values() {
            assert_eq!(
                ix.find_identical(e.priority, &e.matcher).map(|x| x.id),
                Some(e.id)
            );
        }
        if entries.is_empty() {
            assert!(ix.groups.is_empty());
        }
        ix.secondary_count()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(if cfg!(debug_assertions) { 96 } else { 512 }))]

        #[test]
        fn index_agrees_with_scans(ops in prop::collection::vec(arb_op(), 0..120)) {
            run(ops, true);
        }

        /// Enough adds that secondary key masks are built (and used).
        #[test]
        fn index_with_secondary_masks_agrees(
            ops in prop::collection::vec(prop_oneof![
                6 => (0u32..6, arb_match()).prop_map(|(p, m)| Op::Add(p, m)),
                1 => any::<usize>().prop_map(Op::Remove),
                3 => (0u32..6, 0u32..6, arb_match()).prop_map(|(a, b, m)| Op::Query(a.min(b), a.max(b), m)),
            ], 100..200)
        ) {
            // Nearly every case builds dozens of secondary key masks.
            run(ops, true);
        }

        #[test]
        fn index_without_secondary_masks_agrees(ops in prop::collection::vec(arb_op(), 0..60)) {
            run(ops, false);
        }
    }

    /// Big groups get secondary key masks, and queries through them stay
    /// exact (the property test's groups are mostly below the threshold).
    #[test]
    fn secondary_masks_are_built_and_exact() {
        let mut ix = MatchIndex::default();
        let mut entries = Entries::new();
        let mut id = 1;
        // 256 /32 -> /32 rules at priority 10..: one big group.
        for s in 0..128u128 {
            for d in 0..2u128 {
                let mut m = Match::ANY;
                m.set_exact(Field::EthType, 0x0800)
                    .set_exact(Field::Ipv4Src, s << 24 | 1)
                    .set_exact(Field::Ipv4Dst, d << 24 | 1);
                let e = entry(id, 10 + (id % 3), FlowMatch::new(m));
                id += 1;
                entries.insert(e.id, Arc::clone(&e));
                ix.insert(&e);
            }
        }
        // A /8 src, any dst rule at priority 20 sees 16 of them.
        let mut q = Match::ANY;
        q.set_exact(Field::EthType, 0x0800)
            .set_prefix(Field::Ipv4Src, 3 << 24, 8);
        let q = FlowMatch::new(q);
        let before = ix.overlapping(&q, 0, 20);
        assert_eq!(before.len(), 2);
        assert_eq!(ix.secondary_count(), 0);
        ix.prepare_for(&q, 20);
        assert_eq!(ix.secondary_count(), 1);
        assert_eq!(ix.overlapping(&q, 0, 20), before);
        assert_eq!(before, naive_overlapping(&entries, &q, 0, 20));
        // A second shape answered by the same secondary mask is not rebuilt.
        ix.prepare_for(&q, 20);
        assert_eq!(ix.secondary_count(), 1);
        // Removals keep it exact.
        let gone = before[0];
        let e = entries.remove(&gone).expect("listed");
        ix.remove(&e);
        assert_eq!(
            ix.overlapping(&q, 0, 20),
            naive_overlapping(&entries, &q, 0, 20)
        );
        assert_eq!(ix.overlapping(&q, 0, 20).len(), 1);
        // A mask that does not split the group (eth_type only) is rejected.
        let mut any_ip = Match::ANY;
        any_ip.set_exact(Field::EthType, 0x0800);
        ix.prepare_for(&FlowMatch::new(any_ip), 20);
        assert_eq!(ix.secondary_count(), 1);
    }
}
