//! `mentat_datoms`: Datomic's `d/datoms` index views as a table function.
//!
//! `mentat_datoms(index VARCHAR [, e := ANY, a := ANY, v := ANY, store := VARCHAR, as_of := ANY, since := ANY,
//! history := BOOLEAN])`
//!
//! * `index`: `'EAVT'`, `'AEVT'`, `'AVET'` or `'VAET'` (VAET: ref attributes only).
//! * `e`, `a`, `v`: the optional leading components of the index, in its order (EAVT: e, a, v; AEVT: a, e, v;
//!   AVET: a, v, e; VAET: v, a, e), as in `(d/datoms db :avet :user/email "a@b.c")`, which is
//!   `mentat_datoms('AVET', a := ':user/email', v := 'a@b.c')`. They are named parameters because a table
//!   function registered through DuckDB's C API has a fixed number of positional parameters. An entity is an
//!   entid, an ident text or a lookup-ref text (`'[:user/email "a@b.c"]'`); an attribute an ident text or an
//!   entid; a value a DuckDB value read in the attribute's type (text for keywords, refs as entids or idents).
//! * columns `e BIGINT, a VARCHAR` (the ident), `v VARCHAR` (the value as text: one column cannot hold every
//!   value type), `tx BIGINT, added BOOLEAN`; rows in index order. See `planner::datoms` for the exact rules.
//! * `as_of`/`since` (a tx entid or a TIMESTAMPTZ) and `history := true` give the views `mentat_q` gives.
//!
//! The statement is one SQL statement over the store's tables, streamed like `mentat_q`'s answers.

use crate::query::{
    bind_statement, finish_bind, full_text, is_integer, named, read_options, read_schema_at, register_streaming,
    value_text, Bound, Param, READ_OPTIONS,
};
use crate::Instance;
use duckdb::ffi;
use planner::datoms::{datoms_sql, Components, Index};
use planner::types::Constant;
use std::ffi::CStr;
use std::sync::Arc;

/// A DuckDB value as a planner constant: integers, floating point numbers, booleans, timestamps (as instant
/// text) and uuids keep their type; anything else is its text.
pub(crate) unsafe fn constant(v: ffi::duckdb_value) -> Constant {
    // The value owns its logical type.
    let id = ffi::duckdb_get_type_id(ffi::duckdb_get_value_type(v));
    match id {
        id if is_integer(id) => Constant::Long(ffi::duckdb_get_int64(v)),
        ffi::DUCKDB_TYPE_DUCKDB_TYPE_DOUBLE
        | ffi::DUCKDB_TYPE_DUCKDB_TYPE_FLOAT
        | ffi::DUCKDB_TYPE_DUCKDB_TYPE_DECIMAL => Constant::Double(ffi::duckdb_get_double(v)),
        ffi::DUCKDB_TYPE_DUCKDB_TYPE_BOOLEAN => Constant::Boolean(ffi::duckdb_get_bool(v)),
        ffi::DUCKDB_TYPE_DUCKDB_TYPE_TIMESTAMP
        | ffi::DUCKDB_TYPE_DUCKDB_TYPE_TIMESTAMP_TZ
        | ffi::DUCKDB_TYPE_DUCKDB_TYPE_DATE => Constant::Instant(value_text(v)),
        ffi::DUCKDB_TYPE_DUCKDB_TYPE_UUID => Constant::Uuid(value_text(v)),
        _ => Constant::String(value_text(v)),
    }
}

/// A named component; a VARCHAR value keeps every byte ([`full_text`]: a value with a NUL byte is not cut short).
unsafe fn component(instance: &Instance, info: ffi::duckdb_bind_info, name: &CStr) -> Result<Option<Constant>, String> {
    let Some(mut v) = named(info, name) else { return Ok(None) };
    let c = match constant(v) {
        Constant::String(_) => full_text(instance, v).map(Constant::String),
        c => Ok(c),
    };
    ffi::duckdb_destroy_value(&mut v);
    // a text component is read as EDN (an ident, a lookup ref): nested too deep it would overflow the reader's stack
    if let Ok(Constant::String(text)) = &c {
        crate::nesting::check(text, &format!("mentat_datoms: {}", name.to_string_lossy()))?;
    }
    c.map(Some)
}

unsafe fn bind_inner(info: ffi::duckdb_bind_info) -> Result<Bound, String> {
    let instance = &*(ffi::duckdb_bind_get_extra_info(info) as *const Arc<Instance>);
    let mut index = ffi::duckdb_bind_get_parameter(info, 0);
    let index_text = if ffi::duckdb_is_null_value(index) { None } else { Some(value_text(index)) };
    ffi::duckdb_destroy_value(&mut index);
    let index = Index::parse(&index_text.ok_or("mentat_datoms: the index is NULL")?).map_err(|e| e.to_string())?;
    let (caller, store, mut opts) = read_options(info, instance)?;
    let components = Components {
        e: component(instance, info, c"e")?,
        a: component(instance, info, c"a")?,
        v: component(instance, info, c"v")?,
    };
    let schema = read_schema_at(instance, &caller, &store, &mut opts)?;
    let sql = datoms_sql(index, &components, &schema, &store, &opts).map_err(|e| e.to_string())?;
    bind_statement(info, instance, &caller, &sql, &["e", "a", "v", "tx", "added"], &[], true)
}

unsafe extern "C" fn bind(info: ffi::duckdb_bind_info) {
    finish_bind(info, std::panic::catch_unwind(|| unsafe { bind_inner(info) }), "reading the index");
}

/// Registers `mentat_datoms` (see the module docs).
///
/// # Safety
/// `con` must be a valid connection inside the entry point.
pub unsafe fn register(con: ffi::duckdb_connection, instance: &Arc<Instance>) -> Result<(), String> {
    let named: Vec<(&CStr, Param)> =
        [(c"e", Param::Any), (c"a", Param::Any), (c"v", Param::Any)].into_iter().chain(READ_OPTIONS).collect();
    register_streaming(con, c"mentat_datoms", &[Param::Varchar], &named, instance.clone(), bind)?;
    Ok(())
}
