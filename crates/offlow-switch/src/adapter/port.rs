//! [`SwitchPort`]: a data port as the control side keeps it (its transmit
//! socket for packet-outs, link state, OpenFlow configuration and the
//! packet-out counters), and its OpenFlow description.

use offlow_io::netns::in_netns;
use offlow_io::{AfPacketTx, LinkState};
use offlow_openflow::port::{
    OFPPC_NO_FWD, OFPPC_NO_PACKET_IN, OFPPC_NO_RECV, OFPPC_PORT_DOWN, OFPPS_LINK_DOWN,
};
use offlow_openflow::FixedStr;

/// A data port as the control side sees it.
pub struct SwitchPort {
    /// OpenFlow port number.
    pub number: u32,
    /// Linux interface name.
    pub name: String,
    /// Backed by a Linux interface (AF_PACKET or AF_XDP), which may come
    /// and go; a capture port is not.
    pub interface: bool,
    /// Packet-out transmit socket (`None`: outputs to it are dropped; for
    /// an interface port, its interface is missing until the next poll
    /// finds it).
    pub tx: Option<AfPacketTx>,
    /// Last link state read.
    pub link: LinkState,
    /// Packet-out frames sent on it.
    pub tx_packets: u64,
    /// Its OpenFlow configuration (`OFPPC_*` bits set by PORT_MOD; the
    /// interface's own admin state adds `OFPPC_PORT_DOWN` in its
    /// description).
    pub config: u32,
    /// An unexpected failure to open it was logged (reset when the
    /// interface is found missing, so the next failure is logged again).
    pub(super) open_failed: bool,
    /// A tunnel port: its encapsulation (local address resolved) and its
    /// underlay's port number; packet-outs to it are encapsulated and
    /// sent on the underlay's transmit socket.
    pub tunnel: Option<(offlow_wire::tunnel::Endpoint, u32)>,
}

/// The `OFPPC_*` bits PORT_MOD may set (OpenFlow 1.3.5 §7.2.1).
pub const OFPPC_SETTABLE: u32 = OFPPC_PORT_DOWN | OFPPC_NO_RECV | OFPPC_NO_FWD | OFPPC_NO_PACKET_IN;

impl SwitchPort {
    /// Live for the groups' buckets that watch it (§6.5 fast failover): a
    /// capture port always; an interface while its interface is there, up
    /// with a carrier, and not configured down by PORT_MOD.
    pub fn is_live(&self) -> bool {
        let configured_up = self.config & OFPPC_PORT_DOWN == 0;
        configured_up
            && (!self.interface || (self.tx.is_some() && self.link.admin_up && self.link.link_up))
    }

    /// A port with its transmit socket (if any) and link state as read.
    pub fn new(
        number: u32,
        name: &str,
        interface: bool,
        tx: Option<AfPacketTx>,
        link: LinkState,
    ) -> SwitchPort {
        SwitchPort {
            number,
            name: name.to_string(),
            interface,
            tx,
            link,
            tx_packets: 0,
            config: 0,
            open_failed: false,
            tunnel: None,
        }
    }

    /// Look for the port's interface in namespace `netns` and, if it is
    /// there, open a transmit socket on it; its link state, or `None`
    /// (missing, or failed: logged once).
    pub(super) fn open_tx(&mut self, netns: Option<&str>) -> Option<LinkState> {
        let name = self.name.as_str();
        // `None`: no interface of that name (the expected case while it is
        // missing, not worth a line every poll).
        let opened = in_netns(netns, || {
            offlow_io::afpacket::ifindex(name).ok()?;
            Some(AfPacketTx::open(name).and_then(|tx| tx.link().map(|l| (tx, l))))
        });
        let failure = match opened {
            Ok(None) => {
                self.open_failed = false;
                return None;
            }
            Ok(Some(Ok((tx, link)))) => {
                self.tx = Some(tx);
                self.open_failed = false;
                return Some(link);
            }
            Ok(Some(Err(e))) => e,
            Err(e) => e,
        };
        if !self.open_failed {
            self.open_failed = true;
            tracing::warn!(port = self.number, name = %self.name, error = %failure,
                "port interface present but cannot be opened; retried every poll (logged once)");
        }
        None
    }

    /// The port's OpenFlow description.
    pub fn desc(&self) -> offlow_openflow::Port {
        offlow_openflow::Port {
            port_no: self.number,
            hw_addr: self.link.hw_addr,
            name: FixedStr::new(&self.name),
            config: self.config
                | if self.link.admin_up {
                    0
                } else {
                    OFPPC_PORT_DOWN
                },
            state: if self.link.link_up {
                0
            } else {
                OFPPS_LINK_DOWN
            },
            // Virtual interfaces advertise no medium: 10 Gb/s full duplex
            // copper, as Open vSwitch reports for veths.
            curr: OFPPF_10GB_FD | OFPPF_COPPER,
            advertised: 0,
            supported: 0,
            peer: 0,
            curr_speed: 10_000_000,
            max_speed: 0,
        }
    }
}

/// `OFPPF_10GB_FD`.
const OFPPF_10GB_FD: u32 = 1 << 6;
/// `OFPPF_COPPER`.
const OFPPF_COPPER: u32 = 1 << 11;
