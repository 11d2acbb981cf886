"""Attributes, the detailed histogram they span, and queries as marginals of it.

A node's detailed histogram is a dense count vector over the cross product of every attribute's domain, in C
order (the first attribute varies slowest).  A query keeps some attributes (``total`` none, ``detailed`` all,
``votingage * hispanic * cenrace`` three); its cells are their cross product, in the order named.  A recode spans
no axis of its own: a query names it like an attribute, and its cells are the groups of its attribute's values.
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
    """A finite domain: ``values`` are the published labels; ``mapping`` maps source values to labels, or ``bins``
    (lower edges, ascending, the last bin top-coded) maps integer source values by their range."""

    name: str
    column: str
    values: tuple[str, ...]
    mapping: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    bins: tuple[int, ...] = ()

    def source_to_index(self) -> dict[str, int]:
        """Every accepted source value and the index of the domain value it maps to."""
        index = {label: i for i, label in enumerate(self.values)}
        if self.mapping:
            return {source: index[label] for source, label in self.mapping.items()}
        return index


@dataclass(frozen=True)
class Recode:
    """``values[i]`` groups the values ``groups[i]`` of attribute ``of``; every value of ``of`` is in one group."""

    name: str
    of: str
    values: tuple[str, ...]
    groups: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Factor:
    """One part of a query: the histogram axis it reads, its cell labels, and (for a recode) the group of every
    value of that axis."""

    axis: int
    labels: tuple[str, ...]
    group_of: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Query:
    """A marginal of the detailed histogram: the attributes it keeps, in output order."""

    name: str
    attributes: tuple[str, ...]


@dataclass(frozen=True)
class Schema:
    attributes: tuple[Attribute, ...]
    recodes: tuple[Recode, ...] = ()

    def __post_init__(self) -> None:
        """A recode must partition the values of an attribute of this schema, under a name of its own."""
        names = self.names
        for recode in self.recodes:
            if recode.name in names or [r.name for r in self.recodes].count(recode.name) > 1:
                raise ValueError(f"recode {recode.name!r}: the name is already an attribute or another recode")
            if recode.of not in names:
                raise ValueError(f"recode {recode.name!r}: {recode.of!r} is not an attribute")
            grouped = [v for group in recode.groups for v in group]
            if (len(recode.values) != len(recode.groups) or len(set(recode.values)) != len(recode.values)
                    or not all(recode.groups) or sorted(grouped) != sorted(self.attribute(recode.of).values)):
                raise ValueError(f"recode {recode.name!r}: its groups must be non-empty, distinctly named and hold "
                                 f"every value of {recode.of} exactly once")

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
        known = (*self.names, *(r.name for r in self.recodes))
        for part in parts:
            if part not in known:
                raise ValueError(f"unknown attribute {part!r} in query {name!r} (known: {', '.join(known)})")
        axes = [self.factor(part).axis for part in parts]
        if len(set(axes)) != len(axes):
            raise ValueError(f"query {name!r} names an attribute twice (directly or through a recode)")
        return Query(" * ".join(parts), parts)

    def factor(self, name: str) -> Factor:
        """The axis, labels and grouping of an attribute or recode named in a query."""
        if name in self.names:
            return Factor(self.names.index(name), self.attribute(name).values)
        recode = next(r for r in self.recodes if r.name == name)
        base = self.attribute(recode.of).values
        group = {value: i for i, members in enumerate(recode.groups) for value in members}
        return Factor(self.names.index(recode.of), recode.values, tuple(group[v] for v in base))

    def query_shape(self, query: Query) -> tuple[int, ...]:
        return tuple(len(self.factor(a).labels) for a in query.attributes)

    def query_cells(self, query: Query) -> int:
        return prod(self.query_shape(query))

    def marginal(self, query: Query, histograms: np.ndarray) -> np.ndarray:
        """(n_nodes, n_cells) detailed histograms -> (n_nodes, q_cells) query answers."""
        n = histograms.shape[0]
        cube = histograms.reshape((n, *self.shape))
        factors = [self.factor(a) for a in query.attributes]
        axes = [f.axis for f in factors]
        dropped = tuple(1 + i for i in range(len(self.names)) if i not in axes)
        kept = cube.sum(axis=dropped) if dropped else cube
        # after summing, the kept axes are in schema order; reorder them to the order the query names
        order = sorted(axes)
        kept = np.moveaxis(kept, [1 + order.index(a) for a in axes], list(range(1, 1 + len(axes))))
        for position, f in enumerate(factors):
            if f.group_of is not None:  # a recode: sum the values of each group
                grouping = np.zeros((len(f.group_of), len(f.labels)), dtype=kept.dtype)
                grouping[np.arange(len(f.group_of)), f.group_of] = 1
                kept = np.moveaxis(np.tensordot(kept, grouping, axes=([1 + position], [0])), -1, 1 + position)
        return kept.reshape(n, -1)

    def query_matrix(self, query: Query) -> sp.csr_matrix:
        """The 0/1 matrix Q with ``Q @ detailed == marginal``: (q_cells, n_cells)."""
        n_cells = self.n_cells
        multi = np.unravel_index(np.arange(n_cells), self.shape)
        factors = [self.factor(a) for a in query.attributes]
        if factors:
            parts = tuple(multi[f.axis] if f.group_of is None else np.asarray(f.group_of)[multi[f.axis]]
                          for f in factors)
            rows = np.ravel_multi_index(parts, self.query_shape(query))
        else:
            rows = np.zeros(n_cells, dtype=np.int64)
        data = np.ones(n_cells, dtype=np.int64)
        return sp.csr_matrix((data, (rows, np.arange(n_cells))), shape=(self.query_cells(query), n_cells))

    def cell_labels(self, query: Query) -> list[np.ndarray]:
        """For each attribute of the query, the label of every query cell (arrays of length q_cells)."""
        shape = self.query_shape(query)
        multi = np.unravel_index(np.arange(self.query_cells(query)), shape) if shape else ()
        return [np.asarray(self.factor(a).labels)[m] for a, m in zip(query.attributes, multi, strict=True)]
