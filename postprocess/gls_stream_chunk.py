"""One chunk's steps of the streamed GLS (``postprocess.gls_stream``) as functions of public arrays, and the lowest
level's chunk as a self-contained, picklable job (``LowestChunk``), run where its measurements are read (a Dask
worker's task).  Public values only (post-processing of noisy measurements, Thm 19.25).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from censusdp.postprocess.gls_algebra import (
    AxisBasis,
    QuerySpec,
    Subset,
    gather,
    least_norm_scale,
    rotate_into,
    scatter,
    unrotate,
)
from censusdp.postprocess.gls_tree import _apply, _sum, children_matrix


@dataclass(frozen=True)
class SubspaceStep:
    """One subspace's data-free pieces of one level's up step: Λ, N, the invariants' pin maps and Φ ((f, f)
    level-wide at the lowest level, (n, f, f) for the chunk's nodes above it)."""

    subset: Subset
    info: np.ndarray
    free: np.ndarray
    maps: tuple[np.ndarray, ...]
    phi: np.ndarray


def rotated_chunk(level: int, queries: Sequence[tuple[QuerySpec, float]], invariants: Sequence[QuerySpec],
                  bases: Sequence[AxisBasis], noisy: Sequence[np.ndarray], values: Sequence[np.ndarray], n: int
                  ) -> tuple[np.ndarray, list[np.ndarray]]:
    """The chunk's b = Σ_q Q_qᵀ y_q/σ²_q and its invariants' least-norm solutions, rotated (n, n_1..n_m)."""
    shape = tuple(len(b.group) for b in bases)
    if len(noisy) != len(queries) or len(values) != len(invariants):
        raise ValueError(f"level {level}: the reader returned the wrong number of queries or invariants")
    cube = np.zeros((n, *shape))
    for (query, sigma2), answers in zip(queries, noisy, strict=True):
        _check_rows(level, shape, query, answers, n)
        rotate_into(cube, np.asarray(answers, dtype=float), query, bases, 1 / sigma2)
    exact = []
    for query, answers in zip(invariants, values, strict=True):
        _check_rows(level, shape, query, answers, n)
        target = np.zeros((n, *shape))
        rotate_into(target, np.asarray(answers, dtype=float), query, bases, least_norm_scale(query, shape))
        exact.append(target)
    return cube, exact


def _check_rows(level: int, shape: tuple[int, ...], query: QuerySpec, answers: np.ndarray, n: int) -> None:
    if np.shape(answers) != (n, int(np.prod(query.cells(shape)))):
        raise ValueError(f"level {level}: the reader's answers to the query on axes {query.axes} have the wrong shape")


def up_step(cube: np.ndarray, exact: Sequence[np.ndarray], steps: Sequence[SubspaceStep], bases: Sequence[AxisBasis],
            summed: np.ndarray | None = None, terms: Sequence[tuple[np.ndarray, np.ndarray]] = ()) -> np.ndarray:
    """The chunk's subtree estimates z̃ (rotated cube) from its rotated data (``rotated_chunk``); above the lowest
    level, with its children's sums Σz̃ (``summed``, rotated) and per subspace (N of the level below, Mᵀ Φ̄⁻¹ of the
    chunk's nodes) (``terms``)."""
    out = np.zeros_like(cube)
    for index, step in enumerate(steps):
        pinned = None
        if step.maps:
            pinned = sum(np.einsum("ij,njd->nid", g, gather(x, bases, step.subset))
                         for g, x in zip(step.maps, exact, strict=True))
        rhs = _apply(step.free.T, gather(cube, bases, step.subset))
        if pinned is not None:
            rhs = rhs - _apply(step.free.T @ step.info, pinned)
        if summed is not None:
            lower, gain = terms[index]
            below = gather(summed, bases, step.subset)
            rhs = rhs + _apply(gain, _apply(lower.T, below if pinned is None else below - pinned))
        estimate = _apply(step.free, _apply(step.phi, rhs))
        scatter(out, estimate if pinned is None else estimate + pinned, bases, step.subset)
    return out


def down_step(up: np.ndarray, gap: np.ndarray, local: np.ndarray, steps: Sequence[SubspaceStep],
              parent_bar_inv: Sequence[np.ndarray], bases: Sequence[AxisBasis]) -> np.ndarray:
    """The chunk's final estimates x̂ = z̃ + N Φ Φ̄_p⁻¹ Nᵀ(x̂_p - Σz̃_p) (rotated) from its z̃, its parents' x̂ - Σz̃
    (``gap``, rotated) and Φ̄⁻¹, ``local`` being each node's parent among them."""
    out = up.copy()
    for step, bar_inv in zip(steps, parent_bar_inv, strict=True):
        diff = _apply(step.free.T, gather(gap, bases, step.subset))
        share = step.phi @ bar_inv[local]  # Φ_c Φ̄_p⁻¹
        scatter(out, gather(up, bases, step.subset) + _apply(step.free, _apply(share, diff[local])), bases,
                step.subset)
    return out


@dataclass(frozen=True)
class LowestChunk:
    """Nodes [start, stop) of the lowest level: ``children_sums`` (the up pass's contribution to the parents) and
    ``estimate`` (the GLS estimates, with ``parent_gap`` set) from the chunk's measurements and invariant values.
    ``local``: each node's parent among the chunk's parents (None in a one-level tree)."""

    level: int
    start: int
    stop: int
    bases: tuple[AxisBasis, ...]
    queries: tuple[tuple[QuerySpec, float], ...]
    invariants: tuple[QuerySpec, ...]
    steps: tuple[SubspaceStep, ...]
    local: np.ndarray | None
    parent_gap: np.ndarray | None = None  # (n_parents, n_1..n_m) rotated x̂ - Σz̃ of the chunk's parents
    parent_bar_inv: tuple[np.ndarray, ...] = ()  # per subspace, Φ̄⁻¹ of the chunk's parents

    def up(self, noisy: Sequence[np.ndarray], values: Sequence[np.ndarray]) -> np.ndarray:
        """z̃ of the chunk's nodes (rotated)."""
        cube, exact = rotated_chunk(self.level, self.queries, self.invariants, self.bases, noisy, values,
                                    self.stop - self.start)
        return up_step(cube, exact, self.steps, self.bases)

    def children_sums(self, noisy: Sequence[np.ndarray], values: Sequence[np.ndarray]) -> np.ndarray:
        """Σz̃ over each of the chunk's parents' children (rotated, one row per parent)."""
        if self.local is None:
            raise ValueError("a one-level tree has no parents")
        return _sum(children_matrix(self.local, int(self.local[-1]) + 1), self.up(noisy, values))

    def estimate(self, noisy: Sequence[np.ndarray], values: Sequence[np.ndarray]) -> np.ndarray:
        """(stop - start, C) GLS estimates of the detailed cells of the chunk's nodes."""
        up = self.up(noisy, values)
        if self.local is None:
            return unrotate(up, self.bases)
        if self.parent_gap is None:
            raise ValueError("the chunk's parents' estimates are not attached (StreamedGls.lowest_chunk)")
        return unrotate(down_step(up, self.parent_gap, self.local, self.steps, self.parent_bar_inv, self.bases),
                        self.bases)
