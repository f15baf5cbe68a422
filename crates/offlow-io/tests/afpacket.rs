//! AF_PACKET ports on real veth pairs inside a network namespace this test
//! creates (and always deletes). Needs root (CAP_NET_ADMIN, CAP_NET_RAW):
//! skipped with a notice otherwise, a failure under CI.

use offlow_io::{csum, AfPacketConfig, AfPacketPort, Port};

#[allow(dead_code)] // each test file uses a subset of the harness
mod common;

use common::{ip, is_test, receive, udp_checksum_verifies, Ipv6, Netns};

/// A namespace with the veth pair `va`/`vb`, or `None` when skipped.
fn netns() -> Option<Netns> {
    Netns::new("oflio", Ipv6::On)
}

fn open(ns: &Netns, ifname: &str) -> AfPacketPort {
    ns.run(|| AfPacketPort::open(&AfPacketConfig::new(ifname)))
        .expect("opening the port")
}

/// Test frame `i`: 60 bytes (see [`common::test_frame`]).
fn test_frame(i: u16, tagged: bool) -> Vec<u8> {
    common::test_frame(i, tagged, 0)
}

#[test]
fn frames_cross_a_veth_pair_in_order_with_vlan_tags_restored() {
    let Some(ns) = netns() else { return };
    let mut a = open(&ns, "va");
    let mut b = open(&ns, "vb");
    let sent: Vec<Vec<u8>> = (0..200).map(|i| test_frame(i, i % 3 == 0)).collect();
    for chunk in sent.chunks(50) {
        for f in chunk {
            assert!(b.send(f));
        }
        b.flush().unwrap();
    }
    let got = receive(&mut a, sent.len(), is_test);
    let frames: Vec<Vec<u8>> = got.into_iter().map(|(f, _)| f).collect();
    assert_eq!(frames.len(), sent.len(), "every frame arrives");
    assert_eq!(frames, sent, "in order, byte for byte");
    let st = b.stats();
    assert_eq!(st.tx_packets, 200);
    assert_eq!(st.tx_dropped, 0);
    // Frames b sent are not received back on b (outgoing ignored).
    assert!(receive(&mut b, 1, is_test).is_empty());
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
