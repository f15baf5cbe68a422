//! Capture files and received frames: `PcapReader` over arbitrary bytes
//! must return records or an error (never panic, never read past the
//! input), and every record it yields goes through `csum::finish_partial`,
//! which must not panic either and, when it writes a checksum, must leave
//! the frame's length unchanged.
#![no_main]

use libfuzzer_sys::fuzz_target;
use offlow_io::csum::finish_partial;
use offlow_io::pcap::PcapReader;

fuzz_target!(|data: &[u8]| {
    let Ok(mut r) = PcapReader::new(data) else {
        // Not a capture: still a frame someone may receive.
        let mut f = data.to_vec();
        finish_partial(&mut f);
        assert_eq!(f.len(), data.len());
        return;
    };
    let mut consumed = 24usize;
    while let Some(rec) = r.next_record() {
        let Ok(rec) = rec else { break };
        consumed += 16 + rec.data.len();
        assert!(consumed <= data.len());
        let mut f = rec.data.to_vec();
        finish_partial(&mut f);
        assert_eq!(f.len(), rec.data.len());
    }
});
