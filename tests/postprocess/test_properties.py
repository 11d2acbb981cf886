"""Property tests: on random small trees, every released level satisfies every constraint exactly."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from censusdp.postprocess import QueryInvariant, QueryMeasurement, ReconciliationError, reconcile_level


def random_partition(rng: np.random.Generator, n_cells: int) -> sp.csr_matrix:
    """A marginal-like query: every cell in exactly one of up to 3 groups (groups may be empty)."""
    groups = rng.integers(0, 3, n_cells)
    return sp.csr_matrix((np.ones(n_cells), (groups, np.arange(n_cells))), shape=(3, n_cells))


def measure(rng, true: np.ndarray, queries: dict[str, sp.csr_matrix]) -> list[QueryMeasurement]:
    out = []
    for name, matrix in queries.items():
        answers = (matrix @ true.T).T.astype(np.int64)
        noisy = answers + rng.integers(-6, 7, size=answers.shape)  # negatives and zeros happen
        sigma2 = Fraction(int(rng.integers(1, 5)), int(rng.integers(1, 3)))
        out.append(QueryMeasurement(name, matrix, noisy, sigma2))
    return out


def check_level(counts, parent_counts, parent_index, invariants, zeros):
    assert counts.dtype == np.int64
    assert counts.min(initial=0) >= 0
    assert np.all(counts[:, zeros] == 0)
    for inv in invariants:
        np.testing.assert_array_equal((inv.matrix @ counts.T).T, inv.values)
    if parent_counts is not None:
        sums = np.zeros_like(parent_counts)
        np.add.at(sums, parent_index, counts)
        used = np.unique(parent_index)
        np.testing.assert_array_equal(sums[used], parent_counts[used])


@st.composite
def trees(draw):
    n_cells = draw(st.integers(1, 12))
    fanout = [draw(st.lists(st.integers(1, 6), min_size=1, max_size=2))]  # root nodes -> level 1 children
    n_level1 = sum(fanout[0])
    fanout.append(draw(st.lists(st.integers(1, 4), min_size=n_level1, max_size=n_level1)))
    return {
        "n_cells": n_cells,
        "fanout": fanout,
        "seed": draw(st.integers(0, 2**32 - 1)),
        "zero_share": draw(st.sampled_from([0.0, 0.2, 0.5])),
        "total_query": draw(st.booleans()),
        "partition_query": draw(st.booleans()),
        # invariants of a level imply those of every level above, so they hold on a prefix of levels
        "invariant_levels": draw(st.sampled_from([(), (0,), (0, 1)])),
        "partition_invariant": draw(st.booleans()),
        "solver": draw(st.sampled_from(["auto", "auto", "OSQP", "SCS"])),
    }


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees())
def test_top_down_release_satisfies_every_constraint(tree):
    rng = np.random.default_rng(tree["seed"])
    n_cells = tree["n_cells"]
    zeros = rng.random(n_cells) < tree["zero_share"]
    # parent index of level 1 (into the root level) and of level 2 (into level 1)
    parents = [np.repeat(np.arange(len(f)), f) for f in tree["fanout"]]
    lowest = rng.integers(0, 5, size=(parents[1].size, n_cells)) * (
        rng.random((parents[1].size, n_cells)) < 0.6
    )
    lowest[:, zeros] = 0
    true = [None, None, lowest]
    for level in (1, 0):
        up = np.zeros((parents[level].max() + 1, n_cells), dtype=np.int64)
        np.add.at(up, parents[level], true[level + 1])
        true[level] = up
    queries = {"detailed": sp.identity(n_cells, format="csr")}
    if tree["total_query"]:
        queries["total"] = sp.csr_matrix(np.ones((1, n_cells)))
    if tree["partition_query"]:
        queries["groups"] = random_partition(rng, n_cells)
    invariant_queries = {"total": sp.csr_matrix(np.ones((1, n_cells)))}
    if tree["partition_invariant"]:
        invariant_queries["groups"] = random_partition(rng, n_cells)
    released = None
    for level in range(3):
        invariants = []
        if level in tree["invariant_levels"]:
            invariants = [
                QueryInvariant(name, m, (m @ true[level].T).T.astype(np.int64))
                for name, m in invariant_queries.items()
            ]
        parent_index = None if level == 0 else parents[level - 1]
        result = reconcile_level(
            measure(rng, true[level], queries),
            n_cells=n_cells,
            parent_counts=released,
            parent_index=parent_index,
            invariants=invariants,
            structural_zeros=zeros,
            solver=tree["solver"],
        )
        check_level(result.counts, released, parent_index, invariants, zeros)
        assert result.report["nodes"] == true[level].shape[0]
        released = result.counts


@settings(max_examples=25, deadline=None)
@given(
    st.integers(2, 6),
    st.integers(1, 12),
    st.integers(0, 2**32 - 1),
    st.integers(1, 3),
)
def test_inconsistent_invariants_always_fail(children, n_cells, seed, offset):
    rng = np.random.default_rng(seed)
    true = rng.integers(0, 6, size=(children, n_cells))
    parent = true.sum(axis=0, keepdims=True)
    totals = true.sum(axis=1, keepdims=True)
    totals[rng.integers(children), 0] += offset
    ones = sp.csr_matrix(np.ones((1, n_cells)))
    with pytest.raises(ReconciliationError, match="inconsistent"):
        reconcile_level(
            measure(rng, true, {"detailed": sp.identity(n_cells, format="csr")}),
            n_cells=n_cells,
            parent_counts=parent,
            parent_index=np.zeros(children, dtype=np.int64),
            invariants=[QueryInvariant("total", ones, totals)],
        )
