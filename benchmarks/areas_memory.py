"""Peak memory and time of ``censusdp areas`` on a large state, beside another version on the same release.

    python benchmarks/areas_memory.py --persons 10000000 --work /tmp/areas10m [--areas 1000] [--other SRC]

Synthesises a state (``censusdp synth``, kept in ``--work`` for the next run), releases it with the ``pl94`` preset
(persons only, no Prefect), writes an assignment of every block to one of ``--areas`` districts (contiguous runs of
blocks, as a redistricting plan's are), then runs ``censusdp areas`` under ``/usr/bin/time`` and prints its
wall-clock seconds and peak resident memory.  ``--other`` names another version's source folder (its ``censusdp``
on ``PYTHONPATH``, e.g. a git worktree): its ``areas`` runs on the same release and plan, the same-session
baseline.  ``--other-memory-gb`` caps the other version's address space (it may not fit).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl

from censusdp.pipeline.cli.commands import preset_text


def censusdp(*args: str, env: dict[str, str] | None = None, limit_gb: float | None = None
             ) -> tuple[float, float, int]:
    """(seconds, peak GB, exit code) of one command in a fresh process."""
    code = "import sys; from censusdp.pipeline.cli import main; sys.exit(main(sys.argv[1:]))"
    command = ["/usr/bin/time", "-f", "%e %M", sys.executable, "-c", code, "-q", *args]
    if limit_gb is not None:
        command = ["bash", "-c", f"ulimit -v {int(limit_gb * 2**20)} && exec \"$@\"", "limit", *command]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    seconds, kilobytes = done.stderr.strip().splitlines()[-1].split()[-2:]
    return float(seconds), int(kilobytes) / 2**20, done.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--persons", type=int, default=10_000_000)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--areas", type=int, default=1000)
    parser.add_argument("--other", type=Path, help="another version's source folder: the baseline")
    parser.add_argument("--other-memory-gb", type=float, default=None)
    args = parser.parse_args()
    work = args.work.resolve()
    data = work / "data"
    if not (data / "geography.parquet").is_file():
        subprocess.run([sys.executable, "-m", "censusdp.pipeline.cli", "-q", "synth", "--persons", str(args.persons),
                        "--seed", "1", "--out", str(data)], check=True)
    runs = work / "runs"
    if not runs.is_dir() or not any(runs.iterdir()):
        config = work / "pl94.toml"
        ledger = work / "ledger.sqlite"
        config.write_text(preset_text("pl94").replace('# path = "..."', f'path = "{ledger}"'))
        seconds, peak, code = censusdp("release", str(config), "--microdata", str(data / "microdata.parquet"),
                                       "--geography", str(data / "geography.parquet"), "--no-units", "--out",
                                       str(runs), "--no-prefect")
        print(f"release: {seconds:.0f} s, peak {peak:.2f} GB (exit {code})")
    (run,) = [path for path in runs.iterdir() if path.is_dir() and not path.name.startswith(".")]
    blocks = pl.read_parquet(data / "geography.parquet")["geocode"].sort()
    cuts = np.sort(np.random.default_rng(5).choice(np.arange(1, len(blocks)), args.areas - 1, replace=False))
    district = np.repeat(np.arange(args.areas), np.diff(np.concatenate([[0], cuts, [len(blocks)]])))
    plan = work / "plan.csv"
    pl.DataFrame({"GEOID": blocks, "DISTRICT": [f"D{d:04d}" for d in district]}).write_csv(plan)
    print(f"{len(blocks):,} blocks in {args.areas} districts")
    seconds, peak, code = censusdp("areas", str(run), "--assign", str(plan), "--out", str(work / "this.parquet"))
    print(f"areas, this version: {seconds:.1f} s, peak {peak:.2f} GB (exit {code})")
    if args.other is not None:
        env = {**os.environ, "PYTHONPATH": str(args.other.resolve())}
        seconds, peak, code = censusdp("areas", str(run), "--assign", str(plan), "--out",
                                       str(work / "other.parquet"), env=env, limit_gb=args.other_memory_gb)
        print(f"areas, other version: {seconds:.1f} s, peak {peak:.2f} GB (exit {code})")
        if code == 0:
            this, other = pl.read_parquet(work / "this.parquet"), pl.read_parquet(work / "other.parquet")
            for column in ("estimate", "std_error"):
                gap = (this[column] - other[column]).abs().max()
                print(f"  largest difference in {column}: {gap:.3g}")


if __name__ == "__main__":
    main()
