//! Property test of the fast path (issue 3): a worker with the microflow
//! cache and Action Table, fed random packet batches interleaved with random
//! flow-mods (adds that shadow cached flows, modifies, deletes), must give
//! every packet exactly the outputs and bytes of the reference — a separate
//! pipeline receiving the same flow-mods, resolving every packet from
//! scratch with `Pipeline::lookup` and executing it — and end with the same
//! per-rule and per-table counters.

mod common;

use common::{frame4, small_domain_match, RecSink};
use offlow_datapath::{execute_prepared, Control, ExecStats, PacketBuf, Prepared, WorkerConfig};
use offlow_flow::{extract, Field, Match, ParseStats};
use offlow_pipeline::*;
use proptest::prelude::*;

const N_TABLES: u8 = 3;

/// A packet in the small domain: (in_port, eth_src, ipv4_dst, udp_dst).
type Pkt = (u32, u8, u8, u8);

fn frame(p: &Pkt) -> Vec<u8> {
    let mut f = frame4([10, 0, 0, 1], [10, 0, 0, p.2], 64, 0)
        .udp(1000, 50 + u16::from(p.3))
        .payload(b"payload")
        .build();
    f[11] = p.1; // eth_src last byte: no checksum covers it
    f
}

fn arb_match() -> impl Strategy<Value = Match> {
    (
        proptest::option::of(1u32..3),
        proptest::option::of(0u8..3),
        proptest::option::of(0u8..3),
        proptest::option::of(0u8..3),
        proptest::option::of(0u64..3),
    )
        .prop_map(|(in_port, src, dst, dport, md)| {
            let mut m = small_domain_match(src, dst, dport);
            if let Some(p) = in_port {
                m.set_exact(Field::InPort, u128::from(p));
            }
            if let Some(v) = md {
                m.set_masked(Field::Metadata, u128::from(v), 3);
            }
            m
        })
}

fn arb_action() -> impl Strategy<Value = Action> {
    prop_oneof![
        4 => (1u32..5).prop_map(|p| Action::output(PortNo(p))),
        1 => prop_oneof![Just(20u16), Just(CONTROLLER_NO_BUFFER)]
            .prop_map(|max_len| Action::Output { port: PortNo::CONTROLLER, max_len }),
        1 => (0u8..4).prop_map(|v| Action::SetField(Field::EthDst, u128::from(v))),
        1 => Just(Action::DecNwTtl),
        1 => (0u8..64).prop_map(|v| Action::SetField(Field::IpDscp, u128::from(v))),
    ]
}

fn arb_instructions() -> impl Strategy<Value = Vec<Instruction>> {
    (
        proptest::option::of(proptest::collection::vec(arb_action(), 0..3)),
        proptest::option::of(proptest::collection::vec(arb_action(), 0..3)),
        proptest::option::of(0u64..4),
        proptest::option::of(1u8..3),
    )
        .prop_map(|(apply, write, md, goto)| {
            let mut ins = Vec::new();
            if let Some(a) = apply {
                ins.push(Instruction::ApplyActions(a));
            }
            if let Some(w) = write {
                ins.push(Instruction::WriteActions(w));
            }
            if let Some(v) = md {
                ins.push(Instruction::WriteMetadata { value: v, mask: 3 });
            }
            if let Some(g) = goto {
                ins.push(Instruction::GotoTable(g)); // filtered per table below
            }
            ins
        })
}

#[derive(Debug, Clone)]
enum Step {
    Packets(Vec<Pkt>),
    Add(u8, u32, Match, Vec<Instruction>),
    Modify(bool, u8, u32, Match, Vec<Instruction>),
    Delete(bool, u8, u32, Match),
    /// MODIFY_STRICT of an installed rule (the `usize`-th, wrapping) to
    /// these instructions, without their Goto-Table when the flag says so
    /// (the rule then ends every walk through it: cached decisions are
    /// rebuilt in place).
    Reprogram(usize, Vec<Instruction>, bool),
    /// DELETE_STRICT of an installed rule (the `usize`-th, wrapping): a
    /// successor, when it has one, takes its cached decisions.
    Remove(usize),
    /// Publish what was applied so far (a barrier).
    Commit,
}

fn arb_pkt() -> impl Strategy<Value = Pkt> {
    (1u32..3, 0u8..3, 0u8..3, 0u8..3)
}

fn arb_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => proptest::collection::vec(arb_pkt(), 1..70).prop_map(Step::Packets),
        4 => (0u8..N_TABLES, 0u32..5, arb_match(), arb_instructions())
            .prop_map(|(t, p, m, i)| Step::Add(t, p, m, i)),
        1 => (any::<bool>(), 0u8..N_TABLES, 0u32..5, arb_match(), arb_instructions())
            .prop_map(|(s, t, p, m, i)| Step::Modify(s, t, p, m, i)),
        1 => (any::<bool>(), 0u8..N_TABLES, 0u32..5, arb_match())
            .prop_map(|(s, t, p, m)| Step::Delete(s, t, p, m)),
        4 => (any::<usize>(), arb_instructions(), prop::bool::weighted(0.75))
            .prop_map(|(i, ins, ends)| Step::Reprogram(i, ins, ends)),
        3 => any::<usize>().prop_map(Step::Remove),
        3 => Just(Step::Commit),
    ]
}

/// Keep only gotos that point forward.
fn fix_gotos(table: u8, ins: &[Instruction]) -> Vec<Instruction> {
    ins.iter()
        .filter_map(|i| match i {
            Instruction::GotoTable(g) => {
                let t = table + g;
                (t < N_TABLES).then_some(Instruction::GotoTable(t))
            }
            other => Some(other.clone()),
        })
        .collect()
}

fn to_flow_mod(step: &Step) -> Option<FlowMod> {
    Some(match step {
        // A cookie per table and priority: packet-ins report it.
        Step::Add(t, p, m, i) => FlowMod::add(*t, *p, *m, fix_gotos(*t, i))
            .with_cookie(u64::from(*t) << 32 | u64::from(*p), 0),
        Step::Modify(strict, t, p, m, i) => {
            let cmd = if *strict {
                FlowModCommand::ModifyStrict
            } else {
                FlowModCommand::Modify
            };
            let mut fm = FlowMod::new(cmd, *t, *p, *m);
            fm.instructions = fix_gotos(*t, i);
            fm
        }
        Step::Delete(strict, t, p, m) => {
            let cmd = if *strict {
                FlowModCommand::DeleteStrict
            } else {
                FlowModCommand::Delete
            };
            FlowMod::new(cmd, *t, *p, *m)
        }
        _ => return None,
    })
}

type Sent = Vec<(u32, Vec<u8>)>;

/// What went to the controller: frames, full lengths and origins.
fn ctrl_of(sink: &RecSink) -> Vec<(Vec<u8>, usize, PacketInOrigin)> {
    sink.to_ctrl
        .iter()
        .zip(&sink.origins)
        .map(|((f, n, _), o)| (f.clone(), *n, *o))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(debug_assertions) { 96 } else { 768 }))]

    #[test]
    fn cached_datapath_equals_reference_pipeline(
        steps in proptest::collection::vec(arb_step(), 1..40),
        capacity in prop_oneof![Just(8usize), Just(64), Just(4096)],
    ) {
        let mut control = Control::new(Pipeline::new(u16::from(N_TABLES)));
        let mut worker = control.worker(WorkerConfig {
            cache_capacity: capacity,
            check: true,
            ..WorkerConfig::default()
        });
        // The reference only ever sees committed changes, as the worker.
        let mut reference = Pipeline::new(u16::from(N_TABLES));
        let mut uncommitted: Vec<FlowMod> = Vec::new();
        let mut ref_stats = ExecStats::default();
        let mut parse_stats = ParseStats::default();
        for step in &steps {
            match step {
                Step::Packets(pkts) => {
                    for &in_port in &[1u32, 2] {
                        let batch: Vec<&Pkt> = pkts.iter().filter(|p| p.0 == in_port).collect();
                        let mut bufs: Vec<PacketBuf> =
                            batch.iter().map(|p| PacketBuf::from_frame(&frame(p), 16)).collect();
                        let mut sink = RecSink::default();
                        worker.process(&mut bufs, in_port, &mut sink);
                        let got_ctrl = ctrl_of(&sink);
                        let got: Sent = sink.sent.into_iter().map(|(p, f, _)| (p, f)).collect();

                        let mut want_sink = RecSink::default();
                        for p in &batch {
                            let mut buf = PacketBuf::from_frame(&frame(p), 16);
                            let mut parsed = extract(buf.frame(), in_port, &mut parse_stats);
                            let res = reference.lookup(&parsed.key);
                            reference.credit_resolution(&res, 1, buf.len() as u64);
                            let prepared =
                                Prepared { origins: &res.origins, ..Prepared::new(&res.actions) };
                            execute_prepared(prepared, &mut buf, &mut parsed.layout, in_port,
                                &mut want_sink, &mut ref_stats);
                        }
                        let want_ctrl = ctrl_of(&want_sink);
                        let want: Sent = want_sink.sent.into_iter().map(|(p, f, _)| (p, f)).collect();
                        prop_assert_eq!(got, want);
                        // Packet-ins: the same frames, each with the flow
                        // entry (table, cookie, table-miss) that sent it.
                        prop_assert_eq!(got_ctrl, want_ctrl);
                    }
                }
                Step::Commit => {
                    control.commit();
                    for fm in uncommitted.drain(..) {
                        let _ = reference.flow_mod(&fm, 0);
                    }
                }
                Step::Remove(i) => {
                    let rules = control.pipeline().dump(&FlowFilter::all());
                    if rules.is_empty() {
                        continue;
                    }
                    let r = &rules[i % rules.len()];
                    let fm = FlowMod::new(
                        FlowModCommand::DeleteStrict,
                        r.table_id,
                        r.priority,
                        r.matcher.matcher,
                    );
                    if control.flow_mod(&fm, 0).is_ok() {
                        uncommitted.push(fm);
                    }
                }
                Step::Reprogram(i, ins, ends) => {
                    let rules = control.pipeline().dump(&FlowFilter::all());
                    if rules.is_empty() {
                        continue;
                    }
                    let r = &rules[i % rules.len()];
                    let mut fm = FlowMod::new(
                        FlowModCommand::ModifyStrict,
                        r.table_id,
                        r.priority,
                        r.matcher.matcher,
                    );
                    fm.instructions = fix_gotos(r.table_id, ins)
                        .into_iter()
                        .filter(|x| !(*ends && matches!(x, Instruction::GotoTable(_))))
                        .collect();
                    if i % 3 == 0 {
                        fm.flags = FlowModFlags(FlowModFlags::RESET_COUNTS);
                    }
                    if control.flow_mod(&fm, 0).is_ok() {
                        uncommitted.push(fm);
                    }
                }
                other => {
                    let fm = to_flow_mod(other).expect("flow-mod step");
                    // Refused flow-mods change nothing; accepted ones are
                    // replayed on the reference in the same order, so both
                    // allocate the same rule ids.
                    if control.flow_mod(&fm, 0).is_ok() {
                        uncommitted.push(fm);
                    }
                }
            }
        }
        prop_assert_eq!(worker.stats().stale, 0, "check mode found a stale decision");
        // Counters: every rule and table as the reference counted them.
        worker.flush_counters();
        control.commit();
        for fm in uncommitted.drain(..) {
            let _ = reference.flow_mod(&fm, 0);
        }
        let all = FlowFilter::all();
        let got: Vec<(RuleId, u64, u64)> =
            control.pipeline().dump(&all).iter().map(|s| (s.id, s.packets, s.bytes)).collect();
        let want: Vec<(RuleId, u64, u64)> =
            reference.dump(&all).iter().map(|s| (s.id, s.packets, s.bytes)).collect();
        prop_assert_eq!(got, want);
        prop_assert_eq!(control.pipeline().table_stats(), reference.table_stats());
    }
}
