//! Tunnel endpoints: which frames arriving on an underlay are addressed to
//! one of the switch's tunnels (GRE in IPv4, VXLAN), where the
//! encapsulated frame lies in them, and the outer headers an
//! encapsulation writes. Both tiers use it: the packet threads decapsulate
//! and encapsulate with it, and the offload tier's XDP program is checked
//! against it.
//!
//! An [`Endpoint`] follows Open vSwitch's tunnel interfaces (`type=gre` /
//! `type=vxlan` with `options:local_ip`, `remote_ip`, `key`, `csum`,
//! `dst_port`): point to point, IPv4, with a static next hop (the outer
//! Ethernet addresses are configured, nothing is resolved by ARP).
//!
//! # Receive ([`classify`])
//! A frame is *for a tunnel* when it is untagged Ethernet carrying IPv4
//! from an endpoint's `remote_ip` to its `local_ip` with its protocol (GRE,
//! or UDP to its `dst_port` for VXLAN). Such a frame is decapsulated if its
//! headers are sound, and is [`Classified::Malformed`] (the caller counts
//! and drops it) if not: a bad outer IPv4 header checksum, a fragment
//! (nothing here reassembles), a GRE header RFC 2784/2890 do not allow, a
//! GRE checksum that does not verify, a GRE payload other than Ethernet
//! (Transparent Ethernet Bridging, 0x6558), a VXLAN header without its I
//! flag, a UDP length or checksum that does not match, or an inner frame
//! shorter than an Ethernet header. The key picks the endpoint among those
//! sharing the addresses: `key=N` takes frames with key N, no key takes
//! frames without one (or with key 0, as Open vSwitch does), `key=flow`
//! takes the rest; a frame addressed to the tunnel addresses whose key
//! no endpoint takes is [`Classified::UnknownKey`] (Open vSwitch drops
//! those too). Every other frame is [`Classified::NotTunnel`] and is an
//! ordinary frame of its port.
//!
//! # Transmit ([`Endpoint::encapsulate`])
//! Outer Ethernet (configured addresses), IPv4 (`local_ip` → `remote_ip`,
//! DF set, the given identification, TTL and TOS from the endpoint,
//! header checksum), then GRE (the K flag and key unless the endpoint has
//! no key, the C flag and checksum with `csum`) or UDP (source port from
//! the caller's flow entropy in 49152–65535, RFC 7348 §5; checksum 0,
//! which IPv4 allows) and VXLAN (I flag, VNI). `key=flow` sends the
//! packet's `tunnel_id` (its low 32 bits for GRE, 24 for VXLAN).
//!
//! Invariants: [`classify`] never panics on any input and never reads
//! outside the frame; a decapsulated range lies inside the frame.
//!
//! Thread-safety: plain data, `Send + Sync`.

use core::ops::Range;

use crate::bytes::{be16, put16, put32};
use crate::checksum;
use crate::gre;
use crate::vxlan;

/// EtherType of IPv4.
const ETH_IPV4: u16 = 0x0800;
/// GRE protocol type of an Ethernet payload (Transparent Ethernet Bridging).
pub const GRE_PROTO_TEB: u16 = 0x6558;
/// IP protocol numbers.
const IPPROTO_GRE: u8 = 47;
const IPPROTO_UDP: u8 = 17;
/// Ethernet header length (no tag: the underlay is untagged).
const ETH_HLEN: usize = 14;
/// IPv4 header without options (what [`Endpoint::encapsulate`] writes).
const IPV4_HLEN: usize = 20;
const UDP_HLEN: usize = 8;
/// DF, in the flags/fragment-offset word.
const IPV4_DF: u16 = 0x4000;
/// MF and the fragment offset: a fragment.
const IPV4_FRAGMENT: u16 = 0x3fff;

/// The encapsulation of a tunnel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// GRE (RFC 2784, keys RFC 2890) carrying Ethernet, IP protocol 47.
    Gre,
    /// VXLAN (RFC 7348) over UDP.
    Vxlan,
}

impl Kind {
    /// The name Open vSwitch gives the interface type.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Gre => "gre",
            Kind::Vxlan => "vxlan",
        }
    }
}

/// Which key (GRE key, VXLAN VNI) a tunnel sends and accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyMode {
    /// None: GRE without a key field; VXLAN with VNI 0.
    None,
    /// This key, both ways.
    Fixed(u32),
    /// The packet's `tunnel_id` on output; any key on input, which becomes
    /// the packet's `tunnel_id` (Open vSwitch's `key=flow`).
    Flow,
}

/// One point-to-point tunnel endpoint; see the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Endpoint {
    /// The encapsulation.
    pub kind: Kind,
    /// This end's IPv4 address (outer destination of received frames).
    pub local_ip: [u8; 4],
    /// The far end's IPv4 address.
    pub remote_ip: [u8; 4],
    /// The key.
    pub key: KeyMode,
    /// GRE: send checksums (the C flag). Received checksums are verified
    /// whatever this says.
    pub csum: bool,
    /// VXLAN: the UDP destination port (4789 by default).
    pub dst_port: u16,
    /// Outer TTL.
    pub ttl: u8,
    /// Outer TOS byte.
    pub tos: u8,
    /// Outer Ethernet source.
    pub local_mac: [u8; 6],
    /// Outer Ethernet destination: the next hop toward `remote_ip`.
    pub remote_mac: [u8; 6],
}

/// Outer TTL when none is configured (Open vSwitch's default).
pub const DEFAULT_TTL: u8 = 64;

impl Endpoint {
    /// An endpoint with the defaults (no key, no checksum, port 4789, TTL
    /// 64, TOS 0).
    pub fn new(
        kind: Kind,
        local_ip: [u8; 4],
        remote_ip: [u8; 4],
        local_mac: [u8; 6],
        remote_mac: [u8; 6],
    ) -> Endpoint {
        Endpoint {
            kind,
            local_ip,
            remote_ip,
            key: KeyMode::None,
            csum: false,
            dst_port: vxlan::UDP_PORT,
            ttl: DEFAULT_TTL,
            tos: 0,
            local_mac,
            remote_mac,
        }
    }

    /// Bytes the outer headers add to a frame.
    pub fn overhead(&self) -> usize {
        ETH_HLEN
            + IPV4_HLEN
            + match self.kind {
                Kind::Gre => {
                    gre::MIN_HEADER_LEN
                        + 4 * usize::from(self.csum)
                        + 4 * usize::from(self.key != KeyMode::None)
                }
                Kind::Vxlan => UDP_HLEN + vxlan::HEADER_LEN,
            }
    }

    /// The key sent for a packet whose `tunnel_id` is `tunnel_id`
    /// (`None`: GRE without a key field).
    pub fn key_for(&self, tunnel_id: u64) -> Option<u32> {
        match self.key {
            KeyMode::None => None,
            KeyMode::Fixed(k) => Some(k),
            KeyMode::Flow => Some(tunnel_id as u32),
        }
    }

    /// Write `inner` encapsulated into `out`: outer headers, then `inner`.
    /// `ident` is the outer IPv4 identification, `entropy` a hash of the
    /// inner flow (the VXLAN source port). Returns the length written, or
    /// `None` when `out` is too short or the result would exceed an IPv4
    /// packet.
    pub fn encapsulate(
        &self,
        inner: &[u8],
        tunnel_id: u64,
        ident: u16,
        entropy: u16,
        out: &mut [u8],
    ) -> Option<usize> {
        let head = self.overhead();
        let total = head.checked_add(inner.len())?;
        let ip_len = u16::try_from(total - ETH_HLEN).ok()?;
        let out = out.get_mut(..total)?;
        out[head..].copy_from_slice(inner);
        // Ethernet.
        out[0..6].copy_from_slice(&self.remote_mac);
        out[6..12].copy_from_slice(&self.local_mac);
        put16(out, 12, ETH_IPV4);
        // IPv4.
        let ip = ETH_HLEN;
        let proto = match self.kind {
            Kind::Gre => IPPROTO_GRE,
            Kind::Vxlan => IPPROTO_UDP,
        };
        out[ip] = 0x45;
        out[ip + 1] = self.tos;
        put16(out, ip + 2, ip_len);
        put16(out, ip + 4, ident);
        put16(out, ip + 6, IPV4_DF);
        out[ip + 8] = self.ttl;
        out[ip + 9] = proto;
        put16(out, ip + 10, 0);
        out[ip + 12..ip + 16].copy_from_slice(&self.local_ip);
        out[ip + 16..ip + 20].copy_from_slice(&self.remote_ip);
        let c = checksum::checksum(&out[ip..ip + IPV4_HLEN]);
        put16(out, ip + 10, c);
        let l4 = ip + IPV4_HLEN;
        match self.kind {
            Kind::Gre => {
                let key = self.key_for(tunnel_id);
                let mut flags = 0u16;
                if self.csum {
                    flags |= gre::FLAG_C;
                }
                if key.is_some() {
                    flags |= gre::FLAG_K;
                }
                put16(out, l4, flags);
                put16(out, l4 + 2, GRE_PROTO_TEB);
                let mut at = l4 + gre::MIN_HEADER_LEN;
                if self.csum {
                    // Checksum and reserved, zero while summing.
                    put32(out, at, 0);
                    at += 4;
                }
                if let Some(k) = key {
                    put32(out, at, k);
                }
                if self.csum {
                    // RFC 2784 §2.5: over the GRE header and its payload.
                    let c = checksum::checksum(&out[l4..]);
                    put16(out, l4 + gre::MIN_HEADER_LEN, c);
                }
            }
            Kind::Vxlan => {
                let udp_len = ip_len - IPV4_HLEN as u16;
                put16(out, l4, 0xc000 | (entropy & 0x3fff));
                put16(out, l4 + 2, self.dst_port);
                put16(out, l4 + 4, udp_len);
                put16(out, l4 + 6, 0);
                let vx = l4 + UDP_HLEN;
                let vni = self.key_for(tunnel_id).unwrap_or(0) & 0x00ff_ffff;
                put32(out, vx, u32::from(vxlan::FLAG_I) << 24);
                put32(out, vx + 4, vni << 8);
            }
        }
        Some(total)
    }
}

/// The flow entropy of a frame leaving by a tunnel: the VXLAN source port
/// is `0xc000 | entropy & 0x3fff` (RFC 7348 §5: "a hash of fields from the
/// inner packet"). FNV-1a over the Ethernet addresses and, for untagged
/// IPv4, bytes 26..38 (the addresses and the first four bytes of L4: the
/// ports of TCP and UDP), folded to 16 bits. Both tiers compute it the
/// same way (the XDP program in the kernel), so a flow keeps one source
/// port whichever tier sends it.
pub fn entropy(frame: &[u8]) -> u16 {
    let mut h: u32 = 0x811c_9dc5;
    let ipv4 = frame.get(12..14) == Some(&[0x08, 0x00]);
    let tail = if ipv4 {
        frame.get(26..38).unwrap_or(&[])
    } else {
        &[]
    };
    for &b in frame.iter().take(12).chain(tail) {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    (h ^ (h >> 16)) as u16
}

/// Why a frame addressed to a tunnel was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Malformed {
    /// The outer IPv4 header is truncated, its header or total length is
    /// wrong, or its checksum does not verify.
    OuterIpv4,
    /// The outer packet is a fragment (not reassembled).
    Fragment,
    /// The GRE header is truncated or uses bits RFC 2784/2890 forbid.
    GreHeader,
    /// The GRE checksum does not verify.
    GreChecksum,
    /// The GRE payload is not Ethernet (the protocol type is given).
    GreProtocol(u16),
    /// The UDP header is truncated, its length disagrees with IPv4's, or
    /// its (non-zero) checksum does not verify.
    Udp,
    /// The VXLAN header is truncated or lacks its I flag.
    VxlanHeader,
    /// The encapsulated frame is shorter than an Ethernet header.
    InnerTooShort,
}

impl Malformed {
    /// A short name for logs and counters.
    pub fn name(self) -> &'static str {
        match self {
            Malformed::OuterIpv4 => "outer IPv4 header",
            Malformed::Fragment => "outer fragment",
            Malformed::GreHeader => "GRE header",
            Malformed::GreChecksum => "GRE checksum",
            Malformed::GreProtocol(_) => "GRE payload not Ethernet",
            Malformed::Udp => "UDP header or checksum",
            Malformed::VxlanHeader => "VXLAN header",
            Malformed::InnerTooShort => "inner frame too short",
        }
    }
}

/// A frame for a tunnel, decapsulated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decap {
    /// Index of the endpoint in the slice given to [`classify`].
    pub endpoint: usize,
    /// Where the encapsulated Ethernet frame lies in the frame (outer
    /// padding excluded).
    pub inner: Range<usize>,
    /// The key (GRE key, VXLAN VNI), 0 without one: the packet's
    /// `tunnel_id`.
    pub tunnel_id: u64,
    /// Outer source and destination addresses (tunnel metadata).
    pub outer_src: [u8; 4],
    /// Outer destination address.
    pub outer_dst: [u8; 4],
}

/// What a received frame is to the tunnels; see the module documentation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Classified {
    /// An ordinary frame of its port.
    NotTunnel,
    /// Addressed to a tunnel and sound.
    Tunnel(Decap),
    /// Addressed to a tunnel (index of the first endpoint its addresses
    /// and protocol matched) and refused.
    Malformed(usize, Malformed),
    /// Addressed to the tunnels' addresses with a key none of them takes.
    UnknownKey,
}

/// Classify a received `frame` against `endpoints` (see the module
/// documentation). Cheap for frames that are not tunnelled: one EtherType
/// test, then the addresses against each endpoint.
pub fn classify(frame: &[u8], endpoints: &[Endpoint]) -> Classified {
    if endpoints.is_empty() || frame.len() < ETH_HLEN + IPV4_HLEN || be16(frame, 12) != ETH_IPV4 {
        return Classified::NotTunnel;
    }
    let ip = &frame[ETH_HLEN..];
    let proto = ip[9];
    let src = [ip[12], ip[13], ip[14], ip[15]];
    let dst = [ip[16], ip[17], ip[18], ip[19]];
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    // The UDP destination port, read only for UDP and only where it lies
    // inside the frame (a bad header length is judged below).
    let udp_dst = (proto == IPPROTO_UDP && ip.len() >= ihl + 4).then(|| be16(ip, ihl + 2));
    let addressed = |e: &Endpoint| {
        e.local_ip == dst
            && e.remote_ip == src
            && match e.kind {
                Kind::Gre => proto == IPPROTO_GRE,
                Kind::Vxlan => udp_dst == Some(e.dst_port),
            }
    };
    let Some(first) = endpoints.iter().position(addressed) else {
        return Classified::NotTunnel;
    };
    let kind = endpoints[first].kind;
    let bad = |m| Classified::Malformed(first, m);
    // The outer IPv4 header: this switch terminates it, so it is checked
    // as a host would.
    if ip[0] >> 4 != 4 || ihl < IPV4_HLEN || ip.len() < ihl {
        return bad(Malformed::OuterIpv4);
    }
    let total = usize::from(be16(ip, 2));
    if total < ihl || total > ip.len() || checksum::checksum(&ip[..ihl]) != 0 {
        return bad(Malformed::OuterIpv4);
    }
    if be16(ip, 6) & IPV4_FRAGMENT != 0 {
        return bad(Malformed::Fragment);
    }
    // Ethernet padding after the IPv4 packet is not the tunnel's.
    let l4_at = ETH_HLEN + ihl;
    let l4 = &frame[l4_at..ETH_HLEN + total];
    let (inner_at, key) = match kind {
        Kind::Gre => {
            let Ok(g) = gre::Packet::new_checked(l4) else {
                return bad(Malformed::GreHeader);
            };
            if g.checksum().is_some() && checksum::checksum(l4) != 0 {
                return bad(Malformed::GreChecksum);
            }
            if g.protocol_raw() != GRE_PROTO_TEB {
                return bad(Malformed::GreProtocol(g.protocol_raw()));
            }
            (g.header_len(), g.key())
        }
        Kind::Vxlan => {
            if l4.len() < UDP_HLEN || usize::from(be16(l4, 4)) != l4.len() {
                return bad(Malformed::Udp);
            }
            if be16(l4, 6) != 0 {
                let pseudo = checksum::pseudo_ipv4(src, dst, IPPROTO_UDP, l4.len() as u16);
                if checksum::fold(checksum::sum(l4, pseudo)) != 0xffff {
                    return bad(Malformed::Udp);
                }
            }
            let Ok(v) = vxlan::Packet::new_checked(&l4[UDP_HLEN..]) else {
                return bad(Malformed::VxlanHeader);
            };
            if !v.has_vni() {
                return bad(Malformed::VxlanHeader);
            }
            (UDP_HLEN + vxlan::HEADER_LEN, Some(v.vni()))
        }
    };
    if l4.len() - inner_at < ETH_HLEN {
        return bad(Malformed::InnerTooShort);
    }
    // The endpoint that takes this key: an exact key first, then `flow`.
    let takes = |e: &Endpoint, exact: bool| match (e.key, key) {
        (KeyMode::Fixed(k), Some(got)) => exact && k == got,
        // VXLAN always carries a VNI: "no key" is VNI 0.
        (KeyMode::None, None) | (KeyMode::None, Some(0)) => exact,
        (KeyMode::Flow, _) => !exact,
        _ => false,
    };
    let pick = |exact: bool| {
        endpoints
            .iter()
            .enumerate()
            .skip(first)
            .find(|(_, e)| e.kind == kind && addressed(e) && takes(e, exact))
            .map(|(i, _)| i)
    };
    let Some(endpoint) = pick(true).or_else(|| pick(false)) else {
        return Classified::UnknownKey;
    };
    let start = l4_at + inner_at;
    Classified::Tunnel(Decap {
        endpoint,
        inner: start..ETH_HLEN + total,
        tunnel_id: u64::from(key.unwrap_or(0)),
        outer_src: src,
        outer_dst: dst,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const LOCAL: [u8; 4] = [192, 168, 50, 1];
    const REMOTE: [u8; 4] = [192, 168, 50, 2];
    const LMAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const RMAC: [u8; 6] = [2, 0, 0, 0, 0, 2];

    fn inner() -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[0..6].copy_from_slice(&[0x0a, 0, 0, 0, 0, 2]);
        f[6..12].copy_from_slice(&[0x0a, 0, 0, 0, 0, 1]);
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        for (i, b) in f[14..].iter_mut().enumerate() {
            *b = i as u8;
        }
        f
    }

    fn gre(key: KeyMode, csum: bool) -> Endpoint {
        Endpoint {
            key,
            csum,
            ..Endpoint::new(Kind::Gre, LOCAL, REMOTE, LMAC, RMAC)
        }
    }

    /// The far end's view: what it sends us is our encapsulation with the
    /// addresses swapped.
    fn from_remote(e: &Endpoint) -> Endpoint {
        Endpoint {
            local_ip: e.remote_ip,
            remote_ip: e.local_ip,
            local_mac: e.remote_mac,
            remote_mac: e.local_mac,
            ..*e
        }
    }

    fn encap(e: &Endpoint, tunnel_id: u64) -> Vec<u8> {
        let mut out = vec![0u8; 2048];
        let n = e
            .encapsulate(&inner(), tunnel_id, 7, 0x1234, &mut out)
            .unwrap();
        out.truncate(n);
        out
    }

    #[test]
    fn gre_round_trip_with_and_without_key_and_checksum() {
        for (key, csum) in [
            (KeyMode::None, false),
            (KeyMode::Fixed(5), false),
            (KeyMode::Flow, true),
            (KeyMode::Fixed(9), true),
        ] {
            let ours = gre(key, csum);
            let frame = encap(&from_remote(&ours), 0xabcd);
            assert_eq!(frame.len(), ours.overhead() + 60);
            // Outer IPv4 checksum verifies; DF set; lengths right.
            assert_eq!(checksum::checksum(&frame[14..34]), 0);
            assert_eq!(be16(&frame, 16) as usize, frame.len() - 14);
            assert_eq!(be16(&frame, 20), IPV4_DF);
            match classify(&frame, &[ours]) {
                Classified::Tunnel(d) => {
                    assert_eq!(&frame[d.inner.clone()], &inner()[..]);
                    let want = match key {
                        KeyMode::None => 0,
                        KeyMode::Fixed(k) => u64::from(k),
                        KeyMode::Flow => 0xabcd,
                    };
                    assert_eq!(d.tunnel_id, want, "{key:?}");
                    assert_eq!((d.outer_src, d.outer_dst), (REMOTE, LOCAL));
                }
                other => panic!("{key:?} {csum}: {other:?}"),
            }
        }
    }

    #[test]
    fn vxlan_round_trip_and_udp_checksum() {
        let ours = Endpoint {
            key: KeyMode::Flow,
            ..Endpoint::new(Kind::Vxlan, LOCAL, REMOTE, LMAC, RMAC)
        };
        let mut frame = encap(&from_remote(&ours), 0x12_3456);
        assert_eq!(be16(&frame, 36), 4789);
        let Classified::Tunnel(d) = classify(&frame, &[ours]) else {
            panic!()
        };
        assert_eq!(d.tunnel_id, 0x12_3456);
        assert_eq!(&frame[d.inner], &inner()[..]);
        // A UDP checksum, when present, is verified.
        let pseudo = checksum::pseudo_ipv4(REMOTE, LOCAL, 17, (frame.len() - 34) as u16);
        put16(&mut frame, 40, 0);
        let c = !checksum::fold(checksum::sum(&frame[34..], pseudo));
        put16(&mut frame, 40, c);
        assert!(matches!(classify(&frame, &[ours]), Classified::Tunnel(_)));
        put16(&mut frame, 40, c ^ 1);
        assert_eq!(
            classify(&frame, &[ours]),
            Classified::Malformed(0, Malformed::Udp)
        );
    }

    #[test]
    fn keys_pick_the_endpoint_exact_before_flow() {
        let eps = [
            gre(KeyMode::Flow, false),
            gre(KeyMode::Fixed(5), false),
            gre(KeyMode::None, false),
        ];
        let pick = |k: KeyMode| {
            let f = encap(&from_remote(&gre(k, false)), 77);
            match classify(&f, &eps) {
                Classified::Tunnel(d) => d.endpoint,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(pick(KeyMode::Fixed(5)), 1);
        assert_eq!(pick(KeyMode::None), 2);
        assert_eq!(pick(KeyMode::Fixed(0)), 2, "key 0 is no key");
        assert_eq!(pick(KeyMode::Fixed(6)), 0);
        let f = encap(&from_remote(&gre(KeyMode::Fixed(6), false)), 0);
        assert_eq!(classify(&f, &eps[1..]), Classified::UnknownKey);
    }

    #[test]
    fn malformed_headers_are_named() {
        let ours = gre(KeyMode::Flow, true);
        let good = encap(&from_remote(&ours), 1);
        let check = |f: &[u8], want: Malformed| {
            assert_eq!(classify(f, &[ours]), Classified::Malformed(0, want));
        };
        let mut f = good.clone();
        f[24] ^= 1; // outer IPv4 checksum
        check(&f, Malformed::OuterIpv4);
        let mut f = good.clone();
        put16(&mut f, 16, 2000); // total length past the frame
        check(&f, Malformed::OuterIpv4);
        let mut f = good.clone();
        put16(&mut f, 20, 0x2000); // MF
        let c = be16(&f, 24);
        put16(&mut f, 24, checksum::update16(c, IPV4_DF, 0x2000));
        check(&f, Malformed::Fragment);
        let mut f = good.clone();
        f[35] |= 1; // GRE version 1
        check(&f, Malformed::GreHeader);
        let mut f = good.clone();
        let last = f.len() - 1;
        f[last] ^= 0xff; // payload changed under the GRE checksum
        check(&f, Malformed::GreChecksum);
        // Protocol IPv4 instead of TEB (checksum recomputed).
        let mut f = good.clone();
        put16(&mut f, 36, 0x0800);
        put16(&mut f, 38, 0);
        let c = checksum::checksum(&f[34..]);
        put16(&mut f, 38, c);
        check(&f, Malformed::GreProtocol(0x0800));
        // Inner frame cut to 10 bytes (lengths kept consistent).
        let nockey = gre(KeyMode::None, false);
        let mut f = encap(&from_remote(&nockey), 0);
        f.truncate(38 + 10);
        let total = (f.len() - 14) as u16;
        put16(&mut f, 16, total);
        put16(&mut f, 24, 0);
        let c = checksum::checksum(&f[14..34]);
        put16(&mut f, 24, c);
        assert_eq!(
            classify(&f, &[nockey]),
            Classified::Malformed(0, Malformed::InnerTooShort)
        );
    }

    #[test]
    fn other_traffic_is_not_a_tunnel() {
        let ours = gre(KeyMode::Flow, false);
        let mut f = encap(&from_remote(&ours), 1);
        assert!(matches!(classify(&f, &[]), Classified::NotTunnel));
        f[14 + 19] = 9; // another destination
        assert_eq!(classify(&f, &[ours]), Classified::NotTunnel);
        assert_eq!(classify(&inner(), &[ours]), Classified::NotTunnel);
    }

    #[test]
    fn padding_after_the_outer_packet_is_not_inner() {
        let ours = gre(KeyMode::None, false);
        let mut f = encap(&from_remote(&ours), 0);
        let n = f.len();
        f.extend_from_slice(&[0xee; 6]);
        let Classified::Tunnel(d) = classify(&f, &[ours]) else {
            panic!()
        };
        assert_eq!(d.inner.end, n);
    }

    proptest! {
        #[test]
        fn classify_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200),
                                 gre_proto in any::<bool>()) {
            let ours = gre(KeyMode::Flow, false);
            let vx = Endpoint { key: KeyMode::Flow, ..Endpoint::new(Kind::Vxlan, LOCAL, REMOTE, LMAC, RMAC) };
            // Make many inputs addressed to the endpoints.
            let mut f = bytes;
            if f.len() >= 34 {
                f[12] = 8; f[13] = 0;
                f[14 + 9] = if gre_proto { 47 } else { 17 };
                f[26..30].copy_from_slice(&REMOTE);
                f[30..34].copy_from_slice(&LOCAL);
            }
            if let Classified::Tunnel(d) = classify(&f, &[ours, vx]) {
                prop_assert!(d.inner.end <= f.len() && d.inner.len() >= 14);
            }
        }

        #[test]
        fn encapsulation_round_trips(len in 14usize..1400, id in any::<u64>(),
                                     csum in any::<bool>(), vxlan in any::<bool>()) {
            let kind = if vxlan { Kind::Vxlan } else { Kind::Gre };
            let ours = Endpoint { key: KeyMode::Flow, csum, ..Endpoint::new(kind, LOCAL, REMOTE, LMAC, RMAC) };
            let payload: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            let mut out = vec![0u8; 2048];
            let n = from_remote(&ours).encapsulate(&payload, id, 1, 2, &mut out).unwrap();
            let Classified::Tunnel(d) = classify(&out[..n], &[ours]) else {
                panic!("not decapsulated")
            };
            prop_assert_eq!(&out[d.inner], &payload[..]);
            let mask = if vxlan { 0xff_ffff } else { 0xffff_ffff };
            prop_assert_eq!(d.tunnel_id, id & mask);
        }
    }
}
