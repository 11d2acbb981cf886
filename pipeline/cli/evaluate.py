"""``censusdp evaluate``: NOT PRIVATE, a release compared with the true microdata it was made from."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from censusdp.pipeline.config.model import Format
from censusdp.pipeline.errors import CensusDPError
from censusdp.pipeline.evaluate.compare import evaluate, write_evaluation
from censusdp.pipeline.evaluate.metrics import LABEL
from censusdp.pipeline.io.run_folder import load_run


def add_evaluate(sub: Any) -> None:
    p = sub.add_parser("evaluate", help="NOT PRIVATE: compare a release with its true (synthetic/test) microdata")
    p.add_argument("--truth", required=True, help="the true microdata the release was made from (synthetic or test)")
    p.add_argument("--release", required=True, action="append", help="a published run folder; give several to "
                   "compare them side by side (each also gets its own evaluation in OUT/<run id>)")
    p.add_argument("--out", help="output folder (default: ./evaluation-<run id>, or ./evaluation-comparison for "
                   "several releases; never inside a run folder)")
    p.add_argument("--format", dest="fmt", choices=list(Format), help="format of --truth")
    p.add_argument("--units-truth", help="the true unit file of a release with a units universe (default: the one "
                   "its configuration names)")
    p.add_argument("--seed", type=int, default=0, help="seed of the bottom-up baseline's noise (default 0)")
    p.add_argument("--diversity", help="attributes whose entropy bins areas (default: hispanic,cenrace)")
    p.add_argument("--areas", action="append", default=[], metavar="FILE",
                   help="also evaluate the areas of a block-assignment file (as censusdp areas --assign), as level "
                   "areas:<file stem>; repeat for several plans")
    p.set_defaults(handler=cmd_evaluate)


def safe_run_id(run: dict[str, Any], run_dir: Path) -> str:
    """The run id as a folder name: the manifest is editable, so it must not be a path."""
    from censusdp.pipeline.budget.ledger.charges import ID_PATTERN  # the ledger's id rule: run ids are ledger ids

    run_id = str(run.get("run_id", ""))
    if not ID_PATTERN.fullmatch(run_id) or run_id in (".", ".."):
        raise CensusDPError(f"{run_dir}: the manifest's run id is not a valid run id")
    return run_id


def cmd_evaluate(args: argparse.Namespace) -> int:
    from censusdp.pipeline.evaluate.side_by_side import write_comparison

    run_dirs = [Path(r).resolve() for r in args.release]
    runs = [load_run(run_dir).manifest for run_dir in run_dirs]
    several = len(run_dirs) > 1
    names = [safe_run_id(run, run_dir) for run, run_dir in zip(runs, run_dirs, strict=True)]
    if len(set(names)) != len(names):
        raise CensusDPError("evaluate: the same run is given twice")
    out = (Path(args.out) if args.out else Path.cwd() / ("evaluation-comparison" if several
                                                         else f"evaluation-{names[0]}")).resolve()
    targets = [out / name for name in names] if several else [out]
    for target in [out, *targets]:  # NOT PRIVATE outputs never go into a release, evaluated here or not
        if any(target.is_relative_to(run_dir) for run_dir in run_dirs) or (target / "manifest.json").exists():
            raise CensusDPError(f"{target}: evaluation outputs are not private; write them outside any run folder")
    diversity = tuple(a.strip() for a in args.diversity.split(",")) if args.diversity else None
    results = []
    for run_dir, run, target in zip(run_dirs, runs, targets, strict=True):
        metrics = evaluate(Path(args.truth), run_dir, seed=args.seed, fmt=args.fmt, diversity=diversity,
                           units_truth=Path(args.units_truth) if args.units_truth else None,
                           areas=[Path(plan) for plan in args.areas])
        for path in write_evaluation(metrics, run, target):
            print(path)
        results.append((run, metrics))
    if several:
        for path in write_comparison(results, out):
            print(path)
    print(f"censusdp: {LABEL}", file=sys.stderr)
    return 0
