//! Build an RFC classifier from a WUSTL ClassBench rule file and time batch
//! lookups over its trace (repeated for about one second).
//!
//! Usage: `cargo run --release -p offlow-classifier --example rfc_timing --
//! RULES TRACE [--trees]`. `--trees` also builds every candidate reduction
//! tree and prints its table sizes. Every trace answer is checked against the
//! trace's expected first match before timing.
//!
//! Rule format: `@sip/len dip/len sp_lo : sp_hi dp_lo : dp_hi proto/mask`;
//! rule id = 1-based line number (the trace's id), priority = N - index.
//! Trace: `sip dip sp dp proto rule_id ...` (0 = no match), plain or `.gz`.

use std::io::Read;
use std::process::ExitCode;
use std::time::Instant;

use offlow_classifier::rfc::{slot::*, RfcConfig, RfcSet, RfcSetConfig};
use offlow_classifier::{
    Classify, Field, FlowKey, Match, PortRange, Rfc, RfcAnswer, Rule, TupleMerge,
};
use offlow_flow::present;

fn read_text(path: &str) -> Result<String, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
    if path.ends_with(".gz") {
        let mut s = String::new();
        flate2::read::GzDecoder::new(&bytes[..])
            .read_to_string(&mut s)
            .map_err(|e| format!("{path}: {e}"))?;
        Ok(s)
    } else {
        String::from_utf8(bytes).map_err(|e| format!("{path}: {e}"))
    }
}

fn prefix(s: &str) -> Option<(u32, u32)> {
    let (a, l) = s.split_once('/')?;
    let mut v = 0u32;
    for o in a.split('.') {
        v = (v << 8) | o.parse::<u8>().ok()? as u32;
    }
    Some((v, l.parse().ok()?))
}

fn hex(s: &str) -> Option<u32> {
    u32::from_str_radix(s.trim_start_matches("0x"), 16).ok()
}

fn parse_rule(l: &str, id: u32, prio: u32) -> Option<Rule> {
    let t: Vec<&str> = l.strip_prefix('@')?.split_whitespace().collect();
    if t.len() < 9 {
        return None;
    }
    let (sa, sl) = prefix(t[0])?;
    let (da, dl) = prefix(t[1])?;
    let sp = PortRange {
        lo: t[2].parse().ok()?,
        hi: t[4].parse().ok()?,
    };
    let dp = PortRange {
        lo: t[5].parse().ok()?,
        hi: t[7].parse().ok()?,
    };
    let (pv, pm) = t[8].split_once('/')?;
    let mut m = Match::ANY;
    m.set_exact(Field::EthType, 0x0800);
    m.set_prefix(Field::Ipv4Src, sa as u128, sl);
    m.set_prefix(Field::Ipv4Dst, da as u128, dl);
    m.set_masked(Field::IpProto, hex(pv)? as u128, hex(pm)? as u128);
    Some(Rule::new(id, prio, m).with_ports(sp, dp))
}

fn load_rules(path: &str) -> Result<Vec<Rule>, String> {
    let text = read_text(path)?;
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with('@')).collect();
    let n = lines.len() as u32;
    lines
        .iter()
        .enumerate()
        .map(|(i, l)| {
            parse_rule(l, i as u32 + 1, n - i as u32)
                .ok_or_else(|| format!("{path}:{}: bad rule", i + 1))
        })
        .collect()
}

fn load_trace(path: &str) -> Result<Vec<(FlowKey, u32)>, String> {
    let text = read_text(path)?;
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate() {
        let t: Vec<u64> = l
            .split_whitespace()
            .take(6)
            .map(|x| {
                x.parse()
                    .map_err(|_| format!("{path}:{}: bad number", i + 1))
            })
            .collect::<Result<_, _>>()?;
        if t.len() < 6 {
            continue;
        }
        let mut k = FlowKey::ZERO;
        k.set(Field::EthType, 0x0800);
        k.set(Field::Ipv4Src, t[0] as u128);
        k.set(Field::Ipv4Dst, t[1] as u128);
        k.set(Field::TcpSrc, t[2] as u128);
        k.set(Field::TcpDst, t[3] as u128);
        k.set(Field::IpProto, t[4] as u128);
        k.add_presence(present::L3 | present::L4);
        out.push((k, t[5] as u32));
    }
    Ok(out)
}

/// Candidate reduction trees (slot 7.. are the outputs of earlier steps).
fn trees() -> Vec<(&'static str, Vec<(u8, u8)>)> {
    vec![
        ("S,D,P; SD,Pp; final", RfcConfig::default_tree()),
        (
            "S,D,P; Pp,SD; S-first final",
            vec![
                (SIP_HI, SIP_LO),
                (DIP_HI, DIP_LO),
                (SPORT, DPORT),
                (9, PROTO),
                (7, 10),
                (8, 11),
            ],
        ),
        (
            "S,D,P; SPp(P,p),DSPp",
            vec![
                (SIP_HI, SIP_LO),
                (DIP_HI, DIP_LO),
                (SPORT, DPORT),
                (9, PROTO),
                (8, 10),
                (7, 11),
            ],
        ),
        (
            "hi-halves first",
            vec![
                (SIP_HI, DIP_HI),
                (SIP_LO, DIP_LO),
                (SPORT, DPORT),
                (7, 8),
                (9, PROTO),
                (10, 11),
            ],
        ),
        (
            "proto with dport",
            vec![
                (SIP_HI, SIP_LO),
                (DIP_HI, DIP_LO),
                (DPORT, PROTO),
                (SPORT, 9),
                (7, 8),
                (10, 11),
            ],
        ),
    ]
}

/// Time `batch` over `keys` for about one second; returns Mpps.
fn time_batch(
    keys: &[FlowKey],
    out: &mut [RfcAnswer],
    batch: &dyn Fn(&[FlowKey], &mut [RfcAnswer]),
) -> f64 {
    let t0 = Instant::now();
    let mut n = 0u64;
    while t0.elapsed().as_secs_f64() < 1.0 {
        for _ in 0..16 {
            batch(std::hint::black_box(keys), out);
            n += keys.len() as u64;
        }
    }
    let dt = t0.elapsed().as_secs_f64();
    let mpps = n as f64 / dt / 1e6;
    println!(
        "batch : {mpps:.1} Mpps, {:.2} ns/lookup ({n} lookups)",
        dt * 1e9 / n as f64
    );
    mpps
}

fn check(trace: &[(FlowKey, u32)], out: &[RfcAnswer]) -> Result<(), String> {
    for (i, ((_, want), got)) in trace.iter().zip(out).enumerate() {
        let want = if *want == 0 {
            RfcAnswer::NoMatch
        } else {
            RfcAnswer::Hit(*want)
        };
        if *got != want {
            return Err(format!("trace line {}: got {got:?}, want {want:?}", i + 1));
        }
    }
    println!(
        "{} trace lines: all answers equal the expected first match",
        trace.len()
    );
    Ok(())
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        return Err("usage: rfc_timing RULES TRACE [--trees] [--set] [--part-mib N]".into());
    }
    let rules = load_rules(&args[1])?;
    let mut trace = load_trace(&args[2])?;
    let flag = |f: &str| args.iter().any(|a| a == f);
    if flag("--oracle") {
        // The lyxocs traces name the rule a header was generated from, not
        // its first match: take the expected answer from TupleMerge.
        let mut tm = TupleMerge::new();
        for r in &rules {
            tm.insert(r.clone());
        }
        for (k, want) in trace.iter_mut() {
            *want = tm.lookup(k).unwrap_or(0);
        }
    }
    if flag("--trees") {
        for (name, tree) in trees() {
            let cfg = RfcConfig {
                tree,
                ..RfcConfig::default()
            };
            match Rfc::build_with(&rules, &cfg) {
                Ok(r) => println!("tree [{name}]: {}", r.stats()),
                Err(e) => println!("tree [{name}]: {e}"),
            }
        }
    }
    let keys: Vec<FlowKey> = trace.iter().map(|(k, _)| *k).collect();
    let mut out = vec![RfcAnswer::NoMatch; keys.len()];
    if flag("--set") {
        let mut cfg = RfcSetConfig::default();
        if let Some(i) = args.iter().position(|a| a == "--part-mib") {
            let mib: usize = args
                .get(i + 1)
                .and_then(|s| s.parse().ok())
                .ok_or("--part-mib needs a number")?;
            cfg.part_budget = mib << 20;
        }
        let set = RfcSet::build_with(&rules, &cfg).map_err(|e| format!("set build: {e}"))?;
        println!("set: {}", set.stats());
        set.lookup_batch(&keys, &mut out);
        check(&trace, &out)?;
        for (i, (k, _)) in trace.iter().enumerate() {
            if set.lookup(k) != out[i] {
                return Err(format!("trace line {}: single != batch", i + 1));
            }
        }
        time_batch(&keys, &mut out, &|k, o| set.lookup_batch(k, o));
        return Ok(());
    }
    let rfc = Rfc::build(&rules).map_err(|e| format!("build: {e}"))?;
    println!("{}", rfc.stats());
    rfc.lookup_batch(&keys, &mut out);
    check(&trace, &out)?;
    time_batch(&keys, &mut out, &|k, o| rfc.lookup_batch(k, o));

    // Single lookups, for comparison.
    let t0 = Instant::now();
    let mut n = 0u64;
    let mut hits = 0u64;
    while t0.elapsed().as_secs_f64() < 0.5 {
        for k in &keys {
            hits += matches!(rfc.lookup(std::hint::black_box(k)), RfcAnswer::Hit(_)) as u64;
        }
        n += keys.len() as u64;
    }
    let dt = t0.elapsed().as_secs_f64();
    println!(
        "single: {:.1} Mpps, {:.2} ns/lookup ({hits} hits)",
        n as f64 / dt / 1e6,
        dt * 1e9 / n as f64
    );
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rfc_timing: {e}");
            ExitCode::FAILURE
        }
    }
}
