//! Property test: random small multi-table pipelines built through flow-mods
//! and random keys; `Pipeline::lookup` must agree with a deliberately naive
//! interpreter (linear scan per table, raw instruction lists, a plain `Vec`
//! action set with its own ordering table). Every op is also replayed on a
//! clone, which must answer identically.

use offlow_flow::{Field, FlowKey, Match};
use offlow_pipeline::*;
use proptest::prelude::*;

// ---------------------------------------------------------------- reference

#[derive(Debug, Clone)]
struct RefRule {
    id: RuleId,
    priority: u32,
    matcher: Match,
    cookie: u64,
    instructions: Vec<Instruction>,
}

#[derive(Debug, Default)]
struct RefPipeline {
    tables: Vec<Vec<RefRule>>,
}

/// Identity of an action "type" in the action set: set-field per field.
fn kind(a: &Action) -> String {
    match a {
        Action::SetField(f, _) => format!("set_field:{}", f.name()),
        other => other.name().to_string(),
    }
}

/// OpenFlow 1.3.5 §5.10, written out independently of the crate.
fn rank(a: &Action) -> u32 {
    match a {
        Action::CopyTtlIn => 1,
        Action::PopVlan | Action::PopMpls(_) | Action::PopPbb => 2,
        Action::PushMpls(_) => 3,
        Action::PushPbb(_) => 4,
        Action::PushVlan(_) => 5,
        Action::CopyTtlOut => 6,
        Action::DecNwTtl | Action::DecMplsTtl => 7,
        Action::SetField(..) | Action::SetNwTtl(_) | Action::SetMplsTtl(_) => 8,
        // "qos" step; within it ties sort by name (offlow_workers first).
        Action::SetQueue(_) | Action::SetWorkers(_) => 9,
        Action::Group(_) => 10,
        Action::Output { .. } => 11,
        Action::Experimenter(_) => 12,
        // Pipeline-internal, never written to an action set.
        Action::Meter(_) => 13,
    }
}

impl RefPipeline {
    /// Actions, outcome, path, and the origin of each output to CONTROLLER.
    fn lookup(&self, key: &FlowKey) -> (Vec<Action>, Outcome, Vec<PathStep>, Vec<PacketInOrigin>) {
        let mut k = *key;
        let mut actions = Vec::new();
        // The action set, each action with the origin its writer gives it.
        let mut set: Vec<(Action, PacketInOrigin)> = Vec::new();
        let mut path = Vec::new();
        let mut origins = Vec::new();
        let is_ctrl =
            |a: &Action| matches!(a, Action::Output { port, .. } if *port == PortNo::CONTROLLER);
        let mut t = 0usize;
        loop {
            let mut best: Option<&RefRule> = None;
            for r in &self.tables[t] {
                if r.matcher.matches(&k) && best.is_none_or(|b| r.priority > b.priority) {
                    best = Some(r);
                }
            }
            let Some(r) = best else {
                return (actions, Outcome::Miss { table_id: t as u8 }, path, origins);
            };
            let origin = PacketInOrigin {
                table_id: t as u8,
                cookie: r.cookie,
                table_miss: r.priority == 0 && r.matcher == Match::ANY,
            };
            path.push(PathStep {
                table_id: t as u8,
                rule: r.id,
            });
            let find =
                |pred: &dyn Fn(&Instruction) -> bool| r.instructions.iter().find(|i| pred(i));
            if let Some(Instruction::ApplyActions(list)) =
                find(&|i| matches!(i, Instruction::ApplyActions(_)))
            {
                for a in list {
                    if let Action::SetField(f, v) = a {
                        k.set(*f, *v);
                    }
                    actions.push(*a);
                    if is_ctrl(a) {
                        origins.push(origin);
                    }
                }
            }
            if find(&|i| matches!(i, Instruction::ClearActions)).is_some() {
                set.clear();
            }
            if let Some(Instruction::WriteActions(list)) =
                find(&|i| matches!(i, Instruction::WriteActions(_)))
            {
                for a in list {
                    set.retain(|(x, _)| kind(x) != kind(a));
                    set.push((*a, origin));
                }
            }
            if let Some(Instruction::WriteMetadata { value, mask }) =
                find(&|i| matches!(i, Instruction::WriteMetadata { .. }))
            {
                let md = k.get(Field::Metadata) as u64;
                k.set(Field::Metadata, ((md & !mask) | (value & mask)) as u128);
            }
            match find(&|i| matches!(i, Instruction::GotoTable(_))) {
                Some(Instruction::GotoTable(n)) => t = *n as usize,
                _ => {
                    let mut s = set.clone();
                    // Stable sort by rank, ties (several set-fields) by field.
                    s.sort_by_key(|(a, _)| (rank(a), kind(a)));
                    for (a, o) in s {
                        actions.push(a);
                        if is_ctrl(&a) {
                            origins.push(o);
                        }
                    }
                    let miss_entry = r.priority == 0 && r.matcher == Match::ANY;
                    let ctrl = actions.iter().any(is_ctrl);
                    let out = if miss_entry && ctrl {
                        Outcome::ControllerMiss { table_id: t as u8 }
                    } else if actions.iter().any(|a| matches!(a, Action::Output { .. })) {
                        Outcome::Forward
                    } else {
                        Outcome::Drop
                    };
                    return (actions, out, path, origins);
                }
            }
        }
    }
}

// ---------------------------------------------------------------- strategies

const MATCH_FIELDS: [Field; 4] = [Field::InPort, Field::EthDst, Field::EthSrc, Field::TunnelId];
const SET_FIELDS: [Field; 3] = [Field::EthDst, Field::EthSrc, Field::TunnelId];

fn arb_match() -> impl Strategy<Value = Match> {
    (
        proptest::collection::vec((0usize..4, 0u128..3), 0..3),
        proptest::option::of((
            0u128..4,
            prop_oneof![Just(1u128), Just(3), Just(u64::MAX as u128)],
        )),
    )
        .prop_map(|(fields, md)| {
            let mut m = Match::ANY;
            for (f, v) in fields {
                m.set_exact(MATCH_FIELDS[f], v);
            }
            if let Some((v, mask)) = md {
                m.set_masked(Field::Metadata, v, mask);
            }
            m
        })
}

fn arb_action() -> impl Strategy<Value = Action> {
    prop_oneof![
        3 => (1u32..4).prop_map(|p| Action::output(PortNo(p))),
        1 => Just(Action::output(PortNo::CONTROLLER)),
        3 => (0usize..3, 0u128..3).prop_map(|(f, v)| Action::SetField(SET_FIELDS[f], v)),
        1 => (0u32..2).prop_map(Action::SetQueue),
        1 => (1u64..4).prop_map(Action::SetWorkers),
    ]
}

#[derive(Debug, Clone)]
struct RuleSpec {
    table: u8,
    priority: u32,
    matcher: Match,
    cookie: u64,
    apply: Option<Vec<Action>>,
    clear: bool,
    write: Option<Vec<Action>>,
    metadata: Option<(u64, u64)>,
    /// Goto offset (1..) past the rule's table, wrapped into range later.
    goto: Option<u8>,
}

fn arb_rule() -> impl Strategy<Value = RuleSpec> {
    (
        0u8..4,
        0u32..4,
        arb_match(),
        0u64..4,
        proptest::option::of(proptest::collection::vec(arb_action(), 0..4)),
        any::<bool>(),
        proptest::option::of(proptest::collection::vec(arb_action(), 0..4)),
        proptest::option::of((0u64..4, 0u64..4)),
        proptest::option::of(1u8..4),
    )
        .prop_map(
            |(table, priority, matcher, cookie, apply, clear, write, metadata, goto)| RuleSpec {
                table,
                priority,
                matcher,
                cookie,
                apply,
                clear,
                write,
                metadata,
                goto,
            },
        )
}

#[derive(Debug, Clone)]
enum Op {
    Add(RuleSpec),
    /// Non-strict delete in one table with a cookie filter.
    Delete(u8, Match, u64, u64),
}

fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => arb_rule().prop_map(Op::Add),
        1 => (0u8..4, arb_match(), 0u64..4, prop_oneof![Just(0u64), Just(1), Just(3)])
            .prop_map(|(t, m, c, cm)| Op::Delete(t, m, c, cm)),
    ]
}

fn arb_key() -> impl Strategy<Value = FlowKey> {
    (0u128..3, 0u128..3, 0u128..3, 0u128..3, 0u128..4).prop_map(|(ip, d, s, tun, md)| {
        let mut k = FlowKey::ZERO;
        k.set(Field::InPort, ip);
        k.set(Field::EthDst, d);
        k.set(Field::EthSrc, s);
        k.set(Field::TunnelId, tun);
        k.set(Field::Metadata, md);
        k
    })
}

fn instructions(spec: &RuleSpec, table: u8, n: u8) -> Vec<Instruction> {
    let mut ins = Vec::new();
    if let Some(a) = &spec.apply {
        ins.push(Instruction::ApplyActions(a.clone()));
    }
    if spec.clear {
        ins.push(Instruction::ClearActions);
    }
    if let Some(w) = &spec.write {
        ins.push(Instruction::WriteActions(w.clone()));
    }
    if let Some((value, mask)) = spec.metadata {
        ins.push(Instruction::WriteMetadata { value, mask });
    }
    if let Some(off) = spec.goto {
        let target = table + off;
        if target < n {
            ins.push(Instruction::GotoTable(target));
        }
    }
    // Instruction order on the wire is free; execution order is fixed.
    ins.reverse();
    ins
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(debug_assertions) { 256 } else { 2048 }))]

    #[test]
    fn lookup_matches_reference(
        n in 2u8..=4,
        ops in proptest::collection::vec(arb_op(), 1..24),
        keys in proptest::collection::vec(arb_key(), 16),
    ) {
        let mut p = Pipeline::new(u16::from(n));
        let mut copy = p.clone();
        let mut r = RefPipeline { tables: vec![Vec::new(); n as usize] };
        for op in &ops {
            match op {
                Op::Add(spec) => {
                    let table = spec.table % n;
                    let ins = instructions(spec, table, n);
                    let fm = FlowMod::add(table, spec.priority, spec.matcher, ins.clone())
                        .with_cookie(spec.cookie, 0);
                    let (pop, eff) = p.prepare(&fm, 0).expect("valid by construction");
                    p.apply(&pop);
                    copy.apply(&pop);
                    let rules = &mut r.tables[table as usize];
                    match rules
                        .iter_mut()
                        .find(|x| x.priority == spec.priority && x.matcher == spec.matcher)
                    {
                        Some(x) => {
                            prop_assert_eq!(&eff.modified, &vec![x.id]);
                            x.instructions = ins;
                            x.cookie = spec.cookie;
                        }
                        None => {
                            prop_assert_eq!(eff.added.len(), 1);
                            rules.push(RefRule {
                                id: eff.added[0],
                                priority: spec.priority,
                                matcher: spec.matcher,
                                cookie: spec.cookie,
                                instructions: ins,
                            });
                        }
                    }
                }
                Op::Delete(t, m, cookie, mask) => {
                    let table = t % n;
                    let fm = FlowMod::new(FlowModCommand::Delete, table, 0, *m)
                        .with_cookie(*cookie, *mask);
                    let (pop, eff) = p.prepare(&fm, 0).expect("delete never fails");
                    p.apply(&pop);
                    copy.apply(&pop);
                    let rules = &mut r.tables[table as usize];
                    let mut gone: Vec<RuleId> = rules
                        .iter()
                        .filter(|x| x.matcher.is_subset_of(m) && x.cookie & mask == cookie & mask)
                        .map(|x| x.id)
                        .collect();
                    rules.retain(|x| !gone.contains(&x.id));
                    let mut got: Vec<RuleId> = eff.removed.iter().map(|e| e.id).collect();
                    gone.sort_unstable();
                    got.sort_unstable();
                    prop_assert_eq!(got, gone);
                }
            }
        }
        let mut res = Resolution::default();
        for k in &keys {
            p.lookup_into(k, &mut res);
            let (actions, outcome, path, origins) = r.lookup(k);
            prop_assert_eq!(&res.actions, &actions, "key {:?}", k);
            prop_assert_eq!(res.outcome, outcome);
            prop_assert_eq!(&res.path, &path);
            prop_assert_eq!(&res.origins, &origins, "packet-in origins, key {:?}", k);
            let c = copy.lookup(k);
            prop_assert_eq!(&c.actions, &res.actions);
            prop_assert_eq!(&c.path, &res.path);
            // A completed walk rebuilds from its path alone; a walk that
            // goes on past the given steps, or ends elsewhere, does not.
            if let (Some(last), false) = (res.path.last(), matches!(res.outcome, Outcome::Miss { .. })) {
                let mut again = Resolution::default();
                prop_assert!(p.resolve_along(&res.path, last.rule, &mut again));
                prop_assert_eq!(&again.actions, &res.actions);
                prop_assert_eq!(again.outcome, res.outcome);
                prop_assert_eq!(&again.path, &res.path);
                prop_assert_eq!(&again.origins, &res.origins);
                for j in 1..res.path.len() {
                    let cut = res.path[j - 1].rule;
                    prop_assert!(!p.resolve_along(&res.path[..j], cut, &mut again));
                    prop_assert!(!p.resolve_along(&res.path, cut, &mut again));
                }
            }
        }
        // The walk mask: every key equal to a walked key on the bits its
        // walk depended on takes the same walk to the same actions (what
        // a megaflow entry in the offload tier relies on).
        for a in &keys {
            let ra = p.lookup(a);
            let mask = p.walk_mask(&ra);
            prop_assert_eq!(copy.walk_mask(&ra), mask, "both copies keep the masks");
            for b in &keys {
                if b.masked(&mask) == a.masked(&mask) {
                    let rb = p.lookup(b);
                    prop_assert_eq!(&rb.actions, &ra.actions, "keys {:?} and {:?} under {:?}", a, b, mask);
                    prop_assert_eq!(rb.outcome, ra.outcome);
                    prop_assert_eq!(&rb.path, &ra.path);
                }
            }
        }
        // What `resolve_along` is for: after a MODIFY gives a rule on a
        // key's path instructions that end the walk, the key's new lookup
        // is the old path rebuilt up to that rule.
        let walked: Vec<(FlowKey, Vec<PathStep>)> = keys
            .iter()
            .map(|k| (*k, p.lookup(k).path))
            .filter(|(_, path)| !path.is_empty())
            .collect();
        if let Some((k, path)) = walked.first() {
            let step = path[path.len() / 2];
            let rule = r.tables[usize::from(step.table_id)]
                .iter()
                .find(|x| x.id == step.rule)
                .expect("the reference holds every rule");
            let mut fm = FlowMod::new(FlowModCommand::ModifyStrict, step.table_id, rule.priority, rule.matcher);
            fm.instructions = vec![Instruction::ApplyActions(vec![Action::output(PortNo(7))])];
            let mut modified = p.clone();
            let (pop, eff) = modified.prepare(&fm, 0).expect("valid modify");
            modified.apply(&pop);
            prop_assert_eq!(&eff.modified, &vec![step.rule]);
            let mut again = Resolution::default();
            prop_assert!(modified.resolve_along(path, step.rule, &mut again));
            let truth = modified.lookup(k);
            prop_assert_eq!(&again.actions, &truth.actions);
            prop_assert_eq!(again.outcome, truth.outcome);
            prop_assert_eq!(&again.path, &truth.path);
            prop_assert_eq!(&again.origins, &truth.origins);
        }
        // Compiling the tables' accelerators must not change any answer,
        // whether each copy compiles (`Compile`) or one builds for both
        // (`Install`, as the datapath's left-right pair does).
        copy.apply(&PipelineOp::Compile);
        let built = p.build_compiled();
        p.apply(&PipelineOp::Install(built.into()));
        prop_assert_eq!(p.table_structures(), copy.table_structures());
        for k in &keys {
            let c = copy.lookup(k);
            let (actions, outcome, path, origins) = r.lookup(k);
            prop_assert_eq!(&c.actions, &actions, "compiled, key {:?}", k);
            prop_assert_eq!(c.outcome, outcome);
            prop_assert_eq!(&c.path, &path);
            prop_assert_eq!(&c.origins, &origins);
            let i = p.lookup(k);
            prop_assert_eq!(&i.actions, &actions, "installed, key {:?}", k);
            prop_assert_eq!(&i.path, &path);
        }
    }
}

// ------------------------------------------------- replicas sharing indexes

/// What a flow-mod's effect says, by id (entries compared by id).
fn effect_ids(e: &FlowModEffect) -> (Vec<RuleId>, Vec<RuleId>, Vec<RuleId>, Vec<RuleId>, bool) {
    let mut removed: Vec<RuleId> = e.removed.iter().map(|x| x.id).collect();
    removed.sort_unstable();
    (
        e.added.clone(),
        e.modified.clone(),
        removed,
        e.shadowed.clone(),
        e.shadowed_all,
    )
}

/// A flow-mod of the replica test: the reference test's ops plus strict
/// commands, which resolve through the match index.
#[derive(Debug, Clone)]
enum ReplicaStep {
    Mod(Op),
    /// DELETE_STRICT (`false`) or MODIFY_STRICT (`true`) of a rule spec's
    /// table, priority and match.
    Strict(RuleSpec, bool),
    /// Publish: replay the pending ops on the copy behind and, if `true`,
    /// let the other copy take the next ops (the left-right swap).
    Publish(bool),
    /// Prepare a strict delete on the copy that is behind (its indexes must
    /// describe its own entries, not the newer copy's).
    AskBehind(RuleSpec),
}

fn arb_replica_step() -> impl Strategy<Value = ReplicaStep> {
    prop_oneof![
        6 => arb_op().prop_map(ReplicaStep::Mod),
        3 => (arb_rule(), any::<bool>()).prop_map(|(r, m)| ReplicaStep::Strict(r, m)),
        2 => any::<bool>().prop_map(ReplicaStep::Publish),
        1 => arb_rule().prop_map(ReplicaStep::AskBehind),
    ]
}

fn flow_mod_of(step: &ReplicaStep, n: u8) -> Option<FlowMod> {
    Some(match step {
        ReplicaStep::Mod(Op::Add(spec)) => {
            let table = spec.table % n;
            FlowMod::add(
                table,
                spec.priority,
                spec.matcher,
                instructions(spec, table, n),
            )
            .with_cookie(spec.cookie, 0)
        }
        ReplicaStep::Mod(Op::Delete(t, m, cookie, mask)) => {
            FlowMod::new(FlowModCommand::Delete, t % n, 0, *m).with_cookie(*cookie, *mask)
        }
        ReplicaStep::Strict(spec, modify) => {
            let table = spec.table % n;
            let command = if *modify {
                FlowModCommand::ModifyStrict
            } else {
                FlowModCommand::DeleteStrict
            };
            let mut fm = FlowMod::new(command, table, spec.priority, spec.matcher);
            fm.instructions = instructions(spec, table, n);
            fm
        }
        ReplicaStep::Publish(_) | ReplicaStep::AskBehind(_) => return None,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(debug_assertions) { 256 } else { 2048 }))]

    /// Two replicas used as a left-right pair (ops applied to the writer's
    /// copy at once and replayed on the other at each publish, the roles
    /// swapping) give the same effects as a pipeline alone with its own
    /// indexes, answer lookups alike, and a prepare on the copy behind
    /// answers for that copy's own entries.
    #[test]
    fn replicas_sharing_indexes_match_a_lone_pipeline(
        n in 2u8..=4,
        steps in proptest::collection::vec(arb_replica_step(), 1..40),
        keys in proptest::collection::vec(arb_key(), 16),
    ) {
        let mut copies = [Pipeline::new(u16::from(n)), Pipeline::new(u16::from(n))];
        copies[1] = copies[0].replica();
        let mut writer = 0usize;
        let mut pending: Vec<PipelineOp> = Vec::new();
        let mut alone = Pipeline::new(u16::from(n));
        // `alone` as of the last publish: what the copy behind holds.
        let mut published = alone.clone();
        for step in &steps {
            match step {
                ReplicaStep::Publish(swap) => {
                    let behind = 1 - writer;
                    for op in pending.drain(..) {
                        copies[behind].apply(&op);
                    }
                    if *swap {
                        writer = behind;
                    }
                    published = alone.clone();
                }
                ReplicaStep::AskBehind(spec) => {
                    let table = spec.table % n;
                    let fm = FlowMod::new(FlowModCommand::DeleteStrict, table, spec.priority, spec.matcher);
                    let got = copies[1 - writer].prepare(&fm, 0).expect("delete never fails");
                    let want = published.prepare(&fm, 0).expect("delete never fails");
                    prop_assert_eq!(effect_ids(&got.1), effect_ids(&want.1));
                }
                step => {
                    let fm = flow_mod_of(step, n).expect("a flow-mod step");
                    let got = copies[writer].prepare(&fm, 0);
                    let want = alone.prepare(&fm, 0);
                    match (got, want) {
                        (Ok((op, effect)), Ok((alone_op, alone_effect))) => {
                            prop_assert_eq!(effect_ids(&effect), effect_ids(&alone_effect));
                            copies[writer].apply(&op);
                            pending.push(op);
                            alone.apply(&alone_op);
                        }
                        (Err(a), Err(b)) => prop_assert_eq!(a, b),
                        (a, b) => prop_assert!(false, "replica {:?}, alone {:?}", a.map(|x| x.1), b.map(|x| x.1)),
                    }
                }
            }
        }
        for op in pending.drain(..) {
            copies[1 - writer].apply(&op);
        }
        for k in &keys {
            let want = alone.lookup(k);
            for c in &copies {
                let got = c.lookup(k);
                prop_assert_eq!(&got.actions, &want.actions, "key {:?}", k);
                prop_assert_eq!(&got.path, &want.path);
            }
        }
        // Both caught up: either may prepare now, through the shared
        // indexes, and a clone keeps answering alike on its own.
        let probe = FlowMod::new(FlowModCommand::Delete, 0, 0, Match::ANY);
        let want = effect_ids(&alone.prepare(&probe, 0).expect("delete").1);
        for c in &copies {
            prop_assert_eq!(&effect_ids(&c.prepare(&probe, 0).expect("delete").1), &want);
            prop_assert_eq!(&effect_ids(&c.clone().prepare(&probe, 0).expect("delete").1), &want);
        }
    }
}
