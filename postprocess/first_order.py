"""Accelerated projected gradient (FISTA with adaptive restarts) for the least squares of a batch without invariants,
f(x) = sum_q w_q ||K_q x - y_q||^2 s.t. x >= 0 and children summing to the parent in every free cell.  Each block is
certified on its own and frozen at its certified point (docs/reconciliation.md, "Inside one level"); not certified
within ``MAX_ITERATIONS``, or too ill-conditioned to be (``_needs_too_many``): None, and the caller falls back to
cvxpy.
"""

from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp

from censusdp.postprocess.fast_path import _is_identity, project
from censusdp.postprocess.layout import Batch
from censusdp.postprocess.least_squares import Term
from censusdp.postprocess.problem import Inputs

RELATIVE_GAP = 1e-7  # certified f(x) - f* <= RELATIVE_GAP * f(x); Clarabel stops at a 1e-8 relative duality gap
ABSOLUTE_GAP = 1e-18  # floor on the certified gap, in the scaled units (data of magnitude <= 1)
MAX_ITERATIONS = 5_000
CHECK_EVERY = 20


class _Groups:
    """The sum rows of a batch, variables permuted (``perm[j]``: the batch variable at position j) so that rows of
    equal size k are contiguous, row-major; ``parts`` holds (k, slice, rhs of those rows)."""

    def __init__(self, batch: Batch, rhs: np.ndarray) -> None:
        sizes = np.bincount(batch.var_sum_row, minlength=rhs.size)
        self.perm = np.lexsort((np.arange(batch.n_vars), batch.var_sum_row, sizes[batch.var_sum_row]))
        self.parts = []
        position = 0
        row_order = np.lexsort((np.arange(rhs.size), sizes))
        for k in np.unique(sizes):
            rows = row_order[sizes[row_order] == k]
            span = slice(position, position + int(k) * rows.size)
            self.parts.append((int(k), span, rhs[rows]))
            position = span.stop

    def project(self, z: np.ndarray) -> np.ndarray:
        out = np.empty_like(z)
        for k, span, p in self.parts:
            out[span] = np.repeat(p, k) if k == 1 else project(z[span].reshape(-1, k), p).ravel()
        return out

    def lower_linear_by(self, g: np.ndarray, block: np.ndarray, n_blocks: int) -> np.ndarray:
        """``min_z g'z`` over the feasible set, per block (a sum row lies in one block)."""
        out = np.zeros(n_blocks)
        for k, span, p in self.parts:
            out += np.bincount(block[span][::k], weights=p * g[span].reshape(-1, k).min(axis=1), minlength=n_blocks)
        return out

    def restricted(self, keep: np.ndarray) -> _Groups:
        """The sum rows of the variables ``keep`` (whole rows), in the same order."""
        out = object.__new__(_Groups)
        out.perm, out.parts, position = self.perm, [], 0
        for k, span, p in self.parts:
            rows = keep[span][::k]
            if rows.any():
                size = int(k) * int(rows.sum())
                out.parts.append((k, slice(position, position + size), p[rows]))
                position += size
        return out


def lipschitz_bounds(terms: list[Term], weights: np.ndarray, var_block: np.ndarray, n_blocks: int) -> np.ndarray:
    """Per block b, an upper bound on ``lambda_max(sum_q w_q K_qb'K_qb)``: the product of the largest row and column
    sums of each ``K_qb`` (Hoelder), the block's own submatrix (blocks share no rows or variables)."""
    total = np.zeros(n_blocks)
    for term, weight in zip(terms, weights, strict=True):
        if term.matrix.nnz == 0:
            continue
        absolute = abs(term.matrix).tocsr()
        row_block = var_block[absolute.indices[absolute.indptr[:-1]]]  # every row has an entry, in one block
        rows = np.zeros(n_blocks)
        np.maximum.at(rows, row_block, np.asarray(absolute.sum(axis=1)).ravel())
        cols = np.zeros(n_blocks)
        np.maximum.at(cols, var_block, np.asarray(absolute.sum(axis=0)).ravel())
        total += weight * rows * cols
    return total


def applies(inputs: Inputs) -> bool:
    """No invariants, a parent constraint, and a detailed (identity) measurement, which makes f strongly convex."""
    return (not inputs.invariants and inputs.parent_counts is not None and inputs.parent_index is not None
            and any(_is_identity(m.matrix, inputs.n_cells) for m in inputs.measurements))


def solve(terms: list[Term], batch: Batch) -> tuple[np.ndarray | None, dict]:
    """Least-squares point of the batch (in persons) or None when not certified; plus diagnostics.  A block is frozen
    once ``f_b(point_b) - f_b* <= RELATIVE_GAP f_b(x_b) + ABSOLUTE_GAP / n_blocks`` (summed: the batch's criterion)."""
    started = time.perf_counter()
    n = batch.n_vars
    info: dict = {"iterations": 0, "gap": np.inf, "seconds": 0.0, "compactions": 0}
    if n == 0:
        return np.zeros(0), info
    top = max(t.weight for t in terms)
    weights = np.array([t.weight / top for t in terms])
    scale = float(max([1.0, *[np.abs(t.target).max() for t in terms if t.target.size], batch.sum_rhs.max()]))
    groups = _Groups(batch, batch.sum_rhs.astype(np.float64) / scale)
    a = sp.vstack([np.sqrt(w) * t.matrix for t, w in zip(terms, weights, strict=True)], format="csc")
    a = a[:, groups.perm].tocsr()
    b = np.concatenate([np.sqrt(w) * t.target / scale for t, w in zip(terms, weights, strict=True)])
    var_block = batch.node_block[batch.var_node]
    lip_block = 2.0 * lipschitz_bounds(terms, weights, var_block, batch.n_blocks) * (1.0 + 1e-12)
    problem = _Active(a, b, groups, var_block[groups.perm], lip_block, batch.n_blocks)
    if _needs_too_many(lip_block, problem.mu):
        info.update(status="ill_conditioned", seconds=time.perf_counter() - started)
        return None, info
    out = np.full(n, np.nan)  # permuted order: each block's certified point, as it is frozen
    position = np.arange(n)  # the active variables' positions in ``out``
    # the start: each variable's least squares over its own single-variable rows (its detailed targets: in full
    # information the GLS estimate), projected; A'b / diag(A'A) would add every marginal's whole total to each cell
    x = problem.groups.project(problem.c_single / np.maximum(problem.d, 1e-300))
    y, t = x, np.ones(batch.n_blocks)
    certified = value_total = 0.0
    floor = ABSOLUTE_GAP / batch.n_blocks
    for iteration in range(1, MAX_ITERATIONS + 1):
        step, block = problem.step, problem.block
        x_new = problem.groups.project(y - step * problem.gradient(y))
        # adaptive restart per block (O'Donoghue & Candes 2015)
        t[np.bincount(block, weights=(y - x_new) * (x_new - x), minlength=t.size) > 0.0] = 1.0
        t_new = 0.5 * (1.0 + np.sqrt(1.0 + 4.0 * t * t))
        y = x_new + ((t - 1.0) / t_new)[block] * (x_new - x)
        x, t = x_new, t_new
        if iteration % CHECK_EVERY:
            continue
        value, gap, point = problem.certificates(x)
        alive = problem.alive
        total_gap, total_value = certified + float(gap[alive].sum()), value_total + float(value[alive].sum())
        info.update(iterations=iteration, gap=total_gap, objective=total_value)
        # the batch's criterion, the frozen blocks counted at their recorded points: as without freezing
        finished = total_gap <= RELATIVE_GAP * total_value + ABSOLUTE_GAP
        done = alive & ((gap <= RELATIVE_GAP * value + floor) | finished)
        newly = done[block]
        out[position[newly]] = point[newly]
        certified += float(gap[done].sum())
        value_total += float(value[done].sum())
        alive &= ~done
        still = alive[block]  # the variables of blocks iterated on
        if not still.any():
            result = np.empty(n)
            result[groups.perm] = out * scale
            info.update(gap=certified, objective=value_total, seconds=time.perf_counter() - started)
            return result, info
        if (~still).sum() * 4 >= still.size:  # compact: the frozen blocks' variables leave every array
            problem = problem.restricted(still)
            x, y, position = x[still], y[still], position[still]
            info["compactions"] += 1
    info["seconds"] = time.perf_counter() - started
    return None, info


def _needs_too_many(lip_block: np.ndarray, mu: float) -> bool:
    """Whether some block's condition number kappa = L_b / mu says the certificate could take more than
    ``MAX_ITERATIONS``: accelerated gradient closes the gap by a factor of about e every sqrt(kappa) iterations, so
    ``RELATIVE_GAP`` takes about sqrt(kappa) ln(1 / RELATIVE_GAP) of them.  Such a batch (a detailed query of tiny
    weight beside heavy marginals) would run them all and fail: it goes to cvxpy at once."""
    kappa = float(lip_block.max()) / mu if mu > 0.0 else np.inf
    return np.sqrt(kappa) * np.log(1.0 / RELATIVE_GAP) > MAX_ITERATIONS


class _Active:
    """The batch's problem over the variables still iterated (permuted order): the rows of ``A`` on one variable
    (a diagonal) apart from the others, ``c = A'b``, each variable's block, step and the sum rows."""

    def __init__(self, a: sp.csr_matrix, b: np.ndarray, groups: _Groups, block: np.ndarray,
                 lip_block: np.ndarray, n_blocks: int, mu: float | None = None,
                 alive: np.ndarray | None = None) -> None:
        self.a, self.b, self.groups, self.block = a, b, groups, block
        self.lip_block, self.n_blocks = lip_block, n_blocks
        single = np.diff(a.indptr) == 1  # rows on one variable: a diagonal, applied without the matvec
        self.s_rows, self.s_target = a[single], b[single]
        self.m_rows, self.m_target = a[~single], b[~single]
        self.m_rows_t = self.m_rows.T.tocsr()
        self.s_block = block[self.s_rows.indices]  # every row has an entry, in one block
        self.m_block = block[self.m_rows.indices[self.m_rows.indptr[:-1]]] if self.m_rows.shape[0] else block[:0]
        n = a.shape[1]
        self.d = np.bincount(self.s_rows.indices, weights=self.s_rows.data**2, minlength=n)
        self.c_single = self.s_rows.T @ self.s_target
        self.c = self.c_single + self.m_rows_t @ self.m_target
        # the multi-variable rows add a PSD part: lambda_min(2 A'A) >= 2 min d, kept from the whole batch
        self.mu = 2.0 * float(self.d.min()) if mu is None else mu
        self.lip = lip_block[block]
        self.step = 1.0 / self.lip
        self.alive = np.ones(n_blocks, dtype=bool) if alive is None else alive

    def gradient(self, z: np.ndarray) -> np.ndarray:
        return 2.0 * (self.d * z + self.m_rows_t @ (self.m_rows @ z) - self.c)

    def certificates(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per block: f_b(x), the smaller certified bound on f_b(point) - f_b*, and that bound's point (x or x+)."""
        r_single, r_multi = self.s_rows @ x - self.s_target, self.m_rows @ x - self.m_target
        blocks = self.n_blocks
        value = (np.bincount(self.s_block, weights=r_single * r_single, minlength=blocks)
                 + np.bincount(self.m_block, weights=r_multi * r_multi, minlength=blocks))
        gradient = 2.0 * (self.s_rows.T @ r_single + self.m_rows_t @ r_multi)
        # Frank-Wolfe gap >= f(x) - f*, per block
        gap = np.bincount(self.block, weights=gradient * x, minlength=blocks) - self.groups.lower_linear_by(
            gradient, self.block, blocks)
        point = x
        if self.mu > 0.0:  # gradient-mapping bound at x+ = P(x - g/L): f(x+) - f* <= |G|^2 (1/mu - 1/L) / 2
            plus = self.groups.project(x - self.step * gradient)
            mapping = self.lip * (x - plus)
            bound = np.bincount(self.block, weights=mapping**2 * (1.0 / self.mu - 1.0 / self.lip),
                                minlength=blocks) / 2.0
            better = bound < gap
            gap = np.where(better, bound, gap)
            point = np.where(better[self.block], plus, x)
        return value, gap, point

    def restricted(self, keep: np.ndarray) -> _Active:
        """The problem over the variables ``keep`` (whole blocks): their rows, sum rows and targets."""
        rows = keep[self.a.indices[self.a.indptr[:-1]]] if self.a.shape[0] else np.zeros(0, dtype=bool)
        return _Active(self.a[rows][:, keep], self.b[rows], self.groups.restricted(keep), self.block[keep],
                       self.lip_block, self.n_blocks, self.mu, self.alive)
