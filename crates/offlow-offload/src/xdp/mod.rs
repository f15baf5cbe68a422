//! The XDP backend: offloaded microflows served by an XDP program in the
//! kernel, on the switch's own ports, before a frame reaches the AF_XDP or
//! AF_PACKET socket the userspace fast path reads. With [`Hook::Tc`] the
//! same backend loads the file's TC program instead and attaches it at each
//! port's TC ingress (tcx links); everything below holds for both (TC
//! programs also run inside an RCU read-side section), except where a
//! paragraph names XDP's attachment or AF_XDP sockets.
//!
//! # What
//! [`XdpBackend`] loads `bpf/offload.bpf.c` (built into the crate by
//! build.rs), fills its port maps, attaches it to each port (native XDP,
//! or generic where the driver has none) and implements [`OffloadBackend`]
//! over its maps:
//! - `flows`: [`crate::OffloadKey`] → a slot of `progs`, for exact and
//!   masked entries alike: a masked entry's key is stored masked, with its
//!   mask slot's id in the key's `pad` byte (0 for exact keys);
//! - `masks`: up to [`MAX_MASKS`] masks, one per slot, each the mask of
//!   the masked entries carrying that slot's id (an ARRAY the program
//!   reads on every exact miss; `masks.rs` keeps which slot holds which
//!   mask and how many entries use it);
//! - `progs`: the slot's [`OffloadProgram`] and the key it serves, plus the
//!   entry's slot of `counters` (per-CPU packets and bytes);
//! - `rx_ports` (ifindex → OpenFlow port and miss path: an ARRAY indexed by
//!   ifindex for ifindex < 4096, `rx_ports_far` a HASH for larger ones),
//!   `tx_ports` (a DEVMAP, dense port index → ifindex; the index is the
//!   port's position in [`XdpConfig::ports`], and a program record carries
//!   it beside the OpenFlow output port), `xsks` (the AF_XDP sockets,
//!   [`XdpBackend::register_xsk`]), `cpus` and `worker_cpu` (steering,
//!   [`XdpBackend::set_worker_cpu`]), `stats` ([`XdpBackend::stats`]);
//! - `tun_rx` (a received frame's outer addresses, protocol and key → the
//!   tunnel port it enters on) and `tun_tx` (each tunnel's outer-header
//!   template) for the tunnel ports of [`XdpConfig::tunnels`]
//!   ([`crate::tunnel`]; the C file's header says which frames are
//!   decapsulated in the kernel), and `tun_ident` (the outer IPv4
//!   identification, a per-CPU counter).
//!
//! # Invariants
//! - **No frame uses a program after the call that replaced or removed it
//!   returns.** A change is published by one map update (`flows` pointing
//!   at a new slot, or the key deleted) and followed by a grace period
//!   ([`XdpBackend::grace_period`]): XDP programs run inside an RCU
//!   read-side section, and `synchronize_rcu()` returns only after every
//!   section that began before it has ended, so every frame that could
//!   have read the old slot has been served. Batches wait once.
//! - **A slot is rewritten only when nothing can read it.** A program slot
//!   is written while free, published, and freed again only a grace period
//!   after the update that unlinked it; so a frame in flight always reads a
//!   complete record. The kernel may recycle a `flows` element as soon as
//!   it is replaced, which could hand a frame another entry's slot number:
//!   the record carries its key and the program checks it (a mismatch is a
//!   miss, `miss_stale`).
//! - **A mask slot changes masks only when no frame can mix them.** A
//!   slot is written with a new mask while no entry carries its id, and a
//!   grace period passes before the first such entry is published, so a
//!   frame that read the element mid-write (torn) has ended by then; it is
//!   cleared when its last entry is unlinked and reused only after the
//!   grace period of that removal (`hold_mask`'s comment has the
//!   argument). A masked entry costs one wait more than an exact one only
//!   when its mask is new.
//! - **Counters are exact.** An entry counts the frames it serves (bytes as
//!   received): forwarded, dropped or steered; not those it sends up
//!   untouched (a TTL about to expire, no CPU for a steering mask, no
//!   headroom for a tag), which software counts. A new entry's counter
//!   slot is zeroed before the entry is published; a replacement keeps it
//!   (the same microflow); a removal reads it after the grace period, when
//!   no frame can add to it, and only then frees it.
//! - **Attached means owned.** The program is attached with XDP links
//!   (`BPF_LINK_CREATE`), which the kernel never lets replace another
//!   program and which detach when their descriptor closes: on drop, and
//!   also when the process dies, so a crashed switch leaves no program on
//!   its ports. Interfaces that already have a program are refused by name
//!   before anything is attached.
//!
//! # Failure
//! A failed map update changes nothing and reports
//! [`OffloadError::Backend`]. If the grace period itself fails (neither
//! membarrier nor the map-in-map wait is available: not seen on any
//! supported kernel), the change stays published, the call reports the
//! error, and retired slots stay out of use until a later wait succeeds.
//!
//! # Thread-safety
//! `XdpBackend` is driven by one thread (`&mut self` for every change); the
//! kernel runs the program concurrently on every CPU and shares only the
//! maps with it. Attaching, [`XdpBackend::test_run`] and the interface
//! lookups act in the calling thread's network namespace.

mod layout;
mod masks;
mod skel;
mod stats;
mod sys;

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Mutex;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, MapHandle, PrintLevel, Xdp, XdpFlags};
use offlow_wire::tunnel::KeyMode;

use crate::backend::{EntryCounters, OffloadBackend, OffloadError};
use crate::caps::{ActionKinds, Capabilities, CLASS_FIELDS};
use crate::mask::{OffloadMask, OffloadMatch};
use crate::program::{OffloadProgram, Verdict};
use crate::tunnel::TunnelPort;
use crate::Refusal;

pub use masks::MAX_MASKS;
pub use stats::{XdpStats, STAT_NAMES};

use layout::bytes_of;
use masks::MaskSlots;
use skel::types;

/// XDP actions (linux/bpf.h `enum xdp_action`).
pub mod action {
    /// An error in the program (never returned by offlow's).
    pub const ABORTED: u32 = 0;
    /// Dropped.
    pub const DROP: u32 = 1;
    /// Up to the kernel stack.
    pub const PASS: u32 = 2;
    /// Back out of the ingress interface.
    pub const TX: u32 = 3;
    /// Redirected through a map (another port, a CPU, an AF_XDP socket).
    pub const REDIRECT: u32 = 4;
}

/// TC actions (linux/pkt_cls.h), what the program returns at [`Hook::Tc`].
pub mod tc_action {
    /// On to the stack.
    pub const OK: u32 = 0;
    /// Dropped.
    pub const SHOT: u32 = 2;
    /// Redirected (to a port's egress, or back into the ingress port when
    /// sent up).
    pub const REDIRECT: u32 = 7;
}

/// Where a port's misses go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissPath {
    /// To the kernel stack (`XDP_PASS`), where an AF_PACKET socket reads
    /// them.
    Pass,
    /// To the AF_XDP socket of the receive queue ([`XdpBackend::register_xsk`]);
    /// to the stack while the queue has none.
    Xsk,
}

/// A switch port the program serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XdpPort {
    /// Its OpenFlow port number.
    pub ofport: u32,
    /// The interface (in the calling thread's network namespace).
    pub ifname: String,
    /// Where its misses go.
    pub miss: MissPath,
}

/// Which hook the tier runs at (bpf/offload.bpf.c has a program for each,
/// over the same maps).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Hook {
    /// XDP (`offlow_offload`): before a socket buffer exists; every action,
    /// tunnels and CPU steering included; misses to AF_XDP sockets or the
    /// stack.
    #[default]
    Xdp,
    /// TC ingress through tcx links (`offlow_offload_tc`): on the socket
    /// buffer the driver built, which a redirect hands on as is (on a veth,
    /// no conversion to an XDP frame and back). No tunnels and no CPU
    /// steering (the capabilities say so); AF_PACKET ports only, whose
    /// sockets must take only frames marked [`TC_UP_MARK`] (the C file's
    /// TC section says why).
    Tc,
}

impl fmt::Display for Hook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Hook::Xdp => "xdp",
            Hook::Tc => "tc",
        })
    }
}

/// The mark the TC program puts on a frame it sends up, before it
/// redirects the frame into its port's ingress once more: the port's
/// AF_PACKET socket must take only frames carrying it
/// (`offlow_io::AfPacketConfig::only_mark`), since a packet socket sees
/// every frame before TC ingress runs. Frames from another namespace or a
/// device never carry a mark (crossing a namespace clears it).
pub const TC_UP_MARK: u32 = 0x6f66_6c77; // "oflw"

/// How to attach the program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachPolicy {
    /// Native XDP, or generic XDP where the driver has none.
    NativeOrGeneric,
    /// Generic XDP only.
    Generic,
    /// Load and fill the maps but attach nowhere ([`XdpBackend::test_run`]
    /// still runs the program).
    Detached,
}

/// The mode a port's program runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpMode {
    /// In the driver, before an skb exists.
    Native,
    /// In the core stack, after the skb is built (any interface).
    Generic,
    /// At TC ingress ([`Hook::Tc`]).
    Tc,
    /// Not attached ([`AttachPolicy::Detached`]).
    Detached,
}

impl fmt::Display for XdpMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            XdpMode::Native => "native",
            XdpMode::Generic => "generic",
            XdpMode::Tc => "tc",
            XdpMode::Detached => "detached",
        })
    }
}

/// Runs the program with `BPF_PROG_TEST_RUN` ([`XdpBackend::test_runner`]).
#[derive(Debug)]
pub struct XdpTestRunner {
    prog: OwnedFd,
}

impl XdpTestRunner {
    /// [`XdpBackend::test_run`].
    pub fn run(&self, frame: &[u8], ifindex: u32, queue: u32) -> io::Result<(u32, Vec<u8>)> {
        let r = sys::test_run(self.prog.as_fd(), frame, ifindex, queue)?;
        Ok((r.retval, r.frame))
    }
}

/// What the program did with one frame ([`XdpBackend::take_outcome`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// The last [`STAT_NAMES`] counter it bumped: `hit_*` for a frame an
    /// entry served, `up_*` for one that went up, `drop_*`.
    pub stat: &'static str,
    /// The OpenFlow port of `hit_port` / `drop_no_port`, the ingress port
    /// of `hit_in_port`, the CPU of `hit_cpu`, the XSKMAP key of `up_xsk`.
    pub target: u32,
    /// For a frame outside the class, or a tunnel's frame left to software
    /// (`up_tunnel`): the line of `bpf/offload.bpf.c` whose check declined
    /// it (0 otherwise).
    pub declined_at: u32,
}

/// A port as served: [`XdpBackend::ports`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachedPort {
    /// OpenFlow port number.
    pub ofport: u32,
    /// Interface name.
    pub ifname: String,
    /// Interface index (in the namespace the backend was opened in).
    pub ifindex: u32,
    /// How the program runs there.
    pub mode: XdpMode,
}

/// What [`XdpBackend::open`] needs.
#[derive(Debug, Clone)]
pub struct XdpConfig {
    /// The switch ports to serve (at most 64 with [`MissPath::Xsk`], 256
    /// in all).
    pub ports: Vec<XdpPort>,
    /// Entries that fit (the `flows` map's size).
    pub room: usize,
    /// How to attach ([`AttachPolicy::Generic`] means nothing at the TC
    /// hook).
    pub attach: AttachPolicy,
    /// Which hook.
    pub hook: Hook,
    /// Record each frame's outcome for [`XdpBackend::take_outcome`] (tests;
    /// the recording is removed by the verifier when off).
    pub debug_record: bool,
    /// The switch's tunnel ports (at most 256), each over one of `ports`
    /// (its underlay), with its endpoint's `local_mac` resolved. Where
    /// several tunnels could take a frame, the first in this order does:
    /// the order the software tier gives `offlow_wire::tunnel::classify`.
    pub tunnels: Vec<TunnelPort>,
}

impl XdpConfig {
    /// Serve `ports` with `room` entries, attached natively or generically.
    pub fn new(ports: Vec<XdpPort>, room: usize) -> XdpConfig {
        XdpConfig {
            ports,
            room,
            attach: AttachPolicy::NativeOrGeneric,
            hook: Hook::Xdp,
            debug_record: false,
            tunnels: Vec::new(),
        }
    }
}

/// Why the backend could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum XdpError {
    /// The kernel refused the program; the verifier's log says why.
    #[error("loading the XDP program: {error}\n{log}")]
    Load {
        /// libbpf's error.
        error: String,
        /// What libbpf printed while loading (the verifier log).
        log: String,
    },
    /// The interface has an XDP program already; offlow does not replace
    /// another program.
    #[error("interface {ifname} already has an XDP program (id {prog_id}); detach it first (`ip link set dev {ifname} xdp off`)")]
    Occupied {
        /// The interface.
        ifname: String,
        /// The id of the program on it.
        prog_id: u32,
    },
    /// Attaching, a map update or an interface lookup failed.
    #[error("{what}: {error}")]
    System {
        /// What was being done.
        what: String,
        /// Why it failed.
        error: io::Error,
    },
    /// A configuration the program cannot hold.
    #[error("invalid configuration: {0}")]
    Config(String),
}

fn sys_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> XdpError {
    let what = what.into();
    move |error| XdpError::System { what, error }
}

fn bpf_err(what: impl Into<String>) -> impl FnOnce(libbpf_rs::Error) -> XdpError {
    let what = what.into();
    move |e| XdpError::System {
        what,
        error: io::Error::other(e.to_string()),
    }
}

fn backend_err(what: &str) -> impl FnOnce(libbpf_rs::Error) -> OffloadError + '_ {
    move |e| OffloadError::Backend(format!("{what}: {e}"))
}

/// Ports with AF_XDP sockets: `xsks` gives each 64 queues.
const QUEUES_PER_PORT: u32 = 64;
const MAX_XSK_PORTS: usize = 64;
const MAX_PORTS: usize = 256;
/// `tun_tx` entries (`MAX_TUNNELS` in the C file).
const MAX_TUNNELS: usize = 256;
/// Interfaces with a smaller ifindex are in the `rx_ports` array, the
/// others in the `rx_ports_far` hash (`RX_DIRECT` in the C file).
const RX_DIRECT: u32 = 4096;
/// `worker_cpu` entries (a steering mask has 64 bits).
const MAX_WORKERS: u32 = 64;

/// What libbpf printed during a load: the verifier log on failure. libbpf's
/// print hook is a process-wide function pointer, hence a static.
static LOAD_LOG: Mutex<String> = Mutex::new(String::new());

fn capture_log(_level: PrintLevel, msg: String) {
    if let Ok(mut log) = LOAD_LOG.lock() {
        log.push_str(&msg);
    }
}

/// One attached port.
struct Attached {
    port: XdpPort,
    ifindex: u32,
    mode: XdpMode,
    /// The XDP link; dropping it detaches the program.
    _link: Option<OwnedFd>,
}

/// One installed entry.
#[derive(Debug, Clone, Copy)]
struct Entry {
    prog_slot: u32,
    counter_slot: u32,
    /// The `masks` slot of a masked entry (its keys carry slot + 1).
    mask_slot: Option<u32>,
}

impl Entry {
    /// The id its keys carry in `pad` (0: exact).
    fn mask_id(&self) -> u8 {
        // A slot is below MAX_MASKS (8): the id fits.
        self.mask_slot.map_or(0, |i| i as u8 + 1)
    }
}

/// The program's maps, as owned descriptors (the skeleton that created
/// them is gone: these keep the maps alive, as the program does).
struct Maps {
    flows: MapHandle,
    masks: MapHandle,
    progs: MapHandle,
    counters: MapHandle,
    rx_ports: MapHandle,
    rx_ports_far: MapHandle,
    tx_ports: MapHandle,
    xsks: MapHandle,
    cpus: MapHandle,
    worker_cpu: MapHandle,
    stats: MapHandle,
    debug: MapHandle,
    gp_inner: MapHandle,
    gp_outer: MapHandle,
    tun_rx: MapHandle,
    tun_tx: MapHandle,
}

/// The XDP offload backend (module docs).
pub struct XdpBackend {
    prog: OwnedFd,
    hook: Hook,
    maps: Maps,
    ports: Vec<Attached>,
    caps: Capabilities,
    entries: HashMap<OffloadMatch, Entry>,
    /// OpenFlow port → its index in `tx_ports`.
    tx_index: HashMap<u32, u32>,
    /// The tunnel ports; a tunnel's index here is its `tun_tx` index.
    tunnels: Vec<TunnelPort>,
    free_progs: Vec<u32>,
    /// Program slots unlinked since the last grace period.
    retired_progs: Vec<u32>,
    free_counters: Vec<u32>,
    /// Which mask each slot of `masks` holds.
    masks: MaskSlots,
    ncpus: usize,
}

impl fmt::Debug for XdpBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("XdpBackend")
            .field("describe", &self.describe())
            .finish_non_exhaustive()
    }
}

impl XdpBackend {
    /// Load the program, fill the port maps and attach to every port of
    /// `cfg` (in the calling thread's network namespace). Fails, attaching
    /// nothing, when the kernel refuses the program (with the verifier's
    /// log), an interface is missing, or one already has an XDP program.
    pub fn open(cfg: &XdpConfig) -> Result<XdpBackend, XdpError> {
        if cfg.room == 0 || cfg.room > (u32::MAX / 2) as usize {
            return Err(XdpError::Config(format!("room {} out of range", cfg.room)));
        }
        if cfg.ports.len() > MAX_PORTS {
            return Err(XdpError::Config(format!("more than {MAX_PORTS} ports")));
        }
        if cfg.ports.iter().filter(|p| p.miss == MissPath::Xsk).count() > MAX_XSK_PORTS {
            return Err(XdpError::Config(format!(
                "more than {MAX_XSK_PORTS} AF_XDP ports"
            )));
        }
        check_tunnels(cfg)?;
        if cfg.hook == Hook::Tc {
            if let Some(p) = cfg.ports.iter().find(|p| p.miss == MissPath::Xsk) {
                return Err(XdpError::Config(format!(
                    "{}: the TC hook serves AF_PACKET ports only (an AF_XDP socket takes its \
                     frames from an XDP program, ahead of TC)",
                    p.ifname
                )));
            }
        }
        let room = cfg.room as u32;
        let ncpus = libbpf_rs::num_possible_cpus().map_err(bpf_err("counting CPUs"))?;
        let (prog, maps) = Self::load(room, ncpus as u32, cfg.debug_record, cfg.hook)?;
        let caps = match cfg.hook {
            Hook::Xdp => Capabilities {
                match_fields: CLASS_FIELDS.to_vec(),
                masks: MAX_MASKS,
                actions: ActionKinds::ALL,
                room: cfg.room,
                counters: true,
                ports: cfg.ports.iter().map(|p| p.ofport).collect(),
                tunnels: cfg.tunnels.iter().map(TunnelPort::xdp_support).collect(),
            },
            // A port that carries tunnels sends every frame up at TC
            // (software tells a tunnel's frames from the others), so its
            // entries would never be served: it is not offered.
            Hook::Tc => Capabilities {
                match_fields: CLASS_FIELDS.to_vec(),
                masks: MAX_MASKS,
                actions: ActionKinds::ALL.without(ActionKinds::STEER_CPU),
                room: cfg.room,
                counters: true,
                ports: cfg
                    .ports
                    .iter()
                    .map(|p| p.ofport)
                    .filter(|&n| !cfg.tunnels.iter().any(|t| t.underlay == n))
                    .collect(),
                tunnels: cfg
                    .tunnels
                    .iter()
                    .map(|t| crate::tunnel::TunnelSupport::unsupported(t.ofport, t.underlay))
                    .collect(),
            },
        };
        let mut b = XdpBackend {
            prog,
            hook: cfg.hook,
            maps,
            ports: Vec::new(),
            caps,
            entries: HashMap::new(),
            tx_index: HashMap::new(),
            tunnels: cfg.tunnels.clone(),
            free_progs: (0..2 * room).rev().collect(),
            retired_progs: Vec::new(),
            free_counters: (0..room).rev().collect(),
            masks: MaskSlots::new(),
            ncpus,
        };
        b.add_tunnels()?;
        b.add_ports(cfg)?;
        Ok(b)
    }

    /// Fill `tun_tx` and `tun_rx` (before any port is attached). Several
    /// tunnels taking the same frames: the first keeps the `tun_rx` key.
    fn add_tunnels(&mut self) -> Result<(), XdpError> {
        for (index, t) in (0u32..).zip(&self.tunnels) {
            let rec = layout::tun_tx_record(t);
            self.maps
                .tun_tx
                .update(bytes_of(&index), bytes_of(&rec), MapFlags::ANY)
                .map_err(bpf_err(format!("writing tunnel {}'s template", t.ofport)))?;
            let keys = std::iter::once(layout::tun_addr_key(t)).chain(layout::tun_rx_keys(t));
            for k in keys {
                let taken = self
                    .maps
                    .tun_rx
                    .lookup(bytes_of(&k), MapFlags::ANY)
                    .map_err(bpf_err("reading tun_rx"))?
                    .is_some();
                if !taken {
                    self.maps
                        .tun_rx
                        .update(bytes_of(&k), bytes_of(&t.ofport), MapFlags::NO_EXIST)
                        .map_err(bpf_err(format!("mapping tunnel {}", t.ofport)))?;
                }
            }
        }
        Ok(())
    }

    /// Open the skeleton, size the maps, load (capturing libbpf's output
    /// for the error) and keep owned descriptors of the program and maps.
    fn load(room: u32, ncpus: u32, debug: bool, hook: Hook) -> Result<(OwnedFd, Maps), XdpError> {
        let mut object = MaybeUninit::uninit();
        let mut open = skel::OffloadSkelBuilder::default()
            .open(&mut object)
            .map_err(bpf_err("opening the XDP program"))?;
        // Only the hook's program is verified and loaded; the maps are the
        // same for both.
        open.progs.offlow_offload.set_autoload(hook == Hook::Xdp);
        open.progs.offlow_offload_tc.set_autoload(hook == Hook::Tc);
        if hook == Hook::Tc {
            let ro = open
                .maps
                .rodata_data
                .as_deref_mut()
                .ok_or_else(|| XdpError::Config("the program has no read-only data".into()))?;
            ro.up_mark = TC_UP_MARK;
        }
        let sized = [
            (&mut open.maps.flows, room),
            (&mut open.maps.progs, 2 * room),
            (&mut open.maps.counters, room),
            (&mut open.maps.cpus, ncpus),
        ];
        for (map, n) in sized {
            map.set_max_entries(n)
                .map_err(bpf_err("sizing the XDP maps"))?;
        }
        if debug {
            let ro = open
                .maps
                .rodata_data
                .as_deref_mut()
                .ok_or_else(|| XdpError::Config("the program has no read-only data".into()))?;
            ro.debug_record = 1;
        }
        if let Ok(mut log) = LOAD_LOG.lock() {
            log.clear();
        }
        let prev = libbpf_rs::set_print(Some((PrintLevel::Debug, capture_log)));
        let loaded = open.load();
        libbpf_rs::set_print(prev);
        let skel = loaded.map_err(|e| XdpError::Load {
            error: e.to_string(),
            log: LOAD_LOG.lock().map(|l| l.clone()).unwrap_or_default(),
        })?;
        let h = |m: &libbpf_rs::MapMut<'_>| {
            MapHandle::try_from(m).map_err(bpf_err(format!(
                "duplicating map {}",
                m.name().to_string_lossy()
            )))
        };
        let m = &skel.maps;
        let maps = Maps {
            flows: h(&m.flows)?,
            masks: h(&m.masks)?,
            progs: h(&m.progs)?,
            counters: h(&m.counters)?,
            rx_ports: h(&m.rx_ports)?,
            rx_ports_far: h(&m.rx_ports_far)?,
            tx_ports: h(&m.tx_ports)?,
            xsks: h(&m.xsks)?,
            cpus: h(&m.cpus)?,
            worker_cpu: h(&m.worker_cpu)?,
            stats: h(&m.stats)?,
            debug: h(&m.debug)?,
            gp_inner: h(&m.gp_inner)?,
            gp_outer: h(&m.gp_outer)?,
            tun_rx: h(&m.tun_rx)?,
            tun_tx: h(&m.tun_tx)?,
        };
        // The Rust mirrors of the C records and counters must match what
        // the kernel created from the program's BTF.
        let shapes = [
            (
                "flows key",
                maps.flows.key_size(),
                std::mem::size_of::<types::flow_key>(),
            ),
            (
                "progs value",
                maps.progs.value_size(),
                std::mem::size_of::<types::flow_prog>(),
            ),
            ("counters value", maps.counters.value_size(), 16),
            (
                "masks value",
                maps.masks.value_size(),
                std::mem::size_of::<types::flow_mask>(),
            ),
            ("masks entries", maps.masks.max_entries(), MAX_MASKS),
            (
                "rx_ports value",
                maps.rx_ports.value_size(),
                std::mem::size_of::<types::port_info>(),
            ),
            (
                "rx_ports entries",
                maps.rx_ports.max_entries(),
                RX_DIRECT as usize,
            ),
            ("stats entries", maps.stats.max_entries(), STAT_NAMES.len()),
            (
                "tun_rx key",
                maps.tun_rx.key_size(),
                std::mem::size_of::<types::tun_rx_key>(),
            ),
            (
                "tun_tx value",
                maps.tun_tx.value_size(),
                std::mem::size_of::<types::tun_tx>(),
            ),
            ("tun_tx entries", maps.tun_tx.max_entries(), MAX_TUNNELS),
        ];
        for (what, kernel, ours) in shapes {
            if kernel as usize != ours {
                return Err(XdpError::Config(format!(
                    "{what}: the program has {kernel}, the backend expects {ours}"
                )));
            }
        }
        let prog = match hook {
            Hook::Xdp => skel.progs.offlow_offload.as_fd(),
            Hook::Tc => skel.progs.offlow_offload_tc.as_fd(),
        }
        .try_clone_to_owned()
        .map_err(sys_err("duplicating the program descriptor"))?;
        Ok((prog, maps))
    }

    /// Map every port, then attach to each (refusing interfaces that have
    /// a program). On failure the links made so far are dropped, which
    /// detaches them.
    fn add_ports(&mut self, cfg: &XdpConfig) -> Result<(), XdpError> {
        let mut xsk_base = 0;
        let mut resolved = Vec::with_capacity(cfg.ports.len());
        for (index, p) in (0u32..).zip(&cfg.ports) {
            let ifindex =
                sys::ifindex(&p.ifname).map_err(sys_err(format!("interface {}", p.ifname)))?;
            let info = types::port_info {
                ofport: p.ofport,
                xsk: u32::from(p.miss == MissPath::Xsk),
                xsk_base,
                present: 1,
                underlay: u32::from(cfg.tunnels.iter().any(|t| t.underlay == p.ofport)),
            };
            if p.miss == MissPath::Xsk {
                xsk_base += QUEUES_PER_PORT;
            }
            self.rx_map(ifindex)
                .update(bytes_of(&ifindex), bytes_of(&info), MapFlags::ANY)
                .map_err(bpf_err(format!("mapping {}", p.ifname)))?;
            self.maps
                .tx_ports
                .update(bytes_of(&index), bytes_of(&ifindex), MapFlags::ANY)
                .map_err(bpf_err(format!("adding {} to tx_ports", p.ifname)))?;
            // A repeated OpenFlow number outputs to its last interface.
            self.tx_index.insert(p.ofport, index);
            resolved.push((p.clone(), ifindex));
        }
        // Refuse before attaching anywhere. (tcx links stack with other
        // programs at TC ingress; nothing to refuse there.)
        if cfg.attach != AttachPolicy::Detached && self.hook == Hook::Xdp {
            for (p, ifindex) in &resolved {
                let q = Xdp::new(self.prog.as_fd())
                    .query(*ifindex as i32, XdpFlags::NONE)
                    .map_err(bpf_err(format!("querying XDP on {}", p.ifname)))?;
                let id = [q.prog_id, q.drv_prog_id, q.skb_prog_id, q.hw_prog_id]
                    .into_iter()
                    .find(|&id| id != 0);
                if let Some(prog_id) = id {
                    return Err(XdpError::Occupied {
                        ifname: p.ifname.clone(),
                        prog_id,
                    });
                }
            }
        }
        for (port, ifindex) in resolved {
            let (link, mode) =
                match cfg.attach {
                    AttachPolicy::Detached => (None, XdpMode::Detached),
                    _ if self.hook == Hook::Tc => (
                        Some(sys::link_tcx_ingress(self.prog.as_fd(), ifindex).map_err(
                            sys_err(format!("attaching the TC program to {}", port.ifname)),
                        )?),
                        XdpMode::Tc,
                    ),
                    AttachPolicy::Generic => (
                        Some(self.link(&port.ifname, ifindex, sys::XDP_FLAGS_SKB_MODE)?),
                        XdpMode::Generic,
                    ),
                    AttachPolicy::NativeOrGeneric => {
                        match sys::link_xdp(self.prog.as_fd(), ifindex, sys::XDP_FLAGS_DRV_MODE) {
                            Ok(l) => (Some(l), XdpMode::Native),
                            // EOPNOTSUPP (no ndo_bpf) or a driver that refuses
                            // this program: generic XDP works on any interface.
                            Err(_) => (
                                Some(self.link(&port.ifname, ifindex, sys::XDP_FLAGS_SKB_MODE)?),
                                XdpMode::Generic,
                            ),
                        }
                    }
                };
            self.ports.push(Attached {
                port,
                ifindex,
                mode,
                _link: link,
            });
        }
        Ok(())
    }

    /// The map holding `ifindex`'s port record.
    fn rx_map(&self, ifindex: u32) -> &MapHandle {
        if ifindex < RX_DIRECT {
            &self.maps.rx_ports
        } else {
            &self.maps.rx_ports_far
        }
    }

    /// `ofport`'s index in `tx_ports` (admission guarantees a port; an
    /// unknown one gets an index holding no interface: `drop_no_port`).
    fn tx_index_of(&self, ofport: u32) -> u32 {
        self.tx_index
            .get(&ofport)
            .copied()
            .unwrap_or(MAX_PORTS as u32 - 1)
    }

    fn link(&self, ifname: &str, ifindex: u32, flags: u32) -> Result<OwnedFd, XdpError> {
        sys::link_xdp(self.prog.as_fd(), ifindex, flags).map_err(|error| {
            match error.raw_os_error() {
                Some(libc::EBUSY) | Some(libc::EEXIST) => XdpError::Occupied {
                    ifname: ifname.to_string(),
                    prog_id: 0,
                },
                _ => XdpError::System {
                    what: format!("attaching XDP to {ifname}"),
                    error,
                },
            }
        })
    }

    /// The hook the program runs at.
    pub fn hook(&self) -> Hook {
        self.hook
    }

    /// The program's descriptor (for `bpftool`-style inspection and tests).
    pub fn prog_fd(&self) -> BorrowedFd<'_> {
        self.prog.as_fd()
    }

    /// The kernel's id of the program.
    pub fn prog_id(&self) -> io::Result<u32> {
        sys::prog_id(self.prog.as_fd())
    }

    /// How many instructions the kernel's verifier processed to accept the
    /// program (`verified_insns`, 5.16; 0 before): the figure to watch when
    /// the program grows (the limit is 1M).
    pub fn verified_insns(&self) -> io::Result<u32> {
        sys::verified_insns(self.prog.as_fd())
    }

    /// The XSKMAP, for AF_XDP sockets ([`XdpBackend::register_xsk`]).
    pub fn xsk_map_fd(&self) -> BorrowedFd<'_> {
        self.maps.xsks.as_fd()
    }

    /// The XSKMAP key of `ifindex`'s queue 0 (queue q is this + q), for
    /// whoever registers the port's sockets through a copy of
    /// [`Self::xsk_map_fd`] (the switch's packet workers, which open and
    /// re-open them).
    pub fn xsk_key_base(&self, ifindex: u32) -> Result<u32, XdpError> {
        self.xsk_key(ifindex, 0)
    }

    /// The ports served, with their interface index and the mode the
    /// program runs in on each.
    pub fn ports(&self) -> Vec<AttachedPort> {
        self.ports
            .iter()
            .map(|a| AttachedPort {
                ofport: a.port.ofport,
                ifname: a.port.ifname.clone(),
                ifindex: a.ifindex,
                mode: a.mode,
            })
            .collect()
    }

    /// Send misses of `ifindex`'s receive queue `queue` to the AF_XDP socket
    /// `xsk` (bound to that interface and queue). The port must have been
    /// configured with [`MissPath::Xsk`].
    pub fn register_xsk(
        &self,
        ifindex: u32,
        queue: u32,
        xsk: BorrowedFd<'_>,
    ) -> Result<(), XdpError> {
        let key = self.xsk_key(ifindex, queue)?;
        let fd = std::os::fd::AsRawFd::as_raw_fd(&xsk) as u32;
        self.maps
            .xsks
            .update(bytes_of(&key), bytes_of(&fd), MapFlags::ANY)
            .map_err(bpf_err("inserting into the XSKMAP"))
    }

    /// Stop sending misses of `ifindex` queue `queue` to a socket.
    pub fn unregister_xsk(&self, ifindex: u32, queue: u32) -> Result<(), XdpError> {
        let key = self.xsk_key(ifindex, queue)?;
        self.maps
            .xsks
            .delete(bytes_of(&key))
            .map_err(bpf_err("removing from the XSKMAP"))
    }

    fn xsk_key(&self, ifindex: u32, queue: u32) -> Result<u32, XdpError> {
        if queue >= QUEUES_PER_PORT {
            return Err(XdpError::Config(format!(
                "queue {queue}: AF_XDP ports have {QUEUES_PER_PORT} queues"
            )));
        }
        let v = self
            .rx_map(ifindex)
            .lookup(bytes_of(&ifindex), MapFlags::ANY)
            .map_err(bpf_err("reading rx_ports"))?
            .unwrap_or_default();
        let word = |i: usize| {
            v.get(i..i + 4)
                .map_or(0, |b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        };
        if word(12) == 0 {
            return Err(XdpError::Config(format!("ifindex {ifindex} is not a port")));
        }
        if word(4) == 0 {
            return Err(XdpError::Config(format!(
                "ifindex {ifindex} sends misses to the stack, not to AF_XDP"
            )));
        }
        Ok(word(8) + queue)
    }

    /// Steer frames whose mask holds `worker` to CPU `cpu` (a cpumap entry
    /// with a `qsize`-frame queue; 0 picks 2048). The cpumap entry exists
    /// before the worker points at it.
    pub fn set_worker_cpu(&mut self, worker: u32, cpu: u32, qsize: u32) -> Result<(), XdpError> {
        if worker >= MAX_WORKERS || cpu as usize >= self.ncpus {
            return Err(XdpError::Config(format!(
                "worker {worker} / CPU {cpu} out of range"
            )));
        }
        let val = types::bpf_cpumap_val {
            qsize: if qsize == 0 { 2048 } else { qsize },
            ..Default::default()
        };
        self.maps
            .cpus
            .update(bytes_of(&cpu), bytes_of(&val), MapFlags::ANY)
            .map_err(bpf_err(format!("adding CPU {cpu} to the cpumap")))?;
        let one = cpu + 1;
        self.maps
            .worker_cpu
            .update(bytes_of(&worker), bytes_of(&one), MapFlags::ANY)
            .map_err(bpf_err("writing worker_cpu"))
    }

    /// Stop steering to `worker`'s CPU: its frames go up until it has one
    /// again. Returns after frames in flight have been served.
    pub fn clear_worker_cpu(&mut self, worker: u32) -> Result<(), XdpError> {
        if worker >= MAX_WORKERS {
            return Err(XdpError::Config(format!("worker {worker} out of range")));
        }
        let zero = 0u32;
        self.maps
            .worker_cpu
            .update(bytes_of(&worker), bytes_of(&zero), MapFlags::ANY)
            .map_err(bpf_err("writing worker_cpu"))?;
        self.grace_period()
            .map_err(|e| XdpError::Config(format!("waiting for frames in flight: {e}")))
    }

    /// The program's named counters, summed over CPUs.
    pub fn stats(&self) -> Result<XdpStats, XdpError> {
        let mut s = XdpStats::default();
        for (i, v) in s.values.iter_mut().enumerate() {
            let k = i as u32;
            *v = self
                .maps
                .stats
                .lookup_percpu(bytes_of(&k), MapFlags::ANY)
                .map_err(bpf_err("reading stats"))?
                .unwrap_or_default()
                .iter()
                .map(|b| u64::from_ne_bytes(b[..8].try_into().unwrap_or([0; 8])))
                .sum();
        }
        Ok(s)
    }

    /// Wait until no program run that began before this call is still
    /// running (module docs): `membarrier(MEMBARRIER_CMD_GLOBAL)`, or where
    /// the kernel refuses it (nohz_full), a map-in-map update, after which
    /// the kernel itself calls `synchronize_rcu()` (kernel/bpf/syscall.c,
    /// `maybe_wait_bpf_programs`).
    pub fn grace_period(&self) -> Result<(), OffloadError> {
        if sys::membarrier_global().is_ok() {
            return Ok(());
        }
        let zero = 0u32;
        let inner = std::os::fd::AsRawFd::as_raw_fd(&self.maps.gp_inner.as_fd()) as u32;
        self.maps
            .gp_outer
            .update(bytes_of(&zero), bytes_of(&inner), MapFlags::ANY)
            .map_err(backend_err("waiting for a grace period"))
    }

    /// Run the program once on `frame` as if received on interface
    /// `ifindex` (which must exist in this thread's network namespace),
    /// queue `queue`: the XDP action and the frame as the program left it
    /// (`BPF_PROG_TEST_RUN`; redirects are decided, not carried out).
    ///
    /// At [`Hook::Tc`]: a TC action ([`tc_action`]); `queue` is ignored, and
    /// the socket buffer carries no VLAN metadata (a tag stays in the
    /// bytes, where the TC program sends a frame up).
    pub fn test_run(&self, frame: &[u8], ifindex: u32, queue: u32) -> io::Result<(u32, Vec<u8>)> {
        let r = match self.hook {
            Hook::Xdp => sys::test_run(self.prog.as_fd(), frame, ifindex, queue)?,
            Hook::Tc => sys::test_run_skb(self.prog.as_fd(), frame, ifindex, 0)?,
        };
        Ok((r.retval, r.frame))
    }

    /// At [`Hook::Tc`]: run the program on `frame` as the second pass of a
    /// frame it sent up (carrying [`TC_UP_MARK`]).
    pub fn test_run_marked(&self, frame: &[u8], ifindex: u32) -> io::Result<(u32, Vec<u8>)> {
        let r = sys::test_run_skb(self.prog.as_fd(), frame, ifindex, TC_UP_MARK)?;
        Ok((r.retval, r.frame))
    }

    /// Run the program `repeat` times on `frame` in the kernel
    /// (`BPF_PROG_TEST_RUN` with a repeat count): its return value and the
    /// kernel's mean time per run in ns. What a frame costs the program
    /// (the redirect itself is not carried out in a test run); see
    /// `examples/prog_cost.rs`.
    pub fn time_run(
        &self,
        frame: &[u8],
        ifindex: u32,
        queue: u32,
        repeat: u32,
    ) -> io::Result<(u32, u32)> {
        let (r, ns) = sys::test_run_repeat(self.prog_fd(), frame, ifindex, queue, repeat)?;
        Ok((r.retval, ns))
    }

    /// A handle that runs the program from another thread (while this one
    /// changes entries).
    pub fn test_runner(&self) -> io::Result<XdpTestRunner> {
        Ok(XdpTestRunner {
            prog: self.prog.try_clone()?,
        })
    }

    /// With [`XdpConfig::debug_record`]: what the last frame run on any
    /// CPU did, and forget it (`None` if no frame ran since the last call).
    /// Meant for [`XdpBackend::test_run`], one frame at a time.
    pub fn take_outcome(&self) -> Result<Option<Outcome>, XdpError> {
        let zero = 0u32;
        let per_cpu = self
            .maps
            .debug
            .lookup_percpu(bytes_of(&zero), MapFlags::ANY)
            .map_err(bpf_err("reading the debug record"))?
            .unwrap_or_default();
        let mut found = None;
        for rec in &per_cpu {
            let word = |i: usize| u32::from_ne_bytes([rec[i], rec[i + 1], rec[i + 2], rec[i + 3]]);
            if word(0) != 0 {
                found = Some(Outcome {
                    stat: STAT_NAMES.get(word(4) as usize).copied().unwrap_or("?"),
                    target: word(8),
                    declined_at: word(12),
                });
            }
        }
        let cleared: Vec<Vec<u8>> = per_cpu.iter().map(|r| vec![0u8; r.len()]).collect();
        self.maps
            .debug
            .update_percpu(bytes_of(&zero), &cleared, MapFlags::ANY)
            .map_err(bpf_err("clearing the debug record"))?;
        Ok(found)
    }

    // ---- entries ----

    /// A grace period has passed since every retirement so far: retired
    /// program and mask slots can be reused.
    fn recycle(&mut self) {
        self.free_progs.append(&mut self.retired_progs);
        self.masks.recycle();
    }

    fn alloc_prog_slot(&mut self) -> Result<u32, OffloadError> {
        if self.free_progs.is_empty() && !self.retired_progs.is_empty() {
            // More replacements in one batch than spare slots: pay a grace
            // period now rather than fail.
            self.grace_period()?;
            self.recycle();
        }
        self.free_progs
            .pop()
            .ok_or_else(|| OffloadError::Backend("no free program slot".into()))
    }

    /// The `masks` slot for one more entry of `mask`: the slot that holds
    /// it, or a free one written with it.
    ///
    /// Order, and why a torn read is harmless: the array element is copied
    /// in place by the kernel, so a frame reading it during the write may
    /// see a mix of the old and the new mask (or in-use flag) and build a
    /// key no mask would give. That key carries this slot's id, and no
    /// entry with that id exists: the slot is free only once all its
    /// entries were unlinked, and this entry is published after this call
    /// returns. The grace period after the write closes the remaining gap:
    /// a frame that read the element before or during the write could do
    /// its `flows` lookup a moment later, after the new entry is
    /// published, and find it under a key the new mask never made; waiting
    /// until every frame that began before the wait has ended leaves only
    /// frames that read the whole new mask. It costs one wait per new
    /// distinct mask, not per entry.
    fn hold_mask(&mut self, mask: &OffloadMask) -> Result<u32, OffloadError> {
        if let Some(i) = self.masks.find(mask) {
            self.masks.hold(i);
            return Ok(i);
        }
        if self.masks.needs_recycle() {
            self.grace_period()?;
            self.recycle();
        }
        let i = self.masks.take(mask).ok_or(Refusal::MaskRoom(MAX_MASKS))?;
        let rec = layout::mask_record(mask);
        let written = self
            .maps
            .masks
            .update(bytes_of(&i), bytes_of(&rec), MapFlags::ANY)
            .map_err(backend_err("writing a mask"))
            .and_then(|()| self.grace_period());
        if let Err(e) = written {
            self.clear_mask_slot(i);
            self.masks.unused(i);
            return Err(e);
        }
        self.masks.hold(i);
        Ok(i)
    }

    /// An entry of mask slot `i` was unlinked; the last one clears the
    /// slot (frames stop looking under it) and retires it until the grace
    /// period the removal waits for has passed.
    fn release_mask(&mut self, i: u32) {
        if self.masks.release(i) {
            self.clear_mask_slot(i);
        }
    }

    /// Mark mask slot `i` unused in the map. Only ever done to a slot no
    /// entry carries the id of, so a failure leaves nothing wrong: the
    /// lookup keeps trying a mask under which nothing is found (one hash
    /// lookup per miss) until the slot is written again.
    fn clear_mask_slot(&mut self, i: u32) {
        let unused = types::flow_mask::default();
        // Harmless if it fails (above); the caller has nothing to undo.
        let _ = self
            .maps
            .masks
            .update(bytes_of(&i), bytes_of(&unused), MapFlags::ANY);
    }

    /// Whether the program can serve masked entry `m` with `program`
    /// beyond what the capabilities say: an output to a `key=flow` tunnel
    /// without a set-field sends the frame's own `tunnel_id`, which the
    /// record fixes from the entry's key, so the mask must match all of it
    /// when frames arrive with varying keys (on a tunnel port).
    fn admits_masked(&self, m: &OffloadMatch, program: &OffloadProgram) -> Result<(), Refusal> {
        let Verdict::Port(p) = program.verdict else {
            return Ok(());
        };
        let is_tunnel = |port: u32| self.tunnels.iter().find(|t| t.ofport == port);
        match is_tunnel(p) {
            Some(t)
                if !m.is_exact()
                    && t.endpoint.key == KeyMode::Flow
                    && program.tunnel_id.is_none()
                    && m.mask.tunnel_id != u64::MAX
                    && is_tunnel(m.key.in_port).is_some() =>
            {
                Err(Refusal::Tunnel(
                    p,
                    "a masked entry would send one frame's tunnel key for all",
                ))
            }
            _ => Ok(()),
        }
    }

    fn read_counters(&self, slot: u32) -> Result<EntryCounters, OffloadError> {
        let per_cpu = self
            .maps
            .counters
            .lookup_percpu(bytes_of(&slot), MapFlags::ANY)
            .map_err(backend_err("reading counters"))?
            .unwrap_or_default();
        let mut c = EntryCounters::default();
        for v in per_cpu {
            let word = |i: usize| u64::from_ne_bytes(v[i..i + 8].try_into().unwrap_or([0; 8]));
            c.packets = c.packets.wrapping_add(word(0));
            c.bytes = c.bytes.wrapping_add(word(8));
        }
        Ok(c)
    }

    /// Publish `program` for `m` without waiting (but for a new mask's
    /// slot: [`Self::hold_mask`]). Returns whether a program slot was
    /// retired (a replacement: the caller must wait). A failure leaves
    /// everything as it was: slots taken are given back, a mask slot taken
    /// for this entry is released.
    fn install_nowait(
        &mut self,
        m: &OffloadMatch,
        program: &OffloadProgram,
    ) -> Result<bool, OffloadError> {
        self.caps.admits(m, program)?;
        self.admits_masked(m, program)?;
        let key = &m.key;
        if let Some(e) = self.entries.get(m).copied() {
            // A replacement: same key, same mask slot (held by the entry).
            let krec = layout::key_record(key, e.mask_id());
            let slot = self.alloc_prog_slot()?;
            let rec = layout::prog_record(key, e.mask_id(), program, e.counter_slot, &*self);
            let published = self
                .maps
                .progs
                .update(bytes_of(&slot), bytes_of(&rec), MapFlags::ANY)
                .and_then(|()| {
                    self.maps
                        .flows
                        .update(bytes_of(&krec), bytes_of(&slot), MapFlags::EXIST)
                });
            if let Err(err) = published {
                // `flows` still points at the old slot: nothing changed.
                self.free_progs.push(slot);
                return Err(OffloadError::Backend(format!("replacing an entry: {err}")));
            }
            self.retired_progs.push(e.prog_slot);
            self.entries.insert(
                *m,
                Entry {
                    prog_slot: slot,
                    ..e
                },
            );
            return Ok(true);
        }
        // The model backend's order of refusals: the mask room, then room.
        if !m.is_exact() && !self.masks.has_room(&m.mask) {
            return Err(Refusal::MaskRoom(MAX_MASKS).into());
        }
        if self.entries.len() >= self.caps.room {
            return Err(Refusal::Full(self.caps.room).into());
        }
        let counter_slot = self
            .free_counters
            .pop()
            .ok_or_else(|| OffloadError::Backend("no free counter slot".into()))?;
        let slot = match self.alloc_prog_slot() {
            Ok(s) => s,
            Err(e) => {
                self.free_counters.push(counter_slot);
                return Err(e);
            }
        };
        // The mask is in its slot before any key with the slot's id exists.
        let mask_slot = if m.is_exact() {
            None
        } else {
            match self.hold_mask(&m.mask) {
                Ok(i) => Some(i),
                Err(e) => {
                    self.free_counters.push(counter_slot);
                    self.free_progs.push(slot);
                    return Err(e);
                }
            }
        };
        let e = Entry {
            prog_slot: slot,
            counter_slot,
            mask_slot,
        };
        let krec = layout::key_record(key, e.mask_id());
        let zeros = vec![vec![0u8; 16]; self.ncpus];
        let rec = layout::prog_record(key, e.mask_id(), program, counter_slot, &*self);
        let published = self
            .maps
            .counters
            .update_percpu(bytes_of(&counter_slot), &zeros, MapFlags::ANY)
            .and_then(|()| {
                self.maps
                    .progs
                    .update(bytes_of(&slot), bytes_of(&rec), MapFlags::ANY)
            })
            .and_then(|()| {
                self.maps
                    .flows
                    .update(bytes_of(&krec), bytes_of(&slot), MapFlags::NO_EXIST)
            });
        if let Err(err) = published {
            self.free_counters.push(counter_slot);
            self.free_progs.push(slot);
            if let Some(i) = mask_slot {
                self.release_mask(i);
            }
            return Err(OffloadError::Backend(format!("installing an entry: {err}")));
        }
        self.entries.insert(*m, e);
        Ok(false)
    }

    /// Unlink `m` without waiting; its slots, to free after a grace period
    /// (a mask slot it was the last entry of is retired here).
    fn unlink(&mut self, m: &OffloadMatch) -> Result<Entry, OffloadError> {
        let e = *self.entries.get(m).ok_or(OffloadError::NotFound)?;
        self.maps
            .flows
            .delete(bytes_of(&layout::key_record(&m.key, e.mask_id())))
            .map_err(backend_err("removing an entry"))?;
        self.entries.remove(m);
        if let Some(i) = e.mask_slot {
            self.release_mask(i);
        }
        Ok(e)
    }

    /// After a grace period: the final counters of unlinked entries, and
    /// their slots freed.
    fn finish_removal(&mut self, e: Entry) -> Result<EntryCounters, OffloadError> {
        let c = self.read_counters(e.counter_slot);
        self.free_progs.push(e.prog_slot);
        self.free_counters.push(e.counter_slot);
        c
    }
}

impl layout::Outputs for XdpBackend {
    fn tx_index(&self, ofport: u32) -> u32 {
        self.tx_index_of(ofport)
    }

    fn tunnel(&self, ofport: u32) -> Option<(u32, &TunnelPort)> {
        (0u32..)
            .zip(&self.tunnels)
            .find(|(_, t)| t.ofport == ofport)
    }
}

/// Tunnels the program can hold: each over one of the ports, numbered
/// apart from them and from each other.
fn check_tunnels(cfg: &XdpConfig) -> Result<(), XdpError> {
    if cfg.tunnels.len() > MAX_TUNNELS {
        return Err(XdpError::Config(format!("more than {MAX_TUNNELS} tunnels")));
    }
    let port = |n: u32| cfg.ports.iter().any(|p| p.ofport == n);
    for (i, t) in cfg.tunnels.iter().enumerate() {
        if !port(t.underlay) {
            return Err(XdpError::Config(format!(
                "tunnel port {}: underlay {} is not a port of the backend",
                t.ofport, t.underlay
            )));
        }
        if port(t.ofport) || cfg.tunnels[..i].iter().any(|u| u.ofport == t.ofport) {
            return Err(XdpError::Config(format!(
                "tunnel port {}: the number is taken",
                t.ofport
            )));
        }
    }
    Ok(())
}

impl OffloadBackend for XdpBackend {
    fn capabilities(&self) -> &Capabilities {
        &self.caps
    }

    fn named_counters(&mut self) -> Vec<(&'static str, u64)> {
        match self.stats() {
            Ok(s) => s.iter().collect(),
            Err(_) => Vec::new(),
        }
    }

    fn describe(&self) -> String {
        let ports: Vec<String> = self
            .ports
            .iter()
            .map(|a| format!("{}={} {}", a.port.ifname, a.port.ofport, a.mode))
            .collect();
        format!(
            "{} on {} (room for {} entries)",
            self.hook,
            ports.join(", "),
            self.caps.room
        )
    }

    fn install(&mut self, m: &OffloadMatch, program: &OffloadProgram) -> Result<(), OffloadError> {
        if self.install_nowait(m, program)? {
            self.grace_period()?;
            self.recycle();
        }
        Ok(())
    }

    fn install_batch(
        &mut self,
        entries: &[(OffloadMatch, OffloadProgram)],
    ) -> Vec<Result<(), OffloadError>> {
        let mut wait = false;
        let mut out: Vec<Result<(), OffloadError>> = entries
            .iter()
            .map(|(k, p)| self.install_nowait(k, p).map(|w| wait |= w))
            .collect();
        if wait {
            if let Err(e) = self.grace_period() {
                // Not known to be unused: keep the retired slots out of
                // circulation and report the failure on every replacement.
                for r in out.iter_mut().filter(|r| r.is_ok()) {
                    *r = Err(e.clone());
                }
                return out;
            }
            self.recycle();
        }
        out
    }

    fn remove(&mut self, m: &OffloadMatch) -> Result<EntryCounters, OffloadError> {
        let e = self.unlink(m)?;
        self.grace_period()?;
        self.recycle();
        self.finish_removal(e)
    }

    fn remove_batch(&mut self, keys: &[OffloadMatch]) -> Vec<Result<EntryCounters, OffloadError>> {
        let unlinked: Vec<Result<Entry, OffloadError>> =
            keys.iter().map(|k| self.unlink(k)).collect();
        if let Err(e) = self.grace_period() {
            return unlinked
                .into_iter()
                .map(|r| r.and(Err(e.clone())))
                .collect();
        }
        self.recycle();
        unlinked
            .into_iter()
            .map(|r| r.and_then(|e| self.finish_removal(e)))
            .collect()
    }

    fn counters(&mut self, m: &OffloadMatch) -> Result<EntryCounters, OffloadError> {
        let e = *self.entries.get(m).ok_or(OffloadError::NotFound)?;
        self.read_counters(e.counter_slot)
    }

    fn all_counters(&mut self, visit: &mut dyn FnMut(&OffloadMatch, EntryCounters)) {
        for (k, e) in &self.entries {
            if let Ok(c) = self.read_counters(e.counter_slot) {
                visit(k, c);
            }
        }
    }

    fn len(&self) -> usize {
        self.entries.len()
    }
}

/// Whether the XDP backend can be tried here: root (CAP_BPF and
/// CAP_NET_ADMIN). Tests skip with a notice otherwise.
pub fn privileged() -> bool {
    sys::is_root()
}
