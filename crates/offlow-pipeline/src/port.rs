//! OpenFlow port numbers (`ofp_port_no`, OpenFlow 1.3.5 §7.2.1) and group
//! ids: the codec owns them ([`offlow_openflow::port`]); the pipeline's
//! actions and filters use them as they are.

pub use offlow_openflow::port::{PortNo, CONTROLLER_NO_BUFFER, GROUP_ANY, TABLE_ALL};
