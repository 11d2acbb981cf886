"""Time of exact area variances (postprocess.gls_areas) on a synthetic state-sized tree, beside the GLS solve.

    python benchmarks/area_variances.py [--blocks 40000] [--areas 1000] [--variables 300] [--no-recode]

The tree is a state: 1 root, 1 state, 5 counties, 250 tracts, 800 block groups and --blocks blocks (random
contiguous runs of children per parent, as block codes sort).  The schema is pl94's, hhgq x votingage x hispanic
x cenrace = (8, 2, 2, 63); every level measures the 2020 production query set (total, the single attributes, the
hhinstlevels recode of hhgq unless --no-recode, three 2-way and the 3-way marginal, detailed) with σ² = 1/ρ_q
from the production budget shares (replace-one, Δ² = 2; the root measures no total), and the total is invariant
at the root and the state.  The data are Poisson counts (about 40 people per block) plus Gaussian noise: the
times do not depend on them.  Areas are --areas random contiguous runs of blocks (varying sizes, half the blocks
in none); variables are random 0/1 unions of the cells of random marginals.  Prints the wall-clock seconds (best
of 2) of solve_gls, area_terms, area_variances and area_estimates, and the peak memory.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import time
from collections.abc import Callable
from math import prod

import numpy as np

from censusdp.postprocess.gls import GlsInvariant, GlsLevel, GlsQuery, plan_levels, solve_gls
from censusdp.postprocess.gls_algebra import QuerySpec, answer
from censusdp.postprocess.gls_areas import area_estimates, area_terms, area_variances
from censusdp.postprocess.gls_tree import children_matrix

SHAPE = (8, 2, 2, 63)
INST = (0, 1, 1, 1, 1, 2, 2, 2)  # household, institutional, noninstitutional
RHO = 293764 / 114921
LEVEL_SHARES = [104, 1440, 447, 687, 1256, 165]  # root .. block, over 4099
QUERIES = {  # name: (spec, share of the level's budget at root, state, county, tract, block group, block)
    "total": (QuerySpec(()), [0, 3773, 3126, 1567, 1705, 5]),
    "cenrace": (QuerySpec((3,)), [52, 6, 10, 8, 3, 9]),
    "hispanic": (QuerySpec((2,)), [26, 6, 10, 5, 3, 5]),
    "votingage": (QuerySpec((1,)), [26, 6, 10, 5, 3, 5]),
    "hhinstlevels": (QuerySpec((0,), (INST,)), [26, 6, 10, 5, 3, 5]),
    "hhgq": (QuerySpec((0,)), [26, 6, 10, 5, 3, 5]),
    "hispanic * cenrace": (QuerySpec((2, 3)), [130, 12, 28, 1933, 1055, 21]),
    "votingage * cenrace": (QuerySpec((1, 3)), [130, 12, 28, 20, 9, 21]),
    "votingage * hispanic": (QuerySpec((1, 2)), [26, 6, 10, 5, 3, 5]),
    "votingage * hispanic * cenrace": (QuerySpec((1, 2, 3)), [442, 68, 101, 67, 24, 71]),
    "detailed": (QuerySpec((0, 1, 2, 3)), [3213, 238, 754, 482, 1288, 3945]),
}


def parents_of(rng: np.random.Generator, n_children: int, n_parents: int) -> np.ndarray:
    """Children numbered in runs under each parent, every parent at least one child, run lengths random."""
    cuts = np.sort(rng.choice(np.arange(1, n_children), size=n_parents - 1, replace=False))
    return np.repeat(np.arange(n_parents), np.diff(np.concatenate([[0], cuts, [n_children]])))


def build(rng: np.random.Generator, blocks: int, recode: bool) -> list[GlsLevel]:
    sizes = [1, 1, 5, 250, 800, blocks]
    parents = [np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64)]
    parents += [parents_of(rng, sizes[i], sizes[i - 1]) for i in range(2, len(sizes))]
    truth = [rng.poisson(40 / prod(SHAPE), size=(blocks, prod(SHAPE))).astype(float)]
    for i in range(len(sizes) - 1, 0, -1):
        truth.insert(0, children_matrix(parents[i], sizes[i - 1]) @ truth[0])
    levels = []
    for i, node_truth in enumerate(truth):
        queries = []
        for name, (spec, shares) in QUERIES.items():
            if shares[i] == 0 or (name == "hhinstlevels" and not recode):
                continue
            rho_q = RHO * LEVEL_SHARES[i] / 4099 * shares[i] / sum(shares_[1][i] for shares_ in QUERIES.values())
            sigma2 = 1 / rho_q
            exact = answer(node_truth, SHAPE, spec)
            queries.append(GlsQuery(spec.axes, sigma2, exact + rng.normal(0, np.sqrt(sigma2), exact.shape),
                                    spec.groups))
        invariants = [GlsInvariant((), answer(node_truth, SHAPE, QuerySpec(())))] if i <= 1 else []
        levels.append(GlsLevel(parents[i], queries, invariants))
    return levels


def random_areas(rng: np.random.Generator, blocks: int, n_areas: int) -> np.ndarray:
    """Cut the blocks into 2·n_areas contiguous runs of random lengths; n_areas of them are areas."""
    cuts = np.sort(rng.choice(np.arange(1, blocks), size=2 * n_areas - 1, replace=False))
    run = np.repeat(np.arange(2 * n_areas), np.diff(np.concatenate([[0], cuts, [blocks]])))
    label = np.full(2 * n_areas, -1)
    label[rng.choice(2 * n_areas, size=n_areas, replace=False)] = rng.permutation(n_areas)
    return label[run]


def random_variables(rng: np.random.Generator, n_vars: int, recode: bool) -> np.ndarray:
    """Each a 0/1 union of some cells of a random marginal (the recode among the choices when measured)."""
    specs = [spec for name, (spec, _) in QUERIES.items() if recode or name != "hhinstlevels"]
    maps = [answer(np.eye(prod(SHAPE)), SHAPE, spec) for spec in specs]  # (C, q_cells): each cell's query cell
    weights = np.zeros((n_vars, prod(SHAPE)))
    for v in range(n_vars):
        cell_map = maps[int(rng.integers(len(maps)))]
        chosen = rng.random(cell_map.shape[1]) < rng.uniform(0.05, 0.6)
        chosen[rng.integers(cell_map.shape[1])] = True
        weights[v] = cell_map[:, chosen].sum(axis=1)
    return weights


def best_of(repeat: int, work: Callable[[], object]) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        out = work()
        times.append(time.perf_counter() - started)
    return min(times), out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=40_000)
    parser.add_argument("--areas", type=int, default=1_000)
    parser.add_argument("--variables", type=int, default=300)
    parser.add_argument("--no-recode", dest="recode", action="store_false")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)  # benchmark data, not privacy noise
    levels = build(rng, args.blocks, args.recode)
    planned = plan_levels(levels, SHAPE)
    leaf_area = random_areas(rng, args.blocks, args.areas)
    weights = random_variables(rng, args.variables, args.recode)
    solve, result = best_of(args.repeat, lambda: solve_gls(levels, SHAPE))
    terms_time, terms = best_of(args.repeat, lambda: area_terms(planned, SHAPE, leaf_area, args.areas))
    variances_time, variances = best_of(args.repeat, lambda: area_variances(terms, weights))
    estimates_time, _ = best_of(args.repeat, lambda: area_estimates(result.stream, leaf_area, args.areas, weights))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; {args.blocks} blocks, "
          f"{args.areas} areas ({int((leaf_area >= 0).sum())} blocks in one), {args.variables} variables, "
          f"recode {'on' if args.recode else 'off'}; best of {args.repeat}")
    print("| step | seconds |\n|---|---|")
    for name, seconds in [("solve_gls", solve), ("area_terms", terms_time), ("area_variances", variances_time),
                          ("area_estimates", estimates_time)]:
        print(f"| {name} | {seconds:.2f} |")
    print(f"peak memory {peak:.1f} GiB; median area sd {np.median(np.sqrt(variances)):.2f}")


if __name__ == "__main__":
    main()
