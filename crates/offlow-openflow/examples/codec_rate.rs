//! Decode and encode rate of typical messages (a flow-mod with a 5-field
//! match and three instructions, a packet-in with a 54-byte frame, a barrier).
//!
//! `cargo run --release -p offlow-openflow --example codec_rate`

use std::hint::black_box;
use std::time::Instant;

use offlow_flow::{Field, Match};
use offlow_openflow::*;

fn rate(name: &str, msg: &Message, iters: u32) {
    let bytes = encode_to_vec(msg).expect("sample encodes");
    let t = Instant::now();
    for _ in 0..iters {
        black_box(decode(black_box(&bytes)).expect("decodes"));
    }
    let dec = t.elapsed().as_nanos() as f64 / f64::from(iters);
    let mut out = Vec::with_capacity(bytes.len());
    let t = Instant::now();
    for _ in 0..iters {
        out.clear();
        encode(black_box(msg), &mut out).expect("encodes");
        black_box(&out);
    }
    let enc = t.elapsed().as_nanos() as f64 / f64::from(iters);
    println!(
        "{name:<10} {:>4} B  decode {dec:>7.1} ns/msg  encode {enc:>7.1} ns/msg",
        bytes.len()
    );
}

fn main() {
    let mut m = Match::ANY;
    m.set_exact(Field::InPort, 1)
        .set_exact(Field::EthType, 0x0800)
        .set_prefix(Field::Ipv4Dst, 0x0a00_0000, 24)
        .set_exact(Field::IpProto, 6)
        .set_exact(Field::TcpDst, 80);
    let fm = FlowMod::add(
        0,
        100,
        &m,
        vec![
            Instruction::ApplyActions(vec![
                Action::SetField(Field::EthDst, 0x0200_0000_0002),
                Action::DecNwTtl,
                Action::Output {
                    port: 2,
                    max_len: 0,
                },
            ]),
            Instruction::WriteMetadata {
                value: 0x10,
                mask: 0xff,
            },
            Instruction::GotoTable(1),
        ],
    );
    let pin = PacketIn {
        buffer_id: OFP_NO_BUFFER,
        total_len: 54,
        reason: 0,
        table_id: 0,
        cookie: 0,
        matcher: OxmMatch {
            fields: vec![Oxm::exact(Field::InPort, 1)],
        },
        data: vec![0x5a; 54],
    };
    let n = 200_000;
    rate("flow_mod", &Message::new(1, Body::FlowMod(fm)), n);
    rate("packet_in", &Message::new(2, Body::PacketIn(pin)), n);
    rate("barrier", &Message::new(3, Body::BarrierRequest), n);
}
