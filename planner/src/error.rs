//! The crate's one error type. Every variant carries the offending EDN form (printed with
//! `edn_format::emit_str`) so that the DuckDB error a user sees names what to fix.

use edn_format::Value;

/// Why a query (or its inputs) could not be compiled. Never a panic: every path that user input
/// reaches ends here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// The query or inputs text is not valid EDN. `form` is the text that failed to parse.
    #[error("malformed EDN in {what}: {message} in `{form}`")]
    Edn { what: &'static str, message: String, form: String },
    /// Valid EDN that is not a valid query form (wrong shape, unknown keyword, bad find spec, ...).
    #[error("invalid query syntax in `{form}`: {message}")]
    Syntax { form: String, message: String },
    /// An attribute keyword that the schema does not know. `context` is empty or says where the form came from
    /// (", given for ?e" for an input).
    #[error("unknown attribute {ident} in `{form}`{context}")]
    UnknownAttribute { ident: String, form: String, context: String },
    /// An ident (keyword naming an entity) that the schema does not know.
    #[error("unknown ident {ident} in `{form}`")]
    UnknownIdent { ident: String, form: String },
    /// A variable used where it must already be bound (predicates, functions, `not`, `or-join`
    /// required variables, `:find`, `:with`, `:order`), but nothing binds it.
    #[error("unbound variable {var} in `{form}`{context}")]
    UnboundVariable { var: String, form: String, context: String },
    /// The branches of an `or` mention different variables (Datomic requires the same set), or an
    /// `or-join` branch does not bind a join variable that is unbound outside.
    #[error("non-matching or branches in `{form}`: {message}")]
    OrBranches { form: String, message: String },
    /// Values of incomparable types compared (e.g. a string with a long), or a function applied to a
    /// value of the wrong type.
    #[error("type mismatch in `{form}`: {message}")]
    TypeMismatch { form: String, message: String },
    /// The inputs vector does not have one element per `:in` binding after `$`.
    #[error(
        "wrong number of inputs: `:in {form}` needs {expected}, got {got} (the inputs are a vector of one element per \
         binding after $: a single lookup ref or tuple is wrapped in it too, as in `[[:user/email \"a@b.c\"]]`)"
    )]
    InputCount { form: String, expected: usize, got: usize },
    /// An input value that does not fit its `:in` binding.
    #[error("bad input `{form}`: {message}")]
    BadInput { form: String, message: String },
    /// Valid Datalog that this compiler does not support (yet).
    #[error("unsupported in `{form}`: {message}")]
    Unsupported { form: String, message: String },
    /// A source variable (`$2`, `$hist`) that cannot be read where it is named: not bound in `:in`, given
    /// neither a store nor a relation, or without the attribute a pattern names. `var` is the variable.
    #[error("source {var} in `{form}`: {message}")]
    Source { var: String, form: String, message: String },
    /// A construct that the chosen SQL dialect cannot express (`dialect` is its name, `construct` what the query
    /// needs, e.g. `pull` or `fulltext` in Spark).
    #[error("the {dialect} SQL dialect cannot express {construct}")]
    Dialect { dialect: &'static str, construct: String },
}

/// Prints an EDN form for an error message.
pub(crate) fn show(v: &Value) -> String {
    edn_format::emit_str(v)
}

impl PlanError {
    pub(crate) fn syntax(form: &Value, message: impl Into<String>) -> PlanError {
        PlanError::Syntax { form: show(form), message: message.into() }
    }

    pub(crate) fn unsupported(form: &Value, message: impl Into<String>) -> PlanError {
        PlanError::Unsupported { form: show(form), message: message.into() }
    }

    pub(crate) fn type_mismatch(form: &Value, message: impl Into<String>) -> PlanError {
        PlanError::TypeMismatch { form: show(form), message: message.into() }
    }

    pub(crate) fn unbound(var: &str, form: &Value, context: &str) -> PlanError {
        let context = if context.is_empty() { String::new() } else { format!(" ({context})") };
        PlanError::UnboundVariable { var: var.to_string(), form: show(form), context }
    }
}
