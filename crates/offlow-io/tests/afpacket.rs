//! AF_PACKET ports on real veth pairs inside a network namespace this test
//! creates (and always deletes). Needs root (CAP_NET_ADMIN, CAP_NET_RAW):
//! skipped with a notice otherwise, a failure under CI.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use offlow_io::netns::in_netns;
use offlow_io::{csum, AfPacketConfig, AfPacketPort, Port, RxMeta};

static SEQ: AtomicU32 = AtomicU32::new(0);

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("running ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A namespace holding veth pair `a`/`b`, deleted on drop (with the pair).
struct Netns(String);

impl Netns {
    fn new() -> Option<Netns> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            assert!(std::env::var_os("CI").is_none(), "CI runs as root");
            eprintln!("skipping: needs root");
            return None;
        }
        let name = format!(
            "oflio-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        ip(&["netns", "add", &name]);
        let ns = Netns(name);
        ip(&[
            "-n", &ns.0, "link", "add", "name", "va", "type", "veth", "peer", "name", "vb",
        ]);
        ip(&["-n", &ns.0, "link", "set", "va", "up"]);
        ip(&["-n", &ns.0, "link", "set", "vb", "up"]);
        Some(ns)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn open(ns: &Netns, ifname: &str) -> AfPacketPort {
    in_netns(Some(&ns.0), || {
        AfPacketPort::open(&AfPacketConfig::new(ifname))
    })
    .expect("entering the namespace")
    .expect("opening the port")
}

/// Receive until `want` frames (of the test's ethertype or UDP) arrived or
/// two seconds passed; re-inserts stripped VLAN tags.
fn collect(
    port: &mut AfPacketPort,
    want: usize,
    keep: impl Fn(&[u8]) -> bool,
) -> Vec<(Vec<u8>, RxMeta)> {
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut got = Vec::new();
    while got.len() < want && Instant::now() < deadline {
        let n = port
            .recv(64, &mut |f, meta| {
                let mut v = f.to_vec();
                if let Some((tpid, tci)) = meta.vlan {
                    let mut tag = tpid.to_be_bytes().to_vec();
                    tag.extend_from_slice(&tci.to_be_bytes());
                    v.splice(12..12, tag);
                }
                if keep(&v) {
                    got.push((v, meta));
                }
            })
            .unwrap();
        if n == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    got
}

fn test_frame(i: u16, tagged: bool) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 1]);
    if tagged {
        f.extend_from_slice(&[0x81, 0x00, 0x00, 0x2a]);
    }
    f.extend_from_slice(&[0x88, 0xb5]);
    f.extend_from_slice(&i.to_be_bytes());
    f.resize(60, 0x5a);
    f
}

fn is_test(f: &[u8]) -> bool {
    let et = |at: usize| f.get(at..at + 2).map(|b| [b[0], b[1]]);
    et(12) == Some([0x88, 0xb5]) || (et(12) == Some([0x81, 0x00]) && et(16) == Some([0x88, 0xb5]))
}

#[test]
fn frames_cross_a_veth_pair_in_order_with_vlan_tags_restored() {
    let Some(ns) = Netns::new() else { return };
    let mut a = open(&ns, "va");
    let mut b = open(&ns, "vb");
    let sent: Vec<Vec<u8>> = (0..200).map(|i| test_frame(i, i % 3 == 0)).collect();
    for chunk in sent.chunks(50) {
        for f in chunk {
            assert!(b.send(f));
        }
        b.flush().unwrap();
    }
    let got = collect(&mut a, sent.len(), is_test);
    let frames: Vec<Vec<u8>> = got.into_iter().map(|(f, _)| f).collect();
    assert_eq!(frames.len(), sent.len(), "every frame arrives");
    assert_eq!(frames, sent, "in order, byte for byte");
    let st = b.stats();
    assert_eq!(st.tx_packets, 200);
    assert_eq!(st.tx_dropped, 0);
    // Frames b sent are not received back on b (outgoing ignored).
    assert!(collect(&mut b, 1, is_test).is_empty());
}

#[test]
fn a_full_transmit_batch_drops_and_counts() {
    let Some(ns) = Netns::new() else { return };
    let mut cfg = AfPacketConfig::new("vb");
    cfg.tx_batch = 4;
    let mut b = in_netns(Some(&ns.0), || AfPacketPort::open(&cfg))
        .unwrap()
        .unwrap();
    let sent: Vec<bool> = (0..6).map(|i| b.send(&test_frame(i, false))).collect();
    assert_eq!(sent, [true, true, true, true, false, false]);
    assert!(!b.send(&vec![0u8; 4096]), "longer than a slot");
    b.flush().unwrap();
    let st = b.stats();
    assert_eq!((st.tx_packets, st.tx_dropped), (4, 3));
}

#[test]
fn partial_udp_checksums_are_flagged_and_finished() {
    let Some(ns) = Netns::new() else { return };
    ip(&["-n", &ns.0, "addr", "add", "10.77.0.1/24", "dev", "va"]);
    ip(&[
        "-n",
        &ns.0,
        "neigh",
        "add",
        "10.77.0.2",
        "lladdr",
        "02:00:00:00:00:02",
        "dev",
        "va",
    ]);
    let mut b = open(&ns, "vb");
    let sock = in_netns(Some(&ns.0), || std::net::UdpSocket::bind("10.77.0.1:0"))
        .unwrap()
        .unwrap();
    sock.send_to(b"partial checksum, please finish", "10.77.0.2:9999")
        .unwrap();
    let is_udp = |f: &[u8]| f.len() > 34 && f[12..14] == [0x08, 0x00] && f[23] == 17;
    let got = collect(&mut b, 1, is_udp);
    assert_eq!(got.len(), 1);
    let (mut frame, meta) = got.into_iter().next().unwrap();
    assert!(meta.csum_partial, "veth hands over offloaded checksums");
    assert!(csum::finish_partial(&mut frame));
    // Verify: the one's complement sum over pseudo-header and segment is 0.
    let seg = &frame[34..];
    let mut pseudo = frame[26..34].to_vec();
    pseudo.extend_from_slice(&[0, 17]);
    pseudo.extend_from_slice(&(seg.len() as u16).to_be_bytes());
    let total = offlow_wire::checksum::sum(seg, offlow_wire::checksum::sum(&pseudo, 0));
    assert_eq!(offlow_wire::checksum::fold(total), 0xffff);
}
