"""GLS estimates and exact variances of user-defined areas: sums of linear functions of the lowest level's cells
over any set of leaves (voting districts, ...), which need not follow the tree.

Var(Σ_{b∈A} f·x̂_b) = Σ_S tr(r_Sᵀ Q_S(A) r_S), cross-node covariances included, r_S the E_S part of the rotated f and
Q_S(A) data-free, from one pass up the tree over the (node, area) pairs (docs/areas.md gives the recursion).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import prod

import numpy as np
import scipy.sparse as sp

from censusdp.postprocess.gls_algebra import AxisBasis, Subset, apply_axes, gather
from censusdp.postprocess.gls_stream import StreamedGls
from censusdp.postprocess.gls_stream_frame import StreamLevel, TreeFrame, subspace_blocks, subtree_phi, tree_frame
from censusdp.postprocess.gls_tree import _sum, children_matrix

CHUNK = 4096  # variables rotated at a time (a chunk's rotated cube is CHUNK × C floats)


@dataclass(frozen=True)
class AreaTerms:
    """Per subspace S, every area's Q_S(A) (n_areas, K_S, K_S), and the shape and axis bases that rotate a
    variable's weights into the same coordinates.  Data-free: the same for every release of one design."""

    shape: tuple[int, ...]
    bases: tuple[AxisBasis, ...]
    subsets: tuple[Subset, ...]
    blocks: tuple[np.ndarray, ...]

    @property
    def n_areas(self) -> int:
        return self.blocks[0].shape[0]


def _leaf_areas(leaf_area: np.ndarray, n_areas: int, n_leaves: int) -> np.ndarray:
    """Check an area assignment: one integer per leaf, in [0, n_areas) or -1 (in no area)."""
    if isinstance(n_areas, bool) or not isinstance(n_areas, int | np.integer) or n_areas < 0:
        raise ValueError("n_areas must be a non-negative integer")
    leaf_area = np.asarray(leaf_area)
    if leaf_area.ndim != 1 or len(leaf_area) != n_leaves:
        raise ValueError(f"leaf_area must be one-dimensional with one entry per leaf of the lowest level "
                         f"({n_leaves} leaves)")
    if len(leaf_area) and not np.issubdtype(leaf_area.dtype, np.integer):
        raise ValueError("leaf_area must hold integers (area numbers, -1 for a leaf in no area)")
    if len(leaf_area) and (leaf_area.min() < -1 or leaf_area.max() >= n_areas):
        raise ValueError("leaf_area must hold area numbers in [0, n_areas) or -1 for a leaf in no area")
    return leaf_area.astype(np.int64)


def _weights(weights: np.ndarray, cells: int) -> np.ndarray:
    """Check the variables' weights: finite, (n_vars, C)."""
    weights = np.asarray(weights, dtype=float)
    if weights.ndim != 2 or weights.shape[1] != cells:
        raise ValueError(f"weights must be (n_vars, {cells}): one row of weights over the detailed cells per "
                         "variable")
    if not np.isfinite(weights).all():
        raise ValueError("weights must be finite")
    return weights


@dataclass(frozen=True)
class AreaWalk:
    """The (node, area) pairs of a plan's leaves, level by level up the tree: the part of docs/areas.md's recursion
    that depends on the tree and the areas only, formed once for every subspace and every design."""

    n_areas: int
    k_leaves: int  # leaves in the walk (0: nothing to sum)
    counts: np.ndarray  # (pairs, 1, 1) leaves per (parent, area) pair above the leaves; per area for a one-level tree
    nodes: tuple[np.ndarray, ...]  # the pairs' nodes, from the leaves' parents up to the root's children
    families: tuple[sp.csr_matrix, ...]  # sums each pair's children pairs, one per level above the leaves' parents
    areas: sp.csr_matrix | None  # sums the top pairs into their areas (None: a one-level tree)


def area_walk(parents: Sequence[np.ndarray], nodes: np.ndarray, areas: np.ndarray, n_areas: int) -> AreaWalk:
    """The walk of the leaves ``nodes`` in ``areas`` up a tree of ``parents``."""
    depth = len(parents)
    if depth == 1 or not len(nodes):
        counts = np.bincount(areas, minlength=n_areas).astype(float)[:, None, None]
        return AreaWalk(n_areas, len(nodes), counts, (), (), None)
    pairs, inverse = np.unique(parents[-1][nodes] * n_areas + areas, return_inverse=True)
    counts = np.bincount(inverse.ravel(), minlength=len(pairs)).astype(float)[:, None, None]
    walked, families = [pairs // n_areas], []
    areas = pairs % n_areas
    for i in range(depth - 2, 0, -1):
        pairs, inverse = np.unique(parents[i][walked[-1]] * n_areas + areas, return_inverse=True)
        families.append(children_matrix(inverse.ravel(), len(pairs)))
        walked.append(pairs // n_areas)
        areas = pairs % n_areas
    return AreaWalk(n_areas, len(nodes), counts, tuple(walked), tuple(families), children_matrix(areas, n_areas))


def _area_blocks(phi: list[np.ndarray], bar_inv: list[np.ndarray | None], frees: list[np.ndarray],
                 walk: AreaWalk) -> np.ndarray:
    """Q_S(A) (n_areas, K, K) on one subspace, along the walk of a plan's leaves: docs/areas.md's recursion."""
    k = frees[0].shape[0]
    if not walk.k_leaves:
        return np.zeros((walk.n_areas, k, k))
    # the leaves: s = x = N φ, so a (parent, area) pair's children add count × the same terms — formed as products,
    # as the engine forms a parent's Φ̄ (count × Φ): the cancellation of pinned directions then stays exact
    lowest, depth = frees[-1], len(phi)
    leaf_phi = lowest @ phi[-1]  # T_c Φ_c of every leaf (K, f)
    if walk.areas is None:
        return walk.counts * (leaf_phi @ lowest.T)
    b = walk.counts * leaf_phi
    nodes = walk.nodes[0]
    gain = b @ np.asarray(bar_inv[-2])[nodes]  # B Φ̄⁻¹
    t = gain @ (lowest.T @ frees[-2])
    v = walk.counts * (leaf_phi @ lowest.T) - gain @ np.swapaxes(b, 1, 2)
    for step, i in enumerate(range(depth - 2, 0, -1)):
        t_phi = t @ phi[i][nodes]  # T_c Φ_c
        own = v + t_phi @ np.swapaxes(t, 1, 2)  # V_c + T_c Φ_c T_cᵀ
        family = walk.families[step]  # sums a (node, area)'s children pairs
        b = _sum(family, t_phi)
        nodes = walk.nodes[step + 1]
        gain = b @ np.asarray(bar_inv[i - 1])[nodes]  # B Φ̄⁻¹
        t = gain @ (frees[i].T @ frees[i - 1])
        v = _sum(family, own) - gain @ np.swapaxes(b, 1, 2)
    final = v + t @ phi[0][nodes] @ np.swapaxes(t, 1, 2)
    return _sum(walk.areas, final)


def _subtree(levels: Sequence[StreamLevel], frame: TreeFrame, subset: Subset
             ) -> tuple[list[np.ndarray], list[np.ndarray | None], list[np.ndarray]]:
    """Φ, Φ̄⁻¹ and the free bases of every level on one subspace."""
    infos, pins = subspace_blocks(levels, frame.bases, subset)
    frees = [p.free for p in pins]
    phi, bar_inv = subtree_phi(infos, frees, frame.parents, frame.sizes)
    return phi, bar_inv, frees


def area_terms(levels: Sequence[StreamLevel], shape: Sequence[int], leaf_area: np.ndarray, n_areas: int
               ) -> AreaTerms:
    """The data-free terms of every area's exact variance (``area_variances``), for the GLS of ``levels``.
    ``leaf_area[b]``: the area of leaf b of the lowest level, in [0, n_areas), or -1 for a leaf in no area.
    ``ValueError`` on malformed inputs, as the engine's."""
    frame = tree_frame(levels, shape)
    leaf_area = _leaf_areas(leaf_area, n_areas, frame.sizes[-1])
    inside = np.flatnonzero(leaf_area >= 0)
    walk = area_walk(frame.parents, inside, leaf_area[inside], int(n_areas))
    blocks = [_area_blocks(*_subtree(levels, frame, subset), walk) for subset in frame.subsets]
    return AreaTerms(frame.shape, tuple(frame.bases), tuple(frame.subsets), tuple(blocks))


def area_variances(terms: AreaTerms, weights: np.ndarray) -> np.ndarray:
    """(n_areas, n_vars) exact variances of the areas' GLS estimates of every variable, Var(Σ_{b∈A} f_v·x̂_b).
    ``weights`` (n_vars, C): one variable per row, its weight on every detailed cell (e.g. 0/1 for a table's)."""
    weights = _weights(weights, prod(terms.shape))
    out = np.zeros((terms.n_areas, weights.shape[0]))
    rotations = [basis.rotation.T for basis in terms.bases]
    for start in range(0, weights.shape[0], CHUNK):
        chunk = weights[start:start + CHUNK]
        cube = apply_axes(chunk.reshape(len(chunk), *terms.shape), rotations)
        for subset, q in zip(terms.subsets, terms.blocks, strict=True):
            r = gather(cube, terms.bases, subset)  # (n_vars, K, D)
            gram = np.einsum("vkd,vld->vkl", r, r).reshape(len(chunk), -1)
            out[:, start:start + len(chunk)] += q.reshape(len(q), gram.shape[1]) @ gram.T
    return np.maximum(out, 0.0)  # exact zeros (invariants) may come out as -1e-16


@dataclass(frozen=True)
class PreparedPlans:
    """Plans (leaf_area, n_areas) walked up a tree, each in chunks of areas holding few enough leaves: what their
    mean variances share across subspaces and designs (``mean_variances_of_plans``)."""

    n_leaves: int
    n_areas: tuple[int, ...]
    walks: tuple[tuple[AreaWalk, ...], ...]  # per plan, one walk per chunk


def prepare_plans(parents: Sequence[np.ndarray], n_leaves: int, plans: Sequence[tuple[np.ndarray, int]],
                  leaves_per_chunk: int = 1 << 16) -> PreparedPlans:
    """Walk each plan's areas up the tree of ``parents``, at most ``leaves_per_chunk`` leaves (or one area) a chunk."""
    walks = []
    for leaf_area, n_areas in plans:
        leaf_area = _leaf_areas(leaf_area, n_areas, n_leaves)
        in_area = np.bincount(leaf_area[leaf_area >= 0], minlength=n_areas)
        bounds, leaves = [0], 0
        for area, count in enumerate(in_area.tolist()):
            if leaves and leaves + count > leaves_per_chunk:
                bounds.append(area)
                leaves = 0
            leaves += count
        bounds.append(int(n_areas))
        inside = np.flatnonzero(leaf_area >= 0)
        order = inside[np.argsort(leaf_area[inside], kind="stable")]  # the leaves, area by area
        sorted_areas = leaf_area[order]
        chunks = []
        for first, stop in zip(bounds[:-1], bounds[1:], strict=True):
            lo, hi = np.searchsorted(sorted_areas, [first, stop])
            chunks.append(area_walk(parents, order[lo:hi], sorted_areas[lo:hi] - first, stop - first))
        walks.append(tuple(chunks) if n_areas else ())
    return PreparedPlans(n_leaves, tuple(int(n) for _, n in plans), tuple(walks))


def mean_variances_of_plans(levels: Sequence[StreamLevel], shape: Sequence[int],
                            plans: Sequence[tuple[np.ndarray, int]] | PreparedPlans, weights: np.ndarray,
                            leaves_per_chunk: int = 1 << 16) -> np.ndarray:
    """(n_plans, n_vars): the mean over each plan's areas (leaf_area, n_areas) of ``area_variances``, clipped at 0
    once, not per area; the tree's covariances formed once per subspace for all of them (a design's every level and
    the user's areas at once), and at most ``leaves_per_chunk`` leaves (or one area) of a plan at a time: memory is
    one subspace's tree covariances and one chunk's terms.  ``plans`` may be prepared once for many designs of one
    tree (``prepare_plans``)."""
    frame = tree_frame(levels, shape)
    weights = _weights(weights, prod(frame.shape))
    if not isinstance(plans, PreparedPlans):
        plans = prepare_plans(frame.parents, frame.sizes[-1], plans, leaves_per_chunk)
    elif plans.n_leaves != frame.sizes[-1]:
        raise ValueError(f"the plans were prepared for {plans.n_leaves} leaves, the tree has {frame.sizes[-1]}")
    cube = apply_axes(weights.reshape(len(weights), *frame.shape), [basis.rotation.T for basis in frame.bases])
    totals = np.zeros((len(plans.walks), weights.shape[0]))
    for subset in frame.subsets:
        phi, bar_inv, frees = _subtree(levels, frame, subset)
        r = gather(cube, frame.bases, subset)  # (n_vars, K, D)
        gram = np.einsum("vkd,vld->vkl", r, r).reshape(len(weights), -1)
        for total, walks in zip(totals, plans.walks, strict=True):
            for walk in walks:  # the mean is linear: the areas' terms summed before they meet the variables
                total += _area_blocks(phi, bar_inv, frees, walk).reshape(-1, gram.shape[1]).sum(axis=0) @ gram.T
        del phi, bar_inv
    counts = np.array([max(n, 1) for n in plans.n_areas], dtype=float)
    return np.maximum(totals / counts[:, None], 0.0)


def area_estimates(stream: StreamedGls, leaf_area: np.ndarray, n_areas: int, weights: np.ndarray) -> np.ndarray:
    """(n_areas, n_vars) GLS estimates Σ_{b∈A} f_v·x̂_b, from a solved tree's lowest level chunk by chunk."""
    lowest = stream.depth - 1
    leaf_area = _leaf_areas(leaf_area, n_areas, stream.sizes[lowest])
    weights = _weights(weights, prod(stream.shape))
    out = np.zeros((n_areas, weights.shape[0]))
    for start, stop, leaves in stream.chunk_estimates(lowest):
        areas = leaf_area[start:stop]
        inside = np.flatnonzero(areas >= 0)
        if len(inside):
            member = sp.csr_matrix((np.ones(len(inside)), (areas[inside], inside)), shape=(n_areas, stop - start))
            out += np.asarray(member @ (leaves @ weights.T))
    return out
