"""Pull patterns that follow refs, through the entity index and through one SQL statement (issue 11).

The scale suite's issue tracker at `--scale` (`benchmarks/py/suite`, loaded through `mentat_transact` with its
history), then, in two child processes run one after the other on copies of the store, mentat loaded with the
entity path on (`MENTAT_ENTITY_PATH=1`) and off (`0`, every pull one SQL statement): each pattern below pulled for
`--calls` random issues (or users, for the reverse attribute), keys drawn uniformly over every issue (130,000 at s,
1.3 million at m) so that no cache carries a figure; then two queries with `(pull ?e pattern)` find elements
(`mentat_q`, a random user's email as input) and a pull of a user named by a lookup ref, after a warm-up that lets the index read its attributes.
Printed per pattern: p50 and p95 in ms per path, and p50 against `SELECT 1` from the same process (the floor of
any statement, issue 11's yardstick). The answers of both paths for the same 200 keys per pattern are compared
first; the run stops at the first difference.

usage: python3 -m benchmarks.py.pull_shapes [--scale s] [--calls 2000] [--out results.json]
"""
import argparse
import json
import os
import pathlib
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

PATTERNS = [
    # (name, pattern, whose keys: issues or users)
    ("star", "[*]", "issues"),
    ("flat", "[:issue/title :issue/state :issue/priority]", "issues"),
    ("nested", "[:issue/title {:issue/assignee [:user/email :user/name]}]", "issues"),
    ("nested_two", "[:issue/title {:issue/assignee [:user/email]} {:issue/reporter [:user/email]} "
                   "{:issue/label [:label/name]}]", "issues"),
    ("star_nested_star", "[* {:issue/assignee [*]}]", "issues"),
    ("reverse", "[:user/email {[:issue/_assignee :limit 20] [:issue/title :issue/state]}]", "users"),
    ("lookup_ref", "[*]", "email_refs"),  # the user named by a lookup ref, `[:user/email "..."]`
    # `(pull ?e pattern)` find elements of mentat_q, the entity given by a user's email
    ("q_pull_star", "[:find (pull ?u [*]) . :in $ ?m :where [?u :user/email ?m]]", "emails"),
    ("q_pull_issues", "[:find (pull ?i [:issue/title :issue/state {:issue/reporter [:user/email]}]) :in $ ?m "
                      ":where [?u :user/email ?m] [?i :issue/assignee ?u]]", "emails"),
]


def call(c, pattern, key):
    """One pull (`mentat_pull`) or one query (`mentat_q`, the key its input), all rows fetched."""
    if pattern.startswith("[:find"):
        return c.execute("SELECT * FROM mentat_q(?, inputs := ?)", [pattern, json.dumps([key])]).fetchall()
    return c.execute("SELECT e, pull FROM mentat_pull(?, ?)", [pattern, key]).fetchall()


def child(db, calls, seed):
    """Runs in the child process: the parity sample's answers and the timings, as JSON on stdout."""
    from benchmarks.py.common import connect
    con = connect(db)
    c = con.cursor()
    keys = {
        "issues": [r[0] for r in c.execute("FROM mentat_q('[:find ?e :where [?e :issue/title]]')").fetchall()],
        "users": [r[0] for r in c.execute("FROM mentat_q('[:find ?e :where [?e :user/email]]')").fetchall()],
        "emails": [r[0] for r in c.execute("FROM mentat_q('[:find ?m :where [_ :user/email ?m]]')").fetchall()],
    }
    keys["email_refs"] = [f'[:user/email {json.dumps(m)}]' for m in keys["emails"]]
    out = {"keys": {k: len(v) for k, v in keys.items()}, "answers": {}, "timings": {}}
    for name, pattern, whose in PATTERNS:
        rnd = random.Random(seed)
        sample = [keys[whose][rnd.randrange(len(keys[whose]))] for _ in range(200)]
        out["answers"][name] = [repr(sorted(call(c, pattern, k), key=repr)) for k in sample]
    # warm-up: the index reads the attributes in the background while the general path answers
    deadline = time.perf_counter() + 120
    while time.perf_counter() < deadline:
        for name, pattern, whose in PATTERNS:
            call(c, pattern, keys[whose][0])
        reading = c.execute("SELECT count(*) FROM mentat_entity_index() WHERE state = 'reading'").fetchall()[0][0]
        if not reading:
            break
        time.sleep(0.2)

    def timed(f, n):
        ts = []
        for _ in range(n):
            t = time.perf_counter()
            f()
            ts.append((time.perf_counter() - t) * 1000)
        ts.sort()
        return {"p50": statistics.median(ts), "p95": ts[int(len(ts) * 0.95)]}

    rnd = random.Random(seed + 1)
    out["timings"]["floor"] = timed(lambda: c.execute("SELECT 1").fetchall(), calls)
    for name, pattern, whose in PATTERNS:
        ks = keys[whose]
        out["timings"][name] = timed(lambda: call(c, pattern, ks[rnd.randrange(len(ks))]), calls)
    print(json.dumps(out))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", default="s")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--out", default=None)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    o = ap.parse_args(argv)
    if o.child:
        return child(o.child, o.calls, 11)
    from benchmarks.py.suite import workload as W
    from benchmarks.py.suite.peers import mentat as M
    from benchmarks.py.soak import Opts
    work = pathlib.Path(tempfile.mkdtemp(prefix="mentat-pull-shapes-"))
    ds = W.Dataset(W.generate(o.scale, ROOT / "benchmarks" / "data"))
    peer = M.Mentat(ds, str(work), Opts())
    peer.load()
    peer.apply_history()
    peer.settle(ds)
    # the copies below are of the database file alone: the transaction log applied to the tables first
    peer.con.execute("SELECT * FROM mentat_sync()").fetchall()
    peer.con.execute("CHECKPOINT")
    peer.con.close()
    runs = {}
    for path in ("1", "0"):
        db = work / f"path{path}.duckdb"
        shutil.copy(peer.db, db)
        env = dict(os.environ, MENTAT_ENTITY_PATH=path)
        p = subprocess.run([sys.executable, "-m", "benchmarks.py.pull_shapes", "--child", str(db), "--calls",
                            str(o.calls)], cwd=ROOT, env=env, capture_output=True, text=True)
        if p.returncode:
            raise SystemExit(f"pull_shapes: the child with MENTAT_ENTITY_PATH={path} failed:\n{p.stderr}")
        runs[path] = json.loads(p.stdout)
    on, off = runs["1"], runs["0"]
    for name, _, _ in PATTERNS:
        for i, (a, b) in enumerate(zip(on["answers"][name], off["answers"][name])):
            if a != b:
                raise SystemExit(f"pull_shapes: WRONG ANSWER: {name}, key {i} of the sample: entity path {a} "
                                 f"against the general path {b}")
    print(f"pull_shapes at {o.scale}: {on['keys']['issues']} issues, {on['keys']['users']} users; "
          f"{o.calls} calls per pattern and path; answers equal on {len(PATTERNS) * 200} keys")
    print("| pattern | entity path p50 / p95 ms | general path p50 / p95 ms | p50 over `SELECT 1` (path on / off) |")
    print("|---|---:|---:|---:|")
    fl = (on["timings"]["floor"]["p50"], off["timings"]["floor"]["p50"])
    print(f"| `SELECT 1` | {fl[0]:.3f} | {fl[1]:.3f} | 1 / 1 |")
    for name, pattern, _ in PATTERNS:
        a, b = on["timings"][name], off["timings"][name]
        print(f"| {name} `{pattern}` | {a['p50']:.3f} / {a['p95']:.3f} | {b['p50']:.3f} / {b['p95']:.3f} | "
              f"{a['p50'] / fl[0]:.2f}x / {b['p50'] / fl[1]:.2f}x |")
    if o.out:
        pathlib.Path(o.out).write_text(json.dumps({"scale": o.scale, "calls": o.calls, "patterns": PATTERNS,
                                                   "entity_path": on["timings"], "general_path": off["timings"],
                                                   "keys": on["keys"]}, indent=1))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
