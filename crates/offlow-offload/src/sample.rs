//! [`Sampler`]: a packet worker's cheap estimate of its heaviest
//! offloadable flows, for placement.
//!
//! # Why sampling
//! The microflow cache keeps no per-flow counters (a counter per way would
//! cost every hit a write to a shared line), and placement needs only the
//! heavy hitters, not exact counts. So a worker looks at one frame in
//! `every` on average (at random gaps), parses its [`OffloadKey`] (the frame is in cache; ~20 ns), and
//! keeps the key in a small direct-mapped table with the Misra–Gries rule:
//! a hit counts up, a miss on a taken slot counts the holder down and
//! takes the slot once it reaches zero. A flow carrying a fraction f of
//! the samples that land in its slot keeps it and is under-counted by at
//! most the other flows' share there, so the heavy hitters stand out and
//! the long tail churns through the slots without growing anything.
//!
//! Nothing allocates after construction; one sampler per worker thread.

use crate::key::OffloadKey;

/// Slots in a sampler's table (a power of two).
pub const SAMPLE_SLOTS: usize = 256;

/// A worker's flow sampler (module docs).
#[derive(Debug, Clone)]
pub struct Sampler {
    every: u32,
    countdown: u32,
    /// xorshift state for the gaps between samples.
    rng: u32,
    slots: Box<[(OffloadKey, u32); SAMPLE_SLOTS]>,
    /// Frames looked at (parsed), for the record.
    pub sampled: u64,
}

const EMPTY: OffloadKey = OffloadKey {
    in_port: 0,
    eth_dst: 0,
    eth_src: 0,
    vlan: None,
    ipv4_src: 0,
    ipv4_dst: 0,
    ip_proto: 0,
    ip_dscp: 0,
    ip_ecn: 0,
    tp_src: 0,
    tp_dst: 0,
    tunnel_id: 0,
};

impl Sampler {
    /// Look at one frame in `every` (at least 1).
    pub fn new(every: u32) -> Sampler {
        let every = every.max(1);
        Sampler {
            every,
            countdown: every,
            rng: 0x9e37_79b9,
            slots: Box::new([(EMPTY, 0); SAMPLE_SLOTS]),
            sampled: 0,
        }
    }

    /// The sampling period.
    pub fn every(&self) -> u32 {
        self.every
    }

    /// A frame arrived on `in_port` with `tunnel_id` (a frame decapsulated
    /// on a tunnel port: the inner frame, the tunnel's port and key; 0
    /// otherwise): sampled once in `every` calls.
    #[inline]
    pub fn offer(&mut self, frame: &[u8], in_port: u32, tunnel_id: u64) {
        self.countdown -= 1;
        if self.countdown != 0 {
            return;
        }
        self.countdown = self.next_gap();
        self.sampled += 1;
        if let Some(key) = OffloadKey::parse(frame, in_port, tunnel_id) {
            self.count(key);
        }
    }

    /// A gap uniform in 1..=2·every−1 (mean `every`): a fixed period would
    /// alias with periodic traffic (two flows taking turns, one sampled
    /// every time and the other never).
    fn next_gap(&mut self) -> u32 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.rng = x;
        1 + x % (2 * self.every - 1)
    }

    /// Count one sample of `key`.
    pub fn count(&mut self, key: OffloadKey) {
        let slot = &mut self.slots[slot_of(&key)];
        if slot.1 == 0 {
            *slot = (key, 1);
        } else if slot.0 == key {
            slot.1 = slot.1.saturating_add(1);
        } else {
            slot.1 -= 1;
        }
    }

    /// Hand out every held flow with its estimated packets since the last
    /// drain (samples × `every`), and start afresh.
    pub fn drain(&mut self, mut visit: impl FnMut(OffloadKey, u64)) {
        for slot in self.slots.iter_mut() {
            if slot.1 > 0 {
                visit(slot.0, u64::from(slot.1) * u64::from(self.every));
                slot.1 = 0;
            }
        }
    }
}

fn slot_of(key: &OffloadKey) -> usize {
    // A multiplicative mix of the fields that vary most between flows.
    let a = u64::from(key.ipv4_src) << 32 | u64::from(key.ipv4_dst);
    let b = u64::from(key.tp_src) << 48
        ^ u64::from(key.tp_dst) << 32
        ^ u64::from(key.in_port) << 8
        ^ u64::from(key.ip_proto)
        ^ key.eth_dst.rotate_left(17)
        ^ key.eth_src
        ^ key.tunnel_id.rotate_left(41);
    let h = (a ^ b.rotate_left(29)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (h >> 56) as usize & (SAMPLE_SLOTS - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use offlow_testkit::FrameBuilder;
    use std::collections::HashMap;

    fn frame(sport: u16) -> Vec<u8> {
        FrameBuilder::default()
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2])
            .udp(sport, 9)
            .build()
    }

    #[test]
    fn heavy_hitters_stand_out_of_a_long_tail() {
        let mut s = Sampler::new(4);
        let heavy: Vec<Vec<u8>> = (0..8).map(|i| frame(1000 + i)).collect();
        let tail: Vec<Vec<u8>> = (0..5000).map(|i| frame(20_000 + i)).collect();
        // 8 flows carry half the packets; 5,000 share the other half.
        for round in 0..5000 {
            s.offer(&heavy[round % 8], 1, 0);
            s.offer(&tail[round], 1, 0);
        }
        let mut got = HashMap::new();
        s.drain(|k, n| {
            got.insert(k.tp_src, n);
        });
        for i in 0..8 {
            let n = got.get(&(1000 + i)).copied().unwrap_or(0);
            // Each heavy flow sent 625 packets; the estimate carries the
            // sampling noise and may fall short by the tail's share of its
            // slot, never far.
            assert!((300..=900).contains(&n), "flow {i}: {n}");
        }
        let tail_max = got
            .iter()
            .filter(|(p, _)| **p >= 20_000)
            .map(|(_, n)| *n)
            .max()
            .unwrap_or(0);
        assert!(tail_max < 100, "a tail flow looks heavy: {tail_max}");
        // Drained: nothing left.
        let mut again = 0;
        s.drain(|_, _| again += 1);
        assert_eq!(again, 0);
    }

    #[test]
    fn frames_outside_the_class_are_not_counted() {
        let mut s = Sampler::new(1);
        let arp = FrameBuilder::default()
            .arp(1, [2, 0, 0, 0, 0, 1], [10, 0, 0, 1], [0; 6], [10, 0, 0, 2])
            .build();
        for _ in 0..10 {
            s.offer(&arp, 1, 0);
            s.offer(&[0u8; 3], 1, 0);
        }
        assert_eq!(s.sampled, 20);
        let mut n = 0;
        s.drain(|_, _| n += 1);
        assert_eq!(n, 0);
    }
}
