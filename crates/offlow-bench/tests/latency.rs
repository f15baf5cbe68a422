//! `offlow bench latency`, short: offlow with AF_PACKET ports and the
//! Linux-bridge baseline, two frame sizes, 300 probes each in two passes
//! over the switches (a row joins its passes' probes); then the
//! bridge and the two floors (the bare AF_XDP and XDP reflectors) at one
//! frame size and under one background load. Every probe must be accounted for (sent =
//! received + lost, nearly all received), and the timestamps must be
//! monotonic (tx ≤ rx for every probe; send times strictly increasing in
//! sequence order). The two runs take turns (a lock): they share the
//! interrupt flag and the machine's two cores.
//!
//! Needs root, `ip`, `ethtool` and `ovs-ofctl` (rules into offlow); without
//! them the test prints a notice and passes, unless `CI` is set (CI runs as
//! root with the packages installed). The offlow row needs the `offlow`
//! binary next to this test executable (built by `cargo test --workspace`);
//! when absent only the bridge row runs, with a notice. The run is bounded
//! to 60 s: past that it is interrupted (so it removes what it made) and
//! the test fails.

mod common;

use std::process::Command;
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::Duration;

use common::offlow_bin;
use offlow_bench::latency::{self, LatencyArgs, LatencyReport, Sweep, SwitchKind};
use offlow_bench::topo::INTERRUPTED;

fn have(cmd: &str, arg: &str) -> bool {
    Command::new(cmd).arg(arg).output().is_ok()
}

fn can_run() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let ip = have("ip", "-V");
    let ethtool = have("ethtool", "--version");
    let ofctl = have("ovs-ofctl", "--version");
    if root && ip && ethtool && ofctl {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must run the latency bench test: root={root} ip={ip} ethtool={ethtool} ovs-ofctl={ofctl}"
    );
    eprintln!(
        "NOTICE: skipping latency bench test (root={root} ip={ip} ethtool={ethtool} ovs-ofctl={ofctl})"
    );
    false
}

const PROBES: usize = 300;

/// One experiment at a time in this binary.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Run `args` within `limit`, or interrupt it (so its guards remove the
/// namespaces) and fail.
fn run_bounded(args: &LatencyArgs, limit: Duration) -> LatencyReport {
    let (tx, rx) = std::sync::mpsc::channel();
    let worker = {
        let args = args.clone();
        std::thread::spawn(move || {
            let _ = tx.send(latency::run(&args));
        })
    };
    let report = match rx.recv_timeout(limit) {
        Ok(r) => r.expect("the experiment runs"),
        Err(_) => {
            INTERRUPTED.store(true, Ordering::Relaxed);
            let _ = rx.recv_timeout(Duration::from_secs(20));
            panic!("the latency sweep took more than {limit:?}");
        }
    };
    worker.join().expect("the experiment thread");
    report
}

/// Every probe of every row accounted for, timestamps monotonic.
fn check_probes(report: &LatencyReport, probes: usize) {
    for r in &report.results {
        let what = format!("{} {}", r.switch.name(), r.config.label());
        assert!(r.error.is_none(), "{what}: {:?}", r.error);
        assert_eq!(r.sent, probes, "{what}");
        assert_eq!(r.records.len(), r.sent, "{what}");
        assert_eq!(r.sent, r.received + r.lost, "{what}");
        let back = r.records.iter().filter(|p| p.rx_ns.is_some()).count();
        assert_eq!(back, r.received, "{what}");
        assert!(
            r.received * 10 >= r.sent * 9,
            "{what}: only {} of {} probes came back",
            r.received,
            r.sent
        );
        for (i, p) in r.records.iter().enumerate() {
            assert_eq!(p.seq, i as u64, "{what}");
            if let Some(rx) = p.rx_ns {
                assert!(p.tx_ns <= rx, "{what}: probe {i} received before sent");
            }
        }
        for w in r.records.windows(2) {
            assert!(
                w[0].tx_ns < w[1].tx_ns,
                "{what}: send times not increasing at probe {}",
                w[1].seq
            );
        }
        let s = r.rtt.expect("an RTT summary");
        assert!(s.min <= s.p50 && s.p50 <= s.p99 && s.p99 <= s.p999 && s.p999 <= s.max);
    }
}

#[test]
fn every_probe_is_accounted_for_and_timestamps_are_monotonic() {
    if !can_run() {
        return;
    }
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let out = std::env::temp_dir().join(format!("offlow-lat-it-{}", std::process::id()));
    let mut args = LatencyArgs {
        probes: PROBES,
        sweeps: vec![Sweep::Sizes],
        sizes: vec![72, 1526],
        switches: vec![SwitchKind::OfflowAfpacket, SwitchKind::LinuxBridge],
        // Two passes of 150: a row joins them, numbered on.
        passes: 2,
        warmup_ms: 200,
        out: out.clone(),
        ..LatencyArgs::default()
    };
    match offlow_bin() {
        Some(b) => args.offlow_bin = Some(b),
        None => {
            eprintln!("NOTICE: no offlow binary next to the test executable: offlow row left out");
            args.switches = vec![SwitchKind::LinuxBridge];
        }
    }
    let expect_rows = 2 * args.switches.len();
    let report = run_bounded(&args, Duration::from_secs(60));
    assert_eq!(report.results.len(), expect_rows);
    check_probes(&report, PROBES);
    // The offlow rows have a processing delay against the bridge baseline.
    for r in report
        .results
        .iter()
        .filter(|r| r.switch != SwitchKind::LinuxBridge)
    {
        assert!(
            r.baseline_ns.is_some() && r.proc_ns.is_some(),
            "{:?}",
            r.switch
        );
    }
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn the_bridge_and_the_floors_loop_probes_under_load() {
    if !can_run() {
        return;
    }
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let args = LatencyArgs {
        probes: 200,
        sweeps: vec![Sweep::Sizes, Sweep::Load],
        sizes: vec![72],
        loads: vec![50],
        switches: vec![
            SwitchKind::LinuxBridge,
            SwitchKind::AfxdpFloor,
            SwitchKind::XdpFloor,
        ],
        passes: 1,
        warmup_ms: 100,
        ..LatencyArgs::default()
    };
    let report = run_bounded(&args, Duration::from_secs(90));
    // Per switch: 72 B unloaded, 72 B at 50 %.
    assert_eq!(report.results.len(), 6);
    check_probes(&report, 200);
    let loaded: Vec<_> = report
        .results
        .iter()
        .filter(|r| r.config.sweep == Sweep::Load)
        .collect();
    assert_eq!(loaded.len(), 3);
    for r in loaded {
        assert!(
            r.background_pps.is_some_and(|p| p > 0.0),
            "{}: no background stream",
            r.switch.name()
        );
        // Against the unloaded bridge: a Δt_proc, bridge included.
        assert!(r.proc_ns.is_some(), "{}", r.switch.name());
    }
    assert_eq!(report.max_pps.len(), 3, "a maximum per switch");
}
