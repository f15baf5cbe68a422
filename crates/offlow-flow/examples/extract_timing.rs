//! Wall-clock timing of `extract` on a few frame shapes (no criterion: a
//! throwaway figure for reports). Run in release:
//!
//! ```text
//! cargo run --release -p offlow-flow --example extract_timing [ITERATIONS]
//! ```
use offlow_flow::{extract_into, FlowKey, ParseStats};
use std::hint::black_box;
use std::time::Instant;

fn frame(ethertype: u16, l3: &[u8]) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(l3);
    f
}

fn main() {
    let iters: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000_000);
    // 64-byte IPv4/UDP frame (14 + 20 + 8 + 22 bytes of data).
    let mut ip4 = vec![
        0x45, 0, 0, 50, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ];
    ip4.extend_from_slice(&[0x30, 0x39, 0x00, 0x35, 0, 30, 0, 0]);
    ip4.extend_from_slice(&[0u8; 22]);
    let udp64 = frame(0x0800, &ip4);
    assert_eq!(udp64.len(), 64);
    // 802.1Q-tagged IPv4/TCP.
    let mut tagged = vec![
        0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x81, 0, 0, 100, 8, 0,
    ];
    let mut ip4t = vec![
        0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ];
    ip4t.extend_from_slice(&[
        0x30, 0x39, 0, 80, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 2, 0xff, 0xff, 0, 0, 0, 0,
    ]);
    tagged.extend_from_slice(&ip4t);
    // IPv6/TCP.
    let mut ip6 = vec![0x60, 0, 0, 0, 0, 20, 6, 64];
    ip6.extend_from_slice(&[0x20, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    ip6.extend_from_slice(&[0x20, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    ip6.extend_from_slice(&[
        0x30, 0x39, 0, 80, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 2, 0xff, 0xff, 0, 0, 0, 0,
    ]);
    let tcp6 = frame(0x86dd, &ip6);

    for (name, f) in [
        ("ipv4/udp 64B", &udp64),
        ("vlan/ipv4/tcp", &tagged),
        ("ipv6/tcp", &tcp6),
    ] {
        let mut stats = ParseStats::default();
        let mut key = FlowKey::ZERO;
        let mut acc = 0u64;
        let t = Instant::now();
        for i in 0..iters {
            let lay = extract_into(black_box(f), black_box(i as u32), &mut key, &mut stats);
            acc = acc.wrapping_add(key.words[6]).wrapping_add(lay.l4 as u64);
        }
        let ns = t.elapsed().as_nanos() as f64 / iters as f64;
        println!("{name:>14}: {ns:.2} ns/packet over {iters} packets (checksum {acc:#x})");
        black_box(acc);
    }
}
