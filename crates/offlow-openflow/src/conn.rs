//! The sans-IO OpenFlow 1.3 connection state machine: one controller
//! connection, fed bytes and time, producing bytes.
//!
//! What: [`Connection`] runs the switch side of one OpenFlow channel
//! (OpenFlow 1.3.5 §6.3): the HELLO exchange and version negotiation, echo
//! and liveness, and the answer to every controller request, which it
//! obtains from the switch through the [`Switch`] trait. Switch-initiated
//! messages (PACKET_IN, FLOW_REMOVED, PORT_STATUS) enter through
//! [`Connection::send_async`], which applies the connection's role and
//! asynchronous configuration. Role state shared between the connections of
//! one switch (who is master, the election generation id) lives in
//! [`Roles`], which the caller owns and passes in.
//!
//! No sockets, clocks, threads or locks: bytes go in through
//! [`Connection::receive`] and come out of [`Connection::poll_transmit`];
//! time is a caller-supplied `u64` of nanoseconds from any monotonic origin,
//! consulted through [`Connection::poll_timeout`] /
//! [`Connection::handle_timeout`].
//!
//! Invariants:
//! - Replies leave in the order of the requests that caused them: every
//!   request is handled to completion (switch call included) before the next
//!   one is read, and its reply is appended to the single outbox. Hence a
//!   BARRIER_REPLY follows every reply to earlier requests (§6.2.1), and
//!   since [`Switch::barrier`] returns only once earlier changes are in
//!   force, it also follows their effect.
//! - A request may have to wait for the switch (a [`Need`]: a barrier for
//!   the data path to take every earlier change, a statistics request for
//!   the counters to catch up, a flow-mod for the last publish to settle).
//!   The switch starts that work and hands back a [`Ticket`]
//!   ([`Switch::begin`]); until [`Switch::is_done`] says it is done, the
//!   request and every later one stay unread in the connection
//!   ([`Connection::is_waiting`]), so the order above holds, and the caller
//!   is free to serve other connections meanwhile. It calls
//!   [`Connection::resume`] to try again.
//! - Nothing in the received bytes can make this module panic; a message that
//!   fails to decode is answered with the `OFPT_ERROR` its [`DecodeError`]
//!   names and the connection stays up, except where the stream cannot be
//!   resynchronised (length field below 8) or the handshake failed.
//! - Every message placed in the outbox was produced by [`encode`], so it
//!   decodes with this crate's [`decode`] (HELLO_FAILED errors to a peer of
//!   an older version excepted: they carry the peer's version number).
//! - After [`Connection::is_closed`] turns true, input is ignored; the outbox
//!   still holds what must be flushed before the socket is closed (typically
//!   the error explaining the close).
//!
//! Thread-safety: [`Connection`] and [`Roles`] are plain data (`Send +
//! Sync`), with no interior mutability. The daemon serialises calls: one
//! task owns the `Roles` and every `Connection` of a switch, or wraps them in
//! one lock.

use std::collections::VecDeque;

use crate::error::{
    BadRequestCode as Brc, FlowModFailedCode, GroupModFailedCode, HelloFailedCode,
    MeterModFailedCode, RoleRequestFailedCode, SwitchConfigFailedCode, TableModFailedCode,
    ERROR_DATA_LEN,
};
use crate::message::{msg_type, HEADER_LEN};
use crate::multipart::{MultipartReplyBody, MultipartRequestBody, OFPMPF_MORE};
use crate::port::PortNo;
use crate::{
    decode, encode, error_reply, frame_len, Action, AsyncConfig, Body, DecodeError, ErrorMsg,
    FlowMod, GroupMod, Hello, Message, MeterMod, MultipartReply, MultipartRequest, OfError,
    PacketOut, PacketQueue, PortMod, Role, SwitchConfig, SwitchFeatures, TableMod, OFP_NO_BUFFER,
    OFP_VERSION,
};

/// Identifies one connection among those sharing a [`Roles`].
pub type ConnId = u64;

/// `OFPCR_ROLE_*` wire values (§7.3.9).
#[allow(missing_docs)]
pub mod role_wire {
    pub const NOCHANGE: u32 = 0;
    pub const EQUAL: u32 = 1;
    pub const MASTER: u32 = 2;
    pub const SLAVE: u32 = 3;
}

/// `OFP_DEFAULT_MISS_SEND_LEN` (§7.3.2).
pub const DEFAULT_MISS_SEND_LEN: u16 = 128;
/// `OFPC_FRAG_MASK`: the only bits `ofp_switch_config.flags` defines.
const OFPC_FRAG_MASK: u16 = 3;
/// `OFPTC_DEPRECATED_MASK`: the only bits `ofp_table_mod.config` defines in
/// 1.3 (§7.3.3).
const OFPTC_DEPRECATED_MASK: u32 = 3;
/// `OFPTT_ALL`.
const OFPTT_ALL: u8 = 0xff;
/// `OFPGC_*` / `OFPMC_*` commands (same numbering for groups and meters).
const CMD_ADD: u16 = 0;
const CMD_MODIFY: u16 = 1;
const CMD_DELETE: u16 = 2;
/// How many issued packet-in buffer ids are remembered for PACKET_OUT /
/// FLOW_MOD validation. Older ones are forgotten (the switch's own buffer
/// pool has long recycled them).
const ISSUED_BUFFERS_MAX: usize = 4096;

use crate::message::packet_in_reason::INVALID_TTL as OFPR_INVALID_TTL;

/// `OFPCML_NO_BUFFER`: as a `miss_send_len`, send whole frames unbuffered.
const OFPCML_NO_BUFFER: u16 = 0xffff;

/// A controller's role (§6.3.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ControllerRole {
    /// Full access, receives every asynchronous message (the default).
    #[default]
    Equal,
    /// Full access; at most one per switch.
    Master,
    /// Read-only; by default receives only PORT_STATUS.
    Slave,
}

impl ControllerRole {
    /// The `OFPCR_ROLE_*` value.
    pub fn wire(self) -> u32 {
        match self {
            ControllerRole::Equal => role_wire::EQUAL,
            ControllerRole::Master => role_wire::MASTER,
            ControllerRole::Slave => role_wire::SLAVE,
        }
    }

    /// Index into [`AsyncConfig`]'s masks: 0 for master/equal, 1 for slave
    /// (§7.3.10).
    fn async_index(self) -> usize {
        match self {
            ControllerRole::Slave => 1,
            _ => 0,
        }
    }
}

/// Role state shared by every connection of one switch (§6.3.5): which
/// connection is master and the largest generation id seen.
///
/// The daemon owns one and passes it to each call; connections never hold
/// it. A connection whose own role is master but which is not
/// [`Roles::master`] has been demoted by another controller and behaves as a
/// slave ("the switch changes all other controllers with role
/// OFPCR_ROLE_MASTER to OFPCR_ROLE_SLAVE").
#[derive(Debug, Clone, Default)]
pub struct Roles {
    next_id: ConnId,
    master: Option<ConnId>,
    generation_id: Option<u64>,
}

impl Roles {
    /// No master, no generation id seen.
    pub fn new() -> Roles {
        Roles::default()
    }

    /// A fresh id for a new connection.
    pub fn register(&mut self) -> ConnId {
        let id = self.next_id;
        // u64 ids: wrapping would need 2^64 connections.
        self.next_id = self.next_id.wrapping_add(1);
        id
    }

    /// The master connection, if any.
    pub fn master(&self) -> Option<ConnId> {
        self.master
    }

    /// The generation id of the last accepted MASTER/SLAVE request, if any.
    pub fn generation_id(&self) -> Option<u64> {
        self.generation_id
    }

    /// The connection `id` is gone: if it was master, the switch has none.
    /// The generation id is kept (it is the switch's, not the connection's).
    pub fn release(&mut self, id: ConnId) {
        if self.master == Some(id) {
            self.master = None;
        }
    }

    /// §6.3.5 (paraphrased): the switch compares the request's
    /// generation_id with the largest one seen so far (GEN_MAX); a smaller
    /// one is stale. Compared as `(int64)(gen - GEN_MAX) < 0`, so the
    /// id may wrap.
    fn check_generation(&mut self, generation_id: u64) -> Result<(), OfError> {
        if let Some(max) = self.generation_id {
            if (generation_id.wrapping_sub(max) as i64) < 0 {
                return Err(OfError::RoleRequestFailed(RoleRequestFailedCode::Stale));
            }
        }
        self.generation_id = Some(generation_id);
        Ok(())
    }
}

/// What a request needs from the switch before it can be answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Need {
    /// BARRIER_REQUEST: every earlier change in force on the data path
    /// (§6.2.1: the barrier reply follows their effect).
    Commit,
    /// FLOW, AGGREGATE, TABLE and PORT_STATS requests: the counters include
    /// every packet the data path has processed.
    Counters,
    /// FLOW_MOD: the switch ready to take a change (an earlier publish
    /// finished settling).
    Write,
}

/// Names a piece of switch work a request waits for ([`Switch::begin`]).
/// Its meaning is the switch's own.
pub type Ticket = u64;

/// The switch as the connection sees it. The daemon implements this over
/// the datapath's control handle; tests implement it with a recorder.
///
/// Methods with a default describe a switch that lacks the feature, with the
/// error OpenFlow 1.3.5 prescribes for that case.
pub trait Switch {
    /// `datapath_id`, `n_buffers`, `n_tables`, `capabilities` for
    /// FEATURES_REPLY (`auxiliary_id` and `reserved` are overwritten with 0:
    /// this is a main connection).
    fn features(&self) -> SwitchFeatures;

    /// Apply one flow-mod, as it came off the wire (its command is one of
    /// the five `OFPFC_*`: the connection refuses others itself). The switch
    /// converts it to its own terms and answers what it cannot take with the
    /// OpenFlow error that says why. `now_ns` stamps new entries (timeouts,
    /// durations).
    fn flow_mod(&mut self, fm: &FlowMod, now_ns: u64) -> Result<(), OfError>;

    /// Return once every earlier change is in force on the data path
    /// (the datapath's `Control::commit`). A switch that answered
    /// [`Need::Commit`] through [`Switch::begin`] has nothing left to wait
    /// for when this is called.
    fn barrier(&mut self);

    /// Start what `need` asks for without waiting for it. `Some(ticket)`:
    /// the request waits until [`Switch::is_done`] says so; `None`: answer
    /// it now. Default: never wait (every call completes in place).
    fn begin(&mut self, _need: Need, _now_ns: u64) -> Option<Ticket> {
        None
    }

    /// Whether the work behind `ticket` is done at `now_ns`. Must become
    /// true eventually (a switch bounds its waits). Default: done.
    fn is_done(&mut self, _ticket: Ticket, _now_ns: u64) -> bool {
        true
    }

    /// Answer one multipart request with one reply body; the connection
    /// splits long lists into several messages. A switch without groups or
    /// meters may answer their requests with `OFPBRC_BAD_MULTIPART`.
    fn multipart(
        &mut self,
        req: &MultipartRequestBody,
        now_ns: u64,
    ) -> Result<MultipartReplyBody, OfError>;

    /// Send a packet through `po.actions`. `po.buffer_id` is either
    /// `OFP_NO_BUFFER` (the frame is `po.data`) or an id this connection
    /// issued in a PACKET_IN (the buffered frame; the switch answers
    /// `OFPBRC_BUFFER_UNKNOWN` / `OFPBRC_BUFFER_EMPTY` for one it no longer
    /// holds). With a buffer id, an `in_port` of `OFPP_ANY` means the
    /// buffered frame's own ingress port (a FLOW_MOD naming a buffer sends
    /// it so, §6.4).
    fn packet_out(&mut self, po: &PacketOut) -> Result<(), OfError>;

    /// OFPT_PORT_MOD. Default: no configurable ports (`OFPPMFC_BAD_PORT`).
    fn port_mod(&mut self, _pm: &PortMod) -> Result<(), OfError> {
        Err(OfError::PortModFailed(
            crate::error::PortModFailedCode::BadPort,
        ))
    }

    /// OFPT_GROUP_MOD. Default: a switch with a group table of size zero.
    /// Following §6.5's error list: adding fails with
    /// `OFPGMFC_OUT_OF_GROUPS` (the group table is full), modifying an
    /// absent group is `OFPGMFC_UNKNOWN_GROUP`, deleting an absent group is
    /// not an error.
    fn group_mod(&mut self, gm: &GroupMod) -> Result<(), OfError> {
        match gm.command {
            CMD_ADD => Err(OfError::GroupModFailed(GroupModFailedCode::OutOfGroups)),
            CMD_MODIFY => Err(OfError::GroupModFailed(GroupModFailedCode::UnknownGroup)),
            CMD_DELETE => Ok(()),
            _ => Err(OfError::GroupModFailed(GroupModFailedCode::BadCommand)),
        }
    }

    /// OFPT_METER_MOD. Default: a switch with zero meters, handled like
    /// groups (§6.6): add → `OFPMMFC_OUT_OF_METERS`, modify →
    /// `OFPMMFC_UNKNOWN_METER`, delete → no error.
    fn meter_mod(&mut self, mm: &MeterMod) -> Result<(), OfError> {
        match mm.command {
            CMD_ADD => Err(OfError::MeterModFailed(MeterModFailedCode::OutOfMeters)),
            CMD_MODIFY => Err(OfError::MeterModFailed(MeterModFailedCode::UnknownMeter)),
            CMD_DELETE => Ok(()),
            _ => Err(OfError::MeterModFailed(MeterModFailedCode::BadCommand)),
        }
    }

    /// OFPT_TABLE_MOD after the connection validated the table id and the
    /// (deprecated, §7.3.3) config bits. Default: nothing to configure.
    fn table_mod(&mut self, _tm: &TableMod) -> Result<(), OfError> {
        Ok(())
    }

    /// OFPT_QUEUE_GET_CONFIG_REQUEST. Default: no queues on any port.
    fn queue_get_config(&mut self, _port: u32) -> Result<Vec<PacketQueue>, OfError> {
        Ok(Vec::new())
    }
}

/// Connection parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnConfig {
    /// Silence (no bytes received) after which an ECHO_REQUEST is sent.
    pub echo_interval_ns: u64,
    /// How long to wait, after that ECHO_REQUEST, for any byte before
    /// closing. Before the handshake completes, the peer's HELLO must arrive
    /// within `echo_interval_ns + echo_timeout_ns`.
    pub echo_timeout_ns: u64,
    /// Largest multipart reply message sent; longer replies are split with
    /// `OFPMPF_REPLY_MORE` (§7.3.5). Clamped to `[256, 65535]`.
    pub max_reply_len: usize,
}

impl Default for ConnConfig {
    /// 5 s echo interval, 10 s timeout (Open vSwitch's probe interval is 5 s
    /// too), replies up to the 65535-byte message limit.
    fn default() -> Self {
        ConnConfig {
            echo_interval_ns: 5_000_000_000,
            echo_timeout_ns: 10_000_000_000,
            max_reply_len: usize::from(u16::MAX),
        }
    }
}

/// Why a connection closed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CloseReason {
    /// The peer's HELLO offers no version we speak (OFPHFC_INCOMPATIBLE
    /// sent). Carries the peer's header version.
    Incompatible(u8),
    /// A message other than HELLO arrived first (carries its type).
    NoHello(u8),
    /// No HELLO within the handshake deadline.
    HelloTimeout,
    /// No byte arrived within `echo_timeout_ns` of an ECHO_REQUEST.
    EchoTimeout,
    /// A length field below 8: the stream cannot be split any more.
    BadFraming,
    /// The daemon asked ([`Connection::close`]).
    Local(&'static str),
}

/// What [`Connection::send_async`] did with a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsyncOutcome {
    /// Queued for transmission.
    Sent,
    /// Dropped: the connection's role/async mask excludes this reason.
    Filtered,
    /// Dropped: the handshake has not completed or the connection closed.
    NotReady,
    /// Dropped: not PACKET_IN, FLOW_REMOVED or PORT_STATUS.
    NotAsync,
    /// Dropped: the message could not be encoded (too long).
    Unencodable,
}

/// Counters, for logs and `offlow` status output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ConnStats {
    /// Complete messages received.
    pub rx_msgs: u64,
    /// Messages queued for transmission.
    pub tx_msgs: u64,
    /// OFPT_ERROR messages we sent.
    pub tx_errors: u64,
    /// OFPT_ERROR messages the controller sent us (logged, otherwise
    /// ignored).
    pub rx_errors: u64,
    /// Asynchronous messages dropped by role/async masks.
    pub drop_async_filtered: u64,
}

/// Default asynchronous configuration (§7.3.10, and Open vSwitch's defaults
/// for 1.3): master/equal receive every packet-in reason (NO_MATCH, ACTION,
/// INVALID_TTL), every port-status reason (ADD, DELETE, MODIFY) and every
/// flow-removed reason (IDLE, HARD, DELETE, GROUP_DELETE); a slave receives
/// only port-status (§6.3.5, paraphrased: by default a slave receives no
/// asynchronous messages other than port-status).
pub const DEFAULT_ASYNC: AsyncConfig = AsyncConfig {
    packet_in_mask: [0b111, 0],
    port_status_mask: [0b111, 0b111],
    flow_removed_mask: [0b1111, 0],
};

/// The switch side of one OpenFlow 1.3 controller connection.
#[derive(Debug, Clone)]
pub struct Connection {
    id: ConnId,
    config: ConnConfig,
    // --- handshake and liveness ---
    negotiated: bool,
    closed: Option<CloseReason>,
    /// When the last byte arrived (or the connection started).
    last_rx_ns: u64,
    /// When our outstanding ECHO_REQUEST left, if one is outstanding.
    echo_sent_ns: Option<u64>,
    next_xid: u32,
    // --- per-connection OpenFlow state ---
    role: ControllerRole,
    switch_config: SwitchConfig,
    async_config: AsyncConfig,
    /// Buffer ids sent in PACKET_INs, oldest first, each with whether it
    /// was used (a second use is `OFPBRC_BUFFER_EMPTY`, not UNKNOWN).
    issued_buffers: VecDeque<(u32, bool)>,
    // --- byte queues ---
    /// Received bytes not yet handled: incomplete messages, or complete
    /// ones held behind a request that waits for the switch.
    inbuf: Vec<u8>,
    /// The switch work the first message of `inbuf` waits for.
    waiting: Option<Ticket>,
    /// The first message of `inbuf` has had its [`Need`] met: handle it
    /// without asking again.
    head_ready: bool,
    /// Encoded messages waiting for [`Connection::poll_transmit`].
    outbox: Vec<u8>,
    stats: ConnStats,
}

impl Connection {
    /// A connection that has just been established at `now_ns`: our HELLO
    /// (version 0x04, bitmap {1.3}) is already in the outbox (§6.3.1: "each
    /// side of the connection must immediately send an OFPT_HELLO").
    pub fn new(config: ConnConfig, id: ConnId, now_ns: u64) -> Connection {
        let mut c = Connection {
            id,
            config: ConnConfig {
                max_reply_len: config.max_reply_len.clamp(256, usize::from(u16::MAX)),
                ..config
            },
            negotiated: false,
            closed: None,
            last_rx_ns: now_ns,
            echo_sent_ns: None,
            next_xid: 1,
            role: ControllerRole::Equal,
            switch_config: SwitchConfig {
                flags: 0,
                miss_send_len: DEFAULT_MISS_SEND_LEN,
            },
            async_config: DEFAULT_ASYNC,
            issued_buffers: VecDeque::new(),
            inbuf: Vec::new(),
            waiting: None,
            head_ready: false,
            outbox: Vec::new(),
            stats: ConnStats::default(),
        };
        let xid = c.fresh_xid();
        c.push(&Message::new(xid, Body::Hello(Hello::of13())));
        c
    }

    /// This connection's id in the shared [`Roles`].
    pub fn id(&self) -> ConnId {
        self.id
    }

    /// Whether the HELLO exchange completed with version 1.3.
    pub fn is_negotiated(&self) -> bool {
        self.negotiated
    }

    /// Whether the connection is closed (flush the outbox, then close the
    /// socket and call [`Roles::release`]).
    pub fn is_closed(&self) -> bool {
        self.closed.is_some()
    }

    /// Why the connection closed, if it did.
    pub fn close_reason(&self) -> Option<&CloseReason> {
        self.closed.as_ref()
    }

    /// Close locally (e.g. the daemon shuts down). Idempotent.
    pub fn close(&mut self, why: &'static str) {
        self.close_with(CloseReason::Local(why));
    }

    /// The role this connection last asked for (EQUAL until a ROLE_REQUEST
    /// changes it); [`Connection::role`] says whether it still holds.
    pub fn requested_role(&self) -> ControllerRole {
        self.role
    }

    /// The role this connection has now: its own request, demoted to slave
    /// if another connection has since become master.
    pub fn role(&self, roles: &Roles) -> ControllerRole {
        match self.role {
            ControllerRole::Master if roles.master != Some(self.id) => ControllerRole::Slave,
            r => r,
        }
    }

    /// The last SET_CONFIG (flags, `miss_send_len`); defaults to flags 0 and
    /// `miss_send_len` 128.
    pub fn switch_config(&self) -> SwitchConfig {
        self.switch_config
    }

    /// Bytes of a table-miss packet to include in a PACKET_IN (§7.3.2).
    pub fn miss_send_len(&self) -> u16 {
        self.switch_config.miss_send_len
    }

    /// The asynchronous configuration in force (defaults: [`DEFAULT_ASYNC`]).
    pub fn async_config(&self) -> AsyncConfig {
        self.async_config
    }

    /// Counters.
    pub fn stats(&self) -> ConnStats {
        self.stats
    }

    /// Bytes waiting in the outbox. The daemon should stop reading from a
    /// controller whose outbox it cannot drain (replies are never dropped).
    pub fn transmit_len(&self) -> usize {
        self.outbox.len()
    }

    /// Move every queued byte to the end of `out`; returns how many.
    pub fn poll_transmit(&mut self, out: &mut Vec<u8>) -> usize {
        let n = self.outbox.len();
        out.append(&mut self.outbox);
        n
    }

    /// When [`Connection::handle_timeout`] must next be called (`None` once
    /// closed).
    pub fn poll_timeout(&self) -> Option<u64> {
        if self.closed.is_some() {
            return None;
        }
        let c = &self.config;
        Some(if !self.negotiated {
            self.last_rx_ns
                .saturating_add(c.echo_interval_ns)
                .saturating_add(c.echo_timeout_ns)
        } else if let Some(sent) = self.echo_sent_ns {
            sent.saturating_add(c.echo_timeout_ns)
        } else {
            self.last_rx_ns.saturating_add(c.echo_interval_ns)
        })
    }

    /// Advance timers to `now_ns`: send an ECHO_REQUEST after
    /// `echo_interval_ns` of silence, close when it stays unanswered for
    /// `echo_timeout_ns` or the HELLO never came. Calling early is harmless.
    pub fn handle_timeout(&mut self, now_ns: u64) {
        let Some(deadline) = self.poll_timeout() else {
            return;
        };
        if now_ns < deadline {
            return;
        }
        if !self.negotiated {
            self.close_with(CloseReason::HelloTimeout);
        } else if self.echo_sent_ns.is_some() {
            self.close_with(CloseReason::EchoTimeout);
        } else {
            // §6.3.2 / §7.5.2: either side may send ECHO_REQUEST to check
            // the connection is alive.
            let xid = self.fresh_xid();
            self.push(&Message::new(xid, Body::EchoRequest(Vec::new())));
            self.echo_sent_ns = Some(now_ns);
        }
    }

    /// Feed bytes received at `now_ns`. Any number of messages, and any
    /// fraction of one, may arrive per call; complete messages are handled
    /// at once (calling into `switch`), the rest is kept for the next call.
    pub fn receive<S: Switch + ?Sized>(
        &mut self,
        bytes: &[u8],
        now_ns: u64,
        switch: &mut S,
        roles: &mut Roles,
    ) {
        if self.closed.is_some() {
            return;
        }
        if !bytes.is_empty() {
            // Any traffic proves the peer alive (as Open vSwitch's rconn
            // does), not only an ECHO_REPLY.
            self.last_rx_ns = now_ns;
            self.echo_sent_ns = None;
        }
        self.inbuf.extend_from_slice(bytes);
        self.handle_inbuf(now_ns, switch, roles);
    }

    /// Whether a request waits for the switch ([`Need`]): it and every
    /// later request stay unanswered until [`Connection::resume`] finds the
    /// switch's work done. The caller should call `resume` soon (the work
    /// is short: a publish settling, workers crediting counters) and may
    /// stop reading the socket meanwhile (received bytes are kept).
    pub fn is_waiting(&self) -> bool {
        self.waiting.is_some()
    }

    /// Ask the switch whether the work a waiting request needs is done;
    /// if so, answer it and go on with the requests behind it (which may
    /// wait in turn). Does nothing when not waiting.
    pub fn resume<S: Switch + ?Sized>(&mut self, now_ns: u64, switch: &mut S, roles: &mut Roles) {
        if self.waiting.is_some() && self.closed.is_none() {
            self.handle_inbuf(now_ns, switch, roles);
        }
    }

    /// Handle every complete message of `inbuf`, stopping at one that must
    /// wait for the switch.
    fn handle_inbuf<S: Switch + ?Sized>(&mut self, now_ns: u64, switch: &mut S, roles: &mut Roles) {
        if let Some(t) = self.waiting {
            if !switch.is_done(t, now_ns) {
                return;
            }
            self.waiting = None;
            self.head_ready = true;
        }
        // Taken out so that handlers may borrow `self` mutably while reading
        // the frame; restored below (handlers never touch `inbuf`).
        let buf = std::mem::take(&mut self.inbuf);
        let mut pos = 0;
        while self.closed.is_none() {
            let rest = &buf[pos..];
            match frame_len(rest) {
                Ok(Some(n)) if n <= rest.len() => {
                    let frame = &rest[..n];
                    if !std::mem::take(&mut self.head_ready) && self.negotiated {
                        if let Some(t) = need_of(frame).and_then(|need| switch.begin(need, now_ns))
                        {
                            if !switch.is_done(t, now_ns) {
                                // The frame stays first in `inbuf`.
                                self.waiting = Some(t);
                                break;
                            }
                        }
                    }
                    self.stats.rx_msgs += 1;
                    self.handle_frame(frame, now_ns, switch, roles);
                    pos += n;
                }
                Ok(_) => break,
                Err(e) => {
                    // A length below 8 leaves no way to find the next
                    // message: report it (OFPBRC_BAD_LEN) and give up.
                    let n = rest.len().min(ERROR_DATA_LEN);
                    self.push_error(error_reply(&e, &rest[..n]));
                    self.close_with(CloseReason::BadFraming);
                }
            }
        }
        if self.closed.is_none() {
            self.inbuf = buf;
            self.inbuf.drain(..pos);
        }
    }

    /// Queue an asynchronous message from the switch (PACKET_IN,
    /// FLOW_REMOVED, PORT_STATUS) if this connection's role and async masks
    /// let it through (§7.3.10: a message is sent only if its reason's bit
    /// is set in the mask for the connection's role).
    ///
    /// A PACKET_IN with reason `OFPR_INVALID_TTL` is given this
    /// connection's [`Connection::miss_send_len`] here (§7.3.2: it applies
    /// to packet-ins no output action sized): the switch builds it with the
    /// whole frame and the id of a buffer holding it; a connection that
    /// asked for `OFPCML_NO_BUFFER`, or whose length covers the frame, gets
    /// the frame unbuffered, any other the first `miss_send_len` bytes and
    /// the buffer id. Other packet-ins are sent as built.
    pub fn send_async(&mut self, mut body: Body, roles: &Roles) -> AsyncOutcome {
        if !self.negotiated || self.closed.is_some() {
            return AsyncOutcome::NotReady;
        }
        if let Body::PacketIn(p) = &mut body {
            if p.reason == OFPR_INVALID_TTL {
                let n = self.switch_config.miss_send_len;
                if n == OFPCML_NO_BUFFER || p.data.len() <= usize::from(n) {
                    p.buffer_id = OFP_NO_BUFFER;
                } else if p.buffer_id != OFP_NO_BUFFER {
                    p.data.truncate(usize::from(n));
                }
            }
        }
        let i = self.role(roles).async_index();
        let a = &self.async_config;
        let (mask, reason, buffer) = match &body {
            Body::PacketIn(p) => (a.packet_in_mask[i], p.reason, Some(p.buffer_id)),
            Body::FlowRemoved(f) => (a.flow_removed_mask[i], f.reason, None),
            Body::PortStatus(p) => (a.port_status_mask[i], p.reason, None),
            _ => return AsyncOutcome::NotAsync,
        };
        // Reasons are bit numbers in a 32-bit mask; a reason beyond 31
        // cannot be enabled.
        let allowed = u32::from(reason) < 32 && mask & (1u32 << reason) != 0;
        if !allowed {
            self.stats.drop_async_filtered += 1;
            return AsyncOutcome::Filtered;
        }
        // Asynchronous messages answer no request: xid 0, as Open vSwitch sends.
        if !self.push(&Message::new(0, body)) {
            return AsyncOutcome::Unencodable;
        }
        if let Some(b) = buffer.filter(|&b| b != OFP_NO_BUFFER) {
            if self.issued_buffers.len() == ISSUED_BUFFERS_MAX {
                self.issued_buffers.pop_front();
            }
            self.issued_buffers.push_back((b, false));
        }
        AsyncOutcome::Sent
    }

    // ----- internals -----

    fn fresh_xid(&mut self) -> u32 {
        let x = self.next_xid;
        self.next_xid = self.next_xid.wrapping_add(1);
        x
    }

    fn close_with(&mut self, why: CloseReason) {
        if self.closed.is_none() {
            self.closed = Some(why);
            self.inbuf = Vec::new();
            // The requests that waited went with `inbuf`.
            self.waiting = None;
            self.head_ready = false;
        }
    }

    /// Encode `msg` into the outbox. Returns false (outbox unchanged) if it
    /// cannot be encoded.
    fn push(&mut self, msg: &Message) -> bool {
        match encode(msg, &mut self.outbox) {
            Ok(_) => {
                self.stats.tx_msgs += 1;
                true
            }
            Err(_) => false,
        }
    }

    fn push_error(&mut self, msg: Message) {
        if self.push(&msg) {
            self.stats.tx_errors += 1;
        }
    }

    /// §7.4.4: an error carries the request's xid and "at least 64 bytes of
    /// the failed request" (all of it if shorter).
    fn reply_error(&mut self, error: OfError, request: &[u8]) {
        let e = DecodeError::Invalid {
            error,
            reason: "request refused",
        };
        self.push_error(error_reply(&e, request));
    }

    /// Push a reply built from switch data; if it cannot be encoded (it
    /// would exceed 65535 bytes) the request gets `OFPBRC_BAD_LEN` instead,
    /// so the controller is not left waiting.
    fn reply(&mut self, msg: Message, request: &[u8]) {
        if !self.push(&msg) {
            self.reply_error(OfError::BadRequest(Brc::BadLen), request);
        }
    }

    fn handle_frame<S: Switch + ?Sized>(
        &mut self,
        frame: &[u8],
        now_ns: u64,
        switch: &mut S,
        roles: &mut Roles,
    ) {
        // `frame_len` accepted it, so the header is whole.
        let (version, ty) = (frame[0], frame[1]);
        if !self.negotiated {
            if ty == msg_type::HELLO {
                self.negotiate(frame);
            } else {
                // §6.3.1 has no version to speak before the HELLO exchange;
                // the only sensible answer is to fail the handshake (Open
                // vSwitch drops such a connection outright; we say why).
                self.hello_failed(
                    version,
                    frame,
                    "offlow: expected OFPT_HELLO before any other message",
                );
                self.close_with(CloseReason::NoHello(ty));
            }
            return;
        }
        let msg = match decode(frame) {
            Ok(m) => m,
            Err(e) => {
                // §7.4.4: the request is answered with the error it deserves
                // and the channel goes on (the framing is intact).
                self.push_error(error_reply(&e, frame));
                return;
            }
        };
        self.dispatch(msg, frame, now_ns, switch, roles);
    }

    /// §6.3.1: "If both the Hello message sent and the Hello message received
    /// contained a OFPHET_VERSIONBITMAP hello element, and if those bitmaps
    /// have some common bits set, the negotiated version must be the highest
    /// version set in both bitmaps. Otherwise, the negotiated version must be
    /// the smaller of the version number that was sent and the one that was
    /// received in the version fields." Ours is {1.3} with header 0x04, so:
    /// with a peer bitmap, 1.3 iff it has bit 4; without one, 1.3 iff the
    /// peer's header version is at least 0x04 (min(0x04, v) == 0x04). A peer
    /// bitmap lacking bit 4 says the peer cannot speak 1.3, so we treat that
    /// as incompatible even if its header version is higher (as Open vSwitch
    /// does) rather than fall back to the header rule.
    fn negotiate(&mut self, frame: &[u8]) {
        let version = frame[0];
        // §7.5.1: a HELLO body we cannot parse still has a usable header
        // version; fall back to the header rule rather than fail.
        let bitmap = match decode(frame) {
            Ok(Message {
                body: Body::Hello(h),
                ..
            }) => h.version_bitmap().map(<[u32]>::to_vec),
            _ => None,
        };
        let ok = match &bitmap {
            Some(words) => words.first().is_some_and(|w| w & (1 << OFP_VERSION) != 0),
            None => version >= OFP_VERSION,
        };
        if ok {
            self.negotiated = true;
        } else {
            let text = format!(
                "offlow supports OpenFlow 1.3 (0x04) only; peer offers version 0x{version:02x}{}",
                if bitmap.is_some() {
                    " with a version bitmap lacking 1.3"
                } else {
                    ""
                }
            );
            self.hello_failed(version, frame, &text);
            self.close_with(CloseReason::Incompatible(version));
        }
    }

    /// §6.3.1: "the recipient must reply with an OFPT_ERROR message with a
    /// type field of OFPET_HELLO_FAILED, a code field of OFPHFC_INCOMPATIBLE,
    /// and optionally an ASCII string explaining the situation in data, and
    /// then terminate the connection". The error's header carries the lower
    /// of the two versions so that an older peer can read it
    /// (`ofp_error_msg` has the same layout in every version).
    fn hello_failed(&mut self, peer_version: u8, frame: &[u8], text: &str) {
        let xid = u32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
        self.push_error(Message {
            version: peer_version.clamp(1, OFP_VERSION),
            xid,
            body: Body::Error(ErrorMsg::Standard {
                error: OfError::HelloFailed(HelloFailedCode::Incompatible),
                data: text.as_bytes().to_vec(),
            }),
        });
    }

    /// §6.3.5 (paraphrased): a slave's OFPT_PACKET_OUT, OFPT_FLOW_MOD,
    /// OFPT_GROUP_MOD, OFPT_PORT_MOD, OFPT_TABLE_MOD and non-empty
    /// OFPMP_TABLE_FEATURES requests are refused with OFPET_BAD_REQUEST /
    /// OFPBRC_IS_SLAVE. METER_MOD is
    /// refused too (it changes state just the same; Open vSwitch agrees).
    fn refuse_slave(&mut self, roles: &Roles, frame: &[u8]) -> bool {
        if self.role(roles) == ControllerRole::Slave {
            self.reply_error(OfError::BadRequest(Brc::IsSlave), frame);
            true
        } else {
            false
        }
    }

    fn dispatch<S: Switch + ?Sized>(
        &mut self,
        msg: Message,
        frame: &[u8],
        now_ns: u64,
        switch: &mut S,
        roles: &mut Roles,
    ) {
        let xid = msg.xid;
        match msg.body {
            Body::Hello(_) => {
                // `decode` lets HELLO through with any version (for the
                // handshake); afterwards the channel is 1.3 only.
                if msg.version != OFP_VERSION {
                    self.reply_error(OfError::BadRequest(Brc::BadVersion), frame);
                }
                // A repeated 1.3 HELLO carries nothing new: ignored.
            }
            Body::Error(_) => self.stats.rx_errors += 1,
            // §7.5.2: the reply carries the request's xid and data.
            Body::EchoRequest(data) => self.reply(Message::new(xid, Body::EchoReply(data)), frame),
            // Liveness was refreshed when the bytes arrived.
            Body::EchoReply(_) => {}
            // §7.5.4: experimenter messages we do not know.
            Body::Experimenter(_) => {
                self.reply_error(OfError::BadRequest(Brc::BadExperimenter), frame)
            }
            Body::FeaturesRequest => {
                let f = SwitchFeatures {
                    auxiliary_id: 0,
                    reserved: 0,
                    ..switch.features()
                };
                self.reply(Message::new(xid, Body::FeaturesReply(f)), frame);
            }
            Body::GetConfigRequest => {
                let c = self.switch_config;
                self.reply(Message::new(xid, Body::GetConfigReply(c)), frame);
            }
            Body::SetConfig(c) => {
                // §7.3.2: flags hold OFPC_FRAG_* only.
                if c.flags & !OFPC_FRAG_MASK != 0 {
                    self.reply_error(
                        OfError::SwitchConfigFailed(SwitchConfigFailedCode::BadFlags),
                        frame,
                    );
                } else {
                    self.switch_config = c;
                }
            }
            Body::PacketOut(po) => {
                if self.refuse_slave(roles, frame) {
                    return;
                }
                if po.buffer_id != OFP_NO_BUFFER {
                    if let Err(code) = self.check_buffer(po.buffer_id) {
                        self.reply_error(OfError::BadRequest(code), frame);
                        return;
                    }
                }
                let result = switch.packet_out(&po);
                self.buffer_tried(po.buffer_id, &result);
                if let Err(e) = result {
                    self.reply_error(e, frame);
                }
            }
            Body::FlowMod(fm) => {
                if self.refuse_slave(roles, frame) {
                    return;
                }
                // An unknown command is refused here, before the switch
                // sees the flow-mod (OFPFMFC_BAD_COMMAND).
                if !fm.command_known() {
                    let e = OfError::FlowModFailed(FlowModFailedCode::BadCommand);
                    return self.reply_error(e, frame);
                }
                if let Err(e) = switch.flow_mod(&fm, now_ns) {
                    return self.reply_error(e, frame);
                }
                // §6.4 / §7.3.4.1 (paraphrased): a flow-mod naming a buffer
                // applies, then the buffered packet goes through the pipeline
                // as if by a packet-out to OFPP_TABLE. An unknown id is
                // OFPBRC_BUFFER_UNKNOWN; the flow-mod itself still applies
                // (as in Open vSwitch).
                if fm.buffer_id != OFP_NO_BUFFER {
                    if let Err(code) = self.check_buffer(fm.buffer_id) {
                        self.reply_error(OfError::BadRequest(code), frame);
                    } else {
                        let po = PacketOut {
                            buffer_id: fm.buffer_id,
                            // The buffered frame's own ingress port.
                            in_port: PortNo::ANY.0,
                            actions: vec![Action::Output {
                                port: PortNo::TABLE.0,
                                max_len: 0,
                            }],
                            data: Vec::new(),
                        };
                        let result = switch.packet_out(&po);
                        self.buffer_tried(fm.buffer_id, &result);
                        if let Err(e) = result {
                            self.reply_error(e, frame);
                        }
                    }
                }
            }
            Body::GroupMod(gm) => {
                if !self.refuse_slave(roles, frame) {
                    if let Err(e) = switch.group_mod(&gm) {
                        self.reply_error(e, frame);
                    }
                }
            }
            Body::MeterMod(body) => {
                if !self.refuse_slave(roles, frame) {
                    if let Err(e) = switch.meter_mod(&body) {
                        self.reply_error(e, frame);
                    }
                }
            }
            Body::PortMod(pm) => {
                if !self.refuse_slave(roles, frame) {
                    if let Err(e) = switch.port_mod(&pm) {
                        self.reply_error(e, frame);
                    }
                }
            }
            Body::TableMod(tm) => {
                if self.refuse_slave(roles, frame) {
                    return;
                }
                let n_tables = switch.features().n_tables;
                let r = if tm.table_id != OFPTT_ALL && tm.table_id >= n_tables {
                    Err(OfError::TableModFailed(TableModFailedCode::BadTable))
                } else if tm.config & !OFPTC_DEPRECATED_MASK != 0 {
                    // §7.3.3: every other bit is reserved in 1.3.
                    Err(OfError::TableModFailed(TableModFailedCode::BadConfig))
                } else {
                    switch.table_mod(&tm)
                };
                if let Err(e) = r {
                    self.reply_error(e, frame);
                }
            }
            Body::MultipartRequest(req) => self.multipart(xid, req, frame, now_ns, switch, roles),
            Body::BarrierRequest => {
                // §6.2.1 / §7.3.8: every earlier message is fully processed
                // (handled synchronously above) and now in force.
                switch.barrier();
                self.reply(Message::new(xid, Body::BarrierReply), frame);
            }
            Body::QueueGetConfigRequest(port) => match switch.queue_get_config(port) {
                Ok(queues) => self.reply(
                    Message::new(
                        xid,
                        Body::QueueGetConfigReply(crate::QueueGetConfigReply { port, queues }),
                    ),
                    frame,
                ),
                Err(e) => self.reply_error(e, frame),
            },
            Body::RoleRequest(r) => self.role_request(xid, r, frame, roles),
            Body::GetAsyncRequest => {
                let a = self.async_config;
                self.reply(Message::new(xid, Body::GetAsyncReply(a)), frame);
            }
            // §7.3.10: any role may set its connection's masks.
            Body::SetAsync(a) => self.async_config = a,
            // Messages only a switch sends (§7.1): "unknown type" from our
            // side, as Open vSwitch answers.
            Body::FeaturesReply(_)
            | Body::GetConfigReply(_)
            | Body::PacketIn(_)
            | Body::FlowRemoved(_)
            | Body::PortStatus(_)
            | Body::MultipartReply(_)
            | Body::BarrierReply
            | Body::QueueGetConfigReply(_)
            | Body::RoleReply(_)
            | Body::GetAsyncReply(_) => self.reply_error(OfError::BadRequest(Brc::BadType), frame),
        }
    }

    /// Whether `buffer_id` may be used: `OFPBRC_BUFFER_UNKNOWN` if this
    /// connection never received it (or long ago), `OFPBRC_BUFFER_EMPTY`
    /// if it was used already.
    fn check_buffer(&self, buffer_id: u32) -> Result<(), Brc> {
        match self.issued_buffers.iter().find(|(b, _)| *b == buffer_id) {
            None => Err(Brc::BufferUnknown),
            Some((_, true)) => Err(Brc::BufferEmpty),
            Some((_, false)) => Ok(()),
        }
    }

    /// The switch processed a request naming `buffer_id` with `result`:
    /// the buffer counts as used unless the request was refused for
    /// another reason (then the controller can correct it and retry).
    fn buffer_tried(&mut self, buffer_id: u32, result: &Result<(), OfError>) {
        let used = match result {
            Ok(()) => true,
            Err(e) => matches!(
                e,
                OfError::BadRequest(Brc::BufferEmpty | Brc::BufferUnknown)
            ),
        };
        if buffer_id == OFP_NO_BUFFER || !used {
            return;
        }
        if let Some((_, u)) = self
            .issued_buffers
            .iter_mut()
            .find(|(b, _)| *b == buffer_id)
        {
            *u = true;
        }
    }

    /// §7.3.9 Role Request Message.
    fn role_request(&mut self, xid: u32, r: Role, frame: &[u8], roles: &mut Roles) {
        let new = match r.role {
            role_wire::NOCHANGE => None,
            role_wire::EQUAL => Some(ControllerRole::Equal),
            role_wire::MASTER => Some(ControllerRole::Master),
            role_wire::SLAVE => Some(ControllerRole::Slave),
            _ => {
                return self.reply_error(
                    OfError::RoleRequestFailed(RoleRequestFailedCode::BadRole),
                    frame,
                )
            }
        };
        // §7.3.9 (paraphrased): for MASTER and SLAVE the generation_id is
        // validated; a stale one discards the request with
        // OFPET_ROLE_REQUEST_FAILED / OFPRRFC_STALE. EQUAL and NOCHANGE
        // ignore it.
        if matches!(new, Some(ControllerRole::Master | ControllerRole::Slave)) {
            if let Err(e) = roles.check_generation(r.generation_id) {
                return self.reply_error(e, frame);
            }
        }
        // Settle a demotion that happened behind our back first.
        self.role = self.role(roles);
        if let Some(new) = new {
            match new {
                // "the switch changes all other controllers with role
                // OFPCR_ROLE_MASTER to OFPCR_ROLE_SLAVE": they see it through
                // `Roles::master` (see `Connection::role`).
                ControllerRole::Master => roles.master = Some(self.id),
                _ => {
                    if roles.master == Some(self.id) {
                        roles.master = None;
                    }
                }
            }
            self.role = new;
        }
        // The reply carries the current role and generation id; one never
        // set reads as all ones (the value the spec reserves for "unset",
        // as Open vSwitch sends).
        let reply = Role {
            role: self.role.wire(),
            generation_id: roles.generation_id.unwrap_or(u64::MAX),
        };
        self.reply(Message::new(xid, Body::RoleReply(reply)), frame);
    }

    /// §7.3.5 Multipart Messages.
    fn multipart<S: Switch + ?Sized>(
        &mut self,
        xid: u32,
        req: MultipartRequest,
        frame: &[u8],
        now_ns: u64,
        switch: &mut S,
        roles: &Roles,
    ) {
        if req.flags & OFPMPF_MORE != 0 {
            // A request split over several messages would have to be
            // buffered until the last part; we keep no request buffer, the
            // case §7.3.5 answers with OFPBRC_MULTIPART_BUFFER_OVERFLOW.
            return self.reply_error(OfError::BadRequest(Brc::MultipartBufferOverflow), frame);
        }
        if let MultipartRequestBody::Experimenter(_) = &req.body {
            return self.reply_error(OfError::BadRequest(Brc::BadExperimenter), frame);
        }
        // A table-features request with a body reconfigures the pipeline: a
        // write (§6.3.5).
        let writes = matches!(&req.body, MultipartRequestBody::TableFeatures(t) if !t.is_empty());
        if writes && self.refuse_slave(roles, frame) {
            return;
        }
        let body = match switch.multipart(&req.body, now_ns) {
            Ok(b) => b,
            Err(e) => return self.reply_error(e, frame),
        };
        let parts = split_reply(body, self.config.max_reply_len);
        let n = parts.len();
        for (i, body) in parts.into_iter().enumerate() {
            // OFPMPF_REPLY_MORE on all but the last message (§7.3.5).
            let flags = if i + 1 < n { OFPMPF_MORE } else { 0 };
            let msg = Message::new(xid, Body::MultipartReply(MultipartReply { flags, body }));
            if !self.push(&msg) {
                // One entry alone exceeds 65535 bytes: nothing valid can be
                // sent for it; end the exchange with an error so the
                // controller stops waiting for more.
                self.reply_error(OfError::BadRequest(Brc::BadLen), frame);
                return;
            }
        }
    }
}

/// What a complete message (header checked by [`frame_len`]) needs from
/// the switch before it is handled. Read from the header and the multipart
/// type alone: a message that then fails to decode has waited for nothing
/// worse than a short delay.
fn need_of(frame: &[u8]) -> Option<Need> {
    /// `OFPMP_FLOW`, `OFPMP_AGGREGATE`, `OFPMP_TABLE`, `OFPMP_PORT_STATS`
    /// (§7.3.5): the replies that carry counters.
    const COUNTED: [u16; 4] = [1, 2, 3, 4];
    match frame[1] {
        msg_type::BARRIER_REQUEST => Some(Need::Commit),
        msg_type::FLOW_MOD => Some(Need::Write),
        msg_type::MULTIPART_REQUEST => {
            let ty = u16::from_be_bytes([*frame.get(8)?, *frame.get(9)?]);
            COUNTED.contains(&ty).then_some(Need::Counters)
        }
        _ => None,
    }
}

/// Encoded size of a multipart reply message holding `body`.
fn reply_len(body: MultipartReplyBody) -> usize {
    let m = Message::new(0, Body::MultipartReply(MultipartReply { flags: 0, body }));
    let mut v = Vec::new();
    // An unencodable entry is given an impossible size; it then travels
    // alone and its failure is reported by the caller.
    encode(&m, &mut v).unwrap_or(usize::MAX)
}

/// Pack `items` greedily into as few bodies as keep each message within
/// `max_len`, in order. An empty list still gives one (empty) body.
fn chunk<T: Clone>(
    items: Vec<T>,
    max_len: usize,
    wrap: impl Fn(Vec<T>) -> MultipartReplyBody,
) -> Vec<MultipartReplyBody> {
    // Header (8) + multipart header (8).
    const EMPTY: usize = HEADER_LEN + 8;
    let mut out = Vec::new();
    let mut cur = Vec::new();
    let mut cur_len = EMPTY;
    for item in items {
        let size = reply_len(wrap(vec![item.clone()])).saturating_sub(EMPTY);
        if !cur.is_empty() && cur_len.saturating_add(size) > max_len {
            out.push(wrap(std::mem::take(&mut cur)));
            cur_len = EMPTY;
        }
        cur_len = cur_len.saturating_add(size);
        cur.push(item);
    }
    if !cur.is_empty() || out.is_empty() {
        out.push(wrap(cur));
    }
    out
}

/// Split a reply body whose list would overflow one message (§7.3.5: a
/// reply too long for one message is sent as a sequence sharing the
/// request's xid, all but the last flagged OFPMPF_REPLY_MORE). Records are
/// never split.
fn split_reply(body: MultipartReplyBody, max_len: usize) -> Vec<MultipartReplyBody> {
    use MultipartReplyBody as B;
    match body {
        B::Flow(v) => chunk(v, max_len, B::Flow),
        B::Table(v) => chunk(v, max_len, B::Table),
        B::PortStats(v) => chunk(v, max_len, B::PortStats),
        B::Queue(v) => chunk(v, max_len, B::Queue),
        B::TableFeatures(v) => chunk(v, max_len, B::TableFeatures),
        B::PortDesc(v) => chunk(v, max_len, B::PortDesc),
        B::GroupStats(v) => chunk(v, max_len, B::GroupStats),
        B::GroupDesc(v) => chunk(v, max_len, B::GroupDesc),
        B::MeterStats(v) => chunk(v, max_len, B::MeterStats),
        B::MeterConfig(v) => chunk(v, max_len, B::MeterConfig),
        other => vec![other],
    }
}

// The daemon moves connections between tasks.
const _: () = {
    const fn sendable<T: Send + Sync>() {}
    sendable::<Connection>();
    sendable::<Roles>();
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_respects_limit_and_order() {
        let ports: Vec<crate::Port> = (0..100)
            .map(|i| crate::Port {
                port_no: i,
                ..Default::default()
            })
            .collect();
        // 16 + 64 * k <= 300 → at most 4 ports per message.
        let parts = chunk(ports.clone(), 300, MultipartReplyBody::PortDesc);
        assert_eq!(parts.len(), 25);
        let mut seen = Vec::new();
        for p in parts {
            let MultipartReplyBody::PortDesc(v) = p else {
                panic!("kind changed")
            };
            assert!(16 + 64 * v.len() <= 300);
            seen.extend(v);
        }
        assert_eq!(seen, ports);
        assert_eq!(
            chunk(Vec::<crate::Port>::new(), 300, MultipartReplyBody::PortDesc).len(),
            1
        );
    }

    /// Every group and meter list is split like the others: each part fits,
    /// order and content are kept, records are never cut.
    #[test]
    fn group_and_meter_replies_split() {
        use crate::meter::{MeterBand, MeterBandKind};
        use crate::multipart::{
            BucketCounter, GroupDesc, GroupStats, MeterBandStats, MeterConfig, MeterStats,
        };
        use MultipartReplyBody as B;
        fn check(body: B, max_len: usize) {
            let parts = split_reply(body.clone(), max_len);
            assert!(parts.len() > 1, "{body:?} not split");
            let mut joined: Option<B> = None;
            for p in parts {
                assert!(reply_len(p.clone()) <= max_len);
                joined = Some(match (joined, p) {
                    (None, p) => p,
                    (Some(B::GroupStats(mut a)), B::GroupStats(b)) => {
                        a.extend(b);
                        B::GroupStats(a)
                    }
                    (Some(B::GroupDesc(mut a)), B::GroupDesc(b)) => {
                        a.extend(b);
                        B::GroupDesc(a)
                    }
                    (Some(B::MeterStats(mut a)), B::MeterStats(b)) => {
                        a.extend(b);
                        B::MeterStats(a)
                    }
                    (Some(B::MeterConfig(mut a)), B::MeterConfig(b)) => {
                        a.extend(b);
                        B::MeterConfig(a)
                    }
                    (a, b) => panic!("kind changed: {a:?} / {b:?}"),
                });
            }
            assert_eq!(joined, Some(body));
        }
        let gs = (0..50)
            .map(|i| GroupStats {
                group_id: i,
                bucket_stats: vec![BucketCounter::default(); (i % 4) as usize],
                ..Default::default()
            })
            .collect();
        check(B::GroupStats(gs), 400);
        let gd = (0..50)
            .map(|i| GroupDesc {
                group_type: 0,
                group_id: i,
                buckets: vec![
                    crate::Bucket {
                        weight: 0,
                        watch_port: 0,
                        watch_group: 0,
                        actions: vec![],
                    };
                    (i % 3) as usize
                ],
            })
            .collect();
        check(B::GroupDesc(gd), 200);
        let ms = (0..50)
            .map(|i| MeterStats {
                meter_id: i,
                band_stats: vec![MeterBandStats::default(); (i % 4) as usize],
                ..Default::default()
            })
            .collect();
        check(B::MeterStats(ms), 400);
        let band = MeterBand {
            kind: MeterBandKind::Drop,
            rate: 1,
            burst_size: 0,
        };
        let mc = (0..50)
            .map(|i| MeterConfig {
                flags: 1,
                meter_id: i,
                bands: vec![band; (i % 3) as usize],
            })
            .collect();
        check(B::MeterConfig(mc), 200);
    }

    #[test]
    fn generation_wraps() {
        let mut r = Roles::new();
        r.check_generation(u64::MAX - 1).unwrap();
        // Wrapped forward: newer.
        r.check_generation(3).unwrap();
        assert!(r.check_generation(u64::MAX).is_err());
        assert_eq!(r.generation_id(), Some(3));
    }
}
