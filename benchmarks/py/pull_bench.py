"""Issue 4's benchmark: pull `[*]` of a random issue, as_of (q2 as of the last transaction of the initial load) and
since (`[:find ?i :where [?i :issue/state _]]` since the transaction before the final batch of history updates),
through mentat_pull / mentat_q. Prints p50/p95 in ms; answers are checked against truth.json first.

Issue 15 adds recursion and components, on a store of their own (a fresh file): `...` down chains of 5,000
entities (the start drawn from 20 chains), `...` against the typed numeric depth on chains of 100, and whole
component trees (fanout 4, depth 5: 1,365 parts per root, the root drawn from 20 trees), named and under `*`.

usage: python3 benchmarks/py/pull_bench.py --data DIR [--db PATH] [--samples 60]
       python3 benchmarks/py/pull_bench.py --recursion-only [--samples 20]
DIR is `mentat-gen` output. PATH (default: a fresh file in /tmp) is used as is if it already holds the store,
else the store is loaded from DIR/tx; then the history batches DIR/hist/*.csv (title,state) are applied, one
transaction each, unless the store already has them. Pass a copy of a loaded store, never the original.
"""
import argparse
import csv
import json
import pathlib
import random
import subprocess
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


def recursion_cases(samples):
    """Deep recursive pulls and component trees on a fresh store; answers checked, then timed."""
    con = connect(str(pathlib.Path(tempfile.mkdtemp()) / "recursion.duckdb"))
    con.execute("SELECT * FROM mentat_transact(?)", ["""[
      {:db/ident :n/name :db/valueType :db.type/string :db/cardinality :db.cardinality/one}
      {:db/ident :n/next :db/valueType :db.type/ref :db/cardinality :db.cardinality/one}
      {:db/ident :part/name :db/valueType :db.type/string :db/cardinality :db.cardinality/one}
      {:db/ident :part/size :db/valueType :db.type/long :db/cardinality :db.cardinality/one}
      {:db/ident :part/sub :db/valueType :db.type/ref :db/cardinality :db.cardinality/many
       :db/isComponent true}]"""]).fetchall()

    def chains(count, length, tag):
        heads = []
        for c in range(count):
            edn = "[" + " ".join(f'{{:db/id "{tag}{i}" :n/name "{tag}{c}-{i}"'
                                 + (f' :n/next "{tag}{i + 1}"}}' if i + 1 < length else "}")
                                 for i in range(length)) + "]"
            t = con.execute("SELECT tempids FROM mentat_transact(?)", [edn]).fetchall()[0][0]
            heads.append(dict(t)[f"{tag}0"])
        return heads

    long_heads, short_heads = chains(20, 5000, "l"), chains(20, 100, "s")

    def tree(depth, fanout, label, dbid=""):
        subs = " ".join(tree(depth - 1, fanout, f"{label}.{k}") for k in range(fanout)) if depth else ""
        return (f'{{{dbid}:part/name "{label}" :part/size {len(label)}'
                + (f" :part/sub [{subs}]}}" if subs else "}"))

    roots = []
    for r in range(20):
        edn = "[" + tree(5, 4, f"r{r}", ':db/id "root" ') + "]"
        roots.append(dict(con.execute("SELECT tempids FROM mentat_transact(?)", [edn]).fetchall()[0][0])["root"])

    deep = "[:n/name {:n/next ...}]"
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(50000)
    try:
        got = json.loads(con.execute("SELECT pull FROM mentat_pull(?, ?)", [deep, long_heads[3]]).fetchall()[0][0]
                         ["n/next"])
        depth = 1
        while got is not None:
            assert got["n/name"] == f"l3-{depth}", got["n/name"]
            got, depth = got.get("n/next"), depth + 1
        assert depth == 5000, depth
        whole = con.execute("SELECT pull FROM mentat_pull('[:part/name :part/sub]', ?)", [roots[0]]).fetchall()[0][0]

        def count(node):
            return 1 + sum(count(json.loads(x) if isinstance(x, str) else x) for x in node.get("part/sub") or [])
        assert count(whole) == 1365, count(whole)
    finally:
        sys.setrecursionlimit(limit)
    typed = "[:n/name {:n/next 100}]"
    a = con.execute("SELECT pull FROM mentat_pull(?, ?)", [typed, short_heads[0]]).fetchall()[0][0]
    b = con.execute("SELECT pull FROM mentat_pull(?, ?)", [deep, short_heads[0]]).fetchall()[0][0]
    node, n = json.loads(b["n/next"]), 1
    while node is not None:
        a, node, n = a["n/next"], node.get("n/next"), n + 1
        assert a is None or a["n/name"] == f"s0-{n - 1}"
    assert n == 100

    rnd = random.Random(15)
    return [
        ("pull {:n/next ...} down a chain of 5,000", lambda: con.execute(
            "SELECT * FROM mentat_pull(?, ?)", [deep, rnd.choice(long_heads)]).fetchall()),
        ("pull {:n/next ...} down a chain of 100 (JSON)", lambda: con.execute(
            "SELECT * FROM mentat_pull(?, ?)", [deep, rnd.choice(short_heads)]).fetchall()),
        ("pull {:n/next 100} down a chain of 100 (typed)", lambda: con.execute(
            "SELECT * FROM mentat_pull(?, ?)", [typed, rnd.choice(short_heads)]).fetchall()),
        ("pull a component tree of 1,365 parts, named", lambda: con.execute(
            "SELECT * FROM mentat_pull('[:part/name :part/sub]', ?)", [rnd.choice(roots)]).fetchall()),
        ("pull a component tree of 1,365 parts, [*]", lambda: con.execute(
            "SELECT * FROM mentat_pull('[*]', ?)", [rnd.choice(roots)]).fetchall()),
        ("pull-many of the 20 roots, [:part/name :part/sub]", lambda: con.execute(
            "SELECT * FROM mentat_pull_many('[:part/name :part/sub]', ?)", [roots]).fetchall()),
    ]


def datascript_rows():
    """The same recursion cases in DataScript (npm, under node), when the suite has installed it."""
    here = pathlib.Path(__file__).resolve().parent
    try:
        sys.path.insert(0, str(here.parent.parent))
        from benchmarks.py.suite.peers.datascript_peer import install
        mod = install(here.parent / "data" / "_node")
    except Exception as e:  # no node/npm: the mentat rows stand alone
        print(f"(DataScript skipped: {e})")
        return
    r = subprocess.run(["node", "--stack-size=65500", str(here / "pull_recursion_ds.js"), str(mod)],
                       capture_output=True, text=True, timeout=900)
    for line in r.stdout.splitlines():
        if line.startswith("| "):
            print(line)
    if r.returncode:
        print(f"(DataScript failed: {r.stderr.strip()[-300:]})")


def report(cases, samples):
    print("| scenario | p50 | p95 |")
    print("|---|---:|---:|")
    for name, fn in cases:
        p50, p95 = timed(fn, samples)
        print(f"| {name} | {p50:.2f} | {p95:.2f} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data")
    ap.add_argument("--db")
    ap.add_argument("--samples", type=int, default=60)
    ap.add_argument("--recursion-only", action="store_true")
    args = ap.parse_args()
    if args.recursion_only:
        print(f"recursion and components: answers checked. p50 / p95 in ms, {args.samples}+ samples each")
        report(recursion_cases(args.samples), args.samples)
        datascript_rows()
        return
    if not args.data:
        sys.exit("--data DIR is needed (or --recursion-only)")
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
    cases += recursion_cases(args.samples)
    print(f"scale {truth.get('scale')}: answers checked. p50 / p95 in ms, {args.samples}+ samples each")
    report(cases, args.samples)
    datascript_rows()


if __name__ == "__main__":
    main()
