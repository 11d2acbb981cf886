"""Rounding against brute force on tiny problems, and the rounding backends against each other."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import Bounds, LinearConstraint, milp

from censusdp.postprocess import QueryInvariant, QueryMeasurement, rounding
from censusdp.postprocess.reconcile import solve_batch
from censusdp.postprocess.rounding import SNAP, _binary, _greedy, round_batch
from tests.helpers.levels import planned_level


def tiny(seed: int, children: int, n_cells: int, invariant: bool, marginal: bool = False):
    """One parent with random children; returns the batch, its invariant rows and the LS point."""
    rng = np.random.default_rng(seed)
    true = rng.integers(0, 4, size=(children, n_cells))
    true[:, rng.random(n_cells) < 0.2] = 0
    true[0, 0] += 1  # at least one free cell
    parent = true.sum(axis=0, keepdims=True)
    identity = sp.identity(n_cells, format="csr")
    ones = sp.csr_matrix(np.ones((1, n_cells)))
    measurements = [
        QueryMeasurement("detailed", identity, true + rng.integers(-3, 4, size=true.shape), Fraction(1)),
        QueryMeasurement(
            "total", ones, true.sum(axis=1, keepdims=True) + rng.integers(-2, 3, (children, 1)), 2
        ),
    ]
    invariants = []
    if invariant:
        invariants.append(QueryInvariant("total", ones, true.sum(axis=1, keepdims=True)))
    if marginal:
        half = sp.csr_matrix(np.arange(n_cells)[None, :] < n_cells // 2, dtype=float)
        invariants.append(QueryInvariant("half", half, (half @ true.T).T.astype(np.int64)))
    inputs, blocks = planned_level(measurements, invariants, n_cells, parent, np.zeros(children, dtype=np.int64))
    batch, inv_matrix, inv_rhs, solution, _ = solve_batch(inputs, blocks, np.array([0]), ("CLARABEL",))
    return batch, inv_matrix, inv_rhs, solution.x


def feasible(batch, inv_matrix, inv_rhs, tables: np.ndarray) -> np.ndarray:
    """Rows of ``tables`` (candidates, n_vars) that satisfy every constraint exactly."""
    ok = np.all(tables >= 0, axis=1) & np.all(tables <= batch.upper, axis=1)
    ok &= np.all(batch.sum_rhs == (batch.sum_matrix @ tables.T).T, axis=1)
    if inv_rhs.size:
        ok &= np.all(inv_rhs == (inv_matrix @ tables.T).T, axis=1)
    return ok


def l1(tables: np.ndarray, x: np.ndarray) -> np.ndarray:
    return np.abs(tables - x).sum(axis=-1)


def brute_floor_or_ceil(batch, inv_matrix, inv_rhs, x):
    floor = np.floor(np.clip(x, 0, batch.upper) + SNAP)
    steps = np.array(list(itertools.product((0, 1), repeat=x.size)))
    tables = floor + steps
    ok = feasible(batch, inv_matrix, inv_rhs, tables)
    return l1(tables[ok], x).min() if ok.any() else None


CASES = [(seed, children, cells) for seed in range(6) for children, cells in [(2, 3), (3, 3), (2, 6), (4, 3)]]


@pytest.mark.parametrize(("seed", "children", "cells"), CASES)
@pytest.mark.parametrize("invariant", [False, True])
def test_rounding_is_the_best_floor_or_ceil_table(seed, children, cells, invariant):
    batch, inv_matrix, inv_rhs, x = tiny(seed, children, cells, invariant)
    rounded, method = round_batch(batch, x, inv_matrix, inv_rhs)
    assert method == ("binary_lp" if invariant else "greedy")
    assert feasible(batch, inv_matrix, inv_rhs, rounded[None, :])[0]
    assert np.all(np.abs(rounded - x) < 1 + 1e-6)
    best = brute_floor_or_ceil(batch, inv_matrix, inv_rhs, x)
    assert best is not None
    assert l1(rounded, x) == pytest.approx(best, abs=1e-6)


@pytest.mark.parametrize("seed", range(8))
def test_rounding_with_crossing_invariants(seed):
    """Total and a half-table marginal per child: still laminar, and the brute force agrees."""
    batch, inv_matrix, inv_rhs, x = tiny(seed, 2, 6, invariant=True, marginal=True)
    rounded, method = round_batch(batch, x, inv_matrix, inv_rhs)
    assert method in ("binary_lp", "binary_milp")
    assert feasible(batch, inv_matrix, inv_rhs, rounded[None, :])[0]
    assert l1(rounded, x) == pytest.approx(brute_floor_or_ceil(batch, inv_matrix, inv_rhs, x), abs=1e-6)


@pytest.mark.parametrize("seed", range(10))
def test_greedy_and_lp_backends_agree(seed):
    """Without invariants the per-cell greedy and the HiGHS problem reach the same optimum."""
    batch, inv_matrix, inv_rhs, x = tiny(seed, 5, 12, invariant=False)
    floor = np.floor(x + SNAP)
    cost = 1 - 2 * (np.clip(x, 0, None) - floor)
    gap = batch.sum_rhs - (batch.sum_matrix @ floor).astype(np.int64)
    greedy = _greedy(batch.var_sum_row, cost, gap)
    lp, method = _binary(batch, cost, floor, gap, sp.csr_matrix((0, x.size)), np.zeros(0, dtype=np.int64))
    assert method == "binary_lp"
    assert cost @ greedy == pytest.approx(cost @ lp, abs=1e-9)


# Seeds whose shifted point below leaves no floor-or-ceil table (checked in the test).  With other seeds the
# clipping at zero can keep the floors completable; that case is test_rounding_is_the_best_floor_or_ceil_table's.
BROKEN_FLOOR_SEEDS = (1, 4, 5, 6)


@pytest.mark.parametrize("invariant", [False, True])
@pytest.mark.parametrize("seed", BROKEN_FLOOR_SEEDS)
def test_broken_floors_fall_back_to_the_integer_problem(seed, invariant):
    """A point that misses the sum constraint by more than one per child: floors cannot be completed."""
    batch, inv_matrix, inv_rhs, x = tiny(seed, 2, 2, invariant)
    shifted = np.clip(x - 1.5, 0, None) + 0.25
    assert brute_floor_or_ceil(batch, inv_matrix, inv_rhs, shifted) is None  # the premise, by brute force
    rounded, method = round_batch(batch, shifted, inv_matrix, inv_rhs)
    assert method == "integer_milp"
    assert feasible(batch, inv_matrix, inv_rhs, rounded[None, :])[0]
    upper = batch.upper.astype(int)
    grid = np.array(list(itertools.product(*[range(u + 1) for u in upper])))
    ok = feasible(batch, inv_matrix, inv_rhs, grid)
    assert l1(rounded, shifted) == pytest.approx(l1(grid[ok], shifted).min(), abs=1e-6)


def test_root_without_constraints_rounds_to_nearest():
    x = np.array([0.2, 0.5, 0.7, 3.49, 3.51, 2.0 - 1e-9])
    batch = type("RootBatch", (), {})()
    batch.upper = np.full(x.size, np.inf)
    batch.sum_rhs = np.zeros(0, dtype=np.int64)
    batch.var_sum_row = np.full(x.size, -1)
    rounded, method = round_batch(batch, x, sp.csr_matrix((0, x.size)), np.zeros(0, dtype=np.int64))
    assert method == "nearest"
    np.testing.assert_array_equal(rounded, [0, 0, 1, 3, 4, 2])
    assert rounded.dtype == np.int64


def test_the_simplex_vertex_is_an_optimum_of_the_lp_and_prints_nothing(capfd: pytest.CaptureFixture[str]) -> None:
    """HiGHS called directly reaches scipy's optimal value on random bounded LPs with equality and range rows, and
    writes nothing to stdout or stderr (the public ``highspy.Highs`` prints a banner)."""
    rng = np.random.default_rng(3)
    for _ in range(20):
        n, m = int(rng.integers(5, 60)), int(rng.integers(1, 8))
        matrix = sp.random(m, n, density=0.4, format="csr", random_state=rng, data_rvs=lambda k: np.ones(k))
        start = rng.integers(0, 2, size=n).astype(np.float64)  # a feasible point: the rows hold at it
        rows = matrix @ start
        constraints = [LinearConstraint(matrix, rows, rows), LinearConstraint(matrix[:1], rows[:1] - 1, rows[:1] + 1)]
        cost, upper = rng.normal(size=n), np.ones(n)
        x = rounding._simplex_vertex(cost, upper, constraints)
        reference = milp(cost, bounds=Bounds(np.zeros(n), upper), constraints=constraints)
        assert x is not None and reference.status == 0
        assert cost @ x == pytest.approx(reference.fun, abs=1e-9)
        assert np.all(x >= -1e-9) and np.all(x <= upper + 1e-9) and np.allclose(matrix @ x, rows, atol=1e-9)
    infeasible = [LinearConstraint(sp.csr_matrix(np.ones((1, 3))), 5.0, 5.0)]  # three variables of at most 1
    assert rounding._simplex_vertex(np.ones(3), np.ones(3), infeasible) is None
    assert capfd.readouterr() == ("", "")
