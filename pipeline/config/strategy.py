"""The ``[budget]`` and ``[strategy]`` tables of a release configuration, and a budget stated as an (epsilon, delta)
target turned into the rho the certified accountant proves."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from typing import Any

from censusdp.geography.levels import Level
from censusdp.pipeline.config.model import (
    Accountant,
    BudgetConfig,
    Mechanism,
    Neighbouring,
    StrategyQuery,
    check_nothing_else,
    config_error_at,
    parse_fraction,
    require,
)
from censusdp.pipeline.config.schema import Schema
from censusdp.pipeline.dp.accounting import rho_for_epsilon_delta
from censusdp.pipeline.errors import ConfigError
from censusdp.pipeline.exact import DEFAULT_DELTA, parse_delta


def _shares(table: Any, source: str, key: str, expected: list[str]) -> dict[str, Fraction]:
    if not isinstance(table, dict):
        raise ConfigError(source, key, "expected a table of name = share")
    for name in expected:
        if name not in table:
            raise ConfigError(source, f"{key}.{name}", "missing share")
    for name in table:
        if name not in expected:
            raise ConfigError(source, f"{key}.{name}", f"not one of: {', '.join(expected)}")
    shares = {name: parse_fraction(table[name], source, f"{key}.{name}") for name in expected}
    for name, share in shares.items():
        if share <= 0:
            raise ConfigError(source, f"{key}.{name}", "share must be > 0")
    total = sum(shares.values(), Fraction(0))
    if total != 1:
        raise ConfigError(source, key, f"shares must sum to 1 exactly, they sum to {total}")
    return shares


def parse_budget(raw: dict[str, Any], source: str, levels: tuple[Level, ...]) -> BudgetConfig:
    table = require(raw, "budget", dict, source, "")
    check_nothing_else(table, {"rho", "epsilon", "delta", "neighbouring", "level_shares", "accountant"}, source,
                       "budget.")
    delta_text = str(table.get("delta", DEFAULT_DELTA))
    with config_error_at(source, "budget.delta"):
        delta = parse_delta(delta_text, "budget.delta")
    neighbouring = table.get("neighbouring", "replace-one")
    if neighbouring not in list(Neighbouring):
        raise ConfigError(source, "budget.neighbouring", f"one of: {', '.join(Neighbouring)}")
    target, accountant = None, None
    if ("rho" in table) == ("epsilon" in table):
        raise ConfigError(source, "budget.rho", "give exactly one of budget.rho or budget.epsilon (with delta)")
    if "rho" in table:
        rho = parse_fraction(table["rho"], source, "budget.rho")
    else:
        target = float(parse_fraction(table["epsilon"], source, "budget.epsilon"))
        if target <= 0:
            raise ConfigError(source, "budget.epsilon", "must be > 0")
        word = table.get("accountant", Accountant.PLD)
        if word not in list(Accountant):
            raise ConfigError(source, "budget.accountant", f"one of: {', '.join(Accountant)}")
        accountant = Accountant(word)
        rho = rho_for_epsilon_delta(target, delta)  # CKS20's answer; the PLD's search starts there (pld_target)
    if rho <= 0:
        raise ConfigError(source, "budget.rho", "must be > 0")
    shares = _shares(table.get("level_shares"), source, "budget.level_shares", [lv.name for lv in levels])
    return BudgetConfig(rho=rho, delta=delta, delta_text=delta_text, neighbouring=Neighbouring(neighbouring),
                        level_shares=shares, target_epsilon=target, accountant=accountant)


def parse_strategy(raw: dict[str, Any], source: str, levels: tuple[Level, ...], schema: Schema
              ) -> dict[str, tuple[StrategyQuery, ...]]:
    table = require(raw, "strategy", dict, source, "")
    names = [lv.name for lv in levels]
    for name in table:
        if name not in names:
            raise ConfigError(source, f"strategy.{name}", f"not a level (levels: {', '.join(names)})")
    strategy = {}
    for name in names:
        key = f"strategy.{name}"
        entries = table.get(name)
        entries = dict(entries) if isinstance(entries, dict) else None
        if not entries:
            raise ConfigError(source, key, "missing: every level needs its queries and their shares")
        mechanisms = entries.pop("mechanism", "gaussian")
        if mechanisms not in list(Mechanism):
            raise ConfigError(source, f"{key}.mechanism", f"one of: {', '.join(Mechanism)}")
        queries = []
        for query_name in entries:
            with config_error_at(source, f"{key}.{query_name!r}"):
                queries.append(schema.parse_query(query_name))
        shares = _shares(entries, source, key, list(entries))
        if len({q.name for q in queries}) != len(queries):
            raise ConfigError(source, key, "the same query is listed twice")
        strategy[name] = tuple(StrategyQuery(q, shares[raw_name], Mechanism(mechanisms))
                               for q, raw_name in zip(queries, entries, strict=True))
    return strategy


def pld_target(budget: BudgetConfig, strategy: dict[str, tuple[StrategyQuery, ...]], levels: tuple[Level, ...],
                source: str) -> BudgetConfig:
    """With ``budget.accountant = "pld"``, rho is the largest (rounded down) whose certified PLD epsilon of the
    strategy's noise meets the target (``pipeline.dp.pld.rho_for_epsilon_pld``); unlike CKS20's answer it depends
    on how rho is split, so it is solved once the strategy is read.  Every query must be Gaussian (a Laplace
    query's scale is set by the budget layer's rounding, which this layer does not import)."""
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
    return replace(budget, rho=rho)
