//! A small structured SQL builder for the DuckDB dialect: the one place where identifiers and
//! literals are quoted. Every piece of user text reaches SQL as a [`Lit`] (quoted with
//! [`quote_str`]) or as an output column name (quoted with [`quote_ident`]); table references come
//! from [`crate::layout::StoreName`], and aliases and column names are generated here
//! (`t0`, `e`, `c1`, ...), so nothing from EDN is ever spliced raw.

use crate::layout::{quote_ident, quote_str, string_value};
use std::fmt::Write;

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
            // Correlated references inside subqueries count as references of the enclosing clause.
            Expr::Exists(q) | Expr::Subquery(q) => q.outer_aliases(out),
        }
    }
}

/// What a FROM item reads.
#[derive(Clone, Debug, PartialEq)]
pub enum TableSource {
    /// A quoted table reference produced by [`crate::layout::StoreName`].
    Table(String),
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
                        TableSource::Table(_) | TableSource::Cte(_) | TableSource::Raw(_) => {}
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
        let mut out = String::new();
        self.render(&mut out, 0);
        out
    }

    fn render(&self, out: &mut String, indent: usize) {
        match self {
            Query::Select(s) => s.render(out, indent),
            Query::Union { all, parts } => {
                for (i, p) in parts.iter().enumerate() {
                    if i > 0 {
                        newline(out, indent);
                        out.push_str(if *all { "UNION ALL" } else { "UNION" });
                        newline(out, indent);
                    }
                    p.render(out, indent);
                }
            }
            Query::With { recursive, ctes, body } => {
                out.push_str(if *recursive { "WITH RECURSIVE " } else { "WITH " });
                for (i, c) in ctes.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    let cols: Vec<&str> = c.columns.iter().map(Name::as_str).collect();
                    let _ = write!(out, "{}({}) ", c.name.as_str(), cols.join(", "));
                    if c.using_key {
                        let _ = write!(out, "USING KEY ({}) ", cols.join(", "));
                    }
                    out.push_str("AS (");
                    newline(out, indent + 1);
                    c.query.render(out, indent + 1);
                    newline(out, indent);
                    out.push(')');
                }
                newline(out, indent);
                body.render(out, indent);
            }
        }
    }
}

fn newline(out: &mut String, indent: usize) {
    out.push('\n');
    for _ in 0..indent {
        out.push_str("  ");
    }
}

fn join_exprs(out: &mut String, exprs: &[Expr], sep: &str, indent: usize) {
    for (i, e) in exprs.iter().enumerate() {
        if i > 0 {
            out.push_str(sep);
        }
        e.render(out, indent);
    }
}

impl Select {
    fn render(&self, out: &mut String, indent: usize) {
        out.push_str(if self.distinct { "SELECT DISTINCT " } else { "SELECT " });
        if self.items.is_empty() {
            out.push('1');
        }
        for (i, (e, name)) in self.items.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            e.render(out, indent);
            if let Some(n) = name {
                let _ = write!(out, " AS {}", quote_ident(n));
            }
        }
        for (i, f) in self.from.iter().enumerate() {
            newline(out, indent);
            if i == 0 {
                out.push_str("FROM ");
            } else {
                match (&f.kind, f.on.is_empty()) {
                    (JoinKind::Inner, true) => out.push_str("CROSS JOIN "),
                    (JoinKind::Inner, false) => out.push_str("JOIN "),
                    (JoinKind::Left, _) => out.push_str("LEFT JOIN "),
                }
                if f.lateral {
                    out.push_str("LATERAL ");
                }
            }
            f.render_source(out, indent);
            if i > 0 && (!f.on.is_empty() || f.kind == JoinKind::Left) {
                out.push_str(" ON ");
                Expr::all(f.on.clone()).render(out, indent);
            }
        }
        let clauses: [(&str, &[Expr], &str); 3] = [
            ("WHERE ", &self.filters, " AND "),
            ("GROUP BY ", &self.group_by, ", "),
            ("HAVING ", &self.having, " AND "),
        ];
        for (kw, exprs, sep) in clauses {
            if !exprs.is_empty() {
                newline(out, indent);
                out.push_str(kw);
                join_exprs(out, exprs, sep, indent);
            }
        }
        if !self.order_by.is_empty() {
            newline(out, indent);
            out.push_str("ORDER BY ");
            for (i, (e, desc)) in self.order_by.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                e.render(out, indent);
                out.push_str(if *desc { " DESC" } else { " ASC" });
            }
        }
        if let Some(l) = self.limit {
            newline(out, indent);
            let _ = write!(out, "LIMIT {l}");
        }
        if let Some(o) = self.offset {
            newline(out, indent);
            let _ = write!(out, "OFFSET {o}");
        }
    }
}

impl FromItem {
    /// A plain source: inner join, not lateral, no ON condition (a cross join after the first item).
    pub fn inner(source: TableSource, alias: &Name) -> FromItem {
        FromItem { source, alias: alias.clone(), kind: JoinKind::Inner, lateral: false, on: vec![] }
    }

    fn render_source(&self, out: &mut String, indent: usize) {
        match &self.source {
            TableSource::Table(t) => {
                let _ = write!(out, "{t} AS {}", self.alias.as_str());
            }
            TableSource::Cte(name) => {
                let _ = write!(out, "{} AS {}", name.as_str(), self.alias.as_str());
            }
            TableSource::Subquery(q) => {
                out.push('(');
                newline(out, indent + 1);
                q.render(out, indent + 1);
                newline(out, indent);
                let _ = write!(out, ") AS {}", self.alias.as_str());
            }
            TableSource::Raw(sql) => {
                out.push('(');
                newline(out, indent + 1);
                out.push_str(sql);
                newline(out, indent);
                let _ = write!(out, ") AS {}", self.alias.as_str());
            }
            TableSource::Values { rows, columns } => {
                out.push_str("(VALUES ");
                for (i, row) in rows.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    out.push('(');
                    join_exprs(out, row, ", ", indent);
                    out.push(')');
                }
                let cols: Vec<&str> = columns.iter().map(Name::as_str).collect();
                let _ = write!(out, ") AS {}({})", self.alias.as_str(), cols.join(", "));
            }
        }
    }
}

impl Lit {
    fn render(&self, out: &mut String) {
        match self {
            Lit::Null => out.push_str("NULL"),
            Lit::Bool(b) => out.push_str(if *b { "TRUE" } else { "FALSE" }),
            Lit::Int(i) => {
                let _ = write!(out, "{i}");
            }
            Lit::Double(d) if d.is_finite() => {
                let _ = write!(out, "CAST({d:?} AS DOUBLE)");
            }
            Lit::Double(d) => {
                let _ = write!(out, "CAST({} AS DOUBLE)", quote_str(&d.to_string()));
            }
            Lit::Str(s) => out.push_str(&string_value(s)),
            Lit::Typed(s, ty) => {
                let _ = write!(out, "CAST({} AS {ty})", string_value(s));
            }
        }
    }
}

impl Expr {
    fn render(&self, out: &mut String, indent: usize) {
        match self {
            Expr::Col(a, c) => {
                let _ = write!(out, "{}.{}", a.as_str(), c.as_str());
            }
            Expr::Lit(l) => l.render(out),
            Expr::Bin(op, a, b) => {
                out.push('(');
                a.render(out, indent);
                let _ = write!(out, " {} ", op.text());
                b.render(out, indent);
                out.push(')');
            }
            Expr::And(v) | Expr::Or(v) => {
                out.push('(');
                join_exprs(out, v, if matches!(self, Expr::And(_)) { " AND " } else { " OR " }, indent);
                out.push(')');
            }
            Expr::Not(e) => {
                out.push_str("NOT ");
                e.render(out, indent);
            }
            Expr::IsNull(e) | Expr::IsNotNull(e) => {
                out.push('(');
                e.render(out, indent);
                out.push_str(if matches!(self, Expr::IsNull(_)) { " IS NULL)" } else { " IS NOT NULL)" });
            }
            Expr::Func(name, args) => {
                let _ = write!(out, "{name}(");
                join_exprs(out, args, ", ", indent);
                out.push(')');
            }
            Expr::Agg { func, distinct, args } => {
                let _ = write!(out, "{func}(");
                if *distinct {
                    out.push_str("DISTINCT ");
                }
                if args.is_empty() {
                    out.push('*');
                }
                join_exprs(out, args, ", ", indent);
                out.push(')');
            }
            Expr::Cast(e, ty) => {
                out.push_str("CAST(");
                e.render(out, indent);
                let _ = write!(out, " AS {ty})");
            }
            Expr::Case { whens, otherwise } => {
                out.push_str("CASE");
                for (w, t) in whens {
                    out.push_str(" WHEN ");
                    w.render(out, indent);
                    out.push_str(" THEN ");
                    t.render(out, indent);
                }
                if let Some(o) = otherwise {
                    out.push_str(" ELSE ");
                    o.render(out, indent);
                }
                out.push_str(" END");
            }
            Expr::InList(e, list) => {
                e.render(out, indent);
                out.push_str(" IN (");
                join_exprs(out, list, ", ", indent);
                out.push(')');
            }
            Expr::Exists(q) | Expr::Subquery(q) => {
                out.push_str(if matches!(self, Expr::Exists(_)) { "EXISTS (" } else { "(" });
                newline(out, indent + 1);
                q.render(out, indent + 1);
                newline(out, indent);
                out.push(')');
            }
            Expr::Struct(fields) => {
                out.push('{');
                for (i, (n, e)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    let _ = write!(out, "{}: ", quote_str(n.as_str()));
                    e.render(out, indent);
                }
                out.push('}');
            }
            Expr::Field(e, n) => {
                out.push('(');
                e.render(out, indent);
                let _ = write!(out, ").{}", n.as_str());
            }
            Expr::Slice(l, a, b) => {
                out.push('(');
                l.render(out, indent);
                out.push_str(")[");
                a.render(out, indent);
                out.push(':');
                b.render(out, indent);
                out.push(']');
            }
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
