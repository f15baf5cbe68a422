//! Reading one run against issue 23's goals: each switch's rows paired
//! with its same-run anchor ([`SwitchKind::anchor`]), configuration by
//! configuration, and summarised per switch and sweep; the tails of each
//! switch and sweep; and how the mean moves with table size.
//!
//! Pairing: a row and its anchor's row of the same sweep with the same
//! frame size, tuple, entries and load. The offloaded rows are read
//! against the Linux bridge's row of the same configuration where the
//! bridge has one (frame sizes, load), else against its unloaded row of the
//! same frame size (the Δt_proc baseline: the bridge has no tables).
//!
//! Invariants: a ratio is only formed from two measured figures with a
//! positive denominator; a configuration that failed, or whose anchor did
//! not run, counts in neither the numerator nor the denominator of "met".
//!
//! Thread-safety: plain functions over a finished report.

use super::{ConfigResult, LatencyReport, Sweep, SwitchKind};

/// One switch's figures over one sweep (or over every sweep: `sweep`
/// `None`), in ns.
#[derive(Debug, Clone)]
pub struct SwitchSummary {
    /// Which switch.
    pub switch: SwitchKind,
    /// Which sweep, `None` for all of them.
    pub sweep: Option<Sweep>,
    /// Configurations measured.
    pub configs: usize,
    /// Median over the configurations of the mean Δt_proc.
    pub proc_mean: Option<f64>,
    /// Smallest and largest mean Δt_proc.
    pub proc_range: Option<(f64, f64)>,
    /// Median over the configurations of the RTT's standard deviation
    /// (Δt_proc's: the baseline is a constant).
    pub std: Option<f64>,
    /// The anchor and the goal's ratio.
    pub anchor: Option<(SwitchKind, f64)>,
    /// Median over paired configurations of the mean ratio (Δt_proc, or
    /// RTT against the bridge).
    pub mean_ratio: Option<f64>,
    /// Median over paired configurations of the std ratio (Open vSwitch
    /// anchors only).
    pub std_ratio: Option<f64>,
    /// Configurations meeting the mean goal, of those paired.
    pub mean_met: (usize, usize),
    /// Configurations meeting the std goal, of those paired.
    pub std_met: (usize, usize),
}

/// One switch's tails over one sweep, in ns.
#[derive(Debug, Clone)]
pub struct TailSummary {
    /// Which switch.
    pub switch: SwitchKind,
    /// Which sweep.
    pub sweep: Sweep,
    /// Medians over the configurations of p50, p99 and p99.9.
    pub p50: f64,
    /// See `p50`.
    pub p99: f64,
    /// See `p50`.
    pub p999: f64,
    /// The largest p99.9 and its configuration's label.
    pub worst_p999: (f64, String),
    /// Probes received over the sweep, and of them those slower than
    /// 100 µs and 1 ms.
    pub received: usize,
    /// See `received`.
    pub over_100us: usize,
    /// See `received`.
    pub over_1ms: usize,
}

/// Median of `v` (the mean of the middle two for an even count).
pub fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    Some(if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    })
}

fn ok(r: &ConfigResult) -> bool {
    r.error.is_none() && r.rtt.is_some()
}

fn same_config(a: &ConfigResult, b: &ConfigResult) -> bool {
    a.config.sweep == b.config.sweep
        && a.config.frame_size == b.config.frame_size
        && a.config.tuple == b.config.tuple
        && a.config.entries == b.config.entries
        && a.config.load_pct == b.config.load_pct
}

/// `r`'s (mean ratio, std ratio) against its anchor in this run.
pub fn ratios(report: &LatencyReport, r: &ConfigResult) -> Option<(f64, Option<f64>)> {
    let (anchor, _) = r.switch.anchor()?;
    let s = r.rtt.filter(|_| ok(r))?;
    let partner = report
        .results
        .iter()
        .find(|x| x.switch == anchor && ok(x) && same_config(x, r));
    if anchor == SwitchKind::LinuxBridge {
        let base = match partner {
            Some(p) => p.rtt?.mean,
            None => r.baseline_ns?,
        };
        return (base > 0.0).then(|| (s.mean / base, None));
    }
    let p = partner?;
    let (mine, theirs) = (r.proc_ns?, p.proc_ns?);
    let ps = p.rtt?.std;
    (theirs > 0.0).then(|| (mine / theirs, (ps > 0.0).then(|| s.std / ps)))
}

/// Every switch's summary per sweep and over all sweeps, in run order.
pub fn summaries(report: &LatencyReport) -> Vec<SwitchSummary> {
    let mut switches: Vec<SwitchKind> = Vec::new();
    for r in &report.results {
        if !switches.contains(&r.switch) {
            switches.push(r.switch);
        }
    }
    let mut out = Vec::new();
    for k in switches {
        let sweeps = [Sweep::Sizes, Sweep::Tuples, Sweep::Tables, Sweep::Load];
        for sweep in sweeps.map(Some).into_iter().chain([None]) {
            let rows: Vec<&ConfigResult> = report
                .results
                .iter()
                .filter(|r| r.switch == k && ok(r) && sweep.is_none_or(|s| r.config.sweep == s))
                .collect();
            if rows.is_empty() {
                continue;
            }
            let procs: Vec<f64> = rows.iter().filter_map(|r| r.proc_ns).collect();
            let stds: Vec<f64> = rows.iter().filter_map(|r| r.rtt.map(|s| s.std)).collect();
            let anchor = k.anchor();
            let pairs: Vec<(f64, Option<f64>)> =
                rows.iter().filter_map(|r| ratios(report, r)).collect();
            let goal = anchor.map_or(f64::NAN, |a| a.1);
            let means: Vec<f64> = pairs.iter().map(|p| p.0).collect();
            let std_ratios: Vec<f64> = pairs.iter().filter_map(|p| p.1).collect();
            out.push(SwitchSummary {
                switch: k,
                sweep,
                configs: rows.len(),
                proc_mean: median(&procs),
                proc_range: procs.iter().fold(None, |acc, &x| match acc {
                    None => Some((x, x)),
                    Some((lo, hi)) => Some((f64::min(lo, x), f64::max(hi, x))),
                }),
                std: median(&stds),
                anchor,
                mean_ratio: median(&means),
                std_ratio: median(&std_ratios),
                mean_met: (means.iter().filter(|x| **x <= goal).count(), means.len()),
                std_met: (
                    std_ratios.iter().filter(|x| **x <= goal).count(),
                    std_ratios.len(),
                ),
            });
        }
    }
    out
}

/// Every switch's tails per sweep, in run order.
pub fn tails(report: &LatencyReport) -> Vec<TailSummary> {
    let mut out = Vec::new();
    let mut seen: Vec<(SwitchKind, Sweep)> = Vec::new();
    for r in &report.results {
        if !seen.contains(&(r.switch, r.config.sweep)) {
            seen.push((r.switch, r.config.sweep));
        }
    }
    for (k, sweep) in seen {
        let rows: Vec<&ConfigResult> = report
            .results
            .iter()
            .filter(|r| r.switch == k && r.config.sweep == sweep && ok(r))
            .collect();
        let pick = |f: fn(&super::stats::RttStats) -> f64| -> Vec<f64> {
            rows.iter().filter_map(|r| r.rtt.as_ref().map(f)).collect()
        };
        let (Some(p50), Some(p99), Some(p999)) = (
            median(&pick(|s| s.p50)),
            median(&pick(|s| s.p99)),
            median(&pick(|s| s.p999)),
        ) else {
            continue;
        };
        let worst = rows
            .iter()
            .filter_map(|r| Some((r.rtt?.p999, r.config.label())))
            .max_by(|a, b| a.0.total_cmp(&b.0))
            .unwrap_or((f64::NAN, String::new()));
        let rtts: Vec<i64> = rows
            .iter()
            .flat_map(|r| r.records.iter().filter_map(|p| p.rtt_ns()))
            .collect();
        out.push(TailSummary {
            switch: k,
            sweep,
            p50,
            p99,
            p999,
            worst_p999: worst,
            received: rtts.len(),
            over_100us: rtts.iter().filter(|&&x| x > 100_000).count(),
            over_1ms: rtts.iter().filter(|&&x| x > 1_000_000).count(),
        });
    }
    out
}

/// Per switch and tuple of the tables sweep: mean RTT (ns) at the
/// smallest and the largest table, and their entry counts.
pub fn table_growth(report: &LatencyReport) -> Vec<(SwitchKind, String, usize, f64, usize, f64)> {
    let mut out = Vec::new();
    let rows: Vec<&ConfigResult> = report
        .results
        .iter()
        .filter(|r| r.config.sweep == Sweep::Tables && ok(r))
        .collect();
    let mut keys: Vec<(SwitchKind, super::rules::Tuple)> = Vec::new();
    for r in &rows {
        if !keys.contains(&(r.switch, r.config.tuple)) {
            keys.push((r.switch, r.config.tuple));
        }
    }
    for (k, t) in keys {
        let mine: Vec<&&ConfigResult> = rows
            .iter()
            .filter(|r| r.switch == k && r.config.tuple == t)
            .collect();
        let lo = mine.iter().min_by_key(|r| r.config.entries);
        let hi = mine.iter().max_by_key(|r| r.config.entries);
        if let (Some(lo), Some(hi)) = (lo, hi) {
            if let (Some(a), Some(b)) = (lo.rtt, hi.rtt) {
                out.push((
                    k,
                    t.name().to_string(),
                    lo.config.entries,
                    a.mean,
                    hi.config.entries,
                    b.mean,
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::prober::ProbeRecord;
    use super::super::rules::Tuple;
    use super::super::{apply_baseline, Config};
    use super::*;

    fn result(k: SwitchKind, size: usize, rtt: i64, jitter: i64) -> ConfigResult {
        let c = Config {
            sweep: Sweep::Sizes,
            frame_size: size,
            tuple: Tuple::L2,
            entries: 200,
            load_pct: None,
        };
        let mut r = ConfigResult::new(k, c);
        r.fill(
            (0..10)
                .map(|i| ProbeRecord {
                    seq: i,
                    tx_ns: i as i64 * 1_000_000,
                    rx_ns: Some(i as i64 * 1_000_000 + rtt + (i as i64 % 2) * jitter),
                    tx_fallback: false,
                })
                .collect(),
        );
        r
    }

    #[test]
    fn ratios_pair_same_configurations_with_the_anchor() {
        let mut rep = LatencyReport::default();
        for s in [72, 1526] {
            rep.results
                .push(result(SwitchKind::LinuxBridge, s, 10_000, 0));
            rep.results
                .push(result(SwitchKind::OvsAfxdp, s, 50_000, 20_000));
            // Mean RTTs 60 and 20 µs over the bridge's 10: Δt_proc 50
            // and 10 µs, 0.2×; jitter 20 and 10 µs, std 0.5×.
            rep.results
                .push(result(SwitchKind::OfflowAfxdpBusy, s, 15_000, 10_000));
            rep.results
                .push(result(SwitchKind::OfflowOffload, s, 11_000, 0));
        }
        apply_baseline(&mut rep);
        let busy = &rep.results[2];
        let (m, sd) = ratios(&rep, busy).unwrap();
        assert!((m - 0.2).abs() < 1e-9, "{m}");
        assert!((sd.unwrap() - 0.5).abs() < 1e-9);
        let off = &rep.results[3];
        assert!((ratios(&rep, off).unwrap().0 - 1.1).abs() < 1e-9);
        assert!(ratios(&rep, &rep.results[0]).is_none());
        let s = summaries(&rep);
        let all = s
            .iter()
            .find(|x| x.switch == SwitchKind::OfflowAfxdpBusy && x.sweep.is_none())
            .unwrap();
        assert_eq!(
            (all.configs, all.mean_met, all.std_met),
            (2, (2, 2), (2, 2))
        );
        let t = tails(&rep);
        assert!(t.iter().all(|x| x.over_100us == 0 && x.received == 20));
    }

    #[test]
    fn median_of_even_and_odd_counts() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
    }
}
