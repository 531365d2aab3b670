"""timings.csv, summary.md and the PNG charts."""
import csv
import json
import math

from . import workload as W

FIELDS = ["scale", "peer", "scenario", "variant", "status", "samples", "p50_ms", "p95_ms", "p99_ms", "ops_s",
          "reason", "extra"]
PEER_ORDER = ["mentat", "duckdb_sql", "sqlite", "postgres", "datascript", "cozo", "datalevin"]


def f(x, nd=2):
    if x == "" or x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    x = float(x)
    if x >= 1000:
        return f"{x:,.0f}"
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    if x >= 0.1:
        return f"{x:.{nd}f}"
    return f"{x:.3f}"


def write(out, res, meta, opts):
    rows = res.rows
    with open(out / "timings.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in FIELDS})
    (out / "meta.json").write_text(json.dumps(meta, indent=1))
    charts = []
    try:
        charts = _charts(out, rows)
    except Exception as e:  # noqa: BLE001 - charts are optional (matplotlib missing)
        res.notes.append(f"charts not drawn: {type(e).__name__}: {e}")
    (out / "summary.md").write_text(_summary(rows, res, meta, charts))


def _ok(rows, **kw):
    return [r for r in rows if r["status"] == "ok" and all(r[k] == v for k, v in kw.items())]


def _one(rows, **kw):
    x = _ok(rows, **kw)
    return x[0] if x else None


def _status(rows, **kw):
    x = [r for r in rows if all(r[k] == v for k, v in kw.items())]
    return x[0] if x else None


def _cell(rows, scale, peer, scenario, variant="", key="p50_ms"):
    r = _one(rows, scale=scale, peer=peer, scenario=scenario, variant=variant)
    if r:
        return f(r[key])
    s = _status(rows, scale=scale, peer=peer, scenario=scenario)
    if s is None:
        s = _status(rows, scale=scale, peer=peer, scenario="setup")
    if s is None:
        return ""
    return {"skipped": "skip", "error": "error", "WRONG": "**WRONG**"}.get(s["status"], s["status"])


def _summary(rows, res, meta, charts):
    scales = list(dict.fromkeys(r["scale"] for r in rows))
    peers = [p for p in PEER_ORDER if any(r["peer"] == p for r in rows)]
    L = ["# mentat scale suite: results", ""]
    L.append(f"Run {meta['started']} ({meta['seconds']} s), scales {meta['scales']}, commit {meta['git']}"
             f"{' (uncommitted changes in the tree)' if meta['git_dirty'] else ''}, {meta['cpus']} CPUs"
             f"{', QUICK mode: times are not meaningful' if meta['quick'] else ''}. "
             "Every answer was checked against the generator's truth.json; "
             + ("**WRONG ANSWERS: the run failed** (below)." if res.wrong else "all checked answers were right."))
    la = meta.get("loadavg_end")
    if la and la[0] > (meta["cpus"] or 1) * 0.75:
        L.append("")
        L.append(f"**Caution: the machine was busy with other work** (load average {meta.get('loadavg_start')} at the "
                 f"start, {la} at the end, on {meta['cpus']} CPUs): absolute times are inflated and noisy; compare "
                 "peers within one scale, not against other runs.")
    L.append("")
    L.append("Latencies are client-side wall-clock milliseconds from Python (one call = one question and fetching "
             "its whole answer as Python objects). Ratio = mentat p50 / peer p50: above 1 means mentat is slower.")
    L.append("")
    for scale in scales:
        L.append(f"## Scale {scale}")
        L.append("")
        # bulk load
        L.append("### bulk_load")
        L.append("")
        L.append("| peer | datoms | seconds | datoms/s | bytes | bytes/datom | how |")
        L.append("|---|---:|---:|---:|---:|---:|---|")
        for p in peers:
            r = _one(rows, scale=scale, peer=p, scenario="bulk_load")
            if r:
                e = json.loads(r["extra"])
                b = e.get("bytes")
                L.append(f"| {p} | {e['datoms']:,} | {float(r['p50_ms']) / 1000:.1f} | {float(r['ops_s']):,.0f} | "
                         f"{(f'{b / 1e6:.1f} MB') if b else '-'} | {f(b / e['datoms']) if b else '-'} | {e['method']} |")
            else:
                L.append(f"| {p} | {_cell(rows, scale, p, 'bulk_load')} | | | | | |")
        L.append("")
        # read scenarios
        L.append("### one client: p50 ms (p99 ms)")
        L.append("")
        L.append("| scenario | " + " | ".join(peers) + " |")
        L.append("|---|" + "---:|" * len(peers))
        for sc in W.READ_SCENARIOS:
            cells = []
            for p in peers:
                r = _one(rows, scale=scale, peer=p, scenario=sc)
                cells.append(f"{f(r['p50_ms'])} ({f(r['p99_ms'])})" if r else _cell(rows, scale, p, sc))
            L.append(f"| {sc} | " + " | ".join(cells) + " |")
        L.append("")
        L.append("### ratio mentat / peer (p50; >1 = mentat slower)")
        L.append("")
        others = [p for p in peers if p != "mentat"]
        L.append("| scenario | " + " | ".join(others) + " |")
        L.append("|---|" + "---:|" * len(others))
        losses = []
        for sc in [x for x in W.READ_SCENARIOS if x != "floor"] + ["bulk_load"]:
            m = _one(rows, scale=scale, peer="mentat", scenario=sc)
            cells = []
            for p in others:
                r = _one(rows, scale=scale, peer=p, scenario=sc)
                if m and r:
                    if sc == "bulk_load":  # throughput: ratio of time per datom
                        ratio = float(r["ops_s"]) / float(m["ops_s"])
                    else:
                        ratio = float(m["p50_ms"]) / float(r["p50_ms"])
                    cells.append(f"{ratio:.2f}x" + (" **loses**" if ratio > 1.1 else ""))
                    if ratio > 1.1:
                        losses.append((sc, p, ratio))
                else:
                    cells.append("-")
            L.append(f"| {sc} | " + " | ".join(cells) + " |")
        L.append("")
        if losses:
            L.append("**Where mentat loses at this scale** (more than 10% slower at p50, or slower bulk load): " +
                     "; ".join(f"{sc} vs {p} ({x:.1f}x)" for sc, p, x in sorted(losses, key=lambda t: -t[2])) + ".")
        else:
            L.append("mentat is not more than 10% slower than any peer on the one-client scenarios at this scale.")
        L.append("")
        floor = _one(rows, scale=scale, peer="mentat", scenario="floor")
        if floor:
            L.append("### mentat against the floor (`SELECT 1` from the same Python client, same run): p50 / floor p50")
            L.append("")
            L.append("| " + " | ".join(x for x in W.READ_SCENARIOS if x != "floor") + " |")
            L.append("|" + "---:|" * (len(W.READ_SCENARIOS) - 1))
            cells = []
            for sc in [x for x in W.READ_SCENARIOS if x != "floor"]:
                m = _one(rows, scale=scale, peer="mentat", scenario=sc)
                cells.append(f"{float(m['p50_ms']) / float(floor['p50_ms']):.1f}x" if m else "-")
            L.append("| " + " | ".join(cells) + " |")
            L.append("")
        mem = [r for r in rows if r["scale"] == scale and r["scenario"] == "memory" and r["extra"]]
        if mem:
            L.append("### peak resident memory of each peer's worker process after the reads (MB)")
            L.append("")
            L.append("| " + " | ".join(r["peer"] for r in mem) + " |")
            L.append("|" + "---:|" * len(mem))
            L.append("| " + " | ".join(str(json.loads(r["extra"])["peak_rss_mb"]) for r in mem) + " |")
            L.append("")
        # sweep
        sw = [r for r in rows if r["scale"] == scale and r["scenario"] == "concurrency_sweep"]
        if sw:
            clients = sorted({int(r["variant"].split("=")[1]) for r in sw if r["variant"]})
            L.append("### concurrency_sweep: ops/s (p50 / p99 ms), q1, q2 and pull in equal parts")
            L.append("")
            L.append("| peer | " + " | ".join(f"{c} clients" for c in clients) + " |")
            L.append("|---|" + "---:|" * len(clients))
            for p in peers:
                cells = []
                for c in clients:
                    r = _one(rows, scale=scale, peer=p, scenario="concurrency_sweep", variant=f"clients={c}")
                    cells.append(f"{f(r['ops_s'])} ({f(r['p50_ms'])} / {f(r['p99_ms'])})" if r
                                 else _cell(rows, scale, p, "concurrency_sweep"))
                L.append(f"| {p} | " + " | ".join(cells) + " |")
            for p in peers:
                fl = [_one(rows, scale=scale, peer=p, scenario="floor_sweep", variant=f"clients={c}") for c in clients]
                if any(fl):
                    L.append(f"| {p}: `SELECT 1` only (the floor) | " + " | ".join(
                        f"{f(r['ops_s'])} ({f(r['p50_ms'])} / {f(r['p99_ms'])})" if r else "-" for r in fl) + " |")
            notes = {r["peer"]: r["reason"] for r in sw if r["reason"] and r["status"] == "ok"}
            for p, n in notes.items():
                L.append(f"- {p}: {n}")
            L.append("")
        # write_mixed
        L.append("### write_mixed: 1 writer (single-datom tx) + 8 readers (q1/q2)")
        L.append("")
        L.append("| peer | writer tx/s | write p50 / p99 ms | readers ops/s | read p50 / p99 ms |")
        L.append("|---|---:|---:|---:|---:|")
        for p in peers:
            w_ = _one(rows, scale=scale, peer=p, scenario="write_mixed", variant="writer")
            r_ = _one(rows, scale=scale, peer=p, scenario="write_mixed", variant="readers")
            if w_ and r_:
                L.append(f"| {p} | {f(w_['ops_s'])} | {f(w_['p50_ms'])} / {f(w_['p99_ms'])} | {f(r_['ops_s'])} | "
                         f"{f(r_['p50_ms'])} / {f(r_['p99_ms'])} |")
            else:
                L.append(f"| {p} | {_cell(rows, scale, p, 'write_mixed')} | | | |")
        L.append("")
        L.append("### update_heavy: 64 closed-loop clients, 95% single-datom updates / 5% point reads, "
                 "scrambled Zipfian")
        L.append("")
        L.append("| peer | ops/s | per-second ops p1 / p50 / p99 | update p50 / p95 / p99 ms | read p50 / p99 ms |")
        L.append("|---|---:|---:|---:|---:|")
        for p in peers:
            a = _one(rows, scale=scale, peer=p, scenario="update_heavy", variant="all")
            w_ = _one(rows, scale=scale, peer=p, scenario="update_heavy", variant="writes")
            r_ = _one(rows, scale=scale, peer=p, scenario="update_heavy", variant="reads")
            if a:
                ps = json.loads(a["extra"])
                L.append(f"| {p} | {f(a['ops_s'])} | {f(ps['p1'])} / {f(ps['p50'])} / {f(ps['p99'])} | "
                         f"{f(w_['p50_ms'])} / {f(w_['p95_ms'])} / {f(w_['p99_ms'])} | "
                         f"{f(r_['p50_ms']) if r_ else '-'} / {f(r_['p99_ms']) if r_ else '-'} |")
            else:
                L.append(f"| {p} | {_cell(rows, scale, p, 'update_heavy')} | | | |")
        L.append("")
        for p in peers:
            a = _one(rows, scale=scale, peer=p, scenario="update_heavy", variant="all")
            ct = _one(rows, scale=scale, peer=p, scenario="update_heavy", variant="ceiling floor clients=64")
            cp = _one(rows, scale=scale, peer=p, scenario="update_heavy", variant="ceiling floor_prepared clients=64")
            if a and ct and cp:
                L.append(f"- {p}: the same Python client's `SELECT 1` at 64 threads, {f(ct['ops_s'])} ops/s sent as text "
                         f"(planned at every call), {f(cp['ops_s'])} as `EXECUTE` of a statement prepared once per "
                         f"connection (as mentat's writes are sent); update_heavy is "
                         f"{float(a['ops_s']) / float(ct['ops_s']):.2f}x / {float(a['ops_s']) / float(cp['ops_s']):.2f}x "
                         "of them")
        L.append("")
        if any(r["scenario"] == "update_heavy" and r["variant"].endswith("clients=1") for r in rows if r["scale"] == scale):
            L.append("update_heavy at 1 and 8 clients: ops/s (per-second p1 / p50 / p99; update p50 / p95 / p99 ms)")
            L.append("")
            L.append("| peer | 1 client | 8 clients |")
            L.append("|---|---:|---:|")
            for p in peers:
                cells = []
                for n in (1, 8):
                    a = _one(rows, scale=scale, peer=p, scenario="update_heavy", variant=f"all clients={n}")
                    w_ = _one(rows, scale=scale, peer=p, scenario="update_heavy", variant=f"writes clients={n}")
                    if a and w_:
                        ps = json.loads(a["extra"])
                        cells.append(f"{f(a['ops_s'])} ({f(ps['p1'])} / {f(ps['p50'])} / {f(ps['p99'])}; "
                                     f"{f(w_['p50_ms'])} / {f(w_['p95_ms'])} / {f(w_['p99_ms'])})")
                    else:
                        cells.append("-")
                L.append(f"| {p} | " + " | ".join(cells) + " |")
            L.append("")
        if any(r["scenario"] in ("single_tx", "transact_many") for r in rows if r["scale"] == scale):
            L.append("### single_tx and transact_many: one client, single-datom transactions, each its own "
                     "transaction (mentat syncs its WAL at every COMMIT; SQLite's WAL with synchronous=NORMAL syncs "
                     "only at checkpoints)")
            L.append("")
            L.append("| peer | single_tx tx/s | p50 / p99 ms | the disk's fsync p50 ms | transact_many tx/s "
                     "(1,000 per call) |")
            L.append("|---|---:|---:|---:|---:|")
            for p in peers:
                a = _one(rows, scale=scale, peer=p, scenario="single_tx", variant="")
                fs = _one(rows, scale=scale, peer=p, scenario="single_tx", variant="fsync floor")
                m = _one(rows, scale=scale, peer=p, scenario="transact_many", variant="")
                first = (f"{f(a['ops_s'])} | {f(a['p50_ms'])} / {f(a['p99_ms'])} | {f(fs['p50_ms']) if fs else '-'}"
                         if a else f"{_cell(rows, scale, p, 'single_tx')} | | ")
                L.append(f"| {p} | {first} | {f(m['ops_s']) if m else _cell(rows, scale, p, 'transact_many')} |")
            L.append("")
        nat = [r for r in rows if r["scale"] == scale and r["scenario"] == "native"]
        if nat:
            L += _native(rows, scale, nat)
        cold_rows = [r for r in rows if r["scale"] == scale and r["scenario"] == "cold_vs_warm"]
        if cold_rows:  # a run that did not choose the scenario prints no empty table
            L.append("### cold_vs_warm: q1 in a new process")
            L.append("")
            L.append("| peer | open ms | first call ms | warm p50 ms |")
            L.append("|---|---:|---:|---:|")
        for p in peers if cold_rows else []:
            a = _one(rows, scale=scale, peer=p, scenario="cold_vs_warm", variant="first_call")
            b = _one(rows, scale=scale, peer=p, scenario="cold_vs_warm", variant="warm")
            if a and b:
                L.append(f"| {p} | {f(json.loads(a['extra'])['open_ms'])} | {f(a['p50_ms'])} | {f(b['p50_ms'])} |")
            else:
                L.append(f"| {p} | {_cell(rows, scale, p, 'cold_vs_warm')} | | |")
        if cold_rows:
            L.append("")
        bad = [r for r in rows if r["scale"] == scale and r["status"] != "ok"]
        if bad:
            L.append("### not run, and why")
            L.append("")
            for r in bad:
                L.append(f"- {r['peer']} / {r['scenario']}{(' ' + r['variant']) if r['variant'] else ''}: "
                         f"{r['status']}: {r['reason']}")
            L.append("")
    if res.wrong:
        L.append("## Wrong answers (the run failed)")
        L += [f"- {w}" for w in res.wrong]
        L.append("")
    if charts or res.notes:
        L.append("## Charts")
        L += [f"![{c}]({c})" for c in charts]
        L += [f"- {n}" for n in res.notes]
        L.append("")
    return "\n".join(L) + "\n"


def _x(ratio):
    return f"{ratio:.2f}x" if ratio >= 0.1 else f"{ratio:.3f}x" if ratio >= 0.001 else f"{ratio:.1e}x"


def _native(rows, scale, nat):
    """The native driver's tables: update_heavy at each client count beside the same driver's `SELECT 1` ceiling
    at that count (prepared once, and sent as text), then single_tx and write_mixed."""
    L = ["### native driver (benchmarks/native): Rust client threads, one connection each, beside each driver's own "
         "`SELECT 1` ceiling in the same run", ""]
    drivers = [p for p in ("mentat", "sqlite") if any(r["peer"] == p for r in nat)]
    for r in nat:
        if r["variant"] == "engine" and r["status"] == "ok":
            L.append(f"- {r['peer']}: {json.loads(r['extra'])['engine']}")
    L.append("- `SELECT 1` prepared: a statement prepared once per connection, as every workload statement is sent; "
             "as text: parsed and planned on every call, as Python's `execute` sends it (mentat's statements, table "
             "functions with parameters, are planned again on every call either way); table function: `SELECT count(*) "
             "FROM range(?)` prepared, which DuckDB also plans again on every call (DuckDB only): the floor under any "
             "mentat call. Ratio = update_heavy ops/s over the ceiling's at the same thread count.")
    L.append("")
    clients = sorted({int(r["variant"].rsplit("=", 1)[1]) for r in nat if "clients=" in r["variant"]})

    def one(p, v):
        return _one(rows, scale=scale, peer=p, scenario="native", variant=v)
    L.append("| driver | clients | `SELECT 1` ops/s prepared / as text; table function | update_heavy ops/s | ratio "
             "prepared / as text; table function | per-second ops p1 / p50 / p99 | update p50 / p95 / p99 ms | "
             "read p50 / p99 ms |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|")
    for p in drivers:
        if not any(r["peer"] == p and r["status"] == "ok" for r in nat):
            L.append(f"| {p} | | {_cell(rows, scale, p, 'native')} | | | | | |")
            continue
        for n in clients:
            c, ct = one(p, f"ceiling clients={n}"), one(p, f"ceiling_text clients={n}")
            tf = one(p, f"ceiling_tf clients={n}")
            a, w_, r_ = (one(p, f"update_heavy {k} clients={n}") for k in ("all", "writes", "reads"))
            ceil = f"{f(c['ops_s']) if c else '-'} / {f(ct['ops_s']) if ct else '-'}" + (
                f"; {f(tf['ops_s'])}" if tf else "")
            if a and w_:
                ps = json.loads(a["extra"])
                ratio = " / ".join(_x(float(a["ops_s"]) / float(x["ops_s"])) if x else "-" for x in (c, ct)) + (
                    f"; {_x(float(a['ops_s']) / float(tf['ops_s']))}" if tf else "")
                L.append(f"| {p} | {n} | {ceil} | {f(a['ops_s'])} | {ratio} | {f(ps['p1'])} / {f(ps['p50'])} / "
                         f"{f(ps['p99'])} | {f(w_['p50_ms'])} / {f(w_['p95_ms'])} / {f(w_['p99_ms'])} | "
                         f"{f(r_['p50_ms']) if r_ else '-'} / {f(r_['p99_ms']) if r_ else '-'} |")
            else:
                L.append(f"| {p} | {n} | {ceil} | - | | | | |")
    L.append("")
    L.append("| driver | single_tx tx/s | p50 / p99 ms | the disk's fsync p50 ms | write_mixed writer tx/s "
             "(p50 / p99 ms) | readers ops/s (p50 / p99 ms) |")
    L.append("|---|---:|---:|---:|---:|---:|")
    for p in drivers:
        st, fs = one(p, "single_tx"), one(p, "single_tx fsync floor")
        wr, rd = one(p, "write_mixed writer"), one(p, "write_mixed readers")
        L.append(f"| {p} | {f(st['ops_s']) if st else '-'} | "
                 f"{(f(st['p50_ms']) + ' / ' + f(st['p99_ms'])) if st else '-'} | {f(fs['p50_ms']) if fs else '-'} | "
                 f"{(f(wr['ops_s']) + ' (' + f(wr['p50_ms']) + ' / ' + f(wr['p99_ms']) + ')') if wr else '-'} | "
                 f"{(f(rd['ops_s']) + ' (' + f(rd['p50_ms']) + ' / ' + f(rd['p99_ms']) + ')') if rd else '-'} |")
    L.append("")
    return L


def _charts(out, rows):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    made = []
    scales = list(dict.fromkeys(r["scale"] for r in rows))
    peers = [p for p in PEER_ORDER if any(r["peer"] == p for r in rows)]
    # latency per scenario and scale
    fig, axes = plt.subplots(len(scales), 1, figsize=(12, 4.2 * len(scales)), squeeze=False)
    for ax, scale in zip(axes[:, 0], scales):
        x = np.arange(len(W.READ_SCENARIOS))
        wd = 0.8 / max(1, len(peers))
        for i, p in enumerate(peers):
            ys = []
            for sc in W.READ_SCENARIOS:
                r = _one(rows, scale=scale, peer=p, scenario=sc)
                ys.append(float(r["p50_ms"]) if r else np.nan)
            ax.bar(x + i * wd - 0.4 + wd / 2, ys, wd, label=p)
        ax.set_yscale("log")
        ax.set_xticks(x)
        ax.set_xticklabels(W.READ_SCENARIOS)
        ax.set_ylabel("p50 ms (log)")
        ax.set_title(f"latency per scenario, scale {scale} (one client; missing bar = skipped)")
        ax.grid(axis="y", which="both", alpha=0.3)
        ax.legend(fontsize=8, ncol=4)
    fig.tight_layout()
    fig.savefig(out / "latency.png", dpi=110)
    plt.close(fig)
    made.append("latency.png")
    # throughput per client count
    fig, axes = plt.subplots(1, len(scales), figsize=(6.5 * len(scales), 4.5), squeeze=False)
    for ax, scale in zip(axes[0], scales):
        for p in peers:
            pts = sorted((int(r["variant"].split("=")[1]), float(r["ops_s"]))
                         for r in _ok(rows, scale=scale, peer=p, scenario="concurrency_sweep"))
            if pts:
                ax.plot([a for a, _ in pts], [b for _, b in pts], marker="o", label=p)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("client threads")
        ax.set_ylabel("ops/s (log)")
        ax.set_title(f"concurrency_sweep throughput, scale {scale}")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "throughput.png", dpi=110)
    plt.close(fig)
    made.append("throughput.png")
    return made
