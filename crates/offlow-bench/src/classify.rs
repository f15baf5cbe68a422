//! `offlow bench classify`: uncached classification rate vs dpdk-test-acl.

/// Arguments of `offlow bench classify`.
#[derive(Debug, Clone, clap::Args)]
pub struct ClassifyArgs {
    /// ClassBench rule file (WUSTL 5-field or lyxocs 7-field format; .gz ok).
    #[arg(long)]
    pub rules: Option<std::path::PathBuf>,
}

/// Run the experiment.
pub fn main(_args: &ClassifyArgs) -> anyhow::Result<()> {
    anyhow::bail!("bench classify: not implemented yet")
}
