//! Test-local WUSTL ClassBench loader shared by the classifier tests (the official one lives in
//! offlow-bench). Rule format: `@sip/len dip/len sp_lo : sp_hi dp_lo : dp_hi
//! proto/mask`; priority = N - line index, id = line index + 1 (the trace's
//! 1-based first-match id). Trace: `sip dip sp dp proto rule_id`, with 0
//! meaning "no rule matches".
#![allow(dead_code)]

use std::io::Read;
use std::path::{Path, PathBuf};

use offlow_classifier::{Field, FlowKey, Match, PortRange, Rule, RuleId};
use offlow_flow::key::present;

/// The WUSTL data directory, if present.
pub(crate) fn wustl_dir() -> Option<PathBuf> {
    // `$OFFLOW_DATA_DIR`, else `shared/data` beside the checkout or a parent
    // (CI's layout), else the development machine's `/work/shared/data`.
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let found = std::env::var_os("OFFLOW_DATA_DIR")
        .map(PathBuf::from)
        .into_iter()
        .chain(here.ancestors().map(|a| a.join("shared/data")))
        .chain([PathBuf::from("/work/shared/data")])
        .map(|d| d.join("classbench/wustl_pclasseval"))
        .find(|p| p.is_dir());
    // Under CI the data is always beside the checkout: absence is a failure,
    // not a silent skip.
    assert!(
        found.is_some() || std::env::var_os("CI").is_none(),
        "shared WUSTL data absent under CI"
    );
    found
}

fn read_text(path: &Path) -> String {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if path.extension().is_some_and(|e| e == "gz") {
        let mut s = String::new();
        flate2::read::GzDecoder::new(&bytes[..])
            .read_to_string(&mut s)
            .expect("gzip");
        s
    } else {
        String::from_utf8(bytes).expect("utf8")
    }
}

fn prefix(s: &str) -> (u32, u32) {
    let (a, l) = s.split_once('/').expect("addr/len");
    let mut v = 0u32;
    for o in a.split('.') {
        v = (v << 8) | o.parse::<u32>().expect("octet");
    }
    (v, l.parse().expect("len"))
}

fn hex(s: &str) -> u32 {
    u32::from_str_radix(s.trim_start_matches("0x"), 16).expect("hex")
}

/// Parse a WUSTL rule file.
pub(crate) fn load_rules(path: &Path) -> Vec<Rule> {
    let text = read_text(path);
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with('@')).collect();
    let n = lines.len() as u32;
    lines
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let t: Vec<&str> = l[1..].split_whitespace().collect();
            let (sa, sl) = prefix(t[0]);
            let (da, dl) = prefix(t[1]);
            let sp = PortRange {
                lo: t[2].parse().expect("port"),
                hi: t[4].parse().expect("port"),
            };
            let dp = PortRange {
                lo: t[5].parse().expect("port"),
                hi: t[7].parse().expect("port"),
            };
            let (pv, pm) = t[8].split_once('/').expect("proto/mask");
            let mut m = Match::ANY;
            m.set_exact(Field::EthType, 0x0800);
            m.set_prefix(Field::Ipv4Src, sa as u128, sl);
            m.set_prefix(Field::Ipv4Dst, da as u128, dl);
            m.set_masked(Field::IpProto, hex(pv) as u128, hex(pm) as u128);
            Rule::new(i as u32 + 1, n - i as u32, m).with_ports(sp, dp)
        })
        .collect()
}

/// A 5-tuple key as the loaders build it.
pub(crate) fn key5(sip: u32, dip: u32, sp: u16, dp: u16, proto: u8) -> FlowKey {
    let mut k = FlowKey::ZERO;
    k.set(Field::EthType, 0x0800);
    k.set(Field::Ipv4Src, sip as u128);
    k.set(Field::Ipv4Dst, dip as u128);
    k.set(Field::IpProto, proto as u128);
    k.set(Field::TcpSrc, sp as u128);
    k.set(Field::TcpDst, dp as u128);
    k.add_presence(present::L3 | present::L4);
    k
}

/// Parse a trace (plain or .gz): keys and expected first-match ids.
pub(crate) fn load_trace(path: &Path) -> Vec<(FlowKey, Option<RuleId>)> {
    read_text(path)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let t: Vec<u64> = l
                .split_whitespace()
                .take(6)
                .map(|x| x.parse().expect("number"))
                .collect();
            let k = key5(
                t[0] as u32,
                t[1] as u32,
                t[2] as u16,
                t[3] as u16,
                t[4] as u8,
            );
            (k, (t[5] != 0).then_some(t[5] as u32))
        })
        .collect()
}

/// Every (rule file, trace file) pair in the WUSTL directory.
pub(crate) fn wustl_sets(dir: &Path) -> Vec<(String, PathBuf, PathBuf)> {
    let mut out = Vec::new();
    for base in ["acl1", "fw1", "ipc1"] {
        for suffix in ["", "_100", "_1K", "_5K", "_10K"] {
            let name = format!("{base}{suffix}");
            let rules = dir.join(&name);
            let plain = dir.join(format!("{name}_trace"));
            let gz = dir.join(format!("{name}_trace.gz"));
            let trace = if plain.exists() { plain } else { gz };
            if rules.exists() && trace.exists() {
                out.push((name, rules, trace));
            }
        }
    }
    out
}
