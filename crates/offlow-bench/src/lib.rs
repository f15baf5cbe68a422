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

pub mod classbench;
pub mod classify;
pub mod dpdk;
pub mod dpdk_fib;
pub mod fib;
pub mod report;
