"""What every peer offers the runner."""
import re

TITLE_IDX = re.compile(r"Issue (\d+):")


class Unsupported(Exception):
    """A peer cannot run a scenario or scale; the message is the reason written into summary.md."""


class Peer:
    name = "?"
    # scenario -> reason, for scenarios this peer cannot run at all
    cannot = {}
    # can several client threads run at once (else the runner still drives N threads; calls serialise)
    parallel_note = ""

    def __init__(self, ds, workdir, opts):
        self.ds = ds
        self.workdir = workdir
        self.opts = opts
        self.idx_e = None  # numpy array or list: issue idx -> the peer's entity id

    def load(self):
        """Loads the initial data; returns {"datoms", "seconds", "bytes", "method"}."""
        raise NotImplementedError

    def apply_history(self):
        raise NotImplementedError

    def session(self):
        """A client for one thread (own connection/cursor)."""
        raise NotImplementedError

    def settle(self, ds):
        """Called once before the timed reads: a peer with work it does once per process (caches, indexes) may
        finish it here, as it would have long before in a running service. The first-call cost is what
        cold_vs_warm measures."""

    def unsupported(self, scenario):
        return self.cannot.get(scenario)

    def cold_spec(self):
        """JSON-able spec for coldstart.py (a new process), or raise Unsupported."""
        raise Unsupported("no persistent store to reopen")

    def close(self):
        pass


def normalise_pull(obj):
    """Flattens a pull result (dict/STRUCT, list of rows, or text) into {title, state, priority, labels, created_at_ms}."""
    out = {}

    def walk(k, v):
        k = str(k)
        if isinstance(v, dict) and not any(x in k for x in ("label", "assignee", "reporter")):
            for kk, vv in v.items():
                walk(kk, vv)
            return
        if k.endswith("title"):
            out["title"] = v
        elif k.endswith("state"):
            out["state"] = v if not isinstance(v, dict) else v.get("db/ident", v)
        elif k.endswith("priority"):
            out["priority"] = v
        elif k.endswith("label"):
            out["labels"] = len(v) if isinstance(v, (list, tuple)) else (0 if v is None else 1)
    if isinstance(obj, dict):
        for k, v in obj.items():
            walk(k, v)
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            if isinstance(x, dict):
                for k, v in x.items():
                    walk(k, v)
    return out


class Ids:
    """Entity ids the non-mentat peers give the generated entities: users 1.., then labels, then issues."""

    def __init__(self, ds):
        self.nu = len(ds.users)
        self.nl = len(ds.labels)
        self.user = {r[1]: i + 1 for i, r in enumerate(ds.users)}
        self.label = {r[1]: self.nu + 1 + i for i, r in enumerate(ds.labels)}
        self.base = self.nu + self.nl + 1

    def issue(self, idx):
        return self.base + int(idx)


def initial_tx(i_issue_row):
    """The peers' initial load tx numbers: 1 for users and labels, then one per 500 issues (as the EDN files)."""
    return 2 + i_issue_row // 500


HIST_TX0 = 1_000_000


def eav_rows(ds, ids):
    """The initial datoms (e, ident, v, tx) of the workload: keywords as text, instants as Unix ms, refs as ids."""
    from ..workload import ms_of
    for _, email, name in ds.users:
        e = ids.user[email]
        yield e, ":user/email", email, 1
        yield e, ":user/name", name, 1
    for _, name in ds.labels:
        yield ids.label[name], ":label/name", name, 1
    labels = {}
    for idx, lab in ds.issue_labels:
        labels.setdefault(int(idx), []).append(lab)
    for k, (idx, title, state, prio, ae, re_, ca) in enumerate(ds.issues):
        i = int(idx)
        e, tx = ids.issue(i), initial_tx(k)
        yield e, ":issue/title", title, tx
        yield e, ":issue/state", state, tx
        yield e, ":issue/priority", int(prio), tx
        yield e, ":issue/assignee", ids.user[ae], tx
        yield e, ":issue/reporter", ids.user[re_], tx
        yield e, ":issue/created-at", ms_of(ca), tx
        for lab in labels.get(i, ()):
            yield e, ":issue/label", ids.label[lab], tx


def last_initial_tx(ds):
    return initial_tx(len(ds.issues) - 1)


def since_tx(ds):
    k = ds.since_basis_batches
    return HIST_TX0 + k - 1 if k > 0 else last_initial_tx(ds)
