"""mentat itself (mentat_transact / mentat_tx / mentat_q / mentat_pull) and the hand-written DuckDB SQL over its own
tables."""
import json
import os
import pathlib
import shutil
import sys
import time

import numpy as np

from .. import workload as W
from .base import TITLE_IDX, Peer, Unsupported, normalise_pull

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
import common  # noqa: E402


def sql_string(text):
    """`text` as a DuckDB string literal: quotes doubled, nothing else changes (a standard SQL string has no
    backslash escapes)."""
    return "'" + text.replace("'", "''") + "'"


def has_function(con, name):
    return con.execute("SELECT count(*) FROM duckdb_functions() WHERE function_name = ?", [name]).fetchall()[0][0] > 0


class Mentat(Peer):
    name = "mentat"

    def __init__(self, ds, workdir, opts):
        super().__init__(ds, workdir, opts)
        self.db = pathlib.Path(workdir) / "mentat_store.duckdb"
        for p in (self.db, pathlib.Path(str(self.db) + ".wal")):
            if p.exists():
                p.unlink()
        self.con = common.connect(self.db)
        self.has_pull = has_function(self.con, "mentat_pull")
        self.cannot = {} if self.has_pull else {"pull": "mentat_pull does not exist in this build yet (issue 4)"}
        self.tx_batches = []

    def load(self):
        c = self.con
        c.execute("SELECT * FROM mentat_transact(?)", [(self.ds.path / "schema.edn").read_text()]).fetchall()
        texts = [f.read_text() for f in self.ds.tx_files()]
        t0 = time.perf_counter()
        datoms = 0
        for text in texts:
            tx, n = c.execute("SELECT tx, datoms FROM mentat_transact(?)", [text]).fetchall()[0]
            datoms += n - 1  # less the :db/txInstant datom
        # the time includes applying the transaction log to the tables (groups of new entities go to the log
        # first: storage/README.md "The transaction log"), so the figure is the load into DuckDB's tables
        c.execute("SELECT * FROM mentat_sync()").fetchall()
        secs = time.perf_counter() - t0
        self.last_initial_tx = tx
        if datoms != self.ds.truth["datoms"]["initial"]:
            raise W.WrongAnswer(f"WRONG ANSWER: mentat bulk_load: transacted {datoms} datoms, "
                                f"truth {self.ds.truth['datoms']['initial']}")
        c.execute("CHECKPOINT")
        size = os.path.getsize(self.db)
        self.attr = {r[0]: r[1] for r in c.execute("SELECT ident, entid FROM mentat_schema()").fetchall()}
        return {"datoms": datoms, "seconds": secs, "bytes": size,
                "method": f"{len(texts)} mentat_transact calls of EDN (500 entities each, lookup refs resolved)"}

    def apply_history(self):
        c = self.con
        for batch in self.ds.history_batches():
            titles = [self.ds.issues[idx][1] for idx, _ in batch]
            found = dict((t, e) for e, t in c.execute("FROM mentat_q(?, inputs := ?)",
                                                      [W.QTITLES, json.dumps([titles])]).fetchall())
            if len(found) != len(titles):
                raise W.WrongAnswer(f"WRONG ANSWER: mentat history: {len(titles) - len(found)} titles not found")
            edn = "[" + " ".join(f"[:db/add {found[self.ds.issues[idx][1]]} :issue/state {st}]"
                                 for idx, st in batch) + "]"
            self.tx_batches.append(c.execute("SELECT tx FROM mentat_transact(?)", [edn]).fetchall()[0][0])
        k = self.ds.since_basis_batches
        self.since_tx = self.tx_batches[k - 1] if k > 0 else self.last_initial_tx
        n = self.ds.truth["entities"]["issues"]
        self.idx_e = np.zeros(n, dtype=np.int64)
        for e, t in c.execute("FROM mentat_q('[:find ?e ?t :where [?e :issue/title ?t]]')").fetchall():
            self.idx_e[int(TITLE_IDX.match(t).group(1))] = e
        c.execute("CHECKPOINT")

    def settle(self, ds):
        """Asks each entity-shaped question once (so the entity index reads the attributes they need), then waits
        until no attribute is still being read (`mentat_entity_index`), at most 120 s."""
        s = MentatSession(self)
        s.q1(ds.emails()[0])
        s.q2(ds.emails()[0])
        s.as_of(ds.emails()[0])
        s.input_bindings(ds.emails()[:100])
        s.pull(0)
        deadline = time.time() + 120
        while time.time() < deadline:
            reading = self.con.execute("SELECT count(*) FROM mentat_entity_index() WHERE state = 'reading'").fetchall()
            if reading[0][0] == 0:
                break
            time.sleep(0.2)

    def session(self):
        return MentatSession(self)

    def cold_spec(self):
        # the main process keeps the file open (DuckDB's lock), so the new process opens a copy of the checkpointed file
        cp = pathlib.Path(self.workdir) / "mentat_cold_copy.duckdb"
        self.con.execute("SELECT * FROM mentat_sync()").fetchall()  # the transaction log into the tables first
        self.con.execute("CHECKPOINT")
        shutil.copy(self.db, cp)
        return {"peer": "mentat", "db": str(cp), "ext": str(common.EXT), "email": self.ds.probe_email()}


class MentatSession:
    def __init__(self, p):
        self.p = p
        self.c = p.con.cursor()
        # Python's `execute` prepares its statement again at every call; DuckDB's own PREPARE plans it once per
        # connection, and `EXECUTE` then only binds the literal (README "Many writers": 0.3 ms less a write)
        self.c.execute("PREPARE mentat_write AS SELECT mentat_tx(?)")
        self.c.execute("PREPARE mentat_floor AS SELECT 1")

    def floor(self):
        """`SELECT 1` through the same client: the cost of any statement, under every call."""
        return self.c.execute("SELECT 1").fetchall()

    def floor_prepared(self):
        """`EXECUTE` of a `SELECT 1` prepared once per connection: the floor under the writes, which are sent so."""
        return self.c.execute("EXECUTE mentat_floor").fetchall()

    def _tx(self, edn):
        return self.c.execute(f"EXECUTE mentat_write({sql_string(edn)})").fetchall()

    def q1(self, email):
        return self.c.execute("FROM mentat_q(?, inputs := ?)", [W.Q1, json.dumps([email])]).fetchall()

    def q2(self, email):
        return self.c.execute("FROM mentat_q(?, inputs := ?)", [W.Q2, json.dumps([email])]).fetchall()

    def q3(self):
        return self.c.execute("FROM mentat_q(?)", [W.Q3]).fetchall()

    def q4(self):
        return self.c.execute("FROM mentat_q(?, inputs := '[4]')", [W.Q4]).fetchall()

    def as_of(self, email):
        return self.c.execute("FROM mentat_q(?, inputs := ?, as_of := ?)",
                              [W.Q2, json.dumps([email]), self.p.last_initial_tx]).fetchall()

    def since(self):
        return self.c.execute("FROM mentat_q(?, since := ?)", [W.QSINCE, self.p.since_tx]).fetchall()

    def input_bindings(self, emails):
        return self.c.execute("FROM mentat_q(?, inputs := ?)", [W.QIB, json.dumps([emails])]).fetchall()

    def pull(self, idx):
        cur = self.c.execute("SELECT * FROM mentat_pull('[*]', ?)", [int(self.p.idx_e[idx])])
        names = [d[0] for d in cur.description]
        rows = cur.fetchall()
        return [dict(zip(names, r)) for r in rows]

    def norm_pull(self, raw):
        return normalise_pull(raw)

    # single small transactions go through mentat_tx, the scalar function, prepared once per connection (README
    # "Many writers")
    def write_state(self, idx, state):
        return self._tx(f"[[:db/add {int(self.p.idx_e[idx])} :issue/state {state}]]")

    def write_states_many(self, pairs):
        """Single-datom transactions of (issue index, state), each its own, in one mentat_transact_many call."""
        txs = [f"[[:db/add {int(self.p.idx_e[idx])} :issue/state {st}]]" for idx, st in pairs]
        ok = self.c.execute("SELECT count(*) FILTER (WHERE error IS NULL) FROM mentat_transact_many(?)",
                            [txs]).fetchall()[0][0]
        if ok != len(txs):
            raise W.WrongAnswer(f"WRONG ANSWER: mentat transact_many: {len(txs) - ok} of {len(txs)} transactions failed")
        return ok

    def write_label(self, idx, label):
        return self._tx(f'[[:db/add {int(self.p.idx_e[idx])} :issue/label [:label/name "{label}"]]]')

    def point_read(self, idx):
        return self.c.execute("FROM mentat_q(?, inputs := ?)", [W.QREAD, f"[{int(self.p.idx_e[idx])}]"]).fetchall()


class DuckSQL(Peer):
    """The floor: the same questions written by hand in DuckDB SQL over mentat's own tables, same connection."""
    name = "duckdb_sql"
    cannot = {"bulk_load": "reads mentat's tables (loaded by mentat's transactor); no load of its own",
              "cold_vs_warm": "same file and process as mentat; see mentat's row",
              "write_mixed": "writes go through mentat's transactor (hand SQL would skip history and checks)",
              "update_heavy": "writes go through mentat's transactor (hand SQL would skip history and checks)",
              "single_tx": "writes go through mentat's transactor (hand SQL would skip history and checks)",
              "transact_many": "writes go through mentat's transactor (hand SQL would skip history and checks)"}

    def __init__(self, ds, workdir, opts, mentat):
        super().__init__(ds, workdir, opts)
        self.m = mentat

    def load(self):
        raise Unsupported(self.cannot["bulk_load"])

    def apply_history(self):
        self.idx_e = self.m.idx_e
        a = self.m.attr
        self.t = {k: f"mentat.cur_{v}" for k, v in a.items()}
        self.h = {k: f"mentat.hist_{v}" for k, v in a.items()}
        cols = {r[0] for r in self.m.con.execute(
            "SELECT column_name FROM duckdb_columns() WHERE schema_name = 'mentat' AND table_name = ?",
            [f"hist_{a[':issue/state']}"]).fetchall()}
        self.hist_layout = "retracted_tx" if "retracted_tx" in cols else "added"

    def session(self):
        return DuckSQLSession(self)


class DuckSQLSession:
    def __init__(self, p):
        self.p = p
        self.c = p.m.con.cursor()
        t, h = p.t, p.h
        self.sql_q1 = f"SELECT u.e, n.v FROM {t[':user/email']} u JOIN {t[':user/name']} n ON n.e = u.e WHERE u.v = ?"
        self.sql_q2 = (f"SELECT a.e, ti.v, s.v FROM {t[':user/email']} u JOIN {t[':issue/assignee']} a ON a.v = u.e "
                       f"JOIN {t[':issue/title']} ti ON ti.e = a.e JOIN {t[':issue/state']} s ON s.e = a.e WHERE u.v = ?")
        self.sql_q3 = f"SELECT v, count(*) FROM {t[':issue/state']} GROUP BY v"
        self.sql_q4 = (f"SELECT s.e, ti.v, p.v FROM {t[':issue/state']} s JOIN {t[':issue/priority']} p ON p.e = s.e "
                       f"JOIN {t[':issue/title']} ti ON ti.e = s.e WHERE s.v = ':state/open' AND p.v >= 4")

        def asof(a):
            if p.hist_layout == "retracted_tx":  # hist_ holds retracted datoms: asserted at tx, retracted at retracted_tx
                return (f"(SELECT e, v FROM {t[a]} WHERE tx <= $t UNION ALL "
                        f"SELECT e, v FROM {h[a]} WHERE tx <= $t AND $t < retracted_tx)")
            # the older event-log layout: the last event per (e, v) at or before t is an add
            return (f"(SELECT e, v FROM {h[a]} WHERE tx <= $t "
                    f"QUALIFY row_number() OVER (PARTITION BY e, v ORDER BY tx DESC, added) = 1 AND added)")
        self.sql_asof = (f"SELECT a.e, ti.v, s.v FROM {asof(':user/email')} u JOIN {asof(':issue/assignee')} a "
                         f"ON a.v = u.e JOIN {asof(':issue/title')} ti ON ti.e = a.e JOIN {asof(':issue/state')} s "
                         f"ON s.e = a.e WHERE u.v = $email")
        self.sql_since = f"SELECT DISTINCT e FROM {t[':issue/state']} WHERE tx > ?"
        self.sql_ib = (f"SELECT u.e, n.v FROM {t[':user/email']} u JOIN {t[':user/name']} n ON n.e = u.e "
                       "WHERE u.v IN (SELECT unnest(?::VARCHAR[]))")
        self.sql_pull = (f"SELECT (SELECT v FROM {t[':issue/title']} WHERE e = $e) AS title, "
                         f"(SELECT v FROM {t[':issue/state']} WHERE e = $e) AS state, "
                         f"(SELECT v FROM {t[':issue/priority']} WHERE e = $e) AS priority, "
                         f"(SELECT epoch_ms(v) FROM {t[':issue/created-at']} WHERE e = $e) AS created_at_ms, "
                         f"(SELECT v FROM {t[':issue/assignee']} WHERE e = $e) AS assignee, "
                         f"(SELECT v FROM {t[':issue/reporter']} WHERE e = $e) AS reporter, "
                         f"(SELECT list(v) FROM {t[':issue/label']} WHERE e = $e) AS labels")
        self.sql_read = f"SELECT v FROM {t[':issue/state']} WHERE e = ?"

    def floor(self):
        """`SELECT 1` through the same client: the cost of any statement, under every call."""
        return self.c.execute("SELECT 1").fetchall()

    def q1(self, email):
        return self.c.execute(self.sql_q1, [email]).fetchall()

    def q2(self, email):
        return self.c.execute(self.sql_q2, [email]).fetchall()

    def q3(self):
        return self.c.execute(self.sql_q3).fetchall()

    def q4(self):
        return self.c.execute(self.sql_q4).fetchall()

    def as_of(self, email):
        return self.c.execute(self.sql_asof, {"t": self.p.m.last_initial_tx, "email": email}).fetchall()

    def since(self):
        return self.c.execute(self.sql_since, [self.p.m.since_tx]).fetchall()

    def input_bindings(self, emails):
        return self.c.execute(self.sql_ib, [emails]).fetchall()

    def pull(self, idx):
        return self.c.execute(self.sql_pull, {"e": int(self.p.idx_e[idx])}).fetchall()

    def norm_pull(self, raw):
        ti, st, pr, ca, _a, _r, labels = raw[0]
        return {"title": ti, "state": st, "priority": pr, "created_at_ms": ca, "labels": len(labels or [])}

    def point_read(self, idx):
        return self.c.execute(self.sql_read, [int(self.p.idx_e[idx])]).fetchall()
