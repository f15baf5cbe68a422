//! The transmit sink of the packet threads: where a worker's outputs go
//! while it processes a batch.
//!
//! What: [`PortSink`] is the [`OutputSink`] every packet thread hands the
//! executor, and the one `offlow bench datapath` measures (over in-memory
//! ports). An output to a port copies the frame into that port's transmit
//! batch ([`Port::send`]) and marks the port pending; after the batch the
//! owner calls [`PortSink::flush`] (the packet threads: on the ports they
//! lent it), which flushes only the pending ports. Outputs to a port
//! configured `no_fwd` or `port_down` are dropped and counted per port;
//! outputs to an unknown port are counted (`drop_unknown_port`). FLOOD and
//! ALL expand over the port infos. An output to a tunnel port
//! ([`PortSink::with_tunnels`]) is encapsulated into a scratch buffer
//! ([`offlow_wire::tunnel::Endpoint::encapsulate`]) and queued on the
//! tunnel's underlay port; the tunnel port's transmit counters count the
//! inner frames. Frames for the controller are copied
//! into a bounded packet-in channel when some connection wants their
//! reason (`packet_in_wanted`), never waited for. Steering (the
//! `offlow_workers` action) stages frames per destination worker; the
//! packet threads move the staging batches to the workers' inboxes (see
//! the `dataplane` module).
//!
//! Invariants: `pending`, `no_fwd`, `no_fwd_drops` and `no_packet_in` are
//! indexed like `infos` (and like the ports); no allocation per output
//! except packet-in copies; a staging batch holds at most
//! [`INBOX_FRAMES`] frames.
//!
//! Thread-safety: one sink per packet thread (`Send`, not shared); it
//! meets the control thread only through the packet-in channel and the
//! wanted-reasons atomic.

use std::io;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use offlow_datapath::{OutputMeta, OutputSink, PortInfo, SteeredFrame};
use offlow_io::{Port, PortStats};
use offlow_openflow::packet_in_reason::{
    ACTION as OFPR_ACTION, INVALID_TTL as OFPR_INVALID_TTL, NO_MATCH as OFPR_NO_MATCH,
};
use offlow_pipeline::PacketInOrigin;
use tokio::sync::mpsc;

/// Steered frames a worker's inbox holds before the excess is dropped.
pub const INBOX_FRAMES: usize = 1024;

/// Frames stored back to back: one byte arena and an index, both reused,
/// so moving frames between workers allocates nothing once warm.
#[derive(Debug, Default)]
pub(crate) struct SteerBatch {
    pub(crate) data: Vec<u8>,
    /// Where each frame is in `data` and what it carries besides its
    /// bytes, in arrival order.
    pub(crate) frames: Vec<StagedFrame>,
}

/// One frame of a [`SteerBatch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StagedFrame {
    in_port: u32,
    /// The packet's `tunnel_id` (a decapsulated frame's key), restored on
    /// the receiving worker so its rules see what the sender's would have.
    tunnel_id: Option<u64>,
    start: usize,
    len: usize,
}

impl SteerBatch {
    pub(crate) fn len(&self) -> usize {
        self.frames.len()
    }

    pub(crate) fn push(&mut self, packet: SteeredFrame<'_>) {
        let start = self.data.len();
        self.data.extend_from_slice(packet.frame);
        self.frames.push(StagedFrame {
            in_port: packet.in_port,
            tunnel_id: packet.tunnel_id,
            start,
            len: packet.frame.len(),
        });
    }

    pub(crate) fn clear(&mut self) {
        self.data.clear();
        self.frames.clear();
    }

    /// The `i`-th frame with its metadata, as it was pushed.
    pub(crate) fn packet(&self, i: usize) -> Option<SteeredFrame<'_>> {
        let f = self.frames.get(i)?;
        Some(SteeredFrame {
            frame: self.data.get(f.start..f.start + f.len)?,
            in_port: f.in_port,
            tunnel_id: f.tunnel_id,
        })
    }
}

/// A frame for the controller (`OFPR_ACTION` or a table-miss entry's
/// output to CONTROLLER).
#[derive(Debug)]
pub struct PacketInFrame {
    /// Port it arrived on.
    pub in_port: u32,
    /// The whole frame (the control side cuts it to `max_len` and may
    /// keep the rest in a packet buffer).
    pub data: Vec<u8>,
    /// The output action's `max_len` (`OFPCML_NO_BUFFER` for an expired
    /// TTL: no output action gave a length).
    pub max_len: u16,
    /// The flow entry that sent it (table, cookie, table-miss or not), as
    /// the pipeline resolved the packet when it was processed.
    pub origin: PacketInOrigin,
    /// A Dec-TTL expired (reason `OFPR_INVALID_TTL`) rather than an output
    /// to CONTROLLER.
    pub invalid_ttl: bool,
}

/// Where a sink's packet-ins go.
#[derive(Debug, Clone)]
pub struct PacketInQueue {
    /// The bounded channel to the control thread.
    pub sender: mpsc::Sender<PacketInFrame>,
    /// The packet-in reasons anyone may want now, bit `1 << reason`
    /// (see `DataplaneConfig::packet_in_wanted`).
    pub wanted: Arc<AtomicU32>,
}

/// Where an output to a tunnel port goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TunnelTx {
    /// The encapsulation (its `local_mac` resolved).
    pub endpoint: offlow_wire::tunnel::Endpoint,
    /// Index of the underlay port (like the sink's port infos).
    pub underlay: usize,
}

/// Largest encapsulated frame the sink builds (a worker buffer's frame
/// plus the largest outer headers).
const TUNNEL_SCRATCH: usize = 4096;

/// Port numbers below this are found by direct index in a [`PortSink`].
const DIRECT_PORTS: usize = 1024;

/// Where a worker's outputs go; see the module documentation.
pub struct PortSink {
    pub(crate) infos: Vec<PortInfo>,
    /// Index + 1 into `infos` of each port number below [`DIRECT_PORTS`]
    /// (0: none): an output finds its port with one load instead of a scan
    /// of the ports (the scan was 12% of a cached packet's time with 8
    /// ports, `bench datapath`). Checked against `infos` on use.
    by_number: Box<[u16]>,
    /// Ports with frames queued since the last flush.
    pub(crate) pending: Vec<bool>,
    /// Per port: configured `no_fwd` or `port_down` (outputs dropped).
    pub(crate) no_fwd: Vec<bool>,
    /// Per port: outputs dropped so (published in its `tx_dropped`).
    pub(crate) no_fwd_drops: Vec<u64>,
    /// Per port: configured `no_packet_in` (its table misses send no
    /// packet-in).
    pub(crate) no_packet_in: Vec<bool>,
    /// Where packet-ins go (none: every packet-in is unwanted).
    pub(crate) packet_in: Option<PacketInQueue>,
    pub(crate) drop_unknown_port: u64,
    pub(crate) drop_packet_in_unwanted: u64,
    pub(crate) drop_packet_in_backlog: u64,
    pub(crate) packet_ins: u64,
    /// Port the current batch came from.
    pub(crate) in_port: u32,
    /// The ports, lent for one batch (taken back after `process`).
    pub(crate) ports_tx: Vec<Box<dyn Port>>,
    /// This worker's index.
    pub(crate) me: usize,
    /// Running workers (mask bits at or past this are ignored).
    pub(crate) n_workers: usize,
    /// Frames steered this round, per destination worker.
    pub(crate) staged: Vec<SteerBatch>,
    /// Set while processing frames taken from the inbox: they stay here.
    pub(crate) no_steer: bool,
    /// Frames refused because their destination's staging batch was full.
    pub(crate) drop_steer_inbox_full: u64,
    /// Per port: `Some` for a tunnel port (outputs are encapsulated).
    pub(crate) tunnels: Vec<Option<TunnelTx>>,
    /// Per port: a tunnel port's counters (received: decapsulated by the
    /// packet thread; sent: encapsulated here); zero for other ports.
    pub(crate) tunnel_stats: Vec<PortStats>,
    /// Where encapsulations are built (allocated with the first tunnel).
    tunnel_scratch: Vec<u8>,
    /// The outer IPv4 identification of the next encapsulation.
    tunnel_ident: u16,
}

impl PortSink {
    /// A sink over `ports` (by index like `infos`, which are also the
    /// FLOOD/ALL set), nothing configured `no_fwd` or `no_packet_in`,
    /// steering off (one worker). `packet_in`: where packet-ins go; none
    /// counts them all as unwanted.
    ///
    /// The packet threads build theirs with no ports and lend a worker's
    /// ports around each batch; a benchmark hands it its ports for good.
    pub fn new(
        infos: Vec<PortInfo>,
        ports: Vec<Box<dyn Port>>,
        packet_in: Option<PacketInQueue>,
    ) -> PortSink {
        let n = infos.len();
        let mut by_number = vec![0u16; DIRECT_PORTS].into_boxed_slice();
        for (i, p) in infos.iter().enumerate() {
            // At most u16::MAX - 1 ports take a direct slot; others scan.
            if let (Some(slot), Ok(i)) = (by_number.get_mut(p.port as usize), u16::try_from(i + 1))
            {
                *slot = i;
            }
        }
        PortSink {
            infos,
            by_number,
            pending: vec![false; n],
            no_fwd: vec![false; n],
            no_fwd_drops: vec![0; n],
            no_packet_in: vec![false; n],
            packet_in,
            drop_unknown_port: 0,
            drop_packet_in_unwanted: 0,
            drop_packet_in_backlog: 0,
            packet_ins: 0,
            in_port: 0,
            ports_tx: ports,
            me: 0,
            n_workers: 1,
            staged: vec![SteerBatch::default()],
            no_steer: false,
            drop_steer_inbox_full: 0,
            tunnels: vec![None; n],
            tunnel_stats: vec![PortStats::default(); n],
            tunnel_scratch: Vec::new(),
            tunnel_ident: 0,
        }
    }

    /// Tunnel ports: `tunnels[i]` says where an output to port `i` (by
    /// index like the infos) is encapsulated to; `None` for other ports.
    /// Extra entries are ignored, missing ones are `None`.
    pub fn with_tunnels(mut self, tunnels: &[Option<TunnelTx>]) -> PortSink {
        for (slot, t) in self.tunnels.iter_mut().zip(tunnels) {
            *slot = *t;
        }
        if self.tunnels.iter().any(Option::is_some) {
            self.tunnel_scratch = vec![0; TUNNEL_SCRATCH];
        }
        self
    }

    /// The counters of tunnel port index `i` (zero for other ports).
    pub fn tunnel_stats(&self, i: usize) -> PortStats {
        self.tunnel_stats.get(i).copied().unwrap_or_default()
    }

    /// Encapsulate `frame` for the tunnel at port index `i` and queue it
    /// on the underlay. The identification counts per worker (unique
    /// enough for DF-set packets, which are never reassembled); the VXLAN
    /// source port comes from the inner addresses so a flow keeps one.
    /// Out of line: it keeps the encapsulation out of the ordinary
    /// output path's code.
    #[inline(never)]
    fn output_tunnel(&mut self, i: usize, t: TunnelTx, frame: &[u8], meta: OutputMeta) {
        let stats = &mut self.tunnel_stats[i];
        self.tunnel_ident = self.tunnel_ident.wrapping_add(1);
        let entropy = offlow_wire::tunnel::entropy(frame);
        let sent = t
            .endpoint
            .encapsulate(
                frame,
                meta.tunnel_id,
                self.tunnel_ident,
                entropy,
                &mut self.tunnel_scratch,
            )
            .is_some_and(|n| match self.ports_tx.get_mut(t.underlay) {
                Some(p) if !self.no_fwd[t.underlay] => {
                    self.pending[t.underlay] = true;
                    p.send(&self.tunnel_scratch[..n])
                }
                _ => false,
            });
        if sent {
            stats.tx_packets += 1;
            stats.tx_bytes += frame.len() as u64;
        } else {
            stats.tx_dropped += 1;
        }
    }

    /// Steering on: this sink belongs to worker `me` of `n_workers`.
    pub fn with_steering(mut self, me: usize, n_workers: usize) -> PortSink {
        self.me = me;
        self.n_workers = n_workers;
        self.staged = (0..n_workers).map(|_| SteerBatch::default()).collect();
        self
    }

    /// The port the next batch arrives on (its packet-ins say so).
    pub fn set_in_port(&mut self, port: u32) {
        self.in_port = port;
    }

    /// The ports the sink holds (none while the packet threads lend them
    /// out between batches).
    pub fn ports_mut(&mut self) -> &mut [Box<dyn Port>] {
        &mut self.ports_tx
    }

    /// Outputs to a port the sink does not know, dropped.
    pub fn drop_unknown_port(&self) -> u64 {
        self.drop_unknown_port
    }

    /// Transmit the frames queued since the last flush on the ports the
    /// sink holds, as the packet threads do after every batch. Returns
    /// the first port error (every port is flushed regardless).
    pub fn flush(&mut self) -> io::Result<()> {
        let mut ports = std::mem::take(&mut self.ports_tx);
        let mut first = Ok(());
        self.flush_ports(&mut ports, |_, _, e| {
            if first.is_ok() {
                first = Err(e);
            }
        });
        self.ports_tx = ports;
        first
    }

    /// Hand the queued frames of the `ports` this sink's outputs went to
    /// (by index like its port infos) to the kernel; frames it refuses are
    /// counted by the port, an error of a port itself goes to `on_error`.
    pub(crate) fn flush_ports(
        &mut self,
        ports: &mut [Box<dyn Port>],
        mut on_error: impl FnMut(usize, &dyn Port, io::Error),
    ) {
        for (i, p) in ports.iter_mut().enumerate() {
            let Some(pending) = self.pending.get_mut(i) else {
                break;
            };
            if std::mem::take(pending) {
                let r = p.flush();
                // Left in a ring the kernel did not drain: try again next
                // round (also when idle).
                *pending = p.tx_outstanding();
                if let Err(e) = r {
                    on_error(i, &**p, e);
                }
            }
        }
    }

    /// The worker of `mask` (among the running ones) that `hash` picks, if
    /// the mask names any running worker.
    pub(crate) fn steer_target(&self, mask: u64, hash: u64) -> Option<usize> {
        let running = match self.n_workers {
            n if n >= 64 => u64::MAX,
            n => (1u64 << n) - 1,
        };
        let m = mask & running;
        if m == 0 {
            return None;
        }
        // Pick the k-th set bit: a flow's hash is stable, so is its worker.
        // From the hash's high half: the low bits pick the receiving worker's
        // microflow-cache bucket, and taking the worker from them too would
        // leave each worker only the buckets of its own residue.
        let k = (hash >> 32) % u64::from(m.count_ones());
        let mut rest = m;
        for _ in 0..k {
            rest &= rest - 1; // clear the lowest set bit
        }
        Some(rest.trailing_zeros() as usize)
    }

    /// Whether some connection (or standalone learning) may take a
    /// packet-in of `reason`; counts the ones nobody wants.
    fn packet_in_wanted(&mut self, reason: u8) -> bool {
        let wanted = self
            .packet_in
            .as_ref()
            .is_some_and(|q| q.wanted.load(Ordering::Relaxed) & (1 << reason) != 0);
        if !wanted {
            self.drop_packet_in_unwanted += 1;
        }
        wanted
    }

    /// Queue a packet-in for the control thread; a full queue drops it
    /// (counted): a worker never waits for the control side.
    fn queue_packet_in(&mut self, pi: PacketInFrame) {
        match self.packet_in.as_ref().map(|q| q.sender.try_send(pi)) {
            Some(Ok(())) => self.packet_ins += 1,
            // No queue: `packet_in_wanted` said no before the copy.
            Some(Err(_)) | None => self.drop_packet_in_backlog += 1,
        }
    }
}

impl PortSink {
    /// The index of port `port` in `infos`: direct for small numbers, a
    /// scan otherwise (and when the direct slot does not name it).
    #[inline]
    fn index_of(&self, port: u32) -> Option<usize> {
        if let Some(&slot) = self.by_number.get(port as usize) {
            let i = usize::from(slot).wrapping_sub(1);
            if self.infos.get(i).is_some_and(|p| p.port == port) {
                return Some(i);
            }
        }
        self.infos.iter().position(|p| p.port == port)
    }
}

impl OutputSink for PortSink {
    #[inline]
    fn output(&mut self, port: u32, frame: &[u8], meta: OutputMeta) {
        match self.index_of(port) {
            Some(i) if self.no_fwd[i] => self.no_fwd_drops[i] += 1,
            Some(i) => {
                if let Some(t) = self.tunnels[i] {
                    self.output_tunnel(i, t, frame, meta);
                } else if let Some(p) = self.ports_tx.get_mut(i) {
                    p.send(frame);
                    self.pending[i] = true;
                }
            }
            None => self.drop_unknown_port += 1,
        }
    }

    fn controller(
        &mut self,
        frame: &[u8],
        max_len: u16,
        origin: PacketInOrigin,
        _meta: OutputMeta,
    ) {
        // §7.2.1: a port configured no_packet_in sends no packet-in for
        // its table misses (dropped here, before the copy).
        if origin.table_miss {
            let in_port = self.in_port;
            if let Some(i) = self.index_of(in_port) {
                if self.no_packet_in[i] {
                    return;
                }
            }
        }
        let reason = if origin.table_miss {
            OFPR_NO_MATCH
        } else {
            OFPR_ACTION
        };
        if !self.packet_in_wanted(reason) {
            return;
        }
        self.queue_packet_in(PacketInFrame {
            in_port: self.in_port,
            data: frame.to_vec(),
            max_len,
            origin,
            invalid_ttl: false,
        });
    }

    fn ttl_expired(&mut self, frame: &[u8], in_port: u32, origin: PacketInOrigin) {
        if !self.packet_in_wanted(OFPR_INVALID_TTL) {
            return;
        }
        // Whole: no output action gave a length; each connection cuts it
        // to its miss_send_len (`Connection::send_async`).
        self.queue_packet_in(PacketInFrame {
            in_port,
            data: frame.to_vec(),
            max_len: offlow_pipeline::CONTROLLER_NO_BUFFER,
            origin,
            invalid_ttl: true,
        });
    }

    fn port_count(&self) -> usize {
        self.infos.len()
    }

    fn port_info(&self, index: usize) -> Option<PortInfo> {
        self.infos.get(index).copied()
    }

    fn steer(&mut self, mask: u64, hash: u64, packet: SteeredFrame<'_>) -> bool {
        if self.no_steer {
            return false;
        }
        let Some(to) = self.steer_target(mask, hash).filter(|&t| t != self.me) else {
            return false;
        };
        let Some(batch) = self.staged.get_mut(to) else {
            return false;
        };
        if batch.len() >= INBOX_FRAMES {
            self.drop_steer_inbox_full += 1;
        } else {
            batch.push(packet);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use offlow_io::DiscardPort;

    const META: OutputMeta = OutputMeta {
        queue: None,
        final_view: true,
        tunnel_id: 0,
    };

    fn sink(me: usize, n_workers: usize) -> PortSink {
        PortSink::new(Vec::new(), Vec::new(), None).with_steering(me, n_workers)
    }

    fn info(port: u32) -> PortInfo {
        PortInfo {
            port,
            no_fwd: false,
            no_flood: false,
        }
    }

    #[test]
    fn outputs_reach_their_port_at_flush_only() {
        let ports: Vec<Box<dyn Port>> = (0..2)
            .map(|i| Box::new(DiscardPort::new(&format!("p{i}"), 4, 64)) as Box<dyn Port>)
            .collect();
        let mut s = PortSink::new(vec![info(5), info(9)], ports, None);
        s.output(9, b"abc", META);
        s.output(9, b"de", META);
        s.output(7, b"x", META);
        assert_eq!(s.pending, vec![false, true]);
        assert_eq!(s.ports_mut()[1].stats().tx_packets, 0);
        s.flush().unwrap();
        assert_eq!(s.pending, vec![false, false]);
        let st = s.ports_mut()[1].stats();
        assert_eq!((st.tx_packets, st.tx_bytes), (2, 5));
        assert_eq!(s.ports_mut()[0].stats().tx_packets, 0);
        assert_eq!(s.drop_unknown_port(), 1);
        // No packet-in queue: nobody wants one, nothing is copied.
        OutputSink::controller(&mut s, b"pi", 64, PacketInOrigin::UNKNOWN, META);
        assert_eq!((s.drop_packet_in_unwanted, s.packet_ins), (1, 0));
    }

    #[test]
    fn outputs_to_a_tunnel_are_encapsulated_onto_its_underlay() {
        use offlow_io::MemPort;
        use offlow_wire::tunnel::{classify, Classified, Endpoint, KeyMode, Kind};
        let ours = Endpoint {
            key: KeyMode::Flow,
            ..Endpoint::new(
                Kind::Gre,
                [192, 168, 50, 1],
                [192, 168, 50, 2],
                [2, 0, 0, 0, 0, 1],
                [2, 0, 0, 0, 0, 2],
            )
        };
        let (underlay, peer) = MemPort::pair("u", 8);
        let ports: Vec<Box<dyn Port>> = vec![
            Box::new(underlay),
            Box::new(DiscardPort::new("gre0", 4, 64)),
        ];
        let mut s = PortSink::new(vec![info(1), info(10)], ports, None).with_tunnels(&[
            None,
            Some(TunnelTx {
                endpoint: ours,
                underlay: 0,
            }),
        ]);
        let inner: Vec<u8> = (0..60u8).collect();
        let meta = OutputMeta {
            tunnel_id: 0x4242,
            ..META
        };
        s.output(10, &inner, meta);
        assert_eq!(s.pending, vec![true, false], "queued on the underlay");
        s.flush().unwrap();
        let sent = peer.take();
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].len(), inner.len() + ours.overhead());
        assert_eq!(&sent[0][0..6], &[2, 0, 0, 0, 0, 2], "to the next hop");
        // The far end takes it back: the same inner bytes, the key.
        let far = Endpoint {
            local_ip: ours.remote_ip,
            remote_ip: ours.local_ip,
            ..ours
        };
        match classify(&sent[0], &[far]) {
            Classified::Tunnel(d) => {
                assert_eq!(&sent[0][d.inner], &inner[..]);
                assert_eq!(d.tunnel_id, 0x4242);
            }
            other => panic!("{other:?}"),
        }
        let st = s.tunnel_stats(1);
        assert_eq!((st.tx_packets, st.tx_bytes, st.tx_dropped), (1, 60, 0));
        // Too long to encapsulate into the scratch buffer: dropped, counted.
        s.output(10, &vec![0u8; TUNNEL_SCRATCH], meta);
        assert_eq!(s.tunnel_stats(1).tx_dropped, 1);
    }

    #[test]
    fn steering_is_off_unless_asked_for() {
        let mut s = PortSink::new(Vec::new(), Vec::new(), None);
        assert!(!s.steer(u64::MAX, 1 << 32, plain(b"x", 1)));
        assert!(s.staged.iter().all(|b| b.len() == 0));
    }

    #[test]
    fn steer_target_picks_running_set_bits_by_hash() {
        let s = sink(0, 4);
        // Bits past the worker count are ignored; none left: no target.
        assert_eq!(s.steer_target(0b1_0000, 7), None);
        assert_eq!(s.steer_target(0, 7), None);
        for high in 0..64u64 {
            let hash = high << 32 | 0x5a5a;
            let t = s.steer_target(0b1_1010, hash).unwrap();
            assert!(t == 1 || t == 3, "{t}");
            // Reference: the (high half mod 2)-th of [1, 3].
            assert_eq!(t, [1, 3][(high % 2) as usize]);
            assert_eq!(s.steer_target(0b1_1010, hash), Some(t), "stable");
            // The low half (which picks cache buckets) plays no part.
            assert_eq!(s.steer_target(0b1_1010, high << 32 | 0x0001), Some(t));
        }
        // Every running bit of a full mask is reachable.
        let mut seen = [false; 4];
        for high in 0..16 {
            seen[s.steer_target(u64::MAX, high << 32).unwrap()] = true;
        }
        assert_eq!(seen, [true; 4]);
        // 64 workers: the top bit is a worker too.
        assert_eq!(sink(0, 64).steer_target(1 << 63, 5 << 32), Some(63));
    }

    /// A frame as received on `in_port`, no tunnel metadata.
    fn plain(frame: &[u8], in_port: u32) -> SteeredFrame<'_> {
        SteeredFrame {
            frame,
            in_port,
            tunnel_id: None,
        }
    }

    #[test]
    fn steer_stages_copies_and_bounds() {
        let mut s = sink(0, 2);
        // One worker, or a mask naming only this one: nothing taken.
        assert!(!sink(0, 1).steer(0b10, 0, plain(b"x", 1)));
        assert!(!s.steer(0b01, 0, plain(b"x", 1)));
        assert!(s.steer(0b10, 9, plain(b"frame-a", 3)));
        // A decapsulated frame keeps its key across workers.
        let tunnelled = SteeredFrame {
            frame: b"frame-b",
            in_port: 4,
            tunnel_id: Some(0x7_0000_0001),
        };
        assert!(s.steer(0b10, 9, tunnelled));
        assert_eq!(s.staged[1].packet(0), Some(plain(b"frame-a", 3)));
        assert_eq!(s.staged[1].packet(1), Some(tunnelled));
        assert_eq!(s.staged[0].len(), 0);
        // Frames from an inbox are never steered again.
        s.no_steer = true;
        assert!(!s.steer(0b10, 9, plain(b"frame-c", 3)));
        s.no_steer = false;
        for _ in 2..INBOX_FRAMES {
            assert!(s.steer(0b10, 9, plain(b"f", 3)));
        }
        assert!(
            s.steer(0b10, 9, plain(b"f", 3)),
            "taken, and counted as dropped"
        );
        assert_eq!(
            (s.staged[1].len(), s.drop_steer_inbox_full),
            (INBOX_FRAMES, 1)
        );
    }
}
