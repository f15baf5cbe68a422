//! The AF_XDP floor: a bare reflector that sends every frame back out of
//! the port it came in on, with no parsing, no lookup and no sleep.
//!
//! Why it exists: on veth an AF_XDP socket runs in copy mode (no
//! zero-copy driver), so whatever switch sits behind it, a probe costs the
//! kernel the same work: the redirect program and a copy into the UMEM on
//! the way in, and on the way out a `sendto` kick that builds an `sk_buff`
//! and hands it to the veth. This reflector pays only that, polling its two
//! sockets in a loop that never sleeps (like Open vSwitch's PMD threads and
//! offlow's `--busy-poll`), so its processing delay is the lowest any
//! AF_XDP userspace switch can reach on this machine: the bound the
//! `offlow af_xdp busy-poll` and `ovs 3.1 netdev afxdp` rows are read
//! against.
//!
//! Invariants: every frame received is sent back on the same port (or
//! counted dropped by the port when its transmit ring is full); the
//! thread stops and its sockets close (detaching their XDP programs) when
//! the [`Reflector`] is dropped.
//!
//! Thread-safety: one thread owns both sockets; the owner meets it only
//! through the stop flag.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use anyhow::Context;
use offlow_io::netns::in_netns;
use offlow_io::{AfXdpConfig, AfXdpPort, Port};

/// Frames taken per port per round (the switch's batch).
const BATCH: usize = 32;

/// A running reflector on `p1` and `p2` of a namespace.
pub struct Reflector {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Reflector {
    /// Open AF_XDP sockets on `ports` in namespace `ns` and reflect.
    pub fn start(ns: &str, ports: &[&str]) -> anyhow::Result<Reflector> {
        let mut open = Vec::new();
        for p in ports {
            let port = in_netns(Some(ns), || AfXdpPort::open(&AfXdpConfig::new(p)))
                .and_then(|r| r)
                .with_context(|| format!("AF_XDP socket on {p} in {ns}"))?;
            open.push(port);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("lat-reflector".into())
            .spawn(move || reflect(open, &flag))
            .context("starting the reflector thread")?;
        Ok(Reflector {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Reflector {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The loop: per port, take a batch, copy it out (a received frame is
/// lent in place and must go back to the fill ring before the port can
/// send), send it back, flush.
fn reflect(mut ports: Vec<AfXdpPort>, stop: &AtomicBool) {
    let mut arena: Vec<u8> = Vec::with_capacity(BATCH * 2048);
    let mut ends: Vec<usize> = Vec::with_capacity(BATCH);
    while !stop.load(Ordering::Relaxed) {
        for p in &mut ports {
            arena.clear();
            ends.clear();
            let n = p
                .recv(BATCH, &mut |f, _| {
                    arena.extend_from_slice(f);
                    ends.push(arena.len());
                })
                .unwrap_or(0);
            if n > 0 {
                let mut start = 0;
                for &end in &ends {
                    p.send(&arena[start..end]);
                    start = end;
                }
            }
            if n > 0 || p.tx_outstanding() {
                let _ = p.flush();
            }
        }
    }
}
