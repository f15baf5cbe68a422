//! The group table (OpenFlow 1.3.5 §5.6, §6.5, §7.3.4.2): group entries
//! with their buckets, GROUP_MOD validated into a [`GroupOp`], liveness, and
//! the choice of bucket each group type makes.
//!
//! What a group does with a packet ([`GroupTable::buckets_for`]):
//! - `all`: every bucket, each on its own copy (flooding, multicast);
//! - `select`: one live bucket, chosen by a hash of the packet's flow so a
//!   flow stays on one bucket, with probability proportional to its weight;
//! - `indirect`: its single bucket;
//! - `fast failover`: the first live bucket, in bucket order.
//!
//! A bucket is live when it watches nothing, or the port it watches is
//! live, or the group it watches is (a group is live when one of its
//! buckets is); liveness of ports comes from the caller (link state and
//! port config), so a port going down moves fast-failover traffic at the
//! next lookup.
//!
//! Invariants:
//! - Every group in the table passed [`GroupTable::prepare`]: its type fits
//!   its buckets (an indirect group has one bucket, weights only in select
//!   groups, every fast-failover bucket watches something), every group its
//!   buckets forward to or watch exists, and following group actions from
//!   any group never comes back to it (no loops), so walks terminate; the
//!   chain depth is bounded by [`MAX_CHAIN`].
//! - A group that another group forwards to cannot be deleted alone
//!   (`OFPGMFC_CHAINED_GROUP`); deleting all groups at once can.
//! - Entries are immutable `Arc`s: a MODIFY replaces the entry (with fresh
//!   counters, as the spec's "removed, and the new group entry added").
//!
//! Thread-safety: the table is plain data (`Send + Sync`), changed by one
//! writer through ops applied to every copy in order, like the flow tables;
//! counters are relaxed atomics shared by the copies.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use offlow_openflow::GroupModFailedCode;

use crate::action::{Action, ActionSet};

/// `OFPG_MAX`: the largest group id a controller may use.
pub const GROUP_MAX: u32 = 0xffff_ff00;
/// `OFPG_ALL`: every group (DELETE only).
pub const GROUP_ALL: u32 = 0xffff_fffc;
/// `OFPG_ANY`: no group (a bucket's `watch_group` unset).
pub const WATCH_GROUP_ANY: u32 = 0xffff_ffff;
/// `OFPP_ANY`: no port (a bucket's `watch_port` unset).
pub const WATCH_PORT_ANY: u32 = 0xffff_ffff;
/// Longest chain of groups forwarding to groups (a group and the ones its
/// buckets reach), beyond which a GROUP_MOD is refused with
/// `OFPGMFC_CHAINING_UNSUPPORTED`.
pub const MAX_CHAIN: usize = 8;
/// Most groups the table holds (`OFPGMFC_OUT_OF_GROUPS` past it).
pub const MAX_GROUPS: usize = 65_536;
/// Most buckets in one group (`OFPGMFC_OUT_OF_BUCKETS` past it).
pub const MAX_BUCKETS: usize = 1_024;

/// `enum ofp_group_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupType {
    /// `OFPGT_ALL`: every bucket.
    All,
    /// `OFPGT_SELECT`: one bucket, chosen per flow by weight.
    Select,
    /// `OFPGT_INDIRECT`: the single bucket.
    Indirect,
    /// `OFPGT_FF`: the first live bucket.
    FastFailover,
}

impl GroupType {
    /// From the wire value.
    pub fn from_wire(v: u8) -> Option<GroupType> {
        Some(match v {
            0 => GroupType::All,
            1 => GroupType::Select,
            2 => GroupType::Indirect,
            3 => GroupType::FastFailover,
            _ => return None,
        })
    }

    /// The wire value.
    pub fn to_wire(self) -> u8 {
        match self {
            GroupType::All => 0,
            GroupType::Select => 1,
            GroupType::Indirect => 2,
            GroupType::FastFailover => 3,
        }
    }
}

/// One bucket (`struct ofp_bucket`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Bucket {
    /// Relative weight (select groups; 0 elsewhere).
    pub weight: u16,
    /// Port whose liveness this bucket follows ([`WATCH_PORT_ANY`]: none).
    pub watch_port: u32,
    /// Group whose liveness this bucket follows ([`WATCH_GROUP_ANY`]: none).
    pub watch_group: u32,
    /// Actions applied to the bucket's copy of the packet, in order.
    pub actions: Vec<Action>,
}

impl Bucket {
    /// The groups this bucket forwards to.
    fn forwards_to(&self) -> impl Iterator<Item = u32> + '_ {
        self.actions.iter().filter_map(|a| match a {
            Action::Group(g) => Some(*g),
            _ => None,
        })
    }
}

/// A group's counters (`struct ofp_group_stats`), shared by the copies of
/// the table.
#[derive(Debug, Default)]
pub struct GroupCounters {
    packets: AtomicU64,
    bytes: AtomicU64,
    /// Per bucket: (packets, bytes).
    buckets: Box<[(AtomicU64, AtomicU64)]>,
}

impl GroupCounters {
    fn new(n_buckets: usize) -> GroupCounters {
        GroupCounters {
            packets: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            buckets: (0..n_buckets)
                .map(|_| (AtomicU64::new(0), AtomicU64::new(0)))
                .collect(),
        }
    }

    /// Count `packets`/`bytes` processed by the group, each through the
    /// buckets listed.
    pub fn add(&self, packets: u64, bytes: u64, buckets: &[usize]) {
        self.packets.fetch_add(packets, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        for &b in buckets {
            if let Some((p, by)) = self.buckets.get(b) {
                p.fetch_add(packets, Ordering::Relaxed);
                by.fetch_add(bytes, Ordering::Relaxed);
            }
        }
    }

    /// Count one packet of `bytes` processed by the group.
    pub fn add_packet(&self, bytes: u64) {
        self.packets.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Count one packet of `bytes` through bucket `bucket` (ignored past the
    /// last bucket).
    pub fn add_bucket(&self, bucket: usize, bytes: u64) {
        if let Some((p, b)) = self.buckets.get(bucket) {
            p.fetch_add(1, Ordering::Relaxed);
            b.fetch_add(bytes, Ordering::Relaxed);
        }
    }

    /// (packets, bytes) of the group.
    pub fn get(&self) -> (u64, u64) {
        (
            self.packets.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        )
    }

    /// (packets, bytes) of each bucket.
    pub fn buckets(&self) -> Vec<(u64, u64)> {
        self.buckets
            .iter()
            .map(|(p, b)| (p.load(Ordering::Relaxed), b.load(Ordering::Relaxed)))
            .collect()
    }
}

/// A group entry.
#[derive(Debug)]
pub struct Group {
    /// Its id (≤ [`GROUP_MAX`]).
    pub id: u32,
    /// Its type.
    pub kind: GroupType,
    /// Its buckets, in order, as the controller sent them (GROUP_DESC).
    pub buckets: Vec<Bucket>,
    /// What each bucket executes: its actions taken as an action set
    /// (OpenFlow 1.3.5 §5.6.1 and `struct ofp_bucket`: "The action list is
    /// an action set"), so in §5.10 order, one action per type, an output
    /// dropped when the bucket also holds a group. Open vSwitch executes
    /// buckets the same way.
    pub run: Box<[Box<[Action]>]>,
    /// When it was added or last modified (caller's clock, ns).
    pub installed_at_ns: u64,
    /// Its counters.
    pub counters: GroupCounters,
}

/// `enum ofp_group_mod_command`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupModCommand {
    /// `OFPGC_ADD`.
    Add,
    /// `OFPGC_MODIFY`.
    Modify,
    /// `OFPGC_DELETE`.
    Delete,
}

impl GroupModCommand {
    /// From the wire value.
    pub fn from_wire(v: u16) -> Option<GroupModCommand> {
        Some(match v {
            0 => GroupModCommand::Add,
            1 => GroupModCommand::Modify,
            2 => GroupModCommand::Delete,
            _ => return None,
        })
    }
}

/// A GROUP_MOD, in the pipeline's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMod {
    /// What to do.
    pub command: GroupModCommand,
    /// `OFPGT_*` as sent (checked by [`GroupTable::prepare`]).
    pub group_type: u8,
    /// The group ([`GROUP_ALL`] with DELETE: every group).
    pub group_id: u32,
    /// The buckets (ADD and MODIFY).
    pub buckets: Vec<Bucket>,
}

/// Why a GROUP_MOD was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GroupError {
    /// A group-mod failure (`OFPET_GROUP_MOD_FAILED`) with its reason.
    #[error("group {group}: {why}")]
    Failed {
        /// The group of the request.
        group: u32,
        /// Human-readable reason.
        why: &'static str,
        /// The spec's code.
        code: GroupModFailedCode,
    },
    /// A bucket's action list was refused (the flow-mod rules apply to
    /// buckets, §6.5): the caller's own error for it.
    #[error("group {group}, bucket {bucket}: {error}")]
    Action {
        /// The group of the request.
        group: u32,
        /// The bucket's position.
        bucket: usize,
        /// The action checker's error.
        error: crate::PipelineError,
    },
}

impl GroupError {
    /// The OpenFlow error the switch answers with: the group-mod code, or
    /// a bucket action's own (`OFPET_BAD_ACTION`, ...).
    pub fn of_error(&self) -> offlow_openflow::OfError {
        match self {
            GroupError::Failed { code, .. } => offlow_openflow::OfError::GroupModFailed(*code),
            GroupError::Action { error, .. } => error.of_error(),
        }
    }
}

fn fail(group: u32, code: GroupModFailedCode, why: &'static str) -> GroupError {
    GroupError::Failed { group, why, code }
}

/// A validated change to the group table (apply it to every copy).
#[derive(Debug, Clone)]
pub enum GroupOp {
    /// Add the group, or replace the one of its id.
    Put(Arc<Group>),
    /// Remove these groups (the flows that forward to them are removed by
    /// the caller, §6.5).
    Delete(Vec<u32>),
    /// Port `port` became live (link up and not administratively down) or
    /// stopped being live: what fast-failover and select buckets watching
    /// it follow.
    PortLive {
        /// The port.
        port: u32,
        /// Its new liveness.
        live: bool,
    },
}

/// The group table, with the liveness of the ports its buckets watch.
#[derive(Debug, Clone, Default)]
pub struct GroupTable {
    groups: BTreeMap<u32, Arc<Group>>,
    /// Ports known not to be live; every other port is.
    down_ports: BTreeSet<u32>,
}

impl GroupTable {
    /// An empty table.
    pub fn new() -> GroupTable {
        GroupTable::default()
    }

    /// The group `id`.
    pub fn get(&self, id: u32) -> Option<&Arc<Group>> {
        self.groups.get(&id)
    }

    /// Every group, by id.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Group>> {
        self.groups.values()
    }

    /// Number of groups.
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    /// True when there is no group.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// Validate `gm` against the table (§6.5, §7.3.4.2). `check_actions`
    /// validates one bucket's action list as a flow-mod's would be (minus
    /// the group actions, which are checked here). `now_ns` stamps a new
    /// entry.
    pub fn prepare(
        &self,
        gm: &GroupMod,
        now_ns: u64,
        check_actions: &dyn Fn(&[Action]) -> Result<(), crate::PipelineError>,
    ) -> Result<GroupOp, GroupError> {
        use GroupModFailedCode as C;
        let id = gm.group_id;
        if gm.command == GroupModCommand::Delete {
            if id == GROUP_ALL {
                return Ok(GroupOp::Delete(self.groups.keys().copied().collect()));
            }
            if id > GROUP_MAX {
                return Err(fail(id, C::InvalidGroup, "not a deletable group id"));
            }
            // No such group: nothing to do, and no error (§6.5).
            if !self.groups.contains_key(&id) {
                return Ok(GroupOp::Delete(Vec::new()));
            }
            if self
                .groups
                .values()
                .any(|g| g.id != id && g.buckets.iter().any(|b| b.forwards_to().any(|t| t == id)))
            {
                return Err(fail(id, C::ChainedGroup, "another group forwards to it"));
            }
            return Ok(GroupOp::Delete(vec![id]));
        }
        if id > GROUP_MAX {
            return Err(fail(id, C::InvalidGroup, "group id beyond OFPG_MAX"));
        }
        let exists = self.groups.contains_key(&id);
        match gm.command {
            GroupModCommand::Add if exists => {
                return Err(fail(id, C::GroupExists, "already exists"));
            }
            GroupModCommand::Modify if !exists => {
                return Err(fail(id, C::UnknownGroup, "no such group to modify"));
            }
            GroupModCommand::Add if self.groups.len() >= MAX_GROUPS => {
                return Err(fail(id, C::OutOfGroups, "the group table is full"));
            }
            _ => {}
        }
        let kind = GroupType::from_wire(gm.group_type)
            .ok_or_else(|| fail(id, C::BadType, "unknown group type"))?;
        if gm.buckets.len() > MAX_BUCKETS {
            return Err(fail(id, C::OutOfBuckets, "too many buckets"));
        }
        if kind == GroupType::Indirect && gm.buckets.len() != 1 {
            return Err(fail(
                id,
                C::InvalidGroup,
                "an indirect group has exactly one bucket",
            ));
        }
        for (i, b) in gm.buckets.iter().enumerate() {
            if kind != GroupType::Select && b.weight != 0 {
                return Err(fail(
                    id,
                    C::InvalidGroup,
                    "weight is defined for select groups only",
                ));
            }
            if kind == GroupType::FastFailover
                && b.watch_port == WATCH_PORT_ANY
                && b.watch_group == WATCH_GROUP_ANY
            {
                return Err(fail(
                    id,
                    C::BadWatch,
                    "a fast-failover bucket must watch a port or a group",
                ));
            }
            if b.watch_group != WATCH_GROUP_ANY {
                if b.watch_group == id {
                    return Err(fail(id, C::Loop, "a bucket watches its own group"));
                }
                if !self.groups.contains_key(&b.watch_group) {
                    return Err(fail(id, C::BadWatch, "the watched group does not exist"));
                }
            }
            let plain: Vec<Action> = b
                .actions
                .iter()
                .filter(|a| !matches!(a, Action::Group(_)))
                .copied()
                .collect();
            check_actions(&plain).map_err(|error| GroupError::Action {
                group: id,
                bucket: i,
                error,
            })?;
            for t in b.forwards_to() {
                if t == id {
                    return Err(fail(id, C::Loop, "a bucket forwards to its own group"));
                }
                if !self.groups.contains_key(&t) {
                    return Err(fail(
                        id,
                        C::ChainingUnsupported,
                        "a bucket forwards to a group that does not exist",
                    ));
                }
            }
        }
        // Following the new buckets' group actions must never reach `id`
        // (a MODIFY could close a loop through groups that forward to it)
        // and must stay within MAX_CHAIN.
        let depth = self.chain_depth(&gm.buckets, id, 1)?;
        if depth > MAX_CHAIN {
            return Err(fail(id, C::ChainingUnsupported, "group chain too deep"));
        }
        let run = gm
            .buckets
            .iter()
            .map(|b| {
                let mut set = ActionSet::new();
                for a in &b.actions {
                    set.write(*a);
                }
                let mut ordered = Vec::with_capacity(set.len());
                set.drain_ordered_into(&mut ordered);
                ordered.into_boxed_slice()
            })
            .collect();
        Ok(GroupOp::Put(Arc::new(Group {
            id,
            kind,
            run,
            buckets: gm.buckets.clone(),
            installed_at_ns: now_ns,
            counters: GroupCounters::new(gm.buckets.len()),
        })))
    }

    /// The depth of the chain below buckets `buckets` of group `root` (1:
    /// no group actions), or a Loop error when it reaches `root`.
    fn chain_depth(
        &self,
        buckets: &[Bucket],
        root: u32,
        depth: usize,
    ) -> Result<usize, GroupError> {
        if depth > MAX_CHAIN + 1 {
            // Deeper than allowed already; stop walking (the caller
            // refuses it).
            return Ok(depth);
        }
        let mut deepest = depth;
        for b in buckets {
            for t in b.forwards_to() {
                if t == root {
                    return Err(fail(
                        root,
                        GroupModFailedCode::Loop,
                        "the group chain loops back to this group",
                    ));
                }
                if let Some(g) = self.groups.get(&t) {
                    deepest = deepest.max(self.chain_depth(&g.buckets, root, depth + 1)?);
                }
            }
        }
        Ok(deepest)
    }

    /// Apply a prepared op.
    pub fn apply(&mut self, op: &GroupOp) {
        match op {
            GroupOp::Put(g) => {
                self.groups.insert(g.id, g.clone());
            }
            GroupOp::Delete(ids) => {
                for id in ids {
                    self.groups.remove(id);
                }
            }
            GroupOp::PortLive { port, live: true } => {
                self.down_ports.remove(port);
            }
            GroupOp::PortLive { port, live: false } => {
                self.down_ports.insert(*port);
            }
        }
    }

    /// Whether `port` is live as far as this table knows (ports are live
    /// until a [`GroupOp::PortLive`] says otherwise).
    pub fn port_live(&self, port: u32) -> bool {
        !self.down_ports.contains(&port)
    }

    /// The op that records `port`'s liveness, or `None` when the table
    /// already has it so.
    pub fn port_live_op(&self, port: u32, live: bool) -> Option<GroupOp> {
        (self.port_live(port) != live).then_some(GroupOp::PortLive { port, live })
    }

    /// The one bucket a packet with `flow_hash` takes through `group`, by
    /// position, under this table's port liveness: for select, indirect
    /// and fast-failover groups (an `all` group takes every bucket: `None`
    /// here); `None` too when no bucket applies (the group drops it).
    /// Allocates nothing (the executor calls it per packet).
    pub fn pick(&self, group: &Group, flow_hash: u64) -> Option<usize> {
        self.choose(group, flow_hash, &|p| self.port_live(p))
    }

    /// The one bucket a non-`all` group takes under `port_live` (see
    /// [`pick`](Self::pick)); `None` for `all` or when none applies.
    fn choose(
        &self,
        group: &Group,
        flow_hash: u64,
        port_live: &dyn Fn(u32) -> bool,
    ) -> Option<usize> {
        match group.kind {
            GroupType::All => None,
            GroupType::Indirect => (!group.buckets.is_empty()).then_some(0),
            GroupType::FastFailover => group
                .buckets
                .iter()
                .position(|b| self.bucket_live(b, port_live, 0)),
            GroupType::Select => {
                let total: u64 = group
                    .buckets
                    .iter()
                    .filter(|b| self.bucket_live(b, port_live, 0))
                    .map(|b| u64::from(b.weight))
                    .sum();
                if total == 0 {
                    return None;
                }
                let mut pick = spread(flow_hash) % total;
                for (i, b) in group.buckets.iter().enumerate() {
                    if !self.bucket_live(b, port_live, 0) {
                        continue;
                    }
                    let w = u64::from(b.weight);
                    if pick < w {
                        return Some(i);
                    }
                    pick -= w;
                }
                None
            }
        }
    }

    /// Whether bucket `b` is live: it watches nothing, or what it watches
    /// is live.
    fn bucket_live(&self, b: &Bucket, port_live: &dyn Fn(u32) -> bool, depth: usize) -> bool {
        if b.watch_port == WATCH_PORT_ANY && b.watch_group == WATCH_GROUP_ANY {
            return true;
        }
        (b.watch_port != WATCH_PORT_ANY && port_live(b.watch_port))
            || (b.watch_group != WATCH_GROUP_ANY
                && self.group_live(b.watch_group, port_live, depth + 1))
    }

    /// Whether group `id` is live: one of its buckets is.
    pub fn group_live(&self, id: u32, port_live: &dyn Fn(u32) -> bool, depth: usize) -> bool {
        if depth > MAX_CHAIN {
            return false;
        }
        self.groups.get(&id).is_some_and(|g| {
            g.buckets
                .iter()
                .any(|b| self.bucket_live(b, port_live, depth))
        })
    }

    /// The buckets of `group` a packet goes through, by position, into
    /// `out` (cleared first): all of them (all), the one chosen by
    /// `flow_hash` among the live ones by weight (select), the only one
    /// (indirect), the first live one (fast failover). Empty when none
    /// applies: the packet is dropped by the group.
    pub fn buckets_for(
        &self,
        group: &Group,
        flow_hash: u64,
        port_live: &dyn Fn(u32) -> bool,
        out: &mut Vec<usize>,
    ) {
        out.clear();
        match group.kind {
            GroupType::All => out.extend(0..group.buckets.len()),
            _ => out.extend(self.choose(group, flow_hash, port_live)),
        }
    }
}

/// One group a decision passes through, for a place that runs the
/// decision as one list ([`GroupTable::inline`]): the group (its counters)
/// and the bucket taken (`None`: the group had none to take and dropped
/// the packet).
#[derive(Debug, Clone)]
pub struct GroupUse {
    /// The group entry (a MODIFY replaces it: compare with `Arc::ptr_eq`).
    pub group: Arc<Group>,
    /// The bucket taken, by position.
    pub bucket: Option<usize>,
}

impl GroupUse {
    /// Credit `packets` frames of `bytes` bytes to the group and its bucket,
    /// as the executor counts them one by one.
    pub fn credit(&self, packets: u64, bytes: u64) {
        self.group
            .counters
            .add(packets, bytes, self.bucket.as_slice());
    }
}

impl GroupTable {
    /// `actions` as one list for a packet with `flow_hash`: each group
    /// action replaced by the action set of the one bucket it takes (the
    /// same bucket the executor would), recursively, with the groups
    /// passed in `uses`. `None` when a copy would be needed: a group action
    /// that is not the list's last, or an `all` group of several buckets.
    /// What a place without packet copies (the offload tier) can run.
    pub fn inline(
        &self,
        actions: &[Action],
        flow_hash: u64,
        uses: &mut Vec<GroupUse>,
    ) -> Option<Vec<Action>> {
        let mut out = Vec::with_capacity(actions.len());
        self.inline_into(actions, flow_hash, uses, &mut out, 0)?;
        Some(out)
    }

    fn inline_into(
        &self,
        actions: &[Action],
        flow_hash: u64,
        uses: &mut Vec<GroupUse>,
        out: &mut Vec<Action>,
        depth: usize,
    ) -> Option<()> {
        for (i, a) in actions.iter().enumerate() {
            let Action::Group(id) = *a else {
                out.push(*a);
                continue;
            };
            if i + 1 != actions.len() || depth >= MAX_CHAIN {
                return None;
            }
            // A missing group is skipped by the executor (counted there).
            let Some(group) = self.get(id) else {
                return Some(());
            };
            let bucket = match group.kind {
                GroupType::All if group.buckets.len() > 1 => return None,
                GroupType::All => (!group.buckets.is_empty()).then_some(0),
                _ => self.pick(group, flow_hash),
            };
            uses.push(GroupUse {
                group: Arc::clone(group),
                bucket,
            });
            if let Some(run) = bucket.and_then(|b| group.run.get(b)) {
                self.inline_into(run, flow_hash, uses, out, depth + 1)?;
            }
        }
        Some(())
    }
}

/// Mix a flow hash before reducing it modulo a bucket weight total: the
/// caller's hash may be weak in its low bits (a table index's hash is
/// used for its high bits), and a modulo reads the low ones first.
fn spread(hash: u64) -> u64 {
    // The 64-bit finaliser of MurmurHash3 (fmix64).
    let mut h = hash;
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::port::PortNo;
    use GroupModFailedCode as C;

    fn out(p: u32) -> Action {
        Action::output(PortNo(p))
    }

    fn bucket(weight: u16, watch_port: u32, actions: Vec<Action>) -> Bucket {
        Bucket {
            weight,
            watch_port,
            watch_group: WATCH_GROUP_ANY,
            actions,
        }
    }

    fn gm(command: GroupModCommand, kind: u8, id: u32, buckets: Vec<Bucket>) -> GroupMod {
        GroupMod {
            command,
            group_type: kind,
            group_id: id,
            buckets,
        }
    }

    fn ok(_: &[Action]) -> Result<(), crate::PipelineError> {
        Ok(())
    }

    fn put(t: &mut GroupTable, m: GroupMod) -> Result<(), GroupError> {
        let op = t.prepare(&m, 0, &ok)?;
        t.apply(&op);
        Ok(())
    }

    fn code(r: Result<(), GroupError>) -> Option<GroupModFailedCode> {
        match r {
            Err(GroupError::Failed { code, .. }) => Some(code),
            _ => None,
        }
    }

    use GroupModCommand::{Add, Delete, Modify};

    #[test]
    fn add_modify_delete_follow_the_spec() {
        let mut t = GroupTable::new();
        put(
            &mut t,
            gm(Add, 0, 1, vec![bucket(0, WATCH_PORT_ANY, vec![out(2)])]),
        )
        .unwrap();
        assert_eq!(
            code(put(&mut t, gm(Add, 0, 1, vec![]))),
            Some(C::GroupExists)
        );
        assert_eq!(
            code(put(&mut t, gm(Modify, 0, 9, vec![]))),
            Some(C::UnknownGroup)
        );
        put(
            &mut t,
            gm(Modify, 1, 1, vec![bucket(3, WATCH_PORT_ANY, vec![out(3)])]),
        )
        .unwrap();
        assert_eq!(t.get(1).unwrap().kind, GroupType::Select);
        // Deleting a group that does not exist is no error.
        put(&mut t, gm(Delete, 0, 7, vec![])).unwrap();
        put(&mut t, gm(Delete, 0, 1, vec![])).unwrap();
        assert!(t.is_empty());
        assert_eq!(
            code(put(&mut t, gm(Add, 0, GROUP_MAX + 1, vec![]))),
            Some(C::InvalidGroup)
        );
        assert_eq!(code(put(&mut t, gm(Add, 4, 2, vec![]))), Some(C::BadType));
    }

    #[test]
    fn types_constrain_their_buckets() {
        let mut t = GroupTable::new();
        let b = || bucket(0, WATCH_PORT_ANY, vec![out(2)]);
        assert_eq!(
            code(put(&mut t, gm(Add, 2, 1, vec![b(), b()]))),
            Some(C::InvalidGroup),
            "indirect: one bucket"
        );
        assert_eq!(
            code(put(
                &mut t,
                gm(Add, 0, 1, vec![bucket(5, WATCH_PORT_ANY, vec![])])
            )),
            Some(C::InvalidGroup),
            "weights only in select groups"
        );
        assert_eq!(
            code(put(&mut t, gm(Add, 3, 1, vec![b()]))),
            Some(C::BadWatch),
            "fast failover buckets watch something"
        );
        put(&mut t, gm(Add, 3, 1, vec![bucket(0, 2, vec![out(2)])])).unwrap();
    }

    #[test]
    fn chains_must_exist_and_not_loop() {
        let mut t = GroupTable::new();
        let to = |g: u32| bucket(0, WATCH_PORT_ANY, vec![Action::Group(g)]);
        assert_eq!(
            code(put(&mut t, gm(Add, 0, 1, vec![to(2)]))),
            Some(C::ChainingUnsupported)
        );
        put(
            &mut t,
            gm(Add, 0, 2, vec![bucket(0, WATCH_PORT_ANY, vec![out(1)])]),
        )
        .unwrap();
        put(&mut t, gm(Add, 0, 1, vec![to(2)])).unwrap();
        assert_eq!(code(put(&mut t, gm(Add, 0, 3, vec![to(3)]))), Some(C::Loop));
        // 2 -> 1 -> 2 would loop.
        assert_eq!(
            code(put(&mut t, gm(Modify, 0, 2, vec![to(1)]))),
            Some(C::Loop)
        );
        // 2 is forwarded to by 1: not deletable alone; all at once is.
        assert_eq!(
            code(put(&mut t, gm(Delete, 0, 2, vec![]))),
            Some(C::ChainedGroup)
        );
        put(&mut t, gm(Delete, 0, GROUP_ALL, vec![])).unwrap();
        assert!(t.is_empty());
        // A chain deeper than MAX_CHAIN is refused.
        put(
            &mut t,
            gm(Add, 0, 100, vec![bucket(0, WATCH_PORT_ANY, vec![out(1)])]),
        )
        .unwrap();
        let mut last = 100;
        let mut refused = None;
        for g in 101..120 {
            match put(&mut t, gm(Add, 0, g, vec![to(last)])) {
                Ok(()) => last = g,
                Err(e) => {
                    refused = Some((g, e));
                    break;
                }
            }
        }
        let (g, e) = refused.expect("a deep chain is refused");
        assert_eq!(g as usize, 100 + MAX_CHAIN, "{e}");
        assert_eq!(code(Err(e)), Some(C::ChainingUnsupported));
    }

    #[test]
    fn fast_failover_takes_the_first_live_bucket() {
        let mut t = GroupTable::new();
        put(
            &mut t,
            gm(
                Add,
                3,
                1,
                vec![bucket(0, 2, vec![out(2)]), bucket(0, 3, vec![out(3)])],
            ),
        )
        .unwrap();
        let g = t.get(1).unwrap().clone();
        let mut v = Vec::new();
        t.buckets_for(&g, 0, &|_| true, &mut v);
        assert_eq!(v, [0]);
        t.buckets_for(&g, 0, &|p| p != 2, &mut v);
        assert_eq!(v, [1]);
        t.buckets_for(&g, 0, &|_| false, &mut v);
        assert!(v.is_empty(), "no live bucket: dropped");
        assert!(!t.group_live(1, &|_| false, 0));
    }

    /// Select: a flow hash always picks the same bucket, and over all hashes
    /// each live bucket gets its weight's share (reference: counting).
    #[test]
    fn select_honours_weights_and_liveness() {
        let mut t = GroupTable::new();
        put(
            &mut t,
            gm(
                Add,
                1,
                1,
                vec![
                    bucket(1, WATCH_PORT_ANY, vec![out(1)]),
                    bucket(3, 2, vec![out(2)]),
                    bucket(0, WATCH_PORT_ANY, vec![out(3)]),
                ],
            ),
        )
        .unwrap();
        let g = t.get(1).unwrap().clone();
        let mut v = Vec::new();
        let mut counts = [0u32; 3];
        for h in 0..4000u64 {
            t.buckets_for(&g, h, &|_| true, &mut v);
            assert_eq!(v.len(), 1);
            counts[v[0]] += 1;
            let first = v[0];
            t.buckets_for(&g, h, &|_| true, &mut v);
            assert_eq!(v[0], first, "same flow, same bucket");
        }
        // The hash is mixed before the modulo: shares within 10%.
        assert!((850..=1150).contains(&counts[0]), "{counts:?}");
        assert!((2850..=3150).contains(&counts[1]), "{counts:?}");
        assert_eq!(counts[2], 0, "weight 0: never chosen");
        // Port 2 down: bucket 1 is out, everything goes to bucket 0.
        for h in 0..100u64 {
            t.buckets_for(&g, h, &|p| p != 2, &mut v);
            assert_eq!(v, [0]);
        }
    }

    /// `pick` (the executor's, liveness from the table's own port state)
    /// agrees with `buckets_for` given the same liveness, for every type.
    #[test]
    fn pick_follows_the_table_port_liveness() {
        let mut t = GroupTable::new();
        let ff = vec![bucket(0, 2, vec![out(2)]), bucket(0, 3, vec![out(3)])];
        put(&mut t, gm(Add, 3, 1, ff)).unwrap();
        let sel = vec![bucket(2, 2, vec![out(2)]), bucket(1, 3, vec![out(3)])];
        put(&mut t, gm(Add, 1, 2, sel)).unwrap();
        put(
            &mut t,
            gm(Add, 2, 3, vec![bucket(0, WATCH_PORT_ANY, vec![out(4)])]),
        )
        .unwrap();
        let mut v = Vec::new();
        for down in [None, Some(2), Some(3)] {
            if let Some(p) = down {
                for q in [2, 3] {
                    if let Some(op) = t.port_live_op(q, q != p) {
                        t.apply(&op);
                    }
                }
            }
            for id in 1..=3 {
                let g = t.get(id).unwrap().clone();
                for h in 0..200u64 {
                    t.buckets_for(&g, h, &|p| Some(p) != down, &mut v);
                    assert_eq!(
                        t.pick(&g, h),
                        v.first().copied(),
                        "group {id} down {down:?}"
                    );
                }
            }
        }
        // Recording a state the table already has is no op.
        assert!(t.port_live_op(3, false).is_none());
        assert!(t.port_live_op(2, true).is_none());
    }

    #[test]
    fn all_and_indirect_buckets() {
        let mut t = GroupTable::new();
        put(
            &mut t,
            gm(
                Add,
                0,
                1,
                vec![
                    bucket(0, WATCH_PORT_ANY, vec![out(1)]),
                    bucket(0, WATCH_PORT_ANY, vec![out(2)]),
                ],
            ),
        )
        .unwrap();
        put(
            &mut t,
            gm(Add, 2, 2, vec![bucket(0, WATCH_PORT_ANY, vec![out(3)])]),
        )
        .unwrap();
        let mut v = Vec::new();
        t.buckets_for(&t.get(1).unwrap().clone(), 7, &|_| false, &mut v);
        assert_eq!(v, [0, 1], "all: every bucket, liveness aside");
        t.buckets_for(&t.get(2).unwrap().clone(), 7, &|_| true, &mut v);
        assert_eq!(v, [0]);
        let g = t.get(1).unwrap();
        g.counters.add(2, 128, &[0, 1]);
        assert_eq!(g.counters.get(), (2, 128));
        assert_eq!(g.counters.buckets(), vec![(2, 128), (2, 128)]);
    }

    #[test]
    fn bucket_actions_go_through_the_checker() {
        let t = GroupTable::new();
        let refuse = |a: &[Action]| {
            if a.iter().any(|a| matches!(a, Action::PopVlan)) {
                Err(crate::PipelineError::BadArgument("no tag"))
            } else {
                Ok(())
            }
        };
        let m = gm(
            Add,
            0,
            1,
            vec![bucket(0, WATCH_PORT_ANY, vec![Action::PopVlan])],
        );
        assert!(matches!(
            t.prepare(&m, 0, &refuse),
            Err(GroupError::Action { bucket: 0, .. })
        ));
    }
}
