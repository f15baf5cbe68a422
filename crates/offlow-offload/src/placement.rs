//! Which entries go down (microflows, or megaflows where the backend
//! holds masks: each an [`OffloadMatch`]): heavy hitters by measured load,
//! with hysteresis so entries do not flap, explicit pins, and refusals
//! remembered until the rules change.
//!
//! # Why measured load
//! A backend has little room (a NIC's flow director holds thousands of
//! entries, a map in the kernel what memory allows) and every install or
//! removal costs a map update and a grace period. The 2014 SmartNIC paper's
//! lesson is that the offloaded set should follow the workload: the few
//! flows that carry most packets go down, the long tail stays in software
//! where a miss costs nothing extra.
//!
//! # The rules
//! Every tick (the switch's counter sync, ~100 ms) the caller reports each
//! candidate's packets in the tick: sampled estimates from the software path
//! ([`Placement::observe`]) and exact deltas from the backend's counters for
//! offloaded flows ([`Placement::observe_offloaded`]). Then [`Placement::tick`]
//! plans:
//! - a flow is *hot* in a tick when its rate reaches `promote_pps`; after
//!   `promote_ticks` hot ticks in a row it is a candidate, and candidates go
//!   down hottest first while room lasts;
//! - an offloaded flow is *cold* in a tick when its rate is below
//!   `demote_pps` (< `promote_pps`: the gap is the hysteresis); after
//!   `demote_ticks` cold ticks in a row it comes back up;
//! - when the backend is full, a candidate displaces the coldest offloaded
//!   flow only if it is at least `displace_ratio` times hotter, so two flows
//!   of similar rate do not take turns;
//! - `Pin::Down` flows go down as soon as they are seen (room permitting) and
//!   are never demoted or displaced; `Pin::Up` flows never go down;
//! - a flow the backend or the compiler refused is not asked again until the
//!   rules change ([`Placement::rules_changed`]): the refusal is kept for
//!   `offlow trace` to show;
//! - at most `max_changes` installs and removals per tick, so one tick's map
//!   updates stay short.
//!
//! A flow seen in neither way for `forget_ticks` ticks is forgotten (unless
//! offloaded: its counters say it is idle, and it is demoted first).

use std::collections::HashMap;

use crate::mask::OffloadMatch;
use crate::Refusal;

/// An explicit placement request for a flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pin {
    /// Offload whenever the backend can (room and capabilities permitting).
    Down,
    /// Never offload.
    Up,
}

/// The thresholds (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlacementConfig {
    /// Rate (packets/s) at which a flow is hot.
    pub promote_pps: u64,
    /// Rate below which an offloaded flow is cold. Less than `promote_pps`.
    pub demote_pps: u64,
    /// Hot ticks in a row before a flow goes down.
    pub promote_ticks: u32,
    /// Cold ticks in a row before an offloaded flow comes up.
    pub demote_ticks: u32,
    /// How much hotter a candidate must be to displace an offloaded flow.
    pub displace_ratio: u64,
    /// Installs plus removals per tick, at most.
    pub max_changes: usize,
    /// Ticks without a sighting before a software flow is forgotten.
    pub forget_ticks: u32,
}

impl Default for PlacementConfig {
    /// 1,000 pps promotes after 2 ticks, below 250 pps demotes after 5;
    /// displacement needs 2×; 256 changes per tick.
    fn default() -> Self {
        PlacementConfig {
            promote_pps: 1_000,
            demote_pps: 250,
            promote_ticks: 2,
            demote_ticks: 5,
            displace_ratio: 2,
            max_changes: 256,
            forget_ticks: 20,
        }
    }
}

/// Where a flow is, as placement sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    /// Served by the backend.
    Offloaded,
    /// In software, and why (none: not hot enough yet).
    Software(Option<Refusal>),
}

#[derive(Debug, Clone)]
struct FlowState {
    /// Packets per second in the last tick.
    rate: u64,
    /// Packets reported during the current tick.
    pending: u64,
    hot_ticks: u32,
    cold_ticks: u32,
    unseen_ticks: u32,
    offloaded: bool,
    /// Asked to go down, answer not yet reported.
    in_flight: bool,
    refused: Option<Refusal>,
    pin: Option<Pin>,
}

impl FlowState {
    fn new(pin: Option<Pin>) -> FlowState {
        FlowState {
            rate: 0,
            pending: 0,
            hot_ticks: 0,
            cold_ticks: 0,
            unseen_ticks: 0,
            offloaded: false,
            in_flight: false,
            refused: None,
            pin,
        }
    }
}

/// What to change in the backend this tick.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Flows to bring up first (frees their room).
    pub remove: Vec<OffloadMatch>,
    /// Flows to offload, hottest first. Report each outcome with
    /// [`Placement::installed`].
    pub install: Vec<OffloadMatch>,
}

/// The placement state machine (module docs). Plain data; driven by the
/// switch's control side.
#[derive(Debug, Clone)]
pub struct Placement {
    cfg: PlacementConfig,
    room: usize,
    flows: HashMap<OffloadMatch, FlowState>,
    pins: HashMap<OffloadMatch, Pin>,
}

impl Placement {
    /// Placement for a backend with `room` entries.
    pub fn new(cfg: PlacementConfig, room: usize) -> Placement {
        Placement {
            cfg,
            room,
            flows: HashMap::new(),
            pins: HashMap::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &PlacementConfig {
        &self.cfg
    }

    /// Pin `key` down or up (see [`Pin`]); `None` removes the pin.
    pub fn pin(&mut self, key: OffloadMatch, pin: Option<Pin>) {
        match pin {
            Some(p) => self.pins.insert(key, p),
            None => self.pins.remove(&key),
        };
        let st = self
            .flows
            .entry(key)
            .or_insert_with(|| FlowState::new(None));
        st.pin = pin;
    }

    fn pin_of(&self, key: &OffloadMatch) -> Option<Pin> {
        self.pins.get(key).copied()
    }

    /// `packets` of `key` went through the software path this tick (a
    /// sampled estimate is fine).
    pub fn observe(&mut self, key: OffloadMatch, packets: u64) {
        let pin = self.pin_of(&key);
        let st = self.flows.entry(key).or_insert_with(|| FlowState::new(pin));
        st.pending += packets;
        st.unseen_ticks = 0;
    }

    /// `packets` of an offloaded `key` were served by the backend this tick
    /// (the exact counter delta).
    pub fn observe_offloaded(&mut self, key: OffloadMatch, packets: u64) {
        if let Some(st) = self.flows.get_mut(&key) {
            st.pending += packets;
            if packets > 0 {
                st.unseen_ticks = 0;
            }
        }
    }

    /// The backend's answer to an install of `key`.
    pub fn installed(&mut self, key: &OffloadMatch, outcome: Result<(), Refusal>) {
        if let Some(st) = self.flows.get_mut(key) {
            st.in_flight = false;
            match outcome {
                Ok(()) => {
                    st.offloaded = true;
                    st.refused = None;
                    st.cold_ticks = 0;
                }
                // Full is about room, not the flow: try again later.
                Err(Refusal::Full(_)) => {}
                Err(r) => st.refused = Some(r),
            }
        }
    }

    /// `key` is no longer offloaded (removed by a plan, or by the switch
    /// because its rule changed).
    pub fn removed(&mut self, key: &OffloadMatch) {
        if let Some(st) = self.flows.get_mut(key) {
            st.offloaded = false;
            st.in_flight = false;
            st.hot_ticks = 0;
        }
    }

    /// The flow table changed: decisions (and so refusals) may differ now.
    pub fn rules_changed(&mut self) {
        for st in self.flows.values_mut() {
            st.refused = None;
        }
    }

    /// Where placement has `key`.
    pub fn tier(&self, key: &OffloadMatch) -> Tier {
        match self.flows.get(key) {
            Some(st) if st.offloaded => Tier::Offloaded,
            Some(st) => Tier::Software(st.refused),
            None => Tier::Software(None),
        }
    }

    /// The last tick's rate of `key` (packets/s).
    pub fn rate(&self, key: &OffloadMatch) -> u64 {
        self.flows.get(key).map_or(0, |s| s.rate)
    }

    /// Flows offloaded now.
    pub fn offloaded(&self) -> usize {
        self.flows.values().filter(|s| s.offloaded).count()
    }

    /// Close the tick that lasted `tick_secs` and plan the changes.
    pub fn tick(&mut self, tick_secs: f64) -> Plan {
        let cfg = self.cfg;
        let secs = if tick_secs > 0.0 { tick_secs } else { 1.0 };
        for st in self.flows.values_mut() {
            st.rate = (st.pending as f64 / secs) as u64;
            if st.pending == 0 {
                st.unseen_ticks = st.unseen_ticks.saturating_add(1);
            }
            st.pending = 0;
            if st.rate >= cfg.promote_pps {
                st.hot_ticks = st.hot_ticks.saturating_add(1);
            } else {
                st.hot_ticks = 0;
            }
            if st.rate < cfg.demote_pps {
                st.cold_ticks = st.cold_ticks.saturating_add(1);
            } else {
                st.cold_ticks = 0;
            }
        }
        self.flows.retain(|_, st| {
            st.offloaded || st.in_flight || st.pin.is_some() || st.unseen_ticks < cfg.forget_ticks
        });

        let mut plan = Plan::default();
        let mut budget = cfg.max_changes;
        let mut used = self
            .flows
            .values()
            .filter(|s| s.offloaded || s.in_flight)
            .count();

        // Cold offloaded flows come up.
        let mut cold: Vec<OffloadMatch> = self
            .flows
            .iter()
            .filter(|(_, s)| {
                s.offloaded
                    && (s.pin == Some(Pin::Up)
                        || (s.pin != Some(Pin::Down) && s.cold_ticks >= cfg.demote_ticks))
            })
            .map(|(k, _)| *k)
            .collect();
        cold.sort_by_key(|k| (self.flows[k].rate, key_order(k)));
        for k in cold {
            if budget == 0 {
                break;
            }
            budget -= 1;
            used -= 1;
            plan.remove.push(k);
        }

        // Candidates, pinned first, then hottest first.
        let mut cand: Vec<(bool, u64, OffloadMatch)> = self
            .flows
            .iter()
            .filter(|(_, s)| {
                !s.offloaded
                    && !s.in_flight
                    && s.refused.is_none()
                    && s.pin != Some(Pin::Up)
                    && (s.pin == Some(Pin::Down) || s.hot_ticks >= cfg.promote_ticks)
            })
            .map(|(k, s)| (s.pin == Some(Pin::Down), s.rate, *k))
            .collect();
        cand.sort_by(|a, b| {
            b.0.cmp(&a.0)
                .then(b.1.cmp(&a.1))
                .then(key_order(&a.2).cmp(&key_order(&b.2)))
        });

        // Offloaded flows that may be displaced, coldest first.
        let mut victims: Vec<(u64, OffloadMatch)> = self
            .flows
            .iter()
            .filter(|(k, s)| s.offloaded && s.pin != Some(Pin::Down) && !plan.remove.contains(k))
            .map(|(k, s)| (s.rate, *k))
            .collect();
        victims.sort_by_key(|(r, k)| (*r, key_order(k)));
        let mut victims = victims.into_iter();

        for (pinned, rate, k) in cand {
            if budget == 0 {
                break;
            }
            if used < self.room {
                budget -= 1;
                used += 1;
            } else {
                // Full: displace a much colder unpinned flow, if any.
                if budget < 2 {
                    break;
                }
                let Some((vrate, v)) = victims.next() else {
                    break;
                };
                if !pinned && rate < vrate.saturating_mul(cfg.displace_ratio).max(1) {
                    break; // the coldest victim is hot enough; so are the rest
                }
                budget -= 2;
                plan.remove.push(v);
            }
            plan.install.push(k);
            if let Some(st) = self.flows.get_mut(&k) {
                st.in_flight = true;
            }
        }
        plan
    }
}

/// An order on matches for deterministic plans (ties in rate): by key,
/// then by how much of it the mask covers.
#[allow(clippy::type_complexity)]
fn key_order(
    m: &OffloadMatch,
) -> (
    (u32, u64, u64, u32, u32, u8, u16, u16),
    (u64, u64, u32, u32),
) {
    let (k, w) = (&m.key, &m.mask);
    (
        (
            k.in_port, k.eth_dst, k.eth_src, k.ipv4_src, k.ipv4_dst, k.ip_proto, k.tp_src, k.tp_dst,
        ),
        (
            w.eth_dst,
            w.eth_src,
            w.ipv4_src,
            u32::from(w.tp_src) << 16 | u32::from(w.tp_dst),
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(n: u16) -> OffloadMatch {
        crate::key::udp_key(n).into()
    }

    fn cfg() -> PlacementConfig {
        PlacementConfig {
            promote_pps: 100,
            demote_pps: 20,
            promote_ticks: 2,
            demote_ticks: 3,
            displace_ratio: 2,
            max_changes: 64,
            forget_ticks: 5,
        }
    }

    /// Apply a plan the way the switch does, with a backend that accepts
    /// everything that fits.
    fn apply(p: &mut Placement, plan: &Plan) {
        for k in &plan.remove {
            p.removed(k);
        }
        for k in &plan.install {
            p.installed(k, Ok(()));
        }
    }

    #[test]
    fn a_flow_goes_down_after_promote_ticks_hot_ticks() {
        let mut p = Placement::new(cfg(), 4);
        p.observe(key(1), 150);
        assert_eq!(p.tick(1.0), Plan::default());
        p.observe(key(1), 150);
        let plan = p.tick(1.0);
        assert_eq!(plan.install, vec![key(1)]);
        apply(&mut p, &plan);
        assert_eq!(p.tier(&key(1)), Tier::Offloaded);
    }

    #[test]
    fn hysteresis_keeps_a_flow_between_the_thresholds() {
        let mut p = Placement::new(cfg(), 4);
        for _ in 0..2 {
            p.observe(key(1), 150);
            let plan = p.tick(1.0);
            apply(&mut p, &plan);
        }
        assert_eq!(p.tier(&key(1)), Tier::Offloaded);
        // Between demote (20) and promote (100): stays down.
        for _ in 0..10 {
            p.observe_offloaded(key(1), 50);
            assert_eq!(p.tick(1.0), Plan::default());
        }
        // Cold for demote_ticks: comes up.
        for i in 0..3 {
            p.observe_offloaded(key(1), 5);
            let plan = p.tick(1.0);
            if i < 2 {
                assert!(plan.remove.is_empty());
            } else {
                assert_eq!(plan.remove, vec![key(1)]);
                apply(&mut p, &plan);
            }
        }
        assert_eq!(p.tier(&key(1)), Tier::Software(None));
    }

    #[test]
    fn room_goes_to_the_hottest_and_displacement_needs_a_margin() {
        let mut p = Placement::new(cfg(), 2);
        for _ in 0..2 {
            p.observe(key(1), 200);
            p.observe(key(2), 300);
            p.observe(key(3), 250);
            let plan = p.tick(1.0);
            apply(&mut p, &plan);
        }
        assert_eq!(p.tier(&key(2)), Tier::Offloaded);
        assert_eq!(p.tier(&key(3)), Tier::Offloaded);
        assert_eq!(p.tier(&key(1)), Tier::Software(None));
        // key 1 at 400 is not 2x the coldest offloaded (250): no change.
        p.observe(key(1), 400);
        p.observe_offloaded(key(2), 300);
        p.observe_offloaded(key(3), 250);
        assert_eq!(p.tick(1.0), Plan::default());
        // At 600 it displaces key 3.
        p.observe(key(1), 600);
        p.observe_offloaded(key(2), 300);
        p.observe_offloaded(key(3), 250);
        let plan = p.tick(1.0);
        assert_eq!(plan.remove, vec![key(3)]);
        assert_eq!(plan.install, vec![key(1)]);
    }

    #[test]
    fn pins_and_refusals() {
        let mut p = Placement::new(cfg(), 4);
        p.pin(key(1), Some(Pin::Down));
        p.pin(key(2), Some(Pin::Up));
        p.observe(key(2), 10_000);
        p.observe(key(3), 10_000);
        let plan = p.tick(1.0);
        // Pinned down goes at once, even unseen; pinned up never.
        assert_eq!(plan.install, vec![key(1)]);
        p.installed(&key(1), Ok(()));
        for _ in 0..5 {
            p.observe(key(2), 10_000);
            p.observe(key(3), 10_000);
            let plan = p.tick(1.0);
            assert!(!plan.install.contains(&key(2)));
            assert!(
                !plan.remove.contains(&key(1)),
                "pinned down stays down when idle"
            );
            for k in &plan.install {
                p.installed(k, Err(Refusal::Unsupported("set_queue")));
            }
        }
        // Refused once, not asked again until the rules change.
        assert_eq!(
            p.tier(&key(3)),
            Tier::Software(Some(Refusal::Unsupported("set_queue")))
        );
        p.rules_changed();
        p.observe(key(3), 10_000);
        assert_eq!(p.tick(1.0).install, vec![key(3)]);
    }

    proptest! {
        /// Whatever the rates, the plan stays within its change budget, never
        /// overfills the backend and never touches a flow pinned the other
        /// way.
        #[test]
        fn plans_respect_budget_room_and_pins(
            rates in proptest::collection::vec(proptest::collection::vec(0u64..400, 8), 1..40),
            room in 1usize..6,
        ) {
            let mut p = Placement::new(cfg(), room);
            p.pin(key(0), Some(Pin::Up));
            p.pin(key(7), Some(Pin::Down));
            for tick in &rates {
                for (i, &r) in tick.iter().enumerate() {
                    let k = key(i as u16);
                    if p.tier(&k) == Tier::Offloaded {
                        p.observe_offloaded(k, r);
                    } else {
                        p.observe(k, r);
                    }
                }
                let plan = p.tick(1.0);
                prop_assert!(plan.install.len() + plan.remove.len() <= cfg().max_changes);
                prop_assert!(!plan.install.contains(&key(0)));
                prop_assert!(!plan.remove.contains(&key(7)));
                apply(&mut p, &plan);
                prop_assert!(p.offloaded() <= room);
                prop_assert_eq!(p.tier(&key(0)), Tier::Software(None));
            }
        }

        /// A flow whose rate wanders between the two thresholds after going
        /// down never comes back up; one that wanders below promote never
        /// goes down.
        #[test]
        fn rates_between_thresholds_never_change_the_tier(
            noise in proptest::collection::vec(20u64..100, 1..60),
        ) {
            let mut p = Placement::new(cfg(), 4);
            for _ in 0..2 {
                p.observe(key(1), 150);
                p.observe(key(2), 99);
                let plan = p.tick(1.0);
                apply(&mut p, &plan);
            }
            prop_assert_eq!(p.tier(&key(1)), Tier::Offloaded);
            for r in noise {
                p.observe_offloaded(key(1), r);
                p.observe(key(2), r);
                let plan = p.tick(1.0);
                prop_assert_eq!(plan, Plan::default());
            }
        }
    }
}
