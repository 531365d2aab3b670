"""Compaction of current-state tables swollen by deleted rows (storage/src/compact.rs): DuckDB vacuums deleted rows
only in a full checkpoint, which steady readers never allow, so the indexer copies a table's live rows into a new
table in its place once the deleted rows are at least 245,760 (two row groups) and at least as many as the live
ones. What a user must see: the same answers before, during and after, the unique value index still enforced, and
the table's rows on disk back to the live ones."""
import threading
import time

import duckdb
import pytest

from conftest import connect_with, q, transact

SCHEMA = """[{:db/ident :t/name :db/valueType :db.type/string :db/cardinality :db.cardinality/one
              :db/unique :db.unique/identity}
             {:db/ident :t/code :db/valueType :db.type/string :db/cardinality :db.cardinality/one
              :db/unique :db.unique/value}
             {:db/ident :t/tag :db/valueType :db.type/long :db/cardinality :db.cardinality/many}]"""

N = 20_000
SOME = '[["n0" "n7" "n19999"]]'
ROUNDS = 13  # 13 x 20,000 = 260,000 rows deleted from each of the two tables, past the 245,760 that compaction needs


def table(con, ident):
    """(table oid, rows on disk and in memory with deleted ones, live rows) of the current-state table of `ident`."""
    aid = q(con, f"[:find ?e . :where [?e :db/ident {ident}]]")[0][0]
    con.execute("SELECT * FROM mentat_sync()").fetchall()  # the log applied to the tables
    oid, size = con.execute(
        "SELECT table_oid, estimated_size FROM duckdb_tables() WHERE schema_name = 'mentat' AND table_name = ?",
        [f"cur_{aid}"],
    ).fetchone()
    live = con.execute(f"SELECT count(*) FROM mentat.cur_{aid}").fetchone()[0]
    return oid, size, live


def answers(con):
    """What the store says, by Datalog: the number of codes, a few entities' codes and tags, and the tag count."""
    return (
        q(con, "[:find (count ?e) . :where [?e :t/code _]]"),
        q(con, "[:find ?n ?c :in $ [?n ...] :where [?e :t/name ?n] [?e :t/code ?c]]", SOME),
        q(con, "[:find ?n ?t :in $ [?n ...] :where [?e :t/name ?n] [?e :t/tag ?t]]", SOME),
        q(con, "[:find (count ?t) . :where [_ :t/tag ?t]]"),
    )


def test_a_table_swollen_by_retractions_is_compacted_and_answers_stay_the_same(tmp_path):
    db = tmp_path / "c.duckdb"
    # neither DuckDB nor the indexer checkpoints during the test: only compaction can give the rows back
    con = connect_with(db, MENTAT_LOG_IDLE_MS="20", MENTAT_CHECKPOINT_WAL_MB="4096")
    con.execute("SET checkpoint_threshold = '8GB'")
    transact(con, SCHEMA)
    transact(con, "[" + " ".join(f'{{:t/name "n{i}" :t/code "c{i}" :t/tag {1_000_000 + i}}}' for i in range(N)) + "]")
    # the tables as created: the indexer may compact one as soon as it is swollen, before the checks below look
    created = {a: table(con, a)[0] for a in (":t/code", ":t/tag")}
    for r in range(ROUNDS):
        # every entity's code replaced (a cardinality-one replacement deletes the old row) and a tag added, then
        # the tag retracted; each applied to the tables on its own (mentat_sync), since an add and its retraction
        # applied in one DuckDB transaction never reach the table's rows (a CI run lost one round's 20,000 that way)
        transact(con, "[" + " ".join(f'{{:t/name "n{i}" :t/code "c{i}-{r}" :t/tag {r}}}' for i in range(N)) + "]")
        con.execute("SELECT * FROM mentat_sync()").fetchall()
        transact(con, "[" + " ".join(f'[:db/retract [:t/name "n{i}"] :t/tag {r}]' for i in range(N)) + "]")
        con.execute("SELECT * FROM mentat_sync()").fetchall()
    # the store's answers, computed by hand: every entity has its last code and its one permanent tag
    want = (
        [(N,)],
        sorted([("n0", f"c0-{ROUNDS - 1}"), ("n7", f"c7-{ROUNDS - 1}"), ("n19999", f"c19999-{ROUNDS - 1}")]),
        sorted([("n0", 1_000_000), ("n7", 1_000_007), ("n19999", 1_019_999)]),
        [(N,)],
    )
    got = answers(con)
    assert (got[0], sorted(got[1]), sorted(got[2]), got[3]) == want
    before = {a: table(con, a) for a in (":t/code", ":t/tag")}
    for a, (oid, size, live) in before.items():
        # swollen by every round's deleted rows, or already compacted by the indexer (a CI run saw the codes' table
        # compacted this early)
        assert live == N and (size - live >= ROUNDS * N if oid == created[a] else size < N + 5_000), (a, before)

    # readers beside: each checks an answer over and over while the tables are swapped under it
    stop, errors = threading.Event(), []

    def reader():
        c = con.cursor()
        try:
            while not stop.is_set():
                assert q(c, '[:find ?c . :where [?e :t/name "n7"] [?e :t/code ?c]]') == [(f"c7-{ROUNDS - 1}",)]
                # the writes below add one tag and retract it again
                assert q(c, "[:find (count ?t) . :where [_ :t/tag ?t]]") in ([(N,)], [(N + 1,)])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    # the indexer looks for swollen tables after it applies the log, every 5 s at most: small writes keep it busy
    deadline, k = time.time() + 60, 0
    while time.time() < deadline:
        transact(con, f"[[:db/add [:t/name \"n{k % 5}\"] :t/tag {2_000_000 + k}]]")
        transact(con, f"[[:db/retract [:t/name \"n{k % 5}\"] :t/tag {2_000_000 + k}]]")
        k += 1
        now = {a: table(con, a) for a in before}
        if all(now[a][0] != created[a] for a in before):
            break
        time.sleep(0.05)
    stop.set()
    for t in threads:
        t.join()
    assert errors == []
    after = {a: table(con, a) for a in before}
    for a in before:
        oid, size, live = after[a]
        assert oid != created[a], (a, before, after)  # a new table in the old one's place
        assert live == N and size < N + 5_000, (a, before, after)  # rows back to the live ones (and a few writes)
    got = answers(con)
    assert (got[0], sorted(got[1]), sorted(got[2]), got[3]) == want
    # the unique value index is there again and enforced
    aid = q(con, "[:find ?e . :where [?e :db/ident :t/code]]")[0][0]
    assert con.execute(
        "SELECT count(*) FROM duckdb_indexes() WHERE schema_name = 'mentat' AND table_name = ?", [f"cur_{aid}"]
    ).fetchone() == (1,)
    with pytest.raises(duckdb.Error, match="(?i)unique"):
        transact(con, f'[{{:t/name "n1" :t/code "c2-{ROUNDS - 1}"}}]')
    con.close()
    # and after a reopen
    con = connect_with(db)
    got = answers(con)
    assert (got[0], sorted(got[1]), sorted(got[2]), got[3]) == want
