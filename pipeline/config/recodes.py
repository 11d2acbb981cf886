"""The ``[[recodes]]`` tables of a configuration: attributes defined as a partition of another's values, so the
least-squares and rounding stages treat a recode's marginal as any query's.
"""

from __future__ import annotations

from typing import Any

from censusdp.pipeline.config.schema import DETAILED, TOTAL, Attribute, Recode, Schema
from censusdp.pipeline.errors import ConfigError


def schema_with_recodes(raw: dict[str, Any], source: str, attributes: tuple[Attribute, ...]) -> Schema:
    """The schema of ``attributes`` and the configuration's recodes; ``ConfigError`` naming the key otherwise."""
    entries = raw.get("recodes", [])
    if not isinstance(entries, list):
        raise ConfigError(source, "recodes", "expected an array of tables ([[recodes]])")
    schema = Schema(attributes)
    for i, entry in enumerate(entries):
        key = f"recodes[{i}]"
        if not isinstance(entry, dict) or set(entry) != {"name", "of", "groups"}:
            raise ConfigError(source, key, "expected a table with exactly name, of and groups")
        name, of, groups = entry["name"], entry["of"], entry["groups"]
        if not isinstance(name, str) or not name.strip() or "*" in name or name in (TOTAL, DETAILED):
            raise ConfigError(source, f"{key}.name", f"{name!r} is reserved or not a valid name")
        if not isinstance(of, str) or not isinstance(groups, dict) or not all(
                isinstance(members, list) for members in groups.values()):
            raise ConfigError(source, key, "of must name an attribute and groups be a table of label = [values]")
        recode = Recode(name, of, tuple(str(label) for label in groups),
                        tuple(tuple(str(v) for v in members) for members in groups.values()))
        try:
            schema = Schema(attributes, (*schema.recodes, recode))
        except ValueError as error:
            raise ConfigError(source, key, str(error)) from None
    return schema
