//! Groups on the data path (OpenFlow 1.3.5 §5.6): a worker with its cache
//! on executes a flow's group action through the group table of the
//! version it runs. Each bucket acts on its own copy (nothing it does is
//! seen by other buckets or the actions after the group); a select group
//! keeps a flow on one bucket and shares flows by weight; a fast-failover
//! group follows port liveness from the next commit; a GROUP_MOD MODIFY
//! reaches cached flows at the commit (the barrier); a DELETE removes the
//! flows forwarding to the group; group and bucket counters are exact.
//! A property test checks the executor against a reference that expands
//! groups into plain action lists on separate copies.

mod common;

use common::{dst_match, frame4, FrameSink};
use offlow_datapath::{
    execute, execute_prepared, Control, ExecStats, PacketBuf, Prepared, Worker, WorkerConfig,
};
use offlow_flow::{extract, Field, ParseStats};
use offlow_pipeline::group::{
    Bucket, GroupMod, GroupModCommand, GroupTable, WATCH_GROUP_ANY, WATCH_PORT_ANY,
};
use offlow_pipeline::*;
use proptest::prelude::*;

const IN_PORT: u32 = 7;
const ALL: u8 = 0;
const SELECT: u8 = 1;
const INDIRECT: u8 = 2;
const FF: u8 = 3;

/// Where each copy went and what it held.
type Sink = FrameSink;

/// A UDP frame 10.0.0.1 → 10.0.0.`dst`, source port `sport`.
fn frame(dst: u8, sport: u16) -> Vec<u8> {
    frame4([10, 0, 0, 1], [10, 0, 0, dst], 64, 0)
        .udp(sport, 53)
        .payload(b"group me")
        .build()
}

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

fn group_mod(command: GroupModCommand, kind: u8, id: u32, buckets: Vec<Bucket>) -> GroupMod {
    GroupMod {
        command,
        group_type: kind,
        group_id: id,
        buckets,
    }
}

fn add_group(control: &mut Control, kind: u8, id: u32, buckets: Vec<Bucket>) {
    control
        .group_mod(&group_mod(GroupModCommand::Add, kind, id, buckets), 0)
        .expect("group accepted");
}

/// A flow to 10.0.0.`dst` applying `actions`.
fn add_flow(control: &mut Control, dst: u8, actions: Vec<Action>) {
    control
        .flow_mod(
            &FlowMod::add(
                0,
                10,
                dst_match(dst),
                vec![Instruction::ApplyActions(actions)],
            ),
            0,
        )
        .expect("flow accepted");
}

fn worker(control: &Control) -> Worker {
    control.worker(WorkerConfig {
        cache: true,
        check: true,
        ..WorkerConfig::default()
    })
}

fn run(w: &mut Worker, frames: &[Vec<u8>]) -> Sink {
    let mut bufs: Vec<PacketBuf> = frames
        .iter()
        .map(|f| PacketBuf::from_frame(f, 16))
        .collect();
    let mut sink = Sink::default();
    w.process(&mut bufs, IN_PORT, &mut sink);
    sink
}

fn ipv4_dst(frame: &[u8]) -> u128 {
    let mut ps = ParseStats::default();
    extract(frame, 0, &mut ps).key.get(Field::Ipv4Dst)
}

#[test]
fn an_all_group_gives_each_bucket_its_own_copy() {
    let mut control = Control::new(Pipeline::new(1));
    // Bucket 0 rewrites the destination and outputs to 2; bucket 1 outputs
    // to 3 and must see the packet as it reached the group.
    add_group(
        &mut control,
        ALL,
        1,
        vec![
            bucket(
                0,
                WATCH_PORT_ANY,
                vec![Action::SetField(Field::Ipv4Dst, 0x0a00_0063), out(2)],
            ),
            bucket(0, WATCH_PORT_ANY, vec![out(3)]),
        ],
    );
    // After the group, the flow's own list goes on with the original packet.
    add_flow(&mut control, 5, vec![Action::Group(1), out(4)]);
    control.commit();
    let mut w = worker(&control);
    let f = frame(5, 1000);
    for round in 0..3 {
        let sink = run(&mut w, std::slice::from_ref(&f));
        let ports: Vec<u32> = sink.sent.iter().map(|s| s.0).collect();
        assert_eq!(ports, [2, 3, 4], "round {round}");
        assert_eq!(ipv4_dst(&sink.sent[0].1), 0x0a00_0063);
        assert_eq!(sink.sent[1].1, f, "bucket 1 saw the unmodified packet");
        assert_eq!(sink.sent[2].1, f, "the flow's output after the group too");
    }
    let s = w.stats();
    assert!(s.cache_hits >= 2, "served from the cache: {s:?}");
    let g = control.pipeline().groups().get(1).unwrap().clone();
    assert_eq!(g.counters.get(), (3, 3 * f.len() as u64));
    assert_eq!(
        g.counters.buckets(),
        [(3, 3 * f.len() as u64), (3, 3 * f.len() as u64)]
    );
}

#[test]
fn a_select_group_keeps_a_flow_on_one_bucket_and_shares_by_weight() {
    let mut control = Control::new(Pipeline::new(1));
    add_group(
        &mut control,
        SELECT,
        1,
        vec![
            bucket(1, WATCH_PORT_ANY, vec![out(2)]),
            bucket(3, WATCH_PORT_ANY, vec![out(3)]),
        ],
    );
    add_flow(&mut control, 5, vec![Action::Group(1)]);
    control.commit();
    let mut w = worker(&control);
    let flows: Vec<Vec<u8>> = (0..2000u16).map(|i| frame(5, 1000 + i)).collect();
    let first = run(&mut w, &flows);
    assert_eq!(first.sent.len(), flows.len(), "one bucket per packet");
    let again = run(&mut w, &flows);
    for (a, b) in first.sent.iter().zip(&again.sent) {
        assert_eq!(a.0, b.0, "a flow stays on its bucket");
    }
    let to3 = first.sent.iter().filter(|s| s.0 == 3).count();
    // Weight 3 of 4: 1500 of 2000 expected; allow ±5 standard deviations.
    assert!(
        (1400..=1600).contains(&to3),
        "{to3} of 2000 to the weight-3 bucket"
    );
}

#[test]
fn fast_failover_follows_port_liveness_from_the_next_commit() {
    let mut control = Control::new(Pipeline::new(1));
    add_group(
        &mut control,
        FF,
        1,
        vec![bucket(0, 2, vec![out(2)]), bucket(0, 3, vec![out(3)])],
    );
    add_flow(&mut control, 5, vec![Action::Group(1)]);
    control.commit();
    let mut w = worker(&control);
    let f = vec![frame(5, 1000)];
    assert_eq!(run(&mut w, &f).sent[0].0, 2);
    assert!(control.port_live(2, false));
    assert!(
        !control.port_live(2, false),
        "unchanged: nothing to publish"
    );
    // Not yet published: the worker still uses port 2.
    assert_eq!(run(&mut w, &f).sent[0].0, 2);
    control.commit();
    assert_eq!(run(&mut w, &f).sent[0].0, 3, "fails over at the commit");
    control.port_live(3, false);
    control.commit();
    assert!(run(&mut w, &f).sent.is_empty(), "no live bucket: dropped");
    assert_eq!(w.exec_stats().group_no_bucket, 1);
    control.port_live(2, true);
    control.commit();
    assert_eq!(run(&mut w, &f).sent[0].0, 2, "back on the first bucket");
}

#[test]
fn a_modify_reaches_cached_flows_at_the_commit_and_a_delete_removes_the_flows() {
    let mut control = Control::new(Pipeline::new(1));
    add_group(
        &mut control,
        INDIRECT,
        1,
        vec![bucket(0, WATCH_PORT_ANY, vec![out(2)])],
    );
    add_flow(&mut control, 5, vec![Action::Group(1)]);
    add_flow(&mut control, 6, vec![out(9)]);
    control.commit();
    let mut w = worker(&control);
    let f = vec![frame(5, 1000), frame(6, 1000)];
    let ports = |s: Sink| s.sent.iter().map(|s| s.0).collect::<Vec<_>>();
    assert_eq!(ports(run(&mut w, &f)), [2, 9]);
    control
        .group_mod(
            &group_mod(
                GroupModCommand::Modify,
                INDIRECT,
                1,
                vec![bucket(0, WATCH_PORT_ANY, vec![out(4)])],
            ),
            0,
        )
        .unwrap();
    control.commit();
    assert_eq!(
        ports(run(&mut w, &f)),
        [4, 9],
        "the cached flow takes the new bucket"
    );
    // The referencing flow goes with the group; the other stays.
    let effect = control
        .group_mod(&group_mod(GroupModCommand::Delete, 0, 1, Vec::new()), 0)
        .unwrap();
    assert_eq!(effect.removed.len(), 1);
    control.commit();
    assert_eq!(
        ports(run(&mut w, &f)),
        [9],
        "flow to the group removed with it"
    );
    assert!(control.pipeline().groups().get(1).is_none());
    assert_eq!(control.pipeline().len(), 1);
}

#[test]
fn flows_naming_a_missing_group_are_refused() {
    let mut control = Control::new(Pipeline::new(1));
    let fm = FlowMod::add(
        0,
        10,
        dst_match(5),
        vec![Instruction::WriteActions(vec![Action::Group(3)])],
    );
    let e = control.flow_mod(&fm, 0).unwrap_err();
    assert!(
        format!("{:?}", e.of_error()).contains("BadOutGroup"),
        "{e}: {:?}",
        e.of_error()
    );
    add_group(
        &mut control,
        INDIRECT,
        3,
        vec![bucket(0, WATCH_PORT_ANY, vec![out(2)])],
    );
    control
        .flow_mod(&fm, 0)
        .expect("accepted once the group exists");
}

// ---------------------------------------------------------------------------
// The executor against a reference expansion.

/// The reference: a group action is replaced by each bucket it takes,
/// its action set run as its own plain list on a fresh copy of the
/// packet as it stood;
/// the list's remaining actions go on with the packet itself.
fn reference(
    table: &GroupTable,
    actions: &[Action],
    frame: &[u8],
    hash: u64,
    sent: &mut Vec<(u32, Vec<u8>)>,
) {
    let mut buf = PacketBuf::from_frame(frame, 0);
    let mut ps = ParseStats::default();
    let mut layout = extract(frame, IN_PORT, &mut ps).layout;
    for a in actions {
        match a {
            Action::Group(id) => {
                let Some(g) = table.get(*id) else { continue };
                let mut picked = Vec::new();
                table.buckets_for(g, hash, &|p| table.port_live(p), &mut picked);
                for b in picked {
                    // A bucket's actions are an action set (§5.6.1).
                    let mut set = ActionSet::new();
                    for a in &g.buckets[b].actions {
                        set.write(*a);
                    }
                    let mut ordered = Vec::new();
                    set.drain_ordered_into(&mut ordered);
                    reference(table, &ordered, buf.frame(), hash, sent);
                }
            }
            plain => {
                let mut sink = Sink::default();
                let mut stats = ExecStats::default();
                let done = execute(
                    std::slice::from_ref(plain),
                    &mut buf,
                    &mut layout,
                    IN_PORT,
                    &mut sink,
                    &mut stats,
                );
                sent.extend(sink.sent);
                if done.verdict != offlow_datapath::Verdict::Done {
                    return;
                }
            }
        }
    }
}

fn arb_plain() -> impl Strategy<Value = Action> {
    prop_oneof![
        (1u32..6).prop_map(out),
        (0u128..256).prop_map(|v| Action::SetField(Field::Ipv4Dst, 0x0a00_0000 | v)),
        (0u128..64).prop_map(|v| Action::SetField(Field::IpDscp, v)),
        Just(Action::DecNwTtl),
        Just(Action::PushVlan(0x8100)),
        (0u128..4096).prop_map(|v| Action::SetField(Field::VlanVid, 0x1000 | v)),
        Just(Action::PopVlan),
    ]
}

/// A drawn bucket: weight, watch port, plain actions, and maybe a forward
/// to a group that many ids further on.
type BucketSpec = (u16, u32, Vec<Action>, Option<u32>);

/// Groups 1..=n, each bucket's list plain actions plus maybe a group of a
/// higher id (so chains end), with random types and watch ports.
fn arb_table() -> impl Strategy<Value = Vec<(u8, Vec<BucketSpec>)>> {
    prop::collection::vec(
        (
            0u8..4,
            prop::collection::vec(
                (
                    0u16..4,
                    prop_oneof![Just(WATCH_PORT_ANY), 1u32..6],
                    prop::collection::vec(arb_plain(), 0..4),
                    prop::option::of(0u32..4),
                ),
                1..4,
            ),
        ),
        1..5,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn execution_matches_the_reference_expansion(
        spec in arb_table(),
        down in prop::collection::vec(1u32..6, 0..3),
        flow in (prop::collection::vec(arb_plain(), 0..3), 1u32..6, prop::collection::vec(arb_plain(), 0..3)),
        hash in any::<u64>(),
        dst in any::<u8>(),
    ) {
        // Build the table from the highest id down, so every forward
        // target exists; keep only what the table accepts.
        let mut table = GroupTable::new();
        let n = spec.len() as u32;
        for (k, (kind, buckets)) in spec.iter().enumerate().rev() {
            let id = k as u32 + 1;
            let buckets: Vec<Bucket> = buckets.iter().map(|(w, watch, acts, fwd)| {
                let mut actions = acts.clone();
                if let Some(t) = fwd.map(|d| id + 1 + d).filter(|t| *t <= n) {
                    actions.push(Action::Group(t));
                }
                Bucket {
                    weight: if *kind == SELECT { *w } else { 0 },
                    watch_port: if *kind == FF && *watch == WATCH_PORT_ANY { 1 } else { *watch },
                    watch_group: WATCH_GROUP_ANY,
                    actions,
                }
            }).collect();
            let buckets = if *kind == INDIRECT { buckets[..1].to_vec() } else { buckets };
            let gm = group_mod(GroupModCommand::Add, *kind, id, buckets);
            if let Ok(op) = table.prepare(&gm, 0, &|_| Ok(())) {
                table.apply(&op);
            }
        }
        for p in down {
            if let Some(op) = table.port_live_op(p, false) {
                table.apply(&op);
            }
        }
        let (before, gid, after) = flow;
        let mut actions = before;
        actions.push(Action::Group(gid));
        actions.extend(after);
        let f = frame(dst, 4000);

        let mut expected = Vec::new();
        reference(&table, &actions, &f, hash, &mut expected);

        let mut buf = PacketBuf::from_frame(&f, 0);
        let mut ps = ParseStats::default();
        let mut layout = extract(&f, IN_PORT, &mut ps).layout;
        let mut sink = Sink::default();
        let mut stats = ExecStats::default();
        let prepared = Prepared::new(&actions).with_groups(&table, hash);
        execute_prepared(prepared, &mut buf, &mut layout, IN_PORT, &mut sink, &mut stats);
        prop_assert_eq!(&sink.sent, &expected);

        // Where the list needs no copy, the offload tier's inlined list
        // (no group actions left) does the same.
        let mut uses = Vec::new();
        if let Some(flat) = table.inline(&actions, hash, &mut uses) {
            prop_assert!(!flat.iter().any(|a| matches!(a, Action::Group(_))));
            let mut buf = PacketBuf::from_frame(&f, 0);
            let mut layout = extract(&f, IN_PORT, &mut ps).layout;
            let mut sink = Sink::default();
            execute(&flat, &mut buf, &mut layout, IN_PORT, &mut sink, &mut stats);
            prop_assert_eq!(&sink.sent, &expected);
        }
    }
}

/// os-ken's select cases: one TCP/IPv4 template (addresses and ports
/// zero), only the Ethernet addresses random per packet (a destination
/// may be multicast), matched on in_port alone: the flows must spread
/// over both buckets, and every packet must come out of one.
#[test]
fn select_spreads_flows_that_differ_only_in_their_ethernet_addresses() {
    let mut control = Control::new(Pipeline::new(1));
    add_group(
        &mut control,
        SELECT,
        1,
        vec![
            bucket(1, WATCH_PORT_ANY, vec![out(2)]),
            bucket(1, WATCH_PORT_ANY, vec![out(3)]),
        ],
    );
    let mut m = offlow_flow::Match::ANY;
    m.set_exact(Field::InPort, u128::from(IN_PORT));
    control
        .flow_mod(
            &FlowMod::add(
                0,
                10,
                m,
                vec![Instruction::ApplyActions(vec![Action::Group(1)])],
            ),
            0,
        )
        .unwrap();
    control.commit();
    let mut w = worker(&control);
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut rnd = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let frames: Vec<Vec<u8>> = (0..1000)
        .map(|_| {
            let d = rnd().to_be_bytes();
            let s = rnd().to_be_bytes();
            let dst = [d[0], d[1], d[2], d[3], d[4], d[5]];
            let src = [s[0] & 0xfe, s[1], s[2], s[3], s[4], s[5]];
            offlow_testkit::FrameBuilder::eth(dst, src)
                .ipv4([0, 0, 0, 0], [0, 0, 0, 0])
                .tcp(0, 0)
                .payload(&[0x11; 1446])
                .build()
        })
        .collect();
    let mut counts = [0usize; 4];
    for round in 0..2 {
        for chunk in frames.chunks(32) {
            for (port, _) in run(&mut w, chunk).sent {
                counts[port as usize] += 1;
            }
        }
        let _ = round;
    }
    assert_eq!(counts[2] + counts[3], 2000, "{counts:?}");
    assert!((800..=1200).contains(&counts[2]), "{counts:?}");
}
