"""Several callers at once: independent readers run in parallel while a writer transacts, one statement may
call mentat functions more than once, and nothing deadlocks."""
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
