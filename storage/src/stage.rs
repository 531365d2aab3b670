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
use planner::schema::{Attribute, TupleSpec, ValueType};

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

/// Rows of one log apply (`txlog::settle`) after which the connection that applied it makes its staging tables
/// again ([`renew_tables`]) at once: a temporary table keeps memory for about as many rows as it ever held at
/// once (150,000 logged rows applied in one go left 7.4 MB), which an apply of a long log stages in one go. An
/// apply of 50,000 logged rows took 23 to 46 ms without the renewal and 24 to 32 ms with it (three runs each,
/// beside other work): its cost is within that noise. Off when [`renew_after`] is 0.
pub const RENEW_ROWS: usize = 50_000;

/// Uses of a connection (borrows from the pool, the indexer's applies) after which its staging tables are made
/// again ([`renew_tables`]): 256, or `MENTAT_STAGE_RENEW` (0: never), read when mentat loads.
pub fn renew_after() -> u32 {
    std::env::var("MENTAT_STAGE_RENEW").ok().and_then(|v| v.parse().ok()).unwrap_or(256)
}

/// Drops a connection's staging tables and makes them again. A temporary table emptied and filled again keeps
/// memory DuckDB does not give back until the table is dropped (its `IN_MEMORY_TABLE` memory in
/// `duckdb_memory()`): after 2,000 rounds of 500 rows appended and deleted, 6.6 MB, 0 after a `DROP`; a temporary
/// database cannot be checkpointed. Beside a steady writer (`benchmarks/py/soak.py`) the staging tables of the
/// writer's and the indexer's connections went from 5 to 15 MB over 1,200 transactions of 500 datoms, with the
/// store checkpointed (2026-12-03). Made again every [`renew_after`] uses, a few milliseconds each, with the
/// connection's prepared statements, which name them, flushed.
pub fn renew_tables(conn: &Connection) -> Result<()> {
    conn.flush_prepared_statement_cache();
    conn.execute_batch(&format!("DROP TABLE IF EXISTS temp.{KEYS}; DROP TABLE IF EXISTS temp.{STAGE}"))?;
    ensure_tables(conn)
}

/// The staging column that holds values of attribute `a`. A tuple is staged as JSON text: an array whose elements
/// are each element's staging value as a JSON string, or null ([`tuple_json`]).
pub fn stage_column(a: &Attribute) -> &'static str {
    if a.tuple.is_some() {
        return "v_str";
    }
    scalar_column(a.value_type)
}

fn scalar_column(t: ValueType) -> &'static str {
    match t {
        ValueType::Ref | ValueType::Long | ValueType::Instant => "v_long",
        ValueType::Double | ValueType::Float => "v_double",
        ValueType::Keyword
        | ValueType::String
        | ValueType::Uri
        | ValueType::Uuid
        | ValueType::Symbol
        | ValueType::BigInt
        | ValueType::BigDec
        | ValueType::Tuple => "v_str",
        ValueType::Boolean => "v_bool",
        ValueType::Bytes => "v_blob",
    }
}

/// SQL converting a scalar in its staging representation (`c`, of the staging column's type) to its column type.
fn scalar_to_store(t: ValueType, c: &str) -> String {
    match t {
        ValueType::Instant => format!("make_timestamptz({c})"),
        ValueType::Uuid | ValueType::BigInt | ValueType::BigDec | ValueType::Float => {
            format!("CAST({c} AS {})", t.sql_type())
        }
        _ => c.to_string(),
    }
}

/// SQL converting a tuple's staged JSON text (`c`) to its column type: each element read back from its JSON string
/// ([`scalar_to_store`] after a cast to its staging column's type).
fn tuple_to_store(spec: &TupleSpec, c: &str) -> String {
    let elem = |t: ValueType, text: String| {
        let staged = match scalar_column(t) {
            "v_long" => format!("CAST({text} AS BIGINT)"),
            "v_double" => format!("CAST({text} AS DOUBLE)"),
            "v_bool" => format!("CAST({text} AS BOOLEAN)"),
            _ => text,
        };
        scalar_to_store(t, &staged)
    };
    let value = match spec {
        TupleSpec::Homogeneous(t) => {
            format!("list_transform(json_extract_string({c}, '$[*]'), lambda x: {})", elem(*t, "x".into()))
        }
        _ => {
            let fields: Vec<String> = spec
                .positions()
                .into_iter()
                .enumerate()
                .map(|(i, t)| format!("f{i} := {}", elem(t, format!("json_extract_string({c}, '$[{i}]')"))))
                .collect();
            format!("struct_pack({})", fields.join(", "))
        }
    };
    format!("CASE WHEN {c} IS NULL THEN NULL ELSE CAST({value} AS {}) END", spec.sql_type())
}

/// SQL converting a staged column (`alias.v_*`) to the attribute's column type.
pub fn to_store(a: &Attribute, alias: &str) -> String {
    let c = format!("{alias}.{}", stage_column(a));
    match &a.tuple {
        Some(spec) => tuple_to_store(spec, &c),
        None => scalar_to_store(a.value_type, &c),
    }
}

/// SQL converting a bound parameter (`$n`, bound with [`param`]) to the attribute's column type.
pub fn param_to_store(a: &Attribute, placeholder: &str) -> String {
    match (&a.tuple, a.value_type) {
        (Some(spec), _) => tuple_to_store(spec, &format!("CAST({placeholder} AS VARCHAR)")),
        (None, ValueType::Instant) => format!("make_timestamptz({placeholder}::BIGINT)"),
        (None, t @ (ValueType::Uuid | ValueType::BigInt | ValueType::BigDec | ValueType::Float)) => {
            format!("CAST({placeholder} AS {})", t.sql_type())
        }
        _ => placeholder.to_string(),
    }
}

/// A value as a statement parameter, in its staging representation (see [`param_to_store`]).
pub fn param(v: &Val) -> duckdb::types::Value {
    use duckdb::types::Value as P;
    match v {
        Val::Ref(x) | Val::Long(x) | Val::Instant(x) => P::BigInt(*x),
        Val::Double(x) => P::Double(*x),
        Val::Float(x) => P::Double(*x as f64),
        Val::Str(s) | Val::Uuid(s) | Val::BigInt(s) | Val::BigDec(s) => P::Text(s.clone()),
        Val::Bool(b) => P::Boolean(*b),
        Val::Bytes(b) => P::Blob(b.clone()),
        Val::Tuple(_) => P::Text(tuple_json(v)),
    }
}

/// A tuple's staging text: a JSON array of its elements' staging values as JSON strings (integers, instants in
/// microseconds, doubles and floats in Rust's shortest round-trip form, text as is), nil as null. Every element
/// is a string so that a 38-digit bigint or an 18-place bigdec crosses JSON without a float in between.
pub fn tuple_json(v: &Val) -> String {
    let Val::Tuple(items) = v else { return String::new() };
    let texts: Vec<serde_json::Value> =
        items.iter().map(|i| i.as_ref().map_or(serde_json::Value::Null, |x| elem_text(x).into())).collect();
    serde_json::Value::Array(texts).to_string()
}

fn elem_text(v: &Val) -> String {
    match v {
        Val::Ref(x) | Val::Long(x) | Val::Instant(x) => x.to_string(),
        Val::Double(x) => format!("{x:?}"),
        Val::Float(x) => format!("{x:?}"),
        Val::Str(s) | Val::Uuid(s) | Val::BigInt(s) | Val::BigDec(s) => s.clone(),
        Val::Bool(b) => b.to_string(),
        Val::Bytes(_) | Val::Tuple(_) => String::new(),
    }
}

/// A tuple element of type `t` from its staging text (as [`tuple_json`] writes it, or as DuckDB casts the
/// element's staging value to VARCHAR).
fn elem_from_text(t: ValueType, s: &str) -> Option<Val> {
    Some(match t {
        ValueType::Ref => Val::Ref(s.parse().ok()?),
        ValueType::Long => Val::Long(s.parse().ok()?),
        ValueType::Instant => Val::Instant(s.parse().ok()?),
        ValueType::Double => Val::Double(s.parse().ok()?),
        ValueType::Float => Val::Float(s.parse::<f64>().ok()? as f32),
        ValueType::Boolean => Val::Bool(s.parse().ok()?),
        ValueType::Uuid => Val::Uuid(s.to_string()),
        ValueType::BigInt => Val::BigInt(planner::types::bigint_text(s)?),
        ValueType::BigDec => Val::BigDec(planner::types::bigdec_from_text(s)?),
        ValueType::Keyword | ValueType::String | ValueType::Uri | ValueType::Symbol => Val::Str(s.to_string()),
        ValueType::Bytes | ValueType::Tuple => return None,
    })
}

/// SQL converting an attribute's value column (`expr`) to its staging representation.
pub fn from_store(a: &Attribute, expr: &str) -> String {
    let Some(spec) = &a.tuple else { return scalar_from_store(a.value_type, expr) };
    let elem = |t: ValueType, x: String| format!("CAST({} AS VARCHAR)", scalar_from_store(t, &x));
    let list = match spec {
        TupleSpec::Homogeneous(t) => format!("list_transform({expr}, lambda x: {})", elem(*t, "x".into())),
        _ => {
            let items: Vec<String> =
                spec.positions().into_iter().enumerate().map(|(i, t)| elem(t, format!("({expr}).f{i}"))).collect();
            format!("list_value({})", items.join(", "))
        }
    };
    format!("CAST(to_json({list}) AS VARCHAR)")
}

fn scalar_from_store(t: ValueType, expr: &str) -> String {
    match t {
        ValueType::Instant => format!("epoch_us({expr})"),
        ValueType::Uuid | ValueType::BigInt | ValueType::BigDec => format!("CAST({expr} AS VARCHAR)"),
        ValueType::Float => format!("CAST({expr} AS DOUBLE)"),
        _ => expr.to_string(),
    }
}

/// Reads a staged-representation column of a result row as a [`Val`] of attribute `a`.
pub fn read_val(row: &Row<'_>, idx: usize, a: &Attribute) -> duckdb::Result<Val> {
    let Some(spec) = &a.tuple else { return read_scalar(row, idx, a.value_type) };
    let text: String = row.get(idx)?;
    let bad =
        || duckdb::Error::FromSqlConversionFailure(idx, duckdb::types::Type::Text, format!("tuple {text}").into());
    let items: Vec<Option<String>> = serde_json::from_str(&text).map_err(|_| bad())?;
    let vals = items
        .iter()
        .enumerate()
        .map(|(i, x)| match x {
            None => Some(None),
            Some(s) => elem_from_text(spec.element(i)?, s).map(Some),
        })
        .collect::<Option<Vec<_>>>()
        .ok_or_else(bad)?;
    Ok(Val::Tuple(vals))
}

fn read_scalar(row: &Row<'_>, idx: usize, t: ValueType) -> duckdb::Result<Val> {
    Ok(match t {
        ValueType::Ref => Val::Ref(row.get(idx)?),
        ValueType::Long => Val::Long(row.get(idx)?),
        ValueType::Instant => Val::Instant(row.get(idx)?),
        ValueType::Double => Val::Double(row.get(idx)?),
        ValueType::Keyword | ValueType::String | ValueType::Uri | ValueType::Symbol => Val::Str(row.get(idx)?),
        ValueType::BigInt => Val::BigInt(row.get(idx)?),
        ValueType::BigDec => {
            let text: String = row.get(idx)?;
            Val::BigDec(planner::types::bigdec_from_text(&text).unwrap_or(text))
        }
        ValueType::Float => Val::Float(row.get::<_, f64>(idx)? as f32),
        ValueType::Uuid => Val::Uuid(row.get(idx)?),
        ValueType::Boolean => Val::Bool(row.get(idx)?),
        ValueType::Bytes | ValueType::Tuple => Val::Bytes(row.get(idx)?),
    })
}

/// One staged row: attribute (or a caller-chosen tag), entity (or key), optional value, flag, tx, and the tx
/// that retracts the datom (history rows; 0 elsewhere).
pub type StageRow<'a> = (i64, i64, Option<&'a Val>, bool, i64, i64);

/// Empties `table` and appends `rows` to it ([`append`]): one Arrow record batch (columns built
/// here, appended vector by vector: no per-value calls).
pub fn fill<'a>(conn: &Connection, table: &str, rows: impl IntoIterator<Item = StageRow<'a>>) -> Result<()> {
    conn.prepare_cached(&format!("DELETE FROM {table}"))?.execute([])?;
    append(conn, table, None, rows).map(|_| ())
}

/// Appends `rows` to `table` (of the staging shape: a connection's temporary table, or with `store` the store's
/// table of that name) with DuckDB's appender, as one Arrow record batch, keeping the rows it holds. Returns how
/// many rows were appended.
pub fn append<'a>(
    conn: &Connection,
    table: &str,
    store: Option<&planner::layout::StoreName>,
    rows: impl IntoIterator<Item = StageRow<'a>>,
) -> Result<usize> {
    use duckdb::arrow::array::{ArrayRef, BinaryBuilder, BooleanBuilder, Float64Builder, Int64Builder, StringBuilder};
    use duckdb::arrow::datatypes::{DataType, Field, Schema};
    use duckdb::arrow::record_batch::RecordBatch;
    use std::sync::Arc;

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
        let tuple_text: String;
        match v {
            Some(Val::Ref(x) | Val::Long(x) | Val::Instant(x)) => lv = Some(*x),
            Some(Val::Double(x)) => dv = Some(*x),
            Some(Val::Float(x)) => dv = Some(*x as f64),
            Some(Val::Str(x) | Val::Uuid(x) | Val::BigInt(x) | Val::BigDec(x)) => sv = Some(x.as_str()),
            Some(Val::Bool(x)) => bv = Some(*x),
            Some(Val::Bytes(x)) => blobv = Some(x.as_slice()),
            Some(t @ Val::Tuple(_)) => {
                tuple_text = tuple_json(t);
                sv = Some(tuple_text.as_str());
            }
            None => {}
        }
        l.append_option(lv);
        d.append_option(dv);
        s.append_option(sv);
        b.append_option(bv);
        blob.append_option(blobv);
    }
    if n == 0 {
        return Ok(0);
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
    let mut app = match store.map(|s| (s.catalog.as_deref(), s.schema.as_str())) {
        None => conn.appender(table)?,
        Some((None, schema)) => conn.appender_to_db(table, schema)?,
        Some((Some(catalog), schema)) => conn.appender_to_catalog_and_db(table, catalog, schema)?,
    };
    app.append_record_batch(batch)?;
    app.flush()?;
    Ok(n)
}

/// Whether [`append_current`] writes asserted datoms of an attribute of this type straight into its current
/// table (its column type has an Arrow type DuckDB's appender takes as it is); the other types go through the
/// staging table and SQL casts ([`to_store`]).
pub fn appends_directly(a: &Attribute) -> bool {
    a.tuple.is_none()
        && matches!(
            a.value_type,
            ValueType::Ref
                | ValueType::Long
                | ValueType::Keyword
                | ValueType::String
                | ValueType::Uri
                | ValueType::Symbol
                | ValueType::Double
                | ValueType::Boolean
                | ValueType::Instant
                | ValueType::Bytes
        )
}

/// Appends asserted datoms `(e, v, tx)` of the attribute `a` (one [`appends_directly`] takes) to its current table
/// in `store` with DuckDB's appender, as one Arrow record batch of the table's own column types (`e BIGINT, v
/// <type>, tx BIGINT`; an instant as microseconds since the epoch in UTC, DuckDB's TIMESTAMPTZ): no staging table
/// and no `INSERT ... SELECT`. A value of another type than the attribute's is an error (the transactor has
/// checked them).
pub fn append_current(
    conn: &Connection,
    store: &planner::layout::StoreName,
    a: &Attribute,
    rows: &[(i64, &Val, i64)],
) -> Result<()> {
    use duckdb::arrow::array::{
        ArrayRef, BinaryBuilder, BooleanBuilder, Float64Builder, Int64Array, Int64Builder, StringBuilder,
        TimestampMicrosecondArray,
    };
    use duckdb::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    use duckdb::arrow::record_batch::RecordBatch;
    use std::sync::Arc;

    let mismatch = |v: &Val| crate::StorageError::Store(format!("{v:?} is not a value of {}", a.ident));
    let longs = |f: fn(&Val) -> Option<i64>| -> Result<Vec<i64>> {
        rows.iter().map(|(_, v, _)| f(v).ok_or_else(|| mismatch(v))).collect()
    };
    let (v, data_type): (ArrayRef, DataType) = match a.value_type {
        ValueType::Ref | ValueType::Long => {
            let xs = longs(|v| match v {
                Val::Ref(x) | Val::Long(x) => Some(*x),
                _ => None,
            })?;
            (Arc::new(Int64Array::from(xs)), DataType::Int64)
        }
        ValueType::Instant => {
            let xs = longs(|v| match v {
                Val::Instant(x) => Some(*x),
                _ => None,
            })?;
            let utc = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
            (Arc::new(TimestampMicrosecondArray::from(xs).with_timezone("UTC")), utc)
        }
        ValueType::Double => {
            let mut b = Float64Builder::with_capacity(rows.len());
            for (_, v, _) in rows {
                let Val::Double(x) = v else { return Err(mismatch(v)) };
                b.append_value(*x);
            }
            (Arc::new(b.finish()), DataType::Float64)
        }
        ValueType::Boolean => {
            let mut b = BooleanBuilder::with_capacity(rows.len());
            for (_, v, _) in rows {
                let Val::Bool(x) = v else { return Err(mismatch(v)) };
                b.append_value(*x);
            }
            (Arc::new(b.finish()), DataType::Boolean)
        }
        ValueType::Bytes => {
            let mut b = BinaryBuilder::new();
            for (_, v, _) in rows {
                let Val::Bytes(x) = v else { return Err(mismatch(v)) };
                b.append_value(x);
            }
            (Arc::new(b.finish()), DataType::Binary)
        }
        _ if appends_directly(a) => {
            let mut b = StringBuilder::new();
            for (_, v, _) in rows {
                let Val::Str(x) = v else { return Err(mismatch(v)) };
                b.append_value(x);
            }
            (Arc::new(b.finish()), DataType::Utf8)
        }
        _ => return Err(crate::StorageError::Store(format!("{} is not appended directly", a.ident))),
    };
    let mut e = Int64Builder::with_capacity(rows.len());
    let mut tx = Int64Builder::with_capacity(rows.len());
    for (re, _, rtx) in rows {
        e.append_value(*re);
        tx.append_value(*rtx);
    }
    let schema = Arc::new(Schema::new(vec![
        Field::new("e", DataType::Int64, false),
        Field::new("v", data_type, false),
        Field::new("tx", DataType::Int64, false),
    ]));
    let batch = RecordBatch::try_new(schema, vec![Arc::new(e.finish()), v, Arc::new(tx.finish())])
        .map_err(|err| crate::StorageError::Store(format!("datoms batch: {err}")))?;
    let table = planner::layout::current_table_name(a.entid);
    let mut app = match &store.catalog {
        None => conn.appender_to_db(&table, &store.schema)?,
        Some(catalog) => conn.appender_to_catalog_and_db(&table, catalog, &store.schema)?,
    };
    app.append_record_batch(batch)?;
    app.flush()?;
    Ok(())
}
