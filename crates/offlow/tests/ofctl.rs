//! `offlow run` against real controllers: Open vSwitch's `ovs-ofctl`
//! (OpenFlow 1.3) for the everyday commands, raw sockets for malformed
//! input, an active connection, and a graceful stop.
//!
//! Each test starts its own daemon on a free port and kills it on the way
//! out, pass or fail ([`Daemon`]'s `Drop`). Without `ovs-ofctl` the tests
//! that need it print a notice and pass, unless `CI` is set (then they fail:
//! CI must run them).

use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use offlow_flow::Field;
use offlow_openflow::BadMatchCode;
use offlow_openflow::{Body, ErrorMsg, FlowMod, Message, OfError, Oxm, OxmMatch};

#[allow(dead_code)] // each test file uses a subset of the harness
mod common;

use common::{
    can_run, first_number_after, flow_lines, ofctl, ofctl_output, Daemon, Peer, OFCTL_TIMEOUT,
};

/// Whether `ovs-ofctl` can be used; without it, skip (or fail under CI:
/// install openvswitch-common).
fn have_ofctl() -> bool {
    can_run("the ovs-ofctl tests", false, &["ovs-ofctl"])
}

/// The flow count `dump-aggregate` reports.
fn flow_count(t: &str) -> u64 {
    first_number_after(&ofctl(&["dump-aggregate", t]), "flow_count=")
}

#[test]
fn ofctl_show_desc_tables_ports() {
    if !have_ofctl() {
        return;
    }
    let d = Daemon::start(&["--dpid", "0xabc", "--tables", "4"]);
    let t = d.target();
    let show = ofctl(&["show", &t]);
    eprintln!("--- ovs-ofctl show ---\n{show}");
    assert!(show.contains("dpid:0000000000000abc"), "{show}");
    assert!(show.contains("n_tables:4, n_buffers:256"), "{show}");
    assert!(
        show.contains("capabilities: FLOW_STATS TABLE_STATS PORT_STATS"),
        "{show}"
    );
    assert!(show.contains("OFPST_PORT_DESC reply"), "{show}");
    assert!(show.contains("miss_send_len=128"), "{show}");

    let desc = ofctl(&["dump-desc", &t]);
    assert!(desc.contains("Manufacturer: offlow"), "{desc}");

    let tables = ofctl(&["dump-tables", &t]);
    assert!(tables.contains("table 0"), "{tables}");
    assert!(tables.contains("active=0, lookup=0, matched=0"), "{tables}");
    assert!(tables.contains("tables 1...3: ditto"), "{tables}");

    let features = ofctl(&["dump-table-features", &t]);
    assert!(features.contains("table 0 (\"table0\")"), "{features}");
    assert!(features.contains("next tables: 1-3"), "{features}");

    let ports = ofctl(&["dump-ports", &t]);
    assert!(ports.contains("0 ports"), "{ports}");
    let pdesc = ofctl(&["dump-ports-desc", &t]);
    assert!(pdesc.contains("OFPST_PORT_DESC reply"), "{pdesc}");
    assert!(!pdesc.contains("addr:"), "no port expected: {pdesc}");
}

#[test]
fn ofctl_flow_lifecycle_10k() {
    if !have_ofctl() {
        return;
    }
    let d = Daemon::start(&[]);
    let t = d.target();

    ofctl(&[
        "add-flow",
        &t,
        "table=0,priority=100,ip,nw_dst=10.0.0.0/24,actions=output:2",
    ]);
    let dump = ofctl(&["dump-flows", &t]);
    let lines = flow_lines(&dump);
    assert_eq!(lines.len(), 1, "{dump}");
    assert!(
        lines[0].contains(
            "table=0, n_packets=0, n_bytes=0, priority=100,ip,nw_dst=10.0.0.0/24 actions=output:2"
        ),
        "{dump}"
    );

    // 10,000 flows in table 1 from a file (ovs-ofctl sends them and then a
    // barrier, and reports any error reply).
    let dir = std::env::temp_dir().join(format!("offlow-ofctl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("flows.txt");
    let mut text = String::new();
    for i in 0..10_000u32 {
        text.push_str(&format!(
            "table=1,priority={},ip,nw_src=10.{}.{}.0/24,nw_dst=192.168.0.1,actions=output:{}\n",
            i % 100 + 1,
            (i >> 8) & 255,
            i & 255,
            i % 16 + 1
        ));
    }
    std::fs::write(&file, text).expect("write flows");
    let file = file.to_string_lossy().into_owned();
    let t0 = Instant::now();
    ofctl(&["add-flows", &t, &file]);
    eprintln!("add-flows 10000: {:?}", t0.elapsed());

    let dump = ofctl(&["dump-flows", &t]);
    let lines = flow_lines(&dump);
    assert_eq!(lines.len(), 10_001);
    eprintln!("--- dump-flows sample ---\n{}", lines[..3].join("\n"));
    // Spot checks: a flow from the file, with its match and action.
    assert!(
        dump.contains("table=1, n_packets=0, n_bytes=0, priority=18,ip,nw_src=10.0.17.0/24,nw_dst=192.168.0.1 actions=output:2"),
        "flow 17 missing"
    );
    assert!(dump.contains("nw_src=10.39.15.0/24,nw_dst=192.168.0.1 actions=output:16"));
    assert_eq!(flow_count(&t), 10_001);
    let t1 = ofctl(&["dump-flows", &t, "table=1,ip,nw_src=10.39.0.0/16"]);
    // i = 39*256 + j for j in 0..256 with i < 10000: 39*256 = 9984, so 16.
    assert_eq!(flow_lines(&t1).len(), 16, "{t1}");

    // mod-flows (non-strict) changes the actions of what it covers only.
    ofctl(&[
        "mod-flows",
        &t,
        "table=0,ip,nw_dst=10.0.0.0/24,actions=output:5",
    ]);
    let t0dump = ofctl(&["dump-flows", &t, "table=0"]);
    let l = flow_lines(&t0dump);
    assert_eq!(l.len(), 1, "{t0dump}");
    assert!(
        l[0].ends_with("priority=100,ip,nw_dst=10.0.0.0/24 actions=output:5"),
        "{t0dump}"
    );

    // Strict delete needs the exact priority: a wrong one removes nothing.
    ofctl(&[
        "--strict",
        "del-flows",
        &t,
        "table=1,priority=2,ip,nw_src=10.0.0.0/24,nw_dst=192.168.0.1",
    ]);
    assert_eq!(flow_count(&t), 10_001);
    ofctl(&[
        "--strict",
        "del-flows",
        &t,
        "table=1,priority=1,ip,nw_src=10.0.0.0/24,nw_dst=192.168.0.1",
    ]);
    assert_eq!(flow_count(&t), 10_000);

    // Non-strict delete by out_port, then by match.
    ofctl(&["del-flows", &t, "table=1,out_port=16"]);
    assert_eq!(flow_count(&t), 10_000 - 625);
    ofctl(&["del-flows", &t, "table=1,ip,nw_dst=192.168.0.1"]);
    assert_eq!(flow_count(&t), 1);
    let tables = ofctl(&["dump-tables", &t]);
    assert!(tables.contains("active=1"), "{tables}");

    // An invalid flow-mod is refused with the right error, and ovs-ofctl
    // says so.
    let o = ofctl_output(OFCTL_TIMEOUT, &["add-flow", &t, "table=200,actions=drop"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("OFPFMFC_BAD_TABLE_ID"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ofctl_packet_out() {
    if !have_ofctl() {
        return;
    }
    let d = Daemon::start(&[]);
    let t = d.target();
    ofctl(&[
        "add-flow",
        &t,
        "table=0,priority=100,ip,nw_dst=10.0.0.0/24,actions=output:2",
    ]);
    // Ethernet + IPv4 (20-byte header), 10.0.0.1 -> 10.0.0.5.
    let frame = "0001020304050a0b0c0d0e0f08004500001400000000400000000a0000010a000005";
    // To a port that does not exist (no ports yet): accepted and dropped.
    ofctl(&["packet-out", &t, "CONTROLLER", "output:1", frame]);
    // Through the pipeline: the matching rule counts the packet.
    ofctl(&[
        "packet-out",
        &t,
        &format!("in_port=CONTROLLER,packet={frame},actions=output:TABLE"),
    ]);
    let dump = ofctl(&["dump-flows", &t]);
    assert!(dump.contains("n_packets=1, n_bytes=34,"), "{dump}");
    let agg = ofctl(&["dump-aggregate", &t]);
    assert!(
        agg.contains("packet_count=1 byte_count=34 flow_count=1"),
        "{agg}"
    );
}

// ----- raw socket tests (no ovs-ofctl needed) -----

#[test]
fn bad_flow_mod_gets_bad_prereq_and_connection_lives() {
    let d = Daemon::start(&[]);
    let mut p = Peer::new(TcpStream::connect(("127.0.0.1", d.port)).expect("connect"));
    p.handshake();
    // tcp_dst without ip_proto=6 (and eth_type IPv4): prerequisites unmet.
    let fm = FlowMod {
        matcher: OxmMatch {
            fields: vec![
                Oxm::exact(Field::EthType, 0x0800),
                Oxm::exact(Field::TcpDst, 80),
            ],
        },
        ..FlowMod::add(0, 10, &offlow_flow::Match::ANY, Vec::new())
    };
    p.send(&Message::new(77, Body::FlowMod(fm)));
    let m = p.recv();
    assert_eq!(m.xid, 77);
    match m.body {
        Body::Error(ErrorMsg::Standard { error, data }) => {
            assert_eq!(error, OfError::BadMatch(BadMatchCode::BadPrereq));
            // §7.4.4: the data starts with the offending request.
            assert_eq!(data[1], 14, "OFPT_FLOW_MOD echoed");
        }
        other => panic!("expected an error, got {other:?}"),
    }
    p.send(&Message::new(
        78,
        Body::EchoRequest(b"still there?".to_vec()),
    ));
    let m = p.recv();
    assert_eq!(m.xid, 78);
    assert_eq!(m.body, Body::EchoReply(b"still there?".to_vec()));
    // And nothing was installed.
    p.send(&Message::new(79, Body::BarrierRequest));
    assert_eq!(p.recv().body, Body::BarrierReply);
}

#[test]
fn active_connection_reconnects() {
    // We are the controller; the switch dials us.
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    let ctl = format!("tcp:127.0.0.1:{port}");
    let mut d = Daemon::spawn(&["run", "--controller", &ctl, "--dpid", "7"], 0);
    for round in 0..2 {
        l.set_nonblocking(false).expect("blocking");
        let (s, _) = accept_within(&l, Duration::from_secs(10));
        let mut p = Peer::new(s);
        p.handshake();
        p.send(&Message::new(5, Body::FeaturesRequest));
        match p.recv().body {
            Body::FeaturesReply(f) => assert_eq!(f.datapath_id, 7, "round {round}"),
            other => panic!("{other:?}"),
        }
        // Hang up: the switch must dial again (after ~100 ms backoff).
        drop(p);
    }
    assert!(d.child.try_wait().expect("wait").is_none(), "still running");
}

fn accept_within(l: &TcpListener, limit: Duration) -> (TcpStream, std::net::SocketAddr) {
    l.set_nonblocking(true).expect("nonblocking");
    let deadline = Instant::now() + limit;
    loop {
        match l.accept() {
            Ok((s, a)) => {
                s.set_nonblocking(false).expect("blocking stream");
                return (s, a);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                assert!(Instant::now() < deadline, "switch never connected");
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("accept: {e}"),
        }
    }
}

#[test]
fn sigterm_stops_gracefully() {
    let mut d = Daemon::start(&[]);
    let mut p = Peer::new(TcpStream::connect(("127.0.0.1", d.port)).expect("connect"));
    p.handshake();
    let st = Command::new("kill")
        .args(["-TERM", &d.child.id().to_string()])
        .status()
        .expect("kill -TERM");
    assert!(st.success());
    let deadline = Instant::now() + Duration::from_secs(5);
    let status = loop {
        if let Some(s) = d.child.try_wait().expect("wait") {
            break s;
        }
        assert!(Instant::now() < deadline, "did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
    // The open connection was closed by the switch (EOF, not a reset).
    p.read_to_close().expect("orderly close after SIGTERM");
}

#[test]
fn bad_config_file_names_file_line_and_key() {
    let dir = std::env::temp_dir().join(format!("offlow-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("switch.toml");
    std::fs::write(&path, "dpid = 3\nlisten = [\"ptcp:notaport\"]\n").expect("write");
    let o = Command::new(env!("CARGO_BIN_EXE_offlow"))
        .args(["run", "--config"])
        .arg(&path)
        .output()
        .expect("run offlow");
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("switch.toml"), "{err}");
    assert!(err.contains("line 2"), "{err}");
    assert!(err.contains("listen"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A whole ovs-ofctl session captured on loopback decodes in tshark's
/// OpenFlow 1.3 dissector with no malformed packet and no expert warning,
/// and holds every message kind the session uses.
#[test]
fn tshark_decodes_a_whole_ovs_ofctl_session() {
    if !have_ofctl() {
        return;
    }
    if !can_run("capturing an ovs-ofctl session", true, &["tshark"]) {
        return;
    }
    let d = Daemon::start(&[]);
    let t = d.target();
    let dir = std::env::temp_dir().join(format!("offlow-tshark-{}-{}", std::process::id(), d.port));
    std::fs::create_dir_all(&dir).unwrap();
    let cap = dir.join("session.pcapng");
    let mut capture = Command::new("tshark")
        .args(["-i", "lo", "-q", "-f"])
        .arg(format!("tcp port {}", d.port))
        .arg("-w")
        .arg(&cap)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tshark");
    // tshark says "Capturing on 'Loopback: lo'" once the capture runs.
    let mut err = capture.stderr.take().unwrap();
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(15);
    while !String::from_utf8_lossy(&seen).contains("Capturing on") {
        assert!(
            Instant::now() < deadline,
            "tshark did not start: {}",
            String::from_utf8_lossy(&seen)
        );
        let mut b = [0u8; 256];
        match err.read(&mut b) {
            Ok(0) => panic!("tshark exited: {}", String::from_utf8_lossy(&seen)),
            Ok(n) => seen.extend_from_slice(&b[..n]),
            Err(e) => panic!("reading tshark: {e}"),
        }
    }
    // The message comes before the capture filter is in place on a busy
    // machine (a run once missed the session's first half): give it time.
    std::thread::sleep(Duration::from_secs(1));
    let flows = dir.join("flows.txt");
    std::fs::write(
        &flows,
        "priority=5,udp,tp_dst=53,actions=drop\npriority=6,tcp,tp_dst=80,actions=output:1\n",
    )
    .unwrap();
    ofctl(&[
        "add-flow",
        &t,
        "priority=10,ip,nw_dst=10.0.0.0/24,actions=output:2",
    ]);
    ofctl(&["add-flows", &t, flows.to_str().unwrap()]);
    ofctl(&["mod-flows", &t, "udp,actions=output:3"]);
    ofctl(&["--strict", "del-flows", &t, "priority=5,udp,tp_dst=53"]);
    for cmd in [
        "dump-flows",
        "dump-aggregate",
        "dump-ports",
        "dump-ports-desc",
        "dump-tables",
        "show",
    ] {
        ofctl(&[cmd, &t]);
    }
    let frame = "000000000002000000000001080045000014000100004011000000000000010a000002";
    ofctl(&["packet-out", &t, "CONTROLLER", "output:1", frame]);
    // ovs-ofctl adds OXM 44 (packet_type, an OpenFlow 1.5 field) when it
    // normalises this match: the switch answers OFPBMC_BAD_FIELD.
    let refused = ofctl_output(
        OFCTL_TIMEOUT,
        &["add-flow", &t, "priority=1,tp_dst=80,actions=drop"],
    );
    assert!(!refused.status.success());
    ofctl(&["del-flows", &t]);
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: kill(2) on our own child: SIGINT makes tshark finish the file.
    unsafe {
        libc::kill(capture.id() as i32, libc::SIGINT);
    }
    let _ = capture.wait();
    let decode = |filter: &str, fields: &[&str]| -> String {
        let mut c = Command::new("tshark");
        c.arg("-r").arg(&cap);
        c.args([
            "-d",
            &format!("tcp.port=={},openflow", d.port),
            "-Y",
            filter,
        ]);
        if !fields.is_empty() {
            c.args(["-T", "fields"]);
            for f in fields {
                c.args(["-e", f]);
            }
        }
        let o = c.output().expect("tshark -r");
        assert!(
            o.status.success(),
            "tshark -r: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let bad = decode("_ws.malformed || _ws.expert.severity >= \"Warning\"", &[]);
    let all = decode("frame", &[]);
    assert!(
        bad.trim().is_empty(),
        "tshark found problems:\n{bad}\nall:\n{all}"
    );
    let types = decode("openflow_v4", &["openflow_v4.type"]);
    let mut kinds: Vec<u32> = types
        .lines()
        .flat_map(|l| l.split(','))
        .filter_map(|v| v.trim().parse().ok())
        .collect();
    kinds.sort_unstable();
    kinds.dedup();
    // HELLO, ERROR, FEATURES, GET_CONFIG, PACKET_OUT, FLOW_MOD, MULTIPART,
    // BARRIER (requests and replies).
    for k in [0, 1, 5, 6, 7, 8, 13, 14, 18, 19, 20, 21] {
        assert!(
            kinds.contains(&k),
            "message type {k} missing from {kinds:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A controller that writes a burst of requests before it reads any reply
/// (os-ken does once its queues are full: its reader waits for its
/// handlers, which wait to send). A switch that stopped reading while
/// blocked writing replies would deadlock with it: the controller's
/// writes would never finish. Small socket buffers on the controller's
/// side; 14 MB of ECHO_REQUESTs, more than the switch's kernel buffers
/// hold (its send buffer grows to 4 MB, its receive buffer to 6 MB), so
/// the burst gets through only if the switch reads while it writes. Then
/// every reply arrives, in order.
#[test]
fn a_controller_that_writes_before_reading_does_not_deadlock_the_switch() {
    use std::io::Write;
    use std::os::fd::AsRawFd;

    let d = Daemon::start(&[]);
    let s = TcpStream::connect(("127.0.0.1", d.port)).expect("connect");
    for opt in [libc::SO_SNDBUF, libc::SO_RCVBUF] {
        let v: libc::c_int = 64 << 10;
        // SAFETY: `v` is a live c_int of the size passed; the descriptor is
        // the stream's, open for the call.
        let rc = unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&raw const v).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0, "setsockopt: {}", std::io::Error::last_os_error());
    }
    let mut p = Peer::new(s.try_clone().expect("clone"));
    p.handshake();
    const N: u32 = 240;
    let payload = vec![0x5au8; 60_000];
    let mut burst = Vec::new();
    for xid in 0..N {
        let m = Message::new(1000 + xid, Body::EchoRequest(payload.clone()));
        burst.extend(offlow_openflow::encode_to_vec(&m).expect("encode"));
    }
    let mut w = s;
    w.set_write_timeout(Some(Duration::from_secs(20)))
        .expect("write timeout");
    let t0 = Instant::now();
    w.write_all(&burst).unwrap_or_else(|e| {
        panic!(
            "the burst stalled after {:?} ({e}): the switch stopped reading while writing",
            t0.elapsed()
        )
    });
    for xid in 0..N {
        let m = p.recv();
        assert_eq!(m.xid, 1000 + xid);
        match &m.body {
            Body::EchoReply(data) => assert_eq!(data.len(), payload.len()),
            other => panic!("expected an echo reply, got {other:?}"),
        }
    }
}

/// A burst of expiries: 20,000 flows with a 1 s idle timeout and
/// `send_flow_rem`, all expiring in the same scan or two. Every one of them
/// reaches the controller as a FLOW_REMOVED: a scan publishes its removals
/// at once, and a per-connection queue smaller than the burst once lost
/// thousands (`bench setup`'s NAT rows, 10,000 expiries a second).
#[test]
fn a_burst_of_expiries_reaches_the_controller_whole() {
    let (d, log) = Daemon::start_logged::<&str>(&[]);
    let mut p = Peer::new(TcpStream::connect(("127.0.0.1", d.port)).expect("connect"));
    p.handshake();
    const N: u32 = 20_000;
    for i in 0..N {
        let fm = FlowMod {
            matcher: OxmMatch {
                fields: vec![
                    Oxm::exact(Field::EthType, 0x0800),
                    Oxm::exact(Field::Ipv4Src, 0x0a00_0000 + u128::from(i)),
                ],
            },
            idle_timeout: 1,
            flags: 1, // OFPFF_SEND_FLOW_REM
            ..FlowMod::add(0, 10, &offlow_flow::Match::ANY, Vec::new())
        };
        p.send(&Message::new(i, Body::FlowMod(fm)));
    }
    p.send(&Message::new(N, Body::BarrierRequest));
    let mut removed = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    while removed < N {
        assert!(
            Instant::now() < deadline,
            "{removed} of {N} FLOW_REMOVED within 20 s"
        );
        match p.recv().body {
            Body::FlowRemoved(_) => removed += 1,
            Body::BarrierReply => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    let text = common::stop(d, log);
    assert!(!text.contains("messages lost"), "{text}");
}
