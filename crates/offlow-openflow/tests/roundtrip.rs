//! Property tests: typed message → encode → decode == original, and decode
//! → encode gives the same bytes; arbitrary bytes never panic the decoder
//! and whatever decodes re-encodes to a fixed point; OXM ↔ Match agree with
//! a direct reference evaluation.

mod common;

use common::*;
use offlow_flow::{Field, FlowKey, Match};
use offlow_openflow::*;
use proptest::prelude::*;

fn cases(n: u32) -> ProptestConfig {
    // Debug builds are slow; the release-mode fuzz target covers volume.
    ProptestConfig::with_cases(if cfg!(debug_assertions) { n } else { n * 4 })
}

proptest! {
    #![proptest_config(cases(4000))]

    /// encode → decode == original → encode == same bytes, for every kind.
    #[test]
    fn typed_roundtrip(msg in arb_message()) {
        let bytes = encode_to_vec(&msg).expect("valid message encodes");
        prop_assert_eq!(usize::from(u16::from_be_bytes([bytes[2], bytes[3]])), bytes.len());
        prop_assert_eq!(frame_len(&bytes), Ok(Some(bytes.len())));
        let back = decode(&bytes);
        prop_assert_eq!(back.as_ref(), Ok(&msg));
        let again = encode_to_vec(&back.unwrap()).unwrap();
        prop_assert_eq!(again, bytes);
    }

    /// Every strict prefix of a valid message is reported as truncated,
    /// never decoded and never a panic.
    #[test]
    fn prefixes_are_truncated(msg in arb_message(), cut in any::<prop::sample::Index>()) {
        let bytes = encode_to_vec(&msg).unwrap();
        let n = cut.index(bytes.len());
        let is_truncated = matches!(decode(&bytes[..n]), Err(DecodeError::Truncated { .. }));
        prop_assert!(is_truncated);
    }
}

proptest! {
    #![proptest_config(cases(8000))]

    /// Arbitrary bytes (with a plausible header so bodies get exercised):
    /// decode never panics, and anything that decodes re-encodes to bytes
    /// that decode to the same message and re-encode identically.
    #[test]
    fn arbitrary_bytes_fixed_point(ty in 0u8..32, body in prop::collection::vec(any::<u8>(), 0..200), xid in any::<u32>()) {
        let mut buf = vec![4, ty, 0, 0];
        buf.extend_from_slice(&xid.to_be_bytes());
        buf.extend_from_slice(&body);
        let len = buf.len() as u16;
        buf[2..4].copy_from_slice(&len.to_be_bytes());
        if let Ok(m) = decode(&buf) {
            let enc = encode_to_vec(&m).expect("decoded message encodes");
            prop_assert_eq!(enc.len(), buf.len(), "padding only, never size, may differ");
            let m2 = decode(&enc).expect("re-encoded message decodes");
            prop_assert_eq!(&m2, &m);
            prop_assert_eq!(encode_to_vec(&m2).unwrap(), enc);
        }
    }

    /// Mutating one byte of a valid message: no panic, and a fixed point if
    /// it still decodes.
    #[test]
    fn mutated_messages(msg in arb_message(), at in any::<prop::sample::Index>(), val in any::<u8>()) {
        let mut bytes = encode_to_vec(&msg).unwrap();
        let i = at.index(bytes.len());
        bytes[i] = val;
        if let Ok(m) = decode(&bytes) {
            let enc = encode_to_vec(&m).expect("decoded message encodes");
            let again = decode(&enc);
            prop_assert_eq!(again.as_ref(), Ok(&m));
        }
    }

    /// Raw random bytes, header included.
    #[test]
    fn raw_bytes_never_panic(buf in prop::collection::vec(any::<u8>(), 0..120)) {
        let _ = frame_len(&buf);
        if let Err(e) = decode(&buf) {
            let reply = error_reply(&e, &buf);
            let Body::Error(ErrorMsg::Standard { data, .. }) = &reply.body else {
                panic!("error reply is a standard error");
            };
            prop_assert!(data.len() <= ERROR_DATA_LEN && buf.starts_with(data));
        }
    }
}

/// Reference: does `key` satisfy every OXM of `m` (value/mask on the field)?
fn oxm_matches(m: &OxmMatch, key: &FlowKey) -> bool {
    m.fields.iter().all(|o| {
        let mask = o.mask.unwrap_or(o.field.full_mask());
        key.get(o.field) & mask == o.value & mask
    })
}

proptest! {
    #![proptest_config(cases(2000))]

    /// `to_match` constrains exactly what the OXMs say (checked on keys
    /// built from the OXM values with random bit flips), and `from_match`
    /// gives back the same constraints in canonical order.
    #[test]
    fn oxm_match_conversion(m in arb_match(), flips in prop::collection::vec((0usize..16, 0u32..64), 0..3)) {
        let km = m.to_match();
        // A key satisfying every OXM: the match value with all presence bits.
        let mut key = km.value;
        key.add_presence(u16::MAX);
        prop_assert!(km.matches(&key));
        prop_assert!(oxm_matches(&m, &key));
        for (w, b) in flips {
            let mut k2 = key;
            k2.words[w] ^= 1 << b;
            // Presence bits are not OXM fields; only compare on field bits.
            if w == offlow_flow::present::WORD && b >= offlow_flow::present::SHIFT {
                continue;
            }
            prop_assert_eq!(km.matches(&k2), oxm_matches(&m, &k2), "flip word {} bit {}", w, b);
        }
        // Canonical form: same constraints, ascending field order, no zero masks.
        let canon = OxmMatch::from_match(&km);
        prop_assert_eq!(canon.to_match(), km);
        let order: Vec<u8> = canon.fields.iter().map(|o| o.field.oxm()).collect();
        let mut sorted = order.clone();
        sorted.sort_unstable();
        prop_assert_eq!(&order, &sorted);
        let mut expect: Vec<Oxm> = m.fields.iter().filter(|o| o.mask != Some(0)).map(|o| Oxm {
            field: o.field,
            value: o.value,
            mask: o.mask.filter(|&k| k != o.field.full_mask()),
        }).collect();
        expect.sort_by_key(|o| o.field.oxm());
        prop_assert_eq!(&canon.fields, &expect);
        // And the canonical match is itself valid on the wire.
        let fm = FlowMod::add(0, 1, &km, vec![]);
        let bytes = encode_to_vec(&Message::new(1, Body::FlowMod(fm.clone()))).unwrap();
        let Body::FlowMod(back) = decode(&bytes).unwrap().body else { unreachable!() };
        prop_assert_eq!(back, fm);
    }
}

#[test]
fn canonical_owner_follows_prerequisites() {
    let mut m = Match::ANY;
    m.set_exact(Field::EthType, 0x0800)
        .set_exact(Field::IpProto, 17)
        .set_exact(Field::UdpDst, 53);
    let c = OxmMatch::from_match(&m);
    let fields: Vec<Field> = c.fields.iter().map(|o| o.field).collect();
    assert_eq!(fields, [Field::EthType, Field::IpProto, Field::UdpDst]);
    let mut m = Match::ANY;
    m.set_exact(Field::EthType, 0x0806)
        .set_prefix(Field::ArpSpa, 0x0a000000, 8);
    let c = OxmMatch::from_match(&m);
    assert_eq!(
        c.fields[1],
        Oxm {
            field: Field::ArpSpa,
            value: 0x0a000000,
            mask: Some(0xff000000)
        }
    );
}
