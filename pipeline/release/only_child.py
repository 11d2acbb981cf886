"""Only-child chains (``level_by_level``): a level whose every node is its parent's only child measures the same
people again, so its measurements join the parent's least squares as further terms with their own σ²
(post-processing of public values, Thm 19.25; docs/reconciliation.md).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from censusdp.geography.tree import GeoTree
from censusdp.pipeline.io.measurements import read_chunk
from censusdp.pipeline.release.run import UniverseRun, stage_output


def only_child_levels(tree: GeoTree, level: int) -> list[int]:
    """The deeper levels, in order from ``level`` down, whose node i is the only child of the node i above."""
    n = tree.n_nodes(level)
    out = []
    for deeper in range(level + 1, tree.depth):
        if tree.n_nodes(deeper) != n or not np.array_equal(tree.parent[deeper], np.arange(n)):
            break
        out.append(deeper)
    return out


def chain_measurements(run: UniverseRun, level: int) -> list[tuple[str, str, Fraction, np.ndarray]]:
    """The only-child levels' measurements as further terms of ``level``'s: (label, query, σ², noisy answers)."""
    tree = stage_output(run.tree, "the geography (validate_inputs, or a re-run's measurements)")
    out = []
    for deeper in only_child_levels(tree, level):  # every node's answers, read chunk by chunk
        queries = [(a.query, a.sigma2) for a in run.level_allocations(deeper)]
        cells = [run.schema.query_cells(run.schema.parse_query(query)) for query, _ in queries]
        chunks = [read_chunk(run.measurements / where.file, where.row_group, [(stop - start, c) for c in cells])
                  for start, stop, where in run.chunk_plan[deeper]]
        name = run.config.levels[deeper].name
        out += [(f"{name}: {query}", query, sigma2, np.concatenate([chunk[i] for chunk in chunks]))
                for i, (query, sigma2) in enumerate(queries)]
    return out
