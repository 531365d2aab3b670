//! Time travel: which rows a data pattern reads, as a function of the attribute and the
//! [`QueryOptions`]. Every data pattern, lookup ref, `get-else` and `missing?` goes through
//! [`Ctx::datoms`], so a query's whole view of the store changes in one place.
//!
//! Every source has the columns `e`, `v`, `tx` (and `added` for history):
//!
//! * now: `cur_<aid>`.
//! * since T: `cur_<aid>` rows with `tx > T` (Datomic's since-db: what was asserted after T and is
//!   still true now).
//! * as-of T: the datoms asserted at or before T and not retracted at or before T, computed as
//!   "current minus what changed after T": the current rows with `tx <= T`, plus the (e, v) pairs
//!   that have a retraction after T and whose last operation at or before T was an assertion (taken
//!   from `hist_<aid>`, with that assertion's tx). The two parts are disjoint, and the second part
//!   only touches history rows of datoms that were retracted after T, so an as-of close to now costs
//!   little more than a current read.
//! * history: `hist_<aid>` (assertions and retractions, `added` exposed), bounded by as-of/since
//!   when those are given too.
//!
//! A [`TimeBound::Instant`] resolves to the last transaction at or before the instant, through a
//! scalar subquery on `cur_9` (`:db/txInstant`, whose datoms are `(tx, 9, instant, tx)`), or to 0
//! when there is none.

use crate::layout::{StoreName, DB_TX_INSTANT};
use crate::schema::{Entid, Schema};
use crate::sql::{BinOp, Expr, FromItem, JoinKind, Lit, Name, Query, Select, TableSource};
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
}

/// The compilation context shared by every stage: schema, store, options, and the alias counter.
pub struct Ctx<'a> {
    pub schema: &'a Schema,
    pub store: &'a StoreName,
    pub opts: &'a QueryOptions,
    next_alias: Cell<usize>,
}

impl<'a> Ctx<'a> {
    pub fn new(schema: &'a Schema, store: &'a StoreName, opts: &'a QueryOptions) -> Ctx<'a> {
        Ctx { schema, store, opts, next_alias: Cell::new(0) }
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
        if self.opts.history {
            let table = TableSource::Table(self.store.history(aid));
            return filtered(table, &["e", "v", "tx", "added"], as_of, since);
        }
        let current = TableSource::Table(self.store.current(aid));
        match as_of {
            None => filtered(current, &["e", "v", "tx"], None, since),
            Some(t) => {
                let live =
                    select_cols(current, &["e", "v", "tx"], tx_window(&Name::new("d"), Some(t.clone()), since.clone()));
                let undone = self.retracted_after(aid, t, since);
                TableSource::Subquery(Box::new(Query::Union { all: true, parts: vec![live, undone] }))
            }
        }
    }

    /// The datoms of `aid` live at T but retracted after T: (e, v) pairs with a retraction after T
    /// whose last operation at or before T is an assertion, with that assertion's tx.
    fn retracted_after(&self, aid: Entid, t: Expr, since: Option<Expr>) -> Query {
        let h = Name::new("h");
        let r = Name::new("r");
        let retraction = Select {
            from: vec![item(TableSource::Table(self.store.history(aid)), &r)],
            filters: vec![
                Expr::eq(Expr::col(&r, "e"), Expr::col(&h, "e")),
                Expr::eq(Expr::col(&r, "v"), Expr::col(&h, "v")),
                Expr::bin(BinOp::Gt, Expr::col(&r, "tx"), t.clone()),
                Expr::col(&r, "added").negate(),
            ],
            ..Default::default()
        };
        let filters = vec![
            Expr::bin(BinOp::Le, Expr::col(&h, "tx"), t),
            Expr::Exists(Box::new(Query::Select(Box::new(retraction)))),
        ];
        let last_tx = Expr::Agg { func: "max", distinct: false, args: vec![Expr::col(&h, "tx")] };
        let mut having = vec![Expr::Agg {
            func: "arg_max",
            distinct: false,
            args: vec![Expr::col(&h, "added"), Expr::col(&h, "tx")],
        }];
        if let Some(s) = since {
            // The surviving assertion must itself be after the since bound.
            having.push(Expr::bin(BinOp::Gt, last_tx.clone(), s));
        }
        Query::Select(Box::new(Select {
            items: vec![
                (Expr::col(&h, "e"), Some("e".into())),
                (Expr::col(&h, "v"), Some("v".into())),
                (last_tx, Some("tx".into())),
            ],
            from: vec![item(TableSource::Table(self.store.history(aid)), &h)],
            filters,
            group_by: vec![Expr::col(&h, "e"), Expr::col(&h, "v")],
            having,
            ..Default::default()
        }))
    }

    /// The tx entid of a time bound.
    fn bound(&self, b: &TimeBound) -> Expr {
        match b {
            TimeBound::Tx(t) => Expr::int(*t),
            TimeBound::Instant(text) => {
                let i = Name::new("i");
                let q = Select {
                    items: vec![(Expr::Agg { func: "max", distinct: false, args: vec![Expr::col(&i, "e")] }, None)],
                    from: vec![item(TableSource::Table(self.store.current(DB_TX_INSTANT)), &i)],
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

fn item(source: TableSource, alias: &Name) -> FromItem {
    FromItem { source, alias: alias.clone(), kind: JoinKind::Inner, lateral: false, on: vec![] }
}

fn tx_window(alias: &Name, as_of: Option<Expr>, since: Option<Expr>) -> Vec<Expr> {
    let mut f = Vec::new();
    if let Some(t) = as_of {
        f.push(Expr::bin(BinOp::Le, Expr::col(alias, "tx"), t));
    }
    if let Some(s) = since {
        f.push(Expr::bin(BinOp::Gt, Expr::col(alias, "tx"), s));
    }
    f
}

fn select_cols(table: TableSource, cols: &[&str], filters: Vec<Expr>) -> Query {
    let d = Name::new("d");
    Query::Select(Box::new(Select {
        items: cols.iter().map(|c| (Expr::col(&d, c), None)).collect(),
        from: vec![item(table, &d)],
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
