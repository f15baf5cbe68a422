//! What the bench crate's integration tests share.

use std::path::PathBuf;

/// `target/<profile>/offlow`, beside `target/<profile>/deps/<this test>`.
pub(crate) fn offlow_bin() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let bin = exe.parent()?.parent()?.join("offlow");
    bin.is_file().then_some(bin)
}
