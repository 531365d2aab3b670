//! Predicates `[(pred args...)]` and function clauses `[(f args...) binding]`.
//!
//! Supported: comparisons `= != not= < <= > >=` (variadic, as in Clojure), arithmetic `+ - * /`
//! (`/` always yields a double), `str`, `subs` (0-based, as in Clojure), `count` (string length),
//! `starts-with?`, `ends-with?`, `includes?`, `contains?` (of a set literal), `re-find`, `re-matches`,
//! `re-pattern`, `like` (SQL LIKE), type predicates (`string?`, `keyword?`, `int?`, `double?`, `number?`, `boolean?`,
//! `inst?`, `uuid?`, decided from the schema's types at compile time), `ground`, `get-else`,
//! `get-some`, `missing?`, `tuple`, `untuple`, `identity`, and the log functions `tx-ids` and `tx-data`
//! (see `txlog.rs`). A function that returns nil binds
//! nothing (Datomic drops the row), so nullable results are filtered with `IS NOT NULL`.

use super::{coerce, read_constant, require_numeric, Scope, TExpr, VarBinding};
use crate::error::{show, PlanError};
use crate::parse::{Binding, Call, Term, Var};
use crate::schema::{Attribute, ValueType};
use crate::source::Ctx;
use crate::sql::{BinOp, Expr, FromItem, JoinKind, Lit, Name, Query, Select};
use crate::types::{keyword_order, literal, Class, Constant, Ty};
use edn_format::Value;

/// An argument: a typed expression, or a constant still to be typed by its use.
#[derive(Clone, Debug)]
pub(crate) enum Operand {
    Typed(TExpr),
    Const(Constant),
}

/// Datalog's comparison predicates and their SQL operators (also the entity path's filters, `crate::entity`).
pub(crate) const COMPARISONS: [(&str, BinOp); 8] = [
    ("=", BinOp::Eq),
    ("==", BinOp::Eq),
    ("!=", BinOp::Ne),
    ("not=", BinOp::Ne),
    ("<", BinOp::Lt),
    ("<=", BinOp::Le),
    (">", BinOp::Gt),
    (">=", BinOp::Ge),
];

/// The functions and predicates a query may call, as an unknown function's error lists them (the README's
/// "Datalog: what the query language covers" says the same).
const FUNCTIONS: &str = "the functions are = == != not= < <= > >=, + - * / inc dec quot rem mod max min even? odd?, \
     str subs count starts-with? ends-with? includes? upper-case lower-case trim blank? like, re-pattern re-find \
     re-matches, contains? (of a set), identity tuple untuple ground, get-else get-some missing?, tx-ids tx-data \
     fulltext, and the type predicates string? keyword? int? double? number? boolean? inst? uuid? uri? bytes?";

impl Scope {
    /// `[(pred args...)]`: a boolean filter.
    pub(crate) fn predicate(&mut self, ctx: &Ctx, call: &Call) -> Result<(), PlanError> {
        let (te, _) = self.value_call(ctx, call)?;
        match te.expr {
            Expr::Lit(Lit::Bool(true)) => {}
            Expr::Lit(Lit::Bool(false)) => self.prune(format!("{} is always false", show(&call.form))),
            expr if te.ty == Ty::BOOLEAN => self.alg.filters.push(expr),
            // Clojure truthiness: any non-nil value passes.
            expr => self.alg.filters.push(Expr::IsNotNull(Box::new(expr))),
        }
        Ok(())
    }

    /// `[(f args...) binding]`.
    pub(crate) fn function(&mut self, ctx: &Ctx, call: &Call, binding: &Binding) -> Result<(), PlanError> {
        let form = &call.form;
        match call.name.as_str() {
            "ground" => return self.ground(ctx, call, binding),
            "get-some" => return self.get_some(ctx, call, binding),
            "tx-ids" => return self.tx_ids(ctx, call, binding),
            "tx-data" => return self.tx_data(ctx, call, binding),
            "fulltext" => return self.fulltext(ctx, call, binding),
            "untuple" => {
                let Binding::Tuple(vars) = binding else {
                    return Err(PlanError::syntax(form, "untuple binds a tuple [?a ?b]"));
                };
                let t = self.typed_arg(ctx, call, 0)?;
                return self.bind_tuple(ctx, call, vars, t);
            }
            _ => {}
        }
        // a function whose value is a tuple (`identity` of a tuple constant or input) binds a tuple form
        if let Binding::Tuple(vars) = binding {
            let (te, nullable) = self.value_call(ctx, call)?;
            if nullable {
                self.alg.filters.push(Expr::IsNotNull(Box::new(te.expr.clone())));
            }
            return self.bind_tuple(ctx, call, vars, te);
        }
        let Binding::Scalar(var) = binding else {
            return Err(PlanError::unsupported(form, format!("{} binds a single variable", call.name)));
        };
        let (te, nullable) = self.value_call(ctx, call)?;
        if nullable {
            self.alg.filters.push(Expr::IsNotNull(Box::new(te.expr.clone())));
        }
        self.bind_computed(ctx, call, var, te)
    }

    /// Binds the elements of a tuple value `t` to a tuple binding `[?a ?b]` (`_` skips one).
    fn bind_tuple(&mut self, ctx: &Ctx, call: &Call, vars: &[Option<Var>], t: TExpr) -> Result<(), PlanError> {
        let form = &call.form;
        // A homogeneous tuple (a LIST, `:db/tupleType`) binds as many variables as it has elements: rows whose
        // tuple has another length do not match.
        if let Ty::List(elem) = &t.ty {
            let len = Expr::Func("len", vec![t.expr.clone()]);
            self.alg.filters.push(Expr::eq(len, Expr::int(vars.len() as i64)));
            for (i, v) in vars.iter().enumerate() {
                if let Some(v) = v {
                    let item = Expr::Func("list_extract", vec![t.expr.clone(), Expr::int(i as i64 + 1)]);
                    self.bind_computed(ctx, call, v, TExpr::new(item, (**elem).clone()))?;
                }
            }
            return Ok(());
        }
        let Ty::Tuple(tys) = &t.ty else {
            return Err(PlanError::type_mismatch(form, format!("{} of {} binds no tuple", call.name, t.ty.a_name())));
        };
        if tys.len() != vars.len() {
            return Err(PlanError::type_mismatch(form, format!("the tuple has {} elements", tys.len())));
        }
        for (i, (v, ty)) in vars.iter().zip(tys).enumerate() {
            if let Some(v) = v {
                let field = Expr::Field(Box::new(t.expr.clone()), Name::new(&format!("f{i}")));
                self.bind_computed(ctx, call, v, TExpr::new(field, ty.clone()))?;
            }
        }
        Ok(())
    }

    /// Binds a function's result and records that the call's inputs determine it.
    fn bind_computed(&mut self, ctx: &Ctx, call: &Call, var: &Var, te: TExpr) -> Result<(), PlanError> {
        let inputs: Vec<Var> =
            call.args.iter().filter_map(|a| if let Term::Var(v) = a { Some(v.clone()) } else { None }).collect();
        self.alg.fds.push((inputs, var.clone()));
        self.bind(ctx, var, te, &call.form)
    }

    /// Binds a variable to a constant (`ground`, scalar inputs).
    pub(crate) fn bind_const(&mut self, ctx: &Ctx, var: &Var, c: Constant, form: &Value) -> Result<(), PlanError> {
        match self.lookup(var).cloned() {
            None => {
                self.alg.bindings.insert(var.clone(), VarBinding::Const(c));
            }
            Some(VarBinding::Expr(prev)) => match coerce(ctx, &c, &prev.ty) {
                Some(lit) => self.alg.filters.push(Expr::eq(prev.expr, lit)),
                None => self.prune(format!("{var} cannot be {}", show(form))),
            },
            Some(VarBinding::Const(prev)) => {
                if prev != c {
                    self.prune(format!("{var} cannot be two constants"));
                }
            }
            Some(VarBinding::Pending(list)) => {
                if list.contains(&c) {
                    self.alg.bindings.insert(var.clone(), VarBinding::Const(c));
                } else {
                    self.prune(format!("{var} cannot be {}", show(form)));
                }
            }
        }
        Ok(())
    }

    fn ground(&mut self, ctx: &Ctx, call: &Call, binding: &Binding) -> Result<(), PlanError> {
        let form = &call.form;
        // a constant, or a variable bound to one (a scalar input): `[(ground ?in) [?a _ ?c]]`
        let value = match call.args.as_slice() {
            [Term::Const(value)] => value.clone(),
            [Term::Var(v)] => match self.lookup(v) {
                Some(VarBinding::Const(c)) => crate::algebrize::constant_value(c),
                _ => return Err(PlanError::syntax(form, "ground takes a constant or an input bound to one")),
            },
            _ => return Err(PlanError::syntax(form, "ground takes one constant")),
        };
        let value = &value;
        let items = |v: &Value| -> Result<Vec<Value>, PlanError> {
            match v {
                Value::Vector(items) | Value::List(items) => Ok(items.clone()),
                Value::Set(items) => Ok(items.iter().cloned().collect()),
                other => Err(PlanError::syntax(other, "ground of a collection binding takes a collection")),
            }
        };
        match binding {
            Binding::Scalar(var) => {
                let c = read_constant(ctx, value, form)?;
                self.bind_const(ctx, var, c, form)
            }
            Binding::Tuple(vars) => {
                let vals = items(value)?;
                if vals.len() != vars.len() {
                    return Err(PlanError::syntax(form, "ground tuple has the wrong length"));
                }
                for (v, val) in vars.iter().zip(&vals) {
                    if let Some(v) = v {
                        let c = read_constant(ctx, val, form)?;
                        self.bind_const(ctx, v, c, form)?;
                    }
                }
                Ok(())
            }
            Binding::Collection(var) => {
                let rows = items(value)?
                    .iter()
                    .map(|v| Ok(vec![read_constant(ctx, v, form)?]))
                    .collect::<Result<_, PlanError>>()?;
                self.add_values(ctx, vec![Some(var.clone())], rows)
            }
            Binding::Relation(vars) => {
                let mut rows = Vec::new();
                for row in items(value)? {
                    let row = items(&row)?;
                    if row.len() != vars.len() {
                        return Err(PlanError::syntax(form, "ground relation rows must match the binding"));
                    }
                    rows.push(row.iter().map(|v| read_constant(ctx, v, form)).collect::<Result<_, _>>()?);
                }
                self.add_values(ctx, vars.clone(), rows)
            }
        }
    }

    /// The operand of a term.
    pub(crate) fn operand(&self, ctx: &Ctx, term: &Term, form: &Value) -> Result<Operand, PlanError> {
        match term {
            Term::Var(v) => match self.lookup(v) {
                Some(VarBinding::Expr(te)) => Ok(Operand::Typed(te.clone())),
                Some(VarBinding::Const(c)) => Ok(Operand::Const(c.clone())),
                Some(VarBinding::Pending(_)) | None => {
                    Err(PlanError::unbound(&v.0, form, "function and predicate arguments must be bound"))
                }
            },
            Term::Const(c) => Ok(Operand::Const(read_constant(ctx, c, form)?)),
            Term::Blank => Err(PlanError::syntax(form, "_ is not a function argument")),
            Term::Src => Err(PlanError::syntax(form, "a source is not an argument of this function")),
        }
    }

    fn typed_arg(&self, ctx: &Ctx, call: &Call, i: usize) -> Result<TExpr, PlanError> {
        let term = call.args.get(i).ok_or_else(|| {
            PlanError::syntax(&call.form, format!("{} needs at least {} arguments", call.name, i + 1))
        })?;
        let op = self.operand(ctx, term, &call.form)?;
        typed(ctx, op, &call.form)
    }

    fn typed_args(&self, ctx: &Ctx, call: &Call) -> Result<Vec<TExpr>, PlanError> {
        (0..call.args.len()).map(|i| self.typed_arg(ctx, call, i)).collect()
    }

    fn text_arg(&self, ctx: &Ctx, call: &Call, i: usize) -> Result<Expr, PlanError> {
        let t = self.typed_arg(ctx, call, i)?;
        match t.ty.class() {
            Class::Text | Class::Keyword | Class::Any => Ok(t.expr),
            _ => Err(PlanError::type_mismatch(
                &call.form,
                format!("{} expects strings, got {}", call.name, t.ty.a_name()),
            )),
        }
    }

    /// Argument `i` as a long (an entid counts), or a type mismatch naming the call.
    fn long_arg(&self, ctx: &Ctx, call: &Call, i: usize) -> Result<Expr, PlanError> {
        let t = self.typed_arg(ctx, call, i)?;
        if t.ty == Ty::LONG || t.ty == Ty::REF {
            Ok(t.expr)
        } else {
            Err(PlanError::type_mismatch(&call.form, format!("{} takes longs, got {}", call.name, t.ty.a_name())))
        }
    }

    fn arity(call: &Call, allowed: &[usize]) -> Result<(), PlanError> {
        if allowed.contains(&call.args.len()) {
            Ok(())
        } else {
            Err(PlanError::syntax(&call.form, format!("{} takes {:?} arguments", call.name, allowed)))
        }
    }

    /// The value of a call: its typed expression and whether it may be NULL.
    fn value_call(&mut self, ctx: &Ctx, call: &Call) -> Result<(TExpr, bool), PlanError> {
        let form = &call.form;
        let name = call.name.as_str();
        if let Some((_, op)) = COMPARISONS.iter().find(|(n, _)| *n == name) {
            return Ok((TExpr::new(self.comparison(ctx, call, *op)?, Ty::BOOLEAN), false));
        }
        let boolean = |e: Expr| Ok((TExpr::new(e, Ty::BOOLEAN), false));
        let text = |e: Expr| Ok((TExpr::new(e, Ty::STRING), false));
        match name {
            "+" | "-" | "*" | "/" => Ok((self.arithmetic(ctx, call)?, false)),
            // Clojure's `(str)` is ""
            "str" if call.args.is_empty() => text(Expr::str("")),
            "str" => {
                let parts =
                    (0..call.args.len())
                        .map(|i| Ok(as_text(self.typed_arg(ctx, call, i)?)))
                        .collect::<Result<Vec<_>, PlanError>>()?;
                text(Expr::Func("concat", parts))
            }
            "subs" => {
                Self::arity(call, &[2, 3])?;
                let s = self.text_arg(ctx, call, 0)?;
                let start = self.typed_arg(ctx, call, 1)?;
                require_numeric(&start, form)?;
                let from = Expr::bin(BinOp::Add, start.expr.clone(), Expr::int(1));
                let mut args = vec![s, from];
                if call.args.len() == 3 {
                    let end = self.typed_arg(ctx, call, 2)?;
                    require_numeric(&end, form)?;
                    args.push(Expr::bin(BinOp::Sub, end.expr, start.expr));
                }
                text(Expr::Func("substring", args))
            }
            "count" => {
                Self::arity(call, &[1])?;
                Ok((TExpr::new(Expr::Func("length", vec![self.text_arg(ctx, call, 0)?]), Ty::LONG), false))
            }
            "starts-with?" | "ends-with?" | "includes?" | "like" => {
                Self::arity(call, &[2])?;
                let (s, p) = (self.text_arg(ctx, call, 0)?, self.text_arg(ctx, call, 1)?);
                boolean(match name {
                    "starts-with?" => Expr::Func("starts_with", vec![s, p]),
                    "ends-with?" => Expr::Func("suffix", vec![s, p]),
                    "includes?" => Expr::Func("contains", vec![s, p]),
                    _ => Expr::bin(BinOp::Like, s, p),
                })
            }
            "re-pattern" => {
                Self::arity(call, &[1])?;
                text(self.text_arg(ctx, call, 0)?)
            }
            "re-find" | "re-matches" => {
                Self::arity(call, &[2])?;
                let (re, s) = (self.text_arg(ctx, call, 0)?, self.text_arg(ctx, call, 1)?);
                let matches = Expr::Func(
                    if name == "re-find" { "regexp_matches" } else { "regexp_full_match" },
                    vec![s.clone(), re.clone()],
                );
                let value = if name == "re-find" { Expr::Func("regexp_extract", vec![s, re]) } else { s };
                Ok((TExpr::new(Expr::Case { whens: vec![(matches, value)], otherwise: None }, Ty::STRING), true))
            }
            // clojure.core's `contains?` of a set literal: membership, each element compared as `=` compares
            // it (so a value of another type than the variable's is refused as `=` refuses it). Of a vector
            // Clojure's `contains?` tests indexes, which no query means: refused with the set to write instead.
            "contains?" => {
                Self::arity(call, &[2])?;
                let items: Vec<Value> = match &call.args[0] {
                    Term::Const(Value::Set(items)) => items.iter().cloned().collect(),
                    Term::Const(v @ (Value::Vector(_) | Value::List(_))) => {
                        return Err(PlanError::syntax(
                            v,
                            "contains? of a vector tests its indexes in Clojure, not its values: write the values \
                             as a set #{...}",
                        ))
                    }
                    _ => {
                        return Err(PlanError::unsupported(form, "contains? takes a set literal #{...}, then a value"))
                    }
                };
                let x = self.operand(ctx, &call.args[1], form)?;
                let mut eqs = Vec::with_capacity(items.len());
                for item in &items {
                    let c = Operand::Const(read_constant(ctx, item, form)?);
                    eqs.push(compare(ctx, BinOp::Eq, &x, &c, form)?);
                }
                boolean(match eqs.len() {
                    0 => Expr::bool(false),
                    1 => eqs.remove(0),
                    _ => Expr::Or(eqs),
                })
            }
            "identity" => {
                Self::arity(call, &[1])?;
                Ok((self.typed_arg(ctx, call, 0)?, false))
            }
            "tuple" => {
                let args = self.typed_args(ctx, call)?;
                let tys = args.iter().map(|a| a.ty.clone()).collect();
                let fields = args.into_iter().enumerate().map(|(i, a)| (Name::new(&format!("f{i}")), a.expr)).collect();
                Ok((TExpr::new(Expr::Struct(fields), Ty::Tuple(tys)), false))
            }
            "get-else" => Ok((self.get_else(ctx, call)?, false)),
            "missing?" => boolean(self.missing(ctx, call)?),
            // clojure.core's, on numbers: `inc` / `dec` keep a long a long; `quot` (toward zero), `rem` (the
            // dividend's sign) and `mod` (the divisor's sign) of longs, an error for a zero divisor as Clojure's;
            // `max` / `min` of one or more numbers, a double when any is one
            "inc" | "dec" => {
                Self::arity(call, &[1])?;
                let x = self.typed_arg(ctx, call, 0)?;
                require_numeric(&x, form)?;
                let op = if name == "inc" { BinOp::Add } else { BinOp::Sub };
                let (one, ty) = if x.ty == Ty::DOUBLE {
                    (Expr::Lit(Lit::Double(1.0)), Ty::DOUBLE)
                } else {
                    (Expr::int(1), Ty::LONG)
                };
                Ok((TExpr::new(Expr::bin(op, x.expr, one), ty), false))
            }
            "quot" | "rem" | "mod" => {
                Self::arity(call, &[2])?;
                let (a, b) = (self.long_arg(ctx, call, 0)?, self.long_arg(ctx, call, 1)?);
                let e = match name {
                    "quot" => Expr::Func("divide", vec![a, b.clone()]),
                    "rem" => Expr::Func("mod", vec![a, b.clone()]),
                    _ => Expr::Func(
                        "mod",
                        vec![Expr::bin(BinOp::Add, Expr::Func("mod", vec![a, b.clone()]), b.clone()), b.clone()],
                    ),
                };
                // a zero divisor fails by the form's name, as Clojure throws (DuckDB's own error quotes the SQL)
                let message = format!("{} divides by zero", show(form));
                let fail = Expr::Func("error", vec![Expr::Lit(Lit::Str(message))]);
                let e = Expr::Case { whens: vec![(Expr::eq(b, Expr::int(0)), fail)], otherwise: Some(Box::new(e)) };
                Ok((TExpr::new(e, Ty::LONG), false))
            }
            "max" | "min" => {
                if call.args.is_empty() {
                    return Err(PlanError::syntax(form, format!("{name} takes one or more numbers")));
                }
                let args = self.typed_args(ctx, call)?;
                for a in &args {
                    require_numeric(a, form)?;
                }
                let double = args.iter().any(|a| a.ty == Ty::DOUBLE);
                let exprs = args.into_iter().map(|a| if double { a.expr.cast("DOUBLE") } else { a.expr }).collect();
                let ty = if double { Ty::DOUBLE } else { Ty::LONG };
                Ok((TExpr::new(Expr::Func(if name == "max" { "greatest" } else { "least" }, exprs), ty), false))
            }
            "even?" | "odd?" => {
                Self::arity(call, &[1])?;
                let x = self.long_arg(ctx, call, 0)?;
                let rem = Expr::Func("mod", vec![x, Expr::int(2)]);
                boolean(if name == "even?" {
                    Expr::eq(rem, Expr::int(0))
                } else {
                    Expr::bin(BinOp::Ne, rem, Expr::int(0))
                })
            }
            // clojure.string's
            "upper-case" | "lower-case" | "trim" => {
                Self::arity(call, &[1])?;
                let s = self.text_arg(ctx, call, 0)?;
                text(Expr::Func(
                    match name {
                        "upper-case" => "upper",
                        "lower-case" => "lower",
                        _ => "trim",
                    },
                    vec![s],
                ))
            }
            "blank?" => {
                Self::arity(call, &[1])?;
                boolean(Expr::eq(Expr::Func("trim", vec![self.text_arg(ctx, call, 0)?]), Expr::str("")))
            }
            _ => match type_predicate(name) {
                Some(types) => {
                    Self::arity(call, &[1])?;
                    let t = self.typed_arg(ctx, call, 0)?;
                    match &t.ty {
                        Ty::Value(v) => boolean(Expr::bool(types.contains(v))),
                        Ty::Mixed => {
                            Err(PlanError::unsupported(form, "type predicates on a variable of mixed attribute types"))
                        }
                        _ => boolean(Expr::bool(false)),
                    }
                }
                None => Err(PlanError::unsupported(form, format!("unknown function {name}; {FUNCTIONS}"))),
            },
        }
    }

    fn comparison(&self, ctx: &Ctx, call: &Call, op: BinOp) -> Result<Expr, PlanError> {
        let ops: Vec<Operand> = call.args.iter().map(|t| self.operand(ctx, t, &call.form)).collect::<Result<_, _>>()?;
        if ops.is_empty() {
            return Err(PlanError::syntax(&call.form, format!("{} needs arguments", call.name)));
        }
        let pair_op = if op == BinOp::Ne { BinOp::Eq } else { op };
        let pairs =
            ops.windows(2).map(|w| compare(ctx, pair_op, &w[0], &w[1], &call.form)).collect::<Result<Vec<_>, _>>()?;
        let all = Expr::all(pairs);
        Ok(if op == BinOp::Ne {
            match all {
                Expr::Bin(BinOp::Eq, a, b) => Expr::Bin(BinOp::Ne, a, b),
                other => other.negate(),
            }
        } else {
            all
        })
    }

    fn arithmetic(&self, ctx: &Ctx, call: &Call) -> Result<TExpr, PlanError> {
        let args = self.typed_args(ctx, call)?;
        for a in &args {
            require_numeric(a, &call.form)?;
        }
        let (op, unit) = match call.name.as_str() {
            "+" => (BinOp::Add, 0),
            "-" => (BinOp::Sub, 0),
            "*" => (BinOp::Mul, 1),
            _ => (BinOp::Div, 1),
        };
        // Clojure's contagion: a double or float makes a double (`/` always does here); else a bigdec a bigdec, a
        // bigint a bigint, and longs stay longs
        let has = |t: ValueType| args.iter().any(|a| a.ty == Ty::Value(t));
        let double = op == BinOp::Div || has(ValueType::Double) || has(ValueType::Float);
        if !double && has(ValueType::BigDec) {
            return Ok(bigdec_arithmetic(op, unit, args));
        }
        let big = !double && has(ValueType::BigInt);
        let ty = if double {
            Ty::DOUBLE
        } else if big {
            Ty::Value(ValueType::BigInt)
        } else {
            Ty::LONG
        };
        let mut exprs: Vec<Expr> = args
            .into_iter()
            .map(|a| {
                if double {
                    a.expr.cast("DOUBLE")
                } else if big {
                    a.expr.cast("HUGEINT")
                } else {
                    a.expr
                }
            })
            .collect();
        if exprs.len() == 1 && matches!(op, BinOp::Sub | BinOp::Div) {
            let u = if double { Expr::Lit(Lit::Double(unit as f64)) } else { Expr::int(unit) };
            exprs.insert(0, u);
        }
        let mut it = exprs.into_iter();
        let first = it.next().unwrap_or(Expr::int(unit));
        Ok(TExpr::new(it.fold(first, |acc, e| Expr::bin(op, acc, e)), ty))
    }

    /// The attribute named by argument `i` of `get-else`, `get-some` or `missing?`.
    fn attr_arg(&self, ctx: &Ctx, call: &Call, i: usize) -> Result<Attribute, PlanError> {
        let Some(Term::Const(c)) = call.args.get(i) else {
            return Err(PlanError::syntax(&call.form, format!("{} takes an attribute constant", call.name)));
        };
        let (attr, reverse) = self.attribute(ctx, c, &call.form)?;
        if reverse {
            return Err(PlanError::unsupported(&call.form, format!("reverse attributes in {}", call.name)));
        }
        Ok(attr)
    }

    /// The entity argument (after `$`) as a ref expression.
    fn entity_arg(&self, ctx: &Ctx, call: &Call) -> Result<Expr, PlanError> {
        if call.args.first() != Some(&Term::Src) {
            return Err(PlanError::syntax(&call.form, format!("{} starts with the source $", call.name)));
        }
        let term = call.args.get(1).ok_or_else(|| PlanError::syntax(&call.form, "missing entity"))?;
        match self.operand(ctx, term, &call.form)? {
            Operand::Typed(t) => Ok(t.expr),
            Operand::Const(c) => coerce(ctx, &c, &Ty::REF).ok_or_else(|| {
                PlanError::type_mismatch(&call.form, "the entity must be an entid, ident or lookup ref")
            }),
        }
    }

    /// `[(get-else $ ?e :attr default) ?v]`: a LEFT JOIN on the attribute (cardinality one only,
    /// as in Datomic) and `coalesce(v, default)`.
    fn get_else(&mut self, ctx: &Ctx, call: &Call) -> Result<TExpr, PlanError> {
        Self::arity(call, &[4])?;
        let attr = self.attr_arg(ctx, call, 2)?;
        if attr.many {
            return Err(PlanError::unsupported(
                &call.form,
                format!("get-else on cardinality-many attribute {}", attr.ident),
            ));
        }
        let ty = crate::types::attr_ty(&attr);
        let default = match self.operand(ctx, &call.args[3], &call.form)? {
            Operand::Const(c) => coerce(ctx, &c, &ty)
                .ok_or_else(|| PlanError::type_mismatch(&call.form, format!("the default must be {}", ty.a_name())))?,
            Operand::Typed(t) if t.ty.join(&ty).is_some() => t.expr,
            Operand::Typed(t) => {
                return Err(PlanError::type_mismatch(
                    &call.form,
                    format!("the default is {} but {} is {}", t.ty.a_name(), attr.ident, ty.a_name()),
                ))
            }
        };
        let alias = self.left_join(ctx, call, &attr)?;
        Ok(TExpr::new(Expr::Func("coalesce", vec![Expr::col(&alias, "v"), default]), ty))
    }

    /// LEFT JOINs the datoms of `attr` on the call's entity argument; returns the alias.
    fn left_join(&mut self, ctx: &Ctx, call: &Call, attr: &Attribute) -> Result<Name, PlanError> {
        let entity = self.entity_arg(ctx, call)?;
        let alias = ctx.alias("t");
        let key = match &call.args[1] {
            Term::Var(v) => vec![v.clone()],
            _ => vec![],
        };
        let item = FromItem {
            source: ctx.datoms(attr.entid),
            alias: alias.clone(),
            kind: JoinKind::Left,
            lateral: false,
            on: vec![Expr::eq(Expr::col(&alias, "e"), entity)],
        };
        self.alg.sources.push(super::Source {
            item,
            key: Some(key),
            alt_key: None,
            vars: vec![],
            pinned: true,
            values: None,
        });
        Ok(alias)
    }

    /// `[(get-some $ ?e :a1 :a2 ...) [?a ?v]]`: the first attribute that has a value (cardinality
    /// one attributes of one SQL type).
    fn get_some(&mut self, ctx: &Ctx, call: &Call, binding: &Binding) -> Result<(), PlanError> {
        let form = &call.form;
        let Binding::Tuple(vars) = binding else {
            return Err(PlanError::syntax(form, "get-some binds a tuple [?attr ?value]"));
        };
        if vars.len() != 2 || call.args.len() < 3 {
            return Err(PlanError::syntax(
                form,
                "get-some takes $, an entity and attributes, and binds [?attr ?value]",
            ));
        }
        let attrs: Vec<Attribute> =
            (2..call.args.len()).map(|i| self.attr_arg(ctx, call, i)).collect::<Result<_, _>>()?;
        if attrs.iter().any(|a| a.many) {
            return Err(PlanError::unsupported(form, "get-some on cardinality-many attributes"));
        }
        let first = attrs[0].value_type;
        let ty = if attrs.iter().all(|a| a.value_type == first) { Ty::Value(first) } else { Ty::Mixed };
        let mut whens = Vec::new();
        let mut values = Vec::new();
        for a in &attrs {
            let alias = self.left_join(ctx, call, a)?;
            whens.push((Expr::IsNotNull(Box::new(Expr::col(&alias, "e"))), Expr::int(a.entid)));
            let v = Expr::col(&alias, "v");
            values.push(if ty == Ty::Mixed && a.sql_type() != "VARCHAR" { v.cast("VARCHAR") } else { v });
        }
        let attr_expr = Expr::Case { whens, otherwise: None };
        self.alg.filters.push(Expr::IsNotNull(Box::new(attr_expr.clone())));
        if let Some(v) = &vars[0] {
            self.bind_computed(ctx, call, v, TExpr::new(attr_expr, Ty::REF))?;
        }
        if let Some(v) = &vars[1] {
            self.bind_computed(ctx, call, v, TExpr::new(Expr::Func("coalesce", values), ty))?;
        }
        Ok(())
    }

    /// `[(missing? $ ?e :attr)]`: NOT EXISTS over the attribute's datoms.
    fn missing(&self, ctx: &Ctx, call: &Call) -> Result<Expr, PlanError> {
        Self::arity(call, &[3])?;
        let attr = self.attr_arg(ctx, call, 2)?;
        let entity = self.entity_arg(ctx, call)?;
        let alias = ctx.alias("t");
        let q = Select {
            from: vec![FromItem::inner(ctx.datoms(attr.entid), &alias)],
            filters: vec![Expr::eq(Expr::col(&alias, "e"), entity)],
            ..Default::default()
        };
        Ok(Expr::Exists(Box::new(Query::Select(Box::new(q)))).negate())
    }
}

/// A constant operand typed on its own (keywords stay keywords, lookup refs become subqueries).
pub(crate) fn typed(ctx: &Ctx, op: Operand, form: &Value) -> Result<TExpr, PlanError> {
    match op {
        Operand::Typed(t) => Ok(t),
        Operand::Const(c) => {
            let ty = c.natural_type();
            let expr = coerce(ctx, &c, &ty)
                .ok_or_else(|| PlanError::UnknownIdent { ident: super::show_constant(&c), form: show(form) })?;
            Ok(TExpr::new(expr, ty))
        }
    }
}

/// `+ - *` with a bigdec among the numbers (no double): exact in DuckDB's DECIMAL, each step's result a bigdec
/// (`DECIMAL(38,18)`, the attribute type's). Longs and bigints enter as `DECIMAL(38,0)`. A product's operands go
/// in at 9 decimal places so that its scale (their sum) stays 18 and it overflows only past 10^20 (DuckDB's
/// DECIMAL has 38 digits; Clojure's BigDecimal has no bound).
fn bigdec_arithmetic(op: BinOp, unit: i64, args: Vec<TExpr>) -> TExpr {
    let dec = crate::schema::BIGDEC_SQL;
    let bigdec = Ty::Value(ValueType::BigDec);
    let mut exprs: Vec<Expr> =
        args.into_iter().map(|a| if a.ty == bigdec { a.expr } else { a.expr.cast("DECIMAL(38,0)") }).collect();
    if exprs.len() == 1 && op == BinOp::Sub {
        exprs.insert(0, Expr::int(unit).cast("DECIMAL(38,0)"));
    }
    let mut it = exprs.into_iter();
    let first = it.next().unwrap_or_else(|| Expr::int(unit).cast("DECIMAL(38,0)"));
    let folded = it.fold(first, |acc, e| {
        let step = if op == BinOp::Mul {
            Expr::bin(op, acc.cast("DECIMAL(38,9)"), e.cast("DECIMAL(38,9)"))
        } else {
            Expr::bin(op, acc, e)
        };
        step.cast(dec)
    });
    TExpr::new(folded.cast(dec), bigdec)
}

/// A value as text for `str`: strings and keywords as they are, other types cast.
fn as_text(t: TExpr) -> Expr {
    if t.ty.sql_type() == "VARCHAR" {
        t.expr
    } else {
        t.expr.cast("VARCHAR")
    }
}

/// One comparison of two operands, with Datomic's type rules: constants take the other side's
/// type (a keyword compared with a ref is its entid); incomparable classes are an error.
fn compare(ctx: &Ctx, op: BinOp, a: &Operand, b: &Operand, form: &Value) -> Result<Expr, PlanError> {
    let e = compare_values(ctx, op, a, b, form)?;
    // a mixed value (an unbound attribute's, as text) compares only with values of its own attribute's class
    let ty_of = |o: &Operand| match o {
        Operand::Typed(t) => t.ty.clone(),
        Operand::Const(c) => c.natural_type(),
    };
    let checks: Vec<Expr> = [(a, b), (b, a)]
        .into_iter()
        .filter_map(|(x, y)| match x {
            Operand::Typed(t) => t.same_class(&ty_of(y)),
            Operand::Const(_) => None,
        })
        .collect();
    Ok(if checks.is_empty() { e } else { Expr::all([vec![e], checks].concat()) })
}

fn compare_values(ctx: &Ctx, op: BinOp, a: &Operand, b: &Operand, form: &Value) -> Result<Expr, PlanError> {
    if matches!(op, BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge) {
        if let Some(e) = ordered_mixed(ctx, op, a, b, form)? {
            return Ok(e);
        }
    }
    // keywords order as Clojure orders them (namespace, then name), not as text
    let keywords = matches!(op, BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge)
        && [a, b].iter().any(|o| matches!(o, Operand::Typed(t) if t.ty.is_keyword()));
    let (ea, eb) = match (a, b) {
        (Operand::Typed(x), Operand::Typed(y)) => {
            check_classes(&x.ty, &y.ty, form)?;
            mixed_pair(x, y)
        }
        (Operand::Typed(x), Operand::Const(c)) => (x.expr.clone(), const_for(ctx, c, &x.ty, form)?),
        (Operand::Const(c), Operand::Typed(y)) => (const_for(ctx, c, &y.ty, form)?, y.expr.clone()),
        (Operand::Const(c), Operand::Const(d)) => {
            let (x, y) = (typed(ctx, Operand::Const(c.clone()), form)?, typed(ctx, Operand::Const(d.clone()), form)?);
            check_classes(&x.ty, &y.ty, form)?;
            if x.ty.is_keyword() && matches!(op, BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge) {
                return Ok(Expr::bin(op, keyword_order(x.expr), keyword_order(y.expr)));
            }
            (x.expr, y.expr)
        }
    };
    if keywords {
        return Ok(Expr::bin(op, keyword_order(ea), keyword_order(eb)));
    }
    Ok(Expr::bin(op, ea, eb))
}

/// An order comparison of a mixed-type value (an unbound attribute's `v`, held as text) with a number or an
/// instant: the mixed side is read as that type with `try(CAST(...))`, so values of other types (NULL) drop out
/// instead of comparing as text (where "5" > "30").
fn ordered_mixed(ctx: &Ctx, op: BinOp, a: &Operand, b: &Operand, form: &Value) -> Result<Option<Expr>, PlanError> {
    let ty_of = |o: &Operand| -> Result<Ty, PlanError> {
        Ok(match o {
            Operand::Typed(t) => t.ty.clone(),
            Operand::Const(c) => c.natural_type(),
        })
    };
    let (ta, tb) = (ty_of(a)?, ty_of(b)?);
    let target = match (&ta, &tb) {
        (Ty::Mixed, other) | (other, Ty::Mixed) => match other.class() {
            Class::Number => "DOUBLE",
            Class::Instant => "TIMESTAMPTZ",
            _ => return Ok(None),
        },
        _ => return Ok(None),
    };
    let side = |o: &Operand, ty: &Ty| -> Result<Expr, PlanError> {
        let t = typed(ctx, o.clone(), form)?;
        Ok(if *ty == Ty::Mixed { Expr::Func("try", vec![t.expr.cast(target)]) } else { t.expr })
    };
    Ok(Some(Expr::bin(op, side(a, &ta)?, side(b, &tb)?)))
}

fn check_classes(a: &Ty, b: &Ty, form: &Value) -> Result<(), PlanError> {
    let (ca, cb) = (a.class(), b.class());
    if ca == cb || ca == Class::Any || cb == Class::Any {
        Ok(())
    } else {
        Err(PlanError::type_mismatch(form, format!("cannot compare {} with {}", a.a_name(), b.a_name())))
    }
}

/// Both sides as text when one is of the mixed fallback type.
fn mixed_pair(x: &TExpr, y: &TExpr) -> (Expr, Expr) {
    if x.ty == Ty::Mixed || y.ty == Ty::Mixed {
        (as_text(x.clone()), as_text(y.clone()))
    } else {
        (x.expr.clone(), y.expr.clone())
    }
}

/// A constant compared with a value of type `ty`.
fn const_for(ctx: &Ctx, c: &Constant, ty: &Ty, form: &Value) -> Result<Expr, PlanError> {
    if *ty == Ty::Mixed {
        return c
            .text()
            .map(|t| Expr::str(&t))
            .ok_or_else(|| PlanError::type_mismatch(form, "a lookup ref compared with mixed values"));
    }
    let natural = c.natural_type();
    match (ty, c) {
        (Ty::Value(ValueType::Ref), Constant::Keyword(k)) => ctx
            .schema
            .entid(k)
            .map(Expr::int)
            .ok_or_else(|| PlanError::UnknownIdent { ident: k.clone(), form: show(form) }),
        (Ty::Value(ValueType::Ref), Constant::LookupRef { .. }) => {
            coerce(ctx, c, ty).ok_or_else(|| PlanError::type_mismatch(form, "bad lookup ref"))
        }
        // a float attribute's values are single precision: the constant is too, as a pattern's constant is (the
        // query's 0.1 is the stored float 0.1, not a double a little below it)
        (Ty::Value(ValueType::Float), Constant::Double(_) | Constant::Long(_)) => {
            literal(c).map(|l| l.cast("FLOAT")).ok_or_else(|| PlanError::type_mismatch(form, "not a number"))
        }
        _ => {
            check_classes(ty, &natural, form)?;
            literal(c).ok_or_else(|| PlanError::type_mismatch(form, "a lookup ref compared with a non-ref"))
        }
    }
}

/// The value types a type predicate accepts.
fn type_predicate(name: &str) -> Option<&'static [ValueType]> {
    use ValueType as T;
    Some(match name {
        "string?" => &[T::String],
        "keyword?" => &[T::Keyword],
        "int?" | "integer?" | "long?" => &[T::Long, T::Ref],
        "double?" | "float?" => &[T::Double, T::Float],
        "number?" => &[T::Long, T::Ref, T::Double, T::Float, T::BigInt, T::BigDec],
        "boolean?" => &[T::Boolean],
        "inst?" => &[T::Instant],
        "uuid?" => &[T::Uuid],
        "uri?" => &[T::Uri],
        "bytes?" => &[T::Bytes],
        _ => return None,
    })
}
