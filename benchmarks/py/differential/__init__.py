"""Differential testing of mentat against DataScript (issue 17).

Random small databases (model.py: `:e/name` string identity, `:e/code` long unique value, two attributes of each
value type string, long, double, boolean, keyword, instant, uuid and ref, each cardinality one or many at random,
and a component ref; 12 to 30 entities, a few hundred datoms, built by a first transaction and then one to three
transactions of additions, retractions and cardinality-one replacements), random valid queries over them
(gen_query.py), random pull patterns (gen_pull.py) and random transaction sequences (gen_tx.py), each run by mentat
(the built extension in Python duckdb) and by DataScript 1.8.1 (npm, one long-running node process fed JSON lines,
ds_runner.js), and compared (harness.py):

- queries: DataScript always answers the relation form of the query; a relation must equal it as a set (and have
  no duplicate rows), a collection `[?x ...]` its first column as a set, a scalar `?x .` or tuple `[?x ?y]` must be
  one of its tuples (nothing when it is empty). Entity ids are mapped through `:e/name`; keywords, instants, uuids
  and doubles are normalized by the find element's type (doubles to 9 significant digits).
- pulls: `mentat_pull_many` against `pull_many` per entity, absent attributes dropped, cardinality-many values as
  multisets, refs as entity names.
- databases: both engines' datoms after the building transactions against a model computed by hand from Datomic's
  rules (cardinality-one replacement, retraction).
- transactions: each transaction must succeed in both or fail in both; after the sequence both hold the same datoms
  (entities named by `:e/name`, the unnamed ones only counted).

Run: `python -m benchmarks.py.differential --pairs N --seed S` from the repository root (or
`python benchmarks/py/differential/run.py ...`); `MENTAT_EXTENSION` names the extension file.
`python -m benchmarks.py.differential.minimize --seed S` shrinks query mismatches to minimal inputs.

Where DataScript departs from Datomic's documented semantics, the generator avoids the construct or the comparison
applies Datomic's rule:

1. Left-recursive and non-linear rules (`(r ?a ?m) [?m :x ?b]`, `(r ?a ?m) (r ?m ?b)`) never return in DataScript
   1.8.1 (100% CPU, no answer). Recursive rules are generated right-linear only; mentat's non-linear recursion is
   not covered here.
2. DataScript refuses a variable passed twice to one function call (`[(- ?x ?x) ?y]`: "Insufficient bindings");
   Datomic accepts it. Calls get distinct variables.
3. DataScript accepts `(not ...)` with variables bound nowhere outside it; Datomic requires every variable of a
   `not` to be bound (local ones need `not-join`), and mentat refuses such a query as Datomic does. `not` clauses are
   generated closed; local variables go in `not-join`.
4. DataScript does not unify a variable that occurs at both entity and value of one pattern (`[?e :a/ref ?e]`
   matches datoms whose value differs from their entity). Datomic unifies it (mentat does). Not generated.
5. DataScript's JS API has no value types: attributes are strings, keywords strings (":k/a"), instants numbers,
   uuids strings, numbers JS doubles. Values are chosen so that nothing is lost: longs small (|x| < 2^53), doubles
   binary fractions (exact sums), keywords alphanumeric (text order = Clojure's keyword order), uuids with a first
   hex digit below 8 in both halves (Java's signed order = text order); joins, predicates and aggregates only meet
   values of one type (DataScript has 1 = 1.0, Clojure does not). Bytes are not generated (Datomic compares byte
   arrays by identity; DataScript's JS API has no bytes).
6. `:default` of a cardinality-many attribute: DataScript gives the default value itself, mentat a one-element
   list (its column is a LIST). Datomic's documentation does not say; the comparison accepts either.
7. Recursion in pull (`{:ref ...}`, `{:ref n}`) is not compared: DataScript expands an entity again when it comes
   back through a cycle and drops a depth-limited level, mentat gives `{:db/id e}` there; Datomic documents neither
   edge. (Turn it on with PGen(features=None) to see the differences.)
8. A nested pull map in which the entity has none of the sub-pattern's attributes: DataScript drops it (and an
   entity left with nothing pulls as nil), mentat keeps an empty map or a list of them; Datomic's documentation does
   not say. Nested patterns always include `:db/id`, so no nested map is empty.
9. A `:db/retract` through a lookup ref that resolves to nothing is a no-op in DataScript, an error in Datomic
   (and mentat). Such forms are left out (the harness asks DataScript which names exist before each transaction).
10. `:db/retractEntity` (which retracts components recursively) together with other forms touching the same
    entities: DataScript applies forms in order, Datomic expands the retraction against the database before the
    transaction (a datom both added and retracted is `:db.error/datoms-conflict`; one added to a component stays).
    `:db/retractEntity` is generated in transactions of its own.
11. Moving a `:db.unique/value` between entities within one transaction (one loses it by cardinality-one
    replacement, the other gets it): Datomic and mentat check the transaction's result and accept; DataScript
    checks form by form and refuses depending on the order. At most one `:e/code` is set per transaction.
12. Find specs: DataScript always runs the relation form, so its own scalar/collection/tuple shapes (nil for an
    empty scalar, a set for a collection) are not compared; the comparison applies Datomic's rule to mentat's answer.
13. `:with` naming a variable that is also a find element or aggregated is refused by DataScript; not generated.
14. The pull attribute-with-options form is generated as Datomic's vector `[:attr :as "x" :limit 2 :default v]`
    only; mentat and DataScript also read the list form `(:attr :as "x")`.
15. A component pulled whole (`*`, or the component attribute named without a sub-pattern) whose entity is already a
    map above it in the answer, e.g. n1 :a/part n2, n2 :a/r n1, pattern `[{:a/part [:db/id * {:a/r [:db/id *]}]}]`
    from n1: DataScript counts n2 as seen because the sub-pattern it was reached by holds `*`, and gives
    `{:db/id n2}` inside n1's `*`; without the `*` in that sub-pattern it pulls n2 whole there. mentat always pulls
    n2 whole there (an explicit sub-pattern is a level of its own, computed once per entity, not per path; the
    walk of a component pulled whole stops only at its own cycles). Datomic documents neither. The comparison
    reads such a component, on both sides, as a stub of its entity (found by the 100,000-pull run of seed 600;
    tests/test_differential_regressions.py pins mentat's answer).
"""
