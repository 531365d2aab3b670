//! The SQL surface of mentat: every function the extension registers, in one file.
//!
//! | function | kind | semantics |
//! |---|---|---|
//! | `mentat_transact(edn VARCHAR [, store := VARCHAR])` | table | one Datomic-style transaction, committed on its own |
//! | `mentat_tx(edn VARCHAR [, store VARCHAR])` | scalar | one transaction per input row, as `mentat_transact`, returning its tx; planned once in a prepared statement (see `txfn.rs`) |
//! | `mentat_import(source_sql VARCHAR [, store :=, refs :=, missing_refs :=])` | table | every row of a query becomes one entity, in one transaction (see `import.rs`) |
//! | `mentat_export(dir VARCHAR [, store :=])`, `mentat_import_store(dir VARCHAR [, store :=, snapshot :=])` | table | a whole store to Parquet files and back, same entids; exports into an earlier export's directory add a snapshot (see `import.rs`) |
//! | `mentat_attach_parquet(dir VARCHAR [, store :=, snapshot :=])` | table | an exported store (its latest or a kept snapshot) opened read-only, its datoms read from the files (see `import.rs`) |
//! | `mentat_snapshots(dir VARCHAR)`, `mentat_prune_export(dir VARCHAR [, keep :=])` | table | the snapshots an export directory keeps; dropping all but the newest (see `import.rs`) |
//! | `mentat_schema([store := VARCHAR])` | table | one row per attribute of the store's schema |
//! | `mentat_entity_index([store := VARCHAR])` | table | what the store's entity index holds, per attribute (memory included) |
//! | `mentat_q(query VARCHAR [, inputs := VARCHAR, sources := VARCHAR, store :=, as_of :=, since :=, history :=])` | table | a Datalog query's answer; `sources` maps source variables to stores (see `query.rs`) |
//! | `mentat_explain(query VARCHAR [, inputs := ...])` | table | DuckDB's plan of the statement `mentat_q` runs (see `query.rs`) |
//! | `mentat_pull(pattern VARCHAR, entity ANY [, store :=, as_of :=, since :=, history :=])` | table | one row `(e BIGINT, pull STRUCT)`: Datomic's pull of an entid, ident or lookup ref (see `pull.rs`) |
//! | `mentat_pull_many(pattern VARCHAR, entities LIST [, store :=, as_of :=, since :=])` | table | one `(e, pull)` row per list element, in order (see `pull.rs`) |
//! | `mentat_datoms(index VARCHAR [, e :=, a :=, v :=, store :=, as_of :=, since :=, history :=])` | table | Datomic's `d/datoms`: the EAVT, AEVT, AVET, VAET index views, rows `(e, a, v, tx, added)` in index order (see `datoms.rs`) |
//! | `mentat_with(edn VARCHAR, query VARCHAR [, inputs := VARCHAR, store := VARCHAR])` | table | Datomic's `d/with`: the query's answer as if the transaction had been applied, nothing written |
//! | `mentat_sql(query VARCHAR [, inputs VARCHAR [, store VARCHAR]])` | scalar | the statement `mentat_q` runs (see `sql.rs`) |

use crate::session::Caller;
use crate::Instance;
use duckdb::core::{DataChunkHandle, Inserter, LogicalTypeHandle, LogicalTypeId};
use duckdb::vtab::{BindInfo, InitInfo, TableFunctionInfo, VTab};
use duckdb::Connection;
use planner::layout::{StoreName, DEFAULT_STORE};
use std::error::Error;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

type Res<T> = Result<T, Box<dyn Error>>;

/// Registers every mentat SQL function on `con`, sharing `instance`.
pub fn register(con: &Connection, instance: &Arc<Instance>) -> Res<()> {
    con.register_table_function_with_extra_info::<Transact, _>("mentat_transact", instance)?;
    con.register_table_function_with_extra_info::<TransactMany, _>("mentat_transact_many", instance)?;
    con.register_table_function_with_extra_info::<SchemaFn, _>("mentat_schema", instance)?;
    con.register_table_function_with_extra_info::<EntityIndexFn, _>("mentat_entity_index", instance)?;
    con.register_table_function_with_extra_info::<SyncFn, _>("mentat_sync", instance)?;
    crate::import::register(con, instance)?;
    con.register_table_function_with_extra_info::<With, _>("mentat_with", instance)?;
    Ok(())
}

pub fn instance_of(ptr: *const Arc<Instance>) -> Res<Arc<Instance>> {
    // SAFETY: DuckDB stores the Arc we registered as extra info for the lifetime of the function.
    unsafe { ptr.as_ref() }.cloned().ok_or_else(|| "mentat: missing extension state".into())
}

fn store_param(bind: &BindInfo) -> Res<StoreName> {
    let name = bind
        .get_named_parameter("store")
        .filter(|v| !v.is_null())
        .map(|v| v.to_string())
        .unwrap_or_else(|| DEFAULT_STORE.to_string());
    Ok(StoreName::parse(&name)?)
}

// duckdb-rs's `BindInfo` is its bind info handle and nothing else; it does not hand the handle out.
const _: () = assert!(std::mem::size_of::<BindInfo>() == std::mem::size_of::<duckdb::ffi::duckdb_bind_info>());

/// The caller's session ([`Caller::capture`]) and the `store :=` parameter resolved against it.
pub fn caller_and_store(bind: &BindInfo, instance: &Instance) -> Res<(Caller, StoreName)> {
    // SAFETY: `BindInfo` holds exactly the bind info handle DuckDB passed to the running bind (size checked above).
    let caller = unsafe { Caller::capture(std::mem::transmute_copy::<BindInfo, duckdb::ffi::duckdb_bind_info>(bind)) };
    let store = instance.resolve(&caller, &store_param(bind)?)?;
    Ok((caller, store))
}

/// The hook of a caller's write ([`storage::interrupt::scope_with`]): a transaction's beginning reopens the
/// caller's interrupt, its commit point holds the interrupt back from the writing connection (`hold(true)`) and
/// tells the caller it is committing ([`Caller::commit_point`]: false when it was interrupted first), and once
/// committed the forwarding resumes (`hold(false)`).
fn commit_hook(
    caller: Caller,
    hold: impl Fn(bool) + Send + Sync + 'static,
) -> impl Fn(storage::interrupt::Point) -> bool + Send + Sync + 'static {
    move |p| match p {
        storage::interrupt::Point::Begin => {
            caller.reopen();
            true
        }
        storage::interrupt::Point::Commit => {
            hold(true);
            caller.commit_point()
        }
        storage::interrupt::Point::Committed => {
            hold(false);
            true
        }
    }
}

/// Runs one write of a call on a connection that has taken on the caller's session: the caller's interrupt stops
/// it, and rolls it back when it comes before the commit point ([`storage::interrupt::committing`],
/// [`Caller::commit_point`]); it is held back from the connection while a COMMIT runs; once `write` has committed,
/// an interrupt that came too late is withdrawn, and where DuckDB allows it refused for the rest of the statement,
/// so that the caller is told of the write ([`Caller::committed`]). A call that reports an error has written
/// nothing.
pub fn write_for<T>(
    instance: &Instance,
    caller: &Caller,
    write: impl FnOnce(&duckdb::Connection) -> storage::Result<T>,
) -> Res<T> {
    let conn = instance.pool.get_for(caller)?;
    let hook = commit_hook(caller.clone(), conn.holder());
    written(caller, storage::interrupt::scope_with(caller.check(), hook, || write(&conn)))
}

/// What a caller's write reports once it has run: committed, the caller is told so ([`Caller::committed`]);
/// failed after the caller's interrupt, [`storage::StorageError::Interrupted`]; else its own error.
fn written<T>(caller: &Caller, out: storage::Result<T>) -> Res<T> {
    match out {
        Ok(out) => {
            caller.committed();
            Ok(out)
        }
        Err(_) if caller.interrupted() => Err(storage::StorageError::Interrupted.into()),
        Err(e) => Err(e.into()),
    }
}

/// [`write_for`] on the store `name`, opened (created first when `create`, as `mentat_transact` does for a store
/// that does not exist yet) on the write's own connection. Afterwards the indexer is told of a logged write, and the
/// attributes the transactor asked to have in the entity index are read in, in the background.
pub fn write_store<T>(
    instance: &Arc<Instance>,
    caller: &Caller,
    name: &StoreName,
    create: bool,
    write: impl FnOnce(&duckdb::Connection, &storage::store::Store) -> storage::Result<T>,
) -> Res<T> {
    write_for(instance, caller, |conn| {
        let store = instance.stores.open(conn, name, create)?;
        let out = write(conn, &store);
        after_write(instance, &store);
        out
    })
}

/// After a write to `store`: the indexer is told of a logged write, and the attributes the transactor asked to have
/// in the entity index (so that the next small writes on them are logged) are read in, in the background.
fn after_write(instance: &Arc<Instance>, store: &Arc<storage::store::Store>) {
    instance.indexer.poke(store);
    let wanted = store.index.take_wanted();
    if !wanted.is_empty() {
        crate::entity::read_in_background(instance, store, &wanted);
    }
}

/// Runs one EDN transaction on the named store (created when missing) for `caller`: through the store's group
/// commit (`storage::group::transact`, several callers' transactions applied in one DuckDB transaction with one
/// commit) unless `MENTAT_GROUP_COMMIT=0` chose the one-at-a-time transactor. Shape: the transaction report (tx
/// entid, `:db/txInstant`, datom count, tempids), returned once the commit holding it is durable. Errors: the
/// transactor's (malformed EDN, unknown attribute, wrong value type, unique conflict, cas mismatch), with nothing
/// of the transaction left behind. Semantics: Datomic's `transact`, serially equivalent in arrival order.
pub fn transact_one(
    instance: &Arc<Instance>,
    caller: &Caller,
    name: &StoreName,
    edn: &str,
) -> Res<storage::transactor::TxReport> {
    if instance.group_commit {
        if let Some(store) = instance.stores.get(name) {
            return queued_write(instance, caller, &store, edn);
        }
    }
    write_store(instance, caller, name, true, |conn, store| {
        if instance.group_commit {
            storage::group::transact(conn, store, edn)
        } else {
            storage::transactor::transact(conn, store, edn)
        }
    })
}

/// [`transact_one`] through the group commit of a store already open: a connection is borrowed (and takes on the
/// caller's session) only if this call leads a group ([`storage::group::transact_with`]); a call whose
/// transaction another leader writes waits without one. The caller's commit point and interrupt are kept as
/// [`write_for`] keeps them: the hook holds back the forwarding of the caller's interrupt to the connection it
/// leads on, when it leads, while that connection commits.
fn queued_write(
    instance: &Arc<Instance>,
    caller: &Caller,
    store: &Arc<storage::store::Store>,
    edn: &str,
) -> Res<storage::transactor::TxReport> {
    type Holder = Box<dyn Fn(bool) + Send + Sync>;
    let holder: Arc<std::sync::Mutex<Option<Holder>>> = Arc::default();
    let held = holder.clone();
    let hook = commit_hook(caller.clone(), move |on: bool| {
        if let Some(h) = held.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            h(on)
        }
    });
    let connect = || {
        let conn = instance.pool.get_for(caller).map_err(storage::StorageError::Store)?;
        *holder.lock().unwrap_or_else(|p| p.into_inner()) = Some(Box::new(conn.holder()));
        Ok(conn)
    };
    let out =
        storage::interrupt::scope_with(caller.check(), hook, || storage::group::transact_with(store, edn, connect));
    after_write(instance, store);
    written(caller, out)
}

/// The store the call names (`store :=`, resolved against the caller's session), which must exist.
fn existing_store(bind: &BindInfo) -> Res<Arc<storage::store::Store>> {
    let instance = instance_of(bind.get_extra_info::<Arc<Instance>>())?;
    let (_, name) = caller_and_store(bind, &instance)?;
    instance.settle()?;
    let conn = instance.pool.get()?;
    Ok(instance.stores.open(&conn, &name, false)?)
}

/// Writes `x` at row `i` of a flat vector whose physical type is `T`.
pub(crate) fn put<T: Copy>(v: &mut duckdb::core::FlatVector<'_>, i: usize, x: T) {
    assert!(i < v.capacity(), "row {i} past the vector's capacity");
    // SAFETY: callers pass the Rust type matching the column's DuckDB type (i64 for BIGINT and TIMESTAMPTZ,
    // bool for BOOLEAN); the index is checked above.
    unsafe { v.as_mut_slice::<T>()[i] = x };
}

fn varchar() -> LogicalTypeHandle {
    LogicalTypeHandle::from(LogicalTypeId::Varchar)
}
fn bigint() -> LogicalTypeHandle {
    LogicalTypeHandle::from(LogicalTypeId::Bigint)
}
fn boolean() -> LogicalTypeHandle {
    LogicalTypeHandle::from(LogicalTypeId::Boolean)
}

/// `mentat_transact(edn VARCHAR [, store := 'schema' | 'catalog.schema'])`
///
/// Runs one transaction of EDN tx data (Datomic's `transact`: list and map forms, tempids, lookup refs,
/// upserts, `:db/retractEntity`, `:db/cas`, schema installation) against the store, creating the store on first
/// use. The transaction is committed on its own, on mentat's own connection, as Datomic's `transact` is: it is
/// durable when the call returns and is not undone by a ROLLBACK of the caller's transaction. On error nothing
/// is written and the error names the offending form.
///
/// Returns one row: `tx BIGINT` (the transaction's entid), `tx_instant TIMESTAMPTZ`, `datoms BIGINT` (datoms
/// asserted plus retracted, with the `:db/txInstant` datom), `tempids MAP(VARCHAR, BIGINT)`.
pub struct Transact;

pub struct TransactBind {
    instance: Arc<Instance>,
    edn: String,
    store: StoreName,
    caller: Caller,
    /// The thread that bound the call: the one that sent the statement ([`OneCall`]).
    thread: std::thread::ThreadId,
}

/// Init data of a table function that produces one row: the row is written on the first call only.
pub struct Once {
    done: AtomicBool,
}

impl Once {
    pub fn new() -> Once {
        Once { done: AtomicBool::new(false) }
    }

    /// True on the first call. On a later call it empties `output` (the one row was already produced).
    pub fn first(&self, output: &mut DataChunkHandle) -> bool {
        if self.done.swap(true, Ordering::SeqCst) {
            output.set_len(0);
            false
        } else {
            true
        }
    }
}

/// Init data of `mentat_transact`: its one row comes from one blocking call (the transaction waits for its group's
/// COMMIT), and that call should run on the thread that sent the statement.
///
/// DuckDB runs a table function's output calls in pipeline tasks, and its own worker threads take tasks from every
/// connection's queue, so the call can land on a worker while the sending thread busy-waits in DuckDB's execution
/// loop until it ends (`PendingQueryResult::ExecuteInternal` spins while it has no task of its own: duckdb#22178).
/// A worker took 3 of 5 sequential calls on an idle machine here, and under 64 native writers the spinning callers
/// cost a quarter of the throughput (storage/README.md, "Who runs a transaction's call"). So the call is offered to
/// two tasks (`max_threads` 2): the first task to call claims the work and writes the row; the other returns no rows
/// at once, except on the sending thread (the one that ran the bind), which sleeps until the claimed call has ended
/// instead of spinning. DuckDB makes two tasks only where its result collector may run in parallel: with
/// `preserve_insertion_order` off (the option DuckDB documents for large loads); otherwise the plan has one task and
/// this is [`Once`].
pub struct OneCall {
    /// 0: not claimed; 1: a task runs the call; 2: the call has ended.
    state: std::sync::Mutex<u8>,
    ended: std::sync::Condvar,
}

/// The claim on a [`OneCall`]'s work; dropping it (also when the call fails or panics) marks the call ended and
/// wakes the sending thread if it waits.
pub struct Claimed<'a>(&'a OneCall);

impl Drop for Claimed<'_> {
    fn drop(&mut self) {
        *self.0.state.lock().unwrap_or_else(|p| p.into_inner()) = 2;
        self.0.ended.notify_all();
    }
}

impl OneCall {
    pub fn new(info: &InitInfo) -> OneCall {
        info.set_max_threads(2);
        OneCall { state: std::sync::Mutex::new(0), ended: std::sync::Condvar::new() }
    }

    /// The claim when this is the first output call of any task: the caller then does the work and writes the row
    /// while holding it. Otherwise `output` is emptied and None returned, after waiting for the claimed call to end
    /// when this thread is `sender` (the bind's thread), so that it sleeps rather than spins in DuckDB's loop.
    pub fn claim(&self, output: &mut DataChunkHandle, sender: std::thread::ThreadId) -> Option<Claimed<'_>> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if *state == 0 {
            *state = 1;
            return Some(Claimed(self));
        }
        if std::thread::current().id() == sender {
            while *state == 1 {
                state = self.ended.wait(state).unwrap_or_else(|p| p.into_inner());
            }
        }
        output.set_len(0);
        None
    }
}

/// Writes one row of i64 values (BIGINT or TIMESTAMPTZ columns, in order) and sets the output to one row.
pub fn put_row(output: &mut DataChunkHandle, values: &[i64]) {
    for (i, x) in values.iter().enumerate() {
        put::<i64>(&mut output.flat_vector(i), 0, *x);
    }
    output.set_len(1);
}

impl VTab for Transact {
    type InitData = OneCall;
    type BindData = TransactBind;

    fn bind(bind: &BindInfo) -> Res<TransactBind> {
        report_columns(bind);
        let edn = bind.get_parameter(0);
        if edn.is_null() {
            return Err("mentat_transact: the transaction is NULL".into());
        }
        let edn = edn.to_string();
        crate::nesting::check(&edn, "mentat_transact: the transaction")?;
        let instance = instance_of(bind.get_extra_info::<Arc<Instance>>())?;
        let (caller, store) = caller_and_store(bind, &instance)?;
        Ok(TransactBind { instance, edn, store, caller, thread: std::thread::current().id() })
    }

    fn init(info: &InitInfo) -> Res<OneCall> {
        Ok(OneCall::new(info))
    }

    fn func(func: &TableFunctionInfo<Self>, output: &mut DataChunkHandle) -> Res<()> {
        let b = func.get_bind_data();
        let Some(_claimed) = func.get_init_data().claim(output, b.thread) else {
            return Ok(());
        };
        let report = transact_one(&b.instance, &b.caller, &b.store, &b.edn)?;
        put_reports(output, &[Ok(report)]);
        Ok(())
    }

    fn parameters() -> Option<Vec<LogicalTypeHandle>> {
        Some(vec![varchar()])
    }

    fn named_parameters() -> Option<Vec<(String, LogicalTypeHandle)>> {
        Some(vec![("store".to_string(), varchar())])
    }
}

/// Declares a transaction report's columns: `tx BIGINT, tx_instant TIMESTAMPTZ, datoms BIGINT, tempids MAP(VARCHAR,
/// BIGINT)`.
fn report_columns(bind: &BindInfo) {
    bind.add_result_column("tx", bigint());
    bind.add_result_column("tx_instant", LogicalTypeHandle::from(LogicalTypeId::TimestampTZ));
    bind.add_result_column("datoms", bigint());
    bind.add_result_column("tempids", LogicalTypeHandle::map(&varchar(), &bigint()));
}

/// Writes transaction reports as rows `tx, tx_instant, datoms, tempids[, error]` from row 0 (at most one vector);
/// a failed transaction is a row of NULLs with its error in the fifth column (which `mentat_transact` lacks).
fn put_reports(output: &mut DataChunkHandle, reports: &[Result<storage::transactor::TxReport, String>]) {
    let tempids: usize = reports.iter().map(|r| r.as_ref().map_or(0, |r| r.tempids.len())).sum();
    let mut map = output.list_vector(3);
    let entries = map.struct_child(tempids.max(1));
    let keys = entries.child(0, tempids.max(1));
    let mut values = entries.child(1, tempids.max(1));
    let mut offset = 0;
    for (row, r) in reports.iter().enumerate() {
        match r {
            Ok(report) => {
                put::<i64>(&mut output.flat_vector(0), row, report.tx);
                put::<i64>(&mut output.flat_vector(1), row, report.tx_instant);
                put::<i64>(&mut output.flat_vector(2), row, report.datoms);
                for (i, (k, e)) in report.tempids.iter().enumerate() {
                    keys.insert(offset + i, k.as_str());
                    put::<i64>(&mut values, offset + i, *e);
                }
                map.set_entry(row, offset, report.tempids.len());
                offset += report.tempids.len();
                if output.num_columns() > 4 {
                    output.flat_vector(4).set_null(row);
                }
            }
            Err(e) => {
                for c in 0..3 {
                    output.flat_vector(c).set_null(row);
                }
                map.set_entry(row, offset, 0);
                map.set_null(row);
                output.flat_vector(4).insert(row, e.as_str());
            }
        }
    }
    map.set_len(offset);
    output.set_len(reports.len());
}

/// `mentat_transact_many(txs VARCHAR[] [, store := VARCHAR])`: runs each element of `txs` (EDN tx data, as for
/// `mentat_transact`) as its own transaction, in list order, all written as one group with one COMMIT
/// (`storage::group::transact_many`), and returns one row per element in order: `tx BIGINT, tx_instant
/// TIMESTAMPTZ, datoms BIGINT, tempids MAP(VARCHAR, BIGINT), error VARCHAR`. Semantics are those of calling
/// `mentat_transact` on each element one after another (Datomic's serial transactions): each has its own tx and
/// tempids and sees the ones before it. An element that fails (malformed EDN, unknown attribute, unique conflict,
/// cas mismatch, NULL) is a row with NULLs and its `error`, and writes nothing; the others are written. Rows come
/// back after the COMMIT, so every reported tx is durable. Errors (no rows): the store cannot be written, the
/// COMMIT failed, or the call was interrupted before it.
pub struct TransactMany;

pub struct TransactManyBind {
    instance: Arc<Instance>,
    txs: Vec<Option<String>>,
    store: StoreName,
    caller: Caller,
}

/// The reports of a `mentat_transact_many` call, computed on its first output call and paged out.
pub struct ManyReports {
    reports: std::sync::Mutex<Option<Vec<Result<storage::transactor::TxReport, String>>>>,
    cursor: Cursor,
}

impl VTab for TransactMany {
    type InitData = ManyReports;
    type BindData = TransactManyBind;

    fn bind(bind: &BindInfo) -> Res<TransactManyBind> {
        report_columns(bind);
        bind.add_result_column("error", varchar());
        let list = bind.get_parameter(0);
        if list.is_null() {
            return Err("mentat_transact_many: the list of transactions is NULL".into());
        }
        let items = list.to_list().ok_or("mentat_transact_many: the transactions are a VARCHAR[] of EDN tx data")?;
        let txs: Vec<Option<String>> = items.iter().map(|v| (!v.is_null()).then(|| v.to_string())).collect();
        for (i, tx) in txs.iter().enumerate().filter_map(|(i, t)| t.as_ref().map(|t| (i, t))) {
            crate::nesting::check(tx, &format!("mentat_transact_many: transaction {}", i + 1))?;
        }
        let instance = instance_of(bind.get_extra_info::<Arc<Instance>>())?;
        let (caller, store) = caller_and_store(bind, &instance)?;
        Ok(TransactManyBind { instance, txs, store, caller })
    }

    fn init(_: &InitInfo) -> Res<ManyReports> {
        Ok(ManyReports { reports: std::sync::Mutex::new(None), cursor: Cursor { next: Default::default() } })
    }

    fn func(func: &TableFunctionInfo<Self>, output: &mut DataChunkHandle) -> Res<()> {
        let (b, state) = (func.get_bind_data(), func.get_init_data());
        let mut reports = state.reports.lock().unwrap_or_else(|p| p.into_inner());
        if reports.is_none() {
            let texts: Vec<&str> = b.txs.iter().flatten().map(String::as_str).collect();
            let mut done = write_store(&b.instance, &b.caller, &b.store, true, |conn, store| {
                let out = storage::group::transact_many(conn, store, &texts);
                // interrupted before the COMMIT: the call fails as a whole (nothing was written)
                if !out.is_empty() && out.iter().all(|r| matches!(r, Err(storage::StorageError::Interrupted))) {
                    return Err(storage::StorageError::Interrupted);
                }
                Ok(out)
            })?
            .into_iter();
            let all = b.txs.iter().map(|t| match t {
                Some(_) => done.next().map_or_else(|| Err("no report".to_string()), |r| r.map_err(|e| e.to_string())),
                None => Err("mentat_transact_many: the transaction is NULL".to_string()),
            });
            *reports = Some(all.collect());
        }
        let all = reports.as_ref().map_or(&[][..], |r| r.as_slice());
        let page = state.cursor.page(all.len());
        put_reports(output, &all[page]);
        Ok(())
    }

    fn parameters() -> Option<Vec<LogicalTypeHandle>> {
        Some(vec![LogicalTypeHandle::list(&varchar())])
    }

    fn named_parameters() -> Option<Vec<(String, LogicalTypeHandle)>> {
        Some(vec![("store".to_string(), varchar())])
    }
}

/// `mentat_schema([store := ...])`: one row per attribute, ordered by entid: `ident VARCHAR`, `entid BIGINT`,
/// `value_type VARCHAR` (`:db.type/string`, ...), `cardinality VARCHAR` (`:db.cardinality/one|many`), `unique
/// VARCHAR` (`:db.unique/value|identity` or NULL), `index BOOLEAN`, `fulltext BOOLEAN`, `component BOOLEAN`,
/// `doc VARCHAR`. Reads the in-memory schema cache (no query); a store that was never written lists the bootstrap
/// attributes of the empty database, as queries against it see them.
pub struct SchemaFn;

pub struct SchemaRows {
    rows: Vec<planner::schema::Attribute>,
}

pub struct Cursor {
    next: std::sync::atomic::AtomicUsize,
}

impl Cursor {
    /// The next page of `len` rows, at most one vector (2048): the range to write now. The cursor moves past it.
    pub fn page(&self, len: usize) -> std::ops::Range<usize> {
        let start = self.next.load(Ordering::SeqCst).min(len);
        let n = (len - start).min(2048);
        self.next.store(start + n, Ordering::SeqCst);
        start..start + n
    }
}

/// `mentat_sync([store := ...])`: applies the store's transaction log to its tables now (`storage::txlog`) and
/// returns one row, `applied BIGINT`: how many log rows it applied (0 when the log was empty). Mentat's own
/// functions never need it (every read through them sees every acknowledged transaction); it is for SQL that reads
/// the store's tables directly, and before the database file is opened read-only by another process. Without it
/// the tables catch up by themselves once no transaction has been logged for `MENTAT_LOG_IDLE_MS` (20 ms).
/// Datomic's `sync`: afterwards the tables include every transaction acknowledged before the call. Errors if the
/// store does not exist.
pub struct SyncFn;

impl VTab for SyncFn {
    type InitData = Once;
    type BindData = i64;

    fn bind(bind: &BindInfo) -> Res<i64> {
        bind.add_result_column("applied", bigint());
        let instance = instance_of(bind.get_extra_info::<Arc<Instance>>())?;
        let (caller, name) = caller_and_store(bind, &instance)?;
        let conn = instance.pool.get_for(&caller)?;
        let store = instance.stores.open(&conn, &name, false)?;
        Ok(storage::txlog::settle(&conn, &store)? as i64)
    }

    fn init(_: &InitInfo) -> Res<Once> {
        Ok(Once::new())
    }

    fn func(func: &TableFunctionInfo<Self>, output: &mut DataChunkHandle) -> Res<()> {
        if func.get_init_data().first(output) {
            put_row(output, &[*func.get_bind_data()]);
        }
        Ok(())
    }

    fn named_parameters() -> Option<Vec<(String, LogicalTypeHandle)>> {
        Some(vec![("store".to_string(), varchar())])
    }
}

/// `mentat_entity_index([store := ...])`: what the store's entity index holds (`storage::eindex`), one row per
/// attribute read into it or refused, by entid: `ident VARCHAR`, `datoms BIGINT` (current datoms), `history
/// BIGINT` (retracted assertions kept for as-of reads), `novelty BIGINT` (entries not yet merged into the sorted
/// base), `bytes BIGINT` (memory held, an estimate of arrays, strings and orders), `state VARCHAR` (`indexed`,
/// `reading` (being read in the background; its queries take the SQL path meanwhile), or `refused`: past the memory
/// budget `MENTAT_ENTITY_INDEX_MB` or of a type the index does not hold). No rows for a
/// store no entity-shaped query and no group of writes has read yet (the transactor reads an attribute in when a
/// group looks up 16 or more of its datoms, `storage::pending::INDEX_AT`). Errors if the store does not exist.
pub struct EntityIndexFn;

pub struct IndexRows {
    rows: Vec<(String, storage::eindex::AttrStats)>,
}

impl VTab for EntityIndexFn {
    type InitData = Cursor;
    type BindData = IndexRows;

    fn bind(bind: &BindInfo) -> Res<IndexRows> {
        for (name, t) in [
            ("ident", varchar()),
            ("datoms", bigint()),
            ("history", bigint()),
            ("novelty", bigint()),
            ("bytes", bigint()),
            ("state", varchar()),
        ] {
            bind.add_result_column(name, t);
        }
        let store = existing_store(bind)?;
        let schema = store.schema();
        let rows =
            store.index.stats().into_iter().map(|s| (schema.ident(s.attr).unwrap_or("?").to_string(), s)).collect();
        Ok(IndexRows { rows })
    }

    fn init(_: &InitInfo) -> Res<Cursor> {
        Ok(Cursor { next: Default::default() })
    }

    fn func(func: &TableFunctionInfo<Self>, output: &mut DataChunkHandle) -> Res<()> {
        let rows = &func.get_bind_data().rows;
        let page = func.get_init_data().page(rows.len());
        let n = page.len();
        for (i, (ident, s)) in rows[page].iter().enumerate() {
            output.flat_vector(0).insert(i, ident.as_str());
            for (c, x) in [(1, s.datoms), (2, s.history), (3, s.novelty), (4, s.bytes)] {
                put::<i64>(&mut output.flat_vector(c), i, x as i64);
            }
            let state = if s.refused {
                "refused"
            } else if s.reading {
                "reading"
            } else {
                "indexed"
            };
            output.flat_vector(5).insert(i, state);
        }
        output.set_len(n);
        Ok(())
    }

    fn named_parameters() -> Option<Vec<(String, LogicalTypeHandle)>> {
        Some(vec![("store".to_string(), varchar())])
    }
}

impl VTab for SchemaFn {
    type InitData = Cursor;
    type BindData = SchemaRows;

    fn bind(bind: &BindInfo) -> Res<SchemaRows> {
        for (name, t) in [
            ("ident", varchar()),
            ("entid", bigint()),
            ("value_type", varchar()),
            ("cardinality", varchar()),
            ("unique", varchar()),
            ("index", boolean()),
            ("fulltext", boolean()),
            ("component", boolean()),
            ("doc", varchar()),
        ] {
            bind.add_result_column(name, t);
        }
        // a store that was never written has the bootstrap schema, as the queries against it see it
        let instance = instance_of(bind.get_extra_info::<Arc<Instance>>())?;
        let (_, name) = caller_and_store(bind, &instance)?;
        let schema = crate::query::read_schema(&instance, &name, &mut Default::default())?;
        Ok(SchemaRows { rows: schema.attributes().into_iter().cloned().collect() })
    }

    fn init(_: &InitInfo) -> Res<Cursor> {
        Ok(Cursor { next: Default::default() })
    }

    fn func(func: &TableFunctionInfo<Self>, output: &mut DataChunkHandle) -> Res<()> {
        let rows = &func.get_bind_data().rows;
        let page = func.get_init_data().page(rows.len());
        let n = page.len();
        for (i, a) in rows[page].iter().enumerate() {
            output.flat_vector(0).insert(i, a.ident.as_str());
            put::<i64>(&mut output.flat_vector(1), i, a.entid);
            output.flat_vector(2).insert(i, a.value_type.ident());
            output.flat_vector(3).insert(i, if a.many { ":db.cardinality/many" } else { ":db.cardinality/one" });
            match a.unique {
                Some(planner::schema::Unique::Value) => output.flat_vector(4).insert(i, ":db.unique/value"),
                Some(planner::schema::Unique::Identity) => output.flat_vector(4).insert(i, ":db.unique/identity"),
                None => output.flat_vector(4).set_null(i),
            }
            put::<bool>(&mut output.flat_vector(5), i, a.index);
            put::<bool>(&mut output.flat_vector(6), i, a.fulltext);
            put::<bool>(&mut output.flat_vector(7), i, a.component);
            match &a.doc {
                Some(d) => output.flat_vector(8).insert(i, d.as_str()),
                None => output.flat_vector(8).set_null(i),
            }
        }
        output.set_len(n);
        Ok(())
    }

    fn named_parameters() -> Option<Vec<(String, LogicalTypeHandle)>> {
        Some(vec![("store".to_string(), varchar())])
    }
}

/// `mentat_with(edn VARCHAR, query VARCHAR [, inputs := VARCHAR, store := VARCHAR])`: Datomic's `(q query (:db-after
/// (d/with db tx-data)) inputs...)`. The answer of the Datalog query, with `mentat_q`'s columns and types (pulls
/// included), as if the transaction had been applied, with nothing written.
///
/// On one of mentat's connections: the transaction runs as `mentat_transact` would run it (same checks, same
/// errors), inside a DuckDB transaction that is never committed; the query is compiled against the schema after
/// the transaction (so it may name attributes the transaction installs) and run on the same connection inside
/// that transaction, its answer read whole into Arrow record batches; then the transaction is rolled back. The
/// store's tables, its cached schema and partition marks and its unique-value cache are as before. The store's
/// writer lock is held meanwhile (real transactions of the store wait for it). The answer is materialized, so
/// it suits answers that fit in memory. Time-travel options are not taken (a with-database is "now").
pub struct With;

pub struct WithBind {
    batches: Vec<duckdb::arrow::record_batch::RecordBatch>,
}

pub struct WithCursor {
    /// (batch, row offset in it)
    at: std::sync::Mutex<(usize, usize)>,
}

impl VTab for With {
    type InitData = WithCursor;
    type BindData = WithBind;

    fn bind(bind: &BindInfo) -> Res<WithBind> {
        let (edn, query) = (bind.get_parameter(0), bind.get_parameter(1));
        if edn.is_null() || query.is_null() {
            return Err("mentat_with: the transaction and the query must not be NULL".into());
        }
        let (edn, query) = (edn.to_string(), query.to_string());
        let inputs = bind.get_named_parameter("inputs").filter(|v| !v.is_null()).map(|v| v.to_string());
        crate::nesting::check(&edn, "mentat_with: the transaction")?;
        crate::nesting::check(&query, "mentat_with: the query")?;
        if let Some(inputs) = &inputs {
            crate::nesting::check(inputs, "mentat_with: the inputs")?;
        }
        let instance = instance_of(bind.get_extra_info::<Arc<Instance>>())?;
        let (caller, name) = caller_and_store(bind, &instance)?;
        let conn = instance.pool.get_for(&caller)?;
        let store = instance.stores.open(&conn, &name, false)?;
        let mut columns = Vec::new();
        let batches = storage::transactor::transact_speculative(&conn, &store, &edn, |_, state| {
            let opts = planner::QueryOptions::default();
            let mut compiled = match planner::compile_query(&query, inputs.as_deref(), &state.schema, &name, &opts) {
                Ok(c) => c,
                Err(e) => return Ok(Err(e)),
            };
            // a pull's `*` is typed from the attributes the answer's entities hold, as in mentat_q
            if let Some(probe) = compiled.held_sql.take() {
                let held: Vec<i64> =
                    conn.prepare(&probe)?.query_map([], |r| r.get(0))?.collect::<Result<_, duckdb::Error>>()?;
                let schema = &state.schema;
                compiled =
                    match planner::compile_query_held(&query, inputs.as_deref(), schema, &name, &opts, Some(&held)) {
                        Ok(c) => c,
                        Err(e) => return Ok(Err(e)),
                    };
            }
            let mut stmt = conn.prepare(&compiled.sql)?;
            let arrow = stmt.query_arrow([])?;
            let schema = arrow.get_schema();
            let batches: Vec<_> = arrow.collect();
            for (c, f) in compiled.columns.iter().zip(schema.fields()) {
                columns.push((c.name.clone(), f.clone()));
            }
            Ok(Ok(batches))
        })??;
        for (name, field) in &columns {
            bind.add_result_column(name, duckdb::vtab::arrow::to_duckdb_logical_type_for_field(field)?);
        }
        Ok(WithBind { batches })
    }

    fn init(_: &InitInfo) -> Res<WithCursor> {
        Ok(WithCursor { at: std::sync::Mutex::new((0, 0)) })
    }

    fn func(func: &TableFunctionInfo<Self>, output: &mut DataChunkHandle) -> Res<()> {
        let batches = &func.get_bind_data().batches;
        let mut at = func.get_init_data().at.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: duckdb_vector_size only reads a compile-time constant of the loaded DuckDB.
        let vector = unsafe { duckdb::ffi::duckdb_vector_size() } as usize;
        while at.0 < batches.len() && at.1 >= batches[at.0].num_rows() {
            *at = (at.0 + 1, 0);
        }
        let Some(batch) = batches.get(at.0) else {
            output.set_len(0);
            return Ok(());
        };
        let len = (batch.num_rows() - at.1).min(vector);
        duckdb::vtab::arrow::record_batch_to_duckdb_data_chunk(&batch.slice(at.1, len), output)?;
        output.set_len(len);
        at.1 += len;
        Ok(())
    }

    fn parameters() -> Option<Vec<LogicalTypeHandle>> {
        Some(vec![varchar(), varchar()])
    }

    fn named_parameters() -> Option<Vec<(String, LogicalTypeHandle)>> {
        Some(vec![("inputs".to_string(), varchar()), ("store".to_string(), varchar())])
    }
}
