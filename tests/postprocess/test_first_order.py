"""The certified first-order solver against the cvxpy reference on random multi-query problems.

Each random problem: a small schema, the detailed query plus random marginals with random weights, 1-3
parents with 1-5 children, zeros, tiny parents, structural zeros and integer noise (ties).  The first-order
point must match the reference (Clarabel, tight tolerances) within 1e-6 in relative objective, and both
rounded tables must have the same L1 distance to the reference point (equal rounding objective; ties may
pick different but equally good tables).
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse as sp

from censusdp.postprocess import QueryInvariant, QueryMeasurement, first_order, reconcile_level
from censusdp.postprocess.layout import build_batch, plan_batches, plan_blocks
from censusdp.postprocess.least_squares import SOLVER_OPTIONS, Equalities
from censusdp.postprocess.least_squares import solve as cvxpy_solve
from censusdp.postprocess.problem import validate
from censusdp.postprocess.reconcile import _terms
from censusdp.postprocess.rounding import round_batch

SHAPES = [(4,), (2, 3), (3, 2, 2), (2, 2, 2), (5, 3)]
TIGHT = {"CLARABEL": {**SOLVER_OPTIONS["CLARABEL"], "tol_gap_abs": 1e-12, "tol_gap_rel": 1e-12, "tol_feas": 1e-12}}


def marginal(shape: tuple[int, ...], keep: tuple[int, ...]) -> sp.csr_matrix:
    n = int(np.prod(shape))
    coords = np.indices(shape).reshape(len(shape), -1)
    label, size = np.zeros(n, dtype=np.int64), 1
    for axis in keep:
        label, size = label * shape[axis] + coords[axis], size * shape[axis]
    return sp.csr_matrix((np.ones(n), (label, np.arange(n))), shape=(size, n))


def random_problem(rng: np.random.Generator, n_parents: int | None = None, shape: tuple[int, ...] | None = None
                   ) -> dict:
    shape = SHAPES[rng.integers(len(SHAPES))] if shape is None else shape
    n = int(np.prod(shape))
    zeros = rng.random(n) < 0.15
    n_parents = int(rng.integers(1, 4)) if n_parents is None else n_parents
    sizes = rng.integers(1, 6, n_parents)
    scale = np.array([1, 3, 30, 300])[rng.integers(4, size=(n_parents, 1))]  # tiny to large parents
    parents = rng.poisson(scale * rng.random(n), size=(n_parents, n)) * (rng.random((n_parents, n)) > 0.2)
    parents[:, zeros] = 0
    index = np.repeat(np.arange(n_parents), sizes)
    truth = np.zeros((index.size, n), dtype=np.int64)
    for parent in range(n_parents):
        rows = np.flatnonzero(index == parent)
        for cell in range(n):
            truth[rows, cell] = rng.multinomial(parents[parent, cell], np.ones(rows.size) / rows.size)
    subsets = [keep for r in range(len(shape)) for keep in itertools.combinations(range(len(shape)), r)]
    chosen = [subsets[i] for i in np.flatnonzero(rng.random(len(subsets)) < 0.6)]
    measurements = []
    for keep in [tuple(range(len(shape))), *chosen]:
        matrix = marginal(shape, keep)
        sigma2 = Fraction(int(rng.integers(1, 60)), int(rng.integers(1, 8)))
        answers = truth @ matrix.T.toarray()
        spread = max(1, int(np.sqrt(float(sigma2))))
        noisy = answers + rng.integers(-3 * spread, 3 * spread + 1, answers.shape)  # integers: ties
        measurements.append(QueryMeasurement(f"q{keep}", matrix, noisy, sigma2))
    return {
        "measurements": measurements,
        "n_cells": n,
        "parent_counts": parents,
        "parent_index": index,
        "structural_zeros": zeros,
    }


def objective(terms, x: np.ndarray) -> float:
    return float(sum(t.weight * np.sum((t.matrix @ x - t.target) ** 2) for t in terms))


def compare(problem: dict) -> int:
    """Compare both solvers on every batch of the problem; returns the number of batches compared."""
    inputs = validate(problem.pop("measurements"), (), **problem)
    blocks = plan_blocks(inputs)
    compared = 0
    for block_ids in plan_batches(blocks, inputs.n_cells):
        batch = build_batch(inputs, blocks, block_ids)
        terms = [term for _, term in _terms(inputs, batch)]
        sums = Equalities(batch.sum_matrix, batch.sum_rhs, np.ones(batch.sum_rhs.size, dtype=bool))
        reference = cvxpy_solve(terms, [sums], batch.n_vars, ("CLARABEL",))
        assert reference.x is not None
        x, info = first_order.solve(terms, batch)
        assert x is not None, info
        assert x.min() >= 0.0
        np.testing.assert_allclose(batch.sum_matrix @ x, batch.sum_rhs, rtol=0, atol=1e-9 * max(1, batch.sum_rhs.max()))
        f_first, f_ref = objective(terms, x), objective(terms, reference.x)
        assert f_first - f_ref <= 1e-6 * max(f_ref, 1.0), (f_first, f_ref)
        assert f_ref - f_first <= 1e-6 * max(f_ref, 1.0), (f_first, f_ref)  # the reference is near-exact too
        empty = sp.csr_matrix((0, batch.n_vars))
        rounded_first, _ = round_batch(batch, x, empty, np.zeros(0, dtype=np.int64))
        rounded_ref, _ = round_batch(batch, reference.x, empty, np.zeros(0, dtype=np.int64))
        np.testing.assert_array_equal(batch.sum_matrix @ rounded_first, batch.sum_rhs)
        l1_first = np.abs(rounded_first - reference.x).sum()
        l1_ref = np.abs(rounded_ref - reference.x).sum()
        assert abs(l1_first - l1_ref) <= 1e-4 * max(1.0, batch.n_vars), (l1_first, l1_ref)
        compared += 1
    return compared


@pytest.fixture
def tight_clarabel(monkeypatch):
    monkeypatch.setitem(SOLVER_OPTIONS, "CLARABEL", TIGHT["CLARABEL"])


@pytest.mark.parametrize("seed", range(9))
def test_agrees_with_cvxpy_on_random_multi_query_problems(seed, tight_clarabel):
    rng = np.random.default_rng(1000 + seed)
    for _ in range(30):  # 9 x 30 = 270 random problems (234 with a batch to solve)
        compare(random_problem(rng))


def test_auto_uses_it_for_multi_query_levels_and_cvxpy_stays_selectable():
    problem = random_problem(np.random.default_rng(7))
    problem["parent_counts"] = problem["parent_counts"] + 5 * ~problem["structural_zeros"]
    problem["parent_counts"][:, problem["structural_zeros"]] = 0
    index = problem["parent_index"]
    problem["parent_index"] = np.concatenate([index, index])  # at least two children everywhere
    problem["measurements"] = [
        QueryMeasurement(m.name, m.matrix, np.vstack([m.noisy, m.noisy]), m.sigma2) for m in problem["measurements"]
    ]
    auto = reconcile_level(**problem)
    first = reconcile_level(**problem, solver="first_order")
    forced = reconcile_level(**problem, solver="cvxpy")
    assert first.report["path"] == "first_order" and forced.report["path"] == "cvxpy"
    assert first.report["solver_status"] == {"first_order:optimal": first.report["problems"]}
    # small blocks too: "auto" takes it wherever it applies, cvxpy only as its fallback
    assert auto.report["path"] == "first_order"
    assert auto.report["solver_status"] == first.report["solver_status"]
    np.testing.assert_array_equal(auto.counts, first.counts)
    for result in (auto, first, forced):
        sums = np.zeros_like(problem["parent_counts"])
        np.add.at(sums, problem["parent_index"], result.counts)
        np.testing.assert_array_equal(sums, problem["parent_counts"])
        assert result.counts.min() >= 0


def test_auto_takes_it_on_large_blocks():
    problem = random_problem(np.random.default_rng(5))
    problem["parent_counts"] = problem["parent_counts"] + 5 * ~problem["structural_zeros"]
    problem["parent_counts"][:, problem["structural_zeros"]] = 0
    problem["parent_index"] = np.zeros(2, dtype=np.int64)
    problem["parent_counts"] = problem["parent_counts"][:1]
    problem["measurements"] = [
        QueryMeasurement(m.name, m.matrix, np.vstack([m.noisy[:1]] * 2), m.sigma2) for m in problem["measurements"]
    ]
    result = reconcile_level(**problem)
    assert result.report["path"] == "first_order"
    assert result.report["solver_status"] == {"first_order:optimal": 1}
    np.testing.assert_array_equal(result.counts.sum(axis=0), problem["parent_counts"][0])


def test_invariants_or_no_detailed_query_keep_cvxpy():
    problem = random_problem(np.random.default_rng(3))
    n = problem["n_cells"]
    ones = sp.csr_matrix(np.ones((1, n)))
    children = problem["parent_index"].size
    with_invariant = dict(problem)
    truth_totals = np.zeros((children, 1), dtype=np.int64)
    parent_totals = problem["parent_counts"].sum(axis=1)
    for parent in np.unique(problem["parent_index"]):  # give the whole parent total to the first child
        truth_totals[np.flatnonzero(problem["parent_index"] == parent)[0]] = parent_totals[parent]
    with_invariant["invariants"] = [QueryInvariant("total", ones, truth_totals)]
    assert reconcile_level(**with_invariant).report["path"] == "cvxpy"
    no_detailed = dict(problem)
    no_detailed["measurements"] = [m for m in problem["measurements"] if m.matrix.shape[0] != n] or [
        QueryMeasurement("total", ones, np.zeros((children, 1)), Fraction(1))
    ]
    assert reconcile_level(**no_detailed).report["path"] == "cvxpy"
    with pytest.raises(ValueError, match="first_order"):
        reconcile_level(**no_detailed, solver="first_order")


def test_not_converged_falls_back_to_cvxpy(monkeypatch):
    monkeypatch.setattr(first_order, "MAX_ITERATIONS", 1)
    monkeypatch.setattr(first_order, "_needs_too_many", lambda *_: False)  # tried, and not certified in time
    problem = random_problem(np.random.default_rng(11))
    problem["parent_counts"] = problem["parent_counts"] + 50 * ~problem["structural_zeros"]
    problem["parent_counts"][:, problem["structural_zeros"]] = 0
    problem["parent_index"] = np.array([0, 0, 0])
    problem["parent_counts"] = problem["parent_counts"][:1]
    problem["measurements"] = [
        QueryMeasurement(m.name, m.matrix, np.vstack([m.noisy[:1]] * 3), m.sigma2) for m in problem["measurements"]
    ]
    result = reconcile_level(**problem, solver="first_order")
    assert result.report["path"] == "first_order"
    assert result.report["fallbacks"] == 1
    assert "first_order:limit" in result.report["solver_status"]
    np.testing.assert_array_equal(result.counts.sum(axis=0), problem["parent_counts"][0])


def test_blocks_are_frozen_as_they_converge_and_the_batch_still_matches_cvxpy(tight_clarabel):
    """Many parents of very different sizes in one batch: the easy blocks are certified and compacted away early
    (``compactions``), and the batch's point still matches the reference as tightly as the unfrozen solver's."""
    rng = np.random.default_rng(77)
    compacted = 0
    for _ in range(4):
        # cells enough that blocks from the detailed targets' start still take several checks, at different ones
        problem = random_problem(rng, n_parents=40, shape=(4, 3, 2))
        inputs = validate(problem["measurements"], (), **{k: v for k, v in problem.items() if k != "measurements"})
        blocks = plan_blocks(inputs)
        for block_ids in plan_batches(blocks, inputs.n_cells):
            batch = build_batch(inputs, blocks, block_ids)
            _, info = first_order.solve([term for _, term in _terms(inputs, batch)], batch)
            compacted += info["compactions"]
        assert compare(problem) >= 1
    assert compacted >= 2


def test_a_batch_too_ill_conditioned_to_certify_goes_to_cvxpy_at_once():
    problem = random_problem(np.random.default_rng(11), n_parents=2, shape=(5, 3))
    problem["parent_index"] = np.repeat([0, 1], 3)
    problem["parent_counts"] = problem["parent_counts"][:2] + 5 * ~problem["structural_zeros"]
    problem["parent_counts"][:, problem["structural_zeros"]] = 0
    detailed, total = marginal((5, 3), (0, 1)), marginal((5, 3), ())
    noisy = np.arange(6 * 15).reshape(6, 15) % 7
    problem["measurements"] = [QueryMeasurement("detailed", detailed, noisy, Fraction(10**12)),  # a tiny weight
                               QueryMeasurement("total", total, noisy.sum(axis=1, keepdims=True), Fraction(1))]
    result = reconcile_level(**problem)
    assert result.report["solver_status"] == {"first_order:ill_conditioned": 1, "CLARABEL:optimal": 1}
    sums = np.zeros_like(problem["parent_counts"])
    np.add.at(sums, problem["parent_index"], result.counts)
    np.testing.assert_array_equal(sums, problem["parent_counts"])
    # the same problem with the weights of the presets' order is certified by the first-order solver
    problem["measurements"][0] = QueryMeasurement("detailed", detailed, noisy, Fraction(7))
    assert reconcile_level(**problem).report["solver_status"] == {"first_order:optimal": 1}
