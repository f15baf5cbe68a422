//! Per-flow steering to a chosen worker (`offlow_workers:MASK`) through a
//! real switch: `offlow run --workers 2 --flows FILE` between two veth
//! ports in network namespaces, UDP from host a steered to worker 1,
//! everything else port to port. The per-worker counters come from the
//! `worker stopped` lines the data plane logs when the switch stops
//! (SIGTERM).
//!
//! Needs root, `ip` and `ethtool`; without them the test prints a notice
//! and passes, unless `CI` is set (then it fails).

use std::time::{Duration, Instant};

#[allow(dead_code)] // each test file uses a subset of the harness
mod common;

use common::{can_run, number_after, tcp_transfer, udp, Daemon, Net};

const OFFLOADS: &[&str] = &["tso", "off", "gso", "off"];

/// UDP datagrams sent, and from how many source ports (flows).
const UDP_PACKETS: usize = 1500;
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
const UDP_SOURCES: u16 = 16;

/// Per-worker counters parsed from one `worker stopped` log line.
#[derive(Debug, Default, Clone, Copy)]
struct WorkerLine {
    packets: u64,
    steered_out: u64,
    steered_in: u64,
    steer_dropped: u64,
}

fn worker_lines(log: &str) -> Vec<(u64, WorkerLine)> {
    log.lines()
        .filter(|l| l.contains("worker stopped"))
        .map(|l| {
            let n = |k: &str| number_after(l, k).unwrap_or_else(|| panic!("no {k} in {l}"));
            (
                n("worker="),
                WorkerLine {
                    packets: n("packets="),
                    steered_out: n("steered_out="),
                    steered_in: n("steered_in="),
                    steer_dropped: n("drop_steer_inbox_full="),
                },
            )
        })
        .collect()
}

/// What one run of the switch showed.
struct Run {
    /// UDP datagrams that arrived at host b.
    got: usize,
    w0: WorkerLine,
    w1: WorkerLine,
}

/// Run `offlow run --workers 2` on `net` with the flow file `flows` and,
/// if given, the configuration file `config`; ping both ways, send UDP
/// from host a (16 source ports) and 1 MiB of TCP, stop with SIGTERM and
/// return the traffic and per-worker figures.
fn run_switch(net: &Net, flows: &str, config: Option<&str>) -> Run {
    // One switch at a time: three 2-worker switches plus their traffic on
    // two cores starve each other's threads and lose datagrams in the
    // hosts (seen under load), which is not what these tests are about.
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = std::env::temp_dir().join(format!("offlow-steer-{}-{}", std::process::id(), net.sw));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let flows_path = dir.join("flows.txt");
    std::fs::write(&flows_path, flows).expect("write flows");
    let config_path = dir.join("switch.toml");
    let mut args = vec![
        "--netns".to_string(),
        net.sw.clone(),
        "--port".into(),
        net.ports[0].clone(),
        "--port".into(),
        net.ports[1].clone(),
        "--workers".into(),
        "2".into(),
        "--flows".into(),
        flows_path.to_str().expect("utf-8 path").into(),
    ];
    if let Some(c) = config {
        std::fs::write(&config_path, c).expect("write config");
        args.push("--config".into());
        args.push(config_path.to_str().expect("utf-8 path").into());
    }
    let (mut d, log_reader) = Daemon::start_logged(&args);

    assert!(net.ping(0, "10.0.0.2", 3), "ping through the switch");
    let got = udp(net, UDP_PACKETS, UDP_SOURCES, 32);
    assert!(
        got + UDP_PACKETS / 50 >= UDP_PACKETS,
        "UDP: {got} of {UDP_PACKETS} arrived"
    );
    assert!(tcp_transfer(net, 1 << 20), "1 MiB of TCP arrives intact");
    assert!(net.ping(1, "10.0.0.1", 2), "ping the other way");

    // Stop it cleanly so the workers log their final counters.
    // SAFETY: kill(2) on our own child's pid; no memory is involved.
    let rc = unsafe { libc::kill(d.child.id() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(rc, 0, "SIGTERM: {}", std::io::Error::last_os_error());
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(st) = d.child.try_wait().expect("wait") {
            break st;
        }
        assert!(Instant::now() < deadline, "offlow did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    let log = log_reader.join().expect("log reader");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(status.success(), "offlow exited with {status}:\n{log}");

    let workers = worker_lines(&log);
    assert_eq!(workers.len(), 2, "two worker lines:\n{log}");
    let w = |i: u64| {
        workers
            .iter()
            .find(|(n, _)| *n == i)
            .map(|(_, l)| *l)
            .unwrap_or_else(|| panic!("no worker {i}:\n{log}"))
    };
    let (w0, w1) = (w(0), w(1));
    eprintln!("worker 0: {w0:?}\nworker 1: {w1:?}");
    Run { got, w0, w1 }
}

/// The UDP flows are processed by worker 1 only.
fn assert_udp_on_worker_one(r: &Run) {
    let (w0, w1) = (r.w0, r.w1);
    // Only UDP is steered, and only towards worker 1.
    assert_eq!(w1.steered_out, 0, "worker 1 keeps its UDP");
    assert_eq!(w0.steered_in, 0, "nothing is steered to worker 0");
    assert_eq!(w0.steer_dropped + w1.steer_dropped, 0, "no inbox overflow");
    assert_eq!(
        w1.steered_in, w0.steered_out,
        "every frame worker 0 handed over was processed by worker 1"
    );
    // 16 flows over two workers: the kernel's fanout hash gives worker 0
    // some of them (all 16 on worker 1 has odds 2^-16), and worker 0
    // handed every UDP datagram it got to worker 1.
    assert!(w0.steered_out > 0, "some UDP reached worker 0 first");
    assert!(
        w0.steered_out <= UDP_PACKETS as u64,
        "only UDP is steered ({} > {UDP_PACKETS})",
        w0.steered_out
    );
    // Worker 1's packets include the handed-over ones; together with its
    // own arrivals they cover every datagram that arrived.
    assert!(
        w1.packets >= r.got as u64,
        "worker 1 processed at least the {} arrived datagrams",
        r.got
    );
}

const PORT_TO_PORT: &str = "priority=10,in_port=1,actions=output:2\n\
                            priority=10,in_port=2,actions=output:1\n";

#[test]
fn udp_is_processed_by_worker_one() {
    if !can_run("the steering test", true, &["ip", "ethtool"]) {
        return;
    }
    let net = Net::new("ofs", OFFLOADS);
    let flows = format!(
        "# UDP from host a is only processed by worker 1\n\
         priority=20,in_port=1,udp,actions=offlow_workers:0x2,output:2\n{PORT_TO_PORT}"
    );
    let r = run_switch(&net, &flows, None);
    assert_udp_on_worker_one(&r);
}

#[test]
fn config_steering_sends_udp_to_worker_one() {
    if !can_run("the steering test", true, &["ip", "ethtool"]) {
        return;
    }
    let net = Net::new("ofc", OFFLOADS);
    // The flows know nothing of steering; the configuration does.
    let config = "[[steer]]\nmatch = \"udp,nw_src=10.0.0.1\"\nworkers = [1]\n";
    let r = run_switch(&net, PORT_TO_PORT, Some(config));
    assert_udp_on_worker_one(&r);
}

#[test]
fn without_steering_nothing_moves() {
    if !can_run("the steering test", true, &["ip", "ethtool"]) {
        return;
    }
    let net = Net::new("ofn", OFFLOADS);
    let r = run_switch(&net, PORT_TO_PORT, None);
    for w in [r.w0, r.w1] {
        assert_eq!((w.steered_out, w.steered_in, w.steer_dropped), (0, 0, 0));
    }
}
