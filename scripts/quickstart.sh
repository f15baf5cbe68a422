#!/usr/bin/env bash
# First README command: install what offlow needs, build it, and run its main
# job on the embedded default: `offlow demo` builds network namespaces and
# veth links, starts the switch between them (standalone MAC-learning mode),
# sends ping, TCP and a UDP burst across it, prints per-tier counters, and
# removes everything it created.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cargo build --release --locked -p offlow
./target/release/offlow demo
