//! The datom store: layout, schema cache, transactor.
//!
//! Everything here runs over a `duckdb::Connection` that the extension hands in; the crate itself never
//! decides which DuckDB it talks to.

pub mod error;
pub mod import;
pub mod interrupt;
pub mod parquet;
pub mod txparse;
pub mod value;

pub use error::{Result, StorageError};
pub mod stage;
pub mod store;
pub mod trace;
pub mod transactor;

/// Runs `f` inside one DuckDB transaction on `conn` (which must have none open): COMMIT when `f` returns Ok,
/// ROLLBACK when it or the COMMIT fails, or when the caller was interrupted before the COMMIT
/// ([`interrupt::requested`], then [`StorageError::Interrupted`]), so that a failed call leaves nothing behind.
pub fn in_transaction<T>(conn: &duckdb::Connection, f: impl FnOnce() -> Result<T>) -> Result<T> {
    conn.prepare_cached("BEGIN TRANSACTION")?.execute([])?;
    let committed = f().and_then(|v| {
        if interrupt::requested() {
            return Err(StorageError::Interrupted);
        }
        conn.prepare_cached("COMMIT")?.execute([])?;
        Ok(v)
    });
    if committed.is_err() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    committed
}
