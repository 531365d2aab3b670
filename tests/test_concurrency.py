"""Several callers at once: independent readers run in parallel while a writer transacts, one statement may
call mentat functions more than once, and nothing deadlocks."""
import os
import pathlib
import threading

from conftest import connect, transact

SCHEMA = """[{:db/ident :acct/id :db/valueType :db.type/long :db/cardinality :db.cardinality/one
              :db/unique :db.unique/identity}
             {:db/ident :acct/balance :db/valueType :db.type/long :db/cardinality :db.cardinality/one}]"""


def test_readers_and_a_writer(db_path):
    con = connect(db_path)
    transact(con, SCHEMA)
    transact(con, "[" + " ".join(f"{{:acct/id {i} :acct/balance 100}}" for i in range(50)) + "]")
    errors = []
    totals = []

    def reader():
        cur = con.cursor()
        try:
            for _ in range(40):
                # every transfer keeps the total at 5000, so any consistent snapshot sums to 5000
                total = cur.execute("SELECT sum(b) FROM mentat_q('[:find ?a ?b :where [?a :acct/balance ?b]]')"
                                    ).fetchall()[0][0]
                totals.append(total)
        except Exception as e:  # noqa: BLE001 - collected and asserted below
            errors.append(e)

    def writer():
        cur = con.cursor()
        try:
            for i in range(30):
                a, b = i % 50, (i * 7 + 1) % 50
                if a == b:
                    continue
                ba = cur.execute("SELECT * FROM mentat_q('[:find ?b . :in $ ?id :where [?e :acct/id ?id] "
                                 "[?e :acct/balance ?b]]', inputs := ?)", [f"[{a}]"]).fetchall()[0][0]
                bb = cur.execute("SELECT * FROM mentat_q('[:find ?b . :in $ ?id :where [?e :acct/id ?id] "
                                 "[?e :acct/balance ?b]]', inputs := ?)", [f"[{b}]"]).fetchall()[0][0]
                transact(cur, f"[[:db/add [:acct/id {a}] :acct/balance {ba - 1}] "
                              f"[:db/add [:acct/id {b}] :acct/balance {bb + 1}]]")
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=reader) for _ in range(8)] + [threading.Thread(target=writer)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a caller is stuck"
    assert errors == []
    assert len(totals) == 8 * 40 and set(totals) == {5000}


def test_one_statement_calls_mentat_twice(con):
    transact(con, SCHEMA)
    transact(con, "[" + " ".join(f"{{:acct/id {i} :acct/balance {i * 10}}}" for i in range(20)) + "]")
    q = "[:find ?id ?b :where [?e :acct/id ?id] [?e :acct/balance ?b]]"
    rows = con.execute("SELECT x.id, x.b + y.b FROM mentat_q(?) x JOIN mentat_q(?) y USING (id) ORDER BY 1",
                       [q, q]).fetchall()
    assert rows == [(i, 20 * i) for i in range(20)]
    # more simultaneous calls in one statement than a handful: a self-join chain of 6
    joined = " ".join(f"JOIN mentat_q('{q}') t{k} USING (id)" for k in range(1, 6))
    n = con.execute(f"SELECT count(*) FROM mentat_q('{q}') t0 {joined}").fetchall()[0][0]
    assert n == 20


def test_the_heavy_lane_answers_as_without_it(tmp_path):
    """storage::lane with every statement heavy (`MENTAT_HEAVY_MS=0`, one at a time): joins of several mentat_q calls
    in one statement do not wait for themselves (each is one client's), concurrent callers queue and all answer, and
    the answers equal those of a process without the lane (`MENTAT_HEAVY_LANE=0`), the statements having run on the
    lane's own thread at its lower priority (duckdb_ext/src/heavy.rs). Each setting needs its own process (mentat
    reads them when it loads)."""
    import json
    import subprocess
    import sys
    script = r'''
import json, os, sys, threading, time
sys.path.insert(0, %r)
from conftest import connect, transact
con = connect(%r)
transact(con, %r)
transact(con, "[" + " ".join(f"{{:acct/id {i} :acct/balance {i * 10}}}" for i in range(200)) + "]")
q = "[:find ?id ?b :where [?e :acct/id ?id] [?e :acct/balance ?b]]"
joined = " ".join(f"JOIN mentat_q('{q}') t{k} USING (id)" for k in range(1, 4))
sql = f"SELECT t0.id, t0.b + t3.b FROM mentat_q('{q}') t0 {joined} ORDER BY 1"
# LIMIT leaves each call's answer unfinished, so its slot stays taken until the statement ends: the second call
# of the same statement must be admitted while the first holds it
partial = f"SELECT count(*) FROM (FROM mentat_q('{q}') LIMIT 1) a CROSS JOIN (FROM mentat_q('{q}') LIMIT 1) b"
out = {"join": [], "longest_ms": 0.0, "threads": [], "partial": []}
for _ in range(3):  # the first run makes the statements known (their cost remembered), the next ones go through it
    out["join"] = [list(r) for r in con.execute(sql).fetchall()]
    t = time.perf_counter()
    out["partial"].append(con.execute(partial).fetchall()[0][0])
    out["longest_ms"] = max(out["longest_ms"], (time.perf_counter() - t) * 1000)
def reader(k):
    cur = con.cursor()
    for _ in range(10):
        out["threads"].append(cur.execute(f"SELECT sum(b) FROM mentat_q('{q}') WHERE id %% 4 = {k}").fetchall()[0][0])
ts = [threading.Thread(target=reader, args=(k,)) for k in range(4)]
[t.start() for t in ts]
[t.join(timeout=120) for t in ts]
out["threads"].sort()
# the lane's own threads (duckdb_ext/src/heavy.rs): their names, nice values and how often they were woken
import glob
out["heavy"] = []
for task in glob.glob("/proc/self/task/*"):
    if open(task + "/comm").read().strip().startswith("mentat-heavy"):
        nice = int(open(task + "/stat").read().rsplit(")", 1)[1].split()[16])
        woken = [int(l.split()[1]) for l in open(task + "/status") if l.startswith("voluntary_ctxt_switches")][0]
        out["heavy"].append([open(task + "/comm").read().strip(), nice, woken])
out["own_nice"] = os.getpriority(os.PRIO_PROCESS, 0)
print(json.dumps(out))
'''
    here = str(pathlib.Path(__file__).parent)
    runs = {}
    for name, env in (("lane", {"MENTAT_HEAVY_MS": "0", "MENTAT_HEAVY_LANE": "1"}), ("off", {"MENTAT_HEAVY_LANE": "0"})):
        code = script % (here, str(tmp_path / f"{name}.duckdb"), SCHEMA)
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                           env={**os.environ, **env})
        assert p.returncode == 0, p.stderr[-2000:]
        runs[name] = json.loads(p.stdout.strip().splitlines()[-1])
    assert runs["lane"]["join"] == [[i, 20 * i] for i in range(200)]
    assert runs["lane"]["join"] == runs["off"]["join"]
    assert len(runs["lane"]["threads"]) == 40 and runs["lane"]["threads"] == runs["off"]["threads"]
    assert runs["lane"]["partial"] == [1, 1, 1]
    # a statement whose first heavy call still holds its slot admits its second at once: it never waits out the
    # lane's 2 s limit
    assert runs["lane"]["longest_ms"] < 1500, runs["lane"]
    # with the lane on, the heavy statements ran on its one thread, at nice 19 (MENTAT_HEAVY_NICE's default; the
    # process's own when that is higher), woken for their steps (a thread that only started sleeps once; the two
    # timed rounds alone hand it 12 heavy calls of at least two steps each, one after the other); without the lane
    # there is no such thread
    [(name, nice, woken)] = runs["lane"]["heavy"]
    assert name == "mentat-heavy-0" and nice == max(19, runs["lane"]["own_nice"]), runs["lane"]["heavy"]
    assert woken >= 10, runs["lane"]["heavy"]
    assert runs["off"]["heavy"] == []
