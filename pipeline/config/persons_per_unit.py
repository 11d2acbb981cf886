"""Rules that tie the persons to the housing units they live in: ``[[units.persons_per_unit]]`` (docs/units.md).

At every node of a rule's levels, with P the persons in its cells and U the units in its cells:
``min * U <= P <= max * U``.  Enforcing it on published values is post-processing (``pipeline.release.persons_units``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from censusdp.geography.levels import Level
from censusdp.pipeline.config.model import require, tables_of
from censusdp.pipeline.config.schema import Schema
from censusdp.pipeline.errors import ConfigError

KEY = "persons_per_unit"  # under [units]
RULE_KEYS = {"name", "persons", "units", "min", "max", "levels", "each"}
Selection = tuple[tuple[str, tuple[str, ...]], ...]  # (attribute, the values selected), in the order written


@dataclass(frozen=True)
class PersonsPerUnit:
    """Every unit of the ``units`` cells holds between ``min_persons`` and ``max_persons`` of the ``persons`` cells'
    persons, at every node of ``levels``."""

    name: str
    persons: Selection
    units: Selection
    min_persons: int
    max_persons: int
    levels: tuple[str, ...]


def selection_mask(schema: Schema, selection: Selection) -> np.ndarray:
    """The cells of ``schema``'s detailed histogram a selection names: every listed attribute's value listed (the
    cube of the attributes' allowed values, flattened in the histogram's C order)."""
    mask = np.ones(schema.shape, dtype=bool)
    for name, values in selection:
        allowed = np.array([label in values for label in schema.attribute(name).values], dtype=bool)
        axis = schema.names.index(name)
        mask &= allowed.reshape([-1 if a == axis else 1 for a in range(len(schema.shape))])
    return mask.ravel()


def rules_matrix(schema: Schema, selections: list[Selection]) -> sp.csr_matrix:
    """(rules, cells) 0/1: row i adds the cells of ``selections[i]``."""
    return sp.csr_matrix(np.stack([selection_mask(schema, s) for s in selections]).astype(np.float64))


def parse_rules(units_table: dict[str, Any], source: str, persons: Schema, units: Schema,
                levels: tuple[Level, ...]) -> tuple[PersonsPerUnit, ...]:
    """The rules of ``[[units.persons_per_unit]]``, checked against both schemas; ``ConfigError`` naming the key."""
    names = [lv.name for lv in levels]
    rules: list[PersonsPerUnit] = []
    for i, (key, entry) in enumerate(tables_of(units_table.get(KEY, []), f"units.{KEY}", source, RULE_KEYS)):
        who = _selection(entry, "persons", persons, source, key)
        where = _selection(entry, "units", units, source, key)
        low, high = _count(entry, "min", 0, source, key), _count(entry, "max", None, source, key)
        if high < max(low, 1):
            raise ConfigError(source, f"{key}.max", f"expected at least max(min, 1) = {max(low, 1)}")
        rule_levels = tuple(entry.get("levels", names))
        if not isinstance(entry.get("levels", []), list) or any(lv not in names for lv in rule_levels):
            raise ConfigError(source, f"{key}.levels", f"expected a list of levels among {', '.join(names)}")
        name = entry.get("name", f"rule {i + 1}")
        if not isinstance(name, str) or not name:
            raise ConfigError(source, f"{key}.name", "expected a non-empty string")
        rules += _expanded(entry.get("each"), name, who, where, (low, high, rule_levels), source, key)
    _check_disjoint(rules, persons, units, source)
    return tuple(rules)


def _selection(entry: dict[str, Any], part: str, schema: Schema, source: str, key: str) -> Selection:
    table = require(entry, part, dict, source, f"{key}.")
    if not table:
        raise ConfigError(source, f"{key}.{part}", "expected at least one attribute")
    out = []
    for name, values in table.items():
        if name not in schema.names:
            raise ConfigError(source, f"{key}.{part}.{name}", f"not an attribute of the {part}' schema "
                              f"({', '.join(schema.names)})")
        domain = schema.attribute(name).values
        if not isinstance(values, list) or not values or any(v not in domain for v in values):
            raise ConfigError(source, f"{key}.{part}.{name}", f"expected a list of values among {', '.join(domain)}")
        out.append((name, tuple(values)))
    return tuple(out)


def _count(entry: dict[str, Any], part: str, default: int | None, source: str, key: str) -> int:
    if part not in entry and default is not None:
        return default
    value = require(entry, part, int, source, f"{key}.")
    if value < 0:
        raise ConfigError(source, f"{key}.{part}", "expected a non-negative integer")
    return int(value)


def _expanded(each: Any, name: str, who: Selection, where: Selection, limits: tuple[int, int, tuple[str, ...]],
              source: str, key: str) -> list[PersonsPerUnit]:
    """The rule, or with ``each = "attr"`` one rule per value of ``attr`` it selects in both universes."""
    low, high, levels = limits
    if each is None:
        return [PersonsPerUnit(name, who, where, low, high, levels)]
    persons_values, units_values = dict(who).get(each), dict(where).get(each)
    if not isinstance(each, str) or persons_values is None or units_values is None:
        raise ConfigError(source, f"{key}.each", "expected an attribute selected in both persons and units")
    if set(persons_values) != set(units_values):
        raise ConfigError(source, f"{key}.each", f"persons and units must select the same values of {each}")

    def only(selection: Selection, value: str) -> Selection:
        return tuple((a, (value,) if a == each else v) for a, v in selection)

    return [PersonsPerUnit(f"{name} {each}={value}", only(who, value), only(where, value), low, high, levels)
            for value in persons_values]


def _check_disjoint(rules: list[PersonsPerUnit], persons: Schema, units: Schema, source: str) -> None:
    """Each person and each unit is counted by one rule at most: the bounds of one rule assume no other counts
    them (a total shared out among the rules)."""
    for part, schema in (("persons", persons), ("units", units)):
        seen = np.zeros(schema.n_cells, dtype=bool)
        for rule in rules:
            mask = selection_mask(schema, getattr(rule, part))
            if (seen & mask).any():
                raise ConfigError(source, f"units.{KEY}", f"rule {rule.name!r} selects {part} cells an earlier rule "
                                  "selects: the rules' cells must not overlap")
            seen |= mask
