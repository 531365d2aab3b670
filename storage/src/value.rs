//! Typed datom values and their conversion from EDN, per `:db/valueType`.

use crate::error::{Result, StorageError};
use edn_format::Value as Edn;
use planner::schema::{Attribute, ValueType};
use planner::types::{bigdec_text, bigint_text};
use std::hash::{Hash, Hasher};

/// A datom value, already checked against its attribute's value type.
///
/// Keywords are kept as their text with the leading colon (`":state/open"`), symbols as their text, instants as
/// microseconds since the Unix epoch (UTC), uuids in canonical hyphenated text, bigints and bigdecs as their
/// canonical decimal text ([`planner::types::bigint_text`], [`planner::types::bigdec_text`]), floats as `f32`.
#[derive(Clone, Debug)]
pub enum Val {
    Ref(i64),
    Long(i64),
    Double(f64),
    /// `:db.type/string`, `:db.type/keyword`, `:db.type/uri` and `:db.type/symbol` values.
    Str(String),
    Bool(bool),
    Instant(i64),
    Uuid(String),
    Bytes(Vec<u8>),
    BigInt(String),
    BigDec(String),
    Float(f32),
    /// A `:db.type/tuple` value: its elements, typed by the attribute's [`planner::schema::TupleSpec`]; `None` is nil.
    Tuple(Vec<Option<Val>>),
}

impl PartialEq for Val {
    fn eq(&self, other: &Val) -> bool {
        match (self, other) {
            (Val::Double(a), Val::Double(b)) => a.to_bits() == b.to_bits(),
            (Val::Float(a), Val::Float(b)) => a.to_bits() == b.to_bits(),
            (Val::BigInt(a), Val::BigInt(b)) | (Val::BigDec(a), Val::BigDec(b)) => a == b,
            (Val::Tuple(a), Val::Tuple(b)) => a == b,
            (Val::Ref(a), Val::Ref(b)) | (Val::Long(a), Val::Long(b)) | (Val::Instant(a), Val::Instant(b)) => a == b,
            (Val::Str(a), Val::Str(b)) | (Val::Uuid(a), Val::Uuid(b)) => a == b,
            (Val::Bool(a), Val::Bool(b)) => a == b,
            (Val::Bytes(a), Val::Bytes(b)) => a == b,
            _ => false,
        }
    }
}
impl Eq for Val {}

impl Hash for Val {
    fn hash<H: Hasher>(&self, h: &mut H) {
        std::mem::discriminant(self).hash(h);
        match self {
            Val::Ref(x) | Val::Long(x) | Val::Instant(x) => x.hash(h),
            Val::Double(x) => x.to_bits().hash(h),
            Val::Float(x) => x.to_bits().hash(h),
            Val::Tuple(items) => items.hash(h),
            Val::Str(s) | Val::Uuid(s) | Val::BigInt(s) | Val::BigDec(s) => s.hash(h),
            Val::Bool(b) => b.hash(h),
            Val::Bytes(b) => b.hash(h),
        }
    }
}

impl std::fmt::Display for Val {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Val::Ref(x) | Val::Long(x) => write!(f, "{x}"),
            Val::Double(x) => write!(f, "{x:?}"),
            Val::Str(s) if s.starts_with(':') => f.write_str(s),
            Val::Str(s) => write!(f, "{s:?}"),
            Val::Bool(b) => write!(f, "{b}"),
            Val::Instant(us) => match chrono::DateTime::from_timestamp_micros(*us) {
                Some(t) => write!(f, "#inst \"{}\"", t.format("%Y-%m-%dT%H:%M:%S%.6fZ")),
                None => write!(f, "#inst {us}"),
            },
            Val::Uuid(s) => write!(f, "#uuid \"{s}\""),
            Val::Bytes(b) => write!(f, "#bytes[{} bytes]", b.len()),
            Val::BigInt(s) => write!(f, "{s}N"),
            Val::BigDec(s) => write!(f, "{s}M"),
            Val::Float(x) => write!(f, "{x:?}"),
            Val::Tuple(items) => {
                f.write_str("[")?;
                for (i, x) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(" ")?;
                    }
                    match x {
                        Some(v) => write!(f, "{v}")?,
                        None => f.write_str("nil")?,
                    }
                }
                f.write_str("]")
            }
        }
    }
}

/// Converts an EDN value to a [`Val`] of `attr`'s value type. Refs are not handled here (they need entity
/// resolution); `form` names the enclosing transaction form in the error.
///
/// Accepted spellings: longs from integers; doubles from floats or integers; strings and uris from strings (uris
/// also from a tagged `#uri "..."`);
/// keywords from keywords; booleans; instants from `#inst` or integer milliseconds (Datomic's `java.util.Date`
/// millis); uuids from `#uuid` or a uuid string; bytes from a string (its UTF-8 bytes); symbols from symbols;
/// bigints from `123N` or integers; bigdecs from `1.25M`, `123N` or integers (never from doubles, which are not
/// exact); floats from doubles or integers, rounded to the nearest `f32` as Datomic coerces them (a double beyond
/// `f32`'s range is refused). A bigint beyond HUGEINT or a bigdec beyond `DECIMAL(38,18)` is refused with the
/// wrong-type error, never rounded.
pub fn scalar_from_edn(v: &Edn, attr: &Attribute, form: &dyn std::fmt::Display) -> Result<Val> {
    let wrong = || StorageError::WrongType {
        value: planner::error::edn_text(v),
        attribute: attr.ident.clone(),
        expected: attr.value_type.ident().to_string(),
        form: form.to_string(),
    };
    Ok(match (attr.value_type, v) {
        (ValueType::Long, Edn::Integer(i)) => Val::Long(*i),
        (ValueType::Double, Edn::Float(x)) => Val::Double(x.into_inner()),
        (ValueType::Double, Edn::Integer(i)) => Val::Double(*i as f64),
        (ValueType::String | ValueType::Uri, Edn::String(s)) => Val::Str(s.clone()),
        (ValueType::Uri, Edn::TaggedElement(tag, inner)) if tag.namespace().is_none() && tag.name() == "uri" => {
            match &**inner {
                Edn::String(s) => Val::Str(s.clone()),
                _ => return Err(wrong()),
            }
        }
        (ValueType::Keyword, Edn::Keyword(k)) => Val::Str(crate::txparse::ident_text(k)),
        (ValueType::Boolean, Edn::Boolean(b)) => Val::Bool(*b),
        (ValueType::Instant, Edn::Inst(t)) => Val::Instant(t.timestamp_micros()),
        (ValueType::Instant, Edn::Integer(ms)) => Val::Instant(ms.checked_mul(1000).ok_or_else(wrong)?),
        (ValueType::Uuid, Edn::Uuid(u)) => Val::Uuid(u.to_hyphenated().to_string()),
        (ValueType::Uuid, Edn::String(s)) => Val::Uuid(parse_uuid(s).ok_or_else(wrong)?),
        (ValueType::Bytes, Edn::String(s)) => Val::Bytes(s.as_bytes().to_vec()),
        (ValueType::Symbol, Edn::Symbol(s)) => Val::Str(s.to_string()),
        (ValueType::BigInt, Edn::BigInt(b)) => Val::BigInt(bigint_text(&b.to_string()).ok_or_else(wrong)?),
        (ValueType::BigInt, Edn::Integer(i)) => Val::BigInt(i.to_string()),
        (ValueType::BigDec, Edn::BigDec(d)) => {
            let (digits, scale) = d.as_bigint_and_exponent();
            Val::BigDec(bigdec_text(&digits.to_string(), scale).ok_or_else(wrong)?)
        }
        (ValueType::BigDec, Edn::BigInt(b)) => Val::BigDec(bigdec_text(&b.to_string(), 0).ok_or_else(wrong)?),
        (ValueType::BigDec, Edn::Integer(i)) => Val::BigDec(i.to_string()),
        (ValueType::Float, Edn::Float(x)) => Val::Float(float_of(x.into_inner()).ok_or_else(wrong)?),
        (ValueType::Float, Edn::Integer(i)) => Val::Float(*i as f32),
        _ => return Err(wrong()),
    })
}

/// The `f32` nearest a double, or None when the double is finite and beyond `f32`'s range.
fn float_of(x: f64) -> Option<f32> {
    let f = x as f32;
    (f.is_finite() || !x.is_finite()).then_some(f)
}

fn parse_uuid(s: &str) -> Option<String> {
    let hex: String = s.chars().filter(|c| *c != '-').collect();
    if hex.len() != 32 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let h = hex.to_ascii_lowercase();
    Some(format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(t: ValueType) -> Attribute {
        Attribute::new(100, ":x/y", t)
    }

    #[test]
    fn scalars_follow_value_types() {
        let p = |s: &str| edn_format::parse_str(s).unwrap();
        assert_eq!(scalar_from_edn(&p("3"), &attr(ValueType::Long), &"f").unwrap(), Val::Long(3));
        assert_eq!(scalar_from_edn(&p("3"), &attr(ValueType::Double), &"f").unwrap(), Val::Double(3.0));
        assert_eq!(scalar_from_edn(&p(":a/b"), &attr(ValueType::Keyword), &"f").unwrap(), Val::Str(":a/b".into()));
        // 2025-01-01T00:00:00Z is 1735689600 seconds after the epoch.
        assert_eq!(
            scalar_from_edn(&p("#inst \"2025-01-01T00:00:00.000-00:00\""), &attr(ValueType::Instant), &"f").unwrap(),
            Val::Instant(1_735_689_600_000_000)
        );
        assert_eq!(
            scalar_from_edn(&p("\"F81D4FAE7DEC11D0A76500A0C91E6BF6\""), &attr(ValueType::Uuid), &"f").unwrap(),
            Val::Uuid("f81d4fae-7dec-11d0-a765-00a0c91e6bf6".into())
        );
        let err = scalar_from_edn(&p("\"x\""), &attr(ValueType::Long), &"[:db/add 1 :x/y \"x\"]").unwrap_err();
        assert!(err.to_string().contains(":db.type/long"), "{err}");
        assert!(scalar_from_edn(&p("1.5"), &attr(ValueType::Long), &"f").is_err());
    }
}
