//! [`DataplaneStats`]: what the packet threads count, published by each
//! worker every [`super::PUBLISH_EVERY`], and the handle that sums them.

use std::sync::{Arc, Mutex};

use offlow_datapath::WorkerStats;
use offlow_io::PortStats;

use super::lock;

/// Counters of one worker thread.
#[derive(Debug, Clone, Default)]
pub struct DataplaneStats {
    /// The datapath worker's counters.
    pub worker: WorkerStats,
    /// Per port the workers serve, in configuration order.
    pub ports: Vec<PortStats>,
    /// Their OpenFlow numbers (filled in sums from a [`StatsHandle`]).
    pub port_numbers: Vec<u32>,
    /// Frames longer than [`super::MAX_FRAME`] (dropped).
    pub drop_oversize: u64,
    /// Frames shorter than an Ethernet header (dropped).
    pub drop_runt: u64,
    /// Port errors seen (interface gone or down): the port is no longer
    /// polled until it is re-opened.
    pub failed_ports: u64,
    /// Ports re-opened after their interface (re)appeared.
    pub reopened: u64,
    /// Re-opens that failed (the port stays a placeholder until the next).
    pub reopen_failed: u64,
    /// Partial checksums finished in software.
    pub csum_finished: u64,
    /// Outputs to a port number this switch does not have (or LOCAL).
    pub drop_unknown_port: u64,
    /// Frames received on a port configured `no_recv` or `port_down`
    /// (dropped; in the port's `rx_dropped`, not its `rx_packets`).
    pub drop_no_recv: u64,
    /// Outputs to a port configured `no_fwd` or `port_down` (dropped;
    /// also in the port's `tx_dropped`).
    pub drop_no_fwd: u64,
    /// Packet-ins dropped because the control thread was behind.
    pub drop_packet_in_backlog: u64,
    /// Frames sent to CONTROLLER for a reason no connection (nor standalone
    /// learning) wanted: counted, not copied.
    pub drop_packet_in_unwanted: u64,
    /// Packet-ins queued.
    pub packet_ins: u64,
    /// Frames this worker handed to another worker's inbox.
    pub steered_out: u64,
    /// Frames other workers steered here, processed.
    pub steered_in: u64,
    /// Frames to steer away dropped because the destination's inbox
    /// was full.
    pub drop_steer_inbox_full: u64,
    /// Frames addressed to a tunnel port whose outer or tunnel header was
    /// malformed (dropped; also in the tunnel port's `rx_errors`).
    pub drop_tunnel_malformed: u64,
    /// Frames addressed to the tunnels' addresses with a key no tunnel
    /// port takes (dropped).
    pub drop_tunnel_unknown_key: u64,
}

impl DataplaneStats {
    /// The counters of OpenFlow port `number`, if a worker serves it.
    pub fn port(&self, number: u32) -> Option<PortStats> {
        let i = self.port_numbers.iter().position(|&n| n == number)?;
        self.ports.get(i).copied()
    }

    /// Field-wise sum (ports by position).
    pub fn add(&mut self, o: &DataplaneStats) {
        self.worker.add(&o.worker);
        if self.ports.len() < o.ports.len() {
            self.ports.resize(o.ports.len(), PortStats::default());
        }
        for (a, b) in self.ports.iter_mut().zip(&o.ports) {
            a.add(b);
        }
        self.drop_oversize += o.drop_oversize;
        self.drop_runt += o.drop_runt;
        self.failed_ports += o.failed_ports;
        self.reopened += o.reopened;
        self.reopen_failed += o.reopen_failed;
        self.csum_finished += o.csum_finished;
        self.drop_unknown_port += o.drop_unknown_port;
        self.drop_no_recv += o.drop_no_recv;
        self.drop_no_fwd += o.drop_no_fwd;
        self.drop_packet_in_backlog += o.drop_packet_in_backlog;
        self.drop_packet_in_unwanted += o.drop_packet_in_unwanted;
        self.packet_ins += o.packet_ins;
        self.steered_out += o.steered_out;
        self.steered_in += o.steered_in;
        self.drop_steer_inbox_full += o.drop_steer_inbox_full;
        self.drop_tunnel_malformed += o.drop_tunnel_malformed;
        self.drop_tunnel_unknown_key += o.drop_tunnel_unknown_key;
    }
}

/// Reads the workers' published counters from any thread (they are at
/// most [`super::PUBLISH_EVERY`] old).
#[derive(Clone)]
pub struct StatsHandle {
    pub(super) slots: Vec<Arc<Mutex<DataplaneStats>>>,
    /// OpenFlow numbers of the ports, in the order of `DataplaneStats::ports`.
    pub(super) numbers: Vec<u32>,
}

impl StatsHandle {
    /// Sum over the workers.
    pub fn stats(&self) -> DataplaneStats {
        let mut total = DataplaneStats {
            ports: vec![PortStats::default(); self.numbers.len()],
            port_numbers: self.numbers.clone(),
            ..DataplaneStats::default()
        };
        for s in &self.slots {
            total.add(&lock(s));
        }
        total
    }

    /// Each worker's counters, by worker index.
    pub fn per_worker(&self) -> Vec<DataplaneStats> {
        self.slots
            .iter()
            .map(|s| DataplaneStats {
                port_numbers: self.numbers.clone(),
                ..lock(s).clone()
            })
            .collect()
    }
}
