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


def test_the_native_driver_for_30_seconds(tmp_path):
    """The same soak from native threads (`--driver native`, benchmarks/native `--soak`) on a copy of the store: every
    answer checked by the binary against the truth the script hands it, every acknowledged write found afterwards.
    Without the binary built (CI builds it only with MENTAT_NATIVE_BUILD=1) the script says how to build it."""
    if not soak.native.BIN.exists():
        with pytest.raises(SystemExit, match="build.sh"):
            soak.run("xs", 30, workdir=tmp_path, quiet=True, driver="native")
        return
    r = soak.run("xs", 30, workdir=tmp_path, quiet=True, driver="native")
    assert r["driver"] == "native" and r["errors"] == []
    assert r["lost_labels"] == 0 and r["retracted_labels_left"] == 0
    assert r["labelled_issues"] > 0 and r["retracted_labels"] > 0
    assert sum(w["reads"] for w in r["windows"]) > 100 and sum(w["writes"] for w in r["windows"]) > 10
    # every question was asked in every window
    assert all(set(w["per_question"]) == set(soak.READS) for w in r["windows"])


@pytest.mark.parametrize("driver", ["python", "native"])
def test_the_soak_takes_duckdbs_settings(tmp_path, driver):
    """`--threads`, `--memory-limit` and `--checkpoint-threshold` reach the DuckDB that runs the soak (read back there
    with `current_setting`; DuckDB reads "200MB" as 200 * 10^6 bytes and writes it back in MiB), and the soak's
    checks hold under them."""
    if driver == "native" and not soak.native.BIN.exists():
        pytest.skip("benchmarks/native is not built (CI builds it only with MENTAT_NATIVE_BUILD=1)")
    r = soak.run("xs", 8, workdir=tmp_path, quiet=True, driver=driver, threads=1, memory_limit="200MB",
                 checkpoint_threshold="4MB")
    s = r["duckdb_settings"]
    assert int(s["threads"]) == 1
    assert s["memory_limit"] == "190.7 MiB", s
    assert s["checkpoint_threshold"] == "3.8 MiB", s
    assert r["memory_limit"] == "200MB" and r["checkpoint_threshold"] == "4MB" and r["threads"] == 1
    assert r["errors"] == [] and r["lost_labels"] == 0 and r["retracted_labels_left"] == 0
