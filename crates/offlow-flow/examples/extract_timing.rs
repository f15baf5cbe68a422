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
use offlow_testkit::{tcp_flags, FrameBuilder};
use std::hint::black_box;
use std::time::Instant;

/// A frame 02:00:00:00:00:02 -> 02:00:00:00:00:01 (headers and checksums
/// by `offlow_testkit`; the parsers read neither checksum).
fn frame() -> FrameBuilder {
    FrameBuilder::eth([0x02, 0, 0, 0, 0, 1], [0x02, 0, 0, 0, 0, 2])
}

fn main() {
    let iters: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000_000);
    // 64-byte IPv4/UDP frame (14 + 20 + 8 + 22 bytes of data).
    let (a1, a2) = ([10, 0, 0, 1], [10, 0, 0, 2]);
    let udp64 = frame()
        .ipv4(a1, a2)
        .dont_frag()
        .udp(12345, 53)
        .frame_len(64)
        .build();
    assert_eq!(udp64.len(), 64);
    // 802.1Q-tagged IPv4/TCP.
    let tagged = frame()
        .vlan(100, 0)
        .ipv4(a1, a2)
        .dont_frag()
        .tcp(12345, 80)
        .tcp_flags(tcp_flags::SYN)
        .build();
    // IPv6/TCP.
    let v6 = |last: u8| {
        let mut a = [0u8; 16];
        a[0] = 0x20;
        a[1] = 0x01;
        a[15] = last;
        a
    };
    let tcp6 = frame()
        .ipv6(v6(1), v6(2))
        .tcp(12345, 80)
        .tcp_flags(tcp_flags::SYN)
        .build();

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
            let b = frame()
                .ipv4(next().to_be_bytes(), next().to_be_bytes())
                .dont_frag();
            let ports = next();
            let (sport, dport) = ((ports >> 16) as u16, ports as u16);
            let b = match proto {
                6 => b.tcp(sport, dport),
                17 => b.udp(sport, dport),
                // ICMP and the rest: the port bytes first, as the bench's
                // frames of these protocols carry something there too.
                p => b.ip_payload(p).payload(&ports.to_be_bytes()),
            };
            b.frame_len(60).build()
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
