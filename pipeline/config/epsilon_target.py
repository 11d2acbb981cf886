"""A ``budget.epsilon`` target solved by the certified privacy curve (``budget.accountant = "pld"``, the default).
Unlike CKS20's answer (``load._budget``) it depends on how rho is split, so it is solved once the strategy is read.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction

from censusdp.geography.levels import Level
from censusdp.pipeline.config.model import Accountant, BudgetConfig, Mechanism, StrategyQuery
from censusdp.pipeline.errors import ConfigError


def pld_target(budget: BudgetConfig, strategy: dict[str, tuple[StrategyQuery, ...]], levels: tuple[Level, ...],
                source: str) -> BudgetConfig:
    """With ``budget.accountant = "pld"``, rho is the largest (rounded down) whose certified PLD epsilon of the
    strategy's noise meets the target (``pipeline.dp.pld.rho_for_epsilon_pld``); every query must be Gaussian
    (a Laplace query's scale is set by the budget layer's rounding, which this layer does not import)."""
    if budget.target_epsilon is None or budget.accountant is not Accountant.PLD:
        return budget
    if any(e.mechanism != Mechanism.GAUSSIAN for entries in strategy.values() for e in entries):
        raise ConfigError(source, "budget.accountant", 'a "pld" target needs every query gaussian; use "cks20"')
    from censusdp.pipeline.dp.noise import gaussian_sigma2
    from censusdp.pipeline.dp.pld import GaussianNoise, rho_for_epsilon_pld

    shares = [budget.level_shares[lv.name] * e.share for lv in levels for e in strategy[lv.name]]

    def noises(rho: Fraction) -> list[GaussianNoise]:
        return [GaussianNoise(gaussian_sigma2(rho * share, budget.sensitivity2_squared)) for share in shares]

    try:
        rho = rho_for_epsilon_pld(budget.target_epsilon, budget.delta, noises, cells=budget.sensitivity2_squared,
                                  start=budget.rho)
    except ValueError as error:  # public: the target and delta are configuration values
        raise ConfigError(source, "budget.delta", f"the certified (pld) accountant cannot meet this target: {error}; "
                          'use accountant = "cks20" or a larger delta') from None
    return dataclasses.replace(budget, rho=rho)
