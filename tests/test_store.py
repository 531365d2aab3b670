"""Stores on disk: entids surviving reopen, several stores per file and in ATTACHed databases, one transaction of
1,000,000 datoms, and a process killed with kill -9 in the middle of a large transaction."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import duckdb
import pytest

from conftest import EXT, connect, rows, transact
from mentat_helpers import A, SCHEMA, T0, U0, cur, install

ITEMS = ("[{:db/ident :item/n :db/valueType :db.type/long :db/cardinality :db.cardinality/one} "
         "{:db/ident :item/s :db/valueType :db.type/string :db/cardinality :db.cardinality/one} "
         "{:db/ident :item/k :db/valueType :db.type/keyword :db/cardinality :db.cardinality/one} "
         "{:db/ident :item/d :db/valueType :db.type/double :db/cardinality :db.cardinality/one}]")


def max_e(con, store="mentat"):
    """The largest e in any current-state table of a store, below the tx partition."""
    tables = [t for (t,) in rows(con, "SELECT table_name FROM duckdb_tables() WHERE schema_name = ? "
                                      "AND table_name LIKE 'cur_%'", [store])]
    q = " UNION ALL ".join(f"SELECT max(e) AS e FROM {store}.{t} WHERE e < {T0}" for t in tables)
    return rows(con, f"SELECT max(e) FROM ({q})")[0][0]


SESSION = textwrap.dedent("""
    import json, sys, duckdb
    con = duckdb.connect(sys.argv[1], config={"allow_unsigned_extensions": "true"})
    con.execute(f"LOAD '{sys.argv[2]}'")
    out = []
    for line in sys.stdin.read().split("\\n----\\n"):
        try:
            out.append(con.execute(line).fetchall())
        except duckdb.Error as e:
            out.append(str(e))
    print(json.dumps(out, default=str))
""")


def session(path, *sql):
    """Runs statements in a fresh Python process that opens `path` and loads mentat (a real reopen: this
    process's own DuckDB instance of a file stays alive while mentat holds connections to it)."""
    p = subprocess.run([sys.executable, "-c", SESSION, str(path), str(EXT)], input="\n----\n".join(sql),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def tx(edn):
    return "SELECT tx, map_keys(tempids), map_values(tempids) FROM mentat_transact('" + edn.replace("'", "''") + "')"


def test_entids_survive_reopen(tmp_path):
    path = tmp_path / "reopen.duckdb"
    out = session(path, tx(SCHEMA), tx('[{:db/id "a" :user/name "A"} {:db/id "b" :user/name "B"}]'))
    assert out[1] == [[T0 + 2, ["a", "b"], [U0, U0 + 1]]]
    out = session(path, "SELECT count(*) FROM mentat_schema() WHERE entid >= 100",
                  tx('[{:db/id "c" :user/name "C"} {:db/id "d" :user/email "d@x"}]'),
                  tx("[{:db/ident :new/attr :db/valueType :db.type/long :db/cardinality :db.cardinality/one}]"),
                  "SELECT entid FROM mentat_schema() WHERE ident = ':new/attr'",
                  tx('[[:db/add "datomic.tx" :db/txInstant #inst "2040-01-01T00:00:00.000-00:00"]]'))
    # the schema cache is read back at open; entids and txs continue
    assert out[0] == [[16]]
    assert out[1] == [[T0 + 3, ["c", "d"], [U0 + 2, U0 + 3]]]
    assert out[3] == [[118]]
    out = session(path, tx('[{:db/id "e" :new/attr 1 :user/email "d@x"}]'), tx('[[:db/add "f" :new/attr 2]]'),
                  tx('[[:db/add "datomic.tx" :db/txInstant #inst "2039-01-01T00:00:00.000-00:00"]]'),
                  "SELECT * FROM mentat_sync()", "SELECT e, v FROM mentat.cur_118 ORDER BY e")
    assert out[0] == [[T0 + 6, ["e"], [U0 + 3]]]
    assert out[1] == [[T0 + 7, ["f"], [U0 + 4]]]
    assert "backwards" in out[2]
    assert out[4] == [[U0 + 3, 1], [U0 + 4, 2]]
    # and in this process
    con = connect(path)
    assert transact(con, '[[:db/add "g" :new/attr 3]]')["tempids"] == {"g": U0 + 5}
    con.close()


def test_several_stores_and_attached_databases(con, tmp_path):
    install(con)
    r = install(con, store="other")
    assert r["tx"] == T0 + 1
    r = transact(con, '[[:db/add "x" :user/name "in other"]]', store="other")
    assert r["tempids"] == {"x": U0} and r["tx"] == T0 + 2
    assert transact(con, '[[:db/add "x" :user/name "in mentat"]]')["tempids"] == {"x": U0}
    assert cur(con, ":user/name", store="other") == [(U0, "in other")]
    assert cur(con, ":user/name") == [(U0, "in mentat")]
    con.execute(f"ATTACH '{tmp_path / 'db2.duckdb'}' AS db2")
    install(con, store="db2.mentat")
    transact(con, '[[:db/add "y" :db/doc "s2"]]', store="db2.s2")
    r = transact(con, '[{:db/id "z" :user/email "z@x"}]', store="db2.mentat")
    assert r["tempids"] == {"z": U0} and r["tx"] == T0 + 2
    assert transact(con, '[{:db/id "z2" :user/email "z@x"}]', store="db2.mentat")["tempids"] == {"z2": U0}
    assert rows(con, "SELECT e, v FROM db2.mentat.cur_100") == [(U0, "z@x")]
    assert rows(con, "SELECT e, v FROM db2.s2.cur_8") == [(U0, "s2")]
    # 12 bootstrap attributes (:db/ident .. :db/txInstant, :db/tupleType, :db/tupleTypes, :db/tupleAttrs) + 16 installed
    assert rows(con, "SELECT count(*) FROM mentat_schema(store := 'db2.mentat')") == [(28,)]
    assert rows(con, "SELECT count(*) FROM mentat_schema(store := 'db2.s2')") == [(12,)]
    assert rows(con, "SELECT count(*) FROM mentat_schema(store := 'other')") == [(28,)]
    # the default store of the attached database is not the one of the main database
    assert rows(con, "SELECT count(*) FROM mentat.cur_100") == [(0,)]
    # a store never written is the empty database: its bootstrap attributes, and nothing is created
    assert rows(con, "SELECT count(*) FROM mentat_schema(store := 'nope')") == [(12,)]
    assert rows(con, "SELECT count(*) FROM duckdb_schemas() WHERE schema_name = 'nope'") == [(0,)]
    with pytest.raises(duckdb.Error, match="store"):
        transact(con, "[]", store="a.b.c")
    # detach, let another DuckDB instance write to the file, attach again: entids continue, no collision
    con.execute("DETACH db2")
    out = session(tmp_path / "db2.duckdb", tx('[[:db/add "w" :user/name "W"]]'))
    assert out == [[[T0 + 4, ["w"], [U0 + 1]]]]
    con.execute(f"ATTACH '{tmp_path / 'db2.duckdb'}' AS db2")
    r = transact(con, '[[:db/add "v" :user/name "V"]]', store="db2.mentat")
    assert r["tempids"] == {"v": U0 + 2} and r["tx"] == T0 + 5
    assert rows(con, "SELECT e, v FROM db2.mentat.cur_101 ORDER BY e") == [(U0 + 1, "W"), (U0 + 2, "V")]


def test_one_million_datoms_in_one_transaction(con):
    transact(con, ITEMS)
    n = 250_000
    edn = "[" + " ".join(f'{{:item/n {i} :item/s "s{i}" :item/k :k/k{i % 7} :item/d {i}.5}}'
                         for i in range(n)) + "]"
    t = time.perf_counter()
    r = transact(con, edn)
    elapsed = time.perf_counter() - t
    print(f"\n1,000,000 datoms in one mentat_transact: {elapsed:.1f} s")
    assert r["datoms"] == 1_000_001 and r["tempids"] == {}
    for aid in (100, 101, 102, 103):
        assert rows(con, f"SELECT count(*), count(DISTINCT e), min(e), max(e) FROM mentat.cur_{aid}") == [
            (n, n, U0, U0 + n - 1)]
        # nothing retracted: history holds no rows until a datom is retracted
        assert rows(con, f"SELECT count(*) FROM mentat.hist_{aid}") == [(0,)]
    assert rows(con, "SELECT sum(v), count(DISTINCT v) FROM mentat.cur_100") == [(n * (n - 1) // 2, n)]
    assert rows(con, "SELECT count(*) FROM mentat.cur_102 WHERE v = ':k/k3'") == [(len(range(3, n, 7)),)]
    # each entity got the n, s, k and d of one map
    assert rows(con, "SELECT count(*) FROM mentat.cur_100 a JOIN mentat.cur_101 b USING (e) "
                     "JOIN mentat.cur_103 d USING (e) WHERE b.v = 's' || a.v AND d.v = a.v + 0.5") == [(n,)]
    assert transact(con, '[[:db/add "next" :item/n -1]]')["tempids"] == {"next": U0 + n}


KILLED = textwrap.dedent("""
    import sys, duckdb
    con = duckdb.connect(sys.argv[1], config={"allow_unsigned_extensions": "true"})
    con.execute(f"LOAD '{sys.argv[2]}'")
    con.execute("SELECT * FROM mentat_transact(?)", [sys.argv[4]]).fetchall()
    con.execute("SELECT * FROM mentat_transact('[{:db/id \\"a\\" :item/n -1 :item/s \\"before\\"}]')").fetchall()
    n = int(sys.argv[3])
    edn = "[" + " ".join(f'{{:item/n {i} :item/s "s{i}"}}' for i in range(n)) + "]"
    print("start", flush=True)
    con.execute("SELECT * FROM mentat_transact(?)", [edn]).fetchall()
    print("done", flush=True)
""")


@pytest.mark.parametrize("delay", [0.3, 1.2, 1.7])
def test_kill_9_in_the_middle_of_a_large_transaction(db_path, delay):
    n = 200_000
    p = subprocess.Popen([sys.executable, "-c", KILLED, str(db_path), str(EXT), str(n), ITEMS],
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "start"
    time.sleep(delay)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    print(f"\nkilled after {delay} s; the child had {'finished' if p.stdout.read() else 'not finished'}")
    con = connect(db_path)
    count = rows(con, "SELECT count(*) FROM mentat.cur_100")[0][0]
    assert count in (1, n + 1), count
    assert rows(con, "SELECT count(*) FROM mentat.cur_101")[0][0] == count
    top_e, top_tx = max_e(con), rows(con, "SELECT max(e) FROM mentat.cur_9")[0][0]
    assert top_e == (U0 if count == 1 else U0 + n)
    r = transact(con, '[{:db/id "x" :item/n -2} {:db/id "y" :item/n -3}]')
    assert min(r["tempids"].values()) > top_e and r["tx"] == top_tx + 1
    assert rows(con, "SELECT count(*) FROM mentat.cur_100")[0][0] == count + 2
    con.close()


def test_closing_keeps_the_file_open_until_the_process_exits(tmp_path):
    """What the README documents: mentat's connections keep the database instance alive, so closing the
    caller's connection does not close the file. Reopening it in the same process gets the same instance (the
    store, its cache and mentat's functions are still there); another process cannot open it until this one
    exits, and then sees every committed transaction."""
    path = tmp_path / "closed.duckdb"
    script = textwrap.dedent("""
        import subprocess, sys, duckdb
        path, ext = sys.argv[1], sys.argv[2]
        con = duckdb.connect(path, config={"allow_unsigned_extensions": "true"})
        con.execute(f"LOAD '{ext}'")
        con.execute('''SELECT * FROM mentat_transact('[[:db/add "x" :db/doc "one"]]')''').fetchall()
        con.close()
        # same process: no LOAD, yet the functions and the store are there
        again = duckdb.connect(path, config={"allow_unsigned_extensions": "true"})
        n = again.execute("SELECT count(*) FROM mentat_q('[:find ?d :where [_ :db/doc ?d]]')").fetchall()[0][0]
        again.execute('''SELECT * FROM mentat_transact('[[:db/add "y" :db/doc "two"]]')''').fetchall()
        again.close()
        # another process while this one lives: the file is still locked
        probe = subprocess.run([sys.executable, "-c",
                                f"import duckdb; duckdb.connect({path!r}, read_only=True)"],
                               capture_output=True, text=True)
        print(n, probe.returncode != 0, "lock" in probe.stderr.lower())
    """)
    p = subprocess.run([sys.executable, "-c", script, str(path), str(EXT)], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["1", "True", "True"]
    # after that process exited, another one opens the file and sees both transactions
    out = session(path, "SELECT count(*) FROM mentat_q('[:find ?d :where [_ :db/doc ?d]]')")
    assert out == [[[2]]]


def test_a_store_created_at_storage_version_1_5_opens_in_the_1_5_cli(tmp_path):
    """README "Supported DuckDB versions": a file Python duckdb 2.0 creates with storage_compatibility_version
    v1.5.0 keeps that version, so the DuckDB 1.5 CLI opens the store Python wrote (a default 2.0 file it cannot).
    Each side runs in a process of its own, which releases the file when it ends."""
    from conftest import cli
    path = tmp_path / "shared.duckdb"
    write = textwrap.dedent("""
        import sys, duckdb
        con = duckdb.connect(sys.argv[1], config={"allow_unsigned_extensions": "true",
                                                  "storage_compatibility_version": "v1.5.0"})
        con.execute(f"LOAD '{sys.argv[2]}'")
        con.execute("SELECT * FROM mentat_transact('[{:db/ident :s/name :db/valueType :db.type/string "
                    ":db/cardinality :db.cardinality/one}]')").fetchall()
        con.execute("SELECT * FROM mentat_transact('[{:s/name \\"ann\\"} {:s/name \\"bob\\"}]')").fetchall()
    """)
    p = subprocess.run([sys.executable, "-c", write, str(path), str(EXT)], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    rc, out, err = cli("SELECT n FROM mentat_q('[:find ?n :where [_ :s/name ?n]]') ORDER BY n;", db=path)
    assert rc == 0, err
    assert out.splitlines() == ["n", "ann", "bob"]
    # and a 2.0 process opens it again after the CLI
    con = connect(path)
    assert sorted(rows(con, "SELECT n FROM mentat_q('[:find ?n :where [_ :s/name ?n]]')")) == [("ann",), ("bob",)]
    con.close()
