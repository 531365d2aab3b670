"""The scale suite: mentat and its peers on the issue-tracker workload, every answer checked against the truth.

usage: python3 -m benchmarks.py.suite.run --scales xs,s --scenarios all --peers all --out benchmarks/results/DATE/
       (or python3 benchmarks/py/suite/run.py ...); --quick for a short smoke run. See benchmarks/README.md.
"""
import argparse
import datetime
import gc
import json
import resource
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

if __package__ in (None, ""):  # run as a script
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3]))
    __package__ = "benchmarks.py.suite"

from . import bench, native, report  # noqa: E402
from . import workload as W  # noqa: E402
from .peers.base import Unsupported  # noqa: E402

ROOT = W.ROOT
ALL_PEERS = ["mentat", "duckdb_sql", "sqlite", "postgres", "datascript", "cozo", "datalevin"]


class Results:
    def __init__(self):
        self.rows = []
        self.wrong = []
        self.notes = []

    def add(self, scale, peer, scenario, variant="", st=None, status="ok", reason="", extra=None):
        row = {"scale": scale, "peer": peer, "scenario": scenario, "variant": variant, "status": status,
               "reason": reason, "samples": "", "p50_ms": "", "p95_ms": "", "p99_ms": "", "ops_s": "",
               "extra": json.dumps(extra) if extra else ""}
        if st:
            row.update({k: st[k] for k in ("samples", "p50_ms", "p95_ms", "p99_ms", "ops_s")})
        self.rows.append(row)
        shown = (f"p50 {st['p50_ms']:.3f} ms p99 {st['p99_ms']:.3f} ms {st['ops_s']:.1f} ops/s n={st['samples']}"
                 if st else "") + (f" {extra}" if extra and not st else "")
        print(f"[{scale}] {peer:<11} {scenario:<17} {variant:<12} {status:<7} {shown} {reason}", flush=True)


def snapshot_extension(workdir):
    """A private copy of the built extension, so a rebuild during the run cannot change what is measured."""
    src = pathlib.Path(os.environ.get("MENTAT_EXTENSION", ROOT / "build" / "mentat.duckdb_extension"))
    if not src.exists():
        raise SystemExit(f"{src} is missing: run scripts/setup.sh first")
    dst = pathlib.Path(workdir) / "ext" / "mentat.duckdb_extension"
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(src, dst)
    os.environ["MENTAT_EXTENSION"] = str(dst)
    return dst


def make_peer(name, ds, workdir, opts, mentat):
    from .peers import mentat as M
    if name == "mentat":
        return M.Mentat(ds, workdir, opts)
    if name == "duckdb_sql":
        if mentat is None:
            from .peers.base import Unsupported
            raise Unsupported("duckdb_sql needs the mentat peer (it reads mentat's tables)")
        return M.DuckSQL(ds, workdir, opts, mentat)
    if name == "sqlite":
        from .peers.sqlite_peer import SQLitePeer
        return SQLitePeer(ds, workdir, opts)
    if name == "postgres":
        from .peers.pg_peer import PostgresPeer
        return PostgresPeer(ds, workdir, opts)
    if name == "datascript":
        from .peers.datascript_peer import DataScriptPeer
        return DataScriptPeer(ds, workdir, opts)
    if name == "cozo":
        from .peers.cozo_peer import CozoPeer
        return CozoPeer(ds, workdir, opts)
    if name == "datalevin":
        from .peers.datalevin_peer import DatalevinPeer
        return DatalevinPeer(ds, workdir, opts)
    raise SystemExit(f"unknown peer {name}")


def guarded(res, scale, peer, scenario, fn, variant=""):
    """Runs fn(); records a wrong answer (the run will fail) or an error (a skip with the reason)."""
    try:
        return fn()
    except W.WrongAnswer as e:
        res.wrong.append(str(e))
        res.add(scale, peer, scenario, variant, status="WRONG", reason=str(e))
    except Unsupported as e:
        res.add(scale, peer, scenario, variant, status="skipped", reason=str(e))
    except Exception as e:  # noqa: BLE001 - a peer's failure is a reported result
        msg = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}"
        if os.environ.get("SUITE_TRACEBACK"):
            traceback.print_exc()
        res.add(scale, peer, scenario, variant, status="error", reason=msg)
    return None


def reads(res, scale, peer, ds, opts, scenarios):
    sess = None
    for sc in W.READ_SCENARIOS:
        if sc not in scenarios:
            continue
        why = peer.unsupported(sc)
        if why:
            res.add(scale, peer.name, sc, status="skipped", reason=why)
            continue
        if sess is None:
            sess = peer.session()
        st = guarded(res, scale, peer.name, sc, lambda: bench.single(sess, sc, ds, peer.name, opts))
        if st:
            res.add(scale, peer.name, sc, st=st)


def sweep(res, scale, peer, ds, opts):
    why = peer.unsupported("concurrency_sweep")
    if why:
        res.add(scale, peer.name, "concurrency_sweep", status="skipped", reason=why)
        return
    mix = ["q1", "q2"] + ([] if peer.unsupported("pull") else ["pull"])
    out = guarded(res, scale, peer.name, "concurrency_sweep", lambda: bench.sweep(peer, ds, opts, opts.clients, mix))
    for n, st in (out or {}).items():
        res.add(scale, peer.name, "concurrency_sweep", f"clients={n}", st=st,
                reason="" if "pull" in mix else "mix q1/q2 only: " + peer.unsupported("pull"))
    if not peer.unsupported("floor"):
        # the same client counts sending only `SELECT 1`: the ceiling any statement-per-call client can reach
        out = guarded(res, scale, peer.name, "floor_sweep", lambda: bench.sweep(peer, ds, opts, opts.clients, ["floor"]))
        for n, st in (out or {}).items():
            res.add(scale, peer.name, "floor_sweep", f"clients={n}", st=st)


def cold(res, scale, peer, ds, opts):
    why = peer.unsupported("cold_vs_warm")
    if why:
        res.add(scale, peer.name, "cold_vs_warm", status="skipped", reason=why)
        return

    def go():
        spec = peer.cold_spec()
        spec["samples"] = 30
        env = dict(os.environ)
        r = subprocess.run([sys.executable, str(pathlib.Path(__file__).with_name("coldstart.py")), json.dumps(spec)],
                           capture_output=True, text=True, timeout=600, env=env)
        line = [l for l in r.stdout.splitlines() if l.startswith("{")]
        if r.returncode != 0 or not line:
            raise RuntimeError(f"child failed ({r.returncode}): {r.stderr.strip()[-300:]}")
        out = json.loads(line[-1])
        want = [p["name"] for p in ds.truth["probe_users"] if p["email"] == spec["email"]]
        if out["names"] != want or out["names_warm"] != want:
            raise W.WrongAnswer(f"WRONG ANSWER: {peer.name} cold_vs_warm: q1 gave {out['names']}, expected {want}")
        return out
    out = guarded(res, scale, peer.name, "cold_vs_warm", go)
    if out:
        res.add(scale, peer.name, "cold_vs_warm", "first_call",
                st={"samples": 1, "p50_ms": out["first_ms"], "p95_ms": out["first_ms"], "p99_ms": out["first_ms"],
                    "ops_s": 1000 / out["first_ms"]}, extra={"open_ms": round(out["open_ms"], 2)})
        res.add(scale, peer.name, "cold_vs_warm", "warm",
                st={"samples": 30, "p50_ms": out["warm_p50_ms"], "p95_ms": out["warm_p99_ms"],
                    "p99_ms": out["warm_p99_ms"], "ops_s": 1000 / out["warm_p50_ms"]})


def attempt(res, scale, peer, name, fn, why=None):
    """fn()'s output for scenario `name`, or None: a skipped row when the peer cannot run it (`why`, or the peer's
    own reason), an error row when it failed (see `guarded`)."""
    why = why or peer.unsupported(name)
    if why:
        res.add(scale, peer.name, name, status="skipped", reason=why)
        return None
    return guarded(res, scale, peer.name, name, fn)


def writes(res, scale, peer, ds, opts, scenarios):
    if "write_mixed" in scenarios:
        out = attempt(res, scale, peer, "write_mixed", lambda: bench.write_mixed(peer, ds, opts))
        if out:
            res.add(scale, peer.name, "write_mixed", "writer", st=out["writer"])
            res.add(scale, peer.name, "write_mixed", "readers", st=out["readers"])
    if "update_heavy" in scenarios:
        # 64 clients keep the variant names of earlier runs; 1 and 8 clients are variants "... clients=N"
        for n in (64, 1, 8) if not peer.unsupported("update_heavy") else (64,):
            out = attempt(res, scale, peer, "update_heavy", lambda n=n: bench.update_heavy(peer, ds, opts, n_clients=n))
            if out:
                tag = "" if n == 64 else f" clients={n}"
                res.add(scale, peer.name, "update_heavy", "all" + tag, st=out["all"], extra=out["per_second"])
                res.add(scale, peer.name, "update_heavy", "writes" + tag, st=out["writes"])
                res.add(scale, peer.name, "update_heavy", "reads" + tag, st=out["reads"])
        # the same Python client's ceilings at 64 threads: `SELECT 1` sent as text (planned at every call) and as
        # `EXECUTE` of a statement prepared once per connection (how the mentat peer sends its writes)
        probe = None if peer.unsupported("update_heavy") else peer.session()  # one session: what its client sends
        for sc in ("floor", "floor_prepared"):
            if probe is not None and hasattr(probe, sc):
                out = guarded(res, scale, peer.name, "update_heavy", lambda sc=sc: bench.sweep(peer, ds, opts, [64], [sc]))
                if out:
                    res.add(scale, peer.name, "update_heavy", f"ceiling {sc} clients=64", st=out[64])
    if "single_tx" in scenarios:
        out = attempt(res, scale, peer, "single_tx", lambda: bench.single_tx(peer, ds, opts))
        if out:
            res.add(scale, peer.name, "single_tx", st=out)
            res.add(scale, peer.name, "single_tx", "fsync floor", st=bench.fsync_floor(opts.workdir))
    if "transact_many" in scenarios:
        only = None if peer.name == "mentat" else "no call that hands over many separate transactions at once"
        out = attempt(res, scale, peer, "transact_many", lambda: bench.transact_many(peer, ds, opts), why=only)
        if out:
            res.add(scale, peer.name, "transact_many", st=out)


def run_group(res, scale, group, scenarios, opts):
    """One peer group at one scale, in this process: mentat (with duckdb_sql, which reads mentat's tables) or one
    other peer. Loads, applies the history, runs the read scenarios, the sweep, cold_vs_warm, then the writes."""
    ds = W.Dataset(W.generate(scale, opts.data_root))
    wd = pathlib.Path(opts.workdir) / scale
    mentat = None
    live = []
    for pn in group:
        t0 = time.perf_counter()
        peer = guarded(res, scale, pn, "setup", lambda: make_peer(pn, ds, str(wd), opts, mentat))
        if peer is None:
            continue
        ceiling = getattr(peer, "max_scale", None)
        if ceiling and W_SCALES.index(scale) > W_SCALES.index(ceiling):
            res.add(scale, pn, "setup", status="skipped", reason=f"scale ceiling {ceiling}: {peer.ceiling_reason}")
            peer.close()
            continue
        why = peer.unsupported("bulk_load")
        if why:
            res.add(scale, pn, "bulk_load", status="skipped", reason=why)
        else:
            m = guarded(res, scale, pn, "bulk_load", peer.load)
            if m is None:
                peer.close()
                continue
            res.add(scale, pn, "bulk_load", st={"samples": 1, "p50_ms": m["seconds"] * 1000,
                                                "p95_ms": m["seconds"] * 1000, "p99_ms": m["seconds"] * 1000,
                                                "ops_s": m["datoms"] / m["seconds"]},
                    extra={"datoms": m["datoms"], "bytes": m["bytes"], "method": m["method"]})
        if guarded(res, scale, pn, "history", lambda: peer.apply_history() or True) is None:
            peer.close()
            continue
        if pn == "mentat":
            mentat = peer
        print(f"   {pn} ready in {time.perf_counter() - t0:.1f} s", flush=True)
        live.append(peer)
    # The truth and the generator's rows (millions of Python objects at m) are built now and frozen out of the
    # garbage collector's reach, so that its passes during the timed calls do not walk them (for every peer alike)
    ds.user_name(ds.emails()[0])
    gc.collect()
    gc.freeze()
    for peer in live:
        guarded(res, scale, peer.name, "settle", lambda: peer.settle(ds) or True)
        reads(res, scale, peer, ds, opts, scenarios)
    for peer in live:
        if "concurrency_sweep" in scenarios:
            sweep(res, scale, peer, ds, opts)
        if "cold_vs_warm" in scenarios:
            cold(res, scale, peer, ds, opts)
    # peak resident memory of this worker process after the reads (loads, caches and indexes included)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    for peer in live:
        res.add(scale, peer.name, "memory", "peak_rss_after_reads", status="ok",
                extra={"peak_rss_mb": round(rss_mb), "process": "+".join(p.name for p in live)})
    for peer in live:
        writes(res, scale, peer, ds, opts, scenarios)
    for peer in reversed(live):
        peer.close()


def groups_of(peers):
    """The peer groups, each run in a process of its own: duckdb_sql shares mentat's (it reads mentat's tables)."""
    return [[p] + (["duckdb_sql"] if p == "mentat" and "duckdb_sql" in peers else [])
            for p in peers if p != "duckdb_sql"] + ([["duckdb_sql"]] if "duckdb_sql" in peers
                                                     and "mentat" not in peers else [])


def run_scale(res, scale, peers, scenarios, opts):
    """Every peer group at one scale, each in a fresh worker process, one after the other. A fresh process per
    group keeps what one engine leaves behind in a process (a JVM and its threads, caches, allocator state) from
    slowing the next: measured here, a run sharing one process made DuckDB's q4 at s 20x slower after the other
    peers had run at xs."""
    ds = W.Dataset(W.generate(scale, opts.data_root))
    wd = pathlib.Path(opts.workdir) / scale
    shutil.rmtree(wd, ignore_errors=True)
    wd.mkdir(parents=True)
    print(f"== scale {scale}: {ds.truth['datoms']['initial']:,} initial datoms, {wd}", flush=True)
    for group in groups_of(peers):
        out = wd / f"worker-{group[0]}.json"
        cmd = [sys.executable, "-m", "benchmarks.py.suite.run", "--worker", ",".join(group), "--scales", scale,
               "--scenarios", ",".join(scenarios), "--workdir", str(opts.workdir), "--data-root", str(opts.data_root),
               "--worker-out", str(out), "--samples", str(opts.samples), "--warmup", str(opts.warmup),
               "--min-time", str(opts.min_time), "--max-time", str(opts.max_time),
               "--sweep-time", str(opts.sweep_time), "--mixed-time", str(opts.mixed_time),
               "--update-time", str(opts.update_time), "--clients", ",".join(map(str, opts.clients))]
        rc = subprocess.run(cmd, cwd=ROOT).returncode
        if not out.exists():
            res.add(scale, group[0], "setup", status="error", reason=f"the worker process exited with code {rc}")
            continue
        got = json.loads(out.read_text())
        res.rows += got["rows"]
        res.wrong += got["wrong"]
        res.notes += got["notes"]
    if "native" in scenarios:
        # the native driver, after every peer's worker has exited, against the stores they left in `wd`
        try:
            native.run(res, scale, peers, ds, wd, opts)
        except Exception as e:  # noqa: BLE001 - reported as the scenario's error, the run goes on
            if os.environ.get("SUITE_TRACEBACK"):
                traceback.print_exc()
            res.add(scale, "mentat", "native", status="error", reason=f"{type(e).__name__}: {e}"[:300])


def worker(opts, scenarios):
    """`--worker GROUP`: runs one group at one scale and writes its results as JSON to `--worker-out`."""
    res = Results()
    group = opts.worker.split(",")
    try:
        run_group(res, opts.scales, group, scenarios, opts)
    except BaseException as e:  # noqa: BLE001 - reported as the group's error, the run goes on
        traceback.print_exc()
        res.add(opts.scales, group[0], "setup", status="error", reason=f"{type(e).__name__}: {e}"[:300])
    finally:
        pathlib.Path(opts.worker_out).write_text(json.dumps({"rows": res.rows, "wrong": res.wrong,
                                                             "notes": res.notes}))
        pg = sys.modules.get(f"{__package__}.peers.pg_peer")
        if pg is not None and pg._server.get("stop"):
            pg._server["stop"]()  # os._exit below skips atexit
        sys.stdout.flush()
        os._exit(0)  # a JVM started by Datalevin's JPype can hang the interpreter's normal exit


W_SCALES = ["xs", "s", "m", "l"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scales", default="xs,s")
    ap.add_argument("--scenarios", default="all", help=f"comma list of {','.join(W.ALL_SCENARIOS)} or all")
    ap.add_argument("--peers", default="all", help=f"comma list of {','.join(ALL_PEERS)} or all")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / datetime.date.today().isoformat()))
    ap.add_argument("--data-root", default=str(ROOT / "benchmarks" / "data"))
    ap.add_argument("--workdir", default=None, help="stores of the peers (default: a temporary directory)")
    ap.add_argument("--quick", action="store_true", help="short durations: checks answers, times mean little")
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=2.0)
    ap.add_argument("--max-time", type=float, default=10.0)
    ap.add_argument("--sweep-time", type=float, default=4.0)
    ap.add_argument("--mixed-time", type=float, default=10.0)
    ap.add_argument("--update-time", type=float, default=15.0)
    ap.add_argument("--clients", default="1,2,4,8,32")
    ap.add_argument("--native-clients", default="1,8,64", help="client threads of the native driver's runs")
    ap.add_argument("--native-duckdb-set", default="preserve_insertion_order=false,threads=1",
                    help="comma list of NAME=VALUE DuckDB settings for mentat's database in the native driver "
                         "(default: what the README advises for many writer threads; '' for none)")
    ap.add_argument("--native-mentat-write", default="tx", choices=["tx", "transact"],
                    help="the native driver's write statement: mentat_tx (scalar, planned once) or mentat_transact")
    ap.add_argument("--worker", help=argparse.SUPPRESS)  # internal: one peer group, see run_scale
    ap.add_argument("--worker-out", help=argparse.SUPPRESS)
    opts = ap.parse_args(argv)
    if opts.quick:
        opts.samples, opts.warmup, opts.min_time, opts.max_time = 5, 1, 0.0, 2.0
        opts.sweep_time, opts.mixed_time, opts.update_time = 0.5, 1.5, 2.0
    opts.clients = [int(x) for x in opts.clients.split(",")]
    scenarios = W.ALL_SCENARIOS if opts.scenarios == "all" else opts.scenarios.split(",")
    peers = ALL_PEERS if opts.peers == "all" else opts.peers.split(",")
    for s in scenarios:
        if s not in W.ALL_SCENARIOS:
            ap.error(f"unknown scenario {s}")
    if opts.worker:
        worker(opts, scenarios)
    own_tmp = opts.workdir is None
    opts.workdir = opts.workdir or tempfile.mkdtemp(prefix="mentat-suite-")
    ext = snapshot_extension(opts.workdir)  # the commit below is the tree's when the extension was copied
    git0 = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty0 = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                                 capture_output=True, text=True).stdout.strip())
    out = pathlib.Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    res = Results()
    load0 = [round(x, 2) for x in os.getloadavg()]
    t0 = time.time()
    for scale in opts.scales.split(","):
        run_scale(res, scale, peers, scenarios, opts)
    meta = {"started": datetime.datetime.fromtimestamp(t0).isoformat(timespec="seconds"),
            "seconds": round(time.time() - t0), "scales": opts.scales, "quick": opts.quick,
            "extension": str(ext), "argv": sys.argv[1:] if argv is None else argv,
            "git": git0, "git_dirty": dirty0,
            "cpus": os.cpu_count(), "loadavg_end": [round(x, 2) for x in os.getloadavg()], "loadavg_start": load0}
    report.write(out, res, meta, opts)
    if own_tmp:
        shutil.rmtree(opts.workdir, ignore_errors=True)
    print(f"results in {out}", flush=True)
    if res.wrong:
        print("\nTHE RUN FAILED: wrong answers\n  " + "\n  ".join(res.wrong), file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # peers' pools and JVMs do not get to hold the exit
