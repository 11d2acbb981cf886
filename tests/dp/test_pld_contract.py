"""Contract tests of pipeline/dp/pld.py: every guarantee the certified privacy curve gives.

- never below the exact delta(epsilon) (direct summation at 80 digits, tests/helpers/pld_reference.py);
- monotone: delta decreasing in epsilon, epsilon decreasing in delta; epsilon(delta) certified by delta(.);
- composition: more mechanisms, more cells or less noise never lower the curve; the loss at a shift is symmetric;
- the worst case over neighbours is at least the continuous Gaussian's curve less a small margin;
- parameters are checked and errors name them.
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from censusdp.pipeline.dp.pld import (
    BITS,
    GaussianNoise,
    LaplaceNoise,
    PrivacyCurve,
    delta_pld,
    epsilon_pld,
    privacy_curve,
)
from tests.helpers.pld_reference import discrete_gaussian_delta, gaussian_epsilon

SMALL = [([Fraction(4)], 1), ([Fraction(1, 2)], 1), ([Fraction(9, 4), Fraction(25)], 1), ([Fraction(3)], 2),
         ([Fraction(3, 2), Fraction(5)], 1)]


@pytest.mark.parametrize(("sigma2s", "cells"), SMALL)
@pytest.mark.parametrize("epsilon", [0.0, 0.3, 1.0, 2.5])
def test_delta_is_never_below_the_exact_value(sigma2s: list[Fraction], cells: int, epsilon: float) -> None:
    exact = float(discrete_gaussian_delta(sigma2s, epsilon, cells))
    bound = delta_pld([GaussianNoise(s) for s in sigma2s], epsilon, cells=cells)
    assert bound >= exact
    assert bound <= exact * 1.05 + 1e-12  # and tight: the grid costs a few percent at most here


@pytest.mark.parametrize(("sigma2s", "cells"), SMALL)
def test_epsilon_is_never_below_the_exact_value(sigma2s: list[Fraction], cells: int) -> None:
    """epsilon(delta) rounds up: the exact delta at the reported epsilon is at most delta."""
    for delta in (1e-3, 1e-6):
        eps = epsilon_pld([GaussianNoise(s) for s in sigma2s], delta, cells=cells)
        assert float(discrete_gaussian_delta(sigma2s, eps, cells)) <= delta
        assert float(discrete_gaussian_delta(sigma2s, eps * 0.97, cells)) > delta  # tight to 3%


def test_curve_is_monotone_and_epsilon_is_certified() -> None:
    curve = privacy_curve([GaussianNoise(Fraction(7, 2)), GaussianNoise(Fraction(20))], cells=2)
    deltas = [curve.delta(e / 4) for e in range(0, 40)]
    assert all(a >= b for a, b in zip(deltas, deltas[1:], strict=False)) and deltas[0] > deltas[-1]
    epsilons = [curve.epsilon(d) for d in (1e-2, 1e-4, 1e-6, 1e-8, 1e-10)]
    assert all(a < b for a, b in zip(epsilons, epsilons[1:], strict=False))
    for d, e in zip((1e-2, 1e-4, 1e-6, 1e-8, 1e-10), epsilons, strict=True):
        assert curve.delta(e) <= d < curve.delta(max(0.0, e - 0.05))


def test_delta_at_zero_epsilon_is_the_total_variation_bound() -> None:
    """At epsilon = 0 delta is the total variation distance, at most 1; huge epsilon leaves the mass at infinity."""
    curve = privacy_curve([GaussianNoise(Fraction(1, 100))], cells=1)  # almost no noise: TV ~ 1
    assert 0.99 < curve.delta(0) <= 1.0
    far = privacy_curve([GaussianNoise(Fraction(50))], cells=1)
    assert far.delta(1000) == pytest.approx(far.infinite * 2.0**-BITS) and far.delta(1000) < 1e-25


def test_more_noise_fewer_cells_or_fewer_mechanisms_never_raise_the_curve() -> None:
    base = [GaussianNoise(Fraction(10)), GaussianNoise(Fraction(30))]
    eps = epsilon_pld(base, 1e-8, cells=2)
    assert epsilon_pld(base, 1e-8, cells=1) < eps
    assert epsilon_pld(base[:1], 1e-8, cells=2) < eps
    assert epsilon_pld([GaussianNoise(Fraction(20)), base[1]], 1e-8, cells=2) < eps
    assert epsilon_pld([*base, GaussianNoise(Fraction(1000))], 1e-8, cells=2) > eps


def test_identical_mechanisms_compose_like_distinct_ones() -> None:
    """Two copies of one noise (grouped, squared) give the curve of one noise with two cells."""
    one = [GaussianNoise(Fraction(8))]
    assert epsilon_pld(one * 2, 1e-6, cells=1) == pytest.approx(epsilon_pld(one, 1e-6, cells=2), abs=1e-12)
    assert epsilon_pld(one * 3, 1e-6, cells=2) == pytest.approx(epsilon_pld(one, 1e-6, cells=6), abs=1e-12)


@pytest.mark.parametrize("rho", [0.05, 0.5, 2.5])
def test_never_far_below_the_continuous_gaussian(rho: float) -> None:
    """Many cells of large sigma2 approach the continuous Gaussian with the same rho; the certified bound is above
    it less a small margin (the discrete law is a little more private, never much)."""
    sigma2 = Fraction(5) / Fraction(rho)  # 10 cells of sigma2 with 1/(2 sigma2) = rho/10 each: rho in total
    eps = epsilon_pld([GaussianNoise(sigma2)] * 10, 1e-10, cells=1)
    continuous = gaussian_epsilon(rho, 1e-10)
    assert continuous * 0.999 <= eps <= continuous * 1.01 + 0.01


def test_laplace_is_its_pure_epsilon() -> None:
    """A discrete Laplace of scale b moving one cell is (1/b)-DP: delta(1/b) is 0 up to the rounding floor, and
    below 1/b delta is positive (the loss is exactly ±1/b)."""
    noise = [LaplaceNoise(Fraction(2))]
    assert delta_pld(noise, 0.5, cells=1) < 1e-25
    q = math.exp(-0.5)
    assert delta_pld(noise, 0.25, cells=1) >= (1 - math.exp(-0.25)) / (1 + q)
    assert delta_pld(noise, 1.0, cells=2) < 1e-25 < delta_pld(noise, 0.9, cells=2)


def test_an_empty_release_or_no_cell_moved_costs_nothing() -> None:
    assert epsilon_pld([], 1e-10, cells=2) == 0.0
    assert epsilon_pld([GaussianNoise(Fraction(1))], 1e-10, cells=0) == 0.0
    assert PrivacyCurve(Fraction(1), 0, (), 0).delta(0) == 0.0


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: epsilon_pld([GaussianNoise(Fraction(1))], 0.0, cells=1), "delta"),
        (lambda: epsilon_pld([GaussianNoise(Fraction(1))], 1.0, cells=1), "delta"),
        (lambda: epsilon_pld([GaussianNoise(Fraction(1))], True, cells=1), "delta"),  # type: ignore[arg-type]
        (lambda: epsilon_pld([GaussianNoise(Fraction(1))], 1e-10, cells=-1), "cells"),
        (lambda: epsilon_pld([GaussianNoise(Fraction(1))], 1e-10, cells=True), "cells"),  # type: ignore[arg-type]
        (lambda: epsilon_pld([GaussianNoise(Fraction(0))], 1e-10, cells=1), "noises[0]"),
        (lambda: epsilon_pld([GaussianNoise(2.0)], 1e-10, cells=1), "noises[0]"),  # type: ignore[arg-type]
        (lambda: epsilon_pld([LaplaceNoise(Fraction(-1))], 1e-10, cells=1), "noises[0]"),
        (lambda: delta_pld([GaussianNoise(Fraction(1))], math.inf, cells=1), "epsilon"),
        (lambda: delta_pld([GaussianNoise(Fraction(1))], "1", cells=1), "epsilon"),  # type: ignore[arg-type]
        # a curve's own epsilon refuses a delta at or below its mass at infinity (epsilon_pld then says None)
        (lambda: privacy_curve([GaussianNoise(Fraction(1))], cells=1).epsilon(1e-40), "delta"),
    ],
)
def test_bad_parameters_are_refused_by_name(call, name: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=name.replace("[", r"\[").replace("]", r"\]")):
        call()
