//! Golden vectors: one hex file per message kind in `tests/golden/`,
//! produced by our encoder (regenerate with `OFFLOW_BLESS=1 cargo test -p
//! offlow-openflow --test golden`), checked for stability, for decoding back
//! to the sample, and cross-checked by Open vSwitch's `ovs-ofctl ofp-print`
//! (and Wireshark's `tshark`, when installed).

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{hex, samples, unhex};
use offlow_openflow::{decode, encode_to_vec};
use offlow_testkit::{tcp_flags, FrameBuilder};

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

#[test]
fn golden_vectors_are_stable() {
    let bless = std::env::var_os("OFFLOW_BLESS").is_some();
    for (name, msg) in samples() {
        let bytes = encode_to_vec(&msg).unwrap();
        let path = golden_dir().join(format!("{name}.hex"));
        if bless {
            std::fs::write(&path, format!("{}\n", hex(&bytes))).unwrap();
        }
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (run with OFFLOW_BLESS=1)", path.display()));
        let golden = unhex(&text);
        assert_eq!(hex(&golden), hex(&bytes), "{name}: encoder output changed");
        assert_eq!(
            decode(&golden).unwrap(),
            msg,
            "{name}: decodes to the sample"
        );
    }
}

/// Run a tool if present; `None` (with a notice) when absent outside CI.
fn tool_available(tool: &str) -> bool {
    let ok = Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        if std::env::var_os("CI").is_some() {
            panic!("{tool} not installed (required when CI is set)");
        }
        eprintln!("notice: {tool} not installed; skipping cross-check");
    }
    ok
}

/// Markers of a decode problem in ovs-ofctl output.
const OVS_BAD: [&str; 5] = ["***", "|WARN|", "|ERR|", "decode error", "truncated"];

/// How ovs-ofctl titles the sample called `name` (its first words).
fn ovs_title(name: &str) -> String {
    if name == "experimenter" {
        return "NXT_TLV_TABLE_REQUEST (OF1.3)".into();
    }
    match name.strip_prefix("mp_") {
        Some(rest) => {
            let (kind, dir) = rest.rsplit_once('_').expect("mp_<kind>_<request|reply>");
            let kind = if kind == "port_stats" { "port" } else { kind };
            format!("OFPST_{} {dir} (OF1.3)", kind.to_uppercase())
        }
        None => format!("OFPT_{} (OF1.3)", name.to_uppercase()),
    }
}

#[test]
fn ovs_ofctl_prints_golden_vectors_cleanly() {
    if !tool_available("ovs-ofctl") {
        return;
    }
    let mut failures = Vec::new();
    for (name, msg) in samples() {
        let text = std::fs::read_to_string(golden_dir().join(format!("{name}.hex"))).unwrap();
        let out = Command::new("ovs-ofctl")
            .args(["ofp-print", text.trim()])
            .output()
            .expect("ran ovs-ofctl");
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let want = ovs_title(name);
        let xid = format!("(xid={:#x})", msg.xid);
        if !out.status.success()
            || OVS_BAD.iter().any(|b| all.contains(b))
            || !all.starts_with(&want)
            || !all.contains(&xid)
        {
            failures.push(format!("{name} (want {want:?} {xid}):\n{all}"));
        }
    }
    assert!(
        failures.is_empty(),
        "ovs-ofctl complaints:\n{}",
        failures.join("\n")
    );
}

/// One Ethernet/IPv4/TCP frame carrying `payload` from `sport` to 16653
/// over loopback addresses (seq 1, ack 1, PSH|ACK).
fn tcp_frame(sport: u16, payload: &[u8]) -> Vec<u8> {
    FrameBuilder::eth([2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1])
        .ipv4([127, 0, 0, 1], [127, 0, 0, 1])
        .ident(1)
        .dont_frag()
        .tcp(sport, 16653)
        .tcp_seq_ack(1, 1)
        .tcp_flags(tcp_flags::PSH | tcp_flags::ACK)
        .payload(payload)
        .build()
}

/// A classic pcap file (microsecond, Ethernet) holding `frames`.
fn pcap(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    p.extend_from_slice(&2u16.to_le_bytes());
    p.extend_from_slice(&4u16.to_le_bytes());
    p.extend_from_slice(&[0; 8]);
    p.extend_from_slice(&65535u32.to_le_bytes());
    p.extend_from_slice(&1u32.to_le_bytes());
    for (i, f) in frames.iter().enumerate() {
        p.extend_from_slice(&(i as u32).to_le_bytes());
        p.extend_from_slice(&0u32.to_le_bytes());
        p.extend_from_slice(&(f.len() as u32).to_le_bytes());
        p.extend_from_slice(&(f.len() as u32).to_le_bytes());
        p.extend_from_slice(f);
    }
    p
}

#[test]
fn tshark_dissects_golden_vectors_cleanly() {
    if !tool_available("tshark") {
        return;
    }
    let samples = samples();
    // One TCP stream per message (distinct source ports) so that each
    // segment is exactly one OpenFlow PDU.
    let frames: Vec<Vec<u8>> = samples
        .iter()
        .enumerate()
        .map(|(i, (_, m))| tcp_frame(40000 + i as u16, &encode_to_vec(m).unwrap()))
        .collect();
    let path = std::env::temp_dir().join(format!(
        "offlow-openflow-golden-{}.pcap",
        std::process::id()
    ));
    std::fs::write(&path, pcap(&frames)).unwrap();
    let out = Command::new("tshark")
        .arg("-r")
        .arg(&path)
        .args([
            "-o",
            "tcp.check_checksum:FALSE",
            "-d",
            "tcp.port==16653,openflow",
            "-V",
        ])
        .output()
        .expect("ran tshark");
    let _ = std::fs::remove_file(&path);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Split the verbose output per frame and name offending samples.
    let mut failures = Vec::new();
    let mut seen = 0;
    for chunk in text.split("\nFrame ").skip_while(|c| c.is_empty()) {
        let Some(num) = chunk
            .trim_start_matches("Frame ")
            .split(':')
            .next()
            .and_then(|n| n.trim().parse::<usize>().ok())
        else {
            continue;
        };
        seen += 1;
        let name = samples.get(num - 1).map_or("?", |s| s.0);
        if !chunk.contains("OpenFlow") {
            failures.push(format!("{name}: not dissected as OpenFlow"));
        }
        for line in chunk.lines() {
            if line.contains("Malformed")
                || line.contains("Expert Info (Warning")
                || line.contains("Expert Info (Error")
                || line.contains("Undecoded")
            {
                failures.push(format!("{name}: {}", line.trim()));
            }
        }
    }
    assert_eq!(seen, samples.len(), "tshark printed every frame");
    assert!(
        failures.is_empty(),
        "tshark complaints:\n{}",
        failures.join("\n")
    );
}
