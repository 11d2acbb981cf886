"""Geography levels: names and code-prefix widths, as data.

A level's geoid is the first ``width`` characters of a lowest-level unit's spine code (the root: width 0, geoid "").
Without a column level the spine code is the unit's own code.  A column level (``column``) takes its nodes' codes
from a column of the geography file, so any nested hierarchy is a spine: a unit's spine code is then every level's
own part in turn, a column level's code whole and a prefix level's new characters of the unit code
(``geography.spine``).  Levels are looked up by position; their names are for people (config keys, file names,
manifests).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

LEVEL_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*")
RESERVED_NAMES = frozenset({"invariants"})  # measurements/invariants.parquet


@dataclass(frozen=True)
class Level:
    """One level of the hierarchy.  ``width`` is the length of its spine-code prefix (0 for the root).  A prefix
    level's nodes are the first ``unit_width`` characters of the unit codes (``width`` when no column level lies
    above it); a column level's codes are the geography file's ``column`` (``unit_width``: the level above's)."""

    name: str
    width: int
    column: str | None = None
    unit_width: int | None = None

    @property
    def unit_prefix(self) -> int:
        """How many characters of the unit code this level's node fixes."""
        return self.width if self.unit_width is None else self.unit_width


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
    if levels[0].width != 0 or levels[0].column is not None:
        raise ValueError(f"the first (root) level {levels[0].name!r} must have width 0 and no column")
    if levels[-1].column is not None:
        raise ValueError(f"the lowest level {levels[-1].name!r} must be the units' own code, not a column")
    for above, below in zip(levels, levels[1:], strict=False):
        if below.width <= above.width:
            raise ValueError(
                f"level {below.name!r} (width {below.width}) does not nest inside {above.name!r} "
                f"(width {above.width}): widths must increase from the root down"
            )
