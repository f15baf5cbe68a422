//! The XDP program against the userspace executor: random entries
//! (compiled from random lists of offloadable actions) and random frames
//! (in the class and around it), each run through the program with
//! `BPF_PROG_TEST_RUN` and through `offlow_datapath::execute` on the
//! entry's action list. They must agree on the verdict (the program's
//! debug record names the port of a redirect) and on every output byte; a
//! miss returns the frame unchanged with the port's miss verdict, and a
//! frame outside the class never hits. Some TCP/UDP frames carry a
//! *partial* checksum (the folded pseudo-header sum a Linux sender with
//! checksum offload leaves for the NIC): the reference finishes it as the
//! AF_PACKET receive path does (`offlow_io::csum::finish_partial`) before
//! the executor runs, and the program must send out the same bytes. Some
//! entries are masked (random masks over the fields an [`OffloadMask`]
//! has): such an entry, compiled from its own flow's key, serves every
//! frame it matches under the mask, and must serve each exactly as the
//! executor runs the entry's actions on that frame; often the frame is of
//! a *near* flow (the entry's shape and MACs, other IPv4 addresses, ports
//! and ToS), which the mask decides. Privileged: skipped with a notice
//! when not root.
//!
//! The TC program (`Hook::Tc`) runs the same cases, as far as a test run
//! of a socket buffer can show them: such a buffer carries no VLAN
//! metadata, so a tagged frame is outside that program's class (it goes
//! up) and a tag it pushes is not in the bytes (the expected frame is
//! compared without it; the live tests on veths check tags); and its
//! checksum state is "none", where the program leaves a partial checksum
//! to be finished downstream by the kernel, so partial frames are not
//! compared here (the live tests send them).

#[allow(dead_code)] // each test file uses a subset of the harness
mod common;

use offlow_datapath::{execute, ExecStats, OutputMeta, OutputSink, PacketBuf, PortInfo};
use offlow_flow::Field;
use offlow_io::csum;
use offlow_offload::xdp::{action, tc_action, Hook, XdpBackend};
use offlow_offload::{
    compile, EntryCounters, OffloadBackend, OffloadKey, OffloadMask, OffloadMatch,
};
use offlow_pipeline::{Action, PacketInOrigin, PortNo};
use offlow_testkit::{Checksum, FrameBuilder};
use offlow_wire::checksum;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};

/// Records the executor's outputs.
#[derive(Default)]
struct Rec {
    sent: Vec<(u32, Vec<u8>)>,
    to_controller: usize,
}

impl OutputSink for Rec {
    fn output(&mut self, port: u32, frame: &[u8], _meta: OutputMeta) {
        self.sent.push((port, frame.to_vec()));
    }
    fn controller(&mut self, _f: &[u8], _m: u16, _o: PacketInOrigin, _meta: OutputMeta) {
        self.to_controller += 1;
    }
    fn port_count(&self) -> usize {
        0
    }
    fn port_info(&self, _index: usize) -> Option<PortInfo> {
        None
    }
}

/// The transport of a generated frame.
#[derive(Debug, Clone, Copy)]
enum L4 {
    Tcp,
    Udp,
    /// UDP with checksum 0 ("none", RFC 768).
    UdpNoCsum,
    /// UDP to the VXLAN port: outside the class.
    Vxlan,
    Icmp,
    Sctp,
    Gre,
    Other(u8),
}

/// A generated frame: mostly in the class, with knobs that take it out.
#[derive(Debug, Clone)]
struct Spec {
    dst: u8,
    src: u8,
    /// 0 untagged, 1 802.1Q, 2 802.1ad, 3 QinQ (outside the class).
    tags: u8,
    tci: u16,
    ip_src: u32,
    ip_dst: u32,
    tos: u8,
    ttl: u8,
    /// 0 none, 1 DF, 2 MF, 3 a non-zero offset (2 and 3: fragments).
    frag: u8,
    options: bool,
    l4: L4,
    sport: u16,
    dport: u16,
    payload: usize,
    pad60: bool,
    /// Bytes cut off the end (a runt; the frame keeps at least 14).
    cut: usize,
    /// An IPv4 total length too short for the transport header.
    short_total: bool,
    /// A TCP/UDP checksum left partial (Checksum::Partial): what a veth
    /// peer with transmit checksum offload sends.
    partial: bool,
}

impl Spec {
    fn build(&self) -> Vec<u8> {
        let mut b = FrameBuilder::eth([2, 0, 0, 0, 0, self.dst], [2, 0, 0, 0, 0, self.src]);
        b = match self.tags {
            0 => b,
            1 => b.tag(0x8100, self.tci),
            2 => b.tag(0x88a8, self.tci),
            _ => b.tag(0x88a8, self.tci).tag(0x8100, self.tci ^ 0x0f0f),
        };
        b = b
            .ipv4(self.ip_src.to_be_bytes(), self.ip_dst.to_be_bytes())
            .tos(self.tos)
            .ttl(self.ttl);
        b = match self.frag {
            0 => b,
            1 => b.dont_frag(),
            2 => b.fragment(0, true),
            _ => b.fragment(8, false),
        };
        if self.options {
            b = b.ip_options(&[1, 1, 1, 0]);
        }
        let csum = if self.partial {
            Checksum::Partial
        } else {
            Checksum::Valid
        };
        b = match self.l4 {
            L4::Tcp => b.tcp(self.sport, self.dport).l4_checksum(csum),
            L4::Udp => b.udp(self.sport, self.dport).l4_checksum(csum),
            L4::UdpNoCsum => b.udp(self.sport, self.dport).l4_checksum(Checksum::Zero),
            L4::Vxlan => b.udp(self.sport, 4789),
            L4::Icmp => b.icmpv4((self.sport >> 8) as u8, self.sport as u8, 7),
            L4::Sctp => b.sctp(self.sport, self.dport),
            L4::Gre => b.ip_payload(47),
            L4::Other(p) => b.ip_payload(p),
        };
        let pattern: Vec<u8> = (0..self.payload).map(|i| (i * 7 + 3) as u8).collect();
        b = b.payload(&pattern);
        if self.pad60 {
            b = b.pad_to_with(60, 0xa5);
        }
        if self.short_total {
            // 20 + 6: the UDP/TCP/ICMP header does not fit in the packet.
            b = b.ip_total_len(26 + if self.options { 4 } else { 0 });
        }
        let mut f = b.build();
        let keep = f.len().saturating_sub(self.cut).max(14);
        f.truncate(keep);
        f
    }

    /// The nearest frame of the class: what an entry for this frame's
    /// flow would have been installed from.
    fn in_class(&self) -> Spec {
        Spec {
            tags: if self.tags == 3 { 1 } else { self.tags },
            frag: self.frag.min(1),
            options: false,
            l4: match self.l4 {
                L4::Vxlan => L4::Udp,
                L4::Sctp | L4::Gre => L4::Tcp,
                l => l,
            },
            cut: 0,
            short_total: false,
            ..self.clone()
        }
    }
}

fn addr() -> impl Strategy<Value = u32> {
    prop_oneof![
        Just(0u32),
        Just(u32::MAX),
        Just(0x0a00_0001),
        Just(0x0a00_0002),
        Just(0xffff_0000),
        any::<u32>()
    ]
}

fn port16() -> impl Strategy<Value = u16> {
    prop_oneof![
        Just(0u16),
        Just(u16::MAX),
        Just(80),
        Just(1000),
        any::<u16>()
    ]
}

fn spec() -> impl Strategy<Value = Spec> {
    let l4 = prop_oneof![
        8 => Just(L4::Tcp),
        8 => Just(L4::Udp),
        2 => Just(L4::UdpNoCsum),
        1 => Just(L4::Vxlan),
        3 => Just(L4::Icmp),
        1 => Just(L4::Sctp),
        1 => Just(L4::Gre),
        2 => any::<u8>().prop_map(L4::Other),
    ];
    let rare = |p: u32| prop::bool::weighted(f64::from(p) / 100.0);
    (
        (
            1u8..4,
            1u8..4,
            prop_oneof![10 => Just(0u8), 8 => Just(1u8), 2 => Just(2u8), 1 => Just(3u8)],
            any::<u16>(),
        ),
        (
            addr(),
            addr(),
            any::<u8>(),
            prop_oneof![Just(0u8), Just(1), Just(2), Just(64), Just(255)],
        ),
        (
            prop_oneof![12 => Just(0u8), 4 => Just(1u8), 1 => Just(2u8), 1 => Just(3u8)],
            rare(4),
        ),
        (
            l4,
            port16(),
            port16(),
            // Long segments too: the program sums a partial checksum's
            // segment in chunks of 512, 64, 4 and the last bytes.
            prop_oneof![6 => 0usize..40, 1 => 0usize..1500],
            any::<bool>(),
        ),
        (
            prop_oneof![16 => Just(0usize), 1 => 1usize..30],
            rare(3),
            prop::bool::weighted(0.3),
        ),
    )
        .prop_map(
            |(
                (dst, src, tags, tci),
                (ip_src, ip_dst, tos, ttl),
                (frag, options),
                (l4, sport, dport, payload, pad60),
                (cut, short_total, partial),
            )| Spec {
                dst,
                src,
                tags,
                tci,
                ip_src,
                ip_dst,
                tos,
                ttl,
                frag,
                options,
                l4,
                sport,
                dport,
                payload,
                pad60,
                cut,
                short_total,
                partial,
            },
        )
}

/// An action before the key says which header it applies to.
#[derive(Debug, Clone, Copy)]
enum Act {
    EthSrc(u8),
    EthDst(u8),
    Ipv4Src(u32),
    Ipv4Dst(u32),
    Dscp(u8),
    Ecn(u8),
    L4Src(u16),
    L4Dst(u16),
    Vid(u16),
    Pcp(u8),
    SetTtl(u8),
    DecTtl,
    Push(bool),
    Pop,
    /// Pop, then push (a new outer tag in place of the frame's).
    Retag(bool),
    /// 0: IN_PORT; 1, 2: one of the other ports; 3: the ingress port by
    /// number (refused by compile).
    Out(u8),
}

fn act() -> impl Strategy<Value = Act> {
    prop_oneof![
        1 => any::<u8>().prop_map(Act::EthSrc),
        1 => any::<u8>().prop_map(Act::EthDst),
        1 => addr().prop_map(Act::Ipv4Src),
        1 => addr().prop_map(Act::Ipv4Dst),
        1 => (0u8..64).prop_map(Act::Dscp),
        1 => (0u8..4).prop_map(Act::Ecn),
        1 => port16().prop_map(Act::L4Src),
        1 => port16().prop_map(Act::L4Dst),
        1 => (0u16..4096).prop_map(Act::Vid),
        1 => (0u8..8).prop_map(Act::Pcp),
        1 => prop_oneof![Just(0u8), Just(1), any::<u8>()].prop_map(Act::SetTtl),
        3 => Just(Act::DecTtl),
        1 => any::<bool>().prop_map(Act::Push),
        1 => Just(Act::Pop),
        1 => any::<bool>().prop_map(Act::Retag),
    ]
}

/// A list of 0-5 rewrites, mostly ending in one output.
fn acts() -> impl Strategy<Value = Vec<Act>> {
    (
        prop::collection::vec(act(), 0..5),
        prop_oneof![
            2 => Just(None),
            4 => Just(Some(0u8)),
            8 => (1u8..3).prop_map(Some),
            1 => Just(Some(3u8)),
        ],
    )
        .prop_map(|(mut v, out)| {
            if let Some(p) = out {
                v.push(Act::Out(p));
            }
            v
        })
}

/// The actions of `acts` for a flow of `key`. With `fix`, the list is made
/// likelier to compile: an untagged frame gets a tag pushed before VLAN
/// actions need one, port rewrites are left out where the protocol has no
/// ports, and only the last TTL operation is kept.
fn concrete(acts: &[Act], key: &OffloadKey, fix: bool) -> Vec<Action> {
    let (ip_proto, in_port) = (key.ip_proto, key.in_port);
    let mut acts = acts.to_vec();
    if fix {
        if ip_proto != 6 && ip_proto != 17 {
            acts.retain(|a| !matches!(a, Act::L4Src(_) | Act::L4Dst(_)));
        }
        let ttl = |a: &Act| matches!(a, Act::SetTtl(_) | Act::DecTtl);
        if let Some(last) = acts.iter().rposition(ttl) {
            let mut i = 0;
            acts.retain(|a| {
                i += 1;
                i - 1 == last || !ttl(a)
            });
        }
        let first_vlan = acts.iter().position(|a| {
            matches!(
                a,
                Act::Push(_) | Act::Pop | Act::Vid(_) | Act::Pcp(_) | Act::Retag(_)
            )
        });
        if let Some(i) = first_vlan {
            if key.vlan.is_none() && !matches!(acts[i], Act::Push(_)) {
                acts.insert(i, Act::Push(false));
            }
        }
    }
    let tcp = ip_proto == 6;
    let tpid = |ad: bool| if ad { 0x88a8 } else { 0x8100 };
    acts.iter()
        .flat_map(|a| match *a {
            Act::Retag(ad) => vec![Action::PopVlan, Action::PushVlan(tpid(ad))],
            a => vec![one(a, tcp, in_port)],
        })
        .collect()
}

fn one(a: Act, tcp: bool, in_port: u32) -> Action {
    let mac = |b: u8| 0x0200_0000_0000u128 | 0x99_00 | u128::from(b);
    let tpid = |ad: bool| if ad { 0x88a8 } else { 0x8100 };
    match a {
        Act::EthSrc(b) => Action::SetField(Field::EthSrc, mac(b)),
        Act::EthDst(b) => Action::SetField(Field::EthDst, mac(b)),
        Act::Ipv4Src(v) => Action::SetField(Field::Ipv4Src, v.into()),
        Act::Ipv4Dst(v) => Action::SetField(Field::Ipv4Dst, v.into()),
        Act::Dscp(v) => Action::SetField(Field::IpDscp, v.into()),
        Act::Ecn(v) => Action::SetField(Field::IpEcn, v.into()),
        Act::L4Src(v) => {
            Action::SetField(if tcp { Field::TcpSrc } else { Field::UdpSrc }, v.into())
        }
        Act::L4Dst(v) => {
            Action::SetField(if tcp { Field::TcpDst } else { Field::UdpDst }, v.into())
        }
        Act::Vid(v) => Action::SetField(Field::VlanVid, (0x1000 | v).into()),
        Act::Pcp(v) => Action::SetField(Field::VlanPcp, v.into()),
        Act::SetTtl(t) => Action::SetNwTtl(t),
        Act::DecTtl => Action::DecNwTtl,
        Act::Push(ad) => Action::PushVlan(tpid(ad)),
        Act::Pop => Action::PopVlan,
        Act::Retag(_) => unreachable!("expanded by concrete"),
        Act::Out(0) => Action::output(PortNo::IN_PORT),
        Act::Out(3) => Action::output(PortNo(in_port)),
        Act::Out(k) => Action::output(PortNo((in_port - 1 + u32::from(k)) % 3 + 1)),
    }
}

/// Which entry the table holds when the frame arrives.
#[derive(Debug, Clone, Copy)]
enum EntryFor {
    /// The frame's flow (or, for a frame outside the class, the flow of
    /// the nearest frame of the class).
    Same,
    /// Another flow.
    Other,
    /// The frame's flow with the other spec's IPv4 addresses, ToS and
    /// ports: a frame a masked entry may or may not match.
    Near,
    /// None.
    Empty,
}

/// What the executor says should happen to the frame.
#[derive(Debug, PartialEq, Eq)]
enum Expect {
    Up,
    Drop,
    Tx(Vec<u8>),
    Redirect(u32, Vec<u8>),
}

/// Whether `frame` (of the offloadable class) carries a partial TCP/UDP
/// checksum as the program judges it: the field equals the folded
/// pseudo-header sum of the IPv4 header's addresses, protocol and L4
/// length (UDP's 0, "none", excepted).
fn looks_partial(frame: &[u8]) -> bool {
    let l3 = match u16::from_be_bytes([frame[12], frame[13]]) {
        0x0800 => 14,
        _ => 18,
    };
    let ip = &frame[l3..];
    let proto = ip[9];
    let field = match proto {
        6 => 16,
        17 => 6,
        _ => return false,
    };
    let seg = u16::from_be_bytes([ip[2], ip[3]]) - 20;
    let c = u16::from_be_bytes([ip[20 + field], ip[21 + field]]);
    let pseudo = checksum::pseudo_ipv4(
        [ip[12], ip[13], ip[14], ip[15]],
        [ip[16], ip[17], ip[18], ip[19]],
        proto,
        seg,
    );
    !(proto == 17 && c == 0) && c == checksum::fold(pseudo)
}

/// What the switch does with `frame` served by `actions` in software: an
/// AF_PACKET port finishes a partial checksum on receipt
/// (`csum::finish_partial`, the kernel flags it), then the executor runs.
fn oracle(frame: &[u8], in_port: u32, actions: &[Action]) -> Expect {
    let mut frame = frame.to_vec();
    if looks_partial(&frame) {
        assert!(csum::finish_partial(&mut frame), "a class frame finishes");
    }
    let frame = frame.as_slice();
    let parsed = offlow_flow::extract(frame, in_port, &mut Default::default());
    let mut lay = parsed.layout;
    let mut buf = PacketBuf::from_frame(frame, 0);
    let mut rec = Rec::default();
    let mut stats = ExecStats::default();
    let out = execute(actions, &mut buf, &mut lay, in_port, &mut rec, &mut stats);
    assert_eq!(rec.to_controller, 0);
    if out.verdict != offlow_datapath::Verdict::Done {
        return Expect::Up;
    }
    match rec.sent.as_slice() {
        [] => Expect::Drop,
        [(p, f)] if *p == in_port => Expect::Tx(f.clone()),
        [(p, f)] => Expect::Redirect(*p, f.clone()),
        more => panic!("compile admitted a list with {} outputs", more.len()),
    }
}

#[derive(Debug)]
struct Case {
    spec: Spec,
    in_port: u32,
    acts: Vec<Act>,
    entry: EntryFor,
    other: Spec,
    /// Nudge the list towards one that compiles ([`concrete`]).
    fix: bool,
    /// Install the entry under this mask (`None`: exact).
    mask: Option<OffloadMask>,
}

/// Masks that are often coarse: each field not at all, wholly, or some
/// bits; or a per-pair rule's (MACs), or only the fields always exact.
fn mask() -> impl Strategy<Value = Option<OffloadMask>> {
    fn bits(all: u64) -> impl Strategy<Value = u64> {
        prop_oneof![
            2 => Just(0u64),
            2 => Just(all),
            1 => any::<u64>().prop_map(move |v| v & all),
        ]
    }
    const MAC: u64 = (1 << 48) - 1;
    let m = (
        (bits(MAC), bits(MAC)),
        (bits(0xffff_ffff), bits(0xffff_ffff)),
        (bits(0x3f), bits(0x3)),
        (bits(0xffff), bits(0xffff)),
    )
        .prop_map(|((d, s), (is, id), (dscp, ecn), (sp, dp))| OffloadMask {
            eth_dst: d,
            eth_src: s,
            ipv4_src: is as u32,
            ipv4_dst: id as u32,
            ip_dscp: dscp as u8,
            ip_ecn: ecn as u8,
            tp_src: sp as u16,
            tp_dst: dp as u16,
            tunnel_id: 0,
        });
    let per_pair = OffloadMask {
        eth_dst: MAC,
        eth_src: MAC,
        ..OffloadMask::SHAPE
    };
    prop_oneof![
        4 => Just(None),
        2 => m.prop_map(Some),
        2 => Just(Some(per_pair)),
        2 => Just(Some(OffloadMask::SHAPE)),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    (
        spec(),
        1u32..4,
        acts(),
        prop_oneof![
            7 => Just(EntryFor::Same),
            2 => Just(EntryFor::Other),
            3 => Just(EntryFor::Near),
            1 => Just(EntryFor::Empty),
        ],
        spec(),
        prop::bool::weighted(0.8),
        mask(),
    )
        .prop_map(|(spec, in_port, acts, entry, other, fix, mask)| Case {
            spec,
            in_port,
            acts,
            entry,
            other,
            fix,
            mask,
        })
}

/// Tallies, to show the generator reaches every outcome.
#[derive(Default, Debug)]
struct Seen {
    hits: u32,
    misses: u32,
    outside_class: u32,
    refused: u32,
    ttl_up: u32,
    /// Hits on a frame with a partial checksum (finished by the program).
    partial_hits: u32,
    /// Hits on masked entries, and those of a frame whose key differs
    /// from the entry's flow's.
    masked_hits: u32,
    masked_other_hits: u32,
    /// Cases the hook cannot be compared on (TC: partial checksums).
    skipped: u32,
}

/// `frame` without its outer VLAN tag, if it has one.
fn untagged(frame: &[u8]) -> Vec<u8> {
    match u16::from_be_bytes([frame[12], frame[13]]) {
        0x8100 | 0x88a8 => [&frame[..12], &frame[16..]].concat(),
        _ => frame.to_vec(),
    }
}

fn run_case(b: &mut XdpBackend, c: &Case, seen: &mut Seen) -> Result<(), TestCaseError> {
    let tc = b.hook() == Hook::Tc;
    // A failed case (while shrinking) may have left its entry behind.
    let mut left = Vec::new();
    b.all_counters(&mut |k, _| left.push(*k));
    b.remove_batch(&left);
    let frame = c.spec.build();
    // A socket buffer holds at least an Ethernet header, and an IPv4 one
    // its IPv4 header (the test run refuses less: EINVAL).
    let partial = OffloadKey::parse(&frame, c.in_port, 0).is_some() && looks_partial(&frame);
    let runt = frame.len() < 14 || (frame[12..14] == [0x08, 0x00] && frame.len() < 34);
    if tc && (runt || partial) {
        // Not a comparison: rejected, so it does not count as a case.
        seen.skipped += 1;
        return Err(TestCaseError::reject("not comparable at TC"));
    }
    // At TC, a tag in the bytes is a second tag: outside the class.
    let key = OffloadKey::parse(&frame, c.in_port, 0).filter(|k| !tc || k.vlan.is_none());
    let entry_spec = match c.entry {
        EntryFor::Same => Some(c.spec.in_class()),
        EntryFor::Other => Some(c.other.in_class()),
        EntryFor::Near => Some(Spec {
            ip_src: c.other.ip_src,
            ip_dst: c.other.ip_dst,
            tos: c.other.tos,
            sport: c.other.sport,
            dport: c.other.dport,
            ..c.spec.in_class()
        }),
        EntryFor::Empty => None,
    };
    let entry_key = entry_spec.and_then(|s| OffloadKey::parse(&s.build(), c.in_port, 0));
    let mut installed = None;
    if let Some(k) = entry_key {
        let actions = concrete(&c.acts, &k, c.fix);
        let m = match c.mask {
            Some(mask) => OffloadMatch::new(&k, mask),
            None => OffloadMatch::exact(k),
        };
        match compile(&k, &actions) {
            Ok(p) => {
                b.install(&m, &p)
                    .map_err(|e| TestCaseError::fail(format!("install: {e}")))?;
                installed = Some((m, k, actions));
            }
            Err(_) => seen.refused += 1,
        }
    }
    if key.is_none() {
        seen.outside_class += 1;
    }
    let hit = match (&key, &installed) {
        (Some(k), Some((m, _, _))) => m.matches(k),
        _ => false,
    };
    let expect = match (&installed, hit) {
        (Some((_, _, actions)), true) => oracle(&frame, c.in_port, actions),
        _ => Expect::Up,
    };
    let masked_other = match (&key, &installed) {
        (Some(k), Some((m, ik, _))) => hit && !m.is_exact() && k != ik,
        _ => false,
    };
    let partial = key.is_some() && looks_partial(&frame);
    let ifindex = common::ifindex_of(b, c.in_port);
    let (ret, out) = b
        .test_run(&frame, ifindex, 0)
        .map_err(|e| TestCaseError::fail(format!("test run of {} bytes: {e}", frame.len())))?;
    let outcome = b
        .take_outcome()
        .map_err(|e| TestCaseError::fail(e.to_string()))?
        .ok_or_else(|| TestCaseError::fail("no outcome recorded"))?;
    let (stat, target) = (outcome.stat, outcome.target);
    // The program's parser declines exactly the frames the reference
    // parser (OffloadKey::parse) declines.
    prop_assert_eq!(
        outcome.declined_at != 0,
        key.is_none(),
        "the XDP parser and OffloadKey::parse disagree on the class: {:?}",
        outcome
    );
    let (pass, drop, tx, redirect) = if tc {
        // Up is a redirect back into the port (the C file's TC section).
        let r = tc_action::REDIRECT;
        (r, tc_action::SHOT, r, r)
    } else {
        (action::PASS, action::DROP, action::TX, action::REDIRECT)
    };
    // A tag the TC program pushes is metadata, not bytes.
    let expected = |f: &Vec<u8>| if tc { untagged(f) } else { f.clone() };
    let served = match &expect {
        Expect::Up => {
            prop_assert_eq!(ret, pass, "{:?}", outcome);
            prop_assert!(
                stat == "up_pass" || stat == "up_xsk_absent",
                "a miss went to {}",
                stat
            );
            prop_assert_eq!(&out, &frame, "a frame that goes up is untouched");
            if hit {
                seen.ttl_up += 1;
            } else {
                seen.misses += 1;
            }
            false
        }
        Expect::Drop => {
            prop_assert_eq!((ret, stat), (drop, "hit_drop"), "{:?}", outcome);
            seen.hits += 1;
            true
        }
        Expect::Tx(f) => {
            prop_assert_eq!((ret, stat), (tx, "hit_in_port"));
            prop_assert_eq!(&out, &expected(f));
            seen.hits += 1;
            seen.partial_hits += u32::from(partial);
            true
        }
        Expect::Redirect(p, f) => {
            prop_assert_eq!((ret, stat, target), (redirect, "hit_port", *p));
            prop_assert_eq!(&out, &expected(f));
            seen.hits += 1;
            seen.partial_hits += u32::from(partial);
            true
        }
    };
    if served && c.mask.is_some() {
        seen.masked_hits += 1;
        seen.masked_other_hits += u32::from(masked_other);
    }
    if let Some((m, _, _)) = installed {
        let c = b
            .remove(&m)
            .map_err(|e| TestCaseError::fail(format!("remove: {e}")))?;
        let want = if served {
            EntryCounters {
                packets: 1,
                bytes: frame.len() as u64,
            }
        } else {
            EntryCounters::default()
        };
        prop_assert_eq!(c, want, "final counters");
    }
    Ok(())
}

#[test]
fn xdp_program_agrees_with_the_executor() {
    agrees_with_the_executor(Hook::Xdp);
}

#[test]
fn tc_program_agrees_with_the_executor() {
    agrees_with_the_executor(Hook::Tc);
}

fn agrees_with_the_executor(hook: Hook) {
    let Some(ns) = common::Netns::new("oflxdp-diff") else {
        return;
    };
    let cases: u32 = std::env::var("OFFLOW_XDP_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(600);
    ns.run(|| {
        let b = std::cell::RefCell::new(common::detached_at(hook, 64, Vec::new()));
        let seen = std::cell::RefCell::new(Seen::default());
        let config = Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        };
        // At TC the tagged third of the frames cannot hit, so the tallies
        // of masked hits on other flows sit a few cases above their bound
        // (8-14 against > 7 in 600, measured): a random seed would fail one
        // run in ten for want of cases, not for a disagreement. The TC run
        // takes a fixed seed; the XDP run stays random.
        let mut runner = match hook {
            Hook::Xdp => TestRunner::new(config),
            Hook::Tc => {
                TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha))
            }
        };
        let result = runner.run(&case(), |c| {
            run_case(&mut b.borrow_mut(), &c, &mut seen.borrow_mut())
        });
        if let Err(e) = result {
            panic!("{e}");
        }
        let (b, seen) = (b.into_inner(), seen.into_inner());
        eprintln!("{seen:?}");
        // The generator reaches every kind of outcome.
        // At TC a third of the frames (the tagged ones) are outside the
        // class: fewer hits of every kind.
        let share = if hook == Hook::Xdp { 10 } else { 20 };
        assert!(seen.hits > cases / share, "{seen:?}");
        assert!(
            seen.misses > 0 && seen.outside_class > 0 && seen.refused > 0,
            "{seen:?}"
        );
        if hook == Hook::Xdp {
            assert!(seen.partial_hits > cases / 50, "{seen:?}");
        } else {
            assert_eq!(seen.partial_hits, 0, "{seen:?}");
        }
        assert!(
            seen.masked_hits > cases / share && seen.masked_other_hits > cases / 80,
            "{seen:?}"
        );
        assert!(b.is_empty());
        let stats = b.stats().unwrap();
        // Every partial frame served with an output was finished (a Drop
        // verdict needs no checksum), and none was too long.
        assert!(
            stats.get("csum_finished") >= u64::from(seen.partial_hits),
            "{stats:?}"
        );
        if hook == Hook::Tc {
            assert_eq!(stats.get("csum_finished"), 0, "{stats:?}");
        }
        assert_eq!(stats.get("up_csum_long"), 0);
        assert_eq!(stats.get("miss_stale"), 0);
        assert_eq!(stats.get("hit_masked"), u64::from(seen.masked_hits));
        assert_eq!(stats.get("drop_internal") + stats.get("drop_no_port"), 0);
    });
}
