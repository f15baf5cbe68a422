//! Statistics and descriptions: the multipart replies of
//! [`DatapathSwitch`] (DESC, FLOW, AGGREGATE, TABLE, TABLE_FEATURES,
//! PORT_DESC, PORT_STATS, QUEUE, GROUP, GROUP_DESC, GROUP_FEATURES, METER,
//! METER_CONFIG, METER_FEATURES) and
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
                // With what the interface dropped before the switch's
                // sockets saw it, as Open vSwitch's `system` ports report
                // the kernel's counters.
                rx_dropped: s.rx_dropped + p.kernel_rx_dropped(),
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
            R::MeterStats(_) | R::MeterConfig(_) | R::MeterFeatures => self.meter_reply(req)?,
            R::Experimenter(_) => return Err(OfError::BadRequest(BadRequestCode::BadMultipart)),
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

// ---------------------------------------------------------------------------
// Meters (§7.3.5.12-14): the meter table of the writer's pipeline copy.

impl DatapathSwitch {
    /// The reply to OFPMP_METER, OFPMP_METER_CONFIG or OFPMP_METER_FEATURES
    /// (any other request kind, which never comes here, is
    /// `OFPBRC_BAD_MULTIPART`).
    ///
    /// - METER and METER_CONFIG take one meter id or `OFPM_ALL`; one id
    ///   that is not configured is `OFPMMFC_UNKNOWN_METER`, as Open
    ///   vSwitch's `handle_meter_request` answers. Meter counters are
    ///   atomics the workers bump as they meter, so no counter sync is
    ///   needed; `flow_count` is counted from the flow tables then.
    /// - METER_FEATURES: what `MeterConfig::from_mod` accepts.
    fn meter_reply(
        &mut self,
        req: &offlow_openflow::MultipartRequestBody,
    ) -> Result<offlow_openflow::MultipartReplyBody, OfError> {
        use offlow_openflow::meter::{band_type, meter_flags, meter_id};
        use offlow_openflow::{MeterFeatures, MeterModFailedCode, MultipartReplyBody as B};
        use offlow_pipeline::meter::{Meter, MAX_BANDS, MAX_METERS};
        let pipeline = self.control.pipeline();
        let selected = |id: u32| -> Result<Vec<(u32, &std::sync::Arc<Meter>)>, OfError> {
            if id == meter_id::ALL {
                return Ok(pipeline.meters().iter().collect());
            }
            match pipeline.meters().get(id) {
                Some(m) => Ok(vec![(id, m)]),
                None => Err(OfError::MeterModFailed(MeterModFailedCode::UnknownMeter)),
            }
        };
        Ok(match req {
            MultipartRequestBody::MeterStats(id) => {
                let now = offlow_datapath::clock::now_ns();
                B::MeterStats(
                    selected(*id)?
                        .into_iter()
                        .map(|(id, m)| {
                            m.flow_count.store(
                                pipeline.meter_flow_count(id),
                                std::sync::atomic::Ordering::Relaxed,
                            );
                            m.stats(id, now)
                        })
                        .collect(),
                )
            }
            MultipartRequestBody::MeterConfig(id) => B::MeterConfig(
                selected(*id)?
                    .into_iter()
                    .map(|(id, m)| m.config_reply(id))
                    .collect(),
            ),
            MultipartRequestBody::MeterFeatures => B::MeterFeatures(MeterFeatures {
                max_meter: MAX_METERS as u32,
                band_types: 1 << band_type::DROP | 1 << band_type::DSCP_REMARK,
                capabilities: u32::from(
                    meter_flags::KBPS
                        | meter_flags::PKTPS
                        | meter_flags::BURST
                        | meter_flags::STATS,
                ),
                max_bands: MAX_BANDS as u8,
                max_color: 0,
            }),
            _ => return Err(OfError::BadRequest(BadRequestCode::BadMultipart)),
        })
    }
}

#[cfg(test)]
mod meter_tests {
    use super::*;
    use offlow_openflow::meter::{band_type, meter_command, meter_flags, meter_id};
    use offlow_openflow::{
        MeterBand, MeterBandKind, MeterMod, MeterModFailedCode, MultipartReplyBody as B, Switch,
    };
    use offlow_pipeline::{Action, FlowMod, FlowModFlags, Instruction as PInstr, RemovedReason};

    fn mm(command: u16, id: u32) -> MeterMod {
        MeterMod {
            command,
            flags: meter_flags::PKTPS | meter_flags::STATS,
            meter_id: id,
            bands: vec![MeterBand {
                kind: MeterBandKind::Drop,
                rate: 100,
                burst_size: 0,
            }],
        }
    }

    /// METER_MOD through the switch, the three meter multiparts, and a
    /// meter DELETE's FLOW_REMOVED with reason OFPRR_METER_DELETE.
    #[test]
    fn meters_through_the_switch() {
        let mut sw = DatapathSwitch::new(1, 2);
        sw.meter_mod(&mm(meter_command::ADD, 3)).unwrap();
        assert_eq!(
            sw.meter_mod(&mm(meter_command::ADD, 3)),
            Err(OfError::MeterModFailed(MeterModFailedCode::MeterExists))
        );
        let mut fm = FlowMod::add(
            0,
            5,
            offlow_flow::Match::ANY,
            vec![
                PInstr::Meter(3),
                PInstr::ApplyActions(vec![Action::output(PortNo(2))]),
            ],
        );
        fm.flags = FlowModFlags(FlowModFlags::SEND_FLOW_REM);
        sw.pipeline_flow_mod(&fm, 0).unwrap();
        sw.commit_pending();

        let stats = sw
            .multipart_reply(&MultipartRequestBody::MeterStats(meter_id::ALL), 0)
            .unwrap();
        let B::MeterStats(s) = stats else {
            panic!("{stats:?}")
        };
        assert_eq!((s.len(), s[0].meter_id, s[0].flow_count), (1, 3, 1));
        let config = sw
            .multipart_reply(&MultipartRequestBody::MeterConfig(3), 0)
            .unwrap();
        let B::MeterConfig(c) = config else {
            panic!("{config:?}")
        };
        assert_eq!(c[0].bands, mm(0, 3).bands);
        assert_eq!(
            sw.multipart_reply(&MultipartRequestBody::MeterStats(4), 0)
                .unwrap_err(),
            OfError::MeterModFailed(MeterModFailedCode::UnknownMeter)
        );
        let features = sw
            .multipart_reply(&MultipartRequestBody::MeterFeatures, 0)
            .unwrap();
        let B::MeterFeatures(f) = features else {
            panic!("{features:?}")
        };
        assert_eq!(
            f.band_types,
            1 << band_type::DROP | 1 << band_type::DSCP_REMARK
        );
        assert_eq!((f.max_bands, f.max_color), (8, 0));

        sw.meter_mod(&mm(meter_command::DELETE, 3)).unwrap();
        let removed = sw.take_flow_removed(0);
        assert_eq!(removed.len(), 1);
        assert_eq!(removed[0].reason, RemovedReason::MeterDelete as u8);
        assert_eq!(sw.control.pipeline().len(), 0);
    }
}
