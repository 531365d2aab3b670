"""The random databases of the differential tests: a schema with every value type both engines hold, small value
domains (so that joins and predicates hit), and the rendering of a value in each engine's dialect.

A value is a pair (type, python value): string str, long int, double float (binary fractions only, so sums are
exact), boolean bool, keyword "ns/name" (alphanumeric, so text order is Clojure's keyword order), instant int
milliseconds, uuid str (first hex digit of both halves below 8, so Java's signed UUID order, DuckDB's order and the
text order agree), uri str, ref int (an entity's label; its name is "n<label>").

mentat reads EDN with typed literals (`:k/a`, `#inst "..."`, `#uuid "..."`, `#uri "..."`, lookup refs
`[:e/name "n3"]`). DataScript's JS API names attributes by strings ("a/s0") and holds keyword values as strings
(":k/a"), instants as numbers (ms) and uuids and uris as strings.
"""
import datetime as dt
import json
import random

NAME = "e/name"  # the unique identity attribute every entity has: entity ids of the two engines map through it
CODE = "e/code"  # a long with :db.unique/value

TYPES = ["string", "long", "double", "boolean", "keyword", "instant", "uuid", "ref"]
COMPARABLE = {"string", "long", "double", "keyword", "instant", "boolean", "uuid"}
NUMERIC = {"long", "double"}

# text with quotes, backslashes, spaces, tabs, newlines, accents and CJK (all in the BMP, where UTF-8 byte order,
# DuckDB's, and UTF-16 code-unit order, Java's and JS's, agree), and the empty string
STRINGS = ["a", "b", "c", "ab", "ba", "abc", "bc", "ca", "A", "Zed", "", "a b", 'q"t', "back\\slash", "tab\t",
           "line\nbreak", "é", "été", "日本"]
LONGS = list(range(-3, 13))
DOUBLES = [-2.5, -0.25, 0.5, 1.0, 1.5, 2.25, 3.75, 10.5]
KEYWORDS = ["k/a", "k/b", "k/c", "k/ab", "k/b1", "j/a", "j/zz", "kk/a"]
_EPOCH = dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc)
INSTANTS = [int((_EPOCH + dt.timedelta(days=d, seconds=s)).timestamp() * 1000) + ms
            for d, s, ms in [(0, 0, 0), (0, 1, 250), (3, 0, 0), (40, 7, 1), (400, 0, 999), (-700, 5, 0)]]
UUIDS = ["%08x-0000-4000-%04x-000000000000" % (0x10000000 * i + i, 0x1000 * i + 7) for i in range(6)]
BOOLEANS = [True, False]

DOMAIN = {"string": STRINGS, "long": LONGS, "double": DOUBLES, "keyword": KEYWORDS, "instant": INSTANTS,
          "uuid": UUIDS, "boolean": BOOLEANS}


class Attr:
    def __init__(self, ident, vtype, many=False, unique=None, component=False):
        self.ident, self.type, self.many, self.unique, self.component = ident, vtype, many, unique, component

    def m(self):
        return ":" + self.ident

    def ds(self):
        return json.dumps(self.ident)

    def __repr__(self):
        return f"<{self.ident} {self.type}{' many' if self.many else ''}>"


def make_schema(rnd: random.Random, comp=True):
    """`:e/name` (string, identity), `:e/code` (long, unique value) and two attributes of each value type, each
    cardinality one or many at random; a component ref attribute when comp."""
    attrs = [Attr(NAME, "string", unique="identity"), Attr(CODE, "long", unique="value")]
    short = {"string": "s", "long": "l", "double": "d", "boolean": "b", "keyword": "k", "instant": "i",
             "uuid": "u", "ref": "r"}
    for t in TYPES:
        for i in range(2):
            attrs.append(Attr(f"a/{short[t]}{i}", t, many=rnd.random() < 0.5))
    if comp:
        attrs.append(Attr("a/part", "ref", many=rnd.random() < 0.6, component=True))
    return attrs


def schema_edn(attrs):
    out = []
    for a in attrs:
        s = f"{{:db/ident {a.m()} :db/valueType :db.type/{a.type} :db/cardinality :db.cardinality/" \
            f"{'many' if a.many else 'one'}"
        if a.unique:
            s += f" :db/unique :db.unique/{a.unique}"
        if a.component:
            s += " :db/isComponent true"
        out.append(s + "}")
    return "[" + "\n ".join(out) + "]"


def schema_ds(attrs):
    out = {}
    for a in attrs:
        s = {}
        if a.type == "ref":
            s[":db/valueType"] = ":db.type/ref"
        if a.many:
            s[":db/cardinality"] = ":db.cardinality/many"
        if a.unique:
            s[":db/unique"] = ":db.unique/" + a.unique
        if a.component:
            s[":db/isComponent"] = True
        if s:
            out[a.ident] = s
    return out


def rand_value(rnd, vtype, labels=None):
    if vtype == "ref":
        return rnd.choice(labels)
    return rnd.choice(DOMAIN[vtype])


def iso(ms):
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def m_val(vtype, v, ids=None):
    """mentat EDN of a value. A ref is a lookup ref by name (ids=None) or an entid (ids: label -> entid)."""
    if vtype == "string":
        return json.dumps(v)
    if vtype == "boolean":
        return "true" if v else "false"
    if vtype in ("long",):
        return str(v)
    if vtype == "double":
        return repr(float(v))
    if vtype == "keyword":
        return ":" + v
    if vtype == "instant":
        return f'#inst "{iso(v)}"'
    if vtype == "uuid":
        return f'#uuid "{v}"'
    if vtype == "uri":
        return f'#uri "{v}"'
    if vtype == "ref":
        return str(ids[v]) if ids is not None else f'[:{NAME} "n{v}"]'
    raise ValueError(vtype)


def ds_val(vtype, v, in_query=False):
    """DataScript's value: JSON for transactions and inputs; EDN text for a query constant (in_query)."""
    if vtype == "keyword":
        v = ":" + v
    if vtype == "ref":
        return f'["{NAME}" "n{v}"]' if in_query else v
    if in_query:
        if vtype == "boolean":
            return "true" if v else "false"
        if vtype == "double":
            return repr(float(v))
        return json.dumps(v)
    return v
