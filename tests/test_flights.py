"""The flights example (examples/flights_*.sql) and mentat_import.

The store is loaded once per module by running examples/flights_load.sql in the DuckDB CLI, exactly as
scripts/example.sh does; every query of examples/flights_queries.sql is then checked against the same question
asked in plain SQL over the CSV files. The gaps in the data (destinations and tail numbers without a row,
cancelled flights) and mentat_import's own rules (types, refs, upserts, errors that leave the store unchanged)
are tested on the side, then the Parquet round trip (export, import_store, attach) of the flights store and the
notebook examples/flights.ipynb, run headless (skipped without nbclient/nbformat/ipykernel/matplotlib).
"""
import math
import subprocess
import sys

import pytest

from conftest import EXT, ROOT, connect, rows, transact

EXAMPLES = ROOT / "examples"
sys.path.insert(0, str(EXAMPLES))
import flights_data  # noqa: E402
from flights_plain import ORACLES, example_queries  # noqa: E402


@pytest.fixture(scope="module")
def csv():
    try:
        d = flights_data.csv_dir()
    except ImportError as e:
        pytest.skip(str(e))
    return lambda t: f"read_csv('{d}/{t}.csv', nullstr = 'NA')"


@pytest.fixture(scope="module")
def flights(tmp_path_factory, csv):
    """A Python connection to a database file holding the flights store, loaded by the example's SQL in the CLI."""
    db = tmp_path_factory.mktemp("flights") / "flights.duckdb"
    p = subprocess.run(
        ["duckdb", "-unsigned", str(db), "-cmd", f"LOAD '{EXT}'",
         "-cmd", f"SET VARIABLE flights_dir = '{flights_data.csv_dir()}'",
         "-cmd", f"SET VARIABLE examples_dir = '{EXAMPLES}'"],
        stdin=open(EXAMPLES / "flights_load.sql"), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0 and "Error" not in p.stderr + p.stdout, p.stderr + p.stdout
    con = connect(db)
    yield con
    con.close()


def q(con, query, inputs=None):
    """Rows of a Datalog query, sorted."""
    sql = "SELECT * FROM mentat_q(?" + (", inputs := ?" if inputs else "") + ")"
    return sorted(rows(con, sql, [query] + ([inputs] if inputs else [])))


def aid(con, ident, store="mentat"):
    return rows(con, f"SELECT entid FROM mentat_schema(store := '{store}') WHERE ident = ?", [ident])[0][0]


# --- the example queries against plain SQL over the CSV files ---------------------------------------------------

def same(a, b):
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9, abs_tol=0.011)
    return a == b


def test_every_example_query_has_an_oracle():
    names = [n for n, _ in example_queries()]
    assert len(names) == len(set(names)) and set(names) == set(ORACLES), names


@pytest.mark.parametrize("name", list(ORACLES))
def test_example_query_matches_plain_sql(flights, csv, name):
    sql = dict(example_queries())[name]
    got = rows(flights, sql)
    want = rows(flights, ORACLES[name].format(**{t: csv(t) for t in flights_data.TABLES}))
    assert len(got) == len(want) and len(got) > 0, (got, want)
    for g, w in zip(got, want):
        assert len(g) == len(w) and all(same(x, y) for x, y in zip(g, w)), (g, w)


# --- what the import wrote -------------------------------------------------------------------------------------

# (table, CSV column, attribute) for every scalar attribute: its datom count is the column's non-null count.
COLUMNS = [
    ("airlines", "carrier", ":airline/code"), ("airlines", "name", ":airline/name"),
    *[("airports", c, f":airport/{c}") for c in ["faa", "name", "lat", "lon", "alt", "tz", "dst", "tzone"]],
    *[("planes", c, f":plane/{c}") for c in
      ["year", "type", "manufacturer", "model", "engines", "seats", "speed", "engine"]],
    *[("flights", c, f":flight/{c.replace('_', '-')}") for c in
      ["year", "month", "day", "dep_time", "sched_dep_time", "dep_delay", "arr_time", "sched_arr_time",
       "arr_delay", "air_time", "distance", "hour", "minute", "time_hour", "tailnum"]],
    ("flights", "flight", ":flight/number"), ("flights", "carrier", ":flight/carrier"),
    ("flights", "origin", ":flight/origin"), ("flights", "dest", ":flight/dest"),
    ("flights", "tailnum", ":flight/plane"),
    *[("weather", c, f":weather/{c.replace('_', '-')}") for c in
      ["origin", "time_hour", "year", "month", "day", "hour", "temp", "dewp", "humid", "wind_dir", "wind_speed",
       "wind_gust", "precip", "pressure", "visib"]],
]


def test_datoms_per_attribute_match_the_csv(flights, csv):
    for table, column, ident in COLUMNS:
        (want,), = rows(flights, f"SELECT count({column}) FROM {csv(table)}")
        (got,), = rows(flights, f"SELECT count(*) FROM mentat.cur_{aid(flights, ident)}")
        (hist,), = rows(flights, f"SELECT count(*) FROM mentat.hist_{aid(flights, ident)}")
        extra = {":airport/faa": 4, ":plane/tailnum": 721}.get(ident, 0)  # entities created as ref targets
        # a fresh import retracts nothing, so history (retracted datoms) is empty
        assert (got, hist) == (want + extra, 0), (ident, got, want)


def test_values_round_trip(flights, csv):
    # every flight's scalar values and refs, as one relation, equal the CSV's
    got = rows(flights, """
        SELECT number, year, month, day, tailnum, carrier, origin, dest, time_hour, distance
        FROM mentat_q('[:find ?n ?y ?m ?d ?t ?c ?o ?de ?th ?dist :with ?f
                        :where [?f :flight/number ?n] [?f :flight/year ?y] [?f :flight/month ?m] [?f :flight/day ?d]
                               [?f :flight/tailnum ?t] [?f :flight/carrier ?a] [?a :airline/code ?c]
                               [?f :flight/origin ?oa] [?oa :airport/faa ?o] [?f :flight/dest ?da]
                               [?da :airport/faa ?de] [?f :flight/time-hour ?th] [?f :flight/distance ?dist]]')
          AS t(number, year, month, day, tailnum, carrier, origin, dest, time_hour, distance)
        EXCEPT ALL
        SELECT flight, year, month, day, tailnum, carrier, origin, dest, time_hour, distance
        FROM """ + csv("flights") + " WHERE tailnum IS NOT NULL")
    assert got == []
    (n,), = rows(flights, "SELECT count(*) FROM mentat_q('[:find ?f :where [?f :flight/tailnum _]]')")
    (want,), = rows(flights, f"SELECT count(tailnum) FROM {csv('flights')}")
    assert n == want


def test_missing_destination_is_an_entity_with_only_its_faa_code(flights):
    sju = q(flights, '[:find ?a . :where [?a :airport/faa "SJU"]]')
    assert len(sju) == 1
    e = sju[0][0]
    attrs = rows(flights, "SELECT entid FROM mentat_schema()")
    datoms = [(a, v) for (a,) in attrs for (v,) in rows(flights, f"SELECT v::VARCHAR FROM mentat.cur_{a} WHERE e = ?", [e])]
    assert datoms == [(aid(flights, ":airport/faa"), "SJU")]
    (n,), = q(flights, '[:find (count ?f) . :where [?f :flight/dest ?a] [?a :airport/faa "SJU"]]')
    assert n == 5819


def test_missing_tailnum_is_a_plane_with_only_its_tailnum(flights, csv):
    missing = rows(flights, f"""SELECT count(DISTINCT tailnum) FROM {csv('flights')}
                                WHERE tailnum NOT IN (SELECT tailnum FROM {csv('planes')})""")[0][0]
    assert missing == 721
    bare = q(flights, "[:find (count ?p) . :where [?p :plane/tailnum _] (not [?p :plane/year _]) "
                      "(not [?p :plane/model _])]")
    (with_year_unknown,), = rows(flights, f"SELECT count(*) FROM {csv('planes')} WHERE year IS NULL AND model IS NULL")
    assert bare[0][0] == missing + with_year_unknown
    # a flight with such a tail number refers to that plane
    (t,), = rows(flights, f"""SELECT min(tailnum) FROM {csv('flights')}
                              WHERE tailnum NOT IN (SELECT tailnum FROM {csv('planes')})""")
    (n,), = q(flights, "[:find (count ?f) . :in $ ?t :where [?f :flight/plane ?p] [?p :plane/tailnum ?t]]", f'["{t}"]')
    (want,), = rows(flights, f"SELECT count(*) FROM {csv('flights')} WHERE tailnum = ?", [t])
    assert n == want > 0


def test_cancelled_flights_have_no_times(flights, csv):
    (cancelled,), = rows(flights, f"SELECT count(*) FROM {csv('flights')} WHERE dep_time IS NULL")
    assert cancelled == 8255
    (n,), = q(flights, "[:find (count ?f) . :where [?f :flight/sched-dep-time _] (not [?f :flight/dep-time _])]")
    assert n == cancelled
    # a flight that departed has its delay too (Datomic's scalar aggregate over nothing is nil: no row)
    assert q(flights, "[:find (count ?f) . :where [?f :flight/dep-time _] (not [?f :flight/dep-delay _])]") == []


def test_the_load_reports(flights):
    # one transaction per import plus the schema; partitions moved past every allocated entid
    txs = rows(flights, "SELECT count(*) FROM mentat.cur_9")[0][0]
    assert txs == 1 + 1 + 5  # bootstrap, schema, five imports
    (next_user,), = rows(flights, "SELECT next FROM mentat.partitions WHERE ident = ':db.part/user'")
    total = 16 + 1458 + 3322 + 336776 + 26115 + 4 + 721
    assert next_user == 0x10000 + total


# --- mentat_import on a small store ----------------------------------------------------------------------------

SCHEMA = """[
 {:db/ident :c/code :db/valueType :db.type/string :db/cardinality :db.cardinality/one :db/unique :db.unique/identity}
 {:db/ident :c/name :db/valueType :db.type/string :db/cardinality :db.cardinality/one}
 {:db/ident :c/size :db/valueType :db.type/long :db/cardinality :db.cardinality/one}
 {:db/ident :c/tags :db/valueType :db.type/keyword :db/cardinality :db.cardinality/many}
 {:db/ident :c/at :db/valueType :db.type/instant :db/cardinality :db.cardinality/one}
 {:db/ident :c/ssn :db/valueType :db.type/string :db/cardinality :db.cardinality/one :db/unique :db.unique/value}
 {:db/ident :r/to :db/valueType :db.type/ref :db/cardinality :db.cardinality/one}
 {:db/ident :r/n :db/valueType :db.type/long :db/cardinality :db.cardinality/one}
]"""


@pytest.fixture
def small(con):
    transact(con, SCHEMA)
    return con


def imp(con, source, **opts):
    args = "".join(f", {k} := ?" for k in opts)
    r, = rows(con, f"SELECT tx, entities, created, datoms FROM mentat_import(?{args})", [source, *opts.values()])
    return dict(zip(["tx", "entities", "created", "datoms"], r))


def snapshot(con, store="mentat"):
    tables = [t for (t,) in rows(con, "SELECT table_name FROM duckdb_tables() WHERE schema_name = ? ORDER BY 1",
                                 [store])]
    return {t: rows(con, f'SELECT * FROM "{store}"."{t}" ORDER BY ALL') for t in tables}


def test_import_new_entities_and_nulls(small):
    r = imp(small, """SELECT * FROM (VALUES ('a', 'Alpha', 1), ('b', NULL, 2), ('c', 'Gamma', NULL))
                      AS t(":c/code", ":c/name", ":c/size")""")
    assert r["entities"] == 3 and r["created"] == 3 and r["datoms"] == 3 + 2 + 2 + 1
    assert q(small, "[:find ?c ?n :where [?e :c/code ?c] [?e :c/name ?n]]") == [("a", "Alpha"), ("c", "Gamma")]
    assert q(small, '[:find ?n . :where [?e :c/code "b"] [?e :c/size ?n]]') == [(2,)]


def test_import_upserts_on_identity(small):
    imp(small, """SELECT * FROM (VALUES ('a', 'Alpha', 1), ('b', 'Beta', 2)) AS t(":c/code", ":c/name", ":c/size")""")
    before = dict(q(small, "[:find ?c ?e :where [?e :c/code ?c]]"))
    r = imp(small, """SELECT * FROM (VALUES ('a', 'Alpha', 10), ('z', 'Zeta', 26))
                      AS t(":c/code", ":c/name", ":c/size")""")
    # 'a' is the same entity: unchanged name is no datom, the size 1 -> 10 is a retraction and an assertion
    assert r["entities"] == 2 and r["created"] == 1
    assert r["datoms"] == 2 + 3 + 1
    after = dict(q(small, "[:find ?c ?e :where [?e :c/code ?c]]"))
    assert after["a"] == before["a"] and after["b"] == before["b"] and after["z"] == max(before.values()) + 1
    assert q(small, '[:find ?s . :where [?e :c/code "a"] [?e :c/size ?s]]') == [(10,)]
    size = aid(small, ":c/size")
    # the old size moved to history with its assertion's tx and this import as the retraction; 10 is current
    hist = rows(small, f"SELECT v, tx < retracted_tx, retracted_tx FROM mentat.hist_{size} WHERE e = ?",
                [before["a"]])
    assert hist == [(1, True, r["tx"])]
    assert rows(small, f"SELECT v, tx FROM mentat.cur_{size} WHERE e = ?", [before["a"]]) == [(10, r["tx"])]
    # a unique value (indexed) replaced on an upserted entity, and a cardinality-many value added
    imp(small, """SELECT 'a' AS ":c/code", 's1' AS ":c/ssn", ':t/x' AS ":c/tags";""")
    r = imp(small, """SELECT 'a' AS ":c/code", 's2' AS ":c/ssn", ':t/y' AS ":c/tags" """)
    assert r["created"] == 0 and r["datoms"] == 2 + 1 + 1
    assert q(small, '[:find ?s ?t :where [?e :c/code "a"] [?e :c/ssn ?s] [?e :c/tags ?t]]') == [
        ("s2", ":t/x"), ("s2", ":t/y")]
    assert q(small, '[:find ?c . :where [?e :c/ssn "s2"] [?e :c/code ?c]]') == [("a",)]


def test_import_refs_resolve_create_or_fail(small):
    imp(small, """SELECT 'a' AS ":c/code" """)
    src = """SELECT * FROM (VALUES ('a', 1), ('x', 2), (NULL, 3)) AS t(":r/to", ":r/n")"""
    before = snapshot(small)
    with pytest.raises(Exception, match=r'\[:c/code \'x\'\].*column :r/to'):
        imp(small, src, refs="{:r/to :c/code}")
    assert snapshot(small) == before
    r = imp(small, src, refs="{:r/to :c/code}", missing_refs="create")
    assert r["entities"] == 3 and r["created"] == 4 and r["datoms"] == 1 + 2 + 3 + 1
    got = q(small, "[:find ?n ?c :where [?r :r/n ?n] [?r :r/to ?t] [?t :c/code ?c]]")
    assert got == [(1, "a"), (2, "x")]
    # the created target has only its identity datom
    assert q(small, '[:find ?e . :where [?e :c/code "x"] (not [?e :c/name _]) (not [?e :c/size _])]') != []


def test_import_types(small):
    imp(small, """SELECT 'k' AS ":c/code", '42' AS ":c/size", ':x/y' AS ":c/tags",
                         TIMESTAMP '2013-01-01 05:00:00' AS ":c/at" """)
    assert q(small, '[:find ?s ?t :where [?e :c/code "k"] [?e :c/size ?s] [?e :c/tags ?t]]') == [(42, ":x/y")]
    (at,), = rows(small, f"SELECT epoch(v) FROM mentat.cur_{aid(small, ':c/at')}")
    assert at == 1357016400  # a TIMESTAMP without zone is read as UTC


@pytest.mark.parametrize("source, opts, message", [
    ("""SELECT 'a' AS ":c/code", 1 AS ":c/nope" """, {}, r'unknown attribute :c/nope'),
    ("""SELECT 'a' AS ":c/code", 1 AS "size" """, {}, r'unknown attribute size'),
    ("""SELECT 'a' AS ":c/code", ':x' AS ":db/ident" """, {}, r'unknown attribute :db/ident'),
    ("""SELECT * FROM (VALUES ('a', '1'), ('b', 'abc')) t(":c/code", ":c/size")""", {},
     r"value 'abc' does not match :c/size of type :db.type/long in column \":c/size\".*row 2"),
    ("""SELECT 'a' AS ":c/code", 1.5 AS ":c/size" """, {}, r"value '1.5' does not match :c/size"),
    ("""SELECT 'a' AS ":c/code", 'nocolon' AS ":c/tags" """, {}, r"value 'nocolon' does not match :c/tags"),
    ("""SELECT 'nobody' AS ":r/to" """, {"refs": "{:r/to :c/code}"}, r"\[:c/code 'nobody'\]"),
    ("""SELECT * FROM (VALUES ('a'), ('a')) t(":c/code")""", {}, r"appears in source rows 1 and 2"),
    ("""SELECT * FROM (VALUES ('a', 's1'), ('b', 's1')) t(":c/code", ":c/ssn")""", {}, r":c/ssn 's1' appears"),
    ("""SELECT 'b' AS ":c/code", 'taken' AS ":c/ssn" """, {}, r"unique conflict: :c/ssn 'taken'"),
    ("""SELECT 1 AS ":r/n" """, {"refs": "{:r/n :c/code}"}, r"not a ref"),
    ("""SELECT 1 AS ":r/to" """, {"refs": "{:r/to :c/name}"}, r"not a cardinality-one :db/unique"),
    ("""SELECT 1 AS ":r/n" """, {"refs": "{:r/to :c/code}"}, r"the source has no column"),
    ("""SELECT 1 AS ":r/n" """, {"missing_refs": "sometimes"}, r"expected 'error' or 'create'"),
    ("""SELECT * FROM no_such_table""", {}, r"no_such_table"),
])
def test_import_errors_leave_the_store_unchanged(small, source, opts, message):
    imp(small, """SELECT 'taken-by' AS ":c/code", 'taken' AS ":c/ssn" """)
    before = snapshot(small)
    with pytest.raises(Exception, match=message):
        imp(small, source, **opts)
    assert snapshot(small) == before
    # and the store still takes imports
    assert imp(small, """SELECT 'after' AS ":c/code" """)["created"] == 1


def test_import_needs_an_existing_store(con):
    with pytest.raises(Exception, match="does not exist"):
        imp(con, """SELECT 'a' AS ":c/code" """)


def test_transactions_after_an_import_see_its_entities(small):
    transact(small, '[{:c/code "a" :c/name "from a transaction"}]')
    imp(small, """SELECT * FROM (VALUES ('a', 'imported'), ('b', 'B')) AS t(":c/code", ":c/name")""")
    # lookup refs and upserts of the transactor resolve to the imported (and upserted) entities
    r = transact(small, '[[:db/add [:c/code "b"] :c/size 2] {:c/code "a" :c/size 1}]')
    assert q(small, "[:find ?c ?n ?s :where [?e :c/code ?c] [?e :c/name ?n] [?e :c/size ?s]]") == [
        ("a", "imported", 1), ("b", "B", 2)]
    assert q(small, "[:find (count ?e) . :where [?e :c/code _]]") == [(2,)]


def test_ref_column_without_refs_holds_entids(small):
    imp(small, """SELECT 'a' AS ":c/code" """)
    (e,), = q(small, '[:find ?e . :where [?e :c/code "a"]]')
    imp(small, f"""SELECT {e} AS ":r/to", 7 AS ":r/n" """)
    assert q(small, "[:find ?c . :where [?r :r/n 7] [?r :r/to ?t] [?t :c/code ?c]]") == [("a",)]


# --- mentat_import: list columns are sets of values, ref columns hold allocated entids ------------------------

LIST_SCHEMA = """[
 {:db/ident :t/id :db/valueType :db.type/long :db/cardinality :db.cardinality/one :db/unique :db.unique/identity}
 {:db/ident :t/ss :db/valueType :db.type/string :db/cardinality :db.cardinality/many}
 {:db/ident :t/s :db/valueType :db.type/string :db/cardinality :db.cardinality/one}
 {:db/ident :t/ls :db/valueType :db.type/long :db/cardinality :db.cardinality/many}
 {:db/ident :t/kw :db/valueType :db.type/keyword :db/cardinality :db.cardinality/many}
 {:db/ident :t/r :db/valueType :db.type/ref :db/cardinality :db.cardinality/one}
 {:db/ident :t/rs :db/valueType :db.type/ref :db/cardinality :db.cardinality/many}
]"""


@pytest.fixture
def lists(con):
    transact(con, LIST_SCHEMA)
    return con


def datom_count(con):
    (n,), = rows(con, "SELECT count(*) FROM mentat_datoms('EAVT')")
    return n


def values_by_id(con, attr):
    """{id: set of values} of one attribute, through mentat_datoms (the values as text) and :t/id."""
    got = {}
    for (i, v) in rows(con, """SELECT i.v::BIGINT, d.v FROM mentat_datoms('AEVT', a := ?) d
                               JOIN mentat_datoms('AEVT', a := ':t/id') i ON i.e = d.e""", [attr]):
        got.setdefault(i, set()).add(v)
    return got


def test_import_list_column_is_one_datom_per_distinct_element(lists):
    r = imp(lists, """SELECT * FROM (VALUES (1, ['a', 'b']), (2, []::VARCHAR[]), (3, NULL::VARCHAR[]),
                                            (4, ['x', 'x', 'y', NULL])) AS t(":t/id", ":t/ss")""")
    # 4 ids, a b, x y (the repeated x once, the NULL element none), the tx instant
    assert r["entities"] == 4 and r["datoms"] == 4 + 2 + 2 + 1
    assert values_by_id(lists, ":t/ss") == {1: {"a", "b"}, 4: {"x", "y"}}
    assert sorted(q(lists, "[:find ?id ?s :where [?e :t/id ?id] [?e :t/ss ?s]]")) == [
        (1, "a"), (1, "b"), (4, "x"), (4, "y")]
    assert rows(lists, f"SELECT count(*) FROM mentat.cur_{aid(lists, ':t/ss')}") == [(4,)]
    # an upsert adds the new elements only, as a transaction of the set would
    r = imp(lists, """SELECT 1 AS ":t/id", ['b', 'c', 'c'] AS ":t/ss" """)
    assert r["created"] == 0 and r["datoms"] == 1 + 1
    assert values_by_id(lists, ":t/ss") == {1: {"a", "b", "c"}, 4: {"x", "y"}}


def test_import_list_of_longs_casts_each_element(lists):
    n = 500
    r = imp(lists, f"""SELECT i AS ":t/id", [i % 7, i % 3, i % 7]::INTEGER[] AS ":t/ls",
                              [':k/' || (i % 2)] AS ":t/kw" FROM range({n}) t(i)""")
    expected = {i: {i % 7, i % 3} for i in range(n)}
    assert r["entities"] == n
    assert r["datoms"] == n + sum(len(v) for v in expected.values()) + n + 1
    got = {}
    for (i, v) in q(lists, "[:find ?id ?v :where [?e :t/id ?id] [?e :t/ls ?v]]"):
        got.setdefault(i, set()).add(v)
    assert got == expected
    # stored as BIGINT values of the long attribute, like a plain column's
    assert rows(lists, f"SELECT DISTINCT typeof(v) FROM mentat.cur_{aid(lists, ':t/ls')}") == [("BIGINT",)]
    assert sorted(q(lists, "[:find ?k (count ?e) :where [?e :t/kw ?k]]")) == [(":k/0", n // 2), (":k/1", n // 2)]
    # text elements cast to long as a text column's values do
    imp(lists, """SELECT 9999 AS ":t/id", ['42', '43'] AS ":t/ls" """)
    assert values_by_id(lists, ":t/ls")[9999] == {"42", "43"}


def test_import_refs_to_entities_that_exist_or_that_it_creates(lists):
    imp(lists, """SELECT 1 AS ":t/id" """)
    (one,), = q(lists, "[:find ?e . :where [?e :t/id 1]]")
    (next_user,), = rows(lists, "SELECT next FROM mentat.partitions WHERE ident = ':db.part/user'")
    # row 1 is next_user, row 2 next_user + 1: a row may name another row's new entity, and an attribute entid
    r = imp(lists, f"""SELECT * FROM (VALUES (2, {next_user + 1}, [{one}, {next_user}]),
                                             (3, {one}, [{aid(lists, ':t/ss')}]))
                       AS t(":t/id", ":t/r", ":t/rs")""")
    assert r["created"] == 2
    assert sorted(q(lists, "[:find ?a ?b :where [?x :t/id ?a] [?x :t/r ?y] [?y :t/id ?b]]")) == [(2, 3), (3, 1)]
    assert sorted(q(lists, "[:find ?a ?b :where [?x :t/id ?a] [?x :t/rs ?y] [?y :t/id ?b]]")) == [(2, 1), (2, 2)]


@pytest.mark.parametrize("source, message", [
    ("""SELECT 2 AS ":t/id", ['a', 'b'] AS ":t/s" """,
     r'column ":t/s" of mentat_import: its DuckDB type VARCHAR\[\] is a list, but :t/s is cardinality one'),
    ("""SELECT 2 AS ":t/id", {'x': 1} AS ":t/ss" """,
     r'column ":t/ss" of mentat_import: its DuckDB type STRUCT\(x INTEGER\) is nested.*:t/ss is a :db.type/string'),
    ("""SELECT 2 AS ":t/id", {'x': 1} AS ":t/s" """, r'column ":t/s".*STRUCT\(x INTEGER\) is nested'),
    ("""SELECT 2 AS ":t/id", map(['k'], ['v']) AS ":t/ss" """, r'column ":t/ss".*MAP\(VARCHAR, VARCHAR\) is nested'),
    ("""SELECT 2 AS ":t/id", [['a'], ['b']] AS ":t/ss" """, r'column ":t/ss".*VARCHAR\[\]\[\] is nested'),
    ("""SELECT 2 AS ":t/id", [{'x': 1}] AS ":t/ss" """, r'column ":t/ss".*STRUCT\(x INTEGER\)\[\] is nested'),
    ("""SELECT [1, 2] AS ":t/id" """, r'column ":t/id".*INTEGER\[\] is a list, but :t/id is cardinality one'),
    ("""SELECT * FROM (VALUES (2, ['1', 'x'])) t(":t/id", ":t/ls")""",
     r"value 'x' does not match :t/ls of type :db.type/long in column \":t/ls\""),
    ("""SELECT 5 AS ":t/id", 999999 AS ":t/r" """, r'column ":t/r" of mentat_import, source row 1.*999999'),
    ("""SELECT * FROM (VALUES (5, NULL), (6, -1)) t(":t/id", ":t/r")""", r'column ":t/r".*source row 2.*-1'),
    ("""SELECT 5 AS ":t/id", [999999] AS ":t/rs" """, r'column ":t/rs".*999999'),
    ("""SELECT 5 AS ":t/id", 1099511627776 * 2 AS ":t/r" """, r'column ":t/r".*2199023255552'),
])
def test_import_refuses_nested_columns_and_unallocated_refs(lists, source, message):
    imp(lists, """SELECT 1 AS ":t/id", ['a'] AS ":t/ss" """)
    before, count = snapshot(lists), datom_count(lists)
    with pytest.raises(Exception, match=message):
        imp(lists, source)
    assert datom_count(lists) == count and snapshot(lists) == before
    assert imp(lists, """SELECT 7 AS ":t/id" """)["created"] == 1


# --- Parquet: a whole store out and back --------------------------------------------------------------------

def test_export_then_import_store_round_trips(flights, tmp_path):
    out = tmp_path / "export"
    (files, current, history), = rows(flights, "SELECT * FROM mentat_export(?)", [str(out)])
    tables = [t for (t,) in rows(flights, "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'mentat'")]
    assert files == len(tables) == len(list(out.glob("*.parquet")))
    assert rows(flights, "SELECT * FROM mentat_import_store(?, store := 'copy')", [str(out)]) == [
        (files, current, history)]
    for t in tables:
        assert rows(flights, f"SELECT count(*) FROM mentat.{t}") == rows(flights, f"SELECT count(*) FROM copy.{t}")
        assert rows(flights, f"(FROM mentat.{t} EXCEPT ALL FROM copy.{t}) UNION ALL "
                             f"(FROM copy.{t} EXCEPT ALL FROM mentat.{t})") == [], t
    query = dict(example_queries())["rain_delay"]
    copied = query.replace("[?f :flight/dep-delay ?delay]]')", "[?f :flight/dep-delay ?delay]]', store := 'copy')")
    assert copied != query and rows(flights, copied) == rows(flights, query)
    # the copy is a store like any other: it takes transactions, with the next entids
    r = transact(flights, '[{:airline/code "ZZ" :airline/name "Zed"}]', store="copy")
    assert r["tx"] == rows(flights, "SELECT max(e) + 1 FROM mentat.cur_9")[0][0]
    with pytest.raises(Exception, match="already exists"):
        rows(flights, "SELECT * FROM mentat_import_store(?, store := 'copy')", [str(out)])
    with pytest.raises(Exception, match="no exported store"):
        rows(flights, "SELECT * FROM mentat_import_store(?, store := 'nothing')", [str(tmp_path)])
    assert rows(flights, "SELECT count(*) FROM duckdb_tables() WHERE schema_name = 'nothing'") == [(0,)]

    # attached read-only: the same answers, read straight from the files; writers refuse it
    assert rows(flights, "SELECT * FROM mentat_attach_parquet(?, store := 'pq')", [str(out)]) == [
        (files, current, history)]
    attached = query.replace("[?f :flight/dep-delay ?delay]]')", "[?f :flight/dep-delay ?delay]]', store := 'pq')")
    assert rows(flights, attached) == rows(flights, query)
    assert rows(flights, "SELECT count(*) FROM duckdb_views() WHERE schema_name = 'pq'")[0][0] == files - 2
    with pytest.raises(Exception, match="pq is read-only: a Parquet export attached from"):
        imp(flights, """SELECT 'QQ' AS ":airline/code" """, store="pq")
    with pytest.raises(Exception):
        transact(flights, '[{:airline/code "QQ"}]', store="pq")
    code = aid(flights, ":airline/code")
    assert rows(flights, f"SELECT count(*) FROM pq.cur_{code}") == [(16,)]


# --- the notebook -----------------------------------------------------------------------------------------------

def test_notebook_runs_headless_and_draws_its_figure(csv):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("matplotlib")
    figure = ROOT / "build" / "flights_delay_by_airline.png"
    figure.unlink(missing_ok=True)
    nb = nbformat.read(EXAMPLES / "flights.ipynb", as_version=4)
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(EXAMPLES)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs)
    assert "DIFFERENT" not in text and text.count("same as plain SQL") == len(ORACLES)
    assert figure.exists() and figure.stat().st_size > 10_000
