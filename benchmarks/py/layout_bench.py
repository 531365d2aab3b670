"""Measures the storage layout's choices on a loaded store (issue 2: "measure the choices you make").

usage: python3 benchmarks/py/layout_bench.py --db STORE.duckdb [--samples 40]
STORE is a file loaded by query_bench.py or bulk_load.py (scale s or m). Works on a copy in a temporary database
file (checkpointed, so DuckDB's compression applies as it does for a real store); the store is not changed.
Prints, for each choice, the alternatives' median query times.
"""
import argparse
import pathlib
import statistics
import tempfile
import time

import duckdb


def med(con, sql, params=(), samples=40):
    for _ in range(3):
        con.execute(sql, list(params)).fetchall()
    ts = []
    for _ in range(samples):
        t = time.perf_counter()
        con.execute(sql, list(params)).fetchall()
        ts.append((time.perf_counter() - t) * 1000)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", required=True)
    ap.add_argument("--samples", type=int, default=40)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp()
    con = duckdb.connect(f"{tmp}/layout.duckdb")
    con.execute(f"ATTACH '{args.db}' AS src (READ_ONLY)")
    a = {r[1]: r[0] for r in con.execute("SELECT e, v FROM src.mentat.cur_1").fetchall()}
    t = lambda i: f"cur_{a[i]}"  # noqa: E731
    # copy the workload's tables into memory, as mentat lays them out (per attribute, insertion order)
    for ident in [":user/email", ":user/name", ":issue/title", ":issue/state", ":issue/priority", ":issue/assignee"]:
        con.execute(f"CREATE TABLE {t(ident)} AS SELECT * FROM src.mentat.{t(ident)}")
    con.execute("CHECKPOINT")
    email = con.execute(f"SELECT v FROM {t(':user/email')} ORDER BY e LIMIT 1 OFFSET 7").fetchall()[0][0]
    n = lambda tb: con.execute(f"SELECT count(*) FROM {tb}").fetchall()[0][0]  # noqa: E731
    print(f"tables copied: {n(t(':user/email'))} users, {n(t(':issue/title'))} issues; median of {args.samples}")
    q1 = (f"SELECT u.e, n.v FROM {t(':user/email')} u JOIN {t(':user/name')} n ON n.e = u.e WHERE u.v = ?")
    q2 = (f"SELECT a.e, ti.v, s.v FROM {t(':user/email')} u JOIN {t(':issue/assignee')} a ON a.v = u.e "
          f"JOIN {t(':issue/title')} ti ON ti.e = a.e JOIN {t(':issue/state')} s ON s.e = a.e WHERE u.v = ?")
    q3 = f"SELECT v, count(*) FROM {t(':issue/state')} GROUP BY v"
    q4 = (f"SELECT s.e, ti.v, p.v FROM {t(':issue/state')} s JOIN {t(':issue/priority')} p ON p.e = s.e "
          f"JOIN {t(':issue/title')} ti ON ti.e = s.e WHERE s.v = ':state/open' AND p.v >= 4")
    print("\n1. ART index on v of a unique attribute (q1 point lookup)")
    no_idx = med(con, q1, [email], args.samples)
    con.execute(f"CREATE INDEX email_v ON {t(':user/email')} (v)")
    with_idx = med(con, q1, [email], args.samples)
    print(f"   without index {no_idx:.2f} ms, with ART index {with_idx:.2f} ms")
    print("\n2. Per-attribute tables versus one table per value type with an attribute column, ordered by (a, v)")
    con.execute(f"CREATE TABLE by_type_string AS SELECT {a[':user/email']} AS a, e, v, tx FROM {t(':user/email')} "
                f"UNION ALL SELECT {a[':user/name']}, e, v, tx FROM {t(':user/name')} "
                f"UNION ALL SELECT {a[':issue/title']}, e, v, tx FROM {t(':issue/title')} ORDER BY a, v")
    con.execute(f"CREATE TABLE by_type_ref AS SELECT {a[':issue/assignee']} AS a, e, v, tx "
                f"FROM {t(':issue/assignee')} ORDER BY a, v")
    con.execute(f"CREATE TABLE by_type_kw AS SELECT {a[':issue/state']} AS a, e, v, tx FROM {t(':issue/state')} "
                "ORDER BY a, v")
    con.execute(f"CREATE TABLE by_type_long AS SELECT {a[':issue/priority']} AS a, e, v, tx "
                f"FROM {t(':issue/priority')} ORDER BY a, v")
    q1t = (f"SELECT u.e, n.v FROM by_type_string u JOIN by_type_string n ON n.e = u.e AND n.a = {a[':user/name']} "
           f"WHERE u.a = {a[':user/email']} AND u.v = ?")
    q2t = (f"SELECT r.e, ti.v, s.v FROM by_type_string u JOIN by_type_ref r ON r.v = u.e AND r.a = "
           f"{a[':issue/assignee']} JOIN by_type_string ti ON ti.e = r.e AND ti.a = {a[':issue/title']} "
           f"JOIN by_type_kw s ON s.e = r.e AND s.a = {a[':issue/state']} WHERE u.a = {a[':user/email']} AND u.v = ?")
    q4t = (f"SELECT s.e, ti.v, p.v FROM by_type_kw s JOIN by_type_long p ON p.e = s.e AND p.a = "
           f"{a[':issue/priority']} JOIN by_type_string ti ON ti.e = s.e AND ti.a = {a[':issue/title']} "
           f"WHERE s.a = {a[':issue/state']} AND s.v = ':state/open' AND p.v >= 4")
    con.execute("DROP INDEX email_v")
    con.execute("CHECKPOINT")
    for name, per_attr, per_type, params in [("q1", q1, q1t, [email]), ("q2", q2, q2t, [email]),
                                             ("q4", q4, q4t, [])]:
        pa = med(con, per_attr, params, args.samples)
        pt = med(con, per_type, params, args.samples)
        print(f"   {name}: per attribute {pa:.2f} ms, per value type ordered by (a, v) {pt:.2f} ms")
    print("\n3. Keyword values: VARCHAR text versus interned INTEGER ids (q3 aggregate)")
    con.execute(f"CREATE TABLE kw_interned AS SELECT e, dense_rank() OVER (ORDER BY v)::INTEGER AS v, tx "
                f"FROM {t(':issue/state')}")
    con.execute("CHECKPOINT")
    text_ms = med(con, q3, [], args.samples)
    int_ms = med(con, "SELECT v, count(*) FROM kw_interned GROUP BY v", [], args.samples)
    print(f"   VARCHAR {text_ms:.2f} ms, interned INTEGER {int_ms:.2f} ms")
    print("\n4. Zone-map pruning: the state table in insertion (entid) order versus ordered by value (q4)")
    con.execute(f"CREATE TABLE state_sorted AS SELECT * FROM {t(':issue/state')} ORDER BY v")
    con.execute("CHECKPOINT")
    q4s = q4.replace(t(':issue/state') + " s", "state_sorted s")
    print(f"   insertion order {med(con, q4, [], args.samples):.2f} ms, ordered by v "
          f"{med(con, q4s, [], args.samples):.2f} ms")


if __name__ == "__main__":
    main()
