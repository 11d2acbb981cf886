"""The reconciliation method, the multi-pass order and the solver of ``[postprocess]`` (docs/reconciliation.md):
post-processing, so no choice changes the privacy cost; checked when the configuration loads, before any charge.
"""

from __future__ import annotations

from typing import Any

from censusdp.geography.levels import Level
from censusdp.pipeline.config.model import (  # noqa: F401 - the data classes are part of this module's interface
    DEFAULT_ROUNDING,
    DEFAULT_TOLERANCE,
    Invariant,
    LevelPasses,
    Reconciliation,
    ReconciliationMethod,
    StrategyQuery,
    config_error_at,
    parse_fraction,
    tables_of,
)
from censusdp.pipeline.config.schema import DETAILED, Query, Schema
from censusdp.pipeline.errors import ConfigError


def check_solver_setting(solver: str, source: str, levels: tuple[Level, ...],
                         strategy: dict[str, tuple[StrategyQuery, ...]], invariants: tuple[Invariant, ...]) -> None:
    """``postprocess.solver`` against the vocabulary ``reconcile_level`` shares (``least_squares.check_solver``):
    a forced path must apply at every level (``reconcile_level`` refuses it where it does not)."""
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
    with config_error_at(source, "postprocess.solver"):
        check_solver(solver)


def parse_reconciliation(table: dict[str, Any], source: str, levels: tuple[Level, ...], schema: Schema,
                         measured: dict[str, set[str]]) -> Reconciliation:
    """The reconciliation keys of ``[postprocess]``; ``measured`` is each level's measured query names.  A forced
    ``solver = "fast"`` (closed forms: the detailed cells alone, one pass, cell-wise rounding) needs
    ``level_by_level``, one pass and no rounding marginal."""
    try:
        method = ReconciliationMethod(table.get("reconciliation", ReconciliationMethod.FULL_INFORMATION))
    except ValueError:
        raise ConfigError(source, "postprocess.reconciliation",
                          f"expected one of {', '.join(ReconciliationMethod)}") from None
    default_rounding = _marginals(table.get("rounding", list(DEFAULT_ROUNDING)), source, "postprocess.rounding",
                                  schema)
    passes = {level.name: LevelPasses(rounding=default_rounding) for level in levels}
    seen: set[str] = set()
    entries = table.get("passes", [])
    for key, entry in tables_of(entries, "postprocess.passes", source, {"levels", "l2", "rounding", "tolerance"}):
        prefix = f"{key}."
        names = entry.get("levels", [lv.name for lv in levels])
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ConfigError(source, prefix + "levels", "expected a list of level names")
        for name in names:
            if name not in passes:
                raise ConfigError(source, prefix + "levels", f"unknown level {name!r}")
            if name in seen:
                raise ConfigError(source, prefix + "levels", f"level {name!r} is given passes twice")
        seen.update(names)
        rounding = (_marginals(entry["rounding"], source, prefix + "rounding", schema) if "rounding" in entry
                    else default_rounding)
        tolerance = parse_fraction(entry.get("tolerance", str(DEFAULT_TOLERANCE)), source, prefix + "tolerance")
        if tolerance < 0:
            raise ConfigError(source, prefix + "tolerance", "must be >= 0")
        for name in names:
            l2 = _l2(entry.get("l2", []), source, prefix + "l2", schema,
                     None if method is ReconciliationMethod.FULL_INFORMATION else measured[name], name)
            passes[name] = LevelPasses(l2=l2, rounding=rounding, tolerance=tolerance)
    if table.get("solver") == "fast" and (method is ReconciliationMethod.FULL_INFORMATION or any(
            len(p.l2) > 1 or p.rounding for p in passes.values())):
        raise ConfigError(source, "postprocess.solver", "fast needs reconciliation = \"level_by_level\", one "
                          "least-squares pass and rounding = [] (it fits the detailed cells alone); use auto")
    return Reconciliation(method=method, passes=passes)


def _marginals(value: Any, source: str, key: str, schema: Schema) -> tuple[Query, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(source, key, "expected a list of query names")
    queries = []
    for name in value:
        query = _query(name, source, key, schema)
        if query.name == DETAILED:
            raise ConfigError(source, key, "the detailed cells are always rounded last: list only marginals")
        queries.append(query)
    if len({q.name for q in queries}) != len(queries):
        raise ConfigError(source, key, "a query is listed twice")
    return tuple(queries)


def _l2(value: Any, source: str, key: str, schema: Schema, measured: set[str] | None, level: str
        ) -> tuple[tuple[str, ...], ...]:
    if not isinstance(value, list) or not all(isinstance(g, list) and g for g in value):
        raise ConfigError(source, key, "expected a list of non-empty lists of query names")
    groups, seen = [], set()
    for group in value:
        names = []
        for name in group:
            if not isinstance(name, str):
                raise ConfigError(source, key, "expected query names")
            query = _query(name, source, key, schema)
            if measured is not None and query.name not in measured:
                raise ConfigError(source, key, f"{query.name!r} is not measured at level {level!r} (with "
                                  "level_by_level, a pass fits the level's own measurements)")
            if query.name not in seen:  # production's ordering names some queries twice: the first one counts
                names.append(query.name)
                seen.add(query.name)
        if names:
            groups.append(tuple(names))
    return tuple(groups)


def _query(name: str, source: str, key: str, schema: Schema) -> Query:
    try:
        return schema.parse_query(name)
    except (KeyError, ValueError) as error:
        raise ConfigError(source, key, f"unknown query {name!r} ({error})") from None
