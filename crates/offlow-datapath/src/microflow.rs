//! The microflow cache: an exact-match table from a packet's full
//! [`FlowKey`] (which already holds `in_port`) to a small `Copy` value (in the
//! datapath, a reference into the Action Table).
//!
//! # Layout
//! A set-associative table of [`WAYS`]-way buckets. Each bucket is one
//! 64-byte line holding the ways' 32-bit hash signatures, their small hit
//! credits, which of them hold extended keys (below) and a clock hand;
//! entries live in arrays indexed by `bucket * WAYS + way`. A lookup reads
//! the signature line, then only the entries whose signature matches —
//! normally exactly one.
//! [`MicroflowCache::lookup_batch`] prefetches every bucket line of the batch
//! first, then every candidate entry, then compares, so a batch pays roughly
//! one memory latency instead of one per packet.
//!
//! # The common-case key line
//! A [`FlowKey`] is 16 words (two cache lines), but an Ethernet/IPv4/L4
//! packet uses only six of them ([`CORE_WORDS`]: in_port, the Ethernet
//! addresses, type and VLAN, the IPv4 addresses, ports and protocol, the
//! presence bits); the other ten ([`REST_WORDS`]: metadata, tunnel, IPv6, ND,
//! MPLS/PBB) are zero for it. Each entry therefore has one hot line holding
//! its key's core words and its value, and its bucket line says whether the
//! key is "extended" (some rest word non-zero). A lookup compares the core
//! words and the extended bit; only an extended key also compares the full
//! key, which is kept in a second array. So the common packet reads its
//! bucket line and one entry line, and hashes six words ([`flow_hash`]), not
//! sixteen — exactly, since two non-extended keys with equal core words are
//! equal in every word.
//!
//! The 64-bit hash is computed once per packet ([`flow_hash`]) and reused:
//! its low bits pick the bucket, its high 32 bits are the signature.
//!
//! # Insertion policy
//! A cache with far more flows than entries thrashes if every miss inserts:
//! each mouse flow evicts an elephant, which then misses in turn (Open
//! vSwitch's EMC loses up to 30% past 8K flows and copes by inserting with
//! probability 1/100). [`InsertPolicy`] offers that behaviour and the naive
//! one for comparison, and a default [`InsertPolicy::SecondChance`]: a free
//! way is always taken; a full bucket is swept from its clock hand, taking
//! one credit from every way passed, and the first way with no credit left is
//! replaced. A hit gives its way a credit (saturating at `max_credit`). When a
//! whole sweep finds no way without credit, the insert is skipped: a newcomer
//! never displaces an entry that was hit more recently than the bucket's
//! entries were last swept, so heavy hitters stay while cold entries rotate.
//!
//! # Invariants
//! - A way is occupied iff its signature is non-zero ([`flow_hash`]
//!   signatures are forced non-zero); an occupied way's value is `Some`.
//! - A lookup returns a value only after establishing that every word of
//!   the stored key equals the query's (core words and extended bit; for an
//!   extended key, all sixteen words), so a hit returns the value last
//!   inserted for exactly that key, whatever hashes the caller passes (a
//!   wrong hash can only cause a miss, or a duplicate entry in another
//!   bucket that is never returned for another key).
//! - No allocation after [`MicroflowCache::new`]; no panics on key contents.
//!
//! # Thread-safety
//! One cache belongs to one worker. Lookups take `&self` but update hit
//! credits and counters through [`Cell`]s, so the cache is `Send` but not
//! `Sync`: move it to its worker, never share it.

use core::cell::Cell;
use offlow_flow::{FlowKey, KEY_WORDS};
use offlow_sync::{prefetch, HugeSlice};

/// Ways per bucket: 8 signatures of 4 bytes plus 8 credits fill one line.
pub const WAYS: usize = 8;

/// Largest batch handled in one prefetch pass by [`MicroflowCache::lookup_batch`];
/// longer inputs are processed in chunks of this size.
pub const MAX_BATCH: usize = 64;

/// How a miss is turned into an insertion. Updating the value of a key that
/// is already cached always happens, whatever the policy (otherwise a later
/// hit could return a stale value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InsertPolicy {
    /// Always insert; a full bucket evicts the way at its clock hand
    /// (round robin), ignoring hits. The naive baseline.
    Always,
    /// Insert with probability `1 / one_in` (as OVS's EMC with its default
    /// `emc-insert-inv-prob=100`), evicting as [`InsertPolicy::Always`].
    /// `one_in` of 0 or 1 means always.
    Probabilistic {
        /// Inverse insertion probability.
        one_in: u32,
    },
    /// Free way: insert. Full bucket: CLOCK sweep taking one credit per way
    /// passed; evict the first way without credit, or skip the insert when
    /// every way still had credit. Hits add one credit, up to `max_credit`
    /// (at least 1 is used).
    SecondChance {
        /// Saturation of the per-way hit credit.
        max_credit: u8,
    },
}

impl Default for InsertPolicy {
    fn default() -> Self {
        InsertPolicy::SecondChance { max_credit: 3 }
    }
}

/// What [`MicroflowCache::insert`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InsertOutcome {
    /// The key was already cached; its value was replaced.
    Updated,
    /// The key went into a free way.
    Inserted,
    /// The key replaced another entry.
    Evicted,
    /// The policy declined to insert (nothing changed).
    Skipped,
}

/// Counters of one cache (design invariant 5: every decision is counted).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MicroflowStats {
    /// Lookups that found their key.
    pub hits: u64,
    /// Lookups that did not.
    pub misses: u64,
    /// Keys added (into a free way or over a victim).
    pub inserts: u64,
    /// Of `inserts`, those that replaced another entry.
    pub evictions: u64,
    /// Inserts of an already cached key (value replaced).
    pub updates: u64,
    /// Inserts the policy declined.
    pub insert_skipped: u64,
    /// Entries removed by `remove`, `invalidate` or `clear`.
    pub removed: u64,
}

/// One bucket's metadata: exactly one cache line.
#[repr(C, align(64))]
struct Bucket {
    /// Signature per way; 0 = free.
    sigs: [u32; WAYS],
    /// Hit credit per way (written by lookups, hence `Cell`).
    credit: [Cell<u8>; WAYS],
    /// Bit `w` set when way `w` holds an extended key (a [`REST_WORDS`]
    /// word non-zero); meaningful only for occupied ways.
    extended: u8,
    /// Next way the eviction sweep looks at.
    hand: u8,
}

impl Bucket {
    fn empty() -> Bucket {
        Bucket {
            sigs: [0; WAYS],
            credit: Default::default(),
            extended: 0,
            hand: 0,
        }
    }

    /// Bit `w` set when way `w`'s signature equals `sig`.
    #[inline(always)]
    fn match_mask(&self, sig: u32) -> u32 {
        let mut m = 0u32;
        for (w, &s) in self.sigs.iter().enumerate() {
            m |= ((s == sig) as u32) << w;
        }
        m
    }
}

/// The signature stored for `hash`: its high half, never 0 (0 marks a free way).
#[inline(always)]
fn signature(hash: u64) -> u32 {
    let s = (hash >> 32) as u32;
    if s == 0 {
        1
    } else {
        s
    }
}

/// 64x64 -> 128 multiply folded to 64 bits: the mixing step of wyhash-style
/// hashes; a few cycles and independent per word pair, so it pipelines.
#[inline(always)]
fn fold_mul(a: u64, b: u64) -> u64 {
    let p = (a as u128).wrapping_mul(b as u128);
    (p as u64) ^ ((p >> 64) as u64)
}

/// Per-word secrets (arbitrary odd constants) so equal words in different
/// positions contribute differently.
const SECRETS: [u64; KEY_WORDS] = [
    0xa076_1d64_78bd_642f,
    0xe703_7ed1_a0b4_28db,
    0x8ebc_6af0_9c88_c6e3,
    0x5899_65cc_7537_4cc3,
    0x1d8e_4e27_c47d_124f,
    0x9e37_79b9_7f4a_7c15,
    0xbf58_476d_1ce4_e5b9,
    0x94d0_49bb_1331_11eb,
    0xd6e8_feb8_6659_fd93,
    0xc2b2_ae3d_27d4_eb4f,
    0x1656_67b1_9e37_79f9,
    0x27d4_eb2f_1656_67c5,
    0x85eb_ca77_c2b2_ae63,
    0xff51_afd7_ed55_8ccd,
    0xc4ce_b9fe_1a85_ec53,
    0x2545_f491_4f6c_dd1d,
];

/// The words an Ethernet/IPv4/L4 key may use (see the module documentation);
/// word 14 is [`offlow_flow::present::WORD`].
pub const CORE_WORDS: [usize; 6] = [0, 3, 4, 5, 6, 14];

/// The words that are zero for such a key; with [`CORE_WORDS`], every word.
pub const REST_WORDS: [usize; 10] = [1, 2, 7, 8, 9, 10, 11, 12, 13, 15];

/// Whether `key` uses any of [`REST_WORDS`] (it is not a common-case key).
#[inline(always)]
fn is_extended(key: &FlowKey) -> bool {
    let mut any = 0u64;
    for &i in &REST_WORDS {
        any |= key.words[i];
    }
    any != 0
}

/// One entry's hot line: its key's [`CORE_WORDS`] and its value, so a
/// common-case hit reads this line and its bucket's line only (64 bytes for
/// any value of at most 15 bytes, such as the datapath's).
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Slot<V: Copy> {
    core: [u64; CORE_WORDS.len()],
    /// `Some` exactly where the bucket's signature is non-zero.
    value: Option<V>,
}

impl<V: Copy> Slot<V> {
    const EMPTY: Slot<V> = Slot {
        core: [0; CORE_WORDS.len()],
        value: None,
    };

    /// Whether the core words equal `key`'s, as XORs ORed together.
    #[inline(always)]
    fn core_eq(&self, key: &FlowKey) -> bool {
        let mut d = 0u64;
        for (c, &w) in self.core.iter().zip(&CORE_WORDS) {
            d |= c ^ key.words[w];
        }
        d == 0
    }
}

/// `key`'s [`CORE_WORDS`], in order.
#[inline(always)]
fn core_of(key: &FlowKey) -> [u64; CORE_WORDS.len()] {
    CORE_WORDS.map(|w| key.words[w])
}

/// Hash of a full flow key, for [`MicroflowCache`]. Low bits pick the bucket,
/// high 32 bits are the signature. Compute it once per packet and pass it to
/// the `*_hashed` methods and [`MicroflowCache::lookup_batch`]. A key whose
/// [`REST_WORDS`] are all zero costs three multiplies; any other key mixes
/// those words in as well.
#[inline]
pub fn flow_hash(key: &FlowKey) -> u64 {
    flow_hash_ext(key).0
}

/// [`flow_hash`] of `key`, and whether `key` is extended (uses a word of
/// [`REST_WORDS`]), which the hash tests anyway: pass the flags to
/// [`MicroflowCache::lookup_chunk_ext`] so the lookup does not test again.
#[inline]
pub fn flow_hash_ext(key: &FlowKey) -> (u64, bool) {
    let w = &key.words;
    let pair = |a: usize, b: usize| fold_mul(w[a] ^ SECRETS[a], w[b] ^ SECRETS[b]);
    let [c0, c1, c2, c3, c4, c5] = CORE_WORDS;
    let mut acc = pair(c0, c1)
        .wrapping_add(pair(c2, c3))
        .wrapping_add(pair(c4, c5));
    let extended = is_extended(key);
    if extended {
        for p in REST_WORDS.chunks_exact(2) {
            acc = acc.wrapping_add(pair(p[0], p[1]));
        }
    }
    (fold_mul(acc ^ SECRETS[0], SECRETS[5]), extended)
}

/// Full-key equality as 16 XORs ORed together: branch-free, and cheaper than
/// the derived `PartialEq` on `[u64; 16]`, which may call `memcmp`.
#[inline(always)]
fn key_eq(a: &FlowKey, b: &FlowKey) -> bool {
    let mut d = 0u64;
    for i in 0..KEY_WORDS {
        d |= a.words[i] ^ b.words[i];
    }
    d == 0
}

/// The exact-match microflow cache; see the module documentation.
pub struct MicroflowCache<V: Copy> {
    // Read by every lookup.
    /// Bucket metadata lines.
    buckets: Box<[Bucket]>,
    /// Core words and values, `bucket * WAYS + way`.
    slots: HugeSlice<Slot<V>>,
    /// Full keys, parallel to `slots`: read by lookups of extended keys
    /// only, and by `invalidate` and `iter`.
    keys: HugeSlice<FlowKey>,
    /// `buckets.len() - 1` (the bucket count is a power of two).
    bucket_mask: u64,
    hits: Cell<u64>,
    misses: Cell<u64>,
    // Written only by inserts and removals (`&mut self`).
    policy: InsertPolicy,
    len: usize,
    rng: u64,
    inserts: u64,
    evictions: u64,
    updates: u64,
    insert_skipped: u64,
    removed: u64,
}

impl<V: Copy> MicroflowCache<V> {
    /// A cache of at least `capacity` entries: the next power of two, and at
    /// least one bucket of [`WAYS`] entries. All memory is allocated here.
    pub fn new(capacity: usize, policy: InsertPolicy) -> Self {
        let entries = capacity.max(WAYS).next_power_of_two();
        let nb = entries / WAYS;
        MicroflowCache {
            buckets: (0..nb).map(|_| Bucket::empty()).collect(),
            // In huge pages: inserts land at random, and on 4 KiB pages
            // each paid a TLB miss (a nested page walk on a VM); see
            // `HugeSlice`.
            slots: HugeSlice::new(entries, Slot::EMPTY),
            keys: HugeSlice::new(entries, FlowKey::ZERO),
            bucket_mask: (nb - 1) as u64,
            hits: Cell::new(0),
            misses: Cell::new(0),
            policy,
            len: 0,
            rng: 0x9e37_79b9_7f4a_7c15,
            inserts: 0,
            evictions: 0,
            updates: 0,
            insert_skipped: 0,
            removed: 0,
        }
    }

    /// Number of entries the cache can hold.
    pub fn capacity(&self) -> usize {
        self.keys.len()
    }

    /// Number of entries it holds now.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no entry is cached.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The insertion policy.
    pub fn policy(&self) -> InsertPolicy {
        self.policy
    }

    /// Change the insertion policy (entries stay).
    pub fn set_policy(&mut self, policy: InsertPolicy) {
        self.policy = policy;
    }

    /// Same as [`flow_hash`].
    #[inline]
    pub fn hash(key: &FlowKey) -> u64 {
        flow_hash(key)
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> MicroflowStats {
        MicroflowStats {
            hits: self.hits.get(),
            misses: self.misses.get(),
            inserts: self.inserts,
            evictions: self.evictions,
            updates: self.updates,
            insert_skipped: self.insert_skipped,
            removed: self.removed,
        }
    }

    /// Zero the counters (entries stay).
    pub fn reset_stats(&mut self) {
        self.hits.set(0);
        self.misses.set(0);
        self.inserts = 0;
        self.evictions = 0;
        self.updates = 0;
        self.insert_skipped = 0;
        self.removed = 0;
    }

    #[inline(always)]
    fn bucket_index(&self, hash: u64) -> usize {
        // The mask keeps the index below `buckets.len()`.
        (hash & self.bucket_mask) as usize
    }

    /// Entry index of `key` in bucket `b` among the ways in `cand`, if any;
    /// `extended` is [`is_extended`]`(key)`.
    #[inline(always)]
    fn find_in(&self, b: usize, cand: u32, key: &FlowKey, extended: bool) -> Option<usize> {
        let ext_ways = u32::from(self.buckets[b].extended);
        let mut cand = cand & if extended { ext_ways } else { !ext_ways };
        while cand != 0 {
            let w = cand.trailing_zeros() as usize;
            cand &= cand - 1;
            let i = b * WAYS + w;
            if self.slots[i].core_eq(key) && (!extended || key_eq(&self.keys[i], key)) {
                return Some(i);
            }
        }
        None
    }

    /// Credit a hit on entry `i` (bucket `b`, way `i % WAYS`) and return
    /// its value. The caller counts the hit.
    #[inline(always)]
    fn touch(&self, b: usize, i: usize) -> Option<V> {
        let c = &self.buckets[b].credit[i % WAYS];
        // Only store when the credit changes, keeping the common steady-state
        // hit read-only.
        let cur = c.get();
        if cur < self.max_credit() {
            c.set(cur + 1);
        }
        self.slots[i].value
    }

    #[inline(always)]
    fn max_credit(&self) -> u8 {
        match self.policy {
            InsertPolicy::SecondChance { max_credit } => max_credit.max(1),
            // Credits are ignored by the other policies; 1 still tells
            // `remove` nothing and costs at most one store per entry.
            _ => 1,
        }
    }

    /// Look `key` up; computes its hash.
    #[inline]
    pub fn lookup(&self, key: &FlowKey) -> Option<V> {
        self.lookup_hashed(key, flow_hash(key))
    }

    /// Look `key` up with its precomputed `hash` (from [`flow_hash`]).
    #[inline]
    pub fn lookup_hashed(&self, key: &FlowKey, hash: u64) -> Option<V> {
        let b = self.bucket_index(hash);
        let cand = self.buckets[b].match_mask(signature(hash));
        match self.find_in(b, cand, key, is_extended(key)) {
            Some(i) => {
                self.hits.set(self.hits.get() + 1);
                self.touch(b, i)
            }
            None => {
                self.misses.set(self.misses.get() + 1);
                None
            }
        }
    }

    /// Look up a batch: `out[i]` receives the value of `keys[i]`, whose hash
    /// is `hashes[i]`. Bucket lines of the whole batch are prefetched first,
    /// then the candidate entries, then keys are compared. Processes
    /// `min(keys.len(), hashes.len(), out.len())` entries (callers pass equal
    /// lengths; a mismatch is a bug caught by a debug assertion).
    pub fn lookup_batch(&self, keys: &[FlowKey], hashes: &[u64], out: &mut [Option<V>]) {
        debug_assert!(keys.len() == hashes.len() && keys.len() == out.len());
        let n = keys.len().min(hashes.len()).min(out.len());
        let mut start = 0;
        while start < n {
            let end = (start + MAX_BATCH).min(n);
            let keys = &keys[start..end];
            let mut extended = 0u64;
            for (j, key) in keys.iter().enumerate() {
                extended |= u64::from(is_extended(key)) << j;
            }
            self.lookup_chunk_ext(keys, &hashes[start..end], extended, &mut out[start..end]);
            start = end;
        }
    }

    /// [`lookup_batch`](Self::lookup_batch) of at most [`MAX_BATCH`] keys
    /// (equal lengths; more are ignored) whose [`flow_hash_ext`] flags the
    /// caller already has: bit `j` of `extended` is key `j`'s. The flags must
    /// be right (checked in debug builds): a key wrongly flagged common is
    /// compared on its core words only.
    #[inline(always)]
    pub fn lookup_chunk_ext(
        &self,
        keys: &[FlowKey],
        hashes: &[u64],
        extended: u64,
        out: &mut [Option<V>],
    ) {
        let n = keys.len().min(hashes.len()).min(out.len()).min(MAX_BATCH);
        let (keys, hashes, out) = (&keys[..n], &hashes[..n], &mut out[..n]);
        let mut cand = [0u32; MAX_BATCH];
        // Stage 1: pull every bucket line in flight at once.
        for &h in hashes {
            prefetch(&self.buckets[self.bucket_index(h)]);
        }
        // Stage 2: signature compare, and prefetch the first candidate's
        // slot (and, for an extended key, its full key) so stage 3's compare
        // rarely waits.
        for (j, ((c, &h), key)) in cand.iter_mut().zip(hashes).zip(keys).enumerate() {
            let b = self.bucket_index(h);
            *c = self.buckets[b].match_mask(signature(h));
            let ext = extended >> j & 1 != 0;
            debug_assert_eq!(ext, is_extended(key), "wrong extended flag");
            if *c != 0 {
                let i = b * WAYS + c.trailing_zeros() as usize;
                prefetch(&self.slots[i]);
                if ext {
                    let k: *const FlowKey = &self.keys[i];
                    prefetch(k);
                    prefetch(k.cast::<u8>().wrapping_add(64));
                }
            }
        }
        // Stage 3: compare.
        let mut hits = 0u64;
        for (j, ((key, &h), o)) in keys.iter().zip(hashes).zip(out.iter_mut()).enumerate() {
            let b = self.bucket_index(h);
            let ext = extended >> j & 1 != 0;
            *o = match self.find_in(b, cand[j], key, ext) {
                Some(i) => {
                    hits += 1;
                    self.touch(b, i)
                }
                None => None,
            };
        }
        self.hits.set(self.hits.get() + hits);
        // `hits <= keys.len()`, so this cannot underflow.
        self.misses
            .set(self.misses.get() + (keys.len() as u64 - hits));
    }

    /// Insert or update `key -> value`; computes its hash.
    pub fn insert(&mut self, key: &FlowKey, value: V) -> InsertOutcome {
        self.insert_hashed(key, flow_hash(key), value)
    }

    /// Insert or update `key -> value` with its precomputed `hash`. An
    /// existing entry is always updated; otherwise the policy decides.
    pub fn insert_hashed(&mut self, key: &FlowKey, hash: u64, value: V) -> InsertOutcome {
        let b = self.bucket_index(hash);
        let sig = signature(hash);
        let cand = self.buckets[b].match_mask(sig);
        let extended = is_extended(key);
        if let Some(i) = self.find_in(b, cand, key, extended) {
            self.slots[i].value = Some(value);
            self.updates += 1;
            return InsertOutcome::Updated;
        }
        if let InsertPolicy::Probabilistic { one_in } = self.policy {
            if one_in > 1 && self.next_random() % u64::from(one_in) != 0 {
                self.insert_skipped += 1;
                return InsertOutcome::Skipped;
            }
        }
        let free = self.buckets[b].match_mask(0);
        let (way, outcome) = if free != 0 {
            (free.trailing_zeros() as usize, InsertOutcome::Inserted)
        } else {
            match self.pick_victim(b) {
                Some(w) => (w, InsertOutcome::Evicted),
                None => {
                    self.insert_skipped += 1;
                    return InsertOutcome::Skipped;
                }
            }
        };
        let bucket = &mut self.buckets[b];
        bucket.sigs[way] = sig;
        bucket.credit[way].set(0);
        bucket.extended = (bucket.extended & !(1 << way)) | (u8::from(extended) << way);
        let i = b * WAYS + way;
        self.slots[i] = Slot {
            core: core_of(key),
            value: Some(value),
        };
        self.keys[i] = *key;
        self.inserts += 1;
        if outcome == InsertOutcome::Evicted {
            self.evictions += 1;
        } else {
            self.len += 1;
        }
        outcome
    }

    /// The way of full bucket `b` to replace, or `None` to skip the insert.
    fn pick_victim(&mut self, b: usize) -> Option<usize> {
        let second_chance = matches!(self.policy, InsertPolicy::SecondChance { .. });
        let bucket = &mut self.buckets[b];
        let start = bucket.hand as usize % WAYS;
        if !second_chance {
            bucket.hand = ((start + 1) % WAYS) as u8;
            return Some(start);
        }
        for step in 0..WAYS {
            let w = (start + step) % WAYS;
            let c = bucket.credit[w].get();
            if c == 0 {
                bucket.hand = ((w + 1) % WAYS) as u8;
                return Some(w);
            }
            bucket.credit[w].set(c - 1);
        }
        // Every way had credit: each lost one, the newcomer waits.
        None
    }

    /// xorshift64: cheap, and good enough for a coin flip.
    fn next_random(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }

    /// Replace the value of `key` (hash `hash`) if it is cached; returns
    /// whether it was. Never inserts, evicts or touches hit credits or
    /// counters: for refreshing bookkeeping held in a value (the worker's
    /// filter check mark), not a new decision.
    pub fn update_hashed(&mut self, key: &FlowKey, hash: u64, value: V) -> bool {
        let b = self.bucket_index(hash);
        let cand = self.buckets[b].match_mask(signature(hash));
        match self.find_in(b, cand, key, is_extended(key)) {
            Some(i) => {
                self.slots[i].value = Some(value);
                true
            }
            None => false,
        }
    }

    /// Remove `key`; returns its value if it was cached.
    pub fn remove(&mut self, key: &FlowKey) -> Option<V> {
        self.remove_hashed(key, flow_hash(key))
    }

    /// Remove `key` given its precomputed `hash`.
    pub fn remove_hashed(&mut self, key: &FlowKey, hash: u64) -> Option<V> {
        let b = self.bucket_index(hash);
        let cand = self.buckets[b].match_mask(signature(hash));
        let i = self.find_in(b, cand, key, is_extended(key))?;
        let v = self.slots[i].value;
        self.free_entry(i);
        v
    }

    fn free_entry(&mut self, i: usize) {
        let (b, w) = (i / WAYS, i % WAYS);
        self.buckets[b].sigs[w] = 0;
        self.buckets[b].credit[w].set(0);
        self.slots[i].value = None;
        self.len -= 1;
        self.removed += 1;
    }

    /// Remove every entry for which `pred(key, value)` is true; returns how
    /// many were removed. Walks the whole table (O(capacity)).
    pub fn invalidate(&mut self, mut pred: impl FnMut(&FlowKey, &V) -> bool) -> usize {
        let mut n = 0;
        for i in 0..self.keys.len() {
            if let Some(v) = self.slots[i].value {
                if pred(&self.keys[i], &v) {
                    self.free_entry(i);
                    n += 1;
                }
            }
        }
        n
    }

    /// Remove every entry.
    pub fn clear(&mut self) {
        for b in self.buckets.iter_mut() {
            *b = Bucket::empty();
        }
        for slot in self.slots.iter_mut() {
            slot.value = None;
        }
        self.removed += self.len as u64;
        self.len = 0;
    }

    /// Every cached `(key, value)`, in table order.
    pub fn iter(&self) -> impl Iterator<Item = (&FlowKey, V)> + '_ {
        self.keys
            .iter()
            .zip(self.slots.iter())
            .filter_map(|(k, s)| s.value.map(|v| (k, v)))
    }
}

impl<V: Copy> core::fmt::Debug for MicroflowCache<V> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("MicroflowCache")
            .field("capacity", &self.capacity())
            .field("len", &self.len)
            .field("policy", &self.policy)
            .field("stats", &self.stats())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_is_one_line() {
        assert_eq!(core::mem::size_of::<Bucket>(), 64);
        assert_eq!(core::mem::align_of::<Bucket>(), 64);
    }

    #[test]
    fn slot_is_one_line_and_words_partition_the_key() {
        // The datapath's value fits the slot's line.
        assert_eq!(core::mem::size_of::<Option<(u32, u32, u32)>>(), 16);
        assert_eq!(core::mem::size_of::<Slot<(u32, u32, u32)>>(), 64);
        let mut all: Vec<usize> = CORE_WORDS.iter().chain(&REST_WORDS).copied().collect();
        all.sort_unstable();
        assert_eq!(all, (0..KEY_WORDS).collect::<Vec<_>>());
        assert_eq!(CORE_WORDS[5], offlow_flow::present::WORD);
    }

    #[test]
    fn keys_differing_only_in_a_rest_word_are_told_apart() {
        let mut base = FlowKey::ZERO;
        base.words[0] = 3;
        base.words[5] = 0x0a00_0001;
        // Every key forced into the same bucket with the same signature.
        let h = flow_hash(&base);
        for &w in &REST_WORDS {
            let mut c = MicroflowCache::<u64>::new(64, InsertPolicy::Always);
            let mut extended = base;
            extended.words[w] = 1;
            c.insert_hashed(&base, h, 1);
            assert_eq!(c.lookup_hashed(&extended, h), None, "word {w}");
            c.insert_hashed(&extended, h, 2);
            assert_eq!(c.lookup_hashed(&base, h), Some(1), "word {w}");
            assert_eq!(c.lookup_hashed(&extended, h), Some(2), "word {w}");
            // The other way round: the extended key cached first.
            let mut c = MicroflowCache::<u64>::new(64, InsertPolicy::Always);
            c.insert_hashed(&extended, h, 2);
            assert_eq!(c.lookup_hashed(&base, h), None, "word {w}");
            let mut other = extended;
            other.words[w] = 2;
            assert_eq!(c.lookup_hashed(&other, h), None, "word {w}");
        }
    }

    #[test]
    fn signature_never_zero() {
        assert_eq!(signature(0x0000_0000_1234_5678), 1);
        assert_eq!(signature(0xabcd_0000_0000_0000), 0xabcd_0000);
    }

    #[test]
    fn capacity_rounds_up() {
        assert_eq!(
            MicroflowCache::<u32>::new(0, InsertPolicy::Always).capacity(),
            8
        );
        assert_eq!(
            MicroflowCache::<u32>::new(9, InsertPolicy::Always).capacity(),
            16
        );
        assert_eq!(
            MicroflowCache::<u32>::new(8192, InsertPolicy::Always).capacity(),
            8192
        );
    }

    #[test]
    fn update_replaces_only_present_keys_without_counting() {
        let mut c = MicroflowCache::<u32>::new(64, InsertPolicy::Always);
        let mut k = FlowKey::ZERO;
        k.words[0] = 7;
        let h = flow_hash(&k);
        assert!(
            !c.update_hashed(&k, h, 1),
            "absent key must not be inserted"
        );
        assert_eq!(c.lookup(&k), None);
        c.insert_hashed(&k, h, 2);
        let before = c.stats();
        assert!(c.update_hashed(&k, h, 3));
        let after = c.stats();
        assert_eq!(
            (after.updates, after.inserts),
            (before.updates, before.inserts)
        );
        assert_eq!(c.lookup(&k), Some(3));
        assert_eq!(c.len(), 1);
    }
}
