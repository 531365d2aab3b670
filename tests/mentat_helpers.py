"""Helpers shared by the transactor and store tests: a test schema with hand-assigned entids, and readers of
the datom tables (`<store>.cur_<aid>(e, v, tx)`, `<store>.hist_<aid>(e, v, tx, added)`)."""
import duckdb
import pytest

from conftest import rows, transact

# Partition starts (Mentat's): the first user-installed schema entid is 100, the first :db.part/user entid is
# 0x10000, and transactions count from 2^40 (the bootstrap transaction) so the first user transaction is 2^40 + 1.
DB0 = 100
U0 = 0x10000
T0 = 1 << 40

# Bootstrap idents: value types 13..22 in the order ref keyword long double string boolean instant uuid uri bytes,
# cardinality one/many 23/24, unique value/identity 25/26.
REF, KEYWORD, LONG, DOUBLE, STRING, BOOLEAN, INSTANT, UUID, URI, BYTES = range(13, 23)
ONE, MANY = 23, 24
UVALUE, UIDENTITY = 25, 26

# (ident, value type, cardinality, extra EDN, datoms of the map form). Installed in this order, one map each,
# so the attributes get entids 100, 101, ...
ATTRS = [
    (":user/email", "string", "one", ':db/unique :db.unique/identity :db/doc "login email"', 5),
    (":user/name", "string", "one", "", 3),
    (":user/age", "long", "one", "", 3),
    (":user/tags", "keyword", "many", "", 3),
    (":user/friend", "ref", "many", "", 3),
    (":user/ssn", "string", "one", ":db/unique :db.unique/value", 4),
    (":issue/title", "string", "one", ":db/fulltext true", 4),
    (":issue/assignee", "ref", "one", "", 3),
    (":issue/comment", "ref", "many", ":db/isComponent true", 4),
    (":issue/label", "ref", "many", "", 3),
    (":comment/text", "string", "one", "", 3),
    (":label/name", "string", "one", ":db/unique :db.unique/identity", 4),
    (":account/owner", "ref", "one", ":db/unique :db.unique/identity", 4),
    (":account/balance", "long", "one", "", 3),
    (":issue/state", "ref", "one", "", 3),
    (":user/score", "double", "one", ":db/index true", 4),
]
A = {ident: DB0 + i for i, (ident, *_rest) in enumerate(ATTRS)}
# two enum idents after the attributes
OPEN, CLOSED = DB0 + len(ATTRS), DB0 + len(ATTRS) + 1

SCHEMA = "[" + "\n".join(
    f"{{:db/ident {i} :db/valueType :db.type/{t} :db/cardinality :db.cardinality/{c} {x}}}"
    for i, t, c, x, _ in ATTRS
) + "\n{:db/ident :state/open}\n{:db/ident :state/closed}]"
SCHEMA_DATOMS = sum(a[4] for a in ATTRS) + 2  # 56 attribute datoms + 2 enum idents = 58


def install(con, store=None):
    return transact(con, SCHEMA, store)


def cur(con, ident, store="mentat"):
    """(e, v) of the current datoms of an attribute, sorted."""
    return rows(con, f"SELECT e, v FROM {store}.cur_{A.get(ident, ident)} ORDER BY e, v")


def cur_tx(con, ident, store="mentat"):
    return rows(con, f"SELECT e, v, tx FROM {store}.cur_{A.get(ident, ident)} ORDER BY e, v")


def hist(con, ident, store="mentat"):
    """(e, v, tx, added) of every assertion and retraction of an attribute, sorted by tx then added (retractions
    first). The layout keeps a current datom in cur_<aid>(e, v, tx) and a retracted one in
    hist_<aid>(e, v, tx, retracted_tx), so the operations are: every row's assertion, and every hist row's
    retraction."""
    a = A.get(ident, ident)
    return rows(con, f"SELECT e, v, tx, true AS added FROM {store}.cur_{a} "
                     f"UNION ALL SELECT e, v, tx, true FROM {store}.hist_{a} "
                     f"UNION ALL SELECT e, v, retracted_tx, false FROM {store}.hist_{a} ORDER BY 3, 4, 1, 2")


def snapshot(con, schema="mentat"):
    """Every table of a store with its full contents, plus the schema cache as mentat_schema reports it. The
    transaction log is applied first (mentat_sync), so the tables hold every transaction; the log table, empty
    then, is left out."""
    exists = rows(con, "SELECT count(*) FROM duckdb_tables() WHERE schema_name = ? AND table_name = 'partitions'",
                  [schema])[0][0]
    if exists:
        con.execute("SELECT * FROM mentat_sync(store := ?)", [schema]).fetchall()
    tables = rows(con, "SELECT database_name, table_name FROM duckdb_tables() WHERE schema_name = ? "
                       "AND table_name <> 'log' ORDER BY ALL", [schema])
    snap = {(d, t): rows(con, f'SELECT * FROM "{d}"."{schema}"."{t}" ORDER BY ALL') for d, t in tables}
    snap["schema"] = rows(con, "SELECT * FROM mentat_schema(store := ?) ORDER BY entid", [schema])
    return snap


def fails(con, edn, *needles, store="mentat"):
    """Transacting `edn` raises an error whose message holds every needle, and leaves the store unchanged."""
    before = snapshot(con, store)
    with pytest.raises(duckdb.Error) as ei:
        transact(con, edn, store if store != "mentat" else None)
    msg = str(ei.value)
    for n in needles:
        assert n in msg, f"{n!r} not in {msg!r}"
    assert snapshot(con, store) == before, "a failed transaction changed the store"
    return msg
