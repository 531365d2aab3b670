//! The transaction log: where a group commit's datoms go when writing them into the attribute tables would cost
//! more than the transaction itself (Datomic's log and its later indexing job, in small).
//!
//! Every DuckDB table a transaction touches costs 0.5 to 1.5 ms on this machine however few rows it moves (see the
//! README's statement costs), and a single-datom update touches four (`cur_` delete and insert, `hist_`, the
//! `:db/txInstant` datom) plus, in a group of many, a `DELETE ... USING` that scans the whole `cur_` table (20 to
//! 30 ms at scale m). So a group whose datoms the entity index can answer for writes them instead as rows of one
//! table, `log` (the staging shape: attribute, entity, value in its staging column, added, tx, and the tx that
//! retracts), one append and the COMMIT; the log is *applied* to the attribute tables later, set-based, many
//! transactions at once:
//!
//! - **What may be logged**: a group that wrote nothing to the tables itself (no schema change, no
//!   `:db/retractEntity`), all of whose attributes the entity index holds (so the transactor's reads of them never
//!   go to the tables) and none of which is fulltext or a schema attribute; `:db/txInstant` datoms go with them.
//!   Anything else is written to the tables as before, after the log is applied when it holds one of the group's
//!   attributes (so that per attribute, datoms reach the tables in tx order).
//! - **Applied**: per logged attribute, the logged retractions leave `cur_` (matched on entity, value and the tx
//!   that asserted them) and enter `hist_`; the logged assertions not retracted later in the log enter `cur_`;
//!   the log is emptied. One DuckDB transaction, so a crash leaves the log or its result, never half of each.
//! - **When**: in the background once no transaction has been logged for a while ([`Settings::idle`], [`Indexer`]); before any
//!   read of the tables (every SQL query, export, import, fulltext search and index build settles the log first,
//!   through [`settle`]; entity-path reads answer from the index and need not); inside a group, before the
//!   transactor reads an attribute from the tables that the log holds; when the log would pass [`Settings::max_rows`]; and
//!   when a store is opened with a non-empty log (a writer that stopped before applying it). A database opened
//!   read-only whose log holds datoms cannot apply them: its stores refuse to open, with an error that says so.
//!
//! The tables are therefore always the state as of some transaction (a prefix of the log's order), and every
//! mentat read sees every acknowledged transaction. `MENTAT_LOG_ROWS=0` turns the log off (every group writes
//! the tables), so the tests can run both ways.

use crate::error::{Result, StorageError};
use crate::stage::{self, StageRow};
use crate::store::Store;
use crate::value::Val;
use duckdb::Connection;
use planner::layout::StoreName;
use planner::schema::{Entid, Schema};
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

/// The log table's name inside a store.
pub const TABLE: &str = "log";

/// The log's switches, read from the environment when an instance loads mentat (so that the tests can run
/// instances both ways in one process).
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// Rows the log holds at most before the group that would pass it applies it instead (`MENTAT_LOG_ROWS`,
    /// default 250,000; 0 turns the log off).
    pub max_rows: usize,
    /// Whether groups log whatever they may even when the entity index does not hold their attributes
    /// (`MENTAT_LOG=always`): slower (the next group that reads such an attribute from the tables applies the
    /// log first) and right all the same, so that the test suite can send every write through the log.
    pub always: bool,
    /// How long the log waits after its last logged commit before the background indexer applies it
    /// (`MENTAT_LOG_IDLE_MS`, default 20).
    pub idle: Duration,
}

impl Settings {
    /// The switches as the environment sets them now.
    pub fn from_env() -> Settings {
        let num = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
        Settings {
            max_rows: num("MENTAT_LOG_ROWS").map_or(250_000, |n| n as usize),
            always: std::env::var("MENTAT_LOG").is_ok_and(|v| v == "always"),
            idle: Duration::from_millis(num("MENTAT_LOG_IDLE_MS").unwrap_or(20)),
        }
    }
}

impl Default for Settings {
    fn default() -> Settings {
        Settings::from_env()
    }
}

/// What a store's log holds, as committed (kept under the store's writer lock), and whether the open group
/// transaction has applied it already.
#[derive(Default)]
pub struct TxLog {
    /// The switches of the instance that opened the store.
    pub settings: Settings,
    state: Mutex<LogState>,
    /// Whether the committed log holds any row (read without the lock by [`settle`]).
    nonempty: AtomicBool,
}

#[derive(Default)]
struct LogState {
    attrs: BTreeSet<Entid>,
    rows: usize,
    /// The log table exists (it is created by the first group that logs).
    table: bool,
    /// The open transaction of the writer lock's holder has applied the log (undone by a rollback).
    applied_open: bool,
}

impl TxLog {
    fn lock(&self) -> std::sync::MutexGuard<'_, LogState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the committed log holds no row.
    pub fn is_empty(&self) -> bool {
        !self.nonempty.load(Ordering::Acquire)
    }

    /// Whether the writer's open transaction still sees logged rows of `attrs` in the log (None: of any attribute).
    pub fn holds(&self, attrs: Option<&BTreeSet<Entid>>) -> bool {
        let s = self.lock();
        !s.applied_open && s.rows > 0 && attrs.is_none_or(|a| !s.attrs.is_disjoint(a))
    }

    /// Rows the writer's open transaction sees in the log.
    pub fn rows(&self) -> usize {
        let s = self.lock();
        if s.applied_open {
            0
        } else {
            s.rows
        }
    }

    /// Starts a writer's transaction (under the writer lock).
    pub fn begin(&self) {
        self.lock().applied_open = false;
    }

    /// The writer's transaction committed, having appended `logged` (attributes, rows) to the log.
    pub fn commit(&self, logged: Option<(BTreeSet<Entid>, usize)>) {
        let mut s = self.lock();
        if s.applied_open {
            s.attrs.clear();
            s.rows = 0;
            s.applied_open = false;
        }
        if let Some((attrs, rows)) = logged {
            s.attrs.extend(attrs);
            s.rows += rows;
            s.table = true;
        }
        self.nonempty.store(s.rows > 0, Ordering::Release);
    }

    /// The writer's transaction rolled back: the log is what it was before it.
    pub fn rollback(&self) {
        self.lock().applied_open = false;
    }

    /// The log of a store just opened: empty (applied by [`recover`]), its table present or not.
    pub fn opened(table: bool, settings: Settings) -> TxLog {
        let log = TxLog { settings, ..Default::default() };
        log.lock().table = table;
        log
    }
}

/// Appends a group's datoms to the log inside the writer's open transaction (creating the table on first use):
/// `rows` in the staging shape, assertions `(a, e, v, true, tx, 0)` and retractions `(a, e, v, false, tx that
/// asserted, tx that retracts)`. Returns how many rows went in.
pub fn append(conn: &Connection, store: &Store, rows: Vec<StageRow<'_>>) -> Result<usize> {
    let exists = store.log.lock().table;
    if !exists {
        conn.execute_batch(&table_ddl(&store.name))?;
    }
    if rows.len() > SMALL_APPEND {
        return stage::append(conn, TABLE, Some(&store.name), rows);
    }
    // A few rows cost less as one prepared INSERT than as an appender, whose flush costs ~0.85 ms however few
    // rows it holds (measured: a single-datom transaction's three rows).
    use duckdb::types::Value as P;
    let mut params: Vec<P> = Vec::with_capacity(rows.len() * 10);
    for (a, e, v, added, tx, rtx) in &rows {
        let mut cols = [P::Null, P::Null, P::Null, P::Null, P::Null];
        if let Some(v) = v {
            let at = match v {
                Val::Ref(_) | Val::Long(_) | Val::Instant(_) => 0,
                Val::Double(_) | Val::Float(_) => 1,
                Val::Str(_) | Val::Uuid(_) | Val::BigInt(_) | Val::BigDec(_) | Val::Tuple(_) => 2,
                Val::Bool(_) => 3,
                Val::Bytes(_) => 4,
            };
            cols[at] = stage::param(v);
        }
        params.push(P::BigInt(*a));
        params.push(P::BigInt(*e));
        params.extend(cols);
        params.push(P::Boolean(*added));
        params.push(P::BigInt(*tx));
        params.push(P::BigInt(*rtx));
    }
    let row = "(?, ?, ?::BIGINT, ?::DOUBLE, ?::VARCHAR, ?::BOOLEAN, ?::BLOB, ?, ?, ?)";
    let sql = format!("INSERT INTO {} VALUES {}", store.name.table(TABLE), vec![row; rows.len()].join(", "));
    conn.prepare_cached(&sql)?.execute(duckdb::params_from_iter(params))?;
    Ok(rows.len())
}

/// Rows a log append writes with one prepared INSERT rather than the appender.
const SMALL_APPEND: usize = 12;

fn table_ddl(name: &StoreName) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {} (a BIGINT, e BIGINT, v_long BIGINT, v_double DOUBLE, v_str VARCHAR, \
         v_bool BOOLEAN, v_blob BLOB, added BOOLEAN, tx BIGINT, rtx BIGINT)",
        name.table(TABLE)
    )
}

/// Applies the log to the attribute tables inside the writer's open transaction (see the module docs) and
/// empties it. Call under the writer lock; [`TxLog::commit`] makes it count once the transaction commits.
pub fn apply(conn: &Connection, store: &Store, schema: &Schema) -> Result<usize> {
    if !store.log.holds(None) {
        return Ok(0);
    }
    let n = apply_table(conn, &store.name, schema)?;
    store.log.lock().applied_open = true;
    Ok(n)
}

/// Applies the log table of store `name` and empties it; returns how many rows it held.
fn apply_table(conn: &Connection, name: &StoreName, schema: &Schema) -> Result<usize> {
    let log = name.table(TABLE);
    let attrs: Vec<Entid> = conn
        .prepare(&format!("SELECT DISTINCT a FROM {log} ORDER BY a"))?
        .query_map([], |r| r.get(0))?
        .collect::<std::result::Result<_, _>>()?;
    for a in attrs {
        let attr = schema.attribute(a).ok_or_else(|| {
            StorageError::Store(format!("{name}: the transaction log holds datoms of {a}, which is not an attribute"))
        })?;
        let (cur, hist) = (name.current(a), name.history(a));
        let (v, col) = (stage::to_store(attr, "s"), stage::stage_column(attr));
        for sql in [
            format!(
                "DELETE FROM {cur} c USING {log} s WHERE s.a = {a} AND NOT s.added AND c.e = s.e AND c.tx = s.tx \
                 AND c.v = {v}"
            ),
            format!("INSERT INTO {hist} SELECT s.e, {v}, s.tx, s.rtx FROM {log} s WHERE s.a = {a} AND NOT s.added"),
            format!(
                "INSERT INTO {cur} SELECT s.e, {v}, s.tx FROM {log} s WHERE s.a = {a} AND s.added AND NOT EXISTS \
                 (SELECT 1 FROM {log} r WHERE r.a = {a} AND NOT r.added AND r.e = s.e AND r.tx = s.tx \
                 AND r.{col} IS NOT DISTINCT FROM s.{col})"
            ),
        ] {
            conn.execute(&sql, [])?;
        }
    }
    Ok(conn.execute(&format!("DELETE FROM {log}"), [])?)
}

/// Applies the store's log in a transaction of its own on `conn` (which must have none open), taking the writer
/// lock: what every reader of the tables calls first. Free when the log is empty. Returns the rows applied.
pub fn settle(conn: &Connection, store: &Store) -> Result<usize> {
    if store.log.is_empty() {
        return Ok(0);
    }
    let _writer = store.lock_writer();
    settle_locked(conn, store)
}

/// [`settle`] for a caller that holds the store's writer lock.
pub fn settle_locked(conn: &Connection, store: &Store) -> Result<usize> {
    // a store of a catalog detached since (or attached again from another file) has its log in that file, which
    // the next open of it applies
    if store.log.is_empty() || !store.is_current(conn)? {
        return Ok(0);
    }
    store.log.begin();
    let schema = store.schema();
    match crate::in_transaction(conn, || apply(conn, store, &schema)) {
        Ok(n) => {
            store.log.commit(None);
            Ok(n)
        }
        Err(e) => {
            store.log.rollback();
            Err(e)
        }
    }
}

/// Reads the log of a store being opened: applies it when the database can be written (a writer stopped before
/// it applied its log), else fails, since reads of the tables would miss acknowledged transactions. Returns
/// whether the log table exists and whether anything was applied (the caller then reads the store's state again).
pub fn recover(conn: &Connection, name: &StoreName, schema: &Schema) -> Result<(bool, bool)> {
    let (exists, read_only): (i64, bool) = conn.query_row(
        "SELECT (SELECT count(*) FROM duckdb_tables() t WHERE t.database_name = d.database_name \
         AND t.schema_name = $1 AND t.table_name = $2), d.readonly FROM duckdb_databases() d \
         WHERE d.database_name = coalesce($3, current_database())",
        duckdb::params![name.schema, TABLE, name.catalog],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    if exists == 0 {
        return Ok((false, false));
    }
    let rows: i64 = conn.query_row(&format!("SELECT count(*) FROM {}", name.table(TABLE)), [], |r| r.get(0))?;
    if rows == 0 {
        return Ok((true, false));
    }
    if read_only {
        return Err(StorageError::Store(format!(
            "{name}: its transaction log holds {rows} datoms not yet applied to its tables (the writer stopped \
             before applying them); open the database read-write once to apply them"
        )));
    }
    crate::in_transaction(conn, || apply_table(conn, name, schema))?;
    Ok((true, true))
}

/// Stores with a log to apply, and when.
type Waiting = HashMap<StoreName, (Weak<Store>, Instant)>;

/// The background indexer (Datomic's indexing job, in small): applies a store's log once no transaction has
/// been logged for [`Settings::idle`], on a connection of its own, so that the log stays short, reads after a burst of
/// writes find it applied, and a process that stops leaves little or nothing for the next open to apply.
pub struct Indexer {
    waiting: Arc<(Mutex<Waiting>, Condvar)>,
    idle: Duration,
}

impl Indexer {
    /// Starts the indexer's thread on `conn` (a connection of its own to the stores' database); it applies a
    /// log `idle` after its last logged commit.
    pub fn start(conn: Connection, idle: Duration) -> std::io::Result<Indexer> {
        static AT_EXIT: std::sync::Once = std::sync::Once::new();
        // SAFETY: registers a plain function with the C library, which calls it once when the process exits.
        AT_EXIT.call_once(|| unsafe {
            atexit(stop_at_exit);
        });
        let waiting: Arc<(Mutex<Waiting>, Condvar)> = Arc::default();
        let shared = waiting.clone();
        std::thread::Builder::new().name("mentat-indexer".into()).spawn(move || run(conn, &shared, &idle))?;
        Ok(Indexer { waiting, idle })
    }

    /// Tells the indexer that `store` logged a transaction now (a no-op when its log is empty).
    pub fn poke(&self, store: &Arc<Store>) {
        if store.log.is_empty() {
            return;
        }
        let (m, wake) = &*self.waiting;
        let due = Instant::now() + self.idle;
        m.lock().unwrap_or_else(|p| p.into_inner()).insert(store.name.clone(), (Arc::downgrade(store), due));
        wake.notify_one();
    }
}

fn run(conn: Connection, waiting: &(Mutex<Waiting>, Condvar), idle: &Duration) {
    let (m, wake) = waiting;
    let mut w = m.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        let now = Instant::now();
        let due: Vec<StoreName> = w.iter().filter(|(_, (_, at))| now >= *at).map(|(n, _)| n.clone()).collect();
        if due.is_empty() {
            let sleep = w.values().map(|(_, at)| at.saturating_duration_since(now)).min();
            w = match sleep {
                Some(d) => wake.wait_timeout(w, d).unwrap_or_else(|p| p.into_inner()).0,
                None => wake.wait(w).unwrap_or_else(|p| p.into_inner()),
            };
            continue;
        }
        let stores: Vec<Arc<Store>> = due.iter().filter_map(|n| w.remove(n)).filter_map(|(s, _)| s.upgrade()).collect();
        drop(w);
        let mut busy = Vec::new();
        for store in stores {
            let _busy = BUSY.lock().unwrap_or_else(|p| p.into_inner());
            if EXITING.load(Ordering::Acquire) {
                return;
            }
            // a group being written is no idle store: try again once it has been idle for a while (waiting for
            // the lock instead put a whole apply between every two groups of a steady writer)
            let Some(writer) = store.try_lock_writer() else {
                busy.push(store);
                continue;
            };
            // a failure leaves the log for the next reader or group, which apply it and report
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| settle_locked(&conn, &store)));
            drop(writer);
        }
        w = m.lock().unwrap_or_else(|p| p.into_inner());
        for store in busy {
            w.entry(store.name.clone()).or_insert((Arc::downgrade(&store), Instant::now() + *idle));
        }
    }
}

/// Set when the process exits: the indexer starts nothing more.
static EXITING: AtomicBool = AtomicBool::new(false);
/// Held by the indexer while it applies a log, and by the exit handler: a process that exits waits for an apply
/// under way, and then no apply runs while DuckDB's own static data is torn down (a thread inside DuckDB then
/// crashed the exiting process).
static BUSY: Mutex<()> = Mutex::new(());

extern "C" {
    fn atexit(f: extern "C" fn()) -> std::os::raw::c_int;
}

extern "C" fn stop_at_exit() {
    EXITING.store(true, Ordering::Release);
    let _busy = BUSY.lock().unwrap_or_else(|p| p.into_inner());
}
