"""Issue 4's benchmark: pull `[*]` of a random issue, as_of (q2 as of the last transaction of the initial load) and
since (`[:find ?i :where [?i :issue/state _]]` since the transaction before the final batch of history updates),
through mentat_pull / mentat_q. Prints p50/p95 in ms; answers are checked against truth.json first.

usage: python3 benchmarks/py/pull_bench.py --data DIR [--db PATH] [--samples 60]
DIR is `mentat-gen` output. PATH (default: a fresh file in /tmp) is used as is if it already holds the store,
else the store is loaded from DIR/tx; then the history batches DIR/hist/*.csv (title,state) are applied, one
transaction each, unless the store already has them. Pass a copy of a loaded store, never the original.
"""
import argparse
import csv
import json
import pathlib
import random
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from common import connect, load_store, timed  # noqa: E402

Q2 = ("[:find ?i ?title ?state :in $ ?email :where [?u :user/email ?email] [?i :issue/assignee ?u] "
      "[?i :issue/title ?title] [?i :issue/state ?state]]")
SINCE = "[:find ?i :where [?i :issue/state _]]"


def txs(con):
    return [r[0] for r in con.execute("SELECT e FROM mentat.cur_9 ORDER BY e").fetchall()]


def apply_history(con, data):
    """Applies hist/*.csv (one transaction per batch); returns the tx entids of the batches."""
    a = {r[1]: r[0] for r in con.execute("SELECT e, v FROM mentat.cur_1").fetchall()}
    title_of = dict(con.execute(f"SELECT v, e FROM mentat.cur_{a[':issue/title']}").fetchall())
    out = []
    for f in sorted((data / "hist").glob("*.csv")):
        with open(f) as fh:
            rows = list(csv.DictReader(fh))
        edn = "[" + " ".join(f"[:db/add {title_of[r['title']]} :issue/state {r['state']}]" for r in rows) + "]"
        out.append(con.execute("SELECT tx FROM mentat_transact(?)", [edn]).fetchall()[0][0])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--db")
    ap.add_argument("--samples", type=int, default=60)
    args = ap.parse_args()
    data = pathlib.Path(args.data)
    truth = json.loads((data / "truth.json").read_text())
    db = args.db or str(pathlib.Path(tempfile.mkdtemp()) / "pull.duckdb")
    con = connect(db)
    load_store(con, data)
    n_hist = truth["history"]["batches"]
    all_tx = txs(con)
    # bootstrap + schema + initial tx files, then the history batches
    n_initial = 2 + truth["tx_files"]["count"]
    if len(all_tx) == n_initial:
        apply_history(con, data)
        all_tx = txs(con)
    if len(all_tx) != n_initial + n_hist:
        sys.exit(f"unexpected store: {len(all_tx)} transactions, expected {n_initial} + {n_hist}")
    last_initial = all_tx[n_initial - 1]
    since_basis = all_tx[-2]
    a = {r[1]: r[0] for r in con.execute("SELECT e, v FROM mentat.cur_1").fetchall()}
    issues = [r[0] for r in con.execute(f"SELECT e FROM mentat.cur_{a[':issue/title']}").fetchall()]

    # answers first
    probe = truth["probe_issues"][0]
    e = con.execute(f"SELECT e FROM mentat.cur_{a[':issue/title']} WHERE v = ?", [probe["title"]]).fetchall()[0][0]
    p = con.execute("SELECT pull FROM mentat_pull('[*]', ?)", [e]).fetchall()[0][0]
    names = {r[0]: r[1] for r in con.execute(f"SELECT e, v FROM mentat.cur_{a[':label/name']}").fetchall()}
    assert p["issue/title"] == probe["title"] and p["issue/priority"] == probe["priority"], p
    assert p["issue/state"] == probe["state"], (p, probe)
    assert sorted(names[x["db/id"]] for x in p["issue/label"] or []) == sorted(probe["labels"]), p
    user = truth["probe_users"][0]
    got = con.execute("FROM mentat_q(?, inputs := ?, as_of := ?)", [Q2, json.dumps([user["email"]]), last_initial]
                      ).fetchall()
    want = sorted((i["title"], i["initial_state"]) for i in user["issues"])
    assert sorted((r[1], r[2]) for r in got) == want, "as_of answer differs from the initial states"
    n_since = len(con.execute("FROM mentat_q(?, since := ?)", [SINCE, since_basis]).fetchall())
    assert n_since == truth["since"]["count"], f"since: {n_since} rows, truth {truth['since']['count']}"

    rnd = random.Random(7)
    cases = [
        ("pull [*] of a random issue", lambda: con.execute("SELECT * FROM mentat_pull('[*]', ?)",
                                                           [rnd.choice(issues)]).fetchall()),
        ("as_of (q2, last initial tx)", lambda: con.execute(
            "FROM mentat_q(?, inputs := ?, as_of := ?)", [Q2, json.dumps([user["email"]]), last_initial]).fetchall()),
        ("since (final history batch)", lambda: con.execute("FROM mentat_q(?, since := ?)",
                                                            [SINCE, since_basis]).fetchall()),
        ("SELECT 1 (floor)", lambda: con.execute("SELECT 1").fetchall()),
    ]
    print(f"scale {truth.get('scale')}: answers checked. p50 / p95 in ms, {args.samples}+ samples each")
    print("| scenario | p50 | p95 |")
    print("|---|---:|---:|")
    for name, fn in cases:
        p50, p95 = timed(fn, args.samples)
        print(f"| {name} | {p50:.2f} | {p95:.2f} |")


if __name__ == "__main__":
    main()
