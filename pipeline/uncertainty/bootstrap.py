"""Parametric bootstrap of a release's integer tables: how much would they move under fresh noise?

The published table is taken as the truth; R times, fresh noisy measurements are drawn from it with each query's
mechanism and public parameters, and the same post-processing is re-run.  Only public outputs are used, so no
budget is spent (Thm 19.25).  What the interval means, and where it is biased: ``docs/uncertainty.md``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from censusdp.pipeline.dp.random_source import RandomSource, seeded_random_source, system_random_source
from censusdp.pipeline.io.run_folder import LoadedRun, load_run
from censusdp.pipeline.release.full_information import ReconciliationMethod, solve_tree, tree_targets, tree_terms
from censusdp.pipeline.release.noisy_measurements import noisy_answers
from censusdp.pipeline.release.only_child import only_child_levels
from censusdp.pipeline.release.support import structural_zero_mask
from censusdp.postprocess import QueryMeasurement, reconcile_level
from censusdp.postprocess.passes import RoundingMarginal

BOOTSTRAP_DIR = "bootstrap"
MAX_STORED = 50_000_000  # replicate values kept for percentiles; beyond that, intervals use the sd only


def replicate_tables(run: LoadedRun, truth: list[np.ndarray], rng: RandomSource, count: int = 1
                     ) -> list[np.ndarray]:
    """``count`` bootstrap replicates of ``truth`` (per level, dense), reconciled top-down as the release reconciles
    each level; per level, the replicates' tables stacked (replicate r's nodes are rows r n .. (r + 1) n - 1).
    The replicates are reconciled together, as copies of the tree side by side: a node's problem involves its own
    parent only, so each gets the tables it would get alone (up to the solver's tolerance, which can tip a tie in
    the rounding)."""
    schema, config, tree = run.config.schema, run.config, run.tree
    zeros = structural_zero_mask(config)
    drawn: dict[int, list[QueryMeasurement]] = {}

    def draws(level: int) -> list[QueryMeasurement]:
        if level not in drawn:
            drawn[level] = []
            for q in run.level_noise(level):
                answers = np.tile(schema.marginal(q.query, truth[level]), (count, 1))
                # the release's own mechanism and public parameters, through its own function
                noisy = noisy_answers(answers, q.mechanism, q.sigma2, q.scale, rng)
                drawn[level].append(QueryMeasurement(name=q.query.name, matrix=schema.query_matrix(q.query),
                                                     noisy=noisy, sigma2=q.sigma2))
        return drawn[level]

    full = config.reconciliation_method is ReconciliationMethod.FULL_INFORMATION
    targets = _gls_targets(run, [draws(level) for level in range(tree.depth)], count) if full else None
    out: list[np.ndarray] = []
    for level in range(tree.depth):
        if targets is not None:
            fitted = targets[level]
        else:
            chain = [replace(m, name=f"{config.levels[deeper].name}: {m.name}")
                     for deeper in only_child_levels(tree, level) for m in draws(deeper)]
            fitted = draws(level) + chain
        passes = config.level_passes(config.levels[level].name)
        parent_index = (np.concatenate([tree.parent[level] + r * tree.n_nodes(level - 1) for r in range(count)])
                        if level else None)
        invariants = [replace(i, values=np.tile(i.values, (count, 1))) for i in run.invariants.get(level, [])]
        result = reconcile_level(fitted, n_cells=schema.n_cells, parent_counts=out[level - 1] if level else None,
                                 parent_index=parent_index, invariants=invariants, structural_zeros=zeros,
                                 solver=config.solver, passes=passes.l2, tolerance=float(passes.tolerance),
                                 rounding=[RoundingMarginal(q.name, schema.query_matrix(q)) for q in passes.rounding])
        drawn.pop(level, None)
        out.append(result.counts)
    return out


def _gls_targets(run: LoadedRun, drawn: list[list[QueryMeasurement]], count: int) -> list[list[QueryMeasurement]]:
    """Full-information reconciliation's targets from each replicate's measurements (``release.full_information``),
    stacked as ``drawn`` is.  The GLS is solved per replicate (its tree has one root); a target's variance depends
    on the design only, so the replicates' agree."""
    schema, config = run.config.schema, run.config
    sizes = [run.tree.n_nodes(level) for level in range(len(drawn))]
    per_replicate, terms = [], None
    for r in range(count):
        measured = [[(schema.parse_query(m.name), m.sigma2, m.noisy[r * n:(r + 1) * n]) for m in queries]
                    for queries, n in zip(drawn, sizes, strict=True)]
        result = solve_tree(schema, run.tree.parent, measured, run.invariants)
        if terms is None:  # the targets' queries and weights: the design's, one set for every replicate
            terms = tree_terms(config, result.stream, [[(q, s2) for q, s2, _ in level] for level in measured])
        per_replicate.append(tree_targets(config, result, measured, terms))
    return [[replace(first, noisy=np.concatenate([rep[level][i].noisy for rep in per_replicate]))
             for i, first in enumerate(per_replicate[0][level])] for level in range(len(drawn))]


def bootstrap_intervals(run_dir: Path, replicates: int, seed: int | None = None) -> dict[str, Any]:
    """Run ``replicates`` bootstrap replicates of the run in ``run_dir`` and write ``bootstrap/<level>.parquet``
    (columns: docs/uncertainty.md); ``seed`` makes the noise reproducible, None uses the OS source.  Returns per
    level the mean sd of the total and of a detailed cell, and the paths written."""
    if replicates < 2:
        raise ValueError("replicates must be at least 2")
    run = load_run(run_dir)
    rng = seeded_random_source(seed) if seed is not None else system_random_source()
    truth = [run.table(level) for level in range(run.tree.depth)]
    sums = [np.zeros(t.shape) for t in truth]
    squares = [np.zeros(t.shape) for t in truth]
    totals: list[list[np.ndarray]] = [[] for _ in truth]
    keep = sum(t.size for t in truth) * replicates <= MAX_STORED
    stored: list[list[np.ndarray]] = [[] for _ in truth]
    per_batch = max(1, run.config.chunk_cells // sum(t.size for t in truth))  # replicates reconciled together
    for start in range(0, replicates, per_batch):
        count = min(per_batch, replicates - start)
        for level, stacked in enumerate(replicate_tables(run, truth, rng, count)):
            for table in np.split(stacked, count):
                sums[level] += table
                squares[level] += table.astype(float) ** 2
                totals[level].append(table.sum(axis=1))
                if keep:
                    stored[level].append(table.astype(np.int32))
    summary: dict[str, Any] = {"replicates": replicates, "levels": {}, "paths": []}
    for level, spec in enumerate(run.config.levels):
        mean = sums[level] / replicates
        sd = np.sqrt(np.maximum(squares[level] / replicates - mean**2, 0) * replicates / (replicates - 1))
        if keep:
            low, high = np.percentile(np.stack(stored[level]), [2.5, 97.5], axis=0)
        else:
            low, high = truth[level] - 1.96 * sd, truth[level] + 1.96 * sd
        summary["levels"][spec.name] = {"sd_total": float(np.std(np.stack(totals[level]), axis=0, ddof=1).mean()),
                                        "sd_cell": float(sd.mean())}
        summary["paths"].append(str(_write(run, level, truth[level], mean, sd, low, high)))
    return summary


def _write(run: LoadedRun, level: int, published: np.ndarray, mean: np.ndarray, sd: np.ndarray,
           low: np.ndarray, high: np.ndarray) -> Path:
    schema = run.config.schema
    node, cell = np.nonzero((published > 0) | (mean > 0))
    columns: dict[str, pa.Array] = {"geoid": pa.array(run.tree.geoids[level][node].tolist(), type=pa.string())}
    for attribute, index in zip(schema.attributes, np.unravel_index(cell, schema.shape), strict=True):
        columns[attribute.name] = pa.DictionaryArray.from_arrays(index.astype(np.int32), pa.array(attribute.values))
    pick = {"published": published, "boot_mean": mean, "boot_sd": sd, "boot_bias": mean - published,
            "ci_low": low, "ci_high": high}
    columns.update({name: pa.array(values[node, cell]) for name, values in pick.items()})
    out = run.run_dir / BOOTSTRAP_DIR
    out.mkdir(exist_ok=True)
    path = out / f"{run.config.levels[level].name}.parquet"
    pq.write_table(pa.table(columns), path, compression="zstd")
    return path
