//! Meters on the data path (OpenFlow 1.3.5 §5.7): a worker with its cache
//! on meters a flow's packets through the meter table of the version it
//! runs, at the time it is given (a synthetic clock here). Offered twice a
//! band's rate, the band's rate (plus its burst) passes, with exact
//! counters (passed + dropped = offered; meter, flow and worker counters
//! agree); a DSCP_REMARK band rewrites the DSCP with checksums kept right;
//! a METER MODIFY reaches the cached flow at the commit; a METER DELETE
//! removes the flows that use the meter; METER_MOD and Meter instruction
//! refusals carry the spec's codes.

mod common;

use common::{dst_match, frame4, frame6, parse, verify_checksums, FrameSink};
use offlow_datapath::{Control, PacketBuf, Worker, WorkerConfig};
use offlow_flow::Field;
use offlow_openflow::meter::{meter_command, meter_flags, meter_id};
use offlow_openflow::{MeterBand, MeterBandKind, MeterMod, MeterModFailedCode};
use offlow_pipeline::*;

const IN_PORT: u32 = 7;
const OUT: u32 = 2;
const MS: u64 = 1_000_000;

/// Where each copy went and what it held.
type Sink = FrameSink;

/// A UDP frame to 10.0.0.`dst` with TOS byte `tos`, padded to `len` bytes.
fn frame(dst: u8, tos: u8, len: usize) -> Vec<u8> {
    let mut f = frame4([10, 0, 0, 1], [10, 0, 0, dst], 64, tos)
        .udp(1000, 53)
        .payload(b"meter me")
        .build();
    if f.len() < len {
        // Rebuild with a payload that brings the frame to `len`.
        let pad = vec![0u8; 8 + len - f.len()];
        f = frame4([10, 0, 0, 1], [10, 0, 0, dst], 64, tos)
            .udp(1000, 53)
            .payload(&pad)
            .build();
    }
    f
}

fn meter_mod(command: u16, id: u32, flags: u16, bands: Vec<MeterBand>) -> MeterMod {
    MeterMod {
        command,
        flags,
        meter_id: id,
        bands,
    }
}

fn drop_band(rate: u32, burst_size: u32) -> MeterBand {
    MeterBand {
        kind: MeterBandKind::Drop,
        rate,
        burst_size,
    }
}

fn remark_band(rate: u32, burst_size: u32, prec_level: u8) -> MeterBand {
    MeterBand {
        kind: MeterBandKind::DscpRemark { prec_level },
        rate,
        burst_size,
    }
}

/// A flow to 10.0.0.`dst` metered by `meter`, then output to [`OUT`].
fn metered_flow(dst: u8, meter: u32) -> FlowMod {
    FlowMod::add(
        0,
        10,
        dst_match(dst),
        vec![
            Instruction::Meter(meter),
            Instruction::ApplyActions(vec![Action::output(PortNo(OUT))]),
        ],
    )
}

fn worker(control: &Control) -> Worker {
    control.worker(WorkerConfig {
        cache: true,
        check: true,
        ..WorkerConfig::default()
    })
}

fn run_at(w: &mut Worker, frames: &[Vec<u8>], now_ns: u64) -> Sink {
    let mut bufs: Vec<PacketBuf> = frames
        .iter()
        .map(|f| PacketBuf::from_frame(f, 16))
        .collect();
    let mut sink = Sink::default();
    w.process_at(&mut bufs, IN_PORT, &mut sink, now_ns);
    sink
}

/// Offer `per_ms` frames every millisecond for `ms` milliseconds starting
/// at `start`; the number of frames that came out.
fn offer(w: &mut Worker, f: &[u8], per_ms: usize, ms: u64, start: u64) -> usize {
    let batch: Vec<Vec<u8>> = vec![f.to_vec(); per_ms];
    (0..ms)
        .map(|t| run_at(w, &batch, start + t * MS).sent.len())
        .sum()
}

/// Check what the meter, the flow, the worker and the sink say about one
/// run agree: every offered packet entered the meter and matched the flow;
/// passed + band-dropped = offered.
fn check_exact(control: &Control, w: &mut Worker, id: u32, offered: u64, passed: u64) {
    w.flush_counters();
    let m = control.pipeline().meters().get(id).unwrap().clone();
    let st = m.stats(id, 0);
    assert_eq!(
        st.packet_in_count, offered,
        "every packet entered the meter"
    );
    assert_eq!(
        passed + st.band_stats[0].packet_band_count,
        offered,
        "passed + dropped = offered"
    );
    assert_eq!(w.stats().drop_meter, st.band_stats[0].packet_band_count);
    assert_eq!(
        w.exec_stats().meter_dropped,
        st.band_stats[0].packet_band_count
    );
    let flows = control.pipeline().dump(&FlowFilter::all());
    assert_eq!(flows.len(), 1);
    assert_eq!(
        flows[0].packets, offered,
        "the flow counts dropped packets too"
    );
    assert_eq!(st.byte_in_count, flows[0].bytes);
}

#[test]
fn twice_the_band_passes_the_band_pktps() {
    let mut control = Control::new(Pipeline::new(1));
    // 1,000 packets/s, a burst of 10.
    let flags = meter_flags::PKTPS | meter_flags::BURST | meter_flags::STATS;
    control
        .meter_mod(
            &meter_mod(meter_command::ADD, 1, flags, vec![drop_band(1000, 10)]),
            0,
        )
        .unwrap();
    control.flow_mod(&metered_flow(5, 1), 0).unwrap();
    control.commit();
    let mut w = worker(&control);
    let f = frame(5, 0, 64);
    // 2 packets per ms for 2 s: 4,000 offered at 2,000 packets/s.
    let passed = offer(&mut w, &f, 2, 2000, MS) as u64;
    // The bucket starts full (10) and earns 1 packet per ms.
    assert!((2000..=2010).contains(&passed), "passed {passed} of 4000");
    assert!(w.stats().cache_hits >= 3990, "metered on the fast path");
    assert_eq!(w.stats().stale, 0);
    check_exact(&control, &mut w, 1, 4000, passed);
    assert_eq!(control.pipeline().meter_flow_count(1), 1);
}

#[test]
fn twice_the_band_passes_the_band_kbps() {
    let mut control = Control::new(Pipeline::new(1));
    let f = frame(5, 0, 125);
    assert_eq!(f.len(), 125, "1,000 bits a frame");
    // 1,000 kbit/s = 1,000 frames of 125 bytes a second; 20 kbit burst.
    let flags = meter_flags::KBPS | meter_flags::BURST;
    control
        .meter_mod(
            &meter_mod(meter_command::ADD, 1, flags, vec![drop_band(1000, 20)]),
            0,
        )
        .unwrap();
    control.flow_mod(&metered_flow(5, 1), 0).unwrap();
    control.commit();
    let mut w = worker(&control);
    let passed = offer(&mut w, &f, 2, 1000, MS) as u64;
    assert!((1000..=1020).contains(&passed), "passed {passed} of 2000");
    check_exact(&control, &mut w, 1, 2000, passed);
    // Below the band nothing is dropped.
    let before = w.stats().drop_meter;
    let half = offer(&mut w, &f, 1, 1000, 2000 * MS);
    let again = offer(&mut w, &f, 1, 1000, 3000 * MS);
    assert_eq!(half + again, 2000);
    assert_eq!(w.stats().drop_meter, before);
}

/// The DSCP an IPv4 or IPv6 frame carries.
fn dscp(frame: &[u8]) -> u128 {
    parse(frame).key.get(Field::IpDscp)
}

#[test]
fn a_remark_band_raises_the_drop_precedence_with_valid_checksums() {
    let mut control = Control::new(Pipeline::new(1));
    // 1 packet/s, burst 1: the first packet conforms, the rest exceed.
    let flags = meter_flags::PKTPS | meter_flags::BURST;
    control
        .meter_mod(
            &meter_mod(meter_command::ADD, 1, flags, vec![remark_band(1, 1, 1)]),
            0,
        )
        .unwrap();
    control.flow_mod(&metered_flow(5, 1), 0).unwrap();
    let v6 = FlowMod::add(
        0,
        10,
        {
            let mut m = offlow_flow::Match::ANY;
            m.set_exact(Field::EthType, 0x86dd);
            m
        },
        vec![
            Instruction::Meter(1),
            Instruction::ApplyActions(vec![Action::output(PortNo(OUT))]),
        ],
    );
    control.flow_mod(&v6, 0).unwrap();
    control.commit();
    let mut w = worker(&control);
    // AF11 (DSCP 10) with ECN 01: remarked to AF12 (12), ECN kept.
    let af11 = frame(5, 10 << 2 | 1, 64);
    let sink = run_at(&mut w, &[af11.clone(), af11.clone(), af11.clone()], MS);
    assert_eq!(sink.sent.len(), 3, "a remark band drops nothing");
    assert_eq!(sink.sent[0].1, af11, "the first packet conforms");
    for (_, out) in &sink.sent[1..] {
        assert_eq!(dscp(out), 12, "AF11 + 1 = AF12");
        assert_eq!(out[15] & 3, 1, "ECN kept");
        verify_checksums(out).expect("IPv4 and UDP checksums valid");
    }
    // EF (46) has no drop precedence: the band applies, the DSCP stays.
    let ef = frame(5, 46 << 2, 64);
    let sink = run_at(&mut w, std::slice::from_ref(&ef), 2 * MS);
    assert_eq!(sink.sent[0].1, ef);
    // IPv6: AF21 (18) + 1 → AF22 (20) in the traffic class.
    let six = frame6([1; 16], [2; 16], 64, 18 << 2, 0x12345)
        .udp(1000, 53)
        .payload(b"meter me")
        .build();
    let sink = run_at(&mut w, &[six.clone(), six], 3 * MS);
    assert_eq!(sink.sent.len(), 2);
    assert_eq!(dscp(&sink.sent[1].1), 20);
    verify_checksums(&sink.sent[1].1).expect("UDP checksum valid");
    assert_eq!(parse(&sink.sent[1].1).key.get(Field::Ipv6Flabel), 0x12345);
    assert_eq!(w.exec_stats().meter_remarked, 5, "{:?}", w.exec_stats());
    let st = control.pipeline().meters().get(1).unwrap().stats(1, 0);
    assert_eq!(
        (st.packet_in_count, st.band_stats[0].packet_band_count),
        (6, 5)
    );
}

#[test]
fn a_modify_reaches_the_cached_flow_at_the_commit() {
    let mut control = Control::new(Pipeline::new(1));
    let flags = meter_flags::PKTPS | meter_flags::BURST;
    control
        .meter_mod(
            &meter_mod(meter_command::ADD, 1, flags, vec![drop_band(1, 1)]),
            0,
        )
        .unwrap();
    control.flow_mod(&metered_flow(5, 1), 0).unwrap();
    control.commit();
    let mut w = worker(&control);
    let ten = vec![frame(5, 0, 64); 10];
    assert_eq!(run_at(&mut w, &ten, MS).sent.len(), 1, "burst of one");
    assert_eq!(run_at(&mut w, &ten, 2 * MS).sent.len(), 0);
    let wide = meter_mod(
        meter_command::MODIFY,
        1,
        flags,
        vec![drop_band(1_000_000, 1000)],
    );
    control.meter_mod(&wide, 3 * MS).unwrap();
    assert_eq!(
        run_at(&mut w, &ten, 3 * MS).sent.len(),
        0,
        "not before the commit"
    );
    control.commit();
    assert_eq!(run_at(&mut w, &ten, 4 * MS).sent.len(), 10, "at the commit");
    assert!(w.stats().cache_hits >= 30, "the cached decision stayed");
    // A MODIFY starts the counters afresh and keeps the duration (as
    // Open vSwitch 3.1).
    let st = control.pipeline().meters().get(1).unwrap().stats(1, 4 * MS);
    assert_eq!(st.packet_in_count, 10);
    assert_eq!((st.duration_sec, st.duration_nsec), (0, 4_000_000));
}

#[test]
fn a_delete_removes_the_flows_using_the_meter() {
    let mut control = Control::new(Pipeline::new(1));
    let flags = meter_flags::PKTPS;
    for id in [1, 2] {
        control
            .meter_mod(
                &meter_mod(meter_command::ADD, id, flags, vec![drop_band(1000, 0)]),
                0,
            )
            .unwrap();
    }
    control.flow_mod(&metered_flow(5, 1), 0).unwrap();
    control.flow_mod(&metered_flow(6, 2), 0).unwrap();
    control
        .flow_mod(
            &FlowMod::add(
                0,
                10,
                dst_match(7),
                vec![Instruction::ApplyActions(vec![Action::output(PortNo(9))])],
            ),
            0,
        )
        .unwrap();
    control.commit();
    assert_eq!(control.pipeline().meter_flow_count(1), 1);
    let mut w = worker(&control);
    let f = vec![frame(5, 0, 64), frame(6, 0, 64), frame(7, 0, 64)];
    let ports = |s: Sink| s.sent.iter().map(|s| s.0).collect::<Vec<_>>();
    assert_eq!(ports(run_at(&mut w, &f, MS)), [OUT, OUT, 9]);
    let effect = control
        .meter_mod(&meter_mod(meter_command::DELETE, 1, 0, vec![]), 0)
        .unwrap();
    assert_eq!(effect.removed.len(), 1);
    assert_eq!(effect.removed[0].program.meter, Some(1));
    assert_eq!(
        ports(run_at(&mut w, &f, 2 * MS)),
        [OUT, OUT, 9],
        "not before the commit"
    );
    control.commit();
    assert_eq!(ports(run_at(&mut w, &f, 3 * MS)), [OUT, 9]);
    assert!(control.pipeline().meters().get(1).is_none());
    // OFPM_ALL deletes every meter and every metered flow.
    let effect = control
        .meter_mod(
            &meter_mod(meter_command::DELETE, meter_id::ALL, 0, vec![]),
            0,
        )
        .unwrap();
    assert_eq!(effect.removed.len(), 1);
    control.commit();
    assert_eq!(ports(run_at(&mut w, &f, 4 * MS)), [9]);
    assert!(control.pipeline().meters().is_empty());
    assert_eq!(control.pipeline().len(), 1);
}

#[test]
fn meter_mod_and_meter_instruction_codes() {
    use meter_command::{ADD, DELETE, MODIFY};
    use MeterModFailedCode as C;
    let mut control = Control::new(Pipeline::new(1));
    let band = || vec![drop_band(10, 0)];
    let mut mm = |command, id, flags| control.meter_mod(&meter_mod(command, id, flags, band()), 0);
    let k = meter_flags::KBPS;
    assert!(mm(ADD, 1, k).is_ok());
    assert_eq!(mm(ADD, 1, k).unwrap_err(), C::MeterExists);
    assert_eq!(mm(MODIFY, 2, k).unwrap_err(), C::UnknownMeter);
    assert!(mm(MODIFY, 1, k).is_ok());
    for id in [
        0,
        meter_id::MAX + 1,
        meter_id::SLOWPATH,
        meter_id::CONTROLLER,
    ] {
        assert_eq!(mm(ADD, id, k).unwrap_err(), C::InvalidMeter, "add {id:#x}");
        assert_eq!(mm(MODIFY, id, k).unwrap_err(), C::InvalidMeter);
    }
    assert_eq!(mm(ADD, meter_id::ALL, k).unwrap_err(), C::InvalidMeter);
    assert_eq!(mm(DELETE, 0, k).unwrap_err(), C::InvalidMeter);
    assert!(
        mm(DELETE, 9, k).is_ok(),
        "deleting an absent meter is no error"
    );
    assert_eq!(mm(7, 1, k).unwrap_err(), C::BadCommand);
    assert_eq!(
        mm(ADD, 3, 0).unwrap_err(),
        C::BadFlags,
        "the config's codes"
    );
    assert!(mm(ADD, meter_id::MAX, k).is_ok());
    // A flow naming an absent meter: OFPET_METER_MOD_FAILED/INVALID_METER,
    // as Open vSwitch 3.1 answers.
    let e = control.flow_mod(&metered_flow(5, 2), 0).unwrap_err();
    assert_eq!(e.of_error().wire(), (12, 2));
    let e = control.flow_mod(&metered_flow(5, 0), 0).unwrap_err();
    assert_eq!(e.of_error().wire(), (12, 2));
    control.flow_mod(&metered_flow(5, 1), 0).unwrap();
}

/// §5.9: the meter runs first in its table's instruction set, before that
/// table's Apply-Actions and after the earlier tables'; a dump shows the
/// instruction as written.
#[test]
fn the_meter_runs_where_its_instruction_is() {
    let mut control = Control::new(Pipeline::new(2));
    control
        .meter_mod(
            &meter_mod(
                meter_command::ADD,
                4,
                meter_flags::PKTPS,
                vec![drop_band(10, 0)],
            ),
            0,
        )
        .unwrap();
    let t0 = FlowMod::add(
        0,
        10,
        dst_match(5),
        vec![
            Instruction::ApplyActions(vec![Action::SetField(Field::IpDscp, 1)]),
            Instruction::GotoTable(1),
        ],
    );
    let instructions = vec![
        Instruction::ApplyActions(vec![Action::SetField(Field::IpDscp, 2)]),
        Instruction::WriteActions(vec![Action::output(PortNo(OUT))]),
        Instruction::Meter(4),
    ];
    let t1 = FlowMod::add(1, 10, dst_match(5), instructions.clone());
    control.flow_mod(&t0, 0).unwrap();
    control.flow_mod(&t1, 0).unwrap();
    control.commit();
    let key = parse(&frame(5, 0, 64)).key;
    let res = control.pipeline().lookup(&key);
    assert_eq!(
        res.actions,
        [
            Action::SetField(Field::IpDscp, 1),
            Action::Meter(4),
            Action::SetField(Field::IpDscp, 2),
            Action::output(PortNo(OUT)),
        ]
    );
    let dumped = control.pipeline().dump(&FlowFilter::table(1));
    assert_eq!(dumped[0].instructions, instructions);
}

/// Two workers on their own threads share one meter (its buckets are
/// atomics, no lock): every packet is either passed or dropped by the band
/// (exact counters), and together they pass no more than the bucket holds
/// plus what the rate earned over the run.
#[test]
fn workers_on_two_threads_share_one_meter_exactly() {
    let mut control = Control::new(Pipeline::new(1));
    let flags = meter_flags::PKTPS | meter_flags::BURST;
    control
        .meter_mod(
            &meter_mod(meter_command::ADD, 1, flags, vec![drop_band(1000, 50)]),
            0,
        )
        .unwrap();
    control.flow_mod(&metered_flow(5, 1), 0).unwrap();
    control.commit();
    let f = frame(5, 0, 64);
    // Each offers 4 packets per ms for 500 ms: 4,000 in all, 4x the band.
    let handles: Vec<_> = (0..2)
        .map(|_| {
            let mut w = worker(&control);
            let f = f.clone();
            std::thread::spawn(move || {
                let passed = offer(&mut w, &f, 4, 500, MS) as u64;
                w.flush_counters();
                (passed, w.stats().drop_meter)
            })
        })
        .collect();
    let (passed, dropped) = handles
        .into_iter()
        .map(|h| h.join().unwrap())
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    assert_eq!(passed + dropped, 4000, "every packet passed or dropped");
    // Bucket 50 + 1 packet per ms over the 499 ms after the first batch.
    assert!(passed <= 50 + 500, "passed {passed}");
    assert!(passed >= 500, "passed {passed}");
    let st = control.pipeline().meters().get(1).unwrap().stats(1, 0);
    assert_eq!(st.packet_in_count, 4000);
    assert_eq!(st.band_stats[0].packet_band_count, dropped);
}
