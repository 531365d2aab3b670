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

/// The version of the export layout that `manifest.json` states (`docs/parquet-format.md`).
pub const FORMAT_VERSION: i64 = 1;

/// The manifest's file name in an export directory.
pub const MANIFEST: &str = "manifest.json";

/// One table of an export, as the manifest lists it.
struct Written {
    table: String,
    rows: i64,
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

/// Writes every table of `store` into `dir` (created if missing) as `<table>.parquet`, from one snapshot (one
/// read transaction under the store's writer lock, so no transaction lands half-way). Existing files of the same
/// names are overwritten. The files are written into a staging directory inside `dir` and renamed into place
/// only once all of them are written and the caller has not interrupted the call, so that an export that fails
/// (or is interrupted) leaves `dir` as it was. Errors: [`StorageError::DuckDb`] when a file cannot be written,
/// [`StorageError::Interrupted`].
pub fn export(conn: &Connection, store: &Store, dir: &str) -> Result<ParquetReport> {
    std::fs::create_dir_all(dir).map_err(|e| StorageError::Store(format!("cannot create {dir}: {e}")))?;
    let staging = format!(
        "{}/.mentat-export-{}-{}",
        dir.trim_end_matches('/'),
        std::process::id(),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
    );
    std::fs::create_dir_all(&staging).map_err(|e| StorageError::Store(format!("cannot create {staging}: {e}")))?;
    let written = export_into(conn, store, &staging).and_then(|(report, tables, basis_tx)| {
        if crate::interrupt::requested() {
            return Err(StorageError::Interrupted);
        }
        let manifest = manifest_json(store, &tables, basis_tx);
        let tmp = format!("{staging}/{MANIFEST}");
        std::fs::write(&tmp, manifest).map_err(|e| StorageError::Store(format!("cannot write {tmp}: {e}")))?;
        for w in &tables {
            let t = &w.table;
            let (from, to) = (format!("{staging}/{t}.parquet"), format!("{}/{t}.parquet", dir.trim_end_matches('/')));
            std::fs::rename(&from, &to).map_err(|e| StorageError::Store(format!("cannot move {from} to {to}: {e}")))?;
        }
        // last: a reader that finds the new manifest finds every file it names
        let to = format!("{}/{MANIFEST}", dir.trim_end_matches('/'));
        std::fs::rename(&tmp, &to).map_err(|e| StorageError::Store(format!("cannot move {tmp} to {to}: {e}")))?;
        Ok(report)
    });
    let _ = std::fs::remove_dir_all(&staging);
    written
}

/// The manifest of an export of `store` holding `tables`, as of `basis_tx` (format in `docs/parquet-format.md`).
fn manifest_json(store: &Store, tables: &[Written], basis_tx: i64) -> String {
    let schema = store.schema();
    let files: Vec<serde_json::Value> = tables
        .iter()
        .map(|w| {
            let t = w.table.as_str();
            let (kind, aid) = if let Some(a) = t.strip_prefix("cur_") {
                ("current", a.parse::<i64>().ok())
            } else if let Some(a) = t.strip_prefix("hist_") {
                ("history", a.parse::<i64>().ok())
            } else if t == "meta" || t == "partitions" {
                (t, None)
            } else {
                ("fulltext", t.split('_').nth(1).and_then(|a| a.split('.').next()).and_then(|a| a.parse().ok()))
            };
            let attr = aid.and_then(|a| schema.attribute(a));
            serde_json::json!({
                "table": t,
                "path": format!("{t}.parquet"),
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
        "files": files,
    });
    serde_json::to_string_pretty(&manifest).unwrap_or_default()
}

/// Writes every table of `store` into `dir` as [`export`] does, and names the tables written and the basis tx.
fn export_into(conn: &Connection, store: &Store, dir: &str) -> Result<(ParquetReport, Vec<Written>, i64)> {
    let _writer = store.lock_writer();
    let name = &store.name;
    let mut st = conn.prepare(
        "SELECT table_name FROM duckdb_tables() WHERE schema_name = ? \
         AND (? = '' AND database_name = current_database() OR database_name = ?) ORDER BY table_name",
    )?;
    let catalog = name.catalog.clone().unwrap_or_default();
    let tables: Vec<String> =
        st.query_map(duckdb::params![name.schema, catalog, catalog], |r| r.get(0))?.collect::<duckdb::Result<_>>()?;
    let run = || -> Result<(ParquetReport, Vec<Written>, i64)> {
        let mut report = ParquetReport { files: 0, current: 0, history: 0 };
        let mut written = Vec::new();
        let schema = store.schema();
        let basis_tx: i64 = conn.query_row(
            &format!("SELECT coalesce(max(e), 0)::BIGINT FROM {}", name.current(layout::DB_TX_INSTANT)),
            [],
            |r| r.get(0),
        )?;
        for t in &tables {
            // Parquet has no 128-bit integer (DuckDB would write a HUGEINT as a DOUBLE, losing digits): bigint
            // values, alone or inside a tuple, are written as DECIMAL(38,0), which holds each of them exactly
            // and which `import_store` casts back.
            let aid = t.strip_prefix("cur_").or_else(|| t.strip_prefix("hist_")).and_then(|a| a.parse().ok());
            let sql_type = aid.and_then(|a| schema.attribute(a)).map(|a| a.sql_type()).unwrap_or_default();
            let source = if sql_type.contains("HUGEINT") {
                let exact = sql_type.replace("HUGEINT", "DECIMAL(38,0)");
                format!("(SELECT * REPLACE (CAST(v AS {exact}) AS v) FROM {})", name.table(t))
            } else {
                name.table(t)
            };
            let n = conn.execute(&format!("COPY {source} TO {} (FORMAT parquet)", file(dir, t)), [])? as i64;
            report.files += 1;
            written.push(Written { table: t.clone(), rows: n });
            if t.starts_with("cur_") {
                report.current += n;
            } else if t.starts_with("hist_") {
                report.history += n;
            }
        }
        Ok((report, written, basis_tx))
    };
    crate::in_transaction(conn, run)
}

/// Rebuilds the store `name` from a directory written by [`export`], with the same entids, in one transaction.
/// The store must not exist yet. Errors: [`StorageError::Store`] when it exists, or when the directory holds
/// no export (no `partitions.parquet`) or a table file of an attribute its schema does not have;
/// [`StorageError::DuckDb`] for unreadable files.
pub fn import_store(conn: &Connection, dir: &str, name: &StoreName) -> Result<ParquetReport> {
    let files = export_files(conn, dir, name)?;
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
            mf = file(dir, "meta"),
            pf = file(dir, "partitions"),
        ))?;
        report.files += 2;
        let mut done = std::collections::HashSet::new();
        let mut load = |attrs: Vec<planner::schema::Attribute>, report: &mut ParquetReport| -> Result<()> {
            for a in attrs {
                if !done.insert(a.entid) {
                    continue;
                }
                for sql in store::attribute_ddl(name, &a) {
                    conn.execute_batch(&sql)?;
                }
                for (table, cols) in crate::fulltext::tables(&a) {
                    if files.contains(&table) {
                        conn.execute(
                            &format!(
                                "INSERT INTO {} SELECT {cols} FROM read_parquet({})",
                                name.table(&table),
                                file(dir, &table)
                            ),
                            [],
                        )?;
                        report.files += 1;
                    }
                }
                for (table, cols, hist) in [
                    (layout::current_table_name(a.entid), "e, v, tx", false),
                    (layout::history_table_name(a.entid), "e, v, tx, retracted_tx", true),
                ] {
                    if files.contains(&table) {
                        let n = conn.execute(
                            &format!(
                                "INSERT INTO {} SELECT {cols} FROM read_parquet({})",
                                name.table(&table),
                                file(dir, &table)
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
            }
            Ok(())
        };
        load(layout::bootstrap_schema().attributes().into_iter().cloned().collect(), &mut report)?;
        let state = store::load_state(conn, name)?;
        load(state.schema.attributes().into_iter().cloned().collect(), &mut report)?;
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
            let stray: Vec<&String> = files.iter().filter(|f| !known.contains(f)).collect();
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
/// pull) read the files directly. Writers must refuse it: [`read_only`] says so. Errors as [`import_store`].
pub fn attach(conn: &Connection, dir: &str, name: &StoreName) -> Result<ParquetReport> {
    let files = export_files(conn, dir, name)?;
    let run = || -> Result<ParquetReport> {
        conn.execute_batch(&format!("CREATE SCHEMA {}", name.sql()))?;
        for f in &files {
            // `meta` and `partitions` (a few rows) are copied into tables, which also makes the schema a store
            // for `Registry::open`; the datom tables are views over the files.
            let sql = match f.as_str() {
                "meta" => format!(
                    "CREATE TABLE {} AS SELECT key, value FROM read_parquet({}) UNION ALL SELECT '{READ_ONLY_KEY}', {}",
                    name.table(f),
                    file(dir, f),
                    quote_str(dir)
                ),
                "partitions" => {
                    format!("CREATE TABLE {} AS SELECT * FROM read_parquet({})", name.table(f), file(dir, f))
                }
                _ => format!("CREATE VIEW {} AS SELECT * FROM read_parquet({})", name.table(f), file(dir, f)),
            };
            conn.execute_batch(&sql)?;
        }
        // the files of the snapshot (the manifest's, when there is one), not whatever else the directory holds
        let list: Vec<String> = files.iter().map(|f| file(dir, f)).collect();
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

/// Why the store `name` cannot be written (it is an attached Parquet export), or None. One small query.
pub fn read_only(conn: &Connection, name: &StoreName) -> Result<Option<String>> {
    let mut st = conn.prepare(&format!("SELECT value FROM {} WHERE key = ?", name.table("meta")))?;
    let mut rows = st.query([READ_ONLY_KEY])?;
    Ok(match rows.next()? {
        Some(r) => Some(r.get(0)?),
        None => None,
    })
}

/// The tables that the manifest of the export in `dir` names (sorted), or None when `dir` has no manifest on the
/// local file system (an export written before manifests, or a remote path): then the directory's Parquet files
/// are the export. Errors: a manifest that cannot be read, or of another format version.
fn manifest_tables(dir: &str) -> Result<Option<Vec<String>>> {
    let path = std::path::Path::new(dir).join(MANIFEST);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(StorageError::Store(format!("cannot read {}: {e}", path.display()))),
    };
    let bad = |why: &str| StorageError::Store(format!("{}: {why}", path.display()));
    let m: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(&e.to_string()))?;
    if m["format_version"].as_i64() != Some(FORMAT_VERSION) {
        return Err(bad(&format!("format version {} is not {FORMAT_VERSION}", m["format_version"])));
    }
    let mut tables: Vec<String> = m["files"]
        .as_array()
        .ok_or_else(|| bad("no files"))?
        .iter()
        .map(|f| f["table"].as_str().map(str::to_string).ok_or_else(|| bad("a file without its table")))
        .collect::<Result<_>>()?;
    tables.sort();
    Ok(Some(tables))
}

/// The table names (file stems) of the export in `dir` (those its manifest names, else its Parquet files), checked
/// to hold a store, for a store `name` that must not exist yet.
fn export_files(conn: &Connection, dir: &str, name: &StoreName) -> Result<Vec<String>> {
    let catalog = name.catalog.clone().unwrap_or_default();
    let exists: i64 = conn.query_row(
        "SELECT count(*) FROM duckdb_schemas() WHERE schema_name = ? \
         AND (? = '' AND database_name = current_database() OR database_name = ?)",
        duckdb::params![name.schema, catalog, catalog],
        |r| r.get(0),
    )?;
    if exists > 0 {
        return Err(StorageError::Store(format!("{name} already exists: import a store into a new name")));
    }
    let files = match manifest_tables(dir)? {
        Some(tables) => tables,
        None => {
            let glob = quote_str(&format!("{}/*.parquet", dir.trim_end_matches('/')));
            let mut st = conn.prepare(&format!("SELECT parse_filename(file, true) FROM glob({glob}) ORDER BY 1"))?;
            let files: Vec<String> = st.query_map([], |r| r.get(0))?.collect::<duckdb::Result<_>>()?;
            files
        }
    };
    if !files.iter().any(|f| f == "partitions") {
        return Err(StorageError::Store(format!("{dir} holds no exported store (no partitions.parquet)")));
    }
    Ok(files)
}
