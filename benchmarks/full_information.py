"""Accuracy and time of full-information reconciliation against the level-by-level path, on the same measurements.

    python benchmarks/full_information.py [--data ../shared/data/ri2010] [--preset pl94] [--releases 3]

Each release (the preset's default, full-information reconciliation, timed end to end without Prefect) is
post-processed again from its own saved measurements with ``--reconciliation level_by_level`` (timed too).  Both
are evaluated against the true microdata (``censusdp evaluate``), with the GLS estimates and the raw noisy
queries beside them.  Same measurements, so the differences are the reconciliation's alone.  Seeded test noise
(--insecure-seed): a benchmark, not a release.  Prints a markdown table of mean absolute error per level and
query, averaged over the releases, and the times.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

from real_data import evaluated, mae_table, print_table, release

from censusdp.pipeline.release.finish import postprocess_run

REPO = Path(__file__).resolve().parent.parent
QUERIES = ["total", "detailed", "hispanic * cenrace", "votingage"]


def main_(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data" / "ri2010")
    parser.add_argument("--preset", default="pl94")
    parser.add_argument("--releases", type=int, default=3)
    parser.add_argument("--seed", type=int, default=300)
    args = parser.parse_args(argv)
    rows, times = [], {"full information (release)": [], "level by level (re-run)": []}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=REPO.parent) as tmp:
        folder = Path(tmp)
        os.environ["CENSUSDP_LEDGER"] = str(folder / "ledger.sqlite")
        for r in range(args.releases):
            tick = time.perf_counter()
            run_dir = release(args.data, args.preset, folder, seed=args.seed + r)
            times["full information (release)"].append(time.perf_counter() - tick)
            tick = time.perf_counter()
            level = postprocess_run(run_dir, folder / "level", reconciliation="level_by_level")
            times["level by level (re-run)"].append(time.perf_counter() - tick)
            rows += evaluated(args.data, [("level by level", level), ("full information", run_dir)], QUERIES)
    print_table(f"{args.data.name}, preset {args.preset}, {args.releases} releases, mean absolute error (persons); "
                f"{platform.node()}, {os.cpu_count()} cores, {time.perf_counter() - started:.0f} s", mae_table(rows),
                ["noisy query", "level by level", "full information", "GLS estimate"],
                ratio=("full information", "GLS estimate"))
    print()
    for label, values in times.items():
        print(f"- {label}: " + ", ".join(f"{v:.1f} s" for v in values))


if __name__ == "__main__":
    main_()
