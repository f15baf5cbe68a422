//! Summary statistics of one configuration's round-trip times: mean,
//! sample standard deviation, min/max, nearest-rank percentiles, and the
//! processing delay Δt_proc = Δt_rtt − 2·Δt_prop − Δt_trans.
//!
//! Invariants: every figure is in nanoseconds; a summary of no sample is
//! `None` rather than zeros, so a configuration that lost every probe
//! never reports a latency.
//!
//! Thread-safety: plain functions over plain data.

use serde::Serialize;

/// What the round-trip times of one configuration summarise to (ns).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RttStats {
    /// Samples (received probes).
    pub n: usize,
    /// Arithmetic mean.
    pub mean: f64,
    /// Sample standard deviation (n − 1 in the denominator; 0 for n = 1).
    pub std: f64,
    /// Smallest sample.
    pub min: f64,
    /// Largest sample.
    pub max: f64,
    /// Nearest-rank median.
    pub p50: f64,
    /// Nearest-rank 99th percentile.
    pub p99: f64,
    /// Nearest-rank 99.9th percentile.
    pub p999: f64,
}

/// Nearest-rank percentile `p` (0..=100) of `sorted` (ascending): the
/// smallest sample with at least p % of the samples at or below it.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    // In integers (p in thousandths of a percent): 99.9 % of 1000 samples
    // is rank 999 exactly, where floating point gives 999.0000000000001
    // and a ceiling of 1000.
    let p_milli = (p.clamp(0.0, 100.0) * 1000.0).round() as u128;
    let n = sorted.len() as u128;
    let rank = (p_milli * n).div_ceil(100_000) as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

impl RttStats {
    /// Summarise `samples` (any order); `None` when empty.
    pub fn of(samples: &[f64]) -> Option<RttStats> {
        if samples.is_empty() {
            return None;
        }
        let mut v = samples.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let mean = v.iter().sum::<f64>() / n as f64;
        // Two passes (mean, then squared deviations): no cancellation from
        // subtracting two large sums, which single-pass formulas suffer
        // with nanosecond samples around 10^5.
        let std = if n > 1 {
            (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
        } else {
            0.0
        };
        // `v` is non-empty: every percentile exists.
        let pct = |p| percentile(&v, p).unwrap_or(f64::NAN);
        Some(RttStats {
            n,
            mean,
            std,
            min: v[0],
            max: v[n - 1],
            p50: pct(50.0),
            p99: pct(99.0),
            p999: pct(99.9),
        })
    }
}

/// Δt_proc = Δt_rtt − 2·Δt_prop − Δt_trans.
pub fn processing_delay(rtt: f64, prop: f64, trans: f64) -> f64 {
    rtt - 2.0 * prop - trans
}

/// Δt_proc when the baseline's round trip stands for 2·Δt_prop + Δt_trans
/// (what this experiment does on veths, where neither term can be
/// computed from a cable length and a line rate): the baseline's RTT is
/// split as prop = rtt/2, trans = 0, which gives `rtt − baseline`.
pub fn processing_delay_vs_baseline(rtt: f64, baseline_rtt: f64) -> f64 {
    processing_delay(rtt, baseline_rtt / 2.0, 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The textbook definitions, written as plainly as possible.
    fn reference(v: &[f64]) -> (f64, f64) {
        let n = v.len() as f64;
        let mean = v.iter().sum::<f64>() / n;
        let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1.0);
        (mean, var.sqrt())
    }

    /// Nearest rank by counting: the smallest sample x with
    /// #{y <= x} >= p% of n.
    fn reference_percentile(v: &[f64], p: f64) -> f64 {
        let mut s = v.to_vec();
        s.sort_by(f64::total_cmp);
        let p_milli = (p * 1000.0).round() as usize;
        for &x in &s {
            let at_or_below = s.iter().filter(|&&y| y <= x).count();
            if at_or_below * 100_000 >= p_milli * s.len() {
                return x;
            }
        }
        s[s.len() - 1]
    }

    #[test]
    fn known_values() {
        // 1..=10: mean 5.5, sample std sqrt(55/6), p50 5, p99 10.
        let v: Vec<f64> = (1..=10).rev().map(f64::from).collect();
        let s = RttStats::of(&v).unwrap();
        assert_eq!(s.n, 10);
        assert_eq!(s.mean, 5.5);
        assert!((s.std - (55.0f64 / 6.0).sqrt()).abs() < 1e-12);
        assert_eq!((s.min, s.max), (1.0, 10.0));
        assert_eq!((s.p50, s.p99, s.p999), (5.0, 10.0, 10.0));
        // 1000 samples 1..=1000: p99.9 is the 999th.
        let v: Vec<f64> = (1..=1000).map(f64::from).collect();
        let s = RttStats::of(&v).unwrap();
        assert_eq!((s.p50, s.p99, s.p999), (500.0, 990.0, 999.0));
    }

    #[test]
    fn empty_and_single() {
        assert!(RttStats::of(&[]).is_none());
        assert!(percentile(&[], 50.0).is_none());
        let s = RttStats::of(&[42.0]).unwrap();
        assert_eq!((s.mean, s.std, s.p50, s.p999), (42.0, 0.0, 42.0, 42.0));
    }

    #[test]
    fn matches_reference_on_pseudo_random_samples() {
        // A small LCG: deterministic samples around 10^5 ns, like RTTs.
        let mut x: u64 = 12345;
        for len in [2usize, 3, 7, 100, 999, 1001] {
            let v: Vec<f64> = (0..len)
                .map(|_| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    50_000.0 + (x >> 40) as f64 / 100.0
                })
                .collect();
            let s = RttStats::of(&v).unwrap();
            let (mean, std) = reference(&v);
            assert!((s.mean - mean).abs() < 1e-6, "mean, len {len}");
            assert!((s.std - std).abs() < 1e-6, "std, len {len}");
            for (p, got) in [(50.0, s.p50), (99.0, s.p99), (99.9, s.p999)] {
                assert_eq!(got, reference_percentile(&v, p), "p{p}, len {len}");
            }
        }
    }

    #[test]
    fn processing_delay_subtracts_propagation_twice() {
        assert_eq!(processing_delay(100.0, 20.0, 10.0), 50.0);
        assert_eq!(processing_delay_vs_baseline(100.0, 40.0), 60.0);
        assert_eq!(processing_delay_vs_baseline(40.0, 40.0), 0.0);
    }
}
