"""Drawing the noisy measurements (``pipeline.release.noisy_measurements``), checked against an independent computation.

For each allocation, every cell of every node's marginal gets one independent draw from the allocated
mechanism: exact discrete Gaussian N_Z(0, sigma2) (rho-zCDP by CKS20 Thm 4 with Thm 19.37(iii)) or exact
discrete Laplace of scale b.  Replaying the same seeded stream through the samplers, in allocation order,
must reproduce the measurements exactly: the right mechanism, the right parameter, the stream itself (no
other randomness), and noise added (not subtracted) to the true answers.  Invariants are the exact answers.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse as sp

from censusdp.pipeline.budget.allocation import QueryAllocation
from censusdp.pipeline.config.model import Mechanism
from censusdp.pipeline.config.schema import Attribute, Schema
from censusdp.pipeline.dp.noise import sample_discrete_gaussian, sample_discrete_laplace
from censusdp.pipeline.dp.random_source import seeded_random_source
from censusdp.pipeline.release.noisy_measurements import level_invariants, measure_level, noisy_answers

SCHEMA = Schema((Attribute("colour", "C", ("red", "green", "blue")), Attribute("adult", "A", ("0", "1"))))
# 3 nodes x 6 detailed cells (colour slowest), distinct counts so that every marginal is distinguishable
HISTOGRAMS = np.arange(18, dtype=np.int64).reshape(3, 6) * 7 + np.array([[0], [100], [1000]])


def marginal_by_hand(name: str, histograms: np.ndarray) -> np.ndarray:
    """The query answers computed independently of ``Schema.marginal``."""
    cube = histograms.reshape(len(histograms), 3, 2)
    return {"total": cube.sum(axis=(1, 2)).reshape(-1, 1), "detailed": cube.reshape(len(histograms), 6),
            "colour": cube.sum(axis=2), "adult": cube.sum(axis=1),
            "adult * colour": cube.transpose(0, 2, 1).reshape(len(histograms), 6)}[name]


def matrix_by_hand(name: str) -> np.ndarray:
    """The 0/1 matrix Q of a query (Q @ detailed == answers), built cell by cell."""
    cells = [(c, a) for c in range(3) for a in range(2)]
    keys = {"total": lambda c, a: 0, "detailed": lambda c, a: 2 * c + a, "colour": lambda c, a: c,
            "adult": lambda c, a: a, "adult * colour": lambda c, a: 3 * a + c}[name]
    rows = max(keys(c, a) for c, a in cells) + 1
    q = np.zeros((rows, 6), dtype=np.int64)
    for j, (c, a) in enumerate(cells):
        q[keys(c, a), j] = 1
    return q


ALLOCATIONS = [
    QueryAllocation("unit", "adult * colour", Fraction(1, 8), Fraction(10**6)),  # Gaussian
    QueryAllocation("unit", "colour", Fraction(1, 8), Fraction(2 * 1000**2), "laplace", Fraction(1000)),
    QueryAllocation("unit", " total ", Fraction(1, 8), Fraction(123457, 3)),  # Gaussian, odd sigma2
]


def test_measurements_replay_exactly_from_the_seeded_stream() -> None:
    out = measure_level(SCHEMA, HISTOGRAMS, ALLOCATIONS, seeded_random_source(2024))
    replay = seeded_random_source(2024)
    assert [m.name for m in out] == ["adult * colour", "colour", "total"]
    for measurement, allocation in zip(out, ALLOCATIONS, strict=True):
        answers = marginal_by_hand(measurement.name, HISTOGRAMS)
        if allocation.scale is None:
            noise = sample_discrete_gaussian(allocation.sigma2, answers.size, rng=replay)
        else:
            noise = sample_discrete_laplace(allocation.scale, answers.size, rng=replay)
        assert measurement.noisy.shape == answers.shape
        np.testing.assert_array_equal(measurement.noisy, answers + noise.reshape(answers.shape))
        assert not np.array_equal(measurement.noisy, answers)  # noise was added (P[no noise] < 1e-20)
        assert measurement.sigma2 == allocation.sigma2
        assert sp.issparse(measurement.matrix)
        np.testing.assert_array_equal(measurement.matrix.toarray(), matrix_by_hand(measurement.name))
        np.testing.assert_array_equal(measurement.matrix @ HISTOGRAMS.T, answers.T)


def test_measure_nothing_draws_nothing() -> None:
    rng = seeded_random_source(1)
    assert measure_level(SCHEMA, HISTOGRAMS, [], rng) == []
    np.testing.assert_array_equal(rng.uniform_uint64(4), seeded_random_source(1).uniform_uint64(4))


def test_invariants_are_the_exact_answers_as_int64() -> None:
    names = ["total", "adult", "adult * colour"]
    out = level_invariants(SCHEMA, HISTOGRAMS.astype(np.int32), names)
    assert [inv.name for inv in out] == names
    for inv in out:
        assert inv.values.dtype == np.int64
        np.testing.assert_array_equal(inv.values, marginal_by_hand(inv.name, HISTOGRAMS))
        np.testing.assert_array_equal(inv.matrix.toarray(), matrix_by_hand(inv.name))
    assert level_invariants(SCHEMA, HISTOGRAMS, []) == []


def test_noisy_answers_switches_on_the_mechanism_not_the_scale() -> None:
    """The release and the bootstrap share ``noisy_answers``: the mechanism decides the law (a Gaussian given a
    scale stays Gaussian), named as the enum or as the manifest's word."""
    sigma2, scale = Fraction(10**6), Fraction(1000)
    for mechanism, given_scale in ((Mechanism.GAUSSIAN, None), ("gaussian", scale), (Mechanism.LAPLACE, scale),
                                   ("laplace", scale)):
        out = noisy_answers(HISTOGRAMS, mechanism, sigma2, given_scale, seeded_random_source(7))
        replay = seeded_random_source(7)
        noise = (sample_discrete_laplace(scale, HISTOGRAMS.size, rng=replay) if mechanism == "laplace"
                 else sample_discrete_gaussian(sigma2, HISTOGRAMS.size, rng=replay))
        np.testing.assert_array_equal(out, HISTOGRAMS + noise.reshape(HISTOGRAMS.shape))
        assert out.shape == HISTOGRAMS.shape and out.dtype == np.int64
    with pytest.raises(ValueError, match="^a Laplace measurement needs its scale$"):
        noisy_answers(HISTOGRAMS, Mechanism.LAPLACE, sigma2, None, seeded_random_source(7))
