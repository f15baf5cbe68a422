//! `offlow bench latency`, short: offlow with AF_PACKET ports and the
//! Linux-bridge baseline, two frame sizes, 300 probes each. Every probe
//! must be accounted for (sent = received + lost, nearly all received),
//! and the timestamps must be monotonic (tx ≤ rx for every probe; send
//! times strictly increasing in sequence order).
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
use std::time::Duration;

use common::offlow_bin;
use offlow_bench::latency::{self, LatencyArgs, Sweep, SwitchKind};
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

#[test]
fn every_probe_is_accounted_for_and_timestamps_are_monotonic() {
    if !can_run() {
        return;
    }
    let out = std::env::temp_dir().join(format!("offlow-lat-it-{}", std::process::id()));
    let mut args = LatencyArgs {
        probes: PROBES,
        sweeps: vec![Sweep::Sizes],
        sizes: vec![72, 1526],
        switches: vec![SwitchKind::OfflowAfpacket, SwitchKind::LinuxBridge],
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
    let (tx, rx) = std::sync::mpsc::channel();
    let worker = {
        let args = args.clone();
        std::thread::spawn(move || {
            let _ = tx.send(latency::run(&args));
        })
    };
    let report = match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(r) => r.expect("the experiment runs"),
        Err(_) => {
            // Stop it so its guards remove the namespaces, then fail.
            INTERRUPTED.store(true, Ordering::Relaxed);
            let _ = rx.recv_timeout(Duration::from_secs(20));
            panic!("the latency sweep took more than 60 s");
        }
    };
    worker.join().expect("the experiment thread");

    assert_eq!(report.results.len(), expect_rows);
    for r in &report.results {
        let what = format!("{} {}", r.switch.name(), r.config.label());
        assert!(r.error.is_none(), "{what}: {:?}", r.error);
        assert_eq!(r.sent, PROBES, "{what}");
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
