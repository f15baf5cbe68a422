//! `offlow trace` end to end: the built binary on flow files (several
//! tables, goto, priorities, misses, TTL expiry, errors) and against a
//! running `offlow run` loaded by `ovs-ofctl`, whose trace must equal the
//! file's.
//!
//! Every child process is bounded in time and killed on the way out, pass
//! or fail ([`Daemon`]'s `Drop`, [`run_bounded`]). Without `ovs-ofctl` the
//! switch tests print a notice and pass, unless `CI` is set.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

#[allow(dead_code)] // each test file uses a subset of the harness
mod common;

use common::{can_run, ofctl, run_bounded, Daemon};

const FLOWS: &str = "\
# table 0: classify
table=0,priority=100,in_port=1,tcp,nw_dst=10.0.0.2,tp_dst=80,cookie=0x1,actions=mod_nw_src:1.2.3.4,write_metadata:0x5/0xff,goto_table:1
table=0,priority=200,in_port=1,tcp,nw_dst=10.0.0.2,tp_dst=22,cookie=0x2,actions=output:7
table=0,priority=10,in_port=1,ip,actions=write_actions(output:9),goto_table:2
table=0,priority=0,actions=CONTROLLER:128

# table 1: routing by metadata
table=1,priority=50,ip,metadata=0x5/0xff,actions=dec_ttl,write_actions(set_queue:3,output:2),goto_table:2
# table 2: tagging
table=2,priority=10,tcp,tp_dst=80,actions=mod_vlan_vid:7
table=2,priority=5,tcp,actions=clear_actions
";

/// A temporary file removed on drop.
struct TempFile(PathBuf);

impl TempFile {
    fn new(tag: &str, text: &str) -> TempFile {
        let p = std::env::temp_dir().join(format!(
            "offlow-trace-{tag}-{}-{:?}.flows",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::write(&p, text).expect("write temp file");
        TempFile(p)
    }

    fn path(&self) -> &str {
        self.0.to_str().expect("utf-8 temp path")
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `offlow trace ARGS`: (success, stdout, stderr).
fn trace(args: &[&str]) -> (bool, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_offlow"));
    cmd.arg("trace").args(args).env("RUST_BACKTRACE", "0");
    let o = run_bounded(cmd, Duration::from_secs(60));
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// `offlow trace --flows FILE PACKET`, required to succeed.
fn trace_file(file: &TempFile, packet: &str) -> String {
    let (ok, out, err) = trace(&["--flows", file.path(), packet]);
    assert!(ok, "trace {packet} failed: {err}\n{out}");
    eprintln!("--- trace {packet} ---\n{out}");
    out
}

#[test]
fn multi_table_path_with_rewrites() {
    let f = TempFile::new("path", FLOWS);
    let out = trace_file(
        &f,
        "in_port=1,tcp,nw_src=10.0.0.1,nw_dst=10.0.0.2,tp_dst=80",
    );
    assert!(out.contains("Rules: 7 in 3 tables"), "{out}");
    assert!(
        out.contains(" 0. priority=100,tcp,in_port=1,nw_dst=10.0.0.2,tp_dst=80, cookie=0x1"),
        "{out}"
    );
    assert!(out.contains("    write metadata: 0x5/0xff"), "{out}");
    assert!(
        out.contains(" 1. priority=50,ip,metadata=0x5/0xff"),
        "{out}"
    );
    assert!(
        out.contains("    write to action set: set_queue:3,output:2"),
        "{out}"
    );
    assert!(out.contains(" 2. priority=10,tcp,tp_dst=80"), "{out}");
    assert!(out.contains("Action set: set_queue:3,output:2\n"), "{out}");
    assert!(
        out.contains("Final actions: set_field:1.2.3.4->ipv4_src,dec_ttl,push_vlan:0x8100,set_field:4103->vlan_vid,set_queue:3,output:2\n"),
        "{out}"
    );
    assert!(out.contains("Outcome: forward"), "{out}");
    // The executor ran on the real frame: tag pushed, source rewritten,
    // TTL decremented, out of port 2 on queue 3.
    assert!(
        out.contains(" output to port 2 (64 bytes) queue 3: vlan_vid none -> 7, ipv4_src 10.0.0.1 -> 1.2.3.4, nw_ttl 64 -> 63"),
        "{out}"
    );
    assert!(out.contains("Verdict: done"), "{out}");
}

#[test]
fn trace_says_which_tier_serves_the_flow() {
    let f = TempFile::new("tier", FLOWS);
    // Port 80: set_queue on the way: stays in software, with the reason.
    let out = trace_file(
        &f,
        "in_port=1,tcp,nw_src=10.0.0.1,nw_dst=10.0.0.2,tp_dst=80",
    );
    assert!(
        out.contains(" offload: stays in software (action not offloadable: set_queue)"),
        "{out}"
    );
    // Port 22: a plain output: offloadable, the program shown.
    let out = trace_file(&f, "in_port=1,tcp,nw_dst=10.0.0.2,tp_dst=22");
    assert!(out.contains(" offload: offloadable;"), "{out}");
    assert!(out.contains("once it is hot: output:7\n"), "{out}");
    // Table 0's rules look at the port, protocol, destination address and
    // port: every source address and port shares one masked entry (of
    // untagged frames: the tag is always matched, as Open vSwitch's
    // megaflows show it).
    assert!(
        out.contains(" megaflow: one masked entry serves every microflow matching tcp,vlan_tci=0x0000/0x1fff,in_port=1,nw_dst=10.0.0.2,tp_dst=22 "),
        "{out}"
    );
    // ARP is outside the offloadable class.
    let out = trace_file(&f, "in_port=1,arp");
    assert!(
        out.contains(" offload: stays in software (outside the offloadable class: not IPv4)"),
        "{out}"
    );
}

#[test]
fn priorities_misses_and_table_miss_entries() {
    let f = TempFile::new("prio", FLOWS);
    // Port 22 also matches the priority-10 ip rule: 200 wins.
    let out = trace_file(&f, "in_port=1,tcp,nw_dst=10.0.0.2,tp_dst=22");
    assert!(out.contains(" 0. priority=200,"), "{out}");
    assert!(!out.contains(" 1. "), "{out}");
    assert!(
        out.contains(" output to port 7 (60 bytes): unchanged"),
        "{out}"
    );

    // UDP: table 0's ip rule, then nothing in table 2 and no table-miss
    // entry there: dropped, action set discarded.
    let out = trace_file(&f, "in_port=1,udp,nw_dst=10.0.0.3,tp_dst=53");
    assert!(out.contains(" 0. priority=10,ip,in_port=1"), "{out}");
    assert!(
        out.contains(" 2. table-miss: no match (no table-miss entry) -> drop"),
        "{out}"
    );
    assert!(out.contains("Action set: (empty)"), "{out}");
    assert!(out.contains("no match in table 2"), "{out}");
    assert!(out.contains(" no output"), "{out}");

    // TCP elsewhere: the write_actions(output:9) is cleared in table 2.
    let out = trace_file(&f, "in_port=1,tcp,nw_dst=10.0.0.3,tp_dst=443");
    assert!(out.contains(" 2. priority=5,tcp"), "{out}");
    assert!(out.contains("    clear action set"), "{out}");
    assert!(out.contains("Final actions: drop"), "{out}");
    assert!(out.contains("Outcome: drop"), "{out}");

    // Another port: the table-miss entry sends it to the controller.
    let out = trace_file(&f, "in_port=3,arp,arp_op=1");
    assert!(out.contains("(table-miss entry)"), "{out}");
    assert!(
        out.contains("packet-in (reason no_match) from the table-miss entry of table 0"),
        "{out}"
    );
    assert!(
        out.contains(
            " packet-in to the controller (60 bytes, reason no_match, table 0, cookie 0x0): \
             unchanged"
        ),
        "{out}"
    );
}

#[test]
fn ttl_expiry_flood_and_warnings() {
    let f = TempFile::new("ttl", FLOWS);
    let out = trace_file(&f, "in_port=1,tcp,nw_dst=10.0.0.2,tp_dst=80,nw_ttl=1");
    assert!(out.contains("Verdict: IP TTL expired"), "{out}");
    assert!(out.contains(" no output"), "{out}");

    let flood = TempFile::new("flood", "in_port=1,actions=FLOOD\n");
    let (ok, out, err) = trace(&["--flows", flood.path(), "--ports", "1,2,3", "in_port=1"]);
    assert!(ok, "{err}");
    assert!(out.contains("FLOOD: flood to ports [2, 3]"), "{out}");
    assert!(out.contains(" output to port 2 "), "{out}");
    assert!(out.contains(" output to port 3 "), "{out}");
    assert!(!out.contains(" output to port 1 "), "{out}");
    let (ok, out, _) = trace(&["--flows", flood.path(), "in_port=1"]);
    assert!(ok);
    assert!(out.contains("flood (no ports known"), "{out}");

    // A port without its protocol cannot be in the frame: say so.
    let (ok, out, _) = trace(&["--flows", flood.path(), "in_port=1,tp_dst=80"]);
    assert!(ok);
    assert!(out.contains("warning: tcp_dst=80 is not carried"), "{out}");
}

#[test]
fn json_report() {
    let f = TempFile::new("json", FLOWS);
    let (ok, out, err) = trace(&[
        "--flows",
        f.path(),
        "--json",
        "in_port=1,tcp,nw_src=10.0.0.1,nw_dst=10.0.0.2,tp_dst=80",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("valid JSON");
    let tables: Vec<u64> = v["tables"]
        .as_array()
        .expect("tables")
        .iter()
        .map(|t| t["table_id"].as_u64().expect("table_id"))
        .collect();
    assert_eq!(tables, vec![0, 1, 2]);
    assert_eq!(v["tables"][0]["rule"]["cookie"], 1);
    assert_eq!(v["tables"][1]["rule"]["goto_table"], 2);
    assert_eq!(v["outputs"][0]["port"], "2");
    assert_eq!(v["outputs"][0]["queue"], 3);
    assert_eq!(v["outcome"], "forward");
}

#[test]
fn errors_name_file_line_and_token() {
    let f = TempFile::new(
        "bad",
        "actions=drop\n\ntable=1,in_port=1,tcp,tp_dst=x80,actions=drop\n",
    );
    let (ok, _, err) = trace(&["--flows", f.path(), "in_port=1"]);
    assert!(!ok);
    assert!(
        err.contains(&format!("{}:3: `tp_dst=x80`", f.path())),
        "{err}"
    );
    // Syntax fine, refused by the pipeline's validation: still FILE:LINE.
    let f = TempFile::new("bad2", "actions=drop\nactions=dec_ttl\n");
    let (ok, _, err) = trace(&["--flows", f.path(), "in_port=1"]);
    assert!(!ok);
    assert!(err.contains(&format!("{}:2: refused", f.path())), "{err}");
    let f = TempFile::new("bad3", "actions=NORMAL\n");
    let (ok, _, err) = trace(&["--flows", f.path(), "in_port=1"]);
    assert!(!ok);
    assert!(err.contains("`NORMAL`: NORMAL is not supported"), "{err}");
    // The packet itself.
    let f = TempFile::new("ok", "actions=drop\n");
    let (ok, _, err) = trace(&["--flows", f.path(), "in_port=1,nw_dst=10.0.0.0/8"]);
    assert!(!ok);
    assert!(err.contains("FLOW `nw_dst=10.0.0.0/8`"), "{err}");
}

// ---------------------------------------------------------------------
// Against a running switch.

/// Whether `ovs-ofctl` can be used; without it, skip (or fail under CI:
/// install openvswitch-common).
fn have_ofctl() -> bool {
    can_run("the switch trace tests", false, &["ovs-ofctl"])
}

/// The report minus its "Rules:" line (which names the source).
fn body(report: &str) -> String {
    report
        .lines()
        .filter(|l| !l.starts_with("Rules:"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn switch_trace_equals_file_trace() {
    if !have_ofctl() {
        return;
    }
    let d = Daemon::start(&[]);
    let f = TempFile::new("switch", FLOWS);
    ofctl(&["add-flows", &d.target(), f.path()]);
    for packet in [
        "in_port=1,tcp,nw_src=10.0.0.1,nw_dst=10.0.0.2,tp_dst=80",
        "in_port=1,tcp,nw_dst=10.0.0.2,tp_dst=22",
        "in_port=1,udp,nw_dst=10.0.0.3,tp_dst=53",
        "in_port=3,arp,arp_op=1",
    ] {
        let (ok, from_switch, err) = trace(&["--switch", &d.target(), packet]);
        assert!(ok, "trace --switch {packet}: {err}");
        eprintln!("--- trace --switch {packet} ---\n{from_switch}");
        // offlow run has 8 tables by default; FEATURES says so.
        assert!(
            from_switch.contains("Rules: 7 in 8 tables"),
            "{from_switch}"
        );
        let (ok, from_file, err) = trace(&["--flows", f.path(), "--table-count", "8", packet]);
        assert!(ok, "{err}");
        assert_eq!(body(&from_switch), body(&from_file), "{packet}");
    }
}

#[test]
fn switch_dump_spanning_many_multipart_replies() {
    if !have_ofctl() {
        return;
    }
    let d = Daemon::start(&[]);
    // ~3000 flows are a few hundred KiB of flow stats: more than one
    // 64 KiB multipart reply, so OFPMPF_REPLY_MORE reassembly is exercised.
    let mut text = String::new();
    for i in 0..3000u32 {
        text.push_str(&format!(
            "priority=100,udp,nw_dst=10.{}.{}.1,tp_dst=53,actions=output:{}\n",
            i / 256,
            i % 256,
            i % 7 + 1
        ));
    }
    text.push_str("priority=0,actions=drop\n");
    let f = TempFile::new("many", &text);
    ofctl(&["add-flows", &d.target(), f.path()]);
    let (ok, out, err) = trace(&[
        "--switch",
        &d.target(),
        "in_port=9,udp,nw_dst=10.11.183.1,tp_dst=53",
    ]);
    assert!(ok, "{err}");
    eprintln!("{out}");
    assert!(out.contains("Rules: 3001 in 8 tables"), "{out}");
    let replies: usize = out
        .split(" flow-stats replies)")
        .next()
        .and_then(|s| s.rsplit('(').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no reply count in {out}"));
    assert!(replies > 1, "one reply only: REQ_MORE not exercised\n{out}");
    // 10.11.183.1 is the last flow, i = 2999 = 11 * 256 + 183: port
    // 2999 % 7 + 1 = 4.
    assert!(out.contains(" output to port 4 "), "{out}");
}

/// A packet-in names the entry that sent it: an ordinary entry of table 0
/// (reason action, its cookie) and, on the same path, table 1's table-miss
/// entry (reason no_match).
#[test]
fn packet_ins_name_their_entries() {
    let f = TempFile::new(
        "pin",
        "table=0,priority=7,udp,cookie=0x9,actions=CONTROLLER:64,goto_table:1\n\
         table=1,priority=0,cookie=0x77,actions=CONTROLLER:65535\n",
    );
    let out = trace_file(&f, "in_port=1,udp,tp_dst=9");
    assert!(
        out.contains("packet-in to the controller (60 bytes, reason action, table 0, cookie 0x9)"),
        "{out}"
    );
    assert!(
        out.contains("(60 bytes, reason no_match, table 1, cookie 0x77)"),
        "{out}"
    );
}
