//! Masked entries (megaflows) in the XDP program: one entry serves every
//! microflow its key matches under its mask, byte for byte as the
//! userspace path does; frames it does not match go up untouched; an exact
//! entry is found first; counters are exact per entry; the mask room
//! (`MAX_MASKS` distinct masks) is enforced and a freed slot is reused; a
//! masked entry's program can be replaced, also while frames run through
//! the program and mask slots change hands. Privileged: skipped with a
//! notice when not root.

#[allow(dead_code)] // each test file uses a subset of the harness
mod common;

use offlow_flow::Field;
use offlow_offload::xdp::{action, XdpBackend, MAX_MASKS};
use offlow_offload::{
    compile, EntryCounters, OffloadBackend, OffloadError, OffloadKey, OffloadMask, OffloadMatch,
    OffloadProgram, Refusal, Verdict,
};
use offlow_pipeline::{Action, PortNo};
use offlow_testkit::{Checksum, FrameBuilder};

const A: [u8; 6] = [2, 0, 0, 0, 0, 1];
const B: [u8; 6] = [2, 0, 0, 0, 0, 2];
const C: [u8; 6] = [2, 0, 0, 0, 0, 3];
const MAC: u64 = (1 << 48) - 1;

/// What a per-pair rule (in_port, eth_src, eth_dst) looks at.
const PER_PAIR: OffloadMask = OffloadMask {
    eth_dst: MAC,
    eth_src: MAC,
    ..OffloadMask::SHAPE
};

/// Microflow `i` of UDP from `src` to `dst` (MACs): addresses, ports,
/// ToS, TTL and length vary with `i`; every fifth carries a partial
/// checksum (what a veth peer with checksum offload sends). The frame and
/// whether it is partial.
fn udp(dst: [u8; 6], src: [u8; 6], i: u32) -> (Vec<u8>, bool) {
    let h = i.wrapping_add(1).wrapping_mul(0x9e37_79b9);
    let partial = i % 5 == 4;
    let f = FrameBuilder::eth(dst, src)
        .ipv4(
            [10, (h >> 24) as u8, (h >> 16) as u8, 1],
            [10, 9, (h >> 8) as u8, h as u8],
        )
        .tos((h >> 3) as u8)
        .ttl(2 + (h % 200) as u8)
        .udp(1024 + (h % 5000) as u16, 1 + ((h >> 20) % 1000) as u16)
        .payload(&vec![0x5a; (h % 60) as usize])
        .l4_checksum(if partial {
            Checksum::Partial
        } else {
            Checksum::Valid
        })
        .build();
    (f, partial)
}

fn tcp(dst: [u8; 6], src: [u8; 6], sport: u16) -> Vec<u8> {
    FrameBuilder::eth(dst, src)
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2])
        .tcp(sport, 80)
        .payload(&[7; 10])
        .build()
}

/// Runs `frame` on `ofport`: the XDP action, the frame as left, and the
/// outcome counter with its target.
fn run(b: &XdpBackend, frame: &[u8], ofport: u32) -> (u32, Vec<u8>, &'static str, u32) {
    let (ret, out) = b
        .test_run(frame, common::ifindex_of(b, ofport), 0)
        .expect("test run");
    let o = b.take_outcome().unwrap().expect("an outcome");
    (ret, out, o.stat, o.target)
}

/// `frame` must be served by `actions` (one output to another port),
/// byte for byte as software serves it.
fn assert_served(b: &XdpBackend, frame: &[u8], partial: bool, in_port: u32, actions: &[Action]) {
    let sent = common::software(frame, in_port, actions, partial).expect("software serves it");
    let [(port, want)] = sent.as_slice() else {
        panic!("one output expected: {sent:?}");
    };
    let (ret, out, stat, target) = run(b, frame, in_port);
    assert_eq!((ret, stat, target), (action::REDIRECT, "hit_port", *port));
    assert_eq!(&out, want, "served as software serves it");
}

/// `frame` must go up untouched.
fn assert_up(b: &XdpBackend, frame: &[u8], in_port: u32) {
    let (ret, out, stat, _) = run(b, frame, in_port);
    assert_eq!(ret, action::PASS, "{stat}");
    assert!(stat == "up_pass" || stat == "up_xsk_absent", "{stat}");
    assert_eq!(out, frame, "a frame that goes up is untouched");
}

fn key(frame: &[u8], in_port: u32) -> OffloadKey {
    OffloadKey::parse(frame, in_port, 0).expect("in the class")
}

/// (a), (b), (c): one per-pair entry serves many microflows, rewriting
/// each as software does; other ports, protocols and addresses go up; an
/// exact entry for one of its microflows is found first; both count
/// exactly what they served.
#[test]
fn one_masked_entry_serves_every_microflow_it_matches() {
    let Some(ns) = common::Netns::new("oflxdp-mask") else {
        return;
    };
    ns.run(|| {
        let mut b = common::detached(16, Vec::new());
        assert_eq!(b.capabilities().masks, MAX_MASKS);
        let (first, _) = udp(B, A, 0);
        let m = OffloadMatch::new(&key(&first, 1), PER_PAIR);
        // Rewrites that do not depend on the fields outside the mask.
        let actions = [
            Action::SetField(Field::EthDst, 0x0200_0000_0003),
            Action::SetField(Field::Ipv4Src, 0x0b00_0001),
            Action::DecNwTtl,
            Action::output(PortNo(2)),
        ];
        let p = compile(&m.key, &actions).unwrap();
        b.install(&m, &p).unwrap();
        assert_eq!(b.len(), 1);

        let mut want = EntryCounters::default();
        let mut partials = 0;
        for i in 0..60 {
            let (f, partial) = udp(B, A, i);
            assert!(m.matches(&key(&f, 1)));
            assert_served(&b, &f, partial, 1, &actions);
            want.packets += 1;
            want.bytes += f.len() as u64;
            partials += u32::from(partial);
        }
        assert!(partials > 5);
        assert_eq!(b.counters(&m).unwrap(), want);

        // Not matched: another ingress port, protocol, source or
        // destination MAC, or a VLAN tag (always exact).
        let (f, _) = udp(B, A, 7);
        assert_up(&b, &f, 3);
        assert_up(&b, &tcp(B, A, 1000), 1);
        assert_up(&b, &udp(B, C, 7).0, 1);
        assert_up(&b, &udp(C, A, 7).0, 1);
        let tagged = FrameBuilder::eth(B, A)
            .tag(0x8100, 5)
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2])
            .udp(1, 2)
            .build();
        assert_up(&b, &tagged, 1);
        assert_eq!(b.counters(&m).unwrap(), want, "misses are not counted");

        // (b) An exact entry for one microflow is found first; the masked
        // one goes on serving the others.
        let (f3, p3) = udp(B, A, 3);
        let exact = OffloadMatch::exact(key(&f3, 1));
        b.install(&exact, &OffloadProgram::plain(Verdict::Drop))
            .unwrap();
        for _ in 0..3 {
            let (ret, _, stat, _) = run(&b, &f3, 1);
            assert_eq!((ret, stat), (action::DROP, "hit_drop"));
        }
        let (f5, p5) = udp(B, A, 5);
        assert_served(&b, &f5, p5, 1, &actions);
        want.packets += 1;
        want.bytes += f5.len() as u64;
        let exact_want = EntryCounters {
            packets: 3,
            bytes: 3 * f3.len() as u64,
        };
        assert_eq!(b.counters(&exact).unwrap(), exact_want);
        assert_eq!(b.counters(&m).unwrap(), want);
        let mut all = Vec::new();
        b.all_counters(&mut |k, c| all.push((*k, c)));
        all.sort_by_key(|(k, _)| k.is_exact());
        assert_eq!(all, vec![(m, want), (exact, exact_want)]);

        // Without the exact entry its microflow is the masked entry's.
        assert_eq!(b.remove(&exact).unwrap(), exact_want);
        assert_served(&b, &f3, p3, 1, &actions);
        want.packets += 1;
        want.bytes += f3.len() as u64;
        let stats = b.stats().unwrap();
        assert_eq!(stats.get("hit_masked"), want.packets);
        assert_eq!(stats.get("hit_drop"), 3);
        assert_eq!(stats.get("miss_stale"), 0);
        assert_eq!(b.remove(&m).unwrap(), want, "final counters");
        assert_up(&b, &udp(B, A, 0).0, 1);
        assert!(b.is_empty());
    });
}

/// Mask `n` of a family of distinct masks (each matches the per-pair
/// fields and one more bit of the UDP destination port).
fn nth_mask(n: u32) -> OffloadMask {
    OffloadMask {
        tp_dst: 1 << n,
        ..PER_PAIR
    }
}

/// (d), (e): the (MAX_MASKS + 1)-th distinct mask is refused and changes
/// nothing; entries of a mask share its slot; once every entry of a mask
/// is gone a new mask takes the slot and serves correctly, and the old
/// mask's frames no longer hit; a masked entry's program is replaced in
/// place, its counters kept.
#[test]
fn the_mask_room_is_enforced_and_freed_slots_are_reused() {
    let Some(ns) = common::Netns::new("oflxdp-mroom") else {
        return;
    };
    ns.run(|| {
        let mut b = common::detached(32, Vec::new());
        let to2 = [Action::output(PortNo(2))];
        let to3 = [Action::output(PortNo(3))];
        // A frame whose destination port has every bit: every mask of the
        // family matches it, with a different masked key each.
        let frame_from = |src: [u8; 6], dport: u16| {
            FrameBuilder::eth(B, src)
                .ipv4([10, 0, 0, 1], [10, 0, 0, 2])
                .udp(5000, dport)
                .build()
        };
        let frame = |dport: u16| frame_from(A, dport);
        let m_of = |n: u32, dport: u16| OffloadMatch::new(&key(&frame(dport), 1), nth_mask(n));
        for n in 0..MAX_MASKS as u32 {
            let m = m_of(n, 1 << n);
            b.install(&m, &compile(&m.key, &to2).unwrap()).unwrap();
        }
        // A second entry of a mask in use (another source) needs no new
        // slot.
        let again = OffloadMatch::new(&key(&frame_from(C, 1), 1), nth_mask(0));
        b.install(&again, &compile(&again.key, &to3).unwrap())
            .unwrap();
        let extra = m_of(MAX_MASKS as u32, 0xffff);
        let p = compile(&extra.key, &to2).unwrap();
        assert_eq!(
            b.install(&extra, &p),
            Err(OffloadError::Refused(Refusal::MaskRoom(MAX_MASKS)))
        );
        let res = b.install_batch(&[(extra, p)]);
        assert_eq!(
            res,
            vec![Err(OffloadError::Refused(Refusal::MaskRoom(MAX_MASKS)))]
        );
        assert_eq!(b.len(), MAX_MASKS + 1);
        // Each entry serves its frames: mask n matches bit n of the port.
        for n in 0..MAX_MASKS as u32 {
            assert_served(&b, &frame(1 << n), false, 1, &to2);
        }
        assert_served(&b, &frame_from(C, 0x8001), false, 1, &to3);

        // (e) Replace the program of a masked entry: served by the new
        // one, its counters kept, no slot taken.
        let m3 = m_of(3, 1 << 3);
        let before = b.counters(&m3).unwrap();
        assert_eq!(before.packets, 1);
        let rewrite = [
            Action::SetField(Field::UdpDst, 53),
            Action::output(PortNo(3)),
        ];
        b.install(&m3, &compile(&m3.key, &rewrite).unwrap())
            .unwrap();
        assert_served(&b, &frame(0x0108), false, 1, &rewrite);
        assert_eq!(b.counters(&m3).unwrap().packets, 2);
        assert_eq!(b.len(), MAX_MASKS + 1);

        // Remove every entry of mask 0 (two): its slot is free again.
        let m0 = m_of(0, 1);
        let gone = b.remove_batch(&[m0, again]);
        assert!(gone.iter().all(Result::is_ok), "{gone:?}");
        assert_eq!(gone[0].as_ref().unwrap().packets, 1);
        let (ret, _, stat, _) = run(&b, &frame(1), 1);
        assert_eq!(ret, action::PASS, "{stat}");
        b.install(&extra, &compile(&extra.key, &to3).unwrap())
            .unwrap();
        assert_served(&b, &frame(0x0100), false, 1, &to3);
        assert_eq!(b.counters(&extra).unwrap().packets, 1);
        // Bit 0 alone no longer hits anything: mask 0 is gone, and under
        // every other mask the port's bit is 0, which no entry has.
        assert_up(&b, &frame(1), 1);
        // A ninth mask is refused again.
        let ninth = m_of(0, 1);
        assert_eq!(
            b.install(&ninth, &compile(&ninth.key, &to2).unwrap()),
            Err(OffloadError::Refused(Refusal::MaskRoom(MAX_MASKS)))
        );
        // Removing everything leaves nothing installed; any mask fits.
        let mut left = Vec::new();
        b.all_counters(&mut |k, _| left.push(*k));
        assert!(b.remove_batch(&left).iter().all(Result::is_ok));
        assert!(b.is_empty());
        b.install(&ninth, &compile(&ninth.key, &to2).unwrap())
            .unwrap();
        assert_served(&b, &frame(1), false, 1, &to2);
        assert_eq!(b.stats().unwrap().get("miss_stale"), 0);
    });
}

/// While frames run on another thread, mask slots change hands and masked
/// programs are replaced: every frame is served whole by a program whose
/// entry matched it when it ran, or goes up untouched; never by a mask the
/// slot held earlier or a torn mask.
#[test]
fn frames_in_flight_never_see_a_reused_mask_slot() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let Some(ns) = common::Netns::new("oflxdp-mrace") else {
        return;
    };
    // Frame F (from A to B). Mask X matches only the fields that are
    // always exact; mask Y the destination MAC too, and Y's entry is for
    // destination 00:00:00:00:00:00, so F never matches it. But F's key
    // under X and that entry's key are the same bytes, slot id included
    // when both masks take the same slot: a frame that read X from the
    // slot and looked up after Y's entry was published would hit it. The
    // grace period between writing a mask and publishing its first entry
    // (and the one before a slot is reused) rules that out.
    let f = FrameBuilder::eth(B, A)
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2])
        .udp(1, 80)
        .build();
    let k = key(&f, 1);
    let by_dst = OffloadMask {
        eth_dst: MAC,
        ..OffloadMask::SHAPE
    };
    let mx = OffloadMatch::new(&k, OffloadMask::SHAPE);
    let my = OffloadMatch::new(&key(&udp([0; 6], A, 1).0, 1), by_dst);
    assert!(!my.matches(&k));
    assert_eq!(mx.key, my.key, "the same bytes but for the slot id");
    let p1 = [
        Action::SetField(Field::Ipv4Dst, 0x0b00_0002),
        Action::output(PortNo(2)),
    ];
    let p2 = [
        Action::SetField(Field::EthDst, 0x0200_0000_0022),
        Action::output(PortNo(3)),
    ];
    let served_by = |acts: &[Action]| {
        let sent = common::software(&f, 1, acts, false).unwrap();
        (action::REDIRECT, sent[0].1.clone())
    };
    let (e1, e2) = (served_by(&p1), served_by(&p2));
    let up = (action::PASS, f.clone());
    let stop = AtomicBool::new(false);
    let ran = std::thread::scope(|s| {
        let mut b = ns.run(|| common::detached(8, Vec::new()));
        let runner = b.test_runner().unwrap();
        let ifindex = ns.run(|| common::ifindex_of(&b, 1));
        let (ns, stop, f) = (&ns, &stop, &f);
        let (e1, e2, up) = (e1.clone(), e2.clone(), up.clone());
        let t = s.spawn(move || {
            ns.run(|| {
                let mut n = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    let r = runner.run(f, ifindex, 0).unwrap();
                    assert!(r == e1 || r == e2 || r == up, "a wrong hit: {r:?}");
                    n += 1;
                }
                n
            })
        });
        let c1 = compile(&mx.key, &p1).unwrap();
        let c2 = compile(&mx.key, &p2).unwrap();
        let drop_all = OffloadProgram::plain(Verdict::Drop);
        for i in 0..100 {
            // Slot 0 holds X (F's), then Y (not F's), alternately.
            b.install(&mx, if i % 2 == 0 { &c1 } else { &c2 }).unwrap();
            b.install(&mx, if i % 2 == 0 { &c2 } else { &c1 }).unwrap();
            b.remove(&mx).unwrap();
            b.install(&my, &drop_all).unwrap();
            b.remove(&my).unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        let stats = b.stats().unwrap();
        assert_eq!(stats.get("hit_drop"), 0, "F never hits Y's entry");
        t.join().unwrap()
    });
    assert!(ran > 100, "only {ran} frames ran");
}
