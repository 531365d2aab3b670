//! A small structured SQL builder, printed in one of two dialects ([`Dialect`]: DuckDB's, and Spark SQL's for
//! the Parquet export read by Apache Spark): the one place where identifiers and literals are quoted, and
//! the only place where the dialects differ (the stages before it build one tree for both). Every piece of user text reaches SQL as a [`Lit`] (quoted with
//! [`quote_str`]) or as an output column name (quoted with [`quote_ident`]); table references come
//! from [`crate::layout::StoreName`], and aliases and column names are generated here
//! (`t0`, `e`, `c1`, ...), so nothing from EDN is ever spliced raw.

use crate::error::PlanError;
use crate::layout::{quote_ident, quote_str, string_value, StoreName};
use std::fmt::Write;

/// The SQL dialect a statement is printed in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// DuckDB's SQL over a store's tables (`"mentat"."cur_65"`): what `mentat_q` runs.
    #[default]
    DuckDb,
    /// Spark SQL over temporary views named after the files of a Parquet export (`cur_65` for
    /// `cur_65.parquet`, see `docs/parquet-format.md`): backticked identifiers, Spark's types and functions, no
    /// recursive CTE (a recursive rule becomes a [`Stage`] that the caller evaluates to a fixpoint).
    Spark,
}

impl Dialect {
    /// Parses `duckdb` or `spark` (any case).
    pub fn parse(s: &str) -> Option<Dialect> {
        match s.trim().to_ascii_lowercase().as_str() {
            "duckdb" => Some(Dialect::DuckDb),
            "spark" => Some(Dialect::Spark),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Dialect::DuckDb => "duckdb",
            Dialect::Spark => "spark",
        }
    }
}

/// One relation that a Spark statement reads and that must be computed first, in order, and registered as a
/// temporary view named `name` with `columns`. Spark refuses `UNION` in a recursive CTE, so a recursive rule's
/// CTE is printed as a stage: `base` gives the first rows; when `step` is present the relation is a fixpoint,
/// computed semi-naively by the caller: each round registers the rows new in the last round as `name` and every
/// row so far as [`Stage::total_view`], runs `step`, and keeps the rows not seen before, until a round adds none;
/// then the whole relation is registered as `name`. Without `step` the stage is a plain view of `base`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stage {
    pub name: String,
    pub columns: Vec<String>,
    pub base: String,
    pub step: Option<String>,
}

impl Stage {
    /// The view that holds every row so far during a fixpoint (DuckDB's `recurring.<name>`).
    pub fn total_view(name: &str) -> String {
        format!("{name}__total")
    }
}

/// A statement printed in a dialect: the SQL text and, for Spark, the stages it reads (see [`Stage`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Printed {
    pub sql: String,
    pub stages: Vec<Stage>,
}

/// The printer's state: the dialect, the text so far, the stages lifted out (Spark), and the first construct
/// the dialect cannot express.
pub(crate) struct Printer {
    dialect: Dialect,
    out: String,
    stages: Vec<Stage>,
    error: Option<String>,
    /// While the ORDER BY of a Spark `SELECT DISTINCT` is printed: its items' expressions and their output names.
    /// Spark resolves that ORDER BY against the DISTINCT's output only (`t0.v` there is `UNRESOLVED_COLUMN`), so
    /// an expression that is an item's, alone or inside another (a keyword's sort key), is printed as the name.
    outputs: Vec<(Expr, String)>,
}

impl Printer {
    fn new(dialect: Dialect) -> Printer {
        Printer { dialect, out: String::new(), stages: Vec::new(), error: None, outputs: Vec::new() }
    }

    fn spark(&self) -> bool {
        self.dialect == Dialect::Spark
    }

    /// Records that `construct` has no form in this dialect (the first such construct is reported).
    fn refuse(&mut self, construct: impl Into<String>) {
        if self.error.is_none() {
            self.error = Some(construct.into());
        }
    }

    fn ident(&self, name: &str) -> String {
        match self.dialect {
            Dialect::DuckDb => quote_ident(name),
            Dialect::Spark => spark_ident(name),
        }
    }
}

/// A Spark SQL identifier: wrapped in backticks, inner backticks doubled.
pub fn spark_ident(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

/// A Spark SQL string literal. Spark reads backslash escapes in literals and concatenates adjacent ones, so
/// quotes and backslashes are escaped with a backslash, and control characters as `\uXXXX`.
pub fn spark_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        match c {
            '\'' => out.push_str("\\'"),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// A DuckDB type as printed by the planner (`BIGINT`, `VARCHAR`, `TIMESTAMPTZ`, `BIGINT[]`, `STRUCT(f0 BIGINT,
/// f1 VARCHAR)`, `DECIMAL(38,18)`, ...) in Spark's words, or None for a type Spark has no form of.
pub fn spark_type(ty: &str) -> Option<String> {
    let ty = ty.trim();
    if let Some(elem) = ty.strip_suffix("[]") {
        return Some(format!("ARRAY<{}>", spark_type(elem)?));
    }
    if let Some(fields) = ty.strip_prefix("STRUCT(").and_then(|f| f.strip_suffix(')')) {
        let mut out = Vec::new();
        for f in split_top(fields) {
            let (name, t) = f.trim().split_once(' ')?;
            out.push(format!("{}: {}", spark_ident(name.trim_matches('"')), spark_type(t)?));
        }
        return Some(format!("STRUCT<{}>", out.join(", ")));
    }
    if ty.starts_with("DECIMAL") {
        return Some(ty.to_string());
    }
    Some(
        match ty {
            "BIGINT" | "INTEGER" | "DOUBLE" | "BOOLEAN" | "FLOAT" => ty,
            "VARCHAR" | "UUID" | "JSON" => "STRING",
            "TIMESTAMPTZ" | "TIMESTAMP" => "TIMESTAMP",
            "BLOB" => "BINARY",
            "HUGEINT" => "DECIMAL(38,0)",
            _ => return None,
        }
        .to_string(),
    )
}

/// Splits a type list at its top-level commas.
fn split_top(s: &str) -> Vec<&str> {
    let (mut depth, mut start, mut out) = (0i32, 0, Vec::new());
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

/// A generated internal name (alias or column): lowercase ASCII letters, digits and `_` only, so it
/// prints unquoted.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Name(String);

impl Name {
    /// A name; characters outside `[a-z0-9_]` are replaced by `_` so the invariant always holds.
    pub fn new(s: &str) -> Name {
        let clean: String =
            s.chars().map(|c| if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' { c } else { '_' }).collect();
        Name(clean)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A literal value.
#[derive(Clone, Debug, PartialEq)]
pub enum Lit {
    Null,
    Bool(bool),
    Int(i64),
    Double(f64),
    /// A VARCHAR literal.
    Str(String),
    /// A literal cast to a type, for TIMESTAMPTZ and UUID text: `CAST('...' AS TIMESTAMPTZ)`.
    Typed(String, &'static str),
}

/// Binary operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Add,
    Sub,
    Mul,
    Div,
    Like,
    /// `IS NOT DISTINCT FROM`
    Same,
}

impl BinOp {
    fn text(self) -> &'static str {
        match self {
            BinOp::Eq => "=",
            BinOp::Ne => "<>",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Like => "LIKE",
            BinOp::Same => "IS NOT DISTINCT FROM",
        }
    }
}

/// An SQL expression.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// `alias.column`
    Col(Name, Name),
    Lit(Lit),
    Bin(BinOp, Box<Expr>, Box<Expr>),
    And(Vec<Expr>),
    Or(Vec<Expr>),
    Not(Box<Expr>),
    IsNull(Box<Expr>),
    IsNotNull(Box<Expr>),
    /// A function call; the name is a fixed DuckDB function name chosen by the compiler.
    Func(&'static str, Vec<Expr>),
    /// An aggregate call, optionally DISTINCT; `args` empty means `count(*)`.
    Agg {
        func: &'static str,
        distinct: bool,
        args: Vec<Expr>,
    },
    Cast(Box<Expr>, String),
    Case {
        whens: Vec<(Expr, Expr)>,
        otherwise: Option<Box<Expr>>,
    },
    InList(Box<Expr>, Vec<Expr>),
    Exists(Box<Query>),
    /// A scalar subquery.
    Subquery(Box<Query>),
    /// A struct value `{'f0': a, 'f1': b}`.
    Struct(Vec<(Name, Expr)>),
    /// `struct.field`
    Field(Box<Expr>, Name),
    /// `list[from:to]` (1-based, inclusive, as DuckDB slices).
    Slice(Box<Expr>, Box<Expr>, Box<Expr>),
    /// The elements of a list in a random order (each call draws anew).
    Shuffle(Box<Expr>),
    /// Elements of a non-empty list drawn at random with replacement: `Some(n)` a list of n of them, `None` one
    /// element.
    Draw(Box<Expr>, Option<Box<Expr>>),
}

impl Expr {
    pub fn col(alias: &Name, col: &str) -> Expr {
        Expr::Col(alias.clone(), Name::new(col))
    }

    pub fn bin(op: BinOp, a: Expr, b: Expr) -> Expr {
        Expr::Bin(op, Box::new(a), Box::new(b))
    }

    pub fn eq(a: Expr, b: Expr) -> Expr {
        Expr::bin(BinOp::Eq, a, b)
    }

    pub fn int(i: i64) -> Expr {
        Expr::Lit(Lit::Int(i))
    }

    pub fn str(s: &str) -> Expr {
        Expr::Lit(Lit::Str(s.to_string()))
    }

    pub fn cast(self, ty: &str) -> Expr {
        Expr::Cast(Box::new(self), ty.to_string())
    }

    pub fn negate(self) -> Expr {
        Expr::Not(Box::new(self))
    }

    /// `TRUE` and `FALSE`.
    pub fn bool(b: bool) -> Expr {
        Expr::Lit(Lit::Bool(b))
    }

    /// Conjunction of several expressions (TRUE when empty).
    pub fn all(mut exprs: Vec<Expr>) -> Expr {
        match exprs.len() {
            0 => Expr::bool(true),
            1 => exprs.remove(0),
            _ => Expr::And(exprs),
        }
    }

    /// The table aliases this expression references directly (not inside subqueries).
    pub fn aliases(&self, out: &mut Vec<Name>) {
        match self {
            Expr::Col(a, _) => {
                if !out.contains(a) {
                    out.push(a.clone())
                }
            }
            Expr::Lit(_) => {}
            Expr::Bin(_, a, b) => {
                a.aliases(out);
                b.aliases(out);
            }
            Expr::And(v) | Expr::Or(v) | Expr::Func(_, v) | Expr::Agg { args: v, .. } => {
                v.iter().for_each(|e| e.aliases(out))
            }
            Expr::Not(e) | Expr::IsNull(e) | Expr::IsNotNull(e) | Expr::Cast(e, _) | Expr::Field(e, _) => {
                e.aliases(out)
            }
            Expr::Case { whens, otherwise } => {
                for (w, t) in whens {
                    w.aliases(out);
                    t.aliases(out);
                }
                if let Some(o) = otherwise {
                    o.aliases(out)
                }
            }
            Expr::InList(e, v) => {
                e.aliases(out);
                v.iter().for_each(|e| e.aliases(out));
            }
            Expr::Struct(v) => v.iter().for_each(|(_, e)| e.aliases(out)),
            Expr::Slice(a, b, c) => {
                a.aliases(out);
                b.aliases(out);
                c.aliases(out);
            }
            Expr::Shuffle(e) | Expr::Draw(e, None) => e.aliases(out),
            Expr::Draw(e, Some(n)) => {
                e.aliases(out);
                n.aliases(out);
            }
            // Correlated references inside subqueries count as references of the enclosing clause.
            Expr::Exists(q) | Expr::Subquery(q) => q.outer_aliases(out),
        }
    }
}

/// What a FROM item reads.
#[derive(Clone, Debug, PartialEq)]
pub enum TableSource {
    /// A quoted table reference produced by [`crate::layout::StoreName`] (DuckDB only).
    Table(String),
    /// A table of a store by its unquoted name (`cur_65`): `"mentat"."cur_65"` in DuckDB, the view `cur_65` over
    /// the export's `cur_65.parquet` in Spark.
    Stored {
        store: StoreName,
        table: String,
    },
    /// Every row so far of the keyed recursive CTE being defined: DuckDB's `recurring.<name>`, in Spark the
    /// fixpoint's [`Stage::total_view`].
    Recurring(Name),
    Subquery(Box<Query>),
    /// `(VALUES (...), (...)) AS alias(c0, c1)`
    Values {
        rows: Vec<Vec<Expr>>,
        columns: Vec<Name>,
    },
    /// A common table expression defined by an enclosing [`Query::With`], by its generated name.
    Cte(Name),
    /// A query given as SQL text by a compiler that builds it whole (the fulltext search of
    /// [`crate::fulltext::search_sql`]); it references no alias of the enclosing statement.
    Raw(String),
}

/// How a FROM item joins the items before it.
#[derive(Clone, Debug, PartialEq)]
pub enum JoinKind {
    Inner,
    Left,
}

/// One FROM item.
#[derive(Clone, Debug, PartialEq)]
pub struct FromItem {
    pub source: TableSource,
    pub alias: Name,
    pub kind: JoinKind,
    /// `LATERAL`: the source references earlier items.
    pub lateral: bool,
    /// The ON condition (ignored for the first item). Empty means a cross join.
    pub on: Vec<Expr>,
}

/// A SELECT statement.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Select {
    pub distinct: bool,
    pub items: Vec<(Expr, Option<String>)>,
    pub from: Vec<FromItem>,
    pub filters: Vec<Expr>,
    pub group_by: Vec<Expr>,
    pub having: Vec<Expr>,
    pub order_by: Vec<(Expr, bool)>,
    pub limit: Option<i64>,
    pub offset: Option<i64>,
}

/// A query: a SELECT or a set operation over queries.
#[derive(Clone, Debug, PartialEq)]
pub enum Query {
    Select(Box<Select>),
    /// `UNION` (`all` = false) or `UNION ALL`.
    Union {
        all: bool,
        parts: Vec<Query>,
    },
    /// `WITH [RECURSIVE] name(cols) AS (...), ... body`. A recursive CTE's query is a `UNION` of
    /// two parts, the base case and the recursive step (DuckDB splits at the last top-level UNION,
    /// so several bases or steps are each wrapped in one subquery by the caller).
    With {
        recursive: bool,
        ctes: Vec<Cte>,
        body: Box<Query>,
    },
}

/// One common table expression.
#[derive(Clone, Debug, PartialEq)]
pub struct Cte {
    pub name: Name,
    pub columns: Vec<Name>,
    pub query: Query,
    /// `USING KEY (columns)`: DuckDB's keyed recursive CTE, whose step may read the whole relation so far as
    /// `recurring.<name>` besides the last iteration's rows as `<name>`.
    pub using_key: bool,
}

impl Query {
    /// Aliases referenced inside this query that it does not define itself (correlations).
    pub fn outer_aliases(&self, out: &mut Vec<Name>) {
        match self {
            Query::Union { parts, .. } => parts.iter().for_each(|p| p.outer_aliases(out)),
            Query::With { ctes, body, .. } => {
                ctes.iter().for_each(|c| c.query.outer_aliases(out));
                body.outer_aliases(out);
            }
            Query::Select(s) => {
                let mut refs = Vec::new();
                for (e, _) in &s.items {
                    e.aliases(&mut refs);
                }
                for f in &s.from {
                    f.on.iter().for_each(|e| e.aliases(&mut refs));
                    match &f.source {
                        TableSource::Subquery(q) => q.outer_aliases(&mut refs),
                        TableSource::Values { rows, .. } => rows.iter().flatten().for_each(|e| e.aliases(&mut refs)),
                        TableSource::Table(_)
                        | TableSource::Stored { .. }
                        | TableSource::Recurring(_)
                        | TableSource::Cte(_)
                        | TableSource::Raw(_) => {}
                    }
                }
                for e in s.filters.iter().chain(&s.group_by).chain(&s.having) {
                    e.aliases(&mut refs);
                }
                for a in refs {
                    if !s.from.iter().any(|f| f.alias == a) && !out.contains(&a) {
                        out.push(a);
                    }
                }
            }
        }
    }

    /// Renders the query as DuckDB SQL.
    pub fn to_sql(&self) -> String {
        let mut p = Printer::new(Dialect::DuckDb);
        self.render(&mut p, 0);
        p.out
    }

    /// Renders the query in `dialect`: DuckDB's text is [`Query::to_sql`]'s. In Spark every recursive CTE is
    /// lifted out as a [`Stage`] (in the order they must run) and read by name. Errors: a construct the dialect
    /// cannot express ([`PlanError::Dialect`]), named.
    pub fn to_sql_in(&self, dialect: Dialect) -> Result<Printed, PlanError> {
        let mut p = Printer::new(dialect);
        self.render(&mut p, 0);
        match p.error {
            Some(construct) => Err(PlanError::Dialect { dialect: dialect.name(), construct }),
            None => Ok(Printed { sql: p.out, stages: p.stages }),
        }
    }

    fn render(&self, p: &mut Printer, indent: usize) {
        match self {
            Query::Select(s) => s.render(p, indent),
            Query::Union { all, parts } => {
                for (i, q) in parts.iter().enumerate() {
                    if i > 0 {
                        newline(p, indent);
                        p.out.push_str(if *all { "UNION ALL" } else { "UNION" });
                        newline(p, indent);
                    }
                    q.render(p, indent);
                }
            }
            Query::With { recursive: true, ctes, body } if p.spark() => {
                // Spark: each CTE becomes a stage the caller computes first; the body reads them by name.
                for c in ctes {
                    let columns = c.columns.iter().map(|n| n.as_str().to_string()).collect();
                    let (base, step) = match &c.query {
                        Query::Union { all: false, parts } if parts.len() == 2 => (&parts[0], Some(&parts[1])),
                        q => (q, None),
                    };
                    let side = |q: &Query, p: &mut Printer| {
                        let mut inner = Printer::new(p.dialect);
                        q.render(&mut inner, 0);
                        p.stages.append(&mut inner.stages);
                        if let Some(e) = inner.error {
                            p.refuse(e);
                        }
                        inner.out
                    };
                    let base = side(base, p);
                    let step = step.map(|s| side(s, p));
                    p.stages.push(Stage { name: c.name.as_str().to_string(), columns, base, step });
                }
                body.render(p, indent);
            }
            Query::With { recursive, ctes, body } => {
                p.out.push_str(if *recursive { "WITH RECURSIVE " } else { "WITH " });
                for (i, c) in ctes.iter().enumerate() {
                    if i > 0 {
                        p.out.push_str(", ");
                    }
                    let cols: Vec<&str> = c.columns.iter().map(Name::as_str).collect();
                    let _ = write!(p.out, "{}({}) ", c.name.as_str(), cols.join(", "));
                    if c.using_key {
                        let _ = write!(p.out, "USING KEY ({}) ", cols.join(", "));
                    }
                    p.out.push_str("AS (");
                    newline(p, indent + 1);
                    c.query.render(p, indent + 1);
                    newline(p, indent);
                    p.out.push(')');
                }
                newline(p, indent);
                body.render(p, indent);
            }
        }
    }
}

fn newline(p: &mut Printer, indent: usize) {
    p.out.push('\n');
    for _ in 0..indent {
        p.out.push_str("  ");
    }
}

fn join_exprs(p: &mut Printer, exprs: &[Expr], sep: &str, indent: usize) {
    for (i, e) in exprs.iter().enumerate() {
        if i > 0 {
            p.out.push_str(sep);
        }
        e.render(p, indent);
    }
}

impl Select {
    fn render(&self, p: &mut Printer, indent: usize) {
        p.out.push_str(if self.distinct { "SELECT DISTINCT " } else { "SELECT " });
        if self.items.is_empty() {
            p.out.push('1');
        }
        for (i, (e, name)) in self.items.iter().enumerate() {
            if i > 0 {
                p.out.push_str(", ");
            }
            e.render(p, indent);
            if let Some(n) = name {
                let n = p.ident(n);
                let _ = write!(p.out, " AS {n}");
            }
        }
        for (i, f) in self.from.iter().enumerate() {
            newline(p, indent);
            if i == 0 {
                p.out.push_str("FROM ");
            } else {
                match (&f.kind, f.on.is_empty()) {
                    (JoinKind::Inner, true) => p.out.push_str("CROSS JOIN "),
                    (JoinKind::Inner, false) => p.out.push_str("JOIN "),
                    (JoinKind::Left, _) => p.out.push_str("LEFT JOIN "),
                }
                if f.lateral {
                    p.out.push_str("LATERAL ");
                }
            }
            f.render_source(p, indent);
            if i > 0 && (!f.on.is_empty() || f.kind == JoinKind::Left) {
                p.out.push_str(" ON ");
                Expr::all(f.on.clone()).render(p, indent);
            }
        }
        let clauses: [(&str, &[Expr], &str); 3] = [
            ("WHERE ", &self.filters, " AND "),
            ("GROUP BY ", &self.group_by, ", "),
            ("HAVING ", &self.having, " AND "),
        ];
        for (kw, exprs, sep) in clauses {
            if !exprs.is_empty() {
                newline(p, indent);
                p.out.push_str(kw);
                join_exprs(p, exprs, sep, indent);
            }
        }
        if !self.order_by.is_empty() {
            newline(p, indent);
            p.out.push_str("ORDER BY ");
            let outer = std::mem::take(&mut p.outputs);
            if p.spark() && self.distinct {
                p.outputs =
                    self.items.iter().filter_map(|(e, n)| n.as_ref().map(|n| (e.clone(), p.ident(n)))).collect();
            }
            for (i, (e, desc)) in self.order_by.iter().enumerate() {
                if i > 0 {
                    p.out.push_str(", ");
                }
                e.render(p, indent);
                p.out.push_str(if *desc { " DESC" } else { " ASC" });
                if p.spark() {
                    // DuckDB puts NULLs last either way; Spark's default puts them first when ascending
                    p.out.push_str(" NULLS LAST");
                }
            }
            p.outputs = outer;
        }
        if let Some(l) = self.limit {
            newline(p, indent);
            let _ = write!(p.out, "LIMIT {l}");
        }
        if let Some(o) = self.offset {
            newline(p, indent);
            let _ = write!(p.out, "OFFSET {o}");
        }
    }
}

impl FromItem {
    /// A plain source: inner join, not lateral, no ON condition (a cross join after the first item).
    pub fn inner(source: TableSource, alias: &Name) -> FromItem {
        FromItem { source, alias: alias.clone(), kind: JoinKind::Inner, lateral: false, on: vec![] }
    }

    fn render_source(&self, p: &mut Printer, indent: usize) {
        match &self.source {
            TableSource::Table(t) => {
                if p.spark() {
                    p.refuse(format!("the table reference {t}"));
                }
                let _ = write!(p.out, "{t} AS {}", self.alias.as_str());
            }
            TableSource::Stored { store, table } => {
                let t = match p.dialect {
                    Dialect::DuckDb => store.table(table),
                    Dialect::Spark => spark_ident(table),
                };
                let _ = write!(p.out, "{t} AS {}", self.alias.as_str());
            }
            TableSource::Recurring(name) => {
                let _ = match p.dialect {
                    Dialect::DuckDb => write!(p.out, "recurring.{} AS {}", name.as_str(), self.alias.as_str()),
                    Dialect::Spark => {
                        write!(p.out, "{} AS {}", Stage::total_view(name.as_str()), self.alias.as_str())
                    }
                };
            }
            TableSource::Cte(name) => {
                let _ = write!(p.out, "{} AS {}", name.as_str(), self.alias.as_str());
            }
            TableSource::Subquery(q) => {
                p.out.push('(');
                newline(p, indent + 1);
                q.render(p, indent + 1);
                newline(p, indent);
                let _ = write!(p.out, ") AS {}", self.alias.as_str());
            }
            TableSource::Raw(sql) => {
                if p.spark() {
                    p.refuse("fulltext search (its SQL is DuckDB's)");
                }
                p.out.push('(');
                newline(p, indent + 1);
                p.out.push_str(sql);
                newline(p, indent);
                let _ = write!(p.out, ") AS {}", self.alias.as_str());
            }
            TableSource::Values { rows, columns } => {
                p.out.push_str("(VALUES ");
                for (i, row) in rows.iter().enumerate() {
                    if i > 0 {
                        p.out.push_str(", ");
                    }
                    p.out.push('(');
                    join_exprs(p, row, ", ", indent);
                    p.out.push(')');
                }
                let cols: Vec<&str> = columns.iter().map(Name::as_str).collect();
                let _ = write!(p.out, ") AS {}({})", self.alias.as_str(), cols.join(", "));
            }
        }
    }
}

impl Lit {
    fn render(&self, p: &mut Printer) {
        match self {
            Lit::Null => p.out.push_str("NULL"),
            Lit::Bool(b) => p.out.push_str(if *b { "TRUE" } else { "FALSE" }),
            Lit::Int(i) => {
                let _ = write!(p.out, "{i}");
            }
            Lit::Double(d) if d.is_finite() => {
                let _ = write!(p.out, "CAST({d:?} AS DOUBLE)");
            }
            Lit::Double(d) => {
                let _ = write!(p.out, "CAST({} AS DOUBLE)", quote_str(&d.to_string()));
            }
            Lit::Str(s) if p.spark() => p.out.push_str(&spark_str(s)),
            Lit::Str(s) => p.out.push_str(&string_value(s)),
            Lit::Typed(s, ty) if p.spark() => {
                let t = p.cast_type(ty);
                let _ = write!(p.out, "CAST({} AS {t})", spark_str(s));
            }
            Lit::Typed(s, ty) => {
                let _ = write!(p.out, "CAST({} AS {ty})", string_value(s));
            }
        }
    }
}

impl Expr {
    fn render(&self, p: &mut Printer, indent: usize) {
        if let Some((_, name)) = p.outputs.iter().find(|(e, _)| e == self) {
            let name = name.clone();
            p.out.push_str(&name);
            return;
        }
        match self {
            Expr::Col(a, c) => {
                let _ = write!(p.out, "{}.{}", a.as_str(), c.as_str());
            }
            Expr::Lit(l) => l.render(p),
            Expr::Bin(op, a, b) => {
                p.out.push('(');
                a.render(p, indent);
                let op = if p.spark() && *op == BinOp::Same { "<=>" } else { op.text() };
                let _ = write!(p.out, " {op} ");
                b.render(p, indent);
                p.out.push(')');
            }
            Expr::And(v) | Expr::Or(v) => {
                p.out.push('(');
                join_exprs(p, v, if matches!(self, Expr::And(_)) { " AND " } else { " OR " }, indent);
                p.out.push(')');
            }
            Expr::Not(e) => {
                p.out.push_str("NOT ");
                e.render(p, indent);
            }
            Expr::IsNull(e) | Expr::IsNotNull(e) => {
                p.out.push('(');
                e.render(p, indent);
                p.out.push_str(if matches!(self, Expr::IsNull(_)) { " IS NULL)" } else { " IS NOT NULL)" });
            }
            Expr::Func(name, args) if p.spark() => spark_func(p, name, args, indent),
            Expr::Func(name, args) => {
                let _ = write!(p.out, "{name}(");
                join_exprs(p, args, ", ", indent);
                p.out.push(')');
            }
            Expr::Agg { func, distinct, args } => {
                let func = if p.spark() { spark_agg(p, func, *distinct, args.len()) } else { func };
                let distinct = *distinct && func != "collect_set";
                let _ = write!(p.out, "{func}(");
                if distinct {
                    p.out.push_str("DISTINCT ");
                }
                if args.is_empty() {
                    p.out.push('*');
                }
                join_exprs(p, args, ", ", indent);
                p.out.push(')');
            }
            Expr::Cast(e, ty) => {
                let ty = p.cast_type(ty);
                p.out.push_str("CAST(");
                e.render(p, indent);
                let _ = write!(p.out, " AS {ty})");
            }
            Expr::Case { whens, otherwise } => {
                p.out.push_str("CASE");
                for (w, t) in whens {
                    p.out.push_str(" WHEN ");
                    w.render(p, indent);
                    p.out.push_str(" THEN ");
                    t.render(p, indent);
                }
                if let Some(o) = otherwise {
                    p.out.push_str(" ELSE ");
                    o.render(p, indent);
                }
                p.out.push_str(" END");
            }
            Expr::InList(e, list) => {
                e.render(p, indent);
                p.out.push_str(" IN (");
                join_exprs(p, list, ", ", indent);
                p.out.push(')');
            }
            Expr::Exists(q) | Expr::Subquery(q) => {
                p.out.push_str(if matches!(self, Expr::Exists(_)) { "EXISTS (" } else { "(" });
                newline(p, indent + 1);
                q.render(p, indent + 1);
                newline(p, indent);
                p.out.push(')');
            }
            Expr::Struct(fields) if p.spark() => {
                p.out.push_str("named_struct(");
                for (i, (n, e)) in fields.iter().enumerate() {
                    if i > 0 {
                        p.out.push_str(", ");
                    }
                    let _ = write!(p.out, "{}, ", spark_str(n.as_str()));
                    e.render(p, indent);
                }
                p.out.push(')');
            }
            Expr::Struct(fields) => {
                p.out.push('{');
                for (i, (n, e)) in fields.iter().enumerate() {
                    if i > 0 {
                        p.out.push_str(", ");
                    }
                    let _ = write!(p.out, "{}: ", quote_str(n.as_str()));
                    e.render(p, indent);
                }
                p.out.push('}');
            }
            Expr::Field(e, n) => {
                p.out.push('(');
                e.render(p, indent);
                let _ = write!(p.out, ").{}", n.as_str());
            }
            Expr::Slice(l, a, b) if p.spark() => {
                // Spark's slice takes a start (1-based) and a length
                p.out.push_str("slice(");
                l.render(p, indent);
                p.out.push_str(", ");
                a.render(p, indent);
                p.out.push_str(", (");
                b.render(p, indent);
                p.out.push_str(") - (");
                a.render(p, indent);
                p.out.push_str(") + 1)");
            }
            Expr::Slice(l, a, b) => {
                p.out.push('(');
                l.render(p, indent);
                p.out.push_str(")[");
                a.render(p, indent);
                p.out.push(':');
                b.render(p, indent);
                p.out.push(']');
            }
            Expr::Shuffle(l) if p.spark() => {
                p.out.push_str("shuffle(");
                l.render(p, indent);
                p.out.push(')');
            }
            Expr::Shuffle(l) => {
                // DuckDB has no shuffle: each element is paired with a random key, the pairs sorted, the keys
                // dropped (`random()` in a lambda is drawn per element)
                p.out.push_str("list_transform(list_sort(list_transform(");
                l.render(p, indent);
                p.out.push_str(", lambda rnd_e: {'k': random(), 'e': rnd_e})), lambda rnd_kv: rnd_kv.e)");
            }
            Expr::Draw(..) if p.spark() => p.refuse("the aggregate rand (Spark allows no random draw in a lambda)"),
            Expr::Draw(l, n) => {
                // one element at a 1-based index drawn uniformly from 1..=len(l)
                let pick = |p: &mut Printer| {
                    p.out.push('(');
                    l.render(p, indent);
                    p.out.push_str(")[1 + CAST(floor(random() * len(");
                    l.render(p, indent);
                    p.out.push_str(")) AS BIGINT)]");
                };
                match n {
                    None => pick(p),
                    Some(n) => {
                        p.out.push_str("list_transform(range(");
                        n.render(p, indent);
                        p.out.push_str("), lambda rnd_i: ");
                        pick(p);
                        p.out.push(')');
                    }
                }
            }
        }
    }
}

impl Printer {
    /// A cast's target type in this dialect.
    fn cast_type(&mut self, ty: &str) -> String {
        if !self.spark() {
            return ty.to_string();
        }
        spark_type(ty).unwrap_or_else(|| {
            self.refuse(format!("the type {ty}"));
            ty.to_string()
        })
    }
}

/// A DuckDB function call of the planner in Spark's words (Spark 4: `startswith`, `instr`, `element_at`, ...),
/// or refused when Spark has no equivalent.
fn spark_func(p: &mut Printer, name: &str, args: &[Expr], indent: usize) {
    let call = |p: &mut Printer, f: &str, args: &[Expr], extra: &str| {
        let _ = write!(p.out, "{f}(");
        join_exprs(p, args, ", ", indent);
        p.out.push_str(extra);
        p.out.push(')');
    };
    match name {
        "coalesce" | "concat" | "contains" | "length" | "substr" | "substring" | "upper" | "lower" | "trim"
        | "greatest" | "least" | "mod" => call(p, name, args, ""),
        "starts_with" => call(p, "startswith", args, ""),
        "suffix" => call(p, "endswith", args, ""),
        "strpos" => call(p, "instr", args, ""),
        "len" => call(p, "size", args, ""),
        "list_extract" => call(p, "element_at", args, ""),
        "list_value" => call(p, "array", args, ""),
        "epoch_us" => call(p, "unix_micros", args, ""),
        "error" => call(p, "raise_error", args, ""),
        "encode" => call(p, "encode", args, ", 'UTF-8'"),
        "regexp_matches" => call(p, "regexp_like", args, ""),
        "regexp_extract" => call(p, "regexp_extract", args, ", 0"),
        "regexp_full_match" if args.len() == 2 => {
            p.out.push_str("regexp_like(");
            args[0].render(p, indent);
            p.out.push_str(", concat('^(?:', ");
            args[1].render(p, indent);
            p.out.push_str(", ')$'))");
        }
        // `try(CAST(x AS t))`: a cast that gives NULL instead of failing
        "try" => match args {
            [Expr::Cast(e, ty)] => {
                let ty = p.cast_type(ty);
                p.out.push_str("try_cast(");
                e.render(p, indent);
                let _ = write!(p.out, " AS {ty})");
            }
            _ => p.refuse("the function try"),
        },
        _ => p.refuse(format!("the function {name}")),
    }
}

/// An aggregate function of the planner in Spark's words, or refused when Spark has no equivalent.
fn spark_agg(p: &mut Printer, func: &'static str, distinct: bool, args: usize) -> &'static str {
    match (func, args) {
        ("count" | "sum" | "avg" | "median" | "var_pop" | "stddev_pop", _) | ("min" | "max", 1) => func,
        ("arg_min", 2) => "min_by",
        ("arg_max", 2) => "max_by",
        ("list", 1) if distinct => "collect_set",
        ("list", 1) => "collect_list",
        _ => {
            p.refuse(format!("the aggregate {func} with {args} arguments (min/max of n values)"));
            func
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_literals_and_names() {
        let t = Name::new("t0");
        let s = Select {
            items: vec![(Expr::col(&t, "v"), Some("we\"ird".into()))],
            from: vec![FromItem::inner(TableSource::Table("\"mentat\".\"cur_1\"".into()), &t)],
            filters: vec![Expr::eq(Expr::col(&t, "v"), Expr::str("it's"))],
            ..Default::default()
        };
        assert_eq!(
            Query::Select(Box::new(s)).to_sql(),
            "SELECT t0.v AS \"we\"\"ird\"\nFROM \"mentat\".\"cur_1\" AS t0\nWHERE (t0.v = 'it''s')"
        );
        assert_eq!(Name::new("A-b?").as_str(), "__b_");
    }
}
