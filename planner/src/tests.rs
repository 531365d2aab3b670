//! Compiler tests: SQL snapshots (insta) and errors, over the issue-tracker schema of the workload.

use crate::layout::StoreName;
use crate::schema::{Attribute, Schema, ValueType};
use crate::{compile_query, CompiledQuery, PlanError, QueryOptions, TimeBound};

/// The workload's schema (`shared/workload.md`) on top of the bootstrap attributes.
pub(crate) fn schema() -> Schema {
    crate::fuzz::issue_schema()
}

fn store() -> StoreName {
    StoreName::parse("mentat").expect("store name")
}

pub(crate) fn compile_with(q: &str, inputs: Option<&str>, opts: &QueryOptions) -> Result<CompiledQuery, PlanError> {
    compile_query(q, inputs, &schema(), &store(), opts)
}

pub(crate) fn compile(q: &str, inputs: Option<&str>) -> CompiledQuery {
    match compile_with(q, inputs, &QueryOptions::default()) {
        Ok(c) => c,
        Err(e) => panic!("{q} failed: {e}"),
    }
}

pub(crate) fn err(q: &str, inputs: Option<&str>) -> PlanError {
    match compile_with(q, inputs, &QueryOptions::default()) {
        Ok(c) => panic!("{q} compiled to {}", c.sql),
        Err(e) => e,
    }
}

/// A snapshot body: the SQL, then the columns.
fn show(c: &CompiledQuery) -> String {
    let cols: Vec<String> = c.columns.iter().map(|c| format!("{} {}", c.name, c.sql_type)).collect();
    format!("{}\n-- {:?}: {}", c.sql, c.find, cols.join(", "))
}

macro_rules! snap {
    ($name:ident, $q:expr) => {
        snap!($name, $q, None);
    };
    ($name:ident, $q:expr, $inputs:expr) => {
        #[test]
        fn $name() {
            insta::assert_snapshot!(show(&compile($q, $inputs)));
        }
    };
}

snap!(
    q1_point_lookup,
    "[:find ?e ?name :in $ ?email :where [?e :user/email ?email] [?e :user/name ?name]]",
    Some("[\"user1@example.com\"]")
);
snap!(
    q2_ref_traversal,
    "[:find ?i ?title ?state :in $ ?email :where [?u :user/email ?email] [?i :issue/assignee ?u] [?i :issue/title ?title] [?i :issue/state ?state]]",
    Some("[\"user1@example.com\"]")
);
snap!(q3_aggregate, "[:find ?state (count ?i) :where [?i :issue/state ?state]]");
snap!(
    q4_predicate_scan,
    "[:find ?i ?title ?priority :in $ ?min :where [?i :issue/state :state/open] [?i :issue/priority ?priority] [?i :issue/title ?title] [(>= ?priority ?min)]]",
    Some("[4]")
);
snap!(
    input_bindings,
    "[:find ?e ?name :in $ [?email ...] :where [?e :user/email ?email] [?e :user/name ?name]]",
    Some("[[\"a@x\" \"b@x\" \"a@x\"]]")
);
snap!(since_scan, "[:find ?i :where [?i :issue/state _]]");

snap!(
    as_of_q2,
    "[:find ?i ?state :in $ ?email :where [?u :user/email ?email] [?i :issue/assignee ?u] [?i :issue/state ?state]]",
    Some("[\"user1@example.com\"]")
);
snap!(keyword_ref_constant, "[:find ?e :where [?e :db/valueType :db.type/string]]");
snap!(reverse_attribute, "[:find ?l :where [?i :issue/title \"t\"] [?l :issue/_label ?i]]");
snap!(lookup_ref_input, "[:find ?a ?v :in $ ?e :where [?e ?a ?v]]", Some("[[:user/email \"u@x\"]]"));
snap!(lookup_ref_constant, "[:find ?i :where [?i :issue/assignee [:user/email \"u@x\"]]]");
snap!(unbound_attribute_mixed, "[:find ?a ?v :where [65536 ?a ?v]]");
// Order comparisons of mixed values with numbers and instants read the text as that type (other values drop out).
snap!(
    unbound_attribute_ordered_compare,
    "[:find ?a ?v :in $ ?t :where [65536 ?a ?v] [(> ?v 30)] [(<= ?v ?p)] [?x :issue/priority ?p] [(< ?v ?t)]]",
    Some("[#inst \"2025-01-01T00:00:00Z\"]")
);
// A constant value under an unbound attribute is compared inside each attribute's part, in that attribute's type:
// the keyword is an entid for ref attributes and text for keyword attributes.
snap!(unbound_attribute_keyword_value, "[:find ?e ?a :where [?e ?a :priority/high]]");
snap!(
    relation_input,
    "[:find ?e ?s :in $ [[?e ?s]] :where [?e :issue/state ?s]]",
    Some("[[[1 :state/open] [2 :state/closed]]]")
);
// An empty relation or unplaced collection input still emits a valid VALUES list (one typed NULL row, discarded by
// the pruned scope's `false`).
snap!(empty_relation_input, "[:find ?e ?s :in $ [[?e ?s]] :where [?e :issue/state ?s]]", Some("[[]]"));
snap!(empty_collection_input_unplaced, "[:find ?x :in $ [?x ...] :where [(ground 1) ?one]]", Some("[[]]"));
snap!(tuple_input, "[:find ?e :in $ [?t ?p] :where [?e :issue/title ?t] [?e :issue/priority ?p]]", Some("[[\"x\" 3]]"));
snap!(scalar_find, "[:find ?n . :where [_ :user/name ?n]]");
snap!(tuple_find, "[:find [?e ?n] :where [?e :user/name ?n]]");
snap!(collection_find, "[:find [?n ...] :where [_ :user/name ?n]]");
snap!(return_keys, "[:find ?e ?n :keys id name :where [?e :user/name ?n]]");
snap!(return_keys_tuple, "[:find [?e ?n] :keys id name :where [?e :user/name ?n]]");
snap!(sum_set_semantics, "[:find (sum ?p) :where [?i :issue/priority ?p]]");
snap!(sum_with, "[:find (sum ?p) :with ?i :where [?i :issue/priority ?p]]");
snap!(count_many_with, "[:find ?i (count ?l) :where [?i :issue/label ?l]]");
snap!(
    aggregates_all,
    "[:find ?s (count-distinct ?p) (avg ?p) (median ?p) (variance ?p) (stddev ?p) (min ?p) (max ?p) (distinct ?p) (min 2 ?p) (max 2 ?p) (sample 2 ?p) :where [?i :issue/state ?s] [?i :issue/priority ?p]]"
);
snap!(
    min_max_instants_strings,
    "[:find (min ?t) (max ?t) (max ?n) :where [?i :issue/created-at ?t] [?i :issue/title ?n]]"
);
snap!(duplicate_column_names, "[:find ?p (max ?p) (max ?p) :with ?i :where [?i :issue/priority ?p]]");
snap!(
    order_limit_offset,
    "[:find ?i ?p :in $ ?n :where [?i :issue/priority ?p] :order (desc ?p) ?i :limit ?n :offset 5]",
    Some("[10]")
);
// Constant-bound find variables are neither grouping keys nor ordering keys (DuckDB would read an integer literal
// as a column position); without another grouping key the aggregate keeps `HAVING count(*) > 0`.
snap!(group_by_constant, "[:find ?x (count ?i) :where [?i :issue/priority _] [(ground 7) ?x]]");
snap!(order_by_constant, "[:find ?i ?x :in $ ?x :where [?i :issue/title _] :order ?x (desc ?i)]", Some("[\"zz\"]"));
snap!(order_outside_find, "[:find ?i :where [?i :issue/priority ?p] [?i :issue/title ?t] :order ?t]");
snap!(with_without_aggregates, "[:find ?p :with ?i :where [?i :issue/priority ?p]]");
snap!(
    predicates_strings,
    "[:find ?i :where [?i :issue/title ?t] [(starts-with? ?t \"Issue\")] [(ends-with? ?t \"crash\")] [(includes? ?t \"1\")] [(re-matches \"I.*\" ?t)] [(like ?t \"%a%\")] [(< \"A\" ?t \"Z\")]]"
);
snap!(
    functions_values,
    "[:find ?i ?x ?c ?s ?d ?m :where [?i :issue/title ?t] [?i :issue/priority ?p] [(str ?t \"-\" ?p) ?x] [(count ?t) ?c] [(subs ?t 0 5) ?s] [(/ ?p 2) ?d] [(re-find \"[0-9]+\" ?t) ?m]]"
);
snap!(
    arithmetic_compare,
    "[:find ?i :where [?i :issue/priority ?p] [(+ ?p 1) ?q] [(* ?q 2) ?r] [(> ?r 6)] [(!= ?p 3)]]"
);
snap!(
    instant_compare,
    "[:find ?i :in $ ?t :where [?i :issue/created-at ?c] [(>= ?c #inst \"2025-06-01T00:00:00Z\")] [(< ?c ?t)]]",
    Some("[#inst \"2025-07-01T00:00:00Z\"]")
);
snap!(type_predicates, "[:find ?i :where [?i :issue/title ?t] [(string? ?t)]]");
snap!(type_predicate_false_prunes, "[:find ?i :where [?i :issue/title ?t] [(int? ?t)]]");
snap!(impossible_constant_prunes, "[:find ?i :where [?i :issue/priority \"high\"]]");
snap!(ground_and_identity, "[:find ?i ?x :where [(ground 3) ?p] [?i :issue/priority ?p] [(identity ?i) ?x]]");
snap!(ground_collection, "[:find ?i :where [(ground [:state/open :state/closed]) [?s ...]] [?i :issue/state ?s]]");
snap!(get_else, "[:find ?i ?p :where [?i :issue/title _] [(get-else $ ?i :issue/priority -1) ?p]]");
snap!(
    get_some,
    "[:find ?i ?a ?v :where [?i :issue/title _] [(get-some $ ?i :issue/assignee :issue/reporter) [?a ?v]]]"
);
snap!(missing, "[:find ?i :where [?i :issue/title _] [(missing? $ ?i :issue/label)]]");
snap!(
    tuple_untuple,
    "[:find ?t ?a :where [?i :issue/priority ?p] [?i :issue/state ?s] [(tuple ?p ?s) ?t] [(untuple ?t) [?a _]]]"
);
snap!(not_clause, "[:find ?i :where [?i :issue/state _] (not [?i :issue/priority 5])]");
snap!(
    not_join_absent_entities,
    "[:find ?u :where [?u :user/email _] (not-join [?u] [?i :issue/assignee ?u] [?i :issue/state :state/open])]"
);
snap!(not_of_predicate, "[:find ?i :where [?i :issue/priority ?p] (not [(> ?p 3)])]");
snap!(
    or_patterns,
    "[:find ?i :where (or [?i :issue/state :state/open] [?i :issue/state :state/reopened]) [?i :issue/priority 5]]"
);
snap!(or_predicates, "[:find ?i :where [?i :issue/priority ?p] (or [(< ?p 2)] [(> ?p 4)])]");
snap!(
    or_join_input,
    "[:find ?i :in $ ?u :where (or-join [?i ?u] [?i :issue/assignee ?u] [?i :issue/reporter ?u])]",
    Some("[65536]")
);
snap!(or_join_lateral, "[:find ?i ?x :where [?i :issue/priority ?p] (or-join [?i ?p ?x] (and [?i :issue/state :state/open] [(ground 1) ?x]) (and [(> ?p 3)] [(ground 2) ?x]))]");
snap!(or_and_branches, "[:find ?i :where [?i :issue/title _] (or (and [?i :issue/state :state/open] [?i :issue/priority 5]) [?i :issue/label 65792])]");

fn opts_snap(q: &str, opts: QueryOptions) -> String {
    match compile_with(q, None, &opts) {
        Ok(c) => show(&c),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn as_of_tx() {
    let opts = QueryOptions { as_of: Some(TimeBound::Tx((1 << 40) + 5)), ..Default::default() };
    insta::assert_snapshot!(opts_snap("[:find ?i ?s :where [?i :issue/state ?s]]", opts));
}

#[test]
fn since_instant() {
    let opts = QueryOptions { since: Some(TimeBound::Instant("2025-01-01 00:00:00+00".into())), ..Default::default() };
    insta::assert_snapshot!(opts_snap("[:find ?i :where [?i :issue/state _]]", opts));
}

#[test]
fn history_five_place() {
    let opts = QueryOptions { history: true, ..Default::default() };
    insta::assert_snapshot!(opts_snap("[:find ?i ?s ?tx ?added :where [?i :issue/state ?s ?tx ?added]]", opts));
}

#[test]
fn history_with_as_of_and_since() {
    let opts = QueryOptions {
        history: true,
        as_of: Some(TimeBound::Tx(20)),
        since: Some(TimeBound::Tx(10)),
        ..Default::default()
    };
    insta::assert_snapshot!(opts_snap("[:find ?i ?s :where [?i :issue/state ?s _ false]]", opts));
}

#[test]
fn error_unknown_attribute() {
    let e = err("[:find ?e :where [?e :user/nope ?x]]", None);
    assert!(matches!(&e, PlanError::UnknownAttribute { ident, .. } if ident == ":user/nope"), "{e}");
    assert!(e.to_string().contains("[?e :user/nope ?x]"), "{e}");
}

#[test]
fn error_unbound_in_not() {
    let e = err("[:find ?u :where [?u :user/name _] (not [?i :issue/assignee ?u])]", None);
    assert!(matches!(&e, PlanError::UnboundVariable { var, .. } if var == "?i"), "{e}");
    assert!(e.to_string().contains("(not [?i :issue/assignee ?u])"), "{e}");
}

#[test]
fn error_unbound_in_not_join() {
    let e = err("[:find ?u :where [?u :user/name _] (not-join [?x] [?x :issue/assignee ?u])]", None);
    assert!(matches!(&e, PlanError::UnboundVariable { var, .. } if var == "?x"), "{e}");
}

#[test]
fn error_unbound_in_or_join() {
    let e = err("[:find ?i :where [?i :issue/title _] (or-join [[?u] ?i] [?i :issue/assignee ?u])]", None);
    assert!(matches!(&e, PlanError::UnboundVariable { var, .. } if var == "?u"), "{e}");
    let e = err("[:find ?i ?z :where [?i :issue/title _] (or-join [?i ?z] [?i :issue/assignee ?u])]", None);
    assert!(matches!(&e, PlanError::UnboundVariable { var, .. } if var == "?z"), "{e}");
}

#[test]
fn error_or_branches_differ() {
    let e = err("[:find ?i :where (or [?i :issue/assignee ?u] [?i :issue/priority ?p])]", None);
    assert!(
        matches!(&e, PlanError::OrBranches { message, .. } if message.contains("?p") && message.contains("?u")),
        "{e}"
    );
}

#[test]
fn error_type_mismatch() {
    let e = err("[:find ?i :where [?i :issue/title ?t] [(< ?t 5)]]", None);
    assert!(matches!(e, PlanError::TypeMismatch { .. }), "{e}");
    let e = err("[:find ?i :where [?i :issue/title ?t] [?i :issue/priority ?p] [(= ?t ?p)]]", None);
    assert!(e.to_string().contains("cannot compare a string with a long"), "{e}");
    let e = err("[:find (sum ?t) :where [?i :issue/title ?t]]", None);
    assert!(matches!(e, PlanError::TypeMismatch { .. }), "{e}");
}

#[test]
fn error_input_count() {
    let e = err("[:find ?e :in $ ?a ?b :where [?e :user/name ?a]]", Some("[\"x\"]"));
    assert_eq!(e, PlanError::InputCount { form: "[$ ?a ?b]".into(), expected: 2, got: 1 });
    let e = err("[:find ?e :in $ ?a :where [?e :user/name ?a]]", None);
    assert!(matches!(e, PlanError::InputCount { expected: 1, got: 0, .. }), "{e}");
}

#[test]
fn error_malformed_edn() {
    assert!(matches!(err("[:find ?e :where [?e :user/name", None), PlanError::Edn { what: "query", .. }));
    assert!(matches!(
        err("[:find ?e :in $ ?n :where [?e :user/name ?n]]", Some("[\"x")),
        PlanError::Edn { what: "inputs", .. }
    ));
    assert!(matches!(err("[:find :where [?e :user/name]]", None), PlanError::Syntax { .. }));
}

#[test]
fn error_return_maps() {
    let e = err("[:find ?e ?n :keys id :where [?e :user/name ?n]]", None);
    assert!(e.to_string().contains("2 elements, 1 names"), "{e}");
    let e = err("[:find [?n ...] :keys n :where [?e :user/name ?n]]", None);
    assert!(e.to_string().contains("relation or tuple"), "{e}");
}

#[test]
fn error_unbound_find_variable() {
    let e = err("[:find ?x :where [?e :user/name _]]", None);
    assert!(matches!(&e, PlanError::UnboundVariable { var, .. } if var == "?x"), "{e}");
}

#[test]
fn error_bad_inputs() {
    let e = err("[:find ?e :in $ [[?e ?n]] :where [?e :issue/priority ?n]]", Some("[[[1 \"two\"]]]"));
    assert!(matches!(e, PlanError::BadInput { .. }), "{e}");
    // a lookup ref on an attribute that is not unique: a bad input that says which input
    let e = err("[:find ?e :in $ ?u :where [?e :issue/assignee ?u]]", Some("[[:user/name \"x\"]]"));
    assert!(matches!(e, PlanError::BadInput { .. }), "{e}");
    assert!(e.to_string().contains("input 1 of the inputs vector") && e.to_string().contains("not unique"), "{e}");
    assert!(e.to_string().contains("given for ?u"), "{e}");
    // nil in a collection: the variable it was given for is named too
    let e = err("[:find ?e :in $ [?u ...] :where [?e :issue/assignee ?u]]", Some("[[1 nil]]"));
    assert!(matches!(e, PlanError::BadInput { .. }) && e.to_string().contains("nil"), "{e}");
    assert!(e.to_string().contains("given for ?u"), "{e}");
    // an unknown attribute in a lookup ref's shape given for an entity
    let e = err("[:find ?e :in $ ?u :where [?e :issue/assignee ?u]]", Some("[[:user/zzz \"x\"]]"));
    assert!(matches!(&e, PlanError::UnknownAttribute { ident, .. } if ident == ":user/zzz"), "{e}");
    assert!(e.to_string().ends_with("given for ?u"), "{e}");
    // what cannot name an entity, where one is meant: a type mismatch naming the form and the variable
    for (input, says) in [
        ("[\"x\"]", "`\"x\"`: a string cannot name an entity"),
        ("[[:user/email]]", "`[:user/email]`: a vector that is not a lookup ref cannot name an entity"),
        ("[[:user/email 7]]", "`[:user/email 7]`: a lookup ref's value must be of its attribute's type"),
    ] {
        let e = err("[:find ?e :in $ ?u :where [?e :issue/assignee ?u]]", Some(input));
        assert!(matches!(e, PlanError::TypeMismatch { .. }), "{e}");
        assert!(e.to_string().contains(says) && e.to_string().ends_with("given for ?u"), "{e}");
    }
    // a lookup ref where a string is meant
    let e = err("[:find ?u :in $ ?m :where [?u :user/email ?m]]", Some("[[:user/email \"a@b.c\"]]"));
    assert!(e.to_string().contains("a lookup ref names an entity, and this position holds a string"), "{e}");
    // a keyword that is no ident and an entid of nothing still match nothing, as in Datomic
    for input in ["[:no/such]", "[123456789]"] {
        let c = compile_with("[:find ?e :in $ ?u :where [?e :issue/assignee ?u]]", Some(input), &Default::default());
        assert!(c.is_ok(), "{input}: {:?}", c.err());
    }
}

#[test]
fn error_unknown_ident_in_comparison() {
    let e = err("[:find ?i :where [?i :issue/assignee ?u] [(= ?u :no/such)]]", None);
    assert!(matches!(e, PlanError::UnknownIdent { .. }), "{e}");
}

#[test]
fn inputs_are_quoted() {
    let c = compile("[:find ?e :in $ ?n :where [?e :user/name ?n]]", Some("[\"x'); DROP TABLE t; --\"]"));
    assert!(c.sql.contains("'x''); DROP TABLE t; --'"), "{}", c.sql);
}

#[test]
fn store_names_are_quoted() {
    let store = StoreName::parse("db.\"we\"\"ird\"").expect("store");
    let c = compile_query("[:find ?e :where [?e :user/name _]]", None, &schema(), &store, &QueryOptions::default())
        .expect("compiles");
    assert!(c.sql.contains("\"db\".\"we\"\"ird\".\"cur_101\""), "{}", c.sql);
}

/// Development aid: `MENTAT_DUMP=file cargo test -p planner dump -- --ignored --nocapture` compiles
/// each `query ;; inputs` line of the file and prints the SQL between markers.
#[test]
#[ignore]
fn dump() {
    let Ok(path) = std::env::var("MENTAT_DUMP") else {
        return;
    };
    let text = std::fs::read_to_string(path).unwrap_or_default();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut parts = line.splitn(3, ";;");
        let q = parts.next().unwrap_or_default();
        let inputs = parts.next().map(str::trim).filter(|s| !s.is_empty());
        let opts = match parts.next().map(str::trim) {
            Some(o) if o.starts_with("as_of ") => {
                QueryOptions { as_of: Some(TimeBound::Tx(o[6..].parse().unwrap_or(0))), ..Default::default() }
            }
            Some(o) if o.starts_with("since ") => {
                QueryOptions { since: Some(TimeBound::Tx(o[6..].parse().unwrap_or(0))), ..Default::default() }
            }
            Some("history") => QueryOptions { history: true, ..Default::default() },
            _ => QueryOptions::default(),
        };
        match compile_with(q, inputs, &opts) {
            Ok(c) => println!("@@SQL\n{}\n@@END", c.sql),
            Err(e) => println!("@@ERR {e}\n@@END"),
        }
    }
}

/// A string constant for a bytes attribute is its UTF-8 bytes (as the transactor stores a string given for
/// bytes), made with `encode` so that backslashes stay literal.
#[test]
fn bytes_constant() {
    let s = schema().with_attribute(Attribute::new(110, ":file/data", ValueType::Bytes));
    let c = compile_query(
        "[:find ?f :in $ ?d :where [?f :file/data \"a\\\\x41'\"] [?f :file/data ?d]]",
        Some("[\"zz\"]"),
        &s,
        &store(),
        &QueryOptions::default(),
    )
    .expect("compiles");
    insta::assert_snapshot!(show(&c));
}

/// The entity path's plan of `q` (None: the general path answers it).
fn entity_plan_of(q: &str, inputs: Option<&str>, opts: &QueryOptions) -> Option<crate::entity::EntityPlan> {
    let compiled = compile_with(q, inputs, opts).unwrap_or_else(|e| panic!("{q} failed: {e}"));
    let shape = crate::entity_shape(q, &compiled)?;
    crate::entity_plan(&shape, inputs, &schema(), &store(), opts)
}

#[test]
fn entity_plans_read_a_since_database_from_the_tx_order() {
    use crate::entity::Access;
    let t = 1 << 40;
    let since = QueryOptions { since: Some(TimeBound::Tx(t)), ..Default::default() };
    let q = "[:find ?i ?t :where [?i :issue/state _] [?i :issue/title ?t]]";
    // a pattern nothing binds is a scan: the general path's, but since a tx the datoms asserted after it
    assert!(entity_plan_of(q, None, &QueryOptions::default()).is_none());
    let p = entity_plan_of(q, None, &since).expect("planned");
    assert_eq!((p.since, p.as_of), (Some(t), None));
    assert_eq!(p.steps.iter().map(|s| s.access).collect::<Vec<_>>(), vec![Access::Since, Access::Eavt]);
    assert_eq!(
        p.to_string(),
        "entity index: 1 seed row(s), since tx 1099511627776; SINCE [?i :issue/state _]; EAVT [?i :issue/title ?t]"
    );
    // a probe is still preferred to a scan where a value binds the first pattern
    let p = entity_plan_of("[:find ?i :in $ ?u :where [?i :issue/assignee ?u]]", Some("[7]"), &since).unwrap();
    assert_eq!(p.steps[0].access, Access::Avet);
    // as-of and since at once, history, and pulls keep to the general path
    let both = QueryOptions { as_of: Some(TimeBound::Tx(t + 1)), ..since.clone() };
    assert!(entity_plan_of(q, None, &both).is_none());
    let history = QueryOptions { history: true, ..Default::default() };
    assert!(entity_plan_of("[:find ?i :in $ ?u :where [?i :issue/assignee ?u]]", Some("[7]"), &history).is_none());
    assert!(entity_plan_of("[:find (pull ?i [:issue/title]) :where [?i :issue/state _]]", None, &since).is_none());
}

#[test]
fn entity_plans_keep_an_order_on_find_columns_and_its_limit() {
    let opts = QueryOptions::default();
    let q = "[:find ?i ?t :in $ ?u :where [?i :issue/assignee ?u] [?i :issue/title ?t] \
             :order (desc ?t) ?i :offset 1 :limit 2]";
    let p = entity_plan_of(q, Some("[7]"), &opts).expect("planned");
    assert_eq!(p.order, vec![(1, true), (0, false)]);
    assert_eq!((p.offset, p.limit), (1, Some(2)));
    assert!(p.to_string().ends_with("; order ?t desc ?i; offset 1; limit 2"), "{p}");
    // a limit without an order, or one given as an input: the general path
    let q = "[:find ?i :in $ ?u :where [?i :issue/assignee ?u] :limit 2]";
    assert!(entity_plan_of(q, Some("[7]"), &opts).is_none());
    let q = "[:find ?i :in $ ?u ?n :where [?i :issue/assignee ?u] :order ?i :limit ?n]";
    assert!(entity_plan_of(q, Some("[7 2]"), &opts).is_none());
    let p = entity_plan_of("[:find ?i :in $ ?u :where [?i :issue/assignee ?u]]", Some("[7]"), &opts).unwrap();
    assert!(p.order.is_empty() && p.offset == 0 && p.limit.is_none());
}

#[test]
fn entity_plans_filter_rows_with_comparisons_of_numbers_or_strings() {
    use crate::entity::{Filter, Key, Slot, Test};
    use crate::sql::BinOp;
    let opts = QueryOptions::default();
    let q = "[:find ?i :in $ ?u ?min :where [?i :issue/assignee ?u] [?i :issue/priority ?p] [(>= ?p ?min)] \
             [(!= ?i ?u)]]";
    let p = entity_plan_of(q, Some("[7 2]"), &opts).expect("planned");
    let var = |name: &str| Slot::Var(p.vars.iter().position(|(v, _)| v.0 == name).unwrap());
    assert_eq!(p.filters.len(), 2);
    assert_eq!(
        (p.filters[0].test, &p.filters[0].a, &p.filters[0].b),
        (Test::Compare(BinOp::Ge), &var("?p"), &var("?min"))
    );
    assert_eq!(
        (p.filters[1].test, &p.filters[1].a, &p.filters[1].b),
        (Test::Compare(BinOp::Ne), &var("?i"), &var("?u"))
    );
    // a long against a double constant: the constant stays a double (DuckDB casts the BIGINT to compare)
    let p = entity_plan_of(
        "[:find ?i :in $ ?u :where [?i :issue/assignee ?u] [?i :issue/priority ?p] [(< ?p 4.5)]]",
        Some("[7]"),
        &opts,
    )
    .unwrap();
    assert_eq!(p.filters[0].b, Slot::Const(Key::Float(4.5)));
    let q = "[:find ?i :in $ ?u :where [?i :issue/assignee ?u] [?i :issue/priority ?p] [(< ?p 4)]]";
    let p = entity_plan_of(q, Some("[7]"), &opts).unwrap();
    assert_eq!(
        p.filters,
        vec![Filter {
            test: Test::Compare(BinOp::Lt),
            a: var("?p"),
            b: Slot::Const(Key::Int(4)),
            form: "[(< ?p 4)]".into()
        }]
    );
    assert!(p.to_string().contains("; filter [(< ?p 4)]"), "{p}");
    // a text test of two strings is a filter too
    let q = "[:find ?i :in $ ?u :where [?i :issue/assignee ?u] [?i :issue/title ?t] [(ends-with? ?t \"x\")]]";
    let p = entity_plan_of(q, Some("[7]"), &opts).unwrap();
    assert_eq!((p.filters[0].test, &p.filters[0].b), (Test::EndsWith, &Slot::Const(Key::Text("x".into()))));
    // another predicate, three operands, a keyword, a text test of a keyword: the general path
    for pred in ["[(like ?t \"a%\")]", "[(< 1 ?p 9)]", "[(< ?s :state/open)]", "[(includes? ?s \"open\")]"] {
        let q = format!("[:find ?i :in $ ?u :where [?i :issue/assignee ?u] [?i :issue/priority ?p] [?i :issue/state ?s] [?i :issue/title ?t] {pred}]");
        assert!(entity_plan_of(&q, Some("[7]"), &opts).is_none(), "{pred}");
    }
}

#[test]
fn entity_plans_group_rows_for_counts_mins_and_maxes() {
    use crate::entity::{Agg, Key};
    let opts = QueryOptions::default();
    let q = "[:find ?s (count ?i) (count-distinct ?p) (max ?t) :in $ ?u :where [?i :issue/assignee ?u] \
             [?i :issue/state ?s] [?i :issue/priority ?p] [?i :issue/title ?t]]";
    let p = entity_plan_of(q, Some("[7]"), &opts).expect("planned");
    assert_eq!(p.aggregates, vec![(1, Agg::Count), (2, Agg::CountDistinct), (3, Agg::Max)]);
    assert_eq!(
        (0..4).map(|c| p.column_type(c)).collect::<Vec<_>>(),
        vec![ValueType::Keyword, ValueType::Long, ValueType::Long, ValueType::String]
    );
    assert!(p.to_string().ends_with("; count ?i; count-distinct ?p; max ?t"), "{p}");
    // the distinct rows (?s ?i ?p ?t) of two states, by hand: open has issues 10 (p 2, "b") and 11 (p 2, "a"),
    // closed has issue 12 (p 5, "c")
    let (i, t) = (Key::Int, |s: &str| Key::Text(s.into()));
    let (open, closed) = (t(":state/open"), t(":state/closed"));
    let rows = vec![
        vec![closed.clone(), i(12), i(5), t("c")],
        vec![open.clone(), i(10), i(2), t("b")],
        vec![open.clone(), i(11), i(2), t("a")],
    ];
    // grouped rows come sorted by their grouping keys' bytes (":state/c" before ":state/o")
    assert_eq!(p.aggregate(rows), Some(vec![vec![closed, i(1), i(1), t("c")], vec![open, i(2), i(1), t("b")]]));
    // no grouping column: one row, and none over no rows (Datomic answers [] there, not a count of 0)
    let q = "[:find (count ?i) (min ?p) :in $ ?u :where [?i :issue/assignee ?u] [?i :issue/priority ?p]]";
    let p = entity_plan_of(q, Some("[7]"), &opts).expect("planned");
    assert_eq!(p.aggregate(vec![vec![i(10), i(4)], vec![i(11), i(3)]]), Some(vec![vec![i(2), i(3)]]));
    assert_eq!(p.aggregate(Vec::new()), Some(Vec::new()));
    // doubles: NaN above every number, as DuckDB orders them (so the min here is 1.0)
    let nan = p.aggregate(vec![vec![i(1), Key::Float(f64::NAN)], vec![i(2), Key::Float(1.0)]]).unwrap_or_default();
    assert!(matches!(nan[0][1], Key::Float(x) if x == 1.0), "{nan:?}");
    // sum and avg of longs: exact, or the general path's (a sum outside a long fails there as DuckDB's cast does;
    // an average whose partial sums a double might round)
    let q = "[:find (sum ?p) (avg ?p) :in $ ?u :where [?i :issue/assignee ?u] [?i :issue/priority ?p]]";
    let p = entity_plan_of(q, Some("[7]"), &opts).expect("planned");
    assert_eq!((p.column_type(0), p.column_type(1)), (ValueType::Long, ValueType::Double));
    assert_eq!(p.aggregate(vec![vec![i(2), i(2)], vec![i(5), i(5)]]), Some(vec![vec![i(7), Key::Float(3.5)]]));
    assert_eq!(p.aggregate(vec![vec![i(i64::MAX), i(1)], vec![i(1), i(2)]]), None, "the sum overflows a long");
    // min of n, min of a keyword, and aggregates beside pulls: the general path
    for find in ["(min 2 ?p)", "(min ?s)", "(count ?i) (pull ?i [:issue/title])"] {
        let q = format!(
            "[:find {find} :in $ ?u :where [?i :issue/assignee ?u] [?i :issue/priority ?p] [?i :issue/state ?s]]"
        );
        assert!(entity_plan_of(&q, Some("[7]"), &opts).is_none(), "{find}");
    }
    // :with: hidden columns the aggregates read (two issues of priority 3 sum to 6), dropped from the answer; without
    // an aggregate, the general path
    let q = "[:find (sum ?p) :with ?i :in $ ?u :where [?i :issue/assignee ?u] [?i :issue/priority ?p]]";
    let p = entity_plan_of(q, Some("[7]"), &opts).expect("planned");
    assert_eq!(p.with, 1);
    assert!(p.to_string().ends_with("; sum ?p; with ?i"), "{p}");
    assert_eq!(p.aggregate(vec![vec![i(3), i(10)], vec![i(3), i(11)]]), Some(vec![vec![i(6)]]));
    let q = "[:find ?p :with ?i :in $ ?u :where [?i :issue/assignee ?u] [?i :issue/priority ?p]]";
    assert!(entity_plan_of(q, Some("[7]"), &opts).is_none());
}

#[test]
fn entity_plans_run_negations_as_probes_from_each_row() {
    use crate::entity::Access;
    let opts = QueryOptions::default();
    let q = "[:find ?i :in $ ?u :where [?i :issue/assignee ?u] (not [?i :issue/state :state/closed])]";
    let p = entity_plan_of(q, Some("[7]"), &opts).expect("planned");
    assert_eq!(p.nots.len(), 1);
    assert_eq!(p.nots[0].steps[0].access, Access::Eavt);
    assert!(p.to_string().ends_with(r#"; not (EAVT [?i :issue/state :state/closed])"#), "{p}");
    assert!(p.distinct, "a negation only drops rows");
    // not-join: ?l and ?n are its own (?n is also the query's, a different variable inside), probed from ?i by
    // EAVT then from ?l by EAVT, with its comparison as its filter
    let q = "[:find ?i ?n :in $ ?u :where [?i :issue/assignee ?u] [?i :issue/title ?n] \
             (not-join [?i] [?i :issue/label ?l] [?l :label/name ?n] [(= ?n \"bug\")])]";
    let p = entity_plan_of(q, Some("[7]"), &opts).expect("planned");
    let n = &p.nots[0];
    assert_eq!(
        n.steps.iter().map(|s| (s.access, s.ident.as_str())).collect::<Vec<_>>(),
        vec![(Access::Eavt, ":issue/label"), (Access::Eavt, ":label/name")]
    );
    let var = |s: &crate::entity::Slot| match s {
        crate::entity::Slot::Var(i) => *i,
        _ => usize::MAX,
    };
    let outer_n = p.find[1];
    assert_ne!(var(&n.steps[1].v), outer_n, "the not-join's ?n is its own");
    assert_eq!(n.filters.len(), 1);
    assert!(p.distinct);
    // missing? is the negation of its pattern; get-else an EAVT step with a default, only from a bound entity
    let q = "[:find ?i ?p :in $ ?u :where [?i :issue/assignee ?u] [(missing? $ ?i :issue/reporter)] \
             [(get-else $ ?i :issue/priority 3) ?p]]";
    let p = entity_plan_of(q, Some("[7]"), &opts).expect("planned");
    assert!(
        p.to_string().ends_with(
            "; AVET [?i :issue/assignee ?u]; EAVT [?i :issue/priority ?p] else 3; not (EAVT [?i :issue/reporter _])"
        ),
        "{p}"
    );
    assert_eq!(p.steps[1].default, Some(crate::entity::Key::Int(3)));
    let q = "[:find ?i ?p :in $ ?u ?d :where [?i :issue/assignee ?u] [(get-else $ ?i :issue/priority ?d) ?p]]";
    assert!(entity_plan_of(q, Some("[7 3]"), &opts).is_none(), "a default given as an input: the general path");
    // a negation the index cannot probe (values without a value index, no entity bound), or with another clause
    // than patterns and comparisons: the general path
    for not in [
        "(not-join [?i] [?x :issue/title \"t\"] [?x :issue/priority 3])",
        "(not-join [?i] [?i :issue/title ?t] [(like ?t \"a%\")])",
        "(not (or [?i :issue/priority 1] [?i :issue/priority 2]))",
    ] {
        let q = format!("[:find ?i :in $ ?u :where [?i :issue/assignee ?u] [?i :issue/priority ?p] {not}]");
        assert!(entity_plan_of(&q, Some("[7]"), &opts).is_none(), "{not}");
    }
}

#[test]
fn entity_plans_place_ors_where_every_branch_can_be_probed() {
    let opts = QueryOptions::default();
    // ?i is bound only by the or: it runs first, from the input, and the title's step follows it
    let q = "[:find ?i ?t :in $ ?u :where (or [?i :issue/assignee ?u] [?i :issue/reporter ?u]) [?i :issue/title ?t]]";
    let p = entity_plan_of(q, Some("[7]"), &opts).expect("planned");
    assert_eq!(p.ors.len(), 1);
    assert_eq!(p.ors[0].0, 0, "before the first step");
    assert_eq!(p.ors[0].1.branches.len(), 2);
    assert!(p.ors[0].1.locals.is_empty());
    assert!(!p.distinct, "two branches can give one row twice");
    assert_eq!(p.steps.len(), 1);
    assert!(
        p.to_string().contains("; or before step 0 (AVET [?i :issue/assignee ?u] | AVET [?i :issue/reporter ?u])"),
        "{p}"
    );
    // or-join with a variable of its own per branch, and a comparison in one branch: after the steps
    let q = "[:find ?i :in $ ?u :where [?i :issue/assignee ?u] \
             (or-join [?i] (and [?i :issue/label ?l] [?l :label/name \"bug\"]) (and [?i :issue/priority ?p] [(> ?p 3)]))]";
    let p = entity_plan_of(q, Some("[7]"), &opts).expect("planned");
    let (at, or) = &p.ors[0];
    assert_eq!(*at, 1);
    assert_eq!(or.locals.len(), 2, "?l and ?p are the or-join's own");
    assert_eq!(or.branches[1].filters.len(), 1);
    // a branch that would scan, or a clause other than patterns and comparisons: the general path
    for q in [
        // no branch reaches ?i without a scan
        "[:find ?i :in $ ?u :where (or-join [?i] [?i :issue/title \"a\"] [?i :issue/assignee ?x]) [?i :issue/state _]]",
        // a branch with another clause than patterns and comparisons
        "[:find ?i :in $ ?u :where [?i :issue/assignee ?u] (or-join [?i] [?i :issue/priority 1] [(missing? $ ?i :issue/label)])]",
    ] {
        assert!(entity_plan_of(q, Some("[7]"), &opts).is_none(), "{q}");
    }
}

#[test]
fn entity_plans_know_when_their_rows_are_distinct_without_a_hash() {
    let since = QueryOptions { since: Some(TimeBound::Tx(1 << 40)), ..Default::default() };
    let now = QueryOptions::default();
    let distinct =
        |q: &str, inputs: Option<&str>, opts: &QueryOptions| entity_plan_of(q, inputs, opts).unwrap().distinct;
    let email = Some("[\"a@b.c\"]");
    // every variable found, each step binding whatever could tell its datoms apart
    assert!(distinct("[:find ?e ?n :in $ ?m :where [?e :user/email ?m] [?e :user/name ?n]]", email, &now));
    assert!(distinct("[:find ?i ?l :where [?i :issue/label ?l]]", None, &since));
    // a `_` value of a cardinality-one attribute cannot repeat an entity; of a cardinality-many one it can
    assert!(distinct("[:find ?i :where [?i :issue/state _]]", None, &since));
    assert!(!distinct("[:find ?i :where [?i :issue/label _]]", None, &since));
    // a `_` entity of a unique attribute cannot repeat a value; of another attribute it can
    assert!(distinct("[:find ?m :where [_ :user/email ?m]]", None, &since));
    assert!(!distinct("[:find ?u :where [_ :issue/assignee ?u]]", None, &since));
    assert!(!distinct("[:find ?u :in $ [?u ...] :where [_ :issue/assignee ?u]]", Some("[[7 8]]"), &now));
    assert!(!distinct("[:find ?i :in $ ?u :where [?i :issue/assignee ?u] [?i :issue/label _]]", Some("[7]"), &now));
    // a projection merges rows (q2 finds titles, not the issues)
    assert!(!distinct(
        "[:find ?t :in $ ?m :where [?u :user/email ?m] [?i :issue/assignee ?u] [?i :issue/title ?t]]",
        email,
        &now
    ));
    // collections are deduplicated, relations are not
    assert!(distinct("[:find ?e ?m :in $ [?m ...] :where [?e :user/email ?m]]", Some("[[\"a\" \"a\"]]"), &now));
    // (a collection's variable left out of the find is not one value in every row)
    assert!(!distinct("[:find ?e :in $ [?m ...] :where [?e :user/email ?m]]", Some("[[\"a\" \"b\"]]"), &now));
    assert!(!distinct("[:find ?e :in $ [[?m]] :where [?e :user/email ?m]]", Some("[[[\"a\"] [\"a\"]]]"), &now));
}

#[test]
fn entity_plans_resolve_a_lookup_ref_input_by_a_probe_of_its_unique_attribute() {
    let opts = QueryOptions::default();
    let q = "[:find ?i :in $ ?u :where [?i :issue/assignee ?u]]";
    // the lookup ref binds no seed value: the entity is found by an AVET probe, taken before the query's patterns
    let p = entity_plan_of(q, Some(r#"[[:user/email "ann@x"]]"#), &opts).expect("planned");
    assert_eq!(p.seeds, vec![vec![None, None]]);
    assert_eq!(
        p.to_string(),
        "entity index: 1 seed row(s); AVET [?u :user/email \"ann@x\"]; AVET [?i :issue/assignee ?u]"
    );
    // an entid input binds the seed row itself
    let p = entity_plan_of(q, Some("[65536]"), &opts).expect("planned");
    assert_eq!(p.to_string(), "entity index: 1 seed row(s); AVET [?i :issue/assignee ?u]");
    // a collection of lookup refs of one attribute: their values seed a variable of their own, one probe each
    let q = "[:find ?i :in $ [?u ...] :where [?i :issue/assignee ?u]]";
    let p = entity_plan_of(q, Some(r#"[[[:user/email "ann@x"] [:user/email "bo@x"]]]"#), &opts).expect("planned");
    assert_eq!(p.seeds.len(), 2);
    assert_eq!(
        p.to_string(),
        "entity index: 2 seed row(s); AVET [?u :user/email (lookup refs of ?u)]; AVET [?i :issue/assignee ?u]"
    );
    // beside an entid, the general path
    assert!(entity_plan_of(q, Some(r#"[[[:user/email "ann@x"] 65536]]"#), &opts).is_none());
}

#[test]
fn entity_plans_inline_non_recursive_rules() {
    let opts = QueryOptions::default();
    let rules = "[[(assigned ?u ?i) [?i :issue/assignee ?u]] [(assigned ?u ?i) [?i :issue/reporter ?u]] \
                 [(state-of ?i ?s) [?i :issue/state ?s]]]";
    // a rule of two bodies is an or-join over the call's variables, one of one body its clauses
    let q = "[:find ?i ?s :in $ % ?m :where [?u :user/email ?m] (assigned ?u ?i) (state-of ?i ?s)]";
    let p = entity_plan_of(q, Some(&format!("[{rules} \"ann@x\"]")), &opts).expect("planned");
    assert_eq!(
        p.to_string(),
        "entity index: 1 seed row(s); AVET [?u :user/email ?m]; EAVT [?i :issue/state ?s]; or before step 1 \
         (AVET [?i :issue/assignee ?u] | AVET [?i :issue/reporter ?u])"
    );
    // a constant argument is written into the body
    let q = "[:find ?i :in $ % ?m :where [?u :user/email ?m] (assigned ?u ?i) (state-of ?i :state/open)]";
    let p = entity_plan_of(q, Some(&format!("[{rules} \"ann@x\"]")), &opts).expect("planned");
    assert!(p.to_string().contains("; EAVT [?i :issue/state :state/open]; or before step 1"), "{p}");
    // a recursive rule: the general path
    let rec = "[[(above ?a ?b) [?a :issue/assignee ?b]] [(above ?a ?c) [?a :issue/assignee ?b] (above ?b ?c)]]";
    let q = "[:find ?b :in $ % ?i :where (above ?i ?b)]";
    assert!(entity_plan_of(q, Some(&format!("[{rec} 65536]")), &opts).is_none());
}

/// A lone symbol, keyword or number holding a character none may hold is refused at that character, as it is in a
/// vector, not read up to it with the rest dropped (edn-format alone read `ann@x` as `ann`).
#[test]
fn lone_atom_with_a_stray_character() {
    for (text, column, ch) in
        [("ann@x", 4, '@'), (":a/b@c", 5, '@'), ("ann~x", 4, '~'), ("12@", 3, '@'), ("a|b", 2, '|')]
    {
        let e = crate::parse::read_edn(text).expect_err(text);
        assert_eq!((e.line, e.column), (1, column), "{text}: {e:?}");
        assert!(e.reason.contains(&format!("'{ch}'")), "{text}: {e:?}");
        // the same place as in a vector, one bracket to the right
        let v = crate::parse::read_edn(&format!("[{text}]")).expect_err(text);
        assert_eq!(v.column, column + 1, "{text}: {v:?}");
    }
    // what reads as one form alone still does
    for (text, want) in
        [("ann", "ann"), (" :a/b ", ":a/b"), ("12", "12"), ("a#b", "a#b"), ("-1.5", "-1.5"), ("\\a", "\\a")]
    {
        assert_eq!(crate::error::show(&crate::parse::read_edn(text).expect(text)), want, "{text}");
    }
}
