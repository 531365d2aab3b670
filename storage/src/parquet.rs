//! A whole store as Parquet files, and back.
//!
//! Layout of an export directory: one Parquet file per table of the store, named as the table:
//!
//! * `meta.parquet` (`key`, `value`) and `partitions.parquet` (`ident`, `start`, `next`);
//! * `cur_<aid>.parquet` (`e`, `v`, `tx`) and `hist_<aid>.parquet` (`e`, `v`, `tx`, `retracted_tx`) for every attribute,
//!   bootstrap ones included, so the schema (`cur_1` .. `cur_8`) and the transactions (`cur_9`, `:db/txInstant`)
//!   travel as datoms like any other.
//!
//! * `manifest.json`, written last and atomically (a temporary file renamed over it): the format version
//!   ([`FORMAT_VERSION`]), the basis tx (the last transaction the files hold) and every file with its table,
//!   attribute and row count. `docs/parquet-format.md` documents the layout as a format for other readers
//!   (Apache Spark through the `mentat_spark` Python package).
//!
//! [`attach`] opens such a directory as a read-only store whose datom tables are views over the files (`meta` gains
//! the row `('read_only', <dir>)`), so queries read the Parquet files directly.
//!
//! Values keep their column types (`v` is BIGINT, VARCHAR, DOUBLE, BOOLEAN, TIMESTAMPTZ, UUID or BLOB as
//! [`planner::schema::ValueType::sql_type`] says), and entids are kept, so a store rebuilt from the files answers
//! every query, as-of and history query included, exactly as the exported one.

use crate::error::{Result, StorageError};
use crate::store::{self, Store};
use duckdb::Connection;
use planner::layout::{self, quote_str, StoreName};
use std::collections::BTreeMap;

/// The version of the export layout that `manifest.json` states (`docs/parquet-format.md`). Version 2 writes uuid
/// values as their canonical text (version 1 wrote Parquet's UUID logical type, which Apache Spark refuses to read);
/// version 3 writes the fulltext index with its term dictionary (`ftt_`, `fts_`, postings keyed by term id).
pub const FORMAT_VERSION: i64 = 3;

/// The format versions the readers here ([`attach`], [`import_store`], an incremental [`export`]) accept. The
/// fulltext index of versions 1 and 2 (postings keyed by the term's text) is rebuilt by an import and read through
/// views of this layout by an attach.
pub const READABLE_VERSIONS: [i64; 3] = [1, 2, 3];

/// The manifest's file name in an export directory.
pub const MANIFEST: &str = "manifest.json";

/// One table of an export, as the manifest lists it.
#[derive(Clone, Debug)]
struct Written {
    table: String,
    /// The file, relative to the export directory.
    path: String,
    rows: i64,
    /// Whether this export wrote it (else an earlier snapshot did, and this one names it again).
    new: bool,
    /// DuckDB's type of the store's `v` column (the manifest's `column_type`), for a datom table.
    column_type: Option<String>,
}

/// The snapshot an export directory holds: its manifest's basis tx and files.
struct Snapshot {
    format_version: i64,
    basis_tx: i64,
    /// The basis tx's `:db/txInstant` in microseconds since the epoch: with the basis tx, it tells whether a store
    /// is the one the snapshot was exported from (or one grown from it).
    basis_instant_us: Option<i64>,
    files: Vec<Written>,
}

impl Snapshot {
    /// Rows of its current-state and history tables, as the manifest counts them.
    fn rows(&self) -> (i64, i64) {
        self.files.iter().fold((0, 0), |(c, h), w| match table_kind(&w.table).0 {
            "current" => (c + w.rows, h),
            "history" => (c, h + w.rows),
            _ => (c, h),
        })
    }
}

/// What [`export`] and [`import_store`] report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParquetReport {
    /// Parquet files written or read.
    pub files: i64,
    /// Rows of the current-state tables (datoms true now).
    pub current: i64,
    /// Rows of the history tables.
    pub history: i64,
}

fn file(dir: &str, table: &str) -> String {
    quote_str(&format!("{}/{table}.parquet", dir.trim_end_matches('/')))
}

/// A file of an export directory, as an SQL literal.
fn path_in(dir: &str, path: &str) -> String {
    quote_str(&format!("{}/{path}", dir.trim_end_matches('/')))
}

/// Writes `store` into `dir` (created if missing) from one snapshot (one read transaction under the store's writer
/// lock, so no transaction lands half-way), then its manifest.
///
/// Into a directory without a manifest, every table is written as `<table>.parquet` (existing files of the same
/// names are overwritten). Into a directory whose manifest names an earlier snapshot, the export is incremental:
/// only the tables of attributes that changed since that snapshot's basis tx (a datom asserted or retracted after
/// it) are written, as `<table>.<basis_tx>.parquet`, and `meta` and `partitions` again; the new manifest names
/// those and the earlier files of the unchanged attributes. Files are never overwritten then, and each snapshot's
/// manifest is kept as `manifest.<basis_tx>.json`, so a reader of an earlier snapshot keeps reading it (nothing
/// prunes old snapshots yet). An unchanged store (same basis tx) writes nothing.
///
/// The files are written into a staging directory inside `dir` and renamed into place only once all of them are
/// written and the call has passed its commit point uninterrupted ([`crate::interrupt::committing`]), the manifest
/// last, so that an export that fails (or is interrupted) leaves `dir` as it was. Errors: [`StorageError::DuckDb`]
/// when a file cannot be written, [`StorageError::Interrupted`], [`StorageError::Store`] for a manifest of another
/// format version.
pub fn export(conn: &Connection, store: &Store, dir: &str) -> Result<ParquetReport> {
    std::fs::create_dir_all(dir).map_err(|e| StorageError::Store(format!("cannot create {dir}: {e}")))?;
    let previous = read_snapshot(dir)?;
    let staging = format!(
        "{}/.mentat-export-{}-{}",
        dir.trim_end_matches('/'),
        std::process::id(),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
    );
    std::fs::create_dir_all(&staging).map_err(|e| StorageError::Store(format!("cannot create {staging}: {e}")))?;
    let written = export_into(conn, store, &staging, previous.as_ref()).and_then(|out| {
        if crate::interrupt::requested() {
            return Err(StorageError::Interrupted);
        }
        let Exported { report, tables, basis_tx, basis_instant_us, unchanged, tag } = out;
        if unchanged {
            return Ok(report);
        }
        let manifest = manifest_json(store, &tables, basis_tx, basis_instant_us);
        let tmp = format!("{staging}/{MANIFEST}");
        std::fs::write(&tmp, &manifest).map_err(|e| StorageError::Store(format!("cannot write {tmp}: {e}")))?;
        // every byte is written inside the staging directory; what follows are renames
        let kept = format!("manifest.{tag}.json");
        let staged = format!("{staging}/{kept}");
        std::fs::write(&staged, &manifest).map_err(|e| StorageError::Store(format!("cannot write {staged}: {e}")))?;
        let base = dir.trim_end_matches('/');
        // the renames are the export's commit: past the commit point, an interrupt is too late for it and held
        // back, so that a call that reports an error has moved nothing into `dir`
        let renames = || -> Result<()> {
            for path in tables.iter().filter(|w| w.new).map(|w| &w.path).chain([&kept]) {
                let (from, to) = (format!("{staging}/{path}"), format!("{base}/{path}"));
                std::fs::rename(&from, &to)
                    .map_err(|e| StorageError::Store(format!("cannot move {from} to {to}: {e}")))?;
            }
            // last: a reader that finds the new manifest finds every file it names
            let to = format!("{base}/{MANIFEST}");
            std::fs::rename(&tmp, &to).map_err(|e| StorageError::Store(format!("cannot move {tmp} to {to}: {e}")))
        };
        crate::interrupt::committing(renames).unwrap_or(Err(StorageError::Interrupted))?;
        Ok(report)
    });
    let _ = std::fs::remove_dir_all(&staging);
    written
}

/// The snapshot that the manifest of `dir` names, or None without a manifest on the local file system.
fn read_snapshot(dir: &str) -> Result<Option<Snapshot>> {
    read_manifest(&std::path::Path::new(dir).join(MANIFEST))
}

/// The snapshot a manifest file names, or None when there is no such file. Errors: unreadable JSON, a manifest of
/// a format version not in [`READABLE_VERSIONS`], a file entry without its table, path or rows.
fn read_manifest(path: &std::path::Path) -> Result<Option<Snapshot>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(StorageError::Store(format!("cannot read {}: {e}", path.display()))),
    };
    let bad = |why: &str| StorageError::Store(format!("{}: {why}", path.display()));
    let m: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(&e.to_string()))?;
    let format_version = m["format_version"].as_i64().unwrap_or(0);
    if !READABLE_VERSIONS.contains(&format_version) {
        return Err(bad(&format!("format version {} is not one of {READABLE_VERSIONS:?}", m["format_version"])));
    }
    let files = m["files"]
        .as_array()
        .ok_or_else(|| bad("no files"))?
        .iter()
        .map(|f| match (f["table"].as_str(), f["path"].as_str(), f["rows"].as_i64()) {
            (Some(t), Some(p), Some(rows)) => Ok(Written {
                table: t.to_string(),
                path: p.to_string(),
                rows,
                new: false,
                column_type: f["column_type"].as_str().map(str::to_string),
            }),
            _ => Err(bad("a file without its table, path or rows")),
        })
        .collect::<Result<_>>()?;
    Ok(Some(Snapshot {
        format_version,
        basis_tx: m["basis_tx"].as_i64().ok_or_else(|| bad("no basis_tx"))?,
        basis_instant_us: m["basis_instant_us"].as_i64(),
        files,
    }))
}

/// Every snapshot `dir` keeps, with its manifest's file name, oldest first (by basis instant, then basis tx); the
/// latest one (`manifest.json`'s) is last, and marked.
/// Errors: `dir` is not a directory, an unreadable manifest.
fn kept_snapshots(dir: &str) -> Result<Vec<(String, Snapshot, bool)>> {
    if !std::path::Path::new(dir).is_dir() {
        return Err(StorageError::Store(format!("{dir} is not a directory")));
    }
    let cannot = |e: std::io::Error| StorageError::Store(format!("cannot list {dir}: {e}"));
    let latest = read_snapshot(dir)?;
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(cannot)? {
        let name = entry.map_err(cannot)?.file_name().to_string_lossy().into_owned();
        if name != MANIFEST && name.starts_with("manifest.") && name.ends_with(".json") {
            if let Some(s) = read_manifest(&std::path::Path::new(dir).join(&name))? {
                out.push((name, s));
            }
        }
    }
    let same = |a: &Snapshot, b: &Snapshot| a.basis_tx == b.basis_tx && a.basis_instant_us == b.basis_instant_us;
    let mut out: Vec<(String, Snapshot, bool)> = out
        .into_iter()
        .map(|(n, s)| {
            let is_latest = latest.as_ref().is_some_and(|l| same(l, &s));
            (n, s, is_latest)
        })
        .collect();
    if let Some(l) = latest {
        // a directory written before snapshots were kept has only manifest.json
        if !out.iter().any(|(_, _, is_latest)| *is_latest) {
            out.push((MANIFEST.to_string(), l, true));
        }
    }
    out.sort_by_key(|(_, s, is_latest)| (*is_latest, s.basis_instant_us.unwrap_or(i64::MIN), s.basis_tx));
    Ok(out)
}

/// The snapshot of `dir` whose basis tx is `snapshot` (a kept `manifest.<tx>.json`, or the one `manifest.<tx>-<instant>.json`
/// of another store's export into the same directory), or the latest one when `snapshot` is None.
/// Errors: no such snapshot (the message lists the basis txs `dir` keeps), or two of them.
fn snapshot_at(dir: &str, snapshot: Option<i64>) -> Result<Option<Snapshot>> {
    let Some(tx) = snapshot else { return read_snapshot(dir) };
    let (mut found, others): (Vec<_>, Vec<_>) =
        kept_snapshots(dir)?.into_iter().partition(|(_, s, _)| s.basis_tx == tx);
    match found.len() {
        1 => Ok(found.pop().map(|(_, s, _)| s)),
        0 => {
            let have: Vec<i64> = others.iter().map(|(_, s, _)| s.basis_tx).collect();
            Err(StorageError::Store(format!("export {dir} keeps no snapshot {tx}; its snapshots: {have:?}")))
        }
        _ => {
            let names: Vec<String> = found.into_iter().map(|(n, _, _)| n).collect();
            Err(StorageError::Store(format!(
                "export {dir} keeps {} snapshots of basis tx {tx} (exports of different stores): {names:?}",
                names.len()
            )))
        }
    }
}

/// One snapshot an export directory keeps, as [`snapshots`] lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// The last transaction the snapshot holds.
    pub basis_tx: i64,
    /// Its `:db/txInstant`, microseconds since 1970 (None in a manifest that does not state it).
    pub basis_instant_us: Option<i64>,
    /// The manifest's file name in the directory (`manifest.<basis_tx>.json`).
    pub manifest: String,
    /// Files the snapshot names, and the bytes of those present on disk.
    pub files: i64,
    pub bytes: i64,
    /// Rows of its current-state and history tables.
    pub current: i64,
    pub history: i64,
    /// Whether it is the directory's latest snapshot (the one `manifest.json` names).
    pub latest: bool,
}

/// The snapshots the export directory `dir` keeps (each incremental [`export`] adds one), oldest first, the latest
/// last. A directory without a manifest keeps none. Local file systems only (like incremental exports).
/// Errors: an unreadable directory or manifest.
pub fn snapshots(dir: &str) -> Result<Vec<SnapshotInfo>> {
    let base = dir.trim_end_matches('/');
    Ok(kept_snapshots(dir)?
        .into_iter()
        .map(|(manifest, s, latest)| {
            let (current, history) = s.rows();
            let bytes = s
                .files
                .iter()
                .filter_map(|w| std::fs::metadata(format!("{base}/{}", w.path)).ok())
                .map(|m| m.len() as i64)
                .sum();
            SnapshotInfo {
                basis_tx: s.basis_tx,
                basis_instant_us: s.basis_instant_us,
                manifest,
                files: s.files.len() as i64,
                bytes,
                current,
                history,
                latest,
            }
        })
        .collect())
}

/// What [`prune`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PruneReport {
    /// Snapshots kept and removed (their manifests deleted).
    pub kept: i64,
    pub removed: i64,
    /// Files deleted (named by a removed snapshot and by no kept one) and their bytes.
    pub files: i64,
    pub bytes: i64,
}

/// Drops all but the `keep` newest snapshots of the export directory `dir`: the latest (`manifest.json`'s) is always
/// kept, with the `keep - 1` newest others (by basis instant). The removed snapshots' manifests are deleted first,
/// so no reader can open one of them afterwards, then every file a removed snapshot names and no kept snapshot
/// names. Files that no manifest names are never touched. A reader in the middle of reading a removed snapshot
/// loses its files: prune when no reader needs them. Pruning a directory that keeps `keep` snapshots or fewer
/// deletes nothing. Local file systems only. Errors: `keep` below 1, an unreadable directory or manifest, a file
/// that cannot be deleted (the snapshots removed so far stay removed).
pub fn prune(dir: &str, keep: i64) -> Result<PruneReport> {
    if keep < 1 {
        return Err(StorageError::Store(format!("keep := {keep}: at least the latest snapshot is kept (keep >= 1)")));
    }
    let all = kept_snapshots(dir)?;
    // the latest is last; the newest others precede it
    let cut = all.len().saturating_sub(keep as usize);
    let (removed, kept) = all.split_at(cut);
    let needed: std::collections::HashSet<&str> =
        kept.iter().flat_map(|(_, s, _)| s.files.iter().map(|w| w.path.as_str())).collect();
    let base = dir.trim_end_matches('/');
    let delete = |path: &str| -> Result<()> {
        match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(StorageError::Store(format!("cannot delete {path}: {e}")))
            }
            _ => Ok(()),
        }
    };
    for (manifest, _, _) in removed {
        delete(&format!("{base}/{manifest}"))?;
    }
    let mut report = PruneReport { kept: kept.len() as i64, removed: removed.len() as i64, files: 0, bytes: 0 };
    let doomed: std::collections::BTreeSet<&str> = removed
        .iter()
        .flat_map(|(_, s, _)| s.files.iter().map(|w| w.path.as_str()))
        .filter(|p| !needed.contains(p))
        .collect();
    for path in doomed {
        let full = format!("{base}/{path}");
        if let Ok(m) = std::fs::metadata(&full) {
            delete(&full)?;
            report.files += 1;
            report.bytes += m.len() as i64;
        }
    }
    Ok(report)
}

/// The manifest of an export of `store` holding `tables`, as of `basis_tx` (format in `docs/parquet-format.md`).
fn manifest_json(store: &Store, tables: &[Written], basis_tx: i64, basis_instant_us: i64) -> String {
    let schema = store.schema();
    let files: Vec<serde_json::Value> = tables
        .iter()
        .map(|w| {
            let t = w.table.as_str();
            let (kind, aid) = table_kind(t);
            let attr = aid.and_then(|a| schema.attribute(a));
            serde_json::json!({
                "table": t,
                "path": w.path,
                "kind": kind,
                "attribute": aid,
                "ident": attr.map(|a| a.ident.clone()),
                "value_type": attr.map(|a| a.value_type.ident()),
                "column_type": attr.map(|a| a.sql_type()),
                "cardinality": attr.map(|a| if a.many { "many" } else { "one" }),
                "rows": w.rows,
            })
        })
        .collect();
    let manifest = serde_json::json!({
        "format": "mentat-parquet",
        "format_version": FORMAT_VERSION,
        "store": store.name.to_string(),
        "basis_tx": basis_tx,
        "basis_instant_us": basis_instant_us,
        "files": files,
    });
    serde_json::to_string_pretty(&manifest).unwrap_or_default()
}

/// What a table of a store holds (`current`, `history`, `fulltext`, `meta`, `partitions`) and its attribute.
fn table_kind(t: &str) -> (&str, Option<i64>) {
    let aid = |rest: &str| rest.parse::<i64>().ok();
    if let Some(a) = t.strip_prefix("cur_") {
        ("current", aid(a))
    } else if let Some(a) = t.strip_prefix("hist_") {
        ("history", aid(a))
    } else if let Some(a) = ["ftd_", "ftt_", "fts_", "ft_"].iter().find_map(|p| t.strip_prefix(p)) {
        ("fulltext", aid(a))
    } else {
        (t, None)
    }
}

/// The type a datom table's `v` column of DuckDB type `sql_type` is written as, in format version 2, where the two
/// differ (alone or inside a tuple's STRUCT or LIST):
/// * Parquet has no 128-bit integer (DuckDB would write a HUGEINT as a DOUBLE, losing digits): bigint values are
///   written as DECIMAL(38,0), which holds each of them exactly;
/// * uuid values are written as their canonical text (36 characters, lowercase; its order is the uuid order):
///   Parquet's UUID logical type is what DuckDB writes otherwise, and Apache Spark refuses to read it.
///
/// The readers ([`attach`], [`import_store`]) cast back to `sql_type`, which the manifest states as `column_type`.
fn file_type(sql_type: &str) -> String {
    sql_type.replace("HUGEINT", "DECIMAL(38,0)").replace("UUID", "VARCHAR")
}

/// What [`export_into`] did: its report, the snapshot's tables (written or kept), its basis, and whether the
/// store is the previous snapshot's, unchanged (then nothing was written).
struct Exported {
    report: ParquetReport,
    tables: Vec<Written>,
    basis_tx: i64,
    basis_instant_us: i64,
    unchanged: bool,
    /// What names this snapshot's new files and kept manifest: its basis tx, and for a directory that held another
    /// store's export, the basis instant too (two stores may have the same tx entids).
    tag: String,
}

/// Writes the tables of `store` into `dir` as [`export`] does: when `previous` is a snapshot of this store (its
/// basis tx has the same instant here), only the tables changed since it; with a `previous` of another store,
/// every table, under new names.
fn export_into(conn: &Connection, store: &Store, dir: &str, previous: Option<&Snapshot>) -> Result<Exported> {
    let _writer = store.lock_writer_settled(conn)?;
    let name = &store.name;
    let mut st = conn.prepare(
        "SELECT table_name FROM duckdb_tables() WHERE schema_name = ? \
         AND (? = '' AND database_name = current_database() OR database_name = ?) ORDER BY table_name",
    )?;
    let catalog = name.catalog.clone().unwrap_or_default();
    let tables: Vec<String> =
        st.query_map(duckdb::params![name.schema, catalog, catalog], |r| r.get(0))?.collect::<duckdb::Result<_>>()?;
    // the transaction log was applied above (lock_writer_settled): it is empty, and no part of the format
    let tables: Vec<String> = tables.into_iter().filter(|t| t != crate::txlog::TABLE).collect();
    let run = || -> Result<Exported> {
        let mut report = ParquetReport { files: 0, current: 0, history: 0 };
        let mut written = Vec::new();
        let schema = store.schema();
        let basis_tx: i64 = conn.query_row(
            &format!("SELECT coalesce(max(e), 0)::BIGINT FROM {}", name.current(layout::DB_TX_INSTANT)),
            [],
            |r| r.get(0),
        )?;
        let instant_us = |tx: i64| -> Result<i64> {
            Ok(conn.query_row(
                &format!(
                    "SELECT coalesce((SELECT epoch_us(v) FROM {} WHERE e = ?), -1)::BIGINT",
                    name.current(layout::DB_TX_INSTANT)
                ),
                [tx],
                |r| r.get(0),
            )?)
        };
        let basis_instant_us = instant_us(basis_tx)?;
        // an earlier snapshot of this store (not of another one exported into the same directory) is reused
        let mut reuse = None;
        if let Some(prev) = previous {
            // (files of another format version are not reused: the whole store is written again, under new names)
            if prev.format_version == FORMAT_VERSION
                && prev.basis_instant_us.is_some()
                && prev.basis_instant_us == Some(instant_us(prev.basis_tx)?)
            {
                reuse = Some(prev);
            }
        }
        let tag = match (previous, reuse) {
            (Some(_), None) => format!("{basis_tx}-{basis_instant_us}"),
            _ => basis_tx.to_string(),
        };
        // the attributes with a datom asserted or retracted after the previous snapshot
        let mut changed = std::collections::HashSet::new();
        if let Some(prev) = reuse {
            if prev.basis_tx == basis_tx {
                let (current, history) = prev.rows();
                return Ok(Exported {
                    report: ParquetReport { files: 0, current, history },
                    tables: prev.files.clone(),
                    basis_tx,
                    basis_instant_us,
                    unchanged: true,
                    tag: String::new(),
                });
            }
            for t in &tables {
                if let ("current", Some(aid)) = table_kind(t) {
                    let hist = layout::history_table_name(aid);
                    let newer: bool = conn.query_row(
                        &format!(
                            "SELECT coalesce((SELECT max(tx) FROM {}), 0) > ?1 \
                             OR coalesce((SELECT max(retracted_tx) FROM {}), 0) > ?1",
                            name.table(t),
                            name.table(&hist)
                        ),
                        [prev.basis_tx],
                        |r| r.get(0),
                    )?;
                    if newer {
                        changed.insert(aid);
                    }
                }
            }
        }
        for t in &tables {
            if let (Some(prev), (_, Some(aid))) = (reuse, table_kind(t)) {
                if !changed.contains(&aid) {
                    if let Some(w) = prev.files.iter().find(|w| &w.table == t) {
                        let (kind, _) = table_kind(t);
                        if kind == "current" {
                            report.current += w.rows;
                        } else if kind == "history" {
                            report.history += w.rows;
                        }
                        written.push(Written { new: false, ..w.clone() });
                        continue;
                    }
                }
            }
            let path = match previous {
                None => format!("{t}.parquet"),
                Some(_) => format!("{t}.{tag}.parquet"),
            };
            let aid = t.strip_prefix("cur_").or_else(|| t.strip_prefix("hist_")).and_then(|a| a.parse().ok());
            let sql_type = aid.and_then(|a| schema.attribute(a)).map(|a| a.sql_type());
            let source = match sql_type.as_deref().map(file_type) {
                Some(written) if Some(&written) != sql_type.as_ref() => {
                    format!("(SELECT * REPLACE (CAST(v AS {written}) AS v) FROM {})", name.table(t))
                }
                _ => name.table(t),
            };
            let n = conn.execute(&format!("COPY {source} TO {} (FORMAT parquet)", path_in(dir, &path)), [])? as i64;
            report.files += 1;
            written.push(Written { table: t.clone(), path, rows: n, new: true, column_type: sql_type });
            if t.starts_with("cur_") {
                report.current += n;
            } else if t.starts_with("hist_") {
                report.history += n;
            }
        }
        Ok(Exported { report, tables: written, basis_tx, basis_instant_us, unchanged: false, tag })
    };
    crate::in_transaction(conn, run)
}

/// Rebuilds the store `name` from a directory written by [`export`], with the same entids, in one transaction:
/// from its latest snapshot, or with `snapshot` the kept snapshot of that basis tx (see [`snapshots`]).
/// The store must not exist yet. Errors: [`StorageError::Store`] when it exists, or when the directory holds
/// no export (no `partitions.parquet`), no such snapshot, or a table file of an attribute its schema does not have;
/// [`StorageError::DuckDb`] for unreadable files.
pub fn import_store(conn: &Connection, dir: &str, name: &StoreName, snapshot: Option<i64>) -> Result<ParquetReport> {
    let files = export_files(conn, dir, name, snapshot)?;
    let fp = |t: &str| files.get(t).map_or_else(|| file(dir, t), |(p, _)| path_in(dir, p));
    let run = || -> Result<ParquetReport> {
        let mut report = ParquetReport { files: 0, current: 0, history: 0 };
        conn.execute_batch(&format!(
            "CREATE SCHEMA IF NOT EXISTS {s};
             CREATE TABLE {meta} (key VARCHAR NOT NULL, value VARCHAR NOT NULL);
             CREATE TABLE {parts} (ident VARCHAR NOT NULL, start BIGINT NOT NULL, next BIGINT NOT NULL);
             INSERT INTO {meta} SELECT key, value FROM read_parquet({mf});
             INSERT INTO {parts} SELECT ident, start, next FROM read_parquet({pf});",
            s = name.sql(),
            meta = name.table("meta"),
            parts = name.table("partitions"),
            mf = fp("meta"),
            pf = fp("partitions"),
        ))?;
        report.files += 2;
        // the store is written in this build's layout, whatever the export's was
        conn.execute(
            &format!("UPDATE {} SET value = ? WHERE key = 'layout_version'", name.table("meta")),
            [store::LAYOUT_VERSION],
        )?;
        let mut done = std::collections::HashSet::new();
        let mut rebuild = Vec::new();
        let mut load = |attrs: Vec<planner::schema::Attribute>, report: &mut ParquetReport| -> Result<()> {
            for a in attrs {
                if !done.insert(a.entid) {
                    continue;
                }
                for sql in store::attribute_ddl(name, &a) {
                    conn.execute_batch(&sql)?;
                }
                // an export written before the term dictionary (format 1 or 2) has postings keyed by the term's
                // text and no dictionary: its index files are skipped and the index rebuilt from the datoms below
                let old_index = a.fulltext && !files.contains_key(&planner::fulltext::terms_table_name(a.entid));
                for (table, cols) in crate::fulltext::tables(&a) {
                    if old_index {
                        report.files += files.contains_key(&table) as i64;
                    } else if files.contains_key(&table) {
                        conn.execute_batch(&format!(
                            "DELETE FROM {t}; INSERT INTO {t} SELECT {cols} FROM read_parquet({f})",
                            t = name.table(&table),
                            f = fp(&table)
                        ))?;
                        report.files += 1;
                    }
                }
                for (table, cols, hist) in [
                    (layout::current_table_name(a.entid), "e, v, tx", false),
                    (layout::history_table_name(a.entid), "e, v, tx, retracted_tx", true),
                ] {
                    if files.contains_key(&table) {
                        let n = conn.execute(
                            &format!(
                                "INSERT INTO {} SELECT {cols} FROM read_parquet({})",
                                name.table(&table),
                                fp(&table)
                            ),
                            [],
                        )? as i64;
                        report.files += 1;
                        if hist {
                            report.history += n;
                        } else {
                            report.current += n;
                        }
                    }
                }
                if old_index {
                    rebuild.push(a);
                }
            }
            Ok(())
        };
        load(layout::bootstrap_schema().attributes().into_iter().cloned().collect(), &mut report)?;
        let state = store::load_state(conn, name)?;
        load(state.schema.attributes().into_iter().cloned().collect(), &mut report)?;
        for a in &rebuild {
            crate::fulltext::rebuild(conn, name, state.schema.fulltext_language(), a)?;
        }
        if report.files != files.len() as i64 {
            let known: Vec<String> = state
                .schema
                .attributes()
                .iter()
                .flat_map(|a| {
                    let ft = crate::fulltext::tables(a).into_iter().map(|t| t.0);
                    [layout::current_table_name(a.entid), layout::history_table_name(a.entid)].into_iter().chain(ft)
                })
                .chain(["meta".to_string(), "partitions".to_string()])
                .collect();
            let stray: Vec<&String> = files.keys().filter(|f| !known.contains(f)).collect();
            return Err(StorageError::Store(format!(
                "{dir} holds files of no attribute of the exported schema: {stray:?}"
            )));
        }
        Ok(report)
    };
    crate::in_transaction(conn, run)
}

/// The `meta` key that marks a store read-only; its value says why (the directory of an attached export).
pub const READ_ONLY_KEY: &str = "read_only";

/// Opens the export in `dir` (any path DuckDB can read, `s3://...` with httpfs too) as the read-only store
/// `name`: a DuckDB schema of views over the Parquet files, created in one transaction. Queries (`mentat_q`,
/// pull) read the files directly. The snapshot is the latest, or with `snapshot` the kept snapshot of that
/// basis tx (a local directory: kept manifests are found by listing it). A datom table whose values the format
/// writes in another type ([`file_type`]: uuid as text, bigint as DECIMAL) is cast back to the store's type in
/// its view. Writers must refuse the store: [`read_only`] says so. Errors as [`import_store`].
pub fn attach(conn: &Connection, dir: &str, name: &StoreName, snapshot: Option<i64>) -> Result<ParquetReport> {
    // the views are kept in the database file: a local directory is named by its absolute path, so that they read
    // the same files from whatever directory the database is opened later
    let absolute = local_absolute(dir);
    let dir = absolute.as_deref().unwrap_or(dir);
    let files = export_files(conn, dir, name, snapshot)?;
    let fp = |t: &str| files.get(t).map_or_else(|| file(dir, t), |(p, _)| path_in(dir, p));
    let run = || -> Result<ParquetReport> {
        conn.execute_batch(&format!("CREATE SCHEMA {}", name.sql()))?;
        for f in files.keys() {
            // `meta` and `partitions` (a few rows) are copied into tables, which also makes the schema a store
            // for `Registry::open`; the datom tables are views over the files.
            let sql = match f.as_str() {
                "meta" => format!(
                    "CREATE TABLE {} AS SELECT key, value FROM read_parquet({}) UNION ALL SELECT '{READ_ONLY_KEY}', {}",
                    name.table(f),
                    fp(f),
                    quote_str(dir)
                ),
                "partitions" => {
                    format!("CREATE TABLE {} AS SELECT * FROM read_parquet({})", name.table(f), fp(f))
                }
                _ => match files.get(f).and_then(|(_, t)| t.as_deref()) {
                    Some(t) if file_type(t) != t => format!(
                        "CREATE VIEW {} AS SELECT * REPLACE (CAST(v AS {t}) AS v) FROM read_parquet({})",
                        name.table(f),
                        fp(f)
                    ),
                    _ => format!("CREATE VIEW {} AS SELECT * FROM read_parquet({})", name.table(f), fp(f)),
                },
            };
            conn.execute_batch(&sql)?;
        }
        // an export written before the term dictionary (format 1 or 2): its postings keyed by the term's text
        // are read through views of this layout (the dictionary numbered in term order, its df and the
        // statistics counted), slower than an import, which rebuilds the index, but the same answers
        for (f, aid) in files.keys().filter_map(|f| f.strip_prefix("ft_").map(|aid| (f, aid))) {
            let terms = format!("ftt_{aid}");
            if files.contains_key(&terms) {
                continue;
            }
            conn.execute_batch(&format!(
                "DROP VIEW {post}; \
                 CREATE VIEW {tt} AS SELECT term, (row_number() OVER (ORDER BY term))::INTEGER AS tid, \
                 count(*)::INTEGER AS df FROM read_parquet({pf}) GROUP BY term; \
                 CREATE VIEW {post} AS SELECT t.tid, p.e, p.h, p.tf, p.pos, p.len FROM read_parquet({pf}) p \
                 JOIN {tt} t ON t.term = p.term; \
                 CREATE VIEW {st} AS SELECT count(*)::BIGINT AS n, coalesce(sum(len), 0)::BIGINT AS total \
                 FROM read_parquet({df});",
                post = name.table(f),
                tt = name.table(&terms),
                st = name.table(&format!("fts_{aid}")),
                pf = fp(f),
                df = fp(&format!("ftd_{aid}")),
            ))?;
        }
        // the files of the snapshot (the manifest's, when there is one), not whatever else the directory holds
        let list: Vec<String> = files.keys().map(|f| fp(f)).collect();
        let glob = format!("[{}]", list.join(", "));
        let (current, history): (i64, i64) = conn.query_row(
            &format!(
                "SELECT coalesce(sum(num_rows) FILTER (WHERE starts_with(parse_filename(file_name), 'cur_')), 0)::BIGINT, \
                 coalesce(sum(num_rows) FILTER (WHERE starts_with(parse_filename(file_name), 'hist_')), 0)::BIGINT \
                 FROM parquet_file_metadata({glob})"
            ),
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        Ok(ParquetReport { files: files.len() as i64, current, history })
    };
    crate::in_transaction(conn, run)
}

/// The absolute path of `dir` when it is a relative path of an existing local directory (not a URL such as
/// `s3://...`), else None.
fn local_absolute(dir: &str) -> Option<String> {
    let path = std::path::Path::new(dir);
    if dir.contains("://") || path.is_absolute() || !path.is_dir() {
        return None;
    }
    std::fs::canonicalize(path).ok().and_then(|p| p.to_str().map(str::to_string))
}

/// Why the store `name` cannot be written (it is an attached Parquet export), or None. One small query.
pub fn read_only(conn: &Connection, name: &StoreName) -> Result<Option<String>> {
    let mut st = conn.prepare(&format!("SELECT value FROM {} WHERE key = ?", name.table("meta")))?;
    let mut rows = st.query([READ_ONLY_KEY])?;
    Ok(match rows.next()? {
        Some(r) => Some(r.get(0)?),
        None => None,
    })
}

/// The tables of the export in `dir` and their files (relative paths) with the manifest's `column_type`: those
/// the manifest of `snapshot` (None: the latest) names, else its Parquet files, checked to hold a store, for a
/// store `name` that must not exist yet.
fn export_files(
    conn: &Connection,
    dir: &str,
    name: &StoreName,
    snapshot: Option<i64>,
) -> Result<BTreeMap<String, (String, Option<String>)>> {
    let catalog = name.catalog.clone().unwrap_or_default();
    let exists: i64 = conn.query_row(
        "SELECT count(*) FROM duckdb_schemas() WHERE schema_name = ? \
         AND (? = '' AND database_name = current_database() OR database_name = ?)",
        duckdb::params![name.schema, catalog, catalog],
        |r| r.get(0),
    )?;
    if exists > 0 {
        return Err(StorageError::Store(format!(
            "{name} already exists: attach or import an export under a new name (store := ...)"
        )));
    }
    let files: BTreeMap<String, (String, Option<String>)> = match snapshot_at(dir, snapshot)? {
        Some(snapshot) => snapshot.files.into_iter().map(|w| (w.table, (w.path, w.column_type))).collect(),
        None => {
            let glob = quote_str(&format!("{}/*.parquet", dir.trim_end_matches('/')));
            let mut st = conn.prepare(&format!("SELECT parse_filename(file, true) FROM glob({glob}) ORDER BY 1"))?;
            let stems: Vec<String> = st.query_map([], |r| r.get(0))?.collect::<duckdb::Result<_>>()?;
            stems.into_iter().map(|t| (t.clone(), (format!("{t}.parquet"), None))).collect()
        }
    };
    if !files.contains_key("partitions") {
        return Err(StorageError::Store(format!(
            "export expected in {dir}, which holds no exported store: no partitions.parquet (mentat_export writes \
             one there; a directory that does not exist holds none either)"
        )));
    }
    Ok(files)
}
