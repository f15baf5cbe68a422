//! `OFPT_MULTIPART_REQUEST` / `OFPT_MULTIPART_REPLY` bodies (OpenFlow 1.3.5
//! §7.3.5).
//!
//! Typed: DESC, FLOW, AGGREGATE, TABLE, PORT_STATS, QUEUE, GROUP,
//! GROUP_DESC, GROUP_FEATURES, METER, METER_CONFIG, METER_FEATURES,
//! TABLE_FEATURES (properties kept as raw TLVs), PORT_DESC, EXPERIMENTER.
//! Any other type is `OFPBRC_BAD_MULTIPART`.
//!
//! Malformed bodies: a record whose length field is too short, not of its
//! kind's granularity (8 bytes, or 16 for the counter arrays of GROUP and
//! METER replies) or past the body, and a body that is not whole records,
//! are `OFPBRC_BAD_LEN`. Meter bands inside a METER_CONFIG reply follow
//! [`crate::meter`] (an unknown band type is `OFPMMFC_BAD_BAND`).
//!
//! Thread-safety: plain data.

use crate::action::{emit_instructions, parse_instructions};
use crate::error::{BadRequestCode, DecodeError, EncodeError, OfError, TableFeaturesFailedCode};
use crate::message::{
    emit_buckets, emit_experimenter, parse_buckets, parse_experimenter, Bucket, Experimenter,
    FixedStr, Port,
};
use crate::meter::{emit_bands, parse_bands, MeterBand};
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

/// A multipart type this codec does not know (§7.3.5).
const UNKNOWN_TYPE: DecodeError =
    DecodeError::req(BadRequestCode::BadMultipart, "unknown multipart type");

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
    /// `OFPMP_GROUP` for a group (or `OFPG_ALL`).
    GroupStats(u32),
    /// `OFPMP_GROUP_DESC`.
    GroupDesc,
    /// `OFPMP_GROUP_FEATURES`.
    GroupFeatures,
    /// `OFPMP_METER` for a meter (or `OFPM_ALL`).
    MeterStats(u32),
    /// `OFPMP_METER_CONFIG` for a meter (or `OFPM_ALL`).
    MeterConfig(u32),
    /// `OFPMP_METER_FEATURES`.
    MeterFeatures,
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
            // `struct ofp_group_stats_request` / `ofp_meter_multipart_request`:
            // an id and 4 bytes of padding.
            T::GROUP => B::GroupStats(id_and_pad(r)?),
            T::GROUP_DESC => B::GroupDesc,
            T::GROUP_FEATURES => B::GroupFeatures,
            T::METER => B::MeterStats(id_and_pad(r)?),
            T::METER_CONFIG => B::MeterConfig(id_and_pad(r)?),
            T::METER_FEATURES => B::MeterFeatures,
            _ => return Err(UNKNOWN_TYPE),
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
            B::GroupStats(_) => T::GROUP,
            B::GroupDesc => T::GROUP_DESC,
            B::GroupFeatures => T::GROUP_FEATURES,
            B::MeterStats(_) => T::METER,
            B::MeterConfig(_) => T::METER_CONFIG,
            B::MeterFeatures => T::METER_FEATURES,
        };
        out.put_u16(ty);
        out.put_u16(self.flags);
        out.put_zeros(4);
        match &self.body {
            B::Desc
            | B::Table
            | B::PortDesc
            | B::GroupDesc
            | B::GroupFeatures
            | B::MeterFeatures => {}
            B::GroupStats(id) | B::MeterStats(id) | B::MeterConfig(id) => {
                out.put_u32(*id);
                out.put_zeros(4);
            }
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
        }
        Ok(())
    }
}

/// A u32 id followed by 4 bytes of padding.
fn id_and_pad(r: &mut Reader<'_>) -> Result<u32, DecodeError> {
    let id = r.u32()?;
    r.skip(4)?;
    Ok(id)
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
    /// `OFPMP_GROUP`.
    GroupStats(Vec<GroupStats>),
    /// `OFPMP_GROUP_DESC`.
    GroupDesc(Vec<GroupDesc>),
    /// `OFPMP_GROUP_FEATURES`.
    GroupFeatures(GroupFeatures),
    /// `OFPMP_METER`.
    MeterStats(Vec<MeterStats>),
    /// `OFPMP_METER_CONFIG`.
    MeterConfig(Vec<MeterConfig>),
    /// `OFPMP_METER_FEATURES`.
    MeterFeatures(MeterFeatures),
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
            T::GROUP => B::GroupStats(GroupStats::parse_list(r)?),
            T::GROUP_DESC => B::GroupDesc(GroupDesc::parse_list(r)?),
            T::GROUP_FEATURES => B::GroupFeatures(GroupFeatures::parse(r)?),
            T::METER => B::MeterStats(MeterStats::parse_list(r)?),
            T::METER_CONFIG => B::MeterConfig(MeterConfig::parse_list(r)?),
            T::METER_FEATURES => B::MeterFeatures(MeterFeatures::parse(r)?),
            _ => return Err(UNKNOWN_TYPE),
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
            B::GroupStats(_) => T::GROUP,
            B::GroupDesc(_) => T::GROUP_DESC,
            B::GroupFeatures(_) => T::GROUP_FEATURES,
            B::MeterStats(_) => T::METER,
            B::MeterConfig(_) => T::METER_CONFIG,
            B::MeterFeatures(_) => T::METER_FEATURES,
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
            B::GroupStats(v) => GroupStats::emit_list(v, out)?,
            B::GroupDesc(v) => GroupDesc::emit_list(v, out)?,
            B::GroupFeatures(f) => f.emit(out),
            B::MeterStats(v) => MeterStats::emit_list(v, out)?,
            B::MeterConfig(v) => MeterConfig::emit_list(v, out)?,
            B::MeterFeatures(f) => f.emit(out),
        }
        Ok(())
    }
}

/// Write the record length `out.len() - start` at `start + at`.
fn patch_len(out: &mut Vec<u8>, start: usize, at: usize) -> Result<(), EncodeError> {
    let len = out.len() - start;
    if len > usize::from(u16::MAX) {
        return Err(EncodeError::TooLong(len));
    }
    out.patch_u16(start + at, len as u16);
    Ok(())
}

/// Split off the next record of `r` whose u16 length field sits `at` bytes
/// in: at least `min` bytes, `min` plus a whole number of `unit`s, and
/// within `r`; else `OFPBRC_BAD_LEN`.
fn record<'a>(
    r: &mut Reader<'a>,
    at: usize,
    min: usize,
    unit: usize,
    what: &'static str,
) -> Result<Reader<'a>, DecodeError> {
    let bad = DecodeError::bad_len(what);
    let len = usize::from(r.peek_u16(at).map_err(|_| bad)?);
    if len < min || (len - min) % unit != 0 || len > r.remaining() {
        return Err(bad);
    }
    r.sub(len, bad)
}

/// `struct ofp_bucket_counter`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct BucketCounter {
    /// Packets processed by the bucket.
    pub packet_count: u64,
    /// Bytes processed by the bucket.
    pub byte_count: u64,
}

/// `struct ofp_group_stats` (40 bytes plus 16 per bucket).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct GroupStats {
    /// Group id.
    pub group_id: u32,
    /// Flows or groups forwarding to this group.
    pub ref_count: u32,
    /// Packets processed by the group.
    pub packet_count: u64,
    /// Bytes processed by the group.
    pub byte_count: u64,
    /// Age, seconds.
    pub duration_sec: u32,
    /// Age, nanoseconds beyond `duration_sec`.
    pub duration_nsec: u32,
    /// One counter per bucket, in bucket order.
    pub bucket_stats: Vec<BucketCounter>,
}

impl GroupStats {
    /// Wire size of the fixed part.
    const LEN: usize = 40;

    fn parse_list(r: &mut Reader<'_>) -> Result<Vec<GroupStats>, DecodeError> {
        let mut out = Vec::new();
        while !r.is_empty() {
            let mut g = record(r, 0, Self::LEN, 16, "group stats length")?;
            g.skip(4)?;
            let group_id = g.u32()?;
            let ref_count = g.u32()?;
            g.skip(4)?;
            let packet_count = g.u64()?;
            let byte_count = g.u64()?;
            let duration_sec = g.u32()?;
            let duration_nsec = g.u32()?;
            let mut bucket_stats = Vec::with_capacity(g.remaining() / 16);
            while !g.is_empty() {
                bucket_stats.push(BucketCounter {
                    packet_count: g.u64()?,
                    byte_count: g.u64()?,
                });
            }
            out.push(GroupStats {
                group_id,
                ref_count,
                packet_count,
                byte_count,
                duration_sec,
                duration_nsec,
                bucket_stats,
            });
        }
        Ok(out)
    }

    fn emit_list(list: &[GroupStats], out: &mut Vec<u8>) -> Result<(), EncodeError> {
        for g in list {
            let start = out.len();
            out.put_u16(0);
            out.put_zeros(2);
            out.put_u32(g.group_id);
            out.put_u32(g.ref_count);
            out.put_zeros(4);
            out.put_u64(g.packet_count);
            out.put_u64(g.byte_count);
            out.put_u32(g.duration_sec);
            out.put_u32(g.duration_nsec);
            for b in &g.bucket_stats {
                out.put_u64(b.packet_count);
                out.put_u64(b.byte_count);
            }
            patch_len(out, start, 0)?;
        }
        Ok(())
    }
}

/// `struct ofp_group_desc` (8 bytes plus the buckets).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GroupDesc {
    /// `OFPGT_*`.
    pub group_type: u8,
    /// Group id.
    pub group_id: u32,
    /// Buckets, in order.
    pub buckets: Vec<Bucket>,
}

impl GroupDesc {
    fn parse_list(r: &mut Reader<'_>) -> Result<Vec<GroupDesc>, DecodeError> {
        let mut out = Vec::new();
        while !r.is_empty() {
            let mut g = record(r, 0, 8, 8, "group desc length")?;
            g.skip(2)?;
            let group_type = g.u8()?;
            g.skip(1)?;
            let group_id = g.u32()?;
            let buckets = parse_buckets(&mut g, DecodeError::bad_len("bucket length"))?;
            out.push(GroupDesc {
                group_type,
                group_id,
                buckets,
            });
        }
        Ok(out)
    }

    fn emit_list(list: &[GroupDesc], out: &mut Vec<u8>) -> Result<(), EncodeError> {
        for g in list {
            let start = out.len();
            out.put_u16(0);
            out.put_u8(g.group_type);
            out.put_zeros(1);
            out.put_u32(g.group_id);
            emit_buckets(&g.buckets, out)?;
            patch_len(out, start, 0)?;
        }
        Ok(())
    }
}

/// `struct ofp_group_features`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct GroupFeatures {
    /// Bitmap of `OFPGT_*` values supported.
    pub types: u32,
    /// Bitmap of `OFPGFC_*` capabilities.
    pub capabilities: u32,
    /// Maximum number of groups, per type (index = `OFPGT_*`).
    pub max_groups: [u32; 4],
    /// Bitmaps of `OFPAT_*` supported, per type.
    pub actions: [u32; 4],
}

impl GroupFeatures {
    fn parse(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let types = r.u32()?;
        let capabilities = r.u32()?;
        let mut max_groups = [0; 4];
        for m in &mut max_groups {
            *m = r.u32()?;
        }
        let mut actions = [0; 4];
        for a in &mut actions {
            *a = r.u32()?;
        }
        Ok(GroupFeatures {
            types,
            capabilities,
            max_groups,
            actions,
        })
    }

    fn emit(&self, out: &mut Vec<u8>) {
        out.put_u32(self.types);
        out.put_u32(self.capabilities);
        self.max_groups.iter().for_each(|m| out.put_u32(*m));
        self.actions.iter().for_each(|a| out.put_u32(*a));
    }
}

/// `struct ofp_meter_band_stats`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MeterBandStats {
    /// Packets in the band.
    pub packet_band_count: u64,
    /// Bytes in the band.
    pub byte_band_count: u64,
}

/// `struct ofp_meter_stats` (40 bytes plus 16 per band).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct MeterStats {
    /// Meter id.
    pub meter_id: u32,
    /// Flows bound to the meter.
    pub flow_count: u32,
    /// Packets in input.
    pub packet_in_count: u64,
    /// Bytes in input.
    pub byte_in_count: u64,
    /// Age, seconds.
    pub duration_sec: u32,
    /// Age, nanoseconds beyond `duration_sec`.
    pub duration_nsec: u32,
    /// One entry per band, in band order.
    pub band_stats: Vec<MeterBandStats>,
}

impl MeterStats {
    /// Wire size of the fixed part.
    const LEN: usize = 40;

    fn parse_list(r: &mut Reader<'_>) -> Result<Vec<MeterStats>, DecodeError> {
        let mut out = Vec::new();
        while !r.is_empty() {
            // The length field follows the 4-byte meter id.
            let mut m = record(r, 4, Self::LEN, 16, "meter stats length")?;
            let meter_id = m.u32()?;
            m.skip(8)?;
            let flow_count = m.u32()?;
            let packet_in_count = m.u64()?;
            let byte_in_count = m.u64()?;
            let duration_sec = m.u32()?;
            let duration_nsec = m.u32()?;
            let mut band_stats = Vec::with_capacity(m.remaining() / 16);
            while !m.is_empty() {
                band_stats.push(MeterBandStats {
                    packet_band_count: m.u64()?,
                    byte_band_count: m.u64()?,
                });
            }
            out.push(MeterStats {
                meter_id,
                flow_count,
                packet_in_count,
                byte_in_count,
                duration_sec,
                duration_nsec,
                band_stats,
            });
        }
        Ok(out)
    }

    fn emit_list(list: &[MeterStats], out: &mut Vec<u8>) -> Result<(), EncodeError> {
        for m in list {
            let start = out.len();
            out.put_u32(m.meter_id);
            out.put_u16(0);
            out.put_zeros(6);
            out.put_u32(m.flow_count);
            out.put_u64(m.packet_in_count);
            out.put_u64(m.byte_in_count);
            out.put_u32(m.duration_sec);
            out.put_u32(m.duration_nsec);
            for b in &m.band_stats {
                out.put_u64(b.packet_band_count);
                out.put_u64(b.byte_band_count);
            }
            patch_len(out, start, 4)?;
        }
        Ok(())
    }
}

/// `struct ofp_meter_config` (8 bytes plus the bands).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MeterConfig {
    /// `OFPMF_*` bits.
    pub flags: u16,
    /// Meter id.
    pub meter_id: u32,
    /// Bands, in order.
    pub bands: Vec<MeterBand>,
}

impl MeterConfig {
    fn parse_list(r: &mut Reader<'_>) -> Result<Vec<MeterConfig>, DecodeError> {
        let mut out = Vec::new();
        while !r.is_empty() {
            let mut m = record(r, 0, 8, 8, "meter config length")?;
            m.skip(2)?;
            let flags = m.u16()?;
            let meter_id = m.u32()?;
            out.push(MeterConfig {
                flags,
                meter_id,
                bands: parse_bands(&mut m)?,
            });
        }
        Ok(out)
    }

    fn emit_list(list: &[MeterConfig], out: &mut Vec<u8>) -> Result<(), EncodeError> {
        for m in list {
            let start = out.len();
            out.put_u16(0);
            out.put_u16(m.flags);
            out.put_u32(m.meter_id);
            emit_bands(&m.bands, out);
            patch_len(out, start, 0)?;
        }
        Ok(())
    }
}

/// `struct ofp_meter_features`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MeterFeatures {
    /// Maximum number of meters.
    pub max_meter: u32,
    /// Bitmap of `OFPMBT_*` values supported (bit `1 << type`).
    pub band_types: u32,
    /// Bitmap of `OFPMF_*` flags supported.
    pub capabilities: u32,
    /// Maximum bands per meter.
    pub max_bands: u8,
    /// Maximum colour value.
    pub max_color: u8,
}

impl MeterFeatures {
    fn parse(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let f = MeterFeatures {
            max_meter: r.u32()?,
            band_types: r.u32()?,
            capabilities: r.u32()?,
            max_bands: r.u8()?,
            max_color: r.u8()?,
        };
        r.skip(2)?;
        Ok(f)
    }

    fn emit(&self, out: &mut Vec<u8>) {
        out.put_u32(self.max_meter);
        out.put_u32(self.band_types);
        out.put_u32(self.capabilities);
        out.put_u8(self.max_bands);
        out.put_u8(self.max_color);
        out.put_zeros(2);
    }
}
