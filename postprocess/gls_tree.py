"""Small helpers of the two-pass tree GLS on one subspace E_S, with K×K matrix weights (the recursions and their
notation: docs/reconciliation.md, "The tree algorithm").
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
