"""``censusdp uncertainty`` (GLS estimates and the parametric bootstrap) and ``censusdp areas``: post-processing of
a run's public outputs (no microdata, no budget: Thm 19.25)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from censusdp.pipeline.errors import CensusDPError
from censusdp.pipeline.uncertainty.areas import write_areas
from censusdp.pipeline.uncertainty.bootstrap import bootstrap_intervals
from censusdp.pipeline.uncertainty.estimates import write_estimates


def add_uncertainty(sub: Any) -> None:
    p = sub.add_parser("uncertainty", help="GLS estimates with standard errors (estimates/) and, optionally, a "
                       "parametric bootstrap of the tables (bootstrap/), from a run's public outputs")
    p.add_argument("run_dir", help="a published run folder")
    p.add_argument("--bootstrap", type=int, metavar="R", help="also run R bootstrap replicates (R reconciliations)")
    p.add_argument("--seed", type=int, help="seed of the bootstrap noise (default: the OS source)")
    p.set_defaults(handler=cmd_uncertainty)


def cmd_uncertainty(args: Any) -> int:
    for path in write_estimates(Path(args.run_dir)):
        print(path)
    if args.bootstrap:
        if args.bootstrap < 2:
            raise CensusDPError("--bootstrap needs at least 2 replicates")
        for path in bootstrap_intervals(Path(args.run_dir), args.bootstrap, args.seed)["paths"]:
            print(path)
    return 0


def add_areas(sub: Any) -> None:
    p = sub.add_parser("areas", help="published counts, GLS estimates, standard errors and 95%% intervals for "
                       "areas of your own (a block-assignment file), from a run's public outputs")
    p.add_argument("run_dir", help="a published run folder")
    p.add_argument("--assign", required=True, metavar="FILE",
                   help="CSV (comma or pipe) or Parquet mapping each block to an area id; blocks may be left out")
    p.add_argument("--block-column", help="the block code column (default: GEOID, GEOID20, BLOCKID, ... or the "
                   "first of two columns)")
    p.add_argument("--area-column", help="the area id column (default: the other of two columns)")
    p.add_argument("--query", action="append", default=[], metavar="QUERY",
                   help="also every cell of this query (e.g. 'hispanic * cenrace'); repeatable")
    p.add_argument("--skip-unknown-blocks", action="store_true", help="skip rows whose code is not a block of the "
                   "release (a Census file lists every block; a release without a geography file has only the "
                   "populated ones) and say how many, instead of refusing the file")
    p.add_argument("--out", help="output Parquet (default: RUN_DIR/areas/<FILE stem>.parquet)")
    p.set_defaults(handler=cmd_areas)


def cmd_areas(args: Any) -> int:
    path, assignment = write_areas(Path(args.run_dir), Path(args.assign), out=Path(args.out) if args.out else None,
                                   queries=args.query, block_column=args.block_column, area_column=args.area_column,
                                   skip_unknown=args.skip_unknown_blocks)
    if assignment.skipped:
        print(f"censusdp: skipped {assignment.skipped} rows of {args.assign} whose code is not a block of the "
              "release", file=sys.stderr)
    print(path)
    return 0
