"""The seed chapter's accounting tools side by side for one configured strategy (``censusdp budget CONFIG``).

The release is accounted in zCDP (the manifest's figure); the other rows certify the same noise by the chapter's other
tools, to show why zCDP is used.  A level's nodes hold disjoint persons: each level x query counts once (Prop. 19.30).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from censusdp.pipeline.budget.allocation import QueryAllocation, composed_rho
from censusdp.pipeline.dp.accounting import (
    advanced_composition,
    basic_composition,
    epsilon_bun_steinke,
    epsilon_cks20,
    group_privacy_zcdp,
)
from censusdp.pipeline.dp.pld import GaussianNoise, LaplaceNoise, epsilon_pld

PLD_FALLBACK = ("the certified privacy curve could not hold this delta (its mass at +infinity stayed above a "
                "sixteenth of delta): epsilon_pld is the CKS20 figure of the release's composed rho")


@dataclass(frozen=True)
class PldEpsilon:
    """epsilon at delta of a release's noise, by its certified curve or (``note`` set) CKS20: an upper bound."""

    epsilon: float
    note: str | None = None


def epsilon_pld_of(allocations: tuple[QueryAllocation, ...], delta: float, *, sensitivity2_squared: int,
                   sensitivity1: int) -> PldEpsilon:
    """epsilon at delta of the release's noise (rounded up): ``sensitivity2_squared`` is also the number of cells a
    person's change moves per query, ``sensitivity1`` prices a Laplace query in the fallback (``Neighbouring``).
    Never raises for a valid delta: it runs before the charge, and must not stop a release already paid for."""
    noises = [GaussianNoise(a.sigma2) if a.scale is None else LaplaceNoise(a.scale) for a in allocations]
    certified = epsilon_pld(noises, delta, cells=sensitivity2_squared)  # one cell's noise per level x query
    if certified is not None:
        return PldEpsilon(certified)
    rho = composed_rho(allocations, sensitivity2_squared=sensitivity2_squared, sensitivity1=sensitivity1)
    return PldEpsilon(epsilon_cks20(rho, delta), PLD_FALLBACK)


def comparison_rows(allocations: tuple[QueryAllocation, ...], delta: float, household: int = 4,
                    pld_epsilon: float | None = None) -> list[dict[str, Any]]:
    rho = sum((a.rho for a in allocations), Fraction(0))
    k = len(allocations)
    log_inv_delta = math.log(1 / delta)
    alpha = 1 + math.sqrt(log_inv_delta / float(rho))
    per_query = [epsilon_cks20(a.rho, delta / k) for a in allocations]
    basic_eps, basic_delta = basic_composition(per_query, [delta / k] * k)
    eps0 = max(epsilon_cks20(a.rho, delta / (2 * k)) for a in allocations)
    advanced_eps, advanced_delta = advanced_composition(eps0, delta / (2 * k), k, delta / 2)
    group_rho = group_privacy_zcdp(rho, household)
    return [
        {"method": "zCDP + CKS20 conversion (reported)", "theorem": "Thm 19.37, CKS20 Cor. 13",
         "epsilon": epsilon_cks20(rho, delta), "delta": delta},
        {"method": f"Renyi DP at best alpha = {alpha:.3g}", "theorem": "Thm 19.37(i)-(ii)",
         "epsilon": epsilon_bun_steinke(rho, delta), "delta": delta},
        {"method": f"basic composition of {k} releases", "theorem": "Thm 19.26",
         "epsilon": basic_eps, "delta": basic_delta},
        {"method": f"advanced composition of {k} releases", "theorem": "Thm 19.27",
         "epsilon": advanced_eps, "delta": advanced_delta},
        {"method": f"group privacy, household of {household}", "theorem": "Thm 19.31 (zCDP: rho h^2)",
         "epsilon": epsilon_cks20(group_rho, delta), "delta": delta},
    ] + ([{"method": "privacy curve of the composed noise (PLD)", "theorem": "Def 19.6, Thm 19.25 (certified)",
           "epsilon": pld_epsilon, "delta": delta}] if pld_epsilon is not None else [])
