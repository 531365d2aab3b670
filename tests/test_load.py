"""The one built file loads unchanged into the DuckDB CLI and into Python duckdb, by path and by INSTALL."""
import subprocess

import duckdb

from conftest import EXT, cli, connect, transact


def test_cli_version_and_load_by_path():
    v = subprocess.run(["duckdb", "--version"], capture_output=True, text=True).stdout
    assert v.startswith("v1.5.6"), v
    rc, out, err = cli("SELECT datoms FROM mentat_transact('[[:db/add \"x\" :db/doc \"hello\"]]');")
    assert rc == 0, err
    # one :db/doc datom plus the transaction's :db/txInstant datom
    assert out.strip().splitlines() == ["datoms", "2"]


def test_python_version_and_load_by_path():
    assert duckdb.__version__.startswith("2.0."), duckdb.__version__
    con = connect()
    assert transact(con, '[[:db/add "x" :db/doc "hello"]]')["datoms"] == 2


def test_install_then_load_by_name(tmp_path):
    con = duckdb.connect(config={"allow_unsigned_extensions": "true",
                                 "extension_directory": str(tmp_path / "ext")})
    con.execute(f"INSTALL '{EXT}'")
    con.execute("LOAD mentat")
    assert transact(con, '[[:db/add "x" :db/doc "hi"]]')["tempids"]["x"] >= 0x10000
    rc, out, err = cli(f"SET extension_directory='{tmp_path / 'ext2'}'; INSTALL '{EXT}'; LOAD mentat; "
                       "SELECT datoms FROM mentat_transact('[]'); SELECT count(*) AS n FROM mentat_schema();")
    # an empty transaction creates the store; its schema holds the 9 bootstrap attributes
    assert rc == 0 and out.strip().splitlines()[-1] == "9", (out, err)
