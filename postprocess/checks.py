"""Checks that raise ``ReconciliationError`` (not ``assert``, which ``python -O`` removes): public inputs before
solving, the integer table after rounding.  Messages name the constraint and how many nodes or parents break it,
never a count.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from censusdp.postprocess.problem import Inputs, ReconciliationError


def check_inputs(inputs: Inputs) -> None:
    """Public constraints must be satisfiable together before any solver is asked."""
    sizes = f"(level of {inputs.n_nodes} nodes, {inputs.n_cells} cells)"
    for inv in inputs.invariants:
        if np.any(inv.values < 0):
            raise ReconciliationError(f"invariant {inv.name!r} has negative values {sizes}")
        zero_entries = np.asarray(inv.matrix[:, inputs.structural_zeros].sum(axis=1)).ravel()
        fixed = zero_entries == inv.matrix.getnnz(axis=1)
        if np.any(inv.values[:, fixed] != 0):
            raise ReconciliationError(f"invariant {inv.name!r} asks for a positive count in structural-zero cells "
                                      f"only {sizes}")
    for bound in inputs.bounds:
        if np.any(bound.lower < 0) or np.any(bound.lower > bound.upper):
            raise ReconciliationError(f"bound {bound.name!r} has a lower bound below 0 or above its upper one {sizes}")
    if inputs.parent_counts is None or inputs.parent_index is None:
        return
    used = np.unique(inputs.parent_index)
    parents = inputs.parent_counts[used]
    if np.any(parents < 0):
        raise ReconciliationError(f"the parent table has negative counts {sizes}")
    if np.any(parents[:, inputs.structural_zeros] != 0):
        raise ReconciliationError(f"the parent table is not 0 in the structural-zero cells {sizes}")
    for inv in inputs.invariants:
        children = _sum_by_parent(inv.values, inputs.parent_index, inputs.parent_counts.shape[0])[used]
        expected = int_matmul(inv.matrix, parents.T).T
        bad = np.any(children != expected, axis=1)
        if bad.any():
            raise ReconciliationError(
                f"invariant {inv.name!r} is inconsistent with the parent table: the children's values do not "
                f"add up to the parent's for {int(bad.sum())} of {used.size} parents {sizes}"
            )


def check_table(inputs: Inputs, counts: np.ndarray) -> None:
    """The released table must satisfy every constraint exactly."""
    sizes = f"(level of {inputs.n_nodes} nodes, {inputs.n_cells} cells)"
    if counts.dtype != np.int64 or counts.shape != (inputs.n_nodes, inputs.n_cells):
        raise ReconciliationError(f"the rounded table has the wrong type or shape {sizes}")
    if np.any(counts < 0):
        raise ReconciliationError(f"the rounded table has negative counts {sizes}")
    if np.any(counts[:, inputs.structural_zeros] != 0):
        raise ReconciliationError(f"the rounded table is not 0 in the structural-zero cells {sizes}")
    for inv in inputs.invariants:
        bad = np.any(inv.values != int_matmul(inv.matrix, counts.T).T, axis=1)
        if bad.any():
            raise ReconciliationError(f"invariant {inv.name!r} fails for {int(bad.sum())} nodes {sizes}")
    for bound in inputs.bounds:
        answers = int_matmul(bound.matrix, counts.T).T
        bad = np.any((answers < bound.lower) | (answers > bound.upper), axis=1)
        if bad.any():
            raise ReconciliationError(f"bound {bound.name!r} fails for {int(bad.sum())} nodes {sizes}")
    if inputs.parent_counts is None or inputs.parent_index is None:
        return
    used = np.unique(inputs.parent_index)
    sums = _sum_by_parent(counts, inputs.parent_index, inputs.parent_counts.shape[0])[used]
    bad = np.any(sums != inputs.parent_counts[used], axis=1)
    if bad.any():
        raise ReconciliationError(f"children do not sum to their parent for {int(bad.sum())} parents {sizes}")


def int_matmul(matrix: sp.csr_matrix, values: np.ndarray) -> np.ndarray:
    """Exact integer ``matrix @ values`` for a 0/1 matrix."""
    return np.asarray(matrix.astype(np.int64) @ values, dtype=np.int64)


def _sum_by_parent(rows: np.ndarray, parent_index: np.ndarray, n_parents: int) -> np.ndarray:
    """Exact integer sum of the rows of each parent's children."""
    ones = np.ones(parent_index.size, dtype=np.int64)
    indicator = sp.csr_matrix((ones, (parent_index, np.arange(parent_index.size))), shape=(n_parents, rows.shape[0]))
    return np.asarray(indicator @ rows, dtype=np.int64)
