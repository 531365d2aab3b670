//! Compiler tests: SQL snapshots (insta) and errors, over the issue-tracker schema of the workload.

use crate::layout::{bootstrap_schema, StoreName};
use crate::schema::{Attribute, Schema, Unique, ValueType};
use crate::{compile_query, CompiledQuery, PlanError, QueryOptions, TimeBound};

/// The workload's schema (`shared/workload.md`) on top of the bootstrap attributes.
pub(crate) fn schema() -> Schema {
    let attr = |e, i: &str, t, many, unique: Option<Unique>| {
        let mut a = Attribute::new(e, i, t);
        a.many = many;
        a.unique = unique;
        a.index = unique.is_some();
        a
    };
    let mut s = bootstrap_schema()
        .with_attribute(attr(100, ":user/email", ValueType::String, false, Some(Unique::Identity)))
        .with_attribute(attr(101, ":user/name", ValueType::String, false, None))
        .with_attribute(attr(102, ":issue/title", ValueType::String, false, None))
        .with_attribute(attr(103, ":issue/state", ValueType::Keyword, false, None))
        .with_attribute(attr(104, ":issue/priority", ValueType::Long, false, None))
        .with_attribute(attr(105, ":issue/assignee", ValueType::Ref, false, None))
        .with_attribute(attr(106, ":issue/reporter", ValueType::Ref, false, None))
        .with_attribute(attr(107, ":issue/created-at", ValueType::Instant, false, None))
        .with_attribute(attr(108, ":issue/label", ValueType::Ref, true, None))
        .with_attribute(attr(109, ":label/name", ValueType::String, false, Some(Unique::Identity)));
    s.add_ident(":priority/high", 200);
    s
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

snap!(q1_point_lookup, "[:find ?e ?name :in $ ?email :where [?e :user/email ?email] [?e :user/name ?name]]", Some("[\"user1@example.com\"]"));
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
snap!(input_bindings, "[:find ?e ?name :in $ [?email ...] :where [?e :user/email ?email] [?e :user/name ?name]]", Some("[[\"a@x\" \"b@x\" \"a@x\"]]"));
snap!(since_scan, "[:find ?i :where [?i :issue/state _]]");
