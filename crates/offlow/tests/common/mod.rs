//! The harness the `offlow` integration tests share (each file under
//! `tests/` is its own crate and declares `mod common;`; a file uses a
//! subset, hence `#[allow(dead_code)]` on its declaration).
//!
//! What it holds:
//! - skip policy: [`can_run`] and [`skip_or_fail`]. A test whose
//!   prerequisites (root, tools, data) are missing prints a `NOTICE` and
//!   passes, unless `CI` is set: then it fails, because CI runs as root
//!   with the packages installed and must not skip silently.
//! - processes: [`run_bounded`] (a command with a time limit, its pipes
//!   drained), [`Daemon`] (`offlow run --listen ptcp:PORT:127.0.0.1 ...`,
//!   started and waited for until it accepts), [`free_port`],
//!   [`free_ports`], [`wait_accepting`]. A failed [`Daemon::ofctl`] says
//!   whether the switch still runs, or how it died, and its last log lines.
//! - `ovs-ofctl`: [`ofctl_output`], [`ofctl_checked`], [`ofctl`],
//!   [`ofctl_at`]: always `-O OpenFlow13 --no-names --timeout=SECS`; and
//!   [`Peer`], a raw OpenFlow connection the test drives message by message.
//! - namespaces: [`Net`], a switch namespace with two veth ports and two
//!   host namespaces (10.0.0.1 and 10.0.0.2 on their `eth0`), and traffic
//!   across it: [`Net::ping`], [`tcp_transfer`], [`udp`].
//! - text: [`number_after`], [`first_number_after`], [`flow_lines`].
//! - [`controller`]: real controllers as children (the os-ken and Faucet
//!   environments, scratch directories for their logs, process groups).
//! - [`Ovs`]: a private Open vSwitch 3.1 (its own directory, `ovsdb-server`
//!   and `ovs-vswitchd --enable-dummy`, a `datapath_type=dummy` bridge with
//!   dummy ports: no kernel datapath, no host interface), stopped on drop.
//!
//! Invariants:
//! - Everything a helper creates is owned by a guard whose `Drop` removes
//!   it, and `Drop` runs while a failing test unwinds: [`Net`] deletes its
//!   namespaces (the veth pairs go with them), [`Daemon`] kills and reaps
//!   its process. A guard is built before the first step that can fail,
//!   so a half-built topology is removed too.
//! - Every wait has a deadline and every child process a time limit: a
//!   broken switch fails a test instead of hanging the suite.
//! - Names are unique per process and per call (a tag, the pid and an
//!   atomic counter), so parallel tests and concurrently running test
//!   binaries never share a namespace or an interface; interface names
//!   stay within Linux's 15 bytes (checked in [`Net::new`]).
//!
//! Thread-safety: the test harness runs tests on parallel threads. The
//! only shared state is the name counter (an atomic); [`in_netns`] moves
//! only the calling thread into a namespace and moves it back before it
//! returns; everything else is owned by the test that made it.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use offlow_io::netns::in_netns;

pub(crate) mod controller;
use offlow_openflow::{decode, encode_to_vec, frame_len, Body, Hello, Message};

/// Makes namespace and interface names unique within this process.
pub(crate) static SEQ: AtomicU32 = AtomicU32::new(0);

/// Longest wait for a started process to accept connections.
pub(crate) const START_WAIT: Duration = Duration::from_secs(15);

/// The `ovs-ofctl --timeout` most calls use.
pub(crate) const OFCTL_TIMEOUT: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------
// Skip policy.

/// Print why `what` is skipped, or fail when `CI` is set (CI must run
/// every test: it has root and the packages).
pub(crate) fn skip_or_fail(what: &str, why: &str) {
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must run {what}: {why}"
    );
    eprintln!("NOTICE: skipping {what}: {why}");
}

/// Whether this process runs as root.
pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Whether `tool` is installed: it can be started (with `--version`; the
/// exit status is not looked at, `ip --version` for one fails).
pub(crate) fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// Whether `what` can run here: root when `root` is set, and every tool
/// in `tools`. Otherwise a notice (and `false`), or a failure under CI.
pub(crate) fn can_run(what: &str, root: bool, tools: &[&str]) -> bool {
    let mut missing: Vec<&str> = Vec::new();
    if root && !is_root() {
        missing.push("root");
    }
    missing.extend(tools.iter().filter(|t| !have(t)));
    if missing.is_empty() {
        return true;
    }
    skip_or_fail(what, &format!("needs {}", missing.join(", ")));
    false
}

// ---------------------------------------------------------------------
// Processes.

/// Run `cmd` with a time limit, stdin empty; stdout and stderr are
/// collected. Panics (after killing the child) when it outlives `limit`.
pub(crate) fn run_bounded(mut cmd: Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {cmd:?}: {e}"));
    // Drain both pipes on threads: a big output would fill a pipe and
    // block the child while we wait for it to exit.
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut v);
            }
            v
        })
    };
    let out = drain(child.stdout.take().map(|r| Box::new(r) as _));
    let err = drain(child.stderr.take().map(|r| Box::new(r) as _));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Output {
        status,
        stdout: out.join().expect("stdout reader"),
        stderr: err.join().expect("stderr reader"),
    }
}

/// `N` distinct loopback ports nobody listens on right now (the listeners
/// are held together so the kernel cannot hand out one twice; the window
/// before the user binds a port is acceptable in tests).
pub(crate) fn free_ports<const N: usize>() -> [u16; N] {
    let held: Vec<TcpListener> = (0..N)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("a free port"))
        .collect();
    std::array::from_fn(|i| held[i].local_addr().expect("bound address").port())
}

/// One free loopback port (see [`free_ports`]).
pub(crate) fn free_port() -> u16 {
    let [port] = free_ports();
    port
}

/// The `ovs-ofctl` target for a switch listening on 127.0.0.1:`port`.
pub(crate) fn target(port: u16) -> String {
    format!("tcp:127.0.0.1:{port}")
}

/// Wait until 127.0.0.1:`port` accepts a connection (bounded by
/// [`START_WAIT`]); `what` names the listener in failures. With `child`,
/// the listening socket must be the child's own (see [`listens_on`]), and
/// a child that exits first fails at once.
pub(crate) fn wait_accepting(port: u16, what: &str, child: Option<&mut Child>) {
    if let Err(st) = wait_listening(port, what, child) {
        panic!("{what} exited early: {st}");
    }
}

/// [`wait_accepting`], but a child that exits before it listens is
/// returned as `Err(status)` instead of failing.
///
/// Why the ownership check: the port comes from [`free_port`], which
/// releases it before the child binds it, and until the child does,
/// anything on the machine may listen there for a moment (another test's
/// [`free_ports`] probe or switch, in this process or a concurrent test
/// run). A bare `connect` that such a listener accepts made a slow-starting
/// switch look ready, and the test's next request, made before the switch
/// had bound its port, was refused (port_failures, under load: "connection
/// refused" right after the start, the switch itself fine).
pub(crate) fn wait_listening(
    port: u16,
    what: &str,
    mut child: Option<&mut Child>,
) -> Result<(), std::process::ExitStatus> {
    let deadline = Instant::now() + START_WAIT;
    loop {
        if let Some(Ok(Some(st))) = child.as_mut().map(|c| c.try_wait()) {
            return Err(st);
        }
        let ours = child.as_ref().is_none_or(|c| listens_on(c.id(), port));
        if ours && TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        assert!(Instant::now() < deadline, "{what} did not listen on {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether process `pid` holds a socket listening on 127.0.0.1:`port`
/// (in this thread's network namespace): the socket's inode, from
/// `/proc/thread-self/net/tcp`, is among the process's descriptors.
pub(crate) fn listens_on(pid: u32, port: u16) -> bool {
    let local = format!("0100007F:{port:04X}");
    let tcp = std::fs::read_to_string("/proc/thread-self/net/tcp").unwrap_or_default();
    // Columns: sl local rem st tx:rx tr:when retrnsmt uid timeout inode.
    let inodes: Vec<String> = tcp
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 9 && f[1] == local && f[3] == "0A").then(|| format!("socket:[{}]", f[9]))
        })
        .collect();
    if inodes.is_empty() {
        return false;
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path())
            .is_ok_and(|target| inodes.iter().any(|i| target.as_os_str() == i.as_str()))
    })
}

/// Lines of a [`Daemon`]'s log kept for failure messages.
const LOG_TAIL_LINES: usize = 40;

/// How many ports [`Daemon::start`] tries when the one it picked is taken.
const START_ATTEMPTS: usize = 3;

/// The last lines of a daemon's stderr, filled by a copying thread.
#[derive(Default)]
struct LogTail {
    lines: std::sync::Mutex<std::collections::VecDeque<String>>,
    /// The copying thread reached the end of the log.
    done: std::sync::atomic::AtomicBool,
}

fn lock_tail(t: &LogTail) -> std::sync::MutexGuard<'_, std::collections::VecDeque<String>> {
    // A copying thread cannot panic while holding it; a poisoned tail
    // is still the best record there is.
    t.lines.lock().unwrap_or_else(|e| e.into_inner())
}

/// A running `offlow` process, killed and reaped on drop. Its stderr
/// (`RUST_LOG=warn`) is copied line by line to the test's stderr as it
/// comes, and the last [`LOG_TAIL_LINES`] lines are kept so a failure can
/// quote them ([`Daemon::health`]): in a parallel test run the copied
/// lines interleave with other switches' and cannot be told apart.
pub(crate) struct Daemon {
    pub child: Child,
    /// Its passive OpenFlow listener on 127.0.0.1 (0 if it has none).
    pub port: u16,
    /// The last lines of its stderr (empty for [`Daemon::start_logged`],
    /// whose caller reads the whole log).
    log_tail: std::sync::Arc<LogTail>,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // A switch that died on its own (a crash: SIGSEGV, SIGBUS, SIGABRT)
        // is worth a line even when the test did not notice; the signals a
        // test sends on purpose (and our SIGKILL below) are not.
        if let Some(st) = exit_of(&self.child) {
            use std::os::unix::process::ExitStatusExt;
            if st
                .signal()
                .is_some_and(|s| ![libc::SIGTERM, libc::SIGINT, libc::SIGKILL].contains(&s))
            {
                eprintln!("NOTE: {}", self.report(Some(st)));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How a child that has exited ended, from `waitid(WNOWAIT)` (the child
/// stays a zombie, so `Child::wait` still reaps it later): `None` while it
/// runs. Takes `&Child`, so it works where only a shared borrow exists;
/// call it before the child is reaped (after, the pid is no longer ours
/// and this says `None`).
fn exit_of(child: &Child) -> Option<std::process::ExitStatus> {
    use std::os::unix::process::ExitStatusExt;
    // SAFETY: a zeroed siginfo_t is a valid out-parameter for waitid.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid on our own child's pid, writing into `info` (live,
    // of the right type); WNOWAIT leaves the child unreaped.
    let rc = unsafe {
        libc::waitid(
            libc::P_PID,
            child.id() as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    if rc != 0 {
        return None;
    }
    // SAFETY: waitid succeeded, so `info` holds a CLD_* event of the child
    // (si_pid 0: it has not exited).
    let (pid, status) = unsafe { (info.si_pid(), info.si_status()) };
    if pid == 0 {
        return None;
    }
    // Back to a wait(2) status word, which ExitStatus describes.
    Some(std::process::ExitStatus::from_raw(match info.si_code {
        libc::CLD_EXITED => (status & 0xff) << 8,
        libc::CLD_DUMPED => status | 0x80,
        _ => status,
    }))
}

impl Daemon {
    /// Start the built `offlow` binary with `args` (`RUST_LOG=warn`, no
    /// stdin, stdout discarded, stderr copied and its tail kept); `port`:
    /// its passive listener (0 if none). Does not wait for it.
    pub(crate) fn spawn(args: &[&str], port: u16) -> Daemon {
        let mut child = Command::new(env!("CARGO_BIN_EXE_offlow"))
            .args(args)
            .env("RUST_LOG", "warn")
            // An error exit stays a few lines (anyhow would add a backtrace
            // under RUST_BACKTRACE=1), so the kept tail holds its cause.
            .env("RUST_LIB_BACKTRACE", "0")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start offlow");
        let log_tail = std::sync::Arc::new(LogTail::default());
        let stderr = child.stderr.take().expect("piped stderr");
        let tail = log_tail.clone();
        let pid = child.id();
        // Ends at EOF: when the switch (and every child holding its
        // stderr) is gone.
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                // Written straight to our stderr (not captured by the test
                // harness), as the inherited descriptor was.
                let _ = writeln!(std::io::stderr(), "[offlow {pid}] {line}");
                let mut t = lock_tail(&tail);
                if t.len() == LOG_TAIL_LINES {
                    t.pop_front();
                }
                t.push_back(line);
            }
            tail.done.store(true, Ordering::Release);
        });
        Daemon {
            child,
            port,
            log_tail,
        }
    }

    /// Start `offlow run --listen ptcp:PORT:127.0.0.1 EXTRA...` on a free
    /// port and wait until it accepts connections.
    ///
    /// The port is free when picked but not reserved (see
    /// [`wait_listening`]): a switch that finds it taken by the time it
    /// binds is started again on another, up to [`START_ATTEMPTS`] times.
    pub(crate) fn start(extra: &[&str]) -> Daemon {
        for attempt in 1..=START_ATTEMPTS {
            let port = free_port();
            let listen = format!("ptcp:{port}:127.0.0.1");
            let mut args = vec!["run", "--listen", &listen];
            args.extend_from_slice(extra);
            // The guard exists before the wait, so a timeout still kills it.
            let mut d = Daemon::spawn(&args, port);
            match wait_listening(port, "offlow run", Some(&mut d.child)) {
                Ok(()) => return d,
                Err(_) if attempt < START_ATTEMPTS && d.log_contains("Address already in use") => {
                    eprintln!("NOTE: port {port} was taken before offlow bound it; trying another");
                }
                Err(st) => panic!("offlow run exited early: {}", d.report(Some(st))),
            }
        }
        unreachable!("the last attempt returns or panics")
    }

    /// Whether a line of its log (the kept tail) contains `text`, once
    /// the log is complete (bounded wait: the copying thread reads to the
    /// end after the process exits).
    fn log_contains(&self, text: &str) -> bool {
        let deadline = Instant::now() + Duration::from_millis(500);
        while !self.log_tail.done.load(Ordering::Acquire) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        lock_tail(&self.log_tail).iter().any(|l| l.contains(text))
    }

    /// A sentence on the switch's state for failure messages: whether it
    /// still runs or how it ended (exit status, or the signal that killed
    /// it), and the last lines of its log. A switch that stops accepting
    /// connections has usually died: this says how, instead of leaving
    /// only "connection refused". Call it before reaping the child (see
    /// [`Daemon::report`]).
    pub(crate) fn health(&self) -> String {
        self.report(None)
    }

    /// [`Daemon::health`], given the exit `status` if the caller already
    /// collected it.
    pub(crate) fn report(&self, status: Option<std::process::ExitStatus>) -> String {
        // A process that just lost its listener is a moment from exiting
        // (its descriptors close before it becomes a zombie): wait a
        // little for the status.
        let deadline = Instant::now() + Duration::from_millis(500);
        let pid = self.child.id();
        let state = loop {
            if let Some(st) = status.or_else(|| exit_of(&self.child)) {
                break format!("offlow (pid {pid}) ended: {st}");
            }
            if Instant::now() >= deadline {
                break format!("offlow (pid {pid}) is still running");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // The copying thread reads to the end once the process is gone.
        let deadline = Instant::now() + Duration::from_millis(500);
        while status.is_some()
            && !self.log_tail.done.load(Ordering::Acquire)
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        let tail = lock_tail(&self.log_tail);
        if tail.is_empty() {
            format!("{state}; its log (RUST_LOG=warn) is empty")
        } else {
            let lines: Vec<&str> = tail.iter().map(String::as_str).collect();
            format!("{state}; the last lines of its log:\n{}", lines.join("\n"))
        }
    }

    /// Start `offlow run --listen ptcp:PORT:127.0.0.1 EXTRA...` with
    /// `RUST_LOG=info`, its log read on a thread (a full pipe would stall
    /// it): join the handle after the daemon has stopped to get the whole
    /// log. Waits until it accepts connections.
    pub(crate) fn start_logged<S: AsRef<std::ffi::OsStr>>(
        extra: &[S],
    ) -> (Daemon, std::thread::JoinHandle<String>) {
        let port = free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_offlow"))
            .args(["run", "--listen", &format!("ptcp:{port}:127.0.0.1")])
            .args(extra)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start offlow");
        // The guard kills the switch if anything below fails.
        let mut d = Daemon {
            child,
            port,
            log_tail: Default::default(),
        };
        let mut stderr = d.child.stderr.take().expect("piped stderr");
        let log = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s);
            s
        });
        wait_accepting(port, "offlow run", Some(&mut d.child));
        (d, log)
    }

    /// `offlow run` in `net`'s switch namespace on every one of its switch
    /// ports (port i+1 is `net.ports[i]`), with `extra` arguments; as
    /// [`Daemon::start`].
    pub(crate) fn on(net: &Net, extra: &[&str]) -> Daemon {
        let mut args = vec!["--netns", net.sw.as_str()];
        for p in &net.ports {
            args.extend(["--port", p.as_str()]);
        }
        args.extend_from_slice(extra);
        Daemon::start(&args)
    }

    /// Its `ovs-ofctl` target.
    pub(crate) fn target(&self) -> String {
        target(self.port)
    }

    /// `ovs-ofctl COMMAND TARGET ARGS...` against it (see [`ofctl_at`]),
    /// required to succeed; its stdout.
    /// A failure says whether the switch is still running (see
    /// [`Daemon::health`]).
    pub(crate) fn ofctl(&self, args: &[&str]) -> String {
        let (o, a) = ofctl_at_output(OFCTL_TIMEOUT, self.port, args);
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(
            o.status.success(),
            "ovs-ofctl {a:?} failed: {}\nstdout: {out}\nstderr: {}\n{}",
            o.status,
            String::from_utf8_lossy(&o.stderr),
            self.health()
        );
        out
    }

    /// `offlow trace --switch TARGET FLOW` against it, required to
    /// succeed; its report (text).
    pub(crate) fn trace(&self, flow: &str) -> String {
        let out = Command::new(env!("CARGO_BIN_EXE_offlow"))
            .args(["trace", "--switch", &self.target(), flow])
            .output()
            .expect("offlow trace");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "offlow trace {flow}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    }
}

// ---------------------------------------------------------------------
// ovs-ofctl.

/// Run `ovs-ofctl -O OpenFlow13 --no-names --timeout=SECS ARGS`: ARGS
/// hold the command and its target. `--timeout` bounds ovs-ofctl's own
/// work; the process as a whole gets 10 s more before it is killed.
pub(crate) fn ofctl_output(timeout: Duration, args: &[&str]) -> Output {
    let mut cmd = Command::new("ovs-ofctl");
    cmd.args(["-O", "OpenFlow13", "--no-names"])
        .arg(format!("--timeout={}", timeout.as_secs().max(1)))
        .args(args);
    run_bounded(cmd, timeout + Duration::from_secs(10))
}

/// [`ofctl_output`], required to succeed; its stdout.
pub(crate) fn ofctl_checked(timeout: Duration, args: &[&str]) -> String {
    let o = ofctl_output(timeout, args);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "ovs-ofctl {args:?} failed: {}\nstdout: {out}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// [`ofctl_checked`] with [`OFCTL_TIMEOUT`].
pub(crate) fn ofctl(args: &[&str]) -> String {
    ofctl_checked(OFCTL_TIMEOUT, args)
}

/// [`ofctl_checked`] against the switch on 127.0.0.1:`port`: its target
/// goes right after the command (the first argument that is not an
/// option), as ovs-ofctl wants it: `["--strict", "del-flows", "table=1"]`
/// runs `--strict del-flows tcp:127.0.0.1:PORT table=1`.
pub(crate) fn ofctl_at(timeout: Duration, port: u16, args: &[&str]) -> String {
    let target = target(port);
    ofctl_checked(timeout, &with_target(&target, args))
}

/// `args` with `target` inserted after the command (see [`ofctl_at`]).
fn with_target<'a>(target: &'a str, args: &[&'a str]) -> Vec<&'a str> {
    let command = args
        .iter()
        .position(|a| !a.starts_with('-'))
        .expect("an ovs-ofctl command");
    let mut a: Vec<&str> = args[..=command].to_vec();
    a.push(target);
    a.extend_from_slice(&args[command + 1..]);
    a
}

/// [`ofctl_output`] against 127.0.0.1:`port` (see [`ofctl_at`]), not
/// required to succeed; also the full argument list, for messages.
pub(crate) fn ofctl_at_output(
    timeout: Duration,
    port: u16,
    args: &[&str],
) -> (Output, Vec<String>) {
    let target = target(port);
    let a = with_target(&target, args);
    (
        ofctl_output(timeout, &a),
        a.iter().map(|s| s.to_string()).collect(),
    )
}

// ---------------------------------------------------------------------
// Namespaces.

/// `ip ARGS` (or another tool), its output; panics if it cannot start.
pub(crate) fn sh(cmd: &str, args: &[&str]) -> Output {
    Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {cmd}: {e}"))
}

/// `ip ARGS`, required to succeed.
pub(crate) fn ip(args: &[&str]) {
    let out = sh("ip", args);
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A switch namespace `sw` holding veth ports `ports[i]`, whose peers are
/// `eth0` in host namespaces `h[i]` (10.0.0.(i+1)/24): two hosts with
/// [`Net::new`], more with [`Net::with_hosts`]. Every namespace is deleted
/// on drop (the veth pairs go with them).
pub(crate) struct Net {
    pub sw: String,
    pub h: Vec<String>,
    pub ports: Vec<String>,
    /// `ethtool -K eth0` settings of the hosts.
    offloads: Vec<String>,
    /// Receive and transmit queues of every veth end.
    queues: u32,
}

impl Net {
    /// Two hosts, both linked, with names starting `tag` (three
    /// characters, one per test file) and these `ethtool -K eth0` settings.
    pub(crate) fn new(tag: &str, offloads: &[&str]) -> Net {
        Net::with_hosts(tag, offloads, 2, &[0, 1])
    }

    /// [`Net::new`] with veths of `queues` receive and transmit queues
    /// each (multi-queue AF_XDP: one queue per worker).
    pub(crate) fn new_with_queues(tag: &str, offloads: &[&str], queues: u32) -> Net {
        Net::build(tag, offloads, 2, &[0, 1], queues)
    }

    /// `hosts` host namespaces; only the hosts in `linked` get their veth
    /// pair now (the others with [`Net::link`]).
    pub(crate) fn with_hosts(tag: &str, offloads: &[&str], hosts: usize, linked: &[usize]) -> Net {
        Net::build(tag, offloads, hosts, linked, 1)
    }

    fn build(tag: &str, offloads: &[&str], hosts: usize, linked: &[usize], queues: u32) -> Net {
        let tag = format!(
            "{tag}{}x{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        // Built before the first `ip` call, so a failure half-way still
        // deletes what exists.
        let net = Net {
            sw: format!("{tag}s"),
            h: (0..hosts).map(|i| format!("{tag}h{i}")).collect(),
            ports: (1..=hosts).map(|i| format!("{tag}p{i}")).collect(),
            offloads: offloads.iter().map(|o| o.to_string()).collect(),
            queues,
        };
        for p in &net.ports {
            assert!(p.len() <= 15, "interface name {p} is over 15 bytes");
        }
        for ns in net.h.iter().chain([&net.sw]) {
            ip(&["netns", "add", ns]);
        }
        for &i in linked {
            net.link(i, None);
        }
        net
    }

    /// Create host `i`'s veth pair and configure its end; with
    /// `switch_down_for`, the switch's end stays down that long first (an
    /// interface the switch can see but not use yet).
    pub(crate) fn link(&self, i: usize, switch_down_for: Option<Duration>) {
        let q = self.queues.to_string();
        let queues = ["numtxqueues", &q, "numrxqueues", &q];
        let mut args = vec!["link", "add", &self.ports[i], "netns", &self.sw];
        args.extend(queues);
        args.extend(["type", "veth", "peer", "name", "eth0", "netns", &self.h[i]]);
        args.extend(queues);
        ip(&args);
        let addr = format!("10.0.0.{}/24", i + 1);
        ip(&["-n", &self.h[i], "addr", "add", &addr, "dev", "eth0"]);
        ip(&["-n", &self.h[i], "link", "set", "eth0", "up"]);
        ip(&["-n", &self.h[i], "link", "set", "lo", "up"]);
        let mut args = vec!["netns", "exec", &self.h[i], "ethtool", "-K", "eth0"];
        args.extend(self.offloads.iter().map(String::as_str));
        let out = sh("ip", &args);
        assert!(
            out.status.success(),
            "ethtool: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        if let Some(d) = switch_down_for {
            std::thread::sleep(d);
        }
        ip(&["-n", &self.sw, "link", "set", &self.ports[i], "up"]);
    }

    /// Delete host `i`'s veth pair from the switch side.
    pub(crate) fn unlink(&self, i: usize) {
        ip(&["-n", &self.sw, "link", "del", &self.ports[i]]);
    }

    /// `ping -c COUNT` from host `from` to `to` (0.2 s apart, 1 s reply
    /// wait); whether it succeeded.
    pub(crate) fn ping(&self, from: usize, to: &str, count: u32) -> bool {
        sh(
            "ip",
            &[
                "netns",
                "exec",
                &self.h[from],
                "ping",
                "-c",
                &count.to_string(),
                "-i",
                "0.2",
                "-W",
                "1",
                to,
            ],
        )
        .status
        .success()
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in self.h.iter().chain([&self.sw]) {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// Send `bytes` over TCP from host 0 to host 1; true when every byte
/// arrived intact. Every blocking call has a timeout.
pub(crate) fn tcp_transfer(net: &Net, bytes: usize) -> bool {
    tcp_transfer_paced(net, bytes, None)
}

/// [`tcp_transfer`], with `pause` after every 64 KiB written (a transfer
/// spread over time, so that its flows are seen hot while it lasts).
pub(crate) fn tcp_transfer_paced(net: &Net, bytes: usize, pause: Option<Duration>) -> bool {
    let l = in_netns(Some(&net.h[1]), || TcpListener::bind("10.0.0.2:7001"))
        .expect("enter host b")
        .expect("bind 10.0.0.2:7001");
    l.set_nonblocking(true).expect("nonblocking listener");
    let rx = std::thread::spawn(move || -> std::io::Result<Vec<u8>> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut s = loop {
            match l.accept() {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() > deadline {
                        return Err(e);
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => return Err(e),
            }
        };
        s.set_nonblocking(false)?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut v = Vec::new();
        s.read_to_end(&mut v).map(|_| v)
    });
    let data: Vec<u8> = (0..bytes)
        .map(|i| (i % 253) as u8 ^ (i >> 11) as u8)
        .collect();
    let sent = in_netns(Some(&net.h[0]), || {
        TcpStream::connect_timeout(&"10.0.0.2:7001".parse().unwrap(), Duration::from_secs(5))
    })
    .expect("enter host a")
    .and_then(|mut s| {
        s.set_write_timeout(Some(Duration::from_secs(10)))?;
        for chunk in data.chunks(64 << 10) {
            s.write_all(chunk)?;
            if let Some(p) = pause {
                std::thread::sleep(p);
            }
        }
        s.shutdown(std::net::Shutdown::Write)
    });
    let got = rx.join().expect("receiver thread");
    match (sent, got) {
        (Ok(()), Ok(v)) => v == data,
        (s, g) => {
            eprintln!(
                "TCP transfer failed: send {s:?}, receive {:?}",
                g.map(|v| v.len())
            );
            false
        }
    }
}

/// Send `n` UDP datagrams from host 0 (source ports 7100 up, `sources` of
/// them in turn) to 10.0.0.2:7002, sleeping 1 ms after every `burst`;
/// returns how many arrived.
pub(crate) fn udp(net: &Net, n: usize, sources: u16, burst: usize) -> usize {
    let rx = in_netns(Some(&net.h[1]), || UdpSocket::bind("10.0.0.2:7002"))
        .expect("enter host b")
        .expect("bind udp");
    rx.set_read_timeout(Some(Duration::from_millis(500)))
        .expect("timeout");
    // A loaded machine can starve the counting thread for tens of
    // milliseconds; the default receive buffer (~270 small datagrams)
    // would then drop in the host, not the switch. 4 MiB holds them all
    // (FORCE: above rmem_max, allowed to root).
    let size: libc::c_int = 4 << 20;
    // SAFETY: setsockopt on an open socket with a c_int option value of
    // the size given.
    let rc = unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&rx),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "SO_RCVBUFFORCE: {}", std::io::Error::last_os_error());
    let tx: Vec<UdpSocket> = in_netns(Some(&net.h[0]), || {
        (0..sources)
            .map(|i| UdpSocket::bind(("10.0.0.1", 7100 + i)))
            .collect::<std::io::Result<_>>()
    })
    .expect("enter host a")
    .expect("bind udp");
    let counter = std::thread::spawn(move || {
        let mut buf = [0u8; 256];
        let mut got = 0;
        while rx.recv(&mut buf).is_ok() {
            got += 1;
        }
        got
    });
    for i in 0..n {
        tx[i % tx.len()]
            .send_to(&i.to_be_bytes(), "10.0.0.2:7002")
            .expect("send");
        if i % burst == burst - 1 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    counter.join().expect("counter thread")
}

/// `InCsumErrors` of `proto` (`Tcp:` or `Udp:`) in namespace `ns`
/// (`/proc/net/snmp`): segments its stack dropped for a bad checksum.
pub(crate) fn csum_errors(ns: &str, proto: &str) -> u64 {
    let out = sh("ip", &["netns", "exec", ns, "cat", "/proc/net/snmp"]);
    assert!(out.status.success(), "/proc/net/snmp in {ns}");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut rows = text.lines().filter(|l| l.starts_with(proto));
    let (names, values) = (
        rows.next().expect("the names row"),
        rows.next().expect("the values row"),
    );
    let at = names
        .split_whitespace()
        .position(|n| n == "InCsumErrors")
        .expect("InCsumErrors");
    values
        .split_whitespace()
        .nth(at)
        .and_then(|v| v.parse().ok())
        .expect("InCsumErrors value")
}

// ---------------------------------------------------------------------
// Text.

/// The number right after the first `key` in `text` (leading blanks
/// skipped), if any.
pub(crate) fn number_after(text: &str, key: &str) -> Option<u64> {
    text.split(key).nth(1).and_then(|r| {
        r.trim_start()
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect::<String>()
            .parse()
            .ok()
    })
}

/// [`number_after`], required to be there.
pub(crate) fn first_number_after(text: &str, key: &str) -> u64 {
    number_after(text, key).unwrap_or_else(|| panic!("no {key} in {text}"))
}

/// The flow lines of a `dump-flows` output (without the reply header).
pub(crate) fn flow_lines(dump: &str) -> Vec<&str> {
    dump.lines().filter(|l| l.contains("actions=")).collect()
}

// ---------------------------------------------------------------------
// A raw OpenFlow peer.

/// A hand-driven OpenFlow 1.3 peer over TCP (a controller the test plays):
/// messages encoded and decoded with `offlow_openflow`, reads bounded by a
/// 10 s timeout.
pub(crate) struct Peer {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Peer {
    pub(crate) fn new(s: TcpStream) -> Peer {
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("read timeout");
        Peer { s, buf: Vec::new() }
    }

    pub(crate) fn send(&mut self, m: &Message) {
        let b = encode_to_vec(m).expect("encode");
        self.s.write_all(&b).expect("send");
    }

    pub(crate) fn recv(&mut self) -> Message {
        loop {
            if let Ok(Some(n)) = frame_len(&self.buf) {
                if n <= self.buf.len() {
                    let m = decode(&self.buf[..n]).expect("decode reply");
                    self.buf.drain(..n);
                    return m;
                }
            }
            let mut chunk = [0u8; 4096];
            let n = self.s.read(&mut chunk).expect("read (timed out?)");
            assert!(n > 0, "connection closed");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Read until the switch closes the connection (an error if it is
    /// reset instead, or the read times out).
    pub(crate) fn read_to_close(&mut self) -> std::io::Result<Vec<u8>> {
        let mut rest = std::mem::take(&mut self.buf);
        self.s.read_to_end(&mut rest)?;
        Ok(rest)
    }

    /// HELLO both ways.
    pub(crate) fn handshake(&mut self) {
        self.send(&Message::new(1, Body::Hello(Hello::of13())));
        let m = self.recv();
        assert!(matches!(m.body, Body::Hello(_)), "{m:?}");
    }
}

// ---------------------------------------------------------------------
// A private Open vSwitch.

/// A private OVS instance; stopped and its directory removed on drop.
pub(crate) struct Ovs {
    pub dir: PathBuf,
    /// Its passive OpenFlow listener on 127.0.0.1.
    pub port: u16,
}

impl Ovs {
    pub(crate) fn run(dir: &Path, prog: &str, args: &[&str]) {
        let out = Command::new(prog)
            .args(args)
            .env("OVS_RUNDIR", dir)
            .env("OVS_DBDIR", dir)
            .env("OVS_LOGDIR", dir)
            .env("OVS_SYSCONFDIR", dir)
            .output()
            .unwrap_or_else(|e| panic!("{prog}: {e}"));
        assert!(
            out.status.success(),
            "{prog} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Start it with bridge `brd` (`datapath_type=dummy`, OpenFlow 1.3,
    /// fail-mode secure, listening on a free port) and `ports` dummy ports
    /// `p1..pN` numbered 1..N.
    pub(crate) fn start(ports: u32) -> Ovs {
        let dir =
            std::env::temp_dir().join(format!("offlow-ovs-{}-{}", std::process::id(), free_port()));
        std::fs::create_dir_all(&dir).expect("ovs dir");
        let port = free_port();
        // From here on, Drop cleans up whatever got started.
        let ovs = Ovs { dir, port };
        let d = ovs.dir.clone();
        let p = |f: &str| d.join(f).display().to_string();
        let db = p("conf.db");
        let sock = format!("unix:{}", p("db.sock"));
        Ovs::run(
            &d,
            "ovsdb-tool",
            &["create", &db, "/usr/share/openvswitch/vswitch.ovsschema"],
        );
        Ovs::run(
            &d,
            "ovsdb-server",
            &[
                &db,
                &format!("--remote=punix:{}", p("db.sock")),
                &format!("--pidfile={}", p("ovsdb-server.pid")),
                &format!("--log-file={}", p("ovsdb-server.log")),
                "--detach",
            ],
        );
        let vsctl = |args: &[&str]| {
            let mut a = vec!["--db", &sock, "--timeout=10"];
            a.extend_from_slice(args);
            Ovs::run(&d, "ovs-vsctl", &a);
        };
        vsctl(&["--no-wait", "init"]);
        Ovs::run(
            &d,
            "ovs-vswitchd",
            &[
                &sock,
                "--enable-dummy",
                &format!("--pidfile={}", p("ovs-vswitchd.pid")),
                &format!("--log-file={}", p("ovs-vswitchd.log")),
                "--detach",
            ],
        );
        let listen = format!("ptcp:{port}:127.0.0.1");
        vsctl(&[
            "add-br",
            "brd",
            "--",
            "set",
            "bridge",
            "brd",
            "datapath_type=dummy",
            "protocols=OpenFlow13",
            "fail-mode=secure",
            "--",
            "set-controller",
            "brd",
            &listen,
        ]);
        for i in 1..=ports {
            let name = format!("p{i}");
            vsctl(&[
                "add-port",
                "brd",
                &name,
                "--",
                "set",
                "interface",
                &name,
                "type=dummy",
                &format!("ofport_request={i}"),
            ]);
        }
        // Ready when ovs-vswitchd itself listens (any listener on a freed
        // port would not do: see `wait_listening`).
        let deadline = Instant::now() + START_WAIT;
        while !ovs
            .pid("ovs-vswitchd")
            .is_some_and(|pid| listens_on(pid, port))
        {
            assert!(
                Instant::now() < deadline,
                "ovs-vswitchd did not listen on {port}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        ovs
    }

    /// The pid of this instance's `daemon` (`ovs-vswitchd` or
    /// `ovsdb-server`) from its pidfile, if that process is still that
    /// daemon (a stale pidfile's pid may belong to another process now).
    fn pid(&self, daemon: &str) -> Option<u32> {
        let pid: u32 = std::fs::read_to_string(self.dir.join(format!("{daemon}.pid")))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        // comm is cut to 15 bytes ("ovs-vswitchd", "ovsdb-server" fit).
        (comm.trim() == daemon).then_some(pid)
    }

    /// `ovs-appctl -t ovs-vswitchd ARGS...` of this instance, required to
    /// succeed; its standard output.
    pub(crate) fn appctl(&self, args: &[&str]) -> String {
        let pid = std::fs::read_to_string(self.dir.join("ovs-vswitchd.pid")).expect("vswitchd pid");
        let ctl = self.dir.join(format!("ovs-vswitchd.{}.ctl", pid.trim()));
        let ctl = ctl.display().to_string();
        let mut a = vec!["-t", ctl.as_str()];
        a.extend_from_slice(args);
        let out = Command::new("ovs-appctl")
            .args(&a)
            .output()
            .expect("ovs-appctl");
        assert!(
            out.status.success(),
            "ovs-appctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Ovs {
    fn drop(&mut self) {
        for daemon in ["ovs-vswitchd", "ovsdb-server"] {
            if let Some(pid) = self.pid(daemon) {
                // SAFETY: kill(2) on a process checked to be this
                // instance's daemon; no memory is involved.
                unsafe {
                    libc::kill(pid as libc::pid_t, libc::SIGTERM);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

// ---------------------------------------------------------------------
// Stopping a logged switch; the offload tier's exit statistics.

/// Stop the switch with SIGTERM (bounded) and return its whole log.
pub(crate) fn stop(mut d: Daemon, log: std::thread::JoinHandle<String>) -> String {
    // SAFETY: kill(2) on our own child.
    unsafe {
        libc::kill(d.child.id() as i32, libc::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while d.child.try_wait().expect("wait").is_none() {
        assert!(Instant::now() < deadline, "offlow did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(d);
    log.join().expect("log reader")
}

/// The offload tier's exit statistics.
#[derive(Debug)]
pub(crate) struct TierStats {
    pub hits: u64,
    pub installs: u64,
    pub revalidated: u64,
    pub line: String,
}

pub(crate) fn tier_stats(log: &str) -> TierStats {
    let line = log
        .lines()
        .find(|l| l.contains("offload tier stopped"))
        .unwrap_or_else(|| panic!("no `offload tier stopped` line (tier off?):\n{log}"))
        .to_string();
    TierStats {
        hits: first_number_after(&line, " hits="),
        installs: first_number_after(&line, "installs="),
        revalidated: first_number_after(&line, "revalidated="),
        line,
    }
}
