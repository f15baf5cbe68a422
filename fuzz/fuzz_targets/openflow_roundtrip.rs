//! Fuzz target: an arbitrary byte string is a stream of OpenFlow messages.
//! `frame_len` and `decode` must not panic; every message that decodes must
//! encode, decode back to the same message, and re-encode to the same bytes
//! (decode → encode → decode is a fixed point); a failure must map to an
//! error reply that itself round-trips.
#![no_main]

use libfuzzer_sys::fuzz_target;
use offlow_openflow::{decode, encode_to_vec, error_reply, frame_len};

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    // Walk the stream as a connection would; bounded by the input length
    // because every frame is at least 8 bytes.
    while let Ok(Some(n)) = frame_len(rest) {
        if n > rest.len() {
            break;
        }
        let frame = &rest[..n];
        match decode(frame) {
            Ok(m) => {
                let enc = encode_to_vec(&m).expect("a decoded message encodes");
                assert_eq!(enc.len(), frame.len(), "only padding may differ");
                let m2 = decode(&enc).expect("re-encoded message decodes");
                assert_eq!(m2, m);
                assert_eq!(encode_to_vec(&m2).expect("encodes"), enc);
            }
            Err(e) => {
                let reply = error_reply(&e, frame);
                let enc = encode_to_vec(&reply).expect("error reply encodes");
                assert_eq!(decode(&enc).expect("error reply decodes"), reply);
            }
        }
        rest = &rest[n..];
    }
});
