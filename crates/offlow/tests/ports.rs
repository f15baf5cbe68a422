//! The switch between real interfaces: `offlow run` and `offlow demo` on
//! veth pairs inside network namespaces these tests create (unique names
//! per process and test, deleted on the way out, pass or fail).
//!
//! Needs root and `ip`; `ovs-ofctl` for the controller-side checks. Without
//! them the tests print a notice and pass, unless `CI` is set (then they
//! fail: CI runs as root with the packages installed).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use offlow_io::netns::in_netns;

static SEQ: AtomicU32 = AtomicU32::new(0);

fn can_run() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let ofctl = Command::new("ovs-ofctl").arg("--version").output().is_ok();
    let ethtool = Command::new("ethtool").arg("--version").output().is_ok();
    if root && ofctl && ethtool {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must run the port tests: root={root} ovs-ofctl={ofctl} ethtool={ethtool}"
    );
    eprintln!("NOTICE: skipping port tests (root={root} ovs-ofctl={ofctl} ethtool={ethtool})");
    false
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
        Net::with_offloads(&["tso", "off", "gso", "off"])
    }

    /// Hosts with these `ethtool -K eth0` settings.
    fn with_offloads(offloads: &[&str]) -> Net {
        let tag = format!(
            "oft{}x{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
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
            // Software segmentation (see the demo); checksum offload stays
            // on, so TCP also checks the switch's checksum finishing.
            let mut args = vec!["netns", "exec", &net.h[i], "ethtool", "-K", "eth0"];
            args.extend_from_slice(offloads);
            let out = sh("ip", &args);
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

struct Daemon {
    child: Child,
    port: u16,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

impl Daemon {
    fn start(net: &Net, extra: &[&str]) -> Daemon {
        let port = free_port();
        let listen = format!("ptcp:{port}:127.0.0.1");
        let mut args = vec![
            "run",
            "--listen",
            &listen,
            "--netns",
            &net.sw,
            "--port",
            &net.ports[0],
            "--port",
            &net.ports[1],
        ];
        args.extend_from_slice(extra);
        let mut d = Daemon {
            child: Command::new(env!("CARGO_BIN_EXE_offlow"))
                .args(&args)
                .env("RUST_LOG", "warn")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("start offlow"),
            port,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(st)) = d.child.try_wait() {
                panic!("offlow exited early: {st}");
            }
            assert!(Instant::now() < deadline, "offlow did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        d
    }

    fn ofctl(&self, args: &[&str]) -> String {
        let out = Command::new("ovs-ofctl")
            .args(["-O", "OpenFlow13", "--no-names", "--timeout=20"])
            .args(args.iter().take(1))
            .arg(format!("tcp:127.0.0.1:{}", self.port))
            .args(args.iter().skip(1))
            .output()
            .expect("ovs-ofctl");
        assert!(
            out.status.success(),
            "ovs-ofctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// Send `bytes` over TCP from host 0 to host 1; true when every byte
/// arrived intact.
fn tcp_transfer(net: &Net, bytes: usize) -> bool {
    let l = in_netns(Some(&net.h[1]), || TcpListener::bind("10.0.0.2:7001"))
        .unwrap()
        .unwrap();
    let rx = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut v = Vec::new();
        s.read_to_end(&mut v).map(|_| v)
    });
    let data: Vec<u8> = (0..bytes)
        .map(|i| (i % 253) as u8 ^ (i >> 11) as u8)
        .collect();
    let mut s = in_netns(Some(&net.h[0]), || {
        TcpStream::connect_timeout(&"10.0.0.2:7001".parse().unwrap(), Duration::from_secs(5))
    })
    .unwrap()
    .unwrap();
    s.write_all(&data).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    matches!(rx.join().unwrap(), Ok(v) if v == data)
}

/// Send `n` UDP datagrams from host 0 to host 1 over 4 source ports, paced
/// so socket buffers are not the limit; returns how many arrived.
fn udp(net: &Net, n: usize) -> usize {
    let rx = in_netns(Some(&net.h[1]), || UdpSocket::bind("10.0.0.2:7002"))
        .unwrap()
        .unwrap();
    rx.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let tx: Vec<UdpSocket> = in_netns(Some(&net.h[0]), || {
        (0..4)
            .map(|i| UdpSocket::bind(("10.0.0.1", 7100 + i)).unwrap())
            .collect()
    })
    .unwrap();
    let counter = std::thread::spawn(move || {
        let mut buf = [0u8; 256];
        let mut got = 0;
        while rx.recv(&mut buf).is_ok() {
            got += 1;
        }
        got
    });
    for i in 0..n {
        tx[i % 4]
            .send_to(&i.to_be_bytes(), "10.0.0.2:7002")
            .unwrap();
        if i % 64 == 63 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    counter.join().unwrap()
}

fn first_number_after(text: &str, key: &str) -> u64 {
    text.split(key)
        .nth(1)
        .and_then(|r| {
            r.trim_start()
                .chars()
                .take_while(|c| c.is_ascii_digit())
                .collect::<String>()
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no {key} in {text}"))
}

#[test]
fn standalone_switch_passes_ping_tcp_and_udp() {
    if !can_run() {
        return;
    }
    let net = Net::new();
    let d = Daemon::start(&net, &["--fail-mode", "standalone", "--workers", "2"]);
    assert!(
        net.ping(0, "10.0.0.2", 3),
        "ping through the learning switch"
    );
    assert!(tcp_transfer(&net, 2 << 20), "2 MiB of TCP arrive intact");
    let got = udp(&net, 2000);
    assert!(got >= 1990, "UDP: {got} of 2000 arrived");
    // The learned flows are ordinary flows, visible to ovs-ofctl.
    let flows = d.ofctl(&["dump-flows"]);
    assert!(
        flows.contains("actions=CONTROLLER:128,goto_table:1"),
        "{flows}"
    );
    assert_eq!(flows.matches("dl_dst=").count(), 2, "{flows}");
    let ports = d.ofctl(&["dump-ports"]);
    assert!(first_number_after(&ports, "rx pkts=") >= 2000, "{ports}");
}

#[test]
fn secure_switch_follows_ovs_ofctl_flows_and_reports_to_the_controller() {
    if !can_run() {
        return;
    }
    let net = Net::new();
    let d = Daemon::start(&net, &[]);
    // Secure mode, empty tables: nothing crosses.
    assert!(!net.ping(0, "10.0.0.2", 1), "no flows, no forwarding");
    let desc = d.ofctl(&["dump-ports-desc"]);
    assert!(desc.contains(&format!("1({})", net.ports[0])), "{desc}");
    assert!(desc.contains(&format!("2({})", net.ports[1])), "{desc}");

    // A controller watching asynchronous messages.
    let mut monitor = Command::new("ovs-ofctl")
        .args(["-O", "OpenFlow13", "--no-names", "monitor"])
        .arg(format!("tcp:127.0.0.1:{}", d.port))
        .arg("--timeout=15")
        // ovs-ofctl monitor serves a control socket; the default directory
        // belongs to the (maybe absent) Open vSwitch daemon.
        .arg(format!(
            "--unixctl={}/ofl-monitor-{}-{}.ctl",
            std::env::temp_dir().display(),
            std::process::id(),
            d.port
        ))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ovs-ofctl monitor");
    std::thread::sleep(Duration::from_millis(300));

    d.ofctl(&["add-flow", "priority=10,in_port=1,actions=output:2"]);
    d.ofctl(&["add-flow", "priority=10,in_port=2,actions=output:1"]);
    // UDP to port 9 goes to the controller instead.
    d.ofctl(&[
        "add-flow",
        "priority=20,udp,tp_dst=9,actions=CONTROLLER:200",
    ]);
    // A flow that times out and says so.
    d.ofctl(&[
        "add-flow",
        "priority=5,hard_timeout=1,send_flow_rem,cookie=0x77,dl_type=0x88b5,actions=drop",
    ]);
    assert!(
        net.ping(0, "10.0.0.2", 3),
        "ping over controller-installed flows"
    );
    assert!(
        tcp_transfer(&net, 1 << 20),
        "TCP over controller-installed flows"
    );
    let s = in_netns(Some(&net.h[0]), || UdpSocket::bind("10.0.0.1:0"))
        .unwrap()
        .unwrap();
    s.send_to(b"to the controller", "10.0.0.2:9").unwrap();
    std::thread::sleep(Duration::from_millis(1800));
    let flows = d.ofctl(&["dump-flows"]);
    assert!(
        !flows.contains("cookie=0x77"),
        "hard timeout expired: {flows}"
    );
    let line = flows
        .lines()
        .find(|l| l.contains("in_port=1"))
        .expect("the in_port=1 flow");
    assert!(first_number_after(line, "n_packets=") >= 3, "{line}");
    // A link going down is announced (the switch polls link state).
    ip(&["-n", &net.h[1], "link", "set", "eth0", "down"]);
    std::thread::sleep(Duration::from_millis(1500));
    let desc = d.ofctl(&["dump-ports-desc"]);
    assert!(desc.contains("LINK_DOWN"), "{desc}");
    let _ = monitor.kill();
    let out = monitor.wait_with_output().expect("monitor output");
    // ovs-ofctl prints the messages it monitors on stdout or stderr
    // depending on its version and log settings: read both.
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("OFPT_PACKET_IN"), "packet-in seen: {text}");
    assert!(
        text.contains("tp_dst=9"),
        "the UDP frame in the packet-in: {text}"
    );
    assert!(
        text.contains("OFPT_FLOW_REMOVED"),
        "flow removed seen: {text}"
    );
    assert!(text.contains("reason=hard"), "{text}");
    assert!(
        text.contains("OFPT_PORT_STATUS"),
        "port status seen: {text}"
    );
    assert!(text.contains("LINK_DOWN"), "{text}");
}

fn namespaces_with(prefix: &str) -> Vec<String> {
    std::fs::read_dir("/run/netns")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(prefix))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn demo_shows_traffic_and_cleans_up() {
    if !can_run() {
        return;
    }
    let child = Command::new(env!("CARGO_BIN_EXE_offlow"))
        .args(["demo", "--seconds", "0.3", "--tcp-bytes", "1048576"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start offlow demo");
    let prefix = format!("ofd{}-", child.id() % 1_000_000);
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "demo failed: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("3/3 replies"), "{text}");
    assert!(text.contains("bytes verified"), "{text}");
    assert!(text.contains("microflow cache hits"), "{text}");
    assert!(
        first_number_after(&text, "microflow cache hits") > 0,
        "{text}"
    );
    assert!(
        namespaces_with(&prefix).is_empty(),
        "left behind: {:?}",
        namespaces_with(&prefix)
    );
}

#[test]
fn demo_interrupted_still_cleans_up() {
    if !can_run() {
        return;
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_offlow"))
        .args(["demo", "--seconds", "5"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start offlow demo");
    let prefix = format!("ofd{}-", child.id() % 1_000_000);
    let deadline = Instant::now() + Duration::from_secs(10);
    while namespaces_with(&prefix).len() < 3 {
        assert!(
            Instant::now() < deadline,
            "demo did not build its namespaces"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: kill(2) on our own child's pid.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let st = child.wait().unwrap();
    assert!(!st.success(), "an interrupted demo reports failure");
    assert!(
        namespaces_with(&prefix).is_empty(),
        "left behind: {:?}",
        namespaces_with(&prefix)
    );
}

#[test]
fn af_xdp_ports_forward_ping_tcp_and_udp() {
    if !can_run() {
        return;
    }
    // AF_XDP does not flag partial checksums: the hosts finish their own.
    let net = Net::with_offloads(&["tso", "off", "gso", "off", "tx", "off"]);
    let p1 = format!("af_xdp:{}=1", net.ports[0]);
    let p2 = format!("af_xdp:{}=2", net.ports[1]);
    let port = free_port();
    let listen = format!("ptcp:{port}:127.0.0.1");
    let mut child = Command::new(env!("CARGO_BIN_EXE_offlow"))
        .args([
            "run", "--listen", &listen, "--netns", &net.sw, "--port", &p1, "--port", &p2,
        ])
        .args(["--fail-mode", "standalone"])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start offlow");
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(st)) = child.try_wait() {
            panic!("offlow exited early: {st}");
        }
        assert!(Instant::now() < deadline, "offlow did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let d = Daemon { child, port };
    assert!(net.ping(0, "10.0.0.2", 3), "ping over AF_XDP ports");
    assert!(tcp_transfer(&net, 1 << 20), "TCP over AF_XDP ports");
    let got = udp(&net, 1000);
    assert!(got >= 990, "UDP: {got} of 1000");
    let ports = d.ofctl(&["dump-ports"]);
    assert!(first_number_after(&ports, "rx pkts=") >= 1000, "{ports}");
    // The XDP program is on the switch's interfaces while it runs.
    let link = sh("ip", &["-n", &net.sw, "-d", "link", "show", &net.ports[0]]);
    assert!(
        String::from_utf8_lossy(&link.stdout).contains("xdp"),
        "program attached"
    );
    drop(d);
    // ... and gone when it stops (the BPF link closes with the process).
    std::thread::sleep(Duration::from_millis(200));
    let link = sh("ip", &["-n", &net.sw, "-d", "link", "show", &net.ports[0]]);
    assert!(
        !String::from_utf8_lossy(&link.stdout).contains("prog/xdp"),
        "program detached"
    );
}
