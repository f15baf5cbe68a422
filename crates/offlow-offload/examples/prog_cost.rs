//! What a frame costs the offload XDP program, by path, measured by the
//! kernel (`BPF_PROG_TEST_RUN` with a repeat count; root needed):
//!
//! ```sh
//! cargo run --release -p offlow-offload --example prog_cost
//! ```
//!
//! The program is loaded detached (no interface carries it) on a veth pair
//! in a namespace of its own, deleted at the end. Rows: a frame on an
//! interface that is not a port (the program's first lookup fails: close to
//! the test-run harness's own cost), a frame outside the offloadable class
//! (ARP), a miss (no entry), and hits with a drop and with an output. The
//! redirect itself is not carried out in a test run; what the numbers show
//! is the program's own work per frame. Entries that rewrite the frame are
//! left out: a repeated test run does not restore the frame between runs,
//! so every run after the first would be a miss on the rewritten frame.
//! The TCP rows time the partial-checksum check: a full checksum (the
//! check only), and a segment (20-byte header plus 0 / 1460 bytes) whose
//! full checksum equals its pseudo-header sum, so the program takes it for
//! partial and sums the whole segment on every run, writing back the same
//! value (the frame stays as it was; see `partial_csum` in offload.bpf.c).
//! `OFFLOW_RECORD=1` also runs each frame once with the outcome record on
//! and prints which counters moved.
//!
//! Mask rows: masked entries (each of a UDP destination port's bit, so a
//! frame to port 2^n hits only mask n's entry), timed with one mask in use
//! and with all eight: a hit in the first and in the last slot looked at,
//! an exact hit and a miss beside them (the miss pays every mask's
//! lookup).
//!
//! Tunnel rows (GRE key=flow and VXLAN tunnels over `vb`): an ordinary
//! frame on an underlay (one more lookup: is it a tunnel's?), a GRE frame
//! whose inner frame has no entry, and then the hits that decapsulate or
//! encapsulate. Those rewrite the frame, so they cannot repeat in one test
//! run: they are timed one run per call, averaged over many calls, beside
//! the plain output hit timed the same way (a single run's time carries
//! the kernel timer's own cost, which the repeated rows spread thin).

use std::process::Command;

use offlow_offload::xdp::{AttachPolicy, MissPath, XdpBackend, XdpConfig, XdpPort, MAX_MASKS};
use offlow_offload::{
    compile, OffloadBackend, OffloadKey, OffloadMask, OffloadMatch, OffloadProgram, TunnelPort,
    Verdict,
};
use offlow_pipeline::{Action, PortNo};
use offlow_testkit::FrameBuilder;
use offlow_wire::checksum;
use offlow_wire::tunnel::{Endpoint, KeyMode, Kind};

const REPEAT: u32 = 2_000_000;

fn ip(args: &[&str]) -> anyhow::Result<()> {
    let st = Command::new("ip").args(args).status()?;
    anyhow::ensure!(st.success(), "ip {}", args.join(" "));
    Ok(())
}

struct Ns(String);

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn main() -> anyhow::Result<()> {
    anyhow::ensure!(offlow_offload::xdp::privileged(), "needs root");
    let ns = Ns(format!("ofcost-{}", std::process::id()));
    ip(&["netns", "add", &ns.0])?;
    ip(&[
        "-n", &ns.0, "link", "add", "va", "type", "veth", "peer", "name", "vb",
    ])?;
    for d in ["lo", "va", "vb"] {
        ip(&["-n", &ns.0, "link", "set", d, "up"])?;
    }
    offlow_io::netns::in_netns(Some(&ns.0), run)??;
    Ok(())
}

/// A TCP segment 10.0.0.1:`sport` -> 10.0.0.2:80 with `payload` bytes,
/// checksum valid.
fn tcp(sport: u16, payload: usize) -> Vec<u8> {
    let data: Vec<u8> = (0..payload).map(|i| (i * 7 + 3) as u8).collect();
    FrameBuilder::default()
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2])
        .tcp(sport, 80)
        .payload(&data)
        .build()
}

/// `f` (untagged IPv4/TCP) with its urgent pointer chosen so that its
/// valid checksum equals its folded pseudo-header sum: the program cannot
/// tell it from a partial one and finishes it, to the same value.
fn looks_partial(mut f: Vec<u8>) -> Vec<u8> {
    let seg_len = f.len() - 34;
    let pseudo = checksum::fold(checksum::pseudo_ipv4(
        [10, 0, 0, 1],
        [10, 0, 0, 2],
        6,
        seg_len as u16,
    ));
    // With the checksum and urgent fields 0, the sum t of the rest: the
    // urgent pointer u must make ~fold(t + u) == pseudo.
    f[50..54].fill(0);
    let t = checksum::fold(checksum::sum(&f[34..], u32::from(pseudo)));
    let u = checksum::fold(u32::from(!pseudo) + u32::from(!t));
    f[52..54].copy_from_slice(&u.to_be_bytes());
    f[50..52].copy_from_slice(&pseudo.to_be_bytes());
    assert_eq!(
        checksum::fold(checksum::sum(&f[34..], u32::from(pseudo))),
        0xffff,
        "the checksum is valid"
    );
    f
}

fn run() -> anyhow::Result<()> {
    let port = |ofport, name: &str| XdpPort {
        ofport,
        ifname: name.into(),
        miss: MissPath::Pass,
    };
    let mut b = XdpBackend::open(&XdpConfig {
        ports: vec![port(1, "va"), port(2, "vb")],
        room: 1024,
        attach: AttachPolicy::Detached,
        hook: Default::default(),
        debug_record: std::env::var_os("OFFLOW_RECORD").is_some(),
        tunnels: tunnels(),
    })?;
    let ifindex = |n: u32| {
        b.ports()
            .iter()
            .find(|p| p.ofport == n)
            .map(|p| p.ifindex)
            .unwrap_or(0)
    };
    let (va, vb, lo) = (ifindex(1), ifindex(2), 1);
    let udp = |sport: u16| {
        FrameBuilder::default()
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2])
            .udp(sport, 9)
            .build()
    };
    let entry = |b: &mut XdpBackend, sport: u16, actions: &[Action]| -> anyhow::Result<()> {
        let key = OffloadKey::parse(&udp(sport), 1, 0).ok_or(anyhow::anyhow!("not in class"))?;
        b.install(&key.into(), &compile(&key, actions)?)?;
        Ok(())
    };
    entry(&mut b, 1, &[])?;
    entry(&mut b, 2, &[Action::output(PortNo(2))])?;
    for sport in [3, 4, 5] {
        let key = OffloadKey::parse(&tcp(sport, 0), 1, 0).ok_or(anyhow::anyhow!("not in class"))?;
        b.install(&key.into(), &compile(&key, &[Action::output(PortNo(2))])?)?;
    }
    let arp = FrameBuilder::default()
        .arp(1, [2, 0, 0, 0, 0, 1], [10, 0, 0, 1], [0; 6], [10, 0, 0, 2])
        .build();
    let rows: [(&str, Vec<u8>, u32); 8] = [
        ("not a port (harness floor)", udp(9), lo),
        ("outside the class (ARP)", arp, va),
        ("miss: no entry", udp(9), va),
        ("hit: drop", udp(1), va),
        ("hit: output", udp(2), va),
        ("hit: output, TCP full csum", tcp(3, 0), va),
        (
            "hit: output, TCP partial, 0 B",
            looks_partial(tcp(4, 0)),
            va,
        ),
        (
            "hit: output, TCP partial, 1460 B",
            looks_partial(tcp(5, 1460)),
            va,
        ),
    ];
    println!("offload XDP program, mean ns per frame over {REPEAT} test runs (kernel-timed)");
    for round in 0..3 {
        for (name, frame, ifx) in &rows {
            let (ret, ns) = b.time_run(frame, *ifx, 0, REPEAT)?;
            println!("round {round}  {name:<30} {ns:>5} ns  (XDP action {ret})");
            if std::env::var_os("OFFLOW_RECORD").is_some() {
                let before = b.stats()?;
                b.test_run(frame, *ifx, 0)?;
                let after = b.stats()?;
                let moved: Vec<_> = after
                    .iter()
                    .zip(before.iter())
                    .filter(|(a, b)| a.1 != b.1)
                    .map(|(a, _)| a.0)
                    .collect();
                println!("    counters {moved:?}");
                println!("    outcome {:?}", b.take_outcome()?);
            }
        }
    }
    mask_rows(&mut b, va)?;
    tunnel_rows(&mut b, va, vb)?;
    Ok(())
}

fn mask_rows(b: &mut XdpBackend, va: u32) -> anyhow::Result<()> {
    let to = |dport: u16| {
        FrameBuilder::default()
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2])
            .udp(7, dport)
            .build()
    };
    let fwd = OffloadProgram::plain(Verdict::Port(2));
    let install = |b: &mut XdpBackend, n: usize| -> anyhow::Result<()> {
        let key = OffloadKey::parse(&to(1 << n), 1, 0).ok_or(anyhow::anyhow!("not in class"))?;
        let mask = OffloadMask {
            tp_dst: 1 << n,
            ..OffloadMask::SHAPE
        };
        b.install(&OffloadMatch::new(&key, mask), &fwd)?;
        Ok(())
    };
    let exact = OffloadKey::parse(&to(0x300), 1, 0).ok_or(anyhow::anyhow!("not in class"))?;
    b.install(&exact.into(), &fwd)?;
    install(b, 0)?;
    let one: [(&str, Vec<u8>); 3] = [
        ("1 mask: exact hit", to(0x300)),
        ("1 mask: masked hit", to(1)),
        ("1 mask: miss", to(0)),
    ];
    for round in 0..3 {
        for (name, frame) in &one {
            let (ret, ns) = b.time_run(frame, va, 0, REPEAT)?;
            println!("round {round}  {name:<30} {ns:>5} ns  (XDP action {ret})");
        }
    }
    for n in 1..MAX_MASKS {
        install(b, n)?;
    }
    let all: [(&str, Vec<u8>); 4] = [
        ("8 masks: exact hit", to(0x300)),
        ("8 masks: hit, first mask", to(1)),
        ("8 masks: hit, last mask", to(1 << (MAX_MASKS - 1))),
        ("8 masks: miss", to(0)),
    ];
    for round in 0..3 {
        for (name, frame) in &all {
            let (ret, ns) = b.time_run(frame, va, 0, REPEAT)?;
            println!("round {round}  {name:<30} {ns:>5} ns  (XDP action {ret})");
        }
    }
    println!("verified_insns {}", b.verified_insns()?);
    Ok(())
}

const LOCAL: [u8; 4] = [192, 168, 50, 1];
const REMOTE: [u8; 4] = [192, 168, 50, 2];

/// GRE key=flow (port 10), VXLAN key=flow (11) and GRE key 8 with
/// checksums (12), all over `vb` (2).
fn tunnels() -> Vec<TunnelPort> {
    let ep = |kind| Endpoint {
        key: KeyMode::Flow,
        ..Endpoint::new(
            kind,
            LOCAL,
            REMOTE,
            [2, 0, 0, 0, 0, 0xb],
            [2, 0, 0, 0, 0, 0xc],
        )
    };
    let csum = Endpoint {
        key: KeyMode::Fixed(8),
        csum: true,
        ..ep(Kind::Gre)
    };
    [(10, ep(Kind::Gre)), (11, ep(Kind::Vxlan)), (12, csum)]
        .into_iter()
        .map(|(ofport, endpoint)| TunnelPort {
            ofport,
            endpoint,
            underlay: 2,
        })
        .collect()
}

/// `inner` as a far end sends it over GRE with `key` (and a checksum).
fn gre_frame(inner: &[u8], key: u32, csum: bool) -> Vec<u8> {
    let far = Endpoint {
        key: KeyMode::Fixed(key),
        csum,
        ..Endpoint::new(
            Kind::Gre,
            REMOTE,
            LOCAL,
            [2, 0, 0, 0, 0, 0xc],
            [2, 0, 0, 0, 0, 0xb],
        )
    };
    let mut out = vec![0u8; inner.len() + 64];
    let n = far
        .encapsulate(inner, 0, 1, 0, &mut out)
        .expect("room for the outer headers");
    out.truncate(n);
    out
}

/// Mean kernel time of `calls` single runs of `frame` (a rewriting hit).
fn single_runs(b: &XdpBackend, frame: &[u8], ifx: u32, calls: u32) -> anyhow::Result<(u32, u32)> {
    let mut total = 0u64;
    let mut ret = 0;
    for _ in 0..calls {
        let (r, ns) = b.time_run(frame, ifx, 0, 1)?;
        ret = r;
        total += u64::from(ns);
    }
    Ok((ret, (total / u64::from(calls)) as u32))
}

fn tunnel_rows(b: &mut XdpBackend, va: u32, vb: u32) -> anyhow::Result<()> {
    // A UDP frame of `len` bytes (60 or more).
    let inner = |sport: u16, len: usize| {
        FrameBuilder::default()
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2])
            .udp(sport, 9)
            .payload(&vec![0x3c; len.saturating_sub(42)])
            .build()
    };
    let install = |b: &mut XdpBackend, key: OffloadKey, out: u32| -> anyhow::Result<()> {
        b.install(&key.into(), &compile(&key, &[Action::output(PortNo(out))])?)?;
        Ok(())
    };
    let key = |f: &[u8], port: u32, id: u64| {
        OffloadKey::parse(f, port, id).ok_or(anyhow::anyhow!("not in class"))
    };
    // An ordinary hit on the underlay; decap (GRE key 7 in, out of va);
    // encap (va in, into VXLAN); the same with GRE checksums, small and
    // large.
    install(b, key(&inner(20, 60), 2, 0)?, 1)?;
    install(b, key(&inner(21, 60), 10, 7)?, 1)?;
    install(b, key(&inner(22, 60), 1, 0)?, 11)?;
    install(b, key(&inner(23, 60), 12, 8)?, 1)?;
    install(b, key(&inner(24, 1400), 12, 8)?, 1)?;
    install(b, key(&inner(25, 60), 1, 0)?, 12)?;
    install(b, key(&inner(26, 1400), 1, 0)?, 12)?;
    let repeated: [(&str, Vec<u8>, u32); 2] = [
        ("tunnel: ordinary hit on an underlay", inner(20, 60), vb),
        (
            "tunnel: GRE frame, inner miss",
            gre_frame(&inner(99, 60), 7, false),
            vb,
        ),
    ];
    const CALLS: u32 = 200_000;
    let single: [(&str, Vec<u8>, u32); 7] = [
        ("single runs: hit: output", inner(2, 60), va),
        (
            "single runs: GRE decap, output",
            gre_frame(&inner(21, 60), 7, false),
            vb,
        ),
        ("single runs: output into VXLAN", inner(22, 60), va),
        (
            "single runs: GRE+csum decap, 60 B",
            gre_frame(&inner(23, 60), 8, true),
            vb,
        ),
        (
            "single runs: GRE+csum decap, 1400 B",
            gre_frame(&inner(24, 1400), 8, true),
            vb,
        ),
        ("single runs: into GRE+csum, 60 B", inner(25, 60), va),
        ("single runs: into GRE+csum, 1400 B", inner(26, 1400), va),
    ];
    for round in 0..3 {
        for (name, frame, ifx) in &repeated {
            let (ret, ns) = b.time_run(frame, *ifx, 0, REPEAT)?;
            println!("round {round}  {name:<38} {ns:>5} ns  (XDP action {ret})");
        }
        for (name, frame, ifx) in &single {
            let (ret, ns) = single_runs(b, frame, *ifx, CALLS)?;
            println!("round {round}  {name:<38} {ns:>5} ns  (XDP action {ret}, {CALLS} calls)");
        }
    }
    Ok(())
}
