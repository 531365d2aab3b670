#!/usr/bin/env bash
# The whole test suite: installs what it needs, builds the extension, then runs formatting and lint checks,
# the Rust unit tests and the integration tests against the real DuckDB CLI and Python duckdb.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
rustup component list --installed 2>/dev/null | grep -q clippy || rustup component add clippy rustfmt
cargo fmt --all --check
cargo clippy --workspace --all-targets -q -- -D warnings
cargo test --workspace -q 2>&1 | tail -n 40
python3 -m pytest -q tests
