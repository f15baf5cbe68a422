//! The fast parser for the common frame: Ethernet II, untagged or with one
//! 802.1Q/802.1ad tag, carrying IPv4 without options that is not a fragment,
//! carrying a complete TCP, UDP or ICMPv4 header, or a protocol without
//! transport match fields (anything but those, SCTP and GRE).
//!
//! [`crate::extract_to`] tries [`extract_common`] first and runs the general
//! parser ([`crate::extract::extract_to_general`]) only when it declines.
//! The general parser walks the frame layer by layer through `offlow-wire`
//! views, each with its own length checks and its own failure branch; for
//! the shape that makes up almost all datapath traffic this does one length
//! check on a fixed-size prefix, a handful of shape tests, and writes the
//! key as whole words.
//!
//! # Invariants
//! - **Same result as the general parser.** When [`extract_common`] accepts
//!   a frame, the key and layout it writes are bit-for-bit those the general
//!   parser writes, and the general parser would change no [`ParseStats`]
//!   counter for that frame (so the fast path changes none either). Tested
//!   against the general parser on generated and arbitrary frames
//!   (`tests/prop_extract_fast.rs`).
//! - **Declines rather than guesses.** Anything the general parser would
//!   count in a [`ParseStats`] counter (IPv4 total length beyond the frame or
//!   below the headers, TCP data offset below 5), any fragment, IPv4
//!   options, a second VLAN tag, UDP to the VXLAN port (the general parser
//!   goes on to the tunnel header) and every other protocol is declined,
//!   and a declined frame leaves `key` and `layout` untouched.
//! - Never panics and never reads past the frame: every read is from a
//!   fixed-size array obtained with `first_chunk` (the compiler checks the
//!   constant indices), or from a slice obtained with [`slice::get`].
//!
//! # Thread-safety
//! Pure function over its arguments.
//!
//! [`ParseStats`]: crate::ParseStats

use crate::extract::{L3Kind, L4Kind, Layout, TunnelKind, OFPVID_PRESENT};
use crate::key::{present, Field, FlowKey, KEY_WORDS};
use offlow_wire::ethernet::ethertype;
use offlow_wire::ip::proto;
use offlow_wire::{ipv4, tcp, udp, vlan, vxlan};

/// Ethernet header length (no tag).
const ETH_LEN: usize = 14;
/// Offset of the IPv4 header in an untagged frame.
const L3_UNTAGGED: usize = ETH_LEN;
/// Offset of the IPv4 header behind one VLAN tag.
const L3_TAGGED: usize = ETH_LEN + vlan::TAG_LEN;
/// Bytes of the transport header every accepted TCP, UDP or ICMPv4 header
/// has: UDP's whole header, ICMPv4's type/code/checksum/rest-of-header,
/// TCP's ports and more. The fixed-size prefix read up front includes them
/// (a frame shorter than that is left to the general parser, even with a
/// protocol that needs no transport bytes).
const L4_MIN: usize = 8;

/// The fast path writes the key as whole words; this is where it puts each
/// field. A compile-time check below ties it to [`Field::loc`], so a change
/// of the key layout breaks the build instead of the equivalence.
mod word {
    pub(super) const PORT: usize = 0;
    pub(super) const ETH_DST_TYPE: usize = 3;
    pub(super) const ETH_SRC_VLAN: usize = 4;
    pub(super) const IPV4: usize = 5;
    pub(super) const L4_PROTO_TOS: usize = 6;
}

const _: () = {
    use Field::*;
    let placed: [(Field, usize); 14] = [
        (InPort, word::PORT),
        (InPhyPort, word::PORT),
        (EthDst, word::ETH_DST_TYPE),
        (EthType, word::ETH_DST_TYPE),
        (EthSrc, word::ETH_SRC_VLAN),
        (VlanVid, word::ETH_SRC_VLAN),
        (VlanPcp, word::ETH_SRC_VLAN),
        (Ipv4Src, word::IPV4),
        (Ipv4Dst, word::IPV4),
        (TcpSrc, word::L4_PROTO_TOS),
        (TcpDst, word::L4_PROTO_TOS),
        (IpProto, word::L4_PROTO_TOS),
        (IpDscp, word::L4_PROTO_TOS),
        (IpEcn, word::L4_PROTO_TOS),
    ];
    let mut i = 0;
    while i < placed.len() {
        assert!(placed[i].0.loc().word as usize == placed[i].1);
        i += 1;
    }
    // ICMPv4 type/code share the port slots (key.rs, "shared storage").
    assert!(Icmpv4Type.loc().word as usize == word::L4_PROTO_TOS);
    assert!(Icmpv4Code.loc().word as usize == word::L4_PROTO_TOS);
    assert!(present::WORD < KEY_WORDS);
};

/// `value` shifted to `field`'s place in its word. The caller passes values
/// that fit the field's width (every call site reads exactly that many bits
/// or masks them), so no bit spills into a neighbour.
#[inline(always)]
const fn at(field: Field, value: u64) -> u64 {
    value << field.loc().shift
}

#[inline(always)]
fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// The 48-bit address at `b[at..at + 6]` (constant offsets into a fixed
/// array after inlining, so no bounds check survives).
#[inline(always)]
fn mac(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes([
        0,
        0,
        b[at],
        b[at + 1],
        b[at + 2],
        b[at + 3],
        b[at + 4],
        b[at + 5],
    ])
}

/// Parse `frame` if it has the common shape (see the module documentation),
/// writing the whole key and layout, and return true. Otherwise return false
/// and leave `key` and `layout` untouched; the caller then runs the general
/// parser.
#[inline(always)]
pub fn extract_common(frame: &[u8], in_port: u32, key: &mut FlowKey, lay: &mut Layout) -> bool {
    // The shortest accepted frame is untagged IPv4 + 8 bytes of L4.
    let Some(h) = frame.first_chunk::<{ L3_UNTAGGED + ipv4::MIN_HEADER_LEN + L4_MIN }>() else {
        return false;
    };
    let etype = be16(h, 12);
    if etype == ethertype::IPV4 {
        ipv4_at::<L3_UNTAGGED, { L3_UNTAGGED + ipv4::MIN_HEADER_LEN + L4_MIN }>(
            frame, in_port, key, lay,
        )
    } else if vlan::is_tpid(etype) && be16(h, 16) == ethertype::IPV4 {
        ipv4_at::<L3_TAGGED, { L3_TAGGED + ipv4::MIN_HEADER_LEN + L4_MIN }>(
            frame, in_port, key, lay,
        )
    } else {
        false
    }
}

/// The common shape with the IPv4 header at `L3` (14, or 18 behind one tag).
/// `N` is `L3 + 20 + 8`, the prefix read as a fixed array (stable Rust cannot
/// compute it from `L3` in a type).
#[inline(always)]
fn ipv4_at<const L3: usize, const N: usize>(
    frame: &[u8],
    in_port: u32,
    key: &mut FlowKey,
    lay: &mut Layout,
) -> bool {
    const { assert!(N == L3 + ipv4::MIN_HEADER_LEN + L4_MIN) };
    const { assert!(L3 == L3_UNTAGGED || L3 == L3_TAGGED) };
    let Some(h) = frame.first_chunk::<N>() else {
        return false;
    };
    // Version 4 and IHL 5: no options. Any other value (options, a bad
    // version or IHL) goes to the general parser.
    if h[L3] != 0x45 {
        return false;
    }
    // RFC 791 §3.1: a packet with MF set or a non-zero offset is a
    // fragment; the general parser sets FRAG (and LATER_FRAG).
    if be16(h, L3 + 6) & (ipv4::FLAG_MF | ipv4::FRAG_OFFSET_MASK) != 0 {
        return false;
    }
    let total_len = be16(h, L3 + 2) as usize;
    // `frame.len() >= N > L3`, so the subtraction cannot wrap.
    if total_len > frame.len() - L3 {
        return false; // payload_truncated: the general parser counts it
    }
    if total_len < ipv4::MIN_HEADER_LEN {
        return false; // bad_ipv4_total_len in the general parser
    }
    let ip_proto = h[L3 + 9];
    let l4 = L3 + ipv4::MIN_HEADER_LEN;
    // The general parser bounds the segment by the total length; with the
    // total length inside the frame the segment is `total_len - 20` bytes.
    // Cannot wrap: total_len >= 20 was checked above.
    let seg_len = total_len - ipv4::MIN_HEADER_LEN;
    let (l4_kind, l4_words) = match ip_proto {
        proto::TCP => {
            if seg_len < tcp::MIN_HEADER_LEN {
                return false;
            }
            // Inside the frame: l4 + 12 < l4 + 20 <= L3 + total_len <= len.
            let Some(&off_flags) = frame.get(l4 + 12) else {
                return false;
            };
            // Data offset below 5 words: bad_tcp_offset in the general path.
            if off_flags >> 4 < 5 {
                return false;
            }
            let ports =
                at(Field::TcpSrc, be16(h, l4) as u64) | at(Field::TcpDst, be16(h, l4 + 2) as u64);
            (L4Kind::Tcp, ports)
        }
        proto::UDP => {
            // The VXLAN port makes the general parser look for a VXLAN header.
            if seg_len < udp::HEADER_LEN || be16(h, l4 + 2) == vxlan::UDP_PORT {
                return false;
            }
            let ports =
                at(Field::UdpSrc, be16(h, l4) as u64) | at(Field::UdpDst, be16(h, l4 + 2) as u64);
            (L4Kind::Udp, ports)
        }
        proto::ICMP => {
            if seg_len < L4_MIN {
                return false;
            }
            let tc = at(Field::Icmpv4Type, h[l4] as u64) | at(Field::Icmpv4Code, h[l4 + 1] as u64);
            (L4Kind::Icmpv4, tc)
        }
        // The general parser reads these further (SCTP ports, the GRE
        // header and tunnel key); rare enough to leave to it.
        proto::SCTP | proto::GRE => return false,
        // Any other protocol (ClassBench traces carry 0 and 255, for
        // example) has no transport fields: L3 only, as in the general
        // parser, whatever the segment length.
        _ => (L4Kind::None, 0),
    };

    // Accepted: from here on every field is written, nothing declines.
    let tagged = L3 == L3_TAGGED;
    let (vlan_bits, vlan_pres) = if tagged {
        let tci = be16(h, 14);
        let vid = (OFPVID_PRESENT | (tci & 0x0fff)) as u64;
        let pcp = (tci >> 13) as u64;
        (
            at(Field::VlanVid, vid) | at(Field::VlanPcp, pcp),
            present::VLAN,
        )
    } else {
        (0, 0)
    };
    let tos = h[L3 + 1];
    let mut words = [0u64; KEY_WORDS];
    words[word::PORT] = at(Field::InPort, in_port as u64) | at(Field::InPhyPort, in_port as u64);
    words[word::ETH_DST_TYPE] =
        at(Field::EthDst, mac(h, 0)) | at(Field::EthType, ethertype::IPV4 as u64);
    words[word::ETH_SRC_VLAN] = at(Field::EthSrc, mac(h, 6)) | vlan_bits;
    words[word::IPV4] = at(
        Field::Ipv4Src,
        u32::from_be_bytes([h[L3 + 12], h[L3 + 13], h[L3 + 14], h[L3 + 15]]) as u64,
    ) | at(
        Field::Ipv4Dst,
        u32::from_be_bytes([h[L3 + 16], h[L3 + 17], h[L3 + 18], h[L3 + 19]]) as u64,
    );
    words[word::L4_PROTO_TOS] = l4_words
        | at(Field::IpProto, ip_proto as u64)
        | at(Field::IpDscp, (tos >> 2) as u64)
        | at(Field::IpEcn, (tos & 3) as u64);
    let has_l4 = l4_kind != L4Kind::None;
    let l4_pres = if has_l4 { present::L4 } else { 0 };
    words[present::WORD] = ((present::L3 | l4_pres | vlan_pres) as u64) << present::SHIFT;
    *key = FlowKey { words };
    *lay = Layout {
        vlan_count: tagged as u8,
        vlan: [if tagged { 12 } else { 0 }, 0],
        eth_type: (L3 - 2) as u16,
        l3: L3 as u16,
        l3_kind: L3Kind::Ipv4,
        ip_header_len: ipv4::MIN_HEADER_LEN as u16,
        l4: if has_l4 { l4 as u16 } else { 0 },
        l4_kind,
        tunnel: TunnelKind::None,
        inner: 0,
    };
    true
}
