//! The slowest single ADDs, and the slowest groups of 100, while one
//! pipeline copy (`Pipeline::flow_mod`: prepare, match index, apply) grows
//! to N entries of the shape `offlow bench control` streams
//! (`ip,nw_dst=<distinct /32>`, table 1). A container doubling in one
//! insert shows as slow ADDs at a fixed fraction of a power of two
//! (5/8 for `IdTable`s, 7/8 for hashbrown maps, 1/2 for a TupleMerge
//! tuple's slots). A left-right pair pays each stall of the per-copy
//! structures twice. Uses only the public API, so it also builds against
//! older versions for A/B comparisons.
//!
//! Each ADD is timed in the thread's CPU time (page faults included), so
//! that being preempted by another process on a busy machine does not
//! show as a stall; the totals are wall time and the sum of those.
//!
//! Usage: `cargo run --release -p offlow-pipeline --example add_stalls --
//! [N]` (default 120,000).

use std::time::Instant;

/// This thread's CPU time, ns.
fn cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a
    // constant the kernel knows.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

use offlow_flow::{Field, Match};
use offlow_pipeline::*;

fn main() {
    let n: u32 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(120_000);
    let mut p = Pipeline::new(2);
    let mut times: Vec<(u64, u32)> = Vec::with_capacity(n as usize);
    let start = Instant::now();
    for i in 0..n {
        let mut m = Match::ANY;
        m.set_exact(Field::EthType, 0x0800).set_prefix(
            Field::Ipv4Dst,
            u128::from(0x6440_0000 + i),
            32,
        );
        let mut fm = FlowMod::new(FlowModCommand::Add, 1, 100, m);
        fm.instructions = vec![Instruction::ApplyActions(vec![Action::output(PortNo(2))])];
        let t = cpu_ns();
        if let Err(e) = p.flow_mod(&fm, 0) {
            eprintln!("ADD {i} failed: {e}");
        }
        times.push((cpu_ns() - t, i));
    }
    let total = start.elapsed();
    let cpu: u64 = times.iter().map(|t| t.0).sum();
    println!(
        "{n} ADDs in {:.1} ms ({:.0} ns each); CPU time {:.1} ms ({:.0} ns each)",
        total.as_secs_f64() * 1e3,
        total.as_nanos() as f64 / f64::from(n),
        cpu as f64 / 1e6,
        cpu as f64 / f64::from(n)
    );
    let mut groups: Vec<(u64, u32)> = times
        .chunks(100)
        .map(|c| (c.iter().map(|t| t.0).sum(), c[0].1))
        .collect();
    times.sort_unstable_by(|a, b| b.cmp(a));
    groups.sort_unstable_by(|a, b| b.cmp(a));
    println!("slowest ADDs:");
    for (ns, i) in times.iter().take(10) {
        println!("  {:8.3} ms at ADD {i}", *ns as f64 / 1e6);
    }
    println!("slowest groups of 100:");
    for (ns, i) in groups.iter().take(8) {
        println!("  {:8.3} ms after {i}", *ns as f64 / 1e6);
    }
}
