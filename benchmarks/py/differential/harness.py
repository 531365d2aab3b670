"""Runs generated inputs through both engines and compares the answers (see __init__.py for the rules)."""
import datetime as dt
import json
import multiprocessing
import random
import re
import sys
import time
from collections import Counter

import duckdb

from . import gen_pull, gen_query, gen_tx
from .model import NAME, make_schema, schema_ds, schema_edn


class Stats:
    def __init__(self):
        self.pairs = {}
        self.mismatches = {}
        self.errors = {}  # kind -> count of inputs both engines refused or DataScript alone refused
        self.mentat_errors = {}
        self.agreed = {}  # inputs both engines refused (transactions: lookup refs, unique conflicts)
        self.examples = []  # (kind, description dict)
        self.dbs = 0
        self.t0 = time.perf_counter()
        self.limit = 50

    def add(self, d, kind, n=1):
        d[kind] = d.get(kind, 0) + n

    def bad(self, kind, info, limit=50):
        self.add(self.mismatches, kind)
        if len(self.examples) < self.limit:
            self.examples.append((kind, info))

    def total_mismatches(self):
        return sum(self.mismatches.values()) + sum(self.mentat_errors.values())

    def report(self):
        secs = time.perf_counter() - self.t0
        lines = [f"databases: {self.dbs}"]
        for k in sorted(self.pairs):
            lines.append(f"{k:>6}: {self.pairs[k]:>8,} pairs  mismatches {self.mismatches.get(k, 0):>4}  "
                         f"mentat-only errors {self.mentat_errors.get(k, 0):>4}  "
                         f"skipped (DataScript refused) {self.errors.get(k, 0):>4}"
                         + (f"  refused by both {self.agreed[k]}" if k in self.agreed else ""))
        total = sum(self.pairs.values())
        lines.append(f" total: {total:,} pairs in {secs:.1f} s ({total / max(secs, 1e-9):,.0f} pairs/s), "
                     f"{self.total_mismatches()} mismatches")
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- normalization

def _num(x):
    # 9 significant digits, rounded from 12 first: two sums of the same numbers in another order can differ in the
    # last bit and straddle a 9-digit rounding boundary (0.2490234374999999 against 0.2490234375, a variance, seed
    # 77 of 2026-12-02); at 12 digits they are one number
    return float(f"{float(f'{float(x):.12g}'):.9g}")


def _ms(x):
    if isinstance(x, dt.datetime):
        if x.tzinfo is None:
            x = x.replace(tzinfo=dt.timezone.utc)
        return round(x.timestamp() * 1000)
    if isinstance(x, str):  # ISO text, as a JSON field of a pull gives it ("2020-01-01 00:00:01.25+00")
        m = re.match(r"(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d(?::?\d\d)?)?$", x)
        base = dt.datetime.fromisoformat(f"{m.group(1)}T{m.group(2)}").replace(tzinfo=dt.timezone.utc)
        off = m.group(4) or "Z"
        if off != "Z":
            sign = -1 if off[0] == "-" else 1
            hh, mm = int(off[1:3]), int(off[-2:]) if len(off) > 3 else 0
            base -= sign * dt.timedelta(hours=hh, minutes=mm)
        return round(base.timestamp() * 1000) + round(int((m.group(3) or "0")[:3].ljust(3, "0")))
    return int(x)


def norm_value(t, x, inv):
    """A comparable form of an answer's value of type t; inv maps the engine's entity ids to labels."""
    if x is None:
        return None
    if t == "entity" or t == "ref":
        return ("e", inv.get(x, ("unknown", x)))
    if t == "long":
        return int(x)
    if t in ("double", "float"):
        return _num(x)
    if t == "keyword":
        return str(x).lstrip(":")
    if t == "instant":
        return _ms(x)
    if t == "uuid":
        return str(x).lower()
    if t == "boolean":
        return bool(x)
    if t == "string":
        return str(x)
    if isinstance(t, tuple) and t[0] == "pull":
        return norm_pull(t[1], x, _BY, inv)
    if isinstance(t, tuple):
        kind, et = t
        if isinstance(x, str):
            x = json.loads(x)
        vals = [norm_value(et, y, inv) for y in x]
        return frozenset(vals) if kind == "set" else tuple(sorted(vals, key=repr))
    raise ValueError(t)


_BY = {}  # the attributes of the database being compared (pull find elements need them)


def norm_row(types, row, inv):
    return tuple(norm_value(t, x, inv) for t, x in zip(types, row))


def compare_query(q, m_rows, ds_rows, m_inv, ds_inv):
    """None when mentat's answer is right given DataScript's relation, else a reason. DataScript always runs the
    relation form of the query; mentat the query's own find spec."""
    types = [f[2] for f in q.find]
    truth = [norm_row(types, r, ds_inv) for r in ds_rows]
    tset = set(truth)
    got = [norm_row(types, r, m_inv) for r in m_rows]
    if any(f[0] == "pull" for f in q.find):
        # a pull is applied to the set of tuples, so two entities may pull the same map: bags (Datomic's rule)
        if q.spec == "rel":
            return None if Counter(got) == Counter(truth) else "different relations (with pull)"
        if q.spec == "coll":
            return None if Counter(g[0] for g in got) == Counter(t[0] for t in truth) else \
                "different collections (with pull)"
    if q.spec == "rel":
        if len(got) != len(set(got)):
            return "mentat's relation has duplicate rows (Datomic's :find relation is a set)"
        if set(got) != tset:
            return "different relations"
        return None
    if q.spec == "coll":
        vals = [g[0] for g in got]
        if len(vals) != len(set(vals)):
            return "mentat's collection has duplicates"
        if set(vals) != {t[0] for t in tset}:
            return "different collections"
        return None
    # scalar / tuple: one element of the relation, or nothing when it is empty
    if not tset:
        if got and not all(all(v is None for v in g) for g in got):
            return "mentat answers a value where Datomic answers nil"
        return None
    if len(got) != 1:
        return f"mentat gives {len(got)} rows for a single {q.spec}"
    if got[0] not in tset:
        return f"mentat's {q.spec} is not one of the relation's tuples"
    return None


# ---------------------------------------------------------------------------------------------- databases

class Db:
    """A generated database loaded into both engines."""

    def __init__(self, m, ds, rnd, n_entities, stats):
        self.attrs = make_schema(rnd)
        self.by = {a.ident: a for a in self.attrs}
        self.txs, self.model = gen_tx.initial_db(rnd, self.attrs, n_entities)
        m.new()
        _, err = m.transact(schema_edn(self.attrs))
        if err:
            raise RuntimeError(f"mentat refused the schema: {err}")
        ds.new(schema_ds(self.attrs))
        self.m_ids, self.ds_ids = {}, {}
        for i, tx in enumerate(self.txs):
            mt, dt_ = gen_tx.render(tx, self.by)
            tids, err = m.transact(mt)
            dres = ds.tx([dt_])[0]
            if err or "error" in dres:
                stats.bad("db", {"tx": mt, "mentat": err, "datascript": dres.get("error")})
                raise RuntimeError(f"database transaction failed: mentat {err} / datascript {dres.get('error')}")
            if i == 0:
                self.m_ids = {int(k[1:]): v for k, v in tids.items() if k.startswith("t")}
                self.ds_ids = {int(k[1:]): v for k, v in dres["tempids"].items() if k.startswith("t")}
        self.m_inv = {v: k for k, v in self.m_ids.items()}
        self.ds_inv = {v: k for k, v in self.ds_ids.items()}
        stats.dbs += 1


def m_state(m, attrs):
    """{(name, ident, value)} of mentat's current datoms; entities without a name as ("unnamed", entid)."""
    names = dict(m.q(f"[:find ?e ?n :where [?e :{NAME} ?n]]"))
    out = set()
    for a in attrs:
        for e, v in m.q(f"[:find ?e ?v :where [?e :{a.ident} ?v]]"):
            ref = ("e", names.get(v, ("unnamed", v))) if a.type == "ref" else norm_value(a.type, v, {})
            out.add((names.get(e, ("unnamed", e)), a.ident, ref))
    return out


def ds_state(ds, attrs):
    by = {a.ident: a for a in attrs}
    datoms = ds.datoms()
    names = {e: v for e, a, v in datoms if a == NAME}
    out = set()
    for e, a, v in datoms:
        t = by[a].type
        ref = ("e", names.get(v, ("unnamed", v))) if t == "ref" else norm_value(t, v, {})
        out.add((names.get(e, ("unnamed", e)), a, ref))
    return out


def model_state(model, by):
    out = set()
    for i, avs in model.items():
        for k, vs in avs.items():
            for v in vs:
                out.add((f"n{i}", k, ("e", f"n{v}") if by[k].type == "ref" else norm_value(by[k].type, v, {})))
    return out


def _unnamed(s):
    """Entity ids of unnamed entities differ between engines: keep only that they exist."""
    return {tuple(("unnamed",) if isinstance(x, tuple) and x[:1] == ("unnamed",) else x for x in d) for d in s}


# ---------------------------------------------------------------------------------------------- the kinds

def ds_reload(ds, db):
    """A new DataScript process with db's schema and transactions (its entity ids come out the same)."""
    from .engines import DataScriptDied
    try:
        ds.proc.kill()
    except OSError:
        pass
    ds.start()
    ds.new(schema_ds(db.attrs))
    for tx in db.txs:
        ds.tx([gen_tx.render(tx, db.by)[1]])
    return DataScriptDied


def ds_queries(ds, db, batch):
    """DataScript's answers to a batch; when a query kills the node process (its heap exhausted), the batch is
    answered one by one in new processes and the killer counts as refused by DataScript."""
    from .engines import DataScriptDied
    try:
        return ds.q(batch)
    except DataScriptDied:
        out = []
        ds_reload(ds, db)
        for item in batch:
            try:
                out.append(ds.q([item])[0])
            except DataScriptDied as e:
                out.append({"error": str(e)})
                ds_reload(ds, db)
        return out


def run_queries(m, ds, db, rnd, n, stats, features=None):
    g = gen_query.QGen(rnd, db.attrs, db.model, features)
    _BY.clear()
    _BY.update(db.by)
    qs = [g.query() for _ in range(n)]
    dsr = ds_queries(ds, db, [{"q": q.text(True, spec="rel"), "inputs": q.ds_inputs(db.ds_ids)} for q in qs])
    for q, d in zip(qs, dsr):
        stats.add(stats.pairs, "query")
        mtext, minputs = q.text(False), q.m_inputs(db.m_ids)
        try:
            rows = m.q(mtext, minputs)
            merr = None
        except duckdb.Error as e:
            rows, merr = None, str(e)[:500]
        if "error" in d:
            stats.add(stats.errors, "query")
            continue
        if merr:
            stats.add(stats.mentat_errors, "query")
            if len(stats.examples) < stats.limit:
                stats.examples.append(("query-error", {"query": mtext, "inputs": minputs, "mentat": merr,
                                                       "db": db}))
            continue
        try:
            why = compare_query(q, rows, d["r"], db.m_inv, db.ds_inv)
        except Exception as e:  # noqa: BLE001 - an answer of an unexpected shape is a mismatch
            why = f"comparison failed: {e!r}"
        if why:
            stats.bad("query", {"why": why, "query": mtext, "inputs": minputs, "mentat": rows, "datascript": d["r"],
                                "ds_query": q.text(True, spec="rel"), "db": db})


def norm_pull(p, x, by, inv, path=()):
    """A comparable form of one pulled entity under pattern p (DataScript's or mentat's); `path` holds the ids of
    the maps above it in the answer (departure 15)."""
    if x is None:
        return None
    if isinstance(x, str):
        x = json.loads(x)
    path = path + (x.get("db/id", x.get(":db/id", x.get("id"))),)
    keymap = {}
    star = False
    for el in p:
        if el[0] == "star":
            star = True
        elif el[0] == "attr":
            keymap[el[2].get("as", el[1].ident)] = ("attr", el[1], None)
        elif el[0] == "rev":
            ns, nm = el[1].ident.split("/")
            keymap[f"{ns}/_{nm}"] = ("rev", el[1], el[2])
        elif el[0] == "ref":
            keymap[el[1].ident] = ("attr", el[1], p if el[2] == "..." or isinstance(el[2], int) else el[2])
    out = {}
    for k, v in x.items():
        k = k.lstrip(":")
        if v is None:
            continue
        if k == "db/id" or k == "id":  # DataScript's q converts keyword keys with name: :db/id -> "id"
            out["db/id"] = ("e", inv.get(v, ("unknown", v)))
            continue
        how, a, sub = keymap.get(k) or ("attr", by[k], None)
        whole = how == "attr" and a.type == "ref" and sub is None and a.component and (
            k in keymap and keymap[k][2] is None or star)
        if whole:
            sub = [("star",)]
        one = (lambda y: norm_ref(y, sub, by, inv, path, whole)) if (a.type == "ref" or how == "rev") else \
            (lambda y: norm_value(a.type, y, inv))
        if isinstance(v, str) and (how == "rev" or a.type == "ref") and v[:1] and v[:1] in "[{":
            v = json.loads(v)
        if isinstance(v, list):
            out[k] = ("many", tuple(sorted((one(y) for y in v), key=repr)))
        elif how == "attr" and a.many:
            # a :default of a cardinality-many attribute: DataScript gives the value, mentat a list of it
            # (departure 6: Datomic's documentation does not say)
            out[k] = ("many", (one(v),))
        else:
            out[k] = one(v)
    return tuple(sorted(out.items()))


def norm_ref(y, sub, by, inv, path=(), whole=False):
    if isinstance(y, str):
        y = json.loads(y)
    if isinstance(y, dict):
        eid = y.get("db/id", y.get(":db/id", y.get("id")))
        if whole and eid in path:
            # a component pulled whole that comes back to a map above it: DataScript's {:db/id e} or mentat's
            # walk of it (departure 15), one stub for both
            return ("stub", inv.get(eid, ("unknown", eid)))
        if sub is None:
            return ("e", inv.get(eid, ("unknown", eid)))
        return norm_pull(sub, y, by, inv, path=path)
    return ("e", inv.get(y, ("unknown", y)))


def run_pulls(m, ds, db, rnd, n, stats, features=None):
    g = gen_pull.PGen(rnd, db.attrs, features) if features is not None else gen_pull.PGen(rnd, db.attrs)
    labels = sorted(db.m_ids)
    ps = []
    for _ in range(n):
        p = g.pattern()
        es = rnd.sample(labels, k=min(len(labels), rnd.randint(1, 6)))
        ps.append((p, es))
    dsr = ds.pull([{"p": gen_pull.render(p, True), "es": [db.ds_ids[e] for e in es]} for p, es in ps])
    for (p, es), d in zip(ps, dsr):
        stats.add(stats.pairs, "pull")
        mtext = gen_pull.render(p, False)
        try:
            got = m.pull_many(mtext, [db.m_ids[e] for e in es])
            merr = None
        except duckdb.Error as e:
            got, merr = None, str(e)[:500]
        if "error" in d:
            stats.add(stats.errors, "pull")
            continue
        if merr:
            stats.add(stats.mentat_errors, "pull")
            if len(stats.examples) < stats.limit:
                stats.examples.append(("pull-error", {"pattern": mtext, "entities": es, "mentat": merr, "db": db}))
            continue
        try:
            a = [norm_pull(p, x, db.by, db.m_inv) for x in got]
            b = [norm_pull(p, x, db.by, db.ds_inv) for x in d["r"]]
        except Exception as e:  # noqa: BLE001 - an answer of an unexpected shape is a mismatch
            a, b = f"normalization failed: {e!r}", None
        if a != b:
            stats.bad("pull", {"why": "different pulls", "pattern": mtext, "entities": es, "mentat": got,
                               "datascript": d["r"], "db": db, "norm": (a, b)})


def run_db_check(m, ds, db, stats):
    """The database's datoms in both engines against the model (Datomic's rules applied by hand)."""
    stats.add(stats.pairs, "db")
    want = model_state(db.model, db.by)
    got_m, got_d = m_state(m, db.attrs), ds_state(ds, db.attrs)
    if got_m != want or got_d != want:
        stats.bad("db", {"why": "datoms differ from the model", "mentat-model": (got_m - want, want - got_m),
                         "datascript-model": (got_d - want, want - got_d), "db": db})


def run_txs(m, ds, rnd, stats, n_txs=12):
    """A random transaction sequence in both engines: per-transaction success agreement and final datoms."""
    attrs = make_schema(rnd)
    by = {a.ident: a for a in attrs}
    m.new()
    _, err = m.transact(schema_edn(attrs))
    ds.new(schema_ds(attrs))
    txs = gen_tx.random_txs(rnd, attrs, n_txs)
    applied = []
    for tx in txs:
        # a lookup ref to a name not (or no longer) there: Datomic refuses the transaction, DataScript 1.8.1
        # ignores a :db/retract through it (departure 9), so such forms are left out
        names = {int(v[1:]) for e, a, v in ds.datoms() if a == NAME}
        tx = [f for f in tx if not gen_tx.mentions_lookup(f, names)]
        if not tx:
            continue
        stats.add(stats.pairs, "tx")
        mt, dtx = gen_tx.render(tx, by)
        _, merr = m.transact(mt)
        d = ds.tx([dtx])[0]
        derr = d.get("error")
        if merr and derr:
            stats.add(stats.agreed, "tx")
        if bool(merr) != bool(derr):
            stats.bad("tx", {"why": "one engine refused the transaction", "tx": mt, "mentat": merr,
                             "datascript": derr, "before": list(applied), "attrs": attrs})
            m.drop()
            return
        if not merr:
            applied.append(mt)
    a, b = _unnamed(m_state(m, attrs)), _unnamed(ds_state(ds, attrs))
    if a != b:
        stats.bad("tx", {"why": "different datoms after the sequence", "txs": list(applied),
                         "mentat-only": a - b, "datascript-only": b - a, "attrs": attrs})
    m.drop()


def run(pairs, seed, kinds=("query", "pull", "tx"), queries_per_db=200, out=print, stats=None, ext=None,
        max_examples=50, progress=False):
    """Runs about `pairs` query/pull/transaction pairs (split between the kinds) and returns the Stats."""
    from .engines import DataScript, Mentat
    stats = stats or Stats()
    stats.limit = max_examples
    last = [time.perf_counter()]
    rnd = random.Random(seed)
    m, ds = Mentat(ext), DataScript()
    try:
        share = {"query": 0.85, "pull": 0.1, "tx": 0.05}
        total_share = sum(share[k] for k in kinds)
        want = {k: int(pairs * share[k] / total_share) for k in kinds}
        while any(stats.pairs.get(k, 0) < want[k] for k in kinds if k != "tx") or (
                "tx" in kinds and stats.pairs.get("tx", 0) < want["tx"]):
            if any(k in kinds and stats.pairs.get(k, 0) < want[k] for k in ("query", "pull")):
                try:
                    db = Db(m, ds, random.Random(rnd.random()), rnd.randint(12, 30), stats)
                except RuntimeError:
                    m.drop()
                    continue
                run_db_check(m, ds, db, stats)
                if "query" in kinds and stats.pairs.get("query", 0) < want["query"]:
                    run_queries(m, ds, db, random.Random(rnd.random()),
                                min(queries_per_db, want["query"] - stats.pairs.get("query", 0)), stats)
                if "pull" in kinds and stats.pairs.get("pull", 0) < want["pull"]:
                    run_pulls(m, ds, db, random.Random(rnd.random()),
                              min(max(queries_per_db // 8, 1), want["pull"] - stats.pairs.get("pull", 0)), stats)
                m.drop()
                if progress and time.perf_counter() - last[0] > 60:
                    last[0] = time.perf_counter()
                    print(f"[{last[0] - stats.t0:.0f} s] pairs {stats.pairs} mismatches {stats.mismatches} "
                          f"mentat-only errors {stats.mentat_errors}", file=sys.stderr, flush=True)
            if "tx" in kinds and stats.pairs.get("tx", 0) < want["tx"]:
                run_txs(m, ds, random.Random(rnd.random()), stats)
    finally:
        ds.close()
        m.close()
    return stats


def describe(kind, info):
    """A readable account of one mismatch (the database as EDN transactions)."""
    lines = [f"== {kind}: {info.get('why', '')}"]
    db = info.get("db")
    if db is not None:
        lines.append("schema: " + schema_edn(db.attrs))
        for tx in db.txs:
            lines.append("tx: " + gen_tx.tx_text(tx, db.by))
    for k, v in info.items():
        if k not in ("db", "why", "attrs"):
            lines.append(f"{k}: {v!r}"[:3000])
    return "\n".join(lines)


# the per-kind counts of a Stats, which --jobs adds up over its workers
COUNTS = ("pairs", "mismatches", "errors", "mentat_errors", "agreed")

# job j > 0 draws its databases from this seed: far from any seed a person would pick next
JOB_SEED_STRIDE = 1_000_003


def job_seed(seed, j):
    """The seed of job `j` of a run with `--seed seed` (job 0 is the run `--jobs 1` would make)."""
    return seed + j * JOB_SEED_STRIDE


def _job(args):
    """One worker process of `--jobs`: its share of the pairs; what it found, in picklable form."""
    pairs, seed, kinds, per_db, show, ext = args
    stats = run(pairs, seed, kinds=kinds, queries_per_db=per_db, progress=True, ext=ext)
    counts = {k: getattr(stats, k) for k in COUNTS + ("dbs",)}
    return counts, [f"(seed {seed}) " + describe(kind, info) for kind, info in stats.examples[:show]]


def run_jobs(pairs, seed, kinds, per_db, show, jobs, ext=None):
    """`run` split over `jobs` processes (each its own DuckDB and node), seeds from [`job_seed`]; the merged
    Stats (wall time from the start) and the descriptions of the first mismatches."""
    merged = Stats()
    shares = [pairs // jobs + (1 if j < pairs % jobs else 0) for j in range(jobs)]
    work = [(shares[j], job_seed(seed, j), kinds, per_db, show, ext) for j in range(jobs)]
    with multiprocessing.get_context("spawn").Pool(jobs) as pool:
        results = pool.map(_job, work)
    shown = []
    for counts, examples in results:
        for name in COUNTS:
            for kind, n in counts[name].items():
                merged.add(getattr(merged, name), kind, n)
        merged.dbs += counts["dbs"]
        shown.extend(examples)
    return merged, shown[:show]
