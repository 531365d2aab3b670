"""Issue 3's benchmark: q1-q4 and input_bindings through mentat_q against the same questions written by hand in
DuckDB SQL over mentat's own tables, in one run on one connection. Prints p50/p95 per scenario and the ratio.

usage: python3 benchmarks/py/query_bench.py --data DIR [--db PATH] [--samples 60]
DIR is `mentat-gen` output; the store is loaded from its tx files unless PATH already holds it. Every answer is
checked against truth.json (initial state) before timing. Figures are printed; nothing asserts on time.
"""
import argparse
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from common import connect, load_store, timed  # noqa: E402

Q1 = "[:find ?e ?name :in $ ?email :where [?e :user/email ?email] [?e :user/name ?name]]"
Q2 = ("[:find ?i ?title ?state :in $ ?email :where [?u :user/email ?email] [?i :issue/assignee ?u] "
      "[?i :issue/title ?title] [?i :issue/state ?state]]")
Q3 = "[:find ?state (count ?i) :where [?i :issue/state ?state]]"
Q4 = ("[:find ?i ?title ?priority :in $ ?min :where [?i :issue/state :state/open] [?i :issue/priority ?priority] "
      "[?i :issue/title ?title] [(>= ?priority ?min)]]")
QIB = "[:find ?e ?name :in $ [?email ...] :where [?e :user/email ?email] [?e :user/name ?name]]"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--db")
    ap.add_argument("--samples", type=int, default=60)
    args = ap.parse_args()
    data = pathlib.Path(args.data)
    truth = json.loads((data / "truth.json").read_text())
    con = connect(args.db or ":memory:")
    load_store(con, data)
    a = {r[1]: r[0] for r in con.execute("SELECT e, v FROM mentat.cur_1").fetchall()}
    t = lambda ident: f"mentat.cur_{a[ident]}"  # noqa: E731
    probe = truth["probe_users"][0]["email"]
    emails = [p["email"] for p in truth["input_bindings"]][:100]
    open_kw = ":state/open"
    cases = [
        ("q1 point_lookup", lambda: con.execute("FROM mentat_q(?, inputs := ?)", [Q1, json.dumps([probe])]).fetchall(),
         lambda: con.execute(f"SELECT u.e, n.v FROM {t(':user/email')} u JOIN {t(':user/name')} n ON n.e = u.e "
                             "WHERE u.v = ?", [probe]).fetchall()),
        ("q2 ref_traversal", lambda: con.execute("FROM mentat_q(?, inputs := ?)", [Q2, json.dumps([probe])]).fetchall(),
         lambda: con.execute(f"SELECT a.e, ti.v, s.v FROM {t(':user/email')} u JOIN {t(':issue/assignee')} a "
                             f"ON a.v = u.e JOIN {t(':issue/title')} ti ON ti.e = a.e JOIN {t(':issue/state')} s "
                             "ON s.e = a.e WHERE u.v = ?", [probe]).fetchall()),
        ("q3 aggregate", lambda: con.execute("FROM mentat_q(?)", [Q3]).fetchall(),
         lambda: con.execute(f"SELECT v, count(*) FROM {t(':issue/state')} GROUP BY v").fetchall()),
        ("q4 predicate_scan", lambda: con.execute("FROM mentat_q(?, inputs := '[4]')", [Q4]).fetchall(),
         lambda: con.execute(f"SELECT s.e, ti.v, p.v FROM {t(':issue/state')} s JOIN {t(':issue/priority')} p "
                             f"ON p.e = s.e JOIN {t(':issue/title')} ti ON ti.e = s.e "
                             "WHERE s.v = ? AND p.v >= 4", [open_kw]).fetchall()),
        ("input_bindings", lambda: con.execute("FROM mentat_q(?, inputs := ?)", [QIB, json.dumps([emails])]).fetchall(),
         lambda: con.execute(f"SELECT u.e, n.v FROM {t(':user/email')} u JOIN {t(':user/name')} n ON n.e = u.e "
                             "WHERE u.v IN (SELECT unnest(?::VARCHAR[]))", [emails]).fetchall()),
    ]
    # answers first: mentat and the hand-written SQL must agree, and q3/q4 must match the generator's truth
    for name, m, h in cases:
        if sorted(map(tuple, m())) != sorted(map(tuple, h())):
            sys.exit(f"{name}: mentat_q and hand-written SQL disagree")
    counts = dict(con.execute("FROM mentat_q(?)", [Q3]).fetchall())
    if counts != truth["state_counts"]["initial"]:
        sys.exit(f"q3 answer {counts} differs from truth {truth['state_counts']['initial']}")
    n4 = len(cases[3][1]())
    if n4 != truth["open_priority_ge_4"]["initial"]:
        sys.exit(f"q4 answer {n4} rows differs from truth {truth['open_priority_ge_4']['initial']}")
    print(f"scale {truth.get('scale')}: answers checked. p50 / p95 in ms, {args.samples}+ samples each")
    print(f"| scenario | mentat_q p50 | p95 | hand SQL p50 | p95 | ratio |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, m, h in cases:
        mp50, mp95 = timed(m, args.samples)
        hp50, hp95 = timed(h, args.samples)
        print(f"| {name} | {mp50:.2f} | {mp95:.2f} | {hp50:.2f} | {hp95:.2f} | {mp50 / hp50:.2f}x |")


if __name__ == "__main__":
    main()
