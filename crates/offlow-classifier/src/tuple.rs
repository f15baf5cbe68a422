//! TupleMerge: a hash-based classifier with fast incremental updates.
//!
//! What: after Daly, Bruschi, Jepsen, Torng, "TupleMerge: Fast Software
//! Packet Processing for Online Packet Classification" (IEEE/ACM ToN 2019).
//! Rules are grouped into *tuples*. A tuple owns a hash mask that is a subset
//! of the (effective) mask of every rule it holds, and an open-addressing
//! table from "key & tuple mask" to a *bucket*: the rules whose masked values
//! are equal under that mask. A bucket is a short list of rules, each tested
//! by a compact check of what the hash lookup has not already verified (the
//! rule's mask bits outside the tuple mask, and its native port ranges; see
//! `Check`). That is what gives native port ranges and arbitrary bit masks
//! for free: the tuple mask only has to be implied by the rule.
//!
//! Choosing the tuple of a rule (the "merge" of TupleMerge): the rule's
//! effective mask (its matcher mask plus the common high bits of its port
//! ranges) is relaxed to a coarse shape: IPv4 prefixes rounded down to a
//! multiple of 8 bits, IPv6 prefixes to a multiple of 32, ports kept only
//! when single-valued, the IP protocol kept only when exact. Many rules share
//! a coarse shape, so there are few tuples. When the rule's bucket in that
//! tuple already holds `collision_limit` ([`TupleConfig`]) rules, the rule goes one level
//! finer (granularity 4, then the exact effective mask) so a bucket stays
//! short and lookups stay cheap. Shapes are found through a hash map, so an
//! insert never scans the tuple list.
//!
//! Lookup visits tuples in order of their highest rule priority and stops as
//! soon as the best match so far beats every remaining tuple; inside a bucket
//! rules are sorted (priority desc, id asc), so the first match is the best
//! of that bucket and a bucket scan stops at the first rule that cannot beat
//! the best so far.
//!
//! Invariants:
//! - every held rule sits in exactly one bucket of one tuple, and its slot
//!   in `rules` records that (tuple, bucket) pair;
//! - tuple mask ⊆ rule effective mask, and the bucket key equals the rule's
//!   effective value under the tuple mask; hence a key matching the rule
//!   hashes to the rule's bucket;
//! - each rule's check was computed against the mask of the tuple holding
//!   it, so check plus bucket-key equality is exactly [`Rule::matches`];
//! - bucket entries are sorted by rank (priority desc, id asc);
//! - `order` lists exactly the non-empty tuples, sorted by max priority desc,
//!   and each tuple's `max_prio` is the largest priority it holds;
//! - hash tables use linear probing with backward-shift deletion (no
//!   tombstones) and a load factor of at most 1/2; a big one grows
//!   incrementally, keeping its previous table beside it for a while
//!   (`Tuple::old_slots`), and a bucket is then in exactly one of the two.
//!
//! Thread-safety: a plain single-writer structure (`Send + Sync`; lookups
//! take `&self` and never allocate). Use `offlow_sync::Versioned` for concurrent
//! readers.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

use offlow_flow::key::{present, KEY_WORDS};

use crate::chunkvec::ChunkVec;
use crate::linevec::LineVec;
use crate::{Classify, Field, FlowKey, IdTable, PortRange, Priority, Rule, RuleId};

/// Tuning knobs of [`TupleMerge`]. The defaults are the measured best on
/// the WUSTL ClassBench sets (`benches/tuple_lookup.rs`, which reads
/// `TM_LIMIT` / `TM_COARSE_PORTS` to compare settings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TupleConfig {
    /// Rules a bucket takes before a new rule goes to a finer tuple. Short
    /// buckets bound the rule checks per tuple on lookup.
    pub collision_limit: usize,
    /// Hash exact ports at the coarsest level too. Off: fewer tuples, longer
    /// buckets.
    pub coarse_ports: bool,
}

impl Default for TupleConfig {
    fn default() -> Self {
        TupleConfig {
            // Measured (benches/tuple_lookup.rs, 10K WUSTL sets): 16 beats
            // 4 and 8 (fewer tuples outweigh longer buckets) and ties 32.
            collision_limit: 16,
            coarse_ports: false,
        }
    }
}

/// Prefix rounding granularities (bits) tried in order for IPv4 prefixes;
/// 1 means "the exact effective mask".
const LEVELS: [u32; 3] = [8, 4, 1];

/// Initial number of hash slots of a tuple (power of two).
const INITIAL_SLOTS: usize = 8;

/// A tuple's hash table of at least this many slots grows incrementally
/// (see [`Tuple::old_slots`]); a smaller one is rehashed in the insert
/// that fills it (at most 16K buckets, a fraction of a millisecond), so
/// tables that never get this big, such as every tuple of the 10K-rule
/// ClassBench sets, never make a lookup probe two tables.
#[cfg(not(test))]
const INCREMENTAL_MIN_SLOTS: usize = 32_768;
/// Tests resize incrementally from 16 slots, so that every test of the
/// module runs through resizes under way.
#[cfg(test)]
const INCREMENTAL_MIN_SLOTS: usize = 16;

/// Old slots a tuple's incremental resize moves per bucket insert or
/// release: drains the old table within 1/8 of its size in operations,
/// long before the new one (twice the size) can fill to its load bound.
const MIGRATE_SLOTS: usize = 8;

/// A rule's rank: larger is better (higher priority, then smaller id).
#[inline]
fn rank(priority: Priority, id: RuleId) -> u64 {
    ((priority as u64) << 32) | (!id) as u64
}

/// Multiply-fold mixing step: the high and low halves of a 64x64 product.
#[inline(always)]
fn fold_mul(a: u64, b: u64) -> u64 {
    let p = (a as u128) * (b as u128);
    (p as u64) ^ ((p >> 64) as u64)
}

const SEED: u64 = 0x243f_6a88_85a3_08d3;
const MULT: u64 = 0x9e37_79b9_7f4a_7c15;
/// Per-position odd multipliers for the masked-word hash.
const HASH_K: [u64; KEY_WORDS] = {
    let mut k = [0u64; KEY_WORDS];
    let mut x = 0x6a09_e667_f3bc_c909u64;
    let mut i = 0;
    while i < KEY_WORDS {
        x = x.wrapping_mul(MULT).wrapping_add(0x1f83_d9ab_fb41_bd6b);
        k[i] = x | 1;
        i += 1;
    }
    k
};

/// Hash of masked key words; [`Tuple::masked`] computes the same value
/// while masking.
fn hash_words(mk: &[u64]) -> u64 {
    let mut h = SEED;
    for (j, &v) in mk.iter().enumerate() {
        h = h.wrapping_add(v.wrapping_mul(HASH_K[j]) ^ v.rotate_left(29));
    }
    fold_mul(h, MULT)
}

/// A cheap hasher for the id index and the shape map (keys are ids and
/// masks we chose, not attacker-controlled packet data).
#[derive(Default, Clone, Copy)]
struct FoldHasher(u64);

impl Hasher for FoldHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.0 = fold_mul(self.0 ^ u64::from_le_bytes(w), MULT);
        }
    }
    fn write_u32(&mut self, v: u32) {
        self.0 = fold_mul(self.0 ^ v as u64 ^ SEED, MULT);
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = fold_mul(self.0 ^ v ^ SEED, MULT);
    }
}

type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FoldHasher>>;

/// Most residual key words (besides the folded ethertype and presence
/// bits, see [`Check`]) a check holds inline. Measured on the WUSTL 10K
/// sets (`examples/tuple_residuals.rs`): after folding, every rule has at
/// most one (the address word, when a prefix is finer than its tuple's),
/// so one word keeps a check at half a cache line.
const CHECK_WORDS: usize = 1;

/// Where the ethertype lives in the key (word, shift); see `offlow_flow::key`.
const ETH_WORD: usize = Field::EthType.loc().word as usize;
const ETH_SHIFT: u32 = Field::EthType.loc().shift as u32;
/// Bits of the ethertype and of the presence flags inside their key words.
const ETH_BITS: u64 = 0xffff << ETH_SHIFT;
// The folded forms are 16 bits wide: both fields must be exactly that.
const _: () = assert!(Field::EthType.loc().bits == 16 && present::SHIFT == 48);
const PRESENT_BITS: u64 = 0xffff << present::SHIFT;

/// What a lookup must still test of a rule once the key has reached the
/// rule's bucket: the rule's mask bits *outside* its tuple's hash mask (the
/// *residual*), with their values, plus the native port ranges.
///
/// Why only the residual: `Tuple::find` compares the key's masked words
/// exactly with the bucket key, and the bucket key is the rule's effective
/// value under the tuple mask (module invariants). Every matcher bit inside
/// the tuple mask is therefore already known to agree; re-testing it would
/// only make the checks, the per-rule data every lookup reads, larger. On
/// the WUSTL 10K sets (`examples/tuple_residuals.rs`) whole-match checks of
/// 96 bytes were about 900 KiB of a lookup's 1.7-2.1 MiB of data; these
/// residual checks are 32 bytes, bringing it to 1.2-1.5 MiB, closer to a
/// 1 MiB L2.
///
/// Layout: the tuple shapes leave the ethertype and presence bits out of
/// the hash (see [`relax`]), so nearly every rule has residual bits in
/// those two words. They are stored folded, 16 bits each, instead of as
/// two whole words: the ethertype as mask and value, the presence bits as
/// the set of layers that must be present (the usual form: value equal to
/// mask; any other presence or ethertype-word residual is stored as a
/// generic word). The remaining non-zero residual words, up to
/// [`CHECK_WORDS`], are stored as (index, mask, value); words whose
/// residual is zero are not stored.
///
/// Invariants: a check is only valid for the tuple it was computed against
/// (`TupleMerge::place` computes it after choosing the tuple, and a rule
/// never changes tuple without being placed again); values are pre-masked;
/// a check never straddles a cache line (asserted below).
#[derive(Debug, Clone, Copy)]
struct Check {
    masks: [u64; CHECK_WORDS],
    values: [u64; CHECK_WORDS],
    src: PortRange,
    dst: PortRange,
    /// Residual ethertype mask and value (key bits `ETH_BITS >> ETH_SHIFT`).
    eth_mask: u16,
    eth_value: u16,
    /// Residual presence bits that must be set in the key.
    need: u16,
    idx: [u8; CHECK_WORDS],
    /// Number of used generic words (unused slots are zero), or `u8::MAX`
    /// when the residual has more than fit (or the matcher is not
    /// pre-masked): then the slab's [`Rule::matches`] is used instead.
    n: u8,
}

// Checks are read one per candidate rule at random; with a size dividing
// the 64-byte line (and `LineVec`'s line alignment) each read is one line.
const _: () = assert!(64 % std::mem::size_of::<Check>() == 0);

impl Check {
    /// The check of `rule` when it sits in the tuple with hash mask
    /// `tuple_mask` (which must be a subset of the rule's effective mask).
    fn of(rule: &Rule, tuple_mask: &FlowKey) -> Check {
        let mut c = Check {
            masks: [0; CHECK_WORDS],
            values: [0; CHECK_WORDS],
            src: rule.src_port,
            dst: rule.dst_port,
            eth_mask: 0,
            eth_value: 0,
            need: 0,
            idx: [0; CHECK_WORDS],
            n: 0,
        };
        let m = &rule.matcher;
        // A value bit outside the mask makes `Match::matches` fail for every
        // key. The residual form would drop such a bit (and the bucket key
        // never sees it), so leave that rule to the exact slow path.
        let premasked = (0..KEY_WORDS).all(|w| m.value.words[w] & !m.mask.words[w] == 0);
        if !premasked {
            c.n = u8::MAX;
            return c;
        }
        for w in 0..KEY_WORDS {
            let mut r = m.mask.words[w] & !tuple_mask.words[w];
            let v = m.value.words[w];
            if w == ETH_WORD {
                c.eth_mask = ((r & ETH_BITS) >> ETH_SHIFT) as u16;
                c.eth_value = ((v & r & ETH_BITS) >> ETH_SHIFT) as u16;
                r &= !ETH_BITS;
            } else if w == present::WORD && v & r & PRESENT_BITS == r & PRESENT_BITS {
                c.need = ((r & PRESENT_BITS) >> present::SHIFT) as u16;
                r &= !PRESENT_BITS;
            }
            if r == 0 {
                continue;
            }
            let n = c.n as usize;
            if n == CHECK_WORDS {
                c.n = u8::MAX;
                return c;
            }
            c.idx[n] = w as u8;
            c.masks[n] = r;
            c.values[n] = v & r;
            c.n += 1;
        }
        c
    }

    /// Same answer as [`Rule::matches`] for a key whose words under the
    /// tuple mask equal the bucket key, when `n != u8::MAX`.
    #[inline(always)]
    fn matches(&self, key: &FlowKey) -> bool {
        let eth = (key.words[ETH_WORD] >> ETH_SHIFT) as u16;
        let have = (key.words[present::WORD] >> present::SHIFT) as u16;
        let mut diff = ((eth & self.eth_mask) ^ self.eth_value) as u64
            | ((have & self.need) ^ self.need) as u64;
        // All slots, used or not (unused ones are mask 0, value 0 and pass):
        // a fixed trip count leaves no branch on `n`, which varies from rule
        // to rule (measured: ipc1_10K about 4% slower with `0..n`).
        for j in 0..CHECK_WORDS {
            diff |= (key.words[self.idx[j] as usize] & self.masks[j]) ^ self.values[j];
        }
        diff == 0
            && self.src.contains(key.get(Field::TcpSrc) as u16)
            && self.dst.contains(key.get(Field::TcpDst) as u16)
    }
}

/// One bucket entry: the rank to order and cut scans, and the rule slot
/// (which indexes `TupleMerge::checks`). Kept small on purpose: inserting
/// into a sorted bucket shifts entries, and every line the writer dirties
/// is a cache miss for readers on the other core (measured on acl1_10K:
/// with 112-byte checks inline, lookups during 1M updates/s ran at 60-70%
/// of idle; with them split out, about 90%).
#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    rank: u64,
    slot: u32,
}

impl Entry {
    #[inline(always)]
    fn matches(&self, tm: &TupleMerge, key: &FlowKey) -> bool {
        let check = &tm.checks[self.slot as usize];
        if check.n == u8::MAX {
            tm.slot_rule(self.slot).matches(key)
        } else {
            check.matches(key)
        }
    }
}

/// Entries per cache line of a [`Bucket`].
const ENTRIES_PER_LINE: usize = 4;

/// One cache line of bucket entries. Buckets allocate whole, aligned lines
/// so that no bucket ever shares a line with another heap object — in
/// particular not with the *other* left-right copy's buckets, which the
/// writer mutates while readers scan this one. With plain `Vec<Entry>`
/// buckets (16-byte heap chunks interleaved between the two copies), writer
/// stores invalidated lines readers were using, and lookups during updates
/// ran at 0.5-0.97 of idle depending on the heap layout of the run.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(64))]
struct EntryLine([Entry; ENTRIES_PER_LINE]);

// The slice cast in `Bucket::tail` relies on a line being exactly
// `ENTRIES_PER_LINE` entries with no padding.
const _: () =
    assert!(std::mem::size_of::<EntryLine>() == ENTRIES_PER_LINE * std::mem::size_of::<Entry>());

/// A bucket: entries sorted by rank desc. The first (best) entry lives in
/// the bucket itself, the rest in whole cache lines the tuple keeps apart
/// (`Tuple::tails`, same index). Most buckets of the WUSTL 10K sets hold one
/// rule (about 1.0–1.35 rules per bucket), so a lookup that reaches such a
/// bucket reads 16 bytes here and no entry line at all.
///
/// Sixteen bytes, four to a line, because the bucket array is read by every
/// lookup that finds a bucket: with the tail's `Vec` inline (48 bytes) the
/// buckets were a third of a 10K-rule table's lookup data, which then no
/// longer fitted a core's L2 (`examples/tuple_residuals.rs`), and a reader
/// living in the shared L3 swings with whatever else the machine runs.
#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    /// Entry 0's rank and slot; meaningful only when `len > 0`.
    head_rank: u64,
    head_slot: u32,
    len: u32,
}

const _: () = assert!(std::mem::size_of::<Bucket>() == 16);

impl Bucket {
    #[inline(always)]
    fn len(&self) -> usize {
        self.len as usize
    }

    #[inline(always)]
    fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline(always)]
    fn head(&self) -> Entry {
        Entry {
            rank: self.head_rank,
            slot: self.head_slot,
        }
    }

    #[inline(always)]
    fn set_head(&mut self, e: Entry) {
        self.head_rank = e.rank;
        self.head_slot = e.slot;
    }

    /// Entries `1..len`, given the bucket's tail lines. Does not read
    /// `lines` (another cold line) when there is no tail; hence `&Vec`: a
    /// slice argument would make the caller read the `Vec` to build it.
    #[allow(clippy::ptr_arg)]
    #[inline(always)]
    fn tail<'a>(&self, lines: &'a Vec<EntryLine>) -> &'a [Entry] {
        if self.len <= 1 {
            return &[];
        }
        let all = lines.len() * ENTRIES_PER_LINE;
        // SAFETY: `EntryLine` is `repr(C)` around `[Entry; ENTRIES_PER_LINE]`
        // and its size is exactly that array's (asserted above), so `n` lines
        // are `n * ENTRIES_PER_LINE` contiguous, initialised entries.
        let flat = unsafe { std::slice::from_raw_parts(lines.as_ptr().cast::<Entry>(), all) };
        // `len - 1 <= all` (invariant: lines are added before they fill);
        // `get` keeps a broken invariant from panicking a reader.
        flat.get(..self.len().saturating_sub(1)).unwrap_or(&[])
    }

    /// Every entry in rank order: the head, then the tail.
    #[inline(always)]
    fn entries<'a>(
        &self,
        lines: &'a Vec<EntryLine>,
    ) -> std::iter::Chain<
        std::option::IntoIter<Entry>,
        std::iter::Copied<std::slice::Iter<'a, Entry>>,
    > {
        let head = (self.len > 0).then(|| self.head());
        head.into_iter().chain(self.tail(lines).iter().copied())
    }

    fn partition_point(
        &self,
        lines: &Vec<EntryLine>,
        mut pred: impl FnMut(&Entry) -> bool,
    ) -> usize {
        if self.len == 0 || !pred(&self.head()) {
            return 0;
        }
        1 + self.tail(lines).partition_point(pred)
    }

    /// Insert `e` at position `pos` (at most `len`).
    fn insert(&mut self, lines: &mut Vec<EntryLine>, pos: usize, e: Entry) {
        if self.len == 0 {
            self.set_head(e);
        } else if pos == 0 {
            let old = self.head();
            tail_insert(lines, self.len() - 1, 0, old);
            self.set_head(e);
        } else {
            tail_insert(lines, self.len() - 1, pos - 1, e);
        }
        self.len += 1;
    }

    /// Remove the entry at position `pos` (below `len`).
    fn remove(&mut self, lines: &mut Vec<EntryLine>, pos: usize) {
        let n = self.len().saturating_sub(1);
        if pos == 0 {
            if n > 0 {
                let flat = tail_flat_mut(lines);
                self.set_head(flat[0]);
                flat.copy_within(1..n, 0);
            }
        } else {
            tail_flat_mut(lines).copy_within(pos..n, pos - 1);
        }
        self.len -= 1;
        if self.len == 1 {
            // Give the lines back: the tail just became empty. (From one
            // entry to none there were no lines: none are kept at len <= 1.)
            *lines = Vec::new();
        }
    }
}

/// All entry slots of a tail's lines, used or not.
fn tail_flat_mut(lines: &mut [EntryLine]) -> &mut [Entry] {
    let all = lines.len() * ENTRIES_PER_LINE;
    // SAFETY: as in `Bucket::tail`; `&mut` gives exclusive access.
    unsafe { std::slice::from_raw_parts_mut(lines.as_mut_ptr().cast::<Entry>(), all) }
}

/// Insert `e` at position `pos` (at most `n`) of a tail holding `n` entries.
fn tail_insert(lines: &mut Vec<EntryLine>, n: usize, pos: usize, e: Entry) {
    if n == lines.len() * ENTRIES_PER_LINE {
        lines.push(EntryLine::default());
    }
    let flat = tail_flat_mut(lines);
    flat.copy_within(pos..n, pos + 1);
    flat[pos] = e;
}

/// Where the rule in a slab slot lives: all a removal needs to read.
///
/// Kept apart from the slab of whole rules (hundreds of bytes each) so that
/// removing a rule touches 12 bytes in a dense array instead of a cold
/// slab slot: on a churning 10K-rule table that read was the writer's
/// biggest cache miss, and its memory traffic is what the reader on the
/// other core feels.
#[derive(Debug, Clone, Copy)]
struct Placement {
    /// The tuple holding the rule, or [`Placement::FREE`].
    tuple: u32,
    bucket: u32,
    priority: Priority,
}

impl Placement {
    /// `tuple` of a free slot.
    const FREE: u32 = u32::MAX;

    fn is_free(&self) -> bool {
        self.tuple == Self::FREE
    }
}

/// One tuple: a hash mask and a hash table of buckets.
#[derive(Debug, Clone)]
struct Tuple {
    /// The full hash mask (the shape's identity).
    mask: FlowKey,
    /// Indices of the key words the mask touches, then their masks; only
    /// the first `nwords` entries are used.
    words: [u8; KEY_WORDS],
    wmasks: [u64; KEY_WORDS],
    nwords: usize,
    /// Open-addressing table. A slot is 0 when empty, otherwise
    /// `(hash >> 32) << 32 | (bucket + 1)`; the home index is
    /// `(hash >> 32) & (len - 1)`, so the slot alone gives it back.
    slots: LineVec<u64>,
    /// The previous, half-size table while a resize moves its slots into
    /// `slots` (empty otherwise). Why: rehashing a 64K-bucket tuple in the
    /// insert that filled it took 2.5-3 ms (one left-right copy), a stall
    /// of the switch's control thread (issue 21). How, like Redis's
    /// incremental rehash: new buckets go to `slots`; each bucket insert or
    /// release moves [`MIGRATE_SLOTS`] of the old slots across; a lookup
    /// that misses in `slots` probes here too. The old table stays a valid
    /// linear-probing table (slots leave it by backward-shift deletion),
    /// and its slots before `old_cursor` are empty: moved.
    old_slots: LineVec<u64>,
    old_cursor: usize,
    /// Non-empty slots left in `old_slots`.
    old_live: usize,
    /// Masked key of bucket `b`: `bkeys[b * nwords .. (b + 1) * nwords]`.
    bkeys: LineVec<u64>,
    /// Rules of bucket `b`, sorted by rank desc. Empty buckets are free.
    /// A `LineVec` so that growth never copies the array (see there).
    buckets: LineVec<Bucket>,
    /// Entry lines of bucket `b` beyond its head (none while it holds at
    /// most one rule). Apart from `buckets` so those stay 16 bytes each.
    /// Chunked: read only for buckets of two or more rules, and as a `Vec`
    /// its doubling copied 24 bytes a bucket on the control thread.
    tails: ChunkVec<Vec<EntryLine>>,
    free_buckets: Vec<u32>,
    live_buckets: usize,
    /// Number of rules per priority, for `max_prio` after a removal.
    prio_count: BTreeMap<Priority, u32>,
    max_prio: Priority,
    nrules: usize,
}

impl Tuple {
    fn new(mask: FlowKey) -> Tuple {
        let mut words = [0u8; KEY_WORDS];
        let mut wmasks = [0u64; KEY_WORDS];
        let mut nwords = 0;
        for (i, &m) in mask.words.iter().enumerate() {
            if m != 0 {
                words[nwords] = i as u8;
                wmasks[nwords] = m;
                nwords += 1;
            }
        }
        Tuple {
            mask,
            words,
            wmasks,
            nwords,
            slots: LineVec::zeroed(INITIAL_SLOTS),
            old_slots: LineVec::new(),
            old_cursor: 0,
            old_live: 0,
            bkeys: LineVec::new(),
            buckets: LineVec::new(),
            tails: ChunkVec::new(),
            free_buckets: Vec::new(),
            live_buckets: 0,
            prio_count: BTreeMap::new(),
            max_prio: 0,
            nrules: 0,
        }
    }

    /// Masked words of `key` under this tuple's mask, and their hash.
    #[inline(always)]
    fn masked(&self, key: &FlowKey, out: &mut [u64; KEY_WORDS]) -> u64 {
        let mut h = SEED;
        for j in 0..self.nwords {
            let v = key.words[self.words[j] as usize] & self.wmasks[j];
            out[j] = v;
            // Independent multiplies (no chain through `h`) so the words
            // hash in parallel; the final fold mixes them. Must equal
            // `hash_words`.
            h = h.wrapping_add(v.wrapping_mul(HASH_K[j]) ^ v.rotate_left(29));
        }
        fold_mul(h, MULT)
    }

    #[inline(always)]
    fn bucket_key_eq(&self, b: usize, mk: &[u64; KEY_WORDS]) -> bool {
        let n = self.nwords;
        let stored = &self.bkeys[b * n..b * n + n];
        stored == &mk[..n]
    }

    /// The bucket holding masked key `mk` (hash `h`), if any.
    #[inline(always)]
    fn find(&self, mk: &[u64; KEY_WORDS], h: u64) -> Option<usize> {
        match self.find_in(&self.slots, mk, h) {
            Some(b) => Some(b),
            // Empty unless a resize is under way.
            None if !self.old_slots.is_empty() => self.find_old(mk, h),
            None => None,
        }
    }

    /// [`find`](Self::find) in the table a resize is draining; out of line
    /// so that the lookup's loop stays as compact as before.
    #[inline(never)]
    fn find_old(&self, mk: &[u64; KEY_WORDS], h: u64) -> Option<usize> {
        self.find_in(&self.old_slots, mk, h)
    }

    /// The bucket holding `mk` according to `slots` (a non-empty table).
    #[inline(always)]
    fn find_in(&self, slots: &[u64], mk: &[u64; KEY_WORDS], h: u64) -> Option<usize> {
        let tag = h >> 32;
        let lenmask = slots.len() - 1;
        let mut i = tag as usize & lenmask;
        loop {
            let s = slots[i];
            if s == 0 {
                return None;
            }
            if s >> 32 == tag {
                let b = (s as u32 - 1) as usize;
                if self.bucket_key_eq(b, mk) {
                    return Some(b);
                }
            }
            i = (i + 1) & lenmask;
        }
    }

    fn place_slot(slots: &mut [u64], s: u64) {
        let lenmask = slots.len() - 1;
        let mut i = (s >> 32) as usize & lenmask;
        while slots[i] != 0 {
            i = (i + 1) & lenmask;
        }
        slots[i] = s;
    }

    /// Empty slot `i` of `slots` by backward-shift deletion: later members
    /// of its run move back when their home is not in (i, j] (cyclically),
    /// so every slot stays reachable from its home.
    fn remove_slot_at(slots: &mut [u64], mut i: usize) {
        let lenmask = slots.len() - 1;
        let mut j = i;
        loop {
            j = (j + 1) & lenmask;
            let s = slots[j];
            if s == 0 {
                break;
            }
            let home = (s >> 32) as usize & lenmask;
            // `s` may stay if its home lies cyclically in (i, j].
            let stays = if i <= j {
                i < home && home <= j
            } else {
                i < home || home <= j
            };
            if !stays {
                slots[i] = s;
                i = j;
            }
        }
        slots[i] = 0;
    }

    /// Index of the slot naming bucket `b + 1 == want` in `slots`, probing
    /// from `home`, if it is there.
    fn slot_of(slots: &[u64], home: u64, want: u64) -> Option<usize> {
        if slots.is_empty() {
            return None;
        }
        let lenmask = slots.len() - 1;
        let mut i = home as usize & lenmask;
        loop {
            let s = slots[i];
            if s == 0 {
                return None;
            }
            if s & 0xffff_ffff == want {
                return Some(i);
            }
            i = (i + 1) & lenmask;
        }
    }

    /// Move up to `n` slots of the old table (empty ones count) into the
    /// new one; drop the old table once it is empty. Slot `old_cursor`
    /// leaves by backward-shift deletion, which may pull a later slot of
    /// its run into it: the cursor only moves past an empty slot.
    fn migrate(&mut self, n: usize) {
        let mut budget = n;
        while budget > 0 && self.old_live > 0 {
            budget -= 1;
            let c = self.old_cursor;
            let Some(&s) = self.old_slots.get(c) else {
                debug_assert!(false, "{} slots left past the cursor", self.old_live);
                break;
            };
            if s == 0 {
                self.old_cursor += 1;
                continue;
            }
            Self::remove_slot_at(&mut self.old_slots, c);
            Self::place_slot(&mut self.slots, s);
            self.old_live -= 1;
        }
        if self.old_live == 0 && !self.old_slots.is_empty() {
            self.old_slots = LineVec::new();
            self.old_cursor = 0;
        }
    }

    /// The bucket for `mk`, created if absent.
    fn find_or_create(&mut self, mk: &[u64; KEY_WORDS], h: u64) -> usize {
        if let Some(b) = self.find(mk, h) {
            return b;
        }
        if !self.old_slots.is_empty() {
            self.migrate(MIGRATE_SLOTS);
        }
        if (self.live_buckets + 1) * 2 > self.slots.len() {
            // A resize still under way (never, by MIGRATE_SLOTS) ends first.
            self.migrate(usize::MAX);
            let bigger = LineVec::zeroed(self.slots.len() * 2);
            let old = std::mem::replace(&mut self.slots, bigger);
            if old.len() >= INCREMENTAL_MIN_SLOTS {
                self.old_slots = old;
                self.old_cursor = 0;
                self.old_live = self.live_buckets;
            } else {
                for &s in old.iter().filter(|&&s| s != 0) {
                    Self::place_slot(&mut self.slots, s);
                }
            }
        }
        let n = self.nwords;
        let b = match self.free_buckets.pop() {
            Some(b) => {
                let b = b as usize;
                self.bkeys[b * n..b * n + n].copy_from_slice(&mk[..n]);
                b
            }
            None => {
                self.bkeys.extend_from_slice(&mk[..n]);
                self.buckets.push(Bucket::default());
                self.tails.push(Vec::new());
                self.buckets.len() - 1
            }
        };
        let s = ((h >> 32) << 32) | (b as u64 + 1);
        Self::place_slot(&mut self.slots, s);
        self.live_buckets += 1;
        b
    }

    /// Drop empty bucket `b` from the hash table (backward-shift deletion).
    fn release_bucket(&mut self, b: usize) {
        let want = b as u64 + 1;
        let n = self.nwords;
        let home = hash_words(&self.bkeys[b * n..b * n + n]) >> 32;
        // The bucket is in one of the tables (invariant), so probing from
        // its home there reaches its slot before any empty slot.
        if let Some(i) = Self::slot_of(&self.slots, home, want) {
            Self::remove_slot_at(&mut self.slots, i);
        } else if let Some(i) = Self::slot_of(&self.old_slots, home, want) {
            Self::remove_slot_at(&mut self.old_slots, i);
            self.old_live -= 1;
        } else {
            debug_assert!(false, "bucket {b} missing from its tuple's table");
            return;
        }
        self.free_buckets.push(b as u32);
        self.live_buckets -= 1;
        if !self.old_slots.is_empty() {
            self.migrate(MIGRATE_SLOTS);
        }
    }
}

/// The TupleMerge classifier. See the module documentation.
#[derive(Debug, Clone, Default)]
pub struct TupleMerge {
    tuples: Vec<Tuple>,
    /// Non-empty tuples as (max priority, tuple index), max priority desc.
    order: LineVec<(Priority, u32)>,
    /// Tuple index of each shape ever created (empty tuples are kept for
    /// reuse; they cost nothing on lookup since they are not in `order`).
    shapes: FastMap<[u64; KEY_WORDS], u32>,
    /// Whole rules by slot, for `get`, `rules` and the slow check path. A
    /// freed slot keeps its last rule (plain data) until reused; `placed`
    /// says which slots are held. Chunked, not a `Vec`: doubling a `Vec`
    /// of 65,536 rules copied 19 MB on the control thread (per copy of a
    /// left-right pair), a flow-mod stall growing with the table; lookups
    /// read it only on the slow check path.
    rules: ChunkVec<Rule>,
    /// Where each slot's rule lives, parallel to `rules` (chunked likewise).
    placed: ChunkVec<Placement>,
    /// Compact match test of the rule in the same slot; the only per-rule
    /// data a lookup reads (the slab holds whole rules for `get`/`remove`).
    checks: LineVec<Check>,
    free_rules: Vec<u32>,
    /// Rule id -> slot. Only updates, `get` and `len` read it (lookups
    /// never do), so it can grow incrementally ([`RuleIndex`]).
    index: RuleIndex,
    config: TupleConfig,
}

/// Rule id -> slab slot: an [`IdTable`], which grows a few slots per
/// insert instead of rehashing in one. Why: as a hashbrown map it doubled
/// in a single insert at 7/8 fill, 4.6 ms at 57,344 rules and 8.4 ms at
/// 114,688 (with the pipeline's maps; `examples/add_stalls.rs` in
/// offlow-pipeline), on the switch's control thread, once per left-right
/// copy.
#[derive(Debug, Clone, Default)]
struct RuleIndex(IdTable<u32>);

impl RuleIndex {
    fn insert(&mut self, id: RuleId, slot: u32) -> Option<u32> {
        self.0.insert(u64::from(id), slot)
    }

    fn remove(&mut self, id: &RuleId) -> Option<u32> {
        self.0.remove(u64::from(*id))
    }

    fn get(&self, id: &RuleId) -> Option<&u32> {
        self.0.get(u64::from(*id))
    }

    fn len(&self) -> usize {
        self.0.len()
    }
}

impl std::ops::Index<&RuleId> for RuleIndex {
    type Output = u32;

    /// The slot of `id`, which must be held.
    fn index(&self, id: &RuleId) -> &u32 {
        self.get(id).expect("RuleIndex: no such rule id")
    }
}

/// Mask of the `len` high bits of a `width`-bit field, unshifted.
fn prefix_mask(width: u32, len: u32) -> u128 {
    let full = if width >= 128 {
        u128::MAX
    } else {
        (1u128 << width) - 1
    };
    if len == 0 {
        0
    } else if len >= width {
        full // also avoids the out-of-range shift `full >> 128`
    } else {
        full & !(full >> len)
    }
}

/// If `m` (a `width`-bit field mask) is a prefix mask, its length.
fn prefix_len(m: u128, width: u32) -> Option<u32> {
    let len = m.count_ones();
    (prefix_mask(width, len) == m).then_some(len)
}

/// Mask and value of the common high bits of a port range.
fn range_prefix(r: PortRange) -> (u16, u16) {
    let common = (r.lo ^ r.hi).leading_zeros();
    let m = prefix_mask(16, common) as u16;
    (m, r.lo & m)
}

/// A rule's effective mask and value: the matcher plus what the port ranges
/// imply. If the matcher and a range disagree on a bit the rule matches no
/// key at all, so any bucket for it is correct.
fn effective(rule: &Rule) -> (FlowKey, FlowKey) {
    let mut mask = rule.matcher.mask;
    let mut value = rule.matcher.value;
    for (field, r) in [
        (Field::TcpSrc, rule.src_port),
        (Field::TcpDst, rule.dst_port),
    ] {
        let (pm, pv) = range_prefix(r);
        if pm != 0 {
            let (m0, v0) = (mask.get(field) as u16, value.get(field) as u16);
            mask.set(field, (m0 | pm) as u128);
            value.set(field, ((v0 & m0) | (pv & !m0)) as u128);
        }
    }
    (mask, value)
}

/// The hash mask of a rule at granularity `g` (see [`LEVELS`]).
fn relax(emask: &FlowKey, g: u32, coarse_ports: bool) -> FlowKey {
    if g <= 1 {
        return *emask;
    }
    let mut m = *emask;
    let round = |f: Field, m: &mut FlowKey, step: u32| {
        let fm = m.get(f);
        if let Some(len) = prefix_len(fm, f.bits()) {
            m.set(f, prefix_mask(f.bits(), len / step * step));
        }
    };
    round(Field::Ipv4Src, &mut m, g);
    round(Field::Ipv4Dst, &mut m, g);
    round(Field::Ipv6Src, &mut m, g * 4);
    round(Field::Ipv6Dst, &mut m, g * 4);
    // Ports: at the coarsest level not hashed at all (address pairs and
    // the protocol already spread ACL rules well, and leaving them out
    // halves the tuple count); finer levels keep them when exact. The
    // protocol is hashed when exact.
    let coarsest = g >= LEVELS[0] && !coarse_ports;
    for f in [Field::TcpSrc, Field::TcpDst, Field::IpProto] {
        if (coarsest && f != Field::IpProto) || m.get(f) != f.full_mask() {
            m.set(f, 0);
        }
    }
    // Ethertype and presence bits are shared by nearly every rule of a
    // table, so they discriminate little; leaving them out merges tuples
    // that differ only there (each member rule still checks them fully).
    m.set(Field::EthType, 0);
    m.words[present::WORD] &= !(0xffffu64 << present::SHIFT);
    m
}

impl TupleMerge {
    /// The winner's order key for `key`: `(priority << 32) | !id`, so a
    /// greater value beats a smaller one exactly as the crate-wide order
    /// (priority desc, id asc) says. For owners that merge this answer
    /// with another structure's.
    #[inline]
    pub fn lookup_rank(&self, key: &FlowKey) -> Option<u64> {
        let mut best = 0u64;
        let mut found = false;
        let mut mk = [0u64; KEY_WORDS];
        for &(tmax, ti) in self.order.iter() {
            // Stop once the best so far beats every rule of this tuple and
            // so of every later one (their max priorities are no higher).
            if found && best > (((tmax as u64) << 32) | 0xffff_ffff) {
                break;
            }
            let tup = &self.tuples[ti as usize];
            let h = tup.masked(key, &mut mk);
            let Some(b) = tup.find(&mk, h) else {
                continue;
            };
            let bucket = &tup.buckets[b];
            // The head alone first: a bucket of one rule (most of them)
            // never touches its tail's `Vec`.
            let head = bucket.head();
            if bucket.is_empty() || (found && head.rank <= best) {
                continue;
            }
            if head.matches(self, key) {
                best = head.rank;
                found = true;
                continue;
            }
            if bucket.len() > 1 {
                for e in bucket.tail(&tup.tails[b]) {
                    if found && e.rank <= best {
                        break;
                    }
                    if e.matches(self, key) {
                        best = e.rank;
                        found = true;
                        break;
                    }
                }
            }
        }
        found.then_some(best)
    }

    /// An empty classifier with the default configuration.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty classifier with `config`.
    pub fn with_config(config: TupleConfig) -> Self {
        TupleMerge {
            config,
            ..Self::default()
        }
    }

    /// Every rule held, in no particular order.
    pub fn rules(&self) -> impl Iterator<Item = &Rule> + '_ {
        self.held().map(|(r, _)| r)
    }

    /// Number of non-empty tuples (a lookup visits at most this many).
    pub fn tuple_count(&self) -> usize {
        self.order.len()
    }

    /// The hash masks of the non-empty tuples, in lookup order.
    pub fn tuple_masks(&self) -> impl Iterator<Item = &FlowKey> + '_ {
        self.order
            .iter()
            .map(|&(_, t)| &self.tuples[t as usize].mask)
    }

    /// Each held rule with the hash mask of the tuple holding it, in no
    /// particular order (for diagnostics: e.g. how many key words each
    /// rule's check has to test beyond what its tuple's hash verified).
    pub fn placements(&self) -> impl Iterator<Item = (&Rule, &FlowKey)> + '_ {
        self.held()
            .map(|(r, p)| (r, &self.tuples[p.tuple as usize].mask))
    }

    /// Each held rule with its placement.
    fn held(&self) -> impl Iterator<Item = (&Rule, &Placement)> + '_ {
        self.rules
            .iter()
            .zip(self.placed.iter())
            .filter(|(_, p)| !p.is_free())
    }

    /// Bytes of the data a lookup may read: tuple headers and order, hash
    /// slots, bucket keys, bucket entry lines and the rule checks (not the
    /// rule slab, which only the slow check path reads). An estimate of a
    /// reader's hot set when the trace touches most rules.
    pub fn lookup_bytes(&self) -> usize {
        use std::mem::size_of;
        let tuples: usize = self
            .order
            .iter()
            .map(|&(_, t)| {
                let t = &self.tuples[t as usize];
                let lines: usize = t.tails.iter().map(Vec::len).sum();
                size_of::<Tuple>()
                    + (t.slots.len() + t.old_slots.len()) * size_of::<u64>()
                    + t.bkeys.len() * size_of::<u64>()
                    + t.buckets.len() * size_of::<Bucket>()
                    + t.tails.iter().filter(|l| !l.is_empty()).count() * size_of::<Vec<EntryLine>>()
                    + lines * size_of::<EntryLine>()
            })
            .sum();
        tuples
            + self.order.len() * size_of::<(Priority, u32)>()
            + self.checks.len() * size_of::<Check>()
    }

    /// Bytes of per-rule check data a lookup reads (one check per rule).
    pub const CHECK_BYTES: usize = std::mem::size_of::<Check>();

    /// Residual key words a rule's check holds inline; a rule needing more
    /// is tested through the rule slab (slower, more cache lines).
    pub const CHECK_INLINE_WORDS: usize = CHECK_WORDS;

    fn tuple_for(&mut self, mask: &FlowKey) -> usize {
        if let Some(&t) = self.shapes.get(&mask.words) {
            return t as usize;
        }
        let t = self.tuples.len();
        self.tuples.push(Tuple::new(*mask));
        self.shapes.insert(mask.words, t as u32);
        t
    }

    /// Re-sort tuple `t` in `order` after its max priority or emptiness changed.
    fn reorder(&mut self, t: usize) {
        if let Some(pos) = self.order.iter().position(|&(_, x)| x as usize == t) {
            self.order.remove(pos);
        }
        let tup = &self.tuples[t];
        if tup.nrules > 0 {
            let p = tup.max_prio;
            let pos = self.order.partition_point(|&(q, _)| q >= p);
            self.order.insert(pos, (p, t as u32));
        }
    }

    fn place(&mut self, rule: Rule) {
        let (emask, evalue) = effective(&rule);
        let r = rank(rule.priority, rule.id);
        let prio = rule.priority;
        let mut mk = [0u64; KEY_WORDS];
        let mut chosen = None;
        let mut prev: Option<FlowKey> = None;
        for (li, &g) in LEVELS.iter().enumerate() {
            let shape = relax(&emask, g, self.config.coarse_ports);
            if prev == Some(shape) {
                continue;
            }
            prev = Some(shape);
            let t = self.tuple_for(&shape);
            let h = self.tuples[t].masked(&evalue, &mut mk);
            let last = li == LEVELS.len() - 1;
            let full = self.tuples[t]
                .find(&mk, h)
                .is_some_and(|b| self.tuples[t].buckets[b].len() >= self.config.collision_limit);
            if !full || last {
                chosen = Some((t, h));
                break;
            }
        }
        // The last level is always accepted, so `chosen` is set unless every
        // level repeated an earlier shape; the exact shape is then the one
        // already tried, so fall back to it.
        let (t, h) = match chosen {
            Some(c) => c,
            None => {
                let t = self.tuple_for(&emask);
                (t, self.tuples[t].masked(&evalue, &mut mk))
            }
        };
        // The check depends on the chosen tuple: only bits its hash mask
        // does not cover are re-tested.
        let check = Check::of(&rule, &self.tuples[t].mask);
        // A freed slot if any, else the next one (pushed below).
        let slot = self.free_rules.pop().unwrap_or(self.rules.len() as u32);
        let tup = &mut self.tuples[t];
        let b = tup.find_or_create(&mk, h);
        let (bucket, lines) = (&mut tup.buckets[b], &mut tup.tails[b]);
        let pos = bucket.partition_point(lines, |e| e.rank > r);
        bucket.insert(lines, pos, Entry { rank: r, slot });
        *tup.prio_count.entry(prio).or_insert(0) += 1;
        tup.nrules += 1;
        let reorder = tup.nrules == 1 || prio > tup.max_prio;
        if reorder {
            tup.max_prio = prio;
        }
        let placement = Placement {
            tuple: t as u32,
            bucket: b as u32,
            priority: prio,
        };
        self.index.insert(rule.id, slot);
        let s = slot as usize;
        if s < self.rules.len() {
            self.checks[s] = check;
            self.placed[s] = placement;
            self.rules[s] = rule;
        } else {
            self.checks.push(check);
            self.placed.push(placement);
            self.rules.push(rule);
        }
        if reorder {
            self.reorder(t);
        }
    }

    #[inline(always)]
    fn slot_rule(&self, slot: u32) -> &Rule {
        // Entries only ever name held slots (invariant).
        &self.rules[slot as usize]
    }

    /// Take the rule in `slot` (just removed from the index) out of its
    /// bucket and tuple. Reads only the slot's placement, never the rule.
    fn unplace(&mut self, slot: u32, id: RuleId) {
        let p = std::mem::replace(
            &mut self.placed[slot as usize],
            Placement {
                tuple: Placement::FREE,
                bucket: 0,
                priority: 0,
            },
        );
        debug_assert!(!p.is_free(), "the index named a free slot");
        self.free_rules.push(slot);
        let t = p.tuple as usize;
        let b = p.bucket as usize;
        let r = rank(p.priority, id);
        let prio = p.priority;
        let tup = &mut self.tuples[t];
        let (bucket, lines) = (&mut tup.buckets[b], &mut tup.tails[b]);
        if let Some(pos) = bucket.entries(lines).position(|e| e.rank == r) {
            bucket.remove(lines, pos);
        }
        if bucket.is_empty() {
            tup.release_bucket(b);
        }
        tup.nrules -= 1;
        let mut changed = tup.nrules == 0;
        if let Some(c) = tup.prio_count.get_mut(&prio) {
            *c -= 1;
            if *c == 0 {
                tup.prio_count.remove(&prio);
                if prio == tup.max_prio {
                    if let Some((&p, _)) = tup.prio_count.last_key_value() {
                        tup.max_prio = p;
                    }
                    changed = true;
                }
            }
        }
        if changed {
            self.reorder(t);
        }
    }
}

impl Classify for TupleMerge {
    fn insert(&mut self, rule: Rule) {
        self.discard(rule.id);
        self.place(rule);
    }

    fn remove(&mut self, id: RuleId) -> Option<Rule> {
        let slot = self.index.remove(&id)?;
        let rule = self.rules[slot as usize].clone();
        self.unplace(slot, id);
        Some(rule)
    }

    fn discard(&mut self, id: RuleId) -> bool {
        let Some(slot) = self.index.remove(&id) else {
            return false;
        };
        self.unplace(slot, id);
        true
    }

    #[inline]
    fn lookup(&self, key: &FlowKey) -> Option<RuleId> {
        // The low half of a rank is the complemented id.
        self.lookup_rank(key).map(|rank| !(rank as u32))
    }

    /// A plain loop over [`lookup`](Classify::lookup). A tuple-major
    /// variant (each tuple probed for the whole batch, then the next) was
    /// measured 1.3-1.6x slower on every WUSTL set: the tables stay in
    /// cache anyway, and per-key state arrays cost more than they save.
    fn lookup_batch(&self, keys: &[FlowKey], out: &mut [Option<RuleId>]) {
        assert!(out.len() >= keys.len(), "lookup_batch: output too short");
        for (k, o) in keys.iter().zip(out.iter_mut()) {
            *o = self.lookup(k);
        }
    }

    fn len(&self) -> usize {
        self.index.len()
    }

    fn get(&self, id: RuleId) -> Option<Rule> {
        let slot = *self.index.get(&id)?;
        Some(self.rules[slot as usize].clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Match;

    fn key(src: u32, dst: u32, sp: u16, dp: u16, proto: u8) -> FlowKey {
        let mut k = FlowKey::ZERO;
        k.set(Field::EthType, 0x0800);
        k.set(Field::Ipv4Src, src as u128);
        k.set(Field::Ipv4Dst, dst as u128);
        k.set(Field::IpProto, proto as u128);
        k.set(Field::TcpSrc, sp as u128);
        k.set(Field::TcpDst, dp as u128);
        k.add_presence(present::L3 | present::L4);
        k
    }

    #[test]
    fn prefix_helpers() {
        assert_eq!(prefix_mask(32, 8), 0xff00_0000);
        assert_eq!(prefix_len(0xffff_0000, 32), Some(16));
        assert_eq!(prefix_len(0xff00_ff00, 32), None);
        assert_eq!(prefix_len(u128::MAX, 128), Some(128));
        assert_eq!(prefix_mask(128, 128), u128::MAX);
        assert_eq!(range_prefix(PortRange { lo: 0, hi: 1023 }), (0xfc00, 0));
        assert_eq!(range_prefix(PortRange::exact(80)), (0xffff, 80));
        assert_eq!(range_prefix(PortRange::ANY), (0, 0));
    }

    #[test]
    fn collisions_split_into_finer_tuples() {
        let mut c = TupleMerge::with_config(TupleConfig {
            collision_limit: 8,
            ..TupleConfig::default()
        });
        // 16 /20 rules inside 10.0.0.0/16: the coarse level rounds them
        // all to /16, so 8 fill that bucket and the rest go to a /20 tuple.
        for i in 0..16u32 {
            let mut m = Match::ANY;
            m.set_prefix(Field::Ipv4Dst, (0x0a00_0000 | (i << 12)) as u128, 20);
            c.insert(Rule::new(i, 100 - i, m));
        }
        assert_eq!(c.tuple_count(), 2);
        for i in 0..16u32 {
            assert_eq!(c.lookup(&key(1, 0x0a00_0005 | (i << 12), 1, 2, 6)), Some(i));
        }
        assert_eq!(c.lookup(&key(1, 0x0a01_0005, 1, 2, 6)), None);
        for i in 0..16u32 {
            assert!(c.remove(i).is_some());
        }
        assert_eq!(c.tuple_count(), 0);
        assert_eq!(c.lookup(&key(1, 0x0a00_0005, 1, 2, 6)), None);
    }

    /// Rules that share a tuple (or land in finer ones) and differ only in
    /// bits the tuple's hash does not cover: each check tests just its
    /// residual, so every such bit must still decide the answer exactly as
    /// the linear oracle does.
    #[test]
    fn residual_checks_agree_with_linear() {
        use crate::LinearClassifier;
        use std::collections::BTreeSet;
        let net = 0x0a01_0200u32; // 10.1.2.0
        let net2 = 0x0a01_0300u32; // 10.1.3.0
        let web = PortRange { lo: 80, hi: 89 };
        let high = PortRange {
            lo: 1024,
            hi: u16::MAX,
        };
        let v4 = |dst_len: u32, dst: u32| {
            let mut m = Match::ANY;
            m.set_exact(Field::EthType, 0x0800);
            m.set_prefix(Field::Ipv4Dst, dst as u128, dst_len);
            m
        };
        let mut rules = vec![
            // /24 and /28 in 10.1.2.0: both round to the same /24 shape.
            Rule::new(1, 10, v4(24, net)),
            Rule::new(2, 20, v4(28, net | 0x30)),
            // /20 and /26 that round to /16 and /24.
            Rule::new(3, 5, v4(20, net & 0xffff_f000)),
            Rule::new(4, 30, v4(26, net | 0x40)),
            // Same /24 prefix, told apart only by port ranges (not hashed
            // at the coarsest level).
            Rule::new(5, 40, v4(24, net)).with_ports(PortRange::ANY, web),
            Rule::new(6, 35, v4(24, net)).with_ports(high, PortRange::ANY),
        ];
        // Masked protocol (not exact: dropped from the shape).
        let mut m = v4(24, net);
        m.set_masked(Field::IpProto, 0x06, 0x0e);
        rules.push(Rule::new(7, 45, m));
        // Masked port bits besides the native range (dropped: not exact).
        let mut m = v4(24, net);
        m.set_masked(Field::TcpDst, 0x0040, 0x00c0);
        rules.push(Rule::new(8, 50, m).with_ports(web, PortRange::ANY));
        // Ethertype (folded) beside eth_dst bits (hashed) in one key word.
        let mut m = v4(24, net);
        m.set_masked(Field::EthDst, 0x02, 0x03);
        rules.push(Rule::new(9, 55, m));
        // A presence bit required *absent*: not the folded form, the
        // presence word is stored as a generic residual word.
        let mut m = v4(24, net2);
        m.mask.add_presence(present::FRAG);
        rules.push(Rule::new(10, 60, m));
        // IPv6 (more residual words than fit: the slab fallback).
        let mut m = Match::ANY;
        m.set_exact(Field::EthType, 0x86dd);
        m.set_prefix(Field::Ipv6Dst, 0x2001_0db8u128 << 96 | 0x1234, 124);
        m.set_prefix(Field::Ipv6Src, 0xfe80u128 << 112, 70);
        rules.push(Rule::new(11, 65, m));
        // No ethertype at all, lowest priority: the catch-all of the /24.
        let mut m = Match::ANY;
        m.set_prefix(Field::Ipv4Dst, net as u128, 24);
        rules.push(Rule::new(12, 1, m));
        // A value bit outside its mask: matches no key (oracle semantics).
        let mut m = v4(28, net | 0x30);
        m.value.words[5] |= 1;
        rules.push(Rule::new(13, 70, m));

        let mut keys = Vec::new();
        for host in [0x01u32, 0x31, 0x3f, 0x41, 0x7f, 0x81] {
            for dst in [net | host, net2 | host, (net & 0xffff_f000) | 0x0f00 | host] {
                for (sp, dp) in [(1, 80), (2000, 85), (2000, 90), (85, 0x4c), (85, 0x8c)] {
                    for proto in [6u8, 7, 17] {
                        let k = key(9, dst, sp, dp, proto);
                        keys.push(k);
                        let mut k2 = k;
                        k2.set(Field::EthDst, 0x0a);
                        keys.push(k2);
                        let mut k3 = k;
                        k3.set(Field::EthType, 0x86dd);
                        keys.push(k3);
                        let mut k4 = k;
                        k4.add_presence(present::FRAG);
                        keys.push(k4);
                        let mut k5 = k;
                        k5.words[present::WORD] &= !((present::L4 as u64) << present::SHIFT);
                        keys.push(k5);
                    }
                }
            }
        }
        for low in [0x1234u128, 0x1230, 0x1334] {
            let mut k = FlowKey::ZERO;
            k.set(Field::EthType, 0x86dd);
            k.set(Field::Ipv6Dst, 0x2001_0db8u128 << 96 | low);
            k.set(Field::Ipv6Src, 0xfe80u128 << 112 | 0x55);
            k.add_presence(present::L3);
            keys.push(k);
        }

        // Default tuples, and a collision limit of 1 that spreads the same
        // rules over finer tuples (so their residuals differ).
        for limit in [16, 1] {
            let mut tm = TupleMerge::with_config(TupleConfig {
                collision_limit: limit,
                ..TupleConfig::default()
            });
            let mut lin = LinearClassifier::new();
            for r in &rules {
                tm.insert(r.clone());
                lin.insert(r.clone());
            }
            if limit == 16 {
                // Rules 1 and 2 really share a tuple, whose mask leaves the
                // /28's last four prefix bits to the residual check.
                let mask_of = |id| {
                    tm.placements()
                        .find(|(r, _)| r.id == id)
                        .map(|(_, m)| *m)
                        .expect("rule held")
                };
                assert_eq!(mask_of(1), mask_of(2));
                assert_eq!(mask_of(1).get(Field::Ipv4Dst), 0xffff_ff00);
            }
            // Each kind of check above is really exercised: folded or one
            // generic word inline, more words through the slab.
            let inline = |id| tm.checks[tm.index[&id] as usize].n != u8::MAX;
            for id in [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12] {
                assert!(inline(id), "limit {limit}: rule {id} inline");
            }
            assert!(!inline(11) && !inline(13), "limit {limit}");
            let mut hit = BTreeSet::new();
            let compare = |tm: &TupleMerge, lin: &LinearClassifier, hit: &mut BTreeSet<u32>| {
                for (i, k) in keys.iter().enumerate() {
                    let want = lin.lookup(k);
                    assert_eq!(tm.lookup(k), want, "limit {limit}, key {i}: {k:?}");
                    hit.extend(want);
                }
            };
            compare(&tm, &lin, &mut hit);
            // Every rule but the never-matching one decides some key, so
            // each residual bit above is actually exercised.
            assert_eq!(hit, (1..=12).collect::<BTreeSet<u32>>(), "limit {limit}");
            // Updates: remove the broad rules, re-insert one with a new
            // priority (possibly a new tuple), and compare again.
            for id in [1, 5, 12] {
                assert_eq!(tm.remove(id).is_some(), lin.remove(id).is_some());
            }
            compare(&tm, &lin, &mut hit);
            let again = Rule::new(1, 100, v4(24, net));
            tm.insert(again.clone());
            lin.insert(again);
            compare(&tm, &lin, &mut hit);
        }
    }

    #[test]
    fn bucket_keys_are_compared_in_full_on_a_hash_collision() {
        // Tuples hashing 1, 2 and 3 key words. A key differing in any one
        // word is probed with the first key's hash on purpose, as in a
        // collision: only the key compare can tell them apart.
        for nwords in 1..=3usize {
            let mut mask = FlowKey::ZERO;
            for w in 0..nwords {
                mask.words[5 + w] = u64::MAX;
            }
            let mut t = Tuple::new(mask);
            assert_eq!(t.nwords, nwords);
            let mut mk = [0u64; KEY_WORDS];
            for (w, v) in mk.iter_mut().enumerate().take(nwords) {
                *v = 0x1000 + w as u64;
            }
            let h = hash_words(&mk[..nwords]);
            let b = t.find_or_create(&mk, h);
            assert_eq!(t.find(&mk, h), Some(b));
            for w in 0..nwords {
                let mut other = mk;
                other[w] ^= 1;
                assert_eq!(t.find(&other, h), None, "{nwords} words, word {w} differs");
            }
            t.buckets[b].len = 0;
            t.release_bucket(b);
            assert_eq!(t.find(&mk, h), None);
        }
    }

    #[test]
    fn release_bucket_keeps_probe_chains() {
        // Many buckets in one tuple, removed in an interleaved order: every
        // remaining rule must stay reachable after backward shifts.
        let mut c = TupleMerge::new();
        for i in 0..500u32 {
            let mut m = Match::ANY;
            m.set_exact(Field::Ipv4Src, i as u128 * 7919);
            c.insert(Rule::new(i, 1, m));
        }
        for i in (0..500u32).filter(|i| i % 3 != 0) {
            c.remove(i);
        }
        for i in 0..500u32 {
            let want = (i % 3 == 0).then_some(i);
            assert_eq!(c.lookup(&key(i * 7919, 0, 0, 0, 0)), want, "rule {i}");
        }
    }

    // ---------------------------------------- incremental slot resizes

    #[derive(Debug, Clone)]
    enum TmOp {
        /// Insert rule `id` for host `dst` of 10.9.0.0/16 (a /32: one
        /// bucket each, so the tuple's table grows with every new host) at
        /// `prio`, or its /24 when `wide`.
        Insert {
            id: u32,
            dst: u16,
            prio: u32,
            wide: bool,
        },
        Remove(u32),
        Lookup(u16),
    }

    fn arb_tm_op() -> impl proptest::prelude::Strategy<Value = TmOp> {
        use proptest::prelude::*;
        prop_oneof![
            6 => (0u32..1500, 0u16..2000, 1u32..4, prop::bool::weighted(0.05))
                .prop_map(|(id, dst, prio, wide)| TmOp::Insert { id, dst, prio, wide }),
            2 => (0u32..1500).prop_map(TmOp::Remove),
            2 => (0u16..2000).prop_map(TmOp::Lookup),
        ]
    }

    /// Every tuple's tables: each live bucket named by exactly one slot
    /// across the two, the old table empty before its cursor, counts right.
    fn check_tables(tm: &TupleMerge) {
        for t in &tm.tuples {
            let named: Vec<usize> = t
                .slots
                .iter()
                .chain(t.old_slots.iter())
                .filter(|&&s| s != 0)
                .map(|&s| (s as u32 - 1) as usize)
                .collect();
            let mut sorted = named.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), named.len(), "a bucket named twice");
            assert_eq!(named.len(), t.live_buckets);
            let old_live = t.old_slots.iter().filter(|&&s| s != 0).count();
            assert_eq!(old_live, t.old_live);
            assert!(t.old_slots[..t.old_cursor.min(t.old_slots.len())]
                .iter()
                .all(|&s| s == 0));
            assert!(t.live_buckets * 2 <= t.slots.len(), "load <= 1/2");
            // Every live bucket is reachable from its home (no probe run
            // broken by a move or a removal), and no two share a key.
            let n = t.nwords;
            let mut keys = std::collections::HashSet::new();
            for &b in &named {
                let mut mk = [0u64; KEY_WORDS];
                mk[..n].copy_from_slice(&t.bkeys[b * n..b * n + n]);
                assert!(keys.insert(mk), "two buckets with one key");
                assert_eq!(t.find(&mk, hash_words(&mk[..n])), Some(b), "bucket {b}");
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]
        /// TupleMerge against the linear oracle (lookups) and a `HashMap`
        /// (what `get` and `len` see), over sequences that take one tuple's
        /// table through several incremental resizes (the tests' threshold
        /// is 16 slots) with removals and lookups while they are under way.
        #[test]
        fn agrees_with_oracles_across_incremental_resizes(
            ops in proptest::collection::vec(arb_tm_op(), 0..3000)
        ) {
            use crate::LinearClassifier;
            use proptest::prelude::*;
            use std::collections::HashMap;
            let mut tm = TupleMerge::new();
            let mut lin = LinearClassifier::new();
            let mut held: HashMap<u32, Rule> = HashMap::new();
            let rule = |id: u32, dst: u16, prio: u32, wide: bool| {
                let mut m = Match::ANY;
                m.set_exact(Field::EthType, 0x0800);
                let len = if wide { 24 } else { 32 };
                m.set_prefix(Field::Ipv4Dst, u128::from(0x0a09_0000 | u32::from(dst)), len);
                Rule::new(id, prio, m)
            };
            for (n, op) in ops.into_iter().enumerate() {
                match op {
                    TmOp::Insert { id, dst, prio, wide } => {
                        let r = rule(id, dst, prio, wide);
                        tm.insert(r.clone());
                        lin.insert(r.clone());
                        held.insert(id, r);
                    }
                    TmOp::Remove(id) => {
                        let got = tm.remove(id).map(|r| r.id);
                        prop_assert_eq!(got, held.remove(&id).map(|r| r.id));
                        lin.remove(id);
                    }
                    TmOp::Lookup(dst) => {
                        let k = key(1, 0x0a09_0000 | u32::from(dst), 0, 0, 6);
                        prop_assert_eq!(tm.lookup(&k), lin.lookup(&k));
                    }
                }
                prop_assert_eq!(tm.len(), held.len());
                if n % 101 == 0 {
                    check_tables(&tm);
                }
            }
            check_tables(&tm);
            for (id, r) in &held {
                prop_assert_eq!(tm.get(*id).map(|g| g.matcher), Some(r.matcher));
            }
            for dst in 0..2000u16 {
                let k = key(1, 0x0a09_0000 | u32::from(dst), 0, 0, 6);
                prop_assert_eq!(tm.lookup(&k), lin.lookup(&k), "host {}", dst);
            }
        }
    }

    /// One tuple grown to 5,000 buckets: every insert that starts a
    /// resize finds the previous one finished (the migration budget
    /// suffices), and lookups find every rule throughout.
    #[test]
    fn slot_resizes_finish_before_the_next() {
        let mut c = TupleMerge::new();
        let mut resizes = 0;
        for i in 0..5000u32 {
            let before = c.tuples.first().map_or(0, |t| t.slots.len());
            if let Some(t) = c.tuples.first() {
                if (t.live_buckets + 1) * 2 > t.slots.len() {
                    assert!(t.old_live <= MIGRATE_SLOTS, "resize under way at {i}");
                }
            }
            let mut m = Match::ANY;
            m.set_exact(Field::Ipv4Src, u128::from(i) * 7919);
            c.insert(Rule::new(i, 1, m));
            if c.tuples[0].slots.len() != before {
                resizes += 1;
            }
            if i % 97 == 0 {
                for j in (0..=i).step_by(13) {
                    assert_eq!(
                        c.lookup(&key(j * 7919, 0, 0, 0, 0)),
                        Some(j),
                        "rule {j} at {i}"
                    );
                }
            }
        }
        assert!(resizes >= 9, "{resizes} resizes");
        check_tables(&c);
    }
}
