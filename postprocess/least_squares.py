"""Weighted non-negative least squares of one batch with cvxpy, behind a small solver-fallback interface:

minimise  sum_q (1/sigma2_q) * || K_q x - y_q ||^2   s.t.  x >= 0,  children sum to parent,  invariants.

A point is accepted only once its constraint violations are measured, else the next solver is tried.
"""

from __future__ import annotations

import functools
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

if TYPE_CHECKING:
    import cvxpy as cp

AUTO_SOLVERS: tuple[str, ...] = ("CLARABEL", "OSQP", "SCS")
SOLVER_OPTIONS: dict[str, dict] = {
    # single-threaded QDLDL: deterministic, so a re-run gives the same table; tight tolerances cost about one
    # iteration and agree with the closed forms to 1e-6
    "CLARABEL": {"direct_solve_method": "qdldl", "tol_gap_abs": 1e-10, "tol_gap_rel": 1e-10, "tol_feas": 1e-10},
    "OSQP": {"eps_abs": 1e-7, "eps_rel": 1e-7, "max_iter": 200_000},
    "SCS": {"eps_abs": 1e-7, "eps_rel": 1e-7, "max_iters": 200_000},
}
# A solution may miss a constraint by at most this (in persons) plus a relative part of the batch's scale;
# the rounding restores every constraint exactly, so this bounds only the quality of the starting point.
ABS_TOLERANCE = 0.05
REL_TOLERANCE = 1e-7

# cvxpy's status strings (cvxpy.settings); cvxpy itself is imported where a batch is solved: it is most of the
# CLI's start-up time, and most commands never solve
_STATUS = {
    "optimal": "optimal",
    "optimal_inaccurate": "inaccurate",
    "infeasible": "infeasible",
    "infeasible_inaccurate": "infeasible",
    "user_limit": "limit",
}


@dataclass(frozen=True)
class Term:
    """One query's rows restricted to the batch: ``weight * ||matrix @ x - target||^2``."""

    matrix: sp.csr_matrix
    target: np.ndarray
    weight: float


@dataclass(frozen=True)
class Equalities:
    """``matrix @ x == rhs``; rows flagged ``in_solve`` are passed to the solver, all are checked."""

    matrix: sp.csr_matrix
    rhs: np.ndarray
    in_solve: np.ndarray


@dataclass(frozen=True)
class Inequalities:
    """``lower <= matrix @ x <= upper`` (``-inf``/``inf`` where a side is open): public bounds on node marginals, or
    an earlier pass's answers kept within a tolerance (``postprocess.passes``)."""

    matrix: sp.csr_matrix
    lower: np.ndarray
    upper: np.ndarray

    @property
    def empty(self) -> bool:
        return self.lower.size == 0

    def excess(self, point: np.ndarray) -> float:
        """The largest amount by which ``point`` breaks a bound (0 when it keeps them all)."""
        values = self.matrix @ point
        return float(max(0.0, (self.lower - values).max(initial=0.0), (values - self.upper).max(initial=0.0)))


@dataclass
class Solution:
    x: np.ndarray | None = None
    attempts: list[tuple[str, str]] = field(default_factory=list)  # (solver, our status)
    violations: tuple[float, ...] = ()  # max abs violation of each group of equalities, in persons
    min_value: float = np.nan
    seconds: float = 0.0


class SolverPath(StrEnum):
    """The paths ``reconcile_level`` can take (the ``postprocess.solver`` setting also takes cvxpy solver names)."""

    AUTO = "auto"  # the fast closed forms where they apply, else first-order on large blocks, else cvxpy
    CVXPY = "cvxpy"  # cvxpy with the installed solvers of AUTO_SOLVERS, in order
    FAST = "fast"  # the exact closed forms of postprocess.fast_path (refused where they do not apply)
    FIRST_ORDER = "first_order"  # postprocess.first_order on every batch, cvxpy where it does not converge


def check_solver(solver: str) -> str:
    """``solver`` as ``reconcile_level`` takes it (a ``SolverPath`` or installed cvxpy names), else ValueError.
    The paths need no check: cvxpy installs the solvers of AUTO_SOLVERS with itself."""
    if solver not in tuple(SolverPath):
        try:
            resolve_solvers(solver)
        except ValueError as error:
            raise ValueError(f"{error} (use {', '.join(SolverPath)} or installed cvxpy solver names)") from None
    return solver


@functools.cache
def _installed() -> frozenset[str]:
    # cvxpy answers by trying to import every solver it knows, each time (~7 ms): a reconciliation asks per chunk
    import cvxpy as cp

    return frozenset(cp.installed_solvers())


def resolve_solvers(solver: str) -> tuple[str, ...]:
    """``"auto"``/``"cvxpy"``: the installed ones of AUTO_SOLVERS in order; else cvxpy names, comma-separated."""
    installed = _installed()
    if solver in (SolverPath.AUTO, SolverPath.CVXPY):
        chain = tuple(name for name in AUTO_SOLVERS if name in installed)
    else:
        chain = tuple(name.strip().upper() for name in solver.split(",") if name.strip())
        missing = [name for name in chain if name not in installed]
        if missing:
            raise ValueError(f"solver(s) not installed: {', '.join(missing)}")
    if not chain:
        raise ValueError("no least-squares solver available")
    return chain


def solve(terms: list[Term], equalities: list[Equalities], n_vars: int, solvers: tuple[str, ...],
          inequalities: Sequence[Inequalities] = ()) -> Solution:
    """Try each solver in turn until one returns a point keeping the (in)equalities; ``x`` stays None if none does."""
    started = time.perf_counter()
    if n_vars == 0:
        return Solution(x=np.zeros(0), attempts=[("none", "optimal")], violations=(0.0,) * len(equalities))
    import cvxpy as cp

    scale = _scale(terms, equalities)
    x = cp.Variable(n_vars)
    constraints: list[cp.Constraint] = [x >= 0, *(eq.matrix[eq.in_solve] @ x == eq.rhs[eq.in_solve] / scale
                                                  for eq in equalities if eq.in_solve.any())]
    for rows in inequalities:
        low, high = np.isfinite(rows.lower), np.isfinite(rows.upper)
        if low.any():
            constraints.append(rows.matrix[low] @ x >= rows.lower[low] / scale)
        if high.any():
            constraints.append(rows.matrix[high] @ x <= rows.upper[high] / scale)
    problem = cp.Problem(cp.Minimize(_objective(terms, x, scale)), constraints)
    tolerance = ABS_TOLERANCE + REL_TOLERANCE * scale
    result = Solution()
    for name in solvers:
        status = _run(problem, name)
        if status in ("optimal", "inaccurate") and x.value is not None:
            point = np.asarray(x.value, dtype=np.float64) * scale
            violations = tuple(violation(eq, point) for eq in equalities)
            worst = max([*violations, *(rows.excess(point) for rows in inequalities)], default=0.0)
            minimum = float(point.min()) if point.size else 0.0
            if np.isfinite(worst) and worst <= tolerance and minimum >= -tolerance:
                result.attempts.append((name, status))
                result.x, result.violations, result.min_value = point, violations, minimum
                break
            status = "violation"
        result.attempts.append((name, status))
    result.seconds = time.perf_counter() - started
    return result


def _run(problem: cp.Problem, name: str) -> str:
    try:
        with warnings.catch_warnings():  # cvxpy's "may be inaccurate" warning: the status says it already
            warnings.simplefilter("ignore", UserWarning)
            problem.solve(solver=name, **SOLVER_OPTIONS.get(name, {}))
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:  # Rust solvers panic with pyo3's PanicException (a BaseException)
        return "failed"
    return _STATUS.get(problem.status, "failed")


def _scale(terms: list[Term], equalities: list[Equalities]) -> float:
    """Largest magnitude in the data; x is solved for in units of it, so the solver sees O(1) data."""
    peaks = [np.abs(t.target).max() for t in terms if t.target.size]
    peaks += [np.abs(eq.rhs).max() for eq in equalities if eq.rhs.size]
    return float(max([1.0, *peaks]))


def _objective(terms: list[Term], x: cp.Variable, scale: float) -> cp.Expression:
    import cvxpy as cp

    n = x.shape[0]
    top = max((t.weight for t in terms), default=1.0)
    diagonal = np.zeros(n)
    linear = np.zeros(n)
    multi: list[sp.csr_matrix] = []
    for term in terms:
        weight = term.weight / top
        linear += weight * (term.matrix.T @ term.target) / scale
        single = np.diff(term.matrix.indptr) == 1
        if single.any():
            rows = term.matrix[single]
            diagonal += weight * np.asarray(rows.multiply(rows).sum(axis=0)).ravel()
        if (~single).any():
            multi.append(np.sqrt(weight) * term.matrix[~single])
    objective: cp.Expression = -2 * (linear @ x)
    if diagonal.any():
        objective = objective + cp.quad_form(x, sp.diags(diagonal, format="csc"), assume_PSD=True)
    if multi:
        objective = objective + cp.sum_squares(sp.vstack(multi, format="csr") @ x)
    return objective


def violation(eq: Equalities, point: np.ndarray) -> float:
    return float(np.abs(eq.matrix @ point - eq.rhs).max(initial=0.0))
