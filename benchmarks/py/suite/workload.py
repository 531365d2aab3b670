"""The issue-tracker workload as the suite sees it: the generator's files, the Datalog texts, the truth checks and
the scrambled Zipfian key chooser. Everything a peer needs to load the same data is read from `mentat-gen` output."""
import csv
import datetime as _dt
import json
import pathlib
import subprocess
import threading

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[3]
GEN = ROOT / "target" / "release" / "mentat-gen"
STATES = [":state/open", ":state/in-progress", ":state/closed", ":state/resolved", ":state/reopened"]

Q1 = "[:find ?e ?name :in $ ?email :where [?e :user/email ?email] [?e :user/name ?name]]"
Q2 = ("[:find ?i ?title ?state :in $ ?email :where [?u :user/email ?email] [?i :issue/assignee ?u] "
      "[?i :issue/title ?title] [?i :issue/state ?state]]")
Q3 = "[:find ?state (count ?i) :where [?i :issue/state ?state]]"
Q4 = ("[:find ?i ?title ?priority :in $ ?min :where [?i :issue/state :state/open] [?i :issue/priority ?priority] "
      "[?i :issue/title ?title] [(>= ?priority ?min)]]")
QSINCE = "[:find ?i :where [?i :issue/state _]]"
QIB = "[:find ?e ?name :in $ [?email ...] :where [?e :user/email ?email] [?e :user/name ?name]]"
QREAD = "[:find ?s :in $ ?e :where [?e :issue/state ?s]]"
QTITLES = "[:find ?e ?t :in $ [?t ...] :where [?e :issue/title ?t]]"

# scenario -> kind: "read" scenarios are timed one client at a time; the others have their own drivers
READ_SCENARIOS = ["floor", "q1", "q2", "q3", "q4", "as_of", "since", "input_bindings", "pull"]
ALL_SCENARIOS = ["bulk_load"] + READ_SCENARIOS + ["concurrency_sweep", "cold_vs_warm", "write_mixed", "update_heavy",
                                                 "single_tx", "transact_many", "native"]


_INDEX_LOCK = threading.RLock()


class WrongAnswer(Exception):
    pass


def generate(scale, data_root, seed=42):
    """Runs mentat-gen for `scale` into data_root/scale unless truth.json is already there (the cache)."""
    out = pathlib.Path(data_root) / scale
    if (out / "truth.json").exists():
        return out
    if not GEN.exists():
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "benchmarks"], cwd=ROOT, check=True)
    subprocess.run([str(GEN), "--scale", scale, "--seed", str(seed), "--out", str(out)], check=True)
    return out


def _csv(path):
    with open(path, newline="") as f:
        r = csv.reader(f)
        next(r)
        return list(r)


def ms_of(created_at):
    """'2025-03-04 05:06:00' (UTC) -> Unix ms."""
    d = _dt.datetime.strptime(created_at, "%Y-%m-%d %H:%M:%S").replace(tzinfo=_dt.timezone.utc)
    return int(d.timestamp() * 1000)


class Dataset:
    """The generator's output of one scale, read once and shared by every peer."""

    def __init__(self, path):
        self.path = pathlib.Path(path)
        self.truth = json.loads((self.path / "truth.json").read_text())
        self.scale = self.truth["scale"]
        self._rows = {}

    def rows(self, name):
        if name not in self._rows:
            self._rows[name] = _csv(self.path / f"{name}.csv")
        return self._rows[name]

    @property
    def users(self):  # [u, email, name]
        return self.rows("users")

    @property
    def labels(self):  # [n, name]
        return self.rows("labels")

    @property
    def issues(self):  # [idx, title, state, priority, assignee_email, reporter_email, created_at]
        return self.rows("issues")

    @property
    def issue_labels(self):  # [idx, label_name]
        return self.rows("issue_labels")

    def history_batches(self):
        """[[(idx, new_state), ...] per batch] in order."""
        out = [[] for _ in range(self.truth["history"]["batches"])]
        for idx, b, st in self.rows("history"):
            out[int(b)].append((int(idx), st))
        return out

    def hist_files(self):
        return sorted((self.path / "hist").glob("*.csv"))

    def tx_files(self):
        return sorted((self.path / "tx").glob("*.edn"))

    # --- truth for every user and issue, from the generator's CSVs (the keys of the read scenarios are drawn
    # uniformly over all of them, so that no answer cache can carry a figure) ---
    def _index(self):
        # built once, under a lock: client threads (write_mixed's readers) may be the first to ask, and a thread
        # that saw half an index once gave a wrong truth
        with _INDEX_LOCK:
            if hasattr(self, "_names"):
                return
            final = {}
            for idx, _b, st in self.rows("history"):
                final[int(idx)] = st
            labels = {}
            for idx, name in self.issue_labels:
                labels.setdefault(int(idx), []).append(name)
            issues, assigned = {}, {}
            for idx, title, state, prio, assignee, _reporter, created in self.issues:
                i = int(idx)
                rec = {"idx": i, "title": title, "initial_state": state, "final_state": final.get(i, state),
                       "priority": int(prio), "labels": sorted(labels.get(i, [])), "created_at_ms": ms_of(created)}
                issues[i] = rec
                assigned.setdefault(assignee, []).append(rec)
            self._issues, self._assigned = issues, assigned
            self._names = {email: name for _, email, name in self.users}

    def user_name(self, email):
        self._index()
        return self._names[email]

    def assigned(self, email):
        """The issues assigned to a user: [{title, initial_state, final_state, ...}]."""
        self._index()
        return self._assigned.get(email, [])

    def issue(self, idx):
        """{title, final_state (as `state`), priority, labels, created_at_ms} of any issue."""
        self._index()
        r = self._issues[idx]
        return dict(r, state=r["final_state"])

    def emails(self):
        return [r[1] for r in self.users]

    # --- what the scenarios ask ---
    def probe_email(self, i=0):
        return self.truth["probe_users"][i % len(self.truth["probe_users"])]["email"]

    def ib_emails(self):
        return [p["email"] for p in self.truth["input_bindings"]][:100]

    def protected_idxs(self):
        """Issues the writers never touch, so the read answers stay checkable while writes run."""
        s = {i["idx"] for p in self.truth["probe_users"] for i in p["issues"]}
        s |= {p["idx"] for p in self.truth["probe_issues"]}
        return s

    def writable_idxs(self):
        prot = self.protected_idxs()
        return np.array([i for i in range(self.truth["entities"]["issues"]) if i not in prot], dtype=np.int64)

    @property
    def since_basis_batches(self):
        return self.truth["since"]["history_batches_before_basis"]


# --- truth checks: each takes the raw rows of a peer (columns in the find spec's order) ---

def _fail(scenario, peer, msg):
    raise WrongAnswer(f"WRONG ANSWER: {peer} {scenario}: {msg}")


def check(scenario, rows, ds, peer, arg=None):
    t = ds.truth
    if scenario in ("floor", "floor_prepared"):
        if [tuple(r) for r in rows] != [(1,)]:
            _fail(scenario, peer, f"SELECT 1 gave {rows[:3]}")
    elif scenario == "q1":
        names = [r[1] for r in rows]
        if names != [ds.user_name(arg)]:
            _fail(scenario, peer, f"email {arg}: got {names[:5]}, expected [{ds.user_name(arg)!r}]")
    elif scenario in ("q2", "as_of"):
        key = "final_state" if scenario == "q2" else "initial_state"
        want = sorted((i["title"], i[key]) for i in ds.assigned(arg))
        got = sorted((r[1], str(r[2])) for r in rows)
        if got != want:
            _fail(scenario, peer, f"email {arg}: {len(got)} rows, expected {len(want)}; "
                                  f"first difference {sorted(set(got) ^ set(want))[:3]}")
    elif scenario == "q3":
        got = {str(k): int(v) for k, v in rows}
        if got != t["state_counts"]["final"]:
            _fail(scenario, peer, f"got {got}, expected {t['state_counts']['final']}")
    elif scenario == "q4":
        bad = [r for r in rows if int(r[2]) < 4]
        if len(rows) != t["open_priority_ge_4"]["final"] or bad:
            _fail(scenario, peer, f"{len(rows)} rows ({len(bad)} with priority < 4), "
                                  f"expected {t['open_priority_ge_4']['final']}")
    elif scenario == "since":
        if len(rows) != t["since"]["count"]:
            _fail(scenario, peer, f"{len(rows)} rows, expected {t['since']['count']}")
    elif scenario == "input_bindings":
        got = sorted(r[1] for r in rows)
        want = sorted(ds.user_name(e) for e in set(arg))
        if got != want:
            _fail(scenario, peer, f"{len(got)} names, expected {len(want)}")
    elif scenario == "pull":
        # rows: the peer's pull normalised to a dict {title, state, priority, labels (set of names or count)}
        p = ds.issue(arg)
        d = rows
        errs = []
        if d.get("title") != p["title"]:
            errs.append(f"title {d.get('title')!r} != {p['title']!r}")
        if str(d.get("state")) != p["state"]:
            errs.append(f"state {d.get('state')!r} != {p['state']!r}")
        if int(d.get("priority", -1)) != p["priority"]:
            errs.append(f"priority {d.get('priority')!r} != {p['priority']!r}")
        lab = d.get("labels")
        if isinstance(lab, int):
            if lab != len(p["labels"]):
                errs.append(f"{lab} labels != {len(p['labels'])}")
        elif lab is not None and sorted(lab) != sorted(p["labels"]):
            errs.append(f"labels {sorted(lab)} != {p['labels']}")
        if "created_at_ms" in d and d["created_at_ms"] is not None and int(d["created_at_ms"]) != p["created_at_ms"]:
            errs.append(f"created_at {d['created_at_ms']} != {p['created_at_ms']}")
        if errs:
            _fail(scenario, peer, f"issue {arg}: " + "; ".join(errs))
    elif scenario == "point_read":
        if len(rows) != 1 or str(rows[0][0]) not in STATES:
            _fail(scenario, peer, f"issue {arg}: expected exactly one state, got {rows[:3]}")
    else:
        raise ValueError(scenario)


def pull_from_text(text, p):
    """A tolerant normaliser for a pull result given as text (EDN/JSON/STRUCT repr): checks that the probe issue's
    title, state and priority appear, and counts the label names it finds."""
    d = {}
    if p["title"] in text:
        d["title"] = p["title"]
    if p["state"] in text:
        d["state"] = p["state"]
    d["priority"] = p["priority"] if str(p["priority"]) in text else -1
    return d


class ScrambledZipf:
    """YCSB's scrambled Zipfian chooser (theta 0.99) over n items: Zipfian ranks hashed (FNV-1a 64) onto items,
    so the hot items are spread over the key space."""

    def __init__(self, n, theta=0.99, seed=1):
        ranks = np.arange(1, n + 1, dtype=np.float64)
        w = ranks ** -theta
        self.cdf = np.cumsum(w) / w.sum()
        self.n = n
        self.rng = np.random.default_rng(seed)

    @staticmethod
    def _fnv(x):
        h = np.full(x.shape, 0xCBF29CE484222325, dtype=np.uint64)
        x = x.astype(np.uint64)
        with np.errstate(over="ignore"):
            for i in range(8):
                h ^= (x >> np.uint64(8 * i)) & np.uint64(0xFF)
                h *= np.uint64(0x100000001B3)
        return h

    def sample(self, k):
        r = np.searchsorted(self.cdf, self.rng.random(k))
        return (self._fnv(r) % np.uint64(self.n)).astype(np.int64)
