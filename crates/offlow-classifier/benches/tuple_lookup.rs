//! TupleMerge throughput on the WUSTL ClassBench sets (plain timing loop,
//! no criterion: short runs on a shared 2-core machine).
//!
//! Run: `cargo bench -p offlow-classifier --bench tuple_lookup`
//! Reports ns/lookup (single and batch of 32, uncached: every lookup walks
//! the classifier), insert+delete rate on the loaded set, and a 100K-rule
//! random ACL-like set.
#[path = "../tests/common/mod.rs"]
mod common;

use std::hint::black_box;
use std::time::{Duration, Instant};

use common::{key5, load_rules, load_trace, wustl_dir};
use offlow_classifier::tuple::TupleConfig;
use offlow_classifier::{Classify, Field, FlowKey, Match, PortRange, Rule, TupleMerge};

/// Run `f` (which does `n` operations) repeatedly for `budget`; ns per op
/// of the fastest repetition. The minimum filters out time slices lost to
/// other processes on this shared machine (each repetition is a few ms).
fn time_ns(budget: Duration, n: usize, mut f: impl FnMut()) -> f64 {
    f(); // warm up
    let start = Instant::now();
    let mut best = f64::MAX;
    while start.elapsed() < budget {
        let t = Instant::now();
        f();
        best = best.min(t.elapsed().as_nanos() as f64);
    }
    best / n as f64
}

fn bench_lookup(name: &str, tm: &TupleMerge, keys: &[FlowKey]) {
    let single = time_ns(Duration::from_millis(700), keys.len(), || {
        for k in keys {
            black_box(tm.lookup(black_box(k)));
        }
    });
    let mut out = vec![None; 32];
    let batch = time_ns(Duration::from_millis(700), keys.len(), || {
        for c in keys.chunks(32) {
            tm.lookup_batch(black_box(c), &mut out);
            black_box(&out);
        }
    });
    println!(
        "{name:>10}: {} rules, {} tuples: single {single:6.1} ns/lookup ({:.2} Mpps), batch32 {batch:6.1} ns/lookup ({:.2} Mpps)",
        tm.len(),
        tm.tuple_count(),
        1e3 / single,
        1e3 / batch
    );
}

fn bench_updates(name: &str, tm: &mut TupleMerge, rules: &[Rule]) {
    // Remove and re-insert every rule in turn: 2 ops per rule.
    let ns = time_ns(Duration::from_millis(700), rules.len() * 2, || {
        for r in rules {
            tm.remove(r.id);
            tm.insert(r.clone());
        }
    });
    println!(
        "{name:>10}: insert+delete {ns:6.1} ns/op ({:.2} M updates/s)",
        1e3 / ns
    );
}

/// xorshift64*: a small deterministic generator for synthetic rules.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// 100K ACL-like rules: src/dst prefixes weighted towards /32 and /24,
/// exact or wildcard proto, exact, range or wildcard ports.
fn synthetic(n: u32, rng: &mut Rng) -> Vec<Rule> {
    let lens = [32, 32, 32, 24, 24, 16, 28, 0, 8, 30];
    (0..n)
        .map(|i| {
            let mut m = Match::ANY;
            m.set_exact(Field::EthType, 0x0800);
            let sl = lens[(rng.next() % 10) as usize];
            let dl = lens[(rng.next() % 10) as usize];
            m.set_prefix(Field::Ipv4Src, rng.next() as u32 as u128, sl);
            m.set_prefix(Field::Ipv4Dst, rng.next() as u32 as u128, dl);
            if rng.next() % 4 != 0 {
                m.set_exact(Field::IpProto, [6u128, 17][(rng.next() % 2) as usize]);
            }
            let port = |rng: &mut Rng| match rng.next() % 4 {
                0 => PortRange::ANY,
                1 => PortRange::exact(rng.next() as u16 % 2000),
                2 => PortRange {
                    lo: 1024,
                    hi: 65535,
                },
                _ => {
                    let lo = rng.next() as u16 % 60000;
                    PortRange { lo, hi: lo + 100 }
                }
            };
            let sp = port(rng);
            let dp = port(rng);
            Rule::new(i, (rng.next() % 1_000_000) as u32, m).with_ports(sp, dp)
        })
        .collect()
}

/// Keys that hit a rule: its values, random bits where it is wildcarded.
fn keys_for(rules: &[Rule], n: usize, rng: &mut Rng) -> Vec<FlowKey> {
    (0..n)
        .map(|_| {
            let r = &rules[(rng.next() % rules.len() as u64) as usize];
            let mut k = key5(
                rng.next() as u32,
                rng.next() as u32,
                rng.next() as u16,
                rng.next() as u16,
                6,
            );
            for w in 0..k.words.len() {
                let m = r.matcher.mask.words[w];
                k.words[w] = (k.words[w] & !m) | r.matcher.value.words[w];
            }
            k.set(Field::TcpSrc, r.src_port.lo as u128);
            k.set(Field::TcpDst, r.dst_port.hi as u128);
            k
        })
        .collect()
}

/// Configuration from the environment (for tuning runs):
/// `TM_LIMIT` (collision limit), `TM_COARSE_PORTS` (0/1).
fn config() -> TupleConfig {
    let mut c = TupleConfig::default();
    if let Some(l) = std::env::var("TM_LIMIT").ok().and_then(|v| v.parse().ok()) {
        c.collision_limit = l;
    }
    if let Ok(v) = std::env::var("TM_COARSE_PORTS") {
        c.coarse_ports = v == "1";
    }
    c
}

fn main() {
    let cfg = config();
    println!("config: {cfg:?}");
    if let Some(dir) = wustl_dir() {
        for name in ["acl1", "acl1_10K", "fw1_10K", "ipc1_10K"] {
            let rules = load_rules(&dir.join(name));
            let tp = dir.join(format!("{name}_trace"));
            let trace = if tp.exists() {
                load_trace(&tp)
            } else {
                load_trace(&dir.join(format!("{name}_trace.gz")))
            };
            let keys: Vec<FlowKey> = trace.iter().map(|(k, _)| *k).collect();
            let mut tm = TupleMerge::with_config(cfg);
            for r in &rules {
                tm.insert(r.clone());
            }
            bench_lookup(name, &tm, &keys);
            bench_updates(name, &mut tm, &rules);
        }
    } else {
        println!("NOTICE: WUSTL data absent; ClassBench figures skipped");
    }
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let rules = synthetic(100_000, &mut rng);
    let mut tm = TupleMerge::with_config(cfg);
    let t = Instant::now();
    for r in &rules {
        tm.insert(r.clone());
    }
    let ins = t.elapsed();
    println!(
        "synthetic100K: inserted {} rules in {:.1} ms ({:.0} ns/insert)",
        tm.len(),
        ins.as_secs_f64() * 1e3,
        ins.as_nanos() as f64 / rules.len() as f64
    );
    let keys = keys_for(&rules, 100_000, &mut rng);
    let hits = keys.iter().filter(|k| tm.lookup(k).is_some()).count();
    println!("synthetic100K: {hits} of {} keys hit a rule", keys.len());
    bench_lookup("synth100K", &tm, &keys);
    let sample: Vec<Rule> = rules.iter().take(10_000).cloned().collect();
    bench_updates("synth100K", &mut tm, &sample);
}
