"""Multi-pass solves (``postprocess.passes``): least squares in ordered passes, proven against cvxpy written out by
hand, and the rounder that fixes marginals (total population first) before the cells."""

from __future__ import annotations

from fractions import Fraction

import cvxpy as cp
import numpy as np
import pytest
import scipy.sparse as sp

from censusdp.postprocess import QueryInvariant, QueryMeasurement, reconcile_level
from censusdp.postprocess.layout import plan_blocks
from censusdp.postprocess.passes import RoundingMarginal, check_marginal
from censusdp.postprocess.problem import validate
from censusdp.postprocess.reconcile import solve_batch

N_CELLS = 6  # two attributes: a (2 values) x b (3 values), C order
ONES = sp.csr_matrix(np.ones((1, N_CELLS)))
A_MARGINAL = sp.csr_matrix(np.kron(np.eye(2), np.ones((1, 3))))  # keeps a
B_MARGINAL = sp.csr_matrix(np.kron(np.ones((1, 2)), np.eye(3)))  # keeps b
IDENTITY = sp.identity(N_CELLS, format="csr")


def problem(seed: int, parents: int = 3, noise: int = 6) -> dict:
    """Parents with 2-4 children each: true tables, the parents' counts and noisy total / a / detailed answers."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(2, 5, size=parents)
    parent_index = np.repeat(np.arange(parents), sizes)
    true = rng.integers(0, 5, size=(parent_index.size, N_CELLS))
    true[rng.random(true.shape) < 0.3] = 0
    parent_counts = np.zeros((parents, N_CELLS), dtype=np.int64)
    np.add.at(parent_counts, parent_index, true)
    measurements = [
        QueryMeasurement("detailed", IDENTITY, true + rng.integers(-noise, noise + 1, true.shape), Fraction(4)),
        QueryMeasurement("total", ONES, true.sum(axis=1, keepdims=True) + rng.integers(-2, 3, (true.shape[0], 1)),
                         Fraction(1)),
        QueryMeasurement("a", A_MARGINAL, (A_MARGINAL @ true.T).T + rng.integers(-3, 4, (true.shape[0], 2)),
                         Fraction(2)),
    ]
    return {"measurements": measurements, "n_cells": N_CELLS, "parent_counts": parent_counts,
            "parent_index": parent_index, "true": true}


def kwargs(p: dict) -> dict:
    return {k: p[k] for k in ("n_cells", "parent_counts", "parent_index")}


def test_a_marginal_must_be_a_partition_of_the_cells() -> None:
    assert check_marginal(RoundingMarginal("a", A_MARGINAL), N_CELLS).matrix.shape == (2, N_CELLS)
    with pytest.raises(ValueError, match="exactly one query cell"):
        check_marginal(RoundingMarginal("overlap", sp.vstack([A_MARGINAL, ONES], format="csr")), N_CELLS)
    with pytest.raises(ValueError, match="0/1 matrix"):
        check_marginal(RoundingMarginal("weights", 2 * A_MARGINAL), N_CELLS)


@pytest.mark.parametrize("seed", range(8))
def test_rounding_the_total_first_keeps_every_childs_total_within_one_person_of_its_fit(seed: int) -> None:
    p = problem(seed)
    inputs = validate(p["measurements"], [], structural_zeros=None, **kwargs(p))
    blocks = plan_blocks(inputs)
    totals = np.zeros(inputs.n_nodes)
    for b in range(blocks.n_free.size):
        batch, _, _, solution, _ = solve_batch(inputs, blocks, np.array([b]), ("CLARABEL",))
        np.add.at(totals, batch.nodes[batch.var_node], solution.x)
    result = reconcile_level(p["measurements"], rounding=[RoundingMarginal("total", ONES)], solver="CLARABEL",
                             **kwargs(p))
    published = result.counts.sum(axis=1)
    assert np.all(np.abs(published - totals) < 1 + 1e-6), "the total drifted by the cells' rounding"
    assert np.array_equal(np.bincount(p["parent_index"], weights=published).astype(np.int64),
                          p["parent_counts"].sum(axis=1))
    assert result.report["rounding_marginals"] == ["total"]
    assert all(key.startswith("total:") or not key.count(":") for key in result.report["rounding"])


def test_the_total_drifts_without_the_rounding_pass_on_wide_tables() -> None:
    """The failure the pass prevents: many cells rounded one by one move a child's total by several persons."""
    rng = np.random.default_rng(5)
    children, cells = 2, 400
    x = rng.random((children, cells)) * 0.98 + 0.01
    parent = np.ceil(x.sum(axis=0)).astype(np.int64)[None, :]  # every cell: one increment to give
    x[1] = parent[0] - x[0]  # a point that keeps the sums: child 0 gets the larger remainders by chance only
    measured = [QueryMeasurement("detailed", sp.identity(cells, format="csr"), x, Fraction(1))]
    args = {"n_cells": cells, "parent_counts": parent, "parent_index": np.zeros(children, dtype=np.int64)}
    plain = reconcile_level(measured, solver="CLARABEL", **args).counts.sum(axis=1)
    ones = sp.csr_matrix(np.ones((1, cells)))
    fixed = reconcile_level(measured, solver="CLARABEL", rounding=[RoundingMarginal("total", ones)],
                            **args).counts.sum(axis=1)
    assert np.abs(plain - x.sum(axis=1)).max() > 3
    assert np.abs(fixed - x.sum(axis=1)).max() < 1


def test_an_invariant_the_marginal_cannot_express_skips_that_marginal() -> None:
    p = problem(1)
    true = p["true"]
    a_invariant = QueryInvariant("a", A_MARGINAL, (A_MARGINAL @ true.T).T.astype(np.int64))
    result = reconcile_level(p["measurements"], invariants=[a_invariant], solver="CLARABEL",
                             rounding=[RoundingMarginal("a", A_MARGINAL), RoundingMarginal("b", B_MARGINAL)],
                             **kwargs(p))
    assert np.array_equal((A_MARGINAL @ result.counts.T).T, a_invariant.values)
    methods = result.report["rounding"]
    assert any(key.startswith("b:skipped") for key in methods), methods  # an a row splits every b cell
    assert not any(key.startswith("a:skipped") for key in methods), methods  # a's rows are a's own cells


def by_hand(p: dict, tolerance: float) -> np.ndarray:
    """The two passes written out in cvxpy: total first, then everything with totals kept within ``tolerance``."""
    n, parents = p["parent_index"].size, p["parent_counts"].shape[0]
    x = cp.Variable((n, N_CELLS))
    sums = [cp.sum(x[p["parent_index"] == k], axis=0) == p["parent_counts"][k] for k in range(parents)]
    base = [x >= 0, *sums]
    detailed, total, a = p["measurements"]

    def term(m: QueryMeasurement) -> cp.Expression:
        return cp.sum_squares(x @ m.matrix.toarray().T - m.noisy) / float(m.sigma2)

    cp.Problem(cp.Minimize(term(total)), base).solve(solver="CLARABEL")
    first = x.value.sum(axis=1)
    band = [cp.abs(cp.sum(x, axis=1) - first) <= tolerance]
    cp.Problem(cp.Minimize(term(detailed) + term(a)), base + band).solve(solver="CLARABEL")
    return x.value


@pytest.mark.parametrize("seed", range(5))
def test_two_passes_are_the_problems_written_out_by_hand(seed: int) -> None:
    p = problem(seed, parents=1)
    inputs = validate(p["measurements"], [], structural_zeros=None, **kwargs(p))
    batch, _, _, solution, _ = solve_batch(inputs, plan_blocks(inputs), np.array([0]), ("CLARABEL",),
                                        passes=(("total",), ("detailed", "a")), tolerance=0.1)
    expected = by_hand(p, 0.1)[batch.nodes[batch.var_node], batch.var_cell]
    assert np.allclose(solution.x, expected, atol=2e-4)
    assert [status.split(":")[0] for _, status in solution.attempts] == ["pass 0", "pass 1"]


def test_later_passes_keep_earlier_answers_within_the_tolerance() -> None:
    p = problem(11, parents=2, noise=10)
    inputs = validate(p["measurements"], [], structural_zeros=None, **kwargs(p))
    total_only = validate(p["measurements"][1:2], [], structural_zeros=None, **kwargs(p))  # unique in the totals
    blocks = plan_blocks(inputs)
    for b in range(blocks.n_free.size):
        ids = np.array([b])
        _, _, _, first, _ = solve_batch(total_only, blocks, ids, ("CLARABEL",))
        batch, _, _, both, _ = solve_batch(inputs, blocks, ids, ("CLARABEL",), passes=(("total",), ("detailed", "a")),
                                        tolerance=0.25)
        _, _, _, single, _ = solve_batch(inputs, blocks, ids, ("CLARABEL",))
        node = batch.var_node
        pass0 = np.bincount(node, weights=first.x)
        assert np.all(np.abs(np.bincount(node, weights=both.x) - pass0) <= 0.25 + 1e-5)
        assert not np.allclose(both.x, single.x, atol=1e-3)  # the band binds: not the one-pass point


def test_a_multi_pass_level_is_reconciled_and_rounded_consistently() -> None:
    p = problem(3, parents=4)
    result = reconcile_level(p["measurements"], passes=(("total",), ("a",)), tolerance=0.1,
                             rounding=[RoundingMarginal("total", ONES)], **kwargs(p))
    assert result.report["l2_passes"] == 2 and result.report["path"] == "cvxpy"
    assert np.array_equal(np.bincount(p["parent_index"], weights=result.counts[:, 0], minlength=4),
                          p["parent_counts"][:, 0])
    with pytest.raises(ValueError, match="several passes"):
        reconcile_level(p["measurements"], passes=(("total",), ("a",)), solver="first_order", **kwargs(p))
    with pytest.raises(ValueError, match="tolerance"):
        reconcile_level(p["measurements"], passes=(("total",), ("a",)), tolerance=-1, **kwargs(p))
