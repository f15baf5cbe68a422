//! The offload tier end to end: `offlow run --offload xdp --fail-mode
//! secure` on three AF_PACKET ports (veth pairs into host namespaces these
//! tests create), driven by `ovs-ofctl` while a generator in host 1 sends a
//! steady UDP microflow hot enough to be served by the XDP program.
//!
//! What is checked:
//! - **Barrier consistency (DESIGN invariant 3).** Every frame carries its
//!   sequence number and send time (CLOCK_MONOTONIC, the clock the test
//!   reads when `ovs-ofctl` returns, i.e. after the barrier reply). A frame
//!   sent after a flow-mod's barrier reply must be forwarded by that
//!   flow-mod's program or a later one that had begun before the frame was
//!   received: out of the right port, with the right bytes (set-field
//!   rounds), and to nobody after `del-flows`. One frame the other way is a
//!   failure. Flow-mods come from `ovs-ofctl` (timed when it exits, after
//!   the reply) and from a raw controller connection (timed at the reply
//!   itself). No frame sent before the deletion is lost or doubled while
//!   entries are replaced. (A backend delayed 5 ms with a barrier that did
//!   not wait for it showed ~1,750 stale frames here; the real code none.)
//! - **Counters (DESIGN invariant 4).** After the traffic stops, the rule's
//!   `n_packets` equals the frames sent (less the frames the kernel dropped
//!   before the switch, read from the veth counters and reported), the
//!   hosts received exactly the frames forwarded (less drops after the
//!   switch, likewise), and the port counters include the offloaded frames.
//! - **The tier served the flow.** The switch's exit log (`offload tier
//!   stopped hits=… revalidated=…`) must show hits, and revalidations where
//!   rules changed under offloaded entries: with the tier off the tests
//!   fail.
//!
//! Frames are built by hand and sent on a packet socket (no ARP needed);
//! their destination MAC belongs to no host, so the hosts' stacks drop them
//! quietly and the receivers (packet sockets) see every frame with its
//! bytes. IPv6 is off in every namespace so that no other frame reaches the
//! counters.
//!
//! Needs root, `ip`, `ethtool`, `ovs-ofctl`; otherwise a notice and a pass
//! (a failure under `CI`). The two tests take the same lock: each measures
//! a rate on a shared machine.

use std::net::TcpStream;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use offlow_io::netns::in_netns;

#[allow(dead_code)] // each test file uses a subset of the harness
mod common;

use common::{
    can_run, csum_errors, first_number_after, number_after, sh, stop, tier_stats, Daemon, Net, Peer,
};
use offlow_flow::Field;
use offlow_openflow::message::flow_mod_command;
use offlow_openflow::{Action, Body, FlowMod, Instruction, Message};

/// One test at a time: both send tens of thousands of frames per second.
static SERIAL: Mutex<()> = Mutex::new(());

/// The hosts' offloads: software segmentation, and GRO on: a veth takes
/// frames XDP redirects into it only while its peer runs NAPI (see the
/// demo's `no_segmentation_offload`).
const OFFLOADS: &[&str] = &["tso", "off", "gso", "off", "gro", "on"];

/// Frames per second the generator aims at: well above the placement's
/// 1,000 pps, within what a shared 2-CPU machine sends steadily.
const RATE: u64 = 30_000;

/// The UDP destination port of the test's frames.
const UDP_PORT: u16 = 7300;
/// The payload's first bytes.
const MAGIC: &[u8; 4] = b"OFLC";
/// The frames' source and (initial) destination MAC: no host's.
const SRC_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const DST_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];

fn prerequisites(what: &str) -> bool {
    can_run(what, true, &["ovs-ofctl", "ethtool", "ip"])
}

/// CLOCK_MONOTONIC in nanoseconds.
fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

// ---------------------------------------------------------------------
// The topology and the switch.

/// Three hosts on switch ports 1, 2, 3 (IPv6 off everywhere), and the
/// switch on them with the XDP tier, its log collected.
fn setup() -> (Net, Daemon, JoinHandle<String>) {
    setup_with(3, &[])
}

/// [`setup`] with `hosts` hosts and `extra` arguments for `offlow run`.
fn setup_with(hosts: usize, extra: &[&str]) -> (Net, Daemon, JoinHandle<String>) {
    setup_at("xdp", hosts, extra)
}

/// [`setup_with`] with the tier at `hook` (`xdp` or `tc`).
fn setup_at(hook: &str, hosts: usize, extra: &[&str]) -> (Net, Daemon, JoinHandle<String>) {
    let net = Net::with_hosts("ofo", OFFLOADS, hosts, &[]);
    for ns in net.h.iter().chain([&net.sw]) {
        let out = sh(
            "ip",
            &[
                "netns",
                "exec",
                ns,
                "sysctl",
                "-qw",
                "net.ipv6.conf.all.disable_ipv6=1",
                "net.ipv6.conf.default.disable_ipv6=1",
            ],
        );
        assert!(out.status.success(), "sysctl in {ns}");
    }
    for i in 0..hosts {
        net.link(i, None);
    }
    let mut args = vec!["--netns", net.sw.as_str()];
    for p in &net.ports {
        args.extend(["--port", p.as_str()]);
    }
    args.extend(["--offload", hook, "--fail-mode", "secure"]);
    args.extend_from_slice(extra);
    let (d, log) = Daemon::start_logged(&args);
    (net, d, log)
}

// ---------------------------------------------------------------------
// Packet sockets.

/// A packet socket in namespace `ns` bound to its `eth0`, for `protocol`
/// (host order; 0: send only).
fn packet_socket(ns: &str, protocol: u16) -> OwnedFd {
    in_netns(Some(ns), || {
        let proto = protocol.to_be();
        // SAFETY: plain socket/if_nametoindex/bind calls on values we own.
        unsafe {
            let fd = libc::socket(libc::AF_PACKET, libc::SOCK_RAW, proto as i32);
            assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
            let fd = OwnedFd::from_raw_fd(fd);
            let ifindex = libc::if_nametoindex(c"eth0".as_ptr());
            assert!(ifindex > 0, "eth0 in {ns}");
            let mut sll: libc::sockaddr_ll = std::mem::zeroed();
            sll.sll_family = libc::AF_PACKET as u16;
            sll.sll_protocol = proto;
            sll.sll_ifindex = ifindex as i32;
            let rc = libc::bind(
                fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            );
            assert_eq!(rc, 0, "bind: {}", std::io::Error::last_os_error());
            fd
        }
    })
    .expect("enter host namespace")
}

fn setsockopt_int(fd: &OwnedFd, level: i32, name: i32, v: libc::c_int) {
    // SAFETY: setsockopt with a c_int value of the size given.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as u32,
        )
    };
    assert_eq!(rc, 0, "setsockopt: {}", std::io::Error::last_os_error());
}

/// The test frame with `seq` and `sent` (74 bytes): Ethernet, IPv4
/// 10.0.0.1 → 10.0.0.2 (header checksum set), UDP `sport` → [`UDP_PORT`]
/// (checksum 0: none), payload magic, seq, send time.
fn frame_from(seq: u64, sent: u64, sport: u16) -> [u8; 74] {
    let mut f = [0u8; 74];
    f[0..6].copy_from_slice(&DST_MAC);
    f[6..12].copy_from_slice(&SRC_MAC);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&60u16.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&[10, 0, 0, 1]);
    ip[16..20].copy_from_slice(&[10, 0, 0, 2]);
    let mut sum: u32 = ip
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[36..38].copy_from_slice(&UDP_PORT.to_be_bytes());
    f[38..40].copy_from_slice(&40u16.to_be_bytes());
    f[42..46].copy_from_slice(MAGIC);
    f[46..54].copy_from_slice(&seq.to_be_bytes());
    f[54..62].copy_from_slice(&sent.to_be_bytes());
    f
}

/// The generator: sends [`frame`]s from host 0 at [`RATE`] until told to
/// stop; numbers continue from `first_seq`.
/// A failing test drops it unfinished: the thread is told to stop.
struct Generator {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<GenOut>>,
}

impl Drop for Generator {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[derive(Debug, Clone, Copy)]
struct GenOut {
    /// Frames the kernel took (`send` succeeded): seq `first..first+sent`.
    sent: u64,
    /// `send` calls that failed (the frame was not sent; its number is
    /// used again).
    failed: u64,
}

impl Generator {
    fn start(net: &Net, first_seq: u64) -> Generator {
        Generator::spread(net, first_seq, 1)
    }

    /// [`Generator::start`], frame `seq` from source port 10000 + `seq %
    /// flows`: `flows` microflows in turn (1: one, from 7299).
    fn spread(net: &Net, first_seq: u64, flows: u64) -> Generator {
        let fd = packet_socket(&net.h[0], 0);
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let (mut sent, mut failed) = (0u64, 0u64);
            let start = Instant::now();
            while !flag.load(Ordering::Relaxed) {
                let due = start.elapsed().as_nanos() as u64 * RATE / 1_000_000_000;
                // Bursts of at most 32: after a stall the generator
                // catches up in small steps rather than one flood.
                for _ in 0..due.saturating_sub(sent).min(32) {
                    let seq = first_seq + sent;
                    let sport = match flows {
                        1 => 7299,
                        n => 10_000 + (seq % n) as u16,
                    };
                    let f = frame_from(seq, now_ns(), sport);
                    // SAFETY: send from a buffer we own, its length given.
                    let n = unsafe { libc::send(fd.as_raw_fd(), f.as_ptr().cast(), f.len(), 0) };
                    if n == f.len() as isize {
                        sent += 1;
                    } else {
                        failed += 1;
                    }
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            GenOut { sent, failed }
        });
        Generator {
            stop,
            handle: Some(handle),
        }
    }

    fn finish(mut self) -> GenOut {
        self.stop.store(true, Ordering::Relaxed);
        let h = self.handle.take().expect("running");
        h.join().expect("generator thread")
    }
}

/// A test frame as a host received it.
#[derive(Debug, Clone, Copy)]
struct Got {
    /// The switch port it left by (2 or 3).
    port: u32,
    seq: u64,
    sent: u64,
    /// When the receiver read it (after the switch was done with it).
    received: u64,
    /// The last byte of its destination MAC.
    dst: u8,
    /// Its IPv4 ToS byte.
    tos: u8,
}

/// A receiver: a packet socket on host `h[port-1]`'s `eth0` recording
/// every test frame until told to stop (then it drains what is queued).
/// Told to stop when dropped unfinished (a failing test).
struct Receiver {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<(Vec<Got>, u64)>>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl Receiver {
    fn start(net: &Net, port: u32) -> Receiver {
        let fd = packet_socket(&net.h[port as usize - 1], libc::ETH_P_IP as u16);
        // Room for seconds of frames if the machine starves this thread.
        setsockopt_int(&fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, 64 << 20);
        let tv = libc::timeval {
            tv_sec: 0,
            tv_usec: 50_000,
        };
        // SAFETY: setsockopt with a timeval of the size given.
        let rc = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as u32,
            )
        };
        assert_eq!(rc, 0, "SO_RCVTIMEO");
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut got = Vec::new();
            let mut buf = [0u8; 2048];
            loop {
                // SAFETY: sockaddr_ll is plain data; all zeroes is valid.
                let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
                let mut len = std::mem::size_of::<libc::sockaddr_ll>() as u32;
                // SAFETY: recvfrom into buffers we own, lengths given.
                let n = unsafe {
                    libc::recvfrom(
                        fd.as_raw_fd(),
                        buf.as_mut_ptr().cast(),
                        buf.len(),
                        0,
                        (&mut sll as *mut libc::sockaddr_ll).cast(),
                        &mut len,
                    )
                };
                let received = now_ns();
                if n < 0 {
                    // Timed out: done once told to stop and drained.
                    if flag.load(Ordering::Relaxed) {
                        break;
                    }
                    continue;
                }
                let f = &buf[..n as usize];
                if sll.sll_pkttype == libc::PACKET_OUTGOING
                    || f.len() < 62
                    || f[36..38] != UDP_PORT.to_be_bytes()
                    || &f[42..46] != MAGIC
                {
                    continue;
                }
                got.push(Got {
                    port,
                    seq: u64::from_be_bytes(f[46..54].try_into().unwrap()),
                    sent: u64::from_be_bytes(f[54..62].try_into().unwrap()),
                    received,
                    dst: f[5],
                    tos: f[15],
                });
            }
            // Frames the socket itself dropped (buffer full).
            let mut st = [0u32; 2];
            let mut len = std::mem::size_of_val(&st) as u32;
            // SAFETY: PACKET_STATISTICS fills a tpacket_stats (two u32s).
            let rc = unsafe {
                libc::getsockopt(
                    fd.as_raw_fd(),
                    libc::SOL_PACKET,
                    libc::PACKET_STATISTICS,
                    st.as_mut_ptr().cast(),
                    &mut len,
                )
            };
            assert_eq!(rc, 0, "PACKET_STATISTICS");
            (got, u64::from(st[1]))
        });
        Receiver {
            stop,
            handle: Some(handle),
        }
    }

    /// Stop (after draining) and return the frames and the socket's drops.
    fn finish(mut self) -> (Vec<Got>, u64) {
        self.stop.store(true, Ordering::Relaxed);
        let h = self.handle.take().expect("running");
        h.join().expect("receiver thread")
    }
}

// ---------------------------------------------------------------------
// Kernel drop counters.

/// The veth drop counters of one end: `/sys/.../statistics` rx/tx
/// dropped and `ethtool -S` drops and XDP transmit errors.
fn veth_drops(ns: &str, dev: &str) -> Vec<(String, u64)> {
    let mut v = Vec::new();
    for s in ["rx_dropped", "tx_dropped"] {
        let out = sh(
            "ip",
            &[
                "netns",
                "exec",
                ns,
                "cat",
                &format!("/sys/class/net/{dev}/statistics/{s}"),
            ],
        );
        let n = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .unwrap_or(0);
        v.push((s.to_string(), n));
    }
    let out = sh("ip", &["netns", "exec", ns, "ethtool", "-S", dev]);
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some((k, n)) = l.trim().split_once(':') {
            if k.ends_with("drops") || k.ends_with("errors") {
                v.push((k.to_string(), n.trim().parse().unwrap_or(0)));
            }
        }
    }
    v
}

/// Every veth end's drop counters: `(end, counter, value)`.
fn all_drops(net: &Net) -> Vec<(String, String, u64)> {
    let mut v = Vec::new();
    for i in 0..3 {
        for (k, n) in veth_drops(&net.h[i], "eth0") {
            v.push((format!("h{}.eth0", i + 1), k, n));
        }
        for (k, n) in veth_drops(&net.sw, &net.ports[i]) {
            v.push((format!("p{}", i + 1), k, n));
        }
    }
    v
}

/// The counters that grew between two [`all_drops`] snapshots.
fn grown(before: &[(String, String, u64)], after: &[(String, String, u64)]) -> Vec<String> {
    after
        .iter()
        .filter_map(|(end, k, n)| {
            let b = before
                .iter()
                .find(|(e, kk, _)| e == end && kk == k)
                .map_or(0, |x| x.2);
            (*n > b).then(|| format!("{end} {k} +{}", n - b))
        })
        .collect()
}

/// The growth of counter `name` of end `end` (as named in [`all_drops`]).
fn grown_by(
    before: &[(String, String, u64)],
    after: &[(String, String, u64)],
    end: &str,
    name: &str,
) -> u64 {
    let find = |v: &[(String, String, u64)]| {
        v.iter()
            .find(|(e, k, _)| e == end && k == name)
            .map_or(0, |x| x.2)
    };
    find(after) - find(before)
}

// ---------------------------------------------------------------------
// The flow and its programs.

const MATCH: &str = "in_port=1,udp";

/// What a program does to a test frame: `None`, nobody gets it.
type Outcome = Option<(u32, u8, u8)>;

/// One version of the rule: when its flow-mod began, when its barrier
/// reply had come (ovs-ofctl returned), and what it does.
#[derive(Debug)]
struct Program {
    began: u64,
    done: u64,
    outcome: Outcome,
    what: String,
}

/// Run one `ovs-ofctl` flow command (it sends a barrier request after the
/// flow-mod and exits when the reply comes) and record the program it
/// makes. The process is waited for without polling (`--timeout` bounds
/// it), so `done` trails the reply by ovs-ofctl's exit only: frames sent in
/// between count as sent before the reply, which only loosens the check.
fn apply(d: &Daemon, progs: &mut Vec<Program>, args: &[&str], outcome: Outcome) {
    let command = args.iter().position(|a| !a.starts_with('-')).unwrap();
    let began = now_ns();
    let out = Command::new("ovs-ofctl")
        .args(["-O", "OpenFlow13", "--no-names", "--timeout=20"])
        .args(&args[..=command])
        .arg(d.target())
        .args(&args[command + 1..])
        .output()
        .expect("run ovs-ofctl");
    let done = now_ns();
    assert!(
        out.status.success(),
        "ovs-ofctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    progs.push(Program {
        began,
        done,
        outcome,
        what: args.join(" "),
    });
}

/// The same as a controller on its own connection: a MODIFY flow-mod for
/// the rule (output to `port`, no rewrites), then a barrier request; `done`
/// is read the moment the barrier reply has been decoded.
fn apply_raw(p: &mut Peer, xid: u32, progs: &mut Vec<Program>, port: u32) {
    let mut m = offlow_flow::Match::ANY;
    m.set_exact(Field::InPort, 1);
    m.set_exact(Field::EthType, 0x0800);
    m.set_exact(Field::IpProto, 17);
    let fm = FlowMod {
        command: flow_mod_command::MODIFY,
        ..FlowMod::add(
            0,
            0x8000,
            &m,
            vec![Instruction::ApplyActions(vec![Action::Output {
                port,
                max_len: 0,
            }])],
        )
    };
    let began = now_ns();
    p.send(&Message::new(xid, Body::FlowMod(fm)));
    p.send(&Message::new(xid + 1, Body::BarrierRequest));
    loop {
        let r = p.recv();
        match r.body {
            Body::BarrierReply if r.xid == xid + 1 => break,
            Body::Error(e) => panic!("flow-mod refused: {e:?}"),
            _ => {}
        }
    }
    let done = now_ns();
    progs.push(Program {
        began,
        done,
        outcome: Some((port, DST_MAC[5], 0)),
        what: format!("raw MODIFY output:{port}"),
    });
}

/// The switch's counters for the rule: `n_packets` (None: no such rule).
fn rule_packets(d: &Daemon) -> Option<u64> {
    let dump = d.ofctl(&["dump-flows", MATCH]);
    common::flow_lines(&dump)
        .first()
        .map(|l| first_number_after(l, "n_packets="))
}

/// `(rx, tx)` packets of OpenFlow port `port`.
/// The rule's n_packets once it holds still: the tier's counters are read
/// every 100 ms (and before each statistics reply), so frames served in
/// the kernel reach the rule a little after they were forwarded.
fn settled_rule_packets(d: &Daemon) -> u64 {
    std::thread::sleep(Duration::from_millis(300));
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut n_packets = rule_packets(d).expect("the rule");
    loop {
        std::thread::sleep(Duration::from_millis(250));
        let n = rule_packets(d).expect("the rule");
        if n == n_packets || Instant::now() > deadline {
            return n;
        }
        n_packets = n;
    }
}

fn port_packets(d: &Daemon, port: u32) -> (u64, u64) {
    let out = d.ofctl(&["dump-ports", &port.to_string()]);
    (
        first_number_after(&out, "rx pkts="),
        first_number_after(&out, "tx pkts="),
    )
}

// ---------------------------------------------------------------------
// The tests.

/// Flow-mods while the XDP tier serves the flow: after each barrier reply
/// no frame takes the old action. With `ovs-ofctl`: ten rounds move the
/// output between ports 2 and 3, two rewrite bytes on the same port (ToS,
/// destination MAC), one both; then ten more moves as a raw controller
/// (timed at the barrier reply itself); the last deletes the rule. Then the
/// switch's exit log must show the tier served frames and revalidated
/// entries at (at least) half of the flow-mods.
#[test]
fn barrier_reply_follows_the_offloaded_program() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !prerequisites("the offload consistency test") {
        return;
    }
    let (net, d, log) = setup();
    let mut progs = Vec::new();
    apply(
        &d,
        &mut progs,
        &["add-flow", &format!("{MATCH},actions=output:2")],
        Some((2, DST_MAC[5], 0)),
    );
    let rx2 = Receiver::start(&net, 2);
    let rx3 = Receiver::start(&net, 3);
    let drops_before = all_drops(&net);
    let generator = Generator::start(&net, 0);
    // Placement: 1,000 pps for two 100 ms ticks; give it a second.
    std::thread::sleep(Duration::from_millis(1200));

    let mut rounds: Vec<(String, Outcome)> = (1..=10)
        .map(|r| {
            let port = if r % 2 == 1 { 3 } else { 2 };
            (
                format!("actions=output:{port}"),
                Some((port, DST_MAC[5], 0)),
            )
        })
        .collect();
    // Same port (2), other bytes: ToS 32 (DSCP 8), then the MAC as well.
    rounds.push((
        "actions=mod_nw_tos:32,output:2".into(),
        Some((2, DST_MAC[5], 32)),
    ));
    rounds.push((
        "actions=mod_nw_tos:32,mod_dl_dst:02:00:00:00:00:bb,output:2".into(),
        Some((2, 0xbb, 32)),
    ));
    rounds.push((
        "actions=mod_dl_dst:02:00:00:00:00:cc,output:3".into(),
        Some((3, 0xcc, 0)),
    ));
    for (actions, outcome) in &rounds {
        apply(
            &d,
            &mut progs,
            &["mod-flows", &format!("{MATCH},{actions}")],
            *outcome,
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    // Ten more, as a controller times them: at the barrier reply.
    let mut peer = Peer::new(TcpStream::connect(("127.0.0.1", d.port)).expect("connect"));
    peer.handshake();
    for r in 0..10u32 {
        apply_raw(
            &mut peer,
            100 + 2 * r,
            &mut progs,
            if r % 2 == 0 { 2 } else { 3 },
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    // Drops up to here are losses; after the deletion the kernel drops
    // the table misses (XDP_DROP) by design.
    let grew = grown(&drops_before, &all_drops(&net));
    apply(&d, &mut progs, &["--strict", "del-flows", MATCH], None);
    std::thread::sleep(Duration::from_millis(500));
    let gen = generator.finish();
    std::thread::sleep(Duration::from_millis(200));
    let (mut got, drops2) = rx2.finish();
    let (got3, drops3) = rx3.finish();
    got.extend(got3);
    let text = stop(d, log);
    let tier = tier_stats(&text);

    // Each frame against the programs: `first` is the last one whose
    // barrier reply came before the frame was sent; any program from it
    // up to the last one begun before the frame was received may have
    // served it.
    let mut stale = Vec::new();
    let mut after = vec![0u64; progs.len()];
    // Frames sent within a millisecond after a reply: the window a late
    // update would show in.
    let mut close = 0u64;
    for g in &got {
        let first = progs
            .iter()
            .rposition(|p| p.done < g.sent)
            .expect("sent after the first flow");
        let last = progs
            .iter()
            .rposition(|p| p.began < g.received)
            .expect("received after the first flow");
        let seen = Some((g.port, g.dst, g.tos));
        if !(first..=last.max(first)).any(|k| progs[k].outcome == seen) {
            stale.push((g, &progs[first]));
        }
        if progs[first].outcome == seen {
            after[first] += 1;
        }
        if first > 0 && g.sent - progs[first].done < 1_000_000 {
            close += 1;
        }
    }
    eprintln!(
        "offload consistency: {} frames sent ({} send failures), {} received \
         (socket drops {drops2} + {drops3}), {} programs, frames served by each \
         program after its barrier reply: {after:?} ({close} sent within 1 ms \
         of a reply); {}",
        gen.sent,
        gen.failed,
        got.len(),
        progs.len(),
        tier.line
    );
    // No frame is lost or doubled while entries are replaced: every frame
    // up to the last one received that was sent before the deletion
    // arrived once (unless a kernel drop counter grew before the deletion).
    let del = progs.last().expect("the deletion").began;
    let last = got
        .iter()
        .filter(|g| g.sent < del)
        .map(|g| g.seq)
        .max()
        .expect("frames before the deletion");
    let mut seen = vec![0u8; last as usize + 1];
    for g in got.iter().filter(|g| g.seq <= last) {
        seen[g.seq as usize] += 1;
    }
    let missing = seen.iter().filter(|&&n| n == 0).count();
    let doubled = seen.iter().filter(|&&n| n > 1).count();
    eprintln!(
        "offload consistency: frames 0..={last} (sent before the deletion): {missing} missing, \
         {doubled} doubled; kernel drop counters grown: {grew:?}"
    );
    assert_eq!(doubled, 0, "frames delivered twice");
    assert!(
        missing == 0 || !grew.is_empty(),
        "{missing} frames lost with no kernel drop counted"
    );
    assert!(
        stale.is_empty(),
        "{} frames sent after a barrier reply took an older program; first ones: {:#?}",
        stale.len(),
        &stale[..stale.len().min(5)]
    );
    // Not vacuous: every modification round saw frames after its reply.
    for (k, n) in after.iter().enumerate().take(progs.len() - 1) {
        assert!(
            *n > 100,
            "program {k} ({}) served {n} frames",
            progs[k].what
        );
    }
    assert!(tier.hits > 0, "the XDP tier served no frame: {}", tier.line);
    // Each flow-mod that finds the entry offloaded revalidates it (and
    // the deletion too); a starved generator may let placement demote it
    // now and then, so half of them is required.
    let mods = progs.len() as u64 - 1;
    assert!(
        tier.revalidated * 2 >= mods,
        "{} of {mods} flow-mods revalidated an offloaded entry: {}",
        tier.revalidated,
        tier.line
    );
    assert!(tier.installs > 0, "{}", tier.line);
}

/// Counters with the flow offloaded (and revalidated once, so a removed
/// entry's final counters are credited too): the rule's `n_packets` equals
/// the frames sent, the hosts got exactly the frames forwarded, and port 1's
/// rx includes the frames the kernel served.
#[test]
fn offloaded_frames_are_counted_exactly() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !prerequisites("the offload counter test") {
        return;
    }
    let (net, d, log) = setup();
    d.ofctl(&["add-flow", &format!("{MATCH},actions=output:2")]);
    let rx2 = Receiver::start(&net, 2);
    let rx3 = Receiver::start(&net, 3);
    let before = all_drops(&net);
    let generator = Generator::start(&net, 0);
    std::thread::sleep(Duration::from_millis(1500));
    d.ofctl(&["mod-flows", &format!("{MATCH},actions=output:3")]);
    std::thread::sleep(Duration::from_millis(1500));
    let gen = generator.finish();
    let n_packets = settled_rule_packets(&d);
    let (rx1, _) = port_packets(&d, 1);
    let rx1_dropped = first_number_after(&d.ofctl(&["dump-ports", "1"]), "drop=");
    let (_, tx2) = port_packets(&d, 2);
    let (_, tx3) = port_packets(&d, 3);
    let (got2, drops2) = rx2.finish();
    let (got3, drops3) = rx3.finish();
    let after = all_drops(&net);
    let text = stop(d, log);
    let tier = tier_stats(&text);

    let received = (got2.len() + got3.len()) as u64;
    let grew = grown(&before, &after);
    // The veth counters overlap (a veth's totals include its peer's XDP
    // transmit errors, and the sysfs drops repeat the per-queue ones), so
    // each kind of loss is taken from one place. On the way in: host 1's
    // transmit drops (the switch end's queue full), and port 1's rx drop:
    // the switch's own socket drops and its interface's (the switch end's
    // NAPI queue among them, which this test once added up itself).
    let g = |end: &str, name: &str| grown_by(&before, &after, end, name);
    let lost_in = g("h1.eth0", "tx_dropped") + rx1_dropped;
    // On the way out: the switch ends' transmit drops (a full queue, or an
    // XDP redirect refused by the host end), drops in the host ends' NAPI
    // queues, the receivers' socket drops.
    let lost_out = g("p2", "tx_dropped")
        + g("p3", "tx_dropped")
        + g("h2.eth0", "rx_queue_0_drops")
        + g("h3.eth0", "rx_queue_0_drops")
        + drops2
        + drops3;
    eprintln!(
        "offload counters: {} frames sent ({} send failures), rule n_packets={n_packets}, \
         port 1 rx={rx1}, port 2+3 tx={}, received {received} ({} on port 2, {} on port 3), \
         kernel drop counters grown: {grew:?}, port 1 rx drop +{rx1_dropped}, receiver socket \
         drops {drops2}+{drops3}: lost before the switch {lost_in}, after it {lost_out}; {}",
        gen.sent,
        gen.failed,
        tx2 + tx3,
        got2.len(),
        got3.len(),
        tier.line
    );
    // Every sequence number arrived at most once.
    let mut seqs: Vec<u64> = got2.iter().chain(&got3).map(|g| g.seq).collect();
    seqs.sort_unstable();
    let n = seqs.len();
    seqs.dedup();
    assert_eq!(seqs.len(), n, "duplicate frames");
    assert!(seqs.last().is_none_or(|&s| s < gen.sent), "unknown frame");

    assert_eq!(
        n_packets + lost_in,
        gen.sent,
        "rule n_packets + frames dropped before the switch = frames sent"
    );
    assert_eq!(rx1, n_packets, "port 1 rx = the rule's frames");
    assert_eq!(tx2 + tx3, n_packets, "ports 2+3 tx = the rule's frames");
    assert_eq!(
        received + lost_out,
        n_packets,
        "frames received + dropped after the switch = frames forwarded"
    );
    assert!(
        tier.hits > gen.sent / 2,
        "the XDP tier served {} of {} frames: {}",
        tier.hits,
        gen.sent,
        tier.line
    );
    assert!(tier.revalidated > 0, "{}", tier.line);
}

/// Megaflows: a rule per host pair (os-ken's `simple_switch_13` shape:
/// in_port and both MACs), and a sender whose every frame is a new UDP
/// microflow (20,000 source ports in turn, about two frames each in the
/// test: none is ever hot alone). One masked entry for the pair serves
/// them: most frames are the tier's, the tier installs a handful of
/// entries, not thousands, and the counters stay exact as in
/// `offloaded_frames_are_counted_exactly`.
#[test]
fn one_masked_entry_serves_every_microflow_of_a_host_pair() {
    megaflow("xdp");
}

/// The same with the tier at TC ingress: the port's packet socket takes
/// only the frames the program sends up, so the rule counts every frame
/// once, whichever tier served it.
#[test]
fn at_tc_one_masked_entry_serves_every_microflow_of_a_host_pair() {
    megaflow("tc");
}

fn megaflow(hook: &str) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !prerequisites("the megaflow test") {
        return;
    }
    let (net, d, log) = setup_at(hook, 3, &[]);
    let mac = |m: [u8; 6]| {
        m.iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":")
    };
    d.ofctl(&[
        "add-flow",
        &format!(
            // `udp` too, for `rule_packets`' filter: it adds no bit to
            // the mask (the protocol is always matched exactly).
            "in_port=1,udp,dl_src={},dl_dst={},actions=output:2",
            mac(SRC_MAC),
            mac(DST_MAC)
        ),
    ]);
    let rx2 = Receiver::start(&net, 2);
    let before = all_drops(&net);
    let generator = Generator::spread(&net, 0, 20_000);
    std::thread::sleep(Duration::from_millis(3000));
    let gen = generator.finish();
    let n_packets = settled_rule_packets(&d);
    let rx1_dropped = first_number_after(&d.ofctl(&["dump-ports", "1"]), "drop=");
    let (got2, drops2) = rx2.finish();
    let after = all_drops(&net);
    let text = stop(d, log);
    let tier = tier_stats(&text);
    let g = |end: &str, name: &str| grown_by(&before, &after, end, name);
    let lost_in = g("h1.eth0", "tx_dropped") + rx1_dropped;
    let lost_out = g("p2", "tx_dropped") + g("h2.eth0", "rx_queue_0_drops") + drops2;
    let received = got2.len() as u64;
    eprintln!(
        "megaflow: {} frames sent, rule n_packets={n_packets}, received {received}, lost before \
         the switch {lost_in}, after it {lost_out}; {}",
        gen.sent, tier.line
    );
    assert_eq!(
        n_packets + lost_in,
        gen.sent,
        "rule n_packets + dropped before = sent"
    );
    assert_eq!(
        received + lost_out,
        n_packets,
        "received + dropped after = forwarded"
    );
    assert!(
        tier.hits > gen.sent / 2,
        "the tier served {} of {} frames: {}",
        tier.hits,
        gen.sent,
        tier.line
    );
    assert!(
        (1..=4).contains(&tier.installs),
        "one entry for the pair, not one per microflow: {}",
        tier.line
    );
}

/// A port whose interface is deleted and created again (a new interface
/// index, no program on it): the entries sending to it were the tier's,
/// and frames to the new interface must not vanish in the kernel through
/// them. The tier takes those entries back when the interface goes and
/// keeps that port's flows in software; the new host end receives the
/// flow again.
#[test]
fn a_recreated_port_takes_its_flows_back_to_software() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !prerequisites("the re-created port test") {
        return;
    }
    let (net, d, log) = setup();
    d.ofctl(&["add-flow", &format!("{MATCH},actions=output:2")]);
    let generator = Generator::start(&net, 0);
    // Long enough for the flow to go down (placement ticks every 100 ms).
    std::thread::sleep(Duration::from_millis(1500));
    net.unlink(1);
    // At least one link poll sees it gone.
    std::thread::sleep(control_link_poll() * 2);
    net.link(1, None);
    wait_port_up(&d, &net, 1);
    let rx2 = Receiver::start(&net, 2);
    std::thread::sleep(Duration::from_millis(1500));
    let gen = generator.finish();
    std::thread::sleep(Duration::from_millis(200));
    let (got2, _) = rx2.finish();
    let text = stop(d, log);
    let tier = tier_stats(&text);
    eprintln!(
        "re-created port: {} frames sent, {} received on the new port 2; {}",
        gen.sent,
        got2.len(),
        tier.line
    );
    assert!(tier.hits > 0, "the flow was offloaded first: {}", tier.line);
    assert!(
        text.contains("the port's interface is gone"),
        "the tier let go of the port: {text}"
    );
    // 1.5 s at RATE: all but the first moments must arrive.
    assert!(
        got2.len() as u64 > RATE,
        "only {} frames reached the re-created port",
        got2.len()
    );
}

/// At TC the ports' packet sockets take only the frames the program marks
/// as sent up. An ingress port whose interface is re-created has no
/// program any more: its new socket must take every frame, or the port
/// would receive nothing at all.
#[test]
fn at_tc_a_recreated_ingress_port_is_served_in_software() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !prerequisites("the re-created port test") {
        return;
    }
    let (net, d, log) = setup_at("tc", 3, &[]);
    d.ofctl(&["add-flow", &format!("{MATCH},actions=output:2")]);
    net.unlink(0);
    std::thread::sleep(control_link_poll() * 2);
    net.link(0, None);
    wait_port_up(&d, &net, 0);
    // The control side asks the workers to re-open at its next link poll
    // after it sees the interface (the port may show up in the port
    // description first); they do within about an idle sleep.
    std::thread::sleep(control_link_poll() + Duration::from_millis(500));
    let rx2 = Receiver::start(&net, 2);
    let generator = Generator::start(&net, 0);
    std::thread::sleep(Duration::from_millis(1500));
    let gen = generator.finish();
    std::thread::sleep(Duration::from_millis(200));
    let (got2, _) = rx2.finish();
    let text = stop(d, log);
    eprintln!(
        "re-created ingress port at TC: {} frames sent, {} received on port 2",
        gen.sent,
        got2.len()
    );
    assert!(
        got2.len() as u64 > RATE,
        "only {} of {} frames crossed the re-created port 1: {text}",
        got2.len(),
        gen.sent
    );
}

/// Wait (10 s at most) until the switch describes host `i`'s port (port
/// `i + 1`) as up again.
fn wait_port_up(d: &Daemon, net: &Net, i: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let desc = d.ofctl(&["dump-ports-desc"]);
        let up = desc
            .split("\n ")
            .find(|b| b.starts_with(&format!("{}({})", i + 1, net.ports[i])))
            .is_some_and(|b| !b.contains("LINK_DOWN") && !b.contains("PORT_DOWN"));
        if up {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "port {} not up again: {desc}",
            i + 1
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn control_link_poll() -> Duration {
    offlow_switch::LINK_POLL
}

/// A flow through a fast-failover group, served by the XDP tier with the
/// live bucket inlined: the group's counters include the offloaded frames
/// (the group counts exactly what the rule counts, split over its
/// buckets), and the watched port's link going down moves the offloaded
/// flow to the next bucket (re-decided at the next link poll).
#[test]
fn offloaded_groups_count_exactly_and_fail_over() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !prerequisites("the offloaded group test") {
        return;
    }
    let (net, d, log) = setup();
    d.ofctl(&[
        "add-group",
        "group_id=1,type=ff,bucket=watch_port:2,actions=output:2,bucket=watch_port:3,actions=output:3",
    ]);
    d.ofctl(&["add-flow", &format!("{MATCH},actions=group:1")]);
    let rx2 = Receiver::start(&net, 2);
    let rx3 = Receiver::start(&net, 3);
    let generator = Generator::start(&net, 0);
    std::thread::sleep(Duration::from_millis(1500));
    sh("ip", &["-n", &net.sw, "link", "set", &net.ports[1], "down"]);
    // A link poll (1 s) and some traffic after it.
    std::thread::sleep(Duration::from_millis(2000));
    let gen = generator.finish();
    let n_packets = settled_rule_packets(&d);
    let stats = d.ofctl(&["dump-group-stats", "group_id=1"]);
    let (got2, _) = rx2.finish();
    let (got3, _) = rx3.finish();
    let text = stop(d, log);
    let tier = tier_stats(&text);
    eprintln!(
        "offloaded group: {} sent, rule n_packets={n_packets}, received {} on port 2 and {} on \
         port 3; {stats}; {}",
        gen.sent,
        got2.len(),
        got3.len(),
        tier.line
    );
    let group_packets = first_number_after(&stats, "packet_count=");
    assert_eq!(
        group_packets, n_packets,
        "the group counts what the rule counts"
    );
    let buckets: u64 = stats
        .split("bucket")
        .skip(1)
        .map(|b| first_number_after(b, "packet_count="))
        .sum();
    assert_eq!(
        buckets, group_packets,
        "every frame through one bucket: {stats}"
    );
    assert!(!got2.is_empty(), "port 2 served before it went down");
    assert!(!got3.is_empty(), "failed over to port 3");
    assert!(
        tier.hits > gen.sent / 2,
        "the XDP tier served {} of {} frames: {}",
        tier.hits,
        gen.sent,
        tier.line
    );
    assert!(
        tier.revalidated > 0,
        "the port change re-decided the entry: {}",
        tier.line
    );
}

/// Hosts that keep transmit checksum offload on (the veth default) hand
/// the switch TCP and UDP segments whose checksum is partial: the field
/// holds the pseudo-header sum, for "the hardware" to finish. The XDP tier
/// finishes it (the program cannot see the sender's CHECKSUM_PARTIAL; it
/// recognises the pseudo-header sum): 4 MiB over TCP through pinned-down
/// flows arrive intact, UDP datagrams arrive, and neither host's stack
/// counts a checksum error. Before the tier finished them, the receiver
/// dropped ~100 segments as corrupt and the transfer stalled.
#[test]
fn partial_checksums_from_veth_senders_are_finished_by_the_tier() {
    partial_checksums("xdp");
}

/// At TC a partial checksum stays partial (the socket buffer keeps its
/// state through the redirect, and the kernel's helpers update only the
/// pseudo-header part): nothing is finished by the program, and the
/// transfer arrives intact with no checksum error.
#[test]
fn at_tc_partial_checksums_from_veth_senders_stay_partial() {
    partial_checksums("tc");
}

fn partial_checksums(hook: &str) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !prerequisites("the partial checksum test") {
        return;
    }
    let config = std::env::temp_dir().join(format!("offlow-csum-{}.toml", std::process::id()));
    std::fs::write(
        &config,
        format!("[offload]\nmode = \"{hook}\"\npin_down = [\"tcp\", \"udp\"]\n"),
    )
    .expect("offlow.toml");
    let (net, d, log) = setup_at(hook, 2, &["--config", config.to_str().expect("utf-8 path")]);
    let _ = std::fs::remove_file(&config);
    // The premise: the hosts send with checksum offload (OFFLOADS leaves
    // `tx` at the veth default, on).
    for ns in &net.h {
        let k = sh("ip", &["netns", "exec", ns, "ethtool", "-k", "eth0"]);
        let k = String::from_utf8_lossy(&k.stdout);
        assert!(
            k.lines().any(|l| l.trim() == "tx-checksumming: on"),
            "tx checksum offload is on in {ns}: {k}"
        );
    }
    for f in [
        "in_port=1,tcp,actions=output:2",
        "in_port=2,tcp,actions=output:1",
        "in_port=1,udp,actions=output:2",
        "in_port=1,arp,actions=output:2",
        "in_port=2,arp,actions=output:1",
    ] {
        d.ofctl(&["add-flow", f]);
    }
    // Paced over about a second and a half: the connection's flows go
    // down at the first placement tick (pinned), and most of the 4 MiB
    // cross the XDP tier.
    let intact = common::tcp_transfer_paced(&net, 4 << 20, Some(Duration::from_millis(25)));
    // 5,000 datagrams over about a second: the pinned flow goes down at
    // the first placement tick.
    let datagrams = common::udp(&net, 5000, 1, 10);
    let errors: Vec<(String, u64)> = net
        .h
        .iter()
        .flat_map(|ns| ["Tcp:", "Udp:"].map(|p| (format!("{ns} {p}"), csum_errors(ns, p))))
        .collect();
    let text = stop(d, log);
    let tier = tier_stats(&text);
    let counters = text
        .lines()
        .find(|l| l.contains("offload backend counters"))
        .unwrap_or("")
        .to_string();
    eprintln!(
        "partial checksums: TCP intact={intact}, {datagrams} of 5000 datagrams, checksum errors \
         {errors:?}; {}; {counters}",
        tier.line
    );
    assert!(
        errors.iter().all(|(_, n)| *n == 0),
        "the hosts counted checksum errors: {errors:?}"
    );
    assert!(intact, "the 4 MiB arrived intact");
    assert!(datagrams >= 4500, "{datagrams} of 5000 datagrams arrived");
    // ~2,900 data segments, their ACKs and the datagrams: most served in
    // the kernel, with their checksums finished there.
    assert!(
        tier.hits > 3000,
        "the {hook} tier served the flows: {}",
        tier.line
    );
    let finished = number_after(&counters, "csum_finished=").unwrap_or(0);
    if hook == "xdp" {
        assert!(
            finished > 3000,
            "the program finished the partial checksums: {counters}"
        );
    } else {
        assert_eq!(finished, 0, "nothing to finish at TC: {counters}");
    }
}
