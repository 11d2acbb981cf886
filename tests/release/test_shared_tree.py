"""The two universes share one geography tree on the driver only where it is the same tree."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from geography.levels import Level
from geography.tree import build_tree
from pipeline.release.stages import _units_tree

LEVELS = (Level("nation", 0), Level("state", 2), Level("block", 4))
CODES = np.array(["0101", "0102", "0201"])


def _run(levels: tuple[Level, ...], units_codes: np.ndarray | None, *, built: bool = True) -> SimpleNamespace:
    units = None if units_codes is None else SimpleNamespace(
        tree=build_tree(LEVELS, units_codes) if built else None, config=SimpleNamespace(levels=LEVELS))
    return SimpleNamespace(units=units, config=SimpleNamespace(levels=levels))


def test_the_units_tree_is_shared_where_it_is_the_same_tree() -> None:
    run = _run(LEVELS, CODES)
    shared = _units_tree(run, CODES.copy())
    assert shared is run.units.tree
    equal_levels = tuple(Level(lv.name, lv.width) for lv in LEVELS)  # equal, not the same objects
    assert _units_tree(_run(equal_levels, CODES), CODES) is not None
    built = build_tree(LEVELS, CODES)
    assert all(np.array_equal(a, b) for a, b in zip(shared.geoids + shared.parent, built.geoids + built.parent,
                                                   strict=True))


def test_another_geography_or_other_levels_or_no_units_build_their_own() -> None:
    assert _units_tree(_run(LEVELS, CODES), np.array(["0101", "0102"])) is None
    assert _units_tree(_run(LEVELS, CODES), np.array(["0101", "0102", "0202"])) is None
    assert _units_tree(_run((Level("nation", 0), Level("region", 1), Level("block", 4)), CODES), CODES) is None
    assert _units_tree(_run(LEVELS, None), CODES) is None
    assert _units_tree(_run(LEVELS, CODES, built=False), CODES) is None
