//! `mentat_sql(query VARCHAR [, inputs VARCHAR [, store VARCHAR [, options VARCHAR]]])`: the one SQL statement
//! that `mentat_q` runs for a query, as text.
//!
//! `options` is a comma-separated list of `key=value` ([`read_options`]): `dialect=duckdb|spark`, `as_of=T`,
//! `since=T` (a tx entid, or an instant as text) and `history=true`. It is a fourth positional argument because
//! DuckDB's scalar functions take no named parameters. With `dialect=spark` the statement is Spark SQL over the
//! views of a Parquet export (`docs/parquet-format.md`); a query with recursive rules, which Spark cannot run as
//! one statement, gives instead a JSON plan of stages ([`planner::CompiledQuery::plan_json`]) that the caller
//! evaluates (the `mentat_spark` Python package does). A `(pull ?e pattern)` whose pattern has `*` is typed, in Spark
//! as in `mentat_q`, from the attributes the pulled entities hold: for `dialect=spark` the probe of those attributes
//! runs in DuckDB over the store when `mentat_sql` is called (in DuckDB's dialect `*` is every attribute of the
//! schema, the statement being data-independent).
//!
//! A scalar function: constant arguments are folded when the calling statement is bound, so
//! `FROM query(mentat_sql('[:find ...]'))` runs the Datalog plan inside the caller's own statement and transaction.
//! A NULL query gives NULL; a NULL `inputs`, `store` or `options` is the same as leaving it out (DuckDB's own NULL
//! handling, which would make the whole result NULL, is off). The store name resolves against the caller's search
//! path, as in every mentat function (`session.rs`): the caller's session is read in the function's bind, which is
//! why it is registered through the raw C API (duckdb-rs's scalar functions have no bind). Errors: the planner's errors (unknown attribute,
//! unbound variable, ...), or a missing store.

use crate::query::drop_box;
use crate::session::Caller;
use crate::Instance;
use duckdb::ffi;
use planner::layout::{StoreName, DEFAULT_STORE};
use std::ffi::{c_void, CString};
use std::sync::Arc;

/// Bind data of mentat's scalar functions (`mentat_sql`, `mentat_tx`): the caller's session, read when the calling
/// statement is bound.
#[derive(Clone)]
pub(crate) struct CallerBind {
    pub(crate) caller: Caller,
}

/// The bind of mentat's scalar functions: reads the caller's session into [`CallerBind`].
pub(crate) unsafe extern "C" fn bind_caller(info: ffi::duckdb_bind_info) {
    let caller = std::panic::catch_unwind(|| unsafe {
        let mut ctx: ffi::duckdb_client_context = std::ptr::null_mut();
        ffi::duckdb_scalar_function_get_client_context(info, &mut ctx);
        Caller::from_client_context(ctx)
    })
    .unwrap_or_default();
    let data = Box::into_raw(Box::new(CallerBind { caller })) as *mut c_void;
    ffi::duckdb_scalar_function_set_bind_data(info, data, Some(drop_box::<CallerBind>));
    ffi::duckdb_scalar_function_set_bind_data_copy(info, Some(copy));
}

unsafe extern "C" fn copy(data: *mut c_void) -> *mut c_void {
    let b = &*(data as *const CallerBind);
    Box::into_raw(Box::new(b.clone())) as *mut c_void
}

/// Hands DuckDB the outcome of a scalar function's call: nothing on success, else the error, or `panicked` when
/// the call panicked.
pub(crate) unsafe fn finish_scalar(
    info: ffi::duckdb_function_info,
    outcome: std::thread::Result<Result<(), String>>,
    panicked: &str,
) {
    let message = match outcome {
        Ok(Ok(())) => return,
        Ok(Err(e)) => e,
        Err(_) => panicked.to_string(),
    };
    let c = CString::new(message.replace('\0', " ")).unwrap_or_default();
    ffi::duckdb_scalar_function_set_error(info, c.as_ptr());
}

/// The text of row `row` of a VARCHAR vector, or None for NULL.
pub(crate) unsafe fn text(vector: ffi::duckdb_vector, row: usize) -> Option<String> {
    let validity = ffi::duckdb_vector_get_validity(vector);
    if !validity.is_null() && !ffi::duckdb_validity_row_is_valid(validity, row as u64) {
        return None;
    }
    let data = ffi::duckdb_vector_get_data(vector) as *mut ffi::duckdb_string_t;
    Some(String::from_utf8_lossy(duckdb::types::DuckString::new(&mut *data.add(row)).as_bytes()).into_owned())
}

unsafe fn execute_inner(
    info: ffi::duckdb_function_info,
    input: ffi::duckdb_data_chunk,
    output: ffi::duckdb_vector,
) -> Result<(), String> {
    let instance = &*(ffi::duckdb_scalar_function_get_extra_info(info) as *const Arc<Instance>);
    let caller = &(*(ffi::duckdb_scalar_function_get_bind_data(info) as *const CallerBind)).caller;
    let rows = ffi::duckdb_data_chunk_get_size(input) as usize;
    let columns = ffi::duckdb_data_chunk_get_column_count(input) as usize;
    let column = |c: usize| (c < columns).then(|| ffi::duckdb_data_chunk_get_vector(input, c as u64));
    for row in 0..rows {
        let Some(query) = text(ffi::duckdb_data_chunk_get_vector(input, 0), row) else {
            ffi::duckdb_vector_ensure_validity_writable(output);
            ffi::duckdb_validity_set_row_invalid(ffi::duckdb_vector_get_validity(output), row as u64);
            continue;
        };
        let inputs = column(1).and_then(|v| text(v, row));
        crate::nesting::check(&query, "the query")?;
        if let Some(inputs) = &inputs {
            crate::nesting::check(inputs, "the inputs")?;
        }
        let store = column(2).and_then(|v| text(v, row));
        let name = instance.resolve(caller, &StoreName::parse(store.as_deref().unwrap_or(DEFAULT_STORE))?)?;
        let mut opts = match column(3).and_then(|v| text(v, row)) {
            Some(options) => read_options(&options)?,
            None => planner::QueryOptions::default(),
        };
        let schema = crate::query::read_schema(instance, &name, &mut opts)?;
        // the SQL is run by the caller, over the tables: they must hold every acknowledged transaction
        instance.settle()?;
        let mut compiled =
            planner::compile_query(&query, inputs.as_deref(), &schema, &name, &opts).map_err(|e| e.to_string())?;
        if opts.dialect != planner::sql::Dialect::DuckDb && compiled.held_sql.is_some() {
            // `*` in a pull is typed from the attributes the pulled entities hold, as mentat_q types it: the
            // probe runs here, in DuckDB over the store (for mentat_spark, the export's files attached), and the
            // query is compiled again for them
            let duck = planner::QueryOptions { dialect: planner::sql::Dialect::DuckDb, ..opts.clone() };
            let probe = planner::compile_query(&query, inputs.as_deref(), &schema, &name, &duck)
                .map_err(|e| e.to_string())?
                .held_sql;
            if let Some(probe) = probe {
                let held = crate::query::query_bigints(instance, caller, &probe, &[])?;
                compiled = planner::compile_query_held(&query, inputs.as_deref(), &schema, &name, &opts, Some(&held))
                    .map_err(|e| e.to_string())?;
            }
        }
        if !compiled.stages.is_empty() {
            let plan = compiled.plan_json(opts.dialect);
            ffi::duckdb_vector_assign_string_element_len(
                output,
                row as u64,
                plan.as_ptr() as *const _,
                plan.len() as u64,
            );
            continue;
        }
        let entity = match opts.empty || opts.dialect != planner::sql::Dialect::DuckDb {
            true => None,
            false => crate::entity::shape_of(instance, &name, &query, &schema, &compiled)
                .and_then(|shape| crate::entity::plan(instance, &shape, inputs.as_deref(), &schema, &name, &opts)),
        };
        // mentat_q answers this query from the entity index when it can; the comment says so (the statement
        // itself is the general path, which `query()` runs)
        let sql = match entity {
            Some(plan) => format!("/* mentat_q: {} */\n{}", plan.to_string().replace("*/", "* /"), compiled.sql),
            None => compiled.sql,
        };
        let sql = sql.as_bytes();
        ffi::duckdb_vector_assign_string_element_len(output, row as u64, sql.as_ptr() as *const _, sql.len() as u64);
    }
    Ok(())
}

/// Reads `mentat_sql`'s options text: `key=value` pairs separated by commas, keys `dialect` (`duckdb` or
/// `spark`), `as_of` and `since` (an integer is a tx entid, other text an instant such as `2025-01-01 10:00:00+00`)
/// and `history` (`true` or `false`). Errors name the pair that is not understood.
pub(crate) fn read_options(text: &str) -> Result<planner::QueryOptions, String> {
    let mut opts = planner::QueryOptions::default();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').map(|(k, v)| (k.trim(), v.trim())).ok_or_else(|| {
            format!("mentat_sql options: {pair:?} is not key=value (dialect=spark, as_of=T, since=T, history=true)")
        })?;
        let bound = |v: &str| match v.parse::<i64>() {
            Ok(t) => planner::TimeBound::Tx(t),
            Err(_) => planner::TimeBound::Instant(v.to_string()),
        };
        match key.to_ascii_lowercase().as_str() {
            "dialect" => {
                opts.dialect = planner::sql::Dialect::parse(value)
                    .ok_or_else(|| format!("mentat_sql options: unknown dialect {value:?} (duckdb or spark)"))?
            }
            "as_of" => opts.as_of = Some(bound(value)),
            "since" => opts.since = Some(bound(value)),
            "history" => {
                opts.history = match value.to_ascii_lowercase().as_str() {
                    "true" => true,
                    "false" => false,
                    _ => return Err(format!("mentat_sql options: history={value:?} is neither true nor false")),
                }
            }
            _ => return Err(format!("mentat_sql options: unknown option {key:?} (dialect, as_of, since, history)")),
        }
    }
    Ok(opts)
}

unsafe extern "C" fn execute(
    info: ffi::duckdb_function_info,
    input: ffi::duckdb_data_chunk,
    output: ffi::duckdb_vector,
) {
    let outcome = std::panic::catch_unwind(|| unsafe { execute_inner(info, input, output) });
    finish_scalar(info, outcome, "mentat panicked while compiling the query");
}

/// Registers `mentat_sql` with one to four VARCHAR arguments.
///
/// # Safety
/// `con` must be a valid connection inside the entry point.
pub unsafe fn register(con: ffi::duckdb_connection, instance: &Arc<Instance>) -> Result<(), String> {
    register_varchar_set(
        con,
        c"mentat_sql",
        1..=4,
        |varchar| varchar,
        |f| {
            let extra = Box::into_raw(Box::new(instance.clone())) as *mut c_void;
            ffi::duckdb_scalar_function_set_extra_info(f, extra, Some(drop_box::<Arc<Instance>>));
            // NULL arguments reach `execute_inner`, which reads them as not given
            ffi::duckdb_scalar_function_set_special_handling(f);
            ffi::duckdb_scalar_function_set_bind(f, Some(bind_caller));
            ffi::duckdb_scalar_function_set_function(f, Some(execute));
        },
    )
}

/// Registers the scalar function set `name`, one overload per count in `arities` of VARCHAR arguments, each
/// returning the type `returns` makes of VARCHAR (destroyed here unless it is VARCHAR itself) and finished by
/// `setup` (callbacks, extra info).
///
/// # Safety
/// `con` must be a valid connection inside the entry point; `setup` may only configure the function it is given.
pub unsafe fn register_varchar_set(
    con: ffi::duckdb_connection,
    name: &std::ffi::CStr,
    arities: std::ops::RangeInclusive<usize>,
    returns: impl Fn(ffi::duckdb_logical_type) -> ffi::duckdb_logical_type,
    setup: impl Fn(ffi::duckdb_scalar_function),
) -> Result<(), String> {
    let mut set = ffi::duckdb_create_scalar_function_set(name.as_ptr());
    for arity in arities {
        let mut f = ffi::duckdb_create_scalar_function();
        ffi::duckdb_scalar_function_set_name(f, name.as_ptr());
        let mut varchar = ffi::duckdb_create_logical_type(ffi::DUCKDB_TYPE_DUCKDB_TYPE_VARCHAR);
        for _ in 0..arity {
            ffi::duckdb_scalar_function_add_parameter(f, varchar);
        }
        let mut ret = returns(varchar);
        ffi::duckdb_scalar_function_set_return_type(f, ret);
        if ret != varchar {
            ffi::duckdb_destroy_logical_type(&mut ret);
        }
        ffi::duckdb_destroy_logical_type(&mut varchar);
        setup(f);
        ffi::duckdb_add_scalar_function_to_set(set, f);
        ffi::duckdb_destroy_scalar_function(&mut f);
    }
    let rc = ffi::duckdb_register_scalar_function_set(con, set);
    ffi::duckdb_destroy_scalar_function_set(&mut set);
    if rc != ffi::DuckDBSuccess {
        return Err(format!("could not register {}", name.to_string_lossy()));
    }
    Ok(())
}
