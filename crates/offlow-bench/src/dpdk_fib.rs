//! Runner for the DPDK FIB anchor, `dpdk-test-fib`, on exactly our inputs.
//!
//! What: writes a route list and an address list in the tool's formats, runs
//! `dpdk-test-fib --no-huge --no-pci --file-prefix=P -m 4096 -l 0 -- -f ROUTES
//! -t ADDRS -g TBL8` and parses the `AVG FIB lookup X` line (TSC cycles per
//! lookup, DIR-24-8, 4-byte next hops).
//!
//! Facts checked against DPDK's `app/test-fib/main.c` and the installed
//! 22.11 binary:
//! - `-f`: one route per line, `a.b.c.d/len nexthop`, whitespace separated;
//!   a blank line is a parse error, so none is written.
//! - `-t`: one address per line. It is read with `inet_pton` straight into a
//!   `uint32_t` array (network byte order) but looked up as a host-order
//!   value, so on little-endian x86 DPDK looks up the byte-swapped address.
//!   [`write_addrs`] writes `addr.swap_bytes()` in dotted form so that the
//!   32-bit values DPDK looks up are exactly ours.
//! - The timed loop looks up bursts of 64 and reads `nb_lookup_ips` rounded
//!   UP to a multiple of 64 from its array (past the end otherwise), so the
//!   address count must be a multiple of 64 ([`run`] refuses otherwise).
//! - Each burst is timed with `rte_rdtsc_precise()` (fenced), and the figure
//!   is the sum over bursts divided by the lookup count.
//! - Without `--file-prefix` concurrent DPDK processes share
//!   `/var/run/dpdk/rte`; each run uses its own prefix and removes its
//!   directory afterwards. (`--in-memory` is refused with `--no-huge`.)
//!
//! Thread-safety: plain functions; each run is a child process.

use std::io::{BufWriter, Write};
use std::path::Path;
use std::process::Command;

/// Default install path of the tool (Debian `dpdk-dev`).
pub const DEFAULT_BIN: &str = "/usr/bin/dpdk-test-fib";
/// Burst size of the tool's timed loop.
pub const BURST: usize = 64;

/// What one `dpdk-test-fib` run reported.
#[derive(Debug, Clone)]
pub struct DpdkFibResult {
    /// `Routes total:` as printed.
    pub routes: u64,
    /// `Lookup tuples:` as printed.
    pub lookups: u64,
    /// `AVG FIB lookup`: TSC cycles per lookup.
    pub cycles_per_lookup: f64,
    /// Average cycles per route insert (mean of its `AVG FIB add` lines).
    pub add_cycles: Option<f64>,
}

/// Write routes as `a.b.c.d/len nexthop` lines.
pub fn write_routes(path: &Path, routes: &[(u32, u8, u32)]) -> std::io::Result<()> {
    let mut w = BufWriter::new(std::fs::File::create(path)?);
    for &(addr, len, nh) in routes {
        let [a, b, c, d] = addr.to_be_bytes();
        writeln!(w, "{a}.{b}.{c}.{d}/{len} {nh}")?;
    }
    w.flush()
}

/// Write addresses so that DPDK looks up exactly these 32-bit values (see
/// the module documentation on the `-t` byte order).
pub fn write_addrs(path: &Path, addrs: &[u32]) -> std::io::Result<()> {
    let mut w = BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    for &x in addrs {
        // inet_pton stores a.b.c.d as bytes [a,b,c,d]; read as a little-endian
        // u32 that is the value with `a` lowest, i.e. our value's LE bytes.
        let [a, b, c, d] = x.to_le_bytes();
        writeln!(w, "{a}.{b}.{c}.{d}")?;
    }
    w.flush()
}

/// Parse the tool's standard output.
pub fn parse_output(out: &str) -> Option<DpdkFibResult> {
    let mut routes = None;
    let mut lookups = None;
    let mut cycles = None;
    let (mut add_sum, mut add_n) = (0.0, 0u32);
    for line in out.lines() {
        let line = line.trim();
        if let Some(v) = line.strip_prefix("Routes total:") {
            routes = v.trim().parse().ok();
        } else if let Some(v) = line.strip_prefix("Lookup tuples:") {
            lookups = v.trim().parse().ok();
        } else if let Some(v) = line.strip_prefix("AVG FIB lookup") {
            cycles = v.trim().parse().ok();
        } else if let Some(v) = line.strip_prefix("AVG FIB add") {
            if let Ok(x) = v.trim().parse::<f64>() {
                add_sum += x;
                add_n += 1;
            }
        }
    }
    Some(DpdkFibResult {
        routes: routes?,
        lookups: lookups?,
        cycles_per_lookup: cycles?,
        add_cycles: (add_n > 0).then(|| add_sum / f64::from(add_n)),
    })
}

/// Run the tool on files written by [`write_routes`] / [`write_addrs`].
/// `n_routes` / `n_addrs` are checked against what it prints.
pub fn run(
    bin: &Path,
    routes: &Path,
    addrs: &Path,
    n_routes: usize,
    n_addrs: usize,
    tbl8: u32,
) -> anyhow::Result<DpdkFibResult> {
    anyhow::ensure!(
        n_addrs % BURST == 0 && n_addrs > 0,
        "dpdk-test-fib needs a positive multiple of {BURST} addresses, got {n_addrs}"
    );
    let prefix = format!("offlow-fib-{}", std::process::id());
    let output = Command::new(bin)
        .args(["--no-huge", "--no-pci", "-m", "4096", "-l", "0"])
        .arg(format!("--file-prefix={prefix}"))
        .arg("--")
        .arg("-f")
        .arg(routes)
        .arg("-t")
        .arg(addrs)
        .args(["-g", &tbl8.to_string()])
        .output()
        .map_err(|e| anyhow::anyhow!("running {}: {e}", bin.display()))?;
    // Best effort: the runtime directory DPDK created under our own prefix.
    let _ = std::fs::remove_dir_all(Path::new("/var/run/dpdk").join(&prefix));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    anyhow::ensure!(
        output.status.success(),
        "{} failed ({}): {}",
        bin.display(),
        output.status,
        tail(&format!("{stdout}\n{stderr}"), 8)
    );
    let r = parse_output(&stdout).ok_or_else(|| {
        anyhow::anyhow!(
            "no `AVG FIB lookup` figure in its output: {}",
            tail(&stdout, 8)
        )
    })?;
    anyhow::ensure!(
        r.routes == n_routes as u64 && r.lookups == n_addrs as u64,
        "dpdk-test-fib read {} routes / {} addresses, we wrote {n_routes} / {n_addrs}",
        r.routes,
        r.lookups
    );
    Ok(r)
}

fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_tools_output() {
        let out = "Routes total: 3\nRoutes distribution:\ndepth /1:0\tdepth /2:0\n\
                   Lookup tuples: 128\nAVG FIB add 100\nAVG FIB add 300\n\
                   AVG FIB lookup 6.6\nAVG FIB delete 45\n";
        let r = parse_output(out).unwrap();
        assert_eq!((r.routes, r.lookups), (3, 128));
        assert_eq!(r.cycles_per_lookup, 6.6);
        assert_eq!(r.add_cycles, Some(200.0));
        assert!(parse_output("Routes total: 3\n").is_none());
    }

    #[test]
    fn address_file_is_byte_swapped_for_inet_pton() {
        let dir = std::env::temp_dir().join(format!("offlow-fib-t-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("a.txt");
        write_addrs(&p, &[0x0a01_0203]).unwrap();
        // DPDK stores inet_pton("3.2.1.10") = bytes [3,2,1,10], read as a
        // little-endian u32: 0x0a010203, our value.
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "3.2.1.10\n");
        let r = dir.join("r.txt");
        write_routes(&r, &[(0x0a01_0200, 24, 7)]).unwrap();
        assert_eq!(std::fs::read_to_string(&r).unwrap(), "10.1.2.0/24 7\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
