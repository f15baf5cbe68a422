//! The receive side of tunnel ports: a batch received on an underlay port
//! is split into the frames that stay on it and the ones addressed to its
//! tunnels, which are decapsulated in their buffers and enter the pipeline
//! on their tunnel port with the key as `tunnel_id`
//! ([`offlow_wire::tunnel::classify`] decides; malformed ones are counted
//! as receive errors of the tunnel they were addressed to, and dropped).
//!
//! The batch is reordered so each port's frames are contiguous, keeping
//! arrival order within each port (so within each flow): the underlay's
//! first, then each tunnel's, dropped frames last.

use std::ops::Range;

use offlow_datapath::PacketBuf;
use offlow_io::PortStats;
use offlow_wire::tunnel::{classify, Classified, Endpoint};

use super::DataPort;
use crate::config::PortKind;
use crate::port_sink::TunnelTx;

/// Tag of a frame to drop.
const DROP: usize = usize::MAX;

/// The tunnels by underlay, for one packet thread.
#[derive(Debug, Default)]
pub(super) struct Decapsulator {
    /// Per port index: the endpoints whose underlay it is, and the port
    /// index of each one's tunnel port (both empty: not an underlay).
    underlays: Vec<(Vec<Endpoint>, Vec<usize>)>,
    /// Per frame of the batch being sorted: the port index it enters on.
    tags: Vec<usize>,
    /// Frames addressed to a tunnel and malformed (dropped).
    pub(super) malformed: u64,
    /// Frames addressed to the tunnels' addresses with a key no tunnel
    /// port takes (dropped).
    pub(super) unknown_key: u64,
}

/// The tunnel ports of `ports`: where outputs to each are encapsulated
/// to (by port index), or an error naming a tunnel whose underlay is not
/// a non-tunnel port of this switch.
pub(super) fn tunnel_outputs(ports: &[DataPort]) -> anyhow::Result<Vec<Option<TunnelTx>>> {
    ports
        .iter()
        .map(|p| {
            let PortKind::Tunnel(t) = &p.kind else {
                return Ok(None);
            };
            let underlay = ports
                .iter()
                .position(|u| u.number == t.underlay && !matches!(u.kind, PortKind::Tunnel(_)))
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "tunnel port {} ({}): underlay port {} is not a port of this switch \
                         (or is a tunnel)",
                        p.number,
                        p.ifname,
                        t.underlay
                    )
                })?;
            Ok(Some(TunnelTx {
                endpoint: t.endpoint,
                underlay,
            }))
        })
        .collect()
}

impl Decapsulator {
    /// From the tunnel outputs of the switch's ports ([`tunnel_outputs`]).
    pub(super) fn new(outputs: &[Option<TunnelTx>]) -> Decapsulator {
        let mut underlays = vec![(Vec::new(), Vec::new()); outputs.len()];
        for (i, t) in outputs.iter().enumerate() {
            if let Some(t) = t {
                let (eps, ports): &mut (Vec<Endpoint>, Vec<usize>) = &mut underlays[t.underlay];
                eps.push(t.endpoint);
                ports.push(i);
            }
        }
        Decapsulator {
            underlays,
            tags: Vec::new(),
            malformed: 0,
            unknown_key: 0,
        }
    }

    /// Whether port `i` carries tunnels (one load per batch otherwise).
    #[inline]
    pub(super) fn is_underlay(&self, i: usize) -> bool {
        self.underlays.get(i).is_some_and(|u| !u.0.is_empty())
    }

    /// Decapsulate the tunnelled frames of `bufs`, received on underlay
    /// port `i`, count them in `stats` (by port index: received packets
    /// and inner bytes, receive errors for malformed ones), reorder the
    /// batch and write into `segments` each run of frames and the port
    /// index they enter on. Dropped frames are in no segment.
    pub(super) fn sort_batch(
        &mut self,
        i: usize,
        bufs: &mut [PacketBuf],
        stats: &mut [PortStats],
        segments: &mut Vec<(usize, Range<usize>)>,
    ) {
        segments.clear();
        let Some((endpoints, ports)) = self.underlays.get(i) else {
            segments.push((i, 0..bufs.len()));
            return;
        };
        self.tags.clear();
        for buf in bufs.iter_mut() {
            let tag = match classify(buf.frame(), endpoints) {
                Classified::NotTunnel => i,
                Classified::Tunnel(d) => {
                    let t = ports[d.endpoint];
                    if buf.keep(d.inner) {
                        buf.set_tunnel_id(Some(d.tunnel_id));
                        if let Some(s) = stats.get_mut(t) {
                            s.rx_packets += 1;
                            s.rx_bytes += buf.len() as u64;
                        }
                        t
                    } else {
                        DROP
                    }
                }
                Classified::Malformed(e, _) => {
                    self.malformed += 1;
                    if let Some(s) = stats.get_mut(ports[e]) {
                        s.rx_errors += 1;
                    }
                    DROP
                }
                Classified::UnknownKey => {
                    self.unknown_key += 1;
                    DROP
                }
            };
            self.tags.push(tag);
        }
        // Stable insertion sort by rank (underlay, tunnels by index, drops):
        // a batch is at most a few dozen frames, nearly always one run.
        let rank = |tag: usize| match tag {
            DROP => usize::MAX,
            t if t == i => 0,
            t => t + 1,
        };
        let n = bufs.len().min(self.tags.len());
        for j in 1..n {
            let mut k = j;
            while k > 0 && rank(self.tags[k - 1]) > rank(self.tags[k]) {
                self.tags.swap(k - 1, k);
                bufs.swap(k - 1, k);
                k -= 1;
            }
        }
        let mut start = 0;
        while start < n && self.tags[start] != DROP {
            let tag = self.tags[start];
            let mut end = start + 1;
            while end < n && self.tags[end] == tag {
                end += 1;
            }
            segments.push((tag, start..end));
            start = end;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TunnelConfig;
    use offlow_wire::tunnel::{KeyMode, Kind};

    const LOCAL: [u8; 4] = [192, 168, 50, 1];
    const REMOTE: [u8; 4] = [192, 168, 50, 2];

    fn endpoint(key: KeyMode) -> Endpoint {
        Endpoint {
            key,
            ..Endpoint::new(
                Kind::Gre,
                LOCAL,
                REMOTE,
                [2, 0, 0, 0, 0, 1],
                [2, 0, 0, 0, 0, 2],
            )
        }
    }

    fn port(number: u32, kind: PortKind) -> DataPort {
        DataPort {
            ifname: format!("p{number}"),
            number,
            kind,
            missing: false,
        }
    }

    fn tunnel(number: u32, key: KeyMode) -> DataPort {
        port(
            number,
            PortKind::Tunnel(TunnelConfig {
                endpoint: endpoint(key),
                underlay: 1,
                local_mac_from_underlay: false,
            }),
        )
    }

    /// What the far end sends: our encapsulation seen from its side.
    fn from_remote(key: KeyMode, tunnel_id: u64, inner: &[u8]) -> Vec<u8> {
        let ours = endpoint(key);
        let far = Endpoint {
            local_ip: REMOTE,
            remote_ip: LOCAL,
            ..ours
        };
        let mut out = vec![0u8; 256];
        let n = far.encapsulate(inner, tunnel_id, 1, 2, &mut out).unwrap();
        out.truncate(n);
        out
    }

    fn inner(tag: u8) -> Vec<u8> {
        let mut f = vec![tag; 60];
        f[12] = 0x88;
        f[13] = 0xb5;
        f
    }

    #[test]
    fn a_batch_is_split_by_port_in_arrival_order() {
        let ports = [
            port(1, PortKind::AfPacket),
            tunnel(10, KeyMode::Fixed(5)),
            tunnel(11, KeyMode::Flow),
        ];
        let outputs = tunnel_outputs(&ports).unwrap();
        assert_eq!(outputs[1].unwrap().underlay, 0);
        let mut d = Decapsulator::new(&outputs);
        assert!(d.is_underlay(0) && !d.is_underlay(1));
        let mut bad = from_remote(KeyMode::Fixed(5), 0, &inner(9));
        bad[24] ^= 1; // outer IPv4 checksum
        let frames = [
            from_remote(KeyMode::Flow, 77, &inner(1)),    // → 11, id 77
            inner(2),                                     // stays on 1
            from_remote(KeyMode::Fixed(5), 0, &inner(3)), // → 10, id 5
            bad,                                          // dropped, error on 10
            from_remote(KeyMode::Flow, 78, &inner(4)),    // → 11, after 1
            inner(5),                                     // stays, after 2
        ];
        let mut bufs: Vec<PacketBuf> = frames.iter().map(|f| PacketBuf::from_frame(f, 0)).collect();
        let mut stats = vec![PortStats::default(); 3];
        let mut segs = Vec::new();
        d.sort_batch(0, &mut bufs, &mut stats, &mut segs);
        assert_eq!(segs, vec![(0, 0..2), (1, 2..3), (2, 3..5)]);
        let first: Vec<u8> = bufs[..5].iter().map(|b| b.frame()[0]).collect();
        assert_eq!(first, [2, 5, 3, 1, 4]);
        let ids: Vec<Option<u64>> = bufs[..5].iter().map(|b| b.tunnel_id()).collect();
        assert_eq!(ids, [None, None, Some(5), Some(77), Some(78)]);
        assert_eq!(bufs[2].frame(), &inner(3)[..], "decapsulated byte for byte");
        assert_eq!((stats[1].rx_packets, stats[1].rx_errors), (1, 1));
        assert_eq!((stats[2].rx_packets, stats[2].rx_bytes), (2, 120));
        assert_eq!(d.malformed, 1);
    }

    #[test]
    fn an_underlay_must_be_a_port_and_not_a_tunnel() {
        let e = tunnel_outputs(&[tunnel(10, KeyMode::Flow)]).unwrap_err();
        assert!(e.to_string().contains("underlay port 1"), "{e}");
    }
}
