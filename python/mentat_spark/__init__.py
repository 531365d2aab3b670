"""mentat from Python: the DuckDB extension, and the same Datalog on Apache Spark over a Parquet export.

DuckDB::

    import mentat_spark
    con = mentat_spark.connect("my.duckdb")          # duckdb connection with mentat loaded
    con.sql("FROM mentat_q('[:find ?e :where [?e :db/ident :db/ident]]')")

Spark, over the files that ``mentat_export(dir)`` wrote (see docs/parquet-format.md)::

    from pyspark.sql import SparkSession
    spark = SparkSession.builder.master("spark://host:7077").getOrCreate()
    df = mentat_spark.q(spark, "/data/export", "[:find ?state (count ?i) :where [?i :issue/state ?state]]")

The plan comes from the planner inside the extension: an in-memory DuckDB attaches the export
(``mentat_attach_parquet``, which reads the schema from the files) and ``mentat_sql(query, inputs, store,
'dialect=spark')`` prints Spark SQL over views named after the export's tables. A query with recursive rules is
returned as a JSON plan of stages, which :func:`run_plan` evaluates semi-naively (Spark refuses ``UNION`` in
recursive CTEs).
"""
from __future__ import annotations

import json
import os
import pathlib
import re
import threading

from .pull import pull  # Datomic's pull on Spark (pull.py)

__all__ = ["extension_path", "load", "connect", "sql", "plan", "q", "pull", "run_plan", "read_manifest",
           "register_views", "StandaloneCluster"]

_NAME = "mentat.duckdb_extension"
_HERE = pathlib.Path(__file__).resolve().parent


def extension_path() -> pathlib.Path:
    """The extension file: $MENTAT_EXTENSION, else the copy bundled in this package, else the repository's build/."""
    env = os.environ.get("MENTAT_EXTENSION")
    for p in ([pathlib.Path(env)] if env else []) + [_HERE / _NAME, _HERE.parent.parent / "build" / _NAME]:
        if p.exists():
            return p
    raise FileNotFoundError(f"no {_NAME}: pip install ./python after scripts/setup.sh, or set MENTAT_EXTENSION")


def load(con) -> None:
    """Loads mentat into a Python duckdb connection (opened with ``allow_unsigned_extensions``)."""
    con.execute(f"LOAD '{extension_path()}'")


def connect(database: str = ":memory:", **config):
    """A duckdb connection to ``database`` with mentat loaded (unsigned extensions allowed)."""
    import duckdb

    config = {"allow_unsigned_extensions": "true", **config}
    con = duckdb.connect(str(database), config=config)
    load(con)
    return con


def _options(dialect="spark", as_of=None, since=None, history=False) -> str:
    opts = [f"dialect={dialect}"]
    for key, value in (("as_of", as_of), ("since", since)):
        if value is not None:
            text = value.isoformat(sep=" ") if hasattr(value, "isoformat") else str(value)
            if "," in text:
                raise ValueError(f"{key} {text!r} cannot hold a comma")
            opts.append(f"{key}={text}")
    if history:
        opts.append("history=true")
    return ",".join(opts)


def sql(query: str, inputs: str | None = None, *, con=None, store: str = "mentat", dialect: str = "spark",
        as_of=None, since=None, history: bool = False) -> str:
    """What ``mentat_sql`` prints for ``query`` over ``store`` of ``con`` (a new in-memory connection if None):
    one statement, or for Spark with recursive rules a JSON plan (see :func:`run_plan`). ``inputs`` is the EDN
    vector of ``:in`` values after ``$``; ``as_of``/``since`` a tx entid or an instant."""
    con = con or connect()
    (text,), = con.execute("SELECT mentat_sql(?, ?, ?, ?)",
                           [query, "[]" if inputs is None else inputs, store,
                            _options(dialect, as_of, since, history)]).fetchall()
    return text


FORMAT_VERSIONS = (1, 2, 3)


def read_manifest(snapshot_dir, basis_tx: int | None = None) -> dict:
    """The manifest of an export directory (docs/parquet-format.md): its latest snapshot's (``manifest.json``), or
    with ``basis_tx`` the kept manifest of that earlier snapshot, found by the extension's ``mentat_snapshots``
    (which knows how kept manifests are named). Raises ``FileNotFoundError`` without a manifest, a duckdb error for
    a snapshot the directory does not keep, and ``ValueError`` for a manifest of an unknown format or version.
    Spark reads format version 2 (version 1 wrote uuid values in Parquet's UUID type, which Spark refuses: export
    such a store again)."""
    d = str(snapshot_dir)
    name = "manifest.json"
    if basis_tx is not None:
        with _lock:
            global _lister
            _lister = _lister or connect()
            found = _lister.execute("SELECT manifest FROM mentat_snapshots(?) WHERE basis_tx = ?",
                                    [d, int(basis_tx)]).fetchall()
        if len(found) != 1:
            raise FileNotFoundError(f"{d}: {len(found)} kept snapshots of basis tx {basis_tx} (mentat_snapshots lists "
                                    "them)")
        name = found[0][0]
    with open(os.path.join(d, name)) as f:
        manifest = json.load(f)
    if manifest.get("format") != "mentat-parquet" or manifest.get("format_version") not in FORMAT_VERSIONS:
        raise ValueError(f"{d}: not a mentat Parquet export of format version {FORMAT_VERSIONS}")
    return manifest


_lister = None
_planners: dict = {}
_lock = threading.Lock()


def _planner(snapshot_dir: str, basis_tx: int, latest: bool):
    """An in-memory DuckDB with the snapshot ``basis_tx`` of the export attached as store ``snap`` (its schema is
    what the planner reads), kept per snapshot."""
    key = (os.path.abspath(snapshot_dir), basis_tx)
    with _lock:
        con = _planners.get(key)
        if con is None:
            con = connect()
            try:
                # the snapshot by its basis tx, even as the latest: an export landing meanwhile changes the latest
                con.execute("SELECT * FROM mentat_attach_parquet(?, store := 'snap', snapshot := ?)",
                            [key[0], basis_tx]).fetchall()
            except Exception:
                if not latest:
                    raise
                # an export written before snapshots were kept has only manifest.json
                con.execute("SELECT * FROM mentat_attach_parquet(?, store := 'snap')", [key[0]]).fetchall()
            _planners[key] = con
        return con


def plan(snapshot_dir, query: str, inputs: str | None = None, as_of=None, since=None, history=False,
         snapshot: int | None = None, manifest: dict | None = None) -> dict:
    """The Spark plan of ``query`` over the export in ``snapshot_dir`` (its latest snapshot, or the kept snapshot
    whose basis tx is ``snapshot``; or the snapshot of ``manifest``, as :func:`read_manifest` returned it):
    ``{"stages": [...], "final": sql}`` (``stages`` empty for a query without recursive rules)."""
    manifest = manifest or read_manifest(snapshot_dir, snapshot)
    con = _planner(str(snapshot_dir), manifest["basis_tx"], latest=snapshot is None)
    text = sql(query, inputs, con=con, store="snap", dialect="spark", as_of=as_of, since=since, history=history)
    if text.startswith("{"):
        return json.loads(text)
    return {"format": "mentat-plan", "version": 1, "dialect": "spark", "stages": [], "final": text}


_TABLE = re.compile(r"`?\b((?:cur|hist|ft|ftd)_\d+)\b`?")


def register_views(spark, snapshot_dir, tables=None, manifest=None) -> list:
    """Registers the export's files as temporary views named after their tables (``cur_100`` for
    ``cur_100.parquet``): all of them, or only ``tables``. Returns the names registered."""
    manifest = manifest or read_manifest(snapshot_dir)
    wanted = None if tables is None else set(tables)
    names = []
    for f in manifest["files"]:
        if wanted is not None and f["table"] not in wanted:
            continue
        path = os.path.join(os.path.abspath(str(snapshot_dir)), f["path"])
        spark.read.parquet(path).createOrReplaceTempView(f["table"])
        names.append(f["table"])
    return names


def run_plan(spark, plan: dict, max_rounds: int = 100_000):
    """Runs a plan: each stage is computed and registered as a view in order, then ``final`` runs.

    A stage with a ``step`` is a recursive rule's relation, evaluated semi-naively: the base rows are the first
    total and delta; each round registers the delta under the stage's name and the total as ``<name>__total``, runs
    the step, and keeps the rows not in the total (set difference, NULLs equal); the new rows join the total and
    are the next delta. It ends when a round finds nothing new; the total is then registered under the name.
    Each round's rows are materialized with ``localCheckpoint`` so that plans do not grow with the rounds.

    Spark 4.3 fails (``key not found``) when a checkpointed relation with constant NULL columns, such as the tagged
    relation of mutually recursive rules, is read twice in one statement: its constraints are rewritten for the
    second read. Constraint propagation is therefore switched off while the stages run, and restored after.
    """
    key = "spark.sql.constraintPropagation.enabled"
    old = spark.conf.get(key, None)
    if plan["stages"]:
        spark.conf.set(key, "false")
    try:
        for st in plan["stages"]:
            _stage(spark, st, max_rounds)
    finally:
        if plan["stages"]:
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)
    return spark.sql(plan["final"])


def _stage(spark, st: dict, max_rounds: int) -> None:
    name, cols = st["name"], st["columns"]
    total = spark.sql(st["base"]).toDF(*cols).distinct().localCheckpoint()
    if st.get("step") is not None:
        delta = total
        for rounds in range(1, max_rounds + 1):
            delta.createOrReplaceTempView(name)
            total.createOrReplaceTempView(f"{name}__total")
            new = spark.sql(st["step"]).toDF(*cols).distinct().subtract(total).localCheckpoint()
            if new.isEmpty():
                break
            # the total is a union of checkpointed rounds, materialized again every 16 rounds
            total = total.union(new)
            if rounds % 16 == 0:
                total = total.localCheckpoint()
            delta = new
        else:
            raise RuntimeError(f"recursive rule relation {name}: no fixpoint after {max_rounds} rounds")
    total.createOrReplaceTempView(name)


def q(spark, snapshot_dir, query: str, inputs: str | None = None, as_of=None, since=None, history: bool = False,
      snapshot: int | None = None, manifest: dict | None = None):
    """The answer of a Datalog ``query`` over the export in ``snapshot_dir``, as a ``pyspark.sql.DataFrame``
    (columns named as ``mentat_q`` names them). ``inputs`` is the EDN vector of the ``:in`` values after ``$``;
    ``as_of``/``since`` take a tx entid (int) or an instant (a datetime, or text such as
    ``'2025-01-01 00:00:00+00'``; without an offset it is read in the Spark session's time zone). The export's
    latest snapshot is read, or with ``snapshot`` the kept snapshot of that basis tx (``mentat_snapshots(dir)``
    lists them), or the snapshot of ``manifest`` (as :func:`read_manifest` returned it); the manifest is read once,
    so an export that lands meanwhile does not mix two snapshots."""
    manifest = manifest or read_manifest(snapshot_dir, snapshot)
    p = plan(snapshot_dir, query, inputs, as_of=as_of, since=since, history=history, snapshot=snapshot,
             manifest=manifest)
    texts = [p["final"]] + [s["base"] for s in p["stages"]] + [s["step"] or "" for s in p["stages"]]
    used = {m.group(1) for t in texts for m in _TABLE.finditer(t)}
    register_views(spark, snapshot_dir, tables=used, manifest=manifest)
    return run_plan(spark, p)


class StandaloneCluster:
    """A Spark standalone master and ``workers`` workers on 127.0.0.1, started as separate processes from pyspark's
    own distribution (``bin/spark-class``; the pip package has no ``start-master.sh``), for tests and benchmarks::

        with StandaloneCluster(workers=2, cores=1, memory="1g") as cluster:
            spark = SparkSession.builder.master(cluster.url).getOrCreate()

    Logs go to ``log_dir``. Stopping sends SIGTERM to each process group (SIGKILL after 30 s)."""

    def __init__(self, workers: int = 2, cores: int = 1, memory: str = "1g", log_dir=None, timeout: float = 90):
        import tempfile

        self.workers, self.cores, self.memory, self.timeout = workers, cores, memory, timeout
        self.log_dir = pathlib.Path(log_dir or tempfile.mkdtemp(prefix="mentat-spark-"))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.procs = []
        self.url = None

    def _log(self, name):
        p = self.log_dir / f"{name}.log"
        return p.read_text(errors="replace") if p.exists() else ""

    def _wait(self, what, check):
        import time

        end = time.time() + self.timeout
        while time.time() < end:
            if check():
                return
            if any(p.poll() is not None for p in self.procs):
                raise RuntimeError(f"a Spark process exited while waiting for {what}: see {self.log_dir}")
            time.sleep(0.3)
        raise TimeoutError(f"{what} did not start within {self.timeout} s: see {self.log_dir}")

    def start(self) -> "StandaloneCluster":
        import socket
        import subprocess
        import sys

        import pyspark

        home = pathlib.Path(pyspark.__file__).resolve().parent
        env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_DAEMON_MEMORY": "256m",
               "SPARK_LOG_DIR": str(self.log_dir), "SPARK_WORKER_DIR": str(self.log_dir / "work"),
               "PYSPARK_PYTHON": sys.executable}
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url = f"spark://127.0.0.1:{port}"

        def run(name, *args):
            out = open(self.log_dir / f"{name}.log", "w")
            self.procs.append(subprocess.Popen([str(home / "bin" / "spark-class"), *args], env=env, stdout=out,
                                               stderr=subprocess.STDOUT, start_new_session=True))

        try:
            run("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                "--webui-port", "0")
            self._wait("the master", lambda: "I have been elected leader" in self._log("master"))
            for i in range(self.workers):
                run(f"worker{i}", "org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1",
                    "--cores", str(self.cores), "--memory", self.memory, "--webui-port", "0")
            self._wait(f"{self.workers} workers",
                       lambda: self._log("master").count("Registering worker") >= self.workers)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        import signal
        import subprocess

        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        self.procs = []

    def __enter__(self) -> "StandaloneCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
