"""Fulltext benchmark over Debian's long package descriptions (issue 16).

    python3 examples/debian_extract.py build/debian        # the descriptions, from this machine's apt lists
    python3 benchmarks/py/fulltext_bench.py [--dir build/debian] [--reps 7]

Prints, in one run on this machine:
* indexing: the time of a mentat_import of (name, description) into a fresh store with :pkg/description
  fulltext, minus the same import with a non-fulltext attribute (both in one process, median of 3), the number of
  terms indexed and terms per second of that difference;
* index size: the postings and document tables copied into a fresh database file and checkpointed, in bytes per
  indexed term;
* search: p50 and p90 (ms) of 20 top-10 searches (`:order (desc ?score) :limit 10`), each run --reps times
  (mentat prepares a statement once per text and runs it again), then of 200 distinct two-word searches run once
  each (every one planned by DuckDB), beside tantivy's search time for the same searches over the same
  descriptions (its simple tokenizer, lowercase and English stemmer, one segment), when PyPI's tantivy is
  installed;
* with --store (a Debian store loaded by examples/debian_load.sql): p50 of the recursive dependency closure of a
  package (examples/debian_queries.sql's rules) and the closure's size; then every package's closure size at once,
  timed three ways over the same edges: one mentat_q (the recursive rule), one plain DuckDB recursive CTE over the
  extract's Parquet files (--dir), and networkx (descendants per package, when PyPI's networkx is installed). The
  three answers are compared: same packages, same sizes.
"""
import argparse
import os
import pathlib
import statistics
import sys
import tempfile
import time

import duckdb

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXT = pathlib.Path(os.environ.get("MENTAT_EXTENSION", ROOT / "build" / "mentat.duckdb_extension"))
QUERIES = ["web server", "python library", "+python +astronomy", "network file system", '"command line"',
           "image editor", "database -sqlite", "compression", "font", "bluetooth audio", "kernel module",
           "perl module", "spell checker dictionary", "video player", "game strategy", "ssl certificate",
           "compiler", "xml parser", "terminal emulator", "music"]


def timings(texts, reps, run, warm=False):
    """Sorted wall times (ms) of run(text), reps times per text (after one untimed run of each when warm)."""
    out = []
    for text in texts:
        if warm:
            run(text)
        for _ in range(reps):
            t = time.perf_counter()
            run(text)
            out.append((time.perf_counter() - t) * 1000)
    return sorted(out)


def spread(times, digits=2):
    return f"p50 {statistics.median(times):.{digits}f} ms, p90 {times[int(len(times) * 0.9)]:.{digits}f} ms"


def distinct_searches(n=200, seed=16):
    """n two-word searches, no two alike, from the words of QUERIES: each compiles to a statement of its own, so a
    search's time includes DuckDB's planning of it (no prepared statement from an earlier run of the same text)."""
    import random
    words = sorted({w.strip('"+-') for text in QUERIES for w in text.split()})
    pairs = [f"{a} {b}" for i, a in enumerate(words) for b in words[i + 1:]]
    return random.Random(seed).sample(pairs, n)


def connect(path):
    con = duckdb.connect(str(path), config={"allow_unsigned_extensions": "true"})
    con.execute(f"LOAD '{EXT}'")
    return con


def load(tmp, fulltext, src):
    path = pathlib.Path(tmp) / f"s{time.monotonic_ns()}.duckdb"
    con = connect(path)
    ft = "true" if fulltext else "false"
    con.execute(f"""SELECT * FROM mentat_transact('[{{:db/ident :pkg/name :db/valueType :db.type/string
        :db/cardinality :db.cardinality/one :db/unique :db.unique/identity}}
        {{:db/ident :pkg/description :db/valueType :db.type/string :db/cardinality :db.cardinality/one
          :db/fulltext {ft}}}]')""").fetchall()
    t = time.perf_counter()
    con.execute(f"""SELECT * FROM mentat_import('SELECT name AS ":pkg/name", long_description AS ":pkg/description"
                    FROM read_parquet(''{src}'')')""").fetchall()
    return con, time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=str(ROOT / "build" / "debian"))
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--store", help="a Debian store (examples/debian_load.sql) for the closure timing")
    ap.add_argument("--package", default="libreoffice-writer,sagetex,openstack-proxy-node,riseup-vpn,plasma-mobile",
                    help="comma list of packages whose closure is timed (the defaults: 381 names, then four of "
                         "about 1,000)")
    args = ap.parse_args()
    if args.store:
        closure(args)
    src = os.path.join(args.dir, "packages.parquet")
    with tempfile.TemporaryDirectory() as tmp:
        with_ft, without = [], []
        for _ in range(3):
            con, t = load(tmp, True, src)
            with_ft.append(t)
            _, t2 = load(tmp, False, src)
            without.append(t2)
        aid = con.execute("SELECT entid FROM mentat_schema() WHERE ident = ':pkg/description'").fetchone()[0]
        terms, docs = con.execute(f"SELECT sum(len), count(*) FROM mentat.ftd_{aid}").fetchone()
        postings = con.execute(f"SELECT count(*) FROM mentat.ft_{aid}").fetchone()[0]
        dt = statistics.median(with_ft) - statistics.median(without)
        print(f"indexing: {docs} descriptions, {terms} terms, {postings} postings; import {statistics.median(with_ft):.2f} s "
              f"with fulltext, {statistics.median(without):.2f} s without: {dt:.2f} s indexing, "
              f"{terms / dt / 1e6:.2f} M terms/s")
        copy = pathlib.Path(tmp) / "index_only.duckdb"
        con.execute(f"ATTACH '{copy}' AS ix")
        con.execute(f"CREATE TABLE ix.ft AS SELECT * FROM mentat.ft_{aid}")
        con.execute(f"CREATE TABLE ix.ftd AS SELECT * FROM mentat.ftd_{aid}")
        con.execute(f"CREATE TABLE ix.ftt AS SELECT * FROM mentat.ftt_{aid}")
        con.execute("CREATE INDEX ftt_term ON ix.ftt (term)")
        con.execute("DETACH ix")
        size = copy.stat().st_size
        print(f"index size: {size / 1e6:.1f} MB on disk, {size / terms:.2f} bytes per indexed term")
        q = """[:find ?name ?score :in $ ?s :where [(fulltext $ :pkg/description ?s) [[?p _ _ ?score]]]
                [?p :pkg/name ?name] :order (desc ?score) :limit 10]"""

        def search(text):
            inputs = '["' + text.replace('"', '\\"') + '"]'
            con.execute("SELECT * FROM mentat_q(?, inputs := ?)", [q, inputs]).fetchall()

        times = timings(QUERIES, args.reps, search, warm=True)
        print(f"mentat search, top 10: {spread(times)} ({len(times)} searches; each text again and again, so its "
              f"statement is prepared once)")
        fresh = timings(distinct_searches(), 1, search)
        print(f"mentat search, top 10, {len(fresh)} distinct two-word searches, each once: {spread(fresh)}")
        try:
            import tantivy
        except ImportError:
            print("tantivy: not installed (pip install tantivy)")
            return
        rows = duckdb.sql(f"SELECT name, long_description FROM read_parquet('{src}')").fetchall()
        sb = tantivy.SchemaBuilder()
        sb.add_text_field("name", stored=True, tokenizer_name="raw")
        sb.add_text_field("text", stored=False, tokenizer_name="en_stem_simple", index_option="position")
        os.makedirs(tmp + "/tv")
        index = tantivy.Index(sb.build(), path=tmp + "/tv")
        index.register_tokenizer("en_stem_simple", tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
                                 .filter(tantivy.Filter.lowercase()).filter(tantivy.Filter.stemmer("english")).build())
        w = index.writer(heap_size=200_000_000, num_threads=1)
        t = time.perf_counter()
        for name, text in rows:
            w.add_document(tantivy.Document(name=name, text=text or ""))
        w.commit()
        w.wait_merging_threads()
        tv_index = time.perf_counter() - t
        index.reload()
        s = index.searcher()

        def tv_search(text):
            [s.doc(a)["name"] for _, a in s.search(index.parse_query(text, ["text"]), 10).hits]

        tv = timings(QUERIES, args.reps, tv_search)
        print(f"tantivy (Python bindings, same run): indexing {tv_index:.2f} s for the same descriptions, "
              f"search top 10 {spread(tv, 3)}")
        tv = timings(distinct_searches(), 1, tv_search)
        print(f"tantivy, the {len(tv)} distinct searches: {spread(tv, 3)}")


def closure(args):
    text = (ROOT / "examples" / "debian_queries.sql").read_text()
    start = text.index("SET VARIABLE deb_rules = '") + len("SET VARIABLE deb_rules = '")
    rules = text[start:text.index("';", start)]
    con = connect(args.store)
    q = "[:find (count ?q) . :in $ % ?name :where [?p :pkg/name ?name] (closure ?p ?q)]"
    for package in args.package.split(","):
        inputs = f'[{rules} "{package}"]'
        n = con.execute("SELECT * FROM mentat_q(?, inputs := ?)", [q, inputs]).fetchone()[0]
        times = []
        for _ in range(args.reps):
            t = time.perf_counter()
            con.execute("SELECT * FROM mentat_q(?, inputs := ?)", [q, inputs]).fetchall()
            times.append((time.perf_counter() - t) * 1000)
        print(f"closure of {package}: {n} names, p50 {statistics.median(times):.1f} ms ({args.reps} runs)")
    all_closures(con, rules, args.dir)
    con.close()


# Dependency edges between names, as the rules define them: a package's Depends / Pre-Depends targets (any
# alternative), and every package providing a target.
EDGES_SQL = """
    WITH d AS (SELECT DISTINCT package AS p, target AS t FROM read_parquet('{dir}/deps.parquet')
               WHERE kind IN ('depends', 'pre-depends'))
    SELECT p, t AS q FROM d
    UNION SELECT d.p, v.package FROM d JOIN read_parquet('{dir}/provides.parquet') v ON v.provided = d.t"""


def all_closures(con, rules, data_dir):
    """Every real package's closure size (names reached through one or more dep steps), three ways."""
    q = "[:find ?name (count ?q) :in $ % :where (closure ?p ?q) [?p :pkg/version _] [?p :pkg/name ?name]]"
    t = time.perf_counter()
    got = dict(con.execute("SELECT * FROM mentat_q(?, inputs := ?)", [q, f"[{rules}]"]).fetchall())
    t_mentat = time.perf_counter() - t
    plain = duckdb.connect()
    edges = EDGES_SQL.format(dir=data_dir)
    t = time.perf_counter()
    sql = plain.execute(f"""
        WITH RECURSIVE e AS ({edges}),
             c(s, q) AS (SELECT p, q FROM e UNION SELECT c.s, e.q FROM c JOIN e ON c.q = e.p)
        SELECT s, count(*) FROM c WHERE s IN (SELECT name FROM read_parquet('{data_dir}/packages.parquet'))
        GROUP BY s""").fetchall()
    t_sql = time.perf_counter() - t
    sql = dict(sql)
    line = (f"every closure at once: {len(got)} packages, {sum(got.values())} (package, name) pairs; "
            f"mentat_q {t_mentat:.2f} s, plain DuckDB SQL {t_sql:.2f} s")
    try:
        import networkx as nx
    except ImportError:
        nx = None
    if nx is not None:
        pairs = plain.execute(edges).fetchall()
        names = [r[0] for r in plain.execute(f"SELECT name FROM read_parquet('{data_dir}/packages.parquet')").fetchall()]
        t = time.perf_counter()
        g = nx.DiGraph(pairs)
        cyclic = {v for comp in nx.strongly_connected_components(g) if len(comp) > 1 for v in comp}
        cyclic |= {v for v in g if g.has_edge(v, v)}
        ours = {}
        for p in names:
            if p in g:
                n = len(nx.descendants(g, p)) + (p in cyclic)
                if n:
                    ours[p] = n
        t_nx = time.perf_counter() - t
        line += f", networkx {t_nx:.2f} s (graph built from the edge list inside the timing)"
        assert ours == sql, "networkx and plain SQL disagree"
    assert got == sql, f"mentat and plain SQL disagree on {len(set(got.items()) ^ set(sql.items()))} packages"
    print(line + "; the answers are equal")


if __name__ == "__main__":
    sys.exit(main())
