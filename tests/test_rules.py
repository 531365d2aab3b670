"""Rules (`%` in :in), recursive ones included, through the built extension, with exact answers.

Expected answers are computed by plain Python (breadth-first search over the same literal edges), never copied
from mentat's output.

    graph (:node/to, node ids):  1 -> 2 -> 3 -> 1 (a cycle), 3 -> 4, 5 alone
    family (:person/parent, child -> parent):
        a            g (no parents)
       / \\
      b   c
      |   |
      d   e
      |
      f
"""
import json

import duckdb
import pytest

from conftest import transact

SCHEMA = """[
 {:db/ident :node/id :db/valueType :db.type/long :db/cardinality :db.cardinality/one :db/unique :db.unique/identity}
 {:db/ident :node/to :db/valueType :db.type/ref :db/cardinality :db.cardinality/many}
 {:db/ident :person/name :db/valueType :db.type/string :db/cardinality :db.cardinality/one
  :db/unique :db.unique/identity}
 {:db/ident :person/parent :db/valueType :db.type/ref :db/cardinality :db.cardinality/many}]"""

EDGES = [(1, 2), (2, 3), (3, 1), (3, 4)]
NODES = [1, 2, 3, 4, 5]
PARENT = {"b": "a", "c": "a", "d": "b", "e": "c", "f": "d"}
PEOPLE = ["a", "b", "c", "d", "e", "f", "g"]

ANC = """[[(anc ?a ?d) [?a :person/parent ?d]]
          [(anc ?a ?d) [?a :person/parent ?x] (anc ?x ?d)]]"""
PATH = """[[(path ?a ?b) [?a :node/to ?b]]
           [(path ?a ?b) (path ?a ?x) [?x :node/to ?b]]]"""


@pytest.fixture
def db(con):
    transact(con, SCHEMA)
    nodes = " ".join(f'{{:db/id "n{n}" :node/id {n}}}' for n in NODES)
    edges = " ".join(f'[:db/add "n{a}" :node/to "n{b}"]' for a, b in EDGES)
    people = " ".join(f'{{:db/id "{p}" :person/name "{p}"}}' for p in PEOPLE)
    parents = " ".join(f'[:db/add "{c}" :person/parent "{p}"]' for c, p in PARENT.items())
    transact(con, f"[{nodes} {edges} {people} {parents}]")
    return con


def q(con, query, *inputs):
    return con.execute("SELECT * FROM mentat_q(?, inputs := ?)", [query, "[" + " ".join(inputs) + "]"]).fetchall()


def sql(con, query, *inputs):
    return con.execute("SELECT mentat_sql(?, ?)", [query, "[" + " ".join(inputs) + "]"]).fetchall()[0][0]


def closure(edges):
    """Every (a, b) with a non-empty path a -> b."""
    out = set()
    nodes = {x for e in edges for x in e}
    for s in nodes:
        seen, todo = set(), [s]
        while todo:
            x = todo.pop()
            for a, b in edges:
                if a == x and b not in seen:
                    seen.add(b)
                    todo.append(b)
        out |= {(s, b) for b in seen}
    return out


def parity_paths(edges):
    """(odd, even): pairs joined by a path of odd length, and of even length >= 2."""
    odd, even = set(), set()
    nodes = {x for e in edges for x in e}
    for s in nodes:
        seen, todo = set(), [(s, 0)]
        while todo:
            x, p = todo.pop()
            for a, b in edges:
                if a == x and (b, 1 - p) not in seen:
                    seen.add((b, 1 - p))
                    todo.append((b, 1 - p))
        odd |= {(s, b) for b, p in seen if p == 1}
        even |= {(s, b) for b, p in seen if p == 0}
    return odd, even


def test_transitive_closure_with_a_cycle(db):
    got = q(db, "[:find ?x ?y :in $ % :where (path ?a ?b) [?a :node/id ?x] [?b :node/id ?y]]", PATH)
    assert set(got) == closure(EDGES)
    assert len(got) == 12
    # The right-recursive form gives the same set.
    right = "[[(reach ?a ?b) [?a :node/to ?b]] [(reach ?a ?b) [?a :node/to ?x] (reach ?x ?b)]]"
    got = q(db, "[:find ?x ?y :in $ % :where (reach ?a ?b) [?a :node/id ?x] [?b :node/id ?y]]", right)
    assert set(got) == closure(EDGES)


def test_same_generation(db):
    rules = """[[(sg ?x ?y) [?x :person/parent ?p] [?y :person/parent ?p]]
                [(sg ?x ?y) [?x :person/parent ?px] (sg ?px ?py) [?y :person/parent ?py]]]"""
    got = set(q(db, "[:find ?n ?m :in $ % :where (sg ?x ?y) [?x :person/name ?n] [?y :person/name ?m]]", rules))
    level = {"a": 0, "g": 0, "b": 1, "c": 1, "d": 2, "e": 2, "f": 3}
    # Same generation = same depth and both have a parent chain meeting at a common ancestor (all descend from a).
    expected = {(x, y) for x in PARENT for y in PARENT if level[x] == level[y]}
    assert got == expected
    assert ("d", "e") in got and ("f", "f") in got and ("a", "a") not in got


def anc_oracle():
    return {(c, a) for c in PEOPLE for a in PEOPLE if a in chain(c)}


def chain(c):
    out = []
    while c in PARENT:
        c = PARENT[c]
        out.append(c)
    return out


def test_ancestors_full_closure_and_seeded(db):
    full = set(q(db, "[:find ?n ?m :in $ % :where (anc ?p ?a) [?p :person/name ?n] [?a :person/name ?m]]", ANC))
    assert full == anc_oracle()
    seeded_q = "[:find ?m :in $ % ?p :where (anc ?p ?a) [?a :person/name ?m]]"
    seeded = q(db, seeded_q, ANC, '[:person/name "f"]')
    assert sorted(seeded) == [("a",), ("b",), ("d",)]
    assert {m for (n, m) in full if n == "f"} == {m for (m,) in seeded}
    # The seeded form closes only from f: a magic CTE over the seed, no closure of every pair.
    text = sql(db, seeded_q, ANC, '[:person/name "f"]')
    assert "WITH RECURSIVE m" in text and "VALUES" in text
    # An argument bound by a pattern (here the children of d, not a constant) seeds the same magic CTE from the
    # pattern's rows (a magic set). Patterns run before rule calls wherever they stand in :where, so the rule
    # written first is seeded too. Same answers both ways: the ancestors of d's children.
    children = '[?p :person/parent ?d] [?d :person/name "d"]'
    pattern_first = f"[:find ?m :in $ % :where {children} (anc ?p ?a) [?a :person/name ?m]]"
    rule_first = f"[:find ?m :in $ % :where (anc ?p ?a) {children} [?a :person/name ?m]]"
    assert "WITH RECURSIVE m" in sql(db, pattern_first, ANC) and "WITH RECURSIVE m" in sql(db, rule_first, ANC)
    expected = {(a,) for c in PEOPLE if PARENT.get(c) == "d" for a in chain(c)}
    assert expected and set(q(db, pattern_first, ANC)) == set(q(db, rule_first, ANC)) == expected
    # A constant argument seeds too; descendants (the invariant position bound) filter the base case.
    assert sorted(q(db, '[:find ?n :in $ % :where (anc ?c [:person/name "b"]) [?c :person/name ?n]]', ANC)) == [
        ("d",), ("f",)]
    # Collection input of seeds.
    got = q(db, "[:find ?n ?m :in $ % [?n ...] :where [?p :person/name ?n] (anc ?p ?a) [?a :person/name ?m]]",
            ANC, '["e" "d"]')
    assert set(got) == {(n, m) for (n, m) in anc_oracle() if n in ("e", "d")}
    plan = "\n".join(r[-1] for r in db.execute(
        "SELECT * FROM mentat_explain(?, inputs := ?)", [seeded_q, f'[{ANC} [:person/name "f"]]']).fetchall())
    assert "REC CTE" in plan.upper()


def test_seeded_path_filter(db):
    seeded = q(db, "[:find ?y :in $ % ?a :where (path ?a ?b) [?b :node/id ?y]]", PATH, "[:node/id 3]")
    assert sorted(seeded) == sorted({(b,) for (a, b) in closure(EDGES) if a == 3})
    text = sql(db, "[:find ?y :in $ % ?a :where (path ?a ?b) [?b :node/id ?y]]", PATH, "[:node/id 3]")
    # The seed is inside the base case of the recursion.
    base = text.split("UNION")[0]
    assert "WITH RECURSIVE" in base and "SELECT" in base and "cur_" in base and "= (" in base


def test_mutual_recursion_even_odd(db):
    rules = """[[(odd ?a ?b) [?a :node/to ?b]]
                [(odd ?a ?b) [?a :node/to ?x] (even ?x ?b)]
                [(even ?a ?b) [?a :node/to ?x] (odd ?x ?b)]]"""
    odd, even = parity_paths(EDGES)
    got_odd = set(q(db, "[:find ?x ?y :in $ % :where (odd ?a ?b) [?a :node/id ?x] [?b :node/id ?y]]", rules))
    got_even = set(q(db, "[:find ?x ?y :in $ % :where (even ?a ?b) [?a :node/id ?x] [?b :node/id ?y]]", rules))
    assert got_odd == odd and got_even == even
    assert (1, 1) in got_odd and (1, 1) in got_even and (1, 4) in got_odd and (3, 4) in got_even


def test_rule_inside_not_join_and_or(db):
    got = q(db, """[:find ?n :in $ % :where [?p :person/name ?n]
                    (not-join [?p] (anc ?p ?x) [?x :person/name "a"])]""", ANC)
    assert sorted(got) == [("a",), ("g",)]
    got = q(db, """[:find ?n :in $ % :where [?p :person/name ?n]
                    (or-join [?p] (anc ?p [:person/name "b"]) [?p :person/name "g"])]""", ANC)
    assert sorted(got) == [("d",), ("f",), ("g",)]
    # A non-recursive rule inside not, calling a recursive one.
    rules = ANC[:-1] + ' [(under-b ?p) (anc ?p ?b) [?b :person/name "b"]]]'
    got = q(db, "[:find ?n :in $ % :where [?p :person/name ?n] (not (under-b ?p))]", rules)
    assert sorted(got) == [("a",), ("b",), ("c",), ("e",), ("g",)]


def test_non_recursive_rules_inline(db):
    rules = """[[(named ?e ?n) [?e :person/name ?n]]
                [(sibling ?a ?b) [?a :person/parent ?p] [?b :person/parent ?p] [(not= ?a ?b)]]
                [(kin ?a ?b) (sibling ?a ?b)] [(kin ?a ?b) [?a :person/parent ?b]]]"""
    got = q(db, '[:find ?n :in $ % :where (named ?x "b") (kin ?x ?y) (named ?y ?n)]', rules)
    assert sorted(got) == [("a",), ("c",)]
    assert "RECURSIVE" not in sql(db, '[:find ?n :in $ % :where (named ?x "b") (kin ?x ?y) (named ?y ?n)]', rules)


def test_unstratifiable_rule_set_rejected(db):
    rules = """[[(win ?x) [?x :node/to ?y] (not (win ?y))]]"""
    with pytest.raises(duckdb.Error, match="unstratifiable"):
        q(db, "[:find ?x :in $ % :where (win ?x)]", rules)
    rules = """[[(p ?x) [?x :node/id _] (not (q ?x))] [(q ?x) [?x :node/id _] (not (p ?x))]]"""
    with pytest.raises(duckdb.Error, match="unstratifiable"):
        q(db, "[:find ?x :in $ % :where (p ?x)]", rules)


def test_required_bound_arguments(db):
    rules = "[[(anc2 [?a] ?d) [?a :person/parent ?d]] [(anc2 [?a] ?d) [?a :person/parent ?x] (anc2 ?x ?d)]]"
    with pytest.raises(duckdb.Error, match=r"unbound variable \?p in `\(anc2 \?p \?a\)`.*required"):
        q(db, "[:find ?a :in $ % :where (anc2 ?p ?a)]", rules)
    got = q(db, '[:find ?m :in $ % :where [?p :person/name "d"] (anc2 ?p ?a) [?a :person/name ?m]]', rules)
    assert sorted(got) == [("a",), ("b",)]


def test_recursive_bodies_pass_their_required_arguments_on(db):
    """Datomic binds a rule's bracketed arguments when it is entered, so a recursive body may hand its head's on
    to the recursive call, whether the call comes last, first (left recursion) or both arguments are required."""
    reach = closure(EDGES)
    both = ("[[(conn [?a ?b]) [?a :node/to ?b]]"
            " [(conn [?a ?b]) [?a :node/to ?x] (conn ?x ?b)]]")
    got = q(db, "[:find ?i ?j :in $ % :where [?a :node/id ?i] [?b :node/id ?j] (conn ?a ?b)]", both)
    assert sorted(got) == sorted(reach)
    left = "[[(e [?x] ?y) [?x :node/to ?y]] [(e [?x] ?y) (e ?x ?z) [?z :node/to ?y]]]"
    got = q(db, "[:find ?j :in $ % :where [?a :node/id 3] (e ?a ?b) [?b :node/id ?j]]", left)
    assert sorted(got) == sorted((j,) for i, j in reach if i == 3)
    # mutual recursion through a non-recursive rule that requires the argument too
    via = ("[[(step [?a] ?b) [?a :node/to ?b]]"
           " [(far [?a] ?b) (step ?a ?b)] [(far [?a] ?b) (step ?a ?x) (far ?x ?b)]]")
    got = q(db, "[:find ?j :in $ % :where [?a :node/id 1] (far ?a ?b) [?b :node/id ?j]]", via)
    assert sorted(got) == sorted((j,) for i, j in reach if i == 1)
    # the call site still has to bind them
    with pytest.raises(duckdb.Error, match=r"unbound variable \?a in `\(conn \?a \?b\)`.*required"):
        q(db, "[:find ?b :in $ % :where [?b :node/id 4] (conn ?a ?b)]", both)


def test_rule_errors(db):
    with pytest.raises(duckdb.Error, match="unknown rule nope"):
        q(db, "[:find ?x :in $ % :where (nope ?x)]", PATH)
    # a parameter that no call binds is still an error, naming the variable
    with pytest.raises(duckdb.Error, match=r"\?max"):
        q(db, "[:find ?a ?b :in $ % :where (lim ?a ?b ?m)]",
          "[[(lim ?a ?b ?max) [?a :node/to ?b] [?b :node/id ?i] [(< ?i ?max)]]"
          " [(lim ?a ?b ?max) [?a :node/to ?y] (lim ?y ?b ?max)]]")


# Rules that carry a caller's parameter (issue 14): a limit passed through the recursion unchanged, a constant in
# the call, a hop budget that the body decrements. The graph: n0 -> n1 -> n2 -> n3 -> n4 along :n/edge, ages
# n0 5, n1 10, n2 20, n3 30, n4 1. Expected answers by hand (and Datomic's semantics: the rule is evaluated with
# the bindings its call site provides).
LIM_SCHEMA = """[
 {:db/ident :n/name :db/valueType :db.type/string :db/cardinality :db.cardinality/one :db/unique :db.unique/identity}
 {:db/ident :n/edge :db/valueType :db.type/ref :db/cardinality :db.cardinality/many}
 {:db/ident :n/age :db/valueType :db.type/long :db/cardinality :db.cardinality/one}]"""
REACH_LIM = """[[(reach-lim ?a ?b ?max) [?a :n/edge ?b] [?b :n/age ?x] [(< ?x ?max)]]
                [(reach-lim ?a ?b ?max) [?a :n/edge ?y] [?y :n/age ?z] [(< ?z ?max)] (reach-lim ?y ?b ?max)]]"""
WITHIN = """[[(within ?x ?b ?k) [(> ?k 0)] [?x :n/edge ?b]]
             [(within ?x ?b ?k) [(> ?k 0)] [?x :n/edge ?y] [(- ?k 1) ?k2] (within ?y ?b ?k2)]]"""


@pytest.fixture
def chain5(con):
    transact(con, LIM_SCHEMA)
    ages = {0: 5, 1: 10, 2: 20, 3: 30, 4: 1}
    nodes = " ".join(f'{{:db/id "n{i}" :n/name "n{i}" :n/age {a}}}' for i, a in ages.items())
    edges = " ".join(f'[:db/add "n{i}" :n/edge "n{i + 1}"]' for i in range(4))
    transact(con, f"[{nodes} {edges}]")
    return con


def test_recursion_with_a_caller_parameter(chain5):
    query = ("[:find ?nm :in $ % ?start ?max :where [?s :n/name ?start] (reach-lim ?s ?b ?max) "
             "[?b :n/name ?nm]]")
    # from n0 under 25: n1 (10), n2 (20); n3 (30) stops the walk, so n4 (1) is not reached
    assert sorted(q(chain5, query, REACH_LIM, '"n0"', "25")) == [("n1",), ("n2",)]
    assert sorted(q(chain5, query, REACH_LIM, '"n0"', "100")) == [("n1",), ("n2",), ("n3",), ("n4",)]
    assert q(chain5, query, REACH_LIM, '"n0"', "7") == []
    # a constant in the call
    const = ("[:find ?nm :in $ % ?start :where [?s :n/name ?start] (reach-lim ?s ?b 100) [?b :n/name ?nm]]")
    assert sorted(q(chain5, const, REACH_LIM, '"n1"')) == [("n2",), ("n3",), ("n4",)]


def test_recursion_with_a_decremented_budget(chain5):
    query = "[:find ?nm :in $ % ?start ?k :where [?s :n/name ?start] (within ?s ?b ?k) [?b :n/name ?nm]]"
    assert sorted(q(chain5, query, WITHIN, '"n0"', "3")) == [("n1",), ("n2",), ("n3",)]
    assert sorted(q(chain5, query, WITHIN, '"n2"', "1")) == [("n3",)]
    assert q(chain5, query, WITHIN, '"n0"', "0") == []
    # every start at once: the pairs within two hops
    pairs = "[:find ?a ?b :in $ % :where [?s :n/name ?a] (within ?s ?t 2) [?t :n/name ?b]]"
    assert sorted(q(chain5, pairs, WITHIN)) == sorted(
        (f"n{i}", f"n{j}") for i in range(5) for j in range(i + 1, min(i + 3, 5)))


def test_non_linear_recursion(db):
    """Two recursive calls in one body (path doubling): evaluated semi-naively in a keyed recursive CTE, the same
    closure as the linear forms, on a graph with a cycle and on the family tree."""
    doubling = "[[(tc ?a ?b) [?a :node/to ?b]] [(tc ?a ?b) (tc ?a ?x) (tc ?x ?b)]]"
    got = q(db, "[:find ?x ?y :in $ % :where (tc ?a ?b) [?a :node/id ?x] [?b :node/id ?y]]", doubling)
    assert set(got) == closure(EDGES) and len(got) == 12
    anc2 = "[[(anc2 ?c ?a) [?c :person/parent ?a]] [(anc2 ?c ?a) (anc2 ?c ?x) (anc2 ?x ?a)]]"
    got = q(db, "[:find ?n ?m :in $ % :where (anc2 ?p ?a) [?p :person/name ?n] [?a :person/name ?m]]", anc2)
    assert set(got) == anc_oracle()
    # mutual recursion where one body calls the component twice: paths of odd and even length
    parity = """[[(odd ?a ?b) [?a :node/to ?b]]
                 [(odd ?a ?b) (even ?a ?x) (odd ?x ?b)]
                 [(even ?a ?b) (odd ?a ?x) (odd ?x ?b)]]"""
    odd, even = parity_paths(EDGES)
    got = q(db, "[:find ?x ?y :in $ % :where (odd ?a ?b) [?a :node/id ?x] [?b :node/id ?y]]", parity)
    assert set(got) == odd
    got = q(db, "[:find ?x ?y :in $ % :where (even ?a ?b) [?a :node/id ?x] [?b :node/id ?y]]", parity)
    assert set(got) == even
    assert "USING KEY" in sql(db, "[:find ?a ?b :in $ % :where (tc ?a ?b)]", doubling)

