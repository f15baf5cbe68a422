//! Real controllers as child processes: the Python environments of
//! `scripts/controllers-venv.sh` ([`venv`]), a scratch directory for their
//! configurations and logs ([`Scratch`]), children in process groups of
//! their own ([`Proc`], the whole group killed on drop: Faucet re-executes
//! itself as `osken-manager`, and a panicking test must leave nothing
//! running), and the wait for the child's own listener that does not
//! itself connect ([`wait_listening`]: a probe connection would open an
//! OpenFlow session).
//! Used by `controllers.rs` and `nat.rs`.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::{can_run, listens_on, skip_or_fail, SEQ};

/// Longest wait for a controller to listen, or to program the switch.
pub(crate) const PROGRAM_WAIT: Duration = Duration::from_secs(20);

/// The environments' root, built once per test process (the script also
/// locks against other processes); `None` after a skip notice (root,
/// `ovs-ofctl`, `ethtool` and `ip` are checked first).
pub(crate) fn venv(what: &str) -> Option<PathBuf> {
    if !can_run(what, true, &["ovs-ofctl", "ethtool", "ip"]) {
        return None;
    }
    static ROOT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let r = ROOT.get_or_init(|| {
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../scripts/controllers-venv.sh"
        );
        let out = Command::new("bash")
            .arg(script)
            .output()
            .map_err(|e| format!("{script}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "{script} failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(std::env::var_os("OFFLOW_VENV")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/var/cache/offlow/venv")))
    });
    match r {
        Ok(p) => Some(p.clone()),
        Err(why) => {
            skip_or_fail(what, why);
            None
        }
    }
}

/// A scratch directory for configs and logs. Removed on drop after a
/// pass; kept (and its logs printed) after a failure, or always with
/// `OFFLOW_TEST_KEEP_LOGS` set (`OFFLOW_TEST_LOG` sets the switch's
/// `RUST_LOG`, default `info`).
pub(crate) struct Scratch(PathBuf);

impl Scratch {
    pub(crate) fn new(kind: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!(
            "offlow-ctl-{kind}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Scratch(dir)
    }

    pub(crate) fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::env::var_os("OFFLOW_TEST_KEEP_LOGS").is_some() {
            eprintln!("logs kept in {}", self.0.display());
        } else if std::thread::panicking() {
            eprintln!("logs kept in {}", self.0.display());
            if let Ok(d) = std::fs::read_dir(&self.0) {
                for e in d.flatten() {
                    let text = std::fs::read_to_string(e.path()).unwrap_or_default();
                    let tail: Vec<&str> = text.lines().rev().take(40).collect();
                    eprintln!("---- {} (last 40 lines)", e.path().display());
                    for l in tail.into_iter().rev() {
                        eprintln!("{l}");
                    }
                }
            }
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// A child in its own process group; the whole group is killed on drop.
pub(crate) struct Proc {
    child: Child,
    what: &'static str,
}

impl Proc {
    pub(crate) fn spawn(what: &'static str, mut cmd: Command, log: &Path) -> Proc {
        let out = std::fs::File::create(log).expect("log file");
        let err = out.try_clone().expect("log file");
        let child = cmd
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {what}: {e}"));
        Proc { child, what }
    }

    pub(crate) fn check_alive(&mut self) {
        if let Ok(Some(st)) = self.child.try_wait() {
            panic!("{} exited early: {st}", self.what);
        }
    }

    /// SIGTERM to the child itself (not its group), then wait for it to
    /// exit (bounded by [`PROGRAM_WAIT`]; the group is killed on drop as
    /// usual): for a switch whose exit log the test reads.
    pub(crate) fn terminate(&mut self) {
        // SAFETY: kill(2) on our own child, which has not been reaped.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let deadline = Instant::now() + PROGRAM_WAIT;
        while self.child.try_wait().expect("wait").is_none() {
            assert!(
                Instant::now() < deadline,
                "{} did not stop on SIGTERM",
                self.what
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // The child leads its group (process_group(0)): its pid is the
        // group id.
        let pgid = self.child.id() as libc::pid_t;
        // SAFETY: kill(2) on a process group this test created.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

/// Whether a process of `pgid`'s group owns the socket listening on
/// 127.0.0.1:`port` (read from /proc, so the probe does not itself open an
/// OpenFlow session). Any listener would not do: another test's process
/// may take a port between its pick and the controller's bind, and the
/// switch would then talk to it.
pub(crate) fn group_listening(pgid: u32, port: u16) -> bool {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return false;
    };
    procs.flatten().any(|e| {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            return false;
        };
        // /proc/PID/stat: "pid (comm) state ppid pgrp ..."; comm may hold
        // spaces, so count from the closing parenthesis.
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let group = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(2))
            .and_then(|g| g.parse::<u32>().ok());
        group == Some(pgid) && listens_on(pid, port)
    })
}

pub(crate) fn wait_listening(p: &mut Proc, port: u16) {
    let deadline = Instant::now() + PROGRAM_WAIT;
    // The child leads its group (process_group(0)).
    while !group_listening(p.child.id(), port) {
        p.check_alive();
        assert!(
            Instant::now() < deadline,
            "{} did not listen on {port}",
            p.what
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
