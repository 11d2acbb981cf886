"""Multi-pass solves: least squares in ordered query groups, and a rounder that fixes marginals before cells, as the
2020 Census production solve orders its queries (docs/reconciliation.md, "Multi-pass solve").  Post-processing of
the noisy measurements only (Thm 19.25): no privacy cost, whatever the order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from censusdp.postprocess.layout import Batch, restrict_rows
from censusdp.postprocess.least_squares import Equalities, Inequalities, Solution, Term, solve
from censusdp.postprocess.rounding import round_batch
from censusdp.postprocess.ties import TieSource


@dataclass(frozen=True)
class RoundingMarginal:
    """A marginal rounded and fixed before the cells: ``matrix`` (q_cells, n_cells) puts each cell in one query cell."""

    name: str
    matrix: sp.csr_matrix


def check_marginal(marginal: RoundingMarginal, n_cells: int) -> RoundingMarginal:
    """``ValueError`` unless the matrix is a partition of the cells (a marginal or a recode of one)."""
    matrix = sp.csr_matrix(marginal.matrix, dtype=np.float64)
    if matrix.shape[1] != n_cells or not np.all(matrix.data == 1.0):
        raise ValueError(f"rounding marginal {marginal.name!r}: a 0/1 matrix with {n_cells} columns is needed")
    if not np.array_equal(np.asarray(matrix.sum(axis=0)).ravel(), np.ones(n_cells)):
        raise ValueError(f"rounding marginal {marginal.name!r}: every cell must be in exactly one query cell")
    return RoundingMarginal(marginal.name, matrix)


def solve_in_passes(terms: Sequence[tuple[str, Term]], passes: Sequence[Sequence[str]], tolerance: float,
                    equalities: list[Equalities], n_vars: int, solvers: tuple[str, ...],
                    bounds: Inequalities | None = None) -> Solution:
    """Least squares in ordered passes of named terms; queries not named by any pass join the last one."""
    named = {name for group in passes for name in group}
    groups = [[t for name, t in terms if name in group] for group in passes]
    groups[-1] = groups[-1] + [t for name, t in terms if name not in named]
    groups = [g for g in groups if g]
    kept: list[Inequalities] = [] if bounds is None else [bounds]
    total = Solution()
    for k, group in enumerate(groups):
        solution = solve(group, equalities, n_vars, solvers, kept)
        total.attempts += [(name, f"pass {k}: {status}") for name, status in solution.attempts]
        total.seconds += solution.seconds
        if solution.x is None:
            return total
        total.x, total.violations, total.min_value = solution.x, solution.violations, solution.min_value
        answers = [(t.matrix, t.matrix @ solution.x) for t in group]
        kept = kept + [Inequalities(k, a - tolerance, a + tolerance) for k, a in answers]
    return total


def fix_marginals(batch: Batch, x: np.ndarray, inv_matrix: sp.csr_matrix, inv_rhs: np.ndarray,
                  marginals: Sequence[RoundingMarginal], rng: TieSource | None = None
                  ) -> tuple[sp.csr_matrix, np.ndarray, list[str]]:
    """Round each marginal in turn and add its integer answers to the equalities the cells are rounded under:
    the extended ``(inv_matrix, inv_rhs)`` and, per marginal, ``round_batch``'s backend, or ``"skipped"`` when an
    equality of the batch is not a sum of the marginal's cells (it cannot be kept on the marginal alone)."""
    methods = []
    for marginal in marginals:
        k, rows = restrict_rows(marginal.matrix, batch)
        aggregated = _aggregate_equalities(inv_matrix, k)
        if aggregated is None:
            methods.append("skipped")
            continue
        small = _aggregate_batch(batch, marginal.matrix, k, rows)
        values, method = round_batch(small, k @ x, aggregated, inv_rhs, rng)
        inv_matrix = sp.vstack([inv_matrix, k], format="csr")
        inv_rhs = np.concatenate([inv_rhs, values])
        methods.append(method)
    return inv_matrix, inv_rhs, methods


def _aggregate_equalities(matrix: sp.csr_matrix, k: sp.csr_matrix) -> sp.csr_matrix | None:
    """The equalities' rows over the marginal's cells, or None when a row splits one of them."""
    if matrix.shape[0] == 0:
        return sp.csr_matrix((0, k.shape[0]))
    overlap = (matrix @ k.T).tocsr()
    sizes = np.asarray(k.sum(axis=1)).ravel()
    overlap.eliminate_zeros()
    if not np.array_equal(overlap.data, sizes[overlap.indices]):
        return None
    overlap.data = np.ones_like(overlap.data)
    return overlap


def _aggregate_batch(batch: Batch, matrix: sp.csr_matrix, k: sp.csr_matrix, rows: np.ndarray) -> Batch:
    """The batch as a table of the marginal's cells: variable g = (node, query cell), sums over children."""
    q_cells = matrix.shape[0]
    var_node, var_cell = np.divmod(rows, q_cells)
    if batch.sum_rhs.size == 0:
        return Batch(batch.nodes, batch.node_block, var_node, var_cell, np.full(rows.size, -1),
                     np.zeros(0, dtype=np.int64), np.full(rows.size, np.inf), batch.n_blocks)
    query_cell = matrix.tocsc().indices  # each cell's query cell (one per column: check_marginal)
    key = batch.node_block[var_node] * q_cells + var_cell
    unique_keys, sum_row = np.unique(key, return_inverse=True)
    # each sum row of the batch is one (block, free cell): its parent count goes to (block, query cell)
    has_row = batch.var_sum_row >= 0
    row_block = np.zeros(batch.sum_rhs.size, dtype=np.int64)
    row_cell = np.zeros(batch.sum_rhs.size, dtype=np.int64)
    row_block[batch.var_sum_row[has_row]] = batch.node_block[batch.var_node[has_row]]
    row_cell[batch.var_sum_row[has_row]] = batch.var_cell[has_row]
    target = np.searchsorted(unique_keys, row_block * q_cells + query_cell[row_cell])
    sum_rhs = np.bincount(target, weights=batch.sum_rhs, minlength=unique_keys.size).astype(np.int64)
    return Batch(batch.nodes, batch.node_block, var_node, var_cell, sum_row.astype(np.int64), sum_rhs,
                 sum_rhs[sum_row].astype(np.float64), batch.n_blocks)
