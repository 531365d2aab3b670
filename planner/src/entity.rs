//! The entity path: queries that only follow entities from bound values, answered from the store's entity index
//! (`storage::eindex`, Datomic's covering indexes held in memory) instead of a DuckDB statement.
//!
//! A DuckDB statement costs about 0.25 ms however little it reads, and each table scan in it about 0.2 ms more
//! even when an index finds its one row (`storage/README.md`, "Entity reads"). Point lookups, pulls and ref
//! traversals are a handful of index probes: answered in memory they cost microseconds, so the call costs
//! about one statement, the caller's own.
//!
//! [`plan`] decides, per query, whether the entity path can answer it; it says no (None) to everything else,
//! which the general path (one SQL statement) answers as before. Eligible are queries
//! - whose `:where` holds data patterns `[e :attr v]` with a constant forward attribute; comparison predicates of
//!   two numbers, two strings or two instants and text tests of two strings ([`Filter`]); `not` / `not-join`
//!   clauses of patterns and comparisons that can be probed from each row ([`EntityPlan::nots`]; `missing?` is
//!   one); `or` / `or-join` clauses of those placed where every branch can be probed ([`Or`]); `get-else` with a
//!   constant default ([`Step::default`]); and calls of non-recursive rules of these, inlined (`expand_rules`);
//! - whose find spec is plain variables, `(pull ?e pattern)` of a bound entity with a literal pattern the index
//!   answers ([`crate::pull::entity_path_pattern`]; the caller pulls those columns, [`EntityPlan::pulls`]) or the
//!   aggregates `count`, `count-distinct`, `min`, `max`, and `sum` / `avg` of longs, without pulls ([`Agg`];
//!   `:with` only beside them), with `:order` only on find variables (and `:limit` / `:offset`, numbers, only
//!   with an `:order`: [`EntityPlan::order`]);
//! - whose inputs are scalars (a lookup ref among them), tuples, collections (of lookup refs of one attribute too)
//!   or relations;
//! - and which can be evaluated left to right from bound values: each pattern, in the order [`plan`] picks, has
//!   its entity bound (an EAVT probe) or its value bound on an attribute with a value index (unique, `:db/index`
//!   or a ref: AVET/VAET). A pattern that would need a scan makes the query ineligible, but in a query of a
//!   `since` database (since a tx entid), where the scan reads only the attribute's datoms asserted after that
//!   tx, a suffix of the index's tx order ([`Access::Since`]).
//!
//! Every answer is the general path's answer (`tests/test_entity_path.py` runs the query tests through both).

use crate::algebrize::functions::COMPARISONS;
use crate::parse::{Binding, Clause, FindElem, FindSpec, InBinding, Query, Term, Var};
use crate::schema::{Entid, Schema, ValueType};
use crate::sql::BinOp;
use crate::types::Constant;
use crate::{inputs, FindKind, OutputColumn};
use edn_format::Value;
use std::collections::HashMap;
use std::fmt;

/// A value at a position of the entity path: entids, longs, booleans (0/1) and instants (microseconds) as
/// integers; strings, keywords (with the colon), uris and uuids as text.
#[derive(Clone, Debug, PartialEq)]
pub enum Key {
    Int(i64),
    Float(f64),
    Text(String),
}

/// A position of a pattern: a variable (its index in [`EntityPlan::vars`]), a constant, or `_`.
#[derive(Clone, Debug, PartialEq)]
pub enum Slot {
    Var(usize),
    Const(Key),
    Blank,
}

/// How a step reaches its datoms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// The entity is bound: the attribute's values of that entity (EAVT).
    Eavt,
    /// The value is bound: the entities holding that value (AVET, VAET for refs).
    Avet,
    /// Nothing is bound, in a query of a `since` database: the attribute's datoms asserted after the since tx (the
    /// index's tx order, a suffix of it), filtered by what the pattern binds already.
    Since,
}

/// One data pattern `[e attr v]`, in evaluation order.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub e: Slot,
    pub attr: Entid,
    /// The attribute's ident, for `mentat_explain`.
    pub ident: String,
    pub v: Slot,
    pub access: Access,
    /// `[(get-else $ ?e :attr default) ?v]`: the value bound when the entity has none (an EAVT step of a
    /// cardinality-one attribute, Datomic's `get-else`).
    pub default: Option<Key>,
}

/// A conjunction of data patterns, as probes in order, and comparisons, run from one row of the query: the body
/// of a `not` / `not-join` ([`EntityPlan::nots`]) or one branch of an `or` / `or-join` ([`Or`]). Its join
/// variables are bound in the row; the others are its own, slots of [`EntityPlan::vars`] that no other clause
/// uses. Every step is a probe.
#[derive(Clone, Debug, PartialEq)]
pub struct Conjunction {
    pub steps: Vec<Step>,
    pub filters: Vec<Filter>,
}

/// An `or` or `or-join` clause of data patterns and comparisons, run from each row at its place among the steps
/// ([`EntityPlan::ors`]): each branch's steps are run from the row and the rows they find that pass the branch's
/// filters are kept, with the branch's own variables (those not joined: every variable for `or`, the listed ones
/// for `or-join`) cleared, so that the union is a set of the query's variables, as the general path's `UNION`.
#[derive(Clone, Debug, PartialEq)]
pub struct Or {
    pub branches: Vec<Conjunction>,
    /// The slots of the branches' own variables, cleared in the rows they give.
    pub locals: Vec<usize>,
}

/// A data pattern as the planner reads it: entity, attribute entid, ident, value, whether the attribute has a
/// value index (unique, `:db/index` or a ref), (cardinality one, unique), and a `get-else` default.
type Pattern = (Slot, Entid, String, Slot, bool, (bool, bool), Option<Key>);

/// A predicate clause `[(op a b)]` the entity path evaluates over each row once every step has run: two operands,
/// variables or constants. A comparison reads both numbers (longs, doubles and entids, compared by value as DuckDB
/// compares them, NaN equal to NaN and above every number), both strings (by their bytes) or both instants (by
/// their microseconds); `starts-with?`, `ends-with?` and `includes?` read two strings (DuckDB's `starts_with`,
/// `suffix` and `contains`, as the general path compiles them: bytes, the empty string a prefix, suffix and part
/// of every string).
#[derive(Clone, Debug, PartialEq)]
pub struct Filter {
    pub test: Test,
    pub a: Slot,
    pub b: Slot,
    /// The clause as written, for `mentat_explain` (a NUL byte written `\u0000`).
    pub form: String,
}

/// Orders two doubles as DuckDB compares and sorts them: by value, NaN equal to NaN and above every number (the
/// entity path's filters and `:order`).
pub fn double_order(x: f64, y: f64) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    match (x.is_nan(), y.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (false, false) => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
    }
}

/// An aggregate find element the entity path computes, with Datomic's semantics as the general path compiles
/// them (`planner::emit`): the rows, projected onto the find's columns, are a set; they are grouped by the
/// columns that are not aggregates, and a group's `count` is its number of rows, `count-distinct` the number of
/// distinct values of its variable, `min` / `max` its least / greatest value (numbers by value, NaN above every
/// number, text by its bytes, instants by time, as DuckDB's `min` and `max`), `sum` / `avg` of longs their exact sum (a BIGINT) and
/// that sum over the count (a DOUBLE). With no grouping column and no row, no row (Datomic answers `[]`, not a
/// count of 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Agg {
    Count,
    CountDistinct,
    Min,
    Max,
    Sum,
    Avg,
}

impl Agg {
    /// The aggregate of a find element `(func ?x)` over a variable of type `t` (no `n`), or None when the
    /// general path must compute it: `min` / `max` of keywords (Clojure's keyword order) and booleans,
    /// `sum` / `avg` of anything but longs (a sum of doubles depends on the order of its terms), and the rest.
    fn of(func: &str, t: ValueType) -> Option<Agg> {
        let ordered =
            matches!(t, ValueType::Long | ValueType::Double | ValueType::Ref | ValueType::String | ValueType::Instant);
        match func {
            "count" => Some(Agg::Count),
            "count-distinct" => Some(Agg::CountDistinct),
            "min" if ordered => Some(Agg::Min),
            "max" if ordered => Some(Agg::Max),
            "sum" if t == ValueType::Long => Some(Agg::Sum),
            "avg" if t == ValueType::Long => Some(Agg::Avg),
            _ => None,
        }
    }

    /// The type of the aggregate's column over a variable of type `t`, as the general path types it.
    fn result_type(self, t: ValueType) -> ValueType {
        match self {
            Agg::Count | Agg::CountDistinct | Agg::Sum => ValueType::Long,
            Agg::Avg => ValueType::Double,
            Agg::Min | Agg::Max => t,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Agg::Count => "count",
            Agg::CountDistinct => "count-distinct",
            Agg::Min => "min",
            Agg::Max => "max",
            Agg::Sum => "sum",
            Agg::Avg => "avg",
        }
    }
}

/// A total order of keys as DuckDB compares values of one type (numbers by value, NaN equal to NaN and above
/// every number, text by its bytes); keys of different kinds, which one column never mixes, by kind.
fn key_cmp(a: &Key, b: &Key) -> std::cmp::Ordering {
    match (a, b) {
        (Key::Int(x), Key::Int(y)) => x.cmp(y),
        (Key::Float(x), Key::Float(y)) => double_order(*x, *y),
        (Key::Text(x), Key::Text(y)) => x.as_bytes().cmp(y.as_bytes()),
        _ => {
            let kind = |k: &Key| match k {
                Key::Int(_) => 0,
                Key::Float(_) => 1,
                Key::Text(_) => 2,
            };
            kind(a).cmp(&kind(b))
        }
    }
}

/// What a [`Filter`] tests of its two operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Test {
    /// One of the comparisons (`Eq`, `Ne`, `Lt`, `Le`, `Gt`, `Ge`), as the general path compiles the clause.
    Compare(BinOp),
    StartsWith,
    EndsWith,
    Includes,
}

impl Filter {
    /// Whether a row whose left operand orders `o` against its right one passes a comparison.
    pub fn holds(&self, o: std::cmp::Ordering) -> bool {
        use std::cmp::Ordering::*;
        let Test::Compare(op) = self.test else { return false };
        match op {
            BinOp::Eq => o == Equal,
            BinOp::Ne => o != Equal,
            BinOp::Lt => o == Less,
            BinOp::Le => o != Greater,
            BinOp::Gt => o == Greater,
            BinOp::Ge => o != Less,
            _ => false,
        }
    }

    /// Whether a row whose operands are the strings `a` and `b` passes: a comparison by their bytes, or the text
    /// test.
    pub fn holds_text(&self, a: &str, b: &str) -> bool {
        match self.test {
            Test::Compare(_) => self.holds(a.as_bytes().cmp(b.as_bytes())),
            Test::StartsWith => a.starts_with(b),
            Test::EndsWith => a.ends_with(b),
            Test::Includes => a.contains(b),
        }
    }
}

/// A query the entity path answers: seed rows from the inputs, the steps, and the find variables.
#[derive(Clone, Debug, PartialEq)]
pub struct EntityPlan {
    /// The query's variables, each with the value type it holds (Ref for entities).
    pub vars: Vec<(Var, ValueType)>,
    /// The rows the inputs bind (one row of `None` when there are none): one slot per variable.
    pub seeds: Vec<Vec<Option<Key>>>,
    pub steps: Vec<Step>,
    /// The variable of each output column.
    pub find: Vec<usize>,
    pub kind: FindKind,
    /// Read the database as of this tx entid (Datomic's `as-of`); None reads it now.
    pub as_of: Option<Entid>,
    /// Read the database since this tx entid (Datomic's `since`: the datoms of now asserted after it); None
    /// reads all of now. Never together with `as_of` (the general path answers both).
    pub since: Option<Entid>,
    /// The rows the steps give are distinct without a hash set (Datalog answers are sets): the seed rows are
    /// (scalars and collections, whose values are deduplicated; not relations), every step gives at most one row
    /// per datom and binds every position that could tell two of its datoms apart (a `_` value of a
    /// cardinality-one attribute, a `_` entity of a unique one), and the find holds every variable once but those
    /// a scalar or tuple input binds (one value in every row). The transactor keeps cardinality one and
    /// uniqueness, now and at every tx, so this holds as of any tx too.
    pub distinct: bool,
    /// The output columns that are `(pull ?e pattern)` find elements: (column, the pattern as EDN text). Such a
    /// column's variable holds the entity; the caller pulls it (`crate::pull::entity_path_pattern`).
    pub pulls: Vec<(usize, String)>,
    /// The query's `:order`: (output column, descending), keys in order; the caller sorts the rows as the general
    /// path's `ORDER BY` does (numbers by value, text by its bytes, keywords in Clojure's keyword order as
    /// `crate::types::keyword_order`). Every key is a plain find variable's column.
    pub order: Vec<(usize, bool)>,
    /// `:offset` and `:limit` (numbers), applied after the order; only with an `:order` (without one, which rows
    /// a limit keeps is the engine's choice, and the two paths would choose differently).
    pub offset: usize,
    pub limit: Option<usize>,
    /// Comparison predicates, applied to every row after the steps (before the projection to the find).
    pub filters: Vec<Filter>,
    /// The aggregate find elements: (output column, aggregate); the column's variable in [`EntityPlan::find`] is
    /// the aggregated one. Applied by [`EntityPlan::aggregate`] to the distinct projected rows; never with pulls.
    pub aggregates: Vec<(usize, Agg)>,
    /// The `:with` variables (only beside aggregates): the last `with` columns of [`EntityPlan::find`], part of
    /// the set the aggregates read and dropped from the answer by [`EntityPlan::aggregate`].
    pub with: usize,
    /// The `not` / `not-join` clauses, each applied to every row after the filters: its conjunction is run from
    /// the row, and the row is dropped when it finds any row that passes its filters, as the general path's
    /// `NOT EXISTS` drops it.
    pub nots: Vec<Conjunction>,
    /// The `or` / `or-join` clauses, each with the index of the step it runs before (`steps.len()`: after the
    /// last); an `or` is placed where every branch can be probed from what is bound, binding its join variables.
    pub ors: Vec<(usize, Or)>,
}

impl EntityPlan {
    /// Every step of the plan: its own, then its negations'.
    pub fn all_steps(&self) -> impl Iterator<Item = &Step> {
        self.steps
            .iter()
            .chain(self.nots.iter().flat_map(|n| n.steps.iter()))
            .chain(self.ors.iter().flat_map(|(_, o)| o.branches.iter().flat_map(|b| b.steps.iter())))
    }

    /// The value type of output column `c`: an aggregate's as [`Agg`] types it, any other column's its variable's.
    pub fn column_type(&self, c: usize) -> ValueType {
        let t = self.vars[self.find[c]].1;
        match self.aggregates.iter().find(|(a, _)| *a == c) {
            Some((_, agg)) => agg.result_type(t),
            None => t,
        }
    }

    /// Groups the answer's `rows` (one key per find column, distinct: a Datalog set) by the columns that are not
    /// aggregates and computes the aggregates of each group ([`Agg`]): one row per group, in no particular order.
    /// Rows come back unchanged when the find has no aggregate. None when the general path must answer: a sum
    /// outside a long (its statement fails as DuckDB's cast of the sum fails), or an average whose sum a double does
    /// not hold exactly (the general path's sum of doubles would then depend on the order of its terms).
    pub fn aggregate(&self, mut rows: Vec<Vec<Key>>) -> Option<Vec<Vec<Key>>> {
        if self.aggregates.is_empty() {
            return Some(rows);
        }
        let shown = self.find.len() - self.with;
        let keys: Vec<usize> = (0..shown).filter(|c| !self.aggregates.iter().any(|(a, _)| a == c)).collect();
        let by_keys = |a: &Vec<Key>, b: &Vec<Key>| {
            keys.iter().map(|c| key_cmp(&a[*c], &b[*c])).find(|o| o.is_ne()).unwrap_or(std::cmp::Ordering::Equal)
        };
        rows.sort_by(by_keys);
        let mut out = Vec::new();
        let mut start = 0;
        while start < rows.len() {
            let len = rows[start..].iter().position(|r| by_keys(r, &rows[start]).is_ne()).unwrap_or(rows.len() - start);
            let group = &rows[start..start + len];
            let mut row = group[0].clone();
            for (c, agg) in &self.aggregates {
                let values = group.iter().map(|r| &r[*c]);
                row[*c] = match agg {
                    Agg::Count => Key::Int(len as i64),
                    Agg::CountDistinct => {
                        let mut v: Vec<&Key> = values.collect();
                        v.sort_by(|a, b| key_cmp(a, b));
                        v.dedup_by(|a, b| key_cmp(a, b).is_eq());
                        Key::Int(v.len() as i64)
                    }
                    Agg::Min => values.min_by(|a, b| key_cmp(a, b)).cloned().unwrap_or(Key::Int(0)),
                    Agg::Max => values.max_by(|a, b| key_cmp(a, b)).cloned().unwrap_or(Key::Int(0)),
                    Agg::Sum | Agg::Avg => {
                        let ints: Vec<i64> = values.map(|k| if let Key::Int(x) = k { *x } else { 0 }).collect();
                        let sum: i128 = ints.iter().map(|x| *x as i128).sum();
                        // every partial sum of doubles is exact when len * the largest magnitude stays under 2^53
                        let largest = ints.iter().map(|x| x.unsigned_abs() as u128).max().unwrap_or(0);
                        if *agg == Agg::Sum {
                            Key::Int(i64::try_from(sum).ok()?)
                        } else if largest * (len as u128) < 1 << 53 {
                            Key::Float(sum as f64 / len as f64)
                        } else {
                            return None;
                        }
                    }
                };
            }
            row.truncate(shown);
            out.push(row);
            start += len;
        }
        Some(out)
    }
}

impl fmt::Display for EntityPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let slot = |s: &Slot| match s {
            Slot::Var(i) => self.vars[*i].0 .0.clone(),
            Slot::Const(k) => shown(k),
            Slot::Blank => "_".into(),
        };
        // a constant as the query wrote it: a number, a keyword (its text starts with `:`), else a string
        fn shown(k: &Key) -> String {
            match k {
                Key::Int(i) => i.to_string(),
                Key::Float(x) => format!("{x:?}"),
                Key::Text(t) if t.starts_with(':') && !t.contains(char::is_whitespace) => t.clone(),
                Key::Text(t) => crate::error::show(&Value::String(t.clone())),
            }
        }
        write!(f, "entity index: {} seed row(s)", self.seeds.len())?;
        if let Some(t) = self.as_of {
            write!(f, ", as of tx {t}")?;
        }
        if let Some(t) = self.since {
            write!(f, ", since tx {t}")?;
        }
        let step = |s: &Step| {
            let how = match s.access {
                Access::Eavt => "EAVT",
                Access::Avet => "AVET",
                Access::Since => "SINCE",
            };
            let default = s.default.as_ref().map(|d| format!(" else {}", shown(d))).unwrap_or_default();
            format!("{how} [{} {} {}]{default}", slot(&s.e), s.ident, slot(&s.v))
        };
        for s in &self.steps {
            write!(f, "; {}", step(s))?;
        }
        let probes = |c: &Conjunction| -> String {
            let all: Vec<String> =
                c.steps.iter().map(step).chain(c.filters.iter().map(|x| format!("filter {}", x.form))).collect();
            all.join("; ")
        };
        for (at, o) in &self.ors {
            let branches: Vec<String> = o.branches.iter().map(probes).collect();
            write!(f, "; or before step {at} ({})", branches.join(" | "))?;
        }
        for n in &self.nots {
            write!(f, "; not ({})", probes(n))?;
        }
        for (c, pattern) in &self.pulls {
            write!(f, "; pull {} {pattern}", self.vars[self.find[*c]].0 .0)?;
        }
        for (c, agg) in &self.aggregates {
            write!(f, "; {} {}", agg.name(), self.vars[self.find[*c]].0 .0)?;
        }
        for i in &self.find[self.find.len() - self.with..] {
            write!(f, "; with {}", self.vars[*i].0 .0)?;
        }
        for c in &self.filters {
            write!(f, "; filter {}", c.form)?;
        }
        if !self.order.is_empty() {
            let keys: Vec<String> = self
                .order
                .iter()
                .map(|(c, desc)| format!("{}{}", self.vars[self.find[*c]].0 .0, if *desc { " desc" } else { "" }))
                .collect();
            write!(f, "; order {}", keys.join(" "))?;
        }
        if self.offset > 0 {
            write!(f, "; offset {}", self.offset)?;
        }
        if let Some(n) = self.limit {
            write!(f, "; limit {n}")?;
        }
        Ok(())
    }
}

/// The entity path's plan for `query` with `inputs_edn`, or None when the general path must answer it (see the
/// module docs). `columns` are the general path's output columns, whose types the entity path must produce.
/// With `since` (a tx entid: the query reads a `since` database), a pattern that nothing binds is read from the
/// attribute's datoms asserted after it ([`Access::Since`]) instead of making the query ineligible, and pulls
/// are left to the general path.
pub fn plan(
    query: &Query,
    inputs_edn: Option<&str>,
    schema: &Schema,
    columns: &[OutputColumn],
    ctx: &crate::source::Ctx,
    since: Option<Entid>,
) -> Option<EntityPlan> {
    // `:with` only beside aggregates (without one, its answer is a bag the general path makes)
    if !query.with.is_empty() && !query.find.elements().iter().any(|e| matches!(e, FindElem::Aggregate(_))) {
        return None;
    }
    let number = |b: &Option<crate::parse::Bound>| match b {
        None => Some(None),
        Some(crate::parse::Bound::Value(n)) => usize::try_from(*n).ok().map(Some),
        Some(crate::parse::Bound::Var(_)) => None,
    };
    let (offset, limit) = (number(&query.offset)?, number(&query.limit)?);
    if query.order.is_empty() && (offset.is_some() || limit.is_some()) {
        return None;
    }
    let (kind, elems) = match &query.find {
        FindSpec::Relation(e) => (FindKind::Relation, e.clone()),
        FindSpec::Tuple(e) => (FindKind::Tuple, e.clone()),
        FindSpec::Scalar(e) => (FindKind::Scalar, vec![e.clone()]),
        FindSpec::Collection(e) => (FindKind::Collection, vec![e.clone()]),
    };
    if query.inputs.iter().any(|b| matches!(b, InBinding::Source(s) if s != "$")) {
        return None;
    }
    // rule calls: non-recursive rules inlined into the clauses they stand for (`expand_rules`)
    let expanded;
    let where_clauses = match crate::rules::from_inputs(query, inputs_edn, &[]).ok()? {
        Some(set) => {
            expanded = expand_rules(&query.where_clauses, &set, &mut 0)?;
            &expanded
        }
        None => &query.where_clauses,
    };
    let mut read = inputs::read_inputs(ctx, query, inputs_edn).ok()?;
    // a lookup ref's shape whose keyword names no attribute: the general path raises (`misfit`); the other misfits
    // (a lookup ref of a value of the wrong type, a string for an entity) find no key in `seeds` or
    // `constant_key`, which sends them there too
    let ref_ty = crate::types::Ty::Value(ValueType::Ref);
    let unknown = |c: &Constant| {
        matches!(crate::algebrize::misfit(ctx, c, &ref_ty, None), Err(crate::PlanError::UnknownAttribute { .. }))
    };
    if read.scalars.iter().map(|(_, c)| c).chain(read.collections.iter().flat_map(|(_, cs)| cs)).any(unknown) {
        return None;
    }
    // The patterns, with each variable's value type (entity positions and refs: Ref).
    let mut vars: Vec<(Var, ValueType)> = Vec::new();
    let mut index: HashMap<Var, usize> = HashMap::new();
    let mut patterns = Vec::new();
    let mut predicates = Vec::new();
    let mut negated: Vec<(Option<&Vec<Var>>, &[Clause])> = Vec::new();
    let mut missing = Vec::new();
    let mut alternatives = Vec::new();
    for c in where_clauses {
        match c {
            // `missing?` is the negation of the attribute's pattern on the entity
            Clause::Predicate(call) if call.name == "missing?" => {
                let [Term::Src, e, a] = call.args.as_slice() else { return None };
                missing
                    .push(vec![Clause::Pattern { terms: vec![e.clone(), a.clone(), Term::Blank], form: Value::Nil }]);
            }
            Clause::Predicate(call) => predicates.push(call),
            Clause::Not { join, clauses, .. } => negated.push((join.as_ref(), clauses)),
            Clause::Or { join, branches, .. } => alternatives.push((join, branches)),
            Clause::Function { call, binding: Binding::Scalar(x) } if call.name == "get-else" => {
                patterns.push(get_else(call, x, schema, &mut vars, &mut index)?)
            }
            Clause::Pattern { terms, .. } => patterns.push(pattern(terms, schema, &mut vars, &mut index)?),
            _ => return None,
        }
    }
    negated.extend(missing.iter().map(|clauses: &Vec<Clause>| (None, clauses.as_slice())));
    // or / or-join: the join variables are the query's (a new one takes its slot, and its type, from the first
    // branch that binds it), the others get slots of their own, one set per clause
    let mut or_locals = Vec::new();
    let mut parsed_ors = Vec::new();
    for (join, branches) in alternatives {
        let joined: Vec<Var> = match join {
            Some(j) => j.vars.clone(),
            None => crate::algebrize::logic::mentioned(&branches.concat()),
        };
        let mut parsed = Vec::new();
        let mut locals = Vec::new();
        for b in branches {
            let mut own: HashMap<Var, usize> =
                joined.iter().filter_map(|v| index.get(v).map(|&i| (v.clone(), i))).collect();
            let before = vars.len();
            let (mut pats, mut preds) = (Vec::new(), Vec::new());
            for c in b {
                match c {
                    Clause::Pattern { terms, .. } => pats.push(pattern(terms, schema, &mut vars, &mut own)?),
                    Clause::Predicate(call) => preds.push(call),
                    _ => return None,
                }
            }
            for (i, (v, _)) in vars.iter().enumerate().skip(before) {
                if joined.contains(v) {
                    index.insert(v.clone(), i);
                } else {
                    locals.push(i);
                }
            }
            parsed.push((pats, preds, own));
        }
        // a join variable no branch pattern binds: an input's (a branch's comparison reads it)
        let mut joins = Vec::new();
        for v in &joined {
            joins.push(match index.get(v) {
                Some(&i) => i,
                None => {
                    let t = input_type(&read, v)?;
                    var_of(v, t, &mut vars, &mut index)?
                }
            });
        }
        or_locals.extend(locals.iter().copied());
        parsed_ors.push((joins, parsed, locals));
    }
    // Find variables: plain variables of the patterns or of the inputs, typed as the general path types them.
    let mut find = Vec::new();
    let mut pulls = Vec::new();
    let mut aggregates = Vec::new();
    for (elem, col) in elems.iter().zip(columns) {
        // a pull of an entity that the patterns bind, with a pattern the index answers (its column's type is the
        // pull's STRUCT, which the caller declares)
        if let FindElem::Pull { var, pattern: pattern @ (Value::Vector(_) | Value::List(_)), .. } = elem {
            // an entity only an input binds (`:in $ ?e` given an entid; Datomic's pull of a given entity; a lookup ref
            // that finds no entity pulls NULL on the general path, where a probe would find no row)
            let i = match index.get(var) {
                Some(&i) => i,
                None => {
                    let given = read.scalars.iter().find(|(x, _)| x == var).map(|(_, c)| c);
                    if !matches!(given, Some(Constant::Long(_))) {
                        return None;
                    }
                    var_of(var, ValueType::Ref, &mut vars, &mut index)?
                }
            };
            let text = crate::error::show(pattern);
            if vars[i].1 != ValueType::Ref
                || crate::pull::entity_path_pattern(&text, schema, ctx.store, ctx.opts, None).is_none()
            {
                return None;
            }
            if since.is_some() {
                return None;
            }
            pulls.push((find.len(), text));
            find.push(i);
            continue;
        }
        let (v, agg) = match elem {
            FindElem::Var(v) => (v, None),
            FindElem::Aggregate(a) if a.n.is_none() => (&a.var, Some(a.func.as_str())),
            _ => return None,
        };
        let i = match index.get(v) {
            Some(&i) => i,
            None => {
                let t = input_type(&read, v)?;
                var_of(v, t, &mut vars, &mut index)?
            }
        };
        let t = match agg {
            None => vars[i].1,
            Some(func) => {
                let agg = Agg::of(func, vars[i].1)?;
                aggregates.push((find.len(), agg));
                agg.result_type(vars[i].1)
            }
        };
        if col.sql_type != t.sql_type() {
            return None;
        }
        find.push(i);
    }
    if find.len() != columns.len() || (!aggregates.is_empty() && !pulls.is_empty()) {
        return None;
    }
    // the :with variables, hidden columns after the find's (bound by the patterns or the inputs)
    for v in &query.with {
        let i = match index.get(v) {
            Some(&i) => i,
            None => {
                let t = input_type(&read, v)?;
                var_of(v, t, &mut vars, &mut index)?
            }
        };
        find.push(i);
    }
    // order keys: find variables, not pulls (a variable found twice orders by its first column)
    let mut order = Vec::new();
    for o in &query.order {
        let col = elems.iter().position(|e| matches!(e, FindElem::Var(v) if *v == o.var))?;
        order.push((col, o.descending));
    }
    // a predicate's variable that only the inputs bind
    for call in &predicates {
        for t in &call.args {
            if let Term::Var(v) = t {
                if !index.contains_key(v) {
                    let t = input_type(&read, v)?;
                    var_of(v, t, &mut vars, &mut index)?;
                }
            }
        }
    }
    // negations: the join variables are the query's (bound by its patterns or inputs; `not` joins every variable
    // it mentions), the others get slots of their own
    let mut locals = vec![false; vars.len()];
    let mut negations = Vec::new();
    for (join, clauses) in &negated {
        let joined = match join {
            Some(vars) => vars.to_vec(),
            None => crate::algebrize::logic::mentioned(clauses),
        };
        let mut own: HashMap<Var, usize> = HashMap::new();
        let mut joins = Vec::new();
        for v in &joined {
            let i = match index.get(v) {
                Some(&i) => i,
                None => {
                    let t = input_type(&read, v)?;
                    var_of(v, t, &mut vars, &mut index)?
                }
            };
            own.insert(v.clone(), i);
            joins.push(i);
        }
        locals.resize(vars.len(), false);
        let mut pats = Vec::new();
        let mut preds = Vec::new();
        for c in *clauses {
            match c {
                Clause::Pattern { terms, .. } => pats.push(pattern(terms, schema, &mut vars, &mut own)?),
                Clause::Predicate(call) => preds.push(call),
                _ => return None,
            }
        }
        locals.resize(vars.len(), true);
        negations.push((joins, pats, preds, own));
    }
    locals.resize(vars.len(), false);
    for i in or_locals {
        locals[i] = true;
    }
    if vars.iter().any(|(_, t)| !entity_path_type(*t)) {
        return None;
    }
    // a lookup-ref input `[:unique/attr value]` for an entity is the pattern `[?e :unique/attr value]`, an AVET
    // probe taken first, at most one entity (the general path's scalar subquery over the same datoms: none, NULL,
    // which a data pattern of the entity joins with no row; a variable only a `get-else` reads would take its
    // default there, so it stays on the general path)
    // whether a data pattern without a default uses variable `i`
    let joined = |patterns: &[Pattern], i: usize| {
        patterns
            .iter()
            .any(|(e, _, _, v, _, _, default)| default.is_none() && (*e == Slot::Var(i) || *v == Slot::Var(i)))
    };
    for (v, c) in &read.scalars {
        let (Constant::LookupRef { attr, value }, Some(&i)) = (c, index.get(v)) else { continue };
        let a = schema.attribute(*attr)?;
        if vars[i].1 != ValueType::Ref || a.unique.is_none() || !joined(&patterns, i) {
            return None;
        }
        let k = constant_key(value, a.value_type, schema)?;
        patterns.insert(0, (Slot::Var(i), a.entid, a.ident.clone(), Slot::Const(k), true, (!a.many, true), None));
    }
    // a collection of lookup refs of one attribute `[[:unique/attr v1] [:unique/attr v2] ...]` for an entity is the
    // pattern `[?e :unique/attr ?x]` with the values a collection of their own variable (a name no query can write):
    // an AVET probe per value, at most one entity each, as the general path's semi join on the attribute finds.
    // Lookup refs of several attributes (two could name one entity) or beside entids take the general path.
    for (v, cs) in read.collections.iter_mut() {
        let Some(&i) = index.get(v) else { continue };
        let Some(Constant::LookupRef { attr, .. }) = cs.first() else { continue };
        let attr = *attr;
        let mut values = Vec::with_capacity(cs.len());
        for c in cs.iter() {
            match c {
                Constant::LookupRef { attr: a, value } if *a == attr => values.push((**value).clone()),
                _ => return None,
            }
        }
        let a = schema.attribute(attr)?;
        if vars[i].1 != ValueType::Ref || a.unique.is_none() || !joined(&patterns, i) || !entity_path_type(a.value_type)
        {
            return None;
        }
        let x = Var(format!("(lookup refs of {})", v.0));
        let j = vars.len();
        vars.push((x.clone(), a.value_type));
        index.insert(x.clone(), j);
        locals.push(false);
        *v = x;
        *cs = values;
        patterns.insert(0, (Slot::Var(i), a.entid, a.ident.clone(), Slot::Var(j), true, (!a.many, true), None));
    }
    let seeds = seeds(&read, schema, &vars)?;
    // Order: repeatedly take the first pattern that can be probed from what is bound.
    let mut bound: Vec<bool> = vec![false; vars.len()];
    for (i, b) in bound.iter_mut().enumerate() {
        *b = seeds.first().is_some_and(|row| row[i].is_some());
    }
    let is_bound = |s: &Slot, bound: &[bool]| match s {
        Slot::Var(i) => bound[*i],
        Slot::Const(_) => true,
        Slot::Blank => false,
    };
    let mut steps = Vec::new();
    let mut left = patterns;
    let mut distinct = query.inputs.iter().all(|b| !matches!(b, InBinding::Bind(Binding::Relation(_))));
    let mut ors_left = parsed_ors;
    let mut ors = Vec::new();
    while !left.is_empty() || !ors_left.is_empty() {
        let probe =
            left.iter().position(|(e, _, _, v, indexed, ..)| is_bound(e, &bound) || (*indexed && is_bound(v, &bound)));
        if probe.is_none() {
            // an or whose every branch can be probed from what is bound, binding every join variable in each
            let ready = ors_left.iter().enumerate().find_map(|(k, (joins, branches, _))| {
                let orders = branches
                    .iter()
                    .map(|(pats, ..)| probe_order(pats, &bound, is_bound).filter(|(_, b)| joins.iter().all(|i| b[*i])))
                    .collect::<Option<Vec<_>>>()?;
                Some((k, orders))
            });
            if let Some((k, orders)) = ready {
                let (joins, branches, locals) = ors_left.remove(k);
                let mut done = Vec::new();
                for ((_, preds, own), (steps, b)) in branches.into_iter().zip(orders) {
                    let filters =
                        preds.iter().map(|c| filter(c, &own, &b, &vars, schema)).collect::<Option<Vec<_>>>()?;
                    done.push(Conjunction { steps, filters });
                }
                for i in joins {
                    bound[i] = true;
                }
                ors.push((steps.len(), Or { branches: done, locals }));
                // two branches (or one with own variables) can give one row twice
                distinct = false;
                continue;
            }
            if left.is_empty() {
                return None;
            }
        }
        // since a tx, a pattern no probe reaches reads the datoms asserted after it (the first such, in the
        // query's order)
        let pick = match (probe, since) {
            (Some(p), _) => p,
            (None, Some(_)) => 0,
            (None, None) => return None,
        };
        let (e, attr, ident, v, _, (one, unique), default) = left.remove(pick);
        if default.is_some() && probe.is_none() {
            return None;
        }
        let access = match probe {
            None => Access::Since,
            Some(_) if is_bound(&e, &bound) => Access::Eavt,
            Some(_) => Access::Avet,
        };
        // a `_` where the datoms of a step could differ makes rows that differ only there: equal once projected
        let (e_blank, v_blank) = (e == Slot::Blank, v == Slot::Blank);
        distinct &= match access {
            Access::Eavt => !v_blank || one,
            Access::Avet => !e_blank || unique,
            Access::Since => match (e_blank, v_blank) {
                (false, false) => true,
                (false, true) => one,
                (true, false) => unique,
                (true, true) => false,
            },
        };
        for s in [&e, &v] {
            if let Slot::Var(i) = s {
                bound[*i] = true;
            }
        }
        steps.push(Step { e, attr, ident, v, access, default });
    }
    if find.iter().any(|i| !bound[*i]) {
        return None;
    }
    let filters = predicates.iter().map(|c| filter(c, &index, &bound, &vars, schema)).collect::<Option<Vec<_>>>()?;
    // each negation's patterns as probes from what the query binds (a scan inside a `not` is the general path's)
    let mut nots = Vec::new();
    for (joins, pats, preds, own) in negations {
        if joins.iter().any(|i| !bound[*i]) {
            return None;
        }
        let (steps, bound) = probe_order(&pats, &bound, is_bound)?;
        let filters = preds.iter().map(|c| filter(c, &own, &bound, &vars, schema)).collect::<Option<Vec<_>>>()?;
        nots.push(Conjunction { steps, filters });
    }
    // every variable in the find, once, but those a scalar or tuple input binds (the same value in every row): no
    // projection merges rows
    let mut in_find = vec![0; vars.len()];
    for i in &find {
        in_find[*i] += 1;
    }
    let fixed: Vec<&Var> = query
        .inputs
        .iter()
        .filter_map(|b| match b {
            InBinding::Bind(b @ (Binding::Scalar(_) | Binding::Tuple(_))) => Some(b.vars()),
            _ => None,
        })
        .flatten()
        .collect();
    distinct &= in_find
        .iter()
        .zip(&vars)
        .zip(&locals)
        .all(|((n, (v, _)), local)| *local || *n == 1 || (*n == 0 && fixed.contains(&v)));
    Some(EntityPlan {
        vars,
        seeds,
        steps,
        find,
        kind,
        as_of: None,
        since,
        pulls,
        distinct,
        order,
        offset: offset.unwrap_or(0),
        limit,
        filters,
        aggregates,
        with: query.with.len(),
        nots,
        ors,
    })
}

/// `clauses` with every call of a non-recursive rule replaced by the clauses it stands for, as the general path
/// inlines it (`algebrize/rules.rs`): a rule of one body by that body's clauses, one of several by an `or-join`
/// of its bodies over the call's variables; the head's parameters renamed to the call's arguments (a constant
/// argument written into the body, a `_` a variable of its own) and the body's other variables to fresh ones.
/// Calls inside `not` and `or` are expanded too. None when a call is of a recursive rule (the general path's
/// recursive CTE) or cannot be read. `n` numbers the calls, for the fresh names.
fn expand_rules(clauses: &[Clause], set: &crate::rules::RuleSet, n: &mut usize) -> Option<Vec<Clause>> {
    let mut out = Vec::new();
    for c in clauses {
        match c {
            Clause::RuleCall { form } => {
                let call = crate::rules::read_call(form).ok()?;
                let rule = set.rules.get(&call.name)?;
                if set.is_recursive(&call.name) || rule.arity != call.args.len() {
                    return None;
                }
                *n += 1;
                let tag = *n;
                let mut join = Vec::new();
                let actual: Vec<Value> = call
                    .args
                    .iter()
                    .enumerate()
                    .map(|(i, a)| match a {
                        Term::Var(v) => {
                            if !join.contains(v) {
                                join.push(v.clone());
                            }
                            crate::parse::symbol(&v.0)
                        }
                        Term::Const(c) => c.clone(),
                        _ => crate::parse::symbol(&format!("?__r{tag}_{i}")),
                    })
                    .collect();
                let mut branches = Vec::new();
                for b in &rule.bodies {
                    let mut map: std::collections::BTreeMap<String, Value> =
                        b.params.iter().zip(&actual).map(|(p, a)| (p.0.clone(), a.clone())).collect();
                    let mut fresh = |v: &str| format!("{v}__r{tag}");
                    let body = b
                        .clause_forms
                        .iter()
                        .map(|f| crate::parse::clause(&crate::rules::rename(f, &mut map, &mut fresh)))
                        .collect::<Result<Vec<_>, _>>()
                        .ok()?;
                    branches.push(expand_rules(&body, set, n)?);
                }
                if branches.len() == 1 {
                    out.extend(branches.pop()?);
                } else {
                    let join = crate::parse::OrJoin { required: vec![], vars: join };
                    out.push(Clause::Or { join: Some(join), branches, form: Value::Nil });
                }
            }
            // a `not` or `or` joins the variables its clauses mention, the calls' arguments, not the variables the
            // rules' bodies bring in: it becomes a `not-join` / `or-join` of those
            Clause::Not { join, clauses, form } => {
                let join = join.clone().unwrap_or_else(|| crate::algebrize::logic::mentioned(clauses));
                let clauses = expand_rules(clauses, set, n)?;
                out.push(Clause::Not { join: Some(join), clauses, form: form.clone() });
            }
            Clause::Or { join, branches, form } => {
                let join = join.clone().unwrap_or_else(|| crate::parse::OrJoin {
                    required: vec![],
                    vars: crate::algebrize::logic::mentioned(&branches.concat()),
                });
                let branches = branches.iter().map(|b| expand_rules(b, set, n)).collect::<Option<Vec<_>>>()?;
                out.push(Clause::Or { join: Some(join), branches, form: form.clone() });
            }
            other => out.push(other.clone()),
        }
    }
    Some(out)
}

/// Orders `pats` as probes from what `bound` binds: repeatedly the first pattern whose entity is bound (EAVT) or
/// whose value is bound on an attribute with a value index (AVET/VAET). With what is bound after them; None when
/// a pattern cannot be probed (it would need a scan).
fn probe_order(
    pats: &[Pattern],
    bound: &[bool],
    is_bound: impl Fn(&Slot, &[bool]) -> bool,
) -> Option<(Vec<Step>, Vec<bool>)> {
    let mut bound = bound.to_vec();
    let mut left: Vec<&Pattern> = pats.iter().collect();
    let mut steps = Vec::new();
    while !left.is_empty() {
        let p = left
            .iter()
            .position(|(e, _, _, v, indexed, ..)| is_bound(e, &bound) || (*indexed && is_bound(v, &bound)))?;
        let (e, attr, ident, v, .., default) = left.remove(p);
        let access = if is_bound(e, &bound) { Access::Eavt } else { Access::Avet };
        for s in [e, v] {
            if let Slot::Var(i) = s {
                bound[*i] = true;
            }
        }
        steps.push(Step {
            e: e.clone(),
            attr: *attr,
            ident: ident.clone(),
            v: v.clone(),
            access,
            default: default.clone(),
        });
    }
    Some((steps, bound))
}

/// A data pattern `[e :attr v]` with a constant forward attribute, its variables found in (or added to) `index`;
/// None when the entity path cannot read it.
fn pattern(
    terms: &[Term],
    schema: &Schema,
    vars: &mut Vec<(Var, ValueType)>,
    index: &mut HashMap<Var, usize>,
) -> Option<Pattern> {
    let [e, a, v] = terms else { return None };
    let Term::Const(Value::Keyword(k)) = a else { return None };
    let attr = schema.attribute_by_ident(&k.to_string())?;
    let t = attr.value_type;
    let e = match e {
        Term::Var(x) => Slot::Var(var_of(x, ValueType::Ref, vars, index)?),
        Term::Blank => Slot::Blank,
        Term::Const(c) => Slot::Const(entity_key(c, schema)?),
        Term::Src => return None,
    };
    let v = match v {
        Term::Var(x) => Slot::Var(var_of(x, t, vars, index)?),
        Term::Blank => Slot::Blank,
        Term::Const(c) => Slot::Const(value_key(c, t, schema)?),
        Term::Src => return None,
    };
    Some((
        e,
        attr.entid,
        attr.ident.clone(),
        v,
        attr.unique.is_some() || attr.index || t == ValueType::Ref,
        (!attr.many, attr.unique.is_some()),
        None,
    ))
}

/// `[(get-else $ ?e :attr default) ?x]` as a pattern `[?e :attr ?x]` with its default: an EAVT probe only (no
/// value index counts), the default a constant of the attribute's type; None when the general path must answer.
fn get_else(
    call: &crate::parse::Call,
    x: &Var,
    schema: &Schema,
    vars: &mut Vec<(Var, ValueType)>,
    index: &mut HashMap<Var, usize>,
) -> Option<Pattern> {
    let [Term::Src, e, a, Term::Const(default)] = call.args.as_slice() else { return None };
    let (e, attr, ident, _, _, (one, unique), _) = pattern(&[e.clone(), a.clone(), Term::Blank], schema, vars, index)?;
    let t = schema.attribute(attr)?.value_type;
    if !one {
        return None;
    }
    let default = value_key(default, t, schema)?;
    let v = Slot::Var(var_of(x, t, vars, index)?);
    Some((e, attr, ident, v, false, (one, unique), Some(default)))
}

/// The [`Filter`] of a comparison predicate whose variables `index` names and `bound` says are bound; None when
/// the general path must evaluate it (another function, another arity, operands of other types).
fn filter(
    call: &crate::parse::Call,
    index: &HashMap<Var, usize>,
    bound: &[bool],
    vars: &[(Var, ValueType)],
    schema: &Schema,
) -> Option<Filter> {
    let test = match (COMPARISONS.iter().find(|(name, _)| *name == call.name), call.name.as_str()) {
        (Some((_, op)), _) => Test::Compare(*op),
        (None, "starts-with?") => Test::StartsWith,
        (None, "ends-with?") => Test::EndsWith,
        (None, "includes?") => Test::Includes,
        _ => return None,
    };
    let [a, b] = call.args.as_slice() else { return None };
    // the variables' types (a variable the patterns do not bind, or of another type: the general path)
    let var = |t: &Term| match t {
        Term::Var(v) => index.get(v).copied().filter(|i| bound[*i]).map(Some),
        Term::Const(_) => Some(None),
        _ => None,
    };
    let (va, vb) = (var(a)?, var(b)?);
    let number = |t: ValueType| matches!(t, ValueType::Long | ValueType::Double | ValueType::Ref);
    // a text test reads two strings only
    let compare = matches!(test, Test::Compare(_));
    let class_of = |i: usize| match vars[i].1 {
        ValueType::String => Some(1),
        t if compare && number(t) => Some(0),
        ValueType::Instant if compare => Some(2),
        _ => None,
    };
    // a constant in the other operand's type (an integer beside a double is that double)
    let constant = |c: &Term, other: usize| {
        let Term::Const(c) = c else { return None };
        match (vars[other].1, c) {
            (ValueType::Double, Value::Integer(i)) => Some(Key::Float(*i as f64)),
            // a double beside a long: both compared as doubles, as DuckDB casts the BIGINT
            (ValueType::Long, Value::Float(x)) if compare => Some(Key::Float(x.into_inner())),
            (t, c) => value_key(c, t, schema),
        }
    };
    let (a, b) = match (va, vb) {
        (Some(x), Some(y)) if class_of(x)? == class_of(y)? => (Slot::Var(x), Slot::Var(y)),
        (Some(x), None) => {
            class_of(x)?;
            (Slot::Var(x), Slot::Const(constant(b, x)?))
        }
        (None, Some(y)) => {
            class_of(y)?;
            (Slot::Const(constant(a, y)?), Slot::Var(y))
        }
        _ => return None,
    };
    // the form is shown in `mentat_explain` and in `mentat_sql`'s comment, text that holds no NUL byte
    Some(Filter { test, a, b, form: crate::error::show(&call.form).replace('\0', "\\u0000") })
}

/// Whether the entity path answers values of type `t`. Uuids, bytes, bigints, bigdecs, floats and tuples are left
/// to the general path: their DuckDB representations are not the index's 64-bit integers, doubles and text.
pub fn entity_path_type(t: ValueType) -> bool {
    !matches!(
        t,
        ValueType::Uuid
            | ValueType::Bytes
            | ValueType::BigInt
            | ValueType::BigDec
            | ValueType::Float
            | ValueType::Tuple
    )
}

/// The index of variable `v` of type `t`, added when new; None when it was seen with another type.
fn var_of(v: &Var, t: ValueType, vars: &mut Vec<(Var, ValueType)>, index: &mut HashMap<Var, usize>) -> Option<usize> {
    match index.get(v) {
        Some(&i) if vars[i].1 == t => Some(i),
        Some(_) => None,
        None => {
            index.insert(v.clone(), vars.len());
            vars.push((v.clone(), t));
            Some(vars.len() - 1)
        }
    }
}

/// An entity constant: an entid, or an ident keyword (its entid).
fn entity_key(c: &Value, schema: &Schema) -> Option<Key> {
    match c {
        Value::Integer(i) => Some(Key::Int(*i)),
        Value::Keyword(k) => schema.entid(&k.to_string()).map(Key::Int),
        _ => None,
    }
}

/// A value constant in a position of type `t`, as the general path reads it; None when it is not a plain value
/// of that type (the general path then answers, empty or not).
pub(crate) fn value_key(c: &Value, t: ValueType, schema: &Schema) -> Option<Key> {
    match (t, c) {
        (ValueType::Ref, _) => entity_key(c, schema),
        (ValueType::Long, Value::Integer(i)) => Some(Key::Int(*i)),
        (ValueType::Double, Value::Float(x)) => Some(Key::Float(x.into_inner())),
        (ValueType::Boolean, Value::Boolean(b)) => Some(Key::Int(*b as i64)),
        (ValueType::String | ValueType::Uri, Value::String(s)) => Some(Key::Text(s.clone())),
        (ValueType::Keyword, Value::Keyword(k)) => Some(Key::Text(k.to_string())),
        (ValueType::Symbol, Value::Symbol(s)) => Some(Key::Text(s.to_string())),
        (ValueType::Instant, Value::Inst(t)) => instant_micros(t),
        _ => None,
    }
}

/// An instant as the entity index keys it, microseconds since the epoch (the transactor's `epoch_us`); None when
/// it has digits below the microsecond, which the general path's cast to TIMESTAMPTZ reads its own way.
fn instant_micros<Tz: chrono::TimeZone>(t: &chrono::DateTime<Tz>) -> Option<Key> {
    t.timestamp_subsec_nanos().is_multiple_of(1000).then(|| Key::Int(t.timestamp_micros()))
}

/// A pull `:default` value of an attribute of type `t`, as the entity path writes it (None when the entity path
/// leaves the pattern to the general path).
pub fn default_key(v: &Value, t: ValueType, schema: &Schema) -> Option<Key> {
    match t {
        ValueType::Ref | ValueType::Instant => None,
        _ => value_key(v, t, schema),
    }
}

/// A constant read from the inputs, in a position of type `t`.
fn constant_key(c: &Constant, t: ValueType, schema: &Schema) -> Option<Key> {
    match (t, c) {
        (ValueType::Ref, Constant::Long(i)) => Some(Key::Int(*i)),
        (ValueType::Ref, Constant::Keyword(k)) => schema.entid(k).map(Key::Int),
        (ValueType::Long, Constant::Long(i)) => Some(Key::Int(*i)),
        (ValueType::Double, Constant::Double(x)) => Some(Key::Float(*x)),
        (ValueType::Boolean, Constant::Boolean(b)) => Some(Key::Int(*b as i64)),
        (ValueType::String | ValueType::Uri, Constant::String(s)) => Some(Key::Text(s.clone())),
        (ValueType::Keyword, Constant::Keyword(k)) => Some(Key::Text(k.clone())),
        (ValueType::Symbol, Constant::Symbol(s)) => Some(Key::Text(s.clone())),
        (ValueType::Instant, Constant::Instant(s)) => instant_micros(&chrono::DateTime::parse_from_rfc3339(s).ok()?),
        _ => None,
    }
}

/// The type of a variable bound only by the inputs (from its constants).
fn input_type(read: &inputs::Inputs, v: &Var) -> Option<ValueType> {
    let c = read
        .scalars
        .iter()
        .find(|(x, _)| x == v)
        .map(|(_, c)| c.clone())
        .or_else(|| read.collections.iter().find(|(x, _)| x == v).and_then(|(_, cs)| cs.first().cloned()))?;
    match c {
        Constant::Long(_) => Some(ValueType::Long),
        Constant::Double(_) => Some(ValueType::Double),
        Constant::Boolean(_) => Some(ValueType::Boolean),
        Constant::String(_) => Some(ValueType::String),
        Constant::Keyword(_) => Some(ValueType::Keyword),
        Constant::Symbol(_) => Some(ValueType::Symbol),
        Constant::Instant(_) => Some(ValueType::Instant),
        _ => None,
    }
}

/// The seed rows: the cross product of the inputs' bindings, each converted to its variable's type.
fn seeds(read: &inputs::Inputs, schema: &Schema, vars: &[(Var, ValueType)]) -> Option<Vec<Vec<Option<Key>>>> {
    let slot = |v: &Var| vars.iter().position(|(x, _)| x == v);
    let key = |i: usize, c: &Constant| constant_key(c, vars[i].1, schema);
    let mut rows: Vec<Vec<Option<Key>>> = vec![vec![None; vars.len()]];
    // Each binding multiplies the rows: a scalar or tuple by one, a collection or relation by its length.
    let extend = |choices: Vec<Vec<(usize, Key)>>, rows: &mut Vec<Vec<Option<Key>>>| {
        let mut out = Vec::with_capacity(rows.len() * choices.len());
        for r in rows.iter() {
            for choice in &choices {
                let mut r = r.clone();
                for (i, k) in choice {
                    r[*i] = Some(k.clone());
                }
                out.push(r);
            }
        }
        *rows = out;
    };
    for (v, c) in &read.scalars {
        // a lookup ref binds its entity by a step of its own (see `plan`)
        let Some(i) = slot(v).filter(|_| !matches!(c, Constant::LookupRef { .. })) else { continue };
        extend(vec![vec![(i, key(i, c)?)]], &mut rows);
    }
    for (v, cs) in &read.collections {
        // an empty collection binds nothing: no rows, whether or not a pattern uses its variable
        if cs.is_empty() {
            return Some(Vec::new());
        }
        let Some(i) = slot(v) else { continue };
        let mut choices: Vec<Vec<(usize, Key)>> = Vec::new();
        // distinct values in input order; a set of their debug text keeps this linear (`Vec::contains` made a
        // collection of 40,000 numbers take 1.5 s to plan, 100,000 8.5 s)
        let mut seen = std::collections::HashSet::new();
        for c in cs {
            let k = key(i, c)?;
            if seen.insert(format!("{k:?}")) {
                choices.push(vec![(i, k)]);
            }
        }
        extend(choices, &mut rows);
    }
    for r in &read.relations {
        if r.rows.is_empty() {
            return Some(Vec::new());
        }
        let mut choices = Vec::new();
        for row in &r.rows {
            let mut choice = Vec::new();
            for (v, c) in r.vars.iter().zip(row) {
                if let Some(i) = v.as_ref().and_then(slot) {
                    choice.push((i, key(i, c)?));
                }
            }
            choices.push(choice);
        }
        extend(choices, &mut rows);
    }
    // Tuple inputs bind scalars (read_inputs flattens them); bindings of variables that no pattern and no find
    // element uses are dropped above.
    Some(rows)
}
