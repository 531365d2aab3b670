//! `mentat_tx(edn VARCHAR [, store VARCHAR])`: one Datomic-style transaction per input row, through a scalar
//! function, returning each transaction's tx entid (BIGINT).
//!
//! Why a scalar function beside `mentat_transact`: DuckDB binds and plans a statement that calls a table function
//! with a parameter again at every execution, even when it was prepared, so every `mentat_transact` call costs a
//! bind and a plan. A prepared statement whose parameter feeds a scalar function is planned once: at 64 native
//! threads here, `SELECT count(*) FROM range(?)` prepared ran at 10,167 calls/s and `SELECT length(?::VARCHAR)`
//! prepared at 90,501 (storage/README.md, "The statement under every write"). A program that sends many small
//! transactions from native threads prepares `SELECT mentat_tx(?)` once per connection and executes it with each
//! transaction's EDN.
//!
//! Semantics are those of `mentat_transact` for each row, in row order: the same transactor and group commit
//! queue, each row its own transaction with its own tx entid and `:db/txInstant`, durable when the function returns
//! its value, not undone by a ROLLBACK of the caller's transaction (mentat commits on its own connection). The
//! function is volatile: it runs once per row of every execution, never folded into a constant when a statement is
//! bound, so `EXPLAIN` and `PREPARE` write nothing. NULL EDN gives NULL and writes nothing. `store` is resolved
//! against the caller's search path as in every mentat function (scalar functions take no named parameters, so it
//! is a second argument). Errors: those of `mentat_transact` (malformed EDN, unknown attribute, wrong value type,
//! unique conflict, `:db/cas` mismatch), naming the offending form; the failing row writes nothing. The rows of
//! one chunk (up to 2,048) are written one after another in order; DuckDB may hand the chunks of a large input to
//! several threads at once, so across chunks the order is DuckDB's, as for any function over a table. The first
//! failing row ends the statement: rows written before it stay committed, each its own transaction as separate
//! `mentat_transact` calls would be, and the error says how many of its chunk were (use `mentat_transact_many` for
//! a report per transaction).

use crate::query::drop_box;
use crate::Instance;
use duckdb::ffi;
use planner::layout::{StoreName, DEFAULT_STORE};
use std::ffi::c_void;
use std::sync::Arc;

/// Runs the rows of one input chunk, writing each tx entid into `output`. On the first failing row: its error,
/// with how many rows before it in this chunk were committed.
unsafe fn execute_inner(
    info: ffi::duckdb_function_info,
    input: ffi::duckdb_data_chunk,
    output: ffi::duckdb_vector,
) -> Result<(), String> {
    let instance = &*(ffi::duckdb_scalar_function_get_extra_info(info) as *const Arc<Instance>);
    let caller = &(*(ffi::duckdb_scalar_function_get_bind_data(info) as *const crate::sql::CallerBind)).caller;
    let rows = ffi::duckdb_data_chunk_get_size(input) as usize;
    let columns = ffi::duckdb_data_chunk_get_column_count(input) as usize;
    let out = ffi::duckdb_vector_get_data(output) as *mut i64;
    let mut committed = 0;
    for row in 0..rows {
        let Some(edn) = crate::sql::text(ffi::duckdb_data_chunk_get_vector(input, 0), row) else {
            ffi::duckdb_vector_ensure_validity_writable(output);
            ffi::duckdb_validity_set_row_invalid(ffi::duckdb_vector_get_validity(output), row as u64);
            continue;
        };
        let fail = |e: String| match committed {
            0 => e,
            n => format!(
                "{e} (the {n} row(s) before it in its chunk of the statement's rows were committed, each its own \
                 transaction)"
            ),
        };
        crate::nesting::check(&edn, "mentat_tx: the transaction").map_err(|e| fail(e.to_string()))?;
        let store = match columns > 1 {
            true => crate::sql::text(ffi::duckdb_data_chunk_get_vector(input, 1), row),
            false => None,
        };
        let name = StoreName::parse(store.as_deref().unwrap_or(DEFAULT_STORE)).map_err(|e| fail(e.to_string()))?;
        let name = instance.resolve(caller, &name).map_err(|e| fail(e.to_string()))?;
        let report = crate::functions::transact_one(instance, caller, &name, &edn).map_err(|e| fail(e.to_string()))?;
        *out.add(row) = report.tx;
        committed += 1;
    }
    Ok(())
}

unsafe extern "C" fn execute(
    info: ffi::duckdb_function_info,
    input: ffi::duckdb_data_chunk,
    output: ffi::duckdb_vector,
) {
    let outcome = std::panic::catch_unwind(|| unsafe { execute_inner(info, input, output) });
    crate::sql::finish_scalar(info, outcome, "mentat panicked while running the transaction");
}

/// Registers `mentat_tx` with one or two VARCHAR arguments, returning BIGINT, volatile.
///
/// # Safety
/// `con` must be a valid connection inside the entry point.
pub unsafe fn register(con: ffi::duckdb_connection, instance: &Arc<Instance>) -> Result<(), String> {
    crate::sql::register_varchar_set(
        con,
        c"mentat_tx",
        1..=2,
        |_| unsafe { ffi::duckdb_create_logical_type(ffi::DUCKDB_TYPE_DUCKDB_TYPE_BIGINT) },
        |f| unsafe {
            let extra = Box::into_raw(Box::new(instance.clone())) as *mut c_void;
            ffi::duckdb_scalar_function_set_extra_info(f, extra, Some(drop_box::<Arc<Instance>>));
            ffi::duckdb_scalar_function_set_volatile(f);
            ffi::duckdb_scalar_function_set_special_handling(f);
            ffi::duckdb_scalar_function_set_bind(f, Some(crate::sql::bind_caller));
            ffi::duckdb_scalar_function_set_function(f, Some(execute));
        },
    )
}
