"""Spine codes: any nested hierarchy as code prefixes.

A unit's spine code is every level's own part in turn, root to units: a column level's code (a column of the
geography file) whole, a prefix level's next characters of the unit's code.  Every level is then a prefix of the
spine code, so the tree, the tables and their checks work as for a prefix hierarchy, and without a column level
the spine code is the unit's code itself.  Records and area plans name units by their own code: ``UnitLookup``
finds a unit's place in the tree from it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from censusdp.geography.levels import Level
from censusdp.geography.tree import codes_like, fixed_width


def level_columns(levels: tuple[Level, ...]) -> list[str]:
    """The geography file's columns the levels take their codes from (none: spine codes are the units' codes)."""
    return [level.column for level in levels if level.column is not None]


def has_columns(levels: tuple[Level, ...]) -> bool:
    """Whether any level takes its codes from a column (else spine codes are the units' codes)."""
    return bool(level_columns(levels))


def unit_positions(levels: tuple[Level, ...]) -> np.ndarray:
    """The positions, in a spine code, of the unit code's characters (the prefix levels' parts)."""
    spans = [np.arange(above.width, level.width) for above, level in zip(levels, levels[1:], strict=False)
             if level.column is None]
    return np.concatenate(spans) if spans else np.zeros(0, dtype=np.int64)


def unit_codes(levels: tuple[Level, ...], spine: np.ndarray) -> np.ndarray:
    """The unit codes inside spine codes (the spine codes themselves without a column level)."""
    if not has_columns(levels):
        return spine
    codes = fixed_width(spine)
    width = levels[-1].width
    if codes.dtype.itemsize // 4 != width:
        codes = codes.astype(f"<U{width}")
    chars = codes.view(np.uint32).reshape(len(codes), width)
    kept = np.ascontiguousarray(chars[:, unit_positions(levels)])
    return kept.view(f"<U{kept.shape[1]}").ravel() if len(codes) else np.zeros(0, dtype=np.str_)


@dataclass(frozen=True)
class UnitLookup:
    """The tree's lowest-level units by their own codes: ``codes`` sorted, ``index`` each one's place in the tree
    (None: the tree's order, no column level)."""

    codes: np.ndarray
    index: np.ndarray | None

    def find(self, needles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each needle's unit in the tree and whether it is one (where not, the position is meaningless)."""
        if not len(self.codes):
            return np.zeros(len(needles), dtype=np.int64), np.zeros(len(needles), dtype=bool)
        needles = codes_like(self.codes, np.asarray(needles))
        position = np.minimum(np.searchsorted(self.codes, needles), len(self.codes) - 1)
        found = self.codes[position] == needles
        return (position if self.index is None else self.index[position]), found


def unit_lookup(levels: tuple[Level, ...], lowest_geoids: np.ndarray) -> UnitLookup:
    """The lookup of a tree's (or subtree's) lowest level, ``lowest_geoids`` sorted spine codes."""
    if not has_columns(levels):
        return UnitLookup(lowest_geoids, None)
    codes = unit_codes(levels, lowest_geoids)
    order = np.argsort(codes, kind="stable")
    return UnitLookup(codes[order], order.astype(np.int64))
