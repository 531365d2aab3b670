"""SQLite (Python's sqlite3) with the classic EAV layout of Mozilla Mentat's embedded store: one `datoms` table with
EAVT, AEVT and AVET indexes, and a `transactions` log with a covering (a, e, v, tx) history index."""
import itertools
import json
import os
import sqlite3
import threading
import time

from .base import HIST_TX0, Ids, Peer, eav_rows, last_initial_tx, since_tx

A = {":user/email": 1, ":user/name": 2, ":issue/title": 3, ":issue/state": 4, ":issue/priority": 5,
     ":issue/assignee": 6, ":issue/reporter": 7, ":issue/created-at": 8, ":issue/label": 9, ":label/name": 10}


def asof(a, t_param=":t"):
    """Datoms of attribute `a` true as of tx :t: current ones asserted at or before t, plus those retracted after t
    whose last event at or before t was an assertion."""
    return (f"(SELECT e, v FROM datoms WHERE a = {a} AND tx <= {t_param} "
            f"UNION SELECT r.e, r.v FROM transactions r WHERE r.a = {a} AND r.added = 0 AND r.tx > {t_param} "
            f"AND (SELECT x.added FROM transactions x WHERE x.a = r.a AND x.e = r.e AND x.v = r.v AND x.tx <= {t_param} "
            f"ORDER BY x.tx DESC, x.added LIMIT 1) = 1)")


class SQLitePeer(Peer):
    name = "sqlite"
    parallel_note = "one connection per client, WAL journal; writers serialise on SQLite's database lock"

    def __init__(self, ds, workdir, opts):
        super().__init__(ds, workdir, opts)
        self.db = os.path.join(workdir, "sqlite_eav.db")
        if os.path.exists(self.db):
            os.unlink(self.db)
        self.ids = Ids(ds)
        self.txc = itertools.count(HIST_TX0 + 10_000)
        self.lock = threading.Lock()

    def connect(self):
        c = sqlite3.connect(self.db, timeout=120, check_same_thread=False, isolation_level=None)
        c.execute("PRAGMA journal_mode=WAL")
        c.execute("PRAGMA synchronous=NORMAL")
        c.execute("PRAGMA cache_size=-262144")
        return c

    def load(self):
        c = self.connect()
        c.executescript("""
            CREATE TABLE datoms (e INTEGER NOT NULL, a INTEGER NOT NULL, v NOT NULL, tx INTEGER NOT NULL);
            CREATE TABLE transactions (e INTEGER NOT NULL, a INTEGER NOT NULL, v NOT NULL, tx INTEGER NOT NULL,
                                       added INTEGER NOT NULL);""")
        rows = [(e, A[a], v, tx) for e, a, v, tx in eav_rows(self.ds, self.ids)]
        t0 = time.perf_counter()
        c.execute("BEGIN")
        c.executemany("INSERT INTO datoms VALUES (?, ?, ?, ?)", rows)
        c.executemany("INSERT INTO transactions VALUES (?, ?, ?, ?, 1)", rows)
        c.execute("COMMIT")
        c.executescript("""
            CREATE INDEX idx_eavt ON datoms (e, a, v);
            CREATE INDEX idx_aevt ON datoms (a, e, v);
            CREATE INDEX idx_avet ON datoms (a, v, e);
            CREATE INDEX idx_tx_aevt ON transactions (a, e, v, tx, added);
            ANALYZE;""")
        secs = time.perf_counter() - t0
        c.close()
        return {"datoms": len(rows), "seconds": secs, "bytes": os.path.getsize(self.db),
                "method": "executemany into datoms + transactions in one transaction, then EAVT/AEVT/AVET indexes"}

    def apply_history(self):
        c = self.connect()
        for b, batch in enumerate(self.ds.history_batches()):
            c.execute("BEGIN")
            for idx, st in batch:
                self._set_state(c, self.ids.issue(idx), st, HIST_TX0 + b)
            c.execute("COMMIT")
        c.close()
        self.last_initial = last_initial_tx(self.ds)
        self.since = since_tx(self.ds)

    @staticmethod
    def _set_state(c, e, st, tx):
        old = c.execute("SELECT v FROM datoms WHERE e = ? AND a = 4", [e]).fetchall()
        for (v,) in old:
            if v == st:
                return
            c.execute("DELETE FROM datoms WHERE e = ? AND a = 4 AND v = ?", [e, v])
            c.execute("INSERT INTO transactions VALUES (?, 4, ?, ?, 0)", [e, v, tx])
        c.execute("INSERT INTO datoms VALUES (?, 4, ?, ?)", [e, st, tx])
        c.execute("INSERT INTO transactions VALUES (?, 4, ?, ?, 1)", [e, st, tx])

    def next_tx(self):
        with self.lock:
            return next(self.txc)

    def session(self):
        return SQLiteSession(self)

    def cold_spec(self):
        return {"peer": "sqlite", "db": self.db, "email": self.ds.probe_email(), "sql": SQLiteSession.Q1}


class SQLiteSession:
    Q1 = "SELECT u.e, n.v FROM datoms u JOIN datoms n ON n.e = u.e AND n.a = 2 WHERE u.a = 1 AND u.v = ?"
    Q2 = ("SELECT a.e, t.v, s.v FROM datoms u JOIN datoms a ON a.a = 6 AND a.v = u.e "
          "JOIN datoms t ON t.e = a.e AND t.a = 3 JOIN datoms s ON s.e = a.e AND s.a = 4 WHERE u.a = 1 AND u.v = ?")
    Q3 = "SELECT v, count(*) FROM datoms WHERE a = 4 GROUP BY v"
    Q4 = ("SELECT s.e, t.v, p.v FROM datoms s JOIN datoms p ON p.e = s.e AND p.a = 5 "
          "JOIN datoms t ON t.e = s.e AND t.a = 3 WHERE s.a = 4 AND s.v = ':state/open' AND p.v >= 4")
    ASOF = (f"SELECT a.e, t.v, s.v FROM {asof(1)} u JOIN {asof(6)} a ON a.v = u.e JOIN {asof(3)} t ON t.e = a.e "
            f"JOIN {asof(4)} s ON s.e = a.e WHERE u.v = :email")
    SINCE = "SELECT DISTINCT e FROM datoms WHERE a = 4 AND tx > ?"
    IB = ("SELECT u.e, n.v FROM datoms u JOIN datoms n ON n.e = u.e AND n.a = 2 "
          "WHERE u.a = 1 AND u.v IN (SELECT value FROM json_each(?))")
    PULL = "SELECT a, v FROM datoms WHERE e = ?"
    READ = "SELECT v FROM datoms WHERE e = ? AND a = 4"

    def __init__(self, p):
        self.p = p
        self.c = p.connect()

    def floor(self):
        """`SELECT 1` through the same client: the cost of any statement, under every call."""
        return self.c.execute("SELECT 1").fetchall()

    def q1(self, email):
        return self.c.execute(self.Q1, [email]).fetchall()

    def q2(self, email):
        return self.c.execute(self.Q2, [email]).fetchall()

    def q3(self):
        return self.c.execute(self.Q3).fetchall()

    def q4(self):
        return self.c.execute(self.Q4).fetchall()

    def as_of(self, email):
        return self.c.execute(self.ASOF, {"t": self.p.last_initial, "email": email}).fetchall()

    def since(self):
        return self.c.execute(self.SINCE, [self.p.since]).fetchall()

    def input_bindings(self, emails):
        return self.c.execute(self.IB, [json.dumps(emails)]).fetchall()

    def pull(self, idx):
        return self.c.execute(self.PULL, [self.p.ids.issue(idx)]).fetchall()

    def norm_pull(self, raw):
        d = {"labels": 0}
        for a, v in raw:
            if a == 3:
                d["title"] = v
            elif a == 4:
                d["state"] = v
            elif a == 5:
                d["priority"] = v
            elif a == 8:
                d["created_at_ms"] = v
            elif a == 9:
                d["labels"] += 1
        return d

    def write_state(self, idx, state):
        c = self.c
        c.execute("BEGIN IMMEDIATE")
        try:
            self.p._set_state(c, self.p.ids.issue(idx), state, self.p.next_tx())
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise

    def write_label(self, idx, label):
        c = self.c
        e, v = self.p.ids.issue(idx), self.p.ids.label[label]
        c.execute("BEGIN IMMEDIATE")
        try:
            if not c.execute("SELECT 1 FROM datoms WHERE e = ? AND a = 9 AND v = ?", [e, v]).fetchall():
                tx = self.p.next_tx()
                c.execute("INSERT INTO datoms VALUES (?, 9, ?, ?)", [e, v, tx])
                c.execute("INSERT INTO transactions VALUES (?, 9, ?, ?, 1)", [e, v, tx])
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise

    def point_read(self, idx):
        return self.c.execute(self.READ, [self.p.ids.issue(idx)]).fetchall()
