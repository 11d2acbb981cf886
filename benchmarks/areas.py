"""Areas of the user's own: time of ``censusdp areas`` and the coverage of its intervals by kind and size of area.

    python benchmarks/areas.py --persons 1000000 --draws 40 [--data shared/data/ri2010] [--preset pl94]

1. One seeded release of the preset on a synthetic state of ``--persons`` (or on ``--data``), timed.
2. ``censusdp areas`` for ``--areas`` areas (a plan of contiguous runs of blocks), timed: the figure the issue
   bounds by one minute.
3. Coverage: ``--draws`` fresh sets of measurements of the TRUE data, with the release's own mechanisms and σ²
   (exactly the distribution of another release's measurements), each fitted by the GLS; per area kind
   (contiguous runs of blocks, whole tracts, areas that cut across tracts and counties) and size (true persons
   <= 100, 100-10k, >= 10k), the share of (area, P-table variable, draw) whose interval estimate ± 1.96·se holds
   the true count.
4. The published numbers of the release itself: the share of areas whose true count lies in the interval, and
   how far the published count is from the truth, in standard errors.

EVALUATION AGAINST TRUE DATA — NOT PRIVATE: synthetic or test data only.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl
from real_data import release

from censusdp.pipeline.dp.random_source import seeded_random_source
from censusdp.pipeline.evaluate.compare import true_histograms
from censusdp.pipeline.io.run_folder import load_run
from censusdp.pipeline.synth.population import write_synthetic
from censusdp.pipeline.uncertainty.areas import area_variables, write_areas
from censusdp.pipeline.uncertainty.estimates import gls_levels, redrawn_measurements
from censusdp.postprocess.gls import plan_levels, solve_gls
from censusdp.postprocess.gls_areas import area_estimates, area_terms, area_variances

SIZES = ((0, 100, "<= 100"), (101, 9_999, "100-10k"), (10_000, 10**12, ">= 10k"))
Z = 1.959963984540054


def runs_plan(n: int, rng: np.random.Generator, areas: int, longest: int | None = None) -> np.ndarray:
    """``areas`` contiguous runs of blocks of log-uniform lengths (1 to ``longest``, default n/areas·4), gaps
    between them (shortened in proportion when they would not fit)."""
    leaf = np.full(n, -1)
    lengths = np.exp(rng.uniform(0, np.log(max(2, longest or 4 * n // areas)), areas)).astype(int) + 1
    scale = n / (lengths.sum() * 1.3)
    start = 0
    for area, length in enumerate(np.maximum(1, (lengths * min(1.0, scale)).astype(int))):
        leaf[start:start + length] = area
        start += length + int(rng.integers(0, max(1, length // 3) + 1))
    return leaf


def crossing_plan(run, rng: np.random.Generator, areas: int) -> np.ndarray:  # type: ignore[no-untyped-def]
    """Areas that cut across tracts and counties: each a run of blocks centred on a tract boundary, half of them
    on a county boundary, with random blocks dropped."""
    depth = run.tree.depth
    tract = ancestors(run, depth - 1, depth - 3)
    county = ancestors(run, depth - 1, 2)
    cuts_tract = np.flatnonzero(tract[1:] != tract[:-1]) + 1
    cuts_county = np.flatnonzero(county[1:] != county[:-1]) + 1
    leaf = np.full(len(tract), -1)
    for area in range(areas):
        cuts = cuts_county if area % 2 and len(cuts_county) else cuts_tract
        centre = int(rng.choice(cuts))
        half = int(np.exp(rng.uniform(0, np.log(400))))
        members = np.arange(max(0, centre - half), min(len(leaf), centre + half))
        members = members[(leaf[members] < 0) & (rng.random(len(members)) < 0.8)]
        leaf[members] = area
    return leaf


def ancestors(run, level: int, up_to: int) -> np.ndarray:  # type: ignore[no-untyped-def]
    """Each node of ``level``'s ancestor index at level ``up_to``."""
    index = np.arange(run.tree.n_nodes(level))
    for i in range(level, up_to, -1):
        index = run.tree.parent[i][index]
    return index


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--persons", type=int, default=1_000_000)
    parser.add_argument("--data", type=Path, help="a folder with microdata.parquet and geography.parquet")
    parser.add_argument("--preset", default="pl94")
    parser.add_argument("--areas", type=int, default=1000)
    parser.add_argument("--draws", type=int, default=40)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="censusdp-areas-"))
    data = args.data
    if data is None:
        data = folder / "data"
        write_synthetic(args.persons, args.seed, data)
    started = time.perf_counter()
    run_dir = release(Path(data).resolve(), args.preset, folder, args.seed)
    print(f"release: {time.perf_counter() - started:.1f} s ({run_dir})")
    run = load_run(run_dir)
    rng = np.random.default_rng(args.seed)  # benchmark only: which areas
    n = run.tree.n_nodes(run.tree.depth - 1)
    plan = runs_plan(n, rng, args.areas)
    inside = plan >= 0
    pl.DataFrame({"GEOID": run.tree.geoids[-1][inside], "DISTRICT": plan[inside].astype(str)}).write_csv(
        folder / "plan.csv")
    started = time.perf_counter()
    out, _ = write_areas(run_dir, folder / "plan.csv")
    print(f"censusdp areas, {len(np.unique(plan[inside]))} areas x {pl.read_parquet(out)['variable'].n_unique()} "
          f"variables over {n} blocks: {time.perf_counter() - started:.1f} s")
    summary_table_accuracy(Path(data) / "microdata.parquet", run_dir)
    lowest = run.tree.depth - 1
    coverage(run, {"runs of blocks": runs_plan(n, rng, 150, longest=n // 12),
                   "whole tracts": ancestors(run, lowest, lowest - 2),
                   "whole counties": ancestors(run, lowest, 2),
                   "across tracts and counties": crossing_plan(run, rng, args.areas // 4)}, args.draws, out, plan)


def summary_table_accuracy(truth: Path, run_dir: Path) -> None:
    """``censusdp evaluate``'s mean absolute error of each P table over its variables, per level."""
    from censusdp.pipeline.evaluate.compare import evaluate

    metrics = evaluate(truth, run_dir).filter(pl.col("query").str.contains(r"^[PH]\d$") & (pl.col("metric") == "mae")
                                              & (pl.col("group") == "all"))
    table = metrics.pivot(on="method", index=["level", "query"], values="value")
    print("\n| level | table | published (reconciled) | GLS estimate | bottom-up baseline |\n|---|---|---|---|---|")
    for row in table.iter_rows(named=True):
        print(f"| {row['level']} | {row['query']} | {row['reconciled']:.3f} | {row['gls']:.3f} | "
              f"{row['bottom_up']:.3f} |")


def coverage(run, plans: dict[str, np.ndarray], draws: int, published_file: Path,  # type: ignore[no-untyped-def]
             published_plan: np.ndarray) -> None:
    """Coverage per kind and size over fresh draws; (area, variable) pairs with standard error 0 (invariants,
    empty areas) are left out: their interval is the exact value."""
    truth = true_histograms(run)
    variables = area_variables(run)
    shape = run.config.schema.shape
    levels = gls_levels(run)
    planned = plan_levels(levels, shape)
    sds, trues, bins = {}, {}, {}
    for kind, leaf in plans.items():
        n_areas = int(leaf.max()) + 1
        member = leaf >= 0
        total = np.bincount(leaf[member], weights=truth[-1][member].sum(axis=1), minlength=n_areas)
        sds[kind] = np.sqrt(area_variances(area_terms(planned, shape, leaf, n_areas), variables.weights))
        sds[kind][sds[kind] < 1e-6] = np.nan  # exact: never counted (nan comparisons are False, masked below)
        trues[kind] = np.stack([variables.weights @ truth[-1][leaf == a].sum(axis=0) for a in range(n_areas)])
        bins[kind] = np.select([total <= high for _, high, _ in SIZES], range(len(SIZES)), len(SIZES) - 1)
    hits = {(k, b): [0, 0] for k in plans for b in range(len(SIZES))}
    rng = seeded_random_source(20261202)  # benchmark only: fresh measurements of the truth
    started = time.perf_counter()
    for _ in range(draws):
        result = solve_gls(gls_levels(run, redrawn_measurements(run, truth, rng)), shape)
        for kind, leaf in plans.items():
            estimate = area_estimates(result.stream, leaf, int(leaf.max()) + 1, variables.weights)
            held = np.abs(estimate - trues[kind]) <= Z * sds[kind]
            counted = ~np.isnan(sds[kind])
            for b in range(len(SIZES)):
                rows = bins[kind] == b
                hits[(kind, b)][0] += int(held[rows][counted[rows]].sum())
                hits[(kind, b)][1] += int(counted[rows].sum())
    print(f"\n{draws} draws in {time.perf_counter() - started:.0f} s; {len(variables.names)} variables per area\n")
    print("| kind of area | size (true persons) | areas | (area, variable, draw) | coverage of estimate ± 1.96 se |")
    print("|---|---|---|---|---|")
    for kind in plans:
        for b, (_, _, name) in enumerate(SIZES):
            done, total = hits[(kind, b)]
            areas = int((bins[kind] == b).sum())
            print(f"| {kind} | {name} | {areas} | {total} | {done / total:.3f} |" if total else
                  f"| {kind} | {name} | {areas} | 0 | |")
    plan_true = np.stack([variables.weights @ truth[-1][published_plan == a].sum(axis=0)
                          for a in range(int(published_plan.max()) + 1)])
    release_check(published_file, plan_true, variables.names)


def release_check(published_file: Path, true: np.ndarray, names: tuple[str, ...]) -> None:
    """The release's own published counts and intervals against the truth (plan of runs of blocks)."""
    table = pl.read_parquet(published_file)
    areas = sorted(table["area"].unique().to_list(), key=int)
    frame = table.with_columns(pl.col("area").cast(pl.Int64)).sort("area", "variable")
    order = {name: j for j, name in enumerate(names)}
    true_col = [float(true[a, order[v]]) for a, v in zip(frame["area"], frame["variable"], strict=True)]
    frame = frame.with_columns(true=pl.Series(true_col))
    held = ((frame["ci_low"] <= frame["true"]) & (frame["true"] <= frame["ci_high"])).mean()
    counted = frame.filter((pl.col("true") > 0) | (pl.col("published") > 0))  # not the cells 0 in both
    published = ((counted["published"] - counted["true"]).abs() / counted["std_error"])
    gls = ((counted["estimate"] - counted["true"]).abs() / counted["std_error"])
    print(f"\nthe release itself ({len(areas)} areas x {len(names)} variables): truth inside [ci_low, ci_high] "
          f"{held:.3f}; over the {counted.height} (area, variable) pairs not 0 in both the published and the true "
          f"table, |published - truth| / se: median {published.median():.3f}, 90% {published.quantile(0.9):.3f}, "
          f"within 1.96: {(published <= Z).mean():.3f}; |estimate - truth| / se: median {gls.median():.3f}, "
          f"within 1.96: {(gls <= Z).mean():.3f}")


if __name__ == "__main__":
    main()
