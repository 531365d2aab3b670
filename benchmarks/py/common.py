"""Helpers shared by the benchmark scripts."""
import os
import pathlib
import statistics
import time

import duckdb

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXT = pathlib.Path(os.environ.get("MENTAT_EXTENSION", ROOT / "build" / "mentat.duckdb_extension"))


def connect(path=":memory:"):
    con = duckdb.connect(str(path), config={"allow_unsigned_extensions": "true"})
    con.execute(f"LOAD '{EXT}'")
    return con


def connect_fresh(path):
    """`connect` to a new database file at `path`: the file, its write-ahead log and the default store's transaction
    log file left by an earlier run are removed first."""
    for p in (pathlib.Path(path), pathlib.Path(f"{path}.wal"), pathlib.Path(f"{path}.mentat.txlog")):
        if p.exists():
            p.unlink()
    return connect(path)


def datom_count(con, store="mentat", all_attrs=False):
    """Current datoms of user attributes (entid >= 100) or of every attribute, by plain SQL over the tables."""
    tables = [r[0] for r in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE schema_name = ? AND table_name LIKE 'cur_%'",
        [store]).fetchall()]
    if not all_attrs:
        tables = [t for t in tables if int(t[4:]) >= 100]
    return sum(con.execute(f'SELECT count(*) FROM "{store}"."{t}"').fetchall()[0][0] for t in tables)


def load_store(con, data, store="mentat"):
    """Loads `mentat-gen` output (schema.edn, tx/*.edn) through mentat_transact unless the store exists.
    Returns the number of transactions run."""
    data = pathlib.Path(data)
    exists = con.execute("SELECT count(*) FROM duckdb_tables() WHERE schema_name = ? AND table_name = 'partitions'",
                         [store]).fetchall()[0][0]
    if exists:
        return 0
    con.execute("SELECT * FROM mentat_transact(?, store := ?)", [(data / "schema.edn").read_text(), store]).fetchall()
    files = sorted((data / "tx").glob("*.edn"))
    for f in files:
        con.execute("SELECT * FROM mentat_transact(?, store := ?)", [f.read_text(), store]).fetchall()
    # compress and write everything to the database file, as a long-running store would have been by now
    con.execute("CHECKPOINT")
    return len(files)


def timed(fn, samples):
    """Warms up with 3 calls, then times `fn` at least `samples` times or for 10 s (at most 5 x samples).
    Returns (p50, p95) in milliseconds."""
    for _ in range(3):
        fn()
    ts = []
    deadline = time.perf_counter() + 10
    while len(ts) < samples or (time.perf_counter() < deadline and len(ts) < samples * 5):
        t = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t) * 1000)
    ts.sort()
    return statistics.median(ts), ts[int(len(ts) * 0.95) - 1]
