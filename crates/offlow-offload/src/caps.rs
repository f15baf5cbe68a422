//! What a backend declares it can do, and the check every entry passes
//! before it is handed to the backend.

use core::fmt;
use core::ops::{BitOr, BitOrAssign};

use offlow_flow::Field;

use crate::mask::OffloadMatch;
use crate::program::{OffloadProgram, Verdict};
use crate::tunnel::TunnelSupport;
use crate::Refusal;

/// A set of action kinds ([`OffloadProgram::kinds`]).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ActionKinds(u32);

impl ActionKinds {
    /// No action.
    pub const EMPTY: ActionKinds = ActionKinds(0);
    /// Drop the frame.
    pub const DROP: ActionKinds = ActionKinds(1 << 0);
    /// Output to another port.
    pub const OUTPUT: ActionKinds = ActionKinds(1 << 1);
    /// Output back out of the ingress port.
    pub const IN_PORT: ActionKinds = ActionKinds(1 << 2);
    /// Hand the frame to a chosen CPU.
    pub const STEER_CPU: ActionKinds = ActionKinds(1 << 3);
    /// Remove the outer VLAN tag.
    pub const POP_VLAN: ActionKinds = ActionKinds(1 << 4);
    /// Rewrite or insert the outer VLAN tag (push, set VID/PCP).
    pub const WRITE_VLAN: ActionKinds = ActionKinds(1 << 5);
    /// Set Ethernet source/destination.
    pub const SET_ETH: ActionKinds = ActionKinds(1 << 6);
    /// Set DSCP / ECN.
    pub const SET_IP_TOS: ActionKinds = ActionKinds(1 << 7);
    /// Set the IPv4 TTL.
    pub const SET_TTL: ActionKinds = ActionKinds(1 << 8);
    /// Decrement the IPv4 TTL.
    pub const DEC_TTL: ActionKinds = ActionKinds(1 << 9);
    /// Set IPv4 source/destination (NAT).
    pub const SET_IPV4: ActionKinds = ActionKinds(1 << 10);
    /// Set TCP/UDP ports (NAPT).
    pub const SET_L4_PORT: ActionKinds = ActionKinds(1 << 11);
    /// Every kind above.
    pub const ALL: ActionKinds = ActionKinds((1 << 12) - 1);

    const NAMES: [&'static str; 12] = [
        "drop",
        "output",
        "in_port",
        "steer_cpu",
        "pop_vlan",
        "write_vlan",
        "set_eth",
        "set_ip_tos",
        "set_ttl",
        "dec_ttl",
        "set_ipv4",
        "set_l4_port",
    ];

    /// Are all kinds of `other` in `self`?
    pub const fn contains(self, other: ActionKinds) -> bool {
        self.0 & other.0 == other.0
    }

    /// The kinds of `self` that are not in `other`.
    pub const fn without(self, other: ActionKinds) -> ActionKinds {
        ActionKinds(self.0 & !other.0)
    }

    /// Is the set empty?
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The names of the kinds in the set, in a fixed order.
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        (0..Self::NAMES.len())
            .filter(move |i| self.0 & (1 << i) != 0)
            .map(|i| Self::NAMES[i])
    }
}

impl BitOr for ActionKinds {
    type Output = ActionKinds;
    fn bitor(self, rhs: ActionKinds) -> ActionKinds {
        ActionKinds(self.0 | rhs.0)
    }
}

impl BitOrAssign for ActionKinds {
    fn bitor_assign(&mut self, rhs: ActionKinds) {
        self.0 |= rhs.0;
    }
}

impl fmt::Debug for ActionKinds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.names()).finish()
    }
}

impl fmt::Display for ActionKinds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for n in self.names() {
            if !first {
                f.write_str(",")?;
            }
            first = false;
            f.write_str(n)?;
        }
        Ok(())
    }
}

/// The fields an [`OffloadKey`](crate::OffloadKey) matches: a backend
/// must match all of them exactly to serve a microflow (otherwise two
/// microflows with different decisions could share its entry).
pub const CLASS_FIELDS: [Field; 13] = [
    Field::InPort,
    Field::EthDst,
    Field::EthSrc,
    Field::EthType,
    Field::VlanVid,
    Field::VlanPcp,
    Field::Ipv4Src,
    Field::Ipv4Dst,
    Field::IpProto,
    Field::IpDscp,
    Field::IpEcn,
    Field::TcpSrc,
    Field::TcpDst,
];

/// What a backend can do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capabilities {
    /// Fields it matches exactly (UDP ports and ICMP type/code share the
    /// TCP port fields' storage in the key: `TcpSrc`/`TcpDst` cover them).
    pub match_fields: Vec<Field>,
    /// How many distinct masks its masked entries may use at once
    /// ([`crate::OffloadMatch`]); 0: exact entries only.
    pub masks: usize,
    /// The action kinds it executes.
    pub actions: ActionKinds,
    /// How many entries fit.
    pub room: usize,
    /// Whether it keeps per-entry packet and byte counters. The tier needs
    /// them: DESIGN invariant 4 (counters stay exact) would not hold without.
    pub counters: bool,
    /// The OpenFlow ports it receives on and can output to (interfaces).
    pub ports: Vec<u32>,
    /// The tunnel ports it was told of, and what it does for each
    /// ([`crate::tunnel`]). A tunnel port is not in `ports`.
    pub tunnels: Vec<TunnelSupport>,
}

impl Capabilities {
    /// Can the backend serve `key` with `program`? The reason if not.
    /// (Room is the backend's to check: it knows its occupancy.)
    pub fn admits(&self, m: &OffloadMatch, program: &OffloadProgram) -> Result<(), Refusal> {
        if !self.counters {
            return Err(Refusal::NoCounters);
        }
        if self.masks == 0 && !m.is_exact() {
            return Err(Refusal::Masked);
        }
        let key = &m.key;
        if let Some(&f) = CLASS_FIELDS.iter().find(|f| !self.match_fields.contains(f)) {
            return Err(Refusal::MatchField(f));
        }
        let tunnel = |p: u32| self.tunnels.iter().find(|t| t.port == p);
        match tunnel(key.in_port) {
            Some(t) => {
                let refuse = |why| Err(Refusal::Tunnel(key.in_port, why));
                t.decap.map_err(|why| Refusal::Tunnel(key.in_port, why))?;
                match program.verdict {
                    // The frame would go back into the tunnel it came out
                    // of: an encapsulation out of the port it arrived on,
                    // which the stages do not express (software does).
                    Verdict::InPort => return refuse("output back into the ingress tunnel"),
                    // A worker gets a steered frame as received, still
                    // encapsulated; software keeps such flows whole.
                    Verdict::Cpu(_) => return refuse("steering a tunnel's frames to a worker"),
                    Verdict::Drop | Verdict::Port(_) => {}
                }
            }
            None if !self.ports.contains(&key.in_port) => return Err(Refusal::Port(key.in_port)),
            // Only a frame decapsulated on a tunnel port has a tunnel_id
            // in its key.
            None if key.tunnel_id != 0 => {
                return Err(Refusal::OutsideClass(
                    "tunnel_id on a port that is not a tunnel",
                ))
            }
            None => {}
        }
        if let Verdict::Port(p) = program.verdict {
            match tunnel(p) {
                Some(t) => t.encap.map_err(|why| Refusal::Tunnel(p, why))?,
                None if !self.ports.contains(&p) => return Err(Refusal::Port(p)),
                None => {}
            }
        }
        let missing = program.kinds().without(self.actions);
        if !missing.is_empty() {
            return Err(Refusal::Actions(missing));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::OffloadKey;
    use crate::program::{TtlOp, VlanOp};

    fn caps() -> Capabilities {
        Capabilities {
            match_fields: CLASS_FIELDS.to_vec(),
            masks: 0,
            actions: ActionKinds::OUTPUT | ActionKinds::DROP | ActionKinds::SET_IPV4,
            room: 4,
            counters: true,
            ports: vec![1, 2],
            tunnels: vec![
                TunnelSupport {
                    port: 10,
                    underlay: 1,
                    decap: Ok(()),
                    encap: Ok(()),
                },
                TunnelSupport {
                    port: 11,
                    underlay: 2,
                    decap: Ok(()),
                    encap: Err("GRE checksum on output"),
                },
                TunnelSupport::unsupported(12, 1),
            ],
        }
    }

    fn key() -> OffloadMatch {
        crate::key::udp_key(1).into()
    }

    #[test]
    fn admits_checks_every_declared_limit() {
        let c = caps();
        let fwd = OffloadProgram::plain(Verdict::Port(2));
        assert_eq!(c.admits(&key(), &fwd), Ok(()));
        assert_eq!(
            c.admits(&key(), &OffloadProgram::plain(Verdict::Port(3))),
            Err(Refusal::Port(3))
        );
        assert_eq!(
            c.admits(
                &OffloadKey {
                    in_port: 9,
                    ..key().key
                }
                .into(),
                &fwd
            ),
            Err(Refusal::Port(9))
        );
        let dec = OffloadProgram {
            ttl: TtlOp::Dec,
            vlan: VlanOp::Strip,
            ..fwd
        };
        assert_eq!(
            c.admits(&key(), &dec),
            Err(Refusal::Actions(
                ActionKinds::POP_VLAN | ActionKinds::DEC_TTL
            ))
        );
        let mut five_tuple = caps();
        five_tuple.match_fields.retain(|f| *f != Field::EthSrc);
        assert_eq!(
            five_tuple.admits(&key(), &fwd),
            Err(Refusal::MatchField(Field::EthSrc))
        );
        let mut blind = caps();
        blind.counters = false;
        assert_eq!(blind.admits(&key(), &fwd), Err(Refusal::NoCounters));
        // A masked entry needs a backend that holds masks.
        let per_pair = OffloadMatch::new(&key().key, crate::OffloadMask::SHAPE);
        assert_eq!(c.admits(&per_pair, &fwd), Err(Refusal::Masked));
        let masking = Capabilities { masks: 4, ..caps() };
        assert_eq!(masking.admits(&per_pair, &fwd), Ok(()));
    }

    #[test]
    fn tunnel_ports_are_admitted_as_declared() {
        let c = caps();
        let on = |port: u32, tunnel_id: u64| -> OffloadMatch {
            OffloadKey {
                in_port: port,
                tunnel_id,
                ..key().key
            }
            .into()
        };
        let to = |p: u32| OffloadProgram::plain(Verdict::Port(p));
        // Decapsulated frames, any key, out of an interface or a tunnel.
        assert_eq!(c.admits(&on(10, 7), &to(2)), Ok(()));
        assert_eq!(c.admits(&on(11, 0), &to(10)), Ok(()));
        assert_eq!(c.admits(&on(1, 0), &to(10)), Ok(()));
        assert_eq!(
            c.admits(&on(1, 0), &to(11)),
            Err(Refusal::Tunnel(11, "GRE checksum on output"))
        );
        assert_eq!(
            c.admits(&on(12, 0), &to(2)),
            Err(Refusal::Tunnel(12, "the backend does not serve tunnels"))
        );
        assert_eq!(
            c.admits(&on(1, 0), &to(12)),
            Err(Refusal::Tunnel(12, "the backend does not serve tunnels"))
        );
        assert_eq!(
            c.admits(&on(10, 7), &OffloadProgram::plain(Verdict::InPort)),
            Err(Refusal::Tunnel(10, "output back into the ingress tunnel"))
        );
        assert!(matches!(
            c.admits(&on(10, 7), &OffloadProgram::plain(Verdict::Cpu(1))),
            Err(Refusal::Tunnel(10, _))
        ));
        assert_eq!(
            c.admits(&on(1, 7), &to(2)),
            Err(Refusal::OutsideClass(
                "tunnel_id on a port that is not a tunnel"
            ))
        );
        // A backend told of no tunnels is not on the port.
        let plain = Capabilities {
            tunnels: Vec::new(),
            ..caps()
        };
        assert_eq!(plain.admits(&on(10, 7), &to(2)), Err(Refusal::Port(10)));
    }

    #[test]
    fn kinds_print_by_name() {
        let k = ActionKinds::POP_VLAN | ActionKinds::DEC_TTL;
        assert_eq!(k.to_string(), "pop_vlan,dec_ttl");
        assert!(ActionKinds::ALL.contains(k));
    }
}
