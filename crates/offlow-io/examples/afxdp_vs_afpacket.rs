//! Receive rate through AF_XDP (native and generic XDP) versus AF_PACKET
//! (TPACKET_V3) on a veth pair, with one AF_PACKET sender thread pushing
//! 60-byte frames with `sendmmsg` (64 per call) into the peer.
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
use offlow_io::{AfPacketConfig, AfPacketPort, AfXdpConfig, AfXdpPort, Port, PortStats, XdpAttach};
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
fn measure(
    ns: &str,
    secs: f64,
    rx: &mut dyn Port,
) -> Result<(u64, Duration, PortStats, (PortStats, Duration)), String> {
    let stop = Arc::new(AtomicBool::new(false));
    let ns_name = ns.to_string();
    let stop2 = stop.clone();
    let sender = std::thread::spawn(move || -> Result<(PortStats, Duration), String> {
        let mut tx = in_netns(Some(&ns_name), || {
            AfPacketPort::open(&AfPacketConfig::new("vb"))
        })
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
        let frames: Vec<Vec<u8>> = (0..64).map(frame).collect();
        let t0 = Instant::now();
        while !stop2.load(Ordering::Relaxed) {
            for f in &frames {
                tx.send(f);
            }
            tx.flush().map_err(|e| e.to_string())?;
        }
        Ok((tx.stats(), t0.elapsed()))
    });
    // Warm up, then count over the window.
    let warm = Instant::now() + Duration::from_millis(300);
    while Instant::now() < warm {
        rx.recv(256, &mut |_, _| {}).map_err(|e| e.to_string())?;
    }
    let before = rx.stats();
    let start = Instant::now();
    let window = Duration::from_secs_f64(secs);
    let mut n = 0u64;
    while start.elapsed() < window {
        n += rx.recv(256, &mut |_, _| {}).map_err(|e| e.to_string())? as u64;
    }
    let elapsed = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    let tx = sender.join().map_err(|_| "sender panicked".to_string())??;
    let mut after = rx.stats();
    after.rx_dropped -= before.rx_dropped;
    Ok((n, elapsed, after, tx))
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
    println!("receiver              rx frames/s   rx drops (kernel)   sender tx frames/s");
    for (label, attach) in [
        ("AF_XDP native (copy)", Some(XdpAttach::Native)),
        ("AF_XDP generic (copy)", Some(XdpAttach::Generic)),
        ("AF_PACKET TPACKET_V3", None),
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
                    AfPacketPort::open(&AfPacketConfig::new("va"))
                })
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())?,
            ),
        };
        let (n, el, st, (tx, tx_el)) = measure(&ns.0, secs, port.as_mut())?;
        let rate = n as f64 / el.as_secs_f64();
        println!(
            "{label:<21} {:>12.0}   {:>17}   {:>18.0}",
            rate,
            st.rx_dropped,
            tx.tx_packets as f64 / tx_el.as_secs_f64(),
        );
    }
    Ok(())
}
