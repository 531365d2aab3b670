//! Value types of variables and constants, and how EDN constants become typed SQL literals.
//!
//! Type rules (following Datomic and Mentat):
//! * a pattern's value position has the attribute's type; entity and tx positions are refs;
//! * a keyword constant in a ref position is resolved to its entid at compile time; in a keyword
//!   position it is the keyword's text (`':state/open'`);
//! * a constant whose type cannot match a position makes the pattern impossible (the query is
//!   pruned to an empty result, as Mentat does), it is not an error;
//! * comparisons need comparable classes (numbers and refs, strings, keywords, instants, ...):
//!   comparing a string with a long is a [`PlanError::TypeMismatch`];
//! * a variable bound to attributes of several SQL types (the unbound attribute pattern `[?e ?a ?v]`)
//!   gets the fallback type [`Ty::Mixed`]: its values are cast to VARCHAR text.

use crate::error::{show, PlanError};
use crate::schema::{Entid, ValueType};
use crate::sql::{Expr, Lit};
use edn_format::Value;

/// The type of a variable or expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ty {
    Value(ValueType),
    /// Values of several attribute types, cast to VARCHAR (the documented fallback).
    Mixed,
    /// A Datomic tuple, as `STRUCT(f0 ..., f1 ...)`.
    Tuple(Vec<Ty>),
    /// A list of values (aggregates like `distinct` and `(min n ?x)`).
    List(Box<Ty>),
}

/// The order key of a keyword held as text (`:ns/name` or `:name`): Clojure's and Datomic's keyword order,
/// keywords without a namespace first, then by namespace, then by name (`:a/b` < `:a-/b`, where the text order
/// puts `-` before `/`). A STRUCT `{h: has a namespace, n: namespace, m: name}`, compared field by field; the
/// namespace ends at the first `/`, as Clojure's reader splits it.
pub fn keyword_order(k: Expr) -> Expr {
    use crate::sql::{BinOp, Name};
    let slash = Expr::Func("strpos", vec![k.clone(), Expr::Lit(Lit::Str("/".into()))]);
    let has = Expr::bin(BinOp::Gt, slash.clone(), Expr::int(1));
    let ns = Expr::Func("substr", vec![k.clone(), Expr::int(2), Expr::bin(BinOp::Sub, slash.clone(), Expr::int(2))]);
    let name_ns = Expr::Func("substr", vec![k.clone(), Expr::bin(BinOp::Add, slash, Expr::int(1))]);
    let name = Expr::Func("substr", vec![k, Expr::int(2)]);
    Expr::Struct(vec![
        (Name::new("h"), has.clone()),
        (
            Name::new("n"),
            Expr::Case {
                whens: vec![(has.clone(), ns)],
                otherwise: Some(Box::new(Expr::Lit(Lit::Str(String::new())))),
            },
        ),
        (Name::new("m"), Expr::Case { whens: vec![(has, name_ns)], otherwise: Some(Box::new(name)) }),
    ])
}

/// Comparison classes: values compare only within one class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    Number,
    Text,
    Keyword,
    Boolean,
    Instant,
    Uuid,
    Bytes,
    Tuple,
    /// Mixed values compare with anything, as text.
    Any,
}

impl Ty {
    pub const REF: Ty = Ty::Value(ValueType::Ref);
    pub const LONG: Ty = Ty::Value(ValueType::Long);
    pub const DOUBLE: Ty = Ty::Value(ValueType::Double);
    pub const STRING: Ty = Ty::Value(ValueType::String);
    pub const BOOLEAN: Ty = Ty::Value(ValueType::Boolean);

    /// The DuckDB type text of this type.
    pub fn sql_type(&self) -> String {
        match self {
            Ty::Value(v) => v.sql_type().to_string(),
            Ty::Mixed => "VARCHAR".into(),
            Ty::Tuple(ts) => {
                let fields: Vec<String> =
                    ts.iter().enumerate().map(|(i, t)| format!("f{i} {}", t.sql_type())).collect();
                format!("STRUCT({})", fields.join(", "))
            }
            Ty::List(t) => format!("{}[]", t.sql_type()),
        }
    }

    pub fn class(&self) -> Class {
        match self {
            Ty::Value(ValueType::Ref | ValueType::Long | ValueType::Double) => Class::Number,
            Ty::Value(ValueType::String | ValueType::Uri) => Class::Text,
            Ty::Value(ValueType::Keyword) => Class::Keyword,
            Ty::Value(ValueType::Boolean) => Class::Boolean,
            Ty::Value(ValueType::Instant) => Class::Instant,
            Ty::Value(ValueType::Uuid) => Class::Uuid,
            Ty::Value(ValueType::Bytes) => Class::Bytes,
            Ty::Tuple(_) | Ty::List(_) => Class::Tuple,
            Ty::Mixed => Class::Any,
        }
    }

    /// Whether values of this type are keywords (ordered by [`keyword_order`], not as text).
    pub fn is_keyword(&self) -> bool {
        *self == Ty::Value(ValueType::Keyword)
    }

    pub fn is_numeric(&self) -> bool {
        self.class() == Class::Number
    }

    /// The type both sides of an equality join can share, if any: equal types, refs with longs, or
    /// the mixed fallback with anything.
    pub fn join(&self, other: &Ty) -> Option<Ty> {
        match (self, other) {
            (a, b) if a == b => Some(a.clone()),
            (Ty::Value(ValueType::Ref), Ty::Value(ValueType::Long))
            | (Ty::Value(ValueType::Long), Ty::Value(ValueType::Ref)) => Some(Ty::REF),
            (Ty::Mixed, _) | (_, Ty::Mixed) => Some(Ty::Mixed),
            _ => None,
        }
    }

    /// A short name for messages.
    pub fn name(&self) -> String {
        match self {
            Ty::Value(v) => v.name().to_string(),
            Ty::Mixed => "mixed".into(),
            Ty::Tuple(_) => "tuple".into(),
            Ty::List(_) => "list".into(),
        }
    }
}

/// An EDN constant of a query or its inputs, checked but not yet typed for a position.
#[derive(Clone, Debug, PartialEq)]
pub enum Constant {
    Boolean(bool),
    Long(i64),
    Double(f64),
    String(String),
    /// Keyword text with its leading colon.
    Keyword(String),
    /// RFC 3339 text.
    Instant(String),
    Uuid(String),
    /// `[:unique/attr value]`: the entity whose unique attribute has that value.
    LookupRef {
        attr: Entid,
        value: Box<Constant>,
    },
    /// A vector that is not a lookup ref: Datomic's tuple, `STRUCT(f0 ..., f1 ...)`.
    Tuple(Vec<Constant>),
}

impl Constant {
    /// The type a constant has on its own (keywords are keywords until a ref position asks).
    pub fn natural_type(&self) -> Ty {
        match self {
            Constant::Boolean(_) => Ty::BOOLEAN,
            Constant::Long(_) => Ty::LONG,
            Constant::Double(_) => Ty::DOUBLE,
            Constant::String(_) => Ty::STRING,
            Constant::Keyword(_) => Ty::Value(ValueType::Keyword),
            Constant::Instant(_) => Ty::Value(ValueType::Instant),
            Constant::Uuid(_) => Ty::Value(ValueType::Uuid),
            Constant::LookupRef { .. } => Ty::REF,
            Constant::Tuple(items) => Ty::Tuple(items.iter().map(Constant::natural_type).collect()),
        }
    }

    /// Its text for `str` and for the mixed fallback.
    pub fn text(&self) -> Option<String> {
        match self {
            Constant::Boolean(b) => Some(b.to_string()),
            Constant::Long(i) => Some(i.to_string()),
            Constant::Double(d) => Some(d.to_string()),
            Constant::String(s) | Constant::Keyword(s) | Constant::Instant(s) | Constant::Uuid(s) => Some(s.clone()),
            Constant::LookupRef { .. } | Constant::Tuple(_) => None,
        }
    }
}

/// The literal of a non-lookup-ref constant in its natural type.
pub fn literal(c: &Constant) -> Option<Expr> {
    Some(Expr::Lit(match c {
        Constant::Boolean(b) => Lit::Bool(*b),
        Constant::Long(i) => Lit::Int(*i),
        Constant::Double(d) => Lit::Double(*d),
        Constant::String(s) | Constant::Keyword(s) => Lit::Str(s.clone()),
        Constant::Instant(s) => Lit::Typed(s.clone(), "TIMESTAMPTZ"),
        Constant::Uuid(s) => Lit::Typed(s.clone(), "UUID"),
        Constant::LookupRef { .. } => return None,
        Constant::Tuple(items) => {
            let fields: Option<Vec<_>> = items
                .iter()
                .enumerate()
                .map(|(i, c)| Some((crate::sql::Name::new(&format!("f{i}")), literal(c)?)))
                .collect();
            return Some(Expr::Struct(fields?));
        }
    }))
}

/// Reads a scalar EDN constant. Vectors are lookup refs and are read by the caller, which knows the
/// schema; here they are a syntax error.
pub fn scalar_constant(v: &Value) -> Result<Constant, PlanError> {
    Ok(match v {
        Value::Boolean(b) => Constant::Boolean(*b),
        Value::Integer(i) => Constant::Long(*i),
        Value::Float(f) => Constant::Double(f.into_inner()),
        Value::String(s) => Constant::String(s.clone()),
        Value::Keyword(_) => Constant::Keyword(show(v)),
        Value::Inst(t) => Constant::Instant(t.to_rfc3339()),
        Value::Uuid(u) => Constant::Uuid(u.to_string()),
        Value::Nil => return Err(PlanError::syntax(v, "nil is not a value in Datalog")),
        other => return Err(PlanError::syntax(other, "unsupported constant")),
    })
}
