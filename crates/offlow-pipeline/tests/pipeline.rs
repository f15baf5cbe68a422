//! Behaviour of the pipeline: instructions, the action set, goto chains,
//! table-miss, flow-mod semantics and validation, checked on hand-built
//! pipelines.

use offlow_flow::{present, Field, FlowKey, Match};
use offlow_pipeline::*;

const VID: u128 = 0x1000;

fn ip_key(in_port: u32, dst: u32) -> FlowKey {
    let mut k = FlowKey::ZERO;
    k.set(Field::InPort, in_port as u128);
    k.set(Field::EthType, 0x0800);
    k.set(Field::Ipv4Dst, dst as u128);
    k.set(Field::IpProto, 6);
    k.set(Field::TcpDst, 80);
    k.add_presence(present::L3 | present::L4);
    k
}

fn m_in_port(p: u32) -> Match {
    let mut m = Match::ANY;
    m.set_exact(Field::InPort, p as u128);
    m
}

fn m_ip() -> Match {
    let mut m = Match::ANY;
    m.set_exact(Field::EthType, 0x0800);
    m
}

fn out(p: u32) -> Action {
    Action::output(PortNo(p))
}

fn apply(a: Vec<Action>) -> Instruction {
    Instruction::ApplyActions(a)
}

fn write(a: Vec<Action>) -> Instruction {
    Instruction::WriteActions(a)
}

fn add(p: &mut Pipeline, table: u8, prio: u32, m: Match, ins: Vec<Instruction>) -> RuleId {
    let e = p.flow_mod(&FlowMod::add(table, prio, m, ins), 0).unwrap();
    assert_eq!(e.added.len(), 1, "{e:?}");
    e.added[0]
}

#[test]
fn apply_actions_change_what_later_tables_match() {
    let mut p = Pipeline::new(4);
    let a = add(
        &mut p,
        0,
        10,
        m_in_port(1),
        vec![
            apply(vec![Action::SetField(Field::EthDst, 0xaa), out(7)]),
            Instruction::GotoTable(2),
        ],
    );
    let mut m = Match::ANY;
    m.set_exact(Field::EthDst, 0xaa);
    let b = add(&mut p, 2, 10, m, vec![apply(vec![out(2)])]);
    add(&mut p, 2, 5, Match::ANY, vec![apply(vec![out(3)])]);

    let r = p.lookup(&ip_key(1, 9));
    assert_eq!(
        r.actions,
        vec![Action::SetField(Field::EthDst, 0xaa), out(7), out(2)]
    );
    assert_eq!(r.outcome, Outcome::Forward);
    assert_eq!(
        r.path,
        vec![
            PathStep {
                table_id: 0,
                rule: a
            },
            PathStep {
                table_id: 2,
                rule: b
            }
        ]
    );
    // Another in_port misses table 0 (no table-miss entry).
    let r = p.lookup(&ip_key(2, 9));
    assert_eq!(r.outcome, Outcome::Miss { table_id: 0 });
    assert!(r.actions.is_empty() && r.path.is_empty());
}

#[test]
fn action_set_executes_in_spec_order() {
    let mut p = Pipeline::new(2);
    let mut m = m_ip();
    m.set_masked(Field::VlanVid, VID, VID);
    add(
        &mut p,
        0,
        1,
        m,
        vec![write(vec![
            out(3),
            Action::SetQueue(4),
            Action::SetField(Field::EthSrc, 0x55),
            Action::DecNwTtl,
            Action::PushVlan(0x88a8),
            Action::PopVlan,
            Action::CopyTtlIn,
        ])],
    );
    let mut k = ip_key(1, 1);
    k.set(Field::VlanVid, VID | 7);
    k.add_presence(present::VLAN);
    let r = p.lookup(&k);
    assert_eq!(
        r.actions,
        vec![
            Action::CopyTtlIn,
            Action::PopVlan,
            Action::PushVlan(0x88a8),
            Action::DecNwTtl,
            Action::SetField(Field::EthSrc, 0x55),
            Action::SetQueue(4),
            out(3),
        ]
    );
    assert_eq!(r.outcome, Outcome::Forward);
}

#[test]
fn write_actions_replace_by_type_and_clear_empties() {
    let mut p = Pipeline::new(3);
    add(
        &mut p,
        0,
        1,
        Match::ANY,
        vec![
            write(vec![
                out(1),
                Action::SetField(Field::EthDst, 1),
                Action::SetField(Field::EthSrc, 2),
            ]),
            Instruction::GotoTable(1),
        ],
    );
    // Table 1 replaces the output and eth_dst; eth_src survives.
    let mut m1 = Match::ANY;
    m1.set_exact(Field::InPort, 1);
    add(
        &mut p,
        1,
        1,
        m1,
        vec![
            write(vec![Action::SetField(Field::EthDst, 9), out(2)]),
            Instruction::GotoTable(2),
        ],
    );
    // Table 1, in_port 2: clear, then write only a queue (no output: drop).
    let mut m2 = Match::ANY;
    m2.set_exact(Field::InPort, 2);
    add(
        &mut p,
        1,
        1,
        m2,
        vec![
            Instruction::ClearActions,
            write(vec![Action::SetQueue(1)]),
            Instruction::GotoTable(2),
        ],
    );
    add(&mut p, 2, 0, Match::ANY, vec![]);

    let r = p.lookup(&ip_key(1, 0));
    assert_eq!(
        r.actions,
        vec![
            Action::SetField(Field::EthDst, 9),
            Action::SetField(Field::EthSrc, 2),
            out(2)
        ]
    );
    assert_eq!(r.outcome, Outcome::Forward);
    assert_eq!(r.path.len(), 3);
    let r = p.lookup(&ip_key(2, 0));
    assert_eq!(r.actions, vec![Action::SetQueue(1)]);
    assert_eq!(r.outcome, Outcome::Drop);
}

#[test]
fn metadata_writes_are_masked_and_steer_later_tables() {
    let mut p = Pipeline::new(4);
    add(
        &mut p,
        0,
        1,
        Match::ANY,
        vec![
            Instruction::WriteMetadata {
                value: 0xff12,
                mask: 0x00ff,
            },
            Instruction::GotoTable(1),
        ],
    );
    add(
        &mut p,
        1,
        1,
        Match::ANY,
        vec![
            Instruction::WriteMetadata {
                value: 0x3400,
                mask: 0xff00,
            },
            Instruction::GotoTable(3),
        ],
    );
    let mut m = Match::ANY;
    m.set_exact(Field::Metadata, 0x3412);
    let hit = add(&mut p, 3, 2, m, vec![apply(vec![out(5)])]);
    add(&mut p, 3, 1, Match::ANY, vec![apply(vec![out(6)])]);
    let r = p.lookup(&ip_key(1, 0));
    assert_eq!(r.actions, vec![out(5)]);
    assert_eq!(r.path.last().map(|s| s.rule), Some(hit));
    assert_eq!(
        r.path.iter().map(|s| s.table_id).collect::<Vec<_>>(),
        vec![0, 1, 3]
    );
    // Bits outside the masks keep the packet's original metadata.
    let mut k = ip_key(1, 0);
    k.set(Field::Metadata, 0x1_0000);
    assert_eq!(p.lookup(&k).actions, vec![out(6)]);
}

#[test]
fn table_miss_entry_and_default_drop() {
    let mut p = Pipeline::new(2);
    // No rule at all: the OpenFlow 1.3 default is drop, reported as a miss.
    assert_eq!(
        p.lookup(&ip_key(1, 0)).outcome,
        Outcome::Miss { table_id: 0 }
    );
    // A table-miss entry sending to the controller.
    let miss = add(
        &mut p,
        0,
        0,
        Match::ANY,
        vec![apply(vec![Action::output(PortNo::CONTROLLER)])],
    );
    let r = p.lookup(&ip_key(1, 0));
    assert_eq!(r.outcome, Outcome::ControllerMiss { table_id: 0 });
    assert_eq!(r.path[0].rule, miss);
    // An explicit controller output from a normal rule is a plain forward.
    add(
        &mut p,
        0,
        5,
        m_in_port(3),
        vec![apply(vec![Action::output(PortNo::CONTROLLER)])],
    );
    assert_eq!(p.lookup(&ip_key(3, 0)).outcome, Outcome::Forward);
    // The table-miss entry behaves like any rule: it can goto; table 1 then
    // misses, discarding the action set but keeping executed apply-actions.
    let e = p
        .flow_mod(
            &FlowMod::add(
                0,
                0,
                Match::ANY,
                vec![
                    apply(vec![out(4)]),
                    write(vec![out(8)]),
                    Instruction::GotoTable(1),
                ],
            ),
            0,
        )
        .unwrap();
    assert_eq!(e.modified, vec![miss], "identical match+priority replaces");
    let r = p.lookup(&ip_key(1, 0));
    assert_eq!(r.outcome, Outcome::Miss { table_id: 1 });
    assert_eq!(r.actions, vec![out(4)]);
    assert_eq!(r.path.len(), 1);
    // A rule with no instructions drops.
    add(&mut p, 1, 0, Match::ANY, vec![]);
    let r = p.lookup(&ip_key(1, 0));
    assert_eq!(r.actions, vec![out(4), out(8)]);
    assert_eq!(r.outcome, Outcome::Forward);
    add(&mut p, 0, 9, m_in_port(9), vec![]);
    assert_eq!(p.lookup(&ip_key(9, 0)).outcome, Outcome::Drop);
}

#[test]
fn vlan_push_pop_change_later_matches() {
    let mut p = Pipeline::new(3);
    add(
        &mut p,
        0,
        1,
        Match::ANY,
        vec![
            apply(vec![
                Action::PushVlan(0x8100),
                Action::SetField(Field::VlanVid, VID | 42),
            ]),
            Instruction::GotoTable(1),
        ],
    );
    let mut tagged42 = Match::ANY;
    tagged42.set_exact(Field::VlanVid, VID | 42);
    add(
        &mut p,
        1,
        1,
        tagged42,
        vec![apply(vec![Action::PopVlan]), Instruction::GotoTable(2)],
    );
    let mut untagged = Match::ANY;
    untagged.set_exact(Field::VlanVid, 0);
    add(&mut p, 2, 2, untagged, vec![apply(vec![out(1)])]);
    add(&mut p, 2, 1, Match::ANY, vec![apply(vec![out(2)])]);
    let r = p.lookup(&ip_key(1, 0));
    assert_eq!(r.path.len(), 3);
    assert_eq!(r.actions.last(), Some(&out(1)), "{:?}", r.actions);
    // Pushing onto an already tagged packet and popping restores the tag.
    let mut k = ip_key(1, 0);
    k.set(Field::VlanVid, VID | 7);
    k.add_presence(present::VLAN);
    let r = p.lookup(&k);
    assert_eq!(r.actions.last(), Some(&out(2)), "{:?}", r.actions);
}

#[test]
fn add_replace_counters_overlap_and_shadowed() {
    let mut p = Pipeline::new(1);
    let low = add(&mut p, 0, 1, Match::ANY, vec![apply(vec![out(1)])]);
    let other = add(&mut p, 0, 1, m_in_port(5), vec![apply(vec![out(1)])]);
    let mut m = m_in_port(1);
    m.set_exact(Field::EthType, 0x0800);
    // Overlapping rules of lower-or-equal priority are reported as shadowed;
    // in_port=5 does not overlap in_port=1.
    let e = p
        .flow_mod(&FlowMod::add(0, 10, m, vec![apply(vec![out(2)])]), 0)
        .unwrap();
    let r10 = e.added[0];
    assert_eq!(e.shadowed, vec![low]);
    assert!(!e.shadowed.contains(&other));
    let res = p.lookup(&ip_key(1, 0));
    p.credit_resolution(&res, 3, 300);
    assert_eq!(p.entry(r10).unwrap().counters.get(), (3, 300));

    // Replace without RESET_COUNTS keeps the counters and the id.
    let e = p
        .flow_mod(&FlowMod::add(0, 10, m, vec![apply(vec![out(3)])]), 0)
        .unwrap();
    assert_eq!((e.added.len(), e.modified.clone()), (0, vec![r10]));
    assert_eq!(p.entry(r10).unwrap().counters.get(), (3, 300));
    assert_eq!(p.lookup(&ip_key(1, 0)).actions, vec![out(3)]);
    // With RESET_COUNTS they restart.
    p.flow_mod(
        &FlowMod::add(0, 10, m, vec![apply(vec![out(3)])]).with_flags(FlowModFlags::RESET_COUNTS),
        0,
    )
    .unwrap();
    assert_eq!(p.entry(r10).unwrap().counters.get(), (0, 0));
    assert_eq!(p.len(), 3);

    // CHECK_OVERLAP: same priority and a common packet is refused...
    let err = p
        .flow_mod(
            &FlowMod::add(0, 10, m_in_port(1), vec![]).with_flags(FlowModFlags::CHECK_OVERLAP),
            0,
        )
        .unwrap_err();
    assert_eq!(err, PipelineError::Overlap);
    assert_eq!(err.of_error().wire(), (5, 3));
    // ...a different priority or a disjoint match is accepted.
    p.flow_mod(
        &FlowMod::add(0, 11, m_in_port(1), vec![]).with_flags(FlowModFlags::CHECK_OVERLAP),
        0,
    )
    .unwrap();
    p.flow_mod(
        &FlowMod::add(0, 10, m_in_port(2), vec![]).with_flags(FlowModFlags::CHECK_OVERLAP),
        0,
    )
    .unwrap();
    assert_eq!(p.len(), 5);
}

/// Three rules in table 0 with cookies 0x11, 0x12, 0x21.
fn cookie_pipeline() -> (Pipeline, [RuleId; 3]) {
    let mut p = Pipeline::new(2);
    let mut ids = [0; 3];
    let specs = [(1u32, 0x11u64, 1u32), (2, 0x12, 2), (3, 0x21, 1)];
    for (i, (port, cookie, outp)) in specs.into_iter().enumerate() {
        let mut m = m_in_port(port);
        m.set_exact(Field::EthType, 0x0800);
        let fm = FlowMod::add(0, 10, m, vec![write(vec![out(outp)])]).with_cookie(cookie, 0);
        ids[i] = p.flow_mod(&fm, 0).unwrap().added[0];
    }
    (p, ids)
}

#[test]
fn modify_non_strict_and_strict_with_cookie_filter() {
    let (mut p, ids) = cookie_pipeline();
    let mut fm = FlowMod::new(FlowModCommand::Modify, 0, 0, m_ip()).with_cookie(0x10, 0xf0);
    fm.instructions = vec![apply(vec![out(9)])];
    let e = p.flow_mod(&fm, 0).unwrap();
    assert_eq!(e.modified, vec![ids[0], ids[1]]);
    assert_eq!(p.lookup(&ip_key(1, 0)).actions, vec![out(9)]);
    assert_eq!(p.lookup(&ip_key(3, 0)).actions, vec![out(1)]);
    // Cookie is kept by modify.
    assert_eq!(p.entry(ids[0]).unwrap().cookie, 0x11);

    // Strict needs the exact match and priority.
    let mut fm = FlowMod::new(FlowModCommand::ModifyStrict, 0, 10, m_in_port(3));
    fm.instructions = vec![apply(vec![out(8)])];
    assert!(p.flow_mod(&fm, 0).unwrap().is_empty(), "match differs");
    let mut m = m_in_port(3);
    m.set_exact(Field::EthType, 0x0800);
    fm.matcher = FlowMatch::new(m);
    fm.priority = 9;
    assert!(p.flow_mod(&fm, 0).unwrap().is_empty(), "priority differs");
    fm.priority = 10;
    assert_eq!(p.flow_mod(&fm, 0).unwrap().modified, vec![ids[2]]);
    assert_eq!(p.lookup(&ip_key(3, 0)).actions, vec![out(8)]);
    // A more specific non-strict match does not select the broader rules.
    let mut narrow = m_ip();
    narrow
        .set_exact(Field::InPort, 1)
        .set_exact(Field::Ipv4Dst, 4);
    let mut fm = FlowMod::new(FlowModCommand::Modify, 0, 0, narrow);
    fm.instructions = vec![];
    assert!(p.flow_mod(&fm, 0).unwrap().is_empty());
    // Modify validates instructions against the request's match.
    let mut fm = FlowMod::new(FlowModCommand::Modify, 0, 0, Match::ANY);
    fm.instructions = vec![apply(vec![Action::SetField(Field::Ipv4Dst, 1)])];
    assert!(matches!(
        p.flow_mod(&fm, 0),
        Err(PipelineError::MatchInconsistent { .. })
    ));
    // Modify may not name OFPTT_ALL.
    let fm = FlowMod::new(FlowModCommand::Modify, TABLE_ALL, 0, Match::ANY);
    assert_eq!(
        p.flow_mod(&fm, 0).unwrap_err(),
        PipelineError::BadTableId(TABLE_ALL)
    );
}

#[test]
fn delete_non_strict_strict_cookie_and_out_port() {
    let (mut p, ids) = cookie_pipeline();
    // out_port filter: only rules outputting to port 2 (in the action set).
    let mut fm = FlowMod::new(FlowModCommand::Delete, 0, 0, Match::ANY);
    fm.out_port = PortNo(2);
    let e = p.flow_mod(&fm, 0).unwrap();
    assert_eq!(
        e.removed.iter().map(|x| x.id).collect::<Vec<_>>(),
        vec![ids[1]]
    );
    assert_eq!(e.removed[0].cookie, 0x12);
    // Cookie filter.
    let fm = FlowMod::new(FlowModCommand::Delete, TABLE_ALL, 0, Match::ANY).with_cookie(0x20, 0xf0);
    let e = p.flow_mod(&fm, 0).unwrap();
    assert_eq!(
        e.removed.iter().map(|x| x.id).collect::<Vec<_>>(),
        vec![ids[2]]
    );
    // Strict delete with the wrong priority removes nothing.
    let mut m = m_in_port(1);
    m.set_exact(Field::EthType, 0x0800);
    let mut fm = FlowMod::new(FlowModCommand::DeleteStrict, 0, 11, m);
    assert!(p.flow_mod(&fm, 0).unwrap().is_empty());
    fm.priority = 10;
    assert_eq!(p.flow_mod(&fm, 0).unwrap().removed[0].id, ids[0]);
    assert!(p.is_empty());
    assert_eq!(
        p.lookup(&ip_key(1, 0)).outcome,
        Outcome::Miss { table_id: 0 }
    );
}

#[test]
fn delete_non_strict_selects_subsets_only() {
    let mut p = Pipeline::new(1);
    let mut wide = Match::ANY;
    wide.set_prefix(Field::Ipv4Dst, 0x0a00_0000, 8);
    wide.set_exact(Field::EthType, 0x0800);
    let mut narrow = wide;
    narrow.set_prefix(Field::Ipv4Dst, 0x0a01_0000, 16);
    let a = add(&mut p, 0, 1, wide, vec![]);
    let b = add(&mut p, 0, 2, narrow, vec![]);
    let c = add(&mut p, 0, 3, Match::ANY, vec![]);
    // Deleting 10.1/16 removes only the /16 rule (the /8 is not a subset).
    let fm = FlowMod::new(FlowModCommand::Delete, 0, 0, narrow);
    let e = p.flow_mod(&fm, 0).unwrap();
    assert_eq!(e.removed.iter().map(|x| x.id).collect::<Vec<_>>(), vec![b]);
    // Deleting with the all-wildcard match removes everything.
    let fm = FlowMod::new(FlowModCommand::Delete, 0, 0, Match::ANY);
    let mut got: Vec<_> = p
        .flow_mod(&fm, 0)
        .unwrap()
        .removed
        .iter()
        .map(|x| x.id)
        .collect();
    got.sort_unstable();
    assert_eq!(got, vec![a, c]);
}

#[test]
fn native_port_ranges_in_lookup_and_delete() {
    let mut p = Pipeline::new(1);
    let fm = FlowMod::add(0, 5, m_ip(), vec![apply(vec![out(1)])])
        .with_ports(PortRange::ANY, PortRange { lo: 0, hi: 1023 });
    let id = p.flow_mod(&fm, 0).unwrap().added[0];
    assert_eq!(p.lookup(&ip_key(1, 0)).actions, vec![out(1)]);
    let mut k = ip_key(1, 0);
    k.set(Field::TcpDst, 8080);
    assert_eq!(p.lookup(&k).outcome, Outcome::Miss { table_id: 0 });
    // A filter on 0..=2047 covers the rule; one on tcp_dst=80 does not.
    let del = FlowMod::new(FlowModCommand::Delete, 0, 0, m_ip());
    let mut m80 = m_ip();
    m80.set_exact(Field::IpProto, 6)
        .set_exact(Field::TcpDst, 80);
    let d80 = FlowMod::new(FlowModCommand::Delete, 0, 0, m80);
    assert!(p.flow_mod(&d80, 0).unwrap().is_empty());
    let d = del.with_ports(PortRange::ANY, PortRange { lo: 0, hi: 2047 });
    assert_eq!(p.flow_mod(&d, 0).unwrap().removed[0].id, id);
}

#[test]
fn validation_errors_leave_the_pipeline_unchanged() {
    let mut p = Pipeline::new(4);
    let cases: Vec<(FlowMod, (u16, u16))> = vec![
        // Goto backwards / to itself.
        (
            FlowMod::add(2, 1, Match::ANY, vec![Instruction::GotoTable(1)]),
            (3, 2),
        ),
        // Goto past the last table.
        (
            FlowMod::add(0, 1, Match::ANY, vec![Instruction::GotoTable(4)]),
            (3, 2),
        ),
        // Groups are not supported yet.
        (
            FlowMod::add(0, 1, Match::ANY, vec![apply(vec![Action::Group(1)])]),
            (2, 9),
        ),
        // A meter that does not exist: OFPMMFC_INVALID_METER (as Open
        // vSwitch 3.1).
        (
            FlowMod::add(0, 1, Match::ANY, vec![Instruction::Meter(1)]),
            (12, 2),
        ),
        // Set tcp_dst without ip_proto=6.
        (
            FlowMod::add(
                0,
                1,
                m_ip(),
                vec![apply(vec![Action::SetField(Field::TcpDst, 80)])],
            ),
            (2, 10),
        ),
        // Two apply-actions instructions.
        (
            FlowMod::add(0, 1, Match::ANY, vec![apply(vec![]), apply(vec![])]),
            (3, 9),
        ),
        // Table out of range.
        (FlowMod::add(4, 1, Match::ANY, vec![]), (5, 2)),
        (FlowMod::add(TABLE_ALL, 1, Match::ANY, vec![]), (5, 2)),
        // Dec TTL on a non-IP match.
        (
            FlowMod::add(0, 1, Match::ANY, vec![write(vec![Action::DecNwTtl])]),
            (2, 10),
        ),
        // Push VLAN with a bad TPID.
        (
            FlowMod::add(
                0,
                1,
                Match::ANY,
                vec![apply(vec![Action::PushVlan(0x0800)])],
            ),
            (2, 5),
        ),
    ];
    for (fm, wire) in cases {
        let err = p.flow_mod(&fm, 0).unwrap_err();
        assert_eq!(err.of_error().wire(), wire, "{fm:?}: {err}");
    }
    assert!(p.is_empty());
    // With the prerequisite present, set tcp_dst is accepted.
    let mut m = m_ip();
    m.set_exact(Field::IpProto, 6);
    p.flow_mod(
        &FlowMod::add(
            0,
            1,
            m,
            vec![apply(vec![Action::SetField(Field::TcpDst, 80)])],
        ),
        0,
    )
    .unwrap();
    assert_eq!(p.len(), 1);
}

#[test]
fn counters_dump_and_table_stats() {
    let mut p = Pipeline::new(2);
    let a = add(&mut p, 0, 5, m_in_port(1), vec![Instruction::GotoTable(1)]);
    let b = p
        .flow_mod(
            &FlowMod::add(1, 7, Match::ANY, vec![apply(vec![out(2)])])
                .with_cookie(0xc0de, 0)
                .with_flags(FlowModFlags::NO_BYT_COUNTS),
            42,
        )
        .unwrap()
        .added[0];
    let mut res = Resolution::default();
    for _ in 0..3 {
        p.lookup_into(&ip_key(1, 0), &mut res);
        p.credit_resolution(&res, 1, 100);
    }
    p.lookup_into(&ip_key(2, 0), &mut res);
    p.credit_resolution(&res, 2, 50);
    let all = p.dump(&FlowFilter::all());
    assert_eq!(all.len(), 2);
    assert_eq!((all[0].id, all[0].packets, all[0].bytes), (a, 3, 300));
    assert_eq!((all[1].id, all[1].packets, all[1].bytes), (b, 3, 0));
    assert_eq!(all[1].cookie, 0xc0de);
    assert_eq!(all[1].installed_at_ns, 42);
    assert_eq!(all[1].instructions, vec![apply(vec![out(2)])]);
    let t1 = p.dump(&FlowFilter::table(1));
    assert_eq!(t1.len(), 1);
    let ts = p.table_stats();
    assert_eq!(ts.len(), 2);
    assert_eq!(
        (ts[0].active_count, ts[0].lookup_count, ts[0].matched_count),
        (1, 5, 3)
    );
    assert_eq!((ts[1].lookup_count, ts[1].matched_count), (3, 3));
}

#[test]
fn ops_replay_on_a_clone_and_share_counters() {
    let mut a = Pipeline::new(3);
    let mut b = a.clone();
    let fms = vec![
        FlowMod::add(0, 1, Match::ANY, vec![Instruction::GotoTable(2)]),
        FlowMod::add(2, 3, m_in_port(1), vec![apply(vec![out(1)])]),
        FlowMod::add(2, 0, Match::ANY, vec![apply(vec![out(9)])]),
        FlowMod::new(FlowModCommand::Delete, 2, 0, m_in_port(1)),
        FlowMod::add(2, 3, m_in_port(2), vec![apply(vec![out(2)])]),
    ];
    for fm in &fms {
        let (op, _) = a.prepare(fm, 0).unwrap();
        a.apply(&op);
        b.apply(&op);
    }
    for port in 0..4 {
        let (ra, rb) = (a.lookup(&ip_key(port, 0)), b.lookup(&ip_key(port, 0)));
        assert_eq!(
            (ra.actions, ra.outcome, ra.path.clone()),
            (rb.actions, rb.outcome, rb.path.clone())
        );
        // Crediting through either copy lands in the same counters.
        a.credit(&ra.path, None, 1, 10);
        b.credit(&rb.path, None, 1, 10);
    }
    let da = a.dump(&FlowFilter::all());
    assert_eq!(da, b.dump(&FlowFilter::all()));
    assert_eq!(da.iter().map(|s| s.packets).sum::<u64>(), 16);
    assert_eq!(a.table_stats(), b.table_stats());
}

/// MODIFY_STRICT changes only instructions: the table's compiled
/// accelerator survives it (the classifier rule is unchanged), both copies
/// of a pair answer with the new actions and keep the counters, and a
/// DELETE_STRICT / re-ADD cycle through the copies stays consistent.
#[test]
fn strict_modify_keeps_the_compiled_table_and_pairs_agree() {
    let mut a = Pipeline::new(1);
    let dst = |i: u32| 0x0a00_0000 | (i << 8);
    let route = |i: u32| {
        let mut m = m_ip();
        m.set_prefix(Field::Ipv4Dst, dst(i) as u128, 24);
        m
    };
    for i in 0..40 {
        add(&mut a, 0, 10, route(i), vec![apply(vec![out(1)])]);
    }
    a.apply(&PipelineOp::Compile);
    assert_eq!(a.table_structures(), vec![(0, "rfc")]);
    let mut b = a.clone();
    let r = a.lookup(&ip_key(0, dst(7) | 5));
    a.credit(&r.path, None, 1, 60);

    let mut fm = FlowMod::new(FlowModCommand::ModifyStrict, 0, 10, route(7));
    fm.instructions = vec![apply(vec![out(2)])];
    let (op, eff) = a.prepare(&fm, 0).unwrap();
    assert_eq!(eff.modified, vec![r.path[0].rule]);
    a.apply(&op);
    b.apply(&op);
    for p in [&a, &b] {
        assert_eq!(p.table_structures(), vec![(0, "rfc")], "still compiled");
        let res = p.lookup(&ip_key(0, dst(7) | 5));
        assert_eq!(res.actions, vec![out(2)]);
        assert_eq!(res.path, r.path, "same entry id");
        let e = p.entry(r.path[0].rule).unwrap();
        assert_eq!(e.counters.get(), (1, 60), "counters carried over");
        let step = r.path[0];
        assert!(std::sync::Arc::ptr_eq(
            e,
            p.entry_in(step.table_id, step.rule).unwrap()
        ));
        assert!(p.entry_in(1, step.rule).is_none(), "no table 1");
    }

    // A strict delete and a re-add, replayed on the second copy.
    let del = FlowMod::new(FlowModCommand::DeleteStrict, 0, 10, route(7));
    let re = FlowMod::add(0, 10, route(7), vec![apply(vec![out(3)])]);
    for fm in [&del, &re] {
        let (op, _) = a.prepare(fm, 0).unwrap();
        a.apply(&op);
        b.apply(&op);
    }
    // A strict request matching nothing changes nothing.
    let (op, eff) = a
        .prepare(
            &FlowMod::new(FlowModCommand::DeleteStrict, 0, 11, route(7)),
            0,
        )
        .unwrap();
    assert!(eff.is_empty());
    a.apply(&op);
    b.apply(&op);
    for p in [&a, &b] {
        assert_eq!(p.len(), 40);
        assert_eq!(p.lookup(&ip_key(0, dst(7) | 5)).actions, vec![out(3)]);
        assert_eq!(p.lookup(&ip_key(0, dst(8) | 5)).actions, vec![out(1)]);
    }
    assert_eq!(a.dump(&FlowFilter::all()), b.dump(&FlowFilter::all()));
}

/// An ADD overlapping more than `SHADOW_LIMIT` lower-priority entries does
/// not list them: it reports the whole table instead (and costs no walk of
/// it); at the limit it still lists every one.
#[test]
fn shadowing_past_the_limit_reports_the_whole_table() {
    let mut p = Pipeline::new(2);
    let mut low = Vec::new();
    // One rule per in_port, all overlapping an eth_type=IPv4 rule.
    for port in 1..=(SHADOW_LIMIT as u32) {
        low.push(add(
            &mut p,
            0,
            1,
            m_in_port(port),
            vec![apply(vec![out(1)])],
        ));
    }
    let mut ip = Match::ANY;
    ip.set_exact(Field::EthType, 0x0800);
    let e = p
        .flow_mod(&FlowMod::add(0, 10, ip, vec![apply(vec![out(2)])]), 0)
        .unwrap();
    assert!(!e.shadowed_all);
    assert_eq!(e.shadowed, low, "at the limit: every one listed");
    add(&mut p, 0, 1, m_in_port(100_000), vec![apply(vec![out(1)])]);
    let mut arp = Match::ANY;
    arp.set_exact(Field::EthType, 0x0806);
    let e = p
        .flow_mod(&FlowMod::add(0, 10, arp, vec![apply(vec![out(2)])]), 0)
        .unwrap();
    assert!(e.shadowed_all, "one past the limit");
    assert!(e.shadowed.is_empty());
    assert!(!e.is_empty());
    // Another table is not affected by the first one's size.
    let e = p
        .flow_mod(&FlowMod::add(1, 10, arp, vec![apply(vec![out(2)])]), 0)
        .unwrap();
    assert!(!e.shadowed_all && e.shadowed.is_empty());
}

/// An ADD does not list the entries a covering entry outranks: in a FIB,
/// the nearest enclosing route is shadowed, the shorter ones (the default
/// route among them) are not, and a covered route cannot take a miss.
#[test]
fn shadowing_stops_at_the_nearest_covering_entry() {
    let route = |net: u32, len: u32| {
        let mut m = m_ip();
        m.set_masked(
            Field::Ipv4Dst,
            u128::from(net),
            u128::from(u32::MAX.checked_shl(32 - len).unwrap_or(0)),
        );
        m
    };
    let mut p = Pipeline::new(1);
    let ins = || vec![apply(vec![out(1)])];
    let default = add(&mut p, 0, 0, route(0, 0), ins());
    let ten = add(&mut p, 0, 8, route(0x0a00_0000, 8), ins());
    let ten_one = add(&mut p, 0, 16, route(0x0a01_0000, 16), ins());
    // An unrelated /16 elsewhere in 10/8 overlaps nothing new.
    add(&mut p, 0, 16, route(0x0a02_0000, 16), ins());

    let e = p
        .flow_mod(&FlowMod::add(0, 24, route(0x0a01_0200, 24), ins()), 0)
        .unwrap();
    assert_eq!((e.shadowed, e.covered), (vec![ten_one], true));
    let e = p
        .flow_mod(&FlowMod::add(0, 24, route(0x0a03_0000, 24), ins()), 0)
        .unwrap();
    assert_eq!((e.shadowed, e.covered), (vec![ten], true));
    let e = p
        .flow_mod(&FlowMod::add(0, 24, route(0x0b00_0000, 24), ins()), 0)
        .unwrap();
    assert_eq!((e.shadowed, e.covered), (vec![default], true));

    // Without a default route, an uncovered ADD may take misses.
    let mut p = Pipeline::new(1);
    let ten = add(&mut p, 0, 8, route(0x0a00_0000, 8), ins());
    let e = p
        .flow_mod(&FlowMod::add(0, 24, route(0x0b00_0000, 24), ins()), 0)
        .unwrap();
    assert_eq!((e.shadowed.len(), e.covered), (0, false));
    // An entry of the same priority as the coverer is kept (a tie), and so
    // is one of priority between the coverer's and the ADD's.
    let tie = add(&mut p, 0, 8, route(0x0a01_0400, 22), ins());
    let between = add(&mut p, 0, 12, route(0x0a01_0000, 24), ins());
    let e = p
        .flow_mod(&FlowMod::add(0, 20, route(0x0a01_0000, 20), ins()), 0)
        .unwrap();
    let mut expected = vec![ten, tie, between];
    expected.sort_unstable();
    assert_eq!((e.shadowed, e.covered), (expected, true));
}

/// A route ADD to a table the DIR-24-8 FIB serves reports what the match
/// index's walk would (the FIB answers it from its trie): checked against
/// the definition, over the entries kept on the side, for in-order routes,
/// out-of-order ones (which the FIB refuses) and with and without a
/// default route.
#[test]
fn fib_tables_report_the_same_shadows() {
    let route = |net: u32, len: u32| {
        let mut m = m_ip();
        let mask = u32::MAX.checked_shl(32 - len).unwrap_or(0);
        m.set_masked(Field::Ipv4Dst, u128::from(net & mask), u128::from(mask));
        FlowMatch::new(m)
    };
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut p = Pipeline::new(1);
    let mut held: Vec<(RuleId, u32, FlowMatch)> = Vec::new();
    let add_route =
        |p: &mut Pipeline, held: &mut Vec<(RuleId, u32, FlowMatch)>, m: FlowMatch, prio: u32| {
            let fm = FlowMod::add(0, prio, m.matcher, vec![apply(vec![out(1)])]);
            let over: Vec<&(RuleId, u32, FlowMatch)> = held
                .iter()
                .filter(|(_, q, x)| *q <= prio && x.overlaps(&m))
                .collect();
            let cover = over
                .iter()
                .filter(|(_, _, x)| m.is_subset_of(x))
                .map(|(_, q, _)| *q)
                .max();
            let mut expected: Vec<RuleId> = over
                .iter()
                .filter(|(_, q, _)| cover.is_none_or(|c| *q >= c))
                .map(|(id, _, _)| *id)
                .collect();
            expected.sort_unstable();
            let e = p.flow_mod(&fm, 0).unwrap();
            if e.added.is_empty() {
                return; // replaced an identical entry
            }
            if !e.shadowed_all {
                assert_eq!(
                    (&e.shadowed, e.covered),
                    (&expected, cover.is_some()),
                    "{m:?} at {prio}"
                );
            }
            held.push((e.added[0], prio, m));
        };
    for _ in 0..5000 {
        let len = 8 + (next() % 21) as u32;
        add_route(&mut p, &mut held, route(next() as u32, len), len);
    }
    add_route(&mut p, &mut held, route(0, 0), 0);
    p.apply(&PipelineOp::Compile);
    assert_eq!(p.table_structures(), vec![(0, "fib")]);
    for round in 0..3000 {
        if round == 2500 {
            assert_eq!(p.table_structures(), vec![(0, "fib")]);
        }
        if round == 1500 {
            // Without the default route, uncovered routes take misses.
            let (id, _, m) = held.iter().find(|(_, q, _)| *q == 0).cloned().unwrap();
            let fm = FlowMod::new(FlowModCommand::DeleteStrict, 0, 0, m.matcher);
            assert_eq!(p.flow_mod(&fm, 0).unwrap().removed[0].id, id);
            held.retain(|h| h.0 != id);
        }
        let len = 8 + (next() % 25) as u32;
        let m = route(next() as u32, len);
        // Last, routes out of LPM order: the first moves the table to
        // TupleMerge, whose walk answers from then on.
        let prio = if round >= 2500 && next() % 8 == 0 {
            40 - len
        } else {
            len
        };
        add_route(&mut p, &mut held, m, prio);
        if next() % 2 == 0 {
            let i = (next() % held.len() as u64) as usize;
            let (id, q, m) = held.swap_remove(i);
            let fm = FlowMod::new(FlowModCommand::DeleteStrict, 0, q, m.matcher);
            assert_eq!(p.flow_mod(&fm, 0).unwrap().removed[0].id, id);
        }
    }
    assert_eq!(p.table_structures(), vec![(0, "tuple")]);
}
