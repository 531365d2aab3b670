"""Transactions, abstractly, and their rendering as mentat EDN and as DataScript's JS transaction data.

A form is one of
    ("map", eref, {attr_ident: value or [values]})     a map form; eref None = no :db/id (an upsert by :e/name)
    ("add", eref, attr_ident, value)
    ("retract", eref, attr_ident, value)
    ("retractEntity", eref)
an eref is ("temp", label) (the tempid "t<label>") or ("lookup", label) (the lookup ref [:e/name "n<label>"]), and a
ref value is an eref or ("nested", {attr: value}) (a nested map, for component attributes).

Two generators: `initial_db` (the databases the queries and pulls run on: every entity named, a few hundred
datoms, then transactions of additions, retractions and cardinality-one replacements), and `random_txs` (the
transaction kind: tempids, upserts by identity, retractions, :db/retractEntity, replacement, unique conflicts).
"""
from .model import CODE, NAME, ds_val, m_val


def _m_eref(er):
    kind, label = er
    return f'"t{label}"' if kind == "temp" else f'[:{NAME} "n{label}"]'


def _ds_eref(er):
    kind, label = er
    return f"t{label}" if kind == "temp" else [NAME, f"n{label}"]


def _m_value(attr, v):
    if attr.type == "ref":
        if v[0] == "nested":
            return _m_map(None, v[1], attrs_of(attr))
        return _m_eref(v)
    return m_val(attr.type, v)


def _ds_value(attr, v):
    if attr.type == "ref":
        if v[0] == "nested":
            return _ds_map(None, v[1], attrs_of(attr))
        return _ds_eref(v)
    return ds_val(attr.type, v)


_ATTRS = {}


def attrs_of(_attr):
    return _ATTRS


def _m_map(eref, body, attrs):
    parts = [] if eref is None else [f":db/id {_m_eref(eref)}"]
    for k, v in body.items():
        a = attrs[k]
        if isinstance(v, list):
            parts.append(f":{k} [{' '.join(_m_value(a, x) for x in v)}]")
        else:
            parts.append(f":{k} {_m_value(a, v)}")
    return "{" + " ".join(parts) + "}"


def _ds_map(eref, body, attrs):
    out = {} if eref is None else {":db/id": _ds_eref(eref)}
    for k, v in body.items():
        a = attrs[k]
        out[k] = [_ds_value(a, x) for x in v] if isinstance(v, list) else _ds_value(a, v)
    return out


def render(tx, attrs):
    """(mentat EDN text, DataScript JSON-able list) of one transaction."""
    _ATTRS.clear()
    _ATTRS.update(attrs)
    m, d = [], []
    for f in tx:
        op = f[0]
        if op == "map":
            m.append(_m_map(f[1], f[2], attrs))
            d.append(_ds_map(f[1], f[2], attrs))
        elif op in ("add", "retract"):
            a = attrs[f[2]]
            m.append(f"[:db/{op} {_m_eref(f[1])} :{f[2]} {_m_value(a, f[3])}]")
            d.append([f":db/{op}", _ds_eref(f[1]), f[2], _ds_value(a, f[3])])
        elif op == "retractEntity":
            m.append(f"[:db/retractEntity {_m_eref(f[1])}]")
            d.append([":db/retractEntity", _ds_eref(f[1])])
        else:
            raise ValueError(op)
    return "[" + "\n ".join(m) + "]", d


def tx_text(tx, attrs):
    return render(tx, attrs)[0]


# ----------------------------------------------------------------------------------------------- query databases

def _rand_attr_value(rnd, a, labels):
    from .model import rand_value
    return rand_value(rnd, a.type, labels)


def initial_db(rnd, attrs, n_entities):
    """Transactions that build a query database: tx 1 names every entity (tempid "t<i>", :e/name "n<i>") and gives
    it random values; later transactions (lookup refs) add values, retract existing ones and replace
    cardinality-one values. Returns (txs, model): model[label][ident] = set of values (refs as labels), the state a
    correct engine must hold, computed by Datomic's rules."""
    by = {a.ident: a for a in attrs}
    plain = [a for a in attrs if a.ident not in (NAME, CODE) and not a.component]
    labels = list(range(1, n_entities + 1))
    model = {i: {} for i in labels}
    part = by.get("a/part")
    # components: a few entities are parts, each owned by one owner that is not itself a part
    parts = rnd.sample(labels, k=max(1, n_entities // 6)) if part else []
    owners = [i for i in labels if i not in parts]
    tx1 = []
    codes = rnd.sample(range(100, 1000), n_entities)
    for i in labels:
        body = {NAME: f"n{i}"}
        model[i][NAME] = {f"n{i}"}
        if rnd.random() < 0.4:
            body[CODE] = codes[i - 1]
            model[i][CODE] = {codes[i - 1]}
        for a in rnd.sample(plain, k=rnd.randint(2, min(9, len(plain)))):
            if a.many:
                vs = list({_rand_attr_value(rnd, a, labels) for _ in range(rnd.randint(1, 3))})
                body[a.ident] = [("temp", v) for v in vs] if a.type == "ref" else vs
                model[i][a.ident] = set(vs)
            else:
                v = _rand_attr_value(rnd, a, labels)
                body[a.ident] = ("temp", v) if a.type == "ref" else v
                model[i][a.ident] = {v}
        tx1.append(("map", ("temp", i), body))
    if part:
        for p in parts:
            o = rnd.choice(owners)
            cur = model[o].get(part.ident, set())
            if not part.many and cur:
                continue
            model[o].setdefault(part.ident, set()).add(p)
            tx1.append(("add", ("temp", o), part.ident, ("temp", p)))
    txs = [tx1]
    for _ in range(rnd.randint(1, 3)):
        tx, touched = [], set()
        for _ in range(rnd.randint(3, 12)):
            i = rnd.choice(labels)
            if i in touched:
                continue
            touched.add(i)
            a = rnd.choice(plain)
            cur = model[i].get(a.ident, set())
            r = rnd.random()
            if cur and r < 0.4:  # retract an existing value
                v = rnd.choice(sorted(cur, key=repr))
                cur.discard(v)
                tx.append(("retract", ("lookup", i), a.ident, ("lookup", v) if a.type == "ref" else v))
            else:  # add (cardinality one: replaces)
                v = _rand_attr_value(rnd, a, labels)
                if a.many:
                    cur.add(v)
                else:
                    cur = {v}
                model[i][a.ident] = cur
                tx.append(("add", ("lookup", i), a.ident, ("lookup", v) if a.type == "ref" else v))
        if tx:
            txs.append(tx)
    for i in labels:
        model[i] = {k: v for k, v in model[i].items() if v}
    return txs, model


def model_datoms(model):
    """{(name, ident, value)} of a model (refs as names)."""
    return {(f"n{i}", k, v) for i, attrs in model.items() for k, vs in attrs.items() for v in vs}



# ------------------------------------------------------------------------------------------ transaction sequences

def random_txs(rnd, attrs, n_txs, n_names=14):
    """A sequence of transactions over the names n1..n<n_names>. Each transaction names every entity it touches
    at most once as a subject (so no transaction asserts two values of a cardinality-one attribute of one entity,
    which Datomic refuses and DataScript resolves as last-wins), never retracts :e/name alone (the mapping of
    entity ids goes through it), and uses a tempid as a value only when a form of the same transaction makes it an
    entity. Transactions may fail (a lookup ref to a name not yet there, a unique-value conflict): the failures
    are compared too."""
    by = {a.ident: a for a in attrs}
    plain = [a for a in attrs if a.ident not in (NAME, CODE) and not a.component]
    part = by.get("a/part")
    labels = list(range(1, n_names + 1))
    known = set()  # names that probably exist (the generator's guess; the engines decide)
    txs = []
    for _ in range(n_txs):
        tx, subjects, temps, code_set = [], set(), set(), []
        retracted = set()
        forms = rnd.randint(1, 6)

        def free():
            c = [i for i in labels if i not in subjects and i not in retracted]
            return rnd.choice(c) if c else None

        def ref_value(a):
            # a tempid defined in this transaction, or a lookup ref to a known name, or a nested map for components
            if a.component and rnd.random() < 0.7:
                j = free()
                if j is not None:
                    subjects.add(j)
                    known.add(j)
                    body = {NAME: f"n{j}"}
                    for b in rnd.sample(plain, k=rnd.randint(0, 2)):
                        if b.type != "ref":
                            v = _rand_attr_value(rnd, b, labels)
                            body[b.ident] = [v] if b.many else v
                    return ("nested", body)
            c = [j for j in temps] if rnd.random() < 0.5 else []
            if c:
                return ("temp", rnd.choice(c))
            c = [j for j in known if j not in retracted]
            if c:
                return ("lookup", rnd.choice(sorted(c)))
            return None

        def body_for(k):
            body = {}
            for a in rnd.sample(plain + ([part] if part else []), k=rnd.randint(0, 4)):
                if a.type == "ref":
                    vs = [v for v in (ref_value(a) for _ in range(rnd.randint(1, 2) if a.many else 1)) if v]
                    if not vs:
                        continue
                    body[a.ident] = vs if a.many else vs[0]
                else:
                    vs = list({_rand_attr_value(rnd, a, labels) for _ in range(rnd.randint(1, 3) if a.many else 1)})
                    body[a.ident] = vs if a.many else vs[0]
            # one :e/code per transaction: moving a unique value between entities in one transaction is accepted
            # by Datomic (it checks the transaction's result) and refused by DataScript depending on the order of
            # the forms (departure 11)
            if rnd.random() < 0.25 and not code_set:
                code_set.append(k)
                body[CODE] = rnd.randint(1, 12)
            return body

        for _ in range(forms):
            k = free()
            if k is None:
                break
            x = rnd.random()
            if x < 0.35:  # map with a tempid and the name: creates, or upserts into the named entity
                subjects.add(k)
                temps.add(k)
                body = {NAME: f"n{k}"}
                body.update(body_for(k))
                tx.append(("map", ("temp", k), body))
                known.add(k)
            elif x < 0.45:  # map without :db/id: upsert by identity
                subjects.add(k)
                body = {NAME: f"n{k}"}
                body.update(body_for(k))
                tx.append(("map", None, body))
                known.add(k)
            elif x < 0.55:  # map on a lookup ref
                subjects.add(k)
                body = body_for(k)
                if body:
                    tx.append(("map", ("lookup", k), body))
            elif x < 0.72:  # :db/add by lookup ref (cardinality one: replaces)
                subjects.add(k)
                a = rnd.choice(plain)
                v = ref_value(a) if a.type == "ref" else _rand_attr_value(rnd, a, labels)
                if v is not None and v[0] != "nested" if a.type == "ref" else True:
                    tx.append(("add", ("lookup", k), a.ident, v))
            elif x < 0.9:  # :db/retract of a value from the small domains (often one the entity holds)
                subjects.add(k)
                a = rnd.choice(plain)
                if a.type == "ref":
                    c = [j for j in known if j not in retracted]
                    if not c:
                        continue
                    v = ("lookup", rnd.choice(sorted(c)))
                else:
                    v = _rand_attr_value(rnd, a, labels)
                tx.append(("retract", ("lookup", k), a.ident, v))
            else:
                if k not in known:
                    continue
                subjects.add(k)
                retracted.add(k)
                tx.append(("retractEntity", ("lookup", k)))
        # a ref value may point at an entity retracted later in the same transaction: drop such forms
        tx = [f for f in tx if not _mentions(f, retracted) or f[0] == "retractEntity"]
        # :db/retractEntity goes in a transaction of its own: it also retracts the entity's components, to any
        # depth, which other forms of the transaction may touch; Datomic expands it against the database before
        # the transaction (a datom both added and retracted is :db.error/datoms-conflict, one added to a
        # component stays), DataScript applies forms in order (departure 10)
        if any(f[0] == "retractEntity" for f in tx):
            tx = [f for f in tx if f[0] == "retractEntity"]
        if tx:
            txs.append(tx)
    return txs


def _mentions(f, labels):
    def walk(x):
        if isinstance(x, tuple):
            if len(x) == 2 and x[0] in ("temp", "lookup") and x[1] in labels:
                return True
            return any(walk(y) for y in x)
        if isinstance(x, dict):
            return any(walk(y) for y in x.values())
        if isinstance(x, list):
            return any(walk(y) for y in x)
        return False
    return walk(f[1:] if f[0] != "retractEntity" else ())


def mentions_lookup(f, present):
    """Whether form f uses a lookup ref to a label not in present."""
    def walk(x):
        if isinstance(x, tuple):
            if len(x) == 2 and x[0] == "lookup" and isinstance(x[1], int):
                return x[1] not in present
            return any(walk(y) for y in x)
        if isinstance(x, dict):
            return any(walk(y) for y in x.values())
        if isinstance(x, list):
            return any(walk(y) for y in x)
        return False
    return walk(f)
