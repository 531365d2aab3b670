"""Recursive rules: transitive closure of random graphs (the Logica paper's gNk graphs: N nodes, 10N random edges,
seeded RNG), through mentat_q with a rule set, next to published figures; plus "descendants of one node" seeded
(the node a constant input: the recursion closes from it) versus unseeded (the whole closure, then filtered).

    python benchmarks/py/rules_bench.py [--sizes 1000,3000] [--datascript]

Edges are loaded with mentat_import, one import per edge rank (the k-th out-edge of every node), each row a node
upserted by its :node/id with one :node/to value resolved by `refs`. Timings are wall times of
`SELECT count(*) FROM mentat_q(...)`, best of 3; nothing is asserted.

Published figures (32 vCPUs, from the Logica DuckDB paper): Logica on DuckDB 1.7 s (g1k) / 4.5 s (g3k);
Souffle 0.6 s / 3.6 s.
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import tempfile
import time

from common import connect

SCHEMA = """[
 {:db/ident :node/id :db/valueType :db.type/long :db/cardinality :db.cardinality/one :db/unique :db.unique/identity}
 {:db/ident :node/to :db/valueType :db.type/ref :db/cardinality :db.cardinality/many}]"""

# Left-linear: the seed of "reachable from a" stays in the first position (filter seeding).
RULES = """[[(tc ?a ?b) [?a :node/to ?b]] [(tc ?a ?b) (tc ?a ?x) [?x :node/to ?b]]]"""
# Right-linear, the Datomic-docs shape: seeding a closes the first position first (factoring).
RULES_RIGHT = """[[(tc ?a ?b) [?a :node/to ?b]] [(tc ?a ?b) [?a :node/to ?x] (tc ?x ?b)]]"""

# Non-linear (path doubling): two recursive calls in one body, a keyed recursive CTE evaluated semi-naively.
RULES_DOUBLING = """[[(tc ?a ?b) [?a :node/to ?b]] [(tc ?a ?b) (tc ?a ?x) (tc ?x ?b)]]"""
# Parameterised: a limit passed through the recursion unchanged, and a hop budget the body decrements.
RULES_LIMIT = """[[(lim ?a ?b ?max) [?a :node/to ?b] [?b :node/id ?i] [(< ?i ?max)]]
                 [(lim ?a ?b ?max) [?a :node/to ?y] [?y :node/id ?j] [(< ?j ?max)] (lim ?y ?b ?max)]]"""
RULES_HOPS = """[[(hops ?a ?b ?k) [(> ?k 0)] [?a :node/to ?b]]
                [(hops ?a ?b ?k) [(> ?k 0)] [?a :node/to ?y] [(- ?k 1) ?k2] (hops ?y ?b ?k2)]]"""

PUBLISHED = {1000: {"Logica/DuckDB": 1.7, "Souffle": 0.6}, 3000: {"Logica/DuckDB": 4.5, "Souffle": 3.6}}


def graph(n, seed=42):
    rng = random.Random(seed)
    edges = set()
    while len(edges) < 10 * n:
        edges.add((rng.randrange(n), rng.randrange(n)))
    return sorted(edges)


def load(con, n, edges):
    con.execute("SELECT * FROM mentat_transact(?)", [SCHEMA]).fetchall()
    con.execute(f"SELECT * FROM mentat_import('SELECT i AS \":node/id\" FROM range({n}) t(i)')").fetchall()
    con.execute("CREATE TEMP TABLE IF NOT EXISTS edges_src(a BIGINT, b BIGINT)")
    con.execute("CREATE TABLE bench_edges AS SELECT * FROM (VALUES (0, 0)) t(a, b) LIMIT 0")
    con.executemany("INSERT INTO bench_edges VALUES (?, ?)", edges)
    con.execute("CREATE TABLE bench_ranked AS SELECT a, b, row_number() OVER (PARTITION BY a ORDER BY b) AS k "
                "FROM bench_edges")
    ranks = con.execute("SELECT max(k) FROM bench_ranked").fetchall()[0][0]
    for k in range(1, ranks + 1):
        src = f'SELECT a AS ":node/id", b AS ":node/to" FROM bench_ranked WHERE k = {k}'
        con.execute("SELECT * FROM mentat_import(?, refs := ?)", [src, "{:node/to :node/id}"]).fetchall()


def timed(con, query, inputs, runs=3):
    best, out = None, None
    for _ in range(runs):
        t = time.perf_counter()
        out = con.execute("SELECT count(*) FROM mentat_q(?, inputs := ?)", [query, inputs]).fetchall()[0][0]
        d = time.perf_counter() - t
        best = d if best is None else min(best, d)
    return best, out


def datascript(n, edges, timeout):
    """DataScript (node) on the same graph: the full closure count, or a reason it was skipped. (Its JS API names
    attributes by strings, so the rules say "node/to".)"""
    if not shutil.which("node") or not shutil.which("npm"):
        return None, "node/npm not found"
    d = tempfile.mkdtemp(prefix="ds_bench_")
    try:
        r = subprocess.run(["npm", "install", "--silent", "datascript"], cwd=d, capture_output=True, timeout=300)
        if r.returncode != 0:
            return None, "npm install datascript failed: " + r.stderr.decode()[:200]
        with open(os.path.join(d, "edges.json"), "w") as f:
            json.dump(edges, f)
        script = """
const ds = require('datascript'); const edges = require('./edges.json');
const schema = {'node/to': {':db/valueType': ':db.type/ref', ':db/cardinality': ':db.cardinality/many'}};
const conn = ds.create_conn(schema);
const tx = []; for (let i = 0; i < %d; i++) tx.push({':db/id': i + 1, 'node/id': i});
for (const [a, b] of edges) tx.push([':db/add', a + 1, 'node/to', b + 1]);
ds.transact(conn, tx);
const rules = '[[(tc ?a ?b) [?a "node/to" ?b]] [(tc ?a ?b) [?a "node/to" ?x] (tc ?x ?b)]]';
const t = process.hrtime.bigint();
const r = ds.q('[:find ?a ?b :in $ %% :where (tc ?a ?b)]', ds.db(conn), rules);
const s = Number(process.hrtime.bigint() - t) / 1e9;
console.log(JSON.stringify({secs: s, count: r.length}));
""" % n
        with open(os.path.join(d, "run.js"), "w") as f:
            f.write(script)
        try:
            r = subprocess.run(["node", "--max-old-space-size=16000", "run.js"], cwd=d, capture_output=True,
                               timeout=timeout)
        except subprocess.TimeoutExpired:
            return None, f"did not finish in {timeout} s"
        if r.returncode != 0:
            return None, "failed: " + r.stderr.decode()[-200:]
        out = json.loads(r.stdout.decode().strip().splitlines()[-1])
        return out, None
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,3000")
    ap.add_argument("--datascript", action="store_true", help="also run DataScript (node) on the same graphs")
    ap.add_argument("--datascript-timeout", type=int, default=300)
    args = ap.parse_args()
    print(f"machine: {os.cpu_count()} vCPUs")
    for n in [int(s) for s in args.sizes.split(",")]:
        edges = graph(n)
        con = connect()
        t = time.perf_counter()
        load(con, n, edges)
        load_s = time.perf_counter() - t
        print(f"\ng{n // 1000}k: {n} nodes, {len(edges)} edges (loaded in {load_s:.1f} s)")
        full_q = "[:find ?a ?b :in $ % :where (tc ?a ?b)]"
        for name, rules in [("left-linear", RULES), ("right-linear", RULES_RIGHT), ("doubling", RULES_DOUBLING)]:
            secs, count = timed(con, full_q, f"[{rules}]", runs=1 if name == "doubling" else 3)
            print(f"  mentat full closure ({name:12}) {secs:7.2f} s   {count:>10,} pairs")
        for sys_name, s in PUBLISHED.get(n, {}).items():
            print(f"  published {sys_name:29} {s:7.2f} s   (32 vCPUs)")
        if args.datascript:
            out, why = datascript(n, edges, args.datascript_timeout)
            if out:
                print(f"  DataScript (node)                    {out['secs']:7.2f} s   {out['count']:>10,} pairs")
            else:
                print(f"  DataScript (node)                    skipped: {why}")
        one = "[:find ?b :in $ % ?a :where (tc ?a ?b)]"
        unseeded = "[:find ?b :in $ % :where [?a :node/id 7] (tc ?a ?b)]"
        for name, rules in [("left-linear", RULES), ("right-linear", RULES_RIGHT)]:
            s_secs, s_count = timed(con, one, f"[{rules} [:node/id 7]]")
            u_secs, u_count = timed(con, unseeded, f"[{rules}]")
            print(f"  reachable from one node ({name:12}) seeded {s_secs:6.3f} s ({s_count} nodes), "
                  f"unseeded {u_secs:6.3f} s ({u_count} nodes)")
        # parameterised shapes from the same node: under a limit on :node/id (half the nodes), and within 3 hops
        lim_q = "[:find ?b :in $ % ?a ?max :where (lim ?a ?b ?max)]"
        secs, count = timed(con, lim_q, f"[{RULES_LIMIT} [:node/id 7] {n // 2}]")
        print(f"  reachable under a limit (parameter)    seeded {secs:6.3f} s ({count} nodes)")
        hop_q = "[:find ?b :in $ % ?a ?k :where (hops ?a ?b ?k)]"
        secs, count = timed(con, hop_q, f"[{RULES_HOPS} [:node/id 7] 3]")
        print(f"  within 3 hops (decremented budget)     seeded {secs:6.3f} s ({count} nodes)")
        every = "[:find ?a ?b :in $ % :where [?a :node/id ?i] [(< ?i 100)] (hops ?a ?b 2)]"
        secs, count = timed(con, every, f"[{RULES_HOPS}]")
        print(f"  within 2 hops of 100 nodes (caller's relation seeds) {secs:6.3f} s ({count} pairs)")
        con.close()


if __name__ == "__main__":
    main()
