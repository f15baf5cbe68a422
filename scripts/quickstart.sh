#!/usr/bin/env bash
# First README command: install what offlow needs, build it, and run its main
# job on the embedded default workload.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cargo build --release --locked -p offlow
# Main job until the demo exists: the whole datapath (parse, microflow cache,
# pipeline, actions, per-port transmit) on real frames built from the
# embedded WUSTL acl1 rule set and trace, cache on and off, every decision
# and counter verified, side by side with DPDK on the same rules and headers;
# then the uncached classifier alone against the oracle and DPDK.
./target/release/offlow bench datapath --workload acl --verify --vs-dpdk
./target/release/offlow bench classify --verify --vs-dpdk
