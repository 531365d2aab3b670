//! The datom store: layout, schema cache, transactor.
//!
//! Everything here runs over a `duckdb::Connection` that the extension hands in; the crate itself never
//! decides which DuckDB it talks to.

pub mod compact;
pub mod eindex;
pub mod error;
pub mod fulltext;
pub mod group;
pub mod import;
pub mod interrupt;
pub mod lane;
pub mod logfile;
pub mod parquet;
pub mod pending;
pub mod txparse;
pub mod value;

pub use error::{Result, StorageError};
pub mod stage;
pub mod store;
pub mod trace;
pub mod transactor;
pub mod txlog;

/// Runs `f` inside one DuckDB transaction on `conn` (which must have none open): COMMIT when `f` returns Ok,
/// ROLLBACK when it or the COMMIT fails, when it panics, or when the caller was interrupted before the COMMIT
/// ([`interrupt::requested`], then the commit point [`interrupt::committing`]; [`StorageError::Interrupted`]),
/// so that a failed call leaves nothing behind
/// and the connection goes back to its pool with no transaction open.
pub fn in_transaction<T>(conn: &duckdb::Connection, f: impl FnOnce() -> Result<T>) -> Result<T> {
    // the deferred transaction opened at once: one place decides commit, rollback and the commit point
    in_deferred_transaction(conn, || {
        before_write(conn)?;
        f()
    })
}

/// A group's DuckDB transaction, opened at its first write: see [`in_deferred_transaction`].
struct Deferred {
    conn: *const duckdb::Connection,
    open: bool,
}

thread_local! {
    static DEFERRED: std::cell::RefCell<Option<Deferred>> = const { std::cell::RefCell::new(None) };
}

/// [`in_transaction`] for a group of transactions that may write nothing to DuckDB (a group the transaction log
/// takes writes only its log file): `BEGIN` is sent by the first write on `conn` ([`before_write`], which every
/// statement that changes a table or the catalog in a group's path calls first), and a group that never writes
/// sends neither `BEGIN` nor `COMMIT` (0.14 and 0.08 ms of the 1.46 ms of a single-datom update from Python, perf,
/// 2026-12-03). Reads before the first write run on their own: the caller holds the store's writer lock, so no
/// other writer of the store changes what they read. The commit point ([`interrupt::committing`]) is passed
/// whether or not anything was written, so an interrupted caller is failed exactly as with [`in_transaction`].
pub fn in_deferred_transaction<T>(conn: &duckdb::Connection, f: impl FnOnce() -> Result<T>) -> Result<T> {
    struct Restore<'c> {
        conn: &'c duckdb::Connection,
        before: Option<Deferred>,
        committed: bool,
    }
    impl Drop for Restore<'_> {
        fn drop(&mut self) {
            let ours = DEFERRED.with(|d| d.replace(self.before.take()));
            if !self.committed && ours.is_some_and(|d| d.open) {
                rollback(self.conn);
            }
        }
    }
    interrupt::begin();
    let before = DEFERRED.with(|d| d.replace(Some(Deferred { conn, open: false })));
    let mut restore = Restore { conn, before, committed: false };
    let v = f()?;
    if interrupt::requested() {
        return Err(StorageError::Interrupted);
    }
    if DEFERRED.with(|d| d.borrow().as_ref().is_some_and(|d| d.open)) {
        match interrupt::committing(|| conn.prepare_cached("COMMIT")?.execute([])) {
            Some(done) => done?,
            None => return Err(StorageError::Interrupted),
        };
    } else if interrupt::committing(|| ()).is_none() {
        return Err(StorageError::Interrupted);
    }
    restore.committed = true;
    Ok(v)
}

/// Opens the deferred transaction of [`in_deferred_transaction`] on `conn` if one is waiting for its first write;
/// nothing otherwise (inside [`in_transaction`], or outside any). Call before any statement that changes a table
/// or the catalog.
pub fn before_write(conn: &duckdb::Connection) -> Result<()> {
    DEFERRED.with(|d| {
        let mut d = d.borrow_mut();
        match d.as_mut() {
            Some(w) if !w.open && std::ptr::eq(w.conn, conn) => {
                Open::begin_sql(conn)?.done();
                w.open = true;
                Ok(())
            }
            _ => Ok(()),
        }
    })
}

/// An open DuckDB transaction, rolled back on drop unless [`Open::done`] says it was committed (or rolled back).
pub struct Open<'c> {
    conn: &'c duckdb::Connection,
    open: bool,
}

impl<'c> Open<'c> {
    /// `BEGIN TRANSACTION` on `conn`. A BEGIN that fails opens nothing: an interrupt that lands on the BEGIN
    /// statement after DuckDB started the transaction leaves it open (and aborted), so it is rolled back here
    /// before the error is returned (a pooled connection left so would fail every later call with "transaction is
    /// aborted"). This and [`before_write`] are the only places mentat opens a DuckDB transaction.
    pub fn begin(conn: &'c duckdb::Connection) -> Result<Open<'c>> {
        interrupt::begin();
        Open::begin_sql(conn)
    }

    /// The `BEGIN` of [`Open::begin`] without telling the interrupt hook (a deferred transaction told it first).
    fn begin_sql(conn: &'c duckdb::Connection) -> Result<Open<'c>> {
        if let Err(e) = conn.prepare_cached("BEGIN TRANSACTION").and_then(|mut s| s.execute([])) {
            rollback(conn);
            return Err(e.into());
        }
        Ok(Open { conn, open: true })
    }

    /// The transaction has ended (committed): nothing to roll back.
    pub fn done(mut self) {
        self.open = false;
    }
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        if self.open {
            rollback(self.conn);
        }
    }
}

/// Rolls back the transaction open on `conn`. The extension forwards the caller's interrupt to the connection for
/// as long as the call runs, and an interrupt can cut a ROLLBACK short too: it is tried again (DuckDB clears a
/// connection's interrupt when a statement starts, and a ROLLBACK takes microseconds against the forwarding's
/// milliseconds) until DuckDB has no transaction open on the connection.
pub fn rollback(conn: &duckdb::Connection) {
    for _ in 0..1000 {
        match conn.execute_batch("ROLLBACK") {
            Ok(()) => return,
            Err(e) if e.to_string().contains("no transaction is active") => return,
            Err(_) => continue,
        }
    }
}
