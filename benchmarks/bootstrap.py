"""The bootstrap's replicates reconciled one by one against all together (``replicate_tables(count=R)``).

    python benchmarks/bootstrap.py RUN_DIR --replicates 20

RUN_DIR is any published run (e.g. the README walk-through's).  Both ways draw and reconcile the same number of
replicates from the same published tables; the wall times are printed side by side, alternated over ``--rounds``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from censusdp.pipeline.dp.random_source import seeded_random_source
from censusdp.pipeline.io.run_folder import load_run
from censusdp.pipeline.uncertainty.bootstrap import replicate_tables


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--replicates", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    run = load_run(args.run_dir)
    truth = [run.table(level) for level in range(run.tree.depth)]
    for round_ in range(args.rounds):
        started = time.perf_counter()
        for r in range(args.replicates):
            replicate_tables(run, truth, seeded_random_source(r))
        one_by_one = time.perf_counter() - started
        started = time.perf_counter()
        replicate_tables(run, truth, seeded_random_source(0), count=args.replicates)
        together = time.perf_counter() - started
        print(f"round {round_ + 1}: {args.replicates} replicates one by one {one_by_one:.2f} s, together "
              f"{together:.2f} s ({together / one_by_one:.2f}x)")


if __name__ == "__main__":
    main()
