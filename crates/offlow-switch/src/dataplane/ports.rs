//! The ports as the workers open them: [`DataPort`] (what a port is),
//! `Generations` (re-open and configuration requests from the control
//! side, per port), the placeholder of a port that is not open, the
//! AF_XDP redirect program the workers of one port share, and
//! `open_port`.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::Context;
use offlow_io::afxdp::{active_queue_count, queue_count, AfXdpConfig, AfXdpQueues, XdpProgram};
use offlow_io::pcap::PcapPort;
use offlow_io::{netns::in_netns, AfPacketConfig, AfPacketPort, Port, PortStats, RxMeta};

use crate::config::PortKind;
use tracing::info;

/// One configured data port as the workers see it.
#[derive(Debug, Clone)]
pub struct DataPort {
    /// Linux interface (or the capture port's name).
    pub ifname: String,
    /// OpenFlow port number.
    pub number: u32,
    /// What carries its frames.
    pub kind: PortKind,
    /// Its interface did not exist at start: the workers hold a
    /// placeholder until [`super::Dataplane::reopen`].
    pub missing: bool,
}

/// Re-open requests from the control side to the workers.
///
/// Written only by the control side (bump a port, then the epoch, both
/// Release); workers load the epoch every round and, when it moved, every
/// port's generation (Acquire): a worker that sees an epoch sees the port
/// bumps made before it.
#[derive(Debug)]
pub(super) struct Generations {
    /// Number of bumps of any port.
    pub(super) epoch: AtomicU64,
    /// Per port (configuration order): bumps of that port.
    pub(super) ports: Box<[AtomicU64]>,
    /// Per port: the last generation some worker failed to re-open (0:
    /// none; generations start at 1). Written by workers, read by the
    /// control side to ask again ([`Dataplane::retry_failed_reopen`]).
    pub(super) failed: Box<[AtomicU64]>,
    /// Per port: the workers (bit `1 << index`, the first 64) whose last
    /// open of it failed. A retry ([`Generations::retry`]) re-opens only
    /// theirs; the others keep their working sockets.
    pub(super) failed_workers: Box<[AtomicU64]>,
    /// Per port: retries asked for (each moves the epoch too).
    pub(super) retries: Box<[AtomicU64]>,
    /// Per port: its OpenFlow configuration bits (`OFPPC_*`, from
    /// PORT_MOD); a change also moves the epoch.
    pub(super) config: Box<[AtomicU32]>,
    /// Per AF_XDP port: the redirect program every worker's sockets share,
    /// with the generation it was attached for. The first worker to
    /// re-open the port at a new generation attaches a new one; the others
    /// take it. Locked only when opening a port.
    pub(super) xdp: Box<[Mutex<Option<SharedProgram>>]>,
}

impl Generations {
    pub(super) fn new(n_ports: usize) -> Generations {
        Generations {
            epoch: AtomicU64::new(0),
            ports: (0..n_ports).map(|_| AtomicU64::new(0)).collect(),
            failed: (0..n_ports).map(|_| AtomicU64::new(0)).collect(),
            failed_workers: (0..n_ports).map(|_| AtomicU64::new(0)).collect(),
            retries: (0..n_ports).map(|_| AtomicU64::new(0)).collect(),
            config: (0..n_ports).map(|_| AtomicU32::new(0)).collect(),
            xdp: (0..n_ports).map(|_| Mutex::new(None)).collect(),
        }
    }

    /// Set port `index`'s `OFPPC_*` bits; false if there is no such port.
    pub(super) fn set_config(&self, index: usize, bits: u32) -> bool {
        let Some(c) = self.config.get(index) else {
            return false;
        };
        c.store(bits, Ordering::Release);
        self.epoch.fetch_add(1, Ordering::Release);
        true
    }

    /// Some worker failed to re-open port `index` at its latest
    /// generation (a newer bump is not known to have failed yet) and has
    /// not opened it since.
    pub(super) fn latest_failed(&self, index: usize) -> bool {
        match (
            self.ports.get(index),
            self.failed.get(index),
            self.failed_workers.get(index),
        ) {
            (Some(g), Some(f), Some(w)) => {
                let failed = f.load(Ordering::Acquire);
                failed != 0 && failed == g.load(Ordering::Acquire) && w.load(Ordering::Acquire) != 0
            }
            _ => false,
        }
    }

    /// Ask the workers whose last open of port `index` failed to try
    /// again, at the same generation; false if there is no such port.
    pub(super) fn retry(&self, index: usize) -> bool {
        let Some(r) = self.retries.get(index) else {
            return false;
        };
        r.fetch_add(1, Ordering::Release);
        self.epoch.fetch_add(1, Ordering::Release);
        true
    }

    /// Ask every worker to re-open port `index`; false if there is none.
    pub(super) fn bump(&self, index: usize) -> bool {
        let Some(g) = self.ports.get(index) else {
            return false;
        };
        g.fetch_add(1, Ordering::Release);
        self.epoch.fetch_add(1, Ordering::Release);
        true
    }
}

/// The fanout group of port `index` (of `n_ports`) at `generation`, for
/// the process's `base`: generation 0 uses `base + index`; each later
/// generation moves past every port's id of the previous one, so a
/// re-opened socket never meets the group its predecessors (bound to the
/// old device) may still hold. Distinct for 65536 / `n_ports`
/// consecutive generations; u16 arithmetic wraps on purpose.
pub(super) fn fanout_id(base: u16, n_ports: usize, index: usize, generation: u64) -> u16 {
    let stride = (n_ports.max(1) as u16).wrapping_mul(generation as u16);
    base.wrapping_add(index as u16).wrapping_add(stride)
}

/// Stands in for a port whose interface is missing (at start, or after a
/// re-open failed): receives nothing, drops and counts what is sent.
pub(super) struct AbsentPort {
    pub(super) name: String,
    pub(super) stats: PortStats,
}

impl AbsentPort {
    pub(super) fn new(name: &str) -> AbsentPort {
        AbsentPort {
            name: name.to_string(),
            stats: PortStats::default(),
        }
    }
}

impl Port for AbsentPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn recv(
        &mut self,
        _max: usize,
        _on_frame: &mut dyn FnMut(&[u8], RxMeta),
    ) -> std::io::Result<usize> {
        Ok(0)
    }

    fn send(&mut self, _frame: &[u8]) -> bool {
        self.stats.tx_dropped += 1;
        false
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }

    fn poll_fd(&self) -> Option<RawFd> {
        None
    }

    fn stats(&mut self) -> PortStats {
        self.stats
    }
}

/// An AF_XDP port's program and the generation it was attached for.
pub(super) type SharedProgram = (u64, Arc<XdpShare>);

/// An AF_XDP port is one socket per receive queue of its interface, all
/// registered in one redirect program attached to the interface (a frame
/// can only reach the socket bound to its queue: a queue without one would
/// hand its frames to the kernel stack). The workers share the queues:
/// worker *i* of *n* takes queues *i*, *i + n*, ... ([`AfXdpQueues::share`]),
/// so the interface's spreading of flows over its queues spreads them over
/// the workers.
#[derive(Debug)]
pub(super) struct XdpShare {
    /// The interface's receive queues (when the program was attached).
    pub(super) queues: u32,
    pub(super) program: Arc<XdpProgram>,
}

/// Another program's socket map for an AF_XDP port: the offload tier's
/// XDP program serves the port and sends its misses to the sockets
/// registered here.
#[derive(Debug)]
pub struct ExternalXsk {
    /// A copy of the program's `XSKMAP` descriptor.
    pub map: std::os::fd::OwnedFd,
    /// The map key of the port's queue 0.
    pub key_base: u32,
    /// The interface index the program serves.
    pub ifindex: u32,
    /// Whether it runs in native mode.
    pub native: bool,
}

/// The share of an AF_XDP port served by the offload tier's program
/// (`ext`): nothing is attached; the workers register their sockets in the
/// tier's map. The interface's queue count is checked as for our own.
pub(super) fn external_share(
    p: &DataPort,
    netns: Option<&str>,
    n_workers: usize,
    ext: &ExternalXsk,
) -> anyhow::Result<XdpShare> {
    let queues = in_netns(netns, || active_queue_count(&p.ifname).unwrap_or(1))
        .context("entering the ports' network namespace")?;
    if (queues as usize) < n_workers {
        anyhow::bail!(
            "AF_XDP port {} ({}) has {queues} receive queue(s); {n_workers} workers need one each",
            p.number,
            p.ifname
        );
    }
    let map = ext
        .map
        .try_clone()
        .context("copying the offload tier's socket map descriptor")?;
    let mode = if ext.native {
        offlow_io::afxdp::XdpMode::Native
    } else {
        offlow_io::afxdp::XdpMode::Generic
    };
    Ok(XdpShare {
        queues,
        program: Arc::new(XdpProgram::external(
            ext.ifindex,
            queues,
            map,
            ext.key_base,
            mode,
        )),
    })
}

/// The redirect program of AF_XDP port `p`, attached to its interface in
/// the ports' namespace, and the interface's queue count. An interface
/// with fewer receive queues than `n_workers` is an error that says how to
/// give it more (a worker without a queue could not receive on the port).
pub(super) fn xdp_program(
    p: &DataPort,
    netns: Option<&str>,
    n_workers: usize,
) -> anyhow::Result<XdpShare> {
    let attach = AfXdpConfig::new(&p.ifname).attach;
    let (queues, program) = in_netns(netns, || {
        // Sockets for the queues the interface has now; the program's map
        // covers the most it could have.
        let queues = active_queue_count(&p.ifname).unwrap_or(1);
        let map_slots = queue_count(&p.ifname).unwrap_or(1).max(queues);
        if (queues as usize) < n_workers {
            return Err(anyhow::anyhow!(
                "AF_XDP port {} ({}) has {queues} receive queue(s); {n_workers} workers need                  one each (`ethtool -L {} combined {n_workers}`, or a veth created with                  `numrxqueues {n_workers} numtxqueues {n_workers}`), or use --workers 1",
                p.number,
                p.ifname,
                p.ifname
            ));
        }
        let program = XdpProgram::redirect_to_sockets(&p.ifname, map_slots, attach)
            .with_context(|| format!("attaching the AF_XDP program to {}", p.ifname))?;
        Ok((queues, program))
    })
    .context("entering the ports' network namespace")??;
    Ok(XdpShare {
        queues,
        program: Arc::new(program),
    })
}

/// Open the socket (or capture files) of one data port for worker
/// `worker` of `n_workers`, inside the ports' namespace; `fanout`: the
/// AF_PACKET fanout group to join (several workers); `xdp`: the program
/// and queue count of an AF_XDP port (required for one); `receive`: an
/// AF_PACKET port's receive ring; `only_mark`: the mark its socket takes
/// frames with (see `DataplaneConfig::af_packet_mark`).
pub(super) fn open_port(
    p: &DataPort,
    netns: Option<&str>,
    fanout: Option<u16>,
    xdp: Option<(&XdpShare, usize, usize)>,
    receive: &crate::config::Receive,
    only_mark: Option<u32>,
) -> anyhow::Result<Box<dyn Port>> {
    Ok(match &p.kind {
        PortKind::AfPacket => {
            let mut pc = AfPacketConfig::new(&p.ifname).with_ring(receive.af_packet_ring);
            pc.fanout_group = fanout;
            pc.only_mark = only_mark;
            let port = in_netns(netns, || AfPacketPort::open(&pc))
                .context("entering the ports' network namespace")?
                .with_context(|| format!("opening port {} ({})", p.number, p.ifname))?;
            Box::new(port)
        }
        PortKind::AfXdp => {
            let (share, worker, n_workers) =
                xdp.context("an AF_XDP port opened without its program")?;
            let queues = AfXdpQueues::share(share.queues, worker, n_workers);
            let xc = AfXdpConfig::new(&p.ifname);
            let port = in_netns(netns, || AfXdpQueues::open(&xc, &share.program, &queues))
                .context("entering the ports' network namespace")?
                .with_context(|| format!("opening AF_XDP port {} ({})", p.number, p.ifname))?;
            info!(port = p.number, ifname = %p.ifname, worker, queues = ?queues,
                xdp_mode = ?share.program.mode(),
                zerocopy = port.sockets().iter().all(|s| s.zerocopy()),
                "AF_XDP port open");
            Box::new(port)
        }
        // Its frames arrive on its underlay and are decapsulated there;
        // outputs to it are encapsulated by the sink and sent on the
        // underlay: the slot itself only stands for the port.
        PortKind::Tunnel(_) => Box::new(AbsentPort::new(&p.ifname)),
        // The configuration allows capture ports with one worker only:
        // this is it.
        PortKind::Pcap { input, output } => Box::new(
            PcapPort::open(&p.ifname, input.as_deref(), output.as_deref())
                .with_context(|| format!("opening capture port {}", p.number))?,
        ),
    })
}
