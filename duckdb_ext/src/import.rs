//! `mentat_import` (set-based bulk import of any SQL query, [`storage::import`]) and `mentat_export` /
//! `mentat_import_store` (a whole store as Parquet files and back, [`storage::parquet`]).

use crate::functions::{caller_and_store, instance_of, put_row, write_for, write_store, Once};
use crate::session::Caller;
use crate::Instance;
use duckdb::core::{DataChunkHandle, Inserter, LogicalTypeHandle, LogicalTypeId};
use duckdb::vtab::{BindInfo, InitInfo, TableFunctionInfo, VTab};
use planner::layout::StoreName;
use std::error::Error;
use std::sync::Arc;
use storage::import::{ImportOptions, MissingRefs};

type Res<T> = Result<T, Box<dyn Error>>;

/// `mentat_import(source_sql VARCHAR [, store := VARCHAR] [, refs := VARCHAR] [, missing_refs := VARCHAR])`
///
/// Imports every row of the query `source_sql` (`SELECT ...`, `FROM t`, `FROM read_csv(...)`,
/// `FROM read_parquet(...)`, a join) as one entity, in one transaction committed on mentat's own connection (as
/// `mentat_transact` is). Columns are named by attribute idents (`SELECT carrier AS ":airline/code"`) and cast to
/// the attribute's type; NULL is no datom. `refs := '{:flight/dest :airport/faa}'` makes a ref column's values
/// values of the target's unique attribute, resolved like lookup refs; `missing_refs := 'create'` creates a
/// missing target with only that attribute, `'error'` (the default) fails naming the value. A row whose
/// `:db.unique/identity` value an entity has is that entity (upsert: new cardinality-one values replace old ones).
/// The source runs on mentat's connection: it sees the database's tables and files, not the caller's temporary
/// tables. The store must exist (transact its schema first).
///
/// Returns one row: `tx BIGINT`, `tx_instant TIMESTAMPTZ`, `entities BIGINT` (source rows), `created BIGINT`
/// (entids allocated: new rows plus created ref targets), `datoms BIGINT` (asserted plus retracted, with the
/// `:db/txInstant` datom). On error nothing is written and the error names the column, value or row.
pub struct Import;

pub struct ImportBind {
    instance: Arc<Instance>,
    source: String,
    store: StoreName,
    opts: ImportOptions,
    caller: Caller,
}

fn named(bind: &BindInfo, name: &str) -> Option<String> {
    bind.get_named_parameter(name).filter(|v| !v.is_null()).map(|v| v.to_string())
}

impl VTab for Import {
    type InitData = Once;
    type BindData = ImportBind;

    fn bind(bind: &BindInfo) -> Res<ImportBind> {
        bind.add_result_column("tx", LogicalTypeHandle::from(LogicalTypeId::Bigint));
        bind.add_result_column("tx_instant", LogicalTypeHandle::from(LogicalTypeId::TimestampTZ));
        for c in ["entities", "created", "datoms"] {
            bind.add_result_column(c, LogicalTypeHandle::from(LogicalTypeId::Bigint));
        }
        let source = bind.get_parameter(0);
        if source.is_null() {
            return Err("mentat_import: the source query is NULL".into());
        }
        crate::nesting::check_sql(&source.to_string(), "mentat_import: the source query")?;
        let refs = match named(bind, "refs") {
            Some(edn) => {
                crate::nesting::check(&edn, "mentat_import: refs")?;
                ImportOptions::parse_refs(&edn)?
            }
            None => Vec::new(),
        };
        let missing_refs = match named(bind, "missing_refs") {
            Some(s) => MissingRefs::parse(&s)?,
            None => MissingRefs::Error,
        };
        let instance = instance_of(bind.get_extra_info::<Arc<Instance>>())?;
        let (caller, store) = caller_and_store(bind, &instance)?;
        Ok(ImportBind {
            instance,
            source: source.to_string(),
            store,
            opts: ImportOptions { refs, missing_refs },
            caller,
        })
    }

    fn init(_: &InitInfo) -> Res<Once> {
        Ok(Once::new())
    }

    fn func(func: &TableFunctionInfo<Self>, output: &mut DataChunkHandle) -> Res<()> {
        if !func.get_init_data().first(output) {
            return Ok(());
        }
        let b = func.get_bind_data();
        b.instance.settle()?;
        let r = write_store(&b.instance, &b.caller, &b.store, false, |conn, store| {
            storage::import::import(conn, store, &b.source, &b.opts)
        })?;
        put_row(output, &[r.tx, r.tx_instant, r.entities, r.created, r.datoms]);
        Ok(())
    }

    fn parameters() -> Option<Vec<LogicalTypeHandle>> {
        Some(vec![LogicalTypeHandle::from(LogicalTypeId::Varchar)])
    }

    fn named_parameters() -> Option<Vec<(String, LogicalTypeHandle)>> {
        Some(
            ["store", "refs", "missing_refs"]
                .into_iter()
                .map(|n| (n.to_string(), LogicalTypeHandle::from(LogicalTypeId::Varchar)))
                .collect(),
        )
    }
}

/// Registers `mentat_import`, `mentat_export`, `mentat_import_store`, `mentat_attach_parquet`,
/// `mentat_snapshots`, `mentat_prune_export` and `mentat_fulltext_language` on `con`.
pub fn register(con: &duckdb::Connection, instance: &Arc<Instance>) -> Res<()> {
    con.register_table_function_with_extra_info::<Import, _>("mentat_import", instance)?;
    con.register_table_function_with_extra_info::<Parquet<EXPORT>, _>("mentat_export", instance)?;
    con.register_table_function_with_extra_info::<Parquet<IMPORT_STORE>, _>("mentat_import_store", instance)?;
    con.register_table_function_with_extra_info::<Parquet<ATTACH>, _>("mentat_attach_parquet", instance)?;
    con.register_table_function::<Snapshots>("mentat_snapshots")?;
    con.register_table_function::<Prune>("mentat_prune_export")?;
    con.register_table_function_with_extra_info::<FulltextLanguage, _>("mentat_fulltext_language", instance)?;
    Ok(())
}

/// `mentat_fulltext_language(language VARCHAR [, store := VARCHAR])` sets the stemming language of the store's
/// fulltext analyzer and rebuilds the index of every `:db/fulltext` attribute with it, in one transaction
/// ([`storage::fulltext::set_language`]): `none` (no stemming), `english` (the default of a store that never set
/// one), `french`, `german`, `spanish`, `russian` and the other Snowball stemmers of `rust-stemmers`,
/// case-insensitive. Searches analyze their terms with the same language from then on. The store must exist.
///
/// Returns one row: `language VARCHAR`, `attributes BIGINT` (fulltext attributes re-indexed), `documents BIGINT`,
/// `terms BIGINT`. An unknown language fails naming it and listing the known ones; nothing changes.
pub struct FulltextLanguage;

pub struct LanguageBind {
    instance: Arc<Instance>,
    language: String,
    store: StoreName,
    caller: Caller,
}

impl VTab for FulltextLanguage {
    type InitData = Once;
    type BindData = LanguageBind;

    fn bind(bind: &BindInfo) -> Res<LanguageBind> {
        bind.add_result_column("language", LogicalTypeHandle::from(LogicalTypeId::Varchar));
        for c in ["attributes", "documents", "terms"] {
            bind.add_result_column(c, LogicalTypeHandle::from(LogicalTypeId::Bigint));
        }
        let language = bind.get_parameter(0);
        if language.is_null() {
            return Err("mentat_fulltext_language: the language is NULL".into());
        }
        let language = language.to_string();
        planner::fulltext::Analyzer::new(&language.trim().to_lowercase())
            .map_err(|e| format!("mentat_fulltext_language: {e}"))?;
        let instance = instance_of(bind.get_extra_info::<Arc<Instance>>())?;
        let (caller, store) = caller_and_store(bind, &instance)?;
        Ok(LanguageBind { instance, language, store, caller })
    }

    fn init(_: &InitInfo) -> Res<Once> {
        Ok(Once::new())
    }

    fn func(func: &TableFunctionInfo<Self>, output: &mut DataChunkHandle) -> Res<()> {
        if !func.get_init_data().first(output) {
            return Ok(());
        }
        let b = func.get_bind_data();
        b.instance.settle()?;
        let r = write_store(&b.instance, &b.caller, &b.store, false, |conn, store| {
            storage::fulltext::set_language(conn, store, &b.language)
        })?;
        output.flat_vector(0).insert(0, r.language.as_str());
        for (i, x) in [r.attributes, r.documents, r.terms].into_iter().enumerate() {
            crate::functions::put::<i64>(&mut output.flat_vector(i + 1), 0, x);
        }
        output.set_len(1);
        Ok(())
    }

    fn parameters() -> Option<Vec<LogicalTypeHandle>> {
        Some(vec![LogicalTypeHandle::from(LogicalTypeId::Varchar)])
    }

    fn named_parameters() -> Option<Vec<(String, LogicalTypeHandle)>> {
        Some(vec![("store".to_string(), LogicalTypeHandle::from(LogicalTypeId::Varchar))])
    }
}

/// `mentat_export(dir VARCHAR [, store := VARCHAR])` writes the whole store as one Parquet file per table into
/// `dir` (layout: `storage::parquet`, `docs/parquet-format.md`; into a directory holding an earlier export of the
/// store, only what changed, as a new snapshot); `mentat_import_store(dir VARCHAR [, store := VARCHAR,
/// snapshot := BIGINT])` rebuilds a store that does not exist yet from such a directory, with the same entids, in
/// one transaction; `mentat_attach_parquet(dir VARCHAR [, store := VARCHAR, snapshot := BIGINT])` opens it as a
/// read-only store whose datoms are read straight from the files (mentat_q works on it; mentat_import refuses it).
/// Both read the latest snapshot, or with `snapshot :=` the kept snapshot of that basis tx (`mentat_snapshots`).
///
/// All three return one row: `files BIGINT`, `current BIGINT` (current-state datoms), `history BIGINT` (history
/// rows). Errors: a missing store (export), an existing store, a directory without an export or without the
/// snapshot asked for (import, attach), unreadable or unwritable files.
pub struct Parquet<const MODE: u8>;

const EXPORT: u8 = 0;
const IMPORT_STORE: u8 = 1;
const ATTACH: u8 = 2;

pub struct ParquetBind {
    instance: Arc<Instance>,
    dir: String,
    store: StoreName,
    caller: Caller,
    /// `snapshot :=`: the basis tx of the snapshot to read (import and attach), None for the latest.
    snapshot: Option<i64>,
}

impl<const MODE: u8> VTab for Parquet<MODE> {
    type InitData = Once;
    type BindData = ParquetBind;

    fn bind(bind: &BindInfo) -> Res<ParquetBind> {
        for c in ["files", "current", "history"] {
            bind.add_result_column(c, LogicalTypeHandle::from(LogicalTypeId::Bigint));
        }
        let dir = bind.get_parameter(0);
        if dir.is_null() {
            return Err("mentat: the directory is NULL".into());
        }
        let instance = instance_of(bind.get_extra_info::<Arc<Instance>>())?;
        let (caller, store) = caller_and_store(bind, &instance)?;
        let snapshot = match bind.get_named_parameter("snapshot").filter(|v| !v.is_null()) {
            Some(v) => {
                let text = v.to_string();
                Some(text.parse::<i64>().map_err(|_| format!("mentat: snapshot := {text} is not a basis tx"))?)
            }
            None => None,
        };
        Ok(ParquetBind { instance, dir: dir.to_string(), store, caller, snapshot })
    }

    fn init(_: &InitInfo) -> Res<Once> {
        Ok(Once::new())
    }

    fn func(func: &TableFunctionInfo<Self>, output: &mut DataChunkHandle) -> Res<()> {
        if !func.get_init_data().first(output) {
            return Ok(());
        }
        let b = func.get_bind_data();
        b.instance.settle()?;
        let r = write_for(&b.instance, &b.caller, |conn| match MODE {
            EXPORT => {
                let store = b.instance.stores.open(conn, &b.store, false)?;
                storage::parquet::export(conn, &store, &b.dir)
            }
            _ => {
                b.instance.stores.forget(&b.store);
                if MODE == ATTACH {
                    storage::parquet::attach(conn, &b.dir, &b.store, b.snapshot)
                } else {
                    storage::parquet::import_store(conn, &b.dir, &b.store, b.snapshot)
                }
            }
        })?;
        put_row(output, &[r.files, r.current, r.history]);
        Ok(())
    }

    fn parameters() -> Option<Vec<LogicalTypeHandle>> {
        Some(vec![LogicalTypeHandle::from(LogicalTypeId::Varchar)])
    }

    fn named_parameters() -> Option<Vec<(String, LogicalTypeHandle)>> {
        let mut named = vec![("store".to_string(), LogicalTypeHandle::from(LogicalTypeId::Varchar))];
        if MODE != EXPORT {
            named.push(("snapshot".to_string(), LogicalTypeHandle::from(LogicalTypeId::Bigint)));
        }
        Some(named)
    }
}

/// `mentat_snapshots(dir VARCHAR)`: the snapshots an export directory keeps (each `mentat_export` into it that
/// found changes added one; `storage::parquet::snapshots`), oldest first, the latest last. One row each:
/// `basis_tx BIGINT`, `basis_instant TIMESTAMPTZ` (its `:db/txInstant`, NULL if the manifest does not state it),
/// `manifest VARCHAR` (the file naming it), `files BIGINT`, `bytes BIGINT` (of its files on disk, shared ones
/// included), `current BIGINT`, `history BIGINT` (rows), `latest BOOLEAN`. No rows for a directory without a
/// manifest. Errors: not a directory, an unreadable manifest. Local file systems only.
pub struct Snapshots;

/// `mentat_prune_export(dir VARCHAR [, keep := BIGINT])`: drops all but the `keep` (default 1) newest snapshots of
/// an export directory, the latest always kept: their manifests first, then every file that only they named
/// (`storage::parquet::prune`; files no manifest names are never touched). A reader still reading a dropped
/// snapshot loses its files, so prune when none does. One row: `kept BIGINT`, `removed BIGINT` (snapshots),
/// `files BIGINT`, `bytes BIGINT` (deleted). Errors: `keep` below 1, not a directory, a file that cannot be deleted.
pub struct Prune;

pub struct DirBind {
    dir: String,
    keep: i64,
}

fn dir_bind(bind: &BindInfo, what: &str) -> Res<DirBind> {
    let dir = bind.get_parameter(0);
    if dir.is_null() {
        return Err(format!("{what}: the directory is NULL").into());
    }
    let keep = match bind.get_named_parameter("keep").filter(|v| !v.is_null()) {
        Some(v) => {
            let text = v.to_string();
            text.parse::<i64>().map_err(|_| format!("{what}: keep := {text} is not a number"))?
        }
        None => 1,
    };
    Ok(DirBind { dir: dir.to_string(), keep })
}

impl VTab for Snapshots {
    type InitData = Once;
    type BindData = DirBind;

    fn bind(bind: &BindInfo) -> Res<DirBind> {
        let big = || LogicalTypeHandle::from(LogicalTypeId::Bigint);
        bind.add_result_column("basis_tx", big());
        bind.add_result_column("basis_instant", LogicalTypeHandle::from(LogicalTypeId::TimestampTZ));
        bind.add_result_column("manifest", LogicalTypeHandle::from(LogicalTypeId::Varchar));
        for c in ["files", "bytes", "current", "history"] {
            bind.add_result_column(c, big());
        }
        bind.add_result_column("latest", LogicalTypeHandle::from(LogicalTypeId::Boolean));
        dir_bind(bind, "mentat_snapshots")
    }

    fn init(_: &InitInfo) -> Res<Once> {
        Ok(Once::new())
    }

    fn func(func: &TableFunctionInfo<Self>, output: &mut DataChunkHandle) -> Res<()> {
        if !func.get_init_data().first(output) {
            return Ok(());
        }
        let all = storage::parquet::snapshots(&func.get_bind_data().dir)?;
        // a directory keeps one snapshot per export: far fewer than a vector's 2,048 rows in practice
        let all = &all[..all.len().min(output.flat_vector(0).capacity())];
        for (i, s) in all.iter().enumerate() {
            crate::functions::put::<i64>(&mut output.flat_vector(0), i, s.basis_tx);
            let mut instant = output.flat_vector(1);
            match s.basis_instant_us {
                Some(us) => crate::functions::put::<i64>(&mut instant, i, us),
                None => instant.set_null(i),
            }
            output.flat_vector(2).insert(i, s.manifest.as_str());
            for (c, x) in [s.files, s.bytes, s.current, s.history].into_iter().enumerate() {
                crate::functions::put::<i64>(&mut output.flat_vector(3 + c), i, x);
            }
            crate::functions::put::<bool>(&mut output.flat_vector(7), i, s.latest);
        }
        output.set_len(all.len());
        Ok(())
    }

    fn parameters() -> Option<Vec<LogicalTypeHandle>> {
        Some(vec![LogicalTypeHandle::from(LogicalTypeId::Varchar)])
    }
}

impl VTab for Prune {
    type InitData = Once;
    type BindData = DirBind;

    fn bind(bind: &BindInfo) -> Res<DirBind> {
        for c in ["kept", "removed", "files", "bytes"] {
            bind.add_result_column(c, LogicalTypeHandle::from(LogicalTypeId::Bigint));
        }
        let b = dir_bind(bind, "mentat_prune_export")?;
        if b.keep < 1 {
            return Err(format!(
                "mentat_prune_export: keep := {}: the latest snapshot is always kept (keep >= 1)",
                b.keep
            )
            .into());
        }
        Ok(b)
    }

    fn init(_: &InitInfo) -> Res<Once> {
        Ok(Once::new())
    }

    fn func(func: &TableFunctionInfo<Self>, output: &mut DataChunkHandle) -> Res<()> {
        if !func.get_init_data().first(output) {
            return Ok(());
        }
        let b = func.get_bind_data();
        let r = storage::parquet::prune(&b.dir, b.keep)?;
        put_row(output, &[r.kept, r.removed, r.files, r.bytes]);
        Ok(())
    }

    fn parameters() -> Option<Vec<LogicalTypeHandle>> {
        Some(vec![LogicalTypeHandle::from(LogicalTypeId::Varchar)])
    }

    fn named_parameters() -> Option<Vec<(String, LogicalTypeHandle)>> {
        Some(vec![("keep".to_string(), LogicalTypeHandle::from(LogicalTypeId::Bigint))])
    }
}
