"""The certified accountant at small sigma: its support is widened until delta is certifiable, it never raises for a
valid delta, and where no curve can hold delta the CKS20 figure stands in, with a note."""

from __future__ import annotations

from fractions import Fraction

import pytest
from flint import fmpz_poly

from censusdp.pipeline.budget.accountants import PLD_FALLBACK, epsilon_pld_of
from censusdp.pipeline.budget.allocation import QueryAllocation
from censusdp.pipeline.dp.accounting import epsilon_cks20
from censusdp.pipeline.dp.pld import (
    BITS,
    INFINITE_SHARE,
    MIN_DELTA,
    GaussianNoise,
    _convolve,
    _Lattice,
    _on_grid,
    _Part,
    epsilon_pld,
    privacy_curve,
    rho_for_epsilon_pld,
)
from tests.helpers.pld_reference import discrete_gaussian_delta


# 11/2 and 59/10: the first cap leaves 2.8 and 0.56 times delta at +infinity (between delta/16 and 16 delta)
@pytest.mark.parametrize(("rho_q", "copies"), [(5, 1), (8, 1), (5, 6), (Fraction(15, 2), 4), (Fraction(11, 2), 1),
                                               (Fraction(59, 10), 1)])
def test_a_small_sigma_is_certified_near_the_exact_epsilon(rho_q: int | Fraction, copies: int) -> None:
    """Add-remove, one cell per query, delta 1e-10: at these rho_q the cap at mean + 14 sd throws lattice points
    of mass > delta/16 to +infinity (``epsilon`` raised there at rho_q >= 5).  The widened answer meets delta by
    exact summation and is within 1% of the smallest epsilon that does."""
    sigma2 = 1 / (2 * Fraction(rho_q))
    unwidened = privacy_curve([GaussianNoise(sigma2)] * copies, cells=1)
    assert unwidened.infinite > Fraction(1e-10) * INFINITE_SHARE * 2**BITS  # the case the widening is for
    epsilon = epsilon_pld([GaussianNoise(sigma2)] * copies, 1e-10, cells=1)
    assert epsilon is not None
    assert discrete_gaussian_delta([sigma2] * copies, epsilon) <= 1e-10  # sound, by an independent reference
    assert discrete_gaussian_delta([sigma2] * copies, epsilon * 0.99) > 1e-10  # and tight


def test_the_default_cap_is_kept_where_it_holds_delta() -> None:
    """The widening changes nothing for a release's usual noise: the first curve is the one used."""
    noises = [GaussianNoise(Fraction(7, 2)), GaussianNoise(Fraction(40))]
    curve = privacy_curve(noises, cells=2)
    assert curve.infinite <= Fraction(1e-10) * INFINITE_SHARE * 2**BITS
    assert epsilon_pld(noises, 1e-10, cells=2) == curve.epsilon(1e-10)


def test_the_certified_epsilon_is_not_monotone_in_rho_at_small_sigma() -> None:
    """Replace-one, one query: rho_q = 5 gives about 24.93, rho_q = 6 about 24.00 (docs/accounting.md); the true
    curve does the same (lattice points move past delta), so neither figure is an error."""
    at5 = epsilon_pld([GaussianNoise(Fraction(1, 5))], 1e-10, cells=2)
    at6 = epsilon_pld([GaussianNoise(Fraction(1, 6))], 1e-10, cells=2)
    assert at5 is not None and at6 is not None and at6 < at5
    assert discrete_gaussian_delta([Fraction(1, 6)], at6, cells=2) <= 1e-10


def test_the_target_search_returns_only_checked_answers() -> None:
    """Where epsilon is not monotone the bisection may stop low, never on a rho that misses the target."""
    def noises_for(rho: Fraction) -> list[GaussianNoise]:
        return [GaussianNoise(1 / (2 * rho))]

    for target in (20.0, 24.5, 26.0):
        rho = rho_for_epsilon_pld(target, 1e-10, noises_for, cells=1, start=Fraction(4))
        found = epsilon_pld(noises_for(rho), 1e-10, cells=1)
        assert found is not None and found <= target


def test_a_delta_no_curve_can_hold_falls_back_to_cks20_with_a_note() -> None:
    """Masses are kept at 2^-96: a delta near that cannot be certified by any cap; the figure is then CKS20's of
    the composed rho (a valid bound too), said so, and nothing raises."""
    assert epsilon_pld([GaussianNoise(Fraction(1, 10))], 1e-40, cells=1) is None
    allocations = tuple(QueryAllocation(level, "detailed", Fraction(5), Fraction(1, 10)) for level in ("a", "b"))
    figure = epsilon_pld_of(allocations, 1e-40, sensitivity2_squared=1, sensitivity1=1)
    assert figure.note == PLD_FALLBACK and figure.epsilon == epsilon_cks20(Fraction(10), 1e-40)
    certified = epsilon_pld_of(allocations, 1e-10, sensitivity2_squared=1, sensitivity1=1)
    assert certified.note is None and certified.epsilon < epsilon_cks20(Fraction(10), 1e-10)


def test_a_huge_rho_never_raises() -> None:
    """rho 1000 over a few queries: partial sums that all lie above the cap go to +infinity whole (the
    convolution refused a negative shift before); the figure is then the CKS20 fallback or a certified one."""
    allocations = tuple(QueryAllocation(level, "detailed", Fraction(rho), 1 / Fraction(rho))
                        for level, rho in (("a", 100), ("b", 200), ("c", 300), ("d", 400)))
    figure = epsilon_pld_of(allocations, 1e-10, sensitivity2_squared=2, sensitivity1=2)
    assert figure.epsilon > 999 and (figure.note is None or figure.note == PLD_FALLBACK)  # the loss is 1000 a.s.


def test_a_convolution_wholly_above_the_cap_moves_all_its_mass_to_infinity() -> None:
    """Two parts whose every partial sum lies above the cap: the product's whole mass (here exactly 1, at the
    2^-BITS scale, over two losses) goes to +infinity, on top of the parts' own, and the part says the cap cut."""
    half, one = fmpz_poly([2 ** (BITS - 1), 2 ** (BITS - 1)]), fmpz_poly([2**BITS])
    part = _convolve(_Part(10, half, 3), _Part(12, one, 4), 0, 5)
    assert part.infinite == 2**BITS + 3 + 4 and part.masses.length() == 0 and part.cut
    assert _convolve(_Part(10, fmpz_poly([1]), 0), _Part(12, one, 0), 0, 5).cut  # one unit above is a cut
    assert not _convolve(_Part(10, fmpz_poly([]), 0), _Part(12, one, 0), 0, 5).cut  # nothing above: no cut
    assert _convolve(_Part(10, fmpz_poly([]), 0, True), _Part(12, one, 0), 0, 5).cut  # a part's cut is kept


def test_a_convolution_partly_above_the_cap_keeps_the_rest() -> None:
    half, one = fmpz_poly([2 ** (BITS - 1), 2 ** (BITS - 1)]), fmpz_poly([2**BITS])
    part = _convolve(_Part(1, half, 0), _Part(2, one, 0), 0, 3)  # losses 3 (kept) and 4 (above the cap)
    assert (part.offset, part.masses, part.infinite, part.cut) == (3, fmpz_poly([2 ** (BITS - 1)]), 2 ** (BITS - 1),
                                                                   True)
    assert _convolve(_Part(1, fmpz_poly([2**BITS, 1]), 0), _Part(2, one, 0), 0, 3).cut  # one unit above
    kept = _convolve(_Part(1, fmpz_poly([2 ** (BITS - 1)]), 0), _Part(2, fmpz_poly([2 ** (BITS - 1)]), 0), 0, 5)
    assert kept.infinite == 0 and not kept.cut and kept.offset == 3 and kept.masses == fmpz_poly([2 ** (BITS - 2)])
    assert _convolve(_Part(1, fmpz_poly([1]), 0, True), _Part(2, one, 0), 0, 5).cut  # a part's cut is kept


def test_a_zero_mass_above_the_cap_is_no_cut() -> None:
    """The lattice's top loss carries no mass: moving nothing to +infinity is not a cut (the widening stops)."""
    lattice = _Lattice(fmpz_poly([0, 1]), 0, 2, Fraction(1))  # mass 0 at loss 2, mass 1 unit at loss 0
    part = _on_grid(lattice, Fraction(1), -5, 1)
    assert not part.cut and part.infinite == 0
    assert _on_grid(_Lattice(fmpz_poly([1, 1]), 0, 2, Fraction(1)), Fraction(1), -5, 1).cut


def test_bad_widen_and_target_deltas_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="widen"):
        privacy_curve([GaussianNoise(Fraction(1))], cells=1, widen=-1)

    def noises_for(rho: Fraction) -> list[GaussianNoise]:
        return [GaussianNoise(1 / (2 * rho))]

    for delta in ("0.1", 1.0, MIN_DELTA / 2):
        with pytest.raises(ValueError, match="for a certified target"):
            rho_for_epsilon_pld(20.0, delta, noises_for, cells=1, start=Fraction(1))  # type: ignore[arg-type]
    assert rho_for_epsilon_pld(40.0, MIN_DELTA, noises_for, cells=1, start=Fraction(1)) > 0  # the bound itself


@pytest.mark.parametrize("delta", ["0.1", True, 0.0, 1.0])
def test_a_bad_delta_is_refused_by_name(delta: object) -> None:
    with pytest.raises(ValueError, match="delta"):
        epsilon_pld([GaussianNoise(Fraction(1))], delta, cells=1)  # type: ignore[arg-type]
