//! Key-precise revalidation on rule ADDs: a rule added to a table keeps the
//! cached decisions it shadows alive with its match as a filter; only
//! microflows whose key matches the new rule re-resolve, unless an earlier
//! table on the decision's path rewrote the key (then the decision is freed
//! as before). Scenarios assert the exact hit / re-resolution counts and
//! counters; a property test compares against a reference pipeline and
//! bounds the re-resolutions by the flows the added rules match.

mod common;

use common::{dst_match, frame4, small_domain_match, RecSink};
use offlow_datapath::{execute, Control, ExecStats, PacketBuf, Worker, WorkerConfig, MAX_FILTERS};
use offlow_flow::{extract, Field, Match, ParseStats};
use offlow_pipeline::*;
use proptest::prelude::*;

/// A UDP frame to 10.0.0.`dst`, port 50 + `dport`, from MAC ..:`src`.
fn frame(src: u8, dst: u8, dport: u8) -> Vec<u8> {
    let mut f = frame4([10, 0, 0, 1], [10, 0, 0, dst], 64, 0)
        .udp(1000, 50 + u16::from(dport))
        .payload(b"payload")
        .build();
    f[11] = src; // eth_src last byte: no checksum covers it
    f
}

fn out(p: u32) -> Instruction {
    Instruction::ApplyActions(vec![Action::output(PortNo(p))])
}

/// Ingress port of the scenarios (outputs go to ports 1-4, never back).
const IN_PORT: u32 = 7;

/// Send one packet to each of `dsts` on `IN_PORT`; the output port of each.
fn send(worker: &mut Worker, dsts: &[u8]) -> Vec<Option<u32>> {
    dsts.iter()
        .map(|&d| {
            let mut bufs = vec![PacketBuf::from_frame(&frame(1, d, 0), 16)];
            let mut sink = RecSink::default();
            worker.process(&mut bufs, IN_PORT, &mut sink);
            sink.sent.first().map(|s| s.0)
        })
        .collect()
}

/// Table 0 sends everything to table 1 with `t0` extra instructions; table
/// 1 has a default route to port 1. Returns the control and a warm worker
/// (every flow of `dsts` cached).
fn two_tables(t0: Vec<Instruction>, dsts: &[u8]) -> (Control, Worker) {
    let mut control = Control::new(Pipeline::new(2));
    let mut ins = t0;
    ins.push(Instruction::GotoTable(1));
    control
        .flow_mod(&FlowMod::add(0, 0, Match::ANY, ins), 0)
        .unwrap();
    control
        .flow_mod(&FlowMod::add(1, 0, Match::ANY, vec![out(1)]), 0)
        .unwrap();
    control.commit();
    let mut worker = control.worker(WorkerConfig {
        check: true,
        ..WorkerConfig::default()
    });
    assert_eq!(send(&mut worker, dsts), vec![Some(1); dsts.len()]);
    worker.reset_stats();
    (control, worker)
}

/// Rule packet counts by (table, priority).
fn rule_packets(control: &Control) -> Vec<(u8, u32, u64)> {
    control
        .pipeline()
        .dump(&FlowFilter::all())
        .iter()
        .map(|s| (s.table_id, s.priority, s.packets))
        .collect()
}

#[test]
fn add_re_resolves_only_matching_keys() {
    let dsts: Vec<u8> = (1..=8).collect();
    let (mut control, mut worker) = two_tables(Vec::new(), &dsts);
    // A more specific route shadows the default route all 8 flows use.
    control
        .flow_mod(&FlowMod::add(1, 10, dst_match(3), vec![out(2)]), 0)
        .unwrap();
    control.commit();
    let got = send(&mut worker, &dsts);
    let want: Vec<Option<u32>> = dsts
        .iter()
        .map(|&d| Some(if d == 3 { 2 } else { 1 }))
        .collect();
    assert_eq!(got, want);
    let s = worker.stats();
    assert_eq!(s.stale, 0);
    assert_eq!((s.stale_hits, s.pipeline_lookups), (1, 1), "only 10.0.0.3");
    assert_eq!(s.cache_hits, 7);
    assert_eq!(s.filter_checks, 7, "each other flow checked once");
    assert_eq!(worker.action_stats().filter_frees, 0);
    assert!(worker.action_stats().filtered >= 1);
    // Checked once: the next round is plain hits.
    worker.reset_stats();
    assert_eq!(send(&mut worker, &dsts), want);
    let s = worker.stats();
    assert_eq!(
        (s.cache_hits, s.filter_checks, s.pipeline_lookups),
        (8, 0, 0)
    );
    // Counters exact: 8 + 8 + 8 packets through table 0; the route got 2.
    worker.flush_counters();
    assert_eq!(
        rule_packets(&control),
        vec![(0, 0, 24), (1, 10, 2), (1, 0, 22)]
    );
}

#[test]
fn miss_deps_are_filtered_per_key() {
    // Table 1 has no rule at all: every flow's decision depends on Miss(1).
    let mut control = Control::new(Pipeline::new(2));
    control
        .flow_mod(
            &FlowMod::add(0, 0, Match::ANY, vec![Instruction::GotoTable(1)]),
            0,
        )
        .unwrap();
    control.commit();
    let mut worker = control.worker(WorkerConfig {
        check: true,
        ..WorkerConfig::default()
    });
    let dsts = [1u8, 2, 3, 4];
    assert_eq!(send(&mut worker, &dsts), vec![None; 4]);
    worker.reset_stats();
    // Rules for 10.0.0.2 then 10.0.0.4, committed separately: the shared
    // decision carries both filters.
    control
        .flow_mod(&FlowMod::add(1, 0, dst_match(2), vec![out(2)]), 0)
        .unwrap();
    control.commit();
    control
        .flow_mod(&FlowMod::add(1, 0, dst_match(4), vec![out(4)]), 0)
        .unwrap();
    control.commit();
    assert_eq!(send(&mut worker, &dsts), vec![None, Some(2), None, Some(4)]);
    let s = worker.stats();
    assert_eq!((s.stale, s.stale_hits, s.cache_hits), (0, 2, 2));
    assert_eq!(worker.action_stats().filter_frees, 0);
}

#[test]
fn key_rewrite_before_the_table_falls_back_to_freeing() {
    let dsts: Vec<u8> = (1..=6).collect();
    for t0 in [
        vec![Instruction::WriteMetadata { value: 1, mask: 1 }],
        vec![Instruction::ApplyActions(vec![Action::SetField(
            Field::EthDst,
            7,
        )])],
    ] {
        let (mut control, mut worker) = two_tables(t0.clone(), &dsts);
        control
            .flow_mod(&FlowMod::add(1, 10, dst_match(3), vec![out(2)]), 0)
            .unwrap();
        control.commit();
        let got = send(&mut worker, &dsts);
        let want: Vec<Option<u32>> = dsts
            .iter()
            .map(|&d| Some(if d == 3 { 2 } else { 1 }))
            .collect();
        assert_eq!(got, want, "{t0:?}");
        let s = worker.stats();
        assert_eq!(s.stale, 0);
        // The shared decision was freed: every flow re-resolves.
        assert_eq!((s.stale_hits, s.cache_hits), (6, 0), "{t0:?}");
        assert_eq!(worker.action_stats().filter_frees, 1, "{t0:?}");
        worker.flush_counters();
        assert_eq!(
            rule_packets(&control),
            vec![(0, 0, 12), (1, 10, 1), (1, 0, 11)]
        );
    }
}

#[test]
fn too_many_filters_free_the_entry() {
    let dsts = [1u8, 2];
    let (mut control, mut worker) = two_tables(Vec::new(), &dsts);
    // Routes for destinations no flow uses, one commit each.
    for i in 0..MAX_FILTERS {
        let d = 100 + i as u8;
        control
            .flow_mod(&FlowMod::add(1, 10, dst_match(d), vec![out(2)]), 0)
            .unwrap();
        control.commit();
    }
    assert_eq!(send(&mut worker, &dsts), vec![Some(1); 2]);
    let s = worker.stats();
    assert_eq!((s.stale_hits, s.cache_hits, s.filter_checks), (0, 2, 2));
    // One more: the default route's entry would carry MAX_FILTERS + 1.
    control
        .flow_mod(&FlowMod::add(1, 10, dst_match(99), vec![out(2)]), 0)
        .unwrap();
    control.commit();
    worker.reset_stats();
    assert_eq!(send(&mut worker, &dsts), vec![Some(1); 2]);
    let s = worker.stats();
    assert_eq!((s.stale_hits, s.cache_hits, s.stale), (2, 0, 0));
    assert_eq!(worker.action_stats().filter_frees, 1);
}

/// A MODIFY whose rule now ends the walk rebuilds the decisions through
/// it in place (their microflows keep hitting, with the new actions); one
/// whose rule now goes on to another table frees them; a DELETE frees.
#[test]
fn modify_rebuilds_or_frees_and_delete_frees() {
    let dsts = [1u8, 2, 3];
    let (mut control, mut worker) = two_tables(Vec::new(), &dsts);
    // Table 1's rule ends every walk, before and after.
    let mut fm = FlowMod::new(FlowModCommand::ModifyStrict, 1, 0, Match::ANY);
    fm.instructions = vec![out(3)];
    control.flow_mod(&fm, 0).unwrap();
    control.commit();
    assert_eq!(send(&mut worker, &dsts), vec![Some(3); 3]);
    let s = worker.stats();
    assert_eq!((s.stale_hits, s.cache_hits, s.stale), (0, 3, 0));
    assert_eq!(worker.action_stats().rebuilt, 1, "one decision, shared");
    // Table 0's rule stops going to table 1: the path is cut short.
    worker.reset_stats();
    let mut fm = FlowMod::new(FlowModCommand::ModifyStrict, 0, 0, Match::ANY);
    fm.instructions = vec![out(4)];
    control.flow_mod(&fm, 0).unwrap();
    control.commit();
    assert_eq!(send(&mut worker, &dsts), vec![Some(4); 3]);
    let s = worker.stats();
    assert_eq!((s.stale_hits, s.cache_hits, s.stale), (0, 3, 0));
    assert_eq!(worker.action_stats().rebuilt, 2);
    // ... and goes there again: what follows depends on the key, so the
    // decision is freed and every flow walks the pipeline.
    worker.reset_stats();
    fm.instructions = vec![Instruction::GotoTable(1)];
    control.flow_mod(&fm, 0).unwrap();
    control.commit();
    assert_eq!(send(&mut worker, &dsts), vec![Some(3); 3]);
    let s = worker.stats();
    assert_eq!((s.stale_hits, s.cache_hits), (3, 0));
    assert_eq!(worker.action_stats().rebuilt, 2);
    worker.reset_stats();
    control
        .flow_mod(
            &FlowMod::new(FlowModCommand::DeleteStrict, 1, 0, Match::ANY),
            0,
        )
        .unwrap();
    control.commit();
    assert_eq!(send(&mut worker, &dsts), vec![None; 3]);
    assert_eq!(worker.stats().stale_hits, 3);
}

/// A MODIFY that cuts two decisions' paths to the same one keeps one
/// entry for it: the first is rebuilt, the second freed (its flow
/// re-resolves and shares the first), so no two entries hold one decision.
#[test]
fn paths_cut_to_one_keep_one_entry() {
    let dsts = [1u8, 2];
    let mut control = Control::new(Pipeline::new(2));
    control
        .flow_mod(
            &FlowMod::add(0, 0, Match::ANY, vec![Instruction::GotoTable(1)]),
            0,
        )
        .unwrap();
    for d in dsts {
        let fm = FlowMod::add(1, 5, dst_match(d), vec![out(u32::from(d))]);
        control.flow_mod(&fm, 0).unwrap();
    }
    control.commit();
    let mut worker = control.worker(WorkerConfig {
        check: true,
        ..WorkerConfig::default()
    });
    assert_eq!(send(&mut worker, &dsts), vec![Some(1), Some(2)]);
    assert_eq!(worker.action_entries(), 2);
    worker.reset_stats();
    let mut fm = FlowMod::new(FlowModCommand::ModifyStrict, 0, 0, Match::ANY);
    fm.instructions = vec![out(4)];
    control.flow_mod(&fm, 0).unwrap();
    control.commit();
    assert_eq!(send(&mut worker, &dsts), vec![Some(4); 2]);
    let s = worker.stats();
    assert_eq!((s.cache_hits, s.stale_hits, s.stale), (1, 1, 0));
    assert_eq!(worker.action_stats().rebuilt, 1);
    assert_eq!(worker.action_entries(), 1);
}

const N_TABLES: u8 = 3;

/// (eth_src, ipv4_dst, udp_dst) in a small domain.
type Pkt = (u8, u8, u8);

fn arb_match() -> impl Strategy<Value = Match> {
    (
        proptest::option::of(0u8..3),
        proptest::option::of(0u8..4),
        proptest::option::of(0u8..3),
    )
        .prop_map(|(src, dst, dport)| small_domain_match(src, dst, dport))
}

/// A rule: (table, priority, match, output port, goto offset, rewrite).
/// `rewrite` adds a write-metadata (key change) before the goto.
type RuleSpec = (u8, u32, Match, u32, Option<u8>, bool);

fn arb_rule(rewrites: bool) -> impl Strategy<Value = RuleSpec> {
    (
        0u8..N_TABLES,
        0u32..4,
        arb_match(),
        1u32..5,
        proptest::option::of(1u8..3),
        if rewrites {
            any::<bool>().boxed()
        } else {
            Just(false).boxed()
        },
    )
}

fn flow_mod(r: &RuleSpec) -> FlowMod {
    let &(t, p, m, port, goto, rewrite) = r;
    let mut ins = vec![out(port)];
    if rewrite {
        ins.push(Instruction::WriteMetadata { value: 1, mask: 1 });
    }
    if let Some(g) = goto {
        if t + g < N_TABLES {
            ins.push(Instruction::GotoTable(t + g));
        }
    }
    FlowMod::add(t, p, m, ins)
}

/// Ports a reference pipeline outputs `pkts` to (and credits them).
fn reference_ports(reference: &Pipeline, pkts: &[Pkt]) -> Vec<Vec<u32>> {
    let mut ps = ParseStats::default();
    let mut es = ExecStats::default();
    pkts.iter()
        .map(|&(s, d, p)| {
            let mut buf = PacketBuf::from_frame(&frame(s, d, p), 16);
            let mut parsed = extract(buf.frame(), IN_PORT, &mut ps);
            let res = reference.lookup(&parsed.key);
            reference.credit_resolution(&res, 1, buf.len() as u64);
            let mut sink = RecSink::default();
            execute(
                &res.actions,
                &mut buf,
                &mut parsed.layout,
                IN_PORT,
                &mut sink,
                &mut es,
            );
            sink.sent.into_iter().map(|s| s.0).collect()
        })
        .collect()
}

fn worker_ports(worker: &mut Worker, pkts: &[Pkt]) -> Vec<Vec<u32>> {
    pkts.iter()
        .map(|&(s, d, p)| {
            let mut bufs = vec![PacketBuf::from_frame(&frame(s, d, p), 16)];
            let mut sink = RecSink::default();
            worker.process(&mut bufs, IN_PORT, &mut sink);
            sink.sent.into_iter().map(|s| s.0).collect()
        })
        .collect()
}

fn key_of(p: &Pkt) -> offlow_flow::FlowKey {
    let f = frame(p.0, p.1, p.2);
    extract(&f, IN_PORT, &mut ParseStats::default()).key
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(debug_assertions) { 64 } else { 512 }))]

    /// Warm every flow, then ADD rules (a few commits): outputs and
    /// counters equal the reference's; without key rewrites, only flows
    /// whose key matches an added rule may re-resolve, all others hit.
    #[test]
    fn adds_revalidate_by_key(
        rewrites in any::<bool>(),
        base in proptest::collection::vec(arb_rule(true), 0..10),
        adds in proptest::collection::vec((arb_rule(true), any::<bool>()), 1..8),
    ) {
        let strip = |r: &RuleSpec| (r.0, r.1, r.2, r.3, r.4, r.5 && rewrites);
        let base: Vec<RuleSpec> = base.iter().map(strip).collect();
        let adds: Vec<(RuleSpec, bool)> = adds.iter().map(|(r, c)| (strip(r), *c)).collect();
        let mut control = Control::new(Pipeline::new(u16::from(N_TABLES)));
        let mut reference = Pipeline::new(u16::from(N_TABLES));
        for r in &base {
            let fm = flow_mod(r);
            if control.flow_mod(&fm, 0).is_ok() {
                reference.flow_mod(&fm, 0).unwrap();
            }
        }
        control.commit();
        let mut worker = control.worker(WorkerConfig {
            check: true,
            cache_capacity: 1 << 16,
            ..WorkerConfig::default()
        });
        let mut pkts = Vec::new();
        for s in 0..3u8 {
            for d in 0..4u8 {
                for p in 0..3u8 {
                    pkts.push((s, d, p));
                }
            }
        }
        for _ in 0..2 {
            prop_assert_eq!(worker_ports(&mut worker, &pkts), reference_ports(&reference, &pkts));
        }
        worker.reset_stats();
        let mut added: Vec<Match> = Vec::new();
        for (r, commit) in &adds {
            let fm = flow_mod(r);
            if control.flow_mod(&fm, 0).is_ok() {
                reference.flow_mod(&fm, 0).unwrap();
                added.push(r.2);
            }
            if *commit {
                control.commit();
            }
        }
        control.commit();
        prop_assert_eq!(worker_ports(&mut worker, &pkts), reference_ports(&reference, &pkts));
        let s = worker.stats();
        prop_assert_eq!(s.stale, 0);
        if !rewrites {
            let matching = pkts
                .iter()
                .filter(|p| {
                    let k = key_of(p);
                    added.iter().any(|m| m.matches(&k))
                })
                .count() as u64;
            prop_assert!(s.stale_hits <= matching, "{} re-resolved, {} match", s.stale_hits, matching);
            prop_assert!(s.cache_hits >= pkts.len() as u64 - matching);
        }
        worker.flush_counters();
        let all = FlowFilter::all();
        let got: Vec<(RuleId, u64, u64)> =
            control.pipeline().dump(&all).iter().map(|s| (s.id, s.packets, s.bytes)).collect();
        let want: Vec<(RuleId, u64, u64)> =
            reference.dump(&all).iter().map(|s| (s.id, s.packets, s.bytes)).collect();
        prop_assert_eq!(got, want);
        prop_assert_eq!(control.pipeline().table_stats(), reference.table_stats());
    }
}

/// An ADD overlapping more than `SHADOW_LIMIT` entries reports the whole
/// table (`shadowed_all`); the worker still revalidates by key: flows the
/// new rule does not match keep hitting, the ones it matches take it.
#[test]
fn whole_table_shadowing_still_revalidates_by_key() {
    let mut control = Control::new(Pipeline::new(1));
    // SHADOW_LIMIT + 1 rules on distinct destinations, all lower priority
    // than (and overlapping) a rule on UDP port 52.
    for d in 0..=(SHADOW_LIMIT as u32) {
        let mut m = Match::ANY;
        m.set_exact(Field::EthType, 0x0800);
        m.set_exact(Field::Ipv4Dst, u128::from(0x0a00_0000 + d));
        control
            .flow_mod(&FlowMod::add(0, 5, m, vec![out(1 + d % 2)]), 0)
            .expect("add");
    }
    control.commit();
    let mut worker = control.worker(WorkerConfig::default());
    let dsts = [3u8, 4, 5, 6];
    let before = send(&mut worker, &dsts);
    assert!(
        before.iter().all(|p| matches!(p, Some(1 | 2))),
        "{before:?}"
    );
    send(&mut worker, &dsts); // all cached now
                              // And one flow to UDP port 52, cached under its destination rule.
    let udp52 = |worker: &mut Worker| {
        let mut bufs = vec![PacketBuf::from_frame(&frame(1, 3, 2), 16)];
        let mut sink = RecSink::default();
        worker.process(&mut bufs, IN_PORT, &mut sink);
        sink.sent.first().map(|s| s.0)
    };
    assert_eq!(udp52(&mut worker), before[0]);
    assert_eq!(udp52(&mut worker), before[0]);
    let s0 = worker.stats();

    // Matches UDP dport 52: only the flow sent with dport 2 below.
    let mut m = Match::ANY;
    m.set_exact(Field::EthType, 0x0800)
        .set_exact(Field::IpProto, 17)
        .set_exact(Field::UdpDst, 52);
    let eff = control
        .flow_mod(&FlowMod::add(0, 10, m, vec![out(4)]), 0)
        .expect("add");
    assert!(eff.shadowed_all && eff.shadowed.is_empty(), "{eff:?}");
    control.commit();
    // The cached flows (dport 50) do not match: all four still hit.
    let after = send(&mut worker, &dsts);
    assert_eq!(after, before);
    let s1 = worker.stats();
    assert_eq!(s1.cache_hits - s0.cache_hits, 4, "{s1:?}");
    assert_eq!(s1.pipeline_lookups, s0.pipeline_lookups);
    // The cached dport-52 flow matches the new rule: re-resolved, it takes it.
    assert_eq!(udp52(&mut worker), Some(4));
    let s2 = worker.stats();
    assert_eq!(s2.pipeline_lookups - s1.pipeline_lookups, 1, "{s2:?}");
}

/// The writer lists what an ADD shadows only for a table some worker has
/// cached a decision through: before any traffic, an ADD reports the whole
/// table without walking it (nothing depends on it yet); once a packet's
/// decision went through the table, the ADD lists the overlapped entries
/// again, and a table the traffic never reached still reports the whole
/// table.
#[test]
fn shadow_list_only_for_tables_with_cached_decisions() {
    let mut control = Control::new(Pipeline::new(3));
    let dst = |d: u32| {
        let mut m = Match::ANY;
        m.set_exact(Field::EthType, 0x0800);
        m.set_exact(Field::Ipv4Dst, u128::from(0x0a00_0000 + d));
        m
    };
    let udp = |port: u128| {
        let mut m = Match::ANY;
        m.set_exact(Field::EthType, 0x0800)
            .set_exact(Field::IpProto, 17)
            .set_exact(Field::UdpDst, port);
        m
    };
    let eff = control
        .flow_mod(&FlowMod::add(0, 5, dst(3), vec![out(1)]), 0)
        .expect("add");
    // A second, overlapping ADD before any worker cached anything.
    let eff2 = control
        .flow_mod(&FlowMod::add(0, 10, udp(52), vec![out(2)]), 0)
        .expect("add");
    assert!(eff.shadowed_all && eff2.shadowed_all, "{eff:?} {eff2:?}");
    control.commit();
    let mut worker = control.worker(WorkerConfig::default());
    assert_eq!(send(&mut worker, &[3]), vec![Some(1)]);
    // Table 0 now holds a cached decision: the overlap is listed exactly.
    let eff3 = control
        .flow_mod(&FlowMod::add(0, 20, udp(50), vec![out(3)]), 0)
        .expect("add");
    assert!(!eff3.shadowed_all, "{eff3:?}");
    assert_eq!(
        eff3.shadowed.len(),
        1,
        "overlaps the dst rule only: {eff3:?}"
    );
    // Table 2 was never looked up.
    let eff4 = control
        .flow_mod(&FlowMod::add(2, 1, udp(50), vec![out(3)]), 0)
        .expect("add");
    assert!(eff4.shadowed_all, "{eff4:?}");
    control.commit();
    // And the cached flow (UDP port 50) takes the new higher rule.
    assert_eq!(send(&mut worker, &[3]), vec![Some(3)]);
}
