//! The flow tables of the latency sweeps: for a match tuple and a table
//! size N, N rules in ovs-ofctl's flow syntax of which exactly one (the
//! target, placed in the middle of the file) matches the probe, and every
//! rule sends back out of the ingress port (`actions=in_port`, OpenFlow
//! `OFPP_IN_PORT`).
//!
//! Invariants: the N − 1 fillers are pairwise distinct and none matches
//! the probe ([`PROBE`]): each differs from it in a field its tuple
//! matches exactly (fillers use address ranges the probe is outside of).
//!
//! Thread-safety: plain functions.

use std::fmt::Write as _;

use super::prober::ProbeHeader;

/// The probe's header: host A (the prober, MAC 02:00:00:00:00:11 as
/// [`crate::topo::Topo::hosts`] sets it) to a destination nobody has.
pub const PROBE: ProbeHeader = ProbeHeader {
    eth_dst: [0x02, 0, 0, 0, 0, 0x02],
    eth_src: [0x02, 0, 0, 0, 0, 0x11],
    ipv4_src: [10, 0, 0, 1],
    ipv4_dst: [10, 0, 0, 2],
    udp_src: 10_000,
    udp_dst: 9,
};

/// The prober's switch port.
pub const PROBE_PORT: u32 = 1;

/// Priority of every rule of the table under test.
const PRIORITY: u32 = 100;

/// The rule that loops the background stream (from port 2) back to its
/// sender in the load sweep; disjoint from every probe rule (`in_port`).
pub const BACKGROUND_RULE: &str = "priority=10,in_port=2,actions=in_port";

/// Largest table the generators support (addresses stay distinct).
pub const MAX_ENTRIES: usize = 1 << 20;

/// A match tuple of the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Tuple {
    /// `in_port` + `eth_dst`.
    L2,
    /// `ipv4_dst`, exact.
    L3,
    /// `ipv4_dst`, a /24 prefix.
    L3Prefix,
    /// in_port, eth_src, eth_dst, eth_type, ipv4_src, ipv4_dst, ip_proto,
    /// udp_src, udp_dst.
    NineTuple,
    /// Fillers of all four kinds in turn; the probe hits the 9-tuple
    /// target.
    Mix,
}

impl Tuple {
    /// All, in the report's order.
    pub const ALL: [Tuple; 5] = [
        Tuple::L2,
        Tuple::L3,
        Tuple::L3Prefix,
        Tuple::NineTuple,
        Tuple::Mix,
    ];

    /// For tables and file names.
    pub fn name(self) -> &'static str {
        match self {
            Tuple::L2 => "L2",
            Tuple::L3 => "L3 exact",
            Tuple::L3Prefix => "L3 prefix",
            Tuple::NineTuple => "9-tuple",
            Tuple::Mix => "mix",
        }
    }
}

fn mac(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn ip4(a: [u8; 4]) -> String {
    format!("{}.{}.{}.{}", a[0], a[1], a[2], a[3])
}

/// Three distinct bytes from `i` (< 2^24).
fn spread(i: usize) -> [u8; 3] {
    [(i >> 16) as u8, (i >> 8) as u8, i as u8]
}

/// The match of the rule that the probe hits.
fn target_match(t: Tuple) -> String {
    let p = PROBE;
    match t {
        Tuple::L2 => format!("in_port={PROBE_PORT},dl_dst={}", mac(p.eth_dst)),
        Tuple::L3 => format!("ip,nw_dst={}", ip4(p.ipv4_dst)),
        Tuple::L3Prefix => {
            let d = p.ipv4_dst;
            format!("ip,nw_dst={}/24", ip4([d[0], d[1], d[2], 0]))
        }
        Tuple::NineTuple | Tuple::Mix => format!(
            "udp,in_port={PROBE_PORT},dl_src={},dl_dst={},nw_src={},nw_dst={},tp_src={},tp_dst={}",
            mac(p.eth_src),
            mac(p.eth_dst),
            ip4(p.ipv4_src),
            ip4(p.ipv4_dst),
            p.udp_src,
            p.udp_dst
        ),
    }
}

/// Filler `i`'s match: never the probe's (see the module's invariants).
fn filler_match(t: Tuple, i: usize) -> String {
    let [a, b, c] = spread(i);
    let p = PROBE;
    match t {
        // 02:01:…: the probe's eth_dst starts 02:00.
        Tuple::L2 => format!("in_port={PROBE_PORT},dl_dst=02:01:00:{a:02x}:{b:02x}:{c:02x}"),
        // 11.x.y.z: the probe's ipv4_dst is in 10/8.
        Tuple::L3 => format!("ip,nw_dst=11.{a}.{b}.{c}"),
        // 12+a.b.c.0/24: outside 10/8.
        Tuple::L3Prefix => format!("ip,nw_dst={}.{b}.{c}.0/24", 12 + u32::from(a)),
        // 11.a.b.c as nw_src: the probe's is 10.0.0.1.
        Tuple::NineTuple => format!(
            "udp,in_port={PROBE_PORT},dl_src={},dl_dst={},nw_src=11.{a}.{b}.{c},nw_dst={},tp_src={},tp_dst={}",
            mac(p.eth_src),
            mac(p.eth_dst),
            ip4(p.ipv4_dst),
            p.udp_src,
            p.udp_dst
        ),
        Tuple::Mix => {
            let kinds = [Tuple::L2, Tuple::L3, Tuple::L3Prefix, Tuple::NineTuple];
            filler_match(kinds[i % 4], i / 4)
        }
    }
}

/// The `entries` rules for tuple `t` (at least 1: the target), one per
/// line, ready for `ovs-ofctl add-flows`.
pub fn flow_file(t: Tuple, entries: usize) -> String {
    let entries = entries.clamp(1, MAX_ENTRIES);
    let target_at = entries / 2;
    let mut out = String::with_capacity(entries * 80);
    let mut filler = 0;
    for i in 0..entries {
        let m = if i == target_at {
            target_match(t)
        } else {
            filler += 1;
            filler_match(t, filler - 1)
        };
        // Writing to a String cannot fail.
        let _ = writeln!(out, "priority={PRIORITY},{m},actions=in_port");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// A tiny matcher for the fields these rules use, against the probe:
    /// the oracle that only the target matches.
    fn matches_probe(rule: &str) -> bool {
        let p = PROBE;
        let m = rule.split(",actions=").next().unwrap();
        m.split(',').all(|kv| match kv.split_once('=') {
            None => matches!(kv, "ip" | "udp"),
            Some(("priority", _)) => true,
            Some(("in_port", v)) => v == PROBE_PORT.to_string(),
            Some(("dl_dst", v)) => v == mac(p.eth_dst),
            Some(("dl_src", v)) => v == mac(p.eth_src),
            Some(("nw_src", v)) => v == ip4(p.ipv4_src),
            Some(("nw_dst", v)) => match v.split_once('/') {
                None => v == ip4(p.ipv4_dst),
                Some((net, "24")) => {
                    let d = p.ipv4_dst;
                    net == ip4([d[0], d[1], d[2], 0])
                }
                Some(_) => panic!("unexpected prefix {v}"),
            },
            Some(("tp_src", v)) => v == p.udp_src.to_string(),
            Some(("tp_dst", v)) => v == p.udp_dst.to_string(),
            Some((k, _)) => panic!("unexpected field {k}"),
        })
    }

    #[test]
    fn exactly_one_rule_matches_the_probe() {
        for t in Tuple::ALL {
            for n in [1, 2, 200, 5000] {
                let f = flow_file(t, n);
                let lines: Vec<&str> = f.lines().collect();
                assert_eq!(lines.len(), n, "{t:?}");
                let distinct: HashSet<&str> = lines.iter().copied().collect();
                assert_eq!(distinct.len(), n, "{t:?} {n}: duplicate rules");
                let hits: Vec<usize> = (0..n).filter(|&i| matches_probe(lines[i])).collect();
                assert_eq!(hits, vec![n / 2], "{t:?} {n}");
                assert!(lines.iter().all(|l| l.ends_with(",actions=in_port")));
            }
        }
    }

    #[test]
    fn large_tables_stay_distinct() {
        let f = flow_file(Tuple::L3Prefix, 100_000);
        assert_eq!(f.lines().collect::<HashSet<_>>().len(), 100_000);
        let f = flow_file(Tuple::Mix, 100_000);
        assert_eq!(f.lines().collect::<HashSet<_>>().len(), 100_000);
    }
}
