//! Ports that come back: `offlow run` with a port whose interface is
//! missing at start, then created; and a port whose interface is deleted
//! while the switch runs, then created again. Each time the switch must
//! notice within a few link polls, announce the port's state
//! (PORT_STATUS, `dump-ports-desc`), keep forwarding between the other
//! ports, and forward through the port again once its interface is back.
//!
//! Topology (the shared `Net`): a switch namespace with three veth ports
//! and three host namespaces holding their peers (`eth0`,
//! 10.0.0.1-3/24). The switch runs standalone (MAC
//! learning), once with AF_PACKET ports and two workers (re-opened
//! sockets form a fanout group again), once with AF_XDP ports (a
//! re-opened port attaches its program to the new interface).
//!
//! Needs root, `ip`, `ethtool` and `ovs-ofctl`; without them the test
//! prints a notice and passes, unless `CI` is set (then it fails). Every
//! wait polls with a deadline of a few seconds; every namespace (and so
//! every veth) is deleted by a guard, pass or fail.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[allow(dead_code)] // each test file uses a subset of the harness
mod common;

use common::{can_run, first_number_after, sh, Daemon, Net};

/// Longest wait for the switch to notice an interface change (link state
/// is polled every second).
const NOTICE_WAIT: Duration = Duration::from_secs(6);

/// Hosts' offloads: software segmentation (see the `ports` tests).
const OFFLOADS: &[&str] = &["tso", "off", "gso", "off"];
/// AF_XDP does not flag partial checksums: the hosts finish their own.
const XDP_OFFLOADS: &[&str] = &["tso", "off", "gso", "off", "tx", "off"];

/// Ping host `to` from host `from` (up to 3 echoes); whether any reply
/// came. Retried once: the first echo after a topology change may go to a
/// MAC the switch has not learned yet.
fn ping(net: &Net, from: usize, to: usize) -> bool {
    let dst = format!("10.0.0.{}", to + 1);
    (0..2).any(|_| net.ping(from, &dst, 3))
}

/// An `ovs-ofctl monitor` on the switch, killed (and its control socket
/// removed) on drop.
struct Monitor {
    child: Option<Child>,
    unixctl: String,
}

impl Monitor {
    fn start(d: &Daemon) -> Monitor {
        let unixctl = format!(
            "{}/ofl-pf-monitor-{}-{}.ctl",
            std::env::temp_dir().display(),
            std::process::id(),
            d.port
        );
        let child = Command::new("ovs-ofctl")
            .args(["-O", "OpenFlow13", "--no-names", "monitor"])
            .arg(d.target())
            .arg("--timeout=50")
            // The default control directory belongs to the (maybe absent)
            // Open vSwitch daemon.
            .arg(format!("--unixctl={unixctl}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("ovs-ofctl monitor");
        Monitor {
            child: Some(child),
            unixctl,
        }
    }

    /// Stop it; everything it printed (stdout and stderr: where the
    /// messages go depends on the ovs-ofctl version).
    fn finish(mut self) -> String {
        let Some(mut c) = self.child.take() else {
            return String::new();
        };
        let _ = c.kill();
        let out = c.wait_with_output().expect("monitor output");
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_file(&self.unixctl);
    }
}

/// The `dump-ports-desc` block of port `number` named `name` (its header
/// line up to the next port's).
fn port_block(desc: &str, number: u32, name: &str) -> String {
    let header = format!("{number}({name}):");
    let mut lines = desc.lines().skip_while(|l| !l.contains(&header));
    let mut block: Vec<&str> = lines.next().into_iter().collect();
    block.extend(lines.take_while(|l| !l.contains("): addr:")));
    block.join("\n")
}

/// Up: neither administratively down nor without a link.
fn is_up(block: &str) -> bool {
    !block.is_empty() && !block.contains("PORT_DOWN") && !block.contains("LINK_DOWN")
}

/// Poll the switch's description of port `i + 1` until `want(block)`,
/// for at most [`NOTICE_WAIT`]; the last block seen.
fn wait_port(d: &Daemon, t: &Net, i: usize, what: &str, want: fn(&str) -> bool) -> String {
    let deadline = Instant::now() + NOTICE_WAIT;
    loop {
        let desc = d.ofctl(&["dump-ports-desc"]);
        let block = port_block(&desc, i as u32 + 1, &t.ports[i]);
        if want(&block) {
            return block;
        }
        assert!(
            Instant::now() < deadline,
            "port {} not {what} within {NOTICE_WAIT:?}:\n{desc}",
            i + 1
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Receive packets of port `number` per `dump-ports`.
fn rx_packets(d: &Daemon, number: u32) -> u64 {
    let out = d.ofctl(&["dump-ports", &number.to_string()]);
    first_number_after(&out, "rx pkts=")
}

/// Whether the switch side of port `i` has an XDP program attached.
fn xdp_attached(t: &Net, i: usize) -> bool {
    let link = sh("ip", &["-n", &t.sw, "-d", "link", "show", &t.ports[i]]);
    String::from_utf8_lossy(&link.stdout).contains("prog/xdp")
}

#[test]
fn af_packet_ports_missing_at_start_or_deleted_come_back() {
    if !can_run("the port failure test", true, &["ovs-ofctl", "ethtool"]) {
        return;
    }
    // Port 3's interface does not exist yet.
    let t = Net::with_hosts("ofp", OFFLOADS, 3, &[0, 1]);
    let ports = t.ports.clone();
    // Two workers: re-opened sockets also form a fanout group again.
    scenario(&t, &ports, &["--workers", "2"], |_, _| {});
}

/// The adaptive ring polls two sockets per port (the frames ring and the
/// blocks ring it spills into): a deleted interface fails both, and the
/// port must be taken for down and re-opened like any other.
#[test]
fn af_packet_adaptive_ring_ports_deleted_come_back() {
    if !can_run("the port failure test", true, &["ovs-ofctl", "ethtool"]) {
        return;
    }
    let t = Net::with_hosts("ofa", OFFLOADS, 3, &[0, 1]);
    let ports = t.ports.clone();
    scenario(&t, &ports, &["--af-packet-ring", "adaptive"], |_, _| {});
}

#[test]
fn af_xdp_ports_missing_at_start_or_deleted_come_back() {
    if !can_run("the port failure test", true, &["ovs-ofctl", "ethtool"]) {
        return;
    }
    let t = Net::with_hosts("ofp", XDP_OFFLOADS, 3, &[0, 1]);
    let ports = [0, 1, 2].map(|i| format!("af_xdp:{}={}", t.ports[i], i + 1));
    // A re-opened AF_XDP port has its program on the new interface.
    scenario(&t, &ports, &[], |t, i| {
        assert!(
            xdp_attached(t, i),
            "XDP program on re-created port {}",
            i + 1
        );
    });
}

/// Steps (a) to (d) (see the module docs) with `port_args` as the three
/// `--port` values and `extra` options; `check(t, i)` runs once traffic
/// crossed port `i` after its interface came back.
fn scenario(t: &Net, port_args: &[String], extra: &[&str], check: fn(&Net, usize)) {
    let started = Instant::now();
    let mut args = vec!["--netns", &t.sw, "--fail-mode", "standalone"];
    for p in port_args {
        args.extend_from_slice(&["--port", p]);
    }
    args.extend_from_slice(extra);
    let mut d = Daemon::start(&args);
    let monitor = Monitor::start(&d);

    // (a) The switch runs; port 3 is listed, down; 1 and 2 forward.
    let desc = d.ofctl(&["dump-ports-desc"]);
    let block3 = port_block(&desc, 3, &t.ports[2]);
    assert!(
        block3.contains("LINK_DOWN") && block3.contains("PORT_DOWN"),
        "missing port listed down: {desc}"
    );
    // (A veth's carrier may come a moment after the switch read it.)
    wait_port(&d, t, 0, "up", is_up);
    assert!(ping(t, 0, 1), "hosts 1 and 2 ping across the switch");
    let rx1_before = rx_packets(&d, 1);
    assert!(rx1_before >= 3, "port 1 counted the echoes: {rx1_before}");

    // (b) Port 3's interface appears, first down for more than a link
    // poll (packet sockets cannot join a fanout group on a down interface,
    // nor AF_XDP sockets bind, so the workers' first re-open may fail and
    // must be retried), then up: announced up, its host reaches both.
    t.link(2, Some(Duration::from_millis(1500)));
    wait_port(&d, t, 2, "up", is_up);
    assert!(ping(t, 2, 0), "the new port's host reaches host 1");
    assert!(ping(t, 2, 1), "... and host 2");
    check(t, 2);
    assert!(rx_packets(&d, 3) >= 3, "port 3 counts what it receives");

    // (c) Port 1's interface is deleted: reported down, 2 and 3 go on.
    // Wait for both bits: a link poll during the deletion may find the
    // interface still there, administratively up but no longer running
    // (closing it, the kernel clears the running state first and the up
    // flag only after waiting for an RCU grace period, long under load),
    // and truthfully report LINK_DOWN alone; the next poll finds it gone.
    t.unlink(0);
    wait_port(&d, t, 0, "down", |b| {
        b.contains("LINK_DOWN") && b.contains("PORT_DOWN")
    });
    assert!(ping(t, 1, 2), "hosts 2 and 3 still ping");
    if let Some(st) = d.child.try_wait().expect("daemon status") {
        panic!(
            "the switch did not survive a deleted interface: {}",
            d.report(Some(st))
        );
    }

    // (d) Port 1's interface is created again: traffic through it resumes
    // (from the new host end: the others' ARP caches hold the old MAC,
    // which its requests refresh).
    t.link(0, None);
    wait_port(&d, t, 0, "up again", is_up);
    assert!(
        ping(t, 0, 1),
        "host 1 reaches host 2 through the re-opened port"
    );
    assert!(ping(t, 0, 2), "... and host 3");
    check(t, 0);
    let rx1_after = rx_packets(&d, 1);
    assert!(
        rx1_after >= rx1_before + 3,
        "port 1's counters went on from where they were: {rx1_before} then {rx1_after}"
    );

    // Every change was announced to the connected controller.
    let text = monitor.finish();
    let statuses: Vec<&str> = text
        .split("OFPT_PORT_STATUS")
        .skip(1)
        .map(|m| m.split("OFPT_").next().unwrap_or(m))
        .collect();
    let about = |i: usize| {
        let header = format!("{}({}):", i + 1, t.ports[i]);
        statuses
            .iter()
            .filter(move |m| m.contains(&header))
            .copied()
            .collect::<Vec<&str>>()
    };
    assert!(
        about(2).iter().any(|m| is_up(m)),
        "port 3 announced up: {text}"
    );
    let p1 = about(0);
    let down = p1.iter().position(|m| m.contains("LINK_DOWN"));
    let up = p1.iter().rposition(|m| is_up(m));
    assert!(
        matches!((down, up), (Some(a), Some(b)) if a < b),
        "port 1 announced down, then up: {text}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "took {:?}",
        started.elapsed()
    );
}
