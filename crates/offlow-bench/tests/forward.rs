//! `offlow bench forward`, short: every row (0.5 s each) must deliver
//! frames end to end, and the `--json` object must be well-formed.
//!
//! Needs root, `ip`, `ovs-ofctl` (flows into offlow) and the Open vSwitch
//! daemons; without them the test prints a notice and passes, unless `CI`
//! is set (CI runs as root with the packages installed). The offlow rows
//! need the `offlow` binary, which lives in another crate: it is looked for
//! next to this test executable (`target/{debug,release}/offlow`, built by
//! `cargo test --workspace`); when absent those rows are left out with a
//! notice.

mod common;

use common::offlow_bin;
use std::process::Command;

use offlow_bench::forward::{self, ForwardArgs, RowKind};

fn have(cmd: &str, arg: &str) -> bool {
    Command::new(cmd).arg(arg).output().is_ok()
}

fn can_run() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let ip = have("ip", "-V");
    let ofctl = have("ovs-ofctl", "--version");
    let ovs = have("ovs-vswitchd", "--version") && have("ovsdb-server", "--version");
    if root && ip && ofctl && ovs {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must run the forward bench test: root={root} ip={ip} ovs-ofctl={ofctl} ovs={ovs}"
    );
    eprintln!(
        "NOTICE: skipping forward bench test (root={root} ip={ip} ovs-ofctl={ofctl} ovs={ovs})"
    );
    false
}

#[test]
fn every_row_forwards_and_json_parses() {
    if !can_run() {
        return;
    }
    let mut args = ForwardArgs {
        seconds: 0.5,
        warmup: 0.2,
        ..ForwardArgs::default()
    };
    match offlow_bin() {
        Some(b) => args.offlow_bin = Some(b),
        None => {
            eprintln!("NOTICE: no offlow binary next to the test executable: offlow rows left out");
            args.rows
                .retain(|k| *k != RowKind::Offlow && *k != RowKind::OfflowXdp);
        }
    }
    let report = forward::run(&args).expect("the experiment runs");

    let mut ran = 0;
    for row in &report.rows {
        assert!(row.error.is_none(), "{}: {:?}", row.name, row.error);
        assert!(
            row.received > 0,
            "{}: the receiver counted nothing",
            row.name
        );
        assert!(
            row.sent >= row.received / 2,
            "{}: sent {} < received {}",
            row.name,
            row.sent,
            row.received
        );
        ran += 1;
    }
    // offlow: AF_PACKET and AF_XDP, 1 and 2 workers each.
    let expect = 5 + if args.offlow_bin.is_some() { 4 } else { 0 };
    assert_eq!(ran, expect, "rows run: {:?}", report.rows);

    let line = report.to_json().to_string();
    assert!(!line.contains('\n'), "the JSON object is one line");
    let v: serde_json::Value = serde_json::from_str(&line).expect("the JSON line parses");
    assert_eq!(v["experiment"], "forward");
    assert!(v["anchor_mpps"].as_f64().is_some_and(|a| a > 0.0));
    if args.offlow_bin.is_some() {
        let o = v["offlow_mpps"].as_f64().expect("offlow_mpps");
        let a = v["anchor_mpps"].as_f64().expect("anchor_mpps");
        let r = v["ratio"].as_f64().expect("ratio");
        assert!((r - o / a).abs() < 1e-9);
    }
    assert_eq!(v["rows"].as_array().map(Vec::len), Some(report.rows.len()));
}

/// The CLI wiring: `offlow bench forward --json` prints the object last.
#[test]
fn cli_prints_json_last() {
    if !can_run() {
        return;
    }
    let Some(bin) = offlow_bin() else {
        eprintln!("NOTICE: no offlow binary next to the test executable: CLI test skipped");
        return;
    };
    let out = Command::new(bin)
        .args([
            "bench",
            "forward",
            "--rows",
            "direct",
            "--seconds",
            "0.3",
            "--warmup",
            "0.1",
            "--json",
        ])
        .output()
        .expect("offlow runs");
    assert!(
        out.status.success(),
        "offlow bench forward: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().expect("output");
    let v: serde_json::Value = serde_json::from_str(last).expect("last line is JSON");
    assert_eq!(v["experiment"], "forward");
    assert_eq!(v["rows"][0]["kind"], "direct");
    assert!(v["rows"][0]["received"].as_u64().is_some_and(|n| n > 0));
}
