//! `offlow run`: the switch daemon. The flags and the configuration file
//! ([`config`]) resolve to an [`offlow_switch::SwitchConfig`]; the switch
//! itself (ports, packet threads, the OpenFlow control loop) is the
//! `offlow-switch` library, run here on the main thread until SIGINT or
//! SIGTERM.
//!
//! Thread-safety: the control loop runs on the calling thread; see
//! `offlow_switch` for the packet threads.

pub(crate) mod config;
mod tunnel;

pub(crate) use config::RunArgs;

/// Run the daemon until SIGINT / SIGTERM.
pub(crate) fn main(args: &RunArgs) -> anyhow::Result<()> {
    init_logging();
    let cfg = args.resolve()?.into_switch_config()?;
    offlow_switch::run_blocking(cfg, shutdown_signal(), None)
}

/// Logs to stderr, `RUST_LOG` filtering (default `info`).
pub(crate) fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // A subscriber already installed (tests) is fine.
    use std::io::IsTerminal;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .try_init();
}

async fn shutdown_signal() -> std::io::Result<&'static str> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    })
}
