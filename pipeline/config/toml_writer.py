"""A small TOML writer for release configurations (``tomllib`` reads TOML but cannot write it).

It covers what a configuration holds: tables, nested tables (``[budget.level_shares]``), arrays of tables
(``[[levels]]``), strings, integers, floats, booleans, arrays and inline tables.  Comments are not kept.
"""

from __future__ import annotations

import json
import re
from typing import Any

BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _key(key: str) -> str:
    return key if BARE_KEY.fullmatch(key) else json.dumps(key)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def _is_table_array(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _table(lines: list[str], path: list[str], table: dict[str, Any]) -> None:
    scalars = {k: v for k, v in table.items() if not isinstance(v, dict) and not _is_table_array(v)}
    if path and (scalars or not any(isinstance(v, dict) for v in table.values())):
        lines.append("\n[" + ".".join(_key(p) for p in path) + "]")
    lines.extend(f"{_key(k)} = {_value(v)}" for k, v in scalars.items())
    for key, value in table.items():
        if isinstance(value, dict):
            _table(lines, [*path, key], value)
        elif _is_table_array(value):
            for item in value:
                lines.append("\n[[" + ".".join(_key(p) for p in [*path, key]) + "]]")
                lines.extend(f"{_key(k)} = {_value(v)}" for k, v in item.items())


def dump_toml(data: dict[str, Any]) -> str:
    """TOML text that ``tomllib.loads`` reads back as ``data``."""
    lines: list[str] = []
    _table(lines, [], data)
    return "\n".join(lines).lstrip("\n") + "\n"
