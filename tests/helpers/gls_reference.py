"""An independent dense GLS for the tree GLS tests (``postprocess.gls``): the whole stacked design matrix over
the lowest level's cells (x_parent = Σ x_children eliminated), invariants by a null-space parametrisation,
normal equations solved by numpy, covariance = the inverse information.  Small problems only."""

from __future__ import annotations

from math import prod

import numpy as np
import scipy.linalg as la

from censusdp.postprocess.gls import GlsLevel


def random_tree(rng: np.random.Generator, depth: int, most: int = 3) -> list[np.ndarray]:
    """parent arrays per level (root first): 1..most children per node (only children included)."""
    parents, n = [np.zeros(0, dtype=np.int64)], 1
    for _ in range(depth - 1):
        kids = rng.integers(1, most + 1, size=n)
        parents.append(np.repeat(np.arange(n), kids))
        n = int(kids.sum())
    return parents


def aggregation(parents: list[np.ndarray]) -> list[np.ndarray]:
    """G_l (n_l x n_leaves): which leaves lie under each node of level l."""
    g = [np.eye(len(parents[-1]) if len(parents) > 1 else 1)]
    for level in range(len(parents) - 1, 0, -1):
        n_up = int(parents[level].max()) + 1
        up = np.zeros((n_up, len(parents[level])))
        up[parents[level], np.arange(len(parents[level]))] = 1
        g.insert(0, up @ g[0])
    return g


def query_matrix(shape: tuple[int, ...], axes: tuple[int, ...], groups: tuple = ()) -> np.ndarray:
    """The 0/1 matrix (q_cells, C) of a query: cells in C order over ``axes``, a grouped axis by its group."""
    groups = groups or (None,) * len(axes)
    multi = np.unravel_index(np.arange(prod(shape)), shape)
    sizes = [shape[a] if g is None else max(g) + 1 for a, g in zip(axes, groups, strict=True)]
    parts = [multi[a] if g is None else np.asarray(g)[multi[a]] for a, g in zip(axes, groups, strict=True)]
    rows = np.ravel_multi_index(parts, sizes) if axes else np.zeros(prod(shape), dtype=np.int64)
    matrix = np.zeros((prod(sizes), prod(shape)))
    matrix[rows, np.arange(prod(shape))] = 1
    return matrix


def dense_gls(g: list[np.ndarray], levels: list[GlsLevel], shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(θ, covariance) of the lowest level's cells (n_leaves · C)."""
    rows, ys, ws, e_rows, cs = [], [], [], [], []
    for gl, level in zip(g, levels, strict=True):
        for q in level.queries:
            rows.append(np.kron(gl, query_matrix(shape, q.axes, q.groups)))
            ys.append(q.noisy.ravel())
            ws.append(np.full(q.noisy.size, 1 / q.sigma2))
        for inv in level.invariants:
            e_rows.append(np.kron(gl, query_matrix(shape, inv.axes, inv.groups)))
            cs.append(inv.values.ravel().astype(float))
    x, y, w = np.vstack(rows), np.concatenate(ys), np.concatenate(ws)
    n = x.shape[1]
    if e_rows:
        e, c = np.vstack(e_rows), np.concatenate(cs)
        theta0 = np.linalg.lstsq(e, c, rcond=None)[0]
        z = la.null_space(e)
    else:
        theta0, z = np.zeros(n), np.eye(n)
    normal = z.T @ (x.T * w) @ x @ z
    phi = np.linalg.solve(normal, z.T @ (x.T * w) @ (y - x @ theta0))
    return theta0 + z @ phi, z @ np.linalg.inv(normal) @ z.T


def dense_query(gl: np.ndarray, theta: np.ndarray, cov: np.ndarray, shape: tuple[int, ...], axes: tuple[int, ...],
                groups: tuple = ()) -> tuple[np.ndarray, np.ndarray]:
    """Estimate and per-cell variance (n_l, q_cells) of a query at the level aggregated by ``gl``."""
    m = np.kron(gl, query_matrix(shape, axes, groups))
    variance = np.einsum("ij,jk,ik->i", m, cov, m)
    return (m @ theta).reshape(gl.shape[0], -1), variance.reshape(gl.shape[0], -1)
