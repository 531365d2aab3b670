"""The log in queries (`tx-ids`, `tx-data`), `:db/txInstant` as an attribute, and `mentat_datoms` index views.

Datomic semantics: `(tx-ids log t1 t2)` are the transactions in [t1, t2) (start inclusive, end exclusive), t1 and
t2 being transactions or instants; `(tx-data log tx)` is every datom the transaction asserted or retracted,
`[e a v tx added]`, its own :db/txInstant datom included. `d/datoms` walks an index in its order, the leading
components constraining it."""
import datetime

import duckdb
import pytest

import conftest
from conftest import transact

SCHEMA = """[
 {:db/ident :p/name :db/valueType :db.type/string :db/cardinality :db.cardinality/one :db/unique :db.unique/identity}
 {:db/ident :p/age :db/valueType :db.type/long :db/cardinality :db.cardinality/one}
 {:db/ident :p/tag :db/valueType :db.type/keyword :db/cardinality :db.cardinality/many}
 {:db/ident :p/friend :db/valueType :db.type/ref :db/cardinality :db.cardinality/many}]"""


def q(con, query, inputs=None, **named):
    return sorted(conftest.q(con, query, inputs, **named))


def datoms(con, index, **named):
    args = ["?"] + [f"{k} := ?" for k in named]
    return con.execute(f"SELECT * FROM mentat_datoms({', '.join(args)})", [index, *named.values()]).fetchall()


@pytest.fixture
def log(con):
    """t0: schema; t1: ann (age 30, tags :a :b) and bob (age 9, friend ann); t2: ann's age 31 (replacing 30);
    t3: bob's friend ref retracted."""
    t0 = transact(con, SCHEMA)
    t1 = transact(con, '[{:db/id "ann" :p/name "ann" :p/age 30 :p/tag [:a :b]}'
                       ' {:db/id "bob" :p/name "bob" :p/age 9 :p/friend "ann"}]')
    ann, bob = t1["tempids"]["ann"], t1["tempids"]["bob"]
    t2 = transact(con, f"[[:db/add {ann} :p/age 31]]")
    t3 = transact(con, f"[[:db/retract {bob} :p/friend {ann}]]")
    aid = dict(con.execute("SELECT ident, entid FROM mentat_schema()").fetchall())
    return con, ann, bob, [t0, t1, t2, t3], aid


def test_tx_ids_half_open(log):
    con, ann, bob, t, aid = log
    query = "[:find ?tx :in $ ?t1 ?t2 :where [(tx-ids $ ?t1 ?t2) [?tx ...]]]"
    tx = [x["tx"] for x in t]
    assert q(con, query, f"[{tx[1]} {tx[3]}]") == [(tx[1],), (tx[2],)]  # t3 excluded
    assert q(con, query, f"[{tx[1]} {tx[3] + 1}]") == [(tx[1],), (tx[2],), (tx[3],)]
    assert q(con, query, f"[{tx[2]} {tx[2]}]") == []
    # instants: the transactions whose :db/txInstant is in [i1, i2)
    i1, i3 = t[1]["tx_instant"], t[3]["tx_instant"]
    got = con.execute("SELECT * FROM mentat_q('[:find ?tx :in $ ?a ?b :where [(tx-ids $ ?a ?b) [?tx ...]]]', "
                      "inputs := ?)", [f'[#inst "{i1.isoformat()}" #inst "{i3.isoformat()}"]']).fetchall()
    assert sorted(got) == [(tx[1],), (tx[2],)]
    # bounds bound by other clauses: the transactions after the one that set ann's age to 31
    got = q(con, "[:find ?tx :where [?a :p/age 31 ?t1] [(+ ?t1 1) ?s] [(* ?t1 2) ?end] [(tx-ids $ ?s ?end) [?tx ...]]]")
    assert got == [(tx[3],)]


def test_tx_data(log):
    con, ann, bob, t, aid = log
    query = "[:find ?e ?a ?v ?added :in $ ?tx :where [(tx-data $ ?tx) [[?e ?a ?v _ ?added]]]]"
    inst = t[2]["tx_instant"]
    got = q(con, query, f"[{t[2]['tx']}]")
    inst_text = con.execute("SELECT CAST(?::TIMESTAMPTZ AS VARCHAR)", [inst]).fetchall()[0][0]
    assert got == sorted([(ann, aid[":p/age"], "30", False), (ann, aid[":p/age"], "31", True),
                          (t[2]["tx"], aid[":db/txInstant"], inst_text, True)])
    got = q(con, query, f"[{t[3]['tx']}]")
    assert (bob, aid[":p/friend"], str(ann), False) in got and len(got) == 2
    # the tx position, and a join with tx-ids: every retraction since t1
    got = q(con, "[:find ?e ?a ?tx2 :in $ ?t1 :where [(tx-ids $ ?t1 9999999999999) [?tx ...]] "
                 "[(tx-data $ ?tx) [[?e ?a _ ?tx2 ?added]]] [(= ?added false)]]", f"[{t[1]['tx']}]")
    assert got == [(ann, aid[":p/age"], t[2]["tx"]), (bob, aid[":p/friend"], t[3]["tx"])]
    # t1 asserted 7 user datoms and its txInstant
    assert len(q(con, "[:find ?e ?a ?v :in $ ?tx :where [(tx-data $ ?tx) [[?e ?a ?v]]]]", f"[{t[1]['tx']}]")) == 8
    # ident of the attribute through a join
    got = q(con, "[:find ?ident ?v :in $ ?tx :where [(tx-data $ ?tx) [[_ ?a ?v]]] [?a :db/ident ?ident] "
                 "[(!= ?ident :db/txInstant)]]", f"[{t[2]['tx']}]")
    assert got == [(":p/age", "30"), (":p/age", "31")]
    with pytest.raises(duckdb.Error, match="relation"):
        q(con, "[:find ?e :in $ ?tx :where [(tx-data $ ?tx) [?e ...]]]", f"[{t[1]['tx']}]")


def test_tx_instant_is_an_attribute(log):
    con, ann, bob, t, aid = log
    got = q(con, "[:find ?tx ?when :in $ ?e :where [?e :p/age 31 ?tx] [?tx :db/txInstant ?when]]", f"[{ann}]")
    assert got == [(t[2]["tx"], t[2]["tx_instant"])]
    # the latest transaction at or before an instant
    got = q(con, "[:find (max ?tx) . :in $ ?i :where [?tx :db/txInstant ?w] [(<= ?w ?i)]]",
            f'[#inst "{t[2]["tx_instant"].isoformat()}"]')
    assert got == [(t[2]["tx"],)]


def test_datoms_indexes(log):
    con, ann, bob, t, aid = log
    t1, t2 = t[1]["tx"], t[2]["tx"]
    assert datoms(con, "EAVT", e=ann) == [
        (ann, ":p/name", "ann", t1, True), (ann, ":p/age", "31", t2, True),
        (ann, ":p/tag", ":a", t1, True), (ann, ":p/tag", ":b", t1, True)]
    assert datoms(con, "EAVT", e=ann, a=":p/tag") == [(ann, ":p/tag", ":a", t1, True), (ann, ":p/tag", ":b", t1, True)]
    assert datoms(con, "EAVT", e='[:p/name "bob"]', a=":p/age", v=9) == [(bob, ":p/age", "9", t1, True)]
    # AEVT: by entity within the attribute; AVET: by value (numerically) within the attribute
    assert datoms(con, "AEVT", a=":p/age") == [(ann, ":p/age", "31", t2, True), (bob, ":p/age", "9", t1, True)]
    assert datoms(con, "AVET", a=":p/age") == [(bob, ":p/age", "9", t1, True), (ann, ":p/age", "31", t2, True)]
    assert datoms(con, "AVET", a=":p/name", v="bob") == [(bob, ":p/name", "bob", t1, True)]
    assert datoms(con, "AVET", a=":p/tag", v=":b") == [(ann, ":p/tag", ":b", t1, True)]
    # an instant as EDN writes it, or as DuckDB's text
    inst = t[1]["tx_instant"]
    for v in [f'#inst "{inst.isoformat()}"', inst.isoformat()]:
        assert [r[0] for r in datoms(con, "AVET", a=":db/txInstant", v=v)] == [t1]
    with pytest.raises(duckdb.Error, match="not an instant"):
        datoms(con, "AVET", a=":db/txInstant", v='#inst "not a time"')
    # VAET: the reverse index of refs; bob's friend ref is retracted now, so only schema refs remain
    assert datoms(con, "VAET", v=ann) == []
    assert datoms(con, "VAET", v=ann, as_of=t2) == [(bob, ":p/friend", str(ann), t1, True)]
    with pytest.raises(duckdb.Error, match="ref attributes"):
        datoms(con, "VAET", v=ann, a=":p/age")
    with pytest.raises(duckdb.Error, match="index order"):
        datoms(con, "AVET", e=ann)
    with pytest.raises(duckdb.Error, match="EAVT, AEVT"):
        datoms(con, "XYZ")
    cols = con.execute("DESCRIBE SELECT * FROM mentat_datoms('EAVT')").fetchall()
    assert [(c[0], c[1]) for c in cols] == [("e", "BIGINT"), ("a", "VARCHAR"), ("v", "VARCHAR"), ("tx", "BIGINT"),
                                            ("added", "BOOLEAN")]
    # the whole EAVT is ordered by e, then attribute entid
    rows = datoms(con, "EAVT")
    keys = [(r[0], aid[r[1]]) for r in rows]
    assert keys == sorted(keys)


def test_avet_orders_keywords_as_clojure(con):
    """AVET orders keyword values as Clojure compares keywords (and as `:order` does): those without a namespace
    first, then by namespace, then by name; as text `:a-/z` would come before `:a/q` and `:z` after `:k/b`."""
    transact(con, "[{:db/ident :p/kw :db/valueType :db.type/keyword :db/cardinality :db.cardinality/many}]")
    transact(con, "[{:p/kw [:a-/z :k/a :k/b :z :a/q :b]}]")
    assert [r[2] for r in datoms(con, "AVET", a=":p/kw")] == [":b", ":z", ":a/q", ":a-/z", ":k/a", ":k/b"]


def test_datoms_time_travel(log):
    con, ann, bob, t, aid = log
    t1, t2 = t[1]["tx"], t[2]["tx"]
    assert datoms(con, "EAVT", e=ann, a=":p/age", as_of=t1) == [(ann, ":p/age", "30", t1, True)]
    assert datoms(con, "AEVT", a=":p/age", since=t1) == [(ann, ":p/age", "31", t2, True)]
    assert datoms(con, "EAVT", e=ann, a=":p/age", history=True) == [
        (ann, ":p/age", "30", t1, True), (ann, ":p/age", "30", t2, False), (ann, ":p/age", "31", t2, True)]
    when = t[1]["tx_instant"] + datetime.timedelta(microseconds=1)
    assert datoms(con, "EAVT", e=ann, a=":p/age", as_of=when) == [(ann, ":p/age", "30", t1, True)]
