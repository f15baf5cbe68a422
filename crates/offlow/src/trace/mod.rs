//! `offlow trace`: show what the pipeline does with one packet, in the
//! spirit of `ovs-appctl ofproto/trace`.
//!
//! What: the rules come from an ovs-ofctl flow file (`--flows`, parsed by
//! [`offlow_openflow::ofctl`] and installed through
//! `offlow_pipeline::convert` and the pipeline's own validation, exactly the
//! path a controller's flow-mod takes) or from a running switch
//! (`--switch tcp:HOST:PORT`, fetched by [`fetch`] over OpenFlow 1.3). The
//! packet, written in the same syntax, becomes a real frame ([`frame`]),
//! whose key the datapath parser extracts; the pipeline resolves it and the
//! report shows, table by table, the rule hit (or the miss), its
//! instructions, the final action set and action list; then the datapath
//! executor runs the actions on the frame and the report lists every
//! output with the header fields that changed.
//!
//! Invariants: nothing here panics on its inputs (files, packets, switch
//! replies): every failure is an error naming the token, line or message.
//! The report is built once ([`TraceReport`]) and printed as text or JSON.
//!
//! Thread-safety: a one-shot command on the calling thread.

pub(crate) mod fetch;
pub(crate) mod frame;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use offlow_datapath::{
    execute_prepared, ExecStats, OutputMeta, OutputSink, PacketBuf, PortInfo, Prepared, Verdict,
};
use offlow_flow::{extract, Field, FlowKey, L3Kind, Match, ParseStats};
use offlow_pipeline::{
    Action, ActionSet, FlowMod, FlowModCommand, FlowModFlags, Instruction, Outcome, Pipeline,
    PortNo, ToPipeline, MAX_TABLES,
};
use serde::Serialize;

use offlow_openflow::ofctl::{
    self, canonical, format_match, format_port, format_value, parse_flow_file, parse_packet,
};

/// A pipeline action in ovs-ofctl syntax (printed in its wire form).
fn format_action(a: &Action) -> String {
    match a {
        // The pipeline's own marker of a meter instruction (no wire action).
        Action::Meter(m) => format!("meter:{m}"),
        _ => ofctl::format_action(&offlow_openflow::Action::from(a)),
    }
}

/// Pipeline instructions in ovs-ofctl `actions=` syntax (printed in their
/// wire form).
fn format_instructions(ins: &[Instruction]) -> String {
    let wire: Vec<offlow_openflow::Instruction> = ins.iter().map(Into::into).collect();
    ofctl::format_instructions(&wire)
}

/// Arguments of `offlow trace`.
#[derive(clap::Args, Debug)]
pub(crate) struct TraceArgs {
    /// Rules from an ovs-ofctl flow file (one flow per line, as
    /// `ovs-ofctl add-flows`; `#` comments).
    #[arg(long, value_name = "FILE", conflicts_with = "switch")]
    pub flows: Option<PathBuf>,
    /// Groups from an ovs-ofctl group file (one group per line, as
    /// `ovs-ofctl add-groups`; `#` comments), installed before the flows.
    #[arg(long, value_name = "FILE", requires = "flows")]
    pub groups: Option<PathBuf>,
    /// Rules from a running switch, fetched over OpenFlow 1.3.
    #[arg(long, value_name = "tcp:HOST:PORT")]
    pub switch: Option<String>,
    /// Number of tables (default: the switch's n_tables, or for a file the
    /// highest table or goto target plus one).
    #[arg(long, value_name = "N")]
    pub table_count: Option<u16>,
    /// Ports that FLOOD and ALL expand to (comma-separated; default: with
    /// --switch, the switch's ports, else none).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub ports: Vec<u32>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Time limit for talking to the switch, in seconds.
    #[arg(long, default_value_t = 10)]
    pub timeout: u64,
    /// The packet, in ovs-ofctl match syntax with exact values, e.g.
    /// `in_port=1,tcp,nw_src=10.0.0.1,nw_dst=10.0.0.2,tp_dst=80`
    /// (unspecified fields are zero; `nw_ttl` sets the TTL, default 64).
    #[arg(value_name = "FLOW")]
    pub flow: String,
}

/// One table's part of the trace.
#[derive(Debug, Serialize)]
pub(crate) struct TableStep {
    /// The table.
    pub table_id: u8,
    /// The rule hit, or `None` on a miss.
    pub rule: Option<RuleHit>,
}

/// The rule a packet hit.
#[derive(Debug, Serialize)]
pub(crate) struct RuleHit {
    /// Priority.
    pub priority: u32,
    /// Match in ovs-ofctl syntax.
    #[serde(rename = "match")]
    pub matcher: String,
    /// Cookie.
    pub cookie: u64,
    /// The table-miss entry (priority 0, match-all)?
    pub table_miss: bool,
    /// The instructions in ovs-ofctl syntax.
    pub instructions: String,
    /// Apply-actions executed now.
    pub apply: Vec<String>,
    /// Clear-actions present.
    pub clear_actions: bool,
    /// Write-actions merged into the action set.
    pub write: Vec<String>,
    /// Write-metadata `value/mask`.
    pub write_metadata: Option<String>,
    /// Goto-table target.
    pub goto_table: Option<u8>,
}

/// A header field that an output's frame carries with a new value.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub(crate) struct Change {
    /// Field name.
    pub field: String,
    /// Value before.
    pub from: String,
    /// Value after.
    pub to: String,
}

/// One frame the executor emitted.
#[derive(Debug, Serialize)]
pub(crate) struct OutputReport {
    /// Port (number or reserved name; `CONTROLLER` for packet-ins).
    pub port: String,
    /// Bytes handed over (cut to max_len for the controller).
    pub len: usize,
    /// Queue set before the output.
    pub queue: Option<u32>,
    /// Fields whose value differs from the input frame.
    pub changed: Vec<Change>,
    /// For a packet-in: what it reports (reason, table, cookie of the flow
    /// entry that sent it).
    pub packet_in: Option<PacketInReport>,
}

/// What a packet-in would report (OpenFlow 1.3.5 §7.4.1).
#[derive(Debug, Serialize)]
pub(crate) struct PacketInReport {
    /// `no_match` (sent by a table-miss entry) or `action`.
    pub reason: &'static str,
    /// The table of the entry that sent it.
    pub table_id: u8,
    /// The entry's cookie.
    pub cookie: u64,
}

/// The whole trace.
#[derive(Debug, Serialize)]
pub(crate) struct TraceReport {
    /// Where the rules came from.
    pub source: String,
    /// Flow-stats reply messages the switch's dump took (`--switch`).
    pub flow_stats_replies: Option<usize>,
    /// Tables in the rebuilt pipeline.
    pub n_tables: u16,
    /// Rules installed.
    pub n_rules: usize,
    /// The packet as extracted from the frame, in ovs-ofctl syntax.
    pub packet: String,
    /// Frame length.
    pub frame_len: usize,
    /// Described fields the frame does not carry (prerequisites missing).
    pub warnings: Vec<String>,
    /// The packet came decapsulated from a tunnel port: its tunnel
    /// metadata (`tun_id`, and the outer addresses if given).
    pub tunnel: Option<TunnelMeta>,
    /// Tables visited, in order.
    pub tables: Vec<TableStep>,
    /// The action set at the end of the pipeline, in execution order.
    pub action_set: Vec<String>,
    /// The final action list (apply-actions as they happened, then the
    /// action set).
    pub actions: Vec<String>,
    /// How the pipeline ended.
    pub outcome: String,
    /// FLOOD / ALL outputs and how they expanded.
    pub flood: Vec<String>,
    /// Frames the executor emitted.
    pub outputs: Vec<OutputReport>,
    /// Executor verdict.
    pub verdict: String,
    /// Non-zero executor counters (skipped actions and the like).
    pub exec_counters: Vec<(String, u64)>,
    /// Which tier would serve the flow.
    pub tier: TierReport,
}

/// Which tier serves the traced flow (`offlow run --offload`).
#[derive(Debug, Serialize)]
pub(crate) struct TierReport {
    /// The offload tier can serve it: its program, stage by stage.
    pub offload_program: Option<String>,
    /// Why it stays in software, if it does.
    pub software_reason: Option<String>,
    /// The match of the masked entry (megaflow) that would serve it where
    /// the backend holds masks: the bits its walk looked at, in ovs-ofctl
    /// syntax (`None`: an exact entry, for a decision through a group).
    pub megaflow: Option<String>,
}

/// Run `offlow trace`.
pub(crate) fn main(args: &TraceArgs) -> anyhow::Result<()> {
    let report = trace(args)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render(&report));
    }
    Ok(())
}

/// A packet's tunnel metadata: what a tunnel port gives the packets it
/// decapsulates (Open vSwitch's `tun_id`, `tun_src`, `tun_dst`).
#[derive(Debug, Serialize, Default, Clone, PartialEq, Eq)]
pub(crate) struct TunnelMeta {
    /// The key of the encapsulation (GRE key, VXLAN VNI).
    pub tun_id: u64,
    /// Outer source address (the far end), if given.
    pub tun_src: Option<std::net::Ipv4Addr>,
    /// Outer destination address (this end), if given.
    pub tun_dst: Option<std::net::Ipv4Addr>,
}

/// Take `tun_src=A` and `tun_dst=B` out of a packet description (they are
/// not OpenFlow 1.3 match fields, only metadata of a decapsulated packet).
fn take_tunnel_addresses(flow: &str) -> anyhow::Result<(String, TunnelMeta)> {
    let mut meta = TunnelMeta::default();
    let mut rest = Vec::new();
    for tok in flow.split(',') {
        let t = tok.trim();
        let parse = |v: &str| -> anyhow::Result<std::net::Ipv4Addr> {
            v.parse()
                .map_err(|_| anyhow!("FLOW `{t}`: not an IPv4 address"))
        };
        if let Some(v) = t.strip_prefix("tun_src=") {
            meta.tun_src = Some(parse(v)?);
        } else if let Some(v) = t.strip_prefix("tun_dst=") {
            meta.tun_dst = Some(parse(v)?);
        } else {
            rest.push(tok);
        }
    }
    Ok((rest.join(","), meta))
}

/// Build the pipeline and trace the packet.
pub(crate) fn trace(args: &TraceArgs) -> anyhow::Result<TraceReport> {
    let (flow, mut tunnel) = take_tunnel_addresses(&args.flow)?;
    let packet = parse_packet(&flow).map_err(|e| anyhow!("FLOW {e}"))?;
    let plain_ports = |v: &[u32]| -> Vec<PortInfo> {
        v.iter()
            .map(|&port| PortInfo {
                port,
                no_fwd: false,
                no_flood: false,
            })
            .collect()
    };
    let (pipeline, source, flow_stats_replies, ports) = match (&args.flows, &args.switch) {
        (Some(path), None) => (
            load_file(path, args.groups.as_deref(), args.table_count)?,
            path.display().to_string(),
            None,
            plain_ports(&args.ports),
        ),
        (None, Some(t)) => {
            let (p, replies, sw_ports) =
                load_switch(t, args.table_count, Duration::from_secs(args.timeout))?;
            let ports = if args.ports.is_empty() {
                sw_ports
            } else {
                plain_ports(&args.ports)
            };
            (p, t.clone(), Some(replies), ports)
        }
        _ => bail!("give exactly one of --flows FILE or --switch tcp:HOST:PORT"),
    };

    let frame = frame::build_frame(&packet.matcher, packet.nw_ttl.unwrap_or(64));
    let in_port = packet.matcher.value.get(Field::InPort) as u32;
    let mut pstats = ParseStats::default();
    let parsed = extract(&frame, in_port, &mut pstats);
    let mut key = parsed.key;
    // A `tun_id` the frame does not carry (it is no GRE or VXLAN frame) is
    // the metadata of a packet a tunnel port decapsulated, as the switch
    // gives it (the packet's tunnel_id beyond its bytes).
    let (tun_id, tun_mask) = packet.matcher.field(Field::TunnelId);
    let from_tunnel = tun_mask != 0 && key.get(Field::TunnelId) != tun_id;
    if from_tunnel || tunnel.tun_src.is_some() || tunnel.tun_dst.is_some() {
        tunnel.tun_id = tun_id as u64;
        key.set(Field::TunnelId, tun_id);
        key.clear_presence(offlow_flow::present::TUNNEL);
    }
    let tunnel = (from_tunnel || tunnel != TunnelMeta::default()).then_some(tunnel);
    let mut warnings = Vec::new();
    for f in Field::ALL {
        let (v, m) = packet.matcher.field(f);
        if m != 0 && key.get(f) != v {
            warnings.push(format!(
                "{}={} is not carried by the frame (missing prerequisite such as dl_type or nw_proto?)",
                f.name(),
                format_value(f, v)
            ));
        }
    }

    let res = pipeline.lookup(&key);
    let mut tables = Vec::new();
    let mut set = ActionSet::new();
    for step in &res.path {
        let Some(e) = pipeline.entry_in(step.table_id, step.rule) else {
            bail!(
                "internal: rule {} of table {} vanished",
                step.rule,
                step.table_id
            );
        };
        let p = &e.program;
        if p.clear {
            set.clear();
        }
        for a in &p.write {
            set.write(*a);
        }
        tables.push(TableStep {
            table_id: step.table_id,
            rule: Some(RuleHit {
                priority: e.priority,
                matcher: format_match(&e.matcher.matcher),
                cookie: e.cookie,
                table_miss: e.is_table_miss(),
                instructions: format_instructions(&e.instructions),
                apply: p.apply.iter().map(format_action).collect(),
                clear_actions: p.clear,
                write: p.write.iter().map(format_action).collect(),
                write_metadata: p.write_metadata.map(|(v, m)| format!("{v:#x}/{m:#x}")),
                goto_table: p.goto,
            }),
        });
    }
    let mut set_list = Vec::new();
    let outcome = match res.outcome {
        Outcome::Miss { table_id } => {
            tables.push(TableStep {
                table_id,
                rule: None,
            });
            format!("no match in table {table_id} and no table-miss entry: dropped (action set discarded)")
        }
        Outcome::Forward => "forward".into(),
        Outcome::Drop => "drop (no output in the final actions)".into(),
        Outcome::ControllerMiss { table_id } => {
            format!("packet-in (reason no_match) from the table-miss entry of table {table_id}")
        }
    };
    if !matches!(res.outcome, Outcome::Miss { .. }) {
        set.drain_ordered_into(&mut set_list);
    }

    // Execute on the frame.
    let mut flood = Vec::new();
    for a in &res.actions {
        if let Action::Output { port, .. } = a {
            if *port == PortNo::FLOOD || *port == PortNo::ALL {
                // The executor's rule (§4.5): not the ingress port, not
                // NO_FWD ports, and for FLOOD not NO_FLOOD/blocked ones.
                let is_flood = *port == PortNo::FLOOD;
                let targets: Vec<u32> = ports
                    .iter()
                    .filter(|p| p.port != in_port && !p.no_fwd && !(is_flood && p.no_flood))
                    .map(|p| p.port)
                    .collect();
                flood.push(if ports.is_empty() {
                    format!("{port:?}: flood (no ports known; give --ports to expand)")
                } else {
                    format!("{port:?}: flood to ports {targets:?}")
                });
            }
        }
    }
    let mut buf = PacketBuf::from_frame(&frame, 64);
    buf.set_tunnel_id(tunnel.as_ref().map(|t| t.tun_id));
    let mut layout = parsed.layout;
    let mut sink = TraceSink {
        ports,
        outputs: Vec::new(),
    };
    let mut estats = ExecStats::default();
    // The datapath's flow hash, so a select group takes the bucket the
    // switch would.
    let prepared = Prepared {
        origins: &res.origins,
        ..Prepared::new(&res.actions)
    }
    .with_groups(
        pipeline.groups(),
        offlow_datapath::microflow::flow_hash(&key),
    )
    // A meter's buckets start full: one traced packet passes its bands.
    .with_meters(pipeline.meters(), offlow_datapath::clock::now_ns());
    let out = execute_prepared(
        prepared,
        &mut buf,
        &mut layout,
        in_port,
        &mut sink,
        &mut estats,
    );
    let outputs = sink
        .outputs
        .iter()
        .map(|o| OutputReport {
            port: o.port.map_or_else(|| "CONTROLLER".into(), format_port),
            len: o.frame.len(),
            queue: o.queue,
            changed: if o.port.is_none() && o.frame.len() < o.total_len {
                Vec::new()
            } else {
                changes(&frame, &key, &o.frame, in_port, o.tunnel_id)
            },
            packet_in: o.origin.map(|origin| PacketInReport {
                reason: if origin.table_miss {
                    "no_match"
                } else {
                    "action"
                },
                table_id: origin.table_id,
                cookie: origin.cookie,
            }),
        })
        .collect();
    let verdict = match out.verdict {
        Verdict::Done => "done".into(),
        Verdict::TtlExpired => "IP TTL expired at dec_ttl: packet dropped".into(),
        Verdict::MplsTtlExpired => "MPLS TTL expired: packet dropped".into(),
    };
    let exec_counters = estats
        .iter()
        .filter(|(_, v)| *v != 0)
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    // As the offload tier decides: groups that need no copy inlined.
    let offloadable = offlow_offload::OffloadKey::from_flow_key(&key).and_then(|k| {
        if res.actions.iter().any(|a| matches!(a, Action::Group(_))) {
            let hash = offlow_datapath::microflow::flow_hash(&key);
            let flat = pipeline
                .groups()
                .inline(&res.actions, hash, &mut Vec::new())
                .ok_or(offlow_offload::Refusal::Unsupported(
                    "a group that copies the packet",
                ))?;
            offlow_offload::compile(&k, &flat)
        } else {
            offlow_offload::compile(&k, &res.actions)
        }
    });
    // As the tier places it: under the bits its walk looked at, in the
    // fields the offload key carries (the rest is constant over the class).
    let megaflow = (offloadable.is_ok()
        && !res.actions.iter().any(|a| matches!(a, Action::Group(_))))
    .then(|| {
        let ok = offlow_offload::OffloadKey::from_flow_key(&key).ok()?;
        let mask = offlow_offload::OffloadMask::from_flow_mask(&pipeline.walk_mask(&res));
        let served = offlow_offload::OffloadMatch::new(&ok, mask);
        Some(format_match(&served.to_flow_match()))
    })
    .flatten();
    let tier = match offloadable {
        Ok(p) => TierReport {
            offload_program: Some(p.to_string()),
            software_reason: None,
            megaflow,
        },
        Err(r) => TierReport {
            offload_program: None,
            software_reason: Some(r.to_string()),
            megaflow: None,
        },
    };
    Ok(TraceReport {
        tier,
        source,
        flow_stats_replies,
        n_tables: pipeline.n_tables(),
        n_rules: pipeline.len(),
        packet: packet_string(&key),
        frame_len: frame.len(),
        warnings,
        tunnel,
        tables,
        action_set: set_list.iter().map(format_action).collect(),
        actions: res.actions.iter().map(format_action).collect(),
        outcome,
        flood,
        outputs,
        verdict,
        exec_counters,
    })
}

/// The extracted key as an exact match in ovs-ofctl syntax.
fn packet_string(key: &FlowKey) -> String {
    let mut m = Match::ANY;
    for f in Field::ALL {
        let v = key.get(f);
        if v != 0 && f != Field::InPhyPort {
            m.set_exact(f, v);
        }
    }
    // format_match omits zero fields; a packet always has an in_port.
    let s = format_match(&m);
    match (key.get(Field::InPort), s.is_empty()) {
        (0, true) => "in_port=0".into(),
        (0, false) => format!("in_port=0,{s}"),
        _ => s,
    }
}

/// Fields (and the IP TTL) whose value in `after` differs from `before`.
fn changes(
    before: &[u8],
    key: &FlowKey,
    after: &[u8],
    in_port: u32,
    tunnel_id: u64,
) -> Vec<Change> {
    let mut st = ParseStats::default();
    let mut p = extract(after, in_port, &mut st);
    if tunnel_id != 0 {
        // Metadata, not bytes: what the packet carries to the output.
        p.key.set(Field::TunnelId, u128::from(tunnel_id));
    }
    let mut out = Vec::new();
    let et = Some(key.get(Field::EthType) as u16);
    let proto = Some(key.get(Field::IpProto) as u8);
    for f in Field::ALL {
        // Fields sharing storage would repeat one change under two names.
        if matches!(f, Field::InPort | Field::InPhyPort) || canonical(f, et, proto) != f {
            continue;
        }
        let (a, b) = (key.get(f), p.key.get(f));
        if a != b {
            out.push(Change {
                field: f.name().into(),
                from: show(f, a),
                to: show(f, b),
            });
        }
    }
    let mut st0 = ParseStats::default();
    let p0 = extract(before, in_port, &mut st0);
    if let (Some(t0), Some(t1)) = (ttl(before, &p0.layout), ttl(after, &p.layout)) {
        if t0 != t1 {
            out.push(Change {
                field: "nw_ttl".into(),
                from: t0.to_string(),
                to: t1.to_string(),
            });
        }
    }
    out
}

/// A key value for the change list: `vlan_vid` as the VID or `none`.
fn show(f: Field, v: u128) -> String {
    if f == Field::VlanVid {
        if v & 0x1000 == 0 {
            return "none".into();
        }
        return (v & 0xfff).to_string();
    }
    format_value(f, v)
}

/// The IPv4 TTL or IPv6 hop limit of a parsed frame.
fn ttl(frame: &[u8], lay: &offlow_flow::Layout) -> Option<u8> {
    let at = match lay.l3_kind {
        L3Kind::Ipv4 => usize::from(lay.l3) + 8,
        L3Kind::Ipv6 => usize::from(lay.l3) + 7,
        _ => return None,
    };
    frame.get(at).copied()
}

/// One emitted frame.
struct Emitted {
    /// `None` for the controller.
    port: Option<u32>,
    frame: Vec<u8>,
    total_len: usize,
    queue: Option<u32>,
    /// For a packet-in: the flow entry that sent it.
    origin: Option<offlow_pipeline::PacketInOrigin>,
    /// The packet's tunnel_id beyond its bytes at the output.
    tunnel_id: u64,
}

/// Records the executor's outputs; FLOOD/ALL expand to `ports`.
struct TraceSink {
    ports: Vec<PortInfo>,
    outputs: Vec<Emitted>,
}

impl OutputSink for TraceSink {
    fn output(&mut self, port: u32, frame: &[u8], meta: OutputMeta) {
        self.outputs.push(Emitted {
            port: Some(port),
            frame: frame.to_vec(),
            total_len: frame.len(),
            queue: meta.queue,
            origin: None,
            tunnel_id: meta.tunnel_id,
        });
    }

    fn controller(
        &mut self,
        frame: &[u8],
        max_len: u16,
        origin: offlow_pipeline::PacketInOrigin,
        meta: OutputMeta,
    ) {
        let shown = offlow_datapath::controller_len(frame.len(), max_len);
        self.outputs.push(Emitted {
            port: None,
            frame: frame[..shown].to_vec(),
            total_len: frame.len(),
            queue: meta.queue,
            origin: Some(origin),
            tunnel_id: meta.tunnel_id,
        });
    }

    fn port_count(&self) -> usize {
        self.ports.len()
    }

    fn port_info(&self, index: usize) -> Option<PortInfo> {
        self.ports.get(index).copied()
    }
}

/// Install the groups of an ovs-ofctl group file (if any), then the flows
/// of an ovs-ofctl flow file.
fn load_file(
    path: &std::path::Path,
    groups: Option<&std::path::Path>,
    table_count: Option<u16>,
) -> anyhow::Result<Pipeline> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).with_context(|| format!("read {name}"))?;
    let specs = parse_flow_file(&text, &name)?;
    let n = match table_count {
        Some(n) => n,
        None => specs
            .iter()
            .flat_map(|(_, s)| {
                let gotos = s.instructions.iter().filter_map(|i| match i {
                    offlow_openflow::Instruction::GotoTable(t) => Some(u16::from(*t)),
                    _ => None,
                });
                core::iter::once(u16::from(s.table_id)).chain(gotos)
            })
            .max()
            .map_or(1, |t| t + 1),
    };
    check_tables(n)?;
    let mut p = Pipeline::new(n);
    if let Some(gpath) = groups {
        let gname = gpath.display().to_string();
        let text = std::fs::read_to_string(gpath).with_context(|| format!("read {gname}"))?;
        for (line, g) in ofctl::parse_group_file(&text, &gname)? {
            let gm = g
                .to_pipeline()
                .map_err(|e| anyhow!("{gname}:{line}: refused: {e:?}"))?;
            let (op, _) = p
                .prepare_group_mod(&gm, 0)
                .map_err(|e| anyhow!("{gname}:{line}: refused by the group table: {e}"))?;
            p.apply(&op);
        }
    }
    for (line, spec) in &specs {
        let fm = spec
            .to_wire()
            .to_pipeline()
            .map_err(|e| anyhow!("{name}:{line}: refused: {e:?}"))?;
        p.flow_mod(&fm, 0)
            .map_err(|e| anyhow!("{name}:{line}: refused by the pipeline: {e}"))?;
    }
    Ok(p)
}

fn check_tables(n: u16) -> anyhow::Result<()> {
    if n == 0 || n > MAX_TABLES {
        bail!("--table-count {n}: must be 1..={MAX_TABLES}");
    }
    Ok(())
}

/// Fetch a switch's flows and rebuild its pipeline.
fn load_switch(
    target: &str,
    table_count: Option<u16>,
    timeout: Duration,
) -> anyhow::Result<(Pipeline, usize, Vec<PortInfo>)> {
    let dump = fetch::fetch(target, timeout)?;
    let n = table_count.unwrap_or(u16::from(dump.n_tables).max(1));
    check_tables(n)?;
    let mut p = Pipeline::new(n);
    for m in &dump.meters {
        let mm = offlow_openflow::MeterMod {
            command: offlow_openflow::meter::meter_command::ADD,
            flags: m.flags,
            meter_id: m.meter_id,
            bands: m.bands.clone(),
        };
        let (op, _) = p
            .prepare_meter_mod(&mm, 0)
            .map_err(|e| anyhow!("switch meter {}: cannot rebuild: {e:?}", m.meter_id))?;
        p.apply(&op);
    }
    // A group may forward to another: add in passes, each adding the
    // groups whose targets exist, until none is left or none can be.
    let mut pending: Vec<offlow_pipeline::group::GroupMod> = Vec::new();
    for g in &dump.groups {
        let wire = offlow_openflow::GroupMod {
            command: 0,
            group_type: g.group_type,
            group_id: g.group_id,
            buckets: g.buckets.clone(),
        };
        pending.push(
            wire.to_pipeline()
                .map_err(|e| anyhow!("switch group {}: unsupported: {e:?}", g.group_id))?,
        );
    }
    while !pending.is_empty() {
        let before = pending.len();
        let mut last_error = None;
        pending.retain(|gm| match p.prepare_group_mod(gm, 0) {
            Ok((op, _)) => {
                p.apply(&op);
                false
            }
            Err(e) => {
                last_error = Some(e);
                true
            }
        });
        if pending.len() == before {
            bail!(
                "switch groups: cannot rebuild {} of them: {}",
                pending.len(),
                last_error.map_or_else(String::new, |e| e.to_string())
            );
        }
    }
    for (i, fs) in dump.flows.iter().enumerate() {
        let instructions: Vec<Instruction> = fs
            .instructions
            .iter()
            .map(|i| i.to_pipeline())
            .collect::<Result<_, _>>()
            .map_err(|e| anyhow!("switch flow #{i}: unsupported instruction: {e:?}"))?;
        let mut fm = FlowMod::new(
            FlowModCommand::Add,
            fs.table_id,
            u32::from(fs.priority),
            fs.matcher.to_match(),
        );
        fm.cookie = fs.cookie;
        fm.idle_timeout = fs.idle_timeout;
        fm.hard_timeout = fs.hard_timeout;
        fm.flags = FlowModFlags(fs.flags);
        fm.instructions = instructions;
        p.flow_mod(&fm, 0).map_err(|e| {
            anyhow!(
                "switch flow #{i} (table {}, priority {}): cannot rebuild: {e}",
                fs.table_id,
                fs.priority
            )
        })?;
    }
    Ok((p, dump.replies, dump.ports))
}

/// The text report.
pub(crate) fn render(r: &TraceReport) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    // Writing to a String cannot fail.
    let _ = writeln!(s, "Flow: {}", r.packet);
    let replies = match r.flow_stats_replies {
        Some(1) => " (1 flow-stats reply)".to_string(),
        Some(n) => format!(" ({n} flow-stats replies)"),
        None => String::new(),
    };
    let _ = writeln!(
        s,
        "Rules: {} in {} tables, from {}{replies}",
        r.n_rules, r.n_tables, r.source
    );
    let _ = writeln!(s, "Frame: {} bytes", r.frame_len);
    if let Some(t) = &r.tunnel {
        let addr = |a: Option<std::net::Ipv4Addr>| a.map_or("?".to_string(), |a| a.to_string());
        let _ = writeln!(
            s,
            "Tunnel metadata: tun_id={:#x} tun_src={} tun_dst={} (decapsulated by a tunnel port)",
            t.tun_id,
            addr(t.tun_src),
            addr(t.tun_dst)
        );
    }
    for w in &r.warnings {
        let _ = writeln!(s, "warning: {w}");
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "Pipeline");
    let _ = writeln!(s, "--------");
    for t in &r.tables {
        match &t.rule {
            None => {
                let _ = writeln!(
                    s,
                    " {}. table-miss: no match (no table-miss entry) -> drop",
                    t.table_id
                );
            }
            Some(h) => {
                let m = if h.matcher.is_empty() {
                    String::new()
                } else {
                    format!(",{}", h.matcher)
                };
                let miss = if h.table_miss {
                    " (table-miss entry)"
                } else {
                    ""
                };
                let _ = writeln!(
                    s,
                    " {}. priority={}{m}, cookie={:#x}{miss}",
                    t.table_id, h.priority, h.cookie
                );
                let _ = writeln!(s, "    actions={}", h.instructions);
                if !h.apply.is_empty() {
                    let _ = writeln!(s, "    apply now: {}", h.apply.join(","));
                }
                if h.clear_actions {
                    let _ = writeln!(s, "    clear action set");
                }
                if !h.write.is_empty() {
                    let _ = writeln!(s, "    write to action set: {}", h.write.join(","));
                }
                if let Some(md) = &h.write_metadata {
                    let _ = writeln!(s, "    write metadata: {md}");
                }
                match h.goto_table {
                    Some(g) => {
                        let _ = writeln!(s, "    -> goto table {g}");
                    }
                    None => {
                        let _ = writeln!(s, "    -> end of pipeline");
                    }
                }
            }
        }
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "Action set: {}", list_or(&r.action_set, "(empty)"));
    let _ = writeln!(s, "Final actions: {}", list_or(&r.actions, "drop"));
    let _ = writeln!(s, "Outcome: {}", r.outcome);
    let _ = writeln!(s);
    let _ = writeln!(s, "Execution");
    let _ = writeln!(s, "---------");
    for f in &r.flood {
        let _ = writeln!(s, " {f}");
    }
    if r.outputs.is_empty() {
        let _ = writeln!(s, " no output");
    }
    for o in &r.outputs {
        let q = o.queue.map(|q| format!(" queue {q}")).unwrap_or_default();
        let what = if o.port == "CONTROLLER" {
            let why = o.packet_in.as_ref().map_or(String::new(), |p| {
                format!(
                    ", reason {}, table {}, cookie {:#x}",
                    p.reason, p.table_id, p.cookie
                )
            });
            format!(" packet-in to the controller ({} bytes{why}){q}", o.len)
        } else {
            format!(" output to port {} ({} bytes){q}", o.port, o.len)
        };
        if o.changed.is_empty() {
            let _ = writeln!(s, "{what}: unchanged");
        } else {
            let ch: Vec<String> = o
                .changed
                .iter()
                .map(|c| format!("{} {} -> {}", c.field, c.from, c.to))
                .collect();
            let _ = writeln!(s, "{what}: {}", ch.join(", "));
        }
    }
    let _ = writeln!(s, "Verdict: {}", r.verdict);
    if !r.exec_counters.is_empty() {
        let c: Vec<String> = r
            .exec_counters
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let _ = writeln!(s, "Executor counters: {}", c.join(" "));
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "Tier");
    let _ = writeln!(s, "----");
    match (&r.tier.offload_program, &r.tier.software_reason) {
        (Some(p), _) => {
            let _ = writeln!(
                s,
                " offload: offloadable; with `--offload xdp` the XDP program serves it once it is hot: {p}"
            );
        }
        (None, Some(why)) => {
            let _ = writeln!(s, " offload: stays in software ({why})");
        }
        (None, None) => {}
    }
    if let Some(m) = &r.tier.megaflow {
        let _ = writeln!(
            s,
            " megaflow: one masked entry serves every microflow matching {m} (the bits its walk looked at)"
        );
    }
    let _ = writeln!(
        s,
        " software: microflow cache (exact match) after the first packet, the pipeline on a miss"
    );
    s
}

fn list_or(v: &[String], empty: &str) -> String {
    if v.is_empty() {
        empty.into()
    } else {
        v.join(",")
    }
}
