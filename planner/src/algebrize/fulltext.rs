//! Datomic's fulltext query function: `[(fulltext $ :attr ?search) [[?e ?v ?tx ?score]]]`.
//!
//! `:attr` is an attribute with `:db/fulltext true`; `?search` is a string constant or a variable bound to one
//! by `:in` (the search is analyzed when the query is compiled, with the store's analyzer, so its terms are the
//! index's: see [`crate::fulltext`] for the syntax and the BM25 score). The binding is a relation of at most four
//! positions (`_` for the unused): the entity, the matching value (a VARCHAR), the tx that asserted it and the
//! score (a DOUBLE, higher is better). Rows come unordered, one per matching datom; `:order (desc ?score)` and
//! `:limit` rank them.
//!
//! The index holds only the present (Datomic indexes only the current database value), so a query with
//! `as_of`, `since` or `history` that calls `fulltext` is refused. A query against a store that does not exist
//! yet (the empty database) matches nothing.

use super::{Scope, TExpr, VarBinding};
use crate::error::{show, PlanError};
use crate::fulltext::{parse_search, search_sql, Analyzer};
use crate::parse::{Binding, Call, Term};
use crate::source::Ctx;
use crate::sql::{Expr, TableSource};
use crate::types::{Constant, Ty};
use edn_format::Value;

impl Scope {
    /// `[(fulltext $ :attr ?search) [[?e ?v ?tx ?score]]]` (see the module docs).
    pub(crate) fn fulltext(&mut self, ctx: &Ctx, call: &Call, binding: &Binding) -> Result<(), PlanError> {
        let form = &call.form;
        let [Term::Src, Term::Const(attr), search] = call.args.as_slice() else {
            return Err(PlanError::syntax(
                form,
                "fulltext takes $, an attribute and a search: (fulltext $ :attr ?search)",
            ));
        };
        let Binding::Relation(vars) = binding else {
            return Err(PlanError::syntax(form, "fulltext binds a relation [[?e ?v ?tx ?score]]"));
        };
        if vars.len() > 4 {
            return Err(PlanError::syntax(form, "fulltext binds at most [[?e ?v ?tx ?score]]"));
        }
        let (attr, reverse) = self.attribute(ctx, attr, form)?;
        if reverse {
            return Err(PlanError::syntax(form, "fulltext takes an attribute, not a reverse attribute"));
        }
        if !attr.fulltext {
            return Err(PlanError::type_mismatch(form, format!("{} is not :db/fulltext", attr.ident)));
        }
        if ctx.opts.as_of.is_some() || ctx.opts.since.is_some() || ctx.opts.history {
            return Err(PlanError::unsupported(
                form,
                "fulltext searches only the present database (the index, as Datomic's, holds current values \
                 only): not with as_of, since or history",
            ));
        }
        let text = match search {
            Term::Const(Value::String(s)) => s.clone(),
            Term::Var(v) => match self.lookup(v) {
                Some(VarBinding::Const(Constant::String(s))) => s.clone(),
                Some(VarBinding::Const(c)) => {
                    return Err(PlanError::type_mismatch(form, format!("the search {v} is {c:?}, not a string")))
                }
                Some(_) => {
                    return Err(PlanError::unsupported(
                        form,
                        format!("the search {v} must be a string constant or a scalar input"),
                    ))
                }
                None => return Err(PlanError::unbound(&v.to_string(), form, "")),
            },
            other => {
                let shown = match other {
                    Term::Const(c) => show(c),
                    _ => "_".to_string(),
                };
                return Err(PlanError::type_mismatch(form, format!("the search {shown} is not a string")));
            }
        };
        let analyzer = Analyzer::new(ctx.schema.fulltext_language()).map_err(|m| PlanError::unsupported(form, m))?;
        let clauses = parse_search(&text, &analyzer);
        let need_value = vars.get(1).is_some_and(|v| v.is_some()) || vars.get(2).is_some_and(|v| v.is_some());
        let clauses = if ctx.opts.empty { Vec::new() } else { clauses };
        let sql = search_sql(ctx.store, attr.entid, attr.many, &clauses, need_value);
        let alias = ctx.alias("ft");
        let bound: Vec<_> = vars.iter().flatten().cloned().collect();
        // one row per matching datom: the entity names it for a cardinality-one attribute, entity and value
        // for cardinality many
        let key = match (vars.first().cloned().flatten(), vars.get(1).cloned().flatten(), attr.many) {
            (Some(e), _, false) => Some(vec![e]),
            (Some(e), Some(v), true) => Some(vec![e, v]),
            _ => None,
        };
        self.add_source(alias.clone(), TableSource::Raw(sql), key, bound);
        let cols = [("e", Ty::REF), ("v", Ty::STRING), ("tx", Ty::REF), ("score", Ty::DOUBLE)];
        for (var, (col, ty)) in vars.iter().zip(cols) {
            if let Some(var) = var {
                self.bind(ctx, var, TExpr::new(Expr::col(&alias, col), ty), form)?;
            }
        }
        Ok(())
    }
}
