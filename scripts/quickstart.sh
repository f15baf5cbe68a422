#!/usr/bin/env bash
# First README command: install what offlow needs, build it, and run its main
# job on the embedded default workload.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cargo build --release --locked -p offlow
# Main job until the demo exists: classification of the embedded WUSTL acl1
# rule set and trace, checked against the oracle, side by side with DPDK.
./target/release/offlow bench classify --verify --vs-dpdk
