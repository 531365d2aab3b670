//! Rule sets (`%` in `:in`): parsing, the rule dependency graph, recursion (strongly connected
//! components) and stratification, and the shape analyses that decide how a recursive call is
//! seeded. How calls become SQL is in [`crate::algebrize`] (`algebrize/rules.rs`).
//!
//! Syntax (Datomic's): the input is an EDN vector of rules, each a vector whose first element is the
//! head, a list `(name ?a ?b)` or `(name [?required] ?b)`, followed by the body's clauses:
//!
//! ```text
//! [[(ancestor ?a ?d) [?a :person/parent ?d]]
//!  [(ancestor ?a ?d) [?a :person/parent ?x] (ancestor ?x ?d)]]
//! ```
//!
//! Several rules with one name are the bodies of one rule (a union); all must have the same arity
//! and the same number of required (bracketed) arguments. Head arguments are variables.
//!
//! Semantics:
//! * A rule that is not in a dependency cycle is inlined at each call (an `or-join` of its renamed
//!   bodies). A rule in a cycle (self or mutual recursion) is a DuckDB `WITH RECURSIVE` CTE over
//!   its strongly connected component.
//! * Negation is stratified: a call inside `not`/`not-join` of a body may not reach back into the
//!   caller's component ([`PlanError::Unstratifiable`]-style error, as [`PlanError::Unsupported`]
//!   with the cycle named).
//! * Required arguments must be bound where the rule is called ([`PlanError::UnboundVariable`]
//!   naming the rule and the variable).

use crate::error::{show, PlanError};
use crate::parse::{clause, parse_edn, Clause, Term, Var};
use edn_format::Value;
use std::collections::{BTreeMap, BTreeSet};

/// A recursive component being compiled into the CTE `cte`: calls of its rules inside its bodies
/// read the CTE instead of being expanded.
#[derive(Clone, Debug)]
pub struct RuleFrame {
    /// The component's rules, in order; a rule's index is its tag.
    pub preds: Vec<String>,
    pub cte: crate::sql::Name,
    /// Whether the CTE has a `tag` column (a component of several rules).
    pub tagged: bool,
    /// The CTE column of each argument of each rule.
    pub slots: Vec<Vec<crate::sql::Name>>,
    /// The type of each argument of each rule, once inferred from the bodies.
    pub types: Vec<Vec<Option<crate::types::Ty>>>,
    /// Non-linear recursion (a body calling the component more than once) in a `USING KEY` CTE: the index of
    /// the call, among the body's calls into the component in clause order, that reads the last iteration's rows;
    /// the others read the whole relation so far (`recurring.<cte>`), and `calls` counts them as they compile.
    pub delta_call: Option<usize>,
    pub calls: std::rc::Rc<std::cell::Cell<usize>>,
}

/// A parsed rule set.
#[derive(Clone, Debug, Default)]
pub struct RuleSet {
    /// Rules by name.
    pub rules: BTreeMap<String, Rule>,
    /// The strongly connected component index of each rule (components in dependency order:
    /// a component only calls components with a smaller or equal index).
    pub scc: BTreeMap<String, usize>,
    /// The members of each component, in name order.
    pub components: Vec<Vec<String>>,
    /// Whether each component is recursive (more than one rule, or a rule calling itself).
    pub recursive: Vec<bool>,
}

/// One rule: all bodies with one name.
#[derive(Clone, Debug)]
pub struct Rule {
    pub name: String,
    pub arity: usize,
    /// How many leading arguments are required to be bound (`[(r [?a] ?b) ...]` has one).
    pub required: usize,
    pub bodies: Vec<RuleBody>,
}

/// One body of a rule: its head parameters and clauses.
#[derive(Clone, Debug)]
pub struct RuleBody {
    pub params: Vec<Var>,
    /// The body clauses as EDN (renamed and re-parsed when inlined).
    pub clause_forms: Vec<Value>,
    pub clauses: Vec<Clause>,
    /// The whole rule, for errors.
    pub form: Value,
}

/// A rule call `(name args...)` (an optional leading `$` source is dropped).
#[derive(Clone, Debug)]
pub struct RuleCall {
    pub name: String,
    pub args: Vec<Term>,
}

/// Reads a rule call clause form.
pub fn read_call(form: &Value) -> Result<RuleCall, PlanError> {
    let Value::List(items) = form else {
        return Err(PlanError::syntax(form, "a rule call is a list (name args...)"));
    };
    let items: &[Value] = match items.as_slice() {
        [Value::Symbol(s), rest @ ..] if s.name().starts_with('$') => rest,
        all => all,
    };
    let name = match items.first() {
        Some(Value::Symbol(s)) if s.namespace().is_none() => s.name().to_string(),
        _ => return Err(PlanError::syntax(form, "a rule call starts with the rule's name")),
    };
    let mut args = Vec::new();
    for a in &items[1..] {
        let t = term(a);
        if matches!(t, Term::Src) {
            return Err(PlanError::syntax(form, "a rule argument cannot be a source"));
        }
        args.push(t);
    }
    Ok(RuleCall { name, args })
}

fn term(v: &Value) -> Term {
    match v {
        Value::Symbol(s) if s.namespace().is_none() && s.name() == "_" => Term::Blank,
        Value::Symbol(s) if s.namespace().is_none() && s.name().starts_with('?') && s.name().len() > 1 => {
            Term::Var(Var(s.name().to_string()))
        }
        Value::Symbol(s) if s.name().starts_with('$') => Term::Src,
        other => Term::Const(other.clone()),
    }
}

impl RuleSet {
    /// Parses a rule set given as an EDN value (the `%` element of the inputs vector).
    ///
    /// Errors: malformed rules ([`PlanError::Syntax`]), inconsistent arities or required arguments,
    /// calls to undefined rules, and recursion through negation ([`PlanError::Unsupported`] naming
    /// the rules of the cycle).
    pub fn parse(value: &Value) -> Result<RuleSet, PlanError> {
        let items = match value {
            Value::Vector(v) | Value::List(v) => v,
            other => return Err(PlanError::syntax(other, "a rule set is a vector of rules")),
        };
        let mut rules: BTreeMap<String, Rule> = BTreeMap::new();
        for r in items {
            let (name, body, required) = rule_body(r)?;
            match rules.get_mut(&name) {
                Some(rule) => {
                    if rule.arity != body.params.len() || rule.required != required {
                        return Err(PlanError::syntax(
                            r,
                            format!(
                                "every rule named {name} must have {} arguments, {} of them required",
                                rule.arity, rule.required
                            ),
                        ));
                    }
                    rule.bodies.push(body);
                }
                None => {
                    let arity = body.params.len();
                    rules.insert(name.clone(), Rule { name, arity, required, bodies: vec![body] });
                }
            }
        }
        let mut set = RuleSet { rules, ..Default::default() };
        set.analyze()?;
        Ok(set)
    }

    /// Parses the rule set text (for tests and for callers holding text).
    pub fn parse_str(text: &str) -> Result<RuleSet, PlanError> {
        RuleSet::parse(&parse_edn(text, "rules")?)
    }

    /// Whether calls of `name` compile to a recursive CTE.
    pub fn is_recursive(&self, name: &str) -> bool {
        self.scc.get(name).is_some_and(|c| self.recursive[*c])
    }

    /// The rules of the component of `name`.
    pub fn component(&self, name: &str) -> &[String] {
        self.scc.get(name).map(|c| self.components[*c].as_slice()).unwrap_or(&[])
    }

    /// Builds the dependency graph, its components (Tarjan), and checks stratification.
    fn analyze(&mut self) -> Result<(), PlanError> {
        let names: Vec<String> = self.rules.keys().cloned().collect();
        let index: BTreeMap<&str, usize> = names.iter().enumerate().map(|(i, n)| (n.as_str(), i)).collect();
        // Edges (callee, negated) per caller.
        let mut edges: Vec<Vec<(usize, bool)>> = vec![Vec::new(); names.len()];
        for (i, n) in names.iter().enumerate() {
            for body in &self.rules[n].bodies {
                let mut calls = Vec::new();
                calls_in(&body.clauses, false, &mut calls);
                for (form, negated) in calls {
                    let call = read_call(&form)?;
                    let Some(&j) = index.get(call.name.as_str()) else {
                        return Err(PlanError::syntax(&form, format!("unknown rule {} (called by {n})", call.name)));
                    };
                    if call.args.len() != self.rules[&call.name].arity {
                        return Err(PlanError::syntax(
                            &form,
                            format!("rule {} takes {} arguments", call.name, self.rules[&call.name].arity),
                        ));
                    }
                    edges[i].push((j, negated));
                }
            }
        }
        let comps = tarjan(&edges);
        let mut scc = vec![0; names.len()];
        for (c, members) in comps.iter().enumerate() {
            for m in members {
                scc[*m] = c;
            }
        }
        for (i, out) in edges.iter().enumerate() {
            for (j, negated) in out {
                if *negated && scc[i] == scc[*j] {
                    let cycle: Vec<&str> = comps[scc[i]].iter().map(|k| names[*k].as_str()).collect();
                    return Err(PlanError::Unsupported {
                        form: format!("({} ...)", names[*j]),
                        message: format!(
                            "unstratifiable rule set: {} calls {} inside not/not-join, and they are mutually recursive \
                             ({}); recursion through negation has no stratified meaning",
                            names[i],
                            names[*j],
                            cycle.join(", ")
                        ),
                    });
                }
            }
        }
        self.recursive = comps
            .iter()
            .map(|members| members.len() > 1 || edges[members[0]].iter().any(|(j, _)| *j == members[0]))
            .collect();
        self.components = comps.iter().map(|m| m.iter().map(|k| names[*k].clone()).collect()).collect();
        self.scc = names.iter().enumerate().map(|(i, n)| (n.clone(), scc[i])).collect();
        Ok(())
    }
}

/// The rule set of a query: the inputs element at the position of `%` in `:in` (None when the query
/// has no `%`), counting the bindings that [`crate::inputs::takes_input`] (`store_vars` are the source variables
/// given a store). Errors as [`RuleSet::parse`], or [`PlanError::InputCount`] when the inputs stop short.
pub fn from_inputs(
    query: &crate::parse::Query,
    inputs_edn: Option<&str>,
    store_vars: &[&str],
) -> Result<Option<RuleSet>, PlanError> {
    use crate::parse::InBinding;
    let after_sources: Vec<&InBinding> =
        query.inputs.iter().filter(|b| crate::inputs::takes_input(b, store_vars)).collect();
    let Some(pos) = after_sources.iter().position(|b| matches!(b, InBinding::Rules)) else {
        return Ok(None);
    };
    let values = match inputs_edn.map(str::trim) {
        None | Some("") => vec![],
        Some(text) => match parse_edn(text, "inputs")? {
            Value::Vector(v) | Value::List(v) => v,
            _ => vec![],
        },
    };
    match values.get(pos) {
        Some(v) => RuleSet::parse(v)
            .map(Some)
            .map_err(|e| crate::inputs::in_input(e, pos, v, "%, the rule set: a vector of rules")),
        None => {
            Err(PlanError::InputCount { form: show(&query.in_form), expected: after_sources.len(), got: values.len() })
        }
    }
}

/// Parses one rule `[(name ?a [?b]...) clauses...]` into its name, body and number of required args.
fn rule_body(r: &Value) -> Result<(String, RuleBody, usize), PlanError> {
    let Value::Vector(items) = r else {
        return Err(PlanError::syntax(r, "a rule is a vector [(name ?args...) clauses...]"));
    };
    let Some((Value::List(head), clause_forms)) = items.split_first() else {
        return Err(PlanError::syntax(r, "a rule starts with its head (name ?args...)"));
    };
    let name = match head.first() {
        Some(Value::Symbol(s)) if s.namespace().is_none() && !s.name().starts_with('?') => s.name().to_string(),
        _ => return Err(PlanError::syntax(r, "a rule head starts with the rule's name")),
    };
    if clause_forms.is_empty() {
        return Err(PlanError::syntax(r, "a rule needs at least one clause"));
    }
    let mut params = Vec::new();
    let mut required = 0;
    let as_var = |v: &Value| match term(v) {
        Term::Var(x) => Ok(x),
        _ => Err(PlanError::syntax(r, "rule head arguments are variables")),
    };
    for (i, p) in head[1..].iter().enumerate() {
        match p {
            Value::Vector(req) if i == 0 => {
                for x in req {
                    params.push(as_var(x)?);
                }
                required = req.len();
            }
            other => params.push(as_var(other)?),
        }
    }
    let distinct: BTreeSet<&Var> = params.iter().collect();
    if distinct.len() != params.len() {
        return Err(PlanError::syntax(r, "a rule head names each variable once"));
    }
    // Datomic's rules read the source they are called with (`($2 rule ...)`): a body names no other source
    if let Some(src) = clause_forms.iter().find_map(named_source) {
        return Err(PlanError::syntax(
            r,
            format!(
                "a rule's body cannot name the source {src}: it reads the source of its call, as in ({src} {name} ...)"
            ),
        ));
    }
    let clauses = clause_forms.iter().map(clause).collect::<Result<Vec<_>, _>>()?;
    Ok((name, RuleBody { params, clause_forms: clause_forms.to_vec(), clauses, form: r.clone() }, required))
}

/// The first source variable other than `$` anywhere in a form.
fn named_source(v: &Value) -> Option<String> {
    match v {
        Value::Symbol(s) if s.namespace().is_none() && s.name().starts_with('$') && s.name() != "$" => {
            Some(s.name().to_string())
        }
        Value::Vector(items) | Value::List(items) => items.iter().find_map(named_source),
        _ => None,
    }
}

/// The rule call forms in clauses, with whether each is under a `not`.
pub(crate) fn calls_in(clauses: &[Clause], negated: bool, out: &mut Vec<(Value, bool)>) {
    for c in clauses {
        match c {
            Clause::RuleCall { form } => out.push((form.clone(), negated)),
            Clause::Not { clauses, .. } => calls_in(clauses, true, out),
            Clause::Or { branches, .. } => branches.iter().for_each(|b| calls_in(b, negated, out)),
            _ => {}
        }
    }
}

/// Tarjan's strongly connected components, in reverse topological order of the condensation
/// (callees before callers).
fn tarjan(edges: &[Vec<(usize, bool)>]) -> Vec<Vec<usize>> {
    struct T<'a> {
        edges: &'a [Vec<(usize, bool)>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn visit(t: &mut T, v: usize) {
        t.index[v] = Some(t.next);
        t.low[v] = t.next;
        t.next += 1;
        t.stack.push(v);
        t.on_stack[v] = true;
        for &(w, _) in &t.edges[v] {
            match t.index[w] {
                None => {
                    visit(t, w);
                    t.low[v] = t.low[v].min(t.low[w]);
                }
                Some(iw) if t.on_stack[w] => t.low[v] = t.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(t.low[v]) == t.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on_stack[w] = false;
                comp.push(w);
                if w == v {
                    break;
                }
            }
            comp.sort();
            t.out.push(comp);
        }
    }
    let n = edges.len();
    let mut t = T {
        edges,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if t.index[v].is_none() {
            visit(&mut t, v);
        }
    }
    t.out
}

/// Renames the variables of an EDN form (`?x` symbols) through `map`; variables not in the map are
/// renamed with `fresh`, remembered in the map.
pub(crate) fn rename(v: &Value, map: &mut BTreeMap<String, Value>, fresh: &mut dyn FnMut(&str) -> String) -> Value {
    match v {
        Value::Symbol(s) if s.namespace().is_none() && s.name().starts_with('?') && s.name().len() > 1 => {
            map.entry(s.name().to_string()).or_insert_with(|| crate::parse::symbol(&fresh(s.name()))).clone()
        }
        Value::Vector(items) => Value::Vector(items.iter().map(|x| rename(x, map, fresh)).collect()),
        Value::List(items) => Value::List(items.iter().map(|x| rename(x, map, fresh)).collect()),
        other => other.clone(),
    }
}

/// How a recursive call with some arguments bound to constants can be seeded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seeding {
    /// Every bound position is passed unchanged by every recursive body (`(r ?a ?d) :- (r ?a ?x) ...`):
    /// the seed filters the base case and the recursion keeps it.
    Filter,
    /// Every free position is passed unchanged from the head to the single recursive call and used
    /// nowhere else (`(r ?a ?d) :- [?a :p ?x] (r ?x ?d)`): the bound positions are closed first (a
    /// "magic" CTE from the seeds), then the base case reads the reached values (factoring).
    Factor,
}

/// Decides how a call of single-rule recursive component `rule` with `bound` positions can be seeded.
pub fn seeding(set: &RuleSet, rule: &Rule, bound: &[usize]) -> Option<Seeding> {
    if bound.is_empty() || set.component(&rule.name).len() != 1 {
        return None;
    }
    let free: Vec<usize> = (0..rule.arity).filter(|i| !bound.contains(i)).collect();
    let mut filter = true;
    let mut factor = !free.is_empty();
    for body in &rule.bodies {
        let mut calls = Vec::new();
        calls_in(&body.clauses, false, &mut calls);
        let own: Vec<RuleCall> =
            calls.iter().filter_map(|(f, _)| read_call(f).ok()).filter(|c| c.name == rule.name).collect();
        if own.is_empty() {
            continue;
        }
        let same = |c: &RuleCall, i: usize| matches!(&c.args[i], Term::Var(v) if *v == body.params[i]);
        filter &= own.iter().all(|c| bound.iter().all(|i| same(c, *i)));
        // Factoring: exactly one top-level self call, passing every free position through unchanged; the free
        // variables appear nowhere else in the body.
        let top: Vec<&Clause> = body.clauses.iter().filter(|c| is_call_of(c, &rule.name)).collect();
        if own.len() != 1 || top.len() != 1 {
            factor = false;
            continue;
        }
        let call = &own[0];
        let rest: Vec<Clause> = body.clauses.iter().filter(|c| !is_call_of(c, &rule.name)).cloned().collect();
        let used = all_vars(&rest);
        for f in &free {
            let p = &body.params[*f];
            let passes = same(call, *f);
            let elsewhere = used.contains(p)
                || bound.iter().any(|b| matches!(&call.args[*b], Term::Var(v) if v == p) || body.params[*b] == *p);
            if !passes || elsewhere {
                factor = false;
            }
        }
    }
    if filter {
        Some(Seeding::Filter)
    } else if factor {
        Some(Seeding::Factor)
    } else {
        None
    }
}

fn is_call_of(c: &Clause, name: &str) -> bool {
    matches!(c, Clause::RuleCall { form } if read_call(form).is_ok_and(|rc| rc.name == name))
}

/// Every variable occurring in clauses, at any depth (local variables of `not-join`/`or-join`
/// included).
pub(crate) fn all_vars(clauses: &[Clause]) -> BTreeSet<Var> {
    let mut out = BTreeSet::new();
    for c in clauses {
        let form = match c {
            Clause::Pattern { form, .. }
            | Clause::Not { form, .. }
            | Clause::Or { form, .. }
            | Clause::RuleCall { form } => form,
            Clause::Predicate(call) | Clause::Function { call, .. } => &call.form,
        };
        vars_of_form(form, &mut out);
    }
    out
}

fn vars_of_form(v: &Value, out: &mut BTreeSet<Var>) {
    match v {
        Value::Symbol(s) if s.namespace().is_none() && s.name().starts_with('?') && s.name().len() > 1 => {
            out.insert(Var(s.name().to_string()));
        }
        Value::Vector(items) | Value::List(items) => items.iter().for_each(|x| vars_of_form(x, out)),
        _ => {}
    }
}

/// The variables of a rule call (for `or` unification and `not` binding checks).
pub(crate) fn call_vars(form: &Value) -> Vec<Var> {
    read_call(form)
        .map(|c| {
            c.args
                .into_iter()
                .filter_map(|t| match t {
                    Term::Var(v) => Some(v),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ANCESTOR: &str = "[[(anc ?a ?d) [?a :p/parent ?d]] [(anc ?a ?d) [?a :p/parent ?x] (anc ?x ?d)]]";

    #[test]
    fn components_and_recursion() {
        let s = RuleSet::parse_str(
            "[[(even ?a ?b) [?a :e/to ?x] (odd ?x ?b)] [(odd ?a ?b) [?a :e/to ?b]] [(odd ?a ?b) [?a :e/to ?x] (even ?x ?b)]
              [(top ?a) (even ?a _)] [(leaf ?a) [?a :e/to _]]]",
        )
        .unwrap();
        assert_eq!(s.component("even"), ["even".to_string(), "odd".to_string()]);
        assert!(s.is_recursive("odd") && !s.is_recursive("top") && !s.is_recursive("leaf"));
        assert!(s.scc["even"] < s.scc["top"]);
    }

    #[test]
    fn rejects_recursion_through_negation() {
        let e =
            RuleSet::parse_str("[[(p ?x) [?x :a/b _] (not (q ?x))] [(q ?x) [?x :a/b _] (not (p ?x))]]").unwrap_err();
        assert!(e.to_string().contains("unstratifiable"), "{e}");
        // Negation of a lower stratum is fine.
        RuleSet::parse_str("[[(p ?x) [?x :a/b _] (not (q ?x))] [(q ?x) [?x :a/c _]]]").unwrap();
    }

    #[test]
    fn rejects_bad_rules() {
        assert!(RuleSet::parse_str("[[(p ?x) (q ?x)]]").unwrap_err().to_string().contains("unknown rule q"));
        assert!(RuleSet::parse_str("[[(p ?x) [?x :a/b _]] [(p ?x ?y) [?x :a/b ?y]]]").is_err());
        assert!(RuleSet::parse_str("[[(p ?x ?x) [?x :a/b _]]]").is_err());
    }

    #[test]
    fn seeding_shapes() {
        let s = RuleSet::parse_str(ANCESTOR).unwrap();
        let r = &s.rules["anc"];
        assert_eq!(seeding(&s, r, &[0]), Some(Seeding::Factor));
        assert_eq!(seeding(&s, r, &[1]), Some(Seeding::Filter));
        let left = RuleSet::parse_str("[[(anc ?a ?d) [?a :p/parent ?d]] [(anc ?a ?d) (anc ?a ?x) [?x :p/parent ?d]]]")
            .unwrap();
        assert_eq!(seeding(&left, &left.rules["anc"], &[0]), Some(Seeding::Filter));
        assert_eq!(seeding(&left, &left.rules["anc"], &[1]), Some(Seeding::Factor));
    }

    // Compiled SQL of rule queries (snapshots) and errors, over a small family/graph schema.

    use crate::layout::{bootstrap_schema, StoreName};
    use crate::schema::{Attribute, Schema, Unique, ValueType};
    use crate::{compile_query, CompiledQuery, QueryOptions};

    fn schema() -> Schema {
        let attr = |e, i: &str, t, many, unique: Option<Unique>| {
            let mut a = Attribute::new(e, i, t);
            a.many = many;
            a.unique = unique;
            a.index = unique.is_some();
            a
        };
        bootstrap_schema()
            .with_attribute(attr(100, ":person/name", ValueType::String, false, Some(Unique::Identity)))
            .with_attribute(attr(101, ":person/parent", ValueType::Ref, true, None))
            .with_attribute(attr(102, ":node/id", ValueType::Long, false, Some(Unique::Identity)))
            .with_attribute(attr(103, ":node/to", ValueType::Ref, true, None))
    }

    fn compile(q: &str, inputs: &str) -> Result<CompiledQuery, PlanError> {
        let store = StoreName::parse("mentat").expect("store");
        compile_query(q, Some(inputs), &schema(), &store, &QueryOptions::default())
    }

    fn sql(q: &str, inputs: &str) -> String {
        match compile(q, inputs) {
            Ok(c) => c.sql,
            Err(e) => panic!("{q} failed: {e}"),
        }
    }

    const ANC: &str = "[[(anc ?a ?d) [?a :person/parent ?d]] [(anc ?a ?d) [?a :person/parent ?x] (anc ?x ?d)]]";
    const PATH: &str = "[[(path ?a ?b) [?a :node/to ?b]] [(path ?a ?b) (path ?a ?x) [?x :node/to ?b]]]";

    #[test]
    fn snapshot_full_closure() {
        insta::assert_snapshot!(sql("[:find ?a ?d :in $ % :where (anc ?a ?d)]", &format!("[{ANC}]")));
    }

    #[test]
    fn snapshot_factored_seed() {
        insta::assert_snapshot!(sql(
            "[:find ?d :in $ % ?n :where [?p :person/name ?n] (anc ?p ?d)]",
            &format!("[{ANC} \"x\"]")
        ));
        // The seed comes from a lookup ref, a constant argument.
        insta::assert_snapshot!(sql("[:find ?d :in $ % :where (anc [:person/name \"x\"] ?d)]", &format!("[{ANC}]")));
    }

    #[test]
    fn snapshot_filter_seed() {
        insta::assert_snapshot!(sql("[:find ?b :in $ % ?a :where (path ?a ?b)]", &format!("[{PATH} 5]")));
    }

    #[test]
    fn snapshot_collection_seed() {
        insta::assert_snapshot!(sql("[:find ?a ?d :in $ % [?a ...] :where (anc ?a ?d)]", &format!("[{ANC} [1 2]]")));
    }

    #[test]
    fn snapshot_mutual_recursion() {
        let rules = "[[(odd ?a ?b) [?a :node/to ?b]] [(odd ?a ?b) [?a :node/to ?x] (even ?x ?b)]
                      [(even ?a ?b) [?a :node/to ?x] (odd ?x ?b)]]";
        insta::assert_snapshot!(sql("[:find ?a ?b :in $ % :where (even ?a ?b)]", &format!("[{rules}]")));
    }

    #[test]
    fn snapshot_inlined_rule() {
        let rules = "[[(sibling ?a ?b) [?a :person/parent ?p] [?b :person/parent ?p] [(not= ?a ?b)]]
                      [(named ?e ?n) [?e :person/name ?n]]]";
        insta::assert_snapshot!(sql(
            "[:find ?n :in $ % :where (named ?a \"x\") (sibling ?a ?b) (named ?b ?n)]",
            &format!("[{rules}]")
        ));
    }

    #[test]
    fn snapshot_rule_in_not_join() {
        insta::assert_snapshot!(sql(
            "[:find ?a :in $ % :where [?a :person/name _] (not-join [?a] (anc ?a ?d) [?d :person/name \"root\"])]",
            &format!("[{ANC}]")
        ));
    }

    #[test]
    fn errors() {
        let e = compile("[:find ?a ?d :in $ % :where (anc ?a ?d)]", "[[[(anc [?a] ?d) [?a :person/parent ?d]]]]")
            .unwrap_err();
        assert!(e.to_string().contains("?a") && e.to_string().contains("(anc ?a ?d)"), "{e}");
        let e = compile("[:find ?a :where (anc ?a ?d)]", "[]").unwrap_err();
        assert!(e.to_string().contains("rule set"), "{e}");
        let e = compile("[:find ?a :in $ % :where (nope ?a)]", &format!("[{ANC}]")).unwrap_err();
        assert!(e.to_string().contains("unknown rule nope"), "{e}");
        let nonlinear = "[[(tc ?a ?b) [?a :node/to ?b]] [(tc ?a ?b) (tc ?a ?x) (tc ?x ?b)]]";
        // non-linear recursion compiles to a keyed recursive CTE that reads the whole relation so far
        let c = compile("[:find ?a ?b :in $ % :where (tc ?a ?b)]", &format!("[{nonlinear}]")).unwrap();
        assert!(c.sql.contains("USING KEY") && c.sql.contains("recurring."), "{}", c.sql);
        let e = compile("[:find ?a :in $ % :where (anc ?a ?d)]", "[]").unwrap_err();
        assert!(matches!(e, PlanError::InputCount { .. }), "{e}");
    }
}
