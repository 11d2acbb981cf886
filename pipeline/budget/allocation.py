"""Splitting the zCDP budget over levels x queries, exactly, and composing it back.

Accounting (seed chapter, §19.4–19.5):
- one query at one level releases a noisy histogram for every node of the level; nodes hold disjoint
  persons, so the level's release of that query costs the query's rho once (parallel composition,
  Prop. 19.30, which holds for zCDP by the same argument: a person's record affects one node only);
- queries at one level and the levels themselves compose sequentially: rho adds (Thm 19.37(i); Thm 19.26 is
  its pure-DP counterpart), so the release is sum(rho_q)-zCDP;
- a Gaussian query is a discrete Gaussian with sigma² = Δ₂²/(2·rho_q) (Thm 19.37(iii); CKS20 Thm 4), where
  the squared L2 sensitivity Δ₂² is 1 under add-remove and 2 under replace-one neighbours;
- a Laplace query (selectable per level in the strategy) is a discrete Laplace with scale b >= Δ₁/sqrt(2 rho_q)
  (b rational, rounded up so that it never spends more than allocated): epsilon = Δ₁/b pure DP (Thm 19.14's
  discrete analogue), i.e. epsilon²/2-zCDP; Δ₁ is 1 under add-remove and 2 under replace-one.
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
    """The budget one query at one level spends, and the noise it buys.

    ``rho`` is what the query spends (for Laplace at most what it was allocated); ``sigma2`` is the noise
    variance (exact for the Gaussian; for the Laplace a close rational used only as a post-processing
    weight); ``scale`` is the Laplace scale (None for the Gaussian).
    """

    level: str
    query: str
    rho: Fraction
    sigma2: Fraction
    mechanism: Mechanism = Mechanism.GAUSSIAN
    scale: Fraction | None = None

    def __post_init__(self) -> None:
        """The charge (``composed_rho``) and the noise (``release.noisy_measurements.noisy_answers``) both read the
        mechanism: a scale belongs to the Laplace, and the Laplace has one."""
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
    """Total zCDP cost of the release, recomputed from each query's noise through its privacy map.

    Both sensitivities are the neighbouring relation's (``Neighbouring``), passed explicitly: Δ₂² prices the
    Gaussian queries (``gaussian_rho``, Thm 19.37(iii)), Δ₁ the Laplace ones (``laplace_epsilon``, Thm 19.14,
    then Bun & Steinke Prop 1.4); the sum is sequential composition (Thm 19.37(i)).
    """
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
