//! The switch as OpenFlow connections see it: [`DatapathSwitch`] implements
//! [`offlow_openflow::Switch`] over the datapath's [`Control`] handle.
//!
//! What it maps:
//! - FEATURES: the configured datapath id, [`crate::buffers::N_BUFFERS`]
//!   packet buffers, the pipeline's table count, FLOW_STATS | TABLE_STATS |
//!   PORT_STATS.
//! - PORT_MOD: `port_down`, `no_recv`, `no_fwd` and `no_packet_in` (table misses) per
//!   port (checked against the port's address; other bits refused), passed
//!   to the packet workers ([`crate::dataplane::Dataplane::set_port_config`]),
//!   honoured by packet-outs and announced as PORT_STATUS. `port_down` is
//!   OpenFlow's: the switch stops using the port; the Linux interface is
//!   not touched.
//! - PACKET_IN data: [`DatapathSwitch::packet_in_data`] keeps a frame the
//!   output's `max_len` cuts short in a packet buffer (whole frames, and
//!   `OFPCML_NO_BUFFER`, go unbuffered); a PACKET_OUT or FLOW_MOD naming
//!   its id processes the whole frame.
//! - Table structures: [`DatapathSwitch::maybe_compile`] (the daemon calls
//!   it every [`crate::control::EXPIRY_EVERY`]) compiles the tables once their rules
//!   have been quiet for [`COMPILE_QUIET`]: a big IPv4 route table moves
//!   to the DIR-24-8 FIB, an IPv4 5-tuple ACL gets an RFC snapshot. The
//!   build runs on a thread of its own, from a copy of the rules; a later
//!   tick installs it unless a rule changed meanwhile.
//! - Flow expiry: [`DatapathSwitch::expire`] (the daemon calls it every
//!   [`crate::control::EXPIRY_EVERY`]) removes timed-out entries; they and entries
//!   deleted by a flow-mod, when flagged SEND_FLOW_REM, come back from
//!   [`DatapathSwitch::take_flow_removed`] as FLOW_REMOVED messages.
//! - FLOW_MOD → [`Control::flow_mod`]; a refused flow-mod's
//!   [`offlow_pipeline::PipelineError`] becomes the OpenFlow error it maps
//!   onto. Changes become visible to packet workers at the next
//!   [`DatapathSwitch::commit_pending`] (the daemon calls it after every
//!   batch of received messages) or BARRIER ([`Control::commit`], whose
//!   return is the barrier guarantee).
//! - MULTIPART: DESC, FLOW and AGGREGATE (non-strict selection by table,
//!   out_port, out_group, cookie/mask and match, as §7.3.5.2 asks), TABLE,
//!   TABLE_FEATURES (a minimal description per table; setting features is
//!   refused with OFPTFFC_EPERM), PORT_DESC and PORT_STATS from the data
//!   ports ([`SwitchPort`], counters summed over the worker threads), QUEUE
//!   (empty).
//! - PACKET_OUT: the actions run on the frame through the datapath's
//!   executor; outputs go out of the data ports through a transmit-only
//!   socket per port; an Output:TABLE submits the rewritten frame to table
//!   0 through a short-lived control-side [`Worker`] (cache off). Outputs
//!   to unknown ports, LOCAL and CONTROLLER are dropped and counted in
//!   [`PacketOutStats`].
//!
//! Counters: before a flow, aggregate or table stats reply the packet
//! workers are asked to credit their pending counts
//! ([`Control::sync_counters`], bounded by [`REPLY_SYNC_TIMEOUT`] for a
//! reply, [`SYNC_TIMEOUT`] where the loop waits in place: an idle worker
//! answers within its idle sleep, a busy one at its next batch). The
//! packet-out worker lives only for one packet-out and credits its counts
//! when dropped.
//!
//! Ports that come back ([`DatapathSwitch::refresh_links`], every
//! [`crate::control::LINK_POLL`]): an interface port whose interface is missing, or
//! whose transmit socket reports it gone or re-created (the socket is
//! bound to the old interface index), loses that socket and is listed
//! down. Each poll then looks for an interface of its name in the ports'
//! namespace; once there, a fresh transmit socket is opened, the workers
//! are asked to re-open theirs ([`crate::dataplane::Dataplane::reopen`])
//! and the new link state is announced; while a worker reports that its
//! re-open failed, each poll asks again. An unexpected failure to open
//! the transmit socket is logged once until the interface goes away
//! again. Port counters stay monotonic: the workers keep per-port bases,
//! and packet-out counts live in the [`SwitchPort`], not in the socket.
//!
//! Layout: this module holds [`DatapathSwitch`] and its `Switch`
//! implementation; [`port`] the data ports as the control side keeps them
//! ([`SwitchPort`]); `stats` the multipart replies.
//!
//! Thread-safety: single-threaded (the control loop owns it); `Control` is
//! the pipeline's single writer.

use std::time::Duration;

use crate::buffers::{BufferError, PacketBuffers};
use crate::offload::{OffloadStats, OffloadTier};
use offlow_datapath::{
    execute_prepared, Control, ExecStats, OutputMeta, OutputSink, PacketBuf, PortInfo, Prepared,
    Worker, WorkerConfig, PIPELINE_COPIES,
};
use offlow_flow::ParseStats;
use offlow_io::{AfPacketTx, LinkState};
use offlow_openflow::multipart::{MultipartReplyBody, MultipartRequestBody};
use offlow_openflow::port::{OFPPC_NO_FWD, OFPPC_NO_PACKET_IN, OFPPC_NO_RECV, OFPPC_PORT_DOWN};
use offlow_openflow::{
    BadActionCode, BadRequestCode, Need, OfError, PacketOut, PortMod, PortModFailedCode,
    SwitchFeatures, Ticket,
};
use offlow_pipeline::{FlowMod, PacketInOrigin, Pipeline, PortNo, RemovedFlow, ToPipeline};

pub mod port;
mod stats;

pub use port::{SwitchPort, OFPPC_SETTABLE};

/// `OFPC_FLOW_STATS | OFPC_TABLE_STATS | OFPC_PORT_STATS |
/// OFPC_GROUP_STATS` (§7.3.1).
pub const CAPABILITIES: u32 = 1 | 2 | 4 | 8;

/// What packet-outs did with their frames.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PacketOutStats {
    /// PACKET_OUT messages executed.
    pub packets: u64,
    /// Frames submitted to the pipeline by Output:TABLE.
    pub to_table: u64,
    /// Outputs dropped: no such port, or it has no transmit socket (down,
    /// or a capture port).
    pub drop_unknown_port: u64,
    /// Outputs to CONTROLLER dropped (packet-in from packet-out not wired).
    pub drop_to_controller: u64,
    /// Outputs to a port configured `no_fwd` or `port_down`, dropped.
    pub drop_no_fwd: u64,
}

/// Longest wait for the packet workers to credit their counters where the
/// control loop waits in place (expiry scans, the blocking
/// [`Control::sync_counters`]); a worker that misses it is counted at its
/// next flush.
pub const SYNC_TIMEOUT: Duration = Duration::from_millis(50);

/// Longest wait for the packet workers before a statistics reply, which
/// waits as a ticket while the loop serves everything else. Longer than
/// [`SYNC_TIMEOUT`] because it costs nobody else: on two vCPUs shared with
/// a build and a dozen switches, a worker was once descheduled past 50 ms
/// and a port-stats reply missed a whole burst it had forwarded (CI,
/// `ports::port_stats_count_every_frame_forwarded_before_the_request`,
/// 2026-11-26 14:25).
pub const REPLY_SYNC_TIMEOUT: Duration = Duration::from_millis(500);

/// How long the rules must stay unchanged before
/// [`DatapathSwitch::maybe_compile`] compiles the tables: long enough that
/// a controller's burst of flow-mods (a table being loaded) is over, short
/// enough that a settled table soon gets its fast structure.
pub const COMPILE_QUIET: Duration = Duration::from_secs(1);

/// The sink of packet-outs: data ports by number, everything else a
/// counted drop.
struct ControlSink<'a> {
    ports: &'a mut [SwitchPort],
    infos: Vec<PortInfo>,
    drop_unknown_port: u64,
    drop_to_controller: u64,
    drop_no_fwd: u64,
}

impl OutputSink for ControlSink<'_> {
    fn output(&mut self, port: u32, frame: &[u8], meta: OutputMeta) {
        match self.ports.iter_mut().find(|p| p.number == port) {
            Some(p) if p.config & (OFPPC_NO_FWD | OFPPC_PORT_DOWN) != 0 => self.drop_no_fwd += 1,
            Some(p) if p.tunnel.is_some() => {
                let Some((endpoint, underlay)) = p.tunnel else {
                    return;
                };
                // A packet-out is rare: a fresh buffer is fine. The
                // identification restarts per message (DF is set; nothing
                // reassembles these).
                let mut out = vec![0u8; frame.len() + endpoint.overhead()];
                let sent = endpoint
                    .encapsulate(frame, meta.tunnel_id, 0, 0, &mut out)
                    .is_some_and(|n| {
                        self.ports
                            .iter()
                            .find(|u| u.number == underlay)
                            .and_then(|u| u.tx.as_ref())
                            .is_some_and(|tx| tx.send(&out[..n]))
                    });
                match self.ports.iter_mut().find(|p| p.number == port) {
                    Some(p) if sent => p.tx_packets += 1,
                    _ => self.drop_unknown_port += 1,
                }
            }
            Some(p) => match &p.tx {
                Some(tx) if tx.send(frame) => p.tx_packets += 1,
                _ => self.drop_unknown_port += 1,
            },
            None => self.drop_unknown_port += 1,
        }
    }
    fn controller(&mut self, _: &[u8], _: u16, _: PacketInOrigin, _: OutputMeta) {
        self.drop_to_controller += 1;
    }
    fn port_count(&self) -> usize {
        self.infos.len()
    }
    fn port_info(&self, index: usize) -> Option<PortInfo> {
        self.infos.get(index).copied()
    }
}

/// The datapath behind the OpenFlow connections.
pub struct DatapathSwitch {
    control: Control,
    /// The data ports (empty: a switch with zero ports).
    ports: Vec<SwitchPort>,
    /// The packet workers, once started.
    dataplane: Option<crate::dataplane::Dataplane>,
    /// The namespace the ports live in (re-opened there).
    netns: Option<String>,
    /// When the switch started (port stats durations).
    started: std::time::Instant,
    /// Removed entries with SEND_FLOW_REM, not yet reported.
    removed: Vec<RemovedFlow>,
    /// The same for entries the expiry scan removed, reported on their own
    /// path ([`Self::begin_removal_report`]), so a DELETE's blocking
    /// announcement does not take them along.
    expired: Vec<RemovedFlow>,
    dpid: u64,
    /// Flow-mods applied since the last commit.
    dirty: bool,
    parse: ParseStats,
    exec: ExecStats,
    packet_out: PacketOutStats,
    /// Frames whose packet-in showed only part of them.
    buffers: PacketBuffers,
    /// Ports whose description changed by PORT_MOD, to announce.
    port_status: Vec<offlow_openflow::Port>,
    /// The pipeline's mutation count when the tables were last compiled.
    compiled_at: u64,
    /// The mutation count [`DatapathSwitch::maybe_compile`] last saw, and
    /// since when (switch clock, ns).
    quiet_since: (u64, u64),
    /// How long the last installed compile took to build.
    last_compile: Duration,
    /// A compile building on its own thread, if one is.
    compile_job: Option<CompileJob>,
    /// Counter-sync requests still waited for, oldest first: each with
    /// the moment it stops being waited for (a worker that misses it is
    /// counted at its next flush). Per request, so a later sync never
    /// pushes an earlier one's bound back.
    sync_deadlines: std::collections::VecDeque<(u64, std::time::Instant)>,
    /// A counter sync has just completed for the request being handled:
    /// its statistics need not sync again.
    counters_fresh: bool,
    /// The offload tier, when the switch runs one.
    offload: Option<OffloadTier>,
    /// The offload batch a commit ticket waits for (the latest
    /// revalidation sent: batches are answered in order).
    offload_commit_seq: u64,
    /// Per counter-sync epoch, the offload counter read it waits for.
    offload_reads: std::collections::VecDeque<(u64, u64)>,
}

/// Marks a [`Ticket`] that names a counter-sync request (the rest of the
/// bits are its number); other tickets name a committed version.
const COUNTERS_TICKET: Ticket = 1 << 63;

/// A compile running on its own thread ([`DatapathSwitch::maybe_compile`]).
struct CompileJob {
    /// The pipeline's mutation count when the inputs were copied out: the
    /// result describes those rules exactly, so it is installed only if the
    /// count is still this.
    count: u64,
    /// The builds, and how long they took (timed on the thread: the tick
    /// that collects them may come a while later).
    handle: std::thread::JoinHandle<(Duration, Vec<(u8, offlow_pipeline::Built)>)>,
}

impl DatapathSwitch {
    /// A switch with `n_tables` empty tables and datapath id `dpid`.
    pub fn new(dpid: u64, n_tables: u16) -> DatapathSwitch {
        let control = Control::new(Pipeline::new(n_tables));
        DatapathSwitch {
            control,
            ports: Vec::new(),
            dataplane: None,
            netns: None,
            started: std::time::Instant::now(),
            removed: Vec::new(),
            expired: Vec::new(),
            dpid,
            dirty: false,
            parse: ParseStats::default(),
            exec: ExecStats::default(),
            packet_out: PacketOutStats::default(),
            buffers: PacketBuffers::default(),
            sync_deadlines: std::collections::VecDeque::new(),
            counters_fresh: false,
            offload: None,
            offload_commit_seq: 0,
            offload_reads: std::collections::VecDeque::new(),
            port_status: Vec::new(),
            compiled_at: 0,
            quiet_since: (0, 0),
            last_compile: Duration::ZERO,
            compile_job: None,
        }
    }

    /// Compile the tables (see [`offlow_pipeline::Pipeline::table_structures`]:
    /// a DIR-24-8 FIB for a big table of IPv4 routes, an RFC snapshot for
    /// an IPv4 5-tuple ACL) once their rules have not changed for
    /// [`COMPILE_QUIET`], and publish. Until then lookups run on
    /// TupleMerge, which takes every update at once. Later inserts and
    /// removals keep an RFC snapshot serving through its overlay (removed
    /// rules skipped, rules inserted again recognised, new ones served
    /// beside it) until the overlay outgrows its bound; the next quiet
    /// compile absorbs it. The FIB updates in place. Answers never change,
    /// so nothing cached is invalidated.
    ///
    /// The build runs on a thread of its own, from a copy of the rules, so
    /// the control thread keeps serving the controller (a full BGP table
    /// takes about a second to build). Call this on every tick: a call that
    /// finds the build done installs it in both left-right copies and
    /// commits, unless a rule changed meanwhile (then the result is
    /// dropped and the quiet wait starts again). Workers keep forwarding
    /// on the published version throughout. So that a controller changing
    /// big tables every few seconds does not keep the switch compiling, the
    /// quiet time asked for is at least ten times the last build's.
    /// Returns how long the build took when this call installed one.
    pub fn maybe_compile(&mut self, now_ns: u64) -> Option<Duration> {
        let count = self.control.pipeline().mutation_count();
        if let Some(job) = self.compile_job.take() {
            if !job.handle.is_finished() {
                self.compile_job = Some(job);
                return None;
            }
            return self.finish_compile(job, count);
        }
        if count == self.compiled_at {
            return None;
        }
        if count != self.quiet_since.0 {
            self.quiet_since = (count, now_ns);
            return None;
        }
        let wait = COMPILE_QUIET.max(self.last_compile * 10);
        if now_ns.saturating_sub(self.quiet_since.1) < wait.as_nanos() as u64 {
            return None;
        }
        let inputs = self.control.pipeline().compile_inputs();
        if inputs.is_empty() {
            self.compiled_at = count;
            return None;
        }
        let build = move || {
            let started = std::time::Instant::now();
            let built = inputs
                .into_iter()
                // A FIB's copy for each pipeline copy is made here, not
                // by the install on the control thread.
                .map(|(table, input)| (table, input.build_for(PIPELINE_COPIES)))
                .collect();
            (started.elapsed(), built)
        };
        match std::thread::Builder::new()
            .name("offlow-compile".into())
            .spawn(build)
        {
            Ok(handle) => {
                self.compile_job = Some(CompileJob { count, handle });
            }
            Err(e) => {
                // No thread to spare: the tables stay as they are (correct,
                // just slower) until the next change.
                tracing::warn!(error = %e, "cannot start a compile thread");
                self.compiled_at = count;
            }
        }
        None
    }

    /// Install a finished compile if the rules are still those it was
    /// built from (`count` is the pipeline's mutation count now).
    fn finish_compile(&mut self, job: CompileJob, count: u64) -> Option<Duration> {
        let Ok((took, built)) = job.handle.join() else {
            // A bug in a builder; keep serving from the structures we have.
            tracing::error!("the compile thread panicked; tables left uncompiled");
            self.compiled_at = job.count;
            return None;
        };
        if count != job.count {
            tracing::debug!(
                ms = took.as_millis() as u64,
                "compile dropped: the rules changed while it was built"
            );
            return None;
        }
        let t0 = std::time::Instant::now();
        self.control.install(built);
        // Publishes any flow-mod applied since the last commit too (one that
        // left the classifiers alone, such as a MODIFY): it would take effect
        // at the end of its batch anyway.
        self.control.commit();
        self.dirty = false;
        self.offload_publish();
        self.compiled_at = count;
        self.last_compile = took;
        tracing::info!(
            tables = ?self.control.pipeline().table_structures(),
            ms = took.as_millis() as u64,
            install_ms = t0.elapsed().as_millis() as u64,
            "tables compiled (built on a thread of its own)"
        );
        Some(took)
    }

    /// Is a compile building on its own thread?
    #[cfg(test)]
    fn compiling(&self) -> bool {
        self.compile_job.is_some()
    }

    /// The buffer id and data of a packet-in for `frame` (from `in_port`)
    /// sent by an output to CONTROLLER with `max_len` (§7.4.1): when
    /// `max_len` shows only part of the frame, the whole is kept in a
    /// packet buffer and the part is sent with its id; otherwise (the
    /// frame fits, or `OFPCML_NO_BUFFER` asked for no buffering) the whole
    /// frame is sent, unbuffered.
    pub fn packet_in_data(&mut self, in_port: u32, frame: Vec<u8>, max_len: u16) -> (u32, Vec<u8>) {
        let shown = offlow_datapath::controller_len(frame.len(), max_len);
        if shown == frame.len() {
            return (offlow_openflow::OFP_NO_BUFFER, frame);
        }
        let part = frame[..shown].to_vec();
        let id = self.buffers.store(in_port, frame, self.clock_ns());
        (id, part)
    }

    /// The buffer id and data of an `OFPR_INVALID_TTL` packet-in for
    /// `frame`: the whole frame, also kept in a buffer; each connection
    /// cuts it to its own `miss_send_len` (or drops the id when the frame
    /// fits, or it asked for no buffering: `Connection::send_async`).
    pub fn packet_in_whole(&mut self, in_port: u32, frame: Vec<u8>) -> (u32, Vec<u8>) {
        let id = self.buffers.store(in_port, frame.clone(), self.clock_ns());
        (id, frame)
    }

    /// Port descriptions changed by PORT_MOD since the last call (for
    /// PORT_STATUS with reason MODIFY).
    pub fn take_port_status(&mut self) -> Vec<offlow_openflow::Port> {
        std::mem::take(&mut self.port_status)
    }

    /// Whether a packet-in for a frame received on port `in_port`, sent
    /// by a table-miss entry or not, may go out: §7.2.1, a port configured
    /// `OFPPC_NO_PACKET_IN` sends none for its table misses. (The workers
    /// drop those already; this covers the moments before they take a
    /// new configuration.)
    pub fn packet_in_allowed(&self, in_port: u32, table_miss: bool) -> bool {
        !table_miss
            || self
                .ports
                .iter()
                .find(|p| p.number == in_port)
                .is_none_or(|p| p.config & OFPPC_NO_PACKET_IN == 0)
    }

    /// The switch's own monotonic clock (packet buffer lifetimes).
    fn clock_ns(&self) -> u64 {
        // u64 nanoseconds last 584 years.
        self.started.elapsed().as_nanos() as u64
    }

    /// Apply one flow-mod already in the pipeline's terms (the
    /// [`Switch::flow_mod`](offlow_openflow::Switch::flow_mod) of a wire
    /// flow-mod converts, then comes here; initial flows from the config come
    /// here directly). A refusal is the OpenFlow error it maps onto.
    pub fn pipeline_flow_mod(&mut self, fm: &FlowMod, now_ns: u64) -> Result<(), OfError> {
        let effect = self
            .control
            .flow_mod(fm, now_ns)
            .map_err(|e| e.of_error())?;
        self.dirty = true;
        if let Some(t) = &mut self.offload {
            t.note_effect(&effect, self.control.pipeline());
        }
        if !effect.removed.is_empty() {
            self.removed.extend(
                RemovedFlow::deleted_by(&effect)
                    .into_iter()
                    .filter(RemovedFlow::send_flow_rem),
            );
        }
        Ok(())
    }

    /// Apply one group-mod already in the pipeline's terms (the
    /// [`Switch::group_mod`](offlow_openflow::Switch::group_mod) of a wire
    /// group-mod converts, then comes here; groups from the configuration
    /// come here directly). A refusal is the OpenFlow error it maps onto.
    pub fn pipeline_group_mod(
        &mut self,
        gm: &offlow_pipeline::group::GroupMod,
    ) -> Result<(), OfError> {
        let now = self.clock_ns();
        let effect = self.control.group_mod(gm, now).map_err(|e| e.of_error())?;
        if let Some(t) = &mut self.offload {
            t.note_groups_changed();
        }
        self.note_table_effect(&effect, offlow_pipeline::RemovedReason::GroupDelete);
        Ok(())
    }

    /// After a GROUP_MOD or METER_MOD applied to the writer's copy: publish
    /// at the next commit, let the offload tier re-decide what the flows
    /// it removed touched, and report those flows (with `reason`) to
    /// controllers that asked.
    fn note_table_effect(
        &mut self,
        effect: &offlow_pipeline::FlowModEffect,
        reason: offlow_pipeline::RemovedReason,
    ) {
        self.dirty = true;
        if let Some(t) = &mut self.offload {
            t.note_effect(effect, self.control.pipeline());
        }
        self.removed.extend(
            effect
                .removed
                .iter()
                .map(|e| RemovedFlow {
                    entry: e.clone(),
                    reason,
                })
                .filter(RemovedFlow::send_flow_rem),
        );
    }

    /// Publish flow-mods applied since the last commit (after each batch of
    /// received messages, so changes take effect without a barrier). Does
    /// not wait for the workers: a barrier, or the next flow-mod, waits for
    /// the publish to settle ([`Need::Commit`], [`Need::Write`]).
    pub fn commit_pending(&mut self) {
        if self.dirty {
            self.control.commit_start();
            self.dirty = false;
            self.offload_publish();
        }
    }

    /// Publish every change (without waiting for the workers) and the
    /// offload tier's revalidation; the version, a ticket that
    /// [`offlow_openflow::Switch::is_done`] settles.
    fn publish(&mut self) -> u64 {
        let version = self.control.commit_start();
        self.dirty = false;
        self.offload_publish();
        version
    }

    /// After a publish: send the offloaded entries' revalidation (if any
    /// changed); commit tickets wait for it.
    fn offload_publish(&mut self) {
        if let Some(t) = &mut self.offload {
            if let Some(seq) = t.revalidate(self.control.pipeline()) {
                self.offload_commit_seq = seq;
            }
        }
    }

    /// Has the backend applied every revalidation sent?
    fn offload_settled(&mut self) -> bool {
        match &mut self.offload {
            Some(t) => t.done(self.offload_commit_seq, self.control.pipeline()),
            None => true,
        }
    }

    /// A blocking commit: publish, wait for the workers and the backend.
    fn commit_blocking(&mut self) {
        self.control.commit();
        self.dirty = false;
        self.offload_publish();
        if let Some(t) = &mut self.offload {
            t.wait(self.offload_commit_seq, self.control.pipeline());
        }
    }

    /// Run the offload tier (the daemon calls it every
    /// [`crate::offload::OFFLOAD_TICK`]): hand it the workers' flow
    /// samples, let it read the backend's counters and place flows.
    pub fn offload_tick(&mut self) {
        let Some(t) = &mut self.offload else { return };
        if let Some(d) = &self.dataplane {
            d.take_samples(|k, n| t.observe(k, n));
        }
        if self.dirty {
            // Plan against published rules only; the next tick will.
            t.poll(self.control.pipeline());
            return;
        }
        t.tick(self.control.pipeline());
    }

    /// Run the offload tier with this one.
    pub fn set_offload(&mut self, tier: OffloadTier) {
        self.offload = Some(tier);
    }

    /// The offload tier, if the switch runs one.
    pub fn offload(&self) -> Option<&OffloadTier> {
        self.offload.as_ref()
    }

    /// What the offload tier has done (`None`: no tier).
    pub fn offload_stats(&self) -> Option<OffloadStats> {
        self.offload.as_ref().map(|t| t.stats())
    }

    /// Start a counter sync for the expiry scan, if it has timed entries
    /// to check and workers to ask: the ticket to wait for (through
    /// [`offlow_openflow::Switch::is_done`]) before calling
    /// [`Self::expire`], which then does not wait itself.
    pub fn begin_expiry_sync(&mut self) -> Option<Ticket> {
        if self.control.pipeline().timed_len() == 0 {
            return None;
        }
        self.begin_counter_sync()
    }

    /// Post a counter-sync request to the workers (woken from their idle
    /// sleep), returning its ticket; `None` without workers.
    fn begin_counter_sync(&mut self) -> Option<Ticket> {
        let dataplane = self.dataplane.as_ref()?;
        self.counters_fresh = false;
        let epoch = self.control.sync_start(|| dataplane.wake_all());
        let now = std::time::Instant::now();
        // Requests whose bound passed long ago are nobody's any more.
        while self
            .sync_deadlines
            .front()
            .is_some_and(|&(_, d)| d + REPLY_SYNC_TIMEOUT < now)
        {
            self.sync_deadlines.pop_front();
        }
        self.sync_deadlines
            .push_back((epoch, now + REPLY_SYNC_TIMEOUT));
        if let Some(t) = &mut self.offload {
            while self.offload_reads.len() >= 64 {
                self.offload_reads.pop_front();
            }
            self.offload_reads.push_back((epoch, t.request_counters()));
        }
        Some(COUNTERS_TICKET | epoch)
    }

    /// Remove the entries whose idle or hard timeout has passed (§5.5);
    /// they are published with the next commit, and those flagged
    /// SEND_FLOW_REM reported through [`Self::begin_removal_report`].
    /// Returns every entry removed (whether or not it is reported).
    pub fn expire(&mut self, now_ns: u64) -> Vec<RemovedFlow> {
        if self.control.pipeline().timed_len() == 0 {
            // A sync done for this scan is not fresh for a later request.
            self.counters_fresh = false;
            return Vec::new();
        }
        // Idle detection needs every packet counted so far.
        self.sync_counters();
        let removed = self.control.expire(now_ns);
        if removed.is_empty() {
            return removed;
        }
        self.dirty = true;
        if let Some(t) = &mut self.offload {
            t.note_removed(removed.iter().map(|r| r.entry.id));
        }
        self.expired
            .extend(removed.iter().filter(|r| r.send_flow_rem()).cloned());
        removed
    }

    /// FLOW_REMOVED messages for entries removed (by expiry or DELETE) with
    /// the SEND_FLOW_REM flag since the last call. Commits first and syncs
    /// counters after, so a worker cannot credit the entries afterwards:
    /// their counts in the message are final.
    pub fn take_flow_removed(&mut self, now_ns: u64) -> Vec<offlow_openflow::FlowRemoved> {
        if self.removed.is_empty() {
            self.commit_pending();
            return Vec::new();
        }
        // The removal must be in force (every worker past a quiescent
        // point, having credited the entries' last packets) before the
        // final counts are read. Blocking, but only when an entry flagged
        // SEND_FLOW_REM went away. The offload tier's removal is waited
        // for too: the entries' final counters reach the rules first.
        self.commit_blocking();
        self.counters_fresh = false;
        self.sync_counters();
        messages(&mut self.removed, now_ns)
    }

    /// A packet worker reading this switch's datapath.
    pub fn new_worker(&self, config: WorkerConfig) -> Worker {
        self.control.worker(config)
    }

    /// Attach the data ports (living in namespace `netns`) and the
    /// running packet workers.
    pub fn attach(
        &mut self,
        ports: Vec<SwitchPort>,
        dataplane: crate::dataplane::Dataplane,
        netns: Option<String>,
    ) {
        self.ports = ports;
        self.dataplane = Some(dataplane);
        self.netns = netns;
        self.note_port_liveness();
    }

    /// Tell the group table which ports are live (fast-failover and select
    /// buckets watch them); a change is published with the next commit
    /// (the daemon commits after each link poll).
    fn note_port_liveness(&mut self) {
        for p in &self.ports {
            if self.control.port_live(p.number, p.is_live()) {
                tracing::debug!(
                    port = p.number,
                    live = p.is_live(),
                    "group buckets follow the port"
                );
                self.dirty = true;
                if let Some(t) = &mut self.offload {
                    t.note_groups_changed();
                }
            }
        }
    }

    /// Report the entries removed with SEND_FLOW_REM without blocking,
    /// in three steps (the expiry scan's way; [`Self::take_flow_removed`]
    /// does the same in one blocking call): this publishes the removals
    /// and returns the ticket to wait for (through
    /// [`offlow_openflow::Switch::is_done`]: every worker past a quiescent
    /// point, the offload tier's removal applied, so nothing uses or
    /// credits the removed entries any more); `None`, after a plain
    /// publish, when there is nothing to report. Then
    /// [`Self::begin_removal_counts`], then [`Self::take_removal_report`].
    /// Between the steps other messages are handled; a DELETE's removals
    /// are reported on their own ([`Self::take_flow_removed`]).
    pub fn begin_removal_report(&mut self) -> Option<Ticket> {
        if self.expired.is_empty() {
            self.commit_pending();
            return None;
        }
        Some(self.publish())
    }

    /// Second step of [`Self::begin_removal_report`], once its ticket is
    /// done: ask the workers (and the offload tier) to credit what they
    /// still hold, so the removed entries' counts are final; the ticket
    /// to wait for, `None` without packet workers.
    pub fn begin_removal_counts(&mut self) -> Option<Ticket> {
        self.begin_counter_sync()
    }

    /// Last step of [`Self::begin_removal_report`]: the FLOW_REMOVED
    /// messages. `synced`: the ticket of [`Self::begin_removal_counts`]
    /// is done (without one, the counters are synced here, blocking).
    pub fn take_removal_report(
        &mut self,
        now_ns: u64,
        synced: bool,
    ) -> Vec<offlow_openflow::FlowRemoved> {
        // Consumed here: the next reader of the counters syncs again.
        self.counters_fresh = false;
        if self.expired.is_empty() {
            return Vec::new();
        }
        if !synced {
            self.sync_counters();
        }
        messages(&mut self.expired, now_ns)
    }

    /// A handle on the packet workers' counters, for other threads.
    pub fn dataplane_stats_handle(&self) -> Option<crate::dataplane::StatsHandle> {
        self.dataplane.as_ref().map(|d| d.stats_handle())
    }

    /// Re-read every port's link state, re-opening the ports whose
    /// interface (re)appeared (see the module docs); returns the ports
    /// whose state changed (for PORT_STATUS).
    pub fn refresh_links(&mut self) -> Vec<offlow_openflow::Port> {
        let mut changed = Vec::new();
        let mut lost = Vec::new();
        let netns = self.netns.as_deref();
        for p in &mut self.ports {
            if !p.interface {
                continue;
            }
            p.refresh_kernel_drops();
            let read = p.tx.as_ref().map(AfPacketTx::link);
            let now = match read {
                Some(Ok(now)) => {
                    // A worker that could not re-open it is asked again.
                    if self
                        .dataplane
                        .as_ref()
                        .is_some_and(|d| d.retry_failed_reopen(p.number))
                    {
                        tracing::debug!(port = p.number, name = %p.name,
                            "asking the workers to re-open the port again");
                    }
                    Some(now)
                }
                Some(Err(e)) => {
                    // Gone, or re-created under the same name: either way
                    // this socket (and the workers') is bound to an
                    // interface that no longer exists.
                    tracing::warn!(port = p.number, name = %p.name, error = %e,
                        "port interface disappeared; re-opened when it is back");
                    p.tx = None;
                    lost.push(p.number);
                    None
                }
                None => None,
            };
            let now = match now {
                Some(now) => now,
                None => match p.open_tx(netns) {
                    Some(link) => {
                        let asked = self.dataplane.as_ref().is_some_and(|d| d.reopen(p.number));
                        tracing::info!(port = p.number, name = %p.name, workers_asked = asked,
                            "port interface appeared: port re-opened");
                        link
                    }
                    // Down, address kept for the record.
                    None => LinkState {
                        hw_addr: p.link.hw_addr,
                        admin_up: false,
                        link_up: false,
                    },
                },
            };
            if now != p.link {
                p.link = now;
                changed.push(p.desc());
            }
        }
        if let Some(t) = &mut self.offload {
            for port in lost {
                if t.port_lost(port) {
                    tracing::warn!(port,
                        "offload tier: the port's interface is gone; flows through it stay in software from now on");
                }
            }
        }
        self.note_port_liveness();
        changed
    }

    /// The packet workers' counters summed (None without data ports).
    pub fn dataplane_stats(&self) -> Option<crate::dataplane::DataplaneStats> {
        self.dataplane.as_ref().map(|d| d.stats())
    }

    /// Stop the packet workers (they credit their counters first).
    pub fn stop_dataplane(&mut self) -> Option<crate::dataplane::DataplaneStats> {
        self.dataplane.take().map(|d| d.stop())
    }

    /// Make the rule and table counters include every packet the workers
    /// have processed (bounded wait, see [`SYNC_TIMEOUT`]); at once when a
    /// [`Need::Counters`] ticket just completed for this request.
    fn sync_counters(&mut self) {
        if std::mem::take(&mut self.counters_fresh) {
            return;
        }
        if let Some(t) = &mut self.offload {
            let seq = t.request_counters();
            t.wait(seq, self.control.pipeline());
        }
        let Some(dataplane) = &self.dataplane else {
            return;
        };
        // Idle workers sleep in poll(2): wake them, or this waits for the
        // end of their sleep (up to 2 ms) on every stats request and
        // expiry scan.
        if !self
            .control
            .sync_counters_waking(SYNC_TIMEOUT, || dataplane.wake_all())
        {
            tracing::debug!("a packet worker missed the counter sync");
        }
    }

    /// Apply a flow-mod from inside the switch (standalone mode's learned
    /// flows); committed with the next [`Self::commit_pending`].
    pub fn internal_flow_mod(&mut self, fm: &FlowMod, now_ns: u64) -> Result<(), String> {
        let effect = self
            .control
            .flow_mod(fm, now_ns)
            .map_err(|e| e.to_string())?;
        self.dirty = true;
        if let Some(t) = &mut self.offload {
            t.note_effect(&effect, self.control.pipeline());
        }
        Ok(())
    }

    /// The writer's pipeline (every applied flow-mod, committed or not).
    pub fn pipeline(&self) -> &Pipeline {
        self.control.pipeline()
    }

    /// Frames the ports' interfaces dropped on receive before any socket
    /// of the switch saw them, summed (see [`SwitchPort::kernel_rx_dropped`]).
    pub fn interface_rx_dropped(&self) -> u64 {
        self.ports.iter().map(SwitchPort::kernel_rx_dropped).sum()
    }

    /// Packet-out counters.
    pub fn packet_out_stats(&self) -> PacketOutStats {
        self.packet_out
    }

    fn n_tables(&self) -> u16 {
        self.control.pipeline().n_tables()
    }
}

impl offlow_openflow::Switch for DatapathSwitch {
    fn features(&self) -> SwitchFeatures {
        SwitchFeatures {
            datapath_id: self.dpid,
            n_buffers: crate::buffers::N_BUFFERS,
            // MAX_TABLES is 255.
            n_tables: self.n_tables().min(255) as u8,
            auxiliary_id: 0,
            capabilities: CAPABILITIES,
            reserved: 0,
        }
    }

    fn flow_mod(&mut self, fm: &offlow_openflow::FlowMod, now_ns: u64) -> Result<(), OfError> {
        self.pipeline_flow_mod(&fm.to_pipeline()?, now_ns)
    }

    /// §6.5: validated against the group table (codes from the group
    /// table, bucket actions checked as a flow's); a DELETE removes the
    /// flows forwarding to the group, each reported with reason
    /// `OFPRR_GROUP_DELETE` when it asked for flow-removed messages.
    /// Workers take the change at the next commit; a barrier waits for it.
    fn group_mod(&mut self, gm: &offlow_openflow::GroupMod) -> Result<(), OfError> {
        self.pipeline_group_mod(&gm.to_pipeline()?)
    }

    /// §6.6: validated by the meter table (`OFPMMFC_*` codes, see
    /// `MeterTable::prepare`), meters created on the workers' metering
    /// clock; a DELETE removes the flows using the meter, each reported
    /// with reason `OFPRR_METER_DELETE` when it asked for flow-removed
    /// messages. Workers take the change at the next commit; a barrier
    /// waits for it.
    fn meter_mod(&mut self, mm: &offlow_openflow::MeterMod) -> Result<(), OfError> {
        let now = offlow_datapath::clock::now_ns();
        let effect = self
            .control
            .meter_mod(mm, now)
            .map_err(OfError::MeterModFailed)?;
        self.note_table_effect(&effect, offlow_pipeline::RemovedReason::MeterDelete);
        Ok(())
    }

    fn barrier(&mut self) {
        // Commit even when clean: a no-op publish returns at once, and so
        // does one whose `Need::Commit` ticket has completed (the offload
        // batch too).
        self.commit_blocking();
    }

    fn begin(&mut self, need: Need, _now_ns: u64) -> Option<Ticket> {
        match need {
            // The ticket is the version; `is_done` settles it.
            Need::Commit => Some(self.publish()),
            Need::Write => self.control.is_settling().then(|| self.control.version()),
            Need::Counters => self.begin_counter_sync(),
        }
    }

    fn is_done(&mut self, ticket: Ticket, _now_ns: u64) -> bool {
        if ticket & COUNTERS_TICKET == 0 {
            // Both, so the backend's batch is polled even while workers
            // settle.
            let offload = self.offload_settled();
            return self.control.try_settle() && offload;
        }
        let epoch = ticket & !COUNTERS_TICKET;
        let offload_read = self
            .offload_reads
            .iter()
            .find(|&&(e, _)| e == epoch)
            .map(|&(_, seq)| seq);
        let offload_done = match (&mut self.offload, offload_read) {
            (Some(t), Some(seq)) => t.done(seq, self.control.pipeline()),
            _ => true,
        };
        if self.control.sync_done(epoch) && offload_done {
            self.counters_fresh = true;
            return true;
        }
        let deadline = self
            .sync_deadlines
            .iter()
            .find(|&&(e, _)| e == epoch)
            .map(|&(_, d)| d);
        // A ticket whose request is no longer listed has long timed out.
        if deadline.is_none_or(|d| std::time::Instant::now() >= d) {
            tracing::debug!("a packet worker missed the counter sync");
            // As the blocking sync does after its timeout: answer with
            // what has been credited.
            self.counters_fresh = true;
            return true;
        }
        false
    }

    fn multipart(
        &mut self,
        req: &MultipartRequestBody,
        now_ns: u64,
    ) -> Result<MultipartReplyBody, OfError> {
        let reply = self.multipart_reply(req, now_ns);
        // A sync done for this request is not fresh for the next one.
        self.counters_fresh = false;
        reply
    }

    /// §7.3.3: the port must exist and `hw_addr` be its address; only the
    /// `OFPPC_*` bits of [`OFPPC_SETTABLE`] may be changed; `advertise`
    /// must be 0 (a virtual interface has no link modes to advertise).
    /// The new configuration reaches the packet workers within an idle
    /// sleep and is announced as PORT_STATUS.
    fn port_mod(&mut self, pm: &PortMod) -> Result<(), OfError> {
        let port = self
            .ports
            .iter_mut()
            .find(|p| p.number == pm.port_no)
            .ok_or(OfError::PortModFailed(PortModFailedCode::BadPort))?;
        if pm.hw_addr != port.link.hw_addr {
            return Err(OfError::PortModFailed(PortModFailedCode::BadHwAddr));
        }
        if pm.mask & !OFPPC_SETTABLE != 0 {
            return Err(OfError::PortModFailed(PortModFailedCode::BadConfig));
        }
        if pm.advertise != 0 {
            return Err(OfError::PortModFailed(PortModFailedCode::BadAdvertise));
        }
        let config = (port.config & !pm.mask) | (pm.config & pm.mask);
        if config == port.config {
            return Ok(());
        }
        port.config = config;
        let desc = port.desc();
        if let Some(d) = &self.dataplane {
            d.set_port_config(pm.port_no, config);
        }
        if let Some(t) = &mut self.offload {
            t.port_config(
                pm.port_no,
                config & (OFPPC_NO_RECV | OFPPC_NO_FWD | OFPPC_PORT_DOWN) != 0,
            );
        }
        tracing::info!(
            port = pm.port_no,
            config = format_args!("{config:#x}"),
            "port configured"
        );
        self.port_status.push(desc);
        self.note_port_liveness();
        Ok(())
    }

    fn packet_out(&mut self, po: &PacketOut) -> Result<(), OfError> {
        // §7.3.7: in_port is a standard port or OFPP_CONTROLLER (LOCAL is
        // accepted as Open vSwitch does); with a buffer, OFPP_ANY (what a
        // FLOW_MOD naming a buffer sends) means the frame's own port.
        let valid_in_port =
            |p: PortNo| p.is_physical() || p == PortNo::CONTROLLER || p == PortNo::LOCAL;
        let buffered_own_port =
            po.buffer_id != offlow_openflow::OFP_NO_BUFFER && po.in_port == PortNo::ANY.0;
        if !buffered_own_port && !valid_in_port(PortNo(po.in_port)) {
            return Err(OfError::BadRequest(BadRequestCode::BadPort));
        }
        let mut actions = Vec::with_capacity(po.actions.len());
        for a in &po.actions {
            let pa = a.to_pipeline()?;
            if let offlow_pipeline::Action::Output { port, .. } = pa {
                // Port 0 and OFPP_ANY are never outputs (§7.2.1).
                if port == PortNo::ANY || port.0 == 0 {
                    return Err(OfError::BadAction(BadActionCode::BadOutPort));
                }
            }
            actions.push(pa);
        }
        // Publish the flow-mods received before this packet-out (without
        // waiting for the workers) before it leaves. Output:TABLE runs the
        // pipeline, so they must apply to it (§6.4: a FLOW_MOD naming a
        // buffer processes the packet "after the flow is inserted"). Any
        // other output too: a controller's usual answer to a packet-in is
        // flow-mods then a packet-out, and the packet-out's frame may be
        // answered (a TCP SYN by its SYN-ACK) before the end of the read
        // that carried them would publish; the answer would then miss the
        // flow just installed for it and go to the controller again
        // (measured: a fifth of the source-NAT app's SYN-ACKs did).
        self.commit_pending();
        // Only a valid request uses up its buffer: a refused one can be
        // corrected and sent again.
        let mut buffered = None;
        if po.buffer_id != offlow_openflow::OFP_NO_BUFFER {
            let now = self.clock_ns();
            let (port, frame) = self.buffers.take(po.buffer_id, now).map_err(|e| {
                OfError::BadRequest(match e {
                    BufferError::Unknown => BadRequestCode::BufferUnknown,
                    BufferError::Empty => BadRequestCode::BufferEmpty,
                })
            })?;
            // A buffered frame came in on one of the data ports.
            let in_port = if buffered_own_port { port } else { po.in_port };
            buffered = Some((in_port, frame));
        }
        let (in_port_no, data): (u32, &[u8]) = match &buffered {
            Some((p, f)) => (*p, f),
            None => (po.in_port, &po.data),
        };
        let parsed = offlow_flow::extract(data, in_port_no, &mut self.parse);
        let mut layout = parsed.layout;
        // Tailroom for pushes (VLAN 4 bytes, MPLS 4 bytes each).
        let mut buf = PacketBuf::from_frame(data, 64);
        let infos = self
            .ports
            .iter()
            .map(|p| PortInfo {
                port: p.number,
                no_fwd: p.config & (OFPPC_NO_FWD | OFPPC_PORT_DOWN) != 0,
                no_flood: false,
            })
            .collect();
        let mut sink = ControlSink {
            drop_no_fwd: 0,
            ports: &mut self.ports,
            infos,
            drop_unknown_port: 0,
            drop_to_controller: 0,
        };
        // Group actions (§7.3.7 allows them) run through the writer's
        // groups: every GROUP_MOD received before this packet-out.
        let pipeline = self.control.pipeline();
        let prepared = Prepared::new(&actions).with_groups(
            pipeline.groups(),
            offlow_datapath::microflow::flow_hash(&parsed.key),
        );
        let done = execute_prepared(
            prepared,
            &mut buf,
            &mut layout,
            in_port_no,
            &mut sink,
            &mut self.exec,
        );
        self.packet_out.packets += 1;
        if done.to_table {
            // §7.3.7: OFPP_TABLE submits the packet to the first table.
            self.packet_out.to_table += 1;
            // Dropped right after: its counts are credited on drop.
            let mut worker = self.control.worker(WorkerConfig {
                cache: false,
                cache_capacity: 16,
                ..WorkerConfig::default()
            });
            worker.process(std::slice::from_mut(&mut buf), in_port_no, &mut sink);
        }
        self.packet_out.drop_unknown_port += sink.drop_unknown_port;
        self.packet_out.drop_to_controller += sink.drop_to_controller;
        self.packet_out.drop_no_fwd += sink.drop_no_fwd;
        Ok(())
    }
}

/// FLOW_REMOVED messages for the entries in `removed`, which it empties.
fn messages(removed: &mut Vec<RemovedFlow>, now_ns: u64) -> Vec<offlow_openflow::FlowRemoved> {
    removed
        .drain(..)
        .map(|r| crate::flow_removed::flow_removed_message(&r, now_ns))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::stats::tfpt;
    use super::*;
    use offlow_flow::{Field, Match};
    use offlow_openflow::multipart::FlowStatsRequest;
    use offlow_openflow::port::OFPPS_LINK_DOWN;
    use offlow_openflow::OxmMatch;
    use offlow_openflow::Switch;
    use offlow_pipeline::TABLE_ALL;
    use offlow_pipeline::{FlowModCommand, Instruction as PInstr};

    /// A packet-out from the controller of `data` to `port`.
    fn packet_out_to(port: u32, data: Vec<u8>) -> PacketOut {
        PacketOut {
            buffer_id: offlow_openflow::OFP_NO_BUFFER,
            in_port: PortNo::CONTROLLER.0,
            actions: vec![offlow_openflow::Action::Output { port, max_len: 0 }],
            data,
        }
    }

    fn ip_dst_match(net: u32, bits: u32) -> Match {
        let mut m = Match::ANY;
        m.set_masked(Field::EthType, 0x0800, u128::from(u16::MAX));
        let mask = if bits == 0 {
            0
        } else {
            u32::MAX << (32 - bits)
        };
        m.set_masked(Field::Ipv4Dst, u128::from(net), u128::from(mask));
        m
    }

    fn output(port: u32) -> Vec<PInstr> {
        vec![PInstr::ApplyActions(vec![
            offlow_pipeline::Action::Output {
                port: PortNo(port),
                max_len: 0,
            },
        ])]
    }

    fn req(table_id: u8, m: &Match) -> FlowStatsRequest {
        FlowStatsRequest {
            table_id,
            out_port: PortNo::ANY.0,
            out_group: offlow_pipeline::GROUP_ANY,
            cookie: 0,
            cookie_mask: 0,
            matcher: OxmMatch::from_match(m),
        }
    }

    /// Call `maybe_compile(now_ns)` until the compile it starts (if any)
    /// has finished and been installed or dropped; what the last call
    /// returned. The switch clock stays at `now_ns`; the build runs in
    /// real time (bounded).
    fn compile_at(sw: &mut DatapathSwitch, now_ns: u64) -> Option<Duration> {
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        loop {
            let r = sw.maybe_compile(now_ns);
            if r.is_some() || !sw.compiling() {
                return r;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "compile never finished"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// A switch whose table 0 holds 5,000 routes and a default (a FIB),
    /// each going on to table 1, and whose table 1 holds 40 overlapping
    /// prefixes in no priority order (an ACL); committed.
    fn fib_and_acl_switch() -> DatapathSwitch {
        let mut sw = DatapathSwitch::new(1, 2);
        // Table 0: 5,000 routes and a default, priority rising with
        // length (a FIB), each going on to table 1.
        let goto = vec![PInstr::GotoTable(1)];
        sw.pipeline_flow_mod(&FlowMod::add(0, 1, ip_dst_match(0, 0), goto.clone()), 0)
            .unwrap();
        for i in 0..5000u32 {
            let len = 16 + i % 9;
            let net = (i.wrapping_mul(0x9e37_79b9)) & (u32::MAX << (32 - len));
            let fm = FlowMod::add(0, len + 1, ip_dst_match(net, len), goto.clone());
            sw.pipeline_flow_mod(&fm, 0).unwrap();
        }
        // Table 1: 40 overlapping prefixes in no priority order (an ACL).
        for i in 0..40u32 {
            let fm = FlowMod::add(
                1,
                (i * 7) % 40,
                ip_dst_match(i << 27, 1 + i % 8),
                output(1 + i % 4),
            );
            sw.pipeline_flow_mod(&fm, 0).unwrap();
        }
        sw.commit_pending();
        sw
    }

    /// Tables that stay quiet get their fast structure (a FIB for many
    /// routes, an RFC snapshot for a small ACL), only then, once per change,
    /// and with the same answers.
    #[test]
    fn quiet_tables_are_compiled() {
        use offlow_flow::{present, FlowKey};
        let mut sw = fib_and_acl_switch();
        let keys: Vec<FlowKey> = (0..2000u32)
            .map(|i| {
                let mut k = FlowKey::ZERO;
                k.set(Field::EthType, 0x0800);
                k.set(Field::Ipv4Dst, u128::from(i.wrapping_mul(0x2f6b_2a1d)));
                k.add_presence(present::L3);
                k
            })
            .collect();
        let answers = |sw: &DatapathSwitch| -> Vec<String> {
            keys.iter()
                .map(|k| {
                    let r = sw.pipeline().lookup(k);
                    format!("{:?} {:?}", r.path, r.actions)
                })
                .collect()
        };
        let before = answers(&sw);
        // Every key crosses both tables; some match in table 1.
        assert!(before.iter().all(|a| a.contains("table_id: 1")));
        assert_eq!(
            sw.pipeline().table_structures(),
            vec![(0, "tuple"), (1, "tuple")]
        );
        let s = |t: f64| (t * 1e9) as u64;
        assert_eq!(
            sw.maybe_compile(s(0.0)),
            None,
            "first sight starts the wait"
        );
        assert_eq!(sw.maybe_compile(s(0.5)), None, "not quiet long enough");
        let took = compile_at(&mut sw, s(1.1)).expect("quiet for 1.1 s: compiled");
        assert_eq!(
            sw.pipeline().table_structures(),
            vec![(0, "fib"), (1, "rfc")]
        );
        assert_eq!(answers(&sw), before);
        assert_eq!(sw.maybe_compile(s(5.0)), None, "nothing changed since");
        // An update: the FIB takes it in place; table 1's snapshot serves on
        // with the new rule beside it, and is rebuilt once quiet again.
        let top_half = ip_dst_match(0x8000_0000, 1);
        sw.pipeline_flow_mod(&FlowMod::add(1, 100, top_half, output(9)), 0)
            .unwrap();
        sw.commit_pending();
        let after_update = answers(&sw);
        let changed = after_update.iter().zip(&before).filter(|(a, b)| a != b);
        assert!((500..1500).contains(&changed.count()));
        assert_eq!(sw.pipeline().table_structures()[1], (1, "rfc"));
        // Now the quiet time asked for is at least ten times that compile.
        let wait = COMPILE_QUIET.max(took * 10).as_secs_f64();
        assert_eq!(compile_at(&mut sw, s(5.1)), None);
        assert_eq!(compile_at(&mut sw, s(5.1 + 0.9 * wait)), None);
        assert!(compile_at(&mut sw, s(5.1 + 1.1 * wait)).is_some());
        assert_eq!(
            sw.pipeline().table_structures(),
            vec![(0, "fib"), (1, "rfc")]
        );
        assert_eq!(answers(&sw), after_update);
    }

    #[test]
    fn a_compile_overtaken_by_a_rule_change_is_dropped() {
        use offlow_flow::{present, FlowKey};
        let mut sw = fib_and_acl_switch();
        let answer = |sw: &DatapathSwitch, dst: u32| {
            let mut k = FlowKey::ZERO;
            k.set(Field::EthType, 0x0800);
            k.set(Field::Ipv4Dst, u128::from(dst));
            k.add_presence(present::L3);
            let r = sw.pipeline().lookup(&k);
            format!("{:?} {:?}", r.path, r.actions)
        };
        let s = |t: f64| (t * 1e9) as u64;
        assert_eq!(sw.maybe_compile(s(0.0)), None);
        // Quiet: the build starts on its thread and the call returns at once.
        assert_eq!(sw.maybe_compile(s(1.1)), None);
        assert!(sw.compiling());
        // The control thread keeps taking flow-mods meanwhile.
        sw.pipeline_flow_mod(
            &FlowMod::add(1, 100, ip_dst_match(0x8000_0000, 1), output(9)),
            0,
        )
        .unwrap();
        sw.commit_pending();
        let before = answer(&sw, 0x9000_0001);
        assert!(before.contains("Output"), "{before}");
        // The build finishes from the old rules: it is dropped.
        while sw
            .compile_job
            .as_ref()
            .is_some_and(|j| !j.handle.is_finished())
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(sw.maybe_compile(s(1.2)), None);
        assert!(!sw.compiling());
        assert_eq!(
            sw.pipeline().table_structures(),
            vec![(0, "tuple"), (1, "tuple")],
            "nothing installed"
        );
        assert_eq!(answer(&sw, 0x9000_0001), before);
        // Quiet again from the change on: compiled, with the new rule.
        assert_eq!(sw.maybe_compile(s(1.3)), None, "the wait restarts");
        assert_eq!(compile_at(&mut sw, s(2.0)), None, "not quiet long enough");
        assert!(compile_at(&mut sw, s(2.4)).is_some());
        assert_eq!(
            sw.pipeline().table_structures(),
            vec![(0, "fib"), (1, "rfc")]
        );
        assert_eq!(answer(&sw, 0x9000_0001), before);
    }

    #[test]
    fn flow_stats_filters_and_packet_out_to_table_counts() {
        let mut sw = DatapathSwitch::new(42, 4);
        assert_eq!(sw.features().n_tables, 4);
        assert_eq!(sw.features().datapath_id, 42);
        let a = FlowMod::add(0, 100, ip_dst_match(0x0a00_0000, 24), output(2)).with_cookie(7, 0);
        let b = FlowMod::add(1, 50, ip_dst_match(0x0b00_0000, 8), output(3));
        sw.pipeline_flow_mod(&a, 0).unwrap();
        sw.pipeline_flow_mod(&b, 0).unwrap();
        sw.commit_pending();

        let MultipartReplyBody::Flow(all) = sw
            .multipart(&MultipartRequestBody::Flow(req(TABLE_ALL, &Match::ANY)), 5)
            .unwrap()
        else {
            panic!("kind")
        };
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].table_id, 0);
        assert_eq!(all[0].cookie, 7);
        assert_eq!(all[0].matcher.to_match(), ip_dst_match(0x0a00_0000, 24));

        // Table filter, out_port filter, cookie filter, match filter.
        let one = |r: FlowStatsRequest, sw: &mut DatapathSwitch| match sw
            .multipart(&MultipartRequestBody::Flow(r), 5)
            .unwrap()
        {
            MultipartReplyBody::Flow(v) => v.len(),
            _ => panic!("kind"),
        };
        assert_eq!(one(req(1, &Match::ANY), &mut sw), 1);
        let mut r = req(TABLE_ALL, &Match::ANY);
        r.out_port = 3;
        assert_eq!(one(r, &mut sw), 1);
        let mut r = req(TABLE_ALL, &Match::ANY);
        r.cookie = 7;
        r.cookie_mask = u64::MAX;
        assert_eq!(one(r, &mut sw), 1);
        // Non-strict: a /16 covers the /24 but not the /8.
        assert_eq!(
            one(req(TABLE_ALL, &ip_dst_match(0x0a00_0000, 16)), &mut sw),
            1
        );
        assert!(sw
            .multipart(&MultipartRequestBody::Flow(req(9, &Match::ANY)), 5)
            .is_err());

        // A packet-out through the pipeline credits the matching rule.
        let mut frame = vec![0u8; 34];
        frame[12] = 0x08; // IPv4
        frame[14] = 0x45;
        frame[16..18].copy_from_slice(&20u16.to_be_bytes());
        frame[22] = 64;
        frame[30..34].copy_from_slice(&[10, 0, 0, 5]);
        let po = packet_out_to(PortNo::TABLE.0, frame);
        sw.packet_out(&po).unwrap();
        let s = sw.packet_out_stats();
        assert_eq!((s.packets, s.to_table, s.drop_unknown_port), (1, 1, 1));
        let MultipartReplyBody::Aggregate {
            packet_count,
            flow_count,
            ..
        } = sw
            .multipart(&MultipartRequestBody::Aggregate(req(0, &Match::ANY)), 5)
            .unwrap()
        else {
            panic!("kind")
        };
        assert_eq!((packet_count, flow_count), (1, 1));

        // Delete non-strict by table 1, then only one flow is left.
        let mut d = FlowMod::new(FlowModCommand::Delete, 1, 0, Match::ANY);
        d.out_port = PortNo::ANY;
        sw.pipeline_flow_mod(&d, 0).unwrap();
        sw.barrier();
        assert_eq!(sw.pipeline().len(), 1);
    }

    /// Faucet's shape: table 0 tags untagged frames from port 1 (its
    /// miss drops), table 1 sends VLAN 100 to the controller. The packet-in
    /// must name table 1's entry, with reason OFPR_ACTION (Faucet ignores
    /// other reasons), although the frame it carries (tagged) would miss
    /// table 0: the origin comes from the packet's own resolution, not
    /// from re-classifying the frame. A table-miss sender says NO_MATCH.
    #[test]
    fn packet_in_origin_of_a_rewritten_frame() {
        use offlow_pipeline::Action as PAction;
        use offlow_pipeline::PacketInOrigin;
        const VID_PRESENT: u128 = 0x1000;
        let mut sw = DatapathSwitch::new(1, 4);
        let mut untagged = Match::ANY;
        untagged.set_exact(Field::InPort, 1);
        untagged.set_masked(Field::VlanVid, 0, 0x1fff);
        let tag = vec![
            PInstr::ApplyActions(vec![
                PAction::PushVlan(0x8100),
                PAction::SetField(Field::VlanVid, VID_PRESENT | 100),
            ]),
            PInstr::GotoTable(1),
        ];
        let mut vlan100 = Match::ANY;
        vlan100.set_exact(Field::VlanVid, VID_PRESENT | 100);
        let to_controller = |port: u32| {
            PInstr::ApplyActions(vec![PAction::Output {
                port: PortNo(port),
                max_len: 96,
            }])
        };
        let fms = [
            FlowMod::add(0, 4096, untagged, tag).with_cookie(0x5adc, 0),
            FlowMod::add(0, 0, Match::ANY, vec![]).with_cookie(0x5adc, 0),
            FlowMod::add(1, 4096, vlan100, vec![to_controller(PortNo::CONTROLLER.0)])
                .with_cookie(0x5adc, 0),
            // A table-miss entry that sends to the controller.
            FlowMod::add(2, 0, Match::ANY, vec![to_controller(PortNo::CONTROLLER.0)])
                .with_cookie(0x77, 0),
        ];
        for fm in &fms {
            sw.pipeline_flow_mod(fm, 0).unwrap();
        }
        sw.commit_pending();
        let mut plain = vec![0u8; 60];
        plain[0] = 0xff; // broadcast dst, a unicast src
        plain[6] = 2;
        plain[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        let origins = |sw: &mut DatapathSwitch, in_port: u32| {
            let key = offlow_flow::extract(&plain, in_port, &mut sw.parse).key;
            sw.pipeline().lookup(&key).origins
        };
        let sender = |table_id, cookie, table_miss| PacketInOrigin {
            table_id,
            cookie,
            table_miss,
        };
        assert_eq!(origins(&mut sw, 1), vec![sender(1, 0x5adc, false)]);

        // Table 0 now forwards everything to table 2, whose table-miss
        // entry sends to the controller: that is a NO_MATCH packet-in.
        let mut m = Match::ANY;
        m.set_exact(Field::InPort, 2);
        sw.pipeline_flow_mod(&FlowMod::add(0, 10, m, vec![PInstr::GotoTable(2)]), 0)
            .unwrap();
        sw.commit_pending();
        assert_eq!(origins(&mut sw, 2), vec![sender(2, 0x77, true)]);
        // Two outputs to CONTROLLER on one path: one packet-in each, each
        // naming its own entry.
        sw.pipeline_flow_mod(
            &FlowMod::add(0, 20, Match::ANY, vec![to_controller(PortNo::CONTROLLER.0)])
                .with_cookie(0x99, 0),
            0,
        )
        .unwrap();
        sw.commit_pending();
        assert_eq!(origins(&mut sw, 2), vec![sender(0, 0x99, false)]);
        let mut to_2 = Match::ANY;
        to_2.set_exact(Field::InPort, 2);
        sw.pipeline_flow_mod(
            &FlowMod::add(
                0,
                30,
                to_2,
                vec![to_controller(PortNo::CONTROLLER.0), PInstr::GotoTable(2)],
            )
            .with_cookie(0xaa, 0),
            0,
        )
        .unwrap();
        sw.commit_pending();
        assert_eq!(
            origins(&mut sw, 2),
            vec![sender(0, 0xaa, false), sender(2, 0x77, true)]
        );
    }

    /// A port whose interface vanished is announced down once; a missing
    /// one stays down quietly; a capture port is left alone; and (as root,
    /// which packet sockets need) an interface that exists is opened and
    /// announced up.
    #[test]
    fn refresh_links_announces_vanished_and_found_interfaces() {
        let up = LinkState {
            hw_addr: [2, 0, 0, 0, 0, 9],
            admin_up: true,
            link_up: true,
        };
        let gone = format!("oflgone{}", std::process::id() % 100_000);
        let mut sw = DatapathSwitch::new(1, 1);
        sw.ports = vec![
            SwitchPort::new(5, &gone, true, None, up),
            SwitchPort::new(6, "capture", false, None, up),
        ];
        let changed = sw.refresh_links();
        assert_eq!(changed.len(), 1, "only the vanished port");
        assert_eq!(changed[0].port_no, 5);
        assert_eq!(changed[0].state, OFPPS_LINK_DOWN);
        assert_eq!(changed[0].config, OFPPC_PORT_DOWN);
        assert_eq!(changed[0].hw_addr, up.hw_addr, "address kept");
        assert!(sw.ports[0].tx.is_none() && !sw.ports[0].open_failed);
        assert!(sw.refresh_links().is_empty(), "announced once");
        assert_eq!(sw.ports[1].link, up, "a capture port is not polled");

        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            sw.ports
                .push(SwitchPort::new(7, "lo", true, None, LinkState::default()));
            let changed = sw.refresh_links();
            assert_eq!(changed.len(), 1, "lo found");
            assert_eq!((changed[0].port_no, changed[0].config), (7, 0));
            assert!(sw.ports[2].tx.is_some(), "packet-out socket opened");
            assert!(sw.refresh_links().is_empty(), "and still there");
        }
    }

    /// PORT_MOD: errors for a wrong port, address, bit or advertisement;
    /// a change is described (and announced once); no_packet_in stops the
    /// port's packet-ins; a packet-out to a no_fwd port is dropped.
    #[test]
    fn port_mod_configures_ports() {
        let up = LinkState {
            hw_addr: [2, 0, 0, 0, 0, 9],
            admin_up: true,
            link_up: true,
        };
        let mut sw = DatapathSwitch::new(1, 1);
        sw.ports = vec![SwitchPort::new(5, "capture", false, None, up)];
        let pm = |port_no, hw_addr, config, mask| PortMod {
            port_no,
            hw_addr,
            config,
            mask,
            advertise: 0,
        };
        let err = |e| Err(OfError::PortModFailed(e));
        assert_eq!(
            sw.port_mod(&pm(6, up.hw_addr, OFPPC_NO_FWD, OFPPC_NO_FWD)),
            err(PortModFailedCode::BadPort)
        );
        assert_eq!(
            sw.port_mod(&pm(5, [2, 0, 0, 0, 0, 1], OFPPC_NO_FWD, OFPPC_NO_FWD)),
            err(PortModFailedCode::BadHwAddr)
        );
        assert_eq!(
            sw.port_mod(&pm(5, up.hw_addr, 1 << 3, 1 << 3)),
            err(PortModFailedCode::BadConfig),
            "OFPPC_NO_RECV_STP is OpenFlow 1.0's"
        );
        let mut adv = pm(5, up.hw_addr, 0, 0);
        adv.advertise = 1;
        assert_eq!(sw.port_mod(&adv), err(PortModFailedCode::BadAdvertise));
        assert!(sw.take_port_status().is_empty(), "nothing changed");

        let both = OFPPC_NO_FWD | OFPPC_NO_PACKET_IN;
        assert_eq!(sw.port_mod(&pm(5, up.hw_addr, both, both)), Ok(()));
        // The same again changes nothing and announces nothing.
        assert_eq!(sw.port_mod(&pm(5, up.hw_addr, both, both)), Ok(()));
        let status = sw.take_port_status();
        assert_eq!(status.len(), 1);
        assert_eq!(status[0].config, both);
        assert!(!sw.packet_in_allowed(5, true));
        assert!(sw.packet_in_allowed(5, false), "only table misses");
        assert!(sw.packet_in_allowed(6, true), "no such port: no filter");
        // Only masked bits change.
        assert_eq!(
            sw.port_mod(&pm(5, up.hw_addr, 0, OFPPC_NO_PACKET_IN)),
            Ok(())
        );
        assert_eq!(sw.take_port_status()[0].config, OFPPC_NO_FWD);
        assert!(sw.packet_in_allowed(5, true));

        let po = packet_out_to(5, vec![0; 60]);
        sw.packet_out(&po).unwrap();
        assert_eq!(sw.packet_out_stats().drop_no_fwd, 1);
        assert_eq!(sw.packet_out_stats().drop_unknown_port, 0);
    }

    /// A controller's answer to a packet-in: flow-mods, then a packet-out
    /// of the frame. The reply the frame provokes (a SYN-ACK to a SYN) may
    /// reach a worker before the read that carried them ends; it must meet
    /// the flows already: the packet-out publishes them, with no barrier
    /// and no commit of the caller's.
    #[test]
    fn a_packet_out_publishes_the_flow_mods_before_it() {
        use offlow_datapath::{CountingSink, PacketBuf};
        let mut sw = DatapathSwitch::new(1, 1);
        let mut worker = sw.new_worker(WorkerConfig::default());
        let mut frame = vec![0u8; 34];
        frame[12] = 0x08; // IPv4
        frame[14] = 0x45;
        frame[16..18].copy_from_slice(&20u16.to_be_bytes());
        frame[22] = 64;
        frame[30..34].copy_from_slice(&[10, 0, 0, 5]);
        let through = |worker: &mut Worker| {
            let mut sink = CountingSink::default();
            let mut buf = PacketBuf::from_frame(&frame, 64);
            worker.process(std::slice::from_mut(&mut buf), 1, &mut sink);
            sink.per_port[2]
        };
        assert_eq!(through(&mut worker), 0, "no rule yet: table miss");
        sw.pipeline_flow_mod(
            &FlowMod::add(0, 10, ip_dst_match(0x0a00_0005, 32), output(2)),
            0,
        )
        .unwrap();
        assert_eq!(through(&mut worker), 0, "applied, not yet published");
        let po = packet_out_to(1, vec![0; 60]);
        sw.packet_out(&po).unwrap();
        assert_eq!(through(&mut worker), 1, "the packet-out published the rule");
    }

    #[test]
    fn bad_requests_get_errors() {
        let mut sw = DatapathSwitch::new(1, 2);
        let fm = FlowMod::add(5, 1, Match::ANY, output(1));
        assert!(matches!(
            sw.pipeline_flow_mod(&fm, 0),
            Err(OfError::FlowModFailed(_))
        ));
        let po = PacketOut {
            buffer_id: offlow_openflow::OFP_NO_BUFFER,
            in_port: PortNo::ANY.0,
            actions: vec![],
            data: vec![],
        };
        assert_eq!(
            sw.packet_out(&po),
            Err(OfError::BadRequest(BadRequestCode::BadPort))
        );
        assert!(matches!(
            sw.multipart(&MultipartRequestBody::TableFeatures(sw.table_features()), 0),
            Err(OfError::TableFeaturesFailed(_))
        ));
        let MultipartReplyBody::TableFeatures(t) = sw
            .multipart(&MultipartRequestBody::TableFeatures(Vec::new()), 0)
            .unwrap()
        else {
            panic!("kind")
        };
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].properties[1].prop_type, tfpt::NEXT_TABLES);
        assert_eq!(t[0].properties[1].data, vec![1]);
        assert_eq!(t[0].properties.len(), 8);
    }
}
