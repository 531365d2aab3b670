"""Acknowledged means durable: a short run of benchmarks/py/durability.py (16 writer threads in a child process,
killed with SIGKILL three times; after each kill every acknowledged transaction is in the store whole, nothing is
half-applied and no entid is used twice), once writing the tables and once through the transaction log (the
attributes in the entity index), whose kills leave logged transactions for the reopen to apply. The 20-kill, 64-writer version is the script itself."""
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "py"))
import durability  # noqa: E402


@pytest.mark.parametrize("index", [False, True], ids=["tables", "log"])
def test_acknowledged_transactions_survive_kill_9(tmp_path, index):
    acked, stored, logged = durability.run(tmp_path, kills=3, writers=16, seed=1, min_s=0.5, max_s=1.5, quiet=True,
                                           index=index)
    assert acked > 0, "the writers acknowledged nothing before the kills"
    assert stored >= acked
    if index:
        # the writes went through the transaction log, and a kill left some of it for the reopen to apply
        assert logged > 0
