"""Splitting a level into chunks of nodes that never split a parent's children: nodes are sorted by geoid, so a
chunk is a node range whose ends fall on parent boundaries, and a level's chunks are independent once its parents'
level is fixed."""

from __future__ import annotations

import numpy as np

from censusdp.geography.tree import GeoTree
from censusdp.pipeline.config.model import DEFAULT_CHUNK_CELLS


def level_chunks(tree: GeoTree, level: int, n_cells: int,
                 max_cells: int = DEFAULT_CHUNK_CELLS) -> list[tuple[int, int]]:
    """Node ranges of about ``max_cells`` detailed cells each, on parent boundaries (a larger family: one chunk)."""
    n_nodes = tree.n_nodes(level)
    if level == 0:
        return [(0, n_nodes)]
    boundaries = tree.child_offsets(level)  # parent p's children: boundaries[p]:boundaries[p+1]
    per_chunk = max(1, max_cells // max(1, n_cells))
    chunks, start = [], 0
    while start < n_nodes:
        # the last parent boundary at or below start + per_chunk, but at least one parent past start
        index = int(np.searchsorted(boundaries, start + per_chunk, side="right")) - 1
        stop = int(boundaries[index])
        if stop <= start:
            stop = int(boundaries[np.searchsorted(boundaries, start, side="right")])
        chunks.append((start, stop))
        start = stop
    return chunks
