"""What one DuckDB statement costs from Python, under the entity reads (issue 11) and the fulltext search (issue 16).

    python3 -m benchmarks.py.statement_floor [--data benchmarks/data/xs] [--calls 2000]

Prints, for the `duckdb` package that runs it (so that two installed versions can be compared, each in its own
run), mean milliseconds per call over --calls calls, each statement fetched whole:
* `SELECT 1`, `SELECT ?` and `FROM range(?)` (a table function, the shape of every `mentat_q` call);
* a 12-way self-join over a 3-row table, sent as text and run through `PREPARE` / `EXECUTE`: where the two cost the
  same, DuckDB planned the prepared statement again on every execution (its cost is planning, not execution);
* mentat's q1 and q2 of the scale suite over a store loaded from --data (keys drawn from every user), whose
  statements mentat keeps prepared per query text on its own connections;
each with DuckDB's default `threads` and again with `SET threads = 1` (a statement run by several threads wakes
DuckDB's workers).
"""
import argparse
import json
import pathlib
import random
import tempfile
import time

import duckdb

from benchmarks.py import common
from benchmarks.py.suite import workload as W


def per_call(calls, run):
    """Mean ms per call of run(i) for i in range(calls), after calls // 10 untimed calls."""
    for i in range(calls // 10):
        run(i)
    t = time.perf_counter()
    for i in range(calls):
        run(i)
    return (time.perf_counter() - t) / calls * 1000


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(common.ROOT / "benchmarks" / "data" / "xs"))
    ap.add_argument("--calls", type=int, default=2000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        con = common.connect(pathlib.Path(tmp) / "floor.duckdb")
        common.load_store(con, args.data)
        emails = [r[0] for r in con.execute("FROM mentat_q('[:find ?m :where [_ :user/email ?m]]')").fetchall()]
        keys = [json.dumps([random.Random(i).choice(emails)]) for i in range(args.calls)]
        con.execute("CREATE TABLE t AS SELECT range AS e FROM range(3)")
        join = ("SELECT count(*) FROM " + ", ".join(f"t t{i}" for i in range(12)) + " WHERE "
                + " AND ".join(f"t{i}.e = t{i + 1}.e" for i in range(11)))
        con.execute("PREPARE j AS " + join)
        rows = [
            ("SELECT 1", lambda i: con.execute("SELECT 1").fetchall()),
            ("SELECT ?", lambda i: con.execute("SELECT ?", [i]).fetchall()),
            ("FROM range(?)", lambda i: con.execute("FROM range(?)", [1]).fetchall()),
            ("12-way join, as text", lambda i: con.execute(join).fetchall()),
            ("12-way join, EXECUTE", lambda i: con.execute("EXECUTE j").fetchall()),
            ("mentat q1", lambda i: con.execute("FROM mentat_q(?, inputs := ?)", [W.Q1, keys[i]]).fetchall()),
            ("mentat q2", lambda i: con.execute("FROM mentat_q(?, inputs := ?)", [W.Q2, keys[i]]).fetchall()),
        ]
        threads = con.execute("SELECT current_setting('threads')").fetchone()[0]
        print(f"duckdb {duckdb.__version__}, {len(emails)} users, {args.calls} calls each; ms per call")
        print(f"{'statement':24s} {'threads=' + str(threads):>10s} {'threads=1':>10s}")
        results = {name: [per_call(args.calls, run)] for name, run in rows}
        con.execute("SET threads = 1")
        for name, run in rows:
            results[name].append(per_call(args.calls, run))
        for name, (many, one) in results.items():
            print(f"{name:24s} {many:10.3f} {one:10.3f}")
        con.close()


if __name__ == "__main__":
    main()
