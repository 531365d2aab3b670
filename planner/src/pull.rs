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
//! * a reverse attribute: a LIST (of `STRUCT("db/id" BIGINT)` or of the nested STRUCT), ordered by the
//!   referring entity's id, default limit 1000; the reverse of a component attribute is one STRUCT, not a
//!   LIST, for cardinality-one and cardinality-many components alike (a component has one owner; Datomic
//!   returns a single map).
//! * a forward component attribute without a sub-pattern (named, or under `*`) is pulled whole, as Datomic's
//!   component defaults: each component as `[*]`, its own components whole again, to any depth. No static
//!   type holds a tree of unknown depth, so the field is JSON (a LIST of JSON for cardinality-many); in the
//!   JSON an absent attribute's key is left out, as Datomic leaves it out. With a sub-pattern
//!   (`{:part [:name]}`) the sub-pattern's typed STRUCT is pulled instead. The walk stops at its own cycles: an
//!   entity already on its path, which starts at the entity whose field it is, is `{"db/id": e}`. Maps above that
//!   entity, pulled by explicit sub-patterns, are not on the path (a level is computed once per entity, not per
//!   path), so a component that comes back to one of them is pulled whole again; DataScript gives `{:db/id e}`
//!   there when the sub-pattern that reached it holds `*`. Datomic documents neither.
//! * `*`: `"db/id"` first, then the attributes the pulled entities hold, by entid (bootstrap attributes such
//!   as `:db/ident` included), under the rules above. "Hold" is decided by a probe of the data before the
//!   statement is compiled ([`compile_pull_held`], [`CompiledPull::held_input_sql`]): for one entity its own
//!   attributes, for many (pull-many, or a find element over an answer) the union over them, so the STRUCT has
//!   one type for the whole answer; the JSON of an unbounded walk has the attributes its entities hold. Without
//!   a probe (the SQL of `mentat_sql` in DuckDB's dialect), every attribute of the schema; `mentat_sql` in
//!   Spark's dialect runs the probe in DuckDB first.
//!   Attributes named explicitly next to `*` replace the wildcard's field of the same attribute in place;
//!   other explicit specs follow.
//! * recursion: `{:a n}` expands n levels, typed, each level with the pattern the recursive spec sits in;
//!   past the last level the attribute is a ref without sub-pattern (`{"db/id"}`), which is what Datomic
//!   returns at a recursion limit. `{:a ...}` follows every reachable entity to any depth; an entity already
//!   on the path from the top is not expanded again but given as `{"db/id": e}` (Datomic's cycle rule). The
//!   recursive field is JSON (a LIST of JSON for cardinality-many), the other fields of the top level keep
//!   their types. See `Compiler::rec_node` for the SQL and `storage/README.md` for its cost.
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
//! v)` for many); a level of more than 16 attributes (`UNION_CHUNK`; a `*` over a wide schema) in chunks of that
//! many, each folded on its own and joined by `e`, since DuckDB pads every branch of a union by name to all of its
//! columns. A nested level reads the distinct ref values of its parent (a MATERIALIZED CTE) as its
//! ids. Planning cost is linear in the pattern (correlated scalar subqueries would make DuckDB's join
//! orderer enumerate cross products: 60 ms of planning for ten attributes).
//!
//! # Spark
//!
//! With [`QueryOptions::dialect`] Spark the same levels are printed in Spark SQL over the views of a Parquet
//! export (the statement [`CompiledPull::relation_sql`], read by `(pull ?e pattern)` find elements): STRUCTs as
//! `named_struct(...)`, the branches of a level glued by `UNION ALL` with every column in every branch (NULL for
//! the other branches' columns; Spark matches columns by position), cardinality-one fields by `first(c, true)`,
//! LISTs as `sort_array` of the `(key, value)` pairs `collect_list` gathers, then their values (NULL, not `[]`,
//! when none), cut by `slice(list, 1, n)`; no CTE hints. The result has the same shape and the same DuckDB type
//! text in [`CompiledPull::sql_type`]. What needs JSON, unbounded recursion (`...`) and a forward component pulled
//! whole, is refused with [`PlanError::Dialect`] naming it. The one-entity statements (`$1`) stay DuckDB's. The
//! probe of `*` ([`CompiledPull::held_input_sql`]) is printed in Spark SQL too (checked to run on Spark 4.3), but
//! `mentat_sql` runs the DuckDB dialect's probe over the export's files, so that `mentat_spark.q` needs no change.

use crate::error::{show, PlanError};
use crate::layout::{quote_ident, quote_str, StoreName};
use crate::parse::parse_edn;
use crate::schema::{Attribute, Entid, Schema, ValueType};
use crate::source::{Ctx, QueryOptions};
use crate::sql::{spark_ident, spark_str, spark_type, Dialect, Expr, Query, Select, TableSource};
use crate::types::{literal, scalar_constant, Constant};
use edn_format::Value;

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
    /// `...` (depth None: every reachable entity, each pulled once on a path) or a depth number: the enclosing
    /// pattern again; `id` tells recursive specs apart.
    Recurse { id: usize, depth: Option<usize> },
    /// A forward component attribute without a sub-pattern: each component pulled whole, `[*]` with its own
    /// components pulled whole, as JSON (Datomic's component defaults).
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
    /// For a pattern with `*`: the CTEs (after those of [`CompiledPull::with`]) and SELECT of the attributes
    /// the entities of its `*` levels hold, column `a`; see [`compile_pull_held`].
    held_sql: Option<String>,
    /// The dialect the CTEs are printed in (the `*_sql` statements below are DuckDB's, except
    /// [`CompiledPull::relation_sql`] and [`CompiledPull::held_input_sql`], printed in this dialect).
    dialect: Dialect,
}

impl CompiledPull {
    /// The CTEs of the input relation and its distinct ids, in this pull's dialect.
    fn input_ctes(&self, input: &str) -> [String; 2] {
        let lazy = hint(self.dialect, false);
        [
            format!("pull_in AS{lazy} (\n{input})"),
            format!("{IDS} AS{lazy} (SELECT DISTINCT e FROM pull_in WHERE e IS NOT NULL)"),
        ]
    }

    fn with(&self, input: &str) -> String {
        let mut ctes = self.input_ctes(input).to_vec();
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
        self.input_sql(MANY_INPUT)
    }

    /// The statement listing the attributes (entids, column `a`) held by the entities that the `*` levels of
    /// this pattern pull from `input` (as for [`CompiledPull::input_sql`]); None for a pattern without `*`.
    pub fn held_input_sql(&self, input: &str) -> Option<String> {
        let held = self.held_sql.as_ref()?;
        let ctes = self.input_ctes(input);
        Some(format!("WITH {},\n{held}", ctes.join(",\n")))
    }

    /// Whether the pattern has `*` (its STRUCT is then typed from the attributes the entities hold).
    pub fn has_wildcard(&self) -> bool {
        self.held_sql.is_some()
    }

    /// [`CompiledPull::held_input_sql`] for one entity given as parameter `$1`.
    pub fn held_one_sql(&self) -> Option<String> {
        self.held_input_sql("SELECT CAST($1 AS BIGINT) AS e, 1 AS ord")
    }

    /// [`CompiledPull::held_input_sql`] for a `BIGINT[]` parameter `$1`.
    pub fn held_many_sql(&self) -> Option<String> {
        self.held_input_sql(MANY_INPUT)
    }

    /// [`CompiledPull::held_input_sql`] for entities given as SQL expressions.
    pub fn held_entities_sql(&self, entities: &[String]) -> Option<String> {
        self.held_input_sql(&entities_input(entities))
    }

    /// Entities given as SQL expressions (from [`entity_sql`]), one row each, in order.
    pub fn entities_sql(&self, entities: &[String]) -> String {
        self.input_sql(&entities_input(entities))
    }
}

/// The input relation of [`CompiledPull::many_sql`]: the elements of the `BIGINT[]` parameter `$1`, in order.
const MANY_INPUT: &str =
    "SELECT unnest(l) AS e, generate_subscripts(l, 1) AS ord FROM (SELECT CAST($1 AS BIGINT[]) AS l) AS t";

/// The input relation of entities given as SQL expressions, in order.
fn entities_input(entities: &[String]) -> String {
    if entities.is_empty() {
        return "SELECT CAST(NULL AS BIGINT) AS e, 1 AS ord WHERE FALSE".to_string();
    }
    let rows: Vec<String> =
        entities.iter().enumerate().map(|(i, e)| format!("(CAST({e} AS BIGINT), {})", i + 1)).collect();
    format!("SELECT * FROM (VALUES {}) AS v(e, ord)", rows.join(", "))
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
    compile_pull_held(pattern, schema, store, opts, None)
}

/// [`compile_pull_value`] with `*` expanded to the attributes in `held` only (in entid order), bootstrap
/// attributes included: the STRUCT of a wildcard is typed from the attributes the pulled entities hold, found
/// by running [`CompiledPull::held_input_sql`] of the pattern compiled with `held` None (every attribute of the
/// schema, `:db/ident` and the other bootstrap attributes included).
pub fn compile_pull_held(
    pattern: &Value,
    schema: &Schema,
    store: &StoreName,
    opts: &QueryOptions,
    held: Option<&[Entid]>,
) -> Result<CompiledPull, PlanError> {
    if opts.history {
        return Err(PlanError::unsupported(pattern, "pull reads a database value; history := true is not one"));
    }
    let mut next_id = 0;
    let pattern = parse_pattern(pattern, schema, &mut next_id)?;
    let mut c = Compiler::new(Ctx::new(schema, store, opts), false, held);
    let root = c.node(&pattern, IDS, &Budget::default())?;
    // the one-entity statement (a `$1` parameter) is DuckDB's only
    let (one_ctes, one_root) = match opts.dialect {
        Dialect::DuckDb => {
            let mut one = Compiler::new(Ctx::new(schema, store, opts), true, held);
            let one_root = one.node(&pattern, IDS, &Budget::default())?;
            (one.ctes, one_root.cte)
        }
        Dialect::Spark => (c.ctes.clone(), root.cte.clone()),
    };
    let held_sql = match c.wild_ids.is_empty() {
        true => None,
        false => Some(held_sql(&c, schema)?),
    };
    Ok(CompiledPull {
        ctes: c.ctes,
        root: root.cte,
        sql_type: root.ty,
        one_ctes,
        one_root,
        held_sql,
        dialect: opts.dialect,
    })
}

/// The probe of a wildcard pattern: `SELECT DISTINCT a` over the attributes (every attribute of the schema) that
/// any entity of a `*` level holds: one UNION ALL of `(a, e)` over every attribute's table, kept where `e` is one of
/// those entities. An attribute held by an entity of an unbounded walk ([`Compiler::rec_node`]: `...`, or a
/// component pulled whole) comes back negated: the walks' JSON is then expanded to those attributes (and the typed
/// levels'), not to the whole schema. Only the CTEs the ids read are sent ([`ctes_for`]).
///
/// Measured over the fuzz store of `benchmarks/py/fuzz_ext.py` (150 attributes, 11 users; 2026-12-03):
/// `[* {:user/_manager ...}]` on one entity 4.1 s with the walk expanded to every attribute (a 260 KB statement,
/// nearly all of it DuckDB's optimizer), 0.067 s with it narrowed; `[*]` 0.054 -> 0.039 s with the probe's
/// statement cut to the ids' CTEs. Same answers (one entity, pull-many and a find, each pattern).
///
/// Measured (2026-12-03, prepared statements executed again, so that planning is left out): an EXISTS per
/// attribute, each its own join with the entities, cost 18.7 ms for one entity of a 44-attribute store of a few
/// datoms, against 4.7 ms for this one filter over the union; on the 2.76 M datoms of scale s (22 attributes) 8.0
/// against 5.7 ms for one entity and 16.4 against 7.7 ms for 100 (DuckDB pushes the filter into each table's scan).
fn held_sql(c: &Compiler, schema: &Schema) -> Result<String, PlanError> {
    let ids: Vec<String> = c.wild_ids.iter().map(|(w, walk)| format!("SELECT e, {walk} AS walk FROM {w}")).collect();
    let mut branches = Vec::new();
    for a in schema.attributes() {
        branches.push(format!(
            "SELECT CAST({} AS BIGINT) AS a, d.e AS e FROM {} AS d",
            a.entid,
            source_sql(&c.ctx, a.entid)?
        ));
    }
    let names: Vec<String> = c.wild_ids.iter().map(|(w, _)| w.clone()).collect();
    let mut ctes = ctes_for(&c.ctes, &names);
    ctes.push(format!("pull_held AS{} ({})", hint(c.dialect, true), ids.join(" UNION ")));
    // an attribute held by a walk's entity comes back negated: the walks' JSON has its own `*` (Compiler::new)
    Ok(format!(
        "{}\nSELECT DISTINCT CASE WHEN w.walk THEN -h.a ELSE h.a END AS a FROM (\n{}\n) AS h JOIN pull_held AS w ON w.e = h.e",
        ctes.join(",\n"),
        branches.join("\nUNION ALL\n")
    ))
}

/// The CTEs of `ctes` (each `name AS ...`, in dependency order) that the CTEs named `roots` read, directly or
/// through others, in their order: the probe of a `*` needs the ids of its levels, not the levels' STRUCTs, which
/// over a wide schema are most of the statement (DuckDB parses and binds every CTE it is given).
fn ctes_for(ctes: &[String], roots: &[String]) -> Vec<String> {
    let name = |cte: &str| cte.split_whitespace().next().unwrap_or("").to_string();
    // whether `text` names `n` as a whole identifier
    let names = |text: &str, n: &str| {
        text.match_indices(n).any(|(at, _)| {
            let before = text[..at].chars().next_back().is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
            let after = text[at + n.len()..].chars().next().is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
            before && after
        })
    };
    let mut keep = vec![false; ctes.len()];
    let mut wanted: Vec<String> = roots.to_vec();
    while let Some(w) = wanted.pop() {
        if let Some(i) = ctes.iter().position(|c| name(c) == w) {
            if !keep[i] {
                keep[i] = true;
                let body = &ctes[i][w.len()..];
                for (j, other) in ctes.iter().enumerate() {
                    let n = name(other);
                    if j != i && !keep[j] && names(body, &n) {
                        wanted.push(n);
                    }
                }
            }
        }
    }
    ctes.iter().zip(keep).filter(|(_, k)| *k).map(|(c, _)| c.clone()).collect()
}

/// The pattern the entity path (`storage::eindex`) pulls, every `*` expanded as [`compile_pull`] expands it (a
/// level's `wildcard` stays set, its specs are the expansion): every field is `:db/id`, a forward attribute of a
/// value type the index holds (not uuid or bytes) with a `:default` of the attribute's own type or none, a ref
/// attribute with a nested pattern, or a reverse ref attribute (not of a component: a component's owner is one
/// value) without a `:default`, with or without a nested pattern; nested patterns follow the same rules. None for
/// any other pattern (recursion, components under `*`) or any time-travel option: the general path pulls those.
/// `held` restricts every `*` as in [`compile_pull_held`] (one set for all the levels, as the general path's probe
/// gives it).
pub fn entity_path_pattern(
    pattern_edn: &str,
    schema: &Schema,
    store: &StoreName,
    opts: &QueryOptions,
    held: Option<&[Entid]>,
) -> Option<Pattern> {
    if opts.as_of.is_some() || opts.since.is_some() || opts.history {
        return None;
    }
    let mut next_id = 0;
    let pattern = parse_pattern(&parse_edn(pattern_edn, "pull pattern").ok()?, schema, &mut next_id).ok()?;
    let c = Compiler::new(Ctx::new(schema, store, opts), false, held);
    let pattern = expand_all(&c, &pattern, schema);
    entity_path_specs(&pattern.specs, schema).then_some(pattern)
}

/// `pat` with the `*` of every level expanded by `c` (see [`entity_path_pattern`]).
fn expand_all(c: &Compiler, pat: &Pattern, schema: &Schema) -> Pattern {
    let mut specs = c.expand(pat);
    // `*` leaves out the bootstrap tuple attributes (`:db/tupleTypes`, `:db/tupleAttrs`), which the index does not
    // hold: the transactor lets only tuple attributes, entities of `:db.part/db`, hold them, and the entity path
    // pulls no such entity with `*` (see `storage::eindex::pull`).
    if pat.wildcard {
        let named = |a: Entid| pat.specs.iter().any(|s| s.target == Target::Forward(a));
        specs.retain(|s| match s.target {
            Target::Forward(a) => {
                a >= crate::layout::PART_DB_USER_START
                    || schema.attribute(a).is_none_or(|attr| crate::entity::entity_path_type(attr.value_type))
                    || named(a)
            }
            _ => true,
        });
    }
    for s in &mut specs {
        if let Sub::Pattern(p) = &s.sub {
            s.sub = Sub::Pattern(expand_all(c, p, schema));
        }
    }
    Pattern { wildcard: pat.wildcard, specs }
}

/// Whether the entity path pulls every spec of `specs` (see [`entity_path_pattern`]).
fn entity_path_specs(specs: &[Spec], schema: &Schema) -> bool {
    let nested = |sub: &Sub| match sub {
        Sub::None => true,
        Sub::Pattern(p) => entity_path_specs(&p.specs, schema),
        _ => false,
    };
    specs.iter().all(|s| match s.target {
        Target::DbId => true,
        Target::Forward(a) => {
            let Some(attr) = schema.attribute(a) else { return false };
            if !crate::entity::entity_path_type(attr.value_type) {
                return false;
            }
            if let Some(d) = &s.default {
                if attr.many || crate::entity::default_key(d, attr.value_type, schema).is_none() {
                    return false;
                }
            }
            match &s.sub {
                Sub::None => true,
                sub => attr.value_type == ValueType::Ref && s.default.is_none() && nested(sub),
            }
        }
        Target::Reverse(a) => schema.attribute(a).is_some_and(|attr| {
            attr.value_type == ValueType::Ref && !attr.component && s.default.is_none() && nested(&s.sub)
        }),
    })
}

/// A lookup ref given as EDN text (`[:user/email "a@b.c"]`) as the entity path resolves it: the unique attribute
/// and the value's key. None for anything else (an entid, an ident), for a tuple attribute's lookup ref and for
/// values the entity path does not read (instants, uuids, ...): [`entity_sql`] resolves those, and reports the
/// errors (an attribute that is not unique, a value of the wrong type).
pub fn lookup_ref_key(entity_edn: &str, schema: &Schema) -> Option<(Entid, crate::entity::Key)> {
    let Value::Vector(items) = parse_edn(entity_edn, "entity").ok()? else { return None };
    let [a, v] = items.as_slice() else { return None };
    let attr = schema.attribute_by_ident(&keyword_text(a)?)?;
    if attr.unique.is_none() || attr.tuple.is_some() || !crate::entity::entity_path_type(attr.value_type) {
        return None;
    }
    Some((attr.entid, crate::entity::value_key(v, attr.value_type, schema)?))
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
    let v = parse_edn(entity_edn, "entity").map_err(|e| match e {
        PlanError::Edn { what, message, form } => {
            PlanError::Edn { what, message: format!("{message} ({})", crate::algebrize::ENTITY), form }
        }
        other => other,
    })?;
    match &v {
        Value::Integer(i) => Ok(i.to_string()),
        Value::Keyword(_) => {
            let ident = show(&v);
            schema.entid(&ident).map(|e| e.to_string()).ok_or(PlanError::UnknownIdent { form: ident.clone(), ident })
        }
        Value::Vector(items) if items.len() == 2 => {
            let attr = attribute_of(&items[0], &v, schema)?;
            if attr.unique.is_none() {
                return Err(PlanError::BadInput {
                    form: show(&v),
                    message: format!("a lookup ref's attribute must be :db/unique, {} is not unique", attr.ident),
                });
            }
            let ctx = Ctx::new(schema, store, opts);
            let value = if attr.tuple.is_some() {
                // A tuple (a composite's lookup ref): read and typed as a query constant of the attribute's type.
                let c = crate::algebrize::read_constant(&ctx, &items[1], &v)?;
                let e = crate::algebrize::coerce(&ctx, &c, &crate::types::attr_ty(attr)).ok_or_else(|| {
                    PlanError::type_mismatch(&v, format!("{} is not a value of {}", show(&items[1]), attr.ident))
                })?;
                expr_sql(e, Dialect::DuckDb)?
            } else {
                typed_literal(&items[1], attr, &v, schema, Dialect::DuckDb).map_err(|e| match e {
                    // worded as mentat_q words a lookup-ref input of the wrong type
                    PlanError::TypeMismatch { form, .. } => match crate::types::scalar_constant(&items[1]) {
                        Ok(c) => PlanError::TypeMismatch {
                            form,
                            message: crate::algebrize::lookup_value_mismatch(
                                &attr.ident,
                                &crate::types::attr_ty(attr),
                                &show(&items[1]),
                                &c.natural_type(),
                            ),
                        },
                        Err(_) => {
                            PlanError::TypeMismatch { form, message: format!("{} is not a value", show(&items[1])) }
                        }
                    },
                    other => other,
                })?
            };
            Ok(format!("(SELECT any_value(d.e) FROM {} AS d WHERE d.v = {value})", source_sql(&ctx, attr.entid)?))
        }
        other => {
            let what = match (other, crate::types::scalar_constant(other)) {
                (Value::Vector(_), _) => "a vector that is not a lookup ref".to_string(),
                (_, Ok(c)) => c.natural_type().a_name(),
                _ => "this form".to_string(),
            };
            Err(PlanError::type_mismatch(&v, format!("{what} cannot name an entity: {}", crate::algebrize::ENTITY)))
        }
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
    schema.attribute_by_ident(&ident).ok_or(PlanError::UnknownAttribute {
        ident,
        form: show(form),
        context: String::new(),
    })
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
            // Datomic's grammar: a map spec holds one or more `attr pattern` pairs
            Value::Map(m) if m.is_empty() => {
                return Err(PlanError::syntax(item, "a map spec names at least one ref attribute"));
            }
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
                        _ if is_symbol(sub, "...") => Sub::Recurse { id: bump(next_id), depth: None },
                        Value::Integer(n) if *n >= 0 => Sub::Recurse { id: bump(next_id), depth: Some(*n as usize) },
                        _ => return Err(PlanError::syntax(sub, "a map spec's value is a pattern, ... or a depth")),
                    };
                    p.specs.push(spec);
                }
            }
            // the same spec twice is one field, as a Datomic pull map holds each key once (`[:a :a]`)
            _ => {
                let spec = attr_expr(item, schema)?;
                if !p.specs.contains(&spec) {
                    p.specs.push(spec)
                }
            }
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

/// An attribute name, `[attr :as x :limit n :default v]` (or the list form `(attr :limit n)`, which Datomic's
/// and DataScript's readers take too), `(limit attr n)` or `(default attr v)`.
fn attr_expr(v: &Value, schema: &Schema) -> Result<Spec, PlanError> {
    match v {
        Value::Keyword(_) => attr_name(v, schema),
        Value::Vector(items) | Value::List(items)
            if matches!(v, Value::Vector(_)) && !items.is_empty()
                || matches!(items.first(), Some(Value::Keyword(_))) =>
        {
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
        let sub = if a.component && a.value_type == ValueType::Ref { Sub::Component } else { Sub::None };
        return Ok(Spec { target: Target::Forward(a.entid), name, limit, default: None, sub });
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
                // a component has one owner: its reverse is one entity, without a limit
                let limit = if a.component { None } else { Some(DEFAULT_LIMIT) };
                return Ok(Spec { target, name, limit, default: None, sub: Sub::None });
            }
        }
    }
    Err(PlanError::UnknownAttribute { ident: text, form: show(v), context: String::new() })
}

// ---------------------------------------------------------------------------------------------------------
// Compiling

/// Remaining levels of each numerically bounded recursive spec on the current path.
#[derive(Clone, Default)]
struct Budget(Vec<(usize, usize)>);

/// The recursion id of component attributes inside a component pulled whole (`[*]` recursing into itself).
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
    /// The dialect the CTEs are printed in (the context's).
    dialect: Dialect,
    ctes: Vec<String>,
    n: usize,
    /// The top level's ids are the one entity `$1`: filter on it directly.
    top_param: bool,
    /// The attributes `*` expands to in typed levels (see [`compile_pull_held`]); None: every attribute of the
    /// schema.
    held: Option<Vec<Entid>>,
    /// The attributes `*` expands to in the JSON of unbounded walks ([`Compiler::rec_node`]): those of the walks'
    /// entities and of the typed levels'; None: every attribute of the schema.
    walk_held: Option<Vec<Entid>>,
    /// The ids CTEs of the levels whose pattern has `*` (what [`CompiledPull::held_input_sql`] reads), and whether
    /// each is a walk's.
    wild_ids: Vec<(String, bool)>,
}

/// The parameter of [`CompiledPull::one_sql`].
const ONE: &str = "CAST($1 AS BIGINT)";

const DB_ID_TYPE: &str = "STRUCT(\"db/id\" BIGINT)";

/// Renders an SQL builder expression (a literal) as text in `dialect`.
fn expr_sql(e: Expr, dialect: Dialect) -> Result<String, PlanError> {
    let q = Query::Select(Box::new(Select { items: vec![(e, None)], ..Default::default() }));
    Ok(q.to_sql_in(dialect)?.sql.trim_start_matches("SELECT ").to_string())
}

/// A CTE's materialization hint: ` MATERIALIZED` or ` NOT MATERIALIZED` in DuckDB, nothing in Spark (which
/// has no such hint).
fn hint(dialect: Dialect, materialized: bool) -> &'static str {
    match (dialect, materialized) {
        (Dialect::DuckDb, true) => " MATERIALIZED",
        (Dialect::DuckDb, false) => " NOT MATERIALIZED",
        (Dialect::Spark, _) => "",
    }
}

/// The error of a pull construct that `dialect` cannot express.
fn refused(dialect: Dialect, construct: &str) -> PlanError {
    PlanError::Dialect { dialect: dialect.name(), construct: construct.to_string() }
}

/// The datoms of `aid` as `opts` sees them, as a FROM-able text in the context's dialect.
fn source_sql(ctx: &Ctx, aid: Entid) -> Result<String, PlanError> {
    let dialect = ctx.opts.dialect;
    match ctx.datoms(aid) {
        TableSource::Table(t) if dialect == Dialect::Spark => Err(refused(dialect, &format!("the table {t}"))),
        TableSource::Table(t) => Ok(t),
        TableSource::Stored { table, .. } if dialect == Dialect::Spark => Ok(spark_ident(&table)),
        TableSource::Stored { store, table } => Ok(store.table(&table)),
        TableSource::Subquery(q) => Ok(format!("(\n{}\n)", q.to_sql_in(dialect)?.sql)),
        TableSource::Values { .. } | TableSource::Cte(_) | TableSource::Recurring(_) | TableSource::Raw(_) => {
            Err(PlanError::Unsupported {
                form: aid.to_string(),
                message: "an attribute source that is a VALUES list".into(),
            })
        }
    }
}

/// A typed SQL literal of EDN value `v` for attribute `attr` (refs take an entid or an ident keyword), in
/// `dialect`.
fn typed_literal(
    v: &Value,
    attr: &Attribute,
    form: &Value,
    schema: &Schema,
    dialect: Dialect,
) -> Result<String, PlanError> {
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
        | (ValueType::Uuid, Constant::Uuid(_) | Constant::String(_))
        | (ValueType::BigInt, Constant::BigInt(_) | Constant::Long(_))
        | (ValueType::BigDec, Constant::BigDec(_) | Constant::BigInt(_) | Constant::Long(_))
        | (ValueType::Float, Constant::Double(_) | Constant::Long(_))
        | (ValueType::Symbol, Constant::Symbol(_)) => true,
        _ => false,
    };
    if !ok {
        return Err(PlanError::type_mismatch(form, format!("{} is not {}", show(v), attr.value_type.a_name())));
    }
    let lit = literal(&c).ok_or_else(|| PlanError::type_mismatch(form, "not a scalar value"))?;
    let ty = cast_type(dialect, &attr.sql_type())?;
    Ok(format!("CAST({} AS {ty})", expr_sql(lit, dialect)?))
}

/// A DuckDB type text as a cast target in `dialect`.
fn cast_type(dialect: Dialect, ty: &str) -> Result<String, PlanError> {
    match dialect {
        Dialect::DuckDb => Ok(ty.to_string()),
        Dialect::Spark => spark_type(ty).ok_or_else(|| refused(dialect, &format!("the type {ty} in a pull"))),
    }
}

/// `s` as a JSON string literal (quotes, backslashes and control characters escaped).
pub(crate) fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// One field of a level: its branch (if it reads datoms), its aggregate and its expression over `g`/`i`.
struct Field {
    name: String,
    ty: String,
    expr: String,
    branch: Option<Branch>,
    agg: Option<String>,
}

/// Attributes of a pull level read by one `UNION ALL BY NAME` at most (DuckDB); a wider level is read in chunks of
/// this many, each folded by its own aggregate (see [`Compiler::typed_node`]).
const UNION_CHUNK: usize = 16;

/// The SELECT of the datoms of one field: `SELECT {here} AS e, {expr} AS {column}, ... FROM {from}`.
struct Branch {
    here: String,
    /// (expression, column): the value and, for a LIST, its order key.
    cols: Vec<(String, String)>,
    from: String,
}

impl Branch {
    /// The branch with the columns `all` (names) in that order, those of other branches NULL (Spark's UNION
    /// ALL matches columns by position).
    fn aligned(&self, all: &[&str]) -> String {
        let cols: Vec<String> = all
            .iter()
            .map(|n| match self.cols.iter().find(|(_, c)| c == n) {
                Some((e, _)) => format!("{e} AS {n}"),
                None => format!("NULL AS {n}"),
            })
            .collect();
        format!("SELECT {} AS e, {} FROM {}", self.here, cols.join(", "), self.from)
    }

    /// The branch with its own columns only (DuckDB's `UNION ALL BY NAME` aligns them).
    fn own(&self) -> String {
        let cols: Vec<String> = self.cols.iter().map(|(e, c)| format!("{e} AS {c}")).collect();
        format!("SELECT {} AS e, {} FROM {}", self.here, cols.join(", "), self.from)
    }
}

/// A compiled level: its CTE (columns `e`, `pull` and, for [`Compiler::rec_node`], `j`) and field types.
struct Level {
    cte: String,
    ty: String,
    fields: Vec<(String, String)>,
}

/// Whether a spec recurses without a bound (`...`, or a component inside a component pulled whole).
fn unbounded(s: &Spec) -> bool {
    matches!(s.sub, Sub::Recurse { depth: None, .. })
}

impl Compiler<'_> {
    fn new<'a>(ctx: Ctx<'a>, top_param: bool, held: Option<&[Entid]>) -> Compiler<'a> {
        let dialect = ctx.opts.dialect;
        Compiler {
            ctx,
            dialect,
            ctes: Vec::new(),
            n: 0,
            top_param,
            // the probe gives a typed level's attributes as entids, a walk's negated ([`held_sql`])
            held: held.map(|h| h.iter().copied().filter(|a| *a > 0).collect()),
            // a walk's JSON holds the typed levels' attributes too: a walk's top STRUCT (`top` of rec_node) is
            // extracted from it, and an attribute no node holds is only a key left out
            walk_held: held.map(|h| h.iter().map(|a| a.abs()).collect()),
            wild_ids: Vec::new(),
        }
    }

    fn spark(&self) -> bool {
        self.dialect == Dialect::Spark
    }

    /// A STRUCT value of `(name, expression)` fields: `{'name': e}` in DuckDB, `named_struct('name', e)` in
    /// Spark.
    fn struct_value<'f>(&self, fields: impl IntoIterator<Item = (&'f str, &'f str)>) -> String {
        match self.dialect {
            Dialect::DuckDb => format!(
                "{{{}}}",
                fields.into_iter().map(|(n, e)| format!("{}: {e}", quote_str(n))).collect::<Vec<_>>().join(", ")
            ),
            Dialect::Spark => format!(
                "named_struct({})",
                fields.into_iter().map(|(n, e)| format!("{}, {e}", spark_str(n))).collect::<Vec<_>>().join(", ")
            ),
        }
    }

    fn fresh(&mut self, prefix: &str) -> String {
        self.n += 1;
        format!("pull_{prefix}{}", self.n)
    }

    /// The fields of a pattern, `*` expanded (see the module docs for the order).
    fn expand(&self, pat: &Pattern) -> Vec<Spec> {
        self.expand_with(pat, self.held.as_deref())
    }

    /// [`Compiler::expand`] with `*` expanded to the attributes in `held` (None: every attribute).
    fn expand_with(&self, pat: &Pattern, held: Option<&[Entid]>) -> Vec<Spec> {
        if !pat.wildcard {
            return pat.specs.clone();
        }
        let mut out =
            vec![Spec { target: Target::DbId, name: "db/id".into(), limit: None, default: None, sub: Sub::None }];
        let mut used = vec![false; pat.specs.len()];
        for a in self.ctx.schema.attributes() {
            if let Some(held) = held {
                if !held.contains(&a.entid) {
                    continue;
                }
            }
            if let Some(i) = pat.specs.iter().position(|s| s.target == Target::Forward(a.entid)) {
                used[i] = true;
                out.push(pat.specs[i].clone());
                continue;
            }
            // `[*]` alone (a component pulled whole, or a user's `[*]`) recurses into itself for components
            let sub = match (a.component && a.value_type == ValueType::Ref, pat.specs.is_empty()) {
                (false, _) => Sub::None,
                (true, true) => Sub::Recurse { id: COMPONENT, depth: None },
                (true, false) => Sub::Component,
            };
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

    /// Compiles one level over the entity ids in CTE `ids`: [`Compiler::rec_node`] when the pattern recurses
    /// without a bound, else [`Compiler::typed_node`].
    fn node(&mut self, pat: &Pattern, ids: &str, budget: &Budget) -> Result<Level, PlanError> {
        if pat.wildcard {
            self.wild_ids.push((ids.to_string(), false));
        }
        let specs = self.expand(pat);
        if specs.iter().any(unbounded) {
            if self.spark() {
                // the answer of an unbounded recursion has no static type: it is JSON, which is DuckDB's
                let s = specs.iter().find(|s| unbounded(s)).map_or("", |s| s.name.as_str());
                let what = match specs.iter().any(|s| matches!(s.sub, Sub::Recurse { id: COMPONENT, .. })) {
                    true => format!("pull of a component attribute whole under [*] (:{s}, answered as JSON)"),
                    false => format!("pull recursion ... (unbounded, on :{s}; answered as JSON)"),
                };
                return Err(refused(self.dialect, &what));
            }
            return self.rec_node(pat, &specs, ids, budget);
        }
        self.typed_node(pat, &specs, ids, budget)
    }

    /// A level of typed fields: a CTE `(e, pull)` over the ids in CTE `ids`.
    fn typed_node(&mut self, pat: &Pattern, specs: &[Spec], ids: &str, budget: &Budget) -> Result<Level, PlanError> {
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
        let st = self.struct_value(fields.iter().map(|f| (f.name.as_str(), f.expr.as_str())));
        let types = fields.iter().map(|f| (f.name.clone(), f.ty.clone())).collect();
        let branches: Vec<String> = match self.dialect {
            Dialect::DuckDb => fields.iter().filter_map(|f| f.branch.as_ref()).map(Branch::own).collect(),
            Dialect::Spark => {
                let all: Vec<&str> = fields
                    .iter()
                    .filter_map(|f| f.branch.as_ref())
                    .flat_map(|b| b.cols.iter().map(|(_, c)| c.as_str()))
                    .collect();
                fields.iter().filter_map(|f| f.branch.as_ref()).map(|b| b.aligned(&all)).collect()
            }
        };
        let union = match self.dialect {
            Dialect::DuckDb => "\n    UNION ALL BY NAME\n    ",
            Dialect::Spark => "\n    UNION ALL\n    ",
        };
        let aggs: Vec<&str> = fields.iter().filter_map(|f| f.agg.as_deref()).collect();
        let one = self.top_param && ids == IDS;
        let body = if branches.is_empty() {
            format!("SELECT i.e AS e, {st} AS pull FROM {ids} AS i")
        } else if self.dialect == Dialect::DuckDb && branches.len() > UNION_CHUNK {
            // DuckDB pads every branch of a UNION ALL BY NAME to all the union's columns: a `*` over a schema of
            // 150 attributes made 150 branches of 150-odd columns each, and a pull of `[* {:ref ...}]` five such
            // levels, whose vectors DuckDB allocated before running (7.9 s for 11 entities, all of it before the
            // first row). In chunks of UNION_CHUNK attributes, each folded by its own aggregate and joined by e,
            // the padding grows with the chunk, not with the schema.
            let chunks: Vec<(String, String)> = branches
                .chunks(UNION_CHUNK)
                .zip(aggs.chunks(UNION_CHUNK))
                .map(|(b, a)| (a.join(", "), b.join(union)))
                .collect();
            let names: Vec<String> = (1..=chunks.len()).map(|k| format!("g{k}")).collect();
            // the chunks' columns without their own key (`n`, the count of one entity's datoms, or `e`)
            let cols =
                |key: &str| names.iter().map(|g| format!("{g}.* EXCLUDE ({key})")).collect::<Vec<_>>().join(", ");
            if one {
                let parts: Vec<String> = chunks
                    .iter()
                    .zip(&names)
                    .map(|((a, b), g)| format!("(\n  SELECT count(*) AS n, {a}\n  FROM (\n    {b}\n  ) AS u\n) AS {g}"))
                    .collect();
                let n: Vec<String> = names.iter().map(|g| format!("{g}.n")).collect();
                let pull = if has_id { st } else { format!("CASE WHEN g.n > 0 THEN {st} END") };
                format!(
                    "SELECT i.e AS e, {pull} AS pull\nFROM {ids} AS i CROSS JOIN (\nSELECT {} AS n, {}\nFROM {}\n) AS g",
                    n.join(" + "),
                    cols("n"),
                    parts.join(",\n")
                )
            } else {
                let joins: Vec<String> = chunks
                    .iter()
                    .zip(&names)
                    .map(|((a, b), g)| {
                        format!("LEFT JOIN (\n  SELECT e, {a}\n  FROM (\n    {b}\n  ) AS u GROUP BY e\n) AS {g} ON {g}.e = k.e")
                    })
                    .collect();
                let found: Vec<String> = names.iter().map(|g| format!("{g}.e IS NOT NULL")).collect();
                let pull = if has_id { st } else { format!("CASE WHEN g.found THEN {st} END") };
                format!(
                    "SELECT i.e AS e, {pull} AS pull\nFROM {ids} AS i LEFT JOIN (\nSELECT k.e AS e, {} AS found, {}\nFROM (SELECT DISTINCT e FROM {ids}) AS k\n{}\n) AS g ON g.e = i.e",
                    found.join(" OR "),
                    cols("e"),
                    joins.join("\n")
                )
            }
        } else {
            let found = if one { "g.n > 0" } else { "g.e IS NOT NULL" };
            let pull = if has_id { st } else { format!("CASE WHEN {found} THEN {st} END") };
            if one {
                // One entity: an ungrouped aggregate (no hash table) cross joined with the one id.
                format!(
                    "SELECT i.e AS e, {pull} AS pull\nFROM {ids} AS i CROSS JOIN (\n  SELECT count(*) AS n, {}\n  FROM (\n    {}\n  ) AS u\n) AS g",
                    aggs.join(", "),
                    branches.join(union)
                )
            } else {
                format!(
                    "SELECT i.e AS e, {pull} AS pull\nFROM {ids} AS i LEFT JOIN (\n  SELECT e, {}\n  FROM (\n    {}\n  ) AS u GROUP BY e\n) AS g ON g.e = i.e",
                    aggs.join(", "),
                    branches.join(union)
                )
            }
        };
        let cte = self.fresh("n");
        self.ctes.push(format!("{cte} AS{} (\n{body})", hint(self.dialect, false)));
        Ok(Level { cte, ty, fields: types })
    }

    /// A level whose pattern recurses without a bound: a CTE `(e, pull, j)` over the ids in CTE `ids`, `pull`
    /// the typed STRUCT (each unbounded recursive field as JSON, a LIST of JSON for cardinality-many) and `j`
    /// the whole map as JSON text (absent attributes left out, as Datomic leaves out the key).
    ///
    /// Three steps, each set-based over all entities of the level at once:
    /// 1. the walk: a recursive CTE following every recursive attribute from the ids, one row per node of the
    ///    answer tree `(e, depth, nid, parent, slot, stub)`; `nid` is unique within a depth and `parent` is
    ///    the parent's nid one depth up; a node whose entity is already on its path is a `stub`, not expanded
    ///    further (it is `{"db/id": e}` in the answer, Datomic's cycle rule);
    /// 2. the values: the pattern's other fields, pulled once per distinct entity of the walk by
    ///    [`Compiler::typed_node`], rendered as JSON text pieces per node;
    /// 3. the assembly: a second recursive CTE from the deepest nodes up, one depth per iteration, each node's
    ///    JSON made from its pieces and its children's JSON grouped by parent.
    ///
    /// `top` are the fields of the top STRUCT (`*` expanded to the held attributes); the JSON of every level
    /// has every attribute of `*` that its entity holds.
    fn rec_node(&mut self, pat: &Pattern, top: &[Spec], ids: &str, budget: &Budget) -> Result<Level, PlanError> {
        let schema = self.ctx.schema;
        // `*` as the walk's entities hold it: the probe ([`held_sql`]) reads them (pushed below), so the attributes
        // cover every node's; without a probe, every attribute of the schema
        let all = self.expand_with(pat, self.walk_held.as_deref());
        let specs = &all[..];
        // the walk's edges: one branch per recursive spec, `slot` its index in `specs`
        let mut edges = Vec::new();
        for (k, s) in specs.iter().enumerate().filter(|(_, s)| unbounded(s)) {
            let (aid, reverse) = match s.target {
                Target::Forward(a) => (a, false),
                Target::Reverse(a) => (a, true),
                Target::DbId => return Err(PlanError::syntax(&Value::Nil, ":db/id takes no sub-pattern")),
            };
            let (here, there) = if reverse { ("v", "e") } else { ("e", "v") };
            edges.push(format!(
                "SELECT d.{here} AS here, d.{there} AS there, {k} AS slot FROM {} AS d",
                source_sql(&self.ctx, aid)?
            ));
        }
        if edges.is_empty() {
            // `*` narrowed to what the walk's entities hold left no recursive attribute (no entity holds one):
            // the walk is its first step
            edges.push("SELECT NULL::BIGINT AS here, NULL::BIGINT AS there, NULL::INTEGER AS slot WHERE false".into());
        }
        let walk = self.fresh("walk");
        self.ctes.push(format!(
            "{walk} AS MATERIALIZED (\n  WITH RECURSIVE w(e, depth, nid, parent, slot, path, stub) AS (\n    \
             SELECT e, 0, e, CAST(NULL AS BIGINT), CAST(NULL AS INTEGER), [e], false FROM {ids}\n    UNION ALL\n    \
             SELECT x.there, w.depth + 1, row_number() OVER (), w.nid, x.slot, list_append(w.path, x.there), \
             list_contains(w.path, x.there)\n    FROM w JOIN (\n      {}\n    ) AS x ON x.here = w.e WHERE NOT w.stub\n  \
             ) SELECT e, depth, nid, parent, slot, stub FROM w)",
            edges.join("\n      UNION ALL\n      ")
        ));
        // the other fields, once per distinct entity of the walk
        let others: Vec<Spec> = specs.iter().filter(|s| !unbounded(s)).cloned().collect();
        let vals = if others.is_empty() {
            None
        } else {
            let vids = self.fresh("ids");
            self.ctes.push(format!("{vids} AS MATERIALIZED (SELECT DISTINCT e FROM {walk} WHERE NOT stub)"));
            if pat.wildcard {
                self.wild_ids.push((vids.clone(), true));
            }
            Some(self.typed_node(pat, &others, &vids, budget)?)
        };
        // per node, the JSON text between two recursive fields: `"name":value` for each present field, joined
        // by commas, NULL when none is present
        let mut segs: Vec<Vec<String>> = vec![Vec::new()];
        for s in specs {
            if unbounded(s) {
                segs.push(Vec::new());
            } else {
                let v = format!("struct_extract(v.pull, {})", quote_str(&s.name));
                let key = quote_str(&format!("{}:", json_str(&s.name)));
                segs.last_mut()
                    .expect("one segment at least")
                    .push(format!("CASE WHEN {v} IS NOT NULL THEN {key} || CAST(to_json({v}) AS VARCHAR) END"));
            }
        }
        let seg_cols: Vec<String> = segs
            .iter()
            .enumerate()
            .map(|(i, p)| match p.len() {
                0 => format!("CAST(NULL AS VARCHAR) AS s{i}"),
                1 => format!("{} AS s{i}", p[0]),
                _ => format!("NULLIF(concat_ws(',', {}), '') AS s{i}", p.join(", ")),
            })
            .collect();
        let nodes = self.fresh("nodes");
        let join_vals = match &vals {
            Some(v) => format!(" LEFT JOIN {} AS v ON v.e = w.e", v.cte),
            None => String::new(),
        };
        self.ctes.push(format!(
            "{nodes} AS MATERIALIZED (SELECT w.e, w.depth, w.nid, w.parent, w.slot, w.stub, {} FROM {walk} AS w{join_vals})",
            seg_cols.join(", ")
        ));
        // the assembly: a node's JSON from its segments and its children's JSON (`c.c<k>`, NULL when none); the
        // body `b` is computed once per node (each level copies its children's text once: a chain of n costs
        // O(n^2) bytes copied, see the module docs)
        let rec: Vec<(usize, &Spec)> = specs.iter().enumerate().filter(|(_, s)| unbounded(s)).collect();
        let body = |children: bool| -> String {
            let mut parts = vec!["n.s0".to_string()];
            for (i, (k, s)) in rec.iter().enumerate() {
                if children {
                    parts.push(format!("{} || c.c{k}", quote_str(&format!("{}:", json_str(&s.name)))));
                }
                parts.push(format!("n.s{}", i + 1));
            }
            format!("concat_ws(',', {}) AS b", parts.join(", "))
        };
        let json = "CASE WHEN stub THEN '{\"db/id\":' || e || '}' WHEN b = '' THEN NULL ELSE concat('{', b, '}') END";
        let many = |s: &Spec| -> bool {
            match s.target {
                Target::Forward(a) => schema.attribute(a).is_some_and(|a| a.many),
                Target::Reverse(a) => !schema.attribute(a).is_some_and(|a| a.component),
                Target::DbId => false,
            }
        };
        let slice = |s: &Spec| s.limit.map(|n| format!("[1:{n}]")).unwrap_or_default();
        let text_aggs: Vec<String> = rec
            .iter()
            .map(|(k, s)| {
                if many(s) {
                    format!(
                        "'[' || array_to_string((list(j ORDER BY e) FILTER (WHERE slot = {k} AND j IS NOT NULL)){}, ',') || ']' AS c{k}",
                        slice(s)
                    )
                } else {
                    format!("any_value(j) FILTER (WHERE slot = {k}) AS c{k}")
                }
            })
            .collect();
        let asm = self.fresh("asm");
        self.ctes.push(format!(
            "{asm} AS MATERIALIZED (\n  WITH RECURSIVE a(e, depth, nid, parent, slot, j) AS (\n    \
             SELECT e, depth, nid, parent, slot, {json} FROM (\n    \
             SELECT n.e, n.depth, n.nid, n.parent, n.slot, n.stub, {} FROM {nodes} AS n\n    \
             WHERE n.depth = (SELECT max(depth) FROM {nodes}))\n    UNION ALL\n    \
             SELECT e, depth, nid, parent, slot, {json} FROM (\n    \
             SELECT n.e, n.depth, n.nid, n.parent, n.slot, n.stub, {}\n    \
             FROM {nodes} AS n JOIN (SELECT min(depth) - 1 AS d FROM a) AS lv ON n.depth = lv.d\n    \
             LEFT JOIN (SELECT parent, {} FROM a GROUP BY parent) AS c ON c.parent = n.nid)\n  \
             ) SELECT * FROM a)",
            body(false),
            body(true),
            text_aggs.join(", ")
        ));
        // the top of the level: the typed STRUCT of the roots
        let mut fields = Vec::new();
        let mut typed_aggs = Vec::new();
        let vty: std::collections::HashMap<&str, &str> =
            vals.as_ref().map(|v| v.fields.iter().map(|(n, t)| (n.as_str(), t.as_str())).collect()).unwrap_or_default();
        for s in top {
            if unbounded(s) {
                let k = specs.iter().position(|a| a.target == s.target && a.name == s.name).unwrap_or_default();
                let (expr, ty) = if many(s) {
                    typed_aggs.push(format!(
                        "(list(CAST(j AS JSON) ORDER BY e) FILTER (WHERE slot = {k} AND j IS NOT NULL)){} AS c{k}",
                        slice(s)
                    ));
                    (format!("c.c{k}"), "JSON[]")
                } else {
                    typed_aggs.push(format!("CAST(any_value(j) FILTER (WHERE slot = {k}) AS JSON) AS c{k}"));
                    (format!("c.c{k}"), "JSON")
                };
                fields.push((s.name.clone(), ty.to_string(), expr));
            } else {
                let ty = vty.get(s.name.as_str()).copied().unwrap_or("VARCHAR").to_string();
                fields.push((s.name.clone(), ty, format!("struct_extract(v.pull, {})", quote_str(&s.name))));
            }
        }
        let ty = format!(
            "STRUCT({})",
            fields.iter().map(|(n, t, _)| format!("{} {t}", quote_ident(n))).collect::<Vec<_>>().join(", ")
        );
        let st = format!(
            "{{{}}}",
            fields.iter().map(|(n, _, e)| format!("{}: {e}", quote_str(n))).collect::<Vec<_>>().join(", ")
        );
        let join_vals = match &vals {
            Some(v) => format!("\nLEFT JOIN {} AS v ON v.e = i.e", v.cte),
            None => String::new(),
        };
        let cte = self.fresh("n");
        self.ctes.push(format!(
            "{cte} AS NOT MATERIALIZED (\nSELECT i.e AS e, CASE WHEN r.j IS NULL THEN NULL ELSE {st} END AS pull, r.j AS j\n\
             FROM {ids} AS i LEFT JOIN {asm} AS r ON r.depth = 0 AND r.nid = i.e\n\
             LEFT JOIN (SELECT parent, {} FROM {asm} WHERE depth = 1 GROUP BY parent) AS c ON c.parent = i.e{join_vals})",
            typed_aggs.join(", ")
        ));
        Ok(Level { cte, ty, fields: fields.into_iter().map(|(n, t, _)| (n, t)).collect() })
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
        let attr = schema.attribute(aid).ok_or_else(|| PlanError::UnknownAttribute {
            ident: aid.to_string(),
            form: spec.name.clone(),
            context: String::new(),
        })?;
        let is_ref = attr.value_type == ValueType::Ref;
        // a reverse attribute is many, except the reverse of a component: a component has one owner
        let many = if reverse { !attr.component } else { attr.many };
        // The sub-pattern actually expanded here, with the budget below it, and whether it is a component
        // pulled whole (as JSON).
        let sub: Option<(Pattern, Budget, bool)> = match &spec.sub {
            Sub::None => None,
            Sub::Pattern(p) => Some((p.clone(), budget.clone(), false)),
            Sub::Recurse { id, depth: Some(depth) } => {
                let left = budget.get(*id).unwrap_or(*depth);
                (left > 0).then(|| (pat.clone(), budget.with(*id, left - 1), false))
            }
            Sub::Recurse { depth: None, .. } => {
                return Err(PlanError::unsupported(&Value::Nil, "an unbounded recursion outside its level"))
            }
            Sub::Component if self.spark() => {
                return Err(refused(
                    self.dialect,
                    &format!(
                        "pull of the component attribute :{} whole, without a sub-pattern (answered as JSON)",
                        spec.name
                    ),
                ))
            }
            Sub::Component => Some((Pattern { wildcard: true, specs: vec![] }, budget.clone(), true)),
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
            Some((p, b, whole)) => {
                let sub_ids = self.fresh("ids");
                self.ctes.push(format!(
                    "{sub_ids} AS{} (SELECT DISTINCT d.{there} AS e FROM {from}{filter})",
                    hint(self.dialect, true)
                ));
                let level = if whole {
                    let specs = self.expand(&p);
                    self.rec_node(&p, &specs, &sub_ids, &b)?
                } else {
                    self.node(&p, &sub_ids, &b)?
                };
                let (value, ty) = if whole {
                    ("CAST(s.j AS JSON)".to_string(), "JSON".to_string())
                } else {
                    ("s.pull".into(), level.ty)
                };
                (value, format!(" LEFT JOIN {} AS s ON s.e = d.{there}", level.cte), ty)
            }
            None if is_ref || reverse => {
                (self.struct_value([("db/id", format!("d.{there}").as_str())]), String::new(), DB_ID_TYPE.to_string())
            }
            None => ("d.v".to_string(), String::new(), attr.sql_type()),
        };
        let mut cols = vec![(value, c.clone())];
        if many {
            cols.push((format!("d.{there}"), o.clone()));
        }
        let branch = Branch { here: format!("d.{here}"), cols, from: format!("{from}{join}{filter}") };
        let (agg, mut expr, ty) = if many {
            let agg = match self.dialect {
                Dialect::DuckDb => format!("list({c} ORDER BY {o}) FILTER (WHERE {c} IS NOT NULL) AS {c}"),
                // ordered by the key: the (key, value) pairs sorted, then the values; NULL, not [], when none
                Dialect::Spark => format!(
                    "CASE WHEN count({c}) = 0 THEN NULL ELSE transform(sort_array(collect_list(named_struct('o', {o}, \
                     'v', {c})) FILTER (WHERE {c} IS NOT NULL)), x -> x.v) END AS {c}"
                ),
            };
            let expr = match (spec.limit, self.dialect) {
                (Some(n), Dialect::DuckDb) => format!("(g.{c})[1:{n}]"),
                (Some(n), Dialect::Spark) => format!("slice(g.{c}, 1, {n})"),
                (None, _) => format!("g.{c}"),
            };
            (agg, expr, format!("{vty}[]"))
        } else {
            let agg = match self.dialect {
                Dialect::DuckDb => format!("any_value({c}) AS {c}"),
                Dialect::Spark => format!("first({c}, true) AS {c}"),
            };
            (agg, format!("g.{c}"), vty)
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
            // Datomic returns a default of any type; here the field is a typed column of the answer's STRUCT
            let lit = typed_literal(v, attr, d, schema, self.dialect).map_err(|e| match e {
                PlanError::TypeMismatch { form, message } => PlanError::TypeMismatch {
                    form,
                    message: format!(
                        "{message}: a pull's :default takes {}'s own type, because the field is a typed column of \
                         the answer (a default of another type goes in SQL around the call: \
                         coalesce(CAST(pull.\"{}\" AS VARCHAR), '...'))",
                        attr.ident,
                        attr.ident.trim_start_matches(':')
                    ),
                },
                other => other,
            })?;
            Ok(if attr.value_type == ValueType::Ref || reverse {
                self.struct_value([("db/id", lit.as_str())])
            } else {
                lit
            })
        };
        let text = if many {
            let items: Vec<Value> = match d {
                Value::Vector(v) | Value::List(v) => v.clone(),
                other => vec![other.clone()],
            };
            let parts: Result<Vec<String>, PlanError> = items.iter().map(one).collect();
            match self.dialect {
                Dialect::DuckDb => format!("[{}]", parts?.join(", ")),
                Dialect::Spark => format!("array({})", parts?.join(", ")),
            }
        } else {
            one(d)?
        };
        Ok(format!("CAST({text} AS {})", cast_type(self.dialect, ty)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{Attribute, Unique};
    use crate::source::TimeBound;

    #[test]
    fn a_probe_keeps_the_ctes_its_ids_read() {
        let ctes: Vec<String> = [
            "pull_ids1 AS MATERIALIZED (SELECT 1 AS e)",
            "pull_walk2 AS MATERIALIZED (SELECT e FROM pull_ids1)",
            "pull_n3 AS (SELECT e FROM pull_walk2 JOIN big ON true)",
            "pull_ids12 AS MATERIALIZED (SELECT e FROM pull_walk2)",
            "pull_n13 AS (SELECT e FROM pull_ids12)",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let kept = ctes_for(&ctes, &["pull_ids12".to_string()]);
        assert_eq!(kept, vec![ctes[0].clone(), ctes[1].clone(), ctes[3].clone()]);
        // a name is matched whole: pull_ids1 is not read by a CTE that names pull_ids12 only
        assert_eq!(ctes_for(&ctes[3..4], &["pull_ids12".to_string()]), vec![ctes[3].clone()]);
        assert!(ctes_for(&ctes, &["absent".to_string()]).is_empty());
    }

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

    /// Found by the SQL fuzz campaign (benchmarks/fuzz_sql): `[{}]` compiled to an empty STRUCT literal `{}`,
    /// which DuckDB cannot parse. Datomic's grammar wants at least one pair in a map spec.
    #[test]
    fn an_empty_map_spec_is_refused() {
        for p in ["[{}]", "[:user/email {}]", "[{:issue/label [{}]}]"] {
            let e = compile(p).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(e.contains("a map spec names at least one ref attribute"), "{p}: {e}");
        }
    }

    /// Datomic's attribute options in list form, `(:attr :limit n)`, read as the vector form.
    #[test]
    fn attribute_options_in_list_form() {
        let list = compile("[:user/email (:issue/label :limit 1 :as \"l\")]").expect("list form");
        let vector = compile("[:user/email [:issue/label :limit 1 :as \"l\"]]").expect("vector form");
        assert_eq!(list.sql_type, vector.sql_type);
        assert_eq!(list.many_sql(), vector.many_sql());
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
    fn recursion_numeric_is_typed_and_unbounded_is_json() {
        let c = compile("[:user/name {:user/friend 2}]").unwrap();
        assert_eq!(
            c.sql_type,
            "STRUCT(\"user/name\" VARCHAR, \"user/friend\" STRUCT(\"user/name\" VARCHAR, \"user/friend\" \
             STRUCT(\"user/name\" VARCHAR, \"user/friend\" STRUCT(\"db/id\" BIGINT))))"
        );
        // `...` has no static depth: the recursive field is JSON (a LIST of JSON for cardinality-many)
        let c = compile("[:user/name {:user/friend ...}]").unwrap();
        assert_eq!(c.sql_type, "STRUCT(\"user/name\" VARCHAR, \"user/friend\" JSON)");
        assert!(c.one_sql().contains("WITH RECURSIVE"));
        let c = compile("[{:issue/label ...} :db/id]").unwrap();
        assert_eq!(c.sql_type, "STRUCT(\"issue/label\" JSON[], \"db/id\" BIGINT)");
    }

    #[test]
    fn wildcard_expands_schema_and_components() {
        let c = compile("[*]").unwrap();
        // with nothing known of the entities: every attribute by entid, the bootstrap ones first
        assert!(c.sql_type.starts_with("STRUCT(\"db/id\" BIGINT, \"db/ident\" VARCHAR"), "{}", c.sql_type);
        // a component is pulled whole, as JSON
        assert!(c.sql_type.contains("\"issue/comment\" JSON[]"), "{}", c.sql_type);
        assert!(c.held_one_sql().is_some());
        let c = compile("[* {:issue/assignee [:user/name]}]").unwrap();
        assert!(c.sql_type.contains("\"issue/assignee\" STRUCT(\"user/name\" VARCHAR)"), "{}", c.sql_type);
        assert!(compile("[:user/name]").unwrap().held_one_sql().is_none());
        // typed from the held attributes
        let (s, store) = (schema(), StoreName::parse("mentat").unwrap());
        let v = parse_edn("[*]", "t").unwrap();
        let c = compile_pull_held(&v, &s, &store, &QueryOptions::default(), Some(&[102, 1])).unwrap();
        assert_eq!(c.sql_type, "STRUCT(\"db/id\" BIGINT, \"db/ident\" VARCHAR, \"issue/title\" VARCHAR)");
    }

    #[test]
    fn components_whole_and_reverse_component_single() {
        let c = compile("[:issue/title :issue/comment]").unwrap();
        assert_eq!(c.sql_type, "STRUCT(\"issue/title\" VARCHAR, \"issue/comment\" JSON[])");
        let c = compile("[:comment/text :issue/_comment {:issue/_assignee [:issue/title]}]").unwrap();
        assert_eq!(
            c.sql_type,
            "STRUCT(\"comment/text\" VARCHAR, \"issue/_comment\" STRUCT(\"db/id\" BIGINT), \
             \"issue/_assignee\" STRUCT(\"issue/title\" VARCHAR)[])"
        );
    }

    /// Spark's dialect: the typed levels are printed in Spark SQL; what is answered as JSON is refused by name.
    #[test]
    fn spark_refuses_what_is_json() {
        let spark = QueryOptions { dialect: Dialect::Spark, ..Default::default() };
        let store = StoreName::parse("mentat").unwrap();
        let refused = |p: &str| match compile_pull(p, &schema(), &store, &spark) {
            Err(e @ PlanError::Dialect { .. }) => e.to_string(),
            other => panic!("{p}: {other:?}"),
        };
        let e = refused("[:issue/title :issue/comment]");
        assert!(e.contains("component attribute :issue/comment whole"), "{e}");
        let e = refused("[*]");
        assert!(e.contains("component") && e.contains("issue/comment"), "{e}");
        let e = refused("[:user/name {:user/friend ...}]");
        assert!(e.contains("pull recursion ...") && e.contains("user/friend"), "{e}");
        // a component with a sub-pattern is typed, and `*` without components too
        let c = compile_pull("[{:issue/comment [:comment/text]} :issue/_comment]", &schema(), &store, &spark).unwrap();
        assert_eq!(c.sql_type, compile("[{:issue/comment [:comment/text]} :issue/_comment]").unwrap().sql_type);
        let v = parse_edn("[*]", "t").unwrap();
        let c = compile_pull_held(&v, &schema(), &store, &spark, Some(&[102, 108])).unwrap();
        assert_eq!(
            c.sql_type,
            "STRUCT(\"db/id\" BIGINT, \"issue/title\" VARCHAR, \"issue/label\" STRUCT(\"db/id\" BIGINT)[])"
        );
        let sql = c.relation_sql("SELECT 1 AS e");
        assert!(sql.contains("named_struct('db/id', i.e") && !sql.contains("MATERIALIZED"), "{sql}");
    }

    #[test]
    fn errors_name_the_form() {
        assert!(matches!(compile("[:nope/x]"), Err(PlanError::UnknownAttribute { .. })));
        assert!(matches!(compile("[:user/_name]"), Err(PlanError::TypeMismatch { .. })));
        assert!(matches!(compile("[{:user/name [:x/y]}]"), Err(PlanError::TypeMismatch { .. })));
        assert!(matches!(compile(":user/name"), Err(PlanError::Syntax { .. })));
        assert!(matches!(compile("[:user/name [:user/email :as \"user/name\"]]"), Err(PlanError::Syntax { .. })));
        // the same spec twice is one field
        assert!(compile("[:user/name [:user/name :as \"user/name\"]]").is_ok());
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
