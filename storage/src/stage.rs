//! Set-based staging: rows go into a connection-local temporary table through DuckDB's appender, and every
//! lookup or write is one SQL statement that joins that table with an attribute's table. No per-datom round
//! trips.
//!
//! Two temporary tables per pooled connection, of one shape `(a, e, v_long, v_double, v_str, v_bool, v_blob,
//! added)`: `mentat_keys` for lookups and `mentat_stage` for the datoms a transaction writes. A value goes into
//! the column of its type's staging kind ([`stage_column`]); [`to_store`] and [`from_store`] convert between
//! that column and the attribute's typed column.

use crate::error::Result;
use crate::value::Val;
use duckdb::types::Value as DValue;
use duckdb::{params, Connection, Row};
use planner::schema::ValueType;

/// Temporary table for lookups.
pub const KEYS: &str = "mentat_keys";
/// Temporary table for the datoms a transaction writes.
pub const STAGE: &str = "mentat_stage";

/// Creates the staging tables on this connection if they are missing (temporary, so private to it).
pub fn ensure_tables(conn: &Connection) -> Result<()> {
    for t in [KEYS, STAGE] {
        conn.execute_batch(&format!(
            "CREATE TEMP TABLE IF NOT EXISTS {t} (a BIGINT, e BIGINT, v_long BIGINT, v_double DOUBLE, \
             v_str VARCHAR, v_bool BOOLEAN, v_blob BLOB, added BOOLEAN)"
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

/// One staged row: attribute (or a caller-chosen tag), entity (or key), optional value, flag.
pub type StageRow<'a> = (i64, i64, Option<&'a Val>, bool);

/// Empties `table` and appends `rows` to it with DuckDB's appender.
pub fn fill<'a>(conn: &Connection, table: &str, rows: impl IntoIterator<Item = StageRow<'a>>) -> Result<()> {
    conn.execute_batch(&format!("DELETE FROM {table}"))?;
    let mut app = conn.appender(table)?;
    for (a, e, v, added) in rows {
        let (mut l, mut d, mut s, mut b, mut blob) = (None, None, None, None, None);
        match v {
            Some(Val::Ref(x) | Val::Long(x) | Val::Instant(x)) => l = Some(*x),
            Some(Val::Double(x)) => d = Some(*x),
            Some(Val::Str(x) | Val::Uuid(x)) => s = Some(x.as_str()),
            Some(Val::Bool(x)) => b = Some(*x),
            Some(Val::Bytes(x)) => blob = Some(DValue::Blob(x.clone())),
            None => {}
        }
        app.append_row(params![a, e, l, d, s, b, blob, added])?;
    }
    app.flush()?;
    Ok(())
}
