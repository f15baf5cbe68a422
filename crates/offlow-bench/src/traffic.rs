//! Test traffic for the end-to-end experiments: UDP frames sent from host
//! A's `eth0` with an AF_PACKET generator and counted on host B's `eth0` by
//! an AF_PACKET receiver (see [`crate::topo::Topo`]).
//!
//! Frames: `flows` UDP flows 10.0.0.1:(10000+i) → 10.0.0.2:9 (valid IPv4 and
//! UDP checksums), built once ([`workload::build_frame`]) and sent round
//! robin. The frame size counts the 4-byte FCS, as RFC 2544 does: 64 is a
//! 60-byte frame handed to the kernel. The destination MAC
//! (02:00:00:00:00:02) is deliberately nobody's: a switch forwards it to
//! the other port and the receiving host's IPv4 stack discards it at its
//! first check (`PACKET_OTHERHOST`), so B's kernel does no routing work per
//! frame; the receiver's packet socket is a tap and sees the frame before
//! that check.
//!
//! The generator (one thread) sends batches with `sendmmsg` on an
//! [`AfPacketPort`] with the qdisc bypassed, either as fast as it can
//! (busy) or paced to a frame rate (sleeping between batches); the
//! receiver (one thread, sleeping in `poll` between TPACKET_V3 blocks)
//! counts the frames that are UDP to port 9, and the frames the kernel
//! dropped because its ring was full.
//!
//! Thread-safety: the two threads share only atomics ([`Counters`]) with
//! the thread that started them; [`Traffic`] stops and joins them when
//! dropped.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use offlow_io::netns::in_netns;
use offlow_io::{AfPacketConfig, AfPacketPort, Port};

use crate::classbench::Header;
use crate::topo::{interrupted, wait_link_up, Topo};
use crate::workload::{self, FCS_LEN};

/// UDP destination port of the experiment's frames (discard).
pub const DST_PORT: u16 = 9;
/// First UDP source port; flow `i` uses `FIRST_SRC_PORT + i`.
pub const FIRST_SRC_PORT: u16 = 10_000;
/// Source and destination IPv4 addresses of the frames.
pub const SRC_IP: u32 = 0x0a00_0001;
/// See [`SRC_IP`].
pub const DST_IP: u32 = 0x0a00_0002;
/// How long a row waits for its first frame before counting anyway.
pub const FIRST_FRAME_WAIT: Duration = Duration::from_secs(5);
/// Frames per `sendmmsg` of the generator.
const TX_BATCH: usize = 64;
/// Frames the receiver takes per `recv` call.
const RX_BATCH: usize = 1024;
/// The generator publishes its counter every this many batches (reading it
/// costs a system call).
const TX_PUBLISH_EVERY: u32 = 8;
/// A paced generator that fell behind by more than this (descheduled) drops
/// the backlog instead of sending it as one burst.
const PACED_MAX_BACKLOG: Duration = Duration::from_millis(20);

// ----------------------------------------------------------------- frames --

/// The experiment's frames: `flows` UDP flows, `frame_size` bytes with FCS.
pub fn build_frames(flows: usize, frame_size: usize) -> Vec<Vec<u8>> {
    (0..flows)
        .map(|i| {
            let h = Header {
                src: SRC_IP,
                dst: DST_IP,
                // Flow counts are capped (see the experiments' argument
                // checks) below 55,536, so the port stays in range.
                src_port: FIRST_SRC_PORT.wrapping_add(i as u16),
                dst_port: DST_PORT,
                proto: 17,
            };
            let mut f = Vec::new();
            workload::build_frame(&h, frame_size - FCS_LEN, &mut f);
            f
        })
        .collect()
}

/// Whether a received frame is one of the experiment's: untagged IPv4, UDP,
/// no IP options, destination port [`DST_PORT`].
pub fn is_experiment_frame(f: &[u8]) -> bool {
    f.len() >= 42
        && f[12..14] == [0x08, 0x00]
        && f[14] == 0x45
        && f[23] == 17
        && f[36..38] == DST_PORT.to_be_bytes()
}

// ---------------------------------------------------------------- threads --

/// Counters the traffic threads publish.
#[derive(Default)]
pub struct Counters {
    stop: AtomicBool,
    sent: AtomicU64,
    received: AtomicU64,
    ring_drops: AtomicU64,
}

/// The counters at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub struct Snapshot {
    /// Frames the kernel accepted from the generator.
    pub sent: u64,
    /// Experiment frames the receiver counted.
    pub received: u64,
    /// Frames the kernel dropped because the receiver's ring was full.
    pub ring_drops: u64,
}

impl Snapshot {
    /// `self - earlier`, counter by counter.
    pub fn since(&self, earlier: &Snapshot) -> Snapshot {
        Snapshot {
            sent: self.sent.saturating_sub(earlier.sent),
            received: self.received.saturating_sub(earlier.received),
            ring_drops: self.ring_drops.saturating_sub(earlier.ring_drops),
        }
    }
}

impl Counters {
    fn snapshot(&self) -> Snapshot {
        Snapshot {
            sent: self.sent.load(Ordering::Relaxed),
            received: self.received.load(Ordering::Relaxed),
            ring_drops: self.ring_drops.load(Ordering::Relaxed),
        }
    }
}

/// Send `frames` round robin until stopped: as fast as possible when
/// `pps` is `None`, else paced to `pps` frames per second.
fn generator(
    mut port: AfPacketPort,
    frames: Arc<Vec<Vec<u8>>>,
    c: Arc<Counters>,
    pps: Option<u64>,
) {
    let mut i = 0usize;
    let mut batches = 0u32;
    let start = Instant::now();
    // Frames handed to the kernel so far (paced mode's schedule).
    let mut queued = 0u64;
    while !c.stop.load(Ordering::Relaxed) {
        let n = match pps {
            None => TX_BATCH,
            Some(pps) => {
                let due = (start.elapsed().as_secs_f64() * pps as f64) as u64;
                let max_backlog = (PACED_MAX_BACKLOG.as_secs_f64() * pps as f64) as u64;
                if due > queued + max_backlog {
                    queued = due - max_backlog;
                }
                let n = due.saturating_sub(queued).min(TX_BATCH as u64) as usize;
                if n == 0 {
                    // Sleep until about a batch is due (bounded so the stop
                    // flag is seen and low rates stay smooth).
                    let wait = Duration::from_secs_f64(TX_BATCH as f64 / pps as f64)
                        .clamp(Duration::from_micros(50), Duration::from_millis(1));
                    std::thread::sleep(wait);
                    continue;
                }
                queued += n as u64;
                n
            }
        };
        for _ in 0..n {
            port.send(&frames[i]);
            i += 1;
            if i == frames.len() {
                i = 0;
            }
        }
        // A failing port is the kernel refusing frames: counted, go on.
        let _ = port.flush();
        batches += 1;
        if batches % TX_PUBLISH_EVERY == 0 {
            c.sent.store(port.stats().tx_packets, Ordering::Relaxed);
        }
    }
    c.sent.store(port.stats().tx_packets, Ordering::Relaxed);
}

fn receiver(mut port: AfPacketPort, c: Arc<Counters>) {
    let mut count = 0u64;
    let mut rounds = 0u32;
    while !c.stop.load(Ordering::Relaxed) {
        let n = port
            .recv(RX_BATCH, &mut |f, _| {
                if is_experiment_frame(f) {
                    count += 1;
                }
            })
            .unwrap_or(0);
        c.received.store(count, Ordering::Relaxed);
        rounds = rounds.wrapping_add(1);
        if n == 0 {
            // Sleep until the kernel hands over a block (or 10 ms pass):
            // the receiver must not take CPU from the switch.
            if let Some(fd) = port.poll_fd() {
                let mut p = libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one live pollfd for the duration of the call.
                unsafe {
                    libc::poll(&mut p, 1, 10);
                }
            }
            c.ring_drops
                .store(port.stats().rx_dropped, Ordering::Relaxed);
        } else if rounds % 64 == 0 {
            c.ring_drops
                .store(port.stats().rx_dropped, Ordering::Relaxed);
        }
    }
    c.ring_drops
        .store(port.stats().rx_dropped, Ordering::Relaxed);
}

/// A running generator and receiver over a [`Topo`]; stopped and joined
/// when dropped (or by [`Traffic::stop`]).
pub struct Traffic {
    c: Arc<Counters>,
    gen: Option<JoinHandle<()>>,
    rx: Option<JoinHandle<()>>,
}

impl Traffic {
    /// Open the sockets on `t`'s generator and receiver interfaces and
    /// start both threads (named `{name}-gen`, `{name}-rx`). `frame_size`
    /// (with FCS) bounds the transmit slots; `pps`: see `generator`.
    pub fn start(
        t: &Topo,
        frames: &Arc<Vec<Vec<u8>>>,
        frame_size: usize,
        pps: Option<u64>,
        name: &str,
    ) -> anyhow::Result<Traffic> {
        wait_link_up(&t.gen.0, &t.gen.1);
        wait_link_up(&t.rx.0, &t.rx.1);
        let mut rx_cfg = AfPacketConfig::new(&t.rx.1);
        rx_cfg.block_count = 64;
        rx_cfg.block_timeout_ms = 2;
        let rx_port = in_netns(Some(&t.rx.0), || AfPacketPort::open(&rx_cfg))?
            .with_context(|| format!("receiver socket on {}/{}", t.rx.0, t.rx.1))?;
        let mut gen_cfg = AfPacketConfig::new(&t.gen.1);
        // The generator receives nothing it needs: a minimal ring.
        gen_cfg.block_size = 1 << 16;
        gen_cfg.block_count = 2;
        gen_cfg.promiscuous = false;
        gen_cfg.tx_batch = TX_BATCH;
        gen_cfg.tx_max_frame = frame_size;
        let gen_port = in_netns(Some(&t.gen.0), || AfPacketPort::open(&gen_cfg))?
            .with_context(|| format!("generator socket on {}/{}", t.gen.0, t.gen.1))?;

        let c = Arc::new(Counters::default());
        let mut traffic = Traffic {
            c: Arc::clone(&c),
            gen: None,
            rx: None,
        };
        traffic.rx = Some({
            let c = Arc::clone(&c);
            std::thread::Builder::new()
                .name(format!("{name}-rx"))
                .spawn(move || receiver(rx_port, c))?
        });
        // On failure here, `traffic`'s Drop stops and joins the receiver.
        traffic.gen = Some({
            let (c, f) = (Arc::clone(&c), Arc::clone(frames));
            std::thread::Builder::new()
                .name(format!("{name}-gen"))
                .spawn(move || generator(gen_port, f, c, pps))?
        });
        Ok(traffic)
    }

    /// The counters now.
    pub fn snapshot(&self) -> Snapshot {
        self.c.snapshot()
    }

    /// Wait until the receiver counted a frame, at most
    /// [`FIRST_FRAME_WAIT`] (or until interrupted); whether one came.
    pub fn wait_first_frame(&self) -> bool {
        let deadline = Instant::now() + FIRST_FRAME_WAIT;
        while self.c.received.load(Ordering::Relaxed) == 0 {
            if Instant::now() >= deadline || interrupted() {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        true
    }

    /// Stop both threads, join them and return the final counters.
    pub fn stop(mut self) -> anyhow::Result<Snapshot> {
        if !self.join() {
            bail!("a traffic thread panicked");
        }
        Ok(self.c.snapshot())
    }

    /// Stop and join; whether both threads ended without panicking.
    fn join(&mut self) -> bool {
        self.c.stop.store(true, Ordering::Relaxed);
        let g = self.gen.take().is_none_or(|h| h.join().is_ok());
        let r = self.rx.take().is_none_or(|h| h.join().is_ok());
        g & r
    }
}

impl Drop for Traffic {
    fn drop(&mut self) {
        self.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_distinct_valid_udp_flows() {
        let frames = build_frames(100, 64);
        assert_eq!(frames.len(), 100);
        let mut ports = std::collections::HashSet::new();
        for f in &frames {
            assert_eq!(f.len(), 60);
            assert!(is_experiment_frame(f));
            assert!(ports.insert(u16::from_be_bytes([f[34], f[35]])));
            // IPv4 header checksum verifies to zero when summed with itself.
            assert_eq!(offlow_wire::checksum::checksum(&f[14..34]), 0);
        }
        assert_eq!(build_frames(3, 128)[2].len(), 124);
    }

    #[test]
    fn counter_rejects_other_frames() {
        let f = build_frames(1, 64).remove(0);
        let mut other = f.clone();
        other[37] = 10; // another destination port
        assert!(!is_experiment_frame(&other));
        let mut tcp = f.clone();
        tcp[23] = 6;
        assert!(!is_experiment_frame(&tcp));
        let mut arp = f.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert!(!is_experiment_frame(&arp));
        assert!(!is_experiment_frame(&f[..41]));
    }
}
