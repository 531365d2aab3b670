//! `mentat_q` and `mentat_explain`: table functions that compile a Datalog query to one SQL statement, run it
//! on one of mentat's connections and hand DuckDB the result vectors as they stream out.
//!
//! Written against the raw C API (not duckdb-rs's `VTab`) because the result columns are only known after the
//! statement is prepared, and because each output vector is made a zero-copy reference
//! (`duckdb_vector_reference_vector`) to the vector of the inner result: no row cap, no copy, no text encoding.

use crate::session::{Caller, RawTarget, Target, Watch};
use crate::Instance;
use duckdb::ffi;
use planner::layout::{StoreName, DEFAULT_STORE};
use planner::{QueryOptions, TimeBound};
use std::ffi::{c_void, CStr, CString};
use std::sync::{Arc, Condvar, Mutex};

/// Raw connections for streaming query results, opened at load time like [`crate::pool::Pool`].
pub struct RawPool {
    free: Mutex<Vec<RawConn>>,
    available: Condvar,
}

/// Prepared statements kept per connection, so that a query asked again skips DuckDB's parse and plan.
const STATEMENT_CACHE: usize = 128;

/// The query connections' session setting for a statement whose rows are a set: they may be handed over in any
/// order. A Datalog answer is a set unless the query has `:order`. With insertion order kept, DuckDB ran the last
/// pipeline of a statement streamed from inside a table function with less of the second core: q4 at m (103,671
/// rows) took 1.2x to 1.6x the same SQL sent directly (storage/README.md "Answers in any order").
///
/// A statement that promises an order (`:order`, pull-many's rows in its input's order, `mentat_datoms`' index
/// order) runs with [`ORDERED`] instead: DuckDB's streaming result (2.0.1 here) hands an `ORDER BY`'s rows over out of
/// order, chunk by chunk, when `preserve_insertion_order` is off (a materialized result keeps them ordered),
/// so the setting follows the statement ([`RawConn::keep_order`]).
const UNORDERED: &CStr = c"SET preserve_insertion_order = false";
/// DuckDB's default, for a statement that must hand its rows over in its `ORDER BY`'s order ([`UNORDERED`]).
const ORDERED: &CStr = c"SET preserve_insertion_order = true";

struct RawConn {
    conn: ffi::duckdb_connection,
    /// SQL text -> prepared statement on `conn`, with a use counter for eviction.
    cache: std::collections::HashMap<String, (ffi::duckdb_prepared_statement, u64)>,
    uses: u64,
    /// The `TimeZone` the connection was last set to (None: never set, the database's default).
    zone: Option<String>,
    /// Whether the host's replacement scans and insertion order were turned off on it ([`RawPool::get`], at its
    /// first borrow).
    ready: bool,
    /// Whether the connection keeps insertion order now ([`RawConn::keep_order`]; off once `ready`).
    ordered: bool,
}
// SAFETY: a DuckDB connection and its prepared statements may be used from any thread, one thread at a time;
// the pool hands each connection to one borrower at a time.
unsafe impl Send for RawConn {}

impl RawConn {
    /// Takes on the caller's time zone: one `SET` when it differs from the connection's, and the statement cache
    /// emptied, since DuckDB folds constant casts to TIMESTAMPTZ when it prepares a statement.
    unsafe fn adopt(&mut self, caller: &Caller) -> Result<(), String> {
        let Some(zone) = &caller.time_zone else { return Ok(()) };
        if self.zone.as_ref() == Some(zone) {
            return Ok(());
        }
        let sql = CString::new(format!("SET TimeZone = {}", planner::layout::quote_str(zone)))
            .map_err(|_| "a time zone name with a NUL byte")?;
        self.set(&sql).map_err(|e| format!("mentat could not take on the time zone {zone}: {e}"))?;
        for (_, (mut p, _)) in self.cache.drain() {
            ffi::duckdb_destroy_prepare(&mut p);
        }
        self.zone = Some(zone.clone());
        Ok(())
    }

    /// Makes the connection keep insertion order (`yes`) or not, for the statement about to be prepared and run
    /// on it: one `SET` when it differs from what the connection does now ([`UNORDERED`]). The statement cache is
    /// kept, since DuckDB chooses a result's collector from the setting when it executes a statement, and a
    /// statement's text says whether it is ordered. Errors with DuckDB's message.
    unsafe fn keep_order(&mut self, yes: bool) -> Result<(), String> {
        if self.ordered == yes {
            return Ok(());
        }
        self.set(if yes { ORDERED } else { UNORDERED })
            .map_err(|e| format!("mentat could not set insertion order on its connection: {e}"))?;
        self.ordered = yes;
        Ok(())
    }

    /// Runs one session statement (a `SET`) on the connection. Errors with DuckDB's message.
    unsafe fn set(&self, sql: &CStr) -> Result<(), String> {
        let mut result: ffi::duckdb_result = std::mem::zeroed();
        let ok = ffi::duckdb_query(self.conn, sql.as_ptr(), &mut result) == ffi::DuckDBSuccess;
        let err = if ok { None } else { result_error(&mut result) };
        ffi::duckdb_destroy_result(&mut result);
        if ok {
            Ok(())
        } else {
            Err(err.unwrap_or_default())
        }
    }

    /// The prepared statement for `sql`, from the cache or newly prepared. Errors with DuckDB's message.
    unsafe fn prepare(&mut self, sql: &str) -> Result<ffi::duckdb_prepared_statement, String> {
        self.uses += 1;
        if let Some(entry) = self.cache.get_mut(sql) {
            entry.1 = self.uses;
            return Ok(entry.0);
        }
        let csql = CString::new(sql).map_err(|_| "the compiled SQL has a NUL byte")?;
        let mut prepared: ffi::duckdb_prepared_statement = std::ptr::null_mut();
        if ffi::duckdb_prepare(self.conn, csql.as_ptr(), &mut prepared) != ffi::DuckDBSuccess {
            let msg = CStr::from_ptr(ffi::duckdb_prepare_error(prepared)).to_string_lossy().into_owned();
            ffi::duckdb_destroy_prepare(&mut prepared);
            return Err(format!("mentat: DuckDB rejected the compiled statement: {msg}"));
        }
        if self.cache.len() >= STATEMENT_CACHE {
            if let Some(oldest) = self.cache.iter().min_by_key(|(_, v)| v.1).map(|(k, _)| k.clone()) {
                if let Some((mut old, _)) = self.cache.remove(&oldest) {
                    ffi::duckdb_destroy_prepare(&mut old);
                }
            }
        }
        self.cache.insert(sql.to_string(), (prepared, self.uses));
        Ok(prepared)
    }
}

impl RawPool {
    /// Opens `size` connections to `db`. Must run inside the extension's entry point. Each is readied
    /// (`crate::pool::no_host_replacements` and [`UNORDERED`]) at its first borrow, not here (see
    /// `crate::pool::Pool::open`).
    ///
    /// # Safety
    /// `db` must be the valid database handle DuckDB gave the entry point.
    pub unsafe fn open(db: ffi::duckdb_database, size: usize) -> Result<RawPool, String> {
        let mut free = Vec::with_capacity(size);
        for _ in 0..size {
            let mut c: ffi::duckdb_connection = std::ptr::null_mut();
            if ffi::duckdb_connect(db, &mut c) != ffi::DuckDBSuccess {
                return Err("mentat could not open a connection to the database".into());
            }
            free.push(RawConn { conn: c, cache: Default::default(), uses: 0, zone: None, ready: false, ordered: true });
        }
        Ok(RawPool { free: Mutex::new(free), available: Condvar::new() })
    }

    fn get(self: &Arc<Self>) -> Result<Borrowed, String> {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        let deadline = std::time::Instant::now() + crate::pool::WAIT;
        loop {
            if let Some(mut c) = free.pop() {
                drop(free);
                if !c.ready {
                    // see crate::pool::no_host_replacements and UNORDERED; an error (no such setting) is left unread
                    for sql in [crate::pool::NO_PYTHON_REPLACEMENTS, UNORDERED] {
                        // SAFETY: `c.conn` is an open connection that this borrower alone holds.
                        let _ = unsafe { c.set(sql) };
                    }
                    c.ready = true;
                    c.ordered = false;
                }
                return Ok(Borrowed { pool: self.clone(), conn: Some(c) });
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                return Err(format!("all mentat query connections stayed busy for {:?}", crate::pool::WAIT));
            }
            free = self.available.wait_timeout(free, deadline - now).unwrap_or_else(|p| p.into_inner()).0;
        }
    }
}

struct Borrowed {
    pool: Arc<RawPool>,
    conn: Option<RawConn>,
}

impl Drop for Borrowed {
    fn drop(&mut self) {
        if let Some(c) = self.conn.take() {
            self.pool.free.lock().unwrap_or_else(|p| p.into_inner()).push(c);
            self.pool.available.notify_one();
        }
    }
}

/// What the registered function does with the compiled statement.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Run it and stream its rows (`mentat_q`).
    Query,
    /// Stream DuckDB's `EXPLAIN` of it (`mentat_explain`).
    Explain,
}

struct Extra {
    instance: Arc<Instance>,
    mode: Mode,
}

/// Bind data: the borrowed connection and its (cached) prepared statement, held until DuckDB drops the bind
/// data; the statement stays in the connection's cache.
pub(crate) struct Bound {
    prepared: ffi::duckdb_prepared_statement,
    columns: usize,
    /// The caller's session: its interrupt is forwarded to the connection while the statement runs.
    caller: Caller,
    target: RawTarget,
    _conn: Option<Borrowed>,
    /// The answer, when the entity path gave it at bind time (then there is no statement).
    answer: Option<Box<dyn crate::entity::Write>>,
    /// The heavy lane the statement runs through (None when it is off), and the statement's key in it (a hash of
    /// its SQL text, or of its query's shape for `mentat_q`).
    lane: Option<Arc<storage::lane::Lane>>,
    key: u64,
    /// Where an admitted heavy statement runs (`heavy.rs`; None when the lane is off).
    heavy: Option<Arc<crate::heavy::Heavy>>,
}

impl Bound {
    /// Forwards the caller's interrupt to the statement's connection until the watch is dropped.
    fn watch(&self) -> Watch {
        Watch::start(&self.caller, Target::Raw(self.target))
    }

    /// Bind data for an answer the entity path computed.
    pub(crate) fn answered(answer: Box<dyn crate::entity::Write>) -> Bound {
        Bound {
            prepared: std::ptr::null_mut(),
            columns: 0,
            caller: Caller::default(),
            target: RawTarget(std::ptr::null_mut()),
            _conn: None,
            answer: Some(answer),
            lane: None,
            key: 0,
            heavy: None,
        }
    }
}

struct Streaming {
    result: Option<Box<ffi::duckdb_result>>,
    /// The statement's slot in the heavy lane, held until its last row is produced.
    slot: Option<storage::lane::Slot>,
    /// CPU time the threads that drive the statement spent executing it and fetching its chunks so far (only
    /// counted when the heavy lane is on).
    busy: std::time::Duration,
}

impl Streaming {
    fn new(result: Option<Box<ffi::duckdb_result>>) -> Streaming {
        Streaming { result, slot: None, busy: std::time::Duration::ZERO }
    }
}

impl Drop for Streaming {
    fn drop(&mut self) {
        if let Some(mut r) = self.result.take() {
            // SAFETY: the result came from duckdb_execute_prepared_streaming and is destroyed once.
            unsafe { ffi::duckdb_destroy_result(&mut *r) };
        }
    }
}

pub(crate) unsafe fn value_text(v: ffi::duckdb_value) -> String {
    let p = ffi::duckdb_get_varchar(v);
    if p.is_null() {
        return String::new();
    }
    let s = CStr::from_ptr(p).to_string_lossy().into_owned();
    ffi::duckdb_free(p as *mut c_void);
    s
}

/// The text of a VARCHAR value with every byte of it: `duckdb_get_varchar` hands text over as a C string, which
/// ends at the first NUL byte, so a VARCHAR value is read through `encode($1)` (its UTF-8 bytes as a BLOB, with a
/// length) on one of mentat's connections. Any other value is its text, as [`value_text`] gives it.
pub(crate) unsafe fn full_text(instance: &Instance, v: ffi::duckdb_value) -> Result<String, String> {
    let id = ffi::duckdb_get_type_id(ffi::duckdb_get_value_type(v));
    if id != ffi::DUCKDB_TYPE_DUCKDB_TYPE_VARCHAR {
        return Ok(value_text(v));
    }
    let mut conn = instance.raw.get()?;
    let raw = conn.conn.as_mut().ok_or("no connection")?;
    let prepared = raw.prepare("SELECT encode($1)")?;
    ffi::duckdb_clear_bindings(prepared);
    if ffi::duckdb_bind_value(prepared, 1, v) != ffi::DuckDBSuccess {
        return Err("mentat: could not read a VARCHAR value".into());
    }
    let mut result: ffi::duckdb_result = std::mem::zeroed();
    if ffi::duckdb_execute_prepared(prepared, &mut result) != ffi::DuckDBSuccess {
        let err = result_error(&mut result).unwrap_or_default();
        ffi::duckdb_destroy_result(&mut result);
        return Err(format!("mentat: could not read a VARCHAR value: {err}"));
    }
    let mut chunk = ffi::duckdb_fetch_chunk(result);
    let text = if chunk.is_null() || ffi::duckdb_data_chunk_get_size(chunk) == 0 {
        None
    } else {
        let data =
            ffi::duckdb_vector_get_data(ffi::duckdb_data_chunk_get_vector(chunk, 0)) as *mut ffi::duckdb_string_t;
        Some(String::from_utf8_lossy(duckdb::types::DuckString::new(&mut *data).as_bytes()).into_owned())
    };
    if !chunk.is_null() {
        ffi::duckdb_destroy_data_chunk(&mut chunk);
    }
    ffi::duckdb_destroy_result(&mut result);
    text.ok_or_else(|| "mentat: could not read a VARCHAR value".into())
}

/// The first column (BIGINT, NULLs skipped) of statement `sql` run with `params` on a query connection that has
/// taken on the `caller`'s session (a pull's probe of the attributes its entities hold).
pub(crate) unsafe fn query_bigints(
    instance: &Instance,
    caller: &Caller,
    sql: &str,
    params: &[ffi::duckdb_value],
) -> Result<Vec<i64>, String> {
    instance.settle()?;
    let mut conn = instance.raw.get()?;
    let raw = conn.conn.as_mut().ok_or("no connection")?;
    raw.adopt(caller)?;
    let prepared = raw.prepare(sql)?;
    ffi::duckdb_clear_bindings(prepared);
    for (i, p) in params.iter().enumerate() {
        if ffi::duckdb_bind_value(prepared, i as u64 + 1, *p) != ffi::DuckDBSuccess {
            return Err(format!("mentat: could not bind parameter {} of the compiled statement", i + 1));
        }
    }
    let mut result: ffi::duckdb_result = std::mem::zeroed();
    if ffi::duckdb_execute_prepared(prepared, &mut result) != ffi::DuckDBSuccess {
        let err = result_error(&mut result).unwrap_or_default();
        ffi::duckdb_destroy_result(&mut result);
        return Err(format!("mentat: {err}"));
    }
    let mut out = Vec::new();
    loop {
        let mut chunk = ffi::duckdb_fetch_chunk(result);
        if chunk.is_null() {
            break;
        }
        let n = ffi::duckdb_data_chunk_get_size(chunk) as usize;
        let vector = ffi::duckdb_data_chunk_get_vector(chunk, 0);
        let data = ffi::duckdb_vector_get_data(vector) as *const i64;
        let validity = ffi::duckdb_vector_get_validity(vector);
        for i in 0..n {
            if validity.is_null() || ffi::duckdb_validity_row_is_valid(validity, i as u64) {
                out.push(*data.add(i));
            }
        }
        ffi::duckdb_destroy_data_chunk(&mut chunk);
        if n == 0 {
            break;
        }
    }
    ffi::duckdb_destroy_result(&mut result);
    Ok(out)
}

/// A named parameter's value, or None when the caller did not give it (or gave NULL).
pub(crate) unsafe fn named(info: ffi::duckdb_bind_info, name: &CStr) -> Option<ffi::duckdb_value> {
    let mut v = ffi::duckdb_bind_get_named_parameter(info, name.as_ptr());
    if v.is_null() {
        return None;
    }
    if ffi::duckdb_is_null_value(v) {
        ffi::duckdb_destroy_value(&mut v);
        return None;
    }
    Some(v)
}

/// Reads `as_of`/`since`: an integer is a tx entid, anything else (TIMESTAMPTZ, TIMESTAMP, DATE, VARCHAR) is
/// an instant, passed to the planner as timestamp text. Text (VARCHAR) is checked here, once, with DuckDB's own
/// `TIMESTAMPTZ` cast: text that is not an instant is refused before a statement is built, instead of failing
/// inside a statement over every table of the store (which took seconds on a store of a few hundred tables).
///
/// # Errors
/// `"as_of := '<text>' is not a tx entid or an instant ..."` (the text cut to 200 characters).
pub(crate) unsafe fn time_bound(
    instance: &Instance,
    info: ffi::duckdb_bind_info,
    name: &CStr,
) -> Result<Option<TimeBound>, String> {
    let Some(mut v) = named(info, name) else { return Ok(None) };
    let ty = ffi::duckdb_get_value_type(v);
    let id = ffi::duckdb_get_type_id(ty);
    let bound = if is_integer(id) {
        Ok(TimeBound::Tx(ffi::duckdb_get_int64(v)))
    } else if id == ffi::DUCKDB_TYPE_DUCKDB_TYPE_VARCHAR {
        // every byte ([`full_text`]): text with a NUL is refused whole, not read up to the NUL; DuckDB's cast checks
        // the rest in the statement that resolves the instant ([`read_schema_at`])
        full_text(instance, v).and_then(|t| {
            if t.len() > 256 || t.contains('\0') {
                Err(not_an_instant(name, &t))
            } else {
                Ok(TimeBound::Instant(t))
            }
        })
    } else {
        Ok(TimeBound::Instant(value_text(v)))
    };
    ffi::duckdb_destroy_value(&mut v);
    bound.map(Some)
}

/// The error for `name := '<text>'` that is not a tx entid or an instant (see [`time_bound`]).
fn not_an_instant(name: &CStr, text: &str) -> String {
    let shown: String = text.chars().take(200).map(|c| if c.is_control() { ' ' } else { c }).collect();
    let more = if text.chars().count() > 200 { "..." } else { "" };
    format!(
        "{} := '{shown}{more}' is not a tx entid or an instant (a TIMESTAMPTZ, or text such as '2024-01-31 12:00:00+00')",
        name.to_string_lossy()
    )
}

/// Refuses instant text that DuckDB's `TIMESTAMPTZ` cast does not read (see [`time_bound`]).
fn check_instant(instance: &Instance, name: &CStr, text: &str) -> Result<(), String> {
    let conn = instance.pool.get()?;
    let ok: bool = conn
        .query_row("SELECT TRY_CAST(?::VARCHAR AS TIMESTAMPTZ) IS NOT NULL", [text], |r| r.get(0))
        .map_err(|e| e.to_string())?;
    if ok {
        Ok(())
    } else {
        Err(not_an_instant(name, text))
    }
}

unsafe fn bind_inner(info: ffi::duckdb_bind_info) -> Result<Bound, String> {
    let extra = &*(ffi::duckdb_bind_get_extra_info(info) as *const Extra);
    let n = ffi::duckdb_bind_get_parameter_count(info);
    let mut params = Vec::new();
    for i in 0..n {
        let mut v = ffi::duckdb_bind_get_parameter(info, i);
        let text = if ffi::duckdb_is_null_value(v) { None } else { Some(value_text(v)) };
        ffi::duckdb_destroy_value(&mut v);
        params.push(text);
    }
    let query = params.first().cloned().flatten().ok_or("the query is NULL")?;
    crate::nesting::check(&query, "the query")?;
    let inputs = match named(info, c"inputs") {
        Some(mut v) => {
            let s = value_text(v);
            ffi::duckdb_destroy_value(&mut v);
            Some(s)
        }
        None => None,
    };
    if let Some(inputs) = &inputs {
        crate::nesting::check(inputs, "the inputs")?;
    }
    let (caller, store_name, mut opts) = read_options(info, &extra.instance)?;
    let schema = read_schema_at(&extra.instance, &caller, &store_name, &mut opts)?;
    let instance = &extra.instance;
    let stores = read_sources(info, instance, &caller, &store_name)?;
    let sources: Vec<planner::StoreSource> =
        stores.iter().map(|(var, store, opts, schema)| planner::StoreSource { var, schema, store, opts }).collect();
    // A query text seen before on this schema is planned for the entity path without compiling SQL (never for
    // the empty database of a store that does not exist yet, nor for a query of several stores).
    let kept =
        if opts.empty || !sources.is_empty() { None } else { instance.query_shapes.get(&store_name, &query, &schema) };
    // Whether the entity path was tried already (then the general path answers, and it is not tried again below).
    let mut tried = !sources.is_empty();
    let pull_ctx = crate::entity::PullContext { caller: &caller, schema: &schema, opts: &opts };
    if let (Mode::Query, Some(shape)) = (extra.mode, &kept) {
        if let Some(plan) = crate::entity::plan(instance, shape, inputs.as_deref(), &schema, &store_name, &opts) {
            if let Some(answer) = crate::entity::answer(instance, &store_name, &plan, shape, &pull_ctx)? {
                return Ok(answer.bind(info));
            }
        }
        tried = true;
    }
    let compile = |held: Option<&[i64]>| {
        planner::compile_query_sources(&query, inputs.as_deref(), &schema, &store_name, &opts, &sources, held).map_err(
            |e| match (&e, opts.empty) {
                // the empty database of a store never written knows only the bootstrap attributes: say why
                (planner::PlanError::UnknownAttribute { .. }, true) => format!(
                    "{e} (store {store_name} does not exist yet: its first mentat_transact creates it; \
                     store := names another)"
                ),
                _ => e.to_string(),
            },
        )
    };
    let mut compiled = compile(None)?;
    // a pull's `*` is typed from the attributes the answer's entities hold: probe them, then compile again
    if let Some(probe) = compiled.held_sql.take() {
        let held = query_bigints(&extra.instance, &caller, &probe, &[])?;
        compiled = compile(Some(&held))?;
    }
    let shape = match opts.empty || !sources.is_empty() {
        true => None,
        false => kept.or_else(|| crate::entity::shape_of(instance, &store_name, &query, &schema, &compiled)),
    };
    let entity = if tried {
        None
    } else {
        shape
            .as_ref()
            .and_then(|shape| crate::entity::plan(instance, shape, inputs.as_deref(), &schema, &store_name, &opts))
    };
    if let (Mode::Query, Some(plan), Some(shape)) = (extra.mode, &entity, &shape) {
        if let Some(answer) = crate::entity::answer(instance, &store_name, plan, shape, &pull_ctx)? {
            return Ok(answer.bind(info));
        }
    }
    let sql = match (extra.mode, &entity) {
        (Mode::Query, _) => compiled.sql.clone(),
        (Mode::Explain, Some(plan)) => {
            let note = crate::entity::index_note(instance, &store_name, plan)?;
            let text = match note {
                Some(note) => format!("{plan}\n-- {note}"),
                None => plan.to_string(),
            };
            format!("SELECT 'entity_path' AS explain_key, {} AS explain_value", planner::layout::quote_str(&text))
        }
        (Mode::Explain, None) => format!("EXPLAIN {}", compiled.sql),
    };
    let names: Vec<&str> = match extra.mode {
        Mode::Query => compiled.columns.iter().map(|c| c.name.as_str()).collect(),
        Mode::Explain => vec![],
    };
    let ordered = matches!(extra.mode, Mode::Query) && compiled.ordered;
    let mut bound = bind_statement(info, &extra.instance, &caller, &sql, &names, &[], ordered)?;
    // the heavy lane knows a query by its text and time options, not by its inputs (which the compiled SQL holds
    // as constants): what one search or one as-of question costs is what the next one of that shape will cost
    bound.key = lane_key(&[
        &store_name.to_string(),
        &query,
        &format!("{}{}{}", opts.as_of.is_some(), opts.since.is_some(), opts.history),
    ]);
    Ok(bound)
}

/// The heavy lane's key of a statement known by `parts` (a hash; [`storage::lane`]).
pub(crate) fn lane_key(parts: &[&str]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    parts.hash(&mut h);
    h.finish()
}

/// Prepares `sql` on a borrowed query connection that has taken on the `caller`'s time zone (through its
/// statement cache), binds `params` to `$1`, `$2`, ... (none: the bindings are left alone), and declares the
/// statement's columns as the table function's result columns, named `names[i]` when given, else as DuckDB
/// names them. `ordered`: the statement ends in an `ORDER BY` whose order its rows must keep (the connection then
/// keeps insertion order for it, [`UNORDERED`]). The returned bind data is streamed by [`init`] and [`function`],
/// which forward the caller's interrupt to the connection while they run; the connection stays borrowed until
/// DuckDB drops the bind data.
pub(crate) unsafe fn bind_statement(
    info: ffi::duckdb_bind_info,
    instance: &Instance,
    caller: &Caller,
    sql: &str,
    names: &[&str],
    params: &[ffi::duckdb_value],
    ordered: bool,
) -> Result<Bound, String> {
    instance.settle()?;
    let mut conn = instance.raw.get()?;
    let raw = conn.conn.as_mut().ok_or("no connection")?;
    raw.adopt(caller)?;
    raw.keep_order(ordered)?;
    let prepared = raw.prepare(sql)?;
    let target = RawTarget(raw.conn);
    let key = lane_key(&[sql]);
    let mut bound = Bound {
        prepared,
        columns: 0,
        caller: caller.clone(),
        target,
        _conn: Some(conn),
        answer: None,
        lane: (instance.lane.capacity() > 0).then(|| instance.lane.clone()),
        key,
        heavy: instance.heavy.clone(),
    };
    if !params.is_empty() {
        ffi::duckdb_clear_bindings(prepared);
        for (i, p) in params.iter().enumerate() {
            if ffi::duckdb_bind_value(prepared, i as u64 + 1, *p) != ffi::DuckDBSuccess {
                return Err(format!("mentat: could not bind parameter {} of the compiled statement", i + 1));
            }
        }
    }
    let columns = ffi::duckdb_prepared_statement_column_count(prepared) as usize;
    for i in 0..columns {
        let mut ty = ffi::duckdb_prepared_statement_column_logical_type(prepared, i as u64);
        let name = match names.get(i) {
            Some(n) => n.to_string(),
            None => CStr::from_ptr(ffi::duckdb_prepared_statement_column_name(prepared, i as u64))
                .to_string_lossy()
                .into_owned(),
        };
        let cname = CString::new(name).unwrap_or_default();
        ffi::duckdb_bind_add_result_column(info, cname.as_ptr(), ty);
        ffi::duckdb_destroy_logical_type(&mut ty);
    }
    bound.columns = columns;
    Ok(bound)
}

/// The result column types of `sql`, prepared on a query connection (through its statement cache) that has
/// taken on the `caller`'s session: the entity path's answers keep the general path's exact column types.
pub(crate) unsafe fn result_types(instance: &Instance, caller: &Caller, sql: &str) -> Result<Vec<OwnedType>, String> {
    instance.settle()?;
    let mut conn = instance.raw.get()?;
    let raw = conn.conn.as_mut().ok_or("no connection")?;
    raw.adopt(caller)?;
    let prepared = raw.prepare(sql)?;
    let columns = ffi::duckdb_prepared_statement_column_count(prepared);
    Ok((0..columns).map(|i| OwnedType(ffi::duckdb_prepared_statement_column_logical_type(prepared, i))).collect())
}

/// A DuckDB logical type that mentat owns (destroyed on drop); DuckDB copies it when a column is declared.
pub struct OwnedType(pub ffi::duckdb_logical_type);

// SAFETY: a logical type is immutable once created; declaring a column copies it (a shared_ptr copy, whose count
// is atomic), so it may be read from any thread.
unsafe impl Send for OwnedType {}
unsafe impl Sync for OwnedType {}

impl Drop for OwnedType {
    fn drop(&mut self) {
        // SAFETY: the type was created for us and is destroyed once.
        unsafe { ffi::duckdb_destroy_logical_type(&mut self.0) };
    }
}

/// Declares result columns `names` of `types`, and returns bind data that writes `answer` instead of running a
/// statement.
pub(crate) unsafe fn bind_answer(
    info: ffi::duckdb_bind_info,
    names: &[&str],
    types: &[OwnedType],
    answer: Box<dyn crate::entity::Write>,
) -> Bound {
    for (name, ty) in names.iter().zip(types) {
        let cname = CString::new(*name).unwrap_or_default();
        ffi::duckdb_bind_add_result_column(info, cname.as_ptr(), ty.0);
    }
    Bound::answered(answer)
}

/// Hands DuckDB the outcome of a bind: the bind data, or the error (a panic is reported as `what` panicking).
pub(crate) unsafe fn finish_bind(
    info: ffi::duckdb_bind_info,
    outcome: std::thread::Result<Result<Bound, String>>,
    what: &str,
) {
    match outcome {
        Ok(Ok(bound)) => {
            ffi::duckdb_bind_set_bind_data(info, Box::into_raw(Box::new(bound)) as *mut c_void, Some(drop_box::<Bound>))
        }
        Ok(Err(e)) => bind_error(info, &e),
        Err(_) => bind_error(info, &format!("mentat panicked while {what}")),
    }
}

unsafe extern "C" fn bind(info: ffi::duckdb_bind_info) {
    finish_bind(info, std::panic::catch_unwind(|| unsafe { bind_inner(info) }), "compiling the query");
}

/// The error of the compiled statement, as the table function reports it: DuckDB reports a table function's error
/// as an Invalid Input Error, so that prefix of the statement's own message is dropped (the user saw it twice, as
/// for `error()`'s message of a `sum` that overflows a long); other kinds (a Conversion Error, ...) keep theirs.
fn relayed(msg: &str) -> CString {
    let msg = msg.strip_prefix("Invalid Input Error: ").unwrap_or(msg);
    CString::new(msg.replace('\0', " ")).unwrap_or_default()
}

unsafe fn bind_error(info: ffi::duckdb_bind_info, msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    ffi::duckdb_bind_set_error(info, c.as_ptr());
}

pub(crate) unsafe extern "C" fn init(info: ffi::duckdb_init_info) {
    if std::panic::catch_unwind(|| unsafe { init_inner(info) }).is_err() {
        ffi::duckdb_init_set_error(info, c"mentat panicked while starting the query".as_ptr());
    }
}

unsafe fn init_inner(info: ffi::duckdb_init_info) {
    let bound = &*(ffi::duckdb_init_get_bind_data(info) as *const Bound);
    if bound.answer.is_some() {
        let state = Streaming::new(None);
        let data = Box::into_raw(Box::new(state)) as *mut c_void;
        ffi::duckdb_init_set_init_data(info, data, Some(drop_box::<Streaming>));
        return;
    }
    // a heavy statement waits for its slot in the lane before it runs (storage::lane)
    let slot = match &bound.lane {
        Some(lane) => match lane.admit(bound.key, bound.caller.client(), || bound.caller.interrupted()) {
            Ok(slot) => slot,
            Err(storage::lane::Refused::Interrupted) => {
                ffi::duckdb_init_set_error(
                    info,
                    c"INTERRUPT Error: Interrupted! (mentat: while the statement waited for a heavy one to finish)"
                        .as_ptr(),
                );
                return;
            }
        },
        None => None,
    };
    let _watch = bound.watch();
    let mut result: Box<ffi::duckdb_result> = Box::new(std::mem::zeroed());
    // an admitted heavy statement executes on the lane's threads, at their lower priority
    let heavy = bound.heavy.as_ref().filter(|_| slot.is_some());
    let measured = bound.lane.is_some();
    let (ok, busy) =
        step(heavy, measured, Ptr(bound.prepared), Ptr(&mut *result as *mut ffi::duckdb_result), |p, r| {
            // SAFETY: the prepared statement and the result outlive the step, which its caller waits for.
            unsafe { ffi::duckdb_execute_prepared_streaming(p.0, r.0) == ffi::DuckDBSuccess }
        });
    if !ok {
        let msg = CStr::from_ptr(ffi::duckdb_result_error(&mut *result)).to_string_lossy().into_owned();
        ffi::duckdb_destroy_result(&mut *result);
        ffi::duckdb_init_set_error(info, relayed(&msg).as_ptr());
        return;
    }
    let mut state = Streaming::new(Some(result));
    state.slot = slot;
    state.busy = busy;
    ffi::duckdb_init_set_init_data(info, Box::into_raw(Box::new(state)) as *mut c_void, Some(drop_box::<Streaming>));
}

pub(crate) unsafe extern "C" fn function(info: ffi::duckdb_function_info, output: ffi::duckdb_data_chunk) {
    if std::panic::catch_unwind(|| unsafe { function_inner(info, output) }).is_err() {
        ffi::duckdb_function_set_error(info, c"mentat panicked while streaming the answer".as_ptr());
    }
}

unsafe fn function_inner(info: ffi::duckdb_function_info, output: ffi::duckdb_data_chunk) {
    let bound = &*(ffi::duckdb_function_get_bind_data(info) as *const Bound);
    let state = &mut *(ffi::duckdb_function_get_init_data(info) as *mut Streaming);
    if let Some(answer) = &bound.answer {
        answer.write(output);
        return;
    }
    let Some(result) = state.result.as_mut() else {
        ffi::duckdb_data_chunk_set_size(output, 0);
        return;
    };
    let watch = bound.watch();
    let heavy = bound.heavy.as_ref().filter(|_| state.slot.is_some());
    let (chunk, busy) = step(
        heavy,
        bound.lane.is_some(),
        Ptr(&mut **result as *mut ffi::duckdb_result),
        Ptr(std::ptr::null_mut::<u8>()),
        |r, _| {
            // SAFETY: the result outlives the step, which its caller waits for.
            Ptr(unsafe { ffi::duckdb_fetch_chunk(*r.0) })
        },
    );
    let mut chunk = chunk.0;
    state.busy += busy;
    drop(watch);
    if chunk.is_null() {
        // the statement is done: its time is remembered (an error's too), and its slot freed
        if let Some(lane) = &bound.lane {
            lane.record(bound.key, state.busy);
        }
        state.slot = None;
        if let Some(err) = result_error(result) {
            ffi::duckdb_function_set_error(info, relayed(&err).as_ptr());
        }
        ffi::duckdb_data_chunk_set_size(output, 0);
        return;
    }
    let size = ffi::duckdb_data_chunk_get_size(chunk);
    let columns = bound.columns.min(ffi::duckdb_data_chunk_get_column_count(chunk) as usize);
    for i in 0..columns {
        let from = ffi::duckdb_data_chunk_get_vector(chunk, i as u64);
        let to = ffi::duckdb_data_chunk_get_vector(output, i as u64);
        ffi::duckdb_vector_reference_vector(to, from);
    }
    ffi::duckdb_data_chunk_set_size(output, size);
    ffi::duckdb_destroy_data_chunk(&mut chunk);
}

/// A raw pointer handed to the lane's threads for one step that its owner waits for.
struct Ptr<T>(*mut T);

// SAFETY: a `Ptr` crosses to a lane thread only inside `step`, whose caller waits for the step to end before it
// touches the pointee again; DuckDB's connections and results may be used from any thread, one at a time.
unsafe impl<T> Send for Ptr<T> {}

/// Runs one step of a statement (`f` over `a` and `b`): on the heavy lane's threads when `heavy` is given, else
/// here. Returns its value and, when `measured`, the CPU time of the thread that ran it (the statement's cost in
/// the lane's history). A panic on a lane thread panics here too (the entry points turn it into DuckDB's error).
fn step<A: 'static, B: 'static, T: Send + 'static>(
    heavy: Option<&Arc<crate::heavy::Heavy>>,
    measured: bool,
    a: Ptr<A>,
    b: Ptr<B>,
    f: fn(Ptr<A>, Ptr<B>) -> T,
) -> (T, std::time::Duration) {
    let timed = move |a, b| {
        let started = measured.then(thread_cpu);
        let v = f(a, b);
        (v, started.map_or(std::time::Duration::ZERO, |s| thread_cpu().saturating_sub(s)))
    };
    match heavy {
        Some(heavy) => heavy.run(move || timed(a, b)).expect("a step of a heavy statement panicked"),
        None => timed(a, b),
    }
}

/// CPU time the calling thread has used (`CLOCK_THREAD_CPUTIME_ID`): a statement's cost that does not grow while it
/// waits for a core, as its wall time does under load.
fn thread_cpu() -> std::time::Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes only the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    std::time::Duration::new(ts.tv_sec.max(0) as u64, ts.tv_nsec.clamp(0, 999_999_999) as u32)
}

unsafe fn result_error(result: &mut ffi::duckdb_result) -> Option<String> {
    let p = ffi::duckdb_result_error(result);
    if p.is_null() {
        None
    } else {
        Some(CStr::from_ptr(p).to_string_lossy().into_owned())
    }
}

pub(crate) unsafe extern "C" fn drop_box<T>(p: *mut c_void) {
    if !p.is_null() {
        drop(Box::from_raw(p as *mut T));
    }
}

/// Whether a DuckDB type id is an integer type (read as an i64 entid or long).
pub(crate) fn is_integer(id: ffi::duckdb_type) -> bool {
    matches!(
        id,
        ffi::DUCKDB_TYPE_DUCKDB_TYPE_BIGINT
            | ffi::DUCKDB_TYPE_DUCKDB_TYPE_INTEGER
            | ffi::DUCKDB_TYPE_DUCKDB_TYPE_SMALLINT
            | ffi::DUCKDB_TYPE_DUCKDB_TYPE_TINYINT
            | ffi::DUCKDB_TYPE_DUCKDB_TYPE_UBIGINT
            | ffi::DUCKDB_TYPE_DUCKDB_TYPE_UINTEGER
            | ffi::DUCKDB_TYPE_DUCKDB_TYPE_USMALLINT
            | ffi::DUCKDB_TYPE_DUCKDB_TYPE_UTINYINT
            | ffi::DUCKDB_TYPE_DUCKDB_TYPE_HUGEINT
    )
}

/// Parameter types of the raw table functions.
#[derive(Clone, Copy)]
pub(crate) enum Param {
    Varchar,
    Any,
    Boolean,
}

/// Registers a raw C-API table function `name` whose bind is `bind` and whose rows stream through this
/// module's [`init`] and [`function`]; `extra` becomes its extra info (dropped with the function).
///
/// # Safety
/// `con` must be a valid connection inside the entry point.
pub(crate) unsafe fn register_streaming<E>(
    con: ffi::duckdb_connection,
    name: &CStr,
    positional: &[Param],
    named: &[(&CStr, Param)],
    extra: E,
    bind: unsafe extern "C" fn(ffi::duckdb_bind_info),
) -> Result<(), String> {
    let mut tf = ffi::duckdb_create_table_function();
    ffi::duckdb_table_function_set_name(tf, name.as_ptr());
    let logical = |p: Param| {
        ffi::duckdb_create_logical_type(match p {
            Param::Varchar => ffi::DUCKDB_TYPE_DUCKDB_TYPE_VARCHAR,
            Param::Any => ffi::DUCKDB_TYPE_DUCKDB_TYPE_ANY,
            Param::Boolean => ffi::DUCKDB_TYPE_DUCKDB_TYPE_BOOLEAN,
        })
    };
    for p in positional {
        let mut t = logical(*p);
        ffi::duckdb_table_function_add_parameter(tf, t);
        ffi::duckdb_destroy_logical_type(&mut t);
    }
    for (n, p) in named {
        let mut t = logical(*p);
        ffi::duckdb_table_function_add_named_parameter(tf, n.as_ptr(), t);
        ffi::duckdb_destroy_logical_type(&mut t);
    }
    ffi::duckdb_table_function_set_extra_info(tf, Box::into_raw(Box::new(extra)) as *mut c_void, Some(drop_box::<E>));
    ffi::duckdb_table_function_set_bind(tf, Some(bind));
    ffi::duckdb_table_function_set_init(tf, Some(init));
    ffi::duckdb_table_function_set_function(tf, Some(function));
    let rc = ffi::duckdb_register_table_function(con, tf);
    ffi::duckdb_destroy_table_function(&mut tf);
    if rc != ffi::DuckDBSuccess {
        return Err(format!("could not register {}", name.to_string_lossy()));
    }
    Ok(())
}

/// The named parameters every reading function takes: `store`, `as_of`, `since`, `history`.
pub(crate) const READ_OPTIONS: [(&CStr, Param); 4] =
    [(c"store", Param::Varchar), (c"as_of", Param::Any), (c"since", Param::Any), (c"history", Param::Boolean)];

/// Reads the caller's session ([`Caller::capture`]) and [`READ_OPTIONS`]: the store (default `mentat`, resolved
/// against the caller's search path) and the time-travel options.
pub(crate) unsafe fn read_options(
    info: ffi::duckdb_bind_info,
    instance: &Instance,
) -> Result<(Caller, StoreName, QueryOptions), String> {
    let caller = Caller::capture(info);
    let store = match named(info, c"store") {
        Some(mut v) => {
            let s = value_text(v);
            ffi::duckdb_destroy_value(&mut v);
            s
        }
        None => DEFAULT_STORE.to_string(),
    };
    let history = match named(info, c"history") {
        Some(mut v) => {
            let b = ffi::duckdb_get_bool(v);
            ffi::duckdb_destroy_value(&mut v);
            b
        }
        None => false,
    };
    let opts = QueryOptions {
        as_of: time_bound(instance, info, c"as_of")?,
        since: time_bound(instance, info, c"since")?,
        history,
        ..Default::default()
    };
    let store = instance.resolve(&caller, &StoreName::parse(&store)?)?;
    Ok((caller, store, opts))
}

/// A store a query reads through a source variable: the variable, the store, its time travel and its schema.
type SourceStore = (String, StoreName, QueryOptions, Arc<planner::schema::Schema>);

/// Reads `mentat_q`'s `sources :=` ([`planner::parse_sources`]): for each source variable given a store, that store
/// (resolved like `store :=`, against the caller's search path; the query's own store when the entry names none),
/// its time travel, and its schema ([`read_schema`]: a store never written reads as the empty database).
unsafe fn read_sources(
    info: ffi::duckdb_bind_info,
    instance: &Instance,
    caller: &Caller,
    default: &StoreName,
) -> Result<Vec<SourceStore>, String> {
    let Some(mut v) = named(info, c"sources") else { return Ok(Vec::new()) };
    let text = value_text(v);
    ffi::duckdb_destroy_value(&mut v);
    let mut out = Vec::new();
    for spec in planner::parse_sources(&text).map_err(|e| e.to_string())? {
        let store = match &spec.store {
            Some(name) => {
                instance.resolve(caller, &StoreName::parse(name)?).map_err(|e| format!("source {}: {e}", spec.var))?
            }
            None => default.clone(),
        };
        let mut opts = spec.opts;
        let schema =
            read_schema_at(instance, caller, &store, &mut opts).map_err(|e| format!("source {}: {e}", spec.var))?;
        // a store named for a source must exist (a misspelt name would otherwise read as an empty database)
        if opts.empty && spec.store.is_some() {
            return Err(format!("source {}: store {store} does not exist", spec.var));
        }
        out.push((spec.var, store, opts, schema));
    }
    Ok(out)
}

/// [`read_schema`], then each instant bound of `opts` (as-of, since) turned into the tx entid it names: the last
/// transaction whose `:db/txInstant` is at or before the instant (0 when there is none), read in the caller's
/// time zone (an instant text without an offset is in the session's `TimeZone`). This is Datomic's reading of
/// `(d/as-of db #inst ...)`: a date names the last t at or before it.
///
/// Resolving once, before the statement is compiled, gives the statement constant bounds: DuckDB prunes the
/// tables' row groups by them (zone maps), the entity path serves as-of an instant, and a statement never repeats
/// the instant's subquery per data source. That repetition made an attribute-variable pattern under an instant
/// (`[?e ?a ?v]`, one source per attribute, each reading `cur_` and `hist_` with the bound twice) cost seconds at
/// 10 attributes and over a minute at 40; with the constant it answers in milliseconds (the hang the extension
/// fuzzer found, see TESTING.md). The answer is that of a consistent snapshot: the database as of the resolved tx,
/// which is the database as of the instant at the moment of resolution (a transaction committed after that has a
/// larger tx and is left out, as it would be had the query run a moment earlier).
///
/// The same statement checks the text with DuckDB's `TIMESTAMPTZ` cast: one statement where there were two (a
/// bind-time check, then the resolution).
///
/// `mentat_sql` keeps the instant's subquery (its text is run later, maybe elsewhere, and must not freeze the
/// bound). A store that does not exist yet keeps it too (the planner answers from the bootstrap datoms), its text
/// checked alone.
///
/// # Errors
/// `"as_of := '<text>' is not a tx entid or an instant ..."` for text DuckDB's cast does not read; DuckDB's errors.
pub(crate) unsafe fn read_schema_at(
    instance: &Instance,
    caller: &Caller,
    store: &StoreName,
    opts: &mut QueryOptions,
) -> Result<Arc<planner::schema::Schema>, String> {
    let schema = read_schema(instance, store, opts)?;
    if opts.empty {
        // nothing to resolve against (a store not written yet): the text is only checked
        for (name, bound) in [(c"as_of", &opts.as_of), (c"since", &opts.since)] {
            if let Some(TimeBound::Instant(text)) = bound {
                check_instant(instance, name, text)?;
            }
        }
        return Ok(schema);
    }
    // one statement checks the text (-1: DuckDB's cast does not read it) and finds the last tx at or before it
    let sql = format!(
        "SELECT CASE WHEN TRY_CAST($1::VARCHAR AS TIMESTAMPTZ) IS NULL THEN -1 ELSE coalesce((SELECT max(e) FROM {} \
         WHERE v <= TRY_CAST($1::VARCHAR AS TIMESTAMPTZ)), 0) END",
        store.current(planner::layout::DB_TX_INSTANT)
    );
    for (name, bound) in [(c"as_of", &mut opts.as_of), (c"since", &mut opts.since)] {
        let Some(TimeBound::Instant(text)) = bound else { continue };
        let mut value = ffi::duckdb_create_varchar_length(text.as_ptr() as *const _, text.len() as u64);
        let tx = query_bigints(instance, caller, &sql, &[value]);
        ffi::duckdb_destroy_value(&mut value);
        let tx = tx?.first().copied().ok_or("mentat: resolving an instant to a tx returned no row")?;
        if tx < 0 {
            return Err(not_an_instant(name, text));
        }
        *bound = Some(TimeBound::Tx(tx));
    }
    Ok(schema)
}

/// The schema cache of a store for a read, or, for a store of the default database that does not exist yet, the
/// bootstrap schema with `opts.empty` set: the read answers against the empty database, as Datomic answers a
/// new database, and creates nothing (the store is created by its first transaction). An attribute outside the
/// bootstrap schema is then an unknown attribute, as before.
pub(crate) fn read_schema(
    instance: &Instance,
    store: &StoreName,
    opts: &mut QueryOptions,
) -> Result<Arc<planner::schema::Schema>, String> {
    if let Some(open) = instance.stores.get(store) {
        return Ok(open.schema());
    }
    let conn = instance.pool.get()?;
    // in an attached catalog as in the main one (a catalog that is not attached is `open`'s error)
    let catalog_there = match &store.catalog {
        None => true,
        Some(c) => storage::store::catalog_oid(&conn, c).map_err(|e| e.to_string())?.is_some(),
    };
    if catalog_there && !storage::store::store_exists(&conn, store).map_err(|e| e.to_string())? {
        opts.empty = true;
        return Ok(Arc::new(planner::layout::bootstrap_schema()));
    }
    Ok(instance.stores.open(&conn, store, false).map_err(|e| e.to_string())?.schema())
}

/// Registers `mentat_q` and `mentat_explain`: `(query VARCHAR, inputs := VARCHAR, sources := VARCHAR,
/// store := VARCHAR, as_of := ANY, since := ANY, history := BOOLEAN)`. `sources` gives a store (with its own time
/// travel) to each source variable of `:in` other than `$` that is not a relation in the inputs. The inputs are a named parameter because DuckDB keeps only the first of
/// several table functions of one name registered through the C API, so a positional optional argument cannot
/// be expressed.
///
/// # Safety
/// `con` must be a valid connection inside the entry point.
pub unsafe fn register(con: ffi::duckdb_connection, instance: &Arc<Instance>) -> Result<(), String> {
    for (name, mode) in [(c"mentat_q", Mode::Query), (c"mentat_explain", Mode::Explain)] {
        let extra = Extra { instance: instance.clone(), mode };
        let named: Vec<(&CStr, Param)> =
            [(c"inputs", Param::Varchar), (c"sources", Param::Varchar)].into_iter().chain(READ_OPTIONS).collect();
        register_streaming(con, name, &[Param::Varchar], &named, extra, bind)?;
    }
    Ok(())
}
