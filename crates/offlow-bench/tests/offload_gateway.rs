//! Issue 25's gateway row group of `offlow bench offload`, short and
//! privileged: the generator program on the GRE frame (it varies the
//! inner UDP source port with a valid inner checksum and leaves the outer
//! headers alone, also after a receiver decapsulated in the pool's pages),
//! and the gateway rows end to end for a fraction of a second each (every
//! frame decapsulated and tagged, the offloaded row served by the tier, or
//! the command fails; about 10 s).
//!
//! Needs root and `ip`; without them each test prints a notice and passes,
//! unless `CI` is set (CI runs as root). Namespaces and switches are owned
//! by guards inside the bench, removed also when a row fails. The CLI test
//! needs the `offlow` binary next to this test executable; Open vSwitch's
//! row runs only when `ovs-vswitchd` is installed (a notice otherwise).

mod common;

use common::offlow_bin;
use std::process::Command;

use offlow_bench::offload::gateway::{self, tagged};
use offlow_bench::offload::xdp;
use offlow_bench::traffic::FIRST_SRC_PORT;
use offlow_wire::checksum::{fold, sum};

fn can_run() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let ip = Command::new("ip").arg("-V").output().is_ok();
    if root && ip {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must run the gateway tests: root={root} ip={ip}"
    );
    eprintln!("NOTICE: skipping the gateway test (root={root} ip={ip})");
    false
}

const FLOWS: u32 = 37;

/// What a decapsulating receiver leaves in a page: it moves the data start
/// past the outer headers and writes the inner MACs and a tag over the
/// GRE header's end (offlow's and the kernel's pop/push do that).
fn decap_in_place(f: &mut [u8]) {
    f[38..54].fill(0xee);
}

#[test]
fn generator_varies_the_inner_port_of_gre_frames() {
    if !can_run() {
        return;
    }
    let frame = gateway::frame(64).expect("frame");
    let n = 2 * FLOWS as usize + 3;
    for (restore, scribble) in [(false, (|_| {}) as fn(&mut [u8])), (true, decap_in_place)] {
        let runs = xdp::gen_frames_once(&frame, FLOWS, FIRST_SRC_PORT, n, restore, scribble)
            .expect("test runs of the generator");
        for (i, (verdict, f)) in runs.iter().enumerate() {
            assert_eq!(*verdict, 3, "XDP_TX");
            assert_eq!(f.len(), frame.len());
            // Outer headers and the inner frame's headers up to the ports
            // untouched; the outer IPv4 checksum still valid.
            assert_eq!(f[..76], frame[..76], "run {i}");
            assert_eq!(fold(sum(&f[14..34], 0)), 0xffff);
            // The inner frame is flow k's, checksum included.
            let k = (i as u32 % FLOWS) as u16;
            assert_eq!(f[42..], gateway::inner_frame(64, k)[..], "run {i}");
            // What the gateway makes of it passes the sink's check.
            let out = tagged(&f[42..]);
            assert_eq!(gateway::check_frame(&out, 64, FLOWS), Ok(()));
        }
    }
}

/// `--gateway`'s rows end to end, briefly: offlow in software, offloaded
/// (the tier must have served the frames) and Open vSwitch (when
/// installed) each decapsulate and tag every frame, or the command fails.
#[test]
fn cli_gateway_rows_decapsulate_and_tag_every_frame() {
    if !can_run() {
        return;
    }
    let Some(bin) = offlow_bin() else {
        eprintln!("NOTICE: no offlow binary next to the test executable: gateway CLI test skipped");
        return;
    };
    let ovs = Command::new("ovs-vswitchd")
        .arg("--version")
        .output()
        .is_ok();
    if !ovs {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must have Open vSwitch"
        );
        eprintln!("NOTICE: no ovs-vswitchd: the gateway test runs without its row");
    }
    let rows = if ovs {
        "generator,gw-userspace,gw-offloaded,gw-ovs"
    } else {
        "generator,gw-userspace,gw-offloaded"
    };
    let out = Command::new(bin)
        .args(["bench", "offload", "--rows", rows, "--workers", "1"])
        .args([
            "--seconds",
            "0.3",
            "--warmup",
            "0.1",
            "--ping",
            "0",
            "--json",
        ])
        .output()
        .expect("offlow runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "offlow bench offload: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let last = stdout.lines().last().expect("output");
    let v: serde_json::Value = serde_json::from_str(last).expect("last line is JSON");
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), if ovs { 4 } else { 3 });
    for r in &rows[1..] {
        assert!(r["error"].is_null(), "{r}");
        let received = r["received"].as_u64().expect("received");
        assert!(received > 0, "{r}");
        assert_eq!(r["translated"].as_u64(), Some(received), "{r}");
        assert!(r["samples_checked"].as_u64().is_some_and(|n| n > 0), "{r}");
        assert_eq!(r["flows_seen"], 100, "{r}");
    }
    assert!(rows[2]["tier_hits"].as_u64().is_some_and(|n| n > 0));
    assert!(v["gateway_goals"]["offloaded_vs_userspace"]
        .as_f64()
        .is_some());
}
