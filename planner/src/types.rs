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

/// The type of an attribute's values: its value type, or for a tuple attribute a STRUCT ([`Ty::Tuple`], fixed
/// positions) or a LIST ([`Ty::List`], `:db/tupleType`).
pub fn attr_ty(a: &crate::schema::Attribute) -> Ty {
    match &a.tuple {
        Some(crate::schema::TupleSpec::Homogeneous(t)) => Ty::List(Box::new(Ty::Value(*t))),
        Some(spec) => Ty::Tuple(spec.positions().into_iter().map(Ty::Value).collect()),
        None => Ty::Value(a.value_type),
    }
}

/// Comparison classes: values compare only within one class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    Number,
    Text,
    Keyword,
    Symbol,
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
            Ty::Value(
                ValueType::Ref
                | ValueType::Long
                | ValueType::Double
                | ValueType::BigInt
                | ValueType::BigDec
                | ValueType::Float,
            ) => Class::Number,
            Ty::Value(ValueType::Symbol) => Class::Symbol,
            Ty::Value(ValueType::String | ValueType::Uri) => Class::Text,
            Ty::Value(ValueType::Keyword) => Class::Keyword,
            Ty::Value(ValueType::Boolean) => Class::Boolean,
            Ty::Value(ValueType::Instant) => Class::Instant,
            Ty::Value(ValueType::Uuid) => Class::Uuid,
            Ty::Value(ValueType::Bytes) => Class::Bytes,
            Ty::Tuple(_) | Ty::List(_) | Ty::Value(ValueType::Tuple) => Class::Tuple,
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
            // Tuples join element by element (a long element with a ref one, as scalars do).
            (Ty::Tuple(a), Ty::Tuple(b)) if a.len() == b.len() => {
                Some(Ty::Tuple(a.iter().zip(b).map(|(x, y)| x.join(y)).collect::<Option<_>>()?))
            }
            (Ty::List(a), Ty::List(b)) => Some(Ty::List(Box::new(a.join(b)?))),
            // A fixed tuple whose elements all join a homogeneous tuple's type joins it as a list ([`as_list`]).
            (Ty::Tuple(ts), Ty::List(t)) | (Ty::List(t), Ty::Tuple(ts)) => {
                let joined = ts.iter().map(|x| x.join(t)).collect::<Option<Vec<_>>>()?;
                let first = joined.first()?;
                joined.iter().all(|x| x == first).then(|| Ty::List(Box::new(first.clone())))
            }
            _ => None,
        }
    }

    /// A short name for messages.
    /// The name with its article, for messages: "a long", "an instant".
    pub fn a_name(&self) -> String {
        with_article(&self.name())
    }

    pub fn name(&self) -> String {
        match self {
            Ty::Value(v) => v.name().to_string(),
            Ty::Mixed => "mixed".into(),
            Ty::Tuple(_) => "tuple".into(),
            Ty::List(_) => "list".into(),
        }
    }
}

/// `name` after "a" or "an", as English writes it before the word's first letter.
pub fn with_article(name: &str) -> String {
    let an = name.starts_with(['a', 'e', 'i', 'o', 'u']);
    format!("{} {name}", if an { "an" } else { "a" })
}

/// A fixed tuple's value (a STRUCT of `n` fields `f0..`) as a LIST, to compare with a homogeneous tuple.
pub fn as_list(e: Expr, n: usize) -> Expr {
    let items = (0..n).map(|i| Expr::Field(Box::new(e.clone()), crate::sql::Name::new(&format!("f{i}")))).collect();
    Expr::Func("list_value", items)
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
    /// `123N`: a `:db.type/bigint` value, as canonical decimal text ([`bigint_text`]).
    BigInt(String),
    /// `1.25M`: a `:db.type/bigdec` value, as canonical decimal text ([`bigdec_text`]).
    BigDec(String),
    /// A symbol that is not a variable (`foo`, `my.ns/bar`): a `:db.type/symbol` value, as its text.
    Symbol(String),
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
            Constant::BigInt(_) => Ty::Value(ValueType::BigInt),
            Constant::BigDec(_) => Ty::Value(ValueType::BigDec),
            Constant::Symbol(_) => Ty::Value(ValueType::Symbol),
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
            Constant::String(s)
            | Constant::Keyword(s)
            | Constant::Instant(s)
            | Constant::Uuid(s)
            | Constant::BigInt(s)
            | Constant::BigDec(s)
            | Constant::Symbol(s) => Some(s.clone()),
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
        Constant::String(s) | Constant::Keyword(s) | Constant::Symbol(s) => Lit::Str(s.clone()),
        Constant::Instant(s) => Lit::Typed(s.clone(), "TIMESTAMPTZ"),
        Constant::Uuid(s) => Lit::Typed(s.clone(), "UUID"),
        Constant::BigInt(s) => Lit::Typed(s.clone(), "HUGEINT"),
        Constant::BigDec(s) => Lit::Typed(s.clone(), crate::schema::BIGDEC_SQL),
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
        Value::BigInt(b) => Constant::BigInt(
            bigint_text(&b.to_string()).ok_or_else(|| PlanError::syntax(v, "a bigint has at most 38 digits"))?,
        ),
        Value::BigDec(d) => {
            let (digits, scale) = d.as_bigint_and_exponent();
            Constant::BigDec(bigdec_text(&digits.to_string(), scale).ok_or_else(|| {
                PlanError::syntax(v, "a bigdec must have at most 20 digits before the point and 18 after it")
            })?)
        }
        Value::Symbol(sym) => Constant::Symbol(sym.to_string()),
        // a uri as the transactor reads it: the tagged string stands for the string (a uri is stored as text)
        Value::TaggedElement(tag, inner) if tag.namespace().is_none() && tag.name() == "uri" => match &**inner {
            Value::String(s) => Constant::String(s.clone()),
            _ => return Err(PlanError::syntax(v, "#uri tags a string")),
        },
        Value::Nil => return Err(PlanError::syntax(v, "nil is not a value in Datalog")),
        other => return Err(PlanError::syntax(other, "unsupported constant")),
    })
}

/// The largest `:db.type/bigint` magnitude: 38 nines, what DECIMAL(38,0) (the Parquet type of bigints) holds.
pub const BIGINT_MAX: i128 = 99_999_999_999_999_999_999_999_999_999_999_999_999;

/// The canonical text of a `:db.type/bigint` value given as decimal digits (an optional sign, no exponent), or None
/// when it is not an integer or has more than 38 digits ([`BIGINT_MAX`]; stored as a HUGEINT).
pub fn bigint_text(s: &str) -> Option<String> {
    let i: i128 = s.trim().trim_end_matches('N').parse().ok()?;
    (i.checked_abs()? <= BIGINT_MAX).then(|| i.to_string())
}

/// The canonical text of a `:db.type/bigdec` value `digits * 10^-scale` (Java's `BigDecimal` unscaled value and
/// scale): plain decimal notation with trailing zeros after the point removed (`1.250M` is `1.25`), or None when
/// it needs more than 18 digits after the point or 20 before it ([`crate::schema::BIGDEC_SQL`]): such a value is
/// refused, never rounded.
pub fn bigdec_text(digits: &str, scale: i64) -> Option<String> {
    let (neg, mut ds) = match digits.strip_prefix('-') {
        Some(d) => (true, d.to_string()),
        None => (false, digits.to_string()),
    };
    if ds.is_empty() || !ds.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut scale = scale;
    if scale < 0 {
        if scale < -40 {
            return None;
        }
        ds.push_str(&"0".repeat((-scale) as usize));
        scale = 0;
    }
    let scale = scale as usize;
    if scale > ds.len() {
        ds = format!("{}{ds}", "0".repeat(scale - ds.len()));
    }
    let (int, frac) = ds.split_at(ds.len() - scale);
    let int = int.trim_start_matches('0');
    let frac = frac.trim_end_matches('0');
    if int.len() > 20 || frac.len() > crate::schema::BIGDEC_SCALE as usize {
        return None;
    }
    let int = if int.is_empty() { "0" } else { int };
    let zero = frac.is_empty() && int == "0";
    let sign = if neg && !zero { "-" } else { "" };
    Some(if frac.is_empty() { format!("{sign}{int}") } else { format!("{sign}{int}.{frac}") })
}

/// [`bigdec_text`] of a decimal given as text (`-12.5000`, `3`, as DuckDB casts a DECIMAL to VARCHAR).
pub fn bigdec_from_text(s: &str) -> Option<String> {
    let s = s.trim().trim_end_matches('M');
    match s.split_once('.') {
        Some((int, frac)) => {
            let (sign, int) = int.strip_prefix('-').map_or(("", int), |i| ("-", i));
            bigdec_text(&format!("{sign}{int}{frac}"), frac.len() as i64)
        }
        None => bigdec_text(s, 0),
    }
}

#[cfg(test)]
mod number_tests {
    use super::*;

    #[test]
    fn bigdec_text_is_canonical_and_refuses_what_decimal_38_18_cannot_hold() {
        assert_eq!(bigdec_text("1250", 3).as_deref(), Some("1.25"));
        assert_eq!(bigdec_text("-5", 2).as_deref(), Some("-0.05"));
        assert_eq!(bigdec_text("12", -3).as_deref(), Some("12000"));
        assert_eq!(bigdec_text("-0", 4).as_deref(), Some("0"));
        assert_eq!(bigdec_from_text("-12.500000000000000000").as_deref(), Some("-12.5"));
        assert_eq!(bigdec_from_text("7").as_deref(), Some("7"));
        // 19 digits after the point, 21 before it: refused.
        assert_eq!(bigdec_text("1", 19), None);
        assert_eq!(bigdec_text("10000000000000000000", 0).as_deref(), Some("10000000000000000000"));
        assert_eq!(bigdec_text("100000000000000000000", 0), None);
    }

    #[test]
    fn bigint_text_holds_38_digits() {
        let nines = "9".repeat(38);
        assert_eq!(bigint_text(&format!("-{nines}N")), Some(format!("-{nines}")));
        assert_eq!(bigint_text(&format!("1{}", "0".repeat(38))), None);
        assert_eq!(bigint_text("170141183460469231731687303715884105727"), None);
        assert_eq!(bigint_text("-42").as_deref(), Some("-42"));
    }
}
