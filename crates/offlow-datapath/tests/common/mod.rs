//! Frame presets (on `offlow_testkit`'s builder) and a from-scratch
//! checksum checker shared by the tests.
#![allow(dead_code)]

use offlow_datapath::{sctp_checksum, OutputMeta, OutputSink, PortInfo};
use offlow_flow::{extract, Field, L3Kind, L4Kind, Layout, Match, ParseStats, Parsed};
// Not every test crate including this module uses every name.
#[allow(unused_imports)]
pub(crate) use offlow_testkit::{v6, Checksum, FrameBuilder};
use offlow_wire::checksum::{checksum, fold, pseudo_ipv4, pseudo_ipv6, sum};
use offlow_wire::tcp;

pub(crate) const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 0xaa];
pub(crate) const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 0xbb];

pub(crate) fn parse(frame: &[u8]) -> Parsed {
    extract(frame, 1, &mut ParseStats::default())
}

/// A frame from [`MAC_A`] to [`MAC_B`] (the builder is `offlow_testkit`'s).
pub(crate) fn frame() -> FrameBuilder {
    FrameBuilder::eth(MAC_B, MAC_A)
}

/// [`frame`] with IPv4 as these tests send it: identification 0x1234, DF.
pub(crate) fn frame4(src: [u8; 4], dst: [u8; 4], ttl: u8, tos: u8) -> FrameBuilder {
    frame()
        .ipv4(src, dst)
        .ttl(ttl)
        .tos(tos)
        .ident(0x1234)
        .dont_frag()
}

/// [`frame`] with IPv6.
pub(crate) fn frame6(src: [u8; 16], dst: [u8; 16], hop: u8, tc: u8, flabel: u32) -> FrameBuilder {
    frame().ipv6(src, dst).ttl(hop).tos(tc).flow_label(flabel)
}

/// The TCP flags these tests' segments carry.
pub(crate) const PSH_ACK: u16 = tcp::flags::PSH | tcp::flags::ACK;

/// An SCTP packet's verification tag and chunks, as these tests send it.
pub(crate) const SCTP_TAG: u32 = 0xdead_beef;
/// One DATA chunk header with 4 bytes of data.
pub(crate) const SCTP_DATA: [u8; 20] =
    [0, 3, 0, 20, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4];

/// The body of an NS or NA (after type, code, checksum) with one
/// link-layer option of `opt_kind`.
pub(crate) fn nd_body(target: [u8; 16], opt_kind: u8, mac: [u8; 6]) -> Vec<u8> {
    let mut i = vec![0, 0, 0, 0];
    i.extend_from_slice(&target);
    // A nonce-like unrelated option first (type 14, 8 bytes), then ours.
    i.extend_from_slice(&[14, 1, 1, 2, 3, 4, 5, 6]);
    i.extend_from_slice(&[opt_kind, 1]);
    i.extend_from_slice(&mac);
    i
}

/// The transport segment `l4 .. end of IP packet` and the pseudo-header sum.
fn segment(frame: &[u8], lay: &Layout, proto: u8) -> Option<(usize, usize, u32)> {
    let l3 = lay.l3 as usize;
    let l4 = lay.l4 as usize;
    match lay.l3_kind {
        L3Kind::Ipv4 => {
            let end =
                (l3 + u16::from_be_bytes([frame[l3 + 2], frame[l3 + 3]]) as usize).min(frame.len());
            let src: [u8; 4] = frame[l3 + 12..l3 + 16].try_into().unwrap();
            let dst: [u8; 4] = frame[l3 + 16..l3 + 20].try_into().unwrap();
            Some((l4, end, pseudo_ipv4(src, dst, proto, (end - l4) as u16)))
        }
        L3Kind::Ipv6 => {
            let end = (l3 + 40 + u16::from_be_bytes([frame[l3 + 4], frame[l3 + 5]]) as usize)
                .min(frame.len());
            let src: [u8; 16] = frame[l3 + 8..l3 + 24].try_into().unwrap();
            let dst: [u8; 16] = frame[l3 + 24..l3 + 40].try_into().unwrap();
            Some((l4, end, pseudo_ipv6(src, dst, proto, (end - l4) as u32)))
        }
        _ => None,
    }
}

/// Where the L4 checksum is and what kind it is.
fn l4_csum(lay: &Layout) -> Option<(usize, u8)> {
    let l4 = lay.l4 as usize;
    match lay.l4_kind {
        L4Kind::Tcp => Some((l4 + 16, 6)),
        L4Kind::Udp => Some((l4 + 6, 17)),
        L4Kind::Icmpv6 => Some((l4 + 2, 58)),
        L4Kind::Icmpv4 => Some((l4 + 2, 1)),
        L4Kind::Sctp => Some((l4 + 8, 132)),
        _ => None,
    }
}

/// Verify every checksum of `frame` from scratch.
pub(crate) fn verify_checksums(frame: &[u8]) -> Result<(), String> {
    let p = parse(frame);
    let lay = p.layout;
    if lay.l3_kind == L3Kind::Ipv4 {
        let l3 = lay.l3 as usize;
        let hl = lay.ip_header_len as usize;
        if checksum(&frame[l3..l3 + hl]) != 0 {
            return Err("ipv4 header checksum".into());
        }
    }
    let Some((at, proto)) = l4_csum(&lay) else {
        return Ok(());
    };
    let (l4, end, ps) = segment(frame, &lay, proto).unwrap();
    let stored = u16::from_be_bytes([frame[at], frame[at + 1]]);
    let ok = match proto {
        132 => {
            let c = sctp_checksum(&frame[l4..end]).unwrap();
            frame[at..at + 4] == c.to_le_bytes()
        }
        1 => checksum(&frame[l4..end]) == 0,
        17 if stored == 0 && lay.l3_kind == L3Kind::Ipv4 => true,
        _ => fold(sum(&frame[l4..end], ps)) == 0xffff,
    };
    if ok {
        Ok(())
    } else {
        Err(format!("l4 checksum (proto {proto}) stored {stored:#06x}"))
    }
}

/// A sink that records everything.
#[derive(Default)]
pub(crate) struct RecSink {
    pub ports: Vec<PortInfo>,
    pub sent: Vec<(u32, Vec<u8>, OutputMeta)>,
    pub to_ctrl: Vec<(Vec<u8>, usize, OutputMeta)>,
    /// The origin of each `to_ctrl` entry.
    pub origins: Vec<offlow_pipeline::PacketInOrigin>,
}

impl OutputSink for RecSink {
    fn output(&mut self, port: u32, frame: &[u8], meta: OutputMeta) {
        self.sent.push((port, frame.to_vec(), meta));
    }
    fn controller(
        &mut self,
        frame: &[u8],
        max_len: u16,
        origin: offlow_pipeline::PacketInOrigin,
        meta: OutputMeta,
    ) {
        let shown = offlow_datapath::controller_len(frame.len(), max_len);
        self.to_ctrl
            .push((frame[..shown].to_vec(), frame.len(), meta));
        self.origins.push(origin);
    }
    fn port_count(&self) -> usize {
        self.ports.len()
    }
    fn port_info(&self, index: usize) -> Option<PortInfo> {
        self.ports.get(index).copied()
    }
}

/// A sink that records each output's port and frame, outputs to the
/// controller as port `u32::MAX` (for tests that only ask where copies
/// went and what they held).
#[derive(Default)]
pub(crate) struct FrameSink {
    pub sent: Vec<(u32, Vec<u8>)>,
}

impl OutputSink for FrameSink {
    fn output(&mut self, port: u32, frame: &[u8], _meta: OutputMeta) {
        self.sent.push((port, frame.to_vec()));
    }
    fn controller(
        &mut self,
        frame: &[u8],
        _max_len: u16,
        _origin: offlow_pipeline::PacketInOrigin,
        _meta: OutputMeta,
    ) {
        self.sent.push((u32::MAX, frame.to_vec()));
    }
    fn port_count(&self) -> usize {
        0
    }
    fn port_info(&self, _index: usize) -> Option<PortInfo> {
        None
    }
}

/// A match over the property tests' small frame domain: eth_src
/// 02:00:00:00:00:`src`, ipv4_dst 10.0.0.`dst`, udp_dst 50 + `dport`
/// (adding the eth_type / ip_proto prerequisites those fields need).
pub(crate) fn small_domain_match(src: Option<u8>, dst: Option<u8>, dport: Option<u8>) -> Match {
    let mut m = Match::ANY;
    if let Some(s) = src {
        let mut b = [0u8; 16];
        b[10..16].copy_from_slice(&[0x02, 0, 0, 0, 0, s]);
        m.set_exact(Field::EthSrc, u128::from_be_bytes(b));
    }
    if dst.is_some() || dport.is_some() {
        m.set_exact(Field::EthType, 0x0800);
    }
    if let Some(d) = dst {
        m.set_exact(
            Field::Ipv4Dst,
            u128::from(u32::from_be_bytes([10, 0, 0, d])),
        );
    }
    if let Some(d) = dport {
        m.set_exact(Field::IpProto, 17);
        m.set_exact(Field::UdpDst, 50 + u128::from(d));
    }
    m
}

/// `ip,nw_dst=10.0.0.D` (exact).
pub(crate) fn dst_match(d: u8) -> Match {
    let mut m = Match::ANY;
    m.set_exact(Field::EthType, 0x0800);
    m.set_exact(
        Field::Ipv4Dst,
        u128::from(u32::from_be_bytes([10, 0, 0, d])),
    );
    m
}
