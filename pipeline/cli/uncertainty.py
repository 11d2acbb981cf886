"""``censusdp uncertainty RUN_DIR [--bootstrap R] [--seed S]``: GLS estimates and the parametric bootstrap of a
run's public outputs (no microdata, no budget: Thm 19.25).  Above both ``pipeline.uncertainty.gls`` and
``pipeline.uncertainty.bootstrap``, so neither imports the other's command."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.errors import CensusDPError
from pipeline.uncertainty.bootstrap import bootstrap_intervals
from pipeline.uncertainty.gls import write_estimates


def add_uncertainty(sub: Any) -> None:
    """Register ``censusdp uncertainty RUN_DIR [--bootstrap R] [--seed S]`` (public outputs only; no budget)."""
    p = sub.add_parser("uncertainty", help="GLS estimates with standard errors (estimates/) and, optionally, a "
                       "parametric bootstrap of the tables (bootstrap/), from a run's public outputs")
    p.add_argument("run_dir", help="a published run folder")
    p.add_argument("--bootstrap", type=int, metavar="R", help="also run R bootstrap replicates (R reconciliations)")
    p.add_argument("--seed", type=int, help="seed of the bootstrap noise (default: the OS source)")
    p.set_defaults(handler=cmd_uncertainty)


def cmd_uncertainty(args: Any) -> int:
    """Handler: write the estimates (and bootstrap), print the paths."""
    for path in write_estimates(Path(args.run_dir)):
        print(path)
    if args.bootstrap:
        if args.bootstrap < 2:
            raise CensusDPError("--bootstrap needs at least 2 replicates")
        for path in bootstrap_intervals(Path(args.run_dir), args.bootstrap, args.seed)["paths"]:
            print(path)
    return 0
