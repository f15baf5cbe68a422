//! Tunnel decapsulation: an arbitrary byte string received on an underlay
//! port. `tunnel::classify` must not panic; a decapsulated range must lie
//! inside the frame and hold at least an Ethernet header; and whatever it
//! decapsulates, encapsulating that inner frame again with the endpoint's
//! far side must classify back to the same inner bytes and key. The first
//! byte picks whether the frame is steered at the GRE or the VXLAN
//! endpoint (its addresses and protocol are written over the input), so
//! the mutator spends its time past the outer addresses.
#![no_main]

use libfuzzer_sys::fuzz_target;
use offlow_wire::tunnel::{classify, Classified, Endpoint, KeyMode, Kind};

const LOCAL: [u8; 4] = [192, 168, 50, 1];
const REMOTE: [u8; 4] = [192, 168, 50, 2];

fuzz_target!(|data: &[u8]| {
    let Some((&steer, rest)) = data.split_first() else {
        return;
    };
    let mac = [2, 0, 0, 0, 0, 1];
    let gre = Endpoint {
        key: KeyMode::Flow,
        ..Endpoint::new(Kind::Gre, LOCAL, REMOTE, mac, mac)
    };
    let vxlan = Endpoint {
        key: KeyMode::Flow,
        ..Endpoint::new(Kind::Vxlan, LOCAL, REMOTE, mac, mac)
    };
    let endpoints = [gre, vxlan];
    let mut f = rest.to_vec();
    if steer & 1 == 1 && f.len() >= 38 {
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        f[23] = if steer & 2 == 0 { 47 } else { 17 };
        f[26..30].copy_from_slice(&REMOTE);
        f[30..34].copy_from_slice(&LOCAL);
        if steer & 2 != 0 {
            let ihl = usize::from(f[14] & 0x0f) * 4;
            if let Some(p) = f.get_mut(14 + ihl + 2..14 + ihl + 4) {
                p.copy_from_slice(&4789u16.to_be_bytes());
            }
        }
    }
    if let Classified::Tunnel(d) = classify(&f, &endpoints) {
        assert!(d.inner.end <= f.len() && d.inner.len() >= 14, "{d:?}");
        let inner = &f[d.inner.clone()];
        let ep = endpoints[d.endpoint];
        let far = Endpoint {
            local_ip: ep.remote_ip,
            remote_ip: ep.local_ip,
            ..ep
        };
        let mut out = vec![0u8; inner.len() + 64];
        let n = far.encapsulate(inner, d.tunnel_id, 1, 2, &mut out).expect("room");
        match classify(&out[..n], &endpoints) {
            Classified::Tunnel(again) => {
                assert_eq!(&out[again.inner], inner);
                assert_eq!(again.tunnel_id, d.tunnel_id);
            }
            other => panic!("re-encapsulation not recognised: {other:?}"),
        }
    }
});
