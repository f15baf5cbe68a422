//! Topologies and processes the end-to-end experiments (`bench forward`,
//! `bench control`) build around a switch, and the interrupt flag that lets
//! them remove it all on Ctrl-C.
//!
//! What: [`Topo`] (network namespaces, veth pairs: two hosts and optionally
//! a switch namespace between them), [`ChildGuard`] (a child process killed
//! when dropped), [`start_offlow`] (`offlow run` on the switch namespace's
//! `p1`/`p2`, secure fail mode, a passive OpenFlow listener on a free
//! loopback port; [`start_offlow_logged`] keeps its `info` log in a file),
//! and small shell helpers.
//!
//! ```text
//!  ns A: eth0 ──veth── p1 ┐ ns SW: the switch ┌ p2 ──veth── eth0 :ns B
//! ```
//!
//! Invariants: every namespace and process made here is owned by a guard
//! whose `Drop` removes it, built before the next step that can fail, so
//! an error half-way leaves nothing behind. Names carry the pid and a
//! per-process counter ([`unique_tag`]), so concurrent runs never collide.
//!
//! Thread-safety: the name counter and [`INTERRUPTED`] are atomics; the
//! rest is owned by the experiment's calling thread.

use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use offlow_io::netns::{self, add_veth_pair, VethEnd};

// ------------------------------------------------------------ shell helpers --

/// Run `cmd` (stdin empty) and return its stdout; a failure carries stderr.
pub fn run_cmd(cmd: &mut Command) -> anyhow::Result<String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `ip ARGS`, output discarded.
pub fn ip(args: &[&str]) -> anyhow::Result<()> {
    Ok(netns::ip(args).map(|_| ())?)
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A name prefix unique to this process and call (short enough for
/// interface and namespace names).
pub fn unique_tag() -> String {
    format!(
        "ofw{}x{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

// ---------------------------------------------------------------- topology --

/// Namespaces of one row; deleting them deletes their links and bridges.
pub struct Topo {
    namespaces: Vec<String>,
    /// (namespace, interface) of the generator and the receiver.
    pub gen: (String, String),
    /// See [`Topo::gen`].
    pub rx: (String, String),
    /// The switch namespace (switched rows).
    sw: Option<String>,
}

impl Drop for Topo {
    fn drop(&mut self) {
        for ns in &self.namespaces {
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stdin(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

fn add_ns(t: &mut Topo, name: String) -> anyhow::Result<String> {
    ip(&["netns", "add", &name])?;
    t.namespaces.push(name.clone());
    ip(&["-n", &name, "link", "set", "lo", "up"])?;
    Ok(name)
}

impl Topo {
    fn empty() -> Topo {
        Topo {
            namespaces: Vec::new(),
            gen: (String::new(), String::new()),
            rx: (String::new(), String::new()),
            sw: None,
        }
    }

    /// One namespace; generator and receiver on `lo`.
    pub fn loopback() -> anyhow::Result<Topo> {
        let mut t = Topo::empty();
        let ns = add_ns(&mut t, format!("{}l", unique_tag()))?;
        t.gen = (ns.clone(), "lo".into());
        t.rx = (ns, "lo".into());
        Ok(t)
    }

    /// Hosts A and B and, when `switched`, a switch namespace between them.
    /// `queues`: receive and transmit queues of each veth pair (the
    /// switch-side pairs, or the direct pair; 1 leaves the kernel's
    /// default, one queue).
    pub fn hosts(switched: bool, queues: usize) -> anyhow::Result<Topo> {
        let tag = unique_tag();
        let mut t = Topo::empty();
        let a = add_ns(&mut t, format!("{tag}a"))?;
        let b = add_ns(&mut t, format!("{tag}b"))?;
        if switched {
            let sw = add_ns(&mut t, format!("{tag}s"))?;
            for (p, h) in [("p1", &a), ("p2", &b)] {
                let switch_end = VethEnd {
                    name: p,
                    netns: &sw,
                };
                let host_end = VethEnd {
                    name: "eth0",
                    netns: h,
                };
                add_veth_pair(switch_end, host_end, Some(queues))?;
                ip(&["-n", &sw, "link", "set", p, "up"])?;
            }
            t.sw = Some(sw);
        } else {
            let end = |netns| VethEnd {
                name: "eth0",
                netns,
            };
            add_veth_pair(end(&a), end(&b), (queues > 1).then_some(queues))?;
        }
        // Host MACs differ from the frames' destination (see
        // `crate::traffic`).
        for (h, mac) in [(&a, "02:00:00:00:00:11"), (&b, "02:00:00:00:00:12")] {
            ip(&["-n", h, "link", "set", "eth0", "address", mac])?;
            ip(&["-n", h, "link", "set", "eth0", "up"])?;
        }
        t.gen = (a, "eth0".into());
        t.rx = (b, "eth0".into());
        Ok(t)
    }

    /// The switch namespace.
    pub fn sw(&self) -> anyhow::Result<&str> {
        self.sw.as_deref().context("not a switched topology")
    }
}

/// Wait until the veth ends show carrier (a just-raised veth takes a moment).
pub fn wait_link_up(ns: &str, ifname: &str) {
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        let up = Command::new("ip")
            .args(["-n", ns, "-o", "link", "show", ifname])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).contains("LOWER_UP"))
            .unwrap_or(false);
        if up {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

// ----------------------------------------------------------------- switches --

/// A child process killed (SIGTERM, then SIGKILL) when dropped.
pub struct ChildGuard {
    /// The process.
    pub child: Child,
    /// What it is, for messages.
    pub what: &'static str,
}

impl ChildGuard {
    fn stop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        if let Ok(pid) = i32::try_from(self.child.id()) {
            // SAFETY: kill(2) on the pid of our own child, not yet reaped
            // (try_wait above returned None), so the pid is still ours.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// An error when the process has exited.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Ok(Some(st)) = self.child.try_wait() {
            bail!("{} exited early: {st}", self.what);
        }
        Ok(())
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A TCP port on 127.0.0.1 nobody listens on right now.
pub fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Start `BIN run` on p1 (port 1) and p2 (port 2) of the switch namespace
/// `sw`, secure fail mode, `workers` packet workers, AF_XDP ports when
/// `xdp` (else AF_PACKET), listening on a free port of 127.0.0.1 (in the
/// caller's namespace). Returns once it accepts connections, with no flow
/// installed; the second value is the listening port.
pub fn start_offlow(
    bin: &Path,
    sw: &str,
    workers: usize,
    xdp: bool,
) -> anyhow::Result<(ChildGuard, u16)> {
    start_offlow_with(bin, sw, workers, xdp, &[])
}

/// [`start_offlow`] with `extra` arguments appended to `offlow run`'s.
pub fn start_offlow_with(
    bin: &Path,
    sw: &str,
    workers: usize,
    xdp: bool,
    extra: &[&str],
) -> anyhow::Result<(ChildGuard, u16)> {
    start_offlow_logged(bin, sw, workers, xdp, extra, None)
}

/// [`start_offlow_with`], with `RUST_LOG=info` and the switch's stderr
/// written to `log` when given (else `RUST_LOG=warn`, stderr inherited).
pub fn start_offlow_logged(
    bin: &Path,
    sw: &str,
    workers: usize,
    xdp: bool,
    extra: &[&str],
    log: Option<&Path>,
) -> anyhow::Result<(ChildGuard, u16)> {
    let port = free_port()?;
    let listen = format!("ptcp:{port}:127.0.0.1");
    let (p1, p2) = if xdp {
        ("af_xdp:p1=1", "af_xdp:p2=2")
    } else {
        ("p1=1", "p2=2")
    };
    let child = Command::new(bin)
        .args(["run", "--netns", sw, "--port", p1, "--port", p2])
        .args(["--listen", &listen, "--fail-mode", "secure"])
        .args(["--workers", &workers.to_string()])
        .args(extra)
        .env("RUST_LOG", if log.is_some() { "info" } else { "warn" })
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(match log {
            Some(p) => Stdio::from(
                std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?,
            ),
            None => Stdio::inherit(),
        })
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let mut g = ChildGuard {
        child,
        what: "offlow run",
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        g.check_alive()?;
        if Instant::now() > deadline {
            bail!("offlow did not listen on {listen} within 10 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok((g, port))
}

// --------------------------------------------------------------- interrupts --

/// Set by SIGINT/SIGTERM once [`catch_interrupt`] ran: the current row
/// stops early and no further row starts, so the guards remove what exists.
pub static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Whether SIGINT or SIGTERM arrived since [`catch_interrupt`].
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

extern "C" fn on_interrupt(_: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    INTERRUPTED.store(true, Ordering::Relaxed);
}

/// Route SIGINT and SIGTERM to [`INTERRUPTED`] instead of killing the
/// process (which would leave namespaces and daemons behind).
pub fn catch_interrupt() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: installs a handler that only stores to an atomic; the
        // handler is a plain `extern "C"` function living for the program.
        unsafe {
            libc::signal(
                sig,
                on_interrupt as extern "C" fn(libc::c_int) as libc::sighandler_t,
            );
        }
    }
}

/// Sleep `d`, or less when interrupted.
pub fn sleep_unless_interrupted(d: Duration) {
    let end = Instant::now() + d;
    while !interrupted() {
        let now = Instant::now();
        if now >= end {
            return;
        }
        std::thread::sleep((end - now).min(Duration::from_millis(50)));
    }
}
