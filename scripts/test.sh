#!/usr/bin/env bash
# Second README command: the whole test suite. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZ_SECONDS="${FUZZ_SECONDS:-60}"

bash scripts/install-deps.sh

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo doc (no warnings: broken or private intra-doc links fail)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked --quiet
echo "== controller environments (os-ken, Faucet from PyPI)"
bash scripts/controllers-venv.sh
echo "== cargo test (release: the data-set and property tests are heavy)"
cargo test --workspace --release --locked
echo "== fuzz smoke (${FUZZ_SECONDS}s per target)"
bash scripts/fuzz-smoke.sh "$FUZZ_SECONDS"
echo "== offlow bench classify --verify (embedded default, correctness only)"
cargo build --release --locked -p offlow
./target/release/offlow bench classify --verify --iters 1
echo "test.sh: all passed"
