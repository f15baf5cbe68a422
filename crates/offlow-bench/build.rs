//! Builds the XDP programs of `offlow bench offload` (`bpf/*.bpf.c`: the
//! live-frames generator, the counting sink, the redirect ceiling and the
//! lookup floor; `offlow bench latency`'s pass-through; and `offlow
//! bench setup`'s TC redirect wire) with
//! clang through libbpf-cargo, and generates their Rust skeletons in
//! `OUT_DIR` (included by `src/offload/bpf.rs`).

use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

const PROGRAMS: [&str; 6] = ["gen", "sink", "ceiling", "floor", "pass", "tcwire"];

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    for p in PROGRAMS {
        let src = format!("bpf/{p}.bpf.c");
        println!("cargo:rerun-if-changed={src}");
        SkeletonBuilder::new()
            .source(&src)
            .obj(out.join(format!("{p}.bpf.o")))
            .clang_args(["-I/usr/include/x86_64-linux-gnu", "-Wall", "-Werror"])
            .build_and_generate(out.join(format!("{p}.skel.rs")))
            .unwrap_or_else(|e| panic!("building {src}: {e:#}"));
    }
}
