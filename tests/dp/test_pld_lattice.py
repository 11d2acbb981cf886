"""Contract tests of pipeline/dp/pld.py's building blocks and of its rho search (written against the surviving
mutants of the first mutation run):

- a group's lattice: every mass is an upper bound of the exact one (and tight), at the documented loss;
- the discrete Gaussian's: enumerated over |o| <= 12 sigma + 2, copies its exact convolution, masses bounds at
  any arb precision, the tail's geometric bound above the exact tail and within 1e-6 of it at a 2^-200 scale;
- the discrete Laplace: the certified curve against exact enumeration, no mass at infinity;
- rho_for_epsilon_pld: parameters checked; the answer meets the target, is within 2^-HALVINGS < 1e-3 of the
  largest rho that does, on its dyadic grid, the same from any start, in a bounded number of evaluations.
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath as mp
import pytest
from flint import fmpz_poly

from censusdp.pipeline.dp import pld
from censusdp.pipeline.dp.pld import (
    BITS,
    HALVINGS,
    TAIL_Z,
    GaussianNoise,
    LaplaceNoise,
    _convolve,
    _gaussian_lattice,
    _laplace_lattice,
    _Part,
    delta_pld,
    epsilon_pld,
    privacy_curve,
    rho_for_epsilon_pld,
)
from tests.helpers.pld_reference import discrete_gaussian_cell, discrete_laplace_delta

SCALE = mp.mpf(2) ** -BITS


@pytest.mark.parametrize("sigma2", [Fraction(1, 2), Fraction(4), Fraction(9, 7)])
def test_gaussian_lattice_masses_bound_the_cell_law_at_its_loss(sigma2: Fraction) -> None:
    lattice = _gaussian_lattice(sigma2, 1)
    coeffs = [int(c) for c in lattice.masses.coeffs()]
    t = (len(coeffs) - 1) // 2
    assert lattice.top == 1 + 2 * t and lattice.unit == 1 / (2 * sigma2)
    with mp.workdps(80):
        for s, c in enumerate(coeffs):
            o = s - t
            assert lattice.loss(s) == (1 - 2 * o) / (2 * sigma2)  # the loss of a cell at o (CKS20)
            exact = discrete_gaussian_cell(sigma2, o)
            assert c * SCALE >= exact
            assert c * SCALE <= exact * (1 + mp.mpf(10) ** -30) + 2 * SCALE
        tail = 2 * mp.fsum(discrete_gaussian_cell(sigma2, o) for o in range(t + 1, t + 400))
        assert lattice.infinite * SCALE >= tail and lattice.infinite * SCALE <= max(tail * 2, 2 * SCALE)


@pytest.mark.parametrize(("scale", "copies"), [(Fraction(2), 1), (Fraction(1, 3), 3), (Fraction(5, 2), 4)])
def test_laplace_lattice_masses_bound_the_binomial_law(scale: Fraction, copies: int) -> None:
    lattice = _laplace_lattice(scale, copies)
    coeffs = [int(c) for c in lattice.masses.coeffs()]
    assert len(coeffs) == copies + 1 and lattice.infinite == 0
    assert lattice.top == copies and lattice.unit == 1 / scale
    with mp.workdps(80):
        q = mp.exp(-mp.mpf(scale.denominator) / scale.numerator)
        for s, c in enumerate(coeffs):
            assert lattice.loss(s) == Fraction(copies - 2 * s) / scale
            exact = math.comb(copies, s) * (q / (1 + q)) ** s * (1 / (1 + q)) ** (copies - s)
            assert exact <= c * SCALE <= exact * (1 + mp.mpf(10) ** -30) + 2 * SCALE


@pytest.mark.parametrize(("scales", "cells"), [([Fraction(2)], 1), ([Fraction(1, 2)], 2),
                                               ([Fraction(3), Fraction(3, 2)], 1), ([Fraction(4)], 3)])
@pytest.mark.parametrize("epsilon", [0.0, 0.2, 0.7])
def test_laplace_delta_is_never_below_the_exact_value(scales: list[Fraction], cells: int, epsilon: float) -> None:
    exact = float(discrete_laplace_delta(scales, epsilon, cells))
    bound = delta_pld([LaplaceNoise(b) for b in scales], epsilon, cells=cells)
    assert exact <= bound <= exact * 1.05 + 1e-12


def test_laplace_curve_has_nothing_at_infinity() -> None:
    """The discrete Laplace's loss is bounded (cells/scale): its curve is 0 beyond, exactly."""
    curve = privacy_curve([LaplaceNoise(Fraction(2)), LaplaceNoise(Fraction(3))], cells=2)
    assert curve.infinite == 0 and curve.delta(100) == 0.0
    assert epsilon_pld([LaplaceNoise(Fraction(2))], 1e-9, cells=1) <= 0.5 + 1e-9


H = 2 ** (BITS - 2)  # a quarter, on the mass scale


@pytest.mark.parametrize(("floor", "cap", "expected"), [
    (-1, 3, _Part(0, fmpz_poly([H, 2 * H, H]), 8)),         # inside the grid: the exact product
    (0, 2, _Part(0, fmpz_poly([H, 2 * H, H]), 8)),          # offset on the floor, length on the cap: unchanged
    (1, 2, _Part(1, fmpz_poly([3 * H, H]), 8)),             # below the floor: clamped UP onto it
    (0, 1, _Part(0, fmpz_poly([H, 2 * H]), 8 + H)),         # above the cap: to infinity
    (1, 1, _Part(1, fmpz_poly([3 * H]), 8 + H)),            # both
])
def test_convolve_clamps_up_and_adds_the_infinite_masses(floor: int, cap: int, expected: _Part) -> None:
    half = fmpz_poly([2 * H, 2 * H])  # two halves at 0 and 1
    part = _convolve(_Part(0, half, 3), _Part(0, half, 5), floor, cap)
    assert (part.offset, part.masses, part.infinite) == (expected.offset, expected.masses, expected.infinite)


def _gaussians(rho: Fraction) -> list[GaussianNoise]:
    return [GaussianNoise(Fraction(1) / (2 * rho)), GaussianNoise(Fraction(1) / rho)]


def _flat(rho: Fraction) -> list[LaplaceNoise]:
    """epsilon ~ rho^(1/4): flatter than the search's sqrt model, so its first step falls short and it widens."""
    return [LaplaceNoise(1 / Fraction(math.sqrt(math.sqrt(rho))).limit_denominator(10**6))]


@pytest.mark.parametrize(("noises_for", "epsilon", "start"), [
    (_gaussians, 1.0, Fraction(1, 100)),   # just below the answer (~0.01868)
    (_gaussians, 1.0, Fraction(1, 5)),     # ten times above: halved until admissible
    (_gaussians, 1.0, Fraction(1, 2000)),  # forty times below: doubled until bracketed
    (_gaussians, 0.5, Fraction(1, 50)),    # an epsilon below 1
    (_gaussians, 2.5, Fraction(1, 10)),    # an answer in the upper half of its bracket [2^k, 2^(k+1)]
    (_flat, 1.0, Fraction(1, 10**4)),      # epsilon ~ rho^(1/4)
])
def test_rho_search_meets_the_target_and_is_tight(noises_for, epsilon: float, start: Fraction) -> None:  # type: ignore[no-untyped-def]
    calls: list[Fraction] = []

    def counted(rho: Fraction):  # type: ignore[no-untyped-def]
        calls.append(rho)
        return noises_for(rho)

    rho = rho_for_epsilon_pld(epsilon, 1e-6, counted, cells=1, start=start)
    assert isinstance(rho, Fraction) and rho > 0
    assert len(calls) <= 12 + HALVINGS + 2 * abs(math.log2(rho / start))  # a bisection, never a scan
    assert epsilon_pld(noises_for(rho), 1e-6, cells=1) <= epsilon
    assert epsilon_pld(noises_for(rho * (1 + Fraction(1, 2**HALVINGS))), 1e-6, cells=1) > epsilon  # < 1e-3 below
    power = Fraction(2) ** math.floor(math.log2(rho))  # rounded DOWN onto the grid 2^(k - HALVINGS) of its bracket
    assert (rho / power * 2**HALVINGS).denominator == 1 and 2**HALVINGS >= 1000


def test_rho_search_answer_does_not_depend_on_the_start() -> None:
    """``start`` only saves evaluations: from above, below or at the answer the same rho comes back."""
    answers = {rho_for_epsilon_pld(1.0, 1e-6, _gaussians, cells=1, start=s)
               for s in (Fraction(1, 100), Fraction(3, 10), Fraction(1, 1000), Fraction(1, 64))}
    assert len(answers) == 1


def test_rho_search_returns_the_largest_admissible_grid_point() -> None:
    """A target equal to the PLD epsilon at a grid point rho0 (here 19/1024, on the grid 2^-6 2^-HALVINGS of its
    bracket [1/64, 1/32]): rho0 meets it exactly (epsilon <= target, not <), the next grid point does not."""
    rho0 = Fraction(19, 1024)
    target = epsilon_pld(_gaussians(rho0), 1e-6, cells=1)
    assert epsilon_pld(_gaussians(rho0 + Fraction(1, 64 * 2**HALVINGS)), 1e-6, cells=1) > target
    assert rho_for_epsilon_pld(target, 1e-6, _gaussians, cells=1, start=Fraction(1, 50)) == rho0


@pytest.mark.parametrize("epsilon", [0, 0.0, -1.0, True, "1", None])
def test_rho_search_refuses_a_bad_epsilon(epsilon) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="epsilon"):
        rho_for_epsilon_pld(epsilon, 1e-6, _gaussians, cells=1, start=Fraction(1, 100))


def test_convolve_clamps_relative_to_the_parts_offsets() -> None:
    """Parts off the origin (offsets 1 + 1): the floor at 3 clamps the one grid point below it, counted from 2."""
    half = fmpz_poly([2 * H, 2 * H])
    part = _convolve(_Part(1, half, 3), _Part(1, half, 5), 3, 4)
    assert (part.offset, part.masses, part.infinite) == (3, fmpz_poly([3 * H, H]), 8)


def _cell_law(sigma2: Fraction, t: int) -> tuple[list[mp.mpf], mp.mpf]:
    """N_Z(0, sigma2) at o = -t..t and its mass beyond |o| > t, at 80 digits (one normaliser for all)."""
    s = mp.mpf(sigma2.numerator) / sigma2.denominator
    z = mp.nsum(lambda x: mp.exp(-x * x / (2 * s)), [-mp.inf, mp.inf])
    law = [mp.exp(-mp.mpf(o) ** 2 / (2 * s)) / z for o in range(-t, t + 1)]
    return law, 1 - mp.fsum(law)


@pytest.mark.parametrize(("sigma2", "copies"), [(Fraction(1, 2), 3), (Fraction(9, 7), 2)])
def test_gaussian_lattice_of_copies_is_the_convolution_of_the_cell(sigma2: Fraction, copies: int) -> None:
    """A cell is enumerated over |o| <= ceil(TAIL_Z sigma) + 2; ``copies`` cells are its exact k-fold convolution
    (masses bounded from above, tightly), at loss (copies - 2 S)/(2 sigma2); the tail at +inf once per cell."""
    t = math.ceil(TAIL_Z * math.sqrt(sigma2)) + 2
    one, many = _gaussian_lattice(sigma2, 1), _gaussian_lattice(sigma2, copies)
    assert one.masses.length() == 2 * t + 1 and many.masses.length() == copies * 2 * t + 1
    assert many.top == copies * (1 + 2 * t) and many.unit == 1 / (2 * sigma2)
    assert many.infinite == copies * one.infinite and one.infinite >= 1
    with mp.workdps(80):
        cell, _ = _cell_law(sigma2, t)
        law = [mp.mpf(1)]
        for _ in range(copies):
            law = [mp.fsum(law[i] * cell[k - i] for i in range(len(law)) if 0 <= k - i < len(cell))
                   for k in range(len(law) + len(cell) - 1)]
        for c, exact in zip([int(c) for c in many.masses.coeffs()], law, strict=True):
            assert exact <= c * SCALE <= exact * (1 + mp.mpf(10) ** -25) + 4 * copies * SCALE


@pytest.mark.parametrize("prec", [12, 20])
def test_gaussian_lattice_bounds_the_cell_law_at_any_precision(monkeypatch: pytest.MonkeyPatch, prec: int) -> None:
    """Balls: a low arb precision loosens the masses but every one (and the tail) stays an upper bound."""
    monkeypatch.setattr(pld, "PREC", prec)
    sigma2 = Fraction(1, 2)
    lattice = _gaussian_lattice(sigma2, 1)
    t = (lattice.masses.length() - 1) // 2
    with mp.workdps(80):
        cell, tail = _cell_law(sigma2, t)
        assert all(exact <= int(c) * SCALE for c, exact in zip(lattice.masses.coeffs(), cell, strict=True))
        assert lattice.infinite * SCALE >= tail


@pytest.mark.parametrize("sigma2", [900, 10**6])
def test_gaussian_tail_is_a_tight_geometric_bound(sigma2: int) -> None:
    """Wide cells (sigma = 30, 1000): the tail beyond 12 sigma + 2 (~1e-33) is bounded by the geometric series of
    ratio e^(-(2T+3)/(2 sigma2)), the largest beyond T: an upper bound within twice the tail, plus the rounding."""
    lattice = _gaussian_lattice(Fraction(sigma2), 1)
    t = (lattice.masses.length() - 1) // 2
    with mp.workdps(40):  # Z by Jacobi's theta; the terms past t + 8 sigma are below e^-128 of the tail
        s = mp.mpf(sigma2)
        z = mp.jtheta(3, 0, mp.exp(-1 / (2 * s)))
        tail = 2 * mp.fsum(mp.exp(-mp.mpf(o) ** 2 / (2 * s)) for o in range(t + 1, t + 8 * math.isqrt(sigma2) + 50)) / z
    assert tail <= lattice.infinite * SCALE <= 2 * tail + SCALE


def test_gaussian_tail_bound_is_sound_and_tight_at_a_fine_scale(monkeypatch: pytest.MonkeyPatch) -> None:
    """At 2^-200 the tail (~1e-44 for sigma2 = 2) is resolved: 2 w(T+1)/(1 - r)/Z_T with r = e^(-(2T+3)/(2
    sigma2)), the ratio of the first two tail terms (the later ones are smaller), lies above the exact tail and
    within 1e-6 of it (a smaller r would fall below it, a larger one would loosen it)."""
    monkeypatch.setattr(pld, "BITS", 200)
    monkeypatch.setattr(pld, "PREC", 400)
    sigma2 = Fraction(2)
    lattice = _gaussian_lattice(sigma2, 1)
    t = (lattice.masses.length() - 1) // 2
    with mp.workdps(120):
        z = mp.jtheta(3, 0, mp.exp(-mp.mpf(1) / 4))
        tail = 2 * mp.fsum(mp.exp(-mp.mpf(o) ** 2 / 4) for o in range(t + 1, t + 60)) / z
        bound = lattice.infinite * mp.mpf(2) ** -200
        assert tail <= bound <= tail * (1 + mp.mpf(10) ** -6)
