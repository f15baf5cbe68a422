//! Statistics and descriptions: the multipart replies of
//! [`DatapathSwitch`] (DESC, FLOW, AGGREGATE, TABLE, TABLE_FEATURES,
//! PORT_DESC, PORT_STATS, QUEUE, GROUP, GROUP_DESC, GROUP_FEATURES) and
//! the filters they use.
//!
//! Counter-reading replies sync the workers' counters first, unless the
//! connection's [`offlow_openflow::Need::Counters`] ticket just did.

use offlow_flow::Field;
use offlow_openflow::multipart::{
    BucketCounter, Desc, FlowStats, FlowStatsRequest, GroupDesc, GroupFeatures, GroupStats,
    MultipartReplyBody, MultipartRequestBody, TableFeatureProp, TableFeatures, TableStats,
};
use offlow_openflow::oxm;
use offlow_openflow::{
    BadRequestCode, Bucket, FixedStr, Instruction, OfError, OxmMatch, TableFeaturesFailedCode,
};
use offlow_pipeline::{FlowFilter, FlowMatch, PortNo, TABLE_ALL};

use super::{DatapathSwitch, SwitchPort};

impl DatapathSwitch {
    /// The pipeline filter for a flow/aggregate stats request (§7.3.5.2:
    /// non-strict match; table, out_port, out_group and cookie filters).
    fn filter(&self, r: &FlowStatsRequest) -> Result<FlowFilter, OfError> {
        if r.table_id != TABLE_ALL && u16::from(r.table_id) >= self.n_tables() {
            return Err(OfError::BadRequest(BadRequestCode::BadTableId));
        }
        Ok(FlowFilter {
            table_id: r.table_id,
            strict: false,
            priority: 0,
            matcher: FlowMatch::new(r.matcher.to_match()),
            cookie: r.cookie,
            cookie_mask: r.cookie_mask,
            out_port: PortNo(r.out_port),
            out_group: r.out_group,
        })
    }

    fn flow_stats(&mut self, r: &FlowStatsRequest, now_ns: u64) -> Result<Vec<FlowStats>, OfError> {
        let filter = self.filter(r)?;
        self.sync_counters();
        let out = self
            .control
            .pipeline()
            .dump(&filter)
            .into_iter()
            .map(|f| {
                let age = now_ns.saturating_sub(f.installed_at_ns);
                FlowStats {
                    table_id: f.table_id,
                    // Seconds of a u64 ns count fit u32 for 136 years.
                    duration_sec: (age / 1_000_000_000).min(u64::from(u32::MAX)) as u32,
                    // Below 1e9.
                    duration_nsec: (age % 1_000_000_000) as u32,
                    // OpenFlow rules carry 16-bit priorities; the pipeline's
                    // wider ones only come from ClassBench loaders.
                    priority: f.priority.min(u32::from(u16::MAX)) as u16,
                    idle_timeout: f.idle_timeout,
                    hard_timeout: f.hard_timeout,
                    flags: f.flags.0,
                    cookie: f.cookie,
                    packet_count: f.packets,
                    byte_count: f.bytes,
                    matcher: OxmMatch::from_match(&f.matcher.matcher),
                    instructions: f.instructions.iter().map(Instruction::from).collect(),
                }
            })
            .collect();
        Ok(out)
    }

    /// §7.3.5.8: one port, or all with OFPP_ANY.
    fn port_stats(
        &self,
        port_no: u32,
    ) -> Result<Vec<offlow_openflow::multipart::PortStats>, OfError> {
        let stats = self.dataplane_stats();
        let age = self.started.elapsed();
        let mut out = Vec::new();
        for p in &self.ports {
            if port_no != PortNo::ANY.0 && port_no != p.number {
                continue;
            }
            let s = stats
                .as_ref()
                .and_then(|s| s.port(p.number))
                .unwrap_or_default();
            // Frames the offload tier served never reached a worker.
            let o = self
                .offload
                .as_ref()
                .map(|t| t.port_counters(p.number))
                .unwrap_or_default();
            out.push(offlow_openflow::multipart::PortStats {
                port_no: p.number,
                rx_packets: s.rx_packets + o.rx_packets,
                tx_packets: s.tx_packets + p.tx_packets + o.tx_packets,
                rx_bytes: s.rx_bytes + o.rx_bytes,
                tx_bytes: s.tx_bytes + o.tx_bytes,
                rx_dropped: s.rx_dropped,
                tx_dropped: s.tx_dropped,
                rx_errors: s.rx_errors,
                tx_errors: 0,
                rx_frame_err: 0,
                rx_over_err: 0,
                rx_crc_err: 0,
                collisions: 0,
                // u32 seconds last 136 years.
                duration_sec: age.as_secs().min(u64::from(u32::MAX)) as u32,
                duration_nsec: age.subsec_nanos(),
            });
        }
        if out.is_empty() && port_no != PortNo::ANY.0 {
            return Err(OfError::BadRequest(BadRequestCode::BadPort));
        }
        Ok(out)
    }

    pub(super) fn table_features(&self) -> Vec<TableFeatures> {
        let n = self.n_tables();
        let common = feature_props();
        (0..n)
            .map(|t| {
                // At most 255 tables (MAX_TABLES), so ids fit u8.
                let id = t as u8;
                let mut props = common.clone();
                // OFPTFPT_NEXT_TABLES: goto-table only goes forward.
                props.insert(
                    1,
                    TableFeatureProp {
                        prop_type: tfpt::NEXT_TABLES,
                        data: (t + 1..n).map(|x| x as u8).collect(),
                    },
                );
                TableFeatures {
                    table_id: id,
                    name: FixedStr::new(&format!("table{id}")),
                    metadata_match: u64::MAX,
                    metadata_write: u64::MAX,
                    config: 0,
                    max_entries: u32::MAX,
                    properties: props,
                }
            })
            .collect()
    }
}

/// `enum ofp_table_feature_prop_type` values used here (§7.3.5.18.2).
pub(super) mod tfpt {
    pub(crate) const INSTRUCTIONS: u16 = 0;
    pub(crate) const NEXT_TABLES: u16 = 2;
    pub(crate) const WRITE_ACTIONS: u16 = 4;
    pub(crate) const APPLY_ACTIONS: u16 = 6;
    pub(crate) const MATCH: u16 = 8;
    pub(crate) const WILDCARDS: u16 = 10;
    pub(crate) const WRITE_SETFIELD: u16 = 12;
    pub(crate) const APPLY_SETFIELD: u16 = 14;
}

/// `OFPAT_*` the executor implements: output, copy-TTL out/in, set/dec
/// MPLS TTL, push/pop VLAN, push/pop MPLS, set-queue, set/dec NW TTL,
/// set-field, push/pop PBB (groups are not supported).
const ACTION_TYPES: [u16; 15] = [0, 11, 12, 15, 16, 17, 18, 19, 20, 21, 23, 24, 25, 26, 27];

/// An OXM header (class OPENFLOW_BASIC) for `f`, with the mask bit and
/// doubled length when `masked`.
fn oxm_header(f: Field, masked: bool) -> [u8; 4] {
    let size = oxm::oxm_size(f) * if masked { 2 } else { 1 };
    let [c0, c1] = oxm::OXM_CLASS_BASIC.to_be_bytes();
    // Field numbers are below 128 and sizes at most 32: both fit a byte.
    [c0, c1, ((f as u8) << 1) | u8::from(masked), size as u8]
}

/// The table-feature properties every table shares, in type order (Open
/// vSwitch refuses a reply lacking any of the eight non-miss properties).
fn feature_props() -> Vec<TableFeatureProp> {
    let headers4 = |types: &mut dyn Iterator<Item = u16>| {
        types
            .flat_map(|t| {
                let [a, b] = t.to_be_bytes();
                [a, b, 0, 4]
            })
            .collect::<Vec<u8>>()
    };
    let oxms = |fields: &mut dyn Iterator<Item = (Field, bool)>| {
        fields
            .flat_map(|(f, m)| oxm_header(f, m))
            .collect::<Vec<u8>>()
    };
    let actions = headers4(&mut ACTION_TYPES.into_iter());
    let settable = oxms(
        &mut Field::ALL
            .into_iter()
            .filter(|&f| offlow_pipeline::is_settable(f))
            .map(|f| (f, false)),
    );
    vec![
        TableFeatureProp {
            prop_type: tfpt::INSTRUCTIONS,
            // goto-table, write-metadata, write/apply/clear-actions.
            data: headers4(&mut (1u16..=5)),
        },
        TableFeatureProp {
            prop_type: tfpt::WRITE_ACTIONS,
            data: actions.clone(),
        },
        TableFeatureProp {
            prop_type: tfpt::APPLY_ACTIONS,
            data: actions,
        },
        TableFeatureProp {
            prop_type: tfpt::MATCH,
            data: oxms(&mut Field::ALL.into_iter().map(|f| (f, oxm::oxm_maskable(f)))),
        },
        TableFeatureProp {
            prop_type: tfpt::WILDCARDS,
            data: oxms(&mut Field::ALL.into_iter().map(|f| (f, false))),
        },
        TableFeatureProp {
            prop_type: tfpt::WRITE_SETFIELD,
            data: settable.clone(),
        },
        TableFeatureProp {
            prop_type: tfpt::APPLY_SETFIELD,
            data: settable,
        },
    ]
}

impl DatapathSwitch {
    /// The reply to a multipart request (see the module docs for what each
    /// kind answers).
    pub(super) fn multipart_reply(
        &mut self,
        req: &MultipartRequestBody,
        now_ns: u64,
    ) -> Result<MultipartReplyBody, OfError> {
        use MultipartRequestBody as R;
        Ok(match req {
            R::Desc => MultipartReplyBody::Desc(Box::new(Desc {
                mfr_desc: FixedStr::new("offlow"),
                hw_desc: FixedStr::new("offlow software switch"),
                sw_desc: FixedStr::new(concat!("offlow ", env!("CARGO_PKG_VERSION"))),
                serial_num: FixedStr::new("none"),
                dp_desc: FixedStr::new(&format!("offlow dpid {:#018x}", self.dpid)),
            })),
            R::Flow(r) => MultipartReplyBody::Flow(self.flow_stats(r, now_ns)?),
            R::Aggregate(r) => {
                let filter = self.filter(r)?;
                self.sync_counters();
                let flows = self.control.pipeline().dump(&filter);
                MultipartReplyBody::Aggregate {
                    packet_count: flows.iter().map(|f| f.packets).sum(),
                    byte_count: flows.iter().map(|f| f.bytes).sum(),
                    // A pipeline holds fewer than 2^32 rules (u32 ids).
                    flow_count: flows.len() as u32,
                }
            }
            R::Table => {
                self.sync_counters();
                MultipartReplyBody::Table(
                    self.control
                        .pipeline()
                        .table_stats()
                        .into_iter()
                        .map(|t| TableStats {
                            table_id: t.table_id,
                            active_count: t.active_count,
                            lookup_count: t.lookup_count,
                            matched_count: t.matched_count,
                        })
                        .collect(),
                )
            }
            R::TableFeatures(set) if set.is_empty() => {
                MultipartReplyBody::TableFeatures(self.table_features())
            }
            // §7.3.5.18: a switch that cannot reconfigure its tables
            // refuses the request.
            R::TableFeatures(_) => {
                return Err(OfError::TableFeaturesFailed(TableFeaturesFailedCode::Eperm))
            }
            R::PortStats(p) => MultipartReplyBody::PortStats(self.port_stats(*p)?),
            R::PortDesc => {
                MultipartReplyBody::PortDesc(self.ports.iter().map(SwitchPort::desc).collect())
            }
            R::Queue { .. } => MultipartReplyBody::Queue(Vec::new()),
            R::GroupStats(_) | R::GroupDesc | R::GroupFeatures => self.group_reply(req)?,
            // Meters (not yet wired) and experimenter requests.
            R::MeterStats(_) | R::MeterConfig(_) | R::MeterFeatures | R::Experimenter(_) => {
                return Err(OfError::BadRequest(BadRequestCode::BadMultipart))
            }
        })
    }

    /// GROUP (one group, or every one for `OFPG_ALL`), GROUP_DESC and
    /// GROUP_FEATURES (§7.3.5.9–11). Group counters are the executor's
    /// atomics, current at any time; durations use the clock the groups
    /// were stamped with at GROUP_MOD.
    fn group_reply(&mut self, req: &MultipartRequestBody) -> Result<MultipartReplyBody, OfError> {
        use offlow_pipeline::group::{GROUP_ALL, MAX_GROUPS};
        let now = self.clock_ns();
        let pipeline = self.control.pipeline();
        let groups = pipeline.groups();
        Ok(match req {
            MultipartRequestBody::GroupStats(id) => MultipartReplyBody::GroupStats(
                groups
                    .iter()
                    .filter(|g| *id == GROUP_ALL || g.id == *id)
                    .map(|g| {
                        let (packet_count, byte_count) = g.counters.get();
                        let age = now.saturating_sub(g.installed_at_ns);
                        GroupStats {
                            group_id: g.id,
                            ref_count: pipeline.group_ref_count(g.id),
                            packet_count,
                            byte_count,
                            duration_sec: (age / 1_000_000_000).min(u64::from(u32::MAX)) as u32,
                            duration_nsec: (age % 1_000_000_000) as u32,
                            bucket_stats: g
                                .counters
                                .buckets()
                                .into_iter()
                                .map(|(packet_count, byte_count)| BucketCounter {
                                    packet_count,
                                    byte_count,
                                })
                                .collect(),
                        }
                    })
                    .collect(),
            ),
            MultipartRequestBody::GroupDesc => MultipartReplyBody::GroupDesc(
                groups
                    .iter()
                    .map(|g| GroupDesc {
                        group_type: g.kind.to_wire(),
                        group_id: g.id,
                        buckets: g.buckets.iter().map(Bucket::from).collect(),
                    })
                    .collect(),
            ),
            _ => MultipartReplyBody::GroupFeatures(group_features(MAX_GROUPS)),
        })
    }
}

/// What the group table supports (§7.3.5.11): every type; select weights
/// and liveness, chaining with loop checks; every action the executor
/// runs, in every type.
fn group_features(max_groups: usize) -> GroupFeatures {
    // OFPAT_* numbers of the actions buckets may hold.
    const ACTIONS: [u32; 16] = [
        0, 11, 12, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27,
    ];
    let actions = ACTIONS.iter().fold(0u32, |m, a| m | 1 << a);
    let max = u32::try_from(max_groups).unwrap_or(u32::MAX);
    GroupFeatures {
        // OFPGT_ALL, SELECT, INDIRECT, FF.
        types: 0b1111,
        // OFPGFC_SELECT_WEIGHT | SELECT_LIVENESS | CHAINING | CHAINING_CHECKS.
        capabilities: 0b1111,
        max_groups: [max; 4],
        actions: [actions; 4],
    }
}
