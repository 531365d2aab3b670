"""Several sources (`:in $ $2`, Datomic's multiple data sources) through the built extension: a second store named
by `sources :=`, a relation given in the inputs, rules, `not`, `or`, `get-else` and `missing?` over a source, time
travel per source, and the errors.

The data, two stores of one DuckDB database (answers below are worked out by hand from these lines; a few are
also checked with plain SQL over the stores' tables):

    store mentat ($), employees:           store crm ($2), customers:
      email   name  age  level(long)          email   level(keyword)  spend  referred-by
      ann@x   Ann   30   2                    ann@x   :gold           100    -
      bob@x   Bob   40   3                    cy@x    :silver         20     eve@x
      cy@x    Cy    25   1                    eve@x   :gold           500    ann@x
      dee@x   Dee   50   4                    dee@x   -               -      -

In crm an attribute is installed first, so `:person/email` has another entid there, and `:person/level` is a
keyword in crm but a long in mentat: each pattern resolves its idents against its own source's schema.
"""
import duckdb
import pytest

from conftest import EXT, mentat_call, q, rows, transact

MAIN_SCHEMA = """[
 {:db/ident :person/email :db/valueType :db.type/string :db/cardinality :db.cardinality/one
  :db/unique :db.unique/identity}
 {:db/ident :person/name :db/valueType :db.type/string :db/cardinality :db.cardinality/one}
 {:db/ident :person/age :db/valueType :db.type/long :db/cardinality :db.cardinality/one}
 {:db/ident :person/level :db/valueType :db.type/long :db/cardinality :db.cardinality/one}]"""

CRM_SCHEMA = """[
 {:db/ident :crm/note :db/valueType :db.type/string :db/cardinality :db.cardinality/one}
 {:db/ident :crm/spend :db/valueType :db.type/long :db/cardinality :db.cardinality/one}
 {:db/ident :person/email :db/valueType :db.type/string :db/cardinality :db.cardinality/one
  :db/unique :db.unique/identity}
 {:db/ident :person/level :db/valueType :db.type/keyword :db/cardinality :db.cardinality/one}
 {:db/ident :crm/referred-by :db/valueType :db.type/ref :db/cardinality :db.cardinality/one}]"""

EMPLOYEES = [("ann@x", "Ann", 30, 2), ("bob@x", "Bob", 40, 3), ("cy@x", "Cy", 25, 1), ("dee@x", "Dee", 50, 4)]

CRM = """[{:db/id "ann" :person/email "ann@x" :person/level :gold :crm/spend 100}
          {:db/id "eve" :person/email "eve@x" :person/level :gold :crm/spend 500 :crm/referred-by "ann"}
          {:db/id "cy" :person/email "cy@x" :person/level :silver :crm/spend 20 :crm/referred-by "eve"}
          {:db/id "dee" :person/email "dee@x" :crm/note "prospect"}]"""

TWO = '{$2 "crm"}'


@pytest.fixture
def db(con):
    transact(con, MAIN_SCHEMA)
    people = " ".join(
        f'{{:person/email "{m}" :person/name "{n}" :person/age {a} :person/level {lv}}}' for m, n, a, lv in EMPLOYEES
    )
    transact(con, f"[{people}]")
    transact(con, CRM_SCHEMA, store="crm")
    transact(con, CRM, store="crm")
    return con


def attr_id(con, ident, store):
    return rows(con, "SELECT entid FROM mentat_schema(store := ?) WHERE ident = ?", [store, ident])[0][0]


def test_the_same_ident_has_its_own_entid_and_type_per_store(db):
    assert attr_id(db, ":person/email", "mentat") != attr_id(db, ":person/email", "crm")
    types = {s: rows(db, "SELECT value_type FROM mentat_schema(store := ?) WHERE ident = ':person/level'", [s])[0][0]
             for s in ("mentat", "crm")}
    assert types == {"mentat": ":db.type/long", "crm": ":db.type/keyword"}


def test_join_across_two_stores(db):
    got = q(db, """[:find ?name ?spend :in $ $2
                    :where [?p :person/email ?m] [?p :person/name ?name]
                           [$2 ?c :person/email ?m] [$2 ?c :crm/spend ?spend]]""", sources=TWO)
    assert sorted(got) == [("Ann", 100), ("Cy", 20)]
    # the same join in plain SQL over the two stores' tables
    me, mn = attr_id(db, ":person/email", "mentat"), attr_id(db, ":person/name", "mentat")
    ce, cs = attr_id(db, ":person/email", "crm"), attr_id(db, ":crm/spend", "crm")
    plain = rows(db, f"""SELECT n.v, s.v FROM mentat.cur_{me} e JOIN mentat.cur_{mn} n ON n.e = e.e
                         JOIN crm.cur_{ce} c ON c.v = e.v JOIN crm.cur_{cs} s ON s.e = c.e""")
    assert sorted(got) == sorted(plain)


def test_each_pattern_reads_its_own_schema(db):
    # :person/level is a long in mentat and a keyword in crm
    got = q(db, """[:find ?name ?level ?tier :in $ $2
                    :where [?p :person/email ?m] [?p :person/name ?name] [?p :person/level ?level]
                           [$2 ?c :person/email ?m] [$2 ?c :person/level ?tier]]""", sources=TWO)
    assert sorted(got) == [("Ann", 2, ":gold"), ("Cy", 1, ":silver")]
    # a keyword constant resolves in its source: :gold is a keyword value of crm
    got = q(db, "[:find [?m ...] :in $ $2 :where [$2 ?c :person/level :gold] [$2 ?c :person/email ?m]]", sources=TWO)
    assert sorted(r[0] for r in got) == ["ann@x", "eve@x"]
    # the default source reads mentat only: no crm-only customer shows up
    got = q(db, "[:find [?m ...] :in $ $2 :where [?p :person/email ?m]]", sources=TWO)
    assert sorted(r[0] for r in got) == ["ann@x", "bob@x", "cy@x", "dee@x"]


def test_not_and_not_join_over_a_source(db):
    # employees who are not customers
    got = q(db, """[:find ?name :in $ $2
                    :where [?p :person/email ?m] [?p :person/name ?name] ($2 not-join [?m] [?c :person/email ?m])]""",
            sources=TWO)
    assert sorted(got) == [("Bob",)]
    # employees who are not gold customers
    got = q(db, """[:find ?name :in $ $2
                    :where [?p :person/email ?m] [?p :person/name ?name]
                           ($2 not-join [?m] [?c :person/email ?m] [?c :person/level :gold])]""", sources=TWO)
    assert sorted(got) == [("Bob",), ("Cy",), ("Dee",)]


def test_or_over_a_source(db):
    got = q(db, """[:find ?m :in $ $2
                    :where ($2 or [?c :person/level :silver] [?c :crm/spend 500]) [$2 ?c :person/email ?m]]""",
            sources=TWO)
    assert sorted(got) == [("cy@x",), ("eve@x",)]
    # or-join with the source, joined back to the employees
    got = q(db, """[:find ?name :in $ $2
                    :where [?p :person/name ?name] [?p :person/email ?m]
                           ($2 or-join [?m] (and [?c :person/email ?m] [?c :crm/spend ?s] [(> ?s 50)])
                                            (and [?c :person/email ?m] [?c :crm/note _]))]""", sources=TWO)
    assert sorted(got) == [("Ann",), ("Dee",)]


def test_a_lookup_ref_input_names_the_entity_of_the_source_it_is_used_in(db):
    # eve@x is a customer only: the lookup ref finds her in crm, by crm's :person/email
    got = q(db, "[:find ?s :in $ $2 ?c :where [$2 ?c :crm/spend ?s]]", '[[:person/email "eve@x"]]', sources=TWO)
    assert got == [(500,)]
    got = q(db, "[:find ?n ?s :in $ $2 ?c :where [?c :person/name ?n] [$2 ?c2 :person/email ?m] [?c :person/email ?m] "
                "[$2 ?c2 :crm/spend ?s]]", '[[:person/email "ann@x"]]', sources=TWO)
    assert got == [("Ann", 100)]


def test_get_else_and_missing_over_a_source(db):
    got = q(db, """[:find ?name ?spend :in $ $2
                    :where [?p :person/name ?name] [?p :person/email ?m] [$2 ?c :person/email ?m]
                           [(get-else $2 ?c :crm/spend 0) ?spend]]""", sources=TWO)
    assert sorted(got) == [("Ann", 100), ("Cy", 20), ("Dee", 0)]
    got = q(db, "[:find ?m :in $ $2 :where [$2 ?c :person/email ?m] [(missing? $2 ?c :person/level)]]", sources=TWO)
    assert got == [("dee@x",)]
    got = q(db, """[:find ?m ?v :in $ $2
                    :where [$2 ?c :person/email ?m] [(get-some $2 ?c :crm/note :person/email) [?a ?v]]
                           [$2 ?a :db/ident :crm/note]]""", sources=TWO)
    assert got == [("dee@x", "prospect")]


REFERRED = """[[(referred ?a ?b) [?a :crm/referred-by ?b]]
               [(referred ?a ?b) [?a :crm/referred-by ?x] (referred ?x ?b)]]"""


def test_a_recursive_rule_over_a_source(db):
    # everyone ann referred, directly (eve) or through someone she referred (cy)
    got = q(db, """[:find ?m :in $ $2 % :where [$2 ?root :person/email "ann@x"] ($2 referred ?c ?root)
                                               [$2 ?c :person/email ?m]]""", f"[{REFERRED}]", sources=TWO)
    assert sorted(got) == [("cy@x",), ("eve@x",)]
    # ... of whom the employees, by name from the default store
    got = q(db, """[:find ?name :in $ $2 % :where [$2 ?root :person/email "ann@x"] ($2 referred ?c ?root)
                                                  [$2 ?c :person/email ?m] [?p :person/email ?m]
                                                  [?p :person/name ?name]]""", f"[{REFERRED}]", sources=TWO)
    assert got == [("Cy",)]
    # called without a source the rule reads $, whose schema has no :crm/referred-by
    with pytest.raises(duckdb.Error, match=":crm/referred-by"):
        q(db, "[:find ?a :in $ $2 % :where (referred ?a ?b)]", f"[{REFERRED}]", sources=TWO)


def test_a_non_recursive_rule_over_a_source_and_on_the_default(db):
    rules = "[[(level-of ?m ?l) [?c :person/email ?m] [?c :person/level ?l]]]"
    got = q(db, "[:find ?m ?l :in $ $2 % :where ($2 level-of ?m ?l)]", f"[{rules}]", sources=TWO)
    assert sorted(got) == [("ann@x", ":gold"), ("cy@x", ":silver"), ("eve@x", ":gold")]
    got = q(db, "[:find ?m ?l :in $ $2 % :where (level-of ?m ?l)]", f"[{rules}]", sources=TWO)
    assert sorted(got) == [("ann@x", 2), ("bob@x", 3), ("cy@x", 1), ("dee@x", 4)]


TEAMS = '[["ann@x" :team "red"] ["bob@x" :team "blue"] ["zed@x" :team "red"] ["cy@x" :role "lead"]]'


def test_a_relation_source(db):
    got = q(db, """[:find ?name ?team :in $ $t
                    :where [$t ?m :team ?team] [?p :person/email ?m] [?p :person/name ?name]]""", f"[{TEAMS}]")
    assert sorted(got) == [("Ann", "red"), ("Bob", "blue")]
    # a relation source read alone needs no store
    fresh = duckdb.connect(":memory:", config={"allow_unsigned_extensions": "true"})
    fresh.execute(f"LOAD '{EXT}'")
    got = q(fresh, "[:find ?m :in $t :where [$t ?m :team \"red\"]]", f"[{TEAMS}]")
    assert sorted(got) == [("ann@x",), ("zed@x",)]
    fresh.close()


def test_a_relation_source_of_datom_tuples(db):
    datoms = '[[1 :likes "tea" 10] [1 :likes "milk" 11] [2 :likes "tea" 12] [2 :hates "milk" 12]]'
    got = q(db, "[:find ?e ?v ?tx :in $ $d :where [$d ?e :likes ?v ?tx] [(> ?tx 10)]]", f"[{datoms}]")
    assert sorted(got) == [(1, "milk", 11), (2, "tea", 12)]
    # a 3-place pattern on 4-tuples matches the first three positions; set semantics
    got = q(db, "[:find ?v :in $ $d :where [$d _ :likes ?v]]", f"[{datoms}]")
    assert sorted(got) == [("milk",), ("tea",)]


def test_relation_and_store_sources_together_with_a_rule_over_the_relation(db):
    graph = '[[1 :to 2] [2 :to 3] [3 :to 4] [7 :to 8]]'
    reach = "[[(reach ?a ?b) [?a :to ?b]] [(reach ?a ?b) [?a :to ?x] (reach ?x ?b)]]"
    got = q(db, "[:find ?b :in $ $g % :where ($g reach 1 ?b)]", f"[{graph} {reach}]")
    assert sorted(got) == [(2,), (3,), (4,)]
    # three sources: age from mentat, spend from crm, a bonus table as a relation
    got = q(db, """[:find ?name ?bonus :in $ $2 $b
                    :where [$2 ?c :crm/spend ?s] [$b ?lo ?bonus] [(>= ?s ?lo)]
                           [$2 ?c :person/email ?m] [?p :person/email ?m] [?p :person/name ?name]]""",
            "[[[100 10] [500 50]]]", sources=TWO)
    assert sorted(got) == [("Ann", 10)]
    # not over a relation source
    got = q(db, "[:find ?name :in $ $t :where [?p :person/name ?name] [?p :person/email ?m] ($t not [?m :team _])]",
            f"[{TEAMS}]")
    assert sorted(got) == [("Cy",), ("Dee",)]


def test_time_travel_per_source(db):
    before = rows(db, "SELECT max(tx) FROM mentat_datoms('EAVT')")[0][0]
    transact(db, '[{:person/email "ann@x" :person/level 5}]')
    # $old is the same store as of the tx before the change, $ is now
    got = q(db, """[:find ?old ?new :in $ $old
                    :where [?p :person/email "ann@x"] [?p :person/level ?new] [$old ?p :person/level ?old]]""",
            sources=f"{{$old {{:as-of {before}}}}}")
    assert got == [(2, 5)]
    # $h is the store's history: the assertion of 2, its retraction, the assertion of 5
    got = q(db, """[:find ?l ?added :in $ $h
                    :where [?p :person/email "ann@x"] [$h ?p :person/level ?l _ ?added]]""",
            sources="{$h {:history true}}")
    assert sorted(got) == [(2, False), (2, True), (5, True)]
    # since, per source: only ann's new level is newer than `before`
    got = q(db, "[:find ?e ?l :in $ $s :where [$s ?e :person/level ?l]]", sources=f"{{$s {{:since {before}}}}}")
    assert [r[1] for r in got] == [5]
    # as-of an instant, per source: before any transaction nothing, far ahead everything now
    query = "[:find ?l :in $ $old :where [$old ?p :person/level ?l]]"
    assert q(db, query, sources='{$old {:as-of #inst "2000-01-01"}}') == []
    assert sorted(q(db, query, sources='{$old {:as-of #inst "2999-01-01T00:00:00Z"}}')) == [(1,), (3,), (4,), (5,)]
    # the query's own as_of applies to $ only
    got = q(db, "[:find ?old ?now :in $ $2 :where [?p :person/email \"ann@x\"] [?p :person/level ?old] "
                "[$2 ?p :person/level ?now]]", sources='{$2 {:store "mentat"}}', as_of=before)
    assert got == [(2, 5)]


def test_explain_takes_sources(db):
    sql, params = mentat_call("SELECT * FROM mentat_explain", "[:find ?m :in $ $2 :where [$2 ?c :person/email ?m]]",
                              sources=TWO)
    plan = str(rows(db, sql, params))
    assert f"crm.cur_{attr_id(db, ':person/email', 'crm')}" in plan
    assert "mentat.cur_" not in plan


def test_the_log_functions_over_a_source(db):
    # the values crm's transactions gave :crm/spend, read from crm's log; its attribute joined to crm's :db/ident
    got = q(db, """[:find ?v :in $ $2
                    :where [(tx-ids $2 0 9999999999999) [?tx ...]] [(tx-data $2 ?tx) [[?e ?a ?v]]]
                           [$2 ?a :db/ident :crm/spend]]""", sources=TWO)
    assert sorted(got) == [("100",), ("20",), ("500",)]


def test_one_statement_for_a_relation_source(db):
    sql = rows(db, "SELECT mentat_sql(?, ?)", ["[:find ?m :in $ $t :where [$t ?m :team _]]", f"[{TEAMS}]"])[0][0]
    assert "VALUES" in sql and sql.count(";") <= 1


@pytest.mark.parametrize("query,inputs,sources,words", [
    # a source named in a clause but not bound in :in
    ("[:find ?m :in $ $2 :where [$3 ?c :person/email ?m]]", None, TWO, ["$3", ":in"]),
    ("[:find ?m :in $ $2 :where [?p :person/email ?m] ($3 not-join [?m] [?c :person/email ?m])]", None, TWO, ["$3", ":in"]),
    # a store given for a variable that :in does not bind
    ("[:find ?m :where [?p :person/email ?m]]", None, TWO, ["$2", "crm", ":in"]),
    # a source of :in given neither a store nor a relation
    ("[:find ?m :in $ $2 :where [$2 ?c :person/email ?m]]", None, None, ["$2", "sources", "relation"]),
    # an attribute unknown to that source's schema: the attribute and the source named
    ("[:find ?n :in $ $2 :where [$2 ?c :person/name ?n]]", None, TWO, [":person/name", "$2", "crm"]),
    ("[:find ?n :in $ $2 :where [$2 ?c :person/email ?m] [(get-else $2 ?c :person/age 0) ?n]]", None, TWO,
     [":person/age", "$2", "crm"]),
    # a store that does not exist
    ("[:find ?m :in $ $2 :where [$2 ?c :person/email ?m]]", None, '{$2 "nosuch"}', ["$2", "nosuch", "does not exist"]),
    # malformed sources
    ("[:find ?m :in $ $2 :where [$2 ?c :person/email ?m]]", None, '{2 "crm"}', ["source variable"]),
    ("[:find ?m :in $ $2 :where [$2 ?c :person/email ?m]]", None, '{$2 {:as-of :now}}', ["as-of"]),
    # a rule body that names a source
    ("[:find ?m :in $ $2 % :where (r ?m)]", "[[[(r ?m) [$2 ?c :person/email ?m]]]]", TWO, ["$2", "rule"]),
    # a function that reads a database over a relation source
    ("[:find ?v :in $ $t :where [$t ?e _ _] [(get-else $t ?e :person/age 0) ?v]]", f"[{TEAMS}]", None,
     ["$t", "relation"]),
    # a relation source's input of the wrong shape
    ("[:find ?m :in $ $t :where [$t ?m _ _]]", "[42]", None, ["$t", "collection of tuples"]),
    # pull from another source
    ("[:find (pull $2 ?c [*]) :in $ $2 :where [$2 ?c :person/email _]]", None, TWO, ["$2", "pull"]),
])
def test_errors_name_the_source(db, query, inputs, sources, words):
    named = {"sources": sources} if sources else {}
    with pytest.raises(duckdb.Error) as e:
        q(db, query, inputs, **named)
    for w in words:
        assert w in str(e.value), (w, str(e.value))
