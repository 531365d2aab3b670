"""Group commit and mentat_transact_many: a group of transactions gives exactly the result of running them one
after another (Datomic's serial transactions), a failing member fails alone, and many writers on threads end
with the store that replaying their acknowledged transactions one by one in tx order gives. The one-by-one runs
use an instance loaded with MENTAT_GROUP_COMMIT=0 (the transactor without the queue)."""
import os
import random
import re
import subprocess
import sys
import textwrap
import threading

import pytest

from conftest import EXT, connect, connect_with, q, transact

SCHEMA = ("[{:db/ident :u/email :db/valueType :db.type/string :db/cardinality :db.cardinality/one "
          ":db/unique :db.unique/identity}"
          " {:db/ident :u/code :db/valueType :db.type/string :db/cardinality :db.cardinality/one "
          ":db/unique :db.unique/value}"
          " {:db/ident :u/n :db/valueType :db.type/long :db/cardinality :db.cardinality/one}"
          " {:db/ident :u/tag :db/valueType :db.type/string :db/cardinality :db.cardinality/many}"
          " {:db/ident :u/friend :db/valueType :db.type/ref :db/cardinality :db.cardinality/many}]")


def serial_instance(path=":memory:"):
    """An instance whose mentat_transact runs each call on its own (no group commit)."""
    return connect_with(path, MENTAT_GROUP_COMMIT="0")


def many(con, txs, store=None):
    """mentat_transact_many's rows as dicts, in order."""
    sql = "SELECT tx, tx_instant, datoms, tempids, error FROM mentat_transact_many(?" + (
        ", store := ?)" if store else ")")
    out = con.execute(sql, [txs] + ([store] if store else [])).fetchall()
    return [{"tx": t, "tx_instant": i, "datoms": d, "tempids": dict(m) if m else None, "error": e}
            for t, i, d, m, e in out]


def one_by_one(con, txs):
    """Each transaction through mentat_transact on its own: (tx, None) or (None, error message)."""
    out = []
    for t in txs:
        try:
            out.append((transact(con, t)["tx"], None))
        except Exception as e:  # noqa: BLE001 - the error text is what is compared
            out.append((None, str(e)))
    return out


def log(con):
    """Every datom ever asserted or retracted, with :db/txInstant values left out (they are clock readings)."""
    got = con.execute("SELECT e, a, CASE WHEN a = ':db/txInstant' THEN NULL ELSE v END, tx, added "
                      "FROM mentat_datoms('EAVT', history := true)").fetchall()
    return sorted(got, key=repr)


def n_of(con, email, **named):
    return q(con, "[:find ?n . :in $ ?m :where [?e :u/email ?m] [?e :u/n ?n]]", f'["{email}"]', **named)


def test_each_member_is_its_own_transaction(con):
    transact(con, SCHEMA)
    rows = many(con, ['[{:db/id "a" :u/email "a@x" :u/n 1}]',
                      '[{:db/id "a" :u/email "b@x" :u/n 2}]',
                      '[{:db/id "c" :u/email "a@x" :u/n 3} [:db/add "d" :u/friend "c"] [:db/add "d" :u/n 9]]'])
    assert [r["error"] for r in rows] == [None, None, None]
    txs = [r["tx"] for r in rows]
    assert txs == [txs[0], txs[0] + 1, txs[0] + 2], "one tx entid each, in list order"
    instants = [r["tx_instant"] for r in rows]
    assert instants == sorted(instants) and len(set(instants)) == 3, "strictly increasing :db/txInstant"
    a, b = rows[0]["tempids"]["a"], rows[1]["tempids"]["a"]
    assert a != b, "tempids resolve per transaction"
    assert rows[2]["tempids"]["c"] == a, "an upsert sees the entity an earlier member made"
    assert rows[2]["datoms"] == 2 + 2 + 1  # retract n 1 and assert n 3 (the email is already there); d; txInstant
    assert n_of(con, "a@x") == [(3,)], "cardinality-one replacement across members"
    # as-of each member's tx shows exactly the members up to it
    assert n_of(con, "a@x", as_of=txs[0]) == [(1,)] and n_of(con, "b@x", as_of=txs[0]) == []
    assert n_of(con, "a@x", as_of=txs[1]) == [(1,)] and n_of(con, "b@x", as_of=txs[1]) == [(2,)]
    assert n_of(con, "a@x", as_of=txs[2]) == [(3,)]


def test_a_failing_member_fails_alone(db_path, tmp_path):
    txs = [
        '[{:u/email "a@x" :u/n 1}]',
        '[[:db/cas [:u/email "a@x"] :u/n 5 6]]',  # the current value is 1
        '[[:db/cas [:u/email "a@x"] :u/n 1 2]]',  # sees the first member's 1
        '[{:u/email',  # malformed EDN
        '[{:u/nope 1}]',  # unknown attribute
        '[{:u/email "b@x" :u/code "K"}]',
        '[{:u/email "c@x" :u/code "K"}]',  # unique conflict with the member before
        None,
        '[[:db/add [:u/email "zz@x"] :u/n 1]]',  # a lookup ref that matches nothing
        '[{:u/email "c@x" :u/code "L"} [:db/retractEntity [:u/email "b@x"]]]',
    ]
    con = connect(db_path)
    transact(con, SCHEMA)
    rows = many(con, txs)
    errors = [r["error"] for r in rows]
    for i, want in [(1, "compare-and-swap failed"), (3, "malformed EDN"), (4, "unknown attribute :u/nope"),
                    (6, "unique conflict"), (7, "NULL"), (8, "lookup ref")]:
        assert errors[i] is not None and want in errors[i], (i, errors[i])
        assert rows[i]["tx"] is None and rows[i]["tempids"] is None
    ok = [i for i, e in enumerate(errors) if e is None]
    assert ok == [0, 2, 5, 9]
    assert [rows[i]["tx"] for i in ok] == list(range(rows[0]["tx"], rows[0]["tx"] + 4)), "no tx entid skipped"
    assert n_of(con, "a@x") == [(2,)]
    # the same list one by one on an instance without group commit: the same errors, the same datoms
    ref = serial_instance(tmp_path / "serial.duckdb")
    transact(ref, SCHEMA)
    serial = one_by_one(ref, [t for t in txs if t is not None])
    assert [e is None for _, e in serial] == [e is None for i, e in enumerate(errors) if txs[i] is not None]
    assert [t for t, _ in serial if t] == [rows[i]["tx"] for i in ok]
    assert log(con) == log(ref)


def test_schema_installed_by_a_member_is_used_by_the_next(con):
    transact(con, SCHEMA)
    rows = many(con, ['[{:db/ident :u/nick :db/valueType :db.type/string :db/cardinality :db.cardinality/one}]',
                      '[{:u/email "a@x" :u/nick "ay"}]'])
    assert [r["error"] for r in rows] == [None, None]
    assert q(con, "[:find ?v . :where [?e :u/nick ?v]]") == [("ay",)]


def test_an_empty_list_and_a_thousand_transactions(con):
    transact(con, SCHEMA)
    assert many(con, []) == []
    rows = many(con, [f'[{{:u/email "u{i}@x" :u/n {i}}}]' for i in range(1000)])
    assert all(r["error"] is None for r in rows)
    assert [r["tx"] for r in rows] == list(range(rows[0]["tx"], rows[0]["tx"] + 1000))
    assert q(con, "[:find (count ?e) (sum ?n) :where [?e :u/n ?n]]") == [(1000, sum(range(1000)))]


def random_tx(rng, i):
    """One random transaction over a few users: upserts with tempids, lookup refs, cas (right or wrong),
    retractions, cardinality-one replacement, retractEntity, a schema installation, and some that fail."""
    email = lambda: f'"u{rng.randrange(6)}@x"'  # noqa: E731
    kind = rng.randrange(10)
    if kind == 0:
        return f'[{{:db/id "t" :u/email {email()} :u/n {rng.randrange(5)} :u/tag "g{rng.randrange(3)}"}}]'
    if kind == 1:
        return f'[[:db/add [:u/email {email()}] :u/n {rng.randrange(5)}]]'
    if kind == 2:
        return f'[[:db/cas [:u/email {email()}] :u/n {rng.randrange(5)} {rng.randrange(5)}]]'
    if kind == 3:
        return f'[[:db/retract [:u/email {email()}] :u/tag "g{rng.randrange(3)}"]]'
    if kind == 4:
        return f'[[:db/retractEntity [:u/email {email()}]]]'
    if kind == 5:
        return f'[{{:u/email {email()} :u/code "c{rng.randrange(3)}"}}]'  # unique value: may conflict
    if kind == 6:
        return f'[{{:db/id "a" :u/email {email()}}} {{:db/id "b" :u/email {email()} :u/friend "a"}}]'
    if kind == 7:
        return (f'[{{:db/ident :u/x{i} :db/valueType :db.type/long :db/cardinality :db.cardinality/one}}]'
                if rng.random() < 0.5 else f'[{{:u/email {email()} :u/x{rng.randrange(i + 1)} 1}}]')
    if kind == 8:
        return '[{:u/email' if rng.random() < 0.5 else '[[:db/add 1 :u/unknown 1]]'
    return f'[{{:u/email {email()} :u/n {rng.randrange(5)}}} {{:u/email {email()} :u/n {rng.randrange(5)}}}]'


CHAINS = [
    # a datom asserted, retracted and asserted again by three members of one group
    '[{:db/id "a" :u/email "a@x" :u/tag "t"}]',
    '[[:db/retract [:u/email "a@x"] :u/tag "t"]]',
    '[[:db/add [:u/email "a@x"] :u/tag "t"]]',
    # cardinality-one replacement chained across members, then cas against the latest value
    '[[:db/add [:u/email "a@x"] :u/n 1]]',
    '[[:db/add [:u/email "a@x"] :u/n 2]]',
    '[[:db/cas [:u/email "a@x"] :u/n 1 5]]',  # fails: the value is 2 now
    '[[:db/cas [:u/email "a@x"] :u/n 2 3]]',
    # a unique value moved from one entity to another inside the group
    '[{:u/email "a@x" :u/code "k"}]',
    '[{:db/id "b" :u/email "b@x" :u/code "k"}]',  # fails: a@x holds it
    '[[:db/retract [:u/email "a@x"] :u/code "k"]]',
    '[{:db/id "b" :u/email "b@x" :u/code "k"}]',
    '[[:db/add [:u/code "k"] :u/n 7]]',  # the lookup ref finds b@x, made by a member before
    # upserts onto entities made earlier in the group, a tempid shared by two identities of one entity
    '[{:db/id "c" :u/email "c@x" :u/friend [:u/email "b@x"]}]',
    '[{:db/id "d" :u/email "c@x" :u/n 4} [:db/add "d" :u/friend [:u/email "a@x"]]]',
    '[[:db/retract [:u/email "c@x"] :u/friend [:u/email "b@x"]] [:db/add [:u/email "c@x"] :u/n 4]]',
    '[[:db/retractEntity [:u/email "a@x"]]]',  # the group writes what it holds before this one
    '[[:db/add [:u/email "c@x"] :u/tag "after"]]',
    '[[:db/add [:u/email "a@x"] :u/n 1]]',  # fails: a@x is gone
]


def test_chains_inside_one_group_equal_one_by_one(tmp_path):
    """Hand-picked sequences whose members depend on each other, in one group, against one by one."""
    grouped = connect(tmp_path / "g.duckdb")
    transact(grouped, SCHEMA)
    rows = many(grouped, CHAINS)
    ref = serial_instance(tmp_path / "s.duckdb")
    transact(ref, SCHEMA)
    serial = one_by_one(ref, CHAINS)
    assert [r["error"] is None for r in rows] == [e is None for _, e in serial]
    assert [i for i, r in enumerate(rows) if r["error"]] == [5, 8, 17], [r["error"] for r in rows]
    assert log(grouped) == log(ref)
    assert q(grouped, "[:find ?n . :where [?e :u/email \"b@x\"] [?e :u/n ?n]]") == [(7,)]
    assert q(grouped, "[:find ?t :where [?e :u/email \"c@x\"] [?e :u/tag ?t]]") == [("after",)]


WARM = {":u/email": "[:find ?e :in $ ?v :where [?e :u/email ?v]]",
        ":u/code": "[:find ?e :in $ ?v :where [?e :u/code ?v]]",
        ":u/n": "[:find ?v :in $ ?e :where [?e :u/n ?v]]",
        ":u/tag": "[:find ?v :in $ ?e :where [?e :u/tag ?v]]",
        ":u/friend": "[:find ?v :in $ ?e :where [?e :u/friend ?v]]"}


def warm_index(con):
    """Reads every attribute of SCHEMA into the store's entity index (entity-shaped queries on small attributes
    read them at once), so that the transactor answers its lookups of current values and unique holders from the
    index instead of the tables; asserts that it holds them."""
    for text in WARM.values():
        con.execute("FROM mentat_q(?, inputs := ?)", [text, '["x"]' if "?v :where" in text else "[1]"]).fetchall()
    held = dict(con.execute("SELECT ident, state FROM mentat_entity_index()").fetchall())
    assert all(held.get(a) == "indexed" for a in WARM), held


@pytest.mark.parametrize("indexed", ["none", "grouped", "serial"])
@pytest.mark.parametrize("seed", range(6))
def test_random_groups_equal_one_by_one(seed, indexed, tmp_path):
    """Random transactions in groups of 30 (failures inside them) give the tx entids, errors and datom log of the
    same transactions run one by one without group commit. `indexed` names the store whose transactor reads the
    current state from the entity index (the other reads the tables), so each transactor's index path is held to
    the other's table path."""
    rng = random.Random(seed)
    txs = [random_tx(rng, i) for i in range(120)]
    grouped = connect(tmp_path / "g.duckdb")
    transact(grouped, SCHEMA)
    ref = serial_instance(tmp_path / "s.duckdb")
    transact(ref, SCHEMA)
    if indexed == "grouped":
        warm_index(grouped)
    if indexed == "serial":
        warm_index(ref)
    rows = []
    for start in range(0, len(txs), 30):  # several groups, with failures inside them
        rows += many(grouped, txs[start:start + 30])
    serial = one_by_one(ref, txs)
    assert [(r["tx"], r["error"] is None) for r in rows] == [(t, e is None) for t, e in serial]
    assert log(grouped) == log(ref)


@pytest.mark.parametrize("indexed", [False, True], ids=["tables", "entity-index"])
def test_many_writers_equal_their_replay(indexed, tmp_path):
    """8 writer threads on their own connections, 40 transactions each through mentat_transact (the group commit
    queue); the acknowledged transactions replayed one by one in tx order into a fresh store give the same log."""
    con = connect(tmp_path / "w.duckdb")
    transact(con, SCHEMA)
    if indexed:
        warm_index(con)
    acked, lock = [], threading.Lock()

    def writer(w):
        c = con.cursor()
        rng = random.Random(w)
        for i in range(40):
            t = random_tx(rng, 1000 * w + i)
            try:
                tx = transact(c, t)["tx"]
            except Exception:  # noqa: BLE001 - failed transactions are not acknowledged
                continue
            with lock:
                acked.append((tx, t))

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    acked.sort()
    ref = serial_instance(tmp_path / "r.duckdb")
    transact(ref, SCHEMA)
    replayed = one_by_one(ref, [t for _, t in acked])
    assert [e for _, e in replayed] == [None] * len(acked)
    assert [t for t, _ in replayed] == [t for t, _ in acked], "the same tx entids in the same order"
    assert log(con) == log(ref)


def test_writers_past_the_connections_wait_in_one_group(tmp_path):
    """64 writer threads, twice the extension's 32 connections, each send one small transaction while a large one is
    being written: all of them queue, and the next leader writes them together (MENTAT_TRACE prints each group's
    size). When every caller held a connection while it waited, a group held at most 31 of them and the others
    waited for a connection before they could queue. Every transaction is acknowledged and read back."""
    script = textwrap.dedent("""
        import sys, threading, time, duckdb
        con = duckdb.connect(sys.argv[1], config={"allow_unsigned_extensions": "true"})
        con.execute(f"LOAD '{sys.argv[2]}'")
        con.execute("SELECT * FROM mentat_transact('[{:db/ident :g/n :db/valueType :db.type/long "
                    ":db/cardinality :db.cardinality/one}]')").fetchall()
        # large enough that 64 threads queue while it is written, on a loaded 2-core machine too (150,000 entities
        # left a window that a concurrent compile closed: the small ones then came in groups of at most 32)
        big = "[" + " ".join(f"{{:g/n {i}}}" for i in range(400000)) + "]"
        acked = []
        def send(edn):
            acked.append(con.cursor().execute("SELECT tx FROM mentat_transact(?)", [edn]).fetchall()[0][0])
        first = threading.Thread(target=send, args=(big,))
        first.start()
        time.sleep(0.05)
        small = [threading.Thread(target=send, args=(f"[{{:g/n -{i + 1}}}]",)) for i in range(64)]
        for t in small:
            t.start()
        for t in small + [first]:
            t.join()
        n = con.execute("FROM mentat_q('[:find (count ?e) . :where [?e :g/n _]]')").fetchall()[0][0]
        print(len(acked), len(set(acked)), n, flush=True)
    """)
    p = subprocess.run([sys.executable, "-c", script, str(tmp_path / "g.duckdb"), str(EXT)], capture_output=True,
                       timeout=300, env=dict(os.environ, MENTAT_TRACE="1"))
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split() == [b"65", b"65", b"400064"]
    groups = [int(m) for m in re.findall(rb"group of (\d+)", p.stderr)]
    assert max(groups) > 32, f"group sizes {groups}"


@pytest.mark.parametrize("preserve_order", [True, False], ids=["ordered", "unordered"])
def test_a_transaction_offered_to_two_tasks_runs_once(preserve_order, tmp_path):
    """mentat_transact offers its call to two DuckDB tasks (functions.rs `OneCall`), which DuckDB makes when
    `preserve_insertion_order` is off: whichever task runs it, each call is one transaction and one row, and a
    failing one writes nothing. Sequential calls, then 8 threads at once, 4 DuckDB threads."""
    con = connect(tmp_path / "t.duckdb")
    con.execute("SET threads = 4")
    con.execute(f"SET preserve_insertion_order = {str(preserve_order).lower()}")
    transact(con, SCHEMA)

    def one(c, n):
        rows = c.execute("SELECT tx FROM mentat_transact(?)",
                         [f'[{{:u/email "e{n}" :u/n {n}}}]']).fetchall()
        assert len(rows) == 1, f"call {n} gave {len(rows)} rows"
        return rows[0][0]

    txs = [one(con, n) for n in range(60)]
    assert txs == sorted(set(txs)), "one new tx per call, in call order"
    with pytest.raises(Exception, match="unique conflict"):  # :u/code is unique: a second holder of "c" fails
        con.execute("SELECT tx FROM mentat_transact(?)",
                    ['[{:u/email "e3" :u/code "c"} {:u/email "e4" :u/code "c"}]']).fetchall()
    acked, lock = [], threading.Lock()

    def writer(w):
        c = con.cursor()
        mine = [one(c, 1000 * (w + 1) + i) for i in range(20)]
        with lock:
            acked.extend(mine)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(set(acked)) == 160 and not set(acked) & set(txs)
    ns = sorted(r[0] for r in q(con, "[:find ?n :where [_ :u/n ?n]]"))
    assert ns == list(range(60)) + [1000 * (w + 1) + i for w in range(8) for i in range(20)]
    assert q(con, "[:find ?c :where [_ :u/code ?c]]") == [], "the failed transaction wrote nothing"
