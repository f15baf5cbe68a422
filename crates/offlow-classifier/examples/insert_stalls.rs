//! The slowest single inserts while TupleMerge grows to N rules of the
//! shape `offlow bench control` streams (`ip,nw_dst=<distinct /32>`), on
//! one copy (a left-right pair pays each twice). A stall that grows with
//! the table (a container doubling by copy) shows as the slowest inserts
//! sitting at powers of two. Uses only the public API, so it also builds
//! against older versions of the classifier for A/B comparisons.
//!
//! Usage: `cargo run --release -p offlow-classifier --example
//! insert_stalls -- [N]` (default 200,000).

use std::time::Instant;

use offlow_classifier::{Classify, Field, Match, Rule, TupleMerge};

fn main() {
    let n: u32 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(200_000);
    let mut c = TupleMerge::new();
    let mut times: Vec<(u64, u32)> = Vec::with_capacity(n as usize);
    let start = Instant::now();
    for i in 0..n {
        let mut m = Match::ANY;
        m.set_exact(Field::EthType, 0x0800);
        m.set_prefix(Field::Ipv4Dst, (0x6440_0000 + i) as u128, 32);
        let rule = Rule::new(i, 100, m);
        let t = Instant::now();
        c.insert(rule);
        times.push((t.elapsed().as_nanos() as u64, i));
    }
    let total = start.elapsed();
    times.sort_unstable_by(|a, b| b.cmp(a));
    println!(
        "{n} inserts in {:.1} ms ({:.0} ns each)",
        total.as_secs_f64() * 1e3,
        total.as_nanos() as f64 / n as f64
    );
    for (ns, i) in times.iter().take(10) {
        println!("  {:8.3} ms at insert {i}", *ns as f64 / 1e6);
    }
}
