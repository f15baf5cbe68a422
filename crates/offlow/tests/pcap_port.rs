//! `offlow run` with capture ports: a real capture (shared/data/pcap) is
//! replayed into port 1 through flows loaded with `--flows`; what port 2
//! transmits is written to a capture and compared, frame by frame and in
//! order, with a simple reference classification of the input. Needs no
//! root (no interfaces). `ovs-ofctl` reads the counters; without it the
//! test skips (fails under CI).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use offlow_io::pcap::PcapReader;

#[allow(dead_code)] // each test file uses a subset of the harness
mod common;

use common::{can_run, number_after, ofctl_output, skip_or_fail, Daemon, OFCTL_TIMEOUT};

/// A capture from the shared data set, or `None` after a skip notice.
fn capture(name: &str) -> Option<PathBuf> {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut dirs = Vec::new();
    if let Some(d) = std::env::var_os("OFFLOW_DATA_DIR") {
        dirs.push(PathBuf::from(d).join("pcap"));
    }
    dirs.push(repo.join("../shared/data/pcap"));
    let found = dirs.iter().map(|d| d.join(name)).find(|p| p.exists());
    if found.is_none() {
        skip_or_fail(
            "the capture replay",
            &format!("{name} not found in {dirs:?}"),
        );
    }
    found
}

/// The reference: TCP goes to port 2, UDP is dropped, anything else goes
/// to port 2 (the flows below, read by hand).
fn expected_out(frame: &[u8]) -> bool {
    let et = |at: usize| {
        frame
            .get(at..at + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
    };
    let mut l3 = 14;
    let mut ethertype = et(12);
    while matches!(ethertype, Some(0x8100) | Some(0x88a8)) {
        ethertype = et(l3 + 2);
        l3 += 4;
    }
    let proto = match ethertype {
        Some(0x0800) => frame.get(l3 + 9).copied(),
        Some(0x86dd) => frame.get(l3 + 6).copied(),
        _ => None,
    };
    proto != Some(17)
}

#[test]
fn a_capture_replays_through_the_flow_tables_into_a_capture() {
    let Some(input) = capture("SkypeIRC.cap") else {
        return;
    };
    if !can_run("the capture replay", false, &["ovs-ofctl"]) {
        return;
    }
    let dir = std::env::temp_dir().join(format!("offlow-pcap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let flows = dir.join("flows.txt");
    std::fs::write(
        &flows,
        "# TCP out, UDP dropped, the rest out\n\
         priority=10,tcp,actions=output:2\n\
         priority=10,tcp6,actions=output:2\n\
         priority=5,udp,actions=drop\n\
         priority=5,udp6,actions=drop\n\
         priority=1,actions=output:2\n",
    )
    .unwrap();
    let out = dir.join("out.pcap");
    let input_port = format!("pcap:{}", input.display());
    let output_port = format!("pcap::{}", out.display());
    let mut d = Daemon::start(&[
        "--flows",
        flows.to_str().expect("utf-8 temp path"),
        "--port",
        &input_port,
        "--port",
        &output_port,
    ]);
    let target = d.target();
    let bytes = std::fs::read(&input).unwrap();
    let mut r = PcapReader::new(&bytes).unwrap();
    let mut frames = Vec::new();
    while let Some(rec) = r.next_record() {
        frames.push(rec.unwrap().data.to_vec());
    }
    // Every frame matches exactly one flow: wait until the flows have
    // counted them all.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let o = ofctl_output(OFCTL_TIMEOUT, &["dump-aggregate", &target]);
        let text = String::from_utf8_lossy(&o.stdout);
        if number_after(&text, "packet_count=") == Some(frames.len() as u64) {
            break;
        }
        if let Ok(Some(st)) = d.child.try_wait() {
            panic!("offlow exited: {st}");
        }
        assert!(Instant::now() < deadline, "replay incomplete: {text}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // SIGTERM: the worker flushes and the file is complete.
    // SAFETY: kill(2) on our own child.
    unsafe {
        libc::kill(d.child.id() as i32, libc::SIGTERM);
    }
    let st = d.child.wait().unwrap();
    assert!(st.success(), "{st}");
    let written = std::fs::read(&out).unwrap();
    let mut r = PcapReader::new(&written).unwrap();
    let mut got = Vec::new();
    while let Some(rec) = r.next_record() {
        got.push(rec.unwrap().data.to_vec());
    }
    let want: Vec<Vec<u8>> = frames.into_iter().filter(|f| expected_out(f)).collect();
    assert!(want.len() > 100, "the capture has TCP and non-UDP traffic");
    assert_eq!(got.len(), want.len(), "frames out");
    assert!(got == want, "the same frames, byte for byte, in order");
    let _ = std::fs::remove_dir_all(&dir);
}
