//! Tunnel ports in `offlow run`'s flags and file, in Open vSwitch's terms:
//! an interface of `type=gre` or `type=vxlan` with its options
//! (`remote_ip`, `local_ip`, `key`, `csum`, `dst_port`, `ttl`, `tos`; an
//! `options:` prefix is accepted, as `ovs-vsctl` writes them), plus what a
//! switch without a routing table or ARP needs to be told: the `underlay`
//! port (an OpenFlow port number of this switch) and the next hop's
//! Ethernet address `remote_mac` (`local_mac` defaults to the underlay
//! interface's address).
//!
//! ```text
//! --port 'gre0=10,type=gre,local_ip=192.168.50.1,remote_ip=192.168.50.2,underlay=1,remote_mac=02:00:00:00:00:02,key=flow'
//! ```
//!
//! `key` is a number (both ways) or `flow` (the packet's `tunnel_id` out,
//! any key in, which becomes `tunnel_id`); without it, GRE sends no key and
//! VXLAN VNI 0. Open vSwitch's separate `in_key`/`out_key` and
//! `remote_ip=flow` are not supported (an error says so).

use std::net::Ipv4Addr;

use anyhow::{bail, Context};
use offlow_switch::config::TunnelConfig;
use offlow_wire::tunnel::{Endpoint, KeyMode, Kind};

/// The tunnel kinds by Open vSwitch's interface type.
pub(super) fn kind_of(name: &str) -> Option<Kind> {
    match name {
        "gre" => Some(Kind::Gre),
        "vxlan" => Some(Kind::Vxlan),
        _ => None,
    }
}

fn parse_mac(s: &str) -> anyhow::Result<[u8; 6]> {
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 6 {
        bail!("`{s}`: not an Ethernet address (six hex bytes separated by `:`)");
    }
    let mut mac = [0u8; 6];
    for (m, p) in mac.iter_mut().zip(parts) {
        *m = u8::from_str_radix(p, 16)
            .ok()
            .filter(|_| !p.is_empty() && p.len() <= 2)
            .with_context(|| format!("`{s}`: not an Ethernet address"))?;
    }
    Ok(mac)
}

fn parse_ip(key: &str, s: &str) -> anyhow::Result<[u8; 4]> {
    if s == "flow" {
        bail!("{key}=flow: tunnels are point to point here; give the address");
    }
    let ip: Ipv4Addr = s
        .parse()
        .with_context(|| format!("{key}=`{s}`: not an IPv4 address"))?;
    Ok(ip.octets())
}

fn parse_number<T: std::str::FromStr>(key: &str, s: &str) -> anyhow::Result<T>
where
    T::Err: std::fmt::Display,
{
    s.parse().map_err(|e| anyhow::anyhow!("{key}=`{s}`: {e}"))
}

fn need<T>(v: Option<T>, what: &str) -> anyhow::Result<T> {
    v.with_context(|| format!("a tunnel port needs {what}"))
}

/// A tunnel port of `kind` from its options, as `(key, value)` pairs.
pub(super) fn parse<'a>(
    kind: Kind,
    options: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> anyhow::Result<TunnelConfig> {
    let (mut local_ip, mut remote_ip, mut underlay, mut remote_mac) = (None, None, None, None);
    let mut e = Endpoint::new(kind, [0; 4], [0; 4], [0; 6], [0; 6]);
    let mut local_mac = None;
    for (key, value) in options {
        let key = key.strip_prefix("options:").unwrap_or(key);
        match key {
            "local_ip" => local_ip = Some(parse_ip(key, value)?),
            "remote_ip" => remote_ip = Some(parse_ip(key, value)?),
            "underlay" => underlay = Some(parse_number::<u32>(key, value)?),
            "remote_mac" => remote_mac = Some(parse_mac(value)?),
            "local_mac" => local_mac = Some(parse_mac(value)?),
            "key" => {
                e.key = match value {
                    "flow" => KeyMode::Flow,
                    v => {
                        let k: u64 = match v.strip_prefix("0x") {
                            Some(h) => u64::from_str_radix(h, 16)
                                .map_err(|err| anyhow::anyhow!("key=`{v}`: {err}"))?,
                            None => parse_number(key, v)?,
                        };
                        let max = match kind {
                            Kind::Gre => u64::from(u32::MAX),
                            Kind::Vxlan => 0xff_ffff,
                        };
                        if k > max {
                            bail!("key=`{v}`: a {} key is at most {max:#x}", kind.name());
                        }
                        KeyMode::Fixed(k as u32)
                    }
                }
            }
            "csum" => {
                e.csum = match value {
                    "true" => true,
                    "false" => false,
                    v => bail!("csum=`{v}`: true or false"),
                };
                if e.csum && kind == Kind::Vxlan {
                    bail!("csum=true: VXLAN ports here send UDP checksum 0 (IPv4 allows it)");
                }
            }
            "dst_port" if kind == Kind::Vxlan => e.dst_port = parse_number(key, value)?,
            "ttl" => e.ttl = parse_number(key, value)?,
            "tos" => e.tos = parse_number(key, value)?,
            "in_key" | "out_key" => {
                bail!("{key}: separate input and output keys are not supported; use key")
            }
            other => {
                bail!(
                "`{other}`: not a {} tunnel option (local_ip, remote_ip, underlay, remote_mac, \
                 local_mac, key, csum, ttl, tos{})",
                kind.name(),
                if kind == Kind::Vxlan { ", dst_port" } else { "" }
            )
            }
        }
    }
    e.local_ip = need(local_ip, "local_ip (this end's address)")?;
    e.remote_ip = need(remote_ip, "remote_ip (the far end's address)")?;
    e.remote_mac = need(
        remote_mac,
        "remote_mac (the next hop's Ethernet address: nothing is resolved by ARP)",
    )?;
    let underlay = need(
        underlay,
        "underlay (the OpenFlow port number its encapsulated frames use)",
    )?;
    if let Some(m) = local_mac {
        e.local_mac = m;
    }
    if e.ttl == 0 {
        bail!("ttl=0: an outer TTL of 0 would not leave the first hop");
    }
    Ok(TunnelConfig {
        endpoint: e,
        underlay,
        local_mac_from_underlay: local_mac.is_none(),
    })
}

/// A `--port` value with options (`NAME[=NUMBER],type=KIND,OPTION=VALUE...`):
/// the name, the number if given, and the tunnel.
pub(super) fn parse_flag(s: &str) -> anyhow::Result<(&str, Option<&str>, TunnelConfig)> {
    let mut parts = s.split(',');
    let head = parts.next().unwrap_or_default();
    let (name, number) = match head.split_once('=') {
        Some((n, num)) => (n, Some(num)),
        None => (head, None),
    };
    let mut kind = None;
    let mut options = Vec::new();
    for p in parts {
        let (k, v) = p
            .split_once('=')
            .with_context(|| format!("`{p}`: options are KEY=VALUE"))?;
        if k == "type" {
            kind = Some(
                kind_of(v)
                    .with_context(|| format!("type=`{v}`: the tunnel types are gre, vxlan"))?,
            );
        } else {
            options.push((k, v));
        }
    }
    let kind = kind.context("a port with options needs type=gre or type=vxlan")?;
    Ok((name, number, parse(kind, options)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_with_every_option() {
        let (name, number, t) = parse_flag(
            "gre0=10,type=gre,options:local_ip=192.168.50.1,remote_ip=192.168.50.2,underlay=1,\
             remote_mac=02:00:00:00:00:02,key=flow,csum=true,ttl=9,tos=4",
        )
        .unwrap();
        assert_eq!((name, number), ("gre0", Some("10")));
        assert_eq!(t.endpoint.kind, Kind::Gre);
        assert_eq!(t.endpoint.local_ip, [192, 168, 50, 1]);
        assert_eq!(t.endpoint.key, KeyMode::Flow);
        assert!(t.endpoint.csum && t.local_mac_from_underlay);
        assert_eq!((t.endpoint.ttl, t.endpoint.tos, t.underlay), (9, 4, 1));
        let (_, _, t) = parse_flag(
            "vx,type=vxlan,local_ip=1.1.1.1,remote_ip=1.1.1.2,underlay=2,remote_mac=2:0:0:0:0:2,\
             local_mac=02:00:00:00:00:01,key=0x10,dst_port=8472",
        )
        .unwrap();
        assert_eq!(t.endpoint.key, KeyMode::Fixed(16));
        assert_eq!(t.endpoint.dst_port, 8472);
        assert!(!t.local_mac_from_underlay);
    }

    #[test]
    fn errors_name_the_option() {
        let base =
            "g,type=gre,local_ip=1.1.1.1,remote_ip=1.1.1.2,underlay=1,remote_mac=2:0:0:0:0:2";
        let err = |extra: &str| {
            parse_flag(&format!("{base}{extra}"))
                .unwrap_err()
                .to_string()
        };
        assert!(err(",key=4294967296").contains("at most"));
        assert!(err(",in_key=5").contains("not supported"));
        assert!(err(",dst_port=5").contains("not a gre tunnel option"));
        assert!(err(",csum=yes").contains("true or false"));
        assert!(err(",ttl=0").contains("ttl=0"));
        let e = parse_flag("g,type=gre,local_ip=1.1.1.1")
            .unwrap_err()
            .to_string();
        assert!(e.contains("remote_ip"), "{e}");
        let e = parse_flag("g,type=geneve").unwrap_err().to_string();
        assert!(e.contains("gre, vxlan"), "{e}");
        let e = parse_flag("g,remote_ip=1.1.1.1").unwrap_err().to_string();
        assert!(e.contains("type=gre"), "{e}");
        let e = parse_flag(&format!("{base},remote_ip=flow"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("point to point"), "{e}");
    }
}
