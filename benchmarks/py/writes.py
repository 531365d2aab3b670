"""The transactor's write paths on one small store, for comparing two builds of the extension in one run.

A file store with 5,000 entities (a unique string key and a cardinality-one long) takes single-datom updates of
the long on entities drawn over all 5,000 (never one repeated key):

- `groups`: `mentat_transact_many` calls of N transactions each (N = 1, 4, 16, 64, 5,000): tx/s and ms per call;
- `writers`: W threads, each on its own cursor, sending one `mentat_transact` per update for a few seconds
  (the group commit queue forms the groups): tx/s;

each once with the attribute out of the entity index (the transactor reads the tables) and once after an
entity-shaped query has read it in (the transactor reads the index). Every reported update is checked: the
store's final values are compared with the last value each entity was given.

Usage: python3 benchmarks/py/writes.py [--ext PATH ...] [--seconds 6]; several --ext run one after another in
the same process run, alternating, so that their figures can be compared (absolute figures on a shared
machine are noise). Prints one line per measurement."""
import argparse
import os
import pathlib
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCHEMA = ("[{:db/ident :p/n :db/valueType :db.type/long :db/cardinality :db.cardinality/one}"
          " {:db/ident :p/k :db/valueType :db.type/string :db/cardinality :db.cardinality/one"
          " :db/unique :db.unique/identity}]")
N_ENTITIES = 5000


def child(ext, mode, arg, indexed, seconds):
    import duckdb
    db = pathlib.Path(tempfile.mkdtemp()) / "w.duckdb"
    con = duckdb.connect(str(db), config={"allow_unsigned_extensions": "true"})
    con.execute(f"LOAD '{ext}'")
    con.execute("SELECT * FROM mentat_transact(?)", [SCHEMA]).fetchall()
    con.execute("SELECT * FROM mentat_transact(?)",
                ["[" + " ".join(f'{{:p/k "k{i}" :p/n 0}}' for i in range(N_ENTITIES)) + "]"]).fetchall()
    es = [r[0] for r in con.execute("FROM mentat_q('[:find ?e :where [?e :p/k _]]')").fetchall()]
    if indexed:
        con.execute("FROM mentat_q(?, inputs := ?)",
                    ["[:find ?s :in $ ?e :where [?e :p/n ?s]]", f"[{es[0]}]"]).fetchall()
        state = dict(con.execute("SELECT ident, state FROM mentat_entity_index()").fetchall())
        assert state.get(":p/n") == "indexed", state
    last = {}
    if mode == "groups":
        g, calls = arg, max(1, min(100, 20000 // arg))
        t0 = time.perf_counter()
        k = 0
        for _ in range(calls):
            txs = []
            for _ in range(g):
                e = es[(k * 7919) % len(es)]
                txs.append(f"[[:db/add {e} :p/n {k}]]")
                last[e] = k
                k += 1
            bad = con.execute("SELECT count(*) FILTER (WHERE error IS NOT NULL) FROM mentat_transact_many(?)",
                              [txs]).fetchall()[0][0]
            assert bad == 0
        s = time.perf_counter() - t0
        figure = f"groups of {g}: {calls * g / s:,.0f} tx/s, {1000 * s / calls:.2f} ms per call"
    else:
        w = arg
        stop = time.time() + seconds
        done = [0] * w
        lock = threading.Lock()

        def writer(i):
            c = con.cursor()
            k = i
            while time.time() < stop:
                e = es[(k * 7919) % len(es)]
                tx = c.execute("SELECT tx FROM mentat_transact(?)", [f"[[:db/add {e} :p/n {k}]]"]).fetchall()[0][0]
                with lock:
                    if last.get(e, (0, 0))[0] < tx:
                        last[e] = (tx, k)
                done[i] += 1
                k += w

        threads = [threading.Thread(target=writer, args=(i,)) for i in range(w)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        last = {e: k for e, (_, k) in last.items()}
        figure = f"{w} writer threads: {sum(done) / seconds:,.0f} tx/s"
    got = dict(con.execute("FROM mentat_q('[:find ?e ?n :where [?e :p/n ?n]]')").fetchall())
    wrong = [e for e, k in last.items() if got.get(e) != k]
    assert not wrong, f"{len(wrong)} entities do not hold their last value"
    print(figure + (", attribute in the entity index" if indexed else ""), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ext", action="append", help="extension file(s); default build/mentat.duckdb_extension")
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        ext, mode, arg, indexed = a.child
        child(ext, mode, int(arg), indexed == "1", a.seconds)
        return
    exts = a.ext or [str(ROOT / "build" / "mentat.duckdb_extension")]
    runs = [("groups", g, ix) for g in (1, 4, 16, 64, 5000) for ix in (0, 1)]
    runs += [("writers", w, ix) for w in (1, 16, 64) for ix in (0, 1)]
    for mode, arg, ix in runs:
        for ext in exts:
            out = subprocess.run([sys.executable, __file__, "--seconds", str(a.seconds), "--child", ext, mode,
                                  str(arg), str(ix)], capture_output=True, text=True, env=os.environ)
            line = out.stdout.strip() or f"FAILED: {out.stderr.strip().splitlines()[-1:]}"
            print(f"{pathlib.Path(ext).parent.name:>10}  {line}", flush=True)


if __name__ == "__main__":
    main()
