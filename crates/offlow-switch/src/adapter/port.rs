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
    /// The interface's own receive drops (module docs of
    /// `offlow_io::rtnl`), counted from when the switch opened it.
    kernel_drops: KernelDrops,
    /// Add them to the port's `rx_dropped` (set by
    /// [`SwitchPort::counting_interface_drops`]; no read is taken
    /// otherwise).
    counts_interface_drops: bool,
}

/// An interface's kernel `rx_dropped` as the port counts it: from the
/// value read when its transmit socket was opened, and summed over the
/// interfaces a port has had (a re-created interface starts from zero).
/// Plain arithmetic over the reads the port takes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct KernelDrops {
    /// The interface's count when opened; `None` until a read succeeds.
    base: Option<u64>,
    /// Drops since `base`, as last read.
    seen: u64,
    /// Drops of the interfaces the port had before this one.
    earlier: u64,
}

impl KernelDrops {
    /// A new interface was opened, its counter reading `now` (`None`:
    /// unreadable): what the previous one dropped is kept.
    fn opened(&mut self, now: Option<u64>) {
        self.earlier += self.seen;
        self.seen = 0;
        self.base = now;
    }

    /// The counter read `now` (`None`: unreadable, e.g. the interface is
    /// gone): the port's total, and the drops since opening remembered.
    fn read(&mut self, now: Option<u64>) -> u64 {
        match (self.base, now) {
            (None, Some(now)) => self.base = Some(now),
            (Some(base), Some(now)) => self.seen = now.saturating_sub(base),
            (_, None) => {}
        }
        self.total_with(now)
    }

    /// The port's total were the counter to read `now`, without taking
    /// note of it.
    fn total_with(&self, now: Option<u64>) -> u64 {
        let since = match (self.base, now) {
            (Some(base), Some(now)) => now.saturating_sub(base),
            _ => self.seen,
        };
        self.earlier + since
    }
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
            kernel_drops: KernelDrops::default(),
            counts_interface_drops: false,
        }
    }

    /// The port, adding its interface's own receive drops to its
    /// `rx_dropped` from now on. For AF_PACKET ports: their socket is a
    /// tap, and what the interface drops is disjoint from what its ring
    /// drops. Not for AF_XDP ports: a veth counts a redirect its socket's
    /// full ring refused among its own receive drops, and the socket
    /// counts it too.
    pub fn counting_interface_drops(mut self) -> SwitchPort {
        self.counts_interface_drops = true;
        self.kernel_drops_from_now();
        self
    }

    /// The interface's `rx_dropped` now, if it can be read.
    fn read_interface_drops(&self) -> Option<u64> {
        Some(self.tx.as_ref()?.counters().ok()?.rx_dropped)
    }

    /// Count the interface's drops from now (its transmit socket was just
    /// opened).
    fn kernel_drops_from_now(&mut self) {
        if !self.counts_interface_drops {
            return;
        }
        let now = self.read_interface_drops();
        self.kernel_drops.opened(now);
    }

    /// Frames the port's interfaces dropped on receive before any socket
    /// of the switch saw them (the TC offload tier's miss path through a
    /// full backlog, for one), since the switch opened them: a read of the
    /// kernel's counter now (or, when the interface cannot be read, the
    /// last one [`refresh_kernel_drops`](Self::refresh_kernel_drops)
    /// took). 0 unless `counts_interface_drops`.
    pub fn kernel_rx_dropped(&self) -> u64 {
        if !self.counts_interface_drops {
            return 0;
        }
        self.kernel_drops.total_with(self.read_interface_drops())
    }

    /// Take the interface's count now, so that what it dropped stays
    /// counted if it disappears (called at every link poll).
    pub fn refresh_kernel_drops(&mut self) {
        if self.counts_interface_drops {
            let now = self.read_interface_drops();
            self.kernel_drops.read(now);
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
                self.kernel_drops_from_now();
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

#[cfg(test)]
mod tests {
    use super::KernelDrops;

    #[test]
    fn kernel_drops_count_from_the_opening_and_survive_a_re_created_interface() {
        let mut k = KernelDrops::default();
        // Opened with 40 drops already counted: they are not ours.
        k.opened(Some(40));
        assert_eq!(k.total_with(Some(40)), 0);
        assert_eq!(k.read(Some(47)), 7);
        // Gone: the last read stands.
        assert_eq!(k.read(None), 7);
        assert_eq!(k.total_with(None), 7);
        // Re-created: a new counter from 0, added to the old one's 7.
        k.opened(Some(0));
        assert_eq!(k.read(Some(3)), 10);
        // A counter that goes backwards (a reset) never subtracts.
        assert_eq!(k.total_with(Some(0)), 7);
    }

    #[test]
    fn an_unreadable_counter_at_opening_is_based_at_its_first_read() {
        let mut k = KernelDrops::default();
        k.opened(None);
        assert_eq!(k.read(Some(100)), 0);
        assert_eq!(k.read(Some(105)), 5);
    }
}
