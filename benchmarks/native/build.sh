#!/usr/bin/env bash
# Builds the scale suite's native driver, benchmarks/native/target/release/mentat-native-bench, without compiling
# DuckDB: the libduckdb.so that npm's @duckdb/node-bindings-linux-x64 package ships is fetched with `npm pack`
# into target/libduckdb/<version>/ (gitignored), and the duckdb crate links it through DUCKDB_LIB_DIR; the binary
# carries an rpath to that directory. SQLite is compiled from rusqlite's bundled amalgamation.
# Needs cargo, node/npm and the npm registry. Then, if the extension is built (build/mentat.duckdb_extension or
# $MENTAT_EXTENSION), checks that it loads into that libduckdb and that mentat_transact works from the binary.
# usage: bash benchmarks/native/build.sh         (DUCKDB_NPM_VERSION=1.5.6-r.1 by default)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
export CARGO_TARGET_DIR="$here/target"
lib="$(bash "$here/libduckdb.sh")"
export DUCKDB_LIB_DIR="$lib"
t0=$(date +%s)
(cd "$here" && cargo build --release --locked)
bin="$CARGO_TARGET_DIR/release/mentat-native-bench"
echo "build.sh: built $bin in $(( $(date +%s) - t0 )) s against $lib/libduckdb.so"
ext="${MENTAT_EXTENSION:-$root/build/mentat.duckdb_extension}"
if [ -f "$ext" ]; then
  "$bin" --selftest "$ext"
else
  echo "build.sh: $ext is not built; the selftest (LOAD + mentat_transact) was not run"
fi
