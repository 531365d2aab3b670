"""Shared fixtures: the built extension loaded into the real DuckDB packages (Python duckdb 2.0.x and the
DuckDB 1.5.6 CLI), on real database files in a temporary directory."""
import os
import pathlib
import re
import subprocess

import duckdb
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXT = pathlib.Path(os.environ.get("MENTAT_EXTENSION", ROOT / "build" / "mentat.duckdb_extension"))


def connect(path=":memory:"):
    """A Python duckdb connection with mentat loaded."""
    if not EXT.exists():
        pytest.exit(f"{EXT} is missing: run scripts/setup.sh first", returncode=2)
    con = duckdb.connect(str(path), config={"allow_unsigned_extensions": "true"})
    con.execute(f"LOAD '{EXT}'")
    return con


def connect_with(path=":memory:", **env):
    """`connect(path)` with environment variables set while mentat loads (it reads its switches then, e.g.
    MENTAT_ENTITY_PATH="0"), restored afterwards."""
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return connect(path)
    finally:
        for k, v in old.items():
            if v is None:
                del os.environ[k]
            else:
                os.environ[k] = v


@pytest.fixture
def db_path(tmp_path):
    return tmp_path / "store.duckdb"


@pytest.fixture
def con(db_path):
    c = connect(db_path)
    yield c
    c.close()


def transact(con, edn, store=None):
    """Runs mentat_transact and returns its row as a dict."""
    args = "?" + (", store := ?" if store else "")
    params = [edn] + ([store] if store else [])
    cur = con.execute(f"SELECT tx, tx_instant, datoms, tempids FROM mentat_transact({args})", params)
    tx, inst, datoms, tempids = cur.fetchall()[0]
    return {"tx": tx, "tx_instant": inst, "datoms": datoms, "tempids": dict(tempids)}


TABLES = re.compile(r'((?:"?\w+"?\.)?"?\w+"?)\.(?:cur|hist)_\d')


def rows(con, sql, params=None):
    """All rows of `sql`. SQL that reads a store's tables directly (`store.cur_N`, `store.hist_N`) applies the
    store's transaction log first (mentat_sync), as a user reading the tables would: mentat's own reads see every
    transaction without it, the tables only once the log is applied."""
    for store in sorted(set(TABLES.findall(sql))):
        try:
            con.execute("SELECT * FROM mentat_sync(store := ?)", [store.replace('"', "")]).fetchall()
        except duckdb.Error:
            pass  # not a store (or not one yet): the statement below says what is wrong
    return con.execute(sql, params or []).fetchall()


def cli(sql, db=":memory:"):
    """Runs SQL in the DuckDB CLI (`duckdb -unsigned`) with mentat loaded; returns (exit code, stdout, stderr)."""
    script = f"LOAD '{EXT}';\n{sql}\n"
    p = subprocess.run(["duckdb", "-unsigned", "-csv", str(db)], input=script, capture_output=True, text=True,
                       timeout=600)
    return p.returncode, p.stdout, p.stderr


def mentat_call(prefix, query, inputs=None, **named):
    """`prefix(?, inputs := ?, name := ?, ...)` and its parameters: a call of mentat_q (or mentat_explain,
    mentat_with, ...) with the query, optional inputs and named options bound as parameters."""
    args, params = ["?"], [query]
    if inputs is not None:
        args.append("inputs := ?")
        params.append(inputs)
    for k, v in named.items():
        args.append(f"{k} := ?")
        params.append(v)
    return f"{prefix}({', '.join(args)})", params


def q(con, query, inputs=None, **named):
    """All rows of mentat_q(query, inputs := ..., **named), in the order DuckDB returns them."""
    return con.execute(*mentat_call("SELECT * FROM mentat_q", query, inputs, **named)).fetchall()
