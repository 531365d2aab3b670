"""Differential testing against DataScript (issue 17): random databases, queries, pull patterns and transaction
sequences, run by mentat (the built extension in Python duckdb) and by DataScript (npm `datascript` under node),
compared as Datomic's documented semantics demand. The generator, the comparison rules and the list of places where
DataScript departs from Datomic (and which the generator avoids) are in benchmarks/py/differential/__init__.py and
TESTING.md; `python -m benchmarks.py.differential --pairs 100000` is the long run.

DataScript is installed into benchmarks/data/_node with npm, as the benchmark suite's DataScript peer does. A
machine without node or npm fails these tests with a message saying so: nothing is skipped silently."""
import sys

import pytest

from conftest import EXT, ROOT

sys.path.insert(0, str(ROOT))
from benchmarks.py.differential import engines, harness  # noqa: E402


@pytest.fixture(scope="module")
def datascript():
    try:
        return engines.install_datascript()
    except engines.Unavailable as e:
        pytest.fail(f"DataScript is needed for the differential tests and could not be installed: {e}. "
                    "Install node and npm (apt-get install nodejs npm) and run again.")


def check(kind, pairs, seed):
    if not EXT.exists():
        pytest.exit(f"{EXT} is missing: run scripts/setup.sh first", returncode=2)
    stats = harness.run(pairs, seed, kinds=(kind,), queries_per_db=150, ext=str(EXT))
    report = stats.report()
    print(report)
    assert stats.pairs.get(kind, 0) >= pairs * 0.95, report
    shown = "\n\n".join(harness.describe(k, i) for k, i in stats.examples[:3])
    assert stats.total_mismatches() == 0, f"{report}\n\n{shown}"
    return stats


def test_queries_agree_with_datascript(datascript):
    # every find spec, input binding form, predicates, functions, or/or-join/not/not-join, rules (recursive
    # too), aggregates with and without :with, over ~10 random databases with retractions
    check("query", 1500, seed=17)


def test_pulls_agree_with_datascript(datascript):
    # nested and reverse patterns, *, :db/id, [:attr :as/:limit/:default], components pulled whole
    check("pull", 200, seed=17)


def test_transaction_sequences_agree_with_datascript(datascript):
    # tempids, upserts by identity, lookup refs, nested component maps, retractions, :db/retractEntity,
    # cardinality-one replacement, unique-value conflicts: the same transactions fail, the same datoms remain
    check("tx", 200, seed=17)


def test_jobs_split_the_pairs_and_add_up_what_each_job_found(datascript):
    # --jobs 2 is the two runs --jobs 1 makes with the job seeds, counted together
    merged, _ = harness.run_jobs(60, 17, ("tx",), 150, 3, 2, ext=str(EXT))
    alone = [harness.run(30, harness.job_seed(17, j), kinds=("tx",), queries_per_db=150, ext=str(EXT))
             for j in range(2)]
    for name in harness.COUNTS:
        want = {}
        for st in alone:
            for kind, n in getattr(st, name).items():
                want[kind] = want.get(kind, 0) + n
        assert getattr(merged, name) == want, name
    assert merged.pairs["tx"] >= 60
