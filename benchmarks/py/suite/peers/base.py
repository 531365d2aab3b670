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
