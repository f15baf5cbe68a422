//! IP protocol numbers (IANA "Assigned Internet Protocol Numbers"), shared by
//! the IPv4 `protocol` and IPv6 `next header` fields.

use crate::wire_enum;

/// Raw protocol numbers, for `match` on a `u8` in hot paths.
pub mod proto {
    /// IPv6 hop-by-hop options (RFC 8200 §4.3).
    pub const HOPOPT: u8 = 0;
    /// ICMP for IPv4 (RFC 792).
    pub const ICMP: u8 = 1;
    /// TCP (RFC 9293).
    pub const TCP: u8 = 6;
    /// UDP (RFC 768).
    pub const UDP: u8 = 17;
    /// IPv6 routing header (RFC 8200 §4.4).
    pub const IPV6_ROUTE: u8 = 43;
    /// IPv6 fragment header (RFC 8200 §4.5).
    pub const IPV6_FRAG: u8 = 44;
    /// GRE (RFC 2784).
    pub const GRE: u8 = 47;
    /// Encapsulating security payload (RFC 4303).
    pub const ESP: u8 = 50;
    /// Authentication header (RFC 4302).
    pub const AH: u8 = 51;
    /// ICMP for IPv6 (RFC 4443).
    pub const ICMPV6: u8 = 58;
    /// IPv6 "no next header" (RFC 8200 §4.7).
    pub const IPV6_NONXT: u8 = 59;
    /// IPv6 destination options (RFC 8200 §4.6).
    pub const IPV6_OPTS: u8 = 60;
    /// SCTP (RFC 9260).
    pub const SCTP: u8 = 132;
}

wire_enum! {
    /// IP protocol / IPv6 next-header values this crate knows.
    pub enum Protocol(u8) {
        /// Hop-by-hop options.
        HopByHop = 0,
        /// ICMPv4.
        Icmp = 1,
        /// TCP.
        Tcp = 6,
        /// UDP.
        Udp = 17,
        /// IPv6 routing header.
        Ipv6Route = 43,
        /// IPv6 fragment header.
        Ipv6Frag = 44,
        /// GRE.
        Gre = 47,
        /// ESP.
        Esp = 50,
        /// AH.
        Ah = 51,
        /// ICMPv6.
        Icmpv6 = 58,
        /// No next header.
        Ipv6NoNxt = 59,
        /// IPv6 destination options.
        Ipv6Opts = 60,
        /// SCTP.
        Sctp = 132,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_numbers() {
        assert_eq!(Protocol::from(proto::TCP), Protocol::Tcp);
        assert_eq!(Protocol::from(proto::SCTP), Protocol::Sctp);
        assert_eq!(Protocol::from(200), Protocol::Unknown(200));
        assert_eq!(u8::from(Protocol::Ipv6Opts), proto::IPV6_OPTS);
    }
}
