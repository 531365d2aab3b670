"""`(pull ?e pattern)` as a find element of mentat_q, in every find spec (relation, scalar, collection, tuple,
with :keys and with aggregates), with the pull shapes of planner/src/pull.rs and the time-travel options.

Datomic semantics: a pull find element is the pull of the entity bound to ?e in each result tuple; the result is
still a set over the find elements' values, and :order/:limit apply to the tuples."""
import json

import duckdb
import pyarrow as pa
import pytest

from test_pull import db  # noqa: F401  (the fixture: ann, bob, cat, labels, issues i1 and i2)
from conftest import q, transact


def columns(con, query):
    return [(c[0], c[1]) for c in con.execute("DESCRIBE SELECT * FROM mentat_q(?)", [query]).fetchall()]


def test_relation_with_order(db):
    con, ids = db
    query = ("[:find ?t (pull ?u [:user/name {:user/manager [:user/email]}]) :where [?i :issue/title ?t] "
             "[?i :issue/assignee ?u] :order (desc ?t)]")
    bob = {"user/name": "Bob", "user/manager": {"user/email": "ann@x"}}
    assert q(con, query) == [("typo", bob), ("crash", bob)]
    assert columns(con, query) == [
        ("t", "VARCHAR"), ("pull_u", 'STRUCT("user/name" VARCHAR, "user/manager" STRUCT("user/email" VARCHAR))')]
    # ascending, limited: the order survives the join with the pull
    assert q(con, query.replace("(desc ?t)", "?t :limit 1")) == [("crash", bob)]


def test_scalar_collection_tuple(db):
    con, ids = db
    got = q(con, '[:find (pull ?e [:db/id :user/name]) . :where [?e :user/email "cat@x"]]')
    assert got == [({"db/id": ids["cat"], "user/name": "Cat"},)]
    got = q(con, "[:find [(pull ?e [:user/name]) ...] :where [?e :user/email _]]")
    assert sorted(r[0]["user/name"] for r in got) == ["Ann", "Bob", "Cat"]
    got = q(con, '[:find [?t (pull ?i [:issue/priority])] :where [?i :issue/title ?t] [(= ?t "crash")]]')
    assert got == [("crash", {"issue/priority": 3})]
    # nothing found: no row
    assert q(con, '[:find (pull ?e [:user/name]) . :where [?e :user/email "nobody"]]') == []


def test_keys_and_aggregates(db):
    con, ids = db
    query = "[:find (pull ?u [:user/name]) (count ?i) :keys who n :where [?i :issue/assignee ?u]]"
    assert q(con, query) == [({"user/name": "Bob"}, 2)]
    assert columns(con, query) == [("who", 'STRUCT("user/name" VARCHAR)'), ("n", "BIGINT")]
    # two pulls of the same entity, and a pull beside its own variable
    got = q(con, "[:find ?u (pull ?u [:user/name]) (pull ?u [:user/email]) :where [?u :user/manager ?m]]")
    assert sorted(got) == sorted([(ids["bob"], {"user/name": "Bob"}, {"user/email": "bob@x"}),
                                  (ids["cat"], {"user/name": "Cat"}, {"user/email": "cat@x"})])
    assert [c[0] for c in columns(con, "[:find (pull ?u [:user/name]) (pull ?u [:user/email]) "
                                       ":where [?u :user/manager _]]")] == ["pull_u", "pull_u_2"]


def test_set_semantics(db):
    con, ids = db
    # ?u is assigned twice: the relation of (pull ?u) alone is a set, one row
    assert q(con, "[:find (pull ?u [:user/name]) :where [_ :issue/assignee ?u]]") == [({"user/name": "Bob"},)]
    # with :with, a bag
    assert len(q(con, "[:find (pull ?u [:user/name]) :with ?i :where [?i :issue/assignee ?u]]")) == 2


def test_nested_reverse_wildcard_components(db):
    con, ids = db
    got = q(con, '[:find (pull ?e [* {:issue/assignee [:user/name]}]) . :where [?e :issue/title "crash"]]')[0][0]
    assert got["db/id"] == ids["i1"] and got["issue/assignee"] == {"user/name": "Bob"}
    # typed from the attributes the answer's entities hold; components pulled whole, as JSON
    assert list(got) == ["db/id", "issue/title", "issue/priority", "issue/assignee", "issue/label", "issue/comment"]
    assert [json.loads(c)["comment/text"] for c in got["issue/comment"]] == ["first", "second"]
    # many entities in the answer: the union of what they hold
    got = q(con, '[:find ?t (pull ?e [*]) :where [?e :issue/title ?t]]')
    assert {r[0]: r[1]["issue/priority"] for r in got} == {"crash": 3, "typo": None}
    assert all(list(r[1]) == ["db/id", "issue/title", "issue/priority", "issue/assignee", "issue/label",
                              "issue/comment"] for r in got)
    got = q(con, '[:find (pull ?e [*]) . :where [?e :label/name "ui"]]')[0][0]
    assert got == {"db/id": ids["l2"], "label/name": "ui"}
    # the same typing in d/with's answer, over the speculative database
    got = con.execute("SELECT * FROM mentat_with('[{:db/id \"n\" :label/name \"new\"}]', "
                      "'[:find (pull ?e [*]) . :where [?e :label/name \"new\"]]')").fetchall()[0][0]
    assert list(got) == ["db/id", "label/name"] and got["label/name"] == "new"
    got = q(con, '[:find (pull ?u [:user/name :issue/_assignee]) . :where [?u :user/email "bob@x"]]')[0][0]
    assert got == {"user/name": "Bob", "issue/_assignee": [{"db/id": ids["i1"]}, {"db/id": ids["i2"]}]}
    got = q(con, '[:find (pull ?e [:issue/title [:issue/priority :default 0] (limit :issue/label 1)]) . '
                 ':where [?e :issue/title "typo"]]')[0][0]
    assert got == {"issue/title": "typo", "issue/priority": 0, "issue/label": None}


def test_pattern_input(db):
    """Datomic's pattern input: a pull pattern given in the inputs, named by a plain symbol in :in."""
    con, ids = db
    query = "[:find (pull ?e pattern) . :in $ pattern ?email :where [?e :user/email ?email]]"
    assert q(con, query, '[[:user/name] "bob@x"]') == [({"user/name": "Bob"},)]
    assert q(con, query, '[[:db/id {:user/manager [:user/name]}] "cat@x"]') == [
        ({"db/id": ids["cat"], "user/manager": {"user/name": "Bob"}},)]
    with pytest.raises(duckdb.Error, match="not an :in binding"):
        q(con, "[:find (pull ?e pat) . :in $ ?email :where [?e :user/email ?email]]", '["bob@x"]')
    with pytest.raises(duckdb.Error, match="pull pattern"):
        q(con, query, '[:user/name "bob@x"]')


def test_inputs_and_arrow(db):
    con, ids = db
    got = q(con, "[:find (pull ?e [:user/name]) :in $ [?e ...]]", f"[[{ids['ann']} {ids['cat']}]]")
    assert sorted(r[0]["user/name"] for r in got) == ["Ann", "Cat"]
    # an ident names the entity it is the :db/ident of, as everywhere an entity is expected
    got = q(con, "[:find (pull ?e [:db/ident :db/cardinality]) . :in $ ?e]", "[:user/name]")
    one = q(con, "[:find ?c . :where [?c :db/ident :db.cardinality/one]]")[0][0]
    assert got == [({"db/ident": ":user/name", "db/cardinality": {"db/id": one}},)]
    with pytest.raises(duckdb.Error, match=r"unknown ident :nope/x in `\(pull \?e \[:db/ident\]\)`"):
        q(con, "[:find (pull ?e [:db/ident]) . :in $ ?e]", "[:nope/x]")
    t = con.sql("SELECT * FROM mentat_q('[:find ?t (pull ?i [:issue/title {:issue/label [:label/name]}]) "
                ":where [?i :issue/title ?t]]')").to_arrow_table()
    ty = t.schema.field("pull_i").type
    assert pa.types.is_struct(ty) and pa.types.is_list(ty.field("issue/label").type)


def test_errors(db):
    con, ids = db
    with pytest.raises(duckdb.Error, match="pull needs an entity"):
        q(con, "[:find (pull ?t [:user/name]) :where [_ :issue/title ?t]]")
    with pytest.raises(duckdb.Error, match="unknown attribute"):
        q(con, "[:find (pull ?e [:nope/x]) :where [?e :issue/title _]]")
    with pytest.raises(duckdb.Error, match="history"):
        q(con, "[:find (pull ?e [*]) :where [?e :issue/title _]]", history=True)
    with pytest.raises(duckdb.Error, match="pull"):
        q(con, "[:find (pull ?e) :where [?e :issue/title _]]")


def test_time_travel(con):
    transact(con, """[{:db/ident :p/name :db/valueType :db.type/string :db/cardinality :db.cardinality/one}
                      {:db/ident :p/tag :db/valueType :db.type/keyword :db/cardinality :db.cardinality/many}]""")
    t1 = transact(con, '[{:db/id "a" :p/name "ann" :p/tag [:x :y]}]')
    a = t1["tempids"]["a"]
    t2 = transact(con, f'[[:db/add {a} :p/name "anna"] [:db/retract {a} :p/tag :y]]')
    query = "[:find (pull ?e [*]) . :in $ ?e]"
    now = q(con, query, f"[{a}]")[0][0]
    assert (now["p/name"], now["p/tag"]) == ("anna", [":x"])
    then = q(con, query, f"[{a}]", as_of=t1["tx"])[0][0]
    assert (then["db/id"], then["p/name"], then["p/tag"]) == (a, "ann", [":x", ":y"])
    # since t1: only what t2 asserted (the name), the tag :x is from t1
    after = q(con, "[:find (pull ?e [:p/name :p/tag]) . :in $ ?e]", f"[{a}]", since=t1["tx"])[0][0]
    assert after == {"p/name": "anna", "p/tag": None}
    # the where clause and the pull see the same database value
    assert q(con, '[:find (pull ?e [:p/name]) :where [?e :p/name "ann"]]', as_of=t1["tx"]) == [({"p/name": "ann"},)]
    assert q(con, '[:find (pull ?e [:p/name]) :where [?e :p/name "ann"]]', as_of=t2["tx"]) == []
