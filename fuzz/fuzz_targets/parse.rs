//! Fuzz target: an arbitrary byte string is a frame. `extract` must not
//! panic, its result must be internally consistent
//! (`Parsed::check_consistency`), and a truncated copy of the frame must not
//! claim a presence bit the whole frame lacks, nor disagree with it on any
//! field whose presence it claims. `extract` (which takes the fast path for
//! the common frame) must equal the general parser, `extract_to_general`:
//! key, layout and counters.
#![no_main]

use libfuzzer_sys::fuzz_target;
use offlow_flow::{extract, extract_to_general, Field, FlowKey, Layout, ParseStats};

fuzz_target!(|data: &[u8]| {
    let mut stats = ParseStats::default();
    let whole = extract(data, 1, &mut stats);
    if let Err(e) = whole.check_consistency(data.len()) {
        panic!("inconsistent parse: {e}: {whole:?}");
    }
    let (mut key, mut lay, mut general_stats) =
        (FlowKey::ZERO, Layout::default(), ParseStats::default());
    extract_to_general(data, 1, &mut key, &mut lay, &mut general_stats);
    assert_eq!(key, whole.key, "fast path and general parser: key");
    assert_eq!(lay, whole.layout, "fast path and general parser: layout");
    assert_eq!(general_stats, stats, "fast path and general parser: counters");
    // The cut point comes from the last byte so the mutator can steer it
    // without disturbing the headers at the front.
    let Some(&last) = data.last() else { return };
    let n = (data.len() * last as usize) / 256;
    let part = extract(&data[..n], 1, &mut stats);
    if let Err(e) = part.check_consistency(n) {
        panic!("inconsistent parse of prefix {n}: {e}: {part:?}");
    }
    let (wp, pp) = (whole.key.presence(), part.key.presence());
    assert_eq!(
        pp & !wp,
        0,
        "prefix {n} claims presence {pp:#x} beyond {wp:#x}"
    );
    for field in Field::ALL {
        let need = field.required_presence();
        let arp_storage = matches!(
            field,
            Field::ArpOp | Field::ArpSpa | Field::ArpTpa | Field::ArpSha | Field::ArpTha
        );
        if arp_storage && whole.key.get(Field::EthType) != 0x0806 {
            continue; // shared storage; prerequisite eth_type = ARP
        }
        if need != 0 && pp & need == need {
            assert_eq!(
                part.key.get(field),
                whole.key.get(field),
                "{field:?} at prefix {n}"
            );
        }
    }
});
