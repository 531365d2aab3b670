"""Regression tests from the differential runs against DataScript (tests/test_differential.py,
benchmarks/py/differential): each mismatch found, minimized, with the answer Datomic's documented semantics give,
computed by hand (not copied from either engine). In every case below DataScript was the one that departed from
Datomic (see the departures list in benchmarks/py/differential/__init__.py); the tests pin mentat to Datomic's
answer so that the generator's avoidance of these constructs does not leave them untested.

A mismatch where mentat is wrong gets a test here marked xfail(strict=True) until the engine is fixed."""
import json

import duckdb
import pytest

from conftest import connect, q, transact

SCHEMA = """[
 {:db/ident :e/name :db/valueType :db.type/string :db/cardinality :db.cardinality/one :db/unique :db.unique/identity}
 {:db/ident :e/code :db/valueType :db.type/long :db/cardinality :db.cardinality/one :db/unique :db.unique/value}
 {:db/ident :a/r :db/valueType :db.type/ref :db/cardinality :db.cardinality/many}
 {:db/ident :a/l :db/valueType :db.type/long :db/cardinality :db.cardinality/one}
 {:db/ident :a/part :db/valueType :db.type/ref :db/cardinality :db.cardinality/many :db/isComponent true}]"""


@pytest.fixture
def db(tmp_path):
    con = connect(tmp_path / "s.duckdb")
    transact(con, SCHEMA)
    yield con
    con.close()


def names(con, query, inputs=None):
    return sorted(r[0] for r in q(con, query, inputs))


# ------------------------------------------------------------------------------------------------------ queries

def test_a_variable_at_entity_and_value_of_one_pattern_unifies(db):
    # Minimized from seed 1: [?x :a/part ?x] with only n16 :a/part n1 gave DataScript every row (departure 4).
    # Datomic unifies the two places: only an entity referring to itself matches.
    transact(db, '[{:db/id "1" :e/name "n1" :a/r "2" :a/part "3"} {:db/id "2" :e/name "n2" :a/r "2"}'
                 ' {:db/id "3" :e/name "n3"}]')
    assert names(db, "[:find ?n :where [?e :a/r ?e] [?e :e/name ?n]]") == ["n2"]
    assert q(db, "[:find ?e :where [?e :a/part ?e]]") == []


def test_not_with_a_variable_bound_nowhere_else_is_refused(db):
    # Datomic: every variable of a `not` must be bound outside it (:db.error/insufficient-binding); local
    # variables need not-join. DataScript answers such a query (departure 3).
    transact(db, '[{:db/id "1" :e/name "n1" :a/r "2"} {:db/id "2" :e/name "n2"}]')
    with pytest.raises(duckdb.Error) as e:
        q(db, "[:find ?n :where [?e :e/name ?n] (not [?e :a/r ?x])]")
    assert "not" in str(e.value)
    assert names(db, "[:find ?n :where [?e :e/name ?n] (not-join [?e] [?e :a/r ?x])]") == ["n2"]


RULES_CHAIN = '[{:db/id "1" :e/name "n1" :a/r "2"} {:db/id "2" :e/name "n2" :a/r "3"}' \
              ' {:db/id "3" :e/name "n3" :a/r ["1" "4"]} {:db/id "4" :e/name "n4"} {:db/id "5" :e/name "n5"}]'


@pytest.mark.parametrize("recursive_body", [
    "[?a :a/r ?m] (reach ?m ?b)",     # right-linear (DataScript answers)
    "(reach ?a ?m) [?m :a/r ?b]",     # left-recursive: DataScript never returns (departure 1)
    "(reach ?a ?m) (reach ?m ?b)",    # non-linear: DataScript never returns (departure 1)
])
def test_recursive_rules_of_every_shape_reach_the_closure(db, recursive_body):
    # n1 -> n2 -> n3 -> {n1, n4}; n5 alone. From n1 every one of n1..n4 is reachable (n1 through the cycle).
    transact(db, RULES_CHAIN)
    rules = f"[[(reach ?a ?b) [?a :a/r ?b]] [(reach ?a ?b) {recursive_body}]]"
    query = "[:find ?n :in $ % ?s :where [?r :e/name ?s] (reach ?r ?d) [?d :e/name ?n]]"
    assert names(db, query, f'[{rules} "n1"]') == ["n1", "n2", "n3", "n4"]
    assert names(db, query, f'[{rules} "n4"]') == []
    pairs = q(db, "[:find (count ?a) . :with ?b :in $ % :where (reach ?a ?b)]", f"[{rules}]")
    # every one of n1, n2, n3 reaches n1..n4: 12 (a, b) pairs
    assert pairs == [(12,)]


def test_a_variable_twice_in_one_function_call(db):
    # DataScript refuses [(- ?l ?l) ?z] ("Insufficient bindings", departure 2); Datomic computes it.
    transact(db, '[{:e/name "n1" :a/l 7} {:e/name "n2" :a/l -3}]')
    assert sorted(q(db, "[:find ?n ?z :where [?e :a/l ?l] [?e :e/name ?n] [(- ?l ?l) ?z]]")) == [("n1", 0), ("n2", 0)]


# ------------------------------------------------------------------------------------------------ transactions

def test_a_retraction_through_a_lookup_ref_that_resolves_to_nothing_is_refused(db):
    # Datomic: a lookup ref naming no entity is an error; DataScript ignores the :db/retract (departure 9).
    transact(db, '[{:e/name "n1" :a/l 1}]')
    with pytest.raises(duckdb.Error):
        transact(db, '[[:db/retract [:e/name "n9"] :a/l 1] [:db/add [:e/name "n1"] :a/l 2]]')
    assert q(db, '[:find ?l . :where [[:e/name "n1"] :a/l ?l]]') == [(1,)]


def test_retract_entity_is_expanded_against_the_database_before_the_transaction(db):
    # n6 owns the component n12. One transaction retracts n6 (and so n12, recursively) and adds :e/code 12 to n12:
    # Datomic expands :db/retractEntity into retractions of the datoms n6 and n12 hold before the transaction; the
    # new datom stays, on an entity that no longer has a name (DataScript applies the forms in order and retracts
    # the new datom too: departure 10).
    ids = transact(db, '[{:db/id "o" :e/name "n6" :a/part [{:db/id "c" :e/name "n12" :a/l 5}]}]')["tempids"]
    transact(db, '[[:db/add [:e/name "n12"] :e/code 12] [:db/retractEntity [:e/name "n6"]]]')
    assert q(db, "[:find ?e ?c :where [?e :e/code ?c]]") == [(ids["c"], 12)]
    assert q(db, "[:find ?n :where [_ :e/name ?n]]") == []
    assert q(db, "[:find ?l :where [_ :a/l ?l]]") == []


def test_a_datom_both_added_and_retracted_in_one_transaction_is_a_conflict(db):
    # The component n4 holds :a/l -2; retracting its owner retracts it, and the same transaction asserts it:
    # Datomic's :db.error/datoms-conflict (DataScript applies the forms in order: departure 10).
    transact(db, '[{:db/id "o" :e/name "n1" :a/part [{:e/name "n4" :a/l -2}]}]')
    with pytest.raises(duckdb.Error):
        transact(db, '[{:e/name "n4" :a/l -2 :e/code 1} [:db/retractEntity [:e/name "n1"]]]')
    assert names(db, "[:find ?n :where [_ :e/name ?n]]") == ["n1", "n4"]


def test_a_unique_value_moves_between_entities_in_one_transaction(db):
    # n10 holds :e/code 9; one transaction gives n10 the code 4 (cardinality one: 9 is retracted) and n11 the code
    # 9. The transaction's result holds each code once, so Datomic accepts it; DataScript refuses it when the
    # assertion of 9 comes first (departure 11).
    transact(db, '[{:e/name "n10" :e/code 9} {:e/name "n11"}]')
    transact(db, '[{:db/id [:e/name "n11"] :e/code 9} {:db/id [:e/name "n10"] :e/code 4}]')
    assert sorted(q(db, "[:find ?n ?c :where [?e :e/code ?c] [?e :e/name ?n]]")) == [("n10", 4), ("n11", 9)]


# ------------------------------------------------------------------------------------------------ mentat bugs, fixed

def test_aggregate_with_over_a_rule_sees_the_set_of_find_and_with_tuples(db):
    """Fixed: an inlined rule (one body, no UNION) was taken as distinct over its head variables, so the
    aggregate's set of (find + :with) tuples kept the duplicates its body variable ?m made."""
    # Found by the 100,000-pair run (seed 100, database 85), minimized by hand. a refers to b and c; b holds
    # :a/ls 1, c holds 1 and 2. The rule yields (a, 1) twice (through b and through c) and (a, 2): as a relation,
    # {(a, 1), (a, 2)}. Datomic aggregates over the set of (find + :with) tuples, here (?v ?e): {(1, a), (2, a)},
    # so (count ?v) is 2. DataScript answers 2; mentat answered 3.
    transact(db, "[{:db/ident :a/ls :db/valueType :db.type/long :db/cardinality :db.cardinality/many}]")
    transact(db, '[{:db/id "a" :e/name "a" :a/r ["b" "c"]} {:db/id "b" :e/name "b" :a/ls 1}'
                 ' {:db/id "c" :e/name "c" :a/ls [1 2]}]')
    rules = "[[(r ?x ?v) [?x :a/r ?m] [?m :a/ls ?v]]]"
    assert q(db, "[:find (count ?v) . :with ?e :in $ % :where (r ?e ?v)]", f"[{rules}]") == [(2,)]
    # the relation of the rule is a set too
    assert sorted(q(db, "[:find ?n ?v :in $ % :where (r ?e ?v) [?e :e/name ?n]]", f"[{rules}]")) == [("a", 1), ("a", 2)]


@pytest.mark.parametrize("seed", ["[?a :e/name \"a\"]", "[?a :a/l 1]"])
def test_a_seeded_recursive_rule_is_a_set_when_two_paths_reach_one_value(db, seed):
    """Fixed: a right-recursive rule seeded from its bound argument (a constant, or since this session the values
    an earlier pattern binds) answered one row per path, not per value: its answer was a single body's SELECT
    over the seeds' closure, without DISTINCT."""
    # Found by the 100,000-pair run of 2026-12-01 (seed 200: "[:find ?v1222 ?v1220 (count ?v1222) ...]" counted
    # 2 for one value; "[:find ?a ?b ?c ...]" returned duplicate rows), minimized by hand. a refers to b and c,
    # both refer to d: the closure of a is {b, c, d}, d reached twice. Datomic's rule relation is a set:
    # (count ?x) is 3, and (count ?x) per ?x is 1.
    transact(db, '[{:db/id "a" :e/name "a" :a/l 1 :a/r ["b" "c"]} {:db/id "b" :e/name "b" :a/r "d"}'
                 ' {:db/id "c" :e/name "c" :a/r "d"} {:db/id "d" :e/name "d"}]')
    rules = "[[(reach ?a ?b) [?a :a/r ?b]] [(reach ?a ?b) [?a :a/r ?m] (reach ?m ?b)]]"
    assert q(db, f"[:find (count ?x) . :in $ % :where {seed} (reach ?a ?x)]", f"[{rules}]") == [(3,)]
    per = q(db, f"[:find ?n (count ?x) :in $ % :where {seed} (reach ?a ?x) [?x :e/name ?n]]", f"[{rules}]")
    assert sorted(per) == [("b", 1), ("c", 1), ("d", 1)]
    rows = q(db, f"[:find ?a ?x :in $ % :where {seed} (reach ?a ?x)]", f"[{rules}]")
    assert len(rows) == len(set(rows)) == 3
    # with a constant seed too
    assert q(db, "[:find (count ?x) . :in $ % ?a :where (reach ?a ?x)]", f'[{rules} [:e/name "a"]]') == [(3,)]


@pytest.mark.parametrize("find", ["(pull ?e [*]) .", "[(pull ?e [*])]", "(pull ?e [*])"])
def test_a_limited_pull_of_a_wildcard_holds_every_attribute_of_the_entity_it_pulls(db, find):
    """Fixed: a scalar or tuple find spec (or :limit) with a pull of `*` typed the pull's STRUCT from the
    attributes of the row one statement chose and pulled the row another statement chose (each a LIMIT without an
    order): the answer lacked attributes its entity holds."""
    # Found by the 100,000-pair run of 2026-12-01 (seed 200): "[:find [?b (pull ?e [* {:a/r1 [:db/id :a/k0]}])]
    # ... (or ...)]" pulled n13 with the fields of n7, so n13's :a/s0, :a/k0 and others were missing. Datomic's
    # pull `*` holds every attribute the entity has. Here 600 entities each hold one of 6 attributes besides
    # :e/name, half of them :a/s too; the query, an `or` whose branches overlap, is asked 60 times (the build
    # before the fix lost attributes in about 1 answer in 10).
    attrs = [f":p/x{k}" for k in range(6)]
    transact(db, "[{:db/ident :a/s :db/valueType :db.type/string :db/cardinality :db.cardinality/many} "
             + " ".join(f"{{:db/ident {a} :db/valueType :db.type/long :db/cardinality :db.cardinality/one}}"
                        for a in attrs) + "]")
    transact(db, "[" + " ".join(f'{{:db/id "{i}" :e/name "n{i}" {attrs[i % 6]} {i}'
                                + (' :a/s ["a" "b"]' if i % 2 == 0 else "") + "}" for i in range(600)) + "]")
    # what entity n<i> holds, from the transaction above (not from mentat's own reading of it)
    def held(name):
        i = int(name[1:])
        return {"db/id", "e/name", attrs[i % 6][1:]} | ({"a/s"} if i % 2 == 0 else set())
    limit = " :limit 2" if find == "(pull ?e [*])" else ""
    query = f'[:find {find} :where (or [?e :e/name "n6"] [?e :a/s] [?e :p/x1]){limit}]'
    for _ in range(60):
        answer = q(db, query)
        assert len(answer) == (2 if limit else 1)
        for (pulled,) in answer:
            assert {k for k, v in pulled.items() if v is not None} == held(pulled["e/name"]), pulled


def test_a_component_pulled_whole_comes_back_to_a_map_above_it(db):
    """Found by the 100,000-pull run of 2026-12-03 (seed 600, job seed 1000603), minimized: n1 owns the component
    n2, n2 refers back to n1. Inside n1's `*` the component n2 is pulled whole again: `[*]`, its own components
    whole, its plain refs as `{"db/id"}`. DataScript gives `{:db/id n2}` there when the sub-pattern n2 was reached
    by holds `*`, and n2 whole when it does not (departure 15); Datomic documents neither edge. mentat answers the
    same for both sub-patterns: an explicit sub-pattern is always expanded, and a component's own walk stops at its
    own cycles."""
    tx = transact(db, '[{:db/id "1" :e/name "n1" :a/part "2"} {:db/id "2" :e/name "n2" :a/r "1"}]')
    n1, n2 = tx["tempids"]["1"], tx["tempids"]["2"]
    whole_n2 = {"db/id": n2, "e/name": "n2", "a/r": [{"db/id": n1}]}  # n2's datoms, as [*] pulls them
    for sub in ["[:db/id * {:a/r [:db/id *]}]", "[:db/id :e/name {:a/r [:db/id *]}]"]:
        got = db.execute("SELECT pull FROM mentat_pull(?, ?)", [f"[{{:a/part {sub}}}]", n1]).fetchone()[0]
        (part,) = got["a/part"]
        assert (part["db/id"], part["e/name"]) == (n2, "n2")
        (back,) = part["a/r"]
        assert (back["db/id"], back["e/name"]) == (n1, "n1")
        assert [json.loads(x) for x in back["a/part"]] == [whole_n2]
    # the walk of a component pulled whole stops at its own cycle: n3 and n4 are each other's component; from n3,
    # n4 is pulled whole and n4's component n3, the entity the walk started from, is {"db/id"}
    tx = transact(db, '[{:db/id "3" :e/name "n3" :a/part "4"} {:db/id "4" :e/name "n4" :a/part "3"}]')
    n3, n4 = tx["tempids"]["3"], tx["tempids"]["4"]
    got = db.execute("SELECT pull FROM mentat_pull('[*]', ?)", [n3]).fetchone()[0]
    assert [json.loads(x) for x in got["a/part"]] == [{"db/id": n4, "e/name": "n4", "a/part": [{"db/id": n3}]}]
