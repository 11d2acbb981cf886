"""Splitting the zCDP budget over levels x queries, exactly, and composing it back.

Accounting (seed chapter, §19.4–19.5):
- one query at one level releases a noisy histogram for every node of the level; nodes hold disjoint
  persons, so the level's release of that query costs the query's rho once (parallel composition,
  Prop. 19.30, which holds for zCDP by the same argument: a person's record affects one node only);
- queries at one level and the levels themselves compose sequentially: rho adds (Thm 19.37(i); Thm 19.26 is
  its pure-DP counterpart), so the release is sum(rho_q)-zCDP;
- each query is a discrete Gaussian with sigma² = Δ₂²/(2·rho_q) (Thm 19.37(iii); CKS20 Thm 4), where the
  squared L2 sensitivity Δ₂² is 1 under add-remove and 2 under replace-one neighbours.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from math import pi, sqrt

from pipeline.config import ReleaseConfig
from pipeline.noise import gaussian_rho, gaussian_sigma2


@dataclass(frozen=True)
class QueryAllocation:
    """The budget of one query at one level, and the noise variance it buys."""

    level: str
    query: str
    rho: Fraction
    sigma2: Fraction
    mechanism: str = "gaussian"

    @property
    def expected_abs_error(self) -> float:
        """E|Z| per cell, by the continuous Gaussian's sigma*sqrt(2/pi) (a close approximation for sigma >= 1)."""
        return sqrt(float(self.sigma2)) * sqrt(2 / pi)


def allocate(config: ReleaseConfig) -> tuple[QueryAllocation, ...]:
    """rho_q = rho * level_share * query_share for every level and query, with sigma² from the privacy map."""
    budget = config.budget
    out = []
    for level in config.levels:
        level_rho = budget.rho * budget.level_shares[level.name]
        for entry in config.strategy[level.name]:
            rho_q = level_rho * entry.share
            sigma2 = gaussian_sigma2(rho_q, budget.sensitivity2_squared)
            out.append(QueryAllocation(level.name, entry.query.name, rho_q, sigma2, entry.mechanism))
    allocations = tuple(out)
    spent = composed_rho(allocations, budget.sensitivity2_squared)
    if spent != budget.rho:  # exact arithmetic: anything else is a bug, never a rounding error
        raise AssertionError("allocation does not compose to the configured rho")
    return allocations


def composed_rho(allocations: tuple[QueryAllocation, ...], sensitivity2_squared: int) -> Fraction:
    """Total zCDP cost of the release, recomputed from each query's sigma² through the privacy map."""
    return sum((gaussian_rho(a.sigma2, sensitivity2_squared) for a in allocations), Fraction(0))


def level_rho(allocations: tuple[QueryAllocation, ...], level: str) -> Fraction:
    return sum((a.rho for a in allocations if a.level == level), Fraction(0))
