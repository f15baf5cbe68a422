//! Flow-mod throughput on real rule sets: time to ADD a BGP table (and a
//! ClassBench ACL) into a one-table pipeline through `Pipeline::flow_mod`,
//! then the rate of DELETE_STRICT + re-ADD of random rules, and the cost of
//! the update stream of `offlow bench update` as a left-right pair pays it.
//!
//! ```text
//! cargo run --release -p offlow-pipeline --example flow_mod_rate -- \
//!     [FIB.gz] [N_ROUTES] [ACL,ACL...] [N_UPDATES]
//! ```
//! Defaults: /work/shared/data/fib/ipasn_20140513.dat.gz, 524288 routes,
//! data/classbench/acl1 and /work/shared/data/classbench/wustl_pclasseval/acl1_10K,
//! 200000 updates.
//!
//! `FLOW_MOD_RATE_LR_ONLY=1` skips the single-copy loop (for profiling).
//!
//! After loading, the table is compiled (`PipelineOp::Compile`) as the
//! datapath does, so the FIB is served by DIR-24-8 and the ACL starts with
//! an RFC snapshot. The left-right figure: two copies A and B; each update
//! is `prepare` + `apply` on A, and the op is replayed on B at the next
//! commit (every 64 updates), when the copies swap roles — exactly the work
//! `Control::flow_mod` + `Control::commit` do, minus the reader wait. The
//! stream is the bench's: a random rule; if installed, MODIFY_STRICT it one
//! time in three (new instructions), else DELETE_STRICT; if not, ADD it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{BufRead, BufReader};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// The system allocator, counting calls: the left-right figure reports
/// allocations per update (each is a malloc + free on the writer).
struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static ALIGNED_ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards every call unchanged to `System`, which upholds the
// GlobalAlloc contract; the counters have no effect on the memory handed out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        if layout.align() > 16 {
            ALIGNED_ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same layout the caller gave us.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

use offlow_flow::{Field, Match};
use offlow_pipeline::*;

fn parse_prefix(s: &str) -> Option<(u32, u32)> {
    let (a, l) = s.split_once('/')?;
    let addr: std::net::Ipv4Addr = a.parse().ok()?;
    let len: u32 = l.parse().ok()?;
    (len <= 32).then_some((u32::from(addr), len))
}

fn fib_rules(path: &str, n: usize) -> std::io::Result<Vec<(Priority, FlowMatch)>> {
    let f = std::fs::File::open(path)?;
    let r = BufReader::new(flate2::read::GzDecoder::new(f));
    let mut out = Vec::new();
    for line in r.lines() {
        let line = line?;
        if line.starts_with(';') {
            continue;
        }
        let Some((addr, len)) = line.split('\t').next().and_then(parse_prefix) else {
            continue;
        };
        let mut m = Match::ANY;
        m.set_exact(Field::EthType, 0x0800)
            .set_prefix(Field::Ipv4Dst, u128::from(addr), len);
        out.push((len + 1, FlowMatch::new(m)));
        if out.len() == n {
            break;
        }
    }
    Ok(out)
}

/// `@sip/len dip/len slo : shi dlo : dhi proto/mask ...`; the first rule
/// gets the highest priority. As `offlow bench`'s loader does, a rule with
/// port ranges becomes one rule per port-carrying protocol (tcp, udp, sctp)
/// its protocol value/mask admits.
fn acl_rules(path: &str) -> std::io::Result<Vec<(Priority, FlowMatch)>> {
    let text = std::fs::read_to_string(path)?;
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with('@')).collect();
    let n = lines.len() as u32;
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let t: Vec<&str> = l[1..].split_whitespace().collect();
        if t.len() < 9 {
            continue;
        }
        let (Some((s, sl)), Some((d, dl))) = (parse_prefix(t[0]), parse_prefix(t[1])) else {
            continue;
        };
        let port = |x: &str| x.parse::<u16>().ok();
        let (Some(slo), Some(shi), Some(dlo), Some(dhi)) =
            (port(t[2]), port(t[4]), port(t[5]), port(t[7]))
        else {
            continue;
        };
        let Some((pv, pm)) = t[8].split_once('/') else {
            continue;
        };
        let hex = |x: &str| u8::from_str_radix(x.trim_start_matches("0x"), 16).ok();
        let (Some(pv), Some(pm)) = (hex(pv), hex(pm)) else {
            continue;
        };
        let mut m = Match::ANY;
        m.set_exact(Field::EthType, 0x0800)
            .set_prefix(Field::Ipv4Src, u128::from(s), sl)
            .set_prefix(Field::Ipv4Dst, u128::from(d), dl);
        let (sp, dp) = (
            PortRange { lo: slo, hi: shi },
            PortRange { lo: dlo, hi: dhi },
        );
        if sp.is_any() && dp.is_any() {
            if pm != 0 {
                m.set_masked(Field::IpProto, u128::from(pv), u128::from(pm));
            }
            out.push((n - i as u32, FlowMatch::new(m)));
            continue;
        }
        for p in [6u8, 17, 132] {
            if p & pm == pv & pm {
                let mut m = m;
                m.set_exact(Field::IpProto, u128::from(p));
                out.push((n - i as u32, FlowMatch::with_ports(m, sp, dp)));
            }
        }
    }
    Ok(out)
}

fn flow_mod(cmd: FlowModCommand, prio: Priority, m: &FlowMatch) -> FlowMod {
    let mut fm = FlowMod::new(cmd, 0, prio, m.matcher);
    fm.matcher = *m;
    if cmd == FlowModCommand::Add {
        fm.instructions = vec![Instruction::ApplyActions(vec![Action::output(PortNo(1))])];
    }
    fm
}

fn bench(name: &str, rules: &[(Priority, FlowMatch)], updates: usize) {
    let mut p = Pipeline::new(1);
    let mut dup = std::collections::HashSet::new();
    let rules: Vec<(Priority, FlowMatch)> =
        rules.iter().filter(|r| dup.insert(**r)).copied().collect();
    let rules = &rules[..];
    let t = Instant::now();
    let mut shadowed = 0usize;
    for (prio, m) in rules {
        match p.flow_mod(&flow_mod(FlowModCommand::Add, *prio, m), 0) {
            Ok(e) => shadowed += e.shadowed.len(),
            Err(e) => eprintln!("{name}: add failed: {e}"),
        }
    }
    let load = t.elapsed();
    println!(
        "{name}: loaded {} rules ({} entries) in {:.3} s = {:.0} ADD/s; mean |shadowed| {:.2}",
        rules.len(),
        p.len(),
        load.as_secs_f64(),
        rules.len() as f64 / load.as_secs_f64(),
        shadowed as f64 / rules.len().max(1) as f64
    );
    p.apply(&PipelineOp::Compile);
    println!("{name}: compiled: {:?}", p.table_structures());
    if std::env::var_os("FLOW_MOD_RATE_LR_ONLY").is_none() {
        single_copy(name, &mut p, rules, updates);
    }
    // Last, and consuming `p`: a third copy would keep every entry alive
    // and hide the steady state of the two copies (entry reuse).
    left_right(name, p, rules, updates);
}

/// DELETE_STRICT + re-ADD of random rules on one copy.
fn single_copy(name: &str, p: &mut Pipeline, rules: &[(Priority, FlowMatch)], updates: usize) {
    // xorshift64: deterministic random rule choice without a dependency.
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let t = Instant::now();
    let mut shadowed = 0usize;
    let (mut del_ns, mut add_ns) = (0u128, 0u128);
    for _ in 0..updates {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let (prio, m) = &rules[(x % rules.len() as u64) as usize];
        let t0 = Instant::now();
        let del = p.flow_mod(&flow_mod(FlowModCommand::DeleteStrict, *prio, m), 0);
        assert_eq!(del.map(|e| e.removed.len()).ok(), Some(1), "{m:?}");
        let t1 = Instant::now();
        let add = p.flow_mod(&flow_mod(FlowModCommand::Add, *prio, m), 0);
        shadowed += add.map(|e| e.shadowed.len()).unwrap_or(0);
        del_ns += (t1 - t0).as_nanos();
        add_ns += t1.elapsed().as_nanos();
    }
    let upd = t.elapsed();
    println!(
        "{name}: mean DELETE_STRICT {:.0} ns, mean ADD {:.0} ns (incl. dropping the effect)",
        del_ns as f64 / updates.max(1) as f64,
        add_ns as f64 / updates.max(1) as f64
    );
    println!(
        "{name}: {updates} x (DELETE_STRICT + ADD) in {:.3} s = {:.0} flow-mods/s; mean |shadowed| {:.2}",
        upd.as_secs_f64(),
        2.0 * updates as f64 / upd.as_secs_f64(),
        shadowed as f64 / updates.max(1) as f64
    );
}

/// The update stream of `offlow bench update` over one rule set.
struct Stream<'a> {
    rules: &'a [(Priority, FlowMatch)],
    installed: Vec<bool>,
    flipped: Vec<bool>,
    /// xorshift64 state: deterministic, no dependency.
    x: u64,
}

const ADD: usize = 0;
const MODIFY: usize = 1;
const DELETE: usize = 2;
const KINDS: [&str; 3] = ["ADD", "MODIFY_STRICT", "DELETE_STRICT"];

impl Stream<'_> {
    /// The next flow-mod and its kind (index into [`KINDS`]).
    fn next(&mut self) -> (usize, FlowMod) {
        let x = &mut self.x;
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        let i = (*x % self.rules.len() as u64) as usize;
        let (prio, m) = &self.rules[i];
        if !self.installed[i] {
            self.installed[i] = true;
            self.flipped[i] = false;
            (ADD, flow_mod(FlowModCommand::Add, *prio, m))
        } else if (*x >> 40) % 3 == 0 {
            self.flipped[i] = !self.flipped[i];
            let mut fm = flow_mod(FlowModCommand::ModifyStrict, *prio, m);
            let port = if self.flipped[i] { 2 } else { 1 };
            fm.instructions = vec![Instruction::ApplyActions(vec![Action::output(PortNo(
                port,
            ))])];
            (MODIFY, fm)
        } else {
            self.installed[i] = false;
            (DELETE, flow_mod(FlowModCommand::DeleteStrict, *prio, m))
        }
    }
}

/// What one pass of the stream over a pair measured.
#[derive(Default)]
struct Pass {
    secs: f64,
    counts: [u64; 3],
    /// Per kind: prepare, apply A, apply B nanoseconds (timed pass only).
    ns: [[u128; 3]; 3],
    /// Per kind: allocations (all, over-aligned) in prepare + apply A.
    allocs: [[u64; 2]; 3],
}

/// Run `updates` ops of `stream` on the pair, committing every 64 as
/// `Control` does: the inactive copy takes prepare + apply, then at commit
/// the copies swap and the other one replays the log. With `timed`, every
/// step is timed separately (costs two clock reads per step).
fn pass(copies: &mut [Pipeline; 2], stream: &mut Stream, updates: usize, timed: bool) -> Pass {
    const COMMIT_EVERY: usize = 64;
    let mut out = Pass::default();
    let mut active = 0usize;
    let mut oplog: Vec<(usize, PipelineOp)> = Vec::with_capacity(COMMIT_EVERY);
    // The replay prefetches as `Versioned::publish` does: 4 ops ahead, then
    // the near stages at 2 and 1 (`FLOW_MOD_RATE_NEAR=0` skips those).
    let near = std::env::var_os("FLOW_MOD_RATE_NEAR").is_none_or(|v| v != "0");
    let t = Instant::now();
    for n in 0..updates {
        let (kind, fm) = stream.next();
        out.counts[kind] += 1;
        let w = &mut copies[active ^ 1];
        let (c0, g0) = (
            ALLOCS.load(Ordering::Relaxed),
            ALIGNED_ALLOCS.load(Ordering::Relaxed),
        );
        let t0 = timed.then(Instant::now);
        // Every op of the stream is valid for the current state.
        let (op, effect) = w.prepare(&fm, 0).expect("valid stream op");
        let t1 = timed.then(Instant::now);
        w.apply(&op);
        if let (Some(t0), Some(t1)) = (t0, t1) {
            out.ns[kind][0] += (t1 - t0).as_nanos();
            out.ns[kind][1] += t1.elapsed().as_nanos();
        }
        drop(effect);
        out.allocs[kind][0] += ALLOCS.load(Ordering::Relaxed) - c0;
        out.allocs[kind][1] += ALIGNED_ALLOCS.load(Ordering::Relaxed) - g0;
        oplog.push((kind, op));
        if (n + 1) % COMMIT_EVERY == 0 || n + 1 == updates {
            // Publish: the written copy becomes active; the old one catches
            // up by replaying the log.
            active ^= 1;
            let old = &mut copies[active ^ 1];
            let ops = &oplog;
            for (i, (kind, op)) in ops.iter().enumerate() {
                if let Some((_, ahead)) = ops.get(i + 4) {
                    old.prefetch_op(ahead);
                }
                if near {
                    for stage in [2, 1] {
                        if let Some((_, ahead)) = ops.get(i + stage) {
                            old.prefetch_op_near(ahead, stage);
                        }
                    }
                }
                let kind = *kind;
                let t0 = timed.then(Instant::now);
                old.apply(op);
                if let Some(t0) = t0 {
                    out.ns[kind][2] += t0.elapsed().as_nanos();
                }
            }
            oplog.clear();
        }
    }
    out.secs = t.elapsed().as_secs_f64();
    assert_eq!(copies[0].len(), copies[1].len(), "copies diverged");
    out
}

/// The bench's stream on a left-right pair: an untimed pass for the
/// headline rate, then a timed pass (continuing the same stream) for the
/// per-step breakdown.
fn left_right(name: &str, p: Pipeline, rules: &[(Priority, FlowMatch)], updates: usize) {
    let mut copies = [p.replica(), p];
    let mut stream = Stream {
        rules,
        installed: vec![true; rules.len()],
        flipped: vec![false; rules.len()],
        x: 0x9e37_79b9_7f4a_7c15,
    };
    let fast = pass(&mut copies, &mut stream, updates, false);
    let c = fast.counts;
    println!(
        "{name}: left-right: {updates} updates ({} ADD, {} MODIFY_STRICT, {} DELETE_STRICT) in {:.3} s = {:.0} updates/s = {:.3} µs/update",
        c[ADD],
        c[MODIFY],
        c[DELETE],
        fast.secs,
        updates as f64 / fast.secs,
        fast.secs * 1e6 / updates.max(1) as f64
    );
    let all: u64 = fast.allocs.iter().map(|a| a[0]).sum();
    let aligned: u64 = fast.allocs.iter().map(|a| a[1]).sum();
    println!(
        "{name}: left-right allocations per update (prepare + apply A): {:.2}, over-aligned {:.3}",
        all as f64 / updates.max(1) as f64,
        aligned as f64 / updates.max(1) as f64
    );
    let timed = pass(&mut copies, &mut stream, updates, true);
    let total: u128 = timed.ns.iter().flatten().sum();
    println!(
        "{name}: left-right timed pass: {:.3} µs/update in the timed steps",
        total as f64 / 1e3 / updates.max(1) as f64
    );
    for (k, label) in KINDS.iter().enumerate() {
        let n = timed.counts[k].max(1) as f64;
        let [p, a, b] = timed.ns[k].map(|ns| ns as f64 / n / 1e3);
        println!(
            "{name}:   {label} ({}): prepare {p:.3} + apply A {a:.3} + apply B {b:.3} = {:.3} µs; {:.2} allocations",
            timed.counts[k],
            p + a + b,
            timed.allocs[k][0] as f64 / n
        );
    }
}

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, d: &str| args.get(i).cloned().unwrap_or_else(|| d.to_string());
    let fib = arg(1, "/work/shared/data/fib/ipasn_20140513.dat.gz");
    let n: usize = arg(2, "524288").parse().unwrap_or(524_288);
    let acl = arg(
        3,
        "data/classbench/acl1,/work/shared/data/classbench/wustl_pclasseval/acl1_10K",
    );
    let updates: usize = arg(4, "200000").parse().unwrap_or(200_000);
    if n > 0 {
        let rules = fib_rules(&fib, n)?;
        bench("fib", &rules, updates);
    }
    for path in acl.split(',').filter(|p| !p.is_empty()) {
        let rules = acl_rules(path)?;
        let name = path.rsplit('/').next().unwrap_or(path);
        if !rules.is_empty() {
            bench(name, &rules, updates);
        }
    }
    Ok(())
}
