//! Property tests of `extract`: it never panics, its output is internally
//! consistent, truncation never adds presence, and on generated plain
//! IPv4/IPv6 TCP/UDP frames the key equals one computed directly from the
//! generator's inputs (the reference).

mod common;

use common::*;
use offlow_flow::extract::OFPVID_PRESENT;
use offlow_flow::{extract, present, Field, FlowKey, ParseStats};
use proptest::prelude::*;

fn parse(frame: &[u8]) -> offlow_flow::Parsed {
    let mut st = ParseStats::default();
    let p = extract(frame, 3, &mut st);
    if let Err(e) = p.check_consistency(frame.len()) {
        panic!("inconsistent parse ({e}) of {frame:02x?}: {p:?}");
    }
    p
}

/// The truncated frame's key never claims presence the full one lacks, and
/// every field it claims equals the full frame's.
fn prefix_agrees(full: &[u8], n: usize) -> Result<(), TestCaseError> {
    let whole = parse(full).key;
    let part = parse(&full[..n]).key;
    let pres = part.presence();
    prop_assert_eq!(
        pres & !whole.presence(),
        0,
        "presence beyond the full frame at {}",
        n
    );
    for field in Field::ALL {
        let need = field.required_presence();
        let arp = matches!(
            field,
            Field::ArpOp | Field::ArpSpa | Field::ArpTpa | Field::ArpSha | Field::ArpTha
        );
        if arp && whole.get(Field::EthType) != 0x0806 {
            continue; // shared storage; prerequisite eth_type = ARP
        }
        if need != 0 && pres & need == need {
            prop_assert_eq!(part.get(field), whole.get(field), "{:?} at {}", field, n);
        }
    }
    Ok(())
}

fn ethertype() -> impl Strategy<Value = u16> {
    prop_oneof![
        Just(0x0800u16),
        Just(0x86dd),
        Just(0x0806),
        Just(0x8100),
        Just(0x88a8),
        Just(0x8847),
        Just(0x88e7),
        any::<u16>(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(debug_assertions) { 3000 } else { 30000 }))]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..160)) {
        parse(&bytes);
    }

    #[test]
    fn random_payload_after_known_ethertype(et in ethertype(), et2 in ethertype(),
                                            body in proptest::collection::vec(any::<u8>(), 0..120)) {
        // Bias the first payload bytes towards IP versions and a second tag.
        let mut b = body;
        if let Some(x) = b.get_mut(2) { *x = (et2 >> 8) as u8; }
        if let Some(x) = b.get_mut(3) { *x = et2 as u8; }
        let frame = eth(et, &b);
        parse(&frame);
        let mut v = frame.clone();
        if v.len() > 14 { v[14] = if et == 0x86dd { 0x60 } else { 0x45 }; }
        parse(&v);
    }

    #[test]
    fn mutated_seeds_truncate_monotonically(
        seed in 0usize..64,
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
        cut in any::<usize>(),
    ) {
        let seeds = seed_frames();
        let mut f = seeds[seed % seeds.len()].clone();
        for (pos, val) in flips {
            let i = pos % f.len();
            f[i] = val;
        }
        let n = cut % (f.len() + 1);
        prefix_agrees(&f, n)?;
    }

    #[test]
    fn plain_frames_match_reference(
        tag in proptest::option::of((any::<bool>(), 0u16..4096, 0u8..8)),
        v6_ in any::<bool>(),
        src in any::<[u8; 16]>(), dst in any::<[u8; 16]>(),
        is_tcp in any::<bool>(),
        sport in any::<u16>(), dport in any::<u16>().prop_filter("not VXLAN", |p| *p != 4789),
        pad in 0usize..20,
    ) {
        let l4 = if is_tcp { tcp(sport, dport, &[]) } else { udp(sport, dport, &[]) };
        let proto = if is_tcp { 6u8 } else { 17 };
        let (et, l3) = if v6_ {
            (0x86dd, ipv6(proto, src, dst, &l4))
        } else {
            let s4 = [src[0], src[1], src[2], src[3]];
            let d4 = [dst[0], dst[1], dst[2], dst[3]];
            (0x0800, ipv4(proto, s4, d4, &[], 0, &l4))
        };
        let mut frame = match tag {
            Some((ad, vid, pcp)) => {
                let tpid = if ad { 0x88a8 } else { 0x8100 };
                eth_tagged(&[(tpid, ((pcp as u16) << 13) | vid)], et, &l3)
            }
            None => eth(et, &l3),
        };
        frame.extend(std::iter::repeat_n(0xee, pad)); // Ethernet padding is ignored

        // Reference: the key written field by field from the inputs.
        let mut want = FlowKey::ZERO;
        want.set(Field::InPort, 3);
        want.set(Field::InPhyPort, 3);
        want.set(Field::EthDst, 0x0200_0000_0001);
        want.set(Field::EthSrc, 0x0200_0000_0002);
        want.set(Field::EthType, et as u128);
        let mut pres = present::L3 | present::L4;
        if let Some((_, vid, pcp)) = tag {
            want.set(Field::VlanVid, (OFPVID_PRESENT | vid) as u128);
            want.set(Field::VlanPcp, pcp as u128);
            pres |= present::VLAN;
        }
        // Both builders use TOS / traffic class 0xb9: DSCP 46, ECN 1.
        want.set(Field::IpDscp, 46);
        want.set(Field::IpEcn, 1);
        want.set(Field::IpProto, proto as u128);
        if v6_ {
            want.set(Field::Ipv6Src, u128::from_be_bytes(src));
            want.set(Field::Ipv6Dst, u128::from_be_bytes(dst));
            want.set(Field::Ipv6Flabel, 0x12345);
        } else {
            want.set(Field::Ipv4Src, u32::from_be_bytes([src[0], src[1], src[2], src[3]]) as u128);
            want.set(Field::Ipv4Dst, u32::from_be_bytes([dst[0], dst[1], dst[2], dst[3]]) as u128);
        }
        want.set(Field::TcpSrc, sport as u128);
        want.set(Field::TcpDst, dport as u128);
        want.add_presence(pres);
        let got = parse(&frame);
        prop_assert_eq!(got.key, want);
        let tags = tag.is_some() as u16 * 4;
        prop_assert_eq!(got.layout.l3, 14 + tags);
        prop_assert_eq!(got.layout.l4, 14 + tags + if v6_ { 40 } else { 20 });
    }
}
