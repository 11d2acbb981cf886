"""The data-free half of the streamed GLS (``postprocess.gls_stream``): its levels, plan checks, frames and store.

``subspace_frame`` holds, per subspace, what ``gls_tree.two_pass`` computes before it looks at data: every
level's Φ (covariance of a node's free coordinates given its subtree), Φ̄⁻¹ over its children, and the posterior
covariances.  At the lowest level Φ is one level-wide matrix (every lowest node has the same queries), so the
children sums Φ̄ of its parents are counts × Φ and the lowest nodes' posterior covariances depend on their parent
only: they are held per parent, never per lowest node.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from censusdp.postprocess.gls_algebra import QuerySpec
from censusdp.postprocess.gls_tree import _inv, _sum, children_matrix

if TYPE_CHECKING:
    from censusdp.postprocess.gls import Pins


@dataclass
class SubspaceFrame:
    """One subspace: per level Λ, N and the pin maps; Φ (n, f, f) above the lowest level, (f, f) at it; Φ̄⁻¹
    (n, f', f') above the lowest; posterior covariances (n, K, K) above the lowest and, at it, per parent
    (one row for a one-level tree)."""

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
        """Forget what only the passes above the lowest level needed (the lowest level's down step keeps its Φ
        and its parents' Φ̄⁻¹)."""
        lowest = len(self.phi) - 1
        for i in range(lowest):
            self.phi[i] = None
            if i < lowest - 1:
                self.bar_inv[i] = None


def subspace_frame(infos: Sequence[np.ndarray], pins: Sequence[Pins], parents: Sequence[np.ndarray],
                   sizes: Sequence[int]) -> SubspaceFrame:
    """Φ, Φ̄⁻¹ and posterior covariances of every level on one subspace (``gls_tree.two_pass``'s data-free part)."""
    depth = len(infos)
    lowest = depth - 1
    free = [p.free for p in pins]
    phi: list[np.ndarray | None] = [None] * depth
    bar_inv: list[np.ndarray | None] = [None] * depth
    for i in range(lowest, -1, -1):
        own = free[i].T @ infos[i] @ free[i]
        if i == lowest:
            phi[i] = _inv(own)
            continue
        m = free[i + 1].T @ free[i]
        if i + 1 == lowest:
            bar = np.bincount(parents[lowest], minlength=sizes[i])[:, None, None] * phi[lowest]
        else:
            bar = _sum(children_matrix(parents[i + 1], sizes[i]), phi[i + 1])
        bar_inv[i] = _inv(bar)
        phi[i] = _inv(own + m.T @ bar_inv[i] @ m)
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


@dataclass(frozen=True)
class StreamLevel:
    """One level, data-free: each node's parent index into the level above (sorted; empty at the root), the
    measured queries with their σ², the invariants' queries, and the chunk plan: consecutive (start, stop) node
    ranges covering the level, each ending on a parent boundary."""

    parent: np.ndarray
    queries: Sequence[tuple[QuerySpec, float]]
    invariants: Sequence[QuerySpec]
    chunks: Sequence[tuple[int, int]]


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
    """Where the streamed GLS keeps its per-level (n, n_1..n_m) float64 intermediates: appended front to back, read by
    node range (the release's is ``pipeline.io.gls_scratch.ScratchCubes``: plain files; postprocess opens none)."""

    def write(self, kind: str, level: int, cube: np.ndarray) -> None: ...

    def read(self, kind: str, level: int, start: int, stop: int) -> np.ndarray: ...

    def rename(self, kind: str, new: str, level: int) -> None: ...

    def remove(self, kind: str, level: int) -> None: ...

    def close(self) -> None: ...


