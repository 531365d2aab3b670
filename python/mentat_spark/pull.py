"""Datomic's pull on Spark, over the store's Parquet export: :func:`pull` answers as ``mentat_pull`` and
``mentat_pull_many`` answer in DuckDB.

The planner compiles the pattern for Spark as it does for DuckDB (``mentat_sql(query, inputs, store,
'dialect=spark')``, see planner/src/pull.rs): each level of the pattern is one CTE whose attributes are read by one
branch each, glued by ``UNION ALL`` (columns aligned by position) and folded by ``GROUP BY e``; STRUCTs are
``named_struct(...)``, cardinality-many and reverse attributes arrays ordered by value (``sort_array`` of
``collect_list``), cut at ``:limit`` (default 1000) by ``slice``. The result has DuckDB's shape: fields named
``issue/title``, ``db/id``, ``issue/_assignee`` or the ``:as`` name, in pattern order; a missing attribute is a NULL
field, an entity with none of the pattern's attributes a NULL ``pull`` (unless the pattern asks for ``:db/id`` or
gives a ``:default``).

Supported: attributes, ``:db/id``, reverse attributes, nested map specs, numeric recursion depth (``{:a 2}``),
``:as``, ``:limit`` (and ``:limit nil``), ``:default`` and ``*`` (typed, as in DuckDB, from the attributes the pulled
entities hold: ``mentat_sql`` runs that probe in DuckDB over the export's files before printing the Spark SQL).
Refused with an error naming the construct (their answer is JSON, which is DuckDB's): unbounded recursion ``...``
and a forward component attribute pulled whole, without a sub-pattern (named, or under ``*``).
"""
from __future__ import annotations


__all__ = ["pull"]

_QUERY = "[:find ?ord ?e (pull ?e pattern) :in $ [[?ord ?e]] pattern]"


def _resolve(snapshot_dir, manifest, latest, entities, as_of=None, since=None):
    """The entids of ``entities`` (ints as given; ident and lookup-ref texts resolved, NULL when a lookup ref
    matches nothing), by ``mentat_pull_many`` in the planner's in-memory DuckDB, which has the snapshot of
    ``manifest`` attached."""
    from . import _planner

    texts = [e for e in entities if e is not None and not isinstance(e, int)]
    found = {}
    if texts:
        con = _planner(str(snapshot_dir), manifest["basis_tx"], latest=latest)
        named, params = "", ["[:db/id]", [str(t) for t in texts]]
        for key, value in (("as_of", as_of), ("since", since)):
            if value is not None:
                named += f", {key} := ?"
                params.append(value)
        got = con.execute(f"SELECT e FROM mentat_pull_many(?, ?::VARCHAR[], store := 'snap'{named})",
                          params).fetchall()
        found = {t: e for t, (e,) in zip(texts, got)}
    return [e if e is None or isinstance(e, int) else found[e] for e in entities]


def pull(spark, snapshot_dir, pattern: str, entities, as_of=None, since=None, snapshot: int | None = None):
    """Datomic's pull of ``pattern`` (EDN text) for ``entities`` over the export in ``snapshot_dir``, as a
    ``pyspark.sql.DataFrame`` of columns ``e`` (BIGINT, the entid; NULL for a lookup ref that matches nothing) and
    ``pull`` (a STRUCT, see the module docs), shaped as DuckDB's ``mentat_pull``/``mentat_pull_many``:

    * ``entities`` a list (or tuple): one row per element, in order, duplicates repeated (Datomic's pull-many);
    * one entity (not a list): one row (Datomic's pull).

    An entity is an int entid, an ident keyword text (``":state/open"``) or a lookup ref text
    (``'[:user/email "a@b.c"]'``); idents and lookup refs are resolved in the planner's DuckDB over the export.
    ``as_of``/``since`` take a tx entid or an instant, as in :func:`mentat_spark.q`; pull has no ``history`` (Datomic
    refuses pull on a history database). ``snapshot`` reads a kept earlier snapshot, as in :func:`mentat_spark.q`.
    Errors: the planner's (unknown attribute, a malformed pattern, an unknown ident, ...) and, for what Spark cannot
    express (unbounded recursion ``...``, a component pulled whole), an error naming the construct ("the spark SQL
    dialect cannot express pull recursion ...").
    """
    from . import q, read_manifest

    many = isinstance(entities, (list, tuple))
    items = list(entities) if many else [entities]
    # one manifest for the resolution and the query: an export landing meanwhile cannot mix two snapshots
    manifest = read_manifest(snapshot_dir, snapshot)
    ids = _resolve(snapshot_dir, manifest, snapshot is None, items, as_of, since)
    # each element with its position, so that the query's set semantics keep duplicates and the order; with none
    # resolved, one placeholder row (no entity has the id -1) types the answer, and is dropped
    given = [(i, e) for i, e in enumerate(ids) if e is not None] or [(-1, -1)]
    tuples = " ".join(f"[{i} {e}]" for i, e in given)
    answer = q(spark, snapshot_dir, _QUERY, f"[[{tuples}] {pattern}]", as_of=as_of, since=since, snapshot=snapshot,
               manifest=manifest)
    answer = answer.withColumnRenamed("pull_e", "pull").where("ord >= 0")
    unresolved = [(i, None, None) for i, e in enumerate(ids) if e is None]
    if unresolved:
        from pyspark.sql.types import StructField, StructType

        nullable = StructType([StructField(f.name, f.dataType, True) for f in answer.schema.fields])
        answer = answer.unionByName(spark.createDataFrame(unresolved, nullable))
    # one partition sorted by position: the order of the list, without a range-partitioning job
    return answer.coalesce(1).sortWithinPartitions("ord").select("e", "pull")
