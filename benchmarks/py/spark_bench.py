"""The same Datalog on DuckDB (mentat_q on the store) and on a local Spark standalone cluster (mentat_spark.q over the
store's Parquet export): export time and size, then q3, q4 and a transitive-closure rule, median of --runs calls
each, answers compared. Prints a table; never asserts on time.

The store is synthetic, shaped like the issue tracker of shared/workload.md and built with mentat_import in one
transaction: --issues issues (state, priority, title, assignee, created-at: 5 datoms each) and a :issue/blocks ref
chaining issues in runs of --chain, whose closure the rule computes. The cluster is a master and --workers workers
(1 core and --worker-memory each) started from pyspark's distribution (mentat_spark.StandaloneCluster).

    python3 benchmarks/py/spark_bench.py --issues 400000 --chain 8 --runs 5
    # scale l, 100 M datoms (6.875 per issue):
    python3 benchmarks/py/spark_bench.py --issues 14550000 --runs 3 --closure-runs 1 \
        --worker-memory 4g --executor-memory 3g --driver-memory 4g --shuffle-partitions 16
"""
import argparse
import os
import pathlib
import statistics
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
os.environ.setdefault("MENTAT_EXTENSION", str(ROOT / "build" / "mentat.duckdb_extension"))
import mentat_spark  # noqa: E402

SCHEMA = """[
 {:db/ident :issue/title :db/valueType :db.type/string :db/cardinality :db.cardinality/one}
 {:db/ident :issue/state :db/valueType :db.type/keyword :db/cardinality :db.cardinality/one :db/index true}
 {:db/ident :issue/priority :db/valueType :db.type/long :db/cardinality :db.cardinality/one :db/index true}
 {:db/ident :issue/assignee :db/valueType :db.type/long :db/cardinality :db.cardinality/one}
 {:db/ident :issue/created-at :db/valueType :db.type/instant :db/cardinality :db.cardinality/one}
 {:db/ident :issue/key :db/valueType :db.type/long :db/cardinality :db.cardinality/one :db/unique :db.unique/identity}
 {:db/ident :issue/blocks :db/valueType :db.type/ref :db/cardinality :db.cardinality/many}]"""

Q3 = "[:find ?state (count ?i) :where [?i :issue/state ?state]]"
Q4 = ("[:find ?i ?title ?priority :in $ ?min :where [?i :issue/state :state/open] [?i :issue/priority ?priority] "
      "[?i :issue/title ?title] [(>= ?priority ?min)]]")
CLOSURE = "[:find (count ?b) . :in $ % :where (blocks+ ?a ?b)]"
RULES = "[[(blocks+ ?a ?b) [?a :issue/blocks ?b]] [(blocks+ ?a ?b) [?a :issue/blocks ?x] (blocks+ ?x ?b)]]"


def build(con, issues, chain):
    con.execute("SELECT * FROM mentat_transact(?)", [SCHEMA]).fetchall()
    t = time.perf_counter()
    con.execute(f"""SELECT * FROM mentat_import('SELECT i AS ":issue/key",
        ''Issue '' || i || '': '' || (ARRAY[''crash'',''ui glitch'',''perf regression'',''typo'',''feature request''])[1 + i % 5] AS ":issue/title",
        '':state/'' || (ARRAY[''open'',''in-progress'',''closed'',''resolved'',''reopened''])[1 + (i * 7) % 5] AS ":issue/state",
        1 + (i // 3) % 5 AS ":issue/priority", (i * 13) % 160000 AS ":issue/assignee",
        TIMESTAMPTZ ''2025-01-01'' + to_minutes(CAST((i * 7919) % 525600 AS BIGINT)) AS ":issue/created-at"
        FROM range({issues}) t(i)')""").fetchall()
    con.execute(f"""SELECT * FROM mentat_import('SELECT i AS ":issue/key", i + 1 AS ":issue/blocks"
        FROM range({issues - 1}) t(i) WHERE i % {chain} <> {chain - 1}', refs := '{{:issue/blocks :issue/key}}')""").fetchall()
    return time.perf_counter() - t


def median_time(f, runs):
    times, out = [], None
    for _ in range(runs):
        t = time.perf_counter()
        out = f()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--issues", type=int, default=400_000)
    ap.add_argument("--chain", type=int, default=8)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--closure-runs", type=int, default=None, help="runs of the closure rule (default --runs)")
    ap.add_argument("--worker-memory", default="1g", help="memory of each Spark worker")
    ap.add_argument("--executor-memory", default="768m")
    ap.add_argument("--driver-memory", default="1g")
    ap.add_argument("--shuffle-partitions", type=int, default=None, help="default 2 per worker")
    a = ap.parse_args()
    work = pathlib.Path(a.workdir or tempfile.mkdtemp(prefix="mentat-spark-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    con = mentat_spark.connect(work / "store.duckdb")
    load = build(con, a.issues, a.chain)
    t = time.perf_counter()
    (files, current, history), = con.execute("SELECT * FROM mentat_export(?)", [str(work / "export")]).fetchall()
    export_s = time.perf_counter() - t
    size = sum(p.stat().st_size for p in (work / "export").glob("*.parquet"))
    print(f"store: {a.issues} issues, {current} current datoms; load {load:.1f} s; "
          f"export {files} files, {size / 1e6:.1f} MB in {export_s:.2f} s")

    from pyspark.sql import SparkSession

    queries = [("q3", Q3, None), ("q4", Q4, "[4]"), ("closure", CLOSURE, f"[{RULES}]")]
    with mentat_spark.StandaloneCluster(workers=a.workers, cores=1, memory=a.worker_memory,
                                        log_dir=work / "spark") as c:
        spark = (SparkSession.builder.master(c.url).appName("mentat-bench")
                 .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
                 .config("spark.executor.memory", a.executor_memory)
                 .config("spark.driver.memory", a.driver_memory).config("spark.cores.max", str(a.workers))
                 .config("spark.sql.shuffle.partitions", str(a.shuffle_partitions or 2 * a.workers)).config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.session.timeZone", "UTC").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        print(f"{'query':8} {'rows':>8} {'mentat_q ms':>12} {'spark ms':>10} {'same':>5}")
        for name, q, inputs in queries:
            runs = (a.closure_runs or a.runs) if name == "closure" else a.runs
            sql = "SELECT * FROM mentat_q(?" + (", inputs := ?" if inputs else "") + ")"
            params = [q] + ([inputs] if inputs else [])
            dt, want = median_time(lambda: con.execute(sql, params).fetchall(), runs)
            st, got = median_time(lambda: [tuple(r) for r in mentat_spark.q(spark, str(work / "export"), q,
                                                                            inputs).collect()], runs)
            same = sorted(map(tuple, want)) == sorted(got)
            print(f"{name:8} {len(want):>8} {dt * 1000:>12.1f} {st * 1000:>10.1f} {str(same):>5}")
        spark.stop()


if __name__ == "__main__":
    main()
