//! AF_PACKET ports on real veth pairs inside a network namespace this test
//! creates (and always deletes). Needs root (CAP_NET_ADMIN, CAP_NET_RAW):
//! skipped with a notice otherwise, a failure under CI.

use std::time::{Duration, Instant};

use offlow_io::{csum, AfPacketConfig, AfPacketPort, Port, RxRing};

#[allow(dead_code)] // each test file uses a subset of the harness
mod common;

use common::{ip, is_test, receive, udp_checksum_verifies, Ipv6, Netns};

/// A namespace with the veth pair `va`/`vb`, or `None` when skipped.
fn netns() -> Option<Netns> {
    Netns::new("oflio", Ipv6::On)
}

fn open(ns: &Netns, ifname: &str) -> AfPacketPort {
    open_ring(ns, ifname, RxRing::default())
}

fn open_ring(ns: &Netns, ifname: &str, ring: RxRing) -> AfPacketPort {
    let cfg = AfPacketConfig::new(ifname).with_ring(ring);
    ns.run(|| AfPacketPort::open(&cfg))
        .expect("opening the port")
}

/// Both receive ring layouts: every receive test runs on each.
const RINGS: [RxRing; 2] = [RxRing::Frames, RxRing::Blocks];

/// Test frame `i`: 60 bytes (see [`common::test_frame`]).
fn test_frame(i: u16, tagged: bool) -> Vec<u8> {
    common::test_frame(i, tagged, 0)
}

#[test]
fn frames_cross_a_veth_pair_in_order_with_vlan_tags_restored() {
    let Some(ns) = netns() else { return };
    for ring in RINGS {
        let mut a = open_ring(&ns, "va", ring);
        let mut b = open_ring(&ns, "vb", ring);
        let sent: Vec<Vec<u8>> = (0..200).map(|i| test_frame(i, i % 3 == 0)).collect();
        for chunk in sent.chunks(50) {
            for f in chunk {
                assert!(b.send(f));
            }
            b.flush().unwrap();
        }
        let got = receive(&mut a, sent.len(), is_test);
        let frames: Vec<Vec<u8>> = got.into_iter().map(|(f, _)| f).collect();
        assert_eq!(frames.len(), sent.len(), "{ring:?}: every frame arrives");
        assert_eq!(frames, sent, "{ring:?}: in order, byte for byte");
        let st = b.stats();
        assert_eq!(st.tx_packets, 200);
        assert_eq!(st.tx_dropped, 0);
        // Frames b sent are not received back on b (outgoing ignored).
        assert!(receive(&mut b, 1, is_test).is_empty(), "{ring:?}");
    }
}

/// A small ring (2 blocks of one page: 4 slots of 2 KiB, or 2 blocks)
/// wraps many times, and a receive that stops mid-way (`max`) resumes
/// where it stopped: nothing lost, nothing repeated.
#[test]
fn a_small_ring_wraps_and_partial_receives_resume() {
    // Without IPv6: the interfaces' router solicitations and MLD reports
    // take slots of a ring this small as they come up, and one arriving
    // with a round's frames overflowed it (a CI run lost frame 2).
    let Some(ns) = Netns::new("oflio", Ipv6::Off) else {
        return;
    };
    for ring in RINGS {
        let mut cfg = AfPacketConfig::new("va").with_ring(ring);
        cfg.block_size = 4096;
        cfg.block_count = 2;
        let mut a = ns.run(|| AfPacketPort::open(&cfg)).unwrap();
        let mut b = open(&ns, "vb");
        let mut got = Vec::new();
        for round in 0..40u16 {
            let sent: Vec<Vec<u8>> = (0..3).map(|k| test_frame(round * 3 + k, false)).collect();
            for f in &sent {
                assert!(b.send(f));
            }
            b.flush().unwrap();
            // One frame per call: walks stop and resume inside a block.
            let deadline = Instant::now() + Duration::from_secs(2);
            let want = got.len() + 3;
            while got.len() < want && Instant::now() < deadline {
                a.recv(1, &mut |f, _| {
                    if common::is_test(f) {
                        got.push(f.to_vec());
                    }
                })
                .unwrap();
            }
        }
        let want: Vec<Vec<u8>> = (0..120).map(|i| test_frame(i, false)).collect();
        assert_eq!(got, want, "{ring:?}");
        assert_eq!(
            a.stats().rx_dropped,
            0,
            "{ring:?}: sent in steps the ring holds"
        );
    }
}

/// A frame longer than what the ring holds whole (a frame slot; in a
/// blocks ring, a block) arrives truncated: counted in `rx_errors`, never
/// handed out; the next one is.
#[test]
fn truncated_frames_are_counted_not_handed_out() {
    let Some(ns) = netns() else { return };
    // Room for a 5000-byte frame on the wire, longer than a 4 KiB block.
    for dev in ["va", "vb"] {
        ip(&["-n", &ns.0, "link", "set", dev, "mtu", "9000"]);
    }
    for (ring, extra) in [(RxRing::Frames, 600), (RxRing::Blocks, 5000)] {
        let mut cfg = AfPacketConfig::new("va").with_ring(ring);
        cfg.frame_size = 256;
        cfg.block_size = 4096;
        let mut a = ns.run(|| AfPacketPort::open(&cfg)).unwrap();
        let mut b = ns
            .run(|| {
                let mut c = AfPacketConfig::new("vb");
                c.tx_max_frame = 8192;
                AfPacketPort::open(&c)
            })
            .unwrap();
        assert!(b.send(&common::test_frame(1, false, extra)));
        assert!(b.send(&test_frame(2, false)));
        b.flush().unwrap();
        assert_eq!(b.stats().tx_packets, 2, "{ring:?}");
        let got = receive(&mut a, 1, is_test);
        assert_eq!(got.len(), 1, "{ring:?}");
        assert_eq!(got[0].0, test_frame(2, false), "{ring:?}");
        assert_eq!(a.stats().rx_errors, 1, "{ring:?}");
    }
}

/// An adaptive port: a burst larger than its frames ring (2048 slots)
/// spills into the blocks ring behind it; every frame is received, none
/// dropped; a lone frame afterwards takes the frames ring again.
#[test]
fn an_adaptive_ring_spills_a_burst_into_blocks_and_loses_nothing() {
    let Some(ns) = netns() else { return };
    let mut a = open_ring(&ns, "va", RxRing::Adaptive);
    let mut b = open(&ns, "vb");
    let n = 3000u16;
    for chunk in (0..n).collect::<Vec<_>>().chunks(64) {
        for &i in chunk {
            assert!(b.send(&test_frame(i, false)));
        }
        b.flush().unwrap();
    }
    let mut got: Vec<Vec<u8>> = receive(&mut a, n.into(), is_test)
        .into_iter()
        .map(|(f, _)| f)
        .collect();
    let st = a.stats();
    assert_eq!(st.rx_dropped, 0, "{st:?}");
    assert_eq!(got.len(), usize::from(n), "{st:?}");
    // Where the burst spilled, order across the two rings is not kept.
    got.sort();
    let mut want: Vec<Vec<u8>> = (0..n).map(|i| test_frame(i, false)).collect();
    want.sort();
    assert_eq!(got, want);
    let lone = lone_frame_wait(&mut a, &mut b, n);
    assert!(lone < Duration::from_millis(50), "{lone:?}");
}

/// How long `poll(2)` on the port's descriptor takes to report a lone
/// frame sent just before, and whether the frame is then there.
fn lone_frame_wait(a: &mut AfPacketPort, b: &mut AfPacketPort, i: u16) -> Duration {
    let t0 = Instant::now();
    assert!(b.send(&test_frame(i, false)));
    b.flush().unwrap();
    let mut pfd = libc::pollfd {
        fd: a.poll_fd().unwrap(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one live pollfd.
    let rc = unsafe { libc::poll(&mut pfd, 1, 100) };
    let waited = t0.elapsed();
    assert_eq!(rc, 1, "readable within 100 ms");
    let got = receive(a, 1, is_test);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0, test_frame(i, false));
    waited
}

/// The reason the frames ring exists: a lone frame wakes `poll` as soon
/// as it is written, where a blocks ring waits for its retire timer (up
/// to 1 ms; how long depends on where the timer's period stood, so only
/// the frames ring is asserted on).
#[test]
fn a_lone_frame_wakes_poll_at_once_in_a_frames_ring() {
    let Some(ns) = netns() else { return };
    let mut best = [Duration::MAX; 3];
    for (r, ring) in RINGS.into_iter().chain([RxRing::Adaptive]).enumerate() {
        let mut a = open_ring(&ns, "va", ring);
        let mut b = open(&ns, "vb");
        for i in 0..20 {
            best[r] = best[r].min(lone_frame_wait(&mut a, &mut b, i));
            std::thread::sleep(Duration::from_millis(3));
        }
    }
    let [frames, blocks, adaptive] = best;
    eprintln!(
        "lone frame to poll wake-up, best of 20: frames {frames:?}, blocks {blocks:?}, \
         adaptive {adaptive:?}"
    );
    assert!(
        frames < Duration::from_micros(500),
        "frames ring: best {frames:?} (blocks: {blocks:?})"
    );
    assert!(
        adaptive < Duration::from_micros(500),
        "adaptive ring: best {adaptive:?}"
    );
}

#[test]
fn a_full_transmit_batch_drops_and_counts() {
    let Some(ns) = netns() else { return };
    let mut cfg = AfPacketConfig::new("vb");
    cfg.tx_batch = 4;
    let mut b = ns.run(|| AfPacketPort::open(&cfg)).unwrap();
    let sent: Vec<bool> = (0..6).map(|i| b.send(&test_frame(i, false))).collect();
    assert_eq!(sent, [true, true, true, true, false, false]);
    assert!(!b.send(&vec![0u8; 4096]), "longer than a slot");
    b.flush().unwrap();
    let st = b.stats();
    assert_eq!((st.tx_packets, st.tx_dropped), (4, 3));
}

/// A frame the interface cannot carry (longer than its MTU) is dropped
/// and counted alone: the frames queued behind it in the same batch still
/// go out (a `sendmmsg` stops at the first message that fails).
#[test]
fn an_oversize_frame_drops_alone_not_the_rest_of_its_batch() {
    let Some(ns) = netns() else { return };
    ip(&["-n", &ns.0, "link", "set", "vb", "mtu", "1000"]);
    let mut a = open(&ns, "va");
    let mut b = open(&ns, "vb");
    let sent: Vec<Vec<u8>> = (0..6)
        .map(|i| common::test_frame(i, false, if i == 1 || i == 4 { 1200 } else { 0 }))
        .collect();
    for f in &sent {
        assert!(b.send(f), "queued");
    }
    b.flush().unwrap();
    let want: Vec<Vec<u8>> = [0, 2, 3, 5].iter().map(|&i| sent[i].clone()).collect();
    let got: Vec<Vec<u8>> = receive(&mut a, want.len(), is_test)
        .into_iter()
        .map(|(f, _)| f)
        .collect();
    assert_eq!(got, want, "every frame that fits, in order");
    let st = b.stats();
    assert_eq!((st.tx_packets, st.tx_dropped), (4, 2));
}

#[test]
fn partial_udp_checksums_are_flagged_and_finished() {
    let Some(ns) = netns() else { return };
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
    let sock = ns.run(|| std::net::UdpSocket::bind("10.77.0.1:0")).unwrap();
    sock.send_to(b"partial checksum, please finish", "10.77.0.2:9999")
        .unwrap();
    let is_udp = |f: &[u8]| f.len() > 34 && f[12..14] == [0x08, 0x00] && f[23] == 17;
    let got = receive(&mut b, 1, is_udp);
    assert_eq!(got.len(), 1);
    let (mut frame, meta) = got.into_iter().next().unwrap();
    assert!(meta.csum_partial, "veth hands over offloaded checksums");
    assert!(csum::finish_partial(&mut frame));
    assert!(udp_checksum_verifies(&frame));
}

#[test]
fn link_state_follows_the_interface_and_notices_a_re_created_one() {
    let Some(ns) = netns() else { return };
    let tx = ns
        .run(|| offlow_io::AfPacketTx::open("va"))
        .expect("opening the transmit socket");
    let up = tx.link().expect("link state");
    assert!(up.admin_up, "{up:?}");
    ip(&["-n", &ns.0, "link", "set", "va", "down"]);
    let down = tx.link().expect("link state");
    assert!(!down.admin_up && !down.link_up, "{down:?}");
    assert_eq!(down.hw_addr, up.hw_addr);
    // Deleted, then created again under the same name: a new interface
    // this socket is not bound to.
    ip(&["-n", &ns.0, "link", "del", "va"]);
    assert!(tx.link().is_err(), "gone");
    ip(&[
        "-n", &ns.0, "link", "add", "name", "va", "type", "veth", "peer", "name", "vb",
    ]);
    let e = tx.link().expect_err("re-created").to_string();
    assert!(e.contains("re-created"), "{e}");
}

#[test]
fn the_interfaces_kernel_drops_are_read_from_its_namespace() {
    // IPv6 off: no router solicitations or MLD reports to count.
    let Some(ns) = Netns::new("oflio", Ipv6::Off) else {
        return;
    };
    // A protocol-0 socket registers no tap on `va`: a frame of an
    // ethertype nothing handles is dropped by the core stack and counted
    // in `va`'s rx_dropped, as a miss the backlog cannot take would be.
    let (va, vb) = ns
        .run(|| {
            let va = offlow_io::AfPacketTx::open("va")?;
            let vb = offlow_io::AfPacketTx::open("vb")?;
            Ok::<_, std::io::Error>((va, vb))
        })
        .expect("opening the transmit sockets");
    let before = va.counters().expect("va's counters");
    let mut frame = vec![0xff; 6];
    frame.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x0b]);
    frame.extend_from_slice(&[0x88, 0xb5]); // local experimental ethertype
    frame.resize(60, 0);
    for _ in 0..5 {
        assert!(vb.send(&frame));
    }
    // Delivery through the backlog is asynchronous: wait for the count.
    let deadline = Instant::now() + Duration::from_secs(2);
    let after = loop {
        let now = va.counters().expect("va's counters");
        if now.rx_dropped >= before.rx_dropped + 5 || Instant::now() > deadline {
            break now;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(
        after.rx_dropped - before.rx_dropped,
        5,
        "{before:?} -> {after:?}"
    );
    assert_eq!(
        after.rx_packets - before.rx_packets,
        5,
        "{before:?} -> {after:?}"
    );
    // What `ip -s link` reads, from the namespace's own view.
    let shown = std::process::Command::new("ip")
        .args(["-n", &ns.0, "-s", "-j", "link", "show", "va"])
        .output()
        .expect("ip -s link");
    let json = String::from_utf8_lossy(&shown.stdout);
    assert!(
        json.contains(&format!("\"dropped\":{}", after.rx_dropped)),
        "ip -s link shows {json}"
    );
    ip(&["-n", &ns.0, "link", "del", "va"]);
    assert!(va.counters().is_err(), "the interface is gone");
}
