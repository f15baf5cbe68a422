//! The flow key: every OpenFlow 1.3 basic OXM field of a packet, packed into a
//! fixed array of 64-bit words so that a masked comparison is a handful of
//! `AND`/`XOR` operations and a hash touches only the words a mask covers.
//!
//! # Layout
//!
//! | word | bits 0..              | higher bits                                      |
//! |------|-----------------------|--------------------------------------------------|
//! | 0    | in_port [0,32)        | in_phy_port [32,64)                              |
//! | 1    | metadata              |                                                  |
//! | 2    | tunnel_id             |                                                  |
//! | 3    | eth_dst [0,48)        | eth_type [48,64)                                 |
//! | 4    | eth_src [0,48)        | vlan_vid [48,61) (incl. OFPVID_PRESENT), vlan_pcp [61,64) |
//! | 5    | ipv4_src / arp_spa [0,32) | ipv4_dst / arp_tpa [32,64)                   |
//! | 6    | tp_src [0,16)         | tp_dst [16,32), ip_proto [32,40), ip_dscp [40,46), ip_ecn [46,48), arp_op [48,64) |
//! | 7,8  | ipv6_src (high word first) |                                             |
//! | 9,10 | ipv6_dst              |                                                  |
//! | 11,12| ipv6_nd_target        |                                                  |
//! | 13   | arp_sha / nd_sll [0,48) | ipv6_exthdr [48,57), mpls_tc [57,60), mpls_bos [60,61), payload kind [61,63) (see [`encap`]) |
//! | 14   | arp_tha / nd_tll [0,48) | presence bits [48,64) (see [`present`])        |
//! | 15   | ipv6_flabel [0,20)    | mpls_label [20,40), pbb_isid [40,64)             |
//!
//! Fields whose OpenFlow prerequisites exclude each other share storage, as in
//! Open vSwitch: TCP/UDP/SCTP ports and ICMP type/code live in `tp_src`/`tp_dst`,
//! IPv4 and ARP addresses share word 5. A rule always carries the prerequisite
//! (`eth_type`, `ip_proto`) that tells them apart, so sharing never makes two
//! different rules ambiguous.
//!
//! # Encapsulated payloads (MPLS, PBB)
//!
//! A frame under an MPLS label stack or a PBB I-TAG carries a payload whose
//! fields no rule can match while the encapsulation is there (every L3 field
//! needs `eth_type` IPv4/IPv6/ARP, OpenFlow 1.3.5 §7.2.3.6), but that a
//! later table must see once pop-MPLS or pop-PBB has removed it. The parser
//! therefore stores the payload's L3/L4 fields in their usual slots, with
//! [`encap`] saying what kind of payload they describe, and the few fields a
//! pop reveals in slots the encapsulated frame cannot use (see [`encap`]).
//! The pipeline's working key then follows a pop without the frame. One
//! payload field is visible before the pop: a GRE key or VXLAN VNI in the
//! payload sets `tunnel_id` (which has no prerequisite), as it would for
//! the unencapsulated packet.
//!
//! # Absent fields
//!
//! A field the parser could not extract (the header is missing or truncated)
//! is zero, and its layer's presence bit is clear. [`Match::set_masked`] adds the
//! presence requirement of every field it constrains, so a rule on `tcp_dst=0`
//! never matches a packet whose TCP header was cut short.

use core::fmt;

/// Number of 64-bit words in a [`FlowKey`].
pub const KEY_WORDS: usize = 16;

/// Presence bits stored in word 14, bits 48..64 of the key.
///
/// A bit is set when the parser extracted that layer completely.
pub mod present {
    /// Word that holds the presence bits.
    pub const WORD: usize = 14;
    /// Bit offset of the presence bits inside [`WORD`].
    pub const SHIFT: u32 = 48;
    /// An outer 802.1Q / 802.1ad tag was present.
    pub const VLAN: u16 = 1 << 0;
    /// The network header (IPv4, IPv6 or ARP) was complete.
    pub const L3: u16 = 1 << 1;
    /// The transport header fields (ports, ICMP type/code) were complete.
    pub const L4: u16 = 1 << 2;
    /// ICMPv6 neighbour discovery target address present.
    pub const ND_TARGET: u16 = 1 << 3;
    /// ICMPv6 ND source link-layer address option present.
    pub const ND_SLL: u16 = 1 << 4;
    /// ICMPv6 ND target link-layer address option present.
    pub const ND_TLL: u16 = 1 << 5;
    /// The IP packet is a fragment (first or later).
    pub const FRAG: u16 = 1 << 6;
    /// The IP packet is a later fragment (offset != 0): it carries no L4 fields.
    pub const LATER_FRAG: u16 = 1 << 7;
    /// An MPLS label stack entry was present.
    pub const MPLS: u16 = 1 << 8;
    /// A tunnel header (GRE key, VXLAN VNI) was parsed into `tunnel_id`.
    pub const TUNNEL: u16 = 1 << 9;
    /// MPLS: the second label stack entry is stored in [`super::encap::NEXT_LSE`].
    pub const MPLS_NEXT: u16 = 1 << 10;
    /// PBB: the customer MAC addresses differ from the backbone ones and are
    /// stored in [`super::encap::CUSTOMER_MACS`].
    pub const PBB_CMAC: u16 = 1 << 11;
}

/// Where the key keeps what a pop-MPLS or pop-PBB reveals (see the module
/// documentation). Each slot belongs to a field whose prerequisites the
/// encapsulated frame cannot meet, so no rule ever sees the stored bits:
/// `pbb_isid` needs eth_type 0x88e7 (unused on an MPLS frame), the MPLS
/// fields need 0x8847/0x8848 (unused on a PBB frame), and `ipv6_nd_target`
/// needs an IPv6 ND payload.
pub mod encap {
    use super::{Field, FlowKey};

    /// What the L3/L4 fields of an MPLS or PBB frame describe: the payload
    /// below the bottom-of-stack label (chosen by its first nibble: 4 IPv4,
    /// 6 IPv6, else Ethernet/IPv4 ARP if it parses as one; RFC 3032 §2.2
    /// leaves it untyped) or the PBB customer frame (by its EtherType).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    #[repr(u8)]
    pub enum Payload {
        /// No payload fields (not encapsulated, or nothing parsed).
        None = 0,
        /// An IPv4 packet.
        Ipv4 = 1,
        /// An IPv6 packet.
        Ipv6 = 2,
        /// An Ethernet/IPv4 ARP packet.
        Arp = 3,
    }

    impl Payload {
        /// The payload kind a pop to `eth_type` exposes, if any.
        pub fn of_ethertype(eth_type: u16) -> Payload {
            match eth_type {
                0x0800 => Payload::Ipv4,
                0x86dd => Payload::Ipv6,
                0x0806 => Payload::Arp,
                _ => Payload::None,
            }
        }
    }

    /// Word and shift of the 2-bit payload kind.
    const KIND_WORD: usize = 13;
    const KIND_SHIFT: u32 = 61;

    /// The stored payload kind.
    #[inline]
    pub fn payload(k: &FlowKey) -> Payload {
        match (k.words[KIND_WORD] >> KIND_SHIFT) & 3 {
            1 => Payload::Ipv4,
            2 => Payload::Ipv6,
            3 => Payload::Arp,
            _ => Payload::None,
        }
    }

    /// Record the payload kind.
    #[inline]
    pub fn set_payload(k: &mut FlowKey, p: Payload) {
        let m = 3u64 << KIND_SHIFT;
        k.words[KIND_WORD] = (k.words[KIND_WORD] & !m) | ((p as u64) << KIND_SHIFT);
    }

    /// MPLS frame: the second label stack entry's label (20 bits), TC (3)
    /// and bottom-of-stack bit (1), packed `label << 4 | tc << 1 | bos`,
    /// stored in the `pbb_isid` slot when `present::MPLS_NEXT` is set.
    pub const NEXT_LSE: Field = Field::PbbIsid;

    /// PBB frame: the customer frame's EtherType (the first after C-SA,
    /// which is a TPID when the customer frame is tagged), stored in the
    /// `mpls_label` slot.
    pub const CUSTOMER_TYPE: Field = Field::MplsLabel;

    /// PBB frame: C-DA (high 48 bits) and C-SA (low 48) as one 96-bit
    /// value, stored in the `ipv6_nd_target` slot when `present::PBB_CMAC`
    /// is set (only when they differ from B-DA/B-SA and the customer
    /// payload is not an IPv6 ND message, whose target needs the slot).
    pub const CUSTOMER_MACS: Field = Field::Ipv6NdTarget;
}

/// The OpenFlow 1.3 basic (`OFPXMC_OPENFLOW_BASIC`) OXM fields, numbered as
/// `enum oxm_ofb_match_fields` in OpenFlow 1.3.5 §7.2.3.7.
#[allow(missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Field {
    InPort = 0,
    InPhyPort = 1,
    Metadata = 2,
    EthDst = 3,
    EthSrc = 4,
    EthType = 5,
    VlanVid = 6,
    VlanPcp = 7,
    IpDscp = 8,
    IpEcn = 9,
    IpProto = 10,
    Ipv4Src = 11,
    Ipv4Dst = 12,
    TcpSrc = 13,
    TcpDst = 14,
    UdpSrc = 15,
    UdpDst = 16,
    SctpSrc = 17,
    SctpDst = 18,
    Icmpv4Type = 19,
    Icmpv4Code = 20,
    ArpOp = 21,
    ArpSpa = 22,
    ArpTpa = 23,
    ArpSha = 24,
    ArpTha = 25,
    Ipv6Src = 26,
    Ipv6Dst = 27,
    Ipv6Flabel = 28,
    Icmpv6Type = 29,
    Icmpv6Code = 30,
    Ipv6NdTarget = 31,
    Ipv6NdSll = 32,
    Ipv6NdTll = 33,
    MplsLabel = 34,
    MplsTc = 35,
    MplsBos = 36,
    PbbIsid = 37,
    TunnelId = 38,
    Ipv6Exthdr = 39,
}

/// Where a field lives inside the key. 128-bit fields occupy two whole words,
/// `word` holding the high half and `word + 1` the low half.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldLoc {
    /// Index of the (first) word.
    pub word: u8,
    /// Bit offset inside the word (0 for 64- and 128-bit fields).
    pub shift: u8,
    /// Width in bits (1..=128).
    pub bits: u8,
}

impl Field {
    /// Every basic field, in OXM number order.
    pub const ALL: [Field; 40] = {
        use Field::*;
        [
            InPort,
            InPhyPort,
            Metadata,
            EthDst,
            EthSrc,
            EthType,
            VlanVid,
            VlanPcp,
            IpDscp,
            IpEcn,
            IpProto,
            Ipv4Src,
            Ipv4Dst,
            TcpSrc,
            TcpDst,
            UdpSrc,
            UdpDst,
            SctpSrc,
            SctpDst,
            Icmpv4Type,
            Icmpv4Code,
            ArpOp,
            ArpSpa,
            ArpTpa,
            ArpSha,
            ArpTha,
            Ipv6Src,
            Ipv6Dst,
            Ipv6Flabel,
            Icmpv6Type,
            Icmpv6Code,
            Ipv6NdTarget,
            Ipv6NdSll,
            Ipv6NdTll,
            MplsLabel,
            MplsTc,
            MplsBos,
            PbbIsid,
            TunnelId,
            Ipv6Exthdr,
        ]
    };

    /// The field with OXM number `n`, if it is a basic field.
    pub fn from_oxm(n: u8) -> Option<Field> {
        Field::ALL.get(n as usize).copied()
    }

    /// The OXM field number.
    pub fn oxm(self) -> u8 {
        self as u8
    }

    /// Location of the field inside a [`FlowKey`].
    pub const fn loc(self) -> FieldLoc {
        use Field::*;
        const fn l(word: u8, shift: u8, bits: u8) -> FieldLoc {
            FieldLoc { word, shift, bits }
        }
        match self {
            InPort => l(0, 0, 32),
            InPhyPort => l(0, 32, 32),
            Metadata => l(1, 0, 64),
            TunnelId => l(2, 0, 64),
            EthDst => l(3, 0, 48),
            EthType => l(3, 48, 16),
            EthSrc => l(4, 0, 48),
            VlanVid => l(4, 48, 13),
            VlanPcp => l(4, 61, 3),
            Ipv4Src | ArpSpa => l(5, 0, 32),
            Ipv4Dst | ArpTpa => l(5, 32, 32),
            TcpSrc | UdpSrc | SctpSrc => l(6, 0, 16),
            Icmpv4Type | Icmpv6Type => l(6, 0, 8),
            TcpDst | UdpDst | SctpDst => l(6, 16, 16),
            Icmpv4Code | Icmpv6Code => l(6, 16, 8),
            IpProto => l(6, 32, 8),
            IpDscp => l(6, 40, 6),
            IpEcn => l(6, 46, 2),
            ArpOp => l(6, 48, 16),
            Ipv6Src => l(7, 0, 128),
            Ipv6Dst => l(9, 0, 128),
            Ipv6NdTarget => l(11, 0, 128),
            ArpSha | Ipv6NdSll => l(13, 0, 48),
            Ipv6Exthdr => l(13, 48, 9),
            MplsTc => l(13, 57, 3),
            MplsBos => l(13, 60, 1),
            ArpTha | Ipv6NdTll => l(14, 0, 48),
            Ipv6Flabel => l(15, 0, 20),
            MplsLabel => l(15, 20, 20),
            PbbIsid => l(15, 40, 24),
        }
    }

    /// Width of the field in bits.
    pub const fn bits(self) -> u32 {
        self.loc().bits as u32
    }

    /// All-ones value of the field's width.
    pub const fn full_mask(self) -> u128 {
        let b = self.bits();
        if b >= 128 {
            u128::MAX
        } else {
            (1u128 << b) - 1
        }
    }

    /// Presence bits a packet must have for this field to be meaningful.
    pub const fn required_presence(self) -> u16 {
        use Field::*;
        match self {
            InPort | InPhyPort | Metadata | EthDst | EthSrc | EthType => 0,
            VlanVid | VlanPcp => 0, // VLAN_VID encodes presence itself (OFPVID_PRESENT).
            TunnelId => 0,          // Logical-port metadata; 0 when no tunnel.
            IpDscp | IpEcn | IpProto | Ipv4Src | Ipv4Dst | ArpOp | ArpSpa | ArpTpa | ArpSha
            | ArpTha | Ipv6Src | Ipv6Dst | Ipv6Flabel | Ipv6Exthdr => present::L3,
            TcpSrc | TcpDst | UdpSrc | UdpDst | SctpSrc | SctpDst | Icmpv4Type | Icmpv4Code
            | Icmpv6Type | Icmpv6Code => present::L3 | present::L4,
            Ipv6NdTarget => present::L3 | present::L4 | present::ND_TARGET,
            Ipv6NdSll => present::L3 | present::L4 | present::ND_SLL,
            Ipv6NdTll => present::L3 | present::L4 | present::ND_TLL,
            MplsLabel | MplsTc | MplsBos => present::MPLS,
            PbbIsid => 0,
        }
    }

    /// The field's spec name (as ovs-ofctl prints OXM names, e.g. `tcp_dst`).
    pub const fn name(self) -> &'static str {
        use Field::*;
        match self {
            InPort => "in_port",
            InPhyPort => "in_phy_port",
            Metadata => "metadata",
            EthDst => "eth_dst",
            EthSrc => "eth_src",
            EthType => "eth_type",
            VlanVid => "vlan_vid",
            VlanPcp => "vlan_pcp",
            IpDscp => "ip_dscp",
            IpEcn => "ip_ecn",
            IpProto => "ip_proto",
            Ipv4Src => "ipv4_src",
            Ipv4Dst => "ipv4_dst",
            TcpSrc => "tcp_src",
            TcpDst => "tcp_dst",
            UdpSrc => "udp_src",
            UdpDst => "udp_dst",
            SctpSrc => "sctp_src",
            SctpDst => "sctp_dst",
            Icmpv4Type => "icmpv4_type",
            Icmpv4Code => "icmpv4_code",
            ArpOp => "arp_op",
            ArpSpa => "arp_spa",
            ArpTpa => "arp_tpa",
            ArpSha => "arp_sha",
            ArpTha => "arp_tha",
            Ipv6Src => "ipv6_src",
            Ipv6Dst => "ipv6_dst",
            Ipv6Flabel => "ipv6_flabel",
            Icmpv6Type => "icmpv6_type",
            Icmpv6Code => "icmpv6_code",
            Ipv6NdTarget => "ipv6_nd_target",
            Ipv6NdSll => "ipv6_nd_sll",
            Ipv6NdTll => "ipv6_nd_tll",
            MplsLabel => "mpls_label",
            MplsTc => "mpls_tc",
            MplsBos => "mpls_bos",
            PbbIsid => "pbb_isid",
            TunnelId => "tunnel_id",
            Ipv6Exthdr => "ipv6_exthdr",
        }
    }
}

/// A packet's flow key (or, with the same layout, a mask over one).
///
/// Aligned to a cache line: a key is two lines, and lookups compare and hash
/// whole words.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(C, align(64))]
pub struct FlowKey {
    /// The packed words; see the module documentation for the layout.
    pub words: [u64; KEY_WORDS],
}

/// A mask over a [`FlowKey`]: a set bit means "this bit must match".
pub type FlowMask = FlowKey;

impl FlowKey {
    /// The all-zero key (also the all-wildcard mask).
    pub const ZERO: FlowKey = FlowKey {
        words: [0; KEY_WORDS],
    };

    /// Read a field (zero-extended to 128 bits).
    #[inline]
    pub fn get(&self, field: Field) -> u128 {
        let loc = field.loc();
        let w = loc.word as usize;
        if loc.bits == 128 {
            ((self.words[w] as u128) << 64) | self.words[w + 1] as u128
        } else if loc.bits == 64 {
            self.words[w] as u128
        } else {
            ((self.words[w] >> loc.shift) & ((1u64 << loc.bits) - 1)) as u128
        }
    }

    /// Write a field; bits of `value` beyond the field's width are ignored.
    #[inline]
    pub fn set(&mut self, field: Field, value: u128) {
        let loc = field.loc();
        let w = loc.word as usize;
        if loc.bits == 128 {
            self.words[w] = (value >> 64) as u64;
            self.words[w + 1] = value as u64;
        } else if loc.bits == 64 {
            self.words[w] = value as u64;
        } else {
            let m = ((1u64 << loc.bits) - 1) << loc.shift;
            self.words[w] = (self.words[w] & !m) | (((value as u64) << loc.shift) & m);
        }
    }

    /// Presence bits (see [`present`]).
    #[inline]
    pub fn presence(&self) -> u16 {
        (self.words[present::WORD] >> present::SHIFT) as u16
    }

    /// Set presence bits (ORed into the existing ones).
    #[inline]
    pub fn add_presence(&mut self, bits: u16) {
        self.words[present::WORD] |= (bits as u64) << present::SHIFT;
    }

    /// Clear presence bits.
    #[inline]
    pub fn clear_presence(&mut self, bits: u16) {
        self.words[present::WORD] &= !((bits as u64) << present::SHIFT);
    }

    /// `self & mask`, word by word.
    #[inline]
    pub fn masked(&self, mask: &FlowMask) -> FlowKey {
        let mut out = FlowKey::ZERO;
        for i in 0..KEY_WORDS {
            out.words[i] = self.words[i] & mask.words[i];
        }
        out
    }

    /// `self | other`, word by word (the union of two masks).
    #[inline]
    pub fn union(&self, other: &FlowMask) -> FlowKey {
        let mut out = FlowKey::ZERO;
        for i in 0..KEY_WORDS {
            out.words[i] = self.words[i] | other.words[i];
        }
        out
    }

    /// True when every bit is zero.
    pub fn is_zero(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }
}

impl fmt::Debug for FlowKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_map();
        for field in Field::ALL {
            let v = self.get(field);
            if v != 0 {
                d.entry(&field.name(), &format_args!("{v:#x}"));
            }
        }
        if self.presence() != 0 {
            d.entry(&"present", &format_args!("{:#x}", self.presence()));
        }
        d.finish()
    }
}

/// A masked match over the flow key: a packet key `k` matches when
/// `k & mask == value` (the value is kept pre-masked).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Match {
    /// Expected bits, always equal to `value & mask`.
    pub value: FlowKey,
    /// Bits that must match.
    pub mask: FlowMask,
}

impl Match {
    /// The match-everything (all-wildcard) match.
    pub const ANY: Match = Match {
        value: FlowKey::ZERO,
        mask: FlowKey::ZERO,
    };

    /// Constrain `field` to `value` under `mask` (bits beyond the field's
    /// width ignored). A non-zero mask also requires the field's layer to be
    /// present in the packet. Replaces any earlier constraint on the field.
    pub fn set_masked(&mut self, field: Field, value: u128, mask: u128) -> &mut Self {
        let mask = mask & field.full_mask();
        self.mask.set(field, mask);
        self.value.set(field, value & mask);
        let need = field.required_presence();
        if mask != 0 && need != 0 {
            self.mask.add_presence(need);
            self.value.add_presence(need);
        }
        self
    }

    /// Constrain `field` to exactly `value`.
    pub fn set_exact(&mut self, field: Field, value: u128) -> &mut Self {
        self.set_masked(field, value, field.full_mask())
    }

    /// Constrain a field to a prefix of `len` leading bits (for address fields).
    pub fn set_prefix(&mut self, field: Field, value: u128, len: u32) -> &mut Self {
        let bits = field.bits();
        let mask = if len == 0 {
            0
        } else if len >= bits {
            // Also avoids `full_mask() >> 128`, which overflows for IPv6.
            field.full_mask()
        } else {
            field.full_mask() & !(field.full_mask() >> len)
        };
        self.set_masked(field, value, mask)
    }

    /// Does `key` match?
    #[inline]
    pub fn matches(&self, key: &FlowKey) -> bool {
        let mut diff = 0u64;
        for i in 0..KEY_WORDS {
            diff |= (key.words[i] & self.mask.words[i]) ^ self.value.words[i];
        }
        diff == 0
    }

    /// The (value, mask) pair of one field.
    pub fn field(&self, field: Field) -> (u128, u128) {
        (self.value.get(field), self.mask.get(field))
    }

    /// Could some packet match both `self` and `other`? (True when they agree
    /// on every bit both constrain.)
    pub fn overlaps(&self, other: &Match) -> bool {
        (0..KEY_WORDS).all(|i| {
            let both = self.mask.words[i] & other.mask.words[i];
            (self.value.words[i] ^ other.value.words[i]) & both == 0
        })
    }

    /// Is every packet matching `self` also matched by `other`?
    pub fn is_subset_of(&self, other: &Match) -> bool {
        (0..KEY_WORDS).all(|i| {
            // `other` may constrain only bits `self` constrains, and equally.
            other.mask.words[i] & !self.mask.words[i] == 0
                && (self.value.words[i] ^ other.value.words[i]) & other.mask.words[i] == 0
        })
    }
}

impl fmt::Debug for Match {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_map();
        for field in Field::ALL {
            let (v, m) = self.field(field);
            if m != 0 {
                if m == field.full_mask() {
                    d.entry(&field.name(), &format_args!("{v:#x}"));
                } else {
                    d.entry(&field.name(), &format_args!("{v:#x}/{m:#x}"));
                }
            }
        }
        d.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_do_not_overlap_except_shared_storage() {
        // Every bit of the key belongs to at most one storage slot; fields
        // sharing a slot are listed as such.
        let shared = |a: Field, b: Field| -> bool {
            let la = a.loc();
            let lb = b.loc();
            la.word == lb.word && la.shift == lb.shift
        };
        for a in Field::ALL {
            for b in Field::ALL {
                if a >= b || shared(a, b) {
                    continue;
                }
                let mut ka = FlowKey::ZERO;
                ka.set(a, u128::MAX);
                let mut kb = FlowKey::ZERO;
                kb.set(b, u128::MAX);
                let overlap = (0..KEY_WORDS).any(|i| ka.words[i] & kb.words[i] != 0);
                assert!(!overlap, "{a:?} overlaps {b:?}");
                // Presence bits are never part of a field.
                assert_eq!(ka.presence(), 0, "{a:?} writes presence bits");
            }
        }
    }

    #[test]
    fn get_set_roundtrip_every_field() {
        for f in Field::ALL {
            let mut k = FlowKey::ZERO;
            let v = 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210u128 & f.full_mask();
            k.set(f, v);
            assert_eq!(k.get(f), v, "{f:?}");
            k.set(f, u128::MAX);
            assert_eq!(k.get(f), f.full_mask(), "{f:?}");
        }
    }

    #[test]
    fn presence_is_required_by_layered_fields() {
        let mut m = Match::ANY;
        m.set_exact(Field::TcpDst, 0);
        let mut k = FlowKey::ZERO;
        assert!(!m.matches(&k), "absent TCP header must not match tcp_dst=0");
        k.add_presence(present::L3 | present::L4);
        assert!(m.matches(&k));
    }

    #[test]
    fn prefix_masks() {
        let mut m = Match::ANY;
        m.set_prefix(Field::Ipv4Dst, 0x0a00_0000, 8);
        assert_eq!(m.field(Field::Ipv4Dst), (0x0a00_0000, 0xff00_0000));
        m.set_prefix(Field::Ipv4Dst, 0x0a00_0000, 0);
        assert_eq!(m.field(Field::Ipv4Dst), (0, 0));
        m.set_prefix(Field::Ipv6Dst, 7, 128);
        assert_eq!(m.field(Field::Ipv6Dst), (7, u128::MAX));
        m.set_prefix(Field::Ipv6Dst, u128::MAX, 64);
        assert_eq!(m.field(Field::Ipv6Dst).1, u128::MAX << 64);
    }
}
