"""Splitting the zCDP budget over levels x queries, exactly, and composing it back.

A level's nodes hold disjoint persons, so a query costs its rho once per level (Prop 19.30, also for zCDP); queries
and levels compose: rho adds (Thm 19.37(i)).  A Gaussian query has sigma² = Δ₂²/(2 rho_q) (Thm 19.37(iii); CKS20
Thm 4); a Laplace one a rational scale b >= Δ₁/sqrt(2 rho_q), rounded up so that it never spends more than allocated
(Thm 19.14 on Z: epsilon = Δ₁/b, epsilon²/2-zCDP).  Δ₂² and Δ₁ are 1 under add-remove, 2 under replace-one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from censusdp.pipeline.config.model import Mechanism, ReleaseConfig
from censusdp.pipeline.dp.accounting import zcdp_from_pure_dp
from censusdp.pipeline.dp.noise import gaussian_rho, gaussian_sigma2, laplace_epsilon

LAPLACE_SCALE_DENOMINATOR = 10**6  # the scale is rounded up to a multiple of 1e-6: at most 1e-6 more noise


@dataclass(frozen=True)
class QueryAllocation:
    """The budget one query at one level spends, and the noise it buys (``sigma2`` is exact for the Gaussian; for
    the Laplace, whose ``scale`` is set, a close rational used only as a post-processing weight)."""

    level: str
    query: str
    rho: Fraction
    sigma2: Fraction
    mechanism: Mechanism = Mechanism.GAUSSIAN
    scale: Fraction | None = None

    def __post_init__(self) -> None:
        """A scale belongs to the Laplace, and the Laplace has one: the charge and the noise both read the mechanism."""
        if (self.scale is not None) != (self.mechanism == Mechanism.LAPLACE):
            raise ValueError(f"{self.level}/{self.query}: a scale is given if and only if the mechanism is laplace")

    @property
    def expected_abs_error(self) -> float:
        """E|Z| per cell: sigma*sqrt(2/pi) for the Gaussian (continuous approximation), 2q/(1-q²) for the
        discrete Laplace with q = exp(-1/scale)."""
        if self.scale is not None:
            q = math.exp(-1 / float(self.scale))
            return 2 * q / (1 - q * q)
        return math.sqrt(float(self.sigma2)) * math.sqrt(2 / math.pi)


def laplace_scale_for(rho: Fraction, sensitivity1: int) -> Fraction:
    """The smallest multiple of 1e-6 that is >= Δ₁/sqrt(2 rho), found exactly: b² >= Δ₁²/(2 rho)."""
    target = Fraction(sensitivity1 * sensitivity1) / (2 * rho) * LAPLACE_SCALE_DENOMINATOR**2
    numerator = math.isqrt(math.ceil(target))
    if numerator * numerator < target:
        numerator += 1
    return Fraction(numerator, LAPLACE_SCALE_DENOMINATOR)


def laplace_variance(scale: Fraction) -> Fraction:
    """Variance 2q/(1-q)² of the discrete Laplace, q = exp(-1/scale), as a close rational (a weight only)."""
    q = math.exp(-1 / float(scale))
    return Fraction(2 * q / (1 - q) ** 2).limit_denominator(10**9)


def query_allocation(level: str, query: str, rho_q: Fraction, mechanism: Mechanism, sensitivity1: int,
                     sensitivity2_squared: int) -> QueryAllocation:
    if mechanism == Mechanism.LAPLACE:
        scale = laplace_scale_for(rho_q, sensitivity1)
        spent = Fraction(zcdp_from_pure_dp(laplace_epsilon(scale, sensitivity1)))
        return QueryAllocation(level, query, spent, laplace_variance(scale), mechanism, scale)
    return QueryAllocation(level, query, rho_q, gaussian_sigma2(rho_q, sensitivity2_squared), mechanism)


def allocate(config: ReleaseConfig) -> tuple[QueryAllocation, ...]:
    """rho_q = rho * level_share * query_share for every level and query, with the noise from the privacy map."""
    budget = config.budget
    out = []
    for level in config.levels:
        level_rho = budget.rho * budget.level_shares[level.name]
        for entry in config.strategy[level.name]:
            out.append(query_allocation(level.name, entry.query.name, level_rho * entry.share, entry.mechanism,
                                        budget.sensitivity1, budget.sensitivity2_squared))
    allocations = tuple(out)
    spent = composed_rho(allocations, sensitivity2_squared=budget.sensitivity2_squared,
                         sensitivity1=budget.sensitivity1)
    if spent > budget.rho or (spent != budget.rho and all(a.mechanism == Mechanism.GAUSSIAN for a in allocations)):
        raise AssertionError("allocation does not compose to the configured rho")  # exact: a bug, not rounding
    return allocations


def composed_rho(allocations: tuple[QueryAllocation, ...], *, sensitivity2_squared: int, sensitivity1: int) -> Fraction:
    """Total zCDP cost of the release, recomputed from each query's noise through its privacy map (Thm 19.37(i));
    both sensitivities are the neighbouring relation's (Δ₂² prices the Gaussian queries, Δ₁ the Laplace ones)."""
    total = Fraction(0)
    for a in allocations:
        if a.mechanism == Mechanism.LAPLACE:  # it has a scale (QueryAllocation.__post_init__)
            total += Fraction(zcdp_from_pure_dp(laplace_epsilon(a.scale, sensitivity1)))  # type: ignore[arg-type]
        else:
            total += gaussian_rho(a.sigma2, sensitivity2_squared)
    return total


def allocations_of(allocations: tuple[QueryAllocation, ...], level: str) -> tuple[QueryAllocation, ...]:
    """The queries of one level (named, never by position), in strategy order."""
    return tuple(a for a in allocations if a.level == level)


def level_rho(allocations: tuple[QueryAllocation, ...], level: str) -> Fraction:
    return sum((a.rho for a in allocations_of(allocations, level)), Fraction(0))
