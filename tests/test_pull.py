"""mentat_pull / mentat_pull_many: Datomic's pull patterns as typed STRUCT values (shape rules in planner/src/pull.rs)."""
import json
import sys

import duckdb
import pyarrow as pa
import pytest

from conftest import transact

SCHEMA = """[
 {:db/ident :user/email :db/valueType :db.type/string :db/cardinality :db.cardinality/one :db/unique :db.unique/identity}
 {:db/ident :user/name :db/valueType :db.type/string :db/cardinality :db.cardinality/one}
 {:db/ident :user/friend :db/valueType :db.type/ref :db/cardinality :db.cardinality/many}
 {:db/ident :user/manager :db/valueType :db.type/ref :db/cardinality :db.cardinality/one}
 {:db/ident :issue/title :db/valueType :db.type/string :db/cardinality :db.cardinality/one}
 {:db/ident :issue/priority :db/valueType :db.type/long :db/cardinality :db.cardinality/one}
 {:db/ident :issue/assignee :db/valueType :db.type/ref :db/cardinality :db.cardinality/one}
 {:db/ident :issue/label :db/valueType :db.type/ref :db/cardinality :db.cardinality/many}
 {:db/ident :issue/comment :db/valueType :db.type/ref :db/cardinality :db.cardinality/many :db/isComponent true}
 {:db/ident :comment/text :db/valueType :db.type/string :db/cardinality :db.cardinality/one}
 {:db/ident :label/name :db/valueType :db.type/string :db/cardinality :db.cardinality/one :db/unique :db.unique/identity}]"""


@pytest.fixture
def db(con):
    transact(con, SCHEMA)
    r = transact(con, """[
      {:db/id "ann" :user/email "ann@x" :user/name "Ann" :user/friend ["bob" "cat"]}
      {:db/id "bob" :user/email "bob@x" :user/name "Bob" :user/friend "cat" :user/manager "ann"}
      {:db/id "cat" :user/email "cat@x" :user/name "Cat" :user/friend "ann" :user/manager "bob"}
      {:db/id "l1" :label/name "bug"} {:db/id "l2" :label/name "ui"} {:db/id "l3" :label/name "perf"}
      {:db/id "i1" :issue/title "crash" :issue/priority 3 :issue/assignee "bob" :issue/label ["l1" "l2" "l3"]
       :issue/comment [{:db/id "c1" :comment/text "first"} {:db/id "c2" :comment/text "second"}]}
      {:db/id "i2" :issue/title "typo" :issue/assignee "bob"}]""")
    return con, r["tempids"]


def pull(con, pattern, entity, **named):
    args = ["?", "?"] + [f"{k} := ?" for k in named]
    return con.execute(f"SELECT pull FROM mentat_pull({', '.join(args)})", [pattern, entity, *named.values()]).fetchall()[0][0]


def test_attributes_and_db_id(db):
    con, ids = db
    assert pull(con, "[:issue/title :issue/priority]", ids["i1"]) == {"issue/title": "crash", "issue/priority": 3}
    assert pull(con, "[:db/id :issue/title]", ids["i2"]) == {"db/id": ids["i2"], "issue/title": "typo"}
    # refs without sub-pattern: {"db/id"}; cardinality many: a list ordered by value
    got = pull(con, "[:issue/assignee :issue/label]", ids["i1"])
    assert got == {"issue/assignee": {"db/id": ids["bob"]},
                   "issue/label": [{"db/id": ids[k]} for k in sorted(["l1", "l2", "l3"], key=ids.get)]}
    # a missing attribute is a NULL field
    assert pull(con, "[:issue/title :issue/priority :issue/label]", ids["i2"]) == {
        "issue/title": "typo", "issue/priority": None, "issue/label": None}
    # an attribute named twice is one key, as in Datomic's pull map; two specs that would give one key are refused
    assert pull(con, "[:db/id :issue/title :db/id :issue/title]", ids["i2"]) == {"db/id": ids["i2"],
                                                                                  "issue/title": "typo"}
    with pytest.raises(duckdb.Error, match='the field "issue/title" appears twice'):
        pull(con, '[:issue/title [:issue/priority :as "issue/title"]]', ids["i2"])


def test_nested_and_reverse(db):
    con, ids = db
    got = pull(con, "[:issue/title {:issue/assignee [:user/name {:user/manager [:user/email]}]}"
                    " {:issue/label [:label/name]}]", ids["i1"])
    assert got == {"issue/title": "crash",
                   "issue/assignee": {"user/name": "Bob", "user/manager": {"user/email": "ann@x"}},
                   "issue/label": [{"label/name": "bug"}, {"label/name": "ui"}, {"label/name": "perf"}]}
    got = pull(con, "[:user/name :issue/_assignee {:user/_manager [:user/name]}]", ids["bob"])
    assert got == {"user/name": "Bob",
                   "issue/_assignee": [{"db/id": ids["i1"]}, {"db/id": ids["i2"]}],
                   "user/_manager": [{"user/name": "Cat"}]}
    # reverse with nothing pointing here: NULL
    assert pull(con, "[:user/name :issue/_assignee]", ids["ann"]) == {"user/name": "Ann", "issue/_assignee": None}


def test_options_limit_default_as(db):
    con, ids = db
    i1, i2 = ids["i1"], ids["i2"]
    assert pull(con, "[[:issue/label :limit 2]]", i1)["issue/label"] == [{"db/id": ids["l1"]}, {"db/id": ids["l2"]}]
    assert len(pull(con, "[(limit :issue/label 1)]", i1)["issue/label"]) == 1
    assert len(pull(con, "[[:issue/label :limit nil]]", i1)["issue/label"]) == 3
    assert pull(con, "[{(limit :issue/label 2) [:label/name]}]", i1) == {
        "issue/label": [{"label/name": "bug"}, {"label/name": "ui"}]}
    assert pull(con, "[[:issue/priority :default 0] (default :issue/title \"none\")]", i2) == {
        "issue/priority": 0, "issue/title": "typo"}
    assert pull(con, "[[:issue/title :as \"t\"] [:issue/priority :as :p :default -1]]", i2) == {"t": "typo", "p": -1}
    # Datomic would return "x"; the field is a typed column, so the error says so and where such a default goes
    with pytest.raises(duckdb.Error, match="type mismatch") as e:
        pull(con, "[[:issue/priority :default \"x\"]]", i2)
    assert "a pull's :default takes :issue/priority's own type" in str(e.value)
    assert 'coalesce(CAST(pull."issue/priority" AS VARCHAR)' in str(e.value)


def test_recursion(db):
    con, ids = db
    ann, bob, cat = ids["ann"], ids["bob"], ids["cat"]
    # a numeric depth: two levels, then {"db/id"} at the limit (typed STRUCTs)
    got = pull(con, "[:user/name {:user/manager 2}]", cat)
    assert got == {"user/name": "Cat", "user/manager": {
        "user/name": "Bob", "user/manager": {"user/name": "Ann", "user/manager": None}}}
    got = pull(con, "[:user/name {:user/manager 1}]", cat)
    assert got == {"user/name": "Cat", "user/manager": {"user/name": "Bob", "user/manager": {"db/id": ann}}}
    # `...` follows every reachable entity; one already on the path is {"db/id"} (Datomic's cycle rule). The
    # friend graph is ann -> bob, cat; bob -> cat; cat -> ann; the field is JSON (a LIST of JSON, many).
    got = pull(con, "[:user/name {:user/friend ...}]", cat)
    assert got["user/name"] == "Cat"
    assert [json.loads(f) for f in got["user/friend"]] == [
        {"user/name": "Ann", "user/friend": [
            {"user/name": "Bob", "user/friend": [{"db/id": cat}]},
            {"db/id": cat}]}]
    # cardinality one: the manager chain cat -> bob -> ann ends (ann has no manager: the key is left out)
    got = pull(con, "[:user/name {:user/manager ...}]", cat)
    assert json.loads(got["user/manager"]) == {"user/name": "Bob", "user/manager": {"user/name": "Ann"}}
    # reverse recursion: who reports to ann, transitively
    got = pull(con, "[:user/name {:user/_manager ...}]", ann)
    assert [json.loads(x) for x in got["user/_manager"]] == [
        {"user/name": "Bob", "user/_manager": [{"user/name": "Cat"}]}]
    # the same through pull_many, as a find element and as of an earlier transaction
    many = con.execute("SELECT pull FROM mentat_pull_many('[:user/name {:user/manager ...}]', ?)",
                       [[cat, bob, ann]]).fetchall()
    assert [json.loads(r[0]["user/manager"]) if r[0]["user/manager"] else None for r in many] == [
        {"user/name": "Bob", "user/manager": {"user/name": "Ann"}}, {"user/name": "Ann"}, None]
    found = con.execute("SELECT * FROM mentat_q('[:find (pull ?e [:user/name {:user/manager ...}]) . "
                        ":where [?e :user/email \"cat@x\"]]')").fetchall()[0][0]
    assert json.loads(found["user/manager"]) == {"user/name": "Bob", "user/manager": {"user/name": "Ann"}}


def test_deep_recursion_chain(con):
    # a chain of 3,000 entities, each pointing to the next, the last back to the first: every level is
    # pulled (no depth bound), and the cycle ends at the first entity, already on the path
    transact(con, """[{:db/ident :n/name :db/valueType :db.type/string :db/cardinality :db.cardinality/one}
                      {:db/ident :n/next :db/valueType :db.type/ref :db/cardinality :db.cardinality/one}]""")
    n = 3000
    tx = transact(con, "[" + " ".join(f'{{:db/id "n{i}" :n/name "n{i}" :n/next "n{(i + 1) % n}"}}'
                                       for i in range(n)) + "]")
    first = tx["tempids"]["n0"]
    got = pull(con, "[:n/name {:n/next ...}]", first)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(4 * n)  # Python's json reader recurses once per level
    try:
        node, depth = json.loads(got["n/next"]), 1
    finally:
        sys.setrecursionlimit(limit)
    while "n/name" in node:
        assert node["n/name"] == f"n{depth}"
        node, depth = node.get("n/next"), depth + 1
    assert depth == n and node == {"db/id": first}


def test_wildcard_and_components(db):
    con, ids = db
    got = pull(con, "[*]", ids["i1"])
    # typed from the attributes the entity holds: db/id, then those by entid
    assert list(got) == ["db/id", "issue/title", "issue/priority", "issue/assignee", "issue/label", "issue/comment"]
    assert got["db/id"] == ids["i1"] and got["issue/title"] == "crash"
    assert got["issue/label"] == [{"db/id": ids[k]} for k in ("l1", "l2", "l3")]
    # components are pulled whole (JSON), their own attributes as [*]
    assert [json.loads(c) for c in got["issue/comment"]] == [
        {"db/id": ids["c1"], "comment/text": "first"}, {"db/id": ids["c2"], "comment/text": "second"}]
    # an explicit spec next to * replaces that attribute's field
    got = pull(con, "[* {:issue/assignee [:user/name]}]", ids["i1"])
    assert got["issue/assignee"] == {"user/name": "Bob"} and got["issue/title"] == "crash"
    # `*` includes the :db/* attributes an entity has (an attribute's own schema entity here)
    attr = con.execute("SELECT entid FROM mentat_schema() WHERE ident = ':user/email'").fetchall()[0][0]
    got = pull(con, "[*]", attr)
    assert got["db/ident"] == ":user/email" and got["db/unique"] == {"db/id": pull(
        con, "[:db/id]", ":db.unique/identity")["db/id"]}
    assert "user/name" not in got
    # many entities: the union of what they hold, in one STRUCT type
    rows_ = con.execute("SELECT pull FROM mentat_pull_many('[*]', ?)", [[ids["l1"], ids["ann"]]]).fetchall()
    assert rows_[0][0] == {"db/id": ids["l1"], "user/email": None, "user/name": None, "user/friend": None,
                           "label/name": "bug"}
    assert rows_[1][0]["user/name"] == "Ann" and rows_[1][0]["label/name"] is None
    # a named component attribute is pulled whole too; its reverse is one entity, not a list
    got = pull(con, "[:issue/title :issue/comment]", ids["i1"])
    assert [json.loads(c)["comment/text"] for c in got["issue/comment"]] == ["first", "second"]
    assert pull(con, "[:comment/text :issue/_comment]", ids["c2"]) == {
        "comment/text": "second", "issue/_comment": {"db/id": ids["i1"]}}
    assert pull(con, "[{:issue/_comment [:issue/title]}]", ids["c1"]) == {"issue/_comment": {"issue/title": "crash"}}
    # an explicit sub-pattern on a component keeps its typed shape
    assert pull(con, "[{:issue/comment [:comment/text]}]", ids["i1"]) == {
        "issue/comment": [{"comment/text": "first"}, {"comment/text": "second"}]}


def test_component_tree(con):
    # Datomic's component defaults: a component attribute named in a pattern (or under *) pulls each component
    # whole, recursively, here a tree of parts two levels deep
    transact(con, """[{:db/ident :part/name :db/valueType :db.type/string :db/cardinality :db.cardinality/one}
                      {:db/ident :part/sub :db/valueType :db.type/ref :db/cardinality :db.cardinality/many
                       :db/isComponent true}
                      {:db/ident :part/main :db/valueType :db.type/ref :db/cardinality :db.cardinality/one
                       :db/isComponent true}]""")
    t = transact(con, """[{:db/id "a" :part/name "A"
                          :part/sub [{:db/id "b" :part/name "B" :part/sub [{:db/id "d" :part/name "D"}]}
                                     {:db/id "c" :part/name "C"}]
                          :part/main {:db/id "m" :part/name "M"}}]""")["tempids"]
    got = pull(con, "[:part/name :part/sub :part/main]", t["a"])
    assert got["part/name"] == "A"
    assert [json.loads(x) for x in got["part/sub"]] == [
        {"db/id": t["b"], "part/name": "B", "part/sub": [{"db/id": t["d"], "part/name": "D"}]},
        {"db/id": t["c"], "part/name": "C"}]
    assert json.loads(got["part/main"]) == {"db/id": t["m"], "part/name": "M"}
    # under *, the same
    star = pull(con, "[*]", t["a"])
    assert [json.loads(x) for x in star["part/sub"]] == [json.loads(x) for x in got["part/sub"]]
    # the reverse of a component: one map, cardinality-one and cardinality-many alike
    assert pull(con, "[:part/name {:part/_sub [:part/name]}]", t["d"]) == {
        "part/name": "D", "part/_sub": {"part/name": "B"}}
    assert pull(con, "[:part/_main]", t["m"]) == {"part/_main": {"db/id": t["a"]}}
    # the same as a find element
    found = con.execute("SELECT * FROM mentat_q('[:find (pull ?e [:part/name :part/_sub]) . "
                        ":where [?e :part/name \"D\"]]')").fetchall()[0][0]
    assert found == {"part/name": "D", "part/_sub": {"db/id": t["b"]}}
    # time travel: as of the first transaction, a part retracted since is still in the tree; now it is not
    first = con.execute("SELECT max(tx) FROM mentat_q('[:find ?tx :where [_ :part/name \"D\" ?tx]]')").fetchall()[0][0]
    transact(con, f"[[:db/retractEntity {t['d']}]]")
    now = pull(con, "[:part/name :part/sub]", t["a"])
    assert [json.loads(x) for x in now["part/sub"]][0] == {"db/id": t["b"], "part/name": "B"}
    then = pull(con, "[:part/name :part/sub]", t["a"], as_of=first)
    assert [json.loads(x) for x in then["part/sub"]] == [json.loads(x) for x in got["part/sub"]]
    deep = pull(con, "[:part/name {:part/sub ...}]", t["a"], as_of=first)
    assert json.loads(deep["part/sub"][0])["part/sub"] == [{"part/name": "D"}]


def test_missing_entity_and_entity_forms(db):
    con, ids = db
    # Datomic: nil for an entity without any of the attributes; {:db/id e} when the pattern asks for it
    assert con.execute("SELECT * FROM mentat_pull('[:user/name]', 999999)").fetchall() == [(999999, None)]
    got = con.execute("SELECT * FROM mentat_pull('[:db/id :user/name]', 999999)").fetchall()
    assert got == [(999999, {"db/id": 999999, "user/name": None})]
    assert pull(con, "[*]", 999999)["db/id"] == 999999
    # lookup refs and idents
    assert pull(con, "[:user/name]", '[:user/email "cat@x"]') == {"user/name": "Cat"}
    assert con.execute("SELECT * FROM mentat_pull('[:user/name]', '[:user/email \"nobody\"]')").fetchall() == [
        (None, None)]
    ident = con.execute("SELECT entid FROM mentat_schema() WHERE ident = ':user/name'").fetchall()[0][0]
    assert con.execute("SELECT * FROM mentat_pull('[:db/ident]', ':user/name')").fetchall() == [
        (ident, {"db/ident": ":user/name"})]
    for bad, msg in [("[:nope/x]", "unknown attribute"), ("[{:user/name [:user/email]}]", "ref attribute"),
                     ("[:user/name", "malformed EDN"), (":user/name", "vector")]:
        with pytest.raises(duckdb.Error, match=msg):
            pull(con, bad, ids["ann"])
    with pytest.raises(duckdb.Error, match="unknown ident"):
        pull(con, "[:user/name]", ":no/such")
    # what cannot name an entity is refused in mentat_q's words (Datomic: :db.error/not-an-entity)
    for bad, msg in [('"cat@x"', r'type mismatch in `"cat@x"`: a string cannot name an entity: an entity is an entid'),
                     ("1.5", "a double cannot name an entity"),
                     ("[:user/email]", "a vector that is not a lookup ref cannot name an entity"),
                     ("[:user/email 7]", r"a lookup ref's value must be of its attribute's type: :user/email takes a "
                                         r"string, 7 is a long")]:
        with pytest.raises(duckdb.Error, match=msg):
            pull(con, "[:user/name]", bad)
    # an entity written with a character no symbol may hold is malformed, not read up to it (`ann@x` was `ann`)
    with pytest.raises(duckdb.Error, match=r"malformed EDN in entity: line 1, column 4: unexpected character '@' "
                                           r"\(an entity is an entid \(a long\), an ident"):
        pull(con, "[:user/name]", "ann@x")
    with pytest.raises(duckdb.Error, match="history"):
        pull(con, "[:user/name]", ids["ann"], history=True)


def test_pull_many(db):
    con, ids = db
    got = con.execute("SELECT e, pull FROM mentat_pull_many('[:user/name]', ?)",
                      [[ids["cat"], ids["ann"], 999999, ids["cat"]]]).fetchall()
    assert got == [(ids["cat"], {"user/name": "Cat"}), (ids["ann"], {"user/name": "Ann"}), (999999, None),
                   (ids["cat"], {"user/name": "Cat"})]
    got = con.execute("SELECT e, pull FROM mentat_pull_many('[:user/name]', "
                      "['[:user/email \"bob@x\"]', ':user/email'])").fetchall()
    assert got[0] == (ids["bob"], {"user/name": "Bob"}) and got[1][1] is None
    assert con.execute("SELECT count(*) FROM mentat_pull_many('[:user/name]', []::BIGINT[])").fetchall() == [(0,)]
    # an element that names no entity is named by its place in the list
    with pytest.raises(duckdb.Error, match=r"element 2 of the entities list: malformed EDN in entity"):
        con.execute("SELECT * FROM mentat_pull_many('[:user/name]', ['[:user/email \"bob@x\"]', 'cy@x'])").fetchall()
    with pytest.raises(duckdb.Error, match=r"element 3 of the entities list: type mismatch"):
        con.execute("SELECT * FROM mentat_pull_many('[:user/name]', [':user/email', '1', '\"x\"'])").fetchall()
    # joins like any table function
    got = con.execute("SELECT p.pull.\"user/name\" FROM mentat_pull_many('[:user/name]', ?) p ORDER BY 1",
                      [[ids["ann"], ids["bob"]]]).fetchall()
    assert got == [("Ann",), ("Bob",)]


def test_types_seen_from_python(db):
    con, ids = db
    ty = con.execute("SELECT typeof(pull) FROM mentat_pull("
                     "'[:db/id :issue/title {:issue/assignee [:user/name]} :issue/label :issue/_assignee]', ?)",
                     [ids["i1"]]).fetchall()[0][0]
    assert ty == ('STRUCT("db/id" BIGINT, "issue/title" VARCHAR, "issue/assignee" STRUCT("user/name" VARCHAR), '
                  '"issue/label" STRUCT("db/id" BIGINT)[], "issue/_assignee" STRUCT("db/id" BIGINT)[])')
    t = con.sql(f"SELECT * FROM mentat_pull('[:issue/title {{:issue/label [:label/name]}} :issue/assignee]', "
                f"{ids['i1']})").arrow().read_all()
    field = t.schema.field("pull").type
    assert pa.types.is_struct(field)
    assert field.field("issue/title").type == pa.string()
    assert pa.types.is_list(field.field("issue/label").type)
    assert field.field("issue/label").type.value_type == pa.struct([("label/name", pa.string())])
    assert field.field("issue/assignee").type == pa.struct([("db/id", pa.int64())])
    assert t.column("pull").to_pylist()[0]["issue/label"][0] == {"label/name": "bug"}


def test_a_pattern_of_defaults_returns_them_for_an_entity_without_its_attributes(db):
    """Datomic's pull gives the defaults of an entity that has none of the pattern's attributes (issue 15's
    examples: [[:age :default 0]], [(default :foo "bar")], [[:x :as "Name" :default "Nothing"]]); without a
    default such an entity is nil. Through mentat_pull (the entity index serves these flat patterns) and through
    the general path (a nested pattern, and pull as a find element)."""
    con, ids = db
    l1 = ids["l1"]  # a label: no issue attributes
    assert pull(con, "[[:issue/priority :default 0]]", l1) == {"issue/priority": 0}
    assert pull(con, '[(default :issue/title "bar")]', l1) == {"issue/title": "bar"}
    assert pull(con, '[[:issue/title :as "Name" :default "Nothing"]]', l1) == {"Name": "Nothing"}
    assert pull(con, "[:issue/priority]", l1) is None
    # nested: the label of an issue pulled with a defaulted sub-pattern
    got = pull(con, '[{:issue/label [[:issue/title :default "n/a"]]}]', ids["i1"])
    assert got == {"issue/label": [{"issue/title": "n/a"}] * 3}
    found = con.execute("SELECT * FROM mentat_q(?, inputs := ?)",
                        ['[:find (pull ?e [[:issue/priority :default 0]]) . :in $ ?e]', f"[{l1}]"]).fetchall()
    assert [dict(r[0]) if r[0] is not None else None for r in found] == [{"issue/priority": 0}]


def test_a_wildcard_over_a_wide_schema_equals_its_attributes_pulled_by_name(con):
    """A pull level of more than 16 attributes is read in chunks (planner/src/pull.rs `UNION_CHUNK`: DuckDB pads
    every branch of one UNION ALL BY NAME to all its columns, 7.9 s for `[* {:user/_manager ...}]` over a schema of
    150 attributes). 43 attributes of mixed types and cardinalities: `[*]` on one entity, on several and in a find
    equals the maps built here from the transacted values, and the same attributes named in patterns of 10."""
    strs, longs, refs, flags = [f"w/s{i}" for i in range(20)], [f"w/l{i}" for i in range(8)], \
        [f"w/r{i}" for i in range(6)], [f"w/b{i}" for i in range(6)]
    one = lambda a, t: f"{{:db/ident :{a} :db/valueType :db.type/{t} :db/cardinality :db.cardinality/one}}"
    many = lambda a, t: f"{{:db/ident :{a} :db/valueType :db.type/{t} :db/cardinality :db.cardinality/many}}"
    transact(con, "[" + " ".join(
        ["{:db/ident :w/name :db/valueType :db.type/string :db/cardinality :db.cardinality/one "
         ":db/unique :db.unique/identity}",
         "{:db/ident :w/part :db/valueType :db.type/ref :db/cardinality :db.cardinality/many :db/isComponent true}",
         one("w/label", "string")]
        + [one(a, "string") for a in strs] + [many(a, "long") for a in longs] + [one(a, "ref") for a in refs]
        + [one(a, "boolean") for a in flags]) + "]")
    # entity k holds every third string from k on, longs {k, 10k} for even attributes, ref i to entity (k + i) % 3
    # when i != k, the flags of parity k, and entity 0 two parts
    names = ["e0", "e1", "e2"]
    want = {}
    forms = []
    for k, n in enumerate(names):
        m = {"w/name": n}
        m.update({a: f"{n}-{a}" for i, a in enumerate(strs) if i % 3 == k})
        m.update({a: [k, 10 * k + i] for i, a in enumerate(longs) if i % 2 == 0})
        m.update({a: names[(k + i) % 3] for i, a in enumerate(refs) if i != k})
        m.update({a: (i + k) % 2 == 0 for i, a in enumerate(flags)})
        want[n] = m
        edn = " ".join(f":{a} " + (json.dumps(v) if isinstance(v, str) and a in strs + ["w/name"] else
                                   f'[:w/name "{v}"]' if a in refs else
                                   "[" + " ".join(map(str, v)) + "]" if isinstance(v, list) else
                                   ("true" if v else "false"))
                       for a, v in m.items() if a not in refs)
        forms.append(f"{{:db/id \"{n}\" {edn}}}")
    forms.append('{:w/name "e0" :w/part [{:w/label "p1"} {:w/label "p2"}]}')
    ids = transact(con, "[" + " ".join(forms) + "]")["tempids"]
    transact(con, "[" + " ".join(f'[:db/add [:w/name "{n}"] :{a} [:w/name "{v}"]]'
                                 for n, m in want.items() for a, v in m.items() if a in refs) + "]")
    ent = {n: ids[n] for n in names}
    parts = sorted(r[0] for r in con.execute("FROM mentat_q('[:find ?p :where [_ :w/part ?p]]')").fetchall())

    def expected(n):
        m = {"db/id": ent[n]}
        for a, v in want[n].items():
            m[a] = {"db/id": ent[v]} if a in refs else sorted(set(v)) if isinstance(v, list) else v
        return m

    def present(got):
        return {k: v for k, v in got.items() if v is not None}

    for n in names:
        got = present(pull(con, "[*]", ent[n]))
        parts_got = got.pop("w/part", None)
        assert got == expected(n), n
        if n == "e0":
            assert [json.loads(p) for p in parts_got] == [{"db/id": p, "w/label": f"p{i + 1}"}
                                                        for i, p in enumerate(parts)]
        # the same attributes named, ten to a pattern (levels narrow enough for one union)
        attrs = ["w/name"] + strs + longs + refs + flags
        named = {}
        for start in range(0, len(attrs), 10):
            named.update(pull(con, "[" + " ".join(":" + a for a in attrs[start:start + 10]) + "]", ent[n]))
        assert present(named) == {k: v for k, v in expected(n).items() if k != "db/id"}, n
    rows = con.execute("SELECT pull FROM mentat_pull_many('[*]', ?)", [[ent[n] for n in names]]).fetchall()
    for (got,), n in zip(rows, names):
        got = present(got)
        got.pop("w/part", None)
        assert got == expected(n), n
    found = con.execute("FROM mentat_q('[:find ?n (pull ?e [* {:w/_r1 [:w/name]}]) :where [?e :w/name ?n]]')").fetchall()
    assert len(found) == 3
    for n, got in found:
        got = present(got)
        got.pop("w/part", None)
        back = got.pop("w/_r1", None)
        assert got == expected(n), n
        # entity j points its :w/r1 at (j + 1) % 3 unless j is 1
        holders = sorted(names[j] for j in range(3) if j != 1 and names[(j + 1) % 3] == n)
        assert sorted(x["w/name"] for x in back or []) == holders, n
