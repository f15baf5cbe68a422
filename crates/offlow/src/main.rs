//! The `offlow` command: the switch, its demo and its measurement kit.

use clap::{Parser, Subcommand};

mod allocator;
mod demo;
mod flowmod_bench;
mod run;
mod trace;

#[derive(Parser)]
#[command(name = "offlow", version, about = "An OpenFlow 1.3 software switch")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the switch: data ports on Linux interfaces, OpenFlow 1.3
    /// controllers, standalone or secure fail mode.
    Run(run::RunArgs),
    /// Build namespaces and veth links, run the switch between them in
    /// standalone mode, send ping, TCP and UDP across it and show per-tier
    /// counters; removes everything it created.
    Demo(demo::DemoArgs),
    /// Trace a packet through the flow tables (like ovs-appctl ofproto/trace),
    /// with rules from an ovs-ofctl flow file or a running switch.
    Trace(trace::TraceArgs),
    /// Measurement kit: reproduce the source papers' experiments.
    #[command(subcommand)]
    Bench(Bench),
}

#[derive(Subcommand)]
enum Bench {
    /// Uncached classification rate on ClassBench rules, vs dpdk-test-acl.
    Classify(offlow_bench::classify::ClassifyArgs),
    /// FIB lookup rate on a BGP table, vs dpdk-test-fib.
    Fib(offlow_bench::fib::FibArgs),
    /// The whole datapath on real frames (parse, microflow cache, pipeline,
    /// actions), cache on and off, vs dpdk-test-acl: the FlowShadow experiment.
    Datapath(offlow_bench::datapath::DatapathArgs),
    /// Lookups while a stream of flow-mods is applied on the other core:
    /// idle vs updating rate, updates/s, stale packets after the barrier.
    Update(offlow_bench::update::UpdateArgs),
    /// End-to-end forwarding rate between two namespaces through the switch
    /// (AF_PACKET ports), vs Open vSwitch's userspace datapath and a Linux
    /// bridge, with the generator's own rate on a direct veth.
    Forward(offlow_bench::forward::ForwardArgs),
    /// Control-loop responsiveness: ECHO and FLOW_STATS reply times on one
    /// connection while another streams flow-mods with barriers (idle vs
    /// during the stream), per switch binary, with traffic through it.
    Control(offlow_bench::control::ControlArgs),
    /// The offload-tier experiment: 64-byte UDP from an XDP live-frames
    /// generator through the switch on veths, received pps and CPU time per
    /// packet, vs an XDP redirect ceiling and Open vSwitch afxdp.
    Offload(offlow_bench::offload::OffloadArgs),
    /// Per-packet latency by the Stuttgart report's method: UDP probes
    /// looped back by the switch (IN_PORT), SO_TIMESTAMPING, RTT
    /// percentiles and processing delay over frame sizes, match tuples,
    /// table sizes and background load; CSV, Markdown and PNG plots.
    Latency(offlow_bench::latency::LatencyArgs),
    /// New TCP connections per second through the switch under a
    /// controller that installs flows on packet-ins (os-ken's
    /// simple_switch_13, the source-NAT app), offlow vs Open vSwitch.
    Setup(offlow_bench::setup::SetupArgs),
    /// Flow-mods of an ovs-ofctl flow file sent back to back with one
    /// barrier at the end, to one or more switches (Open vSwitch too):
    /// flow-mods per second until the barrier reply.
    FlowMods(flowmod_bench::FlowModArgs),
}

/// The workspace builds for x86-64-v3 (`.cargo/config.toml`): say so
/// plainly on an older CPU rather than dying on an illegal instruction.
/// Called first, before anything else runs.
#[cfg(target_arch = "x86_64")]
fn require_cpu() -> anyhow::Result<()> {
    let missing: Vec<&str> = [
        ("avx2", std::is_x86_feature_detected!("avx2")),
        ("bmi1", std::is_x86_feature_detected!("bmi1")),
        ("bmi2", std::is_x86_feature_detected!("bmi2")),
        ("fma", std::is_x86_feature_detected!("fma")),
        ("lzcnt", std::is_x86_feature_detected!("lzcnt")),
        ("movbe", std::is_x86_feature_detected!("movbe")),
    ]
    .into_iter()
    .filter_map(|(name, have)| (!have).then_some(name))
    .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        anyhow::bail!(
            "this build of offlow needs an x86-64-v3 CPU; this one lacks {}. \
             Rebuild with RUSTFLAGS=\"-C target-cpu=native\" (which overrides \
             .cargo/config.toml)",
            missing.join(", ")
        )
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn require_cpu() -> anyhow::Result<()> {
    Ok(())
}

fn main() -> anyhow::Result<()> {
    require_cpu()?;
    let cli = Cli::parse();
    match cli.command {
        Command::Run(a) => run::main(&a),
        Command::Demo(a) => demo::main(&a),
        Command::Trace(a) => trace::main(&a),
        Command::Bench(Bench::Classify(a)) => offlow_bench::classify::main(&a),
        Command::Bench(Bench::Fib(a)) => offlow_bench::fib::main(&a),
        Command::Bench(Bench::Datapath(a)) => offlow_bench::datapath::main(&a),
        Command::Bench(Bench::Update(a)) => offlow_bench::update::main(&a),
        Command::Bench(Bench::Forward(a)) => offlow_bench::forward::main(&a),
        Command::Bench(Bench::Control(a)) => offlow_bench::control::main(&a),
        Command::Bench(Bench::Offload(a)) => offlow_bench::offload::main(&a),
        Command::Bench(Bench::Latency(a)) => offlow_bench::latency::main(&a),
        Command::Bench(Bench::Setup(a)) => offlow_bench::setup::main(&a),
        Command::Bench(Bench::FlowMods(a)) => flowmod_bench::main(&a),
    }
}
