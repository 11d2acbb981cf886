"""A medium, PL94-shaped level: 50 children x 2016 cells, four queries (total, 8, 252 and 2016 cells).

Run as a script for timings:  python tests/postprocess/test_medium.py
"""

from __future__ import annotations

import time
from fractions import Fraction

import numpy as np
import scipy.sparse as sp

from censusdp.postprocess import QueryInvariant, QueryMeasurement, reconcile_level

SHAPE = (2, 2, 63, 8)  # voting age x hispanic x cenrace x hhgq
N_CELLS = int(np.prod(SHAPE))


def marginal(keep: tuple[int, ...]) -> sp.csr_matrix:
    """0/1 matrix of the marginal over the kept axes of SHAPE."""
    coords = np.indices(SHAPE).reshape(len(SHAPE), -1)
    label = np.zeros(N_CELLS, dtype=np.int64)
    size = 1
    for axis in keep:
        label = label * SHAPE[axis] + coords[axis]
        size *= SHAPE[axis]
    return sp.csr_matrix((np.ones(N_CELLS), (label, np.arange(N_CELLS))), shape=(size, N_CELLS))


QUERIES = {
    "total": (marginal(()), Fraction(1)),
    "hhgq": (marginal((3,)), Fraction(2)),
    "votingage * hispanic * cenrace": (marginal((0, 1, 2)), Fraction(4)),
    "detailed": (sp.identity(N_CELLS, format="csr"), Fraction(8)),
}


def make_level(seed: int, n_parents: int, children: int, persons: int, rng_noise: float = 1.0):
    """True child tables from a skewed distribution, the parent table as their sum, Gaussian-ish noise."""
    rng = np.random.default_rng(seed)  # test-only
    shares = rng.gamma(0.3, 1.0, N_CELLS)
    true = rng.multinomial(persons, shares / shares.sum(), size=n_parents * children)
    parent_index = np.repeat(np.arange(n_parents), children)
    parents = np.zeros((n_parents, N_CELLS), dtype=np.int64)
    np.add.at(parents, parent_index, true)
    measurements = []
    for name, (matrix, sigma2) in QUERIES.items():
        answers = (matrix @ true.T).T
        noise = rng.normal(0, rng_noise * np.sqrt(float(sigma2)), answers.shape)
        measurements.append(QueryMeasurement(name, matrix, np.rint(answers + noise).astype(np.int64), sigma2))
    invariant = QueryInvariant("total", QUERIES["total"][0], true.sum(axis=1, keepdims=True))
    return measurements, parents, parent_index, invariant


def run(seed=0, n_parents=1, children=50, persons=1000, invariant=False, solver="auto"):
    measurements, parents, index, total = make_level(seed, n_parents, children, persons)
    invariants = [total] if invariant else []
    started = time.perf_counter()
    result = reconcile_level(
        measurements,
        n_cells=N_CELLS,
        parent_counts=parents,
        parent_index=index,
        invariants=invariants,
        solver=solver,
    )
    seconds = time.perf_counter() - started
    counts = result.counts
    assert counts.dtype == np.int64 and counts.min() >= 0
    sums = np.zeros_like(parents)
    np.add.at(sums, index, counts)
    np.testing.assert_array_equal(sums, parents)
    if invariant:
        np.testing.assert_array_equal(counts.sum(axis=1, keepdims=True), total.values)
    return result, seconds


def test_medium_level_satisfies_every_constraint():
    result, seconds = run()
    report = result.report
    print(f"\nmedium 50 x 2016, 4 queries: {seconds:.2f} s  {report}")
    assert report["problems"] == 1 and report["rounding"] == {"greedy": 1}
    assert report["max_sum_violation"] < 1e-3


def test_medium_level_with_total_invariant():
    result, seconds = run(seed=1, invariant=True)
    print(f"\nmedium 50 x 2016 with total invariant: {seconds:.2f} s  {result.report}")
    assert result.report["rounding"] == {"binary_lp": 1}


if __name__ == "__main__":
    for label, kwargs in [
        ("50 children x 2016, 4 queries", {}),
        ("50 children x 2016, 4 queries, total invariant", {"invariant": True}),
        ("50 children x 2016, dense parent (20k persons/child)", {"persons": 20_000}),
        ("200 parents x 5 children, 100 persons/child", {"n_parents": 200, "children": 5, "persons": 100}),
    ]:
        result, seconds = run(**kwargs)
        r = result.report
        print(
            f"{label}: {seconds:.2f} s total; solve {r['seconds_solve']:.2f} s, rounding "
            f"{r['seconds_rounding']:.2f} s; {r['problems']} problems, {r['variables']} variables, "
            f"{r['solver_status']}, {r['rounding']}"
        )
