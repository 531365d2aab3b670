"""Smoke run of the whole scale suite at xs: every scenario, every peer that installs, answers checked against the
generator's truth (times are not asserted). A peer that cannot be installed here is skipped, not failed; a wrong
answer from anyone fails the test."""
import csv
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXT = pathlib.Path(os.environ.get("MENTAT_EXTENSION", ROOT / "build" / "mentat.duckdb_extension"))
NATIVE = pathlib.Path(os.environ.get("MENTAT_NATIVE_BENCH",
                                     ROOT / "benchmarks" / "native" / "target" / "release" / "mentat-native-bench"))


@pytest.mark.skipif(not EXT.exists(), reason="extension not built")
def test_suite_smoke_xs(tmp_path):
    out = tmp_path / "results"
    r = subprocess.run([sys.executable, "-m", "benchmarks.py.suite.run", "--scales", "xs", "--scenarios", "all",
                        "--peers", "all", "--quick", "--out", str(out), "--workdir", str(tmp_path / "work")],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    log = r.stdout[-6000:] + r.stderr[-3000:]
    assert "WRONG ANSWER" not in log, log
    assert r.returncode == 0, log
    rows = list(csv.DictReader(open(out / "timings.csv")))
    by = {(x["peer"], x["scenario"]): x for x in rows}
    # mentat and the hand-written SQL must run every scenario they support, with checked answers
    for sc in ["bulk_load", "q1", "q2", "q3", "q4", "as_of", "since", "input_bindings", "concurrency_sweep",
               "cold_vs_warm", "write_mixed", "update_heavy", "single_tx", "transact_many"]:
        assert by[("mentat", sc)]["status"] == "ok", (sc, by[("mentat", sc)])
    for sc in ["q1", "q2", "q3", "q4", "as_of", "since", "input_bindings", "pull"]:
        assert by[("duckdb_sql", sc)]["status"] == "ok", (sc, by[("duckdb_sql", sc)])
    assert by[("mentat", "pull")]["status"] in ("ok", "skipped")
    # the native driver (benchmarks/native/build.sh): when it is built, both drivers run every native scenario with
    # checked answers; else the scenario is a skip that says how to build it
    native = {(x["peer"], x["variant"]): x for x in rows if x["scenario"] == "native"}
    for peer in ("mentat", "sqlite"):
        if NATIVE.exists():
            for v in ["ceiling clients=64", "update_heavy all clients=1", "update_heavy all clients=64", "single_tx",
                      "write_mixed writer"]:
                assert native[(peer, v)]["status"] == "ok", (peer, v, native.get((peer, v)))
        else:
            assert native[(peer, "")]["status"] == "skipped" and "build.sh" in native[(peer, "")]["reason"]
    # optional peers: ok, or skipped/error with a reason (install or platform limits), never wrong
    assert not [x for x in rows if x["status"] == "WRONG"]
    assert all(x["reason"] for x in rows if x["status"] in ("skipped", "error"))
    summary = (out / "summary.md").read_text()
    assert "## Scale xs" in summary and "ratio mentat / peer" in summary
    assert (out / "latency.png").exists() and (out / "throughput.png").exists()
