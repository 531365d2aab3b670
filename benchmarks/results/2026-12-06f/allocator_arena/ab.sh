#!/bin/bash
# alternating suite runs at s: arena (default) vs MENTAT_HUGE_PAGES=1
cd /work/main
for r in 1 2; do
for mode in arena thp; do
  if [ $mode = thp ]; then export MENTAT_HUGE_PAGES=1; else unset MENTAT_HUGE_PAGES; fi
  rm -rf /tmp/ab/wd_$mode$r; mkdir -p /tmp/ab/wd_$mode$r
  MENTAT_EXTENSION=/tmp/ext25/mentat.duckdb_extension python3 -m benchmarks.py.suite.run --scales s --peers mentat \
    --scenarios bulk_load,floor,q1,q2,as_of,input_bindings,pull,concurrency_sweep,write_mixed,update_heavy,single_tx,transact_many \
    --warmup 10 --sweep-time 3 --mixed-time 8 --update-time 12 --workdir /tmp/ab/wd_$mode$r --out /tmp/ab/out_$mode$r > /tmp/ab/log_$mode$r.txt 2>&1
  echo "$mode$r rc $?" >> /tmp/ab/done.txt
done; done
