"""The ``[[recodes]]`` tables of a configuration: attributes defined as groupings of another's values.

A recode is a partition of its attribute's values (each in exactly one group), so its marginal is a coarsening of
the attribute's and the least-squares and rounding stages treat it as any query.
"""

from __future__ import annotations

from typing import Any

from censusdp.pipeline.config.schema import Attribute, Recode, Schema
from censusdp.pipeline.errors import ConfigError


def schema_with_recodes(raw: dict[str, Any], source: str, attributes: tuple[Attribute, ...]) -> Schema:
    """The schema of ``attributes`` and the configuration's recodes; ``ConfigError`` naming the key otherwise."""
    entries = raw.get("recodes", [])
    if not isinstance(entries, list):
        raise ConfigError(source, "recodes", "expected an array of tables ([[recodes]])")
    recodes = []
    for i, entry in enumerate(entries):
        key = f"recodes[{i}]"
        if not isinstance(entry, dict) or set(entry) != {"name", "of", "groups"}:
            raise ConfigError(source, key, "expected a table with exactly name, of and groups")
        name, of, groups = entry["name"], entry["of"], entry["groups"]
        if not isinstance(name, str) or not name.strip() or "*" in name or name in ("total", "detailed"):
            raise ConfigError(source, f"{key}.name", f"{name!r} is reserved or not a valid name")
        if not isinstance(of, str) or not isinstance(groups, dict) or not all(
                isinstance(members, list) for members in groups.values()):
            raise ConfigError(source, key, "of must name an attribute and groups be a table of label = [values]")
        recodes.append(Recode(name, of, tuple(str(label) for label in groups),
                              tuple(tuple(str(v) for v in members) for members in groups.values())))
        try:
            Schema(attributes, tuple(recodes))
        except ValueError as error:
            raise ConfigError(source, key, str(error)) from None
    return Schema(attributes, tuple(recodes))
