//! Action execution on frames: applies a final action list (OpenFlow 1.3.5
//! §5.12) to one frame in place and hands outputs to an [`OutputSink`].
//!
//! # What is done where
//! - Set-field writes the frame bytes of the field on the header the
//!   [`Layout`] locates; a field whose header the frame lacks is counted
//!   (`set_field_no_header`) and skipped, as is a write that would fall
//!   outside the frame (`write_out_of_range`; the layout came from the
//!   parser, so this only fires for inconsistent layouts).
//! - Checksums are updated incrementally (RFC 1624) for the IPv4 header and
//!   for TCP, UDP and ICMPv6, including their pseudo-headers (the IP
//!   addresses, and for IPv4 the protocol), and ICMPv4. A UDP checksum of 0
//!   means "none" and stays 0 (RFC 768; over IPv6 such a packet is invalid
//!   anyway and is left as received). SCTP's CRC32c (RFC 9260 §6.8) is not
//!   linear in the way RFC 1624 needs, so it is recomputed over the whole
//!   SCTP packet after a port change.
//! - `ip_proto` sets IPv4's protocol, or IPv6's next header when no
//!   extension header follows (with one, the field is the last header's;
//!   counted as unsupported). The bytes behind are relabelled, not
//!   converted: a TCP or UDP checksum is updated for the pseudo-header's
//!   new protocol, then the layout's `l4` is cleared (the header it names
//!   is gone). `eth_type` rewrites the EtherType after the tags and
//!   re-parses the frame; so does a write of `mpls_bos`.
//! - ND target / SLL / TLL are rewritten only where they exist (NS/NA with
//!   code 0; the first SLL option of an NS, the first TLL option of an NA,
//!   as the parser reads them); no option is ever added.
//! - `tunnel_id` and `metadata` have no frame bytes: they are reported in
//!   [`ExecOutcome`] for the output path. `in_port`, `in_phy_port`,
//!   `ipv6_exthdr` are not settable here
//!   (`set_field_unsupported`; validation refuses them). `pbb_isid` rewrites
//!   the I-SID of the outer I-TAG, keeping its other bits.
//! - Push/pop VLAN insert/remove 4 bytes behind the MAC addresses using the
//!   buffer's headroom (only the 12 MAC bytes move) and shift the layout.
//!   Push-MPLS inserts a label after the tags (only the L2 header moves);
//!   pop-MPLS removes the top label and re-parses the frame to rebuild the
//!   layout (the layer below a label stack was never parsed; pops are rare,
//!   so a parse is cheaper than tracking it). Copy-TTL works between the top
//!   label and the label or IPv4/IPv6 header below it; elsewhere (IP-in-IP)
//!   it is counted (`copy_ttl_unsupported`). Set/dec MPLS TTL and the MPLS
//!   set-fields work on the top label.
//! - Push-PBB (IEEE 802.1ah, OpenFlow 1.3.5 §7.2.5) puts a backbone
//!   header in front of the frame: B-DA and B-SA copied from the frame's
//!   own addresses (which stay as C-DA, C-SA, followed by the frame's tags
//!   and everything else), EtherType 0x88e7 and an I-TAG with every field 0
//!   (I-PCP, I-DEI, UCA, I-SID: set the I-SID with set-field `pbb_isid`).
//!   Only headroom is used: the 18 new bytes go in front, nothing moves.
//!   Pop-PBB drops everything up to the customer header (backbone
//!   addresses, B-tags, EtherType, I-TAG) by advancing the frame start.
//!   Both re-parse the frame for its layout, as pop-MPLS does.
//! - Meter (the pipeline-internal action a flow's Meter instruction
//!   becomes, OpenFlow 1.3.5 §5.7) charges the frame, as long as it is at
//!   that point, to the meter of [`Prepared::meters`] at
//!   [`Prepared::now_ns`]: a drop band stops execution
//!   ([`ExecOutcome::meter_drop`], counted `meter_dropped`); a DSCP_REMARK
//!   band rewrites the IPv4 DSCP (header checksum updated) or the IPv6
//!   traffic class as set-field `ip_dscp` does, by `remark_dscp`; a frame
//!   without IP is left as is (`meter_remark_no_ip`). A meter the table
//!   lacks (cannot happen for a validated version) is counted
//!   (`meter_missing`) and the packet goes on.
//! - Dec-TTL with a TTL of 0 or 1 stops execution with
//!   [`Verdict::TtlExpired`]: the packet must not be forwarded; the caller
//!   sends it to the controller with reason `OFPR_INVALID_TTL` when the
//!   switch config asks for it (OpenFlow 1.3.5 §7.3.2, `OFPC_INVALID_TTL_TO_CONTROLLER`).
//!
//! # Known limits
//! - An IPv6 packet with a routing header uses the final destination, not
//!   `ipv6_dst`, in its transport pseudo-header (RFC 8200 §8.1); the layout
//!   does not say whether a routing header is present, so rewriting
//!   `ipv6_dst` on such a packet updates the transport checksum as if it
//!   had none (Open vSwitch has the same limit).
//! - `ip_proto` on IPv6 behind extension headers is not executed (counted).
//! - Set-field writes only fields the frame has: it never adds a header or
//!   an ND option.
//!
//! # Output contract
//! Each output hands the sink a borrowed view of the frame as it is at that
//! moment. [`OutputMeta::final_view`] is true when no later action of the
//! list can modify the frame: the bytes the sink sees are then exactly the
//! bytes left in the buffer after [`execute`] returns, so a sink may record
//! "transmit the buffer" instead of copying (the single-output fast case).
//! When it is false the sink must copy if it keeps the frame.
//!
//! # Invariants
//! - Never panics, whatever the frame, layout and actions (fuzzed): every
//!   read and write goes through a bounds-checked helper.
//! - No allocation; loops are bounded by the action list, the port list and
//!   the frame length.
//! - After a push/pop, `layout` points at the same headers as before.
//!
//! # Thread-safety
//! Pure function over its arguments; [`ExecStats`] is per worker.

use crate::buf::PacketBuf;
use offlow_flow::{Field, L3Kind, L4Kind, Layout, TunnelKind};
use offlow_pipeline::group::{GroupTable, GroupType, MAX_CHAIN};
use offlow_pipeline::meter::{remark_dscp, MeterTable, MeterVerdict};
use offlow_pipeline::{Action, PacketInOrigin, PortNo, CONTROLLER_NO_BUFFER};
pub use offlow_wire::checksum::{crc32c, sctp_checksum};
use offlow_wire::checksum::{sum_array, update16, update_bytes};
use offlow_wire::ethernet::ethertype;
use offlow_wire::{arp, ethernet, icmpv4, icmpv6, ipv4, ipv6, mpls, pbb, sctp, tcp, udp, vlan};

/// The layout locates a VLAN tag at its TPID (the EtherType slot before
/// it); the TCI follows, where `offlow_wire::vlan::Tag` starts.
const TCI_IN_TAG: usize = 2;

/// Where push-VLAN inserts a tag and pop-VLAN removes one: right after the
/// MAC addresses, in the EtherType's place (§5.12).
const TAG_AT: usize = ethernet::field::ETHERTYPE.start;

/// Bytes of one VLAN tag (TPID and TCI).
const TAG_LEN: usize = vlan::TAG_LEN;

/// Whether a port takes part in FLOOD/ALL expansion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortInfo {
    /// The port number.
    pub port: u32,
    /// `OFPPC_NO_FWD`: drop packets forwarded to the port (excluded from ALL
    /// and FLOOD).
    pub no_fwd: bool,
    /// `OFPPC_NO_FLOOD` or `OFPPS_BLOCKED`: excluded from FLOOD.
    pub no_flood: bool,
}

/// Per-output details given to the sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputMeta {
    /// Queue chosen by the last Set-Queue before this output.
    pub queue: Option<u32>,
    /// No later action can modify the frame (see the module docs).
    pub final_view: bool,
    /// The packet's `tunnel_id` now (0 without one): the key an output to
    /// a `key=flow` tunnel port sends.
    pub tunnel_id: u64,
}

/// Receives the outputs of [`execute`].
pub trait OutputSink {
    /// Transmit `frame` on `port` (a physical/logical port or `OFPP_LOCAL`).
    fn output(&mut self, port: u32, frame: &[u8], meta: OutputMeta);
    /// An output to CONTROLLER (a packet-in): `frame` is the whole frame,
    /// `max_len` the action's (how much of it the controller is shown,
    /// [`controller_len`]; a sink that keeps the rest can offer it to the
    /// controller as a buffered packet); `origin` is the flow entry that
    /// sent it (its table, cookie, and whether it is
    /// a table-miss entry: reason `OFPR_NO_MATCH`, else `OFPR_ACTION`), or
    /// [`PacketInOrigin::UNKNOWN`] when the actions were executed without
    /// their [`Prepared::origins`].
    fn controller(&mut self, frame: &[u8], max_len: u16, origin: PacketInOrigin, meta: OutputMeta);
    /// Number of ports known for FLOOD/ALL expansion.
    fn port_count(&self) -> usize;
    /// The `index`-th port (`index < port_count()`).
    fn port_info(&self, index: usize) -> Option<PortInfo>;
    /// Hand a packet to another worker: its decision allows only the
    /// workers in `mask` (bit i = worker i), and not the one calling.
    /// `packet` is the frame as received (nothing executed yet) with the
    /// metadata the receiving worker must restore; `hash` is the packet's
    /// flow hash, for picking one worker of the mask so a flow stays on one
    /// worker. Return true when the frame was taken (or dropped and counted
    /// by the sink): the caller then neither executes nor counts it. False
    /// (the default: no other workers) processes it here.
    fn steer(&mut self, mask: u64, hash: u64, packet: SteeredFrame<'_>) -> bool {
        let _ = (mask, hash, packet);
        false
    }

    /// A Dec-TTL found the TTL at 0 or 1 and the packet was dropped: the
    /// frame as it was then, for a packet-in with reason
    /// `OFPR_INVALID_TTL` (OpenFlow 1.3: sent when the controller's async
    /// mask asks for that reason), with the flow entry it reports. The
    /// default ignores it.
    fn ttl_expired(&mut self, frame: &[u8], in_port: u32, origin: PacketInOrigin) {
        let _ = (frame, in_port, origin);
    }
}

/// A packet handed to another worker ([`OutputSink::steer`]): everything
/// the receiving worker needs to run it exactly as this one would have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SteeredFrame<'a> {
    /// The frame as received (a decapsulated frame: the inner one).
    pub frame: &'a [u8],
    /// The port it entered the pipeline on.
    pub in_port: u32,
    /// Its `tunnel_id` beyond its bytes ([`crate::PacketBuf::tunnel_id`]):
    /// a decapsulated frame's key, which rules may match on, so it must
    /// travel with the frame.
    pub tunnel_id: Option<u64>,
}

/// How execution ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Verdict {
    /// Every action was applied (or counted and skipped).
    #[default]
    Done,
    /// Dec-NW-TTL found a TTL of 0 or 1: stopped at that action, the
    /// packet must be dropped (or sent with `OFPR_INVALID_TTL`).
    TtlExpired,
    /// Dec-MPLS-TTL found a TTL of 0 or 1 (same handling).
    MplsTtlExpired,
}

/// What [`execute`] did, beyond the frame bytes and the sink calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExecOutcome {
    /// How execution ended.
    pub verdict: Verdict,
    /// Frames handed to the sink (port outputs plus controller outputs).
    pub outputs: u32,
    /// Last Set-Queue value.
    pub queue: Option<u32>,
    /// Last set-field `tunnel_id` (no frame bytes; for the tunnel port).
    pub tunnel_id: Option<u64>,
    /// Last set-field `metadata` (pipeline-only; no frame bytes).
    pub metadata: Option<u64>,
    /// An output to `OFPP_TABLE` was seen: valid only in a packet-out, where
    /// the caller submits the (rewritten) frame to table 0.
    pub to_table: bool,
    /// A meter's drop band stopped execution at its Meter action: the
    /// packet is dropped (by rate, not by error; not a TTL expiry).
    pub meter_drop: bool,
}

/// Defines [`ExecStats`] with one `u64` per reason.
macro_rules! exec_stats {
    ($( $(#[$doc:meta])* $name:ident, )+) => {
        /// Per-worker counters of actions skipped or packets dropped during
        /// execution, one per reason.
        #[derive(Debug, Clone, Default, PartialEq, Eq)]
        pub struct ExecStats {
            $( $(#[$doc])* pub $name: u64, )+
        }

        impl ExecStats {
            /// Counter names, in declaration order.
            pub const NAMES: &'static [&'static str] = &[$(stringify!($name)),+];

            /// `(name, value)` pairs, in declaration order.
            pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> {
                [$((stringify!($name), self.$name)),+].into_iter()
            }

            /// Add every counter of `other` into `self`.
            pub fn merge(&mut self, other: &ExecStats) {
                $( self.$name += other.$name; )+
            }

            /// Sum of all counters.
            pub fn total(&self) -> u64 {
                0 $( + self.$name )+
            }
        }
    };
}

exec_stats! {
    /// Set-field on a header the frame does not have (prerequisite unmet).
    set_field_no_header,
    /// Set-field VLAN_VID/PCP on an untagged frame (§7.2.3.8: the field
    /// rewrites an existing tag; it does not push one).
    set_vlan_no_tag,
    /// Set-field on a field not settable on the frame (in_port, eth_type,
    /// ipv6_exthdr, ip_proto on IPv6).
    set_field_unsupported,
    /// A write the layout placed outside the frame (inconsistent layout).
    write_out_of_range,
    /// Set/dec NW TTL on a frame without IPv4/IPv6.
    ttl_no_ip,
    /// Dec-NW-TTL on TTL 0 or 1: packet dropped.
    ttl_expired,
    /// Set/dec MPLS TTL on a frame without an MPLS label.
    mpls_ttl_no_label,
    /// Dec-MPLS-TTL on TTL 0 or 1: packet dropped.
    mpls_ttl_expired,
    /// Push-VLAN without headroom.
    push_vlan_no_room,
    /// Push-VLAN on a frame shorter than an Ethernet header.
    push_vlan_runt,
    /// Push-VLAN with a TPID other than 0x8100 / 0x88a8 (§5.12).
    push_vlan_bad_tpid,
    /// Pop-VLAN on an untagged frame.
    pop_vlan_no_tag,
    /// Push-MPLS with an EtherType other than 0x8847 / 0x8848 (§5.12).
    push_mpls_bad_ethertype,
    /// Push-MPLS without headroom or without a parsed EtherType.
    push_mpls_no_room,
    /// Pop-MPLS on a frame without an MPLS label.
    pop_mpls_no_label,
    /// Push-PBB with an EtherType other than 0x88e7 (§7.2.5).
    push_pbb_bad_ethertype,
    /// Push-PBB without headroom or on a frame shorter than an Ethernet
    /// header.
    push_pbb_no_room,
    /// Pop-PBB on a frame without an I-TAG and a complete customer header.
    pop_pbb_no_itag,
    /// Copy-TTL-in/out without an MPLS label over a label or IPv4/IPv6.
    copy_ttl_unsupported,
    /// Output to the ingress port by number (§4.5: only OFPP_IN_PORT sends
    /// a packet back where it came from).
    output_to_ingress_skipped,
    /// Output to port 0, OFPP_ANY or another invalid port.
    output_invalid_port,
    /// Output to OFPP_NORMAL (not supported).
    output_normal_unsupported,
    /// Output to OFPP_TABLE (reported in the outcome).
    output_table,
    /// Group action naming a group the table does not hold (or executed
    /// without a group table): the action is skipped.
    group_missing,
    /// Group action whose group had no bucket to take (a select or
    /// fast-failover group with no live bucket): the group drops its copy.
    group_no_bucket,
    /// Group chain deeper than the group table allows (cannot happen for a
    /// validated table): the inner group is skipped.
    group_too_deep,
    /// Experimenter action (not supported).
    experimenter_unsupported,
    /// Meter action whose meter band dropped the packet.
    meter_dropped,
    /// Meter action whose DSCP_REMARK band rewrote the packet's DSCP.
    meter_remarked,
    /// DSCP_REMARK band applied to a frame without IPv4/IPv6: unchanged.
    meter_remark_no_ip,
    /// Meter action naming a meter the table does not hold (or executed
    /// without a meter table): the packet goes on unmetered.
    meter_missing,
}

// ---------------------------------------------------------------------------
// Bounds-checked access. Every frame access of this module goes through
// these, so no layout can make execution index out of bounds.

#[inline(always)]
fn rd8(f: &[u8], at: usize) -> Option<u8> {
    f.get(at).copied()
}

#[inline(always)]
fn rd16(f: &[u8], at: usize) -> Option<u16> {
    let b = f.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([b[0], b[1]]))
}

#[inline(always)]
fn rd<const N: usize>(f: &[u8], at: usize) -> Option<[u8; N]> {
    f.get(at..at.checked_add(N)?)?.try_into().ok()
}

#[inline(always)]
fn wr(f: &mut [u8], at: usize, v: &[u8]) -> bool {
    match at.checked_add(v.len()).and_then(|end| f.get_mut(at..end)) {
        Some(d) => {
            d.copy_from_slice(v);
            true
        }
        None => false,
    }
}

#[inline(always)]
fn wr16(f: &mut [u8], at: usize, v: u16) -> bool {
    wr(f, at, &v.to_be_bytes())
}

// ---------------------------------------------------------------------------

/// Context of one execution, kept together so helpers take one argument.
struct Ctx<'a> {
    lay: &'a mut Layout,
    stats: &'a mut ExecStats,
    out: ExecOutcome,
    /// Origins of the outputs to CONTROLLER, in order.
    origins: &'a [PacketInOrigin],
    /// Outputs to CONTROLLER executed so far.
    to_controller: usize,
}

/// How many bytes of a `frame_len`-byte frame an output to CONTROLLER with
/// `max_len` shows the controller. §7.2.6.1: "A max_len of
/// OFPCML_NO_BUFFER means ... the complete packet is to be sent";
/// otherwise at most max_len bytes (0 is valid and sends none).
pub fn controller_len(frame_len: usize, max_len: u16) -> usize {
    if max_len == CONTROLLER_NO_BUFFER {
        frame_len
    } else {
        frame_len.min(usize::from(max_len))
    }
}

/// An action list with what [`execute_prepared`] needs beside it, computed
/// once by callers that execute one list many times (the Action Table).
#[derive(Debug, Clone, Copy)]
pub struct Prepared<'a> {
    /// The actions, in order.
    pub actions: &'a [Action],
    /// [`last_frame_write`]`(actions)`. A wrong value only mislabels
    /// [`OutputMeta::final_view`] on outputs.
    pub last_write: Option<usize>,
    /// The flow entry behind each output to CONTROLLER in `actions`, in
    /// order (`Resolution::origins`); missing ones are reported as
    /// [`PacketInOrigin::UNKNOWN`].
    pub origins: &'a [PacketInOrigin],
    /// The group table group actions run through (the pipeline version the
    /// actions came from); `None`: every group action is skipped and
    /// counted (`group_missing`).
    pub groups: Option<&'a GroupTable>,
    /// The packet's flow hash: what a select group chooses its bucket by,
    /// so every packet of a flow takes the same bucket.
    pub flow_hash: u64,
    /// The meter table Meter actions run through (the pipeline version the
    /// actions came from); `None`: every Meter action is counted
    /// (`meter_missing`) and the packet goes on.
    pub meters: Option<&'a MeterTable>,
    /// The time meters are charged at (nanoseconds of the clock the meters
    /// were created with: [`crate::clock::now_ns`] in the switch).
    pub now_ns: u64,
}

impl<'a> Prepared<'a> {
    /// `actions` with nothing known about their origins, and no groups.
    pub fn new(actions: &'a [Action]) -> Prepared<'a> {
        Prepared {
            actions,
            last_write: last_frame_write(actions),
            origins: &[],
            groups: None,
            flow_hash: 0,
            meters: None,
            now_ns: 0,
        }
    }

    /// The same list, its group actions run through `groups` with
    /// `flow_hash` choosing select buckets.
    pub fn with_groups(self, groups: &'a GroupTable, flow_hash: u64) -> Prepared<'a> {
        Prepared {
            groups: Some(groups),
            flow_hash,
            ..self
        }
    }

    /// The same list, its Meter actions charged to `meters` at `now_ns`.
    pub fn with_meters(self, meters: &'a MeterTable, now_ns: u64) -> Prepared<'a> {
        Prepared {
            meters: Some(meters),
            now_ns,
            ..self
        }
    }
}

/// Apply `actions` in order to the frame in `buf`, whose headers `layout`
/// locates (as produced by `offlow_flow::extract` for this frame), received
/// on `in_port`. Outputs go to `out`; anomalies are counted in `stats`.
/// `layout` is kept pointing at the same headers through pushes and pops.
pub fn execute<S, O>(
    actions: &[Action],
    buf: &mut PacketBuf<S>,
    layout: &mut Layout,
    in_port: u32,
    out: &mut O,
    stats: &mut ExecStats,
) -> ExecOutcome
where
    S: AsRef<[u8]> + AsMut<[u8]>,
    O: OutputSink + ?Sized,
{
    execute_prepared(Prepared::new(actions), buf, layout, in_port, out, stats)
}

/// Index of the last action of `actions` that may change the frame (outputs
/// after it see the final bytes, [`OutputMeta::final_view`]); a property of
/// the list alone, so callers that execute one list many times (the Action
/// Table) compute it once.
pub fn last_frame_write(actions: &[Action]) -> Option<usize> {
    actions.iter().rposition(modifies_frame)
}

/// [`execute`] of a [`Prepared`] list: its `last_write` given, and the
/// origins of its packet-ins known.
#[inline]
pub fn execute_prepared<S, O>(
    prepared: Prepared<'_>,
    buf: &mut PacketBuf<S>,
    layout: &mut Layout,
    in_port: u32,
    out: &mut O,
    stats: &mut ExecStats,
) -> ExecOutcome
where
    S: AsRef<[u8]> + AsMut<[u8]>,
    O: OutputSink + ?Sized,
{
    execute_at_depth(prepared, buf, layout, in_port, out, stats, 0)
}

/// [`execute_prepared`] of a list `depth` groups deep (0: a flow's list).
fn execute_at_depth<S, O>(
    prepared: Prepared<'_>,
    buf: &mut PacketBuf<S>,
    layout: &mut Layout,
    in_port: u32,
    out: &mut O,
    stats: &mut ExecStats,
    depth: usize,
) -> ExecOutcome
where
    S: AsRef<[u8]> + AsMut<[u8]>,
    O: OutputSink + ?Sized,
{
    let Prepared {
        actions,
        last_write,
        origins,
        groups,
        flow_hash,
        meters,
        now_ns,
    } = prepared;
    let mut cx = Ctx {
        lay: layout,
        stats,
        out: ExecOutcome::default(),
        origins,
        to_controller: 0,
    };
    for (i, a) in actions.iter().enumerate() {
        match *a {
            Action::Output { port, max_len } => {
                let meta = OutputMeta {
                    queue: cx.out.queue,
                    final_view: last_write.is_none_or(|w| i > w),
                    tunnel_id: buf.tunnel_id().unwrap_or(0),
                };
                output(&mut cx, buf.frame(), port, max_len, in_port, meta, out);
            }
            Action::SetField(field, value) => {
                if field == Field::TunnelId {
                    buf.set_tunnel_id(Some(value as u64));
                }
                set_field(&mut cx, buf.frame_mut(), field, value)
            }
            Action::SetNwTtl(ttl) => {
                set_nw_ttl(&mut cx, buf.frame_mut(), |_| Some(ttl));
            }
            Action::DecNwTtl => {
                // A TTL of 0 or 1 "would expire": OVS and §5.12 drop it
                // rather than forward a packet with TTL 0.
                let alive = set_nw_ttl(&mut cx, buf.frame_mut(), |t| {
                    t.checked_sub(1).filter(|&n| n > 0)
                });
                if !alive {
                    cx.stats.ttl_expired += 1;
                    cx.out.verdict = Verdict::TtlExpired;
                    return cx.out;
                }
            }
            Action::SetMplsTtl(ttl) => {
                mpls_ttl(&mut cx, buf.frame_mut(), |_| Some(ttl));
            }
            Action::DecMplsTtl => {
                let alive = mpls_ttl(&mut cx, buf.frame_mut(), |t| {
                    t.checked_sub(1).filter(|&n| n > 0)
                });
                if !alive {
                    cx.stats.mpls_ttl_expired += 1;
                    cx.out.verdict = Verdict::MplsTtlExpired;
                    return cx.out;
                }
            }
            Action::PushVlan(tpid) => push_vlan(&mut cx, buf, tpid),
            Action::PopVlan => pop_vlan(&mut cx, buf),
            Action::PushMpls(et) => push_mpls(&mut cx, buf, et),
            Action::PopMpls(et) => pop_mpls(&mut cx, buf, et, in_port),
            Action::PushPbb(et) => push_pbb(&mut cx, buf, et, in_port),
            Action::PopPbb => pop_pbb(&mut cx, buf, in_port),
            Action::CopyTtlOut => copy_ttl(&mut cx, buf.frame_mut(), false),
            Action::CopyTtlIn => copy_ttl(&mut cx, buf.frame_mut(), true),
            Action::SetQueue(q) => cx.out.queue = Some(q),
            // Steering is the worker's business, decided before execution.
            Action::SetWorkers(_) => {}
            Action::Group(id) => {
                let Some(table) = groups else {
                    cx.stats.group_missing += 1;
                    continue;
                };
                let g = GroupRun {
                    table,
                    flow_hash,
                    in_place: i + 1 == actions.len(),
                    depth,
                };
                g.run(&mut cx, id, buf, in_port, out);
            }
            Action::Experimenter(_) => cx.stats.experimenter_unsupported += 1,
            Action::Meter(id) => {
                let Some(meter) = meters.and_then(|t| t.get(id)) else {
                    cx.stats.meter_missing += 1;
                    continue;
                };
                // A frame is far below 4 GiB; saturate rather than wrap.
                let len = u32::try_from(buf.len()).unwrap_or(u32::MAX);
                match meter.admit(now_ns, len) {
                    MeterVerdict::Pass => {}
                    MeterVerdict::Drop { .. } => {
                        cx.stats.meter_dropped += 1;
                        cx.out.meter_drop = true;
                        return cx.out;
                    }
                    MeterVerdict::Remark { prec_level, .. } => {
                        remark(&mut cx, buf.frame_mut(), prec_level);
                    }
                }
            }
        }
    }
    cx.out
}

/// A DSCP_REMARK band's rewrite: the frame's DSCP raised by `prec_level`
/// drop precedences ([`remark_dscp`]), written as set-field `ip_dscp`
/// writes it (IPv4 checksum updated incrementally).
fn remark(cx: &mut Ctx<'_>, f: &mut [u8], prec_level: u8) {
    let lay = *cx.lay;
    let l3 = lay.l3 as usize;
    let tos = match lay.l3_kind {
        L3Kind::Ipv4 => rd8(f, l3 + ipv4::field::DSCP_ECN),
        // The traffic class straddles the first two bytes.
        L3Kind::Ipv6 => rd16(f, l3 + ipv6::field::VER_TC_FLOW.start).map(|w| (w >> 4) as u8),
        _ => None,
    };
    let Some(tos) = tos else {
        cx.stats.meter_remark_no_ip += 1;
        return;
    };
    cx.stats.meter_remarked += 1;
    let dscp = tos >> 2;
    let new = remark_dscp(dscp, prec_level);
    if new != dscp && set_tos(lay, f, Field::IpDscp, new) != Some(true) {
        cx.stats.write_out_of_range += 1;
    }
}

/// One group action's execution (§5.6.1): each bucket the group takes
/// runs its action set ([`offlow_pipeline::group::Group::run`]) on its own
/// copy of the packet as it stands at the group action; nothing a bucket
/// does is seen by the actions after it.
struct GroupRun<'t> {
    table: &'t GroupTable,
    flow_hash: u64,
    /// The group action ends its list: its last bucket may run on the
    /// packet itself instead of a copy (nothing after it would see it).
    in_place: bool,
    /// Groups above this one (0: the group action is in a flow's list).
    depth: usize,
}

impl GroupRun<'_> {
    fn run<S, O>(
        &self,
        cx: &mut Ctx<'_>,
        id: u32,
        buf: &mut PacketBuf<S>,
        in_port: u32,
        out: &mut O,
    ) where
        S: AsRef<[u8]> + AsMut<[u8]>,
        O: OutputSink + ?Sized,
    {
        let Some(group) = self.table.get(id) else {
            cx.stats.group_missing += 1;
            return;
        };
        if self.depth >= MAX_CHAIN {
            cx.stats.group_too_deep += 1;
            return;
        }
        let bytes = buf.len() as u64;
        group.counters.add_packet(bytes);
        let (first, end) = match group.kind {
            GroupType::All => (0, group.buckets.len()),
            _ => match self.table.pick(group, self.flow_hash) {
                Some(b) => (b, b + 1),
                None => {
                    cx.stats.group_no_bucket += 1;
                    return;
                }
            },
        };
        for b in first..end {
            group.counters.add_bucket(b, bytes);
            let Some(actions) = group.run.get(b) else {
                continue;
            };
            let prepared = Prepared {
                groups: Some(self.table),
                flow_hash: self.flow_hash,
                ..Prepared::new(actions)
            };
            let done = if self.in_place && b + 1 == end {
                execute_at_depth(
                    prepared,
                    buf,
                    cx.lay,
                    in_port,
                    out,
                    cx.stats,
                    self.depth + 1,
                )
            } else {
                // The copy keeps the default headroom for the bucket's
                // pushes; a rare path (groups), so a fresh buffer is fine.
                let mut copy = PacketBuf::from_frame(buf.frame(), 0);
                copy.set_tunnel_id(buf.tunnel_id());
                let mut layout = *cx.lay;
                execute_at_depth(
                    prepared,
                    &mut copy,
                    &mut layout,
                    in_port,
                    out,
                    cx.stats,
                    self.depth + 1,
                )
            };
            cx.out.outputs += done.outputs;
        }
    }
}

/// May this action change the frame bytes?
fn modifies_frame(a: &Action) -> bool {
    match a {
        Action::SetField(f, _) => !matches!(f, Field::TunnelId | Field::Metadata),
        Action::SetNwTtl(_)
        | Action::DecNwTtl
        | Action::CopyTtlOut
        | Action::CopyTtlIn
        | Action::PushVlan(_)
        | Action::PopVlan
        | Action::PushMpls(_)
        | Action::PopMpls(_)
        | Action::PushPbb(_)
        | Action::PopPbb
        | Action::SetMplsTtl(_)
        | Action::DecMplsTtl
        // A DSCP_REMARK band rewrites the DSCP.
        | Action::Meter(_) => true,
        Action::Output { .. }
        | Action::SetQueue(_)
        | Action::SetWorkers(_)
        | Action::Group(_)
        | Action::Experimenter(_) => false,
    }
}

fn output<O: OutputSink + ?Sized>(
    cx: &mut Ctx<'_>,
    frame: &[u8],
    port: PortNo,
    max_len: u16,
    in_port: u32,
    meta: OutputMeta,
    out: &mut O,
) {
    match port {
        PortNo::IN_PORT => {
            out.output(in_port, frame, meta);
            cx.out.outputs += 1;
        }
        PortNo::CONTROLLER => {
            let origin = cx
                .origins
                .get(cx.to_controller)
                .copied()
                .unwrap_or(PacketInOrigin::UNKNOWN);
            cx.to_controller += 1;
            out.controller(frame, max_len, origin, meta);
            cx.out.outputs += 1;
        }
        PortNo::LOCAL => {
            out.output(PortNo::LOCAL.0, frame, meta);
            cx.out.outputs += 1;
        }
        PortNo::ALL | PortNo::FLOOD => {
            // §4.5: ALL is "all standard ports, excluding the ingress port
            // and ports configured OFPPC_NO_FWD"; FLOOD further excludes
            // ports that are blocked or configured OFPPC_NO_FLOOD.
            let flood = port == PortNo::FLOOD;
            for i in 0..out.port_count() {
                let Some(p) = out.port_info(i) else { continue };
                if p.port == in_port || p.no_fwd || (flood && p.no_flood) {
                    continue;
                }
                out.output(p.port, frame, meta);
                cx.out.outputs += 1;
            }
        }
        PortNo::TABLE => {
            cx.stats.output_table += 1;
            cx.out.to_table = true;
        }
        PortNo::NORMAL => cx.stats.output_normal_unsupported += 1,
        p if p.is_physical() => {
            if p.0 == in_port {
                cx.stats.output_to_ingress_skipped += 1;
            } else {
                out.output(p.0, frame, meta);
                cx.out.outputs += 1;
            }
        }
        _ => cx.stats.output_invalid_port += 1,
    }
}

// ---------------------------------------------------------------------------
// Set-field.

/// Low 48 bits of `v` as a MAC address.
#[inline(always)]
fn mac_bytes(v: u128) -> [u8; 6] {
    let b = (v as u64).to_be_bytes();
    [b[2], b[3], b[4], b[5], b[6], b[7]]
}

fn set_field(cx: &mut Ctx<'_>, f: &mut [u8], field: Field, value: u128) {
    let v = value & field.full_mask();
    let lay = *cx.lay;
    let l3 = lay.l3 as usize;
    let l4 = lay.l4 as usize;
    let ok = match field {
        Field::EthDst => Some(wr(f, ethernet::field::DESTINATION.start, &mac_bytes(v))),
        Field::EthSrc => Some(wr(f, ethernet::field::SOURCE.start, &mac_bytes(v))),
        Field::VlanVid | Field::VlanPcp => {
            if lay.vlan_count == 0 || lay.vlan[0] == 0 {
                cx.stats.set_vlan_no_tag += 1;
                return;
            }
            let at = lay.vlan[0] as usize + TCI_IN_TAG;
            Some(match rd16(f, at) {
                Some(tci) => {
                    let tci = if field == Field::VlanVid {
                        // The OXM value may carry OFPVID_PRESENT (0x1000);
                        // only the 12 VID bits go on the wire.
                        (tci & 0xf000) | (v as u16 & 0x0fff)
                    } else {
                        (tci & 0x1fff) | ((v as u16 & 7) << 13)
                    };
                    wr16(f, at, tci)
                }
                None => false,
            })
        }
        Field::IpDscp | Field::IpEcn => set_tos(lay, f, field, v as u8),
        Field::IpProto => {
            let r = set_ip_proto(cx, f, v as u8);
            if r == Some(true) {
                // The bytes at l4 are no longer the header l4_kind names.
                cx.lay.l4 = 0;
                cx.lay.l4_kind = L4Kind::None;
                cx.lay.tunnel = TunnelKind::None;
                cx.lay.inner = 0;
            }
            r
        }
        Field::Ipv4Src | Field::Ipv4Dst if lay.l3_kind == L3Kind::Ipv4 => {
            let at = l3
                + if field == Field::Ipv4Src {
                    ipv4::field::SRC_ADDR.start
                } else {
                    ipv4::field::DST_ADDR.start
                };
            let new = (v as u32).to_be_bytes();
            let csum = l3 + ipv4::field::CHECKSUM.start;
            Some(match (rd::<4>(f, at), rd16(f, csum)) {
                (Some(old), Some(hc)) if pseudo_update_ok(lay, f) => {
                    let (o, n) = (sum_array(&old), sum_array(&new));
                    wr16(f, csum, update16(hc, o, n));
                    pseudo_update(lay, f, o, n);
                    wr(f, at, &new)
                }
                _ => false,
            })
        }
        Field::Ipv6Src | Field::Ipv6Dst if lay.l3_kind == L3Kind::Ipv6 => {
            let at = l3
                + if field == Field::Ipv6Src {
                    ipv6::field::SRC_ADDR.start
                } else {
                    ipv6::field::DST_ADDR.start
                };
            let new = v.to_be_bytes();
            Some(match rd::<16>(f, at) {
                Some(old) if pseudo_update_ok(lay, f) => {
                    pseudo_update(lay, f, sum_array(&old), sum_array(&new));
                    wr(f, at, &new)
                }
                _ => false,
            })
        }
        Field::Ipv6Flabel if lay.l3_kind == L3Kind::Ipv6 => {
            let at = l3 + ipv6::field::VER_TC_FLOW.start;
            Some(match rd::<4>(f, at) {
                Some(w) => {
                    let w = (u32::from_be_bytes(w) & 0xfff0_0000) | v as u32;
                    wr(f, at, &w.to_be_bytes())
                }
                None => false,
            })
        }
        Field::TcpSrc | Field::TcpDst if lay.l4_kind == L4Kind::Tcp => {
            let at = l4
                + if field == Field::TcpSrc {
                    tcp::field::SRC_PORT.start
                } else {
                    tcp::field::DST_PORT.start
                };
            Some(l4_word(
                f,
                at,
                Some(l4 + tcp::field::CHECKSUM.start),
                false,
                v as u16,
            ))
        }
        Field::UdpSrc | Field::UdpDst if lay.l4_kind == L4Kind::Udp => {
            let at = l4
                + if field == Field::UdpSrc {
                    udp::field::SRC_PORT.start
                } else {
                    udp::field::DST_PORT.start
                };
            Some(l4_word(
                f,
                at,
                Some(l4 + udp::field::CHECKSUM.start),
                true,
                v as u16,
            ))
        }
        Field::SctpSrc | Field::SctpDst if lay.l4_kind == L4Kind::Sctp => {
            let at = l4
                + if field == Field::SctpSrc {
                    sctp::field::SRC_PORT.start
                } else {
                    sctp::field::DST_PORT.start
                };
            Some(wr16(f, at, v as u16) && sctp_refresh(lay, f))
        }
        Field::Icmpv4Type | Field::Icmpv4Code if lay.l4_kind == L4Kind::Icmpv4 => {
            let at = l4
                + if field == Field::Icmpv4Type {
                    icmpv4::field::TYPE
                } else {
                    icmpv4::field::CODE
                };
            Some(icmp_byte(f, l4, at, v as u8))
        }
        Field::Icmpv6Type | Field::Icmpv6Code if lay.l4_kind == L4Kind::Icmpv6 => {
            let at = l4
                + if field == Field::Icmpv6Type {
                    icmpv6::field::TYPE
                } else {
                    icmpv6::field::CODE
                };
            Some(icmp_byte(f, l4, at, v as u8))
        }
        Field::Ipv6NdTarget | Field::Ipv6NdSll | Field::Ipv6NdTll
            if lay.l4_kind == L4Kind::Icmpv6 =>
        {
            set_nd(lay, f, field, v)
        }
        Field::ArpOp | Field::ArpSpa | Field::ArpTpa | Field::ArpSha | Field::ArpTha
            if lay.l3_kind == L3Kind::Arp =>
        {
            // Ethernet/IPv4 ARP (RFC 826), the form the parser accepts. ARP
            // has no checksum.
            use arp::field::{eth_ipv4, OPER};
            Some(match field {
                Field::ArpOp => wr16(f, l3 + OPER.start, v as u16),
                Field::ArpSha => wr(f, l3 + eth_ipv4::SHA.start, &mac_bytes(v)),
                Field::ArpSpa => wr(f, l3 + eth_ipv4::SPA.start, &(v as u32).to_be_bytes()),
                Field::ArpTha => wr(f, l3 + eth_ipv4::THA.start, &mac_bytes(v)),
                _ => wr(f, l3 + eth_ipv4::TPA.start, &(v as u32).to_be_bytes()),
            })
        }
        Field::MplsLabel | Field::MplsTc | Field::MplsBos if lay.l3_kind == L3Kind::Mpls => {
            // LSE: label (20) | TC (3) | S (1) | TTL (8), RFC 3032 §2.1.
            let at = l3 + mpls::field::LSE.start;
            Some(match rd::<4>(f, at) {
                Some(w) => {
                    let w = u32::from_be_bytes(w);
                    let v = v as u32;
                    let w = match field {
                        Field::MplsLabel => (w & 0x0000_0fff) | (v << 12),
                        Field::MplsTc => (w & !0x0000_0e00) | (v << 9),
                        _ => (w & !0x0000_0100) | (v << 8),
                    };
                    wr(f, at, &w.to_be_bytes())
                }
                None => false,
            })
        }
        // §7.2.3.7: the I-SID of the outermost I-TAG; its other bits
        // (I-PCP, I-DEI, UCA) are kept.
        Field::PbbIsid => itag_at(&lay, f).map(|at| match rd::<4>(f, at) {
            Some(w) => {
                let w = (u32::from_be_bytes(w) & 0xff00_0000) | v as u32;
                wr(f, at, &w.to_be_bytes())
            }
            None => false,
        }),
        Field::TunnelId => {
            cx.out.tunnel_id = Some(v as u64);
            return;
        }
        Field::Metadata => {
            cx.out.metadata = Some(v as u64);
            return;
        }
        // The EtherType after the tags: everything behind it is read
        // anew (it now names another protocol).
        Field::EthType if lay.eth_type != 0 => {
            let ok = wr16(f, lay.eth_type as usize, v as u16);
            reparse(cx, f, 0);
            Some(ok)
        }
        Field::InPort | Field::InPhyPort | Field::EthType | Field::Ipv6Exthdr => {
            cx.stats.set_field_unsupported += 1;
            return;
        }
        // A layered field whose header the layout does not show.
        _ => None,
    };
    match ok {
        // The stack's shape changed: read it anew.
        Some(true) if field == Field::MplsBos => reparse(cx, f, 0),
        Some(true) => {}
        Some(false) => cx.stats.write_out_of_range += 1,
        None => cx.stats.set_field_no_header += 1,
    }
}

/// Rewrite one 16-bit word of the IPv4 header at `l3 + at` (even) through
/// `map`, updating the header checksum. `Some(false)` when out of range.
fn ipv4_word(f: &mut [u8], l3: usize, at: usize, map: impl FnOnce(u16) -> u16) -> Option<bool> {
    let csum = l3 + ipv4::field::CHECKSUM.start;
    Some(match (rd16(f, l3 + at), rd16(f, csum)) {
        (Some(old), Some(hc)) => {
            let new = map(old);
            wr16(f, csum, update16(hc, old, new)) && wr16(f, l3 + at, new)
        }
        _ => false,
    })
}

/// DSCP / ECN on IPv4 (TOS byte) or IPv6 (traffic class, bits 4..12 of the
/// first word; not covered by any checksum).
fn set_tos(lay: Layout, f: &mut [u8], field: Field, v: u8) -> Option<bool> {
    let (keep, put) = if field == Field::IpDscp {
        (0x03u8, v << 2)
    } else {
        (0xfcu8, v & 3)
    };
    let l3 = lay.l3 as usize;
    match lay.l3_kind {
        // The TOS byte shares its checksummed word with version / IHL.
        L3Kind::Ipv4 => ipv4_word(f, l3, ipv4::field::VER_IHL, |w| {
            (w & 0xff00) | ((w as u8 & keep) | put) as u16
        }),
        L3Kind::Ipv6 => Some(match rd16(f, l3 + ipv6::field::VER_TC_FLOW.start) {
            Some(w) => {
                let tc = ((w >> 4) as u8 & keep) | put;
                wr16(
                    f,
                    l3 + ipv6::field::VER_TC_FLOW.start,
                    (w & 0xf00f) | ((tc as u16) << 4),
                )
            }
            None => false,
        }),
        _ => None,
    }
}

/// The offset of the transport checksum that covers the IP pseudo-header,
/// and whether it is UDP (where 0 means "no checksum").
fn pseudo_csum(lay: Layout) -> Option<(usize, bool)> {
    let l4 = lay.l4 as usize;
    match lay.l4_kind {
        L4Kind::Tcp if lay.l4 != 0 => Some((l4 + tcp::field::CHECKSUM.start, false)),
        L4Kind::Udp if lay.l4 != 0 => Some((l4 + udp::field::CHECKSUM.start, true)),
        L4Kind::Icmpv6 if lay.l4 != 0 && lay.l3_kind == L3Kind::Ipv6 => {
            Some((l4 + icmpv6::field::CHECKSUM.start, false))
        }
        _ => None,
    }
}

/// Can [`pseudo_update`] write the transport checksum? (Checked before
/// anything is written, so an address change is all or nothing.)
fn pseudo_update_ok(lay: Layout, f: &[u8]) -> bool {
    pseudo_csum(lay).is_none_or(|(at, _)| rd16(f, at).is_some())
}

/// Fold an address change into the transport checksum; `old` and `new` are
/// the folded one's-complement sums of the old and new address
/// ([`sum_array`]), which is all RFC 1624 needs.
fn pseudo_update(lay: Layout, f: &mut [u8], old: u16, new: u16) {
    if let Some((at, udp)) = pseudo_csum(lay) {
        if let Some(c) = rd16(f, at) {
            csum_write(f, at, udp, update16(c, old, new));
        }
    }
}

/// Write a transport checksum computed by update. UDP: a stored 0 means
/// "no checksum" and stays 0 (RFC 768), and a computed 0 is sent as 0xffff.
fn csum_write(f: &mut [u8], at: usize, udp: bool, c: u16) -> bool {
    if udp {
        match rd16(f, at) {
            Some(0) => return true,
            Some(_) => return wr16(f, at, if c == 0 { 0xffff } else { c }),
            None => return false,
        }
    }
    wr16(f, at, c)
}

/// Set a 16-bit transport field (a port) at `at`, updating the checksum at
/// `csum`.
fn l4_word(f: &mut [u8], at: usize, csum: Option<usize>, udp: bool, new: u16) -> bool {
    let Some(old) = rd16(f, at) else { return false };
    if let Some(c_at) = csum {
        let Some(c) = rd16(f, c_at) else { return false };
        csum_write(f, c_at, udp, update16(c, old, new));
    }
    wr16(f, at, new)
}

/// Set the ICMP type or code byte at `at` (ICMPv4 and ICMPv6 keep both in
/// the word at `l4`, checksum at `l4 + 2`).
fn icmp_byte(f: &mut [u8], l4: usize, at: usize, v: u8) -> bool {
    // ICMPv6 has the same layout (icmpv6::field).
    let (word, csum) = (l4 + icmpv4::field::TYPE, l4 + icmpv4::field::CHECKSUM.start);
    let (Some(old), Some(c)) = (rd16(f, word), rd16(f, csum)) else {
        return false;
    };
    let new = if at == word {
        (old & 0x00ff) | ((v as u16) << 8)
    } else {
        (old & 0xff00) | v as u16
    };
    wr16(f, csum, update16(c, old, new)) && wr16(f, word, new)
}

/// End of the IP packet: `l3` + its length field, clamped to the frame.
fn ip_end(lay: Layout, f: &[u8]) -> usize {
    let l3 = lay.l3 as usize;
    let end = match lay.l3_kind {
        L3Kind::Ipv4 => rd16(f, l3 + ipv4::field::LENGTH.start).map(|n| l3 + n as usize),
        L3Kind::Ipv6 => {
            rd16(f, l3 + ipv6::field::LENGTH.start).map(|n| l3 + ipv6::HEADER_LEN + n as usize)
        }
        _ => None,
    };
    end.unwrap_or(f.len()).min(f.len())
}

/// Recompute the SCTP CRC32c over `l4 .. ip_end`.
fn sctp_refresh(lay: Layout, f: &mut [u8]) -> bool {
    let l4 = lay.l4 as usize;
    let end = ip_end(lay, f);
    match f.get(l4..end).and_then(sctp_checksum) {
        // RFC 9260 Appendix A: least significant byte first.
        Some(c) => wr(f, l4 + sctp::field::CHECKSUM.start, &c.to_le_bytes()),
        None => false,
    }
}

/// ND target / SLL / TLL (RFC 4861 §4.3, §4.4, §4.6.1). `None` when the
/// frame has no such field.
fn set_nd(lay: Layout, f: &mut [u8], field: Field, v: u128) -> Option<bool> {
    let l4 = lay.l4 as usize;
    let (t, code) = (
        rd8(f, l4 + icmpv6::field::TYPE)?,
        rd8(f, l4 + icmpv6::field::CODE)?,
    );
    let is_ns = t == icmpv6::TYPE_NEIGHBOR_SOLICIT;
    let is_na = t == icmpv6::TYPE_NEIGHBOR_ADVERT;
    if code != 0 || !(is_ns || is_na) {
        return None;
    }
    let end = ip_end(lay, f);
    let at = match field {
        Field::Ipv6NdTarget => {
            if l4 + icmpv6::ND_LEN > end {
                return None;
            }
            l4 + icmpv6::field::ND_TARGET.start
        }
        _ => {
            let want = match (field, is_ns) {
                (Field::Ipv6NdSll, true) => icmpv6::ND_OPT_SOURCE_LL_ADDR,
                (Field::Ipv6NdTll, false) => icmpv6::ND_OPT_TARGET_LL_ADDR,
                _ => return None,
            };
            nd_option(f, l4 + icmpv6::ND_LEN, end, want)? + 2
        }
    };
    let new_full = v.to_be_bytes();
    let new: &[u8] = if field == Field::Ipv6NdTarget {
        &new_full
    } else {
        &new_full[10..]
    };
    let Some(old) = f.get(at..at + new.len()) else {
        return Some(false);
    };
    // `at - l4` is even (8, or 24 + 8k + 2), as update_bytes needs.
    let mut old_buf = [0u8; 16];
    old_buf[..new.len()].copy_from_slice(old);
    let csum = l4 + icmpv6::field::CHECKSUM.start;
    let Some(c) = rd16(f, csum) else {
        return Some(false);
    };
    let c = update_bytes(c, &old_buf[..new.len()], new);
    Some(wr16(f, csum, c) && wr(f, at, new))
}

/// Offset of the first ND option of type `want` with room for a 6-byte
/// link-layer address, scanning `from .. end`.
fn nd_option(f: &[u8], from: usize, end: usize, want: u8) -> Option<usize> {
    let mut pos = from;
    // Bounded: each iteration advances by at least 8 bytes.
    while pos + 8 <= end {
        let kind = rd8(f, pos)?;
        let len = rd8(f, pos + 1)? as usize * 8;
        if len == 0 {
            return None; // RFC 4861 §4.6: length 0 is invalid; stop.
        }
        if kind == want {
            return Some(pos);
        }
        pos += len;
    }
    None
}

// ---------------------------------------------------------------------------
// TTL.

/// Set the IPv4 TTL / IPv6 hop limit to `map(old)`. Returns false only
/// when `map` returns `None` (expired); a frame without IP is counted and
/// treated as alive (the action is skipped).
fn set_nw_ttl(cx: &mut Ctx<'_>, f: &mut [u8], map: impl FnOnce(u8) -> Option<u8>) -> bool {
    let lay = *cx.lay;
    let l3 = lay.l3 as usize;
    let r = match lay.l3_kind {
        L3Kind::Ipv4 => match rd16(f, l3 + ipv4::field::TTL) {
            Some(w) => match map((w >> 8) as u8) {
                Some(ttl) => ipv4_word(f, l3, ipv4::field::TTL, |w| {
                    (w & 0x00ff) | ((ttl as u16) << 8)
                }),
                None => return false,
            },
            None => Some(false),
        },
        L3Kind::Ipv6 => match rd8(f, l3 + ipv6::field::HOP_LIMIT) {
            Some(h) => match map(h) {
                Some(h) => Some(wr(f, l3 + ipv6::field::HOP_LIMIT, &[h])),
                None => return false,
            },
            None => Some(false),
        },
        _ => None,
    };
    match r {
        Some(true) => {}
        Some(false) => cx.stats.write_out_of_range += 1,
        None => cx.stats.ttl_no_ip += 1,
    }
    true
}

/// Set the top MPLS label's TTL to `map(old)`; false when expired.
fn mpls_ttl(cx: &mut Ctx<'_>, f: &mut [u8], map: impl FnOnce(u8) -> Option<u8>) -> bool {
    if cx.lay.l3_kind != L3Kind::Mpls {
        cx.stats.mpls_ttl_no_label += 1;
        return true;
    }
    let at = cx.lay.l3 as usize + mpls::field::TTL;
    match rd8(f, at) {
        Some(t) => match map(t) {
            Some(t) => {
                wr(f, at, &[t]);
            }
            None => return false,
        },
        None => cx.stats.write_out_of_range += 1,
    }
    true
}

// ---------------------------------------------------------------------------
// VLAN push / pop.

/// Shift every non-zero offset at or after `from` by `delta` (±4).
fn shift_layout(lay: &mut Layout, from: u16, delta: i32) {
    let sh = |o: &mut u16| {
        if *o != 0 && *o >= from {
            // Offsets stay below 2^16 - 64: the frame fits the buffer and a
            // shift is ±4 within it (checked by the caller's gap move).
            *o = (*o as i32 + delta).clamp(0, u16::MAX as i32) as u16;
        }
    };
    sh(&mut lay.eth_type);
    sh(&mut lay.l3);
    sh(&mut lay.l4);
    sh(&mut lay.inner);
}

/// Push a tag at offset 12 (§5.12: "the new tag is the outermost, inserted
/// immediately after the Ethernet header"). Its VID and PCP are copied from
/// the previous outer tag, else 0 (OpenFlow 1.1 §A.2.5's push table, which
/// 1.3 keeps implicitly and Open vSwitch follows); DEI is 0.
fn push_vlan<S: AsRef<[u8]> + AsMut<[u8]>>(cx: &mut Ctx<'_>, buf: &mut PacketBuf<S>, tpid: u16) {
    if tpid != ethertype::VLAN && tpid != ethertype::QINQ {
        cx.stats.push_vlan_bad_tpid += 1;
        return;
    }
    if buf.len() < ethernet::HEADER_LEN {
        cx.stats.push_vlan_runt += 1;
        return;
    }
    let tci = if cx.lay.vlan_count > 0 {
        rd16(buf.frame(), cx.lay.vlan[0] as usize + TCI_IN_TAG).map_or(0, |t| t & 0xefff)
    } else {
        0
    };
    if !buf.open_gap(TAG_AT, TAG_LEN) {
        cx.stats.push_vlan_no_room += 1;
        return;
    }
    let f = buf.frame_mut();
    // In range: the gap at 12..16 was just opened in a frame of >= 18 bytes.
    wr16(f, TAG_AT, tpid);
    wr16(f, TAG_AT + TCI_IN_TAG, tci);
    let lay = &mut *cx.lay;
    shift_layout(lay, TAG_AT as u16, TAG_LEN as i32);
    let old0 = lay.vlan[0];
    lay.vlan = [
        TAG_AT as u16,
        if lay.vlan_count > 0 {
            old0.saturating_add(TAG_LEN as u16)
        } else {
            0
        },
    ];
    lay.vlan_count = (lay.vlan_count + 1).min(2);
    if lay.eth_type == 0 {
        // The frame had no parsed EtherType (truncated tag): keep "absent".
        lay.vlan_count = 1;
        lay.vlan[1] = 0;
    }
}

/// Remove the outer tag (the 4 bytes at 12).
fn pop_vlan<S: AsRef<[u8]> + AsMut<[u8]>>(cx: &mut Ctx<'_>, buf: &mut PacketBuf<S>) {
    let lay = &mut *cx.lay;
    if lay.vlan_count == 0 || lay.vlan[0] != TAG_AT as u16 || !buf.close_gap(TAG_AT, TAG_LEN) {
        cx.stats.pop_vlan_no_tag += 1;
        return;
    }
    shift_layout(lay, (TAG_AT + TAG_LEN) as u16, -(TAG_LEN as i32));
    // The tags left are the 4-byte slots between 12 and the EtherType
    // (a third tag the layout did not list may now be the second).
    let left = if lay.eth_type >= 12 {
        (lay.eth_type as usize - 12) / 4
    } else {
        lay.vlan_count as usize - 1
    };
    lay.vlan_count = left.min(2) as u8;
    lay.vlan = match left {
        0 => [0, 0],
        1 => [12, 0],
        _ => [12, 16],
    };
    // A third tag the parser stopped at (eth_type at a TPID, nothing
    // parsed behind it) is now the second: record it as the parser would.
    if lay.vlan_count == 1 && lay.eth_type == 16 {
        if let Some(t) = rd16(buf.frame(), 16) {
            if vlan::is_tpid(t) && buf.len() >= 20 {
                lay.vlan = [12, 16];
                lay.vlan_count = 2;
                lay.eth_type = 20;
            }
        }
    }
}

// ---------------------------------------------------------------------------
// MPLS push / pop and copy-TTL.

/// Where the TTL of the header below the top MPLS label is.
enum InnerTtl {
    /// The next label's TTL byte.
    Mpls(usize),
    /// An IPv4 header at this offset (TTL at +8, checksum at +10).
    Ipv4(usize),
    /// An IPv6 hop limit byte.
    Ipv6(usize),
}

/// The top label's offset and the TTL below it, if the frame has them.
fn inner_ttl(lay: &Layout, f: &[u8]) -> Option<(usize, InnerTtl)> {
    if lay.l3_kind != L3Kind::Mpls || lay.l3 == 0 {
        return None;
    }
    let l3 = lay.l3 as usize;
    let bos = rd8(f, l3 + mpls::field::BOS)? & 1 != 0;
    let below = l3 + mpls::HEADER_LEN;
    let inner = if !bos {
        InnerTtl::Mpls(below + mpls::field::TTL)
    } else {
        // RFC 3032 §2.2: what follows the bottom of the stack is not
        // typed; the IP version nibble is what every LSR looks at.
        match rd8(f, below)? >> 4 {
            4 if f.len() >= below + ipv4::MIN_HEADER_LEN => InnerTtl::Ipv4(below),
            6 if f.len() >= below + ipv6::HEADER_LEN => {
                InnerTtl::Ipv6(below + ipv6::field::HOP_LIMIT)
            }
            _ => return None,
        }
    };
    Some((l3 + mpls::field::TTL, inner))
}

/// Copy the TTL inwards (top label → the header below) or outwards.
fn copy_ttl(cx: &mut Ctx<'_>, f: &mut [u8], inwards: bool) {
    let Some((top, inner)) = inner_ttl(cx.lay, f) else {
        cx.stats.copy_ttl_unsupported += 1;
        return;
    };
    let ok = match inner {
        InnerTtl::Mpls(at) | InnerTtl::Ipv6(at) => {
            let (from, to) = if inwards { (top, at) } else { (at, top) };
            match rd8(f, from) {
                Some(t) => wr(f, to, &[t]),
                None => false,
            }
        }
        InnerTtl::Ipv4(ip) => {
            if inwards {
                match rd8(f, top) {
                    Some(t) => {
                        ipv4_word(f, ip, ipv4::field::TTL, |w| {
                            (w & 0x00ff) | ((t as u16) << 8)
                        }) == Some(true)
                    }
                    None => false,
                }
            } else {
                match rd8(f, ip + ipv4::field::TTL) {
                    Some(t) => wr(f, top, &[t]),
                    None => false,
                }
            }
        }
    };
    if !ok {
        cx.stats.write_out_of_range += 1;
    }
}

/// Push a label after the VLAN tags (§5.12: "the new MPLS shim header is
/// inserted ... as the outermost label"). Its label, TC and TTL are copied
/// from the previous top label, else label 0, TC 0 and the IP TTL (0 for
/// non-IP), with bottom-of-stack set only when there was no label
/// (OpenFlow 1.1 §A.2.5's push table, kept by later versions and by OVS).
fn push_mpls<S: AsRef<[u8]> + AsMut<[u8]>>(cx: &mut Ctx<'_>, buf: &mut PacketBuf<S>, et: u16) {
    if et != ethertype::MPLS_UNICAST && et != ethertype::MPLS_MULTICAST {
        cx.stats.push_mpls_bad_ethertype += 1;
        return;
    }
    let lay = *cx.lay;
    let et_at = lay.eth_type as usize;
    let f = buf.frame();
    let l3 = lay.l3 as usize;
    let lse = match lay.l3_kind {
        L3Kind::Mpls => {
            rd::<4>(f, l3 + mpls::field::LSE.start).map(|w| u32::from_be_bytes(w) & !0x100)
        }
        L3Kind::Ipv4 => rd8(f, l3 + ipv4::field::TTL).map(|t| 0x100 | t as u32),
        L3Kind::Ipv6 => rd8(f, l3 + ipv6::field::HOP_LIMIT).map(|t| 0x100 | t as u32),
        _ => Some(0x100),
    };
    let at = et_at + 2;
    let Some(lse) = lse.filter(|_| et_at != 0 && at <= f.len() && at <= u16::MAX as usize) else {
        cx.stats.push_mpls_no_room += 1;
        return;
    };
    if !buf.open_gap(at, 4) {
        cx.stats.push_mpls_no_room += 1;
        return;
    }
    let f = buf.frame_mut();
    // In range: the gap at..at+4 was just opened and et_at + 2 == at.
    wr16(f, et_at, et);
    wr(f, at, &lse.to_be_bytes());
    // Offsets before `at` did not move (the prefix moved into headroom);
    // the new label is the network header, and nothing below it is parsed.
    let lay = &mut *cx.lay;
    lay.l3 = at as u16; // checked <= u16::MAX above
    lay.l3_kind = L3Kind::Mpls;
    lay.ip_header_len = 0;
    lay.l4 = 0;
    lay.l4_kind = L4Kind::None;
    lay.tunnel = TunnelKind::None;
    lay.inner = 0;
}

/// Pop the top label and set the EtherType to `et`.
fn pop_mpls<S: AsRef<[u8]> + AsMut<[u8]>>(
    cx: &mut Ctx<'_>,
    buf: &mut PacketBuf<S>,
    et: u16,
    in_port: u32,
) {
    let lay = *cx.lay;
    let et_at = lay.eth_type as usize;
    if lay.l3_kind != L3Kind::Mpls
        || et_at == 0
        || lay.l3 as usize != et_at + 2
        || !buf.close_gap(lay.l3 as usize, 4)
    {
        cx.stats.pop_mpls_no_label += 1;
        return;
    }
    // close_gap moved the prefix forward by 4: the EtherType is at et_at.
    wr16(buf.frame_mut(), et_at, et);
    reparse(cx, buf.frame(), in_port);
}

// ---------------------------------------------------------------------------
// PBB push / pop.

/// Bytes push-PBB adds: B-DA, B-SA, the EtherType and the I-TAG TCI.
const PBB_PUSH_LEN: usize = 12 + 2 + pbb::HEADER_LEN;

/// Offset of the outer I-TAG TCI, if the frame's EtherType (after any
/// B-tags) is PBB and the TCI is inside the frame.
fn itag_at(lay: &Layout, f: &[u8]) -> Option<usize> {
    let et = lay.eth_type as usize;
    if et == 0 || rd16(f, et)? != ethertype::PBB {
        return None;
    }
    let at = et + 2;
    (f.len() >= at + pbb::HEADER_LEN).then_some(at)
}

/// Re-parse the frame for its layout after a change the layout cannot
/// follow by shifting (push/pop of a whole header).
/// Set the IP protocol: IPv4's protocol byte (header checksum updated), or
/// IPv6's next header when no extension header follows the fixed header
/// (with one, the last header's field would be the one, and the layout
/// does not locate it: counted unsupported). A TCP or UDP checksum
/// follows the pseudo-header's new protocol (RFC 1624; a UDP checksum of
/// 0 stays 0). `None`: no IP header.
fn set_ip_proto(cx: &mut Ctx<'_>, f: &mut [u8], proto: u8) -> Option<bool> {
    let lay = *cx.lay;
    let l3 = lay.l3 as usize;
    let old = match lay.l3_kind {
        L3Kind::Ipv4 => rd8(f, l3 + ipv4::field::PROTOCOL)?,
        L3Kind::Ipv6 => {
            let nxt = rd8(f, l3 + ipv6::field::NXT_HDR)?;
            // Hop-by-hop, routing, fragment, ESP, AH, destination
            // options, mobility, HIP, shim6, experiments (RFC 8200 §4,
            // IANA's IPv6 extension header types).
            let extension = matches!(
                nxt,
                0 | 43 | 44 | 50 | 51 | 60 | 135 | 139 | 140 | 253 | 254
            );
            if extension || (lay.l4 != 0 && lay.l4 as usize != l3 + ipv6::HEADER_LEN) {
                cx.stats.set_field_unsupported += 1;
                return Some(true);
            }
            nxt
        }
        _ => return None,
    };
    let written = match lay.l3_kind {
        // The protocol shares its checksummed word with the TTL.
        L3Kind::Ipv4 => ipv4_word(f, l3, ipv4::field::TTL, |w| (w & 0xff00) | u16::from(proto))?,
        _ => wr(f, l3 + ipv6::field::NXT_HDR, &[proto]),
    };
    if !written || lay.l4 == 0 {
        return Some(written);
    }
    let at = match lay.l4_kind {
        L4Kind::Tcp => lay.l4 as usize + tcp::field::CHECKSUM.start,
        L4Kind::Udp => lay.l4 as usize + udp::field::CHECKSUM.start,
        _ => return Some(true),
    };
    if let Some(c) = rd16(f, at) {
        if !(lay.l4_kind == L4Kind::Udp && c == 0) {
            // The pseudo-header's zero-padded protocol word.
            return Some(wr16(f, at, update16(c, u16::from(old), u16::from(proto))));
        }
    }
    Some(true)
}

fn reparse(cx: &mut Ctx<'_>, f: &[u8], in_port: u32) {
    let mut scratch_key = offlow_flow::FlowKey::ZERO;
    let mut scratch_stats = offlow_flow::ParseStats::default();
    *cx.lay = offlow_flow::extract_into(f, in_port, &mut scratch_key, &mut scratch_stats);
}

/// Push a PBB header (see the module docs for where each field comes from).
fn push_pbb<S: AsRef<[u8]> + AsMut<[u8]>>(
    cx: &mut Ctx<'_>,
    buf: &mut PacketBuf<S>,
    et: u16,
    in_port: u32,
) {
    if et != ethertype::PBB {
        cx.stats.push_pbb_bad_ethertype += 1;
        return;
    }
    let Some(macs) = rd::<12>(buf.frame(), 0) else {
        cx.stats.push_pbb_no_room += 1;
        return;
    };
    if buf.len() < ethernet::HEADER_LEN || !buf.open_gap(0, PBB_PUSH_LEN) {
        cx.stats.push_pbb_no_room += 1;
        return;
    }
    let f = buf.frame_mut();
    // In range: the frame grew by PBB_PUSH_LEN (18) bytes in front.
    wr(f, 0, &macs);
    wr16(f, 12, et);
    wr(f, 14, &[0; pbb::HEADER_LEN]);
    reparse(cx, buf.frame(), in_port);
}

/// Pop the outer PBB header: the frame then starts at the customer header.
fn pop_pbb<S: AsRef<[u8]> + AsMut<[u8]>>(cx: &mut Ctx<'_>, buf: &mut PacketBuf<S>, in_port: u32) {
    let lay = *cx.lay;
    let Some(cust) = itag_at(&lay, buf.frame()).map(|at| at + pbb::HEADER_LEN) else {
        cx.stats.pop_pbb_no_itag += 1;
        return;
    };
    if buf.len() < cust + ethernet::HEADER_LEN || !buf.close_gap(0, cust) {
        cx.stats.pop_pbb_no_itag += 1;
        return;
    }
    reparse(cx, buf.frame(), in_port);
}
