"""Timing drivers: single-client samples, client sweeps, the mixed writer/readers run and the update-heavy run.
Every answer is checked against the truth outside the timed span; a wrong answer raises WrongAnswer. In the runs of
several clients (sweep, write_mixed, update_heavy) the answers are kept and checked after the run, for every peer
alike: a check in the client loop holds Python's GIL for as long as some calls take, so it would measure the
checker beside the peer (measured at s: mentat's sweep 3,382 ops/s at 2 clients checking in the loop, 3,763 without)."""
import random
import threading
import time

import numpy as np

from . import workload as W


def pct(xs, q):
    if not len(xs):
        return float("nan")
    return float(np.percentile(np.asarray(xs, dtype=np.float64), q))


def stats(lat_ms, elapsed=None):
    n = len(lat_ms)
    tot = elapsed if elapsed else (sum(lat_ms) / 1000.0)
    return {"samples": n, "p50_ms": pct(lat_ms, 50), "p95_ms": pct(lat_ms, 95), "p99_ms": pct(lat_ms, 99),
            "ops_s": (n / tot) if tot else float("nan")}


class Arg:
    """Arguments for a scenario, drawn uniformly (seeded) over every user or every issue of the scale: no two calls
    are likely to ask the same thing, so no answer cache can carry a figure. `probes=True` keeps to the probe users
    (the readers that run while writers change unprotected issues)."""

    def __init__(self, ds, scenario, offset=0, probes=False):
        self.rnd = random.Random(9000 + offset)
        self.scenario = scenario
        if probes:
            self.pool = [p["email"] for p in ds.truth["probe_users"]]
        elif scenario in ("q1", "q2", "as_of", "input_bindings"):
            self.pool = ds.emails()
        elif scenario == "pull":
            # a range, not a list: a list of 1.3 million ints at m was built by every client as its thread started,
            # inside the timed window and holding the interpreter lock (0.1 to 1.3 s sleeps for the other clients)
            self.pool = range(ds.truth["entities"]["issues"])
        else:
            self.pool = [None]

    def next(self):
        if self.scenario == "input_bindings":
            return self.rnd.sample(self.pool, min(100, len(self.pool)))
        return self.pool[self.rnd.randrange(len(self.pool))]


def call(sess, scenario, arg):
    """Runs one question; returns the raw answer."""
    if scenario in ("q3", "q4", "since", "floor", "floor_prepared"):
        return getattr(sess, scenario)()
    return getattr(sess, scenario)(arg)


def verify(sess, scenario, raw, ds, peer, arg):
    if scenario == "pull":
        raw = sess.norm_pull(raw)
    W.check(scenario, raw, ds, peer, arg)


def single(sess, scenario, ds, peer, opts):
    """Warm-up, then samples until >= min_samples and >= min_time, or max_time has passed (at least 3)."""
    args = Arg(ds, scenario)
    for _ in range(opts.warmup):
        a = args.next()
        verify(sess, scenario, call(sess, scenario, a), ds, peer, a)
    lat = []
    t_end_min = time.perf_counter() + opts.min_time
    t_end_max = time.perf_counter() + opts.max_time
    while True:
        a = args.next()
        t = time.perf_counter()
        raw = call(sess, scenario, a)
        lat.append((time.perf_counter() - t) * 1000)
        verify(sess, scenario, raw, ds, peer, a)
        now = time.perf_counter()
        if (len(lat) >= opts.samples and now >= t_end_min) or (now >= t_end_max and len(lat) >= 3):
            break
    return stats(lat)


def _run_threads(n, target, duration):
    stop = threading.Event()
    errors = []

    def wrap(i):
        try:
            target(i, stop)
        except BaseException as e:  # noqa: BLE001 - carried to the caller
            errors.append(e)
            stop.set()
    ths = [threading.Thread(target=wrap, args=(i,), daemon=True) for i in range(n)]
    t0 = time.perf_counter()
    for th in ths:
        th.start()
    stop.wait(duration)
    stop.set()
    for th in ths:
        th.join(timeout=120)
    elapsed = time.perf_counter() - t0
    wrong = [e for e in errors if isinstance(e, W.WrongAnswer)]
    if wrong:
        raise wrong[0]
    if errors:
        raise errors[0]
    return elapsed


def check_kept(kept, ds, peer):
    """Checks the answers a multi-client run kept, `(session, scenario, raw answer, argument)` per call."""
    for run in kept:
        for s, sc, raw, a in run:
            verify(s, sc, raw, ds, peer, a)


def sweep(peer, ds, opts, clients, mix):
    """`mix` of read scenarios in equal parts at each client count: {clients: stats}."""
    out = {}
    sessions = [peer.session() for _ in range(max(clients))]
    for s in sessions[:1]:  # warm-up
        for sc in mix:
            a = Arg(ds, sc).next()
            verify(s, sc, call(s, sc, a), ds, peer.name, a)
    for n in clients:
        lats = [[] for _ in range(n)]
        kept = [[] for _ in range(n)]

        def client(i, stop):
            s = sessions[i]
            args = {sc: Arg(ds, sc, i) for sc in mix}
            k = i
            while not stop.is_set():
                sc = mix[k % len(mix)]
                k += 1
                a = args[sc].next()
                t = time.perf_counter()
                raw = call(s, sc, a)
                lats[i].append((time.perf_counter() - t) * 1000)
                kept[i].append((s, sc, raw, a))
        el = _run_threads(n, client, opts.sweep_time)
        check_kept(kept, ds, peer.name)
        all_lat = [x for l in lats for x in l]
        out[n] = stats(all_lat, el)
    return out


def write_mixed(peer, ds, opts):
    """One writer alternating the two single-datom transactions; 8 readers alternating q1 and q2."""
    pool = ds.writable_idxs()
    labels = [r[1] for r in ds.labels]
    n_readers = 8
    sessions = [peer.session() for _ in range(n_readers + 1)]
    wl, rl = [], [[] for _ in range(n_readers)]
    kept = [[] for _ in range(n_readers)]

    def worker(i, stop):
        s = sessions[i]
        if i == n_readers:
            rnd = random.Random(7)
            k = 0
            while not stop.is_set():
                idx = int(pool[rnd.randrange(len(pool))])
                t = time.perf_counter()
                if k % 2 == 0:
                    s.write_state(idx, W.STATES[rnd.randrange(5)])
                else:
                    s.write_label(idx, labels[rnd.randrange(len(labels))])
                wl.append((time.perf_counter() - t) * 1000)
                k += 1
            return
        args = {"q1": W_arg(ds, "q1", i), "q2": W_arg(ds, "q2", i)}
        k = i
        while not stop.is_set():
            sc = "q1" if k % 2 == 0 else "q2"
            k += 1
            a = args[sc].next()
            t = time.perf_counter()
            raw = call(s, sc, a)
            rl[i].append((time.perf_counter() - t) * 1000)
            kept[i].append((s, sc, raw, a))
    el = _run_threads(n_readers + 1, worker, opts.mixed_time)
    check_kept(kept, ds, peer.name)
    return {"writer": stats(wl, el), "readers": stats([x for l in rl for x in l], el)}


def W_arg(ds, sc, i):
    return Arg(ds, sc, i, probes=True)


def single_tx(peer, ds, opts):
    """One client, single-datom transactions of :issue/state, each its own transaction acknowledged when committed,
    for `opts.update_time` seconds: transactions per second and their latency."""
    pool = ds.writable_idxs()
    s = peer.session()
    rnd = random.Random(5)
    lat = []
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < opts.update_time:
        idx = int(pool[rnd.randrange(len(pool))])
        t = time.perf_counter()
        s.write_state(idx, W.STATES[rnd.randrange(5)])
        lat.append((time.perf_counter() - t) * 1000)
    return stats(lat, time.perf_counter() - t0)


def fsync_floor(directory, n=200):
    """The disk's own floor under a durable commit: 4 KiB appended to a file in `directory` and fsynced, n times."""
    import os
    path = os.path.join(directory, "fsync_probe.bin")
    lat = []
    with open(path, "ab") as f:
        for _ in range(n):
            t = time.perf_counter()
            f.write(b"x" * 4096)
            f.flush()
            os.fsync(f.fileno())
            lat.append((time.perf_counter() - t) * 1000)
    os.remove(path)
    return stats(lat)


def transact_many(peer, ds, opts, batch=1000):
    """One client handing over `batch` single-datom transactions of :issue/state per call (each its own
    transaction, all acknowledged when durable) for `opts.update_time` seconds: transactions per second."""
    pool = ds.writable_idxs()
    s = peer.session()
    rnd = random.Random(6)
    calls, n = [], 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < opts.update_time:
        pairs = [(int(pool[rnd.randrange(len(pool))]), W.STATES[rnd.randrange(5)]) for _ in range(batch)]
        t = time.perf_counter()
        s.write_states_many(pairs)
        calls.append((time.perf_counter() - t) * 1000)
        n += batch
    el = time.perf_counter() - t0
    out = stats(calls, el)
    out["ops_s"] = n / el  # transactions, not calls
    return out


def update_heavy(peer, ds, opts, n_clients=64):
    """64 closed-loop clients: 95% single-datom updates of :issue/state, 5% point reads; scrambled Zipfian keys."""
    pool = ds.writable_idxs()
    z = W.ScrambledZipf(len(pool), seed=11)
    sessions = [peer.session() for _ in range(n_clients)]
    ev = [[] for _ in range(n_clients)]  # (end time, latency ms, is_write)
    reads = [[] for _ in range(n_clients)]  # (raw answer, key), checked after the run
    keys = [pool[z.sample(200000)] for _ in range(1)][0]
    t_start = [0.0]

    def client(i, stop):
        s = sessions[i]
        rnd = random.Random(1000 + i)
        k = i * 3001
        while not stop.is_set():
            idx = int(keys[k % len(keys)])
            k += 1
            t = time.perf_counter()
            if rnd.random() < 0.95:
                s.write_state(idx, W.STATES[rnd.randrange(5)])
                ev[i].append((time.perf_counter(), (time.perf_counter() - t) * 1000, True))
            else:
                raw = s.point_read(idx)
                ev[i].append((time.perf_counter(), (time.perf_counter() - t) * 1000, False))
                reads[i].append((raw, idx))
    t_start[0] = time.perf_counter()
    el = _run_threads(n_clients, client, opts.update_time)
    for run in reads:
        for raw, idx in run:
            W.check("point_read", raw, ds, peer.name, idx)
    allev = [e for l in ev for e in l]
    secs = max(1, int(el))
    buckets = np.zeros(secs + 1)
    for t_end, _, _ in allev:
        b = int(t_end - t_start[0])
        if b <= secs:
            buckets[b] += 1
    per_sec = buckets[:secs] if secs >= 1 else buckets
    wl = [x[1] for x in allev if x[2]]
    rl = [x[1] for x in allev if not x[2]]
    return {"all": stats([x[1] for x in allev], el), "writes": stats(wl, el), "reads": stats(rl, el),
            "per_second": {"p1": pct(per_sec, 1), "p50": pct(per_sec, 50), "p99": pct(per_sec, 99),
                           "min": float(per_sec.min()), "max": float(per_sec.max()), "seconds": int(secs)}}
