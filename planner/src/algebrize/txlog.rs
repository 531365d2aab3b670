//! The log functions of Datomic queries: `tx-ids` and `tx-data`.
//!
//! * `[(tx-ids $ ?t1 ?t2) [?tx ...]]`: the transactions in the half-open range `[t1, t2)` (Datomic's
//!   `tx-range`/`tx-ids`: `t1` inclusive, `t2` exclusive). Each bound is a tx entid (a ref or long) or an
//!   instant, compared with the transaction's `:db/txInstant`. The transactions are read from `cur_9`
//!   (`:db/txInstant`, one datom `(tx, 9, instant, tx)` per transaction, never retracted). The binding is a
//!   collection `[?tx ...]` (or a scalar `?tx`, one row per transaction all the same).
//! * `[(tx-data $ ?tx) [[?e ?a ?v ?tx2 ?added]]]`: every datom transaction `?tx` asserted or retracted,
//!   the transaction's own `:db/txInstant` datom and schema datoms included: its assertions are the rows of
//!   `cur_<a>` and `hist_<a>` with `tx = ?tx` (`added` true), its retractions the rows of `hist_<a>` with
//!   `retracted_tx = ?tx` (`added` false). `?a` binds the attribute's entid; `?v` values of several types
//!   take the unbound-attribute fallback (VARCHAR text, see [`crate::types::Ty::Mixed`]), or the common type
//!   when the schema has only one. The binding is a relation of at most five positions, `_` for the unused.
//!
//! Both read the log, so they ignore the query's `as_of`/`since`/`history` options, as Datomic's log API is
//! independent of the database value a query reads.

use super::functions::Operand;
use super::{coerce, Scope, TExpr};
use crate::error::PlanError;
use crate::layout::DB_TX_INSTANT;
use crate::parse::{Binding, Call, Term};
use crate::source::Ctx;
use crate::sql::{BinOp, Expr, FromItem, Name, Query, Select, TableSource};
use crate::types::{Class, Constant, Ty};

impl Scope {
    /// The operand after `$` at position `i`, typed (constants keep their natural type).
    fn log_arg(&self, ctx: &Ctx, call: &Call, i: usize) -> Result<TExpr, PlanError> {
        if call.args.first() != Some(&Term::Src) {
            return Err(PlanError::syntax(&call.form, format!("{} starts with the source $", call.name)));
        }
        let term = call
            .args
            .get(i)
            .ok_or_else(|| PlanError::syntax(&call.form, format!("{} needs {} arguments", call.name, i + 1)))?;
        match self.operand(ctx, term, &call.form)? {
            Operand::Typed(t) => Ok(t),
            Operand::Const(c @ (Constant::Long(_) | Constant::Keyword(_) | Constant::LookupRef { .. })) => {
                let e = coerce(ctx, &c, &Ty::REF)
                    .ok_or_else(|| PlanError::type_mismatch(&call.form, "not a transaction"))?;
                Ok(TExpr::new(e, Ty::REF))
            }
            Operand::Const(c) => {
                let ty = c.natural_type();
                let e = coerce(ctx, &c, &ty).ok_or_else(|| PlanError::type_mismatch(&call.form, "not a value"))?;
                Ok(TExpr::new(e, ty))
            }
        }
    }

    /// `[(tx-ids $ ?t1 ?t2) [?tx ...]]` (see the module docs).
    pub(crate) fn tx_ids(&mut self, ctx: &Ctx, call: &Call, binding: &Binding) -> Result<(), PlanError> {
        if call.args.len() != 3 {
            return Err(PlanError::syntax(&call.form, "tx-ids takes $, a start and an end: (tx-ids $ ?t1 ?t2)"));
        }
        let var = match binding {
            Binding::Collection(v) | Binding::Scalar(v) => v.clone(),
            _ => return Err(PlanError::syntax(&call.form, "tx-ids binds a collection [?tx ...]")),
        };
        let alias = ctx.alias("tx");
        for (i, op) in [(1, BinOp::Ge), (2, BinOp::Lt)] {
            let t = self.log_arg(ctx, call, i)?;
            let col = match t.ty.class() {
                Class::Number => "e",
                Class::Instant => "v",
                _ => {
                    return Err(PlanError::type_mismatch(
                        &call.form,
                        format!("tx-ids bounds are transactions or instants, not {}", t.ty.a_name()),
                    ))
                }
            };
            self.alg.filters.push(Expr::bin(op, Expr::col(&alias, col), t.expr));
        }
        let table = ctx.current_table(DB_TX_INSTANT);
        self.add_source(alias.clone(), table, Some(vec![var.clone()]), vec![var.clone()]);
        self.bind(ctx, &var, TExpr::new(Expr::col(&alias, "e"), Ty::REF), &call.form)
    }

    /// `[(tx-data $ ?tx) [[?e ?a ?v ?tx ?added]]]` (see the module docs).
    pub(crate) fn tx_data(&mut self, ctx: &Ctx, call: &Call, binding: &Binding) -> Result<(), PlanError> {
        if call.args.len() != 2 {
            return Err(PlanError::syntax(&call.form, "tx-data takes $ and a transaction: (tx-data $ ?tx)"));
        }
        let Binding::Relation(vars) = binding else {
            return Err(PlanError::syntax(&call.form, "tx-data binds a relation [[?e ?a ?v ?tx ?added]]"));
        };
        if vars.len() > 5 {
            return Err(PlanError::syntax(&call.form, "tx-data binds at most [[?e ?a ?v ?tx ?added]]"));
        }
        let tx = self.log_arg(ctx, call, 1)?;
        if !tx.ty.is_numeric() || tx.ty == Ty::DOUBLE {
            return Err(PlanError::type_mismatch(
                &call.form,
                format!("tx-data takes a transaction, not {}", tx.ty.a_name()),
            ));
        }
        let attrs = ctx.schema.attributes();
        let v_ty = match attrs.first() {
            Some(a) if attrs.iter().all(|b| crate::types::attr_ty(b) == crate::types::attr_ty(a)) => {
                crate::types::attr_ty(a)
            }
            _ => Ty::Mixed,
        };
        let d = Name::new("d");
        let mut parts = Vec::new();
        for a in &attrs {
            let v = if v_ty == Ty::Mixed && a.sql_type() != "VARCHAR" {
                Expr::col(&d, "v").cast("VARCHAR")
            } else {
                Expr::col(&d, "v")
            };
            for (table, tx_col, added) in [
                (ctx.current_table(a.entid), "tx", true),
                (ctx.history_table(a.entid), "tx", true),
                (ctx.history_table(a.entid), "retracted_tx", false),
            ] {
                let items = vec![
                    (Expr::col(&d, "e"), Some("e".to_string())),
                    (Expr::int(a.entid).cast("BIGINT"), Some("a".to_string())),
                    (v.clone(), Some("v".to_string())),
                    (Expr::col(&d, tx_col), Some("tx".to_string())),
                    (Expr::bool(added), Some("added".to_string())),
                ];
                let from = vec![FromItem::inner(table, &d)];
                parts.push(Query::Select(Box::new(Select { items, from, ..Default::default() })));
            }
        }
        let alias = ctx.alias("log");
        let source = TableSource::Subquery(Box::new(Query::Union { all: true, parts }));
        let bound: Vec<_> = vars.iter().flatten().cloned().collect();
        self.add_source(alias.clone(), source, None, bound);
        self.alg.filters.push(Expr::eq(Expr::col(&alias, "tx"), tx.expr));
        let cols = [("e", Ty::REF), ("a", Ty::REF), ("v", v_ty), ("tx", Ty::REF), ("added", Ty::BOOLEAN)];
        for (var, (col, ty)) in vars.iter().zip(cols) {
            if let Some(var) = var {
                self.bind(ctx, var, TExpr::new(Expr::col(&alias, col), ty), &call.form)?;
            }
        }
        Ok(())
    }
}
