"""PostgreSQL (Debian's server, started by the suite on loopback in a temporary directory) with typed EAV tables,
EAVT and AVET indexes on the current-state tables and a (a, e, v, tx) index on the history tables: the layout of
the PostgreSQL mentat backend after its fixes. Clients connect through psycopg 3, one connection per client."""
import atexit
import glob
import importlib
import io
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

from .base import HIST_TX0, Ids, Peer, Unsupported, eav_rows, last_initial_tx, since_tx

A = {":user/email": 1, ":user/name": 2, ":issue/title": 3, ":issue/state": 4, ":issue/priority": 5,
     ":issue/assignee": 6, ":issue/reporter": 7, ":issue/created-at": 8, ":issue/label": 9, ":label/name": 10}
TYPE = {1: "text", 2: "text", 3: "text", 4: "text", 10: "text", 5: "long", 6: "long", 7: "long", 9: "long",
        8: "inst"}

_server = {}


def _bin(name):
    hits = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if hits:
        return hits[-1]
    p = shutil.which(name)
    if not p:
        raise Unsupported(f"PostgreSQL server binaries not found ({name}); apt-get install -y postgresql")
    return p


def server():
    """Starts one PostgreSQL server for the run (initdb + pg_ctl as the postgres user when root)."""
    if _server:
        return _server["dsn"]
    try:
        import psycopg  # noqa: F401
    except ImportError:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--root-user-action=ignore", "psycopg[binary]"],
                       check=False, capture_output=True)
        importlib.invalidate_caches()
        try:
            import psycopg  # noqa: F401
        except ImportError as e:
            raise Unsupported(f"psycopg could not be installed: {e}")
    try:
        initdb = _bin("initdb")
    except Unsupported:
        # a machine that never ran apt-get update has no package lists to install from
        subprocess.run(["apt-get", "update", "-q"], capture_output=True)
        subprocess.run(["apt-get", "install", "-y", "-q", "postgresql"], capture_output=True)
        initdb = _bin("initdb")
    pg_ctl = _bin("pg_ctl")
    d = tempfile.mkdtemp(prefix="mentat-suite-pg-")
    root = os.geteuid() == 0
    if root:
        uid = pwd.getpwnam("postgres").pw_uid
        os.chown(d, uid, -1)
        os.chmod(d, 0o700)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    data = os.path.join(d, "data")

    def as_pg(cmd):
        if root:
            return subprocess.run(["su", "postgres", "-c", " ".join(cmd)], capture_output=True, text=True)
        return subprocess.run(cmd, capture_output=True, text=True)
    r = as_pg([initdb, "-D", data, "-A", "trust", "-U", "postgres", "--no-sync"])
    if r.returncode:
        raise Unsupported(f"initdb failed: {r.stderr.strip()[-300:]}")
    opts = (f"-p {port} -k {d} -c listen_addresses=127.0.0.1 -c max_connections=200 -c shared_buffers=1GB "
            "-c work_mem=64MB -c maintenance_work_mem=512MB -c max_wal_size=4GB")
    r = as_pg([pg_ctl, "-D", data, "-l", os.path.join(d, "log"), "-w", "-o", f"'{opts}'", "start"])
    if r.returncode:
        raise Unsupported(f"pg_ctl start failed: {r.stderr.strip()[-300:]} {r.stdout.strip()[-300:]}")
    _server.update(dir=d, data=data, port=port, dsn=f"host=127.0.0.1 port={port} user=postgres dbname=postgres")

    def stop():
        as_pg([pg_ctl, "-D", data, "-m", "immediate", "stop"])
        shutil.rmtree(d, ignore_errors=True)
    atexit.register(stop)
    _server["stop"] = stop
    return _server["dsn"]


class PostgresPeer(Peer):
    name = "postgres"

    def __init__(self, ds, workdir, opts):
        super().__init__(ds, workdir, opts)
        base = server()  # installs psycopg when missing, so it is imported only after
        import psycopg
        self.dbname = f"suite_{ds.scale}"
        with psycopg.connect(base, autocommit=True) as c:
            c.execute(f"DROP DATABASE IF EXISTS {self.dbname}")
            c.execute(f"CREATE DATABASE {self.dbname}")
        self.dsn = base.replace("dbname=postgres", f"dbname={self.dbname}")
        self.ids = Ids(ds)
        self.txc = itertools.count(HIST_TX0 + 10_000)
        self.lock = threading.Lock()

    def connect(self):
        import psycopg
        return psycopg.connect(self.dsn, autocommit=True)

    def load(self):
        c = self.connect()
        for t, vt in (("text", "text"), ("long", "bigint"), ("inst", "timestamptz")):
            c.execute(f"CREATE TABLE d_{t} (e bigint NOT NULL, a int NOT NULL, v {vt} NOT NULL, tx bigint NOT NULL)")
            c.execute(f"CREATE TABLE h_{t} (e bigint NOT NULL, a int NOT NULL, v {vt} NOT NULL, tx bigint NOT NULL, "
                      "added boolean NOT NULL)")
        bufs = {"text": io.StringIO(), "long": io.StringIO(), "inst": io.StringIO()}
        n = 0
        for e, a, v, tx in eav_rows(self.ds, self.ids):
            aid = A[a]
            t = TYPE[aid]
            if t == "inst":
                v = time.strftime("%Y-%m-%d %H:%M:%S+00", time.gmtime(v / 1000))
            bufs[t].write(f"{e}\t{aid}\t{v}\t{tx}\n")
            n += 1
        t0 = time.perf_counter()
        for t, b in bufs.items():
            data = b.getvalue()
            with c.cursor() as cur:
                with cur.copy(f"COPY d_{t} (e, a, v, tx) FROM STDIN") as cp:
                    cp.write(data)
            c.execute(f"INSERT INTO h_{t} SELECT e, a, v, tx, true FROM d_{t}")
            c.execute(f"CREATE INDEX d_{t}_eavt ON d_{t} (e, a, v)")
            c.execute(f"CREATE INDEX d_{t}_avet ON d_{t} (a, v, e)")
            c.execute(f"CREATE INDEX h_{t}_aevt ON h_{t} (a, e, v, tx, added)")
            c.execute(f"ANALYZE d_{t}")
            c.execute(f"ANALYZE h_{t}")
        secs = time.perf_counter() - t0
        size = c.execute("SELECT pg_database_size(current_database())").fetchall()[0][0]
        c.close()
        return {"datoms": n, "seconds": secs, "bytes": size,
                "method": "COPY into typed EAV tables + history, then EAVT/AVET/history indexes and ANALYZE"}

    def apply_history(self):
        c = self.connect()
        for b, batch in enumerate(self.ds.history_batches()):
            with c.transaction():
                for idx, st in batch:
                    self._set_state(c, self.ids.issue(idx), st, HIST_TX0 + b)
        c.close()
        self.last_initial = last_initial_tx(self.ds)
        self.since = since_tx(self.ds)

    @staticmethod
    def _set_state(c, e, st, tx):
        old = c.execute("SELECT v FROM d_text WHERE e = %s AND a = 4", [e]).fetchall()
        for (v,) in old:
            if v == st:
                return
            c.execute("DELETE FROM d_text WHERE e = %s AND a = 4 AND v = %s", [e, v])
            c.execute("INSERT INTO h_text VALUES (%s, 4, %s, %s, false)", [e, v, tx])
        c.execute("INSERT INTO d_text VALUES (%s, 4, %s, %s)", [e, st, tx])
        c.execute("INSERT INTO h_text VALUES (%s, 4, %s, %s, true)", [e, st, tx])

    def next_tx(self):
        with self.lock:
            return next(self.txc)

    def session(self):
        return PGSession(self)

    def cold_spec(self):
        return {"peer": "postgres", "dsn": self.dsn, "email": self.ds.probe_email(), "sql": PGSession.Q1}

    def close(self):
        pass


def asof(t, a):
    return (f"(SELECT e, v FROM d_{t} WHERE a = {a} AND tx <= %(t)s "
            f"UNION SELECT r.e, r.v FROM h_{t} r WHERE r.a = {a} AND NOT r.added AND r.tx > %(t)s "
            f"AND (SELECT x.added FROM h_{t} x WHERE x.a = r.a AND x.e = r.e AND x.v = r.v AND x.tx <= %(t)s "
            f"ORDER BY x.tx DESC, x.added LIMIT 1))")


class PGSession:
    Q1 = "SELECT u.e, n.v FROM d_text u JOIN d_text n ON n.e = u.e AND n.a = 2 WHERE u.a = 1 AND u.v = %s"
    Q2 = ("SELECT a.e, t.v, s.v FROM d_text u JOIN d_long a ON a.a = 6 AND a.v = u.e "
          "JOIN d_text t ON t.e = a.e AND t.a = 3 JOIN d_text s ON s.e = a.e AND s.a = 4 WHERE u.a = 1 AND u.v = %s")
    Q3 = "SELECT v, count(*) FROM d_text WHERE a = 4 GROUP BY v"
    Q4 = ("SELECT s.e, t.v, p.v FROM d_text s JOIN d_long p ON p.e = s.e AND p.a = 5 "
          "JOIN d_text t ON t.e = s.e AND t.a = 3 WHERE s.a = 4 AND s.v = ':state/open' AND p.v >= 4")
    ASOF = (f"SELECT a.e, t.v, s.v FROM {asof('text', 1)} u JOIN {asof('long', 6)} a ON a.v = u.e "
            f"JOIN {asof('text', 3)} t ON t.e = a.e JOIN {asof('text', 4)} s ON s.e = a.e WHERE u.v = %(email)s")
    SINCE = "SELECT DISTINCT e FROM d_text WHERE a = 4 AND tx > %s"
    IB = ("SELECT u.e, n.v FROM d_text u JOIN d_text n ON n.e = u.e AND n.a = 2 "
          "WHERE u.a = 1 AND u.v = ANY(%s)")
    PULL = ("SELECT a, v FROM d_text WHERE e = %(e)s UNION ALL SELECT a, v::text FROM d_long WHERE e = %(e)s "
            "UNION ALL SELECT a, (extract(epoch FROM v) * 1000)::bigint::text FROM d_inst WHERE e = %(e)s")
    READ = "SELECT v FROM d_text WHERE e = %s AND a = 4"

    def __init__(self, p):
        self.p = p
        self.c = p.connect()

    def floor(self):
        """`SELECT 1` through the same client: the cost of any statement, under every call."""
        return self.c.execute("SELECT 1", prepare=True).fetchall()

    def q1(self, email):
        return self.c.execute(self.Q1, [email], prepare=True).fetchall()

    def q2(self, email):
        return self.c.execute(self.Q2, [email], prepare=True).fetchall()

    def q3(self):
        return self.c.execute(self.Q3, prepare=True).fetchall()

    def q4(self):
        return self.c.execute(self.Q4, prepare=True).fetchall()

    def as_of(self, email):
        return self.c.execute(self.ASOF, {"t": self.p.last_initial, "email": email}, prepare=True).fetchall()

    def since(self):
        return self.c.execute(self.SINCE, [self.p.since], prepare=True).fetchall()

    def input_bindings(self, emails):
        return self.c.execute(self.IB, [emails], prepare=True).fetchall()

    def pull(self, idx):
        return self.c.execute(self.PULL, {"e": self.p.ids.issue(idx)}, prepare=True).fetchall()

    def norm_pull(self, raw):
        d = {"labels": 0}
        for a, v in raw:
            if a == 3:
                d["title"] = v
            elif a == 4:
                d["state"] = v
            elif a == 5:
                d["priority"] = int(v)
            elif a == 8:
                d["created_at_ms"] = int(v)
            elif a == 9:
                d["labels"] += 1
        return d

    def write_state(self, idx, state):
        with self.c.transaction():
            self.c.execute("SELECT pg_advisory_xact_lock(1)")  # one writer, as a Datomic transactor
            self.p._set_state(self.c, self.p.ids.issue(idx), state, self.p.next_tx())

    def write_label(self, idx, label):
        e, v = self.p.ids.issue(idx), self.p.ids.label[label]
        with self.c.transaction():
            self.c.execute("SELECT pg_advisory_xact_lock(1)")
            if not self.c.execute("SELECT 1 FROM d_long WHERE e = %s AND a = 9 AND v = %s", [e, v]).fetchall():
                tx = self.p.next_tx()
                self.c.execute("INSERT INTO d_long VALUES (%s, 9, %s, %s)", [e, v, tx])
                self.c.execute("INSERT INTO h_long VALUES (%s, 9, %s, %s, true)", [e, v, tx])

    def point_read(self, idx):
        return self.c.execute(self.READ, [self.p.ids.issue(idx)], prepare=True).fetchall()
