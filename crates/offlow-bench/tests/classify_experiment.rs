//! End-to-end runs of the `bench classify` experiment, in process, on tiny
//! rule sets (no timing assertions).

use std::path::{Path, PathBuf};

use clap::Parser;
use offlow_bench::classify::{self, ClassifyArgs};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: ClassifyArgs,
}

fn args(extra: &[&str]) -> ClassifyArgs {
    let argv = std::iter::once("classify").chain(extra.iter().copied());
    Cli::try_parse_from(argv).expect("valid arguments").args
}

/// A fresh scratch directory for one test.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "offlow-classify-test-{}-{name}",
        std::process::id()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

// Rule 0 (highest priority) shadows part of rule 1; rule 2 catches all TCP.
const RULES: &str = "\
@10.0.0.0/8 0.0.0.0/0 0 : 65535 80 : 80 0x06/0xFF
@10.1.0.0/16 0.0.0.0/0 0 : 65535 0 : 1023 0x00/0x00
@0.0.0.0/0 0.0.0.0/0 0 : 65535 0 : 65535 0x06/0xFF
";

// sip dip sp dp proto first-match (1-based; 0 = none).
fn trace_line(sip: [u8; 4], dp: u16, proto: u8, id: u32) -> String {
    format!(
        "{} 167772161 1234 {dp} {proto} {id}\n",
        u32::from_be_bytes(sip)
    )
}

fn write_set(dir: &Path, wrong_id: bool) -> (PathBuf, PathBuf) {
    let rules = dir.join("rules");
    std::fs::write(&rules, RULES).unwrap();
    let mut t = String::new();
    t += &trace_line([10, 1, 2, 3], 80, 6, 1);
    t += &trace_line([10, 1, 2, 3], 22, 17, 2);
    t += &trace_line([10, 1, 2, 3], 8080, 6, 3);
    t += &trace_line([11, 0, 0, 1], 22, 17, if wrong_id { 3 } else { 0 });
    let trace = dir.join("trace");
    std::fs::write(&trace, t).unwrap();
    (rules, trace)
}

#[test]
fn tiny_set_runs_verifies_and_reports_json() {
    let d = scratch("ok");
    let (rules, trace) = write_set(&d, false);
    let a = args(&[
        "--rules",
        rules.to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
        "--classifier",
        "linear",
        "--verify",
        "--updates",
        "--update-secs",
        "0.05",
        "--iters",
        "3",
        "--batch",
        "3",
    ]);
    let r = classify::run(&a).unwrap();
    assert_eq!(r.rules, 3);
    assert_eq!(r.headers, 4);
    assert_eq!(r.lookups, 12, "3 full passes over 4 headers");
    let v = r.verify.as_ref().unwrap();
    assert!(v.ok(), "{v:?}");
    assert_eq!(v.trace_mismatches, Some(0));
    assert_eq!(v.after_update_mismatches, Some(0));
    let u = r.updates.as_ref().unwrap();
    assert!(u.updates > 0 && u.updates_per_s > 0.0);
    assert_eq!(r.serving, "linear");
    assert!(r.compile_ms.is_none() && r.compiled.is_none());
    let j = r.to_json();
    assert_eq!(j["experiment"], "classify");
    assert_eq!(j["rules"], 3);
    assert_eq!(j["lookups"], 12);
    assert_eq!(j["cores"], 1);
    assert!(j["anchor_mpps"].is_null() && j["ratio"].is_null());
    assert!(j["offlow_mpps"].as_f64().is_some_and(|m| m > 0.0));
    assert!(j["build_ms"].is_number());
    assert!(classify::render(&r).contains("=> OK"));
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn wrong_trace_id_fails_verification() {
    let d = scratch("bad");
    let (rules, trace) = write_set(&d, true);
    let a = args(&[
        "--rules",
        rules.to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
        "--classifier",
        "linear",
        "--verify",
        "--iters",
        "1",
    ]);
    let r = classify::run(&a).unwrap();
    let v = r.verify.as_ref().unwrap();
    assert!(!v.ok());
    assert_eq!(v.trace_mismatches, Some(1));
    assert!(v.examples[0].contains("header 4"), "{:?}", v.examples);
    assert!(classify::main(&a).is_err(), "main must fail on a mismatch");
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn generated_headers_when_no_trace() {
    let d = scratch("gen");
    let (rules, _) = write_set(&d, false);
    let a = args(&[
        "--rules",
        rules.to_str().unwrap(),
        "--classifier",
        "linear",
        "--headers",
        "300",
        "--verify",
        "--min-secs",
        "0.01",
    ]);
    let r = classify::run(&a).unwrap();
    assert_eq!(r.headers, 300);
    assert!(r.trace_file.starts_with("generated"));
    assert!(r.verify.unwrap().ok());
    assert!(r.lookups > 0);
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn embedded_default_loads() {
    let a = args(&[]);
    let (set, trace, rn, tn) = classify::load_inputs(&a).unwrap();
    assert_eq!(set.rules.len(), 752);
    assert_eq!(trace.headers.len(), 8140);
    assert_eq!(
        (rn.as_str(), tn.as_str()),
        ("embedded:acl1", "embedded:acl1_trace")
    );
}

/// With dpdk-test-acl installed, every algorithm's answers agree with the
/// oracle on the tiny set and the runner parses a rate for each.
#[test]
fn dpdk_agrees_on_tiny_set() {
    let bin = Path::new(offlow_bench::dpdk::DEFAULT_BIN);
    if !bin.exists() {
        eprintln!("NOTICE: {} absent, test skipped", bin.display());
        return;
    }
    let d = scratch("dpdk");
    let (rules, trace) = write_set(&d, false);
    let a = args(&[
        "--rules",
        rules.to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
        "--classifier",
        "linear",
        "--verify",
        "--vs-dpdk",
        "--dpdk-iters",
        "10",
        "--iters",
        "1",
    ]);
    let r = classify::run(&a).unwrap();
    let v = r.verify.as_ref().unwrap();
    assert!(v.ok(), "{v:?}");
    assert_eq!(v.dpdk_mismatches.len(), r.dpdk.len());
    assert!(r.dpdk.iter().any(|x| x.alg == "scalar"));
    for x in &r.dpdk {
        assert_eq!(x.rules_loaded, 3);
        assert_eq!(x.packets, 40);
    }
    let j = r.to_json();
    assert!(j["anchor_mpps"].as_f64().is_some());
    assert!(j["ratio"].as_f64().is_some());
    std::fs::remove_dir_all(d).unwrap();
}

/// The default classifier (auto: compiled to an RFC snapshot on acl1)
/// agrees with the oracle and with the trace on the embedded acl1 workload,
/// before and after concurrent updates (the snapshot keeps serving through
/// them: every removed rule comes back).
#[test]
fn default_classifier_verifies_on_embedded_acl1() {
    let a = args(&[
        "--verify",
        "--updates",
        "--update-secs",
        "0.05",
        "--iters",
        "1",
    ]);
    assert_eq!(a.classifier, classify::ClassifierKind::Auto);
    let r = classify::run(&a).unwrap();
    assert_eq!(r.serving, "rfc", "{:?}", r.compiled);
    assert!(matches!(
        r.compiled,
        Some(offlow_classifier::Compiled::Rfc { table_bytes, parts, .. }) if table_bytes > 0 && parts == 1
    ));
    assert!(r.compile_ms.is_some());
    let u = r.updates.as_ref().unwrap();
    assert_eq!(u.serving_idle_compiled, Some("rfc"));
    assert_eq!((u.serving_idle, u.serving_updating), ("rfc", "rfc"));
    assert!(u.lookup_mpps_idle_compiled.is_some_and(|m| m > 0.0));
    assert_eq!(r.lookups, 8140);
    let v = r.verify.as_ref().unwrap();
    assert!(v.ok(), "{v:?}");
    assert_eq!(v.oracle_mismatches, 0);
    assert_eq!(v.trace_mismatches, Some(0));
    assert_eq!(v.after_update_mismatches, Some(0));
}

/// The `--updates` measurement on a small set, for each kind: every phase
/// did work, the final classifier still answers like the oracle, and the
/// JSON carries every field (speed is never asserted).
#[test]
fn updates_measurement_structure() {
    let d = scratch("updates");
    let (rules, trace) = write_set(&d, false);
    for kind in ["tuple", "auto", "linear"] {
        let a = args(&[
            "--rules",
            rules.to_str().unwrap(),
            "--trace",
            trace.to_str().unwrap(),
            "--classifier",
            kind,
            "--verify",
            "--updates",
            "--update-secs",
            "0.05",
            "--publish-every",
            "8",
            "--iters",
            "1",
        ]);
        let r = classify::run(&a).unwrap();
        let v = r.verify.as_ref().unwrap();
        assert!(v.ok(), "{kind}: {v:?}");
        assert_eq!(v.after_update_mismatches, Some(0), "{kind}");
        let u = r.updates.as_ref().unwrap();
        assert!(u.updates >= 64 && u.updates % 2 == 0, "{kind}: {u:?}");
        assert!(u.publishes >= u.updates / 8 - 1, "{kind}: {u:?}");
        assert!(
            u.lookup_mpps_idle > 0.0 && u.lookup_mpps_updating > 0.0,
            "{u:?}"
        );
        assert_eq!(u.publish_every, 8);
        assert_eq!(u.lookup_mpps_idle_compiled.is_some(), kind == "auto");
        assert!(u.lookup_mpps_writer_spinning.is_none());
        let j = r.to_json();
        for f in [
            "updates_per_s",
            "lookup_mpps_idle",
            "lookup_mpps_updating",
            "lookup_ratio",
        ] {
            assert!(j[f].as_f64().is_some_and(|x| x > 0.0), "{kind}: {f} in {j}");
        }
        assert_eq!(j["publish_every"], 8);
        assert_eq!(j["serving"], if kind == "auto" { "tuple" } else { kind });
        if kind == "auto" {
            // 3 rules: below the RFC minimum, so nothing is compiled.
            assert_eq!(j["compiled"]["result"], "none", "{j}");
            assert!(j["compile_ms"].is_number());
            assert!(j["lookup_mpps_idle_compiled"].as_f64().is_some());
        } else {
            assert!(j["compiled"].is_null() && j["lookup_mpps_idle_compiled"].is_null());
        }
        assert!(classify::render(&r).contains("during updates"));
    }
    std::fs::remove_dir_all(d).unwrap();
}

/// A capped writer stays near its cap (a loose upper bound only: the cap
/// must not be exceeded by much, whatever the machine's speed).
#[test]
fn update_rate_cap_is_respected() {
    let d = scratch("cap");
    let (rules, trace) = write_set(&d, false);
    let a = args(&[
        "--rules",
        rules.to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
        "--classifier",
        "tuple",
        "--updates",
        "--spin-control",
        "--update-secs",
        "0.1",
        "--update-rate",
        "2000",
        "--update-rounds",
        "2",
        "--iters",
        "1",
    ]);
    let r = classify::run(&a).unwrap();
    let u = r.updates.as_ref().unwrap();
    assert_eq!(u.target_rate, 2000);
    assert!(u.lookup_mpps_writer_spinning.is_some_and(|m| m > 0.0));
    assert!(r.to_json()["lookup_mpps_writer_spinning"].is_number());
    // Two rounds of 0.1 s at 2000 ops/s are 2 x 200 ops; each update phase
    // ends on a 64-op boundary.
    assert_eq!(u.round_ratios.len(), 2);
    assert!(u.updates <= 2 * (200 + 64), "{u:?}");
    std::fs::remove_dir_all(d).unwrap();
}
