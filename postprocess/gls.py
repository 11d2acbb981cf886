"""Generalised least squares estimates of every node's detailed histogram, with exact variances.

Model (a public fact of the release): at every node v of level l and every measured query q (a marginal,
possibly grouping an attribute's values by a recode), y_{v,q} = Q_q x_v + e with e ~ N_Z(0, σ²_{l,q})
independent (Thm 19.37(iii): the mechanism's σ² is public); x_parent = Σ x_children.  The GLS estimate minimises
Σ_{v,q} ||Q_q x_v - y_{v,q}||² / σ²_{l,q} subject to the invariants (exact, published values) — every query at
every level is used.  It is linear in the noisy measurements, so it is unbiased; it ignores non-negativity and
structural zeros (those are what the reconciled tables add).  Computed from published measurements only:
post-processing, no privacy cost (Thm 19.25).

How (exactly, no approximation): on one orthogonal decomposition of the cell space, R^C = ⊕_S E_S
(``postprocess.gls_algebra``), the information matrix of every level acts on E_S as one small K_S×K_S block
(K_S = 1 without recodes), the same on each of E_S's contrast directions.  So the problem splits into one tree
problem per attribute subset S with matrix weights, data b_v = Σ_q Q_qᵀ y_{v,q}/σ²_q rotated into E_S, each
solved by the two-pass tree algorithm (``postprocess.gls_tree``).  An invariant fixes the part of E_S in its
own range (its least-norm solution there).  Cost: one rotation per axis and level, then 2^m passes over the
tree's cells (m attributes: 16 for pl94).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from math import prod

import numpy as np
import scipy.sparse as sp

from censusdp.postprocess.gls_algebra import (
    AxisBasis,
    QuerySpec,
    Subset,
    answer,
    axis_bases,
    cell_variance,
    gather,
    information_block,
    least_norm_scale,
    pinned_basis,
    rotate_into,
    scatter,
    subsets,
    unrotate,
)
from censusdp.postprocess.gls_tree import SubspaceLevel, children_matrix, two_pass

Z95 = 1.959963984540054  # the standard normal's 97.5% quantile
TOLERANCE = 1e-9


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
    """One level: each node's parent index into the level above (empty at the root), measurements, invariants."""

    parent: np.ndarray
    queries: Sequence[GlsQuery]
    invariants: Sequence[GlsInvariant] = ()


@dataclass
class GlsResult:
    """Per level: estimates (n_nodes, C) and, per subspace S, every node's K_S×K_S posterior covariance."""

    shape: tuple[int, ...]
    bases: list[AxisBasis]
    subsets: list[Subset]
    estimates: list[np.ndarray] = field(default_factory=list)
    covariances: list[list[np.ndarray]] = field(default_factory=list)  # [level][subset]: (n_nodes, K_S, K_S)

    def estimate(self, level: int, spec: QuerySpec) -> np.ndarray:
        """GLS estimate (n_nodes, q_cells) of any query (the estimator is linear, so it is the query's answer)."""
        return answer(self.estimates[level], self.shape, spec)

    def variance(self, level: int, spec: QuerySpec | None = None) -> np.ndarray:
        """Variance (n_nodes, q_cells) of each node's estimate of every cell of a query (``None``: the detailed
        cells, (n_nodes, C)).  A recode's grouping must coarsen the run's (its measured queries') groups."""
        spec = QuerySpec(tuple(range(len(self.shape)))) if spec is None else spec
        by_class, index = cell_variance(self.covariances[level], self.subsets, self.bases, spec)
        return np.maximum(by_class, 0.0)[:, index]  # exact zeros (invariants) may come out as -1e-16

    def query_estimate(self, level: int, axes: Sequence[int]) -> np.ndarray:
        """GLS estimate (n_nodes, q_cells) of the plain marginal keeping ``axes`` (in that order)."""
        return self.estimate(level, QuerySpec(tuple(axes)))

    def query_variance(self, level: int, axes: Sequence[int] | None = None) -> np.ndarray:
        """(n_nodes,) variance of one cell of the plain marginal ``axes`` (None: the detailed cells), when it is
        the same for all its cells — always so without recodes.  ``ValueError`` when a kept attribute is
        recoded (its cells' variances differ by group): use ``variance``."""
        spec = QuerySpec(tuple(range(len(self.shape))) if axes is None else tuple(axes))
        by_class, _ = cell_variance(self.covariances[level], self.subsets, self.bases, spec)
        if by_class.shape[1] != 1:
            raise ValueError(f"the cells of the marginal on axes {spec.axes} have different variances (a recoded "
                             "attribute): use GlsResult.variance for per-cell variances")
        return np.maximum(by_class[:, 0], 0.0)


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


@dataclass
class Pins:
    """A level's invariants on one subspace: the pinned basis P (K, r), its complement N (K, f), and the maps
    G_i (K, K) with t_v = Σ_i G_i x̃*_i (x̃*_i the rotated least-norm solution of invariant i)."""

    pinned: np.ndarray
    free: np.ndarray
    maps: list[np.ndarray]


def _pins(bases: list[AxisBasis], subset: Subset, specs: list[QuerySpec]) -> Pins:
    k = prod(b.k for a, b in enumerate(bases) if a not in subset)
    parts = [pinned_basis(bases, subset, spec) for spec in specs]
    stacked = np.hstack([np.zeros((k, 0)), *parts])
    u, sv, _ = np.linalg.svd(stacked, full_matrices=True)
    rank = int(np.count_nonzero(sv > TOLERANCE))
    maps = []
    if rank:
        inverse = np.linalg.pinv(stacked.T, rcond=TOLERANCE)  # t = A⁺ [P_iᵀ x̃*_i]_i
        start = 0
        for part in parts:
            maps.append(inverse[:, start:start + part.shape[1]] @ part.T)
            start += part.shape[1]
    return Pins(u[:, :rank], u[:, rank:], maps)


def _rotated_data(levels: Sequence[GlsLevel], sizes: list[int], shape: tuple[int, ...], bases: list[AxisBasis]
                  ) -> tuple[list[np.ndarray], list[list[np.ndarray]]]:
    """Per level, b = Σ_q Q_qᵀ y_q/σ²_q and every invariant's least-norm solution Q⁺c, rotated (n, n_1..n_m)."""
    rotated, least_norm = [], []
    for level, n in zip(levels, sizes, strict=True):
        cube = np.zeros((n, *shape))
        for query in level.queries:
            rotate_into(cube, query.noisy.astype(float), query.spec, bases, 1 / query.sigma2)
        rotated.append(cube)
        exact = []
        for invariant in level.invariants:
            spec = invariant.spec
            target = np.zeros((n, *shape))
            rotate_into(target, invariant.values.astype(float), spec, bases, least_norm_scale(spec, shape))
            exact.append(target)
        least_norm.append(exact)
    return rotated, least_norm


def subspace_blocks(levels: Sequence[GlsLevel], bases: list[AxisBasis], subset: Subset
                    ) -> tuple[list[np.ndarray], list[Pins]]:
    """Every level's information block Λ_l (K_S, K_S) on E_S and the pins of its invariants — the data-free part
    of the problem on E_S, which the covariances depend on alone.  ``ValueError`` when the pins are not nested
    (what a level fixes, the level above must fix too)."""
    infos, all_pins = [], []
    previous: np.ndarray | None = None
    for level in levels:
        pins = _pins(bases, subset, [inv.spec for inv in level.invariants])
        if previous is not None and np.abs(pins.pinned - previous @ (previous.T @ pins.pinned)).max(
                initial=0) > TOLERANCE:
            raise ValueError("an invariant must hold at every level above it too")
        previous = pins.pinned
        infos.append(information_block(bases, subset, [(q.spec, q.sigma2) for q in level.queries]))
        all_pins.append(pins)
    return infos, all_pins


def check_identifiable(info: np.ndarray, free: np.ndarray, subset: Subset) -> None:
    """``ValueError`` unless the lowest level's own information NᵀΛN on E_S is positive definite (its cells are
    then determined by its measurements and the invariants)."""
    eigenvalues = np.linalg.eigvalsh(free.T @ info @ free)
    if len(eigenvalues) and eigenvalues.min() <= TOLERANCE * max(eigenvalues.max(), 0.0):
        raise ValueError(f"cells of the lowest level are not identifiable: its queries do not determine the "
                         f"subspace of contrasts along the axes {sorted(subset)} (measure the detailed query "
                         "at the lowest level)")


def _subspace_levels(levels: Sequence[GlsLevel], bases: list[AxisBasis], subset: Subset, rotated: list[np.ndarray],
                     least_norm: list[list[np.ndarray]]) -> list[SubspaceLevel]:
    """Every level's problem on E_S: its information block, the pins of its invariants and its data, cut out of
    the rotated cubes."""
    infos, all_pins = subspace_blocks(levels, bases, subset)
    sub_levels = []
    for i, (info, pins) in enumerate(zip(infos, all_pins, strict=True)):
        pinned = None
        if pins.pinned.shape[1]:
            pinned = sum(np.einsum("ij,njd->nid", g, gather(x, bases, subset))
                         for g, x in zip(pins.maps, least_norm[i], strict=True))
        sub_levels.append(SubspaceLevel(info, pins.free, gather(rotated[i], bases, subset), pinned))
    return sub_levels


@dataclass(frozen=True)
class GlsStructure:
    """The data-free frame of a run: detailed shape, nodes per level, the axis bases, the subsets S, and the
    tree (``children[l]`` sums level l+1 into level l, None at the lowest; ``parents[l]`` indexes level l-1)."""

    shape: tuple[int, ...]
    sizes: list[int]
    bases: list[AxisBasis]
    subsets: list[Subset]
    children: list[sp.csr_matrix | None]
    parents: list[np.ndarray]


def gls_structure(levels: Sequence[GlsLevel], shape: Sequence[int]) -> GlsStructure:
    """Check the levels and build the frame every computation on them shares (an estimate and its covariances
    must use the same bases to live in the same coordinates).  ``ValueError`` on malformed inputs."""
    shape = tuple(int(n) for n in shape)
    sizes = _level_sizes(levels)
    _check(levels, sizes, shape)
    specs = [q.spec for level in levels for q in level.queries] + [i.spec for level in levels for i in
                                                                    level.invariants]
    children = [children_matrix(levels[i + 1].parent, sizes[i]) for i in range(len(levels) - 1)] + [None]
    return GlsStructure(shape, sizes, axis_bases(shape, specs), subsets(len(shape)), children,
                        [level.parent for level in levels])


def solve_gls(levels: Sequence[GlsLevel], shape: tuple[int, ...]) -> GlsResult:
    """Exact GLS of every node's detailed histogram at every level, and the covariances of the estimates.

    Raises ``ValueError`` when a cell of the lowest level is not identifiable (the lowest level's queries do
    not cover every subspace and no invariant fixes it), when an invariant does not hold at every level above
    it, or when the inputs are malformed."""
    frame = gls_structure(levels, shape)
    shape, sizes, bases = frame.shape, frame.sizes, frame.bases
    result = GlsResult(shape=shape, bases=bases, subsets=frame.subsets)
    rotated, least_norm = _rotated_data(levels, sizes, shape, bases)
    estimates = [np.zeros((n, *shape)) for n in sizes]
    result.covariances = [[] for _ in sizes]
    for subset in result.subsets:
        sub_levels = _subspace_levels(levels, bases, subset, rotated, least_norm)
        check_identifiable(sub_levels[-1].info, sub_levels[-1].free, subset)
        estimate, covariance = two_pass(sub_levels, frame.children, frame.parents)
        for i in range(len(levels)):
            scatter(estimates[i], estimate[i], bases, subset)
            result.covariances[i].append(covariance[i])
    result.estimates = [unrotate(cube, bases) for cube in estimates]
    return result


def interval(estimate: np.ndarray, variance: np.ndarray, z: float = Z95) -> tuple[np.ndarray, np.ndarray]:
    """Normal 95% interval estimate ± z·sd (valid: the estimate is a linear sum of discrete Gaussians)."""
    half = z * np.sqrt(np.maximum(variance, 0.0))
    return estimate - half, estimate + half
