#!/usr/bin/env bash
# Installs everything offlow needs on a Debian 12 machine (run as root).
# Idempotent: packages already present are not fetched again, so the test
# suite can call it on every run.
set -euo pipefail

APT_PACKAGES=(
    # build
    build-essential pkg-config clang llvm libbpf-dev
    # the vendored libbpf that libbpf-rs builds (the offload tier's XDP backend and offlow-bench's
    # XDP programs) links these
    libelf-dev zlib1g-dev
    # anchors and instruments (../shared/ANCHORS.md)
    dpdk dpdk-dev openvswitch-switch openvswitch-common tshark linux-perf nftables
    # namespaces and traffic
    iproute2 iputils-ping ethtool
    # controllers from PyPI (os-ken, Faucet) in venvs: scripts/controllers-venv.sh
    python3-venv python3-dev
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "install-deps: apt-get install ${missing[*]}"
    if [ "$(id -u)" -ne 0 ]; then
        echo "install-deps: need root to install packages" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    # tshark asks whether non-root users may capture; answer once, quietly.
    echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
    echo "install-deps: no cargo on PATH; install the Rust toolchain (rustup) first" >&2
    exit 1
fi

# cargo-fuzz drives the fuzz smoke run in the test suite.
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "install-deps: cargo install cargo-fuzz"
    cargo install cargo-fuzz --locked --quiet
fi
