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
version="${DUCKDB_NPM_VERSION:-1.5.6-r.1}"
case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) pkg="@duckdb/node-bindings-linux-x64" ;;
  Linux-aarch64) pkg="@duckdb/node-bindings-linux-arm64" ;;
  *) echo "build.sh: no libduckdb.so package for $(uname -s)-$(uname -m)" >&2; exit 1 ;;
esac
export CARGO_TARGET_DIR="$here/target"
lib="$CARGO_TARGET_DIR/libduckdb/$version"
if [ ! -f "$lib/libduckdb.so" ]; then
  command -v npm >/dev/null || { echo "build.sh: npm is needed to fetch $pkg@$version" >&2; exit 1; }
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  echo "build.sh: npm pack $pkg@$version"
  (cd "$tmp" && npm pack --silent "$pkg@$version" >/dev/null && tar xzf ./*.tgz)
  so="$(find "$tmp/package" -name libduckdb.so -type f | head -n 1)"
  [ -n "$so" ] || { echo "build.sh: $pkg@$version has no libduckdb.so" >&2; exit 1; }
  mkdir -p "$lib"
  cp "$so" "$lib/libduckdb.so.part"
  mv "$lib/libduckdb.so.part" "$lib/libduckdb.so"
fi
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
