"""The US Census tabulation hierarchy, as data (block GEOID = state 2 + county 3 + tract 6 + block 4)."""

from __future__ import annotations

from censusdp.geography.levels import Level

US_CENSUS_LEVELS: tuple[Level, ...] = (
    Level("us", 0),
    Level("state", 2),
    Level("county", 5),
    Level("tract", 11),
    Level("block_group", 12),
    Level("block", 15),
)
