//! Fetch a running switch's flow tables over OpenFlow 1.3: a minimal,
//! blocking controller session (HELLO, FEATURES for `n_tables`, one
//! `OFPMP_FLOW` dump of every table reassembled across `OFPMPF_REPLY_MORE`
//! parts, then `OFPMP_PORT_DESC` for FLOOD/ALL expansion), so
//! `offlow trace --switch` can rebuild the pipeline locally.
//!
//! Every read has a timeout and the session has an overall deadline, so a
//! silent or misbehaving switch cannot hang the command. Echo requests from
//! the switch are answered; unrelated messages are skipped.
//!
//! Thread-safety: one blocking socket, owned by the caller's thread.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use offlow_datapath::PortInfo;
use offlow_openflow::multipart::OFPMPF_MORE;
use offlow_openflow::port::{OFPPC_NO_FLOOD, OFPPC_NO_FWD, OFPPS_BLOCKED};
use offlow_openflow::{
    decode, encode_to_vec, frame_len, Body, FlowStats, FlowStatsRequest, Hello, Message,
    MultipartReplyBody, MultipartRequest, MultipartRequestBody, OxmMatch,
};
use offlow_pipeline::{PortNo, GROUP_ANY, TABLE_ALL};

/// What the switch told us.
#[derive(Debug)]
pub(crate) struct SwitchDump {
    /// `n_tables` from the FEATURES reply.
    pub n_tables: u8,
    /// Every flow entry, in the order received.
    pub flows: Vec<FlowStats>,
    /// Multipart reply messages the dump took.
    pub replies: usize,
    /// The switch's ports (from `OFPMP_PORT_DESC`), for FLOOD/ALL.
    pub ports: Vec<PortInfo>,
    /// Its groups (from `OFPMP_GROUP_DESC`; none from a switch that
    /// answers the request with an error).
    pub groups: Vec<offlow_openflow::GroupDesc>,
    /// Its meters (from `OFPMP_METER_CONFIG` for `OFPM_ALL`; none from a
    /// switch that answers with an error).
    pub meters: Vec<offlow_openflow::MeterConfig>,
}

/// A blocking OpenFlow 1.3 session.
struct Session {
    sock: TcpStream,
    buf: Vec<u8>,
    deadline: Instant,
    next_xid: u32,
}

impl Session {
    fn send(&mut self, body: Body) -> anyhow::Result<u32> {
        let xid = self.next_xid;
        self.next_xid = self.next_xid.wrapping_add(1);
        let bytes = encode_to_vec(&Message::new(xid, body)).context("encode request")?;
        self.sock.write_all(&bytes).context("send to switch")?;
        Ok(xid)
    }

    /// The next message, answering echo requests on the way.
    fn recv(&mut self) -> anyhow::Result<Message> {
        loop {
            if let Some(n) = frame_len(&self.buf).map_err(|e| anyhow!("bad framing: {e:?}"))? {
                if self.buf.len() >= n {
                    let msg = decode(&self.buf[..n]);
                    self.buf.drain(..n);
                    let msg = msg.map_err(|e| anyhow!("undecodable message: {e:?}"))?;
                    if let Body::EchoRequest(data) = &msg.body {
                        let reply = Message::new(msg.xid, Body::EchoReply(data.clone()));
                        let bytes = encode_to_vec(&reply).context("encode echo reply")?;
                        self.sock.write_all(&bytes).context("send echo reply")?;
                        continue;
                    }
                    return Ok(msg);
                }
            }
            let left = self.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                bail!("timed out waiting for the switch");
            }
            self.sock.set_read_timeout(Some(left))?;
            let mut chunk = [0u8; 64 * 1024];
            let n = self.sock.read(&mut chunk).context("read from switch")?;
            if n == 0 {
                bail!("the switch closed the connection");
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Wait for the reply to `xid`, failing on an error reply.
    fn reply(&mut self, xid: u32) -> anyhow::Result<Message> {
        let m = self.reply_or_error(xid)?;
        if let Body::Error(e) = &m.body {
            bail!("the switch answered with an error: {e:?}");
        }
        Ok(m)
    }

    /// Wait for the reply to `xid`, an error reply included.
    fn reply_or_error(&mut self, xid: u32) -> anyhow::Result<Message> {
        loop {
            let m = self.recv()?;
            if m.xid == xid {
                return Ok(m);
            }
        }
    }

    /// Send a multipart request and hand each part's body to `take` until
    /// the last (§7.3.5: parts with OFPMPF_REPLY_MORE are followed by
    /// more); returns the number of parts. With `optional`, an error reply
    /// means the switch has none of these (zero parts) rather than a
    /// failure.
    fn multipart(
        &mut self,
        body: MultipartRequestBody,
        optional: bool,
        mut take: impl FnMut(MultipartReplyBody) -> anyhow::Result<()>,
    ) -> anyhow::Result<usize> {
        let xid = self.send(Body::MultipartRequest(MultipartRequest { flags: 0, body }))?;
        let mut parts = 0;
        loop {
            let m = self.reply_or_error(xid)?;
            let r = match m.body {
                Body::MultipartReply(r) => r,
                Body::Error(_) if optional && parts == 0 => return Ok(0),
                Body::Error(e) => bail!("the switch answered with an error: {e:?}"),
                other => bail!("expected a MULTIPART_REPLY, got {other:?}"),
            };
            parts += 1;
            take(r.body)?;
            if r.flags & OFPMPF_MORE == 0 {
                return Ok(parts);
            }
        }
    }
}

/// Parse `tcp:HOST:PORT` (or `HOST:PORT`) into a socket address string.
pub(crate) fn target_addr(target: &str) -> anyhow::Result<String> {
    let rest = target.strip_prefix("tcp:").unwrap_or(target);
    let (host, port) = rest
        .rsplit_once(':')
        .ok_or_else(|| anyhow!("--switch {target}: expected tcp:HOST:PORT"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| anyhow!("--switch {target}: bad port `{port}`"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Ok(if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    })
}

/// Connect to `target`, negotiate OpenFlow 1.3 and dump every flow.
pub(crate) fn fetch(target: &str, timeout: Duration) -> anyhow::Result<SwitchDump> {
    let addr = target_addr(target)?;
    let sock = {
        use std::net::ToSocketAddrs;
        let sa = addr
            .to_socket_addrs()
            .with_context(|| format!("resolve {addr}"))?
            .next()
            .ok_or_else(|| anyhow!("{addr}: no address"))?;
        TcpStream::connect_timeout(&sa, timeout).with_context(|| format!("connect to {addr}"))?
    };
    sock.set_nodelay(true)?;
    sock.set_write_timeout(Some(timeout))?;
    let mut s = Session {
        sock,
        buf: Vec::new(),
        deadline: Instant::now() + timeout,
        next_xid: 1,
    };
    s.send(Body::Hello(Hello::of13()))?;
    // §6.3.1: the peer's HELLO comes first.
    let hello = s.recv()?;
    if !matches!(hello.body, Body::Hello(_)) {
        bail!("expected HELLO from the switch, got {:?}", hello.body);
    }
    let xid = s.send(Body::FeaturesRequest)?;
    let n_tables = match s.reply(xid)?.body {
        Body::FeaturesReply(f) => f.n_tables,
        other => bail!("expected FEATURES_REPLY, got {other:?}"),
    };
    let flow_request = MultipartRequestBody::Flow(FlowStatsRequest {
        table_id: TABLE_ALL,
        out_port: PortNo::ANY.0,
        out_group: GROUP_ANY,
        cookie: 0,
        cookie_mask: 0,
        matcher: OxmMatch::any(),
    });
    let mut flows = Vec::new();
    let replies = s.multipart(flow_request, false, |b| match b {
        MultipartReplyBody::Flow(v) => {
            flows.extend(v);
            Ok(())
        }
        other => bail!("expected flow stats, got {other:?}"),
    })?;
    let mut ports = Vec::new();
    s.multipart(MultipartRequestBody::PortDesc, false, |b| match b {
        MultipartReplyBody::PortDesc(v) => {
            ports.extend(
                v.iter()
                    // LOCAL is not a FLOOD/ALL target (§4.5: standard ports).
                    .filter(|p| PortNo(p.port_no).is_physical())
                    .map(|p| PortInfo {
                        port: p.port_no,
                        no_fwd: p.config & OFPPC_NO_FWD != 0,
                        no_flood: p.config & OFPPC_NO_FLOOD != 0 || p.state & OFPPS_BLOCKED != 0,
                    }),
            );
            Ok(())
        }
        other => bail!("expected port descriptions, got {other:?}"),
    })?;
    // A switch without groups or meters may refuse these requests.
    let mut groups = Vec::new();
    s.multipart(MultipartRequestBody::GroupDesc, true, |b| match b {
        MultipartReplyBody::GroupDesc(v) => {
            groups.extend(v);
            Ok(())
        }
        other => bail!("expected group descriptions, got {other:?}"),
    })?;
    let mut meters = Vec::new();
    let all = offlow_openflow::meter::meter_id::ALL;
    s.multipart(MultipartRequestBody::MeterConfig(all), true, |b| match b {
        MultipartReplyBody::MeterConfig(v) => {
            meters.extend(v);
            Ok(())
        }
        other => bail!("expected meter configurations, got {other:?}"),
    })?;
    Ok(SwitchDump {
        n_tables,
        flows,
        replies,
        ports,
        groups,
        meters,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        assert_eq!(target_addr("tcp:127.0.0.1:6653").unwrap(), "127.0.0.1:6653");
        assert_eq!(target_addr("localhost:1").unwrap(), "localhost:1");
        assert_eq!(target_addr("tcp:[::1]:6653").unwrap(), "[::1]:6653");
        assert!(target_addr("tcp:host").is_err());
        assert!(target_addr("tcp:host:99999").is_err());
    }
}
