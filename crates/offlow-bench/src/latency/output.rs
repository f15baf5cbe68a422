//! What `offlow bench latency` writes: one CSV file per sweep, a Markdown
//! summary (also printed) and one PNG plot per sweep (median RTT against the
//! swept value, one line per switch), drawn with `plotters`' bitmap
//! backend.
//!
//! Fonts: text is drawn with `ab_glyph` from a TrueType file found on the
//! machine ([`FONT_CANDIDATES`]); when none loads, or drawing text fails,
//! the plot is drawn again without any text (axes, grid and lines only;
//! the series' colours are listed in the summary), so a missing font
//! never costs the figure.
//!
//! Thread-safety: the font registry is plotters' (a global lock); the
//! rest is plain functions.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::Context;
use plotters::prelude::*;

use super::rules::Tuple;
use super::{ConfigResult, LatencyArgs, LatencyReport, Sweep, SwitchKind, METHOD};

/// TrueType fonts tried for the plots' text, in order.
pub const FONT_CANDIDATES: [&str; 4] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

/// Series colours, in switch order (also named in the summary).
const COLOURS: [(RGBColor, &str); 10] = [
    (RGBColor(31, 119, 180), "blue"),
    (RGBColor(255, 127, 14), "orange"),
    (RGBColor(44, 160, 44), "green"),
    (RGBColor(214, 39, 40), "red"),
    (RGBColor(148, 103, 189), "purple"),
    (RGBColor(127, 127, 127), "grey"),
    (RGBColor(23, 190, 207), "cyan"),
    (RGBColor(188, 189, 34), "olive"),
    (RGBColor(140, 86, 75), "brown"),
    (RGBColor(227, 119, 194), "pink"),
];

fn us(ns: f64) -> f64 {
    ns / 1000.0
}

fn opt_us(v: Option<f64>) -> String {
    v.map(|x| format!("{:.1}", us(x)))
        .unwrap_or_else(|| "-".into())
}

fn sweep_results(r: &LatencyReport, s: Sweep) -> Vec<&ConfigResult> {
    r.results.iter().filter(|x| x.config.sweep == s).collect()
}

/// Switches that have rows in `rows`, in first-seen order.
fn switches_of(rows: &[&ConfigResult]) -> Vec<SwitchKind> {
    let mut v = Vec::new();
    for r in rows {
        if !v.contains(&r.switch) {
            v.push(r.switch);
        }
    }
    v
}

/// The CSV of one sweep.
pub fn csv(rows: &[&ConfigResult]) -> String {
    let mut out = String::from(
        "sweep,switch,value,frame_bytes,tuple,entries,load_pct,background_pps,sent,received,lost,\
         mean_ns,std_ns,min_ns,p50_ns,p99_ns,p999_ns,max_ns,baseline_ns,proc_ns,tx_fallbacks,error\n",
    );
    let f = |v: Option<f64>| v.map(|x| format!("{x:.0}")).unwrap_or_default();
    for r in rows {
        let s = r.rtt;
        let c = &r.config;
        // Writing to a String cannot fail.
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},\"{}\"",
            c.sweep.name(),
            r.switch.name(),
            c.label(),
            c.frame_size,
            c.tuple.name(),
            c.entries,
            c.load_pct.map(|x| x.to_string()).unwrap_or_default(),
            f(r.background_pps),
            r.sent,
            r.received,
            r.lost,
            f(s.map(|s| s.mean)),
            f(s.map(|s| s.std)),
            f(s.map(|s| s.min)),
            f(s.map(|s| s.p50)),
            f(s.map(|s| s.p99)),
            f(s.map(|s| s.p999)),
            f(s.map(|s| s.max)),
            f(r.baseline_ns),
            f(r.proc_ns),
            r.tx_fallbacks,
            r.error.as_deref().unwrap_or("").replace('"', "'"),
        );
    }
    out
}

/// Every probe of every configuration.
pub fn raw_csv(r: &LatencyReport) -> String {
    let mut out = String::from("sweep,switch,value,seq,tx_ns,rx_ns,rtt_ns,tx_fallback\n");
    for x in &r.results {
        for p in &x.records {
            let _ = writeln!(
                out,
                "{},{},{},{},{},{},{},{}",
                x.config.sweep.name(),
                x.switch.name(),
                x.config.label(),
                p.seq,
                p.tx_ns,
                p.rx_ns.map(|v| v.to_string()).unwrap_or_default(),
                p.rtt_ns().map(|v| v.to_string()).unwrap_or_default(),
                p.tx_fallback
            );
        }
    }
    out
}

/// The Markdown summary: method, one table per sweep, notes.
pub fn markdown(r: &LatencyReport, a: &LatencyArgs) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "### offlow bench latency: {} probes per configuration in {} passes over the switches, \
         {} µs apart, {} ms timeout\n",
        a.probes, a.passes, a.interval_us, a.timeout_ms
    );
    let _ = writeln!(
        out,
        "Method: {METHOD} Timestamps: {}.\n",
        r.ts_source.map_or("none (nothing ran)", |s| s.name())
    );
    for (k, pps) in &r.max_pps {
        let _ = writeln!(
            out,
            "- {}: background maximum {:.0} frames/s (64-byte frames, 100 flows, unpaced \
             generator on host B, frames looped back to B and counted there over 1 s)",
            k.name(),
            pps
        );
    }
    if !r.max_pps.is_empty() {
        out.push('\n');
    }
    for s in [Sweep::Sizes, Sweep::Tuples, Sweep::Tables, Sweep::Load] {
        let rows = sweep_results(r, s);
        if rows.is_empty() {
            continue;
        }
        let title = match s {
            Sweep::Sizes => format!(
                "(a) frame sizes, {} L2 entries (the bridge rows are the Δt_proc baseline)",
                a.entries
            ),
            Sweep::Tuples => format!(
                "(b) match tuples, {} entries, {} B frames",
                a.entries, a.frame_size
            ),
            Sweep::Tables => format!("(c) table sizes, {} B frames", a.frame_size),
            Sweep::Load => format!(
                "(d) latency under background load, {} L2 entries, {} B probes",
                a.entries, a.frame_size
            ),
        };
        let _ = writeln!(out, "#### {title}\n");
        out.push_str(
            "| switch | value | sent | lost | mean µs | std µs | min µs | p50 µs | p99 µs | p99.9 µs | Δt_proc µs |\n\
             |---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n",
        );
        for x in rows {
            if let Some(e) = &x.error {
                let _ = writeln!(
                    out,
                    "| {} | {} | error: {} |||||||||",
                    x.switch.name(),
                    x.config.label(),
                    e.replace('|', "/").lines().next().unwrap_or("")
                );
                continue;
            }
            let st = x.rtt;
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                x.switch.name(),
                x.config.label(),
                x.sent,
                x.lost,
                opt_us(st.map(|s| s.mean)),
                opt_us(st.map(|s| s.std)),
                opt_us(st.map(|s| s.min)),
                opt_us(st.map(|s| s.p50)),
                opt_us(st.map(|s| s.p99)),
                opt_us(st.map(|s| s.p999)),
                if x.is_baseline() {
                    "baseline".into()
                } else {
                    opt_us(x.proc_ns)
                },
            );
        }
        out.push('\n');
    }
    summary_tables(&mut out, r);
    let fallbacks: usize = r.results.iter().map(|x| x.tx_fallbacks).sum();
    if fallbacks > 0 {
        let _ = writeln!(
            out,
            "- {fallbacks} probe(s) had no tx timestamp on the error queue in time: their \
             send time is the user-space clock just before send()."
        );
    }
    for n in &r.notes {
        let _ = writeln!(out, "- {n}");
    }
    out
}

/// The report's reference figures (Open vSwitch 1.10 and the NEC PF5240
/// hardware switch, on the report's own testbed), printed beside ours.
pub const REFERENCE: &str = "Reference, the Stuttgart report (its testbed, not this machine): \
Open vSwitch 1.10 Δt_proc 123 µs mean, 43 µs std; NEC PF5240 (hardware) 3.8 µs mean.";

fn opt_ratio(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.2}×")).unwrap_or_else(|| "-".into())
}

/// Tables (e) and (f): the per-switch summary against the goals, with the
/// report's reference figures, and the tails; then table-size growth.
fn summary_tables(out: &mut String, r: &LatencyReport) {
    let sums = super::goals::summaries(r);
    if sums.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "#### (e) processing delay per switch and sweep, against the same-run anchor\n\n\
         Per sweep: the median over its configurations of the mean Δt_proc and of the std, and \
         of the per-configuration ratio to the anchor (same sweep, same configuration). Goals \
         (issue 23): mean and std ≤ 0.5× Open vSwitch on the same port kind; offloaded mean RTT \
         ≤ 1.25× the Linux bridge's. {REFERENCE}\n"
    );
    out.push_str(
        "| switch | sweep | configs | Δt_proc mean µs (median; range) | std µs (median) | anchor | mean ratio (median) | ≤ goal | std ratio (median) | ≤ goal |\n\
         |---|---|--:|--:|--:|---|--:|--:|--:|--:|\n",
    );
    for x in &sums {
        let range = x
            .proc_range
            .map(|(lo, hi)| format!("; {:.1}–{:.1}", us(lo), us(hi)))
            .unwrap_or_default();
        let anchor = match x.anchor {
            Some((k, g)) if k == SwitchKind::LinuxBridge => {
                format!("{} (mean RTT, ≤ {g}×)", k.name())
            }
            Some((k, g)) => format!("{} (≤ {g}×)", k.name()),
            None => "-".into(),
        };
        let met = |(a, b): (usize, usize)| {
            if b == 0 {
                "-".into()
            } else {
                format!("{a}/{b}")
            }
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {}{} | {} | {} | {} | {} | {} | {} |",
            x.switch.name(),
            x.sweep.map_or("**all**", |s| s.name()),
            x.configs,
            opt_us(x.proc_mean),
            range,
            opt_us(x.std),
            anchor,
            opt_ratio(x.mean_ratio),
            met(x.mean_met),
            opt_ratio(x.std_ratio),
            met(x.std_met),
        );
    }
    let _ = writeln!(
        out,
        "| *Open vSwitch 1.10 (report)* | all | | *123* | *43* | | | | | |\n\
         | *NEC PF5240 (report)* | all | | *3.8* | | | | | | |\n"
    );
    let growth = super::goals::table_growth(r);
    for (k, t, lo_n, lo, hi_n, hi) in &growth {
        let _ = writeln!(
            out,
            "- flat with table size ({}, {t}): mean RTT {:.1} µs at {lo_n} entries, {:.1} µs at \
             {hi_n} ({:+.0}%; goal ≤ +10%)",
            k.name(),
            us(*lo),
            us(*hi),
            (hi / lo - 1.0) * 100.0
        );
    }
    if !growth.is_empty() {
        out.push('\n');
    }
    let tails = super::goals::tails(r);
    let _ = writeln!(
        out,
        "#### (f) tails: p50, p99 and p99.9 per switch and sweep\n\n\
         Medians over the sweep's configurations; the worst p99.9 and its configuration; the \
         share of all the sweep's probes slower than 100 µs and 1 ms. A p99.9 of n probes is \
         the n/1000-th slowest: with a few hundred or a thousand probes, one or two probes per \
         configuration.\n"
    );
    out.push_str(
        "| switch | sweep | p50 µs | p99 µs | p99.9 µs | worst p99.9 µs (where) | probes | > 100 µs | > 1 ms |\n\
         |---|---|--:|--:|--:|--:|--:|--:|--:|\n",
    );
    let pct = |a: usize, n: usize| {
        if n == 0 {
            "-".to_string()
        } else {
            format!("{:.2}%", a as f64 * 100.0 / n as f64)
        }
    };
    for t in &tails {
        let _ = writeln!(
            out,
            "| {} | {} | {:.1} | {:.1} | {:.1} | {:.1} ({}) | {} | {} | {} |",
            t.switch.name(),
            t.sweep.name(),
            us(t.p50),
            us(t.p99),
            us(t.p999),
            us(t.worst_p999.0),
            t.worst_p999.1,
            t.received,
            pct(t.over_100us, t.received),
            pct(t.over_1ms, t.received),
        );
    }
    out.push('\n');
}

/// Write the CSV files, `summary.md` and the plots into `dir`; the paths
/// written.
pub fn write_all(r: &LatencyReport, a: &LatencyArgs, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    for s in [Sweep::Sizes, Sweep::Tuples, Sweep::Tables, Sweep::Load] {
        let rows = sweep_results(r, s);
        if rows.is_empty() {
            continue;
        }
        let p = dir.join(format!("latency-{}.csv", s.name()));
        std::fs::write(&p, csv(&rows)).with_context(|| format!("writing {}", p.display()))?;
        written.push(p);
        let p = dir.join(format!("latency-{}.png", s.name()));
        plot(&rows, s, &p).with_context(|| format!("drawing {}", p.display()))?;
        written.push(p);
    }
    if a.raw {
        let p = dir.join("latency-probes.csv");
        std::fs::write(&p, raw_csv(r)).with_context(|| format!("writing {}", p.display()))?;
        written.push(p);
    }
    let p = dir.join("summary.md");
    let mut md = markdown(r, a);
    let _ = writeln!(
        md,
        "\nPlots: median RTT (µs) per switch (tables sweep: the second tuple faded); series colours: {}.",
        colour_legend(r)
    );
    std::fs::write(&p, md).with_context(|| format!("writing {}", p.display()))?;
    written.push(p);
    Ok(written)
}

fn colour_legend(r: &LatencyReport) -> String {
    let all: Vec<&ConfigResult> = r.results.iter().collect();
    switches_of(&all)
        .iter()
        .map(|k| format!("{} = {}", k.name(), COLOURS[colour_index(*k)].1))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A switch's colour, the same in every plot whichever switches ran.
fn colour_index(k: SwitchKind) -> usize {
    match k {
        SwitchKind::LinuxBridge => 0,
        SwitchKind::OfflowAfpacket => 1,
        SwitchKind::OfflowAfxdp => 2,
        SwitchKind::OfflowOffload => 3,
        SwitchKind::OvsSystem => 4,
        SwitchKind::OvsAfxdp => 5,
        SwitchKind::OfflowAfpacketBusy => 6,
        SwitchKind::OfflowAfxdpBusy => 7,
        SwitchKind::AfxdpFloor => 8,
        SwitchKind::XdpFloor => 9,
    }
}

/// Register a font once; whether one is available.
fn font_ready() -> bool {
    static READY: OnceLock<bool> = OnceLock::new();
    *READY.get_or_init(|| {
        for p in FONT_CANDIDATES {
            if let Ok(bytes) = std::fs::read(p) {
                // Leaked once per process: plotters keeps `'static` font
                // bytes in its registry.
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return true;
                }
            }
        }
        false
    })
}

/// One line per switch (and tuple, in the tables sweep): (name, colour
/// index, faded, points (x, median µs)).
type Series = Vec<(String, usize, bool, Vec<(f64, f64)>)>;

fn series(rows: &[&ConfigResult]) -> Series {
    let mut out = Vec::new();
    for k in switches_of(rows) {
        let colour = colour_index(k);
        // Tables: one line per tuple.
        let mut tuples: Vec<Tuple> = Vec::new();
        for r in rows.iter().filter(|r| r.switch == k) {
            if !tuples.contains(&r.config.tuple) {
                tuples.push(r.config.tuple);
            }
        }
        let split = rows[0].config.sweep == Sweep::Tables && tuples.len() > 1;
        let groups: Vec<Option<Tuple>> = if split {
            tuples.into_iter().map(Some).collect()
        } else {
            vec![None]
        };
        for (gi, g) in groups.into_iter().enumerate() {
            let pts: Vec<(f64, f64)> = rows
                .iter()
                .filter(|r| r.switch == k && g.is_none_or(|t| r.config.tuple == t))
                .filter_map(|r| Some((r.config.x(), us(r.rtt?.p50))))
                .collect();
            let name = match g {
                Some(t) => format!("{} {}", k.name(), t.name()),
                None => k.name().to_string(),
            };
            out.push((name, colour, gi > 0, pts));
        }
    }
    out
}

/// Draw the sweep's plot; without text when no font works.
pub fn plot(rows: &[&ConfigResult], s: Sweep, path: &Path) -> anyhow::Result<()> {
    let ser = series(rows);
    if font_ready() && draw(&ser, s, path, true).is_ok() {
        return Ok(());
    }
    draw(&ser, s, path, false)
}

fn draw(ser: &Series, s: Sweep, path: &Path, text: bool) -> anyhow::Result<()> {
    let err = |e: &dyn std::fmt::Display| anyhow::anyhow!("plotters: {e}");
    let pts = || ser.iter().flat_map(|(_, _, _, p)| p.iter());
    let ymax = pts().map(|p| p.1).fold(0.0f64, f64::max).max(1.0) * 1.15;
    // Tables: log10 of the entry count on a linear axis.
    let tx = |x: f64| if s == Sweep::Tables { x.log10() } else { x };
    let (x0, x1) = match s {
        Sweep::Tuples => (-0.5, Tuple::ALL.len() as f64 - 0.5),
        _ => {
            let lo = pts().map(|p| tx(p.0)).fold(f64::INFINITY, f64::min);
            let hi = pts().map(|p| tx(p.0)).fold(f64::NEG_INFINITY, f64::max);
            if lo.is_finite() && hi > lo {
                let pad = (hi - lo) * 0.03;
                (lo - pad, hi + pad)
            } else {
                (0.0, 1.0)
            }
        }
    };
    let root = BitMapBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let (title, xdesc) = match s {
        Sweep::Sizes => ("median RTT vs frame size", "frame size (B, wire)"),
        Sweep::Tuples => ("median RTT vs match tuple", "match tuple"),
        Sweep::Tables => ("median RTT vs table size", "entries (log scale)"),
        Sweep::Load => (
            "median RTT vs background load",
            "background load (% of max)",
        ),
    };
    let mut b = ChartBuilder::on(&root);
    b.margin(16);
    if text {
        b.caption(title, ("sans-serif", 24))
            .x_label_area_size(48)
            .y_label_area_size(72);
    } else {
        b.x_label_area_size(8).y_label_area_size(8);
    }
    let mut chart = b
        .build_cartesian_2d(x0..x1, 0.0..ymax)
        .map_err(|e| err(&e))?;
    let xfmt = |x: &f64| -> String {
        match s {
            Sweep::Tuples => {
                let i = x.round();
                if (x - i).abs() < 1e-6 && i >= 0.0 {
                    Tuple::ALL
                        .get(i as usize)
                        .map_or(String::new(), |t| t.name().to_string())
                } else {
                    String::new()
                }
            }
            Sweep::Tables => format!("{:.0}", 10f64.powf(*x)),
            _ => format!("{x:.0}"),
        }
    };
    {
        let mut mesh = chart.configure_mesh();
        if text {
            mesh.x_desc(xdesc)
                .y_desc("median RTT (µs)")
                .x_label_formatter(&xfmt)
                .x_labels(if s == Sweep::Tuples { 11 } else { 10 });
        } else {
            mesh.x_labels(0).y_labels(0);
        }
        mesh.draw().map_err(|e| err(&e))?;
    }
    for (name, c, faded, p) in ser {
        // A switch's second tuple (tables sweep): its colour, faded.
        let colour = COLOURS[c % COLOURS.len()]
            .0
            .mix(if *faded { 0.45 } else { 1.0 });
        let p: Vec<(f64, f64)> = p.iter().map(|&(x, y)| (tx(x), y)).collect();
        let line = chart
            .draw_series(LineSeries::new(p.clone(), colour.stroke_width(2)))
            .map_err(|e| err(&e))?;
        if text {
            line.label(name.as_str()).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
            });
        }
        chart
            .draw_series(p.iter().map(|&pt| Circle::new(pt, 3, colour.filled())))
            .map_err(|e| err(&e))?;
    }
    if text {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            .draw()
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::prober::ProbeRecord;
    use super::super::{Config, ConfigResult};
    use super::*;

    fn result(k: SwitchKind, size: usize, rtt: i64) -> ConfigResult {
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
                    tx_ns: i as i64 * 1000,
                    rx_ns: Some(i as i64 * 1000 + rtt),
                    tx_fallback: false,
                })
                .collect(),
        );
        r
    }

    #[test]
    fn csv_markdown_and_plots_render() {
        let mut rep = LatencyReport::default();
        for (k, base) in [
            (SwitchKind::LinuxBridge, 20_000),
            (SwitchKind::OfflowAfpacket, 60_000),
        ] {
            for s in [72, 1526] {
                rep.results.push(result(k, s, base + s as i64));
            }
        }
        super::super::apply_baseline(&mut rep);
        let rows: Vec<&ConfigResult> = rep.results.iter().collect();
        let c = csv(&rows);
        assert_eq!(c.lines().count(), 5);
        assert!(c.lines().nth(3).unwrap().contains(",40000,"), "{c}");
        let md = markdown(&rep, &LatencyArgs::default());
        assert!(
            md.contains("| offlow af_packet | 72 B | 10 | 0 | 60.1 |"),
            "{md}"
        );
        let dir = std::env::temp_dir().join(format!("offlow-lat-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for text in [true, false] {
            let p = dir.join(format!("t{text}.png"));
            if text && !font_ready() {
                continue;
            }
            draw(&series(&rows), Sweep::Sizes, &p, text).unwrap();
            assert!(std::fs::metadata(&p).unwrap().len() > 1000);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
