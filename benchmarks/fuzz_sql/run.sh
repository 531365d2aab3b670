#!/usr/bin/env bash
# Builds and runs the SQL fuzz campaign: mutated queries and pull patterns compiled by the planner, every compiled
# statement parsed by DuckDB's parser (libduckdb's duckdb_extract_statements). Prints its figures; exits non-zero
# on a panic, an input slower than 1 s, or a statement DuckDB cannot parse.
# usage: bash benchmarks/fuzz_sql/run.sh [--rounds N] [--seed S]      (default 1,000,000 rounds)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
export DUCKDB_LIB_DIR="$(bash "$root/benchmarks/native/libduckdb.sh")"
export CARGO_TARGET_DIR="$here/target"
(cd "$here" && cargo build --release -q)
LD_LIBRARY_PATH="$DUCKDB_LIB_DIR" "$CARGO_TARGET_DIR/release/mentat-fuzz-sql" "$@"
