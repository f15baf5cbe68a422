//! `offlow bench fib`: FIB lookup rate vs dpdk-test-fib.

/// Arguments of `offlow bench fib`.
#[derive(Debug, Clone, clap::Args)]
pub struct FibArgs {
    /// BGP table (ipasn `.dat` or CAIDA `pfx2as`; .gz ok).
    #[arg(long)]
    pub table: std::path::PathBuf,
}

/// Run the experiment.
pub fn main(_args: &FibArgs) -> anyhow::Result<()> {
    anyhow::bail!("bench fib: not implemented yet")
}
