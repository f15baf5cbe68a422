//! The connection state machine driven by scripted controller sessions
//! (bytes built with the codec) against a recording test switch.

use offlow_flow::{Field, Match};
use offlow_openflow::multipart::{MultipartReplyBody as RB, MultipartRequestBody as QB};
use offlow_openflow::*;
use proptest::prelude::*;

const SEC: u64 = 1_000_000_000;

// A test recorder: size does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
enum Call {
    FlowMod(FlowMod, u64),
    Barrier,
    Multipart(QB),
    PacketOut(PacketOut),
    PortMod(PortMod),
    Begin(Need),
}

/// A switch that records every call; refuses flow-mods to tables beyond
/// `n_tables` (as the pipeline does) and serves `n_flows` flow stats.
#[derive(Debug, Clone, Default)]
struct TestSwitch {
    calls: Vec<Call>,
    n_flows: usize,
    /// Answer every [`Need`] with a ticket that is done only once
    /// `done_up_to` reaches it (tickets count from 1).
    defer: bool,
    tickets: u64,
    done_up_to: u64,
}

const N_TABLES: u8 = 4;

fn flow_stats(i: usize) -> FlowStats {
    let mut m = Match::ANY;
    m.set_exact(Field::EthType, 0x0800)
        .set_exact(Field::IpProto, 6)
        .set_exact(Field::Ipv4Src, i as u128)
        .set_exact(Field::TcpDst, 80);
    FlowStats {
        table_id: 0,
        duration_sec: i as u32,
        duration_nsec: 0,
        priority: 100,
        idle_timeout: 0,
        hard_timeout: 0,
        flags: 0,
        cookie: i as u64,
        packet_count: 2 * i as u64,
        byte_count: 3 * i as u64,
        matcher: OxmMatch::from_match(&m),
        instructions: vec![Instruction::ApplyActions(vec![Action::Output {
            port: 1,
            max_len: 0,
        }])],
    }
}

impl Switch for TestSwitch {
    fn features(&self) -> SwitchFeatures {
        SwitchFeatures {
            datapath_id: 0x0102_0304_0506_0708,
            n_buffers: 0,
            n_tables: N_TABLES,
            // Garbage the connection must overwrite.
            auxiliary_id: 9,
            capabilities: 0x4f,
            reserved: 7,
        }
    }

    fn flow_mod(&mut self, fm: &FlowMod, now_ns: u64) -> Result<(), OfError> {
        self.calls.push(Call::FlowMod(fm.clone(), now_ns));
        if fm.table_id >= N_TABLES {
            return Err(OfError::FlowModFailed(FlowModFailedCode::BadTableId));
        }
        Ok(())
    }

    fn barrier(&mut self) {
        self.calls.push(Call::Barrier);
    }

    fn multipart(&mut self, req: &QB, _now_ns: u64) -> Result<RB, OfError> {
        self.calls.push(Call::Multipart(req.clone()));
        Ok(match req {
            QB::Desc => RB::Desc(Box::new(Desc {
                mfr_desc: FixedStr::new("offlow"),
                ..Default::default()
            })),
            QB::Flow(_) => RB::Flow((0..self.n_flows).map(flow_stats).collect()),
            QB::Aggregate(_) => RB::Aggregate {
                packet_count: 1,
                byte_count: 2,
                flow_count: self.n_flows as u32,
            },
            QB::Table => RB::Table(vec![]),
            QB::PortStats(_) => RB::PortStats(vec![PortStats::default()]),
            QB::Queue { .. } => RB::Queue(vec![]),
            QB::TableFeatures(_) => RB::TableFeatures(vec![]),
            QB::PortDesc => RB::PortDesc(vec![Port::default()]),
            QB::Experimenter(_)
            | QB::GroupStats(_)
            | QB::GroupDesc
            | QB::GroupFeatures
            | QB::MeterStats(_)
            | QB::MeterConfig(_)
            | QB::MeterFeatures => return Err(OfError::BadRequest(BadRequestCode::BadMultipart)),
        })
    }

    fn packet_out(&mut self, po: &PacketOut) -> Result<(), OfError> {
        self.calls.push(Call::PacketOut(po.clone()));
        Ok(())
    }

    fn port_mod(&mut self, pm: &PortMod) -> Result<(), OfError> {
        self.calls.push(Call::PortMod(*pm));
        Ok(())
    }

    fn begin(&mut self, need: Need, _now_ns: u64) -> Option<Ticket> {
        if !self.defer {
            return None;
        }
        self.calls.push(Call::Begin(need));
        self.tickets += 1;
        Some(self.tickets)
    }

    fn is_done(&mut self, ticket: Ticket, _now_ns: u64) -> bool {
        ticket <= self.done_up_to
    }
}

fn enc(xid: u32, body: Body) -> Vec<u8> {
    encode_to_vec(&Message::new(xid, body)).unwrap()
}

/// Split an outbox into frames and decode each with our codec.
fn frames(bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let n = frame_len(rest).unwrap().expect("whole header");
        assert!(n <= rest.len(), "partial message in outbox");
        out.push(rest[..n].to_vec());
        rest = &rest[n..];
    }
    out
}

fn drain(c: &mut Connection) -> Vec<Message> {
    let mut b = Vec::new();
    c.poll_transmit(&mut b);
    frames(&b)
        .iter()
        .map(|f| decode(f).expect("every reply decodes"))
        .collect()
}

fn error_of(m: &Message) -> (OfError, Vec<u8>) {
    match &m.body {
        Body::Error(ErrorMsg::Standard { error, data }) => (*error, data.clone()),
        other => panic!("expected an error, got {other:?}"),
    }
}

/// A test bench: one switch, shared roles, any number of connections.
struct Bench {
    sw: TestSwitch,
    roles: Roles,
    now: u64,
}

impl Bench {
    fn new() -> Bench {
        Bench {
            sw: TestSwitch::default(),
            roles: Roles::new(),
            now: 1000 * SEC,
        }
    }

    fn connect(&mut self, config: ConnConfig) -> Connection {
        let id = self.roles.register();
        let mut c = Connection::new(config, id, self.now);
        let hello = drain(&mut c);
        assert_eq!(hello.len(), 1);
        assert_eq!(hello[0].version, 0x04);
        assert_eq!(hello[0].body, Body::Hello(Hello::of13()));
        c
    }

    /// A connection after a successful HELLO exchange.
    fn established(&mut self) -> Connection {
        let mut c = self.connect(ConnConfig::default());
        self.feed(&mut c, &enc(1, Body::Hello(Hello::of13())));
        assert!(c.is_negotiated());
        assert!(drain(&mut c).is_empty());
        c
    }

    fn feed(&mut self, c: &mut Connection, bytes: &[u8]) {
        c.receive(bytes, self.now, &mut self.sw, &mut self.roles);
    }

    /// Send one message, return the decoded replies.
    fn ask(&mut self, c: &mut Connection, xid: u32, body: Body) -> Vec<Message> {
        self.feed(c, &enc(xid, body));
        drain(c)
    }
}

fn hello_with(version: u8, bitmap: Option<u32>) -> Vec<u8> {
    let elements = bitmap
        .map(|b| vec![HelloElement::VersionBitmap(vec![b])])
        .unwrap_or_default();
    encode_to_vec(&Message {
        version,
        xid: 77,
        body: Body::Hello(Hello { elements }),
    })
    .unwrap()
}

// ---------- handshake ----------

#[test]
fn hello_negotiates_13() {
    // (peer header version, peer bitmap)
    for (v, bm) in [
        (4, Some(1 << 4)),
        (6, Some((1 << 1) | (1 << 4) | (1 << 6))),
        (4, None),
        (5, None),
    ] {
        let mut b = Bench::new();
        let mut c = b.connect(ConnConfig::default());
        assert!(!c.is_negotiated());
        b.feed(&mut c, &hello_with(v, bm));
        assert!(c.is_negotiated(), "v={v} bitmap={bm:?}");
        assert!(!c.is_closed());
        assert!(drain(&mut c).is_empty());
    }
}

/// Parse an OFPT_ERROR by hand (the codec refuses non-1.3 versions).
fn raw_error(frame: &[u8]) -> (u8, u32, u16, u16, Vec<u8>) {
    assert_eq!(frame[1], msg_type::ERROR);
    assert_eq!(
        usize::from(u16::from_be_bytes([frame[2], frame[3]])),
        frame.len()
    );
    (
        frame[0],
        u32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]),
        u16::from_be_bytes([frame[8], frame[9]]),
        u16::from_be_bytes([frame[10], frame[11]]),
        frame[12..].to_vec(),
    )
}

#[test]
fn hello_incompatible_closes() {
    // (peer version, peer bitmap): an OpenFlow 1.0-only peer, a 1.0/1.2
    // bitmap, a 1.5-only bitmap with a higher header version.
    for (v, bm) in [(1, None), (3, Some((1 << 1) | (1 << 3))), (6, Some(1 << 6))] {
        let mut b = Bench::new();
        let mut c = b.connect(ConnConfig::default());
        b.feed(&mut c, &hello_with(v, bm));
        assert!(!c.is_negotiated());
        assert_eq!(c.close_reason(), Some(&CloseReason::Incompatible(v)));
        let mut out = Vec::new();
        c.poll_transmit(&mut out);
        let f = frames(&out);
        assert_eq!(f.len(), 1);
        let (ver, xid, t, code, data) = raw_error(&f[0]);
        // Readable by the peer: its version when lower than ours.
        assert_eq!(ver, v.min(4));
        assert_eq!(xid, 77);
        assert_eq!(
            (t, code),
            (0, 0),
            "OFPET_HELLO_FAILED / OFPHFC_INCOMPATIBLE"
        );
        let text = String::from_utf8(data).unwrap();
        assert!(text.is_ascii() && text.contains("1.3"), "{text}");
        // Closed: further input is ignored, timers are off.
        b.feed(&mut c, &enc(2, Body::FeaturesRequest));
        assert!(drain(&mut c).is_empty());
        assert_eq!(c.poll_timeout(), None);
    }
}

#[test]
fn message_before_hello_fails_handshake() {
    let mut b = Bench::new();
    let mut c = b.connect(ConnConfig::default());
    b.feed(&mut c, &enc(5, Body::FeaturesRequest));
    assert_eq!(
        c.close_reason(),
        Some(&CloseReason::NoHello(msg_type::FEATURES_REQUEST))
    );
    let out = drain(&mut c);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].xid, 5);
    assert_eq!(
        error_of(&out[0]).0,
        OfError::HelloFailed(HelloFailedCode::Incompatible)
    );
    assert!(b.sw.calls.is_empty());
}

#[test]
fn wrong_version_after_negotiation() {
    let mut b = Bench::new();
    let mut c = b.established();
    // A 1.0 echo request after negotiating 1.3.
    let mut req = enc(9, Body::EchoRequest(vec![1, 2]));
    req[0] = 1;
    b.feed(&mut c, &req);
    let out = drain(&mut c);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].xid, 9);
    assert_eq!(
        error_of(&out[0]),
        (OfError::BadRequest(BadRequestCode::BadVersion), req.clone())
    );
    // A second HELLO: ignored at 1.3, refused at another version.
    assert!(b.ask(&mut c, 10, Body::Hello(Hello::of13())).is_empty());
    let h = hello_with(5, None);
    b.feed(&mut c, &h);
    let out = drain(&mut c);
    assert_eq!(
        error_of(&out[0]).0,
        OfError::BadRequest(BadRequestCode::BadVersion)
    );
    assert!(!c.is_closed());
}

// ---------- echo and liveness ----------

#[test]
fn echo_request_is_answered() {
    let mut b = Bench::new();
    let mut c = b.established();
    let out = b.ask(&mut c, 0xdead, Body::EchoRequest(b"ping!".to_vec()));
    assert_eq!(
        out,
        vec![Message::new(0xdead, Body::EchoReply(b"ping!".to_vec()))]
    );
}

#[test]
fn liveness_echo_then_timeout() {
    let mut b = Bench::new();
    let cfg = ConnConfig {
        echo_interval_ns: 5 * SEC,
        echo_timeout_ns: 3 * SEC,
        ..ConnConfig::default()
    };
    let mut c = b.connect(cfg);
    b.feed(&mut c, &enc(1, Body::Hello(Hello::of13())));
    let t0 = b.now;
    assert_eq!(c.poll_timeout(), Some(t0 + 5 * SEC));
    // Early: nothing.
    c.handle_timeout(t0 + 4 * SEC);
    assert!(drain(&mut c).is_empty());
    // Silence for the interval: we probe.
    c.handle_timeout(t0 + 5 * SEC);
    let out = drain(&mut c);
    assert_eq!(out.len(), 1);
    let Body::EchoRequest(_) = out[0].body else {
        panic!("expected echo request, got {:?}", out[0]);
    };
    assert_eq!(c.poll_timeout(), Some(t0 + 8 * SEC));
    // The controller answers at t0+6: the probe cycle restarts from there.
    b.now = t0 + 6 * SEC;
    b.feed(&mut c, &enc(out[0].xid, Body::EchoReply(vec![])));
    assert_eq!(c.poll_timeout(), Some(t0 + 11 * SEC));
    c.handle_timeout(t0 + 8 * SEC);
    assert!(!c.is_closed());
    // Next probe at t0+11, unanswered: closed at t0+14.
    c.handle_timeout(t0 + 11 * SEC);
    assert_eq!(drain(&mut c).len(), 1);
    c.handle_timeout(t0 + 14 * SEC - 1);
    assert!(!c.is_closed());
    c.handle_timeout(t0 + 14 * SEC);
    assert_eq!(c.close_reason(), Some(&CloseReason::EchoTimeout));
    assert_eq!(c.poll_timeout(), None);
}

#[test]
fn hello_timeout() {
    let mut b = Bench::new();
    let cfg = ConnConfig {
        echo_interval_ns: 5 * SEC,
        echo_timeout_ns: 3 * SEC,
        ..ConnConfig::default()
    };
    let mut c = b.connect(cfg);
    c.handle_timeout(b.now + 8 * SEC - 1);
    assert!(!c.is_closed());
    // No echo before the handshake.
    assert!(drain(&mut c).is_empty());
    c.handle_timeout(b.now + 8 * SEC);
    assert_eq!(c.close_reason(), Some(&CloseReason::HelloTimeout));
}

// ---------- features / config ----------

#[test]
fn features_and_config() {
    let mut b = Bench::new();
    let mut c = b.established();
    let out = b.ask(&mut c, 3, Body::FeaturesRequest);
    assert_eq!(
        out,
        vec![Message::new(
            3,
            Body::FeaturesReply(SwitchFeatures {
                datapath_id: 0x0102_0304_0506_0708,
                n_buffers: 0,
                n_tables: N_TABLES,
                auxiliary_id: 0,
                capabilities: 0x4f,
                reserved: 0,
            })
        )]
    );
    let out = b.ask(&mut c, 4, Body::GetConfigRequest);
    assert_eq!(
        out[0].body,
        Body::GetConfigReply(SwitchConfig {
            flags: 0,
            miss_send_len: 128
        })
    );
    let new = SwitchConfig {
        flags: 1,
        miss_send_len: 0xffff,
    };
    assert!(b.ask(&mut c, 5, Body::SetConfig(new)).is_empty());
    assert_eq!(c.miss_send_len(), 0xffff);
    assert_eq!(
        b.ask(&mut c, 6, Body::GetConfigRequest)[0].body,
        Body::GetConfigReply(new)
    );
    // Undefined flag bits are refused and nothing changes.
    let out = b.ask(
        &mut c,
        7,
        Body::SetConfig(SwitchConfig {
            flags: 0x10,
            miss_send_len: 1,
        }),
    );
    assert_eq!(
        error_of(&out[0]).0,
        OfError::SwitchConfigFailed(SwitchConfigFailedCode::BadFlags)
    );
    assert_eq!(c.switch_config(), new);
}

// ---------- flow-mod, errors ----------

fn flow_mod(table: u8) -> Body {
    let mut m = Match::ANY;
    m.set_exact(Field::EthType, 0x0800)
        .set_prefix(Field::Ipv4Dst, 0x0a00_0000, 8);
    Body::FlowMod(FlowMod::add(
        table,
        10,
        &m,
        vec![Instruction::ApplyActions(vec![Action::Output {
            port: 2,
            max_len: 0,
        }])],
    ))
}

#[test]
fn flow_mod_applied() {
    let mut b = Bench::new();
    let mut c = b.established();
    let Body::FlowMod(fm) = flow_mod(1) else {
        unreachable!()
    };
    assert!(b.ask(&mut c, 11, flow_mod(1)).is_empty());
    assert_eq!(b.sw.calls, vec![Call::FlowMod(fm, b.now)]);
}

#[test]
fn flow_mod_refused_with_first_64_bytes() {
    let mut b = Bench::new();
    let mut c = b.established();
    let req = enc(12, flow_mod(9));
    assert!(req.len() > 64, "the test needs a long request");
    b.feed(&mut c, &req);
    let out = drain(&mut c);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].xid, 12);
    assert_eq!(
        error_of(&out[0]),
        (
            OfError::FlowModFailed(FlowModFailedCode::BadTableId),
            req[..64].to_vec()
        )
    );
    // Bad command: refused before reaching the switch.
    let mut bad = enc(13, flow_mod(0));
    bad[25] = 9; // command byte (header 8 + cookie 8 + mask 8 + table 1)
    b.feed(&mut c, &bad);
    let out = drain(&mut c);
    assert_eq!(
        error_of(&out[0]).0,
        OfError::FlowModFailed(FlowModFailedCode::BadCommand)
    );
    assert_eq!(b.sw.calls.len(), 1);
    assert!(!c.is_closed());
}

#[test]
fn decode_errors_keep_connection_but_bad_framing_closes() {
    let mut b = Bench::new();
    let mut c = b.established();
    // Unknown message type 200, valid framing.
    let unknown = [4u8, 200, 0, 8, 0, 0, 0, 42];
    b.feed(&mut c, &unknown);
    let out = drain(&mut c);
    assert_eq!(out[0].xid, 42);
    assert_eq!(
        error_of(&out[0]),
        (
            OfError::BadRequest(BadRequestCode::BadType),
            unknown.to_vec()
        )
    );
    // A flow-mod cut short (length says 16): BAD_LEN, and the next message
    // is still understood.
    let mut short = enc(43, flow_mod(0))[..16].to_vec();
    short[2..4].copy_from_slice(&16u16.to_be_bytes());
    short.extend_from_slice(&enc(44, Body::BarrierRequest));
    b.feed(&mut c, &short);
    let out = drain(&mut c);
    assert_eq!(
        error_of(&out[0]),
        (
            OfError::BadRequest(BadRequestCode::BadLen),
            short[..16].to_vec()
        )
    );
    assert_eq!(out[1], Message::new(44, Body::BarrierReply));
    // Experimenter message and a switch-only message.
    let out = b.ask(
        &mut c,
        45,
        Body::Experimenter(Experimenter {
            experimenter: 0x2320,
            exp_type: 1,
            data: vec![],
        }),
    );
    assert_eq!(
        error_of(&out[0]).0,
        OfError::BadRequest(BadRequestCode::BadExperimenter)
    );
    let out = b.ask(&mut c, 46, Body::BarrierReply);
    assert_eq!(
        error_of(&out[0]).0,
        OfError::BadRequest(BadRequestCode::BadType)
    );
    assert!(!c.is_closed());
    // Length 4 < 8: the stream is lost.
    b.feed(&mut c, &[4, 2, 0, 4, 0, 0, 0, 47, 1, 2, 3]);
    let out = drain(&mut c);
    assert_eq!(out.len(), 1);
    assert_eq!(
        error_of(&out[0]).0,
        OfError::BadRequest(BadRequestCode::BadLen)
    );
    assert_eq!(c.close_reason(), Some(&CloseReason::BadFraming));
}

// ---------- barrier ----------

#[test]
fn barrier_replies_in_order() {
    let mut b = Bench::new();
    let mut c = b.established();
    let mut script = Vec::new();
    script.extend(enc(1, Body::EchoRequest(vec![7])));
    script.extend(enc(2, flow_mod(0)));
    script.extend(enc(3, flow_mod(200)));
    script.extend(enc(4, Body::BarrierRequest));
    script.extend(enc(5, Body::FeaturesRequest));
    script.extend(enc(6, Body::BarrierRequest));
    b.feed(&mut c, &script);
    let out = drain(&mut c);
    let kinds: Vec<(u32, u8)> = out.iter().map(|m| (m.xid, m.body.msg_type())).collect();
    assert_eq!(
        kinds,
        vec![
            (1, msg_type::ECHO_REPLY),
            (3, msg_type::ERROR),
            (4, msg_type::BARRIER_REPLY),
            (5, msg_type::FEATURES_REPLY),
            (6, msg_type::BARRIER_REPLY),
        ]
    );
    // The switch saw both flow-mods before the first barrier.
    let shape: Vec<&str> =
        b.sw.calls
            .iter()
            .map(|c| match c {
                Call::FlowMod(..) => "fm",
                Call::Barrier => "barrier",
                _ => "other",
            })
            .collect();
    assert_eq!(shape, ["fm", "fm", "barrier", "barrier"]);
}

/// Requests that need the switch wait for it, in order: nothing behind a
/// waiting request is answered (not even an echo), bytes that arrive
/// meanwhile are kept, and each request asks the switch once.
#[test]
fn requests_wait_for_the_switch_in_order() {
    let mut b = Bench::new();
    let mut c = b.established();
    b.sw.defer = true;
    let mut script = Vec::new();
    script.extend(enc(1, flow_mod(0)));
    script.extend(enc(2, Body::EchoRequest(vec![2])));
    script.extend(enc(3, Body::BarrierRequest));
    script.extend(enc(4, Body::EchoRequest(vec![4])));
    script.extend(enc(5, flow_stats_request()));
    script.extend(enc(
        6,
        Body::MultipartRequest(MultipartRequest {
            flags: 0,
            body: QB::Desc,
        }),
    ));
    b.feed(&mut c, &script);
    assert!(
        c.is_waiting(),
        "the flow-mod waits for the switch to be writable"
    );
    assert!(drain(&mut c).is_empty());
    assert_eq!(b.sw.calls, vec![Call::Begin(Need::Write)]);

    // Not done yet: resuming changes nothing and asks nothing new.
    c.resume(b.now, &mut b.sw, &mut b.roles);
    assert!(c.is_waiting());
    assert!(drain(&mut c).is_empty());
    assert_eq!(b.sw.calls.len(), 1);

    b.sw.done_up_to = 1;
    c.resume(b.now, &mut b.sw, &mut b.roles);
    assert!(c.is_waiting(), "now the barrier waits for the commit");
    let out = drain(&mut c);
    assert_eq!(out.len(), 1);
    assert_eq!(
        (out[0].xid, out[0].body.msg_type()),
        (2, msg_type::ECHO_REPLY)
    );

    // Bytes arriving while waiting are kept for later, unanswered.
    b.feed(&mut c, &enc(7, Body::EchoRequest(vec![7])));
    assert!(drain(&mut c).is_empty());

    b.sw.done_up_to = 2;
    c.resume(b.now, &mut b.sw, &mut b.roles);
    assert!(c.is_waiting(), "now the flow stats wait for the counters");
    let kinds: Vec<(u32, u8)> = drain(&mut c)
        .iter()
        .map(|m| (m.xid, m.body.msg_type()))
        .collect();
    assert_eq!(
        kinds,
        vec![(3, msg_type::BARRIER_REPLY), (4, msg_type::ECHO_REPLY)]
    );

    b.sw.done_up_to = 3;
    c.resume(b.now, &mut b.sw, &mut b.roles);
    assert!(!c.is_waiting());
    let kinds: Vec<(u32, u8)> = drain(&mut c)
        .iter()
        .map(|m| (m.xid, m.body.msg_type()))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (5, msg_type::MULTIPART_REPLY),
            (6, msg_type::MULTIPART_REPLY),
            (7, msg_type::ECHO_REPLY)
        ]
    );
    let shape: Vec<String> =
        b.sw.calls
            .iter()
            .map(|c| match c {
                Call::FlowMod(..) => "fm".to_string(),
                Call::Barrier => "barrier".to_string(),
                Call::Multipart(QB::Flow(_)) => "flow-stats".to_string(),
                Call::Multipart(QB::Desc) => "desc".to_string(),
                Call::Begin(n) => format!("{n:?}"),
                other => format!("{other:?}"),
            })
            .collect();
    assert_eq!(
        shape,
        [
            "Write",
            "fm",
            "Commit",
            "barrier",
            "Counters",
            "flow-stats",
            "desc"
        ],
        "each need asked once, before its request is handled"
    );
    assert_eq!(
        c.stats().rx_msgs,
        1 + 7,
        "the HELLO and seven requests, each counted once"
    );
}

/// A connection closed while a request waits no longer waits: the
/// request went with its input (a caller looping on `is_waiting` stops).
#[test]
fn closing_ends_the_wait() {
    let mut b = Bench::new();
    let mut c = b.established();
    b.sw.defer = true;
    b.feed(&mut c, &enc(3, Body::BarrierRequest));
    assert!(c.is_waiting());
    c.close("switch stopping");
    assert!(!c.is_waiting());
    b.sw.done_up_to = u64::MAX;
    c.resume(b.now, &mut b.sw, &mut b.roles);
    assert!(drain(&mut c).is_empty(), "nothing answered after the close");
}

/// A ticket that is done at once costs nothing: the request is answered
/// in the same call.
#[test]
fn tickets_done_at_once_do_not_wait() {
    let mut b = Bench::new();
    let mut c = b.established();
    b.sw.defer = true;
    b.sw.done_up_to = u64::MAX;
    let out = b.ask(&mut c, 9, Body::BarrierRequest);
    assert!(!c.is_waiting());
    assert_eq!(
        (out[0].xid, out[0].body.msg_type()),
        (9, msg_type::BARRIER_REPLY)
    );
}

// ---------- multipart ----------

fn flow_stats_request() -> Body {
    Body::MultipartRequest(MultipartRequest {
        flags: 0,
        body: QB::Flow(FlowStatsRequest {
            table_id: 0xff,
            out_port: 0xffff_ffff,
            out_group: 0xffff_ffff,
            cookie: 0,
            cookie_mask: 0,
            matcher: OxmMatch::from_match(&Match::ANY),
        }),
    })
}

/// Check a split flow-stats reply; returns the number of messages.
fn check_flow_split(out: &[Message], xid: u32, n_flows: usize, max_len: usize) -> usize {
    let mut all = Vec::new();
    for (i, m) in out.iter().enumerate() {
        assert_eq!(m.xid, xid);
        let Body::MultipartReply(r) = &m.body else {
            panic!("not a multipart reply: {m:?}")
        };
        let last = i + 1 == out.len();
        assert_eq!(
            r.flags,
            if last { 0 } else { 1 },
            "REPLY_MORE on all but last"
        );
        assert!(encode_to_vec(m).unwrap().len() <= max_len);
        let RB::Flow(v) = &r.body else {
            panic!("not flow stats")
        };
        assert!(!v.is_empty());
        all.extend(v.iter().cloned());
    }
    let want: Vec<FlowStats> = (0..n_flows).map(flow_stats).collect();
    assert_eq!(all, want, "every entry once, in order");
    out.len()
}

#[test]
fn flow_stats_split_at_64k() {
    let mut b = Bench::new();
    let mut c = b.established();
    let entry = encode_to_vec(&Message::new(
        0,
        Body::MultipartReply(MultipartReply {
            flags: 0,
            body: RB::Flow(vec![flow_stats(1)]),
        }),
    ))
    .unwrap()
    .len()
        - 16;
    // Enough entries for a bit more than two full messages.
    let n = 2 * 65535 / entry + 5;
    b.sw.n_flows = n;
    let out = b.ask(&mut c, 21, flow_stats_request());
    assert_eq!(check_flow_split(&out, 21, n, 65535), 3);
}

#[test]
fn flow_stats_split_small_limit_and_single() {
    let mut b = Bench::new();
    let mut c = b.connect(ConnConfig {
        max_reply_len: 1000,
        ..ConnConfig::default()
    });
    b.feed(&mut c, &enc(1, Body::Hello(Hello::of13())));
    b.sw.n_flows = 50;
    let out = b.ask(&mut c, 22, flow_stats_request());
    assert!(check_flow_split(&out, 22, 50, 1000) > 5);
    // Zero flows: one empty, final reply.
    b.sw.n_flows = 0;
    let out = b.ask(&mut c, 23, flow_stats_request());
    assert_eq!(
        out,
        vec![Message::new(
            23,
            Body::MultipartReply(MultipartReply {
                flags: 0,
                body: RB::Flow(vec![])
            })
        )]
    );
}

#[test]
fn multipart_desc_and_unsupported() {
    let mut b = Bench::new();
    let mut c = b.established();
    let req = |body| Body::MultipartRequest(MultipartRequest { flags: 0, body });
    let out = b.ask(&mut c, 30, req(QB::Desc));
    let Body::MultipartReply(MultipartReply {
        flags: 0,
        body: RB::Desc(d),
    }) = &out[0].body
    else {
        panic!("{out:?}")
    };
    assert_eq!(d.mfr_desc.to_string_lossy(), "offlow");
    // Group stats: the switch has no groups.
    let out = b.ask(&mut c, 31, req(QB::GroupDesc));
    assert_eq!(
        error_of(&out[0]).0,
        OfError::BadRequest(BadRequestCode::BadMultipart)
    );
    // Experimenter multipart: never reaches the switch.
    let calls = b.sw.calls.len();
    let out = b.ask(
        &mut c,
        32,
        req(QB::Experimenter(Experimenter {
            experimenter: 1,
            exp_type: 2,
            data: vec![],
        })),
    );
    assert_eq!(
        error_of(&out[0]).0,
        OfError::BadRequest(BadRequestCode::BadExperimenter)
    );
    // A request announcing more parts: we keep no request buffer.
    let out = b.ask(
        &mut c,
        33,
        Body::MultipartRequest(MultipartRequest {
            flags: 1,
            body: QB::Table,
        }),
    );
    assert_eq!(
        error_of(&out[0]).0,
        OfError::BadRequest(BadRequestCode::MultipartBufferOverflow)
    );
    assert_eq!(b.sw.calls.len(), calls);
}

// ---------- roles ----------

fn role_req(role: u32, generation_id: u64) -> Body {
    Body::RoleRequest(Role {
        role,
        generation_id,
    })
}

fn role_reply(out: &[Message]) -> Role {
    match out {
        [Message {
            body: Body::RoleReply(r),
            ..
        }] => *r,
        other => panic!("expected one role reply, got {other:?}"),
    }
}

#[test]
fn roles_master_slave_generation() {
    use offlow_openflow::conn::role_wire::*;
    let mut b = Bench::new();
    let mut a = b.established();
    let mut c2 = b.established();
    // Equal by default; generation never set → all ones.
    assert_eq!(a.role(&b.roles), ControllerRole::Equal);
    let r = role_reply(&b.ask(&mut a, 1, role_req(NOCHANGE, 0)));
    assert_eq!(
        r,
        Role {
            role: EQUAL,
            generation_id: u64::MAX
        }
    );

    // A becomes master (generation 5).
    let r = role_reply(&b.ask(&mut a, 2, role_req(MASTER, 5)));
    assert_eq!(
        r,
        Role {
            role: MASTER,
            generation_id: 5
        }
    );
    assert_eq!(b.roles.master(), Some(a.id()));
    // B becomes master with generation 6: A is demoted.
    let r = role_reply(&b.ask(&mut c2, 3, role_req(MASTER, 6)));
    assert_eq!(
        r,
        Role {
            role: MASTER,
            generation_id: 6
        }
    );
    assert_eq!(a.role(&b.roles), ControllerRole::Slave);
    let r = role_reply(&b.ask(&mut a, 4, role_req(NOCHANGE, 0)));
    assert_eq!(r.role, SLAVE);

    // A (slave) may not write.
    let calls = b.sw.calls.len();
    let fm = enc(5, flow_mod(0));
    b.feed(&mut a, &fm);
    let out = drain(&mut a);
    assert_eq!(
        error_of(&out[0]),
        (
            OfError::BadRequest(BadRequestCode::IsSlave),
            fm[..64].to_vec()
        )
    );
    for body in [
        Body::PacketOut(PacketOut {
            buffer_id: OFP_NO_BUFFER,
            in_port: 1,
            actions: vec![],
            data: vec![0; 60],
        }),
        Body::PortMod(PortMod {
            port_no: 1,
            hw_addr: [0; 6],
            config: 0,
            mask: 0,
            advertise: 0,
        }),
        Body::TableMod(TableMod {
            table_id: 0,
            config: 0,
        }),
        Body::GroupMod(GroupMod {
            command: 0,
            group_type: 0,
            group_id: 1,
            buckets: vec![],
        }),
        Body::MeterMod(MeterMod {
            command: 0,
            flags: 0,
            meter_id: 0,
            bands: vec![],
        }),
    ] {
        let out = b.ask(&mut a, 6, body);
        assert_eq!(
            error_of(&out[0]).0,
            OfError::BadRequest(BadRequestCode::IsSlave)
        );
    }
    // Reads still work.
    assert_eq!(b.ask(&mut a, 7, Body::FeaturesRequest).len(), 1);
    assert_eq!(b.sw.calls.len(), calls);
    // The master writes.
    assert!(b.ask(&mut c2, 8, flow_mod(0)).is_empty());

    // Stale generation: refused, nothing changes.
    let out = b.ask(&mut a, 9, role_req(MASTER, 4));
    assert_eq!(
        error_of(&out[0]).0,
        OfError::RoleRequestFailed(RoleRequestFailedCode::Stale)
    );
    assert_eq!(b.roles.master(), Some(c2.id()));
    // EQUAL ignores the generation id.
    let r = role_reply(&b.ask(&mut a, 10, role_req(EQUAL, 0)));
    assert_eq!(
        r,
        Role {
            role: EQUAL,
            generation_id: 6
        }
    );
    assert!(b.ask(&mut a, 11, flow_mod(0)).is_empty());
    // Master steps down to slave: no master any more.
    let r = role_reply(&b.ask(&mut c2, 12, role_req(SLAVE, 7)));
    assert_eq!(
        r,
        Role {
            role: SLAVE,
            generation_id: 7
        }
    );
    assert_eq!(b.roles.master(), None);
    // Bad role value.
    let out = b.ask(&mut a, 13, role_req(9, 0));
    assert_eq!(
        error_of(&out[0]).0,
        OfError::RoleRequestFailed(RoleRequestFailedCode::BadRole)
    );
    // Releasing a master connection frees the role.
    b.ask(&mut a, 14, role_req(MASTER, 8));
    b.roles.release(a.id());
    assert_eq!(b.roles.master(), None);
}

// ---------- async ----------

fn packet_in(reason: u8, buffer_id: u32) -> Body {
    Body::PacketIn(PacketIn {
        buffer_id,
        total_len: 60,
        reason,
        table_id: 0,
        cookie: 0,
        matcher: OxmMatch::from_match(&Match::ANY),
        data: vec![0xab; 60],
    })
}

fn port_status() -> Body {
    Body::PortStatus(PortStatus {
        reason: 2,
        desc: Port::default(),
    })
}

#[test]
fn async_masks_and_roles() {
    use offlow_openflow::conn::role_wire::*;
    let mut b = Bench::new();
    let mut c = b.connect(ConnConfig::default());
    // Not before the handshake.
    assert_eq!(
        c.send_async(packet_in(0, OFP_NO_BUFFER), &b.roles),
        AsyncOutcome::NotReady
    );
    b.feed(&mut c, &enc(1, Body::Hello(Hello::of13())));
    // Equal: packet-in delivered with xid 0.
    assert_eq!(
        c.send_async(packet_in(0, OFP_NO_BUFFER), &b.roles),
        AsyncOutcome::Sent
    );
    let out = drain(&mut c);
    assert_eq!(out, vec![Message::new(0, packet_in(0, OFP_NO_BUFFER))]);
    assert_eq!(
        c.send_async(Body::BarrierReply, &b.roles),
        AsyncOutcome::NotAsync
    );
    // GET_ASYNC shows the defaults.
    let out = b.ask(&mut c, 2, Body::GetAsyncRequest);
    assert_eq!(out[0].body, Body::GetAsyncReply(DEFAULT_ASYNC));

    // Slave: no packet-in, but port-status.
    role_reply(&b.ask(&mut c, 3, role_req(SLAVE, 1)));
    assert_eq!(
        c.send_async(packet_in(0, OFP_NO_BUFFER), &b.roles),
        AsyncOutcome::Filtered
    );
    assert_eq!(c.send_async(port_status(), &b.roles), AsyncOutcome::Sent);
    assert_eq!(drain(&mut c).len(), 1);

    // SET_ASYNC: slaves get ACTION packet-ins only; master/equal nothing
    // for NO_MATCH.
    let cfg = AsyncConfig {
        packet_in_mask: [1 << 1, 1 << 1],
        port_status_mask: [0, 0],
        flow_removed_mask: [0, 0],
    };
    assert!(b.ask(&mut c, 4, Body::SetAsync(cfg)).is_empty());
    assert_eq!(c.async_config(), cfg);
    assert_eq!(
        b.ask(&mut c, 5, Body::GetAsyncRequest)[0].body,
        Body::GetAsyncReply(cfg)
    );
    assert_eq!(
        c.send_async(packet_in(0, OFP_NO_BUFFER), &b.roles),
        AsyncOutcome::Filtered
    );
    assert_eq!(
        c.send_async(packet_in(1, OFP_NO_BUFFER), &b.roles),
        AsyncOutcome::Sent
    );
    assert_eq!(
        c.send_async(port_status(), &b.roles),
        AsyncOutcome::Filtered
    );
    assert_eq!(
        drain(&mut c),
        vec![Message::new(0, packet_in(1, OFP_NO_BUFFER))]
    );
    role_reply(&b.ask(&mut c, 6, role_req(EQUAL, 0)));
    assert_eq!(
        c.send_async(packet_in(0, OFP_NO_BUFFER), &b.roles),
        AsyncOutcome::Filtered
    );
    assert_eq!(
        c.send_async(packet_in(1, OFP_NO_BUFFER), &b.roles),
        AsyncOutcome::Sent
    );
    // A reason beyond the 32-bit mask never passes.
    assert_eq!(
        c.send_async(packet_in(40, OFP_NO_BUFFER), &b.roles),
        AsyncOutcome::Filtered
    );
    assert_eq!(c.stats().drop_async_filtered, 5);
}

// ---------- packet-out and buffers ----------

#[test]
fn packet_out_buffers() {
    let mut b = Bench::new();
    let mut c = b.established();
    let po = |buffer_id| PacketOut {
        buffer_id,
        in_port: 3,
        actions: vec![Action::Output {
            port: 1,
            max_len: 0,
        }],
        data: if buffer_id == OFP_NO_BUFFER {
            vec![1; 64]
        } else {
            vec![]
        },
    };
    assert!(b
        .ask(&mut c, 1, Body::PacketOut(po(OFP_NO_BUFFER)))
        .is_empty());
    assert_eq!(b.sw.calls, vec![Call::PacketOut(po(OFP_NO_BUFFER))]);
    // Never issued.
    let out = b.ask(&mut c, 2, Body::PacketOut(po(17)));
    assert_eq!(
        error_of(&out[0]).0,
        OfError::BadRequest(BadRequestCode::BufferUnknown)
    );
    // Issued by a packet-in: usable once.
    assert_eq!(c.send_async(packet_in(0, 17), &b.roles), AsyncOutcome::Sent);
    drain(&mut c);
    assert!(b.ask(&mut c, 3, Body::PacketOut(po(17))).is_empty());
    assert_eq!(b.sw.calls.last(), Some(&Call::PacketOut(po(17))));
    let out = b.ask(&mut c, 4, Body::PacketOut(po(17)));
    assert_eq!(
        error_of(&out[0]).0,
        OfError::BadRequest(BadRequestCode::BufferEmpty),
        "issued, and used"
    );
    // A flow-mod naming an unknown buffer is applied, then refused.
    let Body::FlowMod(mut fm) = flow_mod(0) else {
        unreachable!()
    };
    fm.buffer_id = 99;
    let out = b.ask(&mut c, 5, Body::FlowMod(fm.clone()));
    assert!(matches!(b.sw.calls.last(), Some(Call::FlowMod(..))));
    assert_eq!(
        error_of(&out[0]).0,
        OfError::BadRequest(BadRequestCode::BufferUnknown)
    );
    // With an issued buffer: the packet goes to table 0 after the flow-mod.
    c.send_async(packet_in(0, 99), &b.roles);
    drain(&mut c);
    assert!(b.ask(&mut c, 6, Body::FlowMod(fm)).is_empty());
    let Some(Call::PacketOut(p)) = b.sw.calls.last() else {
        panic!("no packet-out after buffered flow-mod")
    };
    assert_eq!(p.buffer_id, 99);
    assert_eq!(p.in_port, 0xffff_ffff, "OFPP_ANY: the frame's own port");
    assert_eq!(
        p.actions,
        vec![Action::Output {
            port: 0xffff_fff9,
            max_len: 0
        }]
    );
}

// ---------- group / meter / port / table mods ----------

/// A METER_MOD with a band type the codec does not know is answered
/// OFPMMFC_BAD_BAND, echoing the request.
#[test]
fn meter_mod_bad_band_answered() {
    let mut b = Bench::new();
    let mut c = b.established();
    let mut bytes = enc(
        9,
        Body::MeterMod(MeterMod {
            command: 0,
            flags: 1,
            meter_id: 1,
            bands: vec![MeterBand {
                kind: MeterBandKind::Drop,
                rate: 10,
                burst_size: 0,
            }],
        }),
    );
    bytes[16..18].copy_from_slice(&3u16.to_be_bytes()); // band type 3
    b.feed(&mut c, &bytes);
    let out = drain(&mut c);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].xid, 9);
    assert_eq!(
        error_of(&out[0]),
        (OfError::MeterModFailed(MeterModFailedCode::BadBand), bytes)
    );
}

#[test]
fn unsupported_mods() {
    let mut b = Bench::new();
    let mut c = b.established();
    let g = |command| {
        Body::GroupMod(GroupMod {
            command,
            group_type: 0,
            group_id: 1,
            buckets: vec![],
        })
    };
    let err = |out: Vec<Message>| error_of(&out[0]).0;
    assert_eq!(
        err(b.ask(&mut c, 1, g(0))),
        OfError::GroupModFailed(GroupModFailedCode::OutOfGroups)
    );
    assert_eq!(
        err(b.ask(&mut c, 2, g(1))),
        OfError::GroupModFailed(GroupModFailedCode::UnknownGroup)
    );
    assert!(b.ask(&mut c, 3, g(2)).is_empty());
    let m = |command: u16| {
        Body::MeterMod(MeterMod {
            command,
            flags: 1,
            meter_id: 1,
            bands: vec![],
        })
    };
    assert_eq!(
        err(b.ask(&mut c, 4, m(0))),
        OfError::MeterModFailed(MeterModFailedCode::OutOfMeters)
    );
    assert!(b.ask(&mut c, 5, m(2)).is_empty());
    // Port-mod reaches the switch.
    let pm = PortMod {
        port_no: 2,
        hw_addr: [2; 6],
        config: 1,
        mask: 1,
        advertise: 0,
    };
    assert!(b.ask(&mut c, 6, Body::PortMod(pm)).is_empty());
    assert_eq!(b.sw.calls, vec![Call::PortMod(pm)]);
    // Table-mod: table range and reserved bits.
    let t = |table_id, config| Body::TableMod(TableMod { table_id, config });
    assert!(b.ask(&mut c, 7, t(0xff, 3)).is_empty());
    assert_eq!(
        err(b.ask(&mut c, 8, t(N_TABLES, 0))),
        OfError::TableModFailed(TableModFailedCode::BadTable)
    );
    assert_eq!(
        err(b.ask(&mut c, 9, t(0, 4))),
        OfError::TableModFailed(TableModFailedCode::BadConfig)
    );
    // Queue config: the default switch has none.
    let out = b.ask(&mut c, 10, Body::QueueGetConfigRequest(1));
    assert_eq!(
        out[0].body,
        Body::QueueGetConfigReply(QueueGetConfigReply {
            port: 1,
            queues: vec![]
        })
    );
}

// ---------- stream splitting ----------

/// A long session: hello, then a bit of everything.
fn session_script() -> Vec<u8> {
    let mut s = enc(1, Body::Hello(Hello::of13()));
    for i in 0..20u32 {
        s.extend(enc(100 + i, Body::EchoRequest(vec![i as u8; i as usize])));
        s.extend(enc(200 + i, flow_mod((i % 6) as u8)));
        s.extend(enc(300 + i, Body::FeaturesRequest));
        if i % 5 == 0 {
            s.extend(enc(400 + i, Body::BarrierRequest));
            s.extend(enc(500 + i, flow_stats_request()));
            s.extend([4u8, 250, 0, 8, 0, 0, 0, i as u8]);
        }
    }
    s
}

fn run_chunked(script: &[u8], chunk: usize) -> (Vec<u8>, Vec<Call>) {
    let mut b = Bench::new();
    b.sw.n_flows = 3;
    let mut c = b.connect(ConnConfig::default());
    for piece in script.chunks(chunk) {
        b.feed(&mut c, piece);
    }
    assert!(c.is_negotiated() && !c.is_closed());
    let mut out = Vec::new();
    c.poll_transmit(&mut out);
    (out, b.sw.calls)
}

#[test]
fn byte_at_a_time_equals_all_at_once() {
    let script = session_script();
    let whole = run_chunked(&script, script.len());
    assert_eq!(run_chunked(&script, 1), whole);
    assert_eq!(run_chunked(&script, 7), whole);
    // And the session did something: 20 echoes, 20 features, 4 barriers,
    // 4 multiparts, 4 unknown types, flow-mods to tables 4 and 5 refused.
    let replies: Vec<Message> = frames(&whole.0)
        .iter()
        .map(|f| decode(f).unwrap())
        .collect();
    let count = |t| replies.iter().filter(|m| m.body.msg_type() == t).count();
    assert_eq!(count(msg_type::ECHO_REPLY), 20);
    assert_eq!(count(msg_type::FEATURES_REPLY), 20);
    assert_eq!(count(msg_type::BARRIER_REPLY), 4);
    assert_eq!(count(msg_type::MULTIPART_REPLY), 4);
    assert_eq!(count(msg_type::ERROR), 4 + 6);
    assert_eq!(whole.1.len(), 20 + 4 + 4);
}

// ---------- robustness ----------

/// One piece of a hostile stream: a well-framed message with an arbitrary
/// type and body (mostly version 4), or raw bytes.
fn segment() -> impl Strategy<Value = Vec<u8>> {
    let framed = (
        prop_oneof![9 => Just(4u8), 1 => any::<u8>()],
        0u8..34,
        any::<u32>(),
        proptest::collection::vec(any::<u8>(), 0..96),
    )
        .prop_map(|(v, t, xid, body)| {
            let mut m = vec![v, t, 0, 0];
            m.extend(xid.to_be_bytes());
            m.extend(body);
            let n = m.len() as u16;
            m[2..4].copy_from_slice(&n.to_be_bytes());
            m
        });
    let valid = prop_oneof![
        Just(enc(7, flow_mod(0))),
        Just(enc(8, flow_stats_request())),
        Just(enc(9, role_req(2, 3))),
    ];
    prop_oneof![
        6 => framed,
        2 => valid,
        1 => proptest::collection::vec(any::<u8>(), 0..24),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        if cfg!(debug_assertions) { 1024 } else { 4096 }
    ))]

    #[test]
    fn hostile_streams_never_panic_and_replies_decode(
        segs in proptest::collection::vec(segment(), 0..24),
        chunk in 1usize..64,
    ) {
        let mut b = Bench::new();
        b.sw.n_flows = 2;
        let mut c = b.established();
        let stream: Vec<u8> = segs.concat();
        for piece in stream.chunks(chunk) {
            b.feed(&mut c, piece);
            b.now += 1;
            c.handle_timeout(b.now);
        }
        let mut out = Vec::new();
        c.poll_transmit(&mut out);
        for f in frames(&out) {
            let m = decode(&f);
            prop_assert!(m.is_ok(), "undecodable reply {:?}: {:?}", f, m);
            // Every error we send echoes at most 64 bytes of the request.
            if let Ok(Message { body: Body::Error(ErrorMsg::Standard { data, .. }), .. }) = m {
                prop_assert!(data.len() <= 64);
            }
        }
    }
}

/// §7.3.2: an OFPR_INVALID_TTL packet-in (built with the whole frame and a
/// buffer id) is cut to each connection's miss_send_len; a frame that fits,
/// or a connection asking for OFPCML_NO_BUFFER, gets it whole and
/// unbuffered. Other reasons are sent as built.
#[test]
fn invalid_ttl_packet_ins_follow_miss_send_len() {
    let mut b = Bench::new();
    let mut c = b.established();
    let ttl = |len: usize, buffer_id| {
        let Body::PacketIn(mut p) = packet_in(2, buffer_id) else {
            unreachable!()
        };
        p.data = vec![0xcd; len];
        p.total_len = len as u16;
        Body::PacketIn(p)
    };
    let sent = |c: &mut Connection| match drain(c).pop().map(|m| m.body) {
        Some(Body::PacketIn(p)) => (p.buffer_id, p.data.len()),
        other => panic!("expected a packet-in, got {other:?}"),
    };
    // Default miss_send_len 128.
    assert_eq!(c.send_async(ttl(300, 7), &b.roles), AsyncOutcome::Sent);
    assert_eq!(sent(&mut c), (7, 128));
    assert_eq!(c.send_async(ttl(100, 8), &b.roles), AsyncOutcome::Sent);
    assert_eq!(sent(&mut c), (OFP_NO_BUFFER, 100), "fits: unbuffered");
    // Buffer 7 was issued to this connection, 8 was not.
    let out = b.ask(
        &mut c,
        2,
        Body::PacketOut(PacketOut {
            buffer_id: 8,
            in_port: 1,
            actions: vec![],
            data: vec![],
        }),
    );
    assert_eq!(
        error_of(&out[0]).0,
        OfError::BadRequest(BadRequestCode::BufferUnknown)
    );
    // An action packet-in keeps what the switch built.
    c.send_async(packet_in(1, 9), &b.roles);
    assert_eq!(sent(&mut c), (9, 60));
    // OFPCML_NO_BUFFER: whole and unbuffered.
    let cfg = SwitchConfig {
        flags: 0,
        miss_send_len: 0xffff,
    };
    assert!(b.ask(&mut c, 3, Body::SetConfig(cfg)).is_empty());
    c.send_async(ttl(300, 10), &b.roles);
    assert_eq!(sent(&mut c), (OFP_NO_BUFFER, 300));
}
