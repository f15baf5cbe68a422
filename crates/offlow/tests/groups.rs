//! Groups end to end: `offlow run` on three veth ports in namespaces this
//! test creates, driven with `ovs-ofctl add-group / mod-group / del-groups
//! / dump-groups / dump-group-stats / dump-group-features`, with UDP
//! traffic from host 0 counted by real sockets on hosts 1 and 2.
//!
//! Host 2's bucket rewrites the IPv4 and Ethernet destinations, so its
//! socket receiving a datagram at all proves the copy's checksums right.
//!
//! Needs root, `ip` and `ovs-ofctl`; without them the test prints a notice
//! and passes, unless `CI` is set.

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use offlow_io::netns::in_netns;

#[allow(dead_code)] // each test file uses a subset of the harness
mod common;

use common::{can_run, first_number_after, sh, Daemon, Net};

const OFFLOADS: &[&str] = &["tso", "off", "gso", "off"];

/// Host `i`'s MAC address.
fn mac(net: &Net, i: usize) -> String {
    let out = sh("ip", &["-n", &net.h[i], "-br", "link", "show", "eth0"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.split_whitespace()
        .nth(2)
        .unwrap_or_else(|| panic!("no address in {text}"))
        .to_string()
}

/// A UDP socket bound in host `i` to 10.0.0.(i+1):7002, with a large
/// buffer and a short read timeout.
fn receiver(net: &Net, i: usize) -> UdpSocket {
    let addr = format!("10.0.0.{}:7002", i + 1);
    let s = in_netns(Some(&net.h[i]), || UdpSocket::bind(&addr))
        .expect("enter host")
        .expect("bind");
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .expect("timeout");
    // A loaded machine can starve the counting thread; the default buffer
    // would then drop in the host, not the switch (as common::udp does).
    let size: libc::c_int = 4 << 20;
    // SAFETY: setsockopt on an open socket with a c_int option value of
    // the size given.
    let rc = unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&s),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "SO_RCVBUFFORCE: {}", std::io::Error::last_os_error());
    s
}

/// Send `n` datagrams from host 0 to 10.0.0.2:7002 from `sources` source
/// ports in turn (1 ms pause every 32) and count what `rx` receive.
fn send_and_count(net: &Net, rx: &[&UdpSocket], n: usize, sources: u16) -> Vec<usize> {
    let tx: Vec<UdpSocket> = in_netns(Some(&net.h[0]), || {
        (0..sources)
            .map(|i| UdpSocket::bind(("10.0.0.1", 7200 + i)))
            .collect::<std::io::Result<_>>()
    })
    .expect("enter host 0")
    .expect("bind senders");
    let counters: Vec<_> = rx
        .iter()
        .map(|s| {
            let s = s.try_clone().expect("clone socket");
            std::thread::spawn(move || {
                let mut buf = [0u8; 64];
                let mut got = 0;
                while s.recv(&mut buf).is_ok() {
                    got += 1;
                }
                got
            })
        })
        .collect();
    for i in 0..n {
        tx[i % tx.len()]
            .send_to(&(i as u32).to_be_bytes(), "10.0.0.2:7002")
            .expect("send");
        if i % 32 == 31 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    counters
        .into_iter()
        .map(|c| c.join().expect("counter"))
        .collect()
}

/// Repeat `f` until it returns true or `limit` passes.
fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    loop {
        if f() {
            return true;
        }
        if Instant::now() > end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn groups_with_ovs_ofctl_and_traffic() {
    if !can_run("the group tests", true, &["ovs-ofctl"]) {
        return;
    }
    let net = Net::with_hosts("ofg", OFFLOADS, 3, &[0, 1, 2]);
    // Host 0 knows host 1's address: no ARP through the groups.
    let mac1 = mac(&net, 1);
    let mac2 = mac(&net, 2);
    sh(
        "ip",
        &[
            "-n", &net.h[0], "neigh", "replace", "10.0.0.2", "lladdr", &mac1, "dev", "eth0",
        ],
    );
    let sw = Daemon::on(&net, &[]);
    let to_h2 = format!("set_field:10.0.0.3->ip_dst,set_field:{mac2}->eth_dst,output:3");

    // An `all` group: host 1 as sent, host 2 through its rewriting bucket.
    sw.ofctl(&[
        "add-group",
        &format!("group_id=1,type=all,bucket=actions=output:2,bucket=actions={to_h2}"),
    ]);
    sw.ofctl(&["add-flow", "in_port=1,udp,actions=group:1"]);
    sw.ofctl(&["add-flow", "in_port=2,actions=output:1"]);
    let desc = sw.ofctl(&["dump-groups"]);
    assert!(desc.contains("group_id=1,type=all"), "{desc}");
    assert!(desc.contains("set_field:10.0.0.3->ip_dst"), "{desc}");
    let features = sw.ofctl(&["dump-group-features"]);
    for t in ["all", "select", "indirect", "fast failover"] {
        assert!(features.contains(t), "{t} in {features}");
    }
    // `offlow trace --switch` rebuilds the switch's groups too.
    let text = sw.trace("in_port=1,udp,nw_src=10.0.0.1,nw_dst=10.0.0.2");
    assert!(
        text.contains("output to port 2") && text.contains("output to port 3"),
        "{text}"
    );
    let (r1, r2) = (receiver(&net, 1), receiver(&net, 2));
    let n = 300;
    let got = send_and_count(&net, &[&r1, &r2], n, 4);
    assert!(
        got[0] >= n - 3 && got[1] >= n - 3,
        "all group: {got:?} of {n}"
    );
    let stats = sw.ofctl(&["dump-group-stats"]);
    let packets = first_number_after(&stats, "packet_count=");
    assert!(packets >= got[0] as u64 && packets <= n as u64, "{stats}");
    assert_eq!(
        stats.matches("bucket").count(),
        2,
        "two bucket counters: {stats}"
    );
    assert!(stats.contains("ref_count=1"), "{stats}");

    // Modified into a select group: each datagram to exactly one host,
    // both hosts used over 64 source ports.
    sw.ofctl(&[
        "mod-group",
        &format!(
            "group_id=1,type=select,bucket=weight:1,actions=output:2,bucket=weight:1,actions={to_h2}"
        ),
    ]);
    let got = send_and_count(&net, &[&r1, &r2], n, 64);
    assert!(
        got[0] + got[1] >= n - 3 && got[0] + got[1] <= n,
        "select: one copy each: {got:?} of {n}"
    );
    assert!(got[0] > 0 && got[1] > 0, "select spreads flows: {got:?}");

    // Fast failover watching port 2, then port 3: the link going down
    // moves the traffic within a link poll (1 s).
    sw.ofctl(&[
        "mod-group",
        &format!(
            "group_id=1,type=ff,bucket=watch_port:2,actions=output:2,bucket=watch_port:3,actions={to_h2}"
        ),
    ]);
    let got = send_and_count(&net, &[&r1, &r2], 100, 4);
    assert!(got[0] >= 97 && got[1] == 0, "ff on port 2: {got:?}");
    sh("ip", &["-n", &net.sw, "link", "set", &net.ports[1], "down"]);
    let moved = eventually(Duration::from_secs(5), || {
        send_and_count(&net, &[&r2], 20, 1)[0] >= 19
    });
    assert!(moved, "ff moved to port 3 after port 2 went down");

    // Deleting the group deletes the flow that forwards to it.
    sw.ofctl(&["del-groups", "group_id=1"]);
    let flows = sw.ofctl(&["dump-flows"]);
    assert!(!flows.contains("group:1"), "{flows}");
    assert!(flows.contains("in_port=2"), "the other flow stays: {flows}");
    assert!(!sw.ofctl(&["dump-groups"]).contains("group_id=1"));
    // A flow naming a group that does not exist is refused.
    let refused = common::ofctl_output(
        Duration::from_secs(5),
        &["add-flow", &sw.target(), "in_port=1,actions=group:9"],
    );
    assert!(!refused.status.success(), "group:9 refused");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("OFPBAC_BAD_OUT_GROUP"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}

/// `offlow run --groups FILE --flows FILE`: the groups are installed
/// before the flows that use them; a refused line is named `FILE:LINE`
/// and the switch does not start.
#[test]
fn run_installs_groups_from_a_file_before_the_flows() {
    let dir = std::env::temp_dir().join(format!("offlow-groups-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let groups = dir.join("groups.txt");
    let flows = dir.join("flows.txt");
    std::fs::write(
        &groups,
        "# chained: 2 forwards to 1, defined first\n\
         group_id=1,type=all,bucket=actions=output:2,bucket=actions=output:3\n\
         group_id=2,type=indirect,bucket=actions=set_field:5->ip_dscp,group:1\n",
    )
    .expect("group file");
    std::fs::write(&flows, "in_port=1,ip,actions=group:2\n").expect("flow file");
    let g = groups.display().to_string();
    let f = flows.display().to_string();
    {
        let sw = Daemon::start(&["--groups", &g, "--flows", &f]);
        let desc = sw.ofctl(&["dump-groups"]);
        assert!(desc.contains("group_id=1,type=all"), "{desc}");
        assert!(desc.contains("group_id=2,type=indirect"), "{desc}");
        let dump = sw.ofctl(&["dump-flows"]);
        assert!(dump.contains("actions=group:2"), "{dump}");
    }
    // A group forwarding to one that does not exist: refused, by line.
    std::fs::write(&groups, "group_id=2,type=indirect,bucket=actions=group:7\n").expect("write");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_offlow"))
        .args(["run", "--groups", &g])
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("offlow run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "started with a bad group file");
    assert!(err.contains(&format!("{g}:1")), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
