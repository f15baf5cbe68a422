//! [`CountingSink`]: an [`OutputSink`] that only counts, per port, for
//! benchmarks and tests (no copies, nothing sent).

use offlow_pipeline::PacketInOrigin;

use crate::execute::{OutputMeta, OutputSink, PortInfo};

/// Ports below this number are counted in a direct-indexed table by
/// [`CountingSink`] (as a transmit path indexes its per-port queues).
pub const COUNTING_SINK_PORTS: usize = 1024;

/// A sink that counts outputs per port (benchmarks and tests): no copies.
#[derive(Debug, Clone)]
pub struct CountingSink {
    /// Ports for FLOOD/ALL.
    pub ports: Vec<PortInfo>,
    /// Frames per output port, indexed by port number (ports below
    /// [`COUNTING_SINK_PORTS`]).
    pub per_port: Vec<u64>,
    /// Frames to ports at or above [`COUNTING_SINK_PORTS`] (LOCAL, ...).
    pub other_ports: u64,
    /// Packet-ins.
    pub to_controller: u64,
    /// Last output port (tests).
    pub last_port: Option<u32>,
}

impl Default for CountingSink {
    fn default() -> Self {
        CountingSink {
            ports: Vec::new(),
            per_port: vec![0; COUNTING_SINK_PORTS],
            other_ports: 0,
            to_controller: 0,
            last_port: None,
        }
    }
}

impl OutputSink for CountingSink {
    #[inline]
    fn output(&mut self, port: u32, _frame: &[u8], _meta: OutputMeta) {
        self.last_port = Some(port);
        match self.per_port.get_mut(port as usize) {
            Some(n) => *n += 1,
            None => self.other_ports += 1,
        }
    }

    fn controller(&mut self, _: &[u8], _: u16, _: PacketInOrigin, _: OutputMeta) {
        self.to_controller += 1;
    }

    fn port_count(&self) -> usize {
        self.ports.len()
    }

    fn port_info(&self, index: usize) -> Option<PortInfo> {
        self.ports.get(index).copied()
    }
}
