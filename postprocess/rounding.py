"""Round a batch's least-squares point to integers that keep every constraint exactly: from ``floor(x)``, increments
in {0, 1} minimising the L1 distance to ``x`` (``nearest``, ``greedy``, ``binary_lp`` / ``binary_milp``), else the
general ``integer_milp`` (why each is exact: docs/reconciliation.md, "Inside one level").  Ties:
``postprocess.ties``.  Post-processing only (Thm 19.25).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.optimize import Bounds, LinearConstraint, milp

from censusdp.postprocess.checks import int_matmul
from censusdp.postprocess.layout import Batch
from censusdp.postprocess.least_squares import Inequalities
from censusdp.postprocess.problem import ReconciliationError
from censusdp.postprocess.ties import TieSource, cost_jitter, priority, snap_costs

SNAP = 1e-7  # values this close to an integer are taken as that integer before flooring
INTEGRAL = 1e-6  # an LP solution this close to integers is integral (a vertex of a TU polytope)
MILP_SECONDS = 60.0  # time limit of each HiGHS MILP; after it, the best incumbent if there is one


def round_batch(batch: Batch, x: np.ndarray, inv_matrix: sp.csr_matrix, inv_rhs: np.ndarray,
                rng: TieSource | None = None, bounds: Inequalities | None = None) -> tuple[np.ndarray, str]:
    """Integer point (int64, one per variable) and the backend that produced it; ``rng`` breaks ties.  ``bounds``:
    node marginals kept within public bounds; the fast backends' point is kept when it keeps them (it is then
    optimal under them too), else HiGHS solves with them."""
    point = np.clip(x, 0.0, batch.upper)
    nearest = np.rint(point)
    point = np.where(np.abs(point - nearest) <= SNAP, nearest, point)
    floor = np.floor(point)
    cost = 1.0 - 2.0 * (point - floor)
    floor_int = floor.astype(np.int64)
    bounded = bounds is not None and not bounds.empty
    in_sum = batch.var_sum_row >= 0
    sum_gap = batch.sum_rhs - np.bincount(batch.var_sum_row[in_sum], weights=floor[in_sum],
                                          minlength=batch.sum_rhs.size).astype(np.int64)
    if inv_rhs.size == 0:
        sizes = np.bincount(batch.var_sum_row, minlength=batch.sum_rhs.size) if batch.sum_rhs.size else None
        if sizes is None:
            values, method = floor_int + (cost < 0), "nearest"
        elif np.all((sum_gap >= 0) & (sum_gap <= sizes)):
            values, method = floor_int + _greedy(batch.var_sum_row, cost, sum_gap, rng), "greedy"
        else:
            values, method = None, ""
        if values is not None and (not bounded or _within(bounds, values)):
            return values, method
    inv_gap = inv_rhs - int_matmul(inv_matrix, floor_int)
    if rng is not None:
        cost = snap_costs(cost) + cost_jitter(cost.size, rng)
    increments, method = _binary(batch, cost, floor, sum_gap, inv_matrix, inv_gap, bounds if bounded else None)
    if increments is not None:
        return floor_int + increments, method
    return _integer_milp(batch, point, inv_matrix, inv_rhs, bounds if bounded else None)


def _within(bounds: Inequalities, values: np.ndarray) -> bool:
    """Exact check of an integer point against the bounds."""
    answers = int_matmul(bounds.matrix, values.astype(np.int64))
    return bool(np.all(answers >= bounds.lower) and np.all(answers <= bounds.upper))


def _greedy(row: np.ndarray, cost: np.ndarray, gap: np.ndarray, rng: TieSource | None = None) -> np.ndarray:
    """In every sum row, increment the ``gap[row]`` variables of lowest cost (ties: random, else lowest index)."""
    order = np.lexsort((priority((1.0 - cost) / 2.0, rng), row))
    sorted_rows = row[order]
    first = np.searchsorted(sorted_rows, sorted_rows, side="left")
    rank = np.arange(row.size) - first
    increments = np.zeros(row.size, dtype=np.int64)
    increments[order] = rank < gap[sorted_rows]
    return increments


def _binary(batch: Batch, cost: np.ndarray, floor: np.ndarray, sum_gap: np.ndarray, inv_matrix: sp.csr_matrix,
            inv_gap: np.ndarray, bounds: Inequalities | None = None) -> tuple[np.ndarray | None, str]:
    matrix = sp.vstack([batch.sum_matrix, inv_matrix], format="csr")
    rhs = np.concatenate([sum_gap, inv_gap]).astype(np.float64)
    upper = np.minimum(1.0, batch.upper - floor)
    if np.any(upper < 0) or np.any(rhs < 0):
        return None, ""
    constraints = [LinearConstraint(matrix, rhs, rhs)] if rhs.size else []
    if bounds is not None:  # the increments' share of each bounded marginal
        taken = bounds.matrix @ floor
        constraints.append(LinearConstraint(bounds.matrix, bounds.lower - taken, bounds.upper - taken))
    for relaxed in (True, False):
        # the LP relaxation first: its simplex vertex is integral when the matrix is totally unimodular (nested
        # invariants), far faster than branch and bound
        if relaxed:
            x, status = _simplex_vertex(cost, upper, constraints), 0
        else:
            result = milp(cost, integrality=np.ones(cost.size), bounds=Bounds(np.zeros(cost.size), upper),
                          constraints=constraints, options={"time_limit": MILP_SECONDS})
            x, status = (result.x, result.status) if result.status in (0, 1) else (None, result.status)
        if x is None:
            if relaxed:
                continue
            return None, ""
        increments = np.rint(x)
        if np.abs(x - increments).max(initial=0.0) <= INTEGRAL:
            if not _satisfies(matrix, increments, rhs, upper) or (
                    bounds is not None and not _within(bounds, floor.astype(np.int64) + increments.astype(np.int64))):
                return None, ""
            method = "binary_lp" if relaxed else "binary_milp"
            return increments.astype(np.int64), method if status == 0 else method + "_incumbent"
    return None, ""


def _simplex_vertex(cost: np.ndarray, upper: np.ndarray, constraints: list[LinearConstraint]) -> np.ndarray | None:
    """An optimal vertex of ``min cost'x`` over ``0 <= x <= upper`` and ``constraints`` by HiGHS's simplex, or None.
    Called on HiGHS directly with its arrays (``scipy.optimize.milp`` copies each value through Python lists, which
    took three times the simplex itself here), presolve off (it cost far more than the simplex), no output."""
    from highspy import _core  # the public ``highspy.Highs`` prints a banner on stdout when made

    n = cost.size
    matrix = sp.vstack([c.A for c in constraints], format="csc") if constraints else sp.csc_matrix((0, n))
    lower = np.concatenate([np.broadcast_to(c.lb, c.A.shape[0]) for c in constraints]) if constraints else []
    upper_rows = np.concatenate([np.broadcast_to(c.ub, c.A.shape[0]) for c in constraints]) if constraints else []
    highs = _core._Highs()
    for option, value in (("output_flag", False), ("presolve", "off"), ("time_limit", MILP_SECONDS)):
        highs.setOptionValue(option, value)
    status = highs.passModel(n, matrix.shape[0], matrix.nnz, int(_core.MatrixFormat.kColwise),
                             int(_core.ObjSense.kMinimize), 0.0, np.ascontiguousarray(cost, dtype=np.float64),
                             np.zeros(n), np.ascontiguousarray(upper, dtype=np.float64),
                             np.asarray(lower, dtype=np.float64), np.asarray(upper_rows, dtype=np.float64),
                             matrix.indptr[:-1].astype(np.int32), matrix.indices.astype(np.int32),
                             matrix.data.astype(np.float64), np.zeros(n, dtype=np.int32))
    if status != _core.HighsStatus.kOk or highs.run() == _core.HighsStatus.kError:
        return None
    if highs.getModelStatus() != _core.HighsModelStatus.kOptimal:
        return None
    return np.asarray(highs.getSolution().col_value, dtype=np.float64)


def _satisfies(matrix: sp.csr_matrix, values: np.ndarray, rhs: np.ndarray, upper: np.ndarray) -> bool:
    """Exact check of an integer point (a MILP incumbent is feasible only to HiGHS's tolerance)."""
    as_int = values.astype(np.int64)
    ok = bool(np.all(as_int >= 0) and np.all(values <= upper))
    return ok and bool(np.array_equal(int_matmul(matrix, as_int), rhs.astype(np.int64)))


def _integer_milp(batch: Batch, point: np.ndarray, inv_matrix: sp.csr_matrix, inv_rhs: np.ndarray,
                  bounds: Inequalities | None = None) -> tuple[np.ndarray, str]:
    """min sum t  s.t.  t >= |x - point|, constraints, x integer in [0, parent cell]."""
    n = point.size
    eye = sp.identity(n, format="csr")
    zeros_sum = sp.csr_matrix((batch.sum_rhs.size, n))
    zeros_inv = sp.csr_matrix((inv_rhs.size, n))
    constraints = [
        LinearConstraint(sp.hstack([eye, -eye]), -np.inf, point),
        LinearConstraint(sp.hstack([eye, eye]), point, np.inf),
        LinearConstraint(sp.hstack([batch.sum_matrix, zeros_sum]), batch.sum_rhs, batch.sum_rhs),
        LinearConstraint(sp.hstack([inv_matrix, zeros_inv]), inv_rhs, inv_rhs),
    ]
    if bounds is not None:
        zeros_bounds = sp.csr_matrix((bounds.lower.size, n))
        constraints.append(LinearConstraint(sp.hstack([bounds.matrix, zeros_bounds]), bounds.lower, bounds.upper))
    result = milp(
        np.concatenate([np.zeros(n), np.ones(n)]),
        integrality=np.concatenate([np.ones(n), np.zeros(n)]),
        bounds=Bounds(np.zeros(2 * n), np.concatenate([batch.upper, np.full(n, np.inf)])),
        constraints=constraints,
        options={"time_limit": MILP_SECONDS},
    )
    if result.status in (0, 1) and result.x is not None:
        values = np.rint(result.x[:n])
        equalities = sp.vstack([batch.sum_matrix, inv_matrix], format="csr")
        if _satisfies(equalities, values, np.concatenate([batch.sum_rhs, inv_rhs]), batch.upper) and (
                bounds is None or _within(bounds, values)):
            return values.astype(np.int64), "integer_milp" if result.status == 0 else "integer_milp_incumbent"
    raise ReconciliationError(f"integer rounding failed ({result.message.split('.')[0]}) for {batch.n_blocks} blocks "
                              f"and {n} variables")
