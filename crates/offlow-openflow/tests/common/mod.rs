//! Shared test support: proptest strategies producing valid typed messages,
//! and one hand-written sample per message kind (the golden vectors).
#![allow(dead_code)]

use offlow_flow::Field;
use offlow_openflow::multipart::{MultipartReplyBody as RB, MultipartRequestBody as QB};
use offlow_openflow::oxm::oxm_maskable;
use offlow_openflow::*;
use offlow_testkit::{tcp_flags, Checksum, FrameBuilder};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::strategy::BoxedStrategy;

/// A value (and maybe a mask) for `f`, valid on the wire.
pub(crate) fn oxm(f: Field) -> BoxedStrategy<Oxm> {
    let full = f.full_mask();
    let mask = if oxm_maskable(f) {
        prop::option::of(any::<u128>().prop_map(move |m| m & full)).boxed()
    } else {
        Just(None).boxed()
    };
    (any::<u128>(), mask)
        .prop_map(move |(v, m)| Oxm {
            field: f,
            value: v & full & m.unwrap_or(full),
            mask: m,
        })
        .boxed()
}

fn opt(f: Field) -> BoxedStrategy<Vec<Oxm>> {
    prop::option::of(oxm(f))
        .prop_map(|o| o.into_iter().collect())
        .boxed()
}

fn fixed(f: Field, v: u128) -> Oxm {
    Oxm::exact(f, v)
}

fn all(parts: Vec<BoxedStrategy<Vec<Oxm>>>) -> BoxedStrategy<Vec<Oxm>> {
    parts
        .prop_map(|v| v.into_iter().flatten().collect())
        .boxed()
}

/// Transport fields for an IP profile.
fn l4(v6: bool) -> BoxedStrategy<Vec<Oxm>> {
    use Field::*;
    let mut choices: Vec<BoxedStrategy<Vec<Oxm>>> = vec![
        all(vec![
            Just(vec![fixed(IpProto, 6)]).boxed(),
            opt(TcpSrc),
            opt(TcpDst),
        ]),
        all(vec![
            Just(vec![fixed(IpProto, 17)]).boxed(),
            opt(UdpSrc),
            opt(UdpDst),
        ]),
        all(vec![
            Just(vec![fixed(IpProto, 132)]).boxed(),
            opt(SctpSrc),
            opt(SctpDst),
        ]),
        Just(vec![]).boxed(),
        (0u128..256)
            .prop_map(|p| vec![fixed(IpProto, p)])
            .prop_filter("no l4 proto", |v| {
                ![1u128, 6, 17, 58, 132].contains(&v[0].value)
            })
            .boxed(),
    ];
    if v6 {
        choices.push(all(vec![
            Just(vec![fixed(IpProto, 58), fixed(Icmpv6Type, 135)]).boxed(),
            opt(Icmpv6Code),
            opt(Ipv6NdTarget),
            opt(Ipv6NdSll),
        ]));
        choices.push(all(vec![
            Just(vec![fixed(IpProto, 58), fixed(Icmpv6Type, 136)]).boxed(),
            opt(Ipv6NdTarget),
            opt(Ipv6NdTll),
        ]));
        choices.push(all(vec![
            Just(vec![fixed(IpProto, 58)]).boxed(),
            opt(Icmpv6Code),
        ]));
    } else {
        choices.push(all(vec![
            Just(vec![fixed(IpProto, 1)]).boxed(),
            opt(Icmpv4Type),
            opt(Icmpv4Code),
        ]));
    }
    prop::strategy::Union::new(choices).boxed()
}

/// A valid OXM match (prerequisites hold, no duplicates), in random order.
pub(crate) fn arb_match() -> BoxedStrategy<OxmMatch> {
    use Field::*;
    let in_port = (opt(InPort), opt(InPhyPort)).prop_map(|(a, b)| {
        if a.is_empty() {
            a
        } else {
            a.into_iter().chain(b).collect()
        }
    });
    let vlan = prop_oneof![
        Just(vec![]),
        oxm(VlanVid).prop_map(|o| vec![o]),
        (0u128..0x1000, opt(VlanPcp)).prop_map(|(v, p)| std::iter::once(fixed(
            VlanVid,
            v | 0x1000
        ))
        .chain(p)
        .collect()),
    ];
    let base = all(vec![
        in_port.boxed(),
        opt(Metadata),
        opt(EthDst),
        opt(EthSrc),
        opt(TunnelId),
        vlan.boxed(),
    ]);
    let l3 = prop_oneof![
        Just(vec![]),
        (0u128..0x10000)
            .prop_filter("special ethertype", |t| {
                ![0x0800u128, 0x86dd, 0x0806, 0x8847, 0x8848, 0x88e7].contains(t)
            })
            .prop_map(|t| vec![fixed(EthType, t)]),
        all(vec![
            Just(vec![fixed(EthType, 0x0800)]).boxed(),
            opt(IpDscp),
            opt(IpEcn),
            opt(Ipv4Src),
            opt(Ipv4Dst),
            l4(false),
        ]),
        all(vec![
            Just(vec![fixed(EthType, 0x86dd)]).boxed(),
            opt(Ipv6Src),
            opt(Ipv6Dst),
            opt(Ipv6Flabel),
            opt(Ipv6Exthdr),
            opt(IpDscp),
            l4(true),
        ]),
        all(vec![
            Just(vec![fixed(EthType, 0x0806)]).boxed(),
            opt(ArpOp),
            opt(ArpSpa),
            opt(ArpTpa),
            opt(ArpSha),
            opt(ArpTha),
        ]),
        all(vec![
            prop_oneof![Just(0x8847u128), Just(0x8848u128)]
                .prop_map(|t| vec![fixed(EthType, t)])
                .boxed(),
            opt(MplsLabel),
            opt(MplsTc),
            opt(MplsBos),
        ]),
        all(vec![
            Just(vec![fixed(EthType, 0x88e7)]).boxed(),
            opt(PbbIsid)
        ]),
    ];
    (base, l3)
        .prop_flat_map(|(a, b)| {
            let v: Vec<Oxm> = a.into_iter().chain(b).collect();
            Just(v).prop_shuffle()
        })
        .prop_map(|fields| OxmMatch { fields })
        .boxed()
}

fn aligned_bytes() -> BoxedStrategy<Vec<u8>> {
    vec(any::<[u8; 8]>(), 0..3).prop_map(|v| v.concat()).boxed()
}

fn bytes(max: usize) -> BoxedStrategy<Vec<u8>> {
    vec(any::<u8>(), 0..max).boxed()
}

pub(crate) fn arb_action() -> BoxedStrategy<Action> {
    let set_field = (0u8..40).prop_flat_map(|n| {
        let f = Field::from_oxm(n).expect("0..40 are basic fields");
        any::<u128>().prop_map(move |v| Action::SetField(f, v & f.full_mask()))
    });
    prop_oneof![
        (any::<u32>(), any::<u16>()).prop_map(|(port, max_len)| Action::Output { port, max_len }),
        Just(Action::CopyTtlOut),
        Just(Action::CopyTtlIn),
        any::<u8>().prop_map(Action::SetMplsTtl),
        Just(Action::DecMplsTtl),
        any::<u16>().prop_map(Action::PushVlan),
        Just(Action::PopVlan),
        any::<u16>().prop_map(Action::PushMpls),
        any::<u16>().prop_map(Action::PopMpls),
        any::<u32>().prop_map(Action::SetQueue),
        any::<u32>().prop_map(Action::Group),
        any::<u8>().prop_map(Action::SetNwTtl),
        Just(Action::DecNwTtl),
        set_field,
        any::<u16>().prop_map(Action::PushPbb),
        Just(Action::PopPbb),
        any::<u64>().prop_map(Action::SetWorkers),
        // OFLW actions decode to their own variants, never to Experimenter.
        (
            any::<u32>().prop_filter("not OFLW", |e| *e != OFLW_EXPERIMENTER),
            aligned_bytes()
        )
            .prop_map(|(experimenter, data)| Action::Experimenter { experimenter, data }),
    ]
    .boxed()
}

pub(crate) fn arb_actions() -> BoxedStrategy<Vec<Action>> {
    vec(arb_action(), 0..4).boxed()
}

pub(crate) fn arb_instruction() -> BoxedStrategy<Instruction> {
    prop_oneof![
        any::<u8>().prop_map(Instruction::GotoTable),
        (any::<u64>(), any::<u64>())
            .prop_map(|(value, mask)| Instruction::WriteMetadata { value, mask }),
        arb_actions().prop_map(Instruction::WriteActions),
        arb_actions().prop_map(Instruction::ApplyActions),
        Just(Instruction::ClearActions),
        any::<u32>().prop_map(Instruction::Meter),
        (any::<u32>(), aligned_bytes())
            .prop_map(|(experimenter, data)| { Instruction::Experimenter { experimenter, data } }),
    ]
    .boxed()
}

fn arb_port() -> BoxedStrategy<Port> {
    (
        any::<u32>(),
        any::<[u8; 6]>(),
        any::<[u8; 16]>(),
        any::<[u32; 8]>(),
    )
        .prop_map(|(port_no, hw_addr, name, w)| Port {
            port_no,
            hw_addr,
            name: FixedStr(name),
            config: w[0],
            state: w[1],
            curr: w[2],
            advertised: w[3],
            supported: w[4],
            peer: w[5],
            curr_speed: w[6],
            max_speed: w[7],
        })
        .boxed()
}

fn arb_flow_stats_request() -> BoxedStrategy<FlowStatsRequest> {
    (any::<(u8, u32, u32, u64, u64)>(), arb_match())
        .prop_map(
            |((table_id, out_port, out_group, cookie, cookie_mask), matcher)| FlowStatsRequest {
                table_id,
                out_port,
                out_group,
                cookie,
                cookie_mask,
                matcher,
            },
        )
        .boxed()
}

fn arb_table_features() -> BoxedStrategy<Vec<TableFeatures>> {
    let prop = (any::<u16>(), bytes(13))
        .prop_map(|(prop_type, data)| TableFeatureProp { prop_type, data });
    vec(
        (
            any::<(u8, u64, u64, u32, u32)>(),
            any::<[u8; 32]>(),
            vec(prop, 0..3),
        )
            .prop_map(
                |(
                    (table_id, metadata_match, metadata_write, config, max_entries),
                    name,
                    properties,
                )| {
                    TableFeatures {
                        table_id,
                        name: FixedStr(name),
                        metadata_match,
                        metadata_write,
                        config,
                        max_entries,
                        properties,
                    }
                },
            ),
        0..3,
    )
    .boxed()
}

fn arb_experimenter() -> BoxedStrategy<Experimenter> {
    (any::<u32>(), any::<u32>(), bytes(20))
        .prop_map(|(experimenter, exp_type, data)| Experimenter {
            experimenter,
            exp_type,
            data,
        })
        .boxed()
}

/// Any meter band (every kind is 16 bytes on the wire).
pub(crate) fn arb_band() -> BoxedStrategy<MeterBand> {
    let kind = prop_oneof![
        Just(MeterBandKind::Drop),
        any::<u8>().prop_map(|prec_level| MeterBandKind::DscpRemark { prec_level }),
        any::<u32>().prop_map(|experimenter| MeterBandKind::Experimenter { experimenter }),
    ];
    (kind, any::<u32>(), any::<u32>())
        .prop_map(|(kind, rate, burst_size)| MeterBand {
            kind,
            rate,
            burst_size,
        })
        .boxed()
}

pub(crate) fn arb_meter_mod() -> BoxedStrategy<MeterMod> {
    (any::<(u16, u16, u32)>(), vec(arb_band(), 0..4))
        .prop_map(|((command, flags, meter_id), bands)| MeterMod {
            command,
            flags,
            meter_id,
            bands,
        })
        .boxed()
}

fn arb_bucket() -> BoxedStrategy<Bucket> {
    (any::<(u16, u32, u32)>(), arb_actions())
        .prop_map(|((weight, watch_port, watch_group), actions)| Bucket {
            weight,
            watch_port,
            watch_group,
            actions,
        })
        .boxed()
}

pub(crate) fn arb_group_stats() -> BoxedStrategy<GroupStats> {
    (
        any::<(u32, u32, u64, u64, u32, u32)>(),
        vec(any::<(u64, u64)>(), 0..4),
    )
        .prop_map(|((group_id, ref_count, pc, bc, ds, dn), b)| GroupStats {
            group_id,
            ref_count,
            packet_count: pc,
            byte_count: bc,
            duration_sec: ds,
            duration_nsec: dn,
            bucket_stats: b
                .into_iter()
                .map(|(packet_count, byte_count)| BucketCounter {
                    packet_count,
                    byte_count,
                })
                .collect(),
        })
        .boxed()
}

pub(crate) fn arb_group_desc() -> BoxedStrategy<GroupDesc> {
    (any::<(u8, u32)>(), vec(arb_bucket(), 0..3))
        .prop_map(|((group_type, group_id), buckets)| GroupDesc {
            group_type,
            group_id,
            buckets,
        })
        .boxed()
}

pub(crate) fn arb_meter_stats() -> BoxedStrategy<MeterStats> {
    (
        any::<(u32, u32, u64, u64, u32, u32)>(),
        vec(any::<(u64, u64)>(), 0..4),
    )
        .prop_map(|((meter_id, flow_count, pc, bc, ds, dn), b)| MeterStats {
            meter_id,
            flow_count,
            packet_in_count: pc,
            byte_in_count: bc,
            duration_sec: ds,
            duration_nsec: dn,
            band_stats: b
                .into_iter()
                .map(|(packet_band_count, byte_band_count)| MeterBandStats {
                    packet_band_count,
                    byte_band_count,
                })
                .collect(),
        })
        .boxed()
}

pub(crate) fn arb_meter_config() -> BoxedStrategy<MeterConfig> {
    (any::<(u16, u32)>(), vec(arb_band(), 0..4))
        .prop_map(|((flags, meter_id), bands)| MeterConfig {
            flags,
            meter_id,
            bands,
        })
        .boxed()
}

fn arb_mp_request() -> BoxedStrategy<MultipartRequest> {
    let body = prop_oneof![
        Just(QB::Desc),
        arb_flow_stats_request().prop_map(QB::Flow),
        arb_flow_stats_request().prop_map(QB::Aggregate),
        Just(QB::Table),
        any::<u32>().prop_map(QB::PortStats),
        any::<(u32, u32)>().prop_map(|(port_no, queue_id)| QB::Queue { port_no, queue_id }),
        arb_table_features().prop_map(QB::TableFeatures),
        Just(QB::PortDesc),
        arb_experimenter().prop_map(QB::Experimenter),
        any::<u32>().prop_map(QB::GroupStats),
        Just(QB::GroupDesc),
        Just(QB::GroupFeatures),
        any::<u32>().prop_map(QB::MeterStats),
        any::<u32>().prop_map(QB::MeterConfig),
        Just(QB::MeterFeatures),
    ];
    (any::<u16>(), body)
        .prop_map(|(flags, body)| MultipartRequest { flags, body })
        .boxed()
}

fn arb_flow_stats() -> BoxedStrategy<FlowStats> {
    (
        any::<(u8, u32, u32, u16, u16, u16, u16)>(),
        any::<(u64, u64, u64)>(),
        arb_match(),
        vec(arb_instruction(), 0..3),
    )
        .prop_map(
            |((t, ds, dn, pr, it, ht, fl), (c, pc, bc), matcher, instructions)| FlowStats {
                table_id: t,
                duration_sec: ds,
                duration_nsec: dn,
                priority: pr,
                idle_timeout: it,
                hard_timeout: ht,
                flags: fl,
                cookie: c,
                packet_count: pc,
                byte_count: bc,
                matcher,
                instructions,
            },
        )
        .boxed()
}

fn arb_mp_reply() -> BoxedStrategy<MultipartReply> {
    let desc = (any::<[u8; 32]>(), any::<u8>()).prop_map(|(s, b)| {
        let mut d = Desc::default();
        d.mfr_desc.0[..32].copy_from_slice(&s);
        d.dp_desc.0[255] = b;
        d.serial_num = FixedStr(s);
        RB::Desc(Box::new(d))
    });
    let body = prop_oneof![
        desc,
        vec(arb_flow_stats(), 0..3).prop_map(RB::Flow),
        any::<(u64, u64, u32)>().prop_map(|(packet_count, byte_count, flow_count)| {
            RB::Aggregate {
                packet_count,
                byte_count,
                flow_count,
            }
        }),
        vec(any::<(u8, u32, u64, u64)>(), 0..3).prop_map(|v| RB::Table(
            v.into_iter()
                .map(
                    |(table_id, active_count, lookup_count, matched_count)| TableStats {
                        table_id,
                        active_count,
                        lookup_count,
                        matched_count,
                    }
                )
                .collect()
        )),
        vec(
            (any::<u32>(), any::<[u64; 12]>(), any::<(u32, u32)>()),
            0..3
        )
        .prop_map(|v| {
            RB::PortStats(
                v.into_iter()
                    .map(|(port_no, c, (ds, dn))| PortStats {
                        port_no,
                        rx_packets: c[0],
                        tx_packets: c[1],
                        rx_bytes: c[2],
                        tx_bytes: c[3],
                        rx_dropped: c[4],
                        tx_dropped: c[5],
                        rx_errors: c[6],
                        tx_errors: c[7],
                        rx_frame_err: c[8],
                        rx_over_err: c[9],
                        rx_crc_err: c[10],
                        collisions: c[11],
                        duration_sec: ds,
                        duration_nsec: dn,
                    })
                    .collect(),
            )
        }),
        vec(any::<(u32, u32, u64, u64, u64, u32, u32)>(), 0..3).prop_map(|v| RB::Queue(
            v.into_iter()
                .map(
                    |(port_no, queue_id, tx_bytes, tx_packets, tx_errors, ds, dn)| {
                        QueueStats {
                            port_no,
                            queue_id,
                            tx_bytes,
                            tx_packets,
                            tx_errors,
                            duration_sec: ds,
                            duration_nsec: dn,
                        }
                    }
                )
                .collect()
        )),
        arb_table_features().prop_map(RB::TableFeatures),
        vec(arb_port(), 0..3).prop_map(RB::PortDesc),
        arb_experimenter().prop_map(RB::Experimenter),
        vec(arb_group_stats(), 0..3).prop_map(RB::GroupStats),
        vec(arb_group_desc(), 0..3).prop_map(RB::GroupDesc),
        (any::<(u32, u32)>(), any::<[u32; 4]>(), any::<[u32; 4]>()).prop_map(
            |((types, capabilities), max_groups, actions)| RB::GroupFeatures(GroupFeatures {
                types,
                capabilities,
                max_groups,
                actions,
            })
        ),
        vec(arb_meter_stats(), 0..3).prop_map(RB::MeterStats),
        vec(arb_meter_config(), 0..3).prop_map(RB::MeterConfig),
        any::<(u32, u32, u32, u8, u8)>().prop_map(
            |(max_meter, band_types, capabilities, max_bands, max_color)| {
                RB::MeterFeatures(MeterFeatures {
                    max_meter,
                    band_types,
                    capabilities,
                    max_bands,
                    max_color,
                })
            }
        ),
    ];
    (any::<u16>(), body)
        .prop_map(|(flags, body)| MultipartReply { flags, body })
        .boxed()
}

fn arb_error() -> BoxedStrategy<ErrorMsg> {
    prop_oneof![
        (0u16..20, 0u16..20, bytes(70)).prop_map(|(t, c, data)| ErrorMsg::Standard {
            error: OfError::from_wire(t, c),
            data,
        }),
        (any::<u16>(), any::<u32>(), bytes(20)).prop_map(|(exp_type, experimenter, data)| {
            ErrorMsg::Experimenter {
                exp_type,
                experimenter,
                data,
            }
        }),
    ]
    .boxed()
}

fn arb_hello() -> BoxedStrategy<Hello> {
    let elem = prop_oneof![
        vec(any::<u32>(), 0..3).prop_map(HelloElement::VersionBitmap),
        (2u16.., bytes(12)).prop_map(|(elem_type, data)| HelloElement::Unknown { elem_type, data }),
    ];
    vec(elem, 0..3)
        .prop_map(|elements| Hello { elements })
        .boxed()
}

fn arb_async() -> BoxedStrategy<AsyncConfig> {
    any::<[u32; 6]>()
        .prop_map(|w| AsyncConfig {
            packet_in_mask: [w[0], w[1]],
            port_status_mask: [w[2], w[3]],
            flow_removed_mask: [w[4], w[5]],
        })
        .boxed()
}

/// Any valid body.
pub(crate) fn arb_body() -> BoxedStrategy<Body> {
    let flow_mod = (
        any::<(u64, u64, u8, u8, u16, u16, u16)>(),
        any::<(u32, u32, u32, u16)>(),
        arb_match(),
        vec(arb_instruction(), 0..3),
    )
        .prop_map(
            |((cookie, cookie_mask, table_id, command, it, ht, pr), (b, op, og, fl), m, ins)| {
                Body::FlowMod(FlowMod {
                    cookie,
                    cookie_mask,
                    table_id,
                    command,
                    idle_timeout: it,
                    hard_timeout: ht,
                    priority: pr,
                    buffer_id: b,
                    out_port: op,
                    out_group: og,
                    flags: fl,
                    matcher: m,
                    instructions: ins,
                })
            },
        );
    let packet_in = (any::<(u32, u16, u8, u8, u64)>(), arb_match(), bytes(64)).prop_map(
        |((buffer_id, total_len, reason, table_id, cookie), matcher, data)| {
            Body::PacketIn(PacketIn {
                buffer_id,
                total_len,
                reason,
                table_id,
                cookie,
                matcher,
                data,
            })
        },
    );
    let flow_removed = (
        any::<(u64, u16, u8, u8, u32, u32)>(),
        any::<(u16, u16, u64, u64)>(),
        arb_match(),
    )
        .prop_map(|((c, p, r, t, ds, dn), (it, ht, pc, bc), matcher)| {
            Body::FlowRemoved(FlowRemoved {
                cookie: c,
                priority: p,
                reason: r,
                table_id: t,
                duration_sec: ds,
                duration_nsec: dn,
                idle_timeout: it,
                hard_timeout: ht,
                packet_count: pc,
                byte_count: bc,
                matcher,
            })
        });
    let group_mod = (
        any::<(u16, u8, u32)>(),
        vec(
            (any::<(u16, u32, u32)>(), arb_actions()).prop_map(|((weight, wp, wg), actions)| {
                Bucket {
                    weight,
                    watch_port: wp,
                    watch_group: wg,
                    actions,
                }
            }),
            0..3,
        ),
    )
        .prop_map(|((command, group_type, group_id), buckets)| {
            Body::GroupMod(GroupMod {
                command,
                group_type,
                group_id,
                buckets,
            })
        });
    let queue_reply = (
        any::<u32>(),
        vec((any::<(u32, u32)>(), aligned_bytes()), 0..3),
    )
        .prop_map(|(port, qs)| {
            Body::QueueGetConfigReply(QueueGetConfigReply {
                port,
                queues: qs
                    .into_iter()
                    .map(|((queue_id, port), properties)| PacketQueue {
                        queue_id,
                        port,
                        properties,
                    })
                    .collect(),
            })
        });
    prop_oneof![
        arb_hello().prop_map(Body::Hello),
        arb_error().prop_map(Body::Error),
        bytes(40).prop_map(Body::EchoRequest),
        bytes(40).prop_map(Body::EchoReply),
        arb_experimenter().prop_map(Body::Experimenter),
        Just(Body::FeaturesRequest),
        any::<(u64, u32, u8, u8, u32, u32)>().prop_map(|(d, nb, nt, a, c, r)| {
            Body::FeaturesReply(SwitchFeatures {
                datapath_id: d,
                n_buffers: nb,
                n_tables: nt,
                auxiliary_id: a,
                capabilities: c,
                reserved: r,
            })
        }),
        Just(Body::GetConfigRequest),
        any::<(u16, u16)>().prop_map(|(flags, miss_send_len)| Body::GetConfigReply(SwitchConfig {
            flags,
            miss_send_len
        })),
        any::<(u16, u16)>().prop_map(|(flags, miss_send_len)| Body::SetConfig(SwitchConfig {
            flags,
            miss_send_len
        })),
        packet_in,
        flow_removed,
        (any::<u8>(), arb_port())
            .prop_map(|(reason, desc)| Body::PortStatus(PortStatus { reason, desc })),
        (any::<(u32, u32)>(), arb_actions(), bytes(64)).prop_map(
            |((buffer_id, in_port), actions, data)| Body::PacketOut(PacketOut {
                buffer_id,
                in_port,
                actions,
                data
            })
        ),
        flow_mod,
        group_mod,
        (any::<(u32, [u8; 6], u32, u32, u32)>()).prop_map(
            |(port_no, hw_addr, config, mask, advertise)| Body::PortMod(PortMod {
                port_no,
                hw_addr,
                config,
                mask,
                advertise
            })
        ),
        any::<(u8, u32)>()
            .prop_map(|(table_id, config)| Body::TableMod(TableMod { table_id, config })),
        arb_mp_request().prop_map(Body::MultipartRequest),
        arb_mp_reply().prop_map(Body::MultipartReply),
        Just(Body::BarrierRequest),
        Just(Body::BarrierReply),
        any::<u32>().prop_map(Body::QueueGetConfigRequest),
        queue_reply,
        any::<(u32, u64)>().prop_map(|(role, generation_id)| Body::RoleRequest(Role {
            role,
            generation_id
        })),
        any::<(u32, u64)>().prop_map(|(role, generation_id)| Body::RoleReply(Role {
            role,
            generation_id
        })),
        Just(Body::GetAsyncRequest),
        arb_async().prop_map(Body::GetAsyncReply),
        arb_async().prop_map(Body::SetAsync),
        arb_meter_mod().prop_map(Body::MeterMod),
    ]
    .boxed()
}

/// Any valid message.
pub(crate) fn arb_message() -> BoxedStrategy<Message> {
    (any::<u32>(), arb_body())
        .prop_map(|(xid, body)| Message::new(xid, body))
        .boxed()
}

/// A small Ethernet/IPv4/TCP frame for packet-in / packet-out samples: a
/// SYN 10.0.0.1:80 -> 10.0.0.2:8080. Both checksums are left zero, as the
/// golden vectors carrying this frame were made with them so.
pub(crate) fn sample_frame() -> Vec<u8> {
    FrameBuilder::eth([0x02, 0, 0, 0, 0, 2], [0x02, 0, 0, 0, 0, 1])
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2])
        .ident(1)
        .ip_checksum(Checksum::Zero)
        .tcp(80, 8080)
        .tcp_flags(tcp_flags::SYN)
        .tcp_window(0x2000)
        .l4_checksum(Checksum::Zero)
        .build()
}

fn sample_match() -> OxmMatch {
    let mut m = offlow_flow::Match::ANY;
    m.set_exact(Field::InPort, 1)
        .set_exact(Field::EthType, 0x0800)
        .set_prefix(Field::Ipv4Dst, 0x0a000000, 24)
        .set_exact(Field::IpProto, 6)
        .set_exact(Field::TcpDst, 80);
    OxmMatch::from_match(&m)
}

fn sample_instructions() -> Vec<Instruction> {
    vec![
        Instruction::ApplyActions(vec![
            Action::SetField(Field::EthDst, 0x0200_0000_0002),
            Action::DecNwTtl,
            Action::Output {
                port: 2,
                max_len: 0,
            },
        ]),
        Instruction::WriteMetadata {
            value: 0x10,
            mask: 0xff,
        },
        Instruction::GotoTable(1),
    ]
}

fn sample_port(no: u32) -> Port {
    Port {
        port_no: no,
        hw_addr: [2, 0, 0, 0, 0, no as u8],
        name: FixedStr::new(&format!("eth{no}")),
        config: 0,
        state: 4,    // OFPPS_LIVE
        curr: 0x820, // 10GB_FD | COPPER
        advertised: 0,
        supported: 0,
        peer: 0,
        curr_speed: 10_000_000,
        max_speed: 10_000_000,
    }
}

/// One sample per message kind: (file stem, message).
pub(crate) fn samples() -> Vec<(&'static str, Message)> {
    let flow_req = FlowStatsRequest {
        table_id: 0xff,
        out_port: 0xffff_ffff,
        out_group: 0xffff_ffff,
        cookie: 0,
        cookie_mask: 0,
        matcher: sample_match(),
    };
    let mp_req = |body| Body::MultipartRequest(MultipartRequest { flags: 0, body });
    let mp_rep = |body| Body::MultipartReply(MultipartReply { flags: 0, body });
    let mut desc = Desc {
        mfr_desc: FixedStr::new("offlow project"),
        hw_desc: FixedStr::new("software"),
        sw_desc: FixedStr::new("offlow 0.1"),
        serial_num: FixedStr::new("0"),
        dp_desc: FixedStr::new("test datapath"),
    };
    desc.dp_desc.0[255] = 0;
    let table_features = vec![TableFeatures {
        table_id: 0,
        name: FixedStr::new("table0"),
        metadata_match: u64::MAX,
        metadata_write: u64::MAX,
        config: 0,
        max_entries: 1_000_000,
        properties: vec![
            // OFPTFPT_INSTRUCTIONS: goto-table, apply-actions.
            TableFeatureProp {
                prop_type: 0,
                data: vec![0, 1, 0, 4, 0, 4, 0, 4],
            },
            // OFPTFPT_NEXT_TABLES: table 1.
            TableFeatureProp {
                prop_type: 2,
                data: vec![1],
            },
            // OFPTFPT_WRITE_ACTIONS / APPLY_ACTIONS: output, dec_nw_ttl.
            TableFeatureProp {
                prop_type: 4,
                data: vec![0, 0, 0, 4, 0, 24, 0, 4],
            },
            TableFeatureProp {
                prop_type: 6,
                data: vec![0, 0, 0, 4, 0, 24, 0, 4],
            },
            // OFPTFPT_MATCH: in_port, eth_type; WILDCARDS: eth_type.
            TableFeatureProp {
                prop_type: 8,
                data: vec![0x80, 0, 0, 4, 0x80, 0, 10, 2],
            },
            TableFeatureProp {
                prop_type: 10,
                data: vec![0x80, 0, 10, 2],
            },
            // OFPTFPT_WRITE_SETFIELD / APPLY_SETFIELD: eth_dst.
            TableFeatureProp {
                prop_type: 12,
                data: vec![0x80, 0, 6, 6],
            },
            TableFeatureProp {
                prop_type: 14,
                data: vec![0x80, 0, 6, 6],
            },
        ],
    }];
    let features_reply = GroupFeatures {
        types: 0xf,
        capabilities: 0x7,
        max_groups: [16; 4],
        actions: [1; 4],
    };
    let meter_mod = MeterMod {
        command: 0,
        flags: 1,
        meter_id: 1,
        bands: vec![MeterBand {
            kind: MeterBandKind::Drop,
            rate: 1000,
            burst_size: 0,
        }],
    };
    let list: Vec<(&'static str, Body)> = vec![
        ("hello", Body::Hello(Hello::of13())),
        (
            "error",
            Body::Error(ErrorMsg::Standard {
                // A slave's barrier request refused (the data is the
                // request, which ovs-ofctl decodes in turn).
                error: OfError::BadRequest(BadRequestCode::IsSlave),
                data: vec![4, 20, 0, 8, 0, 0, 0, 1],
            }),
        ),
        ("echo_request", Body::EchoRequest(b"ping".to_vec())),
        ("echo_reply", Body::EchoReply(b"ping".to_vec())),
        (
            "experimenter",
            Body::Experimenter(Experimenter {
                // Nicira NXT_TLV_TABLE_REQUEST (no payload): an
                // experimenter message ovs-ofctl can decode.
                experimenter: 0x0000_2320,
                exp_type: 25,
                data: vec![],
            }),
        ),
        ("features_request", Body::FeaturesRequest),
        (
            "features_reply",
            Body::FeaturesReply(SwitchFeatures {
                datapath_id: 0x1,
                n_buffers: 0,
                n_tables: 4,
                auxiliary_id: 0,
                capabilities: 0x4f,
                reserved: 0,
            }),
        ),
        ("get_config_request", Body::GetConfigRequest),
        (
            "get_config_reply",
            Body::GetConfigReply(SwitchConfig {
                flags: 0,
                miss_send_len: 128,
            }),
        ),
        (
            "set_config",
            Body::SetConfig(SwitchConfig {
                flags: 0,
                miss_send_len: 0xffff,
            }),
        ),
        (
            "packet_in",
            Body::PacketIn(PacketIn {
                buffer_id: OFP_NO_BUFFER,
                total_len: sample_frame().len() as u16,
                reason: 0,
                table_id: 0,
                cookie: 0,
                matcher: OxmMatch {
                    fields: vec![Oxm::exact(Field::InPort, 1)],
                },
                data: sample_frame(),
            }),
        ),
        (
            "flow_removed",
            Body::FlowRemoved(FlowRemoved {
                cookie: 0x42,
                priority: 100,
                reason: 0,
                table_id: 0,
                duration_sec: 10,
                duration_nsec: 500,
                idle_timeout: 10,
                hard_timeout: 0,
                packet_count: 5,
                byte_count: 300,
                matcher: sample_match(),
            }),
        ),
        (
            "port_status",
            Body::PortStatus(PortStatus {
                reason: 2,
                desc: sample_port(1),
            }),
        ),
        (
            "packet_out",
            Body::PacketOut(PacketOut {
                buffer_id: OFP_NO_BUFFER,
                in_port: 0xffff_fffd,
                actions: vec![Action::Output {
                    port: 1,
                    max_len: 0,
                }],
                data: sample_frame(),
            }),
        ),
        ("flow_mod", {
            let mut fm = FlowMod::add(0, 100, &sample_match().to_match(), sample_instructions());
            fm.cookie = 0x42;
            fm.flags = 1;
            Body::FlowMod(fm)
        }),
        (
            "group_mod",
            Body::GroupMod(GroupMod {
                command: 0,
                group_type: 1, // SELECT
                group_id: 1,
                buckets: vec![
                    Bucket {
                        weight: 1,
                        watch_port: 0xffff_ffff,
                        watch_group: 0xffff_ffff,
                        actions: vec![Action::Output {
                            port: 1,
                            max_len: 0,
                        }],
                    },
                    Bucket {
                        weight: 1,
                        watch_port: 0xffff_ffff,
                        watch_group: 0xffff_ffff,
                        actions: vec![
                            Action::PushVlan(0x8100),
                            Action::SetField(Field::VlanVid, 0x1000 | 10),
                            Action::Output {
                                port: 2,
                                max_len: 0,
                            },
                        ],
                    },
                ],
            }),
        ),
        (
            "port_mod",
            Body::PortMod(PortMod {
                port_no: 1,
                hw_addr: [2, 0, 0, 0, 0, 1],
                config: 1,
                mask: 1,
                advertise: 0,
            }),
        ),
        (
            "table_mod",
            Body::TableMod(TableMod {
                table_id: 0,
                config: 0,
            }),
        ),
        ("mp_desc_request", mp_req(MultipartRequestBody::Desc)),
        (
            "mp_flow_request",
            mp_req(MultipartRequestBody::Flow(flow_req.clone())),
        ),
        (
            "mp_aggregate_request",
            mp_req(MultipartRequestBody::Aggregate(flow_req)),
        ),
        ("mp_table_request", mp_req(MultipartRequestBody::Table)),
        (
            "mp_port_stats_request",
            mp_req(MultipartRequestBody::PortStats(0xffff_ffff)),
        ),
        (
            "mp_queue_request",
            mp_req(MultipartRequestBody::Queue {
                port_no: 0xffff_ffff,
                queue_id: 0xffff_ffff,
            }),
        ),
        (
            "mp_table_features_request",
            mp_req(MultipartRequestBody::TableFeatures(vec![])),
        ),
        (
            "mp_port_desc_request",
            mp_req(MultipartRequestBody::PortDesc),
        ),
        (
            "mp_group_desc_request",
            mp_req(MultipartRequestBody::GroupDesc),
        ),
        (
            "mp_desc_reply",
            mp_rep(MultipartReplyBody::Desc(Box::new(desc))),
        ),
        (
            "mp_flow_reply",
            mp_rep(MultipartReplyBody::Flow(vec![FlowStats {
                table_id: 0,
                duration_sec: 3,
                duration_nsec: 0,
                priority: 100,
                idle_timeout: 0,
                hard_timeout: 0,
                flags: 0,
                cookie: 0x42,
                packet_count: 7,
                byte_count: 700,
                matcher: sample_match(),
                instructions: sample_instructions(),
            }])),
        ),
        (
            "mp_aggregate_reply",
            mp_rep(MultipartReplyBody::Aggregate {
                packet_count: 7,
                byte_count: 700,
                flow_count: 1,
            }),
        ),
        (
            "mp_table_reply",
            mp_rep(MultipartReplyBody::Table(vec![TableStats {
                table_id: 0,
                active_count: 1,
                lookup_count: 10,
                matched_count: 7,
            }])),
        ),
        (
            "mp_port_stats_reply",
            mp_rep(MultipartReplyBody::PortStats(vec![PortStats {
                port_no: 1,
                rx_packets: 10,
                tx_packets: 20,
                rx_bytes: 1000,
                tx_bytes: 2000,
                duration_sec: 5,
                ..PortStats::default()
            }])),
        ),
        (
            "mp_queue_reply",
            mp_rep(MultipartReplyBody::Queue(vec![QueueStats {
                port_no: 1,
                queue_id: 0,
                tx_bytes: 100,
                tx_packets: 1,
                tx_errors: 0,
                duration_sec: 1,
                duration_nsec: 0,
            }])),
        ),
        (
            "mp_table_features_reply",
            mp_rep(MultipartReplyBody::TableFeatures(table_features)),
        ),
        (
            "mp_port_desc_reply",
            mp_rep(MultipartReplyBody::PortDesc(vec![
                sample_port(1),
                sample_port(2),
            ])),
        ),
        (
            "mp_group_features_reply",
            mp_rep(MultipartReplyBody::GroupFeatures(features_reply)),
        ),
        ("barrier_request", Body::BarrierRequest),
        ("barrier_reply", Body::BarrierReply),
        ("queue_get_config_request", Body::QueueGetConfigRequest(1)),
        (
            "queue_get_config_reply",
            Body::QueueGetConfigReply(QueueGetConfigReply {
                port: 1,
                queues: vec![PacketQueue {
                    queue_id: 1,
                    port: 1,
                    // OFPQT_MIN_RATE, len 16, rate 500 (per mille).
                    properties: vec![0, 1, 0, 16, 0, 0, 0, 0, 1, 0xf4, 0, 0, 0, 0, 0, 0],
                }],
            }),
        ),
        (
            "role_request",
            Body::RoleRequest(Role {
                role: 2,
                generation_id: 1,
            }),
        ),
        (
            "role_reply",
            Body::RoleReply(Role {
                role: 2,
                generation_id: 1,
            }),
        ),
        ("get_async_request", Body::GetAsyncRequest),
        (
            "get_async_reply",
            Body::GetAsyncReply(AsyncConfig {
                packet_in_mask: [0x7, 0],
                port_status_mask: [0x7, 0x7],
                flow_removed_mask: [0xf, 0],
            }),
        ),
        (
            "set_async",
            Body::SetAsync(AsyncConfig {
                packet_in_mask: [0x7, 0],
                port_status_mask: [0x7, 0x7],
                flow_removed_mask: [0xf, 0],
            }),
        ),
        ("meter_mod", Body::MeterMod(meter_mod)),
        (
            "mp_group_request",
            mp_req(MultipartRequestBody::GroupStats(1)),
        ),
        (
            "mp_group_reply",
            mp_rep(MultipartReplyBody::GroupStats(vec![GroupStats {
                group_id: 1,
                ref_count: 2,
                packet_count: 30,
                byte_count: 4000,
                duration_sec: 5,
                duration_nsec: 6,
                bucket_stats: vec![
                    BucketCounter {
                        packet_count: 10,
                        byte_count: 1000,
                    },
                    BucketCounter {
                        packet_count: 20,
                        byte_count: 3000,
                    },
                ],
            }])),
        ),
        (
            "mp_group_desc_reply",
            mp_rep(MultipartReplyBody::GroupDesc(vec![GroupDesc {
                group_type: 1, // OFPGT_SELECT
                group_id: 1,
                buckets: vec![
                    Bucket {
                        weight: 1,
                        watch_port: 0xffff_ffff,
                        watch_group: 0xffff_ffff,
                        actions: vec![Action::Output {
                            port: 1,
                            max_len: 0,
                        }],
                    },
                    Bucket {
                        weight: 2,
                        watch_port: 0xffff_ffff,
                        watch_group: 0xffff_ffff,
                        actions: vec![Action::Output {
                            port: 2,
                            max_len: 0,
                        }],
                    },
                ],
            }])),
        ),
        (
            "mp_group_features_request",
            mp_req(MultipartRequestBody::GroupFeatures),
        ),
        (
            "mp_meter_request",
            mp_req(MultipartRequestBody::MeterStats(1)),
        ),
        (
            "mp_meter_reply",
            mp_rep(MultipartReplyBody::MeterStats(vec![MeterStats {
                meter_id: 1,
                flow_count: 1,
                packet_in_count: 30,
                byte_in_count: 4000,
                duration_sec: 5,
                duration_nsec: 6,
                band_stats: vec![MeterBandStats {
                    packet_band_count: 3,
                    byte_band_count: 400,
                }],
            }])),
        ),
        (
            "mp_meter_config_request",
            mp_req(MultipartRequestBody::MeterConfig(0xffff_ffff)),
        ),
        (
            "mp_meter_config_reply",
            mp_rep(MultipartReplyBody::MeterConfig(vec![MeterConfig {
                flags: 0b1101, // KBPS | BURST | STATS
                meter_id: 1,
                bands: vec![
                    MeterBand {
                        kind: MeterBandKind::DscpRemark { prec_level: 1 },
                        rate: 1000,
                        burst_size: 100,
                    },
                    MeterBand {
                        kind: MeterBandKind::Drop,
                        rate: 2000,
                        burst_size: 200,
                    },
                ],
            }])),
        ),
        (
            "mp_meter_features_request",
            mp_req(MultipartRequestBody::MeterFeatures),
        ),
        (
            "mp_meter_features_reply",
            mp_rep(MultipartReplyBody::MeterFeatures(MeterFeatures {
                max_meter: 1024,
                band_types: 0b110, // 1 << DROP | 1 << DSCP_REMARK
                capabilities: 0xf,
                max_bands: 8,
                max_color: 0,
            })),
        ),
    ];
    list.into_iter()
        .enumerate()
        .map(|(i, (n, b))| (n, Message::new(0x100 + i as u32, b)))
        .collect()
}

/// Lower-case hex without separators.
pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Parse hex, ignoring whitespace.
pub(crate) fn unhex(s: &str) -> Vec<u8> {
    let d: Vec<u8> = s.bytes().filter(|c| !c.is_ascii_whitespace()).collect();
    d.chunks(2)
        .map(|c| u8::from_str_radix(std::str::from_utf8(c).unwrap(), 16).unwrap())
        .collect()
}
