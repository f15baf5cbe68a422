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

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

#[allow(dead_code)] // each test file uses a subset of the harness
mod common;

use common::{
    can_run, flow_lines, free_ports, number_after, ofctl_at, skip_or_fail, tcp_transfer, udp, Net,
};

/// Makes scratch directory names unique within this process.
static SEQ: AtomicU32 = AtomicU32::new(0);

/// The hosts' offloads: software segmentation, so frames stay within the
/// MTU the workers' buffers hold (see the demo).
const OFFLOADS: &[&str] = &["tso", "off", "gso", "off"];

/// Longest a test may take once the environments exist.
const TEST_BUDGET: Duration = Duration::from_secs(60);
/// Longest wait for a controller to listen, or to program the switch.
const PROGRAM_WAIT: Duration = Duration::from_secs(20);

/// What the tests are called in skip notices and CI failures.
const WHAT: &str = "the controller tests";

/// The environments' root, built once per test process (the script also
/// locks against other processes); `None` after a skip notice (root,
/// `ovs-ofctl`, `ethtool` and `ip` are checked first).
fn venv() -> Option<PathBuf> {
    if !can_run(WHAT, true, &["ovs-ofctl", "ethtool", "ip"]) {
        return None;
    }
    static ROOT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let r = ROOT.get_or_init(|| {
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../scripts/controllers-venv.sh"
        );
        let out = Command::new("bash")
            .arg(script)
            .output()
            .map_err(|e| format!("{script}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "{script} failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(std::env::var_os("OFFLOW_VENV")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/var/cache/offlow/venv")))
    });
    match r {
        Ok(p) => Some(p.clone()),
        Err(why) => {
            skip_or_fail(WHAT, why);
            None
        }
    }
}

/// A scratch directory for configs and logs. Removed on drop after a
/// pass; kept (and its logs printed) after a failure, or always with
/// `OFFLOW_TEST_KEEP_LOGS` set (`OFFLOW_TEST_LOG` sets the switch's
/// `RUST_LOG`, default `info`).
struct Scratch(PathBuf);

impl Scratch {
    fn new(kind: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!(
            "offlow-ctl-{kind}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Scratch(dir)
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::env::var_os("OFFLOW_TEST_KEEP_LOGS").is_some() {
            eprintln!("logs kept in {}", self.0.display());
        } else if std::thread::panicking() {
            eprintln!("logs kept in {}", self.0.display());
            if let Ok(d) = std::fs::read_dir(&self.0) {
                for e in d.flatten() {
                    let text = std::fs::read_to_string(e.path()).unwrap_or_default();
                    let tail: Vec<&str> = text.lines().rev().take(40).collect();
                    eprintln!("---- {} (last 40 lines)", e.path().display());
                    for l in tail.into_iter().rev() {
                        eprintln!("{l}");
                    }
                }
            }
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// A child in its own process group; the whole group is killed on drop.
struct Proc {
    child: Child,
    what: &'static str,
}

impl Proc {
    fn spawn(what: &'static str, mut cmd: Command, log: &Path) -> Proc {
        let out = std::fs::File::create(log).expect("log file");
        let err = out.try_clone().expect("log file");
        let child = cmd
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {what}: {e}"));
        Proc { child, what }
    }

    fn check_alive(&mut self) {
        if let Ok(Some(st)) = self.child.try_wait() {
            panic!("{} exited early: {st}", self.what);
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // The child leads its group (process_group(0)): its pid is the
        // group id.
        let pgid = self.child.id() as libc::pid_t;
        // SAFETY: kill(2) on a process group this test created.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

/// Whether something listens on 127.0.0.1:`port` (read from
/// /proc/net/tcp, so the probe does not itself open an OpenFlow session).
fn listening(port: u16) -> bool {
    let want = format!("0100007F:{port:04X}");
    std::fs::read_to_string("/proc/net/tcp")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3 && f[1] == want && f[3] == "0A"
        })
}

fn wait_listening(p: &mut Proc, port: u16) {
    let deadline = Instant::now() + PROGRAM_WAIT;
    while !listening(port) {
        p.check_alive();
        assert!(
            Instant::now() < deadline,
            "{} did not listen on {port}",
            p.what
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

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
    let Some(venv) = venv() else { return };
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
    let Some(venv) = venv() else { return };
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
