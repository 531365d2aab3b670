"""Bulk load through mentat_transact (issue 2's benchmark): datoms/s, single-datom tx/s, bytes per datom.

usage: python3 benchmarks/py/bulk_load.py --data DIR [--db PATH] [--single 2000]
DIR is the output of `mentat-gen` (schema.edn, tx/*.edn, truth.json). Prints figures; asserts nothing on time.
"""
import argparse
import json
import os
import pathlib
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from common import connect, connect_fresh, datom_count  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--db", default=None)
    ap.add_argument("--single", type=int, default=2000, help="single-datom transactions to time")
    args = ap.parse_args()
    data = pathlib.Path(args.data)
    truth = json.loads((data / "truth.json").read_text())
    db = pathlib.Path(args.db or data / "bulk.duckdb")
    con = connect_fresh(db)
    con.execute("SELECT * FROM mentat_transact(?)", [(data / "schema.edn").read_text()]).fetchall()
    files = sorted((data / "tx").glob("*.edn"))
    texts = [f.read_text() for f in files]
    t0 = time.perf_counter()
    total = 0
    per_tx = []
    for text in texts:
        s = time.perf_counter()
        total += con.execute("SELECT datoms FROM mentat_transact(?)", [text]).fetchall()[0][0]
        per_tx.append(time.perf_counter() - s)
    elapsed = time.perf_counter() - t0
    user_datoms = total - len(texts)  # less one :db/txInstant datom per transaction
    expected = truth["datoms"]["initial"]
    in_store = datom_count(con)
    print(f"bulk_load: {len(texts)} transactions, {user_datoms} datoms in {elapsed:.2f} s "
          f"= {user_datoms / elapsed:,.0f} datoms/s (median tx {statistics.median(per_tx) * 1000:.1f} ms)")
    print(f"  datoms in store (current, excluding schema/tx): {in_store}, generator truth: {expected}")
    if user_datoms != expected:
        sys.exit(f"datom count mismatch: transacted {user_datoms}, truth {expected}")
    # single-datom transactions: alternate the two write_mixed forms
    states = [":state/open", ":state/closed", ":state/resolved"]
    ents = [r[0] for r in con.execute(
        "SELECT e FROM mentat.cur_102 ORDER BY e LIMIT 100").fetchall()] if False else None
    sid = con.execute("SELECT e FROM mentat.cur_1 WHERE v = ':issue/state'").fetchall()[0][0]
    ents = [r[0] for r in con.execute(f"SELECT e FROM mentat.cur_{sid} ORDER BY e LIMIT 100").fetchall()]
    t0 = time.perf_counter()
    for i in range(args.single):
        e = ents[i % len(ents)]
        if i % 2 == 0:
            edn = f"[[:db/add {e} :issue/state {states[i % 3]}]]"
        else:
            edn = f'[[:db/add {e} :issue/label [:label/name "label-{i % 40}"]]]'
        con.execute("SELECT tx FROM mentat_transact(?)", [edn]).fetchall()
    el = time.perf_counter() - t0
    print(f"single-datom transactions: {args.single} in {el:.2f} s = {args.single / el:,.0f} tx/s")
    con.execute("CHECKPOINT")
    con.close()
    size = os.path.getsize(db)
    con = connect(db)
    n = datom_count(con, all_attrs=True)
    print(f"database file after CHECKPOINT: {size / 1e6:.1f} MB for {n} current datoms "
          f"= {size / n:.1f} bytes/datom (history included in the file)")


if __name__ == "__main__":
    main()
