//! ClassBench rule-set and header-trace loaders, and a header generator.
//!
//! What: parses the two ClassBench dialects found in `shared/data/classbench`
//! (see its README) into [`CbRule`]s and [`Header`]s, converts them into
//! [`offlow_classifier::Rule`]s and [`FlowKey`]s, and generates headers from
//! rules when no trace is given.
//!
//! Rule formats (one rule per line, blank lines and `#` comments skipped):
//! - WUSTL 5-field, space separated:
//!   `@sip/len dip/len sp_lo : sp_hi dp_lo : dp_hi proto/mask`
//! - lyxocs 7-field, tab separated: the same plus a `flags/mask` column (TCP
//!   flags). The flags column is parsed and kept in [`CbRule::flags`], but it
//!   is IGNORED for matching: the OpenFlow 1.3 basic match has no TCP-flags
//!   field, and dpdk-test-acl (our anchor) reads only the first five fields.
//!
//! Any run of whitespace separates tokens, so either dialect may use spaces
//! or tabs. The dialect is chosen per line by the token count (9 or 10).
//!
//! Rule numbering: the rule on the `i`-th rule line (0-based, comments and
//! blank lines not counted) gets `id = i` and `priority = N - i`, where `N`
//! is the number of rules: the first line has the highest priority, which is
//! ClassBench's "first match" semantics and dpdk-test-acl's convention
//! (`priority = RTE_ACL_MAX_PRIORITY - n` for the n-th rule line).
//!
//! Trace formats:
//! - WUSTL: `sip dip sp dp proto rule_id`; `rule_id` is the 1-based index of
//!   the FIRST matching rule, 0 when no rule matches. Loaded as an expected
//!   answer `Some(rule_id - 1)` / `None` in our 0-based ids.
//! - lyxocs: `sip dip sp dp proto flags rule_idx`; `rule_idx` is the 0-based
//!   rule the header was GENERATED from, not necessarily its first match, so
//!   it is kept in [`Trace::generating`] and never used as an expected answer.
//!
//! Invariants: malformed input yields [`LoadError::Parse`] naming the file and
//! the 1-based line (`FILE:LINE: reason`); nothing here panics on input data.
//!
//! Thread-safety: plain functions and plain data.

use std::fmt;
use std::io::Read;
use std::path::Path;

use offlow_classifier::{Field, FlowKey, Match, PortRange, Rule, RuleId};
use offlow_flow::present;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Errors from the ClassBench loaders.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read (or decompressed).
    #[error("{file}: {source}")]
    Io {
        /// File name as given.
        file: String,
        /// Underlying error.
        source: std::io::Error,
    },
    /// A line could not be parsed.
    #[error("{file}:{line}: {reason}")]
    Parse {
        /// File name as given.
        file: String,
        /// 1-based line number.
        line: usize,
        /// What was wrong.
        reason: String,
    },
}

/// Which ClassBench dialect a file was written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// WUSTL PClassEval: 5-field rules, traces with the 1-based first match.
    Wustl,
    /// lyxocs/ruleSet: 7-field rules (flags column), traces with the
    /// 0-based generating rule.
    Lyxocs,
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Dialect::Wustl => "wustl-5field",
            Dialect::Lyxocs => "lyxocs-7field",
        })
    }
}

/// One ClassBench rule, as written in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CbRule {
    /// Source prefix address (host bits as written; masking happens later).
    pub src: u32,
    /// Source prefix length, 0..=32.
    pub src_len: u8,
    /// Destination prefix address.
    pub dst: u32,
    /// Destination prefix length, 0..=32.
    pub dst_len: u8,
    /// Source port range (`lo <= hi`).
    pub src_port: PortRange,
    /// Destination port range (`lo <= hi`).
    pub dst_port: PortRange,
    /// Protocol value.
    pub proto: u8,
    /// Protocol mask (0x00 wildcard, 0xFF exact in every ClassBench set).
    pub proto_mask: u8,
    /// TCP flags value/mask of the 7-field dialect; ignored for matching.
    pub flags: Option<(u16, u16)>,
}

fn prefix_mask(len: u8) -> u32 {
    // `len <= 32` by construction; checked_shl handles len == 0 (shift by 32).
    u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0)
}

impl CbRule {
    /// The classifier rule for the rule at 0-based position `index` of a set
    /// of `n` rules: `id = index`, `priority = n - index`.
    pub fn to_rule(&self, index: usize, n: usize) -> Rule {
        let mut m = Match::ANY;
        m.set_exact(Field::EthType, 0x0800);
        m.set_prefix(
            Field::Ipv4Src,
            u128::from(self.src),
            u32::from(self.src_len),
        );
        m.set_prefix(
            Field::Ipv4Dst,
            u128::from(self.dst),
            u32::from(self.dst_len),
        );
        if self.proto_mask != 0 {
            m.set_masked(
                Field::IpProto,
                u128::from(self.proto),
                u128::from(self.proto_mask),
            );
        }
        // Rule sets are far below 2^32 rules; saturate rather than wrap if not.
        let id = RuleId::try_from(index).unwrap_or(RuleId::MAX);
        let priority = u32::try_from(n.saturating_sub(index)).unwrap_or(u32::MAX);
        Rule::new(id, priority, m).with_ports(self.src_port, self.dst_port)
    }

    /// Does the header match this rule (file semantics, flags ignored)?
    /// Independent of [`Rule::matches`], so tests can cross-check the two.
    pub fn matches(&self, h: &Header) -> bool {
        let sm = prefix_mask(self.src_len);
        let dm = prefix_mask(self.dst_len);
        (h.src & sm) == (self.src & sm)
            && (h.dst & dm) == (self.dst & dm)
            && self.src_port.contains(h.src_port)
            && self.dst_port.contains(h.dst_port)
            && (h.proto & self.proto_mask) == (self.proto & self.proto_mask)
    }

    /// The 5-field line dpdk-test-acl reads (flags column dropped).
    pub fn to_5field(&self) -> String {
        format!(
            "@{}/{} {}/{} {} : {} {} : {} 0x{:02x}/0x{:02x}",
            std::net::Ipv4Addr::from(self.src),
            self.src_len,
            std::net::Ipv4Addr::from(self.dst),
            self.dst_len,
            self.src_port.lo,
            self.src_port.hi,
            self.dst_port.lo,
            self.dst_port.hi,
            self.proto,
            self.proto_mask
        )
    }
}

/// A parsed rule file.
#[derive(Debug, Clone)]
pub struct RuleSet {
    /// Dialect of the first rule line (all lines must agree).
    pub dialect: Dialect,
    /// Rules in file order (index = id).
    pub rules: Vec<CbRule>,
}

impl RuleSet {
    /// Classifier rules (`id = index`, `priority = N - index`).
    pub fn to_rules(&self) -> Vec<Rule> {
        let n = self.rules.len();
        self.rules
            .iter()
            .enumerate()
            .map(|(i, r)| r.to_rule(i, n))
            .collect()
    }

    /// The first rule (in file order) matching `h`, by a plain scan of the
    /// file's own semantics.
    pub fn first_match(&self, h: &Header) -> Option<RuleId> {
        self.rules
            .iter()
            .position(|r| r.matches(h))
            .and_then(|i| RuleId::try_from(i).ok())
    }
}

/// One packet header of a trace (the five ClassBench fields).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Header {
    /// IPv4 source.
    pub src: u32,
    /// IPv4 destination.
    pub dst: u32,
    /// Transport source port.
    pub src_port: u16,
    /// Transport destination port.
    pub dst_port: u16,
    /// IP protocol.
    pub proto: u8,
}

impl Header {
    /// The flow key of this header: eth_type 0x0800, IPv4 addresses,
    /// ip_proto, ports in the shared transport storage (`tcp_src`/`tcp_dst`),
    /// presence L3 | L4.
    pub fn to_key(&self) -> FlowKey {
        let mut k = FlowKey::ZERO;
        k.set(Field::EthType, 0x0800);
        k.set(Field::Ipv4Src, u128::from(self.src));
        k.set(Field::Ipv4Dst, u128::from(self.dst));
        k.set(Field::IpProto, u128::from(self.proto));
        k.set(Field::TcpSrc, u128::from(self.src_port));
        k.set(Field::TcpDst, u128::from(self.dst_port));
        k.add_presence(present::L3 | present::L4);
        k
    }

    /// The `sip dip sp dp proto` decimal line dpdk-test-acl reads.
    pub fn to_trace_line(&self) -> String {
        format!(
            "{} {} {} {} {}",
            self.src, self.dst, self.src_port, self.dst_port, self.proto
        )
    }
}

/// A parsed header trace.
#[derive(Debug, Clone)]
pub struct Trace {
    /// Dialect of the first line.
    pub dialect: Dialect,
    /// Headers in file order.
    pub headers: Vec<Header>,
    /// WUSTL only: the expected first match of each header (0-based id,
    /// `None` for "no rule matches").
    pub expected: Option<Vec<Option<RuleId>>>,
    /// lyxocs only: the 0-based rule each header was generated from.
    pub generating: Option<Vec<RuleId>>,
}

impl Trace {
    /// Flow keys of every header.
    pub fn keys(&self) -> Vec<FlowKey> {
        self.headers.iter().map(Header::to_key).collect()
    }
}

/// Read a whole file, transparently gunzipping it when it starts with the
/// gzip magic bytes.
pub fn read_maybe_gz(path: &Path) -> Result<Vec<u8>, LoadError> {
    let io = |source| LoadError::Io {
        file: path.display().to_string(),
        source,
    };
    let raw = std::fs::read(path).map_err(io)?;
    gunzip_if_needed(&raw).map_err(io)
}

/// `raw` itself, or its decompression when it is gzip data.
pub fn gunzip_if_needed(raw: &[u8]) -> std::io::Result<Vec<u8>> {
    if raw.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::with_capacity(raw.len() * 4);
        flate2::read::MultiGzDecoder::new(raw).read_to_end(&mut out)?;
        Ok(out)
    } else {
        Ok(raw.to_vec())
    }
}

/// Lines to parse: (1-based line number, trimmed text), skipping blank lines
/// and `#` comments.
fn content_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
}

fn parse_prefix(tok: &str, what: &str) -> Result<(u32, u8), String> {
    let (addr, len) = tok
        .split_once('/')
        .ok_or_else(|| format!("{what} `{tok}`: expected ADDR/LEN"))?;
    let addr: std::net::Ipv4Addr = addr
        .parse()
        .map_err(|_| format!("{what} `{tok}`: bad IPv4 address"))?;
    let len: u8 = len
        .parse()
        .ok()
        .filter(|&l| l <= 32)
        .ok_or_else(|| format!("{what} `{tok}`: prefix length must be 0..=32"))?;
    Ok((u32::from(addr), len))
}

fn parse_port_range(lo: &str, colon: &str, hi: &str, what: &str) -> Result<PortRange, String> {
    if colon != ":" {
        return Err(format!(
            "{what}: expected `LO : HI`, found `{lo} {colon} {hi}`"
        ));
    }
    let p = |s: &str| {
        s.parse::<u16>()
            .map_err(|_| format!("{what}: `{s}` is not a port (0..=65535)"))
    };
    let (lo, hi) = (p(lo)?, p(hi)?);
    if lo > hi {
        return Err(format!("{what}: empty range {lo} : {hi}"));
    }
    Ok(PortRange { lo, hi })
}

fn parse_hex_u16(s: &str) -> Option<u16> {
    let digits = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X"))?;
    u16::from_str_radix(digits, 16).ok()
}

fn parse_value_mask(tok: &str, what: &str) -> Result<(u16, u16), String> {
    let (v, m) = tok
        .split_once('/')
        .ok_or_else(|| format!("{what} `{tok}`: expected 0xVALUE/0xMASK"))?;
    match (parse_hex_u16(v), parse_hex_u16(m)) {
        (Some(v), Some(m)) => Ok((v, m)),
        _ => Err(format!("{what} `{tok}`: expected 0xVALUE/0xMASK in hex")),
    }
}

/// Parse one rule line (already trimmed, non-empty).
fn parse_rule_line(line: &str) -> Result<(CbRule, Dialect), String> {
    let body = line
        .strip_prefix('@')
        .ok_or_else(|| "rule line must start with `@`".to_string())?;
    let t: Vec<&str> = body.split_whitespace().collect();
    let dialect = match t.len() {
        9 => Dialect::Wustl,
        10 => Dialect::Lyxocs,
        n => {
            return Err(format!(
                "expected 9 tokens (5-field) or 10 (7-field), found {n}"
            ))
        }
    };
    let (src, src_len) = parse_prefix(t[0], "source prefix")?;
    let (dst, dst_len) = parse_prefix(t[1], "destination prefix")?;
    let src_port = parse_port_range(t[2], t[3], t[4], "source port range")?;
    let dst_port = parse_port_range(t[5], t[6], t[7], "destination port range")?;
    let (proto, proto_mask) = parse_value_mask(t[8], "protocol")?;
    let (proto, proto_mask) = match (u8::try_from(proto), u8::try_from(proto_mask)) {
        (Ok(p), Ok(m)) => (p, m),
        _ => {
            return Err(format!(
                "protocol `{}`: value and mask must fit 8 bits",
                t[8]
            ))
        }
    };
    let flags = match t.get(9) {
        Some(f) => Some(parse_value_mask(f, "flags")?),
        None => None,
    };
    Ok((
        CbRule {
            src,
            src_len,
            dst,
            dst_len,
            src_port,
            dst_port,
            proto,
            proto_mask,
            flags,
        },
        dialect,
    ))
}

/// Parse a rule file's text; `file` names it in errors.
pub fn parse_rules(file: &str, text: &str) -> Result<RuleSet, LoadError> {
    let mut rules = Vec::new();
    let mut dialect = None;
    for (line, l) in content_lines(text) {
        let err = |reason: String| LoadError::Parse {
            file: file.to_string(),
            line,
            reason,
        };
        let (r, d) = parse_rule_line(l).map_err(err)?;
        match dialect {
            None => dialect = Some(d),
            Some(first) if first != d => {
                return Err(err(format!(
                    "{d} line in a {first} file (mixed rule formats)"
                )))
            }
            Some(_) => {}
        }
        rules.push(r);
    }
    let dialect = dialect.ok_or_else(|| LoadError::Parse {
        file: file.to_string(),
        line: 0,
        reason: "no rules in file".into(),
    })?;
    Ok(RuleSet { dialect, rules })
}

/// The text of a file's bytes (plain or gzip); invalid UTF-8 is reported
/// with the line it starts on.
fn decode_text(file: &str, raw: &[u8]) -> Result<String, LoadError> {
    let bytes = gunzip_if_needed(raw).map_err(|source| LoadError::Io {
        file: file.to_string(),
        source,
    })?;
    String::from_utf8(bytes).map_err(|e| {
        let valid = e.utf8_error().valid_up_to();
        LoadError::Parse {
            file: file.to_string(),
            line: 1 + e.as_bytes()[..valid]
                .iter()
                .filter(|&&b| b == b'\n')
                .count(),
            reason: "not UTF-8 text".into(),
        }
    })
}

/// Read a whole file, naming it in the error.
fn read_file(path: &Path) -> Result<(String, Vec<u8>), LoadError> {
    let name = path.display().to_string();
    let raw = std::fs::read(path).map_err(|source| LoadError::Io {
        file: name.clone(),
        source,
    })?;
    Ok((name, raw))
}

/// Parse rule-file bytes (plain text or gzip).
pub fn parse_rules_bytes(file: &str, raw: &[u8]) -> Result<RuleSet, LoadError> {
    parse_rules(file, &decode_text(file, raw)?)
}

/// Load a rule file (plain or .gz).
pub fn load_rules(path: &Path) -> Result<RuleSet, LoadError> {
    let (name, raw) = read_file(path)?;
    parse_rules_bytes(&name, &raw)
}

fn parse_trace_line(line: &str) -> Result<(Header, Dialect, u32), String> {
    let t: Vec<&str> = line.split_whitespace().collect();
    let dialect = match t.len() {
        6 => Dialect::Wustl,
        7 => Dialect::Lyxocs,
        n => {
            return Err(format!(
                "expected 6 fields (WUSTL) or 7 (lyxocs), found {n}"
            ))
        }
    };
    fn num<T: std::str::FromStr>(s: &str, what: &str) -> Result<T, String> {
        s.parse::<T>()
            .map_err(|_| format!("{what} `{s}`: not a decimal number in range"))
    }
    let h = Header {
        src: num(t[0], "source address")?,
        dst: num(t[1], "destination address")?,
        src_port: num(t[2], "source port")?,
        dst_port: num(t[3], "destination port")?,
        proto: num(t[4], "protocol")?,
    };
    if dialect == Dialect::Lyxocs {
        let _flags: u32 = num(t[5], "flags")?;
    }
    let rule: u32 = num(t[t.len() - 1], "rule index")?;
    Ok((h, dialect, rule))
}

/// Parse a trace file's text; `file` names it in errors.
pub fn parse_trace(file: &str, text: &str) -> Result<Trace, LoadError> {
    let mut headers = Vec::new();
    let mut ids = Vec::new();
    let mut dialect = None;
    for (line, l) in content_lines(text) {
        let err = |reason: String| LoadError::Parse {
            file: file.to_string(),
            line,
            reason,
        };
        let (h, d, id) = parse_trace_line(l).map_err(err)?;
        match dialect {
            None => dialect = Some(d),
            Some(first) if first != d => {
                return Err(err(format!(
                    "{d} trace line in a {first} trace (mixed formats)"
                )))
            }
            Some(_) => {}
        }
        headers.push(h);
        ids.push(id);
    }
    let dialect = dialect.ok_or_else(|| LoadError::Parse {
        file: file.to_string(),
        line: 0,
        reason: "no headers in trace".into(),
    })?;
    let (expected, generating) = match dialect {
        // 1-based first match; 0 means no rule matches.
        Dialect::Wustl => (Some(ids.iter().map(|&i| i.checked_sub(1)).collect()), None),
        Dialect::Lyxocs => (None, Some(ids)),
    };
    Ok(Trace {
        dialect,
        headers,
        expected,
        generating,
    })
}

/// Parse trace-file bytes (plain text or gzip).
pub fn parse_trace_bytes(file: &str, raw: &[u8]) -> Result<Trace, LoadError> {
    parse_trace(file, &decode_text(file, raw)?)
}

/// Load a trace file (plain or .gz).
pub fn load_trace(path: &Path) -> Result<Trace, LoadError> {
    let (name, raw) = read_file(path)?;
    parse_trace_bytes(&name, &raw)
}

/// A uniformly random value with the `len`-bit prefix of `addr`.
fn random_in_prefix(rng: &mut SmallRng, addr: u32, len: u8) -> u32 {
    let m = prefix_mask(len);
    (addr & m) | (rng.gen::<u32>() & !m)
}

/// Generate `count` headers from `rules`, seeded: header `i` is a random
/// point inside rule `i mod N` (random host bits, a uniform port in each
/// range, the rule's protocol when exact, otherwise one of TCP/UDP/ICMP or a
/// random byte). Its first match may be an earlier, overlapping rule; the
/// experiment computes expected answers with the oracle, never from here.
pub fn generate_headers(rules: &[CbRule], count: usize, seed: u64) -> Vec<Header> {
    let mut rng = SmallRng::seed_from_u64(seed);
    if rules.is_empty() {
        return Vec::new();
    }
    (0..count)
        .map(|i| {
            let r = &rules[i % rules.len()];
            let proto = if r.proto_mask == 0xff {
                r.proto
            } else {
                let free = match rng.gen_range(0..4u8) {
                    0 => 6,
                    1 => 17,
                    2 => 1,
                    _ => rng.gen(),
                };
                (r.proto & r.proto_mask) | (free & !r.proto_mask)
            };
            Header {
                src: random_in_prefix(&mut rng, r.src, r.src_len),
                dst: random_in_prefix(&mut rng, r.dst, r.dst_len),
                src_port: rng.gen_range(r.src_port.lo..=r.src_port.hi),
                dst_port: rng.gen_range(r.dst_port.lo..=r.dst_port.hi),
                proto,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use offlow_classifier::{Classify, LinearClassifier};

    #[test]
    fn prefix_mask_edges() {
        assert_eq!(prefix_mask(0), 0);
        assert_eq!(prefix_mask(8), 0xff00_0000);
        assert_eq!(prefix_mask(32), u32::MAX);
    }

    #[test]
    fn both_dialects_parse_to_the_same_rule() {
        let a = parse_rules("a", "@10.1.0.0/16 0.0.0.0/0 0 : 1023 80 : 80 0x06/0xFF\n").unwrap();
        let b = parse_rules(
            "b",
            "@10.1.0.0/16\t0.0.0.0/0\t0 : 1023\t80 : 80\t0x06/0xFF\t0x1000/0x1000\t\n",
        )
        .unwrap();
        assert_eq!(a.dialect, Dialect::Wustl);
        assert_eq!(b.dialect, Dialect::Lyxocs);
        assert_eq!(b.rules[0].flags, Some((0x1000, 0x1000)));
        assert_eq!(a.to_rules(), b.to_rules());
        let r = &a.to_rules()[0];
        assert_eq!((r.id, r.priority), (0, 1));
        assert_eq!(r.dst_port, PortRange::exact(80));
        assert_eq!(r.matcher.field(Field::IpProto), (6, 0xff));
    }

    #[test]
    fn generated_headers_fall_inside_their_rule_and_agree_with_classifier() {
        let set = parse_rules(
            "g",
            "@10.0.0.0/8 192.168.1.0/24 1000 : 2000 0 : 65535 0x00/0x00\n\
             @0.0.0.0/0 0.0.0.0/0 53 : 53 0 : 65535 0x11/0xFF\n\
             @1.2.3.4/32 5.6.7.8/32 0 : 65535 443 : 443 0x06/0xFF\n",
        )
        .unwrap();
        let hs = generate_headers(&set.rules, 300, 7);
        let mut c = LinearClassifier::new();
        for r in set.to_rules() {
            c.insert(r);
        }
        for (i, h) in hs.iter().enumerate() {
            assert!(set.rules[i % 3].matches(h), "{h:?}");
            assert_eq!(c.lookup(&h.to_key()), set.first_match(h));
        }
        assert_eq!(hs, generate_headers(&set.rules, 300, 7), "seeded");
    }
}
