#!/usr/bin/env bash
# Smoke-run every cargo-fuzz target under fuzz/ for N seconds each.
#
#   scripts/fuzz-smoke.sh [SECONDS]      (default 60)
#
# Set OFFLOW_FUZZ_STABLE=1 to force the stable fallback below. Each target
# starts from fuzz/seeds/<target>/ (checked in: real frames from the sample
# captures plus hand-built ones for every protocol) and grows the ignored
# fuzz/corpus/<target>/.
#
# Uses the nightly toolchain when rustup has one (libFuzzer + AddressSanitizer);
# otherwise stable with RUSTC_BOOTSTRAP=1 and `--sanitizer none` (libFuzzer's
# coverage instrumentation still works; only ASan is lost, and the targets are
# safe Rust). Needs cargo-fuzz (`cargo install cargo-fuzz`). Exits non-zero on
# the first crash; the reproducer is left in fuzz/artifacts/<target>/.
set -euo pipefail

secs="${1:-60}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root/fuzz"

export PATH="$HOME/.cargo/bin:$PATH"
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz-smoke: cargo-fuzz is not installed (cargo install cargo-fuzz)" >&2
    exit 2
fi

toolchain=()
sanitizer=()
if [ -z "${OFFLOW_FUZZ_STABLE:-}" ] && rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    toolchain=(+nightly)
    echo "fuzz-smoke: using nightly"
else
    export RUSTC_BOOTSTRAP=1
    sanitizer=(--sanitizer none)
    echo "fuzz-smoke: no nightly; stable with RUSTC_BOOTSTRAP=1 --sanitizer none"
fi

targets=$(cargo "${toolchain[@]}" fuzz list)
for t in $targets; do
    start=$(date +%s)
    cargo "${toolchain[@]}" fuzz build "${sanitizer[@]}" "$t"
    echo "fuzz-smoke: built $t in $(( $(date +%s) - start ))s"
    mkdir -p "corpus/$t" "seeds/$t"
    cargo "${toolchain[@]}" fuzz run "${sanitizer[@]}" "$t" "corpus/$t" "seeds/$t" -- \
        -max_total_time="$secs" -print_final_stats=1
    echo "fuzz-smoke: $t ran ${secs}s without a crash"
done
