"""The entity path (entity-shaped queries and flat pulls answered from the store's entity index) against the
general path (one SQL statement): the same random stores and transactions in two DuckDB instances, one loaded with
`MENTAT_ENTITY_PATH=0`, every answer compared; which shapes take the path (mentat_explain); reads after writes,
several stores, a reopened store and an attached Parquet store."""
import json
import random
import subprocess
import sys
import textwrap
import time

import duckdb
import pytest

from conftest import EXT, connect, connect_with, q, rows, transact

SCHEMA = ("[{:db/ident :p/email :db/valueType :db.type/string :db/cardinality :db.cardinality/one "
          ":db/unique :db.unique/identity}"
          " {:db/ident :p/name :db/valueType :db.type/string :db/cardinality :db.cardinality/one}"
          " {:db/ident :p/age :db/valueType :db.type/long :db/cardinality :db.cardinality/one :db/index true}"
          " {:db/ident :p/score :db/valueType :db.type/double :db/cardinality :db.cardinality/one}"
          " {:db/ident :p/active :db/valueType :db.type/boolean :db/cardinality :db.cardinality/one}"
          " {:db/ident :p/state :db/valueType :db.type/keyword :db/cardinality :db.cardinality/one :db/index true}"
          " {:db/ident :p/tag :db/valueType :db.type/string :db/cardinality :db.cardinality/many}"
          " {:db/ident :p/friend :db/valueType :db.type/ref :db/cardinality :db.cardinality/many}"
          " {:db/ident :p/boss :db/valueType :db.type/ref :db/cardinality :db.cardinality/one}"
          " {:db/ident :p/born :db/valueType :db.type/instant :db/cardinality :db.cardinality/one :db/index true}]")

STATES = [":s/a", ":s/b", ":s/c"]


def instance(path_on, path=":memory:"):
    """A fresh DuckDB instance with mentat loaded, the entity path on or off (read when mentat loads)."""
    return connect_with(path, MENTAT_ENTITY_PATH="1" if path_on else "0")


def person(rng, i):
    m = {":p/email": f'"p{i}@x"'}
    if rng.random() < 0.9:
        m[":p/name"] = f'"name {rng.randrange(20)}"'
    if rng.random() < 0.8:
        m[":p/age"] = str(rng.randrange(15, 40))
    if rng.random() < 0.7:
        m[":p/score"] = f"{rng.randrange(100) / 4}"
    if rng.random() < 0.7:
        m[":p/active"] = rng.choice(["true", "false"])
    if rng.random() < 0.8:
        m[":p/state"] = rng.choice(STATES)
    if rng.random() < 0.7:
        m[":p/born"] = f'#inst "{born(rng)}"'
    tags = rng.sample(["red", "green", "blue", "x\u0000y"], rng.randrange(4))
    if tags:
        m[":p/tag"] = "[" + " ".join(json.dumps(t) for t in tags) + "]"
    return "{" + " ".join(f"{k} {v}" for k, v in m.items()) + "}"


def born(rng):
    """An instant among 30, some with milliseconds."""
    return f"198{rng.randrange(10)}-0{1 + rng.randrange(3)}-01T10:00:00{rng.choice(['', '.250'])}Z"


def random_tx(rng, n):
    """A transaction of a few operations on persons p0..p(n-1): upserts by email, new values (cardinality-one
    replacement), retractions, refs by lookup ref, retractEntity."""
    ops = []
    for _ in range(rng.randrange(1, 6)):
        i = rng.randrange(n)
        ref = f'[:p/email "p{i}@x"]'
        r = rng.random()
        if r < 0.4:
            ops.append(person(rng, i))
        elif r < 0.55:
            ops.append(f'[:db/add {ref} :p/friend [:p/email "p{rng.randrange(n)}@x"]]')
        elif r < 0.65:
            ops.append(f'[:db/add {ref} :p/boss [:p/email "p{rng.randrange(n)}@x"]]')
        elif r < 0.8:
            ops.append(f'[:db/add {ref} :p/state {rng.choice(STATES)}]')
        elif r < 0.9:
            ops.append(f'[:db/retract {ref} :p/tag "red"]')
        else:
            ops.append(f"[:db/retractEntity {ref}]")
    return "[" + " ".join(ops) + "]"


def emails(r, n, k=6):
    return "[[" + " ".join(f'"p{r.randrange(n)}@x"' for _ in range(k)) + "]]"


RULES = ("[[(knows ?a ?b) [?a :p/friend ?b]] [(knows ?a ?b) [?b :p/friend ?a]] [(named ?e ?n) [?e :p/name ?n]] "
         "[(boss-name ?e ?n) [?e :p/boss ?b] [?b :p/name ?n]] [(boss-state ?e ?s) [?e :p/boss ?b] [?b :p/state ?s]] "
         "[(knows2 ?a ?c) (knows ?a ?b) [?b :p/friend ?c]]]")

QUERIES = [
    # (query, inputs(rng, n))
    ("[:find ?e ?name :in $ ?email :where [?e :p/email ?email] [?e :p/name ?name]]",
     lambda r, n: f'["p{r.randrange(n)}@x"]'),
    ("[:find ?e ?name :in $ [?email ...] :where [?e :p/email ?email] [?e :p/name ?name]]",
     lambda r, n: emails(r, n, 5)),
    ("[:find ?f ?fname ?age :in $ ?email :where [?e :p/email ?email] [?e :p/friend ?f] [?f :p/name ?fname] "
     "[?f :p/age ?age]]", lambda r, n: f'["p{r.randrange(n)}@x"]'),
    ("[:find ?e ?email :in $ ?boss :where [?b :p/email ?boss] [?e :p/boss ?b] [?e :p/email ?email]]",
     lambda r, n: f'["p{r.randrange(n)}@x"]'),
    ("[:find ?e ?s :in $ ?state :where [?e :p/state ?state] [?e :p/score ?s]]",
     lambda r, n: f"[{r.choice(STATES)}]"),
    ("[:find ?e ?t ?a :in $ ?age :where [?e :p/age ?age] [?e :p/tag ?t] [?e :p/active ?a]]",
     lambda r, n: f"[{r.randrange(15, 40)}]"),
    ("[:find [?t ...] :in $ ?email :where [?e :p/email ?email] [?e :p/tag ?t]]",
     lambda r, n: f'["p{r.randrange(n)}@x"]'),
    ("[:find ?name . :in $ ?email :where [?e :p/email ?email] [?e :p/name ?name]]",
     lambda r, n: f'["p{r.randrange(n)}@x"]'),
    ("[:find ?e ?name :in $ [[?email ?state]] :where [?e :p/email ?email] [?e :p/state ?state] [?e :p/name ?name]]",
     lambda r, n: "[[" + " ".join(f'["p{r.randrange(n)}@x" {r.choice(STATES)}]' for _ in range(4)) + "]]"),
    ("[:find ?e ?f :in $ ?email :where [?e :p/email ?email] [?e :p/friend ?f] [?f :p/friend ?e]]",
     lambda r, n: f'["p{r.randrange(n)}@x"]'),
    # comparison predicates (the entity path filters its rows with them since 2026-12-07): a long against a
    # constant, entities against each other, a double against an integer, text against an input
    ("[:find ?e ?a :in $ [?m ...] :where [?e :p/email ?m] [?e :p/age ?a] [(>= ?a 25)]]",
     lambda r, n: emails(r, n, 8)),
    ("[:find ?f :in $ ?email :where [?e :p/email ?email] [?e :p/friend ?f] [(!= ?f ?e)]]",
     lambda r, n: f'["p{r.randrange(n)}@x"]'),
    ("[:find ?e :in $ ?state :where [?e :p/state ?state] [?e :p/score ?s] [(< ?s 12)]]",
     lambda r, n: f"[{r.choice(STATES)}]"),
    ("[:find ?e ?n :in $ ?age ?lo :where [?e :p/age ?age] [?e :p/name ?n] [(> ?n ?lo)] [(not= ?n \"name 7\")]]",
     lambda r, n: f'[{r.randrange(15, 40)} "name {r.randrange(20)}"]'),
    ("[:find ?e ?a :in $ ?state :where [?e :p/state ?state] [?e :p/age ?a] [(< ?a 27.5)]]",
     lambda r, n: f"[{r.choice(STATES)}]"),
    ("[:find ?e :in $ [?lo ...] :where [?e :p/email \"p1@x\"] [?e :p/age ?a] [(<= ?lo ?a)]]",
     lambda r, n: f"[[{r.randrange(15, 40)} {r.randrange(15, 40)}]]"),
    # text tests of two strings (filters of the entity path since 2026-12-07): a prefix, a part of a cardinality-many
    # value, a suffix given as an input (the empty one too)
    ("[:find ?e ?nm :in $ [?m ...] :where [?e :p/email ?m] [?e :p/name ?nm] [(starts-with? ?nm \"name 1\")]]",
     lambda r, n: emails(r, n, 8)),
    ("[:find ?e ?t :in $ ?s :where [?e :p/state ?s] [?e :p/tag ?t] [(clojure.string/includes? ?t \"e\")]]",
     lambda r, n: f"[{r.choice(STATES)}]"),
    ("[:find ?e :in $ [?m ...] ?x :where [?e :p/email ?m] [?e :p/name ?nm] [(ends-with? ?nm ?x)]]",
     lambda r, n: f'[{emails(r, n, 8)[1:-1]} "{r.choice(["", "1", "7", "e"])}"]'),
    # aggregates (the entity path groups its rows since 2026-12-07): counts over the set of find tuples (a count of
    # ages counts distinct ages), min / max of numbers and text, grouped by keywords and tags, with a filter
    ("[:find ?s (count ?e) (count-distinct ?a) (max ?nm) (min ?sc) :in $ [?m ...] :where [?e :p/email ?m] "
     "[?e :p/state ?s] [?e :p/age ?a] [?e :p/name ?nm] [?e :p/score ?sc]]", lambda r, n: emails(r, n, 8)),
    # sum and avg of longs over the set of find tuples (two persons of one age and state count once)
    ("[:find ?s (sum ?a) (avg ?a) :in $ [?m ...] :where [?e :p/email ?m] [?e :p/state ?s] [?e :p/age ?a]]",
     lambda r, n: emails(r, n, 12)),
    ("[:find ?s (sum ?a) (count ?a) (avg ?a) :with ?e :in $ [?m ...] :where [?e :p/email ?m] [?e :p/state ?s] "
     "[?e :p/age ?a]]", lambda r, n: emails(r, n, 12)),
    ("[:find (count ?f) . :in $ ?email :where [?e :p/email ?email] [?e :p/friend ?f]]",
     lambda r, n: f'["p{r.randrange(n)}@x"]'),
    ("[:find ?t (count ?e) :in $ ?state :where [?e :p/state ?state] [?e :p/tag ?t]]",
     lambda r, n: f"[{r.choice(STATES)}]"),
    ("[:find (max ?a) (min ?a) (count ?a) :in $ ?state :where [?e :p/state ?state] [?e :p/age ?a]]",
     lambda r, n: f"[{r.choice(STATES)}]"),
    ("[:find ?e (count ?f) (max ?fa) :in $ [?m ...] :where [?e :p/email ?m] [?e :p/friend ?f] [?f :p/age ?fa] "
     "[(> ?fa 20)]]", lambda r, n: emails(r, n, 6)),
    # negation (the entity path probes it from each row since 2026-12-07): `not` on the query's variables, a
    # not-join with variables of its own and a filter, beside a cardinality-many value, under a count
    ("[:find ?e ?nm :in $ [?m ...] :where [?e :p/email ?m] [?e :p/name ?nm] (not [?e :p/state :s/a])]",
     lambda r, n: emails(r, n, 8)),
    ("[:find ?f :in $ ?email :where [?e :p/email ?email] [?e :p/friend ?f] (not [?f :p/friend ?e])]",
     lambda r, n: f'["p{r.randrange(n)}@x"]'),
    ("[:find ?e :in $ ?state :where [?e :p/state ?state] (not-join [?e] [?e :p/friend ?f] [?f :p/age ?a] "
     "[(< ?a 25)])]", lambda r, n: f"[{r.choice(STATES)}]"),
    ("[:find ?e ?t :in $ [?m ...] :where [?e :p/email ?m] [?e :p/tag ?t] (not-join [?e ?t] [?e :p/boss ?b] "
     "[?b :p/tag ?t])]", lambda r, n: emails(r, n, 8)),
    ("[:find (count ?e) . :in $ ?state :where [?e :p/state ?state] (not [?e :p/active true])]",
     lambda r, n: f"[{r.choice(STATES)}]"),
    # get-else and missing? (probed from each row since 2026-12-07): a default for a long, a string and a ref,
    # the entities without a boss
    ("[:find ?e ?a ?nm :in $ [?m ...] :where [?e :p/email ?m] [(get-else $ ?e :p/age -1) ?a] "
     "[(get-else $ ?e :p/name \"none\") ?nm]]", lambda r, n: emails(r, n, 8)),
    ("[:find ?f ?b :in $ ?email :where [?e :p/email ?email] [?e :p/friend ?f] [(get-else $ ?f :p/boss 0) ?b]]",
     lambda r, n: f'["p{r.randrange(n)}@x"]'),
    ("[:find ?e :in $ ?state :where [?e :p/state ?state] [(missing? $ ?e :p/boss)]]",
     lambda r, n: f"[{r.choice(STATES)}]"),
    # or / or-join (run from each row where every branch can be probed, since 2026-12-07): two states of one
    # attribute, an or that binds the entity the next step reads, an or-join with variables of its own and a
    # filter, an or under a count
    ("[:find ?e ?nm :in $ [?m ...] :where [?e :p/email ?m] [?e :p/name ?nm] (or [?e :p/state :s/a] "
     "[?e :p/state :s/b])]", lambda r, n: emails(r, n, 8)),
    ("[:find ?x ?nm :in $ ?email :where [?e :p/email ?email] (or [?x :p/friend ?e] [?x :p/boss ?e]) "
     "[?x :p/name ?nm]]", lambda r, n: f'["p{r.randrange(n)}@x"]'),
    ("[:find ?e :in $ ?state :where [?e :p/state ?state] (or-join [?e] (and [?e :p/friend ?f] [?f :p/age ?a] "
     "[(< ?a 25)]) (and [?e :p/tag ?t] [(= ?t \"red\")]))]", lambda r, n: f"[{r.choice(STATES)}]"),
    ("[:find (count ?x) . :in $ ?email :where [?e :p/email ?email] (or-join [?x ?e] [?x :p/friend ?e] "
     "[?e :p/friend ?x])]", lambda r, n: f'["p{r.randrange(n)}@x"]'),
    # an entity given as a lookup ref (resolved by an AVET probe on the entity path since 2026-12-07), some of
    # persons that do not exist; in a value position too, two in one query, beside a pull
    ("[:find ?n ?fn :in $ ?e :where [?e :p/name ?n] [?e :p/friend ?f] [?f :p/name ?fn]]",
     lambda r, n: f'[[:p/email "p{r.randrange(n + 5)}@x"]]'),
    ("[:find ?x ?m :in $ ?b :where [?x :p/boss ?b] [?x :p/email ?m]]",
     lambda r, n: f'[[:p/email "p{r.randrange(n + 5)}@x"]]'),
    ("[:find ?e ?x :in $ ?e ?b :where [?x :p/friend ?e] [?x :p/boss ?b]]",
     lambda r, n: f'[[:p/email "p{r.randrange(n + 5)}@x"] [:p/email "p{r.randrange(n)}@x"]]'),
    # a collection of lookup refs (an AVET probe each on the entity path since 2026-12-07, second session), some of
    # persons that do not exist and some repeated; under a count, which counts each boss's reports once
    ("[:find ?n ?fn :in $ [?e ...] :where [?e :p/name ?n] [?e :p/friend ?f] [?f :p/name ?fn]]",
     lambda r, n: "[[" + " ".join(f'[:p/email "p{r.randrange(n + 5)}@x"]' for _ in range(6)) + "]]"),
    ("[:find (count ?x) . :in $ [?b ...] :where [?x :p/boss ?b]]",
     lambda r, n: "[[" + " ".join(f'[:p/email "p{r.randrange(n + 5)}@x"]' for _ in range(6)) + "]]"),
    # a pull of an entity only the input gives (an entid, some that no entity holds)
    ("[:find (pull ?e [:p/name :p/age {:p/friend [:p/email]}]) :in $ ?e]",
     lambda r, n: f"[{r.randrange(65536, 65536 + n + 5)}]"),
    ("[:find (pull ?e [*]) . :in $ ?e]", lambda r, n: f"[{r.randrange(65536, 65536 + n + 5)}]"),
    ("[:find ?e (pull ?e [:p/name :p/age]) :in $ ?e :where [?e :p/state _]]",
     lambda r, n: f'[[:p/email "p{r.randrange(n + 5)}@x"]]'),
    # instants (compared, given, ordered and aggregated on the entity path since 2026-12-07): a constant, an
    # input, a value probed by its index, the earliest and latest by state
    ("[:find ?e ?b :in $ [?m ...] :where [?e :p/email ?m] [?e :p/born ?b] [(> ?b #inst \"1984-06-01T00:00:00Z\")]]",
     lambda r, n: emails(r, n, 8)),
    ("[:find ?e :in $ ?s ?t :where [?e :p/state ?s] [?e :p/born ?b] [(<= ?b ?t)]]",
     lambda r, n: f'[{r.choice(STATES)} #inst "{born(r)}"]'),
    ("[:find ?e ?m :in $ ?b :where [?e :p/born ?b] [?e :p/email ?m]]", lambda r, n: f'[#inst "{born(r)}"]'),
    ("[:find ?s (min ?b) (max ?b) :in $ [?m ...] :where [?e :p/email ?m] [?e :p/state ?s] [?e :p/born ?b]]",
     lambda r, n: emails(r, n, 12)),
    # non-recursive rules (inlined into the clauses they stand for on the entity path since 2026-12-07): a rule of
    # two bodies (an or-join), one of one body with a variable of its own, a constant argument, a call under `not`
    # and under `or`, a rule calling a rule, under a count
    ("[:find ?x ?nm :in $ % ?m :where [?e :p/email ?m] (knows ?e ?x) (named ?x ?nm)]",
     lambda r, n: f'[{RULES} "p{r.randrange(n)}@x"]'),
    ("[:find ?e ?bn :in $ % [?m ...] :where [?e :p/email ?m] (boss-name ?e ?bn)]",
     lambda r, n: f'[{RULES} {emails(r, n, 6)[1:-1]}]'),
    ("[:find ?e :in $ % ?s :where [?e :p/state ?s] (not (boss-state ?e :s/a))]",
     lambda r, n: f"[{RULES} {r.choice(STATES)}]"),
    ("[:find ?x :in $ % ?m :where [?e :p/email ?m] (or (boss-name ?e ?x) (named ?e ?x))]",
     lambda r, n: f'[{RULES} "p{r.randrange(n)}@x"]'),
    ("[:find (count ?y) . :in $ % ?m :where [?e :p/email ?m] (knows2 ?e ?y)]",
     lambda r, n: f'[{RULES} "p{r.randrange(n)}@x"]'),
    # pull find elements (the entity path pulls them since 2026-12-05): `*` typed over the whole answer, a scalar
    # find choosing the first row in the order of its columns
    ("[:find (pull ?e [*]) :in $ ?email :where [?e :p/email ?email]]", lambda r, n: f'["p{r.randrange(n)}@x"]'),
    ("[:find ?e (pull ?f [:p/name {:p/boss [:p/email]}]) :in $ ?email :where [?e :p/email ?email] [?e :p/friend ?f]]",
     lambda r, n: f'["p{r.randrange(n)}@x"]'),
    ("[:find (pull ?e [* {:p/friend [*]}]) . :in $ ?state :where [?e :p/state ?state]]",
     lambda r, n: f"[{r.choice(STATES)}]"),
    ("[:find [(pull ?e [:p/email :p/_boss]) ...] :in $ ?age :where [?e :p/age ?age]]",
     lambda r, n: f"[{r.randrange(15, 40)}]"),
    ("[:find ?s (pull ?e [:db/id :p/tag]) :in $ [?m ...] :where [?e :p/email ?m] [?e :p/score ?s]]",
     lambda r, n: emails(r, n, 4)),
    ("[:find (pull ?e [:p/email {:p/friend [*]}]) (pull ?b [*]) :in $ ?m :where [?e :p/email ?m] [?e :p/boss ?b]]",
     lambda r, n: f'["p{r.randrange(n)}@x"]'),
]

# queries with :order (the entity path sorts their rows since 2026-12-07), each ordered down to a unique key so
# that one order is right and the two paths' lists must be equal; :offset and :limit after the order
ORDERED = [
    ("[:find ?f ?fname ?age :in $ ?email :where [?e :p/email ?email] [?e :p/friend ?f] [?f :p/name ?fname] "
     "[?f :p/age ?age] :order (desc ?age) ?fname ?f]", lambda r, n: f'["p{r.randrange(n)}@x"]'),
    ("[:find ?s (count ?e) :in $ [?m ...] :where [?e :p/email ?m] [?e :p/state ?s] :order (desc ?s)]",
     lambda r, n: emails(r, n, 8)),
    ("[:find ?e ?s :in $ ?state :where [?e :p/state ?state] [?e :p/score ?s] :order (desc ?s) ?e :limit 3]",
     lambda r, n: f"[{r.choice(STATES)}]"),
    # text by its bytes (one tag holds a NUL)
    ("[:find ?m ?t :in $ [?m ...] :where [?e :p/email ?m] [?e :p/tag ?t] :order (desc ?t) ?m]", emails),
    ("[:find ?name . :in $ [?m ...] :where [?e :p/email ?m] [?e :p/name ?name] :order (desc ?name)]", emails),
    ("[:find ?m ?a :in $ ?age :where [?e :p/age ?age] [?e :p/email ?m] [?e :p/active ?a] "
     ":order ?a (desc ?m) :offset 1 :limit 2]", lambda r, n: f"[{r.randrange(15, 40)}]"),
    ("[:find ?st ?m :in $ [?m ...] :where [?e :p/email ?m] [?e :p/state ?st] :order (desc ?st) ?m]", emails),
    ("[:find ?m (pull ?e [:p/name]) :in $ [?m ...] :where [?e :p/email ?m] :order (desc ?m) :limit 2]", emails),
    ("[:find ?m ?b :in $ [?m ...] :where [?e :p/email ?m] [?e :p/born ?b] :order (desc ?b) ?m]", emails),
]

# queries of a `since` database whose first pattern nothing binds: the entity path reads the attribute's datoms
# asserted after the tx from its tx order (since 2026-12-05), with and without the projections and `_`s that can
# repeat a row (the answer is a set)
SINCE_QUERIES = [
    ("[:find ?e :where [?e :p/state _]]", None),
    ("[:find ?e ?s :where [?e :p/state ?s]]", None),
    ("[:find ?s :where [?e :p/state ?s]]", None),
    ("[:find ?e ?t :where [?e :p/tag ?t]]", None),
    ("[:find ?e :where [?e :p/tag _]]", None),
    ("[:find ?b :where [_ :p/boss ?b]]", None),
    ("[:find ?e :where [?e :p/email _]]", None),
    ("[:find ?e ?n :where [?e :p/state :s/a] [?e :p/name ?n]]", None),
    ("[:find ?e ?n :where [?e :p/friend ?f] [?f :p/name ?n]]", None),
    ("[:find ?e ?a :in $ ?s :where [?e :p/state ?s] [?e :p/age ?a]]", lambda r, n: f"[{r.choice(STATES)}]"),
    ("[:find ?e ?t :in $ [?t ...] :where [?e :p/tag ?t] [?e :p/active true]]",
     lambda r, n: '[["red" "blue" "red"]]'),
    # the shapes of 2026-12-07 over the datoms since a tx: aggregates, a negation, alternatives, get-else
    ("[:find ?s (count ?e) (max ?a) :where [?e :p/state ?s] [?e :p/age ?a]]", None),
    ("[:find ?e :where [?e :p/name _] (not [?e :p/state :s/a])]", None),
    ("[:find ?e ?x :where [?e :p/name _] (or-join [?e ?x] [?e :p/friend ?x] [?e :p/boss ?x])]", None),
    ("[:find ?e ?a :where [?e :p/state _] [(get-else $ ?e :p/age 0) ?a]]", None),
]

PULLS = ["[*]", "[:p/name :p/tag]", "[:db/id [:p/state :default :s/none]]", "[[:p/tag :limit 2] :p/friend :p/boss]",
         "[:p/age :p/score :p/active]",
         # nested patterns and reverse refs (the entity path pulls them since 2026-12-05)
         "[:p/name {:p/friend [:p/name :p/age :p/tag]}]", "[{:p/boss [:db/id :p/email {:p/boss [:p/email]}]}]",
         "[:p/email :p/_boss {:p/_friend [:p/email]}]", "[* {:p/friend [:p/name]}]",
         "[{[:p/friend :limit 2] [:p/state]} [:p/_friend :limit 1]]", "[{:p/boss [[:p/state :default :s/none]]}]",
         "[{:p/friend [:p/score]} {:p/_boss [:p/active]}]",
         # nested `*`: typed from what the entities of every `*` level hold, one set for all the levels
         "[{:p/boss [*]}]", "[* {:p/friend [*]}]", "[:p/name {[:p/friend :limit 1] [* {:p/boss [:p/email]}]}]",
         "[{:p/_boss [*]}]", "[{:p/boss [:db/id]} {:p/_friend [* :p/age]}]"]


def normal(rows_):
    return sorted(rows_, key=repr)


def test_parity_with_the_general_path_on_random_stores():
    rng = random.Random(20261130)
    on, off = instance(True), instance(False)
    n = 40
    for con in (on, off):
        transact(con, SCHEMA)
    checked = answered = answered_since = 0
    txs = []
    for step in range(60):
        edn = random_tx(rng, n) if step else "[" + " ".join(person(rng, i) for i in range(n)) + "]"
        outcomes = []
        for con in (on, off):
            try:
                txs.append(transact(con, edn)["tx"])
                outcomes.append("ok")
            except duckdb.Error as e:  # a lookup ref to a retracted person: refused, nothing written
                outcomes.append(str(e))
        assert outcomes[0] == outcomes[1]
        for query, inputs in QUERIES:
            ins = inputs(rng, n)
            assert normal(q(on, query, ins)) == normal(q(off, query, ins)), (step, query, ins)
            checked += 1
            plan = rows(on, "SELECT * FROM mentat_explain(?, inputs := ?)", [query, ins])
            answered += plan[0][0] == "entity_path"
            # as of an earlier transaction: the index's history against the general path's hist_ tables
            t = rng.choice(txs)
            assert normal(q(on, query, ins, as_of=t)) == normal(q(off, query, ins, as_of=t)), (step, query, ins, t)
            checked += 1
            # since an earlier transaction: the index's tx order and novelty against the general path's `tx >`
            t = rng.choice(txs)
            assert normal(q(on, query, ins, since=t)) == normal(q(off, query, ins, since=t)), (step, query, ins, t)
            checked += 1
        for query, inputs in ORDERED:
            ins = inputs(rng, n)
            assert q(on, query, ins) == q(off, query, ins), (step, query, ins)
            t = rng.choice(txs)
            assert q(on, query, ins, as_of=t) == q(off, query, ins, as_of=t), (step, query, ins, t)
            checked += 2
            plan = rows(on, "SELECT * FROM mentat_explain(?, inputs := ?)", [query, ins])
            answered += plan[0][0] == "entity_path"
        for query, inputs in SINCE_QUERIES:
            ins = inputs(rng, n) if inputs else None
            t = rng.choice(txs[-8:] + txs[:1])
            got = q(on, query, ins, since=t)
            assert normal(got) == normal(q(off, query, ins, since=t)), (step, query, ins, t)
            assert len(set(got)) == len(got), (step, query, ins, t)
            checked += 1
            plan = rows(on, "SELECT * FROM mentat_explain(?, inputs := ?, since := ?)", [query, ins or "[]", t])
            answered_since += plan[0][0] == "entity_path"
        ids = [r[0] for r in q(on, "[:find ?e :where [?e :p/email _]]")] + [123456]
        for pattern in PULLS:
            e = rng.choice(ids)
            one = "SELECT e, pull FROM mentat_pull(?, ?)"
            assert rows(on, one, [pattern, e]) == rows(off, one, [pattern, e]), (step, pattern, e)
            many = "SELECT e, pull FROM mentat_pull_many(?, ?)"
            sample = rng.sample(ids, min(5, len(ids))) + [None]
            assert rows(on, many, [pattern, sample]) == rows(off, many, [pattern, sample]), (step, pattern)
            # lookup refs (resolved by the index on the entity path), some of persons that do not exist
            ref = f'[:p/email "p{rng.randrange(n + 5)}@x"]'
            assert rows(on, one, [pattern, ref]) == rows(off, one, [pattern, ref]), (step, pattern, ref)
            refs = [f'[:p/email "p{rng.randrange(n + 5)}@x"]' for _ in range(4)] + [None, ":p/name"]
            assert rows(on, many, [pattern, refs]) == rows(off, many, [pattern, refs]), (step, pattern, refs)
            checked += 4
    assert checked > 1000 and answered == 60 * (len(QUERIES) + len(ORDERED))
    assert answered_since == 60 * len(SINCE_QUERIES)


def test_the_path_is_taken_for_its_shapes_only(tmp_path):
    con = instance(True)
    transact(con, SCHEMA)
    transact(con, '[{:p/email "a@x" :p/name "A" :p/age 30}]')

    def path(query, inputs=None, **named):
        sql = "SELECT explain_key FROM mentat_explain(?" + (", inputs := ?" if inputs else "") + \
              "".join(f", {k} := ?" for k in named) + ")"
        params = [query] + ([inputs] if inputs else []) + list(named.values())
        return rows(con, sql, params)[0][0] == "entity_path"

    assert path("[:find ?e ?n :in $ ?m :where [?e :p/email ?m] [?e :p/name ?n]]", '["a@x"]')
    assert path("[:find ?e :in $ [?m ...] :where [?e :p/email ?m]]", '[["a@x"]]')
    assert path("[:find ?n :where [?e :p/email \"a@x\"] [?e :p/name ?n]]")
    # a scan: the general path
    assert not path("[:find ?e :where [?e :p/name _]]")
    # a comparison of two numbers or two strings and a text test of two strings are filters of the entity path;
    # other predicates are not
    assert path("[:find ?e :where [?e :p/email \"a@x\"] [?e :p/age ?a] [(> ?a 3)]]")
    assert path("[:find ?e :where [?e :p/email \"a@x\"] [?e :p/name ?n] [(starts-with? ?n \"A\")]]")
    assert not path("[:find ?e :where [?e :p/email \"a@x\"] [?e :p/name ?n] [(like ?n \"A%\")]]")
    # a long beside a double constant is compared as a double, as DuckDB casts the BIGINT
    assert path("[:find ?e :where [?e :p/email \"a@x\"] [?e :p/age ?a] [(> ?a 29.5)]]")
    # a NUL byte in a filter's constant: mentat_explain shows it escaped, mentat_sql's comment too, and the answer
    # finds the value that holds one
    nul = "[:find ?t :where [?e :p/email \"a@x\"] [?e :p/tag ?t] [(includes? ?t \"\\u0000\")]]"
    transact(con, '[{:p/email "a@x" :p/tag ["x\\u0000y" "z"]}]')
    assert path(nul) and "\\u0000" in rows(con, "SELECT explain_value FROM mentat_explain(?)", [nul])[0][0]
    assert rows(con, "SELECT * FROM mentat_q(?)", [nul]) == [("x\x00y",)]
    assert rows(con, "FROM query(mentat_sql(?))", [nul]) == [("x\x00y",)]
    assert not path("[:find ?e :where [?e :p/email \"a@x\"] [?e :p/state ?s] [(< ?s :s/b)]]")
    # instants compare with instants (a constant, an input), as microseconds
    assert path("[:find ?e :where [?e :p/email \"a@x\"] [?e :p/born ?b] [(< ?b #inst \"2000-01-01T00:00:00Z\")]]")
    assert path("[:find ?e :in $ ?t :where [?e :p/born ?t]]", '[#inst "2000-01-01T00:00:00Z"]')
    # count, count-distinct, min, max, and sum and avg of longs group the entity path's rows, :with beside them; a
    # sum of doubles, :with without an aggregate: the general path
    assert path("[:find (count ?e) :in $ ?m :where [?e :p/email ?m]]", '["a@x"]')
    assert path("[:find ?n (count-distinct ?a) (max ?a) :in $ ?m :where [?e :p/email ?m] [?e :p/name ?n] "
                "[?e :p/age ?a]]", '["a@x"]')
    assert path("[:find (sum ?a) (avg ?a) :in $ ?m :where [?e :p/email ?m] [?e :p/age ?a]]", '["a@x"]')
    assert not path("[:find (sum ?s) :in $ ?m :where [?e :p/email ?m] [?e :p/score ?s]]", '["a@x"]')
    assert path("[:find (count ?a) :with ?e :in $ ?m :where [?e :p/email ?m] [?e :p/age ?a]]", '["a@x"]')
    assert not path("[:find ?a :with ?e :in $ ?m :where [?e :p/email ?m] [?e :p/age ?a]]", '["a@x"]')
    # negation probed from each row; a negation that would scan: the general path
    assert path("[:find ?e :where [?e :p/email \"a@x\"] (not [?e :p/age 3])]")
    assert not path("[:find ?e :where [?e :p/email \"a@x\"] (not-join [?e] [?x :p/name \"A\"])]")
    assert path("[:find ?n :where [?e :p/email \"a@x\"] [(get-else $ ?e :p/name \"-\") ?n]]")
    assert path("[:find ?e :where [?e :p/email \"a@x\"] [(missing? $ ?e :p/boss)]]")
    assert path("[:find ?e :where [?e :p/email \"a@x\"] (or [?e :p/age 3] [?e :p/name \"A\"])]")
    assert not path("[:find ?e :where (or [?e :p/age 3] [?e :p/name \"A\"])]")  # :p/name has no value index
    # :order on find variables, with :offset / :limit numbers after it; a limit without an order, one given as an
    # input, or an order on a pulled entity: the general path
    assert path("[:find ?e ?n :in $ [?m ...] :where [?e :p/email ?m] [?e :p/name ?n] :order (desc ?n) :limit 1]",
                '[["a@x"]]')
    assert not path("[:find ?e ?n :in $ [?m ...] :where [?e :p/email ?m] [?e :p/name ?n] :limit 1]", '[["a@x"]]')
    assert not path("[:find ?e ?n :in $ [?m ...] ?k :where [?e :p/email ?m] [?e :p/name ?n] :order ?n :limit ?k]",
                    '[["a@x"] 1]')
    assert not path("[:find (pull ?e [:p/name]) :in $ [?m ...] :where [?e :p/email ?m] :order ?e]", '[["a@x"]]')
    # a non-recursive rule is inlined; a recursive one is the general path's recursive CTE
    rules = "[[(r ?a ?b) [?a :p/boss ?b]] [(t ?a ?b) [?a :p/boss ?b]] [(t ?a ?c) [?a :p/boss ?b] (t ?b ?c)]]"
    assert path("[:find ?b :in $ % ?m :where [?e :p/email ?m] (r ?e ?b)]", f'[{rules} "a@x"]')
    assert not path("[:find ?b :in $ % ?m :where [?e :p/email ?m] (t ?e ?b)]", f'[{rules} "a@x"]')
    # an entity given as a lookup ref on a unique attribute: an AVET probe first
    assert path("[:find ?n :in $ ?e :where [?e :p/name ?n]]", '[[:p/email "a@x"]]')
    assert path("[:find ?n :in $ ?e :where [?e :p/name ?n]]", '[[:p/email "nobody@x"]]')
    # a collection of lookup refs of one attribute too; beside an entid, the general path
    assert path("[:find ?n :in $ [?e ...] :where [?e :p/name ?n]]", '[[[:p/email "a@x"] [:p/email "b@x"]]]')
    assert not path("[:find ?n :in $ [?e ...] :where [?e :p/name ?n]]", '[[[:p/email "a@x"] 65536]]')
    # a pull of an entity given as an entid; given as a lookup ref with no pattern, or read only by a get-else, the
    # general path (which pulls NULL, or takes the default, for a lookup ref that finds no entity)
    assert path("[:find (pull ?e [:p/name]) :in $ ?e]", "[65536]")
    assert not path("[:find (pull ?e [:p/name]) :in $ ?e]", '[[:p/email "a@x"]]')
    assert not path("[:find ?a :in $ ?e :where [(get-else $ ?e :p/age 0) ?a]]", '[[:p/email "a@x"]]')
    assert path("[:find ?e :in $ ?m :where [?e :p/email ?m]]", '["a@x"]', as_of=2**40 + 1)
    # an instant is resolved to the tx it names before planning (query.rs read_schema_at), so it is served too
    assert path("[:find ?e :in $ ?m :where [?e :p/email ?m]]", '["a@x"]', as_of="2025-01-01 00:00:00")
    # since a tx entid: probes keep to the datoms asserted after it, and a pattern nothing binds reads them from
    # the attribute's tx order (an instant is resolved to a tx first, as for as-of); with as-of too: the general path
    assert path("[:find ?e :in $ ?m :where [?e :p/email ?m]]", '["a@x"]', since=2**40 + 1)
    assert path("[:find ?e ?n :where [?e :p/name ?n]]", since=2**40 + 1)
    assert path("[:find ?e ?n :where [?e :p/name ?n]]", since="2025-01-01 00:00:00")
    assert not path("[:find ?e ?n :where [?e :p/name ?n]]", since=2**40 + 1, as_of=2**40 + 2)
    assert not path("[:find ?e :in $ ?n :where [?e :p/name ?n]]", '["A"]')  # :p/name has no value index
    # mentat_sql gives the general path's statement, saying in a comment that mentat_q takes the entity path
    sql = rows(con, "SELECT mentat_sql('[:find ?n :in $ ?m :where [?e :p/email ?m] [?e :p/name ?n]]', '[\"a@x\"]')")
    assert sql[0][0].startswith("/* mentat_q: entity index:") and "AVET [?e :p/email ?m]" in sql[0][0]
    assert rows(con, f"FROM query('{sql[0][0].replace(chr(39), chr(39) * 2)}')") == [("A",)]
    assert not rows(con, "SELECT mentat_sql('[:find ?e :where [?e :p/name _]]')")[0][0].startswith("/*")


def test_a_wildcard_pull_takes_the_entity_path_beside_tuple_schema_attributes():
    """`[*]` of an ordinary entity is answered by the index (which then holds its attributes) although the schema
    has the bootstrap tuple attributes, which the index cannot hold; `[*]` of a tuple attribute itself, which holds
    them, is pulled by the general path and shows them."""
    con = instance(True)
    transact(con, SCHEMA)
    e = transact(con, '[{:db/id "a" :p/email "a@x" :p/name "A"}]')["tempids"]["a"]
    got = rows(con, "SELECT pull FROM mentat_pull('[*]', ?)", [e])[0][0]
    assert got["p/email"] == "a@x" and got["p/name"] == "A"
    indexed = {r[0] for r in rows(con, "SELECT ident FROM mentat_entity_index() WHERE state = 'indexed'")}
    assert {":p/email", ":p/name"} <= indexed
    transact(con, "[{:db/ident :p/pair :db/valueType :db.type/tuple :db/tupleAttrs [:p/email :p/name]"
                  "  :db/cardinality :db.cardinality/one}]")
    pair = rows(con, "SELECT pull FROM mentat_pull('[*]', ':p/pair')")[0][0]
    ids = dict(rows(con, "SELECT ident, entid FROM mentat_schema()"))
    assert pair["db/tupleAttrs"] == [ids[":p/email"], ids[":p/name"]]
    # only a tuple attribute may hold the tuple schema attributes
    with pytest.raises(duckdb.Error, match="describe a :db.type/tuple attribute"):
        transact(con, f"[[:db/add {e} :db/tupleType :db.type/long]]")


def test_nested_and_reverse_pulls_take_the_entity_path(tmp_path):
    """A pull that follows refs (a nested pattern, a reverse attribute, both at once) is answered from the index,
    which reads the attributes it names (a store opened again holds none before); the answer is the one worked
    out by hand from the datoms, Datomic's shape: nested maps, reverse refs as lists of {"db/id"} ordered by
    entity, a ref whose entity has none of the nested attributes left out of a list."""
    path = tmp_path / "nested.duckdb"
    con = instance(True, path)
    transact(con, SCHEMA)
    t = transact(con, '[{:db/id "a" :p/email "a@x" :p/age 30 :p/tag ["x" "y"]} {:db/id "c" :p/email "c@x"}'
                      ' {:db/id "b" :p/email "b@x" :p/boss "a" :p/friend ["a" "c"]}'
                      ' {:db/id "d" :p/email "d@x" :p/boss "a"}]')["tempids"]
    con.close()
    con = instance(True, path)
    a, b, c, d = (t[k] for k in "abcd")
    pattern = "[:p/email {:p/boss [:p/age :p/tag]} {:p/friend [:p/age]} :p/_boss {:p/_friend [:p/email]}]"
    pull = lambda e: rows(con, "SELECT pull FROM mentat_pull(?, ?)", [pattern, e])[0][0]
    assert pull(b) == {"p/email": "b@x", "p/boss": {"p/age": 30, "p/tag": ["x", "y"]}, "p/friend": [{"p/age": 30}],
                       "p/_boss": None, "p/_friend": None}
    assert pull(a) == {"p/email": "a@x", "p/boss": None, "p/friend": None,
                       "p/_boss": [{"db/id": min(b, d)}, {"db/id": max(b, d)}], "p/_friend": [{"p/email": "b@x"}]}
    indexed = {r[0] for r in rows(con, "SELECT ident FROM mentat_entity_index() WHERE state = 'indexed'")}
    assert indexed == {":p/email", ":p/boss", ":p/age", ":p/tag", ":p/friend"}, indexed
    # a lookup ref is resolved by the index: the same pull, and a NULL row for a value no entity holds
    assert pull('[:p/email "b@x"]') == pull(b)
    assert rows(con, "SELECT e, pull FROM mentat_pull_many('[:p/age]', ?)", [['[:p/email "a@x"]', '[:p/email "z@x"]']]) \
        == [(a, {"p/age": 30}), (None, None)]
    # a nested `*` is typed from what the entities it reaches hold (and a `*` of the top level from what the
    # pulled entities hold: one set for both levels)
    got = rows(con, "SELECT pull FROM mentat_pull('[* {:p/boss [*]}]', ?)", [d])[0][0]
    assert got == {"db/id": d, "p/email": "d@x", "p/age": None, "p/tag": None,
                   "p/boss": {"db/id": a, "p/email": "a@x", "p/age": 30, "p/tag": ["x", "y"], "p/boss": None}}


def test_the_index_reports_what_it_holds(con):
    transact(con, SCHEMA)
    transact(con, '[{:p/email "a@x" :p/name "A" :p/tag ["x" "y"]} {:p/email "b@x" :p/name "B"}]')
    # a small write asks for the attributes it wrote (so that the next writes on them go to the log): each is being
    # read in the background, or read already
    got = dict(rows(con, "SELECT ident, state FROM mentat_entity_index()"))
    assert set(got) == {":p/email", ":p/name", ":p/tag"} and set(got.values()) <= {"reading", "indexed"}, got
    q(con, "[:find ?t :in $ ?m :where [?e :p/email ?m] [?e :p/tag ?t]]", '["a@x"]')
    got = {r[0]: r[1:] for r in rows(con, "SELECT ident, datoms, history, novelty, state FROM mentat_entity_index()")}
    assert {a: got[a] for a in (":p/email", ":p/tag")} == {":p/email": (2, 0, 0, "indexed"), ":p/tag": (2, 0, 0, "indexed")}
    transact(con, '[[:db/retract [:p/email "a@x"] :p/tag "x"] [:db/add [:p/email "b@x"] :p/tag "z"]]')
    got = {r[0]: r[1:] for r in rows(con, "SELECT ident, datoms, history, novelty, state FROM mentat_entity_index()")}
    # one retracted, one asserted: 2 current datoms; 1 history row (for as-of; a history row goes straight into a
    # sorted run of its own); 2 novelty entries over the sorted base (the retracted datom and the asserted one)
    assert got[":p/tag"] == (2, 1, 2, "indexed")
    assert rows(con, "SELECT bool_and(bytes > 0) FROM mentat_entity_index() WHERE state = 'indexed'") == [(True,)]


def test_reads_after_writes_and_several_stores(con):
    for store in ("mentat", "other"):
        transact(con, SCHEMA, store=store)
    query = "[:find ?n :in $ ?m :where [?e :p/email ?m] [?e :p/name ?n]]"
    transact(con, '[{:p/email "a@x" :p/name "A"}]')
    transact(con, '[{:p/email "a@x" :p/name "other A"}]', store="other")
    assert q(con, query, '["a@x"]') == [("A",)]
    assert q(con, query, '["a@x"]', store="other") == [("other A",)]
    transact(con, '[{:p/email "a@x" :p/name "B"}]')  # cardinality-one replacement through an upsert
    assert q(con, query, '["a@x"]') == [("B",)]
    transact(con, '[[:db/retractEntity [:p/email "a@x"]]]')
    assert q(con, query, '["a@x"]') == []
    assert q(con, query, '["a@x"]', store="other") == [("other A",)]
    # a bulk import drops the index; the next read sees the imported entities
    con.execute("""SELECT * FROM mentat_import('SELECT ''i'' || i || ''@x'' AS ":p/email", ''I'' || i AS ":p/name"
                   FROM range(3) t(i)')""").fetchall()
    assert q(con, query, '["i2@x"]') == [("I2",)]


def test_a_text_seen_before_follows_schema_changes(con):
    """The entity path keeps each query text and pull pattern it has seen (parsed, with its result types) per store
    and schema: neither a schema change nor another store may reuse them."""
    transact(con, SCHEMA)
    transact(con, '[{:db/id "a" :p/email "a@x" :p/name "A" :p/age 30}]')
    e = q(con, '[:find ?e . :where [?e :p/email "a@x"]]')[0][0]
    pull = lambda: con.execute("SELECT * FROM mentat_pull('[*]', ?)", [e]).fetchall()[0][1]
    assert set(pull()) >= {"db/id", "p/email", "p/age"} and "p/nick" not in pull()
    # a new attribute: '[*]' now has its field, with the value just written
    transact(con, "[{:db/ident :p/nick :db/valueType :db.type/string :db/cardinality :db.cardinality/one}]")
    transact(con, f'[[:db/add {e} :p/nick "ay"]]')
    assert pull()["p/nick"] == "ay"
    query = "[:find ?v :in $ ?m :where [?e :p/email ?m] [?e :p/nick ?v]]"
    assert q(con, query, '["a@x"]') == [("ay",)]
    # the same texts on another store, where :p/nick is a long
    transact(con, "[{:db/ident :p/email :db/valueType :db.type/string :db/cardinality :db.cardinality/one "
                  ":db/unique :db.unique/identity}"
                  " {:db/ident :p/nick :db/valueType :db.type/long :db/cardinality :db.cardinality/one}]", store="other")
    transact(con, '[{:p/email "a@x" :p/nick 7}]', store="other")
    got = con.execute("SELECT v, typeof(v) FROM mentat_q(?, inputs := ?, store := 'other')", [query, '["a@x"]'])
    assert got.fetchall() == [(7, "BIGINT")]
    assert q(con, query, '["a@x"]') == [("ay",)]


CREATE = textwrap.dedent("""
    import sys, duckdb
    con = duckdb.connect(sys.argv[1], config={"allow_unsigned_extensions": "true"})
    con.execute(f"LOAD '{sys.argv[2]}'")
    for edn in sys.argv[3:]:
        con.execute("SELECT * FROM mentat_transact(?)", [edn]).fetchall()
""")

REOPEN = textwrap.dedent("""
    import sys, duckdb
    con = duckdb.connect(sys.argv[1], config={"allow_unsigned_extensions": "true"})
    con.execute(f"LOAD '{sys.argv[2]}'")
    q = "[:find ?n :in $ ?m :where [?e :p/email ?m] [?e :p/name ?n]]"
    explain = lambda: con.execute("FROM mentat_explain(?, inputs := ?)", [q, '["a@x"]']).fetchall()[0]
    key, value = explain()
    print(key)
    print(value.split("-- ")[-1] if "-- " in value else "no note")
    print(con.execute("SELECT * FROM mentat_q(?, inputs := ?)", [q, '["a@x"]']).fetchall())
    print(explain()[1].split("-- ")[-1] if "-- " in explain()[1] else "no note")
""")


def test_a_reopened_store(tmp_path):
    path = tmp_path / "store.duckdb"
    run = lambda *args: subprocess.run([sys.executable, "-c", *args], capture_output=True, text=True, timeout=300)
    p = run(CREATE, str(path), str(EXT), SCHEMA, '[{:p/email "a@x" :p/name "A"}]', '[{:p/email "a@x" :p/name "B"}]')
    assert p.returncode == 0, p.stderr
    p = run(REOPEN, str(path), str(EXT))
    # in the new process the index has read nothing: the explain names the entity path and says what the first
    # mentat_q reads (two small attributes, read at once), after which it has nothing to say
    note = ("the entity index has not read :p/email :p/name yet: the first mentat_q that needs them reads them (in "
            "the background when one holds more than 10000 datoms, the general path answering until it is read)")
    assert p.stdout.splitlines() == ["entity_path", note, "[('B',)]", "no note"], p.stderr


def test_an_attached_parquet_store(tmp_path):
    con = instance(True)
    transact(con, SCHEMA)
    transact(con, '[{:p/email "a@x" :p/name "A"} {:p/email "b@x" :p/name "B" :p/tag ["t"]}]')
    out = tmp_path / "export"
    rows(con, f"SELECT * FROM mentat_export('{out}')")
    rows(con, f"SELECT * FROM mentat_attach_parquet('{out}', store := 'pq')")
    assert q(con, "[:find ?n :in $ ?m :where [?e :p/email ?m] [?e :p/name ?n]]", '["b@x"]', store="pq") == [("B",)]
    e = q(con, "[:find ?e . :where [?e :p/email \"b@x\"]]", store="pq")[0][0]
    assert rows(con, "SELECT pull FROM mentat_pull('[:p/name :p/tag]', ?, store := 'pq')", [e]) == \
        [({"p/name": "B", "p/tag": ["t"]},)]


def test_as_of_reads_before_the_history_the_index_keeps_are_answered_from_the_tables(tmp_path):
    """An attribute whose datoms keep changing adds history without bound while its current state keeps its size:
    the index keeps as many history rows as the attribute has current datoms, and at least 65,536 (eindex.rs
    `history_bound`), and an as-of read of a moment older than what it keeps is answered from the tables. Ages of
    1,000 people rewritten 75 times (74,000 history rows) while the index holds the attribute, then read in again by a
    reopened store; every as-of answer is the age written in that transaction (hand-computed)."""
    db = str(tmp_path / "h.duckdb")
    con = instance(True, db)
    transact(con, SCHEMA)
    query = "[:find ?e ?a :in $ [?m ...] :where [?e :p/email ?m] [?e :p/age ?a]]"
    emails = json.dumps([[f"p{i}@x" for i in range(0, 1000, 37)]])
    txs = []
    for k in range(75):
        edn = "[" + " ".join(f'{{:p/email "p{i}@x" :p/age {k * 1000 + i}}}' for i in range(1000)) + "]"
        txs.append(transact(con, edn)["tx"])
        if k == 0:
            q(con, query, emails)  # the attributes are read in now and take the later writes as novelty

    def check(con):
        for k in (0, 5, 30, 60, 74):
            got = sorted(a for _, a in q(con, query, emails, as_of=txs[k]))
            assert got == [k * 1000 + i for i in range(0, 1000, 37)], k
        assert sorted(a for _, a in q(con, query, emails)) == [74_000 + i for i in range(0, 1000, 37)]
        (history,) = rows(con, "SELECT history FROM mentat_entity_index() WHERE ident = ':p/age'")[0]
        assert 0 < history <= 65_536, history

    check(con)
    aid = dict(rows(con, "SELECT ident, entid FROM mentat_schema()"))[":p/age"]
    assert rows(con, f"SELECT count(*) FROM mentat.hist_{aid}") == [(74_000,)]
    con.close()
    check(instance(True, db))


def test_keywords_order_as_in_clojure_on_both_paths():
    # Clojure's and Datomic's keyword order: no namespace first, then by namespace, then by name (`:a/b` before
    # `:a-/b`, which the text order would reverse); hand-ordered here
    want = [":b", ":a/a", ":a/b", ":a-/b", ":ab/a"]
    got = []
    for on in (True, False):
        con = instance(on)
        transact(con, "[{:db/ident :k/id :db/valueType :db.type/long :db/cardinality :db.cardinality/one "
                      ":db/unique :db.unique/identity} "
                      "{:db/ident :k/kw :db/valueType :db.type/keyword :db/cardinality :db.cardinality/one}]")
        transact(con, "[" + " ".join(f"{{:k/id {i} :k/kw {k}}}" for i, k in enumerate(reversed(want))) + "]")
        query = "[:find ?k ?i :in $ [?i ...] :where [?e :k/id ?i] [?e :k/kw ?k] :order ?k]"
        got.append([k for k, _ in q(con, query, "[[0 1 2 3 4]]")])
        explain = rows(con, "SELECT explain_key FROM mentat_explain(?, inputs := '[[0 1 2 3 4]]')", [query])
        assert (explain[0][0] == "entity_path") == on
    assert got == [want, want]


def test_a_value_that_many_entities_hold_is_given_to_the_general_path(tmp_path):
    """An entity-shaped query whose value probe finds more entities than the index joins (100,000: a scan's work) is
    given back to the general path before any of them is read; the answer is the general path's, and mentat_explain
    says so."""
    n = 100_050
    answers = []
    for on in (True, False):
        con = instance(on, str(tmp_path / f"big_{on}.duckdb"))
        transact(con, SCHEMA)
        edn = " ".join(f'{{:p/email "e{i}" :p/state {":s/a" if i < n else ":s/b"} :p/age {i % 7}}}'
                       for i in range(n + 10))
        transact(con, f"[{edn}]")
        query = "[:find (count ?e) . :in $ ?s ?a :where [?e :p/state ?s] [?e :p/age ?a]]"
        # by hand: of the first n entities (state :s/a) those with i % 7 == 3; of the last 10, i % 7 == 3 too
        want_a = sum(1 for i in range(n) if i % 7 == 3)
        want_b = sum(1 for i in range(n, n + 10) if i % 7 == 3)
        answers.append((q(con, query, "[:s/a 3]"), q(con, query, "[:s/b 3]")))
        assert answers[-1] == ([(want_a,)], [(want_b,)])
        if on:
            # the two attributes pass 10,000 datoms, so the first query started reading them in the background
            deadline = time.time() + 120
            while time.time() < deadline and rows(con, "SELECT count(*) FROM mentat_entity_index() WHERE ident IN "
                                                       "(':p/state', ':p/age') AND state = 'indexed'") != [(2,)]:
                time.sleep(0.1)
            (key, value), = rows(con, "SELECT * FROM mentat_explain(?, inputs := '[:s/a 3]')", [query])
            assert key == "entity_path" and "gives this query back to the general path" in value, value
            (key, value), = rows(con, "SELECT * FROM mentat_explain(?, inputs := '[:s/b 3]')", [query])
            assert key == "entity_path" and "-- " not in value, value
        con.close()
    assert answers[0] == answers[1]
