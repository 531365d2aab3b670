//! The datom store: layout, schema cache, transactor.
//!
//! Everything here runs over a `duckdb::Connection` that the extension hands in; the crate itself never
//! decides which DuckDB it talks to.

pub mod eindex;
pub mod error;
pub mod fulltext;
pub mod group;
pub mod import;
pub mod interrupt;
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
    let open = Open::begin(conn)?;
    let v = f()?;
    if interrupt::requested() {
        return Err(StorageError::Interrupted);
    }
    match interrupt::committing(|| conn.prepare_cached("COMMIT")?.execute([])) {
        Some(done) => done?,
        None => return Err(StorageError::Interrupted),
    };
    open.done();
    Ok(v)
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
    /// aborted"). This is the only place mentat opens a DuckDB transaction.
    pub fn begin(conn: &'c duckdb::Connection) -> Result<Open<'c>> {
        interrupt::begin();
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
