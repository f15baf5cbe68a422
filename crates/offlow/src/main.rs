//! The `offlow` command.
fn main() {}
