//! OFPT_FLOW_REMOVED (OpenFlow 1.3.5 §7.4.2) from a removed flow entry.
//!
//! What: [`flow_removed_message`] turns an
//! [`offlow_pipeline::RemovedFlow`] (from `Control::expire`, or
//! `RemovedFlow::deleted_by` for a DELETE's effect) into the message body.
//! The caller sends it only when [`RemovedFlow::send_flow_rem`] is true
//! (§6.5), to the connections whose async config asks for that reason.
//!
//! Counters are read here, from the entry's live counters: call it after the
//! removal is committed and a further `sync_counters`, when no worker can
//! still credit the entry (see `Control::expire`).
//!
//! Thread-safety: a pure function.

use offlow_openflow::{FlowRemoved, OxmMatch};
use offlow_pipeline::RemovedFlow;

/// The OFPT_FLOW_REMOVED body for `removed`, as of `now_ns` (the clock the
/// entry's `installed_at_ns` was stamped with): duration = now - install.
pub fn flow_removed_message(removed: &RemovedFlow, now_ns: u64) -> FlowRemoved {
    let e = &removed.entry;
    let age = removed.duration_ns(now_ns);
    let (packet_count, byte_count) = e.counters.get();
    FlowRemoved {
        cookie: e.cookie,
        // OpenFlow rules carry 16-bit priorities; the pipeline's wider ones
        // only come from ClassBench loaders (as in flow stats).
        priority: e.priority.min(u32::from(u16::MAX)) as u16,
        reason: removed.reason.code(),
        table_id: e.table_id,
        // Seconds of a u64 ns count fit u32 for 136 years.
        duration_sec: (age / 1_000_000_000).min(u64::from(u32::MAX)) as u32,
        // Below 1e9.
        duration_nsec: (age % 1_000_000_000) as u32,
        idle_timeout: e.idle_timeout,
        hard_timeout: e.hard_timeout,
        packet_count,
        byte_count,
        // Encoded as OXM exactly as flow-stats replies encode entries.
        matcher: OxmMatch::from_match(&e.matcher.matcher),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use offlow_flow::{Field, Match};
    use offlow_pipeline::{
        ExpiryTracker, FlowMod, FlowModFlags, Pipeline, RemovedReason, TABLE_ALL,
    };

    const S: u64 = 1_000_000_000;

    fn ip_match() -> Match {
        let mut m = Match::ANY;
        m.set_exact(Field::EthType, 0x0800)
            .set_masked(Field::Ipv4Dst, 0x0a01_0000, 0xffff_0000);
        m
    }

    #[test]
    fn idle_timeout_message_carries_entry_fields() {
        let mut p = Pipeline::new(2);
        let mut fm = FlowMod::add(1, 300, ip_match(), Vec::new())
            .with_cookie(0xdead_beef, 0)
            .with_flags(FlowModFlags::SEND_FLOW_REM);
        fm.idle_timeout = 5;
        fm.hard_timeout = 50;
        p.flow_mod(&fm, 10 * S).expect("add");
        let id = p.timed_entries().next().expect("timed").id;
        let entry = p.entry(id).expect("entry");
        entry.counters.add(3, 180);
        let mut tracker = ExpiryTracker::new();
        // First scan sees the packets (used at 11 s); idle 5 s later.
        assert!(p.expire(11 * S, &mut tracker).is_empty());
        let now = 16 * S + 250;
        let removed = p.expire(now, &mut tracker);
        assert_eq!(removed.len(), 1);
        assert_eq!(removed[0].reason, RemovedReason::IdleTimeout);
        let msg = flow_removed_message(&removed[0], now);
        assert_eq!(msg.cookie, 0xdead_beef);
        assert_eq!(msg.priority, 300);
        assert_eq!(msg.reason, 0);
        assert_eq!(msg.table_id, 1);
        assert_eq!((msg.duration_sec, msg.duration_nsec), (6, 250));
        assert_eq!((msg.idle_timeout, msg.hard_timeout), (5, 50));
        assert_eq!((msg.packet_count, msg.byte_count), (3, 180));
        assert_eq!(msg.matcher, OxmMatch::from_match(&ip_match()));
        assert_eq!(msg.matcher.to_match(), ip_match());
    }

    #[test]
    fn delete_reason_and_clock_going_back() {
        let mut p = Pipeline::new(1);
        p.flow_mod(&FlowMod::add(0, 1, Match::ANY, Vec::new()), 7 * S)
            .expect("add");
        let fm = FlowMod::new(
            offlow_pipeline::FlowModCommand::Delete,
            TABLE_ALL,
            0,
            Match::ANY,
        );
        let effect = p.flow_mod(&fm, 8 * S).expect("delete");
        let removed = RemovedFlow::deleted_by(&effect);
        assert_eq!(removed.len(), 1);
        assert!(!removed[0].send_flow_rem());
        let msg = flow_removed_message(&removed[0], S);
        assert_eq!(msg.reason, 2);
        assert_eq!((msg.duration_sec, msg.duration_nsec), (0, 0));
        assert_eq!(msg.matcher, OxmMatch::from_match(&Match::ANY));
    }
}
