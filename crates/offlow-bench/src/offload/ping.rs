//! The latency rows of `offlow bench offload` (`--ping N`): `ping` round
//! trips from host A to host B through each switch, on a fresh topology
//! per row (see the parent module's docs, "Latency rows").

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context};
use serde::Serialize;

use crate::forward::{start_offlow_logged, Ovs};
use crate::report::{fmt_f, Table};
use crate::topo::{interrupted, ip, unique_tag, Topo};

use super::gro_on;

/// Seconds between probes (`ping -i`; below 0.2 needs root).
pub const PING_INTERVAL: f64 = 0.005;

/// Probes sent before measuring (about a second at [`PING_INTERVAL`]):
/// ARP resolved, and in the offloaded rows the two ICMP microflows hot
/// for enough ticks to go down.
pub const WARMUP_PROBES: u32 = 200;

/// Host A's and host B's addresses (on their `eth0`, /24).
pub const HOST_A: &str = "10.0.0.1";
/// See [`HOST_A`].
pub const HOST_B: &str = "10.0.0.2";

/// The `[offload]` section of the offloaded rows' configuration file:
/// thresholds low enough that a 200-probe/s ping goes down (each ICMP
/// direction is one microflow of 200 packets/s), every frame sampled so
/// the rate estimate at this low rate is exact.
pub const OFFLOAD_CONFIG: &str =
    "[offload]\nmode = \"xdp\"\npromote_pps = 50\ndemote_pps = 10\nsample_every = 1\n";

/// The method, as printed and put in the JSON.
pub const PING_METHOD: &str = "ping -c N -i 0.005 from host A (10.0.0.1) to host B (10.0.0.2) \
through the switch, after 200 warm-up probes, on a fresh topology per row (GRO on the hosts' \
veths); min/avg/max/mdev from ping's summary, p50/p99 from the replies' times. Offloaded rows: \
offlow run --config with [offload] mode=xdp, promote_pps=50, demote_pps=10, sample_every=1; \
'tier share' = offload tier hits / (hits + userspace worker packets), warm-up and ARP included, \
from the switch's exit log.";

/// What one `ping` run printed, parsed.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PingStats {
    /// Probes transmitted.
    pub sent: u64,
    /// Replies received.
    pub received: u64,
    /// Summary line, ms (0 when no reply).
    pub min_ms: f64,
    /// See [`PingStats::min_ms`].
    pub avg_ms: f64,
    /// See [`PingStats::min_ms`].
    pub max_ms: f64,
    /// See [`PingStats::min_ms`].
    pub mdev_ms: f64,
    /// Median of the replies' times, ms (`None` with `-q` or no reply).
    pub p50_ms: Option<f64>,
    /// 99th percentile (nearest rank) of the replies' times, ms.
    pub p99_ms: Option<f64>,
}

/// Nearest-rank percentile `p` (0..=100) of sorted `v`.
fn percentile(v: &[f64], p: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    Some(v[rank.clamp(1, v.len()) - 1])
}

/// Parse iputils `ping` output (with or without `-q`).
pub fn parse_ping(out: &str) -> anyhow::Result<PingStats> {
    let mut s = PingStats::default();
    let mut times = Vec::new();
    let mut summary = false;
    for line in out.lines() {
        if line.contains("packets transmitted") {
            // "400 packets transmitted, 398 received, 0.5% packet loss, ..."
            let mut it = line.split(',');
            let num = |x: Option<&str>| -> anyhow::Result<u64> {
                x.and_then(|x| x.split_whitespace().next())
                    .context("short statistics line")?
                    .parse()
                    .context("statistics line count")
            };
            s.sent = num(it.next())?;
            s.received = num(it.next())?;
            summary = true;
        } else if let Some(rest) = line
            .strip_prefix("rtt min/avg/max/mdev = ")
            .or_else(|| line.strip_prefix("round-trip min/avg/max/stddev = "))
        {
            // "0.014/0.561/12.990/1.937 ms" (", pipe 2" when replies
            // overlapped the next probe).
            let nums = rest.split(" ms").next().unwrap_or(rest);
            let v: Vec<f64> = nums
                .split('/')
                .map(|x| x.trim().parse())
                .collect::<Result<_, _>>()
                .with_context(|| format!("rtt line `{line}`"))?;
            if v.len() != 4 {
                bail!("rtt line `{line}`");
            }
            (s.min_ms, s.avg_ms, s.max_ms, s.mdev_ms) = (v[0], v[1], v[2], v[3]);
        } else if line.contains("icmp_seq=") {
            if let Some(t) = line
                .split_whitespace()
                .find_map(|w| w.strip_prefix("time="))
            {
                times.push(
                    t.parse::<f64>()
                        .with_context(|| format!("reply `{line}`"))?,
                );
            }
        }
    }
    if !summary {
        bail!("no statistics in ping's output");
    }
    times.sort_by(f64::total_cmp);
    s.p50_ms = percentile(&times, 50.0);
    s.p99_ms = percentile(&times, 99.0);
    Ok(s)
}

/// The value of `key=` on the first line of `log` containing `message`.
pub fn log_field(log: &str, message: &str, key: &str) -> Option<u64> {
    let line = log.lines().find(|l| l.contains(message))?;
    let prefix = format!("{key}=");
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(prefix.as_str()))
        .and_then(|v| v.parse().ok())
}

/// One latency row.
#[derive(Debug, Clone, Serialize)]
pub struct PingRow {
    /// Human-readable name.
    pub name: String,
    /// `bridge`, `offloaded`, `userspace` or `ovs-afxdp`.
    pub kind: &'static str,
    /// What ping measured.
    pub stats: PingStats,
    /// Offloaded rows: offload tier hits over the row (switch exit log).
    pub offload_hits: Option<u64>,
    /// offlow rows: packets the userspace workers processed over the row.
    pub userspace_packets: Option<u64>,
    /// Offloaded rows: hits / (hits + userspace packets).
    pub tier_share: Option<f64>,
    /// avg ÷ the bridge row's avg.
    pub avg_vs_bridge: Option<f64>,
    /// p50 ÷ the bridge row's p50.
    pub p50_vs_bridge: Option<f64>,
    /// p99 ÷ the bridge row's p99.
    pub p99_vs_bridge: Option<f64>,
    /// Why the row failed.
    pub error: Option<String>,
}

impl PingRow {
    fn new(name: String, kind: &'static str) -> PingRow {
        PingRow {
            name,
            kind,
            stats: PingStats::default(),
            offload_hits: None,
            userspace_packets: None,
            tier_share: None,
            avg_vs_bridge: None,
            p50_vs_bridge: None,
            p99_vs_bridge: None,
            error: None,
        }
    }

    /// Ran and got replies.
    pub fn ok(&self) -> bool {
        self.error.is_none() && self.stats.received > 0
    }
}

#[derive(Debug, Clone, Copy)]
enum Plan {
    Bridge,
    Offlow { xdp: bool, offload: bool },
    OvsAfxdp,
}

impl Plan {
    fn name(self) -> String {
        match self {
            Plan::Bridge => "linux bridge".into(),
            Plan::Offlow { xdp, offload } => format!(
                "offlow {}, {}",
                if offload { "offloaded" } else { "userspace" },
                if xdp { "af_xdp" } else { "af_packet" }
            ),
            Plan::OvsAfxdp => "ovs 3.1 netdev, type=afxdp".into(),
        }
    }

    fn kind(self) -> &'static str {
        match self {
            Plan::Bridge => "bridge",
            Plan::Offlow { offload: true, .. } => "offloaded",
            Plan::Offlow { .. } => "userspace",
            Plan::OvsAfxdp => "ovs-afxdp",
        }
    }
}

/// A file removed when dropped.
pub(super) struct TempFile(pub(super) PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `ping -c count` from `ns` to `dst`; `quiet` adds `-q`.
fn ping(ns: &str, dst: &str, count: u32, quiet: bool) -> anyhow::Result<PingStats> {
    let deadline = (f64::from(count) * PING_INTERVAL * 2.0 + 5.0).ceil() as u64;
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, "ping", "-n"])
        .args(["-c", &count.to_string()])
        .args(["-i", &PING_INTERVAL.to_string()])
        .args(["-w", &deadline.to_string()]);
    if quiet {
        c.arg("-q");
    }
    // Exit status 1 means some probes went unanswered: the output says.
    let out = c
        .arg(dst)
        .stdin(Stdio::null())
        .output()
        .context("running ping")?;
    parse_ping(&String::from_utf8_lossy(&out.stdout)).with_context(|| {
        format!(
            "ping ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )
    })
}

/// Warm up, then measure `n` probes from `ns` to `dst`.
pub(super) fn warm_and_ping(ns: &str, dst: &str, n: u32) -> anyhow::Result<PingStats> {
    let w = ping(ns, dst, WARMUP_PROBES, true)?;
    if w.received == 0 {
        bail!("no reply to any of {} warm-up probes", WARMUP_PROBES);
    }
    ping(ns, dst, n, false)
}

fn run_row(
    plan: Plan,
    row: &mut PingRow,
    n: u32,
    bin: &Path,
    extra_args: &[String],
) -> anyhow::Result<()> {
    let t = Topo::hosts(true, 1)?;
    let sw = t.sw()?;
    let (a, b) = (t.gen.0.as_str(), t.rx.0.as_str());
    for (ns, addr) in [(a, HOST_A), (b, HOST_B)] {
        ip(&[
            "-n",
            ns,
            "addr",
            "add",
            &format!("{addr}/24"),
            "dev",
            "eth0",
        ])?;
        gro_on(ns, "eth0")?;
    }
    match plan {
        Plan::Bridge => {
            ip(&[
                "-n",
                sw,
                "link",
                "add",
                "name",
                "br0",
                "type",
                "bridge",
                "stp_state",
                "0",
            ])?;
            for p in ["p1", "p2"] {
                ip(&["-n", sw, "link", "set", p, "master", "br0"])?;
            }
            ip(&["-n", sw, "link", "set", "br0", "up"])?;
            row.stats = warm_and_ping(a, HOST_B, n)?;
        }
        Plan::OvsAfxdp => {
            let _ovs = Ovs::start(sw, "afxdp")?;
            row.stats = warm_and_ping(a, HOST_B, n)?;
        }
        Plan::Offlow { xdp, offload } => {
            let tag = unique_tag();
            let log = TempFile(std::env::temp_dir().join(format!("offlow-ping-{tag}.log")));
            let cfg = TempFile(std::env::temp_dir().join(format!("offlow-ping-{tag}.toml")));
            let cfg_path = cfg.0.to_string_lossy().into_owned();
            let mut extra: Vec<&str> = if offload {
                std::fs::write(&cfg.0, OFFLOAD_CONFIG)
                    .with_context(|| format!("writing {}", cfg.0.display()))?;
                vec!["--config", &cfg_path]
            } else {
                Vec::new()
            };
            extra.extend(extra_args.iter().map(String::as_str));
            let mut s = start_offlow_logged(bin, sw, 1, xdp, &extra, Some(&log.0))?;
            let r = warm_and_ping(a, HOST_B, n);
            s.check_alive()?;
            // Stopping it writes the exit counters to the log.
            drop(s);
            row.stats = r?;
            let text = std::fs::read_to_string(&log.0).unwrap_or_default();
            row.userspace_packets = log_field(&text, "data plane stopped", "packets");
            if offload {
                row.offload_hits = log_field(&text, "offload tier stopped", "hits");
                if row.offload_hits.is_none() {
                    bail!("the switch logged no `offload tier stopped` line");
                }
                if let (Some(h), Some(p)) = (row.offload_hits, row.userspace_packets) {
                    row.tier_share = (h + p > 0).then(|| h as f64 / (h + p) as f64);
                }
                if row.offload_hits == Some(0) {
                    row.name.push_str(" (not offloaded)");
                }
            }
        }
    }
    Ok(())
}

/// The latency rows, `n` probes each (each row: 1 worker, 1 queue);
/// `extra`: more arguments for every `offlow run`.
pub fn run(n: u32, bin: &Path, extra: &[String]) -> Vec<PingRow> {
    let plans = [
        Plan::Bridge,
        Plan::Offlow {
            xdp: false,
            offload: true,
        },
        Plan::Offlow {
            xdp: true,
            offload: true,
        },
        Plan::Offlow {
            xdp: false,
            offload: false,
        },
        Plan::Offlow {
            xdp: true,
            offload: false,
        },
        Plan::OvsAfxdp,
    ];
    let mut rows = Vec::new();
    for p in plans {
        if interrupted() {
            break;
        }
        let mut row = PingRow::new(p.name(), p.kind());
        eprint!("offload: ping {} ... ", row.name);
        match run_row(p, &mut row, n, bin, extra) {
            Ok(()) => eprintln!(
                "avg {} ms, {}/{} replies",
                fmt_f(row.stats.avg_ms, 3),
                row.stats.received,
                row.stats.sent
            ),
            Err(e) => {
                eprintln!("failed: {e:#}");
                row.error = Some(format!("{e:#}"));
            }
        }
        rows.push(row);
    }
    compare_with_bridge(&mut rows);
    rows
}

/// Fill the `*_vs_bridge` ratios.
pub fn compare_with_bridge(rows: &mut [PingRow]) {
    let Some(br) = rows
        .iter()
        .find(|r| r.kind == "bridge" && r.ok())
        .map(|r| r.stats.clone())
    else {
        return;
    };
    let div = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    };
    for r in rows.iter_mut().filter(|r| r.ok()) {
        r.avg_vs_bridge = div(Some(r.stats.avg_ms), Some(br.avg_ms));
        r.p50_vs_bridge = div(r.stats.p50_ms, br.p50_ms);
        r.p99_vs_bridge = div(r.stats.p99_ms, br.p99_ms);
    }
}

/// The latency table (ms).
pub fn render(rows: &[PingRow]) -> String {
    let mut t = Table::new([
        "configuration",
        "replies",
        "min ms",
        "avg ms",
        "max ms",
        "mdev ms",
        "p50 ms",
        "p99 ms",
        "avg ÷ bridge",
        "p50 ÷ bridge",
        "p99 ÷ bridge",
        "tier hits",
        "tier share",
    ]);
    let ms = |v: f64| fmt_f(v, 3);
    let opt = |v: Option<f64>, d: usize| v.map(|x| fmt_f(x, d)).unwrap_or_else(|| "-".into());
    for r in rows {
        if r.error.is_some() {
            t.row([
                r.name.clone(),
                "error".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
            ]);
            continue;
        }
        let s = &r.stats;
        t.row([
            r.name.clone(),
            format!("{}/{}", s.received, s.sent),
            ms(s.min_ms),
            ms(s.avg_ms),
            ms(s.max_ms),
            ms(s.mdev_ms),
            opt(s.p50_ms, 3),
            opt(s.p99_ms, 3),
            opt(r.avg_vs_bridge, 2),
            opt(r.p50_vs_bridge, 2),
            opt(r.p99_vs_bridge, 2),
            r.offload_hits
                .map(|h| h.to_string())
                .unwrap_or_else(|| "-".into()),
            opt(r.tier_share.map(|x| x * 100.0), 0) + if r.tier_share.is_some() { "%" } else { "" },
        ]);
    }
    t.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUT: &str = "PING 10.0.0.2 (10.0.0.2) 56(84) bytes of data.
64 bytes from 10.0.0.2: icmp_seq=1 ttl=64 time=0.081 ms
64 bytes from 10.0.0.2: icmp_seq=2 ttl=64 time=0.040 ms
64 bytes from 10.0.0.2: icmp_seq=3 ttl=64 time=0.052 ms
64 bytes from 10.0.0.2: icmp_seq=5 ttl=64 time=1.20 ms

--- 10.0.0.2 ping statistics ---
5 packets transmitted, 4 received, 20% packet loss, time 21ms
rtt min/avg/max/mdev = 0.040/0.343/1.200/0.495 ms
";

    #[test]
    fn ping_output_is_parsed() {
        let s = parse_ping(OUT).expect("parsed");
        assert_eq!((s.sent, s.received), (5, 4));
        assert_eq!(
            (s.min_ms, s.avg_ms, s.max_ms, s.mdev_ms),
            (0.040, 0.343, 1.2, 0.495)
        );
        assert_eq!(s.p50_ms, Some(0.052));
        assert_eq!(s.p99_ms, Some(1.2));
        // -q: summary only; no replies at all: no rtt line.
        let q: String = OUT
            .lines()
            .filter(|l| !l.contains("icmp_seq"))
            .collect::<Vec<_>>()
            .join("\n");
        let s = parse_ping(&q).expect("parsed");
        assert_eq!((s.avg_ms, s.p50_ms), (0.343, None));
        let none = "--- x ping statistics ---\n3 packets transmitted, 0 received, +3 errors, 100% packet loss, time 2ms\n";
        let s = parse_ping(none).expect("parsed");
        assert_eq!((s.sent, s.received, s.avg_ms), (3, 0, 0.0));
        let piped = OUT.replace("0.495 ms", "0.495 ms, pipe 2");
        assert_eq!(parse_ping(&piped).expect("parsed").mdev_ms, 0.495);
        assert!(parse_ping("ping: connect: Network is unreachable\n").is_err());
    }

    #[test]
    fn exit_log_fields_are_read() {
        let log = "2026-11-26T04:00:00Z  INFO offlow_switch::control: offload tier stopped hits=812 hit_bytes=79576 entries=2\n\
                   2026-11-26T04:00:00Z  INFO offlow_switch::control: data plane stopped packets=406 cache_hits=400 packet_ins=0\n";
        assert_eq!(log_field(log, "offload tier stopped", "hits"), Some(812));
        assert_eq!(log_field(log, "data plane stopped", "packets"), Some(406));
        assert_eq!(log_field(log, "nothing", "hits"), None);
    }

    #[test]
    fn ratios_use_the_bridge_row() {
        let mut br = PingRow::new("b".into(), "bridge");
        br.stats = PingStats {
            sent: 1,
            received: 1,
            avg_ms: 0.04,
            p50_ms: Some(0.04),
            ..PingStats::default()
        };
        let mut o = PingRow::new("o".into(), "offloaded");
        o.stats = PingStats {
            sent: 1,
            received: 1,
            avg_ms: 0.05,
            p50_ms: Some(0.02),
            ..PingStats::default()
        };
        let mut rows = vec![br, o];
        compare_with_bridge(&mut rows);
        let r = rows[1].avg_vs_bridge.expect("ratio");
        assert!((r - 1.25).abs() < 1e-9);
        assert_eq!(rows[1].p50_vs_bridge, Some(0.5));
        assert_eq!(rows[1].p99_vs_bridge, None);
    }
}
