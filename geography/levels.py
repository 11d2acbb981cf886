"""Geography levels: names and code-prefix widths, as data.

A level's geoid is the first ``width`` characters of a lowest-level unit's code (the root: width 0, geoid "").
Levels are looked up by position; their names are for people (config keys, file names, manifests).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

LEVEL_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*")
RESERVED_NAMES = frozenset({"invariants"})  # measurements/invariants.parquet


@dataclass(frozen=True)
class Level:
    """One level of the hierarchy.  ``width`` is the length of its code prefix (0 for the root)."""

    name: str
    width: int


def check_levels(levels: tuple[Level, ...]) -> None:
    """Raise ``ValueError`` unless the levels nest: unique names, root width 0, strictly increasing widths."""
    if not levels:
        raise ValueError("at least one level is required")
    names = [level.name for level in levels]
    for name in names:  # a level's name names its files (measurements, tables): never a path, never another file
        if not LEVEL_NAME.fullmatch(name) or name in RESERVED_NAMES:
            raise ValueError(f"level name {name!r} must be letters, digits, '_' or '-' (it names the level's files), "
                             f"and not {' or '.join(sorted(RESERVED_NAMES))}")
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"duplicate level name {duplicates[0]!r}")
    if levels[0].width != 0:
        raise ValueError(f"the first (root) level {levels[0].name!r} must have width 0")
    for above, below in zip(levels, levels[1:], strict=False):
        if below.width <= above.width:
            raise ValueError(
                f"level {below.name!r} (width {below.width}) does not nest inside {above.name!r} "
                f"(width {above.width}): widths must increase from the root down"
            )
