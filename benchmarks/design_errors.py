"""Time of the release report's expected errors (every level's root mean square standard error of the main P.L.
counts, ``compute_expected_errors``), the function ``budget optimize --areas`` evaluates for every design.

    python benchmarks/design_errors.py --data DIR [--repeat 3]
    PYTHONPATH=OTHER_SRC python benchmarks/design_errors.py --data DIR     # another version, the baseline

The tree is ``DIR/geography.parquet``'s, the design the ``pl94`` preset's; only public values are read.  Prints the
best wall-clock seconds of ``--repeat`` calls and the block-level figure (which must agree between versions).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from censusdp.geography.tree import build_tree
from censusdp.pipeline.budget.allocation import allocate, allocations_of
from censusdp.pipeline.cli.commands import preset_text
from censusdp.pipeline.config.load import load_config
from censusdp.pipeline.io.microdata import InputFiles, geography_units
from censusdp.pipeline.release.expected_errors import ExpectedErrorsJob, compute_expected_errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="a folder with geography.parquet")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temp:
        path = Path(temp) / "pl94.toml"
        path.write_text(preset_text("pl94").replace('geography = "geography.parquet"',
                                                    f'geography = "{args.data.resolve() / "geography.parquet"}"'))
        config = load_config(path)
    files = InputFiles(config, (), config.input.format, config.input.geography, "parquet")
    tree = build_tree(config.levels, geography_units(files))
    allocations = allocate(config)
    queries = tuple(tuple((config.schema.parse_query(a.query), a.sigma2) for a in allocations_of(allocations, lv.name))
                    for lv in config.levels)
    invariants = {i: tuple(inv.query.name for inv in config.invariants if lv.name in inv.levels)
                  for i, lv in enumerate(config.levels)}
    job = ExpectedErrorsJob(config.schema, tuple(tree.parent), tuple(tree.n_nodes(i) for i in range(tree.depth)),
                            queries, invariants, tuple(lv.name for lv in config.levels), "full_information")
    best = float("inf")
    for _ in range(args.repeat):
        started = time.perf_counter()
        errors, problem = compute_expected_errors(job)
        best = min(best, time.perf_counter() - started)
    assert problem is None, problem
    print(f"{tree.n_nodes(tree.depth - 1)} blocks: expected errors in {best:.3f} s (best of {args.repeat}); "
          f"block P1_001N {errors['levels']['block']['P1_001N']:.6f}")


if __name__ == "__main__":
    main()
