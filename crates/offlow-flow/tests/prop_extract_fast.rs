//! The fast path for the common frame (`extract_fast::extract_common`, taken
//! first by `extract_to`) against the reference, the general parser
//! (`extract_to_general`): on every frame both must produce the same key,
//! the same layout and the same `ParseStats` changes; when the fast path
//! declines, it must leave key and layout untouched. Frames are generated
//! around the common shape (Ethernet, 0-2 tags, IPv4 TCP/UDP/ICMP) with
//! every field random and with the shape broken one way or another (options,
//! fragments, lengths that lie or cut the L4 header short, other
//! EtherTypes, truncation), plus arbitrary byte strings.

mod common;

use offlow_flow::extract_fast::extract_common;
use offlow_flow::{extract_to, extract_to_general, FlowKey, L3Kind, L4Kind, Layout, ParseStats};
use offlow_flow::{TunnelKind, KEY_WORDS};
use proptest::prelude::*;

/// A key no parser writes (every word set), to show forgotten fields.
fn poison_key() -> FlowKey {
    FlowKey {
        words: [0xa5a5_a5a5_a5a5_a5a5; KEY_WORDS],
    }
}

/// A layout no parser writes.
fn poison_layout() -> Layout {
    Layout {
        vlan_count: 9,
        vlan: [0xeeee, 0xeeee],
        eth_type: 0xeeee,
        l3: 0xeeee,
        l3_kind: L3Kind::Mpls,
        ip_header_len: 0xeeee,
        l4: 0xeeee,
        l4_kind: L4Kind::Gre,
        tunnel: TunnelKind::Gre,
        inner: 0xeeee,
    }
}

/// Run both parsers from poisoned outputs and the same non-zero counters;
/// everything must agree. Returns whether the fast path took the frame.
fn agree(frame: &[u8], in_port: u32) -> Result<bool, TestCaseError> {
    let start = ParseStats {
        runt: 1,
        truncated_tcp: 2,
        ..ParseStats::default()
    };
    let (mut k_fast, mut l_fast, mut s_fast) = (poison_key(), poison_layout(), start.clone());
    extract_to(frame, in_port, &mut k_fast, &mut l_fast, &mut s_fast);
    let (mut k_ref, mut l_ref, mut s_ref) = (poison_key(), poison_layout(), start.clone());
    extract_to_general(frame, in_port, &mut k_ref, &mut l_ref, &mut s_ref);
    prop_assert_eq!(k_fast, k_ref, "key of {:02x?}", frame);
    prop_assert_eq!(l_fast, l_ref, "layout of {:02x?}", frame);
    prop_assert_eq!(&s_fast, &s_ref, "counters of {:02x?}", frame);

    let (mut k, mut l) = (poison_key(), poison_layout());
    let taken = extract_common(frame, in_port, &mut k, &mut l);
    if taken {
        prop_assert_eq!(k, k_ref);
        prop_assert_eq!(l, l_ref);
        // Accepting is only allowed where the general parser counts nothing.
        prop_assert_eq!(&s_ref, &start, "fast path took a frame with a counter");
    } else {
        prop_assert_eq!(k, poison_key(), "declined but wrote the key");
        prop_assert_eq!(l, poison_layout(), "declined but wrote the layout");
    }
    Ok(taken)
}

/// Inputs of one generated frame around the common shape.
#[derive(Debug, Clone)]
struct Spec {
    dst: [u8; 6],
    src: [u8; 6],
    /// (TPID, TCI) of each tag, outer first.
    tags: Vec<(u16, u16)>,
    ethertype: u16,
    /// Version/IHL byte; IHL > 5 adds options, IHL < 5 adds none.
    ver_ihl: u8,
    tos: u8,
    /// `None`: the true IP length; `Some(d)`: the true length plus `d`
    /// (wrapping), so the field can lie either way.
    total_len_delta: Option<i32>,
    frag: u16,
    ttl: u8,
    proto: u8,
    ip_src: [u8; 4],
    ip_dst: [u8; 4],
    /// Transport header bytes (ports first; for TCP byte 12 is the data
    /// offset); its length may be short.
    l4: Vec<u8>,
    payload_len: usize,
    /// Bytes of Ethernet padding after the IP packet.
    pad: usize,
    /// Cut the frame to this many bytes (when shorter).
    cut: Option<usize>,
}

impl Spec {
    fn frame(&self) -> Vec<u8> {
        let mut f = Vec::new();
        f.extend_from_slice(&self.dst);
        f.extend_from_slice(&self.src);
        for &(tpid, tci) in &self.tags {
            f.extend_from_slice(&tpid.to_be_bytes());
            f.extend_from_slice(&tci.to_be_bytes());
        }
        f.extend_from_slice(&self.ethertype.to_be_bytes());
        let ihl = (self.ver_ihl & 0x0f) as usize;
        let hl = 20 + 4 * ihl.saturating_sub(5);
        let ip_len = hl + self.l4.len() + self.payload_len;
        let total = match self.total_len_delta {
            None => ip_len as u16,
            Some(d) => (ip_len as i32).wrapping_add(d) as u16,
        };
        let ip_start = f.len();
        f.push(self.ver_ihl);
        f.push(self.tos);
        f.extend_from_slice(&total.to_be_bytes());
        f.extend_from_slice(&[0x12, 0x34]);
        f.extend_from_slice(&self.frag.to_be_bytes());
        f.extend_from_slice(&[self.ttl, self.proto, 0, 0]);
        f.extend_from_slice(&self.ip_src);
        f.extend_from_slice(&self.ip_dst);
        f.resize(ip_start + hl, 0x01); // options: NOPs
        f.extend_from_slice(&self.l4);
        f.extend((0..self.payload_len).map(|i| i as u8));
        f.extend(std::iter::repeat_n(0xee, self.pad));
        if let Some(n) = self.cut {
            f.truncate(n);
        }
        f
    }
}

/// Transport header bytes for `proto`: full length with a TCP data offset
/// (usually valid, sometimes below 5), cut short, or arbitrary.
fn l4_bytes(proto: u8) -> impl Strategy<Value = Vec<u8>> {
    let full = if proto == 6 { 20 } else { 8 };
    let whole = (
        proptest::collection::vec(any::<u8>(), full..=full),
        prop_oneof![4 => 5u8..16, 1 => 0u8..5],
        prop_oneof![Just(None), Just(Some(4789u16)), any::<u16>().prop_map(Some)],
    )
        .prop_map(move |(mut b, off, dport)| {
            if proto == 6 {
                b[12] = (off << 4) | (b[12] & 0x0f);
            }
            if let Some(p) = dport {
                b[2..4].copy_from_slice(&p.to_be_bytes());
            }
            b
        });
    prop_oneof![
        6 => whole,
        2 => proptest::collection::vec(any::<u8>(), 0..full),
        1 => proptest::collection::vec(any::<u8>(), 0..24),
    ]
}

/// The valid common shape with random field values: the fast path must take
/// every one of these.
fn common_spec() -> impl Strategy<Value = Spec> {
    let tag = (prop_oneof![Just(0x8100u16), Just(0x88a8)], any::<u16>());
    (
        any::<[u8; 6]>(),
        any::<[u8; 6]>(),
        proptest::option::of(tag),
        any::<u8>(),
        prop_oneof![Just(0u16), Just(0x4000)], // DF or nothing
        any::<u8>(),
        prop_oneof![
            3 => Just(6u8),
            3 => Just(17),
            1 => Just(1),
            // No transport match fields (SCTP and GRE have some).
            2 => any::<u8>().prop_filter("no L4 fields", |p| ![6, 17, 1, 132, 47].contains(p)),
        ],
        any::<[u8; 4]>(),
        any::<[u8; 4]>(),
        0usize..64,
        0usize..32,
    )
        .prop_flat_map(
            |(dst, src, tag, tos, frag, ttl, proto, ip_src, ip_dst, payload_len, pad)| {
                let full = if proto == 6 { 20 } else { 8 };
                // Without transport fields any segment length is common.
                let len = if [6, 17, 1].contains(&proto) {
                    full..=full
                } else {
                    0..=full
                };
                (
                    proptest::collection::vec(any::<u8>(), len),
                    5u8..16,
                    any::<u16>().prop_filter("not VXLAN", |p| *p != 4789),
                )
                    .prop_map(move |(mut l4, off, dport)| {
                        if proto == 6 {
                            l4[12] = (off << 4) | (l4[12] & 0x0f);
                        }
                        if let Some(p) = l4.get_mut(2..4) {
                            p.copy_from_slice(&dport.to_be_bytes());
                        }
                        Spec {
                            dst,
                            src,
                            tags: tag.into_iter().collect(),
                            ethertype: 0x0800,
                            ver_ihl: 0x45,
                            tos,
                            total_len_delta: None,
                            frag,
                            ttl,
                            proto,
                            ip_src,
                            ip_dst,
                            l4,
                            payload_len,
                            pad,
                            cut: None,
                        }
                    })
            },
        )
}

/// Around the common shape: each field usually valid, sometimes not.
fn near_spec() -> impl Strategy<Value = Spec> {
    let tpid = prop_oneof![Just(0x8100u16), Just(0x88a8), any::<u16>()];
    (
        (
            any::<[u8; 6]>(),
            any::<[u8; 6]>(),
            proptest::collection::vec((tpid, any::<u16>()), 0..=3),
            prop_oneof![
                8 => Just(0x0800u16),
                1 => Just(0x86dd),
                1 => Just(0x0806),
                1 => Just(0x8100),
                1 => any::<u16>(),
            ],
            prop_oneof![
                8 => Just(0x45u8),
                2 => 0x46u8..=0x4f,
                1 => any::<u8>(),
            ],
            any::<u8>(),
            prop_oneof![
                6 => Just(None),
                1 => (-30i32..30).prop_map(Some),
                1 => any::<u16>().prop_map(|v| Some(v as i32)),
            ],
        ),
        (
            prop_oneof![
                4 => Just(0u16),
                2 => Just(0x4000),
                1 => Just(0x2000), // MF: first fragment
                1 => 1u16..0x2000, // later fragment
                1 => any::<u16>(),
            ],
            any::<u8>(),
            prop_oneof![
                3 => Just(6u8),
                3 => Just(17),
                2 => Just(1),
                1 => Just(47), // GRE
                1 => Just(132), // SCTP
                1 => any::<u8>(),
            ],
            any::<[u8; 4]>(),
            any::<[u8; 4]>(),
            prop_oneof![Just(0usize), 0usize..40],
            prop_oneof![Just(0usize), 0usize..24],
            proptest::option::of(0usize..80),
        ),
    )
        .prop_flat_map(
            |(
                (dst, src, tags, ethertype, ver_ihl, tos, total_len_delta),
                (frag, ttl, proto, ip_src, ip_dst, payload_len, pad, cut),
            )| {
                l4_bytes(proto).prop_map(move |l4| Spec {
                    dst,
                    src,
                    tags: tags.clone(),
                    ethertype,
                    ver_ihl,
                    tos,
                    total_len_delta,
                    frag,
                    ttl,
                    proto,
                    ip_src,
                    ip_dst,
                    l4,
                    payload_len,
                    pad,
                    cut,
                })
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(debug_assertions) { 4000 } else { 40000 }))]

    /// Valid common frames: identical results, and the fast path takes them
    /// all (so the equivalence above is not vacuous). A cut anywhere keeps
    /// the equivalence.
    #[test]
    fn common_frames_take_the_fast_path(spec in common_spec(), in_port in any::<u32>(),
                                        cut in any::<usize>()) {
        let frame = spec.frame();
        let taken = agree(&frame, in_port)?;
        // The fast path reads a fixed prefix: Ethernet, the tag, IPv4 and 8
        // bytes of L4. Only a protocol without transport fields may be
        // shorter than that; it is then left to the general parser.
        let prefix = 14 + 4 * spec.tags.len() + 20 + 8;
        if [6, 17, 1].contains(&spec.proto) || frame.len() >= prefix {
            prop_assert!(taken, "fast path declined {:02x?}", frame);
        }
        let n = cut % (frame.len() + 1);
        agree(&frame[..n], in_port)?;
    }

    /// Valid common frames whose IPv4 total length lies (too short to hold
    /// the transport header, or past the frame), around every boundary.
    #[test]
    fn common_frames_with_lying_total_len(spec in common_spec(), pick in any::<u16>(),
                                          in_port in any::<u32>()) {
        let mut spec = spec;
        let ip_len = 20 + spec.l4.len() + spec.payload_len;
        let target = (pick as usize) % (ip_len + spec.pad + 8);
        spec.total_len_delta = Some(target as i32 - ip_len as i32);
        agree(&spec.frame(), in_port)?;
    }

    /// Frames near the common shape, valid or not: identical results.
    #[test]
    fn near_common_frames_agree(spec in near_spec(), in_port in any::<u32>()) {
        agree(&spec.frame(), in_port)?;
    }

    /// Arbitrary bytes: identical results.
    #[test]
    fn arbitrary_bytes_agree(bytes in proptest::collection::vec(any::<u8>(), 0..128),
                             in_port in any::<u32>()) {
        agree(&bytes, in_port)?;
    }

    /// Arbitrary bytes behind a forced IPv4 EtherType and version/IHL byte
    /// (optionally behind one tag), so random lengths, flags and protocols
    /// reach the fast path's own checks.
    #[test]
    fn arbitrary_ipv4_bodies_agree(mut bytes in proptest::collection::vec(any::<u8>(), 14..100),
                                   tagged in any::<bool>(), ver_ihl in prop_oneof![3 => Just(0x45u8), 1 => any::<u8>()],
                                   in_port in any::<u32>()) {
        let l3 = if tagged { 18 } else { 14 };
        bytes.resize(bytes.len().max(l3 + 1), 0);
        if tagged {
            bytes[12..14].copy_from_slice(&[0x81, 0x00]);
        }
        bytes[l3 - 2..l3].copy_from_slice(&[0x08, 0x00]);
        bytes[l3] = ver_ihl;
        agree(&bytes, in_port)?;
    }
}

/// The bench's frame: 60-byte Ethernet/IPv4/TCP with padding, written out
/// by hand, takes the fast path with the key a reader of the spec expects.
#[test]
fn sixty_byte_tcp_frame_golden() {
    let mut f = vec![
        0x02, 0, 0, 0, 0, 0x01, // dst
        0x02, 0, 0, 0, 0, 0x02, // src
        0x08, 0x00, // IPv4
        0x45, 0xb9, 0x00, 0x28, 0x12, 0x34, 0x40, 0x00, 0x40, 0x06, 0,
        0, // TOS 0xb9, len 40, DF, TCP
        10, 0, 0, 1, // src
        192, 168, 1, 2, // dst
        0x30, 0x39, 0x00, 0x50, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x12, 0xff, 0xff, 0, 0, 0, 0,
    ];
    f.resize(60, 0);
    let (mut key, mut lay) = (poison_key(), poison_layout());
    assert!(extract_common(&f, 7, &mut key, &mut lay));
    use offlow_flow::{present, Field};
    let want = [
        (Field::InPort, 7u128),
        (Field::InPhyPort, 7),
        (Field::Metadata, 0),
        (Field::EthDst, 0x0200_0000_0001),
        (Field::EthSrc, 0x0200_0000_0002),
        (Field::EthType, 0x0800),
        (Field::VlanVid, 0),
        (Field::IpDscp, 46),
        (Field::IpEcn, 1),
        (Field::IpProto, 6),
        (Field::Ipv4Src, 0x0a00_0001),
        (Field::Ipv4Dst, 0xc0a8_0102),
        (Field::TcpSrc, 12345),
        (Field::TcpDst, 80),
        (Field::TunnelId, 0),
    ];
    for (field, v) in want {
        assert_eq!(key.get(field), v, "{field:?}");
    }
    assert_eq!(key.presence(), present::L3 | present::L4);
    assert_eq!(
        lay,
        Layout {
            eth_type: 12,
            l3: 14,
            l3_kind: L3Kind::Ipv4,
            ip_header_len: 20,
            l4: 34,
            l4_kind: L4Kind::Tcp,
            ..Layout::default()
        }
    );
    // The same frame with MF set is a first fragment: declined, untouched.
    f[20] = 0x20;
    let (mut key, mut lay) = (poison_key(), poison_layout());
    assert!(!extract_common(&f, 7, &mut key, &mut lay));
    assert_eq!(key, poison_key());
}

/// Every seed frame of the other parser tests (every protocol the parser
/// knows), every prefix of it, and each with one byte flipped in the first
/// 64: identical results.
#[test]
fn seed_frames_every_prefix_and_flip_agree() {
    let mut taken = 0;
    for f in common::seed_frames() {
        for n in 0..=f.len() {
            taken += agree(&f[..n], 5).unwrap_or_else(|e| panic!("{e}")) as usize;
        }
        for i in 0..f.len().min(64) {
            let mut g = f.clone();
            g[i] ^= 0xff;
            agree(&g, 5).unwrap_or_else(|e| panic!("{e}"));
        }
    }
    assert!(taken > 0, "no seed prefix took the fast path");
}
