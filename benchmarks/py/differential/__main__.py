"""python -m benchmarks.py.differential --pairs N --seed S [--kinds query,pull,tx] (from the repository root)."""
import argparse
import sys

from .harness import describe, run


def main(argv=None):
    ap = argparse.ArgumentParser(description="mentat against DataScript on random databases, queries, pulls and "
                                             "transactions")
    ap.add_argument("--pairs", type=int, default=10000, help="query/pull/transaction pairs in all (default 10000)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kinds", default="query,pull,tx")
    ap.add_argument("--per-db", type=int, default=200, help="queries per generated database")
    ap.add_argument("--show", type=int, default=5, help="mismatches to print in full")
    args = ap.parse_args(argv)
    stats = run(args.pairs, args.seed, kinds=tuple(args.kinds.split(",")), queries_per_db=args.per_db,
                progress=True)
    for kind, info in stats.examples[:args.show]:
        print(describe(kind, info))
        print()
    print(stats.report())
    return 1 if stats.total_mismatches() else 0


if __name__ == "__main__":
    sys.exit(main())
