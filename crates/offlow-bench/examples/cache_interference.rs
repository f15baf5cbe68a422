//! How much does work on the other CPU slow a reader on this one, by kind
//! of work and by the size of the reader's working set? The question behind
//! the "lookups ≥ 95% of idle while updates stream in" goals: is the cost
//! the writer's CPU time (shared cores), or its memory traffic (shared
//! cache)?
//!
//! `cargo run --release -p offlow-bench --example cache_interference [ROUNDS]`
//!
//! The reader (CPU 1) does dependent random read-modify-writes in a table of
//! 256 KiB (fits its L2) or 4 MiB (lives in the shared L3); the other CPU
//! (CPU 0) either spins on `pause`, runs multiplies on registers only,
//! streams through 64 MiB, or does dependent random reads in 64 MiB. Each
//! line gives the reader's rate with that load beside its rate with the
//! other CPU spinning, measured right after, and their ratio.

use offlow_bench::classify::pin_to_cpu;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const SPIN: usize = 0;
const ALU: usize = 1;
const STREAM: usize = 2;
const RANDOM_READS: usize = 3;
const LOADS: [(&str, usize); 4] = [
    ("spins (pause)", SPIN),
    ("multiplies, registers only", ALU),
    ("streams 64 MiB", STREAM),
    ("random reads in 64 MiB", RANDOM_READS),
];

const LCG_MUL: u64 = 6_364_136_223_846_793_005;

/// The other CPU's load, switched by `mode` until `stop`.
fn other(mode: &AtomicUsize, stop: &AtomicBool) {
    pin_to_cpu(0);
    let big = vec![1u8; 64 << 20];
    let mut x = 1u64;
    while !stop.load(Ordering::Relaxed) {
        match mode.load(Ordering::Relaxed) {
            ALU => {
                for _ in 0..100_000 {
                    x = x
                        .wrapping_mul(LCG_MUL)
                        .wrapping_add(1_442_695_040_888_963_407);
                    x ^= x >> 17;
                }
            }
            STREAM => {
                for line in big.chunks(64) {
                    x = x.wrapping_add(u64::from(line[0]));
                }
            }
            RANDOM_READS => {
                for _ in 0..100_000 {
                    let at = ((x >> 20) as usize % (big.len() / 64)) * 64;
                    x = x.wrapping_add(u64::from(big[at])).wrapping_mul(LCG_MUL);
                }
            }
            _ => std::hint::spin_loop(),
        }
        black_box(x);
    }
}

/// Million reader steps per second over `secs`, in a table of `words`
/// 64-bit words (a power of two).
fn reader(table: &mut [u64], secs: f64) -> f64 {
    let mask = table.len() - 1;
    let mut x = 3u64;
    let mut steps = 0u64;
    let t0 = Instant::now();
    let len = Duration::from_secs_f64(secs);
    while t0.elapsed() < len {
        for _ in 0..10_000 {
            x = x
                .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                .wrapping_add(table[(x >> 40) as usize & mask]);
            table[(x >> 30) as usize & mask] = x;
        }
        steps += 10_000;
    }
    black_box(x);
    steps as f64 / t0.elapsed().as_secs_f64() / 1e6
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2);
    let mode = AtomicUsize::new(SPIN);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| other(&mode, &stop));
        if !pin_to_cpu(1) {
            eprintln!("could not pin the reader to CPU 1; figures are unreliable");
        }
        println!("| reader table | other CPU | reader M steps/s | with other spinning | ratio |");
        println!("|---|---|---|---|---|");
        for (label, words) in [("256 KiB (L2)", 32 << 10), ("4 MiB (L3)", 512 << 10)] {
            let mut table: Vec<u64> = (0..words as u64).map(|i| i * 7).collect();
            for _ in 0..rounds {
                for (name, load) in LOADS {
                    mode.store(load, Ordering::Relaxed);
                    reader(&mut table, 0.1);
                    let loaded = reader(&mut table, 0.5);
                    mode.store(SPIN, Ordering::Relaxed);
                    reader(&mut table, 0.1);
                    let idle = reader(&mut table, 0.5);
                    println!(
                        "| {label} | {name} | {loaded:.1} | {idle:.1} | {:.3} |",
                        loaded / idle
                    );
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
}
