"""Least squares against closed forms: the solver backends must find the known optimum to 1e-6."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse as sp

from censusdp.postprocess import QueryInvariant, QueryMeasurement, reconcile_level
from censusdp.postprocess.layout import plan_batches
from censusdp.postprocess.least_squares import resolve_solvers
from censusdp.postprocess.reconcile import solve_batch
from tests.helpers.levels import planned_level

SOLVERS = ["CLARABEL", "OSQP"]


def fit(measurements, n_cells, parent=None, invariants=(), zeros=None, solver="CLARABEL"):
    """The least-squares point (before rounding) as a (n_nodes, n_cells) float table."""
    index = None if parent is None else np.zeros(measurements[0].noisy.shape[0], dtype=np.int64)
    inputs, blocks = planned_level(measurements, invariants, n_cells, parent, index, zeros)
    table = np.zeros((inputs.n_nodes, n_cells))
    for block_ids in plan_batches(blocks, n_cells):
        batch, _, _, solution, _ = solve_batch(inputs, blocks, block_ids, resolve_solvers(solver))
        assert solution.x is not None
        table[batch.nodes[batch.var_node], batch.var_cell] = solution.x
    return table


def detailed(noisy, sigma2=1):
    noisy = np.asarray(noisy)
    return QueryMeasurement("detailed", sp.identity(noisy.shape[1], format="csr"), noisy, Fraction(sigma2))


def total(noisy, n_cells, sigma2=1):
    return QueryMeasurement(
        "total", sp.csr_matrix(np.ones((1, n_cells))), np.asarray(noisy), Fraction(sigma2)
    )


def project_simplex(y: np.ndarray, p: float) -> np.ndarray:
    """Euclidean projection of y onto {x >= 0, sum x = p} (sort-based, Held-Wolfe-Crowder)."""
    u = np.sort(y)[::-1]
    cumulative = np.cumsum(u) - p
    rho = np.nonzero(u - cumulative / np.arange(1, y.size + 1) > 0)[0][-1]
    return np.maximum(y - cumulative[rho] / (rho + 1), 0.0)


@pytest.mark.parametrize("solver", SOLVERS)
def test_two_children_detailed_is_clipped_average(solver):
    noisy = np.array([[5, -3, 12, 0, 7], [1, 4, -2, 0, 30]])
    parent = np.array([[8, 6, 3, 2, 10]])
    x = fit([detailed(noisy)], 5, parent=parent, solver=solver)
    first = np.clip((parent[0] + noisy[0] - noisy[1]) / 2, 0, parent[0])
    np.testing.assert_allclose(x, np.vstack([first, parent[0] - first]), atol=1e-6)


@pytest.mark.parametrize("solver", SOLVERS)
def test_detailed_only_is_a_simplex_projection_per_cell(solver):
    rng = np.random.default_rng(3)
    noisy = rng.integers(-20, 40, size=(5, 7))
    parent = rng.integers(0, 60, size=(1, 7))
    x = fit([detailed(noisy, sigma2=3)], 7, parent=parent, solver=solver)
    for cell in range(7):
        if parent[0, cell] == 0:
            np.testing.assert_array_equal(x[:, cell], 0)
        else:
            expected = project_simplex(noisy[:, cell].astype(float), parent[0, cell])
            np.testing.assert_allclose(x[:, cell], expected, atol=1e-6)


def kkt_total_detailed(noisy_detailed, noisy_total, parent, w_detailed, w_total):
    """Equality-constrained weighted LS (no active bound) from its dense KKT system."""
    k, n = noisy_detailed.shape
    hessian = np.kron(np.eye(k), w_detailed * np.eye(n) + w_total * np.ones((n, n)))
    gradient = np.concatenate([w_detailed * noisy_detailed[c] + w_total * noisy_total[c] for c in range(k)])
    coupling = np.kron(np.ones((1, k)), np.eye(n))
    kkt = np.block([[hessian, coupling.T], [coupling, np.zeros((n, n))]])
    solution = np.linalg.solve(kkt, np.concatenate([gradient, parent]))
    return solution[: k * n].reshape(k, n)


@pytest.mark.parametrize("solver", SOLVERS)
def test_total_plus_detailed_matches_kkt_solution(solver):
    rng = np.random.default_rng(5)
    true = rng.integers(200, 400, size=(4, 6))
    parent = true.sum(axis=0, keepdims=True)
    noisy_detailed = true + rng.integers(-9, 10, size=true.shape)
    noisy_total = true.sum(axis=1, keepdims=True) + rng.integers(-30, 30, size=(4, 1))
    measurements = [detailed(noisy_detailed, sigma2=4), total(noisy_total, 6, sigma2=Fraction(1, 2))]
    x = fit(measurements, 6, parent=parent, solver=solver)
    expected = kkt_total_detailed(noisy_detailed, noisy_total, parent[0], 1 / 4, 2)
    assert expected.min() > 1  # no bound active: the KKT solution is the optimum
    np.testing.assert_allclose(x, expected, rtol=1e-6, atol=1e-6)


def test_root_total_plus_detailed_closed_form():
    """At the root without constraints: (w_d I + w_t 11') x = w_d y + w_t t 1 (Sherman-Morrison)."""
    y = np.array([[120, 80, 95, 130]])
    t = np.array([[440]])
    x = fit([detailed(y, sigma2=2), total(t, 4, sigma2=1)], 4)
    w_d, w_t, n = 0.5, 1.0, 4
    shift = w_t * (t[0, 0] - y.sum()) / (w_d + n * w_t)
    np.testing.assert_allclose(x[0], y[0] + shift, rtol=1e-7, atol=1e-6)


def test_root_detailed_only_clips_negative_values():
    y = np.array([[3, -4, 0, 12], [-1, -1, 5, 2]])
    x = fit([detailed(y)], 4)
    exact = y != 0
    np.testing.assert_allclose(x[exact], np.maximum(y, 0)[exact], atol=1e-6)
    # y == 0 is degenerate (the bound is active with a zero multiplier): an interior-point method gets there
    # only like the square root of its gap; the rounding then makes it exact.
    np.testing.assert_allclose(x[~exact], 0, atol=1e-3)
    result = reconcile_level([detailed(y)], n_cells=4, parent_counts=None, parent_index=None)
    np.testing.assert_array_equal(result.counts, np.maximum(y, 0))


def test_root_invariant_total_is_a_projection():
    y = np.array([[3, -4, 9, 12, 1]])
    x = fit(
        [detailed(y)],
        5,
        invariants=[QueryInvariant("total", sp.csr_matrix(np.ones((1, 5))), np.array([[20]]))],
    )
    np.testing.assert_allclose(x[0], project_simplex(y[0].astype(float), 20), atol=1e-6)


def test_fixed_cells_are_dropped_and_count_as_zero_in_queries():
    """Parent-empty and structural-zero cells are 0; the total then only spreads over the free cells."""
    noisy = np.array([[10, 50, 10, 10], [10, 50, 10, 10]])
    parent = np.array([[20, 0, 20, 0]])
    zeros = np.array([False, False, False, True])
    measurements = [detailed(noisy), total(np.array([[40], [40]]), 4)]
    x = fit(measurements, 4, parent=parent, zeros=zeros)
    np.testing.assert_allclose(x, [[10, 0, 10, 0], [10, 0, 10, 0]], atol=1e-6)
    result = reconcile_level(
        measurements,
        n_cells=4,
        parent_counts=parent,
        parent_index=np.zeros(2, np.int64),
        structural_zeros=zeros,
    )
    np.testing.assert_array_equal(result.counts, [[10, 0, 10, 0], [10, 0, 10, 0]])


def test_only_child_equals_parent_without_a_solve():
    parent = np.array([[4, 0, 9], [1, 2, 3]])
    result = reconcile_level(
        [detailed(np.array([[0, 50, -3], [7, 7, 7]]))],
        n_cells=3,
        parent_counts=parent,
        parent_index=np.array([0, 1]),
    )
    np.testing.assert_array_equal(result.counts, parent)
    assert result.report["problems"] == 0 and result.report["blocks_only_child"] == 2
