//! `offlow bench offload`'s own instruments, short and privileged: the XDP
//! live-frames generator and the XDP sink on a veth pair between two fresh
//! namespaces (about a second of traffic), the generator program's output
//! frames (ports and checksums, also with its headers restored after a
//! receiver wrote into the pool's pages), the lookup floor (only the flows
//! in its map are forwarded), the CLI's JSON line, and the NAT row group
//! (`--nat`, every frame translated, a fraction of a second per row).
//!
//! Needs root and `ip`; without them each test prints a notice and passes,
//! unless `CI` is set (CI runs as root). The namespaces are owned by a
//! [`Topo`] guard: removed when it drops, also when an assertion fails.
//! The CLI test needs the `offlow` binary next to this test executable
//! (`target/{debug,release}/offlow`); when absent it is skipped with a
//! notice.

mod common;

use common::offlow_bin;
use std::process::Command;
use std::time::Duration;

use offlow_bench::offload::xdp::{self, Floor, GenConfig, Generator, Sink};
use offlow_bench::topo::Topo;
use offlow_bench::traffic::{build_frames, DST_PORT, FIRST_SRC_PORT};
use offlow_wire::checksum::{fold, pseudo_ipv4, sum};

fn can_run() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let ip = Command::new("ip").arg("-V").output().is_ok();
    if root && ip {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must run the offload generator test: root={root} ip={ip}"
    );
    eprintln!("NOTICE: skipping the offload generator test (root={root} ip={ip})");
    false
}

/// 37 flows: not the default 100, so a hard-coded count would show.
const FLOWS: u32 = 37;

/// [`FLOWS`] flows of `frame` from the generator end of `t`, one thread on
/// CPU 0, flat out.
fn one_cpu_flat_out(t: &Topo, frame: Vec<u8>) -> GenConfig {
    GenConfig {
        ns: t.gen.0.clone(),
        ifname: t.gen.1.clone(),
        frame,
        flows: FLOWS,
        base_port: FIRST_SRC_PORT,
        cpus: vec![0],
        batch: 64,
        rate_per_thread: 0,
        restore_headers: false,
        partition_flows: false,
    }
}

#[test]
fn generator_and_sink_count_every_flow() {
    if !can_run() {
        return;
    }
    let t = Topo::hosts(false, 1).expect("namespaces and a veth pair");
    let sink = Sink::attach(&t.rx.0, &t.rx.1, DST_PORT).expect("sink attached");
    let frame = build_frames(1, 64).pop().expect("a frame");
    let cfg = one_cpu_flat_out(&t, frame);
    let g = Generator::start(&cfg).expect("generator started");
    std::thread::sleep(Duration::from_secs(1));
    let sent = g.finish().expect("generator threads ended cleanly");
    // The last batch's frames are received in softirq before its run
    // returns; allow a moment for any the kernel deferred to ksoftirqd.
    std::thread::sleep(Duration::from_millis(100));
    let c = sink.counts().expect("sink counters");
    assert!(c.frames > 0, "the sink counted nothing ({sent} sent)");
    assert!(c.frames <= sent, "sink {} > sent {sent}", c.frames);
    assert_eq!(c.bytes, c.frames * 60, "60-byte frames");
    let ports = sink.src_ports().expect("port set");
    let want: Vec<u16> = (0..FLOWS as u16).map(|i| FIRST_SRC_PORT + i).collect();
    assert_eq!(ports, want, "exactly the flows' source ports arrived");
}

/// The floor forwards exactly the flows its map holds: the generator sends
/// `FLOWS` flows, the map holds the first `FLOWS - 5`; the other five go
/// to the switch namespace's stack and never reach the sink.
#[test]
fn lookup_floor_forwards_only_its_flows() {
    if !can_run() {
        return;
    }
    let t = Topo::hosts(true, 1).expect("namespaces and veth pairs");
    let sw = t.sw().expect("switch namespace").to_string();
    let sink = Sink::attach(&t.rx.0, &t.rx.1, DST_PORT).expect("sink attached");
    let frame = build_frames(1, 64).pop().expect("a frame");
    let known = FLOWS - 5;
    let _floor =
        Floor::attach(&sw, "p1", "p2", &frame, FIRST_SRC_PORT, known).expect("floor attached");
    // The generator's frames reach p1 only while p1 has NAPI (its XDP
    // program gives it that); the floor's redirect out of p2 needs NAPI on
    // the receiver, which the sink gives.
    let cfg = one_cpu_flat_out(&t, frame);
    let g = Generator::start(&cfg).expect("generator started");
    std::thread::sleep(Duration::from_millis(500));
    let sent = g.finish().expect("generator threads ended cleanly");
    std::thread::sleep(Duration::from_millis(100));
    let c = sink.counts().expect("sink counters");
    assert!(c.frames > 0, "the sink counted nothing ({sent} sent)");
    let ports = sink.src_ports().expect("port set");
    let want: Vec<u16> = (0..known as u16).map(|i| FIRST_SRC_PORT + i).collect();
    assert_eq!(ports, want, "exactly the floor's flows were forwarded");
}

/// What a NAT does to a frame in place: source address, TTL, MACs (no
/// checksum update: the generator must not depend on it).
fn nat_in_place(f: &mut [u8]) {
    f[0..12].fill(0xee);
    f[22] -= 1;
    f[26..30].copy_from_slice(&[10, 0, 1, 254]);
}

#[test]
fn generator_frames_cycle_ports_with_valid_checksums() {
    if !can_run() {
        return;
    }
    let frame = build_frames(1, 64).pop().expect("a frame");
    let n = 2 * FLOWS as usize + 3;
    let runs = xdp::gen_frames_once(&frame, FLOWS, FIRST_SRC_PORT, n, false, |_| {})
        .expect("test runs of the generator");
    check_generated(&frame, &runs);
    // A receiver that rewrites the pool's pages: with restore, every frame
    // still leaves with the original headers.
    let runs = xdp::gen_frames_once(&frame, FLOWS, FIRST_SRC_PORT, n, true, nat_in_place)
        .expect("test runs of the generator");
    check_generated(&frame, &runs);
}

fn check_generated(frame: &[u8], runs: &[(u32, Vec<u8>)]) {
    for (i, (verdict, f)) in runs.iter().enumerate() {
        assert_eq!(*verdict, 3, "XDP_TX");
        assert_eq!(f.len(), 60);
        let port = u16::from_be_bytes([f[34], f[35]]);
        assert_eq!(
            u32::from(port),
            u32::from(FIRST_SRC_PORT) + i as u32 % FLOWS
        );
        // IPv4 header untouched and valid.
        assert_eq!(f[..34], frame[..34]);
        assert_eq!(fold(sum(&f[14..34], 0)), 0xffff, "IPv4 checksum");
        // UDP checksum valid over the pseudo-header.
        let udp_len = u16::from_be_bytes([f[38], f[39]]);
        assert_ne!(u16::from_be_bytes([f[40], f[41]]), 0, "checksum kept");
        let src = [f[26], f[27], f[28], f[29]];
        let dst = [f[30], f[31], f[32], f[33]];
        let pseudo = pseudo_ipv4(src, dst, 17, udp_len);
        let end = 34 + usize::from(udp_len);
        assert_eq!(
            fold(sum(&f[34..end], pseudo)),
            0xffff,
            "UDP checksum, run {i}"
        );
    }
}

/// The CLI wiring: `offlow bench offload --json` prints the object last,
/// with the generator row and the offloaded row (the switch with
/// `--offload xdp`) measured.
#[test]
fn cli_prints_json_last() {
    if !can_run() {
        return;
    }
    let Some(bin) = offlow_bin() else {
        eprintln!("NOTICE: no offlow binary next to the test executable: CLI test skipped");
        return;
    };
    let out = Command::new(bin)
        .args(["bench", "offload", "--rows", "generator,offloaded"])
        .args([
            "--workers",
            "1",
            "--seconds",
            "0.3",
            "--warmup",
            "0.1",
            "--ping",
            "0",
        ])
        .arg("--json")
        .output()
        .expect("offlow runs");
    assert!(
        out.status.success(),
        "offlow bench offload: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().expect("output");
    let v: serde_json::Value = serde_json::from_str(last).expect("last line is JSON");
    assert_eq!(v["experiment"], "offload");
    assert_eq!(v["rows"][0]["kind"], "generator");
    assert!(v["rows"][0]["received"].as_u64().is_some_and(|n| n > 0));
    assert_eq!(v["rows"][0]["flows_seen"], 100);
    assert_eq!(v["rows"][1]["kind"], "offloaded");
    assert!(v["rows"][1]["skipped"].is_null(), "{}", v["rows"][1]);
    assert!(v["rows"][1]["error"].is_null(), "{}", v["rows"][1]);
    assert!(
        v["rows"][1]["received"].as_u64().is_some_and(|n| n > 0),
        "{}",
        v["rows"][1]
    );
}

/// Issue 25's NAT row group end to end, briefly: `--nat` runs nftables,
/// offlow in software and offloaded, each translating every frame (the
/// sink's count and its sampled frames' headers and checksums: a row that
/// does not translate fails the command), then two latency levels.
/// Needs `nft` too (skipped with a notice when absent, unless `CI`).
#[test]
fn cli_nat_rows_translate_every_frame() {
    if !can_run() {
        return;
    }
    let Some(bin) = offlow_bin() else {
        eprintln!("NOTICE: no offlow binary next to the test executable: NAT CLI test skipped");
        return;
    };
    if Command::new("nft").arg("--version").output().is_err() {
        assert!(std::env::var_os("CI").is_none(), "CI must have nft");
        eprintln!("NOTICE: no nft (nftables): NAT CLI test skipped");
        return;
    }
    let out = Command::new(bin)
        .args(["bench", "offload", "--nat", "--workers", "1"])
        .args(["--seconds", "0.3", "--warmup", "0.1"])
        .args(["--ping", "20", "--nat-loads", "0,50", "--json"])
        .output()
        .expect("offlow runs");
    assert!(
        out.status.success(),
        "offlow bench offload --nat: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().expect("output");
    let v: serde_json::Value = serde_json::from_str(last).expect("last line is JSON");
    let rows = v["rows"].as_array().expect("rows");
    let kinds: Vec<&str> = rows.iter().filter_map(|r| r["kind"].as_str()).collect();
    assert_eq!(
        kinds,
        [
            "generator",
            "nat-nftables",
            "nat-userspace",
            "nat-offloaded"
        ]
    );
    for r in &rows[1..] {
        assert!(r["error"].is_null(), "{r}");
        let received = r["received"].as_u64().expect("received");
        assert!(received > 0, "{r}");
        assert_eq!(r["translated"].as_u64(), Some(received), "{r}");
        assert!(r["samples_checked"].as_u64().is_some_and(|n| n > 0), "{r}");
    }
    assert!(rows[3]["tier_hits"].as_u64().is_some_and(|n| n > 0));
    let levels = v["nat_latency"].as_array().expect("latency levels");
    assert_eq!(levels.len(), 6, "two levels per configuration");
    for l in levels {
        assert!(l["error"].is_null(), "{l}");
        assert!(
            l["stats"]["received"].as_u64().is_some_and(|n| n > 0),
            "{l}"
        );
    }
    assert!(v["nat_goals"]["offloaded_vs_nftables"].as_f64().is_some());
}
