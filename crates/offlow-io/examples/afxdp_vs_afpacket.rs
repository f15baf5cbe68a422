//! Receive rate through AF_XDP (native and generic XDP) versus AF_PACKET
//! (TPACKET_V2 frames and TPACKET_V3 blocks rings) on a veth pair, with one
//! AF_PACKET sender thread pushing 60-byte frames with `sendmmsg` (64 per
//! call) into the peer. Also each thread's CPU time per frame
//! (`CLOCK_THREAD_CPUTIME_ID`), which a busy machine disturbs less than
//! the rates: the sender's includes the kernel's delivery to the receiving
//! socket (see below), the receiver's is its `recv` loop.
//!
//! Needs root. Creates a namespace `oflbench-PID` and deletes it on exit.
//!
//! ```text
//! cargo run -p offlow-io --release --example afxdp_vs_afpacket [seconds]
//! ```
//!
//! On veth the sender's CPU does the peer's receive work too (veth
//! transmit runs the receiving end's XDP program / stack in the sender's
//! softirq), so the figure is "frames the kernel delivered to the
//! receiving socket per second", bounded by the sender.

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use offlow_io::netns::in_netns;
use offlow_io::{
    AfPacketConfig, AfPacketPort, AfXdpConfig, AfXdpPort, Port, PortStats, RxRing, XdpAttach,
};

/// This thread's CPU time so far.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes one timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}
use offlow_testkit::{FrameBuilder, MAC_SRC};

struct Netns(String);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn ip(args: &[&str]) -> Result<(), String> {
    let st = Command::new("ip")
        .args(args)
        .status()
        .map_err(|e| format!("ip: {e}"))?;
    if st.success() {
        Ok(())
    } else {
        Err(format!("ip {} failed", args.join(" ")))
    }
}

/// Frame `i`: broadcast, experimental EtherType 0x88b5, the index, padded
/// with 0x5a to 60 bytes.
fn frame(i: u8) -> Vec<u8> {
    FrameBuilder::eth([0xff; 6], MAC_SRC)
        .ethertype(0x88b5)
        .payload(&[i])
        .pad_to_with(60, 0x5a)
        .build()
}

/// Run the sender for the life of the measurement; returns the receiver's
/// (frames, elapsed) over the window and the sender's stats.
fn measure(ns: &str, secs: f64, rx: &mut dyn Port) -> Result<Measured, String> {
    let stop = Arc::new(AtomicBool::new(false));
    let ns_name = ns.to_string();
    let stop2 = stop.clone();
    let sender = std::thread::spawn(move || -> Result<(PortStats, Duration, Duration), String> {
        let mut tx = in_netns(Some(&ns_name), || {
            AfPacketPort::open(&AfPacketConfig::new("vb"))
        })
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
        let frames: Vec<Vec<u8>> = (0..64).map(frame).collect();
        let t0 = Instant::now();
        let c0 = thread_cpu();
        while !stop2.load(Ordering::Relaxed) {
            for f in &frames {
                tx.send(f);
            }
            tx.flush().map_err(|e| e.to_string())?;
        }
        Ok((tx.stats(), t0.elapsed(), thread_cpu() - c0))
    });
    // Warm up, then count over the window.
    let warm = Instant::now() + Duration::from_millis(300);
    while Instant::now() < warm {
        rx.recv(256, &mut |_, _| {}).map_err(|e| e.to_string())?;
    }
    let before = rx.stats();
    let start = Instant::now();
    let c0 = thread_cpu();
    let window = Duration::from_secs_f64(secs);
    let mut n = 0u64;
    while start.elapsed() < window {
        n += rx.recv(256, &mut |_, _| {}).map_err(|e| e.to_string())? as u64;
    }
    let elapsed = start.elapsed();
    let rx_cpu = thread_cpu() - c0;
    stop.store(true, Ordering::Relaxed);
    let tx = sender.join().map_err(|_| "sender panicked".to_string())??;
    let mut after = rx.stats();
    after.rx_dropped -= before.rx_dropped;
    Ok(Measured {
        n,
        elapsed,
        rx_cpu,
        rx: after,
        tx: tx.0,
        tx_elapsed: tx.1,
        tx_cpu: tx.2,
    })
}

/// One row's figures.
struct Measured {
    /// Frames received over the window, its length, the receiving
    /// thread's CPU time in it, and the port's counters.
    n: u64,
    elapsed: Duration,
    rx_cpu: Duration,
    rx: PortStats,
    /// The sender's counters, run time and CPU time (whole run).
    tx: PortStats,
    tx_elapsed: Duration,
    tx_cpu: Duration,
}

fn main() -> Result<(), String> {
    let secs: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    let ns = Netns(format!("oflbench-{}", std::process::id()));
    ip(&["netns", "add", &ns.0])?;
    ip(&[
        "-n", &ns.0, "link", "add", "va", "type", "veth", "peer", "name", "vb",
    ])?;
    ip(&["-n", &ns.0, "link", "set", "va", "up"])?;
    ip(&["-n", &ns.0, "link", "set", "vb", "up"])?;
    println!(
        "receiver                rx frames/s   rx drops (kernel)   sender tx frames/s   \
         sender ns/frame   receiver ns/frame"
    );
    for (label, attach, ring) in [
        (
            "AF_XDP native (copy)",
            Some(XdpAttach::Native),
            RxRing::Frames,
        ),
        (
            "AF_XDP generic (copy)",
            Some(XdpAttach::Generic),
            RxRing::Frames,
        ),
        ("AF_PACKET V2 frames", None, RxRing::Frames),
        // The frames ring with the blocks ring's 4 MiB (2048 slots): the
        // geometry first tried, kept to show why the default has more.
        ("AF_PACKET V2 2048 slots", None, RxRing::Frames),
        ("AF_PACKET V3 blocks", None, RxRing::Blocks),
        ("AF_PACKET adaptive", None, RxRing::Adaptive),
    ] {
        let mut port: Box<dyn Port> = match attach {
            Some(a) => {
                let mut cfg = AfXdpConfig::new("va");
                cfg.attach = a;
                // 8192 RX frames: closer to the AF_PACKET ring's ~37k
                // small-frame slots, so a receiver descheduled for a few
                // milliseconds on a busy machine does not drop.
                cfg.frame_count = 16384;
                cfg.rx_ring_size = 8192;
                Box::new(
                    in_netns(Some(&ns.0), || AfXdpPort::open(&cfg))
                        .map_err(|e| e.to_string())?
                        .map_err(|e| e.to_string())?,
                )
            }
            None => Box::new(
                in_netns(Some(&ns.0), || {
                    let mut cfg = AfPacketConfig::new("va").with_ring(ring);
                    if label.contains("2048") {
                        cfg.block_count = 16;
                    }
                    AfPacketPort::open(&cfg)
                })
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())?,
            ),
        };
        let m = measure(&ns.0, secs, port.as_mut())?;
        let rate = m.n as f64 / m.elapsed.as_secs_f64();
        println!(
            "{label:<23} {:>12.0}   {:>17}   {:>18.0}   {:>15.0}   {:>17.0}",
            rate,
            m.rx.rx_dropped,
            m.tx.tx_packets as f64 / m.tx_elapsed.as_secs_f64(),
            m.tx_cpu.as_nanos() as f64 / m.tx.tx_packets.max(1) as f64,
            m.rx_cpu.as_nanos() as f64 / m.n.max(1) as f64,
        );
    }
    Ok(())
}
