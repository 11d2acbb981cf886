"""The closed-form fast path against cvxpy (the reference) on random problems with ties, zeros, tiny parents."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse as sp

import censusdp.postprocess.least_squares as least_squares
from censusdp.pipeline.dp.random_source import seeded_random_source
from censusdp.postprocess import QueryInvariant, QueryMeasurement, reconcile_level
from censusdp.postprocess.fast_path import applies, largest_remainder, project
from censusdp.postprocess.layout import plan_batches
from censusdp.postprocess.problem import validate
from censusdp.postprocess.reconcile import solve_batch
from censusdp.postprocess.rounding import _greedy, round_batch
from censusdp.postprocess.ties import TieSource
from tests.helpers.levels import planned_level


class NumpySource:
    """Test-only stand-in for the run's random source (same two methods)."""

    def __init__(self, seed: int) -> None:
        self._gen = np.random.default_rng(seed)

    def uniform_uint64(self, size: int) -> np.ndarray:
        return self._gen.integers(0, 2**64, size=size, dtype=np.uint64)

    def uniform_below(self, bound: int, size: int) -> np.ndarray:
        return self._gen.integers(0, bound, size=size, dtype=np.int64)


def random_level(seed: int):
    """Several parents with 1-6 children each; small integer noise so that ties are common."""
    rng = np.random.default_rng(seed)
    n_cells = int(rng.integers(1, 7))
    sizes = rng.integers(1, 7, size=int(rng.integers(1, 4)))
    parent_index = np.repeat(np.arange(sizes.size), sizes)
    zeros = rng.random(n_cells) < 0.15
    parents = rng.integers(0, 4, size=(sizes.size, n_cells)) * (rng.random((sizes.size, n_cells)) < 0.8)
    parents[rng.random(parents.shape) < 0.2] *= 10  # some larger parents, most tiny (0..3)
    parents[:, zeros] = 0
    measurements = []
    for q in range(1 + int(rng.random() < 0.3)):  # sometimes two detailed measurements, unequal variances
        noisy = rng.integers(-3, 5, size=(parent_index.size, n_cells))
        sigma2 = Fraction(int(rng.integers(1, 9)), int(rng.integers(1, 3)))
        measurements.append(QueryMeasurement(f"detailed{q}", sp.identity(n_cells, format="csr"), noisy, sigma2))
    return measurements, parents.astype(np.int64), parent_index, zeros


# The reference is cvxpy with OSQP polished to 1e-9: with integer data many optima sit exactly on the boundary
# (y_i = theta, x_i = 0 with a zero multiplier: not strictly complementary), where an interior-point method
# (Clarabel) converges only to about the square root of its tolerance (seen: 1e-5 off at tol 1e-10), while
# OSQP's polishing step solves the KKT system of the detected active set and lands on the exact point.
REFERENCE_OPTIONS = {"eps_abs": 1e-9, "eps_rel": 1e-9, "max_iter": 400_000, "polishing": True}


def reference(measurements, parents, parent_index, zeros):
    """cvxpy (polished OSQP) least-squares table and the general path's rounding of it."""
    n_cells = parents.shape[1]
    inputs, blocks = planned_level(measurements, (), n_cells, parents, parent_index, zeros)
    x = np.zeros((inputs.n_nodes, n_cells))
    for b in np.flatnonzero(np.diff(blocks.start) == 1):  # only children equal their parent
        x[blocks.order[blocks.start[b]]] = parents[blocks.parent[b]]
    rounded = x.astype(np.int64)
    for block_ids in plan_batches(blocks, n_cells):
        batch, inv_matrix, inv_rhs, solution, _ = solve_batch(inputs, blocks, block_ids, ("OSQP",))
        where = (batch.nodes[batch.var_node], batch.var_cell)
        x[where] = solution.x
        rounded[where] = round_batch(batch, solution.x, inv_matrix, inv_rhs)[0]
    return x, rounded


def combined(measurements):
    weights = [1 / float(m.sigma2) for m in measurements]
    return sum(w * m.noisy for w, m in zip(weights, measurements, strict=True)) / sum(weights)


@pytest.mark.parametrize("chunk", range(8))
def test_fast_path_matches_cvxpy_on_random_problems(chunk, monkeypatch):
    """240 random levels: projections within 1e-6 of cvxpy, rounding with the same L1 objective."""
    monkeypatch.setitem(least_squares.SOLVER_OPTIONS, "OSQP", REFERENCE_OPTIONS)
    for seed in range(chunk * 30, chunk * 30 + 30):
        measurements, parents, parent_index, zeros = random_level(seed)
        x_ref, rounded_ref = reference(measurements, parents, parent_index, zeros)
        y = combined(measurements)
        for node_rows in [np.flatnonzero(parent_index == b) for b in range(parents.shape[0])]:
            p = parents[parent_index[node_rows[0]]]
            free = p > 0
            if free.any():
                x = project(y[node_rows][:, free].T, p[free].astype(float)).T
                np.testing.assert_allclose(x, x_ref[node_rows][:, free], atol=1e-6)
        result = reconcile_level(
            measurements, n_cells=parents.shape[1], parent_counts=parents, parent_index=parent_index,
            structural_zeros=zeros,
        )
        assert result.report["path"] == "fast"
        counts = result.counts
        sums = np.zeros_like(parents)
        np.add.at(sums, parent_index, counts)
        np.testing.assert_array_equal(sums, parents)
        assert counts.min() >= 0 and not counts[:, zeros].any()
        assert np.abs(counts - x_ref).sum() == pytest.approx(np.abs(rounded_ref - x_ref).sum(), abs=1e-5)


@pytest.mark.parametrize("seed", range(20))
def test_largest_remainder_equals_the_greedy_rounding(seed):
    """Rows with many exact ties (fractions in quarters): same L1 objective as the general greedy."""
    rng = np.random.default_rng(seed)
    k = int(rng.integers(2, 8))
    x = rng.integers(0, 12, size=(50, k)) / 4.0
    x[:, -1] += (-x.sum(axis=1)) % 1  # integer row sums
    p = np.rint(x.sum(axis=1)).astype(np.int64)
    for rng_source in (None, NumpySource(seed)):
        rounded = largest_remainder(x, p, rng_source)
        np.testing.assert_array_equal(rounded.sum(axis=1), p)
        row = np.repeat(np.arange(50), k)
        floor = np.floor(x.ravel())
        greedy = floor + _greedy(row, 1 - 2 * (x.ravel() - floor), p - floor.reshape(50, k).sum(axis=1).astype(int))
        np.testing.assert_allclose(np.abs(rounded - x).sum(axis=1), np.abs(greedy.reshape(50, k) - x).sum(axis=1))


def tie_level(**kwargs):
    """One parent of 1 person in each of 3 cells, two children measured alike: every cell is a 1/2 tie."""
    noisy = np.array([[4, 0, 2], [4, 0, 2]])
    return reconcile_level(
        [QueryMeasurement("detailed", sp.identity(3, format="csr"), noisy, Fraction(1))],
        n_cells=3,
        parent_counts=np.array([[1, 1, 1]]),
        parent_index=np.array([0, 0]),
        **kwargs,
    )


@pytest.mark.parametrize("solver", ["auto", "cvxpy"])
def test_ties_are_broken_at_random_and_constraints_hold(solver):
    tables = set()
    for seed in range(12):
        result = tie_level(solver=solver, rng=NumpySource(seed))
        np.testing.assert_array_equal(result.counts.sum(axis=0), [1, 1, 1])
        assert result.report["tie_break"] == "random"
        tables.add(result.counts.tobytes())
    assert len(tables) > 1
    deterministic = tie_level(solver=solver)
    np.testing.assert_array_equal(deterministic.counts, [[1, 1, 1], [0, 0, 0]])  # index order without rng
    assert deterministic.report["tie_break"] == "index"


def test_ties_with_invariants_are_broken_at_random():
    """The HiGHS rounding (a total invariant per child) also varies across seeds and keeps every constraint."""
    ones = sp.csr_matrix(np.ones((1, 4)))
    tables = set()
    for seed in range(12):
        result = reconcile_level(
            [QueryMeasurement("detailed", sp.identity(4, format="csr"), np.array([[2, 2, 0, 0], [2, 2, 0, 0]]), 1)],
            n_cells=4,
            parent_counts=np.array([[1, 1, 1, 1]]),
            parent_index=np.array([0, 0]),
            invariants=[QueryInvariant("total", ones, np.array([[2], [2]]))],
            rng=NumpySource(seed),
        )
        assert result.report["path"] == "cvxpy" and result.report["rounding"] == {"binary_lp": 1}
        np.testing.assert_array_equal(result.counts.sum(axis=0), [1, 1, 1, 1])
        np.testing.assert_array_equal(result.counts.sum(axis=1), [2, 2])
        tables.add(result.counts.tobytes())
    assert len(tables) > 1


def test_the_run_random_source_fits_the_protocol():
    source = seeded_random_source(7)
    assert isinstance(source, TieSource)
    result = tie_level(rng=source)
    assert result.report["tie_break"] == "random"
    np.testing.assert_array_equal(result.counts.sum(axis=0), [1, 1, 1])


def test_root_fast_path_is_clipped_and_rounded_to_nearest():
    noisy = np.array([[-3, 0, 5, 2], [7, 1, 0, 9]])
    measurements = [
        QueryMeasurement("a", sp.identity(4, format="csr"), noisy, Fraction(1)),
        QueryMeasurement("b", sp.identity(4, format="csr"), noisy + 2, Fraction(2)),
    ]
    fast = reconcile_level(measurements, n_cells=4, parent_counts=None, parent_index=None)
    general = reconcile_level(measurements, n_cells=4, parent_counts=None, parent_index=None, solver="cvxpy")
    assert fast.report["path"] == "fast" and general.report["path"] == "cvxpy"
    np.testing.assert_array_equal(fast.counts, general.counts)
    np.testing.assert_array_equal(fast.counts, np.maximum(noisy + 1, 0))  # the weighted mean is noisy + 2/3


def test_solver_choice():
    measurements, parents, parent_index, zeros = random_level(3)
    kwargs = {"n_cells": parents.shape[1], "parent_counts": parents, "parent_index": parent_index}
    assert reconcile_level(measurements, solver="fast", **kwargs).report["path"] == "fast"
    assert reconcile_level(measurements, solver="CLARABEL", **kwargs).report["path"] == "cvxpy"
    total = sp.csr_matrix(np.ones((1, parents.shape[1])))
    noisy_total = QueryMeasurement("total", total, np.zeros((parent_index.size, 1)), Fraction(1))
    inputs = validate([*measurements, noisy_total], (), structural_zeros=None, **kwargs)
    assert not applies(inputs)
    # not the fast path's problem: the first-order solver's (a detailed query makes it strongly convex)
    assert reconcile_level([*measurements, noisy_total], **kwargs).report["path"] == "first_order"
    with pytest.raises(ValueError, match="fast"):
        reconcile_level([*measurements, noisy_total], solver="fast", **kwargs)
    with pytest.raises(ValueError, match="rng"):
        reconcile_level(measurements, rng=object(), **kwargs)
