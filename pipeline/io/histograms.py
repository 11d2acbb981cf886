"""Histograms: one dense detailed count vector per node per level (rows ordered as the tree's geoids)."""

from __future__ import annotations

import numpy as np

from censusdp.geography.tree import GeoTree


def lowest_histograms(unit_index: np.ndarray, cells: np.ndarray, n_units: int, n_cells: int) -> np.ndarray:
    """Count persons per (unit, cell): an (n_units, n_cells) int64 array; units with no persons are zero rows."""
    flat = np.bincount(unit_index * n_cells + cells, minlength=n_units * n_cells)
    return flat.astype(np.int64, copy=False).reshape(n_units, n_cells)


def all_level_histograms(tree: GeoTree, lowest: np.ndarray) -> list[np.ndarray]:
    """Aggregate the lowest level upwards; element i holds level i's histograms."""
    levels = [lowest]
    for level in range(tree.depth - 1, 0, -1):
        levels.append(tree.aggregate_up(level, levels[-1]))
    return levels[::-1]


def compact_counts(values: np.ndarray) -> np.ndarray:
    """Integer counts held for a whole level (the invariants the driver keeps through a release) as int32 when
    they fit, else as they are: half the memory of int64 for a nation's block invariants.  Whatever sums them
    sums in int64 (numpy's ``sum``; the reconciliation widens them again per chunk)."""
    if not np.issubdtype(values.dtype, np.integer):
        raise TypeError(f"compact_counts: integer counts expected, not {values.dtype}")
    if values.dtype == np.int32 or values.size == 0:
        return values.astype(np.int32, copy=False)
    small = np.iinfo(np.int32)
    return values.astype(np.int32) if int(values.min()) >= small.min and int(values.max()) <= small.max else values
