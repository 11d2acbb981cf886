"""Attributes, the detailed histogram they span, and queries as marginals of it.

The detailed histogram of a node is a dense count vector over the cross product of every attribute's
domain, flattened in C order (the first attribute varies slowest).  A query is named by the attributes it
keeps: ``total`` keeps none, ``detailed`` keeps all, ``votingage * hispanic * cenrace`` keeps three, in that
order; its cells are the flattened cross product of the kept attributes, in the order named.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

import numpy as np
import scipy.sparse as sp

TOTAL = "total"
DETAILED = "detailed"


@dataclass(frozen=True)
class Attribute:
    """A finite domain: ``values`` are the published labels; ``mapping`` maps source values to labels."""

    name: str
    column: str
    values: tuple[str, ...]
    mapping: dict[str, str] = field(default_factory=dict, hash=False, compare=False)

    def source_to_index(self) -> dict[str, int]:
        """Every accepted source value and the index of the domain value it maps to."""
        index = {label: i for i, label in enumerate(self.values)}
        if self.mapping:
            return {source: index[label] for source, label in self.mapping.items()}
        return index


@dataclass(frozen=True)
class Query:
    """A marginal of the detailed histogram: the attributes it keeps, in output order."""

    name: str
    attributes: tuple[str, ...]


@dataclass(frozen=True)
class Schema:
    attributes: tuple[Attribute, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.attributes)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(a.values) for a in self.attributes)

    @property
    def n_cells(self) -> int:
        return prod(self.shape)

    def attribute(self, name: str) -> Attribute:
        return self.attributes[self.names.index(name)]

    def parse_query(self, name: str) -> Query:
        """Parse a query name; raise ``ValueError`` naming an unknown or repeated attribute."""
        text = name.strip()
        if text == TOTAL:
            return Query(TOTAL, ())
        if text == DETAILED:
            return Query(DETAILED, self.names)
        parts = tuple(p.strip() for p in text.split("*"))
        for part in parts:
            if part not in self.names:
                raise ValueError(f"unknown attribute {part!r} in query {name!r} (known: {', '.join(self.names)})")
        if len(set(parts)) != len(parts):
            raise ValueError(f"query {name!r} names an attribute twice")
        return Query(" * ".join(parts), parts)

    def query_shape(self, query: Query) -> tuple[int, ...]:
        return tuple(len(self.attribute(a).values) for a in query.attributes)

    def query_cells(self, query: Query) -> int:
        return prod(self.query_shape(query))

    def marginal(self, query: Query, histograms: np.ndarray) -> np.ndarray:
        """(n_nodes, n_cells) detailed histograms -> (n_nodes, q_cells) query answers."""
        n = histograms.shape[0]
        cube = histograms.reshape((n, *self.shape))
        axes = [self.names.index(a) for a in query.attributes]
        dropped = tuple(1 + i for i in range(len(self.names)) if i not in axes)
        kept = cube.sum(axis=dropped) if dropped else cube
        # after summing, the kept axes are in schema order; reorder them to the order the query names
        order = sorted(axes)
        kept = np.moveaxis(kept, [1 + order.index(a) for a in axes], list(range(1, 1 + len(axes))))
        return kept.reshape(n, -1)

    def query_matrix(self, query: Query) -> sp.csr_matrix:
        """The 0/1 matrix Q with ``Q @ detailed == marginal``: (q_cells, n_cells)."""
        n_cells = self.n_cells
        # map every detailed cell to its query cell by unravelling its multi-index
        multi = np.unravel_index(np.arange(n_cells), self.shape)
        axes = [self.names.index(a) for a in query.attributes]
        if axes:
            rows = np.ravel_multi_index(tuple(multi[a] for a in axes), self.query_shape(query))
        else:
            rows = np.zeros(n_cells, dtype=np.int64)
        data = np.ones(n_cells, dtype=np.int64)
        return sp.csr_matrix((data, (rows, np.arange(n_cells))), shape=(self.query_cells(query), n_cells))

    def cell_labels(self, query: Query) -> list[np.ndarray]:
        """For each attribute of the query, the label of every query cell (arrays of length q_cells)."""
        shape = self.query_shape(query)
        multi = np.unravel_index(np.arange(self.query_cells(query)), shape) if shape else ()
        return [np.asarray(self.attribute(a).values)[m] for a, m in zip(query.attributes, multi, strict=True)]
