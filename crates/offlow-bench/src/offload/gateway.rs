//! Row group (b) of issue 25 in `offlow bench offload`: the L2-in-L3
//! gateway of the SmartNIC paper. Frames arrive GRE-encapsulated on the
//! underlay port, are decapsulated, tagged with a VLAN and sent out of the
//! host port; offlow in software vs offlow offloaded vs Open vSwitch with
//! its userspace (native) tunnelling.
//!
//! # Traffic
//! ```text
//!  ns GEN eth0 ── p1 (underlay, 192.168.50.1) [ns SW: decap, push VLAN 7] p2 ── eth0 ns RECV
//!  192.168.50.2, GRE key 7                                                    802.1Q VID 7
//! ```
//! The generator's frame ([`frame`]) is what the far tunnel end would send
//! ([`Endpoint::encapsulate`] with [`far_end`]): Ethernet to the underlay
//! MAC ([`UNDERLAY_MAC`], p1's and Open vSwitch's `br-phy`'s), IPv4
//! [`REMOTE_IP`] → [`LOCAL_IP`] with DF and TTL 64, GRE with key [`KEY`],
//! no checksum, carrying an Ethernet frame of `--frame-size` bytes with
//! FCS (64: the paper's 64-byte frames; 102 bytes on the wire outside).
//! The inner frame is 10.0.0.1:10000+n → 10.0.0.2:9 UDP with valid
//! checksums; the generator program varies the inner source port over the
//! `--flows` flows and fixes the inner UDP checksum
//! ([`super::xdp::port_l3_offset`]). With the offload tier the switch
//! decapsulates in the live-frames pool's pages, so the generator writes
//! all 84 header bytes back before each send (`restore_headers`, in every
//! row of a gateway run).
//!
//! # Configurations ([`Gw`])
//! - `offlow userspace`: `offlow run` on AF_XDP ports with the tunnel port
//!   [`TUNNEL_PORT`] (GRE, `key=flow`, underlay port 1) and one flow
//!   ([`FLOW`]): `in_port=10,tun_id=7` → push VLAN 7, output 2.
//! - `offlow offloaded`: the same with [`OFFLOAD_CONFIG`] (`mode = "xdp"`,
//!   UDP flows pinned down at once, as in the NAT rows). After the row the
//!   switch's exit log gives the tier's hits; a row the tier did not serve
//!   fails.
//! - `ovs`: a private Open vSwitch 3.1, netdev datapath, `type=afxdp`
//!   ports, native tunnelling (`Ovs::start_gateway`): bridge `br-phy`
//!   holds `p1` and, on its internal port, the tunnel's local address;
//!   `br-int` holds `gre0` (`remote_ip`, `key=flow`) and `p2`. After the
//!   row the datapath flows must show `tnl_pop` and `push_vlan(vid=7`.
//!
//! # Checks (a row whose frames are not transformed fails)
//! The sink on RECV ([`Sink::attach_tagged`]) counts the UDP frames to port
//! 9 after one optional 802.1Q tag, and those tagged VID 7: every frame of
//! the window must be tagged; an undecapsulated frame is not UDP (counted
//! apart, and more than 1% of them fails the row). Every inner source port
//! must arrive, and sampled frames (one in 1,024) are checked whole by
//! [`check_frame`].

use std::net::Ipv4Addr;
use std::path::Path;

use anyhow::{bail, Context};
use serde::Serialize;

use offlow_testkit::FrameBuilder;
use offlow_wire::checksum::{fold, pseudo_ipv4, sum};
use offlow_wire::tunnel::{Endpoint, KeyMode, Kind};

use crate::forward::Ovs;
use crate::report::fmt_f;
use crate::topo::{ip, start_offlow_logged, unique_tag, Topo};
use crate::traffic::{DST_PORT, FIRST_SRC_PORT};
use crate::workload::FCS_LEN;

use super::ping::{log_field, TempFile};
use super::xdp::{Sink, SinkCounts, SAMPLE_LEN};
use super::{gro_on, measure, OffloadArgs, Row};

/// GEN's `eth0` MAC (set by [`Topo::hosts`]): the far tunnel end.
pub const GEN_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x11];
/// RECV's `eth0` MAC (set by [`Topo::hosts`]): the inner destination.
pub const RECV_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x12];
/// The inner frame's source: a host behind the far tunnel end.
pub const INNER_SRC_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x21];
/// The underlay port's MAC (p1's; Open vSwitch's `br-phy`'s).
pub const UNDERLAY_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x01, 0x01];
/// The tunnel's local address (the switch's end).
pub const LOCAL_IP: Ipv4Addr = Ipv4Addr::new(192, 168, 50, 1);
/// The far end's address (the generator's).
pub const REMOTE_IP: Ipv4Addr = Ipv4Addr::new(192, 168, 50, 2);
/// The GRE key of the traffic.
pub const KEY: u32 = 7;
/// The VLAN the gateway tags the frames with.
pub const VLAN: u16 = 7;
/// The inner frame's addresses.
pub const INNER_SRC: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
/// See [`INNER_SRC`].
pub const INNER_DST: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
/// The inner frame's TTL (a gateway bridges: it stays).
pub const TTL: u8 = 64;
/// OpenFlow port number of the tunnel port.
pub const TUNNEL_OFPORT: u32 = 10;

/// offlow's `--port` for the tunnel.
pub const TUNNEL_PORT: &str = "gre0=10,type=gre,local_ip=192.168.50.1,remote_ip=192.168.50.2,\
underlay=1,remote_mac=02:00:00:00:00:11,key=flow";

/// The gateway's flow, offlow's and Open vSwitch's.
pub const FLOW: &str =
    "in_port=10,tun_id=7,actions=push_vlan:0x8100,set_field:0x1007->vlan_vid,output:2";

/// The offloaded row's configuration file.
pub const OFFLOAD_CONFIG: &str = "[offload]\nmode = \"xdp\"\npin_down = [\"udp\"]\n";

/// The method, as printed and put in the JSON.
pub const GATEWAY_METHOD: &str = "L2-in-L3 gateway: GRE-in-IPv4 (192.168.50.2 -> 192.168.50.1, \
key 7, no checksum) carrying 64-byte Ethernet/IPv4/UDP frames whose inner source port the \
generator varies over --flows (inner UDP checksum fixed) into the underlay port p1; the switch \
decapsulates, pushes VLAN 7 and outputs to p2. offlow: tunnel port gre0=10 (key=flow, underlay 1) \
and in_port=10,tun_id=7 -> push_vlan, set vlan_vid 7, output:2, AF_XDP ports; offloaded with \
[offload] mode=xdp, pin_down udp, and the exit log's tier hits > 0. OVS 3.1: netdev datapath, \
afxdp ports, native tunnelling (br-phy: p1 + local IP on its internal port, br-int: gre0 + p2, \
the same flow), dpif flows must show tnl_pop and push_vlan. Every frame of the window must arrive \
tagged VID 7, every inner source port must arrive, and sampled frames (1 in 1024) must be the \
inner frame byte for byte with the tag inserted (MACs, addresses, TTL, IPv4 and UDP checksums), \
or the row fails. The generator-alone and ceiling rows send the plain 64-byte frame (context).";

/// The gateway configurations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Gw {
    /// offlow's userspace path on AF_XDP ports.
    Userspace,
    /// offlow with its XDP offload tier.
    Offloaded,
    /// Open vSwitch 3.1, netdev datapath, afxdp ports, native tunnelling.
    Ovs,
}

impl Gw {
    /// The row's name with `queues` queues.
    pub fn name(self, queues: usize) -> String {
        let w = super::plural(queues, "worker");
        match self {
            Gw::Userspace => format!("gateway: offlow userspace af_xdp, {w}"),
            Gw::Offloaded => format!("gateway: offlow offloaded, {w}"),
            Gw::Ovs => "gateway: ovs 3.1 netdev afxdp, native gre".into(),
        }
    }

    /// The row kind.
    pub fn kind(self) -> &'static str {
        match self {
            Gw::Userspace => "gw-userspace",
            Gw::Offloaded => "gw-offloaded",
            Gw::Ovs => "gw-ovs",
        }
    }
}

/// The far tunnel end, whose encapsulation the generator sends.
pub fn far_end() -> Endpoint {
    let mut e = Endpoint::new(
        Kind::Gre,
        REMOTE_IP.octets(),
        LOCAL_IP.octets(),
        GEN_MAC,
        UNDERLAY_MAC,
    );
    e.key = KeyMode::Fixed(KEY);
    e
}

/// The inner frame of flow `n` (`frame_size` with FCS).
pub fn inner_frame(frame_size: usize, n: u16) -> Vec<u8> {
    FrameBuilder::eth(RECV_MAC, INNER_SRC_MAC)
        .ipv4(INNER_SRC.octets(), INNER_DST.octets())
        .ttl(TTL)
        .dont_frag()
        .udp(FIRST_SRC_PORT + n, DST_PORT)
        .frame_len(frame_size - FCS_LEN)
        .build()
}

/// The generator's frame: flow 0's inner frame, GRE-encapsulated.
pub fn frame(frame_size: usize) -> anyhow::Result<Vec<u8>> {
    let inner = inner_frame(frame_size, 0);
    let e = far_end();
    let mut out = vec![0u8; e.overhead() + inner.len()];
    let n = e
        .encapsulate(&inner, u64::from(KEY), 0, 0, &mut out)
        .context("encapsulating the generator's frame")?;
    out.truncate(n);
    Ok(out)
}

/// What the gateway must make of `inner`: the 802.1Q tag (VID [`VLAN`],
/// PCP 0) inserted after the MAC addresses.
pub fn tagged(inner: &[u8]) -> Vec<u8> {
    let mut f = inner[..12].to_vec();
    f.extend_from_slice(&0x8100u16.to_be_bytes());
    f.extend_from_slice(&VLAN.to_be_bytes());
    f.extend_from_slice(&inner[12..]);
    f
}

fn be16(f: &[u8], i: usize) -> u16 {
    u16::from_be_bytes([f[i], f[i + 1]])
}

/// Check one sampled frame (`wire_len`: its length on the wire without
/// FCS, the sample possibly shorter) as it must leave the gateway: the
/// inner frame of a flow below `flows`, tagged. The error says what is
/// wrong.
pub fn check_frame(f: &[u8], wire_len: usize, flows: u32) -> Result<(), String> {
    const L3: usize = 18;
    if f.len() < L3 + 28 || f[12..14] != [0x81, 0x00] {
        return Err("not an 802.1Q-tagged frame".into());
    }
    let tci = be16(f, 14);
    if tci != VLAN {
        return Err(format!(
            "VLAN {} (PCP {}), not {VLAN} (PCP 0)",
            tci & 0x0fff,
            tci >> 13
        ));
    }
    if f[16..18] != [0x08, 0x00] || f[L3] != 0x45 || f[L3 + 9] != 17 {
        return Err("the tag does not carry IPv4 UDP without options".into());
    }
    if f[0..6] != RECV_MAC || f[6..12] != INNER_SRC_MAC {
        return Err("the inner frame's MAC addresses changed".into());
    }
    let src = Ipv4Addr::new(f[L3 + 12], f[L3 + 13], f[L3 + 14], f[L3 + 15]);
    let dst = Ipv4Addr::new(f[L3 + 16], f[L3 + 17], f[L3 + 18], f[L3 + 19]);
    if (src, dst) != (INNER_SRC, INNER_DST) {
        return Err(format!("addresses {src} -> {dst}, not the inner frame's"));
    }
    if f[L3 + 8] != TTL {
        return Err(format!("TTL {}, not {TTL}", f[L3 + 8]));
    }
    if fold(sum(&f[L3..L3 + 20], 0)) != 0xffff {
        return Err("bad IPv4 header checksum".into());
    }
    let l4 = L3 + 20;
    let sport = u32::from(be16(f, l4));
    let first = u32::from(FIRST_SRC_PORT);
    if !(first..first + flows).contains(&sport) || be16(f, l4 + 2) != DST_PORT {
        return Err(format!("ports {sport} -> {}", be16(f, l4 + 2)));
    }
    let udp_len = usize::from(be16(f, l4 + 4));
    let end = l4 + udp_len;
    if udp_len < 8 || end > wire_len {
        return Err(format!("UDP length {udp_len} in a {wire_len}-byte frame"));
    }
    if end > f.len() {
        return Err("the UDP datagram is longer than the sample".into());
    }
    if be16(f, l4 + 6) == 0 {
        return Err("UDP checksum 0 (the generator sends one)".into());
    }
    // udp_len <= wire_len <= 1518: fits 16 bits.
    let pseudo = pseudo_ipv4(src.octets(), dst.octets(), 17, udp_len as u16);
    if fold(sum(&f[l4..end], pseudo)) != 0xffff {
        return Err("bad UDP checksum".into());
    }
    Ok(())
}

/// Check the window's counts: some frames, every one tagged, few others.
pub fn check_window(w: &SinkCounts) -> Result<(), String> {
    if w.frames == 0 {
        return Err("no decapsulated frame arrived in the window".into());
    }
    if w.untranslated != 0 {
        return Err(format!(
            "NOT TAGGED: {} of {} decapsulated frames arrived without VLAN {VLAN}",
            w.untranslated, w.frames
        ));
    }
    if w.other > w.frames / 100 {
        return Err(format!(
            "{} other frames (not decapsulated?) beside {} tagged ones",
            w.other, w.frames
        ));
    }
    Ok(())
}

fn mac(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

impl Ovs {
    /// Open vSwitch as the gateway in `sw`, userspace tunnelling: `br-phy`
    /// (p1, afxdp, port 1; the tunnel's local address on its internal
    /// port, whose MAC is [`UNDERLAY_MAC`]; p1 ↔ LOCAL), `br-int` (gre0,
    /// port 10, and p2, afxdp, port 2; [`FLOW`]). Decapsulation needs no
    /// ARP entry or route: a frame to `br-phy`'s MAC and an address of one
    /// of its ports, output to LOCAL, is popped (`tnl_pop`) into the
    /// tunnel port listening there.
    pub(crate) fn start_gateway(sw: &str) -> anyhow::Result<Ovs> {
        let ovs = Ovs::launch(sw)?;
        let bridge = |b: &str| {
            [
                "--",
                "set",
                "bridge",
                b,
                "datapath_type=netdev",
                "protocols=OpenFlow13",
                "fail-mode=secure",
            ]
            .map(String::from)
        };
        let hwaddr = format!("other-config:hwaddr={}", mac(UNDERLAY_MAC));
        let remote = format!("options:remote_ip={REMOTE_IP}");
        let mut a: Vec<String> = vec!["add-br".into(), "br-phy".into()];
        a.extend(bridge("br-phy"));
        a.push(hwaddr);
        a.extend(
            [
                "--",
                "add-port",
                "br-phy",
                "p1",
                "--",
                "set",
                "interface",
                "p1",
                "type=afxdp",
                "ofport_request=1",
                "--",
                "add-br",
                "br-int",
            ]
            .map(String::from),
        );
        a.extend(bridge("br-int"));
        a.extend(
            [
                "--",
                "add-port",
                "br-int",
                "gre0",
                "--",
                "set",
                "interface",
                "gre0",
                "type=gre",
                &remote,
                "options:key=flow",
                "ofport_request=10",
                "--",
                "add-port",
                "br-int",
                "p2",
                "--",
                "set",
                "interface",
                "p2",
                "type=afxdp",
                "ofport_request=2",
            ]
            .map(String::from),
        );
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        ovs.vsctl(&a).context("creating the OVS bridges")?;
        ovs.check_interfaces()?;
        ip(&[
            "-n",
            sw,
            "addr",
            "add",
            &format!("{LOCAL_IP}/24"),
            "dev",
            "br-phy",
        ])?;
        ip(&["-n", sw, "link", "set", "br-phy", "up"])?;
        ovs.add_flow("br-phy", "in_port=1,actions=LOCAL")?;
        ovs.add_flow("br-phy", "in_port=LOCAL,actions=output:1")?;
        ovs.add_flow("br-int", FLOW)?;
        Ok(ovs)
    }

    /// `ovs-appctl dpif/dump-flows` of both bridges.
    pub(crate) fn gateway_dp_flows(&self) -> anyhow::Result<String> {
        let mut s = self.appctl(&["dpif/dump-flows", "br-phy"])?;
        s.push_str(&self.appctl(&["dpif/dump-flows", "br-int"])?);
        Ok(s)
    }
}

/// Whether Open vSwitch's datapath flows decapsulate (`tnl_pop`) and tag
/// (`push_vlan(vid=7`) frames that were counted (`packets:` above 0).
pub fn ovs_flows_decap_and_tag(dump: &str) -> Result<(), String> {
    let busy = |needle: &str| {
        dump.lines().any(|l| {
            l.contains(needle)
                && l.split("packets:")
                    .nth(1)
                    .and_then(|r| r.split(',').next())
                    .and_then(|n| n.trim().parse::<u64>().ok())
                    .is_some_and(|n| n > 0)
        })
    };
    if !busy("tnl_pop(") {
        return Err(format!("no datapath flow popped the tunnel:\n{dump}"));
    }
    if !busy(&format!("push_vlan(vid={VLAN},")) {
        return Err(format!("no datapath flow pushed VLAN {VLAN}:\n{dump}"));
    }
    Ok(())
}

/// Run one gateway row into `row`.
pub(super) fn run_row(
    gw: Gw,
    queues: usize,
    row: &mut Row,
    args: &OffloadArgs,
    bin: &Path,
) -> anyhow::Result<()> {
    let t = Topo::hosts(true, queues)?;
    let sw = t.sw()?.to_string();
    ip(&[
        "-n",
        &sw,
        "link",
        "set",
        "p1",
        "address",
        &mac(UNDERLAY_MAC),
    ])?;
    // Declared after the topology: dropped (detached) before it.
    let sink = Sink::attach_tagged(&t.rx.0, &t.rx.1, DST_PORT, VLAN)?;
    let frame = frame(args.frame_size)?;
    let seen = u32::from(FIRST_SRC_PORT)..u32::from(FIRST_SRC_PORT) + args.flows;
    let tag = unique_tag();
    let tmp = |ext: &str| TempFile(std::env::temp_dir().join(format!("offlow-gw-{tag}.{ext}")));
    let (flows, cfg, log) = (tmp("flows"), tmp("toml"), tmp("log"));
    let window = match gw {
        Gw::Userspace | Gw::Offloaded => {
            std::fs::write(&flows.0, format!("{FLOW}\n")).context("writing the flow")?;
            let flows_path = flows.0.to_string_lossy().into_owned();
            let cfg_path = cfg.0.to_string_lossy().into_owned();
            let mut extra = vec!["--port", TUNNEL_PORT, "--flows", flows_path.as_str()];
            if gw == Gw::Offloaded {
                std::fs::write(&cfg.0, OFFLOAD_CONFIG).context("writing the configuration")?;
                extra.extend(["--config", cfg_path.as_str()]);
            }
            let (mut s, _) = start_offlow_logged(bin, &sw, queues, true, &extra, Some(&log.0))?;
            gro_on(&sw, "p1")?;
            let w = measure(&t, row, args, &frame, Some(s.child.id()), &sink, seen)?;
            s.check_alive()?;
            // Stopping it writes the exit counters to the log.
            drop(s);
            let text = std::fs::read_to_string(&log.0).unwrap_or_default();
            if gw == Gw::Offloaded {
                let hits = log_field(&text, "offload tier stopped", "hits")
                    .context("the switch logged no `offload tier stopped` line")?;
                let packets = log_field(&text, "data plane stopped", "packets");
                row.tier_hits = Some(hits);
                row.tier_share = packets
                    .filter(|p| hits + p > 0)
                    .map(|p| hits as f64 / (hits + p) as f64);
                if hits == 0 {
                    bail!(
                        "the offload tier served no frame ({} in userspace): not an offloaded \
                         row",
                        packets.map_or("?".into(), |p| p.to_string())
                    );
                }
            }
            w
        }
        Gw::Ovs => {
            let ovs = Ovs::start_gateway(&sw)?;
            gro_on(&sw, "p1")?;
            let w = measure(&t, row, args, &frame, ovs.vswitchd_pid(), &sink, seen)?;
            let dump = ovs.gateway_dp_flows()?;
            ovs_flows_decap_and_tag(&dump).map_err(|e| anyhow::anyhow!("{e}"))?;
            w
        }
    };
    check_window(&window).map_err(|e| anyhow::anyhow!("{e}"))?;
    if row.flows_seen != args.flows as usize {
        bail!(
            "{} of {} inner source ports arrived",
            row.flows_seen,
            args.flows
        );
    }
    let samples = sink.samples()?;
    if samples.is_empty() {
        bail!("the sink kept no sample");
    }
    for (i, (f, len)) in samples.iter().enumerate() {
        check_frame(f, *len, args.flows).map_err(|e| anyhow::anyhow!("sampled frame {i}: {e}"))?;
    }
    row.samples_checked = Some(samples.len());
    row.translated = Some(window.translated);
    Ok(())
}

/// Issue 25's gateway goals, from the rows that ran.
#[derive(Debug, Clone, Serialize)]
pub struct GatewayGoals {
    /// Best offloaded ÷ best userspace received rate (goal ≥ 3).
    pub offloaded_vs_userspace: Option<f64>,
    /// Best offloaded ÷ Open vSwitch (goal ≥ 5).
    pub offloaded_vs_ovs: Option<f64>,
    /// Best userspace ÷ Open vSwitch (information).
    pub userspace_vs_ovs: Option<f64>,
}

/// The goal ratios.
pub fn goals(rows: &[Row]) -> GatewayGoals {
    let best = |k: &str| {
        rows.iter()
            .filter(|r| r.kind == k && r.ran())
            .map(|r| r.rx_mpps)
            .reduce(f64::max)
    };
    let (off, user, ovs) = (best("gw-offloaded"), best("gw-userspace"), best("gw-ovs"));
    GatewayGoals {
        offloaded_vs_userspace: super::ratio(off, user),
        offloaded_vs_ovs: super::ratio(off, ovs),
        userspace_vs_ovs: super::ratio(user, ovs),
    }
}

/// The gateway group's checks and goals, printed after the table
/// (`frame_size`: the inner frame's, with FCS).
pub(super) fn print(rows: &[Row], frame_size: usize) {
    let outer = far_end().overhead() + frame_size - FCS_LEN;
    println!(
        "gateway rows: {outer}-byte frames on the wire into p1 (GRE with key, {}-byte inner \
         frame), {}-byte tagged frames out of p2; 'offered' and 'received' count the same frames",
        frame_size - FCS_LEN,
        frame_size - FCS_LEN + 4
    );
    for row in rows.iter().filter(|x| x.kind.starts_with("gw-") && x.ran()) {
        let tier = match (row.tier_hits, row.tier_share) {
            (Some(h), Some(s)) => format!("; offload tier hits {h} ({}%)", fmt_f(s * 100.0, 1)),
            (Some(h), None) => format!("; offload tier hits {h}"),
            _ => String::new(),
        };
        println!(
            "{}: {} of {} frames in the window decapsulated and tagged VLAN {VLAN}, {} sampled \
             frames checked whole{tier}",
            row.name,
            row.translated.unwrap_or(0),
            row.received,
            row.samples_checked.unwrap_or(0)
        );
    }
    println!("Gateway method: {GATEWAY_METHOD}");
    let g = goals(rows);
    let f = |v: Option<f64>| v.map(|x| format!("{}×", fmt_f(x, 2))).unwrap_or("-".into());
    println!(
        "goals (issue 25, gateway): offloaded/userspace {} (≥ 3), offloaded/ovs {} (≥ 5); \
         userspace/ovs {}",
        f(g.offloaded_vs_userspace),
        f(g.offloaded_vs_ovs),
        f(g.userspace_vs_ovs)
    );
}

/// Check the gateway rows' arguments (`--flows` is at most 50,000 for
/// every row: the inner ports stay below 65,536).
pub(super) fn check_args(a: &OffloadArgs) -> anyhow::Result<()> {
    // The tagged frame is checked whole from its sample.
    if a.frame_size - FCS_LEN + 4 > SAMPLE_LEN {
        bail!(
            "the gateway rows check whole frames of at most {} bytes with FCS (--frame-size)",
            SAMPLE_LEN - 4 + FCS_LEN
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use offlow_wire::tunnel::{classify, Classified};

    #[test]
    fn the_generator_frame_is_gre_with_key_7_around_a_valid_inner_frame() {
        let f = frame(64).expect("frame");
        assert_eq!(f.len(), 14 + 20 + 8 + 60);
        assert_eq!(f[0..6], UNDERLAY_MAC);
        assert_eq!(f[6..12], GEN_MAC);
        assert_eq!(fold(sum(&f[14..34], 0)), 0xffff, "outer IPv4 checksum");
        assert_eq!(f[23], 47, "GRE");
        // K only (no checksum, no sequence), TEB, key 7.
        assert_eq!(f[34..42], [0x20, 0, 0x65, 0x58, 0, 0, 0, 7]);
        assert_eq!(f[42..], inner_frame(64, 0)[..]);
        assert_eq!(super::super::xdp::port_l3_offset(&f), Some(56));
        // offlow's own decapsulation takes it for the switch's tunnel.
        let mut ours = far_end();
        (ours.local_ip, ours.remote_ip) = (LOCAL_IP.octets(), REMOTE_IP.octets());
        ours.key = KeyMode::Flow;
        match classify(&f, &[ours]) {
            Classified::Tunnel(d) => {
                assert_eq!((d.tunnel_id, d.inner), (u64::from(KEY), 42..102));
            }
            other => panic!("not decapsulated: {other:?}"),
        }
    }

    #[test]
    fn a_tagged_inner_frame_passes_and_each_fault_is_named() {
        for n in [0u16, 99] {
            let good = tagged(&inner_frame(64, n));
            assert_eq!(good.len(), 64);
            assert_eq!(check_frame(&good, 64, 100), Ok(()));
        }
        let good = tagged(&inner_frame(64, 3));
        // Untagged (the inner frame as it was), or still encapsulated.
        assert!(check_frame(&inner_frame(64, 3), 60, 100).is_err());
        assert!(check_frame(&frame(64).expect("frame"), 102, 100).is_err());
        // Another VLAN, a priority.
        let mut f = good.clone();
        f[15] = 8;
        assert!(check_frame(&f, 64, 100)
            .expect_err("vid")
            .contains("VLAN 8"));
        let mut f = good.clone();
        f[14] = 0x20;
        assert!(check_frame(&f, 64, 100).expect_err("pcp").contains("PCP 1"));
        // A port outside the flows (the generator's rotation broke).
        assert!(check_frame(&good, 64, 3)
            .expect_err("port")
            .contains("ports"));
        // The inner port changed without its checksum.
        let mut f = good.clone();
        f[39] ^= 1;
        assert_eq!(check_frame(&f, 64, 100), Err("bad UDP checksum".into()));
        let mut f = good.clone();
        f[26] -= 1;
        assert!(check_frame(&f, 64, 100)
            .expect_err("ttl")
            .starts_with("TTL"));
        let mut f = good;
        f[6..12].copy_from_slice(&UNDERLAY_MAC);
        assert!(check_frame(&f, 64, 100).is_err());
    }

    #[test]
    fn windows_without_every_frame_tagged_fail() {
        let w = |frames: u64, translated: u64, other| SinkCounts {
            frames,
            bytes: 0,
            other,
            translated,
            untranslated: frames.saturating_sub(translated),
        };
        assert_eq!(check_window(&w(1000, 1000, 3)), Ok(()));
        assert!(
            check_window(&w(0, 0, 5000)).is_err(),
            "nothing decapsulated"
        );
        assert!(check_window(&w(1000, 999, 0))
            .expect_err("untagged")
            .contains("NOT TAGGED"));
        assert!(
            check_window(&w(1000, 1000, 500)).is_err(),
            "half not decapsulated"
        );
    }

    #[test]
    fn ovs_dump_must_pop_and_tag() {
        let dump = "recirc_id(0),in_port(1),eth(dst=02:00:00:00:01:01),eth_type(0x0800),\
ipv4(dst=192.168.50.1,proto=47,frag=no), packets:4, bytes:408, used:6.719s, actions:tnl_pop(4)\n\
tunnel(tun_id=0x7,src=192.168.50.2,dst=192.168.50.1,flags(-df-csum+key)),recirc_id(0),in_port(4),\
eth_type(0x0800),ipv4(frag=no), packets:4, bytes:240, used:6.764s, actions:push_vlan(vid=7,pcp=0),3\n";
        assert_eq!(ovs_flows_decap_and_tag(dump), Ok(()));
        let idle = dump.replace("packets:4", "packets:0");
        assert!(ovs_flows_decap_and_tag(&idle).is_err());
        let no_pop = dump.replace("tnl_pop(4)", "2");
        assert!(ovs_flows_decap_and_tag(&no_pop).is_err());
    }

    #[test]
    fn goals_compare_best_rows() {
        let mut rows = Vec::new();
        for (kind, q, mpps) in [
            ("gw-userspace", 1, 0.5),
            ("gw-userspace", 2, 0.8),
            ("gw-offloaded", 1, 4.0),
            ("gw-ovs", 1, 0.4),
        ] {
            let mut r = Row::empty(format!("{kind} {q}"), kind, q);
            r.rx_mpps = mpps;
            rows.push(r);
        }
        let g = goals(&rows);
        assert_eq!(g.offloaded_vs_userspace, Some(5.0));
        assert_eq!(g.offloaded_vs_ovs, Some(10.0));
        assert_eq!(g.userspace_vs_ovs, Some(2.0));
        rows[2].error = Some("not offloaded".into());
        assert_eq!(goals(&rows).offloaded_vs_userspace, None);
    }
}
