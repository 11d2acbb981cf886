"""The ``postprocess.solver`` setting, checked when the configuration loads (before any budget is charged)
against the vocabulary ``reconcile_level`` shares (``postprocess.least_squares.check_solver``)."""

from __future__ import annotations

from censusdp.geography.levels import Level
from censusdp.pipeline.config.model import Invariant, StrategyQuery
from censusdp.pipeline.config.schema import DETAILED
from censusdp.pipeline.errors import ConfigError


def check_solver_setting(solver: str, source: str, levels: tuple[Level, ...],
                         strategy: dict[str, tuple[StrategyQuery, ...]], invariants: tuple[Invariant, ...]) -> None:
    """The solver is checked now, before any budget is charged, not when the first level is reconciled: a forced
    path must apply at every level (``reconcile_level`` refuses it where it does not)."""
    from censusdp.postprocess.least_squares import SolverPath, check_solver

    if solver == SolverPath.FIRST_ORDER:
        raise ConfigError(source, "postprocess.solver", "first_order needs a parent level and serves the batches "
                          "below the root that \"auto\" gives it; use auto")
    if solver == SolverPath.FAST:
        for level in levels:
            if any(q.query.name != DETAILED for q in strategy[level.name]) or any(
                    level.name in i.levels for i in invariants):
                raise ConfigError(source, "postprocess.solver", f"fast needs only the detailed query and no "
                                  f"invariant at every level ({level.name} has others); use auto")
    try:
        check_solver(solver)
    except ValueError as error:
        raise ConfigError(source, "postprocess.solver", str(error)) from None
