//! Quick timing of `execute`: set ipv4_dst + set tcp_dst + dec_ttl + output
//! on a 64-byte IPv4/TCP frame. Run with
//! `cargo run --release -p offlow-datapath --example exec_timing`.
//! Each iteration reloads the frame (a 64-byte copy, as a receive would)
//! so the TTL never expires; a second loop times the reload alone.

use offlow_datapath::{execute, ExecStats, OutputMeta, OutputSink, PacketBuf, PortInfo};
use offlow_flow::{extract, Field, ParseStats};
use offlow_pipeline::{Action, PacketInOrigin, PortNo};
use offlow_testkit::{Checksum, FrameBuilder};
use std::hint::black_box;
use std::time::Instant;

struct CountSink(u64);

impl OutputSink for CountSink {
    fn output(&mut self, port: u32, frame: &[u8], meta: OutputMeta) {
        self.0 += port as u64 + frame.len() as u64 + meta.final_view as u64;
    }
    fn controller(&mut self, _: &[u8], _: u16, _: PacketInOrigin, _: OutputMeta) {}
    fn port_count(&self) -> usize {
        0
    }
    fn port_info(&self, _index: usize) -> Option<PortInfo> {
        None
    }
}

/// 64 bytes: IPv4 total length 50 (20 + 20 TCP + 10 payload), TTL 64,
/// TCP 1234 -> 80 with no flags and checksum 0 (the executor updates it
/// incrementally whatever it holds).
fn frame64() -> Vec<u8> {
    FrameBuilder::eth([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2])
        .ident(1)
        .dont_frag()
        .tcp(1234, 80)
        .tcp_seq_ack(0, 0)
        .tcp_flags(0)
        .tcp_window(0)
        .l4_checksum(Checksum::Zero)
        .frame_len(64)
        .build()
}

fn main() {
    let frame = frame64();
    let parsed = extract(&frame, 1, &mut ParseStats::default());
    let actions = [
        Action::SetField(Field::Ipv4Dst, 0x0a00_0063),
        Action::SetField(Field::TcpDst, 8080),
        Action::DecNwTtl,
        Action::output(PortNo(2)),
    ];
    let mut buf = PacketBuf::new(64, 2048);
    let mut sink = CountSink(0);
    let mut stats = ExecStats::default();
    // Iterations per round (first argument); small values for callgrind.
    let n: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000_000);
    for round in 0..3 {
        let t = Instant::now();
        for _ in 0..n {
            let _ = buf.load(black_box(&frame));
            let mut lay = parsed.layout;
            let out = execute(
                black_box(&actions),
                &mut buf,
                &mut lay,
                1,
                &mut sink,
                &mut stats,
            );
            black_box(out);
        }
        let full = t.elapsed().as_nanos() as f64 / n as f64;
        let t = Instant::now();
        for _ in 0..n {
            let _ = buf.load(black_box(&frame));
            black_box(buf.frame());
        }
        let reload = t.elapsed().as_nanos() as f64 / n as f64;
        println!(
            "round {round}: load+execute {full:.2} ns/pkt, load alone {reload:.2} ns/pkt, execute ≈ {:.2} ns/pkt",
            full - reload
        );
    }
    assert_eq!(stats.total(), 0);
    black_box(sink.0);
}
