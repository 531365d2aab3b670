"""CozoDB (PyPI `cozo-embedded`, in-memory engine) with the questions written in CozoScript over a relational layout
of the workload (users, labels, issues, current state with its tx, a state history relation keyed by Validity for
time travel, issue labels), with indices on email, assignee and state."""
import json
import subprocess
import sys
import threading
import time

from .base import HIST_TX0, Ids, Peer, Unsupported, last_initial_tx, since_tx
from ..workload import ms_of

SCHEMA = [
    ":create user {e: Int => email: String, name: String}",
    ":create label {e: Int => name: String}",
    ":create issue {e: Int => title: String, priority: Int, assignee: Int, reporter: Int, created_at: Int}",
    ":create state {e: Int => state: String, tx: Int}",
    ":create state_hist {e: Int, at: Validity => state: String}",
    ":create issue_label {e: Int, label: Int}",
]
INDEXES = [
    "::index create user:by_email {email, e}",
    "::index create issue:by_assignee {assignee, e}",
    "::index create state:by_state {state, e}",
]
Q1 = "?[e, name] := *user:by_email{email: $email, e}, *user{e, name}"
Q2 = ("?[i, title, state] := *user:by_email{email: $email, e: u}, *issue:by_assignee{assignee: u, e: i}, "
      "*issue{e: i, title}, *state{e: i, state}")
Q3 = "?[state, count(e)] := *state{e, state}"
Q4 = ("?[i, title, priority] := *state:by_state{state: ':state/open', e: i}, *issue{e: i, title, priority}, "
      "priority >= $min")
ASOF = ("?[i, title, state] := *user:by_email{email: $email, e: u}, *issue:by_assignee{assignee: u, e: i}, "
        "*issue{e: i, title}, *state_hist{e: i, state @ TXT}")
SINCE = "?[i] := *state{e: i, tx}, tx > $t"
IB = "?[e, name] := email in $emails, *user:by_email{email, e}, *user{e, name}"
PULL = """?[k, v] := *issue{e: $e, title: v}, k = 'title'
?[k, v] := *state{e: $e, state: v}, k = 'state'
?[k, v] := *issue{e: $e, priority: v}, k = 'priority'
?[k, v] := *issue{e: $e, created_at: v}, k = 'created_at'
?[k, v] := *issue_label{e: $e, label: v}, k = 'label'"""
READ = "?[s] := *state{e: $e, state: s}"
SET_STATE = ("{?[e, state, tx] <- [[$e, $s, $tx]] :put state {e => state, tx}}"
             "{?[e, at, state] <- [[$e, [$tx, true], $s]] :put state_hist {e, at => state}}")
ADD_LABEL = "?[e, label] <- [[$e, $l]] :put issue_label {e, label}"


def _import():
    try:
        from cozo_embedded import CozoDbPy
        return CozoDbPy
    except ImportError:
        r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--root-user-action=ignore",
                            "cozo-embedded"], capture_output=True, text=True)
        try:
            from cozo_embedded import CozoDbPy
            return CozoDbPy
        except ImportError:
            raise Unsupported(f"pip install cozo-embedded failed: {r.stderr.strip()[-300:]}")


class CozoPeer(Peer):
    name = "cozo"
    cannot = {"floor": "no SQL-style statement to time on its own; the floor rows are DuckDB's, SQLite's and PostgreSQL's",
              "cold_vs_warm": "in-memory engine: a new process starts empty (its cold start is the load)"}

    def __init__(self, ds, workdir, opts):
        super().__init__(ds, workdir, opts)
        self.db = _import()("mem", "", "{}")
        self.ids = Ids(ds)
        self.lock = threading.Lock()
        self.txc = HIST_TX0 + 10_000

    def run(self, script, params=None, immutable=True):
        r = self.db.run_script(script, params or {}, immutable)
        if not isinstance(r, dict) or "rows" not in r:
            raise RuntimeError(f"cozo: {r}")
        return r["rows"]

    def _put(self, rel, cols, keys, rows):
        spec = f"{{{', '.join(keys)} => {', '.join(c for c in cols if c not in keys)}}}" if len(keys) < len(cols) \
            else f"{{{', '.join(cols)}}}"
        for i in range(0, len(rows), 50_000):
            self.run(f"?[{', '.join(cols)}] <- $rows :put {rel} {spec}", {"rows": rows[i:i + 50_000]}, False)

    def load(self):
        ds, ids = self.ds, self.ids
        users = [[ids.user[em], em, nm] for _, em, nm in ds.users]
        labels = [[ids.label[nm], nm] for _, nm in ds.labels]
        issues, states, hist = [], [], []
        for k, (idx, title, st, prio, ae, re_, ca) in enumerate(ds.issues):
            e, tx = ids.issue(idx), 2 + k // 500
            issues.append([e, title, int(prio), ids.user[ae], ids.user[re_], ms_of(ca)])
            states.append([e, st, tx])
            hist.append([e, [tx, True], st])
        il = [[ids.issue(i), ids.label[lab]] for i, lab in ds.issue_labels]
        t0 = time.perf_counter()
        for s in SCHEMA:
            self.run(s, immutable=False)
        self._put("user", ["e", "email", "name"], ["e"], users)
        self._put("label", ["e", "name"], ["e"], labels)
        self._put("issue", ["e", "title", "priority", "assignee", "reporter", "created_at"], ["e"], issues)
        self._put("state", ["e", "state", "tx"], ["e"], states)
        self._put("state_hist", ["e", "at", "state"], ["e", "at"], hist)
        self._put("issue_label", ["e", "label"], ["e", "label"], il)
        for s in INDEXES:
            self.run(s, immutable=False)
        secs = time.perf_counter() - t0
        n = 2 * len(users) + len(labels) + 6 * len(issues) + len(il)
        return {"datoms": n, "seconds": secs, "bytes": None,
                "method": ":put of relational rows in 50K chunks, then 3 indices (in-memory engine)"}

    def apply_history(self):
        for b, batch in enumerate(self.ds.history_batches()):
            tx = HIST_TX0 + b
            rows = [[self.ids.issue(i), s, tx] for i, s in batch]
            hrows = [[self.ids.issue(i), [tx, True], s] for i, s in batch]
            self.run("{?[e, state, tx] <- $rows :put state {e => state, tx}}"
                     "{?[e, at, state] <- $h :put state_hist {e, at => state}}", {"rows": rows, "h": hrows}, False)
        self.asof_q = ASOF.replace("TXT", str(last_initial_tx(self.ds)))
        self.since_t = since_tx(self.ds)

    def next_tx(self):
        with self.lock:
            self.txc += 1
            return self.txc

    def session(self):
        return CozoSession(self)


class CozoSession:
    def __init__(self, p):
        self.p = p

    def q1(self, email):
        return self.p.run(Q1, {"email": email})

    def q2(self, email):
        return self.p.run(Q2, {"email": email})

    def q3(self):
        return self.p.run(Q3)

    def q4(self):
        return self.p.run(Q4, {"min": 4})

    def as_of(self, email):
        return self.p.run(self.p.asof_q, {"email": email})

    def since(self):
        return self.p.run(SINCE, {"t": self.p.since_t})

    def input_bindings(self, emails):
        return self.p.run(IB, {"emails": emails})

    def pull(self, idx):
        return self.p.run(PULL, {"e": self.p.ids.issue(idx)})

    def norm_pull(self, raw):
        d = {"labels": 0}
        for k, v in raw:
            if k == "label":
                d["labels"] += 1
            elif k == "created_at":
                d["created_at_ms"] = v
            else:
                d[k] = v
        return d

    def write_state(self, idx, state):
        return self.p.run(SET_STATE, {"e": self.p.ids.issue(idx), "s": state, "tx": self.p.next_tx()}, False)

    def write_label(self, idx, label):
        return self.p.run(ADD_LABEL, {"e": self.p.ids.issue(idx), "l": self.p.ids.label[label]}, False)

    def point_read(self, idx):
        return self.p.run(READ, {"e": self.p.ids.issue(idx)})
