"""The [[invariants]] and [[structural_zeros]] tables, and the neighbouring relation they allow."""

from __future__ import annotations

from typing import Any

from censusdp.geography.levels import Level
from censusdp.pipeline.config.model import BudgetConfig, Invariant, check_nothing_else, require
from censusdp.pipeline.config.schema import Schema
from censusdp.pipeline.errors import ConfigError


def parse_invariants(raw: dict[str, Any], source: str, levels: tuple[Level, ...], schema: Schema
                ) -> tuple[Invariant, ...]:
    entries = raw.get("invariants", [])
    names = [lv.name for lv in levels]
    out = []
    for i, entry in enumerate(entries):
        prefix = f"invariants[{i}]."
        check_nothing_else(entry, {"query", "levels"}, source, prefix)
        try:
            query = schema.parse_query(require(entry, "query", str, source, prefix))
        except ValueError as error:
            raise ConfigError(source, f"{prefix}query", str(error)) from None
        at = require(entry, "levels", list, source, prefix)
        for name in at:
            if name not in names:
                raise ConfigError(source, f"{prefix}levels", f"{name!r} is not a level")
        # an invariant below a level where the same query is free could be infeasible after rounding the
        # parent, so invariants must hold at a contiguous run of levels from the root down
        depth = max(names.index(n) for n in at) if at else -1
        if sorted(names.index(n) for n in at) != list(range(depth + 1)):
            raise ConfigError(source, f"{prefix}levels", "an invariant must hold at every level above it too "
                              f"(expected {names[: depth + 1]})")
        out.append(Invariant(query, tuple(at)))
    return tuple(out)


def parse_structural_zeros(raw: dict[str, Any], source: str, schema: Schema) -> tuple[dict[str, tuple[str, ...]], ...]:
    entries = raw.get("structural_zeros", [])
    out = []
    for i, entry in enumerate(entries):
        key = f"structural_zeros[{i}]"
        if not isinstance(entry, dict) or not entry:
            raise ConfigError(source, key, "expected a table of attribute = [values]")
        cells = {}
        for name, values in entry.items():
            if name not in schema.names:
                raise ConfigError(source, f"{key}.{name}", "unknown attribute")
            if not isinstance(values, list) or not values:
                raise ConfigError(source, f"{key}.{name}", "expected a non-empty list of values")
            for value in values:
                if str(value) not in schema.attribute(name).values:
                    raise ConfigError(source, f"{key}.{name}", f"{value!r} is not a value of {name}")
            cells[name] = tuple(str(v) for v in values)
        out.append(cells)
    return tuple(out)


def check_relation(budget: BudgetConfig, invariants: tuple[Invariant, ...], source: str) -> None:
    """Exact invariants and add-remove neighbours cannot both hold: an exact count reveals every addition or
    removal, so only replace-one neighbours that keep the invariants stay protected (the Census's choice)."""
    if budget.neighbouring == "add-remove" and invariants:
        first = invariants[0]
        raise ConfigError(source, "budget.neighbouring", f"add-remove cannot hold with invariants[0] "
                          f"({first.query.name} at {', '.join(first.levels)}) published exactly: an exact count "
                          "reveals every addition or removal; use neighbouring = \"replace-one\" (as the Census did) "
                          "or remove the [[invariants]]")
