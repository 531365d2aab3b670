//! Time travel: which rows a data pattern reads, as a function of the attribute and the
//! [`QueryOptions`]. Every data pattern, lookup ref, `get-else` and `missing?` goes through
//! [`Ctx::datoms`], so a query's whole view of the store changes in one place.
//!
//! Every source has the columns `e`, `v`, `tx` (and `added` for history). The layout keeps a datom that is
//! true now in `cur_<aid>(e, v, tx)` and a datom that was retracted in `hist_<aid>(e, v, tx, retracted_tx)`,
//! one row per assertion that was later retracted, so each source is a plain filter:
//!
//! * now: `cur_<aid>`.
//! * since T: `cur_<aid>` rows with `tx > T` (Datomic's since-db: what was asserted after T and is
//!   still true now).
//! * as-of T: the datoms asserted at or before T and not retracted at or before T: the current rows
//!   with `tx <= T`, and the retracted rows with `tx <= T < retracted_tx`. The parts are disjoint. Both
//!   are range filters that DuckDB's zone maps prune (tables are appended in tx order), so an as-of
//!   close to now reads little history.
//! * history: every assertion (current and retracted rows, `added` true) and every retraction
//!   (retracted rows at `retracted_tx`, `added` false), bounded by as-of/since on the operation's tx
//!   when those are given too.
//!
//! A [`TimeBound::Instant`] resolves to the last transaction at or before the instant, through a
//! scalar subquery on `cur_9` (`:db/txInstant`, whose datoms are `(tx, 9, instant, tx)`), or to 0
//! when there is none.
//!
//! Several sources (`:in $ $2`, Datomic's multiple data sources): each source variable other than `$` is a
//! [`StoreSource`] (another store, or the same one, with its own schema and [`QueryOptions`]) or a
//! [`RelationSource`] (tuples given in the inputs). [`Ctx::with_source`] gives the context of a clause that names
//! a source, so everything above (and every ident's resolution) follows that source; [`parse_sources`] reads
//! `mentat_q`'s `sources :=` map.

use crate::error::{show, PlanError};
use crate::layout::{StoreName, DB_TX_INSTANT};
use crate::schema::{Entid, Schema};
use crate::sql::{BinOp, Expr, FromItem, Lit, Name, Query, Select, TableSource};
use crate::types::Constant;
use edn_format::Value;
use std::cell::{Cell, RefCell};
use std::rc::Rc;

/// A point in time for as-of and since.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TimeBound {
    /// A transaction entid (`>= PART_TX_START`).
    Tx(Entid),
    /// An SQL timestamp literal text such as `2025-01-01 00:00:00+00`, resolved through `:db/txInstant`.
    Instant(String),
}

/// Which database value a query reads. The default is "now" (current state).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueryOptions {
    /// See only datoms asserted at or before this point and not retracted at or before it.
    pub as_of: Option<TimeBound>,
    /// See only datoms asserted after this point.
    pub since: Option<TimeBound>,
    /// See every assertion and retraction; 5-place patterns bind `added`.
    pub history: bool,
    /// Read the empty database (the bootstrap datoms of [`crate::layout::bootstrap_datoms`] only) instead of the
    /// store's tables: the store does not exist yet, and Datomic answers such a query against an empty database.
    pub empty: bool,
    /// The SQL dialect the statement is printed in (DuckDB's unless asked; see [`crate::sql::Dialect`]).
    pub dialect: crate::sql::Dialect,
}

/// The compilation context shared by every stage: schema, store, options, and the alias counter.
///
/// A context reads one source at a time: `schema`, `store` and `opts` are those of the source that the clauses
/// being compiled read when they name none (`$` at the top of a query). A clause that names another source
/// (`[$2 ?e :a ?v]`, `($2 not ...)`, `($2 rule ...)`, `[(get-else $2 ...) ?v]`) is compiled with the context
/// [`Ctx::with_source`] derives, which shares the alias counter and the rule frames with this one.
#[derive(Clone)]
pub struct Ctx<'a> {
    pub schema: &'a Schema,
    pub store: &'a StoreName,
    pub opts: &'a QueryOptions,
    next_alias: Rc<Cell<usize>>,
    /// The rule set of the query (`%` in `:in`), if any.
    pub rules: Option<&'a crate::rules::RuleSet>,
    /// The recursive components being compiled (innermost last): rule calls into them read their CTE.
    pub(crate) rule_frames: Rc<RefCell<Vec<crate::rules::RuleFrame>>>,
    /// The attributes `*` expands to in `(pull ?e pattern)` find elements (see [`crate::compile_query_held`]).
    pub pull_held: Option<&'a [Entid]>,
    /// The source variable this context reads (`$`, `$2`, `$hist`, ...).
    pub source: String,
    /// The source that `$` names here: `$` itself, or inside a rule's bodies the source the rule is called with
    /// (Datomic's rules read the source of their call).
    dollar: String,
    /// The query's default source `$`: its schema, store and options.
    root: (&'a Schema, &'a StoreName, &'a QueryOptions),
    /// The stores given for source variables ([`crate::compile_query_sources`]).
    stores: &'a [StoreSource<'a>],
    /// The relations given in the inputs for source variables.
    relations: Rc<Vec<RelationSource>>,
    /// The source variables the query's `:in` binds, `$` excepted.
    in_sources: Rc<Vec<String>>,
    /// The index in `relations` of the source this context reads, when it is a relation.
    relation: Option<usize>,
}

/// A store that a query reads through a source variable other than `$` (`:in $ $2` with `$2` a store): the
/// variable, and the store's schema, name and time-travel options, as for the default source.
#[derive(Clone, Copy, Debug)]
pub struct StoreSource<'a> {
    /// The source variable, with its `$`: `$2`, `$hist`.
    pub var: &'a str,
    pub schema: &'a Schema,
    pub store: &'a StoreName,
    pub opts: &'a QueryOptions,
}

/// A collection of tuples given in the inputs for a source variable (Datomic's "collection as a data source"):
/// a pattern `[$2 ?x ?y ?z]` matches each tuple on its positions.
#[derive(Clone, Debug, PartialEq)]
pub struct RelationSource {
    /// The source variable, with its `$`.
    pub var: String,
    /// The tuples, values read as plain EDN values (keywords stay keywords, a vector is a tuple value).
    pub rows: Vec<Vec<Constant>>,
}

/// What a source variable names in `mentat_q`'s `sources :=` map ([`parse_sources`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceSpec {
    /// The source variable, with its `$`.
    pub var: String,
    /// The store's name (`schema` or `catalog.schema`), or None for the query's own store (`store :=`).
    pub store: Option<String>,
    /// The source's own time travel (as-of, since, history); the query's `as_of`/`since`/`history` options apply
    /// to `$` only.
    pub opts: QueryOptions,
}

/// Reads `mentat_q`'s `sources :=` text: an EDN map from source variables to stores,
/// `{$2 "crm", $hist {:history true}, $old {:store "crm" :as-of 1099511627790}}`. A value is a store name (a
/// string), or a map with any of `:store` (a name; default: the query's store), `:as-of` and `:since` (a tx
/// entid, an `#inst` or timestamp text) and `:history` (a boolean): Datomic's `(d/as-of db t)`, `(d/since db t)`
/// and `(d/history db)` given per source. Keys are symbols (or strings) starting with `$`; `$` itself is the
/// query's store and its options, so it is refused here.
///
/// Errors ([`PlanError::BadInput`], naming the offending entry): malformed EDN, a key that is not a source
/// variable, a value of another shape, an unknown option.
pub fn parse_sources(text: &str) -> Result<Vec<SourceSpec>, PlanError> {
    let value = crate::parse::parse_edn(text, "sources")?;
    let bad = |form: &Value, message: &str| PlanError::BadInput { form: show(form), message: message.to_string() };
    let Value::Map(map) = &value else {
        return Err(bad(&value, "sources is an EDN map from source variables to stores, {$2 \"store\"}"));
    };
    let mut out: Vec<SourceSpec> = Vec::new();
    for (k, v) in map {
        let var = match k {
            Value::Symbol(s) if s.namespace().is_none() => s.name().to_string(),
            Value::String(s) => s.clone(),
            _ => String::new(),
        };
        if !var.starts_with('$') || var.len() < 2 {
            return Err(bad(k, "a key of sources is a source variable such as $2 or $hist"));
        }
        let mut spec = SourceSpec { var, store: None, opts: QueryOptions::default() };
        match v {
            Value::String(s) => spec.store = Some(s.clone()),
            Value::Map(opts) => {
                for (ok, ov) in opts {
                    let name = match ok {
                        Value::Keyword(kw) if kw.namespace().is_none() => kw.name(),
                        _ => "",
                    };
                    match (name, ov) {
                        ("store", Value::String(s)) => spec.store = Some(s.clone()),
                        ("history", Value::Boolean(b)) => spec.opts.history = *b,
                        ("as-of" | "since", t) => {
                            let bound = match t {
                                Value::Integer(i) => TimeBound::Tx(*i),
                                Value::Inst(i) => TimeBound::Instant(i.to_rfc3339()),
                                Value::String(s) => TimeBound::Instant(s.clone()),
                                _ => return Err(bad(v, "as-of and since take a tx entid, an #inst or timestamp text")),
                            };
                            if name == "as-of" {
                                spec.opts.as_of = Some(bound);
                            } else {
                                spec.opts.since = Some(bound);
                            }
                        }
                        _ => {
                            return Err(bad(
                                v,
                                "a source's options are :store \"name\", :as-of t, :since t and :history true",
                            ))
                        }
                    }
                }
            }
            _ => {
                return Err(bad(v, "a source is a store name (a string) or a map of :store, :as-of, :since, :history"))
            }
        }
        out.push(spec);
    }
    Ok(out)
}

impl<'a> Ctx<'a> {
    pub fn new(schema: &'a Schema, store: &'a StoreName, opts: &'a QueryOptions) -> Ctx<'a> {
        Ctx {
            schema,
            store,
            opts,
            next_alias: Rc::new(Cell::new(0)),
            rules: None,
            rule_frames: Default::default(),
            pull_held: None,
            source: "$".into(),
            dollar: "$".into(),
            root: (schema, store, opts),
            stores: &[],
            relations: Default::default(),
            in_sources: Default::default(),
            relation: None,
        }
    }

    /// The same context with the stores given for source variables and the source variables of `:in`.
    pub fn with_stores(mut self, stores: &'a [StoreSource<'a>], in_sources: Vec<String>) -> Ctx<'a> {
        self.stores = stores;
        self.in_sources = Rc::new(in_sources);
        self
    }

    /// The same context with the relations read from the inputs for source variables.
    pub fn with_relations(mut self, relations: Vec<RelationSource>) -> Ctx<'a> {
        self.relations = Rc::new(relations);
        self
    }

    /// Whether `var` (a source variable other than `$`) is given a store, so that it takes no inputs element.
    pub fn is_store_source(&self, var: &str) -> bool {
        self.stores.iter().any(|s| s.var == var)
    }

    /// The context for the clauses of source `name` (`$` is the source `$` names here: the query's, or inside a
    /// rule's bodies the rule call's). It reads that source's store, schema and options, or its relation
    /// ([`Ctx::relation`]); the alias counter and rule frames are shared.
    ///
    /// Errors ([`PlanError::Source`], naming the source and `form`): a source variable that `:in` does not bind.
    pub fn with_source(&self, name: &str, form: &Value) -> Result<Ctx<'a>, PlanError> {
        let name = if name == "$" { self.dollar.clone() } else { name.to_string() };
        let mut c = self.clone();
        c.relation = None;
        if name == "$" {
            (c.schema, c.store, c.opts) = self.root;
            c.source = name;
            return Ok(c);
        }
        let err = |message: String| PlanError::Source { var: name.clone(), form: show(form), message };
        if !self.in_sources.contains(&name) {
            return Err(err(format!("the query's :in does not bind {name} (write :in $ {name} ...)")));
        }
        if let Some(s) = self.stores.iter().find(|s| s.var == name) {
            (c.schema, c.store, c.opts) = (s.schema, s.store, s.opts);
        } else if let Some(i) = self.relations.iter().position(|r| r.var == name) {
            // a relation has no schema: constants of its clauses outside patterns read `$`'s
            (c.schema, c.store, c.opts) = self.root;
            c.relation = Some(i);
        } else {
            return Err(err("no store (sources :=) and no relation (inputs) is given for it".into()));
        }
        c.source = name;
        Ok(c)
    }

    /// Whether this context reads the query's default source `$` (its store, not a relation).
    pub fn reads_default(&self) -> bool {
        self.relation.is_none() && std::ptr::eq(self.schema, self.root.0) && std::ptr::eq(self.store, self.root.1)
    }

    /// The attribute of this context's schema with the ident that entid `attr` has in `$`'s schema: a lookup ref
    /// (always read against `$`, such as an input) names the entity of the source it is used in, as Datomic
    /// resolves it there. None when this source lacks the attribute (the lookup ref then matches nothing).
    pub fn default_attribute_here(&self, attr: Entid) -> Option<&'a crate::schema::Attribute> {
        let a = self.root.0.attribute(attr)?;
        if std::ptr::eq(self.schema, self.root.0) {
            return Some(a);
        }
        self.schema.attribute_by_ident(&a.ident).filter(|here| here.unique.is_some())
    }

    /// The context for a rule's bodies called from this one: `$` in them names this context's source.
    pub(crate) fn for_rule_bodies(&self) -> Ctx<'a> {
        let mut c = self.clone();
        c.dollar = c.source.clone();
        c
    }

    /// The relation this context reads, when its source is a relation given in the inputs.
    pub fn relation(&self) -> Option<&RelationSource> {
        self.relation.and_then(|i| self.relations.get(i))
    }

    /// This context's source for messages: `source $2 (store crm)`, `source $2 (a relation)`, or `source $`.
    pub fn describe(&self) -> String {
        if self.relation().is_some() {
            format!("source {} (a relation given in the inputs)", self.source)
        } else {
            format!("source {} (store {})", self.source, self.store)
        }
    }

    /// The same context with a rule set.
    pub fn with_rules(mut self, rules: Option<&'a crate::rules::RuleSet>) -> Ctx<'a> {
        self.rules = rules;
        self
    }

    /// A fresh table alias with the given prefix (`t3`, `o4`, ...), unique in the whole statement.
    pub fn alias(&self, prefix: &str) -> Name {
        let n = self.next_alias.get();
        self.next_alias.set(n + 1);
        Name::new(&format!("{prefix}{n}"))
    }

    /// Whether sources expose the `added` column.
    pub fn history(&self) -> bool {
        self.opts.history
    }

    /// The datoms of attribute `aid` as this query sees them (see the module docs).
    pub fn datoms(&self, aid: Entid) -> TableSource {
        let as_of = self.opts.as_of.as_ref().map(|b| self.bound(b));
        let since = self.opts.since.as_ref().map(|b| self.bound(b));
        let current = self.current_table(aid);
        let retracted = self.history_table(aid);
        let d = Name::new("d");
        if self.opts.history {
            let op = |table: TableSource, tx: &str, added: bool| {
                Query::Select(Box::new(Select {
                    items: vec![
                        (Expr::col(&d, "e"), Some("e".into())),
                        (Expr::col(&d, "v"), Some("v".into())),
                        (Expr::col(&d, tx), Some("tx".into())),
                        (Expr::bool(added), Some("added".into())),
                    ],
                    from: vec![FromItem::inner(table, &d)],
                    filters: window(&d, tx, as_of.clone(), since.clone()),
                    ..Default::default()
                }))
            };
            let parts =
                vec![op(current, "tx", true), op(retracted.clone(), "tx", true), op(retracted, "retracted_tx", false)];
            return TableSource::Subquery(Box::new(Query::Union { all: true, parts }));
        }
        match as_of {
            None => filtered(current, &["e", "v", "tx"], None, since),
            Some(t) => {
                let live = select_cols(current, &["e", "v", "tx"], tx_window(&d, Some(t.clone()), since.clone()));
                let mut filters = tx_window(&d, Some(t.clone()), since);
                filters.push(Expr::bin(BinOp::Gt, Expr::col(&d, "retracted_tx"), t));
                let undone = select_cols(retracted, &["e", "v", "tx"], filters);
                TableSource::Subquery(Box::new(Query::Union { all: true, parts: vec![live, undone] }))
            }
        }
    }

    /// The current datoms `(e, v, tx)` of attribute `aid`: its `cur_` table, or in the empty database
    /// ([`QueryOptions::empty`]) its bootstrap datoms.
    pub fn current_table(&self, aid: Entid) -> TableSource {
        if !self.opts.empty {
            return TableSource::Stored { store: self.store.clone(), table: crate::layout::current_table_name(aid) };
        }
        let ty = self.schema.attribute(aid).map_or("VARCHAR".to_string(), |a| a.sql_type());
        let ty = ty.as_str();
        use crate::layout::BootValue;
        let rows: Vec<(Entid, Expr)> = crate::layout::bootstrap_datoms()
            .into_iter()
            .filter(|d| d.0 == aid)
            .map(|(_, e, v)| {
                let v = match v {
                    BootValue::Ref(x) => Expr::int(x),
                    BootValue::Keyword(k) => Expr::Lit(Lit::Str(k)),
                    BootValue::Bool(b) => Expr::bool(b),
                    BootValue::Epoch => Expr::Lit(Lit::Typed("1970-01-01 00:00:00+00".into(), "TIMESTAMPTZ")),
                };
                (e, v)
            })
            .collect();
        empty_relation(&["e", "v", "tx"], ty, rows)
    }

    /// The retracted datoms `(e, v, tx, retracted_tx)` of attribute `aid`: its `hist_` table, or nothing in the
    /// empty database.
    pub fn history_table(&self, aid: Entid) -> TableSource {
        if !self.opts.empty {
            return TableSource::Stored { store: self.store.clone(), table: crate::layout::history_table_name(aid) };
        }
        let ty = self.schema.attribute(aid).map_or("VARCHAR".to_string(), |a| a.sql_type());
        let ty = ty.as_str();
        empty_relation(&["e", "v", "tx", "retracted_tx"], ty, Vec::new())
    }

    /// The tx entid of a time bound.
    fn bound(&self, b: &TimeBound) -> Expr {
        match b {
            TimeBound::Tx(t) => Expr::int(*t),
            TimeBound::Instant(text) => {
                let i = Name::new("i");
                let q = Select {
                    items: vec![(Expr::Agg { func: "max", distinct: false, args: vec![Expr::col(&i, "e")] }, None)],
                    from: vec![FromItem::inner(self.current_table(DB_TX_INSTANT), &i)],
                    filters: vec![Expr::bin(
                        BinOp::Le,
                        Expr::col(&i, "v"),
                        Expr::Lit(Lit::Typed(text.clone(), "TIMESTAMPTZ")),
                    )],
                    ..Default::default()
                };
                Expr::Func("coalesce", vec![Expr::Subquery(Box::new(Query::Select(Box::new(q)))), Expr::int(0)])
            }
        }
    }
}

/// A relation of datoms `(e BIGINT, v <ty>, tx BIGINT[, retracted_tx BIGINT])` holding `rows` (entity, value
/// literal) of the bootstrap transaction, or none.
fn empty_relation(cols: &[&str], ty: &str, rows: Vec<(Entid, Expr)>) -> TableSource {
    let d = Name::new("d");
    let typed = |c: &str| if c == "v" { ty.to_string() } else { "BIGINT".to_string() };
    if rows.is_empty() {
        return TableSource::Subquery(Box::new(Query::Select(Box::new(Select {
            items: cols.iter().map(|c| (Expr::Lit(Lit::Null).cast(&typed(c)), Some(c.to_string()))).collect(),
            filters: vec![Expr::bool(false)],
            ..Default::default()
        }))));
    }
    let tx = crate::layout::PART_TX_START;
    let rows = rows.into_iter().map(|(e, v)| vec![Expr::int(e), v, Expr::int(tx)]).collect();
    let values = TableSource::Values { rows, columns: vec![Name::new("e"), Name::new("v"), Name::new("tx")] };
    TableSource::Subquery(Box::new(Query::Select(Box::new(Select {
        items: cols.iter().map(|c| (Expr::col(&d, c).cast(&typed(c)), Some(c.to_string()))).collect(),
        from: vec![FromItem::inner(values, &d)],
        ..Default::default()
    }))))
}

fn tx_window(alias: &Name, as_of: Option<Expr>, since: Option<Expr>) -> Vec<Expr> {
    window(alias, "tx", as_of, since)
}

/// `col <= as_of AND col > since`, for whichever bounds are given.
fn window(alias: &Name, col: &str, as_of: Option<Expr>, since: Option<Expr>) -> Vec<Expr> {
    let mut f = Vec::new();
    if let Some(t) = as_of {
        f.push(Expr::bin(BinOp::Le, Expr::col(alias, col), t));
    }
    if let Some(s) = since {
        f.push(Expr::bin(BinOp::Gt, Expr::col(alias, col), s));
    }
    f
}

fn select_cols(table: TableSource, cols: &[&str], filters: Vec<Expr>) -> Query {
    let d = Name::new("d");
    Query::Select(Box::new(Select {
        items: cols.iter().map(|c| (Expr::col(&d, c), None)).collect(),
        from: vec![FromItem::inner(table, &d)],
        filters,
        ..Default::default()
    }))
}

/// The table itself when there is no window, else a subquery with the tx window applied.
fn filtered(table: TableSource, cols: &[&str], as_of: Option<Expr>, since: Option<Expr>) -> TableSource {
    let filters = tx_window(&Name::new("d"), as_of, since);
    if filters.is_empty() {
        table
    } else {
        TableSource::Subquery(Box::new(select_cols(table, cols, filters)))
    }
}
