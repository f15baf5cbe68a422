//! Port numbers (`ofp_port_no`, OpenFlow 1.3.5 §7.2.1) with the reserved
//! ports, the group and table wildcards, and the port configuration and
//! state bits (`enum ofp_port_config`, `enum ofp_port_state`, §7.2.1), as
//! carried by [`crate::Port`], [`crate::PortMod`] and PORT_STATUS.

use core::fmt;

/// `OFPPC_PORT_DOWN`: the port is administratively down.
pub const OFPPC_PORT_DOWN: u32 = 1;
/// `OFPPC_NO_RECV`: drop everything received on the port.
pub const OFPPC_NO_RECV: u32 = 1 << 2;
/// `OFPPC_NO_FWD`: drop everything sent to the port.
pub const OFPPC_NO_FWD: u32 = 1 << 5;
/// `OFPPC_NO_FLOOD`: not part of FLOOD (deprecated in 1.3, still reported).
pub const OFPPC_NO_FLOOD: u32 = 1 << 4;
/// `OFPPC_NO_PACKET_IN`: no packet-ins for table misses of frames received
/// on the port.
pub const OFPPC_NO_PACKET_IN: u32 = 1 << 6;

/// `OFPPS_LINK_DOWN`: no physical link present.
pub const OFPPS_LINK_DOWN: u32 = 1;
/// `OFPPS_BLOCKED`: blocked (by a spanning-tree or similar protocol).
pub const OFPPS_BLOCKED: u32 = 1 << 1;
/// `OFPPS_LIVE`: live for fast-failover groups.
pub const OFPPS_LIVE: u32 = 1 << 2;

/// An OpenFlow port number. Physical and logical ports are `1..=MAX`; the
/// values above [`PortNo::MAX`] are the reserved ports (`OFPP_*`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct PortNo(pub u32);

impl PortNo {
    /// `OFPP_MAX`: the largest physical/logical port number.
    pub const MAX: PortNo = PortNo(0xffff_ff00);
    /// `OFPP_IN_PORT`: send the packet out of its input port.
    pub const IN_PORT: PortNo = PortNo(0xffff_fff8);
    /// `OFPP_TABLE`: submit to the first table (packet-out only).
    pub const TABLE: PortNo = PortNo(0xffff_fff9);
    /// `OFPP_NORMAL`: traditional L2/L3 processing (optional; not supported).
    pub const NORMAL: PortNo = PortNo(0xffff_fffa);
    /// `OFPP_FLOOD`: all ports except the input port and blocked ones.
    pub const FLOOD: PortNo = PortNo(0xffff_fffb);
    /// `OFPP_ALL`: all ports except the input port.
    pub const ALL: PortNo = PortNo(0xffff_fffc);
    /// `OFPP_CONTROLLER`: packet-in to the controller.
    pub const CONTROLLER: PortNo = PortNo(0xffff_fffd);
    /// `OFPP_LOCAL`: the switch's local networking stack.
    pub const LOCAL: PortNo = PortNo(0xffff_fffe);
    /// `OFPP_ANY`: wildcard in filters; never a valid output.
    pub const ANY: PortNo = PortNo(0xffff_ffff);

    /// True for a physical or logical port number (`1..=OFPP_MAX`).
    pub const fn is_physical(self) -> bool {
        self.0 != 0 && self.0 <= Self::MAX.0
    }
}

impl fmt::Debug for PortNo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match *self {
            PortNo::IN_PORT => "IN_PORT",
            PortNo::TABLE => "TABLE",
            PortNo::NORMAL => "NORMAL",
            PortNo::FLOOD => "FLOOD",
            PortNo::ALL => "ALL",
            PortNo::CONTROLLER => "CONTROLLER",
            PortNo::LOCAL => "LOCAL",
            PortNo::ANY => "ANY",
            PortNo(n) => return write!(f, "{n}"),
        };
        f.write_str(name)
    }
}

impl From<u32> for PortNo {
    fn from(n: u32) -> Self {
        PortNo(n)
    }
}

/// `OFPG_ANY`: wildcard group in filters.
pub const GROUP_ANY: u32 = 0xffff_ffff;
/// `OFPTT_ALL`: every table (delete and stats requests only).
pub const TABLE_ALL: u8 = 0xff;
/// `OFPCML_NO_BUFFER`: send the whole packet to the controller.
pub const CONTROLLER_NO_BUFFER: u16 = 0xffff;
