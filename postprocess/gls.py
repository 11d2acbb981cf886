"""Generalised least squares estimates of every node's detailed histogram, with exact variances.

The model (docs/uncertainty.md): y = Q_q x_v + exact discrete Gaussian noise of public σ² (Thm 19.37(iii)),
x_parent = Σ x_children, invariants exact.  Linear, hence unbiased; published values only (Thm 19.25).  A small
tree held in memory (``GlsLevel``) runs the engine's passes (``postprocess.gls_stream``) with an in-memory store.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from math import prod

import numpy as np

from censusdp.postprocess.gls_algebra import QuerySpec, answer
from censusdp.postprocess.gls_stream import StreamedGls, solve_gls_streamed
from censusdp.postprocess.gls_stream_frame import StreamLevel

Z95 = 1.959963984540054  # the standard normal's 97.5% quantile

__all__ = ["GlsInvariant", "GlsLevel", "GlsQuery", "GlsResult", "MemoryCubes", "QuerySpec", "interval",
           "plan_levels", "solve_gls"]


@dataclass(frozen=True)
class GlsQuery:
    """One measured query at one level: kept axes (in the query's cell order), σ², noisy answers (n_nodes,
    q_cells) and, per kept axis, None or the cell of every value (a recode: ``QuerySpec.groups``)."""

    axes: tuple[int, ...]
    sigma2: float
    noisy: np.ndarray
    groups: tuple[tuple[int, ...] | None, ...] = ()

    @property
    def spec(self) -> QuerySpec:
        return QuerySpec(self.axes, self.groups)


@dataclass(frozen=True)
class GlsInvariant:
    """An exact (published) query at one level: kept axes, values (n_nodes, q_cells), groupings as GlsQuery."""

    axes: tuple[int, ...]
    values: np.ndarray
    groups: tuple[tuple[int, ...] | None, ...] = ()

    @property
    def spec(self) -> QuerySpec:
        return QuerySpec(self.axes, self.groups)


@dataclass(frozen=True)
class GlsLevel:
    """One level: each node's parent (empty at the root; sorted, as a geography's codes sort), queries, invariants."""

    parent: np.ndarray
    queries: Sequence[GlsQuery]
    invariants: Sequence[GlsInvariant] = ()


def _level_sizes(levels: Sequence[GlsLevel]) -> list[int]:
    sizes = []
    for i, level in enumerate(levels):
        if level.queries:
            sizes.append(level.queries[0].noisy.shape[0])
        elif level.invariants:
            sizes.append(level.invariants[0].values.shape[0])
        elif i > 0:
            sizes.append(len(level.parent))
        elif len(levels) > 1 and len(levels[1].parent):
            sizes.append(int(levels[1].parent.max()) + 1)
        else:
            raise ValueError(f"level {i}: cannot tell its number of nodes")
    return sizes


def _check(levels: Sequence[GlsLevel], sizes: list[int], shape: tuple[int, ...]) -> None:
    for i, level in enumerate(levels):
        if i > 0 and (len(level.parent) != sizes[i] or np.bincount(level.parent, minlength=sizes[i - 1]).min() == 0
                      or level.parent.max() >= sizes[i - 1]):
            raise ValueError(f"level {i}: every node needs one parent of the level above, and every parent a child")
        for query in level.queries:
            if query.sigma2 <= 0 or query.noisy.shape != (sizes[i], prod(query.spec.cells(shape))):
                raise ValueError(f"level {i}: query on axes {query.axes} has the wrong shape or sigma2")
        for invariant in level.invariants:
            if invariant.values.shape != (sizes[i], prod(invariant.spec.cells(shape))):
                raise ValueError(f"level {i}: invariant on axes {invariant.axes} has the wrong shape")


def plan_levels(levels: Sequence[GlsLevel], shape: Sequence[int]) -> list[StreamLevel]:
    """The levels' data-free part as the engine takes it, one chunk per level.  ``ValueError`` on malformed
    inputs (a node without a parent or a parent without a child, answers of the wrong shape, σ² <= 0)."""
    shape = tuple(int(n) for n in shape)
    sizes = _level_sizes(levels)
    _check(levels, sizes, shape)
    return [StreamLevel(level.parent, [(q.spec, q.sigma2) for q in level.queries],
                        [v.spec for v in level.invariants], [(0, n)]) for level, n in zip(levels, sizes, strict=True)]


class MemoryCubes:
    """The engine's ``CubeStore`` in memory (a small tree): each (kind, level)'s cubes appended, read by range."""

    def __init__(self) -> None:
        self._parts: dict[tuple[str, int], list[np.ndarray]] = {}

    def write(self, kind: str, level: int, cube: np.ndarray) -> None:
        self._parts.setdefault((kind, level), []).append(np.array(cube, dtype=np.float64))

    def read(self, kind: str, level: int, start: int, stop: int) -> np.ndarray:
        parts = self._parts.get((kind, level), [])
        if len(parts) > 1:
            parts[:] = [np.concatenate(parts)]
        if not parts or stop > len(parts[0]):
            raise ValueError(f"{kind} of level {level}: rows {start}:{stop} not written")
        return parts[0][start:stop].copy()  # as a file store's read: the caller's own array

    def rename(self, kind: str, new: str, level: int) -> None:
        self._parts[new, level] = self._parts.pop((kind, level))

    def remove(self, kind: str, level: int) -> None:
        self._parts.pop((kind, level), None)

    def close(self) -> None:
        self._parts.clear()


@dataclass(frozen=True, eq=False)
class GlsResult:
    """A solved tree held in memory: every level's estimates and variances, node order, by query."""

    stream: StreamedGls

    @cached_property
    def estimates(self) -> list[np.ndarray]:
        """Per level, (n_nodes, C) estimates of the detailed cells."""
        return [np.concatenate([chunk for _, _, chunk in self.stream.chunk_estimates(level)])
                for level in range(self.stream.depth)]

    def estimate(self, level: int, spec: QuerySpec) -> np.ndarray:
        """GLS estimate (n_nodes, q_cells) of any query (the estimator is linear, so it is the query's answer)."""
        return answer(self.estimates[level], self.stream.shape, spec)

    def variance(self, level: int, spec: QuerySpec | None = None) -> np.ndarray:
        """Variance (n_nodes, q_cells) of each node's estimate of every cell of a query (``None``: the detailed
        cells).  A recode's grouping must coarsen the measured queries' groups."""
        return self.stream.variance(level, spec, 0, self.stream.sizes[level])

    def query_variance(self, level: int, axes: Sequence[int] | None = None) -> np.ndarray:
        """(n_nodes,) variance of one cell of the plain marginal ``axes`` (None: the detailed cells), when it is
        the same for all its cells — always so without recodes.  ``ValueError`` when a kept attribute is
        recoded (its cells' variances differ by group): use ``variance``."""
        spec = QuerySpec(tuple(range(len(self.stream.shape))) if axes is None else tuple(axes))
        by_class, _ = self.stream.variance_classes(level, spec, 0, self.stream.sizes[level])
        if by_class.shape[1] != 1:
            raise ValueError(f"the cells of the marginal on axes {spec.axes} have different variances (a recoded "
                             "attribute): use GlsResult.variance for per-cell variances")
        return by_class[:, 0]


def solve_gls(levels: Sequence[GlsLevel], shape: Sequence[int]) -> GlsResult:
    """Exact GLS of every node's detailed histogram at every level, and the covariances of the estimates, from the
    levels held in memory.  ``ValueError`` as ``solve_gls_streamed`` and on malformed inputs (a level's parents
    must be sorted, as a geography's codes sort)."""
    planned = plan_levels(levels, shape)

    def read(level: int, start: int, stop: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
        return ([q.noisy[start:stop] for q in levels[level].queries],
                [v.values[start:stop] for v in levels[level].invariants])

    return GlsResult(solve_gls_streamed(planned, shape, read, MemoryCubes()))


def interval(estimate: np.ndarray, variance: np.ndarray, z: float = Z95) -> tuple[np.ndarray, np.ndarray]:
    """Normal 95% interval estimate ± z·sd (valid: the estimate is a linear sum of discrete Gaussians)."""
    half = z * np.sqrt(np.maximum(variance, 0.0))
    return estimate - half, estimate + half
