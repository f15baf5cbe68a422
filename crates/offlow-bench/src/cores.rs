//! How far apart the host put the two CPUs a two-core experiment runs on.
//!
//! On this kind of VM the host does not always put the two vCPUs on cores
//! that share an L3, and that decides how much a reader pays for the cache
//! lines a writer on the other CPU dirtied. In the minutes when a plain C
//! ping-pong (mean over 200,000 round trips, no `pause` in its spin) took
//! about 470 ns, TupleMerge readers kept 0.67–0.76 of their idle rate
//! under 1M updates/s; in minutes when it took about 100 ns, 0.92–0.97
//! (BENCHMARKS.md, "Where the host puts the two vCPUs"). The update
//! experiments measure the round trip before and after their phases, so a
//! figure carries the placement it was measured under. This probe reports
//! the fastest of a few blocks and spins with `pause`: it reads about 47 ns
//! where that C probe read about 110 (85 for its fastest block).
//!
//! Thread-safety: [`round_trip_ns`] runs its own two threads and shares
//! nothing with the caller's.

use std::hint::spin_loop;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use offlow_sync::CachePadded;

use crate::classify::pin_to_cpu;

/// Round trips per timed block.
const TRIPS: u64 = 2_000;
/// Timed blocks; the fastest is reported (a block the host interrupted
/// is slower, never faster).
const BLOCKS: usize = 5;
/// Give up after this long (CPUs that cannot both run at once).
const DEADLINE: Duration = Duration::from_secs(1);

/// The time for a cache line to go from CPU `a` to CPU `b` and back, in
/// nanoseconds: one thread pinned on each writes a counter the other waits
/// for. The fastest of a few blocks of round trips. `None` when either
/// thread cannot be pinned or the probe does not finish within a second.
pub fn round_trip_ns(a: usize, b: usize) -> Option<f64> {
    // The one line the two threads pass back and forth.
    let line = CachePadded(AtomicU64::new(0));
    let give_up = AtomicBool::new(false);
    let total = TRIPS * BLOCKS as u64;
    std::thread::scope(|s| {
        let answer = s.spawn(|| {
            if !pin_to_cpu(b) {
                give_up.store(true, Ordering::Relaxed);
                return;
            }
            for i in 0..total {
                // Odd values are the pinger's, even the answerer's.
                while line.0.load(Ordering::Acquire) != 2 * i + 1 {
                    if give_up.load(Ordering::Relaxed) {
                        return;
                    }
                    spin_loop();
                }
                line.0.store(2 * i + 2, Ordering::Release);
            }
        });
        let ping = s.spawn(|| {
            if !pin_to_cpu(a) {
                give_up.store(true, Ordering::Relaxed);
                return None;
            }
            let start = Instant::now();
            let mut best = f64::INFINITY;
            for block in 0..BLOCKS as u64 {
                let t = Instant::now();
                for i in block * TRIPS..(block + 1) * TRIPS {
                    line.0.store(2 * i + 1, Ordering::Release);
                    let mut spins = 0u32;
                    while line.0.load(Ordering::Acquire) != 2 * i + 2 {
                        spins = spins.wrapping_add(1);
                        // The clock is read rarely: a read per spin would
                        // add its own cost to every round trip.
                        if spins % 4096 == 0
                            && (give_up.load(Ordering::Relaxed) || start.elapsed() > DEADLINE)
                        {
                            give_up.store(true, Ordering::Relaxed);
                            return None;
                        }
                        spin_loop();
                    }
                }
                best = best.min(t.elapsed().as_secs_f64() * 1e9 / TRIPS as f64);
            }
            Some(best)
        });
        let ns = ping.join().ok().flatten();
        // The answerer returns once it sees `give_up` or has answered all.
        let _ = answer.join();
        ns
    })
}

/// One line for a text report: the round trip before and after.
pub fn describe(round_trip_ns: [Option<f64>; 2]) -> String {
    let ns =
        |x: Option<f64>| x.map_or_else(|| "not measured".to_string(), |x| format!("{x:.0} ns"));
    format!(
        "cache-line round trip CPU 0 <-> CPU 1: {} before, {} after\n",
        ns(round_trip_ns[0]),
        ns(round_trip_ns[1])
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_is_measured_between_two_cpus_and_refused_for_a_missing_one() {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        if cpus >= 2 {
            let ns = round_trip_ns(0, 1).expect("two CPUs: a round trip");
            // Bounds no real machine falls outside: a line transfer takes
            // more than a nanosecond and, over 2,000 trips, well under a ms.
            assert!(ns > 1.0 && ns < 1e6, "{ns} ns");
        }
        // No such CPU: the answerer cannot be pinned, so no figure.
        assert_eq!(round_trip_ns(0, libc::CPU_SETSIZE as usize + 1), None);
    }
}
