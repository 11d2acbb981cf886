"""The algebra behind the tree GLS: marginal and recode queries of a Kronecker-structured histogram (one axis per
attribute, C order), and one orthogonal basis on which all their information matrices are block diagonal.

Per axis a, U_a = [u_1..u_k | a basis of the contrasts C_a], u_g the normalised indicators of the k_a groups refining
every grouping used; on each subspace E_S (C_a for a ∈ S, B_a = span(u) otherwise) every information matrix acts as
one K_S×K_S block on each of D_S contrast directions (docs/reconciliation.md, "Recodes").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import reduce
from itertools import combinations
from math import prod

import numpy as np
import scipy.linalg as la

Subset = frozenset[int]


@dataclass(frozen=True)
class QuerySpec:
    """A query of the detailed histogram: the axes it keeps, in its cell order (C order over them), and per kept
    axis either None (each value is a cell) or ``groups[i][v]``, the cell (0..r-1) of value v (a recode)."""

    axes: tuple[int, ...]
    groups: tuple[tuple[int, ...] | None, ...] = ()

    def __post_init__(self) -> None:
        groups = self.groups or (None,) * len(self.axes)
        object.__setattr__(self, "axes", tuple(int(a) for a in self.axes))
        object.__setattr__(self, "groups", tuple(None if g is None else tuple(int(v) for v in g) for g in groups))
        if len(self.groups) != len(self.axes) or len(set(self.axes)) != len(self.axes):
            raise ValueError(f"query on axes {self.axes}: one grouping (or None) per kept axis, each axis once")
        for g in self.groups:
            if g is not None and sorted(set(g)) != list(range(max(g) + 1)):
                raise ValueError(f"query on axes {self.axes}: a grouping must use the cells 0..r-1, each at least once")

    def grouping(self, axis: int) -> tuple[int, ...] | None:
        return self.groups[self.axes.index(axis)]

    def cells(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """The query's shape, in its own axis order."""
        for a, g in zip(self.axes, self.groups, strict=True):
            if a >= len(shape) or (g is not None and len(g) != shape[a]):
                raise ValueError(f"query on axes {self.axes} does not fit the histogram shape {shape}")
        return tuple(shape[a] if g is None else max(g) + 1 for a, g in zip(self.axes, self.groups, strict=True))


def subsets(m: int) -> list[Subset]:
    """All subsets of the m attribute axes, smallest first (the empty set is the total's subspace)."""
    return [frozenset(c) for k in range(m + 1) for c in combinations(range(m), k)]


def _grouping_matrix(group_of: Sequence[int]) -> np.ndarray:
    """(n_values, r) 0/1: value v is in group group_of[v]."""
    matrix = np.zeros((len(group_of), max(group_of) + 1))
    matrix[np.arange(len(group_of)), list(group_of)] = 1
    return matrix


def answer(rows: np.ndarray, shape: tuple[int, ...], spec: QuerySpec) -> np.ndarray:
    """(n, C) detailed rows -> (n, q_cells) answers of the query, cells in its order."""
    n = rows.shape[0]
    spec.cells(shape)
    cube = rows.reshape((n, *shape))
    dropped = tuple(1 + a for a in range(len(shape)) if a not in spec.axes)
    kept = cube.sum(axis=dropped) if dropped else cube
    order = sorted(spec.axes)
    kept = np.moveaxis(kept, [1 + order.index(a) for a in spec.axes], list(range(1, 1 + len(spec.axes))))
    for position, group_of in enumerate(spec.groups):
        if group_of is not None:
            kept = np.moveaxis(np.tensordot(kept, _grouping_matrix(group_of), axes=([1 + position], [0])), -1,
                               1 + position)
    return kept.reshape(n, -1)


@dataclass(frozen=True)
class AxisBasis:
    """One axis: the refinement of its groupings (``group[v]``, k groups of ``sizes``) and the rotation U_a."""

    group: np.ndarray
    sizes: np.ndarray
    rotation: np.ndarray  # (n_a, n_a), columns: u_1..u_k, then an orthonormal basis of the contrasts C_a

    @property
    def k(self) -> int:
        return len(self.sizes)

    def coarse_of(self, spec: QuerySpec, axis: int) -> np.ndarray:
        """For a grouped factor: the query cell of every refinement group (the grouping must be coarser)."""
        group_of = np.asarray(spec.grouping(axis))
        coarse = np.zeros(self.k, dtype=np.int64)
        coarse[self.group] = group_of
        if not np.array_equal(coarse[self.group], group_of):
            raise ValueError(f"axis {axis}: a grouping that is not a coarsening of the run's recode groups")
        return coarse

    def factor(self, spec: QuerySpec, axis: int) -> tuple[np.ndarray, np.ndarray]:
        """(R, c) of the query's factor on this axis: R (n_a or k, d) maps the factor's d answer cells into
        rotated coordinates (rows ≥ k, the contrasts, only for a kept axis), U_aᵀ q_aᵀ; c (d,) is the squared
        norm of each column's contrast part (1 - 1/n_g for a kept value of group g, else 0)."""
        s = np.sqrt(self.sizes)
        if axis not in spec.axes:
            return s[:, None], np.zeros(1)
        if spec.grouping(axis) is None:
            return self.rotation.T, 1 - 1 / self.sizes[self.group]
        coarse = self.coarse_of(spec, axis)
        return s[:, None] * _grouping_matrix(coarse), np.zeros(int(coarse.max()) + 1)

    def block(self, spec: QuerySpec, axis: int) -> tuple[np.ndarray, float]:
        """(B, c): the factor's k×k block on B_a (I, s sᵀ or M_R) and its scalar on C_a (1 if kept, else 0)."""
        r, c = self.factor(spec, axis)
        if axis in spec.axes and spec.grouping(axis) is None:
            return np.eye(self.k), 1.0
        return r @ r.T, 0.0

    def range_basis(self, spec: QuerySpec, axis: int) -> np.ndarray:
        """An orthonormal basis (k, r) of the range of the factor's B-block."""
        r, _ = self.factor(spec, axis)
        if axis in spec.axes and spec.grouping(axis) is None:
            return np.eye(self.k)
        return r / np.linalg.norm(r, axis=0)

    def classes(self, spec: QuerySpec, axis: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The distinct columns of ``factor``: class of each factor cell, each class's B part (n_cls, k) and c."""
        r, c = self.factor(spec, axis)
        if axis in spec.axes and spec.grouping(axis) is None:
            first = np.array([int(np.flatnonzero(self.group == g)[0]) for g in range(self.k)])
            return self.group, r[: self.k, first].T, c[first]
        return np.arange(r.shape[1]), r[: self.k].T, c


def axis_bases(shape: tuple[int, ...], specs: Sequence[QuerySpec]) -> list[AxisBasis]:
    """Per axis, the common refinement of every grouping the specs use (groups numbered by first value) and U_a."""
    bases = []
    for a, n in enumerate(shape):
        keys = [tuple(spec.grouping(a)) for spec in specs if a in spec.axes and spec.grouping(a) is not None]
        rows = list(zip(*keys, strict=True)) if keys else [()] * n
        labels: dict[tuple[int, ...], int] = {}
        group = np.array([labels.setdefault(row, len(labels)) for row in rows], dtype=np.int64)
        sizes = np.bincount(group).astype(float)
        u = np.zeros((n, len(sizes)))
        u[np.arange(n), group] = 1 / np.sqrt(sizes[group])
        rotation = np.hstack([u, la.null_space(u.T)]) if n > len(sizes) else u
        bases.append(AxisBasis(group, sizes, rotation))
    return bases


MERGE = 64  # consecutive axes whose sizes multiply to at most this are rotated together, by one Kronecker factor


def apply_axes(cube: np.ndarray, matrices: Sequence[np.ndarray]) -> np.ndarray:
    """Apply ``matrices[a]`` (out_a, d_a) along every axis a of an (n, d_1..d_m) cube.  Runs of small axes are
    merged into one Kronecker factor, so a pl94 cube (8·2·2, 63) takes two passes over the data, not four."""
    n, dims = cube.shape[0], list(cube.shape[1:])
    blocks, start = [], 0
    for a in range(1, len(matrices)):
        if max(prod(dims[start:a + 1]), prod(m.shape[0] for m in matrices[start:a + 1])) > MERGE:
            blocks.append((start, a))
            start = a
    blocks.append((start, len(matrices)))
    for start, stop in blocks:
        mats = matrices[start:stop]
        if all(m.shape == (1, 1) and m[0, 0] == 1 for m in mats):
            continue
        big = reduce(np.kron, mats)
        pre, post = prod(dims[:start]), prod(dims[stop:])
        view = np.ascontiguousarray(cube).reshape(n * pre, prod(dims[start:stop]), post)
        out = view[:, :, 0] @ big.T if post == 1 else np.matmul(big, view)
        dims[start:stop] = [m.shape[0] for m in mats]
        cube = out.reshape(n, *dims)
    return cube


def rotate_into(out: np.ndarray, answers: np.ndarray, spec: QuerySpec, bases: Sequence[AxisBasis],
                scale: np.ndarray | float = 1.0) -> None:
    """out += (⊗U_a)ᵀ Q_qᵀ (scale · answers), in place on the rotated cube ``out`` (n, n_1..n_m); a summed or grouped
    axis touches only its first k_a (group) coordinates."""
    shape = tuple(len(b.group) for b in bases)
    n = answers.shape[0]
    cube = (answers * scale).reshape((n, *spec.cells(shape)))
    order = sorted(spec.axes)
    cube = np.moveaxis(cube, list(range(1, 1 + len(spec.axes))), [1 + order.index(a) for a in spec.axes])
    cube = cube.reshape((n, *(cube.shape[1 + order.index(a)] if a in spec.axes else 1 for a in range(len(shape)))))
    matrices = [basis.factor(spec, a)[0] for a, basis in enumerate(bases)]
    index = (slice(None), *(slice(None) if m.shape[0] == shape[a] else slice(0, b.k)
                            for a, (m, b) in enumerate(zip(matrices, bases, strict=True))))
    out[index] += apply_axes(cube, matrices)


def unrotate(cube: np.ndarray, bases: Sequence[AxisBasis]) -> np.ndarray:
    """(n, n_1..n_m) rotated -> (n, C) detailed: x = (⊗U_a) x̃."""
    return apply_axes(cube, [basis.rotation for basis in bases]).reshape(cube.shape[0], -1)


def _block_index(bases: Sequence[AxisBasis], subset: Subset) -> tuple[tuple[slice, ...], list[int]]:
    index = (slice(None), *(slice(b.k, None) if a in subset else slice(0, b.k) for a, b in enumerate(bases)))
    outside = [a for a in range(len(bases)) if a not in subset]
    return index, [0, *(1 + a for a in outside), *(1 + a for a in sorted(subset))]


def gather(cube: np.ndarray, bases: Sequence[AxisBasis], subset: Subset) -> np.ndarray:
    """E_S of a rotated cube as (n, K_S, D_S): group coordinates of the axes outside S, then contrasts of those in S."""
    index, order = _block_index(bases, subset)
    block = cube[index].transpose(order)
    k = prod(b.k for a, b in enumerate(bases) if a not in subset)
    return block.reshape(cube.shape[0], k, -1)


def scatter(cube: np.ndarray, block: np.ndarray, bases: Sequence[AxisBasis], subset: Subset) -> None:
    """The inverse of ``gather``: write (n, K_S, D_S) into E_S of a rotated cube."""
    index, order = _block_index(bases, subset)
    target = cube[index]
    shaped = block.reshape(tuple(target.shape[i] for i in order))
    target[...] = shaped.transpose(np.argsort(order))


def information_block(bases: Sequence[AxisBasis], subset: Subset, specs: Sequence[tuple[QuerySpec, float]]
                      ) -> np.ndarray:
    """Λ(S): the K_S×K_S block of A = Σ_q Q_qᵀQ_q/σ²_q on E_S (⊗_{a∉S} B-blocks × Π_{a∈S} C-scalars)."""
    k = prod(b.k for a, b in enumerate(bases) if a not in subset)
    total = np.zeros((k, k))
    for spec, sigma2 in specs:
        scale = 1 / sigma2
        for a in subset:  # a query that does not keep an axis of S gives E_S nothing: no block to form
            scale *= bases[a].block(spec, a)[1]
        if not scale:
            continue
        term = np.ones((1, 1))
        for a, basis in enumerate(bases):
            if a not in subset:
                term = np.kron(term, basis.block(spec, a)[0])
        total += scale * term
    return total


def pinned_basis(bases: Sequence[AxisBasis], subset: Subset, spec: QuerySpec) -> np.ndarray:
    """An orthonormal basis (K_S, r) of the part of E_S's group space that an exact query fixes (r may be 0)."""
    k = prod(b.k for a, b in enumerate(bases) if a not in subset)
    if any(a not in spec.axes or spec.grouping(a) is not None for a in subset):
        return np.zeros((k, 0))
    basis = np.ones((1, 1))
    for a, axis in enumerate(bases):
        if a not in subset:
            basis = np.kron(basis, axis.range_basis(spec, a))
    return basis


def least_norm_scale(spec: QuerySpec, shape: tuple[int, ...]) -> np.ndarray:
    """(q_cells,) 1/(QQᵀ)_jj: Q⁺c = Qᵀ(c · this), QQᵀ being diagonal (the number of detailed cells per cell)."""
    return 1 / answer(np.ones((1, prod(shape))), shape, spec)[0]


def cell_variance(covariances: Sequence[np.ndarray], subset_list: Sequence[Subset], bases: Sequence[AxisBasis],
                  spec: QuerySpec) -> tuple[np.ndarray, np.ndarray]:
    """Var(Q x̂) per class of query cells (cells whose factors share a column): (n, n_classes), and each query cell's
    class.  Var(cell j) = Σ_S Π_{a∈S} c_a(j_a) · w_S(j)ᵀ Cov_S w_S(j), w_S(j) = ⊗_{a∉S} (B part of column j_a)."""
    shape = tuple(len(b.group) for b in bases)
    parts = [b.classes(spec, a) for a, b in enumerate(bases)]
    grid = tuple(len(p[2]) for p in parts)
    n = covariances[0].shape[0]
    total = np.zeros((n, *grid))
    for cov, subset in zip(covariances, subset_list, strict=True):
        w = np.ones((1, 1))
        c = np.ones(())
        for a, (_, b_part, c_part) in enumerate(parts):
            if a in subset:
                c = np.multiply.outer(c, c_part)
            else:
                w = np.kron(w, b_part)
                c = np.multiply.outer(c, np.ones(len(c_part)))
        if not c.any():
            continue
        broadcast = (n, *(1 if a in subset else g for a, g in enumerate(grid)))  # c carries the axes in S
        total += np.einsum("nkl,jk,jl->nj", cov, w, w).reshape(broadcast) * c
    cells = spec.cells(shape)
    multi = np.unravel_index(np.arange(prod(cells)), cells) if cells else ()
    per_axis = [parts[a][0][multi[spec.axes.index(a)]] if a in spec.axes else 0 for a in range(len(shape))]
    index = np.ravel_multi_index(tuple(np.broadcast_to(i, (prod(cells),)) for i in per_axis), grid)
    return total.reshape(n, -1), index
