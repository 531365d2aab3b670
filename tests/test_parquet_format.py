"""The Parquet export as a format (docs/parquet-format.md): manifest.json, written last, and incremental exports
into a directory that holds one (only the attributes changed since its basis tx are written, earlier snapshots'
files and manifests stay, an unchanged store writes nothing), read back by mentat_attach_parquet and
mentat_import_store as the store they were exported from."""
import json
import os

from conftest import connect, rows, transact

SCHEMA = """[{:db/ident :a/x :db/valueType :db.type/long :db/cardinality :db.cardinality/many}
             {:db/ident :a/y :db/valueType :db.type/string :db/cardinality :db.cardinality/one}]"""
Q = "[:find ?e ?x ?y :where [?e :a/x ?x] [?e :a/y ?y]]"


def manifest(d, basis=None):
    with open(os.path.join(d, "manifest.json" if basis is None else f"manifest.{basis}.json")) as f:
        return json.load(f)


def answers(con, store="mentat", **named):
    args = "".join(f", {k} := {v}" for k, v in named.items())
    return sorted(rows(con, f"SELECT * FROM mentat_q('{Q}', store := '{store}'{args})"))


def test_incremental_export_writes_what_changed(con, tmp_path):
    transact(con, SCHEMA)
    ids = transact(con, '[{:db/id "p" :a/x [1 2] :a/y "one"} {:db/id "q" :a/x 3 :a/y "two"}]')["tempids"]
    d = str(tmp_path / "export")
    (files1, cur1, hist1), = rows(con, "SELECT * FROM mentat_export(?)", [d])
    m1 = manifest(d)
    assert all(f["path"] == f["table"] + ".parquet" for f in m1["files"]) and files1 == len(m1["files"])
    listing = sorted(os.listdir(d))

    # unchanged: nothing written, not an error
    assert rows(con, "SELECT * FROM mentat_export(?)", [d]) == [(0, cur1, hist1)]
    assert sorted(os.listdir(d)) == listing and manifest(d) == m1

    # :a/x changes (one value retracted, one added); :a/y does not
    transact(con, f"[[:db/retract {ids['p']} :a/x 1] [:db/add {ids['q']} :a/x 4]]")
    (files2, cur2, hist2), = rows(con, "SELECT * FROM mentat_export(?)", [d])
    m2 = manifest(d)
    assert m2["basis_tx"] > m1["basis_tx"] and manifest(d, m2["basis_tx"]) == m2
    aid = {f["ident"]: f["attribute"] for f in m2["files"] if f["ident"]}
    paths1 = {f["table"]: f["path"] for f in m1["files"]}
    paths2 = {f["table"]: f["path"] for f in m2["files"]}
    x, y = aid[":a/x"], aid[":a/y"]
    assert paths2[f"cur_{y}"] == paths1[f"cur_{y}"]                      # unchanged: the earlier file
    assert paths2[f"cur_{x}"] == f"cur_{x}.{m2['basis_tx']}.parquet"     # changed: a new file
    assert paths2[f"hist_{x}"] == f"hist_{x}.{m2['basis_tx']}.parquet"
    assert paths2["cur_9"] != paths1["cur_9"]                            # the tx log grew
    written = [t for t in paths2 if paths2[t] != paths1.get(t)]
    assert files2 == len(written) < len(paths2)
    # the earlier snapshot's files are all still there
    assert all(os.path.exists(os.path.join(d, p)) for p in paths1.values())
    # the report counts the snapshot's datoms: one value moved to history, one added, one more transaction
    assert (cur2, hist2) == (cur1 + 1, hist1 + 1)

    # both readers see the store as it is now, and as of before the change
    other = connect()
    rows(other, "SELECT * FROM mentat_attach_parquet(?, store := 'snap')", [d])
    rows(other, "SELECT * FROM mentat_import_store(?, store := 'copy')", [d])
    for store in ("snap", "copy"):
        assert answers(other, store) == answers(con)
        assert answers(other, store, as_of=m1["basis_tx"]) == answers(con, as_of=m1["basis_tx"])
    other.close()


def test_an_export_without_a_manifest_is_rewritten_whole(con, tmp_path):
    transact(con, SCHEMA)
    transact(con, '[{:a/x 1 :a/y "one"}]')
    d = tmp_path / "export"
    rows(con, "SELECT * FROM mentat_export(?)", [str(d)])
    os.remove(d / "manifest.json")
    for f in os.listdir(d):
        if f.startswith("manifest."):
            os.remove(d / f)
    transact(con, '[{:a/x 2 :a/y "two"}]')
    (files, _, _), = rows(con, "SELECT * FROM mentat_export(?)", [str(d)])
    m = manifest(str(d))
    assert files == len(m["files"]) and all(f["path"] == f["table"] + ".parquet" for f in m["files"])


def test_another_store_exported_into_the_directory_is_written_whole(con, tmp_path):
    """Two stores have the same tx entids: an export of another store into a directory is never mistaken for an
    increment of the snapshot there."""
    transact(con, SCHEMA)
    transact(con, '[{:a/x 1 :a/y "one"}]')
    d = str(tmp_path / "export")
    rows(con, "SELECT * FROM mentat_export(?)", [d])
    first = manifest(d)
    other = connect()
    transact(other, SCHEMA)
    transact(other, '[{:a/x 7 :a/y "seven"}]')
    (files, _, _), = rows(other, "SELECT * FROM mentat_export(?)", [d])
    m = manifest(d)
    assert m["basis_tx"] == first["basis_tx"] and files == len(m["files"])
    assert not {f["path"] for f in m["files"]} & {f["path"] for f in first["files"]}
    reader = connect()
    rows(reader, "SELECT * FROM mentat_attach_parquet(?, store := 'snap')", [d])
    assert answers(reader, "snap") == answers(other)
    for c in (other, reader):
        c.close()


def three_snapshots(con, d):
    """Three exports into `d`, a change before each of the last two; returns their manifests, oldest first."""
    transact(con, SCHEMA)
    ids = transact(con, '[{:db/id "p" :a/x [1 2] :a/y "one"} {:db/id "q" :a/x 3 :a/y "two"}]')["tempids"]
    rows(con, "SELECT * FROM mentat_export(?)", [d])
    m1 = manifest(d)
    transact(con, f"[[:db/retract {ids['p']} :a/x 1] [:db/add {ids['q']} :a/x 4]]")
    rows(con, "SELECT * FROM mentat_export(?)", [d])
    m2 = manifest(d)
    transact(con, f'[[:db/add {ids["p"]} :a/y "uno"] {{:a/x 9 :a/y "nine"}}]')
    rows(con, "SELECT * FROM mentat_export(?)", [d])
    return [m1, m2, manifest(d)]


def test_earlier_snapshots_are_listed_and_read_by_their_basis_tx(con, tmp_path):
    d = str(tmp_path / "export")
    ms = three_snapshots(con, d)
    listed = rows(con, "SELECT basis_tx, manifest, files, current, history, latest FROM mentat_snapshots(?)", [d])
    assert listed == [
        (m["basis_tx"], f"manifest.{m['basis_tx']}.json", len(m["files"]),
         sum(f["rows"] for f in m["files"] if f["kind"] == "current"),
         sum(f["rows"] for f in m["files"] if f["kind"] == "history"), i == 2)
        for i, m in enumerate(ms)]
    (instant,), = rows(con, "SELECT epoch_us(basis_instant) FROM mentat_snapshots(?) WHERE latest", [d])
    assert instant == ms[2]["basis_instant_us"]
    reader = connect()
    for i, m in enumerate(ms):
        rows(reader, "SELECT * FROM mentat_attach_parquet(?, store := ?, snapshot := ?)", [d, f"s{i}", m["basis_tx"]])
        rows(reader, "SELECT * FROM mentat_import_store(?, store := ?, snapshot := ?)", [d, f"c{i}", m["basis_tx"]])
        # a snapshot is the store as of its basis tx, whichever reader reads it
        want = answers(con, as_of=m["basis_tx"])
        assert answers(reader, f"s{i}") == want == answers(reader, f"c{i}")
    assert answers(reader, "s0") != answers(reader, "s2")
    missing = ms[0]["basis_tx"] - 1
    for fn in ("mentat_attach_parquet", "mentat_import_store"):
        try:
            rows(reader, f"SELECT * FROM {fn}(?, store := 'nope', snapshot := ?)", [d, missing])
            raise AssertionError("an unknown snapshot was read")
        except Exception as e:  # noqa: BLE001  (DuckDB's exception class)
            assert f"no snapshot {missing}" in str(e) and str(ms[1]["basis_tx"]) in str(e), e
    assert rows(reader, "SELECT count(*) FROM duckdb_schemas() WHERE schema_name = 'nope'") == [(0,)]
    reader.close()


def test_prune_drops_the_oldest_snapshots_and_only_their_files(con, tmp_path):
    d = str(tmp_path / "export")
    ms = three_snapshots(con, d)
    with open(os.path.join(d, "notes.parquet"), "w") as f:  # a file no manifest names: never touched
        f.write("not mentat's")
    paths = [{f["path"] for f in m["files"]} for m in ms]
    only_first = paths[0] - paths[1] - paths[2]
    assert only_first, "the second snapshot rewrote some attribute: a weak test"
    size = sum(os.path.getsize(os.path.join(d, p)) for p in only_first)
    before = set(os.listdir(d))

    assert rows(con, "SELECT * FROM mentat_prune_export(?, keep := 2)", [d]) == [(2, 1, len(only_first), size)]
    assert set(os.listdir(d)) == before - only_first - {f"manifest.{ms[0]['basis_tx']}.json"}
    assert [r[0] for r in rows(con, "SELECT basis_tx FROM mentat_snapshots(?)", [d])] == [ms[1]["basis_tx"],
                                                                                         ms[2]["basis_tx"]]
    # what is kept still reads as before; the dropped snapshot is gone
    reader = connect()
    rows(reader, "SELECT * FROM mentat_attach_parquet(?, store := 'old', snapshot := ?)", [d, ms[1]["basis_tx"]])
    rows(reader, "SELECT * FROM mentat_attach_parquet(?, store := 'now')", [d])
    assert answers(reader, "old") == answers(con, as_of=ms[1]["basis_tx"]) and answers(reader, "now") == answers(con)
    try:
        rows(reader, "SELECT * FROM mentat_attach_parquet(?, store := 'gone', snapshot := ?)", [d, ms[0]["basis_tx"]])
        raise AssertionError("a pruned snapshot was read")
    except Exception as e:  # noqa: BLE001
        assert "no snapshot" in str(e), e
    # nothing more to drop; then only the latest
    assert rows(con, "SELECT * FROM mentat_prune_export(?, keep := 2)", [d]) == [(2, 0, 0, 0)]
    kept = set(os.listdir(d))
    only_second = paths[1] - paths[2]
    (r,) = rows(con, "SELECT * FROM mentat_prune_export(?)", [d])
    assert r[:3] == (1, 1, len(only_second)) and set(os.listdir(d)) == kept - only_second - {
        f"manifest.{ms[1]['basis_tx']}.json"}
    assert "notes.parquet" in os.listdir(d)
    rows(reader, "SELECT * FROM mentat_attach_parquet(?, store := 'last')", [d])
    assert answers(reader, "last") == answers(con)
    # an export after a prune is still incremental over the latest snapshot
    transact(con, '[{:a/x 10 :a/y "ten"}]')
    (files, _, _), = rows(con, "SELECT * FROM mentat_export(?)", [d])
    assert 0 < files < len(manifest(d)["files"])
    try:
        rows(con, "SELECT * FROM mentat_prune_export(?, keep := 0)", [d])
        raise AssertionError("keep := 0 was accepted")
    except Exception as e:  # noqa: BLE001
        assert "keep := 0" in str(e), e
    reader.close()


def test_uuid_and_bigint_values_are_written_as_text_and_decimal(con, tmp_path):
    """Format version 2: a uuid `v` is its canonical text (Apache Spark refuses Parquet's UUID type), a bigint
    DECIMAL(38,0); any Parquet reader sees them so, and mentat's readers give back the store's types."""
    transact(con, """[{:db/ident :u/id :db/valueType :db.type/uuid :db/cardinality :db.cardinality/one
                       :db/unique :db.unique/identity}
                      {:db/ident :u/n :db/valueType :db.type/bigint :db/cardinality :db.cardinality/one}]""")
    ids = ["0f8b4c1e-9a55-4a5e-8a8e-2c7e5c0a1b2c", "ffffffff-0000-4000-8000-000000000001"]
    transact(con, f'[{{:u/id #uuid "{ids[0]}" :u/n 123456789012345678901234567890N}} {{:u/id #uuid "{ids[1]}"}}]')
    d = str(tmp_path / "export")
    rows(con, "SELECT * FROM mentat_export(?)", [d])
    m = manifest(d)
    assert m["format_version"] == 3  # uuid as text since version 2
    files = {f["ident"]: f for f in m["files"] if f["kind"] == "current" and f["ident"]}
    plain = connect()  # DuckDB's own Parquet reader
    path = os.path.join(d, files[":u/id"]["path"])
    assert rows(plain, f"SELECT DISTINCT typeof(v) FROM read_parquet('{path}')") == [("VARCHAR",)]
    assert sorted(r[0] for r in rows(plain, f"SELECT v FROM read_parquet('{path}')")) == ids
    path = os.path.join(d, files[":u/n"]["path"])
    assert rows(plain, f"SELECT typeof(v), v::VARCHAR FROM read_parquet('{path}')") == [
        ("DECIMAL(38,0)", "123456789012345678901234567890")]
    q = "[:find ?u ?n :where [?e :u/id ?u] [?e :u/n ?n]]"
    rows(plain, "SELECT * FROM mentat_attach_parquet(?, store := 'snap')", [d])
    rows(plain, "SELECT * FROM mentat_import_store(?, store := 'copy')", [d])
    want = rows(con, f"SELECT * FROM mentat_q('{q}')")
    assert len(want) == 1
    for store in ("snap", "copy"):
        assert rows(plain, f"SELECT * FROM mentat_q('{q}', store := '{store}')") == want
        assert rows(plain, f"SELECT DISTINCT typeof(v) FROM {store}.cur_{files[':u/id']['attribute']}") == [("UUID",)]
    plain.close()


def test_an_export_of_format_version_1_is_written_again_whole(con, tmp_path):
    """An incremental export never mixes versions: into a directory whose latest snapshot is of version 1, every
    table is written again (under new names, so the version-1 snapshot stays readable)."""
    transact(con, SCHEMA)
    transact(con, '[{:a/x 1 :a/y "one"}]')
    d = str(tmp_path / "export")
    rows(con, "SELECT * FROM mentat_export(?)", [d])
    old = manifest(d)
    for name in ("manifest.json", f"manifest.{old['basis_tx']}.json"):
        with open(os.path.join(d, name), "w") as f:
            json.dump({**old, "format_version": 1}, f)
    transact(con, '[{:a/x 2 :a/y "two"}]')
    (files, _, _), = rows(con, "SELECT * FROM mentat_export(?)", [d])
    m = manifest(d)
    assert m["format_version"] == 3 and files == len(m["files"])
    assert not {f["path"] for f in m["files"]} & {f["path"] for f in old["files"]}
    reader = connect()
    rows(reader, "SELECT * FROM mentat_attach_parquet(?, store := 'v1', snapshot := ?)", [d, old["basis_tx"]])
    assert answers(reader, "v1") == answers(con, as_of=old["basis_tx"])
    reader.close()


def test_an_attach_by_a_relative_path_answers_from_any_directory(tmp_path, monkeypatch):
    """The attached store's views are kept in the database file: a relative directory is kept as its absolute path,
    so the store answers when the database is opened later from another working directory."""
    db = tmp_path / "db.duckdb"
    con = connect(db)
    transact(con, SCHEMA)
    transact(con, '[{:a/x [1 2] :a/y "one"} {:a/x 3 :a/y "two"}]')
    want = answers(con)
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    rows(con, "SELECT * FROM mentat_export('export')")
    rows(con, "SELECT * FROM mentat_attach_parquet('export', store := 'snap')")
    assert answers(con, "snap") == want
    con.close()
    monkeypatch.chdir(tmp_path)
    again = connect(db)
    assert answers(again, "snap") == want
    assert rows(again, "SELECT value FROM snap.meta WHERE key = 'read_only'") == [
        (os.path.realpath(tmp_path / "work" / "export"),)]
    # attaching under a name that exists is refused, and the message says how to go on
    try:
        rows(again, "SELECT * FROM mentat_attach_parquet('work/export', store := 'snap')")
        raise AssertionError("attached twice under one name")
    except Exception as e:  # noqa: BLE001 - the message is the assertion
        assert "already exists: attach or import an export under a new name" in str(e), e
    again.close()
