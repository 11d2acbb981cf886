"""The two-pass tree algorithm of the GLS on one subspace E_S, with K×K matrix weights (``postprocess.gls``).

On E_S every node v of level l has data β_v = Λ_l z_v (n, K, D: D independent contrast directions sharing one
K×K structure) and the level-wide information block Λ_l.  Exact invariants fix the part of x_v in a level-wide
subspace spanned by P_l (x_v = t_v there); the rest is free, x_v = t_v + N_l φ_v with N_l an orthonormal basis of
its complement.  Pins must be nested (what a level fixes, the level above fixes too), so the free space of a
level lies inside that of the level below.

Up (leaves first): the information about φ_v from the node's own measurements, N_lᵀΛ_lN_l and N_lᵀ(β_v - Λ_l t_v),
plus, from the sum of its children's subtree estimates (mean Σz̃_c, covariance N Φ̄ Nᵀ with Φ̄ = ΣΦ_c),
MᵀΦ̄⁻¹M and MᵀΦ̄⁻¹N_{l+1}ᵀ(Σz̃_c - t_v), M = N_{l+1}ᵀN_l; Φ_v is the inverse of the sum, z̃_v = t_v + N_l Φ_v(...).
Down (root first): x̂_c = z̃_c + N H N_{l+1}ᵀ(x̂_p - Σz̃), H = Φ_c Φ̄_p⁻¹, and the posterior covariance
Π_c = Φ_c - H Φ_c + H (M Π_p Mᵀ) Hᵀ — the matrix form of Hay et al. (2010)'s scalar recursion.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp


@dataclass(frozen=True)
class SubspaceLevel:
    """One level on one subspace: information block Λ (K, K), free basis N (K, f), data β and pins t (n, K, D)."""

    info: np.ndarray
    free: np.ndarray
    beta: np.ndarray
    pinned: np.ndarray | None


def children_matrix(parent: np.ndarray, n_parents: int) -> sp.csr_matrix:
    """(n_parents, n_children) 0/1: row p sums the children of p."""
    return sp.csr_matrix((np.ones(len(parent)), (parent, np.arange(len(parent)))), shape=(n_parents, len(parent)))


def _sum(children: sp.csr_matrix, values: np.ndarray) -> np.ndarray:
    flat = values.reshape(values.shape[0], -1)
    return np.asarray(children @ flat).reshape((children.shape[0], *values.shape[1:]))


def _apply(matrix: np.ndarray, data: np.ndarray) -> np.ndarray:
    """(K', K) or per node (n, K', K) times (n, K, D) -> (n, K', D)."""
    if matrix.ndim == 2:
        if matrix.shape == (1, 1):
            return data * matrix[0, 0]
        return np.einsum("ij,njd->nid", matrix, data)
    if matrix.shape[1:] == (1, 1):
        return data * matrix
    out = np.zeros((data.shape[0], matrix.shape[1], data.shape[2]))
    for j in range(matrix.shape[2]):
        out += matrix[:, :, j, None] * data[:, None, j, :]
    return out


def _inv(matrix: np.ndarray) -> np.ndarray:
    if matrix.shape[-2:] == (1, 1):
        return 1 / matrix
    return np.linalg.inv(matrix)


def subtree_covariances(infos: Sequence[np.ndarray], frees: Sequence[np.ndarray],
                        children: Sequence[sp.csr_matrix | None], n_lowest: int
                        ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The data-free half of the up pass: per level, every node's Φ (n, f, f), the covariance of its free
    coordinates given its own subtree's measurements only, and Φ̄⁻¹ (n, f', f') over its children (empty at the
    lowest level).  Split out because the covariance of any linear function of the leaves (``gls_areas``) needs
    these and no data; ``infos[l]`` is Λ_l, ``frees[l]`` is N_l, ``n_lowest`` the lowest level's size."""
    depth = len(infos)
    phi: list[np.ndarray] = [np.empty(0)] * depth
    bar_inv: list[np.ndarray] = [np.empty(0)] * depth
    for i in range(depth - 1, -1, -1):
        own_info = frees[i].T @ infos[i] @ frees[i]
        if i == depth - 1:
            phi[i] = np.broadcast_to(np.linalg.inv(own_info), (n_lowest, *own_info.shape))
        else:
            m = frees[i + 1].T @ frees[i]
            bar_inv[i] = _inv(_sum(children[i], phi[i + 1]))
            phi[i] = _inv(own_info + m.T @ bar_inv[i] @ m)
    return phi, bar_inv


def two_pass(levels: Sequence[SubspaceLevel], children: Sequence[sp.csr_matrix | None],
             parents: Sequence[np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Estimates (n, K, D) and posterior covariances (n, K, K) of every level on one subspace.

    ``children[l]`` sums level l+1 into level l (None at the lowest level); ``parents[l]`` indexes level l-1.
    The lowest level's N ᵀΛN must be invertible (the caller checks identifiability)."""
    depth = len(levels)
    phi, bar_inv = subtree_covariances([level.info for level in levels], [level.free for level in levels],
                                       children, levels[-1].beta.shape[0])
    up: list[np.ndarray] = [np.empty(0)] * depth
    child_sum: list[np.ndarray] = [np.empty(0)] * depth  # Σ z̃ over a node's children
    for i in range(depth - 1, -1, -1):
        level = levels[i]
        free_t = level.free.T
        rhs = _apply(free_t, level.beta)
        if level.pinned is not None:
            rhs = rhs - _apply(free_t @ level.info, level.pinned)
        if i < depth - 1:
            below = levels[i + 1].free
            gain = (below.T @ level.free).T @ bar_inv[i]  # (n, f, f'): Mᵀ Φ̄⁻¹
            child_sum[i] = _sum(children[i], up[i + 1])
            diff = child_sum[i] if level.pinned is None else child_sum[i] - level.pinned
            rhs = rhs + _apply(gain, _apply(below.T, diff))
        estimate = _apply(level.free, _apply(phi[i], rhs))
        up[i] = estimate if level.pinned is None else estimate + level.pinned
    estimates: list[np.ndarray] = [np.empty(0)] * depth
    post: list[np.ndarray] = [np.empty(0)] * depth
    estimates[0], post[0] = up[0], np.asarray(phi[0])
    for i in range(1, depth):
        parent, free = parents[i], levels[i].free
        m = free.T @ levels[i - 1].free
        diff = _apply(free.T, estimates[i - 1] - child_sum[i - 1])
        share = phi[i] @ bar_inv[i - 1][parent]  # H = Φ_c Φ̄_p⁻¹
        estimates[i] = up[i] + _apply(free, _apply(share, diff[parent]))
        spread = m @ post[i - 1] @ m.T
        post[i] = phi[i] - share @ phi[i] + share @ spread[parent] @ np.swapaxes(share, 1, 2)
    covariances = [levels[i].free @ post[i] @ levels[i].free.T for i in range(depth)]
    return estimates, covariances
