"""Public bounds on node marginals (``QueryBound``): zeros remove cells, lower and upper bounds bind where the
unbounded fit would break them, and the integer table keeps them exactly."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse as sp

from censusdp.postprocess import UNBOUNDED, QueryBound, QueryMeasurement, ReconciliationError, reconcile_level
from censusdp.postprocess.passes import RoundingMarginal

MARGINAL = sp.csr_matrix(np.array([[1, 1, 0, 0], [0, 0, 1, 1]], dtype=float))  # two types of two cells each


def _fit(noisy: np.ndarray, parent: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    measured = [QueryMeasurement("detailed", sp.identity(4, format="csr"), noisy, Fraction(1)),
                QueryMeasurement("type", MARGINAL, noisy @ MARGINAL.T.toarray(), Fraction(1))]
    result = reconcile_level(measured, n_cells=4, parent_counts=parent[None, :],
                             parent_index=np.zeros(noisy.shape[0], dtype=np.int64),
                             bounds=[QueryBound("type", MARGINAL, lower, upper)])
    return result.counts


@pytest.mark.parametrize("solver_seed", range(5))
def test_bounds_hold_where_the_measurements_disagree(solver_seed: int) -> None:
    rng = np.random.default_rng(solver_seed)
    parent = np.array([30, 20, 6, 4])
    noisy = rng.normal(0, 6, (3, 4)) + parent / 3
    lower = np.array([[0, 3], [0, 0], [0, 2]])  # child 0 holds at least 3 of type 1 (its facilities)
    upper = np.array([[UNBOUNDED, UNBOUNDED], [10, 0], [UNBOUNDED, UNBOUNDED]])  # child 1: no type 1, 10 of type 0
    counts = _fit(noisy, parent, lower, upper)
    answers = counts @ MARGINAL.T.toarray()
    assert np.all(answers >= lower) and np.all(answers <= np.minimum(upper, 10**9))
    assert counts[1, 2:].sum() == 0 and counts[1, :2].sum() <= 10
    assert np.array_equal(counts.sum(axis=0), parent) and counts.min() >= 0


def test_bounds_that_contradict_the_parent_are_refused() -> None:
    parent = np.array([5, 5, 3, 0])
    noisy = np.ones((2, 4))
    upper = np.full((2, 2), UNBOUNDED)
    upper[:, 1] = 0  # nobody of type 1 anywhere, but the parent has 3
    with pytest.raises(ReconciliationError, match="bound"):
        _fit(noisy, parent, np.zeros((2, 2), dtype=np.int64), upper)


def test_a_marginal_rounded_first_never_breaks_the_bounds() -> None:
    """Cells a (households) and b (group quarters); children 0 and 1 may hold only b, 2 and 3 only a; the parent has
    one of each, and the measurements put half a person in every child.  Rounding the children's totals first
    (a marginal fixed before the cells) may give the one-person totals to children 0 and 1, where only one person
    can live: the cells are then rounded under the bounds without that marginal, never a failed release.  (Here the
    upper bounds of 0 remove cells, as structural zeros would.)"""
    total = sp.csr_matrix(np.ones((1, 2)))
    cell = sp.identity(2, format="csr")
    noisy = np.array([[0.0, 0.5], [0.0, 0.5], [0.5, 0.0], [0.5, 0.0]])
    measured = [QueryMeasurement("detailed", cell, noisy, Fraction(1)),
                QueryMeasurement("total", total, noisy.sum(axis=1, keepdims=True), Fraction(1))]
    upper = np.array([[0, UNBOUNDED], [0, UNBOUNDED], [UNBOUNDED, 0], [UNBOUNDED, 0]])
    result = reconcile_level(measured, n_cells=2, parent_counts=np.array([[1, 1]]),
                             parent_index=np.zeros(4, dtype=np.int64), solver="cvxpy",
                             rounding=[RoundingMarginal("total", total)],
                             bounds=[QueryBound("detailed", cell, np.zeros((4, 2), dtype=np.int64), upper)])
    counts = result.counts
    assert np.array_equal(counts.sum(axis=0), [1, 1]) and counts.min() >= 0
    assert counts[:2, 0].sum() == 0 and counts[2:, 1].sum() == 0  # a only in 2 and 3, b only in 0 and 1
