"""The one built file loads unchanged into the DuckDB CLI and into Python duckdb, by path and by INSTALL."""
import os
import pathlib
import subprocess
import sys

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
    # an empty transaction creates the store; its schema holds the 12 bootstrap attributes
    assert rc == 0 and out.strip().splitlines()[-1] == "12", (out, err)


def _duckdb_release(version):
    """A Python duckdb release installed beside (not over) the current one, cached across runs."""
    target = pathlib.Path.home() / ".cache" / "mentat" / f"duckdb-{version}"
    if not (target / "duckdb").exists():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check",
                        "--target", str(target), f"duckdb=={version}"], check=True, capture_output=True)
    return target


def _load_with(version):
    code = ("import duckdb\n"
            "c = duckdb.connect(config={'allow_unsigned_extensions': 'true'})\n"
            "try:\n"
            f"    c.execute(\"LOAD '{EXT}'\")\n"
            "    print(c.execute('''SELECT datoms FROM mentat_transact('[[:db/add \"x\" :db/doc \"d\"]]')''')"
            ".fetchall()[0][0])\n"
            "    print(c.execute('''FROM mentat_q('[:find ?d :where [_ :db/doc ?d]]')''').fetchall())\n"
            "    print(c.execute('''SELECT pull FROM mentat_pull('[:db/doc]', ':db/doc')''').fetchall())\n"
            "except duckdb.Error as e:\n"
            "    print('ERROR', e)\n")
    env = dict(os.environ, PYTHONPATH=str(_duckdb_release(version)))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr  # never a crash
    return p.stdout.strip()


def test_older_duckdb_is_refused_at_load_with_a_clear_error():
    # 1.5.1 is the last release whose C API function table differs from the one mentat is built against
    out = _load_with("1.5.1")
    assert out.startswith("ERROR") and "mentat needs DuckDB 1.5.2 or newer; this is DuckDB v1.5.1" in out, out


def test_oldest_supported_duckdb_loads():
    # a transaction, a query streamed through mentat_q and a pull, on the oldest supported release
    assert _load_with("1.5.2").splitlines() == ["2", "[('d',)]", "[(None,)]"]
