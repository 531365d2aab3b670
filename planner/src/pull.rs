//! Datomic's pull: a pull pattern compiled to one DuckDB statement whose result is a typed STRUCT per entity.
//!
//! # Grammar (Datomic's pull pattern)
//!
//! ```text
//! pattern      = [ attr-spec+ ]
//! attr-spec    = attr-name | "*" | :db/id | attr-expr | map-spec
//! attr-name    = :ns/name (forward) | :ns/_name (reverse, ref attributes only)
//! attr-expr    = [attr-name option+]                 ; option = :as name | :limit n | :limit nil | :default value
//!              | (limit attr-name n) | (default attr-name value)     ; the legacy list forms
//! map-spec     = { (attr-name | attr-expr) (pattern | ... | n) , ... }   ; n = recursion depth
//! ```
//!
//! # Result shape
//!
//! One STRUCT per entity, its fields in pattern order (entries of one map spec in EDN's sorted key order):
//!
//! * field name: the ident without its colon (`"issue/title"`, `"issue/_assignee"` for a reverse attribute,
//!   `"db/id"`), or the `:as` name (a string as written, a keyword or symbol without the colon).
//! * cardinality-one: the value's type (`VARCHAR`, `BIGINT`, `TIMESTAMPTZ`, ...; keywords are VARCHAR text
//!   with the colon, as the datom tables hold them); cardinality-many: a LIST of it, ordered by value, at most
//!   `:limit` elements (Datomic's default limit, 1000, unless `:limit nil`).
//! * a ref without a sub-pattern: `STRUCT("db/id" BIGINT)`; with a sub-pattern: the nested pattern's STRUCT.
//! * a reverse attribute: always a LIST (of `STRUCT("db/id" BIGINT)` or of the nested STRUCT), ordered by the
//!   referring entity's id, default limit 1000. (Datomic returns a single map for the reverse of a component
//!   attribute; here the shape stays a LIST so that it never depends on data.)
//! * `*`: `"db/id"` first, then every attribute of the schema that is not a bootstrap attribute
//!   (entid >= [`PART_DB_USER_START`]), by entid, under the rules above; component attributes are pulled
//!   recursively with `[*]` (up to [`MAX_DEPTH`] levels, then as `{"db/id"}`). Attributes named explicitly
//!   next to `*` replace the wildcard's field of the same attribute in place; other explicit specs follow.
//!   Bootstrap attributes (`:db/ident`, `:db/valueType`, `:db/txInstant`, ...) can be named explicitly.
//! * recursion: `{:a ...}` expands [`MAX_DEPTH`] levels, `{:a n}` expands n levels, each level with the
//!   pattern the recursive spec sits in; past the last level the attribute is a ref without sub-pattern
//!   (`{"db/id"}`), which is what Datomic returns at a recursion limit. A static type needs the bound; cycles
//!   are expanded up to the bound rather than detected.
//! * a missing attribute is a NULL field (Datomic leaves the key out). `:default v` replaces that NULL.
//! * an entity with none of the pattern's attributes (a nonexistent entity, or a ref whose target has none
//!   of the sub-pattern's attributes) is a NULL STRUCT, as Datomic returns nil; unless the pattern asks for
//!   `:db/id` (or `*`), in which case it is `{"db/id": e, ...}` with every other field NULL, or gives a
//!   `:default`, in which case it is the defaults (Datomic's pull returns them for such an entity).
//!
//! # Time travel
//!
//! Every attribute is read through [`Ctx::datoms`], so `as_of` and `since` behave exactly as in queries.
//! `history` is rejected, as Datomic rejects pull on a history database.
//!
//! # SQL
//!
//! Every pattern level is one CTE producing `(e, pull)` for a set of entity ids: the level's attributes are
//! read by one branch each (`ids JOIN source ON source.e = ids.e`, so DuckDB pushes the ids into the scan
//! as a dynamic filter and the e-ordered tables' zone maps skip row groups), the branches are glued by
//! `UNION ALL BY NAME` and folded by one `GROUP BY e` (`any_value` for cardinality-one, `list(... ORDER BY
//! v)` for many). A nested level reads the distinct ref values of its parent (a MATERIALIZED CTE) as its
//! ids. Planning cost is linear in the pattern (correlated scalar subqueries would make DuckDB's join
//! orderer enumerate cross products: 60 ms of planning for ten attributes).

use crate::error::{show, PlanError};
use crate::layout::{quote_ident, quote_str, StoreName, PART_DB_USER_START};
use crate::parse::parse_edn;
use crate::schema::{Attribute, Entid, Schema, ValueType};
use crate::source::{Ctx, QueryOptions};
use crate::sql::{Expr, Query, Select, TableSource};
use crate::types::{literal, scalar_constant, Constant};
use edn_format::Value;

/// Levels expanded for `...` recursion and for components under `*`.
pub const MAX_DEPTH: usize = 4;
/// Datomic's default `:limit` for cardinality-many and reverse attributes.
pub const DEFAULT_LIMIT: i64 = 1000;
/// The CTE name a [`CompiledPull`] reads its entity ids from (column `e`).
pub const IDS: &str = "pull_ids";

/// A parsed pull pattern.
#[derive(Clone, Debug, PartialEq)]
pub struct Pattern {
    /// `*` appears in the pattern.
    pub wildcard: bool,
    pub specs: Vec<Spec>,
}

/// One attribute spec of a pattern.
#[derive(Clone, Debug, PartialEq)]
pub struct Spec {
    pub target: Target,
    /// The STRUCT field name.
    pub name: String,
    /// At most this many values (cardinality-many and reverse only); None = unlimited.
    pub limit: Option<i64>,
    /// `:default`: the value when the attribute is missing.
    pub default: Option<Value>,
    pub sub: Sub,
}

/// What a spec reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// `:db/id`: the entity id itself.
    DbId,
    /// `:ns/name`
    Forward(Entid),
    /// `:ns/_name`: the entities whose ref attribute points here.
    Reverse(Entid),
}

/// What a ref spec pulls of the entities it reaches.
#[derive(Clone, Debug, PartialEq)]
pub enum Sub {
    /// Only their ids (`{"db/id"}`); the value itself for non-ref attributes.
    None,
    /// A nested pattern.
    Pattern(Pattern),
    /// `...` or a depth number: the enclosing pattern again, `depth` levels; `id` tells recursive specs apart.
    Recurse { id: usize, depth: usize },
    /// A component attribute under `*`: `[*]` again, [`MAX_DEPTH`] levels.
    Component,
}

/// A compiled pull pattern: CTEs computing `(e BIGINT, pull <sql_type>)` for every distinct entity id of the
/// relation named [`IDS`]. Use [`CompiledPull::relation_sql`] (any id relation), [`CompiledPull::one_sql`]
/// (one entity as parameter `$1`), [`CompiledPull::many_sql`] (a `BIGINT[]` parameter `$1`) or
/// [`CompiledPull::entities_sql`] (entity expressions from [`entity_sql`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompiledPull {
    /// `name AS [NOT] MATERIALIZED (...)` items, in dependency order, reading [`IDS`].
    pub ctes: Vec<String>,
    /// The CTE holding the top level's `(e, pull)`.
    pub root: String,
    /// DuckDB type text of the `pull` column, e.g. `STRUCT("db/id" BIGINT, "issue/title" VARCHAR)`.
    pub sql_type: String,
    /// The same levels for one entity given as parameter `$1`: the top level filters `d.e = $1` directly,
    /// which DuckDB prunes by zone maps without a join (about a third faster than joining [`IDS`]).
    pub one_ctes: Vec<String>,
    pub one_root: String,
}

impl CompiledPull {
    fn with(&self, input: &str) -> String {
        let mut ctes = vec![
            format!("pull_in AS NOT MATERIALIZED (\n{input})"),
            format!("{IDS} AS NOT MATERIALIZED (SELECT DISTINCT e FROM pull_in WHERE e IS NOT NULL)"),
        ];
        ctes.extend(self.ctes.iter().cloned());
        format!("WITH {}\n", ctes.join(",\n"))
    }

    /// One statement returning `(e BIGINT, pull STRUCT)` for each distinct non-NULL `e` of `ids_query` (a
    /// SELECT with a column `e`), in no particular order; usable as a subquery, e.g. LEFT JOINed on `e` by
    /// the query compiler for `(pull ?e pattern)` find elements.
    pub fn relation_sql(&self, ids_query: &str) -> String {
        format!("{}SELECT r.e AS e, r.pull AS pull FROM {} AS r", self.with(ids_query), self.root)
    }

    /// The statement for an input relation with columns `e` and `ord`: one row per input row, ordered by
    /// `ord`, with `e` as given (NULL for an unresolved lookup ref) and its pull.
    pub fn input_sql(&self, input: &str) -> String {
        format!(
            "{}SELECT p.e AS e, r.pull AS pull FROM pull_in AS p LEFT JOIN {} AS r ON r.e = p.e ORDER BY p.ord",
            self.with(input),
            self.root
        )
    }

    /// One entity, the statement's only parameter `$1` (an integer entid): one row `(e, pull)`.
    pub fn one_sql(&self) -> String {
        let mut ctes = vec![format!("{IDS} AS NOT MATERIALIZED (SELECT {ONE} AS e)")];
        ctes.extend(self.one_ctes.iter().cloned());
        format!("WITH {}\nSELECT r.e AS e, r.pull AS pull FROM {} AS r", ctes.join(",\n"), self.one_root)
    }

    /// Many entities, the statement's only parameter `$1` (a `BIGINT[]`): one row per element, in order
    /// (duplicates repeated, as Datomic's pull-many does).
    pub fn many_sql(&self) -> String {
        self.input_sql(
            "SELECT unnest(l) AS e, generate_subscripts(l, 1) AS ord FROM (SELECT CAST($1 AS BIGINT[]) AS l) AS t",
        )
    }

    /// Entities given as SQL expressions (from [`entity_sql`]), one row each, in order.
    pub fn entities_sql(&self, entities: &[String]) -> String {
        if entities.is_empty() {
            return self.input_sql("SELECT CAST(NULL AS BIGINT) AS e, 1 AS ord WHERE FALSE");
        }
        let rows: Vec<String> =
            entities.iter().enumerate().map(|(i, e)| format!("(CAST({e} AS BIGINT), {})", i + 1)).collect();
        self.input_sql(&format!("SELECT * FROM (VALUES {}) AS v(e, ord)", rows.join(", ")))
    }
}

/// Compiles pull pattern text (see the module docs) against `schema` for entities of `store`, as seen through
/// `opts` (as-of/since; history is an error). Errors: malformed EDN, a pattern that is not a vector, unknown
/// attributes (or a reverse of a non-ref attribute), a nested pattern on a non-ref attribute, bad options,
/// duplicate field names, a `:default` of the wrong type.
pub fn compile_pull(
    pattern_edn: &str,
    schema: &Schema,
    store: &StoreName,
    opts: &QueryOptions,
) -> Result<CompiledPull, PlanError> {
    compile_pull_value(&parse_edn(pattern_edn, "pull pattern")?, schema, store, opts)
}

/// [`compile_pull`] for a pattern already read as EDN (the query compiler's `(pull ?e pattern)`).
pub fn compile_pull_value(
    pattern: &Value,
    schema: &Schema,
    store: &StoreName,
    opts: &QueryOptions,
) -> Result<CompiledPull, PlanError> {
    if opts.history {
        return Err(PlanError::unsupported(pattern, "pull reads a database value; history := true is not one"));
    }
    let mut next_id = 0;
    let pattern = parse_pattern(pattern, schema, &mut next_id)?;
    let mut c = Compiler { ctx: Ctx::new(schema, store, opts), ctes: Vec::new(), n: 0, top_param: false };
    let (root, sql_type) = c.node(&pattern, IDS, &Budget::default())?;
    let mut one = Compiler { ctx: Ctx::new(schema, store, opts), ctes: Vec::new(), n: 0, top_param: true };
    let (one_root, _) = one.node(&pattern, IDS, &Budget::default())?;
    Ok(CompiledPull { ctes: c.ctes, root, sql_type, one_ctes: one.ctes, one_root })
}

/// The fields of a flat pattern, `*` expanded as [`compile_pull`] expands it, for the entity path
/// (`storage::eindex`): every field is `:db/id` or a forward attribute without sub-pattern (a ref as its
/// `{"db/id"}`), of a value type the index holds (not uuid or bytes), with a `:default` of the attribute's own
/// type. None for any other pattern (nested, reverse, recursive, components under `*`) or any time-travel
/// option: the general path pulls those.
pub fn flat_fields(pattern_edn: &str, schema: &Schema, store: &StoreName, opts: &QueryOptions) -> Option<Vec<Spec>> {
    if opts.as_of.is_some() || opts.since.is_some() || opts.history {
        return None;
    }
    let mut next_id = 0;
    let pattern = parse_pattern(&parse_edn(pattern_edn, "pull pattern").ok()?, schema, &mut next_id).ok()?;
    let c = Compiler { ctx: Ctx::new(schema, store, opts), ctes: Vec::new(), n: 0, top_param: false };
    let specs = c.expand(&pattern);
    for s in &specs {
        match (s.target, &s.sub) {
            (Target::DbId, _) => {}
            (Target::Forward(a), Sub::None) => {
                let attr = schema.attribute(a)?;
                if matches!(attr.value_type, ValueType::Uuid | ValueType::Bytes) {
                    return None;
                }
                if let Some(d) = &s.default {
                    if attr.many || crate::entity::default_key(d, attr.value_type, schema).is_none() {
                        return None;
                    }
                }
            }
            _ => return None,
        }
    }
    Some(specs)
}

/// The SQL expression of one entity given as EDN text: an integer entid, an ident keyword (`:x/y`, resolved
/// now; unknown is an error), or a lookup ref `[:unique/attr value]` (a scalar subquery through the same
/// time view, NULL when nothing matches).
pub fn entity_sql(
    entity_edn: &str,
    schema: &Schema,
    store: &StoreName,
    opts: &QueryOptions,
) -> Result<String, PlanError> {
    let v = parse_edn(entity_edn, "entity")?;
    match &v {
        Value::Integer(i) => Ok(i.to_string()),
        Value::Keyword(_) => {
            let ident = show(&v);
            schema.entid(&ident).map(|e| e.to_string()).ok_or(PlanError::UnknownIdent { form: ident.clone(), ident })
        }
        Value::Vector(items) if items.len() == 2 => {
            let attr = attribute_of(&items[0], &v, schema)?;
            if attr.unique.is_none() {
                return Err(PlanError::syntax(&v, format!("{} is not a unique attribute", attr.ident)));
            }
            let value = typed_literal(&items[1], attr, &v, schema)?;
            let ctx = Ctx::new(schema, store, opts);
            Ok(format!("(SELECT any_value(d.e) FROM {} AS d WHERE d.v = {value})", source_sql(&ctx, attr.entid)?))
        }
        _ => Err(PlanError::syntax(&v, "an entity is an entid, an ident keyword or a lookup ref [:attr value]")),
    }
}

// ---------------------------------------------------------------------------------------------------------
// Parsing

fn keyword_text(v: &Value) -> Option<String> {
    match v {
        Value::Keyword(_) => Some(show(v)),
        _ => None,
    }
}

fn is_symbol(v: &Value, name: &str) -> bool {
    matches!(v, Value::Symbol(s) if s.namespace().is_none() && s.name() == name)
}

fn attribute_of<'s>(v: &Value, form: &Value, schema: &'s Schema) -> Result<&'s Attribute, PlanError> {
    let ident = keyword_text(v).ok_or_else(|| PlanError::syntax(form, "expected an attribute keyword"))?;
    schema.attribute_by_ident(&ident).ok_or(PlanError::UnknownAttribute { ident, form: show(form) })
}

/// Parses a pattern vector.
pub fn parse_pattern(v: &Value, schema: &Schema, next_id: &mut usize) -> Result<Pattern, PlanError> {
    let Value::Vector(items) = v else {
        return Err(PlanError::syntax(v, "a pull pattern is a vector"));
    };
    if items.is_empty() {
        return Err(PlanError::syntax(v, "a pull pattern names at least one attribute"));
    }
    let mut p = Pattern { wildcard: false, specs: Vec::new() };
    for item in items {
        match item {
            _ if is_symbol(item, "*") || matches!(item, Value::String(s) if s == "*") => p.wildcard = true,
            Value::Map(m) => {
                for (k, sub) in m {
                    let mut spec = attr_expr(k, schema)?;
                    match spec.target {
                        Target::DbId => return Err(PlanError::syntax(k, ":db/id takes no sub-pattern")),
                        Target::Forward(a) if schema.attribute(a).map(|a| a.value_type) != Some(ValueType::Ref) => {
                            return Err(PlanError::type_mismatch(k, "a sub-pattern needs a ref attribute"))
                        }
                        _ => {}
                    }
                    spec.sub = match sub {
                        Value::Vector(_) => Sub::Pattern(parse_pattern(sub, schema, next_id)?),
                        _ if is_symbol(sub, "...") => Sub::Recurse { id: bump(next_id), depth: MAX_DEPTH },
                        Value::Integer(n) if *n >= 0 => Sub::Recurse { id: bump(next_id), depth: *n as usize },
                        _ => return Err(PlanError::syntax(sub, "a map spec's value is a pattern, ... or a depth")),
                    };
                    p.specs.push(spec);
                }
            }
            _ => p.specs.push(attr_expr(item, schema)?),
        }
    }
    let mut names: Vec<&str> = p.specs.iter().map(|s| s.name.as_str()).collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(PlanError::syntax(v, format!("the field {:?} appears twice", w[0])));
    }
    Ok(p)
}

fn bump(n: &mut usize) -> usize {
    *n += 1;
    *n
}

/// An attribute name, `[attr :as x :limit n :default v]`, `(limit attr n)` or `(default attr v)`.
fn attr_expr(v: &Value, schema: &Schema) -> Result<Spec, PlanError> {
    match v {
        Value::Keyword(_) => attr_name(v, schema),
        Value::Vector(items) if !items.is_empty() => {
            let mut spec = attr_name(&items[0], schema)?;
            let opts = &items[1..];
            if opts.len() % 2 != 0 {
                return Err(PlanError::syntax(v, "attribute options come in pairs"));
            }
            for pair in opts.chunks(2) {
                match keyword_text(&pair[0]).as_deref() {
                    Some(":as") => spec.name = as_name(&pair[1])?,
                    Some(":limit") => spec.limit = limit(&pair[1])?,
                    Some(":default") => spec.default = Some(pair[1].clone()),
                    _ => return Err(PlanError::syntax(&pair[0], "an attribute option is :as, :limit or :default")),
                }
            }
            Ok(spec)
        }
        Value::List(items)
            if items.len() == 3 && (is_symbol(&items[0], "limit") || is_symbol(&items[0], "default")) =>
        {
            let mut spec = attr_name(&items[1], schema)?;
            if is_symbol(&items[0], "limit") {
                spec.limit = limit(&items[2])?;
            } else {
                spec.default = Some(items[2].clone());
            }
            Ok(spec)
        }
        _ => Err(PlanError::syntax(v, "expected an attribute, *, a map spec, [attr options] or (limit|default ...)")),
    }
}

fn as_name(v: &Value) -> Result<String, PlanError> {
    match v {
        Value::String(s) if !s.is_empty() => Ok(s.clone()),
        Value::Keyword(_) | Value::Symbol(_) => Ok(show(v).trim_start_matches(':').to_string()),
        _ => Err(PlanError::syntax(v, ":as takes a non-empty string, keyword or symbol")),
    }
}

fn limit(v: &Value) -> Result<Option<i64>, PlanError> {
    match v {
        Value::Nil => Ok(None),
        Value::Integer(n) if *n >= 0 => Ok(Some(*n)),
        _ => Err(PlanError::syntax(v, ":limit takes a non-negative integer or nil")),
    }
}

fn attr_name(v: &Value, schema: &Schema) -> Result<Spec, PlanError> {
    let text = keyword_text(v).ok_or_else(|| PlanError::syntax(v, "expected an attribute keyword"))?;
    let name = text.trim_start_matches(':').to_string();
    if text == ":db/id" {
        return Ok(Spec { target: Target::DbId, name, limit: None, default: None, sub: Sub::None });
    }
    if let Some(a) = schema.attribute_by_ident(&text) {
        let limit = if a.many { Some(DEFAULT_LIMIT) } else { None };
        return Ok(Spec { target: Target::Forward(a.entid), name, limit, default: None, sub: Sub::None });
    }
    // `:ns/_name` is the reverse of `:ns/name`.
    if let Value::Keyword(k) = v {
        if let Some(rest) = k.name().strip_prefix('_') {
            let forward = match k.namespace() {
                Some(ns) => format!(":{ns}/{rest}"),
                None => format!(":{rest}"),
            };
            if let Some(a) = schema.attribute_by_ident(&forward) {
                if a.value_type != ValueType::Ref {
                    return Err(PlanError::type_mismatch(v, format!("{forward} is not a ref attribute")));
                }
                let target = Target::Reverse(a.entid);
                return Ok(Spec { target, name, limit: Some(DEFAULT_LIMIT), default: None, sub: Sub::None });
            }
        }
    }
    Err(PlanError::UnknownAttribute { ident: text, form: show(v) })
}

// ---------------------------------------------------------------------------------------------------------
// Compiling

/// Remaining levels of each recursive spec (and of component expansion, key `COMPONENT`) on the current path.
#[derive(Clone, Default)]
struct Budget(Vec<(usize, usize)>);

const COMPONENT: usize = 0;

impl Budget {
    fn get(&self, id: usize) -> Option<usize> {
        self.0.iter().rev().find(|p| p.0 == id).map(|p| p.1)
    }
    fn with(&self, id: usize, left: usize) -> Budget {
        let mut b = self.clone();
        b.0.push((id, left));
        b
    }
}

struct Compiler<'a> {
    ctx: Ctx<'a>,
    ctes: Vec<String>,
    n: usize,
    /// The top level's ids are the one entity `$1`: filter on it directly.
    top_param: bool,
}

/// The parameter of [`CompiledPull::one_sql`].
const ONE: &str = "CAST($1 AS BIGINT)";

const DB_ID_TYPE: &str = "STRUCT(\"db/id\" BIGINT)";

/// Renders an SQL builder expression (a literal) as text.
fn expr_sql(e: Expr) -> String {
    let q = Query::Select(Box::new(Select { items: vec![(e, None)], ..Default::default() }));
    q.to_sql().trim_start_matches("SELECT ").to_string()
}

/// The datoms of `aid` as `opts` sees them, as a FROM-able text.
fn source_sql(ctx: &Ctx, aid: Entid) -> Result<String, PlanError> {
    match ctx.datoms(aid) {
        TableSource::Table(t) => Ok(t),
        TableSource::Subquery(q) => Ok(format!("(\n{}\n)", q.to_sql())),
        TableSource::Values { .. } | TableSource::Cte(_) => Err(PlanError::Unsupported {
            form: aid.to_string(),
            message: "an attribute source that is a VALUES list".into(),
        }),
    }
}

/// A typed SQL literal of EDN value `v` for attribute `attr` (refs take an entid or an ident keyword).
fn typed_literal(v: &Value, attr: &Attribute, form: &Value, schema: &Schema) -> Result<String, PlanError> {
    let c = scalar_constant(v)?;
    let ok = match (attr.value_type, &c) {
        (ValueType::Ref, Constant::Long(e)) => return Ok(e.to_string()),
        (ValueType::Ref, Constant::Keyword(k)) => {
            return schema
                .entid(k)
                .map(|e| e.to_string())
                .ok_or(PlanError::UnknownIdent { ident: k.clone(), form: show(form) })
        }
        (ValueType::Long, Constant::Long(_))
        | (ValueType::Double, Constant::Long(_) | Constant::Double(_))
        | (ValueType::String | ValueType::Uri, Constant::String(_))
        | (ValueType::Keyword, Constant::Keyword(_))
        | (ValueType::Boolean, Constant::Boolean(_))
        | (ValueType::Instant, Constant::Instant(_) | Constant::String(_))
        | (ValueType::Uuid, Constant::Uuid(_) | Constant::String(_)) => true,
        _ => false,
    };
    if !ok {
        return Err(PlanError::type_mismatch(form, format!("{} is not a {}", show(v), attr.value_type.name())));
    }
    let lit = literal(&c).ok_or_else(|| PlanError::type_mismatch(form, "not a scalar value"))?;
    Ok(format!("CAST({} AS {})", expr_sql(lit), attr.value_type.sql_type()))
}

/// One field of a level: its branch (if it reads datoms), its aggregate and its expression over `g`/`i`.
struct Field {
    name: String,
    ty: String,
    expr: String,
    branch: Option<String>,
    agg: Option<String>,
}

impl Compiler<'_> {
    fn fresh(&mut self, prefix: &str) -> String {
        self.n += 1;
        format!("pull_{prefix}{}", self.n)
    }

    /// The fields of a pattern, `*` expanded (see the module docs for the order).
    fn expand(&self, pat: &Pattern) -> Vec<Spec> {
        if !pat.wildcard {
            return pat.specs.clone();
        }
        let mut out =
            vec![Spec { target: Target::DbId, name: "db/id".into(), limit: None, default: None, sub: Sub::None }];
        let mut used = vec![false; pat.specs.len()];
        for a in self.ctx.schema.attributes() {
            if a.entid < PART_DB_USER_START {
                continue;
            }
            if let Some(i) = pat.specs.iter().position(|s| s.target == Target::Forward(a.entid)) {
                used[i] = true;
                out.push(pat.specs[i].clone());
                continue;
            }
            let sub = if a.component && a.value_type == ValueType::Ref { Sub::Component } else { Sub::None };
            let limit = if a.many { Some(DEFAULT_LIMIT) } else { None };
            out.push(Spec {
                target: Target::Forward(a.entid),
                name: a.ident.trim_start_matches(':').to_string(),
                limit,
                default: None,
                sub,
            });
        }
        for (i, s) in pat.specs.iter().enumerate() {
            if !used[i] && !(s.target == Target::DbId) {
                out.push(s.clone());
            }
        }
        out
    }

    /// Compiles one level: a CTE `(e, pull)` over the ids in CTE `ids`. Returns its name and the pull type.
    fn node(&mut self, pat: &Pattern, ids: &str, budget: &Budget) -> Result<(String, String), PlanError> {
        let specs = self.expand(pat);
        let mut fields = Vec::new();
        for (i, spec) in specs.iter().enumerate() {
            fields.push(self.field(pat, spec, i, ids, budget)?);
        }
        // a pattern that asks for `:db/id` or gives a `:default` returns a map for any entity (Datomic gives the
        // defaults of an entity that has none of the pattern's attributes); otherwise such an entity is nil
        let has_id = specs.iter().any(|s| s.target == Target::DbId || s.default.is_some());
        let ty = format!(
            "STRUCT({})",
            fields.iter().map(|f| format!("{} {}", quote_ident(&f.name), f.ty)).collect::<Vec<_>>().join(", ")
        );
        let st = format!(
            "{{{}}}",
            fields.iter().map(|f| format!("{}: {}", quote_str(&f.name), f.expr)).collect::<Vec<_>>().join(", ")
        );
        let branches: Vec<&str> = fields.iter().filter_map(|f| f.branch.as_deref()).collect();
        let body = if branches.is_empty() {
            format!("SELECT i.e AS e, {st} AS pull FROM {ids} AS i")
        } else {
            let aggs: Vec<&str> = fields.iter().filter_map(|f| f.agg.as_deref()).collect();
            let one = self.top_param && ids == IDS;
            let found = if one { "g.n > 0" } else { "g.e IS NOT NULL" };
            let pull = if has_id { st } else { format!("CASE WHEN {found} THEN {st} END") };
            if one {
                // One entity: an ungrouped aggregate (no hash table) cross joined with the one id.
                return self.finish_node(format!(
                    "SELECT i.e AS e, {pull} AS pull\nFROM {ids} AS i CROSS JOIN (\n  SELECT count(*) AS n, {}\n  FROM (\n    {}\n  ) AS u\n) AS g",
                    aggs.join(", "),
                    branches.join("\n    UNION ALL BY NAME\n    ")
                ), ty);
            }
            format!(
                "SELECT i.e AS e, {pull} AS pull\nFROM {ids} AS i LEFT JOIN (\n  SELECT e, {}\n  FROM (\n    {}\n  ) AS u GROUP BY e\n) AS g ON g.e = i.e",
                aggs.join(", "),
                branches.join("\n    UNION ALL BY NAME\n    ")
            )
        };
        self.finish_node(body, ty)
    }

    fn finish_node(&mut self, body: String, ty: String) -> Result<(String, String), PlanError> {
        let name = self.fresh("n");
        self.ctes.push(format!("{name} AS NOT MATERIALIZED (\n{body})"));
        Ok((name, ty))
    }

    fn field(&mut self, pat: &Pattern, spec: &Spec, i: usize, ids: &str, budget: &Budget) -> Result<Field, PlanError> {
        let (aid, reverse) = match spec.target {
            Target::DbId => {
                return Ok(Field {
                    name: spec.name.clone(),
                    ty: "BIGINT".into(),
                    expr: "i.e".into(),
                    branch: None,
                    agg: None,
                })
            }
            Target::Forward(a) => (a, false),
            Target::Reverse(a) => (a, true),
        };
        let schema = self.ctx.schema;
        let attr = schema
            .attribute(aid)
            .ok_or_else(|| PlanError::UnknownAttribute { ident: aid.to_string(), form: spec.name.clone() })?;
        let is_ref = attr.value_type == ValueType::Ref;
        let many = reverse || attr.many;
        // The sub-pattern actually expanded here, with the budget below it.
        let sub: Option<(Pattern, Budget)> = match &spec.sub {
            Sub::None => None,
            Sub::Pattern(p) => Some((p.clone(), budget.clone())),
            Sub::Recurse { id, depth } => {
                let left = budget.get(*id).unwrap_or(*depth);
                (left > 0).then(|| (pat.clone(), budget.with(*id, left - 1)))
            }
            Sub::Component => {
                let left = budget.get(COMPONENT).unwrap_or(MAX_DEPTH);
                let star = Pattern { wildcard: true, specs: vec![] };
                (left > 0).then(|| (star, budget.with(COMPONENT, left - 1)))
            }
        };
        let src = source_sql(&self.ctx, aid)?;
        // (entity column, value column) of the datom as seen from the pulled entity.
        let (here, there) = if reverse { ("v", "e") } else { ("e", "v") };
        // The datoms of the entities in `ids`, as a FROM clause tail.
        let (from, filter) = if self.top_param && ids == IDS {
            (format!("{src} AS d"), format!(" WHERE d.{here} = {ONE}"))
        } else {
            (format!("{ids} AS i JOIN {src} AS d ON d.{here} = i.e"), String::new())
        };
        let c = format!("c{i}");
        let o = format!("o{i}");
        let has_sub = sub.is_some();
        let (value, join, vty) = match sub {
            Some((p, b)) => {
                let sub_ids = self.fresh("ids");
                self.ctes
                    .push(format!("{sub_ids} AS MATERIALIZED (SELECT DISTINCT d.{there} AS e FROM {from}{filter})"));
                let (node, ty) = self.node(&p, &sub_ids, &b)?;
                ("s.pull".to_string(), format!(" LEFT JOIN {node} AS s ON s.e = d.{there}"), ty)
            }
            None if is_ref || reverse => (format!("{{'db/id': d.{there}}}"), String::new(), DB_ID_TYPE.to_string()),
            None => ("d.v".to_string(), String::new(), attr.value_type.sql_type().to_string()),
        };
        let order = if many { format!(", d.{there} AS {o}") } else { String::new() };
        let branch = format!("SELECT d.{here} AS e, {value} AS {c}{order} FROM {from}{join}{filter}");
        let (agg, mut expr, ty) = if many {
            let agg = format!("list({c} ORDER BY {o}) FILTER (WHERE {c} IS NOT NULL) AS {c}");
            let expr = match spec.limit {
                Some(n) => format!("(g.{c})[1:{n}]"),
                None => format!("g.{c}"),
            };
            (agg, expr, format!("{vty}[]"))
        } else {
            (format!("any_value({c}) AS {c}"), format!("g.{c}"), vty)
        };
        if let Some(d) = &spec.default {
            if has_sub {
                return Err(PlanError::unsupported(d, ":default on an attribute with a sub-pattern"));
            }
            expr = format!("coalesce({expr}, {})", self.default_sql(d, attr, many, reverse, &ty)?);
        }
        Ok(Field { name: spec.name.clone(), ty, expr, branch: Some(branch), agg: Some(agg) })
    }

    /// The SQL of a `:default` value: of the attribute's type (refs: `{"db/id"}` of an entid or ident), a
    /// LIST for cardinality-many (a vector, or one value). A default of the wrong type is an error.
    fn default_sql(
        &self,
        d: &Value,
        attr: &Attribute,
        many: bool,
        reverse: bool,
        ty: &str,
    ) -> Result<String, PlanError> {
        let schema = self.ctx.schema;
        let one = |v: &Value| -> Result<String, PlanError> {
            let lit = typed_literal(v, attr, d, schema)?;
            Ok(if attr.value_type == ValueType::Ref || reverse { format!("{{'db/id': {lit}}}") } else { lit })
        };
        let text = if many {
            let items: Vec<Value> = match d {
                Value::Vector(v) | Value::List(v) => v.clone(),
                other => vec![other.clone()],
            };
            let parts: Result<Vec<String>, PlanError> = items.iter().map(one).collect();
            format!("[{}]", parts?.join(", "))
        } else {
            one(d)?
        };
        Ok(format!("CAST({text} AS {ty})"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{Attribute, Unique};
    use crate::source::TimeBound;

    fn schema() -> Schema {
        let mut email = Attribute::new(100, ":user/email", ValueType::String);
        email.unique = Some(Unique::Identity);
        let mut label = Attribute::new(108, ":issue/label", ValueType::Ref);
        label.many = true;
        let mut comp = Attribute::new(110, ":issue/comment", ValueType::Ref);
        comp.many = true;
        comp.component = true;
        let mut s = crate::layout::bootstrap_schema()
            .with_attribute(email)
            .with_attribute(Attribute::new(101, ":user/name", ValueType::String))
            .with_attribute(Attribute::new(102, ":issue/title", ValueType::String))
            .with_attribute(Attribute::new(105, ":issue/assignee", ValueType::Ref))
            .with_attribute(label)
            .with_attribute(Attribute::new(109, ":label/name", ValueType::String))
            .with_attribute(comp)
            .with_attribute(Attribute::new(111, ":comment/text", ValueType::String))
            .with_attribute(Attribute::new(112, ":user/friend", ValueType::Ref));
        s.add_ident(":state/open", 5000);
        s
    }

    fn compile(p: &str) -> Result<CompiledPull, PlanError> {
        compile_pull(p, &schema(), &StoreName::parse("mentat").unwrap(), &QueryOptions::default())
    }

    #[test]
    fn types_follow_pattern_and_schema() {
        let c = compile("[:db/id :issue/title {:issue/assignee [:user/name]} :issue/label :issue/_assignee]").unwrap();
        assert_eq!(
            c.sql_type,
            "STRUCT(\"db/id\" BIGINT, \"issue/title\" VARCHAR, \"issue/assignee\" STRUCT(\"user/name\" VARCHAR), \
             \"issue/label\" STRUCT(\"db/id\" BIGINT)[], \"issue/_assignee\" STRUCT(\"db/id\" BIGINT)[])"
        );
        let c = compile("[[:issue/title :as \"t\"] (limit :issue/label 2) [:issue/label :as :l :limit nil]]").unwrap();
        assert_eq!(
            c.sql_type,
            "STRUCT(\"t\" VARCHAR, \"issue/label\" STRUCT(\"db/id\" BIGINT)[], \"l\" STRUCT(\"db/id\" BIGINT)[])"
        );
        let sql = c.one_sql();
        assert!(sql.contains("[1:2]"), "{sql}");
        assert!(sql.contains("(g.c1)[1:2]") && !sql.contains("(g.c2)["), "{sql}");
    }

    #[test]
    fn recursion_is_bounded() {
        let c = compile("[:user/name {:user/friend 2}]").unwrap();
        assert_eq!(
            c.sql_type,
            "STRUCT(\"user/name\" VARCHAR, \"user/friend\" STRUCT(\"user/name\" VARCHAR, \"user/friend\" \
             STRUCT(\"user/name\" VARCHAR, \"user/friend\" STRUCT(\"db/id\" BIGINT))))"
        );
        let c = compile("[:user/name {:user/friend ...}]").unwrap();
        assert_eq!(c.sql_type.matches("user/friend").count(), MAX_DEPTH + 1);
    }

    #[test]
    fn wildcard_expands_schema_and_components() {
        let c = compile("[*]").unwrap();
        assert!(c.sql_type.starts_with("STRUCT(\"db/id\" BIGINT, \"user/email\" VARCHAR"), "{}", c.sql_type);
        assert!(!c.sql_type.contains("db/ident"));
        // the component is pulled with [*] again, MAX_DEPTH levels
        assert_eq!(c.sql_type.matches("\"comment/text\"").count(), MAX_DEPTH + 1);
        let c = compile("[* {:issue/assignee [:user/name]}]").unwrap();
        assert!(c.sql_type.contains("\"issue/assignee\" STRUCT(\"user/name\" VARCHAR)"), "{}", c.sql_type);
    }

    #[test]
    fn errors_name_the_form() {
        assert!(matches!(compile("[:nope/x]"), Err(PlanError::UnknownAttribute { .. })));
        assert!(matches!(compile("[:user/_name]"), Err(PlanError::TypeMismatch { .. })));
        assert!(matches!(compile("[{:user/name [:x/y]}]"), Err(PlanError::TypeMismatch { .. })));
        assert!(matches!(compile(":user/name"), Err(PlanError::Syntax { .. })));
        assert!(matches!(compile("[:user/name [:user/name :as \"user/name\"]]"), Err(PlanError::Syntax { .. })));
        assert!(matches!(compile("[[:user/name :default 3]]"), Err(PlanError::TypeMismatch { .. })));
        assert!(matches!(compile("[:user/name"), Err(PlanError::Edn { .. })));
        let hist = QueryOptions { history: true, ..Default::default() };
        let store = StoreName::parse("mentat").unwrap();
        assert!(matches!(compile_pull("[*]", &schema(), &store, &hist), Err(PlanError::Unsupported { .. })));
    }

    #[test]
    fn entities_and_time_travel() {
        let s = schema();
        let store = StoreName::parse("mentat").unwrap();
        let now = QueryOptions::default();
        assert_eq!(entity_sql("65536", &s, &store, &now).unwrap(), "65536");
        assert_eq!(entity_sql(":state/open", &s, &store, &now).unwrap(), "5000");
        assert!(entity_sql(":state/nope", &s, &store, &now).is_err());
        let l = entity_sql("[:user/email \"a'b\"]", &s, &store, &now).unwrap();
        assert!(l.contains("'a''b'") && l.contains("\"cur_100\""), "{l}");
        assert!(entity_sql("[:user/name \"x\"]", &s, &store, &now).is_err());
        let as_of = QueryOptions { as_of: Some(TimeBound::Tx(1 << 40)), ..Default::default() };
        let c = compile_pull("[:user/name]", &s, &store, &as_of).unwrap();
        assert!(c.one_sql().contains("\"hist_101\""));
    }
}
