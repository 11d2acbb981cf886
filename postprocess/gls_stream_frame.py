"""The data-free half of the GLS (``postprocess.gls_stream``): its levels, plan checks, blocks, frames and store.
At the lowest level Φ is level-wide and the covariances per parent, never per lowest node (docs/reconciliation.md,
"The tree algorithm").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import prod
from typing import Protocol

import numpy as np

from censusdp.postprocess.gls_algebra import (
    AxisBasis,
    QuerySpec,
    Subset,
    axis_bases,
    information_block,
    pinned_basis,
    subsets,
)
from censusdp.postprocess.gls_tree import _inv, _sum, children_matrix

TOLERANCE = 1e-9


@dataclass(frozen=True)
class StreamLevel:
    """One level, data-free: each node's parent (sorted; empty at the root), the measured queries with their σ², the
    invariants' queries, and the chunk plan (consecutive node ranges, each ending on a parent boundary)."""

    parent: np.ndarray
    queries: Sequence[tuple[QuerySpec, float]]
    invariants: Sequence[QuerySpec]
    chunks: Sequence[tuple[int, int]]


@dataclass
class Pins:
    """A level's invariants on one subspace: the pinned basis P (K, r), its complement N (K, f), and the maps
    G_i (K, K) with t_v = Σ_i G_i x̃*_i (x̃*_i the rotated least-norm solution of invariant i)."""

    pinned: np.ndarray
    free: np.ndarray
    maps: list[np.ndarray]


def _pins(bases: Sequence[AxisBasis], subset: Subset, specs: Sequence[QuerySpec]) -> Pins:
    k = prod(b.k for a, b in enumerate(bases) if a not in subset)
    parts = [pinned_basis(list(bases), subset, spec) for spec in specs]
    stacked = np.hstack([np.zeros((k, 0)), *parts])
    u, sv, _ = np.linalg.svd(stacked, full_matrices=True)
    rank = int(np.count_nonzero(sv > TOLERANCE))
    maps = []
    if rank:
        inverse = np.linalg.pinv(stacked.T, rcond=TOLERANCE)  # t = A⁺ [P_iᵀ x̃*_i]_i
        columns = np.split(inverse, np.cumsum([part.shape[1] for part in parts])[:-1], axis=1)
        maps = [c @ part.T for c, part in zip(columns, parts, strict=True)]
    return Pins(u[:, :rank], u[:, rank:], maps)


def subspace_blocks(levels: Sequence[StreamLevel], bases: Sequence[AxisBasis], subset: Subset
                    ) -> tuple[list[np.ndarray], list[Pins]]:
    """Every level's information block Λ_l (K_S, K_S) on E_S and the pins of its invariants.  ``ValueError`` when
    the pins are not nested (what a level fixes, the level above must fix too) or the cells are not identifiable."""
    infos, all_pins = [], []
    previous: np.ndarray | None = None
    for level in levels:
        pins = _pins(bases, subset, level.invariants)
        if previous is not None and np.abs(pins.pinned - previous @ (previous.T @ pins.pinned)).max(
                initial=0) > TOLERANCE:
            raise ValueError("an invariant must hold at every level above it too")
        previous = pins.pinned
        infos.append(information_block(list(bases), subset, list(level.queries)))
        all_pins.append(pins)
    check_identifiable(infos[-1], all_pins[-1].free, subset)
    return infos, all_pins


@dataclass(frozen=True)
class TreeFrame:
    """What every computation on a tree's levels shares: the detailed shape, each level's size and parents, the
    subsets and the axis bases (an estimate and its covariances must share them to share coordinates)."""

    shape: tuple[int, ...]
    sizes: list[int]
    parents: list[np.ndarray]
    bases: list[AxisBasis]
    subsets: list[Subset]


def tree_frame(levels: Sequence[StreamLevel], shape: Sequence[int]) -> TreeFrame:
    """Check the levels' plan (``check_plan``) and build their frame."""
    shape = tuple(int(n) for n in shape)
    sizes = check_plan(levels, shape)
    specs = [s for level in levels for s, _ in level.queries] + [s for level in levels for s in level.invariants]
    return TreeFrame(shape, sizes, [np.asarray(level.parent) for level in levels], axis_bases(shape, specs),
                     subsets(len(shape)))


def check_identifiable(info: np.ndarray, free: np.ndarray, subset: Subset) -> None:
    """``ValueError`` unless the lowest level's own information NᵀΛN on E_S is positive definite."""
    eigenvalues = np.linalg.eigvalsh(free.T @ info @ free)
    if len(eigenvalues) and eigenvalues.min() <= TOLERANCE * max(eigenvalues.max(), 0.0):
        raise ValueError(f"cells of the lowest level are not identifiable: its queries do not determine the "
                         f"subspace of contrasts along the axes {sorted(subset)} (measure the detailed query "
                         "at the lowest level)")


@dataclass
class SubspaceFrame:
    """One subspace: per level Λ, N, the pin maps, Φ, Φ̄⁻¹ (``subtree_phi``) and the posterior covariances (n, K, K);
    at the lowest level, per parent (one row for a one-level tree)."""

    info: list[np.ndarray]
    free: list[np.ndarray]
    maps: list[list[np.ndarray]]
    phi: list[np.ndarray | None]
    bar_inv: list[np.ndarray | None]
    covariance: list[np.ndarray]

    def phi_of(self, level: int, start: int, stop: int) -> np.ndarray:
        phi = self.phi[level]
        if phi is None:
            raise RuntimeError(f"level {level}: its passes are done")
        return phi if level == len(self.phi) - 1 else phi[start:stop]

    def drop_upper(self) -> None:
        """Forget what only the passes above the lowest level needed."""
        lowest = len(self.phi) - 1
        for i in range(lowest):
            self.phi[i] = None
            if i < lowest - 1:
                self.bar_inv[i] = None


def subtree_phi(infos: Sequence[np.ndarray], frees: Sequence[np.ndarray], parents: Sequence[np.ndarray],
                sizes: Sequence[int]) -> tuple[list[np.ndarray], list[np.ndarray | None]]:
    """The up pass's data-free recursion on one subspace: per level Φ ((n, f, f); (f, f) at the lowest level, whose
    nodes share their queries) and Φ̄⁻¹ (n, f', f') over each node's children (None at the lowest)."""
    depth = len(infos)
    lowest = depth - 1
    phi: list[np.ndarray] = [np.empty(0)] * depth
    bar_inv: list[np.ndarray | None] = [None] * depth
    for i in range(lowest, -1, -1):
        own = frees[i].T @ infos[i] @ frees[i]
        if i == lowest:
            phi[i] = _inv(own)
            continue
        m = frees[i + 1].T @ frees[i]
        if i + 1 == lowest:
            bar = np.bincount(parents[lowest], minlength=sizes[i])[:, None, None] * phi[lowest]
        else:
            bar = _sum(children_matrix(parents[i + 1], sizes[i]), phi[i + 1])
        bar_inv[i] = _inv(bar)
        phi[i] = _inv(own + m.T @ bar_inv[i] @ m)
    return phi, bar_inv


def subspace_frame(levels: Sequence[StreamLevel], tree: TreeFrame, subset: Subset) -> SubspaceFrame:
    """Λ and the pins (``subspace_blocks``), Φ, Φ̄⁻¹ (``subtree_phi``) and the posterior covariances of every level
    on one subspace."""
    infos, pins = subspace_blocks(levels, tree.bases, subset)
    parents, depth, lowest = tree.parents, len(infos), len(infos) - 1
    free = [p.free for p in pins]
    phi, bar_inv = subtree_phi(infos, free, parents, tree.sizes)
    post: list[np.ndarray] = [np.asarray(phi[0]) if lowest else np.asarray(phi[0])[None]]
    for i in range(1, depth):
        m = free[i].T @ free[i - 1]
        spread = m @ post[i - 1] @ m.T
        phi_i, above = np.asarray(phi[i]), np.asarray(bar_inv[i - 1])
        if i < lowest:  # H = Φ_c Φ̄_p⁻¹ per node
            share = phi_i @ above[parents[i]]
            spread = spread[parents[i]]
        else:  # per parent: the lowest level's Φ is level-wide
            share = phi_i @ above
        post.append(phi_i - share @ phi_i + share @ spread @ np.swapaxes(share, 1, 2))
    covariance = [free[i] @ post[i] @ free[i].T for i in range(depth)]
    return SubspaceFrame(list(infos), free, [list(p.maps) if p.pinned.shape[1] else [] for p in pins], phi,
                         bar_inv, covariance)


def check_plan(levels: Sequence[StreamLevel], shape: tuple[int, ...]) -> list[int]:
    """Every level's size; ``ValueError`` unless parents are sorted with a child each, the chunks cover each
    level in order and never split a family, and the queries fit the shape with σ² > 0."""
    sizes: list[int] = []
    for i, level in enumerate(levels):
        chunks = [(int(a), int(b)) for a, b in level.chunks]
        if (not chunks or chunks[0][0] != 0 or any(b <= a for a, b in chunks)
                or any(chunks[j][1] != chunks[j + 1][0] for j in range(len(chunks) - 1))):
            raise ValueError(f"level {i}: the chunks must be consecutive non-empty node ranges from 0")
        n = chunks[-1][1]
        parent = np.asarray(level.parent)
        if i == 0 and len(parent):
            raise ValueError("the root level has no parents")
        if i > 0:
            steps = np.diff(parent)
            if (len(parent) != n or parent[0] != 0 or parent[-1] != sizes[-1] - 1 or steps.min(initial=0) < 0
                    or steps.max(initial=0) > 1):
                raise ValueError(f"level {i}: every node needs one parent of the level above, sorted, and every "
                                 "parent a child")
            if any(parent[a] == parent[a - 1] for a, _ in chunks[1:]):
                raise ValueError(f"level {i}: a chunk splits the children of one parent")
        for spec, sigma2 in level.queries:
            spec.cells(shape)
            if not sigma2 > 0:
                raise ValueError(f"level {i}: query on axes {spec.axes} has sigma2 <= 0")
        for spec in level.invariants:
            spec.cells(shape)
        sizes.append(n)
    if not sizes:
        raise ValueError("no levels")
    return sizes


class CubeStore(Protocol):
    """Where the streamed GLS keeps its per-level float64 cubes: appended front to back, read by node range."""

    def write(self, kind: str, level: int, cube: np.ndarray) -> None: ...

    def read(self, kind: str, level: int, start: int, stop: int) -> np.ndarray: ...

    def rename(self, kind: str, new: str, level: int) -> None: ...

    def remove(self, kind: str, level: int) -> None: ...

    def close(self) -> None: ...


