//! offlow-bench: workloads and experiments.
//!
//! What: loaders for the ClassBench rule sets and traces and the BGP tables in
//! `../shared/data`, header generators, runners for the DPDK anchors
//! (dpdk-test-acl, dpdk-test-fib) on identical inputs, and the `offlow bench`
//! experiments, each printing a table and, with `--json`, one JSON object as
//! the last line of stdout.
//!
//! Invariants: a malformed input line is reported with its file and line
//! number; nothing here panics on input data.
//!
//! Thread-safety: experiments own their threads; loaders are plain functions.
#![warn(missing_docs)]
// Exports are what other crates use; the rest is `pub(crate)`. (Crate
// level until the lint can be a workspace one: see the root Cargo.toml.)
// The classify report's `json!` object has more fields than the default
// limit of 128 lets the macro expand.
#![recursion_limit = "256"]

pub mod classbench;
pub mod classify;
pub mod control;
pub mod cores;
pub mod datapath;
pub mod dpdk;
pub mod dpdk_fib;
pub mod fib;
pub mod forward;
pub mod latency;
pub mod offload;
pub mod report;
pub mod setup;
pub mod synthetic_switch;
pub mod topo;
pub mod traffic;
pub mod update;
pub mod workload;

use std::path::PathBuf;

/// Where the shared data set (`shared/data`: ClassBench, BGP tables, pcaps)
/// is: `$OFFLOW_DATA_DIR`, else a `shared/data` folder beside the checkout
/// or one of its parents (CI clones main with `shared/` beside it), else
/// `/work/shared/data`. `None` when none exists.
pub fn shared_data_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("OFFLOW_DATA_DIR") {
        return Some(PathBuf::from(d)).filter(|p| p.is_dir());
    }
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    here.ancestors()
        .map(|a| a.join("shared/data"))
        .chain([PathBuf::from("/work/shared/data")])
        .find(|p| p.is_dir())
}
