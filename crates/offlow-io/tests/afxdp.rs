//! AF_XDP ports on real veth pairs inside a network namespace this test
//! creates (and always deletes). Needs root (CAP_NET_ADMIN, CAP_NET_RAW,
//! CAP_BPF): skipped with a notice otherwise, a failure under CI.
//!
//! What veth does (Linux 6.x, drivers/net/veth.c):
//! - Native XDP on the *receiving* end `va` is enough to receive: once `va`
//!   has a program, its peer's transmit path queues frames to `va`'s NAPI
//!   ring and the program runs there. The peer needs no program (checked
//!   below: nothing is attached to `vb` in the native-mode test).
//! - The peer needs a program of its own (or GRO) only when frames are
//!   *redirected into* a veth by XDP (`ndo_xdp_xmit`; without NAPI on the
//!   peer they are dropped), which an AF_XDP socket does not do: copy-mode
//!   transmit builds an `sk_buff` and hands it to the device like any
//!   packet socket (checked: transmit works with and without a program on
//!   the peer).
//! - veth has no zero-copy AF_XDP: sockets bind in copy mode (checked).

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use offlow_io::{
    AfPacketConfig, AfPacketPort, AfXdpConfig, AfXdpPort, Port, XdpAttach, XdpMode, XdpProgram,
};

#[allow(dead_code)] // each test file uses a subset of the harness
mod common;

use common::{ip, is_test, receive, udp_checksum_verifies, Ipv6, Netns};

/// A namespace with the veth pair `va`/`vb` (IPv6 off: nothing but the
/// test's frames to count), or `None` when skipped.
fn netns() -> Option<Netns> {
    Netns::new("oflxdp", Ipv6::Off)
}

fn afpacket(ns: &Netns, ifname: &str) -> AfPacketPort {
    ns.run(|| AfPacketPort::open(&AfPacketConfig::new(ifname)))
        .expect("opening the AF_PACKET port")
}

fn afxdp(ns: &Netns, cfg: &AfXdpConfig) -> AfXdpPort {
    ns.run(|| AfXdpPort::open(cfg))
        .expect("opening the AF_XDP port")
}

/// Receive test frames until `want` arrived or two seconds passed, VLAN
/// tags in place.
fn collect(port: &mut dyn Port, want: usize) -> Vec<Vec<u8>> {
    receive(port, want, is_test)
        .into_iter()
        .map(|(f, _)| f)
        .collect()
}

/// Test frame `i`, its length varying with `i` (see
/// [`common::test_frame`]).
fn test_frame(i: u16, tagged: bool) -> Vec<u8> {
    common::test_frame(i, tagged, usize::from(i % 97) * 13)
}

fn frames(n: u16) -> Vec<Vec<u8>> {
    (0..n).map(|i| test_frame(i, i % 3 == 0)).collect()
}

/// Send `sent` from an AF_PACKET port on `vb` in chunks, receiving on the
/// AF_XDP port between chunks (so small rings wrap around).
fn afpacket_to_afxdp(ns: &Netns, xdp: &mut AfXdpPort, sent: &[Vec<u8>], chunk: usize) {
    let mut b = afpacket(ns, "vb");
    let mut got = Vec::new();
    for c in sent.chunks(chunk) {
        for f in c {
            assert!(b.send(f));
        }
        b.flush().unwrap();
        let mut pfd = libc::pollfd {
            fd: xdp.poll_fd().expect("a socket to poll"),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live pollfd.
        let ready = unsafe { libc::poll(&mut pfd, 1, 1000) };
        assert_eq!(ready, 1, "the socket polls readable when frames wait");
        got.extend(collect(xdp, c.len()));
    }
    assert_eq!(got.len(), sent.len(), "every frame arrives");
    assert_eq!(got, sent, "in order, byte for byte, tags in place");
    let st = xdp.stats();
    assert_eq!(st.rx_packets, sent.len() as u64);
    assert_eq!(
        st.rx_bytes,
        sent.iter().map(|f| f.len() as u64).sum::<u64>()
    );
    assert_eq!((st.rx_dropped, st.rx_errors), (0, 0));
}

#[test]
fn frames_from_the_peer_arrive_through_af_xdp_in_native_mode() {
    let Some(ns) = netns() else { return };
    let mut xdp = afxdp(&ns, &AfXdpConfig::new("va"));
    let prog = xdp.program().expect("own program");
    assert_eq!(prog.mode(), XdpMode::Native, "veth supports native XDP");
    assert!(!xdp.zerocopy(), "veth has no zero-copy AF_XDP");
    // No program on the peer: receiving needs none (module docs).
    assert!(!ns.link_details("vb").contains("prog/xdp"));
    afpacket_to_afxdp(&ns, &mut xdp, &frames(200), 50);
    // Copy mode never asks for a fill-ring wakeup: no system call on receive.
    assert_eq!(xdp.counters().rx_wakeups, 0);
}

#[test]
fn frames_from_the_peer_arrive_through_af_xdp_in_generic_mode_with_small_rings() {
    let Some(ns) = netns() else { return };
    let mut cfg = AfXdpConfig::new("va");
    cfg.attach = XdpAttach::Generic;
    cfg.frame_count = 32; // 16 RX frames: the rings wrap many times
    cfg.rx_ring_size = 16;
    cfg.tx_ring_size = 16;
    let mut xdp = afxdp(&ns, &cfg);
    assert_eq!(xdp.program().unwrap().mode(), XdpMode::Generic);
    assert!(ns.link_details("va").contains("xdpgeneric"));
    afpacket_to_afxdp(&ns, &mut xdp, &frames(200), 8);
}

#[test]
fn frames_sent_through_af_xdp_arrive_at_the_peer() {
    let Some(ns) = netns() else { return };
    let mut cfg = AfXdpConfig::new("va");
    cfg.frame_count = 64; // 32 TX frames: completions must be reclaimed
    let mut xdp = afxdp(&ns, &cfg);
    let mut b = afpacket(&ns, "vb");
    let sent = frames(200);
    let mut got = Vec::new();
    for c in sent.chunks(25) {
        for f in c {
            assert!(xdp.send(f), "a free TX frame after the last flush");
        }
        xdp.flush().unwrap();
        got.extend(collect(&mut b, c.len()));
    }
    assert_eq!(got.len(), sent.len(), "every frame arrives");
    assert_eq!(got, sent, "in order, byte for byte");
    let st = xdp.stats();
    assert_eq!((st.tx_packets, st.tx_dropped), (200, 0));
    assert_eq!(
        st.tx_bytes,
        sent.iter().map(|f| f.len() as u64).sum::<u64>()
    );
    assert!(
        xdp.counters().tx_kicks > 0,
        "copy mode transmits in the kick"
    );
}

#[test]
fn transmit_drops_are_counted_and_frames_come_back() {
    let Some(ns) = netns() else { return };
    let mut cfg = AfXdpConfig::new("va");
    cfg.frame_count = 8; // 4 TX frames
    let mut xdp = afxdp(&ns, &cfg);
    let sent: Vec<bool> = (0..6).map(|i| xdp.send(&test_frame(i, false))).collect();
    assert_eq!(sent, [true, true, true, true, false, false]);
    assert!(!xdp.send(&vec![0u8; 4097]), "longer than a frame");
    let c = xdp.counters();
    assert_eq!((c.drop_no_tx_frame, c.drop_tx_too_long), (2, 1));
    xdp.flush().unwrap();
    let st = xdp.stats();
    assert_eq!((st.tx_packets, st.tx_dropped), (4, 3));
    // Completions hand the frames back: the next batch fits again.
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut ok = 0;
    while ok < 4 && Instant::now() < deadline {
        if xdp.send(&test_frame(9, false)) {
            ok += 1;
        } else {
            xdp.flush().unwrap();
        }
    }
    assert_eq!(ok, 4);
}

/// A frame longer than the interface's MTU is lost alone: the frames
/// behind it in the batch still arrive in the same flush.
#[test]
fn an_oversize_frame_does_not_hold_up_the_rest_of_its_batch() {
    let Some(ns) = netns() else { return };
    // The peer's MTU is the one a veth checks (it forwards to `vb`).
    for dev in ["va", "vb"] {
        ip(&["-n", &ns.0, "link", "set", dev, "mtu", "1000"]);
    }
    let mut xdp = afxdp(&ns, &AfXdpConfig::new("va"));
    let mut b = afpacket(&ns, "vb");
    let sent: Vec<Vec<u8>> = (0..6)
        .map(|i| common::test_frame(i, false, if i == 1 || i == 4 { 1200 } else { 0 }))
        .collect();
    for f in &sent {
        assert!(xdp.send(f), "queued");
    }
    xdp.flush().unwrap();
    let want: Vec<Vec<u8>> = [0, 2, 3, 5].iter().map(|&i| sent[i].clone()).collect();
    assert_eq!(collect(&mut b, want.len()), want, "every frame that fits");
    let st = xdp.stats();
    let fits: u64 = want.iter().map(|f| f.len() as u64).sum();
    assert_eq!((st.tx_packets, st.tx_bytes, st.tx_dropped), (4, fits, 2));
    assert_eq!(xdp.counters().drop_tx_kernel, 2);
}

/// A port whose interface is gone stops retrying: the frames left in its
/// TX ring are counted dropped once, nothing stays outstanding (the
/// switch would otherwise kick the dead socket every round), and later
/// sends are refused and counted.
#[test]
fn a_port_whose_interface_is_gone_stops_retrying() {
    let Some(ns) = netns() else { return };
    let mut xdp = afxdp(&ns, &AfXdpConfig::new("va"));
    ip(&["-n", &ns.0, "link", "del", "va"]);
    for i in 0..4 {
        assert!(xdp.send(&test_frame(i, false)), "queued");
    }
    let first = xdp.flush();
    assert!(first.is_err(), "the first flush reports the loss");
    let kicks = xdp.counters().tx_kicks;
    for _ in 0..10 {
        xdp.flush().expect("later flushes have nothing to do");
    }
    assert!(!xdp.tx_outstanding(), "nothing left to retry");
    assert_eq!(xdp.counters().tx_kicks, kicks, "no more kicks");
    assert!(!xdp.send(&test_frame(9, false)), "refused");
    let st = xdp.stats();
    assert_eq!((st.tx_packets, st.tx_bytes, st.tx_dropped), (0, 0, 5));
    assert_eq!(xdp.counters().drop_tx_gone, 5);
}

/// Whether `dev` shows no XDP program, waiting up to half a second (older
/// kernels release a link from a work item).
fn detached(ns: &Netns, dev: &str) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_millis(500);
    loop {
        let shown = ns.link_details(dev);
        if !shown.contains("xdp") {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(shown);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn dropping_the_port_detaches_the_program() {
    let Some(ns) = netns() else { return };
    let mut xdp = afxdp(&ns, &AfXdpConfig::new("va"));
    let shown = ns.link_details("va");
    assert!(shown.contains("prog/xdp"), "attached: {shown}");
    afpacket_to_afxdp(&ns, &mut xdp, &frames(20), 20);
    drop(xdp);
    if let Err(shown) = detached(&ns, "va") {
        panic!("nothing left on the interface: {shown}");
    }
    // At once a new port takes the same queue (bind waits out the
    // kernel's deferred release of the old socket) and receives.
    let mut again = afxdp(&ns, &AfXdpConfig::new("va"));
    afpacket_to_afxdp(&ns, &mut again, &frames(20), 20);
    drop(again);
    detached(&ns, "va").unwrap();
}

#[test]
fn a_queue_without_a_socket_passes_frames_to_the_stack() {
    let Some(ns) = netns() else { return };
    let prog = ns
        .run(|| XdpProgram::redirect_to_sockets("va", 1, XdpAttach::Native))
        .expect("attaching");
    let mut a = afpacket(&ns, "va");
    let mut b = afpacket(&ns, "vb");
    let sent = frames(20);
    for f in &sent {
        assert!(b.send(f));
    }
    b.flush().unwrap();
    assert_eq!(collect(&mut a, sent.len()), sent, "XDP_PASS fallback");
    drop(prog);
}

#[test]
fn one_program_shared_by_ports_and_a_pass_program_on_the_peer() {
    let Some(ns) = netns() else { return };
    let prog = Arc::new(
        ns.run(|| XdpProgram::redirect_to_sockets("va", 1, XdpAttach::Auto))
            .expect("attaching"),
    );
    let peer = ns
        .run(|| XdpProgram::pass("vb", XdpAttach::Native))
        .expect("attaching to the peer");
    assert_eq!(peer.mode(), XdpMode::Native);
    let mut xdp = ns
        .run(|| AfXdpPort::open_with(&AfXdpConfig::new("va"), prog.clone()))
        .expect("opening");
    // Frames still cross with a program on both ends (the peer's NAPI path).
    afpacket_to_afxdp(&ns, &mut xdp, &frames(50), 50);
    let mut b = afpacket(&ns, "vb");
    for f in frames(10) {
        assert!(xdp.send(&f));
    }
    xdp.flush().unwrap();
    assert_eq!(collect(&mut b, 10), frames(10), "and back through XDP_PASS");
    drop(xdp);
    assert!(
        ns.link_details("va").contains("prog/xdp"),
        "the shared program outlives the port"
    );
    drop(prog);
    drop(peer);
    detached(&ns, "va").unwrap();
    detached(&ns, "vb").unwrap();
}

#[test]
fn receive_drops_are_read_from_the_kernel() {
    let Some(ns) = netns() else { return };
    let mut cfg = AfXdpConfig::new("va");
    cfg.frame_count = 8; // 4 RX frames
    cfg.rx_ring_size = 4;
    let mut xdp = afxdp(&ns, &cfg);
    let mut b = afpacket(&ns, "vb");
    let sent = frames(50);
    for f in &sent {
        assert!(b.send(f));
    }
    b.flush().unwrap();
    // Nobody received yet: four frames landed, the rest found no frame in
    // the fill ring.
    let got = collect(&mut xdp, sent.len());
    assert_eq!(got, sent[..4], "the first four, intact");
    let st = xdp.stats();
    assert_eq!(st.rx_packets, 4);
    assert_eq!(st.rx_dropped, 46, "{:?}", xdp.xdp_statistics());
    // And the frames were recycled: the next burst is received.
    for f in &sent[..4] {
        assert!(b.send(f));
    }
    b.flush().unwrap();
    assert_eq!(collect(&mut xdp, 4), sent[..4]);
}

/// A UDP datagram the peer's own stack sends (checksum offloaded on
/// veth), as received through AF_XDP: whether its UDP checksum verifies.
fn udp_setup(ns: &Netns) {
    ip(&["-n", &ns.0, "addr", "add", "10.78.0.1/24", "dev", "vb"]);
    ip(&[
        "-n",
        &ns.0,
        "neigh",
        "add",
        "10.78.0.2",
        "lladdr",
        "02:00:00:00:00:02",
        "dev",
        "vb",
    ]);
}

fn local_udp_checksum_verifies(ns: &Netns, attach: XdpAttach) -> bool {
    let mut cfg = AfXdpConfig::new("va");
    cfg.attach = attach;
    let mut xdp = afxdp(ns, &cfg);
    let sock = ns.run(|| std::net::UdpSocket::bind("10.78.0.1:0")).unwrap();
    sock.send_to(b"is this checksum complete?", "10.78.0.2:9999")
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut frame = None;
    while frame.is_none() && Instant::now() < deadline {
        xdp.recv(64, &mut |f, meta| {
            assert_eq!(meta.vlan, None);
            if f.len() > 34 && f[12..14] == [0x08, 0x00] && f[23] == 17 {
                frame = Some(f.to_vec());
            }
        })
        .unwrap();
    }
    udp_checksum_verifies(&frame.expect("the datagram arrives"))
}

/// XDP runs before anything completes an offloaded checksum and has no
/// way to flag it (unlike `TP_STATUS_CSUMNOTREADY` on AF_PACKET), so a
/// datagram the peer's own stack sent arrives with a partial UDP checksum,
/// in native and generic mode alike. Turning transmit checksum offload off
/// on the sending side (`ethtool -K vb tx off`) makes the stack complete
/// it: the deployment rule for AF_XDP ports facing local senders.
#[test]
fn locally_sent_checksums_are_complete_once_peer_offload_is_off() {
    for attach in [XdpAttach::Native, XdpAttach::Generic] {
        let Some(ns) = netns() else { return };
        udp_setup(&ns);
        let with_offload = local_udp_checksum_verifies(&ns, attach);
        eprintln!("{attach:?}, peer tx checksum offload on: verifies = {with_offload}");
        let out = Command::new("ip")
            .args(["netns", "exec", &ns.0, "ethtool", "-K", "vb", "tx", "off"])
            .output();
        match out {
            Ok(o) if o.status.success() => {}
            _ => {
                eprintln!("skipping the offload-off half: no usable ethtool");
                return;
            }
        }
        assert!(
            local_udp_checksum_verifies(&ns, attach),
            "{attach:?}: with offload off the checksum is complete"
        );
    }
}
