//! Stage 2: the `:where` clauses, walked with the schema, become an [`Algebra`]: the FROM items
//! (one per data pattern, input relation, `or` or left-joined lookup), the filters, and for every
//! variable the SQL expression that binds it and its type (Mentat's "algebrizer").
//!
//! * Idents and keyword constants are resolved to entids here, from the in-memory schema: the
//!   emitted statement never looks them up.
//! * A variable's first binding is its primary binding; every later binding becomes an equality
//!   (a join). Scalar inputs stay constants and are inlined at each use; collection inputs become
//!   `IN (...)` filters when a data pattern binds the variable, else a VALUES list.
//! * Patterns whose constants cannot match the schema's types prune the query to an empty result
//!   ([`Algebra::empty`] says why), as Mentat does.
//! * Clauses run patterns first, then predicates, functions, `not` and `or` as soon as the
//!   variables they need are bound (Datomic requires this order in the text; we accept any order and
//!   report the variable that is never bound).

mod fulltext;
pub(crate) mod functions;
pub(crate) mod logic;
mod rules;
mod txlog;

use crate::error::{show, PlanError};
use crate::inputs::Inputs;
use crate::joins;
use crate::parse::{Clause, Term, Var};
use crate::schema::{Attribute, ValueType};
use crate::source::Ctx;
use crate::sql::{Expr, FromItem, Name, Query, Select, TableSource};
use crate::types::{literal, scalar_constant, Constant, Ty};
use edn_format::Value;
use std::collections::BTreeMap;

/// The bound plan of a `:where` (or of one `or`/`not` branch).
#[derive(Clone, Debug, Default)]
pub struct Algebra {
    pub sources: Vec<Source>,
    /// Conditions on the sources (joins, constants, predicates).
    pub filters: Vec<Expr>,
    /// Every variable bound in this scope.
    pub bindings: BTreeMap<Var, VarBinding>,
    /// Functional dependencies from computed bindings: these inputs determine that output.
    pub fds: Vec<(Vec<Var>, Var)>,
    /// Why the result is known to be empty, if it is.
    pub empty: Option<String>,
}

/// How a variable is bound.
#[derive(Clone, Debug)]
pub enum VarBinding {
    /// A column or computed expression.
    Expr(TExpr),
    /// A scalar input or `ground` constant, inlined at each use.
    Const(Constant),
    /// A collection input not yet placed (an `IN` list or a VALUES list).
    Pending(Vec<Constant>),
}

/// A typed SQL expression.
#[derive(Clone, Debug)]
pub struct TExpr {
    pub expr: Expr,
    pub ty: Ty,
    /// The type came from input constants and may be refined by the first pattern that binds the
    /// variable (a keyword input joined with a ref column becomes an entid).
    pub refinable: bool,
    /// For a value of the mixed fallback type (an unbound attribute's `v`, as text), the class of the attribute
    /// each row's value has ([`class_tag`]): the text "30" of a string and of a long are one text, and only this
    /// tells them apart when the value meets a typed one.
    pub tag: Option<Box<Expr>>,
}

impl TExpr {
    pub fn new(expr: Expr, ty: Ty) -> TExpr {
        TExpr { expr, ty, refinable: false, tag: None }
    }

    /// The condition that this value, when it is of the mixed fallback type with a tag, is of `other`'s class
    /// (Datomic's equality never makes a string equal a long or a keyword); None when there is nothing to check.
    pub(crate) fn same_class(&self, other: &Ty) -> Option<Expr> {
        let tag = self.tag.as_ref()?;
        if self.ty != Ty::Mixed || *other == Ty::Mixed {
            return None;
        }
        Some(Expr::eq((**tag).clone(), Expr::str(class_tag(other))))
    }
}

/// The tag of a type's class, as the mixed fallback's rows carry it ([`TExpr::tag`]).
pub(crate) fn class_tag(ty: &Ty) -> &'static str {
    match ty.class() {
        crate::types::Class::Number => "number",
        crate::types::Class::Text => "text",
        crate::types::Class::Keyword => "keyword",
        crate::types::Class::Symbol => "symbol",
        crate::types::Class::Boolean => "boolean",
        crate::types::Class::Instant => "instant",
        crate::types::Class::Uuid => "uuid",
        crate::types::Class::Bytes => "bytes",
        crate::types::Class::Tuple => "tuple",
        crate::types::Class::Any => "any",
    }
}

/// One FROM item with what the key analysis needs.
#[derive(Clone, Debug)]
pub struct Source {
    pub item: FromItem,
    /// Given these variables, at most one row of this source matches (None: no such proof).
    pub key: Option<Vec<Var>>,
    /// A second key, where the source has one: the value of a `:db/unique` attribute determines its datom too
    /// (Datomic: a unique value belongs to at most one entity at any point in time).
    pub alt_key: Option<Vec<Var>>,
    /// The variables bound by this source's columns.
    pub vars: Vec<Var>,
    /// Must stay after the items it references (LEFT and LATERAL joins).
    pub pinned: bool,
    /// Input rows, typed when the scope is finished.
    pub values: Option<ValuesInput>,
}

/// Constant rows of a VALUES source, one column per variable.
#[derive(Clone, Debug)]
pub struct ValuesInput {
    pub vars: Vec<Var>,
    pub rows: Vec<Vec<Constant>>,
}

/// A scope: the top level, or an `or`/`not` branch that sees some outer bindings.
pub(crate) struct Scope {
    pub alg: Algebra,
    /// Bindings visible from the enclosing scope.
    pub(crate) outer: BTreeMap<Var, VarBinding>,
    /// Whether a local binding of an outer variable adds an equality with the outer binding
    /// (`not`, whose body is a correlated NOT EXISTS) or stays local (`or`, whose outputs are joined
    /// by the caller).
    correlate: bool,
}

/// Algebrizes the `:where` clauses of a query, given its inputs.
pub fn algebrize(ctx: &Ctx, clauses: &[Clause], inputs: &Inputs) -> Result<Algebra, PlanError> {
    let mut scope = Scope { alg: Algebra::default(), outer: BTreeMap::new(), correlate: false };
    let no_form = Value::Vector(vec![]);
    for (v, c) in &inputs.scalars {
        scope.bind_const(ctx, v, c.clone(), &no_form)?;
    }
    for (v, list) in &inputs.collections {
        if scope.is_bound(v) {
            scope.add_values(ctx, vec![Some(v.clone())], list.iter().map(|c| vec![c.clone()]).collect())?;
        } else {
            scope.alg.bindings.insert(v.clone(), VarBinding::Pending(list.clone()));
        }
    }
    for r in &inputs.relations {
        scope.add_values(ctx, r.vars.clone(), r.rows.clone())?;
    }
    scope.run(ctx, clauses)?;
    Ok(scope.alg)
}

impl Scope {
    pub(crate) fn child(outer: BTreeMap<Var, VarBinding>, correlate: bool) -> Scope {
        Scope { alg: Algebra::default(), outer, correlate }
    }

    /// The binding of a variable visible here (local first, then outer).
    pub(crate) fn lookup(&self, v: &Var) -> Option<&VarBinding> {
        self.alg.bindings.get(v).or_else(|| self.outer.get(v))
    }

    pub(crate) fn is_bound(&self, v: &Var) -> bool {
        self.lookup(v).is_some()
    }

    /// Every binding visible here.
    pub(crate) fn visible(&self) -> BTreeMap<Var, VarBinding> {
        let mut all = self.outer.clone();
        all.extend(self.alg.bindings.iter().map(|(k, v)| (k.clone(), v.clone())));
        all
    }

    pub(crate) fn prune(&mut self, reason: String) {
        if self.alg.empty.is_none() {
            self.alg.empty = Some(reason);
        }
    }

    /// Runs clauses: patterns first, then the others as their inputs become bound.
    pub(crate) fn run(&mut self, ctx: &Ctx, clauses: &[Clause]) -> Result<(), PlanError> {
        let (patterns, mut rest): (Vec<&Clause>, Vec<&Clause>) =
            clauses.iter().partition(|c| matches!(c, Clause::Pattern { .. }));
        for p in patterns {
            self.clause(ctx, p)?;
        }
        self.place_pending(ctx)?;
        while !rest.is_empty() {
            // Rule calls after the other ready clauses (so that their arguments can seed recursion), `or` last.
            let ready = rest.iter().position(|c| {
                !matches!(c, Clause::Or { .. } | Clause::RuleCall { .. }) && self.missing_var(ctx, c).is_none()
            });
            let ready = ready.or_else(|| {
                rest.iter().position(|c| matches!(c, Clause::RuleCall { .. }) && self.missing_var(ctx, c).is_none())
            });
            let ready = ready.or_else(|| rest.iter().position(|c| self.missing_var(ctx, c).is_none()));
            match ready {
                Some(i) => {
                    let c = rest.remove(i);
                    self.clause(ctx, c)?;
                    self.place_pending(ctx)?;
                }
                None => {
                    let c = rest[0];
                    let (var, why) = self.missing_var(ctx, c).unwrap_or((Var(String::new()), ""));
                    return Err(PlanError::unbound(&var.0, clause_form(c), why));
                }
            }
        }
        self.finish(ctx)
    }

    /// One clause, read from the source it names (see [`crate::parse::clause_source`]) or else from `ctx`'s.
    fn clause(&mut self, ctx: &Ctx, c: &Clause) -> Result<(), PlanError> {
        let Some(name) = crate::parse::clause_source(c) else {
            return self.clause_in(ctx, c);
        };
        let sourced = ctx.with_source(name, clause_form(c))?;
        if sourced.relation().is_some() && matches!(c, Clause::Predicate(_) | Clause::Function { .. }) {
            return Err(PlanError::Source {
                var: sourced.source.clone(),
                form: show(clause_form(c)),
                message: "this function reads a database, and the source is a relation given in the inputs".into(),
            });
        }
        self.clause_in(&sourced, c)
    }

    fn clause_in(&mut self, ctx: &Ctx, c: &Clause) -> Result<(), PlanError> {
        match c {
            Clause::Pattern { terms, form } => self.pattern(ctx, terms, form),
            Clause::Predicate(call) => self.predicate(ctx, call),
            Clause::Function { call, binding } => self.function(ctx, call, binding),
            Clause::Not { join, clauses, form } => self.not(ctx, join.as_deref(), clauses, form),
            Clause::Or { join, branches, form } => self.or(ctx, join.as_ref(), branches, form),
            Clause::RuleCall { form } => self.rule_call(ctx, form),
        }
    }

    /// The first variable a clause needs bound that is not, with the rule that needs it.
    fn missing_var(&self, ctx: &Ctx, c: &Clause) -> Option<(Var, &'static str)> {
        let needed: Vec<Var> = match c {
            Clause::Pattern { .. } => vec![],
            Clause::RuleCall { form } => rules::required_vars(ctx, form),
            Clause::Predicate(call) | Clause::Function { call, .. } => call_vars(call),
            Clause::Not { join: None, clauses, .. } => logic::mentioned(clauses),
            Clause::Not { join: Some(vars), .. } => vars.clone(),
            Clause::Or { join: Some(j), .. } => j.required.clone(),
            Clause::Or { join: None, .. } => vec![],
        };
        let why = match c {
            Clause::Not { join: None, .. } => "not requires all its variables to be bound; use not-join for local ones",
            Clause::Not { .. } => "not-join requires its join variables to be bound",
            Clause::Or { .. } => "or-join requires its bracketed variables to be bound",
            Clause::RuleCall { .. } => "the rule's bracketed (required) arguments must be bound where it is called",
            _ => "function and predicate arguments must be bound",
        };
        needed.into_iter().find(|v| !self.is_bound(v)).map(|v| (v, why))
    }

    /// Adds a FROM item.
    pub(crate) fn add_source(&mut self, alias: Name, source: TableSource, key: Option<Vec<Var>>, vars: Vec<Var>) {
        let item = FromItem::inner(source, &alias);
        self.alg.sources.push(Source { item, key, alt_key: None, vars, pinned: false, values: None });
    }

    /// Binds a variable to a column (or other expression) of a source: the first binding is
    /// primary, later ones add equalities; constants and pending inputs become filters.
    pub(crate) fn bind(&mut self, ctx: &Ctx, var: &Var, bound: TExpr, form: &Value) -> Result<(), PlanError> {
        let existing = match self.alg.bindings.get(var) {
            Some(b) => Some(b.clone()),
            None if self.correlate => self.outer.get(var).cloned(),
            None => None,
        };
        let local = self.alg.bindings.contains_key(var);
        match existing {
            None => {}
            Some(VarBinding::Const(c)) => match coerce(ctx, &c, &bound.ty) {
                Some(lit) => {
                    self.alg.filters.push(Expr::eq(bound.expr.clone(), lit));
                    if let Some(check) = bound.same_class(&c.natural_type()) {
                        self.alg.filters.push(check);
                    }
                }
                None => {
                    misfit(ctx, &c, &bound.ty, Some(var))?;
                    self.prune(format!("{var} is {} but must be {}", show_constant(&c), bound.ty.name()))
                }
            },
            Some(VarBinding::Pending(list)) => {
                // distinct values in input order; a set of their debug text keeps this linear (a `Vec::contains`
                // made a collection input of 16,000 values take 3.4 s to compile)
                let mut lits: Vec<Expr> = Vec::new();
                // lookup refs' values by attribute, in input order: one semi join each (an `IN` of one scalar
                // subquery per lookup ref ran each subquery per row: 368 ms for 100 of them at scale m)
                let mut lookups: Vec<(crate::schema::Entid, Vec<Expr>)> = Vec::new();
                let mut seen = std::collections::HashSet::new();
                // `misfit` only where a value does not coerce: it raises for no value that coerces
                for c in list.iter() {
                    if let (Ty::Value(ValueType::Ref), Constant::LookupRef { attr, value }) = (&bound.ty, c) {
                        let a = ctx.default_attribute_here(*attr);
                        let Some(v) = a.and_then(|a| coerce(ctx, value, &crate::types::attr_ty(a))) else {
                            misfit(ctx, c, &bound.ty, Some(var))?;
                            continue;
                        };
                        if seen.insert(format!("{attr} {v:?}")) {
                            match lookups.iter_mut().find(|(x, _)| x == attr) {
                                Some((_, vs)) => vs.push(v),
                                None => lookups.push((*attr, vec![v])),
                            }
                        }
                    } else if let Some(lit) = coerce(ctx, c, &bound.ty) {
                        // a mixed value matches a constant of its own class only: the pair (tag, text)
                        let lit = match bound.same_class(&c.natural_type()) {
                            Some(_) => Expr::Struct(vec![
                                (Name::new("c"), Expr::str(class_tag(&c.natural_type()))),
                                (Name::new("v"), lit),
                            ]),
                            None => lit,
                        };
                        if seen.insert(format!("{lit:?}")) {
                            lits.push(lit);
                        }
                    } else {
                        misfit(ctx, c, &bound.ty, Some(var))?;
                    }
                }
                let one_of = |x: Expr, mut vs: Vec<Expr>| match vs.len() {
                    1 => Expr::eq(x, vs.remove(0)),
                    _ => Expr::InList(Box::new(x), vs),
                };
                let mut alternatives = Vec::new();
                if !lits.is_empty() {
                    let x = match &bound.tag {
                        Some(tag) if bound.ty == Ty::Mixed => {
                            Expr::Struct(vec![(Name::new("c"), (**tag).clone()), (Name::new("v"), bound.expr.clone())])
                        }
                        _ => bound.expr.clone(),
                    };
                    alternatives.push(one_of(x, lits));
                }
                for (attr, values) in lookups {
                    let lr = ctx.alias("lr");
                    let q = Select {
                        items: vec![(Expr::int(1), None)],
                        from: vec![FromItem::inner(ctx.datoms(attr), &lr)],
                        filters: vec![
                            Expr::eq(Expr::col(&lr, "e"), bound.expr.clone()),
                            one_of(Expr::col(&lr, "v"), values),
                        ],
                        ..Default::default()
                    };
                    alternatives.push(Expr::Exists(Box::new(Query::Select(Box::new(q)))));
                }
                match alternatives.len() {
                    0 => self.prune(format!("no input value of {var} is {}", bound.ty.a_name())),
                    1 => self.alg.filters.push(alternatives.remove(0)),
                    _ => self.alg.filters.push(Expr::Or(alternatives)),
                }
            }
            Some(VarBinding::Expr(prev)) => {
                let joined = match (prev.refinable, bound.refinable) {
                    (true, _) => Some(bound.ty.clone()),
                    (false, true) => Some(prev.ty.clone()),
                    (false, false) => prev.ty.join(&bound.ty),
                };
                match joined {
                    Some(ty) => {
                        // A refinable side (input values, typed when the scope finishes) takes the joined type.
                        let retype = |t: &TExpr| {
                            if t.refinable {
                                TExpr { expr: t.expr.clone(), ty: ty.clone(), refinable: true, tag: t.tag.clone() }
                            } else {
                                t.clone()
                            }
                        };
                        self.alg.filters.push(equate(&retype(&prev), &retype(&bound)));
                        for check in [prev.same_class(&bound.ty), bound.same_class(&prev.ty)].into_iter().flatten() {
                            self.alg.filters.push(check);
                        }
                        if local {
                            let refined =
                                TExpr { expr: prev.expr.clone(), ty, refinable: false, tag: prev.tag.clone() };
                            self.alg.bindings.insert(var.clone(), VarBinding::Expr(refined));
                        }
                    }
                    None => self.prune(format!(
                        "{var} cannot be both {} and {} in {}",
                        prev.ty.name(),
                        bound.ty.name(),
                        show(form)
                    )),
                }
                if local {
                    return Ok(());
                }
            }
        }
        self.alg.bindings.insert(var.clone(), VarBinding::Expr(bound));
        Ok(())
    }

    /// A data pattern `[e a v tx added]`.
    fn pattern(&mut self, ctx: &Ctx, terms: &[Term], form: &Value) -> Result<(), PlanError> {
        if let Some(rel) = ctx.relation() {
            return self.relation_pattern(ctx, &rel.rows, terms, form);
        }
        let mut t: Vec<Term> = terms.to_vec();
        t.resize(5, Term::Blank);
        if t[4] != Term::Blank && !ctx.history() {
            return Err(PlanError::unsupported(form, "the added position of a 5-place pattern needs a history query"));
        }
        let attr = match &t[1] {
            Term::Const(c) => Some(self.attribute(ctx, c, form)?),
            Term::Var(v) => match self.lookup(v) {
                Some(VarBinding::Const(c)) => {
                    let c = constant_value(c);
                    Some(self.attribute(ctx, &c, form)?)
                }
                _ => None,
            },
            Term::Blank => None,
            Term::Src => return Err(PlanError::syntax(form, "a source cannot be an attribute")),
        };
        match attr {
            Some((attr, reverse)) => {
                if reverse {
                    if attr.value_type != ValueType::Ref {
                        return Err(PlanError::type_mismatch(
                            form,
                            format!("reverse attribute of {}, which is not a ref", attr.ident),
                        ));
                    }
                    t.swap(0, 2);
                }
                self.attribute_pattern(ctx, &attr, &t, form)
            }
            None => self.any_attribute_pattern(ctx, &t, form),
        }
    }

    /// Resolves an attribute constant: `(attribute, reversed)`.
    fn attribute(&self, ctx: &Ctx, c: &Value, form: &Value) -> Result<(Attribute, bool), PlanError> {
        match c {
            Value::Keyword(k) => {
                let (ident, reverse) = match (k.namespace(), k.name().strip_prefix('_')) {
                    (Some(ns), Some(name)) => (format!(":{ns}/{name}"), true),
                    _ => (show(c), false),
                };
                match ctx.schema.attribute_by_ident(&ident) {
                    Some(a) => Ok((a.clone(), reverse)),
                    None => Err(unknown_attribute(ctx, show(c), form)),
                }
            }
            Value::Integer(i) => match ctx.schema.attribute(*i) {
                Some(a) => Ok((a.clone(), false)),
                None => Err(unknown_attribute(ctx, i.to_string(), form)),
            },
            other => Err(PlanError::syntax(form, format!("{} is not an attribute", show(other)))),
        }
    }

    fn attribute_pattern(&mut self, ctx: &Ctx, attr: &Attribute, t: &[Term], form: &Value) -> Result<(), PlanError> {
        let alias = ctx.alias("t");
        // Term positions 0, 2, 3, 4 are the columns e, v, tx, added (1 is the attribute).
        let mut cols: Vec<(usize, &str, Ty)> =
            vec![(0, "e", Ty::REF), (2, "v", crate::types::attr_ty(attr)), (3, "tx", Ty::REF)];
        if ctx.history() {
            cols.push((4, "added", Ty::BOOLEAN));
        }
        let key_cols: &[usize] = match (ctx.history(), attr.many) {
            (true, _) => &[0, 2, 3, 4],
            (false, true) => &[0, 2],
            (false, false) => &[0],
        };
        let mut value_terms = t.to_vec();
        value_terms[1] = Term::Blank;
        self.add_source(alias.clone(), ctx.datoms(attr.entid), key_of(t, key_cols), vars_of(&value_terms));
        // a unique attribute's value names one entity in every state (current, as-of, since), not in history
        if attr.unique.is_some() && !ctx.history() {
            if let Some(s) = self.alg.sources.last_mut() {
                s.alt_key = key_of(t, &[2]);
            }
        }
        for (i, col, ty) in cols {
            self.bind_term(ctx, &t[i], TExpr::new(Expr::col(&alias, col), ty), form)?;
        }
        Ok(())
    }

    /// `[?e ?a ?v]` with the attribute unknown: a UNION ALL over the attributes whose type can match.
    fn any_attribute_pattern(&mut self, ctx: &Ctx, t: &[Term], form: &Value) -> Result<(), PlanError> {
        let v_constraint: Option<Ty> = match &t[2] {
            Term::Var(v) => match self.lookup(v) {
                Some(VarBinding::Expr(te)) if !te.refinable => Some(te.ty.clone()),
                _ => None,
            },
            _ => None,
        };
        let v_const = match &t[2] {
            Term::Const(c) => Some(self.constant(ctx, c, form)?),
            _ => None,
        };
        let attrs: Vec<&Attribute> = ctx
            .schema
            .attributes()
            .into_iter()
            .filter(|a| v_constraint.as_ref().is_none_or(|ty| ty.join(&crate::types::attr_ty(a)).is_some()))
            .filter(|a| v_const.as_ref().is_none_or(|c| coerce(ctx, c, &crate::types::attr_ty(a)).is_some()))
            .collect();
        if attrs.is_empty() {
            self.prune(format!("no attribute can match {}", show(form)));
            return self.bind_blank_union(ctx, t, form);
        }
        let first = crate::types::attr_ty(attrs[0]);
        let v_ty = if attrs.iter().all(|a| crate::types::attr_ty(a) == first) {
            first
        } else if attrs.iter().all(|a| a.sql_type() == first.sql_type()) {
            if first.sql_type() == "BIGINT" {
                Ty::REF
            } else {
                Ty::Mixed
            }
        } else {
            Ty::Mixed
        };
        let cast = attrs.iter().any(|a| a.sql_type() != v_ty.sql_type());
        let d = Name::new("d");
        let parts = attrs
            .iter()
            .map(|a| {
                let v = if cast { Expr::col(&d, "v").cast("VARCHAR") } else { Expr::col(&d, "v") };
                let mut items = vec![
                    (Expr::col(&d, "e"), Some("e".to_string())),
                    (Expr::int(a.entid).cast("BIGINT"), Some("a".into())),
                    (v, Some("v".into())),
                    (Expr::col(&d, "tx"), Some("tx".into())),
                ];
                if v_ty == Ty::Mixed {
                    items.push((Expr::str(class_tag(&crate::types::attr_ty(a))), Some("vc".into())));
                }
                if ctx.history() {
                    items.push((Expr::col(&d, "added"), Some("added".into())));
                }
                let from = vec![FromItem::inner(ctx.datoms(a.entid), &d)];
                // A constant value is compared in each attribute's own type (a keyword is an entid for a ref
                // attribute and text for a keyword attribute), inside the part, where the scan can use it.
                let filters = v_const
                    .as_ref()
                    .and_then(|c| coerce(ctx, c, &crate::types::attr_ty(a)))
                    .map(|lit| vec![Expr::eq(Expr::col(&d, "v"), lit)])
                    .unwrap_or_default();
                Query::Select(Box::new(Select { items, from, filters, ..Default::default() }))
            })
            .collect();
        let alias = ctx.alias("t");
        let union = TableSource::Subquery(Box::new(Query::Union { all: true, parts }));
        let key_cols: &[usize] = if ctx.history() { &[0, 1, 2, 3, 4] } else { &[0, 1, 2] };
        self.add_source(alias.clone(), union, key_of(t, key_cols), vars_of(t));
        let cols = [("e", Ty::REF), ("a", Ty::REF), ("v", v_ty), ("tx", Ty::REF), ("added", Ty::BOOLEAN)];
        for (i, (col, ty)) in cols.into_iter().enumerate() {
            if (col == "added" && !ctx.history()) || (col == "v" && v_const.is_some()) {
                continue;
            }
            let mut te = TExpr::new(Expr::col(&alias, col), ty);
            if col == "v" && te.ty == Ty::Mixed {
                te.tag = Some(Box::new(Expr::col(&alias, "vc")));
            }
            self.bind_term(ctx, &t[i], te, form)?;
        }
        Ok(())
    }

    /// A pattern over a relation source (a collection of tuples given in the inputs): term `i` matches position `i`
    /// of each tuple, as Datomic matches a collection given as a data source. Constants select tuples here, at
    /// compile time (equal as EDN values, so `1` is not `1.0`), tuples shorter than the pattern match nothing,
    /// and the variables become the columns of a VALUES source like a relation input's (typed by their uses).
    fn relation_pattern(
        &mut self,
        ctx: &Ctx,
        rows: &[Vec<Constant>],
        terms: &[Term],
        form: &Value,
    ) -> Result<(), PlanError> {
        let mut wanted: Vec<(usize, Constant)> = Vec::new();
        let mut vars: Vec<Option<Var>> = Vec::new();
        for (i, t) in terms.iter().enumerate() {
            match t {
                Term::Var(v) => vars.push(Some(v.clone())),
                Term::Blank => vars.push(None),
                Term::Const(c) => {
                    wanted.push((i, crate::inputs::plain_constant(c)?));
                    vars.push(None);
                }
                Term::Src => return Err(PlanError::syntax(form, "a source variable inside a pattern")),
            }
        }
        let matching: Vec<Vec<Constant>> = rows
            .iter()
            .filter(|r| r.len() >= terms.len() && wanted.iter().all(|(i, c)| r[*i] == *c))
            .map(|r| r[..terms.len()].to_vec())
            .collect();
        if vars.iter().all(Option::is_none) {
            // nothing to bind: the pattern holds or the scope is empty
            if matching.is_empty() {
                self.prune(format!("no tuple of {} matches {}", ctx.source, show(form)));
            }
            return Ok(());
        }
        if matching.is_empty() {
            self.prune(format!("no tuple of {} matches {}", ctx.source, show(form)));
        }
        // one SQL column has one type: a position bound to a variable must hold values of one type
        for (i, _) in vars.iter().enumerate().filter(|(_, v)| v.is_some()) {
            let mut tys = matching.iter().map(|r| r[i].natural_type());
            if let Some(first) = tys.next() {
                if let Some(other) = tys.find(|t| *t != first) {
                    return Err(PlanError::Source {
                        var: ctx.source.clone(),
                        form: show(form),
                        message: format!(
                            "position {i} of the matching tuples holds both {} and {}; a variable takes values of one type",
                            first.a_name(),
                            other.a_name()
                        ),
                    });
                }
            }
        }
        self.add_values(ctx, vars, matching)
    }

    /// Binds the variables of a pruned unbound-attribute pattern to typed NULLs so that projection
    /// still has a typed column.
    fn bind_blank_union(&mut self, ctx: &Ctx, t: &[Term], form: &Value) -> Result<(), PlanError> {
        let tys = [Ty::REF, Ty::REF, Ty::Mixed, Ty::REF, Ty::BOOLEAN];
        for (term, ty) in t.iter().zip(tys) {
            if let Term::Var(v) = term {
                if !self.is_bound(v) {
                    let null = Expr::Lit(crate::sql::Lit::Null).cast(&ty.sql_type());
                    self.bind(ctx, v, TExpr::new(null, ty), form)?;
                }
            }
        }
        Ok(())
    }

    /// Binds one pattern position.
    fn bind_term(&mut self, ctx: &Ctx, term: &Term, col: TExpr, form: &Value) -> Result<(), PlanError> {
        match term {
            Term::Blank => Ok(()),
            Term::Var(v) => self.bind(ctx, v, col, form),
            Term::Const(c) => {
                let c = self.constant(ctx, c, form)?;
                match coerce(ctx, &c, &col.ty) {
                    Some(lit) => self.alg.filters.push(Expr::eq(col.expr, lit)),
                    None => {
                        misfit(ctx, &c, &col.ty, None)?;
                        self.prune(format!("{} cannot be {} in {}", show_constant(&c), col.ty.a_name(), show(form)))
                    }
                }
                Ok(())
            }
            Term::Src => Err(PlanError::syntax(form, "a source variable inside a pattern")),
        }
    }

    /// Reads a constant, including lookup refs `[:unique/attr value]`.
    pub(crate) fn constant(&self, ctx: &Ctx, v: &Value, form: &Value) -> Result<Constant, PlanError> {
        read_constant(ctx, v, form)
    }

    /// Places collection inputs that no pattern bound: each becomes a one-column VALUES source.
    fn place_pending(&mut self, ctx: &Ctx) -> Result<(), PlanError> {
        let pending: Vec<(Var, Vec<Constant>)> = self
            .alg
            .bindings
            .iter()
            .filter_map(|(v, b)| match b {
                VarBinding::Pending(list) => Some((v.clone(), list.clone())),
                _ => None,
            })
            .collect();
        for (var, list) in pending {
            self.alg.bindings.remove(&var);
            self.add_values(ctx, vec![Some(var)], list.into_iter().map(|c| vec![c]).collect())?;
        }
        Ok(())
    }

    /// Adds a VALUES source binding these variables (`None` columns are `_` and dropped). Rows are
    /// deduplicated (inputs are sets) and typed when the scope finishes.
    pub(crate) fn add_values(
        &mut self,
        ctx: &Ctx,
        vars: Vec<Option<Var>>,
        rows: Vec<Vec<Constant>>,
    ) -> Result<(), PlanError> {
        let keep: Vec<usize> = (0..vars.len()).filter(|i| vars[*i].is_some()).collect();
        let vars: Vec<Var> = vars.into_iter().flatten().collect();
        let mut kept: Vec<Vec<Constant>> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for row in rows {
            let row: Vec<Constant> = keep.iter().filter_map(|i| row.get(*i).cloned()).collect();
            if seen.insert(format!("{row:?}")) {
                kept.push(row);
            }
        }
        if kept.is_empty() {
            self.prune(format!(
                "the input for {} is empty",
                vars.iter().map(|v| v.0.clone()).collect::<Vec<_>>().join(" ")
            ));
        }
        let alias = ctx.alias("in");
        let columns: Vec<Name> = (0..vars.len()).map(|i| Name::new(&format!("c{i}"))).collect();
        let values = ValuesInput { vars: vars.clone(), rows: kept };
        let item = FromItem::inner(TableSource::Values { rows: vec![], columns: columns.clone() }, &alias);
        self.alg.sources.push(Source {
            item,
            key: Some(vars.clone()),
            alt_key: None,
            vars: vars.clone(),
            pinned: false,
            values: Some(values),
        });
        for (i, var) in vars.iter().enumerate() {
            let ty = self.values_column_type(i);
            let te = TExpr { expr: Expr::Col(alias.clone(), columns[i].clone()), ty, refinable: true, tag: None };
            // A var bound both by an earlier clause and by these values joins as usual.
            self.bind(ctx, var, te, &Value::Vector(vec![]))?;
        }
        Ok(())
    }

    /// The natural type of column `i` of the last VALUES source: the first row's constant's, or a double when the
    /// column holds both longs and doubles (Clojure compares 1 and 2.5 as numbers).
    fn values_column_type(&self, i: usize) -> Ty {
        let Some(rows) = self.alg.sources.last().and_then(|s| s.values.as_ref()).map(|v| &v.rows) else {
            return Ty::Mixed;
        };
        let column = || rows.iter().filter_map(|r| r.get(i));
        let number = |c: &Constant| matches!(c, Constant::Long(_) | Constant::Double(_));
        if column().all(number) && column().any(|c| matches!(c, Constant::Double(_))) {
            return Ty::DOUBLE;
        }
        column().next().map(Constant::natural_type).unwrap_or(Ty::Mixed)
    }

    /// Types the VALUES rows with the final types of their variables.
    pub(crate) fn finish(&mut self, ctx: &Ctx) -> Result<(), PlanError> {
        for i in 0..self.alg.sources.len() {
            let Some(values) = self.alg.sources[i].values.take() else {
                continue;
            };
            let tys: Vec<Ty> = values
                .vars
                .iter()
                .map(|v| match self.alg.bindings.get(v) {
                    Some(VarBinding::Expr(te)) => te.ty.clone(),
                    _ => Ty::Mixed,
                })
                .collect();
            let mut rows: Vec<Vec<Expr>> = Vec::new();
            for row in &values.rows {
                let typed: Option<Vec<Expr>> = row.iter().zip(&tys).map(|(c, ty)| coerce(ctx, c, ty)).collect();
                match typed {
                    Some(r) => rows.push(r),
                    None => {
                        for ((c, ty), v) in row.iter().zip(&tys).zip(&values.vars) {
                            misfit(ctx, c, ty, Some(v))?;
                        }
                        // the first value that does not fit the type the first row gave its variable
                        let misfit = row
                            .iter()
                            .zip(&tys)
                            .zip(&values.vars)
                            .map(|((c, ty), v)| (c, ty, v))
                            .find(|(c, ty, _)| coerce(ctx, c, ty).is_none());
                        let Some((c, ty, v)) = misfit else { continue };
                        return Err(PlanError::BadInput {
                            form: show_constant(c),
                            message: format!(
                                "given for {v}, it is {}, where the first of its values made {v} {}",
                                c.natural_type().a_name(),
                                ty.a_name()
                            ),
                        });
                    }
                }
            }
            // An empty input (the scope is pruned already) still needs one row for valid SQL: typed NULLs,
            // which the pruned scope's `WHERE false` discards.
            if rows.is_empty() {
                rows.push(tys.iter().map(|_| Expr::Lit(crate::sql::Lit::Null)).collect());
            }
            // DuckDB types a VALUES column from its rows: casting the first row pins the declared type.
            if let Some(first) = rows.first_mut() {
                for (e, ty) in first.iter_mut().zip(&tys) {
                    *e = e.clone().cast(&ty.sql_type());
                }
            }
            if let TableSource::Values { rows: r, .. } = &mut self.alg.sources[i].item.source {
                *r = rows;
            }
        }
        Ok(())
    }
}

/// An attribute unknown to the schema of `ctx`'s source: [`PlanError::UnknownAttribute`] for the default source
/// `$`, else [`PlanError::Source`] naming the source variable and its store.
fn unknown_attribute(ctx: &Ctx, ident: String, form: &Value) -> PlanError {
    if ctx.source == "$" {
        return PlanError::UnknownAttribute { ident, form: show(form), context: String::new() };
    }
    PlanError::Source {
        var: ctx.source.clone(),
        form: show(form),
        message: format!("unknown attribute {ident} in the schema of {}", ctx.describe()),
    }
}

/// The equality of two bindings of one variable; the mixed fallback compares as text, and a fixed tuple compared
/// with a homogeneous one as a list.
fn equate(a: &TExpr, b: &TExpr) -> Expr {
    let text = |t: &TExpr, other: &TExpr| {
        if let (Ty::Tuple(ts), Ty::List(_)) = (&t.ty, &other.ty) {
            crate::types::as_list(t.expr.clone(), ts.len())
        } else if other.ty == Ty::Mixed && t.ty.sql_type() != "VARCHAR" {
            t.expr.clone().cast("VARCHAR")
        } else {
            t.expr.clone()
        }
    };
    Expr::eq(text(a, b), text(b, a))
}

fn vars_of(t: &[Term]) -> Vec<Var> {
    t.iter()
        .filter_map(|x| match x {
            Term::Var(v) => Some(v.clone()),
            _ => None,
        })
        .collect()
}

/// The key variables of a source from the terms at its key positions: constants are fixed, `_`
/// means no key.
fn key_of(t: &[Term], cols: &[usize]) -> Option<Vec<Var>> {
    let mut key = Vec::new();
    for i in cols {
        match &t[*i] {
            Term::Var(v) => key.push(v.clone()),
            Term::Const(_) => {}
            Term::Blank | Term::Src => return None,
        }
    }
    Some(key)
}

fn call_vars(call: &crate::parse::Call) -> Vec<Var> {
    call.args
        .iter()
        .filter_map(|a| match a {
            Term::Var(v) => Some(v.clone()),
            _ => None,
        })
        .collect()
}

fn clause_form(c: &Clause) -> &Value {
    match c {
        Clause::Pattern { form, .. }
        | Clause::Not { form, .. }
        | Clause::Or { form, .. }
        | Clause::RuleCall { form } => form,
        Clause::Predicate(call) | Clause::Function { call, .. } => &call.form,
    }
}

/// Reads an EDN constant. A two-element vector whose first element names an attribute is a lookup ref (an error
/// when the attribute is not unique), which stands for the entity in an entity position; any other vector is a
/// tuple (Datomic's tuple value, a STRUCT), as in `[(ground [1 2]) [?a ?b]]` or `:in [?t ...]` with `[[1 2] [3 4]]`.
pub(crate) fn read_constant(ctx: &Ctx, v: &Value, form: &Value) -> Result<Constant, PlanError> {
    match v {
        Value::Vector(items) => match items.as_slice() {
            [Value::Keyword(_), value] if ctx.schema.attribute_by_ident(&show(&items[0])).is_some() => {
                let ident = show(&items[0]);
                let attr = ctx.schema.attribute_by_ident(&ident).ok_or_else(|| PlanError::UnknownAttribute {
                    ident: ident.clone(),
                    form: show(form),
                    context: String::new(),
                })?;
                if attr.unique.is_none() {
                    return Err(PlanError::syntax(
                        v,
                        format!("a lookup ref's attribute must be :db/unique, {ident} is not unique"),
                    ));
                }
                // A lookup ref constant holds an entid of `$`'s schema (see `coerce`), so one is read only there
                if !ctx.reads_default() {
                    return Err(PlanError::Source {
                        var: ctx.source.clone(),
                        form: show(form),
                        message: format!(
                            "a lookup ref {} in a clause of another source than $ is not supported: bind the entity \
                             with a pattern such as [{} ?e {ident} ...], or give the lookup ref as an input",
                            show(v),
                            ctx.source
                        ),
                    });
                }
                let value = read_constant(ctx, value, form)?;
                Ok(Constant::LookupRef { attr: attr.entid, value: Box::new(value) })
            }
            [] => Err(PlanError::syntax(v, "an empty vector is neither a lookup ref nor a tuple")),
            items => Ok(Constant::Tuple(items.iter().map(|i| read_constant(ctx, i, form)).collect::<Result<_, _>>()?)),
        },
        other => scalar_constant(other),
    }
}

/// The SQL literal (or lookup subquery) of a constant in a position of type `ty`, or None when the
/// constant can never equal a value of that type.
pub(crate) fn coerce(ctx: &Ctx, c: &Constant, ty: &Ty) -> Option<Expr> {
    use ValueType as T;
    match (ty, c) {
        (Ty::Value(T::Ref), Constant::Long(i)) => Some(Expr::int(*i)),
        (Ty::Value(T::Ref), Constant::Keyword(k)) => ctx.schema.entid(k).map(Expr::int),
        (Ty::Value(T::Ref), Constant::LookupRef { attr, value }) => {
            // the lookup ref was read against `$` (inputs included); it names the entity of the source it is used in
            let a = ctx.default_attribute_here(*attr)?;
            let v = coerce(ctx, value, &crate::types::attr_ty(a))?;
            let lr = ctx.alias("lr");
            let q = Select {
                items: vec![(Expr::col(&lr, "e"), None)],
                from: vec![FromItem::inner(ctx.datoms(a.entid), &lr)],
                filters: vec![Expr::eq(Expr::col(&lr, "v"), v)],
                ..Default::default()
            };
            Some(Expr::Subquery(Box::new(Query::Select(Box::new(q)))))
        }
        (Ty::Value(T::Long), Constant::Long(_))
        | (Ty::Value(T::Double), Constant::Double(_))
        | (Ty::Value(T::String | T::Uri), Constant::String(_))
        | (Ty::Value(T::Keyword), Constant::Keyword(_))
        | (Ty::Value(T::Boolean), Constant::Boolean(_))
        | (Ty::Value(T::Instant), Constant::Instant(_))
        | (Ty::Value(T::Uuid), Constant::Uuid(_))
        | (Ty::Value(T::BigInt), Constant::BigInt(_))
        | (Ty::Value(T::BigDec), Constant::BigDec(_))
        | (Ty::Value(T::Symbol), Constant::Symbol(_)) => literal(c),
        (Ty::Value(T::Double), Constant::Long(i)) => Some(Expr::Lit(crate::sql::Lit::Double(*i as f64))),
        // Datomic compares numbers of one attribute's type: a long constant stands for the same integer in a
        // bigint or bigdec position, a bigint for the same decimal; a float position reads a double or a long as
        // the float nearest to it (the rounding the transactor applied when it stored the value).
        (Ty::Value(T::BigInt), Constant::Long(i)) => Some(Expr::Lit(crate::sql::Lit::Typed(i.to_string(), "HUGEINT"))),
        (Ty::Value(T::BigDec), Constant::Long(_) | Constant::BigInt(_)) => {
            Some(Expr::Lit(crate::sql::Lit::Typed(c.text()?, crate::schema::BIGDEC_SQL)))
        }
        (Ty::Value(T::Float), Constant::Double(_) | Constant::Long(_)) => Some(literal(c)?.cast("FLOAT")),
        // Bytes are written as strings (their UTF-8 bytes, as the transactor stores them); `encode` makes the
        // BLOB without reading backslash escapes, as a cast from text would.
        (Ty::Value(T::Bytes), Constant::String(s)) => Some(Expr::Func("encode", vec![Expr::str(s)])),
        (Ty::Mixed, c) => c.text().map(|t| Expr::str(&t)),
        (Ty::List(t), Constant::Tuple(items)) => {
            let items: Option<Vec<Expr>> = items.iter().map(|c| coerce(ctx, c, t)).collect();
            Some(Expr::Func("list_value", items?))
        }
        (Ty::Tuple(tys), Constant::Tuple(items)) if tys.len() == items.len() => {
            let fields: Option<Vec<(Name, Expr)>> = tys
                .iter()
                .zip(items)
                .enumerate()
                .map(|(i, (t, c))| Some((Name::new(&format!("f{i}")), coerce(ctx, c, t)?)))
                .collect();
            Some(Expr::Struct(fields?))
        }
        _ => None,
    }
}

/// What names an entity, for messages that refuse something else.
pub(crate) const ENTITY: &str =
    "an entity is an entid (a long), an ident (a keyword) or a lookup ref [:unique/attr value]";

/// The message for a lookup ref `[attr value]` whose value cannot be of the attribute's type (`want`).
pub(crate) fn lookup_value_mismatch(ident: &str, want: &Ty, value: &str, got: &Ty) -> String {
    format!(
        "a lookup ref's value must be of its attribute's type: {ident} takes {}, {value} is {}",
        want.a_name(),
        got.a_name()
    )
}

/// An error when constant `c`, bound to `var` (None: a constant written in a pattern), is a mistake in a position of
/// type `ty` rather than a value that matches nothing. Datomic resolves an entity position's constant to an entid
/// and raises where it cannot (`:db.error/not-an-entity`), so for an entity (`ty` a ref):
/// - a lookup ref's shape `[:ns/attr value]` whose keyword names no attribute is [`PlanError::UnknownAttribute`]
///   (`read_constant` reads such a vector as a tuple, which a tuple attribute's value may be);
/// - a lookup ref whose value cannot be of its attribute's type (`[:p/code "one"]` for a long), and any constant
///   that is not an entid, an ident keyword or a lookup ref (a string, a tuple such as `[:p/email]`), are
///   [`PlanError::TypeMismatch`];
///
/// and a lookup ref in a value position of a scalar type is a type mismatch too (it names an entity, never a
/// string or a long). A keyword that is no ident, or a long where a string attribute's value is, still matches
/// nothing; so does a lookup ref on an attribute another source lacks.
pub(crate) fn misfit(ctx: &Ctx, c: &Constant, ty: &Ty, var: Option<&Var>) -> Result<(), PlanError> {
    // formatted only for an error: this runs once per value of a collection input
    let given = || var.map_or(String::new(), |v| format!(", given for {v}"));
    // as written: a lookup ref's attribute by its ident (a constant holds its entid)
    let written = |c: &Constant| match c {
        Constant::LookupRef { attr, value } => {
            let ident = ctx.schema.attribute(*attr).map_or(attr.to_string(), |a| a.ident.clone());
            format!("[{ident} {}]", show_constant(value))
        }
        other => show_constant(other),
    };
    let mismatch = |message: String| PlanError::TypeMismatch { form: written(c), message: message + &given() };
    match (ty, c) {
        (Ty::Value(ValueType::Ref), Constant::Long(_) | Constant::Keyword(_)) => Ok(()),
        (Ty::Value(ValueType::Ref), Constant::LookupRef { attr, value }) => {
            let Some(a) = ctx.default_attribute_here(*attr) else { return Ok(()) };
            let want = crate::types::attr_ty(a);
            match coerce(ctx, value, &want) {
                Some(_) => Ok(()),
                None => Err(mismatch(lookup_value_mismatch(&a.ident, &want, &written(value), &value.natural_type()))),
            }
        }
        (Ty::Value(ValueType::Ref), Constant::Tuple(items)) => match items.as_slice() {
            [Constant::Keyword(k), _] if ctx.schema.attribute_by_ident(k).is_none() => {
                Err(PlanError::UnknownAttribute { ident: k.clone(), form: show_constant(c), context: given() })
            }
            _ => Err(mismatch(format!("a vector that is not a lookup ref cannot name an entity: {ENTITY}"))),
        },
        (Ty::Value(ValueType::Ref), other) => {
            Err(mismatch(format!("{} cannot name an entity: {ENTITY}", other.natural_type().a_name())))
        }
        (Ty::Value(_), Constant::LookupRef { .. }) => {
            Err(mismatch(format!("a lookup ref names an entity, and this position holds {}", ty.a_name())))
        }
        _ => Ok(()),
    }
}

/// A constant as EDN text, for messages; a double keeps its point (edn-format prints 1.0 as `1`, a long).
pub(crate) fn show_constant(c: &Constant) -> String {
    match c {
        Constant::Double(d) => format!("{d:?}"),
        other => show(&constant_value(other)),
    }
}

/// A constant back as an EDN value.
pub(crate) fn constant_value(c: &Constant) -> Value {
    match c {
        Constant::Boolean(b) => Value::Boolean(*b),
        Constant::Long(i) => Value::Integer(*i),
        Constant::Double(d) => Value::from(*d),
        Constant::String(s) => Value::String(s.clone()),
        Constant::Keyword(k) => crate::parse::keyword(k),
        Constant::Instant(s) | Constant::Uuid(s) => Value::String(s.clone()),
        Constant::BigInt(s) => s.parse::<i128>().map_or_else(|_| Value::String(s.clone()), |i| Value::BigInt(i.into())),
        Constant::BigDec(s) => s.parse().map_or_else(|_| Value::String(s.clone()), Value::BigDec),
        Constant::Symbol(s) => Value::Symbol(edn_format::Symbol::from_name(s)),
        Constant::LookupRef { attr, value } => Value::Vector(vec![Value::Integer(*attr), constant_value(value)]),
        Constant::Tuple(items) => Value::Vector(items.iter().map(constant_value).collect()),
    }
}

/// The FROM/WHERE body of an algebra as a SELECT without items (joins ordered and placed).
pub(crate) fn body(alg: &Algebra) -> Select {
    joins::body(&alg.sources, &alg.filters)
}

/// Shared check for function arguments that must be numbers.
pub(crate) fn require_numeric(t: &TExpr, form: &Value) -> Result<(), PlanError> {
    if t.ty.is_numeric() || t.ty == Ty::Mixed {
        Ok(())
    } else {
        Err(PlanError::type_mismatch(form, format!("expected a number, got {}", t.ty.a_name())))
    }
}
