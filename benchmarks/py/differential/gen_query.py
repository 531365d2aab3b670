"""Random valid Datalog queries over a database of model.py, rendered for mentat and for DataScript.

Every variable has a type: "entity" (an entity id: mapped through :e/name before comparing) or a value type.
Joins, predicates and aggregates only ever meet values of one type (DataScript holds numbers as JS doubles and
keywords as strings, so a cross-type comparison would mean something else there). Clauses come in an order where
every predicate's variables are bound before it (DataScript evaluates clauses in order); every clause after the
first shares a variable with the clauses before it (no cross products of the whole database).
"""
import json

from .model import COMPARABLE, NAME, NUMERIC, ds_val, m_val


class Var(str):
    pass


class Const:
    def __init__(self, t, v):
        self.t, self.v = t, v


class LRef:  # an entity constant: the lookup ref [:e/name "n<label>"]
    def __init__(self, label):
        self.label = label


BLANK = "_"


def term(x, ds):
    if isinstance(x, Var) or x == BLANK:
        return str(x)
    if isinstance(x, LRef):
        return f'["{NAME}" "n{x.label}"]' if ds else f'[:{NAME} "n{x.label}"]'
    if isinstance(x, Const):
        return ds_val(x.t, x.v, in_query=True) if ds else m_val(x.t, x.v)
    if isinstance(x, str) and x.startswith("@"):  # an attribute
        return json.dumps(x[1:]) if ds else ":" + x[1:]
    return str(x)


def attr(a):
    return "@" + a.ident


def render(node, ds):
    kind = node[0]
    if kind == "pat":
        return "[" + " ".join(term(t, ds) for t in node[1:]) + "]"
    if kind == "pred":
        return "[(" + " ".join([node[1]] + [term(t, ds) for t in node[2]]) + ")]"
    if kind == "fn":
        return "[(" + " ".join([node[1]] + [term(t, ds) for t in node[2]]) + ") " + node[3] + "]"
    if kind == "not":
        return "(not " + " ".join(render(c, ds) for c in node[1]) + ")"
    if kind == "not-join":
        return "(not-join [" + " ".join(node[1]) + "] " + " ".join(render(c, ds) for c in node[2]) + ")"
    if kind == "or":
        return "(or " + " ".join(render(b, ds) for b in node[1]) + ")"
    if kind == "or-join":
        return "(or-join [" + " ".join(node[1]) + "] " + " ".join(render(b, ds) for b in node[2]) + ")"
    if kind == "and":
        return "(and " + " ".join(render(c, ds) for c in node[1]) + ")"
    if kind == "call":
        return "(" + " ".join([node[1]] + [term(t, ds) for t in node[2]]) + ")"
    raise ValueError(kind)


class Query:
    """find: [(kind, payload, out_type)] with kind "var" (payload a var) or "agg" (payload (fn, n, var));
    spec: "rel" | "scalar" | "coll" | "tuple"; ins: [(binding text, type info, value)]; rules: [(head, [body])]."""

    def __init__(self):
        self.find, self.spec, self.with_, self.ins, self.where, self.rules = [], "rel", [], [], [], []

    def _find_el(self, f, ds=False):
        if f[0] == "var":
            return f[1]
        if f[0] == "pull":
            from .gen_pull import render as prender
            return f"(pull {f[1][0]} {prender(f[1][1], ds)})"
        fn, n, v = f[1]
        return f"({fn} {n} {v})" if n is not None else f"({fn} {v})"

    def text(self, ds, spec=None):
        spec = spec or self.spec
        els = [self._find_el(f, ds) for f in self.find]
        if spec == "scalar":
            fs = els[0] + " ."
        elif spec == "coll":
            fs = "[" + els[0] + " ...]"
        elif spec == "tuple":
            fs = "[" + " ".join(els) + "]"
        else:
            fs = " ".join(els)
        out = "[:find " + fs
        if self.with_:
            out += " :with " + " ".join(self.with_)
        ins = (["%"] if self.rules else []) + [b for b, _, _ in self.ins]
        if ins:
            out += " :in $ " + " ".join(ins)
        out += " :where " + " ".join(render(c, ds) for c in self.where) + "]"
        return out

    def rules_text(self, ds):
        rs = []
        for head, body in self.rules:
            rs.append("[(" + " ".join(head) + ") " + " ".join(render(c, ds) for c in body) + "]")
        return "[" + " ".join(rs) + "]"

    def m_inputs(self, ids):
        vals = ([self.rules_text(False)] if self.rules else []) + [_m_in(shape, v, ids) for _, shape, v in self.ins]
        return "[" + " ".join(vals) + "]" if vals else None

    def ds_inputs(self, ids):
        return ([self.rules_text(True)] if self.rules else []) + [_ds_in(shape, v, ids) for _, shape, v in self.ins]


def _m_scalar(t, v, ids):
    return str(ids[v]) if t == "entity" else m_val(t, v)


def _ds_scalar(t, v, ids):
    return ids[v] if t == "entity" else ds_val(t, v)


def _m_in(shape, v, ids):
    form, types = shape
    if form == "scalar":
        return _m_scalar(types[0], v, ids)
    if form == "tuple":
        return "[" + " ".join(_m_scalar(t, x, ids) for t, x in zip(types, v)) + "]"
    if form == "coll":
        return "[" + " ".join(_m_scalar(types[0], x, ids) for x in v) + "]"
    return "[" + " ".join("[" + " ".join(_m_scalar(t, x, ids) for t, x in zip(types, row)) + "]" for row in v) + "]"


def _ds_in(shape, v, ids):
    form, types = shape
    if form == "scalar":
        return _ds_scalar(types[0], v, ids)
    if form == "tuple":
        return [_ds_scalar(t, x, ids) for t, x in zip(types, v)]
    if form == "coll":
        return [_ds_scalar(types[0], x, ids) for x in v]
    return [[_ds_scalar(t, x, ids) for t, x in zip(types, row)] for row in v]


def vtype(a):
    return "entity" if a.type == "ref" else a.type


class QGen:
    def __init__(self, rnd, attrs, model, features=None):
        self.rnd = rnd
        self.attrs = [a for a in attrs]
        self.by_type = {}
        for a in attrs:
            self.by_type.setdefault(vtype(a), []).append(a)
        self.model = model
        self.labels = sorted(model)
        # values present per attribute (constants that hit), refs as labels
        self.present = {}
        for i, avs in model.items():
            for k, vs in avs.items():
                self.present.setdefault(k, set()).update(vs)
        self.n = 0
        self.features = features

    # ------------------------------------------------------------------------------------------ helpers
    def fresh(self):
        self.n += 1
        return Var(f"?v{self.n}")

    def const(self, t, a=None):
        r = self.rnd
        if t == "entity":
            return LRef(r.choice(self.labels))
        if a is not None and self.present.get(a.ident) and r.random() < 0.7:
            return Const(t, r.choice(sorted(self.present[a.ident], key=repr)))
        from .model import DOMAIN
        return Const(t, r.choice(DOMAIN[t]))

    def value(self, t):
        """A random value of type t for an input (entity: a label)."""
        if t == "entity":
            return self.rnd.choice(self.labels)
        cands = [a for a in self.by_type.get(t, []) if self.present.get(a.ident)]
        if cands and self.rnd.random() < 0.8:
            return self.rnd.choice(sorted(self.present[self.rnd.choice(cands).ident], key=repr))
        from .model import DOMAIN
        return self.rnd.choice(DOMAIN[t])

    def vars_of(self, bound, t=None):
        return sorted(v for v, vt in bound.items() if t is None or vt == t)

    def on(self, name):
        return self.features is None or name in self.features

    # ------------------------------------------------------------------------------------------ clauses
    def pattern(self, bound, connect=True):
        """A data pattern joined to the bound variables (or free-standing when nothing is bound)."""
        r = self.rnd
        ents = self.vars_of(bound, "entity")
        choice = r.random()
        if ents and choice < 0.6 or (ents and not connect):
            e = r.choice(ents)
            a = r.choice(self.attrs)
            t = vtype(a)
            # never the pattern's own entity variable: DataScript does not unify [?e :ref ?e] (departure 4)
            same = [v for v in self.vars_of(bound, t) if v != e]
            x = r.random()
            if same and x < 0.25:
                v = r.choice(same)
            elif x < 0.45:
                v = self.const(t, a)
            elif x < 0.55:
                return ("pat", e, attr(a)), {}
            elif x < 0.62:
                return ("pat", e, attr(a), BLANK), {}
            else:
                v = self.fresh()
                return ("pat", e, attr(a), v), {v: t}
            return ("pat", e, attr(a), v), {}
        vals = [v for v in bound if bound[v] != "entity" and self.by_type.get(bound[v])]
        if vals and choice < 0.85:
            v = r.choice(sorted(vals))
            a = r.choice(self.by_type[bound[v]])
            e = self.fresh()
            return ("pat", e, attr(a), v), {e: "entity"}
        if ents and choice < 0.95:  # reverse navigation: an entity referring to a bound one
            x = r.choice(ents)
            a = r.choice(self.by_type["entity"])
            e = self.fresh()
            return ("pat", e, attr(a), x), {e: "entity"}
        if not connect or not bound:
            a = r.choice(self.attrs)
            e, v = self.fresh(), self.fresh()
            if r.random() < 0.3:
                return ("pat", LRef(r.choice(self.labels)), attr(a), v), {v: vtype(a)}
            if r.random() < 0.3:
                return ("pat", e, attr(a), self.const(vtype(a), a)), {e: "entity"}
            return ("pat", e, attr(a), v), {e: "entity", v: vtype(a)}
        # a lookup-ref subject joined through its value
        a = r.choice(self.attrs)
        same = self.vars_of(bound, vtype(a))
        if same:
            return ("pat", LRef(r.choice(self.labels)), attr(a), r.choice(same)), {}
        e = r.choice(self.vars_of(bound))
        return self.pattern(bound)

    def predicate(self, bound):
        r = self.rnd
        cands = [v for v, t in bound.items() if t in COMPARABLE]
        if not cands:
            return None
        v = r.choice(sorted(cands))
        t = bound[v]
        if t == "string" and r.random() < 0.3:
            fn = r.choice(["clojure.string/starts-with?", "clojure.string/ends-with?", "clojure.string/includes?"])
            return ("pred", fn, [v, Const("string", r.choice(["a", "b", "c", "ab", "Z"]))]), {}
        ops = ["<", ">", "<=", ">=", "=", "!=", "not="]
        if t in ("boolean", "uuid"):
            ops = ["=", "!=", "not="]
        op = r.choice(ops)
        others = [w for w in self.vars_of(bound, t) if w != v]
        if others and r.random() < 0.35:
            return ("pred", op, [v, r.choice(others)]), {}
        attr_of_t = self.by_type.get(t, [None])
        return ("pred", op, [v, self.const(t, r.choice(attr_of_t))]), {}

    def function(self, bound):
        r = self.rnd
        x = r.random()
        longs = self.vars_of(bound, "long")
        doubles = self.vars_of(bound, "double")
        strings = self.vars_of(bound, "string")
        ents = self.vars_of(bound, "entity")
        out = self.fresh()
        if x < 0.2 and longs:
            op = r.choice(["+", "-", "*"])
            a0 = r.choice(longs)
            others = [v for v in longs if v != a0]  # DataScript refuses a variable twice in one call (departure)
            args = [a0, r.choice(others) if others and r.random() < 0.4 else Const("long", r.randint(-2, 3))]
            return ("fn", op, args, out), {out: "long"}
        if x < 0.3 and doubles:
            return ("fn", r.choice(["+", "-"]), [r.choice(doubles), Const("double", 0.5)], out), {out: "double"}
        if x < 0.4 and strings:
            return ("fn", "str", [r.choice(strings), Const("string", "z")], out), {out: "string"}
        if x < 0.65 and ents:
            ones = [a for a in self.attrs if not a.many and a.type != "ref"]
            a = r.choice(ones)
            return ("fn", "get-else", ["$", r.choice(ents), attr(a), self.const(a.type)], out), {out: a.type}
        if x < 0.8 and ents:
            a = r.choice(self.attrs)
            return ("pred", "missing?", ["$", r.choice(ents), attr(a)]), {}
        if x < 0.9:
            t = r.choice(sorted(COMPARABLE))
            return ("fn", "ground", [self.const(t, r.choice(self.by_type[t]))], out), {out: t}
        v = r.choice(self.vars_of(bound))
        if bound[v] == "entity":
            return self.pattern(bound)
        return ("fn", "identity", [v], out), {out: bound[v]}

    def conj(self, bound, k):
        """k clauses joined to bound (a copy): (clauses, new bindings)."""
        b = dict(bound)
        out = []
        for _ in range(k):
            c, nb = self.pattern(b) if self.rnd.random() < 0.7 or len(out) == 0 else self.predicate(b) or self.pattern(b)
            out.append(c)
            b.update(nb)
        return out, {v: t for v, t in b.items() if v not in bound}

    def negation(self, bound):
        r = self.rnd
        ents = self.vars_of(bound, "entity")
        if not ents:
            return None
        if r.random() < 0.5 or not self.on("not-join"):
            # Datomic: every variable of a `not` must be bound outside it (local ones need not-join); DataScript
            # is laxer (departure 3)
            cs = []
            for _ in range(r.randint(1, 2)):
                c = self.closed_clause(bound)
                if c:
                    cs.append(c)
            return (("not", cs), {}) if cs else None

        e = r.choice(ents)
        cs, _ = self.conj({e: "entity"}, r.randint(1, 3))
        return ("not-join", [e], cs), {}

    def closed_clause(self, bound):
        """A pattern or predicate that binds no new variable."""
        r = self.rnd
        if r.random() < 0.3:
            c = self.predicate(bound)
            if c:
                return c[0]
        ents = self.vars_of(bound, "entity")
        e = r.choice(ents)
        a = r.choice(self.attrs)
        t = vtype(a)
        same = [v for v in self.vars_of(bound, t) if v != e]
        x = r.random()
        if same and x < 0.35:
            return ("pat", e, attr(a), r.choice(same))
        if x < 0.75:
            return ("pat", e, attr(a), self.const(t, a))
        return ("pat", e, attr(a))

    def disjunction(self, bound):
        r = self.rnd
        ents = self.vars_of(bound, "entity")
        if not ents:
            return None
        e = r.choice(ents)
        if r.random() < 0.5:  # or: every branch with the same variables, {e} or {e, x}
            t = r.choice([t for t in self.by_type if t != "entity"] + ["entity"])
            x = self.fresh() if r.random() < 0.6 else None
            branches = []
            for _ in range(r.randint(2, 3)):
                a = r.choice(self.by_type[t])
                if x is None:
                    b = ("pat", e, attr(a), self.const(t, a)) if r.random() < 0.6 else ("pat", e, attr(a))
                    if r.random() < 0.3:
                        a2 = r.choice(self.attrs)
                        b = ("and", [b, ("pat", e, attr(a2))])
                else:
                    b = ("pat", e, attr(a), x)
                    if t in COMPARABLE - {"boolean", "uuid"} and r.random() < 0.4:
                        b = ("and", [b, ("pred", r.choice(["<", ">="]), [x, self.const(t, a)])])
                branches.append(b)
            return ("or", branches), ({x: t} if x is not None else {})
        # or-join [e] or [e x]: branches with local variables
        t = r.choice([t for t in self.by_type])
        x = self.fresh() if r.random() < 0.5 else None
        join = [e] + ([x] if x else [])
        branches = []
        for _ in range(r.randint(2, 3)):
            a = r.choice(self.by_type[t])
            if x is None:
                cs, _ = self.conj({e: "entity"}, r.randint(1, 2))
                branches.append(cs[0] if len(cs) == 1 else ("and", cs))
            elif r.random() < 0.5:
                branches.append(("pat", e, attr(a), x))
            else:
                m = self.fresh()
                ref = r.choice(self.by_type["entity"])
                branches.append(("and", [("pat", e, attr(ref), m), ("pat", m, attr(a), x)]))
        return ("or-join", join, branches), ({x: "entity" if t == "entity" else t} if x else {})

    # ------------------------------------------------------------------------------------------ rules
    def rule(self, q, bound):
        """Defines a rule (recursive or not) in q and returns a call of it joined to bound."""
        r = self.rnd
        ents = self.vars_of(bound, "entity")
        if not ents:
            return None
        refs = self.by_type["entity"]
        types = getattr(q, "rule_types", {})
        q.rule_types = types
        if types and r.random() < 0.35:  # call a rule defined already, maybe with another binding pattern
            name = r.choice(sorted(types))
            return self.call(name, types[name], bound)
        name = f"r{len(types)}"
        kind = r.random()
        if kind < 0.55:  # recursive reachability over one or two ref attributes
            a1, a2 = r.choice(refs), r.choice(refs)
            # right-linear only: DataScript 1.8.1 never returns from a left-recursive or a non-linear rule
            # (departure 1 in __init__.py)
            shape = r.choice(["right", "two"])
            q.rules.append(([name, "?a", "?b"], [("pat", Var("?a"), attr(a1), Var("?b"))]))
            if shape == "right":
                body = [("pat", Var("?a"), attr(a1), Var("?m")), ("call", name, [Var("?m"), Var("?b")])]
            elif shape == "left":
                body = [("call", name, [Var("?a"), Var("?m")]), ("pat", Var("?m"), attr(a1), Var("?b"))]
            elif shape == "nonlinear":
                body = [("call", name, [Var("?a"), Var("?m")]), ("call", name, [Var("?m"), Var("?b")])]
            else:
                body = [("pat", Var("?a"), attr(a2), Var("?m")), ("call", name, [Var("?m"), Var("?b")])]
            if r.random() < 0.25:  # a filter inside the recursive body
                a3 = r.choice(self.attrs)
                body.insert(1, ("not", [("pat", Var("?m"), attr(a3), self.const(vtype(a3), a3))]))
            q.rules.append(([name, "?a", "?b"], body))
            t = "entity"
        else:  # non-recursive, one to three bodies, entity -> value of type t
            t = r.choice(sorted(self.by_type))
            for _ in range(r.randint(1, 3)):
                a = r.choice(self.by_type[t])
                x = r.random()
                if x < 0.5:
                    body = [("pat", Var("?a"), attr(a), Var("?b"))]
                elif x < 0.8:
                    body = [("pat", Var("?a"), attr(r.choice(refs)), Var("?m")), ("pat", Var("?m"), attr(a), Var("?b"))]
                elif x < 0.9 or not any(tt == "entity" for tt in types.values()):
                    body = [("pat", Var("?a"), attr(a), Var("?b"))]
                    if t in COMPARABLE - {"boolean", "uuid"}:
                        body.append(("pred", ">", [Var("?b"), self.const(t, a)]))
                else:  # a rule that calls an entity -> entity rule defined before it
                    other = r.choice(sorted(k for k, tt in types.items() if tt == "entity"))
                    body = [("call", other, [Var("?a"), Var("?m")]), ("pat", Var("?m"), attr(a), Var("?b"))]
                q.rules.append(([name, "?a", "?b"], body))
        types[name] = t
        return self.call(name, t, bound)

    def call(self, name, t, bound):
        r = self.rnd
        ents = self.vars_of(bound, "entity")
        e = r.choice(ents)
        same = [v for v in self.vars_of(bound, t) if v != e]
        y = r.random()
        if same and y < 0.3:
            return ("call", name, [e, r.choice(same)]), {}
        out = self.fresh()
        if t == "entity" and y < 0.5:
            return ("call", name, [out, e]), {out: t}
        return ("call", name, [e, out]), {out: t}

    # ------------------------------------------------------------------------------------------ inputs
    def inputs(self, q, bound):
        r = self.rnd
        for _ in range(r.choice([0, 0, 1, 1, 2])):
            form = r.choice(["scalar", "tuple", "coll", "rel"])
            types = []
            for _ in range(1 if form in ("scalar", "coll") else 2):
                types.append(r.choice(["entity"] + sorted(COMPARABLE)))
            vs = [self.fresh() for _ in types]
            if form == "scalar":
                text, val = vs[0], self.value(types[0])
            elif form == "tuple":
                text, val = "[" + " ".join(vs) + "]", [self.value(t) for t in types]
            elif form == "coll":
                text, val = "[" + vs[0] + " ...]", [self.value(types[0]) for _ in range(r.randint(0, 4))]
            else:
                text = "[[" + " ".join(vs) + "]]"
                val = [[self.value(t) for t in types] for _ in range(r.randint(0, 4))]
            q.ins.append((text, (form, types), val))
            for v, t in zip(vs, types):
                bound[v] = t
        return [v for v in bound]

    def use_input(self, v, t, bound, joined):
        """A pattern that joins an input variable to the database: through an entity variable of the patterns
        before it when there is one (most of the time), so that the inputs do not make a cross product of
        independent patterns."""
        r = self.rnd
        if joined and r.random() < 0.85:
            e = r.choice(joined)
            if t == "entity":
                a = r.choice(self.by_type["entity"])
                return ("pat", e, attr(a), v), {}
            a = r.choice(self.by_type[t])
            return ("pat", e, attr(a), v), {}
        if t == "entity":
            a = r.choice(self.attrs)
            nv = self.fresh()
            if r.random() < 0.3 and self.by_type["entity"]:
                a = r.choice(self.by_type["entity"])
                e = self.fresh()
                return ("pat", e, attr(a), v), {e: "entity"}
            return ("pat", v, attr(a), nv), {nv: vtype(a)}
        a = r.choice(self.by_type[t])
        e = self.fresh()
        return ("pat", e, attr(a), v), {e: "entity"}

    # ------------------------------------------------------------------------------------------ queries
    def query(self):
        r = self.rnd
        q = Query()
        bound = {}
        inputs = self.inputs(q, bound)
        joined = []
        for v in inputs:
            c, nb = self.use_input(v, bound[v], bound, joined)
            q.where.append(c)
            bound.update(nb)
            joined += [x for x, t in nb.items() if t == "entity"]
            if bound[v] == "entity":
                joined.append(v)
        if not q.where:
            c, nb = self.pattern(bound, connect=False)
            q.where.append(c)
            bound.update(nb)
        for _ in range(r.randint(0, 4)):
            x = r.random()
            res = None
            if x < 0.4:
                res = self.pattern(bound)
            elif x < 0.55:
                res = self.predicate(bound)
            elif x < 0.65:
                res = self.function(bound)
            elif x < 0.75 and self.on("not"):
                res = self.negation(bound)
            elif x < 0.87 and self.on("or"):
                res = self.disjunction(bound)
            elif self.on("rules"):
                res = self.rule(q, bound)
            if res is None:
                res = self.pattern(bound)
            q.where.append(res[0])
            bound.update(res[1])
        self.finds(q, bound)
        return q

    def finds(self, q, bound):
        r = self.rnd
        names = sorted(bound)
        x = r.random()
        if x < 0.3 and self.on("agg"):  # aggregates
            groups = r.sample(names, k=min(len(names), r.choice([0, 0, 1, 1, 2])))
            rest = [v for v in names if v not in groups] or names
            for _ in range(r.randint(1, 2)):
                v = r.choice(rest)
                t = bound[v]
                fns = ["count", "count-distinct"]
                if t in COMPARABLE:
                    fns += ["min", "max", "distinct"]
                if t in NUMERIC:
                    fns += ["sum", "avg", "sum", "avg", "variance", "stddev", "median"]
                if t in COMPARABLE and t != "boolean":
                    fns += ["minn", "maxn"]
                fn = r.choice(fns)
                n = None
                if fn in ("minn", "maxn"):
                    fn, n = fn[:3], r.randint(1, 3)
                if fn in ("count", "count-distinct"):
                    ot = "long"
                elif fn in ("avg", "variance", "stddev", "median"):
                    ot = "float"
                elif fn == "sum":
                    ot = "float" if t == "double" else "long"
                elif fn == "distinct":
                    ot = ("set", t)
                elif n is not None:
                    ot = ("list", t)
                else:
                    ot = t
                q.find.append(("agg", (fn, n, v), ot))
            for g in groups:
                q.find.insert(0, ("var", g, bound[g]))
            used = set(groups) | {f[1][2] for f in q.find}
            others = [v for v in names if v not in used]
            if others and r.random() < 0.5:
                q.with_ = r.sample(others, k=1)
            if not groups and len(q.find) == 1 and r.random() < 0.4:
                q.spec = "scalar"
            elif not groups and r.random() < 0.3:
                q.spec = "tuple"
            return
        k = min(len(names), r.choice([1, 1, 2, 2, 3]))
        chosen = r.sample(names, k=k)
        q.find = [("var", v, bound[v]) for v in chosen]
        ents = [i for i, f in enumerate(q.find) if f[2] == "entity"]
        if ents and r.random() < 0.15 and self.on("pull"):
            from .gen_pull import PGen
            i = r.choice(ents)
            p = PGen(r, self.attrs).pattern()
            q.find[i] = ("pull", (q.find[i][1], p), ("pull", p))
        y = r.random()
        if y < 0.15:
            q.spec, q.find = "scalar", q.find[:1]
        elif y < 0.3:
            q.spec, q.find = "coll", q.find[:1]
        elif y < 0.4:
            q.spec = "tuple"
