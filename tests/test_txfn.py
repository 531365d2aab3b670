"""mentat_tx, the scalar write function: one transaction per input row with mentat_transact's semantics (each
row's tx entid returned), checked against mentat_transact itself run one call at a time on the same transactions
(the same tx entids, the same failures, the same datom log), and against its own rules: NULL in, NULL out;
the first failing row ends the statement and writes nothing, the rows before it stay committed and the error
says how many; EXPLAIN and PREPARE write nothing and every EXECUTE of a prepared call writes again."""
import random
import threading

import pytest

from conftest import connect, q, transact
from test_group_commit import SCHEMA, log, one_by_one, random_tx


def tx(con, edn, store=None):
    """mentat_tx(edn [, store]) in a statement of its own: the tx entid."""
    if store:
        return con.execute("SELECT mentat_tx(?, ?)", [edn, store]).fetchall()[0][0]
    return con.execute("SELECT mentat_tx(?)", [edn]).fetchall()[0][0]


def sql_string(text):
    """README "Many writers": the EDN as a DuckDB string literal, quotes doubled."""
    return "'" + text.replace("'", "''") + "'"


_PREPARED = {}


def tx_executed(con, edn):
    """The README's recipe for Python writers: `SELECT mentat_tx(?)` prepared once per connection with DuckDB's
    PREPARE, each transaction sent as `EXECUTE` with its EDN as a string literal."""
    if id(con) not in _PREPARED:
        con.execute("PREPARE mentat_write AS SELECT mentat_tx(?)")
        _PREPARED[id(con)] = con  # held, so that no later connection gets its id
    return con.execute(f"EXECUTE mentat_write({sql_string(edn)})").fetchall()[0][0]


def ns(con, store=None):
    extra = {"store": store} if store else {}
    return sorted(r[0] for r in q(con, "[:find ?n :where [_ :u/n ?n]]", **extra))


@pytest.mark.parametrize("send", ["parameter", "execute"])
@pytest.mark.parametrize("seed", range(3))
def test_random_transactions_equal_mentat_transact(seed, send, tmp_path):
    """80 random transactions (upserts, lookup refs, cas right and wrong, retractions, retractEntity, schema
    changes, failures) through mentat_tx and through mentat_transact, each into its own store: the same tx entid
    for each, the same ones fail, and the two datom logs are identical. mentat_tx is sent both ways: a statement
    with a parameter, and the README's recipe (PREPARE once, EXECUTE with a string literal)."""
    rng = random.Random(seed)
    txs = [random_tx(rng, i) for i in range(80)]
    a, b = connect(tmp_path / "a.duckdb"), connect(tmp_path / "b.duckdb")
    write = tx if send == "parameter" else tx_executed
    assert write(b, SCHEMA) == transact(a, SCHEMA)["tx"]
    b_out = []
    for t in txs:
        try:
            b_out.append((write(b, t), None))
        except Exception as e:  # noqa: BLE001 - compared below
            b_out.append((None, str(e)))
    a_out = one_by_one(a, txs)
    assert [t for t, _ in b_out] == [t for t, _ in a_out]
    assert [e is None for _, e in b_out] == [e is None for _, e in a_out]
    assert sum(e is not None for _, e in a_out) > 0, "the generator made no failing transaction"
    assert log(a) == log(b)


def test_each_row_is_its_own_transaction_and_null_writes_nothing(con):
    transact(con, SCHEMA)
    got = con.execute("SELECT n, mentat_tx(format('[{{:u/email \"e{}\" :u/n {}}}]', n, n)) AS t "
                      "FROM range(5) r(n) ORDER BY n").fetchall()
    txs = [t for _, t in got]
    assert txs == sorted(set(txs)) and len(txs) == 5, "one new tx per row, in row order"
    assert ns(con) == [0, 1, 2, 3, 4]
    assert con.execute("SELECT mentat_tx(NULL)").fetchall() == [(None,)]
    assert con.execute("SELECT mentat_tx(CAST(NULL AS VARCHAR))").fetchall() == [(None,)]
    assert tx(con, '[{:u/email "e9" :u/n 9}]') == txs[-1] + 1, "NULL took no tx"


def test_the_first_failing_row_ends_the_statement(con):
    """Rows 0 and 1 commit, row 2 fails (a string for a long), row 3 never runs: the error names the form and
    says that 2 rows were committed; the failing transaction wrote nothing."""
    transact(con, SCHEMA)
    edns = ['[{:u/email "a" :u/n 1}]', '[{:u/email "b" :u/n 2}]', '[{:u/email "c" :u/n "x"}]',
            '[{:u/email "d" :u/n 4}]']
    with pytest.raises(Exception) as ei:
        con.execute("SELECT mentat_tx(e) FROM (SELECT unnest(?::VARCHAR[]) AS e)", [edns]).fetchall()
    msg = str(ei.value)
    assert ':u/n "x"' in msg and "2 row(s) before it" in msg, msg
    assert ns(con) == [1, 2]
    assert q(con, '[:find ?e :where [?e :u/email "c"]]') == []
    with pytest.raises(Exception, match="unknown attribute|:u/nope"):
        tx(con, "[{:u/nope 1}]")
    with pytest.raises(Exception, match="mentat_tx"):
        tx(con, "[{:u/n " + "[" * 5000 + "]}]")


def test_explain_and_prepare_write_nothing_and_each_execute_writes(con):
    transact(con, SCHEMA)
    con.execute("EXPLAIN SELECT mentat_tx('[{:u/email \"x\" :u/n 7}]')").fetchall()
    con.execute("PREPARE w AS SELECT mentat_tx($1)")
    assert ns(con) == []
    t1 = con.execute("EXECUTE w('[{:u/email \"x\" :u/n 7}]')").fetchall()[0][0]
    t2 = con.execute("EXECUTE w('[{:u/email \"y\" :u/n 8}]')").fetchall()[0][0]
    t3 = con.execute("EXECUTE w('[[:db/add [:u/email \"x\"] :u/n 70]]')").fetchall()[0][0]
    assert t1 < t2 < t3
    assert ns(con) == [8, 70], "cardinality one: the third execution replaced x's value"


def test_a_second_store_by_argument(con):
    transact(con, SCHEMA)
    tx(con, SCHEMA, store="other")
    tx(con, '[{:u/email "o" :u/n 5}]', store="other")
    assert ns(con, store="other") == [5]
    assert ns(con) == []


def test_many_threads(con):
    """8 threads, 25 mentat_tx calls each, on their own cursors: every call one tx, all distinct, every value there."""
    transact(con, SCHEMA)
    got, lock = [], threading.Lock()

    def writer(w):
        c = con.cursor()
        mine = [tx(c, f'[{{:u/email "w{w}-{i}" :u/n {100 * w + i}}}]') for i in range(25)]
        with lock:
            got.extend(mine)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(set(got)) == 200
    assert ns(con) == sorted(100 * w + i for w in range(8) for i in range(25))


def test_the_execute_recipe_stores_hostile_strings_verbatim(con):
    """Strings sent through the README's EXECUTE recipe come back as they were written, and a string that looks
    like SQL stays a string: single and double quotes, backslashes, newlines, SQL text, emoji and combining marks."""
    transact(con, SCHEMA)
    values = ["it's", "''", "a\\b", 'say \\"hi\\"', "line\nbreak", "x'); DROP TABLE t; --", "🦆 e\u0301", "'"]
    for i, v in enumerate(values):
        edn_string = v.replace("\\", "\\\\").replace('"', '\\"')
        assert tx_executed(con, f'[{{:u/email "h{i}@x" :u/tag "{edn_string}"}}]') > 0
    got = dict(q(con, '[:find ?m ?t :where [?e :u/email ?m] [?e :u/tag ?t]]'))
    assert got == {f"h{i}@x": v for i, v in enumerate(values)}
