//! Recursive Flow Classification (Gupta & McKeown, SIGCOMM 1999) for IPv4
//! 5-tuple rule sets: a *compiled*, read-only accelerator.
//!
//! # What
//! [`Rfc::build`] compiles a fixed rule set into a tree of direct-indexed
//! tables. Phase 0 splits the 5-tuple into seven chunks (source address high
//! and low 16 bits, destination address high and low 16 bits, source port,
//! destination port, protocol); each chunk value indexes a table that gives
//! its *equivalence class*: the set of rules whose condition on that chunk
//! accepts the value (equal sets share one class id). Each later step
//! combines two class ids through a cross-product table into the class of
//! the intersection of both rule sets. The last table stores the winning
//! rule's rank directly, so a lookup is 13 table loads (7 + 3 + 2 + 1 in four
//! dependent phases) and no comparison. [`Rfc::lookup_batch`] runs each phase
//! over up to 64 keys before starting the next, so the loads of different
//! keys overlap instead of forming one long dependency chain per key.
//! The reduction tree is configurable ([`RfcConfig::tree`]); the default was
//! chosen by comparing candidate trees on the WUSTL ClassBench sets
//! (`examples/rfc_timing.rs --trees`).
//!
//! A rule set whose tables would exceed the budget can be compiled as an
//! [`RfcSet`]: several table sets over disjoint subsets of the rules (split
//! by which fields are wide), each lookup taking the best answer of all
//! parts.
//!
//! The structure cannot be updated: a changed rule set needs a rebuild. The
//! intended use is as an accelerator in front of an incremental classifier
//! (TupleMerge) that serves lookups while a rebuild is pending.
//!
//! # Accepted rules and the lookup domain
//! A rule is accepted only when its matcher constrains nothing but
//! `eth_type` (exactly 0x0800), `ipv4_src`, `ipv4_dst`, `ip_proto`,
//! `tp_src`, `tp_dst` (any bit masks) and the presence bits L3 / L4 (only
//! "must be present"), plus native port ranges. Consequences for a key:
//! - `eth_type != 0x0800`: every rule requires eth_type 0x0800 exactly, so no
//!   rule can match: [`RfcAnswer::NoMatch`] is exact.
//! - eth_type 0x0800 with both L3 and L4 present (the *domain*): every
//!   presence requirement and the eth_type constraint hold, so a rule matches
//!   iff its conditions on the seven chunks hold, which is what the tables
//!   compute: the answer is exact.
//! - eth_type 0x0800 without L3: a rule requiring L3 cannot match. If every
//!   rule requires L3 the answer is `NoMatch`; otherwise (a rule with no IP
//!   field constraint at all, e.g. a ClassBench "match all IPv4" line) the
//!   answer is [`RfcAnswer::NotApplicable`] and the caller asks its complete
//!   classifier.
//! - eth_type 0x0800, L3, no L4 (an IP protocol without ports): an [`Rfc`]
//!   answers `NotApplicable`. An [`RfcSet`] that kept its candidate lists
//!   answers exactly: the tables read the port chunks from the key words as
//!   a rule's match does, so the first candidate that does not require L4
//!   wins. (One ClassBench trace header in twelve is such a packet.)
//!
//! Ties: rules are ranked by (priority desc, id asc), the crate-wide order;
//! the lowest rank in a class is the winner.
//!
//! # Invariants
//! - Every class id stored in a table is below the class count of that
//!   table's output, and every cross-product table has exactly
//!   `classes(a) * classes(b)` entries; lookups index with `a * nb + b`,
//!   which is therefore in range (the `unsafe` unchecked loads rely on this).
//! - The final table holds ranks `0..n` or `n` for "no rule".
//!
//! # Thread-safety
//! `Rfc` is immutable after build: `Send + Sync`, lookups take `&self` and
//! allocate nothing.

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::mem::MaybeUninit;
use std::time::{Duration, Instant};

use offlow_flow::{present, Field, FlowKey};

use crate::{Rule, RuleId};

mod set;

pub use set::{RfcRank, RfcSet, RfcSetConfig, RfcSetStats, DEFAULT_MAX_PARTS, DEFAULT_SET_BUDGET};

/// Default memory budget for the compiled tables: 64 MiB.
pub const DEFAULT_BUDGET: usize = 64 << 20;

/// Keys per batch slice in [`Rfc::lookup_batch`]: the per-phase scratch is
/// `SLOTS * BATCH * 4` bytes on the stack (4 KiB).
const BATCH: usize = 64;

/// Number of phase-0 chunks.
pub const CHUNKS: usize = 7;
/// Chunk names, in slot order (slot numbers used by [`RfcConfig::tree`]).
pub const CHUNK_NAMES: [&str; CHUNKS] = [
    "sip_hi", "sip_lo", "dip_hi", "dip_lo", "sport", "dport", "proto",
];
/// Slot numbers of the phase-0 chunks.
pub mod slot {
    /// Source address bits 31..16.
    pub const SIP_HI: u8 = 0;
    /// Source address bits 15..0.
    pub const SIP_LO: u8 = 1;
    /// Destination address bits 31..16.
    pub const DIP_HI: u8 = 2;
    /// Destination address bits 15..0.
    pub const DIP_LO: u8 = 3;
    /// Transport source port.
    pub const SPORT: u8 = 4;
    /// Transport destination port.
    pub const DPORT: u8 = 5;
    /// IP protocol.
    pub const PROTO: u8 = 6;
}

/// Maximum number of combine steps (a binary tree over 7 leaves has 6).
const MAX_STEPS: usize = 6;
const SLOTS: usize = CHUNKS + MAX_STEPS;

// The lookup reads the 5-tuple straight from the key words; pin the layout
// it assumes (offlow-flow key.rs) at compile time.
const _: () = {
    let s = Field::Ipv4Src.loc();
    let d = Field::Ipv4Dst.loc();
    let sp = Field::TcpSrc.loc();
    let dp = Field::TcpDst.loc();
    let p = Field::IpProto.loc();
    let e = Field::EthType.loc();
    assert!(s.word == 5 && s.shift == 0 && s.bits == 32);
    assert!(d.word == 5 && d.shift == 32 && d.bits == 32);
    assert!(sp.word == 6 && sp.shift == 0 && sp.bits == 16);
    assert!(dp.word == 6 && dp.shift == 16 && dp.bits == 16);
    assert!(p.word == 6 && p.shift == 32 && p.bits == 8);
    assert!(e.word == 3 && e.shift == 48 && e.bits == 16);
    assert!(present::WORD == 14 && present::SHIFT == 48);
};

/// Mask bits a rule may constrain, per key word (see the module docs).
const ALLOWED: [u64; 16] = {
    let mut a = [0u64; 16];
    a[3] = 0xffff << 48; // eth_type
    a[5] = u64::MAX; // ipv4_src, ipv4_dst
    a[6] = (1 << 40) - 1; // tp_src, tp_dst, ip_proto
    a[14] = ((present::L3 | present::L4) as u64) << present::SHIFT;
    a
};

/// The answer of an [`Rfc`] lookup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RfcAnswer {
    /// This rule wins.
    Hit(RuleId),
    /// No rule matches (exact).
    #[default]
    NoMatch,
    /// The key lies outside the compiled domain; ask the complete classifier.
    NotApplicable,
}

/// Why [`Rfc::build`] refused a rule set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RfcError {
    /// A rule is not an IPv4 5-tuple rule of the accepted shape.
    Shape {
        /// The offending rule.
        id: RuleId,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The tables (or the class bitmaps needed to build them) would exceed
    /// the memory budget; `bytes` is the size that would have been reached.
    TooBig {
        /// Bytes the build would have needed at the point it stopped.
        bytes: usize,
    },
}

impl fmt::Display for RfcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RfcError::Shape { id, reason } => write!(f, "rule {id}: {reason}"),
            RfcError::TooBig { bytes } => {
                write!(f, "RFC tables would need at least {bytes} bytes")
            }
        }
    }
}

impl std::error::Error for RfcError {}

/// Build parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RfcConfig {
    /// Upper bound on table bytes (and, separately, on class bitmaps held
    /// during the build).
    pub budget: usize,
    /// The reduction tree: step `i` combines slots `tree[i].0` and
    /// `tree[i].1` into slot `CHUNKS + i`. Slots `0..CHUNKS` are the phase-0
    /// chunks (see [`slot`]). Every slot must be consumed exactly once and
    /// the last step produces the answer.
    pub tree: Vec<(u8, u8)>,
}

impl RfcConfig {
    /// Default tree: S = (sip_hi, sip_lo), D = (dip_hi, dip_lo),
    /// P = (sport, dport), PP = (P, proto), SD = (S, D), final = (SD, PP).
    /// PP is built before SD so that SD's class count can be capped by the
    /// final table's budget while SD is being built (see `build_tables`).
    pub fn default_tree() -> Vec<(u8, u8)> {
        use slot::*;
        vec![
            (SIP_HI, SIP_LO),
            (DIP_HI, DIP_LO),
            (SPORT, DPORT),
            (9, PROTO),
            (7, 8),
            (11, 10),
        ]
    }
}

impl Default for RfcConfig {
    fn default() -> Self {
        RfcConfig {
            budget: DEFAULT_BUDGET,
            tree: RfcConfig::default_tree(),
        }
    }
}

/// Sizes and timing of one build.
#[derive(Debug, Clone, Default)]
pub struct RfcStats {
    /// Rules compiled.
    pub rules: usize,
    /// Class count of each phase-0 chunk, in slot order.
    pub chunk_classes: [usize; CHUNKS],
    /// Per combine step: (input a classes, input b classes, output classes,
    /// table bytes). The last step's output count is the number of distinct
    /// winners (plus "none").
    pub steps: Vec<(usize, usize, usize, usize)>,
    /// Bytes of all tables.
    pub table_bytes: usize,
    /// Bytes of the final step's input classes kept for
    /// [`RfcSet::rank_where`] (0 when they did not fit the budget).
    pub candidate_bytes: usize,
    /// Wall-clock build time.
    pub build_time: Duration,
}

impl fmt::Display for RfcStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} rules; chunk classes", self.rules)?;
        for (n, c) in CHUNK_NAMES.iter().zip(self.chunk_classes) {
            write!(f, " {n}={c}")?;
        }
        for (i, (a, b, o, bytes)) in self.steps.iter().enumerate() {
            write!(f, "; step{i} {a}x{b}->{o} ({} KiB)", bytes / 1024)?;
        }
        write!(
            f,
            "; tables {:.2} MiB; candidate lists {:.2} MiB; build {:.1} ms",
            self.table_bytes as f64 / (1 << 20) as f64,
            self.candidate_bytes as f64 / (1 << 20) as f64,
            self.build_time.as_secs_f64() * 1e3
        )
    }
}

/// A phase-0 table: 16-bit chunk value -> class id. A chunk has at most
/// 65536 values, hence at most 65536 classes, so ids always fit `u16`; the
/// fixed array length lets the compiler drop the bounds check on a `u16`
/// index.
type ChunkTable = Box<[u16; 1 << 16]>;

/// A cross-product table; the narrowest width that holds its ids.
enum CrossTable {
    U16(Box<[u16]>),
    U32(Box<[u32]>),
}

impl CrossTable {
    /// Store `v` at `i` (build only). The U16 variant is chosen only when
    /// every id provably fits.
    fn set(&mut self, i: usize, v: u32) {
        match self {
            CrossTable::U16(t) => {
                // Checked even in release: a truncated id would later index
                // out of range in the unchecked lookup loads.
                t[i] = u16::try_from(v).unwrap_or_else(|_| unreachable!("u16 table got id {v}"));
            }
            CrossTable::U32(t) => t[i] = v,
        }
    }

    fn bytes(&self) -> usize {
        match self {
            CrossTable::U16(t) => t.len() * 2,
            CrossTable::U32(t) => t.len() * 4,
        }
    }
}

/// One combine step of the reduction tree.
struct Step {
    a: usize,
    b: usize,
    /// Class count of input `b` (the row stride).
    nb: u32,
    table: CrossTable,
}

/// The direct-indexed tables of one compiled rule set: phase-0 chunk tables
/// and the combine steps. The last step yields a *rank*; what a rank means
/// (local to one [`Rfc`], or global across an [`RfcSet`]) is up to the owner.
struct Tables {
    /// Phase-0 tables for slots 0..6 (proto uses the first 256 entries of a
    /// full-size table so every chunk shares the same fast path).
    chunks: [ChunkTable; CHUNKS],
    /// Combine steps in execution order; the last yields a rank.
    steps: Vec<Step>,
    /// The last step's input classes, when kept (see [`Candidates`]).
    candidates: Option<Candidates>,
}

/// The final step's two input class bitmaps, kept after the build. The
/// final table stores only the winner of each pair of classes; the
/// intersection of the pair's bitmaps lists *every* rule the key matches, in
/// rank order. That is what lets an owner skip rules removed since the build
/// instead of giving up on the snapshot ([`RfcSet::rank_where`]).
struct Candidates {
    /// Words per bitmap.
    words: usize,
    /// Class `i` of input `a` is `a[i * words..][..words]`.
    a: Box<[u64]>,
    /// Class `j` of input `b`, likewise.
    b: Box<[u64]>,
    /// The rank of each bit position (the part's subset of the rules).
    ranks: Box<[u32]>,
}

impl Candidates {
    /// Flatten the classes of both inputs, if their bitmaps fit `room` bytes.
    fn keep(
        a: &[Box<[u64]>],
        b: &[Box<[u64]>],
        subset: &[u32],
        words: usize,
        room: usize,
    ) -> Option<Candidates> {
        let bytes = (a.len() + b.len()).saturating_mul(words * 8);
        if bytes > room {
            return None;
        }
        let flat =
            |v: &[Box<[u64]>]| -> Box<[u64]> { v.iter().flat_map(|c| c.iter().copied()).collect() };
        Some(Candidates {
            words,
            a: flat(a),
            b: flat(b),
            ranks: subset.into(),
        })
    }

    fn bytes(&self) -> usize {
        (self.a.len() + self.b.len()) * 8 + self.ranks.len() * 4
    }

    /// The lowest rank in both class `ia` of input a and `ib` of input b
    /// that `keep` accepts.
    fn first_where(&self, ia: u32, ib: u32, keep: &impl Fn(u32) -> bool) -> Option<u32> {
        let x = self.a.get(ia as usize * self.words..)?.get(..self.words)?;
        let y = self.b.get(ib as usize * self.words..)?.get(..self.words)?;
        for (w, (p, q)) in x.iter().zip(y).enumerate() {
            let mut m = p & q;
            while m != 0 {
                let rank = *self.ranks.get(w * 64 + m.trailing_zeros() as usize)?;
                if keep(rank) {
                    return Some(rank);
                }
                m &= m - 1;
            }
        }
        None
    }
}

/// A compiled RFC classifier; see the module documentation.
pub struct Rfc {
    tables: Tables,
    /// Rule id by rank; rank `ids.len()` means "no match".
    ids: Box<[RuleId]>,
    /// Every rule requires L3 presence (see the module docs).
    all_require_l3: bool,
    stats: RfcStats,
}

impl fmt::Debug for Rfc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rfc").field("stats", &self.stats).finish()
    }
}

// ---------------------------------------------------------------------------
// Build

/// A rule's condition on one chunk: `lo <= v <= hi && v & mask == val`.
/// Prefix masks are folded into the interval at construction, so `mask` is
/// non-zero only for non-prefix masks.
#[derive(Clone, Copy, Debug)]
struct Cond {
    lo: u32,
    hi: u32,
    val: u32,
    mask: u32,
}

impl Cond {
    /// `v & mask == val` within `bits` bits, intersected with `[lo, hi]`.
    /// Returns `None` when no value is accepted.
    fn new(bits: u32, val: u32, mask: u32, lo: u32, hi: u32) -> Option<Cond> {
        let full = (1u32 << bits) - 1;
        let mask = mask & full;
        let val = val & mask;
        let inv = !mask & full;
        if inv & inv.wrapping_add(1) == 0 {
            // Prefix (or empty) mask: the accepted set is [val, val | inv].
            let (l, h) = (lo.max(val), hi.min(val | inv));
            (l <= h).then_some(Cond {
                lo: l,
                hi: h,
                val: 0,
                mask: 0,
            })
        } else {
            (lo <= hi).then_some(Cond { lo, hi, val, mask })
        }
    }

    #[inline]
    fn accepts(&self, v: u32) -> bool {
        self.lo <= v && v <= self.hi && v & self.mask == self.val
    }
}

/// A small multiplicative hasher for class bitmaps (std's SipHash is several
/// times slower on the kilobyte keys 10K-rule sets produce; the keys are not
/// attacker-chosen beyond the rule set the operator installs).
#[derive(Default)]
struct BitsHasher(u64);

impl Hasher for BitsHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut it = bytes.chunks_exact(8);
        for c in &mut it {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.write_u64(u64::from_le_bytes(w));
        }
        for &b in it.remainder() {
            self.write_u64(b as u64);
        }
    }
    #[inline]
    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    #[inline]
    fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }
    fn finish(&self) -> u64 {
        // Final avalanche so the low bits hashbrown uses depend on every word.
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^ (h >> 33)
    }
}

/// Rule bitmaps of a slot's classes, indexed by class id.
type ClassBits = Vec<Box<[u64]>>;

type ClassMap = HashMap<Box<[u64]>, u32, BuildHasherDefault<BitsHasher>>;

/// Equivalence classes under construction: dedupes bitmaps, hands out ids.
struct Classes {
    map: ClassMap,
    words: usize,
    /// Bitmap bytes held; checked against the budget as classes are added.
    bytes: usize,
    budget: usize,
    /// Most classes allowed: more would make a later table exceed the
    /// budget (see `build_tables`), so the build stops early.
    max_classes: usize,
}

impl Classes {
    fn new(words: usize, budget: usize) -> Classes {
        Classes {
            map: ClassMap::default(),
            words,
            bytes: 0,
            budget,
            max_classes: usize::MAX,
        }
    }

    fn id(&mut self, bits: &[u64]) -> Result<u32, RfcError> {
        if let Some(&id) = self.map.get(bits) {
            return Ok(id);
        }
        // Key bytes plus a rough per-entry overhead of the map.
        self.bytes += bits.len() * 8 + 48;
        if self.bytes > self.budget {
            return Err(RfcError::TooBig { bytes: self.bytes });
        }
        if self.map.len() >= self.max_classes {
            // Reported size: what the consumer table would need at least.
            return Err(RfcError::TooBig {
                bytes: self.budget.saturating_add(1),
            });
        }
        let id = self.map.len() as u32;
        self.map.insert(bits.into(), id);
        Ok(id)
    }

    fn len(&self) -> usize {
        self.map.len()
    }

    /// The bitmaps, indexed by class id.
    fn into_vec(self) -> Vec<Box<[u64]>> {
        let mut v: Vec<Box<[u64]>> = vec![Box::default(); self.map.len()];
        for (bits, id) in self.map {
            v[id as usize] = bits;
        }
        debug_assert!(v.iter().all(|b| b.len() == self.words));
        v
    }
}

/// Check one rule's shape; returns its seven chunk conditions (`None` for a
/// chunk that accepts nothing, making the rule unmatchable) and whether it
/// requires L3.
fn rule_conds(r: &Rule) -> Result<([Option<Cond>; CHUNKS], bool), RfcError> {
    let shape = |reason| RfcError::Shape { id: r.id, reason };
    let m = &r.matcher.mask;
    let v = &r.matcher.value;
    for ((&mw, &vw), &allowed) in m.words.iter().zip(&v.words).zip(&ALLOWED) {
        if mw & !allowed != 0 {
            return Err(shape("constrains a field outside the IPv4 5-tuple"));
        }
        if vw & !mw != 0 {
            // Match::matches never accepts such a rule; refusing keeps the
            // chunk conditions (which assume a pre-masked value) honest.
            return Err(shape("match value has bits outside its mask"));
        }
    }
    if m.get(Field::EthType) != 0xffff || v.get(Field::EthType) != 0x0800 {
        return Err(shape("eth_type must be exactly 0x0800"));
    }
    let pm = m.presence();
    if v.presence() != pm {
        return Err(shape("requires a layer to be absent"));
    }
    let field = |f: Field| (v.get(f) as u32, m.get(f) as u32);
    let (sv, sm) = field(Field::Ipv4Src);
    let (dv, dm) = field(Field::Ipv4Dst);
    let (spv, spm) = field(Field::TcpSrc);
    let (dpv, dpm) = field(Field::TcpDst);
    let (pv, pmask) = field(Field::IpProto);
    const W: u32 = 0xffff;
    let conds = [
        Cond::new(16, sv >> 16, sm >> 16, 0, W),
        Cond::new(16, sv & W, sm & W, 0, W),
        Cond::new(16, dv >> 16, dm >> 16, 0, W),
        Cond::new(16, dv & W, dm & W, 0, W),
        Cond::new(16, spv, spm, r.src_port.lo as u32, r.src_port.hi as u32),
        Cond::new(16, dpv, dpm, r.dst_port.lo as u32, r.dst_port.hi as u32),
        Cond::new(8, pv, pmask, 0, 0xff),
    ];
    Ok((conds, pm & present::L3 != 0))
}

/// Phase 0 for one chunk: sweep the elementary segments of `0..2^bits`
/// (between consecutive boundaries every rule's condition is constant),
/// maintaining the bitmap of accepting rules incrementally for interval
/// conditions and by evaluation for masked ones.
fn build_chunk(
    conds: &[Option<Cond>],
    bits: u32,
    words: usize,
    budget: usize,
) -> Result<(ChunkTable, ClassBits), RfcError> {
    let size = 1usize << bits;
    let mut boundary = vec![false; size + 1];
    boundary[0] = true;
    boundary[size] = true; // sentinel: ends the last segment
                           // (position, rank, start?) events for interval conditions.
    let mut events: Vec<(u32, u32, bool)> = Vec::new();
    let mut masked: Vec<(u32, Cond)> = Vec::new();
    for (rank, c) in conds.iter().enumerate() {
        let Some(c) = c else { continue };
        let rank = rank as u32;
        boundary[c.lo as usize] = true;
        boundary[c.hi as usize + 1] = true;
        if c.mask == 0 {
            events.push((c.lo, rank, true));
            events.push((c.hi + 1, rank, false));
        } else {
            // The masked test is constant on aligned blocks of
            // 2^trailing_zeros(mask) values.
            let step = 1usize << c.mask.trailing_zeros();
            let first = (c.lo as usize).div_ceil(step) * step;
            for p in (first..=c.hi as usize).step_by(step) {
                boundary[p] = true;
            }
            masked.push((rank, *c));
        }
    }
    events.sort_unstable();
    let mut table: ChunkTable = vec![0u16; 1 << 16]
        .into_boxed_slice()
        .try_into()
        .unwrap_or_else(|_| unreachable!("length is 1 << 16"));
    let mut classes = Classes::new(words, budget);
    let mut cur = vec![0u64; words];
    let mut ev = 0;
    let mut v = 0usize;
    while v < size {
        while ev < events.len() && events[ev].0 as usize == v {
            let (_, rank, start) = events[ev];
            let (w, b) = (rank as usize / 64, rank % 64);
            if start {
                cur[w] |= 1 << b;
            } else {
                cur[w] &= !(1 << b);
            }
            ev += 1;
        }
        for &(rank, c) in &masked {
            let (w, b) = (rank as usize / 64, rank % 64);
            if c.accepts(v as u32) {
                cur[w] |= 1 << b;
            } else {
                cur[w] &= !(1 << b);
            }
        }
        let mut end = v + 1;
        while !boundary[end] {
            end += 1;
        }
        let id = classes.id(&cur)?;
        // A chunk has at most 2^16 values, hence at most 2^16 classes.
        table[v..end].fill(id as u16);
        v = end;
    }
    Ok((table, classes.into_vec()))
}

/// Rules validated and put in rank order, with their chunk conditions: the
/// common input of [`Rfc::build_with`] and [`RfcSet::build_with`].
struct Prepared<'a> {
    /// Rules by rank: (priority desc, id asc).
    order: Vec<&'a Rule>,
    /// Chunk conditions by rank.
    conds: Vec<[Option<Cond>; CHUNKS]>,
    /// Every rule requires L3 presence.
    all_require_l3: bool,
}

fn prepare(rules: &[Rule]) -> Result<Prepared<'_>, RfcError> {
    let mut order: Vec<&Rule> = rules.iter().collect();
    order.sort_by_key(|r| (std::cmp::Reverse(r.priority), r.id));
    let mut seen = std::collections::HashSet::new();
    for r in &order {
        if !seen.insert(r.id) {
            return Err(RfcError::Shape {
                id: r.id,
                reason: "duplicate rule id",
            });
        }
    }
    let mut conds = Vec::with_capacity(order.len());
    let mut all_require_l3 = true;
    for r in &order {
        let (c, l3) = rule_conds(r)?;
        all_require_l3 &= l3;
        conds.push(c);
    }
    Ok(Prepared {
        order,
        conds,
        all_require_l3,
    })
}

/// Build the tables for a subset of rules. `subset` lists ranks of
/// `conds` in increasing order; the final table stores `subset[i]` for a
/// class whose first rule is the `i`-th of the subset, and `none` when no
/// rule of the subset matches. `none` must exceed every rank in `subset`.
fn build_tables(
    conds: &[[Option<Cond>; CHUNKS]],
    subset: &[u32],
    none: u32,
    config: &RfcConfig,
) -> Result<(Tables, RfcStats), RfcError> {
    let t0 = Instant::now();
    check_tree(&config.tree);
    debug_assert!(subset.windows(2).all(|w| w[0] < w[1]));
    debug_assert!(subset.iter().all(|&r| r < none));
    let n = subset.len();
    let words = n.div_ceil(64).max(1);
    let per_chunk: Vec<Vec<Option<Cond>>> = (0..CHUNKS)
        .map(|c| subset.iter().map(|&r| conds[r as usize][c]).collect())
        .collect();

    let mut stats = RfcStats {
        rules: n,
        ..RfcStats::default()
    };
    let mut table_bytes = 0usize;
    let mut chunk_tables = Vec::with_capacity(CHUNKS);
    // Class bitmaps of every live slot; taken when consumed.
    let mut slots: Vec<Option<Vec<Box<[u64]>>>> = Vec::with_capacity(SLOTS);
    for (i, conds) in per_chunk.iter().enumerate() {
        let bits = if i == slot::PROTO as usize { 8 } else { 16 };
        let (t, cls) = build_chunk(conds, bits, words, config.budget)?;
        table_bytes += std::mem::size_of::<[u16; 1 << 16]>();
        stats.chunk_classes[i] = cls.len();
        chunk_tables.push(t);
        slots.push(Some(cls));
    }
    if table_bytes > config.budget {
        return Err(RfcError::TooBig { bytes: table_bytes });
    }

    let mut steps = Vec::with_capacity(config.tree.len());
    let mut candidates = None;
    let last = config.tree.len() - 1;
    for (si, &(a, b)) in config.tree.iter().enumerate() {
        let (a, b) = (a as usize, b as usize);
        // check_tree guarantees each slot is consumed once, after it is made.
        let ca = slots[a].take().unwrap_or_else(|| unreachable!("checked"));
        let cb = slots[b].take().unwrap_or_else(|| unreachable!("checked"));
        let (na, nb) = (ca.len(), cb.len());
        let entries = na * nb;
        // Width is decided after deduping, so budget the wider one unless
        // the output provably fits u16: an inner step's class ids are
        // dense (fewer than its entries), but the final step stores ranks
        // of the caller's rank space, up to `none` however few its entries
        // (a small part of a big RfcSet).
        let fits_u16 = if si == last {
            none < u16::MAX as u32
        } else {
            entries <= 1 << 16
        };
        let width = if fits_u16 { 2 } else { 4 };
        let need = table_bytes.saturating_add(entries.saturating_mul(width));
        if need > config.budget {
            return Err(RfcError::TooBig { bytes: need });
        }
        // Allocate at the budgeted width; a u16 table only receives ids
        // below 2^16 (dense ids of at most 2^16 entries, or final ranks
        // 0..=none < 2^16 - 1).
        let mut ids = if width == 2 {
            CrossTable::U16(vec![0u16; entries].into_boxed_slice())
        } else {
            CrossTable::U32(vec![0u32; entries].into_boxed_slice())
        };
        let out_classes = if si == last {
            // The final step keeps only the winner: the first set bit,
            // translated to the caller's rank space.
            let mut winners = std::collections::HashSet::new();
            for (i, x) in ca.iter().enumerate() {
                for (j, y) in cb.iter().enumerate() {
                    let mut r = none;
                    for (w, (p, q)) in x.iter().zip(y.iter()).enumerate() {
                        let m = p & q;
                        if m != 0 {
                            // Bits are set only for positions < n.
                            r = subset[w * 64 + m.trailing_zeros() as usize];
                            break;
                        }
                    }
                    ids.set(i * nb + j, r);
                    winners.insert(r);
                }
            }
            slots.push(None);
            // What the budget leaves beside the tables (`need` counts the
            // final table at its budgeted width), but at least a quarter of
            // it: the lists are read only for the keys the tables cannot
            // answer alone, so they need not share the tables' cache
            // footprint (ipc1_10K's larger part needs 12 MB and its tables
            // leave 3 MB of a 64 MB budget).
            let room = config.budget.saturating_sub(need).max(config.budget / 4);
            candidates = Candidates::keep(&ca, &cb, subset, words, room);
            winners.len()
        } else {
            let mut classes = Classes::new(words, config.budget);
            // If the step consuming this output pairs it with a slot that is
            // already built, its table needs at least 2 bytes per
            // (this class, other class) pair: cap the class count so a
            // hopeless build stops here rather than after hashing every
            // pair (the dominant cost of a refused build).
            let made = CHUNKS + si;
            let other = config.tree.iter().find_map(|&(x, y)| {
                let (x, y) = (x as usize, y as usize);
                (x == made).then_some(y).or((y == made).then_some(x))
            });
            if let Some(Some(o)) = other.map(|o| slots.get(o).and_then(|c| c.as_ref())) {
                let left = config
                    .budget
                    .saturating_sub(table_bytes.saturating_add(entries.saturating_mul(2)));
                classes.max_classes = left / (2 * o.len().max(1));
            }
            let mut scratch = vec![0u64; words];
            for (i, x) in ca.iter().enumerate() {
                for (j, y) in cb.iter().enumerate() {
                    for ((s, p), q) in scratch.iter_mut().zip(x.iter()).zip(y.iter()) {
                        *s = p & q;
                    }
                    ids.set(i * nb + j, classes.id(&scratch)?);
                }
            }
            let k = classes.len();
            slots.push(Some(classes.into_vec()));
            k
        };
        // Narrow a 32-bit table whose ids turned out to fit 16 bits (the
        // copy is half the size of the table already budgeted).
        let table = match ids {
            CrossTable::U32(t) if t.iter().all(|&x| x <= u16::MAX as u32) => {
                CrossTable::U16(t.iter().map(|&x| x as u16).collect())
            }
            t => t,
        };
        table_bytes += table.bytes();
        stats.steps.push((na, nb, out_classes, table.bytes()));
        steps.push(Step {
            a,
            b,
            nb: nb as u32,
            table,
        });
    }
    let chunks: [ChunkTable; CHUNKS] = chunk_tables
        .try_into()
        .unwrap_or_else(|_| unreachable!("exactly CHUNKS tables built"));
    stats.table_bytes = table_bytes;
    stats.candidate_bytes = candidates.as_ref().map_or(0, Candidates::bytes);
    stats.build_time = t0.elapsed();
    Ok((
        Tables {
            chunks,
            steps,
            candidates,
        },
        stats,
    ))
}

// ---------------------------------------------------------------------------
// Lookup

/// Answer for a key outside the domain, or `None` when the key is inside it
/// (eth_type 0x0800 with L3 and L4 present). See the module docs.
#[inline]
fn outside(key: &FlowKey, all_require_l3: bool) -> Option<RfcAnswer> {
    let eth = (key.words[3] >> 48) as u16;
    let pres = key.presence();
    const L34: u16 = present::L3 | present::L4;
    if eth != 0x0800 {
        Some(RfcAnswer::NoMatch)
    } else if pres & L34 == L34 {
        None
    } else if pres & present::L3 == 0 && all_require_l3 {
        Some(RfcAnswer::NoMatch)
    } else {
        Some(RfcAnswer::NotApplicable)
    }
}

/// `rank` as an [`RfcRank`] among `n` rules (`n` and above: no rule).
#[inline]
fn to_rank(rank: u32, n: usize) -> RfcRank {
    if (rank as usize) < n {
        RfcRank::Rank(rank)
    } else {
        RfcRank::NoMatch
    }
}

/// The answer for `rank` given the rule ids by rank (a rank past the end
/// means "no rule").
#[inline]
fn answer(ids: &[RuleId], rank: u32) -> RfcAnswer {
    match ids.get(rank as usize) {
        Some(&id) => RfcAnswer::Hit(id),
        None => RfcAnswer::NoMatch,
    }
}

impl Tables {
    /// The final-table value for `key` (whose chunks are read regardless of
    /// the domain; the caller checks it).
    #[inline]
    fn rank(&self, key: &FlowKey) -> u32 {
        let s = self.walk(key, self.steps.len());
        s[CHUNKS + self.steps.len() - 1]
    }

    /// Every slot's class for `key` through the first `steps` combine steps.
    #[inline(always)]
    fn walk(&self, key: &FlowKey, steps: usize) -> [u32; SLOTS] {
        let mut s = [0u32; SLOTS];
        let c = chunk_values(key);
        for i in 0..CHUNKS {
            s[i] = self.chunks[i][c[i] as usize] as u32;
        }
        for (k, st) in self.steps.iter().take(steps).enumerate() {
            let idx = s[st.a] as usize * st.nb as usize + s[st.b] as usize;
            s[CHUNKS + k] = match &st.table {
                CrossTable::U16(t) => t.get(idx).map_or(0, |&x| x as u32),
                CrossTable::U32(t) => t.get(idx).copied().unwrap_or(0),
            };
        }
        s
    }

    /// The lowest rank of a rule matching `key` that `keep` accepts:
    /// `Some(None)` when there is none, `None` when the candidates were not
    /// kept. The key must lie in the domain.
    fn rank_where(&self, key: &FlowKey, keep: &impl Fn(u32) -> bool) -> Option<Option<u32>> {
        let c = self.candidates.as_ref()?;
        let last = self.steps.len() - 1;
        let st = &self.steps[last];
        let s = self.walk(key, last);
        Some(c.first_where(s[st.a], s[st.b], keep))
    }

    /// Final-table values for up to [`BATCH`] keys, phase by phase:
    /// `out[i]` receives the value for `keys[i]`, or the smaller of it and
    /// the value already there when `keep_min` is set (merging the answers
    /// of several tables whose values are global ranks).
    #[inline]
    fn ranks_chunk(&self, keys: &[FlowKey], out: &mut [u32], keep_min: bool) {
        let n = keys.len();
        debug_assert!(n <= BATCH && out.len() >= n);
        // Rows are left uninitialised: zeroing 13 x 64 words per chunk of
        // keys was 3.5% of a batch reader's time. Phase 0 writes rows
        // 0..CHUNKS and step k row CHUNKS + k, each for the first `n` keys,
        // and step k reads only rows below CHUNKS + k (`split_at_mut`), so
        // every element read was written first.
        let mut s = [[MaybeUninit::<u32>::uninit(); BATCH]; SLOTS];
        // Phase 0: one pass over the keys, seven independent loads each.
        for (i, key) in keys.iter().enumerate() {
            let c = chunk_values(key);
            for j in 0..CHUNKS {
                // `c[j]` is a u16, the table length is 2^16: the check folds.
                s[j][i].write(self.chunks[j][c[j] as usize] as u32);
            }
        }
        // Later phases: each step is a tight loop over the batch.
        for (k, st) in self.steps.iter().enumerate() {
            let (inputs, outputs) = s.split_at_mut(CHUNKS + k);
            let (sa, sb) = (&inputs[st.a][..n], &inputs[st.b][..n]);
            let dst = &mut outputs[0][..n];
            let nb = st.nb as usize;
            match &st.table {
                CrossTable::U16(t) => {
                    for ((d, a), b) in dst.iter_mut().zip(sa).zip(sb) {
                        // SAFETY: rows below CHUNKS + k are written for the
                        // first `n` keys before this step (see above).
                        let (a, b) = unsafe { (a.assume_init(), b.assume_init()) };
                        let idx = a as usize * nb + b as usize;
                        debug_assert!(idx < t.len());
                        // SAFETY: `a` is a class id of slot `st.a` and `b` of
                        // slot `st.b` (every table stores only ids below its
                        // output class count), so a < na, b < nb and
                        // idx < na * nb == t.len() (build invariant).
                        d.write(unsafe { *t.get_unchecked(idx) } as u32);
                    }
                }
                CrossTable::U32(t) => {
                    for ((d, a), b) in dst.iter_mut().zip(sa).zip(sb) {
                        // SAFETY: as above: both rows are written for the
                        // first `n` keys.
                        let (a, b) = unsafe { (a.assume_init(), b.assume_init()) };
                        let idx = a as usize * nb + b as usize;
                        debug_assert!(idx < t.len());
                        // SAFETY: as above: idx < na * nb == t.len().
                        d.write(unsafe { *t.get_unchecked(idx) });
                    }
                }
            }
        }
        // The last row written: the last step's, or a chunk row if there
        // are no steps.
        let fin = &s[CHUNKS + self.steps.len() - 1][..n];
        for (o, r) in out.iter_mut().zip(fin) {
            // SAFETY: that row is written for the first `n` keys (above).
            let r = unsafe { r.assume_init() };
            *o = if keep_min { (*o).min(r) } else { r };
        }
    }
}

impl Rfc {
    /// Compile `rules` with the default configuration.
    pub fn build(rules: &[Rule]) -> Result<Rfc, RfcError> {
        Rfc::build_with(rules, &RfcConfig::default())
    }

    /// Compile `rules` with `config`.
    ///
    /// # Panics
    /// If `config.tree` is not a binary tree consuming every slot exactly
    /// once (a programming error, not data-driven).
    pub fn build_with(rules: &[Rule], config: &RfcConfig) -> Result<Rfc, RfcError> {
        let t0 = Instant::now();
        check_tree(&config.tree);
        let p = prepare(rules)?;
        let n = p.order.len();
        // Ranks are positions in `p.order`, which are below 2^32 because a
        // rule set that large could not be held in memory with its bitmaps.
        let all: Vec<u32> = (0..n as u32).collect();
        let (tables, mut stats) = build_tables(&p.conds, &all, n as u32, config)?;
        stats.build_time = t0.elapsed();
        Ok(Rfc {
            tables,
            ids: p.order.iter().map(|r| r.id).collect(),
            all_require_l3: p.all_require_l3,
            stats,
        })
    }

    /// Sizes and timing of the build.
    pub fn stats(&self) -> &RfcStats {
        &self.stats
    }

    /// Number of rules compiled.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// True when no rule was compiled.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The winning rule for `key`.
    pub fn lookup(&self, key: &FlowKey) -> RfcAnswer {
        if let Some(a) = outside(key, self.all_require_l3) {
            return a;
        }
        answer(&self.ids, self.tables.rank(key))
    }

    /// Look up every key of `keys`; `out[i]` receives the answer for
    /// `keys[i]`. Processes up to 64 keys phase by phase so the table loads
    /// of different keys overlap; allocates nothing.
    ///
    /// # Panics
    /// If `out` is shorter than `keys` (a caller bug, not packet-driven).
    pub fn lookup_batch(&self, keys: &[FlowKey], out: &mut [RfcAnswer]) {
        assert!(out.len() >= keys.len(), "lookup_batch: output too short");
        let mut ranks = [0u32; BATCH];
        for (kc, oc) in keys.chunks(BATCH).zip(out.chunks_mut(BATCH)) {
            self.tables.ranks_chunk(kc, &mut ranks, false);
            for ((o, key), &rank) in oc.iter_mut().zip(kc).zip(ranks.iter()) {
                *o = match outside(key, self.all_require_l3) {
                    Some(a) => a,
                    None => answer(&self.ids, rank),
                };
            }
        }
    }
}

/// The seven chunk values of a key, in slot order (read straight from the
/// key words; layout pinned by the const assertions above).
#[inline(always)]
fn chunk_values(key: &FlowKey) -> [u16; CHUNKS] {
    let w5 = key.words[5];
    let w6 = key.words[6];
    [
        (w5 >> 16) as u16,
        w5 as u16,
        (w5 >> 48) as u16,
        (w5 >> 32) as u16,
        w6 as u16,
        (w6 >> 16) as u16,
        ((w6 >> 32) as u8) as u16,
    ]
}

/// Panics unless `tree` is a binary reduction tree over the slots.
fn check_tree(tree: &[(u8, u8)]) {
    assert!(
        tree.len() == MAX_STEPS,
        "RFC tree must have exactly {MAX_STEPS} steps"
    );
    let mut used = [false; SLOTS];
    for (i, &(a, b)) in tree.iter().enumerate() {
        let made = CHUNKS + i;
        for x in [a as usize, b as usize] {
            assert!(x < made, "step {i} reads slot {x} before it exists");
            assert!(!used[x], "slot {x} consumed twice");
            used[x] = true;
        }
    }
    assert!(
        used[..SLOTS - 1].iter().all(|&u| u),
        "every slot but the last must be consumed"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cond_folds_prefixes_and_intersects_ranges() {
        let c = Cond::new(16, 0x1200, 0xff00, 0, 0xffff).unwrap();
        assert_eq!((c.lo, c.hi, c.mask), (0x1200, 0x12ff, 0));
        let c = Cond::new(16, 0x1200, 0xff00, 0x1280, 0x2000).unwrap();
        assert_eq!((c.lo, c.hi, c.mask), (0x1280, 0x12ff, 0));
        assert!(Cond::new(16, 0x1200, 0xff00, 0x1300, 0x2000).is_none());
        let c = Cond::new(16, 1, 1, 10, 20).unwrap();
        assert!(c.accepts(11) && !c.accepts(12) && !c.accepts(21));
    }

    #[test]
    #[should_panic(expected = "consumed twice")]
    fn bad_tree_panics() {
        check_tree(&[(0, 1), (0, 2), (3, 4), (5, 6), (7, 8), (9, 10)]);
    }
}
