"""Contract tests of pipeline/dp/pld.py's rounding helpers and of a curve's delta (written against the surviving
mutants of the second mutation run):

- _ceil_scaled: the ceiling of 2^BITS times a ball's UPPER end (exact dyadic values, thirds, a wide ball);
- _float_up: the smallest float >= an exact point (floats unchanged, others one ulp above the nearest below);
- _rescale: every coefficient divided by 2^extra and rounded UP;
- PrivacyCurve.delta: the hockey-stick sum of a hand-built curve against mpmath, at and between its losses, below
  all of them, capped at 1; at any arb precision never below the exact value (balls: precision is tightness only);
- privacy_curve's grid: a power-of-2 step, GRID_POINTS to twice as many points between its floor and cap;
- _on_grid: every loss up to the next grid point, clamped up to the floor, past the cap at +infinity;
- PrivacyCurve.epsilon: the smallest epsilon the curve meets (a hand-built curve against mpmath, a composition
  against its certified delta), 0.0 above delta(0), none at the mass at infinity;
- parameters checked by name; a foreign object (even one with a Fraction ``scale``) is not a noise; the empty
  composition is the zero curve.
"""

from __future__ import annotations

import math
from fractions import Fraction
from types import SimpleNamespace

import mpmath as mp
import numpy as np
import pytest
from flint import arb, ctx, fmpz_poly

from censusdp.pipeline.dp import pld
from censusdp.pipeline.dp.pld import (
    BITS,
    CAP_Z,
    FLOOR_Z,
    GRID_POINTS,
    PREC,
    GaussianNoise,
    LaplaceNoise,
    PrivacyCurve,
    _ceil_scaled,
    _float_up,
    _gaussian_lattice,
    _laplace_lattice,
    _Lattice,
    _moments,
    _on_grid,
    _Part,
    _rescale,
    delta_pld,
    privacy_curve,
)

HALF = 2 ** (BITS - 1)


@pytest.mark.parametrize(("value", "expected"), [
    (arb(1), 2**BITS),                  # exact, a positive exponent: shifted left
    (arb(3) / 2**BITS, 3),              # exact, exponent 0
    (arb(5) / 2 ** (BITS + 3), 1),      # below one unit: rounded UP to 1
    (arb(0), 0),
])
def test_ceil_scaled_of_exact_values(value: arb, expected: int) -> None:
    assert _ceil_scaled(value) == expected


def test_ceil_scaled_rounds_the_upper_end_up() -> None:
    with ctx.workprec(PREC):  # as the lattices call it
        assert _ceil_scaled(arb(1) / 3) == -(-(2**BITS) // 3)  # ceil(2^BITS / 3): the radius is far below a unit
    wide = arb("0.5 +/- 0.001")  # the UPPER end 0.501 (at least), not the midpoint or the lower end
    assert _ceil_scaled(wide) >= math.ceil(Fraction(501, 1000) * 2**BITS)
    assert _ceil_scaled(wide) <= math.ceil(Fraction(5011, 10000) * 2**BITS)


@pytest.mark.parametrize(("point", "exact"), [
    (arb(1), Fraction(1)), (arb(3) / 8, Fraction(3, 8)), (arb(2) ** 70, Fraction(2**70)),
    ((arb(1) / 3).upper(), None), ((arb(2) / 3).upper(), None), (arb(2**60 + 1), Fraction(2**60 + 1)),
])
def test_float_up_is_the_smallest_float_above(point: arb, exact: Fraction | None) -> None:
    mantissa, exponent = point.mid().man_exp()
    value = Fraction(int(mantissa)) * Fraction(2) ** int(exponent)
    assert exact is None or value == exact
    result = _float_up(point)
    assert Fraction(result) >= value > Fraction(math.nextafter(result, -math.inf))


def test_rescale_divides_each_coefficient_rounding_up() -> None:
    assert _rescale(fmpz_poly([0, 1, 4, 5, 8, 9]), 2) == fmpz_poly([0, 1, 1, 2, 2, 3])
    assert _rescale(fmpz_poly([7]), 0) == fmpz_poly([7])


# a hand-built curve: mass 1/2 at loss -1/2, 1/4 at 1/2, 1/8 at 1 (step 1/2, offset -1), 1/8 at infinity
CURVE = PrivacyCurve(Fraction(1, 2), -1, (HALF, 0, HALF // 2, HALF // 4), HALF // 4)


def _exact(epsilon: float) -> mp.mpf:
    with mp.workdps(60):
        points = [(mp.mpf(1) / 2, mp.mpf(-1) / 2), (mp.mpf(1) / 4, mp.mpf(1) / 2), (mp.mpf(1) / 8, mp.mpf(1))]
        return mp.mpf(1) / 8 + mp.fsum(p * (1 - mp.exp(mp.mpf(epsilon) - loss)) for p, loss in points
                                      if loss > epsilon)


@pytest.mark.parametrize("epsilon", [-3.0, -0.5, -0.25, 0.0, 0.5, 0.75, 1.0, 4.0])
def test_delta_of_a_hand_built_curve(epsilon: float) -> None:
    exact = _exact(epsilon)
    assert exact <= CURVE.delta(epsilon) <= exact * (1 + mp.mpf(10) ** -14)
    assert CURVE.delta(Fraction(epsilon)) == CURVE.delta(epsilon)


@pytest.mark.parametrize("prec", [8, 16, 30])
def test_delta_is_an_upper_bound_at_any_precision(monkeypatch: pytest.MonkeyPatch, prec: int) -> None:
    monkeypatch.setattr(pld, "PREC", prec)
    for epsilon in (-0.4, 0.1, 0.6):
        assert CURVE.delta(epsilon) >= _exact(epsilon)


def test_delta_is_capped_at_one() -> None:
    """Masses are upper bounds, so their sum may pass 1; delta never does."""
    assert PrivacyCurve(Fraction(1), 0, (), 2 ** (BITS + 1)).delta(0) == 1.0
    assert PrivacyCurve(Fraction(1), 0, (2**BITS, 2**BITS), 2**BITS).delta(-50) == 1.0


def test_epsilon_errors_name_the_parameter() -> None:
    with pytest.raises(ValueError, match=r"^epsilon must be finite"):
        CURVE.delta(math.nan)


@pytest.mark.parametrize("noise", [SimpleNamespace(scale=Fraction(2)), "noise", 2.0])
def test_a_foreign_object_is_not_a_noise(noise: object) -> None:
    """Refused by name, with or without a Fraction ``scale``, before it is used."""
    with pytest.raises(ValueError, match=r"noises\[0\]"):
        privacy_curve([noise], cells=1)  # type: ignore[list-item]


def test_the_empty_composition_is_the_zero_curve() -> None:
    curve = privacy_curve([], cells=1)
    assert curve.infinite == 0 and curve.masses == () and curve.offset == 0
    assert delta_pld([], -5.0, cells=2) == 0.0 and curve.epsilon(1e-300) == 0.0


@pytest.mark.parametrize("noises", [[GaussianNoise(Fraction(4))],
                                    [GaussianNoise(Fraction(1, 2)), LaplaceNoise(Fraction(3))],
                                    [LaplaceNoise(Fraction(100))]])
def test_the_grid_has_grid_points_to_twice_as_many(noises: list[GaussianNoise | LaplaceNoise]) -> None:
    """The step is the power of 2 that puts GRID_POINTS to 2 GRID_POINTS points on [mean - FLOOR_Z sd, mean +
    CAP_Z sd] of the total loss (each side at least one unit wide)."""
    curve = privacy_curve(noises, cells=1)
    lattices = [_gaussian_lattice(n.sigma2, 1) if isinstance(n, GaussianNoise) else _laplace_lattice(n.scale, 1)
                for n in noises]
    sd = math.sqrt(sum(_moments(lattice)[1] for lattice in lattices))
    width = Fraction(max(FLOOR_Z * sd, 1.0)) + Fraction(max(CAP_Z * sd, 1.0))
    assert curve.step.numerator == 1 and curve.step.denominator & (curve.step.denominator - 1) == 0
    assert GRID_POINTS <= width / curve.step < 2 * GRID_POINTS


LATTICE = _Lattice(fmpz_poly([1, 2, 3, 4, 5]), 7, 4, Fraction(1, 3))  # losses 4/3, 2/3, 0, -2/3, -4/3


@pytest.mark.parametrize(("step", "floor", "cap", "expected"), [
    (Fraction(1, 3), -10, 10, _Part(-4, fmpz_poly([5, 0, 4, 0, 3, 0, 2, 0, 1]), 7)),  # on the grid: unchanged
    (Fraction(1, 2), -1, 2, _Part(-1, fmpz_poly([9, 3, 0, 2]), 8, True)),  # up to ceil(loss/step); floor, cap
    (Fraction(1, 3), 5, 10, _Part(5, fmpz_poly([15]), 7)),  # everything below the floor: clamped UP onto it
    (Fraction(1, 3), -10, -5, _Part(-10, fmpz_poly([]), 22, True)),  # everything above the cap: at +infinity
])
def test_on_grid_rounds_every_loss_up(step: Fraction, floor: int, cap: int, expected: _Part) -> None:
    part = _on_grid(LATTICE, step, floor, cap)
    assert (part.offset, part.masses, part.infinite, part.cut) == (expected.offset, expected.masses,
                                                                   expected.infinite, expected.cut)


@pytest.mark.parametrize("delta", [0.3, 0.2, 0.15, 0.1250001])
def test_epsilon_of_a_hand_built_curve_is_the_smallest_root(delta: float) -> None:
    """The smallest epsilon >= 0 with delta(epsilon) <= delta (bisection of the exact curve), rounded up by ulps;
    0.0 when delta(0) already meets it; at or below the mass at infinity (1/8) there is none."""
    lo, hi = mp.mpf(0), mp.mpf(2)
    with mp.workdps(60):
        for _ in range(120):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if _exact(mid) > delta else (lo, mid)
    eps = CURVE.epsilon(delta)
    assert CURVE.delta(eps) <= delta
    assert hi <= eps <= hi * (1 + mp.mpf(10) ** -12) if _exact(0) > delta else eps == 0.0
    with pytest.raises(ValueError, match="at or below the curve's mass at infinity"):
        CURVE.epsilon(0.125)


@pytest.mark.parametrize("delta", [1e-2, 1e-5, 1e-9])
def test_epsilon_of_a_composition_is_the_smallest_certified(delta: float) -> None:
    """Whatever segment the float proposal picks, the answer is the least epsilon the certified delta meets."""
    curve = privacy_curve([GaussianNoise(Fraction(7, 2)), GaussianNoise(Fraction(20))], cells=2)
    eps = curve.epsilon(delta)
    assert curve.delta(eps) <= delta < curve.delta(eps * (1 - 1e-9))


@pytest.mark.parametrize("delta", [0, 0.0, 1, 1.0, -1e-9, 1.5, True, "0.1", None, Fraction(1, 10)])
def test_epsilon_refuses_a_delta_outside_the_open_unit_interval(delta: object) -> None:
    """Only an int or float strictly between 0 and 1 (not a bool, a string or a Fraction) is a delta."""
    with pytest.raises(ValueError, match=r"delta must be a number in \(0, 1\)"):
        CURVE.epsilon(delta)  # type: ignore[arg-type]


def test_moments_are_the_mean_and_variance_of_the_lattice_loss() -> None:
    """LATTICE's losses 4/3 .. -4/3 with weights 1..5 (normalised): mean -4/9, variance 56/81 (by hand)."""
    mean, variance = _moments(LATTICE)
    assert mean == pytest.approx(-4 / 9, rel=1e-12) and variance == pytest.approx(56 / 81, rel=1e-12)


@pytest.mark.parametrize("delta", [0.5, 1e-2, 1e-5, 1e-9, 1e-12])
def test_propose_is_the_segment_before_the_first_grid_point_that_meets_delta(delta: float) -> None:
    """The float proposal p: grid point p + 1 meets delta and grid point p does not (the bound decreases along
    the grid, so p + 1 is the first that meets it), unless p is 0."""
    curve = privacy_curve([GaussianNoise(Fraction(7, 2)), GaussianNoise(Fraction(20))], cells=2)
    masses = np.array([float(c) for c in curve.masses]) * 2.0**-BITS
    grid = (curve.offset + np.arange(len(masses))) * float(curve.step)

    def bound(k: int) -> float:
        return curve.infinite * 2.0**-BITS + float(np.sum(masses[k:] * -np.expm1(grid[k] - grid[k:])))

    proposed = curve._propose(delta)
    assert 0 <= proposed < len(masses) and bound(proposed + 1) <= delta
    assert proposed == 0 or bound(proposed) > delta
