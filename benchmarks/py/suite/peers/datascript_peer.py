"""DataScript (npm `datascript`, under node): the same Datalog text, answered by a node process over JSON lines.
Attribute names become JS strings ("user/email") and keyword values strings (":state/open"), as DataScript's JS API
requires. One node process: client threads take turns on its pipe (node is single-threaded)."""
import json
import os
import pathlib
import re
import shutil
import subprocess
import threading
import time

from .. import workload as W
from .base import Ids, Peer, Unsupported

HERE = pathlib.Path(__file__).resolve().parent
ATTRS = ["user/email", "user/name", "issue/title", "issue/state", "issue/priority", "issue/assignee",
         "issue/reporter", "issue/created-at", "issue/label", "label/name"]


def js_query(q):
    for a in ATTRS:
        q = re.sub(rf":{re.escape(a)}(?=[\s\]])", f'"{a}"', q)
    return q.replace(":state/open]", '":state/open"]')


def install(cache):
    mod = pathlib.Path(cache) / "node_modules" / "datascript"
    if mod.exists():
        return mod
    if not shutil.which("node") or not shutil.which("npm"):
        raise Unsupported("node/npm not installed")
    pathlib.Path(cache).mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", str(cache), "datascript"],
                       capture_output=True, text=True, timeout=600)
    if r.returncode or not mod.exists():
        raise Unsupported(f"npm install datascript failed: {r.stderr.strip()[-300:]}")
    return mod


class DataScriptPeer(Peer):
    name = "datascript"
    max_scale = "m"
    ceiling_reason = "an in-memory JS heap; l (100M datoms) does not fit node's heap on this machine"
    cannot = {"floor": "no SQL-style statement to time on its own; the floor rows are DuckDB's, SQLite's and PostgreSQL's",
              "cold_vs_warm": "in-memory database: a new process starts empty (its cold start is the load, see "
                              "bulk_load)"}
    parallel_note = "one node process: calls serialise"

    def __init__(self, ds, workdir, opts):
        super().__init__(ds, workdir, opts)
        self.mod = install(pathlib.Path(opts.data_root) / "_node")
        self.ids = Ids(ds)
        self.lock = threading.Lock()
        self.proc = None

    def _call(self, msg):
        with self.lock:
            self.proc.stdin.write(json.dumps(msg) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"datascript node process died: {self.proc.stderr.read()[-300:]}")
        r = json.loads(line)
        if not r.get("ok"):
            raise RuntimeError(f"datascript: {r.get('error')}")
        return r

    def load(self):
        env = dict(os.environ, DATASCRIPT_PATH=str(self.mod))
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(["node", "--max-old-space-size=12000", str(HERE / "datascript_server.js"),
                                      str(self.ds.path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env)
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"datascript load failed: {self.proc.stderr.read()[-300:]}")
        secs = time.perf_counter() - t0
        rss = self._call({"op": "mem"})["rss"]
        return {"datoms": self.ds.truth["datoms"]["initial"], "seconds": secs, "bytes": rss,
                "method": "node reads the CSVs and builds the db with d.init_db (bytes = node RSS, in memory)"}

    def apply_history(self):
        batches = [[[self.ids.issue(i), s] for i, s in b] for b in self.ds.history_batches()]
        self._call({"op": "history", "batches": batches, "since_after": self.ds.since_basis_batches})
        self.q = {k: js_query(v) for k, v in (("q1", W.Q1), ("q2", W.Q2), ("q3", W.Q3), ("q4", W.Q4),
                                                ("since", W.QSINCE), ("ib", W.QIB), ("read", W.QREAD))}

    def session(self):
        return DSSession(self)

    def close(self):
        if self.proc:
            self.proc.kill()
            self.proc.wait()


class DSSession:
    def __init__(self, p):
        self.p = p

    def _q(self, key, inputs=(), db="now"):
        return self.p._call({"op": "q", "query": self.p.q[key], "inputs": list(inputs), "db": db})["rows"]

    def q1(self, email):
        return self._q("q1", [email])

    def q2(self, email):
        return self._q("q2", [email])

    def q3(self):
        return self._q("q3")

    def q4(self):
        return self._q("q4", [4])

    def as_of(self, email):
        return self._q("q2", [email], "asof")

    def since(self):
        return self._q("since", [], "since")

    def input_bindings(self, emails):
        return self._q("ib", [emails])

    def pull(self, idx):
        return self.p._call({"op": "pull", "e": self.p.ids.issue(idx)})["rows"]

    def norm_pull(self, raw):
        return {"title": raw.get("issue/title"), "state": raw.get("issue/state"), "priority": raw.get("issue/priority"),
                "created_at_ms": raw.get("issue/created-at"), "labels": len(raw.get("issue/label") or [])}

    def write_state(self, idx, state):
        return self.p._call({"op": "tx", "tx": [[":db/add", self.p.ids.issue(idx), "issue/state", state]]})

    def write_label(self, idx, label):
        return self.p._call({"op": "tx", "tx": [[":db/add", self.p.ids.issue(idx), "issue/label",
                                                 self.p.ids.label[label]]]})

    def point_read(self, idx):
        return self._q("read", [self.p.ids.issue(idx)])
