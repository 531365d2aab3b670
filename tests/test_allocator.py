"""mentat's own allocations come from a region on which the kernel makes no transparent huge pages
(duckdb_ext/src/lib.rs `arena_without_huge_pages`; storage/README.md "Allocation"), read from the kernel's own
account of a process that loaded mentat and wrote through it: /proc/self/smaps."""
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import EXT

ARENA_KB = 32 << 20  # ARENA_BYTES in duckdb_ext/src/lib.rs, in KiB as smaps gives sizes

# Loads mentat, transacts and queries, then prints each mapping of ARENA_KB: its VmFlags, Rss and AnonHugePages.
CHILD = textwrap.dedent("""
    import sys, duckdb
    con = duckdb.connect(sys.argv[1], config={"allow_unsigned_extensions": "true"})
    con.execute(f"LOAD '{sys.argv[2]}'")
    con.execute("SELECT * FROM mentat_transact('[{:db/ident :a/n :db/valueType :db.type/long "
                ":db/cardinality :db.cardinality/one}]')").fetchall()
    edn = "[" + " ".join("{:a/n %d}" % i for i in range(20000)) + "]"
    con.execute("SELECT * FROM mentat_transact(?)", [edn]).fetchall()
    assert con.execute("FROM mentat_q('[:find (count ?e) . :where [?e :a/n _]]')").fetchall()[0][0] == 20000
    rec = {}
    for line in open("/proc/self/smaps"):
        key, _, value = line.partition(":")
        if key == "VmFlags":
            if rec.get("Size") == int(sys.argv[3]):
                print(rec["Rss"], rec["AnonHugePages"], " ".join(value.split()))
            rec = {}
        elif key in ("Size", "Rss", "AnonHugePages"):
            rec[key] = int(value.split()[0])
""")


def arenas(tmp_path, **env):
    p = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "s.duckdb"), str(EXT), str(ARENA_KB)],
                       capture_output=True, text=True, timeout=300, env=dict(os.environ, **env))
    assert p.returncode == 0, p.stderr
    return [(int(rss), int(huge), flags.split()) for rss, huge, flags in
            (line.split(" ", 2) for line in p.stdout.splitlines())]


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="reads Linux's /proc/self/smaps")
def test_mentats_memory_comes_from_a_region_without_huge_pages(tmp_path):
    if open("/proc/sys/vm/overcommit_memory").read().strip() == "2":
        pytest.skip("strict overcommit charges the whole region, so mentat leaves mimalloc as it is")
    [(rss, huge, flags)] = arenas(tmp_path)
    assert "nh" in flags          # MADV_NOHUGEPAGE on the region
    assert rss > 1024             # mentat's transactions allocated there (KiB resident)
    assert huge == 0              # and the kernel gave it no huge page


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="reads Linux's /proc/self/smaps")
def test_mentat_huge_pages_leaves_mimalloc_as_it_is(tmp_path):
    assert arenas(tmp_path, MENTAT_HUGE_PAGES="1") == []
