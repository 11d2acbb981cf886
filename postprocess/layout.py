"""Split a level into per-parent blocks, group them into batches, and lay out each batch's variables.

A *block* is one parent and its children (at the root: one node).  Variables exist only for *free* cells: a cell
whose parent count is 0 (so 0 in every child) and a structural zero never reach a solver.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from censusdp.postprocess.least_squares import Inequalities
from censusdp.postprocess.problem import UNBOUNDED, Inputs, ReconciliationError

BATCH_VARIABLES = 20_000  # stack blocks until a batch has about this many variables
BATCH_DENSE_ENTRIES = 16_000_000  # cap on nodes x n_cells of a batch (its dense free-cell mask)
_CHUNK = 4096  # parents per chunk when scanning parent rows


@dataclass(frozen=True)
class Blocks:
    """The level's nodes grouped by parent: block b owns ``order[start[b]:start[b+1]]``."""

    order: np.ndarray  # (n_nodes,) node rows, grouped by block
    start: np.ndarray  # (n_blocks + 1,) offsets into order
    parent: np.ndarray | None  # (n_blocks,) parent row of each block; None at the root
    n_free: np.ndarray  # (n_blocks,) number of free cells of each block

    def size(self, b: int) -> int:
        return int(self.start[b + 1] - self.start[b])

    def nodes(self, b: int) -> np.ndarray:
        return self.order[self.start[b] : self.start[b + 1]]


@dataclass(frozen=True)
class Batch:
    """Variables of a stack of blocks: variable v is (node ``nodes[var_node[v]]``, cell ``var_cell[v]``)."""

    nodes: np.ndarray  # (L,) node rows of the level
    node_block: np.ndarray  # (L,) local block of each node
    var_node: np.ndarray  # (n,) local node of each variable
    var_cell: np.ndarray  # (n,) cell of each variable
    var_sum_row: np.ndarray  # (n,) row of the sum constraint holding the variable; -1 at the root
    sum_rhs: np.ndarray  # (n_sum,) int64 parent count of each (block, free cell)
    upper: np.ndarray  # (n,) float upper bound (the parent's count of the cell; inf at the root)
    n_blocks: int

    @property
    def n_vars(self) -> int:
        return int(self.var_cell.size)

    @property
    def sum_matrix(self) -> sp.csr_matrix:
        """(n_sum, n): row r adds the children's variables of one (block, free cell)."""
        if self.sum_rhs.size == 0:
            return sp.csr_matrix((0, self.n_vars))
        cols = np.arange(self.n_vars)
        return sp.csr_matrix((np.ones(self.n_vars), (self.var_sum_row, cols)), shape=(self.sum_rhs.size, self.n_vars))


def plan_blocks(inputs: Inputs) -> Blocks:
    """Group nodes by parent (or one block per node at the root) and count each block's free cells."""
    free_cells = ~inputs.structural_zeros
    if inputs.parent_index is None or inputs.parent_counts is None:
        n_free = np.full(inputs.n_nodes, int(free_cells.sum()), dtype=np.int64)
        return Blocks(np.arange(inputs.n_nodes, dtype=np.int64), np.arange(inputs.n_nodes + 1, dtype=np.int64), None,
                      n_free)
    order = np.argsort(inputs.parent_index, kind="stable").astype(np.int64)
    parents, counts = np.unique(inputs.parent_index[order], return_counts=True)
    start = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    n_free = np.empty(parents.size, dtype=np.int64)
    for lo in range(0, parents.size, _CHUNK):
        rows = inputs.parent_counts[parents[lo : lo + _CHUNK]]
        n_free[lo : lo + _CHUNK] = np.count_nonzero((rows > 0) & free_cells, axis=1)
    return Blocks(order, start, parents.astype(np.int64), n_free)


def plan_batches(blocks: Blocks, n_cells: int) -> list[np.ndarray]:
    """Consecutive blocks stacked until a batch reaches ``BATCH_VARIABLES`` variables; a block without a free cell or
    an only child (which equals its parent) needs no solver and is left out."""
    batches: list[np.ndarray] = []
    current: list[int] = []
    variables = dense = 0
    for b in range(blocks.n_free.size):
        size = blocks.size(b)
        if blocks.n_free[b] == 0 or (blocks.parent is not None and size == 1):
            continue
        too_many = variables + size * int(blocks.n_free[b]) > BATCH_VARIABLES
        too_wide = dense + size * n_cells > BATCH_DENSE_ENTRIES
        if current and (too_many or too_wide):
            batches.append(np.asarray(current, dtype=np.int64))
            current, variables, dense = [], 0, 0
        current.append(b)
        variables += size * int(blocks.n_free[b])
        dense += size * n_cells
    if current:
        batches.append(np.asarray(current, dtype=np.int64))
    return batches


def build_batch(inputs: Inputs, blocks: Blocks, block_ids: np.ndarray) -> Batch:
    """Index the free (node, cell) pairs of the given blocks and the sum constraint over them."""
    sizes = blocks.start[block_ids + 1] - blocks.start[block_ids]
    nodes = np.concatenate([blocks.nodes(int(b)) for b in block_ids])
    node_block = np.repeat(np.arange(block_ids.size), sizes)
    free = np.broadcast_to(~inputs.structural_zeros, (block_ids.size, inputs.n_cells))
    if blocks.parent is not None and inputs.parent_counts is not None:
        parent_rows = inputs.parent_counts[blocks.parent[block_ids]]
        free = free & (parent_rows > 0)
    node_free = free[node_block]
    if inputs.node_zeros is not None:  # a bound's zero: the node holds nothing in those cells
        node_free = node_free & ~inputs.node_zeros[nodes]
    var_node, var_cell = np.nonzero(node_free)
    if blocks.parent is None:
        return Batch(nodes, node_block, var_node, var_cell, np.full(var_node.size, -1), np.zeros(0, dtype=np.int64),
                     np.full(var_node.size, np.inf), int(block_ids.size))
    block_cell = np.full(free.shape, -1, dtype=np.int64)
    block_cell[free] = np.arange(int(free.sum()))
    sum_row = block_cell[node_block[var_node], var_cell]
    sum_rhs = parent_rows[free].astype(np.int64)
    if inputs.node_zeros is not None and np.bincount(sum_row, minlength=sum_rhs.size).min(initial=1) == 0:
        raise ReconciliationError(f"the bounds leave no child to hold a parent's count in a batch of "
                                  f"{block_ids.size} blocks (the bounds contradict the parent table)")
    upper = sum_rhs[sum_row].astype(np.float64)
    return Batch(nodes, node_block, var_node, var_cell, sum_row, sum_rhs, upper, int(block_ids.size))


def restrict_rows(matrix: sp.csr_matrix, batch: Batch) -> tuple[sp.csr_matrix, np.ndarray]:
    """``matrix`` applied to every node of the batch over its free cells: ``(K, rows)``, K with one row per (node,
    query cell) that involves a free variable, ``rows`` its flat index ``node * q_cells + cell``."""
    csc = matrix.tocsc()
    first = csc.indptr[batch.var_cell]
    count = csc.indptr[batch.var_cell + 1] - first
    var = np.repeat(np.arange(batch.n_vars), count)
    position = np.arange(var.size) - np.repeat(np.cumsum(count) - count - first, count)
    flat = batch.var_node[var] * matrix.shape[0] + csc.indices[position]
    rows, local = np.unique(flat, return_inverse=True)
    k = sp.csr_matrix((csc.data[position], (local, var)), shape=(rows.size, batch.n_vars))
    return k, rows


def invariant_rows(inputs: Inputs, batch: Batch) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray]:
    """All invariant constraints of the batch: (matrix, int64 right-hand side, redundant-for-LS flag).  The last
    child's rows follow from the others' and the parent's: flagged, they are left out of the least squares (fewer
    redundant equalities for interior-point solvers) but kept by the rounding and checked at the end."""
    mats, rhs, redundant = [sp.csr_matrix((0, batch.n_vars))], [np.zeros(0, dtype=np.int64)], [np.zeros(0, bool)]
    last = np.append(batch.node_block[1:] != batch.node_block[:-1], True) & (batch.sum_rhs.size > 0)
    for inv in inputs.invariants:
        k, rows = restrict_rows(inv.matrix, batch)
        values = inv.values[batch.nodes].ravel()
        if np.any(np.delete(values, rows) != 0):  # rows without a free variable
            raise ReconciliationError(
                f"invariant {inv.name!r} is infeasible: it asks for a positive count in cells fixed at 0 "
                f"(structural zeros or empty in the parent) in a batch of {batch.n_blocks} blocks"
            )
        mats.append(k)
        rhs.append(values[rows])
        redundant.append(last[rows // inv.matrix.shape[0]])
    return sp.vstack(mats, format="csr"), np.concatenate(rhs), np.concatenate(redundant)


def bound_rows(inputs: Inputs, batch: Batch) -> Inequalities:
    """The batch's bounds that can bind (upper ``inf`` where there is none): a row binds unless its lower bound is 0
    and its upper bound is at least what its free cells can hold (their parent counts)."""
    mats, lows, highs = [sp.csr_matrix((0, batch.n_vars))], [np.zeros(0)], [np.zeros(0)]
    for bound in inputs.bounds:
        k, rows = restrict_rows(bound.matrix, batch)
        lower = bound.lower[batch.nodes].ravel()
        upper = bound.upper[batch.nodes].ravel()
        if np.any(np.delete(lower, rows) > 0):
            raise ReconciliationError(f"bound {bound.name!r} asks for a positive count in cells fixed at 0 in a "
                                      f"batch of {batch.n_blocks} blocks")
        room = k @ batch.upper
        low, high = lower[rows].astype(np.float64), upper[rows].astype(np.float64)
        high[upper[rows] >= UNBOUNDED] = np.inf
        binding = (low > 0) | (high < room)
        mats.append(k[binding])
        lows.append(low[binding])
        highs.append(high[binding])
    return Inequalities(sp.vstack(mats, format="csr"), np.concatenate(lows), np.concatenate(highs))
