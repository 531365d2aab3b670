"""Datomic's tuples (https://docs.datomic.com/schema/schema-reference.html#tuples): composite tuples of
`:db/tupleAttrs` kept by the transactor, homogeneous (`:db/tupleType`) and heterogeneous (`:db/tupleTypes`)
tuples, as values, unique keys, lookup refs, query constants, inputs, `tuple`/`untuple`, pull and Parquet.

A fixed tuple (composite or `:db/tupleTypes`) is a DuckDB STRUCT with fields f0, f1, ... (a dict in Python); a
homogeneous one is a LIST. Expected values are the tuples the transactions state, worked out by hand from
Datomic's documented rules: a composite holds its components' current values with nil for an absent one, is
replaced when a component changes and retracted when every component is gone, and is never asserted directly."""
import duckdb
import pytest

from conftest import rows, transact

SCHEMA = """[{:db/ident :student/email :db/valueType :db.type/string :db/cardinality :db.cardinality/one
              :db/unique :db.unique/identity}
             {:db/ident :reg/course :db/valueType :db.type/string :db/cardinality :db.cardinality/one}
             {:db/ident :reg/semester :db/valueType :db.type/keyword :db/cardinality :db.cardinality/one}
             {:db/ident :reg/student :db/valueType :db.type/ref :db/cardinality :db.cardinality/one}
             {:db/ident :reg/grade :db/valueType :db.type/long :db/cardinality :db.cardinality/one}
             {:db/ident :reg/course+semester+student :db/valueType :db.type/tuple
              :db/tupleAttrs [:reg/course :reg/semester :reg/student]
              :db/cardinality :db.cardinality/one :db/unique :db.unique/identity}
             {:db/ident :p/name :db/valueType :db.type/string :db/cardinality :db.cardinality/one
              :db/unique :db.unique/identity}
             {:db/ident :p/point :db/valueType :db.type/tuple :db/tupleTypes [:db.type/long :db.type/string]
              :db/cardinality :db.cardinality/one}
             {:db/ident :p/scores :db/valueType :db.type/tuple :db/tupleType :db.type/long
              :db/cardinality :db.cardinality/many}]"""

KEY = ":reg/course+semester+student"


def q(con, query, inputs=None, **named):
    args = ["?"] + (["inputs := ?"] if inputs is not None else []) + [f"{k} := ?" for k in named]
    params = [query] + ([inputs] if inputs is not None else []) + list(named.values())
    return rows(con, f"SELECT * FROM mentat_q({', '.join(args)})", params)


class Db:
    """A connection with the entids of the two students."""

    def __init__(self, con, ann, bob):
        self.con, self.ann, self.bob = con, ann, bob

    def execute(self, *args):
        return self.con.execute(*args)


@pytest.fixture
def db(con):
    transact(con, SCHEMA)
    r = transact(con, '[{:db/id "s" :student/email "ann@x"} {:db/id "t" :student/email "bob@x"}]')
    return Db(con, r["tempids"]["s"], r["tempids"]["t"])


def composite(con, course):
    return q(con, f'[:find ?t :where [?r :reg/course "{course}"] [?r {KEY} ?t]]')


def test_schema_of_tuple_attributes_is_datoms(db):
    got = q(db, "[:find ?ta :where [?a :db/ident :reg/course+semester+student] [?a :db/tupleAttrs ?ta]]")
    ids = dict(q(db, "[:find ?i ?e :where [?e :db/ident ?i]]"))
    assert got == [([ids[":reg/course"], ids[":reg/semester"], ids[":reg/student"]],)]
    got = q(db, "[:find ?tt :where [?a :db/ident :p/point] [?a :db/tupleTypes ?tt]]")
    assert got == [([ids[":db.type/long"], ids[":db.type/string"]],)]
    got = q(db, "[:find ?t . :where [?a :db/ident :p/scores] [?a :db/tupleType ?t]]")
    assert got == [(ids[":db.type/long"],)]
    schema = dict(rows(db, "SELECT ident, value_type FROM mentat_schema()"))
    assert schema[KEY] == ":db.type/tuple"


def test_composite_follows_its_components(db):
    r = transact(db, '[{:db/id "r" :reg/course "math" :reg/student [:student/email "ann@x"]}]')
    reg = r["tempids"]["r"]
    # The semester is absent: nil in its place.
    assert composite(db, "math") == [({"f0": "math", "f1": None, "f2": db.ann},)]
    transact(db, f"[[:db/add {reg} :reg/semester :fall]]")
    assert composite(db, "math") == [({"f0": "math", "f1": ":fall", "f2": db.ann},)]
    # History keeps the replaced composite.
    hist = q(db, f"[:find ?t ?added :where [{reg} {KEY} ?t ?tx ?added]]", history=True)
    assert sorted(hist, key=lambda x: (x[0]["f1"] or "", x[1])) == [
        ({"f0": "math", "f1": None, "f2": db.ann}, False),
        ({"f0": "math", "f1": None, "f2": db.ann}, True),
        ({"f0": "math", "f1": ":fall", "f2": db.ann}, True),
    ]
    # Every component retracted: the composite goes too.
    transact(db, f'[[:db/retract {reg} :reg/course "math"] [:db/retract {reg} :reg/semester :fall]'
                 f' [:db/retract {reg} :reg/student {db.ann}]]')
    assert q(db, f"[:find ?t :where [{reg} {KEY} ?t]]") == []


def test_composite_is_an_identity_for_upserts_lookup_refs_and_queries(db):
    r = transact(db, '[{:db/id "r" :reg/course "math" :reg/semester :fall :reg/student [:student/email "ann@x"]}]')
    reg = r["tempids"]["r"]
    # A new tempid stating every component upserts into the registration that has them.
    r2 = transact(db, f'[{{:db/id "x" :reg/course "math" :reg/semester :fall :reg/student {db.ann} :reg/grade 4}}]')
    assert r2["tempids"]["x"] == reg
    # A lookup ref names the registration by its composite.
    transact(db, f'[[:db/add [{KEY} ["math" :fall {db.ann}]] :reg/grade 5]]')
    assert q(db, f"[:find ?g . :where [{reg} :reg/grade ?g]]") == [(5,)]
    # A tuple constant and a tuple input match the composite; so does (tuple ...) of the parts.
    assert q(db, f'[:find ?r . :where [?r {KEY} ["math" :fall {db.ann}]]]') == [(reg,)]
    assert q(db, f"[:find ?r . :in $ ?t :where [?r {KEY} ?t]]", f'[["math" :fall {db.ann}]]') == [(reg,)]
    assert q(db, f"[:find ?r . :in $ ?c ?s :where [(tuple ?c :fall ?s) ?t] [?r {KEY} ?t]]",
             f'["math" {db.ann}]') == [(reg,)]
    assert q(db, f'[:find ?c ?s ?p :where [?r {KEY} ?t] [(untuple ?t) [?c ?s ?p]]]') == [("math", ":fall", db.ann)]


def test_composite_unique_conflicts_and_direct_assertion_are_refused(db):
    transact(db, f'[{{:reg/course "math" :reg/semester :fall :reg/student {db.ann}}}]')
    r = transact(db, f'[{{:db/id "b" :reg/course "bio" :reg/semester :fall :reg/student {db.ann}}}]')
    bio = r["tempids"]["b"]
    before = q(db, f"[:find ?r ?t :where [?r {KEY} ?t]]")
    # Moving the second registration onto the first one's key is a unique conflict; nothing is written.
    with pytest.raises(duckdb.Error, match="unique conflict: :reg/course\\+semester\\+student"):
        transact(db, f'[[:db/add {bio} :reg/course "math"]]')
    with pytest.raises(duckdb.Error, match="composite tuple"):
        transact(db, f'[[:db/add {bio} {KEY} ["x" :fall {db.ann}]]]')
    assert q(db, f"[:find ?r ?t :where [?r {KEY} ?t]]") == before
    assert q(db, f"[:find ?c . :where [{bio} :reg/course ?c]]") == [("bio",)]


def test_retract_entity_takes_the_composite_with_it(db):
    r = transact(db, f'[{{:db/id "r" :reg/course "math" :reg/semester :fall :reg/student {db.ann}}}]')
    transact(db, f'[[:db/retractEntity {r["tempids"]["r"]}]]')
    assert q(db, f"[:find ?r :where [?r {KEY} _]]") == []


def test_heterogeneous_tuples(db):
    transact(db, '[{:p/name "a" :p/point [1 "x"]} {:p/name "b" :p/point [2 nil]}]')
    got = q(db, "[:find ?n ?p :where [?e :p/name ?n] [?e :p/point ?p]]")
    assert sorted(got) == [("a", {"f0": 1, "f1": "x"}), ("b", {"f0": 2, "f1": None})]
    assert q(db, '[:find ?n :where [?e :p/point [1 "x"]] [?e :p/name ?n]]') == [("a",)]
    # A nil element binds NULL, as Datomic binds nil.
    assert set(q(db, "[:find ?x ?y :where [_ :p/point ?p] [(untuple ?p) [?x ?y]]]")) == {(1, "x"), (2, None)}
    # Cardinality one: a new tuple replaces the old.
    transact(db, '[{:p/name "a" :p/point [3 "z"]}]')
    assert q(db, '[:find ?p . :where [?e :p/name "a"] [?e :p/point ?p]]') == [({"f0": 3, "f1": "z"},)]
    for bad, needle in [('[1 "x" 3]', "2 elements"), ('["x" 1]', "element 0 must be a long"), ("5", "vector")]:
        with pytest.raises(duckdb.Error, match=needle):
            transact(db, f'[{{:p/name "c" :p/point {bad}}}]')
    assert q(db, '[:find ?e :where [?e :p/name "c"]]') == []


def test_homogeneous_tuples(db):
    transact(db, '[{:p/name "a" :p/scores [[1 2] [3 4 5]]} {:p/name "b" :p/scores [[1 2]]}]')
    got = q(db, '[:find ?s :where [?e :p/name "a"] [?e :p/scores ?s]]')
    assert sorted(got) == [([1, 2],), ([3, 4, 5],)]
    assert sorted(q(db, "[:find ?n :where [?e :p/scores [1 2]] [?e :p/name ?n]]")) == [("a",), ("b",)]
    assert sorted(q(db, "[:find ?n :in $ [?t ...] :where [?e :p/scores ?t] [?e :p/name ?n]]",
                    "[[[3 4 5] [9 9]]]")) == [("a",)]
    # (tuple 1 2) is a fixed tuple of longs: it equals the homogeneous [1 2].
    assert sorted(q(db, "[:find ?n :where [(tuple 1 2) ?t] [?e :p/scores ?t] [?e :p/name ?n]]")) == [("a",), ("b",)]
    # untuple binds as many variables as a tuple has elements: [3 4 5] does not bind [?x ?y].
    assert sorted(q(db, "[:find ?x ?y :where [?e :p/scores ?s] [(untuple ?s) [?x ?y]]]")) == [(1, 2)]
    with pytest.raises(duckdb.Error, match="2 to 8 elements"):
        transact(db, '[{:p/name "c" :p/scores [[1]]}]')


def test_pull_and_parquet(db, tmp_path):
    transact(db, f'[{{:db/id "r" :reg/course "math" :reg/semester :fall :reg/student {db.ann}}}'
                 ' {:p/name "a" :p/point [1 "x"] :p/scores [[1 2]]}]')
    got = rows(db, "SELECT pull FROM mentat_pull('[:p/point :p/scores]', '[:p/name \"a\"]')")[0][0]
    assert got == {"p/point": {"f0": 1, "f1": "x"}, "p/scores": [[1, 2]]}
    star = rows(db, f"SELECT pull FROM mentat_pull('[*]', '[{KEY} [\"math\" :fall {db.ann}]]')")[0][0]
    assert star[KEY[1:]] == {"f0": "math", "f1": ":fall", "f2": db.ann}
    rows(db, "SELECT * FROM mentat_export(?)", [str(tmp_path / "x")])
    rows(db, "SELECT * FROM mentat_import_store(?, store := 'copy')", [str(tmp_path / "x")])
    query = f"[:find ?t ?p ?s :where [?r {KEY} ?t] [?e :p/point ?p] [?e :p/scores ?s]]"
    assert q(db, query, store="copy") == q(db, query) != []


@pytest.mark.parametrize("attr, needle", [
    ("{:db/ident :x/t :db/valueType :db.type/tuple :db/cardinality :db.cardinality/one}",
     "needs one of :db/tupleAttrs"),
    ("{:db/ident :x/t :db/valueType :db.type/tuple :db/tupleTypes [:db.type/long] :db/cardinality :db.cardinality/one}",
     "2 to 8 elements, not 1"),
    ("{:db/ident :x/t :db/valueType :db.type/tuple :db/tupleType :db.type/bytes :db/cardinality :db.cardinality/one}",
     "not a scalar type"),
    ("{:db/ident :x/t :db/valueType :db.type/tuple :db/tupleAttrs [:reg/course :p/scores]"
     " :db/cardinality :db.cardinality/one}", "names the tuple :p/scores"),
    ("{:db/ident :x/many :db/valueType :db.type/long :db/cardinality :db.cardinality/many}"
     " {:db/ident :x/t :db/valueType :db.type/tuple :db/tupleAttrs [:reg/course :x/many]"
     " :db/cardinality :db.cardinality/one}", ":x/many, which is :db.cardinality/many"),
])
def test_tuple_schema_rules(db, attr, needle):
    with pytest.raises(duckdb.Error, match=needle):
        transact(db, f"[{attr}]")
    assert rows(db, "SELECT count(*) FROM mentat_schema() WHERE ident LIKE ':x/%'") == [(0,)]
