"""The tree GLS with recodes (queries that group an attribute's values) against a dense GLS: random small trees,
schemas, recodes (unequal groups, nested and crossing recodes of one attribute, several recoded attributes),
queries, σ² and invariants; estimates and every per-cell variance must agree to ~1e-8."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import censusdp.postprocess.gls_algebra as algebra
from censusdp.postprocess.gls import GlsLevel, solve_gls
from censusdp.postprocess.gls_algebra import QuerySpec, apply_axes
from tests.helpers.gls_problems import SHAPE, make_problem, mini_levels
from tests.helpers.gls_reference import dense_gls, dense_query


def assert_close(actual: np.ndarray, expected: np.ndarray, scale: float) -> None:
    np.testing.assert_allclose(actual, expected, rtol=1e-8, atol=1e-8 * max(1.0, scale))


def check_against_dense(rng: np.random.Generator, depth: int, with_invariants: bool) -> None:
    shape, recodes, g, levels = make_problem(rng, depth, with_invariants)
    result = solve_gls(levels, shape)
    theta, cov = dense_gls(g, levels, shape)
    scale = float(np.abs(theta).max())
    var_scale = float(np.abs(np.diag(cov)).max())
    detailed = QuerySpec(tuple(range(len(shape))))
    specs = {detailed, QuerySpec(())}
    specs |= {q.spec for level in levels for q in level.queries}
    specs |= {v.spec for level in levels for v in level.invariants}
    specs |= {QuerySpec((a,), (grouping,)) for spec in set(specs) for a, grouping in zip(spec.axes, spec.groups,
                                                                                        strict=True) if grouping}
    for i, gl in enumerate(g):
        estimate, variance = dense_query(gl, theta, cov, shape, detailed.axes)
        assert_close(result.estimates[i], estimate, scale)
        assert_close(result.variance(i), variance, var_scale)
        for spec in specs:
            estimate, variance = dense_query(gl, theta, cov, shape, spec.axes, spec.groups)
            assert_close(result.estimate(i, spec), estimate, scale)
            assert_close(result.variance(i, spec), variance, var_scale)
        for invariant in levels[i].invariants:
            assert_close(result.estimate(i, invariant.spec), invariant.values, scale)
            assert_close(result.variance(i, invariant.spec), 0, var_scale)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), depth=st.integers(2, 3), with_invariants=st.booleans())
def test_tree_gls_with_recodes_matches_dense_gls(seed: int, depth: int, with_invariants: bool) -> None:
    check_against_dense(np.random.default_rng(seed), depth, with_invariants)  # test-only


@pytest.mark.parametrize("seed", range(6))
def test_single_level_and_deep_trees(seed: int) -> None:
    check_against_dense(np.random.default_rng(100 + seed), depth=1 + 3 * (seed % 2), with_invariants=seed >= 2)


@pytest.mark.parametrize("seed", range(4))
def test_axes_rotated_one_by_one_give_the_same_result(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(algebra, "MERGE", 1)  # no merged Kronecker factors: one pass per axis
    check_against_dense(np.random.default_rng(200 + seed), depth=3, with_invariants=seed % 2 == 1)


@pytest.mark.parametrize("shape", [(8, 2, 2, 63), (3, 30, 4, 5), (70, 1, 2), (1, 1)])
def test_apply_axes_equals_one_matrix_per_axis(shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(len(shape))  # test-only
    cube = rng.normal(size=(3, *shape))
    matrices = [rng.normal(size=(int(rng.integers(1, n + 2)), n)) for n in shape]
    expected = cube
    for a, m in enumerate(matrices):
        expected = np.moveaxis(np.tensordot(expected, m, axes=([1 + a], [1])), -1, 1 + a)
    np.testing.assert_allclose(apply_axes(cube, matrices), expected, rtol=1e-10, atol=1e-10)


def test_per_cell_variances_differ_by_group_and_query_variance_says_so() -> None:
    g, levels = mini_levels()
    result = solve_gls(levels, SHAPE)
    theta, cov = dense_gls(g, levels, SHAPE)
    by_cell = result.variance(2, QuerySpec((0,)))
    np.testing.assert_allclose(by_cell, dense_query(g[2], theta, cov, SHAPE, (0,))[1], rtol=1e-8)
    assert not np.allclose(by_cell[:, 0], by_cell[:, 1])  # a household cell and an institutional one
    np.testing.assert_allclose(by_cell[:, 1], by_cell[:, 4])  # two values of one group
    with pytest.raises(ValueError, match="different variances"):
        result.query_variance(2, (0,))
    plain = result.query_variance(2, (1,))  # hhgq summed out: one variance per node
    np.testing.assert_allclose(plain, dense_query(g[2], theta, cov, SHAPE, (1,))[1][:, 0], rtol=1e-8)
    np.testing.assert_allclose(result.query_variance(0, ()), 0, atol=1e-9)  # the invariant total
    with pytest.raises(ValueError, match="not a coarsening"):
        result.variance(1, QuerySpec((0,), ((0, 0, 1, 1, 1, 1, 1, 1),)))


def test_an_invariant_below_a_free_level_is_refused() -> None:
    _, levels = mini_levels(invariant_levels=(1,))
    solve_gls(levels, SHAPE)  # the root's hhinstlevels invariant fixes its total too: nested, fine
    levels[0] = GlsLevel(levels[0].parent, levels[0].queries, ())
    with pytest.raises(ValueError, match="every level above"):
        solve_gls(levels, SHAPE)


def test_a_recode_alone_at_the_lowest_level_is_not_identifiable() -> None:
    _, levels = mini_levels(with_total=False)
    lowest = levels[-1]
    coarse = [q for q in lowest.queries if q.axes != (0, 1)]
    levels[-1] = GlsLevel(lowest.parent, coarse, lowest.invariants)
    with pytest.raises(ValueError, match="not identifiable"):
        solve_gls(levels, SHAPE)
