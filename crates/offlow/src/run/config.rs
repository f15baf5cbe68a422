//! `offlow run` configuration: command-line flags, an optional TOML file,
//! and the OpenFlow connection endpoints they name.
//!
//! Endpoints use Open vSwitch's syntax: `tcp:HOST:PORT` is an active
//! connection to a controller (reconnected with backoff), `ptcp:PORT[:ADDR]`
//! a passive one (a listening socket; ADDR defaults to 127.0.0.1 so a
//! switch is not exposed by accident). IPv6 addresses go in brackets.
//!
//! The file holds the same settings as the flags; a flag given on the
//! command line overrides the file's value (lists: flags replace the file's
//! list). Every error in the file names the file, the line and the key.
//!
//! ```toml
//! dpid = 1
//! tables = 8
//! listen = ["ptcp:6653"]
//! controllers = ["tcp:127.0.0.1:6653"]
//! fail_mode = "standalone"   # or "secure" (the default)
//! workers = 2                # packet threads
//! cores = [0, 1]             # pin worker i to cores[i % len]
//! cache_size = 65536         # microflow entries per worker
//! netns = "sw"               # open every port inside this namespace
//! flows = "flows.txt"        # installed at start (ovs-ofctl add-flows syntax)
//! groups = "groups.txt"      # installed before the flows (ovs-ofctl add-groups syntax)
//!
//! [[port]]
//! name = "veth1"             # the Linux interface
//! number = 1                 # its OpenFlow port number (default: position)
//! kind = "af_packet"         # or "af_xdp", or "pcap" with input = "in.pcap" and/or output = "out.pcap"
//!
//! [[port]]                   # a tunnel port (Open vSwitch's type=gre / type=vxlan; see `run::tunnel`)
//! name = "gre0"
//! number = 10
//! kind = "gre"               # or "vxlan" (dst_port = 4789)
//! local_ip = "192.168.50.1"
//! remote_ip = "192.168.50.2"
//! underlay = 1               # the port its encapsulated frames use
//! remote_mac = "02:00:00:00:00:02"   # the next hop (static; local_mac defaults to the underlay's)
//! key = "flow"               # or a number; absent: no key
//! csum = false               # GRE checksums on output
//!
//! [[steer]]                  # OFiS "forward to a subset of CPUs"
//! match = "udp,tp_dst=53"    # ovs-ofctl match syntax
//! workers = [1]              # only these packet workers process such packets
//!
//! [offload]                  # the offload tier (default: off)
//! mode = "xdp"               # "off", "xdp" (an XDP program on every interface port) or "tc" (TC ingress)
//! room = 65536               # entries it holds
//! promote_pps = 1000         # a flow this hot for 2 ticks (100 ms each) goes down
//! demote_pps = 250           # an offloaded flow this cold for 5 ticks comes back
//! sample_every = 16          # workers sample one received frame in this many
//! generic = false            # force generic (SKB) XDP
//! pin_down = ["udp,tp_dst=4791"]   # such flows go down at once, whatever their rate
//! pin_up = ["tcp,tp_dst=22"]       # such flows never go down
//!
//! [dataplane]                # how the packet workers receive
//! busy_poll = false          # true: workers busy-poll (a core each at 100%, lowest delay) while the core is theirs
//! idle_spin_us = 50          # an idle worker polls this long after its last frame, then sleeps
//! af_packet_ring = "frames"  # or "blocks" (TPACKET_V3; a lone frame waits up to 1 ms), or
//!                            # "adaptive" (frames spilling into blocks under load; one worker)
//! ```
//!
//! `[[steer]]` entries form the workers' steering table
//! ([`offlow_datapath::SteeringTable`]): they change which worker processes
//! a packet, never what the flow tables do with it (no flow is added or
//! rewritten). A packet matching several takes the first; an
//! `offlow_workers` action in the packet's decision takes precedence.
//! Worker indices must be below `workers` (checked once the flags are
//! applied).
//!
//! Thread-safety: plain data.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use offlow_pipeline::ToPipeline;
use offlow_switch::config::{
    Endpoint, FailMode, InitialFlow, PortConfig, PortKind, SwitchConfig, DEFAULT_CACHE_SIZE,
    DEFAULT_DPID, DEFAULT_TABLES,
};
use serde::Deserialize;

fn strip_brackets(s: &str) -> &str {
    s.strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .unwrap_or(s)
}

fn parse_port(s: &str, what: &str) -> anyhow::Result<u16> {
    s.parse::<u16>()
        .with_context(|| format!("{what}: `{s}` is not a TCP port (0..=65535)"))
}

/// Parse `tcp:HOST:PORT` (active only).
pub(crate) fn parse_active(s: &str) -> anyhow::Result<Endpoint> {
    let Some(rest) = s.strip_prefix("tcp:") else {
        bail!("`{s}`: a controller is `tcp:HOST:PORT`");
    };
    let Some((host, port)) = rest.rsplit_once(':') else {
        bail!("`{s}`: missing `:PORT` (a controller is `tcp:HOST:PORT`)");
    };
    let host = strip_brackets(host);
    if host.is_empty() {
        bail!("`{s}`: empty host");
    }
    Ok(Endpoint::Active {
        host: host.to_string(),
        port: parse_port(port, s)?,
    })
}

/// Parse `ptcp:PORT[:ADDR]` (passive only); ADDR defaults to 127.0.0.1.
pub(crate) fn parse_passive(s: &str) -> anyhow::Result<Endpoint> {
    let Some(rest) = s.strip_prefix("ptcp:") else {
        bail!("`{s}`: a listening endpoint is `ptcp:PORT[:ADDR]`");
    };
    let (port, addr) = match rest.split_once(':') {
        Some((p, a)) => (p, Some(strip_brackets(a))),
        None => (rest, None),
    };
    let port = parse_port(port, s)?;
    let ip = match addr {
        Some(a) => a
            .parse::<IpAddr>()
            .with_context(|| format!("`{s}`: `{a}` is not an IP address"))?,
        None => IpAddr::V4(Ipv4Addr::LOCALHOST),
    };
    Ok(Endpoint::Passive(SocketAddr::new(ip, port)))
}

/// Flags of `offlow run`.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct RunArgs {
    /// TOML configuration file (dpid, tables, listen, controllers); flags
    /// override its values.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Controller to connect to (repeatable), `tcp:HOST:PORT`; reconnected
    /// with exponential backoff (100 ms doubling to 8 s).
    #[arg(long = "controller", value_name = "tcp:HOST:PORT")]
    pub controllers: Vec<String>,
    /// Accept controllers on `ptcp:PORT[:ADDR]` (repeatable; ADDR defaults
    /// to 127.0.0.1).
    #[arg(long = "listen", value_name = "ptcp:PORT[:ADDR]")]
    pub listen: Vec<String>,
    /// Datapath id (decimal or 0x-prefixed hex); default 1.
    #[arg(long, value_parser = parse_dpid)]
    pub dpid: Option<u64>,
    /// Number of flow tables (1..=255); default 8.
    #[arg(long)]
    pub tables: Option<u16>,
    /// Data port (repeatable): a Linux interface, `IFNAME` or
    /// `IFNAME=NUMBER` (default number: its position, from 1); `af_xdp:IFNAME`;
    /// `pcap:IN[:OUT]`; or a tunnel port, `NAME[=NUMBER],type=gre|vxlan,
    /// local_ip=A,remote_ip=B,underlay=PORT,remote_mac=MAC[,key=N|flow]
    /// [,csum=true][,local_mac=MAC][,dst_port=P][,ttl=T][,tos=T]`.
    #[arg(long = "port", value_name = "IFNAME[=NUMBER]")]
    pub ports: Vec<String>,
    /// Open the ports inside this network namespace (`ip netns` name).
    #[arg(long, value_name = "NAME")]
    pub netns: Option<String>,
    /// Packet worker threads; default 1.
    #[arg(long)]
    pub workers: Option<usize>,
    /// `secure` (default: misses follow the tables, no rule means drop) or
    /// `standalone` (a MAC-learning switch while no controller is
    /// connected).
    #[arg(long, value_parser = parse_fail_mode)]
    pub fail_mode: Option<FailMode>,
    /// Flows to install at start, one per line in ovs-ofctl's syntax (as
    /// for `ovs-ofctl add-flows`), before any port receives.
    #[arg(long, value_name = "FILE")]
    pub flows: Option<PathBuf>,
    /// Groups to install at start, before the flows, one per line in
    /// ovs-ofctl's syntax (as for `ovs-ofctl add-groups`).
    #[arg(long, value_name = "FILE")]
    pub groups: Option<PathBuf>,
    /// The offload tier: `xdp` (an XDP program on every interface port
    /// serves the hot flows), `tc` (a TC ingress program does, on
    /// AF_PACKET ports: no tunnels or CPU steering in the kernel; on veths
    /// it skips XDP's conversion of every frame) or `off` (the default).
    #[arg(long, value_name = "off|xdp|tc", value_parser = parse_offload_mode)]
    pub offload: Option<offlow_switch::Offload>,
    /// Entries the offload tier holds (with `--offload xdp`).
    #[arg(long, value_name = "N")]
    pub offload_room: Option<usize>,
    /// Workers do not sleep: each polls its ports in a loop, like Open
    /// vSwitch's PMD threads, for the lowest delay. Costs one core per
    /// worker at 100% even with no traffic. A worker that finds its core
    /// shared (it waited over 1 ms for it within 20 ms) sleeps between
    /// frames for a second, then polls busily again.
    #[arg(long)]
    pub busy_poll: bool,
    /// How long an idle worker keeps polling after its last frame before
    /// it sleeps, in µs (default 50; 0: sleep at once). Ignored with
    /// `--busy-poll`.
    #[arg(long, value_name = "US")]
    pub idle_spin_us: Option<u64>,
    /// Receive ring of AF_PACKET ports: `frames` (TPACKET_V2, the default:
    /// a lone frame is handed over at once) or `blocks` (TPACKET_V3: a
    /// lone frame waits up to 1 ms for its block to be retired) or
    /// `adaptive` (a frames ring that spills into a blocks ring when full;
    /// one worker only, several workers open `frames`).
    #[arg(long, value_name = "frames|blocks|adaptive", value_parser = parse_ring)]
    pub af_packet_ring: Option<offlow_switch::RxRing>,
}

fn parse_ring(s: &str) -> Result<offlow_switch::RxRing, String> {
    match s {
        "frames" => Ok(offlow_switch::RxRing::Frames),
        "blocks" => Ok(offlow_switch::RxRing::Blocks),
        "adaptive" => Ok(offlow_switch::RxRing::Adaptive),
        other => Err(format!(
            "`{other}`: the rings are `frames`, `blocks` and `adaptive`"
        )),
    }
}

/// Most `idle_spin_us` accepted: a second of spinning is a busy poll.
const MAX_IDLE_SPIN_US: u64 = 1_000_000;

fn check_idle_spin(us: u64) -> anyhow::Result<std::time::Duration> {
    if us > MAX_IDLE_SPIN_US {
        bail!("{us} µs: at most {MAX_IDLE_SPIN_US} (use busy_poll for a worker that never sleeps)");
    }
    Ok(std::time::Duration::from_micros(us))
}

fn parse_offload_mode(s: &str) -> Result<offlow_switch::Offload, String> {
    match s {
        "off" => Ok(offlow_switch::Offload::Off),
        "xdp" => Ok(offlow_switch::Offload::On(
            offlow_switch::OffloadOptions::default(),
        )),
        "tc" => Ok(offlow_switch::Offload::On(offlow_switch::OffloadOptions {
            hook: offlow_offload::xdp::Hook::Tc,
            ..offlow_switch::OffloadOptions::default()
        })),
        _ => Err(format!("`{s}`: expected `off`, `xdp` or `tc`")),
    }
}

fn check_room(n: usize) -> anyhow::Result<usize> {
    if n == 0 || n > 1 << 24 {
        bail!("{n}: must be 1..=16777216");
    }
    Ok(n)
}

fn parse_fail_mode(s: &str) -> Result<FailMode, String> {
    match s {
        "secure" => Ok(FailMode::Secure),
        "standalone" => Ok(FailMode::Standalone),
        _ => Err(format!("`{s}`: expected `secure` or `standalone`")),
    }
}

/// Highest OpenFlow number of a physical port (`OFPP_MAX`).
const OFPP_MAX: u32 = 0xffff_ff00;

fn check_port_number(n: u32) -> anyhow::Result<u32> {
    if n == 0 || n > OFPP_MAX {
        bail!("port number {n}: must be 1..={OFPP_MAX:#x}");
    }
    Ok(n)
}

fn parse_port_flag(s: &str, position: usize) -> anyhow::Result<PortConfig> {
    if s.contains(',') {
        let (name, number, tunnel) = super::tunnel::parse_flag(s)?;
        let number = match number {
            Some(n) => n
                .parse::<u32>()
                .map_err(|e| anyhow::anyhow!("`{n}`: {e}"))?,
            None => position as u32,
        };
        check_ifname(name)?;
        return Ok(PortConfig {
            name: name.to_string(),
            number: check_port_number(number)?,
            kind: PortKind::Tunnel(tunnel),
        });
    }
    if let Some(rest) = s.strip_prefix("af_xdp:") {
        let mut p = parse_port_flag(rest, position)?;
        if p.kind != PortKind::AfPacket {
            bail!("`{s}`: af_xdp: takes an interface name");
        }
        p.kind = PortKind::AfXdp;
        return Ok(p);
    }
    if let Some(files) = s.strip_prefix("pcap:") {
        let (input, output) = files.split_once(':').unwrap_or((files, ""));
        let path = |p: &str| (!p.is_empty()).then(|| PathBuf::from(p));
        let kind = PortKind::Pcap {
            input: path(input),
            output: path(output),
        };
        if kind
            == (PortKind::Pcap {
                input: None,
                output: None,
            })
        {
            bail!("`{s}`: a capture port needs an input or an output file");
        }
        return Ok(PortConfig {
            name: format!("pcap{position}"),
            number: check_port_number(position as u32)?,
            kind,
        });
    }
    let (name, number) = match s.split_once('=') {
        Some((n, num)) => (
            n,
            num.parse::<u32>()
                .map_err(|e| anyhow::anyhow!("`{num}`: {e}"))?,
        ),
        None => (s, position as u32),
    };
    check_ifname(name)?;
    Ok(PortConfig {
        name: name.to_string(),
        number: check_port_number(number)?,
        kind: PortKind::AfPacket,
    })
}

fn check_ifname(name: &str) -> anyhow::Result<()> {
    // IFNAMSIZ is 16 with the NUL.
    if name.is_empty() || name.len() > 15 || name.contains(['/', ' ', '\0']) {
        bail!("`{name}`: not a Linux interface name (1 to 15 bytes, no `/` or space)");
    }
    Ok(())
}

fn check_ports(ports: &[PortConfig]) -> anyhow::Result<()> {
    for (i, p) in ports.iter().enumerate() {
        if let Some(q) = ports[..i].iter().find(|q| q.number == p.number) {
            bail!(
                "ports {} and {} both have number {}",
                q.name,
                p.name,
                p.number
            );
        }
        if ports[..i].iter().any(|q| q.name == p.name) {
            bail!("port {} listed twice", p.name);
        }
    }
    // Every port is listed: a tunnel's underlay must be one, not a tunnel.
    for p in ports {
        if let PortKind::Tunnel(t) = &p.kind {
            match ports.iter().find(|u| u.number == t.underlay) {
                None => bail!(
                    "tunnel port {}: underlay={} is not a port number of this switch",
                    p.name,
                    t.underlay
                ),
                Some(u) if matches!(u.kind, PortKind::Tunnel(_)) => bail!(
                    "tunnel port {}: underlay {} is itself a tunnel",
                    p.name,
                    u.name
                ),
                Some(_) => {}
            }
        }
    }
    Ok(())
}

fn parse_dpid(s: &str) -> Result<u64, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|e| format!("`{s}`: {e}"))
}

/// The resolved configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RunConfig {
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
    /// Flow file installed at start.
    pub flows: Option<PathBuf>,
    /// Group file installed at start, before the flows.
    pub groups: Option<PathBuf>,
    /// `[[steer]]` entries, in file order.
    pub steer: Vec<SteerConfig>,
    /// The offload tier.
    pub offload: offlow_switch::Offload,
    /// How the workers receive (`[dataplane]`).
    pub receive: offlow_switch::Receive,
}

/// One `[[steer]]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SteerConfig {
    /// The packets it applies to.
    pub matcher: offlow_flow::Match,
    /// The worker indices (each below 64).
    pub workers: Vec<usize>,
    /// Where it was written (`FILE, line L`), for later errors.
    pub origin: String,
}

impl SteerConfig {
    /// The worker mask (bit i = worker i).
    pub(crate) fn mask(&self) -> u64 {
        // Indices are checked below 64 when parsed.
        self.workers.iter().fold(0, |m, &w| m | 1u64 << (w % 64))
    }
}

impl RunConfig {
    /// The workers' steering table (empty without `[[steer]]` entries).
    pub(crate) fn steering(&self) -> offlow_datapath::SteeringTable {
        offlow_datapath::SteeringTable::new(self.steer.iter().map(|s| offlow_datapath::SteerRule {
            matcher: s.matcher,
            workers: s.mask(),
        }))
    }

    /// What the switch library starts with: the flow file read and parsed
    /// (errors name `FILE:LINE`), the steering table built.
    pub(crate) fn into_switch_config(self) -> anyhow::Result<SwitchConfig> {
        let steering = self.steering();
        let flows = match &self.flows {
            Some(path) => load_flows(path)?,
            None => Vec::new(),
        };
        let groups = match &self.groups {
            Some(path) => load_groups(path)?,
            None => Vec::new(),
        };
        Ok(SwitchConfig {
            dpid: self.dpid,
            tables: self.tables,
            listen: self.listen,
            controllers: self.controllers,
            ports: self.ports,
            netns: self.netns,
            workers: self.workers,
            cores: self.cores,
            cache_size: self.cache_size,
            fail_mode: self.fail_mode,
            groups,
            flows,
            steering,
            offload: self.offload,
            receive: self.receive,
        })
    }
}

/// Read an ovs-ofctl group file into group-mods; errors name `FILE:LINE`.
fn load_groups(path: &Path) -> anyhow::Result<Vec<offlow_switch::InitialGroup>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let shown = path.display().to_string();
    let groups = offlow_openflow::ofctl::parse_group_file(&text, &shown)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    groups
        .iter()
        .map(|(line, g)| {
            let origin = format!("{shown}:{line}");
            let group_mod = g
                .to_pipeline()
                .map_err(|e| anyhow::anyhow!("{origin}: refused: {e:?}"))?;
            Ok(offlow_switch::InitialGroup { origin, group_mod })
        })
        .collect()
}

/// Read an ovs-ofctl flow file into flow-mods; errors name `FILE:LINE`.
fn load_flows(path: &Path) -> anyhow::Result<Vec<InitialFlow>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let shown = path.display().to_string();
    let specs = offlow_openflow::ofctl::parse_flow_file(&text, &shown)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    specs
        .iter()
        .map(|(line, spec)| {
            let origin = format!("{shown}:{line}");
            let flow_mod = spec
                .to_wire()
                .to_pipeline()
                .map_err(|e| anyhow::anyhow!("{origin}: refused: {e:?}"))?;
            Ok(InitialFlow { origin, flow_mod })
        })
        .collect()
}

/// Parse a `[[steer]]` match: ovs-ofctl match fields only (no settings,
/// no actions), prerequisites included (`tp_dst` needs `udp` or `tcp`).
fn parse_steer_match(text: &str) -> anyhow::Result<offlow_flow::Match> {
    if text.contains("actions") {
        bail!("`{text}`: a match only (no actions)");
    }
    let spec = offlow_openflow::ofctl::parse_flow(&format!("{text},actions=drop"))
        .map_err(|e| anyhow::anyhow!("`{text}`: {e}"))?;
    let plain = offlow_openflow::ofctl::parse_flow("actions=drop")
        .map_err(|e| anyhow::anyhow!("internal: {e}"))?;
    let settings = |s: &offlow_openflow::ofctl::FlowSpec| {
        (
            s.table_id,
            s.priority,
            s.cookie,
            s.idle_timeout,
            s.hard_timeout,
            s.flags,
        )
    };
    if settings(&spec) != settings(&plain) {
        bail!("`{text}`: match fields only (no table, priority, cookie, timeouts or flags)");
    }
    offlow_pipeline::check_match_prerequisites(&spec.matcher)
        .map_err(|e| anyhow::anyhow!("`{text}`: {e}"))?;
    Ok(spec.matcher)
}

/// Check the `[[steer]]` entries against the worker count.
fn check_steer(steer: &[SteerConfig], workers: usize) -> anyhow::Result<()> {
    for s in steer {
        if let Some(w) = s.workers.iter().find(|&&w| w >= workers) {
            bail!(
                "{}, key `steer.workers`: worker {w} does not exist (workers = {workers}; indices start at 0)",
                s.origin
            );
        }
    }
    Ok(())
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
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
            flows: None,
            groups: None,
            steer: Vec::new(),
            offload: offlow_switch::Offload::Off,
            receive: offlow_switch::Receive::default(),
        }
    }
}

/// (Unknown keys land in `tunnel` and are refused with the port's line.)
#[derive(Debug, Deserialize)]
struct FilePort {
    name: toml::Spanned<String>,
    number: Option<toml::Spanned<u32>>,
    kind: Option<toml::Spanned<String>>,
    input: Option<toml::Spanned<String>>,
    output: Option<toml::Spanned<String>>,
    /// A tunnel's options (`kind = "gre"` or `"vxlan"`; see `run::tunnel`).
    #[serde(flatten)]
    tunnel: std::collections::BTreeMap<String, toml::Value>,
}

/// The file's shape. Values that need checking beyond their type keep their
/// span so the error can point at the line.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    dpid: Option<u64>,
    tables: Option<toml::Spanned<u16>>,
    #[serde(default)]
    listen: Vec<toml::Spanned<String>>,
    #[serde(default)]
    controllers: Vec<toml::Spanned<String>>,
    #[serde(default)]
    port: Vec<FilePort>,
    netns: Option<String>,
    workers: Option<toml::Spanned<usize>>,
    #[serde(default)]
    cores: Vec<usize>,
    cache_size: Option<toml::Spanned<usize>>,
    fail_mode: Option<toml::Spanned<String>>,
    flows: Option<String>,
    groups: Option<String>,
    #[serde(default)]
    steer: Vec<FileSteer>,
    offload: Option<FileOffload>,
    dataplane: Option<FileDataplane>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileDataplane {
    busy_poll: Option<toml::Spanned<bool>>,
    idle_spin_us: Option<toml::Spanned<u64>>,
    af_packet_ring: Option<toml::Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileOffload {
    mode: toml::Spanned<String>,
    room: Option<toml::Spanned<usize>>,
    promote_pps: Option<toml::Spanned<u64>>,
    demote_pps: Option<toml::Spanned<u64>>,
    sample_every: Option<toml::Spanned<u32>>,
    generic: Option<bool>,
    #[serde(default)]
    pin_down: Vec<toml::Spanned<String>>,
    #[serde(default)]
    pin_up: Vec<toml::Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSteer {
    #[serde(rename = "match")]
    matcher: toml::Spanned<String>,
    workers: toml::Spanned<Vec<usize>>,
}

/// 1-based line of byte offset `at` in `text`.
fn line_of(text: &str, at: usize) -> usize {
    text.as_bytes()
        .iter()
        .take(at)
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

fn check_tables(n: u16) -> anyhow::Result<u16> {
    if n == 0 || n > offlow_pipeline::MAX_TABLES {
        bail!("tables = {n}: must be 1..={}", offlow_pipeline::MAX_TABLES);
    }
    Ok(n)
}

/// Parse a configuration file's text (`path` is only used in messages).
pub(crate) fn parse_file(path: &Path, text: &str) -> anyhow::Result<RunConfig> {
    let shown = path.display();
    // toml's message already says "at line L, column C" and quotes the key.
    let f: FileConfig =
        toml::from_str(text).map_err(|e| anyhow::anyhow!("{shown}: {}", e.to_string().trim()))?;
    let at = |key: &str, span: std::ops::Range<usize>, e: anyhow::Error| {
        anyhow::anyhow!(
            "{shown}, line {}, key `{key}`: {e:#}",
            line_of(text, span.start)
        )
    };
    let tables = match f.tables {
        Some(t) => check_tables(*t.get_ref()).map_err(|e| at("tables", t.span(), e))?,
        None => DEFAULT_TABLES,
    };
    let mut listen = Vec::new();
    for s in &f.listen {
        listen.push(parse_passive(s.get_ref()).map_err(|e| at("listen", s.span(), e))?);
    }
    let mut controllers = Vec::new();
    for s in &f.controllers {
        controllers.push(parse_active(s.get_ref()).map_err(|e| at("controllers", s.span(), e))?);
    }
    let mut ports = Vec::new();
    for (i, p) in f.port.iter().enumerate() {
        let number = match &p.number {
            Some(n) => {
                check_port_number(*n.get_ref()).map_err(|e| at("port.number", n.span(), e))?
            }
            None => i as u32 + 1,
        };
        let kind = match p.kind.as_ref().map(|k| (k.get_ref().as_str(), k.span())) {
            None | Some(("af_packet", _)) => {
                if let Some(f) = p.input.as_ref().or(p.output.as_ref()) {
                    return Err(at(
                        "port.input",
                        f.span(),
                        anyhow::anyhow!("input/output files belong to `kind = \"pcap\"` ports"),
                    ));
                }
                PortKind::AfPacket
            }
            Some(("af_xdp", _)) => PortKind::AfXdp,
            Some((k, span)) if super::tunnel::kind_of(k).is_some() => {
                let kind = super::tunnel::kind_of(k).unwrap_or(offlow_wire::tunnel::Kind::Gre);
                let values: Vec<(&str, String)> = p
                    .tunnel
                    .iter()
                    .map(|(key, v)| {
                        let text = match v {
                            toml::Value::String(s) => s.clone(),
                            other => other.to_string(),
                        };
                        (key.as_str(), text)
                    })
                    .collect();
                let t = super::tunnel::parse(kind, values.iter().map(|(k, v)| (*k, v.as_str())))
                    .map_err(|e| at("port", span, e))?;
                PortKind::Tunnel(t)
            }
            Some(("pcap", span)) => {
                let path = |f: &Option<toml::Spanned<String>>| {
                    f.as_ref().map(|f| PathBuf::from(f.get_ref()))
                };
                let (input, output) = (path(&p.input), path(&p.output));
                if input.is_none() && output.is_none() {
                    return Err(at(
                        "port.kind",
                        span,
                        anyhow::anyhow!("a pcap port needs `input` or `output` (a capture file)"),
                    ));
                }
                PortKind::Pcap { input, output }
            }
            Some((other, span)) => {
                return Err(at(
                    "port.kind",
                    span,
                    anyhow::anyhow!(
                        "`{other}`: the supported kinds are `af_packet`, `af_xdp`, `pcap`, \
                         `gre` and `vxlan`"
                    ),
                ));
            }
        };
        if let (Some((key, _)), false) =
            (p.tunnel.iter().next(), matches!(kind, PortKind::Tunnel(_)))
        {
            return Err(at(
                "port",
                p.name.span(),
                anyhow::anyhow!(
                    "`{key}`: unknown port key (tunnel options need kind = \"gre\" or \"vxlan\")"
                ),
            ));
        }
        if kind.is_interface() || matches!(kind, PortKind::Tunnel(_)) {
            check_ifname(p.name.get_ref()).map_err(|e| at("port.name", p.name.span(), e))?;
        }
        ports.push(PortConfig {
            name: p.name.get_ref().clone(),
            number,
            kind,
        });
        check_ports(&ports).map_err(|e| at("port", p.name.span(), e))?;
    }
    let workers = match &f.workers {
        Some(w) if *w.get_ref() == 0 || *w.get_ref() > 64 => {
            return Err(at("workers", w.span(), anyhow::anyhow!("must be 1..=64")));
        }
        Some(w) => *w.get_ref(),
        None => 1,
    };
    let cache_size = match f.cache_size {
        Some(c) if *c.get_ref() == 0 || *c.get_ref() > 1 << 26 => {
            return Err(at(
                "cache_size",
                c.span(),
                anyhow::anyhow!("must be 1..=67108864"),
            ));
        }
        Some(c) => *c.get_ref(),
        None => DEFAULT_CACHE_SIZE,
    };
    let fail_mode = match &f.fail_mode {
        Some(m) => parse_fail_mode(m.get_ref())
            .map_err(|e| at("fail_mode", m.span(), anyhow::anyhow!(e)))?,
        None => FailMode::Secure,
    };
    let mut steer = Vec::new();
    for e in &f.steer {
        let matcher = parse_steer_match(e.matcher.get_ref())
            .map_err(|x| at("steer.match", e.matcher.span(), x))?;
        let list = e.workers.get_ref();
        if list.is_empty() {
            return Err(at(
                "steer.workers",
                e.workers.span(),
                anyhow::anyhow!("name at least one worker"),
            ));
        }
        if let Some(w) = list.iter().find(|&&w| w >= 64) {
            return Err(at(
                "steer.workers",
                e.workers.span(),
                anyhow::anyhow!("worker {w}: indices are 0..=63"),
            ));
        }
        steer.push(SteerConfig {
            matcher,
            workers: list.clone(),
            origin: format!("{shown}, line {}", line_of(text, e.workers.span().start)),
        });
    }
    // The worker count is checked in `resolve`, after `--workers`.
    if workers > 1
        && ports
            .iter()
            .any(|p| matches!(p.kind, PortKind::Pcap { .. }))
    {
        let span = f.workers.as_ref().map(|w| w.span()).unwrap_or(0..0);
        return Err(at(
            "workers",
            span,
            anyhow::anyhow!("pcap ports are served by one worker: set workers = 1"),
        ));
    }
    let offload = match &f.offload {
        None => offlow_switch::Offload::Off,
        Some(o) => {
            let mode = parse_offload_mode(o.mode.get_ref())
                .map_err(|e| at("offload.mode", o.mode.span(), anyhow::anyhow!(e)))?;
            match mode {
                offlow_switch::Offload::Off => mode,
                offlow_switch::Offload::On(mut opts) => {
                    if let Some(r) = &o.room {
                        opts.room = check_room(*r.get_ref())
                            .map_err(|e| at("offload.room", r.span(), e))?;
                    }
                    if let Some(p) = &o.promote_pps {
                        opts.placement.promote_pps = *p.get_ref();
                    }
                    if let Some(d) = &o.demote_pps {
                        opts.placement.demote_pps = *d.get_ref();
                    }
                    let p = &opts.placement;
                    if p.demote_pps >= p.promote_pps {
                        let span = o
                            .demote_pps
                            .as_ref()
                            .or(o.promote_pps.as_ref())
                            .map(|s| s.span())
                            .unwrap_or(0..0);
                        return Err(at(
                            "offload.demote_pps",
                            span,
                            anyhow::anyhow!(
                                "demote_pps ({}) must be below promote_pps ({}): the gap is what keeps entries from flapping",
                                p.demote_pps,
                                p.promote_pps
                            ),
                        ));
                    }
                    if let Some(n) = &o.sample_every {
                        if *n.get_ref() == 0 {
                            return Err(at(
                                "offload.sample_every",
                                n.span(),
                                anyhow::anyhow!("must be at least 1"),
                            ));
                        }
                        opts.sample_every = *n.get_ref();
                    }
                    opts.generic = o.generic.unwrap_or(false);
                    for (key, list, out) in [
                        ("offload.pin_down", &o.pin_down, &mut opts.pin_down),
                        ("offload.pin_up", &o.pin_up, &mut opts.pin_up),
                    ] {
                        for m in list {
                            out.push(
                                parse_steer_match(m.get_ref()).map_err(|e| at(key, m.span(), e))?,
                            );
                        }
                    }
                    offlow_switch::Offload::On(opts)
                }
            }
        }
    };
    let mut receive = offlow_switch::Receive::default();
    if let Some(d) = &f.dataplane {
        if let Some(r) = &d.af_packet_ring {
            receive.af_packet_ring = parse_ring(r.get_ref())
                .map_err(|e| at("dataplane.af_packet_ring", r.span(), anyhow::anyhow!(e)))?;
        }
        if let Some(us) = &d.idle_spin_us {
            let spin = check_idle_spin(*us.get_ref())
                .map_err(|e| at("dataplane.idle_spin_us", us.span(), e))?;
            receive.idle = offlow_switch::IdlePoll::Adaptive { spin };
        }
        if let Some(b) = &d.busy_poll {
            if *b.get_ref() {
                if let Some(us) = &d.idle_spin_us {
                    return Err(at(
                        "dataplane.idle_spin_us",
                        us.span(),
                        anyhow::anyhow!(
                            "busy_poll workers never sleep: drop idle_spin_us or busy_poll"
                        ),
                    ));
                }
                receive.idle = offlow_switch::IdlePoll::Busy;
            }
        }
    }
    Ok(RunConfig {
        receive,
        offload,
        dpid: f.dpid.unwrap_or(DEFAULT_DPID),
        tables,
        listen,
        controllers,
        ports,
        netns: f.netns,
        workers,
        cores: f.cores,
        cache_size,
        fail_mode,
        flows: f.flows.map(PathBuf::from),
        groups: f.groups.map(PathBuf::from),
        steer,
    })
}

impl RunArgs {
    /// The file (if any) overridden by the flags.
    pub(crate) fn resolve(&self) -> anyhow::Result<RunConfig> {
        let mut c = match &self.config {
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .with_context(|| format!("reading {}", p.display()))?;
                parse_file(p, &text)?
            }
            None => RunConfig::default(),
        };
        if !self.ports.is_empty() {
            c.ports = self
                .ports
                .iter()
                .enumerate()
                .map(|(i, s)| parse_port_flag(s, i + 1).context("--port"))
                .collect::<anyhow::Result<_>>()?;
            check_ports(&c.ports).context("--port")?;
        }
        if let Some(ns) = &self.netns {
            c.netns = Some(ns.clone());
        }
        if let Some(w) = self.workers {
            if w == 0 || w > 64 {
                bail!("--workers {w}: must be 1..=64");
            }
            c.workers = w;
        }
        // After `--workers`, which may change the count either way.
        check_steer(&c.steer, c.workers)?;
        if let Some(m) = self.fail_mode {
            c.fail_mode = m;
        }
        if let Some(f) = &self.flows {
            c.flows = Some(f.clone());
        }
        if let Some(g) = &self.groups {
            c.groups = Some(g.clone());
        }
        match (&self.offload, &mut c.offload) {
            // `--offload xdp|tc` keeps the file's [offload] settings but
            // its hook.
            (Some(offlow_switch::Offload::On(cli)), offlow_switch::Offload::On(file)) => {
                file.hook = cli.hook;
            }
            (None, _) => {}
            (Some(o), _) => c.offload = o.clone(),
        }
        if let Some(r) = self.offload_room {
            let room = check_room(r).context("--offload-room")?;
            match &mut c.offload {
                offlow_switch::Offload::On(o) => o.room = room,
                offlow_switch::Offload::Off => bail!("--offload-room needs --offload xdp"),
            }
        }
        if c.workers > 1
            && c.ports
                .iter()
                .any(|p| matches!(p.kind, PortKind::Pcap { .. }))
        {
            bail!("pcap ports are served by one worker: use --workers 1");
        }
        if let Some(us) = self.idle_spin_us {
            if self.busy_poll {
                bail!("--idle-spin-us with --busy-poll: busy-polling workers never sleep");
            }
            let spin = check_idle_spin(us).context("--idle-spin-us")?;
            c.receive.idle = offlow_switch::IdlePoll::Adaptive { spin };
        }
        if self.busy_poll {
            c.receive.idle = offlow_switch::IdlePoll::Busy;
        }
        if let Some(r) = self.af_packet_ring {
            c.receive.af_packet_ring = r;
        }
        if let Some(d) = self.dpid {
            c.dpid = d;
        }
        if let Some(t) = self.tables {
            c.tables = check_tables(t).context("--tables")?;
        }
        if !self.listen.is_empty() {
            c.listen = self
                .listen
                .iter()
                .map(|s| parse_passive(s).context("--listen"))
                .collect::<anyhow::Result<_>>()?;
        }
        if !self.controllers.is_empty() {
            c.controllers = self
                .controllers
                .iter()
                .map(|s| parse_active(s).context("--controller"))
                .collect::<anyhow::Result<_>>()?;
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        assert_eq!(
            parse_passive("ptcp:16653").unwrap(),
            Endpoint::Passive("127.0.0.1:16653".parse().unwrap())
        );
        assert_eq!(
            parse_passive("ptcp:6653:0.0.0.0").unwrap(),
            Endpoint::Passive("0.0.0.0:6653".parse().unwrap())
        );
        assert_eq!(
            parse_passive("ptcp:6653:[::1]").unwrap(),
            Endpoint::Passive("[::1]:6653".parse().unwrap())
        );
        assert_eq!(
            parse_active("tcp:[::1]:6653").unwrap(),
            Endpoint::Active {
                host: "::1".into(),
                port: 6653
            }
        );
        assert_eq!(
            parse_active("tcp:ctl.example:6633").unwrap().to_string(),
            "tcp:ctl.example:6633"
        );
        for bad in ["tcp:1.2.3.4", "tcp::6653", "udp:1.2.3.4:1", "tcp:h:99999"] {
            assert!(parse_active(bad).is_err(), "{bad}");
        }
        for bad in ["ptcp:", "ptcp:x", "ptcp:1:notanip", "tcp:1"] {
            assert!(parse_passive(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn file_tunnel_ports_and_their_errors() {
        let text = "[[port]]\nname = \"veth1\"\n\n[[port]]\nname = \"gre0\"\nnumber = 10\n\
                    kind = \"gre\"\nlocal_ip = \"192.168.50.1\"\nremote_ip = \"192.168.50.2\"\n\
                    underlay = 1\nremote_mac = \"02:00:00:00:00:02\"\nkey = 7\ncsum = true\n";
        let c = parse_file(Path::new("sw.toml"), text).unwrap();
        let PortKind::Tunnel(t) = &c.ports[1].kind else {
            panic!("{:?}", c.ports[1])
        };
        assert_eq!(t.endpoint.key, offlow_wire::tunnel::KeyMode::Fixed(7));
        assert!(t.endpoint.csum);
        // A bad option names the port's line.
        let bad = text.replace("key = 7", "key = \"seven\"");
        let e = parse_file(Path::new("sw.toml"), &bad)
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 7") && e.contains("seven"), "{e}");
        // An underlay that is not a port.
        let bad = text.replace("underlay = 1", "underlay = 3");
        let e = parse_file(Path::new("sw.toml"), &bad)
            .unwrap_err()
            .to_string();
        assert!(e.contains("underlay=3"), "{e}");
        // A tunnel option on an ordinary port.
        let e = parse_file(
            Path::new("sw.toml"),
            "[[port]]\nname = \"v\"\nremote_ip = \"1.1.1.1\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("line 2") && e.contains("remote_ip"), "{e}");
    }

    #[test]
    fn tunnel_port_flag() {
        let p = parse_port_flag(
            "gre0=10,type=gre,local_ip=1.1.1.1,remote_ip=1.1.1.2,underlay=1,remote_mac=2:0:0:0:0:2",
            4,
        )
        .unwrap();
        assert_eq!((p.name.as_str(), p.number), ("gre0", 10));
        assert!(matches!(p.kind, PortKind::Tunnel(_)));
    }

    #[test]
    fn file_ok_and_flags_override() {
        let text = "dpid = 7\ntables = 3\nlisten = [\"ptcp:1000\"]\n";
        let c = parse_file(Path::new("x.toml"), text).unwrap();
        assert_eq!(c.dpid, 7);
        assert_eq!(c.tables, 3);
        assert_eq!(c.listen.len(), 1);
        assert!(c.controllers.is_empty());
    }

    #[test]
    fn file_errors_name_file_line_and_key() {
        let text = "dpid = 7\n\ncontrollers = [\n  \"tcp:1.2.3.4:1\",\n  \"tcp:nohost\",\n]\n";
        let e = parse_file(Path::new("sw.toml"), text)
            .unwrap_err()
            .to_string();
        assert!(e.contains("sw.toml"), "{e}");
        assert!(e.contains("line 5"), "{e}");
        assert!(e.contains("controllers"), "{e}");

        let e = parse_file(Path::new("sw.toml"), "dpid = 1\ntables = 300\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("sw.toml") && e.contains("line 2"), "{e}");
        assert!(e.contains("tables"), "{e}");

        let e = parse_file(Path::new("sw.toml"), "dpid = 1\nbogus = 2\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("sw.toml") && e.contains("line 2"), "{e}");
        assert!(e.contains("bogus"), "{e}");

        // Type error: u16 overflow is a serde error with toml's own span.
        let e = parse_file(Path::new("sw.toml"), "\n\ntables = \"x\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 3") && e.contains("tables"), "{e}");
    }

    #[test]
    fn ports_in_the_file_and_their_errors() {
        let text = "workers = 2\nfail_mode = \"standalone\"\n[[port]]\nname = \"v1\"\n[[port]]\nname = \"v2\"\nnumber = 7\n";
        let c = parse_file(Path::new("p.toml"), text).unwrap();
        assert_eq!(c.workers, 2);
        assert_eq!(c.fail_mode, FailMode::Standalone);
        let got: Vec<(&str, u32)> = c
            .ports
            .iter()
            .map(|p| (p.name.as_str(), p.number))
            .collect();
        assert_eq!(got, [("v1", 1), ("v2", 7)]);

        let dup = "[[port]]\nname = \"v1\"\nnumber = 3\n[[port]]\nname = \"v2\"\nnumber = 3\n";
        let e = parse_file(Path::new("p.toml"), dup)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("p.toml") && e.contains("line 5") && e.contains("number 3"),
            "{e}"
        );

        let pcap = "[[port]]\nname = \"replay\"\nkind = \"pcap\"\ninput = \"in.pcap\"\n";
        let c = parse_file(Path::new("p.toml"), pcap).unwrap();
        assert_eq!(
            c.ports[0].kind,
            PortKind::Pcap {
                input: Some(PathBuf::from("in.pcap")),
                output: None
            }
        );
        let nofile = "[[port]]\nname = \"x\"\nkind = \"pcap\"\n";
        let e = parse_file(Path::new("p.toml"), nofile)
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 3") && e.contains("needs `input`"), "{e}");
        let misplaced = "[[port]]\nname = \"v1\"\noutput = \"o.pcap\"\n";
        let e = parse_file(Path::new("p.toml"), misplaced)
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 3"), "{e}");
        let two = "workers = 2\n[[port]]\nname = \"x\"\nkind = \"pcap\"\noutput = \"o\"\n";
        let e = parse_file(Path::new("p.toml"), two)
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 1") && e.contains("one worker"), "{e}");

        let kind = "[[port]]\nname = \"v1\"\nkind = \"dpdk\"\n";
        let e = parse_file(Path::new("p.toml"), kind)
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 3") && e.contains("port.kind"), "{e}");

        let long = "[[port]]\nname = \"abcdefghijklmnopq\"\n";
        let e = parse_file(Path::new("p.toml"), long)
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2") && e.contains("port.name"), "{e}");

        let mode = "\nfail_mode = \"open\"\n";
        let e = parse_file(Path::new("p.toml"), mode)
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2") && e.contains("fail_mode"), "{e}");
    }

    #[test]
    fn offload_settings_and_their_errors() {
        let text = "[offload]\nmode = \"xdp\"\nroom = 1024\npromote_pps = 500\ndemote_pps = 100\n";
        let c = parse_file(Path::new("s.toml"), text).unwrap();
        let offlow_switch::Offload::On(o) = &c.offload else {
            panic!("{:?}", c.offload)
        };
        assert_eq!(
            (o.room, o.placement.promote_pps, o.placement.demote_pps),
            (1024, 500, 100)
        );
        let c = parse_file(
            Path::new("s.toml"),
            "[offload]\nmode = \"xdp\"\npin_down = [\"udp,tp_dst=53\"]\npin_up = [\"tcp\"]\n",
        )
        .unwrap();
        let offlow_switch::Offload::On(o) = &c.offload else {
            panic!("{:?}", c.offload)
        };
        assert_eq!((o.pin_down.len(), o.pin_up.len()), (1, 1));
        let e = parse_file(
            Path::new("s.toml"),
            "[offload]\nmode = \"xdp\"\npin_up = [\"tcp,bogus=1\"]\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("s.toml, line 3, key `offload.pin_up`"), "{e}");
        let e = parse_file(
            Path::new("s.toml"),
            "[offload]\nmode = \"xdp\"\npromote_pps = 100\ndemote_pps = 100\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("s.toml, line 4, key `offload.demote_pps`"),
            "{e}"
        );
        let e = parse_file(Path::new("s.toml"), "[offload]\nmode = \"nic\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("line 2, key `offload.mode`: `nic`: expected `off`, `xdp` or `tc`"),
            "{e}"
        );
        assert_eq!(
            parse_file(Path::new("s.toml"), "").unwrap().offload,
            offlow_switch::Offload::Off
        );
    }

    #[test]
    fn dataplane_settings_flags_and_their_errors() {
        use offlow_switch::{IdlePoll, RxRing};
        use std::time::Duration;
        let c = parse_file(Path::new("s.toml"), "").unwrap();
        assert_eq!(c.receive, offlow_switch::Receive::default());
        assert_eq!(c.receive.af_packet_ring, RxRing::Frames);
        let text = "[dataplane]\nidle_spin_us = 20\naf_packet_ring = \"blocks\"\n";
        let c = parse_file(Path::new("s.toml"), text).unwrap();
        assert_eq!(
            c.receive.idle,
            IdlePoll::Adaptive {
                spin: Duration::from_micros(20)
            }
        );
        assert_eq!(c.receive.af_packet_ring, RxRing::Blocks);
        let c = parse_file(Path::new("s.toml"), "[dataplane]\nbusy_poll = true\n").unwrap();
        assert_eq!(c.receive.idle, IdlePoll::Busy);
        let err = |text: &str| {
            parse_file(Path::new("s.toml"), text)
                .unwrap_err()
                .to_string()
        };
        let e = err("dpid = 1\n[dataplane]\naf_packet_ring = \"v3\"\n");
        assert!(
            e.contains("s.toml, line 3, key `dataplane.af_packet_ring`: `v3`"),
            "{e}"
        );
        let e = err("[dataplane]\nbusy_poll = true\nidle_spin_us = 5\n");
        assert!(
            e.contains("s.toml, line 3, key `dataplane.idle_spin_us`"),
            "{e}"
        );
        let e = err("[dataplane]\n\nidle_spin_us = 5000000\n");
        assert!(e.contains("line 3, key `dataplane.idle_spin_us`"), "{e}");
        let e = err("[dataplane]\nspin = 5\n");
        assert!(e.contains("line 2") && e.contains("spin"), "{e}");
        // Flags override the file.
        let dir = std::env::temp_dir().join(format!("offlow-dp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("s.toml");
        std::fs::write(&file, "[dataplane]\nidle_spin_us = 20\n").unwrap();
        let args = RunArgs {
            config: Some(file.clone()),
            busy_poll: true,
            af_packet_ring: Some(RxRing::Blocks),
            ..RunArgs::default()
        };
        let c = args.resolve().unwrap();
        assert_eq!(c.receive.idle, IdlePoll::Busy);
        assert_eq!(c.receive.af_packet_ring, RxRing::Blocks);
        let args = RunArgs {
            config: Some(file),
            idle_spin_us: Some(0),
            ..RunArgs::default()
        };
        assert_eq!(
            args.resolve().unwrap().receive.idle,
            IdlePoll::Adaptive {
                spin: Duration::ZERO
            }
        );
        let _ = std::fs::remove_dir_all(&dir);
        assert!(parse_ring("v2").is_err());
        assert_eq!(parse_ring("adaptive"), Ok(RxRing::Adaptive));
    }

    #[test]
    fn steer_entries_and_their_errors() {
        let text = "workers = 4\n[[steer]]\nmatch = \"udp,tp_dst=53\"\nworkers = [1, 3]\n[[steer]]\nmatch = \"ip,nw_src=10.0.0.0/8\"\nworkers = [0]\n";
        let c = parse_file(Path::new("s.toml"), text).unwrap();
        assert_eq!(c.steer.len(), 2);
        assert_eq!(c.steer[0].mask(), 0b1010);
        assert_eq!(c.steer[0].origin, "s.toml, line 4");
        let mut m = offlow_flow::Match::ANY;
        m.set_exact(offlow_flow::Field::EthType, 0x0800)
            .set_exact(offlow_flow::Field::IpProto, 17)
            .set_exact(offlow_flow::Field::UdpDst, 53);
        assert_eq!(c.steer[0].matcher, m);
        let t = c.steering();
        assert_eq!(t.rules().len(), 2);
        assert_eq!(t.rules()[1].workers, 1);

        let err = |text: &str| {
            parse_file(Path::new("s.toml"), text)
                .unwrap_err()
                .to_string()
        };
        // Bad match: file, line and key.
        let e = err("workers = 2\n[[steer]]\nmatch = \"udp,bogus=1\"\nworkers = [1]\n");
        assert!(
            e.contains("s.toml, line 3") && e.contains("steer.match"),
            "{e}"
        );
        let e = err("[[steer]]\nmatch = \"tp_dst=53\"\nworkers = [0]\n");
        assert!(e.contains("line 2") && e.contains("steer.match"), "{e}");
        let e = err("[[steer]]\nmatch = \"priority=5,udp\"\nworkers = [0]\n");
        assert!(
            e.contains("line 2") && e.contains("match fields only"),
            "{e}"
        );
        let e = err("[[steer]]\nmatch = \"udp,actions=drop\"\nworkers = [0]\n");
        assert!(e.contains("line 2") && e.contains("steer.match"), "{e}");
        // Bad workers.
        let e = err("[[steer]]\nmatch = \"udp\"\nworkers = []\n");
        assert!(e.contains("line 3") && e.contains("steer.workers"), "{e}");
        let c = parse_file(
            Path::new("s.toml"),
            "workers = 2\n[[steer]]\nmatch = \"udp\"\nworkers = [2]\n",
        )
        .unwrap();
        let e = check_steer(&c.steer, c.workers).unwrap_err().to_string();
        assert!(
            e.contains("s.toml, line 4") && e.contains("steer.workers") && e.contains("worker 2"),
            "{e}"
        );
        let e = err("[[steer]]\nmatch = \"udp\"\nworkers = [64]\n");
        assert!(e.contains("line 3") && e.contains("0..=63"), "{e}");
        let e = err("[[steer]]\nmatch = \"udp\"\nworkers = [0]\ncpus = 1\n");
        assert!(e.contains("cpus"), "{e}");
    }

    #[test]
    fn port_flags() {
        let p = parse_port_flag("veth0", 2).unwrap();
        assert_eq!((p.name.as_str(), p.number), ("veth0", 2));
        let p = parse_port_flag("veth0=10", 1).unwrap();
        assert_eq!(p.number, 10);
        assert!(parse_port_flag("veth0=0", 1).is_err());
        assert!(parse_port_flag("veth0=x", 1).is_err());
        assert!(parse_port_flag("", 1).is_err());
        let p = parse_port_flag("pcap:in.pcap:out.pcap", 3).unwrap();
        assert_eq!(p.number, 3);
        assert_eq!(
            p.kind,
            PortKind::Pcap {
                input: Some("in.pcap".into()),
                output: Some("out.pcap".into())
            }
        );
        let p = parse_port_flag("pcap::out.pcap", 1).unwrap();
        assert!(matches!(
            p.kind,
            PortKind::Pcap {
                input: None,
                output: Some(_)
            }
        ));
        assert!(parse_port_flag("pcap:", 1).is_err());
        let p = parse_port_flag("af_xdp:veth3=4", 1).unwrap();
        assert_eq!(
            (p.name.as_str(), p.number, p.kind),
            ("veth3", 4, PortKind::AfXdp)
        );
    }
}
