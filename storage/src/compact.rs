//! Compaction of current-state tables that deleted rows have swollen.
//!
//! **Why.** A retraction, and the replacement of a cardinality-one value, delete the datom's row from its
//! attribute's `cur_` table; DuckDB keeps a deleted row in its row group until a checkpoint vacuums it, and only
//! a *full* checkpoint vacuums (DuckDB's `RowGroupCollection::InitializeVacuumState`; never a table with an ART
//! index). A checkpoint is full only when no open transaction started before the last commit, read-only commits
//! included (`DuckTransactionManager::Checkpoint` and `GetCheckpointType`): with two or more readers that always
//! have a statement open there is no such moment, and every checkpoint, DuckDB's automatic ones and an explicit
//! `CHECKPOINT` alike, is a concurrent one that vacuums nothing. In the soak (8 readers, 1 writer that labels 500
//! issues and takes the labels off again, scale s), the labels' `cur_` table held 1.29M rows on disk for 185K live
//! ones after 3 minutes, and every scan of it read them all: the writer's transactions, which read it, fell from
//! 11.8K to 8.7K a minute (storage/README.md "Deleted rows beside steady readers").
//!
//! **What.** The indexer ([`crate::txlog`]), holding the writer lock after an apply, looks at most every
//! [`CHECK_EVERY`] at the physical size of each `cur_` table (DuckDB's `estimated_size`, deleted rows included)
//! and, where the deleted rows are at least [`MIN_DEAD`] and at least as many as the live ones, copies the live
//! rows into a new table and puts it in the old one's place, in one transaction: `CREATE TABLE`, `INSERT ...
//! SELECT`, `DROP TABLE`, `ALTER TABLE ... RENAME`, and the ART index of a unique attribute again. Readers whose
//! transactions began before it go on reading the old table (DuckDB's catalog is versioned), later ones read the
//! new one; prepared statements are bound again by DuckDB when the catalog changed. The rows keep their order (tx
//! order, which `since` prunes by) while DuckDB's `preserve_insertion_order` is on, its default. The cost is a copy
//! of the live rows under the writer lock (23 to 44 ms for 183K rows in the soak), paid only once the deleted rows
//! outnumber them.

use crate::store::{current_table_ddl, has_art_index, index_ddl, Store};
use crate::Result;
use duckdb::Connection;
use planner::layout::{current_table_name, quote_ident};
use std::time::{Duration, Instant};

/// How often the indexer looks for swollen tables at most, per store.
pub const CHECK_EVERY: Duration = Duration::from_secs(5);

/// The deleted rows below which a table is left as it is (two of DuckDB's row groups): fewer cost a scan little.
pub const MIN_DEAD: i64 = 2 * 122_880;

/// One table compacted: its attribute, and its rows before (deleted ones included) and after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compacted {
    /// The attribute's entid.
    pub attribute: i64,
    /// Rows of its `cur_` table before, deleted ones included (`estimated_size`).
    pub rows_before: i64,
    /// Rows after: the live ones.
    pub rows_after: i64,
}

/// Compacts the `cur_` tables of `store` that deleted rows have swollen (see the module docs), on `conn`, which
/// must have no transaction open; the caller holds the store's writer lock and has applied the log. Returns the
/// tables compacted. Errors: DuckDB's, the transaction of the failing table rolled back (the others stay done).
pub fn compact_swollen(conn: &Connection, store: &Store) -> Result<Vec<Compacted>> {
    let name = &store.name;
    let catalog = name.catalog.clone().unwrap_or_default();
    // physical rows (deleted ones included), per current-state table
    let sizes: Vec<(String, i64)> = conn
        .prepare_cached(
            "SELECT table_name, estimated_size FROM duckdb_tables() WHERE schema_name = ? \
             AND (? = '' AND database_name = current_database() OR database_name = ?) \
             AND table_name LIKE 'cur\\_%' ESCAPE '\\' AND estimated_size >= ?",
        )?
        .query_map(duckdb::params![name.schema, catalog, catalog, MIN_DEAD], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<std::result::Result<_, _>>()?;
    let schema = store.schema();
    let mut done = Vec::new();
    for (table, physical) in sizes {
        let Some(attr) =
            table.strip_prefix("cur_").and_then(|a| a.parse::<i64>().ok()).and_then(|a| schema.attribute(a))
        else {
            continue;
        };
        let cur = name.current(attr.entid);
        let live: i64 = conn.query_row(&format!("SELECT count(*) FROM {cur}"), [], |r| r.get(0))?;
        let dead = physical - live;
        if dead < MIN_DEAD || dead < live {
            continue;
        }
        let new_name = format!("{}_compacting", current_table_name(attr.entid));
        let new = name.table(&new_name);
        let create = current_table_ddl(&new, attr);
        crate::in_transaction(conn, || {
            conn.execute_batch(&format!(
                "{create}; INSERT INTO {new} SELECT e, v, tx FROM {cur}; DROP TABLE {cur}; \
                 ALTER TABLE {new} RENAME TO {}",
                quote_ident(&current_table_name(attr.entid))
            ))?;
            if has_art_index(attr) {
                conn.execute_batch(&index_ddl(name, attr.entid))?;
            }
            Ok(())
        })?;
        done.push(Compacted { attribute: attr.entid, rows_before: physical, rows_after: live });
    }
    Ok(done)
}

/// Whether [`CHECK_EVERY`] has passed since `store` was last looked at (or it never was); if so, the look is now.
pub fn due(store: &Store) -> bool {
    let mut last = store.compact_looked.lock().unwrap_or_else(|p| p.into_inner());
    let now = Instant::now();
    if last.is_some_and(|t| now.duration_since(t) < CHECK_EVERY) {
        return false;
    }
    *last = Some(now);
    true
}
