"""Datomic's value types beyond Mentat's: `:db.type/bigint` (EDN `123N`, DuckDB HUGEINT), `:db.type/bigdec`
(EDN `1.25M`, DECIMAL(38,18)), `:db.type/float` (FLOAT) and `:db.type/symbol` (VARCHAR text). Expected values are
the EDN literals themselves, Python's own exact arithmetic (int, decimal.Decimal) and IEEE float rounding
(struct.pack('f')), never mentat's output."""
import decimal
import struct
import subprocess
import sys

import duckdb
import pytest

from conftest import rows, transact

D = decimal.Decimal
decimal.getcontext().prec = 60  # exact sums of 38-digit decimals
BIG = 10**38 - 1  # the largest bigint: 38 digits, what DECIMAL(38,0) holds in Parquet
F = lambda x: struct.unpack("f", struct.pack("f", x))[0]  # noqa: E731  the float nearest x, as a Python float

SCHEMA = """[{:db/ident :v/name :db/valueType :db.type/string :db/cardinality :db.cardinality/one
              :db/unique :db.unique/identity}
             {:db/ident :v/big :db/valueType :db.type/bigint :db/cardinality :db.cardinality/one}
             {:db/ident :v/dec :db/valueType :db.type/bigdec :db/cardinality :db.cardinality/one}
             {:db/ident :v/f :db/valueType :db.type/float :db/cardinality :db.cardinality/one}
             {:db/ident :v/sym :db/valueType :db.type/symbol :db/cardinality :db.cardinality/many}
             {:db/ident :v/bigs :db/valueType :db.type/bigint :db/cardinality :db.cardinality/many}]"""

DATA = """[{:v/name "a" :v/big 99999999999999999999999999999999999999N :v/dec 1.25M :v/f 0.1
            :v/sym [foo my.ns/bar] :v/bigs [1N 2N]}
           {:v/name "b" :v/big -12345678901234567890123N :v/dec 2.500M :v/f 3 :v/sym [foo]}
           {:v/name "c" :v/big 7 :v/dec 12345678901234567890.123456789012345678M :v/f 1e30}]"""


@pytest.fixture
def db(con):
    transact(con, SCHEMA)
    transact(con, DATA)
    return con


def q(con, query, inputs=None):
    if inputs is None:
        return rows(con, "SELECT * FROM mentat_q(?)", [query])
    return rows(con, "SELECT * FROM mentat_q(?, inputs := ?)", [query, inputs])


def test_the_type_idents_are_bootstrap_idents(con):
    idents = dict(q(con, "[:find ?i ?e :where [?e :db/ident ?i]]"))
    # The first ten keep Mentat's entids 13..22; Datomic's four more follow the uniqueness idents (23..26).
    assert idents[":db.type/ref"] == 13 and idents[":db.type/bytes"] == 22
    assert [idents[f":db.type/{t}"] for t in ("bigint", "bigdec", "float", "symbol")] == [27, 28, 29, 30]


def test_values_come_back_exact_and_typed(db):
    got = q(db, "[:find ?n ?b ?d ?f :where [?e :v/name ?n] [?e :v/big ?b] [?e :v/dec ?d] [?e :v/f ?f]]")
    assert sorted(got) == [
        ("a", BIG, D("1.25"), F(0.1)),
        ("b", -12345678901234567890123, D("2.5"), 3.0),
        ("c", 7, D("12345678901234567890.123456789012345678"), F(1e30)),
    ]
    types = rows(db, "SELECT typeof(b), typeof(d), typeof(f) FROM mentat_q("
                     "'[:find ?b ?d ?f :where [?e :v/big ?b] [?e :v/dec ?d] [?e :v/f ?f]]') LIMIT 1")
    assert types == [("HUGEINT", "DECIMAL(38,18)", "FLOAT")]
    syms = q(db, "[:find ?n ?s :where [?e :v/name ?n] [?e :v/sym ?s]]")
    assert sorted(syms) == [("a", "foo"), ("a", "my.ns/bar"), ("b", "foo")]


def test_constants_match_in_their_attribute_type(db):
    assert q(db, "[:find ?n . :where [?e :v/big 99999999999999999999999999999999999999N] [?e :v/name ?n]]") \
        == [("a",)]
    # A long constant is the same integer in a bigint position; 2.500M and 2.5M are one bigdec value.
    assert q(db, "[:find ?n . :where [?e :v/big 7] [?e :v/name ?n]]") == [("c",)]
    assert q(db, "[:find ?n . :where [?e :v/dec 2.5M] [?e :v/name ?n]]") == [("b",)]
    assert q(db, "[:find ?n . :where [?e :v/dec 2.50M] [?e :v/name ?n]]") == [("b",)]
    # The double 0.1 names the float the transactor stored for 0.1.
    assert q(db, "[:find ?n . :where [?e :v/f 0.1] [?e :v/name ?n]]") == [("a",)]
    # A symbol constant is a symbol: the keyword :foo and the string "foo" are other values.
    assert sorted(q(db, "[:find ?n :where [?e :v/sym foo] [?e :v/name ?n]]")) == [("a",), ("b",)]
    assert q(db, "[:find ?n :where [?e :v/sym my.ns/bar] [?e :v/name ?n]]") == [("a",)]
    assert q(db, "[:find ?n :where [?e :v/sym \"foo\"] [?e :v/name ?n]]") == []


def test_inputs_comparisons_and_aggregates(db):
    assert q(db, "[:find ?n . :in $ ?b :where [?e :v/big ?b] [?e :v/name ?n]]",
             "[-12345678901234567890123N]") == [("b",)]
    assert sorted(q(db, "[:find ?n :where [?e :v/big ?b] [(> ?b 10)] [?e :v/name ?n]]")) == [("a",)]
    assert sorted(q(db, "[:find ?n :where [?e :v/dec ?d] [(< ?d 2.5M)] [?e :v/name ?n]]")) == [("a",)]
    total = q(db, "[:find (sum ?b) . :with ?e :where [?e :v/big ?b]]")
    assert total == [(BIG - 12345678901234567890123 + 7,)]
    dsum = q(db, "[:find (sum ?d) . :with ?e :where [?e :v/dec ?d]]")
    assert dsum == [(D("1.25") + D("2.5") + D("12345678901234567890.123456789012345678"),)]
    assert q(db, "[:find (max ?d) . :where [?e :v/dec ?d]]") == [(D("12345678901234567890.123456789012345678"),)]
    assert sorted(q(db, "[:find ?s (count ?e) :where [?e :v/sym ?s]]")) == [("foo", 2), ("my.ns/bar", 1)]


def test_pull(db):
    got = rows(db, "SELECT pull FROM mentat_pull('[:v/big :v/dec :v/f :v/sym :v/bigs]', '[:v/name \"a\"]')")[0][0]
    got["v/sym"], got["v/bigs"] = sorted(got["v/sym"]), sorted(got["v/bigs"])
    assert got == {"v/big": BIG, "v/dec": D("1.25"), "v/f": F(0.1), "v/sym": ["foo", "my.ns/bar"], "v/bigs": [1, 2]}
    star = rows(db, "SELECT pull FROM mentat_pull('[*]', '[:v/name \"b\"]')")[0][0]
    assert star["v/big"] == -12345678901234567890123 and star["v/dec"] == D("2.5") and star["v/f"] == 3.0
    assert star["v/sym"] == ["foo"]


@pytest.mark.parametrize("value, needle", [
    ("1.1234567890123456789M", "1.1234567890123456789M"),       # 19 places: would be rounded
    ("123456789012345678901.5M", "123456789012345678901.5M"),   # 21 digits before the point
    ("1.5", "1.5"),                                               # a double is not exact
])
def test_bigdec_values_that_cannot_be_kept_exactly_are_refused(db, value, needle):
    before = q(db, "[:find ?e ?d :where [?e :v/dec ?d]]")
    with pytest.raises(duckdb.Error) as err:
        transact(db, f'[{{:v/name "z" :v/dec {value}}}]')
    assert needle in str(err.value) and ":v/dec" in str(err.value)
    assert q(db, "[:find ?e ?d :where [?e :v/dec ?d]]") == before
    assert q(db, '[:find ?e :where [?e :v/name "z"]]') == []


def test_bigint_beyond_hugeint_and_float_beyond_range_are_refused(db):
    with pytest.raises(duckdb.Error, match="100000000000000000000000000000000000000N"):
        transact(db, '[{:v/name "z" :v/big 100000000000000000000000000000000000000N}]')
    with pytest.raises(duckdb.Error, match=":v/f"):
        transact(db, '[{:v/name "z" :v/f 1e300}]')
    with pytest.raises(duckdb.Error, match=":v/sym"):
        transact(db, '[{:v/name "z" :v/sym "text"}]')
    assert q(db, '[:find ?e :where [?e :v/name "z"]]') == []


def test_cardinality_one_replacement_and_retraction(db):
    transact(db, '[{:v/name "a" :v/big 5N :v/dec 0.001M}]')
    assert q(db, '[:find ?b ?d :where [?e :v/name "a"] [?e :v/big ?b] [?e :v/dec ?d]]') == [(5, D("0.001"))]
    transact(db, '[[:db/retract [:v/name "a"] :v/sym my.ns/bar] [:db/retract [:v/name "a"] :v/dec 0.0010M]]')
    assert q(db, '[:find ?s :where [?e :v/name "a"] [?e :v/sym ?s]]') == [("foo",)]
    assert q(db, '[:find ?d :where [?e :v/name "a"] [?e :v/dec ?d]]') == []


def test_parquet_export_and_import_keep_the_values(db, tmp_path):
    rows(db, "SELECT * FROM mentat_export(?)", [str(tmp_path / "x")])
    rows(db, "SELECT * FROM mentat_import_store(?, store := 'copy')", [str(tmp_path / "x")])
    query = "[:find ?n ?b ?d ?f ?s :where [?e :v/name ?n] [?e :v/big ?b] [?e :v/dec ?d] [?e :v/f ?f] [?e :v/sym ?s]]"
    a = rows(db, "SELECT * FROM mentat_q(?)", [query])
    b = rows(db, "SELECT * FROM mentat_q(?, store := 'copy')", [query])
    assert sorted(a) == sorted(b) and len(a) == 3


def test_a_store_written_before_the_new_types_can_install_them(db_path):
    from conftest import EXT, connect
    # A store from before these types has no ident datoms for them, and no tables of the tuple attributes: made
    # in a child process, so that this process opens the file afresh, as a new session would.
    old = f"""
import duckdb
con = duckdb.connect({str(db_path)!r}, config={{"allow_unsigned_extensions": "true"}})
con.execute("LOAD '{EXT}'")
con.execute("SELECT * FROM mentat_transact('[{{:db/ident :old/x :db/valueType :db.type/long :db/cardinality :db.cardinality/one}}]')")
con.execute("DELETE FROM mentat.cur_1 WHERE e BETWEEN 27 AND 34")
for aid in (32, 33, 34):
    con.execute(f"DROP TABLE mentat.cur_{{aid}}; DROP TABLE mentat.hist_{{aid}}")
"""
    subprocess.run([sys.executable, "-c", old], check=True)
    con = connect(db_path)
    transact(con, "[{:db/ident :new/b :db/valueType :db.type/bigint :db/cardinality :db.cardinality/one}"
                  " {:db/ident :new/t :db/valueType :db.type/tuple :db/tupleType :db.type/long"
                  "  :db/cardinality :db.cardinality/one}]")
    transact(con, "[{:new/b 99999999999999999999N :new/t [1 2 3]}]")
    assert rows(con, "SELECT * FROM mentat_q('[:find ?b ?t :where [?e :new/b ?b] [?e :new/t ?t]]')") \
        == [(99999999999999999999, [1, 2, 3])]
    # Opening wrote the missing bootstrap datoms: the idents are datoms again.
    assert rows(con, "SELECT * FROM mentat_q('[:find ?e . :where [?e :db/ident :db.type/tuple]]')") == [(31,)]
    con.close()
