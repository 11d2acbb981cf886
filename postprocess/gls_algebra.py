"""The algebra behind the tree GLS: marginal queries of a Kronecker-structured histogram and their eigenspaces.

The detailed histogram of a node is a cube with one axis per attribute (sizes n_1..n_m, C order).  A marginal
query keeping the attributes K has the 0/1 matrix Q_K and Q_K^T Q_K = ⊗_{a∈K} I ⊗_{a∉K} J (J the all-ones
matrix).  Writing I = P0 + P1 per attribute (P0 = J/n the mean, P1 = I - J/n the contrasts), every such
matrix is diagonal in the same orthogonal decomposition R^C = ⊕_S E_S, E_S = ⊗_{a∈S} P1 ⊗_{a∉S} P0, over
the 2^m subsets S of attributes:  Q_K^T Q_K = Σ_{S⊆K} (Π_{a∉K} n_a) P_S.  So the information matrix of any
weighted set of marginal queries, A = Σ_q Q_q^T Q_q / σ²_q, is Σ_S λ(S) P_S with scalar eigenvalues λ(S),
and least squares over a tree splits into one scalar tree problem per subspace S (``postprocess.gls``).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations
from math import prod

import numpy as np

Subset = frozenset[int]


def subsets(m: int) -> list[Subset]:
    """All subsets of the m attribute axes, smallest first (the empty set is the total's subspace)."""
    return [frozenset(c) for k in range(m + 1) for c in combinations(range(m), k)]


def marginal(cube_rows: np.ndarray, shape: tuple[int, ...], axes: Sequence[int]) -> np.ndarray:
    """(n, C) detailed rows -> (n, q_cells) answers of the marginal keeping ``axes`` in that (query) order."""
    n = cube_rows.shape[0]
    cube = cube_rows.reshape((n, *shape))
    dropped = tuple(1 + a for a in range(len(shape)) if a not in axes)
    kept = cube.sum(axis=dropped) if dropped else cube
    order = sorted(axes)
    kept = np.moveaxis(kept, [1 + order.index(a) for a in axes], list(range(1, 1 + len(axes))))
    return kept.reshape(n, -1)


def expand(answers: np.ndarray, shape: tuple[int, ...], axes: Sequence[int]) -> np.ndarray:
    """Q_K^T applied row-wise: (n, q_cells) answers -> (n, C), each detailed cell gets its query cell's value."""
    n = answers.shape[0]
    kept = answers.reshape((n, *(shape[a] for a in axes)))
    order = sorted(axes)
    kept = np.moveaxis(kept, list(range(1, 1 + len(axes))), [1 + order.index(a) for a in axes])
    full = kept.reshape((n, *(shape[a] if a in axes else 1 for a in range(len(shape)))))
    return np.broadcast_to(full, (n, *shape)).reshape(n, -1)


def project(rows: np.ndarray, shape: tuple[int, ...], subset: Subset) -> np.ndarray:
    """P_S applied row-wise to (n, C) rows: contrasts along the axes in S, means along the others."""
    n = rows.shape[0]
    cube = rows.reshape((n, *shape))
    for a in range(len(shape)):
        mean = cube.mean(axis=1 + a, keepdims=True)
        cube = cube - mean if a in subset else np.broadcast_to(mean, cube.shape)
    return np.ascontiguousarray(cube).reshape(n, -1)


def eigenvalue(shape: tuple[int, ...], subset: Subset, queries: Sequence[tuple[Sequence[int], float]]) -> float:
    """λ(S) of A = Σ_q Q_q^T Q_q / σ²_q: Σ over queries keeping every axis of S of Π_{a∉K} n_a / σ²_q."""
    total = 0.0
    for axes, sigma2 in queries:
        if subset <= set(axes):
            total += prod(shape[a] for a in range(len(shape)) if a not in axes) / sigma2
    return total


def diagonal_weight(shape: tuple[int, ...], subset: Subset, axes: Sequence[int]) -> float:
    """The (constant) diagonal of Q_K P_S Q_K^T: the share of one query cell's variance that subspace S carries.

    Zero when S is not inside K (summing over an axis kills its contrasts); otherwise
    Π_{a∈S} (1 - 1/n_a) · Π_{a∈K∖S} 1/n_a · Π_{a∉K} n_a.  With K = all axes it is the diagonal of P_S.
    """
    if not subset <= set(axes):
        return 0.0
    weight = 1.0
    for a, n in enumerate(shape):
        if a in subset:
            weight *= 1 - 1 / n
        elif a in axes:
            weight *= 1 / n
        else:
            weight *= n
    return weight
