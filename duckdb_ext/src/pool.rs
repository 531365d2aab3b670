//! The extension's own connections to the user's database instance.
//!
//! DuckDB hands an extension its database handle only while the entry point runs, so every connection the
//! extension will use is opened there. Each call to a mentat function borrows one connection for its
//! duration, so independent callers run in parallel and one user query may call mentat functions several
//! times (a join of two `mentat_q` calls) without waiting on itself. A call that finds all connections busy
//! waits up to [`WAIT`] and then fails with an error that says so.

use duckdb::Connection;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// Connections opened at load time.
pub const SIZE: usize = 32;
/// How long a call waits for a free connection.
pub const WAIT: Duration = Duration::from_secs(60);

/// A fixed set of connections to one database instance.
pub struct Pool {
    free: Mutex<Vec<Connection>>,
    available: Condvar,
}

/// A borrowed connection, returned to the pool on drop.
pub struct PooledConnection<'p> {
    pool: &'p Pool,
    conn: Option<Connection>,
}

impl Pool {
    /// Opens `size` connections next to `first` (which is kept too).
    pub fn open(first: Connection, size: usize) -> duckdb::Result<Pool> {
        let mut free = Vec::with_capacity(size);
        for _ in 1..size {
            free.push(first.try_clone()?);
        }
        free.push(first);
        for conn in &free {
            storage::stage::ensure_tables(conn).map_err(|e| match e {
                storage::StorageError::DuckDb(d) => d,
                other => duckdb::Error::InvalidParameterName(other.to_string()),
            })?;
        }
        Ok(Pool { free: Mutex::new(free), available: Condvar::new() })
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Connection>> {
        self.free.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Borrows a connection, waiting up to [`WAIT`] for one.
    pub fn get(&self) -> Result<PooledConnection<'_>, String> {
        let mut free = self.lock();
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            if let Some(conn) = free.pop() {
                return Ok(PooledConnection { pool: self, conn: Some(conn) });
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                return Err(format!("all {SIZE} mentat connections stayed busy for {WAIT:?}"));
            }
            free = self.available.wait_timeout(free, deadline - now).unwrap_or_else(|p| p.into_inner()).0;
        }
    }
}

impl std::ops::Deref for PooledConnection<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.conn.as_ref().expect("a pooled connection is present until drop")
    }
}

impl Drop for PooledConnection<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            // A call that failed half-way must not leave a transaction open on a shared connection.
            if conn.is_autocommit() {
                self.pool.lock().push(conn);
            } else {
                let _ = conn.execute_batch("ROLLBACK");
                self.pool.lock().push(conn);
            }
            self.pool.available.notify_one();
        }
    }
}
