//! The offload tier's faults, end to end: an interface that already has an
//! XDP program is reported with the reason, and the switch forwards in
//! software. Namespaces are this test's own (unique names, deleted on the
//! way out, pass or fail). Needs root, `ip` and `ethtool`; without them the
//! test prints a notice and passes, unless `CI` is set.

use std::time::Duration;

#[allow(dead_code)] // each test file uses a subset of the harness
mod common;

use common::{can_run, Daemon, Net};

/// The hosts segment in software and run NAPI (GRO on), which a veth
/// needs to take XDP-redirected frames.
const OFFLOADS: &[&str] = &["tso", "off", "gso", "off", "gro", "on"];

#[test]
fn an_interface_with_an_xdp_program_keeps_the_switch_in_software() {
    if !can_run("the offload fault test", true, &["ethtool"]) {
        return;
    }
    let net = Net::new("ofa", OFFLOADS);
    let ports = ["--port", &net.ports[0], "--port", &net.ports[1]];
    // The first switch's offload tier holds both interfaces' XDP hook.
    let first = Daemon::start(
        &[
            &[
                "--netns",
                &net.sw,
                "--offload",
                "xdp",
                "--fail-mode",
                "standalone",
            ][..],
            &ports[..],
        ]
        .concat(),
    );
    // A second switch on the same interfaces cannot attach: it must say
    // why, keep running, and forward in software.
    let (second, log) = Daemon::start_logged(
        &[
            &[
                "--netns",
                &net.sw,
                "--offload",
                "xdp",
                "--fail-mode",
                "standalone",
            ][..],
            &ports[..],
        ]
        .concat(),
    );
    // The first one goes; the second (AF_PACKET, in software) forwards.
    drop(first);
    std::thread::sleep(Duration::from_millis(200));
    assert!(net.ping(0, "10.0.0.2", 3), "ping across the second switch");
    drop(second);
    let log = log.join().expect("log reader");
    assert!(
        log.contains("offload tier off: the kernel backend could not start"),
        "{log}"
    );
    assert!(log.contains("already has an XDP program"), "{log}");
    assert!(
        !log.contains("offload tier stopped"),
        "no tier ran in the second switch: {log}"
    );
}
