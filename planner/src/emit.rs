//! Stage 3: projection. The find spec, `:with`, aggregates, `:order`, `:limit` and `:offset` over an
//! [`Algebra`] become one SELECT statement.
//!
//! Set semantics follow Datomic: a relation is a set of tuples, so the statement is `SELECT
//! DISTINCT` unless [`crate::keys`] proves the rows distinct already. Aggregates see the set of
//! (find variables + `:with` variables) tuples: when that set is provably the join's rows the
//! statement aggregates directly (`count(*)`, no DISTINCT); otherwise it aggregates over a `SELECT
//! DISTINCT` of those variables. Ordering by a variable outside `:find` makes it part of that set,
//! like `:with`. An aggregate without grouping variables over no rows returns no row (Datomic
//! returns an empty result), via `HAVING count(*) > 0`.

use crate::algebrize::{Algebra, TExpr, VarBinding};
use crate::error::{show, PlanError};
use crate::joins;
use crate::keys::unique_over;
use crate::layout::quote_ident;
use crate::parse::{symbol, Aggregate, Bound, FindElem, FindSpec, Query, Var};
use crate::pull::{compile_pull_held, CompiledPull};
use crate::schema::ValueType;
use crate::source::Ctx;
use crate::sql::{BinOp, Dialect, Expr, FromItem, Lit, Name, Query as SqlQuery, Select, TableSource};
use crate::types::{keyword_order, Constant, Ty};
use crate::{CompiledQuery, FindKind, OutputColumn};

/// Builds the statement for a query over its algebra.
pub fn emit(ctx: &Ctx, query: &Query, alg: &Algebra) -> Result<CompiledQuery, PlanError> {
    let elems = query.find.elements();
    // Pulled entities are grouping/distinct variables like plain find variables (a pull is a function of its entity).
    let mut find_vars: Vec<Var> = Vec::new();
    for e in &elems {
        if let FindElem::Var(v) | FindElem::Pull { var: v, .. } = e {
            if !find_vars.contains(v) {
                find_vars.push(v.clone());
            }
        }
    }
    let aggs: Vec<&Aggregate> =
        elems.iter().filter_map(|e| if let FindElem::Aggregate(a) = e { Some(a) } else { None }).collect();
    // The variables of the tuple set: find, aggregated, :with and :order variables.
    let mut set_vars: Vec<Var> = Vec::new();
    let order_vars = query.order.iter().map(|o| &o.var);
    for v in find_vars.iter().chain(aggs.iter().map(|a| &a.var)).chain(&query.with).chain(order_vars) {
        if !set_vars.contains(v) {
            set_vars.push(v.clone());
        }
    }
    let mut exprs: Vec<TExpr> = Vec::new();
    for v in &set_vars {
        exprs.push(match alg.bindings.get(v) {
            // an ident given for an entity that is only pulled names that entity (README "What names an entity")
            Some(VarBinding::Const(c @ Constant::Keyword(_)))
                if !elems.iter().any(|e| matches!(e, FindElem::Var(x) if x == v)) =>
            {
                match elems.iter().find_map(|e| match e {
                    FindElem::Pull { var, form, .. } if var == v => Some(form),
                    _ => None,
                }) {
                    Some(form) => {
                        let e = crate::algebrize::coerce(ctx, c, &Ty::REF).ok_or_else(|| PlanError::UnknownIdent {
                            ident: crate::algebrize::show_constant(c),
                            form: crate::error::show(form),
                        })?;
                        TExpr::new(e, Ty::REF)
                    }
                    None => var_expr(ctx, alg, v)?,
                }
            }
            _ => var_expr(ctx, alg, v)?,
        });
    }
    if !aggs.is_empty() {
        if let Some(o) = query.order.iter().find(|o| !find_vars.contains(&o.var)) {
            return Err(PlanError::unsupported(
                &symbol(&o.var.0),
                "with aggregates, :order takes grouping variables of :find",
            ));
        }
    }
    let unique = unique_over(alg, &set_vars);
    let mut base = joins::body(&alg.sources, &alg.filters);
    if alg.empty.is_some() {
        base.filters.push(Expr::bool(false));
    }
    let extra = set_vars.len() > find_vars.len() + aggs.len();
    let mut pulls: Vec<(usize, CompiledPull)> = Vec::new();
    let one_level = if aggs.is_empty() { !extra } else { unique };
    // How the final SELECT reads each set variable.
    let (mut select, read): (Select, Vec<TExpr>) = if one_level {
        (base, exprs)
    } else {
        let names: Vec<Name> = (0..exprs.len()).map(|i| Name::new(&format!("c{i}"))).collect();
        let mut inner = base;
        inner.distinct = !unique;
        inner.items = exprs.iter().zip(&names).map(|(e, n)| (e.expr.clone(), Some(n.as_str().to_string()))).collect();
        let q = Name::new("q");
        let outer = Select {
            from: vec![FromItem::inner(TableSource::Subquery(Box::new(SqlQuery::Select(Box::new(inner)))), &q)],
            ..Default::default()
        };
        let read =
            exprs.iter().zip(&names).map(|(e, n)| TExpr::new(Expr::Col(q.clone(), n.clone()), e.ty.clone())).collect();
        (outer, read)
    };
    let lookup = |v: &Var| -> TExpr {
        let i = set_vars.iter().position(|x| x == v).unwrap_or(0);
        read[i].clone()
    };
    let mut columns = Vec::new();
    let mut items = Vec::new();
    for (i, e) in elems.iter().enumerate() {
        let (expr, ty, default_name) = match e {
            FindElem::Var(v) => {
                let t = lookup(v);
                (t.expr, t.ty, v.bare().to_string())
            }
            FindElem::Aggregate(a) => {
                let (expr, ty) = aggregate(alg, a, lookup(&a.var))?;
                (expr, ty, format!("{}_{}", a.func.replace('-', "_"), a.var.bare()))
            }
            FindElem::Pull { var, pattern, form } => {
                let t = lookup(var);
                if !t.ty.is_numeric() || t.ty == Ty::DOUBLE {
                    return Err(PlanError::type_mismatch(
                        form,
                        format!("pull needs an entity, {var} is {}", t.ty.a_name()),
                    ));
                }
                pulls.push((i, compile_pull_held(pattern, ctx.schema, ctx.store, ctx.opts, ctx.pull_held)?));
                (t.expr, Ty::REF, format!("pull_{}", var.bare()))
            }
        };
        let name = query.return_map.as_ref().and_then(|r| r.names.get(i).cloned()).unwrap_or(default_name);
        let name = dedupe(&columns, name);
        let sql_type = ty.sql_type();
        let expr =
            if matches!(expr, Expr::Col(..) | Expr::Agg { func: "count", .. }) { expr } else { expr.cast(&sql_type) };
        items.push((expr, Some(name.clone())));
        columns.push(OutputColumn { name, sql_type });
    }
    select.items = items;
    if aggs.is_empty() {
        select.distinct = one_level && !unique;
    } else {
        // Constant grouping keys (scalar inputs, `ground`) group nothing, and DuckDB would read an integer
        // literal in GROUP BY as a column position: leave them out. With no grouping key left, an aggregate
        // over no rows must still return no row.
        select.group_by = find_vars.iter().map(|v| lookup(v).expr).filter(|e| !is_literal(e)).collect();
        if select.group_by.is_empty() {
            select.having.push(Expr::bin(
                BinOp::Gt,
                Expr::Agg { func: "count", distinct: false, args: vec![] },
                Expr::int(0),
            ));
        }
    }
    // An `:order` variable that is neither found nor in `:with` must not make the answer a bag (its values would
    // part rows of equal find tuples): the rows are grouped by the find (and `:with`) variables and ordered by
    // the variable's least value (`asc`) or greatest (`desc`) within each.
    let order_only: Vec<&Var> =
        query.order.iter().map(|o| &o.var).filter(|v| !find_vars.contains(v) && !query.with.contains(v)).collect();
    let grouped_order = aggs.is_empty() && !order_only.is_empty();
    if grouped_order {
        select.group_by =
            find_vars.iter().chain(&query.with).map(|v| lookup(v).expr).filter(|e| !is_literal(e)).collect();
        if select.group_by.is_empty() {
            select.having.push(Expr::bin(
                BinOp::Gt,
                Expr::Agg { func: "count", distinct: false, args: vec![] },
                Expr::int(0),
            ));
        }
    }
    // Ordering by a constant is a no-op, and DuckDB reads an integer literal in ORDER BY as a column position
    // (and rejects other literals): leave constants out.
    select.order_by = query
        .order
        .iter()
        .map(|o| {
            let t = lookup(&o.var);
            (if t.ty.is_keyword() { keyword_order(t.expr) } else { t.expr }, o)
        })
        .filter(|(e, _)| !is_literal(e))
        .map(|(e, o)| {
            if grouped_order && order_only.contains(&&o.var) {
                let func = if o.descending { "max" } else { "min" };
                (Expr::Agg { func, distinct: false, args: vec![e] }, o.descending)
            } else {
                (e, o.descending)
            }
        })
        .collect();
    select.limit = bound(alg, query.limit.as_ref())?;
    select.offset = bound(alg, query.offset.as_ref())?;
    let find = match &query.find {
        FindSpec::Relation(_) => FindKind::Relation,
        FindSpec::Collection(_) => FindKind::Collection,
        FindSpec::Scalar(_) => FindKind::Scalar,
        FindSpec::Tuple(_) => FindKind::Tuple,
    };
    if matches!(find, FindKind::Scalar | FindKind::Tuple) {
        select.limit = Some(select.limit.map_or(1, |l| l.min(1)));
    }
    let ordered = !select.order_by.is_empty();
    if pulls.is_empty() {
        let printed = SqlQuery::Select(Box::new(select)).to_sql_in(ctx.opts.dialect)?;
        return Ok(CompiledQuery { sql: printed.sql, columns, find, held_sql: None, stages: printed.stages, ordered });
    }
    let (sql, held_sql, stages) = with_pulls(select, &mut columns, &pulls, ctx.opts.dialect)?;
    Ok(CompiledQuery { sql, columns, find, held_sql, stages, ordered })
}

/// Name of the CTE holding a query's rows when find elements pull.
const ROWS: &str = "mentat_rows";

/// Wraps the statement of a query with `(pull ?e pattern)` find elements. `select` projects each pulled entity's
/// id under the pull's column name; it becomes a MATERIALIZED CTE (with its DISTINCT, grouping, ordering and
/// limits, so the set semantics are those of the entity ids), and each pull is LEFT JOINed on the entity column:
///
/// ```text
/// WITH mentat_rows AS MATERIALIZED (SELECT ..., t0.e AS "pull_e", <order keys> ... LIMIT n)
/// SELECT m."x", p1.pull AS "pull_e" FROM mentat_rows AS m
/// LEFT JOIN (<CompiledPull::relation_sql over the entity column>) AS p1 ON p1.e = m."pull_e"
/// ORDER BY <the order keys>
/// ```
///
/// A join does not keep row order, so the `:order` keys are carried as hidden columns and applied again outside.
/// The pulls' column types become their STRUCT types. Also returns, when a pattern has `*`, the probe of the
/// attributes the entities of the pulls' `*` levels hold ([`CompiledQuery::held_sql`]), and the stages the
/// statement reads (Spark's recursive rules).
///
/// In Spark the same statement is printed without the CTE hints (`AS MATERIALIZED`), with backticked names,
/// `NULLS LAST` on the order keys, and the pulls' CTEs in Spark's words ([`crate::pull`]); the pulls compiled
/// for Spark refuse what needs JSON (unbounded recursion, components pulled whole).
fn with_pulls(
    mut select: Select,
    columns: &mut [OutputColumn],
    pulls: &[(usize, CompiledPull)],
    dialect: Dialect,
) -> Result<(String, Option<String>, Vec<crate::sql::Stage>), PlanError> {
    let spark = dialect == Dialect::Spark;
    let ident = |name: &str| if spark { crate::sql::spark_ident(name) } else { quote_ident(name) };
    let materialized = if spark { "" } else { " MATERIALIZED" };
    // A limited answer (`.`, a tuple find spec, `:limit`, `:offset`) is a choice among rows, and the probe of a
    // wildcard's attributes runs the SELECT apart from the query itself: without a total order the two may choose
    // different rows, and the STRUCT would be typed from another entity than the one pulled (its attributes
    // missing from the answer). Every find column becomes an order key after the query's own, so both choose the
    // same rows (a top-N, one pass, in DuckDB).
    if (select.limit.is_some() || select.offset.is_some()) && pulls.iter().any(|(_, p)| p.has_wildcard()) {
        for (e, _) in select.items.clone() {
            if !select.order_by.iter().any(|(o, _)| *o == e) {
                select.order_by.push((e, false));
            }
        }
    }
    let order: Vec<(String, bool)> =
        (0..select.order_by.len()).map(|i| (format!("mentat_order_{i}"), select.order_by[i].1)).collect();
    for ((e, _), (name, _)) in select.order_by.clone().into_iter().zip(&order) {
        select.items.push((e, Some(name.clone())));
    }
    let printed = SqlQuery::Select(Box::new(select)).to_sql_in(dialect)?;
    let inner = printed.sql;
    let m = |name: &str| format!("m.{}", ident(name));
    let mut items = Vec::new();
    let mut joins = Vec::new();
    let mut probes = Vec::new();
    for (i, col) in columns.iter_mut().enumerate() {
        match pulls.iter().find(|(j, _)| *j == i) {
            None => items.push(format!("{} AS {}", m(&col.name), ident(&col.name))),
            Some((_, pull)) => {
                let alias = format!("p{i}");
                let ids = format!("SELECT {} AS e FROM {ROWS} AS m", m(&col.name));
                if let Some(probe) =
                    pull.held_input_sql(&format!("SELECT {} AS e, 1 AS ord FROM {ROWS} AS m", m(&col.name)))
                {
                    probes.push(format!("SELECT a FROM (\n{probe}\n) AS h{i}"));
                }
                joins.push(format!(
                    "LEFT JOIN (\n{}\n) AS {alias} ON {alias}.e = {}",
                    pull.relation_sql(&ids),
                    m(&col.name)
                ));
                items.push(format!("{alias}.pull AS {}", ident(&col.name)));
                col.sql_type = pull.sql_type.clone();
            }
        }
    }
    let mut sql = format!(
        "WITH {ROWS} AS{materialized} (\n{inner}\n)\nSELECT {}\nFROM {ROWS} AS m\n{}",
        items.join(", "),
        joins.join("\n")
    );
    if !order.is_empty() {
        // DuckDB puts NULLs last either way; Spark's default puts them first when ascending
        let nulls = if spark { " NULLS LAST" } else { "" };
        let keys: Vec<String> =
            order.iter().map(|(n, desc)| format!("{} {}{nulls}", m(n), if *desc { "DESC" } else { "ASC" })).collect();
        sql.push_str(&format!("\nORDER BY {}", keys.join(", ")));
    }
    let held = (!probes.is_empty())
        .then(|| format!("WITH {ROWS} AS{materialized} (\n{inner}\n)\n{}", probes.join("\nUNION\n")));
    Ok((sql, held, printed.stages))
}

/// The typed expression of a variable for projection.
fn var_expr(ctx: &Ctx, alg: &Algebra, v: &Var) -> Result<TExpr, PlanError> {
    match alg.bindings.get(v) {
        Some(VarBinding::Expr(t)) => Ok(t.clone()),
        Some(VarBinding::Const(c)) => {
            let ty = c.natural_type();
            // a lookup ref whose value is not of its attribute's type says so
            crate::algebrize::misfit(ctx, c, &ty, Some(v))?;
            let expr = crate::algebrize::coerce(ctx, c, &ty).ok_or_else(|| PlanError::BadInput {
                form: crate::algebrize::show_constant(c),
                message: "not a value".into(),
            })?;
            Ok(TExpr::new(expr, ty))
        }
        Some(VarBinding::Pending(_)) | None => {
            Err(PlanError::unbound(&v.0, &symbol(&v.0), "not bound by any :where clause"))
        }
    }
}

/// A `:limit`/`:offset`/`n` value: a number or a scalar input.
fn bound(alg: &Algebra, b: Option<&Bound>) -> Result<Option<i64>, PlanError> {
    let n = match b {
        None => return Ok(None),
        Some(Bound::Value(n)) => *n,
        Some(Bound::Var(v)) => match alg.bindings.get(v) {
            Some(VarBinding::Const(Constant::Long(n))) => *n,
            Some(VarBinding::Expr(_)) => {
                return Err(PlanError::BadInput {
                    form: v.0.clone(),
                    message: "is bound by the query's clauses, and a limit, an offset or the n of an aggregate is \
                              a number or a scalar input"
                        .into(),
                })
            }
            // an input that is not a long (`"x"`, `2.5`): named with its value
            Some(VarBinding::Const(c)) => {
                return Err(PlanError::BadInput {
                    form: crate::algebrize::show_constant(c),
                    message: format!(
                        "given for {v}, which is a limit, an offset or the n of an aggregate: it must be a long"
                    ),
                })
            }
            _ => {
                return Err(PlanError::unbound(
                    &v.0,
                    &symbol(&v.0),
                    "limits and counts take a number or a scalar input",
                ))
            }
        },
    };
    if n < 0 {
        return Err(PlanError::BadInput { form: n.to_string(), message: "must not be negative".into() });
    }
    Ok(Some(n))
}

/// The SQL of one aggregate over its variable's expression.
fn aggregate(alg: &Algebra, a: &Aggregate, x: TExpr) -> Result<(Expr, Ty), PlanError> {
    let agg = |func: &'static str, distinct: bool, args: Vec<Expr>| Expr::Agg { func, distinct, args };
    let numeric = || -> Result<(), PlanError> {
        if x.ty.is_numeric() {
            Ok(())
        } else {
            Err(PlanError::type_mismatch(&a.form, format!("{} needs numbers, {} is {}", a.func, a.var, x.ty.a_name())))
        }
    };
    if a.n.is_some()
        && matches!(
            a.func.as_str(),
            "count" | "count-distinct" | "sum" | "avg" | "median" | "variance" | "stddev" | "distinct"
        )
    {
        return Err(PlanError::syntax(&a.form, format!("{0} takes one variable: ({0} ?x)", a.func)));
    }
    let n = bound(alg, a.n.as_ref())?;
    let list = Ty::List(Box::new(x.ty.clone()));
    Ok(match (a.func.as_str(), n) {
        ("count", None) => (agg("count", false, vec![]), Ty::LONG),
        ("count-distinct", None) => (agg("count", true, vec![x.expr]), Ty::LONG),
        ("sum", None) => {
            numeric()?;
            // DuckDB sums a HUGEINT as a HUGEINT and a DECIMAL at its scale: bigint and bigdec sums stay exact.
            let ty = match &x.ty {
                Ty::Value(ValueType::Double | ValueType::Float) => Ty::DOUBLE,
                Ty::Value(t @ (ValueType::BigInt | ValueType::BigDec)) => Ty::Value(*t),
                _ => Ty::LONG,
            };
            let sum = agg("sum", false, vec![x.expr]);
            if ty != Ty::LONG {
                (sum, ty)
            } else {
                // DuckDB sums BIGINTs as a HUGEINT; a sum outside a long fails here by name, as Clojure's `+` throws
                // on a long overflow, and not in the output's cast with the statement's text (DuckDB computes the
                // repeated aggregate once).
                let fits = Expr::And(vec![
                    Expr::bin(BinOp::Ge, sum.clone(), Expr::int(i64::MIN)),
                    Expr::bin(BinOp::Le, sum.clone(), Expr::int(i64::MAX)),
                ]);
                let message = format!("{} overflows a long: sum a :db.type/bigint attribute instead", show(&a.form));
                let fail = Expr::Func("error", vec![Expr::Lit(Lit::Str(message))]);
                (Expr::Case { whens: vec![(fits, sum)], otherwise: Some(Box::new(fail)) }, ty)
            }
        }
        ("avg" | "median" | "variance" | "stddev", None) => {
            numeric()?;
            let func = match a.func.as_str() {
                "avg" => "avg",
                "median" => "median",
                "variance" => "var_pop",
                _ => "stddev_pop",
            };
            (agg(func, false, vec![x.expr.cast("DOUBLE")]), Ty::DOUBLE)
        }
        // none of them, as DataScript's (min 0 ?x) (DuckDB's min(x, 0) is an error)
        ("min" | "max", Some(0)) => (
            Expr::Slice(Box::new(agg("list", false, vec![x.expr])), Box::new(Expr::int(1)), Box::new(Expr::int(0))),
            list,
        ),
        // keywords by Clojure's keyword order, not as text
        ("min" | "max", None) if x.ty.is_keyword() => {
            let func = if a.func == "min" { "arg_min" } else { "arg_max" };
            let key = keyword_order(x.expr.clone());
            (agg(func, false, vec![x.expr, key]), x.ty)
        }
        ("min" | "max", Some(n)) if x.ty.is_keyword() => {
            let func = if a.func == "min" { "arg_min" } else { "arg_max" };
            let key = keyword_order(x.expr.clone());
            (agg(func, false, vec![x.expr, key, Expr::int(n)]), list)
        }
        ("min" | "max", None) => {
            let func = if a.func == "min" { "min" } else { "max" };
            (agg(func, false, vec![x.expr]), x.ty)
        }
        ("min" | "max", Some(n)) => {
            let func = if a.func == "min" { "min" } else { "max" };
            (agg(func, false, vec![x.expr, Expr::int(n)]), list)
        }
        ("distinct", None) => (agg("list", true, vec![x.expr]), list),
        // Datomic: up to n distinct values chosen at random
        ("sample", Some(n)) => (
            Expr::Slice(
                Box::new(Expr::Shuffle(Box::new(agg("list", true, vec![x.expr])))),
                Box::new(Expr::int(1)),
                Box::new(Expr::int(n)),
            ),
            list,
        ),
        // Datomic: n values drawn at random from the group's values, repeats possible; DataScript's `(rand ?x)`:
        // one of them
        ("rand", n) => {
            let values = Box::new(agg("list", false, vec![x.expr]));
            match n {
                Some(n) => (Expr::Draw(values, Some(Box::new(Expr::int(n)))), list),
                None => (Expr::Draw(values, None), x.ty),
            }
        }
        (f, _) => return Err(PlanError::unsupported(&a.form, format!("aggregate {f} with these arguments"))),
    })
}

/// A column name not used yet: `name`, else `name_2`, `name_3`, ...
fn dedupe(columns: &[OutputColumn], name: String) -> String {
    // DuckDB's column names are case-insensitive: `?N` and `?n` are two variables but would be one column name
    let taken = |n: &str| columns.iter().any(|c| c.name.to_lowercase() == n.to_lowercase());
    if !taken(&name) {
        return name;
    }
    (2..).map(|i| format!("{name}_{i}")).find(|n| !taken(n)).unwrap_or(name)
}

/// A literal, possibly cast: the projection of a constant-bound variable.
fn is_literal(e: &Expr) -> bool {
    match e {
        Expr::Lit(_) => true,
        Expr::Cast(inner, _) => is_literal(inner),
        _ => false,
    }
}
