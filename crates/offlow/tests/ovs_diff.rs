//! Differential check against Open vSwitch: the same flow file loaded with
//! `ovs-ofctl add-flows` into a private OVS 3.1 bridge and into `offlow run`
//! must dump (`ovs-ofctl dump-flows`) identically once durations and
//! counters are stripped and lines sorted. Also prints the time each switch
//! took for the same 10K-line file (a figure, not an assertion), and the
//! time the same client takes against a peer that does no work at all: the
//! floor set by `ovs-ofctl` and the round trips.
//!
//! OVS runs as a private instance in its own temporary directory
//! (`ovsdb-server` + `ovs-vswitchd --enable-dummy`, bridge of
//! `datapath_type=dummy`: no kernel datapath and no host interface is
//! created), stopped and removed on the way out, pass or fail. Without the
//! OVS binaries the test prints a notice and passes, unless `CI` is set.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

#[allow(dead_code)] // each test file uses a subset of the harness
mod common;

use common::{can_run, flow_lines, ofctl_at, target, Daemon, Ovs};

/// `ovs-ofctl --timeout` here: loading a large file (`OFFLOW_FLOWS`) into
/// either switch on a busy machine takes far longer than one command.
const LIMIT: Duration = Duration::from_secs(300);

/// `ovs-ofctl COMMAND tcp:127.0.0.1:PORT ARGS...`, required to succeed.
fn ofctl(port: u16, args: &[&str]) -> String {
    ofctl_at(LIMIT, port, args)
}

/// Flow lines with duration and counters removed, sorted.
fn normalized(dump: &str) -> Vec<String> {
    let mut v: Vec<String> = flow_lines(dump)
        .into_iter()
        .map(|l| {
            l.split(", ")
                .filter(|f| {
                    let f = f.trim();
                    !(f.starts_with("duration=")
                        || f.starts_with("n_packets=")
                        || f.starts_with("n_bytes=")
                        || f.starts_with("idle_age=")
                        || f.starts_with("hard_age="))
                })
                .collect::<Vec<_>>()
                .join(", ")
                .trim()
                .to_string()
        })
        .collect();
    v.sort();
    v
}

/// A varied flow file: priorities, masked and exact matches over several
/// protocols, several tables, and the common actions.
fn flow_file(n: usize) -> String {
    let mut s = String::new();
    let actions = [
        "output:1",
        "drop",
        "dec_ttl,output:2",
        "mod_dl_dst:02:00:00:00:00:01,output:3",
        "push_vlan:0x8100,set_field:4196->vlan_vid,output:4",
        "goto_table:1",
        "set_field:10.1.1.1->ip_dst,output:5",
        "write_actions(output:6)",
        "set_queue:1,output:7",
        "CONTROLLER:128",
    ];
    for i in 0..n {
        let a = actions[i % actions.len()];
        let (b2, b3) = ((i / 256) % 256, i % 256);
        let m = match i % 5 {
            0 => format!("tcp,nw_src=10.{b2}.{b3}.0/24,tp_dst={}", 1000 + i % 5000),
            1 => format!("udp,nw_dst=192.168.{b3}.{b2},tp_src={}", i % 65536),
            2 => format!("ip,nw_src=172.16.{b3}.0/255.255.255.0,nw_proto=47"),
            3 => format!("in_port={},dl_vlan={}", 1 + i % 8, i % 4095),
            _ => format!("arp,arp_tpa=10.0.{b2}.{b3}"),
        };
        let table = if a == "goto_table:1" { 0 } else { i % 3 };
        s.push_str(&format!(
            "table={table},priority={},cookie=0x{:x},{m},actions={a}\n",
            1 + i % 1000,
            i
        ));
    }
    s
}

#[test]
fn dump_flows_matches_open_vswitch() {
    if !can_run(
        "the Open vSwitch comparison",
        false,
        &["ovs-ofctl", "ovs-vswitchd", "ovsdb-server"],
    ) {
        return;
    }
    let ovs = Ovs::start(0);
    let offlow = Daemon::start(&["--tables", "254"]);
    let dir = std::env::temp_dir().join(format!("offlow-ovsdiff-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("flows.txt");
    // OFFLOW_FLOWS=N loads N lines instead (the flow-mod rate figure in
    // BENCHMARKS.md uses 100,000); the differential check is the same.
    let n: usize = std::env::var("OFFLOW_FLOWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    std::fs::write(&file, flow_file(n)).expect("flow file");
    let f = file.display().to_string();

    let t0 = Instant::now();
    ofctl(ovs.port, &["add-flows", &f]);
    let ovs_secs = t0.elapsed().as_secs_f64();
    let t0 = Instant::now();
    ofctl(offlow.port, &["add-flows", &f]);
    let offlow_secs = t0.elapsed().as_secs_f64();
    // The floor: the same client and file against a peer that does no work.
    let peer = NullPeer::start();
    let t0 = Instant::now();
    ofctl(peer.port, &["add-flows", &f]);
    let floor_secs = t0.elapsed().as_secs_f64();
    let seen = peer.finish();
    eprintln!(
        "add-flows of {n} lines: Open vSwitch {ovs_secs:.3} s, offlow {offlow_secs:.3} s \
         ({:.1}x); a peer doing nothing {floor_secs:.3} s (no switch can beat {:.1}x)",
        ovs_secs / offlow_secs.max(1e-9),
        ovs_secs / floor_secs.max(1e-9)
    );
    // What makes add-flows a ping-pong: a barrier (and a wait) per flow-mod.
    assert_eq!(seen.flow_mods, n as u64, "{seen:?}");
    assert_eq!(seen.barriers, n as u64, "{seen:?}");

    let a = normalized(&ofctl(ovs.port, &["dump-flows"]));
    let b = normalized(&ofctl(offlow.port, &["dump-flows"]));
    assert!(
        a.len() > n * 9 / 10,
        "OVS accepted only {} flows of {n} (duplicates collapse)",
        a.len()
    );
    let only_ovs: Vec<&String> = a.iter().filter(|l| b.binary_search(l).is_err()).collect();
    let only_offlow: Vec<&String> = b.iter().filter(|l| a.binary_search(l).is_err()).collect();
    assert!(
        only_ovs.is_empty() && only_offlow.is_empty(),
        "{} lines only in OVS (first: {:?}), {} only in offlow (first: {:?})",
        only_ovs.len(),
        only_ovs.first(),
        only_offlow.len(),
        only_offlow.first()
    );
    assert_eq!(a, b);
    for l in a.iter().step_by(a.len() / 5) {
        eprintln!("both: {l}");
    }

    // After the same deletes, still identical.
    for args in [
        vec!["del-flows", "table=1,tcp"],
        vec!["--strict", "del-flows", "table=2,priority=5,udp"],
        vec!["del-flows", "cookie=0x10/0xff"],
    ] {
        for port in [ovs.port, offlow.port] {
            ofctl(port, &args);
        }
    }
    let a2 = normalized(&ofctl(ovs.port, &["dump-flows"]));
    let b2 = normalized(&ofctl(offlow.port, &["dump-flows"]));
    assert!(a2.len() < a.len(), "the deletes removed something");
    assert_eq!(a2, b2);

    // The same file pipelined (`offlow bench flow-mods`: every flow-mod
    // back to back, one barrier) into both, emptied first; then the tables
    // must again be identical.
    for port in [ovs.port, offlow.port] {
        ofctl(port, &["del-flows"]);
    }
    let out = Command::new(env!("CARGO_BIN_EXE_offlow"))
        .args(["bench", "flow-mods", "--flows", &f, "--json"])
        .args(["--switch", &target(ovs.port)])
        .args(["--switch", &target(offlow.port)])
        .output()
        .expect("offlow bench flow-mods");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value =
        serde_json::from_str(text.lines().last().unwrap_or("")).expect("JSON last line");
    let rate = |i: usize| json["rows"][i]["rate"].as_f64().expect("rate");
    eprintln!(
        "pipelined flow-mods of {n} lines: Open vSwitch {:.0}/s, offlow {:.0}/s ({:.1}x)",
        rate(0),
        rate(1),
        rate(1) / rate(0).max(1e-9)
    );
    assert_eq!(json["rows"][1]["errors"], 0, "{text}");
    let a3 = normalized(&ofctl(ovs.port, &["dump-flows"]));
    let b3 = normalized(&ofctl(offlow.port, &["dump-flows"]));
    assert_eq!(a3, b3, "pipelined loads give identical tables");
    assert_eq!(a3, a, "and the same tables as add-flows");
    let _ = std::fs::remove_dir_all(&dir);
}

/// What the [`NullPeer`] was sent.
#[derive(Debug, Default)]
struct PeerCounts {
    flow_mods: u64,
    barriers: u64,
}

/// An OpenFlow 1.3 peer that does no work: it answers HELLO, ECHO,
/// FEATURES and BARRIER and drops everything else unread, so timing
/// `ovs-ofctl add-flows` against it measures the client and the round
/// trips, which no switch can beat. Like `offlow run`, it polls the socket
/// for 100 us after each reply before blocking (on this VM an idle vCPU
/// halts, and waking it costs more than the round trip). One connection.
struct NullPeer {
    port: u16,
    thread: JoinHandle<std::io::Result<PeerCounts>>,
}

impl NullPeer {
    const SPIN: Duration = Duration::from_micros(100);

    fn start() -> NullPeer {
        let listener = TcpListener::bind(("127.0.0.1", 0)).expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let thread = std::thread::spawn(move || {
            let (s, _) = listener.accept()?;
            Self::serve(s)
        });
        NullPeer { port, thread }
    }

    /// Wait for the connection to end; what it carried.
    fn finish(self) -> PeerCounts {
        self.thread
            .join()
            .expect("null peer thread")
            .expect("null peer I/O")
    }

    /// Replies to the complete messages at the front of `pending`; returns
    /// the bytes consumed.
    fn answer(pending: &[u8], out: &mut Vec<u8>, counts: &mut PeerCounts) -> usize {
        let mut at = 0;
        while pending.len() - at >= 8 {
            let h = &pending[at..at + 8];
            let len = usize::from(u16::from_be_bytes([h[2], h[3]])).max(8);
            if pending.len() - at < len {
                break;
            }
            let reply = |ty: u8, len: u16| {
                let l = len.to_be_bytes();
                [4, ty, l[0], l[1], h[4], h[5], h[6], h[7]]
            };
            match h[1] {
                0 => out.extend_from_slice(&reply(0, 8)), // HELLO
                2 => {
                    // ECHO_REQUEST -> ECHO_REPLY with the same payload.
                    out.extend_from_slice(&reply(3, len as u16));
                    out.extend_from_slice(&pending[at + 8..at + len]);
                }
                5 => {
                    // FEATURES_REPLY: datapath id 1, nothing else.
                    out.extend_from_slice(&reply(6, 32));
                    out.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 1]);
                    out.extend_from_slice(&[0; 16]);
                }
                14 => counts.flow_mods += 1,
                20 => {
                    counts.barriers += 1;
                    out.extend_from_slice(&reply(21, 8));
                }
                _ => {}
            }
            at += len;
        }
        at
    }

    fn serve(mut s: TcpStream) -> std::io::Result<PeerCounts> {
        s.set_nodelay(true)?;
        let mut counts = PeerCounts::default();
        let (mut pending, mut out) = (Vec::new(), Vec::new());
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            s.set_nonblocking(false)?;
            let n = s.read(&mut buf)?;
            if n == 0 {
                return Ok(counts);
            }
            pending.extend_from_slice(&buf[..n]);
            loop {
                let used = Self::answer(&pending, &mut out, &mut counts);
                pending.drain(..used);
                if !out.is_empty() {
                    s.set_nonblocking(false)?;
                    s.write_all(&out)?;
                    out.clear();
                }
                s.set_nonblocking(true)?;
                let t = Instant::now();
                let got = loop {
                    match s.read(&mut buf) {
                        Ok(0) => return Ok(counts),
                        Ok(n) => break n,
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(e) => return Err(e),
                    }
                    if t.elapsed() >= Self::SPIN {
                        break 0;
                    }
                };
                if got == 0 {
                    break;
                }
                pending.extend_from_slice(&buf[..got]);
            }
        }
    }
}
