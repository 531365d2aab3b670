//! The schema cache: the one value shared by the planner and the storage layer.
//!
//! A plain value (ident <-> entid, value type, cardinality, uniqueness, index, fulltext, component) that
//! `storage` builds from the store's bootstrap attribute tables at open time (O(schema)) and passes into the
//! planner. Planner tests build one by hand with [`Schema::with_attribute`].

use std::collections::HashMap;
use std::fmt;

/// An entity id (Datomic/Mentat "entid"): a signed 64-bit integer, allocated per partition.
pub type Entid = i64;

/// The value type of an attribute (`:db/valueType`), following Mentat's set of types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ValueType {
    Ref,
    Keyword,
    Long,
    Double,
    String,
    Boolean,
    Instant,
    Uuid,
    Uri,
    Bytes,
}

impl ValueType {
    /// Every value type, in a fixed order.
    pub const ALL: [ValueType; 10] = [
        ValueType::Ref,
        ValueType::Keyword,
        ValueType::Long,
        ValueType::Double,
        ValueType::String,
        ValueType::Boolean,
        ValueType::Instant,
        ValueType::Uuid,
        ValueType::Uri,
        ValueType::Bytes,
    ];

    /// The ident of this type in the schema, e.g. `:db.type/string`.
    pub fn ident(self) -> &'static str {
        match self {
            ValueType::Ref => ":db.type/ref",
            ValueType::Keyword => ":db.type/keyword",
            ValueType::Long => ":db.type/long",
            ValueType::Double => ":db.type/double",
            ValueType::String => ":db.type/string",
            ValueType::Boolean => ":db.type/boolean",
            ValueType::Instant => ":db.type/instant",
            ValueType::Uuid => ":db.type/uuid",
            ValueType::Uri => ":db.type/uri",
            ValueType::Bytes => ":db.type/bytes",
        }
    }

    /// Parses a `:db.type/...` ident.
    pub fn from_ident(ident: &str) -> Option<ValueType> {
        ValueType::ALL.into_iter().find(|t| t.ident() == ident)
    }

    /// The DuckDB column type that holds values of this type in the datom tables.
    /// Keywords are stored as their text with the leading colon (`":state/open"`).
    pub fn sql_type(self) -> &'static str {
        match self {
            ValueType::Ref | ValueType::Long => "BIGINT",
            ValueType::Keyword | ValueType::String | ValueType::Uri => "VARCHAR",
            ValueType::Double => "DOUBLE",
            ValueType::Boolean => "BOOLEAN",
            ValueType::Instant => "TIMESTAMPTZ",
            ValueType::Uuid => "UUID",
            ValueType::Bytes => "BLOB",
        }
    }

    /// A short lowercase name: `ref`, `keyword`, `long`, ...
    pub fn name(self) -> &'static str {
        &self.ident()[9..]
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.ident())
    }
}

/// `:db/unique` of an attribute.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unique {
    /// `:db.unique/value`: a second entity asserting the same value is an error.
    Value,
    /// `:db.unique/identity`: a second assertion of the same value upserts into the existing entity.
    Identity,
}

/// One attribute of the schema.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attribute {
    pub entid: Entid,
    /// The ident with its leading colon, e.g. `:user/email`.
    pub ident: String,
    pub value_type: ValueType,
    /// `:db.cardinality/many` when true, `:db.cardinality/one` otherwise.
    pub many: bool,
    pub unique: Option<Unique>,
    /// `:db/index` (always true for unique attributes).
    pub index: bool,
    pub fulltext: bool,
    pub component: bool,
    pub doc: Option<String>,
}

impl Attribute {
    /// A cardinality-one, non-unique, unindexed attribute: the starting point for tests and schema code.
    pub fn new(entid: Entid, ident: &str, value_type: ValueType) -> Attribute {
        Attribute {
            entid,
            ident: ident.to_string(),
            value_type,
            many: false,
            unique: None,
            index: false,
            fulltext: false,
            component: false,
            doc: None,
        }
    }
}

/// The schema cache: every ident and every attribute of one store.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Schema {
    ident_to_entid: HashMap<String, Entid>,
    entid_to_ident: HashMap<Entid, String>,
    attributes: HashMap<Entid, Attribute>,
}

impl Schema {
    /// An empty schema (no idents, no attributes).
    pub fn new() -> Schema {
        Schema::default()
    }

    /// Registers an ident (with its leading colon) for an entid, replacing any earlier ident of that entid.
    pub fn add_ident(&mut self, ident: &str, entid: Entid) {
        if let Some(old) = self.entid_to_ident.insert(entid, ident.to_string()) {
            self.ident_to_entid.remove(&old);
        }
        self.ident_to_entid.insert(ident.to_string(), entid);
    }

    /// Removes an ident.
    pub fn remove_ident(&mut self, ident: &str) {
        if let Some(e) = self.ident_to_entid.remove(ident) {
            self.entid_to_ident.remove(&e);
        }
    }

    /// Registers (or replaces) an attribute and its ident.
    pub fn add_attribute(&mut self, attribute: Attribute) {
        self.add_ident(&attribute.ident.clone(), attribute.entid);
        self.attributes.insert(attribute.entid, attribute);
    }

    /// Builder form of [`Schema::add_attribute`], for tests.
    pub fn with_attribute(mut self, attribute: Attribute) -> Schema {
        self.add_attribute(attribute);
        self
    }

    /// The entid named by an ident (`:user/email`), if any.
    pub fn entid(&self, ident: &str) -> Option<Entid> {
        self.ident_to_entid.get(ident).copied()
    }

    /// The ident of an entid, if it has one.
    pub fn ident(&self, entid: Entid) -> Option<&str> {
        self.entid_to_ident.get(&entid).map(String::as_str)
    }

    /// The attribute with this entid, if the entid is an attribute.
    pub fn attribute(&self, entid: Entid) -> Option<&Attribute> {
        self.attributes.get(&entid)
    }

    /// The attribute named by an ident, if the ident names an attribute.
    pub fn attribute_by_ident(&self, ident: &str) -> Option<&Attribute> {
        self.entid(ident).and_then(|e| self.attributes.get(&e))
    }

    /// All attributes, ordered by entid.
    pub fn attributes(&self) -> Vec<&Attribute> {
        let mut v: Vec<&Attribute> = self.attributes.values().collect();
        v.sort_by_key(|a| a.entid);
        v
    }

    /// All (ident, entid) pairs, ordered by entid.
    pub fn idents(&self) -> Vec<(&str, Entid)> {
        let mut v: Vec<(&str, Entid)> = self.entid_to_ident.iter().map(|(e, i)| (i.as_str(), *e)).collect();
        v.sort_by_key(|p| p.1);
        v
    }
}
