"""Reconciliation throughput per level and path, on synthetic PL94-shaped data, side by side in one run.

    python benchmarks/reconcile.py [--persons 100000] [--seed 1] [--workers 1,2] [--max-cvxpy-cells 2000000]

Synthesises a state (``pipeline.synth.population``), builds block / block group / tract histograms over the PL94 cells
(hhgq 8 x votingage 2 x hispanic 2 x cenrace 63 = 2016), measures them with exact discrete Gaussian noise
(seeded test source: a benchmark, not a release) and reconciles every level against the true level above:

* ``fast``: detailed query only, ``solver="auto"`` (closed-form projection + largest remainder);
* ``cvxpy detailed``: the same problems forced through cvxpy (``solver="cvxpy"``), the same-run baseline;
* ``cvxpy multi`` / ``first_order multi``: the PL94 strategy (total, hhgq, votingage, hispanic, cenrace,
  votingage*hispanic*cenrace, detailed), weighted by 1/sigma2, through cvxpy (forced) and through the
  certified first-order solver (``postprocess.first_order``, which ``solver="auto"`` picks for it).

"cells" = children x 2016 over the parents reconciled.  cvxpy paths run on at most ``--max-cvxpy-cells``
cells per level (the first parents), in process (1 worker) or over a process pool in chunks of parents, as
the pipeline does (pool start-up included in the time).  The fast path is timed best of 3, in process.
Prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from concurrent.futures import ProcessPoolExecutor
from fractions import Fraction

import numpy as np
import polars as pl
import scipy.sparse as sp

from censusdp.geography.presets import US_CENSUS_LEVELS
from censusdp.geography.tree import build_tree
from censusdp.pipeline.dp.noise import sample_discrete_gaussian
from censusdp.pipeline.dp.random_source import seeded_random_source
from censusdp.pipeline.io.histograms import all_level_histograms, lowest_histograms
from censusdp.pipeline.synth.population import synthesize
from censusdp.postprocess import QueryMeasurement, reconcile_level

SHAPE = (8, 2, 2, 63)  # hhgq, votingage, hispanic, cenrace
AXES = {"hhgq": 0, "votingage": 1, "hispanic": 2, "cenrace": 3}
N_CELLS = int(np.prod(SHAPE))
STRATEGY = {  # query -> sigma2 (persons^2)
    "total": Fraction(5),
    "hhgq": Fraction(10),
    "votingage": Fraction(10),
    "hispanic": Fraction(10),
    "cenrace": Fraction(20),
    "votingage * hispanic * cenrace": Fraction(20),
    "detailed": Fraction(50),
}
LEVELS = ("tract", "block_group", "block")


def query_matrix(name: str) -> sp.csr_matrix:
    keep = [] if name == "total" else list(range(4)) if name == "detailed" else [AXES[a] for a in name.split(" * ")]
    coords = np.indices(SHAPE).reshape(4, -1)
    label = np.zeros(N_CELLS, dtype=np.int64)
    size = 1
    for axis in keep:
        label, size = label * SHAPE[axis] + coords[axis], size * SHAPE[axis]
    return sp.csr_matrix((np.ones(N_CELLS), (label, np.arange(N_CELLS))), shape=(size, N_CELLS))


def histograms(persons: int, seed: int):
    micro, geography = synthesize(persons, seed)
    tree = build_tree(US_CENSUS_LEVELS, geography["geocode"].to_numpy())
    codes = micro.select(
        pl.col("GQTYPE_PL").cast(pl.Int64),
        pl.col("VOTING_AGE").cast(pl.Int64) - 1,
        pl.col("CENHISP").cast(pl.Int64) - 1,
        pl.col("CENRACE").cast(pl.Int64) - 1,
    ).to_numpy()
    cells = np.ravel_multi_index(tuple(codes.T), SHAPE)
    units = tree.lowest_index(micro["geocode"].to_numpy())
    lowest = lowest_histograms(units, cells, tree.n_nodes(tree.depth - 1), N_CELLS)
    return tree, all_level_histograms(tree, lowest)


def measure(true: np.ndarray, names: list[str], rng) -> list[QueryMeasurement]:
    out = []
    for name in names:
        matrix = query_matrix(name)
        answers = np.asarray(matrix @ true.T).T
        noise = sample_discrete_gaussian(STRATEGY[name], answers.size, rng=rng).reshape(answers.shape)
        out.append(QueryMeasurement(name, matrix, answers + noise, STRATEGY[name]))
    return out


def _chunk(args):
    measurements, parents, index, solver, seed = args
    result = reconcile_level(
        measurements,
        n_cells=N_CELLS,
        parent_counts=parents,
        parent_index=index,
        solver=solver,
        rng=seeded_random_source(seed),
    )
    return result.report


def reconcile(measurements, parents, index, solver: str, workers: int, seed: int) -> tuple[float, list[dict]]:
    """Seconds and reports of reconciling the level (1 worker: in process; else chunks of parents in a pool).

    Chunks are balanced by estimated work (children x free cells of each parent, largest first onto the
    least loaded of 4 x workers chunks) and submitted largest first, so one big parent does not idle a core.
    """
    started = time.perf_counter()
    if workers == 1:
        report = _chunk((measurements, parents, index, solver, seed))
        return time.perf_counter() - started, [report]
    work = np.bincount(index, minlength=parents.shape[0]) * np.count_nonzero(parents > 0, axis=1)
    loads, members = np.zeros(4 * workers), [[] for _ in range(4 * workers)]
    for parent in np.argsort(-work, kind="stable"):
        target = int(np.argmin(loads))
        loads[target] += work[parent]
        members[target].append(parent)
    jobs = []
    for chunk in sorted(range(len(members)), key=lambda c: -loads[c]):
        chosen = np.sort(np.asarray(members[chunk], dtype=np.int64))
        rows = np.isin(index, chosen)
        if rows.any():
            sub = [QueryMeasurement(m.name, m.matrix, m.noisy[rows], m.sigma2) for m in measurements]
            jobs.append((sub, parents[chosen], np.searchsorted(chosen, index[rows]), solver, seed + chunk))
    with ProcessPoolExecutor(workers) as pool:
        reports = list(pool.map(_chunk, jobs))
    return time.perf_counter() - started, reports


def first_parents(index: np.ndarray, max_cells: int) -> np.ndarray:
    """Node rows of the first parents whose children hold at most ``max_cells`` cells (at least one parent)."""
    children = np.bincount(index)
    keep = max(1, int(np.searchsorted(np.cumsum(children) * N_CELLS, max_cells, side="right")))
    return np.flatnonzero(index < keep)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--persons", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", default="1,2", help="process counts for the cvxpy paths, e.g. 1,2")
    parser.add_argument("--max-cvxpy-cells", type=int, default=2_000_000)
    parser.add_argument("--levels", default=",".join(LEVELS), help="comma-separated subset of " + ", ".join(LEVELS))
    parser.add_argument(
        "--multi-solvers", default="cvxpy,first_order,auto", help="solver= values of the multi path, e.g. cvxpy,OSQP"
    )
    args = parser.parse_args()
    started = time.perf_counter()
    tree, truth = histograms(args.persons, args.seed)
    rng = seeded_random_source(args.seed)  # TEST ONLY source: a benchmark on synthetic data
    print(f"\n{args.persons:,} persons, {os.cpu_count()} CPUs, {platform.processor() or platform.machine()}; "
          f"data ready in {time.perf_counter() - started:.1f} s\n")
    print("| level | path | workers | parents | cells | seconds | cells/s | max sum violation | rounding |")
    print("|---|---|---|---|---|---|---|---|---|")
    names = [level.name for level in tree.levels]
    for level_name in args.levels.split(","):
        level = names.index(level_name)
        index, parents, true = tree.parent[level], truth[level - 1], truth[level]
        detailed = measure(true, ["detailed"], rng)
        multi = measure(true, list(STRATEGY), rng)
        subset = first_parents(index, args.max_cvxpy_cells)
        n_sub = int(index[subset].max()) + 1
        workers = [int(w) for w in args.workers.split(",")]
        runs = [("fast", detailed, np.arange(index.size), "auto", 1)]
        runs += [("cvxpy detailed", detailed, subset, "cvxpy", w) for w in workers]
        runs += [(f"{s} multi", multi, subset, s, w) for s in args.multi_solvers.split(",") for w in workers]
        for path, measurements, rows, solver, workers in runs:
            sub = [QueryMeasurement(m.name, m.matrix, m.noisy[rows], m.sigma2) for m in measurements]
            n_parents = int(index[rows].max()) + 1
            repeat = 3 if path == "fast" else 1  # best of 3 for the millisecond-scale fast path
            seconds, reports = min(
                (reconcile(sub, parents[:n_parents], index[rows], solver, workers, args.seed) for _ in range(repeat)),
                key=lambda timed: timed[0],
            )
            cells = rows.size * N_CELLS
            worst = max(r["max_sum_violation"] for r in reports)
            rounding = sorted({k for r in reports for k in r["rounding"]})
            assert n_parents == (n_sub if path != "fast" else parents.shape[0])
            print(f"| {level_name} | {path} | {workers} | {n_parents:,} | {cells:,} | {seconds:.2f} | "
                  f"{cells / seconds:,.0f} | {worst:.1e} | {', '.join(rounding)} |", flush=True)


if __name__ == "__main__":
    main()
