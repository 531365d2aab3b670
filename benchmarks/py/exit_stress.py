"""Short processes that write and exit at once, many times: counts the ones that crash at exit.

A process that loads mentat and exits while mentat's background thread (the indexer: log apply, checkpoint,
compaction) is inside DuckDB can crash if the exit destroys a DuckDB static under it (storage/src/txlog.rs,
`background`). The window is a few milliseconds wide, so a test cannot show it; this script runs the shape that
showed it on 2026-12-06 many times: each child opens one of four database files (made again every 50 runs), installs
a small schema, sends 1 to 30 single-entity transactions with the odd query between them, sleeps 0 to 50 ms (so
that its exit meets the indexer's first apply, 20 ms after the last logged transaction, at every phase) and exits,
closing its connection or not. Before the fix of that day one child in 553 died with SIGSEGV; after it, none of
2,500.

Prints one line per failed child (its exit status and the end of its stderr) and a total; exit status 1 when any
child failed. Core dumps follow the shell's `ulimit -c`.

usage: python3 -m benchmarks.py.exit_stress [--runs 1000] [--ext build/mentat.duckdb_extension] [--dir /tmp/...]
"""
import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]

CHILD = r"""
import random, sys, time, duckdb
con = duckdb.connect(sys.argv[1], config={"allow_unsigned_extensions": "true"})
con.execute(f"LOAD '{sys.argv[2]}'")
r = random.Random(int(sys.argv[3]))
con.execute("SELECT * FROM mentat_transact('[{:db/ident :u/n :db/valueType :db.type/string "
            ":db/cardinality :db.cardinality/one} {:db/ident :u/k :db/valueType :db.type/long "
            ":db/cardinality :db.cardinality/one :db/unique :db.unique/identity}]')").fetchall()
for i in range(r.randint(1, 30)):
    k = r.randint(0, 1000)
    con.execute(f"SELECT * FROM mentat_transact('[{{:u/k {k} :u/n \"n{i}\"}}]')").fetchall()
    if r.random() < 0.2:
        con.execute(f"SELECT * FROM mentat_q('[:find ?n :where [?e :u/k {k}] [?e :u/n ?n]]')").fetchall()
time.sleep(r.random() * 0.05)
if r.random() < 0.5:
    con.close()
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--ext", default=os.environ.get("MENTAT_EXTENSION", str(ROOT / "build" / "mentat.duckdb_extension")))
    ap.add_argument("--dir", default=None, help="where the database files go (a fresh temporary directory if unset)")
    o = ap.parse_args()
    work = pathlib.Path(o.dir or tempfile.mkdtemp(prefix="mentat_exit_stress_"))
    failed = 0
    for i in range(1, o.runs + 1):
        d = work / f"db{i % 4}"
        if i % 50 == 1 and d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True, exist_ok=True)
        p = subprocess.run([sys.executable, "-c", CHILD, str(d / "x.duckdb"), o.ext, str(i)],
                           capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            failed += 1
            print(f"run {i}: exit status {p.returncode}: {p.stderr.strip()[-300:]}", flush=True)
    print(f"exit_stress: {o.runs} runs, {failed} failed ({o.ext})")
    if not o.dir:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
