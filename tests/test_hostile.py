"""Hostile values are stored and read back verbatim, and never executed: quotes, backslashes, newlines, SQL text,
emoji and combining characters, odd code points, a 10 MB string, and keyword idents made of every character the
EDN spec allows in a symbol. Each value goes in through mentat_transact (as an EDN string literal) or
mentat_import (as a SQL value), and comes back through mentat_q (the value found, as an input, and as a constant
inside the query text), mentat_pull (by lookup ref), mentat_datoms (by value), and a Parquet export imported again
(mentat_import_store) and attached (mentat_attach_parquet). The expected value is always the Python string the
test wrote. (NUL bytes through transact, q, pull and datoms are tests/test_session.py's
test_values_with_nul_bytes_travel_whole; here they ride along through import and Parquet.)"""
import duckdb
import pytest

from conftest import q, rows, transact

SCHEMA = ("[{:db/ident :h/key :db/valueType :db.type/string :db/cardinality :db.cardinality/one "
          ":db/unique :db.unique/identity} "
          "{:db/ident :h/text :db/valueType :db.type/string :db/cardinality :db.cardinality/one} "
          "{:db/ident :h/many :db/valueType :db.type/string :db/cardinality :db.cardinality/many} "
          "{:db/ident :h/kw :db/valueType :db.type/keyword :db/cardinality :db.cardinality/one} "
          "{:db/ident :h/n :db/valueType :db.type/long :db/cardinality :db.cardinality/one}]")

HOSTILE = {
    "single quote": "it's",
    "two single quotes": "''",
    "double quote": 'say "hi"',
    "lone double quote": '"',
    "backslash": "C:\\temp\\new",
    "trailing backslash": "ends with \\",
    "escape-looking text": "\\n is not a newline, \\u0041 is not A, \\\" is not a quote",
    "newlines": "line 1\nline 2\r\nline 3\n",
    "tab and controls": "a\tb\x01c\x1fd\x7fe",
    "ansi escape": "\x1b[31mred\x1b[0m",
    "sql injection": "'); DROP TABLE x; --",
    "sql injection 2": "\"; DROP TABLE mentat.partitions; --",
    "sql injection 3": "x' OR '1'='1",
    "sql comment": "/* not a comment */ -- nor this",
    "edn-looking text": '[:db/add "x" :h/n 1] {:a 1} #inst "2021" ]]]',
    "datalog-looking text": "[:find ?e :where [?e :h/key]]",
    "printf": "%s %d %n %%",
    "emoji": "\U0001F600 \U0001F469\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466 \U0001F1EB\U0001F1F7",
    "combining characters": "e\u0301 Z\u0351\u0362\u0328a\u0300\u0301\u0302lgo\u0303",
    "right-to-left override": "abc\u202edef\u202c",
    "zero-width": "a\u200bb\u200cc\u200dd\ufeff",
    "byte-order mark first": "\ufeffBOM",
    "highest code points": "\uffff \U0010ffff \ufffd",
    "cjk and greek": "日本語 Ελληνικά",
    "empty": "",
    "spaces only": "   ",
}
# NUL rides along where test_session does not take it (import, Parquet)
WITH_NUL = dict(HOSTILE, **{"nul": "a\x00b", "nul and quote": "\x00'\x00"})


def edn(s):
    """`s` as an EDN string literal: only `"` and `\\` are escaped, control characters as \\u escapes, every
    other character as itself."""
    out = []
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 and ch not in "\n\r\t":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


@pytest.fixture
def hostile(con):
    """A store holding every hostile value under its own key, as :h/text and (all of them) as :h/many of one
    entity; a table `x` that an executed injection would drop."""
    con.execute("CREATE TABLE x (i INTEGER)")
    con.execute("INSERT INTO x VALUES (1)")
    transact(con, SCHEMA)
    forms = " ".join(f"{{:db/id {edn('t' + str(i))} :h/key {edn(k)} :h/text {edn(v)}}}"
                     for i, (k, v) in enumerate(HOSTILE.items()))
    ids = transact(con, f"[{forms}]")["tempids"]
    e = {k: ids[f"t{i}"] for i, k in enumerate(HOSTILE)}
    many = transact(con, "[{:db/id \"m\" :h/key \"many\" :h/many [" + " ".join(edn(v) for v in HOSTILE.values())
                    + "]}]")["tempids"]["m"]
    return con, e, many


def test_stored_and_found_verbatim(hostile):
    con, e, many = hostile
    got = dict(q(con, "[:find ?k ?v :where [?e :h/key ?k] [?e :h/text ?v]]"))
    assert got == HOSTILE
    assert sorted(v for (v,) in q(con, "[:find ?v :where [_ :h/many ?v]]")) == sorted(set(HOSTILE.values()))
    # the injection did not run: x and the store's own tables are there
    assert rows(con, "SELECT i FROM x") == [(1,)]
    assert rows(con, "SELECT count(*) FROM mentat.partitions") == [(3,)]


@pytest.mark.parametrize("name", list(HOSTILE))
def test_as_input_as_constant_and_in_predicates(hostile, name):
    con, e, _ = hostile
    v = HOSTILE[name]
    # as an input
    assert q(con, "[:find ?e :in $ ?v :where [?e :h/text ?v]]", f"[{edn(v)}]") == [(e[name],)]
    # as a collection input, beside another value
    assert sorted(q(con, "[:find ?e :in $ [?v ...] :where [?e :h/text ?v]]", f"[[{edn(v)} \"it's\"]]")) == \
        sorted({(e[name],), (e["single quote"],)})
    # as a constant inside the query text, in a pattern and in a predicate
    assert q(con, f"[:find ?e :where [?e :h/text {edn(v)}]]") == [(e[name],)]
    assert q(con, f"[:find ?e :where [?e :h/text ?t] [(= ?t {edn(v)})]]") == [(e[name],)]
    # a lookup ref by the value, in the query and as an input
    assert q(con, f"[:find ?v :where [[:h/key {edn(name)}] :h/text ?v]]") == [(v,)]
    assert q(con, "[:find ?v :in $ ?e :where [?e :h/text ?v]]", f"[[:h/key {edn(name)}]]") == [(v,)]
    # the SQL mentat compiles holds the value as data: compiling it and running it returns the same entity
    assert rows(con, "FROM query(mentat_sql(?))", [f"[:find ?e :where [?e :h/text {edn(v)}]]"]) == [(e[name],)]


@pytest.mark.parametrize("name", list(HOSTILE))
def test_pull_and_datoms(hostile, name):
    con, e, many = hostile
    v = HOSTILE[name]
    assert rows(con, "SELECT e, pull FROM mentat_pull('[:h/key :h/text]', ?)", [f"[:h/key {edn(name)}]"]) == \
        [(e[name], {"h/key": name, "h/text": v})]
    assert rows(con, "SELECT e, tx > 0, added FROM mentat_datoms('AVET', a := ':h/text', v := ?)", [v]) == \
        [(e[name], True, True)]
    assert rows(con, "SELECT v FROM mentat_datoms('EAVT', e := ?, a := ':h/text')", [e[name]]) == [(v,)]
    assert v in rows(con, "SELECT pull FROM mentat_pull('[:h/many]', ?)", [many])[0][0]["h/many"]


def test_transaction_lookup_refs_and_retraction_by_hostile_value(hostile):
    con, e, _ = hostile
    for i, (name, v) in enumerate(HOSTILE.items()):
        transact(con, f"[[:db/add [:h/key {edn(name)}] :h/n {i}]]")
    assert dict(q(con, "[:find ?k ?n :where [?e :h/key ?k] [?e :h/n ?n]]")) == {k: i for i, k in enumerate(HOSTILE)}
    # :db/retract by the exact value, and :db/cas from it to another hostile value
    sql = HOSTILE["sql injection"]
    transact(con, f"[[:db/retract {e['sql injection']} :h/text {edn(sql)}]]")
    assert q(con, "[:find ?v :where [?e :h/key \"sql injection\"] [?e :h/text ?v]]") == []
    emoji, quote = HOSTILE["emoji"], HOSTILE["double quote"]
    transact(con, f"[[:db/cas {e['emoji']} :h/text {edn(emoji)} {edn(quote)}]]")
    assert q(con, "[:find ?v . :in $ ?e :where [?e :h/text ?v]]", f"[{e['emoji']}]") == [(quote,)]
    assert rows(con, "SELECT i FROM x") == [(1,)]


def test_import_export_and_attach_round_trip_verbatim(con, tmp_path):
    transact(con, SCHEMA)
    con.execute("CREATE TABLE x (i INTEGER)")
    con.execute("CREATE TABLE src (k VARCHAR, t VARCHAR)")
    con.executemany("INSERT INTO src VALUES (?, ?)", [[k, v] for k, v in WITH_NUL.items()])
    assert rows(con, "SELECT count(*) FROM src WHERE strpos(t, chr(0)) > 0") == [(2,)]  # NULs arrived
    r = rows(con, """SELECT entities FROM mentat_import('SELECT k AS ":h/key", t AS ":h/text" FROM src')""")
    assert r == [(len(WITH_NUL),)]
    assert dict(q(con, "[:find ?k ?v :where [?e :h/key ?k] [?e :h/text ?v]]")) == WITH_NUL
    # the same values as EDN through mentat_transact, as :h/many of one entity
    transact(con, "[{:h/key \"many\" :h/many [" + " ".join(edn(v) for v in WITH_NUL.values()) + "]}]")
    out = tmp_path / "export"
    assert rows(con, "SELECT files > 0 FROM mentat_export(?)", [str(out)]) == [(True,)]
    rows(con, "SELECT * FROM mentat_import_store(?, store := 'copy')", [str(out)])
    rows(con, "SELECT * FROM mentat_attach_parquet(?, store := 'pq')", [str(out)])
    for store in ("copy", "pq"):
        assert dict(q(con, "[:find ?k ?v :where [?e :h/key ?k] [?e :h/text ?v]]", store=store)) == WITH_NUL
        assert sorted(v for (v,) in q(con, "[:find ?v :where [_ :h/many ?v]]", store=store)) == \
            sorted(set(WITH_NUL.values()))
        for k, v in WITH_NUL.items():
            assert q(con, "[:find ?k :in $ ?v :where [?e :h/text ?v] [?e :h/key ?k]]", f"[{edn(v)}]",
                     store=store) == [(k,)]
    assert rows(con, "SELECT count(*) FROM x") == [(0,)]


def test_a_10_mb_string(con, tmp_path):
    transact(con, SCHEMA)
    # 10 MB of mixed text: quotes, backslashes, newlines, multi-byte characters, an SQL tail
    unit = "ab'c\"d\\e\nf\u00e9\U0001F600 "
    big = unit * (10_000_000 // len(unit.encode()) + 1) + "'); DROP TABLE x; --"
    assert len(big.encode()) > 10_000_000
    ids = transact(con, f"[{{:db/id \"big\" :h/key \"big\" :h/text {edn(big)}}}]")["tempids"]
    e = ids["big"]
    assert q(con, "[:find ?v . :where [?e :h/key \"big\"] [?e :h/text ?v]]") == [(big,)]
    assert rows(con, "SELECT pull FROM mentat_pull('[:h/text]', ?)", [e]) == [({"h/text": big},)]
    assert rows(con, "SELECT e FROM mentat_datoms('AVET', a := ':h/text', v := ?)", [big]) == [(e,)]
    assert q(con, "[:find ?e :in $ ?v :where [?e :h/text ?v]]", f"[{edn(big)}]") == [(e,)]
    out = tmp_path / "big"
    rows(con, "SELECT * FROM mentat_export(?)", [str(out)])
    rows(con, "SELECT * FROM mentat_import_store(?, store := 'copy')", [str(out)])
    assert q(con, "[:find ?v . :where [?e :h/key \"big\"] [?e :h/text ?v]]", store="copy") == [(big,)]


# Every character the EDN spec allows in a symbol: alphanumerics and . * + ! - _ ? $ % & = < >, plus # and : as
# constituents after the first character, and one / between namespace and name. A keyword is ':' and a symbol.
SYMBOL_CHARS = ".*+!-_?$%&=<>"
IDENTS = [
    ":a" + SYMBOL_CHARS + "#:z/b" + SYMBOL_CHARS + "#:z",
    ":a#b",
    ":a" + SYMBOL_CHARS + ":z/b" + SYMBOL_CHARS + ":z",
    ":a#",
    ":a" + SYMBOL_CHARS + "/b" + SYMBOL_CHARS,
    ":*+!-_?$%&=<>./*+!-_?$%&=<>.",
    ":ns.with.dots/name.with.dots",
    ":<>/=",
    ":a-/b",
    ":x1/y2",
    ":nons*+!-_?$%&=<>",
]


@pytest.mark.parametrize("ident", IDENTS)
def test_keyword_idents_with_every_legal_symbol_character(con, ident):
    transact(con, f"[{{:db/ident {ident} :db/valueType :db.type/string :db/cardinality :db.cardinality/one}} "
                  f"{{:db/ident :h/kw :db/valueType :db.type/keyword :db/cardinality :db.cardinality/one}}]")
    assert rows(con, "SELECT ident FROM mentat_schema() WHERE ident = ?", [ident]) == [(ident,)]
    r = transact(con, f'[{{:db/id "e" {ident} "v1" :h/kw {ident}}} {{:db/id "i" :db/ident {ident}.enum}}]')
    e = r["tempids"]["e"]
    # as an attribute: in a pattern, in datoms (by name), in a pull (the field is the ident without its colon)
    assert q(con, f"[:find ?e ?v :where [?e {ident} ?v]]") == [(e, "v1")]
    assert rows(con, "SELECT e, a, v FROM mentat_datoms('AEVT', a := ?)", [ident]) == [(e, ident, "v1")]
    assert rows(con, f"SELECT pull FROM mentat_pull('[{ident}]', ?)", [e]) == [({ident[1:]: "v1"},)]
    # as a keyword value: found as a constant and as an input, and read back with its colon
    assert q(con, f"[:find ?e :where [?e :h/kw {ident}]]") == [(e,)]
    assert q(con, "[:find ?e :in $ ?k :where [?e :h/kw ?k]]", f"[{ident}]") == [(e,)]
    assert q(con, "[:find ?k . :where [_ :h/kw ?k]]") == [(ident,)]
    # as an ident of an entity
    assert q(con, f"[:find ?i . :where [?i :db/ident {ident}.enum]]") == [(r["tempids"]["i"],)]


@pytest.mark.parametrize("text", ["it's", "2020-01-01' AS TIMESTAMPTZ)) OR (1=1) OR (i.v <= CAST('2020-01-01",
                                  "'); DROP TABLE x; --"])
def test_hostile_text_as_a_time_bound_is_refused_as_a_value(hostile, text):
    con, e, _ = hostile
    # as_of and since given as text are instants to DuckDB: hostile text is a bad instant, named in the error,
    # and never part of the statement's code
    for sql in ("SELECT * FROM mentat_q('[:find ?e :where [?e :h/text]]', as_of := ?)",
                "SELECT * FROM mentat_pull('[:h/text]', 65536, since := ?)",
                "SELECT count(*) FROM mentat_datoms('EAVT', as_of := ?)"):
        with pytest.raises(duckdb.Error) as ei:
            rows(con, sql, [text])
        assert text in str(ei.value) and "timestamp" in str(ei.value).lower(), str(ei.value)
    assert rows(con, "SELECT i FROM x") == [(1,)]
    assert len(q(con, "[:find ?e :where [?e :h/text]]")) == len(HOSTILE)
