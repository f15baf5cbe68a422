//! `offlow run`: the switch daemon's control side.
//!
//! What: a single-threaded tokio runtime (`current_thread` + `LocalSet`)
//! serving OpenFlow 1.3 controllers over TCP, passive (`ptcp:`) and active
//! (`tcp:`, reconnected with exponential backoff from 100 ms doubling to
//! 8 s), all answering through one [`DatapathSwitch`] and one shared
//! [`Roles`]. Data ports are not wired yet: the switch has zero ports.
//!
//! Each connection is one task driving the sans-IO
//! [`offlow_openflow::Connection`]: flush its outbox, then wait for bytes,
//! its timer ([`Connection::poll_timeout`]) or the stop signal; received
//! bytes go to [`Connection::receive`] and the batch's flow-mods are
//! committed right after ([`DatapathSwitch::commit_pending`]), so changes
//! take effect without a barrier. Because the outbox is written out in full
//! before the next read, a controller that does not read its replies stops
//! being read from (the outbox never grows past one read's replies).
//! On close the outbox is flushed first (it usually holds the error that
//! explains the close), then the socket is shut and [`Roles::release`]
//! called. SIGINT / SIGTERM close every connection (flushing) and stop.
//!
//! Invariants: the switch and the roles live in one `RefCell`, borrowed
//! only between awaits, never across one; so each controller message is
//! handled to completion before any other connection's (the ordering the
//! connection module documents for barriers holds switch-wide).
//!
//! Thread-safety: everything runs on the runtime's one thread (`Rc`,
//! `RefCell`); data-path workers, when ports arrive, will run on their own
//! threads and meet the control side only through `Control`.

mod config;
mod switch;

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::Context;
use offlow_openflow::{ConnConfig, Connection, Roles};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tracing::{debug, info, warn};

pub use config::{Endpoint, RunArgs, RunConfig};
pub use switch::DatapathSwitch;

/// First reconnection delay of an active connection.
const BACKOFF_MIN: Duration = Duration::from_millis(100);
/// Largest reconnection delay.
const BACKOFF_MAX: Duration = Duration::from_secs(8);
/// How long shutdown waits for connections to flush.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);
/// Socket read size.
const READ_BUF: usize = 64 * 1024;
/// Extra non-blocking reads taken after a wakeup before replies are written.
const DRAIN_READS: usize = 64;
/// Stop draining once this many reply bytes are queued.
const DRAIN_MAX_OUTBOX: usize = 256 * 1024;

/// State every connection task shares.
struct Shared {
    switch: DatapathSwitch,
    roles: Roles,
    /// Origin of the connections' nanosecond clock.
    epoch: Instant,
    /// Connection tasks still running (for a graceful stop).
    live: usize,
}

impl Shared {
    fn now_ns(&self) -> u64 {
        // u64 nanoseconds last 584 years.
        self.epoch.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64
    }
}

type SharedRc = Rc<RefCell<Shared>>;

/// Run the daemon until SIGINT / SIGTERM.
pub fn main(args: &RunArgs) -> anyhow::Result<()> {
    init_logging();
    let cfg = args.resolve()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, run(cfg))
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // A subscriber already installed (tests) is fine.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

async fn run(cfg: RunConfig) -> anyhow::Result<()> {
    let shared: SharedRc = Rc::new(RefCell::new(Shared {
        switch: DatapathSwitch::new(cfg.dpid, cfg.tables),
        roles: Roles::new(),
        epoch: Instant::now(),
        live: 0,
    }));
    // Bind every listener before anything else so a bad address fails the
    // start, not some later moment.
    let mut listeners = Vec::new();
    for ep in &cfg.listen {
        if let Endpoint::Passive(addr) = ep {
            let l = TcpListener::bind(addr)
                .await
                .with_context(|| format!("listening on {ep}"))?;
            let local = l.local_addr().unwrap_or(*addr);
            info!(%local, "listening for OpenFlow controllers");
            listeners.push(l);
        }
    }
    info!(
        dpid = format_args!("{:#018x}", cfg.dpid),
        tables = cfg.tables,
        ports = 0,
        controllers = cfg.controllers.len(),
        "offlow switch running"
    );
    let (stop_tx, stop_rx) = watch::channel(false);
    for l in listeners {
        tokio::task::spawn_local(accept_loop(l, shared.clone(), stop_rx.clone()));
    }
    for ep in cfg.controllers {
        if let Endpoint::Active { host, port } = ep {
            tokio::task::spawn_local(active_loop(host, port, shared.clone(), stop_rx.clone()));
        }
    }
    let why = shutdown_signal()
        .await
        .context("installing signal handlers")?;
    info!(signal = why, "stopping");
    // Receivers may all be gone (no endpoints); nothing to tell then.
    let _ = stop_tx.send(true);
    let deadline = Instant::now() + SHUTDOWN_GRACE;
    while shared.borrow().live > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let s = shared.borrow();
    if s.live > 0 {
        warn!(connections = s.live, "connections still open at exit");
    }
    let po = s.switch.packet_out_stats();
    info!(
        flows = s.switch.pipeline().len(),
        packet_outs = po.packets,
        packet_outs_to_table = po.to_table,
        drop_unknown_port = po.drop_unknown_port,
        drop_to_controller = po.drop_to_controller,
        "stopped"
    );
    Ok(())
}

async fn shutdown_signal() -> std::io::Result<&'static str> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    })
}

/// Resolves once a stop is requested (or the sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|&s| s).await;
}

async fn accept_loop(l: TcpListener, shared: SharedRc, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            r = l.accept() => match r {
                Ok((stream, peer)) => {
                    tokio::task::spawn_local(serve(stream, peer, shared.clone(), stop.clone()));
                }
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(BACKOFF_MIN).await;
                }
            },
            _ = stopped(&mut stop) => return,
        }
    }
}

async fn active_loop(host: String, port: u16, shared: SharedRc, mut stop: watch::Receiver<bool>) {
    let mut backoff = BACKOFF_MIN;
    loop {
        tokio::select! {
            r = TcpStream::connect((host.as_str(), port)) => match r {
                Ok(stream) => {
                    backoff = BACKOFF_MIN;
                    let peer = stream
                        .peer_addr()
                        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], port)));
                    serve(stream, peer, shared.clone(), stop.clone()).await;
                }
                Err(e) => {
                    // At most BACKOFF_MAX (8 s): the cast cannot truncate.
                    let retry_ms = backoff.as_millis() as u64;
                    debug!(controller = %format_args!("tcp:{host}:{port}"), error = %e,
                        retry_ms, "connect failed");
                }
            },
            _ = stopped(&mut stop) => return,
        }
        if *stop.borrow() {
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = stopped(&mut stop) => return,
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// Drive one controller connection until it closes.
async fn serve(
    stream: TcpStream,
    peer: SocketAddr,
    shared: SharedRc,
    mut stop: watch::Receiver<bool>,
) {
    // OpenFlow is request/response with small messages: no Nagle delay.
    let _ = stream.set_nodelay(true);
    let (mut rd, mut wr) = stream.into_split();
    let mut conn = {
        let mut s = shared.borrow_mut();
        s.live += 1;
        let id = s.roles.register();
        Connection::new(ConnConfig::default(), id, s.now_ns())
    };
    info!(%peer, conn = conn.id(), "controller connected");
    let mut buf = vec![0u8; READ_BUF];
    let mut out = Vec::new();
    let mut announced = false;
    let reason: String = loop {
        out.clear();
        conn.poll_transmit(&mut out);
        if !out.is_empty() {
            if let Err(e) = wr.write_all(&out).await {
                conn.close("write failed");
                break format!("write failed: {e}");
            }
        }
        if !announced && conn.is_negotiated() {
            announced = true;
            info!(%peer, conn = conn.id(), version = "1.3 (0x04)", "OpenFlow version negotiated");
        }
        if let Some(r) = conn.close_reason() {
            break format!("{r:?}");
        }
        let wait = {
            let now = shared.borrow().now_ns();
            // Open connections always have a deadline.
            let deadline = conn.poll_timeout().unwrap_or(now);
            Duration::from_nanos(deadline.saturating_sub(now))
        };
        tokio::select! {
            r = rd.read(&mut buf) => match r {
                Ok(0) => break "closed by peer".to_string(),
                Ok(n) => {
                    let mut s = shared.borrow_mut();
                    let now = s.now_ns();
                    let Shared { switch, roles, .. } = &mut *s;
                    conn.receive(&buf[..n], now, switch, roles);
                    // Take what else has already arrived before replying:
                    // controllers like `ovs-ofctl add-flows` send a barrier
                    // after every flow-mod, and one reply write per message
                    // costs a syscall and a wakeup each. Bounded, so a peer
                    // that does not read its replies is still not read from.
                    let mut drained = 0;
                    while drained < DRAIN_READS && conn.transmit_len() < DRAIN_MAX_OUTBOX {
                        match rd.try_read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => conn.receive(&buf[..n], now, switch, roles),
                        }
                        drained += 1;
                    }
                    switch.commit_pending();
                }
                Err(e) => break format!("read failed: {e}"),
            },
            _ = tokio::time::sleep(wait) => {
                let now = shared.borrow().now_ns();
                conn.handle_timeout(now);
            }
            _ = stopped(&mut stop) => conn.close("switch stopping"),
        }
    };
    let _ = wr.shutdown().await;
    let stats = conn.stats();
    {
        let mut s = shared.borrow_mut();
        s.roles.release(conn.id());
        s.live = s.live.saturating_sub(1);
    }
    info!(
        %peer,
        conn = conn.id(),
        reason = %reason,
        rx_msgs = stats.rx_msgs,
        tx_msgs = stats.tx_msgs,
        tx_errors = stats.tx_errors,
        "controller disconnected"
    );
}
