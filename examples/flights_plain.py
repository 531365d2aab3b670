"""The questions of examples/flights_queries.sql asked in plain SQL, the oracle of tests/test_flights.py and the
baseline of benchmarks/py/flights_bench.py.

`ORACLES[name]` answers the statement marked `-- query: <name>` with the same output columns and order; its
`{airlines}`, `{airports}`, `{planes}`, `{flights}` and `{weather}` are filled with a relation each: `read_csv(...)`
calls over the CSV files, or the names of tables loaded from them.
"""
import pathlib
import re

EXAMPLES = pathlib.Path(__file__).resolve().parent

# One oracle per `-- query: <name>` statement of examples/flights_queries.sql: the same question, in plain SQL
# over the CSV files ({airlines} etc. become read_csv calls), with the same output columns and order.
ORACLES = {
    "delay_by_airline": """
        SELECT a.name AS airline, round(avg(f.dep_delay), 2) AS avg_dep_delay, count(*) AS flights
        FROM {flights} f JOIN {airlines} a USING (carrier)
        WHERE f.dep_delay IS NOT NULL
        GROUP BY a.name ORDER BY avg_dep_delay DESC, airline""",
    "flights_per_dest": """
        SELECT a.name AS destination, count(*) AS flights
        FROM {flights} f JOIN {airports} a ON a.faa = f.dest
        GROUP BY a.name ORDER BY flights DESC, destination LIMIT 10""",
    "old_planes": """
        SELECT f.carrier,
               round(100.0 * count(*) FILTER (WHERE p.year < 1990) / count(*), 2) AS pct_before_1990,
               count(*) AS flights
        FROM {flights} f JOIN {planes} p USING (tailnum)
        WHERE p.year IS NOT NULL
        GROUP BY f.carrier ORDER BY pct_before_1990 DESC, carrier""",
    "rain_delay": """
        SELECT f.origin,
               round(avg(f.dep_delay) FILTER (WHERE w.precip = 0), 2) AS dry_delay,
               round(avg(f.dep_delay) FILTER (WHERE w.precip > 0), 2) AS rain_delay,
               count(*) FILTER (WHERE w.precip > 0) AS flights_in_rain
        FROM {flights} f JOIN {weather} w ON w.origin = f.origin AND w.time_hour = f.time_hour
        WHERE f.dep_delay IS NOT NULL AND w.precip IS NOT NULL
        GROUP BY f.origin ORDER BY origin""",
    "unknown_dests": """
        SELECT f.dest AS destination, count(*) AS flights
        FROM {flights} f WHERE f.dest NOT IN (SELECT faa FROM {airports})
        GROUP BY f.dest ORDER BY flights DESC, destination""",
}


def example_queries():
    """(name, SQL statement) for every `-- query: <name>` statement of examples/flights_queries.sql."""
    text = (EXAMPLES / "flights_queries.sql").read_text()
    found = re.findall(r"^-- query: (\w+)\n(.*?;)\s*$", text, flags=re.S | re.M)
    return [(name, sql) for name, sql in found]




def load_statements():
    """The SQL statements of examples/flights_load.sql (the CLI's dot commands dropped), in order, each with the
    flights table it imports (None for the setup statements). They expect the variables `flights_dir` and
    `examples_dir` to be set (SET VARIABLE)."""
    text = "\n".join(line for line in (EXAMPLES / "flights_load.sql").read_text().splitlines()
                     if not line.startswith("."))
    out = []
    for stmt in re.split(r";\s*\n", text):
        body = "\n".join(line for line in stmt.splitlines() if not line.strip().startswith("--")).strip().rstrip(";")
        if body:
            m = re.match(r"SELECT '(\w+)' AS \"table\"", body)
            out.append((m.group(1) if m else None, body))
    return out
