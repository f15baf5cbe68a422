//! The harness the `offlow-io` port tests share (each file under `tests/`
//! is its own crate and declares `mod common;`; a file uses a subset,
//! hence `#[allow(dead_code)]` on its declaration).
//!
//! What it holds: [`Netns`], a network namespace holding one veth pair
//! `va`/`vb` (both up); [`ip`], the `ip` runner; the test frames and their
//! reception ([`test_frame`], [`is_test`], [`receive`]); and
//! [`udp_checksum_verifies`].
//!
//! Skip policy: without root (CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF)
//! [`Netns::new`] prints a notice and returns `None`, and the test passes;
//! under CI (`CI` set) it fails instead, since CI runs as root.
//!
//! Invariants: a [`Netns`] deletes its namespace on drop, which also runs
//! while a failing test unwinds; the veth pair and anything attached to
//! it (XDP programs, addresses) go with the namespace. The guard exists
//! before the first step that can fail. Names are unique per process and
//! call (a tag, the pid and an atomic counter), so parallel tests and test
//! binaries never share a namespace; the interface names inside are fixed
//! (`va`, `vb`) because each namespace is private.
//!
//! Thread-safety: tests run on parallel threads; the only shared state is
//! the name counter (an atomic). [`Netns::run`] moves only the calling
//! thread into the namespace and back before it returns.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use offlow_io::netns::in_netns;
use offlow_io::{Port, RxMeta};
use offlow_testkit::{FrameBuilder, MAC_SRC};

/// Makes namespace names unique within this process.
static SEQ: AtomicU32 = AtomicU32::new(0);

/// `ip ARGS`, required to succeed; its stdout.
pub(crate) fn ip(args: &[&str]) -> String {
    let out = Command::new("ip").args(args).output().expect("running ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether IPv6 stays enabled on the veth pair.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Ipv6 {
    On,
    /// Off before the links come up: no router solicitations or MLD
    /// reports mixed into what the test counts.
    Off,
}

/// A namespace (its name in `.0`) holding veth pair `va`/`vb`, both up;
/// deleted on drop, with the pair and anything attached to it.
pub(crate) struct Netns(pub String);

impl Netns {
    /// A fresh namespace named `TAG-PID-N`; `None` (after a notice) when
    /// not root, a failure under CI.
    pub(crate) fn new(tag: &str, ipv6: Ipv6) -> Option<Netns> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            assert!(std::env::var_os("CI").is_none(), "CI runs as root");
            eprintln!("skipping: needs root");
            return None;
        }
        let name = format!(
            "{tag}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        ip(&["netns", "add", &name]);
        // From here on, Drop deletes the namespace whatever fails next.
        let ns = Netns(name);
        ip(&[
            "-n", &ns.0, "link", "add", "name", "va", "type", "veth", "peer", "name", "vb",
        ]);
        if ipv6 == Ipv6::Off {
            for dev in ["va", "vb"] {
                let _ = Command::new("ip")
                    .args(["netns", "exec", &ns.0, "sysctl", "-qw"])
                    .arg(format!("net.ipv6.conf.{dev}.disable_ipv6=1"))
                    .status();
            }
        }
        ip(&["-n", &ns.0, "link", "set", "va", "up"]);
        ip(&["-n", &ns.0, "link", "set", "vb", "up"]);
        Some(ns)
    }

    /// `f` run inside the namespace (on this thread only).
    pub(crate) fn run<T>(&self, f: impl FnOnce() -> T) -> T {
        in_netns(Some(&self.0), f).expect("entering the namespace")
    }

    /// `ip -d link show DEV` in the namespace.
    pub(crate) fn link_details(&self, dev: &str) -> String {
        ip(&["-n", &self.0, "-d", "link", "show", dev])
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// Test frame `i`: broadcast from 02:00:00:00:00:01, experimental
/// ethertype 0x88b5 (optionally behind an 802.1Q tag, VLAN 42), the index,
/// `extra` bytes of a pattern depending on `i`, padded to 60 bytes.
pub(crate) fn test_frame(i: u16, tagged: bool, extra: usize) -> Vec<u8> {
    let mut b = FrameBuilder::eth([0xff; 6], MAC_SRC);
    if tagged {
        b = b.vlan(42, 0);
    }
    let mut payload = i.to_be_bytes().to_vec();
    payload.extend((0..extra).map(|k| (k as u8) ^ (i as u8)));
    b.ethertype(0x88b5)
        .payload(&payload)
        .pad_to_with(60, 0x5a)
        .build()
}
/// Whether `f` is a test frame (ethertype 0x88b5, tagged or not).
pub(crate) fn is_test(f: &[u8]) -> bool {
    let et = |at: usize| f.get(at..at + 2).map(|b| [b[0], b[1]]);
    et(12) == Some([0x88, 0xb5]) || (et(12) == Some([0x81, 0x00]) && et(16) == Some([0x88, 0xb5]))
}

/// Receive frames `keep` accepts until `want` arrived or two seconds
/// passed; re-inserts VLAN tags the port reports as stripped.
pub(crate) fn receive(
    port: &mut dyn Port,
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

/// Whether the UDP checksum of `frame` (Ethernet, IPv4 without options,
/// UDP) verifies: the one's complement sum over pseudo-header and segment
/// is 0xffff.
pub(crate) fn udp_checksum_verifies(frame: &[u8]) -> bool {
    let seg = &frame[34..];
    let mut pseudo = frame[26..34].to_vec();
    pseudo.extend_from_slice(&[0, 17]);
    pseudo.extend_from_slice(&(seg.len() as u16).to_be_bytes());
    let total = offlow_wire::checksum::sum(seg, offlow_wire::checksum::sum(&pseudo, 0));
    offlow_wire::checksum::fold(total) == 0xffff
}
