"""mentat_q, mentat_sql and mentat_explain through the built extension, with exact answers.

Every expected value below is written by hand from the data in DATA and Datomic's documented query semantics
(a :find relation is a set; aggregates see the set of find + :with tuples; `not`/`or` binding rules; get-else;
inputs), or computed by plain Python over the same literals. None is copied from mentat's output.

The people and items (entity names are the tempids):

    person  age  score  active  born                  nick         friend       status          role   manager
    alice   30   1.5    true    1990-01-01 00:00:00Z  al, ally     bob, carol   :status/active  admin
    bob     25   2.5    false   1995-06-15 12:00:00Z  bobby        alice        :status/away    user   alice
    carol   30   3.0    true    1985-03-03 03:03:00Z                            :status/active  user   alice
    dave    40                  2000-12-31 23:59:59Z                                                   bob
    eve     25   0.5    false

    item       price  owner  tags
    widget     10     alice  :tag/a :tag/b
    gadget     10     bob    :tag/a
    doohickey  20     alice  :tag/c
    gizmo      20     alice  :tag/b
    thing      5      carol
"""
import datetime as dt
import os
import uuid
import warnings

import duckdb
import pyarrow.compute as pc
import pytest

from conftest import cli, connect, mentat_call, q, transact

UTC = dt.timezone.utc

SCHEMA = """[
 {:db/ident :person/name :db/valueType :db.type/string :db/cardinality :db.cardinality/one
  :db/unique :db.unique/identity}
 {:db/ident :person/age :db/valueType :db.type/long :db/cardinality :db.cardinality/one}
 {:db/ident :person/score :db/valueType :db.type/double :db/cardinality :db.cardinality/one}
 {:db/ident :person/active :db/valueType :db.type/boolean :db/cardinality :db.cardinality/one}
 {:db/ident :person/born :db/valueType :db.type/instant :db/cardinality :db.cardinality/one}
 {:db/ident :person/uid :db/valueType :db.type/uuid :db/cardinality :db.cardinality/one}
 {:db/ident :person/nick :db/valueType :db.type/string :db/cardinality :db.cardinality/many}
 {:db/ident :person/friend :db/valueType :db.type/ref :db/cardinality :db.cardinality/many}
 {:db/ident :person/status :db/valueType :db.type/keyword :db/cardinality :db.cardinality/one}
 {:db/ident :person/role :db/valueType :db.type/ref :db/cardinality :db.cardinality/one}
 {:db/ident :person/manager :db/valueType :db.type/ref :db/cardinality :db.cardinality/one}
 {:db/ident :person/ghost :db/valueType :db.type/ref :db/cardinality :db.cardinality/many}
 {:db/ident :item/name :db/valueType :db.type/string :db/cardinality :db.cardinality/one :db/unique :db.unique/identity}
 {:db/ident :item/price :db/valueType :db.type/long :db/cardinality :db.cardinality/one}
 {:db/ident :item/owner :db/valueType :db.type/ref :db/cardinality :db.cardinality/one}
 {:db/ident :item/tag :db/valueType :db.type/keyword :db/cardinality :db.cardinality/many}
 {:db/ident :big/n :db/valueType :db.type/long :db/cardinality :db.cardinality/many}
 {:db/ident :role/admin}
 {:db/ident :role/user}]"""

ALICE_UID = "11111111-2222-3333-4444-555555555555"
DATA = f"""[
 {{:db/id "alice" :person/name "alice" :person/age 30 :person/score 1.5 :person/active true
   :person/born #inst "1990-01-01T00:00:00.000-00:00" :person/uid #uuid "{ALICE_UID}"
   :person/nick ["al" "ally"] :person/friend ["bob" "carol"] :person/status :status/active :person/role :role/admin}}
 {{:db/id "bob" :person/name "bob" :person/age 25 :person/score 2.5 :person/active false
   :person/born #inst "1995-06-15T12:00:00.000-00:00" :person/nick ["bobby"] :person/friend ["alice"]
   :person/status :status/away :person/role :role/user :person/manager "alice"}}
 {{:db/id "carol" :person/name "carol" :person/age 30 :person/score 3.0 :person/active true
   :person/born #inst "1985-03-03T03:03:00.000-00:00" :person/status :status/active :person/role :role/user
   :person/manager "alice"}}
 {{:db/id "dave" :person/name "dave" :person/age 40 :person/born #inst "2000-12-31T23:59:59.000-00:00"
   :person/manager "bob"}}
 {{:db/id "eve" :person/name "eve" :person/age 25 :person/score 0.5 :person/active false}}
 {{:db/id "widget" :item/name "widget" :item/price 10 :item/owner "alice" :item/tag [:tag/a :tag/b]}}
 {{:db/id "gadget" :item/name "gadget" :item/price 10 :item/owner "bob" :item/tag [:tag/a]}}
 {{:db/id "doohickey" :item/name "doohickey" :item/price 20 :item/owner "alice" :item/tag [:tag/c]}}
 {{:db/id "gizmo" :item/name "gizmo" :item/price 20 :item/owner "alice" :item/tag [:tag/b]}}
 {{:db/id "thing" :item/name "thing" :item/price 5 :item/owner "carol"}}
]"""

PEOPLE = ["alice", "bob", "carol", "dave", "eve"]
AGE = {"alice": 30, "bob": 25, "carol": 30, "dave": 40, "eve": 25}
ITEMS = {  # name: (price, owner, tags)
    "widget": (10, "alice", [":tag/a", ":tag/b"]),
    "gadget": (10, "bob", [":tag/a"]),
    "doohickey": (20, "alice", [":tag/c"]),
    "gizmo": (20, "alice", [":tag/b"]),
    "thing": (5, "carol", []),
}


def columns(con, query, inputs=None):
    """(name, DuckDB type) of each output column."""
    sql, params = mentat_call("DESCRIBE SELECT * FROM mentat_q", query, inputs)
    return [(r[0], r[1]) for r in con.execute(sql, params).fetchall()]


def error(con, query, inputs=None):
    with pytest.raises(duckdb.Error) as e:
        q(con, query, inputs)
    return str(e.value)


class Store:
    """A connection plus what a test needs to know about its data (`ids`: tempid -> entid, `b`: an entid)."""

    def __init__(self, con, **facts):
        self.con = con
        self.__dict__.update(facts)

    def execute(self, *args):
        return self.con.execute(*args)


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    con = connect(tmp_path_factory.mktemp("query") / "store.duckdb")
    transact(con, SCHEMA)
    ids = transact(con, DATA)["tempids"]
    yield Store(con, ids=ids)
    con.close()


def test_tempids_are_entities(db):
    assert sorted(db.ids) == sorted(PEOPLE + list(ITEMS))


# ---------------------------------------------------------------------------------------------------- aggregates

def test_sum_without_and_with(db):
    # Without :with the prices form a set {10, 20, 5}; with ?i every item counts.
    assert q(db, "[:find (sum ?p) . :where [?i :item/price ?p]]") == [(35,)]
    assert q(db, "[:find (sum ?p) . :with ?i :where [?i :item/price ?p]]") == [(sum(v[0] for v in ITEMS.values()),)]
    assert sum(v[0] for v in ITEMS.values()) == 65


def test_grouped_sum_with_a_fanning_join(db):
    # Joining the tags multiplies widget (two tags); the set of (owner, price, item) tuples does not.
    base = "[?i :item/owner ?o] [?o :person/name ?on] [?i :item/price ?p] [?i :item/tag _]]"
    assert sorted(q(db, "[:find ?on (sum ?p) :where " + base)) == [("alice", 30), ("bob", 10)]
    assert sorted(q(db, "[:find ?on (sum ?p) :with ?i :where " + base)) == [("alice", 50), ("bob", 10)]


def test_count_with_under_set_semantics(db):
    assert q(db, "[:find (count ?p) . :where [?i :item/price ?p]]") == [(3,)]
    assert q(db, "[:find (count ?p) . :with ?i :where [?i :item/price ?p]]") == [(5,)]
    assert q(db, "[:find (count-distinct ?p) . :with ?i :where [?i :item/price ?p]]") == [(3,)]
    # (owner, item) pairs: widget appears once although it has two tags
    base = "[?i :item/owner ?o] [?o :person/name ?on] [?i :item/tag ?t]]"
    assert sorted(q(db, "[:find ?on (count ?i) :where " + base)) == [("alice", 3), ("bob", 1)]
    # with ?t the tuples are (owner, item, tag): widget-a widget-b doohickey-c gizmo-b
    assert sorted(q(db, "[:find ?on (count ?i) :with ?t :where " + base)) == [("alice", 4), ("bob", 1)]
    # the distinct tags per owner
    assert sorted(q(db, "[:find ?on (count ?t) :where " + base)) == [("alice", 3), ("bob", 1)]
    # a cardinality-many attribute: every (person, nick) datom
    assert q(db, "[:find (count ?n) . :with ?p :where [?p :person/nick ?n]]") == [(3,)]
    assert q(db, "[:find (count ?p) . :where [?p :person/nick ?n]]") == [(2,)]


def test_other_aggregates(db):
    prices = [v[0] for v in ITEMS.values()]
    got = q(db, "[:find (avg ?p) (median ?p) (min ?p) (max ?p) :with ?i :where [?i :item/price ?p]]")
    assert got == [(sum(prices) / len(prices), 10.0, 5, 20)]
    got = q(db, "[:find (avg ?p) (variance ?p) :where [?i :item/price ?p]]")
    s = [5, 10, 20]
    mean = sum(s) / 3
    assert got[0][0] == pytest.approx(mean)
    assert got[0][1] == pytest.approx(sum((x - mean) ** 2 for x in s) / 3)
    assert q(db, "[:find (min 2 ?p) . :where [?i :item/price ?p]]") == [([5, 10],)]
    assert q(db, "[:find (max 2 ?p) . :where [?i :item/price ?p]]") == [([20, 10],)]
    assert sorted(q(db, "[:find (distinct ?p) . :where [?i :item/price ?p]]")[0][0]) == [5, 10, 20]
    got = q(db, "[:find ?on (distinct ?t) :where [?i :item/owner ?o] [?o :person/name ?on] [?i :item/tag ?t]]")
    assert sorted((on, sorted(ts)) for on, ts in got) == [("alice", [":tag/a", ":tag/b", ":tag/c"]),
                                                           ("bob", [":tag/a"])]
    assert columns(db, "[:find (distinct ?t) :where [_ :item/tag ?t]]") == [("distinct_t", "VARCHAR[]")]
    # count-distinct, median and stddev over a bag
    got = q(db, "[:find (count-distinct ?p) (median ?p) (stddev ?p) :with ?i :where [?i :item/price ?p]]")
    mean = sum(prices) / len(prices)
    assert got[0][:2] == (3, 10.0)
    assert got[0][2] == pytest.approx((sum((x - mean) ** 2 for x in prices) / len(prices)) ** 0.5)


def test_clojure_number_and_string_functions(db):
    """clojure.core's inc, dec, quot, rem, mod, max, min, even?, odd? and clojure.string's upper-case, lower-case,
    trim, blank?: values as Clojure gives them (quot toward zero, rem with the dividend's sign, mod with the
    divisor's); a zero divisor is an error naming the form, as Clojure throws."""
    pairs = [(-7, 2), (7, -2), (7, 2), (-7, -2), (6, 3)]
    rel = "[[" + " ".join(f"[{a} {b}]" for a, b in pairs) + "]]"
    got = q(db, "[:find ?a ?b ?q ?r ?m :in $ [[?a ?b]] :where [(quot ?a ?b) ?q] [(rem ?a ?b) ?r] [(mod ?a ?b) ?m]]",
            rel)
    # Clojure: (quot -7 2) -3, (rem -7 2) -1, (mod -7 2) 1; (quot 7 -2) -3, (rem 7 -2) 1, (mod 7 -2) -1; ...
    assert sorted(got) == sorted([(-7, 2, -3, -1, 1), (7, -2, -3, 1, -1), (7, 2, 3, 1, 1), (-7, -2, 3, -1, -1),
                                  (6, 3, 2, 0, 0)])
    got = q(db, "[:find ?n ?i ?d ?hi ?lo :where [?x :item/name ?n] [?x :item/price ?p] [(inc ?p) ?i] [(dec ?p) ?d] "
                "[(max ?p 10 7) ?hi] [(min ?p 7.5) ?lo]]")
    assert sorted(got) == sorted((n, p + 1, p - 1, max(p, 10), min(p, 7.5)) for n, (p, _, _) in ITEMS.items())
    assert columns(db, "[:find ?i ?lo :where [_ :item/price ?p] [(inc ?p) ?i] [(min ?p 7.5) ?lo]]") == [
        ("i", "BIGINT"), ("lo", "DOUBLE")]
    got = q(db, "[:find ?n :where [?x :item/price ?p] [(even? ?p)] [?x :item/name ?n]]")
    assert sorted(got) == sorted((n,) for n, (p, _, _) in ITEMS.items() if p % 2 == 0)
    got = q(db, "[:find ?n :where [?x :item/price ?p] [(odd? ?p)] [?x :item/name ?n]]")
    assert sorted(got) == sorted((n,) for n, (p, _, _) in ITEMS.items() if p % 2 == 1)
    got = q(db, "[:find ?u ?l ?t :in $ [?s ...] :where [(clojure.string/upper-case ?s) ?u] "
                "[(clojure.string/lower-case ?s) ?l] [(clojure.string/trim ?s) ?t]]", '[["  Ünï X " "ab"]]')
    assert sorted(got) == sorted([("  ÜNÏ X ", "  ünï x ", "Ünï X"), ("AB", "ab", "ab")])
    got = q(db, "[:find ?s :in $ [?s ...] :where [(clojure.string/blank? ?s)]]", '[["" "  " "x" " y "]]')
    assert sorted(got) == [("",), ("  ",)]
    assert "quot takes longs, got a double" in error(db, "[:find ?q :in $ ?a :where [(quot ?a 2) ?q]]", "[1.5]")
    msg = error(db, "[:find ?m :in $ [[?a ?b]] :where [(mod ?a ?b) ?m]]", "[[[1 2] [5 0]]]")
    assert "[(mod ?a ?b) ?m] divides by zero" in msg and "CASE" not in msg


def test_contains_of_a_set_literal(db):
    """clojure.core's `contains?` of a set literal, the Datomic idiom for "one of these values": membership of
    strings, longs, keywords and refs (an ident or a lookup ref names the entity, as in a pattern); an empty set
    holds nothing; under `not` the others. Of a vector Clojure tests indexes, so that is refused naming the set to
    write; a value of another type is refused as `=` refuses it."""
    got = q(db, '[:find ?n :where [?p :person/name ?n] [(contains? #{"alice" "eve" "zed"} ?n)]]')
    assert sorted(got) == [("alice",), ("eve",)]
    got = q(db, '[:find ?n :where [?p :person/name ?n] (not [(contains? #{"alice" "eve"} ?n)])]')
    assert sorted(got) == [("bob",), ("carol",), ("dave",)]
    got = q(db, "[:find ?n :where [?i :item/price ?p] [?i :item/name ?n] [(contains? #{5 20} ?p)]]")
    assert sorted(got) == sorted((n,) for n, (p, _, _) in ITEMS.items() if p in (5, 20))
    got = q(db, "[:find ?n :where [?i :item/tag ?t] [?i :item/name ?n] [(contains? #{:tag/c :tag/x} ?t)]]")
    assert got == [("doohickey",)]
    got = q(db, '[:find ?n :where [?p :person/role ?r] [?p :person/name ?n] [(contains? #{:role/admin} ?r)]]')
    assert got == [("alice",)]
    got = q(db, '[:find ?n :where [?p :person/manager ?m] [?p :person/name ?n] '
                '[(contains? #{[:person/name "bob"]} ?m)]]')
    assert got == [("dave",)]
    assert q(db, "[:find ?n :where [?p :person/name ?n] [(contains? #{} ?n)]]") == []
    assert "tests its indexes in Clojure" in error(db, "[:find ?n :where [?p :person/name ?n] [(contains? [0 1] ?n)]]")
    assert "cannot compare a string with a long" in error(
        db, "[:find ?n :where [?p :person/name ?n] [(contains? #{1 2} ?n)]]")


def test_an_unbound_attributes_value_meets_values_of_its_own_class_only(con):
    """`[?e ?a ?v]` over attributes of several types holds `?v` as text; a string "30" and a long 30 are one text
    there, but Datomic's equality never makes a string equal a long or a keyword. Joined with a typed attribute,
    given as an input (scalar or collection) or compared in a predicate, such a value matches values of its
    attribute's class only, whichever clause comes first."""
    transact(con, "[{:db/ident :x/s :db/valueType :db.type/string :db/cardinality :db.cardinality/one}"
                  " {:db/ident :x/l :db/valueType :db.type/long :db/cardinality :db.cardinality/one}"
                  " {:db/ident :x/k :db/valueType :db.type/keyword :db/cardinality :db.cardinality/one}]")
    ids = transact(con, '[{:db/id "s" :x/s "30"} {:db/id "l" :x/l 30} {:db/id "k" :x/k :a/b}'
                        ' {:db/id "s2" :x/s ":a/b"}]')["tempids"]
    attr = {i: e for i, e in q(con, "[:find ?i ?a :in $ [?i ...] :where [?a :db/ident ?i]]", "[[:x/s :x/l :x/k]]")}
    s, l, k, s2 = ids["s"], ids["l"], ids["k"], ids["s2"]
    strings = sorted([(s, attr[":x/s"]), (s2, attr[":x/s"])])
    assert sorted(q(con, "[:find ?e ?a :where [?x :x/s ?v] [?e ?a ?v]]")) == strings
    assert sorted(q(con, "[:find ?e ?a :where [?e ?a ?v] [?x :x/s ?v]]")) == strings
    assert q(con, "[:find ?e :where [?e ?a ?v] [?x :x/l ?v]]") == [(l,)]
    assert q(con, "[:find ?e :in $ ?v :where [?e ?a ?v]]", '["30"]') == [(s,)]
    assert q(con, "[:find ?e :in $ ?v :where [?e ?a ?v]]", "[30]") == [(l,)]
    assert q(con, "[:find ?e :in $ ?v :where [?e ?a ?v]]", "[:a/b]") == [(k,)]
    assert sorted(q(con, "[:find ?e :in $ [?v ...] :where [?e ?a ?v]]", '[["30" :a/b]]')) == sorted([(s,), (k,)])
    assert q(con, '[:find ?e :where [?e ?a ?v] [(= ?v "30")]]') == [(s,)]
    assert q(con, '[:find ?e :where [?e ?a ?v] [(= ?v ":a/b")]]') == [(s2,)]
    assert q(con, "[:find ?e :where [?e ?a ?v] [(> ?e 65535)] [(< ?v 31)]]") == [(l,)]
    got = q(con, '[:find ?e :where [?e ?a ?v] [(> ?e 65535)] [(< ?e 100000)] [(not= ?v "30")]]')
    assert sorted(got) == sorted([(l,), (k,), (s2,)])


def test_exact_numbers_and_floats_in_functions_and_predicates(con):
    """Clojure's numeric contagion in `+ - *`: a bigdec makes a bigdec (exact: 1.25M + 1 is 2.25M), a bigint a
    bigint (12345678901234567890N + 1 past a long's range), a double or a float a double; `/` a double. A float
    attribute's value compares with a query's 0.1 as the stored float 0.1, in a predicate as in a pattern; `float?`
    and `number?` hold for floats."""
    from decimal import Decimal
    transact(con, "[{:db/ident :n/f :db/valueType :db.type/float :db/cardinality :db.cardinality/one}"
                  " {:db/ident :n/d :db/valueType :db.type/bigdec :db/cardinality :db.cardinality/one}"
                  " {:db/ident :n/i :db/valueType :db.type/bigint :db/cardinality :db.cardinality/one}]")
    ids = transact(con, '[{:db/id "a" :n/f 0.1 :n/d 1.25M :n/i 12345678901234567890N} {:db/id "b" :n/f 2.5}]')
    a, b = ids["tempids"]["a"], ids["tempids"]["b"]
    assert q(con, "[:find ?x . :where [(+ 1.25M 1) ?x]]") == [(Decimal("2.25"),)]
    assert q(con, "[:find ?x . :where [?e :n/d ?d] [(* ?d 2) ?x]]") == [(Decimal("2.5"),)]
    assert q(con, "[:find ?x . :where [(+ 1.5M 1.25M) ?x]]") == [(Decimal("2.75"),)]
    assert q(con, "[:find ?x . :where [(* 12.5M 10.0M) ?x]]") == [(Decimal("125"),)]
    assert q(con, "[:find ?x . :where [(- 1.5M) ?x]]") == [(Decimal("-1.5"),)]
    assert q(con, "[:find ?x . :where [?e :n/i ?i] [(+ ?i 1) ?x]]") == [(12345678901234567891,)]
    assert q(con, "[:find ?x . :where [?e :n/d ?d] [(+ ?d 0.5) ?x]]") == [(1.75,)]
    assert q(con, "[:find ?x . :where [?e :n/f ?f] [(> ?f 1)] [(+ ?f 1) ?x]]") == [(3.5,)]
    assert q(con, "[:find ?e :where [?e :n/f ?f] [(= ?f 0.1)]]") == [(a,)]
    assert q(con, "[:find ?e :where [?e :n/f 0.1]]") == [(a,)]
    assert q(con, "[:find ?e :where [?e :n/f ?f] [(> ?f 0.1)]]") == [(b,)]
    assert sorted(q(con, "[:find ?e :where [?e :n/f ?f] [(float? ?f)] [(number? ?f)]]")) == sorted([(a,), (b,)])


def test_names_and_forms_a_user_writes(db):
    """Variables that differ only in case are two columns (DuckDB's names are case-insensitive, so the second is
    renamed); `:keys a/b` keeps the namespace, as Datomic's key `:a/b`; `(str)` is "" as in Clojure; a call
    written without its parentheses is named as such."""
    got = db.execute(*mentat_call("SELECT * FROM mentat_q", '[:find ?N ?n :where [?p :person/name ?n] '
                                  '[(str ?n "!") ?N] [(= ?n "bob")]]'))
    assert [d[0] for d in got.description] == ["N", "n_2"] and got.fetchall() == [("bob!", "bob")]
    got = db.execute(*mentat_call("SELECT * FROM mentat_q", '[:find ?n ?a :keys person/name age '
                                  ':where [?p :person/name ?n] [?p :person/age ?a] [(= ?n "bob")]]'))
    assert [d[0] for d in got.description] == ["person/name", "age"] and got.fetchall() == [("bob", AGE["bob"])]
    assert q(db, "[:find ?x . :where [(str) ?x]]") == [("",)]
    msg = error(db, '[:find ?n :where [?p :person/name ?n] [= ?n "bob"]]')
    assert "a predicate or function call goes in parentheses, as in [(= ...)]" in msg


def test_an_ignored_input(db):
    """`_` in `:in` takes an input and binds nothing (DataScript's BindIgnore), before or after other bindings and
    beside a rule set; the input still counts, so leaving it out is the wrong number of inputs."""
    got = q(db, "[:find ?n :in $ _ ?a :where [?p :person/age ?a] [?p :person/name ?n]]", '["unused" 25]')
    assert sorted(got) == [("bob",), ("eve",)]
    got = q(db, "[:find ?n :in $ ?a _ :where [?p :person/age ?a] [?p :person/name ?n]]", "[40 [1 2 3]]")
    assert got == [("dave",)]
    got = q(db, "[:find ?n :in $ _ % :where (old ?n)]", "[0 [[(old ?n) [?p :person/age ?a] [(> ?a 35)] "
                                                        "[?p :person/name ?n]]]]")
    assert got == [("dave",)]
    assert "wrong number of inputs" in error(db, "[:find ?n :in $ _ :where [?p :person/name ?n]]", "[]")


def test_an_input_of_longs_and_doubles_is_numbers(db):
    """A collection or relation input holding longs and doubles in one position is doubles, as Clojure compares
    1 and 2.5 as numbers; a value of another kind is refused by name."""
    assert q(db, "[:find (max ?v) (sum ?v) (count ?v) :in $ [?v ...]]", "[[1 2.5 3]]") == [(3.0, 6.5, 3)]
    assert sorted(q(db, "[:find ?v :in $ [?v ...] :where [(> ?v 1.5)]]", "[[1 2.5 3]]")) == [(2.5,), (3.0,)]
    msg = error(db, "[:find ?a ?b :in $ [[?a ?b]]]", '[[[1 "x"] [2 3]]]')
    assert "bad input `3`: given for ?b, it is a long, where the first of its values made ?b a string" in msg


def test_random_aggregates(db):
    """Datomic's `(sample n ?x)`: up to n distinct values chosen at random; `(rand n ?x)`: n values drawn at random
    from the values the group holds (under `:with`, a bag), repeats possible; DataScript's `(rand ?x)`: one value.
    Each call draws anew."""
    prices = [v[0] for v in ITEMS.values()]  # the bag under :with ?i: 10 10 20 20 5
    samples = [q(db, "[:find (sample 2 ?p) . :with ?i :where [?i :item/price ?p]]")[0][0] for _ in range(60)]
    assert all(len(s) == 2 and len(set(s)) == 2 and set(s) <= set(prices) for s in samples)
    # every pair of the three distinct prices comes up (each has chance 1/3 per call)
    assert {frozenset(s) for s in samples} == {frozenset(p) for p in ([5, 10], [5, 20], [10, 20])}
    assert sorted(q(db, "[:find (sample 9 ?p) . :with ?i :where [?i :item/price ?p]]")[0][0]) == [5, 10, 20]
    assert q(db, "[:find (sample 0 ?p) . :where [?i :item/price ?p]]") == [([],)]
    # DataScript's (min 0 ?x): none of them
    assert q(db, "[:find (min 0 ?p) (max 0 ?p) :where [?i :item/price ?p]]") == [([], [])]
    draws = [q(db, "[:find (rand 4 ?p) . :with ?i :where [?i :item/price ?p]]")[0][0] for _ in range(60)]
    # with replacement: 4 values from the 3 distinct prices (a draw without replacement would stop at 3)
    assert all(len(d) == 4 and set(d) <= set(prices) for d in draws)
    flat = [x for d in draws for x in d]
    # 240 draws from the bag: 5 has chance 1/5, 10 and 20 2/5 each (binomial sd ~6 and ~7.6 draws)
    assert 24 <= flat.count(5) <= 72 and 60 <= flat.count(10) <= 132 and 60 <= flat.count(20) <= 132
    # per group, from that group's values; one value keeps the attribute's type
    got = q(db, "[:find ?on (rand ?p) :where [?i :item/owner ?o] [?o :person/name ?on] [?i :item/price ?p]]")
    assert {on for on, _ in got} == {"alice", "bob", "carol"}
    assert all(p in {"alice": {10, 20}, "bob": {10}, "carol": {5}}[on] for on, p in got)
    assert columns(db, "[:find (rand ?p) (rand 2 ?p) :where [_ :item/price ?p]]") == [
        ("rand_p", "BIGINT"), ("rand_p_2", "BIGINT[]")]


def test_min_max_over_instants_and_strings(db):
    got = q(db, "[:find (min ?b) (max ?b) :where [_ :person/born ?b]]")
    assert got == [(dt.datetime(1985, 3, 3, 3, 3, tzinfo=UTC), dt.datetime(2000, 12, 31, 23, 59, 59, tzinfo=UTC))]
    assert columns(db, "[:find (min ?b) (max ?b) :where [_ :person/born ?b]]") == [
        ("min_b", "TIMESTAMP WITH TIME ZONE"), ("max_b", "TIMESTAMP WITH TIME ZONE")]
    assert q(db, "[:find (min ?n) (max ?n) :where [_ :person/name ?n]]") == [("alice", "eve")]
    assert q(db, "[:find (min ?n) (max ?n) :where [_ :person/nick ?n]]") == [("al", "bobby")]
    # grouped: the earliest birth per role
    got = sorted(q(db, "[:find ?r (min ?b) :where [?p :person/role ?role] [?role :db/ident ?r] [?p :person/born ?b]]"))
    assert got == [(":role/admin", dt.datetime(1990, 1, 1, tzinfo=UTC)),
                   (":role/user", dt.datetime(1985, 3, 3, 3, 3, tzinfo=UTC))]


def test_aggregate_over_nothing_is_empty(db):
    # Datomic returns nothing (not a row of 0) for an ungrouped aggregate over no tuples
    assert q(db, "[:find (count ?p) . :where [?p :person/age 1000]]") == []
    assert q(db, "[:find (sum ?a) :where [?p :person/age ?a] [(> ?a 1000)]]") == []
    assert q(db, "[:find ?n (count ?p) :where [?p :person/name ?n] [?p :person/age 1000]]") == []


# ---------------------------------------------------------------------------------------------------- or / not

def test_or_join_with_an_in_variable(db):
    query = ("[:find ?n :in $ ?min :where [?p :person/name ?n] "
             "(or-join [?p ?min] (and [?p :person/age ?a] [(>= ?a ?min)]) [?p :person/active true])]")

    def want(m):
        active = {"alice", "carol"}
        return sorted((n,) for n in PEOPLE if AGE[n] >= m or n in active)

    for m in (35, 26, 20, 100):
        assert sorted(q(db, query, f"[{m}]")) == want(m), m
    required = query.replace("(or-join [?p ?min]", "(or-join [[?min] ?p]")
    assert sorted(q(db, required, "[35]")) == want(35)


def test_or_binding_a_new_variable(db):
    # or where each branch binds ?x: the union of names and nicks of alice
    query = ("[:find ?x :where [?p :person/name \"alice\"] (or [?p :person/name ?x] [?p :person/nick ?x])]")
    assert sorted(q(db, query)) == [("al",), ("alice",), ("ally",)]


def test_or_of_constants(db):
    query = "[:find ?n :where [?p :person/name ?n] (or [?p :person/status :status/away] [?p :person/age 40])]"
    assert sorted(q(db, query)) == [("bob",), ("dave",)]


def test_or_of_one_attributes_values(db):
    """`(or [?e :a c1] [?e :a c2] ...)` reads the attribute once, filtered by `v IN (c1, c2, ...)`
    (planner/src/algebrize/logic.rs, `or_values`); the answers are the union's: an item tagged both :tag/a and
    :tag/b counts once, a value that cannot be the attribute's drops out as its branch would, and the idents of a
    ref attribute are its entities."""
    tagged = sorted(n for n, (_, _, tags) in ITEMS.items() if ":tag/a" in tags or ":tag/b" in tags)
    assert tagged == ["gadget", "gizmo", "widget"]
    both = "(or [?i :item/tag :tag/a] [?i :item/tag :tag/b])"
    assert sorted(n for (n,) in q(db, f"[:find ?n :where {both} [?i :item/name ?n]]")) == tagged
    assert q(db, f"[:find (count ?i) . :where {both}]") == [(3,)]
    assert q(db, f"[:find (count ?n) :with ?i :where {both} [?i :item/price ?n]]") == [(3,)]
    assert sorted(q(db, "[:find ?n :where (or [?i :item/tag :tag/c] [?i :item/tag 5]) [?i :item/name ?n]]")) == \
        [("doohickey",)]
    users = "[:find ?n :where (or [?p :person/role :role/user] [?p :person/role :role/nobody]) [?p :person/name ?n]]"
    assert sorted(q(db, users)) == [("bob",), ("carol",)]
    assert q(db, "[:find ?n :where (or [?p :person/age \"x\"] [?p :person/age :a]) [?p :person/name ?n]]") == []
    # the same answers as the union an or-join of the same branches still compiles to (lookup refs, instants,
    # a ref attribute's entids, a cardinality-many attribute counted with :with)
    for branches, rest in [
        ('[?p :person/manager [:person/name "alice"]] [?p :person/manager [:person/name "bob"]]', "[?p :person/name ?n]"),
        ('[?p :person/born #inst "1990-01-01"] [?p :person/born #inst "2000-12-31T23:59:59.000-00:00"]',
         "[?p :person/name ?n]"),
        ("[?p :person/friend [:person/name \"alice\"]] [?p :person/friend [:person/name \"carol\"]]",
         "[?p :person/name ?n]"),
        ("[?p :person/nick \"al\"] [?p :person/nick \"ally\"] [?p :person/nick \"bobby\"]", "[?p :person/age ?n]"),
    ]:
        for find in ["?n", "(count ?n) :with ?p"]:
            merged = q(db, f"[:find {find} :where (or {branches}) {rest}]")
            union = q(db, f"[:find {find} :where (or-join [?p] {branches}) {rest}]")
            assert sorted(merged) == sorted(union) and union, (branches, find, merged, union)


def test_not_and_not_join(db):
    owners = {v[1] for v in ITEMS.values()}
    assert sorted(q(db, "[:find ?n :where [?p :person/name ?n] (not-join [?p] [?i :item/owner ?p])]")) == \
        sorted((n,) for n in PEOPLE if n not in owners)
    assert sorted(q(db, "[:find ?n :where [?p :person/name ?n] (not [?p :person/active true])]")) == \
        [("bob",), ("dave",), ("eve",)]
    assert sorted(q(db, "[:find ?n :where [?p :person/name ?n] [?p :person/age ?a] (not [(< ?a 30)])]")) == \
        [("alice",), ("carol",), ("dave",)]


def test_not_join_over_entities_that_do_not_exist(db):
    # nothing has ever been asserted for :person/ghost
    assert sorted(q(db, "[:find ?n :where [?p :person/name ?n] (not-join [?p] [?g :person/ghost ?p])]")) == \
        [(n,) for n in PEOPLE]
    # items priced 1000 do not exist
    assert sorted(q(db, "[:find ?n :where [?p :person/name ?n] "
                        "(not-join [?p] [?i :item/owner ?p] [?i :item/price 1000])]")) == [(n,) for n in PEOPLE]
    # an unknown ident as a value: nothing can match it, so nothing is excluded
    assert sorted(q(db, "[:find ?n :where [?p :person/name ?n] (not [?p :person/role :role/nobody])]")) == \
        [(n,) for n in PEOPLE]


def test_nested_not_and_or(db):
    # people who own no item without tags: carol owns thing, which has none
    assert sorted(q(db, "[:find ?n :where [?p :person/name ?n] "
                        "(not-join [?p] [?i :item/owner ?p] (not [?i :item/tag _]))]")) == \
        [("alice",), ("bob",), ("dave",), ("eve",)]
    # or with a not branch: inactive (or no :person/active at all), or aged 30
    assert sorted(q(db, "[:find ?n :where [?p :person/name ?n] (or (not [?p :person/active true]) "
                        "[?p :person/age 30])]")) == [(n,) for n in PEOPLE]
    # or-join whose branches use different local variables
    assert sorted(q(db, "[:find ?n :where [?p :person/name ?n] (or-join [?p] (and [?p :person/age ?a] [(> ?a 35)]) "
                        "(and [?p :person/score ?s] [(> ?s 2.9)]))]")) == [("carol",), ("dave",)]
    # or-join binding two variables, one branch correlated through a constant
    got = sorted(q(db, "[:find ?n ?in :where [?p :person/name ?n] (or-join [?p ?i] [?i :item/owner ?p] "
                       "(and [?i :item/name \"thing\"] [?p :person/name \"eve\"])) [?i :item/name ?in]]"))
    assert got == sorted([(o, i) for i, (_, o, _) in ITEMS.items()] + [("eve", "thing")])
    # an or-join that reads outer variables in its branches (a lateral union)
    got = sorted(q(db, "[:find ?n ?x :where [?p :person/name ?n] [?p :person/age ?a] (or-join [?p ?a ?x] "
                       "(and [(> ?a 29)] [(ground \"old\") ?x]) "
                       "(and [?p :person/active false] [(ground \"inactive\") ?x]))]"))
    assert got == [("alice", "old"), ("bob", "inactive"), ("carol", "old"), ("dave", "old"), ("eve", "inactive")]
    # not-join over input values that match no entity
    assert sorted(q(db, "[:find ?n :in $ [?n ...] :where (not-join [?n] [?p :person/name ?n])]",
                    '[["alice" "zed" "yan"]]')) == [("yan",), ("zed",)]


# ---------------------------------------------------------------------------------------------------- functions

def test_get_else_defaults(db):
    got = sorted(q(db, "[:find ?n ?s :where [?p :person/name ?n] [(get-else $ ?p :person/status :status/none) ?s]]"))
    assert got == [("alice", ":status/active"), ("bob", ":status/away"), ("carol", ":status/active"),
                   ("dave", ":status/none"), ("eve", ":status/none")]
    query = "[:find ?n ?sc :where [?p :person/name ?n] [(get-else $ ?p :person/score -1.0) ?sc]]"
    assert sorted(q(db, query)) == [("alice", 1.5), ("bob", 2.5), ("carol", 3.0), ("dave", -1.0), ("eve", 0.5)]
    assert columns(db, query) == [("n", "VARCHAR"), ("sc", "DOUBLE")]
    got = sorted(q(db, "[:find ?n ?m :where [?p :person/name ?n] [(get-else $ ?p :person/manager 0) ?m]]"))
    ids = db.ids
    assert got == [("alice", 0), ("bob", ids["alice"]), ("carol", ids["alice"]), ("dave", ids["bob"]), ("eve", 0)]


def test_missing(db):
    assert sorted(q(db, "[:find ?n :where [?p :person/name ?n] [(missing? $ ?p :person/score)]]")) == [("dave",)]


def test_predicates_on_strings_and_instants(db):
    assert sorted(q(db, '[:find ?n :where [_ :person/name ?n] [(< ?n "c")]]')) == [("alice",), ("bob",)]
    assert sorted(q(db, '[:find ?n :where [_ :person/name ?n] [(>= ?n "carol")]]')) == [("carol",), ("dave",), ("eve",)]
    assert sorted(q(db, '[:find ?n :where [_ :person/name ?n] [(not= ?n "carol" )]]')) == \
        [(n,) for n in PEOPLE if n != "carol"]
    q_inst = ('[:find ?n :where [?p :person/name ?n] [?p :person/born ?b] '
              '[(> ?b #inst "1990-06-01T00:00:00.000-00:00")]]')
    assert sorted(q(db, q_inst)) == [("bob",), ("dave",)]
    # variadic: a < b < c
    q_between = ('[:find ?n :where [?p :person/name ?n] [?p :person/born ?b] '
                 '[(< #inst "1986-01-01T00:00:00.000-00:00" ?b #inst "1999-01-01T00:00:00.000-00:00")]]')
    assert sorted(q(db, q_between)) == [("alice",), ("bob",)]
    # an instant from the inputs
    q_in = "[:find ?n :in $ ?t :where [?p :person/name ?n] [?p :person/born ?b] [(<= ?b ?t)]]"
    assert sorted(q(db, q_in, '[#inst "1990-01-01T00:00:00.000-00:00"]')) == [("alice",), ("carol",)]
    # comparisons between two variables
    assert sorted(q(db, "[:find ?a ?b :where [?x :person/name ?a] [?y :person/name ?b] [?x :person/age ?ax] "
                        "[?y :person/age ?ay] [(< ?ax ?ay)] [(= ?ay 40)] [(= ?ax 30)]]")) == \
        [("alice", "dave"), ("carol", "dave")]


def test_arithmetic(db):
    query = ("[:find ?n ?d ?x ?h ?neg :where [?p :person/name ?n] [?p :person/age ?a] [(* ?a 2) ?d] "
             "[(+ ?a 1 1) ?x] [(/ ?a 4) ?h] [(- ?a) ?neg]]")
    assert sorted(q(db, query)) == sorted((n, AGE[n] * 2, AGE[n] + 2, AGE[n] / 4, -AGE[n]) for n in PEOPLE)
    assert columns(db, query) == [("n", "VARCHAR"), ("d", "BIGINT"), ("x", "BIGINT"), ("h", "DOUBLE"),
                                  ("neg", "BIGINT")]
    # long + double is a double; arithmetic inside a predicate
    got = sorted(q(db, "[:find ?n ?t :where [?p :person/name ?n] [?p :person/age ?a] [?p :person/score ?s] "
                       "[(+ ?a ?s) ?t] [(> ?t 30)]]"))
    assert got == [("alice", 31.5), ("carol", 33.0)]


def test_string_functions(db):
    base = '[?p :person/name "carol"] [?p :person/name ?n] [?p :person/age ?a]'
    assert q(db, f'[:find ?s . :where {base} [(str ?n "-" ?a) ?s]]') == [("carol-30",)]
    assert q(db, f"[:find ?s . :where {base} [(subs ?n 1 3) ?s]]") == [("ar",)]
    assert q(db, f"[:find ?s . :where {base} [(subs ?n 2) ?s]]") == [("rol",)]
    assert q(db, f"[:find ?c . :where {base} [(count ?n) ?c]]") == [(5,)]
    assert q(db, f'[:find ?m . :where {base} [(re-pattern "[aeiou]r") ?re] [(re-find ?re ?n) ?m]]') == [("ar",)]

    def names(pred):
        return sorted(r[0] for r in q(db, f"[:find ?n :where [_ :person/name ?n] {pred}]"))

    assert names('[(starts-with? ?n "ca")]') == ["carol"]
    assert names('[(ends-with? ?n "e")]') == ["alice", "dave", "eve"]
    assert names('[(includes? ?n "v")]') == ["dave", "eve"]
    assert names('[(like ?n "%a%")]') == ["alice", "carol", "dave"]
    assert names('[(re-pattern "^[a-c][a-z]*[lb]$") ?re] [(re-matches ?re ?n)]') == ["bob", "carol"]
    assert names('[(count ?n) ?c] [(= ?c 3)]') == ["bob", "eve"]


def test_ground_identity_tuple(db):
    assert q(db, "[:find ?x . :where [(ground 42) ?x]]") == [(42,)]
    got = sorted(q(db, "[:find ?n ?a2 :where [?p :person/name ?n] [?p :person/age ?a] [(identity ?a) ?a2] "
                       "[(ground 25) ?a2]]"))
    assert got == [("bob", 25), ("eve", 25)]
    got = q(db, '[:find [?x ?y] :where [?p :person/name "dave"] [?p :person/age ?a] [(tuple ?a "z") ?t] '
                "[(untuple ?t) [?x ?y]]]")
    assert got == [(40, "z")]


# ---------------------------------------------------------------------------------------------------- inputs

def test_collection_inputs(db):
    query = "[:find ?n ?a :in $ [?n ...] :where [?p :person/name ?n] [?p :person/age ?a]]"
    assert sorted(q(db, query, '[["alice" "bob" "zed"]]')) == [("alice", 30), ("bob", 25)]
    assert q(db, query, "[[]]") == []
    # a collection of ages: the set of names
    query = "[:find [?n ...] :in $ [?a ...] :where [?p :person/age ?a] [?p :person/name ?n]]"
    assert sorted(q(db, query, "[[25 40 25]]")) == [("bob",), ("dave",), ("eve",)]


def test_relation_and_tuple_inputs(db):
    query = "[:find ?n ?a :in $ [[?n ?a]] :where [?p :person/name ?n] [?p :person/age ?a]]"
    assert sorted(q(db, query, '[[["alice" 30] ["bob" 99] ["dave" 40]]]')) == [("alice", 30), ("dave", 40)]
    assert q(db, query, "[[]]") == []
    query = "[:find ?p :in $ [?n ?a] :where [?p :person/name ?n] [?p :person/age ?a]]"
    assert q(db, query, '[["carol" 30]]') == [(db.ids["carol"],)]
    assert q(db, query, '[["carol" 31]]') == []
    # a relation input whose rows are not joined with any pattern: returned as a set
    assert sorted(q(db, "[:find ?x ?y :in $ [[?x ?y]] :where [(ground 1) ?one]]", "[[[1 2] [1 2] [3 4]]]")) == \
        [(1, 2), (3, 4)]


def test_lookup_refs_as_inputs(db):
    ids = db.ids
    assert q(db, "[:find ?a . :in $ ?p :where [?p :person/age ?a]]", '[[:person/name "bob"]]') == [(25,)]
    query = "[:find ?p ?a :in $ [?p ...] :where [?p :person/age ?a]]"
    assert sorted(q(db, query, '[[[:person/name "bob"] [:person/name "dave"]]]')) == \
        sorted([(ids["bob"], 25), (ids["dave"], 40)])
    # lookup refs and entids mixed
    assert sorted(q(db, query, f'[[[:person/name "bob"] {ids["eve"]}]]')) == \
        sorted([(ids["bob"], 25), (ids["eve"], 25)])
    # lookup refs of two attributes in one collection, one repeated, one to nothing: each names its entity once
    thing = q(db, '[:find ?i . :where [?i :item/name "thing"]]')[0][0]
    refs = '[[[:person/name "bob"] [:item/name "thing"] [:person/name "zed"] [:person/name "bob"]]]'
    assert sorted(q(db, "[:find ?e :in $ [?e ...] :where [?e ?a _]]", refs)) == sorted([(ids["bob"],), (thing,)])
    # a lookup ref to nothing matches nothing
    assert q(db, "[:find ?a . :in $ ?p :where [?p :person/age ?a]]", '[[:person/name "zed"]]') == []
    # and a lookup ref constant inside a pattern
    assert q(db, '[:find ?a . :where [[:person/name "dave"] :person/age ?a]]') == [(40,)]
    # an input ref value compared with a ref attribute
    assert sorted(q(db, "[:find ?n :in $ ?m :where [?p :person/manager ?m] [?p :person/name ?n]]",
                    '[[:person/name "alice"]]')) == [("bob",), ("carol",)]
    # a keyword input for a ref attribute is the ident's entity
    assert sorted(q(db, "[:find ?n :in $ ?r :where [?p :person/role ?r] [?p :person/name ?n]]", "[:role/user]")) == \
        [("bob",), ("carol",)]


def test_keyword_constants(db):
    assert sorted(q(db, "[:find ?n :where [?p :person/status :status/active] [?p :person/name ?n]]")) == \
        [("alice",), ("carol",)]
    assert q(db, "[:find ?n :where [?p :person/role :role/admin] [?p :person/name ?n]]") == [("alice",)]
    # the keyword value of a ref is its entid
    got = q(db, "[:find ?r . :where [?p :person/name \"alice\"] [?p :person/role ?r]]")
    assert got == q(db, "[:find ?e . :where [?e :db/ident :role/admin]]")


# ---------------------------------------------------------------------------------------------------- ordering

def test_keywords_order_as_clojure_orders_them(db):
    """Datomic orders keywords as Clojure compares them: without a namespace first, then by namespace, then by
    name. As text ":a-/b" < ":a/b" ("-" is 0x2d, "/" is 0x2f); as keywords :a/b < :a-/b (namespace "a" < "a-")."""
    kws = "[[:a-/b :a/b :b :a/a :zz]]"
    ordered = [":b", ":zz", ":a/a", ":a/b", ":a-/b"]
    assert q(db, "[:find (min ?x) (max ?x) :in [?x ...]]", kws) == [(":b", ":a-/b")]
    assert q(db, "[:find (min 2 ?x) (max 2 ?x) :in [?x ...]]", kws) == [([":b", ":zz"], [":a-/b", ":a/b"])]
    assert [r[0] for r in q(db, "[:find ?x :in [?x ...] :order ?x]", kws)] == ordered
    assert [r[0] for r in q(db, "[:find ?x :in [?x ...] :order (desc ?x)]", kws)] == ordered[::-1]
    # comparisons too, with a constant or between variables
    assert sorted(r[0] for r in q(db, "[:find ?x :in [?x ...] :where [(< ?x :a/z)]]", kws)) == [":a/a", ":a/b", ":b",
                                                                                                ":zz"]
    got = q(db, "[:find ?x ?y :in [?x ...] [?y ...] :where [(< ?x ?y)]]", "[[:a/b] [:a-/b]]")
    assert got == [(":a/b", ":a-/b")]
    # and keyword attribute values the same way
    assert q(db, "[:find (max ?s) . :where [_ :person/status ?s]]") == q(
        db, "[:find ?s . :where [_ :person/status ?s] [(= ?s :status/away)]]")


def test_vectors_are_tuples_unless_an_entity_is_meant(db):
    """A vector is a lookup ref only where it names an attribute and an entity is expected; elsewhere (ground,
    identity, tuple inputs) it is a tuple, as in Datomic."""
    assert q(db, "[:find ?a ?c :in ?in :where [(ground ?in) [?a _ ?c]]]", "[[:a :b :c]]") == [(":a", ":c")]
    assert q(db, "[:find ?n ?x :where [(identity [3 4]) [?n ?x]]]") == [(3, 4)]
    assert q(db, '[:find ?n ?s :where [(ground [3 "x"]) [?n ?s]]]') == [(3, "x")]
    got = q(db, "[:find ?a ?b :in [?t ...] :where [(untuple ?t) [?a ?b]]]", "[[[1 2] [3 4]]]")
    assert sorted(got) == [(1, 2), (3, 4)]
    got = q(db, "[:find ?t :in ?t]", "[[1 \"a\"]]")
    assert got == [({"f0": 1, "f1": "a"},)]
    # a lookup ref in an entity position still names the entity
    assert q(db, "[:find ?age . :in $ ?p :where [?p :person/age ?age]]", '[[:person/name "bob"]]') == [(25,)]
    with pytest.raises(duckdb.Error, match="not unique"):
        q(db, "[:find ?age . :in $ ?p :where [?p :person/age ?age]]", "[[:person/age 25]]")


def test_queries_without_a_store(con, tmp_path):
    """A query that reads no database answers on a fresh connection, and a store that was never written answers as
    Datomic's empty database (its bootstrap schema only); neither creates anything."""
    assert q(con, "[:find (sum ?h) . :with ?m :in [[?m ?h]]]", "[[[1 10] [2 10] [3 5]]]") == [(25,)]
    assert q(con, "[:find ?x ?y :in [[?x ?y]] :where [(< ?x ?y)]]", "[[[1 2] [3 1]]]") == [(1, 2)]
    # the bootstrap schema: :db/ident is entid 1, of value type keyword; :db.part/user is an ident
    assert q(con, "[:find ?e . :where [?e :db/ident :db/ident]]") == [(1,)]
    assert q(con, "[:find ?v . :where [:db/ident :db/valueType ?t] [?t :db/ident ?v]]") == [(":db.type/keyword",)]
    assert q(con, "[:find ?e . :where [?e :db/ident :db.part/user]]") != []
    # nothing is asserted by anyone, and the bootstrap transaction is the only one
    assert q(con, "[:find (count ?tx) . :where [?tx :db/txInstant _]]") == [(1,)]
    assert con.execute("SELECT pull FROM mentat_pull('[:db/ident :db/cardinality]', ':db/txInstant')").fetchall() == [
        ({"db/ident": ":db/txInstant", "db/cardinality": {"db/id": 23}},)]
    assert con.execute("SELECT count(*) FROM mentat_datoms('aevt', a := ':db/ident')").fetchall()[0][0] > 9
    # an attribute the empty database lacks is still an error, which says the store does not exist yet
    with pytest.raises(duckdb.Error, match="unknown attribute :person/name.*store mentat does not exist yet"):
        q(con, "[:find ?e :where [?e :person/name _]]")
    # the same in an attached catalog (by name, and after USE); a catalog that is not attached is named
    con.execute(f"ATTACH '{tmp_path / 'proj.duckdb'}' AS proj")
    assert q(con, "[:find ?e . :where [?e :db/ident :db/ident]]", store="proj.never") == [(1,)]
    home = con.execute("SELECT current_database()").fetchall()[0][0]
    con.execute("USE proj")
    assert q(con, "[:find ?e . :where [?e :db/ident :db/ident]]") == [(1,)]
    con.execute(f'USE "{home}"')
    assert con.execute("SELECT count(*) FROM duckdb_tables() WHERE database_name = 'proj'").fetchall() == [(0,)]
    with pytest.raises(duckdb.Error, match="no database named nope"):
        q(con, "[:find ?e . :where [?e :db/ident :db/ident]]", store="nope.x")
    # mentat_schema lists the bootstrap attributes of the empty database
    assert (":db/ident", 1) in con.execute("SELECT ident, entid FROM mentat_schema()").fetchall()
    assert con.execute("SELECT count(*) FROM duckdb_schemas() WHERE schema_name = 'mentat'").fetchall() == [(0,)]
    # the first transaction creates the store; the same query then reads it
    transact(con, "[{:db/ident :p/n :db/valueType :db.type/string :db/cardinality :db.cardinality/one}]")
    assert q(con, "[:find (count ?tx) . :where [?tx :db/txInstant _]]") == [(2,)]


def test_partial_inst_literals(db):
    """Clojure's reader (and so Datomic) takes #inst in partial forms: missing parts are the start of the period,
    a missing offset is UTC."""
    born = "[:find ?n :in $ ?t :where [?p :person/born ?b] [(< ?b ?t)] [?p :person/name ?n]]"
    assert sorted(q(db, born, '[#inst "1990"]')) == [("carol",)]
    assert sorted(q(db, born, '[#inst "1990-01-01T00:00:01"]')) == [("alice",), ("carol",)]
    got = q(db, '[:find ?n :where [?p :person/born ?b] [(>= ?b #inst "2000-12")] [?p :person/name ?n]]')
    assert got == [("dave",)]
    # in transaction data too (through d/with, which writes nothing: the fixture is shared)
    got = db.execute("SELECT * FROM mentat_with(?, ?)", [
        '[{:person/name "xavier" :person/born #inst "2021-03-04T10:30"}]',
        '[:find ?b . :where [?p :person/name "xavier"] [?p :person/born ?b]]']).fetchall()[0][0]
    assert got == dt.datetime(2021, 3, 4, 10, 30, tzinfo=UTC)


def test_order_limit_offset(db):
    by_age = sorted(PEOPLE, key=lambda n: (-AGE[n], n))
    query = "[:find ?n ?a :where [?p :person/name ?n] [?p :person/age ?a] :order (desc ?a) ?n"
    assert q(db, query + "]") == [(n, AGE[n]) for n in by_age]
    assert q(db, query + " :limit 3 :offset 1]") == [(n, AGE[n]) for n in by_age[1:4]]
    assert q(db, query + " :limit 2]") == [(n, AGE[n]) for n in by_age[:2]]
    assert q(db, query + " :offset 4]") == [(n, AGE[n]) for n in by_age[4:]]
    assert q(db, query + " :offset 10]") == []
    # limit and offset from the inputs
    query = ("[:find ?n :in $ ?lim ?off :where [_ :person/name ?n] :order ?n :limit ?lim :offset ?off]")
    assert q(db, query, "[2 1]") == [("bob",), ("carol",)]
    assert 'bad input `"x"`: given for ?lim, which is a limit' in error(db, query, '["x" 1]')
    # ordering by a variable not in :find, ascending and descending
    assert q(db, "[:find ?n :where [?p :person/name ?n] [?p :person/born ?b] :order ?b]") == \
        [("carol",), ("alice",), ("bob",), ("dave",)]
    assert q(db, "[:find ?n :where [?p :person/name ?n] [?p :person/born ?b] :order (desc ?b) :limit 1]") == \
        [("dave",)]
    # an order variable outside :find and :with keeps the answer a set: each find tuple once, placed by the
    # variable's least value (asc) or greatest (desc) among its rows
    ages = sorted(set(AGE.values()))
    first = {a: min(n for n in PEOPLE if AGE[n] == a) for a in ages}
    last = {a: max(n for n in PEOPLE if AGE[n] == a) for a in ages}
    assert q(db, "[:find ?a :where [?p :person/age ?a] [?p :person/name ?n] :order ?n]") == \
        [(a,) for a in sorted(ages, key=lambda a: first[a])]
    assert q(db, "[:find ?a :where [?p :person/age ?a] [?p :person/name ?n] :order (desc ?n)]") == \
        [(a,) for a in sorted(ages, key=lambda a: last[a], reverse=True)]
    assert len(q(db, "[:find ?a :where [?p :person/age ?a] [?p :person/name ?n] :order ?n :limit 2]")) == 2
    # beside :with, the bag is the :with variables' (one row per person here)
    assert q(db, "[:find ?a :with ?p :where [?p :person/age ?a] [?p :person/name ?n] :order ?n]") == \
        [(AGE[n],) for n in sorted(PEOPLE)]


def test_ordering_by_an_aggregate_is_done_in_sql(db):
    """`:order` takes variables (Mentat's `:order`); an aggregate there is refused with the SQL that orders by it,
    and that SQL gives the ranking."""
    query = "[:find ?a (count ?p) :where [?p :person/age ?a] :order (desc (count ?p))]"
    msg = error(db, query)
    assert "to order by an aggregate, order the answer in SQL" in msg and "ORDER BY count_e DESC" in msg
    got = db.execute("SELECT a, count_p FROM mentat_q('[:find ?a (count ?p) :where [?p :person/age ?a]]') "
                     "ORDER BY count_p DESC, a").fetchall()
    counts = {}
    for n in PEOPLE:
        counts[AGE[n]] = counts.get(AGE[n], 0) + 1
    assert got == sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def test_constant_find_variables_in_grouping_and_ordering(db):
    # ?x is a constant (ground, scalar input): it groups nothing and orders nothing
    assert q(db, "[:find ?x (count ?p) :where [?p :person/age _] [(ground 5) ?x]]") == [(5, 5)]
    assert q(db, "[:find ?x (count ?p) :where [?p :person/age 99] [(ground 5) ?x]]") == []
    assert sorted(q(db, "[:find ?a ?x (count ?p) :where [?p :person/age ?a] [(ground 9) ?x]]")) == \
        [(25, 9, 2), (30, 9, 2), (40, 9, 1)]
    query = "[:find ?n ?x :in $ ?x :where [_ :person/name ?n] :order ?x (desc ?n)]"
    assert q(db, query, '["zz"]') == [(n, "zz") for n in sorted(PEOPLE, reverse=True)]
    assert q(db, query, "[7]") == [(n, 7) for n in sorted(PEOPLE, reverse=True)]


# ---------------------------------------------------------------------------------------------------- find specs

def test_empty_results_for_each_find_spec(db):
    where = ':where [?p :person/name "zed"] [?p :person/age ?a]]'
    assert q(db, "[:find ?p ?a " + where) == []
    assert q(db, "[:find ?a . " + where) == []
    assert q(db, "[:find [?a ...] " + where) == []
    assert q(db, "[:find [?p ?a] " + where) == []
    assert columns(db, "[:find [?p ?a] " + where) == [("p", "BIGINT"), ("a", "BIGINT")]


def test_find_spec_shapes(db):
    scalar = q(db, "[:find ?a . :where [_ :person/age ?a]]")
    assert len(scalar) == 1 and len(scalar[0]) == 1 and scalar[0][0] in set(AGE.values())
    tuple_ = q(db, "[:find [?n ?a] :where [?p :person/name ?n] [?p :person/age ?a]]")
    assert len(tuple_) == 1 and tuple_[0] in {(n, AGE[n]) for n in PEOPLE}
    coll = q(db, "[:find [?a ...] :where [_ :person/age ?a]]")
    assert sorted(coll) == [(25,), (30,), (40,)]
    assert columns(db, "[:find [?a ...] :where [_ :person/age ?a]]") == [("a", "BIGINT")]
    # a relation is a set
    assert sorted(q(db, "[:find ?a :where [_ :person/age ?a]]")) == [(25,), (30,), (40,)]
    # scalar aggregate
    assert q(db, "[:find (count ?p) . :where [?p :person/name _]]") == [(5,)]


def test_return_maps(db):
    query = "[:find ?n ?a :keys name age :where [?p :person/name ?n] [?p :person/age ?a]]"
    assert columns(db, query) == [("name", "VARCHAR"), ("age", "BIGINT")]
    assert sorted(q(db, query)) == sorted((n, AGE[n]) for n in PEOPLE)
    query = "[:find ?n (count ?i) :strs owner items :where [?i :item/owner ?o] [?o :person/name ?n]]"
    assert [c[0] for c in columns(db, query)] == ["owner", "items"]
    assert sorted(q(db, query)) == [("alice", 3), ("bob", 1), ("carol", 1)]
    assert [c[0] for c in columns(db, "[:find ?n :syms who :where [_ :person/name ?n]]")] == ["who"]
    # with a tuple find spec (Datomic allows relation and tuple find specs)
    query = '[:find [?n ?a] :keys name age :where [?p :person/name "dave"] [?p :person/name ?n] [?p :person/age ?a]]'
    assert columns(db, query) == [("name", "VARCHAR"), ("age", "BIGINT")]
    assert q(db, query) == [("dave", 40)]
    # one name per element; not with scalar or collection find specs
    assert "2 elements, 1 names" in error(
        db, "[:find ?n ?a :keys name :where [?p :person/name ?n] [?p :person/age ?a]]")
    assert "relation or tuple" in error(db, "[:find [?n ...] :keys name :where [?p :person/name ?n]]")


def test_column_names_and_types(db):
    query = ("[:find ?p ?n ?a ?sc ?act ?b ?u ?st ?r ?nick :where [?p :person/name \"alice\"] [?p :person/name ?n] "
             "[?p :person/age ?a] [?p :person/score ?sc] [?p :person/active ?act] [?p :person/born ?b] "
             "[?p :person/uid ?u] [?p :person/status ?st] [?p :person/role ?r] [?p :person/nick ?nick]]")
    assert columns(db, query) == [
        ("p", "BIGINT"), ("n", "VARCHAR"), ("a", "BIGINT"), ("sc", "DOUBLE"), ("act", "BOOLEAN"),
        ("b", "TIMESTAMP WITH TIME ZONE"), ("u", "UUID"), ("st", "VARCHAR"), ("r", "BIGINT"), ("nick", "VARCHAR")]
    admin = q(db, "[:find ?e . :where [?e :db/ident :role/admin]]")[0][0]
    got = sorted(q(db, query), key=lambda r: r[-1])
    common = (db.ids["alice"], "alice", 30, 1.5, True, dt.datetime(1990, 1, 1, tzinfo=UTC), uuid.UUID(ALICE_UID),
              ":status/active", admin)
    assert got == [common + ("al",), common + ("ally",)]
    # aggregate names
    assert [c[0] for c in columns(db, "[:find ?n (count ?i) (count-distinct ?i) (max ?p) :where [?i :item/owner ?o] "
                                      "[?o :person/name ?n] [?i :item/price ?p]]")] == \
        ["n", "count_i", "count_distinct_i", "max_p"]


def test_bytes_and_uri(con):
    transact(con, "[{:db/ident :f/data :db/valueType :db.type/bytes :db/cardinality :db.cardinality/one} "
                  "{:db/ident :f/url :db/valueType :db.type/uri :db/cardinality :db.cardinality/one}]")
    f = transact(con, r'[{:db/id "f" :f/data "a\\x41" :f/url "https://x.y/z"}]')["tempids"]["f"]
    query = "[:find ?d ?u :where [?f :f/data ?d] [?f :f/url ?u]]"
    assert columns(con, query) == [("d", "BLOB"), ("u", "VARCHAR")]
    # the transactor stores a string given for bytes as its UTF-8 bytes: a backslash, then x41
    assert q(con, query) == [(b"a\\x41", "https://x.y/z")]
    # and a string constant for a bytes attribute means the same bytes
    assert q(con, r'[:find ?f :where [?f :f/data "a\\x41"]]') == [(f,)]
    assert q(con, "[:find ?f :in $ ?d :where [?f :f/data ?d]]", r'["a\\x41"]') == [(f,)]
    assert q(con, '[:find ?f :where [?f :f/data "aA"]]') == []
    assert q(con, '[:find ?f :where [?f :f/url "https://x.y/z"]]') == [(f,)]


def test_reverse_attributes(db):
    # who lists bob as a friend
    assert q(db, '[:find ?n :where [?b :person/name "bob"] [?b :person/_friend ?x] [?x :person/name ?n]]') == \
        [("alice",)]
    # alice's reports
    assert sorted(q(db, '[:find ?n :where [?a :person/name "alice"] [?a :person/_manager ?x] [?x :person/name ?n]]')) \
        == [("bob",), ("carol",)]
    # items of alice through the reverse of :item/owner
    got = q(db, '[:find [?in ...] :where [?a :person/name "alice"] [?a :item/_owner ?i] [?i :item/name ?in]]')
    assert sorted(got) == [("doohickey",), ("gizmo",), ("widget",)]


def test_reverse_of_a_non_ref_is_an_error(db):
    msg = error(db, "[:find ?x :where [?x :person/_age ?y]]")
    assert ":person/_age" in msg or ":person/age" in msg


def test_unbound_attribute(db):
    ids = db.ids
    query = "[:find ?ident ?v :in $ ?e :where [?e ?a ?v] [?a :db/ident ?ident]]"
    got = sorted(q(db, query, '[[:item/name "thing"]]'))
    assert got == sorted([(":item/name", "thing"), (":item/price", "5"), (":item/owner", str(ids["carol"]))])
    assert columns(db, query, '[[:item/name "thing"]]') == [("ident", "VARCHAR"), ("v", "VARCHAR")]
    # all attributes of alice, counted: name age score active born uid nick*2 friend*2 status role
    assert q(db, "[:find (count ?a) . :with ?v :in $ ?e :where [?e ?a ?v]]", '[[:person/name "alice"]]') == [(12,)]
    # a constant value across all attributes: who has 25 anywhere
    assert sorted(q(db, "[:find ?e ?a :where [?e ?a 25]]")) == sorted(
        (ids[n], q(db, "[:find ?x . :where [?x :db/ident :person/age]]")[0][0]) for n in ("bob", "eve"))
    # a keyword value across all attributes: the ident's own :db/ident datom (a keyword attribute) and the ref
    # that points at it (alice's role)
    admin = q(db, "[:find ?x . :where [?x :db/ident :role/admin]]")[0][0]
    role = q(db, "[:find ?x . :where [?x :db/ident :person/role]]")[0][0]
    assert sorted(q(db, "[:find ?e ?a :where [?e ?a :role/admin]]")) == sorted([(admin, 1), (ids["alice"], role)])
    # and a keyword of a keyword attribute only
    status = q(db, "[:find ?x . :where [?x :db/ident :person/status]]")[0][0]
    assert q(db, "[:find ?e ?a :where [?e ?a :status/away]]") == [(ids["bob"], status)]
    # order comparisons of the mixed values with a number or an instant read them as numbers or instants; values
    # of other types (strings, keywords, booleans) drop out rather than compare as text
    got = q(db, '[:find ?v :where [?e :person/name "alice"] [?e ?a ?v] [(> ?v 2)]]')
    assert sorted(got) == sorted((str(x),) for x in (30, ids["bob"], ids["carol"], admin))
    got = q(db, '[:find ?a :where [?e :person/name "alice"] [?e ?a ?v] [(< ?v #inst "1995-01-01T00:00:00.000-00:00")]]')
    assert got == q(db, "[:find ?x :where [?x :db/ident :person/born]]")
    # the entity position given, the value joined to a typed variable
    got = q(db, "[:find ?ident :where [?b :person/name \"bob\"] [?a :person/name \"alice\"] [?b ?attr ?a] "
                "[?attr :db/ident ?ident]]")
    assert sorted(got) == [(":person/friend",), (":person/manager",)]
    # one name per place (README, "Attributes: entid or ident, by place"): a query's ?a is the attribute's entid as
    # BIGINT, from an unbound pattern and from tx-data alike, the entid mentat_schema lists for the ident
    entid = dict(db.execute("SELECT ident, entid FROM mentat_schema()").fetchall())
    query = "[:find ?a :in $ ?e :where [?e ?a _]]"
    assert columns(db, query, '[[:item/name "thing"]]') == [("a", "BIGINT")]
    assert sorted(r[0] for r in q(db, query, '[[:item/name "thing"]]')) == sorted(
        entid[i] for i in (":item/name", ":item/price", ":item/owner"))
    tx = q(db, '[:find ?tx . :where [_ :item/name "thing" ?tx]]')[0][0]
    logged = "[:find ?a :in $ ?tx :where [(tx-data $ ?tx) [[_ ?a]]]]"
    assert columns(db, logged, f"[{tx}]") == [("a", "BIGINT")]
    assert entid[":item/name"] in {r[0] for r in q(db, logged, f"[{tx}]")}
    # while the d/datoms-style view names it by its ident
    assert db.execute("SELECT DISTINCT a FROM mentat_datoms('aevt', a := ':item/price')").fetchall() == [
        (":item/price",)]


# ---------------------------------------------------------------------------------------------------- errors

@pytest.mark.parametrize("query,inputs,needles", [
    ("[:find ?e :where [?e :person/nope ?v]]", None, ["unknown attribute", ":person/nope", "[?e :person/nope ?v]"]),
    ("[:find ?p :where [?p :person/name ?n] (not [?q :item/owner ?p])]", None, ["unbound variable", "?q", "not"]),
    ("[:find ?p :where [?p :person/name ?n] (or-join [[?x] ?p] [?p :person/age ?x])]", None,
     ["unbound variable", "?x", "or-join"]),
    ("[:find ?p :where (or [?p :person/age ?a] [?p :person/name ?n])]", None, ["non-matching or branches", "or"]),
    ('[:find ?p :where [?p :person/name ?n] [(< ?n 5)]]', None, ["type mismatch", "(< ?n 5)"]),
    ('[:find ?p :where [?p :person/name ?n] [?p :person/age ?a] [(> ?n ?a)]]', None, ["type mismatch", "(> ?n ?a)"]),
    ("[:find ?e ?n :in $ ?x :where [?e :person/name ?x] [?e :person/age ?n]]", "[]", ["wrong number of inputs", "?x"]),
    ("[:find ?e ?n :in $ ?x :where [?e :person/name ?x] [?e :person/age ?n]]", '["a" "b"]',
     ["wrong number of inputs"]),
    ("[:find ?e ?n :in $ ?x :where [?e :person/name ?x] [?e :person/age ?n]]", None, ["wrong number of inputs"]),
    ("[:find ?e :where [?e :person/name]", None, ["malformed EDN"]),
    ("[:find ?e :in $ ?x :where [?e :person/name ?x]]", '["unclosed', ["malformed EDN", "inputs"]),
    # Clojure's regular expression literal is not EDN: the message says so and what to write instead
    ('[:find ?n :where [?p :person/name ?n] [(re-find #"^a" ?n)]]', None,
     ["malformed EDN in query", 'line 1, column ', '#"^a" is a regular expression literal, which EDN does not have',
      '(re-pattern "^a")']),
    # Clojure's symbolic doubles are named where edn-format stops at the character after them
    ("[:find ?p :in $ ?d :where [?p :person/age ?a] [(< ?a ?d)]]", "[##Inf]",
     ["malformed EDN in inputs", "##NaN, ##Inf and ##-Inf", "are not read"]),
    # a second form is refused, not dropped: after a query, after the inputs vector
    ("[:find ?e :where [?e :person/name _]] [:find ?x]", None,
     ["malformed EDN in query", "line 1, column 39", "a second form after the first"]),
    ("[:find ?e :in $ ?x :where [?e :person/name ?x]]", '["alice"] "bob"',
     ["malformed EDN in inputs", "line 1, column 11", "a second form after the first"]),
    ("[:find ?x :where [?e :person/name ?n]]", None, ["unbound variable", "?x"]),
    ("[:find ?e :where [?e :person/name ?n] [(> ?m 3)]]", None, ["unbound variable", "?m"]),
    ("", None, ["malformed EDN"]),
    ("[:where [?p :person/name ?n]]", None, ["invalid query syntax", "needs :find"]),
    ("[:find ?n :where [?p]]", None, ["invalid query syntax", "[?p]"]),
    ("[:find ?n :where [?p :person/name ?n] [(frobnicate ?n) ?m]]", None, ["unknown function frobnicate"]),
    ("[:find (sum ?n) :where [?p :person/name ?n]]", None, ["type mismatch", "(sum ?n)"]),
    ("[:find (frob ?n) :where [?p :person/name ?n]]", None, ["(frob ?n)"]),
    ("[:find ?n :where [?p :person/name ?n] (rule ?p)]", None, ["(rule ?p)", "rules"]),
    ("[:find ?n :where [?p :person/name ?n]]", "[1]", ["wrong number of inputs"]),
    ("[:find ?n :in $ ?l :where [?p :person/name ?n] :limit ?l]", "[-1]", ["-1", "negative"]),
    # an aggregate of one variable given two; an n that the clauses bind
    ("[:find (count ?p ?n) :where [?p :person/name ?n]]", None, ["count takes one variable", "(count ?p ?n)"]),
    ("[:find (max ?a ?n) :where [?p :person/name ?n] [?p :person/age ?a]]", None,
     ["bad input `?a`", "bound by the query's clauses"]),
    ('[:find ?n :in $ [?n ...] :where [?p :person/name ?n]]', '["alice"]', ["bad input", '"alice"']),
    # lookup-ref inputs: an attribute the schema lacks raises, as in a pattern (Datomic: :db.error/not-an-entity);
    # one that is not :db/unique names the input; a lookup ref not wrapped in the inputs vector gets the hint
    ("[:find ?a :in $ ?e :where [?e :person/age ?a]]", "[[:person/zzz 1]]",
     ["unknown attribute :person/zzz", "given for ?e", "[:person/zzz 1]"]),
    ("[:find ?a :in $ [?e ...] :where [?e :person/age ?a]]", '[[[:person/name "alice"] [:person/zzz 1]]]',
     ["unknown attribute :person/zzz", "given for ?e", "[:person/zzz 1]"]),
    ("[:find ?a :in $ [[?e ?x]] :where [?e :person/age ?a]]", "[[[[:person/zzz 1] 2]]]",
     ["unknown attribute :person/zzz", "given for ?e", "[:person/zzz 1]"]),
    # what cannot name an entity where one is meant is an error (Datomic: :db.error/not-an-entity), not an empty
    # answer: a lookup ref's value of another type than its attribute's, a vector that is no lookup ref, a string;
    # and a lookup ref where a string is meant
    ("[:find ?a :in $ ?e :where [?e :person/age ?a]]", '[[:item/name 7]]',
     ["type mismatch", ":item/name takes a string, 7 is a long", "given for ?e", "[:item/name 7]"]),
    ("[:find ?a :in $ [?e ...] :where [?e :person/age ?a]]", '[[[:person/name "bob"] [:person/name 2.5]]]',
     ["type mismatch", ":person/name takes a string, 2.5 is a double", "[:person/name 2.5]"]),
    ("[:find ?a :in $ ?e :where [?e :person/age ?a]]", "[[:person/name]]",
     ["type mismatch", "not a lookup ref cannot name an entity", "[:person/name]"]),
    ("[:find ?a :in $ ?e :where [?e :person/age ?a]]", '["alice"]',
     ["type mismatch", "a string cannot name an entity", "given for ?e", '"alice"']),
    ("[:find ?o :in $ ?p :where [?o :item/owner ?p]]", "[1.5]", ["a double cannot name an entity", "1.5"]),
    ("[:find ?p :in $ ?n :where [?p :person/name ?n]]", '[[:person/name "alice"]]',
     ["type mismatch", "a lookup ref names an entity", "holds a string", "given for ?n", '[:person/name "alice"]']),
    ('[:find ?a :where [[:item/name 7] :item/price ?a]]', None,
     [":item/name takes a string, 7 is a long", "[:item/name 7]"]),
    ("[:find (pull ?e [*]) :in $ ?e]", "[[:item/name 7]]", [":item/name takes a string, 7 is a long", "given for ?e"]),
    ("[:find ?a :in $ ?e :where [?e :person/age ?a]]", "[[:person/age 30]]",
     ["bad input", "input 1 of the inputs vector: a lookup ref", ":person/age is not unique", ":db/unique",
      "given for ?e"]),
    ("[:find ?a :in $ [[?e ?x]] :where [?e :person/age ?a]]", "[[[1 nil]]]",
     ["bad input", "input 1 of the inputs vector", "nil is not a value", "given for ?x"]),
    ("[:find ?a :in $ ?e :where [?e :person/age ?a]]", '[:person/name "alice"]',
     ["wrong number of inputs", "needs 1, got 2", "wrapped in it too"]),
    # the rule set and an entity swapped: the message says which input is the rule set
    ("[:find ?a :in $ % ?e :where (r ?e ?a)]", '[[:person/name "alice"] [[(r ?e ?a) [?e :person/age ?a]]]]',
     ["bad input", "input 1 of the inputs vector", "for %", "a rule is a vector"]),
    ('[:find ?p :in $ ?t :where [?p :person/age ?a] [(< ?a ?t)]]', '[#inst "2020-01-01T00:00:00Z"]',
     ["cannot compare a long with an instant"]),
    # a sum of longs outside a long fails by name (Clojure's + throws on overflow), not with the statement's text
    ("[:find (sum ?x) . :with ?p :in $ [[?p ?x]]]", "[[[1 9223372036854775000] [2 9223372036854775000]]]",
     ["(sum ?x) overflows a long", ":db.type/bigint"]),
])
def test_errors_name_the_form(db, query, inputs, needles):
    msg = error(db, query, inputs)
    for n in needles:
        assert n in msg, (n, msg)
    assert "panic" not in msg and "CAST(" not in msg  # not the compiled statement's text
    assert "Invalid Input Error: Invalid Input Error" not in msg  # the statement's error kind said once
    # a form at fault that is the whole input is named once
    assert msg.count(needles[-1]) == 1 or not needles[-1].startswith("["), msg


def test_a_pull_of_two_forms_is_refused(db):
    with pytest.raises(duckdb.Error, match=r"malformed EDN in pull pattern: line 1, column 15: a second form"):
        db.execute("SELECT * FROM mentat_pull('[:person/age] [:person/name]', '[:person/name \"bob\"]')").fetchall()
    with pytest.raises(duckdb.Error, match=r"malformed EDN in entity: line 1, column 22: a second form"):
        db.execute("SELECT * FROM mentat_pull('[:person/age]', '[:person/name \"bob\"] 5')").fetchall()


def test_a_pull_of_a_lookup_ref_on_an_attribute_that_is_not_unique_is_a_bad_input(db):
    with pytest.raises(duckdb.Error, match=r"bad input `\[:person/age 30\]`: .*:person/age is not unique"):
        db.execute("SELECT * FROM mentat_pull('[*]', '[:person/age 30]')").fetchall()


def test_a_sum_that_fits_a_long_is_exact(db):
    # the overflow check leaves the largest long and the smallest ones summed exactly (hand sums)
    big = 9223372036854775807
    assert q(db, "[:find (sum ?x) . :with ?p :in $ [[?p ?x]]]", f"[[[1 {big - 5}] [2 5]]]") == [(big,)]
    assert q(db, "[:find (sum ?x) . :with ?p :in $ [[?p ?x]]]", f"[[[1 {-big}] [2 -1]]]") == [(-big - 1,)]


def test_errors_in_mentat_sql(db):
    with pytest.raises(duckdb.Error, match="unknown attribute :person/nope"):
        db.execute("SELECT mentat_sql('[:find ?e :where [?e :person/nope ?v]]')").fetchall()


# ---------------------------------------------------------------------------------------------------- SQL surface

@pytest.mark.parametrize("query,inputs", [
    ("[:find ?n ?a :where [?p :person/name ?n] [?p :person/age ?a]]", None),
    ("[:find ?on (sum ?p) :with ?i :where [?i :item/owner ?o] [?o :person/name ?on] [?i :item/price ?p]]", None),
    ("[:find ?n ?a :in $ [?n ...] :where [?p :person/name ?n] [?p :person/age ?a]]", '[["alice" "eve"]]'),
    ("[:find ?n :where [?p :person/name ?n] (not-join [?p] [?i :item/owner ?p])]", None),
])
def test_mentat_sql_runs_the_same_statement(db, query, inputs):
    want = sorted(q(db, query, inputs))
    assert want
    if inputs is None:
        got = db.execute("SELECT * FROM query(mentat_sql(?))", [query]).fetchall()
    else:
        got = db.execute("SELECT * FROM query(mentat_sql(?, ?))", [query, inputs]).fetchall()
    assert sorted(got) == want
    # constant folding happens at bind time, so the query can be written inline too
    inline = query.replace("'", "''")
    if inputs is None:
        assert sorted(db.execute(f"SELECT * FROM query(mentat_sql('{inline}'))").fetchall()) == want


def test_mentat_sql_inside_a_larger_statement(db):
    got = db.execute("SELECT count(*), sum(a) FROM query(mentat_sql("
                     "'[:find ?p ?a :where [?p :person/age ?a]]'))").fetchall()
    assert got == [(5, sum(AGE.values()))]
    # a NULL inputs, store or options is the same as leaving it out; a NULL query gives NULL
    got = db.execute("SELECT count(*), sum(a) FROM query(mentat_sql("
                     "'[:find ?p ?a :where [?p :person/age ?a]]', NULL, NULL, NULL))").fetchall()
    assert got == [(5, sum(AGE.values()))]
    assert db.execute("SELECT mentat_sql(NULL, '[]')").fetchall() == [(None,)]


def test_mentat_explain(db):
    query = "[:find ?n ?a :in $ ?x :where [?p :person/name ?x] [?p :person/name ?n] [?p :person/age ?a]]"
    plan = db.execute("SELECT * FROM mentat_explain(?, inputs := ?)", [query, '["bob"]']).fetchall()
    assert plan
    text = "\n".join(str(c) for row in plan for c in row)
    if os.environ.get("MENTAT_ENTITY_PATH") == "0":
        assert "cur_" in text  # the plan scans mentat's current-state tables
        assert "Join" in text and "Scan" in text
    else:
        # an entity-shaped query: probes of the entity index, value first, then the entity's attributes
        assert "entity_path" in text and "AVET [?p :person/name ?x]" in text and "EAVT [?p :person/age ?a]" in text


def test_join_of_two_mentat_q_calls(db):
    got = db.execute("""
        SELECT a.n, b.iname
        FROM mentat_q('[:find ?p ?n :where [?p :person/name ?n]]') a
        JOIN mentat_q('[:find ?o ?iname :where [?i :item/owner ?o] [?i :item/name ?iname]]') b ON a.p = b.o
        ORDER BY ALL""").fetchall()
    assert got == sorted((owner, name) for name, (_, owner, _) in ITEMS.items())


def test_store_parameter(db):
    assert q(db, "[:find (count ?p) . :where [?p :person/name _]]", store="mentat") == [(5,)]
    with pytest.raises(duckdb.Error):
        q(db, "[:find ?p :where [?p :person/name _]]", store="no_such_store")


def test_stores_in_other_schemas_and_catalogs(con, tmp_path):
    con.execute(f"ATTACH '{tmp_path / 'other.duckdb'}' AS other")
    n = "[{:db/ident :o/n :db/valueType :db.type/long :db/cardinality :db.cardinality/one}]"
    for store in ("other.mentat", "second"):
        transact(con, n, store)
    transact(con, "[{:o/n 7} {:o/n 8}]", "other.mentat")
    transact(con, "[{:o/n 1}]", "second")
    total = "[:find (sum ?n) . :where [_ :o/n ?n]]"
    assert q(con, total, store="other.mentat") == [(15,)]
    assert q(con, total, store="second") == [(1,)]
    assert con.execute("SELECT * FROM query(mentat_sql(?, '[]', 'other.mentat'))", [total]).fetchall() == [(15,)]
    # the default store has no :o/n
    transact(con, "[]")
    with pytest.raises(duckdb.Error, match="unknown attribute :o/n"):
        q(con, total)


# ---------------------------------------------------------------------------------------------------- big results

BIG_N = 10_000
BIG_K = 1_000


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    con = connect(tmp_path_factory.mktemp("big") / "store.duckdb")
    transact(con, "[{:db/ident :big/n :db/valueType :db.type/long :db/cardinality :db.cardinality/many}]")
    r = transact(con, '[{:db/id "b" :big/n [' + " ".join(str(i) for i in range(BIG_N)) + "]}]")
    yield Store(con, b=r["tempids"]["b"])
    con.close()


BIG_Q = "[:find ?b ?n ?k :in $ [?k ...] :where [?b :big/n ?n]]"
BIG_IN = "[[" + " ".join(str(k) for k in range(BIG_K)) + "]]"


def test_ten_million_rows_counted(big):
    got = big.execute("SELECT count(*), sum(n), sum(k), min(b), max(b) FROM mentat_q(?, inputs := ?)",
                      [BIG_Q, BIG_IN]).fetchall()
    assert got == [(BIG_N * BIG_K, BIG_K * sum(range(BIG_N)), BIG_N * sum(range(BIG_K)), big.b, big.b)]


def test_ten_million_rows_stream_as_arrow(big):
    # Python duckdb 2.0: a relation read as a stream of Arrow record batches (no materialized copy)
    reader = big.con.sql("SELECT * FROM mentat_q($q, inputs := $i)", params={"q": BIG_Q, "i": BIG_IN}) \
        .to_arrow_reader(1_000_000)
    rows = batches = total_n = total_k = 0
    for batch in reader:
        batches += 1
        rows += batch.num_rows
        total_n += pc.sum(batch.column(1)).as_py()
        total_k += pc.sum(batch.column(2)).as_py()
    assert rows == BIG_N * BIG_K
    assert batches >= 10
    assert (total_n, total_k) == (BIG_K * sum(range(BIG_N)), BIG_N * sum(range(BIG_K)))
    # the DB-API result's reader over the same query
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reader = big.execute("SELECT * FROM mentat_q(?, inputs := ?)", [BIG_Q, BIG_IN]).to_arrow_reader(1_000_000)
    assert sum(b.num_rows for b in reader) == BIG_N * BIG_K


def _rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 2**20


def test_results_stream_in_bounded_memory(big):
    """40M rows of three BIGINTs are 960 MB materialized; read as Arrow batches the process grows far less."""
    k = 4_000
    inputs = "[[" + " ".join(str(i) for i in range(k)) + "]]"
    start = peak = _rss_mb()
    reader = big.con.sql("SELECT * FROM mentat_q($q, inputs := $i)", params={"q": BIG_Q, "i": inputs}) \
        .to_arrow_reader(100_000)
    rows = 0
    for batch in reader:
        rows += batch.num_rows
        peak = max(peak, _rss_mb())
    assert rows == BIG_N * k
    assert peak - start < 600, (start, peak)


def test_cross_product_of_two_collections(big):
    xs = "[" + " ".join(str(i) for i in range(3200)) + "]"
    ys = "[" + " ".join(str(i) for i in range(3125)) + "]"
    got = big.execute("SELECT count(*), count(DISTINCT x), count(DISTINCT y) FROM "
                      "mentat_q('[:find ?x ?y :in $ [?x ...] [?y ...] :where [(ground 1) ?one]]', inputs := ?)",
                      [f"[{xs} {ys}]"]).fetchall()
    assert got == [(10_000_000, 3200, 3125)]


def test_arrow_types(big):
    tbl = big.con.sql("SELECT * FROM mentat_q('[:find ?b ?n :where [?b :big/n ?n] [(< ?n 3)]]')").to_arrow_table()
    assert tbl.num_rows == 3
    assert [str(t) for t in tbl.schema.types] == ["int64", "int64"]
    assert sorted(tbl.column(1).to_pylist()) == [0, 1, 2]


# ---------------------------------------------------------------------------------------------------- time travel

@pytest.fixture
def timeline(con):
    transact(con, SCHEMA)
    t1 = transact(con, '[{:db/id "bob" :person/name "bob" :person/age 25}]')
    bob = t1["tempids"]["bob"]
    t2 = transact(con, f"[[:db/add {bob} :person/age 26]]")
    t3 = transact(con, '[{:db/id "carol" :person/name "carol" :person/age 31}]')
    t4 = transact(con, f"[[:db/retract {bob} :person/age 26]]")
    return con, bob, t1, t2, t3, t4


AGES = "[:find ?n ?a :where [?p :person/name ?n] [?p :person/age ?a]]"


def test_as_of(timeline):
    con, bob, t1, t2, t3, t4 = timeline
    assert q(con, AGES) == [("carol", 31)]
    assert q(con, AGES, as_of=t1["tx"]) == [("bob", 25)]
    assert q(con, AGES, as_of=t2["tx"]) == [("bob", 26)]
    assert sorted(q(con, AGES, as_of=t3["tx"])) == [("bob", 26), ("carol", 31)]
    assert q(con, AGES, as_of=t4["tx"]) == [("carol", 31)]
    # before anything: nothing
    assert q(con, AGES, as_of=t1["tx"] - 1) == []
    # an instant: the state at the transaction's own instant
    assert q(con, AGES, as_of=t2["tx_instant"]) == [("bob", 26)]


def test_as_of_other_forms(timeline):
    con, bob, t1, t2, t3, t4 = timeline
    # a cardinality-many attribute, an unbound attribute, get-else and not, each as of every transaction
    transact(con, f'[[:db/add {bob} :person/nick "b1"]]')
    t5 = transact(con, f'[[:db/add {bob} :person/nick "b2"] [:db/retract {bob} :person/nick "b1"]]')
    nicks = "[:find ?k :where [?p :person/nick ?k]]"
    assert q(con, nicks, as_of=t5["tx"] - 1) == [("b1",)]
    assert q(con, nicks, as_of=t5["tx"]) == [("b2",)]
    age_attr = q(con, "[:find ?a . :where [?a :db/ident :person/age]]")[0][0]
    name_attr = q(con, "[:find ?a . :where [?a :db/ident :person/name]]")[0][0]
    every = "[:find ?a ?v :in $ ?e :where [?e ?a ?v]]"
    assert sorted(q(con, every, f"[{bob}]", as_of=t2["tx"])) == [(name_attr, "bob"), (age_attr, "26")]
    assert sorted(q(con, every, f"[{bob}]", as_of=t4["tx"])) == [(name_attr, "bob")]
    get_else = "[:find ?n ?a :where [?p :person/name ?n] [(get-else $ ?p :person/age -1) ?a]]"
    assert sorted(q(con, get_else, as_of=t3["tx"])) == [("bob", 26), ("carol", 31)]
    assert sorted(q(con, get_else, as_of=t4["tx"])) == [("bob", -1), ("carol", 31)]
    no_age = "[:find ?n :where [?p :person/name ?n] (not [?p :person/age _])]"
    assert q(con, no_age, as_of=t3["tx"]) == []
    assert q(con, no_age, as_of=t4["tx"]) == [("bob",)]
    # an instant given as text
    assert q(con, AGES, as_of=str(t2["tx_instant"])) == [("bob", 26)]
    assert q(con, AGES, as_of="1990-01-01") == []


def test_since(timeline):
    con, bob, t1, t2, t3, t4 = timeline
    # since t1: only datoms asserted after t1 that are still current (bob's age 26 was retracted in t4)
    assert q(con, "[:find ?a :where [_ :person/age ?a]]", since=t1["tx"]) == [(31,)]
    assert q(con, AGES, since=t1["tx"]) == [("carol", 31)]
    assert q(con, AGES, since=t3["tx"]) == []
    # as-of and since together: the window (t1, t2]
    assert q(con, "[:find ?a :where [_ :person/age ?a]]", since=t1["tx"], as_of=t2["tx"]) == [(26,)]


def test_history(timeline):
    con, bob, t1, t2, t3, t4 = timeline
    got = sorted(q(con, "[:find ?a ?tx ?added :in $ ?p :where [?p :person/age ?a ?tx ?added]]", f"[{bob}]",
                   history=True))
    assert got == sorted([(25, t1["tx"], True), (25, t2["tx"], False), (26, t2["tx"], True),
                          (26, t4["tx"], False)])
    # the added position without history is an error
    with pytest.raises(duckdb.Error, match="history"):
        q(con, "[:find ?a :where [?p :person/age ?a ?tx true]]")
    # history with a since bound
    got = sorted(q(con, "[:find ?a ?added :where [_ :person/age ?a _ ?added]]", history=True, since=t2["tx"]))
    assert got == [(26, False), (31, True)]


# ---------------------------------------------------------------------------------------------------- the CLI

def test_in_the_duckdb_cli(tmp_path):
    db = tmp_path / "cli.duckdb"
    sql = (f"SELECT datoms FROM mentat_transact('{SCHEMA}');\n"
           f"SELECT count(*) FROM mentat_transact('{DATA}');\n"
           "SELECT * FROM mentat_q('[:find ?on (sum ?p) :with ?i :where [?i :item/owner ?o] [?o :person/name ?on] "
           "[?i :item/price ?p]]', inputs := NULL) ORDER BY 1;\n"
           "SELECT * FROM query(mentat_sql('[:find (count ?p) . :where [?p :person/name _]]'));\n"
           "SELECT * FROM mentat_q('[:find ?x :where [?x :person/nope 1]]');\n")
    rc, out, err = cli(sql, db)
    assert "on,sum_p\nalice,50\nbob,10\ncarol,5\n" in out, (out, err)
    assert "count_p\n5\n" in out, out
    assert "unknown attribute :person/nope" in err, err
