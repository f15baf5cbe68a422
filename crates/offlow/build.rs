//! Finds the indexes of the mimalloc options `src/allocator.rs` sets in the
//! `mi_option_t` enum of the header that `libmimalloc-sys` builds: the
//! `-sys` crate has no constants for them. Reading each index from the very
//! header compiled into the binary means a mimalloc upgrade that moves the
//! enum cannot silently set the wrong option; one that drops an option
//! fails the build here, by name.

use std::{env, fs, path::Path};

const ENUM_OPENING: &str = "typedef enum mi_option_e {";
/// The options, and the constant each becomes in `mimalloc_options.rs`.
const OPTIONS: [(&str, &str); 2] = [
    ("mi_option_purge_decommits", "MI_OPTION_PURGE_DECOMMITS"),
    ("mi_option_allow_thp", "MI_OPTION_ALLOW_THP"),
];

fn main() {
    let include_dir = env::var("DEP_MIMALLOC_INCLUDE_DIR")
        .expect("libmimalloc-sys exports DEP_MIMALLOC_INCLUDE_DIR (links = \"mimalloc\")");
    let header = Path::new(&include_dir).join("mimalloc.h");
    println!("cargo:rerun-if-changed={}", header.display());
    let text =
        fs::read_to_string(&header).unwrap_or_else(|e| panic!("reading {}: {e}", header.display()));
    let mut constants = String::new();
    for (option, constant) in OPTIONS {
        let index = enum_index(&text, option)
            .unwrap_or_else(|| panic!("{} has no {option} in mi_option_t", header.display()));
        constants += &format!(
            "/// `{option}`'s value, read from {}.\npub(crate) const {constant}: i32 = {index};\n",
            header.display()
        );
    }
    let out =
        Path::new(&env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("mimalloc_options.rs");
    fs::write(out, constants).expect("writing OUT_DIR/mimalloc_options.rs");
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
