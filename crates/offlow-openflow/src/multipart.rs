//! `OFPT_MULTIPART_REQUEST` / `OFPT_MULTIPART_REPLY` bodies (OpenFlow 1.3.5
//! §7.3.5).
//!
//! Typed: DESC, FLOW, AGGREGATE, TABLE, PORT_STATS, QUEUE, TABLE_FEATURES
//! (properties kept as raw TLVs), PORT_DESC, EXPERIMENTER. Kept as raw bodies
//! ([`MultipartRequestBody::Raw`] / [`MultipartReplyBody::Raw`]): GROUP,
//! GROUP_DESC, GROUP_FEATURES, METER, METER_CONFIG, METER_FEATURES. Any other
//! type is `OFPBRC_BAD_MULTIPART`.
//!
//! Thread-safety: plain data.

use crate::action::{emit_instructions, parse_instructions};
use crate::error::{BadRequestCode, DecodeError, EncodeError, OfError, TableFeaturesFailedCode};
use crate::message::{emit_experimenter, parse_experimenter, Experimenter, FixedStr, Port};
use crate::oxm::OxmMatch;
use crate::reader::{round8, Put, Reader};
use crate::Instruction;

/// `enum ofp_multipart_type` wire values.
#[allow(missing_docs)]
pub mod mp_type {
    pub const DESC: u16 = 0;
    pub const FLOW: u16 = 1;
    pub const AGGREGATE: u16 = 2;
    pub const TABLE: u16 = 3;
    pub const PORT_STATS: u16 = 4;
    pub const QUEUE: u16 = 5;
    pub const GROUP: u16 = 6;
    pub const GROUP_DESC: u16 = 7;
    pub const GROUP_FEATURES: u16 = 8;
    pub const METER: u16 = 9;
    pub const METER_CONFIG: u16 = 10;
    pub const METER_FEATURES: u16 = 11;
    pub const TABLE_FEATURES: u16 = 12;
    pub const PORT_DESC: u16 = 13;
    pub const EXPERIMENTER: u16 = 0xffff;
}

/// Multipart types this codec keeps as raw bodies.
pub fn is_raw_type(t: u16) -> bool {
    (mp_type::GROUP..=mp_type::METER_FEATURES).contains(&t)
}

/// The body of a multipart type kept raw ([`is_raw_type`]); any other type
/// we do not know is refused with `OFPBRC_BAD_MULTIPART`.
fn raw_body(t: u16, r: &mut Reader<'_>) -> Result<Vec<u8>, DecodeError> {
    if is_raw_type(t) {
        Ok(r.rest().to_vec())
    } else {
        Err(DecodeError::req(
            BadRequestCode::BadMultipart,
            "unknown multipart type",
        ))
    }
}

/// `OFPMPF_REQ_MORE` / `OFPMPF_REPLY_MORE`.
pub const OFPMPF_MORE: u16 = 1;

/// `struct ofp_flow_stats_request` / `ofp_aggregate_stats_request`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FlowStatsRequest {
    /// Table or `OFPTT_ALL`.
    pub table_id: u8,
    /// Output port filter (`OFPP_ANY` = none).
    pub out_port: u32,
    /// Output group filter (`OFPG_ANY` = none).
    pub out_group: u32,
    /// Cookie filter value.
    pub cookie: u64,
    /// Cookie filter mask.
    pub cookie_mask: u64,
    /// Match filter.
    pub matcher: OxmMatch,
}

impl FlowStatsRequest {
    fn parse(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let table_id = r.u8()?;
        r.skip(3)?;
        let out_port = r.u32()?;
        let out_group = r.u32()?;
        r.skip(4)?;
        Ok(FlowStatsRequest {
            table_id,
            out_port,
            out_group,
            cookie: r.u64()?,
            cookie_mask: r.u64()?,
            matcher: OxmMatch::parse(r)?,
        })
    }

    fn emit(&self, out: &mut Vec<u8>) {
        out.put_u8(self.table_id);
        out.put_zeros(3);
        out.put_u32(self.out_port);
        out.put_u32(self.out_group);
        out.put_zeros(4);
        out.put_u64(self.cookie);
        out.put_u64(self.cookie_mask);
        self.matcher.emit(out);
    }
}

/// `struct ofp_table_feature_prop_header` with its payload kept raw.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TableFeatureProp {
    /// `OFPTFPT_*`.
    pub prop_type: u16,
    /// Payload after the 4-byte header, without padding.
    pub data: Vec<u8>,
}

/// `struct ofp_table_features`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TableFeatures {
    /// Table.
    pub table_id: u8,
    /// Name.
    pub name: FixedStr<32>,
    /// Metadata bits the table can match.
    pub metadata_match: u64,
    /// Metadata bits the table can write.
    pub metadata_write: u64,
    /// `OFPTC_*` bits.
    pub config: u32,
    /// Maximum number of entries.
    pub max_entries: u32,
    /// Properties in wire order.
    pub properties: Vec<TableFeatureProp>,
}

impl TableFeatures {
    fn parse_list(r: &mut Reader<'_>) -> Result<Vec<TableFeatures>, DecodeError> {
        let mut out = Vec::new();
        while !r.is_empty() {
            let len = usize::from(r.peek_u16(0)?);
            if len < 64 || len % 8 != 0 || len > r.remaining() {
                return Err(DecodeError::bad_len("table features length"));
            }
            let mut t = r.sub(len, r.err())?;
            t.skip(2)?;
            let table_id = t.u8()?;
            t.skip(5)?;
            let name = FixedStr(t.array()?);
            let metadata_match = t.u64()?;
            let metadata_write = t.u64()?;
            let config = t.u32()?;
            let max_entries = t.u32()?;
            let bad_prop = DecodeError::Invalid {
                error: OfError::TableFeaturesFailed(TableFeaturesFailedCode::BadLen),
                reason: "table feature property length",
            };
            let mut properties = Vec::new();
            while !t.is_empty() {
                let prop_type = t.u16().map_err(|_| bad_prop)?;
                let plen = usize::from(t.u16().map_err(|_| bad_prop)?);
                if plen < 4 || round8(plen) - 4 > t.remaining() {
                    return Err(bad_prop);
                }
                let data = t.bytes(plen - 4)?.to_vec();
                t.skip(round8(plen) - plen)?;
                properties.push(TableFeatureProp { prop_type, data });
            }
            out.push(TableFeatures {
                table_id,
                name,
                metadata_match,
                metadata_write,
                config,
                max_entries,
                properties,
            });
        }
        Ok(out)
    }

    fn emit_list(list: &[TableFeatures], out: &mut Vec<u8>) -> Result<(), EncodeError> {
        for t in list {
            let start = out.len();
            out.put_u16(0);
            out.put_u8(t.table_id);
            out.put_zeros(5);
            out.extend_from_slice(&t.name.0);
            out.put_u64(t.metadata_match);
            out.put_u64(t.metadata_write);
            out.put_u32(t.config);
            out.put_u32(t.max_entries);
            for p in &t.properties {
                let pstart = out.len();
                let plen = 4 + p.data.len();
                if plen > usize::from(u16::MAX) {
                    return Err(EncodeError::TooLong(plen));
                }
                out.put_u16(p.prop_type);
                out.put_u16(plen as u16);
                out.extend_from_slice(&p.data);
                out.pad8_from(pstart);
            }
            let len = out.len() - start;
            if len > usize::from(u16::MAX) {
                return Err(EncodeError::TooLong(len));
            }
            out.patch_u16(start, len as u16);
        }
        Ok(())
    }
}

/// A multipart request body.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum MultipartRequestBody {
    /// `OFPMP_DESC`.
    Desc,
    /// `OFPMP_FLOW`.
    Flow(FlowStatsRequest),
    /// `OFPMP_AGGREGATE`.
    Aggregate(FlowStatsRequest),
    /// `OFPMP_TABLE`.
    Table,
    /// `OFPMP_PORT_STATS` for a port (or `OFPP_ANY`).
    PortStats(u32),
    /// `OFPMP_QUEUE`.
    Queue {
        /// Port or `OFPP_ANY`.
        port_no: u32,
        /// Queue or `OFPQ_ALL`.
        queue_id: u32,
    },
    /// `OFPMP_TABLE_FEATURES` (empty = query; else set).
    TableFeatures(Vec<TableFeatures>),
    /// `OFPMP_PORT_DESC`.
    PortDesc,
    /// `OFPMP_EXPERIMENTER`.
    Experimenter(Experimenter),
    /// A group or meter multipart (types 6..=11), body raw.
    Raw {
        /// Multipart type (6..=11).
        mp_type: u16,
        /// Body bytes.
        body: Vec<u8>,
    },
}

/// `OFPT_MULTIPART_REQUEST` body.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MultipartRequest {
    /// `OFPMPF_REQ_*` flags.
    pub flags: u16,
    /// Typed body.
    pub body: MultipartRequestBody,
}

impl MultipartRequest {
    pub(crate) fn parse(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        use mp_type as T;
        use MultipartRequestBody as B;
        let ty = r.u16()?;
        let flags = r.u16()?;
        r.skip(4)?;
        let body = match ty {
            T::DESC => B::Desc,
            T::FLOW => B::Flow(FlowStatsRequest::parse(r)?),
            T::AGGREGATE => B::Aggregate(FlowStatsRequest::parse(r)?),
            T::TABLE => B::Table,
            T::PORT_STATS => {
                let p = r.u32()?;
                r.skip(4)?;
                B::PortStats(p)
            }
            T::QUEUE => B::Queue {
                port_no: r.u32()?,
                queue_id: r.u32()?,
            },
            T::TABLE_FEATURES => B::TableFeatures(TableFeatures::parse_list(r)?),
            T::PORT_DESC => B::PortDesc,
            T::EXPERIMENTER => B::Experimenter(parse_experimenter(r)?),
            t => B::Raw {
                mp_type: t,
                body: raw_body(t, r)?,
            },
        };
        Ok(MultipartRequest { flags, body })
    }

    pub(crate) fn emit(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        use mp_type as T;
        use MultipartRequestBody as B;
        let ty = match &self.body {
            B::Desc => T::DESC,
            B::Flow(_) => T::FLOW,
            B::Aggregate(_) => T::AGGREGATE,
            B::Table => T::TABLE,
            B::PortStats(_) => T::PORT_STATS,
            B::Queue { .. } => T::QUEUE,
            B::TableFeatures(_) => T::TABLE_FEATURES,
            B::PortDesc => T::PORT_DESC,
            B::Experimenter(_) => T::EXPERIMENTER,
            B::Raw { mp_type, .. } => {
                if !is_raw_type(*mp_type) {
                    return Err(EncodeError::Invalid("raw multipart of a typed kind"));
                }
                *mp_type
            }
        };
        out.put_u16(ty);
        out.put_u16(self.flags);
        out.put_zeros(4);
        match &self.body {
            B::Desc | B::Table | B::PortDesc => {}
            B::Flow(f) | B::Aggregate(f) => f.emit(out),
            B::PortStats(p) => {
                out.put_u32(*p);
                out.put_zeros(4);
            }
            B::Queue { port_no, queue_id } => {
                out.put_u32(*port_no);
                out.put_u32(*queue_id);
            }
            B::TableFeatures(t) => TableFeatures::emit_list(t, out)?,
            B::Experimenter(e) => emit_experimenter(e, out),
            B::Raw { body, .. } => out.extend_from_slice(body),
        }
        Ok(())
    }
}

/// `struct ofp_desc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Desc {
    /// Manufacturer.
    pub mfr_desc: FixedStr<256>,
    /// Hardware.
    pub hw_desc: FixedStr<256>,
    /// Software.
    pub sw_desc: FixedStr<256>,
    /// Serial number.
    pub serial_num: FixedStr<32>,
    /// Datapath description.
    pub dp_desc: FixedStr<256>,
}

/// `struct ofp_flow_stats`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FlowStats {
    /// Table.
    pub table_id: u8,
    /// Age, seconds.
    pub duration_sec: u32,
    /// Age, nanoseconds beyond `duration_sec`.
    pub duration_nsec: u32,
    /// Priority.
    pub priority: u16,
    /// Idle timeout.
    pub idle_timeout: u16,
    /// Hard timeout.
    pub hard_timeout: u16,
    /// `OFPFF_*`.
    pub flags: u16,
    /// Cookie.
    pub cookie: u64,
    /// Packets.
    pub packet_count: u64,
    /// Bytes.
    pub byte_count: u64,
    /// Match.
    pub matcher: OxmMatch,
    /// Instructions.
    pub instructions: Vec<Instruction>,
}

/// `struct ofp_table_stats`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TableStats {
    /// Table.
    pub table_id: u8,
    /// Active entries.
    pub active_count: u32,
    /// Packets looked up.
    pub lookup_count: u64,
    /// Packets that hit.
    pub matched_count: u64,
}

/// `struct ofp_port_stats`.
#[allow(missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PortStats {
    pub port_no: u32,
    pub rx_packets: u64,
    pub tx_packets: u64,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    pub rx_dropped: u64,
    pub tx_dropped: u64,
    pub rx_errors: u64,
    pub tx_errors: u64,
    pub rx_frame_err: u64,
    pub rx_over_err: u64,
    pub rx_crc_err: u64,
    pub collisions: u64,
    pub duration_sec: u32,
    pub duration_nsec: u32,
}

/// `struct ofp_queue_stats`.
#[allow(missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct QueueStats {
    pub port_no: u32,
    pub queue_id: u32,
    pub tx_bytes: u64,
    pub tx_packets: u64,
    pub tx_errors: u64,
    pub duration_sec: u32,
    pub duration_nsec: u32,
}

/// A multipart reply body.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum MultipartReplyBody {
    /// `OFPMP_DESC`.
    Desc(Box<Desc>),
    /// `OFPMP_FLOW`.
    Flow(Vec<FlowStats>),
    /// `OFPMP_AGGREGATE`.
    Aggregate {
        /// Packets.
        packet_count: u64,
        /// Bytes.
        byte_count: u64,
        /// Flows.
        flow_count: u32,
    },
    /// `OFPMP_TABLE`.
    Table(Vec<TableStats>),
    /// `OFPMP_PORT_STATS`.
    PortStats(Vec<PortStats>),
    /// `OFPMP_QUEUE`.
    Queue(Vec<QueueStats>),
    /// `OFPMP_TABLE_FEATURES`.
    TableFeatures(Vec<TableFeatures>),
    /// `OFPMP_PORT_DESC`.
    PortDesc(Vec<Port>),
    /// `OFPMP_EXPERIMENTER`.
    Experimenter(Experimenter),
    /// A group or meter multipart (types 6..=11), body raw.
    Raw {
        /// Multipart type (6..=11).
        mp_type: u16,
        /// Body bytes.
        body: Vec<u8>,
    },
}

/// `OFPT_MULTIPART_REPLY` body.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MultipartReply {
    /// `OFPMPF_REPLY_*` flags.
    pub flags: u16,
    /// Typed body.
    pub body: MultipartReplyBody,
}

/// Parse `r` as whole records of `size` bytes each.
fn fixed_records<T>(
    r: &mut Reader<'_>,
    size: usize,
    mut f: impl FnMut(&mut Reader<'_>) -> Result<T, DecodeError>,
) -> Result<Vec<T>, DecodeError> {
    if r.remaining() % size != 0 {
        return Err(DecodeError::bad_len("multipart records not whole"));
    }
    let mut out = Vec::with_capacity(r.remaining() / size);
    while !r.is_empty() {
        let mut rec = r.sub(size, r.err())?;
        out.push(f(&mut rec)?);
    }
    Ok(out)
}

impl MultipartReply {
    pub(crate) fn parse(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        use mp_type as T;
        use MultipartReplyBody as B;
        let ty = r.u16()?;
        let flags = r.u16()?;
        r.skip(4)?;
        let body = match ty {
            T::DESC => B::Desc(Box::new(Desc {
                mfr_desc: FixedStr(r.array()?),
                hw_desc: FixedStr(r.array()?),
                sw_desc: FixedStr(r.array()?),
                serial_num: FixedStr(r.array()?),
                dp_desc: FixedStr(r.array()?),
            })),
            T::FLOW => {
                let mut v = Vec::new();
                while !r.is_empty() {
                    let len = usize::from(r.peek_u16(0)?);
                    if len < 56 || len % 8 != 0 || len > r.remaining() {
                        return Err(DecodeError::bad_len("flow stats length"));
                    }
                    let mut f = r.sub(len, r.err())?;
                    f.skip(2)?;
                    let table_id = f.u8()?;
                    f.skip(1)?;
                    let duration_sec = f.u32()?;
                    let duration_nsec = f.u32()?;
                    let priority = f.u16()?;
                    let idle_timeout = f.u16()?;
                    let hard_timeout = f.u16()?;
                    let flags = f.u16()?;
                    f.skip(4)?;
                    let cookie = f.u64()?;
                    let packet_count = f.u64()?;
                    let byte_count = f.u64()?;
                    let matcher = OxmMatch::parse(&mut f)?;
                    v.push(FlowStats {
                        table_id,
                        duration_sec,
                        duration_nsec,
                        priority,
                        idle_timeout,
                        hard_timeout,
                        flags,
                        cookie,
                        packet_count,
                        byte_count,
                        matcher,
                        instructions: parse_instructions(f.rest())?,
                    });
                }
                B::Flow(v)
            }
            T::AGGREGATE => {
                let a = B::Aggregate {
                    packet_count: r.u64()?,
                    byte_count: r.u64()?,
                    flow_count: r.u32()?,
                };
                r.skip(4)?;
                a
            }
            T::TABLE => B::Table(fixed_records(r, 24, |t| {
                let table_id = t.u8()?;
                t.skip(3)?;
                Ok(TableStats {
                    table_id,
                    active_count: t.u32()?,
                    lookup_count: t.u64()?,
                    matched_count: t.u64()?,
                })
            })?),
            T::PORT_STATS => B::PortStats(fixed_records(r, 112, |p| {
                let port_no = p.u32()?;
                p.skip(4)?;
                Ok(PortStats {
                    port_no,
                    rx_packets: p.u64()?,
                    tx_packets: p.u64()?,
                    rx_bytes: p.u64()?,
                    tx_bytes: p.u64()?,
                    rx_dropped: p.u64()?,
                    tx_dropped: p.u64()?,
                    rx_errors: p.u64()?,
                    tx_errors: p.u64()?,
                    rx_frame_err: p.u64()?,
                    rx_over_err: p.u64()?,
                    rx_crc_err: p.u64()?,
                    collisions: p.u64()?,
                    duration_sec: p.u32()?,
                    duration_nsec: p.u32()?,
                })
            })?),
            T::QUEUE => B::Queue(fixed_records(r, 40, |q| {
                Ok(QueueStats {
                    port_no: q.u32()?,
                    queue_id: q.u32()?,
                    tx_bytes: q.u64()?,
                    tx_packets: q.u64()?,
                    tx_errors: q.u64()?,
                    duration_sec: q.u32()?,
                    duration_nsec: q.u32()?,
                })
            })?),
            T::TABLE_FEATURES => B::TableFeatures(TableFeatures::parse_list(r)?),
            T::PORT_DESC => B::PortDesc(fixed_records(r, Port::LEN, Port::parse)?),
            T::EXPERIMENTER => B::Experimenter(parse_experimenter(r)?),
            t => B::Raw {
                mp_type: t,
                body: raw_body(t, r)?,
            },
        };
        Ok(MultipartReply { flags, body })
    }

    pub(crate) fn emit(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        use mp_type as T;
        use MultipartReplyBody as B;
        let ty = match &self.body {
            B::Desc(_) => T::DESC,
            B::Flow(_) => T::FLOW,
            B::Aggregate { .. } => T::AGGREGATE,
            B::Table(_) => T::TABLE,
            B::PortStats(_) => T::PORT_STATS,
            B::Queue(_) => T::QUEUE,
            B::TableFeatures(_) => T::TABLE_FEATURES,
            B::PortDesc(_) => T::PORT_DESC,
            B::Experimenter(_) => T::EXPERIMENTER,
            B::Raw { mp_type, .. } => {
                if !is_raw_type(*mp_type) {
                    return Err(EncodeError::Invalid("raw multipart of a typed kind"));
                }
                *mp_type
            }
        };
        out.put_u16(ty);
        out.put_u16(self.flags);
        out.put_zeros(4);
        match &self.body {
            B::Desc(d) => {
                out.extend_from_slice(&d.mfr_desc.0);
                out.extend_from_slice(&d.hw_desc.0);
                out.extend_from_slice(&d.sw_desc.0);
                out.extend_from_slice(&d.serial_num.0);
                out.extend_from_slice(&d.dp_desc.0);
            }
            B::Flow(v) => {
                for f in v {
                    let start = out.len();
                    out.put_u16(0);
                    out.put_u8(f.table_id);
                    out.put_zeros(1);
                    out.put_u32(f.duration_sec);
                    out.put_u32(f.duration_nsec);
                    out.put_u16(f.priority);
                    out.put_u16(f.idle_timeout);
                    out.put_u16(f.hard_timeout);
                    out.put_u16(f.flags);
                    out.put_zeros(4);
                    out.put_u64(f.cookie);
                    out.put_u64(f.packet_count);
                    out.put_u64(f.byte_count);
                    f.matcher.emit(out);
                    emit_instructions(&f.instructions, out)?;
                    let len = out.len() - start;
                    if len > usize::from(u16::MAX) {
                        return Err(EncodeError::TooLong(len));
                    }
                    out.patch_u16(start, len as u16);
                }
            }
            B::Aggregate {
                packet_count,
                byte_count,
                flow_count,
            } => {
                out.put_u64(*packet_count);
                out.put_u64(*byte_count);
                out.put_u32(*flow_count);
                out.put_zeros(4);
            }
            B::Table(v) => {
                for t in v {
                    out.put_u8(t.table_id);
                    out.put_zeros(3);
                    out.put_u32(t.active_count);
                    out.put_u64(t.lookup_count);
                    out.put_u64(t.matched_count);
                }
            }
            B::PortStats(v) => {
                for p in v {
                    out.put_u32(p.port_no);
                    out.put_zeros(4);
                    for c in [
                        p.rx_packets,
                        p.tx_packets,
                        p.rx_bytes,
                        p.tx_bytes,
                        p.rx_dropped,
                        p.tx_dropped,
                        p.rx_errors,
                        p.tx_errors,
                        p.rx_frame_err,
                        p.rx_over_err,
                        p.rx_crc_err,
                        p.collisions,
                    ] {
                        out.put_u64(c);
                    }
                    out.put_u32(p.duration_sec);
                    out.put_u32(p.duration_nsec);
                }
            }
            B::Queue(v) => {
                for q in v {
                    out.put_u32(q.port_no);
                    out.put_u32(q.queue_id);
                    out.put_u64(q.tx_bytes);
                    out.put_u64(q.tx_packets);
                    out.put_u64(q.tx_errors);
                    out.put_u32(q.duration_sec);
                    out.put_u32(q.duration_nsec);
                }
            }
            B::TableFeatures(t) => TableFeatures::emit_list(t, out)?,
            B::PortDesc(v) => v.iter().for_each(|p| p.emit(out)),
            B::Experimenter(e) => emit_experimenter(e, out),
            B::Raw { body, .. } => out.extend_from_slice(body),
        }
        Ok(())
    }
}
