//! The Spark SQL dialect: what the printer writes for Spark, and the constructs it refuses. The DuckDB
//! dialect's text is the snapshots' (unchanged by the dialect parameter).

use crate::layout::StoreName;
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
    let s = sql("[:find (sample 2 ?p) :where [?i :issue/priority ?p]]", None, &spark());
    assert!(s.contains("slice(shuffle(collect_set("), "{s}");
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
    // pull's JSON answers: unbounded recursion
    let e = refused("[:find (pull ?i [:issue/title {:issue/assignee ...}]) :where [?i :issue/priority 1]]", None);
    assert!(e.contains("spark") && e.contains("pull recursion ...") && e.contains("issue/assignee"), "{e}");
    let e = refused("[:find (max 2 ?p) :where [?i :issue/priority ?p]]", None);
    assert!(e.contains("max"), "{e}");
    let e = refused("[:find (rand 2 ?p) :where [?i :issue/priority ?p]]", None);
    assert!(e.contains("rand"), "{e}");
}

/// The Spark text of a pull: no DuckDB construct (struct literals, `UNION ALL BY NAME`, list slices, CTE hints,
/// double-quoted names) is left in it.
fn assert_spark_pull(s: &str) {
    for duck in ["BY NAME", "MATERIALIZED", "{'", "any_value", "ORDER BY o", ")[1:", "\"", "$1", "JSON"] {
        assert!(!s.contains(duck), "{duck} in {s}");
    }
}

#[test]
fn pull_in_find_is_spark_sql() {
    let q = "[:find ?i (pull ?i [:db/id :issue/title [:issue/label :limit 2] {:issue/assignee [:user/name]} \
             [:issue/priority :default 0] [:issue/state :as \"st\"]]) :where [?i :issue/priority 1]]";
    let c = compile_with(q, None, &spark()).expect("compiles");
    let s = &c.sql;
    assert_spark_pull(s);
    assert!(s.starts_with("WITH mentat_rows AS (\n"), "{s}");
    assert!(s.contains("p1.pull AS `pull_i`") && s.contains("m.`i` AS `i`"), "{s}");
    // STRUCTs by named_struct, the fields named as in DuckDB
    assert!(s.contains("named_struct('db/id', i.e, 'issue/title', g.c1, 'issue/label', slice(g.c2, 1, 2)"), "{s}");
    assert!(s.contains("'st', g.c5"), "{s}");
    // a LIST ordered by value: the (key, value) pairs sorted, NULL when none
    assert!(
        s.contains("CASE WHEN count(c2) = 0 THEN NULL ELSE transform(sort_array(collect_list(named_struct('o', o2, 'v', c2)) FILTER (WHERE c2 IS NOT NULL)), x -> x.v) END AS c2"),
        "{s}"
    );
    assert!(s.contains("first(c1, true) AS c1"), "{s}");
    assert!(s.contains("coalesce(g.c4, CAST(CAST(0 AS BIGINT) AS BIGINT))"), "{s}");
    // the branches of one level by position: each selects every column, NULL for the others'
    assert!(s.contains("SELECT d.e AS e, d.v AS c1, NULL AS c2, NULL AS o2, NULL AS c3, NULL AS c4, NULL AS c5 FROM pull_ids AS i JOIN `cur_102` AS d ON d.e = i.e"), "{s}");
    assert!(s.contains("\n    UNION ALL\n    "), "{s}");
    // the nested level reads the distinct refs of its parent
    assert!(s.contains("SELECT DISTINCT d.v AS e FROM pull_ids AS i JOIN `cur_105` AS d ON d.e = i.e"), "{s}");
    assert_eq!(
        c.columns[1].sql_type,
        "STRUCT(\"db/id\" BIGINT, \"issue/title\" VARCHAR, \"issue/label\" STRUCT(\"db/id\" BIGINT)[], \
         \"issue/assignee\" STRUCT(\"user/name\" VARCHAR), \"issue/priority\" BIGINT, \"st\" VARCHAR)"
    );
    // DuckDB's text of the same query is its own
    let d = compile_with(q, None, &QueryOptions::default()).expect("compiles");
    assert!(d.sql.contains("UNION ALL BY NAME") && d.sql.contains("AS MATERIALIZED"), "{}", d.sql);
}

#[test]
fn pull_reverse_recursion_wildcard_and_order_on_spark() {
    // reverse attributes, numeric recursion depth (typed STRUCTs, `{"db/id"}` at the last level)
    let q = "[:find (pull ?u [:user/name {:issue/_assignee [:issue/title]}]) :where [?u :user/email _]]";
    let s = sql(q, None, &spark());
    assert_spark_pull(&s);
    assert!(s.contains("JOIN `cur_105` AS d ON d.v = i.e"), "{s}");
    let q = "[:find (pull ?i [:issue/title {:issue/label 1}]) :where [?i :issue/priority 1]]";
    let s = sql(q, None, &spark());
    assert_spark_pull(&s);
    // `*`: every attribute of the schema without a probe; with one, the attributes held
    let q = "[:find ?i (pull ?i [*]) :where [?i :issue/priority 1] :order ?i :limit 3]";
    let c = compile_with(q, None, &spark()).expect("compiles");
    assert!(c.held_sql.is_some() && c.columns[1].sql_type.contains("\"db/ident\" VARCHAR"), "{c:?}");
    assert_spark_pull(&c.sql);
    assert!(c.sql.ends_with("ORDER BY m.`mentat_order_0` ASC NULLS LAST"), "{}", c.sql);
    let held = crate::compile_query_held(
        q,
        None,
        &crate::tests::schema(),
        &StoreName::parse("mentat").unwrap(),
        &spark(),
        Some(&[102, 104]),
    )
    .expect("compiles");
    assert_eq!(
        held.columns[1].sql_type,
        "STRUCT(\"db/id\" BIGINT, \"issue/title\" VARCHAR, \"issue/priority\" BIGINT)"
    );
    // a default of a ref, and of a cardinality-many attribute
    let q = "[:find (pull ?i [[:issue/assignee :default 200] [:issue/label :default [200]]]) :where [?i :issue/priority 1]]";
    let s = sql(q, None, &spark());
    assert!(s.contains("CAST(named_struct('db/id', 200) AS STRUCT<`db/id`: BIGINT>)"), "{s}");
    assert!(s.contains("CAST(array(named_struct('db/id', 200)) AS ARRAY<STRUCT<`db/id`: BIGINT>>)"), "{s}");
    // as of a tx: the datoms through the history views
    let opts = QueryOptions { as_of: Some(TimeBound::Tx((1 << 40) + 5)), ..spark() };
    let s = sql("[:find (pull ?i [:issue/title]) :where [?i :issue/priority 1]]", None, &opts);
    assert!(s.contains("`hist_102`") && !s.contains('"'), "{s}");
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

#[test]
fn order_of_a_distinct_select_names_its_outputs() {
    // Spark resolves the ORDER BY of a SELECT DISTINCT against its output names only
    let s =
        sql("[:find ?t ?p :where [?i :issue/title ?t] [?i :issue/priority ?p] :order (desc ?p) ?t]", None, &spark());
    assert!(s.starts_with("SELECT DISTINCT") && s.contains("ORDER BY `p` DESC NULLS LAST, `t` ASC NULLS LAST"), "{s}");
    let s = sql("[:find ?s :where [?i :issue/state ?s] :order ?s]", None, &spark());
    assert!(s.contains("ORDER BY named_struct('h', (instr(`s`, '/') > 1)"), "{s}");
    // without DISTINCT (an entity in the find) the columns themselves
    let s = sql("[:find ?i ?s :where [?i :issue/state ?s] :order ?s]", None, &spark());
    assert!(!s.contains("DISTINCT") && s.contains("ORDER BY named_struct('h', (instr(t0.v, '/') > 1)"), "{s}");
}
