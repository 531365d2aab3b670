//! The schema cache: the one value shared by the planner and the storage layer.
//!
//! A plain value (ident <-> entid, value type, cardinality, uniqueness, index, fulltext, component) that
//! `storage` builds from the store's bootstrap attribute tables at open time (O(schema)) and passes into the
//! planner. Planner tests build one by hand with [`Schema::with_attribute`].

use std::fmt;

/// An entity id (Datomic/Mentat "entid"): a signed 64-bit integer, allocated per partition.
pub type Entid = i64;

/// The value type of an attribute (`:db/valueType`): Mentat's set of types plus Datomic's `bigint`, `bigdec`,
/// `float` and `symbol`.
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
    /// `:db.type/bigint` (EDN `123N`): a signed integer of up to 38 digits, DuckDB `HUGEINT`, written to Parquet
    /// as DECIMAL(38,0) (Datomic's `java.math.BigInteger` has no bound; larger values are refused).
    BigInt,
    /// `:db.type/bigdec` (EDN `1.25M`): an exact decimal, DuckDB `DECIMAL(38,18)`: at most 20 digits before the
    /// point and 18 after it; values that need more are refused, never rounded. Read back at scale 18.
    BigDec,
    /// `:db.type/float`: a 32-bit IEEE float, DuckDB `FLOAT`; EDN has no float literal, so doubles and integers
    /// are rounded to the nearest float, as Datomic coerces them.
    Float,
    /// `:db.type/symbol` (EDN `foo`, `my.ns/bar`): the symbol's text, VARCHAR.
    Symbol,
    /// `:db.type/tuple`: a Datomic tuple; its element types are the attribute's [`TupleSpec`].
    Tuple,
}

impl ValueType {
    /// Every value type, in a fixed order.
    pub const ALL: [ValueType; 15] = [
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
        ValueType::BigInt,
        ValueType::BigDec,
        ValueType::Float,
        ValueType::Symbol,
        ValueType::Tuple,
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
            ValueType::BigInt => ":db.type/bigint",
            ValueType::BigDec => ":db.type/bigdec",
            ValueType::Float => ":db.type/float",
            ValueType::Symbol => ":db.type/symbol",
            ValueType::Tuple => ":db.type/tuple",
        }
    }

    /// Parses a `:db.type/...` ident.
    pub fn from_ident(ident: &str) -> Option<ValueType> {
        ValueType::ALL.into_iter().find(|t| t.ident() == ident)
    }

    /// The DuckDB column type that holds values of this type in the datom tables.
    /// Keywords are stored as their text with the leading colon (`":state/open"`). A tuple's column type depends on
    /// its attribute ([`Attribute::sql_type`]); on its own it is given as JSON.
    pub fn sql_type(self) -> &'static str {
        match self {
            ValueType::Ref | ValueType::Long => "BIGINT",
            ValueType::Keyword | ValueType::String | ValueType::Uri | ValueType::Symbol => "VARCHAR",
            ValueType::Double => "DOUBLE",
            ValueType::Boolean => "BOOLEAN",
            ValueType::Instant => "TIMESTAMPTZ",
            ValueType::Uuid => "UUID",
            ValueType::Bytes => "BLOB",
            ValueType::BigInt => "HUGEINT",
            ValueType::BigDec => BIGDEC_SQL,
            ValueType::Float => "FLOAT",
            ValueType::Tuple => "JSON",
        }
    }

    /// A short lowercase name: `ref`, `keyword`, `long`, ...
    pub fn name(self) -> &'static str {
        &self.ident()[9..]
    }

    /// The name with its article, for messages: "a long", "an instant".
    pub fn a_name(self) -> String {
        crate::types::with_article(self.name())
    }
}

/// The DuckDB type of `:db.type/bigdec` values.
pub const BIGDEC_SQL: &str = "DECIMAL(38,18)";
/// Digits after the point that a `:db.type/bigdec` value keeps.
pub const BIGDEC_SCALE: u32 = 18;

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.ident())
    }
}

/// The element types of a `:db.type/tuple` attribute, as Datomic declares them. Elements may be nil (NULL).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum TupleSpec {
    /// `:db/tupleAttrs [:a :b]`: a composite of these cardinality-one attributes of the same entity, `(entid,
    /// value type)` each, maintained by the transactor (never asserted directly). Column `STRUCT(f0 .., f1 ..)`.
    Composite(Vec<(Entid, ValueType)>),
    /// `:db/tupleType :db.type/long`: 2 to 8 values of one type. Column `<type>[]` (a DuckDB LIST).
    Homogeneous(ValueType),
    /// `:db/tupleTypes [:db.type/long :db.type/string]`: 2 to 8 values, one type per position. Column
    /// `STRUCT(f0 .., f1 ..)`.
    Heterogeneous(Vec<ValueType>),
}

impl TupleSpec {
    /// The DuckDB column type of the tuple's values.
    pub fn sql_type(&self) -> String {
        match self {
            TupleSpec::Homogeneous(t) => format!("{}[]", t.sql_type()),
            _ => {
                let fields: Vec<String> =
                    self.positions().iter().enumerate().map(|(i, t)| format!("f{i} {}", t.sql_type())).collect();
                format!("STRUCT({})", fields.join(", "))
            }
        }
    }

    /// The types of a fixed-length tuple's positions (empty for a homogeneous one).
    pub fn positions(&self) -> Vec<ValueType> {
        match self {
            TupleSpec::Composite(cs) => cs.iter().map(|c| c.1).collect(),
            TupleSpec::Heterogeneous(ts) => ts.clone(),
            TupleSpec::Homogeneous(_) => Vec::new(),
        }
    }

    /// The type of element `i` (every element for a homogeneous tuple).
    pub fn element(&self, i: usize) -> Option<ValueType> {
        match self {
            TupleSpec::Homogeneous(t) => Some(*t),
            _ => self.positions().get(i).copied(),
        }
    }
}

/// The fewest and most elements a Datomic tuple has.
pub const TUPLE_LEN: std::ops::RangeInclusive<usize> = 2..=8;

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
    /// The element types when `value_type` is [`ValueType::Tuple`].
    pub tuple: Option<TupleSpec>,
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
            tuple: None,
        }
    }

    /// The DuckDB type of the attribute's values: its value type's, or its tuple's.
    pub fn sql_type(&self) -> String {
        match &self.tuple {
            Some(t) => t.sql_type(),
            None => self.value_type.sql_type().to_string(),
        }
    }
}

/// The schema cache: every ident and every attribute of one store.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Schema {
    ident_to_entid: foldhash::HashMap<String, Entid>,
    entid_to_ident: foldhash::HashMap<Entid, String>,
    attributes: foldhash::HashMap<Entid, Attribute>,
    /// The store's fulltext stemming language (its `meta` row [`crate::fulltext::LANGUAGE_KEY`]); None is
    /// [`crate::fulltext::DEFAULT_LANGUAGE`].
    fulltext_language: Option<String>,
}

impl Schema {
    /// The stemming language of the store's fulltext analyzer (see [`crate::fulltext::Analyzer::new`]).
    pub fn fulltext_language(&self) -> &str {
        self.fulltext_language.as_deref().unwrap_or(crate::fulltext::DEFAULT_LANGUAGE)
    }

    /// Sets the stemming language the store's fulltext index was built with.
    pub fn set_fulltext_language(&mut self, language: Option<String>) {
        self.fulltext_language = language;
    }

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

    /// Whether any attribute is `:db/fulltext true`.
    pub fn has_fulltext(&self) -> bool {
        self.attributes.values().any(|a| a.fulltext)
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
