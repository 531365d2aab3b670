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
