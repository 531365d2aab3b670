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
    edn_text(v)
}

/// A form that displays as [`edn_text`] writes it (formatted only when displayed).
pub struct EdnText<'a>(pub &'a Value);

impl std::fmt::Display for EdnText<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&edn_text(self.0))
    }
}

/// The EDN text of a form, for messages: edn-format's printer, except that a double keeps its decimal point or
/// exponent as Clojure prints it (edn-format writes `3.0` as `3`, which reads back as a long, and `1.5e300` as its
/// 301 digits), and the non-finite ones are `##NaN`, `##Inf` and `##-Inf`.
pub fn edn_text(v: &Value) -> String {
    fn has_float(v: &Value) -> bool {
        match v {
            Value::Float(_) => true,
            Value::List(xs) | Value::Vector(xs) => xs.iter().any(has_float),
            Value::Set(xs) => xs.iter().any(has_float),
            Value::Map(m) => m.iter().any(|(k, v)| has_float(k) || has_float(v)),
            Value::TaggedElement(_, x) => has_float(x),
            _ => false,
        }
    }
    fn seq<'a>(out: &mut String, open: &str, xs: impl Iterator<Item = &'a Value>, close: &str) {
        out.push_str(open);
        for (i, x) in xs.enumerate() {
            if i > 0 {
                out.push(' ');
            }
            write(out, x);
        }
        out.push_str(close);
    }
    fn write(out: &mut String, v: &Value) {
        match v {
            Value::Float(f) => {
                let f = f.into_inner();
                out.push_str(&match f {
                    _ if f.is_nan() => "##NaN".to_string(),
                    _ if f.is_infinite() => (if f > 0.0 { "##Inf" } else { "##-Inf" }).to_string(),
                    // Rust's `Debug` of an f64: `3.0`, `0.1`, `1.5e300`, `1e-7`, each of which reads back as a double
                    _ => format!("{f:?}"),
                })
            }
            Value::List(xs) => seq(out, "(", xs.iter(), ")"),
            Value::Vector(xs) => seq(out, "[", xs.iter(), "]"),
            Value::Set(xs) => seq(out, "#{", xs.iter(), "}"),
            Value::Map(m) => {
                out.push('{');
                for (i, (k, v)) in m.iter().enumerate() {
                    if i > 0 {
                        out.push(' ');
                    }
                    write(out, k);
                    out.push(' ');
                    write(out, v);
                }
                out.push('}');
            }
            Value::TaggedElement(tag, x) => {
                out.push_str(&format!("#{tag} "));
                write(out, x);
            }
            other => out.push_str(&edn_format::emit_str(other)),
        }
    }
    if !has_float(v) {
        return edn_format::emit_str(v);
    }
    let mut out = String::new();
    write(&mut out, v);
    out
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

#[cfg(test)]
mod tests {
    use super::edn_text;

    #[test]
    fn doubles_print_as_doubles() {
        let v = edn_format::parse_str("[3.0 1e3 -0.5 1.5e300 1e-7 {:a 0.1} #{2.5} (f 1) #tag 3.0 \"s\" :k 7]")
            .expect("edn");
        // as Clojure prints them (1.0E300 style aside): each reads back as a double
        assert_eq!(edn_text(&v), "[3.0 1000.0 -0.5 1.5e300 1e-7 {:a 0.1} #{2.5} (f 1) #tag 3.0 \"s\" :k 7]");
        let whole = edn_format::parse_str("[1 \"x\" {:a [2]}]").expect("edn");
        assert_eq!(edn_text(&whole), edn_format::emit_str(&whole));
        for x in ["3.0", "1000.0", "1.5e300", "1e-7"] {
            let back = edn_format::parse_str(x).expect("edn");
            assert!(matches!(back, edn_format::Value::Float(_)), "{x}");
            assert_eq!(edn_text(&back), x);
        }
    }
}
