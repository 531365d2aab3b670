#!/usr/bin/env bash
# Fetches the libduckdb.so that npm's @duckdb/node-bindings-linux-x64 package ships (no DuckDB is compiled) into
# benchmarks/native/target/libduckdb/<version>/ (gitignored), once, and prints that directory. Used by the native
# driver (build.sh) and the SQL fuzz campaign (benchmarks/fuzz_sql/run.sh), which link it through DUCKDB_LIB_DIR.
# usage: lib="$(bash benchmarks/native/libduckdb.sh)"      (DUCKDB_NPM_VERSION=1.5.6-r.1 by default)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
version="${DUCKDB_NPM_VERSION:-1.5.6-r.1}"
case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) pkg="@duckdb/node-bindings-linux-x64" ;;
  Linux-aarch64) pkg="@duckdb/node-bindings-linux-arm64" ;;
  *) echo "libduckdb.sh: no libduckdb.so package for $(uname -s)-$(uname -m)" >&2; exit 1 ;;
esac
lib="$here/target/libduckdb/$version"
if [ ! -f "$lib/libduckdb.so" ]; then
  command -v npm >/dev/null || { echo "libduckdb.sh: npm is needed to fetch $pkg@$version" >&2; exit 1; }
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  echo "libduckdb.sh: npm pack $pkg@$version" >&2
  (cd "$tmp" && npm pack --silent "$pkg@$version" >/dev/null && tar xzf ./*.tgz)
  so="$(find "$tmp/package" -name libduckdb.so -type f | head -n 1)"
  [ -n "$so" ] || { echo "libduckdb.sh: $pkg@$version has no libduckdb.so" >&2; exit 1; }
  mkdir -p "$lib"
  cp "$so" "$lib/libduckdb.so.part"
  mv "$lib/libduckdb.so.part" "$lib/libduckdb.so"
fi
echo "$lib"
