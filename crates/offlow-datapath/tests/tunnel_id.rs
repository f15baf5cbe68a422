//! The packet's tunnel metadata (`PacketBuf::tunnel_id`, set by a tunnel
//! port for the frames it decapsulates) through a worker: it is part of
//! the key the pipeline matches and the microflow cache is keyed on, so
//! two frames with the same bytes and different tunnel ids take their own
//! rules, cached or not; a set-field of `tunnel_id` changes what reaches
//! the output (`OutputMeta::tunnel_id`, the key a `key=flow` tunnel port
//! sends), and a frame without metadata reports 0. Checked against a
//! reference computed from the rules alone, over random sequences.

mod common;

use common::frame4;
use offlow_datapath::{Control, OutputMeta, OutputSink, PacketBuf, PortInfo, WorkerConfig};
use offlow_flow::{Field, Match};
use offlow_pipeline::*;
use proptest::prelude::*;

const TUNNEL_PORT: u32 = 10;

#[derive(Default)]
struct Outputs(Vec<(u32, u64)>);

impl OutputSink for Outputs {
    fn output(&mut self, port: u32, _frame: &[u8], meta: OutputMeta) {
        self.0.push((port, meta.tunnel_id));
    }
    fn controller(&mut self, _: &[u8], _: u16, _: PacketInOrigin, _: OutputMeta) {}
    fn port_count(&self) -> usize {
        0
    }
    fn port_info(&self, _index: usize) -> Option<PortInfo> {
        None
    }
}

/// tun_id 1 → output 1; tun_id 2 → set tun_id 0x99, output 2; anything
/// else from the tunnel port → output 3.
fn control() -> Control {
    let mut control = Control::new(Pipeline::new(1));
    let on = |id: u128| {
        let mut m = Match::ANY;
        m.set_exact(Field::InPort, u128::from(TUNNEL_PORT));
        m.set_exact(Field::TunnelId, id);
        m
    };
    let mut any = Match::ANY;
    any.set_exact(Field::InPort, u128::from(TUNNEL_PORT));
    let rules = [
        (20, on(1), vec![Action::output(PortNo(1))]),
        (
            20,
            on(2),
            vec![
                Action::SetField(Field::TunnelId, 0x99),
                Action::output(PortNo(2)),
            ],
        ),
        (10, any, vec![Action::output(PortNo(3))]),
    ];
    for (prio, m, actions) in rules {
        control
            .flow_mod(
                &FlowMod::add(0, prio, m, vec![Instruction::ApplyActions(actions)]),
                0,
            )
            .unwrap();
    }
    control.commit();
    control
}

/// What the rules say for a frame with metadata `id` (`None`: none).
fn reference(id: Option<u64>) -> (u32, u64) {
    match id {
        Some(1) => (1, 1),
        Some(2) => (2, 0x99),
        Some(other) => (3, other),
        None => (3, 0),
    }
}

proptest! {
    #[test]
    fn tunnel_ids_pick_rules_cached_or_not(
        ids in proptest::collection::vec(proptest::option::of(0u64..4), 1..64),
        cache in any::<bool>(),
    ) {
        let control = control();
        let mut w = control.worker(WorkerConfig {
            cache,
            check: cache,
            ..WorkerConfig::default()
        });
        // Every frame has the same bytes: only the metadata differs.
        let frame = frame4([10, 0, 0, 1], [10, 0, 0, 2], 64, 0)
            .udp(1000, 53)
            .payload(b"tunnelled")
            .build();
        let mut out = Outputs::default();
        // Two rounds, in batches of up to 8: the second is served from the
        // cache (when on) with the same answers.
        for _ in 0..2 {
            for chunk in ids.chunks(8) {
                let mut bufs: Vec<PacketBuf> = chunk
                    .iter()
                    .map(|&id| {
                        let mut b = PacketBuf::from_frame(&frame, 16);
                        b.set_tunnel_id(id);
                        b
                    })
                    .collect();
                w.process(&mut bufs, TUNNEL_PORT, &mut out);
            }
        }
        let want: Vec<(u32, u64)> = ids.iter().chain(&ids).map(|&id| reference(id)).collect();
        prop_assert_eq!(out.0, want);
        if cache {
            prop_assert!(w.stats().cache_hits >= ids.len() as u64);
        }
    }
}

#[test]
fn a_loaded_buffer_forgets_its_tunnel_id() {
    let mut b = PacketBuf::from_frame(&[0u8; 60], 16);
    b.set_tunnel_id(Some(5));
    b.load(&[1u8; 60]).unwrap();
    assert_eq!(b.tunnel_id(), None);
    // Decapsulation keeps a range of the frame.
    let mut b = PacketBuf::from_frame(&(0..80u8).collect::<Vec<_>>(), 0);
    assert!(b.keep(10..70));
    assert_eq!(b.frame(), &(10..70u8).collect::<Vec<_>>()[..]);
    assert!(!b.keep(0..61), "past the frame");
    assert_eq!(b.len(), 60);
}
