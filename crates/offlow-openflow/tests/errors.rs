//! Each decode error maps to the OpenFlow error the spec prescribes.

use offlow_flow::Field;
use offlow_openflow::*;

const BAD_REQUEST: u16 = 1;
const BAD_ACTION: u16 = 2;
const BAD_INSTRUCTION: u16 = 3;
const BAD_MATCH: u16 = 4;

fn expect_err(buf: &[u8], want: (u16, u16)) -> DecodeError {
    let e = decode(buf).expect_err("must not decode");
    assert_eq!(error_for(&e), want, "{e}");
    e
}

fn fix_len(mut v: Vec<u8>) -> Vec<u8> {
    let n = v.len() as u16;
    v[2..4].copy_from_slice(&n.to_be_bytes());
    v
}

/// A flow-mod whose match TLVs (unpadded) and instruction bytes are given.
fn flow_mod_with(oxms: &[u8], instructions: &[u8]) -> Vec<u8> {
    let base = encode_to_vec(&Message::new(
        7,
        Body::FlowMod(FlowMod::add(0, 1, &offlow_flow::Match::ANY, vec![])),
    ))
    .unwrap();
    let mut v = base[..48].to_vec();
    let mlen = 4 + oxms.len();
    v.extend_from_slice(&1u16.to_be_bytes());
    v.extend_from_slice(&(mlen as u16).to_be_bytes());
    v.extend_from_slice(oxms);
    v.resize(48 + mlen.div_ceil(8) * 8, 0);
    v.extend_from_slice(instructions);
    fix_len(v)
}

fn oxm(field: Field, has_mask: bool, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![
        0x80,
        0x00,
        (field.oxm() << 1) | u8::from(has_mask),
        payload.len() as u8,
    ];
    v.extend_from_slice(payload);
    v
}

fn apply_actions(actions: &[u8]) -> Vec<u8> {
    let mut v = vec![0, 4];
    v.extend_from_slice(&((8 + actions.len()) as u16).to_be_bytes());
    v.extend_from_slice(&[0; 4]);
    v.extend_from_slice(actions);
    v
}

fn ipv4_tcp() -> Vec<u8> {
    [
        oxm(Field::EthType, false, &[0x08, 0x00]),
        oxm(Field::IpProto, false, &[6]),
    ]
    .concat()
}

#[test]
fn truncated_header() {
    let e = expect_err(&[4, 0, 0], (BAD_REQUEST, BadRequestCode::BadLen as u16));
    assert_eq!(e, DecodeError::Truncated { need: 8, have: 3 });
    assert_eq!(frame_len(&[4, 0, 0]), Ok(None));
}

#[test]
fn length_field_below_header() {
    let buf = [4, 0, 0, 4, 0, 0, 0, 1];
    expect_err(&buf, (BAD_REQUEST, BadRequestCode::BadLen as u16));
    assert!(frame_len(&buf).is_err());
}

#[test]
fn length_field_beyond_buffer_is_truncated() {
    let buf = [4, 2, 0, 16, 0, 0, 0, 1, 0xaa];
    assert_eq!(frame_len(&buf), Ok(Some(16)));
    assert_eq!(
        decode(&buf),
        Err(DecodeError::Truncated { need: 16, have: 9 })
    );
}

#[test]
fn fixed_size_message_with_wrong_length() {
    // FEATURES_REQUEST must be exactly the header.
    expect_err(
        &fix_len(vec![4, 5, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0]),
        (BAD_REQUEST, BadRequestCode::BadLen as u16),
    );
    // SET_CONFIG one byte short.
    expect_err(
        &fix_len(vec![4, 9, 0, 0, 0, 0, 0, 1, 0, 0, 0]),
        (BAD_REQUEST, BadRequestCode::BadLen as u16),
    );
}

#[test]
fn decode_stops_at_length_field() {
    // Two echo requests back to back: decode takes only the first.
    let mut buf = vec![4, 2, 0, 10, 0, 0, 0, 1, 0xab, 0xcd];
    buf.extend_from_slice(&[4, 2, 0, 8, 0, 0, 0, 2]);
    let m = decode(&buf).unwrap();
    assert_eq!(m.body, Body::EchoRequest(vec![0xab, 0xcd]));
    assert_eq!(decode(&buf[10..]).unwrap().xid, 2);
}

#[test]
fn unknown_type() {
    expect_err(
        &[4, 30, 0, 8, 0, 0, 0, 1],
        (BAD_REQUEST, BadRequestCode::BadType as u16),
    );
}

#[test]
fn bad_version_except_hello() {
    expect_err(
        &[1, 20, 0, 8, 0, 0, 0, 1],
        (BAD_REQUEST, BadRequestCode::BadVersion as u16),
    );
    let hello = decode(&[1, 0, 0, 8, 0, 0, 0, 1]).unwrap();
    assert_eq!(hello.version, 1);
    assert_eq!(hello.body, Body::Hello(Hello::default()));
}

#[test]
fn hello_elements() {
    // Unknown element (type 9, 5 bytes + 3 padding) then a version bitmap.
    let buf = fix_len(vec![
        4, 0, 0, 0, 0, 0, 0, 1, 0, 9, 0, 5, 0xee, 0, 0, 0, 0, 1, 0, 8, 0, 0, 0, 0x12,
    ]);
    let m = decode(&buf).unwrap();
    let Body::Hello(h) = &m.body else { panic!() };
    assert_eq!(h.version_bitmap(), Some(&[0x12u32][..]));
    assert_eq!(encode_to_vec(&m).unwrap(), buf);
    // Element length 2 (< header).
    expect_err(
        &fix_len(vec![4, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0, 2, 0, 0, 0, 0]),
        (BAD_REQUEST, BadRequestCode::BadLen as u16),
    );
}

#[test]
fn unknown_multipart_type() {
    expect_err(
        &fix_len(vec![4, 18, 0, 0, 0, 0, 0, 1, 0, 99, 0, 0, 0, 0, 0, 0]),
        (BAD_REQUEST, BadRequestCode::BadMultipart as u16),
    );
}

#[test]
fn valid_flow_mod_decodes() {
    let buf = flow_mod_with(
        &[ipv4_tcp(), oxm(Field::TcpDst, false, &[0, 80])].concat(),
        &apply_actions(&[0, 0, 0, 16, 0, 0, 0, 1, 0xff, 0xff, 0, 0, 0, 0, 0, 0]),
    );
    let m = decode(&buf).unwrap();
    let Body::FlowMod(fm) = &m.body else { panic!() };
    assert_eq!(fm.matcher.fields.len(), 3);
    assert_eq!(fm.matcher.to_match().field(Field::TcpDst), (80, 0xffff));
    assert_eq!(encode_to_vec(&m).unwrap(), buf);
}

#[test]
fn bad_oxm_length() {
    expect_err(
        &flow_mod_with(
            &[ipv4_tcp(), oxm(Field::TcpDst, false, &[0, 80, 0])].concat(),
            &[],
        ),
        (BAD_MATCH, BadMatchCode::BadLen as u16),
    );
    // TLV running past the match length.
    let mut t = oxm(Field::InPort, false, &[0, 0, 0, 1]);
    t[3] = 9;
    expect_err(
        &flow_mod_with(&t, &[]),
        (BAD_MATCH, BadMatchCode::BadLen as u16),
    );
}

#[test]
fn match_length_past_message() {
    let mut buf = flow_mod_with(&[], &[]);
    buf[50..52].copy_from_slice(&200u16.to_be_bytes());
    expect_err(&buf, (BAD_MATCH, BadMatchCode::BadLen as u16));
}

#[test]
fn match_type_standard_refused() {
    let mut buf = flow_mod_with(&[], &[]);
    buf[48..50].copy_from_slice(&0u16.to_be_bytes());
    expect_err(&buf, (BAD_MATCH, BadMatchCode::BadType as u16));
}

#[test]
fn duplicate_field() {
    let p = oxm(Field::InPort, false, &[0, 0, 0, 1]);
    expect_err(
        &flow_mod_with(&[p.clone(), p].concat(), &[]),
        (BAD_MATCH, BadMatchCode::DupField as u16),
    );
}

#[test]
fn prerequisite_violated() {
    // tcp_dst without ip_proto=6.
    let t = [
        oxm(Field::EthType, false, &[0x08, 0x00]),
        oxm(Field::TcpDst, false, &[0, 80]),
    ]
    .concat();
    expect_err(
        &flow_mod_with(&t, &[]),
        (BAD_MATCH, BadMatchCode::BadPrereq as u16),
    );
    // udp_src under ip_proto=6 (shares storage with tcp_src).
    let t = [ipv4_tcp(), oxm(Field::UdpSrc, false, &[0, 53])].concat();
    expect_err(
        &flow_mod_with(&t, &[]),
        (BAD_MATCH, BadMatchCode::BadPrereq as u16),
    );
    // tcp_src and udp_src together.
    let t = [
        ipv4_tcp(),
        oxm(Field::TcpSrc, false, &[0, 1]),
        oxm(Field::UdpSrc, false, &[0, 53]),
    ]
    .concat();
    expect_err(
        &flow_mod_with(&t, &[]),
        (BAD_MATCH, BadMatchCode::BadPrereq as u16),
    );
}

#[test]
fn mask_errors() {
    // in_port may not be masked.
    expect_err(
        &flow_mod_with(&oxm(Field::InPort, true, &[0, 0, 0, 1, 0, 0, 0, 1]), &[]),
        (BAD_MATCH, BadMatchCode::BadMask as u16),
    );
    // value bit outside the mask.
    let t = [
        oxm(Field::EthType, false, &[0x08, 0x00]),
        oxm(Field::Ipv4Src, true, &[10, 0, 0, 1, 255, 0, 0, 0]),
    ]
    .concat();
    expect_err(
        &flow_mod_with(&t, &[]),
        (BAD_MATCH, BadMatchCode::BadWildcards as u16),
    );
    // mask wider than the field (vlan_vid is 13 bits).
    expect_err(
        &flow_mod_with(&oxm(Field::VlanVid, true, &[0x10, 0, 0xff, 0xff]), &[]),
        (BAD_MATCH, BadMatchCode::BadMask as u16),
    );
    // value wider than the field (vlan_pcp is 3 bits).
    let t = [
        oxm(Field::VlanVid, false, &[0x10, 1]),
        oxm(Field::VlanPcp, false, &[8]),
    ]
    .concat();
    expect_err(
        &flow_mod_with(&t, &[]),
        (BAD_MATCH, BadMatchCode::BadValue as u16),
    );
}

#[test]
fn unknown_and_experimenter_oxm() {
    // Experimenter class with its id.
    let t = [0xff, 0xff, 0x02, 8, 0, 0, 0x23, 0x20, 0, 0, 0, 1];
    expect_err(
        &flow_mod_with(&t, &[]),
        (BAD_MATCH, BadMatchCode::BadField as u16),
    );
    // Experimenter class too short for its id.
    let t = [0xff, 0xff, 0x02, 2, 0, 0];
    expect_err(
        &flow_mod_with(&t, &[]),
        (BAD_MATCH, BadMatchCode::BadLen as u16),
    );
    // NXM_1 class.
    let t = [0x00, 0x01, 0x02, 4, 0, 0, 0, 1];
    expect_err(
        &flow_mod_with(&t, &[]),
        (BAD_MATCH, BadMatchCode::BadField as u16),
    );
    // Basic field 40 does not exist in 1.3.
    let t = [0x80, 0x00, 40 << 1, 1, 0];
    expect_err(
        &flow_mod_with(&t, &[]),
        (BAD_MATCH, BadMatchCode::BadField as u16),
    );
}

#[test]
fn bad_action_length() {
    // Output action with length 12 (not a multiple of 8), in an
    // instruction of valid length.
    let a = [0, 0, 0, 12, 0, 0, 0, 1, 0xff, 0xff, 0, 0, 0, 0, 0, 0];
    expect_err(
        &flow_mod_with(&[], &apply_actions(&a)),
        (BAD_ACTION, BadActionCode::BadLen as u16),
    );
    // Output action with length 8 (too short for its type).
    let a = [0, 0, 0, 8, 0, 0, 0, 1];
    expect_err(
        &flow_mod_with(&[], &apply_actions(&a)),
        (BAD_ACTION, BadActionCode::BadLen as u16),
    );
    // Action length 0 must not loop.
    let a = [0, 0, 0, 0, 0, 0, 0, 0];
    expect_err(
        &flow_mod_with(&[], &apply_actions(&a)),
        (BAD_ACTION, BadActionCode::BadLen as u16),
    );
}

#[test]
fn unknown_action_type() {
    let a = [0, 99, 0, 8, 0, 0, 0, 0];
    expect_err(
        &flow_mod_with(&[], &apply_actions(&a)),
        (BAD_ACTION, BadActionCode::BadType as u16),
    );
}

#[test]
fn set_field_errors() {
    // set-field with a mask.
    let mut a = vec![0, 25, 0, 16];
    a.extend(oxm(Field::EthDst, true, &[0; 12]));
    a.resize(16, 0);
    a[3] = 24;
    a.resize(24, 0);
    expect_err(
        &flow_mod_with(&[], &apply_actions(&a)),
        (BAD_ACTION, BadActionCode::BadSetArgument as u16),
    );
    // set-field of a non-basic class.
    let a = [0, 25, 0, 16, 0, 1, 2, 4, 0, 0, 0, 1, 0, 0, 0, 0];
    expect_err(
        &flow_mod_with(&[], &apply_actions(&a)),
        (BAD_ACTION, BadActionCode::BadSetType as u16),
    );
    // OXM length disagreeing with the field.
    let a = [0, 25, 0, 16, 0x80, 0, 3 << 1, 4, 0, 0, 0, 1, 0, 0, 0, 0];
    expect_err(
        &flow_mod_with(&[], &apply_actions(&a)),
        (BAD_ACTION, BadActionCode::BadSetLen as u16),
    );
}

#[test]
fn instruction_errors() {
    expect_err(
        &flow_mod_with(&[], &[0, 9, 0, 8, 0, 0, 0, 0]),
        (BAD_INSTRUCTION, BadInstructionCode::UnknownInst as u16),
    );
    expect_err(
        &flow_mod_with(&[], &[0, 1, 0, 4, 1, 0, 0, 0]),
        (BAD_INSTRUCTION, BadInstructionCode::BadLen as u16),
    );
    // write-metadata must be exactly 24 bytes.
    expect_err(
        &flow_mod_with(&[], &[0, 2, 0, 16, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]),
        (BAD_INSTRUCTION, BadInstructionCode::BadLen as u16),
    );
}

#[test]
fn bad_bucket_length() {
    // group-mod with a bucket claiming 8 bytes.
    let buf = fix_len(vec![
        4, 15, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 8, 0, 0, 0, 0, 0, 0,
    ]);
    expect_err(&buf, (6, GroupModFailedCode::BadBucket as u16));
}

/// An unknown command decodes (the connection refuses it with
/// `OFPFMFC_BAD_COMMAND`, see tests/conn.rs; the conversion to the pipeline
/// too, see offlow-pipeline's tests/convert.rs).
#[test]
fn flow_mod_bad_command() {
    let mut fm = FlowMod::add(0, 1, &offlow_flow::Match::ANY, vec![]);
    assert!(fm.command_known());
    fm.command = 9;
    assert!(!fm.command_known());
}

#[test]
fn error_reply_carries_first_64_bytes() {
    let buf = flow_mod_with(
        &[ipv4_tcp(), oxm(Field::TcpDst, false, &[0, 80, 0])].concat(),
        &[],
    );
    assert!(buf.len() > 64);
    let e = decode(&buf).unwrap_err();
    let reply = error_reply(&e, &buf);
    assert_eq!(reply.xid, 7);
    let Body::Error(ErrorMsg::Standard { error, data }) = &reply.body else {
        panic!()
    };
    assert_eq!(*error, OfError::BadMatch(BadMatchCode::BadLen));
    assert_eq!(&data[..], &buf[..64]);
    // Short request: all of it, and nothing past its length field.
    let mut two = vec![4, 30, 0, 8, 0, 0, 0, 9];
    two.extend_from_slice(&[4, 2, 0, 8, 0, 0, 0, 10]);
    let e = decode(&two).unwrap_err();
    let reply = error_reply(&e, &two);
    let Body::Error(ErrorMsg::Standard { data, .. }) = &reply.body else {
        panic!()
    };
    assert_eq!(&data[..], &two[..8]);
    // The reply itself encodes and decodes.
    let bytes = encode_to_vec(&reply).unwrap();
    assert_eq!(decode(&bytes).unwrap(), reply);
}

#[test]
fn error_codes_roundtrip_wire_values() {
    for t in 0u16..16 {
        for c in 0u16..20 {
            assert_eq!(OfError::from_wire(t, c).wire(), (t, c));
        }
    }
    assert_eq!(
        OfError::from_wire(1, 6),
        OfError::BadRequest(BadRequestCode::BadLen)
    );
    assert_eq!(
        OfError::from_wire(4, 10),
        OfError::BadMatch(BadMatchCode::DupField)
    );
    assert_eq!(
        OfError::from_wire(13, 5),
        OfError::TableFeaturesFailed(TableFeaturesFailedCode::Eperm)
    );
    assert!(matches!(OfError::from_wire(1, 14), OfError::Unknown { .. }));
}

#[test]
fn encode_appends_and_refuses_oversize() {
    // Appends after existing bytes (poison prefix untouched).
    let mut out = vec![0xa5; 5];
    let n = encode(&Message::new(1, Body::BarrierRequest), &mut out).unwrap();
    assert_eq!(n, 8);
    assert_eq!(out, [0xa5, 0xa5, 0xa5, 0xa5, 0xa5, 4, 20, 0, 8, 0, 0, 0, 1]);
    // 65536 bytes do not fit the u16 length: refused, buffer unchanged.
    let big = Message::new(1, Body::EchoRequest(vec![0; 65536 - 8]));
    assert_eq!(encode(&big, &mut out), Err(EncodeError::TooLong(65536)));
    assert_eq!(out.len(), 13);
    // Largest legal message.
    let max = Message::new(1, Body::EchoRequest(vec![7; 65535 - 8]));
    let bytes = encode_to_vec(&max).unwrap();
    assert_eq!(decode(&bytes).unwrap(), max);
    // Misaligned experimenter action data cannot be encoded.
    let po = Message::new(
        1,
        Body::PacketOut(PacketOut {
            buffer_id: OFP_NO_BUFFER,
            in_port: 1,
            actions: vec![Action::Experimenter {
                experimenter: 1,
                data: vec![1, 2, 3],
            }],
            data: vec![],
        }),
    );
    assert_eq!(
        encode_to_vec(&po),
        Err(EncodeError::Misaligned("experimenter action"))
    );
}

#[test]
fn nested_multipart_lengths() {
    // Flow stats entry claiming 8 bytes.
    let mut v = vec![4, 19, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0];
    v.extend_from_slice(&[0, 8, 0, 0, 0, 0, 0, 0]);
    expect_err(&fix_len(v), (BAD_REQUEST, BadRequestCode::BadLen as u16));
    // Port stats reply with a partial record.
    let mut v = vec![4, 19, 0, 0, 0, 0, 0, 1, 0, 4, 0, 0, 0, 0, 0, 0];
    v.extend_from_slice(&[0; 100]);
    expect_err(&fix_len(v), (BAD_REQUEST, BadRequestCode::BadLen as u16));
    // Table features property running past its table entry.
    let mut v = vec![4, 18, 0, 0, 0, 0, 0, 1, 0, 12, 0, 0, 0, 0, 0, 0];
    let mut tf = vec![0u8; 64];
    tf[1] = 72;
    tf.extend_from_slice(&[0, 0, 0, 12, 0, 0, 0, 0]);
    v.extend_from_slice(&tf);
    expect_err(&fix_len(v), (13, TableFeaturesFailedCode::BadLen as u16));
    // Packet queue shorter than its header.
    let mut v = vec![4, 23, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0];
    v.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1, 0, 8, 0, 0, 0, 0, 0, 0]);
    expect_err(&fix_len(v), (BAD_REQUEST, BadRequestCode::BadLen as u16));
    // Packet-out whose actions_len runs past the message.
    let v = vec![
        4, 13, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 1, 0, 64, 0, 0, 0, 0, 0, 0,
    ];
    expect_err(&fix_len(v), (BAD_REQUEST, BadRequestCode::BadLen as u16));
}
