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

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use offlow_io::netns::in_netns;

static SEQ: AtomicU32 = AtomicU32::new(0);

/// Longest a test may take once the environments exist.
const TEST_BUDGET: Duration = Duration::from_secs(60);
/// Longest wait for a controller to listen, or to program the switch.
const PROGRAM_WAIT: Duration = Duration::from_secs(20);

fn skip_or_fail(why: &str) {
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must run the controller tests: {why}"
    );
    eprintln!("NOTICE: skipping controller tests: {why}");
}

/// The environments' root, built once per test process (the script also
/// locks against other processes); `None` after a skip notice.
fn venv() -> Option<PathBuf> {
    static ROOT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let r = ROOT.get_or_init(|| {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("not root".into());
        }
        for tool in ["ovs-ofctl", "ethtool", "ip"] {
            if Command::new(tool).arg("-V").output().is_err() {
                return Err(format!("no {tool}"));
            }
        }
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
            skip_or_fail(why);
            None
        }
    }
}

fn sh(cmd: &str, args: &[&str]) -> Output {
    Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {cmd}: {e}"))
}

fn ip(args: &[&str]) {
    let out = sh("ip", args);
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Switch namespace + two hosts (10.0.0.1, 10.0.0.2), deleted on drop.
struct Net {
    sw: String,
    h: [String; 2],
    ports: [String; 2],
}

impl Net {
    fn new() -> Net {
        let tag = format!(
            "ofc{}x{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        // Built before the first `ip` call, so a failure half-way still
        // deletes what exists.
        let net = Net {
            sw: format!("{tag}s"),
            h: [format!("{tag}a"), format!("{tag}b")],
            ports: [format!("{tag}p1"), format!("{tag}p2")],
        };
        ip(&["netns", "add", &net.sw]);
        for i in 0..2 {
            ip(&["netns", "add", &net.h[i]]);
            ip(&[
                "link",
                "add",
                &net.ports[i],
                "netns",
                &net.sw,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                &net.h[i],
            ]);
            ip(&["-n", &net.sw, "link", "set", &net.ports[i], "up"]);
            let addr = format!("10.0.0.{}/24", i + 1);
            ip(&["-n", &net.h[i], "addr", "add", &addr, "dev", "eth0"]);
            ip(&["-n", &net.h[i], "link", "set", "eth0", "up"]);
            ip(&["-n", &net.h[i], "link", "set", "lo", "up"]);
            // Software segmentation: frames stay within the MTU the
            // workers' buffers hold (see the demo).
            let out = sh(
                "ip",
                &[
                    "netns", "exec", &net.h[i], "ethtool", "-K", "eth0", "tso", "off", "gso", "off",
                ],
            );
            assert!(
                out.status.success(),
                "ethtool: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        net
    }

    fn ping(&self, from: usize, to: &str, count: u32) -> bool {
        sh(
            "ip",
            &[
                "netns",
                "exec",
                &self.h[from],
                "ping",
                "-c",
                &count.to_string(),
                "-i",
                "0.2",
                "-W",
                "1",
                to,
            ],
        )
        .status
        .success()
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in self.h.iter().chain([&self.sw]) {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
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

/// `N` distinct free loopback ports (the listeners are held together so
/// the kernel cannot hand out one twice).
fn free_ports<const N: usize>() -> [u16; N] {
    let held: Vec<TcpListener> = (0..N)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("a free port"))
        .collect();
    std::array::from_fn(|i| held[i].local_addr().expect("bound address").port())
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

/// One `ovs-ofctl` command over the switch's passive listener.
fn ofctl(listen_port: u16, command: &str) -> String {
    let out = Command::new("ovs-ofctl")
        .args(["-O", "OpenFlow13", "--no-names", "--timeout=5", command])
        .arg(format!("tcp:127.0.0.1:{listen_port}"))
        .output()
        .expect("ovs-ofctl");
    assert!(
        out.status.success(),
        "ovs-ofctl {command}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
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

/// Send `bytes` over TCP from host 0 to host 1; true when every byte
/// arrived intact. Every blocking call has a timeout.
fn tcp_transfer(net: &Net, bytes: usize) -> bool {
    let l = in_netns(Some(&net.h[1]), || TcpListener::bind("10.0.0.2:7001"))
        .expect("enter host b")
        .expect("bind 10.0.0.2:7001");
    l.set_nonblocking(true).expect("nonblocking listener");
    let rx = std::thread::spawn(move || -> std::io::Result<Vec<u8>> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut s = loop {
            match l.accept() {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() > deadline {
                        return Err(e);
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => return Err(e),
            }
        };
        s.set_nonblocking(false)?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut v = Vec::new();
        s.read_to_end(&mut v).map(|_| v)
    });
    let data: Vec<u8> = (0..bytes)
        .map(|i| (i % 253) as u8 ^ (i >> 11) as u8)
        .collect();
    let sent = in_netns(Some(&net.h[0]), || {
        TcpStream::connect_timeout(&"10.0.0.2:7001".parse().unwrap(), Duration::from_secs(5))
    })
    .expect("enter host a")
    .and_then(|mut s| {
        s.set_write_timeout(Some(Duration::from_secs(10)))?;
        s.write_all(&data)?;
        s.shutdown(std::net::Shutdown::Write)
    });
    let got = rx.join().expect("receiver thread");
    match (sent, got) {
        (Ok(()), Ok(v)) => v == data,
        (s, g) => {
            eprintln!(
                "TCP transfer failed: send {s:?}, receive {:?}",
                g.map(|v| v.len())
            );
            false
        }
    }
}

/// Send `n` UDP datagrams from host 0 to host 1, paced; returns how many
/// arrived.
fn udp(net: &Net, n: usize) -> usize {
    let rx = in_netns(Some(&net.h[1]), || UdpSocket::bind("10.0.0.2:7002"))
        .expect("enter host b")
        .expect("bind udp");
    rx.set_read_timeout(Some(Duration::from_millis(500)))
        .expect("timeout");
    // A loaded machine can starve the counting thread for tens of
    // milliseconds; the default receive buffer (~270 small datagrams)
    // would then drop in the host, not the switch. 4 MiB holds them all
    // (FORCE: above rmem_max, allowed to root).
    let size: libc::c_int = 4 << 20;
    // SAFETY: setsockopt on an open socket with a c_int option value of
    // the size given.
    let rc = unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&rx),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "SO_RCVBUFFORCE: {}", std::io::Error::last_os_error());
    let tx = in_netns(Some(&net.h[0]), || UdpSocket::bind("10.0.0.1:7100"))
        .expect("enter host a")
        .expect("bind udp");
    let counter = std::thread::spawn(move || {
        let mut buf = [0u8; 256];
        let mut got = 0;
        while rx.recv(&mut buf).is_ok() {
            got += 1;
        }
        got
    });
    for i in 0..n {
        tx.send_to(&i.to_be_bytes(), "10.0.0.2:7002").expect("send");
        if i % 32 == 31 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    counter.join().expect("counter thread")
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
    let got = udp(net, 500);
    assert!(got >= 490, "UDP: {got} of 500 arrived: {}", ports());
}

/// Flow lines of a dump (without the reply header).
fn flow_lines(flows: &str) -> Vec<&str> {
    flows.lines().filter(|l| l.contains("actions=")).collect()
}

#[test]
fn osken_simple_switch_13_programs_the_switch_and_hosts_talk() {
    let Some(venv) = venv() else { return };
    let t0 = Instant::now();
    let net = Net::new();
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
    let net = Net::new();
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

fn number_after(text: &str, key: &str) -> Option<u64> {
    text.split(key).nth(1).and_then(|r| {
        r.chars()
            .take_while(|c| c.is_ascii_digit())
            .collect::<String>()
            .parse()
            .ok()
    })
}
