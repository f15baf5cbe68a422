//! Group and meter bodies: METER_MOD and the GROUP / GROUP_DESC /
//! GROUP_FEATURES / METER / METER_CONFIG / METER_FEATURES multiparts.
//! Round trips, byte-exact layouts written by hand from OpenFlow 1.3.5
//! §7.3.4.4 and §7.3.5.9–§7.3.5.14, and the errors malformed bodies earn.

mod common;

use common::arb_meter_mod;
use offlow_openflow::multipart::{MultipartReplyBody as RB, MultipartRequestBody as QB};
use offlow_openflow::*;
use proptest::collection::vec;
use proptest::prelude::*;

const BAD_REQUEST: u16 = 1;
const BAD_LEN: u16 = 6;
const METER_MOD_FAILED: u16 = 12;
const BAD_BAND: u16 = 8;

fn expect_err(buf: &[u8], want: (u16, u16)) {
    let e = decode(buf).expect_err("must not decode");
    assert_eq!(error_for(&e), want, "{e}");
}

/// An OpenFlow 1.3 header of type `ty` and xid 1 in front of `body`.
fn msg(ty: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![4, ty];
    v.extend_from_slice(&((8 + body.len()) as u16).to_be_bytes());
    v.extend_from_slice(&1u32.to_be_bytes());
    v.extend_from_slice(body);
    v
}

/// A multipart reply of `mp_type` with `body`.
fn mp_reply(mp_type: u16, body: &[u8]) -> Vec<u8> {
    let mut b = mp_type.to_be_bytes().to_vec();
    b.extend_from_slice(&[0; 6]);
    b.extend_from_slice(body);
    msg(19, &b)
}

/// A multipart request of `mp_type` with `body`.
fn mp_request(mp_type: u16, body: &[u8]) -> Vec<u8> {
    let mut b = mp_type.to_be_bytes().to_vec();
    b.extend_from_slice(&[0; 6]);
    b.extend_from_slice(body);
    msg(18, &b)
}

fn band(ty: u16, len: u16, rate: u32, burst: u32, tail: [u8; 4]) -> Vec<u8> {
    let mut v = ty.to_be_bytes().to_vec();
    v.extend_from_slice(&len.to_be_bytes());
    v.extend_from_slice(&rate.to_be_bytes());
    v.extend_from_slice(&burst.to_be_bytes());
    v.extend_from_slice(&tail);
    v
}

/// `struct ofp_meter_mod`: command, flags, meter_id, then the bands.
fn meter_mod_bytes(bands: &[Vec<u8>]) -> Vec<u8> {
    let mut b = vec![0, 0, 0, 0b101, 0, 0, 0, 7]; // ADD, KBPS|BURST, meter 7
    bands.iter().for_each(|x| b.extend_from_slice(x));
    msg(29, &b)
}

#[test]
fn meter_mod_byte_exact() {
    let m = Message::new(
        1,
        Body::MeterMod(MeterMod {
            command: 0,
            flags: 0b101,
            meter_id: 7,
            bands: vec![
                MeterBand {
                    kind: MeterBandKind::Drop,
                    rate: 1000,
                    burst_size: 100,
                },
                MeterBand {
                    kind: MeterBandKind::DscpRemark { prec_level: 2 },
                    rate: 500,
                    burst_size: 50,
                },
                MeterBand {
                    kind: MeterBandKind::Experimenter {
                        experimenter: 0x2320,
                    },
                    rate: 1,
                    burst_size: 2,
                },
            ],
        }),
    );
    #[rustfmt::skip]
    let want: Vec<u8> = vec![
        4, 29, 0, 64, 0, 0, 0, 1,             // header: METER_MOD, 16 + 3 * 16 bytes
        0, 0, 0, 5, 0, 0, 0, 7,               // command ADD, flags KBPS|BURST, meter_id 7
        0, 1, 0, 16, 0, 0, 3, 0xe8, 0, 0, 0, 100, 0, 0, 0, 0, // DROP 1000/100, pad
        0, 2, 0, 16, 0, 0, 1, 0xf4, 0, 0, 0, 50, 2, 0, 0, 0,  // DSCP_REMARK 500/50 prec 2
        0xff, 0xff, 0, 16, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0x23, 0x20, // EXPERIMENTER 0x2320
    ];
    assert_eq!(encode_to_vec(&m).unwrap(), want);
    assert_eq!(decode(&want).unwrap(), m);
}

#[test]
fn group_stats_reply_byte_exact() {
    let m = Message::new(
        1,
        Body::MultipartReply(MultipartReply {
            flags: 0,
            body: RB::GroupStats(vec![GroupStats {
                group_id: 5,
                ref_count: 2,
                packet_count: 3,
                byte_count: 4,
                duration_sec: 6,
                duration_nsec: 7,
                bucket_stats: vec![BucketCounter {
                    packet_count: 8,
                    byte_count: 9,
                }],
            }]),
        }),
    );
    #[rustfmt::skip]
    let want: Vec<u8> = vec![
        4, 19, 0, 72, 0, 0, 0, 1,       // header: MULTIPART_REPLY, 8 + 8 + 56
        0, 6, 0, 0, 0, 0, 0, 0,         // OFPMP_GROUP, flags 0, pad
        0, 56, 0, 0,                    // length 40 + 16, pad
        0, 0, 0, 5,                     // group_id
        0, 0, 0, 2,                     // ref_count
        0, 0, 0, 0,                     // pad2
        0, 0, 0, 0, 0, 0, 0, 3,         // packet_count
        0, 0, 0, 0, 0, 0, 0, 4,         // byte_count
        0, 0, 0, 6, 0, 0, 0, 7,         // duration_sec, duration_nsec
        0, 0, 0, 0, 0, 0, 0, 8,         // bucket 0 packet_count
        0, 0, 0, 0, 0, 0, 0, 9,         // bucket 0 byte_count
    ];
    assert_eq!(encode_to_vec(&m).unwrap(), want);
    assert_eq!(decode(&want).unwrap(), m);
}

#[test]
fn meter_stats_reply_length_sits_after_the_id() {
    let m = Message::new(
        1,
        Body::MultipartReply(MultipartReply {
            flags: 0,
            body: RB::MeterStats(vec![MeterStats {
                meter_id: 0x0102_0304,
                band_stats: vec![MeterBandStats::default(); 2],
                ..Default::default()
            }]),
        }),
    );
    let v = encode_to_vec(&m).unwrap();
    assert_eq!(&v[16..22], &[1, 2, 3, 4, 0, 72]);
}

#[test]
fn requests_carry_id_and_padding() {
    for (ty, body) in [
        (6u16, QB::GroupStats(9)),
        (9, QB::MeterStats(9)),
        (10, QB::MeterConfig(9)),
    ] {
        let m = Message::new(
            1,
            Body::MultipartRequest(MultipartRequest { flags: 0, body }),
        );
        assert_eq!(
            encode_to_vec(&m).unwrap(),
            mp_request(ty, &[0, 0, 0, 9, 0, 0, 0, 0])
        );
    }
    for (ty, body) in [
        (7u16, QB::GroupDesc),
        (8, QB::GroupFeatures),
        (11, QB::MeterFeatures),
    ] {
        let m = Message::new(
            1,
            Body::MultipartRequest(MultipartRequest { flags: 0, body }),
        );
        assert_eq!(encode_to_vec(&m).unwrap(), mp_request(ty, &[]));
    }
}

#[test]
fn meter_mod_errors() {
    let drop = band(1, 16, 10, 0, [0; 4]);
    assert!(decode(&meter_mod_bytes(std::slice::from_ref(&drop))).is_ok());
    assert!(decode(&meter_mod_bytes(&[])).is_ok(), "no bands decodes");
    // Unknown band type, well framed: OFPMMFC_BAD_BAND.
    expect_err(
        &meter_mod_bytes(&[band(3, 16, 10, 0, [0; 4])]),
        (METER_MOD_FAILED, BAD_BAND),
    );
    expect_err(
        &meter_mod_bytes(&[drop.clone(), band(0, 16, 10, 0, [0; 4])]),
        (METER_MOD_FAILED, BAD_BAND),
    );
    // Band lengths: below 16, not a multiple of 8, past the message, a
    // known type longer than its struct, a truncated band header.
    for len in [0u16, 8, 12, 17, 20, 32] {
        expect_err(
            &meter_mod_bytes(&[band(1, len, 10, 0, [0; 4])]),
            (BAD_REQUEST, BAD_LEN),
        );
    }
    let mut long = band(2, 24, 10, 0, [1, 0, 0, 0]);
    long.extend_from_slice(&[0; 8]);
    expect_err(&meter_mod_bytes(&[long]), (BAD_REQUEST, BAD_LEN));
    expect_err(
        &meter_mod_bytes(&[drop[..6].to_vec()]),
        (BAD_REQUEST, BAD_LEN),
    );
    expect_err(
        &meter_mod_bytes(&[drop[..12].to_vec()]),
        (BAD_REQUEST, BAD_LEN),
    );
    // The fixed part itself cut short.
    expect_err(&msg(29, &[0, 0, 0, 1, 0, 0]), (BAD_REQUEST, BAD_LEN));
}

#[test]
fn multipart_body_errors() {
    let bad_len = (BAD_REQUEST, BAD_LEN);
    // Requests: the id and padding must be there, nothing after.
    for ty in [6u16, 9, 10] {
        expect_err(&mp_request(ty, &[0, 0, 0, 1]), bad_len);
        expect_err(&mp_request(ty, &[0; 12]), bad_len);
    }
    for ty in [7u16, 8, 11] {
        expect_err(&mp_request(ty, &[0; 8]), bad_len);
    }
    // Group stats: length below 40, not 40 + 16k, past the body.
    let mut gs = vec![0u8; 56];
    gs[1] = 56;
    assert!(decode(&mp_reply(6, &gs)).is_ok());
    for len in [0u8, 32, 48, 72] {
        gs[1] = len;
        expect_err(&mp_reply(6, &gs), bad_len);
    }
    expect_err(&mp_reply(6, &[0, 40]), bad_len);
    // Meter stats: the length is at offset 4.
    let mut ms = vec![0u8; 40];
    ms[5] = 40;
    assert!(decode(&mp_reply(9, &ms)).is_ok());
    for len in [0u8, 8, 44, 56] {
        ms[5] = len;
        expect_err(&mp_reply(9, &ms), bad_len);
    }
    // Group desc: length at least 8, multiple of 8; buckets inside checked.
    let mut gd = vec![0u8; 8];
    gd[1] = 8;
    assert!(decode(&mp_reply(7, &gd)).is_ok());
    gd[1] = 12;
    expect_err(&mp_reply(7, &gd), bad_len);
    let mut gd = vec![0u8; 24];
    gd[1] = 24;
    gd[9] = 8; // a bucket claiming 8 bytes
    expect_err(&mp_reply(7, &gd), bad_len);
    // Meter config: length at least 8; its bands as in METER_MOD.
    let mut mc = vec![0, 24, 0, 1, 0, 0, 0, 1];
    mc.extend_from_slice(&band(1, 16, 1, 0, [0; 4]));
    assert!(decode(&mp_reply(10, &mc)).is_ok());
    mc[8..10].copy_from_slice(&7u16.to_be_bytes());
    expect_err(&mp_reply(10, &mc), (METER_MOD_FAILED, BAD_BAND));
    mc[1] = 20;
    expect_err(&mp_reply(10, &mc), bad_len);
    // Features: exactly their struct.
    assert!(decode(&mp_reply(8, &[0; 40])).is_ok());
    expect_err(&mp_reply(8, &[0; 36]), bad_len);
    expect_err(&mp_reply(8, &[0; 48]), bad_len);
    assert!(decode(&mp_reply(11, &[0; 16])).is_ok());
    expect_err(&mp_reply(11, &[0; 12]), bad_len);
    expect_err(&mp_reply(11, &[0; 24]), bad_len);
}

fn roundtrip(body: Body) {
    let m = Message::new(9, body);
    let bytes = encode_to_vec(&m).unwrap();
    assert_eq!(decode(&bytes).unwrap(), m);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn meter_mod_roundtrips(mm in arb_meter_mod()) {
        roundtrip(Body::MeterMod(mm));
    }

    #[test]
    fn group_meter_replies_roundtrip(
        flags in any::<u16>(),
        gs in vec(common::arb_group_stats(), 0..4),
        gd in vec(common::arb_group_desc(), 0..4),
        ms in vec(common::arb_meter_stats(), 0..4),
        mc in vec(common::arb_meter_config(), 0..4),
        gf in any::<(u32, u32, [u32; 4], [u32; 4])>(),
        mf in any::<(u32, u32, u32, u8, u8)>(),
    ) {
        let features = GroupFeatures {
            types: gf.0,
            capabilities: gf.1,
            max_groups: gf.2,
            actions: gf.3,
        };
        let meter_features = MeterFeatures {
            max_meter: mf.0,
            band_types: mf.1,
            capabilities: mf.2,
            max_bands: mf.3,
            max_color: mf.4,
        };
        for body in [
            RB::GroupStats(gs),
            RB::GroupDesc(gd),
            RB::GroupFeatures(features),
            RB::MeterStats(ms),
            RB::MeterConfig(mc),
            RB::MeterFeatures(meter_features),
        ] {
            roundtrip(Body::MultipartReply(MultipartReply { flags, body }));
        }
    }

    #[test]
    fn group_meter_requests_roundtrip(flags in any::<u16>(), id in any::<u32>()) {
        for body in [
            QB::GroupStats(id),
            QB::GroupDesc,
            QB::GroupFeatures,
            QB::MeterStats(id),
            QB::MeterConfig(id),
            QB::MeterFeatures,
        ] {
            roundtrip(Body::MultipartRequest(MultipartRequest { flags, body }));
        }
    }
}
