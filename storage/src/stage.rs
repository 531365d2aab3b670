//! Set-based staging: rows go into a connection-local temporary table through DuckDB's appender, and every
//! lookup or write is one SQL statement that joins that table with an attribute's table. No per-datom round
//! trips.
//!
//! Two temporary tables per pooled connection, of one shape `(a, e, v_long, v_double, v_str, v_bool, v_blob,
//! added, tx, rtx)`: `mentat_keys` for lookups and `mentat_stage` for the datoms a transaction writes. A value goes into
//! the column of its type's staging kind ([`stage_column`]); [`to_store`] and [`from_store`] convert between
//! that column and the attribute's typed column.

use crate::error::Result;
use crate::value::Val;
use duckdb::{Connection, Row};
use planner::schema::ValueType;

/// Temporary table for lookups.
pub const KEYS: &str = "mentat_keys";
/// Temporary table for the datoms a transaction writes.
pub const STAGE: &str = "mentat_stage";

/// Statements each connection keeps prepared (the transactor's statements depend only on the attribute).
pub const STATEMENT_CACHE: usize = 1024;

/// Readies a connection for the transactor: creates the staging tables (temporary, so private to it) if they
/// are missing and sizes its prepared-statement cache. Call once per connection before its first transaction.
pub fn ensure_tables(conn: &Connection) -> Result<()> {
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    for t in [KEYS, STAGE] {
        conn.execute_batch(&format!(
            "CREATE TEMP TABLE IF NOT EXISTS {t} (a BIGINT, e BIGINT, v_long BIGINT, v_double DOUBLE, \
             v_str VARCHAR, v_bool BOOLEAN, v_blob BLOB, added BOOLEAN, tx BIGINT, rtx BIGINT)"
        ))?;
    }
    Ok(())
}

/// The staging column that holds values of type `t`.
pub fn stage_column(t: ValueType) -> &'static str {
    match t {
        ValueType::Ref | ValueType::Long | ValueType::Instant => "v_long",
        ValueType::Double => "v_double",
        ValueType::Keyword | ValueType::String | ValueType::Uri | ValueType::Uuid => "v_str",
        ValueType::Boolean => "v_bool",
        ValueType::Bytes => "v_blob",
    }
}

/// SQL converting a staged column (`alias.v_*`) to the attribute's column type.
pub fn to_store(t: ValueType, alias: &str) -> String {
    let c = format!("{alias}.{}", stage_column(t));
    match t {
        ValueType::Instant => format!("make_timestamptz({c})"),
        ValueType::Uuid => format!("CAST({c} AS UUID)"),
        _ => c,
    }
}

/// SQL converting a bound parameter (`$n`, bound with [`param`]) to the attribute's column type.
pub fn param_to_store(t: ValueType, placeholder: &str) -> String {
    match t {
        ValueType::Instant => format!("make_timestamptz({placeholder}::BIGINT)"),
        ValueType::Uuid => format!("CAST({placeholder} AS UUID)"),
        _ => placeholder.to_string(),
    }
}

/// A value as a statement parameter, in its staging representation (see [`param_to_store`]).
pub fn param(v: &Val) -> duckdb::types::Value {
    use duckdb::types::Value as P;
    match v {
        Val::Ref(x) | Val::Long(x) | Val::Instant(x) => P::BigInt(*x),
        Val::Double(x) => P::Double(*x),
        Val::Str(s) | Val::Uuid(s) => P::Text(s.clone()),
        Val::Bool(b) => P::Boolean(*b),
        Val::Bytes(b) => P::Blob(b.clone()),
    }
}

/// SQL converting an attribute's value column (`expr`) to its staging representation.
pub fn from_store(t: ValueType, expr: &str) -> String {
    match t {
        ValueType::Instant => format!("epoch_us({expr})"),
        ValueType::Uuid => format!("CAST({expr} AS VARCHAR)"),
        _ => expr.to_string(),
    }
}

/// Reads a staged-representation column of a result row as a [`Val`] of type `t`.
pub fn read_val(row: &Row<'_>, idx: usize, t: ValueType) -> duckdb::Result<Val> {
    Ok(match t {
        ValueType::Ref => Val::Ref(row.get(idx)?),
        ValueType::Long => Val::Long(row.get(idx)?),
        ValueType::Instant => Val::Instant(row.get(idx)?),
        ValueType::Double => Val::Double(row.get(idx)?),
        ValueType::Keyword | ValueType::String | ValueType::Uri => Val::Str(row.get(idx)?),
        ValueType::Uuid => Val::Uuid(row.get(idx)?),
        ValueType::Boolean => Val::Bool(row.get(idx)?),
        ValueType::Bytes => Val::Bytes(row.get(idx)?),
    })
}

/// One staged row: attribute (or a caller-chosen tag), entity (or key), optional value, flag, tx, and the tx
/// that retracts the datom (history rows; 0 elsewhere).
pub type StageRow<'a> = (i64, i64, Option<&'a Val>, bool, i64, i64);

/// Empties `table` and appends `rows` to it with DuckDB's appender, as one Arrow record batch (columns built
/// here, appended vector by vector: no per-value calls).
pub fn fill<'a>(conn: &Connection, table: &str, rows: impl IntoIterator<Item = StageRow<'a>>) -> Result<()> {
    use duckdb::arrow::array::{ArrayRef, BinaryBuilder, BooleanBuilder, Float64Builder, Int64Builder, StringBuilder};
    use duckdb::arrow::datatypes::{DataType, Field, Schema};
    use duckdb::arrow::record_batch::RecordBatch;
    use std::sync::Arc;

    conn.prepare_cached(&format!("DELETE FROM {table}"))?.execute([])?;
    let (mut a, mut e) = (Int64Builder::new(), Int64Builder::new());
    let (mut l, mut d, mut s) = (Int64Builder::new(), Float64Builder::new(), StringBuilder::new());
    let (mut b, mut blob, mut added) = (BooleanBuilder::new(), BinaryBuilder::new(), BooleanBuilder::new());
    let (mut txs, mut rtxs) = (Int64Builder::new(), Int64Builder::new());
    let mut n = 0usize;
    for (ra, re, v, radded, rtx, rrtx) in rows {
        n += 1;
        txs.append_value(rtx);
        rtxs.append_value(rrtx);
        a.append_value(ra);
        e.append_value(re);
        added.append_value(radded);
        let (mut lv, mut dv, mut sv, mut bv, mut blobv) = (None, None, None, None, None);
        match v {
            Some(Val::Ref(x) | Val::Long(x) | Val::Instant(x)) => lv = Some(*x),
            Some(Val::Double(x)) => dv = Some(*x),
            Some(Val::Str(x) | Val::Uuid(x)) => sv = Some(x.as_str()),
            Some(Val::Bool(x)) => bv = Some(*x),
            Some(Val::Bytes(x)) => blobv = Some(x.as_slice()),
            None => {}
        }
        l.append_option(lv);
        d.append_option(dv);
        s.append_option(sv);
        b.append_option(bv);
        blob.append_option(blobv);
    }
    if n == 0 {
        return Ok(());
    }
    let schema = Arc::new(Schema::new(vec![
        Field::new("a", DataType::Int64, false),
        Field::new("e", DataType::Int64, false),
        Field::new("v_long", DataType::Int64, true),
        Field::new("v_double", DataType::Float64, true),
        Field::new("v_str", DataType::Utf8, true),
        Field::new("v_bool", DataType::Boolean, true),
        Field::new("v_blob", DataType::Binary, true),
        Field::new("added", DataType::Boolean, false),
        Field::new("tx", DataType::Int64, false),
        Field::new("rtx", DataType::Int64, false),
    ]));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(a.finish()),
        Arc::new(e.finish()),
        Arc::new(l.finish()),
        Arc::new(d.finish()),
        Arc::new(s.finish()),
        Arc::new(b.finish()),
        Arc::new(blob.finish()),
        Arc::new(added.finish()),
        Arc::new(txs.finish()),
        Arc::new(rtxs.finish()),
    ];
    let batch = RecordBatch::try_new(schema, columns)
        .map_err(|err| crate::StorageError::Store(format!("staging batch: {err}")))?;
    let mut app = conn.appender(table)?;
    app.append_record_batch(batch)?;
    app.flush()?;
    Ok(())
}
