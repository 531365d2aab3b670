"""Fuzzing through the loaded extension: mutated calls of every mentat SQL function, made from Python duckdb in a
child process against a store with a schema and data.

The calls are seeded with every query, transaction, pull pattern and input written in tests/*.py (their string
constants), mutated token by token (deleted, repeated, swapped, spliced from another seed, numbers made huge,
strings made hostile, keywords renamed, brackets nested thousands deep, text cut short, odd unicode and bad
escapes inserted), and called with named-parameter values of every kind (wrong types, NULLs, huge numbers, deep
lists, empty and odd text). Each call must either answer or raise a duckdb.Error whose text names the problem
(`message_names_the_problem`); the child process must never die or hang (it is restarted on the same store file,
and the call that killed it is reported); and a rejected write (mentat_transact, mentat_tx, mentat_transact_many as a
whole, mentat_import, mentat_import_store, and every mentat_with) must leave the store's datoms unchanged: after each
such call the child compares the row counts of every table of the store (DuckDB's catalog keeps them) and the
checksum of the partitions table with those before; and every 50 calls a checksum of every row of every table
and of `mentat_datoms('EAVT')`, which must be unchanged unless a write was accepted in those 50 calls (this
catches a change that keeps every row count, such as a delete, within 50 calls; the suite's run looks every 200). A rejected `mentat_export` must leave its directory as it was.

Usage: python3 benchmarks/py/fuzz_ext.py [--calls 100000] [--seed 0] [--full-check-every 50] [--report out.json]
Prints the figures: calls per function, answered, errored, error texts that do not name the problem, panics,
changed stores, crashes and hangs, time. tests/test_fuzz_ext.py runs 2,000 calls of the same in the suite."""
import argparse
import ast
import collections
import json
import os
import pathlib
import random
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXT = pathlib.Path(os.environ.get("MENTAT_EXTENSION", ROOT / "build" / "mentat.duckdb_extension"))
CALL_TIMEOUT = 60.0  # seconds before a call counts as a hang

# ------------------------------------------------------------------------------------------------ the seeds


def seeds(tests_dir=ROOT / "tests"):
    """The EDN string constants of the Python tests, sorted into queries, transactions (schema ones apart), and
    other EDN (pull patterns, inputs, lookup refs, rule sets)."""
    queries, txs, schemas, other = set(), set(), set(), set()
    for f in sorted(pathlib.Path(tests_dir).glob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                continue
            s = node.value.strip()
            if not s.startswith(("[", "{", "(")) or len(s) > 20000:
                continue
            if ":find" in s:
                queries.add(s)
            elif ":db/valueType" in s:
                schemas.add(s)
            elif s.startswith(("[{", "[[:db", "[ {", "[\n")) or ":db/add" in s or ":db/retract" in s:
                txs.add(s)
            else:
                other.add(s)
    return {"queries": sorted(queries), "txs": sorted(txs), "schemas": sorted(schemas), "other": sorted(other)}


# ------------------------------------------------------------------------------------------------ mutations

TOKEN = re.compile(r'"(?:\\.|[^"\\])*"?|#\{|#_|##\w+|#inst|#uuid|\^|[\[\](){}]|[^\s\[\](){}",]+|[\s,]+',
                   re.S)

HUGE_NUMBERS = ["9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
                "18446744073709551616", "1" + "0" * 400, "1N", "1.5M", "1e308", "1e309", "-1e309", "4.9e-324",
                "-0.0", "##NaN", "##Inf", "##-Inf", "0x7fffffffffffffff", "0xffffffffffffffffff", "1/0", "08",
                "+", "-", "1.2.3", "1e", ".5", "2r1010", "36rZZ", "0", "-1", "4294967296", "281474976710656",
                "1099511627776", "65536", "100"]

ODD_TEXT = ["", " ", "\x00", "a\x00b", "\n", "\r\n", "\t", "'", "''", '"', "\\", "\\\\", "'); DROP TABLE x; --",
            "\"; DROP TABLE mentat.partitions; --", "${x}", "%s%n", "\u202e\u202d", "\ufeff", "\u200b\u200d",
            "e\u0301\u0301\u0301", "\U0001F600\U0001F469\u200d\U0001F467", "\uffff", "\U0010ffff", "\ufffd",
            "\x7f\x01\x1b[31m", "Ω≈ç√", "ＡＢＣ", "x" * 1000, "é" * 500, "\u0000" * 3]

# EDN string escapes, good and bad (the reader must answer or name the problem; a lone surrogate is invalid)
ODD_ESCAPES = ["\\u0000", "\\ud800", "\\udfff", "\\ud83d\\ude00", "\\uZZZZ", "\\u12", "\\x41", "\\q", "\\",
               "\\n\\t\\r\\\"\\\\", "\\b\\f", "\\u00e9"]

KEYWORDS = [":db/id", ":db/ident", ":db/add", ":db/retract", ":db/cas", ":db/retractEntity", ":db.fn/retractAttribute",
            ":db/txInstant", ":db/valueType", ":db.type/ref", ":db.type/tuple", ":db.cardinality/many", ":find", ":in",
            ":where", ":with", ":keys", ":syms", ":strs", ":order", ":limit", ":offset", ":as", ":default",
            ":user/name", ":user/email", ":user/friend", ":user/_friend", ":issue/comment", ":no/such", ":a",
            ":a/b/c", ":/", "::x", ":", ":db/", ":*+!-_?<>=/a.b", ":user/tags", "..."]

SYMBOLS = ["?x", "?e", "?v", "$", "%", "_", "...", ".", "?", "?-", "??", "$x", "pull", "count", "sum", "avg",
           "distinct", "ground", "tuple", "untuple", "get-else", "missing?", "re-find", "tx-ids", "tx-data", "or",
           "not", "and", "not-join", "or-join", "rule", "nil", "true", "false", "fn", "str", "+", "*"]

OTHER_TOKENS = ["#inst \"2021\"", "#inst \"bad\"", "#inst 5", "#uuid \"00000000-0000-0000-0000-000000000000\"",
                "#uuid \"x\"", "#{}", "#{1 1}", "{}", "{:a}", "()", "[]", "#_", "#foo", "#", "^:m", "\\c", "\\newline",
                "'", "`", "~", "@", ";", "#\"re\"", "nil", "[nil]", "{nil nil}", "#:ns{:a 1}", "#?(:clj 1)"]


def edn_string(s):
    """`s` as an EDN string literal (NUL and control characters as \\u escapes)."""
    out = []
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 and ch not in "\n\t":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def tokens(text):
    return TOKEN.findall(text) or [text]


def nest(rng, text):
    depth = rng.choice([10, 100, 1000, 10000, 100000])
    o, c = rng.choice([("[", "]"), ("(", ")"), ("{:a ", "}"), ("#{", "}"), ("[[", "]]")])
    if rng.random() < 0.2:  # unbalanced
        return o * depth + text
    return o * depth + text + c * depth


def mutate(rng, text, pool):
    """One to four token-level mutations of an EDN text; `pool` gives tokens and subforms to splice in."""
    toks = tokens(text)
    for _ in range(rng.choice([1, 1, 1, 2, 2, 3, 4])):
        if not toks:
            toks = ["[]"]
        i = rng.randrange(len(toks))
        op = rng.randrange(14)
        if op == 0:
            del toks[i]
        elif op == 1:
            toks.insert(i, toks[i])
        elif op == 2:
            j = rng.randrange(len(toks))
            toks[i], toks[j] = toks[j], toks[i]
        elif op == 3:  # splice a token of another seed
            toks[i] = rng.choice(tokens(rng.choice(pool)))
        elif op == 4:  # splice a whole other seed
            toks.insert(i, " " + rng.choice(pool) + " ")
        elif op == 5:
            toks[i] = rng.choice(HUGE_NUMBERS)
        elif op == 6:
            toks[i] = edn_string(rng.choice(ODD_TEXT))
        elif op == 7:
            toks[i] = '"' + rng.choice(ODD_ESCAPES) + '"'
        elif op == 8:
            toks[i] = rng.choice(KEYWORDS)
        elif op == 9:
            toks[i] = rng.choice(SYMBOLS)
        elif op == 10:
            toks[i] = rng.choice(OTHER_TOKENS)
        elif op == 11:
            return nest(rng, "".join(toks))
        elif op == 12:  # cut short
            s = "".join(toks)
            return s[: rng.randrange(len(s) + 1)]
        else:  # a raw odd character anywhere
            s = "".join(toks)
            k = rng.randrange(len(s) + 1)
            return s[:k] + rng.choice(ODD_TEXT[:26] + list("#{}[]()\"\\:;^@~'`,/")) + s[k:]
    return "".join(toks)


# ------------------------------------------------------------------------------------------------ call making


def sql_str(s):
    return "'" + s.replace("'", "''") + "'"


def wild_value(rng, edn_pool):
    """A SQL expression of any type for a named parameter or argument: wrong types, NULLs, huge numbers, odd
    text (never with a NUL: SQL text is a C string), deep lists, EDN."""
    k = rng.randrange(24)
    if k == 0:
        return "NULL"
    if k == 1:
        return rng.choice(["0", "-1", "1", "9223372036854775807", "-9223372036854775808", "1099511627777",
                           "65536", "170141183460469231731687303715884105727::HUGEINT", "1e308", "'nan'::DOUBLE",
                           "'inf'::DOUBLE", "-0.0", "1::TINYINT", "18446744073709551615::UBIGINT", "3.5::DECIMAL(4,1)"])
    if k == 2:
        return rng.choice(["TIMESTAMP 'infinity'", "TIMESTAMP '-infinity'", "TIMESTAMP '1970-01-01'",
                           "TIMESTAMPTZ '2262-04-11 23:47:16+00'", "DATE '-infinity'", "DATE '0001-01-01'",
                           "TIME '12:00'", "INTERVAL 3 DAY", "now()", "TIMESTAMP_NS '2000-01-01'",
                           "'2021-01-01T00:00:00Z'", "'yesterday'", "'2021-13-45'"])
    if k == 3:
        return rng.choice(["true", "false", "NULL::BOOLEAN", "'true'", "'yes'"])
    if k == 4:
        return rng.choice(["[]", "[1, 2]", "[NULL]", "['a', NULL]", "[[1]]", "{'a': 1}", "MAP {'a': 1}",
                           "[1, 'x']", "range(5)", "{'x': [1, {'y': NULL}]}", "union_value(a := 1)"])
    if k == 5:
        d = rng.choice([10, 50, 200])
        return "[" * d + "1" + "]" * d
    if k == 6:
        return rng.choice(["'\\xFF'::BLOB", "'\\x00'::BLOB", "gen_random_uuid()", "'x'::BLOB",
                           "'00000000-0000-0000-0000-000000000000'::UUID"])
    if k == 7:
        return rng.choice(["chr(0)", "'a' || chr(0) || 'b'", "repeat('x', 1000000)", "repeat('[', 100000)",
                           "chr(55296)", "chr(1114111)"])
    if k == 8:
        return sql_str(rng.choice(ODD_TEXT[1:]).replace("\x00", ""))
    if k == 9:
        return rng.choice(["'mentat'", "'main.mentat'", "'memory.mentat'", "'a.b.c'", "'.'", "'..'", "''",
                           "'system.main'", "'temp.main'", "'information_schema'", "'pg_catalog'", "'MENTAT'",
                           "'\"mentat\"'", "'x; DROP TABLE y'", "' mentat'", "'nope'", "'main.nope'", "'\"'"])
    return sql_str(mutate(rng, rng.choice(edn_pool), edn_pool).replace("\x00", ""))


def edn_arg(rng, text):
    """The EDN text as the call's argument: mostly a bound parameter (any character, NUL included), sometimes a
    SQL literal, NULL, or another type."""
    r = rng.random()
    if r < 0.8:
        return "?", [text]
    if r < 0.9 and "\x00" not in text:
        return sql_str(text), []
    if r < 0.95:
        return "NULL", []
    return rng.choice(["42", "[1]", "'x'::BLOB", "NULL::VARCHAR", "{'a': 1}", "true"]), []


def named(rng, names, pools, p=0.3):
    """Named parameters: each of `names` with chance `p`, with a plausible value or a wild one."""
    out, params = [], []
    for n in names:
        if rng.random() >= p:
            continue
        r = rng.random()
        if r < 0.5:
            out.append(f"{n} := ?")
            params.append(plausible(rng, n, pools))
        else:
            out.append(f"{n} := {wild_value(rng, pools['all'])}")
    return out, params


def plausible(rng, name, pools):
    """A value of the right type for named parameter `name`, mutated or not."""
    if name == "inputs":
        v = rng.choice(pools["other"] + ['["a@b.c"]', "[]", "[[1 2]]", '[":a"]', "[1 2 3]"])
        return mutate(rng, v, pools["all"]) if rng.random() < 0.7 else v
    if name == "store":
        return rng.choice(["mentat", "main.mentat", "nope", "a.b.c", "", "Mentat", "x'y", 'x"y', "main"])
    if name in ("as_of", "since"):
        return rng.choice([0, 1, 1099511627776, 1099511627778, 2 ** 63 - 1, -(2 ** 63), -1, 10 ** 6,
                           "2021-01-01", "2999-01-01T00:00:00Z", "not a time", ""])
    if name == "history":
        return rng.choice([True, False, None])
    if name == "refs":
        v = rng.choice(["{:user/friend :user/email}", "{}", "{:issue/assignee :user/email}", "[]",
                        "{:user/name :user/email}", "{:no/such :user/email}"])
        return mutate(rng, v, pools["all"]) if rng.random() < 0.5 else v
    if name == "missing_refs":
        return rng.choice(["error", "create", "", "ERROR", "ignore", "create "])
    if name in ("e",):
        return rng.choice([65536, 65537, 0, -1, 2 ** 63 - 1, 100, 1099511627777])
    if name == "a":
        return rng.choice([":user/name", ":user/email", ":db/ident", ":no/such", "user/name", "", ":user/friend",
                           ":db/txInstant", ":user/_friend"])
    if name == "v":
        return rng.choice(["a@b.c", "Ann", "", "65536", ":state/open", "1", "\x00", "2021-01-01"])
    return None


IMPORT_SOURCES = [
    """SELECT 'imp' || i AS ":user/email", i AS ":user/age" FROM range(3) t(i)""",
    """SELECT 'x' AS ":user/name\"""",
    """SELECT 1 AS ":user/name\"""",
    """SELECT NULL AS ":user/name\"""",
    """SELECT 'a@b.c' AS ":user/email", 'bob' AS ":user/name\"""",
    """SELECT [':a', ':b'] AS ":user/tags\"""",
    """SELECT 'a@b.c' AS ":user/friend\"""",
    """SELECT 1 AS "nope\"""",
    """SELECT 1 AS ":no/such\"""",
    """SELECT * FROM mentat.partitions""",
    """SELECT 1/0 AS ":user/age\"""",
    """SELECT i AS ":user/age" FROM range(10000) t(i)""",
    """SELECT 'dup' AS ":user/email" FROM range(2)""",
    """SELECT 'u' || i AS ":user/ssn", 'v' AS ":user/name" FROM range(2) t(i)""",
    """SELECT 's' AS ":user/ssn" FROM range(2)""",
    """DROP TABLE mentat.partitions""",
    """SELECT 1; SELECT 2""",
    """SELECT""",
    """SELECT 2.5 AS ":user/score", 'inf'::DOUBLE AS ":user/age\"""",
    """SELECT 'open' AS ":issue/state\"""",
    """SELECT ':state/open' AS ":issue/state\"""",
    """SELECT 9223372036854775807 AS ":user/friend\"""",
]

FUNCTIONS = ["mentat_q", "mentat_sql", "mentat_explain", "mentat_transact", "mentat_transact_many", "mentat_with",
             "mentat_pull", "mentat_pull_many", "mentat_datoms", "mentat_schema", "mentat_entity_index",
             "mentat_import", "mentat_export", "mentat_import_store", "mentat_attach_parquet", "pull_in_query",
             "mentat_fulltext_language", "mentat_sync", "mentat_tx"]
WEIGHTS = [30, 5, 3, 25, 4, 4, 8, 4, 6, 1, 1, 4, 0.5, 0.5, 0.5, 3, 0.5, 0.5, 6]
WRITES = {"mentat_transact", "mentat_transact_many", "mentat_import", "mentat_import_store", "mentat_with",
          "mentat_fulltext_language", "mentat_tx"}


def edn_of(rng, kind, pools):
    """A seed of `kind`, mutated (mostly) or as written."""
    src = rng.choice(pools[kind]) if rng.random() < 0.9 else rng.choice(pools["all"])
    return mutate(rng, src, pools["all"]) if rng.random() < 0.85 else src


def make_call(rng, pools, workdir):
    """One call: {fn, sql, params}."""
    fn = rng.choices(FUNCTIONS, WEIGHTS)[0]
    if fn in ("mentat_q", "mentat_explain"):
        a, p = edn_arg(rng, edn_of(rng, "queries", pools))
        names = ["inputs", "store", "as_of", "since", "history"] if fn == "mentat_q" else ["inputs"]
        n, np_ = named(rng, names, pools, 0.25)
        sql, params = f"SELECT * FROM {fn}({', '.join([a] + n)})", p + np_
    elif fn == "mentat_sql":
        args, params = [], []
        for kind in ("queries", "other", None)[: rng.randrange(1, 4)]:
            if kind is None:
                args.append(rng.choice(["'mentat'", "NULL", "'nope'", "'a.b.c'", "42"]))
            else:
                a, p = edn_arg(rng, edn_of(rng, kind, pools))
                args.append(a)
                params += p
        sql = f"SELECT length(mentat_sql({', '.join(args)}))"
    elif fn == "mentat_transact":
        a, p = edn_arg(rng, edn_of(rng, "txs", pools))
        n, np_ = named(rng, ["store"], pools, 0.05)
        sql, params = f"SELECT * FROM mentat_transact({', '.join([a] + n)})", p + np_
    elif fn == "mentat_tx":
        a, params = edn_arg(rng, edn_of(rng, "txs", pools))
        store = [rng.choice(["'mentat'", "NULL", "'a.b.c'", "42"])] if rng.random() < 0.05 else []
        sql = f"SELECT mentat_tx({', '.join([a] + store)})"
    elif fn == "mentat_transact_many":
        k = rng.choice([0, 1, 2, 3, 5])
        items = [edn_of(rng, "txs", pools) for _ in range(k)]
        if rng.random() < 0.2:
            sql, params = f"SELECT * FROM mentat_transact_many({wild_value(rng, pools['all'])})", []
        else:
            sql = "SELECT * FROM mentat_transact_many(?::VARCHAR[])"
            params = [[None if rng.random() < 0.1 else x for x in items]]
    elif fn == "mentat_with":
        a, p = edn_arg(rng, edn_of(rng, "txs", pools))
        b, p2 = edn_arg(rng, edn_of(rng, "queries", pools))
        n, np_ = named(rng, ["inputs"], pools, 0.3)
        sql, params = f"SELECT * FROM mentat_with({', '.join([a, b] + n)})", p + p2 + np_
    elif fn in ("mentat_pull", "mentat_pull_many"):
        a, p = edn_arg(rng, edn_of(rng, "other", pools))
        if fn == "mentat_pull":
            ent = rng.choice(["65536", "65537", "100", "0", "-1", "9223372036854775807", "NULL", "'65536'",
                              "':user/name'", "'[:user/email \"a@b.c\"]'", "'[:user/email]'", "1.5", "[1]",
                              sql_str(mutate(rng, '[:user/email "a@b.c"]', pools["all"]).replace("\x00", ""))])
        else:
            ent = rng.choice(["[65536, 65537]", "[]", "[NULL]", "NULL", "range(65536, 65546)", "[-1, 0]",
                              "['65536']", "[':user/name', '[:user/email \"a@b.c\"]']", "65536",
                              "(SELECT list(i) FROM range(65536, 67536) t(i))"])
        n, np_ = named(rng, ["store", "as_of", "since"], pools, 0.15)
        sql, params = f"SELECT * FROM {fn}({', '.join([a, ent] + n)})", p + np_
    elif fn == "pull_in_query":
        pat = edn_of(rng, "other", pools)
        q = f"[:find (pull ?e {pat}) :where [?e :user/name]]" if rng.random() < 0.7 else \
            f"[:find (pull ?e pattern) :in $ pattern :where [?e :user/email]]"
        a, p = edn_arg(rng, q)
        if "pattern :where" in q:
            sql, params = f"SELECT * FROM mentat_q({a}, inputs := ?)", p + ["[" + pat + "]"]
        else:
            sql, params = f"SELECT * FROM mentat_q({a})", p
    elif fn == "mentat_datoms":
        idx = rng.choice(["'EAVT'", "'AEVT'", "'AVET'", "'VAET'", "'eavt'", "'XYZ'", "''", "NULL", "1",
                          wild_value(rng, pools["all"])])
        n, np_ = named(rng, ["e", "a", "v", "store", "as_of", "since", "history"], pools, 0.3)
        sql, params = f"SELECT count(*) FROM mentat_datoms({', '.join([idx] + n)})", np_
    elif fn == "mentat_fulltext_language":
        lang = rng.choice(["english", "none", "FRENCH", " german ", "klingon", "", "NULL", "english\x00", "e" * 5000,
                           mutate(rng, "english", pools["all"])])
        n, np_ = named(rng, ["store"], pools, 0.2)
        sql, params = f"SELECT * FROM mentat_fulltext_language({', '.join(['?'] + n)})", [lang] + np_
    elif fn in ("mentat_schema", "mentat_entity_index", "mentat_sync"):
        n, np_ = named(rng, ["store"], pools, 0.5)
        sql, params = f"SELECT count(*) FROM {fn}({', '.join(n)})", np_
    elif fn == "mentat_import":
        src = rng.choice(IMPORT_SOURCES)
        if rng.random() < 0.4:
            src = mutate(rng, src, IMPORT_SOURCES + pools["other"])
        n, np_ = named(rng, ["store", "refs", "missing_refs"], pools, 0.3)
        sql, params = f"SELECT * FROM mentat_import({', '.join(['?'] + n)})", [src] + np_
    else:  # export, import_store, attach_parquet: directories, good and odd
        name = rng.choice(["exp", "exp'q", 'exp"dq', "exp space", "ëxp😀", "exp\\b", "a/b/c", "", ".", "..",
                           "exp;DROP"])
        where = rng.choice([str(workdir / "dirs" / name), str(workdir / "dirs" / name) + "/",
                            "/nonexistent/x", "/proc/self", "", str(workdir / "store.duckdb"),
                            str(workdir / "dirs" / "good")])
        if fn == "mentat_export":
            n, np_ = named(rng, ["store"], pools, 0.2)
            sql, params = f"SELECT * FROM mentat_export({', '.join(['?'] + n)})", [where] + np_
        else:
            store = rng.choice(["copy", "mentat", "nope.x", "", "copy2", "a.b.c"])
            sql, params = f"SELECT * FROM {fn}(?, store := ?)", [where, store]
            if fn == "mentat_import_store":
                fn_store = store
                return {"fn": fn, "sql": sql, "params": params, "store": fn_store}
        return {"fn": fn, "sql": sql, "params": params, "dir": where}
    return {"fn": fn, "sql": sql, "params": params}


# ------------------------------------------------------------------------------------------------ the check

BUG_TEXT = ("panicked", "panic", "RUST_BACKTRACE", "unwrap()", "INTERNAL Error", "FATAL", "stack overflow",
            "Segmentation", "assertion failed", "not yet implemented", "unreachable")
GENERIC = {"", "error", "unknown error", "failed", "invalid", "mentat", "mentat error", "null", "none",
           "invalid input", "bad input", "syntax error"}
PREFIX = re.compile(r"^(?:[A-Z][A-Za-z ]*? Error|Error|[A-Za-z]+Exception): ", re.S)


def message_names_the_problem(msg):
    """The check each error text must pass: not empty, no panic or internal-error text, and more than a
    generic word once DuckDB's class prefix ("Binder Error: ", "Invalid Input Error: ") is taken off: at least
    12 characters of which some are letters. Returns (ok, why not)."""
    for b in BUG_TEXT:
        if b.lower() in msg.lower():
            return False, f"contains {b!r}"
    body = msg
    while True:
        m = PREFIX.match(body)
        if not m:
            break
        body = body[m.end():]
    body = body.strip()
    if body.lower().strip(" .:") in GENERIC:
        return False, "generic"
    if len(body) < 12 or sum(c.isalpha() for c in body) < 6:
        return False, "too short"
    return True, ""


def shape(msg):
    """An error text with its specifics taken out, to count kinds of errors."""
    s = msg.split("\n")[0]
    s = re.sub(r"`[^`]*`?", "`…`", s)
    s = re.sub(r'"(?:\\.|[^"\\])*"?', '"…"', s)
    s = re.sub(r"'[^']*'?", "'…'", s)
    s = re.sub(r":[\w.*+!\-?<>=/]+", ":kw", s)
    s = re.sub(r"\d+", "N", s)
    return s[:160]


# ------------------------------------------------------------------------------------------------ the child

CHILD = r'''
import json, os, sys, time
import duckdb

db, ext, errpath, setup = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
con = duckdb.connect(db, config={"allow_unsigned_extensions": "true"})
con.execute(f"LOAD '{ext}'")
WRITES = set(json.loads(sys.argv[5]))


def sizes():
    """table -> row count as DuckDB's catalog keeps it (grows with every insert; one cheap catalog query), after
    the transaction log is applied (mentat_sync: an accepted write's datoms may wait there, and the background
    indexer would move them into the tables between two looks). The log table itself is left out."""
    try:
        con.execute("SELECT * FROM mentat_sync()").fetchall()
    except duckdb.Error:
        pass  # no store yet
    return dict(con.execute("SELECT table_name, estimated_size FROM duckdb_tables() WHERE database_name = "
                            "current_database() AND schema_name = 'mentat' AND table_name <> 'log'").fetchall())


def sums(tables):
    """table -> [rows, checksum of every row] for `tables`."""
    if not tables:
        return {}
    sql = " UNION ALL ".join(f"SELECT '{t}' AS t, count(*) AS n, (coalesce(sum(hash(x)::HUGEINT), 0) % 1000000007)"
                             f"::BIGINT AS h FROM mentat.\"{t}\" x" for t in sorted(tables))
    return {t: [n, h] for t, n, h in con.execute(sql).fetchall()}


def datoms_state():
    """(rows, checksum) of mentat_datoms('EAVT'): the datoms as mentat itself reads them."""
    return list(con.execute("SELECT count(*), coalesce((sum(hash(e, a, v, tx, added)::HUGEINT) % 1000000007)::BIGINT, 0) "
                            "FROM mentat_datoms('EAVT')").fetchall()[0])


def listing(d):
    if not d or not os.path.isdir(d):
        return None
    return sorted(os.listdir(d))


def unbytes(p):
    return bytes.fromhex(p["__bytes__"]) if isinstance(p, dict) and "__bytes__" in p else p


if setup == "1":
    for kind in ("schemas", "txs"):
        for edn in json.loads(open(errpath + ".seeds").read())[kind]:
            try:
                con.execute("SELECT * FROM mentat_transact(?)", [edn]).fetchall()
            except duckdb.Error:
                pass
last_sizes = sizes()
last = sums(last_sizes)
last_datoms, accepted = datoms_state(), False
print("@@" + json.dumps({"ready": True, "datoms": last_datoms[0], "tables": len(last)}), flush=True)
errsize = os.path.getsize(errpath)
for line in sys.stdin:
    call = json.loads(line)
    d = call.get("dir")
    before_dir = listing(d) if call["fn"] == "mentat_export" else None
    out = {"i": call["i"]}
    t = time.perf_counter()
    try:
        res = con.execute(call["sql"], [unbytes(p) for p in call["params"]]).fetchall()
        out["ok"] = True
        out["rows"] = len(res)
    except duckdb.Error as e:
        out["ok"] = False
        out["err"] = str(e)
        out["etype"] = type(e).__name__
    except Exception as e:  # the Python client itself refused the parameters: not an answer of mentat's
        out["ok"] = False
        out["client"] = f"{type(e).__name__}: {e}"[:500]
    out["t"] = time.perf_counter() - t
    try:
        if call["fn"] in WRITES:
            # The tables whose row count moved, and the partitions (updated in place): a rejected write (and any
            # mentat_with) must move none of them; an accepted one re-reads their checksums (with the current-state
            # table of every history table that grew: a retraction deletes from it).
            now_sizes = sizes()
            moved = {t for t in set(now_sizes) | set(last_sizes) if now_sizes.get(t) != last_sizes.get(t)}
            look = moved | {t for t in ("partitions",) if t in now_sizes}
            look |= {"cur_" + t[5:] for t in moved if t.startswith("hist_") and "cur_" + t[5:] in now_sizes}
            now = sums(look)
            changed = {t: [last.get(t), now.get(t)] for t in look if now.get(t) != last.get(t)}
            if changed and not (out["ok"] and call["fn"] != "mentat_with"):
                out["changed"] = {k: v for k, v in list(changed.items())[:10]}
            if changed:
                accepted = True
            for t in set(last) - set(now_sizes):
                del last[t]
            last.update(now)
            last_sizes = now_sizes
        if call.get("check"):
            # now and then every table in full, and mentat's own reading of the datoms: unchanged unless a write
            # was accepted since the last look (a change that kept every row count is caught here)
            last_sizes = sizes()
            now, now_datoms = sums(last_sizes), datoms_state()
            if (now != last or now_datoms != last_datoms) and not accepted:
                out["changed"] = {"full check": [len(last), len(now)], "datoms": [last_datoms, now_datoms]}
            last, last_datoms, accepted = now, now_datoms, False
    except duckdb.Error as e:
        out["state_error"] = str(e)[:500]
    if call["fn"] == "mentat_export" and not out["ok"]:
        after_dir = listing(d)
        if after_dir != before_dir:
            out["export_left"] = [before_dir, after_dir]
    size = os.path.getsize(errpath)
    if size != errsize:
        with open(errpath, "rb") as f:
            f.seek(errsize)
            out["stderr"] = f.read(4000).decode("utf-8", "replace")
        errsize = size
    print("@@" + json.dumps(out), flush=True)
'''


class Child:
    def __init__(self, workdir, setup):
        self.err = open(workdir / "child.stderr", "ab")
        self.errpath = workdir / "child.stderr"
        self.noise = []
        self.buf = b""
        self.p = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(workdir / "store.duckdb"), str(EXT), str(self.errpath),
             "1" if setup else "0", json.dumps(sorted(WRITES))],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err, text=True)
        line = self.readline(600)
        if not line:
            raise RuntimeError("the fuzz child did not start: "
                               + self.errpath.read_text(errors="replace")[-3000:])
        self.ready = json.loads(line)

    def readline(self, timeout):
        """The child's next answer line (its other output is kept in self.noise); None on a time-out, "" at the
        end of its output. Reads the pipe itself (no Python buffering that select cannot see)."""
        deadline = time.monotonic() + timeout
        fd = self.p.stdout.fileno()
        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                text = line.decode("utf-8", "replace")
                if text.startswith("@@"):
                    return text[2:]
                self.noise.append(text[:500])
            r, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not r:
                return None
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return ""
            self.buf += chunk

    def call(self, call):
        try:
            self.p.stdin.write(json.dumps(call) + "\n")
            self.p.stdin.flush()
        except BrokenPipeError:
            return "died"
        line = self.readline(CALL_TIMEOUT)
        if line is None:
            return "hang"
        if not line:
            return "died"
        return json.loads(line)

    def stop(self):
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait()
        self.err.close()


def encode(params):
    return [{"__bytes__": p.hex()} if isinstance(p, bytes) else p for p in params]


def run(calls=100000, seed=0, workdir=None, quiet=False, report=None, full_check_every=50):
    """Makes `calls` fuzzed calls; returns the figures as a dict (see the module docs)."""
    own = workdir is None
    workdir = pathlib.Path(workdir or tempfile.mkdtemp(prefix="mentat-fuzz-"))
    (workdir / "dirs").mkdir(parents=True, exist_ok=True)
    pools = seeds()
    pools["all"] = pools["queries"] + pools["txs"] + pools["other"] + pools["schemas"]
    (workdir / "child.stderr").touch()
    (workdir / "child.stderr.seeds").write_text(json.dumps(pools))
    rng = random.Random(seed)
    start = time.perf_counter()
    child = Child(workdir, setup=True)
    figures = {"calls": 0, "answered": 0, "errored": 0, "client_refused": 0, "unnamed": 0, "panics": 0,
               "changed": 0, "export_left": 0, "crashes": 0, "hangs": 0, "per_function": {},
               "setup_datoms": child.ready["datoms"], "seeds": {k: len(v) for k, v in pools.items() if k != "all"}}
    per_fn = collections.defaultdict(lambda: collections.Counter())
    shapes = collections.Counter()
    findings = []
    slowest = (0.0, None)
    try:
        for i in range(calls):
            call = make_call(rng, pools, workdir)
            call["i"] = i
            short = {"fn": call["fn"], "sql": call["sql"][:400],
                     "params": [p if not isinstance(p, str) or len(p) < 400 else p[:300] + f"…({len(p)} chars)"
                                for p in call["params"]]}
            call["params"] = encode(call["params"])
            if i % full_check_every == full_check_every - 1:
                call["check"] = True  # a read never writes: the store is compared now and then after reads too
            out = child.call(call)
            fn = call["fn"]
            per_fn[fn]["calls"] += 1
            figures["calls"] += 1
            if out in ("died", "hang"):
                figures["crashes" if out == "died" else "hangs"] += 1
                per_fn[fn][out] += 1
                tail = (workdir / "child.stderr").read_text(errors="replace")[-2000:]
                findings.append({"kind": out, "call": short, "stderr": tail})
                child.stop()
                child = Child(workdir, setup=False)
                continue
            per_fn[fn]["seconds"] += out["t"]
            if out["t"] > slowest[0]:
                slowest = (out["t"], {"fn": fn, "sql": call["sql"][:300],
                                      "params": [str(p)[:300] for p in call["params"]]})
            if out.get("stderr") and "panick" in out["stderr"]:
                figures["panics"] += 1
                findings.append({"kind": "panic on stderr", "call": short, "stderr": out["stderr"]})
            if out.get("changed"):
                figures["changed"] += 1
                findings.append({"kind": "rejected write changed the store", "call": short, "err": out.get("err"),
                                 "changed": out["changed"]})
            if out.get("state_error"):
                findings.append({"kind": "the store could not be read after the call", "call": short,
                                 "err": out["state_error"]})
            if out.get("export_left"):
                figures["export_left"] += 1
                findings.append({"kind": "rejected export left files", "call": short, "err": out.get("err"),
                                 "listing": out["export_left"]})
            if out["ok"]:
                figures["answered"] += 1
                per_fn[fn]["answered"] += 1
            elif "client" in out:
                figures["client_refused"] += 1
                per_fn[fn]["client_refused"] += 1
                shapes["[python client] " + shape(out["client"])] += 1
            else:
                figures["errored"] += 1
                per_fn[fn]["errored"] += 1
                shapes[shape(out["err"])] += 1
                ok, why = message_names_the_problem(out["err"])
                if not ok:
                    figures["unnamed"] += 1
                    per_fn[fn]["unnamed"] += 1
                    if "panick" in out["err"]:
                        figures["panics"] += 1
                    findings.append({"kind": f"error text does not name the problem ({why})", "call": short,
                                     "err": out["err"][:2000]})
            if report and (i + 1) % 5000 == 0:  # partial figures, in case the run is stopped
                part = dict(figures, seconds=round(time.perf_counter() - start, 1), partial=True,
                            per_function={k: dict(v) for k, v in per_fn.items()}, top_errors=shapes.most_common(60),
                            findings=findings[:200])
                pathlib.Path(report).write_text(json.dumps(part, indent=1, default=str))
            if not quiet and (i + 1) % 5000 == 0:
                el = time.perf_counter() - start
                print(f"{i + 1} calls, {el:.0f} s: answered {figures['answered']}, errored {figures['errored']}, "
                      f"unnamed {figures['unnamed']}, changed {figures['changed']}, crashes {figures['crashes']}, "
                      f"hangs {figures['hangs']}", flush=True)
    finally:
        child.stop()
    figures["seconds"] = round(time.perf_counter() - start, 1)
    figures["per_function"] = {k: {n: (round(x, 1) if n == "seconds" else x) for n, x in v.items()}
                               for k, v in sorted(per_fn.items())}
    figures["slowest_call"] = {"seconds": round(slowest[0], 3), "call": slowest[1]}
    figures["error_kinds"] = len(shapes)
    figures["top_errors"] = shapes.most_common(60)
    figures["findings"] = findings[:200]
    if report:
        pathlib.Path(report).write_text(json.dumps(figures, indent=1, default=str))
    if own:
        shutil.rmtree(workdir, ignore_errors=True)
    return figures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=100000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--full-check-every", type=int, default=50,
                    help="compare every row of every table and mentat_datoms every N calls (default 50)")
    ap.add_argument("--report", help="write every figure, the error kinds and the findings to this JSON file")
    a = ap.parse_args()
    f = run(a.calls, a.seed, report=a.report, full_check_every=a.full_check_every)
    print(f"\nfuzz_ext: {f['calls']} calls (seed {a.seed}) in {f['seconds']} s, seeds {f['seeds']}, "
          f"store of {f['setup_datoms']} datoms")
    print(f"{'function':24} {'calls':>7} {'answered':>9} {'errored':>8} {'client':>7} {'unnamed':>8} "
          f"{'crash':>6} {'hang':>5} {'seconds':>8}")
    for fn, c in f["per_function"].items():
        print(f"{fn:24} {c.get('calls', 0):7} {c.get('answered', 0):9} {c.get('errored', 0):8} "
              f"{c.get('client_refused', 0):7} {c.get('unnamed', 0):8} {c.get('died', 0):6} {c.get('hang', 0):5} "
              f"{c.get('seconds', 0):8}")
    print(f"answered {f['answered']}, errored {f['errored']} ({f['error_kinds']} kinds of error text), refused by "
          f"the Python client {f['client_refused']}; error texts that do not name the problem {f['unnamed']}, "
          f"panics {f['panics']}, rejected writes that changed the store {f['changed']}, rejected exports that "
          f"left files {f['export_left']}, crashes {f['crashes']}, hangs {f['hangs']}")
    print(f"slowest call: {f['slowest_call']['seconds']} s ({(f['slowest_call']['call'] or {}).get('fn')})")
    for x in f["findings"][:20]:
        print("FINDING", json.dumps(x, default=str)[:1500])
    bad = f["unnamed"] + f["panics"] + f["changed"] + f["export_left"] + f["crashes"] + f["hangs"]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
