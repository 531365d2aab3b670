//! The inputs vector: one EDN element per `:in` binding after `$`, read into constants.
//!
//! Scalars (and tuple elements) stay constants that are inlined wherever the variable is used;
//! collections become `IN (...)` lists or VALUES lists; relations become VALUES lists. A vector
//! given for a scalar binding is a lookup ref `[:unique/attr value]`, compiled to a scalar subquery.

use crate::algebrize::read_constant;
use crate::error::{show, PlanError};
use crate::parse::{parse_edn, Binding, InBinding, Query, Var};
use crate::source::Ctx;
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
}

/// The rows of a relation input; `None` columns were `_`.
#[derive(Clone, Debug)]
pub struct RelationInput {
    pub vars: Vec<Option<Var>>,
    pub rows: Vec<Vec<Constant>>,
}

/// Reads the inputs vector against the query's `:in` bindings.
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
    let mut bindings = Vec::new();
    let mut sources = 0;
    for b in &query.inputs {
        match b {
            InBinding::Source(name) if name == "$" => sources += 1,
            InBinding::Source(name) => {
                return Err(PlanError::unsupported(
                    &query.in_form,
                    format!("source {name}: only the default source $ is supported"),
                ))
            }
            // The rule set's input is read by `crate::rules::from_inputs`.
            InBinding::Rules => bindings.push(None),
            InBinding::Bind(b) => bindings.push(Some(Ok(b))),
            InBinding::Pattern(name) => bindings.push(Some(Err(name))),
        }
    }
    if sources > 1 {
        return Err(PlanError::unsupported(&query.in_form, "only one source $"));
    }
    if bindings.len() != values.len() {
        return Err(PlanError::InputCount { form: show(&query.in_form), expected: bindings.len(), got: values.len() });
    }
    let mut out = Inputs::default();
    for (b, v) in bindings.into_iter().zip(&values) {
        let b = match b {
            None => continue,
            Some(Err(name)) => {
                out.patterns.push((name.clone(), v.clone()));
                continue;
            }
            Some(Ok(b)) => b,
        };
        match b {
            Binding::Scalar(var) => out.scalars.push((var.clone(), read_constant(ctx, v, v)?)),
            Binding::Tuple(vars) => {
                let items = elements(v, vars.len())?;
                for (var, item) in vars.iter().zip(items) {
                    if let Some(var) = var {
                        out.scalars.push((var.clone(), read_constant(ctx, item, v)?));
                    }
                }
            }
            Binding::Collection(var) => {
                let items = collection(v)?;
                out.collections
                    .push((var.clone(), items.iter().map(|i| read_constant(ctx, i, v)).collect::<Result<_, _>>()?));
            }
            Binding::Relation(vars) => {
                let mut rows = Vec::new();
                for row in collection(v)? {
                    rows.push(
                        elements(row, vars.len())?
                            .iter()
                            .map(|i| read_constant(ctx, i, v))
                            .collect::<Result<_, _>>()?,
                    );
                }
                out.relations.push(RelationInput { vars: vars.clone(), rows });
            }
        }
    }
    Ok(out)
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
