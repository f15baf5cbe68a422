//! Finds the index of `mi_option_purge_decommits` in the `mi_option_t`
//! enum of the mimalloc header that `libmimalloc-sys` builds, so that
//! main.rs can set that option: the `-sys` crate has no constant for it.
//! Reading the index from the very header compiled into the binary means a
//! mimalloc upgrade that moves the enum cannot silently set the wrong
//! option; one that drops the option fails the build here, by name.

use std::{env, fs, path::Path};

const ENUM_OPENING: &str = "typedef enum mi_option_e {";
const OPTION: &str = "mi_option_purge_decommits";

fn main() {
    let include_dir = env::var("DEP_MIMALLOC_INCLUDE_DIR")
        .expect("libmimalloc-sys exports DEP_MIMALLOC_INCLUDE_DIR (links = \"mimalloc\")");
    let header = Path::new(&include_dir).join("mimalloc.h");
    println!("cargo:rerun-if-changed={}", header.display());
    let text =
        fs::read_to_string(&header).unwrap_or_else(|e| panic!("reading {}: {e}", header.display()));
    let index = enum_index(&text, OPTION)
        .unwrap_or_else(|| panic!("{} has no {OPTION} in mi_option_t", header.display()));
    let out =
        Path::new(&env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("mimalloc_options.rs");
    fs::write(
        out,
        format!("/// `{OPTION}`'s value, read from {}.\npub const MI_OPTION_PURGE_DECOMMITS: i32 = {index};\n", header.display()),
    )
    .expect("writing OUT_DIR/mimalloc_options.rs");
}

/// The value of `name` in the `mi_option_t` enum: its position among the
/// enumerators, which carry no explicit values until `_mi_option_last`.
fn enum_index(header: &str, name: &str) -> Option<usize> {
    let body = &header[header.find(ENUM_OPENING)? + ENUM_OPENING.len()..];
    let body = &body[..body.find('}')?];
    let mut index = 0;
    for line in body.lines() {
        let code = line.split("//").next().unwrap_or("").trim();
        for enumerator in code.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            if enumerator.contains('=') {
                // Legacy aliases follow `_mi_option_last`; none is ours.
                return None;
            }
            if enumerator == name {
                return Some(index);
            }
            index += 1;
        }
    }
    None
}
