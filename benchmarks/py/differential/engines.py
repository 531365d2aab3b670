"""The two engines under comparison: mentat (the built extension loaded into Python duckdb) and DataScript (npm
`datascript` under one long-running node process, fed JSON lines)."""
import json
import os
import pathlib
import subprocess

import duckdb

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent.parent
NODE_CACHE = ROOT / "benchmarks" / "data" / "_node"


class Unavailable(Exception):
    pass


def install_datascript(cache=NODE_CACHE):
    """npm's `datascript` in benchmarks/data/_node, installed by the benchmark suite's DataScript peer
    (`benchmarks/py/suite/peers/datascript_peer.install`, the same cache and npm command); raises Unavailable with
    the reason when node or npm is missing or npm fails."""
    from benchmarks.py.suite.peers.base import Unsupported
    from benchmarks.py.suite.peers.datascript_peer import install
    try:
        return install(cache)
    except Unsupported as e:
        raise Unavailable(f"{e} (apt-get install nodejs npm)" if "not installed" in str(e) else str(e)) from e


class DataScriptDied(RuntimeError):
    """The node process ended (a query that exhausted its heap): start() a new one and load the database again."""


class DataScript:
    def __init__(self):
        self.start()

    def start(self):
        mod = install_datascript()
        env = dict(os.environ, DATASCRIPT_PATH=str(mod))
        self.proc = subprocess.Popen(["node", "--stack-size=8000", "--max-old-space-size=3072",
                                      str(HERE / "ds_runner.js")],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env, bufsize=1 << 20)
        first = self.proc.stdout.readline()
        if not first:
            raise Unavailable(f"the DataScript node process did not start: {self.proc.stderr.read()[-300:]}")

    def call(self, msg):
        try:
            self.proc.stdin.write(json.dumps(msg) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except (BrokenPipeError, OSError):
            line = ""
        if not line:
            err = self.proc.stderr.read()[-300:]
            self.proc.wait()
            raise DataScriptDied(f"the DataScript node process died: {err}")
        r = json.loads(line)
        if "error" in r:
            raise RuntimeError(f"datascript runner: {r['error']}")
        return r

    def new(self, schema):
        self.call({"op": "new", "schema": schema})

    def tx(self, txs):
        return self.call({"op": "tx", "txs": txs})["r"]

    def q(self, qs):
        return self.call({"op": "q", "qs": qs})["r"]

    def pull(self, ps):
        return self.call({"op": "pull", "ps": ps})["r"]

    def datoms(self):
        return self.call({"op": "datoms"})["r"]

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def extension_path():
    return pathlib.Path(os.environ.get("MENTAT_EXTENSION", ROOT / "build" / "mentat.duckdb_extension"))


class Mentat:
    """One in-memory DuckDB with mentat loaded; each database is a store of its own (`store := 'dN'`)."""

    def __init__(self, ext=None):
        ext = pathlib.Path(ext or extension_path())
        if not ext.exists():
            raise Unavailable(f"{ext} is missing: build it (scripts/setup.sh) or set MENTAT_EXTENSION")
        self.con = duckdb.connect(":memory:", config={"allow_unsigned_extensions": "true"})
        self.con.execute(f"LOAD '{ext}'")
        self.n = 0
        self.store = None

    def new(self):
        self.n += 1
        self.store = f"d{self.n}"
        return self.store

    def drop(self):
        """Drops the current store's tables (the store is never used again)."""
        if self.store:
            try:
                self.con.execute(f"DROP SCHEMA IF EXISTS {self.store} CASCADE")
            except duckdb.Error:
                pass

    def transact(self, edn):
        """(tempids dict, None) or (None, error text)."""
        try:
            row = self.con.execute("SELECT tempids FROM mentat_transact(?, store := ?)", [edn, self.store]).fetchone()
            return dict(row[0]), None
        except duckdb.Error as e:
            return None, str(e)[:400]

    def q(self, query, inputs=None):
        """(rows, column types) or raises duckdb.Error."""
        if inputs is None:
            cur = self.con.execute("SELECT * FROM mentat_q(?, store := ?)", [query, self.store])
        else:
            cur = self.con.execute("SELECT * FROM mentat_q(?, inputs := ?, store := ?)", [query, inputs, self.store])
        return cur.fetchall()

    def pull_many(self, pattern, eids):
        rows = self.con.execute("SELECT e, pull FROM mentat_pull_many(?, ?, store := ?)",
                                [pattern, eids, self.store]).fetchall()
        return [r[1] for r in rows]

    def close(self):
        self.con.close()
