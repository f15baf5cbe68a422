//! Real controllers driving `offlow run` over veth ports: os-ken's
//! `simple_switch_13` app and Faucet (one datapath, one VLAN). Each test
//! builds a switch namespace and two host namespaces (unique names, deleted
//! on the way out, pass or fail), starts the controller on a free loopback
//! port, points `offlow run --controller` at it, waits until the controller
//! has programmed the switch, then checks ping both ways, a 1 MiB TCP
//! transfer (bytes verified) and UDP, and that the controller's flows show
//! in `ovs-ofctl dump-flows` (over a second, passive OpenFlow listener).
//!
//! Needs root, `ip`, `ethtool`, `ovs-ofctl` and the Python environments of
//! `scripts/controllers-venv.sh` (the test runs it; it is a no-op once
//! done; `OFFLOW_VENV` moves them). Without them the tests print a notice
//! and pass, unless `CI` is set (then they fail).
//!
//! Every child (controller, switch) runs in its own process group, killed
//! as a group on drop: Faucet re-executes itself as `osken-manager`, and a
//! panicking test must leave nothing running. Each test is bounded: every
//! wait has a deadline and the whole run (after the one-time venv build)
//! must finish within [`TEST_BUDGET`].

use std::process::Command;
use std::time::{Duration, Instant};

#[allow(dead_code)] // each test file uses a subset of the harness
mod common;

use common::controller::{venv, wait_listening, Proc, Scratch, PROGRAM_WAIT};
use common::{flow_lines, free_ports, number_after, ofctl_at, tcp_transfer, udp, Net};

/// The hosts' offloads: software segmentation, so frames stay within the
/// MTU the workers' buffers hold (see the demo).
const OFFLOADS: &[&str] = &["tso", "off", "gso", "off"];

/// Longest a test may take once the environments exist.
const TEST_BUDGET: Duration = Duration::from_secs(60);

/// What the tests are called in skip notices and CI failures.
const WHAT: &str = "the controller tests";

/// `ovs-ofctl dump-flows` over the switch's passive listener.
fn dump_flows(listen_port: u16) -> String {
    ofctl(listen_port, "dump-flows")
}

/// One `ovs-ofctl` command over the switch's passive listener (a short
/// `--timeout`: it polls while the controller programs the switch).
fn ofctl(listen_port: u16, command: &str) -> String {
    ofctl_at(Duration::from_secs(5), listen_port, &[command])
}

/// Poll dump-flows until `ready` holds (bounded by [`PROGRAM_WAIT`]).
fn wait_flows(sw: &mut Proc, ctl: &mut Proc, listen_port: u16, ready: impl Fn(&str) -> bool) {
    let deadline = Instant::now() + PROGRAM_WAIT;
    loop {
        sw.check_alive();
        ctl.check_alive();
        let flows = dump_flows(listen_port);
        if ready(&flows) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the controller did not program the switch: {flows}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `offlow run` with both ports, connecting to the controller on
/// `ctl_port` and listening for ovs-ofctl on `listen_port`.
fn start_switch(net: &Net, ctl_port: u16, listen_port: u16, scratch: &Scratch) -> Proc {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_offlow"));
    cmd.args(["run", "--controller"])
        .arg(format!("tcp:127.0.0.1:{ctl_port}"))
        .arg("--listen")
        .arg(format!("ptcp:{listen_port}:127.0.0.1"))
        .args(["--netns", &net.sw, "--port", &net.ports[0]])
        .args(["--port", &net.ports[1]])
        .env(
            "RUST_LOG",
            std::env::var("OFFLOW_TEST_LOG").unwrap_or_else(|_| "info".into()),
        );
    let mut p = Proc::spawn("offlow run", cmd, &scratch.file("offlow.log"));
    wait_listening(&mut p, listen_port);
    p
}

/// The traffic checks every controller must pass.
/// (Failures show the switch's port counters: where frames were lost.)
fn traffic(net: &Net, listen_port: u16) {
    let ports = || ofctl(listen_port, "dump-ports");
    assert!(net.ping(0, "10.0.0.2", 3), "ping a -> b: {}", ports());
    assert!(net.ping(1, "10.0.0.1", 3), "ping b -> a: {}", ports());
    assert!(
        tcp_transfer(net, 1 << 20),
        "1 MiB of TCP arrives intact: {}",
        ports()
    );
    let got = udp(net, 500, 1, 32);
    assert!(got >= 490, "UDP: {got} of 500 arrived: {}", ports());
}

#[test]
fn osken_simple_switch_13_programs_the_switch_and_hosts_talk() {
    let Some(venv) = venv(WHAT) else { return };
    let t0 = Instant::now();
    let net = Net::new("ofc", OFFLOADS);
    let scratch = Scratch::new("osken");
    let [ctl_port, listen_port] = free_ports();

    let mut cmd = Command::new(venv.join("osken/bin/osken-manager"));
    cmd.args(["--ofp-listen-host", "127.0.0.1", "--ofp-tcp-listen-port"])
        .arg(ctl_port.to_string())
        .arg(venv.join("simple_switch_13.py"));
    let mut ctl = Proc::spawn("osken-manager", cmd, &scratch.file("osken.log"));
    wait_listening(&mut ctl, ctl_port);
    let mut sw = start_switch(&net, ctl_port, listen_port, &scratch);

    // simple_switch_13 installs its table-miss entry on FEATURES_REPLY.
    wait_flows(&mut sw, &mut ctl, listen_port, |f| {
        f.contains("priority=0 actions=CONTROLLER:65535")
    });
    traffic(&net, listen_port);

    let flows = dump_flows(listen_port);
    eprintln!("flows after the traffic:\n{flows}");
    let lines = flow_lines(&flows);
    // The app learned both hosts: one priority-1 dl_dst flow per
    // direction, matched on in_port, output to the other port.
    let learned: Vec<&&str> = lines
        .iter()
        .filter(|l| l.contains("priority=1,") && l.contains("dl_dst="))
        .collect();
    assert!(
        learned
            .iter()
            .any(|l| l.contains("in_port=1") && l.contains("actions=output:2")),
        "{flows}"
    );
    assert!(
        learned
            .iter()
            .any(|l| l.contains("in_port=2") && l.contains("actions=output:1")),
        "{flows}"
    );
    // The TCP and UDP traffic crossed on the learned flows, not by
    // packet-in/packet-out.
    let busiest = learned
        .iter()
        .filter_map(|l| number_after(l, "n_packets="))
        .max()
        .unwrap_or(0);
    assert!(busiest >= 500, "learned flows carried the traffic: {flows}");
    assert!(
        flows.contains("priority=0 actions=CONTROLLER:65535"),
        "{flows}"
    );
    ctl.check_alive();
    sw.check_alive();
    assert!(t0.elapsed() < TEST_BUDGET, "took {:?}", t0.elapsed());
}

#[test]
fn faucet_programs_the_switch_and_hosts_talk() {
    let Some(venv) = venv(WHAT) else { return };
    let t0 = Instant::now();
    let net = Net::new("ofc", OFFLOADS);
    let scratch = Scratch::new("faucet");
    let [ctl_port, listen_port, prom_port] = free_ports();

    let config = scratch.file("faucet.yaml");
    std::fs::write(
        &config,
        "vlans:\n  office:\n    vid: 100\n\
         dps:\n  sw1:\n    dp_id: 1\n    hardware: \"Open vSwitch\"\n    interfaces:\n\
         \x20     1:\n        native_vlan: office\n\
         \x20     2:\n        native_vlan: office\n",
    )
    .expect("faucet.yaml");
    let bin = venv.join("faucet/bin");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new(bin.join("faucet"));
    cmd.args([
        "--ryu-ofp-listen-host",
        "127.0.0.1",
        "--ryu-ofp-tcp-listen-port",
    ])
    .arg(ctl_port.to_string())
    .env("PATH", path)
    .env("FAUCET_CONFIG", &config)
    .env("FAUCET_LOG", scratch.file("faucet.log"))
    .env("FAUCET_EXCEPTION_LOG", scratch.file("faucet-exception.log"))
    .env("FAUCET_PROMETHEUS_ADDR", "127.0.0.1")
    .env("FAUCET_PROMETHEUS_PORT", prom_port.to_string());
    let mut ctl = Proc::spawn("faucet", cmd, &scratch.file("faucet-stdout.log"));
    wait_listening(&mut ctl, ctl_port);
    let mut sw = start_switch(&net, ctl_port, listen_port, &scratch);

    // Faucet's VLAN table tags untagged frames from its ports; its flood
    // table untags them on the way out.
    wait_flows(&mut sw, &mut ctl, listen_port, |f| {
        f.contains("push_vlan:0x8100") && f.contains("pop_vlan")
    });
    traffic(&net, listen_port);

    let flows = dump_flows(listen_port);
    eprintln!("flows after the traffic:\n{flows}");
    let lines = flow_lines(&flows);
    let tables: std::collections::BTreeSet<u64> = lines
        .iter()
        .filter_map(|l| number_after(l, "table="))
        .collect();
    assert!(tables.len() >= 3, "multi-table pipeline: {flows}");
    assert!(flows.contains("goto_table:"), "{flows}");
    // Tagging on the way in, per port, with VLAN 100 (0x1000 | 100).
    for port in [1, 2] {
        assert!(
            lines.iter().any(|l| l.contains(&format!("in_port={port}"))
                && l.contains("push_vlan:0x8100")
                && l.contains("set_field:4196->vlan_vid")),
            "port {port} tagged: {flows}"
        );
    }
    assert!(lines.iter().any(|l| l.contains("pop_vlan")), "{flows}");
    // Faucet learned both hosts: eth_dst flows for their MACs that untag
    // and output to their ports.
    for port in [1, 2] {
        assert!(
            lines.iter().any(|l| l.contains("dl_dst=")
                && l.contains("dl_vlan=100")
                && l.contains(&format!("pop_vlan,output:{port}"))),
            "learned host on port {port}: {flows}"
        );
    }
    ctl.check_alive();
    sw.check_alive();
    assert!(t0.elapsed() < TEST_BUDGET, "took {:?}", t0.elapsed());
}
