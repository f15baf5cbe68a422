//! The XDP program's tunnel ports against the software tier's reference:
//! `offlow_wire::tunnel::classify` decides which frames on an underlay are
//! a tunnel's and what their inner frame and key are,
//! `offlow_datapath::execute` runs the entry's actions on the inner frame,
//! and `Endpoint::encapsulate` writes what an output to a tunnel sends.
//! Every frame is run through the real program (`BPF_PROG_TEST_RUN`, the
//! kernel's verifier having accepted it) and must come out as the
//! reference says, byte for byte, or go up untouched. The outer IPv4
//! identification and the VXLAN source port are the two fields the tiers
//! may choose apart (a per-CPU counter here; the source port from the
//! same flow hash): the reference takes them from the program's output
//! and the tests check them on their own.
//! Privileged: skipped with a notice when not root (failed under CI).

#[allow(dead_code)] // each test file uses a subset of the harness
mod common;

use offlow_datapath::{execute, ExecStats, OutputMeta, OutputSink, PacketBuf, PortInfo};
use offlow_flow::Field;
use offlow_offload::tunnel::entropy;
use offlow_offload::xdp::{action, XdpBackend, XdpConfig};
use offlow_offload::{
    compile, EntryCounters, OffloadBackend, OffloadError, OffloadKey, OffloadMask, OffloadMatch,
    Refusal, TunnelPort,
};
use offlow_pipeline::{Action, PacketInOrigin, PortNo};
use offlow_testkit::FrameBuilder;
use offlow_wire::checksum;
use offlow_wire::tunnel::{classify, Classified, Endpoint, KeyMode, Kind};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

const LOCAL: [u8; 4] = [192, 168, 50, 1];
const REMOTE: [u8; 4] = [192, 168, 50, 2];
/// Another far end, for the tunnels on `vb`.
const REMOTE_B: [u8; 4] = [192, 168, 60, 2];
const LMAC: [u8; 6] = [0x02, 0xaa, 0, 0, 0, 1];
const RMAC: [u8; 6] = [0x02, 0xaa, 0, 0, 0, 2];

/// The harness's tunnels (OpenFlow ports 10-15) over `va` (1) and `vb` (2).
fn tunnels() -> Vec<TunnelPort> {
    let ep = |kind, remote, key, csum, dst_port| Endpoint {
        key,
        csum,
        dst_port,
        tos: 0x10,
        ttl: 33,
        ..Endpoint::new(kind, LOCAL, remote, LMAC, RMAC)
    };
    let t = |ofport, endpoint, underlay| TunnelPort {
        ofport,
        endpoint,
        underlay,
    };
    vec![
        // Three GRE tunnels sharing addresses: the key picks one.
        t(10, ep(Kind::Gre, REMOTE, KeyMode::None, false, 4789), 1),
        t(11, ep(Kind::Gre, REMOTE, KeyMode::Fixed(5), false, 4789), 1),
        t(12, ep(Kind::Gre, REMOTE, KeyMode::Flow, false, 4789), 1),
        t(13, ep(Kind::Vxlan, REMOTE, KeyMode::Flow, false, 4789), 1),
        // VXLAN on another port, one key only.
        t(
            14,
            ep(Kind::Vxlan, REMOTE_B, KeyMode::Fixed(77), false, 8472),
            2,
        ),
        // GRE sending checksums: decapsulated here, encapsulated in software.
        t(15, ep(Kind::Gre, REMOTE_B, KeyMode::None, true, 4789), 2),
    ]
}

fn tunnel(ofport: u32) -> TunnelPort {
    tunnels()
        .into_iter()
        .find(|t| t.ofport == ofport)
        .expect("a harness tunnel")
}

/// The endpoints the software tier classifies `underlay`'s frames against,
/// in configuration order, and their ports.
fn endpoints_on(underlay: u32) -> (Vec<Endpoint>, Vec<u32>) {
    tunnels()
        .into_iter()
        .filter(|t| t.underlay == underlay)
        .map(|t| (t.endpoint, t.ofport))
        .unzip()
}

/// The far end of `t`: what it sends us is its encapsulation.
fn far_end(t: &TunnelPort) -> Endpoint {
    let e = t.endpoint;
    Endpoint {
        local_ip: e.remote_ip,
        remote_ip: e.local_ip,
        local_mac: e.remote_mac,
        remote_mac: e.local_mac,
        ..e
    }
}

/// `inner` as the far end of `t` sends it with key mode `key_mode`, and
/// without a GRE checksum.
fn from_far(t: &TunnelPort, key_mode: KeyMode, inner: &[u8], ident: u16) -> Vec<u8> {
    from_far_csum(t, key_mode, false, inner, ident)
}

/// [`from_far`], with a GRE checksum if `csum` (received checksums are
/// whatever the sender sends, whatever our end sends).
fn from_far_csum(
    t: &TunnelPort,
    key_mode: KeyMode,
    csum: bool,
    inner: &[u8],
    ident: u16,
) -> Vec<u8> {
    let far = Endpoint {
        key: key_mode,
        csum,
        ..far_end(t)
    };
    let mut out = vec![0u8; inner.len() + 64];
    let n = far
        .encapsulate(inner, 0, ident, 0x5a5a, &mut out)
        .expect("room");
    out.truncate(n);
    out
}

fn inner_udp(sport: u16) -> Vec<u8> {
    FrameBuilder::eth([2, 0, 0, 0, 0, 0x22], [2, 0, 0, 0, 0, 0x11])
        .ipv4([10, 1, 0, 1], [10, 1, 0, 2])
        .udp(sport, 9)
        .payload(&[0x5c; 30])
        .build()
}

fn inner_tcp(sport: u16) -> Vec<u8> {
    FrameBuilder::eth([2, 0, 0, 0, 0, 0x22], [2, 0, 0, 0, 0, 0x11])
        .vlan(7, 1)
        .ipv4([10, 1, 0, 1], [10, 1, 0, 3])
        .tcp(sport, 80)
        .payload(&[0xc3; 100])
        .build()
}

/// Recompute the outer IPv4 header checksum after an edit.
fn fix_ip_csum(f: &mut [u8]) {
    f[24] = 0;
    f[25] = 0;
    let ihl = usize::from(f[14] & 0x0f) * 4;
    let c = checksum::checksum(&f[14..14 + ihl]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
}

/// Records the executor's outputs.
#[derive(Default)]
struct Rec {
    sent: Vec<(u32, Vec<u8>)>,
}

impl OutputSink for Rec {
    fn output(&mut self, port: u32, frame: &[u8], _meta: OutputMeta) {
        self.sent.push((port, frame.to_vec()));
    }
    fn controller(&mut self, _f: &[u8], _m: u16, _o: PacketInOrigin, _meta: OutputMeta) {
        panic!("no controller outputs here");
    }
    fn port_count(&self) -> usize {
        0
    }
    fn port_info(&self, _index: usize) -> Option<PortInfo> {
        None
    }
}

/// What the software tier would do with a frame of an entry.
#[derive(Debug, PartialEq, Eq)]
enum Expect {
    /// Up, untouched (a miss, or a frame the program leaves to software).
    Up,
    Drop,
    /// Sent out of this OpenFlow port; for a tunnel, the inner frame and
    /// the tunnel_id it is encapsulated with.
    Out(u32, Vec<u8>, u64),
}

/// Run `actions` on `frame` received on `in_port` with `tunnel_id`.
fn executor(frame: &[u8], in_port: u32, tunnel_id: u64, actions: &[Action]) -> Expect {
    let parsed = offlow_flow::extract(frame, in_port, &mut Default::default());
    let mut lay = parsed.layout;
    let mut buf = PacketBuf::from_frame(frame, 0);
    let mut rec = Rec::default();
    let mut stats = ExecStats::default();
    let out = execute(actions, &mut buf, &mut lay, in_port, &mut rec, &mut stats);
    if out.verdict != offlow_datapath::Verdict::Done {
        return Expect::Up;
    }
    match rec.sent.as_slice() {
        [] => Expect::Drop,
        [(p, f)] => Expect::Out(*p, f.clone(), out.tunnel_id.unwrap_or(tunnel_id)),
        more => panic!("{} outputs", more.len()),
    }
}

/// An installed entry: its key and action list.
struct Installed {
    key: OffloadKey,
    actions: Vec<Action>,
}

/// The software tier's answer for `frame` arriving on interface port
/// `port` with `entry` installed: classify, decapsulate, look up, execute.
fn reference(frame: &[u8], port: u32, entry: &Installed) -> Expect {
    let (eps, ofports) = endpoints_on(port);
    let (inner, in_port, tunnel_id) = match classify(frame, &eps) {
        Classified::NotTunnel => (frame, port, 0),
        Classified::Tunnel(d) => (&frame[d.inner.clone()], ofports[d.endpoint], d.tunnel_id),
        Classified::Malformed(..) | Classified::UnknownKey => return Expect::Up,
    };
    match OffloadKey::parse(inner, in_port, tunnel_id) {
        Some(k) if k == entry.key => executor(inner, in_port, tunnel_id, &entry.actions),
        _ => Expect::Up,
    }
}

/// Compile and install `actions` for `key`.
fn install(b: &mut XdpBackend, key: OffloadKey, actions: Vec<Action>) -> Installed {
    let p = compile(&key, &actions).unwrap_or_else(|r| panic!("{actions:?}: {r}"));
    b.install(&key.into(), &p)
        .unwrap_or_else(|e| panic!("{p}: {e}"));
    Installed { key, actions }
}

/// A backend on the harness ports with [`tunnels`], recording outcomes.
fn backend() -> XdpBackend {
    common::detached(64, tunnels())
}

/// Run `frame` on `port` and check the program against `expect`; the
/// program's output on a hit.
fn check(b: &XdpBackend, frame: &[u8], port: u32, expect: &Expect) -> Vec<u8> {
    let (ret, out) = b
        .test_run(frame, common::ifindex_of(b, port), 0)
        .expect("test run");
    let outcome = b.take_outcome().unwrap().expect("an outcome");
    match expect {
        Expect::Up => {
            assert_eq!(ret, action::PASS, "{outcome:?}");
            assert_eq!(out, frame, "a frame that goes up is untouched");
        }
        Expect::Drop => assert_eq!((ret, outcome.stat), (action::DROP, "hit_drop")),
        Expect::Out(p, inner, tunnel_id) => {
            assert_eq!(
                (ret, outcome.stat, outcome.target),
                (action::REDIRECT, "hit_port", *p),
                "{outcome:?}"
            );
            match tunnels().iter().find(|t| t.ofport == *p) {
                None => assert_eq!(&out, inner),
                Some(t) => {
                    assert_eq!(out, encapsulation(t, inner, *tunnel_id, &out));
                    if t.endpoint.kind == Kind::Vxlan {
                        // The source port is the software tier's.
                        let sport = u16::from_be_bytes([out[34], out[35]]);
                        assert_eq!(sport, 0xc000 | (entropy(inner) & 0x3fff));
                    }
                }
            }
        }
    }
    out
}

/// What the software tier writes for `inner` out of tunnel `t`, with the
/// identification and VXLAN source port the program chose (`sent`).
fn encapsulation(t: &TunnelPort, inner: &[u8], tunnel_id: u64, sent: &[u8]) -> Vec<u8> {
    assert!(sent.len() > 42, "an encapsulated frame");
    let ident = u16::from_be_bytes([sent[18], sent[19]]);
    let sport = u16::from_be_bytes([sent[34], sent[35]]);
    let mut out = vec![0u8; inner.len() + 64];
    let n = t
        .endpoint
        .encapsulate(inner, tunnel_id, ident, sport, &mut out)
        .expect("room");
    out.truncate(n);
    out
}

fn stat(b: &XdpBackend, name: &str) -> u64 {
    b.stats().unwrap().get(name)
}

#[test]
fn gre_and_vxlan_frames_are_decapsulated_as_classify_picks_them() {
    let Some(ns) = common::Netns::new("oflxdp-tdec") else {
        return;
    };
    ns.run(|| {
        let mut b = backend();
        // (tunnel the far end is, key it sends, the port and key classify
        // gives): GRE without a key, with key 0 (no key), with 5 (the
        // fixed tunnel) and 9 (key=flow); VXLAN with VNI 0x123456.
        let cases = [
            (10, KeyMode::None, 10, 0),
            (10, KeyMode::Fixed(0), 10, 0),
            (11, KeyMode::Fixed(5), 11, 5),
            (12, KeyMode::Fixed(9), 12, 9),
            (13, KeyMode::Fixed(0x12_3456), 13, 0x12_3456),
            (14, KeyMode::Fixed(77), 14, 77),
            (15, KeyMode::None, 15, 0),
        ];
        for (i, (far, sends, port, tunnel_id)) in cases.into_iter().enumerate() {
            let t = tunnel(far);
            let gre = t.endpoint.kind == Kind::Gre;
            for (inner, csum) in [
                (inner_udp(1000 + i as u16), false),
                (inner_tcp(2000 + i as u16), false),
                (inner_udp(3000 + i as u16), gre),
            ] {
                // GRE with and without a checksum, whatever the tunnel
                // sends itself.
                let frame = from_far_csum(&t, sends, csum, &inner, 3);
                let key = OffloadKey::parse(&inner, port, tunnel_id).expect("in class");
                // The reference agrees on where the frame enters.
                let out_port = 3 - t.underlay;
                let e = Installed {
                    key,
                    actions: vec![Action::output(PortNo(out_port))],
                };
                // No entry yet: up, still encapsulated.
                assert_eq!(
                    reference(&frame, t.underlay, &e),
                    Expect::Out(out_port, inner.clone(), tunnel_id)
                );
                check(&b, &frame, t.underlay, &Expect::Up);
                let e = install(&mut b, key, e.actions);
                let want = reference(&frame, t.underlay, &e);
                check(&b, &frame, t.underlay, &want);
                // Counted as the inner frame, on the tunnel port's entry.
                let c = b.remove(&key.into()).unwrap();
                assert_eq!(
                    c,
                    EntryCounters {
                        packets: 1,
                        bytes: inner.len() as u64
                    }
                );
            }
        }
        assert_eq!(stat(&b, "tunnel_decap"), 3 * cases.len() as u64);
        // An ordinary frame of an underlay is still served as before.
        let plain = inner_udp(5);
        let e = install(
            &mut b,
            OffloadKey::parse(&plain, 1, 0).unwrap(),
            vec![Action::output(PortNo(2))],
        );
        check(&b, &plain, 1, &reference(&plain, 1, &e));
        assert_eq!(stat(&b, "drop_internal") + stat(&b, "miss_stale"), 0);
    });
}

#[test]
fn gre_decap_then_vlan_push_is_the_l2_in_l3_gateway() {
    let Some(ns) = common::Netns::new("oflxdp-tgw") else {
        return;
    };
    ns.run(|| {
        let mut b = backend();
        // The source paper's gateway: GRE in, a VLAN tag per tenant key
        // pushed, out of an access port.
        for (far, sends, port, id) in [
            (11, KeyMode::Fixed(5), 11, 5u64),
            (12, KeyMode::Fixed(0xfeed), 12, 0xfeed),
            (10, KeyMode::None, 10, 0),
        ] {
            let t = tunnel(far);
            let inner = inner_udp(4000 + far as u16);
            let frame = from_far(&t, sends, &inner, 11);
            let key = OffloadKey::parse(&inner, port, id).unwrap();
            let e = install(
                &mut b,
                key,
                vec![
                    Action::PushVlan(0x8100),
                    Action::SetField(Field::VlanVid, 0x1000 | (100 + id as u128 % 100)),
                    Action::output(PortNo(2)),
                ],
            );
            let want = reference(&frame, 1, &e);
            let Expect::Out(2, ref tagged, _) = want else {
                panic!("{want:?}")
            };
            assert_eq!(tagged.len(), inner.len() + 4);
            check(&b, &frame, 1, &want);
            // A tagged inner frame with its tag rewritten and TTL decremented.
            let inner = inner_tcp(4100 + far as u16);
            let frame = from_far(&t, sends, &inner, 12);
            let key = OffloadKey::parse(&inner, port, id).unwrap();
            let e = install(
                &mut b,
                key,
                vec![
                    Action::SetField(Field::VlanVid, 0x1000 | 200),
                    Action::DecNwTtl,
                    Action::SetField(Field::Ipv4Src, 0x0b00_0001),
                    Action::output(PortNo(3)),
                ],
            );
            check(&b, &frame, 1, &reference(&frame, 1, &e));
        }
        assert_eq!(stat(&b, "tunnel_decap"), 6);
    });
}

/// Masked entries on tunnel ports: one entry of a `key=flow` tunnel that
/// does not look at the key decapsulates frames of every key, each as the
/// software tier serves it; an output to a `key=flow` tunnel that sends
/// the frame's own key is admitted only when the mask holds all of the
/// key (else the record's fixed key would be sent for every frame).
#[test]
fn masked_entries_on_tunnel_ports() {
    let Some(ns) = common::Netns::new("oflxdp-tmask") else {
        return;
    };
    ns.run(|| {
        let mut b = backend();
        let t = tunnel(12);
        let inner = inner_udp(4500);
        let per_pair = OffloadMask {
            eth_dst: (1 << 48) - 1,
            eth_src: (1 << 48) - 1,
            ..OffloadMask::SHAPE
        };
        let any_key = OffloadMatch::new(&OffloadKey::parse(&inner, 12, 6).unwrap(), per_pair);
        let actions = [Action::DecNwTtl, Action::output(PortNo(2))];
        b.install(&any_key, &compile(&any_key.key, &actions).unwrap())
            .unwrap();
        for (id, sport) in [(6u64, 4500u16), (7, 4501), (0x7777_0000, 4502)] {
            let inner = inner_udp(sport);
            let frame = from_far(&t, KeyMode::Fixed(id as u32), &inner, 3);
            check(&b, &frame, 1, &executor(&inner, 12, id, &actions));
        }
        assert_eq!(b.counters(&any_key).unwrap().packets, 3);
        assert_eq!(stat(&b, "hit_masked"), 3);
        assert_eq!(stat(&b, "tunnel_decap"), 3);

        // Out of tunnel 13 (VXLAN key=flow) with the frame's key.
        let to13 = [Action::output(PortNo(13))];
        let k9 = OffloadKey::parse(&inner_tcp(1), 12, 9).unwrap();
        let other = OffloadMatch::new(&k9, per_pair);
        let p = compile(&other.key, &to13).unwrap();
        assert!(matches!(
            b.install(&other, &p),
            Err(OffloadError::Refused(Refusal::Tunnel(13, _)))
        ));
        // Matching the whole key, it sends that key; a set-field needs no
        // key bits at all.
        let whole_key = OffloadMatch::new(
            &k9,
            OffloadMask {
                tunnel_id: u64::MAX,
                ..per_pair
            },
        );
        b.install(&whole_key, &p).unwrap();
        let set = [
            Action::SetField(Field::TunnelId, 0x42),
            Action::output(PortNo(13)),
        ];
        let from_11 =
            OffloadMatch::new(&OffloadKey::parse(&inner_tcp(1), 11, 5).unwrap(), per_pair);
        b.install(&from_11, &compile(&from_11.key, &set).unwrap())
            .unwrap();
        let inner = inner_tcp(77);
        let frame = from_far(&t, KeyMode::Fixed(9), &inner, 4);
        check(&b, &frame, 1, &executor(&inner, 12, 9, &to13));
        let frame = from_far(&tunnel(11), KeyMode::Fixed(5), &inner, 5);
        check(&b, &frame, 1, &executor(&inner, 11, 5, &set));
        assert_eq!(b.counters(&whole_key).unwrap().packets, 1);
        assert_eq!(b.counters(&from_11).unwrap().packets, 1);
    });
}

#[test]
fn encapsulated_frames_classify_back_to_the_executors_bytes() {
    let Some(ns) = common::Netns::new("oflxdp-tenc") else {
        return;
    };
    ns.run(|| {
        let mut b = backend();
        // (output tunnel, set-field tunnel_id): no key, a fixed key, key=flow
        // from the set-field, VXLAN key=flow and fixed.
        let cases: [(u32, Option<u64>); 7] = [
            (10, None),
            (11, None),
            (15, None),
            (12, Some(0xdead_beef)),
            (13, Some(0xab_cdef)),
            (13, Some(0x1_0000_0042)),
            (14, Some(3)),
        ];
        let mut idents = Vec::new();
        for (i, (to, set)) in cases.into_iter().enumerate() {
            let t = tunnel(to);
            let inner = if i % 2 == 0 {
                inner_udp(6000 + i as u16)
            } else {
                inner_tcp(6000 + i as u16)
            };
            // From an access port (vb, 2) into the tunnel; the underlay is
            // va (1) or vb itself (14).
            let key = OffloadKey::parse(&inner, 3, 0).unwrap();
            let mut actions = vec![Action::SetField(Field::EthDst, 0x0200_0000_0077)];
            if let Some(id) = set {
                actions.push(Action::SetField(Field::TunnelId, id.into()));
            }
            actions.push(Action::output(PortNo(to)));
            let e = install(&mut b, key, actions);
            let want = reference(&inner, 3, &e);
            let out = check(&b, &inner, 3, &want);
            let Expect::Out(_, sent_inner, tunnel_id) = want else {
                panic!()
            };
            idents.push(u16::from_be_bytes([out[18], out[19]]));
            // The far end classifies it back to the executor's bytes and
            // the key the tunnel sends.
            let far = far_end(&t);
            let Classified::Tunnel(d) = classify(&out, &[far]) else {
                panic!("not a tunnel frame: {:?}", classify(&out, &[far]))
            };
            assert_eq!(&out[d.inner.clone()], &sent_inner[..]);
            assert_eq!(d.tunnel_id, u64::from(t.wire_key(tunnel_id).unwrap_or(0)));
            if t.endpoint.kind == Kind::Vxlan {
                // The source port comes from the frame as the software
                // tier hashes it.
                let sport = u16::from_be_bytes([out[34], out[35]]);
                assert_eq!(sport, 0xc000 | (entropy(&sent_inner) & 0x3fff));
            }
        }
        // The identification is a per-CPU counter: the runs of this thread
        // (on one CPU or a few) do not all share one value.
        idents.sort_unstable();
        idents.dedup();
        assert!(idents.len() > 1, "{idents:?}");
        // Decapsulated and encapsulated again: GRE key=flow in, VXLAN
        // key=flow out, the VNI carried over from the GRE key.
        let inner = inner_udp(7000);
        let frame = from_far(&tunnel(12), KeyMode::Fixed(0x4242), &inner, 1);
        let key = OffloadKey::parse(&inner, 12, 0x4242).unwrap();
        let e = install(&mut b, key, vec![Action::output(PortNo(13))]);
        let want = reference(&frame, 1, &e);
        assert_eq!(want, Expect::Out(13, inner.clone(), 0x4242));
        let out = check(&b, &frame, 1, &want);
        let Classified::Tunnel(d) = classify(&out, &[far_end(&tunnel(13))]) else {
            panic!()
        };
        assert_eq!((d.tunnel_id, &out[d.inner]), (0x4242, &inner[..]));
        assert_eq!(stat(&b, "tunnel_encap"), cases.len() as u64 + 1);
        // Back into the tunnel a frame came from stays in software, with
        // the reason.
        let k = OffloadKey::parse(&inner_udp(7001), 12, 1).unwrap();
        let p = compile(&k, &[Action::output(PortNo::IN_PORT)]).unwrap();
        assert_eq!(
            b.install(&k.into(), &p),
            Err(OffloadError::Refused(Refusal::Tunnel(
                12,
                "output back into the ingress tunnel"
            )))
        );
    });
}

/// The attached program on live traffic: GRE frames sent into `vb` arrive
/// on `va` (the underlay of tunnels 10-13), are decapsulated in the kernel
/// and sent back out of `va`; frames of an ordinary flow sent the same way
/// are encapsulated into VXLAN tunnel 13 and sent back out of `va` too.
/// The entries' counters and the program's say it happened in the driver
/// path (the bytes are the test runs' above).
#[test]
fn attached_program_decapsulates_and_encapsulates_live_frames() {
    let Some(ns) = common::Netns::new("oflxdp-tlive") else {
        return;
    };
    ns.run(|| {
        let mut cfg = XdpConfig::new(common::ports()[..1].to_vec(), 16);
        cfg.tunnels = tunnels().into_iter().filter(|t| t.underlay == 1).collect();
        let mut b = XdpBackend::open(&cfg).unwrap_or_else(|e| panic!("{e}"));
        let inner = inner_udp(9000);
        let gre = from_far(&tunnel(12), KeyMode::Fixed(9), &inner, 1);
        let decap = OffloadKey::parse(&inner, 12, 9).unwrap();
        install(&mut b, decap, vec![Action::output(PortNo(1))]);
        let plain = inner_tcp(9001);
        let encap = OffloadKey::parse(&plain, 1, 0).unwrap();
        install(&mut b, encap, vec![Action::output(PortNo(13))]);
        let vb = common::ifindex_by_name("vb");
        for _ in 0..5 {
            common::inject(vb, &gre);
            common::inject(vb, &plain);
        }
        let want = |f: &[u8]| EntryCounters {
            packets: 5,
            bytes: 5 * f.len() as u64,
        };
        // veth delivers through NAPI on the receiving side: wait for it.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let done = |b: &mut XdpBackend| {
            b.counters(&decap.into()).unwrap() == want(&inner)
                && b.counters(&encap.into()).unwrap() == want(&plain)
        };
        while !done(&mut b) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(b.counters(&decap.into()).unwrap(), want(&inner));
        assert_eq!(b.counters(&encap.into()).unwrap(), want(&plain));
        let stats = b.stats().unwrap();
        assert_eq!(
            (stats.get("tunnel_decap"), stats.get("tunnel_encap")),
            (5, 5),
            "{stats:?}"
        );
        assert_eq!(stats.get("hit_port"), 10, "{stats:?}");
        assert_eq!(stats.kernel_drops(), 0, "{stats:?}");
    });
}

/// Ways to spoil a tunnel frame (or make it a shape left to software).
#[derive(Debug, Clone, Copy)]
enum Spoil {
    IpChecksum,
    Fragment,
    IpOptions,
    TotalLength,
    Padding,
    GreVersion,
    GreBadChecksum,
    GreSequence,
    GreProtocol,
    InnerShort,
    VxlanNoI,
    VxlanUdpChecksum,
    VxlanUdpLength,
    UnknownKey,
}

/// A frame of tunnel `far`'s far end spoilt by `s`, and the port it
/// arrives on.
fn spoilt(s: Spoil, inner: &[u8]) -> (Vec<u8>, u32) {
    let gre = tunnel(12);
    let vx = tunnel(13);
    let (mut f, port) = match s {
        Spoil::VxlanNoI | Spoil::VxlanUdpChecksum | Spoil::VxlanUdpLength => {
            (from_far(&vx, KeyMode::Fixed(3), inner, 1), 1)
        }
        Spoil::UnknownKey => (from_far(&tunnel(14), KeyMode::Fixed(78), inner, 1), 2),
        Spoil::GreBadChecksum => (from_far_csum(&gre, KeyMode::Fixed(9), true, inner, 1), 1),
        _ => (from_far(&gre, KeyMode::Fixed(9), inner, 1), 1),
    };
    let set16 =
        |f: &mut Vec<u8>, at: usize, v: u16| f[at..at + 2].copy_from_slice(&v.to_be_bytes());
    match s {
        Spoil::IpChecksum => f[24] ^= 0x40,
        Spoil::Fragment => {
            set16(&mut f, 20, 0x2000);
            fix_ip_csum(&mut f);
        }
        Spoil::IpOptions => {
            // Four bytes of options (NOPs and an end): sound, but not a
            // shape served here.
            f.splice(34..34, [1, 1, 1, 0]);
            f[14] = 0x46;
            let total = (f.len() - 14) as u16;
            set16(&mut f, 16, total);
            fix_ip_csum(&mut f);
        }
        Spoil::TotalLength => {
            let total = u16::from_be_bytes([f[16], f[17]]) + 4;
            set16(&mut f, 16, total);
            fix_ip_csum(&mut f);
        }
        Spoil::Padding => f.extend_from_slice(&[0; 4]),
        Spoil::GreVersion => f[35] |= 1,
        Spoil::GreBadChecksum => {
            // The last byte of the payload changed under the checksum.
            let last = f.len() - 1;
            f[last] ^= 0x5a;
        }
        Spoil::GreSequence => {
            // K and S, a sequence number behind the key.
            set16(&mut f, 34, 0x3000);
            f.splice(42..42, [0, 0, 0, 1]);
            let total = (f.len() - 14) as u16;
            set16(&mut f, 16, total);
            fix_ip_csum(&mut f);
        }
        Spoil::GreProtocol => set16(&mut f, 36, 0x0800),
        Spoil::InnerShort => {
            f.truncate(42 + 10);
            let total = (f.len() - 14) as u16;
            set16(&mut f, 16, total);
            fix_ip_csum(&mut f);
        }
        Spoil::VxlanNoI => f[42] = 0,
        Spoil::VxlanUdpChecksum => {
            // A valid UDP checksum: sound, verified by software only.
            let pseudo = checksum::pseudo_ipv4(REMOTE, LOCAL, 17, (f.len() - 34) as u16);
            let c = !checksum::fold(checksum::sum(&f[34..], pseudo));
            set16(&mut f, 40, c);
        }
        Spoil::VxlanUdpLength => {
            let l = u16::from_be_bytes([f[38], f[39]]) - 2;
            set16(&mut f, 38, l);
        }
        Spoil::UnknownKey => {}
    }
    (f, port)
}

#[test]
fn malformed_and_unserved_tunnel_frames_go_up_untouched() {
    let Some(ns) = common::Netns::new("oflxdp-tbad") else {
        return;
    };
    ns.run(|| {
        let mut b = backend();
        let inner = inner_udp(8000);
        // Entries for every key the inner frame could be taken with, so a
        // frame the program wrongly decapsulated would hit.
        for (port, id) in [(12, 9), (13, 3), (14, 78), (14, 77)] {
            let k = OffloadKey::parse(&inner, port, id).unwrap();
            install(&mut b, k, vec![Action::output(PortNo(3))]);
        }
        // And an ordinary entry for the outer flow of a VXLAN frame on
        // vb's non-standard port: a tunnel's frame is never an ordinary
        // frame of its underlay.
        let outer = from_far(&tunnel(14), KeyMode::Fixed(78), &inner, 1);
        let ok = OffloadKey::parse(&outer, 2, 0).expect("UDP to 8472 is in the class");
        install(&mut b, ok, vec![Action::output(PortNo(1))]);
        let all = [
            Spoil::IpChecksum,
            Spoil::Fragment,
            Spoil::IpOptions,
            Spoil::TotalLength,
            Spoil::Padding,
            Spoil::GreVersion,
            Spoil::GreBadChecksum,
            Spoil::GreSequence,
            Spoil::GreProtocol,
            Spoil::InnerShort,
            Spoil::VxlanNoI,
            Spoil::VxlanUdpChecksum,
            Spoil::VxlanUdpLength,
            Spoil::UnknownKey,
        ];
        let before = stat(&b, "up_tunnel") + stat(&b, "miss_not_class");
        for s in all {
            let (f, port) = spoilt(s, &inner);
            let (eps, _) = endpoints_on(port);
            let c = classify(&f, &eps);
            // Addressed to a tunnel, whatever classify makes of it: the
            // sound ones software decapsulates, the rest it drops.
            let sound = matches!(
                s,
                Spoil::IpOptions | Spoil::Padding | Spoil::GreSequence | Spoil::VxlanUdpChecksum
            );
            assert_eq!(matches!(c, Classified::Tunnel(_)), sound, "{s:?}: {c:?}");
            assert!(!matches!(c, Classified::NotTunnel), "{s:?}");
            check(&b, &f, port, &Expect::Up);
        }
        assert_eq!(
            stat(&b, "up_tunnel") + stat(&b, "miss_not_class") - before,
            all.len() as u64
        );
        assert_eq!(stat(&b, "tunnel_decap"), 0);
        // A decapsulated frame whose checksum looks partial goes up too.
        let mut partial = inner_udp(8001);
        let l = partial.len();
        let pseudo = checksum::pseudo_ipv4([10, 1, 0, 1], [10, 1, 0, 2], 17, (l - 34) as u16);
        partial[40..42].copy_from_slice(&checksum::fold(pseudo).to_be_bytes());
        let k = OffloadKey::parse(&partial, 12, 9).unwrap();
        install(&mut b, k, vec![Action::output(PortNo(3))]);
        let f = from_far(&tunnel(12), KeyMode::Fixed(9), &partial, 1);
        check(&b, &f, 1, &Expect::Up);
        assert_eq!(stat(&b, "up_tunnel_partial"), 1);
        assert_eq!(stat(&b, "drop_internal") + stat(&b, "miss_stale"), 0);
    });
}

/// A random case: an inner frame, the tunnel its far end is and the key
/// it sends, maybe a spoiling, and an entry (for the key classify gives,
/// or another) with a short action list.
#[derive(Debug, Clone)]
struct Case {
    far: u32,
    /// The far end sends GRE checksums.
    csum: bool,
    key: u32,
    keyless: bool,
    tcp: bool,
    sport: u16,
    spoil: Option<u8>,
    other_entry: bool,
    acts: Vec<u8>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        (10u32..16, any::<bool>()),
        prop_oneof![Just(0u32), Just(5), Just(77), Just(78), any::<u32>()],
        any::<bool>(),
        any::<bool>(),
        any::<u16>(),
        prop_oneof![4 => Just(None), 1 => (0u8..14).prop_map(Some)],
        prop::bool::weighted(0.15),
        prop::collection::vec(0u8..8, 0..4),
    )
        .prop_map(
            |((far, csum), key, keyless, tcp, sport, spoil, other_entry, acts)| Case {
                far,
                csum,
                key,
                keyless,
                tcp,
                sport,
                spoil,
                other_entry,
                acts,
            },
        )
}

/// The action list of `c`, ending in an output to an interface or a
/// tunnel.
fn actions(c: &Case, tagged: bool) -> Vec<Action> {
    let mut v = Vec::new();
    for a in &c.acts {
        v.push(match a {
            0 => Action::SetField(Field::EthSrc, 0x0200_0000_0099),
            1 => Action::DecNwTtl,
            2 => Action::SetField(Field::Ipv4Dst, 0x0a09_0909),
            3 if !tagged => Action::PushVlan(0x8100),
            3 => Action::PopVlan,
            4 => Action::SetField(Field::TunnelId, u128::from(c.sport)),
            5 => Action::SetField(Field::IpDscp, 12),
            6 => Action::SetField(Field::EthDst, 0x0200_0000_0098),
            _ => Action::SetNwTtl(9),
        });
    }
    // Only the last TTL operation (the compiler takes one).
    let ttl = |a: &Action| matches!(a, Action::DecNwTtl | Action::SetNwTtl(_));
    if let Some(last) = v.iter().rposition(ttl) {
        let mut i = 0;
        v.retain(|a| {
            i += 1;
            i - 1 == last || !ttl(a)
        });
    }
    let out = [2u32, 3, 10, 11, 12, 13, 14, 15][c.sport as usize % 8];
    v.push(Action::output(PortNo(out)));
    v
}

fn run_case(b: &mut XdpBackend, c: &Case, hits: &mut u32) -> Result<(), TestCaseError> {
    let mut left = Vec::new();
    b.all_counters(&mut |k, _| left.push(*k));
    b.remove_batch(&left);
    let inner = if c.tcp {
        inner_tcp(c.sport)
    } else {
        inner_udp(c.sport)
    };
    let t = tunnel(c.far);
    let sends = if c.keyless {
        KeyMode::None
    } else {
        KeyMode::Fixed(c.key)
    };
    let (frame, port) = match c.spoil {
        Some(s) => spoilt(
            [
                Spoil::IpChecksum,
                Spoil::Fragment,
                Spoil::IpOptions,
                Spoil::TotalLength,
                Spoil::Padding,
                Spoil::GreVersion,
                Spoil::GreBadChecksum,
                Spoil::GreSequence,
                Spoil::GreProtocol,
                Spoil::InnerShort,
                Spoil::VxlanNoI,
                Spoil::VxlanUdpChecksum,
                Spoil::VxlanUdpLength,
                Spoil::UnknownKey,
            ][s as usize],
            &inner,
        ),
        None => (
            from_far_csum(&t, sends, c.csum, &inner, c.sport),
            t.underlay,
        ),
    };
    // The entry: for where classify says the inner frame enters, or for
    // the same inner frame on another tunnel.
    let (eps, ofports) = endpoints_on(port);
    let (in_port, id) = match (classify(&frame, &eps), c.other_entry) {
        (Classified::Tunnel(d), false) => (ofports[d.endpoint], d.tunnel_id),
        _ => (c.far, u64::from(c.key)),
    };
    let Some(key) = OffloadKey::parse(&inner, in_port, id) else {
        return Ok(());
    };
    let acts = actions(c, key.vlan.is_some());
    let Ok(p) = compile(&key, &acts) else {
        return Ok(());
    };
    if b.install(&key.into(), &p).is_err() {
        // Refused (back into the ingress tunnel): software.
        return Ok(());
    }
    let e = Installed { key, actions: acts };
    // Every spoilt frame is malformed or a shape left to software
    // (malformed_and_unserved_tunnel_frames_go_up_untouched checks which).
    let want = match c.spoil {
        Some(_) => Expect::Up,
        None => reference(&frame, port, &e),
    };
    *hits += u32::from(want != Expect::Up);
    check(b, &frame, port, &want);
    Ok(())
}

#[test]
fn random_tunnel_frames_agree_with_the_software_tier() {
    let Some(ns) = common::Netns::new("oflxdp-trand") else {
        return;
    };
    let cases: u32 = std::env::var("OFFLOW_XDP_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    ns.run(|| {
        let b = std::cell::RefCell::new(backend());
        let hits = std::cell::Cell::new(0u32);
        let mut runner = TestRunner::new(Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        });
        let r = runner.run(&case(), |c| {
            let mut h = hits.get();
            let r = run_case(&mut b.borrow_mut(), &c, &mut h);
            hits.set(h);
            r
        });
        if let Err(e) = r {
            panic!("{e}");
        }
        let b = b.into_inner();
        assert!(hits.get() > cases / 5, "only {} hits", hits.get());
        assert!(stat(&b, "tunnel_decap") > 0 && stat(&b, "tunnel_encap") > 0);
        assert_eq!(stat(&b, "drop_internal") + stat(&b, "miss_stale"), 0);
    });
}
