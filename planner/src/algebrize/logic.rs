//! `not`, `not-join`, `or`, `or-join` and `and`, with Datomic's binding rules:
//!
//! * `not`: every variable it mentions must be bound outside; `not-join [?a ...]`: the listed
//!   variables must be bound outside, the others are local. The body becomes a correlated
//!   `NOT EXISTS (...)` (or `NOT (...)` when it has no data patterns); DuckDB plans it as an anti join.
//! * `or`: every branch must mention the same variables; `or-join [[?req] ?x]`: the bracketed
//!   variables must be bound before, the others are the join variables, and each branch must bind
//!   every join variable that is not bound outside. Branches become a `UNION` (a set, as Datalog
//!   wants) joined on the or's variables; a branch that reads an outer variable it does not bind
//!   makes the union `LATERAL`. When no branch has a data pattern and nothing new is bound, the or
//!   is a plain `OR` of filters. Impossible branches are dropped. Two shapes cost less: an `or` of one
//!   attribute's constant values (`(or [?e :a c1] [?e :a c2])`) is one read of the attribute with `v IN
//!   (...)`, and inside the bodies of a recursive rule the union is a `UNION ALL`, since the recursive
//!   CTE's own `UNION` makes its rows a set.

use super::{body, Scope, Source, TExpr, VarBinding};
use crate::error::{show, PlanError};
use crate::parse::{Binding, Clause, OrJoin, Term, Var};
use crate::source::Ctx;
use crate::sql::{Expr, FromItem, JoinKind, Name, Query, TableSource};
use crate::types::Ty;
use edn_format::Value;
use std::collections::{BTreeMap, BTreeSet};

impl Scope {
    pub(crate) fn not(
        &mut self,
        ctx: &Ctx,
        join: Option<&[Var]>,
        clauses: &[Clause],
        _form: &Value,
    ) -> Result<(), PlanError> {
        let visible = match join {
            None => self.visible(),
            Some(vars) => self.visible().into_iter().filter(|(k, _)| vars.contains(k)).collect(),
        };
        let mut child = Scope::child(visible, true);
        child.run(ctx, clauses)?;
        if child.alg.empty.is_some() {
            return Ok(());
        }
        if child.alg.sources.is_empty() {
            match child.alg.filters.len() {
                0 => self.prune("a not whose body is always true".into()),
                _ => self.alg.filters.push(Expr::all(child.alg.filters).negate()),
            }
        } else {
            let q = Query::Select(Box::new(body(&child.alg)));
            self.alg.filters.push(Expr::Exists(Box::new(q)).negate());
        }
        Ok(())
    }

    pub(crate) fn or(
        &mut self,
        ctx: &Ctx,
        join: Option<&OrJoin>,
        branches: &[Vec<Clause>],
        form: &Value,
    ) -> Result<(), PlanError> {
        if join.is_none() {
            if let Some((e, a, values, first)) = one_attribute_alternatives(ctx, branches) {
                return self.or_values(ctx, e, a, values, first);
            }
        }
        let unify: Vec<Var> = match join {
            Some(j) => j.vars.clone(),
            None => {
                let sets: Vec<BTreeSet<Var>> = branches.iter().map(|b| mentioned(b).into_iter().collect()).collect();
                if let Some(diff) = sets.iter().find(|s| **s != sets[0]) {
                    let odd: Vec<String> = sets[0].symmetric_difference(diff).map(|v| v.0.clone()).collect();
                    return Err(PlanError::OrBranches {
                        form: show(form),
                        message: format!(
                            "every branch of or must use the same variables; {} appear in only some (use or-join)",
                            odd.join(", ")
                        ),
                    });
                }
                sets[0].iter().cloned().collect()
            }
        };
        let visible: BTreeMap<Var, VarBinding> =
            self.visible().into_iter().filter(|(k, _)| unify.contains(k)).collect();
        let mut done = Vec::new();
        for b in branches {
            let mut child = Scope::child(visible.clone(), false);
            child.run(ctx, b)?;
            if child.alg.empty.is_none() {
                done.push(child);
            }
        }
        if done.is_empty() {
            self.prune(format!("every branch of {} is impossible", show(form)));
            return Ok(());
        }
        // The or's outputs: unify variables some branch binds itself.
        let outputs: Vec<Var> =
            unify.iter().filter(|v| done.iter().any(|c| c.alg.bindings.contains_key(*v))).cloned().collect();
        for v in &unify {
            if !outputs.contains(v) && !self.is_bound(v) {
                return Err(PlanError::unbound(&v.0, form, "no branch of the or binds it"));
            }
        }
        if outputs.is_empty() && done.iter().all(|c| c.alg.sources.is_empty()) {
            let alternatives: Vec<Expr> = done.into_iter().map(|c| Expr::all(c.alg.filters)).collect();
            self.alg.filters.push(if alternatives.len() == 1 {
                alternatives.into_iter().next().unwrap_or(Expr::bool(true))
            } else {
                Expr::Or(alternatives)
            });
            return Ok(());
        }
        self.or_union(ctx, done, &outputs, form)
    }

    /// `(or [?e :a c1] [?e :a c2] ...)` as the one pattern `[?e :a ?v]` with `?v` (a fresh variable) in `(c1 c2
    /// ...)`, bound as a collection input is: one read of the attribute filtered by `v IN (...)` instead of a UNION
    /// of one read per value and the de-duplication of the union (the Debian closure's `(or [?d :dep/kind :depends]
    /// [?d :dep/kind :pre-depends])` grouped 288,000 rows for it: 26 ms of 98). The same answers: a value that
    /// cannot be the attribute's drops out as its branch would, and the fresh variable, in no find, keeps a
    /// cardinality-many attribute's rows from counting as distinct over `?e` in the key analysis.
    /// `form` is the first branch's pattern, which errors name.
    fn or_values(&mut self, ctx: &Ctx, e: &Term, a: &Term, values: Vec<&Value>, form: &Value) -> Result<(), PlanError> {
        let constants = values.into_iter().map(|v| self.constant(ctx, v, form)).collect::<Result<Vec<_>, _>>()?;
        let fresh = Var(format!("?__{}", ctx.alias("or").as_str()));
        self.alg.bindings.insert(fresh.clone(), VarBinding::Pending(constants));
        self.pattern(ctx, &[e.clone(), a.clone(), Term::Var(fresh)], form)
    }

    /// Joins the union of the branches' projections of `outputs`.
    fn or_union(&mut self, ctx: &Ctx, branches: Vec<Scope>, outputs: &[Var], form: &Value) -> Result<(), PlanError> {
        // Each branch's typed expression for each output.
        let mut columns: Vec<Vec<TExpr>> = Vec::new();
        for b in &branches {
            let mut row = Vec::new();
            for v in outputs {
                let te = match b.lookup(v) {
                    Some(VarBinding::Expr(t)) => t.clone(),
                    Some(VarBinding::Const(c)) => {
                        super::functions::typed(ctx, super::functions::Operand::Const(c.clone()), form)?
                    }
                    _ => {
                        return Err(PlanError::OrBranches {
                            form: show(form),
                            message: format!("a branch does not bind {v}, which is not bound outside the or"),
                        });
                    }
                };
                row.push(te);
            }
            columns.push(row);
        }
        let tys: Vec<Ty> = (0..outputs.len())
            .map(|i| {
                let first = columns[0][i].ty.clone();
                columns.iter().skip(1).try_fold(first, |acc, row| acc.join(&row[i].ty)).unwrap_or(Ty::Mixed)
            })
            .collect();
        let names: Vec<Name> = (0..outputs.len()).map(|i| Name::new(&format!("c{i}"))).collect();
        let parts: Vec<Query> = branches
            .iter()
            .zip(&columns)
            .map(|(b, row)| {
                let mut select = body(&b.alg);
                select.items = row
                    .iter()
                    .zip(&tys)
                    .zip(&names)
                    .map(|((te, ty), n)| {
                        // Columns keep their type; literals and computed values are cast to the declared one.
                        let e = if te.ty.sql_type() == ty.sql_type() && matches!(te.expr, Expr::Col(..)) {
                            te.expr.clone()
                        } else {
                            te.expr.clone().cast(&ty.sql_type())
                        };
                        (e, Some(n.as_str().to_string()))
                    })
                    .collect();
                Query::Select(Box::new(select))
            })
            .collect();
        // Inside the bodies of a recursive rule (a frame is open) every row ends in the recursive CTE, whose UNION
        // makes the rows a set: there the branches are a UNION ALL, which the CTE de-duplicates with the rest, instead
        // of a UNION de-duplicated once more on its own (the Debian closure's inlined `dep` rule grouped 325,000
        // rows for it, 25 ms of 70).
        let all = parts.len() > 1 && !ctx.rule_frames.borrow().is_empty();
        // A UNION's rows are distinct, so its columns are a key; a single branch is no UNION, and its rows are
        // distinct over the outputs only where the key analysis proves it (an inlined rule whose body has a variable
        // beyond its head yields one row per value of that variable: found by the differential tests).
        let key =
            if (parts.len() > 1 && !all) || (parts.len() == 1 && crate::keys::unique_over(&branches[0].alg, outputs)) {
                Some(outputs.to_vec())
            } else {
                None
            };
        let query = if parts.len() == 1 {
            parts.into_iter().next().unwrap_or(Query::Select(Box::default()))
        } else {
            Query::Union { all, parts }
        };
        let mut outer = Vec::new();
        query.outer_aliases(&mut outer);
        let lateral = !outer.is_empty();
        let alias = ctx.alias("o");
        let item = FromItem {
            source: TableSource::Subquery(Box::new(query)),
            alias: alias.clone(),
            kind: JoinKind::Inner,
            lateral,
            on: vec![],
        };
        self.alg.sources.push(Source {
            item,
            key,
            alt_key: None,
            vars: outputs.to_vec(),
            pinned: lateral,
            values: None,
        });
        for ((v, ty), n) in outputs.iter().zip(tys).zip(&names) {
            self.bind(ctx, v, TExpr::new(Expr::Col(alias.clone(), n.clone()), ty), form)?;
        }
        Ok(())
    }
}

/// The entity variable, attribute, values and first pattern of an `or` whose every branch is one pattern `[?e :a
/// c]` of the default source with the same `?e` and attribute (not reversed) and a constant value; None for any
/// other `or`.
#[allow(clippy::type_complexity)]
fn one_attribute_alternatives<'c>(
    ctx: &Ctx,
    branches: &'c [Vec<Clause>],
) -> Option<(&'c Term, &'c Term, Vec<&'c Value>, &'c Value)> {
    if branches.len() < 2 || ctx.relation().is_some() {
        return None;
    }
    let mut first: Option<(&Term, &Term, &Value)> = None;
    let mut values = Vec::new();
    for b in branches {
        let [c @ Clause::Pattern { terms, form }] = b.as_slice() else { return None };
        if crate::parse::clause_source(c).is_some() {
            return None;
        }
        let [e @ Term::Var(_), a @ Term::Const(Value::Keyword(k)), Term::Const(v)] = terms.as_slice() else {
            return None;
        };
        if k.name().starts_with('_') || first.is_some_and(|(e0, a0, _)| e0 != e || a0 != a) {
            return None;
        }
        first.get_or_insert((e, a, form));
        values.push(v);
    }
    first.map(|(e, a, form)| (e, a, values, form))
}

/// The variables a list of clauses mentions, as seen from outside (a nested `not-join`/`or-join`
/// shows only its join variables).
pub(crate) fn mentioned(clauses: &[Clause]) -> Vec<Var> {
    let mut out: Vec<Var> = Vec::new();
    let mut add = |v: &Var| {
        if !out.contains(v) {
            out.push(v.clone())
        }
    };
    for c in clauses {
        match c {
            Clause::Pattern { terms, .. } => terms.iter().for_each(|t| term_var(t).into_iter().for_each(&mut add)),
            Clause::Predicate(call) => call.args.iter().for_each(|t| term_var(t).into_iter().for_each(&mut add)),
            Clause::Function { call, binding } => {
                call.args.iter().for_each(|t| term_var(t).into_iter().for_each(&mut add));
                binding_vars(binding).into_iter().for_each(&mut add);
            }
            Clause::Not { join: Some(vars), .. } => vars.iter().for_each(&mut add),
            Clause::Not { join: None, clauses, .. } => mentioned(clauses).iter().for_each(&mut add),
            Clause::Or { join: Some(j), .. } => j.vars.iter().for_each(&mut add),
            Clause::Or { join: None, branches, .. } => {
                branches.iter().for_each(|b| mentioned(b).iter().for_each(&mut add))
            }
            Clause::RuleCall { form } => crate::rules::call_vars(form).iter().for_each(&mut add),
        }
    }
    out
}

fn term_var(t: &Term) -> Option<&Var> {
    match t {
        Term::Var(v) => Some(v),
        _ => None,
    }
}

fn binding_vars(b: &Binding) -> Vec<&Var> {
    b.vars()
}
