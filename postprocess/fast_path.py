"""Exact closed-form reconciliation when only detailed queries are measured and nothing else is fixed: one Euclidean
projection onto a scaled simplex per (parent, cell), rounded by largest remainder; at the root, max(ybar, 0) to the
nearest integer (derivations: docs/reconciliation.md, "Inside one level").  Post-processing (Thm 19.25).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from censusdp.postprocess.layout import Blocks
from censusdp.postprocess.problem import Inputs, ReconciliationError
from censusdp.postprocess.rounding import SNAP
from censusdp.postprocess.ties import TieSource, priority

CHUNK_ENTRIES = 1 << 22  # (problem, child) pairs handled at once: bounds the temporary arrays


def applies(inputs: Inputs) -> bool:
    """Only identity-matrix measurements and no invariants: the closed forms solve the same problem."""
    return not inputs.invariants and all(_is_identity(m.matrix, inputs.n_cells) for m in inputs.measurements)


def _is_identity(matrix: sp.csr_matrix, n_cells: int) -> bool:
    return (
        matrix.shape == (n_cells, n_cells)
        and matrix.nnz == n_cells
        and np.array_equal(matrix.indptr, np.arange(n_cells + 1))
        and np.array_equal(matrix.indices, np.arange(n_cells))
    )


def combined_target(inputs: Inputs) -> np.ndarray:
    """``ybar`` (n_nodes, n_cells): the inverse-variance weighted mean of the detailed measurements."""
    weights = [1.0 / float(m.sigma2) for m in inputs.measurements]
    return sum(w * m.noisy for w, m in zip(weights, inputs.measurements, strict=True)) / sum(weights)


def project(y: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Row-wise projection of y (G, k) onto {x >= 0, sum x = p} for p (G,) > 0 (sort and threshold)."""
    k = y.shape[1]
    u = -np.sort(-y, axis=1)
    excess = np.cumsum(u, axis=1) - p[:, None]
    active = u * np.arange(1, k + 1) > excess  # true on a prefix; the first entry always (p > 0)
    r = k - np.argmax(active[:, ::-1], axis=1)  # number of positive entries
    theta = excess[np.arange(y.shape[0]), r - 1] / r
    return np.maximum(y - theta[:, None], 0.0)


def largest_remainder(x: np.ndarray, p: np.ndarray, rng: TieSource | None) -> np.ndarray:
    """Row-wise integer r (G, k) with sum r = p, minimising ``sum |r - x|`` (increments to largest fractions)."""
    nearest = np.rint(x)
    x = np.where(np.abs(x - nearest) <= SNAP, nearest, x)
    floor = np.floor(x)
    gap = p - floor.sum(axis=1).astype(np.int64)
    if np.any(gap < 0) or np.any(gap > x.shape[1]):
        raise ReconciliationError(f"fast path: floors cannot be completed in {x.shape[0]} problems")
    order = np.argsort(priority(x - floor, rng), axis=1, kind="stable")
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(x.shape[1])[None, :], axis=1)
    return floor.astype(np.int64) + (ranks < gap[:, None])


def reconcile_fast(
    inputs: Inputs, blocks: Blocks, counts: np.ndarray, rng: TieSource | None
) -> dict[str, float | int]:
    """Fill ``counts`` for every block (only children included) and return the public diagnostics."""
    y = combined_target(inputs)
    y[:, inputs.structural_zeros] = 0.0
    if blocks.parent is None or inputs.parent_counts is None:
        x = np.maximum(y, 0.0)
        floor = np.floor(x + SNAP)
        frac = np.clip(x - floor, 0.0, 1.0)
        up = frac > 0.5
        if rng is not None:  # exact halves: a fair coin each
            half = np.abs(frac - 0.5) <= 2.0**-32
            up |= half & (rng.uniform_below(2, frac.size).reshape(frac.shape) == 1)
        counts[:] = floor.astype(np.int64) + up
        return {"projections": int(x.size), "variables": int(x.size), "max_sum_violation": 0.0}
    sizes = np.diff(blocks.start)
    worst, problems = 0.0, 0
    for k in np.unique(sizes):
        ids = np.flatnonzero(sizes == k)
        per_chunk = max(1, CHUNK_ENTRIES // (int(k) * inputs.n_cells))
        for lo in range(0, ids.size, per_chunk):
            chunk = ids[lo : lo + per_chunk]
            nodes = blocks.order[blocks.start[chunk][:, None] + np.arange(k)]  # (blocks, k)
            parent = inputs.parent_counts[blocks.parent[chunk]]  # (blocks, n_cells)
            local, cell = np.nonzero(parent > 0)
            if local.size == 0:
                continue
            rows = nodes[local]  # (G, k) node rows of each free (block, cell)
            p = parent[local, cell]
            target = y[rows, cell[:, None]]
            x = project(target, p.astype(np.float64)) if k > 1 else np.broadcast_to(p[:, None], (p.size, 1))
            worst = max(worst, float(np.abs(x.sum(axis=1) - p).max()))
            counts[rows, cell[:, None]] = largest_remainder(x, p, rng) if k > 1 else p[:, None]
            problems += int(p.size)
    variables = int(np.sum(sizes * blocks.n_free))
    return {"projections": problems, "variables": variables, "max_sum_violation": worst}
