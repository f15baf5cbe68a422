//! The meter table (OpenFlow 1.3.5 §5.7): [`MeterTable`], and each entry's
//! per-band token buckets shared by every worker that sends packets through
//! the meter, lock-free.
//!
//! # What
//! - [`MeterTable`]: meter id → [`Meter`], held by the pipeline beside the
//!   flow tables and the groups; METER_MOD resolves into a [`MeterOp`]
//!   ([`MeterTable::prepare`], with the spec's `OFPMMFC_*` codes).
//! - [`MeterConfig`]: a validated `OFPT_METER_MOD` ([`MeterConfig::from_mod`]
//!   answers the spec's `OFPMMFC_*` code for a configuration we refuse).
//! - [`Meter`]: the live entry. [`Meter::admit`] charges one packet and says
//!   what the meter does to it ([`MeterVerdict`]); [`Meter::stats`] and
//!   [`Meter::config_reply`] give the OFPMP_METER / OFPMP_METER_CONFIG
//!   entries.
//! - [`remark_dscp`]: what a DSCP_REMARK band does to a packet's DSCP.
//!
//! # Rule (§5.7)
//! "The meter applies the meter band with the highest configured rate that
//! is lower than the current measured rate. If the current rate is lower
//! than any specified meter band rate, no meter band is applied." Measured
//! with one token bucket per band: every packet entering the meter is
//! charged to every band's bucket; a band whose bucket lacks the tokens is
//! *exceeded* (and is not charged); among the exceeded bands the one with
//! the highest rate applies (the lowest index among equal rates). So a band
//! of rate `r` passes at most `depth + r · t` of traffic in any interval `t`,
//! and traffic below every rate is never touched.
//!
//! # Units (no floating point)
//! One token is 10⁻⁹ of the rate's unit-second: with `OFPMF_KBPS` a
//! micro-bit (10⁻⁹ kbit), with `OFPMF_PKTPS` a nano-packet. Then a band of
//! rate `r` earns exactly `r` tokens per nanosecond, a frame of `n` bytes
//! costs `8 · 10⁶ · n` tokens (KBPS) or `10⁹` (PKTPS), and a depth of `b`
//! kbits or packets is `b · 10⁹` tokens. Every value fits a u64: a depth is
//! at most `u32::MAX · 10⁹ < 2⁶³`, a cost at most `u32::MAX · 8 · 10⁶ < 2⁵⁵`;
//! the refill product saturates (and is then capped at the depth).
//!
//! # Bucket depth
//! With `OFPMF_BURST` the band's `burst_size` (kbits or packets; zero is
//! refused with `OFPMMFC_BAD_BURST`). Without it the spec leaves the depth
//! to the switch ("burst_size ... is used only if the flags field includes
//! OFPMF_BURST"); we take one second of the band's rate, what Open vSwitch's
//! userspace datapath does when no burst is given (`dpif_netdev_meter_set`:
//! "Set burst size to a workable value if none specified", `burst_size =
//! rate`). Buckets start full, as in OVS.
//!
//! # Invariants
//! - Token conservation: for each band, tokens taken by conforming packets
//!   ≤ initial depth + `rate` × (time credited), and every nanosecond of
//!   `now_ns` progress is credited at most once (the clock only moves
//!   forward through one compare-exchange).
//! - Counters are exact: `packet_in`/`byte_in` count every admitted call,
//!   each band's counters count the packets it was applied to; so
//!   `packet_in == passed + Σ band packets` (all relaxed atomics, each call
//!   adds to each counter exactly once).
//! - Nothing allocates or panics in [`Meter::admit`].
//!
//! # Thread-safety
//! [`Meter`] is `Send + Sync` and shared (e.g. in an `Arc`) by every worker;
//! [`Meter::admit`] takes `&self`. State is atomics only, no locks and no
//! `unsafe`: the meter's clock (`last_ns`) advances by compare-exchange, so
//! exactly one thread credits each interval to the buckets (Open vSwitch's
//! `dp_netdev_run_meter` does the same); a bucket is refilled with a
//! saturating compare-exchange loop and charged with a checked one, so its
//! tokens never go below zero nor above the depth. `Relaxed` suffices: each
//! quantity is a single atomic whose read-modify-writes are totally ordered,
//! and no other memory is published through them. Under concurrency a
//! packet may be charged before the interval another thread just claimed is
//! credited; it then sees fewer tokens than an ideal bucket would hold (a
//! conservative, transient effect), never more. A single-threaded sequence
//! of calls is exactly the reference model in the tests. A config change
//! (OFPMC_MODIFY) is a new [`Meter`] swapped in by the owner; `flow_count`
//! is the owner's to maintain.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use offlow_openflow::meter::meter_flags;
use offlow_openflow::{MeterBand, MeterBandKind};
/// The codec's METER_MOD and its failure codes, which the meter table
/// takes and answers with (re-exported so the datapath needs no codec).
pub use offlow_openflow::{MeterMod, MeterModFailedCode};

/// Most bands one meter may have (Open vSwitch's userspace datapath allows
/// the same, `MAX_BANDS` in `dpif-netdev.c`); more is `OFPMMFC_OUT_OF_BANDS`.
pub const MAX_BANDS: usize = 8;

/// Tokens per rate-unit-second (see the module's "Units").
const TOKENS_PER_UNIT: u64 = 1_000_000_000;
/// Tokens per byte with `OFPMF_KBPS`: 8 bits of 10⁶ micro-bits.
const TOKENS_PER_BYTE_KBPS: u64 = 8_000_000;

/// What a band does to a packet that exceeds it (experimenter bands are
/// refused by [`MeterConfig::from_mod`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BandAction {
    /// `OFPMBT_DROP`.
    Drop,
    /// `OFPMBT_DSCP_REMARK`: raise the drop precedence by `prec_level`
    /// (1..=255; see [`remark_dscp`]).
    Remark {
        /// Drop precedence levels to add.
        prec_level: u8,
    },
}

/// One validated band.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BandConfig {
    /// What the band does.
    pub action: BandAction,
    /// Rate (kbit/s or packets/s), at least 1.
    pub rate: u32,
    /// `burst_size` as configured (reported back in METER_CONFIG).
    pub burst_size: u32,
    /// Bucket depth in the configured unit (kbits or packets): `burst_size`
    /// with `OFPMF_BURST`, else `rate` (one second).
    pub depth: u32,
}

/// A validated meter configuration.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MeterConfig {
    /// `OFPMF_*` flags as configured.
    pub flags: u16,
    /// True with `OFPMF_PKTPS` (rates in packets/s), false with `OFPMF_KBPS`.
    pub pktps: bool,
    /// Bands in configuration order (at most [`MAX_BANDS`]; may be empty: a
    /// meter that only counts).
    pub bands: Vec<BandConfig>,
}

impl MeterConfig {
    /// Validate the flags and bands of an ADD or MODIFY. The meter id is the
    /// table owner's to check (`OFPMMFC_INVALID_METER` for 0 or `OFPM_ALL`,
    /// §7.3.4.4). Codes, in the order checked:
    /// - `OFPMMFC_BAD_FLAGS`: a bit outside KBPS|PKTPS|BURST|STATS, or not
    ///   exactly one of KBPS and PKTPS (the rate unit must be known; OVS's
    ///   `dpif_meter_set` refuses both and neither the same way).
    /// - `OFPMMFC_OUT_OF_BANDS`: more than [`MAX_BANDS`] bands.
    /// - `OFPMMFC_BAD_BAND`: an experimenter band (none is supported).
    /// - `OFPMMFC_BAD_RATE`: a band of rate 0 (OVS: "Rate must be non-zero").
    /// - `OFPMMFC_BAD_BURST`: `OFPMF_BURST` with a `burst_size` of 0 (a
    ///   bucket that can hold nothing). Without `OFPMF_BURST`, `burst_size`
    ///   is ignored as §7.3.4.4 says, whatever its value.
    /// - `OFPMMFC_BAD_BAND_VALUE`: a DSCP_REMARK band with `prec_level` 0
    ///   (it would remark nothing; ovs-ofctl refuses it too).
    ///
    /// No bands is accepted (§7.3.4.4 sets no minimum; Open vSwitch refuses
    /// it with `OFPMMFC_OUT_OF_BANDS`).
    pub fn from_mod(mm: &offlow_openflow::MeterMod) -> Result<MeterConfig, MeterModFailedCode> {
        use meter_flags::{BURST, KBPS, PKTPS, STATS};
        if mm.flags & !(KBPS | PKTPS | BURST | STATS) != 0 {
            return Err(MeterModFailedCode::BadFlags);
        }
        let pktps = match (mm.flags & KBPS != 0, mm.flags & PKTPS != 0) {
            (true, false) => false,
            (false, true) => true,
            _ => return Err(MeterModFailedCode::BadFlags),
        };
        if mm.bands.len() > MAX_BANDS {
            return Err(MeterModFailedCode::OutOfBands);
        }
        let burst = mm.flags & BURST != 0;
        let mut bands = Vec::with_capacity(mm.bands.len());
        for b in &mm.bands {
            let action = match b.kind {
                MeterBandKind::Drop => BandAction::Drop,
                MeterBandKind::DscpRemark { prec_level } => BandAction::Remark { prec_level },
                MeterBandKind::Experimenter { .. } => return Err(MeterModFailedCode::BadBand),
            };
            if b.rate == 0 {
                return Err(MeterModFailedCode::BadRate);
            }
            if burst && b.burst_size == 0 {
                return Err(MeterModFailedCode::BadBurst);
            }
            if action == (BandAction::Remark { prec_level: 0 }) {
                return Err(MeterModFailedCode::BadBandValue);
            }
            bands.push(BandConfig {
                action,
                rate: b.rate,
                burst_size: b.burst_size,
                depth: if burst { b.burst_size } else { b.rate },
            });
        }
        Ok(MeterConfig {
            flags: mm.flags,
            pktps,
            bands,
        })
    }

    /// Tokens one frame of `frame_bytes` costs.
    fn cost(&self, frame_bytes: u32) -> u64 {
        if self.pktps {
            TOKENS_PER_UNIT
        } else {
            // ≤ u32::MAX · 8·10⁶ < 2⁵⁵: no overflow.
            u64::from(frame_bytes) * TOKENS_PER_BYTE_KBPS
        }
    }
}

/// What the meter does to one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MeterVerdict {
    /// No band exceeded: the packet goes on unchanged.
    Pass,
    /// Band `band` (index in [`MeterConfig::bands`]) drops the packet.
    Drop {
        /// Band index.
        band: usize,
    },
    /// Band `band` remarks the packet's DSCP ([`remark_dscp`]) and lets it
    /// go on.
    Remark {
        /// Band index.
        band: usize,
        /// Drop precedence levels to add.
        prec_level: u8,
    },
}

/// One band's live state.
#[derive(Debug)]
struct BandState {
    /// Tokens earned per nanosecond (= the band's rate).
    rate: u64,
    /// Bucket capacity in tokens (`depth · 10⁹`).
    capacity: u64,
    /// Tokens in the bucket, `0..=capacity`. Written by every admitting
    /// thread (refill and charge).
    tokens: AtomicU64,
    /// Packets this band was applied to.
    packets: AtomicU64,
    /// Bytes of those packets.
    bytes: AtomicU64,
}

/// A live meter table entry. See the module documentation.
#[derive(Debug)]
pub struct Meter {
    // Read-only after construction.
    config: MeterConfig,
    bands: Vec<BandState>,
    /// Nanoseconds after which every bucket is full whatever it held:
    /// `max(ceil(capacity / rate))`. Elapsed time is capped to it so the
    /// refill product stays meaningful.
    fill_ns: u64,
    /// `now_ns` at creation (durations in stats).
    created_ns: u64,

    // Written by every admitting thread.
    /// The latest `now_ns` credited to the buckets; only moves forward.
    last_ns: AtomicU64,
    /// Packets that entered the meter.
    packet_in: AtomicU64,
    /// Bytes that entered the meter.
    byte_in: AtomicU64,

    /// Flows whose instructions name this meter; maintained by the owner
    /// (the meter never touches it).
    pub flow_count: AtomicU32,
}

impl Meter {
    /// A meter with full buckets, its clock at `now_ns`.
    pub fn new(config: MeterConfig, now_ns: u64) -> Meter {
        let bands: Vec<BandState> = config
            .bands
            .iter()
            .map(|b| {
                // depth ≤ u32::MAX: the product is < 2⁶³.
                let capacity = u64::from(b.depth) * TOKENS_PER_UNIT;
                BandState {
                    rate: u64::from(b.rate),
                    capacity,
                    tokens: AtomicU64::new(capacity),
                    packets: AtomicU64::new(0),
                    bytes: AtomicU64::new(0),
                }
            })
            .collect();
        // rate ≥ 1 (validated), so the division is defined.
        let fill_ns = bands
            .iter()
            .map(|b| b.capacity.div_ceil(b.rate.max(1)))
            .max()
            .unwrap_or(0);
        Meter {
            config,
            bands,
            fill_ns,
            created_ns: now_ns,
            last_ns: AtomicU64::new(now_ns),
            packet_in: AtomicU64::new(0),
            byte_in: AtomicU64::new(0),
            flow_count: AtomicU32::new(0),
        }
    }

    /// The configuration this meter runs.
    pub fn config(&self) -> &MeterConfig {
        &self.config
    }

    /// Meter one packet of `frame_bytes` at `now_ns` (the caller's
    /// monotonic clock; a time earlier than one already seen credits
    /// nothing). Charges every band, bumps the counters and returns what to
    /// do with the packet.
    pub fn admit(&self, now_ns: u64, frame_bytes: u32) -> MeterVerdict {
        self.refill(now_ns);
        self.packet_in.fetch_add(1, Relaxed);
        self.byte_in.fetch_add(u64::from(frame_bytes), Relaxed);
        let cost = self.config.cost(frame_bytes);
        // The exceeded band with the highest rate (first among equals).
        let mut applied: Option<(usize, u64)> = None;
        for (i, b) in self.bands.iter().enumerate() {
            let charged = b
                .tokens
                .fetch_update(Relaxed, Relaxed, |t| t.checked_sub(cost))
                .is_ok();
            if !charged && applied.is_none_or(|(_, rate)| b.rate > rate) {
                applied = Some((i, b.rate));
            }
        }
        let Some((band, _)) = applied else {
            return MeterVerdict::Pass;
        };
        let b = &self.bands[band];
        b.packets.fetch_add(1, Relaxed);
        b.bytes.fetch_add(u64::from(frame_bytes), Relaxed);
        match self.config.bands[band].action {
            BandAction::Drop => MeterVerdict::Drop { band },
            BandAction::Remark { prec_level } => MeterVerdict::Remark { band, prec_level },
        }
    }

    /// Advance the clock to `now_ns` and credit the elapsed time to every
    /// bucket; a thread that loses the race for an interval credits nothing.
    fn refill(&self, now_ns: u64) {
        let mut last = self.last_ns.load(Relaxed);
        let elapsed = loop {
            if now_ns <= last {
                return;
            }
            match self
                .last_ns
                .compare_exchange_weak(last, now_ns, Relaxed, Relaxed)
            {
                Ok(_) => break (now_ns - last).min(self.fill_ns),
                Err(seen) => last = seen,
            }
        };
        for b in &self.bands {
            let earned = elapsed.saturating_mul(b.rate);
            // Always `Some`: the closure never refuses; the result is unused.
            let _ = b.tokens.fetch_update(Relaxed, Relaxed, |t| {
                Some(t.saturating_add(earned).min(b.capacity))
            });
        }
    }

    /// Counters as an `OFPMP_METER` entry for `meter_id` at `now_ns`.
    pub fn stats(&self, meter_id: u32, now_ns: u64) -> offlow_openflow::MeterStats {
        let age = now_ns.saturating_sub(self.created_ns);
        offlow_openflow::MeterStats {
            meter_id,
            flow_count: self.flow_count.load(Relaxed),
            packet_in_count: self.packet_in.load(Relaxed),
            byte_in_count: self.byte_in.load(Relaxed),
            duration_sec: u32::try_from(age / 1_000_000_000).unwrap_or(u32::MAX),
            // < 10⁹: fits.
            duration_nsec: (age % 1_000_000_000) as u32,
            band_stats: self
                .bands
                .iter()
                .map(|b| offlow_openflow::MeterBandStats {
                    packet_band_count: b.packets.load(Relaxed),
                    byte_band_count: b.bytes.load(Relaxed),
                })
                .collect(),
        }
    }

    /// The configuration as an `OFPMP_METER_CONFIG` entry for `meter_id`.
    pub fn config_reply(&self, meter_id: u32) -> offlow_openflow::MeterConfig {
        offlow_openflow::MeterConfig {
            flags: self.config.flags,
            meter_id,
            bands: self
                .config
                .bands
                .iter()
                .map(|b| MeterBand {
                    kind: match b.action {
                        BandAction::Drop => MeterBandKind::Drop,
                        BandAction::Remark { prec_level } => {
                            MeterBandKind::DscpRemark { prec_level }
                        }
                    },
                    rate: b.rate,
                    burst_size: b.burst_size,
                })
                .collect(),
        }
    }
}

/// The DSCP after a DSCP_REMARK band raises its drop precedence by
/// `prec_level` (§7.3.4.4: "prec_level: Number of drop precedence level to
/// add").
///
/// Drop precedence exists only in the Assured Forwarding classes (RFC 2597
/// §6): DSCP `class << 3 | drop << 1` with class 1..=4 and drop 1..=3
/// (AF11 = 10 … AF43 = 38). An AF DSCP keeps its class and its drop
/// precedence becomes `min(drop + prec_level, 3)` (AF11 + 1 → AF12, AF12 +
/// 5 → AF13). Any other DSCP (default, class selectors, EF, local or
/// experimental codepoints, or a value above 63) has no drop precedence to
/// raise and is returned unchanged. Open vSwitch gives no precedent: its
/// datapaths implement only drop bands and refuse DSCP_REMARK
/// (`dpif_netdev_meter_set`: "Unsupported band type").
pub fn remark_dscp(dscp: u8, prec_level: u8) -> u8 {
    let class = dscp >> 3;
    let drop = (dscp >> 1) & 0b11;
    let is_af = dscp < 64 && (1..=4).contains(&class) && drop != 0 && dscp & 1 == 0;
    if !is_af {
        return dscp;
    }
    let drop = drop.saturating_add(prec_level).min(3);
    class << 3 | drop << 1
}

// Workers share meters.
const _: () = {
    const fn shareable<T: Send + Sync>() {}
    shareable::<Meter>();
};

/// Most meters the table holds (`max_meter` in METER_FEATURES); an ADD
/// beyond it is `OFPMMFC_OUT_OF_METERS`.
pub const MAX_METERS: usize = 65_536;

/// A change to the meter table, resolved by [`MeterTable::prepare`] and
/// applied to every copy of the pipeline in order; the meter inside is
/// shared by the copies (one set of buckets and counters).
#[derive(Debug, Clone)]
pub enum MeterOp {
    /// Install (ADD) or replace (MODIFY) meter `id`.
    Put(u32, Arc<Meter>),
    /// Remove these meters (the flows that use them are removed by the
    /// caller, §6.6).
    Delete(Vec<u32>),
}

/// The meter table (§5.7): meter id → live [`Meter`], ids `1..=OFPM_MAX`.
///
/// Thread-safety: held in each pipeline copy, changed only by the writer
/// through [`MeterOp`]s; workers read it through the version they run and
/// call [`Meter::admit`] on the shared meters.
#[derive(Debug, Clone, Default)]
pub struct MeterTable {
    meters: BTreeMap<u32, Arc<Meter>>,
}

impl MeterTable {
    /// An empty table.
    pub fn new() -> MeterTable {
        MeterTable::default()
    }

    /// Meter `id`, if configured.
    #[inline]
    pub fn get(&self, id: u32) -> Option<&Arc<Meter>> {
        self.meters.get(&id)
    }

    /// Every meter, by id.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &Arc<Meter>)> + '_ {
        self.meters.iter().map(|(id, m)| (*id, m))
    }

    /// Number of meters.
    pub fn len(&self) -> usize {
        self.meters.len()
    }

    /// True when no meter is configured.
    pub fn is_empty(&self) -> bool {
        self.meters.is_empty()
    }

    /// Resolve a METER_MOD (§6.6, §7.3.4.4) at `now_ns` (the clock the
    /// workers meter with) into an op, or the `OFPMMFC_*` code to answer:
    /// - ADD, MODIFY: the id must be `1..=OFPM_MAX`, else `INVALID_METER`.
    ///   The virtual meters `OFPM_SLOWPATH` and `OFPM_CONTROLLER` are
    ///   refused the same way: §5.7 makes them optional and offlow has no
    ///   slow path to meter (Open vSwitch's `handle_meter_mod` refuses
    ///   every id above `OFPM13_MAX` with `INVALID_METER` too). ADD of an
    ///   existing id is `METER_EXISTS`, past [`MAX_METERS`] `OUT_OF_METERS`;
    ///   MODIFY of an absent id is `UNKNOWN_METER`. Then the configuration's
    ///   own codes ([`MeterConfig::from_mod`]).
    /// - MODIFY installs a new meter: full buckets and counters from zero,
    ///   the duration kept (what Open vSwitch 3.1 shows: `meter-stats`
    ///   after `mod-meter` reads `packet_in_count:0` with the duration
    ///   still counting; the spec says nothing). Flows keep naming the id,
    ///   so they take it at the commit.
    /// - DELETE: `OFPM_ALL` deletes every meter; an id of `1..=OFPM_MAX`
    ///   that is not configured succeeds with nothing to do (§6.6 lists no
    ///   error for it, and Open vSwitch answers none); 0 and the other
    ///   reserved ids are `INVALID_METER`.
    /// - Any other command: `BAD_COMMAND`.
    pub fn prepare(
        &self,
        mm: &offlow_openflow::MeterMod,
        now_ns: u64,
    ) -> Result<MeterOp, MeterModFailedCode> {
        use offlow_openflow::meter::{meter_command as cmd, meter_id};
        let id = mm.meter_id;
        let valid = (1..=meter_id::MAX).contains(&id);
        match mm.command {
            cmd::ADD | cmd::MODIFY => {
                if !valid {
                    return Err(MeterModFailedCode::InvalidMeter);
                }
                let exists = self.meters.contains_key(&id);
                if mm.command == cmd::ADD {
                    if exists {
                        return Err(MeterModFailedCode::MeterExists);
                    }
                    if self.meters.len() >= MAX_METERS {
                        return Err(MeterModFailedCode::OutOfMeters);
                    }
                } else if !exists {
                    return Err(MeterModFailedCode::UnknownMeter);
                }
                let config = MeterConfig::from_mod(mm)?;
                let mut meter = Meter::new(config, now_ns);
                if let Some(old) = self.meters.get(&id) {
                    meter.created_ns = old.created_ns;
                }
                Ok(MeterOp::Put(id, Arc::new(meter)))
            }
            cmd::DELETE if id == meter_id::ALL => {
                Ok(MeterOp::Delete(self.meters.keys().copied().collect()))
            }
            cmd::DELETE if valid => Ok(MeterOp::Delete(
                self.meters
                    .contains_key(&id)
                    .then_some(id)
                    .into_iter()
                    .collect(),
            )),
            cmd::DELETE => Err(MeterModFailedCode::InvalidMeter),
            _ => Err(MeterModFailedCode::BadCommand),
        }
    }

    /// Apply an op from [`prepare`](Self::prepare) (infallible).
    pub fn apply(&mut self, op: &MeterOp) {
        match op {
            MeterOp::Put(id, m) => {
                self.meters.insert(*id, Arc::clone(m));
            }
            MeterOp::Delete(ids) => {
                for id in ids {
                    self.meters.remove(id);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use offlow_openflow::MeterMod;
    use proptest::prelude::*;

    const KBPS: u16 = meter_flags::KBPS;
    const PKTPS: u16 = meter_flags::PKTPS;
    const BURST: u16 = meter_flags::BURST;
    const STATS: u16 = meter_flags::STATS;

    fn band(kind: MeterBandKind, rate: u32, burst_size: u32) -> MeterBand {
        MeterBand {
            kind,
            rate,
            burst_size,
        }
    }

    fn mm(flags: u16, bands: Vec<MeterBand>) -> MeterMod {
        MeterMod {
            command: 0,
            flags,
            meter_id: 1,
            bands,
        }
    }

    fn drop(rate: u32, burst: u32) -> MeterBand {
        band(MeterBandKind::Drop, rate, burst)
    }

    fn remark(rate: u32, burst: u32, prec_level: u8) -> MeterBand {
        band(MeterBandKind::DscpRemark { prec_level }, rate, burst)
    }

    #[test]
    fn from_mod_codes() {
        use MeterModFailedCode as C;
        let ok = |m: &MeterMod| MeterConfig::from_mod(m).map(|_| ());
        assert_eq!(ok(&mm(KBPS, vec![drop(10, 0)])), Ok(()));
        assert_eq!(ok(&mm(PKTPS | BURST | STATS, vec![drop(10, 5)])), Ok(()));
        assert_eq!(ok(&mm(KBPS, vec![])), Ok(()), "a counting-only meter");
        assert_eq!(ok(&mm(0, vec![drop(10, 0)])), Err(C::BadFlags));
        assert_eq!(ok(&mm(KBPS | PKTPS, vec![drop(10, 0)])), Err(C::BadFlags));
        assert_eq!(ok(&mm(KBPS | 0x10, vec![drop(10, 0)])), Err(C::BadFlags));
        assert_eq!(
            ok(&mm(KBPS, vec![drop(10, 0); MAX_BANDS + 1])),
            Err(C::OutOfBands)
        );
        assert_eq!(ok(&mm(KBPS, vec![drop(10, 0); MAX_BANDS])), Ok(()));
        let exp = band(MeterBandKind::Experimenter { experimenter: 1 }, 10, 0);
        assert_eq!(ok(&mm(KBPS, vec![exp])), Err(C::BadBand));
        assert_eq!(ok(&mm(KBPS, vec![drop(0, 0)])), Err(C::BadRate));
        assert_eq!(ok(&mm(KBPS | BURST, vec![drop(10, 0)])), Err(C::BadBurst));
        // Without OFPMF_BURST the burst size is ignored.
        let c = MeterConfig::from_mod(&mm(KBPS, vec![drop(10, 77)])).unwrap();
        assert_eq!(c.bands[0].depth, 10);
        assert_eq!(c.bands[0].burst_size, 77);
        let c = MeterConfig::from_mod(&mm(KBPS | BURST, vec![drop(10, 77)])).unwrap();
        assert_eq!(c.bands[0].depth, 77);
        assert_eq!(ok(&mm(KBPS, vec![remark(10, 0, 0)])), Err(C::BadBandValue));
        assert_eq!(ok(&mm(KBPS, vec![remark(10, 0, 1)])), Ok(()));
    }

    #[test]
    fn remark_dscp_af_only() {
        // AF11 (10) + 1 = AF12 (12); AF12 + 5 saturates at AF13 (14).
        assert_eq!(remark_dscp(10, 1), 12);
        assert_eq!(remark_dscp(12, 5), 14);
        assert_eq!(remark_dscp(14, 1), 14);
        assert_eq!(remark_dscp(34, 2), 38); // AF41 → AF43
        assert_eq!(remark_dscp(34, 255), 38);
        // Not AF: default, CS1..CS7, EF, class 5-7 with drop bits, odd
        // (local use) codepoints, out of range.
        for d in [0u8, 8, 16, 24, 32, 40, 48, 56, 46, 42, 50, 11, 13, 64, 255] {
            assert_eq!(remark_dscp(d, 1), d, "{d}");
        }
        // Every AF codepoint keeps its class.
        for class in 1..=4u8 {
            for drop in 1..=3u8 {
                for p in 0..=4u8 {
                    let d = class << 3 | drop << 1;
                    let r = remark_dscp(d, p);
                    assert_eq!(r >> 3, class);
                    assert_eq!((r >> 1) & 3, (drop + p).min(3));
                }
            }
        }
    }

    /// The reference model: one bucket per band in u128 tokens, refilled
    /// from the exact elapsed time, written as directly as the rule reads.
    struct Model {
        pktps: bool,
        /// (rate, capacity, tokens, action).
        bands: Vec<(u128, u128, u128, BandAction)>,
        last: u64,
        packet_in: u64,
        byte_in: u64,
        band_packets: Vec<u64>,
        band_bytes: Vec<u64>,
    }

    impl Model {
        fn new(c: &MeterConfig, now: u64) -> Model {
            let bands: Vec<_> = c
                .bands
                .iter()
                .map(|b| {
                    let cap = u128::from(b.depth) * 1_000_000_000;
                    (u128::from(b.rate), cap, cap, b.action)
                })
                .collect();
            Model {
                pktps: c.pktps,
                band_packets: vec![0; bands.len()],
                band_bytes: vec![0; bands.len()],
                bands,
                last: now,
                packet_in: 0,
                byte_in: 0,
            }
        }

        fn admit(&mut self, now: u64, bytes: u32) -> MeterVerdict {
            if now > self.last {
                let dt = u128::from(now - self.last);
                self.last = now;
                for (rate, cap, tokens, _) in &mut self.bands {
                    *tokens = (*tokens + dt * *rate).min(*cap);
                }
            }
            self.packet_in += 1;
            self.byte_in += u64::from(bytes);
            let cost: u128 = if self.pktps {
                1_000_000_000
            } else {
                u128::from(bytes) * 8 * 1_000_000
            };
            let mut exceeded = Vec::new();
            for (i, (rate, _, tokens, _)) in self.bands.iter_mut().enumerate() {
                if *tokens >= cost {
                    *tokens -= cost;
                } else {
                    exceeded.push((i, *rate));
                }
            }
            let best = exceeded.iter().map(|e| e.1).max();
            let Some(&(band, _)) = exceeded.iter().find(|e| Some(e.1) == best) else {
                return MeterVerdict::Pass;
            };
            self.band_packets[band] += 1;
            self.band_bytes[band] += u64::from(bytes);
            match self.bands[band].3 {
                BandAction::Drop => MeterVerdict::Drop { band },
                BandAction::Remark { prec_level } => MeterVerdict::Remark { band, prec_level },
            }
        }
    }

    fn arb_config() -> impl Strategy<Value = MeterConfig> {
        let kind = prop_oneof![
            Just(MeterBandKind::Drop),
            (1u8..=3).prop_map(|prec_level| MeterBandKind::DscpRemark { prec_level }),
        ];
        // Small rates and depths so that buckets run dry; a few huge ones
        // to exercise the saturating maths.
        let rate = prop_oneof![8 => 1u32..5_000, 1 => Just(u32::MAX)];
        let burst = prop_oneof![8 => 1u32..200, 1 => Just(u32::MAX)];
        (
            any::<bool>(),
            any::<bool>(),
            proptest::collection::vec((kind, rate, burst), 0..=4),
        )
            .prop_map(|(pktps, burst_flag, bands)| {
                let flags = if pktps { PKTPS } else { KBPS } | if burst_flag { BURST } else { 0 };
                let bands = bands.into_iter().map(|(k, r, b)| band(k, r, b)).collect();
                MeterConfig::from_mod(&mm(flags, bands)).expect("valid by construction")
            })
    }

    /// (time step in ns, frame bytes); steps are mostly small, sometimes 0
    /// (same instant) or huge.
    fn arb_packets() -> impl Strategy<Value = Vec<(u64, u32)>> {
        let step = prop_oneof![
            6 => 0u64..2_000_000,
            2 => Just(0u64),
            1 => 0u64..10_000_000_000,
            1 => Just(u64::MAX / 4),
        ];
        let size = prop_oneof![8 => 60u32..1600, 1 => Just(0u32), 1 => Just(u32::MAX)];
        proptest::collection::vec((step, size), 0..200)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        /// Single-threaded, the meter is exactly the model: same verdicts,
        /// same counters.
        #[test]
        fn admit_matches_model(
            c in arb_config(),
            start in prop_oneof![Just(0u64), any::<u64>()],
            pkts in arb_packets(),
        ) {
            let meter = Meter::new(c.clone(), start);
            let mut model = Model::new(&c, start);
            let mut now = start;
            for (step, bytes) in pkts {
                // A step that would wrap goes back in time instead: the
                // clock never moving backwards is not assumed.
                now = now.checked_add(step).unwrap_or(now / 2);
                prop_assert_eq!(meter.admit(now, bytes), model.admit(now, bytes));
            }
            let s = meter.stats(1, now);
            prop_assert_eq!(s.packet_in_count, model.packet_in);
            prop_assert_eq!(s.byte_in_count, model.byte_in);
            for (i, b) in s.band_stats.iter().enumerate() {
                prop_assert_eq!(b.packet_band_count, model.band_packets[i]);
                prop_assert_eq!(b.byte_band_count, model.band_bytes[i]);
            }
        }
    }

    /// The oracle test is not vacuous: its inputs exceed bands often.
    #[test]
    fn model_inputs_exceed_bands() {
        use proptest::strategy::ValueTree;
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let (mut cases, mut exceeding) = (0, 0);
        for _ in 0..300 {
            let c = arb_config().new_tree(&mut runner).unwrap().current();
            let pkts = arb_packets().new_tree(&mut runner).unwrap().current();
            let m = Meter::new(c, 0);
            let mut now = 0u64;
            let mut hit = false;
            for (step, bytes) in pkts {
                now = now.saturating_add(step);
                hit |= m.admit(now, bytes) != MeterVerdict::Pass;
            }
            cases += 1;
            exceeding += u32::from(hit);
        }
        assert!(exceeding * 3 > cases, "{exceeding} of {cases}");
    }

    /// Two threads hammer one drop band: every packet is counted exactly
    /// once, and no more pass than the bucket allows.
    #[test]
    fn two_threads_exact_counters_and_bounded_pass() {
        // 1000 packets/s, depth 50 packets.
        let c = MeterConfig::from_mod(&mm(PKTPS | BURST, vec![drop(1000, 50)])).unwrap();
        let meter = std::sync::Arc::new(Meter::new(c, 0));
        const PER_THREAD: u64 = 200_000;
        // Each thread offers 20 000 packets/s of synthetic time over 10 s.
        let span_ns = 10_000_000_000u64;
        let handles: Vec<_> = (0..2u64)
            .map(|t| {
                let meter = meter.clone();
                std::thread::spawn(move || {
                    let mut passed = 0u64;
                    for i in 0..PER_THREAD {
                        let now = (i * span_ns) / PER_THREAD + t * 7;
                        if meter.admit(now, 100 + (i % 7) as u32) == MeterVerdict::Pass {
                            passed += 1;
                        }
                    }
                    passed
                })
            })
            .collect();
        let passed: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
        let s = meter.stats(1, span_ns);
        let offered = 2 * PER_THREAD;
        assert_eq!(s.packet_in_count, offered);
        let bytes: u64 = (0..PER_THREAD).map(|i| 100 + i % 7).sum::<u64>() * 2;
        assert_eq!(s.byte_in_count, bytes);
        assert_eq!(passed + s.band_stats[0].packet_band_count, offered);
        // Depth + rate × time (the last timestamp is below span_ns + 7).
        let bound = 50 + 1000 * (span_ns + 7) / 1_000_000_000;
        assert!(passed <= bound, "{passed} > {bound}");
        // And the meter did not starve the traffic either: at least the
        // rate over the span, less one depth of slack for interleaving.
        assert!(passed >= 1000 * 10 - 50, "{passed}");
    }

    /// Offered 10%..200% of a 10 Mbit/s drop band for 100 s of synthetic
    /// time: what passes is min(offered, rate) within 2% (the bucket starts
    /// full: one second of burst is 1% of the span).
    #[test]
    fn accuracy_against_rate() {
        const RATE_KBPS: u64 = 10_000;
        const FRAME: u32 = 1000; // 8 kbit: the rate is 1250 frames/s
        const SPAN_NS: u64 = 100_000_000_000;
        for pct in [10u64, 50, 100, 150, 200] {
            let c = MeterConfig::from_mod(&mm(KBPS, vec![drop(RATE_KBPS as u32, 0)])).unwrap();
            let meter = Meter::new(c, 0);
            // offered frames/s = 1250 · pct / 100; frame i at i / that.
            let offered = 1250 * pct * SPAN_NS / 1_000_000_000 / 100;
            let mut passed = 0u64;
            for i in 0..offered {
                let now = (u128::from(i) * u128::from(SPAN_NS) / u128::from(offered)) as u64;
                if meter.admit(now, FRAME) == MeterVerdict::Pass {
                    passed += 1;
                }
            }
            let passed_kbps = passed * u64::from(FRAME) * 8 / 1000 / (SPAN_NS / 1_000_000_000);
            let offered_kbps = RATE_KBPS * pct / 100;
            let want = offered_kbps.min(RATE_KBPS);
            let err = passed_kbps.abs_diff(want) as f64 / want as f64;
            assert!(
                err <= 0.02,
                "{pct}%: passed {passed_kbps} kbit/s, want {want} ({err:.4})"
            );
            if pct <= 100 {
                assert_eq!(passed, offered, "{pct}%: nothing under the rate is dropped");
            }
        }
    }

    /// Of two exceeded bands the higher rate applies (§5.7); under the lower
    /// rate nothing applies.
    #[test]
    fn highest_exceeded_rate_applies() {
        // Remark above 100 pkt/s, drop above 200 pkt/s, depths 1 packet.
        let c = MeterConfig::from_mod(&mm(PKTPS | BURST, vec![drop(200, 1), remark(100, 1, 1)]))
            .unwrap();
        let m = Meter::new(c, 0);
        // 50 pkt/s: every 20 ms, both buckets have refilled.
        for i in 1..=10u64 {
            assert_eq!(m.admit(i * 20_000_000, 64), MeterVerdict::Pass);
        }
        // 150 pkt/s: the 100 bucket runs dry every other packet (1 packet
        // of depth, 0.67 packet per gap), the 200 bucket never.
        let t0 = 10 * 20_000_000;
        let verdicts: Vec<_> = (1..=30u64)
            .map(|i| m.admit(t0 + i * 6_666_667, 64))
            .collect();
        assert!(verdicts.contains(&MeterVerdict::Remark {
            band: 1,
            prec_level: 1
        }));
        assert!(!verdicts
            .iter()
            .any(|v| matches!(v, MeterVerdict::Drop { .. })));
        // Many packets at one instant: both exceeded, the 200 band drops.
        let t1 = t0 + 31 * 6_666_667;
        let burst: Vec<_> = (0..5).map(|_| m.admit(t1, 64)).collect();
        assert_eq!(burst[4], MeterVerdict::Drop { band: 0 });
    }

    #[test]
    fn stats_and_config_reply() {
        let c = MeterConfig::from_mod(&mm(
            KBPS | BURST | STATS,
            vec![remark(1000, 100, 2), drop(2000, 200)],
        ))
        .unwrap();
        let m = Meter::new(c, 5_000_000_000);
        m.flow_count.store(3, Relaxed);
        m.admit(5_000_000_001, 100);
        let s = m.stats(7, 6_500_000_000);
        assert_eq!((s.meter_id, s.flow_count), (7, 3));
        assert_eq!((s.packet_in_count, s.byte_in_count), (1, 100));
        assert_eq!((s.duration_sec, s.duration_nsec), (1, 500_000_000));
        assert_eq!(s.band_stats.len(), 2);
        let r = m.config_reply(7);
        assert_eq!(r.flags, KBPS | BURST | STATS);
        assert_eq!(r.bands, vec![remark(1000, 100, 2), drop(2000, 200)]);
    }

    #[test]
    fn extreme_values_do_not_overflow() {
        let c = MeterConfig::from_mod(&mm(
            KBPS | BURST,
            vec![drop(u32::MAX, u32::MAX), drop(1, 1)],
        ))
        .unwrap();
        let m = Meter::new(c, u64::MAX - 10);
        for now in [u64::MAX - 10, u64::MAX, 0, u64::MAX] {
            m.admit(now, u32::MAX);
        }
        let m = Meter::new(
            MeterConfig::from_mod(&mm(PKTPS, vec![drop(u32::MAX, 0)])).unwrap(),
            0,
        );
        assert_eq!(m.admit(u64::MAX, 0), MeterVerdict::Pass);
    }
}
