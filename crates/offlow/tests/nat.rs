//! Source NAT through `offlow run`, programmed by a real controller:
//! `osken-manager` running `apps/osken/snat.py`, offload off and on.
//!
//! The topology: host 0 ("inside", 10.0.0.1/24, default route via the
//! gateway address 10.0.0.254) on switch port 1; host 1 ("outside",
//! 192.0.2.2/24, no route to 10.0.0.0/24 at all) on switch port 2. The app
//! owns 10.0.0.254 on the inside and the NAT address 192.0.2.1 on the
//! outside: it answers both hosts' ARP requests, so neither host has a
//! static neighbour. The outside host is the NAT's next hop (its MAC is
//! the app's `SNAT_NEXT_HOP_MAC`).
//!
//! What the first two tests check (offload off, then on):
//! - **Translation both ways, checksums verified by the hosts.** A TCP
//!   connection from inside to a server outside carries 4 MiB out and the
//!   server echoes them back; both ends compare every byte. The outside
//!   host's stack checks the IPv4 and TCP checksums of every translated
//!   segment, the inside host's those of every reverse-translated one, and
//!   neither may count a checksum error (`TcpInCsumErrors`: TCP would
//!   retransmit a dropped segment and hide a wrong update from the byte
//!   comparison). The hosts keep transmit checksum offload on, as
//!   `ports.rs` does: the switch finishes their partial checksums before
//!   translating, in software and in the XDP tier ([`XDP_OFFLOADS`]).
//!   The outbound half is paced over about a second, so the
//!   connection's flows are hot long enough to be promoted.
//! - **The peer the outside sees** is the NAT address and a pool port
//!   (the server's accepted socket), never 10.0.0.1.
//! - **Distinct pool ports** for concurrent connections (four at once).
//! - **The flows** in `ovs-ofctl dump-flows`: per connection, the forward
//!   flow (inside 5-tuple; set ip_src and tcp_src; output:2) and the
//!   reverse flow (outside 5-tuple to the pool port; set ip_dst and
//!   tcp_dst; output:1), both with the idle timeout and `send_flow_rem`.
//!   Each flow was installed exactly once (the app logs its installs): a
//!   flow expired while its connection was busy would be installed again.
//! - **Expiry.** Once the traffic stops the idle timeout removes every NAT
//!   flow (FLOW_REMOVED to the app) and the app frees every pool port.
//! - **Offload** (second test, `--offload xdp`): the switch's exit log
//!   shows the XDP tier served frames and installed entries for the
//!   connections (promoted by rate, with thresholds lowered and every
//!   frame sampled, in the test's configuration file, so that a
//!   one-second transfer on a shared machine is certainly hot).
//!
//! The third test gives the app a pool of two ports: a UDP datagram goes
//! out and its echo comes back through the NAT (one port), a held TCP
//! connection takes the other, a third connection's SYNs are dropped and
//! the app logs the exhaustion; after the idle timeout has freed both, a
//! new connection gets the port freed first.
//!
//! The fourth runs the app's own unit tests (`apps/osken/snat_test.py`:
//! the messages it encodes itself are byte for byte os-ken's, its frame
//! parser agrees with os-ken's, pool ports come back) with the os-ken
//! environment's Python.
//!
//! Needs root, `ip`, `ethtool`, `ovs-ofctl` and the os-ken environment of
//! `scripts/controllers-venv.sh` (run by the test; a no-op once built).
//! Without them the tests print a notice and pass, unless `CI` is set.
//! Namespaces, the controller and the switch are removed on the way out,
//! pass or fail; every wait has a deadline.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::Command;
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use offlow_io::netns::in_netns;

#[allow(dead_code)] // each test file uses a subset of the harness
mod common;

use common::controller::{venv, wait_listening, Proc, Scratch, PROGRAM_WAIT};
use common::{csum_errors, first_number_after, flow_lines, free_ports, ip, ofctl_at, sh, Net};

/// One test at a time: the offloaded one needs its transfer to run at a
/// steady rate on a shared machine.
static SERIAL: Mutex<()> = Mutex::new(());

/// The hosts' offloads with the tier off: software segmentation (see the
/// demo), checksum offload left on, so the switch also finishes the
/// partial checksums of its veth peers before translating (as `ports.rs`).
const OFFLOADS: &[&str] = &["tso", "off", "gso", "off"];

/// With the XDP tier: GRO on, since a veth takes frames that XDP redirects
/// into it only while its peer runs NAPI; transmit checksum offload stays
/// on, as in software. The hosts' segments then reach the XDP program with
/// a partial checksum (a veth peer's CHECKSUM_PARTIAL does not travel with
/// the frame into XDP; the field holds the pseudo-header sum): the program
/// recognises it and finishes it before translating, so the receivers
/// count no checksum error (`bpf/offload.bpf.c` of offlow-offload says
/// how). Before it did, this test failed with tx on (`TcpInCsumErrors`,
/// the transfer stalled until the entry was demoted).
const XDP_OFFLOADS: &[&str] = &["tso", "off", "gso", "off", "gro", "on"];

/// With the tier at TC ingress: transmit checksum offload off, so every
/// segment carries a full checksum that the program's rewrites update
/// (through the kernel's checksum helpers) and the receiving stack
/// verifies (veth passes CHECKSUM_NONE on unmarked since Linux 6.0). With
/// tx on, a partial checksum stays partial through TC, to be finished
/// downstream, and a receiver on a veth trusts it: nothing verified.
const TC_OFFLOADS: &[&str] = &["tso", "off", "gso", "off", "tx", "off"];

/// What the tests are called in skip notices and CI failures.
const WHAT: &str = "the NAT tests";

/// Longest a test may take once the environment exists.
const TEST_BUDGET: Duration = Duration::from_secs(50);

const INSIDE_IP: &str = "10.0.0.1";
const GATEWAY_IP: &str = "10.0.0.254";
const OUTSIDE_IP: &str = "192.0.2.2";
const NAT_IP: &str = "192.0.2.1";
/// The server's port on the outside host.
const SERVER_PORT: u16 = 7001;
/// The app's pool (a small one: its ports are easy to check).
const POOL: (u16, u16) = (20000, 20063);
/// The flows' idle timeout, seconds: short, so the test sees them expire.
const IDLE_TIMEOUT: u64 = 2;

/// Bytes of the big transfer, each way.
const BIG: usize = 4 << 20;
/// Concurrent connections, and the bytes each carries each way.
const CONCURRENT: usize = 4;
const SMALL: usize = 256 << 10;

/// The app, in the repository.
const APP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../apps/osken/snat.py");

#[test]
fn snat_app_translates_tcp_both_ways_in_software() {
    nat(None);
}

#[test]
fn snat_app_translates_tcp_both_ways_offloaded() {
    nat(Some("xdp"));
}

/// The same with the tier at TC ingress: the rewrites go through the
/// kernel's checksum helpers, the hosts' checksum offload stays on (their
/// partial checksums stay partial through the switch), and the receiving
/// stacks verify every segment.
#[test]
fn snat_app_translates_tcp_both_ways_offloaded_at_tc() {
    nat(Some("tc"));
}

/// A NAT under test: the topology, the app and the switch, all removed on
/// drop (fields drop in order: the processes, then the namespaces).
struct Nat {
    ctl: Proc,
    sw: Proc,
    listen_port: u16,
    osken_log: std::path::PathBuf,
    pool: (u16, u16),
    idle_timeout: u64,
    scratch: Scratch,
    net: Net,
}

impl Nat {
    /// Build the topology, start the app with `pool` and `idle_timeout`
    /// and the switch (with the XDP tier when `offload`), and wait for the
    /// table-miss entry. `None` after a skip notice.
    fn start(
        kind: &str,
        offload: Option<&str>,
        pool: (u16, u16),
        idle_timeout: u64,
    ) -> Option<Nat> {
        let venv = venv(WHAT)?;
        let net = Net::new(
            "nat",
            match offload {
                Some("xdp") => XDP_OFFLOADS,
                Some(_) => TC_OFFLOADS,
                None => OFFLOADS,
            },
        );
        let scratch = Scratch::new(kind);
        address_plan(&net);
        let next_hop_mac = mac_of(&net.h[1]);
        let [ctl_port, listen_port] = free_ports();

        let mut cmd = Command::new(venv.join("osken/bin/osken-manager"));
        cmd.args(["--ofp-listen-host", "127.0.0.1", "--ofp-tcp-listen-port"])
            .arg(ctl_port.to_string())
            .arg(APP)
            .env("SNAT_INSIDE_PORT", "1")
            .env("SNAT_OUTSIDE_PORT", "2")
            .env("SNAT_INSIDE_NET", "10.0.0.0/24")
            .env("SNAT_GATEWAY_IP", GATEWAY_IP)
            .env("SNAT_ADDRESS", NAT_IP)
            .env("SNAT_NEXT_HOP_MAC", &next_hop_mac)
            .env("SNAT_PORT_MIN", pool.0.to_string())
            .env("SNAT_PORT_MAX", pool.1.to_string())
            .env("SNAT_IDLE_TIMEOUT", idle_timeout.to_string())
            // The per-connection log lines this test reads.
            .env("SNAT_LOG_CONNECTIONS", "1");
        let osken_log = scratch.file("osken.log");
        let mut ctl = Proc::spawn("osken-manager", cmd, &osken_log);
        wait_listening(&mut ctl, ctl_port);
        let sw = start_switch(&net, ctl_port, listen_port, offload, &scratch);
        let mut nat = Nat {
            ctl,
            sw,
            listen_port,
            osken_log,
            pool,
            idle_timeout,
            scratch,
            net,
        };
        // The app installs its table-miss entry when the switch connects.
        let deadline = Instant::now() + PROGRAM_WAIT;
        while !nat
            .flows("at start")
            .contains("priority=0 actions=CONTROLLER:65535")
        {
            nat.sw.check_alive();
            nat.ctl.check_alive();
            assert!(
                Instant::now() < deadline,
                "the app programmed no table-miss"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        Some(nat)
    }

    /// `ovs-ofctl dump-flows`, also printed (shown when a test fails).
    fn flows(&self, what: &str) -> String {
        let f = ofctl_at(Duration::from_secs(5), self.listen_port, &["dump-flows"]);
        eprintln!("flows {what}:\n{f}");
        f
    }

    /// The app's log once `ready` holds for it (bounded by
    /// [`PROGRAM_WAIT`]).
    fn wait_log(&mut self, ready: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + PROGRAM_WAIT;
        loop {
            let log = std::fs::read_to_string(&self.osken_log).unwrap_or_default();
            if ready(&log) {
                return log;
            }
            self.ctl.check_alive();
            assert!(Instant::now() < deadline, "the app's log: {log}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Wait until the idle timeout has removed every NAT flow and the app
    /// has freed `connections` ports, its whole pool free again; the log.
    fn wait_expiry(&mut self, connections: usize) -> String {
        let deadline = Instant::now() + Duration::from_secs(self.idle_timeout + 8);
        loop {
            let dump = self.flows("waiting for expiry");
            if !flow_lines(&dump)
                .iter()
                .any(|l| l.contains("idle_timeout="))
            {
                break;
            }
            assert!(Instant::now() < deadline, "NAT flows did not expire");
            std::thread::sleep(Duration::from_millis(500));
        }
        let log = self.wait_log(|log| log.matches("snat: free ").count() >= connections);
        let total = usize::from(self.pool.1 - self.pool.0 + 1);
        assert!(
            log.contains(&format!("({total} of {total} free)")),
            "the pool is whole again: {log}"
        );
        log
    }

    /// The NAT address and a pool port: what the outside must see.
    fn peer_port(&self, peer: &SocketAddr) -> u16 {
        assert_eq!(
            peer.ip().to_string(),
            NAT_IP,
            "the server's peer is the NAT address"
        );
        let p = peer.port();
        assert!(
            (self.pool.0..=self.pool.1).contains(&p),
            "the peer port {p} is from the pool {:?}",
            self.pool
        );
        p
    }

    /// Neither host's stack dropped a TCP or UDP segment for a bad
    /// checksum.
    fn no_checksum_errors(&self) {
        for (i, ns) in self.net.h.iter().enumerate() {
            for proto in ["Tcp:", "Udp:"] {
                let errors = csum_errors(ns, proto);
                assert_eq!(errors, 0, "host {i} counted {proto} checksum errors");
            }
        }
    }
}

/// `offload`: the tier's hook (`xdp`, `tc`), or none.
fn nat(offload: Option<&str>) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let t0 = Instant::now();
    let kind = match offload {
        Some("xdp") => "nat-xdp",
        Some(_) => "nat-tc",
        None => "nat",
    };
    let Some(mut nat) = Nat::start(kind, offload, POOL, IDLE_TIMEOUT) else {
        return;
    };
    let net = &nat.net;

    // One connection, 4 MiB out (paced) and back, through the NAT.
    let server = Server::start(net, 1);
    let sent = pattern(BIG, 1);
    let echoed = client(&net.h[0], &sent, Some(Duration::from_millis(15)));
    let peers = server.join();
    assert_eq!(peers.len(), 1);
    let (peer, got) = &peers[0];
    assert!(got == &sent, "the server received the 4 MiB intact");
    assert!(echoed == sent, "the inside host received the echo intact");
    let main_port = nat.peer_port(peer);
    check_flow_pair(&nat.flows("after the big transfer"), main_port);

    // Concurrent connections: each its own pool port.
    let server = Server::start(net, CONCURRENT);
    let clients: Vec<JoinHandle<()>> = (0..CONCURRENT)
        .map(|i| {
            let inside = net.h[0].clone();
            std::thread::spawn(move || {
                let data = pattern(SMALL, 10 + i as u8);
                let echo = client(&inside, &data, None);
                assert!(echo == data, "connection {i}: the echo arrived intact");
            })
        })
        .collect();
    for c in clients {
        c.join().expect("client thread");
    }
    let peers = server.join();
    for (p, data) in &peers {
        assert_eq!(data.len(), SMALL, "{p}: bytes received");
    }
    let mut ports: Vec<u16> = peers.iter().map(|(p, _)| nat.peer_port(p)).collect();
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), CONCURRENT, "distinct pool ports: {peers:?}");
    let dump = nat.flows("after the concurrent connections");
    for &p in &ports {
        check_flow_pair(&dump, p);
    }

    // Traffic stops; the idle timeout removes every NAT flow, the app
    // frees every port.
    let connections = 1 + CONCURRENT;
    let log = nat.wait_expiry(connections);
    assert_eq!(log.matches("snat: map ").count(), connections, "{log}");
    assert_eq!(
        log.matches("snat: install ").count(),
        2 * connections,
        "every flow installed once (none expired while in use): {log}"
    );

    nat.no_checksum_errors();
    nat.ctl.check_alive();
    nat.sw.check_alive();
    nat.sw.terminate();
    if let Some(hook) = offload {
        let text = std::fs::read_to_string(nat.scratch.file("offlow.log")).expect("switch log");
        let line = text
            .lines()
            .find(|l| l.contains("offload tier stopped"))
            .unwrap_or_else(|| panic!("no `offload tier stopped` line (tier off?):\n{text}"));
        eprintln!("{line}");
        let hits = first_number_after(line, " hits=");
        let installs = first_number_after(line, "installs=");
        // The big connection alone is ~3,000 segments each way and its
        // ACKs; most of them after promotion.
        assert!(hits >= 1000, "the {hook} tier served the NAT flows: {line}");
        assert!(installs >= 2, "both directions went down: {line}");
    }
    assert!(t0.elapsed() < TEST_BUDGET, "took {:?}", t0.elapsed());
}

/// A pool of two ports: UDP is translated both ways; with both ports
/// taken a third connection is dropped (and logged), and once the idle
/// timeout has freed them a new connection gets one again.
#[test]
fn snat_app_pool_udp_exhaustion_and_reuse() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let t0 = Instant::now();
    let pool = (30000, 30001);
    // Long enough for the UDP mapping and the held connection to outlive
    // the third connection's attempt (an expired mapping is a new one:
    // the held connection would be reset).
    let Some(mut nat) = Nat::start("nat-pool", None, pool, 4) else {
        return;
    };
    let inside = nat.net.h[0].clone();

    // UDP: a datagram out, its echo back to the inside socket.
    let (udp_peer, udp_echo) = udp_exchange(&nat.net, b"through the NAT");
    assert_eq!(udp_echo, b"through the NAT");
    let udp_port = nat.peer_port(&udp_peer);

    // A TCP connection held open takes the second port.
    let server = Server::start(&nat.net, 2);
    let to: SocketAddr = format!("{OUTSIDE_IP}:{SERVER_PORT}").parse().unwrap();
    let connect = |limit: Duration| {
        in_netns(Some(&inside), || TcpStream::connect_timeout(&to, limit))
            .expect("enter the inside host")
    };
    let mut held = connect(Duration::from_secs(5)).expect("the second connection");
    held.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    held.write_all(b"x").expect("write");

    // The pool is empty: the third connection's SYNs are dropped.
    let third = connect(Duration::from_millis(1500));
    assert!(third.is_err(), "a third connection with the pool empty");
    nat.wait_log(|log| log.contains("snat: pool exhausted, dropping tcp 10.0.0.1:"));

    // Close the held connection; the idle timeout frees both ports.
    held.shutdown(std::net::Shutdown::Write)
        .expect("half-close");
    let mut echo = Vec::new();
    held.read_to_end(&mut echo).expect("read the echo");
    assert_eq!(echo, b"x");
    drop(held);
    nat.wait_expiry(2);

    // A new connection gets a port again.
    let data = pattern(64 << 10, 3);
    assert!(client(&inside, &data, None) == data, "echo after reuse");
    let peers = server.join();
    let tcp_ports: Vec<u16> = peers.iter().map(|(p, _)| nat.peer_port(p)).collect();
    assert_ne!(tcp_ports[0], udp_port, "UDP and TCP at once: two ports");
    // The UDP mapping went idle first, so its port was freed first, and
    // the pool hands out the least recently freed port.
    assert_eq!(tcp_ports[1], udp_port, "the port freed first is reused");
    assert_eq!(
        peers[1].1, data,
        "the server received the new connection's bytes"
    );

    nat.no_checksum_errors();
    nat.ctl.check_alive();
    nat.sw.check_alive();
    assert!(t0.elapsed() < TEST_BUDGET, "took {:?}", t0.elapsed());
}

/// IPv4 fragments: a UDP datagram the inside host fragments reaches the
/// outside whole (its first fragment through the connection's flow, the
/// later ones through the app's address-only translation: the outside
/// host's stack reassembles it and verifies its UDP checksum); one
/// fragmented on the outside does not get in (the app does not reassemble:
/// its later fragments are dropped and counted), and a small reply does.
#[test]
fn snat_app_fragments_out_whole_and_not_in() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let t0 = Instant::now();
    // An idle timeout the exchange cannot outlast: the small reply needs
    // the connection's flows.
    let Some(mut nat) = Nat::start("nat-frag", None, POOL, 10) else {
        return;
    };
    let outside = in_netns(Some(&nat.net.h[1]), || UdpSocket::bind((OUTSIDE_IP, 7003)))
        .expect("enter the outside host")
        .expect("bind the outside socket");
    let inside = in_netns(Some(&nat.net.h[0]), || UdpSocket::bind((INSIDE_IP, 5354)))
        .expect("enter the inside host")
        .expect("bind the inside socket");
    for s in [&outside, &inside] {
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
    }
    // 4,000 bytes: three fragments at the veths' MTU of 1,500.
    let big = pattern(4000, 9);
    inside.send_to(&big, (OUTSIDE_IP, 7003)).expect("send");
    let mut buf = vec![0u8; 65536];
    let (n, peer) = outside
        .recv_from(&mut buf)
        .expect("the fragmented datagram, reassembled (timed out?)");
    assert_eq!(&buf[..n], &big[..], "the datagram's bytes");
    assert_eq!(peer.ip().to_string(), NAT_IP, "translated source");
    let pool_port = nat.peer_port(&peer);

    // Back, fragmented by the outside host: the first fragment takes the
    // reverse flow, the later ones are dropped; the inside host gets
    // nothing (it drops the incomplete datagram when reassembly times out).
    outside
        .send_to(&pattern(4000, 10), peer)
        .expect("send back");
    nat.wait_log(|log| log.contains("snat: dropped 1 later fragments from outside"));
    // A datagram that needs no fragmenting gets in.
    outside.send_to(b"small", peer).expect("send back");
    let (n, from) = inside.recv_from(&mut buf).expect("the small reply");
    assert_eq!(&buf[..n], b"small", "only the small reply arrived");
    assert_eq!(from.to_string(), format!("{OUTSIDE_IP}:7003"));
    let flows = nat.flows("after the fragments");
    assert_eq!(
        flow_lines(&flows)
            .iter()
            .filter(|l| l.contains(&format!("set_field:{pool_port}->udp_src")))
            .count(),
        1,
        "one forward flow for the datagrams' connection"
    );
    // The connection's pair and the table-miss entry: no flow (and no
    // pool port) for a later fragment's payload read as ports.
    assert_eq!(flow_lines(&flows).len(), 3, "{flows}");

    nat.no_checksum_errors();
    nat.ctl.check_alive();
    nat.sw.check_alive();
    assert!(t0.elapsed() < TEST_BUDGET, "took {:?}", t0.elapsed());
}

/// The app's unit tests, which need no switch (see `snat_test.py`).
#[test]
fn snat_app_unit_tests() {
    let Some(venv) = venv(WHAT) else {
        return;
    };
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../apps/osken/snat_test.py");
    let out = Command::new(venv.join("osken/bin/python"))
        .args(["-W", "ignore", script])
        .output()
        .expect("running snat_test.py");
    assert!(
        out.status.success(),
        "{script} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

// ---------------------------------------------------------------------
// Topology and processes.

/// Host 1 moves to the outside network; host 0 routes via the gateway.
fn address_plan(net: &Net) {
    let out = &net.h[1];
    ip(&["-n", out, "addr", "flush", "dev", "eth0"]);
    ip(&["-n", out, "addr", "add", "192.0.2.2/24", "dev", "eth0"]);
    ip(&[
        "-n", &net.h[0], "route", "add", "default", "via", GATEWAY_IP,
    ]);
}

/// The MAC of `eth0` in namespace `ns`.
fn mac_of(ns: &str) -> String {
    let out = sh(
        "ip",
        &["netns", "exec", ns, "cat", "/sys/class/net/eth0/address"],
    );
    assert!(out.status.success(), "MAC of eth0 in {ns}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `offlow run` on both ports, connecting to the controller on `ctl_port`
/// and listening for ovs-ofctl on `listen_port`; with `offload`, the tier
/// at that hook with its promotion thresholds lowered (configuration
/// file).
fn start_switch(
    net: &Net,
    ctl_port: u16,
    listen_port: u16,
    offload: Option<&str>,
    scratch: &Scratch,
) -> Proc {
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
    if let Some(hook) = offload {
        // Every received frame sampled (exact rates), and a flow at
        // 100 pps for two 100 ms ticks goes down: the paced transfer runs
        // at ~2,000 segments/s, but the outside host's GRO merges each
        // burst, so its ACKs (the reverse flow) come at a few hundred a
        // second.
        let config = scratch.file("offlow.toml");
        std::fs::write(
            &config,
            format!(
                "[offload]\nmode = \"{hook}\"\nsample_every = 1\npromote_pps = 100\ndemote_pps = 10\n"
            ),
        )
        .expect("offlow.toml");
        cmd.arg("--config").arg(&config);
    }
    let mut p = Proc::spawn("offlow run", cmd, &scratch.file("offlow.log"));
    wait_listening(&mut p, listen_port);
    p
}

// ---------------------------------------------------------------------
// Flows.

/// The forward and reverse flows of the connection the NAT gave
/// `pool_port`, in a dump.
fn check_flow_pair(dump: &str, pool_port: u16) {
    let lines = flow_lines(dump);
    let idle = format!("idle_timeout={IDLE_TIMEOUT}");
    let forward = lines.iter().find(|l| {
        l.contains(&format!("set_field:{pool_port}->tcp_src"))
            && l.contains("in_port=1")
            && l.contains(&format!("nw_src={INSIDE_IP}"))
            && l.contains(&format!("nw_dst={OUTSIDE_IP}"))
            && l.contains(&format!("tp_dst={SERVER_PORT}"))
            && l.contains(&format!("set_field:{NAT_IP}->ip_src"))
            && l.ends_with("output:2")
    });
    let forward = forward.unwrap_or_else(|| panic!("forward flow of {pool_port}: {dump}"));
    let reverse = lines.iter().find(|l| {
        l.contains(&format!("tp_dst={pool_port}"))
            && l.contains("in_port=2")
            && l.contains(&format!("nw_src={OUTSIDE_IP}"))
            && l.contains(&format!("nw_dst={NAT_IP}"))
            && l.contains(&format!("tp_src={SERVER_PORT}"))
            && l.contains(&format!("set_field:{INSIDE_IP}->ip_dst"))
            && l.contains("->tcp_dst")
            && l.ends_with("output:1")
    });
    let reverse = reverse.unwrap_or_else(|| panic!("reverse flow of {pool_port}: {dump}"));
    for l in [forward, reverse] {
        assert!(l.contains(&idle), "{l}");
        assert!(l.contains("send_flow_rem"), "{l}");
        assert!(l.contains("tcp,"), "{l}");
    }
}

// ---------------------------------------------------------------------
// Traffic.

/// `len` bytes of a pattern that differs per `seed` and shifts every
/// 2 KiB (a reordered or repeated segment shows).
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i % 251) as u8 ^ (i >> 11) as u8 ^ seed.wrapping_mul(37))
        .collect()
}

/// An echo server on the outside host for `n` connections: each is read
/// to its end, echoed back and closed. `join` gives each peer address
/// with the bytes it sent.
struct Server(JoinHandle<Vec<(SocketAddr, Vec<u8>)>>);

impl Server {
    fn start(net: &Net, n: usize) -> Server {
        let l = in_netns(Some(&net.h[1]), || {
            TcpListener::bind((OUTSIDE_IP, SERVER_PORT))
        })
        .expect("enter the outside host")
        .expect("bind the server");
        l.set_nonblocking(true).expect("nonblocking listener");
        Server(std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(15);
            let mut conns = Vec::new();
            while conns.len() < n {
                match l.accept() {
                    Ok((s, peer)) => {
                        conns.push(std::thread::spawn(move || (peer, echo(s))));
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        assert!(Instant::now() < deadline, "no connection arrived");
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(e) => panic!("accept: {e}"),
                }
            }
            conns
                .into_iter()
                .map(|c| c.join().expect("echo thread"))
                .collect()
        }))
    }

    fn join(self) -> Vec<(SocketAddr, Vec<u8>)> {
        self.0.join().expect("server thread")
    }
}

/// Read `s` to its end, write it all back, close.
fn echo(mut s: TcpStream) -> Vec<u8> {
    s.set_nonblocking(false).expect("blocking");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s.set_write_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut v = Vec::new();
    s.read_to_end(&mut v).expect("server read (timed out?)");
    s.write_all(&v).expect("server write");
    v
}

/// Connect from the inside host `ns` to the server, send `data` (64 KiB
/// at a time, sleeping `pace` after each), half-close, read the echo.
fn client(ns: &str, data: &[u8], pace: Option<Duration>) -> Vec<u8> {
    let to: SocketAddr = format!("{OUTSIDE_IP}:{SERVER_PORT}").parse().unwrap();
    let mut s = in_netns(Some(ns), || {
        TcpStream::connect_timeout(&to, Duration::from_secs(5))
    })
    .expect("enter the inside host")
    .expect("connect through the NAT");
    s.set_write_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    // The echo is read on a thread while we write: neither side's buffers
    // need to hold the whole transfer.
    let mut r = s.try_clone().expect("clone");
    let reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        r.read_to_end(&mut v).map(|_| v)
    });
    for chunk in data.chunks(64 << 10) {
        s.write_all(chunk).expect("client write");
        if let Some(p) = pace {
            std::thread::sleep(p);
        }
    }
    s.shutdown(std::net::Shutdown::Write).expect("half-close");
    reader
        .join()
        .expect("reader thread")
        .expect("client read (timed out?)")
}

/// Send `msg` from 10.0.0.1:5353 to an echo socket on the outside host,
/// which sends it back to whoever it came from; the peer the outside saw
/// and what the inside received.
fn udp_exchange(net: &Net, msg: &[u8]) -> (SocketAddr, Vec<u8>) {
    let echo = in_netns(Some(&net.h[1]), || UdpSocket::bind((OUTSIDE_IP, 7002)))
        .expect("enter the outside host")
        .expect("bind the UDP echo");
    echo.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let echoer = std::thread::spawn(move || {
        let mut buf = [0u8; 1500];
        let (n, peer) = echo.recv_from(&mut buf).expect("the datagram (timed out?)");
        echo.send_to(&buf[..n], peer).expect("echo");
        peer
    });
    let s = in_netns(Some(&net.h[0]), || UdpSocket::bind((INSIDE_IP, 5353)))
        .expect("enter the inside host")
        .expect("bind the UDP client");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    s.send_to(msg, (OUTSIDE_IP, 7002)).expect("send");
    let mut buf = [0u8; 1500];
    let (n, from) = s.recv_from(&mut buf).expect("the echo (timed out?)");
    assert_eq!(
        from.to_string(),
        format!("{OUTSIDE_IP}:7002"),
        "the echo's source"
    );
    (echoer.join().expect("echo thread"), buf[..n].to_vec())
}
