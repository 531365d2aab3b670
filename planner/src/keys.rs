//! Key analysis: proves that the rows of a join are already distinct over a set of variables, so
//! that set semantics need no `DISTINCT` (lesson 4 of the prior art: `(count ?i)` over the entity
//! of a cardinality-one pattern is a plain `count(*)`).
//!
//! Each source declares a key (variables that determine at most one of its rows: `e` for a
//! cardinality-one attribute, `(e, v)` for cardinality many, every column for history, all columns
//! of a VALUES list or an `or` union; `e` for a fulltext search of a cardinality-one attribute, `(e, v)`
//! for cardinality many), and a pattern of a `:db/unique` attribute outside history a second key, `v`.
//! Starting from the requested variables plus constants, the closure adds every variable of a source
//! one of whose keys is covered, and every computed variable whose inputs are covered. If at the end a
//! key of every source is covered, a row is a function of the requested variables, so distinct rows are
//! distinct tuples.

use crate::algebrize::{Algebra, Source, VarBinding};
use crate::parse::Var;
use std::collections::BTreeSet;

/// Whether the rows of `alg` are provably distinct over `vars`.
pub fn unique_over(alg: &Algebra, vars: &[Var]) -> bool {
    let mut closure: BTreeSet<&Var> = vars.iter().collect();
    closure.extend(alg.bindings.iter().filter(|(_, b)| matches!(b, VarBinding::Const(_))).map(|(v, _)| v));
    loop {
        let before = closure.len();
        for s in &alg.sources {
            if covered(s, &closure) {
                closure.extend(s.vars.iter());
            }
        }
        for (inputs, out) in &alg.fds {
            if inputs.iter().all(|k| closure.contains(k)) {
                closure.insert(out);
            }
        }
        if closure.len() == before {
            break;
        }
    }
    alg.sources.iter().all(|s| covered(s, &closure))
}

/// Whether one of the source's keys (its key, or its second key) is covered by `closure`.
fn covered(s: &Source, closure: &BTreeSet<&Var>) -> bool {
    [&s.key, &s.alt_key].into_iter().flatten().any(|key| key.iter().all(|k| closure.contains(k)))
}

#[cfg(test)]
mod tests {
    use crate::layout::StoreName;
    use crate::schema::{Attribute, ValueType};
    use crate::{compile_query, QueryOptions};

    /// Whether the compiled statement's outermost SELECT is a `SELECT DISTINCT`.
    fn distinct(q: &str, opts: &QueryOptions) -> bool {
        let mut desc = Attribute::new(120, ":issue/body", ValueType::String);
        desc.fulltext = true;
        let mut notes = Attribute::new(121, ":issue/notes", ValueType::String);
        notes.fulltext = true;
        notes.many = true;
        let schema = crate::fuzz::issue_schema().with_attribute(desc).with_attribute(notes);
        let store = StoreName::parse("mentat").expect("store name");
        let c = compile_query(q, None, &schema, &store, opts).unwrap_or_else(|e| panic!("{q}: {e}"));
        c.sql.starts_with("SELECT DISTINCT")
    }

    #[test]
    fn a_unique_value_is_a_second_key() {
        let now = QueryOptions::default();
        // :user/email is unique: an email names one user, who has one name (cardinality one)
        assert!(!distinct("[:find ?email ?n :where [?u :user/email ?email] [?u :user/name ?n]]", &now));
        // :user/name is not unique: two users may share a name, and the name alone keeps no row apart
        assert!(distinct("[:find ?n :where [?u :user/name ?n] [?u :user/email _]]", &now));
        // one user assigned many issues: the email does not name the issue
        assert!(distinct("[:find ?email :where [?i :issue/assignee ?u] [?u :user/email ?email]]", &now));
        // as of a tx a unique value still names one entity; in history it names every datom that held it
        let as_of = QueryOptions { as_of: Some(crate::TimeBound::Tx(1000)), ..QueryOptions::default() };
        assert!(!distinct("[:find ?email ?n :where [?u :user/email ?email] [?u :user/name ?n]]", &as_of));
        let history = QueryOptions { history: true, ..QueryOptions::default() };
        assert!(distinct("[:find ?email ?n :where [?u :user/email ?email] [?u :user/name ?n]]", &history));
    }

    #[test]
    fn a_fulltext_search_has_one_row_per_datom() {
        let now = QueryOptions::default();
        // cardinality one: one hit per entity, so the user's email (unique) keeps the rows apart
        let one = "[:find ?email ?score :where [(fulltext $ :issue/body \"crash\") [[?i _ _ ?score]]] \
                   [?i :issue/reporter ?u] [?u :user/email ?email]]";
        assert!(distinct(one, &now)); // one reporter files many issues: the email does not name the issue
        let by_issue = "[:find ?i ?score :where [(fulltext $ :issue/body \"crash\") [[?i _ _ ?score]]]]";
        assert!(!distinct(by_issue, &now));
        // cardinality many: one hit per (entity, value); the entity alone does not keep them apart
        let many = "[:find ?i ?score :where [(fulltext $ :issue/notes \"crash\") [[?i _ _ ?score]]]]";
        assert!(distinct(many, &now));
        let many_v = "[:find ?i ?v ?score :where [(fulltext $ :issue/notes \"crash\") [[?i ?v _ ?score]]]]";
        assert!(!distinct(many_v, &now));
    }
}
