"""Random pull patterns over a schema of model.py, rendered for mentat and for DataScript.

A pattern is a list of elements:
    ("id",)                                  :db/id
    ("star",)                                *
    ("attr", a, opts)                        an attribute, opts a dict of :as / :limit / :default
    ("rev", a, sub)                          a reverse ref :ns/_name, sub None or a pattern
    ("ref", a, sub)                          {:ref sub}: sub a pattern, "..." or a depth (int)
"""
import json

from .model import ds_val, m_val


def _opts(o, ds):
    out = []
    if "as" in o:
        out.append(f':as "{o["as"]}"')
    if "limit" in o:
        out.append(f":limit {o['limit']}")
    if "default" in o:
        t, v = o["default"]
        out.append(":default " + (ds_val(t, v, in_query=True) if ds else m_val(t, v)))
    return " ".join(out)


def _name(a, ds, rev=False):
    ns, n = a.ident.split("/")
    ident = f"{ns}/_{n}" if rev else a.ident
    return json.dumps(ident) if ds else ":" + ident


def render(p, ds):
    out = []
    for el in p:
        k = el[0]
        if k == "id":
            out.append(":db/id")
        elif k == "star":
            out.append("*")
        elif k == "attr":
            _, a, o = el
            # Datomic's grammar: attr-expr = [attr-name attr-option+] (the list form is read too, not generated)
            out.append(f"[{_name(a, ds)} {_opts(o, ds)}]" if o else _name(a, ds))
        elif k == "rev":
            _, a, sub = el
            out.append(_name(a, ds, True) if sub is None else "{" + _name(a, ds, True) + " " + render(sub, ds) + "}")
        elif k == "ref":
            _, a, sub = el
            s = sub if sub == "..." else str(sub) if isinstance(sub, int) else render(sub, ds)
            out.append("{" + _name(a, ds) + " " + s + "}")
    return "[" + " ".join(out) + "]"


DEFAULT_FEATURES = {"star", "as", "limit", "default"}  # recursion ({:ref ...}, {:ref n}) is off: departure 7


class PGen:
    def __init__(self, rnd, attrs, features=DEFAULT_FEATURES):
        self.rnd = rnd
        self.attrs = [a for a in attrs]
        self.refs = [a for a in attrs if a.type == "ref"]
        self.features = features
        self.n_as = 0

    def on(self, f):
        return self.features is None or f in self.features

    def pattern(self, depth=0):
        r = self.rnd
        # a nested pattern always asks for :db/id, so that no nested map is empty: what an empty nested map
        # becomes is not documented by Datomic, and DataScript drops it (departure 8)
        out, used = ([("id",)] if depth else []), set()
        if r.random() < 0.1 and self.on("star"):
            out.append(("star",))
        for _ in range(r.randint(1, 4)):
            x = r.random()
            a = r.choice(self.attrs)
            if x < 0.12:
                if ("id",) not in out:
                    out.append(("id",))
                continue
            key = a.ident
            if x < 0.55 or a.type != "ref" and x < 0.85:
                if key in used:
                    continue
                o = {}
                if r.random() < 0.2 and self.on("as"):
                    self.n_as += 1
                    o["as"] = f"x{self.n_as}"
                if a.many and a.type not in ("ref", "uuid") and r.random() < 0.3 and self.on("limit"):
                    o["limit"] = r.randint(1, 3)
                if a.type != "ref" and r.random() < 0.25 and self.on("default"):
                    from .model import DOMAIN
                    o["default"] = (a.type, r.choice(DOMAIN[a.type]))
                used.add(key)
                out.append(("attr", a, o))
            elif x < 0.75 and self.refs:
                a = r.choice(self.refs)
                if "_" + a.ident in used:
                    continue
                used.add("_" + a.ident)
                sub = self.pattern(depth + 1) if depth < 2 and r.random() < 0.5 else None
                out.append(("rev", a, sub))
            elif self.refs:
                a = r.choice(self.refs)
                if a.ident in used:
                    continue
                used.add(a.ident)
                y = r.random()
                if y < 0.12 and self.on("recursion"):
                    sub = "..."
                elif y < 0.22 and self.on("recursion"):
                    sub = r.randint(1, 3)
                elif depth < 2:
                    sub = self.pattern(depth + 1)
                else:
                    sub = [("id",)]
                out.append(("ref", a, sub))
        return out or [("id",)]
