//! Meters end to end (OpenFlow 1.3.5 §5.7): `offlow run` on veth pairs in
//! network namespaces these tests create, driven by `ovs-ofctl -O
//! OpenFlow13` (`add-meter`, a flow with `meter:1`, `meter-stats`,
//! `dump-meters`, `meter-features`, `del-meter`), UDP sent from one host at
//! a paced rate and counted at the other.
//!
//! This is a functional check with a wide tolerance (the machine is
//! shared and noisy), not a timed benchmark. `meter_accuracy` (ignored;
//! `cargo test -p offlow --test meters -- --ignored --nocapture`) prints
//! offered against passed at 10%–200% of a band, pktps and kbps.
//!
//! Needs root, `ip`, `ethtool` and `ovs-ofctl`. Without them the tests
//! print a notice and pass, unless `CI` is set (then they fail).

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use offlow_io::netns::in_netns;

#[allow(dead_code)] // each test file uses a subset of the harness
mod common;

use common::{can_run, first_number_after, Daemon, Net};

fn prerequisites() -> bool {
    can_run("the meter tests", true, &["ovs-ofctl", "ethtool"])
}

/// The hosts' offloads: software segmentation and checksums, so the UDP
/// frames on the wire are the sizes sent.
const OFFLOADS: &[&str] = &["tso", "off", "gso", "off"];

/// Ethernet + IPv4 + UDP headers in front of a datagram's payload.
const HEADERS: usize = 14 + 20 + 8;

/// `offlow run` on the two switch ports of `net`; flows: UDP from port 1
/// metered by meter 1 then out of port 2, everything else between the two
/// ports unmetered (ARP and the hosts' own chatter).
fn start(net: &Net) -> Daemon {
    let d = Daemon::on(net, &[]);
    d.ofctl(&["add-flow", "priority=5,in_port=1,actions=output:2"]);
    d.ofctl(&["add-flow", "priority=5,in_port=2,actions=output:1"]);
    d
}

/// Send UDP datagrams of `payload` bytes from host 0 to host 1 at `pps`
/// for `secs`, paced by a schedule (a late sender catches up, so the
/// average holds); `(sent, received)`.
fn send_paced(net: &Net, port: u16, pps: f64, secs: f64, payload: usize) -> (u64, u64) {
    let rx = in_netns(Some(&net.h[1]), || UdpSocket::bind(("10.0.0.2", port)))
        .expect("enter host 1")
        .expect("bind the receiver");
    rx.set_read_timeout(Some(Duration::from_millis(500)))
        .expect("read timeout");
    let tx = in_netns(Some(&net.h[0]), || UdpSocket::bind("10.0.0.1:0"))
        .expect("enter host 0")
        .expect("bind the sender");
    let counter = std::thread::spawn(move || {
        let mut buf = vec![0u8; 2048];
        let mut got = 0u64;
        while rx.recv(&mut buf).is_ok() {
            got += 1;
        }
        got
    });
    let data = vec![0x5au8; payload];
    let n = (pps * secs).round() as u64;
    let start = Instant::now();
    for i in 0..n {
        let due = start + Duration::from_secs_f64(i as f64 / pps);
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        // A full socket buffer would block; the count is what was sent.
        tx.send_to(&data, ("10.0.0.2", port)).expect("send");
    }
    let got = counter.join().expect("receiver thread");
    (n, got)
}

/// The numbers of an `ovs-ofctl meter-stats` reply for one meter:
/// `(flow_count, packet_in_count, band 0 packet_count)`.
fn meter_stats(d: &Daemon, id: u32) -> (u64, u64, u64) {
    let s = d.ofctl(&["meter-stats", &format!("meter={id}")]);
    (
        first_number_after(&s, "flow_count:"),
        first_number_after(&s, "packet_in_count:"),
        first_number_after(&s, "0: packet_count:"),
    )
}

#[test]
fn a_drop_meter_limits_udp_to_its_rate() {
    if !prerequisites() {
        return;
    }
    let net = Net::new("omt", OFFLOADS);
    let d = start(&net);
    // 1,000 packets/s with a burst of 100.
    d.ofctl(&[
        "add-meter",
        "meter=1,pktps,burst,stats,band=type=drop,rate=1000,burst_size=100",
    ]);
    d.ofctl(&[
        "add-flow",
        "priority=10,udp,in_port=1,actions=meter:1,output:2",
    ]);
    let flows = d.ofctl(&["dump-flows"]);
    assert!(flows.contains("meter:1,output:2"), "{flows}");
    let meters = d.ofctl(&["dump-meters"]);
    assert!(meters.contains("meter=1 pktps burst stats"), "{meters}");
    assert!(
        meters.contains("type=drop rate=1000 burst_size=100"),
        "{meters}"
    );
    let features = d.ofctl(&["meter-features"]);
    assert!(features.contains("max_meter:65536"), "{features}");
    // `offlow trace --switch` rebuilds the switch's meters too.
    let text = d.trace("in_port=1,udp,nw_src=10.0.0.1,nw_dst=10.0.0.2");
    assert!(
        text.contains("meter:1") && text.contains("output to port 2"),
        "{text}"
    );
    assert!(features.contains("max_bands:8"), "{features}");
    assert!(features.contains("drop"), "{features}");
    assert!(features.contains("dscp_remark"), "{features}");
    assert!(features.contains("pktps"), "{features}");

    // Half the rate for 2 s: nothing dropped by the meter.
    let (sent, got) = send_paced(&net, 7201, 500.0, 2.0, 100);
    let (flows_n, packet_in, dropped) = meter_stats(&d, 1);
    assert_eq!(flows_n, 1);
    assert!(got * 100 >= sent * 95, "0.5x: {got} of {sent} arrived");
    assert!(
        dropped * 100 <= sent * 2,
        "0.5x: the meter dropped {dropped}"
    );
    assert!(
        packet_in <= sent && packet_in >= got,
        "{packet_in} {sent} {got}"
    );

    // Twice the rate for 2 s: about the rate passes (the burst on top).
    let (sent2, got2) = send_paced(&net, 7202, 2000.0, 2.0, 100);
    let (_, packet_in2, dropped2) = meter_stats(&d, 1);
    let expected = 1000.0 * 2.0 + 100.0;
    let rate = got2 as f64;
    eprintln!(
        "meter e2e: 0.5x sent {sent} got {got}; 2x sent {sent2} got {got2} \
         (expected ~{expected}), meter in {packet_in2} dropped {dropped2}"
    );
    assert!(
        (0.75 * expected..=1.15 * expected).contains(&rate),
        "2x: {got2} of {sent2} arrived, expected {expected} within -25%/+15%"
    );
    // Exact on the switch's side: what entered the meter is what passed
    // plus what its band dropped (the receiver may lose a few more).
    let passed = packet_in2 - dropped2;
    assert!(
        passed >= got + got2,
        "{passed} passed, {got} + {got2} arrived"
    );
    assert!(packet_in2 <= sent + sent2);

    // Deleting the meter removes the flow that uses it.
    d.ofctl(&["del-meter", "meter=1"]);
    let flows = d.ofctl(&["dump-flows"]);
    assert!(!flows.contains("meter:1"), "{flows}");
    let meters = d.ofctl(&["dump-meters"]);
    assert!(!meters.contains("meter=1"), "{meters}");
}

/// Offered against passed through the real switch at 10%–200% of a band's
/// rate, pktps and kbps; prints a table (for BENCHMARKS.md).
#[test]
#[ignore = "a measurement: run with --ignored --nocapture"]
fn meter_accuracy() {
    if !prerequisites() {
        return;
    }
    let secs = 3.0;
    let net = Net::new("oma", OFFLOADS);
    let d = start(&net);
    // pktps: 1,000 packets/s, burst 100 packets; 100-byte datagrams.
    // kbps: 8,000 kbit/s = 1,000 frames of 1,000 bytes/s, burst 800 kbit.
    d.ofctl(&[
        "add-meter",
        "meter=1,pktps,burst,band=type=drop,rate=1000,burst_size=100",
    ]);
    d.ofctl(&[
        "add-meter",
        "meter=2,kbps,burst,band=type=drop,rate=8000,burst_size=800",
    ]);
    d.ofctl(&[
        "add-flow",
        "priority=10,udp,in_port=1,tp_dst=7300,actions=meter:1,output:2",
    ]);
    d.ofctl(&[
        "add-flow",
        "priority=10,udp,in_port=1,tp_dst=7301,actions=meter:2,output:2",
    ]);
    println!("unit  band        offered%  offered/s  passed/s  expected/s  passed/expected");
    for (unit, port, payload) in [("pktps", 7300u16, 100usize), ("kbps", 7301, 1000 - HEADERS)] {
        for pct in [10u32, 50, 100, 150, 200] {
            // Let the bucket refill between points.
            std::thread::sleep(Duration::from_millis(300));
            let pps = 1000.0 * f64::from(pct) / 100.0;
            let (sent, got) = send_paced(&net, port, pps, secs, payload);
            let offered = sent as f64 / secs;
            let passed = got as f64 / secs;
            // min(offered, rate), plus the burst spread over the run.
            let expected = offered.min(1000.0 + 100.0 / secs);
            let band = if unit == "pktps" {
                "1000 pkt/s"
            } else {
                "8000 kbit/s"
            };
            println!(
                "{unit:5} {band:11} {pct:8}  {offered:9.0}  {passed:8.0}  {expected:10.0}  {:.3}",
                passed / expected
            );
        }
    }
}
