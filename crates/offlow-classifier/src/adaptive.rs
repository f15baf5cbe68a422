//! The table classifier: picks the fastest structure the rules allow.
//!
//! What: [`Classifier`] is what an OpenFlow table holds. It always keeps one
//! *complete, incremental* structure that serves every update at once:
//!
//! - [`TupleMerge`] for general masked rules (the default),
//! - [`FibClassifier`] (DIR-24-8) when every rule is an `ipv4_dst` prefix
//!   whose priority rises with its length — a FIB, or
//! - a self-sufficient RFC [`Snapshot`] (below).
//!
//! [`Classifier::compile`] builds an [`RfcSet`] snapshot of the rule set
//! (one or more RFC table sets over disjoint subsets of the rules) when
//! every rule is an IPv4 5-tuple rule and the tables fit the budget. The
//! snapshot survives later updates through an overlay ([`Snapshot`]):
//! removed rules are skipped, rules inserted again are recognised, and new
//! ones are served beside the tables. When it kept its candidate lists
//! ([`RfcSnapshot::self_sufficient`]) it needs nothing else and TupleMerge
//! is dropped: an update then costs a bit flip or a hash lookup instead of
//! a TupleMerge removal or insertion (a writer flat out went from ~1M to
//! 10-16M operations per second on the WUSTL 10K sets, BENCHMARKS.md).
//! Otherwise TupleMerge stays beside it and answers the keys the tables
//! cannot. When the overlay grows past its
//! bound the snapshot is dropped (a self-sufficient one first rebuilds
//! TupleMerge from its live rules) and lookups go to TupleMerge until the
//! owner compiles again. DPDK's rte_acl rebuilds on every change; here
//! updates never wait for a rebuild and lookups never stop.
//!
//! Invariants:
//! - exactly one complete structure holds every rule (`mode`);
//! - a snapshot, when present, was built from a rule set its overlay has
//!   followed through every later mutation, so its answers equal the
//!   complete structure's; beside TupleMerge, keys it cannot answer go to
//!   TupleMerge; alone, it can answer them all;
//! - FIB mode is entered only by [`Classifier::compile`] (a 64 MiB table is
//!   not worth it for small tables) and left, by migrating every rule into
//!   TupleMerge, as soon as a rule arrives that the FIB would refuse.
//!
//! Thread-safety: a single-writer structure, `Send + Sync`, `Clone` (the
//! compiled snapshot is shared between clones through an `Arc`), meant to be
//! wrapped by [`offlow_sync::Versioned`] (or a pipeline that is) for concurrent
//! readers.

use std::sync::{Arc, Mutex, PoisonError};

use crate::{
    Classify, FibClassifier, FibRoutes, Field, FlowKey, Match, OverlayStats, RfcError, RfcRank,
    RfcSet, RfcSetConfig, RfcSnapshot, Rule, RuleId, Snapshot, TupleMerge,
};

/// Tuning of [`Classifier::compile`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassifierConfig {
    /// Switch to the DIR-24-8 FIB when every rule is FIB-shaped and there are
    /// at least this many (its first table costs 64 MiB).
    pub fib_min_rules: usize,
    /// Compile an RFC snapshot only for tables with at least this many rules
    /// (below it TupleMerge is already a handful of probes).
    pub rfc_min_rules: usize,
    /// ... and at most this many. Past it an RFC build rarely fits a
    /// budget, and finding that out costs long enough to matter to an
    /// owner that compiles on its control thread: a 512K-route table with
    /// one non-route rule took 52 s to be refused.
    pub rfc_max_rules: usize,
    /// Memory budget of one RFC snapshot (all its parts), in bytes.
    pub rfc_budget: usize,
}

impl Default for ClassifierConfig {
    fn default() -> Self {
        ClassifierConfig {
            fib_min_rules: 4096,
            rfc_min_rules: 16,
            rfc_max_rules: 65_536,
            rfc_budget: RfcSetConfig::default().total_budget,
        }
    }
}

/// Which complete structure holds the rules.
// One per table: keeping TupleMerge and the snapshot inline saves a pointer
// chase on every lookup; the FIB (rarely used, large) is boxed.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
enum Mode {
    /// TupleMerge holds every rule; an RFC snapshot, when there is one,
    /// answers lookups and leaves TupleMerge the keys it cannot answer.
    Tuple(TupleMerge, Option<Snapshot>),
    /// A self-sufficient RFC snapshot ([`RfcSnapshot::self_sufficient`])
    /// holds every rule itself: updates cost no TupleMerge work.
    Rfc(Snapshot),
    Fib(Box<FibClassifier>),
}

/// What [`Classifier::compile`] ended up with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Compiled {
    /// The rules are served by the DIR-24-8 FIB.
    Fib,
    /// An RFC snapshot accelerates lookups until the next change.
    Rfc {
        /// Bytes of lookup tables.
        table_bytes: usize,
        /// Number of RFC table sets (rule subsets) in the snapshot.
        parts: usize,
        /// Bytes of the candidate lists kept beside the tables (what lets
        /// the snapshot skip removed rules; 0 when they did not fit).
        candidate_bytes: usize,
    },
    /// No accelerator applies; TupleMerge serves lookups.
    None {
        /// Why not (shape, size, or too few rules).
        reason: String,
    },
}

/// What [`Classifier::build`] made, for [`Classifier::install`].
#[derive(Debug, Clone)]
pub enum Built {
    /// Every rule in a DIR-24-8 FIB (each classifier gets its own copy:
    /// it updates it in place).
    Fib(Arc<FibCopies>),
    /// An RFC snapshot of the current rules (shared).
    Rfc(Arc<RfcSnapshot>),
    /// Already served by the FIB; nothing to change.
    Unchanged,
    /// No accelerator applies (why); remembered until the next mutation.
    Nothing(String),
}

/// A built FIB and the copies of it made where it was built, one per
/// classifier that will install it but the last: each install takes a copy
/// ([`take`](Self::take)) instead of copying the FIB then. Copying a
/// 512K-route FIB (its DIR-24-8 tables alone are 64 MiB) took 0.1-0.2 s;
/// made on the build's thread, that time is no longer spent by whoever
/// installs (the switch's control thread, which answers the controller).
#[derive(Debug)]
pub struct FibCopies {
    fib: FibClassifier,
    spares: Mutex<Vec<FibClassifier>>,
}

impl FibCopies {
    /// `fib` and `spares` copies of it.
    fn new(fib: FibClassifier, spares: usize) -> FibCopies {
        let copies = (0..spares).map(|_| fib.clone()).collect();
        FibCopies {
            fib,
            spares: Mutex::new(copies),
        }
    }

    /// A copy for one install: a spare while there are any, else a new one.
    pub fn take(&self) -> FibClassifier {
        let spare = self
            .spares
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        spare.unwrap_or_else(|| self.fib.clone())
    }

    /// The last install: a spare if one is left, else the FIB itself.
    fn into_last(self) -> FibClassifier {
        let mut spares = self
            .spares
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        spares.pop().unwrap_or(self.fib)
    }

    /// Copies made beforehand that no install has taken yet.
    #[cfg(test)]
    fn spares_left(&self) -> usize {
        self.spares
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// A classifier's rules and settings, copied out so that its accelerator
/// can be built away from it ([`Classifier::build_input`]). Only what a
/// build can use is copied: FIB-shaped rules as compact routes, other
/// rules only when RFC could take that many.
#[derive(Debug, Clone)]
pub struct BuildInput {
    what: Input,
    config: ClassifierConfig,
}

#[derive(Debug, Clone)]
enum Input {
    /// Already served by the FIB.
    InFib,
    /// Every rule FIB-shaped, and enough of them for the FIB.
    Routes(FibRoutes),
    /// Rules for an RFC build.
    Rules(Vec<Rule>),
    /// Nothing can be built (why).
    Nothing(String),
}

impl BuildInput {
    /// The fastest structure these rules allow: the FIB if every rule is
    /// FIB-shaped (and there are enough), else an RFC snapshot if it fits.
    pub fn build(&self) -> Built {
        self.build_for(1)
    }

    /// [`build`](Self::build) for `installs` classifiers (two for a
    /// left-right pair): a FIB comes with `installs - 1` copies made here,
    /// so that installing it copies nothing.
    pub fn build_for(&self, installs: usize) -> Built {
        match &self.what {
            Input::InFib => Built::Unchanged,
            Input::Nothing(reason) => Built::Nothing(reason.clone()),
            Input::Routes(routes) => match FibClassifier::from_routes(routes) {
                Ok(fib) => Built::Fib(Arc::new(FibCopies::new(fib, installs.saturating_sub(1)))),
                // Refused (priorities out of LPM order): RFC, if it may.
                Err(_) => match rfc_refusal(&self.config, routes.len()) {
                    Some(reason) => Built::Nothing(reason),
                    None => self.rfc(&routes.rules().collect::<Vec<_>>()),
                },
            },
            Input::Rules(rules) => self.rfc(rules),
        }
    }

    fn rfc(&self, rules: &[Rule]) -> Built {
        let cfg = RfcSetConfig {
            total_budget: self.config.rfc_budget,
            ..RfcSetConfig::default()
        };
        match RfcSet::build_with(rules, &cfg) {
            Ok(rfc) => Built::Rfc(Arc::new(RfcSnapshot::new(rfc, rules))),
            Err(e) => Built::Nothing(RfcError::to_string(&e)),
        }
    }
}

/// Why RFC is not tried on `n` rules under `config`, if it is not.
fn rfc_refusal(config: &ClassifierConfig, n: usize) -> Option<String> {
    if n < config.rfc_min_rules {
        Some(format!("{n} rules (< {} for RFC)", config.rfc_min_rules))
    } else if n > config.rfc_max_rules {
        Some(format!("{n} rules (> {} for RFC)", config.rfc_max_rules))
    } else {
        None
    }
}

/// The classifier an OpenFlow table holds; see the module documentation.
#[derive(Debug, Clone)]
pub struct Classifier {
    mode: Mode,
    config: ClassifierConfig,
    /// Bumped by every mutation; lets owners tell whether a compile is stale.
    generation: u64,
    /// The generation at which [`Classifier::compile`] last found nothing
    /// to build: compiling again before a mutation would fail the same way.
    failed_at: Option<u64>,
}

impl Default for Classifier {
    fn default() -> Self {
        Classifier::with_config(ClassifierConfig::default())
    }
}

impl Classifier {
    /// An empty classifier with default tuning.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty classifier with the given tuning.
    pub fn with_config(config: ClassifierConfig) -> Self {
        Classifier {
            mode: Mode::Tuple(TupleMerge::new(), None),
            config,
            generation: 0,
            failed_at: None,
        }
    }

    /// Mutation counter (for "has anything changed since I compiled?").
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// A short name of the structure serving lookups now: `"fib"`, `"rfc"`
    /// or `"tuple"`.
    pub fn serving(&self) -> &'static str {
        match &self.mode {
            Mode::Fib(_) => "fib",
            Mode::Tuple(_, Some(_)) | Mode::Rfc(_) => "rfc",
            Mode::Tuple(_, None) => "tuple",
        }
    }

    /// True when a TupleMerge of every rule is kept (and updated): always,
    /// but with the FIB or a self-sufficient RFC snapshot.
    pub fn keeps_tuple(&self) -> bool {
        matches!(self.mode, Mode::Tuple(..))
    }

    /// The RFC snapshot serving lookups, if one is.
    fn snapshot(&self) -> Option<&Snapshot> {
        match &self.mode {
            Mode::Tuple(_, s) => s.as_ref(),
            Mode::Rfc(s) => Some(s),
            Mode::Fib(_) => None,
        }
    }

    /// In FIB mode, for a route the FIB would serve: the route with the
    /// longest prefix covering it, if any (see
    /// [`FibClassifier::nearest_cover`]). `None` when there is no such
    /// answer: a caller falls back to a general overlap search.
    pub fn fib_nearest_cover(&self, rule: &Rule) -> Option<Option<RuleId>> {
        match &self.mode {
            Mode::Fib(f) => f.nearest_cover(rule),
            Mode::Tuple(..) | Mode::Rfc(_) => None,
        }
    }

    /// True when the fastest structure serves exactly the current rules:
    /// the FIB, or an RFC snapshot with nothing changed since its build (a
    /// snapshot with an overlay serves, but a compile would absorb it).
    pub fn is_compiled(&self) -> bool {
        self.snapshot().is_some_and(Snapshot::is_clean) || matches!(self.mode, Mode::Fib(_))
    }

    /// What changed since the RFC snapshot in use was built, if one is.
    pub fn overlay(&self) -> Option<OverlayStats> {
        self.snapshot().map(Snapshot::stats)
    }

    /// Every rule held (no particular order).
    pub fn rules(&self) -> Vec<Rule> {
        match &self.mode {
            Mode::Tuple(t, _) => t.rules().cloned().collect(),
            Mode::Rfc(s) => s.rules().collect(),
            Mode::Fib(f) => f.rules().collect(),
        }
    }

    /// Pick and build the fastest structure for the current rules: the FIB
    /// if every rule is FIB-shaped (and there are enough of them), else an
    /// RFC snapshot if every rule is a 5-tuple rule and it fits the budget.
    ///
    /// A compile that found no accelerator is remembered: compiling again
    /// before the next mutation returns at once (an owner that compiles
    /// whenever its tables are quiet does not rebuild a failing RFC).
    pub fn compile(&mut self) -> Compiled {
        self.install_owned(self.build())
    }

    /// [`install`](Self::install), taking the build: a FIB no one else
    /// holds moves in instead of being copied (64 MiB and more).
    pub fn install_owned(&mut self, built: Built) -> Compiled {
        match built {
            Built::Fib(fib) => {
                if !matches!(self.mode, Mode::Fib(_)) {
                    self.set_fib(
                        Arc::try_unwrap(fib)
                            .map_or_else(|shared| shared.take(), FibCopies::into_last),
                    );
                }
                Compiled::Fib
            }
            built => self.install(&built),
        }
    }

    /// What [`compile`](Self::compile) would install, built without
    /// changing `self`: an owner with two equal copies (a left-right pair)
    /// builds once from one and installs the result in both.
    pub fn build(&self) -> Built {
        match self.build_input() {
            Some(input) => input.build(),
            None => Built::Nothing("unchanged since the last compile found no accelerator".into()),
        }
    }

    /// What [`build`](Self::build) reads, copied out: build it on another
    /// thread while this classifier keeps serving and changing, then
    /// install the result only if [`generation`](Self::generation) is still
    /// what it was when this was called. `None` when a build would find
    /// nothing new (the last compile at this generation found no
    /// accelerator).
    pub fn build_input(&self) -> Option<BuildInput> {
        if self.failed_at == Some(self.generation) {
            return None;
        }
        let config = self.config;
        let what = match &self.mode {
            Mode::Fib(_) => Input::InFib,
            Mode::Tuple(t, _) => input_of(
                &config,
                t.len(),
                || FibClassifier::routes_of(t.rules()),
                || t.rules().cloned().collect(),
            ),
            Mode::Rfc(s) => {
                // At most `rfc_max_rules`: copying them out first is cheap.
                let rules: Vec<Rule> = s.rules().collect();
                input_of(
                    &config,
                    rules.len(),
                    || FibClassifier::routes_of(rules.iter()),
                    || rules.clone(),
                )
            }
        };
        Some(BuildInput { what, config })
    }

    /// Install what [`build`](Self::build) made from a classifier equal to
    /// this one (the same rules, inserted and removed in the same order):
    /// the caller guarantees it. A FIB is copied in (each copy updates its
    /// own: a spare made by [`BuildInput::build_for`] if one is left), an
    /// RFC snapshot shared.
    pub fn install(&mut self, built: &Built) -> Compiled {
        match built {
            Built::Fib(fib) => {
                if !matches!(self.mode, Mode::Fib(_)) {
                    self.set_fib(fib.take());
                }
                Compiled::Fib
            }
            Built::Rfc(snapshot) => {
                let fresh = Snapshot::new(Arc::clone(snapshot));
                let alone = snapshot.self_sufficient();
                self.mode =
                    match std::mem::replace(&mut self.mode, Mode::Tuple(TupleMerge::new(), None)) {
                        // Built from a FIB's rules (the caller's contract says
                        // it was not): keep serving from the FIB.
                        Mode::Fib(f) => Mode::Fib(f),
                        Mode::Tuple(..) | Mode::Rfc(_) if alone => Mode::Rfc(fresh),
                        Mode::Tuple(t, _) => Mode::Tuple(t, Some(fresh)),
                        Mode::Rfc(old) => Mode::Tuple(tuple_of(old.rules()), Some(fresh)),
                    };
                let rfc = snapshot.rfc();
                Compiled::Rfc {
                    table_bytes: rfc.stats().table_bytes,
                    parts: rfc.parts(),
                    candidate_bytes: rfc.stats().candidate_bytes(),
                }
            }
            Built::Unchanged => Compiled::Fib,
            Built::Nothing(reason) => {
                self.failed_at = Some(self.generation);
                Compiled::None {
                    reason: reason.clone(),
                }
            }
        }
    }

    /// Serve every rule from `fib` (built from exactly the current rules).
    fn set_fib(&mut self, fib: FibClassifier) {
        self.mode = Mode::Fib(Box::new(fib));
    }

    /// The installed RFC snapshot, if any.
    pub fn compiled(&self) -> Option<&Arc<RfcSnapshot>> {
        self.snapshot().map(Snapshot::base)
    }

    fn changed(&mut self) {
        self.generation = self.generation.wrapping_add(1);
    }

    /// Hint: start loading what an insert or removal of rule `id` will
    /// read first, so its cache miss overlaps the caller's other work.
    /// Changes nothing.
    #[inline]
    pub fn prefetch(&self, id: RuleId) {
        if let Mode::Fib(f) = &self.mode {
            f.prefetch(id);
        }
    }

    /// Later stages of [`prefetch`](Self::prefetch) for an update of `id`
    /// coming `stage` updates from now (see [`FibClassifier::prefetch_near`]).
    #[inline]
    pub fn prefetch_near(&self, id: RuleId, stage: usize) {
        if let Mode::Fib(f) = &self.mode {
            f.prefetch_near(id, stage);
        }
    }

    /// The same for an update of a rule matching `m`, taking its prefix
    /// from the `ipv4_dst` field (only a hint: a match the FIB would not
    /// serve just loads a line or two for nothing).
    #[inline]
    pub fn prefetch_match(&self, m: &Match, stage: usize) {
        if let Mode::Fib(f) = &self.mode {
            let (value, mask) = m.field(Field::Ipv4Dst);
            // The field is 32 bits wide: lossless.
            let len = (mask as u32).leading_ones() as u8;
            f.prefetch_prefix(value as u32, len, stage);
        }
    }

    /// Leave FIB mode: move every rule into TupleMerge.
    fn migrate_to_tuple(&mut self) {
        if let Mode::Fib(f) = &self.mode {
            self.mode = Mode::Tuple(tuple_of(f.rules()), None);
        }
    }
}

impl Classify for Classifier {
    fn insert(&mut self, rule: Rule) {
        self.changed();
        match &mut self.mode {
            Mode::Tuple(t, snapshot) => {
                if let Some(s) = snapshot {
                    if !s.insert(&rule) {
                        *snapshot = None;
                    }
                }
                t.insert(rule)
            }
            Mode::Rfc(s) => {
                if !s.insert(&rule) {
                    // The overlay outgrew its bound: every rule (this one
                    // included) into TupleMerge, which serves until the
                    // next compile. The one full build a snapshot's life
                    // can cost, after at least an eighth of its rules
                    // arrived unrecognised.
                    self.mode = Mode::Tuple(tuple_of(s.rules()), None);
                }
            }
            Mode::Fib(f) => {
                if let Err((_refused, rule)) = f.insert_or_return(rule) {
                    // `try_insert` removed any rule with this id; the
                    // migration carries the rest over and the new rule
                    // follows.
                    self.migrate_to_tuple();
                    if let Mode::Tuple(t, _) = &mut self.mode {
                        t.insert(rule);
                    }
                }
            }
        }
    }

    fn remove(&mut self, id: RuleId) -> Option<Rule> {
        let removed = match &mut self.mode {
            Mode::Tuple(t, snapshot) => t.remove(id).inspect(|_| {
                if let Some(s) = snapshot {
                    s.remove(id);
                }
            }),
            Mode::Rfc(s) => s.take(id),
            Mode::Fib(f) => f.remove(id),
        };
        if removed.is_some() {
            self.changed();
        }
        removed
    }

    fn discard(&mut self, id: RuleId) -> bool {
        let removed = match &mut self.mode {
            Mode::Tuple(t, snapshot) => {
                let held = t.discard(id);
                if let Some(s) = snapshot.as_mut().filter(|_| held) {
                    s.remove(id);
                }
                held
            }
            Mode::Rfc(s) => s.remove(id),
            Mode::Fib(f) => f.discard(id),
        };
        if removed {
            self.changed();
        }
        removed
    }

    #[inline]
    fn lookup(&self, key: &FlowKey) -> Option<RuleId> {
        match &self.mode {
            Mode::Fib(f) => f.lookup(key),
            Mode::Tuple(t, None) => t.lookup(key),
            Mode::Tuple(t, Some(s)) => s.lookup(key, Some(t)),
            Mode::Rfc(s) => s.lookup(key, None),
        }
    }

    fn lookup_batch(&self, keys: &[FlowKey], out: &mut [Option<RuleId>]) {
        assert!(out.len() >= keys.len(), "lookup_batch: output too short");
        match &self.mode {
            Mode::Fib(f) => f.lookup_batch(keys, out),
            Mode::Tuple(t, None) => t.lookup_batch(keys, out),
            Mode::Tuple(t, Some(s)) => snapshot_batch(s, Some(t), keys, out),
            Mode::Rfc(s) => snapshot_batch(s, None, keys, out),
        }
    }

    fn len(&self) -> usize {
        match &self.mode {
            Mode::Tuple(t, _) => t.len(),
            Mode::Rfc(s) => s.len(),
            Mode::Fib(f) => f.len(),
        }
    }

    fn get(&self, id: RuleId) -> Option<Rule> {
        match &self.mode {
            Mode::Tuple(t, _) => t.get(id),
            Mode::Rfc(s) => s.get(id),
            Mode::Fib(f) => f.get(id),
        }
    }
}

/// Batched lookups through snapshot `s` (`complete`: see
/// [`Snapshot::lookup`]).
fn snapshot_batch(
    s: &Snapshot,
    complete: Option<&TupleMerge>,
    keys: &[FlowKey],
    out: &mut [Option<RuleId>],
) {
    // Chunks of a fixed size keep the answer scratch on the stack (no
    // allocation per batch).
    const CHUNK: usize = 64;
    let mut answers = [RfcRank::NoMatch; CHUNK];
    for (kc, oc) in keys.chunks(CHUNK).zip(out.chunks_mut(CHUNK)) {
        let answers = &mut answers[..kc.len()];
        s.rfc().rank_batch(kc, answers);
        for ((k, a), o) in kc.iter().zip(answers.iter()).zip(oc.iter_mut()) {
            *o = s.resolve(k, *a, complete);
        }
    }
}

/// A TupleMerge of `rules`.
fn tuple_of(rules: impl Iterator<Item = Rule>) -> TupleMerge {
    let mut t = TupleMerge::new();
    for r in rules {
        t.insert(r);
    }
    t
}

/// What a build can use of `n` rules: `routes` gives them as FIB routes
/// (if they all are), `rules` copies them out; each is called only if
/// needed.
fn input_of(
    config: &ClassifierConfig,
    n: usize,
    routes: impl FnOnce() -> Option<FibRoutes>,
    rules: impl FnOnce() -> Vec<Rule>,
) -> Input {
    let routes = (n >= config.fib_min_rules).then(routes).flatten();
    match (routes, rfc_refusal(config, n)) {
        (Some(routes), _) => Input::Routes(routes),
        (None, None) => Input::Rules(rules()),
        (None, Some(reason)) => Input::Nothing(reason),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Field, Match};

    fn unchanged(c: &Compiled) -> bool {
        matches!(c, Compiled::None { reason } if reason.starts_with("unchanged"))
    }

    #[test]
    fn a_compile_that_finds_nothing_is_not_redone_before_a_change() {
        let mut c = Classifier::new();
        // Ethernet-source rules: neither a FIB nor IPv4 5-tuple rules.
        for i in 0..20u32 {
            let mut m = Match::ANY;
            m.set_exact(Field::EthSrc, u128::from(i) + 1);
            c.insert(Rule::new(i, i, m));
        }
        let first = c.compile();
        assert!(matches!(first, Compiled::None { .. }) && !unchanged(&first));
        assert!(unchanged(&c.compile()));
        assert!(unchanged(&c.compile()));
        c.remove(3);
        let again = c.compile();
        assert!(matches!(again, Compiled::None { .. }) && !unchanged(&again));
        assert_eq!(c.serving(), "tuple");
    }

    /// An ACL rule on destination `i` (a /24 per rule), with a port range
    /// on odd `i`: RFC-shaped.
    fn acl_rule(id: RuleId, i: u32, priority: u32) -> Rule {
        let mut m = Match::ANY;
        m.set_exact(Field::EthType, 0x0800);
        m.set_prefix(Field::Ipv4Dst, u128::from(0x0a00_0000 | (i << 8)), 24);
        let r = Rule::new(id, priority, m);
        if i % 2 == 1 {
            r.with_ports(crate::PortRange::ANY, crate::PortRange { lo: 0, hi: 1023 })
        } else {
            r
        }
    }

    fn acl_key(i: u32, port: u16) -> FlowKey {
        let mut k = FlowKey::ZERO;
        k.set(Field::EthType, 0x0800);
        k.set(Field::Ipv4Dst, u128::from(0x0a00_0000 | (i << 8) | 9));
        k.set(Field::TcpDst, u128::from(port));
        k.add_presence(offlow_flow::key::present::L3 | offlow_flow::key::present::L4);
        k
    }

    #[test]
    fn a_snapshot_serves_until_its_overlay_outgrows_the_bound() {
        let mut c = Classifier::new();
        let mut lin = crate::LinearClassifier::new();
        let mut both = |c: &mut Classifier, r: Rule| {
            lin.insert(r.clone());
            c.insert(r);
        };
        // 200 rules on 100 destinations: a covering /24 and a ported one.
        for i in 0..100u32 {
            both(&mut c, acl_rule(2 * i, i, 10));
            both(&mut c, acl_rule(2 * i + 1, i | 1, 20 + i));
        }
        assert!(
            matches!(c.compile(), Compiled::Rfc { candidate_bytes, .. } if candidate_bytes > 0)
        );
        assert!(c.is_compiled());
        assert!(
            !c.keeps_tuple(),
            "a snapshot with candidate lists serves alone"
        );
        let keys: Vec<FlowKey> = (0..100u32)
            .flat_map(|i| [acl_key(i, 80), acl_key(i, 8080)])
            .collect();
        // New rules on destinations 100.., each at a priority above every
        // compiled one: served beside the tables until there are more than
        // 64 of them (200 / 8 < 64), then the snapshot goes.
        for n in 0..80u32 {
            let i = 100 + n;
            lin.insert(acl_rule(1000 + n, i, 500));
            c.insert(acl_rule(1000 + n, i, 500));
            let overlay = c.overlay();
            if n < 64 {
                assert_eq!(c.serving(), "rfc", "after {} new rules", n + 1);
                assert_eq!(overlay.map(|o| o.added), Some(n as usize + 1));
                assert!(!c.is_compiled(), "an overlay asks for a compile");
                assert!(!c.keeps_tuple());
            } else {
                // TupleMerge was rebuilt from the snapshot's live rules.
                assert_eq!(c.serving(), "tuple", "after {} new rules", n + 1);
                assert_eq!(overlay, None);
                assert!(c.keeps_tuple());
            }
            assert_eq!(c.len(), lin.len());
            for k in keys.iter().chain(&[acl_key(i, 80), acl_key(i, 8080)]) {
                assert_eq!(
                    c.lookup(k),
                    lin.lookup(k),
                    "after {} new rules, key {k:?}",
                    n + 1
                );
            }
        }
        // A compile absorbs everything again, and TupleMerge goes.
        assert!(matches!(c.compile(), Compiled::Rfc { .. }));
        assert!(c.is_compiled());
        assert!(!c.keeps_tuple());
        for k in &keys {
            assert_eq!(c.lookup(k), lin.lookup(k));
        }
        // Removing a rule and putting the same rule back leaves nothing to
        // compile.
        let r = acl_rule(7, 3 | 1, 23);
        assert_eq!(c.get(7), Some(r.clone()));
        c.remove(7);
        assert!(!c.is_compiled());
        c.insert(r);
        assert!(c.is_compiled(), "{:?}", c.overlay());
    }

    #[test]
    fn a_fib_built_for_two_installs_copies_nothing_when_installed() {
        let config = ClassifierConfig {
            fib_min_rules: 16,
            ..ClassifierConfig::default()
        };
        let mut first = Classifier::with_config(config);
        for i in 0..64u32 {
            let mut m = Match::ANY;
            m.set_exact(Field::EthType, 0x0800);
            m.set_prefix(Field::Ipv4Dst, u128::from(i) << 24, 8);
            // Priority rising with prefix length: FIB-shaped.
            first.insert(Rule::new(i, 8, m));
        }
        let mut second = first.clone();
        let input = first.build_input().expect("uncompiled FIB-shaped rules");
        let Built::Fib(copies) = input.build_for(2) else {
            panic!("64 /8 routes build a FIB");
        };
        assert_eq!(copies.spares_left(), 1);
        // The first install takes the spare; the last moves the FIB in.
        first.install(&Built::Fib(Arc::clone(&copies)));
        assert_eq!(copies.spares_left(), 0);
        second.install_owned(Built::Fib(copies));
        for c in [&first, &second] {
            assert_eq!(c.serving(), "fib");
            for i in 0..64u32 {
                let mut k = FlowKey::ZERO;
                k.set(Field::EthType, 0x0800);
                k.set(Field::Ipv4Dst, (u128::from(i) << 24) | 7);
                k.add_presence(offlow_flow::key::present::L3);
                assert_eq!(c.lookup(&k), Some(i), "route {i}");
            }
        }
    }
}
