//! The datom layout: where a store keeps its datoms, named once for both the planner and the storage layer.
//!
//! A store is a DuckDB schema (`mentat` by default, or `catalog.schema`). Inside it every attribute has
//! two tables, named by the attribute's entid so that renaming an ident never moves data:
//!
//! * `cur_<aid>(e BIGINT, v <type>, tx BIGINT)`: the current state, one row per datom that is true now.
//! * `hist_<aid>(e BIGINT, v <type>, tx BIGINT, retracted_tx BIGINT)`: the retracted datoms, one row per
//!   assertion (made in `tx`) that was later retracted (in `retracted_tx`).
//!
//! Together they hold every assertion and retraction ever made: an assertion lives in `cur_` while it is
//! true and moves to `hist_` with its retraction's tx when it is retracted.
//!
//! `<type>` is [`ValueType::sql_type`]. Current state never holds retracted datoms, so "now" queries never
//! scan history. `partitions(ident, start, next)` holds the partition marks; `meta(key, value)` the layout
//! version. The bootstrap attributes (`:db/ident`, `:db/valueType`, ..., `:db/txInstant`) are attributes like any
//! other with their own tables, so the schema is queryable with Datalog and the schema cache is read from a
//! handful of small tables at open time.

use crate::schema::{Attribute, Entid, Schema, Unique, ValueType};
use std::fmt;

/// Start of `:db.part/db` (schema attributes and idents).
pub const PART_DB_START: Entid = 0;
/// First entid of `:db.part/db` given to user-installed schema.
pub const PART_DB_USER_START: Entid = 100;
/// Start of `:db.part/user` (ordinary entities), as in Mentat.
pub const PART_USER_START: Entid = 0x10000;
/// Start of `:db.part/tx` (transaction entities): 2^40, so that user entids never reach it.
pub const PART_TX_START: Entid = 1 << 40;

pub const DB_IDENT: Entid = 1;
pub const DB_VALUE_TYPE: Entid = 2;
pub const DB_CARDINALITY: Entid = 3;
pub const DB_UNIQUE: Entid = 4;
pub const DB_INDEX: Entid = 5;
pub const DB_FULLTEXT: Entid = 6;
pub const DB_IS_COMPONENT: Entid = 7;
pub const DB_DOC: Entid = 8;
pub const DB_TX_INSTANT: Entid = 9;
pub const DB_PART_DB: Entid = 10;
pub const DB_PART_USER: Entid = 11;
pub const DB_PART_TX: Entid = 12;
/// `:db.type/ref` .. `:db.type/bytes` are 13 .. 22, in [`ValueType::ALL`] order.
pub const DB_TYPE_FIRST: Entid = 13;
pub const DB_CARDINALITY_ONE: Entid = 23;
pub const DB_CARDINALITY_MANY: Entid = 24;
pub const DB_UNIQUE_VALUE: Entid = 25;
pub const DB_UNIQUE_IDENTITY: Entid = 26;
/// The value types added after the first ten (`:db.type/bigint`, `bigdec`, `float`, `symbol`) are 27 .. 30, in
/// [`ValueType::ALL`] order: the first ten keep the entids that stores written before them hold.
pub const DB_TYPE_SECOND: Entid = 27;
/// How many value types have entids from [`DB_TYPE_FIRST`] on.
const FIRST_TYPES: usize = 10;
/// `:db.type/tuple` is 31 (after the four of [`DB_TYPE_SECOND`]); the tuple schema attributes follow it.
pub const DB_TUPLE_TYPE: Entid = 32;
/// `:db/tupleTypes`: a homogeneous tuple of value type refs.
pub const DB_TUPLE_TYPES: Entid = 33;
/// `:db/tupleAttrs`: a homogeneous tuple of attribute refs.
pub const DB_TUPLE_ATTRS: Entid = 34;

/// The entid of a value type's ident (`:db.type/string`, ...).
pub fn value_type_entid(t: ValueType) -> Entid {
    let i = ValueType::ALL.iter().position(|x| *x == t).unwrap_or(0);
    if i < FIRST_TYPES {
        DB_TYPE_FIRST + i as Entid
    } else {
        DB_TYPE_SECOND + (i - FIRST_TYPES) as Entid
    }
}

/// The value type whose ident has this entid.
pub fn value_type_of_entid(e: Entid) -> Option<ValueType> {
    ValueType::ALL.into_iter().find(|t| value_type_entid(*t) == e)
}

/// The schema every store starts with: the bootstrap attributes and the idents of partitions, value types,
/// cardinalities and uniqueness kinds (Mentat's bootstrap, less what this layout does not use).
pub fn bootstrap_schema() -> Schema {
    let mut s = Schema::new();
    let attr = |e, i: &str, t| Attribute::new(e, i, t);
    let mut ident = attr(DB_IDENT, ":db/ident", ValueType::Keyword);
    ident.unique = Some(Unique::Identity);
    ident.index = true;
    s.add_attribute(ident);
    s.add_attribute(attr(DB_VALUE_TYPE, ":db/valueType", ValueType::Ref));
    s.add_attribute(attr(DB_CARDINALITY, ":db/cardinality", ValueType::Ref));
    s.add_attribute(attr(DB_UNIQUE, ":db/unique", ValueType::Ref));
    s.add_attribute(attr(DB_INDEX, ":db/index", ValueType::Boolean));
    s.add_attribute(attr(DB_FULLTEXT, ":db/fulltext", ValueType::Boolean));
    s.add_attribute(attr(DB_IS_COMPONENT, ":db/isComponent", ValueType::Boolean));
    s.add_attribute(attr(DB_DOC, ":db/doc", ValueType::String));
    let mut tx_instant = attr(DB_TX_INSTANT, ":db/txInstant", ValueType::Instant);
    tx_instant.index = true;
    s.add_attribute(tx_instant);
    s.add_attribute(attr(DB_TUPLE_TYPE, ":db/tupleType", ValueType::Ref));
    for (e, ident) in [(DB_TUPLE_TYPES, ":db/tupleTypes"), (DB_TUPLE_ATTRS, ":db/tupleAttrs")] {
        let mut a = attr(e, ident, ValueType::Tuple);
        a.tuple = Some(crate::schema::TupleSpec::Homogeneous(ValueType::Ref));
        s.add_attribute(a);
    }
    s.add_ident(":db.part/db", DB_PART_DB);
    s.add_ident(":db.part/user", DB_PART_USER);
    s.add_ident(":db.part/tx", DB_PART_TX);
    for t in ValueType::ALL {
        s.add_ident(t.ident(), value_type_entid(t));
    }
    s.add_ident(":db.cardinality/one", DB_CARDINALITY_ONE);
    s.add_ident(":db.cardinality/many", DB_CARDINALITY_MANY);
    s.add_ident(":db.unique/value", DB_UNIQUE_VALUE);
    s.add_ident(":db.unique/identity", DB_UNIQUE_IDENTITY);
    s
}

/// A value of a bootstrap datom ([`bootstrap_datoms`]).
#[derive(Clone, Debug, PartialEq)]
pub enum BootValue {
    /// An entid (refs) .
    Ref(Entid),
    /// A keyword, as text with its colon.
    Keyword(String),
    Bool(bool),
    /// The bootstrap transaction's `:db/txInstant`: 1970-01-01T00:00:00Z.
    Epoch,
}

impl BootValue {
    /// The value as a DuckDB literal.
    pub fn sql(&self) -> String {
        match self {
            BootValue::Ref(e) => e.to_string(),
            BootValue::Keyword(k) => quote_str(k),
            BootValue::Bool(b) => b.to_string(),
            BootValue::Epoch => "make_timestamptz(0::BIGINT)".into(),
        }
    }
}

/// The datoms of the bootstrap transaction (tx [`PART_TX_START`], at 1970-01-01) that every store starts with, as
/// `(attribute, entity, value)`: every ident of [`bootstrap_schema`], every bootstrap attribute's value type,
/// cardinality, uniqueness and index flag, and the transaction's `:db/txInstant`. Written by the store's creation
/// and read as the empty database by a query against a store that does not exist yet.
pub fn bootstrap_datoms() -> Vec<(Entid, Entid, BootValue)> {
    let boot = bootstrap_schema();
    let mut out = Vec::new();
    for (ident, e) in boot.idents() {
        out.push((DB_IDENT, e, BootValue::Keyword(ident.to_string())));
    }
    for a in boot.attributes() {
        out.push((DB_VALUE_TYPE, a.entid, BootValue::Ref(value_type_entid(a.value_type))));
        let card = if a.many { DB_CARDINALITY_MANY } else { DB_CARDINALITY_ONE };
        out.push((DB_CARDINALITY, a.entid, BootValue::Ref(card)));
        if let Some(u) = a.unique {
            let u = match u {
                Unique::Value => DB_UNIQUE_VALUE,
                Unique::Identity => DB_UNIQUE_IDENTITY,
            };
            out.push((DB_UNIQUE, a.entid, BootValue::Ref(u)));
        }
        if a.index {
            out.push((DB_INDEX, a.entid, BootValue::Bool(true)));
        }
        if let Some(crate::schema::TupleSpec::Homogeneous(t)) = &a.tuple {
            out.push((DB_TUPLE_TYPE, a.entid, BootValue::Ref(value_type_entid(*t))));
        }
    }
    out.push((DB_TX_INSTANT, PART_TX_START, BootValue::Epoch));
    out
}

/// Quotes an SQL identifier for DuckDB: wrapped in double quotes, inner quotes doubled.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Quotes an SQL string literal for DuckDB: wrapped in single quotes, inner quotes doubled. For text that may
/// hold a NUL byte (a datom value, an input), use [`string_value`].
pub fn quote_str(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// A VARCHAR value as an SQL expression that keeps every byte of it. Statements cross DuckDB's C API as
/// NUL-terminated text, so a NUL byte cannot stand inside a literal: such a value becomes the concatenation
/// `('a' || chr(0) || 'b')`; any other value is its plain literal ([`quote_str`]).
pub fn string_value(s: &str) -> String {
    if !s.contains('\0') {
        return quote_str(s);
    }
    let parts: Vec<String> = s.split('\0').map(quote_str).collect();
    format!("({})", parts.join(" || chr(0) || "))
}

/// Where a store lives: an optional catalog (attached database) and a schema.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StoreName {
    pub catalog: Option<String>,
    pub schema: String,
}

/// The default store: schema `mentat` in the default database.
pub const DEFAULT_STORE: &str = "mentat";

impl StoreName {
    /// Parses `schema` or `catalog.schema` (either part may be double-quoted). Errors on an empty name or
    /// more than two parts.
    pub fn parse(s: &str) -> Result<StoreName, String> {
        let parts = split_dotted(s.trim())?;
        match parts.as_slice() {
            [schema] => Ok(StoreName { catalog: None, schema: schema.clone() }),
            [catalog, schema] => Ok(StoreName { catalog: Some(catalog.clone()), schema: schema.clone() }),
            _ => Err(format!("store name {s:?} must be 'schema' or 'catalog.schema'")),
        }
    }

    /// The quoted schema reference, `"mentat"` or `"db"."mentat"`.
    pub fn sql(&self) -> String {
        match &self.catalog {
            Some(c) => format!("{}.{}", quote_ident(c), quote_ident(&self.schema)),
            None => quote_ident(&self.schema),
        }
    }

    /// A quoted table reference inside the store: `"mentat"."cur_65"`.
    pub fn table(&self, table: &str) -> String {
        format!("{}.{}", self.sql(), quote_ident(table))
    }

    /// The current-state table of an attribute.
    pub fn current(&self, aid: Entid) -> String {
        self.table(&current_table_name(aid))
    }

    /// The history table of an attribute.
    pub fn history(&self, aid: Entid) -> String {
        self.table(&history_table_name(aid))
    }
}

impl fmt::Display for StoreName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.catalog {
            Some(c) => write!(f, "{c}.{}", self.schema),
            None => f.write_str(&self.schema),
        }
    }
}

/// Unquoted name of the current-state table of attribute `aid`.
pub fn current_table_name(aid: Entid) -> String {
    format!("cur_{aid}")
}

/// Unquoted name of the history table of attribute `aid`.
pub fn history_table_name(aid: Entid) -> String {
    format!("hist_{aid}")
}

fn split_dotted(s: &str) -> Result<Vec<String>, String> {
    let mut parts = Vec::new();
    let mut cur = String::new();
    let mut chars = s.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                chars.next();
                cur.push('"');
            }
            '"' => quoted = !quoted,
            '.' if !quoted => parts.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    if quoted {
        return Err(format!("store name {s:?} has an unclosed quote"));
    }
    parts.push(cur);
    if parts.iter().any(|p| p.is_empty()) {
        return Err(format!("store name {s:?} has an empty part"));
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_names() {
        assert_eq!(StoreName::parse("mentat").unwrap().sql(), "\"mentat\"");
        let s = StoreName::parse("db.\"my.store\"").unwrap();
        assert_eq!(s.catalog.as_deref(), Some("db"));
        assert_eq!(s.schema, "my.store");
        assert_eq!(s.current(65), "\"db\".\"my.store\".\"cur_65\"");
        assert!(StoreName::parse("a.b.c").is_err());
        assert!(StoreName::parse("").is_err());
    }

    #[test]
    fn bootstrap_types_round_trip() {
        let s = bootstrap_schema();
        for t in ValueType::ALL {
            assert_eq!(value_type_of_entid(value_type_entid(t)), Some(t));
            assert_eq!(s.entid(t.ident()), Some(value_type_entid(t)));
        }
        assert_eq!(s.attribute_by_ident(":db/ident").unwrap().unique, Some(Unique::Identity));
        assert_eq!(quote_str("it's"), "'it''s'");
        assert_eq!(string_value("it's"), "'it''s'");
        assert_eq!(string_value("a\0b'\0"), "('a' || chr(0) || 'b''' || chr(0) || '')");
    }
}
