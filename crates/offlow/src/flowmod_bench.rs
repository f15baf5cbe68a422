//! `offlow bench flow-mods`: how fast a switch takes flow-mods when the
//! controller does not wait between them.
//!
//! `ovs-ofctl add-flows` sends a barrier after every flow-mod and waits for
//! its reply, so its time is mostly round trips (the client's wakeups as
//! much as the switch's work). This client measures the switch instead: it
//! parses an ovs-ofctl flow file, encodes every flow-mod beforehand, then
//! writes them all back to back followed by one BARRIER_REQUEST, and times
//! from the first byte written to the barrier reply — the moment the switch
//! says every flow-mod is in force. Error replies are counted (a switch
//! that refuses a flow still has to answer it). Any OpenFlow 1.3 switch can
//! be measured (Open vSwitch through its `ptcp:` controller listener), so
//! the anchor runs with the same client and the same bytes.
//!
//! Thread-safety: a writer thread and the calling thread (reader) share the
//! socket through `try_clone`; nothing else is shared.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use offlow_openflow::{decode, encode_to_vec, frame_len, Body, Hello, Message};

/// Flags of `offlow bench flow-mods`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct FlowModArgs {
    /// Flow file in ovs-ofctl syntax (one flow per line).
    #[arg(long)]
    pub flows: PathBuf,
    /// Switch to load (repeatable), `tcp:HOST:PORT`; measured in order.
    #[arg(long = "switch", required = true)]
    pub switches: Vec<String>,
    /// Give up after this many seconds per switch.
    #[arg(long, default_value_t = 300)]
    pub timeout: u64,
    /// Print one JSON object as the last line.
    #[arg(long)]
    pub json: bool,
}

/// One switch's result.
#[derive(Debug, Clone)]
pub(crate) struct LoadResult {
    /// The target.
    pub switch: String,
    /// Flow-mods sent.
    pub flow_mods: usize,
    /// Error replies received.
    pub errors: usize,
    /// First byte written to barrier reply.
    pub elapsed: Duration,
}

impl LoadResult {
    /// Flow-mods per second.
    pub(crate) fn rate(&self) -> f64 {
        self.flow_mods as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

fn read_message(sock: &mut TcpStream, buf: &mut Vec<u8>) -> anyhow::Result<Message> {
    loop {
        if let Some(n) = frame_len(buf).map_err(|e| anyhow!("bad framing: {e:?}"))? {
            if buf.len() >= n {
                let m = decode(&buf[..n]).map_err(|e| anyhow!("undecodable message: {e:?}"));
                buf.drain(..n);
                return m;
            }
        }
        let mut chunk = [0u8; 64 * 1024];
        let k = sock.read(&mut chunk).context("reading from the switch")?;
        if k == 0 {
            bail!("the switch closed the connection");
        }
        buf.extend_from_slice(&chunk[..k]);
    }
}

/// Load the pre-encoded `batch` (flow-mods, then a barrier with
/// `barrier_xid`) into `target` and time it.
fn load(
    target: &str,
    batch: &[u8],
    n: usize,
    barrier_xid: u32,
    timeout: Duration,
) -> anyhow::Result<LoadResult> {
    let addr = crate::trace::fetch::target_addr(target)?;
    let mut sock = TcpStream::connect(&addr).with_context(|| format!("connecting to {addr}"))?;
    sock.set_nodelay(true)?;
    sock.set_read_timeout(Some(timeout))?;
    let hello = Message::new(
        0,
        Body::Hello(Hello {
            elements: Vec::new(),
        }),
    );
    sock.write_all(&encode_to_vec(&hello).map_err(|e| anyhow!("{e:?}"))?)?;
    let mut buf = Vec::new();
    loop {
        if let Body::Hello(_) = read_message(&mut sock, &mut buf)?.body {
            break;
        }
    }
    let mut writer = sock.try_clone()?;
    let bytes = batch.to_vec();
    let start = Instant::now();
    let w = std::thread::spawn(move || writer.write_all(&bytes));
    let mut errors = 0;
    loop {
        let m = read_message(&mut sock, &mut buf)?;
        match m.body {
            Body::BarrierReply if m.xid == barrier_xid => break,
            Body::Error(_) => errors += 1,
            Body::EchoRequest(d) => {
                let r = encode_to_vec(&Message::new(m.xid, Body::EchoReply(d)))
                    .map_err(|e| anyhow!("{e:?}"))?;
                sock.write_all(&r)?;
            }
            _ => {}
        }
    }
    let elapsed = start.elapsed();
    w.join()
        .map_err(|_| anyhow!("writer panicked"))?
        .context("writing flow-mods")?;
    Ok(LoadResult {
        switch: target.to_string(),
        flow_mods: n,
        errors,
        elapsed,
    })
}

/// Encode every flow of the file, then a barrier; returns the bytes, the
/// flow-mod count and the barrier's xid.
fn encode_file(args: &FlowModArgs) -> anyhow::Result<(Vec<u8>, usize, u32)> {
    let text = std::fs::read_to_string(&args.flows)
        .with_context(|| format!("reading {}", args.flows.display()))?;
    let shown = args.flows.display().to_string();
    let specs =
        offlow_openflow::ofctl::parse_flow_file(&text, &shown).map_err(|e| anyhow!("{e}"))?;
    let mut batch = Vec::new();
    for (i, (_, spec)) in specs.iter().enumerate() {
        let m = Message::new(i as u32 + 1, Body::FlowMod(spec.to_wire()));
        batch.extend(encode_to_vec(&m).map_err(|e| anyhow!("encoding line {i}: {e:?}"))?);
    }
    let barrier_xid = specs.len() as u32 + 1;
    batch.extend(
        encode_to_vec(&Message::new(barrier_xid, Body::BarrierRequest))
            .map_err(|e| anyhow!("{e:?}"))?,
    );
    Ok((batch, specs.len(), barrier_xid))
}

/// Run the measurement.
pub(crate) fn main(args: &FlowModArgs) -> anyhow::Result<()> {
    let (batch, n, barrier_xid) = encode_file(args)?;
    println!(
        "flow-mods: {n} from {} ({} bytes), pipelined, one barrier at the end",
        args.flows.display(),
        batch.len()
    );
    let mut results = Vec::new();
    for t in &args.switches {
        let r = load(t, &batch, n, barrier_xid, Duration::from_secs(args.timeout))?;
        println!(
            "{:<28} {:>8.3} s  {:>10.0} flow-mods/s  errors {}",
            r.switch,
            r.elapsed.as_secs_f64(),
            r.rate(),
            r.errors
        );
        results.push(r);
    }
    if args.json {
        let rows: Vec<serde_json::Value> = results
            .iter()
            .map(|r| {
                serde_json::json!({
                    "switch": r.switch, "flow_mods": r.flow_mods, "errors": r.errors,
                    "seconds": r.elapsed.as_secs_f64(), "rate": r.rate(),
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({"experiment": "flow-mods", "flow_mods": n, "rows": rows})
        );
    }
    Ok(())
}
