//! Timing and hit-rate experiments for the microflow cache. Run with
//! `cargo run --release -p offlow-datapath --example microflow_timing [PACKETS]`
//! (default 2M packets per measurement).
//!
//! (a) Warm lookups: N flows (8K, 64K, 1M) all cached (capacity 2N), uniform
//!     traffic, batches of 32: ns/packet for hash + `lookup_batch`, and for
//!     hash + single `lookup`, and for the hash alone.
//! (b) Thrash: an 8192-entry cache (OVS EMC's size) in front of N = 8K, 64K,
//!     256K, 1M flows, Zipf(1.0) and uniform popularity. Every miss tries to
//!     insert. Hit rate and ns/packet (hash + batch lookup + inserts; no
//!     pipeline cost) per policy, beside the hit rate of the ideal static
//!     cache holding the 8192 most popular flows.

use offlow_datapath::{flow_hash, InsertPolicy, MicroflowCache};
use offlow_flow::{present, Field, FlowKey};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::hint::black_box;
use std::time::Instant;

const BATCH: usize = 32;

/// A TCP/IPv4 5-tuple key for flow `i` (distinct for distinct `i`).
fn flow_key(i: u32) -> FlowKey {
    let mut k = FlowKey::ZERO;
    k.set(Field::InPort, u128::from(i % 4 + 1));
    k.set(Field::EthType, 0x0800);
    k.set(Field::Ipv4Src, u128::from(0x0a00_0000 | (i >> 8)));
    k.set(
        Field::Ipv4Dst,
        u128::from(0xc0a8_0000 | (i.wrapping_mul(2_654_435_761) >> 16)),
    );
    k.set(Field::IpProto, 6);
    k.set(Field::TcpSrc, u128::from(1024 + (i & 0xff) * 7));
    k.set(Field::TcpDst, 80);
    k.add_presence(present::L3 | present::L4);
    k
}

/// Inverse-CDF Zipf sampler over ranks `0..n`: P(rank r) ∝ 1 / (r + 1)^s.
struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    fn new(n: usize, s: f64) -> Zipf {
        let mut cdf = Vec::with_capacity(n);
        let mut acc = 0.0;
        for r in 0..n {
            acc += 1.0 / ((r + 1) as f64).powf(s);
            cdf.push(acc);
        }
        for c in &mut cdf {
            *c /= acc;
        }
        Zipf { cdf }
    }

    fn sample(&self, rng: &mut SmallRng) -> u32 {
        let u: f64 = rng.gen();
        let r = self.cdf.partition_point(|&c| c < u);
        r.min(self.cdf.len() - 1) as u32
    }

    /// Probability mass of the `k` most popular ranks.
    fn top_mass(&self, k: usize) -> f64 {
        if k == 0 {
            0.0
        } else {
            self.cdf[k.min(self.cdf.len()) - 1]
        }
    }
}

/// Trace of flow indices. Ranks are scattered over flow indices by a
/// bijection so popular flows are not neighbours in key space.
fn trace(n: usize, packets: usize, zipf: Option<&Zipf>, seed: u64) -> Vec<u32> {
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..packets)
        .map(|_| {
            let r = match zipf {
                Some(z) => z.sample(&mut rng),
                None => rng.gen_range(0..n as u32),
            };
            // Multiplication by an odd constant modulo a power of two is a
            // bijection; n is a power of two in every experiment.
            r.wrapping_mul(0x9e37_79b1) & (n as u32 - 1)
        })
        .collect()
}

/// Figures of one [`run`].
struct RunResult {
    /// Wall time per packet: key gather + hash + cache work.
    total_ns: f64,
    /// Time per packet inside the cache only (`lookup_batch` and inserts),
    /// timed per batch so the key gather (a cache miss into a 128 MB key
    /// array at 1M flows, which a parser writing the key would not have)
    /// and the hash are excluded.
    cache_ns: f64,
    hit_rate: f64,
    evictions_per_pkt: f64,
}

/// Run `trace` through `cache` in batches of 32, inserting on miss when
/// `insert` is set.
fn run(
    cache: &mut MicroflowCache<u32>,
    keys: &[FlowKey],
    trace: &[u32],
    insert: bool,
) -> RunResult {
    let before = cache.stats();
    let mut bk = [FlowKey::ZERO; BATCH];
    let mut bh = [0u64; BATCH];
    let mut out = [None; BATCH];
    let mut sum = 0u64;
    let mut cache_time = std::time::Duration::ZERO;
    let t = Instant::now();
    for chunk in trace.chunks(BATCH) {
        let n = chunk.len();
        // Gathering the key stands in for the parser writing it.
        for (j, &f) in chunk.iter().enumerate() {
            bk[j] = keys[f as usize];
            bh[j] = flow_hash(&bk[j]);
        }
        // Instant::now costs ~20 ns, under 1 ns per packet of a 32-batch.
        let tc = Instant::now();
        cache.lookup_batch(&bk[..n], &bh[..n], &mut out[..n]);
        for j in 0..n {
            match out[j] {
                Some(v) => sum += u64::from(v),
                None if insert => {
                    cache.insert_hashed(&bk[j], bh[j], chunk[j]);
                }
                None => {}
            }
        }
        cache_time += tc.elapsed();
    }
    let total_ns = t.elapsed().as_nanos() as f64 / trace.len() as f64;
    black_box(sum);
    let s = cache.stats();
    let hits = s.hits - before.hits;
    let total = hits + s.misses - before.misses;
    RunResult {
        total_ns,
        cache_ns: cache_time.as_nanos() as f64 / trace.len() as f64,
        hit_rate: hits as f64 / total.max(1) as f64,
        evictions_per_pkt: (s.evictions - before.evictions) as f64 / trace.len() as f64,
    }
}

/// Single `lookup_hashed` calls over the same batches, cache time only.
fn run_single(cache: &MicroflowCache<u32>, keys: &[FlowKey], trace: &[u32]) -> f64 {
    let mut bk = [FlowKey::ZERO; BATCH];
    let mut bh = [0u64; BATCH];
    let mut sum = 0u64;
    let mut cache_time = std::time::Duration::ZERO;
    for chunk in trace.chunks(BATCH) {
        for (j, &f) in chunk.iter().enumerate() {
            bk[j] = keys[f as usize];
            bh[j] = flow_hash(&bk[j]);
        }
        let tc = Instant::now();
        for j in 0..chunk.len() {
            if let Some(v) = cache.lookup_hashed(&bk[j], bh[j]) {
                sum += u64::from(v);
            }
        }
        cache_time += tc.elapsed();
    }
    black_box(sum);
    cache_time.as_nanos() as f64 / trace.len() as f64
}

fn main() {
    let packets: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2_000_000);
    let max_flows = 1 << 20;
    let keys: Vec<FlowKey> = (0..max_flows).map(flow_key).collect();

    println!(
        "# (a) warm cache, uniform traffic, all flows cached, batch {BATCH}, {packets} packets"
    );
    println!("| flows | capacity | hit rate | lookup_batch ns/pkt | single lookup ns/pkt | total incl. gather+hash ns/pkt | gather+hash ns/pkt |");
    println!("|---|---|---|---|---|---|---|");
    for n in [8192usize, 65_536, 1 << 20] {
        let mut c = MicroflowCache::<u32>::new(2 * n, InsertPolicy::Always);
        for (i, k) in keys[..n].iter().enumerate() {
            c.insert(k, i as u32);
        }
        let tr = trace(n, packets, None, 1);
        run(&mut c, &keys, &tr[..packets.min(1 << 20)], false); // warm-up
        let r = run(&mut c, &keys, &tr, false);
        let single_ns = run_single(&c, &keys, &tr);
        let t = Instant::now();
        let mut hsum = 0u64;
        for &f in &tr {
            hsum = hsum.wrapping_add(flow_hash(black_box(&keys[f as usize])));
        }
        let hash_ns = t.elapsed().as_nanos() as f64 / tr.len() as f64;
        black_box(hsum);
        println!(
            "| {n} | {} | {:.4} | {:.1} | {single_ns:.1} | {:.1} | {hash_ns:.1} |",
            c.capacity(),
            r.hit_rate,
            r.cache_ns,
            r.total_ns,
        );
    }

    let policies = [
        ("Always", InsertPolicy::Always),
        (
            "Probabilistic{100}",
            InsertPolicy::Probabilistic { one_in: 100 },
        ),
        (
            "SecondChance{1}",
            InsertPolicy::SecondChance { max_credit: 1 },
        ),
        ("SecondChance{3} (default)", InsertPolicy::default()),
        (
            "SecondChance{7}",
            InsertPolicy::SecondChance { max_credit: 7 },
        ),
    ];
    for zipf_s in [Some(1.0), None] {
        match zipf_s {
            Some(s) => println!("\n# (b) thrash: capacity 8192, Zipf(s={s}), insert on miss, {packets} packets after {packets} warm-up"),
            None => println!("\n# (b) thrash: capacity 8192, uniform, insert on miss, {packets} packets after {packets} warm-up"),
        }
        println!("| flows | policy | hit rate | cache ns/pkt | total ns/pkt | evictions/pkt | ideal static top-8192 hit rate |");
        println!("|---|---|---|---|---|---|---|");
        for n in [8192usize, 65_536, 262_144, 1 << 20] {
            let z = zipf_s.map(|s| Zipf::new(n, s));
            let ideal = z
                .as_ref()
                .map_or(8192.0 / n as f64, |z| z.top_mass(8192))
                .min(1.0);
            let warm = trace(n, packets, z.as_ref(), 2);
            let tr = trace(n, packets, z.as_ref(), 3);
            for (name, p) in policies {
                let mut c = MicroflowCache::<u32>::new(8192, p);
                run(&mut c, &keys, &warm, true);
                let r = run(&mut c, &keys, &tr, true);
                println!(
                    "| {n} | {name} | {:.4} | {:.1} | {:.1} | {:.4} | {ideal:.4} |",
                    r.hit_rate, r.cache_ns, r.total_ns, r.evictions_per_pkt
                );
            }
        }
    }
}
