//! The storage layer's one error type.

use thiserror::Error;

/// Every error the store and the transactor report. Messages name the offending EDN form or datom, so that a
/// user reading a DuckDB error knows what to fix; a failed transaction leaves nothing behind.
#[derive(Debug, Error)]
pub enum StorageError {
    /// The EDN text could not be parsed; `form` is the text's first 200 characters.
    #[error("malformed EDN at line {row}, column {col}: {message} in `{form}`")]
    Edn { row: usize, col: usize, message: String, form: String },
    /// A transaction form has a shape the transactor does not accept.
    #[error("invalid transaction form {form}: {reason}")]
    BadForm { form: String, reason: String },
    /// An attribute ident that the schema does not know.
    #[error("unknown attribute {ident} in {form}")]
    UnknownAttribute { ident: String, form: String },
    /// An ident used as an entity that no entity has.
    #[error("unknown ident {ident} in {form}")]
    UnknownIdent { ident: String, form: String },
    /// A value whose type does not match the attribute's `:db/valueType`.
    #[error("value {value} does not match {attribute} of type {expected} in {form}")]
    WrongType { value: String, attribute: String, expected: String, form: String },
    /// A lookup ref that cannot be resolved.
    #[error("lookup ref {lookup_ref}: {reason}")]
    LookupRef { lookup_ref: String, reason: String },
    /// Two upserts of one tempid that reach different entities.
    #[error("tempid {tempid} upserts to two entities, {first} and {second}")]
    UpsertConflict { tempid: String, first: i64, second: i64 },
    /// A `:db/unique` value asserted for a second entity.
    #[error("unique conflict: {attribute} {value} is already held by entity {holder}, asserted for entity {entity} in {form}")]
    UniqueConflict { attribute: String, value: String, holder: i64, entity: i64, form: String },
    /// A transaction that contradicts itself (two values for a cardinality-one attribute, add and retract of one datom).
    #[error("conflicting datoms in one transaction: {0}")]
    Conflict(String),
    /// A `:db/cas` whose expected value is not the current one.
    #[error("compare-and-swap failed for {form}: current value is {current}")]
    CasFailed { form: String, current: String },
    /// A schema installation or alteration that Mentat's rules forbid.
    #[error("schema error for {attribute}: {reason}")]
    Schema { attribute: String, reason: String },
    /// A nested map with no way to reach it (Datomic's dangling-entity rule).
    #[error("nested map {form} under {attribute} is a dangling entity: the attribute is not a component and the map has no :db/id and no :db.unique/identity attribute")]
    DanglingEntity { form: String, attribute: String },
    /// A store name that cannot be parsed, or a store that does not exist.
    #[error("store {0}")]
    Store(String),
    /// The caller interrupted the call before it committed; nothing was written.
    #[error("interrupted: the call was rolled back, nothing was written")]
    Interrupted,
    /// An error from DuckDB while reading or writing the store.
    #[error("DuckDB: {0}")]
    DuckDb(#[from] duckdb::Error),
}

/// Result alias for the storage layer.
pub type Result<T> = std::result::Result<T, StorageError>;

impl StorageError {
    /// A [`StorageError::Edn`] for `text`, which `edn-format` refused with `e`.
    pub fn edn(text: &str, e: &planner::parse::EdnError) -> StorageError {
        StorageError::Edn {
            row: e.line,
            col: e.column,
            message: e.reason.clone(),
            form: text.chars().take(200).map(|c| if c.is_control() { ' ' } else { c }).collect(),
        }
    }

    /// A [`StorageError::BadForm`] for an EDN form.
    pub fn bad_form(form: &edn_format::Value, reason: impl Into<String>) -> StorageError {
        StorageError::BadForm { form: planner::error::edn_text(form), reason: reason.into() }
    }
}
