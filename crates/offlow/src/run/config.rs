//! `offlow run` configuration: command-line flags, an optional TOML file,
//! and the OpenFlow connection endpoints they name.
//!
//! Endpoints use Open vSwitch's syntax: `tcp:HOST:PORT` is an active
//! connection to a controller (reconnected with backoff), `ptcp:PORT[:ADDR]`
//! a passive one (a listening socket; ADDR defaults to 127.0.0.1 so a
//! switch is not exposed by accident). IPv6 addresses go in brackets.
//!
//! The file holds the same settings as the flags; a flag given on the
//! command line overrides the file's value (lists: flags replace the file's
//! list). Every error in the file names the file, the line and the key.
//!
//! ```toml
//! dpid = 1
//! tables = 8
//! listen = ["ptcp:6653"]
//! controllers = ["tcp:127.0.0.1:6653"]
//! ```
//!
//! Thread-safety: plain data.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::Deserialize;

/// Default number of flow tables.
pub const DEFAULT_TABLES: u16 = 8;
/// Default datapath id.
pub const DEFAULT_DPID: u64 = 1;

/// A connection endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// `tcp:HOST:PORT`: connect to a controller.
    Active {
        /// Host name or address (brackets removed).
        host: String,
        /// TCP port.
        port: u16,
    },
    /// `ptcp:PORT[:ADDR]`: accept controllers on this address.
    Passive(SocketAddr),
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Active { host, port } if host.contains(':') => {
                write!(f, "tcp:[{host}]:{port}")
            }
            Endpoint::Active { host, port } => write!(f, "tcp:{host}:{port}"),
            Endpoint::Passive(a) => write!(f, "ptcp:{}:{}", a.port(), a.ip()),
        }
    }
}

fn strip_brackets(s: &str) -> &str {
    s.strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .unwrap_or(s)
}

fn parse_port(s: &str, what: &str) -> anyhow::Result<u16> {
    s.parse::<u16>()
        .with_context(|| format!("{what}: `{s}` is not a TCP port (0..=65535)"))
}

impl Endpoint {
    /// Parse `tcp:HOST:PORT` (active only).
    pub fn parse_active(s: &str) -> anyhow::Result<Endpoint> {
        let Some(rest) = s.strip_prefix("tcp:") else {
            bail!("`{s}`: a controller is `tcp:HOST:PORT`");
        };
        let Some((host, port)) = rest.rsplit_once(':') else {
            bail!("`{s}`: missing `:PORT` (a controller is `tcp:HOST:PORT`)");
        };
        let host = strip_brackets(host);
        if host.is_empty() {
            bail!("`{s}`: empty host");
        }
        Ok(Endpoint::Active {
            host: host.to_string(),
            port: parse_port(port, s)?,
        })
    }

    /// Parse `ptcp:PORT[:ADDR]` (passive only); ADDR defaults to 127.0.0.1.
    pub fn parse_passive(s: &str) -> anyhow::Result<Endpoint> {
        let Some(rest) = s.strip_prefix("ptcp:") else {
            bail!("`{s}`: a listening endpoint is `ptcp:PORT[:ADDR]`");
        };
        let (port, addr) = match rest.split_once(':') {
            Some((p, a)) => (p, Some(strip_brackets(a))),
            None => (rest, None),
        };
        let port = parse_port(port, s)?;
        let ip = match addr {
            Some(a) => a
                .parse::<IpAddr>()
                .with_context(|| format!("`{s}`: `{a}` is not an IP address"))?,
            None => IpAddr::V4(Ipv4Addr::LOCALHOST),
        };
        Ok(Endpoint::Passive(SocketAddr::new(ip, port)))
    }
}

/// Flags of `offlow run`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct RunArgs {
    /// TOML configuration file (dpid, tables, listen, controllers); flags
    /// override its values.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Controller to connect to (repeatable), `tcp:HOST:PORT`; reconnected
    /// with exponential backoff (100 ms doubling to 8 s).
    #[arg(long = "controller", value_name = "tcp:HOST:PORT")]
    pub controllers: Vec<String>,
    /// Accept controllers on `ptcp:PORT[:ADDR]` (repeatable; ADDR defaults
    /// to 127.0.0.1).
    #[arg(long = "listen", value_name = "ptcp:PORT[:ADDR]")]
    pub listen: Vec<String>,
    /// Datapath id (decimal or 0x-prefixed hex); default 1.
    #[arg(long, value_parser = parse_dpid)]
    pub dpid: Option<u64>,
    /// Number of flow tables (1..=255); default 8.
    #[arg(long)]
    pub tables: Option<u16>,
}

fn parse_dpid(s: &str) -> Result<u64, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|e| format!("`{s}`: {e}"))
}

/// The resolved configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunConfig {
    /// Datapath id.
    pub dpid: u64,
    /// Flow tables.
    pub tables: u16,
    /// Passive endpoints.
    pub listen: Vec<Endpoint>,
    /// Active endpoints.
    pub controllers: Vec<Endpoint>,
}

/// The file's shape. Values that need checking beyond their type keep their
/// span so the error can point at the line.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    dpid: Option<u64>,
    tables: Option<toml::Spanned<u16>>,
    #[serde(default)]
    listen: Vec<toml::Spanned<String>>,
    #[serde(default)]
    controllers: Vec<toml::Spanned<String>>,
}

/// 1-based line of byte offset `at` in `text`.
fn line_of(text: &str, at: usize) -> usize {
    text.as_bytes()
        .iter()
        .take(at)
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

fn check_tables(n: u16) -> anyhow::Result<u16> {
    if n == 0 || n > offlow_pipeline::MAX_TABLES {
        bail!("tables = {n}: must be 1..={}", offlow_pipeline::MAX_TABLES);
    }
    Ok(n)
}

/// Parse a configuration file's text (`path` is only used in messages).
pub fn parse_file(path: &Path, text: &str) -> anyhow::Result<RunConfig> {
    let shown = path.display();
    // toml's message already says "at line L, column C" and quotes the key.
    let f: FileConfig =
        toml::from_str(text).map_err(|e| anyhow::anyhow!("{shown}: {}", e.to_string().trim()))?;
    let at = |key: &str, span: std::ops::Range<usize>, e: anyhow::Error| {
        anyhow::anyhow!(
            "{shown}, line {}, key `{key}`: {e:#}",
            line_of(text, span.start)
        )
    };
    let tables = match f.tables {
        Some(t) => check_tables(*t.get_ref()).map_err(|e| at("tables", t.span(), e))?,
        None => DEFAULT_TABLES,
    };
    let mut listen = Vec::new();
    for s in &f.listen {
        listen.push(Endpoint::parse_passive(s.get_ref()).map_err(|e| at("listen", s.span(), e))?);
    }
    let mut controllers = Vec::new();
    for s in &f.controllers {
        controllers
            .push(Endpoint::parse_active(s.get_ref()).map_err(|e| at("controllers", s.span(), e))?);
    }
    Ok(RunConfig {
        dpid: f.dpid.unwrap_or(DEFAULT_DPID),
        tables,
        listen,
        controllers,
    })
}

impl RunArgs {
    /// The file (if any) overridden by the flags.
    pub fn resolve(&self) -> anyhow::Result<RunConfig> {
        let mut c = match &self.config {
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .with_context(|| format!("reading {}", p.display()))?;
                parse_file(p, &text)?
            }
            None => RunConfig {
                dpid: DEFAULT_DPID,
                tables: DEFAULT_TABLES,
                listen: Vec::new(),
                controllers: Vec::new(),
            },
        };
        if let Some(d) = self.dpid {
            c.dpid = d;
        }
        if let Some(t) = self.tables {
            c.tables = check_tables(t).context("--tables")?;
        }
        if !self.listen.is_empty() {
            c.listen = self
                .listen
                .iter()
                .map(|s| Endpoint::parse_passive(s).context("--listen"))
                .collect::<anyhow::Result<_>>()?;
        }
        if !self.controllers.is_empty() {
            c.controllers = self
                .controllers
                .iter()
                .map(|s| Endpoint::parse_active(s).context("--controller"))
                .collect::<anyhow::Result<_>>()?;
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        assert_eq!(
            Endpoint::parse_passive("ptcp:16653").unwrap(),
            Endpoint::Passive("127.0.0.1:16653".parse().unwrap())
        );
        assert_eq!(
            Endpoint::parse_passive("ptcp:6653:0.0.0.0").unwrap(),
            Endpoint::Passive("0.0.0.0:6653".parse().unwrap())
        );
        assert_eq!(
            Endpoint::parse_passive("ptcp:6653:[::1]").unwrap(),
            Endpoint::Passive("[::1]:6653".parse().unwrap())
        );
        assert_eq!(
            Endpoint::parse_active("tcp:[::1]:6653").unwrap(),
            Endpoint::Active {
                host: "::1".into(),
                port: 6653
            }
        );
        assert_eq!(
            Endpoint::parse_active("tcp:ctl.example:6633")
                .unwrap()
                .to_string(),
            "tcp:ctl.example:6633"
        );
        for bad in ["tcp:1.2.3.4", "tcp::6653", "udp:1.2.3.4:1", "tcp:h:99999"] {
            assert!(Endpoint::parse_active(bad).is_err(), "{bad}");
        }
        for bad in ["ptcp:", "ptcp:x", "ptcp:1:notanip", "tcp:1"] {
            assert!(Endpoint::parse_passive(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn file_ok_and_flags_override() {
        let text = "dpid = 7\ntables = 3\nlisten = [\"ptcp:1000\"]\n";
        let c = parse_file(Path::new("x.toml"), text).unwrap();
        assert_eq!(c.dpid, 7);
        assert_eq!(c.tables, 3);
        assert_eq!(c.listen.len(), 1);
        assert!(c.controllers.is_empty());
    }

    #[test]
    fn file_errors_name_file_line_and_key() {
        let text = "dpid = 7\n\ncontrollers = [\n  \"tcp:1.2.3.4:1\",\n  \"tcp:nohost\",\n]\n";
        let e = parse_file(Path::new("sw.toml"), text)
            .unwrap_err()
            .to_string();
        assert!(e.contains("sw.toml"), "{e}");
        assert!(e.contains("line 5"), "{e}");
        assert!(e.contains("controllers"), "{e}");

        let e = parse_file(Path::new("sw.toml"), "dpid = 1\ntables = 300\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("sw.toml") && e.contains("line 2"), "{e}");
        assert!(e.contains("tables"), "{e}");

        let e = parse_file(Path::new("sw.toml"), "dpid = 1\nbogus = 2\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("sw.toml") && e.contains("line 2"), "{e}");
        assert!(e.contains("bogus"), "{e}");

        // Type error: u16 overflow is a serde error with toml's own span.
        let e = parse_file(Path::new("sw.toml"), "\n\ntables = \"x\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 3") && e.contains("tables"), "{e}");
    }
}
