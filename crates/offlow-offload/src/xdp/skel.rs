//! The generated libbpf skeleton of `bpf/offload.bpf.c` (build.rs).
#![allow(
    missing_docs,
    unreachable_pub,
    clippy::all,
    clippy::undocumented_unsafe_blocks,
    non_camel_case_types,
    non_upper_case_globals,
    dead_code
)]
include!(concat!(env!("OUT_DIR"), "/offload.skel.rs"));
