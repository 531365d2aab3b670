//! The Spark SQL dialect: what the printer writes for Spark, and the constructs it refuses. The DuckDB
//! dialect's text is the snapshots' (unchanged by the dialect parameter).

use crate::sql::{spark_str, spark_type, Dialect};
use crate::tests::compile_with;
use crate::{PlanError, QueryOptions, TimeBound};

fn spark() -> QueryOptions {
    QueryOptions { dialect: Dialect::Spark, ..Default::default() }
}

fn sql(q: &str, inputs: Option<&str>, opts: &QueryOptions) -> String {
    match compile_with(q, inputs, opts) {
        Ok(c) => {
            assert!(c.stages.is_empty(), "{q} has stages");
            c.sql
        }
        Err(e) => panic!("{q} failed: {e}"),
    }
}

fn refused(q: &str, inputs: Option<&str>) -> String {
    match compile_with(q, inputs, &spark()) {
        Ok(c) => panic!("{q} compiled to {}", c.sql),
        Err(e @ PlanError::Dialect { .. }) => e.to_string(),
        Err(e) => panic!("{q} failed with another error: {e}"),
    }
}

#[test]
fn q1_reads_views_with_backticked_names() {
    let q = "[:find ?e ?name :in $ ?email :where [?e :user/email ?email] [?e :user/name ?name]]";
    let s = sql(q, Some("[\"it's\\\\x\"]"), &spark());
    assert!(s.contains("FROM `cur_100` AS t0"), "{s}");
    assert!(s.contains("AS `e`, t1.v AS `name`"), "{s}");
    assert!(s.contains("'it\\'s\\\\x'"), "{s}");
    assert!(!s.contains('"'), "{s}");
    let duck = sql(q, Some("[\"x\"]"), &QueryOptions::default());
    assert!(duck.contains("FROM \"mentat\".\"cur_100\" AS t0"), "{duck}");
}

#[test]
fn types_and_functions_are_spark_s() {
    let q = "[:find ?i ?t :where [?i :issue/created-at ?t] [(< ?t #inst \"2025-06-01\")] [?i :issue/title ?s]
             [(clojure.string/starts-with? ?s \"Issue\")] [(clojure.string/ends-with? ?s \"typo\")]]";
    let s = sql(q, None, &spark());
    assert!(s.contains("AS TIMESTAMP)"), "{s}");
    assert!(!s.contains("TIMESTAMPTZ"), "{s}");
    assert!(s.contains("startswith(") && s.contains("endswith("), "{s}");
    let s = sql("[:find ?i ?t :where [?i :issue/priority ?p] [(str ?p) ?t]]", None, &spark());
    assert!(s.contains("AS STRING)"), "{s}");
    assert!(!s.contains("VARCHAR"), "{s}");
    assert_eq!(
        spark_type("STRUCT(f0 BIGINT, f1 VARCHAR[])").as_deref(),
        Some("STRUCT<`f0`: BIGINT, `f1`: ARRAY<STRING>>")
    );
    assert_eq!(spark_type("HUGEINT").as_deref(), Some("DECIMAL(38,0)"));
    assert_eq!(spark_type("TIMESTAMPTZ").as_deref(), Some("TIMESTAMP"));
    assert_eq!(spark_str("a'b\\c\n"), "'a\\'b\\\\c\\u000a'");
}

#[test]
fn keyword_order_and_min_are_spark_s() {
    let s = sql("[:find ?i ?s :where [?i :issue/state ?s] :order ?s]", None, &spark());
    assert!(s.contains("named_struct('h', (instr("), "{s}");
    assert!(s.contains("ASC NULLS LAST"), "{s}");
    let s = sql("[:find (min ?s) :where [?i :issue/state ?s]]", None, &spark());
    assert!(s.contains("min_by("), "{s}");
    let s = sql("[:find (distinct ?p) :where [?i :issue/priority ?p]]", None, &spark());
    assert!(s.contains("collect_set("), "{s}");
}

#[test]
fn time_travel_reads_current_and_history_views() {
    let opts = QueryOptions { as_of: Some(TimeBound::Tx((1 << 40) + 5)), ..spark() };
    let s = sql("[:find ?i ?s :where [?i :issue/state ?s]]", None, &opts);
    assert!(s.contains("`cur_103`") && s.contains("`hist_103`"), "{s}");
    let opts = QueryOptions { since: Some(TimeBound::Instant("2025-01-01 00:00:00+00".into())), ..spark() };
    let s = sql("[:find ?i :where [?i :issue/state _]]", None, &opts);
    assert!(s.contains("CAST('2025-01-01 00:00:00+00' AS TIMESTAMP)") && s.contains("`cur_9`"), "{s}");
}

#[test]
fn duckdb_only_constructs_are_refused_by_name() {
    let e = refused("[:find (pull ?i [:issue/title]) :where [?i :issue/priority 1]]", None);
    assert!(e.contains("spark") && e.contains("pull"), "{e}");
    let e = refused("[:find (max 2 ?p) :where [?i :issue/priority ?p]]", None);
    assert!(e.contains("max"), "{e}");
}

#[test]
fn duckdb_text_is_unchanged_by_the_dialect_parameter() {
    let q = "[:find ?state (count ?i) :where [?i :issue/state ?state]]";
    let a = sql(q, None, &QueryOptions::default());
    let b = sql(q, None, &QueryOptions { dialect: Dialect::DuckDb, ..Default::default() });
    assert_eq!(a, b);
    assert!(a.contains("\"mentat\".\"cur_103\""), "{a}");
}

#[test]
fn recursive_rules_become_stages() {
    let rules = "[[(reach ?a ?b) [?a :issue/assignee ?b]] [(reach ?a ?b) [?a :issue/assignee ?x] (reach ?x ?b)]]";
    let q = "[:find ?a ?b :in $ % :where (reach ?a ?b)]";
    let c = compile_with(q, Some(&format!("[{rules}]")), &spark()).expect("compiles");
    assert_eq!(c.stages.len(), 1, "{c:?}");
    let st = &c.stages[0];
    assert!(st.step.as_deref().is_some_and(|s| s.contains(&format!("JOIN {} AS", st.name))), "{st:?}");
    assert!(!st.base.contains("UNION") && !c.sql.contains("RECURSIVE"), "{c:?}");
    assert!(c.sql.contains(&format!("FROM {} AS rc", st.name)), "{}", c.sql);
    let plan = c.plan_json(Dialect::Spark);
    assert!(plan.starts_with("{\"format\": \"mentat-plan\", \"version\": 1, \"dialect\": \"spark\""), "{plan}");
    // the same query in DuckDB is one statement
    let d = compile_with(q, Some(&format!("[{rules}]")), &QueryOptions::default()).expect("compiles");
    assert!(d.stages.is_empty() && d.sql.contains("WITH RECURSIVE"), "{}", d.sql);
}
