//! Set-based bulk import: every row of an SQL query becomes one entity, in one transaction.
//!
//! The columns of the source query are named by attribute idents (`SELECT carrier AS ":airline/code" ...`);
//! NULL means "no datom". The whole import is a handful of SQL statements, never a loop over rows:
//!
//! 1. **stage**: the source is materialized once into a connection-local temporary table, with a row number
//!    `0..n`.
//! 2. **check types**: one scan over the columns whose DuckDB type differs from the attribute's column type
//!    finds the first value that does not cast (or that a cast would change, such as `1.5` for a long). A LIST
//!    column (`VARCHAR[]`, or an ARRAY `BIGINT[3]`) of a cardinality-many attribute is read through
//!    `UNNEST`: every non-null element is one value, an empty or NULL list none, a value repeated in one list
//!    one datom. Any other nested column (a list for a cardinality-one attribute, a STRUCT, MAP, UNION, a
//!    list of lists) is refused by its DuckDB type before anything is read.
//! 3. **resolve refs**: a ref column named in `refs` holds values of the target's unique attribute; they
//!    resolve like lookup refs by a join against `cur_<target>`. Missing targets are an error naming the
//!    value, or (with [`MissingRefs::Create`]) new entities that get only their identity datom.
//! 4. **upsert**: a row whose `:db.unique/identity` value some entity already has is that entity; the other
//!    rows get new entids, `next_user + row` (or a dense numbering when some rows upserted). Then one scan
//!    over the ref columns that hold entids refuses a value that no partition has allocated, counting the
//!    entids this import gives out (as `mentat_transact` refuses an unallocated entid).
//! 5. **write**: one `INSERT INTO cur_<aid> ... SELECT` per column. For upserted entities, values they already
//!    have are skipped and a cardinality-one attribute's old value is retracted (deleted from current state and
//!    moved to `hist_<aid>` with its assertion's tx and this transaction as `retracted_tx`).
//!
//! Everything runs in one DuckDB transaction on the caller's connection under the store's writer lock, with one
//! transaction entity and its `:db/txInstant` datom; on any error the store is unchanged.
//!
//! The source runs on the connection given (in the extension: one of mentat's own), so it can read tables,
//! views and files of the database, but not the temporary tables of another connection.

use crate::error::{Result, StorageError};
use crate::store::{Store, StoreState};
use duckdb::Connection;
use edn_format::Value as Edn;
use planner::layout::{self, quote_ident, StoreName};
use planner::schema::{Attribute, Entid, Schema, Unique, ValueType};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// An import running longer than this reports its steps on stderr.
pub const PROGRESS_AFTER: Duration = Duration::from_secs(5);

/// The staged source rows.
const SRC: &str = "mentat_import_src";
/// The staged row number column, `0..n` (a table's `rowid` is not: inside a transaction it starts at 2^55).
const ROW: &str = "mentat_import_row";
/// Row number to entid, when some rows upsert to existing entities.
const ENT: &str = "mentat_import_ent";
/// Ref target values that no entity has yet.
const MISSING: &str = "mentat_import_missing";
/// The existing entities each row's identity values reach, as a list (`olds`) and then as one (`old`).
const OLDS: &str = "mentat_import_olds";
const OLD: &str = "mentat_import_old";
/// The datoms of one column, when they must be compared with current state.
const DATOMS: &str = "mentat_import_datoms";
/// Old values of a cardinality-one attribute that an upsert replaces.
const REPLACED: &str = "mentat_import_replaced";

/// What to do with a ref value whose target entity does not exist.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MissingRefs {
    /// Fail, naming the column and the value (the default).
    #[default]
    Error,
    /// Create the target entity with only its unique attribute (an upsert of the lookup ref).
    Create,
}

impl MissingRefs {
    /// Parses `'error'` or `'create'` (case-insensitive). Errors with [`StorageError::BadForm`] otherwise.
    pub fn parse(s: &str) -> Result<MissingRefs> {
        match s.trim().to_ascii_lowercase().as_str() {
            "error" => Ok(MissingRefs::Error),
            "create" => Ok(MissingRefs::Create),
            _ => Err(StorageError::BadForm {
                form: format!("missing_refs := {}", layout::quote_str(s)),
                reason: "expected 'error' or 'create'".into(),
            }),
        }
    }
}

/// Options of [`import`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImportOptions {
    /// Ref columns whose values are values of a unique attribute of the target, as (column ident, target
    /// attribute ident) pairs. A ref column not listed here holds entids.
    pub refs: Vec<(String, String)>,
    /// What a ref value without a target does.
    pub missing_refs: MissingRefs,
}

impl ImportOptions {
    /// Reads the `refs` option: an EDN map from ref attribute to the target's unique attribute,
    /// `{:flight/carrier :airline/code, :flight/dest :airport/faa}`. Errors with [`StorageError::Edn`] on bad
    /// EDN and [`StorageError::BadForm`] when it is not a map of keywords.
    pub fn parse_refs(edn: &str) -> Result<Vec<(String, String)>> {
        let v = planner::parse::read_edn(edn).map_err(|e| StorageError::edn(edn, &e))?;
        let bad = |reason: &str| StorageError::BadForm { form: edn.to_string(), reason: reason.to_string() };
        let Edn::Map(m) = v else {
            return Err(bad("refs := is an EDN map {:ref/attribute :target/unique-attribute ...}"));
        };
        let mut out = Vec::new();
        for (k, v) in m {
            match (&k, &v) {
                (Edn::Keyword(a), Edn::Keyword(b)) => out.push((a.to_string(), b.to_string())),
                _ => return Err(bad("refs := maps keywords to keywords")),
            }
        }
        Ok(out)
    }
}

/// What a committed import reports (the row `mentat_import` returns).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImportReport {
    /// The transaction's entid.
    pub tx: Entid,
    /// `:db/txInstant`, microseconds since the Unix epoch, UTC.
    pub tx_instant: i64,
    /// Source rows, one entity each (new or upserted).
    pub entities: i64,
    /// Entids allocated: rows that matched no existing entity plus ref targets created.
    pub created: i64,
    /// Datoms asserted plus datoms retracted, including the `:db/txInstant` datom.
    pub datoms: i64,
}

/// Imports every row of `source_sql` (a query: `SELECT ...`, `FROM t`, `FROM read_csv(...)`) into `store` as one
/// entity per row, in one transaction committed before this returns.
///
/// Each column is named by an attribute ident of the store's schema and cast to the attribute's type; NULL is
/// no datom; a LIST column of a cardinality-many attribute gives one value per element. Errors (the store is
/// unchanged): [`StorageError::UnknownAttribute`] for a column that names no attribute (or a bootstrap
/// `:db/...` attribute), [`StorageError::BadForm`] for a nested column the attribute cannot take (naming its
/// DuckDB type) and for a ref column holding an entid no partition has allocated, [`StorageError::WrongType`]
/// naming the column, the first bad value and its row, [`StorageError::LookupRef`] naming a ref value without a
/// target (unless [`MissingRefs::Create`]), [`StorageError::Conflict`] for two rows with one identity value,
/// [`StorageError::UniqueConflict`] for a unique value another entity holds, [`StorageError::UpsertConflict`]
/// for a row whose identity values reach two entities, [`StorageError::DuckDb`] for a source that fails.
pub fn import(conn: &Connection, store: &Store, source_sql: &str, opts: &ImportOptions) -> Result<ImportReport> {
    if let Some(why) = store.read_only() {
        return Err(StorageError::Store(format!("{} is read-only: {why}", store.name)));
    }
    let _writer = store.lock_writer_settled(conn)?;
    let started = Instant::now();
    // Inside the transaction, so that the partition marks read here are the ones this import moves.
    let run = || -> Result<(ImportReport, StoreState)> {
        let state = store.refresh(conn)?;
        let mut job =
            Import { conn, store: &store.name, schema: &state.schema, parts: state.parts, datoms: 0, started };
        let report = job.run(source_sql, opts)?;
        job.progress("committing");
        Ok((report, StoreState { schema: state.schema.clone(), parts: job.parts }))
    };
    let (report, state) = crate::in_transaction(conn, run)?;
    // Also forgets the store's unique-value cache, which this import did not keep up to date.
    store.set_state(state);
    Ok(report)
}

/// One source column and the attribute it names.
struct Column<'s> {
    /// The column name, which is the attribute's ident.
    name: String,
    /// Its DuckDB type in the staged table; for a list column, the type of its elements.
    source_type: String,
    /// A LIST (or ARRAY) column, each element one value: its DuckDB type, as `DESCRIBE` names it.
    list: Option<String>,
    attr: &'s Attribute,
    /// For a ref column resolved through a unique attribute: that attribute.
    target: Option<&'s Attribute>,
}

impl Column<'_> {
    fn col(&self) -> String {
        format!("s.{}", quote_ident(&self.name))
    }

    /// The relation `s` that [`Column::col`] and `s.<row>` are read from: the staged table, or for a list
    /// column one row per element (`UNNEST`; an empty or NULL list gives no row).
    fn source(&self) -> String {
        match self.list {
            None => format!("{SRC} s"),
            Some(_) => {
                let q = quote_ident(&self.name);
                format!("(SELECT {ROW}, unnest({q}) AS {q} FROM {SRC}) s")
            }
        }
    }

    /// `DISTINCT` for a list column (a value twice in one list is one datom, after the cast), else nothing.
    fn distinct(&self) -> &'static str {
        if self.list.is_some() {
            "DISTINCT "
        } else {
            ""
        }
    }

    /// The type the column's values are cast to: the target attribute's for a resolved ref.
    fn value_type(&self) -> ValueType {
        self.target.map_or(self.attr.value_type, |t| t.value_type)
    }

    /// SQL for the column's value cast to [`Column::value_type`] (with `try`: NULL when it does not cast).
    fn cast(&self, try_: bool) -> String {
        cast_sql(&self.col(), &self.source_type, self.value_type(), try_)
    }

    /// SQL that is true for a non-null value that does not fit the attribute's type.
    fn bad_value(&self) -> Option<String> {
        let t = self.value_type();
        let src = normalize_type(&self.source_type);
        let (col, tried) = (self.col(), self.cast(true));
        let extra = match t {
            ValueType::Ref | ValueType::Long | ValueType::BigInt if is_fractional(&src) => {
                format!(" OR {tried} <> {col}")
            }
            // A decimal of more than 18 places would be rounded: refused, as the transactor refuses it.
            ValueType::BigDec if src.starts_with("DECIMAL") && src != t.sql_type() => format!(" OR {tried} <> {col}"),
            ValueType::Keyword => format!(" OR NOT starts_with({tried}, ':')"),
            _ if src == t.sql_type() => return None,
            _ => String::new(),
        };
        Some(format!("({col} IS NOT NULL AND ({tried} IS NULL{extra}))"))
    }

    /// The joins and the SQL of the stored value, over `SRC s`: a resolved ref joins its target's current
    /// state (alias `r<k>`, inner or left) and its value is the target's entid.
    fn value(&self, k: usize, store: &StoreName, left: bool) -> (String, String) {
        match self.target {
            Some(t) => {
                let join = if left { "LEFT JOIN" } else { "JOIN" };
                (format!(" {join} {} r{k} ON r{k}.v = {}", store.current(t.entid), self.cast(false)), format!("r{k}.e"))
            }
            None => (String::new(), self.cast(false)),
        }
    }
}

fn normalize_type(t: &str) -> String {
    match t.to_ascii_uppercase().as_str() {
        "TIMESTAMP WITH TIME ZONE" => "TIMESTAMPTZ".into(),
        "INT64" | "LONG" => "BIGINT".into(),
        other => other.to_string(),
    }
}

/// What a staged column's DuckDB type is to the import.
#[derive(Debug, PartialEq, Eq)]
enum Shape {
    /// One value per row.
    Scalar,
    /// A LIST `T[]` or ARRAY `T[n]` of scalars: the element type.
    List(String),
    /// A STRUCT, MAP, UNION, VARIANT, or a list of any of these or of lists.
    Nested,
}

/// A STRUCT, MAP, UNION or VARIANT type (a type name such as `MAPLE` is not).
fn is_nested_scalar(t: &str) -> bool {
    let t = t.trim_start().to_ascii_uppercase();
    ["STRUCT", "MAP", "UNION", "VARIANT"]
        .iter()
        .any(|p| t.starts_with(p) && !t[p.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_'))
}

/// Reads a DuckDB type as `DESCRIBE` writes it: `VARCHAR[]` and `INTEGER[3]` are lists of `VARCHAR` and
/// `INTEGER`; `STRUCT(...)`, `MAP(...)`, `UNION(...)`, `VARIANT` and lists of them or of lists are nested.
fn shape(t: &str) -> Shape {
    let t = t.trim();
    if is_nested_scalar(t) && !t.ends_with(']') {
        return Shape::Nested;
    }
    match (t.ends_with(']'), t.rfind('[')) {
        (true, Some(open)) => {
            let elem = t[..open].trim();
            if elem.ends_with(']') || is_nested_scalar(elem) {
                Shape::Nested
            } else {
                Shape::List(elem.to_string())
            }
        }
        _ => Shape::Scalar,
    }
}

fn is_fractional(t: &str) -> bool {
    t == "DOUBLE" || t == "FLOAT" || t == "REAL" || t.starts_with("DECIMAL")
}

/// SQL casting `col` (of DuckDB type `source_type`) to the column type of `t`. TIMESTAMP and DATE values become
/// instants as UTC, whatever the session's time zone.
fn cast_sql(col: &str, source_type: &str, t: ValueType, try_: bool) -> String {
    let src = normalize_type(source_type);
    let cast = if try_ { "TRY_CAST" } else { "CAST" };
    if src == t.sql_type() {
        return col.to_string();
    }
    if t == ValueType::Instant && (src.starts_with("TIMESTAMP") || src == "DATE") {
        return format!("make_timestamptz(epoch_us({cast}({col} AS TIMESTAMP)))");
    }
    format!("{cast}({col} AS {})", t.sql_type())
}

struct Import<'a> {
    conn: &'a Connection,
    store: &'a StoreName,
    schema: &'a Schema,
    parts: crate::store::Partitions,
    datoms: i64,
    started: Instant,
}

impl<'a> Import<'a> {
    fn exec(&mut self, sql: &str) -> Result<usize> {
        Ok(self.conn.execute(sql, [])?)
    }

    /// Progress of a long import, on stderr: DuckDB's progress bar cannot see into a table function's own
    /// statements, so an import that has run longer than [`PROGRESS_AFTER`] says what it is doing.
    fn progress(&self, step: &str) {
        let t = self.started.elapsed();
        if t >= PROGRESS_AFTER {
            crate::trace::say(format_args!("mentat_import: {:>6.1} s  {step}", t.as_secs_f64()));
        }
    }

    /// Runs a statement that writes datoms and counts them.
    fn write(&mut self, sql: &str) -> Result<()> {
        let n = self.exec(sql)?;
        self.datoms += n as i64;
        Ok(())
    }

    fn first_row(&self, sql: &str, n: usize) -> Result<Option<Vec<Option<String>>>> {
        let mut st = self.conn.prepare(sql)?;
        let mut rows = st.query([])?;
        match rows.next()? {
            Some(r) => Ok(Some((0..n).map(|i| r.get::<_, Option<String>>(i)).collect::<duckdb::Result<_>>()?)),
            None => Ok(None),
        }
    }

    fn run(&mut self, source_sql: &str, opts: &ImportOptions) -> Result<ImportReport> {
        let tx = self.parts.next_tx;
        self.parts.next_tx += 1;
        let source_sql = source_sql.trim().trim_end_matches(';');
        // the closing parenthesis on a line of its own: a source ending in a `-- comment` would swallow it
        self.exec(&format!(
            "CREATE OR REPLACE TEMP TABLE {SRC} AS SELECT row_number() OVER () - 1 AS {ROW}, * FROM ({source_sql}\n)"
        ))?;
        let total: i64 = self.conn.query_row(&format!("SELECT count(*) FROM {SRC}"), [], |r| r.get(0))?;
        self.progress(&format!("staged {total} rows"));
        let columns = self.columns(opts)?;
        self.check_types(&columns)?;
        let created_refs = self.resolve_refs(&columns, opts, tx)?;
        let upserted = self.upsert(&columns, total)?;
        let new_rows = total - upserted;
        self.check_allocated(&columns, self.parts.next_user + new_rows)?;
        self.check_unique(&columns, upserted > 0)?;
        let entity = if upserted > 0 { format!(" JOIN {ENT} x ON x.n = s.{ROW}") } else { String::new() };
        let e_expr = if upserted > 0 { "x.e".to_string() } else { format!("({} + s.{ROW})", self.parts.next_user) };
        for (k, c) in columns.iter().enumerate() {
            self.progress(&format!("writing {} ({}/{} columns, {} rows)", c.attr.ident, k + 1, columns.len(), total));
            let (join, v) = c.value(k, self.store, false);
            let from = format!("{}{entity}{join} WHERE {} IS NOT NULL", c.source(), c.col());
            let distinct = c.distinct();
            let (cur, hist) = (self.store.current(c.attr.entid), self.store.history(c.attr.entid));
            if upserted == 0 {
                self.write(&format!("INSERT INTO {cur} SELECT {distinct}{e_expr}, {v}, {tx} FROM {from}"))?;
                continue;
            }
            self.exec(&format!(
                "CREATE OR REPLACE TEMP TABLE {DATOMS} AS SELECT {distinct}x.e AS e, {v} AS v, x.existed AS existed \
                 FROM {from}"
            ))?;
            self.exec(&format!("DELETE FROM {DATOMS} d USING {cur} c WHERE d.existed AND c.e = d.e AND c.v = d.v"))?;
            if !c.attr.many {
                self.exec(&format!(
                    "CREATE OR REPLACE TEMP TABLE {REPLACED} AS SELECT c.e, c.v, c.tx FROM {cur} c \
                     JOIN {DATOMS} d ON c.e = d.e WHERE d.existed"
                ))?;
                self.write(&format!("INSERT INTO {hist} SELECT e, v, tx, {tx} FROM {REPLACED}"))?;
                if c.attr.fulltext {
                    crate::fulltext::unindex(self.conn, self.store, c.attr, &format!("SELECT e, v FROM {REPLACED}"))?;
                }
                self.exec(&format!("DELETE FROM {cur} c USING {REPLACED} r WHERE c.e = r.e AND c.v = r.v"))?;
            }
            self.write(&format!("INSERT INTO {cur} SELECT e, v, {tx} FROM {DATOMS}"))?;
        }
        // The fulltext index of every fulltext attribute written (columns and created ref targets alike): the
        // datoms this import asserted are the current rows of its tx.
        for a in self.schema.attributes().into_iter().filter(|a| a.fulltext) {
            self.progress(&format!("indexing {} for fulltext search", a.ident));
            let docs = format!("SELECT e, v FROM {} WHERE tx = {tx}", self.store.current(a.entid));
            crate::fulltext::index(self.conn, self.store, self.schema.fulltext_language(), a, &docs)?;
        }
        self.parts.next_user += new_rows;
        let tx_instant = chrono::Utc::now().timestamp_micros().max(self.parts.last_tx_instant);
        self.parts.last_tx_instant = tx_instant;
        let cur = self.store.current(layout::DB_TX_INSTANT);
        self.write(&format!("INSERT INTO {cur} VALUES ({tx}, make_timestamptz({tx_instant}::BIGINT), {tx})"))?;
        let (next_user, next_tx) = (self.parts.next_user, self.parts.next_tx);
        crate::transactor::rewrite_partitions(self.conn, self.store, |ident, next| match ident {
            ":db.part/user" => next_user,
            ":db.part/tx" => next_tx,
            _ => next,
        })?;
        self.conn.execute_batch(&format!(
            "DROP TABLE IF EXISTS {SRC}; DROP TABLE IF EXISTS {ENT}; DROP TABLE IF EXISTS {MISSING}; \
             DROP TABLE IF EXISTS {DATOMS}; DROP TABLE IF EXISTS {REPLACED}; \
             DROP TABLE IF EXISTS {OLDS}; DROP TABLE IF EXISTS {OLD}"
        ))?;
        Ok(ImportReport { tx, tx_instant, entities: total, created: new_rows + created_refs, datoms: self.datoms })
    }

    /// The staged columns, each checked to name a user attribute; `refs` checked against them.
    fn columns(&self, opts: &ImportOptions) -> Result<Vec<Column<'a>>> {
        let mut st = self.conn.prepare(&format!("DESCRIBE {SRC}"))?;
        let described: Vec<(String, String)> =
            st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<duckdb::Result<_>>()?;
        let refs: BTreeMap<&str, &str> = opts.refs.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        let form = |name: &str| format!("column {} of mentat_import", quote_ident(name));
        let mut out = Vec::new();
        for (name, source_type) in described.into_iter().skip(1) {
            let attr = self
                .schema
                .attribute_by_ident(&name)
                .filter(|a| a.entid >= layout::PART_DB_USER_START)
                .ok_or_else(|| StorageError::UnknownAttribute { ident: name.clone(), form: form(&name) })?;
            let target = match refs.get(name.as_str()) {
                None => None,
                Some(t) => {
                    if attr.value_type != ValueType::Ref {
                        return Err(StorageError::BadForm {
                            form: format!("refs := {{{name} {t}}}"),
                            reason: format!("{name} is a {}, not a ref", attr.value_type.ident()),
                        });
                    }
                    let target = self.schema.attribute_by_ident(t).ok_or_else(|| StorageError::UnknownAttribute {
                        ident: t.to_string(),
                        form: format!("refs := {{{name} {t}}}"),
                    })?;
                    if target.unique.is_none() || target.many {
                        return Err(StorageError::BadForm {
                            form: format!("refs := {{{name} {t}}}"),
                            reason: format!("{t} is not a cardinality-one :db/unique attribute"),
                        });
                    }
                    Some(target)
                }
            };
            let refuse = |why: String| StorageError::BadForm {
                form: form(&name),
                reason: format!(
                    "its DuckDB type {source_type} {why}; {} is a {} of cardinality {}",
                    attr.ident,
                    attr.value_type.ident(),
                    if attr.many { "many" } else { "one" }
                ),
            };
            let (source_type, list) = match shape(&source_type) {
                Shape::Scalar => (source_type, None),
                Shape::Nested => {
                    return Err(refuse(
                        "is nested: a column holds one value per row, or a list of values (T[]) for a \
                         cardinality-many attribute"
                            .into(),
                    ))
                }
                Shape::List(_) if !attr.many => {
                    return Err(refuse(format!(
                        "is a list, but {} is cardinality one: a list column is one value per element, for a \
                         cardinality-many attribute",
                        attr.ident
                    )))
                }
                Shape::List(_) if attr.unique.is_some() => {
                    return Err(refuse(
                        "is a list, and mentat_import takes a :db/unique attribute one value per row".into(),
                    ))
                }
                Shape::List(elem) => (elem, Some(source_type)),
            };
            out.push(Column { name, source_type, list, attr, target });
        }
        for (col, t) in &opts.refs {
            if !out.iter().any(|c| &c.name == col) {
                return Err(StorageError::BadForm {
                    form: format!("refs := {{{col} {t}}}"),
                    reason: format!("the source has no column {}", quote_ident(col)),
                });
            }
        }
        Ok(out)
    }

    /// One scan over the columns whose type differs from their attribute's: the first value that does not cast.
    fn check_types(&self, columns: &[Column<'_>]) -> Result<()> {
        let checks: Vec<(&Column<'_>, String)> = columns.iter().filter_map(|c| c.bad_value().map(|b| (c, b))).collect();
        // the scalar columns in one scan of the staged table, each list column in one of its elements
        let (scalar, lists): (Vec<_>, Vec<_>) = checks.into_iter().partition(|(c, _)| c.list.is_none());
        self.check_type_scan(&format!("{SRC} s"), &scalar)?;
        for check in lists {
            self.check_type_scan(&check.0.source(), std::slice::from_ref(&check))?;
        }
        Ok(())
    }

    /// One scan of `from` for the first value of each check's column that is bad (the check's SQL).
    fn check_type_scan(&self, from: &str, checks: &[(&Column<'_>, String)]) -> Result<()> {
        if checks.is_empty() {
            return Ok(());
        }
        let select: Vec<String> = checks
            .iter()
            .map(|(c, bad)| {
                format!(
                    "arg_min(CAST({} AS VARCHAR), {ROW}) FILTER (WHERE {bad}), (min({ROW}) FILTER (WHERE {bad}))::VARCHAR",
                    c.col()
                )
            })
            .collect();
        let row =
            self.first_row(&format!("SELECT {} FROM {from}", select.join(", ")), 2 * checks.len())?.unwrap_or_default();
        for (i, (c, _)) in checks.iter().enumerate() {
            if let (Some(Some(value)), Some(Some(rowid))) = (row.get(2 * i), row.get(2 * i + 1)) {
                return Err(StorageError::WrongType {
                    value: layout::quote_str(value),
                    attribute: c
                        .target
                        .map_or(c.attr.ident.clone(), |t| format!("{} (through {})", t.ident, c.attr.ident)),
                    expected: c.value_type().ident().to_string(),
                    form: format!(
                        "column {} of mentat_import, source row {}",
                        quote_ident(&c.name),
                        rowid.parse::<i64>().unwrap_or(0) + 1
                    ),
                });
            }
        }
        Ok(())
    }

    /// Finds ref values without a target: an error naming one, or (create) new entities holding only the target
    /// attribute, one per distinct value across all columns that resolve through that attribute. Returns the
    /// number of entities created.
    fn resolve_refs(&mut self, columns: &[Column<'_>], opts: &ImportOptions, tx: Entid) -> Result<i64> {
        let mut by_target: BTreeMap<Entid, Vec<&Column<'_>>> = BTreeMap::new();
        for c in columns {
            if let Some(t) = c.target {
                by_target.entry(t.entid).or_default().push(c);
            }
        }
        let mut created = 0;
        for (target, cols) in by_target {
            let cur = self.store.current(target);
            let values: Vec<String> = cols
                .iter()
                .map(|c| format!("SELECT {} AS v FROM {} WHERE {} IS NOT NULL", c.cast(false), c.source(), c.col()))
                .collect();
            self.exec(&format!(
                "CREATE OR REPLACE TEMP TABLE {MISSING} AS SELECT DISTINCT v FROM ({}) u WHERE NOT EXISTS \
                 (SELECT 1 FROM {cur} t WHERE t.v = u.v)",
                values.join(" UNION ALL ")
            ))?;
            let (n, first): (i64, Option<String>) =
                self.conn.query_row(&format!("SELECT count(*), min(v)::VARCHAR FROM {MISSING}"), [], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })?;
            if n == 0 {
                continue;
            }
            let ident = &self.schema.attribute(target).map_or("?", |a| a.ident.as_str()).to_string();
            if opts.missing_refs == MissingRefs::Error {
                let first = first.unwrap_or_default();
                let named: Vec<String> = cols.iter().map(|c| c.name.clone()).collect();
                return Err(StorageError::LookupRef {
                    lookup_ref: format!("[{ident} {}]", layout::quote_str(&first)),
                    reason: format!(
                        "no entity has this value ({n} missing in column {} of mentat_import); \
                         pass missing_refs := 'create' to create them",
                        named.join(", ")
                    ),
                });
            }
            let base = self.parts.next_user;
            let numbered = format!("{base} - 1 + row_number() OVER (ORDER BY v)");
            self.write(&format!("INSERT INTO {cur} SELECT {numbered}, v, {tx} FROM {MISSING}"))?;
            self.parts.next_user += n;
            created += n;
        }
        Ok(created)
    }

    /// Matches rows to existing entities through their `:db.unique/identity` columns. When some row matches,
    /// fills `ENT(n, e, existed)` for every row and returns the number of matched rows; otherwise returns 0 and
    /// rows take `next_user + row`. Two rows with one identity value, or a row whose identity values reach two
    /// entities, are errors.
    fn upsert(&mut self, columns: &[Column<'_>], total: i64) -> Result<i64> {
        let ids: Vec<(usize, &Column<'_>)> =
            columns.iter().enumerate().filter(|(_, c)| c.attr.unique == Some(Unique::Identity)).collect();
        if ids.is_empty() {
            return Ok(0);
        }
        for (k, c) in &ids {
            self.check_duplicates(*k, c, "one row per entity: a :db.unique/identity value may appear once")?;
        }
        let mut joins = String::new();
        let mut olds = Vec::new();
        for (k, c) in &ids {
            let (join, v) = c.value(*k, self.store, true);
            joins.push_str(&join);
            joins.push_str(&format!(" LEFT JOIN {} i{k} ON i{k}.v = {v}", self.store.current(c.attr.entid)));
            olds.push(format!("i{k}.e"));
        }
        self.exec(&format!(
            "CREATE OR REPLACE TEMP TABLE {OLDS} AS SELECT s.{ROW} AS n, [{}] AS olds FROM {SRC} s{joins}",
            olds.join(", ")
        ))?;
        let conflict = self.first_row(
            &format!(
                "SELECT n::VARCHAR, list_min(olds)::VARCHAR, \
                 list_max(olds)::VARCHAR FROM {OLDS} \
                 WHERE len(list_distinct(olds)) > 1 LIMIT 1"
            ),
            3,
        )?;
        if let Some(r) = conflict {
            let num = |i: usize| r[i].as_deref().and_then(|s| s.parse::<i64>().ok()).unwrap_or(0);
            return Err(StorageError::UpsertConflict {
                tempid: format!("source row {} of mentat_import", num(0) + 1),
                first: num(1),
                second: num(2),
            });
        }
        self.exec(&format!("CREATE OR REPLACE TEMP TABLE {OLD} AS SELECT n, list_min(olds) AS old FROM {OLDS}"))?;
        let twice = self.first_row(
            &format!("SELECT old::VARCHAR, min(n)::VARCHAR, max(n)::VARCHAR FROM {OLD} WHERE old IS NOT NULL GROUP BY old HAVING count(*) > 1 LIMIT 1"),
            3,
        )?;
        if let Some(r) = twice {
            let num = |i: usize| r[i].as_deref().and_then(|s| s.parse::<i64>().ok()).unwrap_or(0);
            return Err(StorageError::Conflict(format!(
                "source rows {} and {} of mentat_import both upsert to entity {}: one row per entity",
                num(1) + 1,
                num(2) + 1,
                num(0)
            )));
        }
        let matched: i64 = self.conn.query_row(&format!("SELECT count(old) FROM {OLD}"), [], |r| r.get(0))?;
        if matched == 0 {
            return Ok(0);
        }
        let base = self.parts.next_user;
        self.exec(&format!(
            "CREATE OR REPLACE TEMP TABLE {ENT} AS SELECT n, coalesce(old, {base} - 1 + \
             row_number() OVER (PARTITION BY old IS NULL ORDER BY n)) AS e, old IS NOT NULL AS existed FROM {OLD}"
        ))?;
        debug_assert!(matched <= total);
        Ok(matched)
    }

    /// Ref columns that hold entids (not resolved through `refs`): one scan of the staged table for the scalar
    /// ones, one of its elements per list column, refusing the first value no partition has allocated. Allocated
    /// are `:db.part/db` and `:db.part/tx` below their next entid, and `:db.part/user` below `user_end`, which
    /// counts the entities this import creates (rows and ref targets).
    fn check_allocated(&self, columns: &[Column<'_>], user_end: Entid) -> Result<()> {
        let p = &self.parts;
        let bad = |c: &Column<'_>| {
            let v = c.cast(false);
            format!(
                "({} IS NOT NULL AND NOT ({v} >= {} AND {v} < {} OR {v} >= {} AND {v} < {user_end} \
                 OR {v} >= {} AND {v} < {}))",
                c.col(),
                layout::PART_DB_START,
                p.next_db,
                layout::PART_USER_START,
                layout::PART_TX_START,
                p.next_tx
            )
        };
        let refs: Vec<(&Column<'_>, String)> = columns
            .iter()
            .filter(|c| c.attr.value_type == ValueType::Ref && c.target.is_none())
            .map(|c| (c, bad(c)))
            .collect();
        let (scalar, lists): (Vec<_>, Vec<_>) = refs.into_iter().partition(|(c, _)| c.list.is_none());
        let mut scans = vec![(format!("{SRC} s"), scalar)];
        scans.extend(lists.into_iter().map(|check| (check.0.source(), vec![check])));
        for (from, checks) in scans.iter().filter(|(_, checks)| !checks.is_empty()) {
            let select: Vec<String> = checks
                .iter()
                .map(|(c, bad)| {
                    format!(
                        "arg_min(CAST({} AS VARCHAR), {ROW}) FILTER (WHERE {bad}), \
                         (min({ROW}) FILTER (WHERE {bad}))::VARCHAR",
                        c.cast(false)
                    )
                })
                .collect();
            let row = self
                .first_row(&format!("SELECT {} FROM {from}", select.join(", ")), 2 * checks.len())?
                .unwrap_or_default();
            for (i, (c, _)) in checks.iter().enumerate() {
                if let (Some(Some(value)), Some(Some(n))) = (row.get(2 * i), row.get(2 * i + 1)) {
                    let created = match user_end - p.next_user {
                        0 => String::new(),
                        1 => format!("; the entity this import creates is {}", p.next_user),
                        _ => format!("; the entities this import creates are {} to {}", p.next_user, user_end - 1),
                    };
                    return Err(StorageError::BadForm {
                        form: format!(
                            "column {} of mentat_import, source row {}",
                            quote_ident(&c.name),
                            n.parse::<i64>().unwrap_or(0) + 1
                        ),
                        reason: format!(
                            "{} value {value} names no entity: the store has not allocated entid {value}{created}; \
                             to name entities by a unique attribute's value, pass refs := '{{{} :target/attr}}'",
                            c.attr.ident, c.attr.ident
                        ),
                    });
                }
            }
        }
        Ok(())
    }

    /// Errors when one value of a unique column appears in two rows.
    fn check_duplicates(&self, k: usize, c: &Column<'_>, why: &str) -> Result<()> {
        let (join, v) = c.value(k, self.store, false);
        let dup = self.first_row(
            &format!(
                "SELECT v::VARCHAR, min(n)::VARCHAR, max(n)::VARCHAR FROM (SELECT {v} AS v, s.{ROW} AS n FROM {SRC} s{join} \
                 WHERE {} IS NOT NULL) GROUP BY v HAVING count(*) > 1 LIMIT 1",
                c.col()
            ),
            3,
        )?;
        if let Some(r) = dup {
            let num = |i: usize| r[i].as_deref().and_then(|s| s.parse::<i64>().ok()).unwrap_or(0);
            return Err(StorageError::Conflict(format!(
                "{} {} appears in source rows {} and {} of mentat_import ({why})",
                c.attr.ident,
                layout::quote_str(r[0].as_deref().unwrap_or("")),
                num(1) + 1,
                num(2) + 1
            )));
        }
        Ok(())
    }

    /// `:db.unique/value` columns: no value twice in the source, none held by another entity.
    fn check_unique(&self, columns: &[Column<'_>], upserted: bool) -> Result<()> {
        for (k, c) in columns.iter().enumerate().filter(|(_, c)| c.attr.unique == Some(Unique::Value)) {
            self.check_duplicates(k, c, ":db.unique/value")?;
            let (join, v) = c.value(k, self.store, false);
            let (entity, e_expr) = if upserted {
                (format!(" JOIN {ENT} x ON x.n = s.{ROW}"), "x.e".to_string())
            } else {
                (String::new(), format!("({} + s.{ROW})", self.parts.next_user))
            };
            let held = self.first_row(
                &format!(
                    "SELECT u.v::VARCHAR, u.e::VARCHAR, {e_expr}::VARCHAR FROM {SRC} s{entity}{join} \
                     JOIN {} u ON u.v = {v} WHERE u.e <> {e_expr} LIMIT 1",
                    self.store.current(c.attr.entid)
                ),
                3,
            )?;
            if let Some(r) = held {
                let num = |i: usize| r[i].as_deref().and_then(|s| s.parse::<i64>().ok()).unwrap_or(0);
                return Err(StorageError::UniqueConflict {
                    attribute: c.attr.ident.clone(),
                    value: layout::quote_str(r[0].as_deref().unwrap_or("")),
                    holder: num(1),
                    entity: num(2),
                    form: format!("column {} of mentat_import", quote_ident(&c.name)),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn casts() {
        assert_eq!(cast_sql("c", "BIGINT", ValueType::Long, false), "c");
        assert_eq!(cast_sql("c", "VARCHAR", ValueType::Long, true), "TRY_CAST(c AS BIGINT)");
        assert_eq!(
            cast_sql("c", "TIMESTAMP", ValueType::Instant, false),
            "make_timestamptz(epoch_us(CAST(c AS TIMESTAMP)))"
        );
        assert_eq!(cast_sql("c", "TIMESTAMP WITH TIME ZONE", ValueType::Instant, false), "c");
    }

    #[test]
    fn shapes() {
        assert_eq!(shape("VARCHAR"), Shape::Scalar);
        assert_eq!(shape("DECIMAL(18,3)"), Shape::Scalar);
        assert_eq!(shape("MAPLE"), Shape::Scalar);
        assert_eq!(shape("VARCHAR[]"), Shape::List("VARCHAR".into()));
        assert_eq!(shape("DECIMAL(18,3)[]"), Shape::List("DECIMAL(18,3)".into()));
        assert_eq!(shape("INTEGER[3]"), Shape::List("INTEGER".into()));
        assert_eq!(shape("INTEGER[][]"), Shape::Nested);
        assert_eq!(shape("STRUCT(x INTEGER)"), Shape::Nested);
        assert_eq!(shape("STRUCT(x INTEGER[])"), Shape::Nested);
        assert_eq!(shape("STRUCT(x INTEGER)[]"), Shape::Nested);
        assert_eq!(shape("MAP(VARCHAR, INTEGER)"), Shape::Nested);
        assert_eq!(shape("UNION(k INTEGER)"), Shape::Nested);
    }

    #[test]
    fn options() {
        let refs = ImportOptions::parse_refs("{:flight/dest :airport/faa}").unwrap();
        assert_eq!(refs, vec![(":flight/dest".to_string(), ":airport/faa".to_string())]);
        assert!(ImportOptions::parse_refs("[:a :b]").is_err());
        assert_eq!(MissingRefs::parse("Create").unwrap(), MissingRefs::Create);
        assert!(MissingRefs::parse("maybe").is_err());
    }
}
