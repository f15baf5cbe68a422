//! Finishing partial transport checksums.
//!
//! A Linux sender with checksum offload (a veth peer, by default) leaves
//! TCP and UDP checksums *partial*: the field holds only the pseudo-header
//! sum and the NIC is expected to finish it. A frame received on a packet
//! socket in that state is flagged `TP_STATUS_CSUMNOTREADY`; forwarded as
//! is, the receiver would drop it as corrupt. [`finish_partial`] recomputes
//! the whole checksum from the frame (pseudo-header, header, payload).
//!
//! Handled: Ethernet with up to two VLAN tags, IPv4 without fragmentation,
//! IPv6 whose next header is TCP or UDP directly. Anything else is left
//! untouched (the function says so); it never panics on any input.
//!
//! Thread-safety: pure function.

use offlow_wire::checksum::{fold, pseudo_ipv4, pseudo_ipv6, sum};

const ETH_P_IPV4: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86dd;
const ETH_P_8021Q: u16 = 0x8100;
const ETH_P_8021AD: u16 = 0x88a8;
const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// Recompute the TCP or UDP checksum of `frame` from scratch. Returns true
/// when a checksum was written.
pub fn finish_partial(frame: &mut [u8]) -> bool {
    let Some(mut ethertype) = be16(frame, 12) else {
        return false;
    };
    let mut l3 = 14;
    for _ in 0..2 {
        if ethertype != ETH_P_8021Q && ethertype != ETH_P_8021AD {
            break;
        }
        let Some(t) = be16(frame, l3 + 2) else {
            return false;
        };
        ethertype = t;
        l3 += 4;
    }
    let (l4, l4_len, proto, pseudo) = match ethertype {
        ETH_P_IPV4 => {
            let Some(ip) = frame.get(l3..l3 + 20) else {
                return false;
            };
            let ihl = usize::from(ip[0] & 0x0f) * 4;
            let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
            let frag = u16::from_be_bytes([ip[6], ip[7]]);
            // A fragment's checksum covers the whole datagram: not ours.
            if ip[0] >> 4 != 4 || ihl < 20 || total < ihl || frag & 0x3fff != 0 {
                return false;
            }
            let proto = ip[9];
            let src = [ip[12], ip[13], ip[14], ip[15]];
            let dst = [ip[16], ip[17], ip[18], ip[19]];
            let l4_len = total - ihl;
            let Ok(l4_len16) = u16::try_from(l4_len) else {
                return false;
            };
            (
                l3 + ihl,
                l4_len,
                proto,
                pseudo_ipv4(src, dst, proto, l4_len16),
            )
        }
        ETH_P_IPV6 => {
            let Some(ip) = frame.get(l3..l3 + 40) else {
                return false;
            };
            let payload = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
            let proto = ip[6];
            let mut src = [0u8; 16];
            let mut dst = [0u8; 16];
            src.copy_from_slice(&ip[8..24]);
            dst.copy_from_slice(&ip[24..40]);
            (
                l3 + 40,
                payload,
                proto,
                pseudo_ipv6(src, dst, proto, payload as u32),
            )
        }
        _ => return false,
    };
    let field = match proto {
        IPPROTO_TCP => 16,
        IPPROTO_UDP => 6,
        _ => return false,
    };
    let Some(seg) = frame.get_mut(l4..l4 + l4_len) else {
        return false;
    };
    if seg.len() < field + 2 {
        return false;
    }
    seg[field] = 0;
    seg[field + 1] = 0;
    let mut c = !fold(sum(seg, pseudo));
    // UDP sends a computed 0 as all ones (0 means "no checksum").
    if c == 0 && proto == IPPROTO_UDP {
        c = 0xffff;
    }
    seg[field..field + 2].copy_from_slice(&c.to_be_bytes());
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use offlow_testkit::{Checksum, FrameBuilder};
    use proptest::prelude::*;

    /// Reference: the RFC 1071 sum, 16 bits at a time, no shortcuts.
    fn reference(words: &[u8], pseudo: &[u8]) -> u16 {
        let mut acc: u32 = 0;
        for chunk in pseudo.chunks(2).chain(words.chunks(2)) {
            let hi = u32::from(chunk[0]) << 8;
            let lo = chunk.get(1).copied().map_or(0, u32::from);
            acc += hi | lo;
        }
        while acc >> 16 != 0 {
            acc = (acc & 0xffff) + (acc >> 16);
        }
        !(acc as u16)
    }

    /// Ethernet/IPv4/UDP 10.0.0.1:12345 -> 10.0.0.2:53 with `partial` in
    /// the checksum field (what is there must not matter).
    fn udp4(payload: &[u8], partial: u16) -> Vec<u8> {
        let mut f = FrameBuilder::default()
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2])
            .ident(1)
            .dont_frag()
            .udp(12345, 53)
            .payload(payload)
            .build();
        f[40..42].copy_from_slice(&partial.to_be_bytes());
        f
    }

    proptest! {
        #[test]
        fn udp_over_ipv4_matches_reference(payload in proptest::collection::vec(any::<u8>(), 0..300),
                                           junk in any::<u16>()) {
            let mut f = udp4(&payload, junk);
            prop_assert!(finish_partial(&mut f));
            let seg = &f[34..];
            let mut pseudo = vec![10, 0, 0, 1, 10, 0, 0, 2, 0, 17];
            pseudo.extend_from_slice(&(seg.len() as u16).to_be_bytes());
            let mut zeroed = seg.to_vec();
            zeroed[6] = 0;
            zeroed[7] = 0;
            let mut want = reference(&zeroed, &pseudo);
            if want == 0 { want = 0xffff; }
            prop_assert_eq!(u16::from_be_bytes([seg[6], seg[7]]), want);
            // A correct checksum verifies: the sum over everything is 0xffff.
            prop_assert_eq!(reference(seg, &pseudo), 0);
        }

        #[test]
        fn never_panics(frame in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut f = frame;
            let _ = finish_partial(&mut f);
        }
    }

    #[test]
    fn tcp_over_ipv6_verifies() {
        let payload = b"hello, switch";
        let mut f = FrameBuilder::default()
            .ipv6([0xfd; 16], [0xfe; 16])
            .tcp(0, 0)
            .payload(payload)
            .l4_checksum(Checksum::Partial)
            .build();
        assert!(finish_partial(&mut f));
        let seg = &f[54..];
        let mut pseudo = vec![0xfd; 16];
        pseudo.extend_from_slice(&[0xfe; 16]);
        pseudo.extend_from_slice(&(seg.len() as u32).to_be_bytes());
        pseudo.extend_from_slice(&[0, 0, 0, 6]);
        assert_eq!(reference(seg, &pseudo), 0);
    }

    #[test]
    fn fragments_and_other_protocols_are_left_alone() {
        let mut f = udp4(b"abc", 0x1111);
        f[14 + 6] = 0x20; // more fragments
        assert!(!finish_partial(&mut f));
        assert_eq!(&f[40..42], &[0x11, 0x11]);
        let mut g = udp4(b"abc", 0x1111);
        g[14 + 9] = 1; // ICMP
        assert!(!finish_partial(&mut g));
    }
}
