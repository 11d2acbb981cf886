"""The tree GLS (postprocess.gls) against a dense generalised least squares on small random trees."""

from __future__ import annotations

from math import prod

import numpy as np
import pytest

from censusdp.postprocess.gls import GlsInvariant, GlsLevel, GlsQuery, solve_gls
from censusdp.postprocess.gls_algebra import QuerySpec, answer
from tests.helpers.gls_reference import aggregation, dense_gls, query_matrix, random_tree

SHAPE = (2, 3, 2)
QUERY_POOL = [(), (0,), (2, 1), (1, 0), (0, 1, 2), (2,)]


def random_problem(seed: int, depth: int, with_invariants: bool) -> tuple[list, list[GlsLevel]]:
    """A random tree of ``depth`` levels, its aggregation matrices and noisy measurements of random counts."""
    rng = np.random.default_rng(seed)  # test-only
    parents = random_tree(rng, depth)
    g = aggregation(parents)
    truth = rng.integers(0, 30, size=g[-1].shape[1] * prod(SHAPE)).astype(float)
    levels = []
    for i, parent in enumerate(parents):
        node_truth = (g[i] @ truth.reshape(len(parents[-1]) if len(parents) > 1 else 1, -1))
        picks = [] if (0 < i < len(parents) - 1 and rng.random() < 0.3) else list(
            rng.choice(len(QUERY_POOL), size=rng.integers(1, 4), replace=False))
        axes_list = [QUERY_POOL[p] for p in picks]
        if i == len(parents) - 1 and (0, 1, 2) not in axes_list:
            axes_list.append((0, 1, 2))
        queries = [GlsQuery(axes, float(rng.uniform(0.3, 20)),
                            answer(node_truth, SHAPE, QuerySpec(axes)) + rng.normal(0, 3, (len(node_truth), prod(
                                SHAPE[a] for a in axes)))) for axes in axes_list]
        invariants = []
        if with_invariants and i <= 1:
            invariants.append(GlsInvariant((), answer(node_truth, SHAPE, QuerySpec(()))))
            if i == 0:
                invariants.append(GlsInvariant((1,), answer(node_truth, SHAPE, QuerySpec((1,)))))
        levels.append(GlsLevel(parent=parent, queries=queries, invariants=invariants))
    return g, levels


@pytest.mark.parametrize("seed", range(8))
def test_tree_gls_matches_dense_gls(seed: int) -> None:
    g, levels = random_problem(seed, 2 + seed % 3, with_invariants=seed % 2 == 1)
    result = solve_gls(levels, SHAPE)
    theta, cov = dense_gls(g, levels, SHAPE)
    for i, gl in enumerate(g):
        expected = (np.kron(gl, np.eye(prod(SHAPE))) @ theta).reshape(gl.shape[0], -1)
        np.testing.assert_allclose(result.estimates[i], expected, atol=1e-9, rtol=1e-9)
        for axes in [(), (1,), (2, 0), (0, 1, 2)]:
            m = np.kron(gl, query_matrix(SHAPE, axes))
            dense_var = np.einsum("ij,jk,ik->i", m, cov, m).reshape(gl.shape[0], -1)
            tree_var = result.query_variance(i, axes)
            np.testing.assert_allclose(dense_var, np.repeat(tree_var[:, None], dense_var.shape[1], 1),
                                       atol=1e-9, rtol=1e-9)
            np.testing.assert_allclose(result.estimate(i, QuerySpec(axes)), answer(expected, SHAPE, QuerySpec(axes)),
                                       atol=1e-9)


def test_invariants_hold_exactly_and_have_zero_variance() -> None:
    _, levels = random_problem(3, 3, with_invariants=True)
    result = solve_gls(levels, SHAPE)
    for i in (0, 1):
        np.testing.assert_allclose(result.estimate(i, QuerySpec(())), levels[i].invariants[0].values, atol=1e-9)
        np.testing.assert_allclose(result.query_variance(i, ()), 0, atol=1e-12)


def test_unidentifiable_lowest_level_is_refused() -> None:
    parent = [np.zeros(0, dtype=np.int64), np.array([0, 0])]
    levels = [GlsLevel(parent[0], [GlsQuery((0, 1, 2), 1.0, np.zeros((1, 12)))]),
              GlsLevel(parent[1], [GlsQuery((), 1.0, np.zeros((2, 1)))])]
    with pytest.raises(ValueError, match="not identifiable"):
        solve_gls(levels, SHAPE)


def test_unmeasured_middle_level_and_malformed_tree() -> None:
    g, levels = random_problem(11, 4, with_invariants=False)
    levels[1] = GlsLevel(parent=levels[1].parent, queries=[])
    levels[2] = GlsLevel(parent=levels[2].parent, queries=[])
    result = solve_gls(levels, SHAPE)
    theta, _ = dense_gls(g, levels, SHAPE)
    np.testing.assert_allclose(result.estimates[1], (g[1] @ theta.reshape(g[1].shape[1], -1)), atol=1e-9)
    orphan = GlsLevel(parent=np.array([0, 2]), queries=[GlsQuery((0, 1, 2), 1.0, np.zeros((2, 12)))])
    with pytest.raises(ValueError, match="parent"):
        solve_gls([GlsLevel(np.zeros(0, dtype=np.int64), [GlsQuery((), 1.0, np.zeros((1, 1)))]), orphan], SHAPE)
