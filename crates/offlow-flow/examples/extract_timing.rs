//! Wall-clock timing of `extract_to` (fast path for the common frame, then
//! the general parser) and of `extract_to_general` alone, on a few frame
//! shapes and on a mix shaped like `offlow bench datapath --workload acl`'s
//! frames (60-byte Ethernet/IPv4/TCP or UDP, many flows). No criterion: a
//! throwaway figure for reports. Run in release:
//!
//! ```text
//! cargo run --release -p offlow-flow --example extract_timing [ITERATIONS]
//! ```
use offlow_flow::{extract_to, extract_to_general, FlowKey, Layout, ParseStats};
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

    // The acl bench's shape: 60 bytes, IPv4 total length 46 (the padding
    // counts as payload), DF; the protocol drawn as in the distinct flows of
    // ClassBench acl1_trace (76% TCP, 9% 255, 9% 0, 4% ICMP, 1% UDP) so the
    // protocol branch is as (un)predictable as in the bench; addresses and
    // ports from a small LCG; 4,096 distinct frames visited in order.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 32) as u32
    };
    let mix: Vec<Vec<u8>> = (0..4096)
        .map(|_| {
            let proto = match next() % 100 {
                0..76 => 6u8,
                76..85 => 255,
                85..94 => 0,
                94..99 => 1,
                _ => 17,
            };
            let mut ip = vec![0x45, 0, 0, 46, 0, 0, 0x40, 0, 64, proto, 0, 0];
            ip.extend_from_slice(&next().to_be_bytes());
            ip.extend_from_slice(&next().to_be_bytes());
            ip.extend_from_slice(&next().to_be_bytes()); // ports
            match proto {
                6 => ip.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x10, 0xff, 0xff]),
                17 => ip.extend_from_slice(&[0, 26, 0, 0]),
                _ => {}
            }
            ip.resize(46, 0);
            frame(0x0800, &ip)
        })
        .collect();
    assert!(mix.iter().all(|f| f.len() == 60));

    type Parser = fn(&[u8], u32, &mut FlowKey, &mut Layout, &mut ParseStats);
    let parsers: [(&str, Parser); 2] =
        [("extract_to", extract_to), ("general", extract_to_general)];
    let shapes: [(&str, &[Vec<u8>]); 4] = [
        ("ipv4/udp 64B", std::slice::from_ref(&udp64)),
        ("vlan/ipv4/tcp", std::slice::from_ref(&tagged)),
        ("ipv6/tcp", std::slice::from_ref(&tcp6)),
        ("acl-like mix", &mix),
    ];
    for (name, frames) in shapes {
        for (pname, parse) in parsers {
            let mut stats = ParseStats::default();
            let mut key = FlowKey::ZERO;
            let mut lay = Layout::default();
            let mut acc = 0u64;
            let n = frames.len() as u64;
            let t = Instant::now();
            for i in 0..iters {
                // `n` is a power of two or 1 for every shape above.
                let f = &frames[(i & (n - 1)) as usize];
                parse(
                    black_box(f),
                    black_box(i as u32),
                    &mut key,
                    &mut lay,
                    &mut stats,
                );
                acc = acc
                    .wrapping_add(key.words[5])
                    .wrapping_add(key.words[6])
                    .wrapping_add(lay.l4 as u64);
            }
            let ns = t.elapsed().as_nanos() as f64 / iters as f64;
            println!(
                "{name:>14} {pname:>10}: {ns:.2} ns/packet over {iters} packets (checksum {acc:#x})"
            );
            black_box(acc);
        }
    }
}
