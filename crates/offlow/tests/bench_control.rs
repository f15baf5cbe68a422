//! `offlow bench control`, short: the binary starts itself as the switch in
//! a fresh topology with traffic through it, streams 2,000 flow-mods (a
//! barrier every 100) while a second connection probes ECHO and FLOW_STATS
//! every 10 ms, and prints a JSON line. Checked: every probe got its reply,
//! every barrier came back, no error replies, percentiles in order, the
//! probe's FLOW_STATS saw the two port flows, traffic crossed the switch.
//!
//! Needs root and `ip` (namespaces, veths); without them the test prints a
//! notice and passes, unless `CI` is set.

use std::process::Command;
use std::time::Duration;

#[allow(dead_code)] // each test file uses a subset of the harness
mod common;

use common::{can_run, run_bounded};

#[test]
fn short_stream_every_probe_and_barrier_answered() {
    if !can_run("the control bench test", true, &["ip"]) {
        return;
    }
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_offlow"));
    cmd.args(["bench", "control", "--flow-mods", "2000"])
        .args(["--barrier-every", "100", "--probe-ms", "10"])
        .args(["--traffic-pps", "10000", "--idle-seconds", "0.5", "--json"]);
    let out = run_bounded(cmd, Duration::from_secs(120));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let last = stdout.lines().last().expect("some output");
    let v: serde_json::Value = serde_json::from_str(last).expect("the last line is JSON");
    assert_eq!(v["experiment"], "control");
    assert_eq!(v["flow_mods"], 2000);
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 1, "one switch (this binary): {v}");
    let row = &rows[0];
    assert!(row["error"].is_null(), "{row}");
    assert_eq!(row["kind"], "offlow");
    assert_eq!(row["flow_mods"], 2000);
    assert_eq!(row["barriers_expected"], 20);
    assert_eq!(row["barriers"], 20, "every barrier came back: {row}");
    assert_eq!(row["errors"], 0, "no error replies: {row}");
    assert!(row["stream_seconds"].as_f64().is_some_and(|s| s > 0.0));
    assert!(row["flow_mods_per_s"].as_f64().is_some_and(|r| r > 0.0));
    assert_eq!(
        row["flow_stats_entries"], 2,
        "the probe dumps the port flows"
    );
    assert!(
        row["traffic_rx_pps_idle"].as_f64().is_some_and(|p| p > 0.0),
        "traffic crossed the switch: {row}"
    );
    for phase in ["idle", "stream"] {
        for kind in ["echo", "flow_stats"] {
            let l = &row[phase][kind];
            let what = format!("{phase} {kind}: {l}");
            let sent = l["sent"].as_u64().expect("sent");
            assert!(sent > 0, "{what}");
            assert_eq!(
                l["count"].as_u64(),
                Some(sent),
                "every probe answered: {what}"
            );
            let f = |k: &str| l[k].as_f64().unwrap_or_else(|| panic!("{k}: {what}"));
            let (p50, p90, p99, max) = (f("p50_ms"), f("p90_ms"), f("p99_ms"), f("max_ms"));
            assert!(p50 > 0.0, "{what}");
            assert!(p50 <= p90 && p90 <= p99 && p99 <= max, "ordered: {what}");
        }
    }
}
