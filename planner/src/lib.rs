//! EDN Datalog and pull patterns to DuckDB SQL.
//!
//! This crate is pure Rust and never links DuckDB. Its inputs are query text and a [`schema::Schema`]
//! (the in-memory schema cache that `storage` keeps); its output is one SQL statement over the tables
//! that [`layout`] names.
//!
//! The pipeline, one module per stage, each with a printable (Debug) output:
//!
//! ```text
//! query EDN ──parse──▶ parse::Query ──algebrize(schema, inputs)──▶ algebrize::Algebra ──emit──▶ CompiledQuery (one SQL statement)
//! ```
//!
//! * [`parse`]: EDN text to the query AST (find spec, return maps, `:with`, `:in`, `:where`,
//!   `:order`, `:limit`, `:offset`).
//! * [`inputs`]: the inputs vector read against the `:in` bindings.
//! * [`algebrize`]: variables bound to table aliases and columns, types inferred from the schema,
//!   idents resolved to entids, Datomic's binding rules checked, impossible patterns pruned.
//! * [`source`]: the table each data pattern reads, as a function of the attribute and the
//!   [`QueryOptions`] (now, as-of, since, history).
//! * [`joins`] and [`keys`]: join order and placement; the proofs that make DISTINCT unnecessary.
//! * [`emit`]: projection, aggregates, ordering and limits.
//! * [`sql`]: the structured SQL builder, the only place that quotes identifiers and literals.

pub mod algebrize;
pub mod datoms;
pub mod emit;
pub mod entity;
pub mod error;
pub mod fulltext;
pub mod fuzz;
pub mod inputs;
pub mod joins;
pub mod keys;
pub mod layout;
pub mod parse;
pub mod pull;
pub mod rules;
pub mod schema;
pub mod source;
pub mod sql;
pub mod types;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_fuzz;
#[cfg(test)]
mod tests_log;
#[cfg(test)]
mod tests_sources;
#[cfg(test)]
mod tests_spark;

pub use error::PlanError;
pub use pull::{compile_pull, CompiledPull};
pub use source::{parse_sources, QueryOptions, RelationSource, SourceSpec, StoreSource, TimeBound};

use layout::StoreName;
use schema::Schema;
use source::Ctx;

/// The shape of a query's result (Datomic's find specs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FindKind {
    /// `:find ?a ?b`: a set of rows (a bag with `:with`).
    Relation,
    /// `:find ?a .`: the first column of the first row, or nothing (the SQL has `LIMIT 1`).
    Scalar,
    /// `:find [?a ...]`: the distinct values of one column.
    Collection,
    /// `:find [?a ?b]`: one row, or nothing (the SQL has `LIMIT 1`).
    Tuple,
}

/// One output column: its name (the find variable without `?`, `count_i` for `(count ?i)`, the
/// `:keys` name when given; clashes get `_2`, `_3`) and its DuckDB type text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputColumn {
    pub name: String,
    /// DuckDB type text, e.g. `BIGINT`, `VARCHAR`, `TIMESTAMPTZ`, `BIGINT[]`, `STRUCT(f0 BIGINT, f1 VARCHAR)`.
    pub sql_type: String,
}

/// A compiled query: one SQL statement, its output columns in order, and the find spec's shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompiledQuery {
    pub sql: String,
    pub columns: Vec<OutputColumn>,
    pub find: FindKind,
    /// For a query with a `(pull ?e pattern)` whose pattern has `*`: a statement listing (column `a`, BIGINT)
    /// the attributes that the entities those `*` levels pull hold, over the whole answer. Compile again with
    /// them ([`compile_query_held`]) to type the wildcard's STRUCT from them.
    pub held_sql: Option<String>,
    /// The relations `sql` reads that must be computed first ([`sql::Stage`]): in the Spark dialect, one per
    /// recursive rule call (Spark has no `UNION` in recursive CTEs); always empty in DuckDB's.
    pub stages: Vec<sql::Stage>,
    /// Whether `sql` ends in an `ORDER BY` (the query's `:order`, constant keys left out): its rows must be
    /// handed over in that order, so the connection that runs it must keep DuckDB's insertion order.
    pub ordered: bool,
}

impl CompiledQuery {
    /// The statement as a JSON plan of stages, for an engine that must compute recursive relations itself
    /// (Spark): `{"format": "mentat-plan", "version": 1, "dialect": "spark", "columns": [{"name", "type"}],
    /// "stages": [{"name", "columns", "base", "step"}], "final": sql}`. Each stage is a [`sql::Stage`] (`step`
    /// null for a plain view); `final` reads the stages by name once they are computed.
    pub fn plan_json(&self, dialect: sql::Dialect) -> String {
        let s = pull::json_str;
        let columns: Vec<String> = self
            .columns
            .iter()
            .map(|c| format!("{{\"name\": {}, \"type\": {}}}", s(&c.name), s(&c.sql_type)))
            .collect();
        let stages: Vec<String> = self
            .stages
            .iter()
            .map(|st| {
                let cols: Vec<String> = st.columns.iter().map(|c| s(c)).collect();
                format!(
                    "{{\"name\": {}, \"columns\": [{}], \"base\": {}, \"step\": {}}}",
                    s(&st.name),
                    cols.join(", "),
                    s(&st.base),
                    st.step.as_deref().map_or("null".to_string(), s)
                )
            })
            .collect();
        format!(
            "{{\"format\": \"mentat-plan\", \"version\": 1, \"dialect\": {}, \"columns\": [{}], \"stages\": [{}], \"final\": {}}}",
            s(dialect.name()),
            columns.join(", "),
            stages.join(", "),
            s(&self.sql)
        )
    }
}

/// Compiles an EDN Datalog query into one DuckDB statement over `store`.
///
/// `inputs_edn` is an EDN vector with one element per `:in` binding after `$` (scalars, tuples,
/// collections, relations, lookup refs for scalar entity inputs); its values are inlined into the
/// statement as quoted literals. `schema` is the store's schema cache: idents are resolved here, so
/// the statement needs no helper lookups. Errors name the offending EDN form ([`PlanError`]).
pub fn compile_query(
    query_edn: &str,
    inputs_edn: Option<&str>,
    schema: &Schema,
    store: &StoreName,
    opts: &QueryOptions,
) -> Result<CompiledQuery, PlanError> {
    compile_query_held(query_edn, inputs_edn, schema, store, opts, None)
}

/// [`compile_query`] with the `*` of `(pull ?e pattern)` find elements expanded to the attributes `held` (as
/// [`pull::compile_pull_held`]), usually those [`CompiledQuery::held_sql`] lists.
pub fn compile_query_held(
    query_edn: &str,
    inputs_edn: Option<&str>,
    schema: &Schema,
    store: &StoreName,
    opts: &QueryOptions,
    held: Option<&[schema::Entid]>,
) -> Result<CompiledQuery, PlanError> {
    compile_query_sources(query_edn, inputs_edn, schema, store, opts, &[], held)
}

/// [`compile_query_held`] for a query of several sources (Datomic's `:in $ $2`): `schema`, `store` and `opts`
/// are the default source `$`, and `sources` the stores given for other source variables, each with its own
/// schema and time travel. A source variable of `:in` given no store is a relation source: its element of the
/// inputs is a collection of tuples, matched by patterns on tuple positions.
///
/// Clauses read `$` unless they name a source (`[$2 ?e :a ?v]`, `($2 not ...)`, `($2 or ...)`,
/// `($2 rule ?a)`, `[(get-else $2 ?e :a d) ?v]`); the clauses inside a sourced `not`/`or` and a rule's bodies
/// read that source. Each pattern's idents resolve against its own source's schema, and the whole query is still
/// one statement (each store source's tables are read in its own DuckDB schema).
///
/// Errors, besides [`compile_query`]'s: [`PlanError::Source`] for a store given for a variable that `:in` does not
/// bind, a source named in a clause that `:in` does not bind, an attribute unknown to the named source's schema
/// (naming both), and a function that needs a database called on a relation source.
pub fn compile_query_sources(
    query_edn: &str,
    inputs_edn: Option<&str>,
    schema: &Schema,
    store: &StoreName,
    opts: &QueryOptions,
    sources: &[source::StoreSource],
    held: Option<&[schema::Entid]>,
) -> Result<CompiledQuery, PlanError> {
    let query = parse::parse_query(query_edn)?;
    let in_sources: Vec<String> = query
        .inputs
        .iter()
        .filter_map(|b| match b {
            parse::InBinding::Source(name) if name != "$" => Some(name.clone()),
            _ => None,
        })
        .collect();
    for s in sources {
        if !in_sources.iter().any(|n| n == s.var) {
            return Err(PlanError::Source {
                var: s.var.to_string(),
                form: error::show(&query.in_form),
                message: format!("sources := gives it the store {}, but the query's :in does not bind it", s.store),
            });
        }
    }
    if opts.dialect != sql::Dialect::DuckDb && !sources.is_empty() {
        return Err(PlanError::Dialect {
            dialect: opts.dialect.name(),
            construct: "a query over several stores (sources :=)".into(),
        });
    }
    let store_vars: Vec<&str> = sources.iter().map(|s| s.var).collect();
    let rules = rules::from_inputs(&query, inputs_edn, &store_vars)?;
    let mut ctx = Ctx::new(schema, store, opts).with_rules(rules.as_ref()).with_stores(sources, in_sources);
    ctx.pull_held = held;
    let mut inputs = inputs::read_inputs(&ctx, &query, inputs_edn)?;
    let ctx = ctx.with_relations(std::mem::take(&mut inputs.source_relations));
    // a pull pattern given as an input replaces its name in `(pull ?e pattern)`
    let mut query = query;
    for elem in query.find.elements_mut() {
        if let parse::FindElem::Pull { pattern: p @ edn_format::Value::Symbol(_), form, .. } = elem {
            let name = error::show(p);
            match inputs.patterns.iter().find(|(n, _)| *n == name) {
                Some((_, v)) => *p = v.clone(),
                None => return Err(PlanError::syntax(form, format!("the pull pattern {name} is not an :in binding"))),
            }
        }
    }
    let alg = algebrize::algebrize(&ctx, &query.where_clauses, &inputs)?;
    emit::emit(&ctx, &query, &alg)
}

/// What the entity path needs of a query text, kept between calls: the query parsed once and the general
/// path's output columns (names and types, which the entity path's answers keep). Built from a compiled query
/// by [`entity_shape`]; with it, a call with new inputs is planned by [`entity_plan`] without compiling SQL.
#[derive(Clone, Debug)]
pub struct EntityShape {
    query: parse::Query,
    pub columns: Vec<OutputColumn>,
}

/// The shape of `query_edn`, whose compiled form is `compiled`; None when it cannot be parsed.
pub fn entity_shape(query_edn: &str, compiled: &CompiledQuery) -> Option<EntityShape> {
    Some(EntityShape { query: parse::parse_query(query_edn).ok()?, columns: compiled.columns.clone() })
}

/// The entity path's plan for a query of shape `shape` with `inputs_edn` ([`entity::plan`]), or None when only
/// the general path answers it (including every time-travel option but as-of a tx entid).
pub fn entity_plan(
    shape: &EntityShape,
    inputs_edn: Option<&str>,
    schema: &Schema,
    store: &StoreName,
    opts: &QueryOptions,
) -> Option<entity::EntityPlan> {
    // as-of or since a tx entid is served (the index keeps history and a tx order); an instant, both at once and
    // history are not
    let tx = |bound: &Option<TimeBound>| match bound {
        None => Ok(None),
        Some(TimeBound::Tx(t)) => Ok(Some(*t)),
        Some(TimeBound::Instant(_)) => Err(()),
    };
    let (Ok(as_of), Ok(since)) = (tx(&opts.as_of), tx(&opts.since)) else { return None };
    if (as_of.is_some() && since.is_some()) || opts.history {
        return None;
    }
    let ctx = Ctx::new(schema, store, opts);
    entity::plan(&shape.query, inputs_edn, schema, &shape.columns, &ctx, since)
        .map(|p| entity::EntityPlan { as_of, ..p })
}
