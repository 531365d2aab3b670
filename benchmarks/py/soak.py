"""The soak (issue 17): 8 readers and 1 writer on one mentat store for a long run, every answer checked.

The store is the scale suite's issue tracker (`benchmarks/py/suite`), loaded through `mentat_transact` with its
history applied. Eight reader threads cycle through q1, q2, q4, pull `[*]` and as_of (the suite's questions, checked
against the generator's truth by `suite.workload.check`); one writer alternates single-datom transactions (a label
added to an issue no reader checks) and 500-entity transactions, in turns: labels added to 500 such issues, then,
with `--writes steady` (the default), those 500 labels retracted again, so that the store's current state stays the
size it started at and memory that grows is memory kept, not data added; with `--writes growing`, 500 new users
instead (the store grows by about a million users in ten minutes at scale s, and memory with it). No write changes
a reader's answer, so every answer stays checkable while the writes run. At the end every acknowledged write is
checked in the store: every new user is there, every labelled issue holds every label written to it and not
retracted since, and no retracted label is left.

Printed per minute: reader calls, p50 and p99, writer transactions, resident memory. The run passes when no call
failed, no answer was wrong, no write was lost, each question's p99 stayed within 10x its own p50 in every minute, and
resident memory grew less than 10% after the first minute (the targets of issue 17). Exit status 1 otherwise.

`--driver native` runs the same readers and writer from native threads (`benchmarks/native`, built by its
`build.sh`): Python's readers wait for its interpreter lock, which DuckDB's Python client takes again after every
statement and chunk, and that wait was most of their tails (storage/README.md "The soak's tails come from the
client").

usage: python3 -m benchmarks.py.soak [--scale s] [--minutes 10] [--seconds N] [--writes steady|growing]
                                    [--driver python|native] [--out results.json]
"""
import argparse
import array
import json
import pathlib
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.py.suite import bench  # noqa: E402
from benchmarks.py.suite import native  # noqa: E402
from benchmarks.py.suite import workload as W  # noqa: E402
from benchmarks.py.suite.peers import mentat as M  # noqa: E402

READS = ["q1", "q2", "q4", "pull", "as_of"]
# the labels of a collection of issues: the check of every acknowledged write after the run
QLABELS = "[:find ?i ?n :in $ [?i ...] :where [?i :issue/label ?l] [?l :label/name ?n]]"


def malloc_mb():
    """glibc's allocator, summed over its arenas (mallinfo2): (MB in use by the program, MB held free inside the
    arenas, not returned to the system). Free memory growing while in-use memory stays is the allocator keeping
    what was freed, not a leak. (nan, nan) where glibc has no mallinfo2."""
    try:
        import ctypes

        class MallInfo2(ctypes.Structure):
            _fields_ = [(n, ctypes.c_size_t) for n in
                        ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                         "fordblks", "keepcost")]
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = MallInfo2
        m = libc.mallinfo2()
        return (m.uordblks + m.hblkhd) / 2**20, m.fordblks / 2**20
    except (OSError, AttributeError):
        return float("nan"), float("nan")


def rss_mb():
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Opts:
    """The few suite options the mentat peer reads."""
    native_clients = "1"


def run(scale="s", seconds=600, workdir=None, quiet=False, readers=8, data_root=None, writes_mode="steady",
        memory_limit=None, threads=None, writer_kind="mixed", driver="python", checkpoint_threshold=None):
    """Runs the soak; returns its report (a dict). `seconds` is the length of the read/write phase; `writes_mode`
    is "steady" (500-entity transactions label 500 issues, then retract those labels) or "growing" (they label 500
    issues, then add 500 new users). `memory_limit` (DuckDB's setting, e.g. "300MB"), set after the load, bounds
    DuckDB's buffer pool: what grows beyond it is memory kept outside DuckDB's cache. `threads` sets DuckDB's
    worker threads for the run (1: each statement runs on its caller's thread alone). `writer_kind` is "mixed" (the
    soak's writes), "single" (its single-datom transactions only) or "none" (readers alone): diagnostics of the
    readers' tails. `driver` "native" runs the readers and the writer from native threads instead (`run_native`).
    `checkpoint_threshold` sets DuckDB's setting of that name (the WAL size, e.g. "4MB", at which DuckDB
    checkpoints by itself; DuckDB's default of 16 MiB is raised to 64 MiB when mentat loads) for the run, with
    either driver."""
    assert writes_mode in ("steady", "growing"), writes_mode
    assert driver == "python" or (writes_mode == "steady" and writer_kind == "mixed"), \
        "the native driver runs the default soak (with DuckDB's settings or not) only"
    # DuckDB's settings for the run, into the report (`threads` names the reader threads further down)
    settings = {"threads": threads, "memory_limit": memory_limit, "checkpoint_threshold": checkpoint_threshold}
    if driver == "native" and not native.BIN.exists():
        raise SystemExit(f"soak: {native.BIN} is not built (bash benchmarks/native/build.sh)")
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, flush=True))
    workdir = pathlib.Path(workdir or tempfile.mkdtemp(prefix="mentat-soak-"))
    ds = W.Dataset(W.generate(scale, pathlib.Path(data_root or ROOT / "benchmarks" / "data")))
    peer = M.Mentat(ds, str(workdir), Opts())
    t0 = time.perf_counter()
    peer.load()
    peer.apply_history()
    peer.settle(ds)
    if memory_limit:
        peer.con.execute(f"SET memory_limit = '{memory_limit}'")
    if threads:
        peer.con.execute(f"SET threads = {int(threads)}")
    if checkpoint_threshold:
        peer.con.execute(f"SET checkpoint_threshold = '{checkpoint_threshold}'")
    say(f"soak: scale {scale} loaded in {time.perf_counter() - t0:.1f} s; {readers} readers, 1 writer, {seconds} s")
    minute = 60 if seconds >= 120 else max(seconds / 4, 1)
    if driver == "native":
        return run_native(peer, ds, workdir, seconds, minute, readers, say, threads, checkpoint_threshold, memory_limit)
    # as DuckDB holds them in this process (the native driver reads its own process's back the same way)
    settings["duckdb_settings"] = dict(zip(("threads", "memory_limit", "checkpoint_threshold"), peer.con.execute(
        "SELECT current_setting('threads'), current_setting('memory_limit'), "
        "current_setting('checkpoint_threshold')").fetchone()))
    protected = sorted(ds.protected_idxs())
    writable = ds.writable_idxs()
    labels = [r[1] for r in ds.labels]
    windows = int(np.ceil(seconds / minute))
    # latencies (ms) per reader, window and question, 8 bytes each (the soak's own memory stays flat)
    lat = [[{sc: array.array("d") for sc in READS} for _ in range(windows)] for _ in range(readers)]
    writes = [0] * windows
    rss = [0.0] * windows
    heap = [(0.0, 0.0)] * windows
    duck = [0.0] * windows  # DuckDB's own accounting of its memory (buffer pool and the rest), MB
    duck_tags = [{} for _ in range(windows)]  # the same by DuckDB's tag (BASE_TABLE, ART_INDEX, ...), MB
    index = [0.0] * windows  # mentat's entity index (`mentat_entity_index()`), MB
    probe = peer.con.cursor()
    errors = []
    # labels written and not retracted since, per issue index (issues whose labels were all retracted are dropped),
    # and which issues were ever labelled (a fixed-size array: the soak's own bookkeeping must not grow the process)
    written_labels = {}
    labelled = np.zeros(int(max(writable)) + 1, dtype=bool)
    # (issue index, label) pairs retracted and not written again since: the last 20,000 of them (kept bounded, so
    # that the soak's own bookkeeping does not grow the process it measures), and how many there were
    retracted = {}
    n_retracted = [0]
    new_users = []
    start = time.perf_counter()

    def window():
        return min(int((time.perf_counter() - start) / minute), windows - 1)

    def reader(i, stop):
        s = peer.session()
        args = {sc: bench.Arg(ds, sc, i, probes=(sc in ("q2", "as_of"))) for sc in READS}
        rnd = random.Random(100 + i)
        k = i
        while not stop.is_set():
            sc = READS[k % len(READS)]
            k += 1
            a = protected[rnd.randrange(len(protected))] if sc == "pull" else args[sc].next()
            # the previous answer is let go before the clock starts: freed by the assignment below, a q4's 10,000
            # rows were timed as part of the pull after it (0.33 ms of its 1.15 ms from one Python thread at s)
            raw = None
            t = time.perf_counter()
            raw = bench.call(s, sc, a)
            lat[i][window()][sc].append((time.perf_counter() - t) * 1000)
            bench.verify(s, sc, raw, ds, peer.name, a)

    def writer(stop):
        s = peer.session()
        rnd = random.Random(7)
        k = 0
        last_batch = []
        while not stop.is_set():
            if writer_kind == "none":
                stop.wait(0.05)
                continue
            if k % 2 == 0 or writer_kind == "single":
                idx = int(writable[rnd.randrange(len(writable))])
                label = labels[rnd.randrange(len(labels))]
                s.write_label(idx, label)
                labelled[idx] = True
                written_labels.setdefault(idx, set()).add(label)
                retracted.pop((idx, label), None)
            elif k % 4 == 1:
                # 500 issues at once, each given a label
                idxs = {int(writable[rnd.randrange(len(writable))]) for _ in range(500)}
                pairs = [(idx, labels[rnd.randrange(len(labels))]) for idx in idxs]
                edn = "[" + " ".join(f'[:db/add {int(peer.idx_e[i])} :issue/label [:label/name "{lb}"]]'
                                     for i, lb in pairs) + "]"
                s.c.execute("SELECT tx FROM mentat_transact(?)", [edn]).fetchall()
                for i, lb in pairs:
                    labelled[i] = True
                    written_labels.setdefault(i, set()).add(lb)
                    retracted.pop((i, lb), None)
                last_batch = pairs
            elif writes_mode == "steady":
                # the labels of the last 500-issue transaction retracted: the current state is back to its size
                edn = "[" + " ".join(f'[:db/retract {int(peer.idx_e[i])} :issue/label [:label/name "{lb}"]]'
                                     for i, lb in last_batch) + "]"
                s.c.execute("SELECT tx FROM mentat_transact(?)", [edn]).fetchall()
                for i, lb in last_batch:
                    held_now = written_labels.get(i)
                    if held_now is not None:
                        held_now.discard(lb)
                        if not held_now:
                            # an empty set per issue touched once would grow the process the soak measures
                            del written_labels[i]
                    retracted[(i, lb)] = True
                    if len(retracted) > 20_000:
                        retracted.pop(next(iter(retracted)))
                n_retracted[0] += len(last_batch)
            else:
                # 500 new users at once
                batch = [f"soak-{k}-{j}@x" for j in range(500)]
                edn = "[" + " ".join(f'{{:user/email "{e}" :user/name "soak {e}"}}' for e in batch) + "]"
                s.c.execute("SELECT tx FROM mentat_transact(?)", [edn]).fetchall()
                new_users.extend(batch)
            writes[window()] += 1
            k += 1

    stop = threading.Event()

    def guard(f, *a):
        try:
            f(*a, stop)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(f"{type(e).__name__}: {e}"[:500])
            stop.set()
    threads = [threading.Thread(target=guard, args=(reader, i), daemon=True) for i in range(readers)]
    threads.append(threading.Thread(target=guard, args=(writer,), daemon=True))
    for th in threads:
        th.start()
    w = 0
    while w < windows and not stop.is_set():
        stop.wait(max(0.0, start + (w + 1) * minute - time.perf_counter()))
        rss[w] = rss_mb()
        heap[w] = malloc_mb()
        if tracemalloc.is_tracing():
            say(f"  (python objects traced: {tracemalloc.get_traced_memory()[0] / 2**20:.1f} MB)")
        tags = probe.execute("SELECT tag, memory_usage_bytes FROM duckdb_memory() "
                             "WHERE memory_usage_bytes > 0").fetchall()
        duck_tags[w] = {t: round(b / 2**20, 1) for t, b in tags}
        duck[w] = sum(b for _, b in tags) / 2**20
        index[w] = (probe.execute("SELECT sum(bytes) FROM mentat_entity_index()").fetchall()[0][0] or 0) / 2**20
        w += 1
    stop.set()
    for th in threads:
        th.join(timeout=120)
    # every acknowledged write is in the store
    c = peer.session().c
    # in chunks of 1,000: one collection input of tens of thousands of values took minutes to compile
    found = 0
    for k in range(0, len(new_users), 1000):
        found += c.execute("SELECT count(*) FROM mentat_q('[:find ?e :in $ [?m ...] :where [?e :user/email ?m]]', "
                           "inputs := ?)", [json.dumps([new_users[k:k + 1000]])]).fetchall()[0][0]
    lost_users = len(new_users) - found
    # a query per 1,000 labelled issues (a query per issue took longer than the run itself at scale s)
    entity = {int(peer.idx_e[idx]): idx for idx in set(written_labels) | {i for i, _ in retracted}}
    held, es = {}, list(entity)
    for k in range(0, len(es), 1000):
        for e, n in c.execute(
                "FROM mentat_q(?, inputs := ?)", [QLABELS, f"[[{' '.join(map(str, es[k:k + 1000]))}]]"]).fetchall():
            held.setdefault(entity[e], set()).add(n)
    lost_labels = sum(len(want - held.get(idx, set())) for idx, want in written_labels.items())
    left_retracted = sum(1 for idx, lb in retracted if lb in held.get(idx, set()))
    report = {"driver": "python", "scale": scale, "seconds": seconds, "readers": readers, "window_s": minute, "windows": [],
              "errors": errors, "new_users": len(new_users), "lost_users": lost_users,
              "labelled_issues": int(labelled.sum()), "lost_labels": lost_labels, "writes_mode": writes_mode,
              "retracted_labels": n_retracted[0], "retracted_labels_checked": len(retracted), "retracted_labels_left": left_retracted,
              **settings}
    for w in range(windows):
        xs = [x for r in lat for ys in r[w].values() for x in ys]
        per = {}
        for sc in READS:
            ys = [x for r in lat for x in r[w][sc]]
            if ys:
                per[sc] = {"reads": len(ys), "p50_ms": round(bench.pct(ys, 50), 3), "p99_ms": round(bench.pct(ys, 99), 3)}
        report["windows"].append({
            "window": w, "reads": len(xs), "p50_ms": round(bench.pct(xs, 50), 3) if xs else None,
            "p99_ms": round(bench.pct(xs, 99), 3) if xs else None, "writes": writes[w], "rss_mb": round(rss[w], 1),
            "duckdb_mb": round(duck[w], 1), "duckdb_mb_by_tag": duck_tags[w], "entity_index_mb": round(index[w], 1),
            "malloc_in_use_mb": round(heap[w][0], 1), "malloc_free_mb": round(heap[w][1], 1), "per_question": per})
    judge(report, say)
    peer.close()
    return report


def run_native(peer, ds, workdir, seconds, minute, readers, say, threads=None, checkpoint_threshold=None,
               memory_limit=None):
    """The soak's readers and writer from native threads: the scale suite's native driver (`benchmarks/native`,
    `--soak`, built by `bash benchmarks/native/build.sh`) on a copy of the store `peer` built, in the storage
    format its libduckdb reads. Python's readers share one interpreter lock, which DuckDB's Python client takes
    again after every statement, chunk and check for a signal; perf put about half of the Python readers' time
    waiting for it (storage/README.md "The soak's tails come from the client"). Here the plan holds every answer's
    truth from the same generator, the binary asks and checks, and `judge` applies the same rules to its report
    (windows of `minute` seconds; `threads`, `checkpoint_threshold` and `memory_limit`, when given, are DuckDB's
    settings of those names in the native process)."""
    probes = []
    for p in ds.truth["probe_users"]:
        issues = ds.assigned(p["email"])
        probes.append({"email": p["email"], "final": [[i["title"], i["final_state"]] for i in issues],
                       "initial": [[i["title"], i["initial_state"]] for i in issues]})
    pull = []
    for idx in sorted(ds.protected_idxs()):
        i = ds.issue(idx)
        pull.append({"e": int(peer.idx_e[idx]), "title": i["title"], "state": i["state"], "priority": i["priority"],
                     "labels": len(i["labels"])})
    q4 = ds.truth["open_priority_ge_4"]["final"]
    store = pathlib.Path(workdir) / "native_soak.duckdb"
    plan = {"db": str(store), "ext": str(M.common.EXT), "seconds": seconds, "window_s": minute, "readers": readers,
            "queries": {"q1": W.Q1, "q2": W.Q2, "q4": W.Q4, "labels": QLABELS},
            "users": [[e, n] for _, e, n in ds.users], "probes": probes, "as_of_tx": int(peer.last_initial_tx),
            "q4_min": 4, "q4_count": q4, "pull": pull, "threads": threads,
            "checkpoint_threshold": checkpoint_threshold, "memory_limit": memory_limit,
            "writable": [int(peer.idx_e[i]) for i in ds.writable_idxs()], "labels": [r[1] for r in ds.labels]}
    # the copy is made through the peer's own connection: mentat's connections keep the database open in this
    # process for as long as it lives, so the file cannot be attached a second time here; the log is applied
    # first, so the copy's tables hold every transaction
    c = peer.con
    c.execute("SELECT * FROM mentat_sync()").fetchall()
    catalog = c.execute("SELECT current_database()").fetchall()[0][0]
    for old in (store, pathlib.Path(f"{store}.wal"), pathlib.Path(f"{store}.mentat.txlog")):
        old.unlink(missing_ok=True)
    c.execute(f"ATTACH '{store}' AS native_copy (STORAGE_VERSION '{native.NATIVE_STORAGE_VERSION}')")
    c.execute(f'COPY FROM DATABASE "{catalog}" TO native_copy')
    c.execute("DETACH native_copy")
    log = pathlib.Path(f"{peer.db}.mentat.txlog")
    if log.exists():
        shutil.copy(log, f"{store}.mentat.txlog")
    plan_path = pathlib.Path(workdir) / "native_soak_plan.json"
    plan_path.write_text(json.dumps(plan))
    say(f"soak: the native driver on a copy of the store ({native.BIN} --soak {plan_path})")
    r = subprocess.run([str(native.BIN), "--soak", str(plan_path)], stdout=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise SystemExit(f"soak: the native driver exited with code {r.returncode}")
    report = json.loads(r.stdout)
    report.update({"driver": "native", "scale": ds.truth["scale"], "seconds": seconds, "readers": readers,
                   "window_s": minute, "writes_mode": "steady", "threads": threads,
                   "checkpoint_threshold": checkpoint_threshold, "memory_limit": memory_limit})
    for row in report["windows"]:
        for k in ("p50_ms", "p99_ms", "rss_mb", "duckdb_mb", "entity_index_mb"):
            row[k] = round(row[k], 3) if row[k] is not None else None
        for v in row["per_question"].values():
            v["p50_ms"], v["p99_ms"] = round(v["p50_ms"], 3), round(v["p99_ms"], 3)
    judge(report, say)
    return report


def judge(report, say):
    """Prints a soak report's windows and its verdict, and sets `report["passed"]`: no error, no write lost, no
    retracted label left, each question's p99 within 10x its own p50 in every window, and resident memory grown by
    less than 10% from the end of the first window to the end of the last. Shared by both drivers."""
    rows = report["windows"]
    ok = (not report["errors"] and report["lost_users"] == 0 and report["lost_labels"] == 0
          and report["retracted_labels_left"] == 0)
    for row in rows:
        # the tail of each question against its own median: the mix's p99 over its p50 is mostly the spread of
        # the questions' costs (pull [*] and as_of cost 5 to 15 times q1), not a stall
        worst = max((v["p99_ms"] / v["p50_ms"] for v in row["per_question"].values() if v["p50_ms"]), default=0.0)
        row["worst_question_p99_over_p50"] = round(worst, 2)
        p50, p99 = row["p50_ms"] or 0.0, row["p99_ms"] or 0.0
        heap = (f"; malloc in use {row['malloc_in_use_mb']:7.1f} MB, free in its arenas {row['malloc_free_mb']:7.1f} MB"
                if "malloc_in_use_mb" in row else "")
        say(f"  {row['window'] + 1:>3}: {row['reads']:>7} reads p50 {p50:7.2f} ms p99 {p99:8.2f} ms "
            f"({p99 / p50 if p50 else 0:5.1f}x; per question at most {worst:4.1f}x), {row['writes']:>5} writes, "
            f"rss {row['rss_mb']:7.1f} MB (DuckDB {row['duckdb_mb']:7.1f} MB, entity index "
            f"{row['entity_index_mb']:6.1f} MB{heap})")
        if row["reads"] and worst > 10:
            ok = False
    if rows:
        say("  per question, last window: " + ", ".join(
            f"{sc} p50 {v['p50_ms']:.1f} p99 {v['p99_ms']:.1f} ms" for sc, v in rows[-1]["per_question"].items()))
    rss = [r["rss_mb"] for r in rows] or [0.0]
    duck = [r["duckdb_mb"] for r in rows] or [0.0]
    growth = (rss[-1] - rss[0]) / rss[0] if rss[0] else 0.0
    report["rss_growth_after_first_window"] = round(growth, 4)
    # what is not DuckDB's: mentat's caches and indexes, the client, the allocator's slack
    rest = [r - d for r, d in zip(rss, duck)]
    report["rss_outside_duckdb_growth_after_first_window"] = round((rest[-1] - rest[0]) / rest[0], 4) if rest[0] else 0.0
    report["duckdb_mb_growth_after_first_window"] = round((duck[-1] - duck[0]) / duck[0], 4) if duck[0] else 0.0
    ok = ok and growth < 0.10
    report["passed"] = ok
    errors = report["errors"]
    say(f"soak ({report['driver']}): {'PASSED' if ok else 'FAILED'}: {sum(r['reads'] for r in rows)} reads, "
        f"{sum(r['writes'] for r in rows)} writes ({report['new_users']} new users, {report['labelled_issues']} issues "
        f"labelled, {report['retracted_labels']} labels retracted), {len(errors)} errors, "
        f"{report['lost_users'] + report['lost_labels']} writes lost, {report['retracted_labels_left']} retracted labels "
        f"left, rss growth {growth:.1%} after the first window (DuckDB's own "
        f"{report['duckdb_mb_growth_after_first_window']:.1%}, the rest {report['rss_outside_duckdb_growth_after_first_window']:.1%})"
        f"{'; ' + errors[0] if errors else ''}")
    return ok


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", default="s")
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--seconds", type=float, default=None, help="overrides --minutes")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--writes", default="steady", choices=["steady", "growing"],
                    help="steady: 500-entity transactions label issues, then retract the labels (the store keeps its "
                         "size); growing: they label issues, then add 500 new users")
    ap.add_argument("--memory-limit", default=None, help="DuckDB's memory_limit during the run, e.g. 300MB")
    ap.add_argument("--threads", type=int, default=None,
                    help="DuckDB's threads setting during the run (default: DuckDB's own, one per core)")
    ap.add_argument("--checkpoint-threshold", default=None,
                    help="DuckDB's checkpoint_threshold during the run, e.g. 4MB (default: 64 MiB, which "
                         "mentat sets when it loads)")
    ap.add_argument("--writer", default="mixed", choices=["mixed", "single", "none"],
                    help="mixed: the soak's writes; single: single-datom transactions only; none: readers alone "
                         "(diagnostics of the readers' tails)")
    ap.add_argument("--driver", default="python", choices=["python", "native"],
                    help="python: reader and writer threads in this process; native: the same from native threads "
                         "(benchmarks/native, built by its build.sh), on a copy of the store")
    ap.add_argument("--out", default=None, help="write the report as JSON here")
    ap.add_argument("--switch-interval", type=float, default=None,
                    help="Python's GIL switch interval in ms during the run (default: Python's own, 5 ms)")
    o = ap.parse_args(argv)
    if o.switch_interval is not None:
        sys.setswitchinterval(o.switch_interval / 1000)
    seconds = o.seconds if o.seconds is not None else o.minutes * 60
    report = run(o.scale, seconds, o.workdir, writes_mode=o.writes, memory_limit=o.memory_limit, threads=o.threads,
                 writer_kind=o.writer, driver=o.driver, checkpoint_threshold=o.checkpoint_threshold)
    if o.out:
        pathlib.Path(o.out).write_text(json.dumps(report, indent=1))
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
