//! `offlow demo`: the switch's main job on an embedded default.
//!
//! Builds a small network out of Linux network namespaces: one for the
//! switch, one per host, each host joined to a switch port by a veth pair
//! (`eth0` on the host side, `10.0.0.N/24`). Starts the switch in that
//! namespace in standalone fail mode (a MAC-learning switch made of
//! ordinary flows, no controller needed), then sends traffic across it —
//! ping, a TCP transfer whose bytes are checked, a UDP burst over several
//! flows — and prints what each tier did: microflow cache hits, pipeline
//! lookups, packet-ins used for learning, drops by reason, per-port
//! counters and rates. Everything it created is removed at the end, also
//! on failure and on SIGINT/SIGTERM (the handler only raises a flag; every
//! step checks it and the topology's `Drop` deletes the namespaces).
//!
//! Names are unique per process (`ofd<pid>-...`), so demos and tests can
//! run side by side. Needs root (namespaces, packet sockets) and `ip`.
//!
//! Thread-safety: the switch runs on its own thread (as `offlow run`
//! does); traffic threads enter host namespaces with
//! [`offlow_io::netns::in_netns`], which moves only the calling thread.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use offlow_io::netns::{self, add_veth_pair, in_netns, VethEnd};

use offlow_switch::dataplane::{DataplaneStats, StatsHandle};
use offlow_switch::{Endpoint, FailMode, PortConfig, PortKind, SwitchConfig};

/// Flags of `offlow demo`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct DemoArgs {
    /// Hosts attached to the switch (2..=8).
    #[arg(long, default_value_t = 2)]
    pub hosts: usize,
    /// Packet worker threads.
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
    /// Length of the UDP burst, seconds.
    #[arg(long, default_value_t = 1.0)]
    pub seconds: f64,
    /// UDP flows (source ports) in the burst.
    #[arg(long, default_value_t = 16)]
    pub flows: u16,
    /// Bytes sent over TCP.
    #[arg(long, default_value_t = 4 << 20)]
    pub tcp_bytes: usize,
    /// UDP datagrams per second in the burst (0: as fast as the sockets
    /// go; on two cores the hosts' own UDP stacks then drop most of it).
    #[arg(long, default_value_t = 100_000)]
    pub udp_rate: u64,
    /// Port kind: `af_xdp` (an XDP program redirects the frames to the
    /// switch's AF_XDP sockets) or `af_packet` (TPACKET_V3 rings; blocks
    /// are handed over at least every millisecond, which shows in ping).
    #[arg(long, default_value = "af_xdp", value_parser = ["af_xdp", "af_packet"])]
    pub ports: String,
    /// The offload tier: `xdp` (an XDP program on the switch's ports
    /// serves the hot flows in the kernel) or `off`.
    #[arg(long, default_value = "xdp", value_parser = ["xdp", "off"])]
    pub offload: String,
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    INTERRUPTED.store(true, Ordering::SeqCst);
}

fn install_signal_handlers() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only performs an atomic store; `sigaction`
        // gets a zero-initialised, then filled, struct we own.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

fn check_interrupted() -> anyhow::Result<()> {
    if INTERRUPTED.load(Ordering::SeqCst) {
        bail!("interrupted");
    }
    Ok(())
}

fn ip(args: &[&str]) -> anyhow::Result<()> {
    Ok(netns::ip(args).map(|_| ())?)
}

/// The namespaces and links of the demo; deleted on drop.
pub(crate) struct Topology {
    /// The switch's namespace.
    pub switch_ns: String,
    /// Host namespaces, host i at `10.0.0.(i+1)`.
    pub hosts: Vec<String>,
    /// Switch-side interfaces, port i+1 is `ports[i]`.
    pub ports: Vec<String>,
    created: Vec<String>,
}

impl Topology {
    /// Create the switch namespace and `n` hosts under `prefix`.
    pub(crate) fn create(prefix: &str, n: usize, tx_csum_off: bool) -> anyhow::Result<Topology> {
        let mut t = Topology {
            switch_ns: format!("{prefix}-sw"),
            hosts: Vec::new(),
            ports: Vec::new(),
            created: Vec::new(),
        };
        ip(&["netns", "add", &t.switch_ns])?;
        t.created.push(t.switch_ns.clone());
        quiet_ipv6(&t.switch_ns);
        for i in 1..=n {
            check_interrupted()?;
            let host = format!("{prefix}-h{i}");
            ip(&["netns", "add", &host])?;
            t.created.push(host.clone());
            quiet_ipv6(&host);
            let port = format!("{prefix}p{i}");
            let switch_end = VethEnd {
                name: &port,
                netns: &t.switch_ns,
            };
            let host_end = VethEnd {
                name: "eth0",
                netns: &host,
            };
            add_veth_pair(switch_end, host_end, None)?;
            ip(&["-n", &t.switch_ns, "link", "set", &port, "up"])?;
            ip(&["-n", &host, "link", "set", "lo", "up"])?;
            ip(&[
                "-n",
                &host,
                "addr",
                "add",
                &format!("10.0.0.{i}/24"),
                "dev",
                "eth0",
            ])?;
            ip(&["-n", &host, "link", "set", "eth0", "up"])?;
            no_segmentation_offload(&host, tx_csum_off)?;
            t.hosts.push(host);
            t.ports.push(port);
        }
        Ok(t)
    }
}

/// A veth with TSO/GSO on hands the peer TCP segments of up to 64 KiB
/// that were never cut to the MTU; a packet socket receives them as one
/// oversized frame, which a switch cannot forward onto a 1500-byte link.
/// Real NICs segment in hardware; here the hosts must segment in software.
/// Checksum offload can stay on with AF_PACKET ports (the switch finishes
/// partial checksums); `tx_csum_off` turns it off for AF_XDP ports.
///
/// GRO goes on: a veth takes frames that XDP redirects into it (the
/// offload tier's forwarding, `ndo_xdp_xmit`) only while its peer runs
/// NAPI, which it does with an XDP program or with GRO on; otherwise the
/// kernel drops them (`ethtool -S`: `xdp_xmit_errors`). A NIC has no such
/// condition.
fn no_segmentation_offload(ns: &str, tx_csum_off: bool) -> anyhow::Result<()> {
    let mut args = vec![
        "netns", "exec", ns, "ethtool", "-K", "eth0", "tso", "off", "gso", "off", "gro", "on",
    ];
    if tx_csum_off {
        args.extend(["tx", "off"]);
    }
    let out = Command::new("ip")
        .args(&args)
        .output()
        .context("running ethtool")?;
    if !out.status.success() {
        bail!(
            "ethtool {} in {ns}: {}",
            args[3..].join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// IPv6 router/neighbour chatter would add unrelated packets to the
/// counters the demo shows.
fn quiet_ipv6(ns: &str) {
    let _ = Command::new("ip")
        .args(["netns", "exec", ns, "sysctl", "-qw"])
        .args([
            "net.ipv6.conf.all.disable_ipv6=1",
            "net.ipv6.conf.default.disable_ipv6=1",
        ])
        .status();
}

impl Drop for Topology {
    fn drop(&mut self) {
        // Deleting a namespace deletes the veth ends inside it (and so
        // their peers).
        for ns in self.created.iter().rev() {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// What the traffic phase measured.
struct Results {
    ping: Vec<(usize, usize, String)>,
    tcp: (usize, Duration, bool),
    udp_sent: u64,
    udp_received: u64,
    udp_time: Duration,
    burst_stats: (DataplaneStats, DataplaneStats),
}

/// Run the demo.
pub(crate) fn main(args: &DemoArgs) -> anyhow::Result<()> {
    if !(2..=8).contains(&args.hosts) {
        bail!("--hosts {}: must be 2..=8", args.hosts);
    }
    if args.workers == 0 || args.workers > 64 {
        bail!("--workers {}: must be 1..=64", args.workers);
    }
    if args.flows == 0 {
        bail!("--flows must be at least 1");
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("offlow demo builds network namespaces: run it as root");
    }
    install_signal_handlers();
    let prefix = format!("ofd{}", std::process::id() % 1_000_000);
    // AF_XDP does not flag a local sender's unfinished checksums (AF_PACKET
    // does, and the switch finishes them): with AF_XDP ports the hosts
    // compute their own.
    let topo = Topology::create(&prefix, args.hosts, args.ports == "af_xdp")?;
    let result = with_switch(&topo, args);
    drop(topo);
    if INTERRUPTED.load(Ordering::SeqCst) {
        println!("interrupted: the demo's namespaces and links were removed");
    }
    result
}

fn free_local_port() -> Option<u16> {
    let l = TcpListener::bind("127.0.0.1:0").ok()?;
    l.local_addr().ok().map(|a| a.port())
}

fn with_switch(topo: &Topology, args: &DemoArgs) -> anyhow::Result<()> {
    let ofctl = Command::new("ovs-ofctl").arg("--version").output().is_ok();
    let listen_port = if ofctl { free_local_port() } else { None };
    let cfg = SwitchConfig {
        ports: topo
            .ports
            .iter()
            .enumerate()
            .map(|(i, p)| PortConfig {
                name: p.clone(),
                number: i as u32 + 1,
                kind: if args.ports == "af_xdp" {
                    PortKind::AfXdp
                } else {
                    PortKind::AfPacket
                },
            })
            .collect(),
        netns: Some(topo.switch_ns.clone()),
        workers: args.workers,
        fail_mode: FailMode::Standalone,
        listen: listen_port
            .map(|p| Endpoint::Passive(([127, 0, 0, 1], p).into()))
            .into_iter()
            .collect(),
        offload: if args.offload == "xdp" {
            offlow_switch::Offload::On(offlow_switch::OffloadOptions::default())
        } else {
            offlow_switch::Offload::Off
        },
        ..SwitchConfig::default()
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let switch = std::thread::Builder::new()
        .name("offlow-switch".into())
        .spawn(move || {
            let stop = async move {
                // A dropped sender stops the switch too.
                let _ = stop_rx.await;
                Ok("stop requested")
            };
            offlow_switch::run_blocking(cfg, stop, Some(ready_tx))
        })
        .context("starting the switch thread")?;
    let outcome = match ready_rx.recv_timeout(Duration::from_secs(10)) {
        Ok(running) => {
            let stats = running.stats.context("the switch started without ports")?;
            let r = traffic(topo, args, &stats);
            let flows = listen_port.and_then(dump_flows);
            let last = stats.stats();
            let offload = running.offload.map(|h| {
                let named: Vec<String> = h
                    .named_counters()
                    .iter()
                    .filter(|&&(_, v)| v != 0)
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect();
                (h.describe().to_string(), h.stats(), named.join(" / "))
            });
            r.map(|r| (r, last, flows, offload))
        }
        Err(_) => Err(anyhow::anyhow!("the switch did not start")),
    };
    let _ = stop_tx.send(());
    match switch.join() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(e.context("the switch failed")),
        Err(_) => bail!("the switch thread panicked"),
    }
    let (r, last, flows, offload) = outcome?;
    report(topo, args, &r, &last, flows.as_deref(), offload.as_ref());
    let lost_pings: usize = r.ping.iter().map(|(s, g, _)| s - g).sum();
    if lost_pings > 0 || !r.tcp.2 {
        bail!("traffic did not cross the switch intact (pings lost or TCP bytes wrong)");
    }
    Ok(())
}

fn dump_flows(port: u16) -> Option<String> {
    let out = Command::new("ovs-ofctl")
        .args(["-O", "OpenFlow13", "--no-names", "dump-flows"])
        .arg(format!("tcp:127.0.0.1:{port}"))
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn ping(host: &str, dst: &str) -> anyhow::Result<(usize, usize, String)> {
    let sent = 3;
    let out = Command::new("ip")
        .args([
            "netns", "exec", host, "ping", "-c", "3", "-i", "0.2", "-W", "2", dst,
        ])
        .output()
        .context("running ping")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let received = text
        .lines()
        .find_map(|l| {
            let (_, rest) = l.split_once("transmitted, ")?;
            rest.split_whitespace().next()?.parse().ok()
        })
        .unwrap_or(0);
    let rtt = text
        .lines()
        .find(|l| l.starts_with("rtt"))
        .and_then(|l| l.split('=').nth(1))
        .and_then(|v| v.split('/').nth(1))
        .map(|avg| format!("rtt avg {avg} ms"))
        .unwrap_or_else(|| "no replies".into());
    Ok((sent, received, rtt))
}

fn tcp_transfer(src: &str, dst: &str, bytes: usize) -> anyhow::Result<(usize, Duration, bool)> {
    let listener = in_netns(Some(dst), || TcpListener::bind("10.0.0.2:5001"))??;
    let receiver = std::thread::spawn(move || -> std::io::Result<(usize, u64)> {
        listener.set_nonblocking(false)?;
        let (mut s, _) = listener.accept()?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut buf = vec![0u8; 64 << 10];
        let (mut n, mut sum) = (0usize, 0u64);
        loop {
            let k = s.read(&mut buf)?;
            if k == 0 {
                return Ok((n, sum));
            }
            for (i, b) in buf[..k].iter().enumerate() {
                sum = sum.wrapping_add(u64::from(*b) * ((n + i) as u64 % 251 + 1));
            }
            n += k;
        }
    });
    let data: Vec<u8> = (0..bytes).map(|i| (i * 7 + i / 1021) as u8).collect();
    let want: u64 = data.iter().enumerate().fold(0u64, |acc, (i, b)| {
        acc.wrapping_add(u64::from(*b) * (i as u64 % 251 + 1))
    });
    let t0 = Instant::now();
    let mut s = in_netns(Some(src), || {
        TcpStream::connect_timeout(
            &"10.0.0.2:5001".parse().expect("literal"),
            Duration::from_secs(5),
        )
    })??;
    s.set_write_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(&data)?;
    s.shutdown(std::net::Shutdown::Write)?;
    let (n, sum) = receiver
        .join()
        .map_err(|_| anyhow::anyhow!("TCP receiver panicked"))?
        .context("TCP transfer: nothing received for 10 s")?;
    Ok((n, t0.elapsed(), n == bytes && sum == want))
}

fn udp_burst(src: &str, dst: &str, args: &DemoArgs) -> anyhow::Result<(u64, u64, Duration)> {
    let rx = in_netns(Some(dst), || UdpSocket::bind("10.0.0.2:5002"))??;
    rx.set_read_timeout(Some(Duration::from_millis(300)))?;
    let done = std::sync::Arc::new(AtomicBool::new(false));
    let done_rx = done.clone();
    let receiver = std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        let mut n = 0u64;
        loop {
            match rx.recv(&mut buf) {
                Ok(_) => n += 1,
                Err(_) if done_rx.load(Ordering::SeqCst) => return n,
                Err(_) => {}
            }
        }
    });
    let senders: Vec<UdpSocket> = in_netns(Some(src), || {
        (0..args.flows)
            .map(|f| UdpSocket::bind(("10.0.0.1", 20000 + f)))
            .collect::<std::io::Result<Vec<_>>>()
    })??;
    for s in &senders {
        s.connect("10.0.0.2:5002")?;
    }
    // 18 bytes of payload: a 60-byte frame (64 on a wire with its FCS).
    let payload = [0x5au8; 18];
    let t0 = Instant::now();
    let until = Duration::from_secs_f64(args.seconds.max(0.05));
    let mut sent = 0u64;
    // Paced in rounds of one datagram per flow: never ahead of the rate.
    let per_sec = args.udp_rate as f64;
    while t0.elapsed() < until && !INTERRUPTED.load(Ordering::SeqCst) {
        if per_sec > 0.0 && sent as f64 >= t0.elapsed().as_secs_f64() * per_sec {
            std::hint::spin_loop();
            continue;
        }
        for s in &senders {
            if s.send(&payload).is_ok() {
                sent += 1;
            }
        }
    }
    let elapsed = t0.elapsed();
    std::thread::sleep(Duration::from_millis(50));
    done.store(true, Ordering::SeqCst);
    let received = receiver
        .join()
        .map_err(|_| anyhow::anyhow!("UDP receiver panicked"))?;
    Ok((sent, received, elapsed))
}

fn traffic(topo: &Topology, args: &DemoArgs, stats: &StatsHandle) -> anyhow::Result<Results> {
    let h1 = &topo.hosts[0];
    let mut ping_results = Vec::new();
    for i in 2..=topo.hosts.len() {
        check_interrupted()?;
        ping_results.push(ping(h1, &format!("10.0.0.{i}"))?);
    }
    check_interrupted()?;
    let h2 = &topo.hosts[1];
    let tcp = tcp_transfer(h1, h2, args.tcp_bytes)?;
    check_interrupted()?;
    // Let the workers publish, so the burst's delta is its own.
    std::thread::sleep(Duration::from_millis(50));
    let before = stats.stats();
    let (sent, received, elapsed) = udp_burst(h1, h2, args)?;
    std::thread::sleep(offlow_switch::dataplane::PUBLISH_EVERY * 3);
    let after = stats.stats();
    check_interrupted()?;
    Ok(Results {
        ping: ping_results,
        tcp,
        udp_sent: sent,
        udp_received: received,
        udp_time: elapsed,
        burst_stats: (before, after),
    })
}

fn pct(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        100.0 * a as f64 / b as f64
    }
}

fn report(
    topo: &Topology,
    args: &DemoArgs,
    r: &Results,
    s: &DataplaneStats,
    flows: Option<&str>,
    offload: Option<&(String, offlow_switch::offload::OffloadStats, String)>,
) {
    println!(
        "offlow demo: {} hosts on one switch ({} ports, {} worker{}, standalone MAC-learning mode)",
        topo.hosts.len(),
        args.ports,
        args.workers,
        if args.workers == 1 { "" } else { "s" }
    );
    println!("\ntraffic");
    for (i, (sent, got, rtt)) in r.ping.iter().enumerate() {
        println!("  ping h1 -> h{:<2}     {got}/{sent} replies, {rtt}", i + 2);
    }
    let (n, t, ok) = r.tcp;
    println!(
        "  tcp  h1 -> h2       {:.1} MiB in {:.3} s ({:.0} Mbit/s), bytes {}",
        n as f64 / (1 << 20) as f64,
        t.as_secs_f64(),
        n as f64 * 8.0 / t.as_secs_f64().max(1e-9) / 1e6,
        if ok { "verified" } else { "WRONG" }
    );
    let (b, a) = &r.burst_stats;
    let burst_pkts = a.worker.packets.saturating_sub(b.worker.packets);
    let secs = r.udp_time.as_secs_f64().max(1e-9);
    println!(
        "  udp  h1 -> h2       {} flows of 64-byte frames for {:.1} s: sent {}, received {} ({:.1}%)",
        args.flows,
        secs,
        r.udp_sent,
        r.udp_received,
        pct(r.udp_received, r.udp_sent)
    );
    println!(
        "                      the switch's workers took {:.0} kpps of the burst, the offload tier the rest \
         (paced at --udp-rate; `offlow bench forward` measures the limit)",
        burst_pkts as f64 / secs / 1e3
    );
    let w = &s.worker;
    println!("\nper-tier counters (all traffic, all workers)");
    match offload {
        Some((describe, o, named)) => {
            println!(
                "  offload tier (XDP exact match)  {:>10}  frames served in the kernel ({:.1}% of all frames)",
                o.hits,
                pct(o.hits, o.hits + w.packets)
            );
            println!(
                "                                  entries now {}, installed {}, removed {}, rewritten after a rule change {}, refused {}",
                o.entries, o.installs, o.removals, o.revalidated, o.refused
            );
            println!("                                  {describe}");
            println!("                                  in the kernel: {named}");
        }
        None if args.offload == "xdp" => println!(
            "  offload tier (XDP exact match)  off: the XDP backend did not start (see the log above)"
        ),
        None => println!("  offload tier (XDP exact match)  off (--offload off)"),
    }
    println!(
        "  fast path: microflow cache hits {:>10}  ({:.1}% of {} packets)",
        w.cache_hits,
        pct(w.cache_hits, w.packets),
        w.packets
    );
    println!(
        "  pipeline lookups (cache misses) {:>10}  (of which re-resolved after a flow change: {})",
        w.pipeline_lookups, w.stale_hits
    );
    println!(
        "  packet-ins (MAC learning)       {:>10}  (dropped, control side busy: {})",
        s.packet_ins, s.drop_packet_in_backlog
    );
    println!(
        "  drops: table miss {} / no output {} / TTL {} / runt {} / oversize {} / rx ring full {} / tx refused {}",
        w.drop_table_miss,
        w.drop_no_output,
        w.drop_ttl,
        s.drop_runt,
        s.drop_oversize,
        s.ports.iter().map(|p| p.rx_dropped).sum::<u64>(),
        s.ports.iter().map(|p| p.tx_dropped).sum::<u64>()
    );
    println!(
        "  checksums finished in software  {:>10}  ({})",
        s.csum_finished,
        if args.ports == "af_xdp" {
            "AF_XDP: the hosts compute their own"
        } else {
            "veth checksum offload"
        }
    );
    println!("\nports");
    for (i, (p, name)) in s.ports.iter().zip(&topo.ports).enumerate() {
        println!(
            "  {} ({name}): rx {} pkts {} bytes, tx {} pkts {} bytes",
            i + 1,
            p.rx_packets,
            p.rx_bytes,
            p.tx_packets,
            p.tx_bytes
        );
    }
    if let Some(f) = flows {
        println!("\nflows (ovs-ofctl dump-flows)");
        for l in f.lines().skip(1) {
            println!("  {}", l.trim());
        }
    }
}
