"""The Debian store (examples/debian_extract.py, debian_load.sql) checked against apt-cache, which answers the same
questions from the same apt lists and which nobody here wrote.

The mapping between the two (examples/debian_queries.sql's rules):
* `apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces
  --no-enhances P` prints P and every name it reaches (unindented lines): through Depends and Pre-Depends, every
  alternative of an `a | b` group, and from a name to each package that provides it (virtual packages print
  as `<name>`; `perl:any` is such a name, which perl provides as it is Multi-Arch: allowed: the extract script
  writes that Provides as apt assumes it). mentat's `(closure ?p ?q)` follows the same steps; the printed set is P plus the closure.
* `apt-cache rdepends` with the same switches lists the packages with a Depends or Pre-Depends naming P (any
  alternative; some more than once): their set is mentat's `[?d :dep/target ?p] [?d :dep/of ?r]` over those two
  kinds. rdepends reads every version in the lists, the store one per package (the candidate): the test keeps the
  reverse dependencies whose candidate version names P in a Depends or Pre-Depends line (`apt-cache depends`, which
  shows candidates; not its indented provider lines: a dependency on a name that P provides is not one on P).
* apt-cache ignores here the packages installed on this machine (`-o Dir::State::status=/dev/null`): the store
  holds the archive.
* A known difference: apt follows a versioned dependency to a provider only when its Provides version satisfies
  the constraint (systemd's `libsystemd0 (= 252.39...)` is not satisfied by libelogind0's `Provides: libsystemd0
  (= 246.10)`); the rules compare no versions and follow every provider. systemd is therefore not among the 20.
Skipped where apt-cache or the Translation-en lists are missing (run apt-get update -o Acquire::Languages=en).
"""
import glob
import shutil
import subprocess
import sys

import pytest

from conftest import EXT, ROOT, connect

pytestmark = pytest.mark.skipif(
    shutil.which("apt-cache") is None or not glob.glob("/var/lib/apt/lists/*_Translation-en*")
    or shutil.which("duckdb") is None,
    reason="needs apt-cache, the apt lists with Translation-en and the DuckDB CLI")

NO = ["--no-recommends", "--no-suggests", "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances"]
PACKAGES = ["bash", "coreutils", "python3", "perl", "curl", "git", "vim", "openssh-server", "apache2", "nginx",
            "postgresql-15", "r-base-core", "gcc", "make", "libreoffice-writer", "gimp", "0ad", "htop",
            "texlive-latex-base", "ffmpeg"]
RDEPENDS = ["libgmp10", "zlib1g", "libssl3", "perl", "python3", "libxml2", "libsqlite3-0", "libpng16-16",
            "libcurl4", "libjpeg62-turbo", "libffi8", "libyaml-0-2", "liblzma5", "libbz2-1.0", "libpcre2-8-0",
            "libuuid1", "libcap2", "libsystemd0", "debconf", "libncursesw6"]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    d = tmp_path_factory.mktemp("debian")
    subprocess.run([sys.executable, str(ROOT / "examples" / "debian_extract.py"), str(d)], check=True)
    db = d / "debian.duckdb"
    with open(ROOT / "examples" / "debian_load.sql") as f:
        p = subprocess.run(["duckdb", "-unsigned", str(db), "-cmd", f"LOAD '{EXT}'",
                            "-cmd", f"SET VARIABLE debian_dir = '{d}'",
                            "-cmd", f"SET VARIABLE examples_dir = '{ROOT / 'examples'}'"],
                           stdin=f, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0 and "Error" not in p.stdout + p.stderr, p.stdout + p.stderr
    con = connect(db)
    yield con
    con.close()


def rules():
    text = (ROOT / "examples" / "debian_queries.sql").read_text()
    start = text.index("SET VARIABLE deb_rules = '") + len("SET VARIABLE deb_rules = '")
    return text[start:text.index("';", start)]


def apt(*args):
    # the lists only: packages installed on this machine from elsewhere (dpkg's status) are not in the archive
    cmd = ["apt-cache", "-o", "Dir::State::status=/dev/null", *args]
    return subprocess.run(cmd, capture_output=True, text=True).stdout


def test_closures_equal_apt_cache_depends_recurse(store):
    got = {}
    q = """[:find ?name ?qn :in $ % [?name ...] :where [?p :pkg/name ?name] (closure ?p ?q) [?q :pkg/name ?qn]]"""
    names = " ".join(f'"{p}"' for p in PACKAGES)
    for name, reached in store.execute("SELECT * FROM mentat_q(?, inputs := ?)", [q, f"[{rules()} [{names}]]"]).fetchall():
        got.setdefault(name, set()).add(reached)
    for p in PACKAGES:
        out = apt("depends", "--recurse", *NO, p)
        want = {line.strip().strip("<>") for line in out.splitlines() if line and not line[0].isspace()}
        assert got.get(p, set()) | {p} == want, (p, sorted(want ^ (got.get(p, set()) | {p}))[:20])


def test_reverse_dependency_counts_equal_apt_cache_rdepends(store):
    q = """[:find ?name (count-distinct ?r) :in $ [?name ...]
            :where [?t :pkg/name ?name] [?d :dep/target ?t] (or [?d :dep/kind :depends] [?d :dep/kind :pre-depends])
                   [?d :dep/of ?r]]"""
    names = " ".join(f'"{p}"' for p in RDEPENDS)
    got = dict(store.execute("SELECT * FROM mentat_q(?, inputs := ?)", [q, f"[[{names}]]"]).fetchall())
    for p in RDEPENDS:
        lines = apt("rdepends", *NO, p).splitlines()[2:]
        listed = sorted({line.strip().lstrip("|") for line in lines})
        # rdepends reads every version of the lists; the store holds one version per package (the candidate,
        # what `apt-cache depends` shows): keep the reverse dependencies whose candidate names P
        want, current = set(), None
        for line in apt("depends", *NO, *listed).splitlines():
            if line and not line[0].isspace():
                current = line.strip()
            elif current and ": " in line and line.strip().lstrip("|").split(": ", 1)[1].strip("<>") == p:
                want.add(current)
        assert got.get(p, 0) == len(want), p


def test_fulltext_over_descriptions(store):
    # every package whose long description holds the phrase "web server" has it, read back from the store
    q = """[:find ?name ?text :where [(fulltext $ :pkg/description "\\"web server\\"") [[?p ?text]]] [?p :pkg/name ?name]]"""
    found = store.execute("SELECT * FROM mentat_q(?)", [q]).fetchall()
    assert len(found) > 20
    import re
    for _, text in found:
        assert re.search(r"\bweb\W+servers?\b", text, re.I), text


def test_notebook_every_closure_same_as_plain_sql_and_drawn(tmp_path, monkeypatch):
    # examples/debian.ipynb, run headless: builds its own store (in tmp_path), computes every package's closure
    # size with one mentat_q, compares it with a recursive CTE in plain SQL over the extract, draws the histogram
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("matplotlib")
    figure = ROOT / "build" / "debian_closure_sizes.png"
    figure.unlink(missing_ok=True)
    nb = nbformat.read(ROOT / "examples" / "debian.ipynb", as_version=4)
    monkeypatch.setenv("MENTAT_DEBIAN_DIR", str(tmp_path))
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT / "examples")}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs)
    assert "same as mentat_q" in text and "DIFFERENT" not in text
    assert figure.exists() and figure.stat().st_size > 10_000
