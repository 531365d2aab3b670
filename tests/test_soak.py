"""The soak's short version (benchmarks/py/soak.py, issue 17): 8 readers and 1 writer for 30 seconds at scale xs.
Every read answer is checked against the generator's truth while the writes run, and afterwards every acknowledged
write is found in the store, and no retracted label is left; both writers (steady: labels retracted again,
growing: new users). Latency and memory figures are printed by the script, not asserted here (a timed test
on a shared machine would measure the machine); the 10-minute run at scale s is the script itself."""
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from benchmarks.py import soak  # noqa: E402


@pytest.mark.parametrize("writes", ["steady", "growing"])
def test_readers_and_a_writer_for_30_seconds(tmp_path, writes):
    r = soak.run("xs", 30, workdir=tmp_path, quiet=True, writes_mode=writes)
    assert r["errors"] == []
    assert r["lost_users"] == 0 and r["lost_labels"] == 0 and r["retracted_labels_left"] == 0
    assert r["labelled_issues"] > 0
    if writes == "steady":
        assert r["new_users"] == 0 and r["retracted_labels"] > 0
    else:
        assert r["new_users"] > 0 and r["retracted_labels"] == 0
    assert sum(w["reads"] for w in r["windows"]) > 100
