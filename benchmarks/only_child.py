"""Accuracy of the published tables with and without the only-child chain, on the same measurements.

    python benchmarks/only_child.py [--data ../shared/data/ri2010] [--preset pl94] [--releases 3]

A single-state run's state is the nation's only child (``pipeline.release.only_child``).  Each release is
post-processed twice from its own saved measurements (``censusdp postprocess``): once with the chain switched
off (the state's measurements unused, as before) and once with it on; both are evaluated against the true
microdata (``censusdp evaluate``).  Same measurements, so the difference is the reconciliation's alone.  Seeded
test noise (--insecure-seed): a benchmark, not a release.  Prints a markdown table of mean absolute error per
level, averaged over the releases, for the total and the detailed query.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from real_data import evaluated, mae_table, print_table, release

import censusdp.pipeline.release.only_child as only_child
import censusdp.pipeline.release.stages as stages
from censusdp.pipeline.release.finish import postprocess_run

REPO = Path(__file__).resolve().parent.parent
QUERIES = ["total", "detailed"]


@contextmanager
def chain_off() -> Iterator[None]:
    """The reconciliation as before only-child chains: every level uses its own measurements only."""
    saved = only_child.only_child_levels
    only_child.only_child_levels = stages.only_child_levels = lambda tree, level: []
    try:
        yield
    finally:
        only_child.only_child_levels = stages.only_child_levels = saved


def main_(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data" / "ri2010")
    parser.add_argument("--preset", default="pl94")
    parser.add_argument("--releases", type=int, default=3)
    args = parser.parse_args(argv)
    rows = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        os.environ["CENSUSDP_LEDGER"] = str(folder / "ledger.sqlite")
        for r in range(args.releases):
            run_dir = release(args.data, args.preset, folder, seed=100 + r)
            with chain_off():
                off = postprocess_run(run_dir, folder / "off", reconciliation="level_by_level")
            on = postprocess_run(run_dir, folder / "on", reconciliation="level_by_level")
            rows += evaluated(args.data, [("own measurements only", off), ("with the only-child chain", on)],
                              QUERIES)
    print_table(f"{args.data.name}, preset {args.preset}, {args.releases} releases, mean absolute error (persons); "
                f"{platform.node()}, {os.cpu_count()} cores, {time.perf_counter() - started:.0f} s", mae_table(rows),
                ["noisy query", "own measurements only", "with the only-child chain", "GLS estimate"])


if __name__ == "__main__":
    main_()
