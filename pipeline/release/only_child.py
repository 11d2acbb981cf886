"""Only-child chains (``level_by_level``): a level whose every node is its parent's only child measures the same
people again, so its measurements join the parent's least squares as further terms with their own σ²
(post-processing of public values, Thm 19.25; docs/reconciliation.md).
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np

from censusdp.geography.tree import GeoTree
from censusdp.pipeline.config.schema import Schema
from censusdp.pipeline.io.measurements import ChunkLocation, read_chunk
from censusdp.pipeline.release.run import UniverseRun, stage_output


def only_child_levels(tree: GeoTree, level: int) -> list[int]:
    """The deeper levels, in order, whose node i is the only child of node i of the level above, from ``level``
    down: their nodes hold exactly the people of ``level``'s nodes."""
    n = tree.n_nodes(level)
    out = []
    for deeper in range(level + 1, tree.depth):
        if tree.n_nodes(deeper) != n or not np.array_equal(tree.parent[deeper], np.arange(n)):
            break
        out.append(deeper)
    return out


def level_measurements(directory: Path, plan: list[tuple[int, int, ChunkLocation]], schema: Schema,
                       queries: list[tuple[str, Fraction]]) -> list[np.ndarray]:
    """Every node's noisy answers of every query of a level, read chunk by chunk: (n_nodes, q_cells) per query."""
    cells = [schema.query_cells(schema.parse_query(name)) for name, _ in queries]
    chunks = [read_chunk(directory / where.file, where.row_group, [(stop - start, c) for c in cells])
              for start, stop, where in plan]
    return [np.concatenate([chunk[i] for chunk in chunks]) if chunks else np.zeros((0, c), dtype=np.int64)
            for i, c in enumerate(cells)]


def chain_measurements(run: UniverseRun, level: int) -> list[tuple[str, str, Fraction, np.ndarray]]:
    """The measurements of the only-child levels below ``level``, as (label, query, σ², noisy answers of every
    node of ``level``): further least-squares terms of ``level``'s reconciliation."""
    tree = stage_output(run.tree, "the geography (validate_inputs, or a re-run's measurements)")
    directory = run.measurements
    out = []
    for deeper in only_child_levels(tree, level):
        name = run.config.levels[deeper].name
        queries = [(a.query, a.sigma2) for a in run.level_allocations(deeper)]
        values = level_measurements(directory, run.chunk_plan[deeper], run.schema, queries)
        out += [(f"{name}: {query}", query, sigma2, v) for (query, sigma2), v in zip(queries, values, strict=True)]
    return out
