//! The offload tier as the switch runs it: which microflows an
//! [`OffloadBackend`] serves, kept consistent with the flow table and
//! counted into the OpenFlow counters.
//!
//! # What it does
//! - **Placement.** Packet workers sample the flows they forward
//!   ([`offlow_offload::Sampler`], handed over with their statistics);
//!   every [`OffloadTier::tick`] feeds those estimates and the backend's
//!   exact per-entry counters to [`Placement`], and carries out its plan:
//!   each flow to offload is looked up in the writer's pipeline, its
//!   action list compiled ([`offlow_offload::compile`]) and checked against
//!   the backend's capabilities; a refusal keeps it in software with the
//!   reason, which `offlow trace` shows.
//! - **Megaflows.** Where the backend holds masks (`Capabilities::masks`),
//!   a sampled microflow is placed under the match of every microflow that
//!   agrees with it on the bits its walk looked at
//!   ([`Pipeline::walk_mask`], [`offlow_offload::mask`]): under a
//!   controller that installs one rule per host pair, every new connection
//!   of the pair is then served by one entry from its first frame, where
//!   an exact entry would serve none (each is a few frames, never hot). A
//!   decision through a group (a bucket per flow hash), or a mask the
//!   backend has no room for, places the microflow exactly. A masked entry
//!   is revalidated like any other; rules that come to look at bits
//!   outside its mask refuse it (`decide`), and its microflows map to a
//!   finer match at the next tick.
//! - **Consistency (DESIGN invariant 3).** Each flow-mod's effect marks the
//!   rules it changed and the tables it added to; at the next publish
//!   ([`OffloadTier::revalidate`]) every offloaded entry whose walk used a
//!   changed rule, or visited a table that gained one, is looked up again:
//!   unchanged entries stay, the others are removed and (if still
//!   offloadable) installed anew. The adapter's commit ticket completes
//!   only when the backend has applied that batch ([`OffloadTier::done`]),
//!   so a barrier reply follows it; the backend's contract is that no frame
//!   uses an old program once the call returns.
//! - **Counters (DESIGN invariant 4).** The backend's cumulative per-entry
//!   counters are read every tick and before each statistics reply
//!   ([`OffloadTier::request_counters`]); each delta is credited to the
//!   rules and tables of the entry's walk ([`Pipeline::credit`]) and to its
//!   ports, and a removed entry's final counters to the walk it had. An
//!   entry that hands frames to a CPU (the `SetWorkers` action) credits
//!   nothing: the worker that gets the frame counts it.
//! - **Ports.** A port configured `no_recv`, `no_fwd` or `port_down` takes
//!   its entries (in or out) back to software and is refused until
//!   cleared: the userspace path applies those bits.
//!   A port whose interface disappears (deleted, or re-created under its
//!   name: a new index the backend's maps do not hold, and no program on
//!   it) takes its entries back the same way, for the life of the tier
//!   ([`OffloadTier::port_lost`]): an entry redirecting to the old index
//!   would drop every frame in the kernel.
//! - **Tunnel ports** ([`offlow_offload::tunnel`]): a frame decapsulated on
//!   a tunnel port is sampled, placed and looked up under its inner key
//!   (in_port the tunnel, `tunnel_id` its key), and an entry may output
//!   to a tunnel; the backend declares which tunnels it serves and how
//!   (`Capabilities::tunnels`). A tunnel's entries depend on its underlay
//!   too: a tunnel is usable only while its underlay is, and a blocked or
//!   lost underlay takes its tunnels' entries back to software with its
//!   own. Frames served through a tunnel are credited to the tunnel port
//!   (as the inner frame's bytes), not to the underlay.
//!
//! The backend itself runs on a thread of its own (`thread.rs`): the
//! control loop sends it batches and collects answers without waiting.
//!
//! Thread-safety: owned by the control loop's thread, like the adapter.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use offlow_datapath::microflow::flow_hash;
use offlow_offload::{
    compile, EntryCounters, OffloadBackend, OffloadError, OffloadKey, OffloadMask, OffloadMatch,
    OffloadProgram, Placement, PlacementConfig, Refusal, Tier, Verdict,
};
use offlow_pipeline::group::GroupUse;
use offlow_pipeline::{FlowCounters, FlowModEffect, FlowModFlags, PathStep, Pipeline, RuleId};
use std::sync::Arc;
use tracing::{info, warn};

mod thread;

use thread::{BackendLink, Cmd, Done, Gen};

/// How often the tier re-plans and reads the backend's counters.
pub const OFFLOAD_TICK: Duration = Duration::from_millis(100);

/// Longest blocking wait for the backend (a barrier without a ticket, a
/// statistics reply's counter read).
pub const BACKEND_WAIT: Duration = Duration::from_secs(1);

/// What the tier has done, for the demo and logs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OffloadStats {
    /// Entries the backend serves now.
    pub entries: u64,
    /// Frames served by offloaded entries (credited so far).
    pub hits: u64,
    /// Their bytes.
    pub hit_bytes: u64,
    /// Installs that succeeded.
    pub installs: u64,
    /// Removals (placement, rule changes, port configuration).
    pub removals: u64,
    /// Entries replaced or removed because a rule change altered their
    /// decision.
    pub revalidated: u64,
    /// Flows placement chose that stayed in software (refused by the
    /// compiler or the backend).
    pub refused: u64,
    /// Backend failures (logged).
    pub errors: u64,
}

/// Per-port frames served by the backend (added to the port counters).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortOffloadCounters {
    /// Frames received on the port and served by the backend.
    pub rx_packets: u64,
    /// Their bytes.
    pub rx_bytes: u64,
    /// Frames the backend sent out of the port.
    pub tx_packets: u64,
    /// Their bytes.
    pub tx_bytes: u64,
}

/// One entry the tier asked the backend to serve.
#[derive(Debug, Clone)]
struct Entry {
    gen: Gen,
    program: OffloadProgram,
    /// The walk: rules and tables credited per frame.
    path: Vec<PathStep>,
    miss_table: Option<u8>,
    /// The counters of the walk's rules, held so that frames served before
    /// a rule's removal still reach it (and its FLOW_REMOVED); with
    /// whether the rule counts packets and bytes.
    rules: Vec<RuleCounters>,
    /// The groups its decision passes through (their buckets inlined in
    /// the program), credited per frame as the executor counts them.
    groups: Vec<GroupUse>,
    /// Counters credited so far (cumulative, as the backend reports).
    credited: EntryCounters,
    /// The backend confirmed the install.
    installed: bool,
}

impl Entry {
    /// Did its walk visit a table marked in `tables`?
    fn visits_any(&self, tables: &[bool; 256]) -> bool {
        self.miss_table.is_some_and(|t| tables[t as usize])
            || self.path.iter().any(|s| tables[s.table_id as usize])
    }
}

/// One rule's counters, as an entry credits them.
#[derive(Debug, Clone)]
struct RuleCounters {
    counters: Arc<FlowCounters>,
    packets: bool,
    bytes: bool,
}

/// A decision: the compiled program and the walk behind it.
struct Decision {
    program: OffloadProgram,
    path: Vec<PathStep>,
    miss_table: Option<u8>,
    rules: Vec<RuleCounters>,
    groups: Vec<GroupUse>,
}

/// The offload tier (module docs).
pub struct OffloadTier {
    placement: Placement,
    describe: String,
    /// The backend's ports and whether they are usable (port config).
    blocked_ports: HashSet<u32>,
    /// Ports whose interface disappeared since the backend mapped it: the
    /// backend's maps and attachment name an interface that is gone (a
    /// re-created one has a new index and no program), so entries touching
    /// them stay in software for good, whatever the port config says.
    lost_ports: HashSet<u32>,
    /// What the backend declared: checked before an entry is sent.
    caps: offlow_offload::Capabilities,
    /// Entries installed or on their way, by match.
    entries: HashMap<OffloadMatch, Entry>,
    /// Entries whose removal was sent and not yet answered.
    retiring: HashMap<(OffloadMatch, Gen), Entry>,
    next_gen: Gen,
    link: BackendLink,
    /// Last sequence number sent, and last answered.
    sent: u64,
    answered: u64,
    /// Rules changed and tables added to since the last revalidation.
    changed_rules: HashSet<RuleId>,
    added_tables: [bool; 256],
    /// A group or a port's liveness changed since the last revalidation:
    /// every entry through a group is decided again.
    groups_changed: bool,
    any_change: bool,
    stats: OffloadStats,
    ports: HashMap<u32, PortOffloadCounters>,
    last_tick: Instant,
    /// The backend thread's loss was reported.
    warned_dead: bool,
    /// What other threads read ([`OffloadTier::stats_handle`]).
    published: Arc<std::sync::Mutex<OffloadStats>>,
    /// The backend's named counters, as last read.
    named: Arc<std::sync::Mutex<Vec<(&'static str, u64)>>>,
    /// Configured pins by match, first match wins.
    pin_rules: Vec<(offlow_flow::Match, offlow_offload::Pin)>,
    /// Matches already checked against `pin_rules` (by the first
    /// microflow seen under each).
    pinned_seen: HashSet<OffloadMatch>,
    /// Sampled software-path packets per microflow since the last tick:
    /// placed under the match they map to (`match_for`) at the tick, when
    /// the pipeline is at hand.
    observed: HashMap<OffloadKey, u64>,
    /// Masks the backend refused for want of room since the rules last
    /// changed: their microflows are placed exactly meanwhile.
    full_masks: HashSet<OffloadMask>,
}

/// Reads the offload tier's statistics from any thread (as of its last
/// tick or answer).
#[derive(Clone)]
pub struct OffloadStatsHandle {
    stats: Arc<std::sync::Mutex<OffloadStats>>,
    named: Arc<std::sync::Mutex<Vec<(&'static str, u64)>>>,
    describe: Arc<str>,
}

impl OffloadStatsHandle {
    /// The latest statistics.
    pub fn stats(&self) -> OffloadStats {
        *self.stats.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The backend's named counters (e.g. the XDP program's outcomes and
    /// drops by reason), as last read.
    pub fn named_counters(&self) -> Vec<(&'static str, u64)> {
        self.named.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The backend, as it described itself at start.
    pub fn describe(&self) -> &str {
        &self.describe
    }
}

impl OffloadTier {
    /// Run `backend` for the switch, with these placement thresholds.
    pub fn new(
        backend: Box<dyn OffloadBackend>,
        placement: PlacementConfig,
    ) -> std::io::Result<OffloadTier> {
        let caps = backend.capabilities().clone();
        let describe = backend.describe();
        info!(backend = %describe, room = caps.room, actions = %caps.actions, "offload tier on");
        Ok(OffloadTier {
            placement: Placement::new(placement, caps.room),
            describe,
            blocked_ports: HashSet::new(),
            lost_ports: HashSet::new(),
            caps,
            entries: HashMap::new(),
            retiring: HashMap::new(),
            next_gen: 1,
            link: BackendLink::spawn(backend)?,
            sent: 0,
            answered: 0,
            changed_rules: HashSet::new(),
            added_tables: [false; 256],
            groups_changed: false,
            any_change: false,
            stats: OffloadStats::default(),
            ports: HashMap::new(),
            last_tick: Instant::now(),
            warned_dead: false,
            published: Arc::default(),
            named: Arc::default(),
            pin_rules: Vec::new(),
            pinned_seen: HashSet::new(),
            observed: HashMap::new(),
            full_masks: HashSet::new(),
        })
    }

    /// The backend, as it describes itself.
    pub fn describe(&self) -> &str {
        &self.describe
    }

    /// The backend's named counters, as last read (non-zero ones).
    pub fn named_counters(&self) -> Vec<(&'static str, u64)> {
        self.named
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .copied()
            .filter(|&(_, v)| v != 0)
            .collect()
    }

    /// A handle other threads read the statistics through.
    pub fn stats_handle(&self) -> OffloadStatsHandle {
        OffloadStatsHandle {
            stats: self.published.clone(),
            named: self.named.clone(),
            describe: self.describe.as_str().into(),
        }
    }

    /// What the tier has done.
    pub fn stats(&self) -> OffloadStats {
        OffloadStats {
            entries: self.entries.values().filter(|e| e.installed).count() as u64,
            ..self.stats
        }
    }

    /// Frames the backend served per port (credited so far).
    pub fn port_counters(&self, port: u32) -> PortOffloadCounters {
        self.ports.get(&port).copied().unwrap_or_default()
    }

    /// Where `key`'s microflow is: offloaded when an installed entry
    /// (exact or masked) serves it, else where placement has its exact
    /// match.
    pub fn tier(&self, key: &OffloadKey) -> Tier {
        let served = self
            .entries
            .iter()
            .any(|(m, e)| e.installed && m.matches(key));
        if served {
            Tier::Offloaded
        } else {
            self.placement.tier(&OffloadMatch::exact(*key))
        }
    }

    /// Pin an entry's match down or up.
    pub fn pin(&mut self, m: OffloadMatch, pin: Option<offlow_offload::Pin>) {
        self.placement.pin(m, pin);
    }

    /// Pin every flow matching `m` (ovs-ofctl match syntax in the
    /// configuration) down or up, as it is first seen.
    pub fn pin_matching(&mut self, m: offlow_flow::Match, pin: offlow_offload::Pin) {
        self.pin_rules.push((m, pin));
    }

    /// Sampled software-path packets of a flow (from a worker); placed at
    /// the next [`tick`](Self::tick).
    pub fn observe(&mut self, key: OffloadKey, packets: u64) {
        *self.observed.entry(key).or_default() += packets;
    }

    /// Place the observations under their matches.
    fn place_observed(&mut self, pipeline: &Pipeline) {
        for (key, packets) in std::mem::take(&mut self.observed) {
            let m = self.match_for(&key, pipeline);
            if !self.pin_rules.is_empty() && self.pinned_seen.insert(m) {
                let k = key.to_flow_key();
                if let Some((_, pin)) = self.pin_rules.iter().find(|(pm, _)| pm.matches(&k)) {
                    self.placement.pin(m, Some(*pin));
                }
            }
            self.placement.observe(m, packets);
        }
    }

    /// The entry a microflow would be served by: the megaflow of every
    /// microflow that agrees with it on the bits its walk looked at
    /// ([`Pipeline::walk_mask`]), where the backend holds masks; else (or
    /// when its decision depends on more than those bits: a group's
    /// bucket) the microflow alone.
    fn match_for(&self, key: &OffloadKey, pipeline: &Pipeline) -> OffloadMatch {
        if self.caps.masks == 0 {
            return OffloadMatch::exact(*key);
        }
        let res = pipeline.lookup(&key.to_flow_key());
        let through_group = through_group(&res.actions);
        // The configured pins' fields too: a pin then holds for all of a
        // megaflow's microflows or none (a flow pinned up is never served
        // by an entry that went down for its neighbours).
        let walked = self
            .pin_rules
            .iter()
            .fold(pipeline.walk_mask(&res), |u, (pm, _)| u.union(&pm.mask));
        let mut mask = OffloadMask::from_flow_mask(&walked);
        // An output to a tunnel sends the frame's own tunnel_id as the key
        // unless a set-field gave one: then the entry needs it whole.
        let to_tunnel = res.actions.iter().any(|a| {
            matches!(a, offlow_pipeline::Action::Output { port, .. }
                if self.underlay_of(port.0).is_some())
        });
        if to_tunnel {
            mask.tunnel_id = u64::MAX;
        }
        if through_group || self.full_masks.contains(&mask) {
            return OffloadMatch::exact(*key);
        }
        OffloadMatch::new(key, mask)
    }

    /// Every command up to `seq` has been answered (and its answer taken
    /// into account).
    pub fn done(&mut self, seq: u64, pipeline: &Pipeline) -> bool {
        self.poll(pipeline);
        self.answered >= seq
    }

    /// The last command sent: a commit's ticket waits for it.
    pub fn last_sent(&self) -> u64 {
        self.sent
    }

    /// Note what a flow-mod changed (cheap when nothing is offloaded).
    pub fn note_effect(&mut self, effect: &FlowModEffect, pipeline: &Pipeline) {
        self.any_change = true;
        if self.entries.is_empty() {
            return;
        }
        self.changed_rules.extend(effect.modified.iter().copied());
        self.changed_rules
            .extend(effect.removed.iter().map(|e| e.id));
        for id in &effect.added {
            if let Some(e) = pipeline.entry(*id) {
                self.added_tables[e.table_id as usize] = true;
            }
        }
    }

    /// A GROUP_MOD was applied, or a port's liveness changed (what
    /// fast-failover and select buckets follow): entries whose decision
    /// passes through a group are decided again at the next revalidation
    /// (before the barrier reply, as for a flow-mod). Call after
    /// [`note_effect`](Self::note_effect) for a group delete's flows.
    pub fn note_groups_changed(&mut self) {
        self.any_change = true;
        self.groups_changed = true;
    }

    /// Note rules removed outside a flow-mod (expiry).
    pub fn note_removed(&mut self, ids: impl IntoIterator<Item = RuleId>) {
        self.any_change = true;
        if !self.entries.is_empty() {
            self.changed_rules.extend(ids);
        }
    }

    /// A port's OpenFlow configuration changed: entries touching a port
    /// that must not receive or forward go back to software.
    pub fn port_config(&mut self, port: u32, blocked: bool) {
        let changed = if blocked {
            self.blocked_ports.insert(port)
        } else {
            self.blocked_ports.remove(&port)
        };
        if !changed {
            return;
        }
        if blocked {
            self.take_back_port(port);
        }
        self.placement.rules_changed();
    }

    /// Port `port`'s interface disappeared (deleted, or re-created under
    /// the same name with a new index): the backend no longer reaches it.
    /// Entries touching it go back to software now, and none is placed
    /// again for the life of the tier (see `lost_ports`). Returns whether
    /// this is news.
    pub fn port_lost(&mut self, port: u32) -> bool {
        if !self.caps.ports.contains(&port) || !self.lost_ports.insert(port) {
            return false;
        }
        self.take_back_port(port);
        self.placement.rules_changed();
        true
    }

    /// Send the removal of every entry received on or sent to `port`, or
    /// to a tunnel over it.
    fn take_back_port(&mut self, port: u32) {
        let over = |p: u32| p == port || self.underlay_of(p) == Some(port);
        let touching: Vec<OffloadMatch> = self
            .entries
            .iter()
            .filter(|(m, e)| over(m.key.in_port) || out_port(&m.key, &e.program).is_some_and(over))
            .map(|(k, _)| *k)
            .collect();
        let remove = touching.iter().map(|k| self.retire(*k)).collect();
        self.send_apply(remove, Vec::new());
    }

    /// Not blocked nor lost; for a tunnel, its underlay neither.
    fn port_usable(&self, port: u32) -> bool {
        let usable = |p: u32| !self.blocked_ports.contains(&p) && !self.lost_ports.contains(&p);
        usable(port) && self.underlay_of(port).is_none_or(usable)
    }

    /// The underlay of tunnel port `port`, if the backend knows it as one.
    fn underlay_of(&self, port: u32) -> Option<u32> {
        self.caps
            .tunnels
            .iter()
            .find(|t| t.port == port)
            .map(|t| t.underlay)
    }

    /// After a publish: bring the offloaded entries in line with the
    /// pipeline (module docs). The sequence number a barrier must wait for,
    /// if anything was sent.
    pub fn revalidate(&mut self, pipeline: &Pipeline) -> Option<u64> {
        if !std::mem::take(&mut self.any_change) {
            return None;
        }
        // A refusal may not hold under the new rules, nor a mask's want
        // of room.
        self.placement.rules_changed();
        self.full_masks.clear();
        let changed = std::mem::take(&mut self.changed_rules);
        let tables = std::mem::replace(&mut self.added_tables, [false; 256]);
        let groups = std::mem::take(&mut self.groups_changed);
        let affected: Vec<OffloadMatch> = self
            .entries
            .iter()
            .filter(|(_, e)| {
                e.path.iter().any(|s| changed.contains(&s.rule))
                    || e.visits_any(&tables)
                    || (groups && !e.groups.is_empty())
            })
            .map(|(k, _)| *k)
            .collect();
        if affected.is_empty() {
            return None;
        }
        let mut remove = Vec::new();
        let mut install = Vec::new();
        for key in affected {
            let old = &self.entries[&key];
            match self.decide(&key, pipeline) {
                Ok(d)
                    if d.program == old.program
                        && d.path == old.path
                        && d.miss_table == old.miss_table
                        && same_counters(&d.rules, &old.rules)
                        && same_groups(&d.groups, &old.groups) => {}
                outcome => {
                    self.stats.revalidated += 1;
                    remove.push(self.retire(key));
                    match outcome {
                        Ok(d) => install.push(self.admit(key, d)),
                        Err(r) => self.placement.installed(&key, Err(r)),
                    }
                }
            }
        }
        self.send_apply(remove, install);
        Some(self.sent)
    }

    /// Close a placement tick (call every [`OFFLOAD_TICK`]): read the
    /// backend's counters, plan, and send the plan. `pipeline` is the
    /// writer's, with every flow-mod published.
    pub fn tick(&mut self, pipeline: &Pipeline) {
        self.poll(pipeline);
        let secs = self.last_tick.elapsed().as_secs_f64();
        self.last_tick = Instant::now();
        self.place_observed(pipeline);
        let plan = self.placement.tick(secs);
        let mut remove = Vec::new();
        for key in plan.remove {
            if self.entries.contains_key(&key) {
                remove.push(self.retire(key));
            }
        }
        let mut install = Vec::new();
        for key in plan.install {
            match self.decide(&key, pipeline) {
                Ok(d) => install.push(self.admit(key, d)),
                Err(r) => {
                    self.stats.refused += 1;
                    self.placement.installed(&key, Err(r));
                }
            }
        }
        if !remove.is_empty() || !install.is_empty() {
            self.send_apply(remove, install);
        }
        self.request_counters();
    }

    /// Ask the backend for its counters; the sequence number to wait for.
    pub fn request_counters(&mut self) -> u64 {
        self.sent += 1;
        if !self.link.send(Cmd::Read { seq: self.sent }) {
            self.backend_gone();
        }
        self.sent
    }

    /// Wait (bounded by [`BACKEND_WAIT`]) until `seq` is answered.
    pub fn wait(&mut self, seq: u64, pipeline: &Pipeline) -> bool {
        let deadline = Instant::now() + BACKEND_WAIT;
        while !self.done(seq, pipeline) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                warn!(seq, "offload backend did not answer in time");
                return false;
            }
            match self.link.done.recv_timeout(left) {
                Ok(d) => self.take(d, pipeline),
                Err(_) => {
                    // Gone or timed out: `done` says which next round.
                    if self.link.cmds.is_none() {
                        return false;
                    }
                }
            }
        }
        true
    }

    /// Take every answer the backend has sent (never blocks).
    pub fn poll(&mut self, pipeline: &Pipeline) {
        while let Ok(d) = self.link.done.try_recv() {
            self.take(d, pipeline);
        }
    }

    fn backend_gone(&mut self) {
        if !self.warned_dead {
            warn!("offload backend thread is gone; flows stay in software");
            self.warned_dead = true;
        }
        self.stats.errors += 1;
        // Nothing will answer: let waiters through.
        self.answered = self.sent;
    }

    /// Look `m` up and compile its decision. A masked match is looked up
    /// by its own key (the bits outside the mask zero): every microflow it
    /// matches takes that walk while the walk looks at no bit outside the
    /// mask, which is checked here, so rules that came to look at more
    /// bits refuse the entry (its microflows map to a finer one).
    fn decide(&self, m: &OffloadMatch, pipeline: &Pipeline) -> Result<Decision, Refusal> {
        let key = &m.key;
        if !self.port_usable(key.in_port) {
            return Err(Refusal::Port(key.in_port));
        }
        let flow = key.to_flow_key();
        let res = pipeline.lookup(&flow);
        if !m.is_exact() {
            let needs = OffloadMask::from_flow_mask(&pipeline.walk_mask(&res));
            if needs.union(&m.mask) != m.mask {
                return Err(Refusal::Unsupported(
                    "the rules look at bits outside the entry's mask",
                ));
            }
        }
        // Groups are run as one list when no copy is needed: the bucket
        // each takes for this microflow (the flow hash the workers use)
        // inlined.
        let mut groups = Vec::new();
        let inlined;
        let actions: &[offlow_pipeline::Action] = if through_group(&res.actions) {
            if !m.is_exact() {
                // The bucket hangs on the microflow's hash.
                return Err(Refusal::Unsupported("a group under a masked entry"));
            }
            inlined = pipeline
                .groups()
                .inline(&res.actions, flow_hash(&flow), &mut groups)
                .ok_or(Refusal::Unsupported("a group that copies the packet"))?;
            &inlined
        } else {
            &res.actions
        };
        let program = compile(key, actions)?;
        if let Some(p) = out_port(key, &program) {
            if !self.port_usable(p) {
                return Err(Refusal::Port(p));
            }
        }
        if let (Verdict::Port(p), None) = (program.verdict, program.tunnel_id) {
            if self.underlay_of(p).is_some() && m.mask.tunnel_id != u64::MAX {
                // `match_for` puts the whole key in such a mask.
                return Err(Refusal::Unsupported(
                    "an output of the frame's own tunnel_id under a mask without it",
                ));
            }
        }
        // Refused here rather than by the backend a round trip later.
        self.caps.admits(m, &program)?;
        let rules = res
            .path
            .iter()
            .filter_map(|s| pipeline.entry_in(s.table_id, s.rule))
            .map(|e| RuleCounters {
                counters: e.counters.clone(),
                packets: !e.flags.has(FlowModFlags::NO_PKT_COUNTS),
                bytes: !e.flags.has(FlowModFlags::NO_BYT_COUNTS),
            })
            .collect();
        Ok(Decision {
            program,
            miss_table: res.miss_table(),
            path: res.path,
            rules,
            groups,
        })
    }

    /// Record a new entry for `key` (a new generation); its install command.
    fn admit(&mut self, key: OffloadMatch, d: Decision) -> (OffloadMatch, Gen, OffloadProgram) {
        let gen = self.next_gen;
        self.next_gen += 1;
        let program = d.program;
        self.entries.insert(
            key,
            Entry {
                gen,
                program,
                path: d.path,
                miss_table: d.miss_table,
                rules: d.rules,
                groups: d.groups,
                credited: EntryCounters::default(),
                installed: false,
            },
        );
        (key, gen, program)
    }

    /// Take `key`'s entry out (its removal command); it is credited when
    /// the backend returns its final counters.
    fn retire(&mut self, key: OffloadMatch) -> (OffloadMatch, Gen) {
        let e = self.entries.remove(&key).expect("retire of a listed entry");
        let gen = e.gen;
        self.retiring.insert((key, gen), e);
        self.placement.removed(&key);
        (key, gen)
    }

    fn send_apply(
        &mut self,
        remove: Vec<(OffloadMatch, Gen)>,
        install: Vec<(OffloadMatch, Gen, OffloadProgram)>,
    ) {
        if remove.is_empty() && install.is_empty() {
            return;
        }
        self.sent += 1;
        let cmd = Cmd::Apply {
            seq: self.sent,
            remove,
            install,
        };
        if !self.link.send(cmd) {
            self.backend_gone();
        }
    }

    /// Take one answer into account.
    fn take(&mut self, done: Done, pipeline: &Pipeline) {
        let seq = done.seq();
        match done {
            Done::Applied {
                removed, installed, ..
            } => {
                for (key, gen, r) in removed {
                    let Some(e) = self.retiring.remove(&(key, gen)) else {
                        continue;
                    };
                    match r {
                        Ok(last) => {
                            self.stats.removals += 1;
                            let delta = last.since(e.credited);
                            credit(
                                &mut self.stats,
                                &mut self.ports,
                                &key.key,
                                &e,
                                delta,
                                pipeline,
                            );
                        }
                        // Never installed (its install was refused).
                        Err(OffloadError::NotFound) => {}
                        Err(err) => {
                            self.stats.errors += 1;
                            warn!(?key, %err, "offload removal failed");
                        }
                    }
                }
                for (key, gen, r) in installed {
                    let current = self.entries.get(&key).is_some_and(|e| e.gen == gen);
                    match r {
                        Ok(()) => {
                            self.stats.installs += 1;
                            tracing::debug!(?key, gen, current, "offloaded");
                            if current {
                                if let Some(e) = self.entries.get_mut(&key) {
                                    e.installed = true;
                                }
                                self.placement.installed(&key, Ok(()));
                            }
                        }
                        Err(err) => {
                            if current {
                                self.entries.remove(&key);
                                let refusal = match err {
                                    OffloadError::Refused(r) => r,
                                    OffloadError::Backend(ref m) => {
                                        self.stats.errors += 1;
                                        warn!(?key, error = %m, "offload install failed");
                                        Refusal::Unsupported("backend error")
                                    }
                                    OffloadError::NotFound => Refusal::Unsupported("backend error"),
                                };
                                match refusal {
                                    Refusal::Full(_) => {}
                                    // Its microflows go down exactly meanwhile.
                                    Refusal::MaskRoom(_) => {
                                        self.full_masks.insert(key.mask);
                                    }
                                    _ => self.stats.refused += 1,
                                }
                                self.placement.installed(&key, Err(refusal));
                            }
                        }
                    }
                }
            }
            Done::Read {
                counters, named, ..
            } => {
                if !named.is_empty() {
                    *self.named.lock().unwrap_or_else(|p| p.into_inner()) = named;
                }
                for (key, gen, c) in counters {
                    // The entry the counters belong to: live, or on its way out.
                    let (e, live) = match self.entries.get_mut(&key).filter(|e| e.gen == gen) {
                        Some(e) => (e, true),
                        None => match self.retiring.get_mut(&(key, gen)) {
                            Some(e) => (e, false),
                            None => continue,
                        },
                    };
                    let delta = c.since(e.credited);
                    credit(
                        &mut self.stats,
                        &mut self.ports,
                        &key.key,
                        e,
                        delta,
                        pipeline,
                    );
                    e.credited = c;
                    if live {
                        self.placement.observe_offloaded(key, delta.packets);
                    }
                }
            }
        }
        self.answered = self.answered.max(seq);
        let now = self.stats();
        *self.published.lock().unwrap_or_else(|p| p.into_inner()) = now;
    }
}

/// Credit `delta` frames of `e` to its walk's rules (removed or not: a
/// removed rule's counters are what its FLOW_REMOVED reports) and tables,
/// and to its ports (`ports`) and the tier's hits (`stats`).
fn credit(
    stats: &mut OffloadStats,
    ports: &mut HashMap<u32, PortOffloadCounters>,
    key: &OffloadKey,
    e: &Entry,
    delta: EntryCounters,
    pipeline: &Pipeline,
) {
    if delta.packets == 0 || matches!(e.program.verdict, Verdict::Cpu(_)) {
        return;
    }
    stats.hits += delta.packets;
    stats.hit_bytes += delta.bytes;
    let rx = ports.entry(key.in_port).or_default();
    rx.rx_packets += delta.packets;
    rx.rx_bytes += delta.bytes;
    if let Some(out) = out_port(key, &e.program) {
        let grow = tag_growth(key, &e.program);
        let tx = ports.entry(out).or_default();
        tx.tx_packets += delta.packets;
        tx.tx_bytes += (delta.bytes as i64 + grow * delta.packets as i64).max(0) as u64;
    }
    let (n, b) = (delta.packets, delta.bytes);
    for r in &e.rules {
        r.counters
            .add(if r.packets { n } else { 0 }, if r.bytes { b } else { 0 });
    }
    for step in &e.path {
        if let Some(t) = pipeline.table_counters(step.table_id) {
            t.add(n, n);
        }
    }
    for g in &e.groups {
        g.credit(n, b);
    }
    if let Some(t) = e.miss_table.and_then(|t| pipeline.table_counters(t)) {
        t.add(n, 0);
    }
}

/// The same rule counters, one for one?
fn same_counters(a: &[RuleCounters], b: &[RuleCounters]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            Arc::ptr_eq(&x.counters, &y.counters) && x.packets == y.packets && x.bytes == y.bytes
        })
}

/// The same groups (entries, not ids: a MODIFY replaces the entry) and
/// buckets, one for one?
fn same_groups(a: &[GroupUse], b: &[GroupUse]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| Arc::ptr_eq(&x.group, &y.group) && x.bucket == y.bucket)
}

/// Does a decision pass through a group (buckets to inline, a select
/// group's per microflow)?
fn through_group(actions: &[offlow_pipeline::Action]) -> bool {
    actions
        .iter()
        .any(|a| matches!(a, offlow_pipeline::Action::Group(_)))
}

/// The port an entry sends its frames out of, if any.
fn out_port(key: &OffloadKey, p: &OffloadProgram) -> Option<u32> {
    match p.verdict {
        Verdict::Port(n) => Some(n),
        Verdict::InPort => Some(key.in_port),
        Verdict::Drop | Verdict::Cpu(_) => None,
    }
}

/// Bytes a frame gains (or loses) on the way out: a tag inserted or
/// stripped.
fn tag_growth(key: &OffloadKey, p: &OffloadProgram) -> i64 {
    use offlow_offload::VlanOp;
    match (p.vlan, key.vlan.is_some()) {
        (VlanOp::Strip, true) => -4,
        (VlanOp::Write { .. }, false) => 4,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use offlow_flow::{Field, Match};
    use offlow_offload::{
        Capabilities, EntryCounters, ModelBackend, OffloadBackend, OffloadError, OffloadMatch, Pin,
    };
    use offlow_pipeline::{
        Action, FlowFilter, FlowMod, FlowModCommand, Instruction, PortNo, TABLE_ALL,
    };
    use std::sync::{Arc, Mutex};

    /// The model backend, shared with the test so it can play the device.
    #[derive(Clone)]
    struct Shared(Arc<Mutex<ModelBackend>>, Capabilities);

    impl OffloadBackend for Shared {
        fn capabilities(&self) -> &Capabilities {
            &self.1
        }
        fn describe(&self) -> String {
            self.0.lock().unwrap().describe()
        }
        fn install(&mut self, k: &OffloadMatch, p: &OffloadProgram) -> Result<(), OffloadError> {
            self.0.lock().unwrap().install(k, p)
        }
        fn remove(&mut self, k: &OffloadMatch) -> Result<EntryCounters, OffloadError> {
            self.0.lock().unwrap().remove(k)
        }
        fn counters(&mut self, k: &OffloadMatch) -> Result<EntryCounters, OffloadError> {
            self.0.lock().unwrap().counters(k)
        }
        fn all_counters(&mut self, visit: &mut dyn FnMut(&OffloadMatch, EntryCounters)) {
            self.0.lock().unwrap().all_counters(visit)
        }
        fn len(&self) -> usize {
            self.0.lock().unwrap().len()
        }
    }

    fn key(sport: u16) -> OffloadKey {
        OffloadKey {
            in_port: 1,
            eth_dst: 0x0200_0000_0002,
            eth_src: 0x0200_0000_0001,
            vlan: None,
            ipv4_src: 0x0a00_0001,
            ipv4_dst: 0x0a00_0002,
            ip_proto: 17,
            ip_dscp: 0,
            ip_ecn: 0,
            tp_src: sport,
            tp_dst: 9,
            tunnel_id: 0,
        }
    }

    fn udp_to(dst: u32) -> Match {
        let mut m = Match::ANY;
        m.set_exact(Field::EthType, 0x0800);
        m.set_exact(Field::IpProto, 17);
        m.set_exact(Field::Ipv4Dst, dst.into());
        m
    }

    fn apply(actions: Vec<Action>) -> Vec<Instruction> {
        vec![Instruction::ApplyActions(actions)]
    }

    fn setup(room: usize) -> (OffloadTier, Arc<Mutex<ModelBackend>>, Pipeline) {
        let model = ModelBackend::full(vec![1, 2, 3], room);
        let caps = model.capabilities().clone();
        let shared = Arc::new(Mutex::new(model));
        let tier = OffloadTier::new(
            Box::new(Shared(shared.clone(), caps)),
            PlacementConfig::default(),
        )
        .unwrap();
        (tier, shared, Pipeline::new(2))
    }

    fn flow_mod(tier: &mut OffloadTier, p: &mut Pipeline, fm: &FlowMod) {
        let effect = p.flow_mod(fm, 0).unwrap();
        tier.note_effect(&effect, p);
    }

    /// Table 0, priority 10: UDP to 10.0.0.2 gets `actions`; published.
    fn add_udp_rule(tier: &mut OffloadTier, p: &mut Pipeline, actions: Vec<Action>) {
        flow_mod(
            tier,
            p,
            &FlowMod::add(0, 10, udp_to(0x0a00_0002), apply(actions)),
        );
        barrier(tier, p);
    }

    /// Publish: revalidate and wait, as the adapter's barrier does.
    fn barrier(tier: &mut OffloadTier, p: &Pipeline) {
        if let Some(seq) = tier.revalidate(p) {
            assert!(tier.wait(seq, p));
        }
    }

    fn settle(tier: &mut OffloadTier, p: &Pipeline) {
        tier.tick(p);
        let seq = tier.last_sent();
        assert!(tier.wait(seq, p));
    }

    fn rule_packets(p: &Pipeline) -> Vec<u64> {
        p.dump(&FlowFilter::all())
            .iter()
            .map(|s| s.packets)
            .collect()
    }

    #[test]
    fn offloaded_frames_are_credited_and_rule_changes_reach_the_backend_before_the_barrier() {
        let (mut tier, model, mut p) = setup(16);
        let set_src = Action::SetField(Field::Ipv4Src, 0x0b00_0001);
        add_udp_rule(&mut tier, &mut p, vec![set_src, Action::output(PortNo(2))]);
        tier.pin(key(1).into(), Some(Pin::Down));
        settle(&mut tier, &p);
        let prog = *model
            .lock()
            .unwrap()
            .program(&key(1).into())
            .expect("offloaded");
        assert_eq!(prog.verdict, Verdict::Port(2));
        assert_eq!(prog.ipv4_src, Some(0x0b00_0001));
        assert_eq!(tier.tier(&key(1)), Tier::Offloaded);

        // The device serves 5 frames; a counter read credits them.
        for _ in 0..5 {
            model.lock().unwrap().serve(&key(1), 60);
        }
        let seq = tier.request_counters();
        assert!(tier.wait(seq, &p));
        assert_eq!(rule_packets(&p), vec![5]);
        let ts = p.table_stats();
        assert_eq!((ts[0].lookup_count, ts[0].matched_count), (5, 5));
        assert_eq!(tier.port_counters(1).rx_packets, 5);
        assert_eq!(tier.port_counters(2).tx_packets, 5);
        assert_eq!(tier.port_counters(2).tx_bytes, 300);

        // A MODIFY changes the decision: after the barrier the backend has
        // the new program; frames served before it count for the rule.
        model.lock().unwrap().serve(&key(1), 60);
        let mut m = FlowMod::new(FlowModCommand::Modify, 0, 10, udp_to(0x0a00_0002));
        m.instructions = apply(vec![Action::output(PortNo(3))]);
        flow_mod(&mut tier, &mut p, &m);
        barrier(&mut tier, &p);
        let prog = *model
            .lock()
            .unwrap()
            .program(&key(1).into())
            .expect("still offloaded");
        assert_eq!(prog, OffloadProgram::plain(Verdict::Port(3)));
        assert_eq!(rule_packets(&p), vec![6]);
        assert_eq!(tier.stats().revalidated, 1);

        // A DELETE changes it before the barrier (the flow now misses table
        // 0, which has no table-miss entry: dropped, still offloaded); the
        // old entry's last frames count for the deleted rule.
        model.lock().unwrap().serve(&key(1), 60);
        let d = FlowMod::new(FlowModCommand::Delete, TABLE_ALL, 0, Match::ANY);
        let effect = p.flow_mod(&d, 0).unwrap();
        tier.note_effect(&effect, &p);
        barrier(&mut tier, &p);
        let prog = *model
            .lock()
            .unwrap()
            .program(&key(1).into())
            .expect("re-installed");
        assert_eq!(prog, OffloadProgram::plain(Verdict::Drop));
        // The rule is gone from the table; the entry's final counters
        // still reached it (what its FLOW_REMOVED reports).
        let removed: Vec<(u64, u64)> = effect.removed.iter().map(|e| e.counters.get()).collect();
        assert_eq!(removed, vec![(7, 420)]);
        assert_eq!(tier.stats().hits, 7);
    }

    #[test]
    fn a_flow_the_compiler_refuses_stays_in_software_with_its_reason() {
        let (mut tier, model, mut p) = setup(16);
        add_udp_rule(&mut tier, &mut p, vec![Action::output(PortNo::CONTROLLER)]);
        tier.pin(key(1).into(), Some(Pin::Down));
        settle(&mut tier, &p);
        assert!(model.lock().unwrap().is_empty());
        assert_eq!(
            tier.tier(&key(1)),
            Tier::Software(Some(Refusal::Unsupported("output to a reserved port")))
        );
        // Once the rule allows it, the next tick offloads it.
        let mut m = FlowMod::new(FlowModCommand::Modify, 0, 10, udp_to(0x0a00_0002));
        m.instructions = apply(vec![Action::output(PortNo(2))]);
        flow_mod(&mut tier, &mut p, &m);
        barrier(&mut tier, &p);
        settle(&mut tier, &p);
        assert_eq!(model.lock().unwrap().len(), 1);
    }

    /// A group that needs no copy is inlined (the bucket the workers would
    /// take for the flow); its counters are credited per offloaded frame;
    /// a port's liveness and a GROUP_MOD reach the backend before the
    /// barrier; a group that copies the packet stays in software.
    #[test]
    fn groups_without_copies_are_offloaded_and_follow_their_changes() {
        use offlow_pipeline::group::{Bucket, GroupMod, GroupModCommand, WATCH_GROUP_ANY};
        let (mut tier, model, mut p) = setup(16);
        let bucket = |watch: u32, actions: Vec<Action>| Bucket {
            weight: 0,
            watch_port: watch,
            watch_group: WATCH_GROUP_ANY,
            actions,
        };
        let group_mod = |p: &mut Pipeline, tier: &mut OffloadTier, command, kind, buckets| {
            let gm = GroupMod {
                command,
                group_type: kind,
                group_id: 1,
                buckets,
            };
            let (op, effect) = p.prepare_group_mod(&gm, 0).unwrap();
            p.apply(&op);
            tier.note_effect(&effect, p);
            tier.note_groups_changed();
        };
        let set_dst = Action::SetField(Field::Ipv4Dst, 0x0a00_0063);
        // Fast failover: port 2, else port 3 with a rewrite.
        group_mod(
            &mut p,
            &mut tier,
            GroupModCommand::Add,
            3,
            vec![
                bucket(2, vec![Action::output(PortNo(2))]),
                bucket(3, vec![set_dst, Action::output(PortNo(3))]),
            ],
        );
        add_udp_rule(&mut tier, &mut p, vec![Action::Group(1)]);
        tier.pin(key(1).into(), Some(Pin::Down));
        settle(&mut tier, &p);
        let prog = *model
            .lock()
            .unwrap()
            .program(&key(1).into())
            .expect("offloaded");
        assert_eq!(prog, OffloadProgram::plain(Verdict::Port(2)));
        for _ in 0..5 {
            model.lock().unwrap().serve(&key(1), 60);
        }
        let seq = tier.request_counters();
        assert!(tier.wait(seq, &p));
        let g = p.groups().get(1).unwrap().clone();
        assert_eq!(g.counters.get(), (5, 300));
        assert_eq!(g.counters.buckets(), [(5, 300), (0, 0)]);

        // Port 2 goes down: the next bucket, before the barrier.
        let op = p.prepare_port_live(2, false).unwrap();
        p.apply(&op);
        tier.note_groups_changed();
        barrier(&mut tier, &p);
        let prog = *model
            .lock()
            .unwrap()
            .program(&key(1).into())
            .expect("still offloaded");
        assert_eq!(
            (prog.verdict, prog.ipv4_dst),
            (Verdict::Port(3), Some(0x0a00_0063))
        );

        // Modified into an all group of two buckets: a copy per bucket,
        // which the tier cannot make: back to software, with the reason.
        group_mod(
            &mut p,
            &mut tier,
            GroupModCommand::Modify,
            0,
            vec![
                bucket(u32::MAX, vec![Action::output(PortNo(2))]),
                bucket(u32::MAX, vec![Action::output(PortNo(3))]),
            ],
        );
        barrier(&mut tier, &p);
        assert!(model.lock().unwrap().program(&key(1).into()).is_none());
        assert_eq!(
            tier.tier(&key(1)),
            Tier::Software(Some(Refusal::Unsupported("a group that copies the packet")))
        );
    }

    #[test]
    fn an_add_that_shadows_an_entry_rewrites_it_and_unrelated_adds_do_not() {
        let (mut tier, model, mut p) = setup(16);
        add_udp_rule(&mut tier, &mut p, vec![Action::output(PortNo(2))]);
        tier.pin(key(1).into(), Some(Pin::Down));
        settle(&mut tier, &p);
        assert_eq!(model.lock().unwrap().operations, 1);
        // A rule in table 1, which the entry's walk never visits.
        flow_mod(
            &mut tier,
            &mut p,
            &FlowMod::add(1, 50, Match::ANY, apply(vec![])),
        );
        barrier(&mut tier, &p);
        assert_eq!(model.lock().unwrap().operations, 1, "no backend work");
        // A higher-priority rule in table 0 matching the flow: it drops now.
        flow_mod(
            &mut tier,
            &mut p,
            &FlowMod::add(0, 20, udp_to(0x0a00_0002), apply(vec![])),
        );
        barrier(&mut tier, &p);
        let prog = *model.lock().unwrap().program(&key(1).into()).unwrap();
        assert_eq!(prog.verdict, Verdict::Drop);
    }

    #[test]
    fn tunnel_flows_go_down_as_declared_and_follow_their_underlay() {
        use offlow_offload::TunnelPort;
        use offlow_wire::tunnel::{Endpoint, KeyMode, Kind};
        let ep = |key, csum| Endpoint {
            key,
            csum,
            ..Endpoint::new(Kind::Gre, [1, 1, 1, 1], [2, 2, 2, 2], [2; 6], [4; 6])
        };
        let tunnels = [
            TunnelPort {
                ofport: 10,
                endpoint: ep(KeyMode::Flow, false),
                underlay: 1,
            },
            TunnelPort {
                ofport: 11,
                endpoint: ep(KeyMode::None, true),
                underlay: 2,
            },
        ];
        // The XDP backend's declaration, except that this one does not
        // serve tunnel 11.
        let mut caps = ModelBackend::full_with_tunnels(vec![1, 2, 3], &tunnels, 16)
            .capabilities()
            .clone();
        caps.tunnels[1] = offlow_offload::TunnelSupport::unsupported(11, 2);
        let model = ModelBackend::new(caps.clone());
        let model = Arc::new(Mutex::new(model));
        let mut tier = OffloadTier::new(
            Box::new(Shared(model.clone(), caps)),
            PlacementConfig::default(),
        )
        .unwrap();
        let mut p = Pipeline::new(2);
        // Decapsulated frames of key 7 get a VLAN tag and leave on port 2
        // (the L2-in-L3 gateway); port 3's go into tunnel 11.
        let mut from_tunnel = udp_to(0x0a00_0002);
        from_tunnel.set_exact(Field::InPort, 10);
        from_tunnel.set_exact(Field::TunnelId, 7);
        let gateway = vec![
            Action::PushVlan(0x8100),
            Action::SetField(Field::VlanVid, 0x1000 | 100),
            Action::output(PortNo(2)),
        ];
        flow_mod(
            &mut tier,
            &mut p,
            &FlowMod::add(0, 20, from_tunnel, apply(gateway)),
        );
        let mut into_tunnel = udp_to(0x0a00_0002);
        into_tunnel.set_exact(Field::InPort, 3);
        flow_mod(
            &mut tier,
            &mut p,
            &FlowMod::add(0, 20, into_tunnel, apply(vec![Action::output(PortNo(11))])),
        );
        barrier(&mut tier, &p);
        let decap = OffloadKey {
            in_port: 10,
            tunnel_id: 7,
            ..key(1)
        };
        let encap = OffloadKey {
            in_port: 3,
            ..key(1)
        };
        tier.pin(decap.into(), Some(Pin::Down));
        tier.pin(encap.into(), Some(Pin::Down));
        settle(&mut tier, &p);
        let prog = *model
            .lock()
            .unwrap()
            .program(&decap.into())
            .expect("offloaded");
        assert_eq!(prog.verdict, Verdict::Port(2));
        assert_eq!(
            tier.tier(&encap),
            Tier::Software(Some(Refusal::Tunnel(
                11,
                "the backend does not serve tunnels"
            )))
        );
        // Served frames count on the tunnel port, tag included on the way out.
        model.lock().unwrap().serve(&decap, 60);
        let seq = tier.request_counters();
        assert!(tier.wait(seq, &p));
        assert_eq!(tier.port_counters(10).rx_packets, 1);
        assert_eq!(tier.port_counters(2).tx_bytes, 64);
        // The underlay blocked: the tunnel's entry goes back to software.
        tier.port_config(1, true);
        settle(&mut tier, &p);
        assert!(model.lock().unwrap().is_empty());
        assert_eq!(tier.tier(&decap), Tier::Software(Some(Refusal::Port(10))));
        tier.port_config(1, false);
        settle(&mut tier, &p);
        assert_eq!(model.lock().unwrap().len(), 1);
    }

    #[test]
    fn blocked_ports_take_their_entries_back_to_software() {
        let (mut tier, model, mut p) = setup(16);
        add_udp_rule(&mut tier, &mut p, vec![Action::output(PortNo(2))]);
        tier.pin(key(1).into(), Some(Pin::Down));
        settle(&mut tier, &p);
        assert_eq!(model.lock().unwrap().len(), 1);
        tier.port_config(2, true);
        settle(&mut tier, &p);
        assert!(model.lock().unwrap().is_empty());
        assert_eq!(tier.tier(&key(1)), Tier::Software(Some(Refusal::Port(2))));
        tier.port_config(2, false);
        settle(&mut tier, &p);
        assert_eq!(model.lock().unwrap().len(), 1);
    }

    #[test]
    fn a_lost_port_stays_in_software_whatever_its_config() {
        let (mut tier, model, mut p) = setup(16);
        add_udp_rule(&mut tier, &mut p, vec![Action::output(PortNo(2))]);
        tier.pin(key(1).into(), Some(Pin::Down));
        settle(&mut tier, &p);
        assert_eq!(model.lock().unwrap().len(), 1);
        assert!(tier.port_lost(2));
        assert!(!tier.port_lost(2), "reported once");
        assert!(!tier.port_lost(99), "not a backend port");
        settle(&mut tier, &p);
        assert!(model.lock().unwrap().is_empty());
        // Unblocking by config does not bring it back.
        tier.port_config(2, true);
        tier.port_config(2, false);
        settle(&mut tier, &p);
        assert!(model.lock().unwrap().is_empty());
        assert_eq!(tier.tier(&key(1)), Tier::Software(Some(Refusal::Port(2))));
    }

    #[test]
    fn configured_pins_apply_to_matching_flows_as_they_are_seen() {
        let (mut tier, model, mut p) = setup(16);
        add_udp_rule(&mut tier, &mut p, vec![Action::output(PortNo(2))]);
        let mut down = Match::ANY;
        down.set_exact(Field::EthType, 0x0800);
        down.set_exact(Field::IpProto, 17);
        down.set_exact(Field::UdpSrc, 1);
        tier.pin_matching(down, Pin::Down);
        let mut up = Match::ANY;
        up.set_exact(Field::EthType, 0x0800);
        up.set_exact(Field::IpProto, 17);
        up.set_exact(Field::UdpSrc, 2);
        tier.pin_matching(up, Pin::Up);
        for _ in 0..3 {
            // Key 1 is cold but pinned down; key 2 hot but pinned up.
            tier.observe(key(1), 1);
            tier.observe(key(2), 1_000_000);
            std::thread::sleep(Duration::from_millis(5));
            settle(&mut tier, &p);
        }
        let m = model.lock().unwrap();
        assert!(m.program(&key(1).into()).is_some());
        assert!(m.program(&key(2).into()).is_none());
    }

    #[test]
    fn heavy_hitters_go_down_while_room_lasts() {
        let (mut tier, model, mut p) = setup(2);
        add_udp_rule(&mut tier, &mut p, vec![Action::output(PortNo(2))]);
        for _ in 0..3 {
            tier.observe(key(1), 10_000);
            tier.observe(key(2), 20_000);
            tier.observe(key(3), 5_000);
            tier.observe(key(4), 10);
            std::thread::sleep(Duration::from_millis(20));
            settle(&mut tier, &p);
        }
        let m = model.lock().unwrap();
        assert_eq!(m.len(), 2);
        assert!(m.program(&key(2).into()).is_some() && m.program(&key(1).into()).is_some());
    }

    /// A tier over a model backend that holds `masks` masks, with every
    /// flow pinned down as it is seen (placement's rates aside).
    fn setup_masked(masks: usize) -> (OffloadTier, Arc<Mutex<ModelBackend>>, Pipeline) {
        let caps = Capabilities {
            masks,
            ..ModelBackend::full(vec![1, 2, 3], 64).capabilities().clone()
        };
        let shared = Arc::new(Mutex::new(ModelBackend::new(caps.clone())));
        let mut tier = OffloadTier::new(
            Box::new(Shared(shared.clone(), caps)),
            PlacementConfig::default(),
        )
        .unwrap();
        tier.pin_matching(Match::ANY, Pin::Down);
        (tier, shared, Pipeline::new(2))
    }

    /// simple_switch_13's rule: in_port and both MACs, output.
    fn per_pair(in_port: u32, src: u64, dst: u64, out: u32) -> FlowMod {
        let mut m = Match::ANY;
        m.set_exact(Field::InPort, in_port.into())
            .set_exact(Field::EthSrc, src.into())
            .set_exact(Field::EthDst, dst.into());
        FlowMod::add(0, 1, m, apply(vec![Action::output(PortNo(out))]))
    }

    #[test]
    fn one_masked_entry_serves_every_connection_of_a_host_pair_until_a_rule_looks_closer() {
        let (mut tier, model, mut p) = setup_masked(4);
        let k = key(1000);
        flow_mod(&mut tier, &mut p, &per_pair(1, k.eth_src, k.eth_dst, 2));
        // The table-miss entry (to the controller) looks at nothing.
        flow_mod(
            &mut tier,
            &mut p,
            &FlowMod::add(
                0,
                0,
                Match::ANY,
                apply(vec![Action::output(PortNo::CONTROLLER)]),
            ),
        );
        barrier(&mut tier, &p);
        tier.observe(k, 5);
        settle(&mut tier, &p);
        let pair = OffloadMatch::new(
            &k,
            OffloadMask {
                eth_dst: u64::MAX >> 16,
                eth_src: u64::MAX >> 16,
                ..OffloadMask::SHAPE
            },
        );
        assert_eq!(
            model.lock().unwrap().program(&pair).map(|p| p.verdict),
            Some(Verdict::Port(2)),
            "the pair's megaflow is offloaded"
        );
        assert!(model.lock().unwrap().program(&k.into()).is_none());
        // Connections never seen before are served, and counted for the rule.
        for sport in 2000..2010 {
            assert!(model.lock().unwrap().serve(&key(sport), 60).is_some());
            assert_eq!(tier.tier(&key(sport)), Tier::Offloaded);
        }
        let other_pair = OffloadKey {
            eth_src: 0x0200_0000_0009,
            ..k
        };
        assert!(model.lock().unwrap().serve(&other_pair, 60).is_none());
        let seq = tier.request_counters();
        assert!(tier.wait(seq, &p));
        assert_eq!(rule_packets(&p), vec![10, 0]);

        // A rule on the TCP/UDP port joins the table: the pair's entry no
        // longer decides like the pipeline for port 9 and is gone by the
        // barrier; the flows then go down under the finer mask.
        let mut to9 = udp_to(0x0a00_0002);
        to9.set_exact(Field::UdpDst, 9);
        flow_mod(
            &mut tier,
            &mut p,
            &FlowMod::add(0, 5, to9, apply(vec![Action::output(PortNo(3))])),
        );
        barrier(&mut tier, &p);
        assert!(
            model.lock().unwrap().program(&pair).is_none(),
            "removed before the barrier"
        );
        assert_eq!(tier.stats().revalidated, 1);
        tier.observe(k, 5);
        settle(&mut tier, &p);
        let m = model.lock().unwrap();
        let installed = m.program(&OffloadMatch::new(
            &k,
            OffloadMask {
                eth_dst: u64::MAX >> 16,
                eth_src: u64::MAX >> 16,
                ipv4_dst: u32::MAX,
                tp_dst: u16::MAX,
                ..OffloadMask::SHAPE
            },
        ));
        assert_eq!(installed.map(|p| p.verdict), Some(Verdict::Port(3)));
    }

    #[test]
    fn microflows_past_the_mask_room_go_down_exactly() {
        let (mut tier, model, mut p) = setup_masked(1);
        let k = key(1000);
        flow_mod(&mut tier, &mut p, &per_pair(1, k.eth_src, k.eth_dst, 2));
        barrier(&mut tier, &p);
        tier.observe(k, 5);
        settle(&mut tier, &p);
        assert_eq!(model.lock().unwrap().len(), 1);
        // Port 3's frames walk on to table 1, which looks at the IPv4
        // destination: a second mask, which the backend has no room for,
        // so that flow is offloaded exactly. The pair's entry stays (the
        // new rule in table 0 looks at no new bit).
        let other = OffloadKey { in_port: 3, ..k };
        let mut on3 = Match::ANY;
        on3.set_exact(Field::InPort, 3);
        flow_mod(
            &mut tier,
            &mut p,
            &FlowMod::add(0, 1, on3, vec![Instruction::GotoTable(1)]),
        );
        flow_mod(
            &mut tier,
            &mut p,
            &FlowMod::add(
                1,
                1,
                udp_to(0x0a00_0002),
                apply(vec![Action::output(PortNo(2))]),
            ),
        );
        barrier(&mut tier, &p);
        assert_eq!(tier.stats().revalidated, 0);
        tier.observe(other, 5);
        settle(&mut tier, &p);
        tier.observe(other, 5);
        settle(&mut tier, &p);
        let model = model.lock().unwrap();
        assert!(
            model.program(&other.into()).is_some(),
            "exact after the mask room ran out"
        );
        assert_eq!(model.len(), 2);
    }

    #[test]
    fn a_flow_pinned_up_is_not_served_by_its_neighbours_megaflow() {
        let (mut tier, model, mut p) = {
            let caps = Capabilities {
                masks: 4,
                ..ModelBackend::full(vec![1, 2, 3], 64).capabilities().clone()
            };
            let shared = Arc::new(Mutex::new(ModelBackend::new(caps.clone())));
            let tier = OffloadTier::new(
                Box::new(Shared(shared.clone(), caps)),
                PlacementConfig::default(),
            )
            .unwrap();
            (tier, shared, Pipeline::new(2))
        };
        let mut up = Match::ANY;
        up.set_exact(Field::EthType, 0x0800)
            .set_exact(Field::IpProto, 17)
            .set_exact(Field::UdpSrc, 1000);
        tier.pin_matching(up, Pin::Up);
        tier.pin_matching(Match::ANY, Pin::Down);
        let k = key(1000);
        flow_mod(&mut tier, &mut p, &per_pair(1, k.eth_src, k.eth_dst, 2));
        barrier(&mut tier, &p);
        tier.observe(k, 5);
        tier.observe(key(2000), 5);
        settle(&mut tier, &p);
        let mut m = model.lock().unwrap();
        assert_eq!(m.len(), 1, "the neighbours' megaflow only");
        assert!(m.serve(&key(2000), 60).is_some());
        assert!(m.serve(&k, 60).is_none(), "pinned up: software's");
        // The price: the pin's field is in every mask, so another source
        // port is another megaflow.
        assert!(m.serve(&key(3000), 60).is_none());
    }

    /// An output into a `key=flow` tunnel sends each frame's own key: the
    /// frames of two keys need two entries even where no rule looks at
    /// the key.
    #[test]
    fn a_megaflow_into_a_key_flow_tunnel_keeps_the_key_whole() {
        use offlow_offload::TunnelPort;
        use offlow_wire::tunnel::{Endpoint, KeyMode, Kind};
        let ep = |underlay_dst| Endpoint {
            key: KeyMode::Flow,
            ..Endpoint::new(Kind::Gre, [1, 1, 1, 1], underlay_dst, [2; 6], [4; 6])
        };
        let tunnels = [
            TunnelPort {
                ofport: 10,
                endpoint: ep([2, 2, 2, 2]),
                underlay: 1,
            },
            TunnelPort {
                ofport: 11,
                endpoint: ep([3, 3, 3, 3]),
                underlay: 2,
            },
        ];
        let mut caps = ModelBackend::full_with_tunnels(vec![1, 2, 3], &tunnels, 16)
            .capabilities()
            .clone();
        caps.masks = 4;
        let model = Arc::new(Mutex::new(ModelBackend::new(caps.clone())));
        let mut tier = OffloadTier::new(
            Box::new(Shared(model.clone(), caps)),
            PlacementConfig::default(),
        )
        .unwrap();
        tier.pin_matching(Match::ANY, Pin::Down);
        let mut p = Pipeline::new(2);
        let mut from10 = Match::ANY;
        from10.set_exact(Field::InPort, 10);
        flow_mod(
            &mut tier,
            &mut p,
            &FlowMod::add(0, 1, from10, apply(vec![Action::output(PortNo(11))])),
        );
        barrier(&mut tier, &p);
        let on10 = |tunnel_id| OffloadKey {
            in_port: 10,
            tunnel_id,
            ..key(1000)
        };
        tier.observe(on10(7), 5);
        tier.observe(on10(8), 5);
        settle(&mut tier, &p);
        let m = model.lock().unwrap();
        assert_eq!(m.len(), 2, "one entry per key");
        for id in [7, 8] {
            let mask = OffloadMask {
                tunnel_id: u64::MAX,
                ..OffloadMask::SHAPE
            };
            assert!(m.program(&OffloadMatch::new(&on10(id), mask)).is_some());
        }
    }
}
