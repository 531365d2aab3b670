//! The extension's own connections to the user's database instance.
//!
//! DuckDB hands an extension its database handle only while the entry point runs, so every connection the
//! extension will use is opened there. Each call to a mentat function borrows one connection for its
//! duration, so independent callers run in parallel and one user query may call mentat functions several
//! times (a join of two `mentat_q` calls) without waiting on itself. The exception is a transaction that waits in
//! its store's group-commit queue: only the group's leader borrows one (`functions.rs` `queued_write`), so more
//! writers than connections can wait in one group. A call that finds all connections busy
//! waits up to [`WAIT`] and then fails with an error that says so.
//!
//! A borrowed connection takes on the caller's session first ([`PooledConnection::adopt`]): its time zone, so that
//! the casts inside mentat's statements give what they give in the caller's session, and a watch that forwards
//! the caller's interrupt to it (`session.rs`).

use duckdb::Connection;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// Connections opened at load time.
pub const SIZE: usize = 32;
/// How long a call waits for a free connection.
pub const WAIT: Duration = Duration::from_secs(60);

/// A fixed set of connections to one database instance.
pub struct Pool {
    free: Mutex<Vec<Zoned>>,
    available: Condvar,
    /// Borrows after which a connection's staging tables are made again (0: never; [`storage::stage::renew_after`]).
    renew: u32,
}

/// A connection, the `TimeZone` it was last set to (None: never set, the database's default), and whether its
/// transactor staging tables exist yet.
struct Zoned {
    conn: Connection,
    zone: Option<String>,
    staged: bool,
    /// Borrows since its staging tables were made ([`storage::stage::renew_after`]).
    uses: u32,
}

/// A borrowed connection, returned to the pool on drop.
pub struct PooledConnection<'p> {
    pool: &'p Pool,
    conn: Option<Zoned>,
    /// Forwards the caller's interrupt while the connection is borrowed; dropped before the connection goes back.
    watch: Option<crate::session::Watch>,
}

/// The statement that turns the Python client's replacement scans off on one of mentat's own connections (see
/// [`no_host_replacements`]).
pub const NO_PYTHON_REPLACEMENTS: &std::ffi::CStr = c"SET python_enable_replacements = false";

/// Turns the host's replacement scans off on one of mentat's own connections, where the host has them.
///
/// DuckDB's Python client looks up a table name that the catalog does not hold among the Python variables of the
/// caller's stack, and takes the GIL to do so. mentat's connections run on threads of their own (the indexer, a
/// background read-in) and name only mentat's tables; a table dropped under them (`DROP SCHEMA ... CASCADE` of a
/// store) sent such a lookup into Python from a thread that Python does not know, which during the interpreter's
/// shutdown aborted the process ("FATAL: exception not rethrown": Python ends a thread that asks for the GIL then,
/// and DuckDB's binder catches the unwinding). With the lookup off, the statement fails with DuckDB's own "table
/// does not exist". Elsewhere (the CLI, the C API) the setting does not exist and nothing is done.
pub fn no_host_replacements(conn: &Connection) {
    let _ = conn.execute_batch(NO_PYTHON_REPLACEMENTS.to_str().unwrap_or_default());
}

impl Pool {
    /// Opens `size` connections next to `first` (which is kept too).
    ///
    /// A connection's staging tables ([`storage::stage::ensure_tables`], two `CREATE TEMP TABLE`s) are made when
    /// it is first borrowed, not here: for the 32 connections that was about 40 ms of every `LOAD mentat`
    /// (2026-12-03, perf of a cold start at scale s), paid again by every new process. So is its `SET`
    /// ([`no_host_replacements`]): one `SET` costs about 0.3 ms, and this pool's and the query pool's 64 of them
    /// were about 40% of the entry point's samples (2026-12-07, perf of `LOAD mentat` into a new in-memory
    /// database from Python).
    pub fn open(first: Connection, size: usize) -> duckdb::Result<Pool> {
        let mut free = Vec::with_capacity(size);
        for _ in 1..size {
            free.push(first.try_clone()?);
        }
        free.push(first);
        let free = free.into_iter().map(|conn| Zoned { conn, zone: None, staged: false, uses: 0 }).collect();
        Ok(Pool { free: Mutex::new(free), available: Condvar::new(), renew: storage::stage::renew_after() })
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Zoned>> {
        self.free.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Borrows a connection for `caller`: waits up to [`WAIT`] for one, then has it adopt the caller's session.
    pub fn get_for(&self, caller: &crate::session::Caller) -> Result<PooledConnection<'_>, String> {
        let mut conn = self.get()?;
        conn.adopt(caller)?;
        Ok(conn)
    }

    /// Borrows a connection, waiting up to [`WAIT`] for one. A connection borrowed for the first time has the
    /// host's replacement scans turned off and gets its staging tables first, and every
    /// [`storage::stage::renew_after`] borrows they are made again (an error of DuckDB's making them is returned,
    /// and the connection goes back).
    pub fn get(&self) -> Result<PooledConnection<'_>, String> {
        let mut free = self.lock();
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            if let Some(conn) = free.pop() {
                drop(free);
                let mut borrowed = PooledConnection { pool: self, conn: Some(conn), watch: None };
                let zoned = borrowed.conn.as_mut().ok_or("no connection")?;
                if !zoned.staged || (self.renew > 0 && zoned.uses >= self.renew) {
                    let ready = if zoned.staged {
                        storage::stage::renew_tables(&zoned.conn)
                    } else {
                        no_host_replacements(&zoned.conn);
                        storage::stage::ensure_tables(&zoned.conn)
                    };
                    ready.map_err(|e| format!("mentat could not ready its connection: {e}"))?;
                    zoned.staged = true;
                    zoned.uses = 0;
                }
                zoned.uses += 1;
                return Ok(borrowed);
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                return Err(format!("all {SIZE} mentat connections stayed busy for {WAIT:?}"));
            }
            free = self.available.wait_timeout(free, deadline - now).unwrap_or_else(|p| p.into_inner()).0;
        }
    }
}

impl PooledConnection<'_> {
    /// Takes on the caller's time zone (one `SET` when it differs from the connection's) and forwards the
    /// caller's interrupt to this connection until it is returned.
    pub fn adopt(&mut self, caller: &crate::session::Caller) -> Result<(), String> {
        let zoned = self.conn.as_mut().ok_or("no connection")?;
        if let Some(zone) = &caller.time_zone {
            if zoned.zone.as_ref() != Some(zone) {
                zoned
                    .conn
                    .execute_batch(&format!("SET TimeZone = {}", planner::layout::quote_str(zone)))
                    .map_err(|e| format!("mentat could not take on the time zone {zone}: {e}"))?;
                zoned.zone = Some(zone.clone());
            }
        }
        let target = crate::session::Target::Handle(zoned.conn.interrupt_handle());
        self.watch = Some(crate::session::Watch::start(caller, target));
        Ok(())
    }

    /// Holds the caller's interrupt back from this connection while it commits (see [`crate::session::Watch::holder`]);
    /// a no-op when no caller was adopted.
    pub fn holder(&self) -> impl Fn(bool) + Send + Sync + 'static {
        let watch = self.watch.as_ref().map(|w| w.holder());
        move |on| {
            if let Some(w) = &watch {
                w(on)
            }
        }
    }
}

impl std::ops::Deref for PooledConnection<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        &self.conn.as_ref().expect("a pooled connection is present until drop").conn
    }
}

impl Drop for PooledConnection<'_> {
    fn drop(&mut self) {
        self.watch = None;
        if let Some(zoned) = self.conn.take() {
            // Every transaction on it was ended by storage::in_transaction (or storage::Open's drop, panics
            // included), so it goes back with none open.
            self.pool.lock().push(zoned);
            self.pool.available.notify_one();
        }
    }
}
