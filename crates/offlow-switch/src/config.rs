//! What a switch is started with: [`SwitchConfig`], already resolved and
//! checked. Reading it from flags or a file (and naming the line of a bad
//! one) is the embedder's job: the `offlow` binary does it for `offlow run`.
//!
//! Endpoints follow Open vSwitch's syntax when shown: `tcp:HOST:PORT` is
//! an active connection to a controller (reconnected with backoff),
//! `ptcp:PORT:ADDR` a listening socket.
//!
//! Thread-safety: plain data.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use offlow_datapath::SteeringTable;
pub use offlow_io::RxRing;

/// Default number of flow tables.
pub const DEFAULT_TABLES: u16 = 8;
/// Default datapath id.
pub const DEFAULT_DPID: u64 = 1;
/// Default microflow cache entries per worker.
pub const DEFAULT_CACHE_SIZE: usize = 65536;

/// A connection endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// `tcp:HOST:PORT`: connect to a controller.
    Active {
        /// Host name or address (brackets removed).
        host: String,
        /// TCP port.
        port: u16,
    },
    /// `ptcp:PORT[:ADDR]`: accept controllers on this address.
    Passive(SocketAddr),
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Active { host, port } if host.contains(':') => {
                write!(f, "tcp:[{host}]:{port}")
            }
            Endpoint::Active { host, port } => write!(f, "tcp:{host}:{port}"),
            Endpoint::Passive(a) => write!(f, "ptcp:{}:{}", a.port(), a.ip()),
        }
    }
}

/// What the switch does without a controller (Open vSwitch's fail modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailMode {
    /// Only the flow tables decide; nothing is added by the switch.
    #[default]
    Secure,
    /// While no active controller (`tcp:`) is connected, the switch learns
    /// MAC addresses and installs its own forwarding flows (cookie
    /// [`crate::standalone::COOKIE`]); they are removed when one connects.
    Standalone,
}

/// One data port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortConfig {
    /// The Linux interface (for a capture port: a name for logs and
    /// port-desc).
    pub name: String,
    /// Its OpenFlow port number.
    pub number: u32,
    /// What carries its frames.
    pub kind: PortKind,
}

/// What carries a port's frames.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortKind {
    /// A Linux interface through AF_PACKET.
    AfPacket,
    /// A Linux interface through AF_XDP (one socket per receive queue;
    /// native XDP where the driver has it, generic otherwise). A local
    /// sender's offloaded checksums arrive unfinished and unflagged on
    /// AF_XDP: turn transmit checksum offload off on veth peers
    /// (`ethtool -K IF tx off`).
    AfXdp,
    /// Capture files: frames of `input` are replayed once as received;
    /// transmitted frames are written to `output`.
    Pcap {
        /// Capture to replay.
        input: Option<PathBuf>,
        /// Capture to write.
        output: Option<PathBuf>,
    },
    /// A tunnel (Open vSwitch's `type=gre` / `type=vxlan` interfaces): a
    /// logical port whose frames arrive encapsulated on another port (the
    /// underlay), are decapsulated there and enter the pipeline on this
    /// port with the key as `tunnel_id`; an output to it is encapsulated
    /// and sent on the underlay. See [`offlow_wire::tunnel`].
    Tunnel(TunnelConfig),
}

impl PortKind {
    /// Backed by a Linux interface, which may come and go (AF_PACKET or
    /// AF_XDP); capture and tunnel ports are not.
    pub fn is_interface(&self) -> bool {
        matches!(self, PortKind::AfPacket | PortKind::AfXdp)
    }
}

/// A tunnel port's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TunnelConfig {
    /// Encapsulation, addresses, key, checksums and the outer Ethernet
    /// addresses (static: the next hop's address is configured, not
    /// resolved).
    pub endpoint: offlow_wire::tunnel::Endpoint,
    /// OpenFlow number of the port the encapsulated frames use (an
    /// interface or capture port of this switch, not a tunnel).
    pub underlay: u32,
    /// `endpoint.local_mac` is not configured: use the underlay
    /// interface's address, read when the switch starts.
    pub local_mac_from_underlay: bool,
}

/// How long an idle worker keeps polling its ports after its last frame
/// before it sleeps in `poll(2)` ([`IdlePoll::Adaptive`]). Measured, not
/// guessed: see docs/bench-journal.md, issue 23 (ping through the switch
/// with 0, 10, 50 and 200 µs, and the CPU each costs: at 400 frames/s,
/// 2.0, 2.6 and 5.6% of a core for 0, 50 and 200 µs; busy polling 100%).
pub const DEFAULT_IDLE_SPIN: Duration = Duration::from_micros(50);

/// How an idle packet worker waits for frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdlePoll {
    /// Keep polling the ports (no system call) for `spin` after the last
    /// frame, then sleep in `poll(2)` on them until a frame (or at most
    /// [`crate::dataplane::IDLE_SLEEP`]). A frame that arrives while the
    /// worker spins, such as the reply to what it just forwarded, is
    /// taken at once; one that arrives while it sleeps waits for the
    /// scheduler to wake it (tens of µs).
    Adaptive {
        /// How long to keep polling after the last frame.
        spin: Duration,
    },
    /// Do not sleep, like Open vSwitch's PMD threads: each worker keeps its
    /// core at 100% whether frames arrive or not, and takes a frame as soon
    /// as the port has it; while it finds that core shared with other work
    /// (see [`crate::dataplane::CONTENDED_WAIT`]) it spins and sleeps as
    /// `Adaptive` does, for [`crate::dataplane::CONTENDED_HOLD`] at a time.
    Busy,
}

impl Default for IdlePoll {
    fn default() -> Self {
        IdlePoll::Adaptive {
            spin: DEFAULT_IDLE_SPIN,
        }
    }
}

/// How the packet workers receive: the AF_PACKET ring layout and how an
/// idle worker waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Receive {
    /// The receive ring of AF_PACKET ports.
    pub af_packet_ring: RxRing,
    /// What an idle worker does.
    pub idle: IdlePoll,
}

/// A flow installed before any port receives.
#[derive(Debug, Clone)]
pub struct InitialFlow {
    /// Where it was written (`FILE:LINE`), for the error if it is refused.
    pub origin: String,
    /// The flow-mod.
    pub flow_mod: offlow_pipeline::FlowMod,
}

/// A group installed before any port receives (before the flows, which
/// may use it).
#[derive(Debug, Clone)]
pub struct InitialGroup {
    /// Where it was written (`FILE:LINE`), for the error if it is refused.
    pub origin: String,
    /// The group-mod (an ADD).
    pub group_mod: offlow_pipeline::group::GroupMod,
}

/// A switch's resolved configuration.
#[derive(Debug, Clone)]
pub struct SwitchConfig {
    /// Datapath id.
    pub dpid: u64,
    /// Flow tables.
    pub tables: u16,
    /// Passive endpoints.
    pub listen: Vec<Endpoint>,
    /// Active endpoints.
    pub controllers: Vec<Endpoint>,
    /// Data ports.
    pub ports: Vec<PortConfig>,
    /// Namespace the ports are opened in.
    pub netns: Option<String>,
    /// Packet worker threads (at least 1).
    pub workers: usize,
    /// Cores to pin workers to (empty: not pinned).
    pub cores: Vec<usize>,
    /// Microflow cache entries per worker.
    pub cache_size: usize,
    /// Behaviour without a controller.
    pub fail_mode: FailMode,
    /// Groups installed at start, in order, before the flows.
    pub groups: Vec<InitialGroup>,
    /// Flows installed at start, in order.
    pub flows: Vec<InitialFlow>,
    /// Which workers process which packets (empty: every worker takes
    /// what its ports give it).
    pub steering: SteeringTable,
    /// The offload tier.
    pub offload: Offload,
    /// How the workers receive.
    pub receive: Receive,
}

/// Whether (and how) hot flows are offloaded.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Offload {
    /// No offload tier: every frame takes the userspace path.
    #[default]
    Off,
    /// A kernel program on every interface port serves the hot flows (at
    /// the hook [`OffloadOptions::hook`] names).
    On(OffloadOptions),
}

/// The offload tier's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffloadOptions {
    /// Entries the backend holds at most.
    pub room: usize,
    /// Placement thresholds.
    pub placement: offlow_offload::PlacementConfig,
    /// Each worker samples one received frame in this many (on average).
    pub sample_every: u32,
    /// Where the program runs: XDP (the default: every action, AF_XDP
    /// ports) or TC ingress (AF_PACKET ports; no tunnels or CPU steering;
    /// on veths, no conversion of each frame to an XDP frame and back).
    pub hook: offlow_offload::xdp::Hook,
    /// Attach in generic (SKB) mode even where the driver has native XDP.
    pub generic: bool,
    /// Flows matching these go down as soon as they are seen, whatever
    /// their rate (room and capabilities permitting), and stay down.
    pub pin_down: Vec<offlow_flow::Match>,
    /// Flows matching these never go down.
    pub pin_up: Vec<offlow_flow::Match>,
}

impl Default for OffloadOptions {
    /// 65,536 entries, the default thresholds, one frame in 16.
    fn default() -> Self {
        OffloadOptions {
            room: 65_536,
            placement: offlow_offload::PlacementConfig::default(),
            sample_every: 16,
            hook: offlow_offload::xdp::Hook::Xdp,
            generic: false,
            pin_down: Vec::new(),
            pin_up: Vec::new(),
        }
    }
}

impl Default for SwitchConfig {
    fn default() -> Self {
        SwitchConfig {
            dpid: DEFAULT_DPID,
            tables: DEFAULT_TABLES,
            listen: Vec::new(),
            controllers: Vec::new(),
            ports: Vec::new(),
            netns: None,
            workers: 1,
            cores: Vec::new(),
            cache_size: DEFAULT_CACHE_SIZE,
            fail_mode: FailMode::Secure,
            groups: Vec::new(),
            flows: Vec::new(),
            steering: SteeringTable::default(),
            offload: Offload::Off,
            receive: Receive::default(),
        }
    }
}
