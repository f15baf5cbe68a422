//! The harness the XDP backend tests share: a private network namespace
//! holding a veth pair, and a backend opened inside it.
//!
//! Skip policy: without root (CAP_BPF, CAP_NET_ADMIN) [`Netns::new`] prints
//! a notice and returns `None`, and the test passes; under CI (`CI` set) it
//! fails instead, since CI runs as root.
//!
//! Invariants: a [`Netns`] deletes its namespace on drop, also while a
//! failing test unwinds, and the veth pair and any XDP program attached
//! to it go with the namespace. Names are unique per process and call (a
//! tag, the pid and an atomic counter), so parallel tests never share a
//! namespace. Backends are opened and dropped inside [`Netns::run`]: the
//! interface indexes, the devmap entries and `BPF_PROG_TEST_RUN`'s
//! ingress interface are all looked up in the calling thread's namespace.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use offlow_offload::xdp::{AttachPolicy, Hook, MissPath, XdpBackend, XdpConfig, XdpPort};
use offlow_offload::TunnelPort;

static SEQ: AtomicU32 = AtomicU32::new(0);

/// `ip ARGS`, required to succeed.
pub(crate) fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("running ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A namespace holding veth pair `va`/`vb`, both up, and its own `lo`.
pub(crate) struct Netns(pub(crate) String);

impl Netns {
    /// A fresh namespace; `None` (after a notice) when not root.
    pub(crate) fn new(tag: &str) -> Option<Netns> {
        if !offlow_offload::xdp::privileged() {
            assert!(std::env::var_os("CI").is_none(), "CI runs as root");
            eprintln!("skipping: the XDP backend tests need root (CAP_BPF, CAP_NET_ADMIN)");
            return None;
        }
        let name = format!(
            "{tag}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        ip(&["netns", "add", &name]);
        // From here on, Drop deletes the namespace whatever fails next.
        let ns = Netns(name);
        ip(&[
            "-n", &ns.0, "link", "add", "name", "va", "type", "veth", "peer", "name", "vb",
        ]);
        for dev in ["lo", "va", "vb"] {
            ip(&["-n", &ns.0, "link", "set", dev, "up"]);
        }
        Some(ns)
    }

    /// `f` run with this thread inside the namespace; the thread returns to
    /// its namespace afterwards, also when `f` panics.
    pub(crate) fn run<T>(&self, f: impl FnOnce() -> T) -> T {
        struct Back(File);
        impl Drop for Back {
            fn drop(&mut self) {
                // SAFETY: setns takes a descriptor we own and a type flag.
                if unsafe { libc::setns(self.0.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                    eprintln!("cannot return to the original network namespace");
                    std::process::abort();
                }
            }
        }
        let back = Back(File::open("/proc/thread-self/ns/net").expect("own namespace"));
        let target = File::open(format!("/run/netns/{}", self.0)).expect("test namespace");
        // SAFETY: as above.
        let rc = unsafe { libc::setns(target.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "entering {}", self.0);
        let r = f();
        drop(back);
        r
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// OpenFlow ports of the harness: `va` = 1 (misses to the stack), `vb` = 2
/// (misses to AF_XDP, no socket registered: they reach the stack too),
/// `lo` = 3.
pub(crate) fn ports() -> Vec<XdpPort> {
    vec![
        XdpPort {
            ofport: 1,
            ifname: "va".into(),
            miss: MissPath::Pass,
        },
        XdpPort {
            ofport: 2,
            ifname: "vb".into(),
            miss: MissPath::Xsk,
        },
        XdpPort {
            ofport: 3,
            ifname: "lo".into(),
            miss: MissPath::Pass,
        },
    ]
}

/// A detached backend on [`ports`] and `tunnels` recording outcomes
/// (call inside the namespace).
pub(crate) fn detached(room: usize, tunnels: Vec<TunnelPort>) -> XdpBackend {
    detached_at(Hook::Xdp, room, tunnels)
}

/// [`detached`] at `hook` (at TC every port sends misses to the stack:
/// the TC hook serves no AF_XDP port).
pub(crate) fn detached_at(hook: Hook, room: usize, tunnels: Vec<TunnelPort>) -> XdpBackend {
    let mut ports = ports();
    if hook == Hook::Tc {
        for p in &mut ports {
            p.miss = MissPath::Pass;
        }
    }
    let cfg = XdpConfig {
        ports,
        room,
        attach: AttachPolicy::Detached,
        hook,
        debug_record: true,
        tunnels,
    };
    XdpBackend::open(&cfg).unwrap_or_else(|e| panic!("{e}"))
}

/// The interface index of OpenFlow port `ofport` of `b`.
pub(crate) fn ifindex_of(b: &XdpBackend, ofport: u32) -> u32 {
    b.ports()
        .iter()
        .find(|p| p.ofport == ofport)
        .expect("a harness port")
        .ifindex
}

/// Send `frame` out of interface `ifindex` with an AF_PACKET socket.
pub(crate) fn inject(ifindex: u32, frame: &[u8]) {
    // SAFETY: socket takes three integers.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) };
    assert!(
        fd >= 0,
        "AF_PACKET socket: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: sockaddr_ll is plain data; all-zero is a valid value.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_ifindex = ifindex as i32;
    addr.sll_halen = 6;
    // SAFETY: `frame` and `addr` are valid for the call with the lengths
    // given; `fd` is the socket opened above.
    let n = unsafe {
        libc::sendto(
            fd,
            frame.as_ptr().cast(),
            frame.len(),
            0,
            (&raw const addr).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    // SAFETY: `fd` is ours and closed once.
    unsafe { libc::close(fd) };
    assert_eq!(
        n,
        frame.len() as isize,
        "{}",
        std::io::Error::last_os_error()
    );
}

/// The index of interface `name` in this thread's namespace.
pub(crate) fn ifindex_by_name(name: &str) -> u32 {
    let c = std::ffi::CString::new(name).unwrap();
    // SAFETY: `c` is NUL-terminated and valid for the call.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    assert_ne!(i, 0, "no interface {name}");
    i
}

/// What the userspace path does with `frame`, received on `in_port`,
/// under `actions`: an AF_PACKET port finishes a partial TCP/UDP checksum
/// on receipt (`finish` says whether the kernel flagged it so), then the
/// executor runs. `None` when the executor stops (the frame goes up: a
/// TTL about to expire); else its outputs, `(port, frame)` each.
pub(crate) fn software(
    frame: &[u8],
    in_port: u32,
    actions: &[offlow_pipeline::Action],
    finish: bool,
) -> Option<Vec<(u32, Vec<u8>)>> {
    use offlow_datapath::{execute, ExecStats, OutputMeta, OutputSink, PacketBuf, PortInfo};

    #[derive(Default)]
    struct Sent(Vec<(u32, Vec<u8>)>);
    impl OutputSink for Sent {
        fn output(&mut self, port: u32, frame: &[u8], _meta: OutputMeta) {
            self.0.push((port, frame.to_vec()));
        }
        fn controller(
            &mut self,
            _f: &[u8],
            _m: u16,
            _o: offlow_pipeline::PacketInOrigin,
            _meta: OutputMeta,
        ) {
            panic!("an offloadable list sends nothing to the controller");
        }
        fn port_count(&self) -> usize {
            0
        }
        fn port_info(&self, _index: usize) -> Option<PortInfo> {
            None
        }
    }
    let mut frame = frame.to_vec();
    if finish {
        assert!(offlow_io::csum::finish_partial(&mut frame), "finishes");
    }
    let parsed = offlow_flow::extract(&frame, in_port, &mut Default::default());
    let mut lay = parsed.layout;
    let mut buf = PacketBuf::from_frame(&frame, 0);
    let mut sent = Sent::default();
    let out = execute(
        actions,
        &mut buf,
        &mut lay,
        in_port,
        &mut sent,
        &mut ExecStats::default(),
    );
    (out.verdict == offlow_datapath::Verdict::Done).then_some(sent.0)
}
