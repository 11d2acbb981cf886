"""Solver backends on the same problems, the fallback chain, and acceptance after measured violations."""

from __future__ import annotations

import itertools
import json
from fractions import Fraction

import cvxpy as cp
import numpy as np
import pytest
import scipy.sparse as sp

import censusdp.postprocess.least_squares as least_squares
from censusdp.postprocess import QueryInvariant, QueryMeasurement, ReconciliationError, reconcile_level

N = 5
IDENTITY = sp.identity(N, format="csr")
ONES = sp.csr_matrix(np.ones((1, N)))
NOISY = np.array([[3, -1, 7, 2, 9], [5, 5, 0, 1, 9], [0, 2, 2, 2, 2]])
PARENT = np.array([[6, 3, 4, 2, 20]])
TOTALS = np.array([[10], [15], [10]])


def level(**kwargs):
    measurements = [
        QueryMeasurement("detailed", IDENTITY, NOISY, Fraction(1)),
        QueryMeasurement("total", ONES, TOTALS + 1, Fraction(1, 2)),
    ]
    return reconcile_level(
        measurements,
        n_cells=N,
        parent_counts=PARENT,
        parent_index=np.zeros(3, dtype=np.int64),
        invariants=[QueryInvariant("total", ONES, TOTALS)],
        **kwargs,
    )


def assert_valid(counts):
    assert counts.dtype == np.int64 and counts.min() >= 0
    np.testing.assert_array_equal(counts.sum(axis=0), PARENT[0])
    np.testing.assert_array_equal(counts.sum(axis=1, keepdims=True), TOTALS)


@pytest.mark.parametrize("solver", ["CLARABEL", "OSQP", "SCS"])
def test_every_backend_releases_the_same_table(solver):
    reference = level(solver="CLARABEL").counts
    result = level(solver=solver)
    assert_valid(result.counts)
    assert result.report["solver_status"] == {f"{solver}:optimal": 1}
    # the LS optimum is unique and no fractional part sits near 1/2 here, so the tables agree
    np.testing.assert_array_equal(result.counts, reference)


def projection(y: np.ndarray) -> np.ndarray:
    """Euclidean projection of ``y`` (3 x 5) onto {x >= 0, column sums PARENT, row sums TOTALS}, computed
    without the package: Dykstra's alternating projections find the zero set, then the KKT system restricted
    to it gives the exact point, checked optimal (non-negative values and bound multipliers)."""
    k, n = y.shape
    a = np.vstack([np.kron(np.ones((1, k)), np.eye(n)), np.kron(np.eye(k), np.ones((1, n)))])
    b = np.concatenate([PARENT[0], TOTALS[:, 0]]).astype(float)
    target = y.ravel().astype(float)
    pinv = np.linalg.pinv(a)
    x, correction = target.copy(), np.zeros_like(target)
    for _ in range(5000):
        affine = x - pinv @ (a @ x - b)
        shifted = affine + correction
        x = np.maximum(shifted, 0.0)
        correction = shifted - x
    fixed = np.eye(k * n)[x < 1e-6]
    m, z = a.shape[0], fixed.shape[0]
    kkt = np.block([[2 * np.eye(k * n), a.T, fixed.T], [a, np.zeros((m, m + z))], [fixed, np.zeros((z, m + z))]])
    solution = np.linalg.lstsq(kkt, np.concatenate([2 * target, b, np.zeros(z)]), rcond=None)[0]
    point, bound_multipliers = solution[: k * n], -solution[k * n + m:]
    assert point.min() > -1e-9 and bound_multipliers.min() > 0 and np.abs(a @ point - b).max() < 1e-9
    return point.reshape(k, n)


def test_release_is_an_independently_computed_best_table_every_time():
    """The invariants fix every row sum, so the total measurement is a constant: the least-squares point is
    the projection of NOISY, and the table is a closest floor-or-ceil table to it meeting the sums."""
    point = projection(NOISY)
    floor = np.floor(point + 1e-9).ravel()
    grid = (floor + np.array(list(itertools.product((0, 1), repeat=floor.size)))).reshape(-1, *NOISY.shape)
    ok = np.all(grid.sum(axis=1) == PARENT, axis=1) & np.all(grid.sum(axis=2) == TOTALS[:, 0], axis=1)
    distance = np.abs(grid[ok] - point).sum(axis=(1, 2))
    best = grid[ok][distance <= distance.min() + 1e-9]
    # two best tables, exactly tied (a 2x2 swap of cells (0|2, 0|2)): without a tie source either may be
    # released, but it must be one of them, and the same one on every run
    assert len(best) == 2
    first, second = level(), level()
    assert first.report["tie_break"] == "index" and first.report["rounding"] == {"binary_lp": 1}
    assert any(np.array_equal(first.counts, table) for table in best)
    np.testing.assert_array_equal(second.counts, first.counts)


def test_fallback_when_the_first_solver_stops_early(monkeypatch):
    monkeypatch.setitem(least_squares.SOLVER_OPTIONS, "CLARABEL", {"max_iter": 1})
    result = level()
    assert_valid(result.counts)
    assert result.report["solver_status"] == {"CLARABEL:limit": 1, "OSQP:optimal": 1}
    assert result.report["fallbacks"] == 1


class FakePanic(BaseException):
    """Like pyo3's PanicException: a Rust solver crash is a BaseException, not an Exception."""


def test_fallback_when_the_first_solver_crashes(monkeypatch):
    solve = cp.Problem.solve

    def crashing(self, *args, **kwargs):
        if kwargs.get("solver") == "CLARABEL":
            raise FakePanic("index out of bounds")
        return solve(self, *args, **kwargs)

    monkeypatch.setattr(cp.Problem, "solve", crashing)
    result = level(solver="CLARABEL,SCS")
    assert_valid(result.counts)
    assert result.report["solver_status"] == {"CLARABEL:failed": 1, "SCS:optimal": 1}


def test_auto_skips_solvers_that_are_not_installed(monkeypatch):
    monkeypatch.setattr(least_squares, "AUTO_SOLVERS", ("NOT_A_SOLVER", "OSQP"))
    assert least_squares.resolve_solvers("auto") == ("OSQP",)
    assert_valid(level().counts)


def test_named_solver_must_be_installed():
    with pytest.raises(ValueError, match="NOT_A_SOLVER"):
        level(solver="CLARABEL,not_a_solver")


def test_all_solvers_failing_is_an_error_without_data(monkeypatch):
    monkeypatch.setitem(least_squares.SOLVER_OPTIONS, "CLARABEL", {"max_iter": 1})
    monkeypatch.setitem(least_squares.SOLVER_OPTIONS, "OSQP", {"max_iter": 1})
    secret = np.array([[7919, 104729, 1299709, 15485863, 3]])  # distinctive values, easy to spot in text
    with pytest.raises(ReconciliationError) as error:
        reconcile_level(
            [QueryMeasurement("detailed", IDENTITY, np.vstack([secret, secret - 1]), Fraction(1))],
            n_cells=N,
            parent_counts=secret,
            parent_index=np.zeros(2, dtype=np.int64),
            solver="CLARABEL,OSQP",
        )
    message = str(error.value)
    assert "CLARABEL=limit" in message and "OSQP=limit" in message
    for value in secret.ravel()[:4]:
        assert str(value)[:4] not in message


def test_a_point_breaking_the_constraints_is_rejected(monkeypatch):
    """Acceptance is measured, not taken from the solver's word: with no tolerance nothing is accepted."""
    monkeypatch.setattr(least_squares, "ABS_TOLERANCE", -1.0)
    with pytest.raises(ReconciliationError, match="CLARABEL=violation, OSQP=violation, SCS=violation"):
        level()


def test_report_is_public_and_complete():
    report = level().report
    assert report["problems"] == 1 and report["variables"] == 15
    assert report["rounding"] == {"binary_lp": 1}
    assert report["max_sum_violation"] < 1e-6 and report["max_invariant_violation"] < 1e-6
    assert report["min_value_before_rounding"] > -1e-6
    assert report["seconds_solve"] >= 0 and report["seconds_rounding"] >= 0
    assert report["solvers"] == ["CLARABEL", "OSQP", "SCS"]
    json.dumps(report)  # goes into the run report as is
