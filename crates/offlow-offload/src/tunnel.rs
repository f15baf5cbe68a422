//! Tunnel ports as the offload tier sees them.
//!
//! A tunnel port is a logical OpenFlow port (Open vSwitch's `type=gre` /
//! `type=vxlan` interfaces) whose frames travel encapsulated on an
//! underlay port; `offlow_wire::tunnel` holds the semantics both tiers
//! share (which received frames are the tunnel's, the outer headers an
//! encapsulation writes). A backend told of a tunnel ([`TunnelPort`])
//! serves two kinds of entries the software tier would otherwise serve:
//!
//! - **Decapsulation**: an entry whose key enters on the tunnel port (the
//!   inner frame's key, `tunnel_id` = the key it arrived with). The
//!   backend recognises the tunnel's frames on the underlay as
//!   `tunnel::classify` does, takes the inner frame's key, and on a hit
//!   strips the outer headers before the entry's program runs; on a miss
//!   the frame goes up still encapsulated, for software to classify.
//! - **Encapsulation**: an entry whose output is the tunnel port. The
//!   backend writes the outer headers `Endpoint::encapsulate` writes and
//!   sends the frame on the underlay. The GRE key or VXLAN VNI is fixed
//!   per entry (the key is an exact match, so the packet's `tunnel_id` is
//!   the key's, or the entry's set-field: [`TunnelPort::wire_key`]). The
//!   VXLAN source port comes from the frame as it leaves, as the software
//!   tier takes it ([`entropy`]), so a flow keeps its source port (and its
//!   path through the underlay) whichever tier serves it.
//!
//! What a backend supports of each tunnel is declared in its capabilities
//! ([`TunnelSupport`]), so an entry it cannot serve is refused with the
//! reason and stays in software.

use offlow_wire::tunnel::{Endpoint, KeyMode, Kind};

/// A tunnel port a backend is told of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TunnelPort {
    /// The tunnel's OpenFlow port number.
    pub ofport: u32,
    /// Its endpoint, with `local_mac` resolved (the outer Ethernet source
    /// the software tier writes).
    pub endpoint: Endpoint,
    /// The OpenFlow port of the underlay: one of the backend's interface
    /// ports, on which the tunnel's frames arrive and leave.
    pub underlay: u32,
}

/// What a backend does for one tunnel port ([`crate::Capabilities::tunnels`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TunnelSupport {
    /// The tunnel's OpenFlow port.
    pub port: u32,
    /// Its underlay's OpenFlow port (one of [`crate::Capabilities::ports`]):
    /// the entries of the tunnel depend on it.
    pub underlay: u32,
    /// Entries entering on the port (decapsulated by the backend), or why
    /// not.
    pub decap: Result<(), &'static str>,
    /// Entries output to the port (encapsulated by the backend), or why
    /// not.
    pub encap: Result<(), &'static str>,
}

impl TunnelSupport {
    /// A tunnel over `underlay` the backend knows of and serves in neither
    /// direction.
    pub fn unsupported(port: u32, underlay: u32) -> TunnelSupport {
        const WHY: &str = "the backend does not serve tunnels";
        TunnelSupport {
            port,
            underlay,
            decap: Err(WHY),
            encap: Err(WHY),
        }
    }
}

impl TunnelPort {
    /// What the XDP backend serves of this tunnel (the model backend
    /// declares the same): both directions, whatever the endpoint says.
    /// Received frames of a shape the program does not decapsulate go up
    /// to software frame by frame (bpf/offload.bpf.c lists the shapes); a
    /// GRE checksum, sent or received, costs the program a sum over the
    /// whole packet (`examples/prog_cost.rs` measures it).
    pub fn xdp_support(&self) -> TunnelSupport {
        TunnelSupport {
            port: self.ofport,
            underlay: self.underlay,
            decap: Ok(()),
            encap: Ok(()),
        }
    }

    /// The key written on the wire for a frame whose `tunnel_id` is
    /// `tunnel_id` when it is output to this tunnel (the entry's set-field
    /// if it has one, else the key's: [`crate::OffloadProgram::tunnel_id`]):
    /// the GRE key (`None`: no key field) or the VXLAN VNI (24 bits; 0
    /// without a key), as `Endpoint::encapsulate` writes them.
    pub fn wire_key(&self, tunnel_id: u64) -> Option<u32> {
        let k = self.endpoint.key_for(tunnel_id);
        match self.endpoint.kind {
            Kind::Gre => k,
            Kind::Vxlan => Some(k.unwrap_or(0) & 0x00ff_ffff),
        }
    }

    /// Whether frames of this tunnel carry a key field (GRE with a key,
    /// and VXLAN always).
    pub fn has_key_field(&self) -> bool {
        self.endpoint.kind == Kind::Vxlan || self.endpoint.key != KeyMode::None
    }
}

/// The flow entropy the VXLAN source port is made of: the software
/// tier's, which the XDP program computes the same way in the kernel.
pub use offlow_wire::tunnel::entropy;

#[cfg(test)]
mod tests {
    use super::*;

    fn port(kind: Kind, key: KeyMode, csum: bool) -> TunnelPort {
        TunnelPort {
            ofport: 10,
            endpoint: Endpoint {
                key,
                csum,
                ..Endpoint::new(kind, [1, 1, 1, 1], [2, 2, 2, 2], [2; 6], [4; 6])
            },
            underlay: 1,
        }
    }

    #[test]
    fn wire_keys_follow_the_endpoint() {
        let g = port(Kind::Gre, KeyMode::Flow, false);
        assert_eq!(g.wire_key(0x1_2345_6789), Some(0x2345_6789));
        assert_eq!(port(Kind::Gre, KeyMode::None, false).wire_key(7), None);
        assert_eq!(
            port(Kind::Gre, KeyMode::Fixed(5), false).wire_key(7),
            Some(5)
        );
        let v = port(Kind::Vxlan, KeyMode::Flow, false);
        assert_eq!(v.wire_key(0xabcd_ef12), Some(0xcd_ef12));
        assert_eq!(port(Kind::Vxlan, KeyMode::None, false).wire_key(7), Some(0));
        assert!(v.has_key_field());
        assert!(!port(Kind::Gre, KeyMode::None, false).has_key_field());
    }

    #[test]
    fn the_xdp_backend_serves_every_tunnel_both_ways() {
        for kind in [Kind::Gre, Kind::Vxlan] {
            let s = port(kind, KeyMode::None, true).xdp_support();
            assert_eq!((s.port, s.underlay), (10, 1));
            assert_eq!((s.decap, s.encap), (Ok(()), Ok(())));
        }
    }
}
