//! Steering (`Action::SetWorkers`): a worker outside a decision's mask
//! hands every packet of it, unmodified and unexecuted, to the sink's
//! `steer` and credits nothing; a worker inside the mask executes and
//! credits exactly; a decision without a mask (or with the worker's bit)
//! is processed as before. A property test runs several workers over one
//! pipeline, delivering steered frames to the chosen worker as the switch
//! does, and compares outputs, the worker that produced them and the rule
//! counters with a reference computed from the rules alone.

mod common;

use common::{dst_match, frame4};
use offlow_datapath::{
    Control, OutputMeta, OutputSink, PacketBuf, PortInfo, SteerRule, SteeredFrame, SteeringTable,
    Worker, WorkerConfig,
};
use offlow_flow::{Field, Match};
use offlow_pipeline::*;
use proptest::prelude::*;

const IN_PORT: u32 = 7;

/// A UDP frame to 10.0.0.`dst` from source port `sport`.
fn frame(dst: u8, sport: u16) -> Vec<u8> {
    frame4([10, 0, 0, 1], [10, 0, 0, dst], 64, 0)
        .udp(sport, 53)
        .payload(b"steer me")
        .build()
}

/// Records outputs and steering offers; `take` says whether `steer` takes
/// the frame.
#[derive(Default)]
struct SteerSink {
    take: bool,
    sent: Vec<(u32, Vec<u8>)>,
    offers: Vec<Offer>,
}

/// One call of `steer`, as the sink saw it.
struct Offer {
    mask: u64,
    hash: u64,
    frame: Vec<u8>,
    in_port: u32,
    tunnel_id: Option<u64>,
}

impl OutputSink for SteerSink {
    fn output(&mut self, port: u32, frame: &[u8], _meta: OutputMeta) {
        self.sent.push((port, frame.to_vec()));
    }
    fn controller(&mut self, _: &[u8], _: u16, _: PacketInOrigin, _: OutputMeta) {}
    fn port_count(&self) -> usize {
        0
    }
    fn port_info(&self, _index: usize) -> Option<PortInfo> {
        None
    }
    fn steer(&mut self, mask: u64, hash: u64, p: SteeredFrame<'_>) -> bool {
        self.offers.push(Offer {
            mask,
            hash,
            frame: p.frame.to_vec(),
            in_port: p.in_port,
            tunnel_id: p.tunnel_id,
        });
        self.take
    }
}

/// Packets and bytes credited to the rule at (`table`, `priority`).
fn rule_counts(control: &Control, table: u8, priority: u32) -> (u64, u64) {
    control
        .pipeline()
        .dump(&FlowFilter::all())
        .iter()
        .find(|s| s.table_id == table && s.priority == priority)
        .map(|s| (s.packets, s.bytes))
        .expect("rule present")
}

/// One rule: 10.0.0.1 → SetWorkers(mask), output 2 (the mask written
/// after the output, to show position does not matter); table-miss drops.
fn control_with_mask(mask: u64, write: bool) -> Control {
    let mut control = Control::new(Pipeline::new(1));
    let actions = vec![Action::output(PortNo(2)), Action::SetWorkers(mask)];
    let ins = if write {
        Instruction::WriteActions(actions)
    } else {
        Instruction::ApplyActions(actions)
    };
    control
        .flow_mod(&FlowMod::add(0, 10, dst_match(1), vec![ins]), 0)
        .unwrap();
    control.commit();
    control
}

fn worker(control: &Control, index: usize, cache: bool) -> Worker {
    control.worker(WorkerConfig {
        worker_index: index,
        cache,
        check: cache,
        ..WorkerConfig::default()
    })
}

/// Process `frames` (one batch) on `w`.
fn run(w: &mut Worker, frames: &[Vec<u8>], sink: &mut SteerSink) {
    let mut bufs: Vec<PacketBuf> = frames
        .iter()
        .map(|f| PacketBuf::from_frame(f, 16))
        .collect();
    w.process(&mut bufs, IN_PORT, sink);
}

#[test]
fn outside_the_mask_hands_over_everything() {
    for (cache, write) in [(true, false), (true, true), (false, false)] {
        let control = control_with_mask(0b10, write);
        let mut w0 = worker(&control, 0, cache);
        let frames: Vec<Vec<u8>> = (0..20).map(|i| frame(1, 1000 + i % 5)).collect();
        let mut sink = SteerSink {
            take: true,
            ..SteerSink::default()
        };
        // Twice: the second round is served from the cache.
        run(&mut w0, &frames, &mut sink);
        run(&mut w0, &frames, &mut sink);
        w0.flush_counters();
        assert!(sink.sent.is_empty(), "nothing output by worker 0");
        assert_eq!(sink.offers.len(), 40);
        for (k, o) in sink.offers.iter().enumerate() {
            assert_eq!(o.mask, 0b10);
            assert_eq!(o.frame, frames[k % 20], "frame handed over unmodified");
            assert_eq!((o.in_port, o.tunnel_id), (IN_PORT, None));
        }
        // One flow, one hash.
        assert_eq!(sink.offers[0].hash, sink.offers[20].hash);
        let s = w0.stats();
        assert_eq!((s.packets, s.steered_out, s.outputs), (40, 40, 0));
        assert_eq!(rule_counts(&control, 0, 10), (0, 0), "nothing credited");
        let t0 = control.pipeline().table_counters(0).unwrap().get();
        assert_eq!(t0, (0, 0), "no table lookups credited");

        // Worker 1 processes the handed-over frames and credits exactly.
        let mut w1 = worker(&control, 1, cache);
        let mut sink1 = SteerSink::default();
        let handed: Vec<Vec<u8>> = sink.offers.iter().map(|o| o.frame.clone()).collect();
        run(&mut w1, &handed, &mut sink1);
        w1.flush_counters();
        assert!(sink1.offers.is_empty());
        assert_eq!(sink1.sent.len(), 40);
        assert!(sink1.sent.iter().all(|(p, _)| *p == 2));
        let bytes: u64 = handed.iter().map(|f| f.len() as u64).sum();
        assert_eq!(rule_counts(&control, 0, 10), (40, bytes));
        assert_eq!(
            control.pipeline().table_counters(0).unwrap().get(),
            (40, 40)
        );
        assert_eq!(w1.stats().steered_out, 0);
    }
}

#[test]
fn declined_steer_or_own_bit_processes_locally() {
    // The mask includes worker 0: no offer at all.
    let control = control_with_mask(0b11, false);
    let mut w0 = worker(&control, 0, true);
    let frames: Vec<Vec<u8>> = (0..8).map(|i| frame(1, 2000 + i)).collect();
    let mut sink = SteerSink {
        take: true,
        ..SteerSink::default()
    };
    run(&mut w0, &frames, &mut sink);
    run(&mut w0, &frames, &mut sink);
    w0.flush_counters();
    assert!(sink.offers.is_empty());
    assert_eq!(sink.sent.len(), 16);
    assert_eq!(rule_counts(&control, 0, 10).0, 16);

    // Masked away, but the sink declines (no such worker): processed here.
    let control = control_with_mask(1 << 40, false);
    let mut w0 = worker(&control, 0, true);
    let mut sink = SteerSink::default();
    run(&mut w0, &frames, &mut sink);
    run(&mut w0, &frames, &mut sink);
    w0.flush_counters();
    assert_eq!(sink.offers.len(), 16);
    assert_eq!(sink.sent.len(), 16);
    assert_eq!(w0.stats().steered_out, 0);
    assert_eq!(rule_counts(&control, 0, 10).0, 16);

    // Unmasked traffic (table-miss drop) is never offered.
    let mut sink = SteerSink {
        take: true,
        ..SteerSink::default()
    };
    run(&mut w0, &[frame(9, 1)], &mut sink);
    assert!(sink.offers.is_empty());
    assert_eq!(w0.stats().drop_table_miss, 1);
}

/// A decapsulated packet's `tunnel_id` travels with the steered frame: a
/// configured rule on the tunnel id sends key 7 to worker 1, and the offer
/// carries the key (the frame's bytes do not hold it), cached or not.
#[test]
fn steered_packets_carry_their_tunnel_id() {
    let control = control_with_mask(0b1, false);
    let mut m = Match::ANY;
    m.set_exact(Field::TunnelId, 7);
    let table = SteeringTable::new([SteerRule {
        matcher: m,
        workers: 0b10,
    }]);
    for cache in [true, false] {
        let mut w0 = worker(&control, 0, cache);
        w0.set_steering(table.clone());
        let mut sink = SteerSink {
            take: true,
            ..SteerSink::default()
        };
        for _ in 0..2 {
            let mut bufs: Vec<PacketBuf> = [Some(7), Some(8), None]
                .into_iter()
                .map(|id| {
                    let mut b = PacketBuf::from_frame(&frame(2, 3000), 16);
                    b.set_tunnel_id(id);
                    b
                })
                .collect();
            w0.process(&mut bufs, IN_PORT, &mut sink);
        }
        let offered: Vec<(u32, Option<u64>)> = sink
            .offers
            .iter()
            .map(|o| (o.in_port, o.tunnel_id))
            .collect();
        assert_eq!(offered, vec![(IN_PORT, Some(7)); 2], "cache {cache}");
        assert_eq!(w0.stats().steered_out, 2);
    }
}

#[test]
fn zero_mask_is_refused() {
    let mut control = Control::new(Pipeline::new(1));
    let e = control
        .flow_mod(
            &FlowMod::add(
                0,
                1,
                Match::ANY,
                vec![Instruction::ApplyActions(vec![Action::SetWorkers(0)])],
            ),
            0,
        )
        .unwrap_err();
    assert!(matches!(e, PipelineError::BadArgument(_)), "{e}");
}

#[test]
fn configured_steering_table() {
    // One rule for everything (output 2); the rule for 10.0.0.3 carries its
    // own mask (worker 2), which wins over the configuration.
    let mut control = Control::new(Pipeline::new(1));
    control
        .flow_mod(
            &FlowMod::add(
                0,
                1,
                Match::ANY,
                vec![Instruction::ApplyActions(vec![Action::output(PortNo(2))])],
            ),
            0,
        )
        .unwrap();
    control
        .flow_mod(
            &FlowMod::add(
                0,
                5,
                dst_match(3),
                vec![Instruction::ApplyActions(vec![
                    Action::SetWorkers(0b100),
                    Action::output(PortNo(2)),
                ])],
            ),
            0,
        )
        .unwrap();
    control.commit();
    // Configured: UDP from source port 1000 → worker 1.
    let mut m = Match::ANY;
    m.set_exact(Field::EthType, 0x0800)
        .set_exact(Field::IpProto, 17)
        .set_exact(Field::UdpSrc, 1000);
    let table = SteeringTable::new([
        SteerRule {
            matcher: m,
            workers: 0b10,
        },
        // A zero mask is left out.
        SteerRule {
            matcher: Match::ANY,
            workers: 0,
        },
    ]);
    assert_eq!(table.rules().len(), 1);
    for cache in [true, false] {
        let mut w0 = worker(&control, 0, cache);
        w0.set_steering(table.clone());
        let mut sink = SteerSink {
            take: true,
            ..SteerSink::default()
        };
        // Same path (the catch-all rule), different configured masks:
        // sport 1000 is steered, 1001 is not, in any order, twice.
        let frames = vec![
            frame(1, 1001),
            frame(1, 1000),
            frame(1, 1001),
            frame(3, 1000),
            frame(1, 1000),
        ];
        run(&mut w0, &frames, &mut sink);
        run(&mut w0, &frames, &mut sink);
        let masks: Vec<u64> = sink.offers.iter().map(|o| o.mask).collect();
        assert_eq!(masks, vec![0b10, 0b100, 0b10, 0b10, 0b100, 0b10]);
        assert!(sink.offers.iter().all(|o| o.frame != frame(1, 1001)));
        assert_eq!(sink.sent.len(), 4, "the sport-1001 flow is served here");
        assert_eq!(w0.stats().steered_out, 6);
        // Worker 1 processes sport 1000 itself.
        let mut w1 = worker(&control, 1, cache);
        w1.set_steering(table.clone());
        let mut sink1 = SteerSink {
            take: true,
            ..SteerSink::default()
        };
        run(&mut w1, &[frame(1, 1000), frame(1, 1000)], &mut sink1);
        assert!(sink1.offers.is_empty());
        assert_eq!(sink1.sent.len(), 2);
    }
}

/// The switch's choice of worker: the set bits of `mask` among `n`
/// workers, picked by hash; `None` when no bit names a worker.
fn pick(mask: u64, hash: u64, n: usize) -> Option<usize> {
    let bits: Vec<usize> = (0..n).filter(|i| mask >> i & 1 == 1).collect();
    if bits.is_empty() {
        return None;
    }
    Some(bits[(hash % bits.len() as u64) as usize])
}

/// A sink for worker `me` of `n`: outputs are tagged with `me`, steered
/// frames queued for their destination.
struct MultiSink {
    me: usize,
    n: usize,
    sent: Vec<(usize, u32, Vec<u8>)>,
    inbox: Vec<(usize, Vec<u8>)>,
}

impl OutputSink for MultiSink {
    fn output(&mut self, port: u32, frame: &[u8], _meta: OutputMeta) {
        self.sent.push((self.me, port, frame.to_vec()));
    }
    fn controller(&mut self, _: &[u8], _: u16, _: PacketInOrigin, _: OutputMeta) {}
    fn port_count(&self) -> usize {
        0
    }
    fn port_info(&self, _index: usize) -> Option<PortInfo> {
        None
    }
    fn steer(&mut self, mask: u64, hash: u64, p: SteeredFrame<'_>) -> bool {
        match pick(mask, hash, self.n) {
            Some(to) if to != self.me => {
                self.inbox.push((to, p.frame.to_vec()));
                true
            }
            _ => false,
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(debug_assertions) { 256 } else { 1024 }))]

    /// Three workers, rules for 10.0.0.1..=4 each with its own mask (or
    /// none), packets arriving at random workers in random batches: every
    /// packet is output exactly once, on port `dst`, by a worker its mask
    /// allows (or by its receiver when the mask names no worker); every
    /// rule counts exactly its packets.
    #[test]
    fn steering_matches_reference(
        masks in proptest::collection::vec(proptest::option::of(1u64..16), 4),
        pkts in proptest::collection::vec((1u8..=4, 0u16..6, 0usize..3), 1..60),
        batch in 1usize..8,
    ) {
        const N: usize = 3;
        let mut control = Control::new(Pipeline::new(1));
        for (i, m) in masks.iter().enumerate() {
            let d = i as u8 + 1;
            let mut actions = vec![Action::output(PortNo(u32::from(d)))];
            actions.extend(m.map(Action::SetWorkers));
            control
                .flow_mod(&FlowMod::add(0, u32::from(d), dst_match(d),
                    vec![Instruction::ApplyActions(actions)]), 0)
                .unwrap();
        }
        control.commit();
        let mut workers: Vec<Worker> = (0..N).map(|i| worker(&control, i, true)).collect();
        let mut sent = Vec::new();
        // Arrivals per worker, processed in batches; then each inbox.
        let mut arrivals: Vec<Vec<Vec<u8>>> = vec![Vec::new(); N];
        for &(d, s, w) in &pkts {
            arrivals[w].push(frame(d, 100 + s));
        }
        let mut inboxes: Vec<Vec<Vec<u8>>> = vec![Vec::new(); N];
        for (me, w) in workers.iter_mut().enumerate() {
            for chunk in arrivals[me].chunks(batch) {
                let mut sink = MultiSink { me, n: N, sent: Vec::new(), inbox: Vec::new() };
                let mut bufs: Vec<PacketBuf> =
                    chunk.iter().map(|f| PacketBuf::from_frame(f, 16)).collect();
                w.process(&mut bufs, IN_PORT, &mut sink);
                sent.extend(sink.sent);
                for (to, f) in sink.inbox {
                    inboxes[to].push(f);
                }
            }
        }
        for (me, w) in workers.iter_mut().enumerate() {
            let mut sink = MultiSink { me, n: N, sent: Vec::new(), inbox: Vec::new() };
            let mut bufs: Vec<PacketBuf> =
                inboxes[me].iter().map(|f| PacketBuf::from_frame(f, 16)).collect();
            w.process(&mut bufs, IN_PORT, &mut sink);
            prop_assert!(sink.inbox.is_empty(), "a steered frame is never steered again");
            sent.extend(sink.sent);
            w.flush_counters();
        }
        prop_assert_eq!(sent.len(), pkts.len());
        let steered: u64 = workers.iter().map(|w| w.stats().steered_out).sum();
        let mut want_steered = 0;
        for &(d, _, recv) in &pkts {
            if let Some(m) = masks[usize::from(d) - 1] {
                if m & (1 << recv) == 0 && m & ((1 << N) - 1) != 0 {
                    want_steered += 1;
                }
            }
        }
        prop_assert_eq!(steered, want_steered);
        for (who, port, f) in &sent {
            let d = f[33]; // last byte of ipv4_dst (14 + 19)
            prop_assert_eq!(*port, u32::from(d));
            if let Some(m) = masks[usize::from(d) - 1] {
                if m & ((1 << N) - 1) != 0 {
                    prop_assert!(m >> who & 1 == 1, "dst {} mask {:#x} worker {}", d, m, who);
                }
            }
        }
        for d in 1..=4u8 {
            let want = pkts.iter().filter(|p| p.0 == d).count() as u64;
            prop_assert_eq!(rule_counts(&control, 0, u32::from(d)).0, want);
        }
    }
}
