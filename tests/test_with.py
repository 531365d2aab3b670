"""mentat_with: Datomic's `(q query (:db-after (d/with db tx-data)))`: the answer as if the transaction had been
applied, with nothing written: the store's tables, cached schema, partition marks and unique-value cache stay as
they were."""
import duckdb
import pytest

from conftest import rows, transact

SCHEMA = """[
 {:db/ident :p/name :db/valueType :db.type/string :db/cardinality :db.cardinality/one :db/unique :db.unique/identity}
 {:db/ident :p/age :db/valueType :db.type/long :db/cardinality :db.cardinality/one}
 {:db/ident :p/friend :db/valueType :db.type/ref :db/cardinality :db.cardinality/many}]"""

AGES = "[:find ?n ?a :where [?p :p/name ?n] [?p :p/age ?a]]"


def snapshot(con):
    """Every table of the store, in full, sorted, once its transaction log is applied (the log table, empty then,
    left out)."""
    con.execute("SELECT * FROM mentat_sync()").fetchall()
    tables = [r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE schema_name = 'mentat' "
                                        "AND table_name <> 'log' ORDER BY 1").fetchall()]
    return {t: sorted(con.execute(f'SELECT * FROM mentat."{t}"').fetchall(), key=repr) for t in tables}


def with_(con, edn, query, inputs=None):
    if inputs is None:
        return sorted(con.execute("SELECT * FROM mentat_with(?, ?)", [edn, query]).fetchall())
    return sorted(con.execute("SELECT * FROM mentat_with(?, ?, inputs := ?)", [edn, query, inputs]).fetchall())


@pytest.fixture
def people(con):
    transact(con, SCHEMA)
    r = transact(con, '[{:db/id "ann" :p/name "ann" :p/age 30} {:db/id "bob" :p/name "bob" :p/age 40}]')
    return con, r["tempids"]["ann"], r["tempids"]["bob"]


def test_answer_includes_speculative_datoms_and_store_is_unchanged(people):
    con, ann, bob = people
    before = snapshot(con)
    schema_before = con.execute("SELECT * FROM mentat_schema()").fetchall()
    got = with_(con, '[{:p/name "cat" :p/age 7} [:db/add [:p/name "ann"] :p/age 31] [:db/retractEntity [:p/name "bob"]]]',
                AGES)
    assert got == [("ann", 31), ("cat", 7)]
    assert snapshot(con) == before
    assert con.execute("SELECT * FROM mentat_schema()").fetchall() == schema_before
    assert sorted(con.execute(f"SELECT * FROM mentat_q('{AGES}')").fetchall()) == [("ann", 30), ("bob", 40)]


def test_next_transaction_is_unaffected(people):
    con, ann, bob = people
    tx_before = rows(con, "SELECT max(e) FROM mentat.cur_9")[0][0]
    assert with_(con, '[{:db/id "x" :p/name "dan"}]', "[:find ?e . :where [?e :p/name \"dan\"]]")
    # the unique-value cache did not learn "dan": a lookup ref to it still fails
    with pytest.raises(duckdb.Error, match="lookup ref"):
        transact(con, '[[:db/add [:p/name "dan"] :p/age 1]]')
    # the entid and tx marks did not move: the real transaction gets the next ones
    r = transact(con, '[{:db/id "d" :p/name "dan"}]')
    assert r["tx"] == tx_before + 1
    assert r["tempids"]["d"] == bob + 1


def test_schema_installed_by_the_transaction(people):
    con, ann, bob = people
    before = snapshot(con)
    got = with_(con, "[{:db/ident :p/email :db/valueType :db.type/string :db/cardinality :db.cardinality/one}]",
                "[:find ?t :where [?a :db/ident :p/email] [?a :db/valueType ?vt] [?vt :db/ident ?t]]")
    assert got == [(":db.type/string",)]
    assert snapshot(con) == before
    with pytest.raises(duckdb.Error, match="unknown attribute"):
        con.execute("SELECT * FROM mentat_q('[:find ?e :where [?e :p/email _]]')").fetchall()


def test_inputs_pull_and_types(people):
    con, ann, bob = people
    got = with_(con, f'[[:db/add {ann} :p/friend {bob}]]',
                "[:find (pull ?e [:p/name {:p/friend [:p/name]}]) :in $ ?n :where [?e :p/name ?n]]", '["ann"]')
    assert got == [({"p/name": "ann", "p/friend": [{"p/name": "bob"}]},)]
    cols = con.execute("DESCRIBE SELECT * FROM mentat_with('[]', ?)", [AGES]).fetchall()
    assert [(c[0], c[1]) for c in cols] == [("n", "VARCHAR"), ("a", "BIGINT")]
    # an empty transaction: the current answer
    assert with_(con, "[]", AGES) == [("ann", 30), ("bob", 40)]
    # a large answer crosses several output chunks
    edn = "[" + " ".join(f'{{:p/name "n{i}" :p/age {i}}}' for i in range(5000)) + "]"
    assert len(with_(con, edn, AGES)) == 5002


def test_errors_leave_the_store_unchanged(people):
    con, ann, bob = people
    before = snapshot(con)
    with pytest.raises(duckdb.Error, match="unknown attribute"):
        with_(con, "[[:db/add 1 :nope/x 1]]", AGES)
    with pytest.raises(duckdb.Error, match="unknown attribute"):
        with_(con, '[{:p/name "z"}]', "[:find ?e :where [?e :nope/x _]]")
    assert snapshot(con) == before
    # the connection used is healthy: a real transaction and a query still work
    transact(con, f"[[:db/add {ann} :p/age 32]]")
    assert sorted(con.execute(f"SELECT * FROM mentat_q('{AGES}')").fetchall()) == [("ann", 32), ("bob", 40)]
