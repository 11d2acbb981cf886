"""Rounding with crossing invariants (not totally unimodular): always a feasible table, or a clean failure."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import milp

import censusdp.postprocess.rounding as rounding
from censusdp.postprocess import QueryInvariant, QueryMeasurement, ReconciliationError, reconcile_level

ROWS = sp.csr_matrix(np.array([[1, 1, 0, 0], [0, 0, 1, 1]], dtype=float))  # a 2 x 2 grid of cells
COLS = sp.csr_matrix(np.array([[1, 0, 1, 0], [0, 1, 0, 1]], dtype=float))
CHILDREN = 3  # children x rows x columns: a 3-index transportation problem


def crossing_level(seed: int):
    rng = np.random.default_rng(seed)
    true = rng.integers(0, 2, size=(CHILDREN, 4)) + (rng.random((CHILDREN, 4)) < 0.2)  # parents <= 6, mostly <= 3
    parent = true.sum(axis=0, keepdims=True)
    noisy = true + rng.integers(-2, 3, size=true.shape)
    measurements = [QueryMeasurement("detailed", sp.identity(4, format="csr"), noisy, Fraction(1))]
    invariants = [
        QueryInvariant("rows", ROWS, (ROWS @ true.T).T.astype(np.int64)),
        QueryInvariant("cols", COLS, (COLS @ true.T).T.astype(np.int64)),
    ]
    return measurements, parent, invariants


def feasible_tables(parent: np.ndarray, invariants) -> np.ndarray:
    """Every integer table (CHILDREN, 4) meeting all constraints, by enumeration of the first children."""
    options = [np.array(t) for t in itertools.product(*[range(v + 1) for v in parent[0]])]
    tables = []
    for first in itertools.product(options, repeat=CHILDREN - 1):
        last = parent[0] - np.sum(first, axis=0)
        if last.min() >= 0:
            tables.append(np.vstack([*first, last]))
    tables = np.array(tables)
    ok = np.ones(len(tables), dtype=bool)
    for inv in invariants:
        answers = np.einsum("qc,tnc->tnq", inv.matrix.toarray(), tables)
        ok &= np.all(answers == inv.values, axis=(1, 2))
    return tables[ok]


def reconcile_crossing(seed: int):
    measurements, parent, invariants = crossing_level(seed)
    result = reconcile_level(
        measurements,
        n_cells=4,
        parent_counts=parent,
        parent_index=np.zeros(CHILDREN, dtype=np.int64),
        invariants=invariants,
    )
    return result, parent, invariants


@pytest.mark.parametrize("seed", range(6))
def test_crossing_invariants_give_a_feasible_table(seed):
    result, parent, invariants = reconcile_crossing(seed)
    counts = result.counts
    np.testing.assert_array_equal(counts.sum(axis=0), parent[0])
    for inv in invariants:
        np.testing.assert_array_equal((inv.matrix @ counts.T).T, inv.values)
    assert set(result.report["rounding"]) <= {"binary_lp", "binary_milp", "integer_milp"}
    tables = feasible_tables(parent, invariants)
    assert any(np.array_equal(counts, t) for t in tables)


def test_a_time_limited_milp_keeps_its_checked_incumbent(monkeypatch):
    """HiGHS stopped by its time limit (status 1) with an incumbent: accepted after the exact check."""

    def time_limited(c, **kwargs):
        result = milp(c, **kwargs)
        if np.any(kwargs["integrality"]):
            result.status = 1
        return result

    def fractional_lp(*args, **kwargs):
        return None, ""

    monkeypatch.setattr(rounding, "milp", time_limited)
    monkeypatch.setattr(rounding, "_binary", fractional_lp)  # straight to the integer MILP
    result, parent, _ = reconcile_crossing(0)
    assert result.report["rounding"] == {"integer_milp_incumbent": 1}
    np.testing.assert_array_equal(result.counts.sum(axis=0), parent[0])


def test_no_incumbent_is_a_clean_failure(monkeypatch):
    def nothing(c, **kwargs):
        result = milp(c, **kwargs)
        result.status, result.x = 1, None
        return result

    monkeypatch.setattr(rounding, "milp", nothing)
    monkeypatch.setattr(rounding, "_simplex_vertex", lambda *args: None)  # no LP vertex either
    with pytest.raises(ReconciliationError, match="integer rounding failed"):
        reconcile_crossing(1)


def test_a_fractional_lp_vertex_goes_to_the_binary_milp():
    """3 children x (3 x 3 grid) with row and column invariants: seed 26 gives a fractional LP vertex."""
    rows = sp.csr_matrix(np.kron(np.eye(3), np.ones((1, 3))))
    cols = sp.csr_matrix(np.kron(np.ones((1, 3)), np.eye(3)))
    rng = np.random.default_rng(26)
    true = rng.integers(0, 3, size=(3, 9))
    noisy = true + rng.integers(-3, 4, size=true.shape)
    measurements = [
        QueryMeasurement("detailed", sp.identity(9, format="csr"), noisy, Fraction(1)),
        QueryMeasurement("rows", rows, (rows @ true.T).T + rng.integers(-2, 3, (3, 3)), Fraction(1, 3)),
    ]
    invariants = [
        QueryInvariant("rows", rows, (rows @ true.T).T.astype(np.int64)),
        QueryInvariant("cols", cols, (cols @ true.T).T.astype(np.int64)),
    ]
    result = reconcile_level(
        measurements,
        n_cells=9,
        parent_counts=true.sum(axis=0, keepdims=True),
        parent_index=np.zeros(3, dtype=np.int64),
        invariants=invariants,
    )
    assert result.report["rounding"] == {"binary_milp": 1}
    np.testing.assert_array_equal(result.counts.sum(axis=0), true.sum(axis=0))
    for inv in invariants:
        np.testing.assert_array_equal((inv.matrix @ result.counts.T).T, inv.values)
