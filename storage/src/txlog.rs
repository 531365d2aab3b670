//! The transaction log: where a group commit's datoms go when writing them into the attribute tables would cost
//! more than the transaction itself (Datomic's log and its later indexing job, in small).
//!
//! Every DuckDB table a transaction touches costs 0.5 to 1.5 ms on this machine however few rows it moves (see the
//! README's statement costs), and a single-datom update touches four (`cur_` delete and insert, `hist_`, the
//! `:db/txInstant` datom) plus, in a group of many, a `DELETE ... USING` that scans the whole `cur_` table (20 to
//! 30 ms at scale m). So a group whose datoms the entity index can answer for keeps them out of DuckDB: they are
//! appended as one record to the store's log file and synced (`logfile.rs`; a store of an in-memory database keeps
//! them in memory only, as it keeps everything), kept in memory in the staging shape (attribute, entity, value,
//! added, tx, and the tx that retracts), and *applied* to the attribute tables later, set-based, many transactions
//! at once. The DuckDB transaction of such a group writes nothing (the partition marks it moved go into its
//! record, and reach the `partitions` table with the apply, raised, never lowered); the caller is told
//! after the record is synced.
//!
//! Design history: the first version of the log was a DuckDB table, `log`, written in the group's transaction (one
//! append and the COMMIT instead of four table operations): 0.6 to 1.2 ms for the append (a prepared INSERT of a
//! few rows, or the appender) and 0.5 to 0.7 ms for the COMMIT, against 0.1 to 0.3 ms for an append and
//! `fdatasync` of our own file (storage/README.md has the figures). A store of that version may have left rows in
//! its `log` table: they are applied when it is opened.
//!
//! - **What may be logged**: a group that wrote nothing to the tables itself (no schema change, no
//!   `:db/retractEntity`), all of whose attributes the entity index holds (so the transactor's reads of them never
//!   go to the tables) or of more than [`crate::pending::WANT_INDEX_DATOMS`] datoms (a bulk load's: one table
//!   write per attribute and group costs more than the next group's apply of the log before it reads them), and
//!   none of whose attributes is fulltext or a schema attribute; `:db/txInstant` datoms go with them.
//!   Anything else is written to the tables as before, after the log is applied when it holds one of the group's
//!   attributes (so that per attribute, datoms reach the tables in tx order). A small group (at most
//!   [`crate::pending::WANT_INDEX_DATOMS`]) written to the tables only because the index did not hold some of its
//!   attributes asks for them ([`crate::eindex::EntityIndex::want`]; the extension reads them in the background),
//!   so a writer's second and later small transactions on an attribute are logged whether or not any query has
//!   read it: one client's single-datom transactions on a file store went from 273-368/s to 990-1,283/s (three
//!   alternating runs of 5 s each, updates drawn over 5,000 entities, on the same machine).
//! - **Applied**: with the transactor's own table writer, as if the logged transactions were one group: the
//!   logged retractions leave `cur_` and enter `hist_`, the logged assertions not retracted later in the log enter
//!   `cur_` (a handful as point statements, more staged and written set-based per attribute); the sequence number
//!   of the last record applied is written to the store's `meta` table; one DuckDB transaction, after which the
//!   file is emptied. A crash leaves the records or their result, and records at or below the mark are never
//!   applied again.
//! - **When**: in the background once no transaction has been logged for a while ([`Settings::idle`], [`Indexer`]); before any
//!   read of the tables (every SQL query, export, import, fulltext search and index build settles the log first,
//!   through [`settle`]; entity-path reads answer from the index and need not); inside a group, before the
//!   transactor reads an attribute from the tables that the log holds; when the log would pass [`Settings::max_rows`]; and
//!   when a store is opened with records in its log file past the mark (a writer that stopped before applying
//!   them). A database opened read-only whose log holds datoms cannot apply them: its stores refuse to open, with
//!   an error that says so.
//! - **Stores in a catalog attached again**: the log file is named after the database file, so it follows the file
//!   whatever the catalog is called; a store whose catalog was detached leaves its records in the file for the
//!   next open. Copying a database file while its log holds records copies the tables without them: `mentat_sync()`
//!   and `CHECKPOINT` first. Copying the file, its `.wal` and its log one after another while a process has them
//!   open is not a consistent copy: the background applier may move records from the log into the tables between
//!   two of the copies (`tests/test_workload.py` did that once, and lost two transactions).
//!
//! The tables are therefore always the state as of some transaction (a prefix of the log's order), and every
//! mentat read sees every acknowledged transaction. `MENTAT_LOG_ROWS=0` turns the log off (every group writes
//! the tables), so the tests can run both ways.

use crate::error::{Result, StorageError};
use crate::logfile::{self, LogFile, LogRow, Marks, Records};
use crate::stage;
use crate::store::Store;
use duckdb::Connection;
use planner::layout::StoreName;
use planner::schema::{Entid, Schema};
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

/// The log table's name inside a store (where the first version of the log kept it; read only when a store is
/// opened).
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
    /// Whether a connection makes its staging tables again after a large apply ([`stage::RENEW_ROWS`]): off when
    /// `MENTAT_STAGE_RENEW` is 0 ([`stage::renew_after`]).
    pub renew: bool,
    /// The size of a write-ahead log past which the indexer checkpoints the database (`MENTAT_CHECKPOINT_WAL_MB`,
    /// default [`CHECKPOINT_WAL_BYTES`]).
    pub checkpoint_wal_bytes: u64,
}

impl Settings {
    /// The switches as the environment sets them now.
    pub fn from_env() -> Settings {
        let num = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
        Settings {
            max_rows: num("MENTAT_LOG_ROWS").map_or(250_000, |n| n as usize),
            always: std::env::var("MENTAT_LOG").is_ok_and(|v| v == "always"),
            idle: Duration::from_millis(num("MENTAT_LOG_IDLE_MS").unwrap_or(20)),
            renew: stage::renew_after() > 0,
            checkpoint_wal_bytes: num("MENTAT_CHECKPOINT_WAL_MB").map_or(CHECKPOINT_WAL_BYTES, |n| n.max(1) << 20),
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
    /// When to checkpoint, under a lock of its own: every write asks ([`Indexer::poke`]), and the state's lock is
    /// held through a group's append and `fdatasync`, so asking under it held each acknowledged caller back until
    /// the next group was synced (storage/README.md "Acknowledged callers do not wait for the next sync").
    checkpointing: Mutex<Checkpointing>,
}

#[derive(Default)]
struct Checkpointing {
    /// DuckDB's write-ahead log of the store's database file (None: an in-memory database, or one mentat does not
    /// write), which the indexer checkpoints once it passes [`Settings::checkpoint_wal_bytes`].
    wal: Option<std::path::PathBuf>,
    /// The last checkpoint tried: none is tried again before this moment.
    after: Option<Instant>,
}

#[derive(Default)]
struct LogState {
    attrs: BTreeSet<Entid>,
    /// The logged datoms not applied yet, in log order (also in the file, when there is one).
    pending: Vec<LogRow>,
    /// The partition marks of the newest logged group that moved them, not yet in the `partitions` table (the
    /// apply writes them).
    marks: Option<Marks>,
    /// The log file, for a store in a database file (an in-memory database has none: nothing of it outlives the
    /// process anyway).
    file: Option<LogFile>,
    /// Where the log file goes (None: an in-memory database, or a store mentat does not write).
    path: Option<std::path::PathBuf>,
    /// The log file could not be made: the store's groups write the tables.
    off: bool,
    /// The log id was made by the open transaction: a rollback takes it back, and the file opened with it.
    id_open: bool,
    /// The sequence number of the last record written (the file's records count on from the applied mark).
    seq: u64,
    /// The open transaction of the writer lock's holder has applied the log (undone by a rollback).
    applied_open: bool,
}

/// A group's logged datoms: the attributes and the rows (assertions `(a, e, v, true, tx, 0)`, retractions
/// `(a, e, v, false, tx that asserted, tx that retracts)`), and the partition marks after the group when it moved
/// them (they go into the record, not the `partitions` table: that write and its DuckDB COMMIT cost a bulk load's
/// group 0.6 of its 8.4 ms; storage/README.md "Partition marks in the log").
pub struct Logged {
    pub attrs: BTreeSet<Entid>,
    pub rows: Vec<LogRow>,
    pub marks: Option<Marks>,
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
        !s.applied_open && !s.pending.is_empty() && attrs.is_none_or(|a| !s.attrs.is_disjoint(a))
    }

    /// Rows the writer's open transaction sees in the log.
    pub fn rows(&self) -> usize {
        let s = self.lock();
        if s.applied_open {
            0
        } else {
            s.pending.len()
        }
    }

    /// When the store's database is to be checkpointed: None while its write-ahead log is under
    /// [`Settings::checkpoint_wal_bytes`] (one `stat`), else now, or [`CHECKPOINT_RETRY`] after the last
    /// checkpoint tried.
    pub fn checkpoint_at(&self) -> Option<Instant> {
        let (wal, after) = {
            let c = self.checkpointing.lock().unwrap_or_else(|p| p.into_inner());
            (c.wal.clone(), c.after)
        };
        let large =
            wal.and_then(|w| std::fs::metadata(w).ok()).is_some_and(|m| m.len() >= self.settings.checkpoint_wal_bytes);
        let now = Instant::now();
        large.then(|| after.map_or(now, |t| t.max(now)))
    }

    /// Starts a writer's transaction (under the writer lock).
    pub fn begin(&self) {
        self.lock().applied_open = false;
    }

    /// The writer's DuckDB transaction committed, having applied the log or not, and `logged` is to be added:
    /// written to the log file and synced (the group is durable, and may be acknowledged, once this returns Ok),
    /// then kept for the next apply. Errors: [`StorageError::Store`] when the file cannot be written; the log is
    /// then as it was (less what the transaction applied), and the group must fail.
    pub fn commit(&self, logged: Option<Logged>) -> Result<()> {
        let mut s = self.lock();
        s.id_open = false;
        if s.applied_open {
            s.attrs.clear();
            s.pending.clear();
            s.marks = None;
            s.applied_open = false;
            if let Some(f) = s.file.as_mut() {
                // a failure leaves applied records in the file, below the applied mark: never applied again
                let _ = f.clear();
            }
        }
        let out = match logged {
            Some(l) if !l.rows.is_empty() => {
                let seq = s.seq + 1;
                let written = match s.file.as_mut() {
                    Some(f) => f.append(seq, &l.rows, l.marks),
                    None => Ok(()),
                };
                if written.is_ok() {
                    s.seq = seq;
                    s.marks = newer_marks(s.marks, l.marks);
                    s.attrs.extend(l.attrs);
                    s.pending.extend(l.rows);
                }
                written
            }
            _ => Ok(()),
        };
        self.nonempty.store(!s.pending.is_empty(), Ordering::Release);
        out
    }

    /// The writer's transaction rolled back: the log is what it was before it.
    pub fn rollback(&self) {
        let mut s = self.lock();
        s.applied_open = false;
        if s.id_open {
            s.file = None;
            s.id_open = false;
        }
    }
}

/// Applies the log to the attribute tables inside the writer's open transaction (see the module docs) and records
/// the last record applied (the `meta` key `log_applied`). Call under the writer lock; [`TxLog::commit`] makes it count once the transaction
/// commits. Returns the rows applied.
pub fn apply(conn: &Connection, store: &Store, schema: &Schema) -> Result<usize> {
    apply_log(conn, &store.name, &store.log, schema)
}

fn apply_log(conn: &Connection, name: &StoreName, log: &TxLog, schema: &Schema) -> Result<usize> {
    let mut s = log.lock();
    if s.applied_open || s.pending.is_empty() {
        return Ok(0);
    }
    crate::before_write(conn)?;
    write_rows(conn, name, schema, &s.pending)?;
    if let Some(marks) = s.marks {
        crate::transactor::raise_partitions(conn, name, marks)?;
    }
    if s.file.is_some() {
        set_meta(conn, name, APPLIED, &s.seq.to_string())?;
    }
    s.applied_open = true;
    Ok(s.pending.len())
}

/// The later of two groups' partition marks (marks only move up).
fn newer_marks(a: Option<Marks>, b: Option<Marks>) -> Option<Marks> {
    match (a, b) {
        (Some(a), Some(b)) => Some((a.0.max(b.0), a.1.max(b.1))),
        (a, b) => a.or(b),
    }
}

/// Writes logged rows to the tables with the transactor's own writer (`write_datoms`: a handful as point
/// statements, more staged and written set-based per attribute), as one group's datoms: an assertion that a later
/// row retracts never reaches `cur_` (its retraction takes it to `hist_`), and retractions leave `cur_` before
/// assertions enter it. A reader that applies one logged transaction pays what the group would have paid to write
/// the tables (0.6 ms for a single-datom update), not a staging append and a scan of the staged rows per attribute.
fn write_rows(conn: &Connection, name: &StoreName, schema: &Schema, rows: &[LogRow]) -> Result<()> {
    let retracted: foldhash::HashSet<(&crate::transactor::Eav, i64)> =
        rows.iter().filter(|r| !r.1).map(|r| (&r.0, r.2)).collect();
    // collected once: write_datoms walks its inputs several times (a lookup per row and walk cost 25 ms in an
    // apply of 250,000 logged rows)
    // sized up front: grown by doubling, a large apply's vectors faulted in their memory several times over (a
    // quarter of an apply's time was the kernel zeroing pages, perf 2026-12-04)
    let mut adds: Vec<(&crate::transactor::Eav, i64)> = Vec::with_capacity(rows.len());
    adds.extend(rows.iter().filter(|r| r.1 && !retracted.contains(&(&r.0, r.2))).map(|r| (&r.0, r.2)));
    let retracts = rows.iter().filter(|r| !r.1).map(|r| (&r.0, r.2, r.3));
    crate::transactor::write_datoms(conn, name, schema, adds.iter().copied(), retracts)
}

/// Makes the log ready to take a group inside the writer's open transaction: for a store in a database file,
/// opens its log file, first giving the store a log id (written in that transaction, so committed before the
/// file's first record is). Returns false when the store cannot log (its log file cannot be made beside the
/// database file, e.g. a read-only directory): the group then writes the tables, as every later one will.
pub fn prepare(conn: &Connection, store: &Store) -> Result<bool> {
    let mut s = store.log.lock();
    if s.off {
        return Ok(false);
    }
    let Some(path) = s.path.clone() else { return Ok(true) };
    if s.file.is_some() {
        return Ok(true);
    }
    let id = match get_meta(conn, &store.name, LOG_ID)?.and_then(|v| v.parse::<u64>().ok()) {
        Some(id) => id,
        None => {
            let id = new_log_id();
            set_meta(conn, &store.name, LOG_ID, &id.to_string())?;
            s.id_open = true;
            id
        }
    };
    match LogFile::open(&path, id) {
        // the records a file may hold were applied when the store was opened (or are not this store's)
        Ok((file, _)) => {
            s.file = Some(file);
            Ok(true)
        }
        Err(_) => {
            s.off = true;
            Ok(false)
        }
    }
}

/// A log id: random enough that a database file replaced by another never shares its predecessor's.
fn new_log_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    h.write_u32(std::process::id());
    h.finish()
}

/// The `meta` key of the sequence number of the last log record applied to the tables.
const APPLIED: &str = "log_applied";
/// The `meta` key of the store's log id (the log file's header carries it).
const LOG_ID: &str = "log_id";

fn set_meta(conn: &Connection, name: &StoreName, key: &str, value: &str) -> Result<()> {
    crate::before_write(conn)?;
    let meta = name.table("meta");
    // deleted and inserted, not updated in place: an update keeps DuckDB from checkpointing while any other
    // transaction is open (crate::transactor::rewrite_partitions)
    conn.prepare_cached(&format!("DELETE FROM {meta} WHERE key = $1"))?.execute([key])?;
    conn.prepare_cached(&format!("INSERT INTO {meta} VALUES ($1, $2)"))?.execute([key, value])?;
    Ok(())
}

fn get_meta(conn: &Connection, name: &StoreName, key: &str) -> Result<Option<String>> {
    let mut st = conn.prepare_cached(&format!("SELECT value FROM {} WHERE key = $1", name.table("meta")))?;
    let mut rows = st.query([key])?;
    Ok(match rows.next()? {
        Some(r) => Some(r.get(0)?),
        None => None,
    })
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
            store.log.commit(None)?;
            // a large apply left its rows' memory in this connection's staging tables (stage::RENEW_ROWS); the apply
            // is committed whatever the renewal gives, and a connection left without them says so at its next use
            if n >= stage::RENEW_ROWS && store.log.settings.renew {
                let _ = stage::renew_tables(conn);
            }
            Ok(n)
        }
        Err(e) => {
            store.log.rollback();
            Err(e)
        }
    }
}

/// Reads the log of a store being opened and applies what it holds when the database can be written (a writer
/// stopped before it applied its log: rows in the `log` table, or records in the log file past the applied mark),
/// else fails, since reads of the tables would miss acknowledged transactions. `read_only` says that mentat does
/// not write the store (an attached Parquet export). Returns the store's log and whether anything was applied
/// (the caller then reads the store's state again).
pub fn recover(
    conn: &Connection,
    name: &StoreName,
    schema: &Schema,
    settings: Settings,
    read_only: bool,
) -> Result<(TxLog, bool)> {
    let (exists, db_read_only, db): (i64, bool, Option<String>) = conn.query_row(
        "SELECT (SELECT count(*) FROM duckdb_tables() t WHERE t.database_name = d.database_name \
         AND t.schema_name = $1 AND t.table_name = $2), d.readonly, d.path FROM duckdb_databases() d \
         WHERE d.database_name = coalesce($3, current_database())",
        duckdb::params![name.schema, TABLE, name.catalog],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )?;
    let refuse = |rows: usize| {
        StorageError::Store(format!(
            "{name}: its transaction log holds {rows} datoms not yet applied to its tables (the writer stopped \
             before applying them); open the database read-write once to apply them"
        ))
    };
    let mut recovered = false;
    // rows in the table: left by a version of mentat that logged into the table itself
    if exists > 0 {
        let rows: i64 = conn.query_row(&format!("SELECT count(*) FROM {}", name.table(TABLE)), [], |r| r.get(0))?;
        if rows > 0 && db_read_only {
            return Err(refuse(rows as usize));
        }
        if rows > 0 {
            crate::in_transaction(conn, || apply_table(conn, name, schema))?;
            recovered = true;
        }
    }
    let log = TxLog { settings, ..Default::default() };
    let Some(db) = db.filter(|p| !p.is_empty() && p != ":memory:") else {
        return Ok((log, recovered));
    };
    if read_only {
        return Ok((log, recovered));
    }
    // the file follows the database file whatever the working directory is later; a database that is not a
    // local file (a remote one) gets no log: its groups write the tables
    let Ok(db) = std::fs::canonicalize(&db) else {
        log.lock().off = true;
        return Ok((log, recovered));
    };
    log.checkpointing.lock().unwrap_or_else(|p| p.into_inner()).wal =
        Some(std::path::PathBuf::from(format!("{}.wal", db.to_string_lossy())));
    let path = logfile::path_for(&db.to_string_lossy(), &name.schema);
    let applied = get_meta(conn, name, APPLIED)?.and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    let id = get_meta(conn, name, LOG_ID)?.and_then(|v| v.parse::<u64>().ok());
    let waiting = |records: Records| -> (Vec<LogRow>, Option<Marks>) {
        let mut marks = None;
        let rows = records
            .into_iter()
            .filter(|(seq, _, _)| *seq > applied)
            .flat_map(|(_, rows, m)| {
                marks = newer_marks(marks, m);
                rows
            })
            .collect();
        (rows, marks)
    };
    if db_read_only {
        let rows = match id {
            Some(id) => waiting(LogFile::peek(&path, id)?).0,
            None => Vec::new(),
        };
        if !rows.is_empty() {
            return Err(refuse(rows.len()));
        }
        return Ok((log, recovered));
    }
    {
        let mut s = log.lock();
        s.path = Some(path.clone());
        s.seq = applied;
    }
    let Some(id) = id else { return Ok((log, recovered)) };
    let (file, records) = LogFile::open(&path, id)?;
    let last = records.last().map_or(0, |r| r.0);
    let (rows, marks) = waiting(records);
    {
        let mut s = log.lock();
        s.file = Some(file);
        s.seq = applied.max(last);
        s.attrs = rows.iter().map(|r| r.0 .1).collect();
        s.pending = rows;
        s.marks = marks;
        log.nonempty.store(!s.pending.is_empty(), Ordering::Release);
    }
    if !log.is_empty() {
        log.begin();
        match crate::in_transaction(conn, || apply_log(conn, name, &log, schema)) {
            Ok(_) => log.commit(None)?,
            Err(e) => {
                log.rollback();
                return Err(e);
            }
        }
        recovered = true;
    }
    Ok((log, recovered))
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
        let waiting: Arc<(Mutex<Waiting>, Condvar)> = Arc::default();
        let shared = waiting.clone();
        // the indexer applies logs with the transactor's writer, which stages larger sets in temporary tables
        crate::stage::ensure_tables(&conn).map_err(|e| std::io::Error::other(e.to_string()))?;
        warm_up(&conn);
        register_exit_handler();
        let renew = crate::stage::renew_after();
        std::thread::Builder::new().name("mentat-indexer".into()).spawn(move || run(conn, &shared, &idle, renew))?;
        Ok(Indexer { waiting, idle })
    }

    /// Tells the indexer that `store` was written now: it applies the log and checkpoints a large write-ahead
    /// log once the store is idle (a no-op when the log is empty and the write-ahead log small).
    pub fn poke(&self, store: &Arc<Store>) {
        let checkpoint = store.log.checkpoint_at();
        let due = match (store.log.is_empty(), checkpoint) {
            (true, None) => return,
            (true, Some(at)) => at,
            // a write-ahead log to checkpoint is not left to an idle moment, which a steady writer never leaves
            (false, at) => at.map_or(Instant::now() + self.idle, |at| at.min(Instant::now() + self.idle)),
        };
        let (m, wake) = &*self.waiting;
        let mut waiting = m.lock().unwrap_or_else(|p| p.into_inner());
        // the store's name is cloned only when it is not waited for yet (a steady writer's store always is)
        let before = match waiting.get_mut(&store.name) {
            Some(slot) => Some(std::mem::replace(slot, (Arc::downgrade(store), due))),
            None => waiting.insert(store.name.clone(), (Arc::downgrade(store), due)),
        };
        drop(waiting);
        // The indexer sleeps until the earliest time in the map. A store already there with a time no later
        // than this one's is already waited for: the indexer wakes then, finds the later time, and sleeps again.
        // Only an earlier time needs it woken now; waking it at every transaction cost 64 writers 5.6% of their
        // CPU in `futex` (perf, native update_heavy at s).
        if before.is_none_or(|(_, at)| due < at) {
            wake.notify_one();
        }
    }
}

fn run(conn: Connection, waiting: &(Mutex<Waiting>, Condvar), idle: &Duration, renew: u32) {
    let (m, wake) = waiting;
    // passes since the connection's staging tables were made (made again after `renew`, 0: never)
    let mut uses = 0;
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
        // stores to come back to, and when
        let mut again: Vec<(Arc<Store>, Instant)> = Vec::new();
        uses += 1;
        if renew > 0 && uses >= renew {
            uses = 0;
            let _ = background(|| crate::stage::renew_tables(&conn));
        }
        for store in stores {
            let ran = background(|| {
                // the checkpoint first, and without the writer lock: a logged group writes nothing to DuckDB, so
                // the writer goes on logging groups beside it on the other core (a group that writes the tables
                // waits at its COMMIT for the checkpoint to end, or, open before it, has it refused and tried again
                // after CHECKPOINT_RETRY). Before the apply, not after: right after an apply's COMMIT, DuckDB
                // refused CHECKPOINT ("other write transactions active") for as long as the indexer retried, every
                // time in a bulk load at m (6 of 8 tried), so the write-ahead log grew to 252 MB and DuckDB held
                // 273 MB of table data in memory; checkpointed first, every one was done (peak RSS 473 -> 270 MB,
                // the log 14 MB at the end). A refused checkpoint is tried again after CHECKPOINT_RETRY.
                if store.log.checkpoint_at().is_some_and(|at| at <= Instant::now()) {
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| checkpoint(&conn, &store)));
                }
                // a group being written is no idle store: try again once it has been idle for a while (waiting
                // for the lock instead put a whole apply between every two groups of a steady writer)
                let Some(writer) = store.try_lock_writer() else {
                    again.push((store.clone(), Instant::now() + *idle));
                    return;
                };
                // a failure leaves the log for the next reader or group, which apply it and report
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| settle_locked(&conn, &store)));
                // tables that deleted rows have swollen, which DuckDB does not vacuum beside steady readers
                // (compact.rs); after the apply, under the writer lock, every few seconds at most
                // (a failure leaves the table as it was, for the next look; MENTAT_TRACE prints it)
                if crate::compact::due(&store) {
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        if store.is_current(&conn).unwrap_or(false) {
                            let mut trace = crate::trace::Trace::start();
                            let outcome = crate::compact::compact_swollen(&conn, &store);
                            trace.mark("compact");
                            match outcome {
                                Ok(done) => {
                                    for c in done {
                                        let (a, from, to) = (c.attribute, c.rows_before, c.rows_after);
                                        trace.print(&format!("compacted cur_{a}, {from} rows -> {to}"));
                                    }
                                }
                                Err(e) => trace.print(&format!("compaction of {} failed: {e}", store.name)),
                            }
                        }
                    }));
                }
                drop(writer);
                if let Some(at) = store.log.checkpoint_at() {
                    again.push((store.clone(), at));
                }
            });
            if ran.is_none() {
                return;
            }
        }
        w = m.lock().unwrap_or_else(|p| p.into_inner());
        for (store, at) in again {
            w.entry(store.name.clone()).or_insert((Arc::downgrade(&store), at));
        }
    }
}

/// The default size of a write-ahead log past which the indexer checkpoints the database: 64 MiB, four times
/// DuckDB's own `checkpoint_threshold`. Measured at m (storage/README.md, "Checkpoint threshold"): with 16 MiB a
/// bulk load checkpointed 8 or 9 times and left a 48.2 MB database (free blocks of the tables written again), with
/// 64 MiB 39.3 MB at the same speed (550K datoms/s) and peak RSS 280 MB.
pub const CHECKPOINT_WAL_BYTES: u64 = 64 << 20;

/// DuckDB's default `checkpoint_threshold`, as `current_setting` shows it.
const DUCKDB_DEFAULT_THRESHOLD: &str = "16.0 MiB";

/// Raises DuckDB's own `checkpoint_threshold` (a global setting) to the indexer's threshold
/// ([`Settings::checkpoint_wal_bytes`], 64 MiB unless `MENTAT_CHECKPOINT_WAL_MB` says otherwise) when it is at
/// DuckDB's default of 16 MiB; a threshold the user set otherwise is left alone. Called when mentat loads, which
/// goes on when this fails (a configuration locked with `lock_configuration` refuses the `SET`). Since
/// mentat updates no row in place, DuckDB checkpoints by itself beside open transactions (the outer statement of
/// the `mentat_transact` call that commits is one), and at 16 MiB a bulk load at m left a 63.7 MB database against
/// 39.6 MB at 64 MiB (storage/README.md "No updates in place"): each checkpoint writes the row groups appended
/// since the last one again, and the blocks they replace stay in the file as free blocks.
pub fn align_checkpoint_threshold(conn: &Connection, settings: &Settings) -> Result<()> {
    let now: String = conn.query_row("SELECT current_setting('checkpoint_threshold')", [], |r| r.get(0))?;
    if now == DUCKDB_DEFAULT_THRESHOLD && settings.checkpoint_wal_bytes != 16 << 20 {
        conn.execute_batch(&format!(
            "SET GLOBAL checkpoint_threshold = '{}MiB'",
            (settings.checkpoint_wal_bytes >> 20).max(1)
        ))?;
    }
    Ok(())
}

/// How long the indexer keeps trying a checkpoint that DuckDB refuses (another write transaction is open).
const CHECKPOINT_TRY: Duration = Duration::from_millis(50);
/// How long after a checkpoint tried (done or refused) the indexer tries the next one at the earliest.
const CHECKPOINT_RETRY: Duration = Duration::from_secs(2);

/// Checkpoints the database of `store` (DuckDB's `CHECKPOINT`: the write-ahead log written into the database
/// file and emptied), beside the writer (a logged group writes nothing to DuckDB; see [`run`]). DuckDB checkpoints
/// by itself when a commit passes `checkpoint_threshold`, but while any other transaction is open (a reader's, or
/// the outer statement of the `mentat_transact` call itself) only if nothing in the write-ahead log updated a row
/// in place; mentat's writes used to update the log's applied mark and the partition marks in place, and beside the
/// soak's eight readers and one writer DuckDB never checkpointed (the write-ahead log grew to 45 MB in 4 minutes,
/// DuckDB's memory from 55 to 133 MB, most of it table data not yet checkpointed, `IN_MEMORY_TABLE` in
/// `duckdb_memory()`). They are deleted and inserted now ([`crate::transactor::rewrite_partitions`]), and DuckDB
/// checkpoints by itself beside readers; this checkpoint stays for a log that passes [`Settings::checkpoint_wal_bytes`]
/// all the same. An explicit `CHECKPOINT` is refused now and then (two of five attempts in a 4-minute soak, each
/// after 0.5 s of retries, 2026-12-03), so the indexer retries for [`CHECKPOINT_TRY`] and otherwise leaves it for
/// [`CHECKPOINT_RETRY`]; a checkpoint took 50 to 170 ms at scale s. Not `FORCE CHECKPOINT`, which stops new
/// transactions from starting while it waits for the open ones: a mentat call whose outer statement is open and
/// whose own connection must begin a transaction would wait for it forever.
fn checkpoint(conn: &Connection, store: &Store) -> Result<()> {
    let sql = match &store.name.catalog {
        Some(c) => format!("CHECKPOINT {}", planner::layout::quote_ident(c)),
        None => "CHECKPOINT".to_string(),
    };
    let mut trace = crate::trace::Trace::start();
    let start = Instant::now();
    let done = loop {
        let done = conn.execute_batch(&sql);
        if done.is_ok() || start.elapsed() >= CHECKPOINT_TRY {
            break done;
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    trace.mark(if done.is_ok() { "done" } else { "refused" });
    trace.print("checkpoint");
    // after a refusal, and after a checkpoint that left the write-ahead log as large (which would have the
    // indexer try again at once, and again), the next try waits
    store.log.checkpointing.lock().unwrap_or_else(|p| p.into_inner()).after = Some(Instant::now() + CHECKPOINT_RETRY);
    Ok(done?)
}

/// Set when the process exits: background work starts nothing more.
static EXITING: AtomicBool = AtomicBool::new(false);
/// Held by background work while it runs (the indexer's applies, the entity index's background reads), and by the
/// exit handler: a process that exits waits for the work under way, and then none runs while DuckDB's own static
/// data is torn down (a thread inside DuckDB then crashed the exiting process).
static BUSY: Mutex<()> = Mutex::new(());

/// Runs `f`, work of a background thread of ours that calls into DuckDB, unless the process is exiting (then
/// None). The C library runs exit handlers in the reverse order of their registration, and DuckDB registers the
/// destructor of a function-local static when the static is first used, which is mostly after mentat was loaded:
/// a handler registered once at load ran after DuckDB had destroyed such statics (its identifier quoting, used by
/// an appender flush of the indexer's apply, crashed an exiting Python process about three times in four after a
/// burst of writes). So the handler is registered again before background work, up to [`EXIT_HANDLERS`] times
/// (each one is a few bytes the C library keeps for good; DuckDB's statics are first used early in a process).
///
/// A static that `f` itself is the first to use registers its destructor after the handler, so an exit during that
/// very call could still destroy it under `f` (a core dump, 2026-12-06: DuckDB's keyword maps, first used by the
/// compaction's look at `duckdb_tables()` in the indexer, destroyed by the exiting main thread while the handler
/// waited for the indexer). Hence [`warm_up`] at load, and the handler registered again once `f` is done, for the
/// statics it started.
pub fn background<T>(f: impl FnOnce() -> T) -> Option<T> {
    let _busy = BUSY.lock().unwrap_or_else(|p| p.into_inner());
    if EXITING.load(Ordering::Acquire) {
        return None;
    }
    register_exit_handler();
    let out = f();
    register_exit_handler();
    Some(out)
}

/// Runs, once at load and on the loading thread, what the background work does first with DuckDB and the caller's
/// own calls may not have done yet, so that the statics it starts exist before the exit handler is registered
/// (see [`background`]): DuckDB writing out the definitions of tables (`duckdb_tables().sql`, which the
/// compaction's look reads and which goes through DuckDB's identifier quoting and keyword maps; the connection's
/// staging tables give it tables to write out in an empty database). Failures are ignored: this only warms.
fn warm_up(conn: &Connection) {
    let _ = conn.query_row("SELECT count(sql) FROM duckdb_tables()", [], |r| r.get::<_, i64>(0));
}

/// How many times the exit handler is registered at most (twice per [`background`] call, once at load).
const EXIT_HANDLERS: usize = 1024;

fn register_exit_handler() {
    static REGISTERED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    if REGISTERED.fetch_add(1, Ordering::Relaxed) < EXIT_HANDLERS {
        // SAFETY: registers a plain function with the C library, which calls it when the process exits; calling
        // it more than once is harmless.
        unsafe {
            atexit(stop_at_exit);
        }
    }
}

extern "C" {
    fn atexit(f: extern "C" fn()) -> std::os::raw::c_int;
}

extern "C" fn stop_at_exit() {
    EXITING.store(true, Ordering::Release);
    let _busy = BUSY.lock().unwrap_or_else(|p| p.into_inner());
}
