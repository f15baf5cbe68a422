//! rtnetlink link answers (`offlow_io::rtnl::parse_answer`), the port
//! statistics' source of interface drops.
//!
//! Two properties per input:
//! - the input read as a datagram (its first four bytes the request's
//!   sequence number) never panics the parser;
//! - an answer built from the input (eight counters, then attributes of
//!   fuzzer-chosen types and lengths placed before `IFLA_STATS64`, after an
//!   answer to another request) parses to exactly those counters.
#![no_main]

use libfuzzer_sys::fuzz_target;
use offlow_io::rtnl::{parse_answer, LinkCounters};

const RTM_NEWLINK: u16 = 16;
const IFLA_STATS64: u16 = 23;

fn attr(kind: u16, payload: &[u8]) -> Vec<u8> {
    let mut a = Vec::new();
    a.extend_from_slice(&((4 + payload.len()) as u16).to_ne_bytes());
    a.extend_from_slice(&kind.to_ne_bytes());
    a.extend_from_slice(payload);
    while a.len() % 4 != 0 {
        a.push(0);
    }
    a
}

fn newlink(seq: u32, attrs: &[u8]) -> Vec<u8> {
    let mut m = Vec::new();
    m.extend_from_slice(&((16 + 16 + attrs.len()) as u32).to_ne_bytes());
    m.extend_from_slice(&RTM_NEWLINK.to_ne_bytes());
    m.extend_from_slice(&0u16.to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(&[0u8; 16]);
    m.extend_from_slice(attrs);
    m
}

fuzz_target!(|data: &[u8]| {
    if data.len() >= 4 {
        let seq = u32::from_ne_bytes(data[..4].try_into().unwrap());
        let _ = parse_answer(&data[4..], seq);
    }
    if data.len() < 64 {
        return;
    }
    let (counters, rest) = data.split_at(64);
    let word = |i: usize| u64::from_ne_bytes(counters[i * 8..i * 8 + 8].try_into().unwrap());
    // Other attributes first: a type byte and a length byte each, the
    // payload taken from what follows (never IFLA_STATS64 itself).
    let mut attrs = Vec::new();
    let mut r = rest;
    while let [kind, len, tail @ ..] = r {
        let kind = match u16::from(*kind) {
            IFLA_STATS64 => IFLA_STATS64 + 1,
            k => k,
        };
        let n = usize::from(*len).min(tail.len());
        attrs.extend(attr(kind, &tail[..n]));
        r = &tail[n..];
    }
    attrs.extend(attr(IFLA_STATS64, counters));
    let mut datagram = newlink(6, &attr(IFLA_STATS64, &[0xff; 64]));
    datagram.extend(newlink(7, &attrs));
    let got = parse_answer(&datagram, 7).expect("a well-formed answer parses");
    assert_eq!(
        got,
        Some(LinkCounters {
            rx_packets: word(0),
            rx_dropped: word(6),
            tx_dropped: word(7),
        })
    );
});
