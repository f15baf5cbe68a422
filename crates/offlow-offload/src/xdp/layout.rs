//! The map records the XDP program reads, built from [`OffloadKey`],
//! [`OffloadMask`], [`OffloadProgram`] and [`TunnelPort`]: `struct
//! flow_key`, `struct flow_mask`, `struct flow_prog`, `struct tun_rx_key`
//! and `struct tun_tx` of
//! `bpf/offload.bpf.c`, as the skeleton generates them from the program's
//! BTF, so a change of the C layout changes these types.
//!
//! Invariant: both structs have no padding (every gap is a named field set
//! to 0; the C file asserts the sizes, and so does this module), so their
//! bytes are fully defined and equal keys hash equally in the kernel.

use crate::key::OffloadKey;
use crate::mask::OffloadMask;
use crate::program::{OffloadProgram, TtlOp, Verdict, VlanOp};
use crate::tunnel::TunnelPort;
use offlow_wire::tunnel::{KeyMode, Kind};

use super::skel::types::{flow_key, flow_mask, flow_prog, tun_rx_key, tun_tx};

const _: () = assert!(std::mem::size_of::<flow_key>() == 44);
const _: () = assert!(std::mem::size_of::<flow_mask>() == 48);
const _: () = assert!(std::mem::size_of::<flow_prog>() == 120);
const _: () = assert!(std::mem::size_of::<tun_rx_key>() == 20);
const _: () = assert!(std::mem::size_of::<tun_tx>() == 28);

// Stage flags, program verdicts and operations (offload.bpf.c).
const F_ETH_SRC: u32 = 1 << 0;
const F_ETH_DST: u32 = 1 << 1;
const F_DSCP: u32 = 1 << 2;
const F_ECN: u32 = 1 << 3;
const F_IPV4_SRC: u32 = 1 << 4;
const F_IPV4_DST: u32 = 1 << 5;
const F_TP_SRC: u32 = 1 << 6;
const F_TP_DST: u32 = 1 << 7;
const F_VLAN_TPID: u32 = 1 << 8;
const F_VLAN_VID: u32 = 1 << 9;
const F_VLAN_PCP: u32 = 1 << 10;
const F_VLAN_CLEAR_DEI: u32 = 1 << 11;

const VLAN_KEEP: u8 = 0;
const VLAN_STRIP: u8 = 1;
const VLAN_WRITE: u8 = 2;
const TTL_KEEP: u8 = 0;
const TTL_SET: u8 = 1;
const TTL_DEC: u8 = 2;
const V_DROP: u32 = 0;
const V_PORT: u32 = 1;
const V_IN_PORT: u32 = 2;
const V_CPU: u32 = 3;
// enum tun_match and the template's kinds.
const TM_ADDR: u8 = 0;
const TM_NO_KEY: u8 = 1;
const TM_KEY: u8 = 2;
const TM_FLOW: u8 = 3;
const TK_GRE: u8 = 0;
const TK_VXLAN: u8 = 1;
const IPPROTO_GRE: u8 = 47;
const IPPROTO_UDP: u8 = 17;

/// A 48-bit MAC number as the six bytes on the wire.
fn mac(v: u64) -> [u8; 6] {
    let b = v.to_be_bytes();
    [b[2], b[3], b[4], b[5], b[6], b[7]]
}

/// The kernel's key for `k` (an exact key, or a masked one with every bit
/// outside its mask clear), under mask slot id `mask_id` (0: an exact
/// entry; slot i + 1: a masked entry of slot i, the `pad` byte the program
/// sets to the same id after masking a frame's key).
pub(crate) fn key_record(k: &OffloadKey, mask_id: u8) -> flow_key {
    let (present, vid, pcp) = match k.vlan {
        Some(t) => (1, t.vid, t.pcp),
        None => (0, 0, 0),
    };
    flow_key {
        in_port: k.in_port,
        ipv4_src: k.ipv4_src,
        ipv4_dst: k.ipv4_dst,
        eth_dst: mac(k.eth_dst),
        eth_src: mac(k.eth_src),
        vlan_vid: vid,
        vlan_present: present,
        vlan_pcp: pcp,
        tp_src: k.tp_src,
        tp_dst: k.tp_dst,
        ip_proto: k.ip_proto,
        ip_dscp: k.ip_dscp,
        ip_ecn: k.ip_ecn,
        pad: mask_id,
        tunnel_id_lo: k.tunnel_id as u32,
        tunnel_id_hi: (k.tunnel_id >> 32) as u32,
    }
}

/// The kernel's record of mask slot holding `m`: the bits a frame's key is
/// ANDed with, in the key's layout, so that `key_record(k, 0) & bits` is
/// `key_record(&k.masked(m), 0)` field by field (a MAC's bits are its
/// bytes, the fields that are always exact all ones, `pad` 0 for the
/// program to set), and in use.
pub(crate) fn mask_record(m: &OffloadMask) -> flow_mask {
    flow_mask {
        bits: flow_key {
            in_port: u32::MAX,
            ipv4_src: m.ipv4_src,
            ipv4_dst: m.ipv4_dst,
            eth_dst: mac(m.eth_dst),
            eth_src: mac(m.eth_src),
            vlan_vid: u16::MAX,
            vlan_present: u8::MAX,
            vlan_pcp: u8::MAX,
            tp_src: m.tp_src,
            tp_dst: m.tp_dst,
            ip_proto: u8::MAX,
            ip_dscp: m.ip_dscp,
            ip_ecn: m.ip_ecn,
            pad: 0,
            tunnel_id_lo: m.tunnel_id as u32,
            tunnel_id_hi: (m.tunnel_id >> 32) as u32,
        },
        in_use: 1,
    }
}

/// How a program record reaches its output: a port's index in
/// `tx_ports`, and a tunnel port's index in `tun_tx` and description.
pub(crate) trait Outputs {
    /// The `tx_ports` index of interface port `ofport`.
    fn tx_index(&self, ofport: u32) -> u32;
    /// The tunnel `ofport` is, if it is one: its `tun_tx` index and port.
    fn tunnel(&self, ofport: u32) -> Option<(u32, &TunnelPort)>;
}

/// The kernel's record for `p` serving `k` (under `mask_id`, as
/// [`key_record`]), counting into `counter`;
/// `out` resolves the output port of a [`Verdict::Port`]: an interface's
/// `tx_ports` index, or for a tunnel its underlay's and its template, the
/// key the entry's frames carry (the set-field's `tunnel_id`, else the
/// key's).
pub(crate) fn prog_record(
    k: &OffloadKey,
    mask_id: u8,
    p: &OffloadProgram,
    counter: u32,
    out: &impl Outputs,
) -> flow_prog {
    let mut r = flow_prog {
        key: key_record(k, mask_id),
        counter,
        ..Default::default()
    };
    let mut flags = 0;
    let mut set = |bit: u32, present: bool| {
        if present {
            flags |= bit;
        }
    };
    match p.vlan {
        VlanOp::Keep => r.vlan_op = VLAN_KEEP,
        VlanOp::Strip => r.vlan_op = VLAN_STRIP,
        VlanOp::Write {
            tpid,
            vid,
            pcp,
            clear_dei,
        } => {
            r.vlan_op = VLAN_WRITE;
            set(F_VLAN_TPID, tpid.is_some());
            set(F_VLAN_VID, vid.is_some());
            set(F_VLAN_PCP, pcp.is_some());
            set(F_VLAN_CLEAR_DEI, clear_dei);
            r.vlan_tpid = tpid.unwrap_or(0);
            r.vlan_vid = vid.unwrap_or(0);
            r.vlan_pcp = pcp.unwrap_or(0);
        }
    }
    set(F_ETH_SRC, p.eth_src.is_some());
    set(F_ETH_DST, p.eth_dst.is_some());
    r.eth_src = mac(p.eth_src.unwrap_or(0));
    r.eth_dst = mac(p.eth_dst.unwrap_or(0));
    set(F_DSCP, p.ip_dscp.is_some());
    set(F_ECN, p.ip_ecn.is_some());
    r.dscp = p.ip_dscp.unwrap_or(0);
    r.ecn = p.ip_ecn.unwrap_or(0);
    (r.ttl_op, r.ttl) = match p.ttl {
        TtlOp::Keep => (TTL_KEEP, 0),
        TtlOp::Set(t) => (TTL_SET, t),
        TtlOp::Dec => (TTL_DEC, 0),
    };
    set(F_IPV4_SRC, p.ipv4_src.is_some());
    set(F_IPV4_DST, p.ipv4_dst.is_some());
    r.ipv4_src = p.ipv4_src.unwrap_or(0);
    r.ipv4_dst = p.ipv4_dst.unwrap_or(0);
    set(F_TP_SRC, p.tp_src.is_some());
    set(F_TP_DST, p.tp_dst.is_some());
    r.tp_src = p.tp_src.unwrap_or(0);
    r.tp_dst = p.tp_dst.unwrap_or(0);
    (r.verdict, r.out_port, r.cpu_mask) = match p.verdict {
        Verdict::Drop => (V_DROP, 0, 0),
        Verdict::Port(port) => {
            match out.tunnel(port) {
                Some((index, t)) => {
                    r.tx_index = out.tx_index(t.underlay);
                    r.tun_slot = index + 1;
                    r.tun_key = t.wire_key(p.tunnel_id.unwrap_or(k.tunnel_id)).unwrap_or(0);
                }
                None => r.tx_index = out.tx_index(port),
            }
            (V_PORT, port, 0)
        }
        Verdict::InPort => (V_IN_PORT, 0, 0),
        Verdict::Cpu(mask) => (V_CPU, 0, mask),
    };
    r.flags = flags;
    r
}

/// The `tun_rx` keys tunnel `t` takes frames by, besides its addresses
/// ([`tun_addr_key`]): its exact keys, or `key=flow`'s wildcard (module
/// docs of `offlow_wire::tunnel`: a tunnel without a key takes GRE frames
/// without one and frames with key 0).
pub(crate) fn tun_rx_keys(t: &TunnelPort) -> Vec<tun_rx_key> {
    let base = tun_addr_key(t);
    let with = |m: u8, key: u32| tun_rx_key {
        sel: m,
        key,
        ..base
    };
    match t.endpoint.key {
        KeyMode::Fixed(k) => vec![with(TM_KEY, k)],
        KeyMode::None => vec![with(TM_NO_KEY, 0), with(TM_KEY, 0)],
        KeyMode::Flow => vec![with(TM_FLOW, 0)],
    }
}

/// The `tun_rx` key that says a frame is addressed to tunnel `t`.
pub(crate) fn tun_addr_key(t: &TunnelPort) -> tun_rx_key {
    let e = &t.endpoint;
    let (proto, udp_port) = match e.kind {
        Kind::Gre => (IPPROTO_GRE, 0),
        Kind::Vxlan => (IPPROTO_UDP, e.dst_port),
    };
    tun_rx_key {
        underlay: t.underlay,
        local_ip: u32::from_be_bytes(e.local_ip),
        remote_ip: u32::from_be_bytes(e.remote_ip),
        key: 0,
        udp_port,
        proto,
        sel: TM_ADDR,
    }
}

/// Tunnel `t`'s outer-header template.
pub(crate) fn tun_tx_record(t: &TunnelPort) -> tun_tx {
    let e = &t.endpoint;
    tun_tx {
        eth_dst: e.remote_mac,
        eth_src: e.local_mac,
        local_ip: u32::from_be_bytes(e.local_ip),
        remote_ip: u32::from_be_bytes(e.remote_ip),
        udp_dst: e.dst_port,
        kind: match e.kind {
            Kind::Gre => TK_GRE,
            Kind::Vxlan => TK_VXLAN,
        },
        gre_key: u8::from(e.kind == Kind::Gre && e.key != KeyMode::None),
        tos: e.tos,
        ttl: e.ttl,
        gre_csum: u8::from(e.kind == Kind::Gre && e.csum),
        pad: 0,
    }
}

/// Types whose every byte is a field (no padding), so their bytes can be
/// handed to the kernel.
pub(crate) trait Plain: Copy {}
impl Plain for flow_key {}
impl Plain for flow_mask {}
impl Plain for flow_prog {}
impl Plain for u32 {}
impl Plain for super::skel::types::port_info {}
impl Plain for tun_rx_key {}
impl Plain for tun_tx {}
impl Plain for super::skel::types::bpf_cpumap_val {}

/// The bytes of `v`.
pub(crate) fn bytes_of<T: Plain>(v: &T) -> &[u8] {
    // SAFETY: `T: Plain` is implemented only for `repr(C)` types without
    // padding (sizes asserted above and in the C file; u32; port_info is
    // five u32; bpf_cpumap_val is a u32 and a 4-byte union), so all
    // `size_of::<T>()` bytes behind `v` are initialised, and the slice
    // borrows `v`.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::VlanTag;

    #[test]
    fn records_carry_every_stage() {
        let k = OffloadKey {
            in_port: 3,
            eth_dst: 0x0200_0000_0002,
            eth_src: 0x0200_0000_0001,
            vlan: Some(VlanTag { vid: 7, pcp: 2 }),
            ipv4_src: 0x0a00_0001,
            ipv4_dst: 0x0a00_0002,
            ip_proto: 6,
            ip_dscp: 1,
            ip_ecn: 2,
            tp_src: 10,
            tp_dst: 20,
            tunnel_id: 0x1_0000_0002,
        };
        let kr = key_record(&k, 0);
        assert_eq!(kr.eth_dst, [2, 0, 0, 0, 0, 2]);
        assert_eq!((kr.vlan_present, kr.vlan_vid, kr.vlan_pcp), (1, 7, 2));
        assert_eq!((kr.tunnel_id_lo, kr.tunnel_id_hi), (2, 1));
        let p = OffloadProgram {
            vlan: VlanOp::Write {
                tpid: None,
                vid: Some(9),
                pcp: None,
                clear_dei: false,
            },
            ttl: TtlOp::Dec,
            tp_dst: Some(80),
            ..OffloadProgram::plain(Verdict::Port(4))
        };
        let r = prog_record(&k, 0, &p, 5, &TestOutputs(None));
        assert_eq!(r.flags, F_VLAN_VID | F_TP_DST);
        assert_eq!((r.vlan_op, r.vlan_vid, r.ttl_op), (VLAN_WRITE, 9, TTL_DEC));
        assert_eq!((r.verdict, r.out_port, r.counter), (V_PORT, 4, 5));
        assert_eq!((r.tx_index, r.tun_slot), (14, 0));
        assert_eq!(bytes_of(&r).len(), 120);
    }

    /// The program's masking (`find_masked` in the C file: the key's
    /// words ANDed with the mask's, then the slot id) equals the record of
    /// the masked key, for every field.
    #[test]
    fn a_masked_key_record_is_the_frame_key_record_under_the_mask() {
        let k = OffloadKey {
            in_port: 3,
            eth_dst: 0x0200_0000_0a02,
            eth_src: 0x0200_0000_0b01,
            vlan: Some(VlanTag { vid: 7, pcp: 2 }),
            ipv4_src: 0x0a00_0101,
            ipv4_dst: 0x0a00_0202,
            ip_proto: 17,
            ip_dscp: 0x2b,
            ip_ecn: 3,
            tp_src: 0x1234,
            tp_dst: 0x5678,
            tunnel_id: 0x1_0000_00f2,
        };
        let masks = [
            OffloadMask::SHAPE,
            OffloadMask {
                eth_dst: u64::MAX,
                eth_src: u64::MAX,
                ..OffloadMask::SHAPE
            },
            OffloadMask {
                eth_dst: 0xff_0000_00ff,
                ipv4_src: 0xffff_ff00,
                ip_dscp: 0x0f,
                ip_ecn: 1,
                tp_src: 0xff00,
                tp_dst: 0x00ff,
                tunnel_id: 0xffff_0000_000f,
                ..OffloadMask::SHAPE
            },
        ];
        let words = |r: &flow_key| -> Vec<u32> {
            bytes_of(r)
                .chunks(4)
                .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        };
        for (id, m) in (1u8..).zip(&masks) {
            let frame = words(&key_record(&k, 0));
            let bits = words(&mask_record(m).bits);
            let mut by_program: Vec<u32> = frame.iter().zip(&bits).map(|(a, b)| a & b).collect();
            // `pad` is the last byte of word 8.
            let mut w8 = by_program[8].to_ne_bytes();
            w8[3] = id;
            by_program[8] = u32::from_ne_bytes(w8);
            assert_eq!(by_program, words(&key_record(&k.masked(m), id)), "{m:?}");
        }
        assert_eq!(mask_record(&OffloadMask::SHAPE).in_use, 1);
    }

    /// Ports at index `ofport + 10`; port 4 a tunnel at index 2 if given.
    struct TestOutputs(Option<TunnelPort>);

    impl Outputs for TestOutputs {
        fn tx_index(&self, ofport: u32) -> u32 {
            ofport + 10
        }
        fn tunnel(&self, ofport: u32) -> Option<(u32, &TunnelPort)> {
            self.0.as_ref().filter(|_| ofport == 4).map(|t| (2, t))
        }
    }

    #[test]
    fn a_tunnel_output_carries_its_key_template_and_underlay() {
        use offlow_wire::tunnel::Endpoint;
        let t = TunnelPort {
            ofport: 4,
            endpoint: Endpoint {
                key: KeyMode::Flow,
                ..Endpoint::new(Kind::Vxlan, [1, 2, 3, 4], [5, 6, 7, 8], [2; 6], [4; 6])
            },
            underlay: 1,
        };
        let k = OffloadKey {
            tunnel_id: 0x77,
            ..crate::key::udp_key(1)
        };
        let out = TestOutputs(Some(t));
        let fwd = OffloadProgram::plain(Verdict::Port(4));
        let r = prog_record(&k, 0, &fwd, 0, &out);
        assert_eq!((r.tx_index, r.tun_slot, r.tun_key), (11, 3, 0x77));
        // The set-field wins over the key's tunnel_id; VNIs have 24 bits.
        let set = OffloadProgram {
            tunnel_id: Some(0x1234_5678),
            ..fwd
        };
        assert_eq!(prog_record(&k, 0, &set, 0, &out).tun_key, 0x34_5678);
        let keys = tun_rx_keys(&t);
        assert_eq!(keys.len(), 1);
        assert_eq!(
            (keys[0].sel, keys[0].udp_port, keys[0].proto),
            (TM_FLOW, 4789, 17)
        );
        assert_eq!(tun_addr_key(&t).local_ip, 0x0102_0304);
        let tx = tun_tx_record(&t);
        assert_eq!((tx.kind, tx.gre_key, tx.eth_src), (TK_VXLAN, 0, [2; 6]));
    }
}
