//! A synthetic OpenFlow switch (cbench's idea) for `offlow bench setup
//! --switches synthetic`: it measures what the controller alone can serve,
//! with no data path, hosts or kernel in the loop.
//!
//! What it does: connects to the controller as a switch (the sans-IO
//! [`Connection`] answers the handshake, echoes and multiparts), waits for
//! the source-NAT app's table-miss entry, then keeps `window` connection
//! setups in flight: each is a PACKET_IN of a new connection's TCP SYN
//! (host A 10.0.0.1, a fresh source port, to 192.0.2.2:5001, in port 1,
//! table miss), answered when the PACKET_OUT of that SYN comes back (the
//! app sends its two flow-mods before it). The flows the app asked to hear
//! about (`OFPFF_SEND_FLOW_REM`) are reported removed once their idle
//! timeout has passed, as a switch whose flows idle out would, so the
//! controller does the same work per connection as behind a real switch:
//! one PACKET_IN, two FLOW_MODs and a PACKET_OUT, two FLOW_REMOVEDs.
//!
//! Invariants: one thread, one blocking socket with a short read timeout;
//! every wait is bounded by the phase flag. The switch itself costs a few
//! microseconds per connection (encode, decode), so the rate it sees is the
//! controller's.
//!
//! Thread-safety: runs on the caller's thread; shares only the phase flag
//! (an atomic) with the measuring thread.

use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use offlow_flow::{Field, Match};
use offlow_openflow::multipart::{MultipartReplyBody as RB, MultipartRequestBody as QB};
use offlow_openflow::{
    Body, ConnConfig, Connection, Desc, FixedStr, FlowMod, FlowRemoved, OfError, OxmMatch,
    PacketIn, PacketOut, Roles, Switch, SwitchFeatures, OFP_NO_BUFFER,
};
use offlow_testkit::{tcp_flags, FrameBuilder};

/// Host A's MAC, the app's gateway MAC (its default `SNAT_MAC`).
const A_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x11];
const GATEWAY_MAC: [u8; 6] = [0x02, 0x5a, 0, 0, 0, 0x01];
/// `OFPFF_SEND_FLOW_REM`, `OFPFC_ADD`, `OFPRR_IDLE_TIMEOUT`.
const SEND_FLOW_REM: u16 = 1;
const FC_ADD: u8 = 0;
const RR_IDLE_TIMEOUT: u8 = 0;

/// Phases, as the bench's clients use them.
pub const WARMUP: u8 = 0;
/// Count answered setups.
pub const COUNT: u8 = 1;
/// Leave.
pub const STOP: u8 = 2;

/// What the run measured in the counted phase.
#[derive(Debug, Default)]
pub struct Measured {
    /// Packet-in to packet-out, ms, per answered setup.
    pub latencies_ms: Vec<f64>,
}

/// The switch side the connection calls into: records what the
/// controller sent.
#[derive(Default)]
struct Recorder {
    /// The table-miss entry arrived: the app is ready.
    ready: bool,
    /// Source ports whose SYN came back in a packet-out.
    answered: Vec<u16>,
    /// Flows to report removed: (due, the FLOW_REMOVED).
    removals: VecDeque<(Instant, FlowRemoved)>,
}

impl Switch for Recorder {
    fn features(&self) -> SwitchFeatures {
        SwitchFeatures {
            datapath_id: 1,
            n_buffers: 0,
            n_tables: 1,
            auxiliary_id: 0,
            capabilities: 0,
            reserved: 0,
        }
    }

    fn flow_mod(&mut self, fm: &FlowMod, _now_ns: u64) -> Result<(), OfError> {
        if fm.command != FC_ADD {
            return Ok(());
        }
        if fm.priority == 0 {
            self.ready = true;
        }
        if fm.flags & SEND_FLOW_REM != 0 && fm.idle_timeout > 0 {
            let due = Instant::now() + Duration::from_secs(u64::from(fm.idle_timeout));
            self.removals.push_back((
                due,
                FlowRemoved {
                    cookie: fm.cookie,
                    priority: fm.priority,
                    reason: RR_IDLE_TIMEOUT,
                    table_id: fm.table_id,
                    duration_sec: u32::from(fm.idle_timeout),
                    duration_nsec: 0,
                    idle_timeout: fm.idle_timeout,
                    hard_timeout: fm.hard_timeout,
                    packet_count: 1,
                    byte_count: 64,
                    matcher: fm.matcher.clone(),
                },
            ));
        }
        Ok(())
    }

    fn barrier(&mut self) {}

    fn multipart(&mut self, req: &QB, _now_ns: u64) -> Result<RB, OfError> {
        Ok(match req {
            QB::Desc => RB::Desc(Box::new(Desc {
                mfr_desc: FixedStr::new("offlow synthetic switch"),
                ..Default::default()
            })),
            QB::PortDesc => RB::PortDesc(Vec::new()),
            QB::Table => RB::Table(Vec::new()),
            QB::TableFeatures(_) => RB::TableFeatures(Vec::new()),
            _ => {
                return Err(OfError::BadRequest(
                    offlow_openflow::BadRequestCode::BadMultipart,
                ))
            }
        })
    }

    fn packet_out(&mut self, po: &PacketOut) -> Result<(), OfError> {
        // Ethernet (14) + IPv4 without options (20): the TCP source port.
        if let Some(p) = po.data.get(34..36) {
            self.answered.push(u16::from_be_bytes([p[0], p[1]]));
        }
        Ok(())
    }
}

/// The packet-in of a SYN from A's `sport`.
fn syn_packet_in(sport: u16) -> Body {
    let data = FrameBuilder::eth(GATEWAY_MAC, A_MAC)
        .ipv4([10, 0, 0, 1], [192, 0, 2, 2])
        .tcp(sport, 5001)
        .tcp_flags(tcp_flags::SYN)
        .build();
    let mut m = Match::ANY;
    m.set_exact(Field::InPort, 1);
    Body::PacketIn(PacketIn {
        buffer_id: OFP_NO_BUFFER,
        total_len: data.len() as u16,
        reason: offlow_openflow::packet_in_reason::NO_MATCH,
        table_id: 0,
        cookie: 0x534E_4154 << 32,
        matcher: OxmMatch::from_match(&m),
        data,
    })
}

/// Run the synthetic switch against the controller at `stream` (already
/// connected) with `window` setups in flight, until `phase` says
/// [`STOP`]; answers in the [`COUNT`] phase are measured. Fails if the
/// controller closes or never installs its table-miss entry within
/// `ready_wait`.
pub fn run(
    stream: TcpStream,
    window: usize,
    phase: &AtomicU8,
    ready_wait: Duration,
) -> anyhow::Result<Measured> {
    let mut stream = stream;
    stream.set_nodelay(true)?;
    // Short: the loop also sends due FLOW_REMOVEDs and refills the window.
    stream.set_read_timeout(Some(Duration::from_micros(500)))?;
    let epoch = Instant::now();
    let now_ns = || epoch.elapsed().as_nanos() as u64;
    let mut roles = Roles::new();
    let id = roles.register();
    let mut conn = Connection::new(ConnConfig::default(), id, now_ns());
    let mut sw = Recorder::default();
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    // Source port -> when its packet-in left.
    let mut in_flight: HashMap<u16, Instant> = HashMap::new();
    let mut next_port: u16 = 1024;
    let mut measured = Measured::default();
    let start = Instant::now();
    while phase.load(Ordering::Relaxed) != STOP {
        if sw.ready {
            while in_flight.len() < window.max(1) {
                // Ports 1024..=65535 in turn: a port comes back long after
                // its connection's flows (idle timeout 2 s) are gone.
                let p = next_port;
                next_port = if next_port == u16::MAX {
                    1024
                } else {
                    next_port + 1
                };
                in_flight.insert(p, Instant::now());
                conn.send_async(syn_packet_in(p), &roles);
            }
            let now = Instant::now();
            while sw.removals.front().is_some_and(|(due, _)| *due <= now) {
                if let Some((_, fr)) = sw.removals.pop_front() {
                    conn.send_async(Body::FlowRemoved(fr), &roles);
                }
            }
        } else if start.elapsed() > ready_wait {
            anyhow::bail!("the controller installed no table-miss entry within {ready_wait:?}");
        }
        out.clear();
        conn.poll_transmit(&mut out);
        if !out.is_empty() {
            stream
                .write_all(&out)
                .context("writing to the controller")?;
        }
        match stream.read(&mut buf) {
            Ok(0) => anyhow::bail!("the controller closed the connection"),
            Ok(n) => conn.receive(&buf[..n], now_ns(), &mut sw, &mut roles),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(e).context("reading from the controller"),
        }
        conn.handle_timeout(now_ns());
        if let Some(r) = conn.close_reason() {
            anyhow::bail!("the connection closed: {r:?}");
        }
        let counting = phase.load(Ordering::Relaxed) == COUNT;
        for p in sw.answered.drain(..) {
            if let Some(t0) = in_flight.remove(&p) {
                if counting {
                    measured.latencies_ms.push(t0.elapsed().as_secs_f64() * 1e3);
                }
            }
        }
    }
    Ok(measured)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The packet-in carries a SYN whose source port the recorder reads
    /// back from a packet-out of the same frame.
    #[test]
    fn the_answer_names_the_setup() {
        let Body::PacketIn(pi) = syn_packet_in(40_000) else {
            panic!("kind")
        };
        assert_eq!(&pi.data[12..14], &[0x08, 0x00]);
        assert_eq!(pi.data[23], 6, "TCP");
        assert_eq!(pi.data[47] & 0x3f, 0x02, "SYN only");
        let mut sw = Recorder::default();
        let po = PacketOut {
            buffer_id: OFP_NO_BUFFER,
            in_port: 1,
            actions: Vec::new(),
            data: pi.data,
        };
        sw.packet_out(&po).unwrap();
        assert_eq!(sw.answered, vec![40_000]);
    }

    /// Only added flows that asked for FLOW_REMOVED are reported, with
    /// their cookie; the table-miss entry makes the switch ready.
    #[test]
    fn removals_follow_the_flags() {
        let mut sw = Recorder::default();
        let fm = |priority: u16, flags: u16, command: u8| FlowMod {
            cookie: 7,
            cookie_mask: 0,
            table_id: 0,
            command,
            idle_timeout: 2,
            hard_timeout: 0,
            priority,
            buffer_id: OFP_NO_BUFFER,
            out_port: 0,
            out_group: 0,
            flags,
            matcher: OxmMatch::from_match(&Match::ANY),
            instructions: Vec::new(),
        };
        sw.flow_mod(&fm(0, 0, FC_ADD), 0).unwrap();
        assert!(sw.ready);
        sw.flow_mod(&fm(100, SEND_FLOW_REM, 3), 0).unwrap();
        assert!(sw.removals.is_empty(), "a delete is not installed");
        sw.flow_mod(&fm(100, SEND_FLOW_REM, FC_ADD), 0).unwrap();
        assert_eq!(sw.removals.len(), 1);
        assert_eq!(sw.removals[0].1.cookie, 7);
    }
}
