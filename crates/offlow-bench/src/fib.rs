//! `offlow bench fib`: FIB lookup rate vs dpdk-test-fib.
//!
//! What: loads a real BGP table (ipasn `.dat` or CAIDA `pfx2as`, gzip or
//! plain), maps each origin AS to a dense next-hop id, builds a
//! [`Dir24`], generates N seeded random addresses and times
//! [`Dir24::lookup_batch`] over them in bursts of 64 on one core. With
//! `--vs-dpdk` the same routes and the same 32-bit addresses are handed to
//! `dpdk-test-fib` (DIR-24-8, see [`crate::dpdk_fib`]) in the same run, and
//! both figures are reported in TSC cycles per lookup and Mlookups/s.
//!
//! Loader policy: a malformed line is skipped and counted; the first few are
//! printed to stderr as `FILE:LINE: reason`. A table with no valid line is an
//! error. Host bits set below the prefix length are cleared (as rte_fib
//! does). A prefix listed twice keeps its last next hop (as rte_fib does:
//! adding an existing prefix replaces its next hop). For `pfx2as` multi-origin
//! entries (`a_b`, `a,b`) the first AS is taken.
//!
//! Invariants: nothing here panics on file contents.
//!
//! Thread-safety: single-threaded.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::time::Instant;

use offlow_classifier::dir24::{Dir24, NO_ROUTE};
use offlow_classifier::BinaryTrie;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::dpdk_fib;

/// Arguments of `offlow bench fib`.
#[derive(Debug, Clone, clap::Args)]
pub struct FibArgs {
    /// BGP table (ipasn `.dat` or CAIDA `pfx2as`; .gz ok).
    #[arg(long)]
    pub table: std::path::PathBuf,
    /// Also run dpdk-test-fib on the same routes and addresses.
    #[arg(long)]
    pub vs_dpdk: bool,
    /// Check every lookup against the binary-trie oracle; exit non-zero on
    /// any mismatch.
    #[arg(long)]
    pub verify: bool,
    /// Print one JSON object as the last line of stdout.
    #[arg(long)]
    pub json: bool,
    /// Number of addresses to look up (rounded up to a multiple of 64).
    #[arg(long, default_value_t = 20_000_000)]
    pub lookups: usize,
    /// Seed of the address generator.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Address mix: `random` (uniform over 2^32) or `routes` (walk the routes
    /// in file order, random host bits: dpdk-test-fib's own generator).
    #[arg(long, default_value = "random")]
    pub addrs: AddrMix,
    /// Timed passes over the address list (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub passes: usize,
    /// dpdk-test-fib binary.
    #[arg(long, default_value = dpdk_fib::DEFAULT_BIN)]
    pub dpdk_bin: PathBuf,
    /// tbl8 groups for dpdk-test-fib (`-g`).
    #[arg(long, default_value_t = 200_000)]
    pub dpdk_tbl8: u32,
}

/// How lookup addresses are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AddrMix {
    /// Uniform over the whole IPv4 space.
    Random,
    /// Route i mod n (file order) with random host bits.
    Routes,
}

/// A loaded BGP table.
#[derive(Debug, Default)]
pub struct Table {
    /// `(prefix, len, next hop)`, next hop = dense id of the origin AS.
    pub routes: Vec<(u32, u8, u32)>,
    /// Dense next-hop id → origin AS.
    pub asns: Vec<u32>,
    /// Malformed lines skipped.
    pub skipped: usize,
    /// The first few skip reasons, `FILE:LINE: reason`.
    pub skip_reasons: Vec<String>,
}

const MAX_REASONS: usize = 10;

/// Parse one non-comment line: `prefix/len<TAB>AS` (ipasn) or
/// `addr<TAB>len<TAB>asn` (pfx2as).
fn parse_line(line: &str) -> Result<(u32, u8, u32), String> {
    let mut f = line.split_whitespace();
    let first = f.next().ok_or("empty line")?;
    let (addr, len, asn) = match first.split_once('/') {
        Some((a, l)) => (a, l, f.next().ok_or("missing origin AS")?),
        None => (
            first,
            f.next().ok_or("missing prefix length")?,
            f.next().ok_or("missing origin AS")?,
        ),
    };
    if f.next().is_some() {
        return Err("trailing fields".into());
    }
    let addr: std::net::Ipv4Addr = addr
        .parse()
        .map_err(|_| format!("bad IPv4 address {addr:?}"))?;
    let len: u8 = len
        .parse()
        .ok()
        .filter(|&l| l <= 32)
        .ok_or_else(|| format!("bad prefix length {len:?}"))?;
    let first_as = asn.split(['_', ',']).next().unwrap_or(asn);
    let asn: u32 = first_as
        .parse()
        .map_err(|_| format!("bad origin AS {asn:?}"))?;
    let addr = u32::from(addr) & offlow_classifier::lpm::prefix_mask(len);
    Ok((addr, len, asn))
}

/// Load a table from a reader (gzip detected by its magic bytes).
pub fn load_reader(name: &str, r: impl Read) -> anyhow::Result<Table> {
    let mut r = BufReader::new(r);
    let gz = r.fill_buf()?.starts_with(&[0x1f, 0x8b]);
    let lines: Box<dyn BufRead> = if gz {
        Box::new(BufReader::new(flate2::read::MultiGzDecoder::new(r)))
    } else {
        Box::new(r)
    };
    let mut t = Table::default();
    let mut dense: HashMap<u32, u32> = HashMap::new();
    for (i, line) in lines.lines().enumerate() {
        let line = line.map_err(|e| anyhow::anyhow!("{name}:{}: {e}", i + 1))?;
        let s = line.trim();
        if s.is_empty() || s.starts_with(';') || s.starts_with('#') {
            continue;
        }
        match parse_line(s) {
            Ok((addr, len, asn)) => {
                let next = t.asns.len() as u32; // < routes ≤ 2^31: fits.
                let nh = *dense.entry(asn).or_insert(next);
                if nh == next {
                    t.asns.push(asn);
                }
                t.routes.push((addr, len, nh));
            }
            Err(reason) => {
                t.skipped += 1;
                if t.skip_reasons.len() < MAX_REASONS {
                    t.skip_reasons.push(format!("{name}:{}: {reason}", i + 1));
                }
            }
        }
    }
    anyhow::ensure!(!t.routes.is_empty(), "{name}: no valid route");
    Ok(t)
}

/// Load a table file.
pub fn load_table(path: &Path) -> anyhow::Result<Table> {
    let f = std::fs::File::open(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    load_reader(&path.display().to_string(), f)
}

/// `n` addresses drawn with `mix` from a seeded generator.
pub fn gen_addrs(table: &Table, n: usize, seed: u64, mix: AddrMix) -> Vec<u32> {
    let mut rng = SmallRng::seed_from_u64(seed);
    match mix {
        AddrMix::Random => (0..n).map(|_| rng.gen()).collect(),
        AddrMix::Routes => (0..n)
            .map(|i| {
                let (p, len, _) = table.routes[i % table.routes.len()];
                p | (rng.gen::<u32>() & !offlow_classifier::lpm::prefix_mask(len))
            })
            .collect(),
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) fn tsc() -> u64 {
    // SAFETY: rdtsc has no preconditions on x86_64.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
pub(crate) fn tsc() -> u64 {
    0
}

/// One timed pass: (TSC cycles, seconds, checksum).
fn timed_pass(fib: &Dir24, addrs: &[u32]) -> (u64, f64, u64) {
    let mut buf = [0u32; dpdk_fib::BURST];
    let mut sum = 0u64;
    let t0 = Instant::now();
    let c0 = tsc();
    for chunk in addrs.chunks(dpdk_fib::BURST) {
        fib.lookup_batch(chunk, &mut buf);
        // Fold the answers so the lookups cannot be optimised away.
        sum = sum.wrapping_add(u64::from(buf[0] ^ buf[dpdk_fib::BURST - 1]));
    }
    let c1 = tsc();
    let secs = t0.elapsed().as_secs_f64();
    (c1.wrapping_sub(c0), secs, std::hint::black_box(sum))
}

/// Fence, then read the TSC: DPDK's `rte_rdtsc_precise()` (mfence; rdtsc).
#[cfg(target_arch = "x86_64")]
fn tsc_precise() -> u64 {
    // SAFETY: mfence and rdtsc have no preconditions on x86_64 (SSE2 is
    // part of the x86_64 baseline).
    unsafe {
        core::arch::x86_64::_mm_mfence();
        core::arch::x86_64::_rdtsc()
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn tsc_precise() -> u64 {
    0
}

/// One pass timed exactly as dpdk-test-fib times itself: fenced TSC reads
/// around every burst of 64, summed. The fences stop misses of one burst
/// from overlapping the next, so this is slower than [`timed_pass`]; it is
/// the like-for-like figure for the ratio. Returns TSC cycles.
fn fenced_pass(fib: &Dir24, addrs: &[u32]) -> u64 {
    let mut buf = [0u32; dpdk_fib::BURST];
    let mut acc = 0u64;
    let mut sum = 0u64;
    for chunk in addrs.chunks(dpdk_fib::BURST) {
        let t0 = tsc_precise();
        fib.lookup_batch(chunk, &mut buf);
        acc += tsc_precise().wrapping_sub(t0);
        sum = sum.wrapping_add(u64::from(buf[0] ^ buf[dpdk_fib::BURST - 1]));
    }
    std::hint::black_box(sum);
    acc
}

/// `AnonHugePages` of this process in KiB (Linux), to show whether the
/// `MADV_HUGEPAGE` advice was honoured.
fn anon_huge_kb() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/smaps_rollup").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("AnonHugePages:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Run the experiment.
pub fn main(args: &FibArgs) -> anyhow::Result<()> {
    let t_load = Instant::now();
    let table = load_table(&args.table)?;
    let load_s = t_load.elapsed().as_secs_f64();
    for r in &table.skip_reasons {
        eprintln!("{r}");
    }
    if table.skipped > 0 {
        eprintln!("skipped {} malformed line(s)", table.skipped);
    }
    let n = args.lookups.max(1).div_ceil(dpdk_fib::BURST) * dpdk_fib::BURST;

    let t_build = Instant::now();
    let mut fib = Dir24::new();
    for &(a, l, nh) in &table.routes {
        fib.insert(a, l, nh)?;
    }
    let build_s = t_build.elapsed().as_secs_f64();
    let addrs = gen_addrs(&table, n, args.seed, args.addrs);

    // Warm-up pass, then timed passes; report the median.
    timed_pass(&fib, &addrs);
    let mut passes: Vec<(u64, f64)> = (0..args.passes.max(1))
        .map(|_| {
            let (c, s, _) = timed_pass(&fib, &addrs);
            (c, s)
        })
        .collect();
    passes.sort_by(|a, b| a.1.total_cmp(&b.1));
    let (cycles, secs) = passes[passes.len() / 2];
    let tsc_hz = cycles as f64 / secs;
    let cpl = cycles as f64 / n as f64;
    let mpps = n as f64 / secs / 1e6;
    let mut fenced: Vec<u64> = (0..args.passes.max(1))
        .map(|_| fenced_pass(&fib, &addrs))
        .collect();
    fenced.sort_unstable();
    let cpl_fenced = fenced[fenced.len() / 2] as f64 / n as f64;
    let mpps_fenced = tsc_hz / cpl_fenced / 1e6;

    let mut mismatches = None;
    if args.verify {
        let mut trie = BinaryTrie::new();
        for &(a, l, nh) in &table.routes {
            trie.insert(a, l, nh)?;
        }
        let mut out = vec![0u32; n];
        fib.lookup_batch(&addrs, &mut out);
        let mut bad = 0usize;
        for (&a, &o) in addrs.iter().zip(&out) {
            let want = trie.lookup(a).unwrap_or(NO_ROUTE);
            if o != want {
                if bad < 10 {
                    eprintln!("mismatch: {a:#010x}: dir24 {o}, trie {want}");
                }
                bad += 1;
            }
        }
        mismatches = Some(bad);
    }

    let dpdk = if args.vs_dpdk {
        let dir = std::env::temp_dir().join(format!("offlow-bench-fib-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let routes_p = dir.join("routes.txt");
        let addrs_p = dir.join("addrs.txt");
        let res = dpdk_fib::write_routes(&routes_p, &table.routes)
            .and_then(|()| dpdk_fib::write_addrs(&addrs_p, &addrs))
            .map_err(anyhow::Error::from)
            .and_then(|()| {
                dpdk_fib::run(
                    &args.dpdk_bin,
                    &routes_p,
                    &addrs_p,
                    table.routes.len(),
                    n,
                    args.dpdk_tbl8,
                )
            });
        let _ = std::fs::remove_dir_all(&dir);
        Some(res?)
    } else {
        None
    };
    let anchor_mpps = dpdk.as_ref().map(|d| tsc_hz / d.cycles_per_lookup / 1e6);
    // Like-for-like: both sides timed with fenced TSC reads per burst.
    let ratio = anchor_mpps.map(|a| mpps_fenced / a);
    let ratio_unfenced = anchor_mpps.map(|a| mpps / a);

    let mut text = String::new();
    let _ = writeln!(
        text,
        "table        {} ({} routes, {} origin ASes, {} skipped; load {:.2} s)",
        args.table.display(),
        table.routes.len(),
        table.asns.len(),
        table.skipped,
        load_s
    );
    let _ = writeln!(
        text,
        "build        {:.3} s ({:.0} ns/route), {} tbl8 groups, huge pages advised: {} \
         (AnonHugePages {} KiB)",
        build_s,
        build_s * 1e9 / table.routes.len() as f64,
        fib.groups_used(),
        fib.huge_pages_advised(),
        anon_huge_kb().map_or_else(|| "?".to_string(), |k| k.to_string())
    );
    let _ = writeln!(
        text,
        "lookups      {n} ({:?} addresses, seed {}), bursts of {}, median of {} passes",
        args.addrs,
        args.seed,
        dpdk_fib::BURST,
        passes.len()
    );
    let _ = writeln!(text, "TSC          {:.3} GHz (estimated)", tsc_hz / 1e9);
    let _ = writeln!(
        text,
        "offlow       {mpps:8.2} Mlookups/s {:6.2} ns/lookup {cpl:6.2} cycles/lookup",
        1e3 / mpps
    );
    let _ = writeln!(
        text,
        "offlow*      {mpps_fenced:8.2} Mlookups/s {:6.2} ns/lookup {cpl_fenced:6.2} cycles/lookup",
        1e3 / mpps_fenced
    );
    if let (Some(d), Some(a), Some(r), Some(ru)) = (&dpdk, anchor_mpps, ratio, ratio_unfenced) {
        let _ = writeln!(
            text,
            "dpdk-test-fib*{a:8.2} Mlookups/s {:6.2} ns/lookup {:6.2} cycles/lookup",
            1e3 / a,
            d.cycles_per_lookup
        );
        let _ = writeln!(
            text,
            "ratio        {r:.3} (offlow* rate / dpdk* rate; unfenced offlow / dpdk: {ru:.3})"
        );
    }
    let _ = writeln!(
        text,
        "             * timed like dpdk-test-fib: mfence+rdtsc around every burst of 64"
    );
    if let Some(bad) = mismatches {
        let _ = writeln!(
            text,
            "verify       {n} lookups, {bad} mismatches vs binary trie"
        );
    }
    print!("{text}");
    if args.json {
        let j = serde_json::json!({
            "experiment": "fib",
            "table": args.table.display().to_string(),
            "rules": table.routes.len(),
            "skipped": table.skipped,
            "lookups": n,
            "addrs": format!("{:?}", args.addrs).to_lowercase(),
            "seed": args.seed,
            "cores": 1,
            "build_s": build_s,
            "tbl8_groups": fib.groups_used(),
            "huge_pages_advised": fib.huge_pages_advised(),
            "anon_huge_kb": anon_huge_kb(),
            "tsc_ghz": tsc_hz / 1e9,
            "offlow_mpps": mpps,
            "offlow_ns_per_lookup": 1e3 / mpps,
            "offlow_cycles_per_lookup": cpl,
            "offlow_fenced_mpps": mpps_fenced,
            "offlow_fenced_cycles_per_lookup": cpl_fenced,
            "ratio_unfenced": ratio_unfenced,
            "anchor": dpdk.as_ref().map(|_| "dpdk-test-fib"),
            "anchor_cycles_per_lookup": dpdk.as_ref().map(|d| d.cycles_per_lookup),
            "anchor_mpps": anchor_mpps,
            "ratio": ratio,
            "mismatches": mismatches,
        });
        println!("{j}");
    }
    if let Some(bad) = mismatches {
        anyhow::ensure!(
            bad == 0,
            "verify: {bad} lookups differ from the binary trie"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_both_formats_and_reports_bad_lines() {
        let src = "; comment\n1.0.0.0/24\t15169\n1.0.4.0\t22\t38803\n\
                   1.0.5.0\t24\t38803_1234\n1.0.6.7/24\t7,8\nbogus line\n1.2.3.0/33\t1\n";
        let t = load_reader("t.dat", src.as_bytes()).unwrap();
        assert_eq!(
            t.routes,
            vec![
                (0x0100_0000, 24, 0),
                (0x0100_0400, 22, 1),
                (0x0100_0500, 24, 1),
                (0x0100_0600, 24, 2),
            ]
        );
        assert_eq!(t.asns, vec![15169, 38803, 7]);
        assert_eq!(t.skipped, 2);
        assert_eq!(t.skip_reasons[0], "t.dat:6: missing origin AS");
        assert_eq!(t.skip_reasons[1], "t.dat:7: bad prefix length \"33\"");
    }

    #[test]
    fn reads_gzip_and_refuses_empty_tables() {
        use std::io::Write;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(b"10.0.0.0/8\t1\n").unwrap();
        let bytes = gz.finish().unwrap();
        let t = load_reader("t.gz", &bytes[..]).unwrap();
        assert_eq!(t.routes, vec![(0x0a00_0000, 8, 0)]);
        assert!(load_reader("e", &b"; only a comment\n"[..]).is_err());
    }

    #[test]
    fn route_addresses_fall_inside_their_routes() {
        let t = load_reader("t", &b"10.0.0.0/8\t1\n192.168.1.0/24\t2\n"[..]).unwrap();
        let a = gen_addrs(&t, 6, 7, AddrMix::Routes);
        for (i, x) in a.iter().enumerate() {
            let (p, l, _) = t.routes[i % 2];
            assert_eq!(x & offlow_classifier::lpm::prefix_mask(l), p);
        }
        assert_eq!(
            gen_addrs(&t, 6, 7, AddrMix::Random),
            gen_addrs(&t, 6, 7, AddrMix::Random)
        );
    }
}
