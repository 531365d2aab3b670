"""Time travel through mentat_q's as_of / since / history (and mentat_pull's as_of / since), with answers written
from Datomic's documented semantics:

* as-of T: exactly the datoms asserted at or before T and not retracted at or before T;
* since T: the datoms asserted after T (T itself excluded) that are still true now (Datomic's since-db is a
  filter of the current database);
* history: every assertion and retraction, `added` bound by the 5-place pattern [?e ?a ?v ?tx ?added];
* T is a transaction entid or an instant (the last transaction at or before it).
"""
import duckdb
import pytest

from conftest import transact

SCHEMA = """[
 {:db/ident :p/name :db/valueType :db.type/string :db/cardinality :db.cardinality/one :db/unique :db.unique/identity}
 {:db/ident :p/age :db/valueType :db.type/long :db/cardinality :db.cardinality/one}
 {:db/ident :p/tag :db/valueType :db.type/keyword :db/cardinality :db.cardinality/many}
 {:db/ident :p/friend :db/valueType :db.type/ref :db/cardinality :db.cardinality/many}]"""


def q(con, query, **named):
    args = ["?"] + [f"{k} := ?" for k in named]
    return sorted(con.execute(f"SELECT * FROM mentat_q({', '.join(args)})", [query, *named.values()]).fetchall())


def pull(con, pattern, entity, **named):
    args = ["?", "?"] + [f"{k} := ?" for k in named]
    return con.execute(f"SELECT pull FROM mentat_pull({', '.join(args)})", [pattern, entity, *named.values()]).fetchall()[0][0]


@pytest.fixture
def tl(con):
    """t1: ann (age 30, tags :a :b) and bob (age 40, friend of ann); t2: ann's age replaced by 31;
    t3: ann's tag :b retracted; t4: bob retracted whole (:db/retractEntity, which also retracts ann's ref to him)."""
    transact(con, SCHEMA)
    t1 = transact(con, '[{:db/id "ann" :p/name "ann" :p/age 30 :p/tag [:a :b] :p/friend "bob"}'
                       ' {:db/id "bob" :p/name "bob" :p/age 40}]')
    ann, bob = t1["tempids"]["ann"], t1["tempids"]["bob"]
    t2 = transact(con, f"[[:db/add {ann} :p/age 31]]")
    t3 = transact(con, f"[[:db/retract {ann} :p/tag :b]]")
    t4 = transact(con, f"[[:db/retractEntity {bob}]]")
    return con, ann, bob, [None, t1, t2, t3, t4]


AGES = "[:find ?n ?a :where [?p :p/name ?n] [?p :p/age ?a]]"
TAGS = "[:find ?t :where [?p :p/name \"ann\"] [?p :p/tag ?t]]"
FRIENDS = "[:find ?f :where [?p :p/name \"ann\"] [?p :p/friend ?f]]"


def test_as_of_around_a_cardinality_one_replacement(tl):
    con, ann, bob, t = tl
    assert q(con, AGES, as_of=t[1]["tx"] - 1) == []
    assert q(con, AGES, as_of=t[1]["tx"]) == [("ann", 30), ("bob", 40)]
    assert q(con, AGES, as_of=t[2]["tx"]) == [("ann", 31), ("bob", 40)]
    assert q(con, AGES) == [("ann", 31)]


def test_as_of_after_a_retraction(tl):
    con, ann, bob, t = tl
    assert q(con, TAGS, as_of=t[2]["tx"]) == [(":a",), (":b",)]
    assert q(con, TAGS, as_of=t[3]["tx"]) == [(":a",)]
    assert q(con, TAGS) == [(":a",)]


def test_as_of_after_a_retract_entity(tl):
    con, ann, bob, t = tl
    assert q(con, "[:find ?a :where [?p :p/name \"bob\"] [?p :p/age ?a]]", as_of=t[3]["tx"]) == [(40,)]
    assert q(con, "[:find ?a :where [?p :p/name \"bob\"] [?p :p/age ?a]]", as_of=t[4]["tx"]) == []
    # the ref to the retracted entity went with it
    assert q(con, FRIENDS, as_of=t[3]["tx"]) == [(bob,)]
    assert q(con, FRIENDS, as_of=t[4]["tx"]) == []
    assert q(con, FRIENDS) == []


def test_since_excludes_the_boundary(tl):
    con, ann, bob, t = tl
    # since t1: ann's new age (t2) only; t1's own datoms are excluded; bob's are gone now
    assert q(con, "[:find ?a :where [_ :p/age ?a]]", since=t[1]["tx"]) == [(31,)]
    assert q(con, "[:find ?p ?a :where [?p :p/age ?a]]", since=t[2]["tx"]) == []
    assert q(con, "[:find ?p ?a :where [?p :p/age ?a]]", since=t[1]["tx"] - 1) == [(ann, 31)]
    # a join across since: ann's name was asserted at t1, so it is not in the since-t1 view
    assert q(con, AGES, since=t[1]["tx"]) == []


def test_history_shows_add_and_retract_of_a_replaced_value(tl):
    con, ann, bob, t = tl
    got = q(con, f"[:find ?v ?tx ?added :where [{ann} :p/age ?v ?tx ?added]]", history=True)
    assert got == sorted([(30, t[1]["tx"], True), (30, t[2]["tx"], False), (31, t[2]["tx"], True)])
    # a retractEntity shows as retractions in history
    got = q(con, f"[:find ?v ?added :where [{bob} :p/age ?v _ ?added]]", history=True)
    assert got == [(40, False), (40, True)]


def test_as_of_by_instant(tl):
    con, ann, bob, t = tl
    assert q(con, AGES, as_of=t[1]["tx_instant"]) == [("ann", 30), ("bob", 40)]
    assert q(con, AGES, as_of=t[2]["tx_instant"]) == [("ann", 31), ("bob", 40)]
    assert q(con, TAGS, as_of=t[3]["tx_instant"]) == [(":a",)]


def test_pull_as_of_and_since(tl):
    con, ann, bob, t = tl
    pat = "[:p/name :p/age :p/tag {:p/friend [:p/name]}]"
    assert pull(con, pat, ann, as_of=t[1]["tx"]) == {
        "p/name": "ann", "p/age": 30, "p/tag": [":a", ":b"], "p/friend": [{"p/name": "bob"}]}
    assert pull(con, pat, ann, as_of=t[3]["tx"]) == {
        "p/name": "ann", "p/age": 31, "p/tag": [":a"], "p/friend": [{"p/name": "bob"}]}
    assert pull(con, pat, ann) == {"p/name": "ann", "p/age": 31, "p/tag": [":a"], "p/friend": None}
    assert pull(con, pat, ann, as_of=t[2]["tx_instant"])["p/age"] == 31
    # since t1: only what was asserted later and is still true
    assert pull(con, pat, ann, since=t[1]["tx"]) == {"p/name": None, "p/age": 31, "p/tag": None, "p/friend": None}
    # bob as of before his retraction, by lookup ref; nothing of him now
    assert pull(con, "[:p/age]", '[:p/name "bob"]', as_of=t[3]["tx"]) == {"p/age": 40}
    assert pull(con, "[:p/age]", '[:p/name "bob"]') is None


@pytest.mark.parametrize("text", ["", "x\x00y", "z" * 1_000_000, "[:find ?e :where [?e :p/name]]", "tomorrow"])
def test_text_that_is_not_an_instant_is_refused_by_name_before_any_statement(tl, text):
    # Text as_of / since goes through DuckDB's own TIMESTAMPTZ cast once, at bind time: the error names the
    # parameter and shows the text (cut to 200 characters), for every reading function.
    con = tl[0]
    for sql in ("SELECT * FROM mentat_q('[:find ?e :where [?e :p/name]]', as_of := ?)",
                "SELECT * FROM mentat_datoms('EAVT', since := ?)",
                "SELECT * FROM mentat_datoms('AVET', as_of := ?)"):
        with pytest.raises(duckdb.Error) as ei:
            con.execute(sql, [text]).fetchall()
        msg = str(ei.value)
        assert "is not a tx entid or an instant" in msg and text[:200].replace("\x00", " ") in msg, msg[:300]
    # a text instant that DuckDB reads still travels: far in the future is the present database
    assert q(con, "[:find ?n :where [_ :p/name ?n]]", as_of="2999-01-01 00:00:00+00") == [("ann",)]


def test_an_attribute_variable_under_an_instant_reads_the_bound_once(con):
    # [?e ?a ?v] reads one source per attribute of the store, each current and retracted part bounded by as-of.
    # The extension fuzzer found this query taking over a minute at 40 attributes under an instant (each source
    # repeated the instant's :db/txInstant subquery); the instant is now resolved to its tx before planning.
    n = 60
    transact(con, "[" + " ".join(f"{{:db/ident :w/a{i} :db/valueType :db.type/long "
                                 f":db/cardinality :db.cardinality/one}}" for i in range(n)) + "]")
    t1 = transact(con, '[{:db/id "w" ' + " ".join(f":w/a{i} {i}" for i in range(n)) + "}]")
    w = t1["tempids"]["w"]
    transact(con, "[" + " ".join(f"[:db/add {w} :w/a{i} {i + 1000}]" for i in range(0, n, 2)) + "]")
    query = "[:find ?i ?v :in $ ?e :where [?e ?a ?v] [?a :db/ident ?i]]"
    # ?v ranges over attributes of several value types, so it comes back as text
    then = [(f":w/a{i}", str(i)) for i in range(n)]
    now = [(f":w/a{i}", str(i + 1000 if i % 2 == 0 else i)) for i in range(n)]
    assert q(con, query, inputs=f"[{w}]", as_of=t1["tx_instant"]) == sorted(then)
    assert q(con, query, inputs=f"[{w}]", as_of=t1["tx"]) == sorted(then)
    assert q(con, query, inputs=f"[{w}]") == sorted(now)
    # the fuzzer's shape: the attributes an attribute entity holds, as of the instant of its own transaction
    schema_of = "[:find ?n :where [?a :db/ident :w/a1] [?a ?t] [?t :db/ident ?n]]"
    assert q(con, schema_of, as_of=t1["tx_instant"]) == [(":db/cardinality",), (":db/ident",), (":db/valueType",)]
    # the statement holds no subquery: the bound is a constant (the plan had one subquery per source before)
    plan = " ".join(str(r) for r in con.execute(
        "SELECT * FROM mentat_explain(?, inputs := ?, as_of := ?)", [query, f"[{w}]", t1["tx_instant"]]).fetchall())
    assert "SUBQUERY" not in plan.upper(), plan[:2000]
