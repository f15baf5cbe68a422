//! The fluent frame builder.

use offlow_wire::ip::Protocol;
use offlow_wire::{
    arp, checksum, ethernet, icmpv4, icmpv6, ipv4, ipv6, mpls, sctp, tcp, udp, vlan, MacAddr,
};

use crate::{MAC_DST, MAC_SRC};

/// What a checksum field holds in the built frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Checksum {
    /// The correct value.
    #[default]
    Valid,
    /// Zero: "no checksum" for UDP over IPv4 (RFC 768), a wrong value
    /// elsewhere.
    Zero,
    /// A wrong value that is neither zero nor equivalent to the correct one
    /// in one's complement (0x0000 and 0xffff are the same sum).
    Bad,
    /// What a Linux sender with checksum offload leaves for the NIC
    /// (`CHECKSUM_PARTIAL`): the folded pseudo-header sum, not inverted.
    /// TCP and UDP only; elsewhere it means [`Checksum::Zero`].
    Partial,
}

/// The network layer.
#[derive(Debug, Clone)]
enum L3 {
    None,
    Ipv4(ipv4::Repr, Vec<u8>),
    Ipv6(ipv6::Repr),
    Arp(arp::Repr),
}

/// The transport layer.
#[derive(Debug, Clone)]
enum L4 {
    None,
    /// No transport header: the payload follows the IP header under this
    /// protocol number (fragments, GRE, extension headers...).
    Raw(u8),
    Udp(udp::Repr),
    Tcp(tcp::Repr, Vec<u8>),
    Icmpv4(icmpv4::Repr),
    Icmpv6(icmpv6::Repr),
    Sctp(sctp::Repr),
}

impl L4 {
    fn header_len(&self) -> usize {
        match self {
            L4::None | L4::Raw(_) => 0,
            L4::Udp(r) => r.header_len(),
            L4::Tcp(r, opts) => r.header_len() + opts.len(),
            L4::Icmpv4(r) => r.header_len(),
            L4::Icmpv6(r) => r.header_len(),
            L4::Sctp(r) => r.header_len(),
        }
    }

    fn protocol(&self) -> Protocol {
        match self {
            L4::None => Protocol::from(offlow_wire::ip::proto::IPV6_NONXT),
            L4::Raw(p) => Protocol::from(*p),
            L4::Udp(_) => Protocol::Udp,
            L4::Tcp(..) => Protocol::Tcp,
            L4::Icmpv4(_) => Protocol::Icmp,
            L4::Icmpv6(_) => Protocol::Icmpv6,
            L4::Sctp(_) => Protocol::Sctp,
        }
    }
}

/// A fluent Ethernet frame builder; see the crate documentation.
///
/// ```
/// use offlow_testkit::{FrameBuilder, MAC_DST, MAC_SRC};
/// let f = FrameBuilder::eth(MAC_DST, MAC_SRC)
///     .vlan(42, 3)
///     .ipv4([10, 0, 0, 1], [10, 0, 0, 2])
///     .ttl(9)
///     .udp(5353, 53)
///     .payload(b"query")
///     .build();
/// assert_eq!(f.len(), 14 + 4 + 20 + 8 + 5);
/// ```
#[derive(Debug, Clone)]
pub struct FrameBuilder {
    dst: MacAddr,
    src: MacAddr,
    /// (TPID, tag) outermost first.
    tags: Vec<(u16, vlan::Repr)>,
    /// Label stack, outermost first.
    labels: Vec<mpls::Repr>,
    ethertype: Option<u16>,
    l3: L3,
    l4: L4,
    payload: Vec<u8>,
    ip_csum: Checksum,
    l4_csum: Checksum,
    ip_len: Option<u16>,
    udp_len: Option<u16>,
    frame_len: usize,
    pad: (usize, u8),
    truncate: Option<usize>,
}

impl Default for FrameBuilder {
    /// [`MAC_DST`] ← [`MAC_SRC`], nothing after.
    fn default() -> Self {
        FrameBuilder::eth(MAC_DST, MAC_SRC)
    }
}

impl FrameBuilder {
    /// Start a frame from `src` to `dst`.
    pub fn eth(dst: MacAddr, src: MacAddr) -> FrameBuilder {
        FrameBuilder {
            dst,
            src,
            tags: Vec::new(),
            labels: Vec::new(),
            ethertype: None,
            l3: L3::None,
            l4: L4::None,
            payload: Vec::new(),
            ip_csum: Checksum::Valid,
            l4_csum: Checksum::Valid,
            ip_len: None,
            udp_len: None,
            frame_len: 0,
            pad: (0, 0),
            truncate: None,
        }
    }

    // ------------------------------------------------------------ layer 2 --

    /// Add an 802.1Q tag (TPID 0x8100, DEI clear) inside the ones before.
    pub fn vlan(self, vid: u16, pcp: u8) -> Self {
        self.tag(vlan::TPID_8021Q, ((pcp as u16 & 7) << 13) | (vid & 0x0fff))
    }

    /// Add a tag with any TPID (0x88a8 for an 802.1ad service tag) and raw
    /// TCI.
    pub fn tag(mut self, tpid: u16, tci: u16) -> Self {
        let repr = vlan::Repr {
            pcp: (tci >> 13) as u8,
            dei: tci & 0x1000 != 0,
            vid: tci & 0x0fff,
            ethertype: 0.into(),
        };
        self.tags.push((tpid, repr));
        self
    }

    /// Push an MPLS label below the ones before; it becomes the bottom of
    /// the stack (the previous bottom no longer is).
    pub fn mpls(mut self, label: u32, tc: u8, ttl: u8) -> Self {
        if let Some(last) = self.labels.last_mut() {
            last.bos = false;
        }
        self.labels.push(mpls::Repr {
            label,
            tc,
            bos: true,
            ttl,
        });
        self
    }

    /// Push a label stack entry exactly as given (bottom-of-stack included).
    pub fn mpls_lse(mut self, lse: mpls::Repr) -> Self {
        self.labels.push(lse);
        self
    }

    /// The EtherType after the tags (default: from what follows — MPLS
    /// unicast, IPv4, IPv6, ARP — or 0x88b5, IEEE's local experimental type,
    /// when nothing does).
    pub fn ethertype(mut self, et: u16) -> Self {
        self.ethertype = Some(et);
        self
    }

    // ------------------------------------------------------------ layer 3 --

    /// IPv4 from `src` to `dst`: TTL 64, TOS 0, identification 0, no flags.
    pub fn ipv4(mut self, src: [u8; 4], dst: [u8; 4]) -> Self {
        self.l3 = L3::Ipv4(
            ipv4::Repr {
                src_addr: src,
                dst_addr: dst,
                protocol: Protocol::Unknown(0),
                payload_len: 0,
                ttl: 64,
                tos: 0,
                ident: 0,
                flags_frag: 0,
            },
            Vec::new(),
        );
        self
    }

    /// IPv6 from `src` to `dst`: hop limit 64, traffic class 0, flow label 0.
    pub fn ipv6(mut self, src: [u8; 16], dst: [u8; 16]) -> Self {
        self.l3 = L3::Ipv6(ipv6::Repr {
            src_addr: src,
            dst_addr: dst,
            next_header: Protocol::Unknown(0),
            payload_len: 0,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        });
        self
    }

    /// An Ethernet/IPv4 ARP packet (operation 1 request, 2 reply).
    pub fn arp(
        mut self,
        oper: u16,
        sha: MacAddr,
        spa: [u8; 4],
        tha: MacAddr,
        tpa: [u8; 4],
    ) -> Self {
        self.l3 = L3::Arp(arp::Repr {
            oper: oper.into(),
            sha,
            spa,
            tha,
            tpa,
        });
        self
    }

    /// IPv4 TTL or IPv6 hop limit.
    pub fn ttl(mut self, ttl: u8) -> Self {
        match &mut self.l3 {
            L3::Ipv4(r, _) => r.ttl = ttl,
            L3::Ipv6(r) => r.hop_limit = ttl,
            _ => {}
        }
        self
    }

    /// IPv4 TOS or IPv6 traffic class (DSCP << 2 | ECN).
    pub fn tos(mut self, tos: u8) -> Self {
        match &mut self.l3 {
            L3::Ipv4(r, _) => r.tos = tos,
            L3::Ipv6(r) => r.traffic_class = tos,
            _ => {}
        }
        self
    }

    /// IPv4 identification.
    pub fn ident(mut self, id: u16) -> Self {
        if let L3::Ipv4(r, _) = &mut self.l3 {
            r.ident = id;
        }
        self
    }

    /// IPv4 flags and fragment offset word, raw.
    pub fn flags_frag(mut self, v: u16) -> Self {
        if let L3::Ipv4(r, _) = &mut self.l3 {
            r.flags_frag = v;
        }
        self
    }

    /// Set IPv4's Don't Fragment flag.
    pub fn dont_frag(mut self) -> Self {
        if let L3::Ipv4(r, _) = &mut self.l3 {
            r.flags_frag |= ipv4::FLAG_DF;
        }
        self
    }

    /// Make the IPv4 packet a fragment at `offset` (in 8-byte units), with
    /// More Fragments set when `more`. A later fragment carries no
    /// transport header: use [`FrameBuilder::ip_payload`].
    pub fn fragment(mut self, offset: u16, more: bool) -> Self {
        if let L3::Ipv4(r, _) = &mut self.l3 {
            r.flags_frag = (r.flags_frag & ipv4::FLAG_DF)
                | (offset & ipv4::FRAG_OFFSET_MASK)
                | if more { ipv4::FLAG_MF } else { 0 };
        }
        self
    }

    /// IPv4 options (a multiple of 4 bytes, at most 40).
    pub fn ip_options(mut self, options: &[u8]) -> Self {
        assert!(
            options.len() % 4 == 0 && options.len() <= 40,
            "IPv4 options"
        );
        if let L3::Ipv4(_, o) = &mut self.l3 {
            *o = options.to_vec();
        }
        self
    }

    /// IPv6 flow label.
    pub fn flow_label(mut self, label: u32) -> Self {
        if let L3::Ipv6(r) = &mut self.l3 {
            r.flow_label = label;
        }
        self
    }

    // ------------------------------------------------------------ layer 4 --

    /// TCP between ports: sequence 1, ack 0, flags ACK, window 65535.
    pub fn tcp(mut self, sport: u16, dport: u16) -> Self {
        self.l4 = L4::Tcp(
            tcp::Repr {
                src_port: sport,
                dst_port: dport,
                seq_number: 1,
                ack_number: 0,
                flags: tcp::flags::ACK,
                window: u16::MAX,
                urgent: 0,
            },
            Vec::new(),
        );
        self
    }

    /// TCP flag bits (see `offlow_wire::tcp::flags`).
    pub fn tcp_flags(mut self, flags: u16) -> Self {
        if let L4::Tcp(r, _) = &mut self.l4 {
            r.flags = flags;
        }
        self
    }

    /// TCP sequence and acknowledgement numbers.
    pub fn tcp_seq_ack(mut self, seq: u32, ack: u32) -> Self {
        if let L4::Tcp(r, _) = &mut self.l4 {
            r.seq_number = seq;
            r.ack_number = ack;
        }
        self
    }

    /// TCP window.
    pub fn tcp_window(mut self, window: u16) -> Self {
        if let L4::Tcp(r, _) = &mut self.l4 {
            r.window = window;
        }
        self
    }

    /// TCP options (a multiple of 4 bytes, at most 40).
    pub fn tcp_options(mut self, options: &[u8]) -> Self {
        assert!(options.len() % 4 == 0 && options.len() <= 40, "TCP options");
        if let L4::Tcp(_, o) = &mut self.l4 {
            *o = options.to_vec();
        }
        self
    }

    /// UDP between ports.
    pub fn udp(mut self, sport: u16, dport: u16) -> Self {
        self.l4 = L4::Udp(udp::Repr {
            src_port: sport,
            dst_port: dport,
            payload_len: 0,
        });
        self
    }

    /// SCTP common header between ports, verification tag 0.
    pub fn sctp(mut self, sport: u16, dport: u16) -> Self {
        self.l4 = L4::Sctp(sctp::Repr {
            src_port: sport,
            dst_port: dport,
            verification_tag: 0,
        });
        self
    }

    /// SCTP verification tag.
    pub fn sctp_tag(mut self, tag: u32) -> Self {
        if let L4::Sctp(r) = &mut self.l4 {
            r.verification_tag = tag;
        }
        self
    }

    /// ICMPv4 header: type, code and the type-specific word.
    pub fn icmpv4(mut self, msg_type: u8, code: u8, rest: u32) -> Self {
        self.l4 = L4::Icmpv4(icmpv4::Repr {
            msg_type: msg_type.into(),
            code,
            rest,
        });
        self
    }

    /// ICMPv4 echo request.
    pub fn icmp_echo(mut self, ident: u16, seq: u16) -> Self {
        self.l4 = L4::Icmpv4(icmpv4::Repr::echo_request(ident, seq));
        self
    }

    /// ICMPv6 header: type and code; the body (ND target and options, echo
    /// identifier...) is the payload.
    pub fn icmpv6(mut self, msg_type: u8, code: u8) -> Self {
        self.l4 = L4::Icmpv6(icmpv6::Repr {
            msg_type: msg_type.into(),
            code,
        });
        self
    }

    /// No transport header: the payload follows the IP header as protocol
    /// `proto` (a later fragment, GRE, an IPv6 extension header...).
    pub fn ip_payload(mut self, proto: u8) -> Self {
        self.l4 = L4::Raw(proto);
        self
    }

    /// Bytes after the last header.
    pub fn payload(mut self, bytes: &[u8]) -> Self {
        self.payload = bytes.to_vec();
        self
    }

    // -------------------------------------------------------------- knobs --

    /// What the IPv4 header checksum holds (default valid).
    pub fn ip_checksum(mut self, c: Checksum) -> Self {
        self.ip_csum = c;
        self
    }

    /// What the transport checksum holds (default valid).
    pub fn l4_checksum(mut self, c: Checksum) -> Self {
        self.l4_csum = c;
        self
    }

    /// Store `len` as the IPv4 total length / IPv6 payload length instead
    /// of the true one (the IPv4 header checksum stays valid for it).
    pub fn ip_total_len(mut self, len: u16) -> Self {
        self.ip_len = Some(len);
        self
    }

    /// Store `len` as the UDP length instead of the true one (before the
    /// checksum is computed, which covers what the length says).
    pub fn udp_len(mut self, len: u16) -> Self {
        self.udp_len = Some(len);
        self
    }

    /// Grow the payload with zeros until the frame is `len` bytes (the
    /// lengths cover the growth). A frame already longer is left as is.
    pub fn frame_len(mut self, len: usize) -> Self {
        self.frame_len = len;
        self
    }

    /// Pad with zeros after the packet up to `len` bytes (60: Ethernet's
    /// minimum without FCS); lengths do not cover padding.
    pub fn pad_to(self, len: usize) -> Self {
        self.pad_to_with(len, 0)
    }

    /// Pad with `byte` after the packet up to `len` bytes.
    pub fn pad_to_with(mut self, len: usize, byte: u8) -> Self {
        self.pad = (len, byte);
        self
    }

    /// Cut the built frame (padding included) to at most `len` bytes: a
    /// runt or a snap-length capture. Lengths and checksums are those of
    /// the whole frame.
    pub fn truncate(mut self, len: usize) -> Self {
        self.truncate = Some(len);
        self
    }

    // -------------------------------------------------------------- build --

    /// The frame.
    pub fn build(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.build_into(&mut out);
        out
    }

    /// Write the frame into `out` (cleared first), reusing its allocation.
    pub fn build_into(&self, out: &mut Vec<u8>) {
        let l2_len = ethernet::HEADER_LEN
            + vlan::TAG_LEN * self.tags.len()
            + mpls::HEADER_LEN * self.labels.len();
        let l3_len = match &self.l3 {
            L3::None => 0,
            L3::Ipv4(r, opts) => r.header_len() + opts.len(),
            L3::Ipv6(r) => r.header_len(),
            L3::Arp(r) => r.header_len(),
        };
        let l4_hdr = self.l4.header_len();
        let headers = l2_len + l3_len + l4_hdr;
        let payload_len = self
            .payload
            .len()
            .max(self.frame_len.saturating_sub(headers));
        let l4_len = l4_hdr + payload_len;

        out.clear();
        out.resize(headers + payload_len, 0);
        let (l2, rest) = out.split_at_mut(l2_len);
        let (l3, l4) = rest.split_at_mut(l3_len);
        l4[l4_hdr..l4_hdr + self.payload.len()].copy_from_slice(&self.payload);

        // Layer 2: each header's EtherType names the next one.
        let inner = self
            .ethertype
            .unwrap_or(match (&self.labels[..], &self.l3) {
                ([_, ..], _) => ethernet::ethertype::MPLS_UNICAST,
                (_, L3::Ipv4(..)) => ethernet::ethertype::IPV4,
                (_, L3::Ipv6(_)) => ethernet::ethertype::IPV6,
                (_, L3::Arp(_)) => ethernet::ethertype::ARP,
                (_, L3::None) => 0x88b5,
            });
        let tpids = self.tags.iter().map(|(tpid, _)| *tpid);
        let mut next = tpids.chain(core::iter::once(inner));
        // `next` yields one more item than there are tags: never empty.
        let first = next.next().unwrap_or(inner);
        ethernet::Repr {
            dst_addr: self.dst,
            src_addr: self.src,
            ethertype: first.into(),
        }
        .emit(&mut ethernet::Frame::new_unchecked(&mut l2[..]));
        let mut at = ethernet::HEADER_LEN;
        for (_, tag) in &self.tags {
            let repr = vlan::Repr {
                ethertype: next.next().unwrap_or(inner).into(),
                ..*tag
            };
            repr.emit(&mut vlan::Tag::new_unchecked(&mut l2[at..]));
            at += vlan::TAG_LEN;
        }
        for lse in &self.labels {
            lse.emit(&mut mpls::Lse::new_unchecked(&mut l2[at..]));
            at += mpls::HEADER_LEN;
        }

        // Transport headers first (checksum 0), so the IP header can take
        // the protocol and length from them.
        match &self.l4 {
            L4::None | L4::Raw(_) => {}
            L4::Udp(r) => {
                let r = udp::Repr { payload_len, ..*r };
                let mut p = udp::Packet::new_unchecked(&mut l4[..]);
                r.emit(&mut p);
                if let Some(len) = self.udp_len {
                    p.set_len(len);
                }
            }
            L4::Tcp(r, opts) => {
                r.emit_with_options(&mut tcp::Packet::new_unchecked(&mut l4[..]), opts)
            }
            L4::Icmpv4(r) => r.emit(&mut icmpv4::Packet::new_unchecked(&mut l4[..])),
            L4::Icmpv6(r) => r.emit(&mut icmpv6::Packet::new_unchecked(&mut l4[..])),
            L4::Sctp(r) => r.emit(&mut sctp::Packet::new_unchecked(&mut l4[..])),
        }

        let protocol = self.l4.protocol();
        let pseudo = match &self.l3 {
            L3::None => 0,
            L3::Arp(r) => {
                r.emit(&mut arp::Packet::new_unchecked(&mut l3[..]));
                0
            }
            L3::Ipv4(r, opts) => {
                let r = ipv4::Repr {
                    protocol,
                    payload_len: l4_len,
                    ..*r
                };
                let mut p = ipv4::Packet::new_unchecked(&mut l3[..]);
                r.emit_with_options(&mut p, opts);
                if let Some(len) = self.ip_len {
                    p.set_total_len(len);
                    p.fill_checksum();
                }
                let valid = p.checksum();
                p.set_checksum(self.ip_csum.apply16(valid, 0));
                r.pseudo_sum()
            }
            L3::Ipv6(r) => {
                let r = ipv6::Repr {
                    next_header: protocol,
                    payload_len: l4_len,
                    ..*r
                };
                let mut p = ipv6::Packet::new_unchecked(&mut l3[..]);
                r.emit(&mut p);
                if let Some(len) = self.ip_len {
                    p.set_payload_len(len);
                }
                r.pseudo_sum()
            }
        };

        let c = self.l4_csum;
        match &self.l4 {
            L4::None | L4::Raw(_) => {}
            L4::Udp(_) => {
                let mut p = udp::Packet::new_unchecked(&mut l4[..]);
                p.fill_checksum(pseudo);
                let v = c.apply16(p.checksum(), pseudo);
                p.set_checksum(v);
            }
            L4::Tcp(..) => {
                let mut p = tcp::Packet::new_unchecked(&mut l4[..]);
                p.fill_checksum(pseudo);
                let v = c.apply16(p.checksum(), pseudo);
                p.set_checksum(v);
            }
            L4::Icmpv4(_) => {
                let mut p = icmpv4::Packet::new_unchecked(&mut l4[..]);
                p.fill_checksum();
                let v = c.apply16(p.checksum(), 0);
                p.set_checksum(v);
            }
            L4::Icmpv6(_) => {
                let mut p = icmpv6::Packet::new_unchecked(&mut l4[..]);
                p.fill_checksum(pseudo);
                let v = c.apply16(p.checksum(), 0);
                p.set_checksum(v);
            }
            L4::Sctp(_) => {
                let mut p = sctp::Packet::new_unchecked(&mut l4[..]);
                p.fill_checksum();
                let field = &mut l4[sctp::field::CHECKSUM];
                let valid = u32::from_le_bytes([field[0], field[1], field[2], field[3]]);
                let v = match c {
                    Checksum::Valid => valid,
                    Checksum::Zero | Checksum::Partial => 0,
                    Checksum::Bad => valid ^ 0x5a5a_5a5a,
                };
                field.copy_from_slice(&v.to_le_bytes());
            }
        }

        let (pad_len, pad_byte) = self.pad;
        if out.len() < pad_len {
            out.resize(pad_len, pad_byte);
        }
        if let Some(n) = self.truncate {
            out.truncate(n);
        }
    }
}

impl Checksum {
    /// The 16-bit value to store, given the valid one and the pseudo-header
    /// sum (for [`Checksum::Partial`]).
    fn apply16(self, valid: u16, pseudo: u32) -> u16 {
        match self {
            Checksum::Valid => valid,
            Checksum::Zero => 0,
            Checksum::Bad => match valid ^ 0x5a5a {
                0 | 0xffff => 0x1234,
                b => b,
            },
            Checksum::Partial => checksum::fold(pseudo),
        }
    }
}
