//! The inputs vector: one EDN element per `:in` binding after `$`, read into constants.
//!
//! Scalars (and tuple elements) stay constants that are inlined wherever the variable is used;
//! collections become `IN (...)` lists or VALUES lists; relations become VALUES lists. A vector
//! given for a scalar binding is a lookup ref `[:unique/attr value]`, compiled to a scalar subquery.

use crate::algebrize::read_constant;
use crate::error::{show, PlanError};
use crate::parse::{parse_edn, Binding, InBinding, Query, Var};
use crate::source::{Ctx, RelationSource};
use crate::types::Constant;
use edn_format::Value;

/// The values bound by the inputs.
#[derive(Clone, Debug, Default)]
pub struct Inputs {
    pub scalars: Vec<(Var, Constant)>,
    pub collections: Vec<(Var, Vec<Constant>)>,
    pub relations: Vec<RelationInput>,
    /// Pull patterns given as inputs, by the plain symbol that names them in `:in`.
    pub patterns: Vec<(String, Value)>,
    /// Collections of tuples given for source variables (`:in $ $2` with `$2` given no store).
    pub source_relations: Vec<RelationSource>,
}

/// The rows of a relation input; `None` columns were `_`.
#[derive(Clone, Debug)]
pub struct RelationInput {
    pub vars: Vec<Option<Var>>,
    pub rows: Vec<Vec<Constant>>,
}

/// Whether an `:in` binding takes an element of the inputs vector: every binding but `$` and the source
/// variables given a store (`store_vars`, from `sources :=`); a source variable given no store is a relation
/// in the inputs.
pub fn takes_input(b: &InBinding, store_vars: &[&str]) -> bool {
    match b {
        InBinding::Source(name) => name != "$" && !store_vars.contains(&name.as_str()),
        _ => true,
    }
}

/// Reads the inputs vector against the query's `:in` bindings: one element per binding that
/// [`takes_input`]. A source variable's element is a relation source, a collection of tuples
/// ([`Inputs::source_relations`]).
pub fn read_inputs(ctx: &Ctx, query: &Query, inputs_edn: Option<&str>) -> Result<Inputs, PlanError> {
    let values = match inputs_edn.map(str::trim) {
        None | Some("") => vec![],
        Some(text) => match parse_edn(text, "inputs")? {
            Value::Vector(v) | Value::List(v) => v,
            other => {
                return Err(PlanError::BadInput {
                    form: show(&other),
                    message: "inputs are an EDN vector, one element per :in binding after $".into(),
                })
            }
        },
    };
    /// What one inputs element is for.
    enum Slot<'q> {
        Rules,
        Bind(&'q Binding),
        Pattern(&'q String),
        Source(&'q String),
        Ignore,
    }
    let mut bindings = Vec::new();
    let mut sources = 0;
    let mut named: Vec<&String> = Vec::new();
    for b in &query.inputs {
        match b {
            InBinding::Source(name) if name == "$" => sources += 1,
            InBinding::Source(name) if named.contains(&name) => {
                return Err(PlanError::syntax(&query.in_form, format!("source {name} is bound twice in :in")))
            }
            InBinding::Source(name) => {
                named.push(name);
                if !ctx.is_store_source(name) {
                    bindings.push(Slot::Source(name));
                }
            }
            // The rule set's input is read by `crate::rules::from_inputs`.
            InBinding::Rules => bindings.push(Slot::Rules),
            InBinding::Bind(b) => bindings.push(Slot::Bind(b)),
            InBinding::Pattern(name) => bindings.push(Slot::Pattern(name)),
            InBinding::Ignore => bindings.push(Slot::Ignore),
        }
    }
    if sources > 1 {
        return Err(PlanError::unsupported(&query.in_form, "only one source $"));
    }
    if bindings.len() != values.len() {
        if let Some(Slot::Source(name)) = bindings.iter().find(|b| matches!(b, Slot::Source(_))) {
            return Err(PlanError::Source {
                var: name.to_string(),
                form: show(&query.in_form),
                message: format!(
                    "it is given no store in sources :=, so the inputs give it a relation (a collection of tuples): \
                     {} inputs expected, {} given",
                    bindings.len(),
                    values.len()
                ),
            });
        }
        return Err(PlanError::InputCount { form: show(&query.in_form), expected: bindings.len(), got: values.len() });
    }
    let mut out = Inputs::default();
    for (i, (b, v)) in bindings.into_iter().zip(&values).enumerate() {
        let b = match b {
            Slot::Rules | Slot::Ignore => continue,
            Slot::Pattern(name) => {
                out.patterns.push((name.clone(), v.clone()));
                continue;
            }
            Slot::Source(name) => {
                out.source_relations.push(relation_source(name, v)?);
                continue;
            }
            Slot::Bind(b) => b,
        };
        read_binding(ctx, b, v, &mut out).map_err(|e| in_input(e, i, v, ""))?;
    }
    Ok(out)
}

/// An error in input `i` (0-based) as a bad input that names the whole input and its place, when it was a query
/// syntax error of one of its parts (a lookup ref on an attribute that is not unique, a malformed rule).
/// `what` is what the input is for, as words after "for" ("%, the rule set"), or empty.
pub(crate) fn in_input(e: PlanError, i: usize, input: &Value, what: &str) -> PlanError {
    match e {
        PlanError::Syntax { form, message } => {
            let input = show(input);
            // the part at fault, when it is not the whole input
            let part = if form == input { String::new() } else { format!(": in `{form}`") };
            let what = if what.is_empty() { String::new() } else { format!(" (for {what})") };
            PlanError::BadInput {
                message: format!("input {} of the inputs vector{what}{part}: {message}", i + 1),
                form: input,
            }
        }
        other => other,
    }
}

/// Reads one input `v` for its binding `b` into `out`.
fn read_binding(ctx: &Ctx, b: &Binding, v: &Value, out: &mut Inputs) -> Result<(), PlanError> {
    // a value read for `var`: its error names the variable as `misfit` does (", given for ?e")
    let read = |var: Option<&Var>, item: &Value| read_constant(ctx, item, v).map_err(|e| given_for(e, var));
    match b {
        Binding::Scalar(var) => out.scalars.push((var.clone(), read(Some(var), v)?)),
        Binding::Tuple(vars) => {
            let items = elements(v, vars.len())?;
            for (var, item) in vars.iter().zip(items) {
                if let Some(var) = var {
                    out.scalars.push((var.clone(), read(Some(var), item)?));
                }
            }
        }
        Binding::Collection(var) => {
            let items = collection(v)?;
            out.collections.push((var.clone(), items.iter().map(|i| read(Some(var), i)).collect::<Result<_, _>>()?));
        }
        Binding::Relation(vars) => {
            let mut rows = Vec::new();
            for row in collection(v)? {
                rows.push(
                    elements(row, vars.len())?
                        .iter()
                        .zip(vars)
                        .map(|(i, var)| read(var.as_ref(), i))
                        .collect::<Result<_, _>>()?,
                );
            }
            out.relations.push(RelationInput { vars: vars.clone(), rows });
        }
    }
    Ok(())
}

/// Error `e` of a value read for `var` (None: a `_` column of a relation), naming the variable: a syntax error's
/// message and an unknown attribute's context end in ", given for ?var".
fn given_for(e: PlanError, var: Option<&Var>) -> PlanError {
    let Some(var) = var else { return e };
    match e {
        PlanError::Syntax { form, message } => {
            PlanError::Syntax { form, message: format!("{message}, given for {var}") }
        }
        PlanError::UnknownAttribute { ident, form, context } if context.is_empty() => {
            PlanError::UnknownAttribute { ident, form, context: format!(", given for {var}") }
        }
        other => other,
    }
}

/// A relation source: the collection of tuples given for source variable `var`, each tuple a vector or list of
/// plain values (a keyword stays a keyword, a nested vector is a tuple value, never a lookup ref), as Datomic
/// reads a collection given as a data source. Errors ([`PlanError::BadInput`]) name the variable and the value.
fn relation_source(var: &str, v: &Value) -> Result<RelationSource, PlanError> {
    let bad = |form: &Value, what: &str| PlanError::BadInput {
        form: show(form),
        message: format!("the source {var} is given no store in sources :=, so its input is a relation: {what}"),
    };
    let items = collection(v).map_err(|_| bad(v, "a collection of tuples such as [[1 :a 2] [3 :b 4]]"))?;
    let mut rows = Vec::new();
    for t in items {
        match t {
            Value::Vector(xs) | Value::List(xs) if !xs.is_empty() => {
                rows.push(xs.iter().map(plain_constant).collect::<Result<Vec<_>, _>>()?)
            }
            other => return Err(bad(other, "each element is a non-empty tuple (a vector)")),
        }
    }
    Ok(RelationSource { var: var.to_string(), rows })
}

/// A plain EDN value as a constant: vectors are tuples, never lookup refs.
pub(crate) fn plain_constant(v: &Value) -> Result<Constant, PlanError> {
    match v {
        Value::Vector(xs) | Value::List(xs) if !xs.is_empty() => {
            Ok(Constant::Tuple(xs.iter().map(plain_constant).collect::<Result<_, _>>()?))
        }
        other => crate::types::scalar_constant(other),
    }
}

fn collection(v: &Value) -> Result<Vec<&Value>, PlanError> {
    match v {
        Value::Vector(items) | Value::List(items) => Ok(items.iter().collect()),
        Value::Set(items) => Ok(items.iter().collect()),
        other => Err(PlanError::BadInput {
            form: show(other),
            message: "a collection or relation input must be a vector, list or set".into(),
        }),
    }
}

fn elements(v: &Value, n: usize) -> Result<Vec<&Value>, PlanError> {
    let items = collection(v)?;
    if items.len() != n {
        return Err(PlanError::BadInput { form: show(v), message: format!("expected a tuple of {n} values") });
    }
    Ok(items)
}
