"""Memory of a bulk load through mentat_transact (issue 12's bounded memory), at any scale, l included.

usage: python3 -m benchmarks.py.bulk_memory --data DIR [--db PATH] [--every 2000]

DIR is the output of `mentat-gen` (schema.edn, tx/*.edn). Transacts the files one per call, reading each just before
its call (the suite's bulk_load holds every file's text in its worker at once, 5.6 GB at l, which its peak RSS then
counts), then `mentat_sync()`. Prints every --every files and at the end: datoms so far, this process's resident
memory (VmRSS, MB), DuckDB's own memory (`sum(memory_usage_bytes)` of `duckdb_memory()`, MB), and at the end the peak
RSS (`ru_maxrss`), the datoms/s of the whole load, DuckDB's memory by tag and the entity index's attributes. Asserts
only that every datom was transacted (the generator's truth.json); nothing on time or memory.
"""
import argparse
import json
import os
import pathlib
import resource
import time

from benchmarks.py import common


def rss_mb():
    """This process's resident memory now, MB (VmRSS of /proc/self/status)."""
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) // 1024


def duckdb_mb(con):
    return con.execute("SELECT sum(memory_usage_bytes) // (1 << 20) FROM duckdb_memory()").fetchone()[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--db", default=None)
    ap.add_argument("--every", type=int, default=2000, help="print a line every this many files")
    args = ap.parse_args()
    data = pathlib.Path(args.data)
    truth = json.loads((data / "truth.json").read_text())
    db = pathlib.Path(args.db or data / "bulk_memory.duckdb")
    con = common.connect_fresh(db)
    con.execute("SELECT * FROM mentat_transact(?)", [(data / "schema.edn").read_text()]).fetchall()
    files = sorted((data / "tx").glob("*.edn"))
    t0 = time.perf_counter()
    datoms = 0
    for i, f in enumerate(files):
        datoms += con.execute("SELECT datoms FROM mentat_transact(?)", [f.read_text()]).fetchone()[0] - 1
        if i % args.every == 0:
            print(f"{i} files, {datoms} datoms: RSS {rss_mb()} MB, DuckDB {duckdb_mb(con)} MB", flush=True)
    con.execute("SELECT * FROM mentat_sync()").fetchall()
    secs = time.perf_counter() - t0
    assert datoms == truth["datoms"]["initial"], (datoms, truth["datoms"]["initial"])
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(f"end: {datoms} datoms in {secs:.1f} s ({datoms / secs:,.0f} datoms/s, log applied): RSS {rss_mb()} MB, "
          f"DuckDB {duckdb_mb(con)} MB, peak RSS {peak} MB")
    tags = con.execute("SELECT tag, memory_usage_bytes // (1 << 20) FROM duckdb_memory() "
                       "WHERE memory_usage_bytes >= 1 << 20 ORDER BY 2 DESC").fetchall()
    print("DuckDB's memory by tag (MB):", ", ".join(f"{t} {m}" for t, m in tags))
    print("entity index:", con.execute("SELECT * FROM mentat_entity_index()").fetchall())
    print(f"database file {os.path.getsize(db) / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
