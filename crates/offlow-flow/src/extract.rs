//! Packet parsing: one Ethernet frame → its [`FlowKey`] plus the header
//! offsets ([`Layout`]) that action execution needs for in-place rewrites.
//!
//! # What is extracted
//!
//! Every OpenFlow 1.3 basic field the frame carries (OpenFlow 1.3.5 §7.2.3.7):
//! in_port (and in_phy_port, equal to in_port: "when the packet is received on
//! a physical port, in_phy_port is equal to in_port"), Ethernet addresses and
//! type, the outer VLAN tag, MPLS top label, PBB I-SID, ARP, IPv4, IPv6 (with
//! its extension-header bitmap), TCP/UDP/SCTP ports, ICMPv4/ICMPv6 type and
//! code, the ND target and link-layer options, and a tunnel id from a GRE key
//! or VXLAN VNI. metadata is 0. Tunnelled frames keep their OUTER headers in
//! the key: the parser does not descend into the inner frame (the [`Layout`]
//! says where it starts).
//!
//! MPLS and PBB frames are the exception, because OpenFlow can pop those
//! encapsulations and a later table must then match the payload: the parser
//! also records the second label of a stack, the PBB customer frame's
//! EtherType (and MAC addresses when they differ from the backbone ones),
//! and the payload's L3/L4 fields (below the bottom-of-stack label, chosen
//! by its first nibble; below an untagged customer header, by its
//! EtherType), as the key's module docs (`encap`) describe. The [`Layout`]
//! still stops at the top label (`l3`) or the I-TAG (after `eth_type`);
//! payload anomalies are not counted in [`ParseStats`].
//!
//! # Presence and errors
//!
//! Parsing proceeds layer by layer. When a header is truncated or
//! inconsistent, everything extracted before it stays, the rest stays zero,
//! its presence bit stays clear, and a named counter in [`ParseStats`] says
//! why. `present::L3` means the network header (IPv4 with options, IPv6 with
//! every extension header up to the upper layer, or Ethernet/IPv4 ARP) was
//! complete; `present::L4` means the transport match fields were complete.
//! A truncated copy of a frame therefore never has a presence bit the whole
//! frame lacks (tested).
//!
//! # Fast path
//! [`extract_to`] (and so [`extract`] and [`extract_into`]) first offers the
//! frame to [`crate::extract_fast::extract_common`], which handles Ethernet
//! (at most one tag) + option-less, unfragmented IPv4 + TCP/UDP/ICMPv4 (or a
//! protocol without transport fields) in a few checks and falls back here, to [`extract_to_general`], for anything
//! else. The two agree bit for bit on key, layout and counters
//! (`tests/prop_extract_fast.rs`); the general parser is the reference.
//!
//! # Invariants
//! - Never panics and never reads past `frame` (fuzzed, property-tested):
//!   every header is read through an `offlow-wire` view built with
//!   `new_checked`, and sub-slices are taken with [`slice::get`].
//! - No allocation, no loop without a small constant bound (VLAN tags ≤ 2,
//!   IPv6 extension headers ≤ [`MAX_IPV6_EXT_HEADERS`], ND options bounded
//!   by the frame length, each at least 8 bytes).
//!
//! # Thread-safety
//! Pure function over its arguments; [`ParseStats`] is per worker (no
//! sharing), merged by whoever reports.

use crate::key::encap::{self, Payload};
use crate::key::{present, Field, FlowKey};
use offlow_wire::ethernet::{self, ethertype};
use offlow_wire::ip::proto;
use offlow_wire::{
    arp, gre, icmpv4, icmpv6, ipv4, ipv6, ipv6ext, mpls, pbb, sctp, tcp, udp, vlan, vxlan, Error,
};

/// OFPVID_PRESENT (OpenFlow 1.3.5 §7.2.3.8): set in VLAN_VID when a tag is
/// present.
pub const OFPVID_PRESENT: u16 = 0x1000;

/// At most this many IPv6 extension headers are skipped; a packet with more
/// is counted in [`ParseStats::ipv6_ext_limit`] and gets no L3 presence.
/// The bound also keeps every offset below 2^16: 8 headers of at most 2,048
/// bytes each plus 22 bytes of L2 and 40 of IPv6 is 16,446.
pub const MAX_IPV6_EXT_HEADERS: usize = 8;

/// `ofp_ipv6exthdr_flags` (OpenFlow 1.3.5 §7.2.3.7), the bits of the
/// IPV6_EXTHDR field.
pub mod exthdr {
    /// "No next header" encountered.
    pub const NONEXT: u16 = 1 << 0;
    /// Encrypted Sec Payload header present.
    pub const ESP: u16 = 1 << 1;
    /// Authentication header present.
    pub const AUTH: u16 = 1 << 2;
    /// 1 or 2 destination option headers present.
    pub const DEST: u16 = 1 << 3;
    /// Fragment header present.
    pub const FRAG: u16 = 1 << 4;
    /// Router header present.
    pub const ROUTER: u16 = 1 << 5;
    /// Hop-by-hop header present.
    pub const HOP: u16 = 1 << 6;
    /// Unexpected repeats encountered.
    pub const UNREP: u16 = 1 << 7;
    /// Unexpected sequencing encountered.
    pub const UNSEQ: u16 = 1 << 8;
}

/// The network-layer header found at [`Layout::l3`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum L3Kind {
    /// No network header was recognised and complete.
    #[default]
    None,
    /// Ethernet/IPv4 ARP (28 bytes).
    Arp,
    /// IPv4; its header length (options included) is [`Layout::ip_header_len`].
    Ipv4,
    /// IPv6. The 40-byte fixed header is complete; [`Layout::ip_header_len`]
    /// is non-zero only if the extension-header chain was walked to the end.
    Ipv6,
    /// An MPLS label stack: `l3` is the offset of the top label stack entry.
    /// The layout does not look below the stack (the key does: see the
    /// module docs).
    Mpls,
}

/// The transport-layer header found at [`Layout::l4`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum L4Kind {
    /// None recognised and complete (includes later fragments).
    #[default]
    None,
    /// TCP (the 20-byte fixed header is complete).
    Tcp,
    /// UDP (8 bytes).
    Udp,
    /// SCTP (12-byte common header).
    Sctp,
    /// ICMPv4 (8 bytes).
    Icmpv4,
    /// ICMPv6 (4 bytes).
    Icmpv6,
    /// GRE (the header with every optional field its flags announce).
    Gre,
}

/// A tunnel encapsulation recognised at L4.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TunnelKind {
    /// No tunnel.
    #[default]
    None,
    /// GRE: the encapsulated packet (of the EtherType in the GRE protocol
    /// field) starts at [`Layout::inner`].
    Gre,
    /// VXLAN: the inner Ethernet frame starts at [`Layout::inner`].
    Vxlan,
}

/// Where the headers of a parsed frame are, for in-place rewrites.
///
/// Every offset is in bytes from the start of the frame. **An offset of 0
/// means "absent"** (no header other than Ethernet can start at byte 0);
/// the `*_kind` fields say what is at the non-zero offsets. Offsets only
/// point at headers whose fixed part is inside the frame, so a rewrite of a
/// fixed field at a non-zero offset is always in bounds.
///
/// | field | meaning | used for |
/// |---|---|---|
/// | `vlan_count`, `vlan[i]` | number of VLAN tags parsed (0..=2) and the offset of tag *i*'s TPID, outer first (12, then 16). A tag is 4 bytes: TPID, TCI. | set VLAN_VID/PCP (TCI at `vlan[0] + 2`), pop VLAN (remove 4 bytes at `vlan[0]`), push VLAN (insert at 12) |
/// | `eth_type` | offset of the EtherType after the tags (12, 16 or 20) | push/pop VLAN and MPLS rewrite it |
/// | `l3`, `l3_kind` | the network header (or MPLS top entry) | set-field on IP/ARP fields, TTL, MPLS label |
/// | `ip_header_len` | IPv4: IHL × 4; IPv6: 40 + skipped extension headers (0 if the chain was not complete) | IPv4 header checksum covers `l3 .. l3 + ip_header_len` |
/// | `l4`, `l4_kind` | the transport header (= `l3 + ip_header_len`) when recognised and complete; not set for later fragments | port rewrites and L4 checksum updates |
/// | `tunnel`, `inner` | GRE or VXLAN and the offset of the encapsulated packet | decapsulation |
///
/// Invariant: when non-zero, `eth_type < l3 <= l4 < inner` and each is at
/// most the frame length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Layout {
    /// Number of VLAN tags parsed (0, 1 or 2).
    pub vlan_count: u8,
    /// Offset of each parsed tag's TPID, outer first; unused entries are 0.
    pub vlan: [u16; 2],
    /// Offset of the EtherType field after the tags; 0 for a runt frame or
    /// a truncated tag.
    pub eth_type: u16,
    /// Offset of the network header (see [`L3Kind`]); 0 if none.
    pub l3: u16,
    /// What is at `l3`.
    pub l3_kind: L3Kind,
    /// IP header length in bytes (IPv4 options and IPv6 extension headers
    /// included); 0 when not IP or the IPv6 chain was incomplete.
    pub ip_header_len: u16,
    /// Offset of the transport header (see [`L4Kind`]); 0 if none.
    pub l4: u16,
    /// What is at `l4`.
    pub l4_kind: L4Kind,
    /// Tunnel encapsulation recognised at L4.
    pub tunnel: TunnelKind,
    /// Offset of the encapsulated packet (after the GRE or VXLAN header);
    /// 0 if none.
    pub inner: u16,
}

/// A parsed frame: its key and header layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Parsed {
    /// The flow key.
    pub key: FlowKey,
    /// The header offsets.
    pub layout: Layout,
}

impl Parsed {
    /// Check the internal consistency of a parse of a `frame_len`-byte frame
    /// (used by the fuzz target and the property tests): layout offsets
    /// ordered and inside the frame, kinds agreeing with offsets, presence
    /// bits implying their prerequisites. Returns the first violation.
    pub fn check_consistency(&self, frame_len: usize) -> Result<(), &'static str> {
        let l = &self.layout;
        let p = self.key.presence();
        let within = |o: u16| (o as usize) <= frame_len;
        if !(within(l.eth_type) && within(l.l3) && within(l.l4) && within(l.inner)) {
            return Err("offset past the frame");
        }
        if (l.l3_kind == L3Kind::None) != (l.l3 == 0)
            || (l.l4_kind == L4Kind::None) != (l.l4 == 0)
            || (l.tunnel == TunnelKind::None) != (l.inner == 0)
        {
            return Err("kind and offset disagree");
        }
        if l.l3 != 0 && l.l3 != l.eth_type + 2 {
            return Err("l3 does not follow the EtherType");
        }
        if l.l4 != 0 && (l.ip_header_len == 0 || l.l4 != l.l3 + l.ip_header_len) {
            return Err("l4 is not l3 + ip_header_len");
        }
        if l.inner != 0 && l.inner <= l.l4 {
            return Err("inner before l4");
        }
        if l.vlan_count > 2
            || l.vlan[..l.vlan_count as usize]
                .iter()
                .enumerate()
                .any(|(i, &o)| o as usize != 12 + 4 * i)
        {
            return Err("bad VLAN offsets");
        }
        let vid = self.key.get(Field::VlanVid) as u16;
        if (p & present::VLAN != 0) != (l.vlan_count > 0)
            || (vid & OFPVID_PRESENT != 0) != (l.vlan_count > 0)
        {
            return Err("VLAN presence disagrees");
        }
        let implies = |a: u16, b: u16| p & a == 0 || p & b == b;
        if !(implies(present::L4, present::L3)
            && implies(present::FRAG, present::L3)
            && implies(present::LATER_FRAG, present::FRAG)
            && implies(present::ND_TARGET, present::L4)
            && implies(present::ND_SLL, present::ND_TARGET)
            && implies(present::ND_TLL, present::ND_TARGET))
        {
            return Err("presence bit without its prerequisite");
        }
        if p & present::LATER_FRAG != 0 && (p & present::L4 != 0 || l.l4 != 0) {
            return Err("later fragment with transport fields");
        }
        // Under PBB the layout stops at the I-TAG while the key holds the
        // customer payload (its kind recorded).
        if p & present::L3 != 0
            && l.l3_kind == L3Kind::None
            && encap::payload(&self.key) == Payload::None
        {
            return Err("L3 presence without an L3 header");
        }
        if self.key.get(Field::InPort) != self.key.get(Field::InPhyPort) {
            return Err("in_phy_port differs from in_port");
        }
        Ok(())
    }
}

/// Defines [`ParseStats`] with one `u64` per reason and the iteration helpers.
macro_rules! parse_stats {
    ($( $(#[$doc:meta])* $name:ident, )+) => {
        /// Per-worker counters of frames whose parse stopped early, one per
        /// reason (invariant 5: every drop or anomaly has a named counter).
        /// A frame bumps at most one counter per layer it stopped at.
        #[derive(Debug, Clone, Default, PartialEq, Eq)]
        pub struct ParseStats {
            $( $(#[$doc])* pub $name: u64, )+
        }

        impl ParseStats {
            /// Counter names, in declaration order.
            pub const NAMES: &'static [&'static str] = &[$(stringify!($name)),+];

            /// `(name, value)` pairs, in declaration order.
            pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> {
                [$((stringify!($name), self.$name)),+].into_iter()
            }

            /// Add every counter of `other` into `self`.
            pub fn merge(&mut self, other: &ParseStats) {
                $( self.$name += other.$name; )+
            }

            /// Sum of all counters.
            pub fn total(&self) -> u64 {
                0 $( + self.$name )+
            }
        }
    };
}

parse_stats! {
    /// Frame shorter than the 14-byte Ethernet header.
    runt,
    /// A VLAN tag (TCI + next EtherType) cut short.
    truncated_vlan,
    /// A third VLAN tag: parsing stopped after two, eth_type is its TPID.
    vlan_too_many,
    /// MPLS label stack entry cut short.
    truncated_mpls,
    /// PBB I-TAG cut short.
    truncated_pbb,
    /// ARP packet shorter than its address lengths announce.
    truncated_arp,
    /// ARP that is not Ethernet/IPv4 (OpenFlow's ARP fields describe only that form).
    arp_unsupported,
    /// IPv4 header (options included) cut short.
    truncated_ipv4,
    /// EtherType IPv4 but the version field is not 4.
    bad_ipv4_version,
    /// IPv4 IHL below 5.
    bad_ipv4_ihl,
    /// IPv4 total length below the header length.
    bad_ipv4_total_len,
    /// IPv4 total length beyond the frame (header parsed; payload clamped).
    ipv4_payload_truncated,
    /// IPv6 fixed header cut short.
    truncated_ipv6,
    /// EtherType IPv6 but the version field is not 6.
    bad_ipv6_version,
    /// IPv6 payload length beyond the frame (header parsed; payload clamped).
    ipv6_payload_truncated,
    /// An IPv6 extension header cut short (no L3 presence).
    truncated_ipv6_ext,
    /// More than MAX_IPV6_EXT_HEADERS extension headers (no L3 presence).
    ipv6_ext_limit,
    /// TCP fixed header cut short.
    truncated_tcp,
    /// TCP data offset below 5.
    bad_tcp_offset,
    /// UDP header cut short.
    truncated_udp,
    /// SCTP common header cut short.
    truncated_sctp,
    /// ICMPv4 header cut short.
    truncated_icmpv4,
    /// ICMPv6 header cut short.
    truncated_icmpv6,
    /// NS/NA body (flags + target) cut short.
    truncated_nd,
    /// ND option running past the packet.
    truncated_nd_option,
    /// ND option with length 0 (RFC 4861 §4.6).
    bad_nd_option,
    /// A second SLL (NS) or TLL (NA) option; the first is kept.
    nd_dup_option,
    /// GRE header cut short.
    truncated_gre,
    /// GRE version other than 0.
    bad_gre_version,
    /// GRE with RFC 1701 routing / strict-route / recursion bits.
    gre_unsupported,
    /// VXLAN header cut short.
    truncated_vxlan,
    /// VXLAN header without the I flag (no valid VNI).
    vxlan_no_vni,
}

/// Parse `frame`, received on `in_port`, into a key and a layout.
/// See the module documentation for the semantics.
#[inline]
pub fn extract(frame: &[u8], in_port: u32, stats: &mut ParseStats) -> Parsed {
    let mut key = FlowKey::ZERO;
    let layout = extract_into(frame, in_port, &mut key, stats);
    Parsed { key, layout }
}

/// Like [`extract`], writing the key into `key` (which is fully
/// overwritten), for callers that keep keys in a batch array.
#[inline]
pub fn extract_into(
    frame: &[u8],
    in_port: u32,
    key: &mut FlowKey,
    stats: &mut ParseStats,
) -> Layout {
    let mut lay = Layout::default();
    extract_to(frame, in_port, key, &mut lay, stats);
    lay
}

/// Like [`extract_into`], also writing the layout in place (fully
/// overwritten): a worker keeps keys and layouts in batch arrays, and
/// returning a layout by value costs a stack round trip per packet.
///
/// The common frame (Ethernet, at most one VLAN tag, IPv4 without options,
/// not a fragment, TCP/UDP/ICMPv4 or a protocol without transport fields)
/// takes a fast path
/// ([`crate::extract_fast::extract_common`]); everything else, and anything
/// that path is unsure of, goes to [`extract_to_general`]. Both give the
/// same key, layout and counters (property-tested).
#[inline]
pub fn extract_to(
    frame: &[u8],
    in_port: u32,
    key: &mut FlowKey,
    lay: &mut Layout,
    stats: &mut ParseStats,
) {
    if !crate::extract_fast::extract_common(frame, in_port, key, lay) {
        extract_to_general(frame, in_port, key, lay, stats);
    }
}

/// The general parser: every frame shape, layer by layer (see the module
/// documentation). [`extract_to`] calls it for every frame the fast path
/// declines; it is public as the reference the fast path is tested
/// against. Same contract as [`extract_to`].
///
/// Kept out of line so the worker's loop holds only the small fast path
/// (the general parser's body is large and now runs for few packets); the
/// effect of this attribute alone was not measured.
#[inline(never)]
pub fn extract_to_general(
    frame: &[u8],
    in_port: u32,
    key: &mut FlowKey,
    lay: &mut Layout,
    stats: &mut ParseStats,
) {
    *key = FlowKey::ZERO;
    key.set(Field::InPort, in_port as u128);
    key.set(Field::InPhyPort, in_port as u128);
    *lay = Layout::default();

    let eth = match ethernet::Frame::new_checked(frame) {
        Ok(e) => e,
        Err(_) => {
            stats.runt += 1;
            return;
        }
    };
    key.set(Field::EthDst, mac(eth.dst_addr()));
    key.set(Field::EthSrc, mac(eth.src_addr()));

    // OpenFlow 1.3.5 §7.2.3.8: VLAN_VID/PCP describe the outermost tag;
    // ETH_TYPE is the EtherType after all tags.
    let mut type_off = ethernet::field::ETHERTYPE.start;
    let mut etype = eth.ethertype_raw();
    while vlan::is_tpid(etype) {
        if lay.vlan_count == 2 {
            stats.vlan_too_many += 1;
            break;
        }
        let tag = match vlan::Tag::new_checked(tail(frame, type_off + 2)) {
            Ok(t) => t,
            Err(_) => {
                stats.truncated_vlan += 1;
                return;
            }
        };
        if lay.vlan_count == 0 {
            key.set(Field::VlanVid, (OFPVID_PRESENT | tag.vid()) as u128);
            key.set(Field::VlanPcp, tag.pcp() as u128);
            key.add_presence(present::VLAN);
        }
        lay.vlan[lay.vlan_count as usize] = off16(type_off);
        lay.vlan_count += 1;
        etype = tag.ethertype_raw();
        type_off += vlan::TAG_LEN;
    }
    key.set(Field::EthType, etype as u128);
    lay.eth_type = off16(type_off);
    if lay.vlan_count == 2 && vlan::is_tpid(etype) {
        return; // third tag, counted above
    }

    let l3 = type_off + 2;
    match etype {
        ethertype::IPV4 => parse_ipv4(frame, l3, key, lay, stats),
        ethertype::IPV6 => parse_ipv6(frame, l3, key, lay, stats),
        ethertype::ARP => parse_arp(frame, l3, key, lay, stats),
        ethertype::MPLS_UNICAST | ethertype::MPLS_MULTICAST => {
            parse_mpls(frame, l3, key, lay, stats)
        }
        ethertype::PBB => parse_pbb(frame, l3, key, eth.dst_addr(), eth.src_addr(), stats),
        _ => {}
    }
}

/// At most this many MPLS label stack entries are walked to find the
/// payload; a deeper stack leaves the payload unparsed.
pub const MAX_MPLS_LABELS: usize = 8;

/// An MPLS label stack at `off`: the top entry into the MPLS fields, the
/// second into [`encap::NEXT_LSE`], and the payload below the
/// bottom-of-stack entry into the L3/L4 fields (see the key's module docs:
/// a pop must be able to reveal them; no rule can match them before).
#[inline]
fn parse_mpls(
    frame: &[u8],
    off: usize,
    key: &mut FlowKey,
    lay: &mut Layout,
    stats: &mut ParseStats,
) {
    let lse = match mpls::Lse::new_checked(tail(frame, off)) {
        Ok(l) => l,
        Err(_) => {
            stats.truncated_mpls += 1;
            return;
        }
    };
    key.set(Field::MplsLabel, lse.label() as u128);
    key.set(Field::MplsTc, lse.tc() as u128);
    key.set(Field::MplsBos, lse.bos() as u128);
    key.add_presence(present::MPLS);
    lay.l3 = off16(off);
    lay.l3_kind = L3Kind::Mpls;
    let mut at = off + mpls::HEADER_LEN;
    let mut bos = lse.bos();
    let mut depth = 1;
    while !bos {
        if depth == MAX_MPLS_LABELS {
            return;
        }
        let Ok(next) = mpls::Lse::new_checked(tail(frame, at)) else {
            stats.truncated_mpls += 1;
            return;
        };
        if depth == 1 {
            let packed = (next.label() << 4) | (u32::from(next.tc()) << 1) | u32::from(next.bos());
            key.set(encap::NEXT_LSE, packed as u128);
            key.add_presence(present::MPLS_NEXT);
        }
        bos = next.bos();
        depth += 1;
        at += mpls::HEADER_LEN;
    }
    // RFC 3032 §2.2: what follows the bottom of the stack is not typed; the
    // IP version nibble is what every LSR looks at, and anything else is
    // tried as ARP. The payload's anomalies are not counted: it is parsed
    // for a pop that may never come.
    let kind = match frame.get(at).map(|b| b >> 4) {
        Some(4) => Payload::Ipv4,
        Some(6) => Payload::Ipv6,
        Some(_) => Payload::Arp,
        None => return,
    };
    parse_payload(frame, at, kind, key);
}

/// The payload of an encapsulation at `at`, of kind `kind`, into the L3/L4
/// fields, with the kind recorded. Uses the same parsers as an unencapsulated
/// frame, so after a pop to the matching EtherType the key is exactly what
/// a parse of the popped frame gives.
#[inline]
fn parse_payload(frame: &[u8], at: usize, kind: Payload, key: &mut FlowKey) {
    let mut lay = Layout::default();
    let mut stats = ParseStats::default();
    match kind {
        Payload::Ipv4 => parse_ipv4(frame, at, key, &mut lay, &mut stats),
        Payload::Ipv6 => parse_ipv6(frame, at, key, &mut lay, &mut stats),
        Payload::Arp => parse_arp(frame, at, key, &mut lay, &mut stats),
        Payload::None => return,
    }
    encap::set_payload(key, kind);
}

/// A PBB I-TAG at `off` (IEEE 802.1ah): the I-SID, then the customer frame
/// for a later pop-PBB: its EtherType into [`encap::CUSTOMER_TYPE`], its
/// MAC addresses into [`encap::CUSTOMER_MACS`] when they differ from the
/// backbone's `b_da`/`b_sa`, and an untagged IPv4/IPv6/ARP payload into the
/// L3/L4 fields.
#[inline]
fn parse_pbb(
    frame: &[u8],
    off: usize,
    key: &mut FlowKey,
    b_da: [u8; 6],
    b_sa: [u8; 6],
    stats: &mut ParseStats,
) {
    let t = match pbb::ITag::new_checked(tail(frame, off)) {
        Ok(t) => t,
        Err(_) => {
            stats.truncated_pbb += 1;
            return;
        }
    };
    key.set(Field::PbbIsid, t.isid() as u128);
    let c = off + pbb::HEADER_LEN;
    let Ok(cust) = ethernet::Frame::new_checked(tail(frame, c)) else {
        return;
    };
    let ctype = cust.ethertype_raw();
    key.set(encap::CUSTOMER_TYPE, u128::from(ctype));
    parse_payload(
        frame,
        c + ethernet::HEADER_LEN,
        Payload::of_ethertype(ctype),
        key,
    );
    let (c_da, c_sa) = (cust.dst_addr(), cust.src_addr());
    if (c_da, c_sa) != (b_da, b_sa) {
        // The customer addresses share their slot with the ND target: they
        // win, and an ND payload's target and link-layer options are left
        // out (the working key calls such a pop inexact). Deciding on the
        // addresses alone, which every prefix that reaches here has whole,
        // keeps a truncated frame from claiming what the whole one lacks.
        if key.presence() & present::ND_TARGET != 0 {
            key.set(Field::Ipv6NdSll, 0);
            key.set(Field::Ipv6NdTll, 0);
            key.clear_presence(present::ND_TARGET | present::ND_SLL | present::ND_TLL);
        }
        key.set(encap::CUSTOMER_MACS, (mac(c_da) << 48) | mac(c_sa));
        key.add_presence(present::PBB_CMAC);
    }
}

/// `frame[at..]`, or empty when `at` is past the end (never panics).
#[inline(always)]
fn tail(frame: &[u8], at: usize) -> &[u8] {
    frame.get(at..).unwrap_or(&[])
}

/// An offset as stored in [`Layout`]. Every offset the parser produces is at
/// most 22 (L2) + 60 (IPv4) or 22 + 40 + 8 × 2,048 (IPv6 extension headers)
/// + 16 (GRE) + 8 (UDP), far below 2^16, so the conversion is exact.
#[inline(always)]
fn off16(x: usize) -> u16 {
    debug_assert!(x <= u16::MAX as usize);
    x as u16
}

#[inline(always)]
fn mac(a: [u8; 6]) -> u128 {
    u64::from_be_bytes([0, 0, a[0], a[1], a[2], a[3], a[4], a[5]]) as u128
}

/// Big-endian value of up to 16 bytes (ARP addresses come as slices whose
/// lengths the caller has checked).
#[inline(always)]
fn be_value(b: &[u8]) -> u128 {
    b.iter().fold(0u128, |acc, &x| (acc << 8) | x as u128)
}

#[inline]
fn parse_arp(
    frame: &[u8],
    off: usize,
    key: &mut FlowKey,
    lay: &mut Layout,
    stats: &mut ParseStats,
) {
    let a = match arp::Packet::new_checked(tail(frame, off)) {
        Ok(a) => a,
        Err(_) => {
            stats.truncated_arp += 1;
            return;
        }
    };
    if !a.is_ethernet_ipv4() {
        stats.arp_unsupported += 1;
        return;
    }
    key.set(Field::ArpOp, a.oper_raw() as u128);
    key.set(Field::ArpSpa, be_value(a.spa()));
    key.set(Field::ArpTpa, be_value(a.tpa()));
    key.set(Field::ArpSha, be_value(a.sha()));
    key.set(Field::ArpTha, be_value(a.tha()));
    key.add_presence(present::L3);
    lay.l3 = off16(off);
    lay.l3_kind = L3Kind::Arp;
}

#[inline]
fn parse_ipv4(
    frame: &[u8],
    off: usize,
    key: &mut FlowKey,
    lay: &mut Layout,
    stats: &mut ParseStats,
) {
    let ip = match ipv4::Packet::new_checked(tail(frame, off)) {
        Ok(p) => p,
        Err(e) => {
            match e {
                Error::BadVersion => stats.bad_ipv4_version += 1,
                Error::BadHeaderLen => stats.bad_ipv4_ihl += 1,
                Error::BadTotalLen => stats.bad_ipv4_total_len += 1,
                _ => stats.truncated_ipv4 += 1,
            }
            return;
        }
    };
    let proto = ip.protocol_raw();
    key.set(Field::IpDscp, ip.dscp() as u128);
    key.set(Field::IpEcn, ip.ecn() as u128);
    key.set(Field::IpProto, proto as u128);
    key.set(Field::Ipv4Src, u32::from_be_bytes(ip.src_addr()) as u128);
    key.set(Field::Ipv4Dst, u32::from_be_bytes(ip.dst_addr()) as u128);
    let hl = ip.header_len();
    lay.l3 = off16(off);
    lay.l3_kind = L3Kind::Ipv4;
    lay.ip_header_len = off16(hl);
    if ip.payload_truncated() {
        stats.ipv4_payload_truncated += 1;
    }
    let mut pres = present::L3;
    let ff = ip.flags_frag();
    if ff & (ipv4::FLAG_MF | ipv4::FRAG_OFFSET_MASK) != 0 {
        pres |= present::FRAG;
        if ff & ipv4::FRAG_OFFSET_MASK != 0 {
            // A later fragment carries no transport header.
            key.add_presence(pres | present::LATER_FRAG);
            return;
        }
    }
    key.add_presence(pres);
    parse_l4(ip.payload(), off + hl, proto, false, key, lay, stats);
}

/// Ordering ranks of RFC 8200 §4.1's recommended extension-header order,
/// used to detect `exthdr::UNSEQ`.
mod rank {
    pub(super) const HOP: u8 = 0;
    pub(super) const DEST_BEFORE_ROUTING: u8 = 1;
    pub(super) const ROUTER: u8 = 2;
    pub(super) const FRAG: u8 = 3;
    pub(super) const AUTH: u8 = 4;
    pub(super) const ESP: u8 = 5;
    pub(super) const DEST_FINAL: u8 = 6;
}

/// Tracks the IPV6_EXTHDR bits while walking the chain.
struct ExtHdrs {
    bits: u16,
    max_rank: u8,
    dest_before_routing: bool,
    dest_final: bool,
}

impl ExtHdrs {
    /// Record a header with flag `bit`. RFC 8200 §4.1: "Each extension
    /// header should occur at most once, except for the Destination Options
    /// header, which should occur at most twice (once before a Routing header
    /// and once before the upper-layer header)", in the order of §4.1.
    #[inline]
    fn see(&mut self, bit: u16) {
        let rank = match bit {
            exthdr::HOP => rank::HOP,
            exthdr::ROUTER => rank::ROUTER,
            exthdr::FRAG => rank::FRAG,
            exthdr::AUTH => rank::AUTH,
            exthdr::ESP => rank::ESP,
            _ => {
                // Destination options: before routing while nothing past
                // the routing slot was seen, else the final one.
                let (slot, r) = if self.max_rank <= rank::DEST_BEFORE_ROUTING {
                    (&mut self.dest_before_routing, rank::DEST_BEFORE_ROUTING)
                } else {
                    (&mut self.dest_final, rank::DEST_FINAL)
                };
                if *slot {
                    self.bits |= exthdr::UNREP;
                }
                *slot = true;
                self.order(r);
                self.bits |= exthdr::DEST;
                return;
            }
        };
        if self.bits & bit != 0 {
            self.bits |= exthdr::UNREP;
        }
        self.order(rank);
        self.bits |= bit;
    }

    #[inline]
    fn order(&mut self, rank: u8) {
        if rank < self.max_rank {
            self.bits |= exthdr::UNSEQ;
        }
        self.max_rank = self.max_rank.max(rank);
    }
}

#[inline]
fn parse_ipv6(
    frame: &[u8],
    off: usize,
    key: &mut FlowKey,
    lay: &mut Layout,
    stats: &mut ParseStats,
) {
    let ip = match ipv6::Packet::new_checked(tail(frame, off)) {
        Ok(p) => p,
        Err(Error::Truncated) => {
            stats.truncated_ipv6 += 1;
            return;
        }
        Err(_) => {
            stats.bad_ipv6_version += 1;
            return;
        }
    };
    key.set(Field::Ipv6Src, u128::from_be_bytes(ip.src_addr()));
    key.set(Field::Ipv6Dst, u128::from_be_bytes(ip.dst_addr()));
    key.set(Field::Ipv6Flabel, ip.flow_label() as u128);
    key.set(Field::IpDscp, ip.dscp() as u128);
    key.set(Field::IpEcn, ip.ecn() as u128);
    lay.l3 = off16(off);
    lay.l3_kind = L3Kind::Ipv6;
    if ip.payload_truncated() {
        stats.ipv6_payload_truncated += 1;
    }

    // Walk the extension headers to the upper layer. `pos` is the offset of
    // the current header inside the IPv6 payload.
    let payload = ip.payload();
    let mut nh = ip.next_header_raw();
    let mut pos = 0usize;
    let mut eh = ExtHdrs {
        bits: 0,
        max_rank: 0,
        dest_before_routing: false,
        dest_final: false,
    };
    let mut pres = present::L3;
    let mut skipped = 0usize;
    loop {
        let bit = match nh {
            proto::HOPOPT => exthdr::HOP,
            proto::IPV6_ROUTE => exthdr::ROUTER,
            proto::IPV6_OPTS => exthdr::DEST,
            proto::IPV6_FRAG => exthdr::FRAG,
            proto::AH => exthdr::AUTH,
            proto::ESP => {
                // What follows ESP is encrypted: ip_proto is 50.
                eh.see(exthdr::ESP);
                break;
            }
            proto::IPV6_NONXT => {
                eh.bits |= exthdr::NONEXT;
                break;
            }
            _ => break, // upper layer (or unknown): stop here
        };
        if skipped == MAX_IPV6_EXT_HEADERS {
            stats.ipv6_ext_limit += 1;
            key.set(Field::Ipv6Exthdr, eh.bits as u128);
            return;
        }
        let rest = tail(payload, pos);
        let (next, len) = match nh {
            proto::IPV6_FRAG => match ipv6ext::FragmentHeader::new_checked(rest) {
                Ok(f) => {
                    pres |= present::FRAG;
                    if f.frag_offset_units() != 0 {
                        // A later fragment: no upper-layer header follows.
                        // ip_proto is the fragment header's next header, as
                        // IPv4 later fragments keep their protocol.
                        eh.see(bit);
                        key.set(Field::Ipv6Exthdr, eh.bits as u128);
                        key.set(Field::IpProto, f.next_header_raw() as u128);
                        key.add_presence(pres | present::LATER_FRAG);
                        return;
                    }
                    (f.next_header_raw(), ipv6ext::FRAGMENT_LEN)
                }
                Err(_) => (0, 0),
            },
            proto::AH => match ipv6ext::AuthHeader::new_checked(rest) {
                Ok(a) => (a.next_header_raw(), a.header_len()),
                Err(_) => (0, 0),
            },
            _ => match ipv6ext::ExtHeader::new_checked(rest) {
                Ok(h) => (h.next_header_raw(), h.header_len()),
                Err(_) => (0, 0),
            },
        };
        if len == 0 {
            // Only a failed view yields 0 (every valid header is >= 8 bytes).
            stats.truncated_ipv6_ext += 1;
            key.set(Field::Ipv6Exthdr, eh.bits as u128);
            return;
        }
        eh.see(bit);
        nh = next;
        pos += len;
        skipped += 1;
    }
    key.set(Field::Ipv6Exthdr, eh.bits as u128);
    key.set(Field::IpProto, nh as u128);
    key.add_presence(pres);
    let hl = ipv6::HEADER_LEN + pos;
    lay.ip_header_len = off16(hl);
    if matches!(nh, proto::ESP | proto::IPV6_NONXT) {
        return;
    }
    parse_l4(tail(payload, pos), off + hl, nh, true, key, lay, stats);
}

/// Parse the transport header of protocol `proto` at `l4` (`seg` is the
/// segment, already bounded by the IP payload length).
#[inline]
fn parse_l4(
    seg: &[u8],
    l4: usize,
    proto: u8,
    is_v6: bool,
    key: &mut FlowKey,
    lay: &mut Layout,
    stats: &mut ParseStats,
) {
    match proto {
        proto::TCP => match tcp::Packet::new_checked(seg) {
            Ok(t) => {
                ports(key, t.src_port(), t.dst_port());
                lay.l4_kind = L4Kind::Tcp;
            }
            Err(Error::BadHeaderLen) => stats.bad_tcp_offset += 1,
            Err(_) => stats.truncated_tcp += 1,
        },
        proto::UDP => match udp::Packet::new_checked(seg) {
            Ok(u) => {
                ports(key, u.src_port(), u.dst_port());
                lay.l4_kind = L4Kind::Udp;
                if u.dst_port() == vxlan::UDP_PORT {
                    parse_vxlan(u.payload(), l4 + udp::HEADER_LEN, key, lay, stats);
                }
            }
            Err(_) => stats.truncated_udp += 1,
        },
        proto::SCTP => match sctp::Packet::new_checked(seg) {
            Ok(s) => {
                ports(key, s.src_port(), s.dst_port());
                lay.l4_kind = L4Kind::Sctp;
            }
            Err(_) => stats.truncated_sctp += 1,
        },
        proto::ICMP if !is_v6 => match icmpv4::Packet::new_checked(seg) {
            Ok(i) => {
                key.set(Field::Icmpv4Type, i.msg_type_raw() as u128);
                key.set(Field::Icmpv4Code, i.msg_code() as u128);
                key.add_presence(present::L4);
                lay.l4_kind = L4Kind::Icmpv4;
            }
            Err(_) => stats.truncated_icmpv4 += 1,
        },
        proto::ICMPV6 if is_v6 => match icmpv6::Packet::new_checked(seg) {
            Ok(i) => {
                let t = i.msg_type_raw();
                key.set(Field::Icmpv6Type, t as u128);
                key.set(Field::Icmpv6Code, i.msg_code() as u128);
                key.add_presence(present::L4);
                lay.l4_kind = L4Kind::Icmpv6;
                // RFC 4861 §7.1.1/§7.1.2: NS/NA with a code other than 0 are
                // invalid; they keep type/code but no ND fields.
                if (t == icmpv6::TYPE_NEIGHBOR_SOLICIT || t == icmpv6::TYPE_NEIGHBOR_ADVERT)
                    && i.msg_code() == 0
                {
                    parse_nd(seg, t, key, stats);
                }
            }
            Err(_) => stats.truncated_icmpv6 += 1,
        },
        proto::GRE => match gre::Packet::new_checked(seg) {
            Ok(g) => {
                lay.l4_kind = L4Kind::Gre;
                lay.tunnel = TunnelKind::Gre;
                lay.inner = off16(l4 + g.header_len());
                if let Some(k) = g.key() {
                    key.set(Field::TunnelId, k as u128);
                    key.add_presence(present::TUNNEL);
                }
            }
            Err(Error::BadVersion) => stats.bad_gre_version += 1,
            Err(Error::Unsupported) => stats.gre_unsupported += 1,
            Err(_) => stats.truncated_gre += 1,
        },
        _ => {}
    }
    if lay.l4_kind != L4Kind::None {
        lay.l4 = off16(l4);
    }
}

#[inline(always)]
fn ports(key: &mut FlowKey, src: u16, dst: u16) {
    key.set(Field::TcpSrc, src as u128);
    key.set(Field::TcpDst, dst as u128);
    key.add_presence(present::L4);
}

#[inline]
fn parse_vxlan(
    payload: &[u8],
    off: usize,
    key: &mut FlowKey,
    lay: &mut Layout,
    stats: &mut ParseStats,
) {
    match vxlan::Packet::new_checked(payload) {
        Ok(v) => {
            lay.tunnel = TunnelKind::Vxlan;
            lay.inner = off16(off + vxlan::HEADER_LEN);
            if v.has_vni() {
                key.set(Field::TunnelId, v.vni() as u128);
                key.add_presence(present::TUNNEL);
            } else {
                stats.vxlan_no_vni += 1;
            }
        }
        Err(_) => stats.truncated_vxlan += 1,
    }
}

/// Neighbour discovery: the target, and the SLL option of an NS or the TLL
/// option of an NA (OpenFlow 1.3.5 §7.2.3.7 prerequisites:
/// ICMPV6_TYPE=135 for ND_SLL, 136 for ND_TLL).
#[inline]
fn parse_nd(seg: &[u8], msg_type: u8, key: &mut FlowKey, stats: &mut ParseStats) {
    let nd = match icmpv6::NdPacket::new_checked(seg) {
        Ok(n) => n,
        Err(_) => {
            stats.truncated_nd += 1;
            return;
        }
    };
    key.set(Field::Ipv6NdTarget, u128::from_be_bytes(nd.target_addr()));
    key.add_presence(present::ND_TARGET);
    let (want, field, bit) = if msg_type == icmpv6::TYPE_NEIGHBOR_SOLICIT {
        (
            icmpv6::ND_OPT_SOURCE_LL_ADDR,
            Field::Ipv6NdSll,
            present::ND_SLL,
        )
    } else {
        (
            icmpv6::ND_OPT_TARGET_LL_ADDR,
            Field::Ipv6NdTll,
            present::ND_TLL,
        )
    };
    // Bounded: each option consumes at least 8 bytes of the frame.
    for opt in nd.options() {
        match opt {
            Ok(o) if o.kind == want => {
                if key.presence() & bit != 0 {
                    stats.nd_dup_option += 1;
                } else if let Some(a) = o.link_layer_addr() {
                    key.set(field, mac(a));
                    key.add_presence(bit);
                }
            }
            Ok(_) => {}
            Err(Error::BadHeaderLen) => stats.bad_nd_option += 1,
            Err(_) => stats.truncated_nd_option += 1,
        }
    }
}
