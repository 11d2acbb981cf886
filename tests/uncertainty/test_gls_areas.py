"""Areas of leaves (postprocess.gls_areas) against the dense GLS: random trees, schemas, recodes, invariants, area
assignments (leaves in no area, empty areas, whole subtrees, all leaves) and variables (0/1 and real weights);
every area's estimate must be the dense θ's sum and its variance aᵀCa of the dense covariance, to ~1e-8."""

from __future__ import annotations

from math import prod

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from censusdp.postprocess.gls import GlsLevel, plan_levels, solve_gls
from censusdp.postprocess.gls_algebra import QuerySpec
from censusdp.postprocess.gls_areas import (
    area_estimates,
    area_terms,
    area_variances,
    mean_variances_of_plans,
)
from tests.helpers.gls_problems import SHAPE as MINI_SHAPE
from tests.helpers.gls_problems import make_problem, mini_levels
from tests.helpers.gls_reference import dense_gls, query_matrix

Assignment = tuple[np.ndarray, int]


def assignments(rng: np.random.Generator, g: list[np.ndarray]) -> list[Assignment]:
    """Random areas with leaves in none and empty areas; one internal node's subtree (others random); all
    leaves in one area (and an empty second one); every leaf its own area."""
    n_leaves = g[-1].shape[1]
    n_areas = int(rng.integers(1, 6))
    found = [(rng.integers(-1, n_areas, size=n_leaves), n_areas)]
    level = int(rng.integers(0, len(g)))
    node = int(rng.integers(0, g[level].shape[0]))
    subtree = np.where(g[level][node] > 0, 0, rng.integers(-1, 3, size=n_leaves))
    subtree[(subtree == 0) & (g[level][node] == 0)] = -1
    found.append((subtree, 3))
    found.append((np.zeros(n_leaves, dtype=np.int64), 2))
    found.append((np.arange(n_leaves), n_leaves))
    return found


def variables(rng: np.random.Generator, cells: int) -> np.ndarray:
    """0/1 unions of cells, real weights, the total and one single cell."""
    single = np.zeros((1, cells))
    single[0, rng.integers(0, cells)] = 1
    return np.vstack([rng.integers(0, 2, size=(3, cells)), rng.normal(size=(2, cells)), np.ones((1, cells)), single])


def dense_areas(theta: np.ndarray, cov: np.ndarray, leaf_area: np.ndarray, n_areas: int, weights: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
    """(estimates, variances) (n_areas, n_vars) of a = 1_A ⊗ f from the dense θ and covariance."""
    member = (leaf_area[None, :] == np.arange(n_areas)[:, None]).astype(float)
    n_leaves, cells = len(leaf_area), weights.shape[1]
    estimates = member @ theta.reshape(n_leaves, cells) @ weights.T
    per_pair = np.einsum("lcmd,vc,vd->vlm", cov.reshape(n_leaves, cells, n_leaves, cells), weights, weights)
    return estimates, np.einsum("al,vlm,am->av", member, per_pair, member)


def check_against_dense(rng: np.random.Generator, g: list[np.ndarray], levels: list[GlsLevel],
                        shape: tuple[int, ...]) -> None:
    result = solve_gls(levels, shape)
    planned = plan_levels(levels, shape)
    theta, cov = dense_gls(g, levels, shape)
    weights = variables(rng, prod(shape))
    for leaf_area, n_areas in assignments(rng, g):
        expected_estimates, expected = dense_areas(theta, cov, leaf_area, n_areas, weights)
        variances = area_variances(area_terms(planned, shape, leaf_area, n_areas), weights)
        np.testing.assert_allclose(variances, expected, rtol=1e-8, atol=1e-9 * max(1.0, float(expected.max())))
        estimates = area_estimates(result.stream, leaf_area, n_areas, weights)
        np.testing.assert_allclose(estimates, expected_estimates, rtol=1e-8,
                                   atol=1e-8 * max(1.0, float(np.abs(theta).max())))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), depth=st.integers(1, 4), with_invariants=st.booleans())
def test_area_variances_and_estimates_match_dense_gls(seed: int, depth: int, with_invariants: bool) -> None:
    rng = np.random.default_rng(seed)  # test-only
    shape, _, g, levels = make_problem(rng, depth, with_invariants)
    check_against_dense(rng, g, levels, shape)


@pytest.mark.parametrize("seed", range(4))
def test_a_forest_of_several_roots(seed: int) -> None:
    """The top level may have several nodes: an area spanning two roots adds two independent parts."""
    rng = np.random.default_rng(300 + seed)  # test-only
    shape, _, g, levels = make_problem(rng, 3, with_invariants=seed % 2 == 1)
    top = levels[1]
    levels = [GlsLevel(np.zeros(0, dtype=np.int64), top.queries, top.invariants), *levels[2:]]
    check_against_dense(rng, g[1:], levels, shape)


def test_the_pl94_recode_with_invariants_on_a_recoded_attribute() -> None:
    g, levels = mini_levels()  # hhgq grouped by hhinstlevels, the total and the grouping invariant at the root
    check_against_dense(np.random.default_rng(5), g, levels, MINI_SHAPE)  # test-only


@pytest.mark.parametrize("seed", range(6))
def test_areas_equal_to_subtrees_give_each_node_s_own_variance(seed: int) -> None:
    """Every node of every level as an area (its subtree's leaves): the total, and every cell of each measured
    query (recodes included), must have the variance and estimate the per-node result gives that node."""
    rng = np.random.default_rng(400 + seed)  # test-only
    shape, _, g, levels = make_problem(rng, 2 + seed % 3, with_invariants=seed % 2 == 0)
    planned = plan_levels(levels, shape)
    result = solve_gls(levels, shape)
    specs = {QuerySpec(())} | {q.spec for level in levels for q in level.queries}
    for i, gl in enumerate(g):
        leaf_area = np.argmax(gl, axis=0)  # each leaf's ancestor at level i
        terms = area_terms(planned, shape, leaf_area, gl.shape[0])
        for spec in specs:
            weights = query_matrix(shape, spec.axes, spec.groups)
            variance = result.variance(i, spec)
            np.testing.assert_allclose(area_variances(terms, weights), variance, rtol=1e-8,
                                       atol=1e-9 * max(1.0, float(variance.max())))
            for leaves_per_chunk in (1, 3, 1 << 16):  # the report's mean, chunk by chunk of areas: the same
                np.testing.assert_allclose(
                    mean_variances_of_plans(planned, shape, [(leaf_area, gl.shape[0])], weights, leaves_per_chunk)[0],
                    variance.mean(axis=0), rtol=1e-8, atol=1e-9 * max(1.0, float(variance.max())))
            np.testing.assert_allclose(area_estimates(result.stream, leaf_area, gl.shape[0], weights),
                                       result.estimate(i, spec), rtol=1e-8, atol=1e-8)
    # every level's plan at once (the tree's covariances formed once): each plan's own mean, a plan of no area 0
    plans = [(np.argmax(gl, axis=0), gl.shape[0]) for gl in g] + [(np.full(g[-1].shape[1], -1), 0)]
    weights = query_matrix(shape, (), ())
    together = mean_variances_of_plans(planned, shape, plans, weights, 2)
    assert together.shape == (len(plans), 1) and not together[-1].any()
    for plan, row in zip(plans[:-1], together, strict=False):
        np.testing.assert_allclose(row, mean_variances_of_plans(planned, shape, [plan], weights)[0], rtol=1e-10,
                                   atol=1e-9 * max(1.0, float(together.max())))


def test_cross_leaf_covariances_count() -> None:
    """The leaves of an area are correlated (through the sums above them): an area's variance is not the sum
    of its leaves' variances, so the dense comparison above tells a method that drops them apart."""
    rng = np.random.default_rng(9)  # test-only
    shape, _, g, levels = make_problem(rng, 3, with_invariants=False)
    planned = plan_levels(levels, shape)
    n_leaves = g[-1].shape[1]
    weights = variables(rng, prod(shape))
    whole = area_variances(area_terms(planned, shape, np.zeros(n_leaves, dtype=np.int64), 1), weights)[0]
    alone = area_variances(area_terms(planned, shape, np.arange(n_leaves), n_leaves), weights).sum(axis=0)
    assert n_leaves >= 2 and np.all(np.abs(whole - alone) > 1e-3 * alone)


def test_no_areas_and_leaves_in_none() -> None:
    shape, _, g, levels = make_problem(np.random.default_rng(11), 2, with_invariants=True)  # test-only
    planned = plan_levels(levels, shape)
    n_leaves, cells = g[-1].shape[1], prod(shape)
    result = solve_gls(levels, shape)
    nowhere = np.full(n_leaves, -1)
    assert area_variances(area_terms(planned, shape, nowhere, 0), np.ones((2, cells))).shape == (0, 2)
    assert area_estimates(result.stream, nowhere, 0, np.ones((2, cells))).shape == (0, 2)
    np.testing.assert_array_equal(area_variances(area_terms(planned, shape, nowhere, 3), np.ones((2, cells))), 0)
    assert area_variances(area_terms(planned, shape, nowhere, 3), np.ones((0, cells))).shape == (3, 0)


def test_malformed_inputs_are_refused() -> None:
    shape, _, g, levels = make_problem(np.random.default_rng(12), 2, with_invariants=False)  # test-only
    planned = plan_levels(levels, shape)
    n_leaves, cells = g[-1].shape[1], prod(shape)
    result = solve_gls(levels, shape)
    good = np.zeros(n_leaves, dtype=np.int64)
    for leaf_area, n_areas, match in [(good[:-1], 1, "one entry per leaf"), (good[None], 1, "one entry per leaf"),
                                      (good.astype(float), 1, "integers"), (good - 2, 1, r"\[0, n_areas\)"),
                                      (good + 1, 1, r"\[0, n_areas\)"), (good, -1, "non-negative"),
                                      (good, 1.0, "non-negative")]:
        with pytest.raises(ValueError, match=match):
            area_terms(planned, shape, leaf_area, n_areas)
        with pytest.raises(ValueError, match=match):
            area_estimates(result.stream, leaf_area, n_areas, np.ones((1, cells)))
    terms = area_terms(planned, shape, good, 1)
    for weights, match in [(np.ones(cells), "n_vars"), (np.ones((1, cells + 1)), "n_vars"),
                           (np.full((1, cells), np.nan), "finite")]:
        with pytest.raises(ValueError, match=match):
            area_variances(terms, weights)
        with pytest.raises(ValueError, match=match):
            area_estimates(result.stream, good, 1, weights)
