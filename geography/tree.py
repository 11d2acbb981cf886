"""The geography tree as arrays: sorted geoids per level and the parent index of every node.

Nodes of a level are sorted by geoid, so the children of one parent are contiguous and in their parents' order:
aggregating upwards is a ``np.add.reduceat`` and splitting a level into per-parent problems is slicing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from censusdp.geography.levels import Level, check_levels

# The lowest level's codes (a nation's 8M blocks) in numpy's variable-width string type: a code of up to 15 bytes is
# held inline in 16 bytes, against 60 for a block's 15 characters as ``str_``; only ``searchsorted`` wants its
# needles alike (``codes_like``).  Longer codes (spine codes) stay ``str_``: numpy's searchsorted assumes needles and
# haystack share one StringDType arena, and reads the wrong one for a string stored outside the array (numpy#31533).
LOWEST_GEOIDS = np.dtypes.StringDType()
INLINE_BYTES = 15


def codes_like(geoids: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """``codes`` in ``geoids``' string type where it is the lowest level's (``searchsorted`` needs both alike;
    a variable-width type cuts no code short)."""
    return codes.astype(geoids.dtype) if geoids.dtype == LOWEST_GEOIDS else codes


def fixed_width(geoids: np.ndarray) -> np.ndarray:
    """``geoids`` as a fixed-width ``str_`` array as wide as the longest (none is cut short)."""
    if geoids.dtype != LOWEST_GEOIDS:
        return np.asarray(geoids, dtype=np.str_)
    width = int(np.strings.str_len(geoids).max()) if len(geoids) else 1
    return geoids.astype(f"<U{max(width, 1)}")


@dataclass(frozen=True)
class GeoTree:
    """``geoids[i]``: sorted unique geoids of level i (``str_`` arrays; the lowest level's, the largest, as
    ``LOWEST_GEOIDS``); ``parent[i]``: index into level i-1 (empty at root)."""

    levels: tuple[Level, ...]
    geoids: tuple[np.ndarray, ...]
    parent: tuple[np.ndarray, ...]

    @property
    def depth(self) -> int:
        return len(self.levels)

    def n_nodes(self, level: int) -> int:
        return len(self.geoids[level])

    def child_offsets(self, level: int) -> np.ndarray:
        """For level ``level`` > 0: array of n_parents+1 offsets; children of parent p are offsets[p]:offsets[p+1]."""
        return np.searchsorted(self.parent[level], np.arange(self.n_nodes(level - 1) + 1)).astype(np.int64)

    def aggregate_up(self, level: int, values: np.ndarray) -> np.ndarray:
        """Sum per-node rows of ``level`` into their parents (rows of level-1)."""
        return np.add.reduceat(values, self.child_offsets(level)[:-1], axis=0)

    def ancestor_of_units(self, level: int) -> np.ndarray:
        """For every lowest-level unit, the index of its ancestor at ``level`` (non-decreasing)."""
        index = np.arange(self.n_nodes(self.depth - 1), dtype=np.int64)
        for below in range(self.depth - 1, level, -1):
            index = self.parent[below][index]
        return index

    def unit_offsets(self, level: int) -> np.ndarray:
        """n_nodes(level)+1 offsets: the lowest-level units under node j are unit_offsets[j]:unit_offsets[j+1]."""
        return np.searchsorted(self.ancestor_of_units(level), np.arange(self.n_nodes(level) + 1)).astype(np.int64)

    def subtree(self, level: int, start: int, stop: int) -> tuple[GeoTree, tuple[int, ...]]:
        """Nodes [start, stop) of ``level`` and all their descendants, as a tree of levels ``level`` and below (its
        root level holds those nodes), and each of those levels' first node in this tree: node j of the subtree's
        level i is node ``first[i] + j`` of level ``level + i`` here."""
        geoids, parents, first = [self.geoids[level][start:stop]], [np.zeros(0, dtype=np.int64)], [start]
        for below in range(level + 1, self.depth):
            offsets = self.child_offsets(below)
            lo, hi = int(offsets[start]), int(offsets[stop])
            geoids.append(self.geoids[below][lo:hi])
            parents.append(self.parent[below][lo:hi] - start)
            first.append(lo)
            start, stop = lo, hi
        return GeoTree(levels=self.levels[level:], geoids=tuple(geoids), parent=tuple(parents)), tuple(first)

    def lowest_index(self, codes: np.ndarray) -> np.ndarray:
        """Index of each lowest-level code in the tree; -1 where the code is not a unit of the tree."""
        lowest = self.geoids[-1]
        codes = codes_like(lowest, np.asarray(codes))
        position = np.minimum(np.searchsorted(lowest, codes), len(lowest) - 1)
        return np.where(lowest[position] == codes, position, -1).astype(np.int64)


def build_tree(levels: tuple[Level, ...], lowest_codes: np.ndarray) -> GeoTree:
    """Build the tree from the codes, all of the lowest level's width, of every lowest-level unit (any order,
    duplicates allowed): every level's nodes are their distinct prefixes, so no node is childless."""
    check_levels(levels)
    codes = np.ascontiguousarray(np.asarray(lowest_codes, dtype=np.str_).ravel())
    if len(codes) > 1 and not bool(np.all(codes[1:] > codes[:-1])):
        codes = np.unique(codes)
    if len(codes) == 0:
        raise ValueError("the geography has no units")
    width = levels[-1].width
    if (np.char.str_len(codes) != width).any():
        raise ValueError(f"every lowest-level code must have {width} characters")
    # bottom up, each level from the one below (sorted codes of one length have sorted prefixes): a level's
    # nodes are its run starts, found on the characters themselves, so no level's prefixes of every unit are made
    geoids: list[np.ndarray] = [_prefix(codes, width)]
    parents: list[np.ndarray] = []
    for level in reversed(levels[:-1]):
        starts = _run_starts(geoids[0], level.width)
        parents.insert(0, np.cumsum(starts, dtype=np.int64) - 1)
        geoids.insert(0, _prefix(geoids[0][starts], level.width))
    parents.insert(0, np.zeros(0, dtype=np.int64))
    ascii_codes = not len(codes) or int(np.ascontiguousarray(geoids[-1]).view(np.uint32).max()) < 128
    if width <= INLINE_BYTES and ascii_codes:  # inline: a code of at most 15 bytes
        geoids[-1] = geoids[-1].astype(LOWEST_GEOIDS)
    geoids[-1].flags.writeable = False
    return GeoTree(levels=tuple(levels), geoids=tuple(geoids), parent=tuple(parents))


def _run_starts(codes: np.ndarray, width: int) -> np.ndarray:
    """Where each run of sorted ``codes`` (a contiguous ``str_`` array, codes of one length) sharing their first
    ``width`` characters starts: compared as the characters' code points (4 bytes each)."""
    starts = np.ones(len(codes), dtype=bool)
    if len(codes) > 1:
        chars = codes.view(np.uint32).reshape(len(codes), -1)[:, :width]
        starts[1:] = (chars[1:] != chars[:-1]).any(axis=1) if width else False
    return starts


def _prefix(codes: np.ndarray, width: int) -> np.ndarray:
    if width == 0:
        return np.full(len(codes), "", dtype=np.str_)
    return codes.astype(f"<U{width}", copy=False)
