//! Standalone fail mode: a MAC-learning switch built from ordinary flows.
//!
//! While engaged (no active controller connected), the switch programs its
//! own pipeline, in two tables, with cookie [`COOKIE`] so the flows are
//! visible in `dump-flows` and removable in one delete:
//!
//! - table 0, priority 0 (table-miss): send the first 128 bytes to the
//!   "controller" (here: this module, which learns the source address),
//!   then go to table 1;
//! - table 0, priority 100, `in_port=P,dl_src=M`: M is known on P, go to
//!   table 1 without learning;
//! - table 1, priority 100, `dl_dst=M`: output to M's port;
//! - table 1, priority 0: FLOOD.
//!
//! Known sources stop reaching this module, so learning costs one packet-in
//! per (port, MAC) pair; a MAC seen on a new port misses its table-0 entry
//! and is re-learned (the old entries are replaced). Group addresses are
//! never learned. At most [`MAX_MACS`] addresses are learned (beyond that
//! they are flooded). An address ages out when its table-0 entry has seen
//! no frame from it for [`IDLE_TIMEOUT`]: [`Standalone::expired`] then
//! forgets it and deletes its table-1 entry (which has no timeout of its
//! own, so a host that only receives, or only sends, is not half-learned),
//! and its next frame is learned again.
//!
//! Invariants: every flow this module installs carries [`COOKIE`];
//! [`Standalone::disengage`] deletes exactly those.
//!
//! Thread-safety: used on the control thread only.

use std::collections::HashMap;

use offlow_flow::{Field, Match};
use offlow_pipeline::{
    Action, FlowMod, FlowModCommand, Instruction, PortNo, RemovedFlow, TABLE_ALL,
};
use tracing::{debug, info, warn};

use crate::adapter::DatapathSwitch;

/// Cookie of every flow standalone mode installs ("oflowstd").
pub const COOKIE: u64 = 0x6f66_6c6f_7773_7464;
/// Most learned addresses.
pub const MAX_MACS: usize = 8192;
/// Idle timeout of learned flows, seconds.
pub const IDLE_TIMEOUT: u16 = 300;
/// Bytes of a table-miss packet sent for learning.
const LEARN_LEN: u16 = 128;
/// Priority of learned flows.
const LEARNED: u32 = 100;

/// The learning state.
#[derive(Debug, Default)]
pub struct Standalone {
    engaged: bool,
    macs: HashMap<[u8; 6], u32>,
    full_warned: bool,
}

fn apply(actions: Vec<Action>) -> Instruction {
    Instruction::ApplyActions(actions)
}

fn output(port: PortNo, max_len: u16) -> Action {
    Action::Output { port, max_len }
}

fn mac_value(m: [u8; 6]) -> u128 {
    m.iter().fold(0u128, |acc, &b| (acc << 8) | u128::from(b))
}

impl Standalone {
    /// Whether the learning flows are installed.
    pub fn is_engaged(&self) -> bool {
        self.engaged
    }

    /// Addresses learned so far.
    #[cfg(test)]
    pub fn learned(&self) -> usize {
        self.macs.len()
    }

    /// Install the base flows. Needs two tables.
    pub fn engage(&mut self, sw: &mut DatapathSwitch, now_ns: u64) {
        if self.engaged {
            return;
        }
        if sw.pipeline().n_tables() < 2 {
            warn!("standalone mode needs at least 2 tables; staying secure");
            return;
        }
        let miss0 = FlowMod::add(
            0,
            0,
            Match::ANY,
            vec![
                apply(vec![output(PortNo::CONTROLLER, LEARN_LEN)]),
                Instruction::GotoTable(1),
            ],
        )
        .with_cookie(COOKIE, 0);
        let miss1 = FlowMod::add(
            1,
            0,
            Match::ANY,
            vec![apply(vec![output(PortNo::FLOOD, 0)])],
        )
        .with_cookie(COOKIE, 0);
        for fm in [miss0, miss1] {
            if let Err(e) = sw.internal_flow_mod(&fm, now_ns) {
                warn!(error = %e, "standalone base flow refused");
                return;
            }
        }
        sw.commit_pending();
        self.engaged = true;
        info!("standalone mode: learning switch engaged");
    }

    /// Remove every standalone flow (a controller took over).
    pub fn disengage(&mut self, sw: &mut DatapathSwitch, now_ns: u64) {
        if !self.engaged {
            return;
        }
        let del = FlowMod::new(FlowModCommand::Delete, TABLE_ALL, 0, Match::ANY)
            .with_cookie(COOKIE, u64::MAX);
        if let Err(e) = sw.internal_flow_mod(&del, now_ns) {
            warn!(error = %e, "removing standalone flows");
        }
        sw.commit_pending();
        self.engaged = false;
        self.macs.clear();
        info!("standalone mode: learning switch disengaged (controller connected)");
    }

    /// Entries the switch removed (timeouts): forget the addresses whose
    /// table-0 entry aged out and delete their table-1 entries, so their
    /// next frames are learned again.
    pub fn expired(&mut self, sw: &mut DatapathSwitch, removed: &[RemovedFlow], now_ns: u64) {
        if !self.engaged {
            return;
        }
        for r in removed {
            let e = &r.entry;
            if e.cookie != COOKIE || e.table_id != 0 || e.priority != LEARNED {
                continue;
            }
            let (v, mask) = e.matcher.matcher.field(Field::EthSrc);
            if mask == 0 {
                continue;
            }
            let mut mac = [0u8; 6];
            for (i, b) in mac.iter_mut().enumerate() {
                // 48-bit value: byte i from the top.
                *b = (v >> (8 * (5 - i))) as u8;
            }
            self.macs.remove(&mac);
            let mut to_port = Match::ANY;
            to_port.set_exact(Field::EthDst, mac_value(mac));
            let del = FlowMod::new(FlowModCommand::DeleteStrict, 1, LEARNED, to_port)
                .with_cookie(COOKIE, u64::MAX);
            if let Err(e) = sw.internal_flow_mod(&del, now_ns) {
                warn!(error = %e, "removing an aged-out address's flow");
            }
        }
    }

    /// Learn the source address of a table-miss frame from `in_port`.
    pub fn learn(&mut self, sw: &mut DatapathSwitch, in_port: u32, frame: &[u8], now_ns: u64) {
        if !self.engaged {
            return;
        }
        let Some(src) = frame.get(6..12) else { return };
        let mut mac = [0u8; 6];
        mac.copy_from_slice(src);
        // Group addresses are destinations only; all-zero is no address.
        if mac[0] & 1 != 0 || mac == [0; 6] {
            return;
        }
        let old = self.macs.get(&mac).copied();
        if old == Some(in_port) {
            // Queued before its flows took effect.
            return;
        }
        if old.is_none() && self.macs.len() >= MAX_MACS {
            if !self.full_warned {
                warn!(
                    max = MAX_MACS,
                    "standalone MAC table full; flooding new addresses"
                );
                self.full_warned = true;
            }
            return;
        }
        let mut ops = Vec::new();
        if let Some(old_port) = old {
            let mut m = Match::ANY;
            m.set_exact(Field::InPort, u128::from(old_port));
            m.set_exact(Field::EthSrc, mac_value(mac));
            ops.push(
                FlowMod::new(FlowModCommand::DeleteStrict, 0, LEARNED, m)
                    .with_cookie(COOKIE, u64::MAX),
            );
        }
        let mut known = Match::ANY;
        known.set_exact(Field::InPort, u128::from(in_port));
        known.set_exact(Field::EthSrc, mac_value(mac));
        let mut to_port = Match::ANY;
        to_port.set_exact(Field::EthDst, mac_value(mac));
        let mut a = FlowMod::add(0, LEARNED, known, vec![Instruction::GotoTable(1)]);
        let mut b = FlowMod::add(
            1,
            LEARNED,
            to_port,
            vec![apply(vec![output(PortNo(in_port), 0)])],
        );
        a.cookie = COOKIE;
        a.idle_timeout = IDLE_TIMEOUT;
        b.cookie = COOKIE;
        ops.push(a);
        ops.push(b);
        for fm in &ops {
            if let Err(e) = sw.internal_flow_mod(fm, now_ns) {
                warn!(error = %e, "standalone flow refused");
                return;
            }
        }
        self.macs.insert(mac, in_port);
        debug!(
            mac = %format_args!("{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
                mac[0], mac[1], mac[2], mac[3], mac[4], mac[5]),
            port = in_port,
            moved_from = ?old,
            "learned"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(src: [u8; 6], dst: [u8; 6]) -> Vec<u8> {
        let mut f = dst.to_vec();
        f.extend_from_slice(&src);
        f.extend_from_slice(&[0x08, 0x00]);
        f.resize(60, 0);
        f
    }

    fn cookies(sw: &DatapathSwitch) -> Vec<(u8, u32, u64)> {
        let mut v: Vec<_> = sw
            .pipeline()
            .dump(&offlow_pipeline::FlowFilter::all())
            .into_iter()
            .map(|f| (f.table_id, f.priority, f.cookie))
            .collect();
        v.sort_unstable();
        v
    }

    #[test]
    fn learns_moves_and_disengages_without_touching_other_flows() {
        let mut sw = DatapathSwitch::new(1, 4);
        // A controller-style flow in table 2 must survive disengage.
        sw.internal_flow_mod(&FlowMod::add(2, 7, Match::ANY, vec![]), 0)
            .unwrap();
        let mut st = Standalone::default();
        st.engage(&mut sw, 0);
        assert!(st.is_engaged());
        assert_eq!(sw.pipeline().len(), 3);
        let a = [2, 0, 0, 0, 0, 1];
        let b = [2, 0, 0, 0, 0, 2];
        st.learn(&mut sw, 1, &frame(a, b), 0);
        st.learn(&mut sw, 2, &frame(b, a), 0);
        // Broadcast sources are not learned.
        st.learn(&mut sw, 2, &frame([0xff; 6], a), 0);
        assert_eq!(st.learned(), 2);
        assert_eq!(sw.pipeline().len(), 3 + 4);
        // The packet from a on port 1 now skips learning: its path ends
        // on a learned flow in table 1 (output to b's port).
        let res = resolve(&sw, &frame(a, b), 1);
        let last = res.path.last().expect("a path");
        assert_eq!(last.table_id, 1);
        assert!(res.origins.is_empty(), "no packet-in: {res:?}");
        // a moves to port 3: the old table-0 entry goes, the new comes.
        st.learn(&mut sw, 3, &frame(a, b), 0);
        assert_eq!(st.learned(), 2);
        assert_eq!(sw.pipeline().len(), 3 + 4);
        let mut m = Match::ANY;
        m.set_exact(Field::EthDst, mac_value(a));
        let moved = sw
            .pipeline()
            .dump(&offlow_pipeline::FlowFilter::table(1))
            .into_iter()
            .find(|f| f.matcher.matcher == m)
            .expect("a's forwarding flow");
        assert_eq!(moved.instructions, vec![apply(vec![output(PortNo(3), 0)])]);
        st.disengage(&mut sw, 0);
        assert_eq!(cookies(&sw), vec![(2, 7, 0)]);
    }

    /// What the pipeline does with `f` from `in_port`.
    fn resolve(sw: &DatapathSwitch, f: &[u8], in_port: u32) -> offlow_pipeline::Resolution {
        let key = offlow_flow::extract(f, in_port, &mut offlow_flow::ParseStats::default()).key;
        sw.pipeline().lookup(&key)
    }

    #[test]
    fn an_aged_out_address_is_forgotten_and_learned_again() {
        let mut sw = DatapathSwitch::new(1, 2);
        let mut st = Standalone::default();
        st.engage(&mut sw, 0);
        let a = [2, 0, 0, 0, 0, 1];
        let b = [2, 0, 0, 0, 0, 2];
        st.learn(&mut sw, 1, &frame(a, b), 0);
        sw.commit_pending();
        assert_eq!(sw.pipeline().len(), 4);
        // No frame from a for longer than the idle timeout.
        let later = (u64::from(IDLE_TIMEOUT) + 1) * 1_000_000_000;
        let removed = sw.expire(later);
        assert_eq!(removed.len(), 1, "only the table-0 entry has a timeout");
        st.expired(&mut sw, &removed, later);
        sw.commit_pending();
        assert_eq!(st.learned(), 0);
        assert_eq!(sw.pipeline().len(), 2, "both of a's flows are gone");
        // Its next frame misses table 0 again and is learned again.
        let res = resolve(&sw, &frame(a, b), 1);
        assert!(
            res.origins
                .iter()
                .any(|o| o.table_miss && o.cookie == COOKIE),
            "sent to learning by a table-miss entry: {res:?}"
        );
        st.learn(&mut sw, 1, &frame(a, b), later);
        assert_eq!(st.learned(), 1);
        assert_eq!(sw.pipeline().len(), 4);
    }
}
