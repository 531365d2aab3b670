#!/usr/bin/env bash
# The whole test suite: installs what it needs, builds the extension, then runs formatting and lint checks,
# the Rust unit tests and the integration tests against the real DuckDB CLI and Python duckdb.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --tests
rustup component list --installed 2>/dev/null | grep -q clippy || rustup component add clippy rustfmt
cargo fmt --all --check
cargo clippy --workspace --all-targets -q -- -D warnings
cargo test --workspace -q 2>&1 | tail -n 40
# The scale suite's native driver (benchmarks/native: 4.5 to 6.5 minutes of compiling on two cores, mostly the Arrow
# crates the duckdb crate depends on) is built only on request; the suite smoke test runs it whenever it is built.
if [ "${MENTAT_NATIVE_BUILD:-0}" = 1 ]; then bash benchmarks/native/build.sh; fi
# The compilers' mutation fuzz campaign with every compiled statement parsed by DuckDB's own parser (libduckdb from
# npm, no DuckDB compiled): 200,000 rounds here; `bash benchmarks/fuzz_sql/run.sh --rounds 10000000` is the long run.
bash benchmarks/fuzz_sql/run.sh --rounds 200000
# The pytest runs below all run even when one fails (a rerun with a switch changed says whether a failure follows
# the switch); the script fails at the end, naming each run that failed.
failed=()
run() { local name=$1; shift; "$@" || failed+=("$name"); }
run "pytest" python3 -m pytest -q tests
# Parity: the query, pull and time-travel tests again with the entity path off (every query through one SQL
# statement); the run above took the entity path wherever a query is entity-shaped.
run "entity path off" env MENTAT_ENTITY_PATH=0 python3 -m pytest -q tests/test_query.py tests/test_pull.py tests/test_pull_find.py \
  tests/test_time_travel.py tests/test_workload.py tests/test_rules.py tests/test_tx_functions.py tests/test_with.py \
  tests/test_tuples.py tests/test_value_types.py tests/test_sources.py
# Parity: the transaction tests again with mentat_transact on the one-at-a-time transactor (no group commit
# queue); the run above sent every mentat_transact through the queue.
run "group commit off" env MENTAT_GROUP_COMMIT=0 python3 -m pytest -q tests/test_transact.py tests/test_tx_functions.py tests/test_store.py \
  tests/test_concurrency.py tests/test_session.py tests/test_tuples.py tests/test_value_types.py
# Parity: the transaction, query and time-travel tests again with every group that may go through the transaction
# log going through it (MENTAT_LOG=always: also attributes the entity index does not hold, so the transactor meets
# logged datoms it must apply before reading the tables), and the log kept until a read applies it; the run above
# logged only the groups whose attributes an entity-shaped query had read in.
run "transaction log always" env MENTAT_LOG=always MENTAT_LOG_IDLE_MS=600000 python3 -m pytest -q tests/test_transact.py tests/test_tx_functions.py \
  tests/test_store.py tests/test_concurrency.py tests/test_group_commit.py tests/test_with.py tests/test_time_travel.py \
  tests/test_tuples.py tests/test_value_types.py tests/test_query.py tests/test_pull.py tests/test_fulltext.py \
  tests/test_txlog.py tests/test_session.py
if [ ${#failed[@]} -gt 0 ]; then
  printf 'test.sh: failed: %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "test.sh: every check passed"
