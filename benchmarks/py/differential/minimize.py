"""Shrinks a query mismatch to a small input: fewer where clauses, find elements and inputs, then fewer datoms
(the database rebuilt from its final state as one transaction, then cut down while the engines still disagree).
A mismatch is a disagreement of the comparison in harness.compare_query; DataScript's answer is the reference
while shrinking, and every minimized case is then checked by hand against Datomic's documented semantics."""
import copy
import random

import duckdb

from . import gen_tx
from .harness import compare_query
from .model import NAME, schema_ds, schema_edn


def datoms_of(model):
    return sorted((i, k, v) for i, avs in model.items() for k, vs in avs.items() for v in vs if k != NAME)


def build_tx(datoms, labels, by):
    """One transaction: every label named, then its datoms (refs through tempids)."""
    bodies = {i: {NAME: f"n{i}"} for i in labels}
    for i, k, v in datoms:
        a = by[k]
        val = ("temp", v) if a.type == "ref" else v
        if a.many:
            bodies[i].setdefault(k, []).append(val)
        else:
            bodies[i][k] = val
    return [("map", ("temp", i), bodies[i]) for i in labels]


class Case:
    def __init__(self, m, ds, attrs, q):
        self.m, self.ds, self.attrs, self.q = m, ds, attrs, q
        self.by = {a.ident: a for a in attrs}

    def disagree(self, datoms, labels, q):
        """True when the engines disagree on q over the database made of datoms."""
        if not labels:
            return False
        refs = {v for i, k, v in datoms if self.by[k].type == "ref"}
        if not refs <= set(labels):
            return False
        # inputs naming entities must name existing labels
        for _, (form, types), val in q.ins:
            rows = [val] if form == "scalar" else [val] if form == "tuple" else val
            for row in rows:
                row = row if isinstance(row, list) else [row]
                for t, x in zip(types, row):
                    if t == "entity" and x not in labels:
                        return False
        self.m.new()
        self.m.transact(schema_edn(self.attrs))
        self.ds.new(schema_ds(self.attrs))
        tx = build_tx(datoms, labels, self.by)
        mt, dt = gen_tx.render(tx, self.by)
        tids, err = self.m.transact(mt)
        d = self.ds.tx([dt])[0]
        if err or "error" in d:
            self.m.drop()
            return False
        m_ids = {int(k[1:]): v for k, v in tids.items() if k.startswith("t")}
        ds_ids = {int(k[1:]): v for k, v in d["tempids"].items() if k.startswith("t")}
        r = self.ds.q([{"q": q.text(True, spec="rel"), "inputs": q.ds_inputs(ds_ids)}])[0]
        try:
            rows = self.m.q(q.text(False), q.m_inputs(m_ids))
        except duckdb.Error:
            self.m.drop()
            return False
        self.m.drop()
        if "error" in r:
            return False
        self.last = (mt, q.text(False), q.m_inputs(m_ids), rows, r["r"])
        return compare_query(q, rows, r["r"], {v: k for k, v in m_ids.items()},
                             {v: k for k, v in ds_ids.items()}) is not None


def shrink_list(items, still_bad):
    """Removes chunks, then single elements, while still_bad(remaining) holds."""
    n = 2
    while len(items) >= 1:
        chunk = max(1, len(items) // n)
        removed = False
        for i in range(0, len(items), chunk):
            cand = items[:i] + items[i + chunk:]
            if still_bad(cand):
                items = cand
                removed = True
                break
        if not removed:
            if chunk == 1:
                break
            n = min(len(items), n * 2)
    return items


def minimize_query(m, ds, db, q):
    case = Case(m, ds, db.attrs, q)
    datoms = datoms_of(db.model)
    labels = sorted(db.model)
    if not case.disagree(datoms, labels, q):
        return None
    # where clauses
    q = copy.deepcopy(q)

    def with_where(ws):
        q2 = copy.deepcopy(q)
        q2.where = ws
        return q2
    ws = shrink_list(list(q.where), lambda ws: bool(ws) and case.disagree(datoms, labels, with_where(ws)))
    q.where = ws
    # rules no longer called
    # find elements
    if q.spec in ("rel", "tuple") and len(q.find) > 1:
        def with_find(fs):
            q2 = copy.deepcopy(q)
            q2.find = fs
            return q2
        q.find = shrink_list(list(q.find), lambda fs: bool(fs) and case.disagree(datoms, labels, with_find(fs)))
    # database: entities, then datoms
    labels = shrink_list(labels, lambda ls: case.disagree([d for d in datoms if d[0] in ls], ls, q))
    datoms = [d for d in datoms if d[0] in labels]
    datoms = shrink_list(datoms, lambda ds_: case.disagree(ds_, labels, q))
    case.disagree(datoms, labels, q)
    return {"schema": schema_edn([a for a in db.attrs if a.ident == NAME or any(a.ident == d[1] for d in datoms)
                                  or a.ident in q.text(False)]),
            "tx": case.last[0], "query": case.last[1], "inputs": case.last[2], "mentat": case.last[3],
            "datascript": case.last[4]}


def main():
    import argparse
    import json
    from .engines import DataScript, Mentat
    from .harness import Db, Stats, gen_query
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dbs", type=int, default=5)
    ap.add_argument("--per-db", type=int, default=200)
    ap.add_argument("--max", type=int, default=10)
    args = ap.parse_args()
    m, ds = Mentat(), DataScript()
    rnd = random.Random(args.seed)
    found = 0
    seen = set()
    for _ in range(args.dbs):
        st = Stats()
        db = Db(m, ds, random.Random(rnd.random()), rnd.randint(12, 30), st)
        g = gen_query.QGen(random.Random(rnd.random()), db.attrs, db.model)
        qs = [g.query() for _ in range(args.per_db)]
        dsr = ds.q([{"q": q.text(True, spec="rel"), "inputs": q.ds_inputs(db.ds_ids)} for q in qs])
        bad = []
        for q, d in zip(qs, dsr):
            if "error" in d:
                continue
            try:
                rows = m.q(q.text(False), q.m_inputs(db.m_ids))
            except duckdb.Error:
                continue
            if compare_query(q, rows, d["r"], db.m_inv, db.ds_inv):
                bad.append(q)
        m.drop()
        for q in bad:
            r = minimize_query(m, ds, db, q)
            if r and r["query"] not in seen:
                seen.add(r["query"])
                found += 1
                print(json.dumps(r, default=str, indent=1))
            if found >= args.max:
                return


if __name__ == "__main__":
    main()
