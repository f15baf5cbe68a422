//! How many key words each rule's TupleMerge check has to test beyond what
//! its tuple's hash lookup already verified (the *residual* words), on the
//! WUSTL ClassBench 10K sets; sizes the inline capacity of a check.
//!
//! Usage: `cargo run --release -p offlow-classifier --example tuple_residuals`
//! (data directory as for the tests: `$OFFLOW_DATA_DIR` or
//! `/work/shared/data`).
#[path = "../tests/common/mod.rs"]
mod common;

use common::{load_rules, wustl_dir};
use offlow_classifier::{Classify, Field, TupleMerge};
use offlow_flow::key::{present, KEY_WORDS};

fn main() {
    println!(
        "check: {} bytes, {} inline residual words",
        TupleMerge::CHECK_BYTES,
        TupleMerge::CHECK_INLINE_WORDS
    );
    let Some(dir) = wustl_dir() else {
        println!("NOTICE: WUSTL data absent");
        return;
    };
    for name in ["acl1_10K", "fw1_10K", "ipc1_10K"] {
        let rules = load_rules(&dir.join(name));
        let mut tm = TupleMerge::new();
        for r in &rules {
            tm.insert(r.clone());
        }
        // hist[n]: rules with n residual words; per_word[w]: rules whose
        // residual touches word w.
        let mut hist = [0usize; KEY_WORDS + 1];
        let mut per_word = [0usize; KEY_WORDS];
        let mut full = [0usize; KEY_WORDS + 1];
        // generic[n]: rules with n residual words left once the ethertype
        // and required-presence bits are folded into the check's fixed
        // 16-bit slots (what the check's inline capacity must cover).
        let mut generic = [0usize; KEY_WORDS + 1];
        let eth = Field::EthType.loc();
        let eth_bits = 0xffffu64 << eth.shift;
        let pres_bits = 0xffffu64 << present::SHIFT;
        for (rule, tmask) in tm.placements() {
            let (mut n, mut g) = (0, 0);
            for (w, seen) in per_word.iter_mut().enumerate() {
                let mut r = rule.matcher.mask.words[w] & !tmask.words[w];
                if r != 0 {
                    n += 1;
                    *seen += 1;
                }
                let v = rule.matcher.value.words[w];
                if w == eth.word as usize {
                    r &= !eth_bits;
                } else if w == present::WORD && v & r & pres_bits == r & pres_bits {
                    r &= !pres_bits;
                }
                if r != 0 {
                    g += 1;
                }
            }
            hist[n] += 1;
            generic[g] += 1;
            full[rule.matcher.mask.words.iter().filter(|&&m| m != 0).count()] += 1;
        }
        let show = |h: &[usize]| {
            format!(
                "0:{} 1:{} 2:{} 3:{} 4+:{}",
                h[0],
                h[1],
                h[2],
                h[3],
                h[4..].iter().sum::<usize>()
            )
        };
        let inline = generic[..=TupleMerge::CHECK_INLINE_WORDS]
            .iter()
            .sum::<usize>();
        let bytes = tm.lookup_bytes();
        println!(
            "{name}: {} rules, {} tuples, lookup data {:.0} KiB ({:.0} KiB of checks)\n  residual words  {}\n  after folding   {}\n  full mask words {}\n  \
             inline {inline} ({:.2}%), slab fallback {}\n  rules with residual in word: {}",
            tm.len(),
            tm.tuple_count(),
            bytes as f64 / 1024.0,
            (tm.len() * TupleMerge::CHECK_BYTES) as f64 / 1024.0,
            show(&hist),
            show(&generic),
            show(&full),
            100.0 * inline as f64 / tm.len() as f64,
            tm.len() - inline,
            per_word
                .iter()
                .enumerate()
                .filter(|(_, &c)| c > 0)
                .map(|(w, c)| format!("w{w}={c}"))
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
}
