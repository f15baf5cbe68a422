//! The switch between real interfaces: `offlow run` and `offlow demo` on
//! veth pairs inside network namespaces these tests create (unique names
//! per process and test, deleted on the way out, pass or fail).
//!
//! Needs root and `ip`; `ovs-ofctl` for the controller-side checks. Without
//! them the tests print a notice and pass, unless `CI` is set (then they
//! fail: CI runs as root with the packages installed).

use std::net::UdpSocket;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use offlow_io::netns::in_netns;

#[allow(dead_code)] // each test file uses a subset of the harness
mod common;

use common::{
    can_run, first_number_after, ip, number_after, sh, tcp_transfer, udp, Daemon, Net, Peer,
};

/// Root, `ovs-ofctl` and `ethtool`; otherwise skip (fail under CI).
fn prerequisites() -> bool {
    can_run("the port tests", true, &["ovs-ofctl", "ethtool"])
}

/// The hosts' usual offloads: software segmentation (see the demo);
/// checksum offload stays on, so TCP also checks the switch's checksum
/// finishing.
const OFFLOADS: &[&str] = &["tso", "off", "gso", "off"];

/// Traffic between the two hosts of `net` across `what`: a ping, a TCP
/// transfer of `tcp_bytes` (its checksums checked end to end), and `udp_n`
/// UDP datagrams from `sources` source ports, at most `lost` of them lost.
fn ping_tcp_udp(net: &Net, what: &str, tcp_bytes: usize, udp: (usize, usize), sources: u16) {
    let (udp_n, lost) = udp;
    assert!(net.ping(0, "10.0.0.2", 3), "ping across {what}");
    assert!(
        tcp_transfer(net, tcp_bytes),
        "{tcp_bytes} bytes of TCP across {what}"
    );
    let got = common::udp(net, udp_n, sources, 64);
    assert!(got + lost >= udp_n, "UDP across {what}: {got} of {udp_n}");
}

/// `offlow run` on the two switch ports of `net`, with `extra` options.
fn start(net: &Net, extra: &[&str]) -> Daemon {
    let mut args = vec![
        "--netns",
        &net.sw,
        "--port",
        &net.ports[0],
        "--port",
        &net.ports[1],
    ];
    args.extend_from_slice(extra);
    Daemon::start(&args)
}

/// AF_XDP does not flag partial checksums: hosts on AF_XDP ports finish
/// their own.
const XDP_OFFLOADS: &[&str] = &["tso", "off", "gso", "off", "tx", "off"];

/// The two switch ports of `net` as AF_XDP ports 1 and 2.
fn xdp_ports(net: &Net) -> [String; 2] {
    [1, 2].map(|n| format!("af_xdp:{}={n}", net.ports[n - 1]))
}

/// `offlow run` in standalone mode on the two switch ports of `net` as
/// AF_XDP ports, with `extra` options.
fn start_xdp(net: &Net, extra: &[&str]) -> Daemon {
    let [p1, p2] = xdp_ports(net);
    let mut args = vec!["--netns", &net.sw, "--port", &p1, "--port", &p2];
    args.extend_from_slice(&["--fail-mode", "standalone"]);
    args.extend_from_slice(extra);
    Daemon::start(&args)
}

#[test]
fn standalone_switch_passes_ping_tcp_and_udp() {
    if !prerequisites() {
        return;
    }
    let net = Net::new("oft", OFFLOADS);
    let d = start(&net, &["--fail-mode", "standalone", "--workers", "2"]);
    ping_tcp_udp(&net, "the learning switch", 2 << 20, (2000, 10), 4);
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

/// The receive options of issue 23: busy-polling workers (two, so the
/// frames rings form a fanout group) and the TPACKET_V3 blocks ring both
/// carry ping, TCP and UDP.
#[test]
fn busy_poll_workers_and_the_blocks_ring_pass_ping_tcp_and_udp() {
    if !prerequisites() {
        return;
    }
    for (what, extra) in [
        (
            "busy-polling workers",
            &["--busy-poll", "--workers", "2"][..],
        ),
        ("a blocks ring", &["--af-packet-ring", "blocks"][..]),
    ] {
        let net = Net::new("oft", OFFLOADS);
        let mut args = vec!["--fail-mode", "standalone"];
        args.extend_from_slice(extra);
        let d = start(&net, &args);
        ping_tcp_udp(&net, what, 1 << 20, (1000, 10), 4);
        let ports = d.ofctl(&["dump-ports"]);
        assert!(
            first_number_after(&ports, "rx pkts=") >= 1000,
            "{what}: {ports}"
        );
    }
}

#[test]
fn secure_switch_follows_ovs_ofctl_flows_and_reports_to_the_controller() {
    if !prerequisites() {
        return;
    }
    let net = Net::new("oft", OFFLOADS);
    let d = start(&net, &[]);
    // Secure mode, empty tables: nothing crosses.
    assert!(!net.ping(0, "10.0.0.2", 1), "no flows, no forwarding");
    let desc = d.ofctl(&["dump-ports-desc"]);
    assert!(desc.contains(&format!("1({})", net.ports[0])), "{desc}");
    assert!(desc.contains(&format!("2({})", net.ports[1])), "{desc}");

    // A controller watching asynchronous messages.
    let mut monitor = Command::new("ovs-ofctl")
        .args(["-O", "OpenFlow13", "--no-names", "monitor"])
        .arg(d.target())
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
        "priority=20,cookie=0x5,udp,tp_dst=9,actions=CONTROLLER:200",
    ]);
    // UDP to port 10 has its TTL decremented: a TTL of 1 expires and is
    // reported with reason invalid_ttl.
    d.ofctl(&[
        "add-flow",
        "priority=20,cookie=0x6,udp,tp_dst=10,actions=dec_ttl,output:2",
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
    s.set_ttl(1).unwrap();
    s.send_to(b"dies here", "10.0.0.2:10").unwrap();
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
    // Each packet-in names the flow entry that sent it (its cookie) and
    // the reason.
    let packet_in = |needle: &str| {
        text.split("OFPT_PACKET_IN")
            .find(|m| m.contains(needle))
            .unwrap_or_default()
            .to_string()
    };
    let to_9 = packet_in("tp_dst=9");
    assert!(
        to_9.contains("cookie=0x5") && to_9.contains("(via action)"),
        "{to_9}"
    );
    let to_10 = packet_in("tp_dst=10");
    assert!(to_10.contains("cookie=0x6"), "{to_10}");
    assert!(
        text.contains("OFPT_FLOW_REMOVED"),
        "flow removed seen: {text}"
    );
    assert!(text.contains("reason=hard"), "{text}");
    assert!(
        text.contains("(via invalid_ttl)") && text.contains("tp_dst=10"),
        "an expired TTL reported as such: {text}"
    );
    assert!(
        text.contains("OFPT_PORT_STATUS"),
        "port status seen: {text}"
    );
    assert!(text.contains("LINK_DOWN"), "{text}");
}

/// An IPv4 ACL loaded by `ovs-ofctl` gets its RFC snapshot once its table
/// has been quiet for a second (the daemon logs it), traffic follows the
/// rules before and after, and a later change takes effect at once (the
/// snapshot is dropped) and is compiled in after the next quiet second.
#[test]
fn quiet_acl_table_is_compiled_and_rules_still_hold() {
    if !prerequisites() {
        return;
    }
    let net = Net::new("oft", OFFLOADS);
    let ports = ["--port", &net.ports[0], "--port", &net.ports[1]];
    let (d, log) = Daemon::start_logged(&[&["--netns", &net.sw][..], &ports].concat());

    // Table 0 sends IPv4 on to table 1 (and floods ARP); table 1 is a
    // 20-rule IPv4 ACL: 18 rules for other subnets, then the two hosts.
    d.ofctl(&["add-flow", "priority=10,arp,actions=flood"]);
    d.ofctl(&["add-flow", "priority=10,ip,actions=goto_table:1"]);
    for i in 0..18 {
        d.ofctl(&[
            "add-flow",
            &format!(
                "table=1,priority={},ip,nw_src=10.1.{i}.0/24,nw_dst=10.2.0.0/16,actions=drop",
                20 + i
            ),
        ]);
    }
    d.ofctl(&[
        "add-flow",
        "table=1,priority=5,ip,nw_dst=10.0.0.2,actions=output:2",
    ]);
    d.ofctl(&[
        "add-flow",
        "table=1,priority=5,ip,nw_dst=10.0.0.1,actions=output:1",
    ]);
    assert!(net.ping(0, "10.0.0.2", 2), "ping over the ACL (uncompiled)");
    std::thread::sleep(Duration::from_millis(1800));
    assert!(net.ping(0, "10.0.0.2", 2), "ping over the compiled ACL");

    // A drop for ICMP to host 2: in force at once, then compiled in.
    let drop_icmp = "table=1,icmp,nw_dst=10.0.0.2";
    d.ofctl(&["add-flow", &format!("{drop_icmp},priority=50,actions=drop")]);
    assert!(
        !net.ping(0, "10.0.0.2", 2),
        "the new drop rule holds at once"
    );
    std::thread::sleep(Duration::from_millis(1800));
    assert!(!net.ping(0, "10.0.0.2", 2), "and once compiled in");
    // Non-strict: removes the ICMP rule, not the less specific IPv4 one.
    d.ofctl(&["del-flows", drop_icmp]);
    assert!(net.ping(0, "10.0.0.2", 2), "removing it restores ping");

    drop(d);
    let text = log.join().expect("log reader");
    let compiled: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("tables compiled"))
        .collect();
    assert!(
        compiled.len() >= 2,
        "two quiet spells, two compiles: {text}"
    );
    assert!(
        compiled.iter().all(|l| l.contains("(1, \"rfc\")")),
        "table 1 served by RFC after each: {compiled:?}"
    );
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
    if !prerequisites() {
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
    if !prerequisites() {
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
    if !prerequisites() {
        return;
    }
    let net = Net::new("oft", XDP_OFFLOADS);
    let d = start_xdp(&net, &[]);
    ping_tcp_udp(&net, "AF_XDP ports", 1 << 20, (1000, 10), 4);
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

/// AF_XDP ports with two workers: each worker's socket takes its own
/// receive queue of each interface (veths created with two queues), one
/// program shared by the sockets of an interface; ping, TCP and UDP from
/// many sources cross. With one queue and two workers the switch refuses
/// to start and says how to fix it; one worker takes both queues.
#[test]
fn af_xdp_ports_with_two_workers_take_a_queue_each() {
    if !prerequisites() {
        return;
    }
    let single = Net::new("oxq", XDP_OFFLOADS);
    let [p1, p2] = xdp_ports(&single);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_offlow"));
    cmd.args(["run", "--netns", &single.sw, "--port", &p1, "--port", &p2])
        .args(["--workers", "2", "--listen", "ptcp:0:127.0.0.1"]);
    let out = common::run_bounded(cmd, Duration::from_secs(20));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "started on one queue: {err}");
    assert!(
        err.contains("receive queue") && err.contains("numrxqueues 2"),
        "{err}"
    );
    drop(single);

    let net = Net::new_with_queues("oxq", XDP_OFFLOADS, 2);
    let d = start_xdp(&net, &["--workers", "2"]);
    ping_tcp_udp(&net, "two-queue AF_XDP ports", 1 << 20, (1000, 10), 16);
    let ports = d.ofctl(&["dump-ports"]);
    assert!(first_number_after(&ports, "rx pkts=") >= 1000, "{ports}");
    drop(d);
    // One worker on the same two-queue interfaces serves both queues (a
    // queue without a socket would hand its frames to the kernel).
    let _d = start_xdp(&net, &[]);
    assert!(net.ping(0, "10.0.0.2", 3), "ping, one worker, two queues");
    let got = udp(&net, 1000, 16, 64);
    assert!(got >= 990, "UDP, one worker, two queues: {got} of 1000");
}

/// Packet buffers with a real controller connection (played by the test):
/// an output to CONTROLLER with `max_len` 64 shows the controller 64 bytes
/// of a 342-byte UDP frame (reason action, table 0, the entry's cookie)
/// and keeps the rest under a buffer id. A PACKET_OUT naming that id that
/// the switch refuses (a bad output port) does not use it up; a valid one
/// sends the whole frame on, and the host gets every byte; the id then
/// answers BUFFER_EMPTY, an id never issued BUFFER_UNKNOWN. A FLOW_MOD
/// naming a buffer sends that packet through the new flow. A table-miss
/// entry's packet-in says no_match. The connection stays up throughout.
#[test]
fn buffered_packet_in_and_packet_out_by_buffer_id() {
    use offlow_openflow::{
        Action, BadRequestCode, Body, ErrorMsg, FlowMod, Instruction, Message, OfError, PacketIn,
        PacketOut, OFP_NO_BUFFER,
    };
    if !prerequisites() {
        return;
    }
    let net = Net::new("obf", OFFLOADS);
    let d = start(&net, &[]);
    let mut c = Peer::new(std::net::TcpStream::connect(("127.0.0.1", d.port)).expect("connect"));
    c.handshake();
    d.ofctl(&["add-flow", "priority=1,cookie=0x42,actions=CONTROLLER:64"]);
    // A static neighbour, so h0 sends the UDP frames itself (no ARP first).
    let link = sh("ip", &["-n", &net.h[1], "-br", "link", "show", "eth0"]);
    let text = String::from_utf8_lossy(&link.stdout);
    let mac = text
        .split_whitespace()
        .nth(2)
        .expect("h1's MAC")
        .to_string();
    ip(&[
        "-n",
        &net.h[0],
        "neigh",
        "replace",
        "10.0.0.2",
        "lladdr",
        &mac,
        "dev",
        "eth0",
        "nud",
        "permanent",
    ]);
    let rx = in_netns(Some(&net.h[1]), || UdpSocket::bind("10.0.0.2:7777"))
        .unwrap()
        .expect("bind in h1");
    rx.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let tx = in_netns(Some(&net.h[0]), || UdpSocket::bind("10.0.0.1:0"))
        .unwrap()
        .expect("bind in h0");
    let payload: Vec<u8> = (0..300u32).map(|i| (i * 7) as u8).collect();
    let total = 14 + 20 + 8 + payload.len();
    // Send one datagram; its packet-in (the hosts' IPv6 chatter may come
    // first).
    let send_and_catch = |c: &mut Peer, tag: u8| -> PacketIn {
        let mut p = payload.clone();
        p[0] = tag;
        tx.send_to(&p, "10.0.0.2:7777").expect("send");
        (0..100)
            .find_map(|_| match c.recv().body {
                Body::PacketIn(p) if usize::from(p.total_len) == total && p.data.len() > 42 => {
                    Some(p)
                }
                _ => None,
            })
            .expect("the UDP frame's packet-in")
    };
    let mut got = vec![0u8; 2048];
    let mut arrives = |tag: u8| {
        let (n, _) = rx.recv_from(&mut got).expect("the buffered frame arrives");
        assert_eq!(got[0], tag, "the datagram sent");
        assert_eq!(&got[1..n], &payload[1..], "every byte, not the 64 shown");
    };
    let error_of = |c: &mut Peer, xid: u32| {
        let m = (0..100)
            .map(|_| c.recv())
            .find(|m| m.xid == xid)
            .expect("a reply");
        match m.body {
            Body::Error(ErrorMsg::Standard { error, .. }) => error,
            other => panic!("expected an error, got {other:?}"),
        }
    };
    let out = |buffer_id, port| {
        Body::PacketOut(PacketOut {
            buffer_id,
            in_port: 1,
            actions: vec![Action::Output { port, max_len: 0 }],
            data: Vec::new(),
        })
    };

    let pi = send_and_catch(&mut c, 1);
    assert_ne!(pi.buffer_id, OFP_NO_BUFFER, "{pi:?}");
    assert_eq!(pi.data.len(), 64, "max_len bytes shown");
    assert_eq!(
        (pi.reason, pi.table_id, pi.cookie),
        (1, 0, 0x42),
        "OFPR_ACTION"
    );
    assert!(
        rx.recv_from(&mut [0u8; 1]).is_err(),
        "nothing crossed the switch yet"
    );
    // Refused (output to port 0): the buffer is still there.
    c.send(&Message::new(9, out(pi.buffer_id, 0)));
    assert_eq!(
        error_of(&mut c, 9),
        OfError::BadAction(offlow_openflow::BadActionCode::BadOutPort)
    );
    c.send(&Message::new(10, out(pi.buffer_id, 2)));
    arrives(1);
    c.send(&Message::new(11, out(pi.buffer_id, 2)));
    assert_eq!(
        error_of(&mut c, 11),
        OfError::BadRequest(BadRequestCode::BufferEmpty)
    );
    c.send(&Message::new(12, out(pi.buffer_id.wrapping_add(1000), 2)));
    assert_eq!(
        error_of(&mut c, 12),
        OfError::BadRequest(BadRequestCode::BufferUnknown)
    );

    // A FLOW_MOD naming the buffer: the packet takes the new flow.
    let pi = send_and_catch(&mut c, 2);
    let mut m = offlow_flow::Match::ANY;
    m.set_exact(offlow_flow::Field::InPort, 1);
    let fm = FlowMod {
        buffer_id: pi.buffer_id,
        ..FlowMod::add(
            0,
            10,
            &m,
            vec![Instruction::ApplyActions(vec![Action::Output {
                port: 2,
                max_len: 0,
            }])],
        )
    };
    c.send(&Message::new(13, Body::FlowMod(fm)));
    arrives(2);

    // A table-miss entry's packet-in says OFPR_NO_MATCH.
    d.ofctl(&["del-flows"]);
    d.ofctl(&["add-flow", "priority=0,cookie=0x43,actions=CONTROLLER:64"]);
    let pi = send_and_catch(&mut c, 3);
    assert_eq!(
        (pi.reason, pi.table_id, pi.cookie),
        (0, 0, 0x43),
        "OFPR_NO_MATCH"
    );

    c.send(&Message::new(14, Body::BarrierRequest));
    assert!((0..100).any(|_| c.recv().xid == 14), "still connected");
}

/// `ovs-ofctl mod-port` (PORT_MOD): no-forward on one port and
/// no-receive on the other each stop a ping across the switch, and
/// undoing them restores it; `down` does both; the configuration shows in
/// `dump-ports-desc` and the drops in `dump-ports`.
#[test]
fn mod_port_stops_and_restores_forwarding() {
    if !prerequisites() {
        return;
    }
    let net = Net::new("omp", OFFLOADS);
    let d = start(&net, &[]);
    d.ofctl(&["add-flow", "in_port=1,actions=output:2"]);
    d.ofctl(&["add-flow", "in_port=2,actions=output:1"]);
    assert!(net.ping(0, "10.0.0.2", 2), "ping before any mod-port");
    // The workers take a change between batches (within an idle sleep).
    let settle = || std::thread::sleep(Duration::from_millis(100));
    for (port, off, on, shown) in [
        ("2", "no-forward", "forward", "NO_FWD"),
        ("1", "no-receive", "receive", "NO_RECV"),
        ("1", "down", "up", "PORT_DOWN"),
    ] {
        d.ofctl(&["mod-port", port, off]);
        settle();
        let desc = d.ofctl(&["dump-ports-desc"]);
        assert!(desc.contains(shown), "{off}: {desc}");
        assert!(!net.ping(0, "10.0.0.2", 2), "ping with port {port} {off}");
        d.ofctl(&["mod-port", port, on]);
        settle();
        assert!(
            !d.ofctl(&["dump-ports-desc"]).contains(shown),
            "{on} clears {shown}"
        );
        assert!(net.ping(0, "10.0.0.2", 2), "ping after port {port} {on}");
    }
    let ports = d.ofctl(&["dump-ports", "2"]);
    let tx = &ports[ports.find("tx pkts=").expect("a tx line")..];
    assert!(first_number_after(tx, "tx pkts=") > 0, "{ports}");
    assert!(
        number_after(tx, "drop=").is_some_and(|n| n > 0),
        "no-forward drops counted on port 2: {ports}"
    );
}

/// A statistics reply counts every frame the switch forwarded before the
/// request (workers publish their port counters before they answer the
/// counter sync, not only every 20 ms): each round sends a burst from host
/// 1 to host 2 and, the moment host 2 has every datagram, asks for the
/// port counters; they must already include the burst. Ten rounds, so a
/// reply built from counters up to 20 ms old would show.
#[test]
fn port_stats_count_every_frame_forwarded_before_the_request() {
    if !prerequisites() {
        return;
    }
    let net = Net::new("ofs", OFFLOADS);
    let d = start(&net, &["--fail-mode", "secure"]);
    d.ofctl(&["add-flow", "in_port=1,actions=output:2"]);
    d.ofctl(&["add-flow", "in_port=2,actions=output:1"]);
    // ARP resolved before counting.
    assert!(net.ping(0, "10.0.0.2", 1), "ping across the switch");
    let rx = in_netns(Some(&net.h[1]), || UdpSocket::bind("10.0.0.2:7003"))
        .expect("enter host b")
        .expect("bind");
    rx.set_read_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    let tx = in_netns(Some(&net.h[0]), || UdpSocket::bind("10.0.0.1:7004"))
        .expect("enter host a")
        .expect("bind");
    const BURST: u64 = 50;
    let rx_pkts = |d: &Daemon| {
        let out = d.ofctl(&["dump-ports", "1"]);
        (first_number_after(&out, "rx pkts="), out)
    };
    let (mut before, _) = rx_pkts(&d);
    let mut buf = [0u8; 64];
    for round in 0..10 {
        for i in 0..BURST {
            tx.send_to(&i.to_be_bytes(), "10.0.0.2:7003").expect("send");
        }
        for _ in 0..BURST {
            rx.recv(&mut buf)
                .unwrap_or_else(|e| panic!("round {round}: a datagram lost: {e}"));
        }
        let (now, out) = rx_pkts(&d);
        assert!(
            now >= before + BURST,
            "round {round}: port 1 rx {now} < {} after host 2 received the burst: {out}",
            before + BURST
        );
        before = now;
    }
}
