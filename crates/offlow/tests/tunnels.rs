//! Tunnel ports end to end: `offlow run` with a GRE and a VXLAN port over
//! an underlay veth, frames written and read raw by packet sockets in the
//! host namespaces on both sides.
//!
//! Topology (the shared `Net`): switch ports 1 (`p1`, the underlay; its
//! peer `eth0` in `h0` plays the far tunnel end) and 2 (`p2`, a host side
//! whose peer in `h1` receives what leaves the tunnels); tunnel ports 10
//! (GRE, `key=flow`, 192.168.50.1 ↔ .2), 11 (GRE, `key=5`) and 12 (VXLAN,
//! `key=flow`) over port 1.
//!
//! What is checked, byte for byte against frames this file writes by hand
//! (GRE and VXLAN headers from the RFCs, not from the switch's code):
//! - the L2-in-L3 gateway of the SmartNIC paper: GRE-in-IPv4 frames with a
//!   key, without one (to the `key=5` port: no key is key 0, so they are
//!   not its; they go nowhere), with a GRE checksum, and VXLAN, are
//!   decapsulated and leave port 2 VLAN-tagged (vid = the tunnel's key);
//! - encapsulation: a frame from `h1` sent to the GRE port with
//!   `set_field:0x55->tun_id` arrives at `h0` as GRE with key 0x55, a
//!   valid outer IPv4 checksum, DF, TTL 64, and the inner frame intact;
//! - malformed tunnel frames (bad outer checksum, GRE version 1, GRE
//!   routing bit, non-Ethernet payload, truncated inner frame, bad GRE
//!   checksum) are dropped and counted in the tunnel port's `rx_errors`;
//!   nothing of them leaves port 2;
//! - the tunnel ports in `dump-ports-desc`, their counters in `dump-ports`;
//! - the same gateway with the offload tier (`--offload xdp`, the flows
//!   pinned down): GRE frames with a key, with a checksum and VXLAN frames
//!   of a UDP flow are decapsulated and tagged in the kernel byte for byte,
//!   and a host's UDP flow is encapsulated there (the outer identification
//!   is the tier's own counter, so it and the IPv4 checksum are compared
//!   for validity, not value); the tier's exit counters show it served
//!   them (`tunnel_decap`, `tunnel_encap`).
//!
//! Needs root, `ip` and `ovs-ofctl`; without them the test prints a notice
//! and passes, unless `CI` is set (then it fails). Every namespace is
//! deleted by a guard, pass or fail; every wait has a deadline.

#[allow(dead_code)] // each test file uses a subset of the harness
mod common;

use std::time::{Duration, Instant};

use common::*;
use offlow_io::afpacket::{AfPacketConfig, AfPacketPort};
use offlow_io::netns::in_netns;
use offlow_io::Port;
use offlow_testkit::FrameBuilder;
use offlow_wire::checksum;

const LOCAL: [u8; 4] = [192, 168, 50, 1];
const REMOTE: [u8; 4] = [192, 168, 50, 2];
/// The far end's outer Ethernet address (what the switch sends to).
const REMOTE_MAC: [u8; 6] = [0x02, 0xee, 0, 0, 0, 0x02];
const LOCAL_MAC: [u8; 6] = [0x02, 0xee, 0, 0, 0, 0x01];

/// The `--port` options every tunnel here shares: this end LOCAL over
/// underlay port 1, the far end REMOTE at REMOTE_MAC.
fn endpoint_options() -> String {
    let mac = |m: [u8; 6]| {
        m.iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":")
    };
    format!(
        "local_ip=192.168.50.1,remote_ip=192.168.50.2,underlay=1,remote_mac={},local_mac={}",
        mac(REMOTE_MAC),
        mac(LOCAL_MAC)
    )
}

/// A raw packet socket on `eth0` of namespace `ns`.
fn raw(ns: &str) -> AfPacketPort {
    in_netns(Some(ns), || {
        AfPacketPort::open(&AfPacketConfig::new("eth0"))
    })
    .expect("enter namespace")
    .expect("packet socket on eth0")
}

fn send(port: &mut AfPacketPort, frame: &[u8]) {
    assert!(port.send(frame), "queued");
    port.flush().expect("sent");
}

/// Frames `port` receives within `wait` that `keep` accepts (VLAN tags the
/// kernel took off are put back where they were).
fn receive(port: &mut AfPacketPort, wait: Duration, keep: impl Fn(&[u8]) -> bool) -> Vec<Vec<u8>> {
    let deadline = Instant::now() + wait;
    let mut got = Vec::new();
    while Instant::now() < deadline {
        let n = port
            .recv(64, &mut |f, meta| {
                let mut f = f.to_vec();
                if let Some((tpid, tci)) = meta.vlan {
                    let mut tag = tpid.to_be_bytes().to_vec();
                    tag.extend_from_slice(&tci.to_be_bytes());
                    f.splice(12..12, tag);
                }
                if keep(&f) {
                    got.push(f);
                }
            })
            .expect("receive");
        if n == 0 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    got
}

/// An inner Ethernet frame, distinct per `n`, of EtherType 0x88b5 (the
/// IEEE local experimental type: nothing in the namespaces answers it).
fn inner(n: u8) -> Vec<u8> {
    let mut f = vec![0x02, 0xaa, 0, 0, 0, 2, 0x02, 0xaa, 0, 0, 0, 1, 0x88, 0xb5];
    f.extend((0..46u8).map(|i| i ^ n));
    f
}

/// GRE header bytes (RFC 2784/2890) with optional checksum and key.
fn gre_header(csum: bool, key: Option<u32>, proto: u16, version_bits: u16) -> Vec<u8> {
    let mut flags = version_bits;
    if csum {
        flags |= 0x8000;
    }
    if key.is_some() {
        flags |= 0x2000;
    }
    let mut h = flags.to_be_bytes().to_vec();
    h.extend_from_slice(&proto.to_be_bytes());
    if csum {
        h.extend_from_slice(&[0, 0, 0, 0]);
    }
    if let Some(k) = key {
        h.extend_from_slice(&k.to_be_bytes());
    }
    h
}

/// The far end's GRE frame carrying `payload` behind `header`; the GRE
/// checksum, if the header has one, is filled over header and payload.
fn gre_frame(header: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut gre = header.to_vec();
    gre.extend_from_slice(payload);
    if header[0] & 0x80 != 0 {
        let c = checksum::checksum(&gre);
        gre[4..6].copy_from_slice(&c.to_be_bytes());
    }
    FrameBuilder::eth(LOCAL_MAC, REMOTE_MAC)
        .ipv4(REMOTE, LOCAL)
        .ip_payload(47)
        .payload(&gre)
        .build()
}

/// The far end's VXLAN frame (UDP checksum 0) with VNI `vni`.
fn vxlan_frame(vni: u32, payload: &[u8]) -> Vec<u8> {
    let mut vx = vec![0x08, 0, 0, 0];
    vx.extend_from_slice(&(vni << 8).to_be_bytes());
    vx.extend_from_slice(payload);
    FrameBuilder::eth(LOCAL_MAC, REMOTE_MAC)
        .ipv4(REMOTE, LOCAL)
        .udp(49999, 4789)
        .payload(&vx)
        .l4_checksum(offlow_testkit::Checksum::Zero)
        .build()
}

/// `frame` with an 802.1Q tag of `vid` inserted after the addresses.
fn tagged(frame: &[u8], vid: u16) -> Vec<u8> {
    let mut f = frame.to_vec();
    f.splice(12..12, [0x81, 0x00, (vid >> 8) as u8, vid as u8]);
    f
}

fn is_experiment(f: &[u8]) -> bool {
    // Tagged: 0x88b5 after the tag; untagged: at 12.
    f.get(12..14) == Some(&[0x88, 0xb5]) || f.get(16..18) == Some(&[0x88, 0xb5])
}

fn port_stat(dump: &str, number: u32, key: &str) -> u64 {
    let block = dump
        .split("port ")
        .find(|b| b.trim_start().starts_with(&format!("{number}:")))
        .unwrap_or_else(|| panic!("port {number} in {dump}"));
    first_number_after(block, key)
}

#[test]
fn gre_and_vxlan_ports_decapsulate_encapsulate_and_drop_malformed() {
    if !can_run("tunnel ports", true, &["ip", "ovs-ofctl"]) {
        return;
    }
    let net = Net::new("tun", &["tx", "off"]);
    let opts = endpoint_options();
    let gre_flow = format!("gre0=10,type=gre,{opts},key=flow");
    let gre_5 = format!("gre5=11,type=gre,{opts},key=5,csum=true");
    let vxlan = format!("vx0=12,type=vxlan,{opts},key=flow");
    let d = Daemon::on(
        &net,
        &["--port", &gre_flow, "--port", &gre_5, "--port", &vxlan],
    );
    // The gateway: what leaves a tunnel goes out of port 2 tagged with the
    // tunnel's key; what comes from port 2 goes into the GRE tunnel with
    // key 0x55.
    for flow in [
        "priority=10,in_port=10,tun_id=7,actions=push_vlan:0x8100,set_field:0x1007->vlan_vid,output:2",
        "priority=10,in_port=11,actions=push_vlan:0x8100,set_field:0x1005->vlan_vid,output:2",
        "priority=10,in_port=12,tun_id=0x1234,actions=push_vlan:0x8100,set_field:0x1234->vlan_vid,output:2",
        "priority=10,in_port=2,actions=set_field:0x55->tun_id,output:10",
    ] {
        d.ofctl(&["add-flow", flow]);
    }
    let desc = d.ofctl(&["dump-ports-desc"]);
    for name in ["10(gre0)", "11(gre5)", "12(vx0)"] {
        assert!(desc.contains(name), "{name} in {desc}");
    }

    // What the pipeline does with a packet of the GRE port, with its tunnel
    // metadata, as `offlow trace` reports it.
    let t = d.trace("in_port=10,tun_id=7,tun_src=192.168.50.2,tun_dst=192.168.50.1,dl_type=0x88b5");
    assert!(
        t.contains("Tunnel metadata: tun_id=0x7 tun_src=192.168.50.2 tun_dst=192.168.50.1"),
        "{t}"
    );
    assert!(
        t.contains("Flow: in_port=10,") && t.contains("tun_id=0x7"),
        "{t}"
    );
    assert!(t.contains("output to port 2"), "{t}");
    assert!(
        !t.contains("tunnel_id 0x7 ->"),
        "the metadata stays with the packet: {t}"
    );

    let mut far = raw(&net.h[0]);
    let mut host = raw(&net.h[1]);
    // Decapsulation, byte for byte, in each form.
    let cases: Vec<(&str, Vec<u8>, Vec<u8>)> = vec![
        (
            "GRE key 7 (key=flow port)",
            gre_frame(&gre_header(false, Some(7), 0x6558, 0), &inner(1)),
            tagged(&inner(1), 7),
        ),
        (
            "GRE key 5 with checksum (key=5 port)",
            gre_frame(&gre_header(true, Some(5), 0x6558, 0), &inner(2)),
            tagged(&inner(2), 5),
        ),
        (
            "GRE key 7 with checksum (key=flow port)",
            gre_frame(&gre_header(true, Some(7), 0x6558, 0), &inner(3)),
            tagged(&inner(3), 7),
        ),
        (
            "VXLAN VNI 0x1234",
            vxlan_frame(0x1234, &inner(4)),
            tagged(&inner(4), 0x234),
        ),
    ];
    for (what, frame, want) in &cases {
        send(&mut far, frame);
        let got = receive(&mut host, Duration::from_millis(300), is_experiment);
        assert_eq!(got, vec![want.clone()], "{what}");
    }
    // Without a key: the key=flow port takes it with tun_id 0, which no
    // flow matches (the key=5 port does not take it: no key is key 0).
    send(
        &mut far,
        &gre_frame(&gre_header(false, None, 0x6558, 0), &inner(5)),
    );
    let got = receive(&mut host, Duration::from_millis(200), is_experiment);
    assert!(got.is_empty(), "keyless frame matched no flow: {got:?}");
    d.ofctl(&[
        "add-flow",
        "priority=5,in_port=10,tun_id=0,actions=push_vlan:0x8100,set_field:0x1001->vlan_vid,output:2",
    ]);
    send(
        &mut far,
        &gre_frame(&gre_header(false, None, 0x6558, 0), &inner(6)),
    );
    let got = receive(&mut host, Duration::from_millis(300), is_experiment);
    assert_eq!(got, vec![tagged(&inner(6), 1)], "keyless GRE, tun_id 0");

    // Encapsulation: from the host into the GRE tunnel with key 0x55.
    let from_host = inner(7);
    send(&mut host, &from_host);
    // (The host's own IPv6 chatter takes the same flow: only ours counts.)
    let got = receive(&mut far, Duration::from_millis(300), |f| {
        f.get(12..14) == Some(&[0x08, 0x00])
            && f.get(23) == Some(&47)
            && f.get(42..).is_some_and(is_experiment)
    });
    assert_eq!(got.len(), 1, "one GRE frame at the far end: {got:?}");
    let g = &got[0];
    assert_eq!(&g[0..6], &REMOTE_MAC, "to the next hop");
    assert_eq!(&g[6..12], &LOCAL_MAC);
    let ip = &g[14..34];
    assert_eq!(checksum::checksum(ip), 0, "outer IPv4 checksum");
    assert_eq!(u16::from_be_bytes([ip[2], ip[3]]) as usize, g.len() - 14);
    assert_eq!(ip[6] & 0x40, 0x40, "DF");
    assert_eq!(ip[8], 64, "TTL");
    assert_eq!((&ip[12..16], &ip[16..20]), (&LOCAL[..], &REMOTE[..]));
    assert_eq!(&g[34..42], &gre_header(false, Some(0x55), 0x6558, 0)[..]);
    assert_eq!(&g[42..], &from_host[..], "inner frame intact");

    // A packet-out to the VXLAN port (key=flow, tun_id 0 unless set).
    let hex: String = inner(14).iter().map(|b| format!("{b:02x}")).collect();
    d.ofctl(&[
        "packet-out",
        &format!("in_port=controller packet={hex} actions=set_field:0x777->tun_id,output:12"),
    ]);
    let got = receive(&mut far, Duration::from_millis(300), |f| {
        f.get(23) == Some(&17) && f.get(50..).is_some_and(is_experiment)
    });
    assert_eq!(got.len(), 1, "one VXLAN frame from the packet-out: {got:?}");
    let v = &got[0];
    assert_eq!(u16::from_be_bytes([v[36], v[37]]), 4789, "VXLAN port");
    assert_eq!(
        &v[42..50],
        &[0x08, 0, 0, 0, 0, 0x07, 0x77, 0],
        "I flag, VNI 0x777"
    );
    assert_eq!(&v[50..], &inner(14)[..]);

    // Malformed frames to the tunnels: dropped and counted.
    let before = d.ofctl(&["dump-ports"]);
    let mut bad_outer = gre_frame(&gre_header(false, Some(7), 0x6558, 0), &inner(8));
    bad_outer[24] ^= 0xff;
    let mut bad_gre_csum = gre_frame(&gre_header(true, Some(7), 0x6558, 0), &inner(9));
    let last = bad_gre_csum.len() - 1;
    bad_gre_csum[last] ^= 0xff;
    let malformed = [
        bad_outer,
        gre_frame(&gre_header(false, Some(7), 0x6558, 1), &inner(10)), // version 1
        gre_frame(&gre_header(false, Some(7), 0x6558, 0x4000), &inner(11)), // routing
        gre_frame(&gre_header(false, Some(7), 0x0800, 0), &inner(12)), // not Ethernet
        gre_frame(&gre_header(false, Some(7), 0x6558, 0), &inner(13)[..10]), // short inner
        bad_gre_csum,
    ];
    for f in &malformed {
        send(&mut far, f);
    }
    let got = receive(&mut host, Duration::from_millis(300), is_experiment);
    assert!(got.is_empty(), "malformed frames went through: {got:?}");
    // Counters reach dump-ports within a publish period.
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let after = d.ofctl(&["dump-ports"]);
        let errors = port_stat(&after, 10, "errs=") - port_stat(&before, 10, "errs=");
        if errors == malformed.len() as u64 {
            assert!(port_stat(&after, 10, "rx pkts=") >= 3, "{after}");
            assert!(port_stat(&after, 10, "tx pkts=") >= 1, "{after}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "rx errors on port 10: {errors}, want {}: {after}",
            malformed.len()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(d);
}

/// Decapsulated frames handed between workers keep their key: with two
/// workers and `[[steer]]` sending key 7 to worker 1 and key 8 to worker 0,
/// every frame of a GRE `key=flow` port leaves tagged with its own key,
/// whichever worker the kernel gave the outer frames to (one of the two
/// keys is steered across, the worker lines say how many). A receiving
/// worker that lost the key would run the frame with `tun_id` 0 and tag it
/// 0x999.
#[test]
fn steered_tunnel_frames_keep_their_key() {
    if !can_run("tunnel ports", true, &["ip", "ovs-ofctl"]) {
        return;
    }
    let net = Net::new("tus", &["tx", "off"]);
    let gre = format!("gre0=10,type=gre,{},key=flow", endpoint_options());
    let dir = std::env::temp_dir().join(format!("offlow-tus-{}-{}", std::process::id(), net.sw));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let config = dir.join("switch.toml");
    std::fs::write(
        &config,
        "[[steer]]\nmatch = \"in_port=10,tun_id=7\"\nworkers = [1]\n\n\
         [[steer]]\nmatch = \"in_port=10,tun_id=8\"\nworkers = [0]\n",
    )
    .expect("write config");
    let config = config.to_str().expect("utf-8 path").to_string();
    let args = [
        "--netns",
        net.sw.as_str(),
        "--port",
        net.ports[0].as_str(),
        "--port",
        net.ports[1].as_str(),
        "--port",
        &gre,
        "--workers",
        "2",
        "--config",
        &config,
    ];
    let (d, log) = Daemon::start_logged(&args);
    for flow in [
        "priority=10,in_port=10,tun_id=7,actions=push_vlan:0x8100,set_field:0x1007->vlan_vid,output:2",
        "priority=10,in_port=10,tun_id=8,actions=push_vlan:0x8100,set_field:0x1008->vlan_vid,output:2",
        "priority=5,in_port=10,actions=push_vlan:0x8100,set_field:0x1999->vlan_vid,output:2",
    ] {
        d.ofctl(&["add-flow", flow]);
    }
    let mut far = raw(&net.h[0]);
    let mut host = raw(&net.h[1]);
    let mut want = Vec::new();
    for n in 0..60u8 {
        let key = if n % 2 == 0 { 7 } else { 8 };
        send(
            &mut far,
            &gre_frame(&gre_header(false, Some(key), 0x6558, 0), &inner(n)),
        );
        want.push(tagged(&inner(n), key as u16));
    }
    let mut got = receive(&mut host, Duration::from_millis(800), is_experiment);
    let log = stop(d, log);
    let _ = std::fs::remove_dir_all(&dir);
    got.sort();
    want.sort();
    assert_eq!(got, want, "every frame tagged with its own key");
    let steered: u64 = log
        .lines()
        .filter(|l| l.contains("worker stopped"))
        .map(|l| first_number_after(l, "steered_out="))
        .sum();
    assert!(
        steered >= 30,
        "one key's frames crossed workers: {steered}\n{log}"
    );
}

/// A UDP frame from 10.1.0.1:`sport` to 10.1.0.2:9 (the inner frame of the
/// offloaded rows: inside the offloadable class).
fn inner_udp(sport: u16) -> Vec<u8> {
    FrameBuilder::eth([0x02, 0xaa, 0, 0, 0, 2], [0x02, 0xaa, 0, 0, 0, 1])
        .ipv4([10, 1, 0, 1], [10, 1, 0, 2])
        .udp(sport, 9)
        .payload(&[0x5a; 18])
        .build()
}

fn is_inner_udp(f: &[u8]) -> bool {
    // Tagged (from a tunnel) or not (into one): 10.1.0.2 as destination.
    f.get(30..34) == Some(&[10, 1, 0, 2]) || f.get(34..38) == Some(&[10, 1, 0, 2])
}

#[test]
fn the_offload_tier_decapsulates_and_encapsulates_in_the_kernel() {
    if !can_run("offloaded tunnel ports", true, &["ip", "ovs-ofctl"]) {
        return;
    }
    // GRO on: a veth receives the frames an XDP program redirects into its
    // peer only with NAPI.
    let net = Net::new("tuo", &["tx", "off", "gro", "on"]);
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
            ],
        );
        assert!(out.status.success(), "sysctl in {ns}");
    }
    let opts = endpoint_options();
    let config = std::env::temp_dir().join(format!("offlow-tunnels-{}.toml", std::process::id()));
    std::fs::write(&config, "[offload]\nmode = \"xdp\"\npin_down = [\"udp\"]\n").expect("config");
    let gre = format!("gre0=10,type=gre,{opts},key=flow");
    let vxlan = format!("vx0=12,type=vxlan,{opts},key=flow");
    let mut args = vec!["--netns", net.sw.as_str()];
    for p in &net.ports {
        args.extend(["--port", p.as_str()]);
    }
    let config_path = config.to_str().expect("utf-8 path").to_string();
    args.extend(["--port", &gre, "--port", &vxlan, "--config", &config_path]);
    let (d, log) = Daemon::start_logged(&args);
    let _ = std::fs::remove_file(&config);
    for flow in [
        "priority=10,in_port=10,tun_id=7,udp,actions=push_vlan:0x8100,set_field:0x1007->vlan_vid,output:2",
        "priority=10,in_port=12,tun_id=0x1234,udp,actions=push_vlan:0x8100,set_field:0x1234->vlan_vid,output:2",
        "priority=10,in_port=2,udp,actions=set_field:0x55->tun_id,output:10",
    ] {
        d.ofctl(&["add-flow", flow]);
    }
    let mut far = raw(&net.h[0]);
    let mut host = raw(&net.h[1]);
    // Each flow: 300 frames over about 1.5 s; pinned, it goes down at the
    // first placement tick after a worker sampled it, so most frames cross
    // the kernel tier. Every frame must arrive exactly so, whichever tier
    // served it.
    let flows: Vec<(&str, Vec<u8>, Vec<u8>)> = vec![
        (
            "GRE key 7",
            gre_frame(&gre_header(false, Some(7), 0x6558, 0), &inner_udp(1000)),
            tagged(&inner_udp(1000), 7),
        ),
        (
            "GRE key 7 with checksum",
            gre_frame(&gre_header(true, Some(7), 0x6558, 0), &inner_udp(1001)),
            tagged(&inner_udp(1001), 7),
        ),
        (
            "VXLAN VNI 0x1234",
            vxlan_frame(0x1234, &inner_udp(1002)),
            tagged(&inner_udp(1002), 0x234),
        ),
    ];
    const N: usize = 300;
    for (what, frame, want) in &flows {
        let mut got = Vec::new();
        for _ in 0..N / 10 {
            for _ in 0..10 {
                send(&mut far, frame);
            }
            got.extend(receive(&mut host, Duration::from_millis(50), is_inner_udp));
        }
        got.extend(receive(&mut host, Duration::from_millis(200), is_inner_udp));
        assert_eq!(got.len(), N, "{what}: every frame arrived");
        assert!(got.iter().all(|g| g == want), "{what}: byte for byte");
    }
    // Encapsulation: the host's UDP flow into the GRE tunnel.
    let from_host = inner_udp(2000);
    let mut got = Vec::new();
    for _ in 0..N / 10 {
        for _ in 0..10 {
            send(&mut host, &from_host);
        }
        got.extend(receive(&mut far, Duration::from_millis(50), |f| {
            f.get(23) == Some(&47) && f.get(42..).is_some_and(is_inner_udp)
        }));
    }
    assert_eq!(got.len(), N, "every frame encapsulated");
    for g in &got {
        assert_eq!(&g[0..6], &REMOTE_MAC, "to the next hop");
        assert_eq!(&g[6..12], &LOCAL_MAC);
        assert_eq!(&g[12..16], &[0x08, 0x00, 0x45, 0x00]);
        assert_eq!(u16::from_be_bytes([g[16], g[17]]) as usize, g.len() - 14);
        assert_eq!(checksum::checksum(&g[14..34]), 0, "outer IPv4 checksum");
        assert_eq!(&g[20..24], &[0x40, 0, 64, 47], "DF, TTL 64, GRE");
        assert_eq!(&g[26..34], &[192, 168, 50, 1, 192, 168, 50, 2]);
        assert_eq!(&g[34..42], &gre_header(false, Some(0x55), 0x6558, 0)[..]);
        assert_eq!(&g[42..], &from_host[..]);
    }
    let text = stop(d, log);
    let tier = tier_stats(&text);
    let counters = text
        .lines()
        .find(|l| l.contains("offload backend counters"))
        .unwrap_or("")
        .to_string();
    eprintln!("offloaded tunnels: {}; {counters}", tier.line);
    let decap = number_after(&counters, "tunnel_decap=").unwrap_or(0);
    let encap = number_after(&counters, "tunnel_encap=").unwrap_or(0);
    // 3 flows of N frames; each is served in software until it is sampled
    // and goes down (840 of 900 in the kernel when this was written).
    assert!(
        decap >= 2 * N as u64,
        "the tier decapsulated most frames: {counters}"
    );
    assert!(
        encap >= N as u64 / 2,
        "the tier encapsulated most frames: {counters}"
    );
}
