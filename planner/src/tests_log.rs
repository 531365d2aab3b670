//! Compiler tests for `(pull ?e pattern)` find elements, the log functions `tx-ids`/`tx-data` and the `datoms`
//! index views, over the workload schema of [`crate::tests`].

use crate::datoms::{datoms_sql, Components, Index};
use crate::layout::StoreName;
use crate::tests::{compile, compile_with, err, schema};
use crate::types::Constant;
use crate::{FindKind, PlanError, QueryOptions, TimeBound};

fn show(q: &str, inputs: Option<&str>) -> String {
    let c = compile(q, inputs);
    let cols: Vec<String> = c.columns.iter().map(|c| format!("{} {}", c.name, c.sql_type)).collect();
    format!("{}\n-- {:?}: {}", c.sql, c.find, cols.join(", "))
}

#[test]
fn pull_in_relation_with_order_and_limit() {
    insta::assert_snapshot!(show(
        "[:find ?t (pull ?u [:user/name]) :where [?i :issue/title ?t] [?i :issue/assignee ?u] :order (desc ?t) :limit 5]",
        None
    ));
}

#[test]
fn pull_in_every_find_spec() {
    let ty = "STRUCT(\"user/name\" VARCHAR)";
    for (q, kind) in [
        ("[:find (pull ?u [:user/name]) . :where [?u :user/email _]]", FindKind::Scalar),
        ("[:find [(pull ?u [:user/name]) ...] :where [?u :user/email _]]", FindKind::Collection),
        ("[:find [?e (pull ?u [:user/name])] :where [?u :user/email ?e]]", FindKind::Tuple),
        ("[:find (pull ?u [:user/name]) (count ?i) :where [?i :issue/assignee ?u]]", FindKind::Relation),
    ] {
        let c = compile(q, None);
        assert_eq!(c.find, kind, "{q}");
        assert!(c.columns.iter().any(|col| col.name == "pull_u" && col.sql_type == ty), "{q}: {:?}", c.columns);
        assert!(c.sql.starts_with("WITH mentat_rows AS MATERIALIZED"), "{}", c.sql);
    }
    let c = compile("[:find (pull ?u [:user/name]) ?n :keys who n :where [?u :user/name ?n]]", None);
    assert_eq!(c.columns[0].name, "who");
    assert_eq!(c.columns[0].sql_type, ty);
    // `(pull $ ?e pattern)` is the same
    assert_eq!(
        compile("[:find (pull $ ?u [:user/name]) :where [?u :user/email _]]", None).sql,
        compile("[:find (pull ?u [:user/name]) :where [?u :user/email _]]", None).sql
    );
}

#[test]
fn pull_in_find_errors_and_time_travel() {
    assert!(matches!(
        err("[:find (pull ?t [:user/name]) :where [_ :issue/title ?t]]", None),
        PlanError::TypeMismatch { .. }
    ));
    assert!(matches!(err("[:find (pull ?u) :where [?u :user/email _]]", None), PlanError::Syntax { .. }));
    assert!(matches!(
        err("[:find (pull ?u [:x/y]) :where [?u :user/email _]]", None),
        PlanError::UnknownAttribute { .. }
    ));
    let hist = QueryOptions { history: true, ..Default::default() };
    assert!(matches!(
        compile_with("[:find (pull ?u [*]) :where [?u :user/email _]]", None, &hist),
        Err(PlanError::Unsupported { .. })
    ));
    let as_of = QueryOptions { as_of: Some(TimeBound::Tx((1 << 40) + 3)), ..Default::default() };
    let c = compile_with("[:find (pull ?u [*]) :where [?u :user/email _]]", None, &as_of).unwrap();
    assert!(c.sql.contains("\"hist_101\"") && c.sql.contains("retracted_tx"), "{}", c.sql);
}

#[test]
fn tx_ids_range() {
    insta::assert_snapshot!(show(
        "[:find ?tx :in $ ?a ?b :where [(tx-ids $ ?a ?b) [?tx ...]]]",
        Some("[1099511627780 1099511627790]")
    ));
    let c = compile(
        "[:find ?tx :in $ ?a ?b :where [(tx-ids $ ?a ?b) [?tx ...]]]",
        Some("[#inst \"2025-01-01T00:00:00Z\" #inst \"2025-02-01T00:00:00Z\"]"),
    );
    assert!(c.sql.contains(".v >= CAST('2025-01-01T00:00:00+00:00' AS TIMESTAMPTZ)"), "{}", c.sql);
    assert!(matches!(
        err("[:find ?tx :where [(tx-ids $ \"a\" \"b\") [?tx ...]]]", None),
        PlanError::TypeMismatch { .. }
    ));
    assert!(matches!(err("[:find ?tx :where [(tx-ids $ 1) [?tx ...]]]", None), PlanError::Syntax { .. }));
}

#[test]
fn tx_data_datoms() {
    let c = compile(
        "[:find ?e ?a ?v ?added :in $ ?tx :where [(tx-data $ ?tx) [[?e ?a ?v _ ?added]]]]",
        Some("[1099511627780]"),
    );
    assert_eq!(
        c.columns.iter().map(|c| c.sql_type.as_str()).collect::<Vec<_>>(),
        ["BIGINT", "BIGINT", "VARCHAR", "BOOLEAN"]
    );
    // every attribute: its current assertions, retracted assertions and retractions
    assert!(
        c.sql.contains("\"cur_108\"") && c.sql.contains("\"hist_9\"") && c.sql.contains("d.retracted_tx AS \"tx\"")
    );
    assert!(c.sql.contains(".tx = 1099511627780"), "{}", c.sql);
    assert!(matches!(err("[:find ?e :where [(tx-data $ 5) [?e ...]]]", None), PlanError::Syntax { .. }));
}

fn datoms(index: &str, c: Components, opts: &QueryOptions) -> Result<String, PlanError> {
    datoms_sql(Index::parse(index)?, &c, &schema(), &StoreName::parse("mentat").unwrap(), opts)
}

#[test]
fn datoms_indexes() {
    let now = QueryOptions::default();
    let kw = |s: &str| Some(Constant::String(s.into()));
    let sql = datoms("AVET", Components { a: kw(":user/email"), v: kw("a@b.c"), e: None }, &now).unwrap();
    assert!(sql.contains("\"cur_100\"") && !sql.contains("\"cur_101\"") && sql.contains("(d.v = 'a@b.c')"), "{sql}");
    assert!(sql.ends_with("ORDER BY u.aid, u.vn, u.vs, u.e, u.tx, u.added"), "{sql}");
    let sql = datoms("VAET", Components { v: Some(Constant::Long(65536)), ..Default::default() }, &now).unwrap();
    assert!(sql.contains("\"cur_105\"") && !sql.contains("\"cur_104\""), "{sql}");
    let sql = datoms("EAVT", Components { e: kw("[:user/email \"x\"]"), ..Default::default() }, &now).unwrap();
    assert!(sql.contains("\"cur_100\""), "{sql}");
    let hist = QueryOptions { history: true, ..Default::default() };
    assert!(datoms("aevt", Components { a: kw(":issue/state"), ..Default::default() }, &hist)
        .unwrap()
        .contains("d.added AS \"added\""));
    assert!(datoms("AVET", Components { e: Some(Constant::Long(1)), ..Default::default() }, &now).is_err());
    assert!(datoms("VAET", Components { v: Some(Constant::Long(1)), a: kw(":issue/priority"), e: None }, &now).is_err());
    assert!(datoms("AVET", Components { a: kw(":issue/priority"), v: kw("x"), e: None }, &now).is_err());
    assert!(datoms("XYZ", Components::default(), &now).is_err());
    assert!(datoms("EAVT", Components { a: kw(":no/such"), e: Some(Constant::Long(1)), v: None }, &now).is_err());
}
