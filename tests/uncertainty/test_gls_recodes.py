"""The tree GLS with recodes (queries that group an attribute's values) against a dense GLS: random small trees,
schemas, recodes (unequal groups, nested and crossing recodes of one attribute, several recoded attributes),
queries, σ² and invariants; estimates and every per-cell variance must agree to ~1e-8."""

from __future__ import annotations

from math import prod

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import postprocess.gls_algebra as algebra
from postprocess.gls import GlsInvariant, GlsLevel, GlsQuery, solve_gls
from postprocess.gls_algebra import QuerySpec, answer, apply_axes
from tests.helpers.gls_reference import aggregation, dense_gls, dense_query, random_tree

Recodes = dict[int, list[tuple[int, ...]]]


def random_partition(rng: np.random.Generator, n: int, k: int) -> tuple[int, ...]:
    """n values into k non-empty groups, cells numbered 0..k-1, of random (mostly unequal) sizes."""
    labels = np.concatenate([np.arange(k), rng.integers(0, k, size=n - k)])
    return tuple(int(v) for v in rng.permutation(labels))


def random_schema(rng: np.random.Generator) -> tuple[tuple[int, ...], Recodes]:
    """2-3 attributes of 2-5 values (at most 60 cells); 1-2 of them recoded, by one partition, a nested pair
    (a coarsening of the first) or a crossing pair."""
    while True:
        shape = tuple(int(n) for n in rng.integers(2, 6, size=int(rng.integers(2, 4))))
        if prod(shape) <= 60 and max(shape) >= 3:
            break
    candidates = [a for a, n in enumerate(shape) if n >= 3]
    recoded = rng.choice(candidates, size=min(len(candidates), int(rng.integers(1, 3))), replace=False)
    recodes: Recodes = {}
    for a in recoded:
        n = shape[a]
        fine = random_partition(rng, n, int(rng.integers(2, n)))
        recodes[int(a)] = [fine]
        kind = rng.integers(0, 3)
        if kind == 1 and max(fine) >= 2:  # nested: a coarsening of the first
            merge = random_partition(rng, max(fine) + 1, int(rng.integers(2, max(fine) + 1)))
            recodes[int(a)].append(tuple(merge[g] for g in fine))
        elif kind == 2:  # another partition, crossing the first
            recodes[int(a)].append(random_partition(rng, n, int(rng.integers(2, n))))
    return shape, recodes


def random_spec(rng: np.random.Generator, shape: tuple[int, ...], recodes: Recodes) -> QuerySpec:
    axes, groups = [], []
    for a in rng.permutation(len(shape)):
        choice = rng.integers(0, 3)
        if choice == 0:
            continue
        axes.append(int(a))
        options = recodes.get(int(a), [])
        groups.append(options[int(rng.integers(0, len(options)))] if choice == 2 and options else None)
    return QuerySpec(tuple(axes), tuple(groups))


def make_problem(rng: np.random.Generator, depth: int, with_invariants: bool):
    shape, recodes = random_schema(rng)
    parents = random_tree(rng, depth)
    g = aggregation(parents)
    truth = rng.integers(0, 20, size=(g[-1].shape[1], prod(shape))).astype(float)
    detailed = QuerySpec(tuple(range(len(shape))))
    invariant_specs = []  # (spec, deepest level it holds at): a contiguous run of levels from the root
    if with_invariants:
        for spec in (QuerySpec(()), random_spec(rng, shape, recodes))[: int(rng.integers(1, 3))]:
            invariant_specs.append((spec, int(rng.integers(0, depth))))
    levels = []
    for i, parent in enumerate(parents):
        node_truth = g[i] @ truth
        specs = [random_spec(rng, shape, recodes) for _ in range(int(rng.integers(0 if 0 < i < depth - 1 else 1, 4)))]
        if i == depth - 1:
            specs.append(detailed)
        queries = [GlsQuery(s.axes, float(rng.uniform(0.3, 20)), answer(node_truth, shape, s)
                            + rng.normal(0, 3, (len(node_truth), prod(s.cells(shape)))), s.groups) for s in specs]
        invariants = [GlsInvariant(s.axes, answer(node_truth, shape, s), s.groups)
                      for s, deepest in invariant_specs if i <= deepest]
        levels.append(GlsLevel(parent=parent, queries=queries, invariants=invariants))
    return shape, recodes, g, levels


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


# --- the pl94-2020 shape in miniature: hhgq (8 values) grouped by hhinstlevels, votingage -----------------------

INST = (0, 1, 1, 1, 1, 2, 2, 2)  # household, institutional (4), non-institutional (3)
SHAPE = (8, 2)


def mini_levels(with_total: bool = True, invariant_levels: tuple[int, ...] = (0, 1)) -> tuple[list, list]:
    rng = np.random.default_rng(7)  # test-only
    parents = random_tree(rng, 3)
    g = aggregation(parents)
    truth = rng.integers(0, 20, size=(g[-1].shape[1], 16)).astype(float)
    inst = QuerySpec((0,), (INST,))
    levels = []
    for i, parent in enumerate(parents):
        node = g[i] @ truth
        specs = [QuerySpec((1, 0), (None, INST)), QuerySpec((0, 1)), QuerySpec(())]
        queries = [GlsQuery(s.axes, 2.0 + k, answer(node, SHAPE, s) + 1.5, s.groups) for k, s in enumerate(specs)]
        total = with_total and i in invariant_levels
        invariants = [GlsInvariant((), answer(node, SHAPE, QuerySpec(())))] if total else []
        if i == 0:
            invariants.append(GlsInvariant(inst.axes, answer(node, SHAPE, inst), inst.groups))
        levels.append(GlsLevel(parent, queries, invariants))
    return g, levels


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
