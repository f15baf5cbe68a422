//! OpenFlow 1.3 messages (OpenFlow 1.3.5 §7.1–§7.5): the [`Header`],
//! the typed [`Message`] / [`Body`], and [`decode`] / [`encode`] /
//! [`frame_len`].
//!
//! Invariants:
//! - [`decode`] never panics and never reads past `header.length` (nor past
//!   the buffer); every nested length (match, action, instruction, bucket,
//!   stats entry, property, hello element) is checked against its container.
//! - For every `m` that [`decode`] returns, `encode(&m)` succeeds and
//!   `decode(encode(m)) == m`. Bytes `decode` does not keep are padding
//!   (ignored, as Open vSwitch does, and re-emitted as zeros), so
//!   `encode(decode(b)) == b` whenever b's padding is zero — true of
//!   everything [`encode`] produces.
//! - Only `OFPT_HELLO` is accepted with a version other than 0x04 (version
//!   negotiation, §6.3.1, must read the peer's hello); any other message with
//!   another version is `OFPBRC_BAD_VERSION`.
//!
//! Thread-safety: plain data and pure functions.

use offlow_flow::Match;

use crate::action::{emit_actions, emit_instructions, parse_actions, parse_instructions};
use crate::error::{BadRequestCode as R, DecodeError, EncodeError, GroupModFailedCode, OfError};
use crate::meter::MeterMod;
use crate::multipart::{MultipartReply, MultipartRequest};
use crate::oxm::OxmMatch;
use crate::reader::{round8, Put, Reader};
use crate::{Action, Instruction};

/// `OFP_VERSION` for OpenFlow 1.3.
pub const OFP_VERSION: u8 = 0x04;
/// Size of `struct ofp_header`.
pub const HEADER_LEN: usize = 8;

/// `enum ofp_type` wire values (§7.1).
#[allow(missing_docs)]
pub mod msg_type {
    pub const HELLO: u8 = 0;
    pub const ERROR: u8 = 1;
    pub const ECHO_REQUEST: u8 = 2;
    pub const ECHO_REPLY: u8 = 3;
    pub const EXPERIMENTER: u8 = 4;
    pub const FEATURES_REQUEST: u8 = 5;
    pub const FEATURES_REPLY: u8 = 6;
    pub const GET_CONFIG_REQUEST: u8 = 7;
    pub const GET_CONFIG_REPLY: u8 = 8;
    pub const SET_CONFIG: u8 = 9;
    pub const PACKET_IN: u8 = 10;
    pub const FLOW_REMOVED: u8 = 11;
    pub const PORT_STATUS: u8 = 12;
    pub const PACKET_OUT: u8 = 13;
    pub const FLOW_MOD: u8 = 14;
    pub const GROUP_MOD: u8 = 15;
    pub const PORT_MOD: u8 = 16;
    pub const TABLE_MOD: u8 = 17;
    pub const MULTIPART_REQUEST: u8 = 18;
    pub const MULTIPART_REPLY: u8 = 19;
    pub const BARRIER_REQUEST: u8 = 20;
    pub const BARRIER_REPLY: u8 = 21;
    pub const QUEUE_GET_CONFIG_REQUEST: u8 = 22;
    pub const QUEUE_GET_CONFIG_REPLY: u8 = 23;
    pub const ROLE_REQUEST: u8 = 24;
    pub const ROLE_REPLY: u8 = 25;
    pub const GET_ASYNC_REQUEST: u8 = 26;
    pub const GET_ASYNC_REPLY: u8 = 27;
    pub const SET_ASYNC: u8 = 28;
    pub const METER_MOD: u8 = 29;
}

/// `struct ofp_header`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Header {
    /// `OFP_VERSION`.
    pub version: u8,
    /// `enum ofp_type`.
    pub msg_type: u8,
    /// Length of the whole message, header included.
    pub length: u16,
    /// Transaction id.
    pub xid: u32,
}

impl Header {
    /// Parse the header at the start of `buf`. Fails with `Truncated` when
    /// fewer than 8 bytes are present and `OFPBRC_BAD_LEN` when the length
    /// field is below 8 (no message is that short, so the stream is lost).
    pub fn parse(buf: &[u8]) -> Result<Header, DecodeError> {
        let Some(b) = buf.get(..HEADER_LEN) else {
            return Err(DecodeError::Truncated {
                need: HEADER_LEN,
                have: buf.len(),
            });
        };
        let h = Header {
            version: b[0],
            msg_type: b[1],
            length: u16::from_be_bytes([b[2], b[3]]),
            xid: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
        };
        if usize::from(h.length) < HEADER_LEN {
            return Err(DecodeError::bad_len("header length below 8"));
        }
        Ok(h)
    }

    /// Append the header.
    pub fn emit(&self, out: &mut Vec<u8>) {
        out.put_u8(self.version);
        out.put_u8(self.msg_type);
        out.put_u16(self.length);
        out.put_u32(self.xid);
    }
}

/// How many bytes the next message at the start of `buf` occupies: `Ok(None)`
/// when fewer than 4 bytes (the length field) have arrived, `Ok(Some(n))`
/// otherwise (`n` may exceed `buf.len()`: wait for more), and an error when
/// the length field is below 8 (the stream cannot be resynchronised).
///
/// Returns a `Result` rather than a bare `Option` so that a corrupt length is
/// not confused with "need more bytes".
pub fn frame_len(buf: &[u8]) -> Result<Option<usize>, DecodeError> {
    let Some(b) = buf.get(2..4) else {
        return Ok(None);
    };
    let n = usize::from(u16::from_be_bytes([b[0], b[1]]));
    if n < HEADER_LEN {
        return Err(DecodeError::bad_len("header length below 8"));
    }
    Ok(Some(n))
}

/// A complete OpenFlow message: header fields plus typed body. The header's
/// type and length are derived from the body when encoding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Protocol version (0x04 except possibly for HELLO).
    pub version: u8,
    /// Transaction id.
    pub xid: u32,
    /// The body.
    pub body: Body,
}

impl Message {
    /// An OpenFlow 1.3 message.
    pub fn new(xid: u32, body: Body) -> Message {
        Message {
            version: OFP_VERSION,
            xid,
            body,
        }
    }
}

/// `OFPHET_VERSIONBITMAP`.
pub const OFPHET_VERSIONBITMAP: u16 = 1;

/// One element of a HELLO body (`struct ofp_hello_elem_header`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HelloElement {
    /// `OFPHET_VERSIONBITMAP`: bit `n` of word `n / 32` means version `n`.
    VersionBitmap(Vec<u32>),
    /// An element type this codec does not know (§7.5.1: "unknown elements
    /// must be ignored" — kept so the message round-trips).
    Unknown {
        /// Element type.
        elem_type: u16,
        /// Element payload (after the 4-byte header, before padding).
        data: Vec<u8>,
    },
}

/// `OFPT_HELLO`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Hello {
    /// Elements in wire order.
    pub elements: Vec<HelloElement>,
}

impl Hello {
    /// A hello advertising exactly OpenFlow 1.3 (bitmap bit 4).
    pub fn of13() -> Hello {
        Hello {
            elements: vec![HelloElement::VersionBitmap(vec![1 << OFP_VERSION])],
        }
    }

    /// The versions the peer's bitmap allows, if it sent one.
    pub fn version_bitmap(&self) -> Option<&[u32]> {
        self.elements.iter().find_map(|e| match e {
            HelloElement::VersionBitmap(b) => Some(b.as_slice()),
            _ => None,
        })
    }
}

/// `OFPT_ERROR` body.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ErrorMsg {
    /// `struct ofp_error_msg`.
    Standard {
        /// Type and code.
        error: OfError,
        /// Usually the first bytes of the offending request.
        data: Vec<u8>,
    },
    /// `struct ofp_error_experimenter_msg` (type `OFPET_EXPERIMENTER`).
    Experimenter {
        /// Experimenter-defined type.
        exp_type: u16,
        /// Experimenter id.
        experimenter: u32,
        /// Experimenter-defined data.
        data: Vec<u8>,
    },
}

/// `OFPT_EXPERIMENTER` body (also the shape of experimenter multiparts).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Experimenter {
    /// Experimenter id.
    pub experimenter: u32,
    /// Experimenter-defined type.
    pub exp_type: u32,
    /// Experimenter-defined data.
    pub data: Vec<u8>,
}

/// `struct ofp_switch_features` (`OFPT_FEATURES_REPLY`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SwitchFeatures {
    /// Datapath id.
    pub datapath_id: u64,
    /// Packets the switch can buffer.
    pub n_buffers: u32,
    /// Number of tables.
    pub n_tables: u8,
    /// Auxiliary connection id (0 = main).
    pub auxiliary_id: u8,
    /// `OFPC_*` bits.
    pub capabilities: u32,
    /// Reserved.
    pub reserved: u32,
}

/// `struct ofp_switch_config` (GET_CONFIG_REPLY, SET_CONFIG).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SwitchConfig {
    /// `OFPC_FRAG_*` bits.
    pub flags: u16,
    /// Bytes of a table-miss packet sent to the controller.
    pub miss_send_len: u16,
}

/// A fixed-size, NUL-padded string field (port names, descriptions). Kept
/// as raw bytes so that any bytes after the first NUL still round-trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FixedStr<const N: usize>(pub [u8; N]);

impl<const N: usize> FixedStr<N> {
    /// `s` truncated to leave room for a terminating NUL, NUL-padded.
    pub fn new(s: &str) -> Self {
        let mut b = [0u8; N];
        let n = s.len().min(N.saturating_sub(1));
        b[..n].copy_from_slice(&s.as_bytes()[..n]);
        FixedStr(b)
    }

    /// The bytes before the first NUL, lossily as text.
    pub fn to_string_lossy(&self) -> String {
        let end = self.0.iter().position(|&c| c == 0).unwrap_or(N);
        String::from_utf8_lossy(&self.0[..end]).into_owned()
    }

    fn parse(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        r.array().map(FixedStr)
    }
}

impl<const N: usize> Default for FixedStr<N> {
    fn default() -> Self {
        FixedStr([0; N])
    }
}

/// `enum ofp_packet_in_reason` (§7.4.1): why a PACKET_IN was sent.
pub mod packet_in_reason {
    /// `OFPR_NO_MATCH`: sent by a table-miss flow entry.
    pub const NO_MATCH: u8 = 0;
    /// `OFPR_ACTION`: an output to CONTROLLER in a flow entry's actions.
    pub const ACTION: u8 = 1;
    /// `OFPR_INVALID_TTL`: the packet's TTL expired.
    pub const INVALID_TTL: u8 = 2;
}

/// `enum ofp_port_reason` (§7.4.3): what a PORT_STATUS reports.
pub mod port_reason {
    /// `OFPPR_ADD`: a port was added.
    pub const ADD: u8 = 0;
    /// `OFPPR_DELETE`: a port was removed.
    pub const DELETE: u8 = 1;
    /// `OFPPR_MODIFY`: some attribute of a port changed.
    pub const MODIFY: u8 = 2;
}

/// `struct ofp_port` (§7.2.1), 64 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Port {
    /// Port number.
    pub port_no: u32,
    /// MAC address.
    pub hw_addr: [u8; 6],
    /// Name.
    pub name: FixedStr<16>,
    /// `OFPPC_*` bits.
    pub config: u32,
    /// `OFPPS_*` bits.
    pub state: u32,
    /// Current features (`OFPPF_*`).
    pub curr: u32,
    /// Advertised features.
    pub advertised: u32,
    /// Supported features.
    pub supported: u32,
    /// Peer's advertised features.
    pub peer: u32,
    /// Current speed, kbps.
    pub curr_speed: u32,
    /// Maximum speed, kbps.
    pub max_speed: u32,
}

impl Port {
    /// Wire size.
    pub const LEN: usize = 64;

    pub(crate) fn parse(r: &mut Reader<'_>) -> Result<Port, DecodeError> {
        let port_no = r.u32()?;
        r.skip(4)?;
        let hw_addr = r.array()?;
        r.skip(2)?;
        Ok(Port {
            port_no,
            hw_addr,
            name: FixedStr::parse(r)?,
            config: r.u32()?,
            state: r.u32()?,
            curr: r.u32()?,
            advertised: r.u32()?,
            supported: r.u32()?,
            peer: r.u32()?,
            curr_speed: r.u32()?,
            max_speed: r.u32()?,
        })
    }

    pub(crate) fn emit(&self, out: &mut Vec<u8>) {
        out.put_u32(self.port_no);
        out.put_zeros(4);
        out.extend_from_slice(&self.hw_addr);
        out.put_zeros(2);
        out.extend_from_slice(&self.name.0);
        for v in [
            self.config,
            self.state,
            self.curr,
            self.advertised,
            self.supported,
            self.peer,
            self.curr_speed,
            self.max_speed,
        ] {
            out.put_u32(v);
        }
    }
}

/// `OFPT_PACKET_IN` body.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PacketIn {
    /// Buffer id (`OFP_NO_BUFFER` = 0xffffffff).
    pub buffer_id: u32,
    /// Full length of the frame.
    pub total_len: u16,
    /// `OFPR_*`.
    pub reason: u8,
    /// Table that sent the packet.
    pub table_id: u8,
    /// Cookie of the flow entry.
    pub cookie: u64,
    /// Packet metadata (in_port etc.).
    pub matcher: OxmMatch,
    /// The (possibly truncated) frame.
    pub data: Vec<u8>,
}

/// `OFPT_FLOW_REMOVED` body.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FlowRemoved {
    /// Cookie.
    pub cookie: u64,
    /// Priority.
    pub priority: u16,
    /// `OFPRR_*`.
    pub reason: u8,
    /// Table.
    pub table_id: u8,
    /// Lifetime, seconds.
    pub duration_sec: u32,
    /// Lifetime, nanoseconds beyond `duration_sec`.
    pub duration_nsec: u32,
    /// Idle timeout.
    pub idle_timeout: u16,
    /// Hard timeout.
    pub hard_timeout: u16,
    /// Packets.
    pub packet_count: u64,
    /// Bytes.
    pub byte_count: u64,
    /// Match of the removed entry.
    pub matcher: OxmMatch,
}

/// `OFPT_PORT_STATUS` body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PortStatus {
    /// `OFPPR_*`.
    pub reason: u8,
    /// The port.
    pub desc: Port,
}

/// `OFPT_PACKET_OUT` body.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PacketOut {
    /// Buffer id or `OFP_NO_BUFFER`.
    pub buffer_id: u32,
    /// Input port for the actions' purposes.
    pub in_port: u32,
    /// Actions.
    pub actions: Vec<Action>,
    /// Frame (when `buffer_id` is `OFP_NO_BUFFER`).
    pub data: Vec<u8>,
}

/// `enum ofp_flow_mod_command` wire values.
#[allow(missing_docs)]
pub mod flow_mod_command {
    pub const ADD: u8 = 0;
    pub const MODIFY: u8 = 1;
    pub const MODIFY_STRICT: u8 = 2;
    pub const DELETE: u8 = 3;
    pub const DELETE_STRICT: u8 = 4;
}

/// `enum ofp_flow_mod_flags` (`OFPFF_*`, §7.3.4.1) bits.
pub mod flow_mod_flags {
    /// Send a flow-removed message when the entry is removed.
    pub const SEND_FLOW_REM: u16 = 1 << 0;
    /// Refuse an ADD overlapping an entry of equal priority.
    pub const CHECK_OVERLAP: u16 = 1 << 1;
    /// Reset the counters of a replaced / modified entry.
    pub const RESET_COUNTS: u16 = 1 << 2;
    /// Do not count packets.
    pub const NO_PKT_COUNTS: u16 = 1 << 3;
    /// Do not count bytes.
    pub const NO_BYT_COUNTS: u16 = 1 << 4;
}

/// `OFPT_FLOW_MOD` body.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FlowMod {
    /// Cookie.
    pub cookie: u64,
    /// Cookie mask (modify/delete filter).
    pub cookie_mask: u64,
    /// Table.
    pub table_id: u8,
    /// `OFPFC_*` (any value decodes; [`FlowMod::command_known`] tells).
    pub command: u8,
    /// Idle timeout.
    pub idle_timeout: u16,
    /// Hard timeout.
    pub hard_timeout: u16,
    /// Priority.
    pub priority: u16,
    /// Buffered packet to apply to, or `OFP_NO_BUFFER`.
    pub buffer_id: u32,
    /// Delete filter port.
    pub out_port: u32,
    /// Delete filter group.
    pub out_group: u32,
    /// `OFPFF_*` bits.
    pub flags: u16,
    /// Match.
    pub matcher: OxmMatch,
    /// Instructions.
    pub instructions: Vec<Instruction>,
}

impl FlowMod {
    /// Is `command` one of the five `OFPFC_*` values? §7.3.4.1 (and
    /// `OFPFMFC_BAD_COMMAND`): any other value is refused.
    pub fn command_known(&self) -> bool {
        use flow_mod_command as C;
        matches!(
            self.command,
            C::ADD | C::MODIFY | C::MODIFY_STRICT | C::DELETE | C::DELETE_STRICT
        )
    }

    /// An ADD flow-mod for `m` with the given instructions, canonical OXM
    /// order, no buffer, filters open.
    pub fn add(table_id: u8, priority: u16, m: &Match, instructions: Vec<Instruction>) -> FlowMod {
        FlowMod {
            cookie: 0,
            cookie_mask: 0,
            table_id,
            command: flow_mod_command::ADD,
            idle_timeout: 0,
            hard_timeout: 0,
            priority,
            buffer_id: OFP_NO_BUFFER,
            out_port: crate::port::PortNo::ANY.0,
            out_group: crate::port::GROUP_ANY,
            flags: 0,
            matcher: OxmMatch::from_match(m),
            instructions,
        }
    }
}

/// `OFP_NO_BUFFER`.
pub const OFP_NO_BUFFER: u32 = 0xffff_ffff;

/// `struct ofp_bucket`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Bucket {
    /// Weight (select groups).
    pub weight: u16,
    /// Port watched for liveness (fast-failover).
    pub watch_port: u32,
    /// Group watched for liveness.
    pub watch_group: u32,
    /// Actions.
    pub actions: Vec<Action>,
}

/// `OFPT_GROUP_MOD` body.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GroupMod {
    /// `OFPGC_*`.
    pub command: u16,
    /// `OFPGT_*`.
    pub group_type: u8,
    /// Group id.
    pub group_id: u32,
    /// Buckets.
    pub buckets: Vec<Bucket>,
}

/// `OFPT_PORT_MOD` body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PortMod {
    /// Port.
    pub port_no: u32,
    /// Must match the port's address.
    pub hw_addr: [u8; 6],
    /// `OFPPC_*` bits to set.
    pub config: u32,
    /// Which `config` bits to change.
    pub mask: u32,
    /// Features to advertise (0 = unchanged).
    pub advertise: u32,
}

/// `OFPT_TABLE_MOD` body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TableMod {
    /// Table (or `OFPTT_ALL`).
    pub table_id: u8,
    /// `OFPTC_*` bits.
    pub config: u32,
}

/// `struct ofp_packet_queue` with its properties kept raw.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PacketQueue {
    /// Queue id.
    pub queue_id: u32,
    /// Port.
    pub port: u32,
    /// `ofp_queue_prop_*` TLVs, raw.
    pub properties: Vec<u8>,
}

/// `OFPT_QUEUE_GET_CONFIG_REPLY` body.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct QueueGetConfigReply {
    /// Port queried.
    pub port: u32,
    /// Its queues.
    pub queues: Vec<PacketQueue>,
}

/// `struct ofp_role_request` (ROLE_REQUEST, ROLE_REPLY).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Role {
    /// `OFPCR_ROLE_*`.
    pub role: u32,
    /// Master election generation id.
    pub generation_id: u64,
}

/// `struct ofp_async_config` (GET_ASYNC_REPLY, SET_ASYNC): index 0 is the
/// master/equal role, 1 the slave role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AsyncConfig {
    /// `OFPR_*` bitmasks.
    pub packet_in_mask: [u32; 2],
    /// `OFPPR_*` bitmasks.
    pub port_status_mask: [u32; 2],
    /// `OFPRR_*` bitmasks.
    pub flow_removed_mask: [u32; 2],
}

/// A message body, one variant per `enum ofp_type`.
#[allow(missing_docs)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    Hello(Hello),
    Error(ErrorMsg),
    EchoRequest(Vec<u8>),
    EchoReply(Vec<u8>),
    Experimenter(Experimenter),
    FeaturesRequest,
    FeaturesReply(SwitchFeatures),
    GetConfigRequest,
    GetConfigReply(SwitchConfig),
    SetConfig(SwitchConfig),
    PacketIn(PacketIn),
    FlowRemoved(FlowRemoved),
    PortStatus(PortStatus),
    PacketOut(PacketOut),
    FlowMod(FlowMod),
    GroupMod(GroupMod),
    PortMod(PortMod),
    TableMod(TableMod),
    MultipartRequest(MultipartRequest),
    MultipartReply(MultipartReply),
    BarrierRequest,
    BarrierReply,
    /// Port to query.
    QueueGetConfigRequest(u32),
    QueueGetConfigReply(QueueGetConfigReply),
    RoleRequest(Role),
    RoleReply(Role),
    GetAsyncRequest,
    GetAsyncReply(AsyncConfig),
    SetAsync(AsyncConfig),
    MeterMod(MeterMod),
}

impl Body {
    /// The `enum ofp_type` value.
    pub fn msg_type(&self) -> u8 {
        use msg_type as T;
        match self {
            Body::Hello(_) => T::HELLO,
            Body::Error(_) => T::ERROR,
            Body::EchoRequest(_) => T::ECHO_REQUEST,
            Body::EchoReply(_) => T::ECHO_REPLY,
            Body::Experimenter(_) => T::EXPERIMENTER,
            Body::FeaturesRequest => T::FEATURES_REQUEST,
            Body::FeaturesReply(_) => T::FEATURES_REPLY,
            Body::GetConfigRequest => T::GET_CONFIG_REQUEST,
            Body::GetConfigReply(_) => T::GET_CONFIG_REPLY,
            Body::SetConfig(_) => T::SET_CONFIG,
            Body::PacketIn(_) => T::PACKET_IN,
            Body::FlowRemoved(_) => T::FLOW_REMOVED,
            Body::PortStatus(_) => T::PORT_STATUS,
            Body::PacketOut(_) => T::PACKET_OUT,
            Body::FlowMod(_) => T::FLOW_MOD,
            Body::GroupMod(_) => T::GROUP_MOD,
            Body::PortMod(_) => T::PORT_MOD,
            Body::TableMod(_) => T::TABLE_MOD,
            Body::MultipartRequest(_) => T::MULTIPART_REQUEST,
            Body::MultipartReply(_) => T::MULTIPART_REPLY,
            Body::BarrierRequest => T::BARRIER_REQUEST,
            Body::BarrierReply => T::BARRIER_REPLY,
            Body::QueueGetConfigRequest(_) => T::QUEUE_GET_CONFIG_REQUEST,
            Body::QueueGetConfigReply(_) => T::QUEUE_GET_CONFIG_REPLY,
            Body::RoleRequest(_) => T::ROLE_REQUEST,
            Body::RoleReply(_) => T::ROLE_REPLY,
            Body::GetAsyncRequest => T::GET_ASYNC_REQUEST,
            Body::GetAsyncReply(_) => T::GET_ASYNC_REPLY,
            Body::SetAsync(_) => T::SET_ASYNC,
            Body::MeterMod(_) => T::METER_MOD,
        }
    }
}

/// Decode the message at the start of `buf`. Bytes past the header's length
/// are not examined (they belong to the next message); use [`frame_len`] to
/// split a stream.
pub fn decode(buf: &[u8]) -> Result<Message, DecodeError> {
    let h = Header::parse(buf)?;
    let len = usize::from(h.length);
    let Some(frame) = buf.get(..len) else {
        return Err(DecodeError::Truncated {
            need: len,
            have: buf.len(),
        });
    };
    if h.version != OFP_VERSION && h.msg_type != msg_type::HELLO {
        return Err(DecodeError::req(R::BadVersion, "unsupported version"));
    }
    // `frame.len() == h.length >= HEADER_LEN` (checked by `Header::parse`).
    let mut r = Reader::new(&frame[HEADER_LEN..], DecodeError::bad_len("body too short"));
    let body = decode_body(h.msg_type, &mut r)?;
    if !r.is_empty() {
        return Err(DecodeError::bad_len("trailing bytes after body"));
    }
    Ok(Message {
        version: h.version,
        xid: h.xid,
        body,
    })
}

fn decode_body(ty: u8, r: &mut Reader<'_>) -> Result<Body, DecodeError> {
    use msg_type as T;
    Ok(match ty {
        T::HELLO => Body::Hello(parse_hello(r)?),
        T::ERROR => {
            let err_type = r.u16()?;
            if err_type == 0xffff {
                Body::Error(ErrorMsg::Experimenter {
                    exp_type: r.u16()?,
                    experimenter: r.u32()?,
                    data: r.rest().to_vec(),
                })
            } else {
                Body::Error(ErrorMsg::Standard {
                    error: OfError::from_wire(err_type, r.u16()?),
                    data: r.rest().to_vec(),
                })
            }
        }
        T::ECHO_REQUEST => Body::EchoRequest(r.rest().to_vec()),
        T::ECHO_REPLY => Body::EchoReply(r.rest().to_vec()),
        T::EXPERIMENTER => Body::Experimenter(parse_experimenter(r)?),
        T::FEATURES_REQUEST => Body::FeaturesRequest,
        T::FEATURES_REPLY => {
            let datapath_id = r.u64()?;
            let n_buffers = r.u32()?;
            let n_tables = r.u8()?;
            let auxiliary_id = r.u8()?;
            r.skip(2)?;
            Body::FeaturesReply(SwitchFeatures {
                datapath_id,
                n_buffers,
                n_tables,
                auxiliary_id,
                capabilities: r.u32()?,
                reserved: r.u32()?,
            })
        }
        T::GET_CONFIG_REQUEST => Body::GetConfigRequest,
        T::GET_CONFIG_REPLY => Body::GetConfigReply(parse_config(r)?),
        T::SET_CONFIG => Body::SetConfig(parse_config(r)?),
        T::PACKET_IN => {
            let buffer_id = r.u32()?;
            let total_len = r.u16()?;
            let reason = r.u8()?;
            let table_id = r.u8()?;
            let cookie = r.u64()?;
            let matcher = OxmMatch::parse(r)?;
            r.skip(2)?;
            Body::PacketIn(PacketIn {
                buffer_id,
                total_len,
                reason,
                table_id,
                cookie,
                matcher,
                data: r.rest().to_vec(),
            })
        }
        T::FLOW_REMOVED => Body::FlowRemoved(FlowRemoved {
            cookie: r.u64()?,
            priority: r.u16()?,
            reason: r.u8()?,
            table_id: r.u8()?,
            duration_sec: r.u32()?,
            duration_nsec: r.u32()?,
            idle_timeout: r.u16()?,
            hard_timeout: r.u16()?,
            packet_count: r.u64()?,
            byte_count: r.u64()?,
            matcher: OxmMatch::parse(r)?,
        }),
        T::PORT_STATUS => {
            let reason = r.u8()?;
            r.skip(7)?;
            Body::PortStatus(PortStatus {
                reason,
                desc: Port::parse(r)?,
            })
        }
        T::PACKET_OUT => {
            let buffer_id = r.u32()?;
            let in_port = r.u32()?;
            let actions_len = usize::from(r.u16()?);
            r.skip(6)?;
            let actions = parse_actions(r.bytes(actions_len)?)?;
            Body::PacketOut(PacketOut {
                buffer_id,
                in_port,
                actions,
                data: r.rest().to_vec(),
            })
        }
        T::FLOW_MOD => {
            let cookie = r.u64()?;
            let cookie_mask = r.u64()?;
            let table_id = r.u8()?;
            let command = r.u8()?;
            let idle_timeout = r.u16()?;
            let hard_timeout = r.u16()?;
            let priority = r.u16()?;
            let buffer_id = r.u32()?;
            let out_port = r.u32()?;
            let out_group = r.u32()?;
            let flags = r.u16()?;
            r.skip(2)?;
            let matcher = OxmMatch::parse(r)?;
            let instructions = parse_instructions(r.rest())?;
            Body::FlowMod(FlowMod {
                cookie,
                cookie_mask,
                table_id,
                command,
                idle_timeout,
                hard_timeout,
                priority,
                buffer_id,
                out_port,
                out_group,
                flags,
                matcher,
                instructions,
            })
        }
        T::GROUP_MOD => {
            let command = r.u16()?;
            let group_type = r.u8()?;
            r.skip(1)?;
            let group_id = r.u32()?;
            let bad_bucket = DecodeError::Invalid {
                error: OfError::GroupModFailed(GroupModFailedCode::BadBucket),
                reason: "bucket length",
            };
            let buckets = parse_buckets(r, bad_bucket)?;
            Body::GroupMod(GroupMod {
                command,
                group_type,
                group_id,
                buckets,
            })
        }
        T::PORT_MOD => {
            let port_no = r.u32()?;
            r.skip(4)?;
            let hw_addr = r.array()?;
            r.skip(2)?;
            let pm = PortMod {
                port_no,
                hw_addr,
                config: r.u32()?,
                mask: r.u32()?,
                advertise: r.u32()?,
            };
            r.skip(4)?;
            Body::PortMod(pm)
        }
        T::TABLE_MOD => {
            let table_id = r.u8()?;
            r.skip(3)?;
            Body::TableMod(TableMod {
                table_id,
                config: r.u32()?,
            })
        }
        T::MULTIPART_REQUEST => Body::MultipartRequest(MultipartRequest::parse(r)?),
        T::MULTIPART_REPLY => Body::MultipartReply(MultipartReply::parse(r)?),
        T::BARRIER_REQUEST => Body::BarrierRequest,
        T::BARRIER_REPLY => Body::BarrierReply,
        T::QUEUE_GET_CONFIG_REQUEST => {
            let port = r.u32()?;
            r.skip(4)?;
            Body::QueueGetConfigRequest(port)
        }
        T::QUEUE_GET_CONFIG_REPLY => {
            let port = r.u32()?;
            r.skip(4)?;
            let mut queues = Vec::new();
            while !r.is_empty() {
                let qlen = usize::from(r.peek_u16(8)?);
                if qlen < 16 || qlen > r.remaining() {
                    return Err(DecodeError::bad_len("packet queue length"));
                }
                let mut q = r.sub(qlen, r.err())?;
                let queue_id = q.u32()?;
                let qport = q.u32()?;
                q.skip(8)?;
                queues.push(PacketQueue {
                    queue_id,
                    port: qport,
                    properties: q.rest().to_vec(),
                });
            }
            Body::QueueGetConfigReply(QueueGetConfigReply { port, queues })
        }
        T::ROLE_REQUEST => Body::RoleRequest(parse_role(r)?),
        T::ROLE_REPLY => Body::RoleReply(parse_role(r)?),
        T::GET_ASYNC_REQUEST => Body::GetAsyncRequest,
        T::GET_ASYNC_REPLY => Body::GetAsyncReply(parse_async(r)?),
        T::SET_ASYNC => Body::SetAsync(parse_async(r)?),
        T::METER_MOD => Body::MeterMod(MeterMod::parse(r)?),
        _ => return Err(DecodeError::req(R::BadType, "unknown message type")),
    })
}

/// Parse every `struct ofp_bucket` left in `r`; a bucket whose length is
/// below 16, not a multiple of 8 or past `r` is `bad_len` (a GROUP_MOD says
/// `OFPGMFC_BAD_BUCKET`, a GROUP_DESC reply `OFPBRC_BAD_LEN`).
pub(crate) fn parse_buckets(
    r: &mut Reader<'_>,
    bad_len: DecodeError,
) -> Result<Vec<Bucket>, DecodeError> {
    let mut buckets = Vec::new();
    while !r.is_empty() {
        let blen = usize::from(r.peek_u16(0).map_err(|_| bad_len)?);
        if blen < 16 || blen % 8 != 0 || blen > r.remaining() {
            return Err(bad_len);
        }
        let mut b = r.sub(blen, bad_len)?;
        b.skip(2)?;
        let weight = b.u16()?;
        let watch_port = b.u32()?;
        let watch_group = b.u32()?;
        b.skip(4)?;
        buckets.push(Bucket {
            weight,
            watch_port,
            watch_group,
            actions: parse_actions(b.rest())?,
        });
    }
    Ok(buckets)
}

/// Append `buckets` as `struct ofp_bucket`s.
pub(crate) fn emit_buckets(buckets: &[Bucket], out: &mut Vec<u8>) -> Result<(), EncodeError> {
    for b in buckets {
        let start = out.len();
        out.put_u16(0);
        out.put_u16(b.weight);
        out.put_u32(b.watch_port);
        out.put_u32(b.watch_group);
        out.put_zeros(4);
        emit_actions(&b.actions, out)?;
        let blen = out.len() - start;
        if blen > usize::from(u16::MAX) {
            return Err(EncodeError::TooLong(blen));
        }
        out.patch_u16(start, blen as u16);
    }
    Ok(())
}

fn parse_hello(r: &mut Reader<'_>) -> Result<Hello, DecodeError> {
    let mut elements = Vec::new();
    while !r.is_empty() {
        let elem_type = r.u16()?;
        let len = usize::from(r.u16()?);
        if len < 4 || round8(len) - 4 > r.remaining() {
            return Err(DecodeError::bad_len("hello element length"));
        }
        let data = r.bytes(len - 4)?;
        r.skip(round8(len) - len)?;
        elements.push(if elem_type == OFPHET_VERSIONBITMAP {
            if data.len() % 4 != 0 {
                return Err(DecodeError::bad_len("version bitmap not whole words"));
            }
            HelloElement::VersionBitmap(
                data.chunks_exact(4)
                    .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
            )
        } else {
            HelloElement::Unknown {
                elem_type,
                data: data.to_vec(),
            }
        });
    }
    Ok(Hello { elements })
}

pub(crate) fn parse_experimenter(r: &mut Reader<'_>) -> Result<Experimenter, DecodeError> {
    Ok(Experimenter {
        experimenter: r.u32()?,
        exp_type: r.u32()?,
        data: r.rest().to_vec(),
    })
}

pub(crate) fn emit_experimenter(e: &Experimenter, out: &mut Vec<u8>) {
    out.put_u32(e.experimenter);
    out.put_u32(e.exp_type);
    out.extend_from_slice(&e.data);
}

fn parse_config(r: &mut Reader<'_>) -> Result<SwitchConfig, DecodeError> {
    Ok(SwitchConfig {
        flags: r.u16()?,
        miss_send_len: r.u16()?,
    })
}

fn parse_role(r: &mut Reader<'_>) -> Result<Role, DecodeError> {
    let role = r.u32()?;
    r.skip(4)?;
    Ok(Role {
        role,
        generation_id: r.u64()?,
    })
}

fn parse_async(r: &mut Reader<'_>) -> Result<AsyncConfig, DecodeError> {
    let mut a = AsyncConfig::default();
    for m in [
        &mut a.packet_in_mask,
        &mut a.port_status_mask,
        &mut a.flow_removed_mask,
    ] {
        m[0] = r.u32()?;
        m[1] = r.u32()?;
    }
    Ok(a)
}

/// Append `msg` to `out`, returning the number of bytes written. On error
/// `out` is left as it was.
pub fn encode(msg: &Message, out: &mut Vec<u8>) -> Result<usize, EncodeError> {
    let start = out.len();
    Header {
        version: msg.version,
        msg_type: msg.body.msg_type(),
        length: 0,
        xid: msg.xid,
    }
    .emit(out);
    if let Err(e) = encode_body(&msg.body, out) {
        out.truncate(start);
        return Err(e);
    }
    let len = out.len() - start;
    if len > usize::from(u16::MAX) {
        out.truncate(start);
        return Err(EncodeError::TooLong(len));
    }
    out.patch_u16(start + 2, len as u16);
    Ok(len)
}

/// Encode into a fresh buffer.
pub fn encode_to_vec(msg: &Message) -> Result<Vec<u8>, EncodeError> {
    let mut v = Vec::new();
    encode(msg, &mut v)?;
    Ok(v)
}

fn encode_body(body: &Body, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    match body {
        Body::Hello(h) => {
            for e in &h.elements {
                let start = out.len();
                let (ty, payload_len) = match e {
                    HelloElement::VersionBitmap(b) => (OFPHET_VERSIONBITMAP, 4 * b.len()),
                    HelloElement::Unknown { elem_type, data } => (*elem_type, data.len()),
                };
                if payload_len + 4 > usize::from(u16::MAX) {
                    return Err(EncodeError::TooLong(payload_len));
                }
                out.put_u16(ty);
                out.put_u16((payload_len + 4) as u16);
                match e {
                    HelloElement::VersionBitmap(b) => b.iter().for_each(|w| out.put_u32(*w)),
                    HelloElement::Unknown { data, .. } => out.extend_from_slice(data),
                }
                out.pad8_from(start);
            }
        }
        Body::Error(ErrorMsg::Standard { error, data }) => {
            let (t, c) = error.wire();
            if t == 0xffff {
                return Err(EncodeError::Invalid(
                    "standard error with experimenter type",
                ));
            }
            out.put_u16(t);
            out.put_u16(c);
            out.extend_from_slice(data);
        }
        Body::Error(ErrorMsg::Experimenter {
            exp_type,
            experimenter,
            data,
        }) => {
            out.put_u16(0xffff);
            out.put_u16(*exp_type);
            out.put_u32(*experimenter);
            out.extend_from_slice(data);
        }
        Body::EchoRequest(d) | Body::EchoReply(d) => out.extend_from_slice(d),
        Body::MeterMod(m) => m.emit(out),
        Body::Experimenter(e) => emit_experimenter(e, out),
        Body::FeaturesRequest
        | Body::GetConfigRequest
        | Body::BarrierRequest
        | Body::BarrierReply
        | Body::GetAsyncRequest => {}
        Body::FeaturesReply(f) => {
            out.put_u64(f.datapath_id);
            out.put_u32(f.n_buffers);
            out.put_u8(f.n_tables);
            out.put_u8(f.auxiliary_id);
            out.put_zeros(2);
            out.put_u32(f.capabilities);
            out.put_u32(f.reserved);
        }
        Body::GetConfigReply(c) | Body::SetConfig(c) => {
            out.put_u16(c.flags);
            out.put_u16(c.miss_send_len);
        }
        Body::PacketIn(p) => {
            out.put_u32(p.buffer_id);
            out.put_u16(p.total_len);
            out.put_u8(p.reason);
            out.put_u8(p.table_id);
            out.put_u64(p.cookie);
            p.matcher.emit(out);
            out.put_zeros(2);
            out.extend_from_slice(&p.data);
        }
        Body::FlowRemoved(f) => {
            out.put_u64(f.cookie);
            out.put_u16(f.priority);
            out.put_u8(f.reason);
            out.put_u8(f.table_id);
            out.put_u32(f.duration_sec);
            out.put_u32(f.duration_nsec);
            out.put_u16(f.idle_timeout);
            out.put_u16(f.hard_timeout);
            out.put_u64(f.packet_count);
            out.put_u64(f.byte_count);
            f.matcher.emit(out);
        }
        Body::PortStatus(p) => {
            out.put_u8(p.reason);
            out.put_zeros(7);
            p.desc.emit(out);
        }
        Body::PacketOut(p) => {
            out.put_u32(p.buffer_id);
            out.put_u32(p.in_port);
            let len_at = out.len();
            out.put_u16(0);
            out.put_zeros(6);
            let astart = out.len();
            emit_actions(&p.actions, out)?;
            let alen = out.len() - astart;
            if alen > usize::from(u16::MAX) {
                return Err(EncodeError::TooLong(alen));
            }
            out.patch_u16(len_at, alen as u16);
            out.extend_from_slice(&p.data);
        }
        Body::FlowMod(f) => {
            out.put_u64(f.cookie);
            out.put_u64(f.cookie_mask);
            out.put_u8(f.table_id);
            out.put_u8(f.command);
            out.put_u16(f.idle_timeout);
            out.put_u16(f.hard_timeout);
            out.put_u16(f.priority);
            out.put_u32(f.buffer_id);
            out.put_u32(f.out_port);
            out.put_u32(f.out_group);
            out.put_u16(f.flags);
            out.put_zeros(2);
            f.matcher.emit(out);
            emit_instructions(&f.instructions, out)?;
        }
        Body::GroupMod(g) => {
            out.put_u16(g.command);
            out.put_u8(g.group_type);
            out.put_zeros(1);
            out.put_u32(g.group_id);
            emit_buckets(&g.buckets, out)?;
        }
        Body::PortMod(p) => {
            out.put_u32(p.port_no);
            out.put_zeros(4);
            out.extend_from_slice(&p.hw_addr);
            out.put_zeros(2);
            out.put_u32(p.config);
            out.put_u32(p.mask);
            out.put_u32(p.advertise);
            out.put_zeros(4);
        }
        Body::TableMod(t) => {
            out.put_u8(t.table_id);
            out.put_zeros(3);
            out.put_u32(t.config);
        }
        Body::MultipartRequest(m) => m.emit(out)?,
        Body::MultipartReply(m) => m.emit(out)?,
        Body::QueueGetConfigRequest(port) => {
            out.put_u32(*port);
            out.put_zeros(4);
        }
        Body::QueueGetConfigReply(q) => {
            out.put_u32(q.port);
            out.put_zeros(4);
            for pq in &q.queues {
                let qlen = 16 + pq.properties.len();
                if qlen > usize::from(u16::MAX) {
                    return Err(EncodeError::TooLong(qlen));
                }
                out.put_u32(pq.queue_id);
                out.put_u32(pq.port);
                out.put_u16(qlen as u16);
                out.put_zeros(6);
                out.extend_from_slice(&pq.properties);
            }
        }
        Body::RoleRequest(r) | Body::RoleReply(r) => {
            out.put_u32(r.role);
            out.put_zeros(4);
            out.put_u64(r.generation_id);
        }
        Body::GetAsyncReply(a) | Body::SetAsync(a) => {
            for m in [a.packet_in_mask, a.port_status_mask, a.flow_removed_mask] {
                out.put_u32(m[0]);
                out.put_u32(m[1]);
            }
        }
    }
    Ok(())
}
