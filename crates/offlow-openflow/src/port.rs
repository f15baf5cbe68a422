//! Port configuration and state bits (`enum ofp_port_config`,
//! `enum ofp_port_state`, OpenFlow 1.3.5 §7.2.1), as carried by
//! [`crate::Port`], [`crate::PortMod`] and PORT_STATUS.

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
