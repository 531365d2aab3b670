"""A/B of entity reads: one process per build, on a copy of a suite store; novelty made by 3,000 state updates."""
import sys, time, json, random, shutil, threading, duckdb, pathlib, statistics
sys.path.insert(0, "/work/main")
from benchmarks.py.suite import workload as W
ext, src, secs = sys.argv[1], sys.argv[2], float(sys.argv[3])
dst = "/tmp/exp/ab_store.duckdb"
import os
for p in (dst + ".wal",):
    os.path.exists(p) and os.remove(p)
shutil.copy(src, dst)
for suf in (".mentat.txlog",):
    try: shutil.copy(src + suf, dst + suf)
    except FileNotFoundError: pass
con = duckdb.connect(dst, config={"allow_unsigned_extensions": "true"})
con.execute(f"LOAD '{ext}'")
emails = [r[0] for r in con.execute("FROM mentat_q('[:find ?e :where [?u :user/email ?e]]')").fetchall()]
issues = [r[0] for r in con.execute("FROM mentat_q('[:find ?i :where [?i :issue/title]]')").fetchall()]
def q(c, sc, r):
    if sc == "floor": return c.execute("SELECT 1").fetchall()
    if sc == "pull":
        cur = c.execute("SELECT * FROM mentat_pull('[*]', ?)", [r.choice(issues)]); names = [d[0] for d in cur.description]
        return [dict(zip(names, x)) for x in cur.fetchall()]
    return c.execute("FROM mentat_q(?, inputs := ?)", [W.Q1 if sc == "q1" else W.Q2, json.dumps([r.choice(emails)])]).fetchall()
r = random.Random(3)
for sc in ("q1", "q2", "pull"): q(con, sc, r)
while con.execute("SELECT count(*) FROM mentat_entity_index() WHERE state = 'reading'").fetchall()[0][0]:
    time.sleep(0.2)
states = [":state/open", ":state/closed", ":state/in-progress"]
txs = [f"[[:db/add {r.choice(issues)} :issue/state {r.choice(states)}]]" for _ in range(3000)]
con.execute("SELECT count(*) FROM mentat_transact_many(?)", [txs]).fetchall()
for sc in ("q1", "q2", "pull"):
    for _ in range(300): q(con, sc, r)
out = {}
for sc in ("floor", "q1", "q2", "pull"):
    lat = []
    for _ in range(2500):
        t = time.perf_counter(); q(con, sc, r); lat.append((time.perf_counter() - t) * 1000)
    out[sc] = round(statistics.median(lat), 4)
def mix(n, scen):
    counts = [0] * n; stop = time.perf_counter() + secs
    def run(i):
        c = con.cursor(); rr = random.Random(i); k = i
        while time.perf_counter() < stop:
            q(c, scen[k % len(scen)], rr); k += 1
        counts[i] = k - i
    ths = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    t = time.perf_counter(); [th.start() for th in ths]; [th.join() for th in ths]
    return sum(counts) / (time.perf_counter() - t)
for n in (1, 2, 4):
    f = mix(n, ["floor"]); m = mix(n, ["q1", "q2", "pull"])
    out[f"mix{n}"] = round(m); out[f"floor{n}"] = round(f); out[f"ratio{n}"] = round(m / f, 3)
print(json.dumps(out))
