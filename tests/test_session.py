"""mentat as part of the caller's DuckDB session: USE and the search path, the session's time zone, interrupts
that reach the inner work (and a call that reports an error has written nothing), catalogs detached and attached
again under another file, and string values with NUL bytes. Each expected value comes from DuckDB itself in the
same session (its own casts, its own catalogs) or from the data the test wrote."""
import datetime
import json
import os
import pathlib
import re
import signal
import subprocess
import threading
import time
import zoneinfo

import duckdb
import pytest

from conftest import EXT, cli, connect, q, rows, transact

KEY = ("[{:db/ident :f/key :db/valueType :db.type/string :db/cardinality :db.cardinality/one "
       ":db/unique :db.unique/identity} "
       "{:db/ident :f/n :db/valueType :db.type/long :db/cardinality :db.cardinality/one} "
       "{:db/ident :f/at :db/valueType :db.type/instant :db/cardinality :db.cardinality/one}]")


def stores(con):
    """(catalog, schema) of every mentat store DuckDB itself sees, from its own catalog functions."""
    return sorted(rows(con, "SELECT database_name, schema_name FROM duckdb_tables() WHERE table_name = 'partitions'"))


# ---------------------------------------------------------------------------------------------------- USE


def test_use_makes_unqualified_stores_resolve_in_the_current_catalog(tmp_path):
    con = connect(tmp_path / "first.duckdb")
    con.execute(f"ATTACH '{tmp_path / 'project.duckdb'}' AS project").fetchall()
    con.execute("USE project").fetchall()
    transact(con, KEY)
    transact(con, '[{:f/key "p"}]')
    transact(con, KEY, store="crm")
    transact(con, '[{:f/key "c"}]', store="crm")
    assert stores(con) == [("project", "crm"), ("project", "mentat")]
    assert q(con, "[:find ?k :where [_ :f/key ?k]]") == [("p",)]
    assert q(con, "[:find ?k :where [_ :f/key ?k]]", store="crm") == [("c",)]
    assert rows(con, "SELECT ident FROM mentat_schema(store := 'crm') WHERE ident = ':f/key'") == [(":f/key",)]
    assert rows(con, "FROM query(mentat_sql('[:find ?k :where [_ :f/key ?k]]'))") == [("p",)]
    assert rows(con, "FROM query(mentat_sql('[:find ?k :where [_ :f/key ?k]]', '[]', 'crm'))") == [("c",)]
    # back in the database the process opened first: a store of its own, apart from project's
    con.execute("USE first").fetchall()
    transact(con, KEY)
    transact(con, '[{:f/key "f"}]')
    assert q(con, "[:find ?k :where [_ :f/key ?k]]") == [("f",)]
    assert q(con, "[:find ?k :where [_ :f/key ?k]]", store="project.mentat") == [("p",)]
    assert stores(con) == [("first", "mentat"), ("project", "crm"), ("project", "mentat")]


def test_a_search_path_of_several_catalogs_finds_the_store_where_it_is(tmp_path):
    con = connect(tmp_path / "first.duckdb")
    for name in ("a", "b"):
        con.execute(f"ATTACH '{tmp_path / (name + '.duckdb')}' AS {name}").fetchall()
    transact(con, KEY, store="b.crm")
    transact(con, '[{:f/key "in b"}]', store="b.crm")
    con.execute("SET search_path = 'a,b'").fetchall()
    # like an unqualified table: the first catalog of the path that holds it
    assert q(con, "[:find ?k :where [_ :f/key ?k]]", store="crm") == [("in b",)]
    assert rows(con, "SELECT count(*) FROM mentat_pull_many('[*]', [1], store := 'crm')") == [(1,)]
    # a new store goes where a new table would: the first catalog of the path
    transact(con, KEY, store="fresh")
    assert ("a", "fresh") in stores(con)


def test_use_in_the_cli(tmp_path):
    script = (f"LOAD '{EXT}'; ATTACH '{tmp_path / 'project.duckdb'}' AS project; USE project;\n"
              f"SELECT datoms FROM mentat_transact('{KEY}');\n"
              "SELECT datoms FROM mentat_transact('[{:f/key \"cli\"}]');\n"
              "SELECT database_name FROM duckdb_tables() WHERE table_name = 'partitions';\n")
    p = subprocess.run(["duckdb", "-unsigned", "-csv", str(tmp_path / "first.duckdb")], input=script,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().splitlines()[-2:] == ["database_name", "project"]


# ---------------------------------------------------------------------------------------------- time zone


def test_naive_instants_are_read_in_the_callers_time_zone(con):
    transact(con, KEY)
    t1 = transact(con, '[{:f/key "one"}]')
    time.sleep(0.01)
    transact(con, '[{:f/key "two"}]')
    con.execute("SET TimeZone = 'Asia/Tokyo'").fetchall()
    tokyo = zoneinfo.ZoneInfo("Asia/Tokyo")
    wall = t1["tx_instant"].astimezone(tokyo).replace(tzinfo=None)  # tx 1's instant as Tokyo wall time
    query = "[:find ?k :where [_ :f/key ?k]]"
    # a naive Python datetime, a TIMESTAMP literal and text without offset all mean Tokyo time, as in DuckDB's casts
    assert q(con, query, as_of=wall) == [("one",)]
    lit = wall.isoformat(sep=" ")
    assert rows(con, f"SELECT * FROM mentat_q('{query}', as_of := TIMESTAMP '{lit}')") == [("one",)]
    assert rows(con, f"SELECT * FROM mentat_q('{query}', as_of := '{lit}')") == [("one",)]
    assert sorted(q(con, query, since=wall)) == [("two",)]
    # an instant with its zone is absolute, whatever the session's zone
    assert q(con, query, as_of=t1["tx_instant"]) == [("one",)]
    assert rows(con, "SELECT count(*) FROM mentat_pull('[:f/key]', '[:f/key \"two\"]', as_of := ?) "
                     "WHERE pull IS NULL", [wall]) == [(1,)]


def test_instants_printed_as_text_follow_the_session(con):
    transact(con, KEY)
    transact(con, '[{:f/key "x" :f/at #inst "2024-03-01T00:30:00Z"}]')
    for zone in ("Asia/Tokyo", "America/New_York", "UTC"):
        con.execute(f"SET TimeZone = '{zone}'").fetchall()
        expected = rows(con, "SELECT (TIMESTAMPTZ '2024-03-01 00:30:00+00')::VARCHAR")[0][0]
        assert rows(con, "SELECT v FROM mentat_datoms('AEVT', a := ':f/at')") == [(expected,)]
        # the typed answer is the same instant in every zone
        assert q(con, "[:find ?at . :where [_ :f/at ?at]]")[0][0] == \
            datetime.datetime(2024, 3, 1, 0, 30, tzinfo=datetime.timezone.utc)


def test_large_and_small_transactions_store_values_as_written_in_any_time_zone(con):
    """A transaction of more than 16 datoms appends its assertions straight into the attribute tables (instants as
    UTC microseconds), a small one writes them with statements; under a session zone far from UTC both store
    what the EDN says. Expected values are computed here from the literals."""
    transact(con, """[{:db/ident :z/k :db/valueType :db.type/string :db/cardinality :db.cardinality/one
                       :db/unique :db.unique/identity}
                      {:db/ident :z/at :db/valueType :db.type/instant :db/cardinality :db.cardinality/one}
                      {:db/ident :z/n :db/valueType :db.type/long :db/cardinality :db.cardinality/one}
                      {:db/ident :z/x :db/valueType :db.type/double :db/cardinality :db.cardinality/one}
                      {:db/ident :z/b :db/valueType :db.type/boolean :db/cardinality :db.cardinality/one}
                      {:db/ident :z/kw :db/valueType :db.type/keyword :db/cardinality :db.cardinality/one}
                      {:db/ident :z/r :db/valueType :db.type/ref :db/cardinality :db.cardinality/one}]""")
    con.execute("SET TimeZone = 'Pacific/Kiritimati'").fetchall()  # UTC+14
    base = datetime.datetime(2024, 3, 1, 0, 30, tzinfo=datetime.timezone.utc)

    def entity(i):
        at = (base + datetime.timedelta(minutes=i)).strftime("%Y-%m-%dT%H:%M:%SZ")
        # a tempid of the same transaction, or (the small one) a lookup ref to an entity of the large one
        ref = "" if i == 0 else f' :z/r "t{i - 1}"' if i < 40 else ' :z/r [:z/k "k39"]'
        return (f'{{:db/id "t{i}" :z/k "k{i}" :z/at #inst "{at}" :z/n {i * 7 - 100} :z/x {i}.5 :z/b {str(i % 2 == 0).lower()} '
                f':z/kw :kw/v{i}{ref}}}')

    big = transact(con, "[" + " ".join(entity(i) for i in range(40)) + "]")
    assert big["datoms"] == 40 * 6 + 39 + 1
    small = transact(con, "[" + entity(40) + "]")
    assert small["datoms"] == 7 + 1
    con.execute("SET TimeZone = 'UTC'").fetchall()
    got = sorted(q(con, "[:find ?k ?at ?n ?x ?b ?kw :where [?e :z/k ?k] [?e :z/at ?at] [?e :z/n ?n] [?e :z/x ?x] "
                        "[?e :z/b ?b] [?e :z/kw ?kw]]"))
    want = sorted((f"k{i}", base + datetime.timedelta(minutes=i), i * 7 - 100, i + 0.5, i % 2 == 0, f":kw/v{i}")
                  for i in range(41))
    assert got == want
    refs = q(con, "[:find ?k ?p :where [?e :z/r ?f] [?e :z/k ?k] [?f :z/k ?p]]")
    assert sorted(refs) == sorted((f"k{i}", f"k{i - 1}") for i in range(1, 41))


# ---------------------------------------------------------------------------------------------- interrupts

SLOW = ("[:find (count ?a) :where [?a :f/g ?g] [?b :f/g ?g] [?a :f/n ?x] [?b :f/n ?y] [(< ?x ?y)]]")


def big_store(con, n):
    transact(con, "[{:db/ident :f/n :db/valueType :db.type/long :db/cardinality :db.cardinality/one} "
                  "{:db/ident :f/g :db/valueType :db.type/long :db/cardinality :db.cardinality/one}]")
    con.execute(f"""SELECT * FROM mentat_import('SELECT i AS ":f/n", i % 1000 AS ":f/g" FROM range({n}) t(i)')""") \
        .fetchall()


def run_interrupted(con, sql, after):
    """Runs `sql` on a cursor of `con`, interrupting it `after` seconds in: (seconds taken, rows or the error)."""
    c = con.cursor()
    timer = threading.Timer(after, c.interrupt)
    start = time.perf_counter()
    timer.start()
    try:
        out = c.execute(sql).fetchall()
    except duckdb.Error as e:
        out = e
    took = time.perf_counter() - start
    timer.cancel()
    return took, out


def count(con, attr):
    """Entities with `attr` (Datomic's scalar find of a count over no rows is nil: no row)."""
    found = rows(con, f"SELECT * FROM mentat_q('[:find (count ?e) . :where [?e {attr}]]')")
    return found[0][0] if found else 0


def test_an_interrupt_stops_a_long_query_promptly(con):
    big_store(con, 1_000_000)
    sql = f"SELECT * FROM mentat_q('{SLOW}')"
    start = time.perf_counter()
    # every ?a but the largest of its group of 1000 has a ?b above it: 1000 groups of 999
    assert rows(con, sql) == [(1000 * 999,)]
    whole = time.perf_counter() - start
    took, out = run_interrupted(con, sql, 0.2)
    assert isinstance(out, duckdb.Error) and "nterrupt" in str(out), out
    # generous bound against the uninterrupted time: the inner query stopped, it did not run to completion
    assert took < 0.2 + max(1.0, whole / 4) and took < whole * 0.75, (took, whole)
    assert rows(con, "SELECT 42") == [(42,)]  # the connection and mentat's pool are fine afterwards
    assert rows(con, f"SELECT * FROM mentat_q('[:find (count ?e) . :where [?e :f/g 7]]')") == [(1000,)]


def test_an_interrupted_import_reports_an_error_only_when_it_wrote_nothing(con):
    big_store(con, 10)
    n = 3_000_000
    sql = f"""SELECT * FROM mentat_import('SELECT i + 1000000000 AS ":f/n", 5 AS ":f/g" FROM range({n}) t(i)')"""
    errors = successes = 0
    expected = count(con, ":f/n")
    for after in (0.01, 0.05, 0.1, 0.2, 0.3, 0.5, 0.8, 1.2, 2.0):
        took, out = run_interrupted(con, sql, after)
        if isinstance(out, duckdb.Error):
            errors += 1
            assert took < after + 1.0, (after, took)
        else:
            successes += 1
            assert out[0][2] == n
            expected += n
        # an error means nothing was written; a success means everything was
        assert count(con, ":f/n") == expected, (after, out)
    assert errors > 0


def test_an_interrupted_transaction_writes_nothing(con):
    transact(con, KEY)
    n = 150_000
    expected = 0
    errors = []
    # An interrupt that lands while DuckDB still parses or binds the calling statement is dropped by DuckDB itself
    # (it clears the flag when execution starts), so several moments are tried; each must keep the invariant.
    for attempt, after in enumerate((0.1, 0.25, 0.5, 1.0)):
        edn = "[" + " ".join(f'{{:f/key "k{attempt}-{i}" :f/n {i}}}' for i in range(n)) + "]"
        took, out = run_interrupted(con, "SELECT datoms FROM mentat_transact(?)".replace("?", f"'{edn}'"), after)
        if isinstance(out, duckdb.Error):
            errors.append(after)
        else:
            expected += n
        assert count(con, ":f/key") == expected, (after, out)
    assert errors, "no interrupt reached a running transaction"


def test_an_interrupted_export_and_import_store_leave_nothing(con, tmp_path):
    big_store(con, 2_000_000)
    export_errors = import_errors = 0
    for attempt, after in enumerate((0.02, 0.05, 0.1, 0.2)):
        out_dir = tmp_path / f"export{attempt}"
        took, out = run_interrupted(con, f"SELECT * FROM mentat_export('{out_dir}')", after)
        files = sorted(p.name for p in out_dir.iterdir()) if out_dir.exists() else []
        if isinstance(out, duckdb.Error):
            export_errors += 1
            assert files == [], (after, files)  # nothing, not even the staging directory
        else:
            # the files counted, and the manifest written last
            assert "partitions.parquet" in files and "manifest.json" in files
            assert len([f for f in files if f.endswith(".parquet")]) == out[0][0]
    good = tmp_path / "complete"
    assert rows(con, f"SELECT files > 0 FROM mentat_export('{good}')") == [(True,)]
    for attempt, after in enumerate((0.02, 0.05, 0.1, 0.2)):
        store = f"copy{attempt}"
        took, out = run_interrupted(con, f"SELECT * FROM mentat_import_store('{good}', store := '{store}')", after)
        if isinstance(out, duckdb.Error):
            import_errors += 1
            assert all(s != store for _, s in stores(con)), (after, out)
        else:
            assert q(con, "[:find (count ?e) . :where [?e :f/g 7]]", store=store) == [(2000,)]
    assert export_errors and import_errors, (export_errors, import_errors)


def cli_binary():
    """The DuckDB CLI executable itself (the `duckdb` on PATH is a Python launcher that does not pass SIGINT on)."""
    import duckdb_cli
    return pathlib.Path(duckdb_cli.__file__).parent / "duckdb"


def test_ctrl_c_in_the_cli_stops_a_long_query(tmp_path):
    db = tmp_path / "cli.duckdb"
    setup = (f"LOAD '{EXT}';\n"
             "SELECT datoms FROM mentat_transact('[{:db/ident :f/n :db/valueType :db.type/long "
             ":db/cardinality :db.cardinality/one} {:db/ident :f/g :db/valueType :db.type/long "
             ":db/cardinality :db.cardinality/one}]');\n"
             "SELECT entities FROM mentat_import('SELECT i AS \":f/n\", i % 1000 AS \":f/g\" "
             "FROM range(1000000) t(i)');\n")
    p = subprocess.run([str(cli_binary()), "-unsigned", "-csv", str(db)], input=setup, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0 and p.stdout.strip().endswith("1000000"), (p.stdout, p.stderr)
    script = f"LOAD '{EXT}';\nSELECT 'started' AS s;\nSELECT * FROM mentat_q('{SLOW}');\n"
    p = subprocess.Popen([str(cli_binary()), "-unsigned", "-csv", str(db)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    start = time.perf_counter()
    p.stdin.write(script)
    p.stdin.close()
    time.sleep(1.5)
    p.send_signal(signal.SIGINT)
    p.wait(timeout=120)
    took = time.perf_counter() - start
    out = p.stdout.read()
    assert "started" in out, (out, p.stderr.read())  # the script ran up to the slow query
    assert "999000" not in out, out
    # the same query uninterrupted takes several seconds (test_an_interrupt_stops_a_long_query_promptly)
    assert took < 1.5 + 1.5, took



class TerminalCli:
    """The DuckDB CLI run interactively on a pseudo-terminal, as a user at a terminal runs it. The terminal is the
    CLI's controlling terminal, so the Ctrl-C typed into it (byte 0x03) is turned into SIGINT by the kernel's line
    discipline, exactly as at a keyboard; the CLI then stops the running statement and prompts again."""

    PROMPT = b"mentat> "

    def __init__(self, db):
        import fcntl
        import pty
        import termios

        def controlling_terminal():
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        self.master, slave = pty.openpty()
        # a Ctrl-C that comes before the CLI has read the typed line would discard it (the terminal flushes its
        # input on an interrupt): NOFLSH keeps it, so that every line typed runs
        attrs = termios.tcgetattr(slave)
        attrs[3] |= termios.NOFLSH
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
        # -dark-mode and TERM=dumb: no terminal queries (colour, cursor position) that nobody would answer
        self.proc = subprocess.Popen([str(cli_binary()), "-unsigned", "-csv", "-dark-mode", str(db)],
                                     env={**os.environ, "TERM": "dumb"}, stdin=slave, stdout=slave, stderr=slave,
                                     preexec_fn=controlling_terminal, close_fds=True)
        os.close(slave)
        self._read_until(b"D ")
        self.run(f".prompt '{self.PROMPT.decode()}'")
        assert self.run(f"LOAD '{EXT}';")[0] == []

    def _read_until(self, end, timeout=300):
        import select
        buf, deadline = b"", time.monotonic() + timeout
        while time.monotonic() < deadline:
            if select.select([self.master], [], [], 0.05)[0]:
                buf += os.read(self.master, 1 << 16)
                if buf.replace(b"^C", b"").endswith(end):  # a Ctrl-C after the statement ended echoes at the prompt
                    return buf.replace(b"^C", b"")
        raise AssertionError(f"no prompt from the CLI after {timeout} s: {buf[-2000:]!r}")

    def run(self, sql, ctrl_c_after=None):
        """Types `sql` and Enter, then Ctrl-C `ctrl_c_after` seconds later if given: (lines printed, seconds until
        the prompt came back). The echo of the typed line and of ^C is left out."""
        start = time.monotonic()
        os.write(self.master, sql.encode() + b"\n")
        if ctrl_c_after is not None:
            time.sleep(ctrl_c_after)
            os.write(self.master, b"\x03")
        out = self._read_until(self.PROMPT)
        took = time.monotonic() - start
        text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out[:-len(self.PROMPT)].decode())  # terminal control codes
        lines = [l for l in text.splitlines() if l.strip()]
        assert lines and lines[0].startswith(sql[:20]), lines  # the echo
        return lines[1:], took

    def close(self):
        os.write(self.master, b".quit\n")
        self.proc.wait(timeout=60)
        os.close(self.master)


def test_ctrl_c_at_the_cli_prompt_stops_an_import_a_transaction_and_an_export(tmp_path):
    db = tmp_path / "cli.duckdb"
    term = TerminalCli(db)
    try:
        # three attributes of three datoms, one :db/unique, the :db/txInstant
        assert term.run(f"SELECT datoms FROM mentat_transact('{KEY}');")[0] == ["datoms", "11"]

        def count(attr):
            found = term.run(f"SELECT * FROM mentat_q('[:find (count ?e) . :where [?e {attr}]]');")[0]
            assert found[0] == "count_e", found
            return int(found[1]) if len(found) > 1 else 0  # a count over no rows is no row (Datomic: nil)

        # The CLI prints no text for a statement that Ctrl-C stopped, and none either for one that finished just as
        # Ctrl-C came (DuckDB's own `INSERT ... RETURNING` in the same CLI: 46 of 300 such calls committed and printed
        # nothing). So a call that printed its row wrote all of it; one that printed nothing wrote all or nothing,
        # never a part; and Ctrl-C must have stopped some call with nothing written.
        expected = 0

        def outcome(out, n, row, what):
            nonlocal expected
            now = count(":f/key")
            if out:
                assert out == row, out
                assert now == expected + n, (what, out, now, expected)
            else:
                assert now in (expected, expected + n), (what, now, expected)  # all or nothing
            stopped = not out and now == expected
            expected = now
            return stopped

        # an import
        n, stopped = 2_000_000, []
        for attempt, after in enumerate((0.05, 0.2, 0.5, 1.0)):
            out, took = term.run(f"""SELECT entities FROM mentat_import('SELECT ''i{attempt}-'' || i AS ":f/key", """
                                f"""i AS ":f/n" FROM range({n}) t(i)');""", after)
            if outcome(out, n, ["entities", str(n)], f"import, Ctrl-C after {after} s"):
                stopped.append(after)
                assert took < after + 3.0, (after, took)
        assert stopped, "no Ctrl-C reached a running import"

        # a large transaction, its EDN built by DuckDB itself into a session variable
        n, stopped = 150_000, []
        for attempt, after in enumerate((0.1, 0.3, 0.8)):
            term.run(f"""SET VARIABLE edn = (SELECT '[' || string_agg('{{:f/key "t{attempt}-' || i || '" :f/n ' """
                    f"""|| i || '}}', ' ') || ']' FROM range({n}) t(i));""")
            out, took = term.run("SELECT datoms FROM mentat_transact(getvariable('edn'));", after)
            if outcome(out, n, ["datoms", str(2 * n + 1)], f"transaction, Ctrl-C after {after} s"):
                stopped.append(after)
        assert stopped, "no Ctrl-C reached a running transaction"

        # an export: one that Ctrl-C stopped leaves no file behind (not even its staging directory), one that
        # finished leaves every file its manifest names
        stopped = []
        for attempt, after in enumerate((0.01, 0.03, 0.1)):
            out_dir = tmp_path / f"export{attempt}"
            out, took = term.run(f"SELECT files FROM mentat_export('{out_dir}');", after)
            files = sorted(p.name for p in out_dir.iterdir()) if out_dir.exists() else []
            if files:
                assert "manifest.json" in files, files
                manifest = json.loads((out_dir / "manifest.json").read_text())
                assert all(f in files for f in manifest_files(manifest)), (files, manifest)
                assert not out or len([f for f in files if f.endswith(".parquet")]) == int(out[1])
            else:
                assert not out, out
                stopped.append(after)
        assert stopped, "no Ctrl-C reached a running export"
        # the session goes on: the store answers and takes writes
        assert term.run("SELECT datoms FROM mentat_transact('[{:f/key \"after\" :f/n 1}]');")[0] == ["datoms", "3"]
        assert count(":f/key") == expected + 1
    finally:
        term.close()
    # and what the session committed is what a fresh process reads from the file
    code, out, err = cli("SELECT * FROM mentat_q('[:find (count ?e) . :where [?e :f/key]]');", db)
    assert code == 0 and out.split() == ["count_e", str(expected + 1)], (out, err)


def manifest_files(manifest):
    """The table files an export's manifest names."""
    return [f["path"] for f in manifest["files"]]


# ------------------------------------------------------------------------------------ catalogs that change


def test_a_catalog_attached_again_under_another_file_is_read_from_that_file(tmp_path):
    a, b = tmp_path / "a.duckdb", tmp_path / "b.duckdb"
    con = connect(tmp_path / "main.duckdb")
    con.execute(f"ATTACH '{b}' AS y").fetchall()
    transact(con, KEY, store="y.mentat")
    transact(con, '[{:f/key "from b" :f/n 2}]', store="y.mentat")
    con.execute("DETACH y").fetchall()
    con.execute(f"ATTACH '{a}' AS x").fetchall()
    transact(con, "[{:db/ident :g/other :db/valueType :db.type/long :db/cardinality :db.cardinality/one}]",
             store="x.mentat")
    transact(con, "[{:g/other 1}]", store="x.mentat")
    con.execute("DETACH x").fetchall()
    con.execute(f"ATTACH '{b}' AS x").fetchall()
    assert q(con, "[:find ?k ?n :where [?e :f/key ?k] [?e :f/n ?n]]", store="x.mentat") == [("from b", 2)]
    assert rows(con, "SELECT count(*) FROM mentat_schema(store := 'x.mentat') WHERE ident = ':f/key'") == [(1,)]
    assert rows(con, "SELECT pull FROM mentat_pull('[:f/n]', '[:f/key \"from b\"]', store := 'x.mentat')") \
        == [({"f/n": 2},)]
    # writes go to b.duckdb, with b's entids
    t = transact(con, '[{:f/key "again" :f/n 3}]', store="x.mentat")
    assert sorted(q(con, "[:find ?n :where [_ :f/n ?n]]", store="x.mentat")) == [(2,), (3,)]
    con.execute("DETACH x").fetchall()
    con.execute(f"ATTACH '{a}' AS x").fetchall()
    assert q(con, "[:find ?v :where [_ :g/other ?v]]", store="x.mentat") == [(1,)]
    with pytest.raises(duckdb.Error, match="unknown attribute :f/key"):
        q(con, "[:find ?k :where [_ :f/key ?k]]", store="x.mentat")
    assert t["tx"] > 0


# ---------------------------------------------------------------------------------------------- NUL bytes


def test_values_with_nul_bytes_travel_whole(con):
    transact(con, KEY)
    ids = transact(con, '[{:db/id "a" :f/key "a"} {:db/id "nul" :f/key "a\\u0000b" :f/n 7}]')["tempids"]
    a, nul = ids["a"], ids["nul"]
    assert sorted(q(con, "[:find ?k :where [_ :f/key ?k]]")) == [("a",), ("a\x00b",)]
    # scalar input, pattern constant, predicate, lookup ref (in a pattern and in pull)
    assert q(con, "[:find ?e :in $ ?k :where [?e :f/key ?k]]", '["a\\u0000b"]') == [(nul,)]
    assert q(con, '[:find ?e :where [?e :f/key "a\\u0000b"]]') == [(nul,)]
    assert q(con, '[:find ?e :where [?e :f/key ?k] [(= ?k "a\\u0000b")]]') == [(nul,)]
    assert q(con, '[:find ?n :where [[:f/key "a\\u0000b"] :f/n ?n]]') == [(7,)]
    assert q(con, "[:find ?n :in $ ?e :where [?e :f/n ?n]]", '[[:f/key "a\\u0000b"]]') == [(7,)]
    assert rows(con, "SELECT e, pull FROM mentat_pull('[:f/key]', '[:f/key \"a\\u0000b\"]')") == \
        [(nul, {"f/key": "a\x00b"})]
    # a DuckDB VARCHAR value with a NUL byte is not cut at it
    assert rows(con, "SELECT e, v FROM mentat_datoms('AVET', a := ':f/key', v := 'a' || chr(0) || 'b')") == \
        [(nul, "a\x00b")]
    assert rows(con, "SELECT e FROM mentat_datoms('AVET', a := ':f/key', v := 'a' || chr(0) || 'zzz')") == []
    assert rows(con, "SELECT e FROM mentat_datoms('AVET', a := ':f/key', v := 'a')") == [(a,)]
    # and through a transaction's lookup ref
    transact(con, '[[:db/add [:f/key "a\\u0000b"] :f/n 8]]')
    assert q(con, "[:find ?n :in $ ?k :where [?e :f/key ?k] [?e :f/n ?n]]", '["a\\u0000b"]') == [(8,)]
