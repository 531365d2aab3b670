"""Acknowledged means durable: writer threads in a child process send transactions through mentat_transact (the
group commit queue) and log each acknowledged tx (flushed and fsynced before the next); the parent kills the child
with SIGKILL at random moments, reopens the store and checks, after every kill:

- every acknowledged tx is in the store, whole (its three datoms, with that tx and entity);
- nothing is half-applied: every entity that has one of the three attributes has all three, in one tx;
- no entid is used twice: every transaction's new entity and every tx entid are distinct, across all the runs.

A SIGKILL keeps what the process handed to the operating system (it tests a crashed process, not a power cut).
Usage: python3 benchmarks/py/durability.py [--kills 20] [--writers 64] [--seed 0] [--index]; prints what it checked.
tests/test_durability.py runs a short version of the same check in the test suite."""
import argparse
import json
import os
import pathlib
import random
import subprocess
import sys
import tempfile
import time


ROOT = pathlib.Path(__file__).resolve().parents[2]
EXT = pathlib.Path(os.environ.get("MENTAT_EXTENSION", ROOT / "build" / "mentat.duckdb_extension"))

SCHEMA = ("[{:db/ident :m/key :db/valueType :db.type/string :db/cardinality :db.cardinality/one "
          ":db/unique :db.unique/identity}"
          " {:db/ident :m/a :db/valueType :db.type/long :db/cardinality :db.cardinality/one}"
          " {:db/ident :m/b :db/valueType :db.type/long :db/cardinality :db.cardinality/one}]")

CHILD = r"""
import os, sys, threading, duckdb
db, ext, log, writers, run, index = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6]
con = duckdb.connect(db, config={"allow_unsigned_extensions": "true"})
con.execute(f"LOAD '{ext}'")
if index == "1":
    # an entity-shaped query reads the three attributes into the entity index, so that the groups go to the
    # transaction log (storage/src/txlog.rs) and the kill finds acknowledged transactions there, not yet applied
    for _ in range(2):
        con.execute("SELECT * FROM mentat_q(?, inputs := ?)",
                    ["[:find [?a ?b] :in $ ?k :where [?e :m/key ?k] [?e :m/a ?a] [?e :m/b ?b]]", '["none"]']).fetchall()
out = open(log, "a")
lock = threading.Lock()

def writer(k):
    c = con.cursor()
    i = 0
    while True:
        key = f"{run}-{k}-{i}"
        edn = f'[{{:db/id "m" :m/key "{key}" :m/a {i} :m/b {k}}}]'
        tx, tempids = c.execute("SELECT tx, tempids FROM mentat_transact(?)", [edn]).fetchall()[0]
        with lock:
            out.write(f"{tx} {key} {dict(tempids)['m']} {i} {k}\n")
            out.flush()
            os.fsync(out.fileno())
        i += 1

for k in range(writers):
    threading.Thread(target=writer, args=(k,), daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
"""


# The parent never opens the store itself: mentat's connection pool keeps a database open for the life of the
# process that loaded it, which would hold DuckDB's file lock against the next writer process.
READ = r"""
import json, sys, duckdb
con = duckdb.connect(sys.argv[1], config={"allow_unsigned_extensions": "true"})
# datoms the killed writer left in the log file (storage/src/logfile.rs), past the mark of the last record applied
import os, struct
try:
    mark = con.execute("SELECT max(value::UBIGINT) FROM mentat.meta WHERE key = 'log_applied'").fetchone()[0] or 0
except duckdb.CatalogException:  # killed before the store was made
    mark = 0
path, logged = sys.argv[1] + ".mentat.txlog", 0
b = open(path, "rb").read() if os.path.exists(path) else b""
at = 16
while at + 8 <= len(b):
    size = struct.unpack_from("<I", b, at)[0]
    if at + 8 + size > len(b):
        break
    seq, rows = struct.unpack_from("<QI", b, at + 8)
    logged += rows if seq > mark else 0
    at += 8 + size
con.execute(f"LOAD '{sys.argv[2]}'")
if len(sys.argv) > 3:
    con.execute("SELECT * FROM mentat_transact(?)", [sys.argv[3]]).fetchall()
out = {}
for attr in (":m/key", ":m/a", ":m/b"):
    try:
        out[attr] = con.execute("SELECT e, v, tx FROM mentat_datoms('AEVT', a := ?)", [attr]).fetchall()
    except duckdb.Error:
        out[attr] = []
print(json.dumps({"datoms": out, "logged": logged}))
"""


def read_store(db, schema=None):
    """The store's :m/key, :m/a and :m/b datoms, read by a process of its own (after transacting `schema`), and
    how many rows its transaction log held when that process opened it (applied as the store was opened)."""
    args = [sys.executable, "-c", READ, str(db), str(EXT)] + ([schema] if schema else [])
    p = subprocess.run(args, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"the store could not be read: {p.stderr}")
    return json.loads(p.stdout)


def acknowledged(log):
    """tx -> (key, entity, a, b) of every logged line (a line cut short by the kill is not a whole line: skipped)."""
    acked = {}
    for line in pathlib.Path(log).read_text().splitlines():
        parts = line.split()
        if len(parts) == 5:
            tx, key, e, a, b = parts
            acked[int(tx)] = (key, int(e), int(a), int(b))
    return acked


def check(db, log):
    """Checks the store against the log (see the module docs); returns (acknowledged, transactions in the store).
    Raises AssertionError naming what is wrong."""
    datoms = {}
    read = read_store(db)
    for attr, rows in read["datoms"].items():
        for e, v, tx in rows:
            datoms.setdefault(e, {})[attr] = (v, tx)
    for e, d in datoms.items():
        assert set(d) == {":m/key", ":m/a", ":m/b"}, f"entity {e} is half-applied: {d}"
        assert len({tx for _, tx in d.values()}) == 1, f"entity {e} was written by several transactions: {d}"
    by_tx = {d[":m/key"][1]: (d[":m/key"][0], e, int(d[":m/a"][0]), int(d[":m/b"][0])) for e, d in datoms.items()}
    assert len(by_tx) == len(datoms), "two entities written by one tx"
    acked = acknowledged(log)
    for tx, want in acked.items():
        assert by_tx.get(tx) == want, f"acknowledged tx {tx} {want} is not in the store whole: {by_tx.get(tx)}"
    keys = [k for k, *_ in by_tx.values()]
    assert len(set(keys)) == len(keys), "a key was written twice"
    return len(acked), len(by_tx), read["logged"]


def run(workdir, kills=20, writers=64, seed=0, min_s=0.3, max_s=2.0, quiet=False, index=False):
    """Kills a writing child `kills` times at random moments and checks the store after each kill. With `index`,
    the child first reads the attributes into the entity index, so that its writes go through the transaction
    log. Returns the number of acknowledged transactions at the end, the transactions in the store, and the
    most log rows a reopen found not yet applied."""
    rng = random.Random(seed)
    db, log = pathlib.Path(workdir) / "durable.duckdb", pathlib.Path(workdir) / "acked.log"
    read_store(db, SCHEMA)
    log.touch()
    acked = stored = most_logged = 0
    for k in range(kills):
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(db), str(EXT), str(log), str(writers), str(k),
                                  "1" if index else "0"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = child.stdout.readline()
        if line.strip() != "ready":
            child.kill()
            raise RuntimeError(f"the writer process did not start: {line} {child.stderr.read()}")
        time.sleep(rng.uniform(min_s, max_s))
        child.kill()
        child.wait()
        acked, stored, logged = check(db, log)
        most_logged = max(most_logged, logged)
        if not quiet:
            print(f"kill {k + 1}/{kills}: {acked} acknowledged transactions, {stored} in the store, all whole "
                  f"({logged} log rows applied at the reopen)", flush=True)
    return acked, stored, most_logged


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--writers", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--index", action="store_true", help="read the attributes into the entity index first, so "
                    "that the writes go through the transaction log")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        acked, stored, _ = run(d, a.kills, a.writers, a.seed, index=a.index)
    print(f"durability: {a.kills} kills of {a.writers} writers: {acked} acknowledged transactions, all in the store "
          f"whole ({stored} in the store: the rest committed before the kill but not yet logged)")


if __name__ == "__main__":
    main()
