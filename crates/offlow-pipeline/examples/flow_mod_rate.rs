//! Flow-mod throughput on real rule sets: time to ADD a BGP table (and a
//! ClassBench ACL) into a one-table pipeline through `Pipeline::flow_mod`,
//! then the rate of DELETE_STRICT + re-ADD of random rules.
//!
//! ```text
//! cargo run --release -p offlow-pipeline --example flow_mod_rate -- \
//!     [FIB.gz] [N_ROUTES] [ACL] [N_UPDATES]
//! ```
//! Defaults: /work/shared/data/fib/ipasn_20140513.dat.gz, 524288 routes,
//! /work/shared/data/classbench/wustl_pclasseval/acl1_10K, 200000 updates.

use std::io::{BufRead, BufReader};
use std::time::Instant;

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
/// gets the highest priority.
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
        if pm != 0 {
            m.set_masked(Field::IpProto, u128::from(pv), u128::from(pm));
        }
        let fm = FlowMatch::with_ports(
            m,
            PortRange { lo: slo, hi: shi },
            PortRange { lo: dlo, hi: dhi },
        );
        out.push((n - i as u32, fm));
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

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, d: &str| args.get(i).cloned().unwrap_or_else(|| d.to_string());
    let fib = arg(1, "/work/shared/data/fib/ipasn_20140513.dat.gz");
    let n: usize = arg(2, "524288").parse().unwrap_or(524_288);
    let acl = arg(3, "/work/shared/data/classbench/wustl_pclasseval/acl1_10K");
    let updates: usize = arg(4, "200000").parse().unwrap_or(200_000);
    if n > 0 {
        let rules = fib_rules(&fib, n)?;
        bench("fib", &rules, updates);
    }
    let rules = acl_rules(&acl)?;
    if !rules.is_empty() {
        bench("acl1_10K", &rules, updates);
    }
    Ok(())
}
