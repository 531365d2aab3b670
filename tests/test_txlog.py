"""The transaction log (storage/src/txlog.rs, logfile.rs): a group whose attributes the entity index holds writes its
datoms as one record of the store's log file beside the database file, synced, and applied to the attribute tables
later. What a user must never see: a read that
misses an acknowledged transaction, a log applied twice or half, a store opened over a log it cannot apply.

The log's rows are counted in its file (beside the database file), which mentat does not see and so does not settle.
Instances are made with MENTAT_LOG_IDLE_MS large, so that the background indexer does not apply the log while a
test looks at it, unless the test is about the indexer."""
import pathlib
import random
import struct
import subprocess
import sys
import time
import zlib

import duckdb
import pytest

from conftest import EXT, connect_with, q, transact
from test_group_commit import SCHEMA, log, many, one_by_one, random_tx, serial_instance, warm_index

KEEP = {"MENTAT_LOG_IDLE_MS": "600000"}


def file_rows(db, applied=0):
    """Datoms in the records of the log file beside database file `db` past sequence number `applied`, read with
    the file's format as storage/src/logfile.rs writes it (header `MNTLOG01` and the log id; records `len, crc32,
    body`, the body starting with `seq: u64, rows: u32`), each record's checksum checked."""
    path = pathlib.Path(f"{db}.mentat.txlog")
    if not path.exists():
        return 0
    b = path.read_bytes()
    assert b[:8] == b"MNTLOG01", b[:16]
    at, n = 16, 0
    while at + 8 <= len(b):
        size, crc = struct.unpack_from("<II", b, at)
        body = b[at + 8:at + 8 + size]
        assert len(body) == size and zlib.crc32(body) == crc, "a torn or corrupt record"
        seq, rows = struct.unpack_from("<QI", body)
        n += rows if seq > applied else 0
        at += 8 + size
    return n


def log_rows(con):
    """Datoms in the default store's log not yet applied to its tables: the log file's records past the applied
    mark (the `meta` key `log_applied`), both read without mentat, which would apply the log first."""
    db = con.execute("SELECT path FROM duckdb_databases() WHERE database_name = current_database()").fetchone()[0]
    mark = con.execute("SELECT max(value::UBIGINT) FROM mentat.meta WHERE key = 'log_applied'").fetchone()[0]
    return file_rows(db, mark or 0)


def users(con, n):
    transact(con, SCHEMA)
    transact(con, "[" + " ".join(f'{{:u/email "u{i}@x" :u/n 0}}' for i in range(n)) + "]")
    warm_index(con)


def test_updates_go_to_the_log_and_every_read_sees_them(tmp_path):
    con = connect_with(tmp_path / "l.duckdb", **KEEP)
    users(con, 20)
    want = {i: 0 for i in range(20)}
    rng = random.Random(3)
    for k in range(50):
        i = rng.randrange(20)
        transact(con, f'[[:db/add [:u/email "u{i}@x"] :u/n {k + 1}]]')
        want[i] = k + 1
    # each single-datom update is three rows: the old value retracted, the new one asserted, its :db/txInstant
    assert log_rows(con) == 150
    # the entity path answers from the index, leaving the log where it is
    for i in range(20):
        assert q(con, "[:find ?n . :in $ ?m :where [?e :u/email ?m] [?e :u/n ?n]]", f'["u{i}@x"]') == [(want[i],)]
    assert log_rows(con) == 150
    # an aggregate runs as SQL over the tables: the log is applied first
    assert q(con, "[:find (sum ?n) . :where [?e :u/n ?n]]") == [(sum(want.values()),)]
    assert log_rows(con) == 0
    # history: 20 first values plus, per update, one retraction and one assertion
    hist = q(con, "[:find (count ?e) . :with ?v ?tx ?added :where [?e :u/n ?v ?tx ?added]]", history=True)
    assert hist == [(20 + 2 * 50,)]


def test_a_writers_small_transactions_go_to_the_log_without_any_query(tmp_path):
    # No query reads :u/n: the first small transaction on it is written to the tables and asks for the attribute
    # to be read into the entity index (in the background); once it is in, the next ones are logged.
    # the default log mode even in the suite's MENTAT_LOG=always rerun (which logs such groups from the start)
    con = connect_with(tmp_path / "w.duckdb", MENTAT_LOG="default", **KEEP)
    transact(con, SCHEMA)
    transact(con, "[" + " ".join(f'{{:u/email "u{i}@x" :u/n 0}}' for i in range(20)) + "]")
    transact(con, '[[:db/add [:u/email "u0@x"] :u/n 1]]')
    for _ in range(600):  # the background read starts 100 ms after the write; wait up to 60 s for it
        state = dict(con.execute("SELECT ident, state FROM mentat_entity_index()").fetchall())
        if state.get(":u/n") == "indexed" and state.get(":u/email") == "indexed":
            break
        time.sleep(0.1)
    assert state.get(":u/n") == "indexed", state
    assert log_rows(con) == 0
    for k in range(10):
        transact(con, f'[[:db/add [:u/email "u{k}@x"] :u/n {k + 100}]]')
    # each update: the old value retracted, the new one asserted, its :db/txInstant
    assert log_rows(con) == 30
    assert sorted(q(con, "[:find ?m ?n :where [?e :u/email ?m] [?e :u/n ?n] [(< ?n 200)] [(>= ?n 100)]]")) == sorted(
        (f"u{k}@x", k + 100) for k in range(10))


def test_a_small_transactions_lookup_refs_read_from_the_tables_ask_for_their_attribute(tmp_path):
    # Labels loaded by mentat_import (which leaves the store's unique-value cache and entity index empty); a
    # single-datom transaction naming a label by lookup ref reads its holder from the tables and asks for
    # :l/name to be read into the entity index (in the background), so that the next such lookups are probes.
    con = connect_with(tmp_path / "l.duckdb", MENTAT_LOG="default", **KEEP)
    transact(con, "[{:db/ident :l/name :db/valueType :db.type/string :db/cardinality :db.cardinality/one "
                  ":db/unique :db.unique/identity} {:db/ident :i/label :db/valueType :db.type/ref "
                  ":db/cardinality :db.cardinality/many} {:db/ident :i/id :db/valueType :db.type/long "
                  ":db/cardinality :db.cardinality/one :db/unique :db.unique/identity}]")
    con.execute("""SELECT * FROM mentat_import('SELECT ''l'' || i AS ":l/name" FROM range(50) t(i)')""").fetchall()
    transact(con, "[{:i/id 1}]")
    state = dict(con.execute("SELECT ident, state FROM mentat_entity_index()").fetchall())
    assert state.get(":l/name") != "indexed", state
    transact(con, '[[:db/add [:i/id 1] :i/label [:l/name "l7"]]]')
    for _ in range(600):  # the background read starts 100 ms after the write; wait up to 60 s for it
        state = dict(con.execute("SELECT ident, state FROM mentat_entity_index()").fetchall())
        if state.get(":l/name") == "indexed":
            break
        time.sleep(0.1)
    assert state.get(":l/name") == "indexed", state
    transact(con, '[[:db/add [:i/id 1] :i/label [:l/name "l9"]]]')
    assert sorted(q(con, "[:find ?n :where [?i :i/id 1] [?i :i/label ?l] [?l :l/name ?n]]")) == [("l7",), ("l9",)]


def test_a_large_transaction_goes_to_the_log_whatever_the_index_holds(tmp_path):
    # No query has read :u/email or :u/n, so the entity index holds neither. A transaction of more than
    # WANT_INDEX_DATOMS (1,000) datoms is logged all the same (pending.rs `finish`); a second one checks its unique
    # emails against the first's, which the log holds (the log is applied first); reads see both.
    con = connect_with(tmp_path / "b.duckdb", MENTAT_LOG="default", **KEEP)
    transact(con, SCHEMA)
    state = dict(con.execute("SELECT ident, state FROM mentat_entity_index()").fetchall())
    assert state.get(":u/email") != "indexed" and state.get(":u/n") != "indexed", state
    transact(con, "[" + " ".join(f'{{:u/email "u{i}@x" :u/n {i}}}' for i in range(600)) + "]")
    # 600 users of two datoms each and the :db/txInstant
    assert log_rows(con) == 1201
    # u300 .. u599 again (upserts: their :u/n replaced) and 300 new users
    transact(con, "[" + " ".join(f'{{:u/email "u{i}@x" :u/n {2 * i}}}' for i in range(300, 900)) + "]")
    want = {i: i for i in range(300)} | {i: 2 * i for i in range(300, 900)}
    assert sorted(q(con, "[:find ?m ?n :where [?e :u/email ?m] [?e :u/n ?n]]")) == sorted(
        (f"u{i}@x", n) for i, n in want.items())
    assert log_rows(con) == 0
    assert q(con, "[:find (sum ?n) . :where [?e :u/n ?n]]") == [(sum(want.values()),)]


@pytest.mark.parametrize("seed", range(4))
def test_random_groups_through_the_log_equal_one_by_one(seed, tmp_path):
    """Every group through the log (MENTAT_LOG=always: even attributes the index does not hold, so that the
    transactor's reads of the tables meet a log it must apply first), reads of each kind between the groups,
    against the same transactions one by one without group commit or log."""
    rng = random.Random(seed)
    txs = [random_tx(rng, i) for i in range(150)]
    logged = connect_with(tmp_path / "g.duckdb", MENTAT_LOG="always", **KEEP)
    transact(logged, SCHEMA)
    ref = serial_instance(tmp_path / "s.duckdb")
    transact(ref, SCHEMA)
    if seed % 2:
        warm_index(logged)
    rows, most = [], 0
    for start in range(0, len(txs), 10):
        rows += many(logged, txs[start:start + 10])
        most = max(most, log_rows(logged))
        if start % 30 == 0:  # a read between groups applies the log; the others leave it to grow
            q(logged, "[:find (count ?e) . :where [?e :u/email]]")
    serial = one_by_one(ref, txs)
    assert most > 0, "no group went through the log"
    assert [(r["tx"], r["error"] is None) for r in rows] == [(t, e is None) for t, e in serial]
    assert log(logged) == log(ref)
    # time travel at every tenth tx reads the same
    for tx, _ in serial[::10]:
        if tx is not None:
            text = "[:find ?m ?n :where [?e :u/email ?m] [?e :u/n ?n]]"
            assert sorted(q(logged, text, as_of=tx)) == sorted(q(ref, text, as_of=tx))


WRITER = r"""
import os, sys, duckdb
con = duckdb.connect(sys.argv[1], config={"allow_unsigned_extensions": "true"})
con.execute(f"LOAD '{sys.argv[2]}'")
con.execute("SELECT * FROM mentat_transact(?)", [sys.argv[3]]).fetchall()
con.execute("SELECT * FROM mentat_transact(?)", ['[' + ' '.join(f'{{:k/id {i} :k/n 0}}' for i in range(10)) + ']']).fetchall()
con.execute("FROM mentat_q('[:find ?n . :in $ ?i :where [?e :k/id ?i] [?e :k/n ?n]]', inputs := '[1]')").fetchall()
for i in range(10):
    con.execute("SELECT * FROM mentat_transact(?)", [f'[[:db/add [:k/id {i}] :k/n {i * 10}]]']).fetchall()
os._exit(0)  # gone without a word, as a killed process: nothing applies the log on the way out
"""


READ_ONLY = r"""
import sys, duckdb
con = duckdb.connect(sys.argv[1], read_only=True, config={"allow_unsigned_extensions": "true"})
con.execute(f"LOAD '{sys.argv[2]}'")
try:
    print(con.execute("FROM mentat_q('[:find ?n :where [?e :k/n ?n]]')").fetchall())
except duckdb.Error as e:
    print(e)
"""


K_SCHEMA = ("[{:db/ident :k/id :db/valueType :db.type/long :db/cardinality :db.cardinality/one "
            ":db/unique :db.unique/identity} {:db/ident :k/n :db/valueType :db.type/long "
            ":db/cardinality :db.cardinality/one}]")


def leave_a_log(db):
    """Runs WRITER on database file `db` in a process of its own, which ends with its updates still in the log."""
    env = {**__import__("os").environ, **KEEP}
    out = subprocess.run([sys.executable, "-c", WRITER, str(db), str(EXT), K_SCHEMA], capture_output=True,
                         text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr


def test_a_log_left_by_a_writer_is_applied_when_the_store_is_opened(tmp_path):
    db = tmp_path / "left.duckdb"
    leave_a_log(db)
    # :k/id 0 gets 0, its value already (a no-op leaving only its :db/txInstant, logged like any other); the other
    # nine updates are three rows each
    assert file_rows(db) == 28, "the ten updates should have been left in the log"
    # read-only (in a process of its own: mentat keeps a database it loaded into open), the log cannot be
    # applied: the store refuses to open rather than answer without it
    ro = subprocess.run([sys.executable, "-c", READ_ONLY, str(db), str(EXT)], capture_output=True, text=True,
                        timeout=300)
    assert "transaction log holds 28 datoms not yet applied" in ro.stdout, (ro.stdout, ro.stderr)
    con = connect_with(db, **KEEP)
    assert sorted(q(con, "[:find ?i ?n :where [?e :k/id ?i] [?e :k/n ?n]]")) == [(i, i * 10) for i in range(10)]
    assert log_rows(con) == 0
    # the next transaction gets the next tx entid: the applied log's transactions count
    txs = [t for (t,) in q(con, "[:find ?tx :where [?tx :db/txInstant]]")]
    # the ten updates' transactions, the no-op's among them, each with its :db/txInstant
    assert sorted(txs)[-10:] == list(range(max(txs) - 9, max(txs) + 1))
    assert transact(con, "[[:db/add [:k/id 1] :k/n 5]]")["tx"] == max(txs) + 1


BULK_WRITER = r"""
import os, sys, duckdb
con = duckdb.connect(sys.argv[1], config={"allow_unsigned_extensions": "true"})
con.execute(f"LOAD '{sys.argv[2]}'")
con.execute("SELECT * FROM mentat_transact(?)", [sys.argv[3]]).fetchall()
print(con.execute("SELECT next FROM mentat.partitions WHERE ident = ':db.part/user'").fetchone()[0])
con.execute("SELECT * FROM mentat_transact(?)", ['[' + ' '.join(f'{{:k/id {i} :k/n {i}}}' for i in range(600)) + ']']).fetchall()
os._exit(0)  # killed, as far as the log can tell: its record, partition marks and all, is not applied
"""


def test_entids_a_logged_group_allocated_are_never_handed_out_again_after_a_crash(tmp_path):
    # 600 new entities in one transaction (1,201 datoms: logged whatever the index holds). The group's DuckDB
    # transaction writes nothing: the :db.part/user mark it moved is in its log record (logfile.rs), and reaches
    # the partitions table when the reopened store applies the record. Had the mark been lost, the next new
    # entity would get the entid of the first of the 600.
    db = tmp_path / "marks.duckdb"
    out = subprocess.run([sys.executable, "-c", BULK_WRITER, str(db), str(EXT), K_SCHEMA], capture_output=True,
                         text=True, env={**__import__("os").environ, **KEEP}, timeout=300)
    assert out.returncode == 0, out.stderr
    before = int(out.stdout.split()[-1])
    assert file_rows(db) == 1201
    con = connect_with(db, **KEEP)
    # plain SQL over the tables: the 600 entities, and a mark past every one of them
    ids = con.execute("SELECT e FROM mentat.cur_1 WHERE v = ':k/id'").fetchone()[0]
    es = [e for (e,) in con.execute(f"SELECT e FROM mentat.cur_{ids}").fetchall()]
    assert len(es) == 600 and min(es) == before
    mark = con.execute("SELECT next FROM mentat.partitions WHERE ident = ':db.part/user'").fetchone()[0]
    assert mark == max(es) + 1
    e = transact(con, '[{:db/id "new" :k/id 1000 :k/n 1}]')["tempids"]["new"]
    assert e not in es and e == max(es) + 1
    assert q(con, "[:find (count ?e) . :where [?e :k/id]]") == [(601,)]


def test_load_opens_the_default_store_and_applies_its_log_before_any_call(tmp_path):
    """`LOAD mentat` is the store's cold open (duckdb_ext/src/lib.rs `open_default_store`): with no mentat call
    after it, the log a writer left is applied, as plain SQL over the store's tables shows."""
    db = tmp_path / "load.duckdb"
    leave_a_log(db)
    assert file_rows(db) == 28
    con = connect_with(db, **KEEP)
    assert log_rows(con) == 0
    aid = con.execute("SELECT e FROM mentat.cur_1 WHERE v = ':k/n'").fetchone()[0]
    ids = con.execute("SELECT e FROM mentat.cur_1 WHERE v = ':k/id'").fetchone()[0]
    rows = con.execute(f"SELECT i.v, n.v FROM mentat.cur_{aid} n JOIN mentat.cur_{ids} i USING (e) ORDER BY 1").fetchall()
    assert rows == [(i, i * 10) for i in range(10)]


def test_a_log_file_left_beside_a_replaced_database_is_never_applied_to_the_new_one(tmp_path):
    """The file carries the store's log id (kept in its meta table): a database deleted and made again under the
    same name meets its predecessor's records, which belong to another store, and ignores them."""
    db = tmp_path / "again.duckdb"
    leave_a_log(db)
    assert file_rows(db) == 28
    for f in (db, pathlib.Path(f"{db}.wal")):
        f.unlink(missing_ok=True)
    con = connect_with(db, **KEEP)
    transact(con, K_SCHEMA)
    transact(con, "[{:k/id 1 :k/n 7}]")
    warm = q(con, "[:find ?n . :in $ ?i :where [?e :k/id ?i] [?e :k/n ?n]]", "[1]")
    assert warm == [(7,)]
    transact(con, "[[:db/add [:k/id 1] :k/n 8]]")  # logged: the file is this store's now, the old records gone
    assert file_rows(db) == 3
    assert sorted(q(con, "[:find ?i ?n :where [?e :k/id ?i] [?e :k/n ?n]]")) == [(1, 8)]


def test_the_background_indexer_applies_an_idle_log(tmp_path):
    con = connect_with(tmp_path / "i.duckdb", MENTAT_LOG_IDLE_MS="50")
    users(con, 10)
    for k in range(5):
        transact(con, f'[[:db/add [:u/email "u{k}@x"] :u/n {k + 1}]]')
    deadline = time.time() + 10
    while log_rows(con) and time.time() < deadline:
        time.sleep(0.05)
    assert log_rows(con) == 0
    assert con.execute("SELECT count(*) FROM mentat.cur_" + str(
        q(con, "[:find ?a . :where [?a :db/ident :u/n]]")[0][0]) + " WHERE v > 0").fetchone()[0] == 5


def test_the_log_stays_under_its_size(tmp_path):
    con = connect_with(tmp_path / "s.duckdb", MENTAT_LOG_ROWS="10", **KEEP)
    users(con, 30)
    sizes = []
    for k in range(30):
        transact(con, f'[[:db/add [:u/email "u{k}@x"] :u/n {k + 1}]]')
        sizes.append(log_rows(con))
    assert max(sizes) <= 10 and max(sizes) > 0
    assert q(con, "[:find (sum ?n) . :where [?e :u/n ?n]]") == [(sum(range(1, 31)),)]


def test_the_log_off_writes_the_tables(tmp_path):
    con = connect_with(tmp_path / "o.duckdb", MENTAT_LOG_ROWS="0", **KEEP)
    users(con, 5)
    transact(con, '[[:db/add [:u/email "u1@x"] :u/n 9]]')
    assert log_rows(con) == 0
    assert q(con, "[:find ?n . :where [?e :u/email \"u1@x\"] [?e :u/n ?n]]") == [(9,)]


def test_a_store_in_an_attached_catalog_never_hands_out_a_tx_twice(tmp_path):
    """A store in an attached catalog reads its partition marks again before each group (another process may have
    written the file while it was detached). With logged transactions not yet applied, its tables' newest
    :db/txInstant lags behind: read as the state, it handed the next transactions the tx entids of logged ones
    (found here: updates 1 and 2 both got tx ...779, and history lost one of them)."""
    con = connect_with(tmp_path / "main.duckdb", MENTAT_LOG="always", **KEEP)
    con.execute(f"ATTACH '{tmp_path / 'other.duckdb'}' AS o")
    transact(con, "[{:db/ident :x/n :db/valueType :db.type/long :db/cardinality :db.cardinality/one}]",
             store="o.mentat")
    transact(con, '[{:db/id "a" :x/n 0}]', store="o.mentat")
    first = transact(con, '[{:db/id "b" :x/n 0}]', store="o.mentat")
    e = first["tempids"]["b"]
    txs = [con.execute("SELECT tx FROM mentat_transact(?, store := 'o.mentat')",
                       [f"[[:db/add {e} :x/n {i}]]"]).fetchone()[0] for i in range(1, 6)]
    assert len(set(txs)) == 5 and txs == sorted(txs), txs
    # every update is in history with its own tx: the first value and five replacements, each asserted once
    hist = q(con, f"[:find ?v ?tx ?added :where [{e} :x/n ?v ?tx ?added]]", history=True, store="o.mentat")
    assert sorted(hist) == sorted([(0, first["tx"], True), (0, txs[0], False)] +
                                  [(i, t, True) for i, t in zip(range(1, 6), txs)] +
                                  [(i, t, False) for i, t in zip(range(1, 5), txs[1:])]), hist


EXITER = r"""
import random, sys, time, duckdb
con = duckdb.connect(sys.argv[1], config={"allow_unsigned_extensions": "true"})
con.execute(f"LOAD '{sys.argv[2]}'")
con.execute('''SELECT * FROM mentat_transact('[{:db/ident :i/key :db/valueType :db.type/string
  :db/cardinality :db.cardinality/one :db/unique :db.unique/identity}
 {:db/ident :i/state :db/valueType :db.type/ref :db/cardinality :db.cardinality/one}
 {:db/ident :s/a} {:db/ident :s/b} {:db/ident :s/c} {:db/ident :s/d} {:db/ident :s/e}]')''').fetchall()
con.execute('''SELECT * FROM mentat_import('SELECT ''k'' || i AS ":i/key", '':s/a'' AS ":i/state"
  FROM range(20000) t(i)', refs := '{:i/state :db/ident}')''').fetchall()
con.execute("FROM mentat_q('[:find ?s . :in $ ?k :where [?e :i/key ?k] [?e :i/state ?s]]', inputs := ?)",
            ['["k1"]']).fetchall()
time.sleep(0.3)  # the entity index reads the attributes in
rng = random.Random(int(sys.argv[3]))
for _ in range(10):  # 30,000 logged datoms: an apply long enough to be under way when the process ends
    txs = [f'[[:db/add [:i/key "k{rng.randrange(20000)}"] :i/state :s/{rng.choice("bcde")}]]' for _ in range(1000)]
    con.execute("SELECT count(*) FROM mentat_transact_many(?)", [txs]).fetchall()
"""


def test_a_process_that_ends_while_the_log_is_being_applied_exits_cleanly(tmp_path):
    """The background indexer applies the log 20 ms after the last write; a process that ended then crashed
    (SIGSEGV in DuckDB's identifier quoting, whose static data the exit had already destroyed) in two to three runs
    of six. Each run must exit with status 0, and the reopened store must hold every acknowledged write."""
    for seed in range(6):
        db = tmp_path / f"exit{seed}.duckdb"
        p = subprocess.run([sys.executable, "-c", EXITER, str(db), str(EXT), str(seed)], capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 0, (seed, p.returncode, p.stderr[-2000:])
        rng = random.Random(seed)
        want = {}
        for _ in range(10):
            for _ in range(1000):
                k = rng.randrange(20000)
                want[f"k{k}"] = f":s/{rng.choice('bcde')}"
        con = connect_with(db, **KEEP)
        got = dict(q(con, "[:find ?k ?v :where [?e :i/key ?k] [?e :i/state ?s] [?s :db/ident ?v] "
                          "[(not= ?v :s/a)]]"))
        con.close()
        assert got == want, seed


def users_beside_readers(db, indexer_mb, duckdb_threshold):
    """A store in database file `db` with 100 users, the indexer's checkpoint threshold at `indexer_mb` MiB and
    DuckDB's `checkpoint_threshold` at `duckdb_threshold`: (the connection, the path of the write-ahead log)."""
    con = connect_with(db, MENTAT_LOG_IDLE_MS="20", MENTAT_CHECKPOINT_WAL_MB=str(indexer_mb))
    con.execute(f"SET checkpoint_threshold = '{duckdb_threshold}'")
    users(con, 100)
    return con, pathlib.Path(f"{db}.wal")


def readers_of_users(con, n):
    """Starts `n` threads that read users u0.. u{n-1} (made by `users`) over and over, each checking its answer,
    until the event is set: (the event, the errors they met, the threads)."""
    import threading

    stop, errors = threading.Event(), []

    def reader(i):
        c = con.cursor()
        try:
            while not stop.is_set():
                assert q(c, '[:find ?n . :in $ ?m :where [?e :u/email ?m] [?e :u/n ?n]]', f'["u{i}@x"]') == [(0,)]
        except Exception as e:  # noqa: BLE001 - reported by the caller
            errors.append(e)

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    return stop, errors, threads


def test_the_indexer_checkpoints_a_large_write_ahead_log_while_readers_run(tmp_path):
    """The indexer checkpoints the database once the write-ahead log passes its threshold (txlog.rs `checkpoint`;
    16 MiB here, 64 by default), whether or not DuckDB checkpoints by itself: here DuckDB's own threshold is set
    out of reach. Four readers run throughout; after the writes stop the write-ahead log is emptied while they
    still run, and every datom written is there."""
    con, wal = users_beside_readers(tmp_path / "c.duckdb", indexer_mb=16, duckdb_threshold="1GB")
    stop, errors, threads = readers_of_users(con, 4)
    w = con.cursor()
    k, biggest = 0, 0
    try:
        while biggest < 17 << 20 and k < 400:
            transact(w, "[" + " ".join(f'{{:u/email "w{k}-{j}@x" :u/n {j}}}' for j in range(2000)) + "]")
            k += 1
            biggest = max(biggest, wal.stat().st_size if wal.exists() else 0)
        assert biggest >= 16 << 20, f"{k} transactions left a write-ahead log of {biggest} bytes at most"
        transact(w, '[[:db/add [:u/email "u99@x"] :u/n 1]]')  # one more small write, as a steady writer makes
        deadline = time.time() + 20
        while (wal.stat().st_size if wal.exists() else 0) >= 16 << 20 and time.time() < deadline:
            time.sleep(0.05)
        left = wal.stat().st_size if wal.exists() else 0
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors[:1]
    assert left < 16 << 20, f"the write-ahead log still holds {left} bytes beside the readers"
    assert q(con, "[:find (count ?e) . :where [?e :u/email _]]") == [(100 + 2000 * k,)]


def test_duckdb_checkpoints_by_itself_beside_readers_because_no_row_is_updated_in_place(tmp_path):
    """DuckDB checkpoints at a commit that passes its `checkpoint_threshold` while other transactions are open
    only if nothing in the write-ahead log updated a row in place (then it can checkpoint beside them; otherwise
    it waits for a moment when no other transaction is open, which readers that keep running never give). So
    mentat deletes and inserts its marks (the `partitions` rows, the log's applied mark, fulltext counts) instead
    of updating them (transactor.rs `rewrite_partitions`). Here DuckDB's threshold is 256 KiB and the indexer's own
    checkpoints are out of reach (1 GiB); four readers run throughout while transactions of 1,000 new users
    (entities allocated: the partition marks) and of ten changed users alternate, the log's applies writing its
    applied mark: the write-ahead log is emptied again and again and never grows past 1 MiB. With the marks updated in place it grew without a
    checkpoint (measured: to 2.1 MB in these 80 transactions, never emptied)."""
    con, wal = users_beside_readers(tmp_path / "d.duckdb", indexer_mb=1024, duckdb_threshold="256KB")
    stop, errors, threads = readers_of_users(con, 4)
    w = con.cursor()
    k, biggest, last, emptied = 0, 0, 0, 0
    try:
        while k < 40:
            transact(w, "[" + " ".join(f'{{:u/email "w{k}-{j}@x" :u/n {j}}}' for j in range(1000)) + "]")
            transact(w, "[" + " ".join(f'[:db/add [:u/email "u{j}@x"] :u/n {k + 1}]' for j in range(10, 20)) + "]")
            k += 1
            size = wal.stat().st_size if wal.exists() else 0
            emptied += size < last // 2
            biggest, last = max(biggest, size), size
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors[:1]
    assert emptied >= 3 and biggest < 1 << 20, f"write-ahead log at most {biggest} bytes, emptied {emptied} times"
    assert q(con, "[:find (count ?e) . :where [?e :u/email _]]") == [(100 + 1000 * k,)]
    assert q(con, '[:find ?n . :where [?e :u/email "u15@x"] [?e :u/n ?n]]') == [(k,)]


def test_random_transactions_with_the_staging_tables_made_again_at_every_use_equal_one_by_one(tmp_path):
    """The staging tables of a connection are dropped and made again every 256 uses (stage.rs `renew_tables`);
    with MENTAT_STAGE_RENEW=1 at every borrow, the same random transactions in groups, the log's applies and the
    reads between them give what the transactions one by one give."""
    rng = random.Random(11)
    txs = [random_tx(rng, i) for i in range(120)]
    renewed = connect_with(tmp_path / "r.duckdb", MENTAT_STAGE_RENEW="1", MENTAT_LOG_IDLE_MS="5")
    ref = serial_instance(tmp_path / "s.duckdb")
    for con in (renewed, ref):
        transact(con, SCHEMA)
    warm_index(renewed)
    rows = []
    for start in range(0, len(txs), 10):
        rows += many(renewed, txs[start:start + 10])
        q(renewed, "[:find (count ?e) . :where [?e :u/email]]")
    serial = one_by_one(ref, txs)
    assert [(r["tx"], r["error"] is None) for r in rows] == [(t, e is None) for t, e in serial]
    assert log(renewed) == log(ref)


def staging_memory(tmp_path, name, **env):
    """The `IN_MEMORY_TABLE` memory DuckDB holds (`duckdb_memory()`: the connections' temporary tables, which a
    temporary database cannot checkpoint) after 300 transactions of 500 datoms that leave no tag, with the log
    applied by `mentat_sync()` on the caller's pooled connection and the database checkpointed. The background
    indexer never runs (KEEP), so every staging use happens on that one connection, in one order."""
    con = connect_with(tmp_path / f"{name}.duckdb", **env, **KEEP)
    users(con, 500)
    for k in range(150):
        for added in (True, False):
            op = ":db/add" if added else ":db/retract"
            transact(con, "[" + " ".join(f'[{op} [:u/email "u{i}@x"] :u/tag "t{k}"]' for i in range(500)) + "]")
    con.execute("SELECT * FROM mentat_sync()").fetchall()
    con.execute("CHECKPOINT")
    held = con.execute("SELECT coalesce(sum(memory_usage_bytes), 0) FROM duckdb_memory() "
                       "WHERE tag = 'IN_MEMORY_TABLE'").fetchone()[0]
    assert q(con, "[:find (count ?t) . :where [_ :u/tag ?t]]") in ([(0,)], [(None,)], [])
    con.close()
    return held


def test_staging_tables_made_again_give_back_their_memory(tmp_path):
    """A temporary table emptied and filled again keeps memory DuckDB gives back only when it is dropped. With
    the log off (MENTAT_LOG_ROWS=0) every transaction stages its 500 datoms on the pooled connection: one instance
    never makes its staging tables again (MENTAT_STAGE_RENEW=0), one every 8 uses. Measured 6.6 MB and 0.3 MB."""
    never = staging_memory(tmp_path, "n", MENTAT_STAGE_RENEW="0", MENTAT_LOG_ROWS="0")
    renewed = staging_memory(tmp_path, "r", MENTAT_STAGE_RENEW="8", MENTAT_LOG_ROWS="0")
    assert never > 1_000_000 and renewed < never * 0.3, (renewed, never)


def test_a_large_apply_makes_the_staging_tables_again(tmp_path):
    """Through the log (MENTAT_LOG=always), the 150,000 rows are applied by `mentat_sync()` in one go, which stages
    them at once: the connection makes its staging tables again right after an apply of 50,000 rows or more
    (storage::stage::RENEW_ROWS), unless renewal is off. Measured 7.4 MB kept when off, 0 when on; before the
    renewal after large applies both kept 7.4 MB (every-8-uses renewal never follows the last, largest use)."""
    never = staging_memory(tmp_path, "n", MENTAT_STAGE_RENEW="0", MENTAT_LOG="always")
    renewed = staging_memory(tmp_path, "r", MENTAT_STAGE_RENEW="8", MENTAT_LOG="always")
    assert never > 1_000_000 and renewed < never * 0.3, (renewed, never)


def test_loading_mentat_raises_duckdbs_default_checkpoint_threshold_and_leaves_a_set_one(tmp_path):
    """DuckDB's `checkpoint_threshold` is 16 MiB by default; loading mentat raises it to the indexer's threshold
    (64 MiB, or `MENTAT_CHECKPOINT_WAL_MB`) so that a bulk load is not checkpointed every 16 MiB (txlog.rs
    `align_checkpoint_threshold`), leaves a threshold set before the load as it is, and loads with a locked
    configuration."""
    setting = "SELECT current_setting('checkpoint_threshold')"
    assert duckdb.connect().execute(setting).fetchall() == [("16.0 MiB",)]  # DuckDB's own default, without mentat
    assert connect_with(tmp_path / "a.duckdb").execute(setting).fetchall() == [("64.0 MiB",)]
    assert connect_with(tmp_path / "b.duckdb", MENTAT_CHECKPOINT_WAL_MB="32").execute(setting).fetchall() == [
        ("32.0 MiB",)
    ]
    con = duckdb.connect(str(tmp_path / "c.duckdb"), config={"allow_unsigned_extensions": "true"})
    con.execute("SET checkpoint_threshold = '20MiB'")
    con.execute(f"LOAD '{EXT}'")
    assert con.execute(setting).fetchall() == [("20.0 MiB",)]
    # a locked configuration refuses the change, and mentat loads all the same
    locked = duckdb.connect(str(tmp_path / "d.duckdb"), config={"allow_unsigned_extensions": "true"})
    locked.execute("SET lock_configuration = true")
    locked.execute(f"LOAD '{EXT}'")
    assert locked.execute(setting).fetchall() == [("16.0 MiB",)]
