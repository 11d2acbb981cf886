"""Generalised least squares estimates of every node's detailed histogram, with exact variances.

Model (a public fact of the release): at every node v of level l and every measured marginal query q,
y_{v,q} = Q_q x_v + e with e ~ N_Z(0, σ²_{l,q}) independent (Thm 19.37(iii): the mechanism's σ² is public);
x_parent = Σ x_children.  The GLS estimate minimises Σ_{v,q} ||Q_q x_v - y_{v,q}||² / σ²_{l,q} subject to the
invariants (exact, published values) — every query at every level is used, marginals included.  It is linear
in the noisy measurements, so it is unbiased; it ignores non-negativity and structural zeros (those are what
the reconciled tables add).  Computed from published measurements only: post-processing, no privacy cost
(Thm 19.25).

How (exactly, no approximation): the information matrix of every level is Σ_S λ_l(S) P_S on one orthogonal
decomposition of the cell space (``postprocess.gls_algebra``), so the problem splits into one scalar tree
problem per attribute subset S, with per-level weights λ_l(S) and data P_S b_v, b_v = Σ_q Q_q^T y_{v,q}/σ²_q.
Each is solved by the two-pass tree algorithm (Hay et al. 2010): up, each node's best estimate from its own
subtree z̃_v with variance V_v; down, x̂_c = z̃_c + V_c/ΣV (x̂_parent - Σ z̃) over the siblings, with
Var(x̂_c) = V_c - V_c²/ΣV + (V_c/ΣV)² Var(x̂_parent).  An invariant marginal K at a node fixes P_S x_v for
every S ⊆ K (variance 0).  Cost: 2^m passes over the tree's cells (m attributes: 16 for pl94).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from math import prod

import numpy as np
import scipy.sparse as sp

from postprocess.gls_algebra import Subset, diagonal_weight, eigenvalue, expand, marginal, project, subsets

Z95 = 1.959963984540054  # the standard normal's 97.5% quantile


@dataclass(frozen=True)
class GlsQuery:
    """One measured marginal at one level: kept attribute axes (in the query's cell order), σ², noisy answers."""

    axes: tuple[int, ...]
    sigma2: float
    noisy: np.ndarray  # (n_nodes, q_cells)


@dataclass(frozen=True)
class GlsInvariant:
    """An exact (published) marginal at one level: kept axes and values (n_nodes, q_cells)."""

    axes: tuple[int, ...]
    values: np.ndarray


@dataclass(frozen=True)
class GlsLevel:
    """One level: each node's parent index into the level above (empty at the root), measurements, invariants."""

    parent: np.ndarray
    queries: Sequence[GlsQuery]
    invariants: Sequence[GlsInvariant] = ()


@dataclass
class GlsResult:
    """Per level: estimates (n_nodes, C) and, per subspace S, the scalar variance of every node's estimate."""

    shape: tuple[int, ...]
    subsets: list[Subset]
    estimates: list[np.ndarray] = field(default_factory=list)
    variances: list[np.ndarray] = field(default_factory=list)  # (n_nodes, n_subsets)

    def query_estimate(self, level: int, axes: Sequence[int]) -> np.ndarray:
        """GLS estimate of a marginal at every node of a level (the estimator is linear, so it is the marginal)."""
        return marginal(self.estimates[level], self.shape, axes)

    def query_variance(self, level: int, axes: Sequence[int] | None = None) -> np.ndarray:
        """Variance of each node's estimate of one cell of the marginal ``axes`` (the same for all its cells);
        ``axes=None`` means the detailed cells."""
        axes = tuple(range(len(self.shape))) if axes is None else tuple(axes)
        weights = np.array([diagonal_weight(self.shape, s, axes) for s in self.subsets])
        return self.variances[level] @ weights


def _children_sum(parent: np.ndarray, n_parents: int, values: np.ndarray) -> np.ndarray:
    matrix = sp.csr_matrix((np.ones(len(parent)), (parent, np.arange(len(parent)))), shape=(n_parents, len(parent)))
    return np.asarray(matrix @ values)


def _pins(level: GlsLevel, shape: tuple[int, ...], subset: Subset) -> np.ndarray | None:
    """P_S x_v fixed by an invariant keeping every axis of S (None if no invariant of the level does)."""
    for invariant in level.invariants:
        if subset <= set(invariant.axes):
            scale = prod(n for a, n in enumerate(shape) if a not in invariant.axes)
            least_norm = expand(invariant.values.astype(float), shape, invariant.axes) / scale  # Q_K^+ c
            return project(least_norm, shape, subset)
    return None


def _level_sizes(levels: Sequence[GlsLevel]) -> list[int]:
    sizes = []
    for i, level in enumerate(levels):
        if level.queries:
            sizes.append(level.queries[0].noisy.shape[0])
        elif level.invariants:
            sizes.append(level.invariants[0].values.shape[0])
        elif i > 0:
            sizes.append(len(level.parent))
        elif len(levels) > 1 and len(levels[1].parent):
            sizes.append(int(levels[1].parent.max()) + 1)
        else:
            raise ValueError(f"level {i}: cannot tell its number of nodes")
    return sizes


def solve_gls(levels: Sequence[GlsLevel], shape: tuple[int, ...]) -> GlsResult:
    """Exact GLS of every node's detailed histogram at every level, and the variances of the estimates.

    Raises ``ValueError`` when a cell of the lowest level is not identifiable (the lowest level's queries do
    not cover every subspace and no invariant fixes it) or when the inputs are malformed.
    """
    shape = tuple(int(n) for n in shape)
    sizes = _level_sizes(levels)
    for i, level in enumerate(levels):
        if i > 0 and (len(level.parent) != sizes[i] or np.bincount(level.parent, minlength=sizes[i - 1]).min() == 0
                      or level.parent.max() >= sizes[i - 1]):
            raise ValueError(f"level {i}: every node needs one parent of the level above, and every parent a child")
        for query in level.queries:
            if query.sigma2 <= 0 or query.noisy.shape != (sizes[i], prod(shape[a] for a in query.axes)):
                raise ValueError(f"level {i}: query on axes {query.axes} has the wrong shape or sigma2")
    cells = prod(shape)
    result = GlsResult(shape=shape, subsets=subsets(len(shape)))
    info = [[(q.axes, q.sigma2) for q in level.queries] for level in levels]
    b = []
    for level, n in zip(levels, sizes, strict=True):
        total = np.zeros((n, cells))
        for query in level.queries:
            total += expand(query.noisy.astype(float), shape, query.axes) / query.sigma2
        b.append(total)
    result.estimates = [np.zeros((n, cells)) for n in sizes]
    result.variances = [np.zeros((n, len(result.subsets))) for n in sizes]
    for k, subset in enumerate(result.subsets):
        weights = [eigenvalue(shape, subset, q) for q in info]
        pins = [_pins(level, shape, subset) for level in levels]
        pinned = [p is not None for p in pins]
        if any(pinned[i] and not pinned[i - 1] for i in range(1, len(levels))):
            raise ValueError("an invariant must hold at every level above it too")
        if weights[-1] == 0 and not pinned[-1]:
            raise ValueError(f"cells of the lowest level are not identifiable: no query there keeps the axes "
                             f"{sorted(subset)} (measure the detailed query at the lowest level)")
        estimate, variance = _scalar_tree(levels, sizes, [project(bb, shape, subset) for bb in b], weights, pins)
        for i in range(len(levels)):
            result.estimates[i] += estimate[i]
            result.variances[i][:, k] = variance[i]
    return result


def _scalar_tree(levels: Sequence[GlsLevel], sizes: list[int], beta: list[np.ndarray], weights: list[float],
                 pins: list[np.ndarray | None]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Two passes for one subspace: per-level weight w_l, data β_v = w_l z_v (z_v the node's measurement)."""
    depth = len(levels)
    up: list[np.ndarray] = [np.empty(0)] * depth
    var: list[np.ndarray] = [np.empty(0)] * depth
    child_var: list[np.ndarray] = [np.empty(0)] * depth  # Σ V over a node's children
    child_sum: list[np.ndarray] = [np.empty(0)] * depth  # Σ z̃ over a node's children
    for i in range(depth - 1, -1, -1):
        w = weights[i]
        if i == depth - 1:
            w_safe = w if w > 0 else 1.0  # an unmeasured but pinned lowest level: values replaced below
            up[i], var[i] = beta[i] / w_safe, np.full(sizes[i], 1 / w_safe)
            continue
        below = levels[i + 1].parent
        child_var[i] = _children_sum(below, sizes[i], var[i + 1])
        child_sum[i] = _children_sum(below, sizes[i], up[i + 1])
        precision = w + 1 / child_var[i]
        var[i] = 1 / precision
        up[i] = (beta[i] + child_sum[i] / child_var[i][:, None]) * var[i][:, None]
    estimate: list[np.ndarray] = [np.empty(0)] * depth
    post: list[np.ndarray] = [np.empty(0)] * depth
    for i in range(depth):
        if pins[i] is not None:
            estimate[i], post[i] = pins[i], np.zeros(sizes[i])
            continue
        if i == 0:
            estimate[i], post[i] = up[i], var[i]
            continue
        parent = levels[i].parent
        share = var[i] / child_var[i - 1][parent]
        estimate[i] = up[i] + share[:, None] * (estimate[i - 1] - child_sum[i - 1])[parent]
        post[i] = var[i] - var[i] * share + share**2 * post[i - 1][parent]
    return estimate, post


def interval(estimate: np.ndarray, variance: np.ndarray, z: float = Z95) -> tuple[np.ndarray, np.ndarray]:
    """Normal 95% interval estimate ± z·sd (valid: the estimate is a linear sum of discrete Gaussians)."""
    half = z * np.sqrt(np.maximum(variance, 0.0))
    return estimate - half, estimate + half
