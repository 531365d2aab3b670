"""The soak's short version (benchmarks/py/soak.py, issue 17): 8 readers and 1 writer for 30 seconds at scale xs.
Every read answer is checked against the generator's truth while the writes run, and afterwards every acknowledged
write is found in the store. Latency and memory figures are printed by the script, not asserted here (a timed test
on a shared machine would measure the machine); the 10-minute run at scale s is the script itself."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from benchmarks.py import soak  # noqa: E402


def test_readers_and_a_writer_for_30_seconds(tmp_path):
    r = soak.run("xs", 30, workdir=tmp_path, quiet=True)
    assert r["errors"] == []
    assert r["lost_users"] == 0 and r["lost_labels"] == 0
    assert r["new_users"] > 0 and r["labelled_issues"] > 0
    assert sum(w["reads"] for w in r["windows"]) > 100
