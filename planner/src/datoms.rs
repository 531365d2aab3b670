//! Datomic's `d/datoms`: the EAVT, AEVT, AVET and VAET index views as one SQL statement (`mentat_datoms`).
//!
//! # Shape
//!
//! Columns `e BIGINT, a VARCHAR, v VARCHAR, tx BIGINT, added BOOLEAN`:
//!
//! * `a` is the attribute's ident text with its colon (`:user/email`). (Datomic returns the attribute's entid;
//!   the ident reads better in SQL, and `mentat_schema()` maps it to the entid.)
//! * `v` is the value as text, since one column cannot hold every value type: the unbound-attribute fallback of
//!   queries ([`crate::types::Ty::Mixed`]). Refs and longs are their digits, keywords their text with the colon,
//!   instants DuckDB's `TIMESTAMPTZ` text (`2025-01-01 00:00:00+00`), booleans `true`/`false`.
//! * `added` is true for assertions; false rows appear only with `history`.
//!
//! Rows are ordered as the index orders them: by its components in order, a value by its typed value (numbers,
//! refs and instants numerically, text by text), then by `tx`. Attribute order is entid order, as in Datomic.
//!
//! # Components
//!
//! As in `d/datoms`, the optional components constrain the leading components of the index, in its order:
//! EAVT takes e, then a, then v; AEVT a, e, v; AVET a, v, e; VAET v, a, e. A component given without those
//! before it is an error (the index could not seek to it), except that VAET's `v` alone reads every ref
//! attribute. An entity is an entid, an ident keyword or a lookup ref; an attribute an ident keyword or an
//! entid; a value is read in the attribute's type (a keyword or ident text for a keyword or ref attribute, text
//! for an instant or uuid).
//!
//! VAET holds ref attributes only (Datomic's VAET index is the reverse index of refs).
//!
//! # Time travel
//!
//! Every attribute is read through [`Ctx::datoms`], so `as_of`, `since` and `history` are the views of
//! queries: current state by default, every assertion and retraction with `history`.

use crate::algebrize::coerce;
use crate::error::PlanError;
use crate::layout::StoreName;
use crate::schema::{Attribute, Schema, ValueType};
use crate::source::{Ctx, QueryOptions};
use crate::sql::{Expr, FromItem, Lit, Name, Query, Select};
use crate::types::{Constant, Ty};

/// The four indexes of Datomic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Index {
    Eavt,
    Aevt,
    Avet,
    Vaet,
}

impl Index {
    /// Parses `EAVT`, `AEVT`, `AVET` or `VAET` (any case, with or without a leading colon).
    pub fn parse(s: &str) -> Result<Index, PlanError> {
        match s.trim().trim_start_matches(':').to_ascii_uppercase().as_str() {
            "EAVT" => Ok(Index::Eavt),
            "AEVT" => Ok(Index::Aevt),
            "AVET" => Ok(Index::Avet),
            "VAET" => Ok(Index::Vaet),
            _ => Err(PlanError::BadInput {
                form: s.to_string(),
                message: "the index is one of EAVT, AEVT, AVET, VAET".into(),
            }),
        }
    }

    /// The components in index order.
    fn order(self) -> [char; 3] {
        match self {
            Index::Eavt => ['e', 'a', 'v'],
            Index::Aevt => ['a', 'e', 'v'],
            Index::Avet => ['a', 'v', 'e'],
            Index::Vaet => ['v', 'a', 'e'],
        }
    }
}

/// The optional leading components of a `datoms` call.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Components {
    pub e: Option<Constant>,
    pub a: Option<Constant>,
    pub v: Option<Constant>,
}

/// The statement of `mentat_datoms(index, components)` over `store` as seen through `opts` (see the module
/// docs). Errors: an unknown index, attribute or ident; a component without its leading ones; a value that
/// cannot be of the attribute's type; an AVET or VAET read of a non-ref attribute for VAET.
pub fn datoms_sql(
    index: Index,
    c: &Components,
    schema: &Schema,
    store: &StoreName,
    opts: &QueryOptions,
) -> Result<String, PlanError> {
    let given = |k: char| match k {
        'e' => c.e.is_some(),
        'a' => c.a.is_some(),
        _ => c.v.is_some(),
    };
    let ctx = Ctx::new(schema, store, opts);
    let attrs: Vec<&Attribute> = match &c.a {
        Some(a) => vec![attribute(schema, a)?],
        None => schema.attributes(),
    };
    let attrs: Vec<&Attribute> = if index == Index::Vaet {
        if let Some(a) = attrs.iter().find(|a| a.value_type != ValueType::Ref).filter(|_| c.a.is_some()) {
            return Err(PlanError::BadInput {
                form: a.ident.clone(),
                message: "VAET holds ref attributes only".into(),
            });
        }
        attrs.into_iter().filter(|a| a.value_type == ValueType::Ref).collect()
    } else {
        attrs
    };
    let order = index.order();
    // Leading components only: an index seeks by a prefix of its components, as Datomic's d/datoms.
    let mut gap = false;
    for k in order {
        if !given(k) {
            gap = true;
        } else if gap {
            return Err(PlanError::BadInput {
                form: format!("{index:?}").to_uppercase(),
                message: format!(
                    "components are given in index order ({}): {k} needs the ones before it",
                    order.iter().collect::<String>()
                ),
            });
        }
    }
    let e_filter = match &c.e {
        Some(e) => Some(entity(&ctx, e)?),
        None => None,
    };
    let d = Name::new("d");
    let mut parts = Vec::new();
    for a in &attrs {
        let mut filters = Vec::new();
        if let Some(e) = &e_filter {
            filters.push(Expr::eq(Expr::col(&d, "e"), e.clone()));
        }
        if let Some(v) = &c.v {
            match value(&ctx, v, a) {
                Some(lit) => filters.push(Expr::eq(Expr::col(&d, "v"), lit)),
                None if c.a.is_some() => {
                    return Err(PlanError::BadInput {
                        form: v.text().unwrap_or_default(),
                        message: format!("the value is not {} ({})", a.value_type.a_name(), a.ident),
                    })
                }
                None => continue,
            }
        }
        let v = Expr::col(&d, "v");
        let (num, text) = sort_keys(a.value_type, &v);
        let added = if opts.history { Expr::col(&d, "added") } else { Expr::bool(true) };
        let text_v = if a.sql_type() == "VARCHAR" { v.clone() } else { v.clone().cast("VARCHAR") };
        let items = vec![
            (Expr::col(&d, "e"), Some("e".to_string())),
            (Expr::str(&a.ident), Some("a".to_string())),
            (text_v, Some("v".to_string())),
            (Expr::col(&d, "tx"), Some("tx".to_string())),
            (added, Some("added".to_string())),
            (Expr::int(a.entid), Some("aid".to_string())),
            (num, Some("vn".to_string())),
            (text, Some("vs".to_string())),
        ];
        let from = vec![FromItem::inner(ctx.datoms(a.entid), &d)];
        parts.push(Query::Select(Box::new(Select { items, from, filters, ..Default::default() })));
    }
    if parts.is_empty() {
        return Ok("SELECT CAST(NULL AS BIGINT) AS e, CAST(NULL AS VARCHAR) AS a, CAST(NULL AS VARCHAR) AS v, \
                   CAST(NULL AS BIGINT) AS tx, CAST(NULL AS BOOLEAN) AS added WHERE FALSE"
            .to_string());
    }
    let keys: &[&str] = match index {
        Index::Eavt => &["u.e", "u.aid", "u.vn", "u.vs"],
        Index::Aevt => &["u.aid", "u.e", "u.vn", "u.vs"],
        Index::Avet => &["u.aid", "u.vn", "u.vs", "u.e"],
        Index::Vaet => &["u.vn", "u.aid", "u.e"],
    };
    let union = Query::Union { all: true, parts }.to_sql();
    Ok(format!(
        "SELECT u.e AS e, u.a AS a, u.v AS v, u.tx AS tx, u.added AS added FROM (\n{union}\n) AS u\nORDER BY {}, u.tx, u.added",
        keys.join(", ")
    ))
}

/// Numeric and text sort keys of a value column, so that one ORDER BY orders every type by its own order.
fn sort_keys(t: ValueType, v: &Expr) -> (Expr, Expr) {
    let null = |ty: &str| Expr::Lit(Lit::Null).cast(ty);
    match t {
        ValueType::Ref
        | ValueType::Long
        | ValueType::Double
        | ValueType::BigInt
        | ValueType::BigDec
        | ValueType::Float => (v.clone().cast("DOUBLE"), null("VARCHAR")),
        ValueType::Boolean => (v.clone().cast("INTEGER").cast("DOUBLE"), null("VARCHAR")),
        ValueType::Instant => (Expr::Func("epoch_us", vec![v.clone()]).cast("DOUBLE"), null("VARCHAR")),
        // keywords in Clojure's order ([`crate::types::keyword_order`]): those without a namespace first, then by
        // namespace, then by name; as one text key ('0' name, or '1' namespace, chr(1), name)
        ValueType::Keyword => {
            use crate::sql::BinOp;
            let slash = Expr::Func("strpos", vec![v.clone(), Expr::str("/")]);
            let has = Expr::bin(BinOp::Gt, slash.clone(), Expr::int(1));
            let ns =
                Expr::Func("substr", vec![v.clone(), Expr::int(2), Expr::bin(BinOp::Sub, slash.clone(), Expr::int(2))]);
            let name_ns = Expr::Func("substr", vec![v.clone(), Expr::bin(BinOp::Add, slash, Expr::int(1))]);
            let namespaced =
                Expr::Func("concat", vec![Expr::str("1"), ns, Expr::Func("chr", vec![Expr::int(1)]), name_ns]);
            let plain = Expr::Func("concat", vec![Expr::str("0"), Expr::Func("substr", vec![v.clone(), Expr::int(2)])]);
            (null("DOUBLE"), Expr::Case { whens: vec![(has, namespaced)], otherwise: Some(Box::new(plain)) })
        }
        ValueType::String | ValueType::Uri | ValueType::Symbol => (null("DOUBLE"), v.clone()),
        ValueType::Uuid | ValueType::Bytes | ValueType::Tuple => (null("DOUBLE"), v.clone().cast("VARCHAR")),
    }
}

fn attribute<'s>(schema: &'s Schema, c: &Constant) -> Result<&'s Attribute, PlanError> {
    let found = match c {
        Constant::Long(i) => schema.attribute(*i),
        Constant::Keyword(k) | Constant::String(k) => schema.attribute_by_ident(k),
        _ => None,
    };
    let ident = c.text().unwrap_or_default();
    found.ok_or(PlanError::UnknownAttribute { form: ident.clone(), ident, context: String::new() })
}

/// An entity component: an entid, an ident (keyword or its text), or a lookup ref (EDN text `[:attr value]`).
fn entity(ctx: &Ctx, c: &Constant) -> Result<Expr, PlanError> {
    let c = match c {
        Constant::String(s) if s.trim_start().starts_with('[') => {
            let v = crate::parse::parse_edn(s, "entity")?;
            crate::algebrize::read_constant(ctx, &v, &v)?
        }
        Constant::String(s) if s.starts_with(':') => Constant::Keyword(s.clone()),
        other => other.clone(),
    };
    coerce(ctx, &c, &Ty::REF).ok_or_else(|| PlanError::UnknownIdent {
        ident: c.text().unwrap_or_default(),
        form: c.text().unwrap_or_default(),
    })
}

/// A value component in the attribute's type (text is read as a keyword, ident, instant or uuid as needed).
fn value(ctx: &Ctx, c: &Constant, a: &Attribute) -> Option<Expr> {
    let ty = crate::types::attr_ty(a);
    let c = match (a.value_type, c) {
        (ValueType::Keyword, Constant::String(s)) => Constant::Keyword(s.clone()),
        (ValueType::Ref, Constant::String(s)) if s.starts_with(':') => Constant::Keyword(s.clone()),
        (ValueType::Ref, Constant::String(s)) if s.trim_start().starts_with('[') => {
            let v = crate::parse::parse_edn(s, "entity").ok()?;
            crate::algebrize::read_constant(ctx, &v, &v).ok()?
        }
        // EDN's tagged forms, as a transaction writes them: `#inst "1990-01-01"`, `#uuid "..."`
        (ValueType::Instant | ValueType::Uuid, Constant::String(s)) if s.trim_start().starts_with('#') => {
            let v = crate::parse::parse_edn(s, "value").ok()?;
            crate::algebrize::read_constant(ctx, &v, &v).ok()?
        }
        (ValueType::Instant, Constant::String(s)) => Constant::Instant(s.clone()),
        (ValueType::Uuid, Constant::String(s)) => Constant::Uuid(s.clone()),
        (ValueType::Symbol, Constant::String(s)) => Constant::Symbol(s.clone()),
        (ValueType::BigInt, Constant::String(s)) => Constant::BigInt(crate::types::bigint_text(s)?),
        (ValueType::BigDec, Constant::String(s)) => Constant::BigDec(crate::types::bigdec_from_text(s)?),
        (ValueType::Float, Constant::String(s)) => Constant::Double(s.trim().parse::<f64>().ok()?),
        (ValueType::Long | ValueType::Ref | ValueType::Double, Constant::String(s)) => match s.trim().parse::<i64>() {
            Ok(i) => Constant::Long(i),
            Err(_) => Constant::Double(s.trim().parse::<f64>().ok()?),
        },
        (ValueType::Boolean, Constant::String(s)) => Constant::Boolean(s.trim().parse::<bool>().ok()?),
        _ => c.clone(),
    };
    coerce(ctx, &c, &ty)
}
