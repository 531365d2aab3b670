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

use crate::layout::{StoreName, DB_TX_INSTANT};
use crate::schema::{Entid, Schema};
use crate::sql::{BinOp, Expr, FromItem, Lit, Name, Query, Select, TableSource};
use std::cell::Cell;

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
}

/// The compilation context shared by every stage: schema, store, options, and the alias counter.
pub struct Ctx<'a> {
    pub schema: &'a Schema,
    pub store: &'a StoreName,
    pub opts: &'a QueryOptions,
    next_alias: Cell<usize>,
    /// The rule set of the query (`%` in `:in`), if any.
    pub rules: Option<&'a crate::rules::RuleSet>,
    /// The recursive components being compiled (innermost last): rule calls into them read their CTE.
    pub(crate) rule_frames: std::cell::RefCell<Vec<crate::rules::RuleFrame>>,
    /// The attributes `*` expands to in `(pull ?e pattern)` find elements (see [`crate::compile_query_held`]).
    pub pull_held: Option<&'a [Entid]>,
}

impl<'a> Ctx<'a> {
    pub fn new(schema: &'a Schema, store: &'a StoreName, opts: &'a QueryOptions) -> Ctx<'a> {
        Ctx {
            schema,
            store,
            opts,
            next_alias: Cell::new(0),
            rules: None,
            rule_frames: Default::default(),
            pull_held: None,
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
            return TableSource::Table(self.store.current(aid));
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
            return TableSource::Table(self.store.history(aid));
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
