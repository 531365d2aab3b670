//! Several sources (`:in $ $2`): store sources with their own schemas, relation sources, and the errors.

use crate::layout::{bootstrap_schema, StoreName};
use crate::schema::{Attribute, Schema, Unique, ValueType};
use crate::tests::schema;
use crate::{compile_query_sources, parse_sources, CompiledQuery, PlanError, QueryOptions, StoreSource, TimeBound};

/// A second store, `crm`, where `:user/email` has another entid (300) and `:user/name` does not exist.
fn crm() -> Schema {
    let mut email = Attribute::new(300, ":user/email", ValueType::String);
    email.unique = Some(Unique::Identity);
    bootstrap_schema()
        .with_attribute(email)
        .with_attribute(Attribute::new(301, ":crm/score", ValueType::Long))
        .with_attribute(Attribute::new(302, ":crm/tier", ValueType::Keyword))
}

fn compile2(q: &str, inputs: Option<&str>, opts2: &QueryOptions) -> Result<CompiledQuery, PlanError> {
    let (main, other) = (schema(), crm());
    let (store, crm_store) = (StoreName::parse("mentat").unwrap(), StoreName::parse("crm").unwrap());
    let sources = [StoreSource { var: "$2", schema: &other, store: &crm_store, opts: opts2 }];
    compile_query_sources(q, inputs, &main, &store, &QueryOptions::default(), &sources, None)
}

fn ok(q: &str, inputs: Option<&str>) -> String {
    match compile2(q, inputs, &QueryOptions::default()) {
        Ok(c) => c.sql,
        Err(e) => panic!("{q} failed: {e}"),
    }
}

fn source_err(q: &str, inputs: Option<&str>) -> (String, String) {
    match compile2(q, inputs, &QueryOptions::default()) {
        Err(PlanError::Source { var, message, .. }) => (var, message),
        other => panic!("{q}: expected a source error, got {other:?}"),
    }
}

#[test]
fn each_pattern_reads_its_own_store_and_schema() {
    let sql = ok("[:find ?n ?s :in $ $2 :where [?u :user/email ?m] [?u :user/name ?n] [$2 ?c :user/email ?m] [$2 ?c :crm/score ?s]]", None);
    // :user/email is entid 100 in mentat and 300 in crm
    assert!(sql.contains("\"mentat\".\"cur_100\""), "{sql}");
    assert!(sql.contains("\"crm\".\"cur_300\""), "{sql}");
    assert!(sql.contains("\"crm\".\"cur_301\""), "{sql}");
    assert!(!sql.contains("\"crm\".\"cur_100\"") && !sql.contains("\"mentat\".\"cur_300\""), "{sql}");
}

#[test]
fn not_or_and_rules_take_their_source() {
    let sql = ok(
        "[:find ?m :in $ $2 :where [?u :user/email ?m] ($2 not-join [?m] [?c :user/email ?m] [?c :crm/score 0])]",
        None,
    );
    assert!(sql.contains("NOT EXISTS") && sql.contains("\"crm\".\"cur_301\""), "{sql}");
    let sql =
        ok("[:find ?m :in $ $2 :where ($2 or [?c :crm/score 1] [?c :crm/tier :gold]) [$2 ?c :user/email ?m]]", None);
    assert!(sql.contains("\"crm\".\"cur_302\"") && !sql.contains("\"mentat\""), "{sql}");
    // a rule called with $2 reads crm in its bodies, `$` in them included
    let rules = "[[[(scored ?c ?s) [?c :crm/score ?s]] [(gold ?c) [$ ?c :crm/tier :gold]]]]";
    let sql = ok("[:find ?s :in $ $2 % :where ($2 scored ?c ?s) ($2 gold ?c)]", Some(rules));
    assert!(sql.contains("\"crm\".\"cur_301\"") && sql.contains("\"crm\".\"cur_302\""), "{sql}");
    // called without a source, the same rule reads $, whose schema has no :crm/score
    let (var, msg) =
        match compile2("[:find ?s :in $ $2 % :where (scored ?c ?s)]", Some(rules), &QueryOptions::default()) {
            Err(PlanError::UnknownAttribute { ident, .. }) => ("$".to_string(), ident),
            other => panic!("{other:?}"),
        };
    assert_eq!((var.as_str(), msg.as_str()), ("$", ":crm/score"));
    // get-else with a source
    let sql = ok("[:find ?m ?s :in $ $2 :where [$2 ?c :user/email ?m] [(get-else $2 ?c :crm/score 0) ?s]]", None);
    assert!(sql.contains("LEFT JOIN \"crm\".\"cur_301\""), "{sql}");
}

#[test]
fn relation_sources_match_tuple_positions() {
    let q = "[:find ?x ?y :in $ $2 $3 :where [$3 ?x :likes ?y]]";
    let sql = ok(q, Some("[[[1 :likes 2] [3 :hates 4] [5 :likes 7] [6 :likes]]]"));
    assert!(sql.contains("VALUES") && !sql.contains("\"mentat\""), "{sql}");
    // the :hates tuple and the short one are dropped at compile time
    assert!(!sql.contains(" 4") && !sql.contains(" 6"), "{sql}");
    // a relation source and a store source together, joined on a value
    let sql = ok(
        "[:find ?n :in $ $2 $r :where [$r ?m :vip true] [$2 ?c :user/email ?m] [?u :user/email ?m] [?u :user/name ?n]]",
        Some("[[[\"a@x\" :vip true] [\"b@x\" :vip false]]]"),
    );
    assert!(sql.contains("'a@x'") && !sql.contains("'b@x'"), "{sql}");
    // nothing matches: the query is empty, not an error
    let sql = ok(q, Some("[[[1 :hates 2]]]"));
    assert!(sql.contains("WHERE FALSE"), "{sql}");
    // a relation source's input must be a collection of tuples
    match compile2(q, Some("[42]"), &QueryOptions::default()) {
        Err(PlanError::BadInput { message, .. }) => assert!(message.contains("$3"), "{message}"),
        other => panic!("{other:?}"),
    }
    // a variable's position holding values of several types
    let (var, msg) = source_err(q, Some("[[[1 :likes 2] [5 :likes \"pizza\"]]]"));
    assert_eq!(var, "$3");
    assert!(msg.contains("position 2") && msg.contains("string"), "{msg}");
    // get-else needs a database
    let (var, msg) = source_err(
        "[:find ?v :in $ $2 $3 :where [$3 ?e _ _] [(get-else $3 ?e :user/name \"\") ?v]]",
        Some("[[[1 2 3]]]"),
    );
    assert_eq!(var, "$3");
    assert!(msg.contains("relation"), "{msg}");
}

#[test]
fn source_errors_name_the_source() {
    let (var, msg) = source_err("[:find ?e :in $ $2 :where [$2 ?e :user/name _]]", None);
    assert_eq!(var, "$2");
    assert!(msg.contains(":user/name") && msg.contains("crm"), "{msg}");
    let (var, msg) = source_err("[:find ?e :in $ $2 :where [$9 ?e :user/name _]]", None);
    assert_eq!(var, "$9");
    assert!(msg.contains(":in"), "{msg}");
    let (var, _) = source_err("[:find ?e :in $ $2 :where ($9 not [?e :user/name _]) [?e :user/email _]]", None);
    assert_eq!(var, "$9");
    // a store given for a variable :in does not bind
    let (var, msg) = source_err("[:find ?e :where [?e :user/name _]]", None);
    assert_eq!(var, "$2");
    assert!(msg.contains("crm"), "{msg}");
    // a rule body names a source
    match compile2(
        "[:find ?e :in $ $2 % :where (r ?e)]",
        Some("[[[(r ?e) [$2 ?e :crm/score _]]]]"),
        &QueryOptions::default(),
    ) {
        // the rule set is an input: its error says which one
        Err(PlanError::BadInput { message, .. }) => {
            assert!(message.contains("$2") && message.contains("for %"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    // pull from another source is refused clearly
    match compile2("[:find (pull $2 ?e [*]) :in $ $2 :where [$2 ?e :crm/score _]]", None, &QueryOptions::default()) {
        Err(PlanError::Unsupported { message, .. }) => assert!(message.contains("$2"), "{message}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn time_travel_is_per_source() {
    let hist = QueryOptions { history: true, ..Default::default() };
    let sql = match compile2("[:find ?s ?added :in $ $2 :where [$2 ?c :crm/score ?s _ ?added]]", None, &hist) {
        Ok(c) => c.sql,
        Err(e) => panic!("{e}"),
    };
    assert!(sql.contains("\"crm\".\"hist_301\""), "{sql}");
    // $ is not a history database here
    let r = compile2("[:find ?v :in $ $2 :where [?e :user/name ?v _ true]]", None, &hist);
    assert!(matches!(r, Err(PlanError::Unsupported { .. })), "{r:?}");
    let asof = QueryOptions { as_of: Some(TimeBound::Tx(1 << 41)), ..Default::default() };
    let sql = compile2("[:find ?s :in $ $2 :where [$2 ?c :crm/score ?s] [?u :user/name _]]", None, &asof).unwrap().sql;
    assert!(sql.contains("\"crm\".\"hist_301\"") && !sql.contains("\"mentat\".\"hist_"), "{sql}");
}

#[test]
fn parses_the_sources_option() {
    let specs = parse_sources(
        "{$2 \"crm\" $hist {:history true} $old {:store \"db.crm\" :as-of 1099511627790 :since #inst \"2025-01-01\"}}",
    )
    .unwrap();
    let by = |v: &str| specs.iter().find(|s| s.var == v).unwrap().clone();
    assert_eq!(by("$2").store.as_deref(), Some("crm"));
    assert!(by("$hist").opts.history && by("$hist").store.is_none());
    assert_eq!(by("$old").opts.as_of, Some(TimeBound::Tx(1099511627790)));
    assert!(matches!(by("$old").opts.since, Some(TimeBound::Instant(ref t)) if t.starts_with("2025-01-01T00:00:00")));
    for bad in ["[1]", "{?x \"a\"}", "{$ \"a\"}", "{$2 1}", "{$2 {:asof 1}}", "{$2 {:as-of :now}}"] {
        assert!(matches!(parse_sources(bad), Err(PlanError::BadInput { .. })), "{bad}");
    }
}

#[test]
fn lookup_refs_resolve_in_the_source_they_are_used_in() {
    // an input lookup ref is read against $, and names the entity of $2 by $2's own :user/email (entid 300)
    let sql = ok("[:find ?s :in $ $2 ?c :where [$2 ?c :crm/score ?s]]", Some("[[:user/email \"a@x\"]]"));
    assert!(sql.contains("\"crm\".\"cur_300\"") && !sql.contains("\"mentat\".\"cur_100\""), "{sql}");
    let sql = ok("[:find ?n :in $ $2 ?c :where [?c :user/name ?n]]", Some("[[:user/email \"a@x\"]]"));
    assert!(sql.contains("\"mentat\".\"cur_100\""), "{sql}");
    // a lookup ref written in a clause of $2 is refused, naming the source
    let (var, msg) = source_err("[:find ?s :in $ $2 :where [$2 [:user/email \"a@x\"] :crm/score ?s]]", None);
    assert_eq!(var, "$2");
    assert!(msg.contains("lookup ref"), "{msg}");
}
