//! Compiles the XDP program (`bpf/offload.bpf.c`) with clang and generates
//! its libbpf skeleton (`$OUT_DIR/offload.skel.rs`, included by
//! `src/xdp/skel.rs`). Needs clang and the libbpf headers (`libbpf-dev`,
//! scripts/install-deps.sh).

use std::env;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

const SRC: &str = "bpf/offload.bpf.c";

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    // <asm/types.h>, which <linux/bpf.h> includes, lives under the host's
    // multiarch directory on Debian and Ubuntu; clang's BPF target does not
    // search it by itself.
    let arch = match env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("aarch64") => "aarch64-linux-gnu",
        Ok("riscv64") => "riscv64-linux-gnu",
        _ => "x86_64-linux-gnu",
    };
    SkeletonBuilder::new()
        .source(SRC)
        .clang_args([
            format!("-I/usr/include/{arch}"),
            "-Wall".to_string(),
            "-Werror".to_string(),
        ])
        .build_and_generate(out.join("offload.skel.rs"))
        .expect("building the XDP program bpf/offload.bpf.c (needs clang and libbpf-dev)");
    println!("cargo:rerun-if-changed={SRC}");
}
