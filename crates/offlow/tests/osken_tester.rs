//! os-ken's OpenFlow Switch Test Tool against offlow, CI's subset: the case
//! files listed in `scripts/osken-ci-cases.txt` (a representative part of
//! the 991 OpenFlow 1.3 cases, all of which offlow passes) run through
//! `scripts/osken-switch-test.sh` (its own namespace with offlow as the
//! target, datapath id 1, and a private Open vSwitch bridge as the tester,
//! datapath id 2; everything removed on exit), and every case must pass.
//! The full run and its per-folder figures: README, "Conformance", and
//! BENCHMARKS.md.
//!
//! Needs root, the Open vSwitch binaries and the os-ken venv (the script
//! builds it with `scripts/controllers-venv.sh`, from PyPI); without them a
//! notice and a pass, unless `CI` is set.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

#[allow(dead_code)] // each test file uses a subset of the harness
mod common;

use common::{can_run, run_bounded};

#[test]
fn switch_test_tool_subset_passes() {
    if !can_run(
        "the os-ken switch test tool",
        true,
        &[
            "ovs-vswitchd",
            "ovsdb-server",
            "ovs-vsctl",
            "ovsdb-tool",
            "python3",
        ],
    ) {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = std::env::temp_dir().join(format!("offlow-osken-{}", std::process::id()));
    let mut cmd = Command::new("bash");
    cmd.arg(root.join("scripts/osken-switch-test.sh"))
        .args(["--folders", "match,action", "--timeout", "300", "--cases"])
        .arg(root.join("scripts/osken-ci-cases.txt"))
        .arg("--offlow")
        .arg(env!("CARGO_BIN_EXE_offlow"))
        .arg("--out")
        .arg(&out);
    let run = run_bounded(cmd, Duration::from_secs(900));
    let stdout = String::from_utf8_lossy(&run.stdout);
    let results = std::fs::read_to_string(out.join("results.tsv")).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&out);
    assert!(
        run.status.success(),
        "the script failed: {stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let cases: Vec<&str> = results.lines().collect();
    let failed: Vec<&str> = cases
        .iter()
        .copied()
        .filter(|l| l.split('\t').nth(2) != Some("OK"))
        .collect();
    eprintln!(
        "os-ken switch test tool, CI subset: {} cases, {} failed",
        cases.len(),
        failed.len()
    );
    // 6 action files of 3 cases, 5 match files of 9, and the set-field
    // files of eth_type (3), ip_proto on IPv4 (4) and mpls_bos (3).
    assert_eq!(
        cases.len(),
        6 * 3 + 5 * 9 + 3 + 4 + 3,
        "cases run: {stdout}"
    );
    assert!(failed.is_empty(), "failed cases:\n{}", failed.join("\n"));
    assert!(
        stdout.contains(&format!("total: OK {} / {}", cases.len(), cases.len())),
        "{stdout}"
    );
}
