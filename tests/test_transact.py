"""mentat_transact against Datomic's documented transaction semantics, with hand-computed expected values.

Entids follow Mentat's partitions: user schema from 100 (in the order the attributes are installed), ordinary
entities from 0x10000 in the order their tempids first appear, transactions from 2^40 + 1. `datoms` counts the
datoms asserted plus retracted, including the transaction's own :db/txInstant datom. Every error case goes
through `fails`, which also checks that the store (every table, and the schema cache) is unchanged.
"""
import datetime as dt

import pytest

from conftest import cli, connect_with, rows, transact
from mentat_helpers import (A, BOOLEAN, CLOSED, DB0, DOUBLE, KEYWORD, LONG, MANY, ONE, OPEN, REF, SCHEMA,
                            SCHEMA_DATOMS, STRING, T0, U0, UIDENTITY, UVALUE, cur, cur_tx, fails, hist, install)

UTC = dt.timezone.utc


@pytest.fixture
def db(con):
    install(con)
    return con


def test_schema_install(con):
    r = install(con)
    assert r["tx"] == T0 + 1
    assert r["datoms"] == SCHEMA_DATOMS + 1 == 59
    assert r["tempids"] == {}
    got = rows(con, "SELECT * FROM mentat_schema() ORDER BY entid")
    assert [g[:2] for g in got[:9]] == [(":db/ident", 1), (":db/valueType", 2), (":db/cardinality", 3),
                                       (":db/unique", 4), (":db/index", 5), (":db/fulltext", 6),
                                       (":db/isComponent", 7), (":db/doc", 8), (":db/txInstant", 9)]
    s, l, o, m = ":db.type/string", ":db.type/long", ":db.cardinality/one", ":db.cardinality/many"
    r_, ident = ":db.type/ref", ":db.unique/identity"
    # Datomic's tuple schema attributes: :db/tupleType a ref, the other two homogeneous tuples of refs.
    tup, one = ":db.type/tuple", ":db.cardinality/one"
    assert got[9:12] == [(":db/tupleType", 32, ":db.type/ref", one, None, False, False, False, None),
                         (":db/tupleTypes", 33, tup, one, None, False, False, False, None),
                         (":db/tupleAttrs", 34, tup, one, None, False, False, False, None)]
    assert got[12:] == [
        (":user/email", 100, s, o, ident, True, False, False, "login email"),
        (":user/name", 101, s, o, None, False, False, False, None),
        (":user/age", 102, l, o, None, False, False, False, None),
        (":user/tags", 103, ":db.type/keyword", m, None, False, False, False, None),
        (":user/friend", 104, r_, m, None, False, False, False, None),
        (":user/ssn", 105, s, o, ":db.unique/value", True, False, False, None),
        (":issue/title", 106, s, o, None, False, True, False, None),
        (":issue/assignee", 107, r_, o, None, False, False, False, None),
        (":issue/comment", 108, r_, m, None, False, False, True, None),
        (":issue/label", 109, r_, m, None, False, False, False, None),
        (":comment/text", 110, s, o, None, False, False, False, None),
        (":label/name", 111, s, o, ident, True, False, False, None),
        (":account/owner", 112, r_, o, ident, True, False, False, None),
        (":account/balance", 113, l, o, None, False, False, False, None),
        (":issue/state", 114, r_, o, None, False, False, False, None),
        (":user/score", 115, ":db.type/double", o, None, True, False, False, None),
    ]
    # the schema datoms themselves
    assert [x for x in cur(con, 1) if x[0] >= DB0] == [
        (100, ":user/email"), (101, ":user/name"), (102, ":user/age"), (103, ":user/tags"), (104, ":user/friend"),
        (105, ":user/ssn"), (106, ":issue/title"), (107, ":issue/assignee"), (108, ":issue/comment"),
        (109, ":issue/label"), (110, ":comment/text"), (111, ":label/name"), (112, ":account/owner"),
        (113, ":account/balance"), (114, ":issue/state"), (115, ":user/score"), (116, ":state/open"),
        (117, ":state/closed")]
    assert (OPEN, CLOSED) == (116, 117)
    assert [x for x in cur(con, 2) if x[0] >= DB0] == [
        (100, STRING), (101, STRING), (102, LONG), (103, KEYWORD), (104, REF), (105, STRING), (106, STRING),
        (107, REF), (108, REF), (109, REF), (110, STRING), (111, STRING), (112, REF), (113, LONG), (114, REF),
        (115, DOUBLE)]
    assert [x for x in cur(con, 3) if x[0] >= DB0] == [(e, MANY if e in (103, 104, 108, 109) else ONE)
                                                        for e in range(100, 116)]
    assert [x for x in cur(con, 4) if x[0] >= DB0] == [(100, UIDENTITY), (105, UVALUE), (111, UIDENTITY),
                                                        (112, UIDENTITY)]
    # :db/index is stored only where it was asserted (identity/value imply it in the schema, not as datoms)
    assert cur(con, 5) == [(1, True), (9, True), (115, True)]
    assert cur(con, 6) == [(106, True)]
    assert cur(con, 7) == [(108, True)]
    assert cur(con, 8) == [(100, "login email")]
    assert [e for e, _ in cur(con, 9)] == [T0, T0 + 1]
    assert [x[2] for x in cur_tx(con, 1) if x[0] >= DB0] == [T0 + 1] * 18
    assert rows(con, "SELECT ident, start, next FROM mentat.partitions ORDER BY start") == [
        (":db.part/db", 0, 118), (":db.part/user", U0, U0), (":db.part/tx", T0, T0 + 2)]
    # typed value columns, and ART indexes on unique attributes only (:db/index alone creates none)
    types = dict(rows(con, "SELECT table_name, data_type FROM duckdb_columns() WHERE schema_name = 'mentat' "
                           "AND column_name = 'v' AND table_name LIKE 'cur_1__'"))
    assert (types["cur_100"], types["cur_102"], types["cur_103"], types["cur_104"], types["cur_115"]) == (
        "VARCHAR", "BIGINT", "VARCHAR", "BIGINT", "DOUBLE")
    indexed = {t for (t,) in rows(con, "SELECT table_name FROM duckdb_indexes() WHERE schema_name = 'mentat'")}
    # (and the term dictionary of the fulltext attribute :issue/title, storage/README.md "The fulltext index")
    assert indexed == {"cur_1", "cur_100", "cur_105", "cur_111", "cur_112", "ftt_106"}
    # the second, identical installation is redundant: only the tx instant
    assert install(con)["datoms"] == 1


def test_empty_transaction_and_report(db):
    r = transact(db, "[]")
    assert (r["tx"], r["datoms"], r["tempids"]) == (T0 + 2, 1, {})
    assert cur_tx(db, 9)[-1] == (T0 + 2, r["tx_instant"], T0 + 2)


def test_list_forms_add_and_retract(db):
    r = transact(db, '[[:db/add "u" :user/name "Ann"] [:db/add "u" :user/age 30]]')
    assert (r["tx"], r["datoms"], r["tempids"]) == (T0 + 2, 3, {"u": U0})
    assert cur_tx(db, ":user/name") == [(U0, "Ann", T0 + 2)]
    assert cur_tx(db, ":user/age") == [(U0, 30, T0 + 2)]
    r = transact(db, f"[[:db/retract {U0} :user/age 30]]")
    assert (r["tx"], r["datoms"], r["tempids"]) == (T0 + 3, 2, {})
    assert cur(db, ":user/age") == []
    assert hist(db, ":user/age") == [(U0, 30, T0 + 2, True), (U0, 30, T0 + 3, False)]
    # retracting an absent datom and asserting a present one are no-ops that leave no history
    r = transact(db, f'[[:db/retract {U0} :user/age 30] [:db/retract {U0} :user/name "Bob"] '
                     f'[:db/add {U0} :user/name "Ann"]]')
    assert r["datoms"] == 1
    assert hist(db, ":user/age") == [(U0, 30, T0 + 2, True), (U0, 30, T0 + 3, False)]
    assert hist(db, ":user/name") == [(U0, "Ann", T0 + 2, True)]
    # every transaction has its instant
    assert [e for e, _ in cur(db, 9)] == [T0, T0 + 1, T0 + 2, T0 + 3, T0 + 4]


def test_retract_all_values_of_an_attribute(db):
    r = transact(db, '[{:db/id "u" :user/tags [:a :b :c] :user/name "N"}]')
    assert (r["datoms"], r["tempids"]) == (5, {"u": U0})
    r = transact(db, f"[[:db/retract {U0} :user/tags]]")
    assert r["datoms"] == 4
    assert cur(db, ":user/tags") == []
    assert hist(db, ":user/tags")[3:] == [(U0, ":a", T0 + 3, False), (U0, ":b", T0 + 3, False),
                                          (U0, ":c", T0 + 3, False)]
    r = transact(db, '[{:db/id "v" :user/tags [:x :y]}]')
    assert r["tempids"] == {"v": U0 + 1}
    assert transact(db, f"[[:db.fn/retractAttribute {U0 + 1} :user/tags]]")["datoms"] == 3
    assert cur(db, ":user/tags") == []
    assert cur(db, ":user/name") == [(U0, "N")]
    # retracting all of nothing is a no-op
    assert transact(db, f"[[:db/retract {U0} :user/age]]")["datoms"] == 1


def test_map_forms(db):
    r = transact(db, '[{:db/id "a" :user/name "A" :user/age 1} {:user/name "B"}]')
    assert (r["datoms"], r["tempids"]) == (4, {"a": U0})
    assert cur(db, ":user/name") == [(U0, "A"), (U0 + 1, "B")]
    # :db/id as an entid: card-one replacement
    assert transact(db, f"[{{:db/id {U0} :user/age 2}}]")["datoms"] == 3
    assert cur(db, ":user/age") == [(U0, 2)]
    # :db/id as an ident: documenting an attribute
    assert transact(db, '[{:db/id :user/name :db/doc "the name"}]')["datoms"] == 2
    assert rows(db, "SELECT doc FROM mentat_schema() WHERE ident = ':user/name'") == [("the name",)]
    # :db/id as a lookup ref
    transact(db, f'[[:db/add {U0} :user/email "a@x"]]')
    assert transact(db, '[{:db/id [:user/email "a@x"] :user/age 3}]')["datoms"] == 3
    assert cur(db, ":user/age") == [(U0, 3)]
    # a map with only :db/id asserts nothing
    assert transact(db, '[{:db/id "nothing"}]')["datoms"] == 1


def test_nested_maps(db):
    r = transact(db, '[{:db/id "i" :issue/title "T" :issue/comment [{:comment/text "c1"} {:comment/text "c2"}]}]')
    assert r["datoms"] == 6
    i = r["tempids"]["i"]
    comments = [v for e, v in cur(db, ":issue/comment") if e == i]
    assert len(comments) == 2 and i not in comments
    assert sorted(v for e, v in cur(db, ":comment/text") if e in comments) == ["c1", "c2"]
    assert {e for e in comments} | {i} == {U0, U0 + 1, U0 + 2}
    # an inner map with a :db.unique/identity attribute upserts (here into an existing user)
    u = transact(db, '[{:db/id "u" :user/email "a@b.c" :user/name "A"}]')["tempids"]["u"]
    assert u == U0 + 3
    r = transact(db, '[{:db/id "j" :issue/title "J" :issue/assignee {:user/email "a@b.c" :user/age 7}}]')
    assert r["datoms"] == 4 and r["tempids"] == {"j": U0 + 4}
    assert cur(db, ":issue/assignee") == [(U0 + 4, u)]
    assert cur(db, ":user/age") == [(u, 7)]
    # ... or makes a new entity
    r = transact(db, '[{:db/id "k" :issue/assignee {:user/email "new@b.c"}}]')
    assert r["datoms"] == 3
    # (the order in which one transaction's new entities take entids is unspecified, as in Datomic)
    k, new = r["tempids"]["k"], {U0 + 5, U0 + 6} - {r["tempids"]["k"]}
    assert k in (U0 + 5, U0 + 6)
    assert cur(db, ":user/email") == [(u, "a@b.c"), (new.pop(), "new@b.c")]
    # an inner map with its own :db/id
    r = transact(db, '[{:db/id "m" :issue/assignee {:db/id "mu" :user/name "MU"}}]')
    assert set(r["tempids"]) == {"m", "mu"} and set(r["tempids"].values()) == {U0 + 7, U0 + 8}
    assert r["datoms"] == 3
    assert (r["tempids"]["m"], r["tempids"]["mu"]) in cur(db, ":issue/assignee")
    # a nested map under a plain ref attribute with no way to reach it is a dangling entity
    fails(db, '[{:db/id "d" :issue/assignee {:user/name "C"}}]', "dangling", ":issue/assignee", '{:user/name "C"}')
    # nested maps are not allowed in list forms
    fails(db, '[[:db/add "d" :issue/assignee {:user/email "z@z"}]]', "nested map")


def test_a_large_transaction_read_on_all_cores_is_the_one_read_in_order(db):
    """A transaction of 16 KB or more is read in runs of whole forms on several threads, and 128 forms or more are
    turned into datoms by a builder per run: the maps' own entities (nested maps, numbered per run) must still be
    one entity each, every datom written once, and a bad form found wherever it is, named, with nothing written."""
    def issue(i):
        # brackets and a quote inside strings, a comment: the runs are cut only between whole forms
        return (f'{{:db/id "i{i}" :issue/title "T{i} [x] {{y}} \\" \\"q\\"" '
                f':issue/comment [{{:comment/text "c{i}a"}} {{:comment/text "c{i}b ]"}}]}} ; issue {i} ]\n')
    n = 400
    text = "[" + "".join(issue(i) for i in range(n)) + "]"
    assert len(text) > 16 * 1024
    r = transact(db, text)
    assert r["datoms"] == n * 5 + 1
    assert sorted(r["tempids"]) == sorted(f"i{i}" for i in range(n))
    titles = dict(cur(db, ":issue/title"))
    assert sorted(titles.values()) == sorted(f'T{i} [x] {{y}} " "q"' for i in range(n))
    comments = cur(db, ":issue/comment")
    texts = dict(cur(db, ":comment/text"))
    assert len(comments) == 2 * n and len(set(c for _, c in comments)) == 2 * n  # one entity per nested map
    for i in range(n):
        e = r["tempids"][f"i{i}"]
        assert sorted(texts[c] for p, c in comments if p == e) == [f"c{i}a", f"c{i}b ]"]
    before = (len(cur(db, ":issue/title")), len(cur(db, ":comment/text")))
    # an unknown attribute in the 351st form, and a reader error near the end: each fails the whole transaction
    bad = "[" + "".join(issue(i) if i != 350 else '{:issue/title "bad" :no/such 1} ' for i in range(n)) + "]"
    fails(db, bad, ":no/such", '{:issue/title "bad" :no/such 1}')
    fails(db, text[:-200] + ' {:issue/title "open} ]', "EDN")
    assert (len(cur(db, ":issue/title")), len(cur(db, ":comment/text"))) == before


def test_vectors_are_cardinality_many_values(db):
    r = transact(db, '[{:db/id "u" :user/tags [:a :b] :user/friend ["f1" "f2"]} '
                     '{:db/id "f1" :user/name "F1"} {:db/id "f2" :user/name "F2"} {:db/id "u" :user/tags #{:c}}]')
    assert r["datoms"] == 8
    u, f1, f2 = r["tempids"]["u"], r["tempids"]["f1"], r["tempids"]["f2"]
    assert (u, f1, f2) == (U0, U0 + 1, U0 + 2)
    assert cur(db, ":user/tags") == [(u, ":a"), (u, ":b"), (u, ":c")]
    assert cur(db, ":user/friend") == [(u, f1), (u, f2)]
    # a vector of lookup refs
    transact(db, '[{:label/name "L1"} {:label/name "L2"}]')
    r = transact(db, '[{:db/id "i" :issue/label [[:label/name "L1"] [:label/name "L2"]]}]')
    labels = dict((v, e) for e, v in cur(db, ":label/name"))
    assert cur(db, ":issue/label") == [(r["tempids"]["i"], labels["L1"]), (r["tempids"]["i"], labels["L2"])]
    fails(db, '[{:db/id "x" :user/name ["p" "q"]}]', ":user/name", "cardinality one", '["p" "q"]')


def test_reverse_attributes(db):
    r = transact(db, '[{:db/id "i1" :issue/title "I1"} {:db/id "i2" :issue/title "I2"} '
                     '{:db/id "u" :user/email "r@x" :issue/_assignee ["i1" "i2"]}]')
    assert r["datoms"] == 6
    t = r["tempids"]
    assert cur(db, ":issue/assignee") == [(t["i1"], t["u"]), (t["i2"], t["u"])]
    # [:db/add e :ns/_attr v] is [:db/add v :ns/attr e]
    r = transact(db, f'[[:db/add {t["u"]} :issue/_assignee "i3"] [:db/add "i3" :issue/title "I3"]]')
    assert cur(db, ":issue/assignee")[-1] == (r["tempids"]["i3"], t["u"])
    # a reverse attribute in a map with a lookup ref and a nested map with identity
    r = transact(db, '[{:db/id [:user/email "r@x"] :user/_friend {:user/email "fan@x"}}]')
    fan = [e for e, v in cur(db, ":user/email") if v == "fan@x"][0]
    assert cur(db, ":user/friend") == [(fan, t["u"])] and r["datoms"] == 3
    fails(db, '[[:db/add "x" :user/_name "y"]]', ":user/_name", "ref")


def test_entity_positions(db):
    transact(db, '[{:db/id "u" :user/email "a@b.c"} {:db/id "l" :label/name "L"}]')
    u, lab = U0, U0 + 1
    transact(db, '[[:db/add [:user/email "a@b.c"] :user/name "LR1"]]')
    transact(db, '[[:db/add (lookup-ref :user/email "a@b.c") :user/age 9]]')
    transact(db, f"[[:db/add {u} :user/tags :e]]")
    transact(db, '[[:db/add :user/age :db/doc "years"]]')
    assert (cur(db, ":user/name"), cur(db, ":user/age"), cur(db, ":user/tags")) == (
        [(u, "LR1")], [(u, 9)], [(u, ":e")])
    assert rows(db, "SELECT doc FROM mentat_schema() WHERE ident = ':user/age'") == [("years",)]
    r1 = transact(db, '[[:db/add (transaction-tx) :db/doc "tx doc"]]')
    r2 = transact(db, '[[:db/add "datomic.tx" :db/doc "tx doc 2"] [:db/add "i" :user/friend "datomic.tx"]]')
    assert (r1["tx"], r2["tx"]) == (T0 + 7, T0 + 8)
    assert [x for x in cur_tx(db, 8) if x[0] > T0] == [(T0 + 7, "tx doc", T0 + 7), (T0 + 8, "tx doc 2", T0 + 8)]
    assert cur(db, ":user/friend") == [(r2["tempids"]["i"], T0 + 8)]
    # value positions of ref attributes: lookup refs (both spellings), idents, entids, tempids
    r = transact(db, f'[[:db/add "i" :issue/assignee [:user/email "a@b.c"]] [:db/add "i" :issue/state :state/open] '
                     f'[:db/add "i" :issue/label (lookup-ref :label/name "L")] [:db/add "j" :issue/label {lab}] '
                     f'[:db/add "j" :issue/assignee "i"]]')
    i, j = r["tempids"]["i"], r["tempids"]["j"]
    assert cur(db, ":issue/assignee") == [(i, u), (j, i)]
    assert cur(db, ":issue/state") == [(i, OPEN)]
    assert cur(db, ":issue/label") == [(i, lab), (j, lab)]
    fails(db, '[[:db/add :no/such :user/name "x"]]', ":no/such", '[:db/add :no/such :user/name "x"]')
    fails(db, '[[:db/add "i" :issue/state :state/nope]]', ":state/nope")
    fails(db, '[[:db/add 1.5 :user/name "x"]]', "1.5", "not an entity")


def test_upserts(db):
    r = transact(db, '[{:db/id "u" :user/email "a@b.c" :user/name "Old"} {:db/id "acc" :account/owner "u"} '
                     '{:db/id "l" :label/name "L"}]')
    u, acc, lab = r["tempids"]["u"], r["tempids"]["acc"], r["tempids"]["l"]
    assert (u, acc, lab) == (U0, U0 + 1, U0 + 2)
    # a map without :db/id upserts through :db.unique/identity: the name is replaced, no entity is made
    r = transact(db, '[{:user/email "a@b.c" :user/name "New"}]')
    assert r["datoms"] == 3
    assert cur(db, ":user/name") == [(u, "New")]
    assert hist(db, ":user/name")[1:] == [(u, "Old", T0 + 3, False), (u, "New", T0 + 3, True)]
    # a string tempid upserts and reports the entity it reached
    r = transact(db, '[{:db/id "t" :user/email "a@b.c" :user/age 5}]')
    assert r["tempids"] == {"t": u} and r["datoms"] == 2
    # chained: "acc" upserts through :account/owner, a ref to "u", which upserts through :user/email
    r = transact(db, '[{:db/id "acc" :account/owner "u" :account/balance 10} {:db/id "u" :user/email "a@b.c"}]')
    assert r["tempids"] == {"acc": acc, "u": u} and r["datoms"] == 2
    assert cur(db, ":account/balance") == [(acc, 10)]
    # two tempids that upsert to one entity merge
    r = transact(db, '[{:db/id "p" :user/email "a@b.c" :user/age 40} {:db/id "q" :user/email "a@b.c" :user/tags :m}]')
    assert r["tempids"] == {"p": u, "q": u} and r["datoms"] == 4
    # two new tempids with one identity value become one new entity
    r = transact(db, '[{:db/id "n1" :user/email "new@x"} {:db/id "n2" :user/email "new@x" :user/name "N"}]')
    assert r["tempids"] == {"n1": U0 + 3, "n2": U0 + 3} and r["datoms"] == 3
    assert cur(db, ":user/email") == [(u, "a@b.c"), (U0 + 3, "new@x")]
    # a tempid whose identity values reach two different entities is an error naming the tempid
    fails(db, '[{:db/id "c" :user/email "a@b.c"} [:db/add "c" :label/name "L"]]', '"c"', "upserts to two entities",
          str(u), str(lab))
    # an identity value asserted for an existing entid is not an upsert: it conflicts with its holder
    fails(db, f'[[:db/add {lab} :user/email "a@b.c"]]', "unique", ":user/email", '"a@b.c"',
          f'[:db/add {lab} :user/email "a@b.c"]')
    # the next entity still gets the next entid
    assert transact(db, '[[:db/add "z" :user/name "Z"]]')["tempids"] == {"z": U0 + 4}


def test_unique_value(db):
    r = transact(db, '[{:db/id "a" :user/ssn "123"} {:db/id "b" :user/name "B"}]')
    a, b = r["tempids"]["a"], r["tempids"]["b"]
    fails(db, f'[[:db/add {b} :user/ssn "123"]]', "unique", ":user/ssn", '"123"', f'[:db/add {b} :user/ssn "123"]')
    # a :db.unique/value value does not upsert: a tempid asserting it conflicts
    fails(db, '[{:db/id "c" :user/ssn "123"}]', "unique", ":user/ssn", '"123"')
    fails(db, '[[:db/add "x" :user/ssn "9"] [:db/add "y" :user/ssn "9"]]', "unique", ":user/ssn", '"9"')
    # moving the value in one transaction is fine
    r = transact(db, f'[[:db/retract {a} :user/ssn "123"] [:db/add {b} :user/ssn "123"]]')
    assert r["datoms"] == 3
    assert cur(db, ":user/ssn") == [(b, "123")]


def test_cardinality_one_replacement_goes_to_history(db):
    r1 = transact(db, '[{:db/id "u" :user/age 30 :issue/assignee "v"} {:db/id "v" :user/name "V"}]')
    u, v = r1["tempids"]["u"], r1["tempids"]["v"]
    r2 = transact(db, f"[[:db/add {u} :user/age 31] {{:db/id {u} :issue/assignee {u}}}]")
    assert r2["datoms"] == 5
    assert cur_tx(db, ":user/age") == [(u, 31, r2["tx"])]
    assert hist(db, ":user/age") == [(u, 30, r1["tx"], True), (u, 30, r2["tx"], False), (u, 31, r2["tx"], True)]
    assert hist(db, ":issue/assignee") == [(u, v, r1["tx"], True), (u, v, r2["tx"], False), (u, u, r2["tx"], True)]
    # replacing with an explicit retraction of the old value counts the retraction once
    r3 = transact(db, f"[[:db/retract {u} :user/age 31] [:db/add {u} :user/age 32]]")
    assert r3["datoms"] == 3
    assert cur(db, ":user/age") == [(u, 32)]


def test_set_semantics_in_one_transaction(db):
    u = transact(db, '[[:db/add "u" :user/name "U"]]')["tempids"]["u"]
    r = transact(db, f'[[:db/add {u} :user/tags :x] [:db/add {u} :user/tags :x] {{:db/id {u} :user/tags [:x]}} '
                     f'[:db/add {u} :user/age 1] [:db/add {u} :user/age 1]]')
    assert r["datoms"] == 3
    assert hist(db, ":user/tags") == [(u, ":x", r["tx"], True)]
    fails(db, f'[[:db/add {u} :user/name "p"] [:db/add {u} :user/name "q"]]', ":user/name", '"p"', '"q"',
          f'[:db/add {u} :user/name "q"]')
    fails(db, f'[[:db/add {u} :user/tags :z] [:db/retract {u} :user/tags :z]]', "is both added", "and retracted",
          f"[:db/add {u} :user/tags :z]", f"[:db/retract {u} :user/tags :z]")
    # two tempids merged by upsert that give the merged entity two names
    fails(db, '[{:db/id "a" :user/email "m@x" :user/name "A"} {:db/id "b" :user/email "m@x" :user/name "B"}]',
          ":user/name", '"A"', '"B"')


def _retract_fixture(db):
    r = transact(db, '[{:db/id "u" :user/email "u@x" :user/name "U" :user/tags [:t1 :t2]} '
                     '{:db/id "v" :user/name "V" :user/friend ["u"]} '
                     '{:db/id "i" :issue/title "I" :issue/assignee "u" '
                     ' :issue/comment [{:db/id "c1" :comment/text "c1"} {:db/id "c2" :comment/text "c2"}]}]')
    assert r["datoms"] == 13
    return r["tempids"]


@pytest.mark.parametrize("op", [":db/retractEntity", ":db.fn/retractEntity"])
def test_retract_entity(db, op):
    t = _retract_fixture(db)
    # u's own 4 datoms, v's friend ref to u, i's assignee ref to u; v itself stays
    r = transact(db, f"[[{op} {t['u']}]]")
    assert r["datoms"] == 7
    assert (cur(db, ":user/email"), cur(db, ":user/tags"), cur(db, ":user/friend"), cur(db, ":issue/assignee")) == (
        [], [], [], [])
    assert cur(db, ":user/name") == [(t["v"], "V")]
    assert hist(db, ":issue/assignee")[-1] == (t["i"], t["u"], r["tx"], False)
    # retracting i cascades to its components c1 and c2
    r = transact(db, f"[[{op} {t['i']}]]")
    assert r["datoms"] == 6
    assert (cur(db, ":issue/title"), cur(db, ":issue/comment"), cur(db, ":comment/text")) == ([], [], [])
    assert sorted(x[:2] for x in hist(db, ":comment/text") if not x[3]) == [(t["c1"], "c1"), (t["c2"], "c2")]
    # retracting by lookup ref; a non-component ref target is not retracted
    r = transact(db, f'[{{:db/id "w" :user/email "w@x" :user/friend {t["v"]}}}]')
    r = transact(db, f'[[{op} [:user/email "w@x"]]]')
    assert r["datoms"] == 3
    assert cur(db, ":user/name") == [(t["v"], "V")]


@pytest.mark.parametrize("op", [":db/cas", ":db.fn/cas"])
def test_cas(db, op):
    r1 = transact(db, '[{:db/id "u" :user/age 31}]')
    u = r1["tempids"]["u"]
    r2 = transact(db, f"[[{op} {u} :user/age 31 32]]")
    assert r2["datoms"] == 3
    assert hist(db, ":user/age") == [(u, 31, r1["tx"], True), (u, 31, r2["tx"], False), (u, 32, r2["tx"], True)]
    fails(db, f"[[{op} {u} :user/age 99 33]]", "compare-and-swap failed", f"[{op} {u} :user/age 99 33]", "32")
    # nil old value: succeeds only when the entity has no value
    assert transact(db, f'[[{op} {u} :user/name nil "X"]]')["datoms"] == 2
    assert cur(db, ":user/name") == [(u, "X")]
    fails(db, f'[[{op} {u} :user/name nil "Y"]]', "compare-and-swap failed", '"X"')
    fails(db, f"[[{op} {u} :user/age nil 1]]", "compare-and-swap failed", "32")
    # by lookup ref, on a ref attribute
    transact(db, f'[[:db/add {u} :user/email "cas@x"] [:db/add "o" :account/owner {u}]]')
    r = transact(db, f'[[{op} [:user/email "cas@x"] :issue/assignee nil [:user/email "cas@x"]]]')
    assert r["datoms"] == 2 and cur(db, ":issue/assignee") == [(u, u)]
    fails(db, f"[[{op} {u} :user/tags :a :b]]", "cardinality")


def test_tx_instant(db):
    before = dt.datetime.now(UTC)
    r = transact(db, '[[:db/add "x" :user/name "x"]]')
    after = dt.datetime.now(UTC)
    assert before - dt.timedelta(seconds=1) <= r["tx_instant"] <= after + dt.timedelta(seconds=1)
    assert cur(db, 9)[-1] == (r["tx"], r["tx_instant"])
    r = transact(db, '[[:db/add "datomic.tx" :db/txInstant #inst "2031-05-06T07:08:09.000-00:00"] '
                     '[:db/add "y" :user/name "y"]]')
    when = dt.datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)
    assert (r["tx_instant"], r["datoms"]) == (when, 2)
    assert cur(db, 9)[-1] == (r["tx"], when)
    fails(db, '[[:db/add "datomic.tx" :db/txInstant #inst "2030-01-01T00:00:00.000-00:00"]]', "backwards",
          '[:db/add "datomic.tx" :db/txInstant #inst "2030-01-01T00:00:00+00:00"]')
    r = transact(db, '[[:db/add (transaction-tx) :db/txInstant #inst "2032-01-01T00:00:00.000-00:00"]]')
    assert r["tx_instant"] == dt.datetime(2032, 1, 1, tzinfo=UTC)
    # an automatic instant never goes backwards either
    assert transact(db, "[]")["tx_instant"] >= dt.datetime(2032, 1, 1, tzinfo=UTC)


def test_schema_alteration(db):
    fails(db, "[[:db/add :user/age :db/valueType :db.type/string]]", ":user/age", "valueType",
          "[:db/add :user/age :db/valueType :db.type/string]")
    # cardinality many -> one only when no entity holds two values
    r = transact(db, '[{:db/id "a" :user/tags [:p :q]} {:db/id "b" :user/tags [:r]}]')
    a, b = r["tempids"]["a"], r["tempids"]["b"]
    fails(db, "[[:db/add :user/tags :db/cardinality :db.cardinality/one]]", ":user/tags", "cardinality", str(a),
          "[:db/add :user/tags :db/cardinality :db.cardinality/one]")
    transact(db, f"[[:db/retract {a} :user/tags :q]]")
    assert transact(db, "[[:db/add :user/tags :db/cardinality :db.cardinality/one]]")["datoms"] == 3
    assert rows(db, "SELECT cardinality FROM mentat_schema() WHERE ident = ':user/tags'") == [(":db.cardinality/one",)]
    transact(db, f"[[:db/add {a} :user/tags :z]]")
    assert cur(db, ":user/tags") == [(a, ":z"), (b, ":r")]
    # adding :db/unique only when the values are unique
    r = transact(db, '[{:db/id "c" :user/name "same"} {:db/id "d" :user/name "same"}]')
    c, d = r["tempids"]["c"], r["tempids"]["d"]
    fails(db, "[[:db/add :user/name :db/unique :db.unique/identity]]", ":user/name", "unique", '"same"')
    transact(db, f'[[:db/retract {d} :user/name "same"]]')
    transact(db, "[[:db/add :user/name :db/unique :db.unique/identity]]")
    assert rows(db, 'SELECT "unique", "index" FROM mentat_schema() WHERE ident = \':user/name\'') == [
        (":db.unique/identity", True)]
    assert rows(db, "SELECT count(*) FROM duckdb_indexes() WHERE schema_name = 'mentat' AND table_name = ?",
                [f"cur_{A[':user/name']}"]) == [(1,)]
    # ... after which it upserts
    assert transact(db, '[{:db/id "t" :user/name "same" :user/age 3}]')["tempids"] == {"t": c}
    # :db/index true on an installed attribute is recorded; it builds no ART index (only unique attributes have one)
    transact(db, "[[:db/add :user/age :db/index true]]")
    assert rows(db, "SELECT index FROM mentat_schema() WHERE ident = ':user/age'") == [(True,)]
    assert rows(db, "SELECT count(*) FROM duckdb_indexes() WHERE table_name = ?", [f"cur_{A[':user/age']}"]) == [(0,)]
    # fulltext needs a string attribute
    fails(db, "[{:db/ident :doc/n :db/valueType :db.type/long :db/cardinality :db.cardinality/one :db/fulltext true}]",
          ":doc/n", "fulltext")
    # an attribute needs ident, value type and cardinality together
    fails(db, "[{:db/ident :doc/m :db/valueType :db.type/long}]", ":doc/m", "cardinality")
    # a new attribute is usable in the next transaction, with the next :db.part/db entid
    r = transact(db, "[{:db/ident :doc/ok :db/valueType :db.type/boolean :db/cardinality :db.cardinality/one}]")
    assert rows(db, "SELECT entid, value_type FROM mentat_schema() WHERE ident = ':doc/ok'") == [
        (118, ":db.type/boolean")]
    transact(db, '[[:db/add "x" :doc/ok true]]')
    assert cur(db, 118) == [(U0 + 4, True)]


def test_lookup_ref_errors(db):
    u = transact(db, '[{:db/id "u" :user/email "a@b.c" :user/name "x"}]')["tempids"]["u"]
    fails(db, '[[:db/add [:user/name "x"] :user/age 1]]', '[:user/name "x"]', ":user/name", "not :db/unique")
    fails(db, '[[:db/add [:user/email "nobody@x"] :user/age 1]]', '[:user/email "nobody@x"]', "no entity",
          '[:db/add [:user/email "nobody@x"] :user/age 1]')
    fails(db, '[[:db/add (lookup-ref :user/email "nobody@x") :user/age 1]]', '"nobody@x"', "no entity")
    fails(db, '[[:db/add "i" :issue/assignee [:user/email "nobody@x"]]]', '"nobody@x"', "no entity")
    fails(db, '[[:db/add [:user/email 42] :user/age 1]]', "[:user/email 42]", ":db.type/string")
    fails(db, f'[[:db/add {u} :user/name [:user/email "a@b.c"]]]', '[:user/email "a@b.c"]', "not a ref",
          ":user/name")
    fails(db, f'[[:db/add {u} :user/name (lookup-ref :user/email "a@b.c")]]', "not a ref")
    fails(db, '[[:db/add [:no/attr 1] :user/age 1]]', ":no/attr")


def test_malformed_and_invalid_forms(db):
    fails(db, '[[:db/add "x" :user/name "A"]', "malformed EDN")
    fails(db, '[[:db/frob "x" :user/name "A"]]', "unknown operation :db/frob", '[:db/frob "x" :user/name "A"]')
    fails(db, '[[:db/add "x" :user/nope 1]]', 'unknown attribute :user/nope in [:db/add "x" :user/nope 1]')
    fails(db, '[[:db/add "x" :user/age "old"]]', '"old"', ":db.type/long", '[:db/add "x" :user/age "old"]')
    # a double is quoted as a double, as Clojure prints it (not `3`, which reads as a long, nor 301 digits)
    fails(db, '[{:user/age 3.0}]', "value 3.0 does not match :user/age", "{:user/age 3.0}")
    fails(db, '[[:db/add "x" :user/age 1e3]]', "value 1000.0 does not match", '[:db/add "x" :user/age 1000.0]')
    fails(db, '[[:db/add "x" :user/age 1.5e300]]', "value 1.5e300 does not match")
    fails(db, '[[:db/add "x" :user/name]]', "wrong number", '[:db/add "x" :user/name]')
    fails(db, '{:db/id "x"}', "vector")
    fails(db, '[42]', "42")
    # two vectors are two forms, not one transaction of both (edn-format's reader took the first and dropped the
    # second); a comment or a discarded form after the vector is no form
    fails(db, '[[:db/add "x" :user/name "A"]] [[:db/add "y" :user/name "B"]]', "malformed EDN", "line 1, column 32",
          "a second form after the first")
    big = "[" + " ".join(f'[:db/add "t{i}" :user/name "n{i}"]' for i in range(1000)) + "]"
    fails(db, big + " [:db/add \"z\" :user/name \"Z\"]", "a second form after the first")  # read on all cores
    assert transact(db, '[[:db/add "x" :user/name "A"]] ; done\n #_ [[:db/add "y" :user/name "B"]]')["datoms"] == 2
    with pytest.raises(Exception, match="NULL"):
        db.execute("SELECT * FROM mentat_transact(NULL)").fetchall()


def test_failed_transactions_leave_nothing_and_reuse_nothing(db):
    r = transact(db, '[{:db/id "a" :user/ssn "1"} {:db/id "b" :user/ssn "2"}]')
    # fails late: a new attribute, new entities and a unique conflict in one transaction
    fails(db, '[{:db/ident :new/attr :db/valueType :db.type/long :db/cardinality :db.cardinality/one} '
              '[:db/add "n" :user/name "N"] [:db/add "m" :user/ssn "1"]]', "unique", ":user/ssn")
    assert rows(db, "SELECT count(*) FROM mentat_schema() WHERE ident = ':new/attr'") == [(0,)]
    # an attribute is usable from the transaction after the one that installs it, as in Datomic
    fails(db, '[{:db/ident :new/attr :db/valueType :db.type/long :db/cardinality :db.cardinality/one} '
              '[:db/add "n" :new/attr 5]]', "unknown attribute :new/attr", '[:db/add "n" :new/attr 5]')
    r2 = transact(db, '[{:db/ident :new/attr :db/valueType :db.type/long :db/cardinality :db.cardinality/one}]')
    r3 = transact(db, '[[:db/add "n" :new/attr 5]]')
    assert (r2["tx"], r3["tx"]) == (r["tx"] + 1, r["tx"] + 2)
    assert r3["tempids"] == {"n": U0 + 2}
    assert cur_tx(db, 118) == [(U0 + 2, 5, r3["tx"])]


def test_value_types(db):
    transact(db, "[{:db/ident :t/b :db/valueType :db.type/boolean :db/cardinality :db.cardinality/one} "
                 "{:db/ident :t/i :db/valueType :db.type/instant :db/cardinality :db.cardinality/one} "
                 "{:db/ident :t/u :db/valueType :db.type/uuid :db/cardinality :db.cardinality/one} "
                 "{:db/ident :t/r :db/valueType :db.type/uri :db/cardinality :db.cardinality/one} "
                 "{:db/ident :t/y :db/valueType :db.type/bytes :db/cardinality :db.cardinality/one}]")
    transact(db, '[{:db/id "x" :user/score 2.5 :t/b false :t/i #inst "2020-02-03T04:05:06.007-00:00" '
                 ':t/u #uuid "f81d4fae-7dec-11d0-a765-00a0c91e6bf6" :t/r "https://x.y/z" :t/y "bytes"}]')
    x = U0
    import uuid
    assert cur(db, ":user/score") == [(x, 2.5)]
    assert cur(db, 118) == [(x, False)]
    assert cur(db, 119) == [(x, dt.datetime(2020, 2, 3, 4, 5, 6, 7000, tzinfo=UTC))]
    assert cur(db, 120) == [(x, uuid.UUID("f81d4fae-7dec-11d0-a765-00a0c91e6bf6"))]
    assert cur(db, 121) == [(x, "https://x.y/z")]
    assert cur(db, 122) == [(x, b"bytes")]
    # replacing and retracting typed values
    r = transact(db, f'[[:db/add {x} :t/u #uuid "00000000-0000-0000-0000-000000000001"] '
                     f'[:db/retract {x} :t/i #inst "2020-02-03T04:05:06.007-00:00"] [:db/add {x} :user/score 3]]')
    assert r["datoms"] == 6
    assert cur(db, 119) == [] and cur(db, ":user/score") == [(x, 3.0)]
    assert cur(db, 120) == [(x, uuid.UUID(int=1))]
    # a uri written with the #uri tag is the same value as its string
    transact(db, f'[[:db/add {x} :t/r #uri "https://x.y/w?q=1"]]')
    assert cur(db, 121) == [(x, "https://x.y/w?q=1")]
    got = db.execute("SELECT * FROM mentat_q('[:find ?e :where [?e :t/r #uri \"https://x.y/w?q=1\"]]')").fetchall()
    assert got == [(x,)]
    fails(db, f'[[:db/add {x} :t/r #uri 5]]', "#uri 5", ":db.type/uri")


def test_through_the_cli(tmp_path):
    path = tmp_path / "cli.duckdb"
    schema = SCHEMA.replace("'", "''")
    rc, out, err = cli(
        f"SELECT tx, datoms FROM mentat_transact('{schema}');\n"
        "SELECT tx, datoms, tempids FROM mentat_transact('[{:db/id \"u\" :user/email \"a@b.c\" :user/age 1}]');\n"
        "SELECT datoms FROM mentat_transact('[[:db/add (lookup-ref :user/email \"a@b.c\") :user/age 2] "
        "[:db/add [:user/email \"a@b.c\"] :user/tags :x]]');\n"
        "SELECT datoms FROM mentat_transact('[[:db/cas [:user/email \"a@b.c\"] :user/age 2 3]]');\n"
        "SELECT e, v, tx, added FROM mentat_q('[:find ?e ?v ?tx ?added :where [?e :user/age ?v ?tx ?added]]', "
        "history := true) ORDER BY tx, added;\n"
        "SELECT ident, cardinality, \"unique\" FROM mentat_schema() WHERE entid = 100;\n", db=path)
    assert rc == 0, err
    assert out.splitlines() == [
        "tx,datoms", f"{T0 + 1},59",
        "tx,datoms,tempids", f"{T0 + 2},3,{{u={U0}}}",
        "datoms", "4",
        "datoms", "3",
        "e,v,tx,added",
        f"{U0},1,{T0 + 2},true", f"{U0},1,{T0 + 3},false", f"{U0},2,{T0 + 3},true",
        f"{U0},2,{T0 + 4},false", f"{U0},3,{T0 + 4},true",
        "ident,cardinality,unique", ":user/email,:db.cardinality/one,:db.unique/identity"]
    # an error in the CLI names the form and leaves the store as it was
    rc, out, err = cli("SELECT * FROM mentat_transact('[[:db/add [:user/email \"no@x\"] :user/age 1]]');", db=path)
    assert rc != 0 and '[:user/email "no@x"]' in err + out, (out, err)
    rc, out, err = cli("SELECT * FROM mentat_transact('[[:db/add \"u\" :user/age 1] "
                       "[:db/add \"u\" :user/age 2]]');", db=path)
    assert rc != 0 and ":user/age" in err + out
    rc, out, err = cli(f"SELECT count(*) FROM mentat.hist_{A[':user/age']}; "
                       "SELECT tx, tempids FROM mentat_transact('[[:db/add \"n\" :user/name \"n\"]]');", db=path)
    # the failed transactions left history as it was: the two retracted ages (1 and 2), 3 being current
    assert rc == 0 and out.splitlines() == ["count_star()", "2", "tx,tempids", f"{T0 + 5},{{n={U0 + 1}}}"], (out, err)


def test_idents_rename_and_lookup_by_ident(db):
    # an ident is a :db.unique/identity keyword, so [:db/ident :user/email] is a lookup ref for entid 100
    assert transact(db, '[[:db/add [:db/ident :user/email] :db/doc "by lookup"]]')["datoms"] == 3
    assert rows(db, "SELECT doc FROM mentat_schema() WHERE entid = 100") == [("by lookup",)]
    # renaming an attribute keeps its entid and its datoms
    u = transact(db, '[[:db/add "u" :user/age 5]]')["tempids"]["u"]
    r = transact(db, "[[:db/add :user/age :db/ident :user/years]]")
    assert r["datoms"] == 3
    assert rows(db, "SELECT ident FROM mentat_schema() WHERE entid = 102") == [(":user/years",)]
    assert transact(db, f"[[:db/add {u} :user/years 6]]")["datoms"] == 3
    assert cur(db, 102) == [(u, 6)]
    fails(db, f"[[:db/add {u} :user/age 7]]", "unknown attribute :user/age")
    # retracting the ident of an enum entity forgets the ident
    transact(db, "[[:db/retract :state/closed :db/ident :state/closed]]")
    fails(db, '[[:db/add "i" :issue/state :state/closed]]', ":state/closed")
    assert transact(db, '[[:db/add "i" :issue/state :state/open]]')["datoms"] == 2


def test_retract_with_lookup_ref_values(db):
    r = transact(db, '[{:db/id "u" :user/email "a@x"} {:db/id "i" :issue/assignee "u" :issue/label ["l"]} '
                     '{:db/id "l" :label/name "L"}]')
    i = r["tempids"]["i"]
    r = transact(db, f'[[:db/retract {i} :issue/assignee [:user/email "a@x"]] '
                     f'[:db/retract {i} :issue/label (lookup-ref :label/name "L")]]')
    assert r["datoms"] == 3
    assert cur(db, ":issue/assignee") == [] and cur(db, ":issue/label") == []


def test_tempid_used_only_as_a_value_is_refused(db):
    """Datomic's :db.error/tempid-not-an-entity: a tempid that no datom is about names no entity."""
    fails(db, '[[:db/add "a" :user/friend "b"]]', "tempid-not-an-entity", '"b"', '[:db/add "a" :user/friend "b"]')
    fails(db, '[{:user/email "x@y" :user/friend ["b" "c"]}]', "tempid-not-an-entity", '"b"')
    # a tempid that is also an entity somewhere in the transaction is fine, whatever the order
    r = transact(db, '[[:db/add "a" :user/friend "b"] [:db/add "b" :user/name "B"]]')
    assert cur(db, ":user/friend") == [(r["tempids"]["a"], r["tempids"]["b"])]


def test_an_entid_the_store_has_not_allocated_is_refused(db):
    """Mozilla Mentat's UnallocatedEntid: an entid in an entity position or as a ref value must be one a partition
    has allocated (here: the user partition holds U0 only after one tempid), not a number made up; a negative number
    is DataScript's tempid and gets the hint to write a string tempid."""
    u = transact(db, '[{:db/id "u" :user/email "u@x"}]')["tempids"]["u"]
    assert u == U0
    fails(db, '[[:db/add -1 :user/name "N"]]', "entid -1 names no entity", "has not allocated", 'such as "-1"',
          "DataScript's tempid")
    fails(db, '[{:db/id -7 :user/name "N"}]', "entid -7 names no entity", '{:db/id -7 :user/name "N"}')
    fails(db, f'[[:db/add {U0 + 1} :user/name "N"]]', f"entid {U0 + 1} names no entity")  # the next, not yet given
    fails(db, f'[[:db/add {u} :user/friend 999999]]', "entid 999999 names no entity", ":user/friend 999999")
    fails(db, '[[:db/retract 4242424 :user/name "N"]]', "entid 4242424 names no entity")
    fails(db, f'[[:db/add {T0 + 99} :user/name "N"]]', f"entid {T0 + 99} names no entity")
    # allocated ones are entities: the user entity, an attribute of the schema, the transaction just run
    transact(db, f'[[:db/add {u} :user/name "U"]]')
    assert cur(db, ":user/name") == [(u, "U")]


def test_a_tempid_that_makes_a_new_entity_is_not_retracted(db):
    """A tempid that upserts to no entity makes a new one, which holds nothing to retract: DataScript refuses every
    tempid outside :db/add ("Tempids are allowed in :db/add only"); mentat refuses it in a retraction, a
    retractEntity, a retractAttribute or a cas unless it upserts to an existing entity, where the retraction means
    something."""
    u = transact(db, '[{:db/id "u" :user/email "u@x" :user/name "U"}]')["tempids"]["u"]
    for form in ['[:db/retract "t" :user/name "U"]', '[:db/retractEntity "nope"]',
                 '[:db.fn/retractAttribute "t" :user/name]', '[:db/cas "t" :user/name nil "x"]']:
        fails(db, f"[{form}]", "names a new entity, which has nothing to retract", f"form {form}:")
    fails(db, '[[:db/add "a" :user/friend "b"] [:db/retractEntity "b"]]', 'tempid "b" names a new entity',
          'form [:db/retractEntity "b"]:')
    # upserted through :user/email, "t" is the existing entity: its name is retracted
    r = transact(db, '[{:db/id "t" :user/email "u@x"} [:db/retract "t" :user/name "U"]]')
    assert r["tempids"] == {"t": u} and cur(db, ":user/name") == []


def test_components_must_be_refs(db):
    """Datomic's :db.error/components-must-be-refs, on installing and on altering an attribute."""
    fails(db, "[{:db/ident :x/part :db/valueType :db.type/long :db/cardinality :db.cardinality/one "
              ":db/isComponent true}]", "components-must-be-refs", ":x/part")
    fails(db, "[{:db/id :user/age :db/isComponent true}]", "components-must-be-refs", ":user/age")


def test_schema_alteration_rules(db):
    """What Datomic and Mentat refuse when an installed attribute is altered: a new value type, a change of
    :db/fulltext, retracting its value type or cardinality; each fails alone and leaves the schema as it was."""
    transact(db, "[{:db/ident :doc/body :db/valueType :db.type/string :db/cardinality :db.cardinality/one}]")
    before = rows(db, "SELECT * FROM mentat_schema() ORDER BY entid")
    fails(db, "[{:db/ident :doc/body :db/valueType :db.type/long}]", ":doc/body", "valueType never changes")
    fails(db, "[{:db/ident :doc/body :db/fulltext true}]", ":doc/body", "fulltext cannot be changed")
    fails(db, "[[:db/retract :doc/body :db/valueType :db.type/string]]", ":doc/body", ":db/valueType and")
    fails(db, "[[:db/retract :doc/body :db/cardinality :db.cardinality/one]]", ":doc/body", "keeps its")
    # the attribute is named by the ident it had, and the form that reached it is named
    fails(db, "[[:db/retract :doc/body :db/ident :doc/body]]", "schema error for :doc/body", "keeps its :db/ident")
    fails(db, "[[:db/retractEntity :db.type/string]]", "in [:db/retractEntity :db.type/string]", "keeps its")
    assert rows(db, "SELECT * FROM mentat_schema() ORDER BY entid") == before
    # a unique attribute may be cardinality-many (Datomic allows it): any of its values identifies the entity
    transact(db, "[{:db/ident :doc/alias :db/valueType :db.type/string :db/cardinality :db.cardinality/many "
                 ":db/unique :db.unique/identity}]")
    a = transact(db, '[{:db/id "a" :doc/alias ["x" "y"]}]')["tempids"]["a"]
    assert transact(db, '[{:db/id "b" :doc/alias ["y" "z"]}]')["tempids"] == {"b": a}
    got = rows(db, "SELECT v FROM mentat_q('[:find ?v :in $ ?e :where [?e :doc/alias ?v]]', inputs := ?)", [f"[{a}]"])
    assert sorted(r[0] for r in got) == ["x", "y", "z"]


def test_cardinality_many_values_as_a_list(db):
    """Datomic's grammar takes a cardinality-many attribute's values as a list, a vector or a set."""
    r = transact(db, '[{:db/id "u" :user/email "l@x" :user/tags (:a :b)} {:db/id "f" :user/name "F"} '
                     '{:db/id "g" :user/name "G"} {:db/id "u" :user/friend ("f" "g")}]')
    u, f, g = r["tempids"]["u"], r["tempids"]["f"], r["tempids"]["g"]
    assert [v for e, v in cur(db, ":user/tags") if e == u] == [":a", ":b"]
    assert [v for e, v in cur(db, ":user/friend") if e == u] == sorted([f, g])
    # a list of one value for a cardinality-one attribute is one value; of two, an error
    fails(db, '[{:user/email "m@x" :user/name ("a" "b")}]', "cardinality one", "2 values")
    # the list forms of a lookup ref and of the transaction stay entity references
    r = transact(db, '[{:db/id "v" :user/name "V" :user/friend (lookup-ref :user/email "l@x")}]')
    assert [v for e, v in cur(db, ":user/friend") if e == r["tempids"]["v"]] == [u]


def test_the_transaction_tempid_is_reported(db):
    """Datomic's tempids map names "datomic.tx" when the transaction data does."""
    r = transact(db, '[[:db/add "datomic.tx" :db/doc "why"] [:db/add "p" :user/name "P"]]')
    assert r["tempids"] == {"datomic.tx": r["tx"], "p": r["tempids"]["p"]}
    assert "datomic.tx" not in transact(db, '[[:db/add "q" :user/name "Q"]]')["tempids"]


# Datomic sets :db/txInstant only on the transaction being committed ("datomic.tx", (transaction-tx)); a
# transaction's instant never changes afterwards, since time travel by instant (as_of := TIMESTAMPTZ ...) picks
# transactions by it.
TX_RULE = "only the transaction being committed takes a :db/txInstant"


def tx_instants(con, tx):
    """(v, added) of every :db/txInstant datom ever asserted or retracted about entity `tx`."""
    return con.execute("SELECT v::VARCHAR, added FROM mentat_datoms('EAVT', history := true) "
                       "WHERE e = ? AND a = ':db/txInstant' ORDER BY tx, added", [tx]).fetchall()


def names_as_of(con, when):
    """The :user/name values as of the instant `when` (SQL TIMESTAMPTZ text), sorted."""
    return sorted(con.execute("SELECT * FROM mentat_q('[:find ?n :where [_ :user/name ?n]]', "
                              f"as_of := TIMESTAMPTZ '{when}')").fetchall())


def test_a_past_transactions_instant_never_changes(db):
    t1 = transact(db, '[[:db/add "datomic.tx" :user/email "tx1@x"] [:db/add "a" :user/name "a"]]')
    t2 = transact(db, '[[:db/add "b" :user/name "b"]]')
    tx1, inst1 = t1["tx"], t1["tx_instant"]
    assert t1["tempids"]["datomic.tx"] == tx1
    before = tx_instants(db, tx1)
    assert len(before) == 1 and before[0][1] is True
    at1 = inst1.isoformat()  # EDN #inst text of t1's instant
    old = f'#inst "{at1}"'
    new = '#inst "2001-01-01T00:00:00.000-00:00"'
    written_new = '#inst "2001-01-01T00:00:00+00:00"'
    refused = [
        # asserting it on a past transaction: by entid, by lookup ref, by a tempid that upserts to it
        (f"[[:db/add {tx1} :db/txInstant {new}]]", f"[:db/add {tx1} :db/txInstant {written_new}]", TX_RULE),
        (f'[[:db/add [:user/email "tx1@x"] :db/txInstant {new}]]',
         f'[:db/add [:user/email "tx1@x"] :db/txInstant {written_new}]', TX_RULE),
        (f'[{{:db/id "t" :user/email "tx1@x" :db/txInstant {new}}}]', ":db/txInstant", TX_RULE),
        # on any entity but the transaction being committed: a tempid other than "datomic.tx", a map without
        # :db/id, an existing entity, an ident
        (f'[[:db/add "t" :db/txInstant {new}]]', f'[:db/add "t" :db/txInstant {written_new}]', TX_RULE),
        (f"[{{:db/txInstant {new}}}]", f"{{:db/txInstant {written_new}}}", TX_RULE),
        (f"[[:db/add {t2['tempids']['b']} :db/txInstant {new}]]", ":db/txInstant", TX_RULE),
        (f"[[:db/add :user/name :db/txInstant {new}]]", f"[:db/add :user/name :db/txInstant {written_new}]",
         TX_RULE),
        # retracting it, or compare-and-swapping it
        (f"[[:db/retract {tx1} :db/txInstant {old}]]", f"[:db/retract {tx1} :db/txInstant", "never retracted"),
        (f"[[:db/retract {tx1} :db/txInstant]]", f"[:db/retract {tx1} :db/txInstant]", "never retracted"),
        (f"[[:db.fn/retractAttribute {tx1} :db/txInstant]]", f"[:db.fn/retractAttribute {tx1} :db/txInstant]",
         "never retracted"),
        (f"[[:db/cas {tx1} :db/txInstant {old} {new}]]", f"[:db/cas {tx1} :db/txInstant", "never retracted"),
        # retracting a transaction entity, which would take its instant with it
        (f"[[:db/retractEntity {tx1}]]", f"[:db/retractEntity {tx1}]", "is a transaction"),
        (f"[[:db.fn/retractEntity {tx1}]]", f"[:db.fn/retractEntity {tx1}]", "is a transaction"),
        ('[[:db/retractEntity [:user/email "tx1@x"]]]', '[:db/retractEntity [:user/email "tx1@x"]]',
         "is a transaction"),
    ]
    for edn, form, why in refused:
        msg = fails(db, edn, form, why)
        assert ":db/txInstant" in msg and "never changes" in msg, msg
        assert tx_instants(db, tx1) == before, edn
    # time travel by instant still picks t1 by its own instant, and nothing before it
    assert names_as_of(db, "2002-01-01 00:00:00+00") == []
    assert names_as_of(db, inst1.isoformat()) == [("a",)]
    assert names_as_of(db, t2["tx_instant"].isoformat()) == [("a",), ("b",)]
    assert rows(db, f"SELECT count(*) FROM mentat.cur_9 WHERE e = {tx1}") == [(1,)]
    assert rows(db, f"SELECT count(*) FROM mentat.hist_9 WHERE e = {tx1}") == [(0,)]

    # what stays allowed: the current transaction's own instant (not backwards), annotating a past transaction
    # with other attributes, retracting those annotations, retractEntity of ordinary entities
    r = transact(db, '[[:db/add "datomic.tx" :db/txInstant #inst "2040-01-01T00:00:00.000-00:00"] '
                     '[:db/add "datomic.tx" :db/doc "import"] [:db/add "c" :user/name "c"]]')
    assert r["tx_instant"] == dt.datetime(2040, 1, 1, tzinfo=UTC)
    assert rows(db, f"SELECT v FROM mentat.cur_9 WHERE e = {r['tx']}") == [(dt.datetime(2040, 1, 1, tzinfo=UTC),)]
    r = transact(db, '[[:db/add (transaction-tx) :db/txInstant #inst "2041-01-01T00:00:00.000-00:00"]]')
    assert r["tx_instant"] == dt.datetime(2041, 1, 1, tzinfo=UTC)
    fails(db, '[[:db/add "datomic.tx" :db/txInstant #inst "2039-01-01T00:00:00.000-00:00"]]', "backwards")
    assert transact(db, f'[[:db/add {tx1} :user/name "annotated"]]')["datoms"] == 2
    assert transact(db, f'[[:db/retract {tx1} :user/name "annotated"]]')["datoms"] == 2
    assert transact(db, f"[[:db/retractEntity {t2['tempids']['b']}]]")["datoms"] == 2
    assert tx_instants(db, tx1) == before
    assert names_as_of(db, inst1.isoformat()) == [("a",)]


def datom_count(con):
    """Datoms ever asserted or retracted in the default store."""
    return con.execute("SELECT count(*) FROM mentat_datoms('EAVT', history := true)").fetchone()[0]


@pytest.mark.parametrize("path", ["transact", "serial", "log", "tx", "many"])
def test_no_write_path_changes_a_past_instant(path, tmp_path):
    """The refusal holds on every write path: mentat_transact through group commit, the transactor without it
    (MENTAT_GROUP_COMMIT=0), a group written to the transaction log (attributes held by the entity index),
    mentat_tx, and mentat_transact_many, where the refused member fails alone and its neighbours commit."""
    import duckdb
    from test_group_commit import SCHEMA as U_SCHEMA, many, warm_index
    env = {"MENTAT_GROUP_COMMIT": "0"} if path == "serial" else {}
    if path == "log":
        env["MENTAT_LOG_IDLE_MS"] = "600000"
    con = connect_with(tmp_path / "p.duckdb", **env)
    transact(con, U_SCHEMA)
    t1 = transact(con, '[{:u/email "a@x" :u/n 1}]')
    if path == "log":
        warm_index(con)
    tx1 = t1["tx"]
    before = tx_instants(con, tx1)
    refused = [f'[[:db/add {tx1} :db/txInstant #inst "2001-01-01T00:00:00.000-00:00"]]',
               '[[:db/add "t" :db/txInstant #inst "2001-01-01T00:00:00.000-00:00"] [:db/add "t" :u/n 5]]',
               f'[[:db/retract {tx1} :db/txInstant #inst "{t1["tx_instant"].isoformat()}"]]',
               f"[[:db/retractEntity {tx1}]]"]
    for edn in refused:
        n = datom_count(con)
        if path == "many":
            got = many(con, ['[{:u/email "b@x" :u/n 2}]', edn, '[[:db/add [:u/email "b@x"] :u/n 3]]'])
            assert [r["error"] is None for r in got] == [True, False, True], got
            assert "never changes" in got[1]["error"] and got[1]["tx"] is None
            assert got[2]["tx"] == got[0]["tx"] + 1  # the refused member took no tx
            assert datom_count(con) == n + got[0]["datoms"] + got[2]["datoms"]
        else:
            with pytest.raises(duckdb.Error, match="never changes"):
                if path == "tx":
                    con.execute("SELECT mentat_tx(?)", [edn]).fetchall()
                else:
                    transact(con, edn)
            assert datom_count(con) == n, edn
        assert tx_instants(con, tx1) == before, edn
    ns = "[:find ?n :where [_ :u/n ?n]]"
    early = f"SELECT * FROM mentat_q('{ns}', as_of := TIMESTAMPTZ '2002-01-01 00:00:00+00')"
    assert con.execute(early).fetchall() == []
    assert con.execute(f"SELECT * FROM mentat_q('{ns}', as_of := ?)", [t1["tx_instant"]]).fetchall() == [(1,)]
    # the current transaction's own instant still goes through every path
    edn = '[[:db/add "datomic.tx" :db/txInstant #inst "2040-01-01T00:00:00.000-00:00"] [:db/add "t" :u/n 7]]'
    if path == "many":
        tx = many(con, [edn])[0]["tx"]
    elif path == "tx":
        tx = con.execute("SELECT mentat_tx(?)", [edn]).fetchone()[0]
    else:
        tx = transact(con, edn)["tx"]
    assert [a for _, a in tx_instants(con, tx)] == [True]
    assert str(2040) in tx_instants(con, tx)[0][0]
    con.close()
