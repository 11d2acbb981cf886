"""The two-pass tree algorithm of the GLS on one subspace E_S, with K×K matrix weights, and its small helpers.

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

The passes run chunk by chunk in ``postprocess.gls_stream`` (one engine for every tree: an in-memory store for a
small one, ``postprocess.gls``); the data-free recursions are ``postprocess.gls_stream_frame``'s.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


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
