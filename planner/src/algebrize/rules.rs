//! Rule calls `(name args...)`: inlined when the rule is not recursive, a DuckDB `WITH RECURSIVE`
//! CTE when it is, seeded by the call's constant arguments when the rule's shape allows.
//!
//! * **Non-recursive rules** are inlined: the call becomes an `or-join` over the call's variables
//!   whose branches are the rule's bodies, renamed (head variables to the call's arguments, body
//!   variables to fresh ones). A constant argument is a fresh variable bound to the constant, so
//!   DuckDB pushes it into each branch. Same SQL as if the user had written the `or-join`.
//! * **Recursive rules** (a strongly connected component of the rule graph, see [`crate::rules`])
//!   compile to one recursive CTE per component and call site, inside the call's FROM subquery:
//!   `(WITH RECURSIVE r(c0, c1) AS (base UNION step) SELECT ... FROM r) AS o`. A component of several
//!   rules (mutual recursion) is one CTE over a tagged union: a `tag` column (the rule's index in
//!   the component) and one column per argument of each rule, NULL in the other rules' rows, so each
//!   body reads the CTE at most once. Bodies without a call into the component are the base case,
//!   the others the step. DuckDB evaluates a recursive CTE semi-naively: each step reads the rows
//!   the previous step added, and `UNION` (set semantics) drops rows already found, so the fixpoint
//!   is reached in at most (longest derivation) steps and a cyclic graph terminates. A body calling
//!   the component twice (non-linear recursion, `(tc ?a ?b) :- (tc ?a ?x) (tc ?x ?b)`) would join
//!   the step's new rows with themselves only under plain `UNION`, so it compiles to a `USING KEY`
//!   CTE evaluated semi-naively (one variant of the body per call, that call reading the new rows
//!   and the others the whole relation so far), keeping only rows not derived before.
//! * **Termination / safety limit**: none is added. Values in a recursion come from the database
//!   and the query's constants (a finite domain), and `UNION` semantics stop when no new row
//!   appears. A rule that invents values (`[(+ ?n 1) ?m]` in a recursive body) terminates only if
//!   it bounds them itself (`[(< ?m 10)]`); that is the user's to guarantee, as in Datomic.
//! * **Seeding** (magic sets, [`crate::rules::seeding`]): arguments that are constants or scalar /
//!   collection inputs at the call site are pushed into the recursion when the component is one
//!   rule. If every bound position is passed unchanged by the recursive bodies (`Filter`), the seed
//!   filters the base case. If instead every free position is passed through unchanged (`Factor`,
//!   the right-recursive `ancestor`), a CTE `m(s..., x...)` first closes the bound positions from the
//!   seeds `s` through the recursive bodies, then the base bodies run on the reached `x`: "ancestors
//!   of one person" reads only the people above that person. An argument bound by the caller's
//!   patterns (not a constant; patterns run before rule calls) seeds the same way from the distinct
//!   values those patterns bind (a magic set: a SELECT over the caller's relation so far), at
//!   top-level scope. Otherwise (mutual recursion, a shape neither `Filter` nor `Factor`) the full
//!   relation is computed and joined.

use super::functions::{typed, Operand};
use super::{body, coerce, read_constant, Scope, Source, TExpr, VarBinding};
use crate::error::PlanError;
use crate::parse::{clause, Clause, OrJoin, Term, Var};
use crate::rules::{calls_in, read_call, rename, seeding, Rule, RuleBody, RuleCall, RuleFrame, RuleSet, Seeding};
use crate::source::Ctx;
use crate::sql::{BinOp, Cte, Expr, FromItem, Lit, Name, Query, Select, TableSource};
use crate::types::{Constant, Ty};
use edn_format::Value;
use std::collections::{BTreeMap, BTreeSet};

/// At most this many seed tuples are pushed into a recursion; more compute the whole relation.
const MAX_SEEDS: usize = 10_000;

/// Constant tuples for some argument positions of a call.
struct Seeds {
    positions: Vec<usize>,
    rows: Vec<Vec<Constant>>,
    /// Seeds from the caller's relation instead of `rows`: a SELECT of the distinct values of the bound
    /// positions over the clauses the caller has algebrized so far (columns `c0`, `c1`, ...), with their
    /// types. Datomic evaluates a rule with the bindings its call site provides; this is that set (a magic set).
    relation: Option<(Select, Vec<Ty>)>,
}

impl Seeds {
    /// The type of the seed of each bound position: a constant's own type, or the caller's expression's.
    fn types(&self) -> Vec<Option<Ty>> {
        match &self.relation {
            Some((_, tys)) => tys.iter().cloned().map(Some).collect(),
            None => (0..self.positions.len()).map(|j| self.rows.first().map(|r| r[j].natural_type())).collect(),
        }
    }
}

/// The variables among a call's required (bracketed) arguments. None inside the body of a recursive rule being
/// compiled: Datomic binds a rule's required arguments when it is entered, so a body may pass its head's on to a
/// call (`[(reach [?a] ?b) [?a :to ?x] (reach ?x ?b)]` and `[(e [?x] ?y) (e ?x ?z) [?z :to ?y]]`), while the
/// CTE computes the rule for every binding (seeded from the call site where it can) and binds them itself.
pub(crate) fn required_vars(ctx: &Ctx, form: &Value) -> Vec<Var> {
    let (Some(set), Ok(call)) = (ctx.rules, read_call(form)) else {
        return vec![];
    };
    if !ctx.rule_frames.borrow().is_empty() {
        return vec![];
    }
    let Some(rule) = set.rules.get(&call.name) else {
        return vec![];
    };
    call.args
        .iter()
        .take(rule.required)
        .filter_map(|t| match t {
            Term::Var(v) => Some(v.clone()),
            _ => None,
        })
        .collect()
}

impl Scope {
    /// A rule call clause.
    pub(crate) fn rule_call(&mut self, ctx: &Ctx, form: &Value) -> Result<(), PlanError> {
        // the bodies read the call's source, which `$` names in them
        let ctx = &ctx.for_rule_bodies();
        let call = read_call(form)?;
        let set = ctx.rules.ok_or_else(|| {
            PlanError::unsupported(form, "a rule call needs a rule set: put % in :in and the rules in the inputs")
        })?;
        let rule =
            set.rules.get(&call.name).ok_or_else(|| PlanError::syntax(form, format!("unknown rule {}", call.name)))?;
        if call.args.len() != rule.arity {
            return Err(PlanError::syntax(form, format!("rule {} takes {} arguments", rule.name, rule.arity)));
        }
        let frame = ctx.rule_frames.borrow().iter().rev().find(|f| f.preds.contains(&call.name)).cloned();
        if let Some(frame) = frame {
            return self.frame_call(ctx, &frame, &call, form);
        }
        if !set.is_recursive(&call.name) {
            return self.inline_rule(ctx, rule, &call.args, form);
        }
        self.recursive_call(ctx, set, rule, &call.args, form)
    }

    /// A call into the component being compiled: a read of its CTE (the recursive reference).
    fn frame_call(&mut self, ctx: &Ctx, frame: &RuleFrame, call: &RuleCall, form: &Value) -> Result<(), PlanError> {
        let k = frame.preds.iter().position(|p| *p == call.name).unwrap_or(0);
        let alias = ctx.alias("r");
        let source = match frame.delta_call {
            None => TableSource::Cte(frame.cte.clone()),
            Some(delta) => {
                let i = frame.calls.get();
                frame.calls.set(i + 1);
                if i == delta {
                    TableSource::Cte(frame.cte.clone())
                } else {
                    TableSource::Recurring(frame.cte.clone())
                }
            }
        };
        self.add_source(alias.clone(), source, None, term_vars(&call.args));
        if frame.tagged {
            self.alg.filters.push(Expr::eq(Expr::col(&alias, "tag"), Expr::int(k as i64)));
        }
        for (i, a) in call.args.iter().enumerate() {
            let ty = frame.types[k][i].clone().unwrap_or(Ty::REF);
            self.bind_term(ctx, a, TExpr::new(Expr::Col(alias.clone(), frame.slots[k][i].clone()), ty), form)?;
        }
        Ok(())
    }

    /// A non-recursive rule: an `or-join` of its renamed bodies.
    fn inline_rule(&mut self, ctx: &Ctx, rule: &Rule, args: &[Term], form: &Value) -> Result<(), PlanError> {
        let tag = ctx.alias("r");
        let mut join: Vec<Var> = Vec::new();
        let mut actual: Vec<Value> = Vec::new();
        for (i, a) in args.iter().enumerate() {
            let fresh = Var(format!("?__{}_{i}", tag.as_str()));
            match a {
                Term::Var(v) => {
                    if !join.contains(v) {
                        join.push(v.clone());
                    }
                    actual.push(crate::parse::symbol(&v.0));
                }
                Term::Const(c) => {
                    let c = read_constant(ctx, c, form)?;
                    self.bind_const(ctx, &fresh, c, form)?;
                    join.push(fresh.clone());
                    actual.push(crate::parse::symbol(&fresh.0));
                }
                Term::Blank | Term::Src => actual.push(crate::parse::symbol(&fresh.0)),
            }
        }
        let mut branches = Vec::new();
        for b in &rule.bodies {
            let mut map: BTreeMap<String, Value> =
                b.params.iter().zip(&actual).map(|(p, a)| (p.0.clone(), a.clone())).collect();
            let mut fresh = |v: &str| format!("{v}__{}", tag.as_str());
            let clauses =
                b.clause_forms.iter().map(|f| clause(&rename(f, &mut map, &mut fresh))).collect::<Result<_, _>>()?;
            branches.push(clauses);
        }
        self.or(ctx, Some(&OrJoin { required: vec![], vars: join }), &branches, form)
    }

    /// A call of a recursive rule: a CTE subquery, seeded when possible.
    fn recursive_call(
        &mut self,
        ctx: &Ctx,
        set: &RuleSet,
        rule: &Rule,
        args: &[Term],
        form: &Value,
    ) -> Result<(), PlanError> {
        let mut seeds = self.seeds(ctx, args, form)?;
        let mut how = seeds.as_ref().and_then(|s| seeding(set, rule, &s.positions));
        if how.is_none() {
            // No constant or input seeds the call, but the caller's earlier clauses bind some of its arguments
            // (`[?p :pkg/name ?name] (closure ?p ?q)`): seed it from those clauses' distinct values (a magic
            // set), as Datomic evaluates a rule with the bindings its call site provides, instead of computing
            // the whole relation and joining it afterwards.
            let from_clauses = |p: &usize| match &args[*p] {
                Term::Var(x) => matches!(self.lookup(x), Some(VarBinding::Expr(_))),
                _ => false,
            };
            if let Some((positions, mode)) = self.relation_positions(set, rule, args, |_| true) {
                if positions.iter().any(from_clauses) {
                    seeds = Some(self.relation_seeds(ctx, args, form, &positions)?);
                    how = Some(mode);
                }
            }
        }
        match self.seeded_call(ctx, set, rule, args, form, seeds, how) {
            // A body leaves a head variable to the caller (a limit, a budget passed down or recomputed): seed the
            // call from the caller's relation (the arguments its earlier clauses bound), in the factored
            // (magic-set) form, as Datomic evaluates a rule with the bindings its call site provides.
            Err(e @ PlanError::UnboundVariable { .. }) => {
                match self.relation_positions(set, rule, args, |m| m == Seeding::Factor) {
                    Some((positions, _)) => {
                        let rel = self.relation_seeds(ctx, args, form, &positions)?;
                        self.seeded_call(ctx, set, rule, args, form, Some(rel), Some(Seeding::Factor))
                    }
                    None => Err(e),
                }
            }
            other => other,
        }
    }

    /// [`Scope::recursive_call`] with its seeds decided.
    #[allow(clippy::too_many_arguments)]
    fn seeded_call(
        &mut self,
        ctx: &Ctx,
        set: &RuleSet,
        rule: &Rule,
        args: &[Term],
        form: &Value,
        seeds: Option<Seeds>,
        how: Option<Seeding>,
    ) -> Result<(), PlanError> {
        let mut frame = new_frame(ctx, set, &rule.name);
        let seeded: Vec<(usize, Ty)> = match &seeds {
            Some(s) => s.positions.iter().zip(s.types()).filter_map(|(p, t)| Some((*p, t?))).collect(),
            None => Vec::new(),
        };
        infer_types(ctx, set, &mut frame, (&rule.name, &seeded))?;
        let k = frame.preds.iter().position(|p| *p == rule.name).unwrap_or(0);
        let types: Vec<Ty> = frame.types[k].iter().map(|t| t.clone().unwrap_or(Ty::REF)).collect();
        if let (Some(Seeding::Factor), Some(s)) = (&how, &seeds) {
            if let Some(q) = factored(ctx, rule, s, &types)? {
                return self.add_call_source(ctx, q, args, &types, form);
            }
        }
        let filter = if how == Some(Seeding::Filter) { seeds.as_ref() } else { None };
        let cte = component_cte(ctx, set, &frame, filter)?;
        let rc = Name::new("rc");
        let items = frame.slots[k]
            .iter()
            .enumerate()
            .map(|(i, s)| (Expr::Col(rc.clone(), s.clone()), Some(format!("c{i}"))))
            .collect();
        let filters =
            if frame.tagged { vec![Expr::eq(Expr::col(&rc, "tag"), Expr::int(k as i64))] } else { Vec::new() };
        let select = Select {
            items,
            from: vec![FromItem::inner(TableSource::Cte(frame.cte.clone()), &rc)],
            filters,
            ..Default::default()
        };
        let q = Query::With { recursive: true, ctes: vec![cte], body: Box::new(Query::Select(Box::new(select))) };
        self.add_call_source(ctx, q, args, &types, form)
    }

    /// Joins a call's result subquery (columns `c0`, `c1`, ...) and binds the call's arguments.
    fn add_call_source(
        &mut self,
        ctx: &Ctx,
        q: Query,
        args: &[Term],
        types: &[Ty],
        form: &Value,
    ) -> Result<(), PlanError> {
        let alias = ctx.alias("o");
        let vars = term_vars(args);
        // The result is a set over its columns: unique over the variables unless a column is `_`.
        let key = args.iter().all(|a| !matches!(a, Term::Blank)).then(|| vars.clone());
        let item = FromItem::inner(TableSource::Subquery(Box::new(q)), &alias);
        self.alg.sources.push(Source { item, key, alt_key: None, vars, pinned: false, values: None });
        for (i, a) in args.iter().enumerate() {
            let col = TExpr::new(Expr::Col(alias.clone(), Name::new(&format!("c{i}"))), types[i].clone());
            self.bind_term(ctx, a, col, form)?;
        }
        Ok(())
    }

    /// The constant values of a call's arguments: constants, scalar inputs and collection inputs.
    fn seeds(&self, ctx: &Ctx, args: &[Term], form: &Value) -> Result<Option<Seeds>, PlanError> {
        let mut positions = Vec::new();
        let mut rows: Vec<Vec<Constant>> = vec![vec![]];
        for (i, a) in args.iter().enumerate() {
            let values = match a {
                Term::Const(v) => vec![read_constant(ctx, v, form)?],
                Term::Var(x) => match self.lookup(x) {
                    Some(VarBinding::Const(c)) => vec![c.clone()],
                    Some(VarBinding::Pending(list)) => list.clone(),
                    _ => continue,
                },
                Term::Blank | Term::Src => continue,
            };
            if rows.len() * values.len() > MAX_SEEDS {
                continue;
            }
            positions.push(i);
            rows = rows
                .iter()
                .flat_map(|r| {
                    values.iter().map(move |v| {
                        let mut r = r.clone();
                        r.push(v.clone());
                        r
                    })
                })
                .collect();
        }
        Ok((!positions.is_empty()).then_some(Seeds { positions, rows, relation: None }))
    }

    /// The bound positions of a call to seed from the caller's relation, with the seeding they allow (one that
    /// `accept` takes): every constant or input argument, and as many of the arguments the caller's clauses bind
    /// as allow it (the largest such set). None at an inner scope (an
    /// `or`/`not` branch, whose clauses are not a relation of their own), when a collection input is an
    /// argument (its values seed through [`Scope::seeds`]), or when no set allows an accepted seeding.
    fn relation_positions(
        &self,
        set: &RuleSet,
        rule: &Rule,
        args: &[Term],
        accept: impl Fn(Seeding) -> bool,
    ) -> Option<(Vec<usize>, Seeding)> {
        if !self.outer.is_empty() {
            return None;
        }
        let (mut fixed, mut optional) = (Vec::new(), Vec::new());
        for (i, a) in args.iter().enumerate() {
            match a {
                Term::Const(_) => fixed.push(i),
                Term::Var(x) => match self.lookup(x) {
                    Some(VarBinding::Const(_)) => fixed.push(i),
                    Some(VarBinding::Expr(_)) => optional.push(i),
                    Some(VarBinding::Pending(_)) => return None,
                    _ => {}
                },
                Term::Blank | Term::Src => {}
            }
        }
        if optional.len() > 8 {
            return None;
        }
        let mut masks: Vec<u32> = (0..1u32 << optional.len()).collect();
        masks.sort_by_key(|m| std::cmp::Reverse(m.count_ones()));
        masks.into_iter().find_map(|m| {
            let mut positions = fixed.clone();
            positions.extend(optional.iter().enumerate().filter(|(j, _)| m & (1 << j) != 0).map(|(_, p)| *p));
            positions.sort_unstable();
            let how = seeding(set, rule, &positions).filter(|h| accept(*h))?;
            Some((positions, how))
        })
    }

    /// The seeds of a call from the caller's relation: the arguments at `wanted` positions (constants, inputs,
    /// and variables the caller's earlier clauses bound), as one SELECT DISTINCT over those clauses.
    fn relation_seeds(&self, ctx: &Ctx, args: &[Term], form: &Value, wanted: &[usize]) -> Result<Seeds, PlanError> {
        let mut positions = Vec::new();
        let mut items = Vec::new();
        let mut tys = Vec::new();
        for (i, a) in args.iter().enumerate().filter(|(i, _)| wanted.contains(i)) {
            let te = match a {
                Term::Const(v) => typed(ctx, Operand::Const(read_constant(ctx, v, form)?), form)?,
                Term::Var(x) => match self.lookup(x) {
                    Some(VarBinding::Expr(te)) => te.clone(),
                    Some(VarBinding::Const(c)) => typed(ctx, Operand::Const(c.clone()), form)?,
                    _ => continue,
                },
                Term::Blank | Term::Src => continue,
            };
            items.push((te.expr.cast(&te.ty.sql_type()), Some(format!("c{}", positions.len()))));
            tys.push(te.ty);
            positions.push(i);
        }
        // the caller's clauses so far, their input rows typed as the finished scope types them, less the sources
        // the seed's values do not come from (and the filters on those): the seed may then hold more rows than
        // the caller's relation, which the call's join with that relation leaves out again
        let mut copy = Scope { alg: self.alg.clone(), outer: BTreeMap::new(), correlate: false };
        copy.finish(ctx)?;
        let mut used = Vec::new();
        for (e, _) in &items {
            e.aliases(&mut used);
        }
        let all = copy.alg.clone();
        copy.alg.sources.retain(|src| used.contains(&src.item.alias) && src.item.on.is_empty());
        let kept: Vec<Name> = copy.alg.sources.iter().map(|src| src.item.alias.clone()).collect();
        copy.alg.filters.retain(|f| {
            let mut refs = Vec::new();
            f.aliases(&mut refs);
            refs.iter().all(|a| kept.contains(a))
        });
        if used.iter().any(|a| !kept.contains(a)) {
            // a value read through a source that cannot stand alone (a LEFT JOIN): seed from every clause
            copy.alg = all;
        }
        let mut select = body(&copy.alg);
        select.items = items;
        select.distinct = true;
        Ok(Seeds { positions, rows: Vec::new(), relation: Some((select, tys)) })
    }
}

impl Scope {
    /// Joins the seeds of a call taken from the caller's relation (a SELECT with columns `c0`, `c1`, ...) into a
    /// base body of the rule, binding the body's `vars` (its parameters at the seeded positions) to its columns.
    fn add_seed_relation(
        &mut self,
        ctx: &Ctx,
        vars: &[Var],
        select: &Select,
        tys: &[Ty],
        form: &Value,
    ) -> Result<(), PlanError> {
        let alias = ctx.alias("m");
        let sub = TableSource::Subquery(Box::new(Query::Select(Box::new(select.clone()))));
        let item = FromItem::inner(sub, &alias);
        self.alg.sources.push(Source {
            item,
            key: Some(vars.to_vec()),
            alt_key: None,
            vars: vars.to_vec(),
            pinned: false,
            values: None,
        });
        for (j, v) in vars.iter().enumerate() {
            let col = TExpr::new(Expr::Col(alias.clone(), Name::new(&format!("c{j}"))), tys[j].clone());
            self.bind(ctx, v, col, form)?;
        }
        Ok(())
    }
}

fn term_vars(args: &[Term]) -> Vec<Var> {
    let mut out: Vec<Var> = Vec::new();
    for a in args {
        if let Term::Var(v) = a {
            if !out.contains(v) {
                out.push(v.clone());
            }
        }
    }
    out
}

/// A frame for the component of `name`, types unknown.
fn new_frame(ctx: &Ctx, set: &RuleSet, name: &str) -> RuleFrame {
    let preds: Vec<String> = set.component(name).to_vec();
    let tagged = preds.len() > 1;
    let slots: Vec<Vec<Name>> = preds
        .iter()
        .enumerate()
        .map(|(k, p)| {
            (0..set.rules[p].arity)
                .map(|i| if tagged { Name::new(&format!("c{k}_{i}")) } else { Name::new(&format!("c{i}")) })
                .collect()
        })
        .collect();
    let types = preds.iter().map(|p| vec![None; set.rules[p].arity]).collect();
    RuleFrame { preds, cte: ctx.alias("r"), tagged, slots, types, delta_call: None, calls: Default::default() }
}

/// Which rules of the component a body calls, and how often (at any depth).
fn component_calls(b: &RuleBody, preds: &[String]) -> Vec<usize> {
    let mut calls = Vec::new();
    calls_in(&b.clauses, false, &mut calls);
    calls
        .iter()
        .filter_map(|(f, _)| read_call(f).ok())
        .filter_map(|c| preds.iter().position(|p| *p == c.name))
        .collect()
}

/// Runs `f` with `frame` pushed on the context's frame stack.
fn with_frame<T>(ctx: &Ctx, frame: &RuleFrame, f: impl FnOnce() -> Result<T, PlanError>) -> Result<T, PlanError> {
    ctx.rule_frames.borrow_mut().push(frame.clone());
    let out = f();
    ctx.rule_frames.borrow_mut().pop();
    out
}

/// Algebrizes one body in a scope of its own; `prepare` adds seeds or sources first. None when the
/// body is impossible (pruned).
fn run_body(
    ctx: &Ctx,
    clauses: &[Clause],
    prepare: impl FnOnce(&mut Scope) -> Result<(), PlanError>,
) -> Result<Option<Scope>, PlanError> {
    let mut scope = Scope::child(BTreeMap::new(), false);
    prepare(&mut scope)?;
    scope.run(ctx, clauses)?;
    Ok(scope.alg.empty.is_none().then_some(scope))
}

/// The typed expression of a head variable in a body's scope.
fn head_expr(ctx: &Ctx, scope: &Scope, var: &Var, form: &Value) -> Result<TExpr, PlanError> {
    match scope.lookup(var) {
        Some(VarBinding::Expr(t)) => Ok(t.clone()),
        Some(VarBinding::Const(c)) => typed(ctx, Operand::Const(c.clone()), form),
        _ => Err(PlanError::unbound(&var.0, form, "a rule's head variables must be bound by its body")),
    }
}

/// An expression in a column of type `ty` (columns of that type as they are, others cast).
fn as_type(te: &TExpr, ty: &Ty) -> Expr {
    if te.ty.sql_type() == ty.sql_type() && matches!(te.expr, Expr::Col(..)) {
        te.expr.clone()
    } else {
        te.expr.clone().cast(&ty.sql_type())
    }
}

fn null_of(ty: &Ty) -> Expr {
    Expr::Lit(Lit::Null).cast(&ty.sql_type())
}

/// Infers the argument types of the component's rules from their bodies: bodies whose calls into
/// the component have known types first (the base cases), until nothing changes. Arguments of
/// rules with no derivation stay unknown (typed as refs).
///
/// `seeded` names the called rule and the positions its call seeds, with the seeds' types: in that rule's
/// bodies, a head variable at such a position is a parameter the caller provides (it may be bound nowhere in the
/// body, as a limit compared in a predicate), typed as its seed.
fn infer_types(
    ctx: &Ctx,
    set: &RuleSet,
    frame: &mut RuleFrame,
    seeded: (&str, &[(usize, Ty)]),
) -> Result<(), PlanError> {
    let mut done: BTreeSet<(usize, usize)> = BTreeSet::new();
    loop {
        let mut progress = false;
        for (k, p) in frame.preds.clone().iter().enumerate() {
            for (b, body) in set.rules[p].bodies.iter().enumerate() {
                let calls = component_calls(body, &frame.preds);
                if done.contains(&(k, b)) || calls.iter().any(|c| frame.types[*c].iter().any(Option::is_none)) {
                    continue;
                }
                done.insert((k, b));
                progress = true;
                let params: &[(usize, Ty)] = if *p == seeded.0 { seeded.1 } else { &[] };
                let prepare = |s: &mut Scope| -> Result<(), PlanError> {
                    for (i, ty) in params {
                        s.bind(ctx, &body.params[*i], TExpr::new(null_of(ty), ty.clone()), &body.form)?;
                    }
                    Ok(())
                };
                let Some(scope) = with_frame(ctx, frame, || run_body(ctx, &body.clauses, prepare))? else {
                    continue;
                };
                for (i, v) in body.params.iter().enumerate() {
                    let t = head_expr(ctx, &scope, v, &body.form)?.ty;
                    let joined = match &frame.types[k][i] {
                        None => t,
                        Some(prev) => prev.join(&t).ok_or_else(|| {
                            PlanError::type_mismatch(
                                &body.form,
                                format!(
                                    "argument {v} of rule {p} is {} here and {} in another body",
                                    t.a_name(),
                                    prev.a_name()
                                ),
                            )
                        })?,
                    };
                    frame.types[k][i] = Some(joined);
                }
            }
        }
        if !progress {
            break;
        }
    }
    for ts in &mut frame.types {
        for t in ts {
            t.get_or_insert(Ty::REF);
        }
    }
    Ok(())
}

/// The recursive CTE of a component; `seeds` (a one-rule component whose bound positions are
/// invariant) filter the base case.
fn component_cte(ctx: &Ctx, set: &RuleSet, frame: &RuleFrame, seeds: Option<&Seeds>) -> Result<Cte, PlanError> {
    let mut columns: Vec<Name> = Vec::new();
    let mut tys: Vec<Ty> = Vec::new();
    if frame.tagged {
        columns.push(Name::new("tag"));
        tys.push(Ty::LONG);
    }
    for (k, slots) in frame.slots.iter().enumerate() {
        columns.extend(slots.iter().cloned());
        tys.extend(frame.types[k].iter().map(|t| t.clone().unwrap_or(Ty::REF)));
    }
    let mut base = Vec::new();
    let mut step = Vec::new();
    // Non-linear recursion (a body calling the component more than once: same generation, path doubling) reads
    // the whole relation so far besides the last iteration's rows, which only a `USING KEY` CTE offers
    // (`recurring.<cte>`); it is evaluated semi-naively: one variant of such a body per call, that call reading
    // the new rows and the others the whole relation, and every step keeps only rows not derived before.
    let non_linear =
        frame.preds.iter().any(|p| set.rules[p].bodies.iter().any(|b| component_calls(b, &frame.preds).len() > 1));
    for (k, p) in frame.preds.iter().enumerate() {
        for body in &set.rules[p].bodies {
            let calls = component_calls(body, &frame.preds);
            if non_linear && !calls.is_empty() {
                for delta in 0..calls.len() {
                    let mut f = frame.clone();
                    f.delta_call = Some(delta);
                    f.calls = Default::default();
                    let Some(scope) = with_frame(ctx, &f, || run_body(ctx, &body.clauses, |_| Ok(())))? else {
                        continue;
                    };
                    let mut select = body_select(&scope);
                    select.items = head_items(ctx, frame, k, &scope, body)?;
                    step.push(select);
                }
                continue;
            }
            let seed = if calls.is_empty() { seeds } else { None };
            let prepare = |s: &mut Scope| -> Result<(), PlanError> {
                let Some(seed) = seed else { return Ok(()) };
                let vars: Vec<Var> = seed.positions.iter().map(|i| body.params[*i].clone()).collect();
                if let Some((select, tys)) = &seed.relation {
                    s.add_seed_relation(ctx, &vars, select, tys, &body.form)
                } else if seed.rows.len() == 1 {
                    for (v, c) in vars.iter().zip(&seed.rows[0]) {
                        s.bind_const(ctx, v, c.clone(), &body.form)?;
                    }
                    Ok(())
                } else {
                    s.add_values(ctx, vars.into_iter().map(Some).collect(), seed.rows.clone())
                }
            };
            let Some(scope) = with_frame(ctx, frame, || run_body(ctx, &body.clauses, prepare))? else {
                continue;
            };
            let mut select = body_select(&scope);
            select.items = head_items(ctx, frame, k, &scope, body)?;
            if calls.is_empty() {
                base.push(select);
            } else {
                step.push(select);
            }
        }
    }
    if non_linear {
        let query = keyed_query(&frame.cte, &columns, &tys, base, step);
        return Ok(Cte { name: frame.cte.clone(), columns, query, using_key: true });
    }
    let query = recursive_query(&columns, &tys, base, step);
    Ok(Cte { name: frame.cte.clone(), columns, query, using_key: false })
}

/// The CTE columns of a body of rule `k` of the component: its tag, its head's values, NULL for the other
/// rules' columns.
fn head_items(
    ctx: &Ctx,
    frame: &RuleFrame,
    k: usize,
    scope: &Scope,
    body: &RuleBody,
) -> Result<Vec<(Expr, Option<String>)>, PlanError> {
    let mut items = Vec::new();
    if frame.tagged {
        items.push((Expr::int(k as i64), Some("tag".to_string())));
    }
    for (j, slots) in frame.slots.iter().enumerate() {
        for (i, slot) in slots.iter().enumerate() {
            let ty = frame.types[j][i].clone().unwrap_or(Ty::REF);
            let e =
                if j == k { as_type(&head_expr(ctx, scope, &body.params[i], &body.form)?, &ty) } else { null_of(&ty) };
            items.push((e, Some(slot.as_str().to_string())));
        }
    }
    Ok(items)
}

/// The query of a `USING KEY` CTE (every column the key): `base UNION` the step's rows that the relation so far
/// (`recurring.<cte>`) does not hold yet, so that the recursion ends when a step derives nothing new.
fn keyed_query(cte: &Name, columns: &[Name], tys: &[Ty], base: Vec<Select>, step: Vec<Select>) -> Query {
    let recursive = recursive_query(columns, tys, base, step);
    let Query::Union { all, mut parts } = recursive else { return recursive };
    let Some(step) = parts.pop() else { return Query::Union { all, parts } };
    let n = Name::new("n");
    let r = Name::new("rr");
    let same: Vec<Expr> = columns
        .iter()
        .map(|c| Expr::bin(BinOp::Same, Expr::Col(r.clone(), c.clone()), Expr::Col(n.clone(), c.clone())))
        .collect();
    let seen = Select {
        items: vec![(Expr::int(1), None)],
        from: vec![FromItem::inner(TableSource::Recurring(cte.clone()), &r)],
        filters: vec![Expr::all(same)],
        ..Default::default()
    };
    let fresh = Select {
        items: columns.iter().map(|c| (Expr::Col(n.clone(), c.clone()), None)).collect(),
        from: vec![FromItem::inner(TableSource::Subquery(Box::new(step)), &n)],
        filters: vec![Expr::Exists(Box::new(Query::Select(Box::new(seen)))).negate()],
        ..Default::default()
    };
    parts.push(Query::Select(Box::new(fresh)));
    Query::Union { all, parts }
}

fn body_select(scope: &Scope) -> Select {
    body(&scope.alg)
}

/// `base UNION step`, each side one SELECT (several are wrapped in a subquery, since DuckDB splits a
/// recursive CTE at its last top-level UNION). No base: an empty typed row set.
fn recursive_query(columns: &[Name], tys: &[Ty], base: Vec<Select>, step: Vec<Select>) -> Query {
    let side = |mut parts: Vec<Select>| -> Query {
        if parts.is_empty() {
            let items = columns.iter().zip(tys).map(|(c, t)| (null_of(t), Some(c.as_str().to_string()))).collect();
            return Query::Select(Box::new(Select { items, filters: vec![Expr::bool(false)], ..Default::default() }));
        }
        if parts.len() == 1 {
            return Query::Select(Box::new(parts.remove(0)));
        }
        let u = Name::new("u");
        let union = Query::Union { all: false, parts: parts.into_iter().map(|p| Query::Select(Box::new(p))).collect() };
        let items = columns.iter().map(|c| (Expr::Col(u.clone(), c.clone()), None)).collect();
        Query::Select(Box::new(Select {
            items,
            from: vec![FromItem::inner(TableSource::Subquery(Box::new(union)), &u)],
            ..Default::default()
        }))
    };
    if step.is_empty() {
        side(base)
    } else {
        Query::Union { all: false, parts: vec![side(base), side(step)] }
    }
}

/// The factored form of a seeded call (see the module docs): `m(s..., x...)` closes the bound
/// positions from the seeds through the recursive bodies (their recursive call dropped, the head's
/// bound variables read from `m.x`, the call's bound arguments the new `x`); the base bodies then run
/// with their bound head variables read from `m.x`, and answer `m.s` in the bound positions. None
/// when the shape does not allow it after all (a `_` at a bound position of the recursive call).
fn factored(ctx: &Ctx, rule: &Rule, seeds: &Seeds, types: &[Ty]) -> Result<Option<Query>, PlanError> {
    let m = ctx.alias("m");
    let n = seeds.positions.len();
    let s_cols: Vec<Name> = (0..n).map(|j| Name::new(&format!("s{j}"))).collect();
    let x_cols: Vec<Name> = (0..n).map(|j| Name::new(&format!("x{j}"))).collect();
    let bound_tys: Vec<Ty> = seeds.positions.iter().map(|p| types[*p].clone()).collect();
    // Base: the seeds, typed as the rule's arguments; seeds of the wrong type match nothing.
    let mut rows: Vec<Vec<Expr>> = Vec::new();
    for r in &seeds.rows {
        let typed: Option<Vec<Expr>> = r.iter().zip(&bound_tys).map(|(c, t)| coerce(ctx, c, t)).collect();
        if let Some(mut row) = typed {
            if rows.is_empty() {
                row = row.into_iter().zip(&bound_tys).map(|(e, t)| e.cast(&t.sql_type())).collect();
            }
            rows.push(row);
        }
    }
    let v = Name::new("v");
    let vcols: Vec<Name> = (0..n).map(|j| Name::new(&format!("c{j}"))).collect();
    let base = if let Some((select, _)) = &seeds.relation {
        let mut items: Vec<(Expr, Option<String>)> = Vec::new();
        for names in [&s_cols, &x_cols] {
            for (j, c) in names.iter().enumerate() {
                let e = Expr::Col(v.clone(), vcols[j].clone()).cast(&bound_tys[j].sql_type());
                items.push((e, Some(c.as_str().to_string())));
            }
        }
        let sub = TableSource::Subquery(Box::new(Query::Select(Box::new(select.clone()))));
        Select { items, from: vec![FromItem::inner(sub, &v)], ..Default::default() }
    } else if rows.is_empty() {
        let items = s_cols.iter().chain(&x_cols).zip(bound_tys.iter().chain(&bound_tys));
        Select {
            items: items.map(|(c, t)| (null_of(t), Some(c.as_str().to_string()))).collect(),
            filters: vec![Expr::bool(false)],
            ..Default::default()
        }
    } else {
        let mut items: Vec<(Expr, Option<String>)> = Vec::new();
        for names in [&s_cols, &x_cols] {
            for (j, c) in names.iter().enumerate() {
                items.push((Expr::Col(v.clone(), vcols[j].clone()), Some(c.as_str().to_string())));
            }
        }
        Select {
            items,
            from: vec![FromItem::inner(TableSource::Values { rows, columns: vcols.clone() }, &v)],
            ..Default::default()
        }
    };
    // Binds the body's bound head variables to a fresh read of `m`.
    let read_m = |s: &mut Scope, body: &RuleBody| -> Result<Name, PlanError> {
        let alias = ctx.alias("m");
        let vars = seeds.positions.iter().map(|p| body.params[*p].clone()).collect();
        s.add_source(alias.clone(), TableSource::Cte(m.clone()), None, vars);
        for (j, p) in seeds.positions.iter().enumerate() {
            let te = TExpr::new(Expr::Col(alias.clone(), x_cols[j].clone()), bound_tys[j].clone());
            s.bind(ctx, &body.params[*p], te, &body.form)?;
        }
        Ok(alias)
    };
    let mut step = Vec::new();
    let mut answers = Vec::new();
    for body in &rule.bodies {
        let own =
            |c: &Clause| matches!(c, Clause::RuleCall { form } if read_call(form).is_ok_and(|rc| rc.name == rule.name));
        let call = body.clauses.iter().find(|c| own(c)).and_then(|c| match c {
            Clause::RuleCall { form } => read_call(form).ok(),
            _ => None,
        });
        let rest: Vec<Clause> = body.clauses.iter().filter(|c| !own(c)).cloned().collect();
        let mut alias = None;
        let Some(scope) = run_body(ctx, &rest, |s| {
            alias = Some(read_m(s, body)?);
            Ok(())
        })?
        else {
            continue;
        };
        let ma = alias.unwrap_or_else(|| m.clone());
        let mut select = body_select(&scope);
        let mut items: Vec<(Expr, Option<String>)> = Vec::new();
        match call {
            Some(call) => {
                for s in &s_cols {
                    items.push((Expr::Col(ma.clone(), s.clone()), Some(s.as_str().to_string())));
                }
                for (j, p) in seeds.positions.iter().enumerate() {
                    let e = match &call.args[*p] {
                        Term::Var(x) => as_type(&head_expr(ctx, &scope, x, &body.form)?, &bound_tys[j]),
                        Term::Const(c) => match coerce(ctx, &read_constant(ctx, c, &body.form)?, &bound_tys[j]) {
                            Some(e) => e.cast(&bound_tys[j].sql_type()),
                            None => continue,
                        },
                        Term::Blank | Term::Src => return Ok(None),
                    };
                    items.push((e, Some(x_cols[j].as_str().to_string())));
                }
                if items.len() == 2 * n {
                    select.items = items;
                    step.push(select);
                }
            }
            None => {
                for (i, p) in body.params.iter().enumerate() {
                    let e = match seeds.positions.iter().position(|b| b == &i) {
                        Some(j) => Expr::Col(ma.clone(), s_cols[j].clone()),
                        None => as_type(&head_expr(ctx, &scope, p, &body.form)?, &types[i]),
                    };
                    items.push((e, Some(format!("c{i}"))));
                }
                select.items = items;
                answers.push(Query::Select(Box::new(select)));
            }
        }
    }
    let m_columns: Vec<Name> = s_cols.iter().chain(&x_cols).cloned().collect();
    let m_tys: Vec<Ty> = bound_tys.iter().chain(&bound_tys).cloned().collect();
    let cte = Cte {
        name: m.clone(),
        columns: m_columns.clone(),
        query: recursive_query(&m_columns, &m_tys, vec![base], step),
        using_key: false,
    };
    let answer = match answers.len() {
        0 => {
            let items = types.iter().enumerate().map(|(i, t)| (null_of(t), Some(format!("c{i}")))).collect();
            Query::Select(Box::new(Select { items, filters: vec![Expr::bool(false)], ..Default::default() }))
        }
        // A rule's relation is a set: two reached `x` can give one answer row (the seed's ancestors through two
        // parents), which a single body's SELECT would repeat (aggregates would count it twice; the differential
        // run against DataScript found it).
        1 => match answers.remove(0) {
            Query::Select(mut s) => {
                s.distinct = true;
                Query::Select(s)
            }
            q => q,
        },
        _ => Query::Union { all: false, parts: answers },
    };
    Ok(Some(Query::With { recursive: true, ctes: vec![cte], body: Box::new(answer) }))
}
