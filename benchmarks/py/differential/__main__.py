"""python -m benchmarks.py.differential --pairs N --seed S [--kinds query,pull,tx] [--jobs J] (from the repository
root)."""
import argparse
import sys

from .harness import JOB_SEED_STRIDE, describe, run, run_jobs


def main(argv=None):
    ap = argparse.ArgumentParser(description="mentat against DataScript on random databases, queries, pulls and "
                                             "transactions")
    ap.add_argument("--pairs", type=int, default=10000, help="query/pull/transaction pairs in all (default 10000)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kinds", default="query,pull,tx")
    ap.add_argument("--per-db", type=int, default=200, help="queries per generated database")
    ap.add_argument("--show", type=int, default=5, help="mismatches to print in full")
    ap.add_argument("--jobs", type=int, default=1,
                    help="worker processes, each with its own share of the pairs and seed (job j: seed + j * "
                         f"{JOB_SEED_STRIDE}); a mismatch is printed with the seed that reproduces it at --jobs 1")
    args = ap.parse_args(argv)
    kinds = tuple(args.kinds.split(","))
    if args.jobs > 1:
        stats, shown = run_jobs(args.pairs, args.seed, kinds, args.per_db, args.show, args.jobs)
    else:
        stats = run(args.pairs, args.seed, kinds=kinds, queries_per_db=args.per_db, progress=True)
        shown = [describe(kind, info) for kind, info in stats.examples[:args.show]]
    for text in shown:
        print(text)
        print()
    print(stats.report())
    return 1 if stats.total_mismatches() else 0


if __name__ == "__main__":
    sys.exit(main())
