//! Network namespaces: run code inside a named namespace (one created with
//! `ip netns add NAME`, bound at `/run/netns/NAME`).
//!
//! A socket belongs to the namespace it was created in, for its whole life,
//! whichever thread later uses it. So a switch can open its ports inside a
//! namespace with [`in_netns`] and then serve them from any thread.
//!
//! Thread-safety: `setns` moves only the calling thread; [`in_netns`]
//! restores the thread's namespace before returning, also when `f` panics.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// The path of a named namespace.
pub fn path(name: &str) -> String {
    format!("/run/netns/{name}")
}

fn enter(ns: &File) -> io::Result<()> {
    // SAFETY: `setns` takes a descriptor we own (valid for the call) and a
    // namespace type; it touches no memory of ours.
    let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Puts the thread back in its original namespace when dropped.
struct Restore(File);

impl Drop for Restore {
    fn drop(&mut self) {
        if let Err(e) = enter(&self.0) {
            // Carrying on in the wrong namespace would open later sockets
            // in it: a silent misconfiguration. Nothing sane remains.
            eprintln!("offlow: cannot return to the original network namespace: {e}");
            std::process::abort();
        }
    }
}

/// Run `f` with the calling thread inside the namespace `name` (`None`:
/// the current one, `f` just runs).
pub fn in_netns<T>(name: Option<&str>, f: impl FnOnce() -> T) -> io::Result<T> {
    let Some(name) = name else {
        return Ok(f());
    };
    let original = File::open("/proc/thread-self/ns/net")?;
    let target = File::open(path(name))
        .map_err(|e| io::Error::new(e.kind(), format!("network namespace {name}: {e}")))?;
    enter(&target).map_err(|e| io::Error::new(e.kind(), format!("entering {name}: {e}")))?;
    let _restore = Restore(original);
    Ok(f())
}

/// Run `ip` (iproute2) with `args`, returning its standard output. A
/// failure names the command line and carries `ip`'s own message.
pub fn ip(args: &[&str]) -> io::Result<String> {
    let out = std::process::Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| io::Error::new(e.kind(), format!("running `ip` (iproute2): {e}")))?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// One end of a veth pair: the interface name and its namespace.
#[derive(Debug, Clone, Copy)]
pub struct VethEnd<'a> {
    /// Interface name inside `netns`.
    pub name: &'a str,
    /// Namespace (created with `ip netns add`).
    pub netns: &'a str,
}

/// The `ip` arguments that create a veth pair from `a` to `b`, each end
/// with `queues` receive and transmit queues (`None`: the kernel's one).
pub fn veth_pair_args(a: VethEnd<'_>, b: VethEnd<'_>, queues: Option<usize>) -> Vec<String> {
    let q = queues.map(|q| q.max(1).to_string());
    let end = |end: VethEnd<'_>| {
        let mut v = vec![
            "name".to_string(),
            end.name.into(),
            "netns".into(),
            end.netns.into(),
        ];
        if let Some(q) = &q {
            v.extend([
                "numtxqueues".into(),
                q.clone(),
                "numrxqueues".into(),
                q.clone(),
            ]);
        }
        v
    };
    let mut args: Vec<String> = vec!["link".into(), "add".into()];
    args.extend(end(a));
    args.extend(["type".into(), "veth".into(), "peer".into()]);
    args.extend(end(b));
    args
}

/// Create a veth pair from `a` to `b` (see [`veth_pair_args`]); both ends
/// start down.
pub fn add_veth_pair(a: VethEnd<'_>, b: VethEnd<'_>, queues: Option<usize>) -> io::Result<()> {
    let args = veth_pair_args(a, b, queues);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    ip(&args).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn veth_pair_args_name_both_ends_and_their_queues() {
        let a = VethEnd {
            name: "p1",
            netns: "sw",
        };
        let b = VethEnd {
            name: "eth0",
            netns: "h1",
        };
        assert_eq!(
            veth_pair_args(a, b, None).join(" "),
            "link add name p1 netns sw type veth peer name eth0 netns h1"
        );
        assert_eq!(
            veth_pair_args(a, b, Some(2)).join(" "),
            "link add name p1 netns sw numtxqueues 2 numrxqueues 2 type veth peer \
             name eth0 netns h1 numtxqueues 2 numrxqueues 2"
        );
    }

    #[test]
    fn ip_failure_names_the_command() {
        // An unknown object is rejected by `ip` itself, before any change.
        let err = ip(&["no-such-object"]).unwrap_err().to_string();
        assert!(err.contains("ip no-such-object"), "{err}");
    }
}
