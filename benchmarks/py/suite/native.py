"""The `native` scenario: runs the native driver (benchmarks/native, a Rust binary built by
benchmarks/native/build.sh; the suite builds nothing) against the mentat and SQLite stores the Python peers built at
one scale, after their worker processes have exited, and turns its JSON into result rows.

The binary links the libduckdb.so of npm's @duckdb/node-bindings-linux-x64 (DuckDB 1.5.6), which reads database
files up to storage version v1.5; Python's duckdb 2.0 writes its new files in its own, newer format. So the binary is
handed a copy of mentat's store written by COPY FROM DATABASE with STORAGE_VERSION 'v1.5.0' (the same tables, rows
and indexes, freshly written). SQLite's file is used as the peer left it."""
import json
import os
import pathlib
import shutil
import subprocess

import duckdb

from . import workload as W

BIN = pathlib.Path(os.environ.get("MENTAT_NATIVE_BENCH",
                                  W.ROOT / "benchmarks" / "native" / "target" / "release" / "mentat-native-bench"))
NATIVE_STORAGE_VERSION = "v1.5.0"  # the newest storage format libduckdb 1.5.6 reads
DRIVERS = {"mentat": "mentat_store.duckdb", "sqlite": "sqlite_eav.db"}


def copy_for_native(src, dst):
    """`src` (a mentat store left by the Python peer) copied to `dst` in a storage format libduckdb 1.5 reads."""
    for p in (dst, pathlib.Path(str(dst) + ".wal"), pathlib.Path(str(dst) + ".mentat.txlog")):
        if p.exists():
            p.unlink()
    con = duckdb.connect()
    try:
        con.execute(f"ATTACH '{src}' AS src")  # read-write: replays a WAL the peer's process left behind
        con.execute(f"ATTACH '{dst}' AS dst (STORAGE_VERSION '{NATIVE_STORAGE_VERSION}')")
        con.execute("COPY FROM DATABASE src TO dst")
        con.execute("DETACH dst")
        con.execute("DETACH src")
    finally:
        con.close()
    # transactions the peer's process logged but had not applied to the tables (storage/src/logfile.rs): the copy
    # carries the same log id in its meta table, so mentat in the native driver applies them when it opens the copy
    log = pathlib.Path(f"{src}.mentat.txlog")
    if log.exists():
        shutil.copy(log, f"{dst}.mentat.txlog")


def _st(s):
    """The binary's stats (null for no samples) as the suite's stats dict."""
    return {k: (float("nan") if s.get(k) is None else s[k]) for k in ("samples", "p50_ms", "p95_ms", "p99_ms", "ops_s")}


def run(res, scale, peers, ds, wd, opts):
    """Records the native driver's rows for `scale` (peer = the driver: mentat or sqlite, scenario "native"), or
    a skip with the reason."""
    want = [p for p in DRIVERS if p in peers]
    if not want:
        res.add(scale, "mentat", "native", status="skipped", reason="neither the mentat nor the sqlite peer ran")
        return
    if not BIN.exists():
        for p in want:
            res.add(scale, p, "native", status="skipped",
                    reason=f"{BIN.relative_to(W.ROOT) if BIN.is_relative_to(W.ROOT) else BIN} is not built "
                           "(bash benchmarks/native/build.sh)")
        return
    cmd = [str(BIN), "--data", str(ds.path), "--clients", opts.native_clients,
           "--update-time", str(opts.update_time), "--mixed-time", str(opts.mixed_time),
           "--ceiling-time", str(opts.sweep_time)]
    ran = []
    for p in want:
        store = pathlib.Path(wd) / DRIVERS[p]
        if not store.exists():
            res.add(scale, p, "native", status="skipped", reason=f"the {p} peer left no store at {store}")
            continue
        if p == "mentat":
            copy = pathlib.Path(wd) / "native_mentat.duckdb"
            try:
                copy_for_native(store, copy)
            except Exception as e:  # noqa: BLE001 - reported as the driver's error
                res.add(scale, p, "native", status="error", reason=f"copying the store for libduckdb 1.5: {e}"[:300])
                continue
            ext = os.environ.get("MENTAT_EXTENSION", str(W.ROOT / "build" / "mentat.duckdb_extension"))
            cmd += ["--mentat", str(copy), "--ext", ext]
            for setting in filter(None, getattr(opts, "native_duckdb_set", "").split(",")):
                cmd += ["--duckdb-set", setting]
            cmd += ["--mentat-write", getattr(opts, "native_mentat_write", "tx")]
        else:
            cmd += ["--sqlite", str(store)]
        ran.append(p)
    if not ran:
        return
    n_runs = 2 * len(opts.native_clients.split(",")) + 2
    timeout = 600 + len(ran) * (n_runs * max(opts.update_time, opts.sweep_time, opts.mixed_time) * 3)
    print(f"   native driver: {' '.join(cmd)}", flush=True)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, timeout=timeout)  # progress goes to our stderr
    try:
        doc = json.loads(r.stdout)
    except ValueError:
        for p in ran:
            res.add(scale, p, "native", status="error",
                    reason=f"the native driver exited with code {r.returncode} without its JSON")
        return
    for msg in doc.get("wrong", []):
        res.wrong.append(msg)
    fs = doc.get("fsync_floor")
    for p in ran:
        d = doc["drivers"].get(p, {})
        if d.get("status") != "ok":
            res.add(scale, p, "native", status="error", reason=d.get("reason", "no result")[:300])
            continue
        res.add(scale, p, "native", "engine", extra={"engine": d["engine"]})
        for key in ("ceiling", "ceiling_text", "ceiling_tf"):
            for n, s in d.get(key, {}).items():
                res.add(scale, p, "native", f"{key} clients={n}", st=_st(s))
        for n, u in d.get("update_heavy", {}).items():
            res.add(scale, p, "native", f"update_heavy all clients={n}", st=_st(u["all"]),
                    extra=dict(u["per_second"], checked=u["checked"]))
            res.add(scale, p, "native", f"update_heavy writes clients={n}", st=_st(u["writes"]))
            res.add(scale, p, "native", f"update_heavy reads clients={n}", st=_st(u["reads"]))
        if "single_tx" in d:
            res.add(scale, p, "native", "single_tx", st=_st(d["single_tx"]), extra={"checked": d["single_tx"]["checked"]})
            if isinstance(fs, dict) and "p50_ms" in fs:
                res.add(scale, p, "native", "single_tx fsync floor", st=_st(fs))
        if "write_mixed" in d:
            res.add(scale, p, "native", "write_mixed writer", st=_st(d["write_mixed"]["writer"]),
                    extra={"checked": d["write_mixed"]["checked"]})
            res.add(scale, p, "native", "write_mixed readers", st=_st(d["write_mixed"]["readers"]))
        for key, msg in d.get("errors", {}).items():
            res.add(scale, p, "native", key, status="WRONG" if msg.startswith("WRONG ANSWER") else "error",
                    reason=msg[:300])
