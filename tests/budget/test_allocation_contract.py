"""Contract tests of pipeline.budget.allocation: the exact split of rho over levels x queries and its recomposition.

Accounting (seed chapter §19.4-19.5): a query at a level costs its rho once (the level's nodes are disjoint,
Prop 19.30 for zCDP); queries and levels compose by adding rho (Thm 19.37(i)).  A Gaussian query gets
sigma^2 = Delta_2^2 / (2 rho_q) exactly (Thm 19.37(iii)); a Laplace query the smallest scale on the 1e-6 grid with
b >= Delta_1 / sqrt(2 rho_q), which costs (Delta_1 / b)^2 / 2 <= rho_q (Thm 19.14's discrete analogue, epsilon^2/2
zCDP).  Expected values below are computed independently, with integer and Fraction arithmetic.
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath as mp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from censusdp.geography.levels import Level
from censusdp.pipeline.budget.allocation import (
    QueryAllocation,
    allocate,
    allocations_of,
    composed_rho,
    laplace_scale_for,
    laplace_variance,
    level_rho,
    query_allocation,
)
from censusdp.pipeline.config.model import BudgetConfig, ReleaseConfig, StrategyQuery
from censusdp.pipeline.config.schema import Query

GRID = 10**6  # the Laplace scale is a multiple of 1e-6


def smallest_grid_scale(rho: Fraction, sensitivity1: int) -> Fraction:
    """The smallest n / 10^6 with (n / 10^6)^2 >= Delta_1^2 / (2 rho), by integer search around the float root."""
    n = max(0, int(sensitivity1 / math.sqrt(2 * rho) * GRID) - 3)
    while Fraction(n, GRID) ** 2 < Fraction(sensitivity1**2) / (2 * rho):
        n += 1
    return Fraction(n, GRID)


def discrete_laplace_variance(scale: Fraction) -> mp.mpf:
    """sum_z z^2 P(z), P(z) = (1-q)/(1+q) q^|z|, q = exp(-1/scale), summed at 40 digits (no closed form used)."""
    with mp.workdps(40):
        q = mp.exp(-1 / (mp.mpf(scale.numerator) / scale.denominator))
        return +(2 * (1 - q) / (1 + q) * mp.nsum(lambda z: z * z * q**z, [1, mp.inf]))


# ---------------------------------------------------------------- the Laplace scale and its variance


@pytest.mark.parametrize(
    ("rho", "sensitivity1", "expected"),
    [
        (Fraction(1, 2), 1, Fraction(1)),  # Delta/sqrt(2 rho) = 1 exactly: no rounding up
        (Fraction(1, 8), 1, Fraction(2)),
        (Fraction(2), 2, Fraction(1)),  # exact under replace-one too
        (Fraction(1, 2 * 10**12), 1, Fraction(10**6)),  # a grid point far from 1
        (Fraction(1, 3), 1, Fraction(1224745, GRID)),  # sqrt(3/2) = 1.22474487...: rounded up, not to nearest
        (Fraction(1, 3), 2, Fraction(2449490, GRID)),  # sqrt(6) = 2.44948974...
        (Fraction(1, 4), 1, Fraction(1414214, GRID)),  # sqrt(2) = 1.41421356...
        (Fraction(50), 1, Fraction(100000, GRID)),  # 0.1 exactly
        (Fraction(1, 2 * 999999**2) * GRID**2, 1, Fraction(999999, GRID)),  # target exactly on the grid (n^2)
    ],
)
def test_laplace_scale_is_the_smallest_grid_point_above_the_target(rho: Fraction, sensitivity1: int,
                                                                   expected: Fraction) -> None:
    assert smallest_grid_scale(rho, sensitivity1) == expected
    scale = laplace_scale_for(rho, sensitivity1)
    assert scale == expected and isinstance(scale, Fraction)


@settings(max_examples=60, deadline=None)
@given(rho=st.fractions(Fraction(1, 10**6), 10**4, max_denominator=10**9), sensitivity1=st.sampled_from([1, 2]))
def test_laplace_scale_never_spends_more_than_allocated(rho: Fraction, sensitivity1: int) -> None:
    """b on the grid, b^2 >= Delta^2/(2 rho) (so epsilon^2/2 <= rho) and one grid step less would overspend."""
    scale = laplace_scale_for(rho, sensitivity1)
    assert (scale * GRID).denominator == 1
    assert scale == smallest_grid_scale(rho, sensitivity1)
    assert (Fraction(sensitivity1) / scale) ** 2 / 2 <= rho
    assert (Fraction(sensitivity1) / (scale - Fraction(1, GRID))) ** 2 / 2 > rho


def test_laplace_scale_on_a_target_just_above_a_square() -> None:
    """target = n^2 + 1/2 (ceil gives n^2 + 1, isqrt n): the answer is n + 1; target = n^2 - 1/2: n."""
    n = 1234567
    for target, expected in ((Fraction(2 * n * n + 1, 2), n + 1), (Fraction(2 * n * n - 1, 2), n)):
        rho = Fraction(GRID**2) / (2 * target)  # sensitivity 1: target = 10^12 / (2 rho)
        assert laplace_scale_for(rho, 1) == Fraction(expected, GRID)


@pytest.mark.parametrize("scale", [Fraction(1), Fraction(1224745, GRID), Fraction(1, 10), Fraction(5), Fraction(37, 3)])
def test_laplace_variance_is_the_discrete_laplace_variance_as_a_close_rational(scale: Fraction) -> None:
    variance = laplace_variance(scale)
    assert isinstance(variance, Fraction) and 0 < variance.denominator <= 10**9
    true = discrete_laplace_variance(scale)
    assert abs(variance - Fraction(str(true))) <= Fraction(str(true)) * Fraction(1, 10**12) + Fraction(1, 10**9)
    # it is the best rational with denominator <= 1e9 for the float 2q/(1-q)^2, q = exp(-1/b)
    q = math.exp(-1 / float(scale))
    assert variance == Fraction(2 * q / (1 - q) ** 2).limit_denominator(10**9)


# ---------------------------------------------------------------- one query's allocation


@pytest.mark.parametrize(("rho_q", "s2"), [(Fraction(1, 3), 2), (Fraction(1, 3), 1), (Fraction(7, 5), 2)])
def test_gaussian_query_allocation_is_exact(rho_q: Fraction, s2: int) -> None:
    a = query_allocation("lvl", "qry", rho_q, "gaussian", 2, s2)
    assert a == QueryAllocation("lvl", "qry", rho_q, Fraction(s2) / (2 * rho_q), "gaussian", None)


@pytest.mark.parametrize(("rho_q", "s1"),
                         [(Fraction(1, 3), 1), (Fraction(1, 3), 2), (Fraction(1, 2), 1), (Fraction(9), 2)])
def test_laplace_query_allocation_spends_what_its_scale_costs(rho_q: Fraction, s1: int) -> None:
    a = query_allocation("lvl", "qry", rho_q, "laplace", s1, 2)
    scale = smallest_grid_scale(rho_q, s1)
    spent = (Fraction(s1) / scale) ** 2 / 2
    assert a == QueryAllocation("lvl", "qry", spent, laplace_variance(scale), "laplace", scale)
    assert spent <= rho_q and isinstance(a.rho, Fraction)


# ---------------------------------------------------------------- the whole release


def config(rho: Fraction, neighbouring: str, level_shares: dict[str, Fraction],
           strategy: dict[str, list[tuple[str, Fraction, str]]]) -> ReleaseConfig:
    """A release configuration with only what the budget reads (levels, budget, strategy); the loader's
    validation is bypassed on purpose, so that shares not summing to one reach ``allocate``."""
    budget = BudgetConfig(rho=rho, delta=1e-10, delta_text="1e-10", neighbouring=neighbouring,
                          level_shares=level_shares)
    return ReleaseConfig(
        source="test", input=None, ledger=None, output=None,  # type: ignore[arg-type]
        levels=tuple(Level(name, width) for width, name in enumerate(level_shares)), schema=None,  # type: ignore[arg-type]
        budget=budget,
        strategy={level: tuple(StrategyQuery(Query(q, ()), share, mech) for q, share, mech in entries)
                  for level, entries in strategy.items()},
    )


SHARES = {"root": Fraction(1, 4), "county": Fraction(3, 4)}
STRATEGY = {"root": [("total", Fraction(1, 3), "gaussian"), ("detailed", Fraction(2, 3), "gaussian")],
            "county": [("detailed", Fraction(1), "gaussian")]}


@pytest.mark.parametrize(("neighbouring", "s2"), [("replace-one", 2), ("add-remove", 1)])
def test_allocate_splits_rho_exactly_in_level_then_strategy_order(neighbouring: str, s2: int) -> None:
    rho = Fraction(5, 2)
    allocations = allocate(config(rho, neighbouring, SHARES, STRATEGY))
    expected = [("root", "total", rho / 12), ("root", "detailed", rho / 6), ("county", "detailed", rho * 3 / 4)]
    assert allocations == tuple(QueryAllocation(lv, q, r, Fraction(s2) / (2 * r), "gaussian") for lv, q, r in expected)
    assert sum(a.rho for a in allocations) == rho == composed_rho(allocations, sensitivity2_squared=s2, sensitivity1=s2)
    assert level_rho(allocations, "root") == rho / 4 and level_rho(allocations, "county") == rho * 3 / 4
    assert level_rho(allocations, "tract") == 0 and isinstance(level_rho(allocations, "tract"), Fraction)


@pytest.mark.parametrize(("neighbouring", "s1"), [("replace-one", 2), ("add-remove", 1)])
def test_allocate_with_a_laplace_level_spends_at_most_rho(neighbouring: str, s1: int) -> None:
    rho = Fraction(1, 3)
    strategy = {**STRATEGY, "county": [("detailed", Fraction(1), "laplace")]}
    allocations = allocate(config(rho, neighbouring, SHARES, strategy))
    laplace = allocations[-1]
    scale = smallest_grid_scale(rho * 3 / 4, s1)
    assert laplace == QueryAllocation("county", "detailed", (Fraction(s1) / scale) ** 2 / 2, laplace_variance(scale),
                                      "laplace", scale)
    spent = rho / 4 + laplace.rho
    assert spent < rho
    # Delta_2^2 = Delta_1 for histograms (1 or 2)
    assert composed_rho(allocations, sensitivity2_squared=s1, sensitivity1=s1) == spent
    assert level_rho(allocations, "county") == laplace.rho


def test_composed_rho_recomputes_each_cost_from_the_noise() -> None:
    """The total is recomputed through the privacy maps (sigma^2 and the Laplace scale), not read from .rho."""
    gaussian = QueryAllocation("a", "q", Fraction(99), Fraction(3), "gaussian")  # .rho deliberately wrong
    laplace = QueryAllocation("b", "q", Fraction(99), Fraction(1), "laplace", Fraction(4))
    def rho(allocations: tuple[QueryAllocation, ...], s2: int, s1: int) -> Fraction:
        return composed_rho(allocations, sensitivity2_squared=s2, sensitivity1=s1)

    assert rho((gaussian,), 2, 1) == Fraction(1, 3) and rho((gaussian,), 1, 2) == Fraction(1, 6)
    assert rho((laplace,), 2, 1) == Fraction(1, 32)  # Delta_1 = 1: (1/4)^2 / 2
    assert rho((laplace,), 1, 2) == Fraction(1, 8)
    assert rho((gaussian, laplace, gaussian), 1, 2) == Fraction(1, 6) * 2 + Fraction(1, 8)
    assert rho((), 2, 2) == 0 and isinstance(rho((), 2, 2), Fraction)


def test_composed_rho_takes_both_sensitivities_by_name() -> None:
    """No default sensitivity (a forgotten one would price replace-one as add-remove) and no positional swap."""
    gaussian = QueryAllocation("a", "q", Fraction(1), Fraction(3), "gaussian")
    with pytest.raises(TypeError):
        composed_rho((gaussian,), sensitivity2_squared=2)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        composed_rho((gaussian,), 2, 2)  # type: ignore[misc]


def test_level_rho_adds_the_queries_of_one_level_only() -> None:
    allocations = (QueryAllocation("a", "x", Fraction(1, 3), Fraction(1)),
                   QueryAllocation("b", "x", Fraction(1, 5), Fraction(1)),
                   QueryAllocation("a", "y", Fraction(1, 7), Fraction(1)))
    assert level_rho(allocations, "a") == Fraction(10, 21) and level_rho(allocations, "b") == Fraction(1, 5)
    assert level_rho((), "a") == 0


def test_allocations_of_a_level_are_its_own_in_strategy_order() -> None:
    """The one filter of allocations by level name (the release, the run loader and re-runs use it)."""
    x, y, z = (QueryAllocation("a", "x", Fraction(1, 3), Fraction(1)),
               QueryAllocation("b", "x", Fraction(1, 5), Fraction(1)),
               QueryAllocation("a", "y", Fraction(1, 7), Fraction(1)))
    assert allocations_of((x, y, z), "a") == (x, z) and allocations_of((x, y, z), "b") == (y,)
    assert allocations_of((x, y, z), "c") == () and allocations_of((), "a") == ()
    assert type(allocations_of((x, y, z), "a")) is tuple


@pytest.mark.parametrize(
    ("shares", "strategy"),
    [
        ({"root": Fraction(1, 4), "county": Fraction(1, 2)}, STRATEGY),  # gaussian only, under-spent
        ({"root": Fraction(1, 4), "county": Fraction(1)}, STRATEGY),  # gaussian only, over-spent
        (SHARES, {**STRATEGY, "root": [("total", Fraction(1, 2), "gaussian"), ("detailed", Fraction(1), "laplace")]}),
    ],
    ids=["gaussian-under", "gaussian-over", "laplace-over"],
)
def test_allocate_refuses_shares_that_do_not_compose_to_rho(
        shares: dict[str, Fraction], strategy: dict[str, list[tuple[str, Fraction, str]]]) -> None:
    """A Gaussian release must spend exactly rho; no release may spend more (the loader prevents both)."""
    with pytest.raises(AssertionError, match="^allocation does not compose to the configured rho$"):
        allocate(config(Fraction(1), "replace-one", shares, strategy))


def test_allocate_accepts_a_laplace_release_spending_less() -> None:
    strategy = {**STRATEGY, "root": [("total", Fraction(1, 3), "laplace"), ("detailed", Fraction(2, 3), "gaussian")]}
    allocations = allocate(config(Fraction(1), "add-remove", SHARES, strategy))
    assert [a.mechanism for a in allocations] == ["laplace", "gaussian", "gaussian"]
    assert composed_rho(allocations, sensitivity2_squared=1, sensitivity1=1) < 1


def test_the_mechanism_and_the_scale_agree() -> None:
    """The charge and the noise both follow the mechanism: a Gaussian with a scale or a Laplace without one is refused
    (a Gaussian priced as a Laplace would be charged 1/500000 for rho = 100)."""
    for mechanism, scale in (("gaussian", Fraction(1000)), ("laplace", None)):
        with pytest.raises(ValueError, match="^a/q: a scale is given if and only if the mechanism is laplace$"):
            QueryAllocation("a", "q", Fraction(1), Fraction(1, 100), mechanism, scale)  # type: ignore[arg-type]
    assert QueryAllocation("a", "q", Fraction(1), Fraction(2), "laplace", Fraction(1)).scale == 1
    assert QueryAllocation("a", "q", Fraction(1), Fraction(2)).mechanism == "gaussian"
