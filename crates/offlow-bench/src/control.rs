//! `offlow bench control`: does the switch keep answering one controller
//! while another streams flow-mods? (issue 21, item 3: "echo p99 under 2 ms
//! during the stream").
//!
//! # What runs, per switch (in the order given, in one invocation)
//! - A switch binary (`--switch-bin PATH`, repeatable; default: this
//!   executable): the [`crate::topo`] topology (two host namespaces joined
//!   through a switch namespace by veths), `PATH run --port p1=1 --port p2=2
//!   --fail-mode secure --workers W` with AF_PACKET ports, listening on a
//!   free loopback port. The two port-to-port flows (`in_port=1` →
//!   `output:2` and back, table [`PORT_TABLE`], priority 1000) are installed
//!   by this client, then background traffic starts (`--traffic-pps`, 0 =
//!   none): a paced AF_PACKET generator in host A sends 64-byte UDP frames
//!   of [`TRAFFIC_FLOWS`] flows across the switch to host B, so the packet
//!   worker spends its time inside its read sections, which is what a
//!   commit waits for.
//! - An external switch already running (`--switch tcp:HOST:PORT`, e.g.
//!   Open vSwitch): no topology, no traffic, no port flows; this client's
//!   stream flows (known by [`STREAM_COOKIE`]) are deleted before and after.
//!
//! Then two OpenFlow connections, each on its own thread and socket:
//! - **Stream** (A): `--flow-mods` distinct ADD flow-mods
//!   (`ip,nw_dst=100.64.x.y/32,actions=output:2`, pre-encoded) in table
//!   `--stream-table` (default 1: no packet reaches it, because the port
//!   flows in table 0 have no goto, so the stream never changes what the
//!   traffic does), sent in groups of `--barrier-every`, each group
//!   followed by a BARRIER_REQUEST whose reply is awaited before the next
//!   group, as a typical controller does. It answers the switch's
//!   ECHO_REQUESTs and counts error replies.
//! - **Probe** (B): every `--probe-ms` an ECHO_REQUEST, wait for its reply,
//!   then a FLOW_STATS request for table `--probe-table` (default 0: the
//!   two port flows, so the reply is two entries and the request still
//!   takes the switch's counter-sync path; dumping the stream's table would
//!   measure a 100K-entry dump instead of the control loop), wait for the
//!   whole (multipart) reply. Each reply time is send → last byte decoded.
//!   It runs `--idle-seconds` before the stream starts (the idle baseline,
//!   traffic on, no flow-mods) and until the stream's last barrier reply.
//!   A tick that comes while the previous probe is still waiting is
//!   skipped, not queued, so a stall shows as one long sample.
//!
//! # Report
//! Per switch: the stream's duration and flow-mods/s, barriers, errors,
//! and each group's time (written → its barrier's reply: a stall inside
//! the switch shows there as well as in the probe's times); for ECHO and FLOW_STATS separately, idle and during the stream: count,
//! p50, p90, p99, max in ms ([`percentile`]: nearest rank). `--json` prints
//! one object (`experiment: "control"`, one row per switch) as the last
//! line.
//!
//! # Caveat
//! On a 2-vCPU machine the client's threads (stream, probe, generator,
//! receiver) share the cores with the switch's control and packet threads:
//! a reply time includes the probe thread's own wake-up. The idle row shows
//! that floor.
//!
//! Invariants: everything a row creates is owned by a guard (see
//! [`crate::topo`]), so an error or Ctrl-C leaves nothing behind; every
//! read has a deadline (`--timeout`), so a switch that stops answering
//! fails the row instead of hanging.
//!
//! Thread-safety: the probe thread shares only an atomic phase with the
//! stream (calling) thread and returns its samples when joined.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use offlow_flow::{Field, Match};
use offlow_openflow::multipart::OFPMPF_MORE;
use offlow_openflow::{
    decode, encode_to_vec, frame_len, Action, Body, FlowMod, FlowStatsRequest, Hello, Instruction,
    Message, MultipartReplyBody, MultipartRequest, MultipartRequestBody, OxmMatch,
};
use offlow_pipeline::{PortNo, GROUP_ANY};
use serde::Serialize;
use serde_json::json;

use crate::report::{fmt_f, print_json_line, Table};
use crate::topo::{self, catch_interrupt, interrupted, sleep_unless_interrupted, Topo};
use crate::traffic::{build_frames, Snapshot, Traffic};

/// Table of the two port-to-port flows.
pub const PORT_TABLE: u8 = 0;
/// Priority of the port-to-port flows.
pub const PORT_PRIORITY: u16 = 1000;
/// Priority of the stream's flows (below the port flows, should the stream
/// be put in their table).
pub const STREAM_PRIORITY: u16 = 100;
/// Cookie of the stream's flows (deleted by it on an external switch).
pub const STREAM_COOKIE: u64 = 0x0f10_c0de_0000_0021;
/// Cookie of the port-to-port flows.
pub const PORT_COOKIE: u64 = 0x0f10_c0de_0000_0001;
/// First stream destination (100.64.0.0, RFC 6598 space: none of the
/// traffic's addresses); flow-mod `i` matches `FIRST_STREAM_DST + i`.
pub const FIRST_STREAM_DST: u32 = 0x6440_0000;
/// Most flow-mods a stream may hold (the addresses stay inside 100.64/10).
pub const MAX_FLOW_MODS: usize = 1 << 22;
/// UDP flows in the background traffic.
pub const TRAFFIC_FLOWS: usize = 4;
/// Frame size of the background traffic, with FCS.
pub const TRAFFIC_FRAME_SIZE: usize = 64;
/// The goal: echo p99 during the stream, ms.
pub const GOAL_ECHO_P99_MS: f64 = 2.0;
/// Slowest groups listed per row.
pub const SLOWEST_GROUPS: usize = 5;
/// Barrier xids are `BARRIER_XID_BASE + group` (flow-mods use `1 + i`).
const BARRIER_XID_BASE: u32 = 0x8000_0000;

/// `offlow bench control` options.
#[derive(Debug, Clone, clap::Args)]
pub struct ControlArgs {
    /// A switch binary to start and measure (repeatable, measured in the
    /// order given; default: this executable unless `--switch` is given).
    #[arg(long = "switch-bin")]
    pub switch_bins: Vec<PathBuf>,
    /// An already running switch, `tcp:HOST:PORT` (repeatable; measured
    /// after the binaries, with no topology and no traffic).
    #[arg(long = "switch")]
    pub switches: Vec<String>,
    /// Flow-mods in the stream.
    #[arg(long, default_value_t = 100_000)]
    pub flow_mods: usize,
    /// A barrier after every this many flow-mods (its reply awaited).
    #[arg(long, default_value_t = 100)]
    pub barrier_every: usize,
    /// Probe interval, milliseconds.
    #[arg(long, default_value_t = 10)]
    pub probe_ms: u64,
    /// Seconds of probing before the stream starts (idle baseline).
    #[arg(long, default_value_t = 1.0)]
    pub idle_seconds: f64,
    /// Packet workers of a started switch.
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
    /// Background traffic through a started switch, frames/s (0: none).
    #[arg(long, default_value_t = 100_000)]
    pub traffic_pps: u64,
    /// Table the stream's flows go to (default 1: no packet reaches it).
    #[arg(long, default_value_t = 1)]
    pub stream_table: u8,
    /// Table the FLOW_STATS probe dumps (default 0: the two port flows).
    #[arg(long, default_value_t = PORT_TABLE)]
    pub probe_table: u8,
    /// Longest wait for any one reply, seconds.
    #[arg(long, default_value_t = 60)]
    pub timeout: u64,
    /// Print one JSON object as the last line.
    #[arg(long)]
    pub json: bool,
}

impl Default for ControlArgs {
    fn default() -> ControlArgs {
        ControlArgs {
            switch_bins: Vec::new(),
            switches: Vec::new(),
            flow_mods: 100_000,
            barrier_every: 100,
            probe_ms: 10,
            idle_seconds: 1.0,
            workers: 1,
            traffic_pps: 100_000,
            stream_table: 1,
            probe_table: PORT_TABLE,
            timeout: 60,
            json: false,
        }
    }
}

fn check_args(a: &ControlArgs) -> anyhow::Result<()> {
    if a.flow_mods == 0 || a.flow_mods > MAX_FLOW_MODS {
        bail!("--flow-mods must be between 1 and {MAX_FLOW_MODS}");
    }
    if a.barrier_every == 0 {
        bail!("--barrier-every must be at least 1");
    }
    if !(1..=10_000).contains(&a.probe_ms) {
        bail!("--probe-ms must be between 1 and 10000");
    }
    // Written so that NaN fails too.
    if !(0.0..=60.0).contains(&a.idle_seconds) {
        bail!("--idle-seconds must be in [0, 60]");
    }
    if a.workers == 0 || a.workers > 64 {
        bail!("--workers must be between 1 and 64");
    }
    if a.traffic_pps > 10_000_000 {
        bail!("--traffic-pps must be at most 10000000");
    }
    if a.stream_table == a.probe_table {
        bail!(
            "--probe-table must differ from --stream-table: a FLOW_STATS of the stream's \
             table would time the dump of its flows, not the control loop"
        );
    }
    if a.stream_table == 0xff || a.probe_table == 0xff {
        bail!("table 255 is OFPTT_ALL, not a table");
    }
    if a.timeout == 0 {
        bail!("--timeout must be at least 1 s");
    }
    for s in &a.switches {
        tcp_addr(s)?;
    }
    Ok(())
}

/// `tcp:HOST:PORT` → `HOST:PORT`.
fn tcp_addr(target: &str) -> anyhow::Result<&str> {
    let addr = target
        .strip_prefix("tcp:")
        .with_context(|| format!("--switch {target}: expected tcp:HOST:PORT"))?;
    match addr.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => Ok(addr),
        _ => bail!("--switch {target}: expected tcp:HOST:PORT"),
    }
}

// -------------------------------------------------------------- statistics --

/// The `p`-th percentile (0 < p ≤ 100) of ascending `sorted` by nearest
/// rank: the smallest sample with at least `p`% of the samples at or below
/// it; `None` for no samples.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let n = sorted.len();
    // `rank` is in 1..=n: the clamp keeps p ≤ 0 and rounding at p = 100
    // inside the slice.
    let rank = ((p / 100.0) * n as f64).ceil().clamp(1.0, n as f64) as usize;
    Some(sorted[rank - 1])
}

/// The mean of `samples`; `None` for none.
pub fn mean(samples: &[f64]) -> Option<f64> {
    (!samples.is_empty()).then(|| samples.iter().sum::<f64>() / samples.len() as f64)
}

/// Reply times of one kind of probe in one phase.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Latency {
    /// Requests sent.
    pub sent: usize,
    /// Replies received (one per request, or the request's row failed).
    pub count: usize,
    /// Median reply time, ms.
    pub p50_ms: Option<f64>,
    /// 90th percentile, ms.
    pub p90_ms: Option<f64>,
    /// 99th percentile, ms.
    pub p99_ms: Option<f64>,
    /// Longest reply time, ms.
    pub max_ms: Option<f64>,
}

impl Latency {
    /// Summarise `samples_ms` (reply times) of `sent` requests.
    pub fn from_samples(sent: usize, mut samples_ms: Vec<f64>) -> Latency {
        samples_ms.sort_by(f64::total_cmp);
        Latency {
            sent,
            count: samples_ms.len(),
            p50_ms: percentile(&samples_ms, 50.0),
            p90_ms: percentile(&samples_ms, 90.0),
            p99_ms: percentile(&samples_ms, 99.0),
            max_ms: samples_ms.last().copied(),
        }
    }
}

/// ECHO and FLOW_STATS reply times of one phase.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PhaseLatency {
    /// ECHO_REQUEST → ECHO_REPLY.
    pub echo: Latency,
    /// FLOW_STATS request → last reply part.
    pub flow_stats: Latency,
}

/// One measured (or failed) switch.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Row {
    /// The binary's path or the `tcp:` target.
    pub switch: String,
    /// `offlow` (started here) or `external`.
    pub kind: &'static str,
    /// Packet workers (started switches).
    pub workers: Option<usize>,
    /// Background traffic asked for, frames/s (0: none).
    pub traffic_pps: u64,
    /// Traffic frames received on host B per second, idle phase.
    pub traffic_rx_pps_idle: Option<f64>,
    /// The same during the stream.
    pub traffic_rx_pps_stream: Option<f64>,
    /// Flow-mods sent.
    pub flow_mods: usize,
    /// Barrier replies received.
    pub barriers: usize,
    /// Barriers sent.
    pub barriers_expected: usize,
    /// Error replies to the stream.
    pub errors: usize,
    /// The first error reply, decoded.
    pub first_error: Option<String>,
    /// ECHO_REQUESTs the switch sent and the clients answered.
    pub echo_requests_from_switch: usize,
    /// First flow-mod written to last barrier reply, seconds.
    pub stream_seconds: f64,
    /// `flow_mods / stream_seconds`.
    pub flow_mods_per_s: f64,
    /// Per group of the stream: its flow-mods written → its barrier's
    /// reply (where a stalled commit shows).
    pub group: Latency,
    /// The [`SLOWEST_GROUPS`] slowest groups, slowest first: (flow-mods
    /// the stream had added before the group, its time in ms). Shows
    /// whether stalls come with the table's size.
    pub slowest_groups: Vec<(usize, f64)>,
    /// Entries in the last FLOW_STATS reply (2 with the port flows).
    pub flow_stats_entries: Option<usize>,
    /// Probe reply times before the stream.
    pub idle: PhaseLatency,
    /// Probe reply times during the stream.
    pub stream: PhaseLatency,
    /// Why the row failed.
    pub error: Option<String>,
}

impl Row {
    /// Whether echo p99 during the stream met [`GOAL_ECHO_P99_MS`].
    pub fn echo_goal_met(&self) -> Option<bool> {
        self.stream.echo.p99_ms.map(|p| p < GOAL_ECHO_P99_MS)
    }
}

/// Everything `offlow bench control` measured.
#[derive(Debug, Clone, Serialize)]
pub struct ControlReport {
    /// Flow-mods per stream.
    pub flow_mods: usize,
    /// Flow-mods per barrier.
    pub barrier_every: usize,
    /// Probe interval, ms.
    pub probe_ms: u64,
    /// Idle phase, seconds.
    pub idle_seconds: f64,
    /// The stream's table.
    pub stream_table: u8,
    /// The FLOW_STATS probe's table.
    pub probe_table: u8,
    /// One per switch, in the order run.
    pub rows: Vec<Row>,
}

impl ControlReport {
    /// The `--json` object.
    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "experiment": "control",
            "flow_mods": self.flow_mods,
            "barrier_every": self.barrier_every,
            "probe_ms": self.probe_ms,
            "idle_seconds": self.idle_seconds,
            "stream_table": self.stream_table,
            "probe_table": self.probe_table,
            "goal_echo_p99_ms": GOAL_ECHO_P99_MS,
            "rows": self.rows,
        })
    }
}

// ------------------------------------------------------------ the client --

fn encode(m: &Message) -> anyhow::Result<Vec<u8>> {
    encode_to_vec(m).map_err(|e| anyhow!("encoding {m:?}: {e}"))
}

/// A blocking OpenFlow 1.3 connection that answers the switch's
/// ECHO_REQUESTs itself.
struct Client {
    sock: TcpStream,
    /// Received bytes not yet decoded.
    buf: Vec<u8>,
    chunk: Vec<u8>,
    /// ECHO_REQUESTs from the switch answered.
    echoes_answered: usize,
}

impl Client {
    /// Connect and exchange HELLOs; every later read waits at most
    /// `timeout`.
    fn connect(addr: &str, timeout: Duration) -> anyhow::Result<Client> {
        let sock = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
        sock.set_nodelay(true)?;
        sock.set_read_timeout(Some(timeout))?;
        let mut c = Client {
            sock,
            buf: Vec::new(),
            chunk: vec![0; 64 * 1024],
            echoes_answered: 0,
        };
        let hello = Body::Hello(Hello {
            elements: Vec::new(),
        });
        c.send(&encode(&Message::new(0, hello))?)?;
        loop {
            if let Body::Hello(_) = c.next()?.body {
                return Ok(c);
            }
        }
    }

    fn send(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        self.sock.write_all(bytes).context("writing to the switch")
    }

    /// The next message other than an ECHO_REQUEST (those are answered).
    fn next(&mut self) -> anyhow::Result<Message> {
        loop {
            if let Some(n) = frame_len(&self.buf).context("bad OpenFlow framing")? {
                if self.buf.len() >= n {
                    let m = decode(&self.buf[..n]).context("undecodable message");
                    self.buf.drain(..n);
                    let m = m?;
                    if let Body::EchoRequest(d) = m.body {
                        self.send(&encode(&Message::new(m.xid, Body::EchoReply(d)))?)?;
                        self.echoes_answered += 1;
                        continue;
                    }
                    return Ok(m);
                }
            }
            let k = self
                .sock
                .read(&mut self.chunk)
                .context("reading from the switch (no reply in time?)")?;
            if k == 0 {
                bail!("the switch closed the connection");
            }
            self.buf.extend_from_slice(&self.chunk[..k]);
        }
    }

    /// Send `msgs` followed by a barrier and wait for its reply; error
    /// replies are an error.
    fn apply(&mut self, msgs: &[Message], barrier_xid: u32) -> anyhow::Result<()> {
        let mut bytes = Vec::new();
        for m in msgs {
            bytes.extend(encode(m)?);
        }
        bytes.extend(encode(&Message::new(barrier_xid, Body::BarrierRequest))?);
        self.send(&bytes)?;
        loop {
            let m = self.next()?;
            match m.body {
                Body::BarrierReply if m.xid == barrier_xid => return Ok(()),
                Body::Error(e) => bail!("the switch refused a set-up message: {e:?}"),
                _ => {}
            }
        }
    }
}

fn output(port: u32) -> Vec<Instruction> {
    vec![Instruction::ApplyActions(vec![Action::Output {
        port,
        max_len: 0,
    }])]
}

/// `in_port=1,actions=output:2` and back.
fn port_flows() -> Vec<Message> {
    [(1, 2), (2, 1)]
        .into_iter()
        .map(|(i, o)| {
            let mut m = Match::default();
            m.set_exact(Field::InPort, i);
            let mut fm = FlowMod::add(PORT_TABLE, PORT_PRIORITY, &m, output(o as u32));
            fm.cookie = PORT_COOKIE;
            Message::new(o as u32, Body::FlowMod(fm))
        })
        .collect()
}

/// Delete every flow of `table` carrying [`STREAM_COOKIE`].
fn delete_stream_flows(table: u8) -> Message {
    let mut fm = FlowMod::add(table, 0, &Match::ANY, Vec::new());
    fm.command = offlow_openflow::message::flow_mod_command::DELETE;
    fm.cookie = STREAM_COOKIE;
    fm.cookie_mask = u64::MAX;
    Message::new(3, Body::FlowMod(fm))
}

/// The stream, encoded once: groups of flow-mods, each ending with its
/// barrier.
struct Stream {
    bytes: Vec<u8>,
    /// `(start, end, barrier xid)`: `bytes[start..end]` is one group with
    /// its barrier.
    groups: Vec<(usize, usize, u32)>,
    flow_mods: usize,
}

/// The ADD flow-mods `ip,nw_dst=FIRST_STREAM_DST+i/32,actions=output:2`
/// for `i < n` in `table`, a barrier after every `every`.
fn encode_stream(n: usize, every: usize, table: u8) -> anyhow::Result<Stream> {
    let mut bytes = Vec::new();
    let mut groups = Vec::new();
    let mut start = 0;
    for i in 0..n {
        let mut m = Match::default();
        // `n` ≤ MAX_FLOW_MODS (checked), so the address stays in 100.64/10.
        m.set_exact(Field::EthType, 0x0800)
            .set_exact(Field::Ipv4Dst, u128::from(FIRST_STREAM_DST + i as u32));
        let mut fm = FlowMod::add(table, STREAM_PRIORITY, &m, output(2));
        fm.cookie = STREAM_COOKIE;
        bytes.extend(encode(&Message::new(i as u32 + 1, Body::FlowMod(fm)))?);
        if (i + 1) % every == 0 || i + 1 == n {
            let xid = BARRIER_XID_BASE + groups.len() as u32;
            bytes.extend(encode(&Message::new(xid, Body::BarrierRequest))?);
            groups.push((start, bytes.len(), xid));
            start = bytes.len();
        }
    }
    Ok(Stream {
        bytes,
        groups,
        flow_mods: n,
    })
}

/// What the stream connection saw.
#[derive(Debug, Default)]
struct StreamOutcome {
    seconds: f64,
    /// Per group: its first byte written → its barrier's reply, ms.
    group_ms: Vec<f64>,
    barriers: usize,
    errors: usize,
    first_error: Option<String>,
}

/// Send each group and wait for its barrier's reply before the next.
fn run_stream(c: &mut Client, s: &Stream, out: &mut StreamOutcome) -> anyhow::Result<()> {
    let t0 = Instant::now();
    for &(a, b, xid) in &s.groups {
        if interrupted() {
            bail!("interrupted");
        }
        let t = Instant::now();
        c.send(&s.bytes[a..b])?;
        loop {
            let m = c.next()?;
            match m.body {
                Body::BarrierReply if m.xid == xid => break,
                Body::Error(e) => {
                    out.errors += 1;
                    out.first_error.get_or_insert_with(|| format!("{e:?}"));
                }
                _ => {}
            }
        }
        out.barriers += 1;
        out.group_ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    out.seconds = t0.elapsed().as_secs_f64();
    Ok(())
}

// -------------------------------------------------------------- the probe --

const PHASE_IDLE: u8 = 0;
/// Set by the stream thread; the probe answers with [`PHASE_STREAM`] when
/// it takes its first tick of the stream phase, and the stream starts then,
/// so even a stream shorter than a tick gets a probe.
const PHASE_STREAM_ASKED: u8 = 1;
const PHASE_STREAM: u8 = 2;
const PHASE_STOP: u8 = 3;

/// The probe's samples, indexed by phase (idle, stream).
#[derive(Debug, Default)]
struct ProbeLog {
    echo_sent: [usize; 2],
    echo_ms: [Vec<f64>; 2],
    stats_sent: [usize; 2],
    stats_ms: [Vec<f64>; 2],
    last_entries: Option<usize>,
    echoes_answered: usize,
    error: Option<String>,
}

fn flow_stats_request(xid: u32, table: u8) -> Message {
    Message::new(
        xid,
        Body::MultipartRequest(MultipartRequest {
            flags: 0,
            body: MultipartRequestBody::Flow(FlowStatsRequest {
                table_id: table,
                out_port: PortNo::ANY.0,
                out_group: GROUP_ANY,
                cookie: 0,
                cookie_mask: 0,
                matcher: OxmMatch::any(),
            }),
        }),
    )
}

/// Probe until the phase says stop; a failure ends the probe and is kept
/// in the log.
fn probe(mut c: Client, phase: &AtomicU8, period: Duration, table: u8) -> ProbeLog {
    let mut log = ProbeLog::default();
    if let Err(e) = probe_loop(&mut c, phase, period, table, &mut log) {
        log.error = Some(format!("probe: {e:#}"));
    }
    log.echoes_answered = c.echoes_answered;
    log
}

fn probe_loop(
    c: &mut Client,
    phase: &AtomicU8,
    period: Duration,
    table: u8,
    log: &mut ProbeLog,
) -> anyhow::Result<()> {
    let mut xid = 0u32;
    let mut next_tick = Instant::now();
    loop {
        let p = match phase.load(Ordering::Acquire) {
            PHASE_IDLE => 0,
            PHASE_STREAM_ASKED => {
                phase.store(PHASE_STREAM, Ordering::Release);
                1
            }
            PHASE_STREAM => 1,
            _ => return Ok(()),
        };
        if interrupted() {
            bail!("interrupted");
        }
        xid = xid.wrapping_add(1);
        let echo = encode(&Message::new(xid, Body::EchoRequest(b"probe".to_vec())))?;
        let t = Instant::now();
        c.send(&echo)?;
        log.echo_sent[p] += 1;
        loop {
            let m = c.next()?;
            match m.body {
                Body::EchoReply(_) if m.xid == xid => break,
                Body::Error(e) => bail!("error reply to an echo: {e:?}"),
                _ => {}
            }
        }
        log.echo_ms[p].push(t.elapsed().as_secs_f64() * 1e3);

        xid = xid.wrapping_add(1);
        let req = encode(&flow_stats_request(xid, table))?;
        let t = Instant::now();
        c.send(&req)?;
        log.stats_sent[p] += 1;
        let mut entries = 0;
        loop {
            let m = c.next()?;
            match m.body {
                Body::MultipartReply(r) if m.xid == xid => {
                    if let MultipartReplyBody::Flow(f) = &r.body {
                        entries += f.len();
                    }
                    if r.flags & OFPMPF_MORE == 0 {
                        break;
                    }
                }
                Body::Error(e) => bail!("error reply to a flow-stats request: {e:?}"),
                _ => {}
            }
        }
        log.stats_ms[p].push(t.elapsed().as_secs_f64() * 1e3);
        log.last_entries = Some(entries);

        // Next tick on the fixed schedule; ticks missed while waiting are
        // skipped (a stall is one long sample, not a burst afterwards).
        next_tick += period;
        let now = Instant::now();
        if next_tick <= now {
            let behind = (now - next_tick).as_nanos() / period.as_nanos().max(1);
            next_tick += period * (behind as u32 + 1);
        }
        loop {
            let now = Instant::now();
            match phase.load(Ordering::Acquire) {
                PHASE_STOP => break,
                // Start the stream phase now rather than at the next tick.
                PHASE_STREAM_ASKED => next_tick = now,
                _ => {}
            }
            if now >= next_tick {
                break;
            }
            std::thread::sleep((next_tick - now).min(Duration::from_millis(10)));
        }
    }
}

// ----------------------------------------------------------------- a row --

/// Probe idle, then stream with the probe running; fills `row`.
fn measure(
    addr: &str,
    args: &ControlArgs,
    stream: &Stream,
    traffic: Option<&Traffic>,
    row: &mut Row,
) -> anyhow::Result<()> {
    let timeout = Duration::from_secs(args.timeout);
    let mut streamer = Client::connect(addr, timeout).context("stream connection")?;
    let prober = Client::connect(addr, timeout).context("probe connection")?;
    let phase = Arc::new(AtomicU8::new(PHASE_IDLE));
    let handle = {
        let phase = Arc::clone(&phase);
        let period = Duration::from_millis(args.probe_ms);
        let table = args.probe_table;
        std::thread::Builder::new()
            .name("ctl-probe".into())
            .spawn(move || probe(prober, &phase, period, table))?
    };
    let snap = |t: Option<&Traffic>| (t.map(Traffic::snapshot), Instant::now());
    let idle_start = snap(traffic);
    sleep_unless_interrupted(Duration::from_secs_f64(args.idle_seconds));
    phase.store(PHASE_STREAM_ASKED, Ordering::Release);
    // The probe takes its first stream-phase tick within a sleep slice;
    // it may also have failed already.
    while phase.load(Ordering::Acquire) == PHASE_STREAM_ASKED && !handle.is_finished() {
        std::thread::sleep(Duration::from_micros(50));
    }
    let stream_start = snap(traffic);
    let mut out = StreamOutcome::default();
    let streamed = run_stream(&mut streamer, stream, &mut out);
    phase.store(PHASE_STOP, Ordering::Release);
    let stream_end = snap(traffic);
    let log = handle
        .join()
        .map_err(|_| anyhow!("the probe thread panicked"))?;

    let rate = |a: &(Option<Snapshot>, Instant), b: &(Option<Snapshot>, Instant)| {
        let (Some(sa), Some(sb)) = (a.0, b.0) else {
            return None;
        };
        let secs = (b.1 - a.1).as_secs_f64();
        (secs > 0.0).then(|| sb.since(&sa).received as f64 / secs)
    };
    row.traffic_rx_pps_idle = rate(&idle_start, &stream_start);
    row.traffic_rx_pps_stream = rate(&stream_start, &stream_end);
    row.flow_mods = stream.flow_mods;
    row.barriers = out.barriers;
    row.barriers_expected = stream.groups.len();
    row.errors = out.errors;
    row.first_error = out.first_error;
    row.stream_seconds = out.seconds;
    row.flow_mods_per_s = if out.seconds > 0.0 {
        stream.flow_mods as f64 / out.seconds
    } else {
        0.0
    };
    let mut by_time: Vec<(usize, f64)> = out
        .group_ms
        .iter()
        .enumerate()
        .map(|(g, &t)| (g * args.barrier_every, t))
        .collect();
    by_time.sort_by(|a, b| b.1.total_cmp(&a.1));
    by_time.truncate(SLOWEST_GROUPS);
    row.slowest_groups = by_time;
    row.group = Latency::from_samples(stream.groups.len(), out.group_ms);
    row.echo_requests_from_switch = streamer.echoes_answered + log.echoes_answered;
    row.flow_stats_entries = log.last_entries;
    let [echo_idle, echo_stream] = log.echo_ms;
    let [stats_idle, stats_stream] = log.stats_ms;
    row.idle = PhaseLatency {
        echo: Latency::from_samples(log.echo_sent[0], echo_idle),
        flow_stats: Latency::from_samples(log.stats_sent[0], stats_idle),
    };
    row.stream = PhaseLatency {
        echo: Latency::from_samples(log.echo_sent[1], echo_stream),
        flow_stats: Latency::from_samples(log.stats_sent[1], stats_stream),
    };
    streamed.context("stream connection")?;
    if let Some(e) = log.error {
        bail!(e);
    }
    Ok(())
}

/// Start `bin` in a fresh topology, install the port flows, start the
/// traffic, measure.
fn run_binary(
    bin: &std::path::Path,
    args: &ControlArgs,
    stream: &Stream,
    row: &mut Row,
) -> anyhow::Result<()> {
    let t = Topo::hosts(true, 1)?;
    let (mut switch, port) = topo::start_offlow(bin, t.sw()?, args.workers, false)?;
    let addr = format!("127.0.0.1:{port}");
    Client::connect(&addr, Duration::from_secs(args.timeout))?
        .apply(&port_flows(), BARRIER_XID_BASE - 1)
        .context("installing the port flows")?;
    let traffic = if args.traffic_pps > 0 {
        let frames = Arc::new(build_frames(TRAFFIC_FLOWS, TRAFFIC_FRAME_SIZE));
        let tr = Traffic::start(
            &t,
            &frames,
            TRAFFIC_FRAME_SIZE,
            Some(args.traffic_pps),
            "ctl",
        )?;
        if !tr.wait_first_frame() && !interrupted() {
            bail!("no traffic frame crossed the switch");
        }
        Some(tr)
    } else {
        None
    };
    let measured = measure(&addr, args, stream, traffic.as_ref(), row);
    if let Some(tr) = traffic {
        tr.stop()?;
    }
    switch.check_alive()?;
    measured
}

/// Measure an external switch; the stream's flows are removed before and
/// after.
fn run_external(
    target: &str,
    args: &ControlArgs,
    stream: &Stream,
    row: &mut Row,
) -> anyhow::Result<()> {
    let addr = tcp_addr(target)?;
    let timeout = Duration::from_secs(args.timeout);
    let clean = || -> anyhow::Result<()> {
        Client::connect(addr, timeout)?
            .apply(
                &[delete_stream_flows(args.stream_table)],
                BARRIER_XID_BASE - 1,
            )
            .context("deleting the stream's flows")
    };
    clean()?;
    let measured = measure(addr, args, stream, None, row);
    clean()?;
    measured
}

/// Measure every switch.
pub fn run(args: &ControlArgs) -> anyhow::Result<ControlReport> {
    check_args(args)?;
    let mut bins = args.switch_bins.clone();
    if bins.is_empty() && args.switches.is_empty() {
        bins.push(std::env::current_exe().context("locating the offlow binary")?);
    }
    let stream = encode_stream(args.flow_mods, args.barrier_every, args.stream_table)?;
    let mut rows = Vec::new();
    let targets = bins
        .iter()
        .map(|b| (b.display().to_string(), Some(b)))
        .chain(args.switches.iter().map(|s| (s.clone(), None)));
    for (name, bin) in targets {
        if interrupted() {
            bail!("interrupted (everything created so far was removed)");
        }
        let mut row = Row {
            switch: name.clone(),
            kind: if bin.is_some() { "offlow" } else { "external" },
            workers: bin.map(|_| args.workers),
            traffic_pps: if bin.is_some() { args.traffic_pps } else { 0 },
            ..Row::default()
        };
        eprintln!("control: {name} ...");
        let r = match bin {
            Some(b) => run_binary(b, args, &stream, &mut row),
            None => run_external(&name, args, &stream, &mut row),
        };
        if let Err(e) = r {
            eprintln!("control: {name}: failed: {e:#}");
            row.error = Some(format!("{e:#}"));
        }
        rows.push(row);
    }
    Ok(ControlReport {
        flow_mods: args.flow_mods,
        barrier_every: args.barrier_every,
        probe_ms: args.probe_ms,
        idle_seconds: args.idle_seconds,
        stream_table: args.stream_table,
        probe_table: args.probe_table,
        rows,
    })
}

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| fmt_f(v, 3))
}

/// `offlow bench control`.
pub fn main(args: &ControlArgs) -> anyhow::Result<()> {
    catch_interrupt();
    let r = run(args)?;
    let stream_table = if r.stream_table == PORT_TABLE {
        "the port flows' table, below their priority: packets are looked up among them"
    } else {
        "no packet reaches it"
    };
    let probe_table = if r.probe_table == PORT_TABLE {
        "the two port flows on a started switch"
    } else {
        "a table nothing is added to"
    };
    println!(
        "control: stream of {} ADD flow-mods (ip,nw_dst=<distinct /32>) into table {} \
         ({stream_table}), a barrier every {} awaited before the next group; \
         probe every {} ms on a second connection: ECHO, then FLOW_STATS of table {} \
         ({probe_table}), {} s idle before the stream",
        r.flow_mods, r.stream_table, r.barrier_every, r.probe_ms, r.probe_table, r.idle_seconds
    );
    let mut t = Table::new([
        "switch", "phase", "echo n", "p50 ms", "p90 ms", "p99 ms", "max ms", "stats n", "p50 ms",
        "p90 ms", "p99 ms", "max ms",
    ]);
    for row in &r.rows {
        for (phase, l) in [("idle", &row.idle), ("stream", &row.stream)] {
            t.row([
                row.switch.clone(),
                phase.to_string(),
                format!("{}/{}", l.echo.count, l.echo.sent),
                ms(l.echo.p50_ms),
                ms(l.echo.p90_ms),
                ms(l.echo.p99_ms),
                ms(l.echo.max_ms),
                format!("{}/{}", l.flow_stats.count, l.flow_stats.sent),
                ms(l.flow_stats.p50_ms),
                ms(l.flow_stats.p90_ms),
                ms(l.flow_stats.p99_ms),
                ms(l.flow_stats.max_ms),
            ]);
        }
    }
    print!("{}", t.render());
    println!("(n = replies/requests; reply time = request written → reply decoded)");
    for row in &r.rows {
        let traffic = match (row.traffic_rx_pps_idle, row.traffic_rx_pps_stream) {
            (Some(i), Some(s)) => format!(
                "traffic {} pps offered, {:.0} pps forwarded idle, {:.0} during the stream",
                row.traffic_pps, i, s
            ),
            _ => "no traffic".into(),
        };
        println!(
            "{}: stream {} flow-mods in {} s = {:.0} flow-mods/s, barriers {}/{}, errors {}{}; \
             group of {} + barrier reply p50 {} p99 {} max {} ms; \
             {traffic}; echo p99 during the stream {} ms: goal (< {GOAL_ECHO_P99_MS} ms) {}",
            row.switch,
            row.flow_mods,
            fmt_f(row.stream_seconds, 3),
            row.flow_mods_per_s,
            row.barriers,
            row.barriers_expected,
            row.errors,
            row.first_error
                .as_ref()
                .map(|e| format!(" (first: {e})"))
                .unwrap_or_default(),
            r.barrier_every,
            ms(row.group.p50_ms),
            ms(row.group.p99_ms),
            ms(row.group.max_ms),
            ms(row.stream.echo.p99_ms),
            match row.echo_goal_met() {
                Some(true) => "met",
                Some(false) => "NOT met",
                None => "not measured",
            }
        );
        if !row.slowest_groups.is_empty() {
            let list: Vec<String> = row
                .slowest_groups
                .iter()
                .map(|(at, t)| format!("{} ms after {at}", fmt_f(*t, 1)))
                .collect();
            println!(
                "{}: slowest groups (flow-mods added before it): {}",
                row.switch,
                list.join(", ")
            );
        }
        if let Some(e) = &row.error {
            println!("{}: error: {e}", row.switch);
        }
    }
    if args.json {
        print_json_line(&r.to_json());
    }
    if interrupted() {
        bail!("interrupted: the last row is short");
    }
    let failed = r.rows.iter().filter(|x| x.error.is_some()).count();
    if failed > 0 {
        bail!("{failed} switch(es) failed (see above)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn percentile_by_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), Some(50.0));
        assert_eq!(percentile(&v, 90.0), Some(90.0));
        assert_eq!(percentile(&v, 99.0), Some(99.0));
        assert_eq!(percentile(&v, 100.0), Some(100.0));
        assert_eq!(percentile(&v, 0.5), Some(1.0));
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(percentile(&[7.0], 1.0), Some(7.0));
        assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
        // Ten samples: p99 is the largest, p50 the fifth.
        let w: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(percentile(&w, 99.0), Some(10.0));
        assert_eq!(percentile(&w, 50.0), Some(5.0));
        assert_eq!(percentile(&w, 51.0), Some(6.0));
    }

    proptest! {
        #[test]
        fn latency_percentiles_are_ordered_samples(
            samples in proptest::collection::vec(0.0f64..1e4, 1..300),
        ) {
            let l = Latency::from_samples(samples.len(), samples.clone());
            let (p50, p90, p99, max) = (
                l.p50_ms.unwrap(), l.p90_ms.unwrap(), l.p99_ms.unwrap(), l.max_ms.unwrap(),
            );
            prop_assert!(p50 <= p90 && p90 <= p99 && p99 <= max);
            prop_assert_eq!(l.count, samples.len());
            for p in [p50, p90, p99, max] {
                prop_assert!(samples.contains(&p));
            }
            // At least p% of the samples are at or below the p-th percentile.
            let at_or_below = samples.iter().filter(|&&s| s <= p99).count();
            prop_assert!(at_or_below as f64 >= 0.99 * samples.len() as f64);
        }
    }

    #[test]
    fn stream_groups_end_with_their_barrier() {
        let s = encode_stream(250, 100, 1).unwrap();
        assert_eq!(s.groups.len(), 3);
        let mut flow_mods = 0;
        let mut dsts = std::collections::HashSet::new();
        for (g, &(a, b, xid)) in s.groups.iter().enumerate() {
            assert_eq!(xid, BARRIER_XID_BASE + g as u32);
            let mut at = a;
            let mut msgs = Vec::new();
            while at < b {
                let n = frame_len(&s.bytes[at..b]).unwrap().unwrap();
                msgs.push(decode(&s.bytes[at..at + n]).unwrap());
                at += n;
            }
            assert_eq!(at, b);
            let last = msgs.pop().unwrap();
            assert_eq!((last.body, last.xid), (Body::BarrierRequest, xid));
            for m in msgs {
                let Body::FlowMod(fm) = m.body else {
                    panic!("not a flow-mod: {m:?}")
                };
                assert_eq!((fm.table_id, fm.cookie), (1, STREAM_COOKIE));
                assert!(dsts.insert(fm.matcher.clone()));
                flow_mods += 1;
            }
        }
        assert_eq!(flow_mods, 250);
        assert_eq!(s.groups.last().map(|g| g.1), Some(s.bytes.len()));
    }

    #[test]
    fn bad_arguments_are_refused() {
        assert!(check_args(&ControlArgs::default()).is_ok());
        for f in [
            |a: &mut ControlArgs| a.flow_mods = 0,
            |a: &mut ControlArgs| a.barrier_every = 0,
            |a: &mut ControlArgs| a.probe_ms = 0,
            |a: &mut ControlArgs| a.probe_table = 1,
            |a: &mut ControlArgs| a.idle_seconds = f64::NAN,
            |a: &mut ControlArgs| a.switches = vec!["127.0.0.1:6653".into()],
            |a: &mut ControlArgs| a.switches = vec!["tcp:127.0.0.1:x".into()],
        ] {
            let mut a = ControlArgs::default();
            f(&mut a);
            assert!(check_args(&a).is_err(), "{a:?}");
        }
        assert_eq!(tcp_addr("tcp:127.0.0.1:6653").unwrap(), "127.0.0.1:6653");
    }
}
