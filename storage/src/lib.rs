//! The datom store: layout, schema cache, transactor.
//!
//! Everything here runs over a `duckdb::Connection` that the extension hands in; the crate itself never
//! decides which DuckDB it talks to.

pub mod error;
pub mod import;
pub mod parquet;
pub mod txparse;
pub mod value;

pub use error::{Result, StorageError};
pub mod stage;
pub mod store;
pub mod trace;
pub mod transactor;
