//! Runner for the DPDK ACL anchor, `dpdk-test-acl`, on exactly our inputs.
//!
//! What: writes a rule set in the 5-field ClassBench format (the 7-field
//! dialect's flags column dropped) and the headers as `sip dip sp dp proto`
//! decimal lines, runs
//! `dpdk-test-acl --no-huge --no-pci -m 1024 -l 0 -- --rulesf=R --tracef=T
//! --iter=N --alg=A --rulenum=.. --tracenum=.. --verbose=0` for each
//! algorithm the CPU supports, and parses its `cycles/pkt` and `pkt/sec`.
//!
//! Facts checked against DPDK 22.11 `app/test-acl/main.c` and the installed
//! binary (see the project report):
//! - Priority: the n-th rule line (1-based) gets `priority =
//!   RTE_ACL_MAX_PRIORITY - n` and `userdata = n`, so the FIRST line has the
//!   HIGHEST priority, as in our loader. With `--verbose=2` it prints
//!   `result: userdata - 1`, i.e. our 0-based id, and 4294967295 for no match.
//! - The default `--verbose` level (3) prints one line per packet INSIDE the
//!   timed loop, which caps it near 5 Mpps; timed runs here use
//!   `--verbose=0`, and a separate `--iter=1 --verbose=2` run is only used to
//!   read its answers (`classify_answers`).
//! - `--rulenum` and `--tracenum` default to 65,536; longer traces are
//!   silently truncated, so both are always passed.
//! - avx512x16 needs the EAL option `--force-max-simd-bitwidth=512` to be
//!   sure it is not refused; avx512x32 crashed on this machine and is never
//!   run.
//!
//! Invariants: the printed rule count (`num_rules=`) must equal ours, and
//! the packet count must equal `iter x headers`, or the run is an error.
//!
//! Thread-safety: plain functions; each run is a child process.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use offlow_classifier::RuleId;

use crate::classbench::{CbRule, Header};

/// Default install path of the tool (Debian `dpdk-dev`).
pub const DEFAULT_BIN: &str = "/usr/bin/dpdk-test-acl";

/// One timed run of one algorithm.
#[derive(Debug, Clone, PartialEq)]
pub struct AclRun {
    /// Algorithm name as passed to `--alg`.
    pub alg: String,
    /// Packets classified per second, in millions.
    pub mpps: f64,
    /// Cycles per packet as printed.
    pub cycles_per_pkt: f64,
    /// Rules the tool reports having loaded.
    pub rules_loaded: usize,
    /// Packets classified in the timed loop.
    pub packets: u64,
}

/// The algorithms worth running on this CPU, best-effort from
/// `/proc/cpuinfo`: scalar and sse always (x86-64 baseline includes SSE2; the
/// DPDK SSE path needs SSE4.1, present on every CPU DPDK supports here),
/// avx2 if flagged, avx512x16 if avx512f/bw/vl are all flagged.
pub fn available_algs() -> Vec<&'static str> {
    let flags = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let flags: Vec<&str> = flags
        .lines()
        .find(|l| l.starts_with("flags"))
        .map(|l| l.split_whitespace().collect())
        .unwrap_or_default();
    let has = |f: &str| flags.contains(&f);
    let mut algs = vec!["scalar"];
    if has("sse4_1") {
        algs.push("sse");
    }
    if has("avx2") {
        algs.push("avx2");
    }
    if has("avx512f") && has("avx512bw") && has("avx512vl") {
        algs.push("avx512x16");
    }
    algs
}

/// Write `rules` in dpdk-test-acl's 5-field format.
pub fn write_rules(path: &Path, rules: &[CbRule]) -> std::io::Result<()> {
    let mut s = String::with_capacity(rules.len() * 64);
    for r in rules {
        s.push_str(&r.to_5field());
        s.push('\n');
    }
    std::fs::write(path, s)
}

/// Write `headers` as `sip dip sp dp proto` decimal lines.
pub fn write_trace(path: &Path, headers: &[Header]) -> std::io::Result<()> {
    let mut s = String::with_capacity(headers.len() * 40);
    for h in headers {
        // Writing to a String cannot fail.
        let _ = writeln!(s, "{}", h.to_trace_line());
    }
    std::fs::write(path, s)
}

/// Files prepared for the tool, removed on drop.
#[derive(Debug)]
pub struct AclInputs {
    dir: PathBuf,
    rules: PathBuf,
    trace: PathBuf,
    n_rules: usize,
    n_headers: usize,
}

impl AclInputs {
    /// Write the rule and trace files into a fresh temporary directory.
    pub fn write(rules: &[CbRule], headers: &[Header]) -> anyhow::Result<AclInputs> {
        let dir = std::env::temp_dir().join(format!(
            "offlow-acl-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        ));
        std::fs::create_dir_all(&dir)?;
        let inputs = AclInputs {
            rules: dir.join("rules"),
            trace: dir.join("trace"),
            dir,
            n_rules: rules.len(),
            n_headers: headers.len(),
        };
        write_rules(&inputs.rules, rules)?;
        write_trace(&inputs.trace, headers)?;
        Ok(inputs)
    }

    fn command(&self, bin: &Path, alg: &str, iters: u64, verbose: u32) -> Command {
        let mut c = Command::new(bin);
        c.args(["--no-huge", "--no-pci", "-m", "1024", "-l", "0"]);
        if alg.starts_with("avx512") {
            c.arg("--force-max-simd-bitwidth=512");
        }
        c.arg("--");
        c.arg(format!("--rulesf={}", self.rules.display()));
        c.arg(format!("--tracef={}", self.trace.display()));
        c.arg(format!("--rulenum={}", self.n_rules.max(1)));
        c.arg(format!("--tracenum={}", self.n_headers.max(1)));
        c.arg(format!("--iter={iters}"));
        c.arg(format!("--alg={alg}"));
        c.arg(format!("--verbose={verbose}"));
        c
    }

    fn run(&self, bin: &Path, alg: &str, iters: u64, verbose: u32) -> anyhow::Result<String> {
        let mut cmd = self.command(bin, alg, iters, verbose);
        let out = cmd
            .output()
            .map_err(|e| anyhow::anyhow!("cannot run {}: {e}", bin.display()))?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() {
            anyhow::bail!(
                "{} --alg={alg} failed ({}): {}",
                bin.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .chain(stdout.lines())
                    .rfind(|l| !l.starts_with("ipv4_5tuple"))
                    .unwrap_or("")
            );
        }
        Ok(stdout)
    }

    /// One timed run of `alg` over the whole trace `iters` times.
    pub fn timed_run(&self, bin: &Path, alg: &str, iters: u64) -> anyhow::Result<AclRun> {
        let stdout = self.run(bin, alg, iters, 0)?;
        let run = parse_timed_output(alg, &stdout)?;
        if run.rules_loaded != self.n_rules {
            anyhow::bail!(
                "dpdk-test-acl loaded {} rules, expected {}",
                run.rules_loaded,
                self.n_rules
            );
        }
        let want = iters.saturating_mul(self.n_headers as u64);
        if run.packets != want {
            anyhow::bail!(
                "dpdk-test-acl classified {} packets, expected {want}",
                run.packets
            );
        }
        Ok(run)
    }

    /// The tool's answer for every header (0-based rule id, `None` for no
    /// match), from one untimed `--verbose=2` pass with `alg`.
    pub fn classify_answers(&self, bin: &Path, alg: &str) -> anyhow::Result<Vec<Option<RuleId>>> {
        let stdout = self.run(bin, alg, 1, 2)?;
        let answers = parse_answers(&stdout)?;
        if answers.len() != self.n_headers {
            anyhow::bail!(
                "dpdk-test-acl answered {} headers, expected {}",
                answers.len(),
                self.n_headers
            );
        }
        Ok(answers)
    }
}

impl Drop for AclInputs {
    fn drop(&mut self) {
        // Best effort: a leftover temp dir is harmless.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Parse a `--verbose=0` run: the `num_rules=` line of the context dump and
/// the final `... N pkts, ... X cycles/pkt, Y pkt/sec` line.
pub fn parse_timed_output(alg: &str, stdout: &str) -> anyhow::Result<AclRun> {
    let rules_loaded = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("num_rules="))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| anyhow::anyhow!("dpdk-test-acl: no `num_rules=` line in its output"))?;
    let line = stdout
        .lines()
        .find(|l| l.contains("pkt/sec"))
        .ok_or_else(|| anyhow::anyhow!("dpdk-test-acl: no `pkt/sec` line in its output"))?;
    // "... 10 iterations, 81400 pkts, 1 categories, 27149512 cycles (0.01 sec),
    //  333.53 cycles/pkt, 7795351.90 pkt/sec"
    let before = |unit: &str| -> Option<f64> {
        let toks: Vec<&str> = line.split([' ', ',']).filter(|t| !t.is_empty()).collect();
        let i = toks.iter().position(|t| *t == unit)?;
        toks.get(i.checked_sub(1)?)?.parse().ok()
    };
    let pps = before("pkt/sec");
    let cpp = before("cycles/pkt");
    let pkts = before("pkts");
    match (pps, cpp, pkts) {
        (Some(pps), Some(cpp), Some(pkts)) => Ok(AclRun {
            alg: alg.to_string(),
            mpps: pps / 1e6,
            cycles_per_pkt: cpp,
            rules_loaded,
            // A count printed as an integer; f64 holds it exactly below 2^53.
            packets: pkts as u64,
        }),
        _ => anyhow::bail!("dpdk-test-acl: cannot parse `{line}`"),
    }
}

/// Parse the `ipv4_5tuple: I, category: 0, result: R` lines of a
/// `--verbose=2` run into per-header answers (R = 2^32-1 means no match).
pub fn parse_answers(stdout: &str) -> anyhow::Result<Vec<Option<RuleId>>> {
    let mut out = Vec::new();
    for l in stdout.lines().filter(|l| l.starts_with("ipv4_5tuple:")) {
        let r: u32 = l
            .rsplit(' ')
            .next()
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| anyhow::anyhow!("dpdk-test-acl: cannot parse `{l}`"))?;
        out.push(if r == u32::MAX { None } else { Some(r) });
    }
    Ok(out)
}

/// Time every available algorithm on `inputs` (`iters` passes over the
/// trace, or calibrated to about one second each when `None`), printing
/// each result to stderr.
pub fn timed_runs(
    inputs: &AclInputs,
    bin: &Path,
    iters: Option<u64>,
    n_headers: usize,
) -> anyhow::Result<Vec<AclRun>> {
    let mut runs = Vec::new();
    let n = n_headers.max(1) as u64;
    for alg in available_algs() {
        let run = match iters {
            Some(it) => inputs.timed_run(bin, alg, it.max(1))?,
            None => {
                // Calibrate on ~2M packets, then aim for about one second.
                let it = (2_000_000 / n).max(1);
                let first = inputs.timed_run(bin, alg, it)?;
                let secs = first.packets as f64 / (first.mpps * 1e6).max(1.0);
                if secs >= 0.5 {
                    first
                } else {
                    let want = (first.mpps * 1e6 / n as f64).ceil() as u64;
                    inputs.timed_run(bin, alg, want.max(it))?
                }
            }
        };
        eprintln!(
            "dpdk-test-acl --alg={:<10} {:>8.2} Mpps  {:>7.1} cycles/pkt",
            run.alg, run.mpps, run.cycles_per_pkt
        );
        runs.push(run);
    }
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_real_output_lines() {
        let out = "rte_acl_build(3) finished with 0\n  num_rules=752\n  num_tries=1\n\
            search_ip5tuples  @lcore 0: 10 iterations, 81400 pkts, 1 categories, \
            27149512 cycles (0.01 sec), 333.53 cycles/pkt, 7795351.90 pkt/sec\n";
        let r = parse_timed_output("sse", out).unwrap();
        assert_eq!(r.rules_loaded, 752);
        assert_eq!(r.packets, 81400);
        assert!((r.mpps - 7.7953519).abs() < 1e-6);
        assert!((r.cycles_per_pkt - 333.53).abs() < 1e-9);
        assert!(parse_timed_output("sse", "num_rules=1\n").is_err());
        let a = parse_answers(
            "ipv4_5tuple: 1, category: 0, result: 565\nipv4_5tuple: 2, category: 0, result: 4294967295\n",
        )
        .unwrap();
        assert_eq!(a, vec![Some(565), None]);
    }
}
